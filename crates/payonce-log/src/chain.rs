//! The chain digest: every flushed batch of records is hashed with SHA-256
//! together with the digest of the batch before it, so a log's head names
//! every record before it. Edit, remove, insert or reorder any earlier
//! record, recomputing every checksum, and the head no longer matches. The
//! scheme is shared with the ledger's other backends; docs/log-format.md,
//! "The chain digest", has it byte by byte.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

/// Bytes of a [`Digest`].
pub const DIGEST_LEN: usize = 32;

/// A SHA-256 chain digest. Prints, and parses, as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Digest(pub [u8; DIGEST_LEN]);

impl Digest {
    /// The digest before the first batch of a log: 32 zero bytes.
    pub const GENESIS: Digest = Digest([0; DIGEST_LEN]);
}

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

/// Why a text is not a [`Digest`] or a [`Head`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeadParseError {
    /// The digest is not 64 hex digits.
    DigestLength {
        /// The characters found.
        len: usize,
    },
    /// A character of the digest is not a lowercase hex digit.
    DigestDigit {
        /// Its index in the digest.
        at: usize,
    },
    /// The text has no `:` between the sequence number and the digest.
    NoColon,
    /// The sequence number is not a decimal `u64`.
    Seq {
        /// What stood before the colon (at most [`HEAD_TEXT_ECHO_MAX`]
        /// characters of it).
        found: String,
    },
}

/// Most characters of a bad sequence number a [`HeadParseError`] repeats.
pub const HEAD_TEXT_ECHO_MAX: usize = 24;

impl fmt::Display for HeadParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeadParseError::DigestLength { len } => write!(
                f,
                "the digest has {len} characters; a digest is {} lowercase hex digits",
                DIGEST_LEN * 2
            ),
            HeadParseError::DigestDigit { at } => write!(
                f,
                "character {at} of the digest is not a lowercase hex digit (0-9, a-f)"
            ),
            HeadParseError::NoColon => f.write_str("a head is SEQ:DIGEST; there is no ':'"),
            HeadParseError::Seq { found } => write!(
                f,
                "the sequence number {found:?} is not a whole number from 0 to {}",
                u64::MAX
            ),
        }
    }
}

impl std::error::Error for HeadParseError {}

impl FromStr for Digest {
    type Err = HeadParseError;

    fn from_str(text: &str) -> Result<Digest, HeadParseError> {
        let bytes = text.as_bytes();
        if bytes.len() != DIGEST_LEN * 2 {
            return Err(HeadParseError::DigestLength { len: text.len() });
        }
        let mut digest = [0u8; DIGEST_LEN];
        for (at, &char) in bytes.iter().enumerate() {
            let nibble = match char {
                b'0'..=b'9' => char - b'0',
                b'a'..=b'f' => char - b'a' + 10,
                _ => return Err(HeadParseError::DigestDigit { at }),
            };
            digest[at / 2] |= nibble << if at % 2 == 0 { 4 } else { 0 };
        }
        Ok(Digest(digest))
    }
}

/// A head of a log: the sequence number of a batch's last record and that
/// batch's digest. Prints, and parses, as `SEQ:DIGEST`. The head of a log
/// without records is `0:` and the [`Digest::GENESIS`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Head {
    /// The last record's sequence number.
    pub seq: u64,
    /// The digest of the batch that ends with it.
    pub digest: Digest,
}

impl Head {
    /// The head of a log without records.
    pub const GENESIS: Head = Head {
        seq: 0,
        digest: Digest::GENESIS,
    };
}

impl fmt::Display for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seq, self.digest)
    }
}

impl fmt::Debug for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Head({self})")
    }
}

impl FromStr for Head {
    type Err = HeadParseError;

    fn from_str(text: &str) -> Result<Head, HeadParseError> {
        let (seq, digest) = text.split_once(':').ok_or(HeadParseError::NoColon)?;
        let seq = if seq.bytes().all(|byte| byte.is_ascii_digit()) {
            seq.parse().ok()
        } else {
            None
        };
        let Some(seq) = seq else {
            let found: String = text
                .split(':')
                .next()
                .unwrap_or_default()
                .chars()
                .take(HEAD_TEXT_ECHO_MAX)
                .collect();
            return Err(HeadParseError::Seq { found });
        };
        Ok(Head {
            seq,
            digest: digest.parse()?,
        })
    }
}

