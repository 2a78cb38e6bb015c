//! The submission ledger: makes sure a withdrawal leaves custody at most once.
//!
//! A custody service calls [`Ledger::submit`] in front of every send. A
//! **request key** answers "is this call a repeat?": the same key with the
//! same withdrawal replays the recorded outcome and never sends again. A
//! **withdrawal claim** answers "does another caller already own this money
//! movement?": a second key for a claimed withdrawal is refused with a
//! [`Refusal::Claimed`] that names the holder key. A send that fails or
//! panics, or answers with anything but a settled withdrawal (sent,
//! confirmed, failed, rejected), leaves its key claimed with an unknown
//! outcome until an operator [`resolve`](Ledger::resolve)s or
//! [`release`](Ledger::release)s it. A later report of what the rail did
//! moves an outcome forward ([`Ledger::advance`]); an operator corrects a
//! wrong one ([`Ledger::correct`]).
//!
//! A ledger is created once, explicitly ([`Ledger::init`]); opening
//! ([`Ledger::open`]) refuses a directory without a log, so a ledger whose
//! log was lost is never taken for a new one. The ids it mints carry a
//! random number drawn at each opening, so no two ledgers, and no copy
//! restored from a backup, mint the same id.
//!
//! For use from async code, the `tokio` feature adds [`AsyncLedger`]
//! (claim, await the rail, complete, with the parts that wait for the disk
//! on tokio's blocking pool); `examples/tokio.rs` does the same by hand.
//!
//! - The logic is pure: [`decide`] judges a [`Command`] against the
//!   [`State`]; [`apply`] is the only code that changes it.
//! - The shell, [`Ledger`], appends each decision to a checksummed log
//!   (`payonce-log`) and puts a claim on stable storage before the send runs,
//!   and an outcome before `submit` returns it.
//! - Opening replays the log, re-deriving every recorded decision;
//!   [`verify`] does the same read-only for auditors.
//!
//! It does not talk to a rail (it calls the `send` it is given), expire
//! anything, or guess: nothing but an operator closes an in-flight key.
//!
//! ```
//! use payonce::{Ledger, NewWithdrawal, SendFailure};
//! use payonce_model::WithdrawalRequest;
//!
//! // Hand the withdrawal to the rail here; it answers with a reference.
//! fn rail(request: &WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> {
//!     Ok(request.sent("0xfeed")?)
//! }
//!
//! let dir = tempfile::tempdir()?;
//! let ledger = Ledger::init(dir.path())?; // a new ledger; later, Ledger::open
//! let request = ledger.create(NewWithdrawal {
//!     amount: "25.00".parse()?,
//!     currency: "USDC".parse()?,
//!     destination: "0xabc".parse()?,
//!     requested_by: "alice".parse()?,
//! })?;
//! let outcome = ledger.submit("req-1", &request, rail)?;
//! // A retry replays the outcome without calling the rail.
//! assert_eq!(ledger.submit("req-1", &request, |_| unreachable!())?, outcome);
//! // Another key for the same withdrawal is refused, naming the holder.
//! let refused = ledger.submit("req-2", &request, |_| unreachable!()).unwrap_err();
//! assert_eq!(refused.refusal().and_then(|r| r.holder()).map(|k| k.as_str()), Some("req-1"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#[cfg(feature = "tokio")]
mod async_ledger;
mod audit;
mod command;
mod decide;
#[cfg(test)]
mod documented;
mod epoch;
mod error;
mod event;
mod ledger;
mod recovery;
mod refusal;
mod replay;
mod run_store;
mod snapshot;
mod snapshot_format;
mod state;
mod subject;
mod time;

#[cfg(feature = "tokio")]
pub use crate::async_ledger::{AsyncLedger, Submission};
pub use crate::audit::{
    EventLog, Events, SCHEMA_NAMING_HELD, Verification, needs_state, verify, verify_at, verify_on,
    verify_scan, withdrawal_of,
};
pub use crate::command::{Command, FailureCause, SendResult};
pub use crate::decide::{Decision, decide, decide_as};
pub use crate::epoch::{CountingEpochs, Epochs, RandomEpochs};
pub use crate::error::{BoxError, Divergence, LedgerError, SendFailure, StoreError, SubmitError};
pub use crate::event::{
    Event, EventDecodeError, EventKind, SCHEMA_VERSION, SCHEMA_VERSION_MIN, command_key,
};
pub use crate::ledger::{
    Appended, BATCH_EVENTS_MAX, Claim, Config, Ledger, MEMORY_BUDGET, MEMORY_BUDGET_MIN, MemoryUse,
    NewWithdrawal, REPLAY_THREAD_MIN_LEN, SharedLog, SharedRecord, SnapshotStats, SnapshotTaken,
    Ticket,
};
pub use crate::recovery::{Recovery, SnapshotLoaded, SnapshotSetAside};
pub use crate::refusal::{HolderState, Refusal, RefusalKind};
pub use crate::replay::{
    FOUND_LISTED_MAX, HeadVisit, ReplayHook, Replaying, StopAtDivergence, Visit, Walked,
    decode_event, rederive, replay_scan_with,
};
pub use crate::snapshot::{
    DirSnapshots, MemRuns, RunOut, RunStore, SNAPSHOT_EVENTS, SNAPSHOT_FORMAT_VERSION,
    SNAPSHOT_HEADER_LEN, SNAPSHOT_INTERVAL, SNAPSHOT_LEN_MAX, SNAPSHOT_READ_LEN,
    SNAPSHOT_SHARE_MAX, SNAPSHOTS_DIR, SNAPSHOTS_KEPT, SetRunAside, SnapshotCheck, SnapshotError,
    SnapshotFile, SnapshotInfo, SnapshotPolicy, SnapshotStore, SnapshotVerdict, StoredSnapshot,
    verify_snapshots,
};
/// A state to a snapshot's bytes and back (docs/snapshot-format.md).
pub mod snapshots {
    pub use crate::snapshot::{
        KEYS_PART_LEN, checked, checked_file, decode, encode, encode_in_parts, info,
    };
    pub use crate::snapshot_format::{MANIFEST_RUNS_MAX, Manifest, RunEntry};
}
pub use crate::state::{
    ClaimChange, HELD_TOTAL_MAX, Hold, InFlight, KeyRecord, SLOTS_MAX, State, StateDifference,
    apply,
};
pub use crate::subject::Subject;
pub use crate::time::{
    Clock, ManualClock, SystemClock, TIMESTAMP_TEXT_MAX, Timestamp, TimestampError,
};
/// The log's settings and what opening it repaired, for tuning
/// [`Config::log`] and reading [`Ledger::recovery`] without depending on
/// `payonce-log`.
pub use payonce_log::{
    Digest, Durability, Head, LogConfig, PREALLOCATE_LEN, Recovery as LogRecovery, TornTail,
    Witness,
};
