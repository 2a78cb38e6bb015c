//! The one place values become bytes and back.
//!
//! Everything payonce stores goes through [`encode`] and [`decode`], so the
//! binary format can change in one place, under a new [`CODEC_VERSION`].
//! This module is the only caller of bincode (2.0.1, pinned exactly).
//! Integers are fixed-width little-endian; decoding refuses more than
//! [`ENCODED_LEN_MAX`] bytes of claimed allocations and any trailing bytes.
//!
//! [`Fields`] reads the same bytes field by field without serde, for
//! replay's most common events; where it cannot read something exactly
//! as [`decode_borrowed`] would, it answers `None` and leaves the bytes to
//! it.

mod fields;

use std::fmt;

use bincode::config::{Configuration, Fixint, Limit, LittleEndian};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Version of the byte format produced by [`encode`]: bincode 2.0.1, serde
/// data model, fixed-width little-endian integers. Stored by callers beside
/// what they encode, so a future format can be told apart.
pub const CODEC_VERSION: u16 = 1;

/// Most bytes one encoded value may have, and the most a decoder will agree
/// to allocate for one, whatever lengths the input claims.
pub const ENCODED_LEN_MAX: usize = 256 * 1024;

pub use self::fields::Fields;

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
/// [`TextView`](crate::TextView), a [`WithdrawalView`](crate::WithdrawalView)):
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
