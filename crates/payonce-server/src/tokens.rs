//! The tokens file: who may call the service, and in which role.
//!
//! ```toml
//! [clients]
//! alice = "alice-token-at-least-16-bytes"
//!
//! [operators]
//! frank = "frank-token-at-least-16-bytes"
//! ```
//!
//! A request names itself with `Authorization: Bearer TOKEN`. The token is
//! compared with every token in the file, each in constant time, and all of
//! them every time, so how long the answer takes says nothing about which
//! token came close.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};

use crate::scope::{ScopeError, check_name};

/// Largest tokens file read, in bytes.
pub const TOKENS_FILE_LEN_MAX: u64 = 1 << 20;
/// Most names in a tokens file, clients and operators together.
pub const TOKENS_MAX: usize = 1024;
/// Shortest token, in bytes: a guessable token is no token.
pub const TOKEN_LEN_MIN: usize = 16;
/// Longest token, in bytes.
pub const TOKEN_LEN_MAX: usize = 256;

/// Who a request is, by its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A client: creates and submits withdrawals under its own keys.
    Client(String),
    /// An operator: sees every key and closes keys in flight.
    Operator(String),
}

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
        /// The parser's message.
        message: String,
    },
    /// A name breaks the name rules.
    Name {
        /// The file.
        file: PathBuf,
        /// Which rule.
        error: ScopeError,
    },
    /// A token is shorter than [`TOKEN_LEN_MIN`], longer than
    /// [`TOKEN_LEN_MAX`], or holds a byte other than printable ASCII
    /// without spaces.
    BadToken {
        /// The file.
        file: PathBuf,
        /// Whose token.
        name: String,
    },
    /// Two entries share a name or a token.
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
        use payonce_model::escape::{Echo, EchoPath};
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
                payonce_model::escape::Escaped(message)
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

impl std::error::Error for TokensError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    clients: BTreeMap<String, String>,
    #[serde(default)]
    operators: BTreeMap<String, String>,
}

/// The callers the service knows.
#[derive(Clone)]
pub struct Tokens {
    entries: Vec<(Vec<u8>, Principal)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens themselves.
        let names: Vec<&Principal> = self.entries.iter().map(|(_, who)| who).collect();
        f.debug_struct("Tokens").field("names", &names).finish()
    }
}

impl Tokens {
    /// Reads and checks the tokens file.
    pub fn read(file: &Path) -> Result<Tokens, TokensError> {
        let read = |error| TokensError::Read {
            file: file.to_owned(),
            error,
        };
        let len = std::fs::metadata(file).map_err(read)?.len();
        if len > TOKENS_FILE_LEN_MAX {
            return Err(TokensError::TooLarge {
                file: file.to_owned(),
                len,
            });
        }
        let text = std::fs::read_to_string(file).map_err(read)?;
        Tokens::parse(&text, file)
    }

    /// Checks the text of a tokens file; `file` names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Tokens, TokensError> {
        let parsed: TokensFile = toml::from_str(text).map_err(|error| TokensError::Syntax {
            file: file.to_owned(),
            message: error.message().to_owned(),
        })?;
        let count = parsed.clients.len() + parsed.operators.len();
        if count == 0 || count > TOKENS_MAX {
            return Err(TokensError::Count {
                file: file.to_owned(),
                count,
            });
        }
        let clients = parsed
            .clients
            .into_iter()
            .map(|(n, t)| (Principal::Client(n.clone()), n, t));
        let operators = parsed
            .operators
            .into_iter()
            .map(|(n, t)| (Principal::Operator(n.clone()), n, t));
        let mut entries: Vec<(Vec<u8>, Principal)> = Vec::with_capacity(count);
        for (principal, name, token) in clients.chain(operators) {
            check_entry(file, &name, &token)?;
            let repeated = entries
                .iter()
                .any(|(other, who)| *other == token.as_bytes() || principal_name(who) == name);
            if repeated {
                return Err(TokensError::Repeated {
                    file: file.to_owned(),
                    name,
                });
            }
            entries.push((token.into_bytes(), principal));
        }
        Ok(Tokens { entries })
    }

    /// Who `token` is, if anyone. Compares with every token, each in
    /// constant time: every token is padded to [`TOKEN_LEN_MAX`] bytes, so
    /// neither where a guess first differs nor how long the right token is
    /// changes the work, and the match is picked without a branch.
    pub fn principal(&self, token: &[u8]) -> Option<Principal> {
        // No token of the file is longer, so a longer one's length tells
        // nothing about them.
        if token.len() > TOKEN_LEN_MAX {
            return None;
        }
        let (given, given_len) = (padded(token), token.len() as u64);
        // One more than the index of the match; 0 for none.
        let mut found = 0u64;
        for (index, (known, _)) in self.entries.iter().enumerate() {
            let equal: Choice = padded(known).as_slice().ct_eq(given.as_slice())
                & (known.len() as u64).ct_eq(&given_len);
            found.conditional_assign(&(index as u64 + 1), equal);
        }
        let index = usize::try_from(found).ok()?.checked_sub(1)?;
        self.entries.get(index).map(|(_, who)| who.clone())
    }
}

