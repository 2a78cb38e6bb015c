//! The one place values become bytes and back.
//!
//! Everything payonce stores goes through [`encode`] and [`decode`], so the
//! binary format can change in one place, under a new [`CODEC_VERSION`].
//! Integers are fixed-width little-endian; decoding refuses more than
//! [`ENCODED_LEN_MAX`] bytes of claimed allocations and any trailing bytes.

use std::fmt;

use bincode::config::{Configuration, Fixint, Limit, LittleEndian};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::amount::Amount;
use crate::text::{TextView, ValidText};

/// Version of the byte format produced by [`encode`]: bincode 2.0.1, serde
/// data model, fixed-width little-endian integers. Stored by callers beside
/// what they encode, so a future format can be told apart.
pub const CODEC_VERSION: u16 = 1;

/// Most bytes one encoded value may have, and the most a decoder will agree
/// to allocate for one, whatever lengths the input claims.
pub const ENCODED_LEN_MAX: usize = 256 * 1024;

type Config = Configuration<LittleEndian, Fixint, Limit<ENCODED_LEN_MAX>>;

fn config() -> Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<ENCODED_LEN_MAX>()
}

/// Why encoding or decoding failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodecError {
    /// The value could not be encoded, or encodes to more than
    /// [`ENCODED_LEN_MAX`] bytes.
    Encode {
        /// What the encoder reported.
        detail: String,
    },
    /// The bytes are not a valid encoding of the expected type, claim more
    /// than [`ENCODED_LEN_MAX`] bytes, or hold a value its type refuses.
    Decode {
        /// What the decoder reported.
        detail: String,
    },
    /// The bytes hold a valid value followed by bytes that belong to nothing.
    TrailingBytes {
        /// Bytes the value used.
        used: usize,
        /// Bytes given.
        len: usize,
    },
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Encode { detail } => write!(f, "cannot encode: {detail}"),
            CodecError::Decode { detail } => write!(f, "cannot decode: {detail}"),
            CodecError::TrailingBytes { used, len } => {
                write!(
                    f,
                    "cannot decode: {} trailing bytes after a {used}-byte value",
                    len - used
                )
            }
        }
    }
}

impl std::error::Error for CodecError {}

/// Encodes `value` in the payonce binary format.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    let bytes =
        bincode::serde::encode_to_vec(value, config()).map_err(|error| CodecError::Encode {
            detail: error.to_string(),
        })?;
    if bytes.len() > ENCODED_LEN_MAX {
        return Err(CodecError::Encode {
            detail: format!("{} bytes; at most {ENCODED_LEN_MAX}", bytes.len()),
        });
    }
    Ok(bytes)
}

/// Decodes a value written by [`encode`]. Every byte must belong to it.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    decode_borrowed(bytes)
}

/// [`decode`], for a value that may borrow text from `bytes` (a
/// [`TextView`], a [`WithdrawalView`](crate::WithdrawalView)):
/// no allocation for the text it borrows.
#[inline]
pub fn decode_borrowed<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, CodecError> {
    let (value, used) =
        bincode::serde::borrow_decode_from_slice(bytes, config()).map_err(|error| {
            CodecError::Decode {
                detail: error.to_string(),
            }
        })?;
    if used != bytes.len() {
        return Err(CodecError::TrailingBytes {
            used,
            len: bytes.len(),
        });
    }
    Ok(value)
}

/// Reads a value of the payonce binary format one primitive at a time,
/// borrowing its text: for decoders on hot paths, where serde's generality
/// costs more than the reading. The primitives are those [`encode`] writes
/// (fixed-width little-endian integers, lengths as `u64`, an option as a
/// `0`/`1` byte, an enum variant as a `u32`); the caller reads the fields in
/// the order serde would. Anything else is a [`CodecError::Decode`].
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Bytes from `ascii_at` on already known to be ASCII, as text: a
    /// record's strings mostly follow one another, apart only by lengths
    /// and tags that are ASCII bytes too, so a few runs hold them all and
    /// each string is a slice of one.
    ascii: &'a str,
    ascii_at: usize,
}

/// The length of the ASCII prefix of `bytes`, read eight bytes at a time.
#[inline]
fn ascii_prefix_len(bytes: &[u8]) -> usize {
    let mut words = bytes.chunks_exact(8);
    let mut len = 0;
    for chunk in &mut words {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let high = u64::from_le_bytes(word) & 0x8080_8080_8080_8080;
        if high != 0 {
            // The first byte with its top bit set ends the prefix.
            return len + (high.trailing_zeros() / 8) as usize;
        }
        len += 8;
    }
    len + words
        .remainder()
        .iter()
        .take_while(|b| b.is_ascii())
        .count()
}

