//! What every store offers the harness, and what it answers: the trait the
//! stores implement and the types they share. It imports no store, so every
//! store can depend on it without it depending on them.

use std::fmt;
use std::str::FromStr;

use payonce::NewWithdrawal;
use payonce_model::{FingerprintField, Reference, WithdrawalRequest};
use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::workload::RailScript;

/// The stores compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StoreKind {
    /// `payonce::Ledger`, embedded.
    Payonce,
    /// SQLite through rusqlite: WAL, `synchronous=FULL`, a connection per
    /// submitting thread.
    Sqlite,
    /// The same, with one connection shared by every thread behind a mutex.
    /// Not in [`StoreKind::ALL`]: a variant to measure beside `Sqlite`.
    SqliteShared,
    /// sled 0.34 with a flush and an `fdatasync` of its data file before
    /// every acknowledgement: the same durability as the others.
    Sled,
    /// sled 0.34 with only its flush before every acknowledgement, as
    /// shipped: on Linux that flush does not make the device flush its
    /// cache, so it is less durable than the others.
    SledFlushOnly,
}

impl StoreKind {
    /// Every store the table shows, in its order.
    pub const ALL: [StoreKind; 4] = [
        StoreKind::Payonce,
        StoreKind::Sqlite,
        StoreKind::Sled,
        StoreKind::SledFlushOnly,
    ];

    /// Every store, variants included.
    pub const EVERY: [StoreKind; 5] = [
        StoreKind::Payonce,
        StoreKind::Sqlite,
        StoreKind::SqliteShared,
        StoreKind::Sled,
        StoreKind::SledFlushOnly,
    ];

    /// The name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Payonce => "payonce",
            StoreKind::Sqlite => "SQLite",
            StoreKind::SqliteShared => "SQLite-shared",
            StoreKind::Sled => "sled",
            StoreKind::SledFlushOnly => "sled-flush-only",
        }
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for StoreKind {
    type Err = BenchError;
    fn from_str(name: &str) -> Result<Self, BenchError> {
        StoreKind::EVERY
            .into_iter()
            .find(|kind| kind.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| BenchError::Setting {
                setting: "store",
                value: name.to_owned(),
                rule: "one of payonce, sqlite, sqlite-shared, sled, sled-flush-only",
            })
    }
}

/// When a store acknowledges a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Durability {
    /// Every acknowledged claim and outcome is on stable storage (fsynced or
    /// flushed) first. Every measured figure uses this.
    Full,
    /// Written to the operating system, never synced: only to build large
    /// states quickly, and to create withdrawals before a timed run.
    Relaxed,
}

/// What a store answered to one submission. Equal answers from every store
/// for the same workload are what makes the comparison fair.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Answer {
    /// Claimed, sent, and the outcome recorded.
    Sent {
        /// The rail's reference in the outcome.
        reference: String,
    },
    /// The key's recorded outcome, without a send.
    Replayed {
        /// The reference in the recorded outcome.
        reference: String,
    },
    /// Claimed and sent, but the send failed: the key stays in flight.
    SendFailed,
    /// The key is claimed and its outcome unknown.
    InFlight,
    /// The key was used for another withdrawal.
    KeyReused {
        /// The fields that differ.
        fields: Vec<FingerprintField>,
    },
    /// Another key holds the withdrawal.
    Claimed {
        /// That key.
        holder: String,
        /// Whether the holder has an outcome.
        holder_decided: bool,
    },
    /// The store did not create the withdrawal.
    UnknownWithdrawal,
    /// The withdrawal was created with other fields.
    NotAsCreated,
}

/// Where the first step of the claim protocol ended, for the stores that run
/// the steps one by one (payonce runs them inside `Ledger::submit`). It is
/// not called `Claimed`: that name is taken by the refusal
/// [`Answer::Claimed`], another key holding the withdrawal.
pub(crate) enum ClaimStep {
    /// The key and the withdrawal are claimed, durably: the send may run.
    Granted,
    /// Nothing was claimed: this is the submission's answer.
    Answered(Answer),
}

/// The fake rail: zero latency, answers as the workload scripted.
#[derive(Debug, Clone, Copy)]
pub struct Rail<'a> {
    /// What it does.
    pub script: RailScript,
    /// The reference a successful send gets.
    pub reference: &'a Reference,
}

/// A send the rail could not complete: the outcome is unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailFailure {
    /// Why.
    pub reason: String,
}

impl fmt::Display for RailFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the rail failed: {}", self.reason)
    }
}

impl std::error::Error for RailFailure {}

impl Rail<'_> {
    /// Sends `request`.
    pub fn send(&self, request: &WithdrawalRequest) -> Result<WithdrawalRequest, RailFailure> {
        match self.script {
            RailScript::Succeed => request
                .approve()
                .and_then(|approved| approved.start_sending())
                .and_then(|sending| sending.mark_sent(self.reference.clone()))
                .map_err(|error| RailFailure {
                    reason: error.to_string(),
                }),
            RailScript::Fail => Err(RailFailure {
                reason: "timed out after the request reached the node".to_owned(),
            }),
        }
    }
}

/// A store of the two indexes (request key to record, withdrawal id to the
/// key that holds it) that runs the claim protocol.
pub trait Store: Send + Sync {
    /// Which store this is.
    fn kind(&self) -> StoreKind;

    /// Creates these withdrawals, minting their ids, in order.
    fn create(&self, withdrawals: &[NewWithdrawal]) -> Result<Vec<WithdrawalRequest>, BenchError>;

    /// A handle for one submitting thread.
    fn session(&self) -> Result<Box<dyn Session + '_>, BenchError>;

    /// The reference of `key`'s recorded outcome, if it has one: the first
    /// question after opening.
    fn outcome_reference(&self, key: &str) -> Result<Option<String>, BenchError>;

    /// Puts everything on stable storage and closes the store.
    fn close(self: Box<Self>) -> Result<(), BenchError>;
}

/// One thread's handle on a store.
pub trait Session {
    /// Runs the claim protocol for `key` and `request`:
    ///
    /// 1. Claim the key and the withdrawal atomically, durably; or answer
    ///    with the recorded outcome, or refuse.
    /// 2. Call the rail.
    /// 3. Record what the rail did, durably, before answering.
    fn submit(
        &mut self,
        key: &str,
        request: &WithdrawalRequest,
        rail: Rail<'_>,
    ) -> Result<Answer, BenchError>;
}
