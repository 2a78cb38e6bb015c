//! What `history` follows, a request key or a withdrawal, and which events
//! are about it.
//!
//! An event is about the request keys it touches and the withdrawal it is
//! attributed to. Which withdrawal that is, the event says, or for an
//! event of schema 1 about a key alone, the ledger's state before it
//! (`crate::attribution`); this module only compares. The keys an event
//! touches are the library's own answer (`EventKind::keys_touched`), which
//! a PostgreSQL ledger indexes too.

use payonce::EventKind;
use payonce_model::{RequestKey, WithdrawalId};

use crate::error::CliError;

/// Most events one history lists. A withdrawal that a misbehaving client
/// retries under fresh keys collects a refusal per attempt; past this many,
/// `export` with `--from`/`--to` is the tool.
/// Both the scan in `history` and the audit index's lookup stop at it.
pub const HISTORY_EVENTS_MAX: usize = 100_000;

/// What `history` follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subject {
    /// A request key.
    Key(RequestKey),
    /// A withdrawal.
    Withdrawal(WithdrawalId),
}

impl Subject {
    /// The error for a subject no event of the log is about.
    pub(crate) fn unknown(&self) -> CliError {
        match self {
            Subject::Key(key) => CliError::UnknownKey {
                key: key.to_string(),
            },
            Subject::Withdrawal(id) => CliError::UnknownWithdrawal {
                withdrawal: id.to_string(),
            },
        }
    }
}

/// The request keys an event touches: [`EventKind::keys_touched`], the
/// ledger's own answer, which a PostgreSQL ledger indexes too.
pub(crate) fn keys_touched(kind: &EventKind) -> Vec<&RequestKey> {
    kind.keys_touched()
}

/// Whether an event attributed to `withdrawal` touches `subject`.
pub(crate) fn touches(
    subject: &Subject,
    kind: &EventKind,
    withdrawal: Option<&WithdrawalId>,
) -> bool {
    match subject {
        Subject::Key(key) => keys_touched(kind).contains(&key),
        Subject::Withdrawal(id) => withdrawal == Some(id),
    }
}