fn malformed(what: &str, at: usize) -> CodecError {
    CodecError::Decode {
        detail: format!("{what} at byte {at}"),
    }
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader {
            bytes,
            at: 0,
            ascii: "",
            ascii_at: 0,
        }
    }

    /// The next `len` bytes.
    #[inline]
    fn take(&mut self, len: usize) -> Result<&'a [u8], CodecError> {
        let end = self
            .at
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| malformed("unexpected end", self.at))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut array = [0; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    /// A `u8`.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.array::<1>()?[0])
    }

    /// A `u16`.
    #[inline]
    pub fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// A `u32`; also an enum's variant.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A `u64`.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A `u128`.
    #[inline]
    pub fn u128(&mut self) -> Result<u128, CodecError> {
        Ok(u128::from_le_bytes(self.array()?))
    }

    /// A byte that must be `0` or `1`, as `what`.
    #[inline]
    fn zero_or_one(&mut self, what: &str) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(malformed(&format!("{what} other than 0 or 1"), self.at - 1)),
        }
    }

    /// A `bool`: `0` or `1`.
    #[inline]
    pub fn bool(&mut self) -> Result<bool, CodecError> {
        self.zero_or_one("a boolean")
    }

    /// Whether an option holds a value: `0` or `1`.
    #[inline]
    pub fn is_some(&mut self) -> Result<bool, CodecError> {
        self.zero_or_one("an option tag")
    }

    /// The length of a sequence.
    #[inline]
    pub fn seq_len(&mut self) -> Result<u64, CodecError> {
        self.u64()
    }

    /// A string, borrowed.
    #[inline]
    pub fn str(&mut self) -> Result<&'a str, CodecError> {
        let at = self.at;
        let len = usize::try_from(self.u64()?).map_err(|_| malformed("a string too long", at))?;
        let start = self.at;
        let bytes = self.take(len)?;
        let in_run = |ascii: &'a str, ascii_at: usize| {
            let from = start.checked_sub(ascii_at)?;
            ascii.get(from..from.checked_add(len)?)
        };
        if let Some(text) = in_run(self.ascii, self.ascii_at) {
            return Ok(text);
        }
        // A new run from this string on: one UTF-8 check for the strings
        // it holds, where each alone was a call whose result the processor
        // waited for.
        let run = ascii_prefix_len(&self.bytes[start..]);
        if run >= len
            && let Ok(ascii) = std::str::from_utf8(&self.bytes[start..start + run])
        {
            self.ascii = ascii;
            self.ascii_at = start;
            if let Some(text) = in_run(ascii, start) {
                return Ok(text);
            }
        }
        std::str::from_utf8(bytes).map_err(|_| malformed("a string not UTF-8", at))
    }

    /// A string checked under `T`'s rules, as [`TextView`] deserialises it.
    #[inline]
    pub fn text<T: ValidText>(&mut self) -> Result<TextView<'a, T>, CodecError> {
        let at = self.at;
        TextView::new(self.str()?).map_err(|error| malformed(&error.to_string(), at))
    }

    /// An [`Amount`], as it deserialises from a binary format.
    #[inline]
    pub fn amount(&mut self) -> Result<Amount, CodecError> {
        let at = self.at;
        let mantissa = self.u128()?;
        let scale = self.u8()?;
        Amount::from_parts(mantissa, scale).map_err(|error| malformed(&error.to_string(), at))
    }

    /// Refuses bytes left over, and more than [`ENCODED_LEN_MAX`] bytes in
    /// all, as [`decode`] does: a value that long would claim more than the
    /// limit or leave bytes over. (A request key is trimmed after it is
    /// read, so a key padded with spaces passes its own limit.) A value is
    /// read only once this accepts it.
    pub fn finish(self) -> Result<(), CodecError> {
        if self.bytes.len() > ENCODED_LEN_MAX {
            return Err(CodecError::Decode {
                detail: format!("{} bytes; at most {ENCODED_LEN_MAX}", self.bytes.len()),
            });
        }
        if self.at != self.bytes.len() {
            return Err(CodecError::TrailingBytes {
                used: self.at,
                len: self.bytes.len(),
            });
        }
        Ok(())
    }
}
