//! What `history` follows, a request key or a withdrawal, and which events
//! are about it.
//!
//! An event names a request key, a withdrawal, or both. Events that carry
//! only a key (`send_rejected`, `send_failed`, `released`, and some
//! refusals) are about the withdrawal that key held at the time.

use payonce::EventKind;
use payonce_model::{RequestKey, WithdrawalId};

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

/// How an event changes which withdrawal a key holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HoldingChange<'a> {
    /// The key now holds this withdrawal.
    Set(&'a RequestKey, &'a WithdrawalId),
    /// The key holds nothing any more.
    Remove(&'a RequestKey),
}

/// The change `kind` makes to the key-to-withdrawal holdings, mirroring what
/// `apply` does to the records of request keys in the ledger's state.
pub(crate) fn holding_change(kind: &EventKind) -> Option<HoldingChange<'_>> {
    match kind {
        EventKind::Claimed { key, request } | EventKind::Recorded { key, request } => {
            Some(HoldingChange::Set(key, request.id()))
        }
        // A resolve of an unknown key claims it; of a known key it keeps the
        // same withdrawal (the fingerprints must match).
        EventKind::Resolved { key, outcome, .. } => Some(HoldingChange::Set(key, outcome.id())),
        EventKind::Released { key, .. } => Some(HoldingChange::Remove(key)),
        _ => None,
    }
}

/// The withdrawal `kind` is about: the one it names, else the one its key
/// held before it, as `holding` answers.
pub(crate) fn attribute(
    kind: &EventKind,
    holding: impl FnOnce(&RequestKey) -> Option<WithdrawalId>,
) -> Option<WithdrawalId> {
    match kind.withdrawal() {
        Some(withdrawal) => Some(withdrawal.clone()),
        None => kind.key().and_then(holding),
    }
}

/// The request keys an event touches: the key it is about, and the key a
/// refusal names as the holder of the withdrawal (that key's claim is what
/// stopped the other caller).
pub(crate) fn keys_touched(kind: &EventKind) -> Vec<&RequestKey> {
    let mut keys: Vec<&RequestKey> = kind.key().into_iter().collect();
    if let EventKind::Refused { refusal, .. } = kind
        && let Some(holder) = refusal.holder()
        && !keys.contains(&holder)
    {
        keys.push(holder);
    }
    keys
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