/// The digest of one batch: SHA-256 over `prev` (the digest of the batch
/// before, [`Digest::GENESIS`] for the first), `first_seq` (u64 LE), the
/// number of records (u32 LE), then each record's length (u32 LE) and
/// payload, in order.
///
/// # Panics
///
/// If there are more than `u32::MAX` payloads, or one is longer than
/// `u32::MAX` bytes: a batch is bounded far below both.
pub fn batch_digest<'a>(
    prev: &Digest,
    first_seq: u64,
    payloads: impl IntoIterator<Item = &'a [u8]>,
) -> Digest {
    let payloads: Vec<&[u8]> = payloads.into_iter().collect();
    let count = u32::try_from(payloads.len()).unwrap_or(u32::MAX);
    assert!(payloads.len() <= u32::MAX as usize, "a batch is bounded");
    let mut hasher = BatchHasher::new(prev, first_seq, count);
    for payload in payloads {
        hasher.record(payload);
    }
    hasher.finish()
}

/// [`batch_digest`] fed one record at a time, for a caller that knows the
/// count before the records: the writer, the scan, and a reader of a
/// shared log that streams its events, which need not keep a batch's
/// records until the batch is whole.
#[derive(Clone)]
pub struct BatchHasher {
    sha: Sha256,
    count: u32,
    seen: u32,
}

impl fmt::Debug for BatchHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchHasher")
            .field("count", &self.count)
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

impl BatchHasher {
    /// Starts the digest of the batch of `count` records from `first_seq`
    /// on, after the batch whose digest is `prev`.
    pub fn new(prev: &Digest, first_seq: u64, count: u32) -> BatchHasher {
        let mut sha = Sha256::new();
        sha.update(prev.0);
        sha.update(first_seq.to_le_bytes());
        sha.update(count.to_le_bytes());
        BatchHasher {
            sha,
            count,
            seen: 0,
        }
    }

    /// Takes in the batch's next record.
    ///
    /// # Panics
    ///
    /// If `payload` is longer than `u32::MAX` bytes.
    #[inline]
    pub fn record(&mut self, payload: &[u8]) {
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        assert!(payload.len() <= u32::MAX as usize, "a record is bounded");
        self.sha.update(len.to_le_bytes());
        self.sha.update(payload);
        self.seen += 1;
    }

    /// The batch's digest.
    ///
    /// # Panics
    ///
    /// Unless exactly the count given to [`BatchHasher::new`] of records
    /// were taken in.
    pub fn finish(self) -> Digest {
        assert_eq!(self.seen, self.count, "the count hashed is the records'");
        Digest(self.sha.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_digest_is_sha256_over_the_documented_bytes() {
        // Guards against the file log and other backends hashing different bytes for the same batch.
        let prev = Digest([7; 32]);
        let mut bytes = prev.0.to_vec();
        bytes.extend_from_slice(&42u64.to_le_bytes());
        bytes.extend_from_slice(&2u32.to_le_bytes());
        for payload in [&b"ab"[..], b""] {
            bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            bytes.extend_from_slice(payload);
        }
        let expected = Digest(Sha256::digest(&bytes).into());
        assert_eq!(batch_digest(&prev, 42, [&b"ab"[..], b""]), expected);
    }

    #[test]
    fn a_known_batch_has_a_known_digest() {
        // Guards against the scheme changing unnoticed: this value is what every backend must compute.
        let digest = batch_digest(&Digest::GENESIS, 1, [&b"hello"[..]]);
        // SHA-256 of 32 zero bytes, 1u64 LE, 1u32 LE, 5u32 LE, "hello".
        let expected = "690b20430bee54a9d415fdf82b59cccf53f43d598ee70ef95953361e37bd80b8";
        assert_eq!(digest.to_string(), expected);
        assert_eq!(expected.parse::<Digest>().unwrap(), digest);
    }

    #[test]
    fn a_head_prints_and_parses_as_seq_colon_digest() {
        // Guards against `payonce head` printing what `--expect-head` cannot read back.
        let head = Head {
            seq: 1042,
            digest: Digest([0x9f; 32]),
        };
        let text = head.to_string();
        assert_eq!(text, format!("1042:{}", "9f".repeat(32)));
        assert_eq!(text.parse::<Head>().unwrap(), head);
        assert_eq!(Head::GENESIS.to_string(), format!("0:{}", "0".repeat(64)));
    }

    #[test]
    fn a_malformed_head_is_refused_saying_what_is_wrong() {
        // Guards against a mistyped expected head being read as some other head.
        let digest = "9f".repeat(32);
        assert_eq!("1042".parse::<Head>(), Err(HeadParseError::NoColon));
        assert_eq!(
            format!("x1:{digest}").parse::<Head>(),
            Err(HeadParseError::Seq {
                found: "x1".to_owned()
            })
        );
        assert_eq!(
            format!("-1:{digest}").parse::<Head>(),
            Err(HeadParseError::Seq {
                found: "-1".to_owned()
            })
        );
        assert_eq!(
            "1:abc".parse::<Head>(),
            Err(HeadParseError::DigestLength { len: 3 })
        );
        let upper = "9F".repeat(32);
        assert_eq!(
            format!("1:{upper}").parse::<Head>(),
            Err(HeadParseError::DigestDigit { at: 1 })
        );
    }
}
