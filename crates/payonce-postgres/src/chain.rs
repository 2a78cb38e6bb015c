//! The chain digest every batch of a ledger's log carries, as the file log
//! computes it (`payonce_log::chain` once that lands; this module has its
//! formula and its public shape, so the backend switches to it by one
//! `use`):
//!
//! ```text
//! digest(batch) = SHA-256( prev_digest (32 bytes)
//!                          || first_seq (u64 LE) || count (u32 LE)
//!                          || for each record: len (u32 LE) || payload )
//! ```
//!
//! The genesis `prev_digest` is 32 zero bytes. A batch is what one
//! committed transaction wrote. A head is `(seq, digest)`: the seq of a
//! batch's last record and that batch's digest, printed `SEQ:DIGEST`.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

/// A batch's SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Digest(pub [u8; 32]);

/// The last record of a batch and the batch's digest: what pins a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Head {
    /// The sequence number of the batch's last record; 0 before any.
    pub seq: u64,
    /// The batch's digest; zeros before any.
    pub digest: Digest,
}

/// Why a text is not a digest or a head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// What was wrong.
    pub detail: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for ParseError {}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl FromStr for Digest {
    type Err = ParseError;
    fn from_str(text: &str) -> Result<Self, ParseError> {
        let refuse = || ParseError {
            detail: format!("a digest is 64 lower-case hex digits, not {text:?}"),
        };
        if text.len() != 64 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(refuse());
        }
        let mut digest = [0u8; 32];
        for (index, byte) in digest.iter_mut().enumerate() {
            let pair = text.get(index * 2..index * 2 + 2).ok_or_else(refuse)?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| refuse())?;
        }
        Ok(Digest(digest))
    }
}

impl fmt::Display for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seq, self.digest)
    }
}

impl FromStr for Head {
    type Err = ParseError;
    fn from_str(text: &str) -> Result<Self, ParseError> {
        let (seq, digest) = text.split_once(':').ok_or_else(|| ParseError {
            detail: format!("a head is SEQ:DIGEST, not {text:?}"),
        })?;
        let seq = seq.parse().map_err(|_| ParseError {
            detail: format!("a head's SEQ is a sequence number, not {seq:?}"),
        })?;
        Ok(Head {
            seq,
            digest: digest.parse()?,
        })
    }
}

/// The digest of the batch of `payloads` whose first record is `first_seq`,
/// chained to the batch before it, whose digest is `prev`.
///
/// # Panics
/// If a batch holds more than `u32::MAX` records, or a record more than
/// `u32::MAX` bytes: far past what any store writes in one batch.
pub fn batch_digest<'a>(
    prev: &Digest,
    first_seq: u64,
    payloads: impl IntoIterator<Item = &'a [u8]>,
) -> Digest {
    let payloads: Vec<&[u8]> = payloads.into_iter().collect();
    let count = u32::try_from(payloads.len())
        .unwrap_or_else(|_| panic!("a batch of {} records", payloads.len()));
    let mut hasher = Sha256::new();
    hasher.update(prev.0);
    hasher.update(first_seq.to_le_bytes());
    hasher.update(count.to_le_bytes());
    for payload in payloads {
        let len = u32::try_from(payload.len())
            .unwrap_or_else(|_| panic!("a record of {} bytes", payload.len()));
        hasher.update(len.to_le_bytes());
        hasher.update(payload);
    }
    Digest(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_the_documented_formula_and_prints_as_it_parses() {
        // Guards against this copy drifting from the formula the file log uses.
        let first = batch_digest(&Digest::default(), 1, [b"ab".as_slice(), b"c".as_slice()]);
        let mut bytes = vec![0u8; 32];
        bytes.extend(1u64.to_le_bytes());
        bytes.extend(2u32.to_le_bytes());
        bytes.extend(2u32.to_le_bytes());
        bytes.extend(b"ab");
        bytes.extend(1u32.to_le_bytes());
        bytes.extend(b"c");
        assert_eq!(first.0, <[u8; 32]>::from(Sha256::digest(&bytes)));
        let head = Head {
            seq: 2,
            digest: first,
        };
        assert_eq!(head.to_string().parse::<Head>(), Ok(head));
        assert!("2:AB".parse::<Head>().is_err());
        let second = batch_digest(&first, 3, [b"d".as_slice()]);
        assert_ne!(
            second,
            batch_digest(&Digest::default(), 3, [b"d".as_slice()])
        );
    }
}
