//! A 32-byte digest as 64 lowercase hex digits, both ways: the one codec
//! for every SHA-256 payonce prints or reads (a log's chain digest, a
//! token written as its digest). Uppercase digits are refused, so a digest
//! has one spelling and two spellings never name one digest.

use std::fmt;

/// Bytes of a digest.
pub const DIGEST_LEN: usize = 32;

/// Hex digits of a digest: two per byte.
pub const DIGEST_HEX_LEN: usize = 2 * DIGEST_LEN;

/// Why a text is not 64 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HexError {
    /// The text is not [`DIGEST_HEX_LEN`] bytes long.
    Length {
        /// Its length in bytes.
        len: usize,
        /// The length a digest has ([`DIGEST_HEX_LEN`]).
        expected: usize,
    },
    /// A byte of the text is not a lowercase hex digit (`0-9`, `a-f`).
    Digit {
        /// Its index in the text.
        at: usize,
    },
}

impl fmt::Display for HexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HexError::Length { len, expected } => write!(
                f,
                "the digest has {len} characters; a digest is {expected} lowercase hex digits"
            ),
            HexError::Digit { at } => write!(
                f,
                "character {at} of the digest is not a lowercase hex digit (0-9, a-f)"
            ),
        }
    }
}

impl std::error::Error for HexError {}

/// The 32 bytes that `text`, 64 lowercase hex digits, spells.
pub fn parse_digest(text: &str) -> Result<[u8; DIGEST_LEN], HexError> {
    let digits = text.as_bytes();
    if digits.len() != DIGEST_HEX_LEN {
        return Err(HexError::Length {
            len: digits.len(),
            expected: DIGEST_HEX_LEN,
        });
    }
    let mut digest = [0u8; DIGEST_LEN];
    for (at, &digit) in digits.iter().enumerate() {
        let nibble = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            _ => return Err(HexError::Digit { at }),
        };
        digest[at / 2] |= nibble << if at % 2 == 0 { 4 } else { 0 };
    }
    Ok(digest)
}

/// A digest that prints as its 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DigestHex<'a>(pub &'a [u8; DIGEST_LEN]);

impl fmt::Display for DigestHex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards against a digest that does not read back as itself, or a
    // second spelling (uppercase, a sign, a space) taken for one.
    #[test]
    fn a_digest_round_trips_and_only_lowercase_hex_is_read() {
        let mut digest = [0u8; DIGEST_LEN];
        for (byte, value) in digest.iter_mut().zip(0u8..) {
            *byte = value.wrapping_mul(37);
        }
        let text = DigestHex(&digest).to_string();
        assert_eq!(text.len(), DIGEST_HEX_LEN);
        assert_eq!(parse_digest(&text), Ok(digest));
        assert_eq!(
            DigestHex(&[0xab; DIGEST_LEN]).to_string(),
            "ab".repeat(DIGEST_LEN)
        );
        assert_eq!(
            parse_digest(&text[1..]),
            Err(HexError::Length {
                len: 63,
                expected: 64
            })
        );
        for (at, bad) in [(0, 'A'), (5, 'g'), (63, ' '), (10, '+')] {
            let mut spelled: Vec<char> = "0".repeat(DIGEST_HEX_LEN).chars().collect();
            spelled[at] = bad;
            let spelled: String = spelled.into_iter().collect();
            assert_eq!(parse_digest(&spelled), Err(HexError::Digit { at }), "{bad}");
        }
        // A multi-byte character counts in bytes, and is refused by place.
        let wide = format!("é{}", "0".repeat(DIGEST_HEX_LEN - 2));
        assert_eq!(parse_digest(&wide), Err(HexError::Digit { at: 0 }));
    }
}
