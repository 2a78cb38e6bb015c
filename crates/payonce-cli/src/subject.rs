//! What `history` lists of a subject ([`payonce::Subject`]): its limit,
//! and its error when no event is about it.

use payonce::Subject;

use crate::error::CliError;

/// Most events one history lists. A withdrawal that a misbehaving client
/// retries under fresh keys collects a refusal per attempt; past this many,
/// `export` with `--from`/`--to` is the tool.
/// Both the scan in `history` and the audit index's lookup stop at it.
pub const HISTORY_EVENTS_MAX: usize = 100_000;

/// The error for a subject no event of the log is about.
pub(crate) fn unknown(subject: &Subject) -> CliError {
    match subject {
        Subject::Key(key) => CliError::UnknownKey {
            key: key.to_string(),
        },
        Subject::Withdrawal(id) => CliError::UnknownWithdrawal {
            withdrawal: id.to_string(),
        },
    }
}
