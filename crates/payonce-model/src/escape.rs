//! Untrusted text made safe to print. Keys, destinations, notes, rail errors
//! and references come from clients, rails and operators; printed raw, a
//! control character stored in a log could move the cursor, clear the
//! screen or rewrite what an auditor reads.

use std::borrow::Cow;
use std::fmt;
use std::path::Path;

/// Most characters of a value a user gave (a key, an id, a note, an
/// operator's name, a time) that an error or a report echoes back; a
/// longer one is echoed as its first characters and its length in bytes,
/// so a hostile argument cannot flood a terminal or a log collector.
pub const ECHO_LEN_MAX: usize = 64;

/// Most characters of a path echoed back. Longer than [`ECHO_LEN_MAX`]
/// because a path's meaning is at its end (a segment file's name after its
/// directory), and real paths fit; only a hostile one is cut.
pub const ECHO_PATH_LEN_MAX: usize = 256;

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

/// `text` escaped as [`escape`] does and bounded: at most `len_max`
/// characters of it, then, if that was not all, `… (N bytes)` with the
/// length of the whole text. An escape sequence is never cut in half.
pub fn bounded(text: &str, len_max: usize) -> Cow<'_, str> {
    let escaped = escape(text);
    if escaped.chars().count() <= len_max {
        return escaped;
    }
    let mut shown = String::with_capacity(len_max + 24);
    let mut chars = 0;
    for c in text.chars() {
        let piece: Cow<'_, str> = if needs_escape(c) {
            Cow::Owned(c.escape_default().collect())
        } else {
            Cow::Owned(c.to_string())
        };
        chars += piece.chars().count();
        if chars > len_max {
            break;
        }
        shown.push_str(&piece);
    }
    shown.push_str(&format!("… ({} bytes)", text.len()));
    Cow::Owned(shown)
}

/// `text` escaped line by line, with every occurrence of each of `values`
/// longer than `len_max` replaced by its bounded echo: for a message (a
/// library's, or clap's) that quotes what the user gave.
pub fn bounded_within(text: &str, values: &[&str], len_max: usize) -> String {
    let mut text = text.to_owned();
    for value in values {
        if value.chars().count() > len_max && text.contains(value) {
            text = text.replace(value, &bounded(value, len_max));
        }
    }
    text.split('\n')
        .map(|line| escape(line).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Displays a value a user gave, escaped and bounded by [`ECHO_LEN_MAX`].
#[derive(Debug, Clone, Copy)]
pub struct Echo<'a>(pub &'a str);

impl fmt::Display for Echo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&bounded(self.0, ECHO_LEN_MAX))
    }
}

/// Displays a path, escaped and bounded by [`ECHO_PATH_LEN_MAX`].
#[derive(Debug, Clone, Copy)]
pub struct EchoPath<'a>(pub &'a Path);

impl fmt::Display for EchoPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&bounded(&self.0.display().to_string(), ECHO_PATH_LEN_MAX))
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

    // Guards against a hostile value echoed whole, or an escape cut in half.
    #[test]
    fn long_values_are_echoed_as_a_prefix_and_their_length() {
        assert_eq!(bounded("short", 8), "short");
        assert_eq!(bounded(&"k".repeat(10_000), 4), "kkkk… (10000 bytes)");
        assert_eq!(bounded("ab\u{1b}cdef", 7), "ab… (7 bytes)");
        assert_eq!(
            bounded_within("key 'xxxxxxxx' is bad\u{7}", &["xxxxxxxx"], 3),
            "key 'xxx… (8 bytes)' is bad\\u{7}"
        );
    }

    // Guards against mangling ordinary text, accents and quotes included.
    #[test]
    fn ordinary_text_is_borrowed_unchanged() {
        let text = "don't \"panic\": 25.00 USDC to 0xabc, é, 日本";
        assert!(matches!(escape(text), Cow::Borrowed(t) if t == text));
    }
}
