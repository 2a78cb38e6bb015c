//! Why a tokens file was refused. No variant holds a token or a name, and
//! no message quotes one: a name may be a token written in its place (an
//! entry swapped, `TOKEN = "alice"`), so an entry is named by its line and
//! table, and the TOML parser's words, which quote the value or key they
//! stumbled on, are never shown; only where it stumbled, and on what kind
//! of mistake. Each variant carries the limit it names, so this module
//! needs nothing from the reader above it.

use std::path::PathBuf;

use payonce_model::escape::EchoPath;

/// A table of the tokens file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Table {
    /// `[clients]`.
    Clients,
    /// `[operators]`.
    Operators,
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Table::Clients => "[clients]",
            Table::Operators => "[operators]",
        })
    }
}

/// Where an entry of the tokens file is: its line (from 1) and its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The line its name is on, from 1.
    pub line: usize,
    /// Its table.
    pub table: Table,
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the entry on line {} ({})", self.line, self.table)
    }
}

/// A place in the tokens file's text: a line and a column, both from 1
/// (the column in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1.
    pub column: usize,
}

/// What kind of mistake the TOML parser found, told from the start of its
/// message; the message itself is never kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SyntaxProblem {
    /// A value of the wrong type: a number, an array or a table where a
    /// token belongs, or a value where a table belongs.
    WrongType,
    /// A key at the top other than `clients` and `operators`.
    UnknownKey,
    /// A key written twice in one table.
    RepeatedKey,
    /// Text that is not TOML.
    NotToml,
}

impl SyntaxProblem {
    /// The kind of `message`, a TOML parser's error for a tokens file.
    pub(super) fn of(message: &str) -> SyntaxProblem {
        if message.starts_with("invalid type") {
            SyntaxProblem::WrongType
        } else if message.starts_with("unknown field") {
            SyntaxProblem::UnknownKey
        } else if message.starts_with("duplicate key") {
            SyntaxProblem::RepeatedKey
        } else {
            SyntaxProblem::NotToml
        }
    }
}

impl std::fmt::Display for SyntaxProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SyntaxProblem::WrongType => {
                "a value of the wrong type (each entry's token is a string in quotes)"
            }
            SyntaxProblem::UnknownKey => "a key other than [clients] and [operators] at the top",
            SyntaxProblem::RepeatedKey => "a key written twice in one table",
            SyntaxProblem::NotToml => "this is not TOML",
        })
    }
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
    /// It is longer than its limit
    /// ([`TOKENS_FILE_LEN_MAX`](super::TOKENS_FILE_LEN_MAX)).
    TooLarge {
        /// The file.
        file: PathBuf,
        /// Its length in bytes.
        len: u64,
        /// The limit.
        len_max: u64,
    },
    /// It is not TOML with `[clients]` and `[operators]` tables of strings,
    /// or it has other tables or keys.
    Syntax {
        /// The file.
        file: PathBuf,
        /// Where the parser stumbled, when it says.
        at: Option<Position>,
        /// On what kind of mistake.
        problem: SyntaxProblem,
    },
    /// A name is empty, longer than its limit
    /// ([`NAME_LEN_MAX`](crate::scope::NAME_LEN_MAX)), or holds a byte
    /// other than `A-Z a-z 0-9 _ -`.
    Name {
        /// The file.
        file: PathBuf,
        /// The entry.
        entry: Entry,
        /// The longest name, in bytes.
        len_max: usize,
    },
    /// A token in clear is shorter or longer than its limits
    /// ([`TOKEN_LEN_MIN`](super::TOKEN_LEN_MIN),
    /// [`TOKEN_LEN_MAX`](super::TOKEN_LEN_MAX)), or holds a byte other
    /// than printable ASCII without spaces.
    BadToken {
        /// The file.
        file: PathBuf,
        /// The entry.
        entry: Entry,
        /// The shortest token, in bytes.
        len_min: usize,
        /// The longest token, in bytes.
        len_max: usize,
    },
    /// An entry starts with its prefix
    /// ([`DIGEST_PREFIX`](super::DIGEST_PREFIX)) but what follows is not
    /// 64 lowercase hex digits.
    BadDigest {
        /// The file.
        file: PathBuf,
        /// The entry.
        entry: Entry,
        /// The prefix.
        prefix: &'static str,
    },
    /// Two entries share a name or a token (in clear or as a digest: the
    /// digests are compared).
    Repeated {
        /// The file.
        file: PathBuf,
        /// The later entry.
        entry: Entry,
        /// The earlier one it repeats.
        first: Entry,
    },
    /// More entries than its limit ([`TOKENS_MAX`](super::TOKENS_MAX)),
    /// or none at all.
    Count {
        /// The file.
        file: PathBuf,
        /// How many.
        count: usize,
        /// The limit.
        count_max: usize,
    },
}

impl std::fmt::Display for TokensError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokensError::Read { file, error } => {
                write!(f, "tokens file {}: {error}", EchoPath(file))
            }
            TokensError::TooLarge { file, len, len_max } => write!(
                f,
                "tokens file {} is {len} bytes; at most {len_max}",
                EchoPath(file)
            ),
            TokensError::Syntax { file, at, problem } => {
                write!(f, "tokens file {}: ", EchoPath(file))?;
                if let Some(Position { line, column }) = at {
                    write!(f, "line {line}, column {column}: ")?;
                }
                write!(
                    f,
                    "{problem}; it holds [clients] and [operators] tables of name = \"token\""
                )
            }
            TokensError::Name {
                file,
                entry,
                len_max,
            } => write!(
                f,
                "tokens file {}: the name of {entry} must be 1 to {len_max} bytes of A-Z, a-z, \
                 0-9, _ and -",
                EchoPath(file)
            ),
            TokensError::BadToken {
                file,
                entry,
                len_min,
                len_max,
            } => write!(
                f,
                "tokens file {}: the token of {entry} must be {len_min} to {len_max} bytes of \
                 printable ASCII without spaces",
                EchoPath(file)
            ),
            TokensError::BadDigest {
                file,
                entry,
                prefix,
            } => write!(
                f,
                "tokens file {}: {entry} starts with {prefix}, so it must be followed by the 64 \
                 lowercase hex digits of the token's SHA-256 (printf %s \"$TOKEN\" | sha256sum)",
                EchoPath(file)
            ),
            TokensError::Repeated { file, entry, first } => write!(
                f,
                "tokens file {}: {entry} repeats the name or the token of {first}; each names \
                 one caller",
                EchoPath(file)
            ),
            TokensError::Count {
                file,
                count,
                count_max,
            } => write!(
                f,
                "tokens file {} holds {count} entries; 1 to {count_max}",
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