/// `token` in [`TOKEN_LEN_MAX`] bytes, zeros after it (`token` is no
/// longer).
fn padded(token: &[u8]) -> [u8; TOKEN_LEN_MAX] {
    let mut padded = [0; TOKEN_LEN_MAX];
    let len = token.len().min(TOKEN_LEN_MAX);
    padded[..len].copy_from_slice(&token[..len]);
    padded
}

fn principal_name(principal: &Principal) -> &str {
    match principal {
        Principal::Client(name) | Principal::Operator(name) => name,
    }
}

fn check_entry(file: &Path, name: &str, token: &str) -> Result<(), TokensError> {
    check_name(name).map_err(|error| TokensError::Name {
        file: file.to_owned(),
        error,
    })?;
    let printable = token.bytes().all(|b| b.is_ascii_graphic());
    if !(TOKEN_LEN_MIN..=TOKEN_LEN_MAX).contains(&token.len()) || !printable {
        return Err(TokensError::BadToken {
            file: file.to_owned(),
            name: name.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Tokens, TokensError> {
        Tokens::parse(text, Path::new("tokens.toml"))
    }

    // Guards against a token that names the wrong caller, or a file that
    // lets two callers share one.
    #[test]
    fn tokens_name_their_caller_and_bad_files_are_refused() {
        let tokens = parse(
            "[clients]\nalice = \"alice-token-0123456\"\n[operators]\nfrank = \"frank-token-0123456\"\n",
        )
        .unwrap();
        assert_eq!(
            tokens.principal(b"alice-token-0123456"),
            Some(Principal::Client("alice".into()))
        );
        assert_eq!(
            tokens.principal(b"frank-token-0123456"),
            Some(Principal::Operator("frank".into()))
        );
        // A prefix, one byte more, the last byte wrong, a token padded with
        // the zeros the comparison pads with, one past the longest.
        for guess in [
            &b"alice-token-012345"[..],
            b"alice-token-01234567",
            b"alice-token-0123457",
            b"alice-token-0123456\0",
            &[b'a'; TOKEN_LEN_MAX + 1],
            b"",
        ] {
            assert_eq!(tokens.principal(guess), None, "{guess:?}");
        }
        let longest = "t".repeat(TOKEN_LEN_MAX);
        let tokens = parse(&format!("[clients]\nbob = \"{longest}\"\n")).unwrap();
        assert_eq!(
            tokens.principal(longest.as_bytes()),
            Some(Principal::Client("bob".into()))
        );
        assert!(!format!("{tokens:?}").contains("token-0"));
        let refused = [
            ("[clients]\nalice = \"short\"\n", "token"),
            ("[clients]\n\"a:b\" = \"alice-token-0123456\"\n", "name"),
            (
                "[clients]\nalice = \"alice-token-0123456\"\n[operators]\nbob = \"alice-token-0123456\"\n",
                "repeats",
            ),
            (
                "[clients]\nalice = \"alice-token-0123456\"\n[operators]\nalice = \"other-token-0123456\"\n",
                "repeats",
            ),
            (
                "[admins]\nalice = \"alice-token-0123456\"\n",
                "unknown field",
            ),
            ("", "0 entries"),
        ];
        for (text, words) in refused {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains(words), "{text:?}: {error}");
        }
    }
}
