//! Why a tokens file was refused. No variant holds a token, and no message
//! quotes one.

use std::path::PathBuf;

use payonce_model::escape::{Echo, EchoPath, Escaped};

use super::{DIGEST_PREFIX, TOKEN_LEN_MAX, TOKEN_LEN_MIN, TOKENS_FILE_LEN_MAX, TOKENS_MAX};
use crate::scope::ScopeError;

/// Why the tokens file was refused.
#[derive(Debug)]
#[non_exhaustive]
pub enum TokensError {
    /// It could not be read.
    Read {
        /// The file.
        file: PathBuf,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// It is larger than [`TOKENS_FILE_LEN_MAX`].
    TooLarge {
        /// The file.
        file: PathBuf,
        /// Its length in bytes.
        len: u64,
    },
    /// It is not TOML with `[clients]` and `[operators]` tables of strings,
    /// or it has other tables or keys.
    Syntax {
        /// The file.
        file: PathBuf,
        /// The parser's message, with any quoted value left out: serde
        /// quotes a value of the wrong type, which may be a token.
        message: String,
    },
    /// A name breaks the name rules.
    Name {
        /// The file.
        file: PathBuf,
        /// Which rule.
        error: ScopeError,
    },
    /// A token in clear is shorter than [`TOKEN_LEN_MIN`], longer than
    /// [`TOKEN_LEN_MAX`], or holds a byte other than printable ASCII
    /// without spaces.
    BadToken {
        /// The file.
        file: PathBuf,
        /// Whose token.
        name: String,
    },
    /// An entry starts with [`DIGEST_PREFIX`] but what follows is not 64
    /// lowercase hex digits.
    BadDigest {
        /// The file.
        file: PathBuf,
        /// Whose entry.
        name: String,
    },
    /// Two entries share a name or a token (in clear or as a digest: the
    /// digests are compared).
    Repeated {
        /// The file.
        file: PathBuf,
        /// The name of the second entry.
        name: String,
    },
    /// More than [`TOKENS_MAX`] entries, or none at all.
    Count {
        /// The file.
        file: PathBuf,
        /// How many.
        count: usize,
    },
}

impl std::fmt::Display for TokensError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokensError::Read { file, error } => {
                write!(f, "tokens file {}: {error}", EchoPath(file))
            }
            TokensError::TooLarge { file, len } => write!(
                f,
                "tokens file {} is {len} bytes; at most {TOKENS_FILE_LEN_MAX}",
                EchoPath(file)
            ),
            TokensError::Syntax { file, message } => write!(
                f,
                "tokens file {}: {}; it holds [clients] and [operators] tables of name = \"token\"",
                EchoPath(file),
                Escaped(message)
            ),
            TokensError::Name { file, error } => {
                write!(f, "tokens file {}: {error}", EchoPath(file))
            }
            TokensError::BadToken { file, name } => write!(
                f,
                "tokens file {}: the token of {} must be {TOKEN_LEN_MIN} to {TOKEN_LEN_MAX} bytes \
                 of printable ASCII without spaces",
                EchoPath(file),
                Echo(name)
            ),
            TokensError::BadDigest { file, name } => write!(
                f,
                "tokens file {}: the entry of {} starts with {DIGEST_PREFIX}, so it must be \
                 followed by the 64 lowercase hex digits of the token's SHA-256 \
                 (printf %s \"$TOKEN\" | sha256sum)",
                EchoPath(file),
                Echo(name)
            ),
            TokensError::Repeated { file, name } => write!(
                f,
                "tokens file {}: {} repeats a name or a token; each names one caller",
                EchoPath(file),
                Echo(name)
            ),
            TokensError::Count { file, count } => write!(
                f,
                "tokens file {} holds {count} entries; 1 to {TOKENS_MAX}",
                EchoPath(file)
            ),
        }
    }
}

impl std::error::Error for TokensError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TokensError::Read { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// `message` with the text between double quotes left out. serde names a
/// value of the wrong type by quoting it (`invalid type: string "…",
/// expected a map`), and a value of a tokens file may be a token.
pub(super) fn without_quoted(message: &str) -> String {
    let mut kept = String::with_capacity(message.len());
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        kept.push(c);
        if c != '"' {
            continue;
        }
        kept.push('…');
        let mut escaped = false;
        for c in chars.by_ref() {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => {
                    kept.push('"');
                    break;
                }
                (false, _) => {}
            }
        }
    }
    kept
}
