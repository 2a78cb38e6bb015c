//! What an audit follows through the log, a request key or a withdrawal,
//! and which events are about it.
//!
//! An event is about the request keys it touches
//! ([`EventKind::keys_touched`]) and the withdrawal it is attributed to.
//! Which withdrawal that is, the event says, or for an event of schema 1
//! about a key alone, the ledger's state before it; this module only
//! compares. `history`, the incident report and both audit indexes (the
//! one beside a directory, and PostgreSQL's tables of the events about
//! each key and withdrawal) follow the same subjects.

use std::fmt;

use payonce_model::{RequestKey, WithdrawalId};

use crate::event::EventKind;

/// A request key or a withdrawal, whose events an audit lists.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[allow(
    clippy::exhaustive_enums,
    reason = "an event is about keys and a withdrawal, and nothing else"
)]
pub enum Subject {
    /// A request key.
    Key(RequestKey),
    /// A withdrawal.
    Withdrawal(WithdrawalId),
}

impl Subject {
    /// The key's or the withdrawal's text.
    pub fn as_str(&self) -> &str {
        match self {
            Subject::Key(key) => key.as_str(),
            Subject::Withdrawal(id) => id.as_str(),
        }
    }

    /// Whether an event of `kind`, attributed to `withdrawal`, is about
    /// this subject.
    pub fn touched_by(&self, kind: &EventKind, withdrawal: Option<&WithdrawalId>) -> bool {
        match self {
            Subject::Key(key) => kind.keys_touched().contains(&key),
            Subject::Withdrawal(id) => withdrawal == Some(id),
        }
    }
}

impl fmt::Display for Subject {
    /// `request key K` or `withdrawal W`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Key(key) => write!(f, "request key {key}"),
            Subject::Withdrawal(id) => write!(f, "withdrawal {id}"),
        }
    }
}
