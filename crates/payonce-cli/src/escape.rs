//! Untrusted text made safe to print. Keys, destinations, notes, rail errors
//! and references come from clients, rails and operators; printed raw, a
//! control character stored in a log could move the cursor, clear the
//! screen or rewrite what an auditor reads.

use std::borrow::Cow;
use std::fmt;

/// Whether `c` must not reach a terminal as itself: control characters
/// (Unicode category Cc: C0, DEL, C1) and the invisible formatting
/// characters that reorder or hide text (bidirectional overrides and
/// isolates, zero-width characters, the byte order mark).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}'
        )
}

/// `text` with every control or invisible formatting character written as
/// a Rust escape (`\u{1b}`, `\n`, `\t`); everything else as is. Borrowed
/// when nothing needed escaping.
///
/// Backslashes are left alone, so the text `\u{1b}` and an escaped ESC print
/// the same; what matters is that neither reaches the terminal as ESC.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs_escape(c) {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

/// Displays its text escaped: `format!("{}", Escaped(key))`.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards against a stored control sequence reaching the terminal.
    #[test]
    fn control_characters_are_written_as_escapes() {
        assert_eq!(escape("req\u{1b}[2J-1"), "req\\u{1b}[2J-1");
        assert_eq!(escape("a\nb\tc\r"), "a\\nb\\tc\\r");
        assert_eq!(escape("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(escape("\u{7f}"), "\\u{7f}");
    }

    // Guards against text that reorders itself on screen (a bidi override).
    #[test]
    fn invisible_formatting_characters_are_written_as_escapes() {
        assert_eq!(escape("0xabc\u{202E}fed"), "0xabc\\u{202e}fed");
        assert_eq!(escape("a\u{200B}b"), "a\\u{200b}b");
    }

    // Guards against mangling ordinary text, accents and quotes included.
    #[test]
    fn ordinary_text_is_borrowed_unchanged() {
        let text = "don't \"panic\": 25.00 USDC to 0xabc, é, 日本";
        assert!(matches!(escape(text), Cow::Borrowed(t) if t == text));
    }
}
