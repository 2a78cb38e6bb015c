//! Why a connection string was refused.

use std::fmt;

use payonce_model::escape::Echo;

/// Why a connection string was refused. Never holds a password.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConninfoError {
    /// The string is longer than its limit
    /// ([`CONNINFO_LEN_MAX`](super::CONNINFO_LEN_MAX)).
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The string does not read as a URL or as key=value pairs.
    Syntax {
        /// The byte offset where reading stopped.
        offset: usize,
        /// What was expected there.
        expected: &'static str,
    },
    /// An option libpq does not have.
    Unknown {
        /// The option.
        option: String,
    },
    /// An option libpq has and payonce does not take.
    NotTaken {
        /// The option.
        option: String,
    },
    /// An option's value is not one it takes.
    Value {
        /// The option.
        option: &'static str,
        /// The value, unless it is a secret.
        value: String,
        /// What it takes.
        expected: &'static str,
    },
    /// Two options contradict each other, by libpq's rules.
    Conflict {
        /// Which rule.
        rule: String,
    },
}

impl fmt::Display for ConninfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the connection string: ")?;
        match self {
            ConninfoError::TooLong { len, max } => write!(f, "{len} bytes; at most {max}"),
            ConninfoError::Syntax { offset, expected } => {
                write!(f, "at byte {offset}: expected {expected}")
            }
            ConninfoError::Unknown { option } => {
                write!(f, "libpq has no option `{}`", Echo(option))
            }
            ConninfoError::NotTaken { option } => {
                write!(f, "payonce does not take libpq's option `{option}`")
            }
            ConninfoError::Value {
                option,
                value,
                expected,
            } => write!(f, "{option}={}: expected {expected}", Echo(value)),
            ConninfoError::Conflict { rule } => write!(f, "{rule}"),
        }
    }
}

impl std::error::Error for ConninfoError {}
