//! The key=value form: `host=a,b port=5432 sslmode='verify-full'`.

use super::error::ConninfoError;

/// Reads `key = value` pairs separated by whitespace; a value may be
/// single-quoted, and a backslash escapes the character after it.
pub(super) fn parse(text: &str) -> Result<Vec<(String, String)>, ConninfoError> {
    let mut pairs = Vec::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    let skip_space = |at: &mut usize| {
        while *at < bytes.len() && bytes[*at].is_ascii_whitespace() {
            *at += 1;
        }
    };
    loop {
        skip_space(&mut at);
        if at == bytes.len() {
            return Ok(pairs);
        }
        let key_start = at;
        while at < bytes.len() && bytes[at] != b'=' && !bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        let key = &text[key_start..at];
        skip_space(&mut at);
        if at == bytes.len() || bytes[at] != b'=' {
            return Err(ConninfoError::Syntax {
                offset: at,
                expected: "`=` after an option's name",
            });
        }
        at += 1;
        skip_space(&mut at);
        let value = read_value(text, &mut at)?;
        pairs.push((key.to_owned(), value));
    }
}

/// A value at `at`: quoted, or up to the next whitespace.
fn read_value(text: &str, at: &mut usize) -> Result<String, ConninfoError> {
    let mut value = String::new();
    let mut chars = text[*at..].char_indices();
    let quoted = text[*at..].starts_with('\'');
    if quoted {
        chars.next();
    }
    while let Some((offset, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, escaped)) => value.push(escaped),
                None => break,
            },
            '\'' if quoted => {
                *at += offset + 1;
                return Ok(value);
            }
            c if c.is_whitespace() && !quoted => {
                *at += offset;
                return Ok(value);
            }
            c => value.push(c),
        }
    }
    if quoted {
        return Err(ConninfoError::Syntax {
            offset: text.len(),
            expected: "a closing `'`",
        });
    }
    *at = text.len();
    Ok(value)
}
