//! Why the ledger said no. Refusals are decisions like any other: pure,
//! re-derived on replay, and (by default) recorded in the log for audit.

use std::fmt;

use payonce_model::{
    Amount, Currency, Difference, Reference, RequestKey, WithdrawalId, WithdrawalState, WorkerName,
};
use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

/// What the key holding a withdrawal has done so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum HolderState {
    /// Claimed, outcome unknown.
    InFlight {
        /// When the claim was made.
        since: Timestamp,
        /// The claim's sequence number in the log.
        seq: u64,
        /// Whether its send is running in this process right now.
        send_running: bool,
    },
    /// It produced an outcome.
    Decided {
        /// The outcome's state.
        state: WithdrawalState,
        /// The outcome's rail reference, if any.
        reference: Option<Reference>,
    },
}

impl fmt::Display for HolderState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HolderState::InFlight {
                since,
                send_running: true,
                ..
            } => {
                write!(f, "in flight since {since}, its send in progress")
            }
            HolderState::InFlight { since, .. } => write!(f, "in flight since {since}"),
            HolderState::Decided {
                state,
                reference: Some(reference),
            } => {
                write!(
                    f,
                    "which produced an outcome: {state}, reference {reference}"
                )
            }
            HolderState::Decided {
                state,
                reference: None,
            } => write!(f, "which produced an outcome: {state}"),
        }
    }
}

/// The broad class of a refusal, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalKind {
    /// The request contradicts what the ledger holds.
    Conflict,
    /// The key is claimed and its outcome is not known yet.
    InFlight,
    /// The withdrawal id was not minted by this ledger.
    UnknownWithdrawal,
    /// Granting it would pass one of the ledger's limits.
    Limit,
}

/// A refusal: the ledger will not do this, and here is why, with the facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Refusal {
    /// The withdrawal is claimed by another request key. Look it up with
    /// `claimed_by` and `outcome` rather than retrying.
    Claimed {
        /// The key that was refused.
        key: RequestKey,
        /// The withdrawal it asked for.
        withdrawal: WithdrawalId,
        /// The key that holds the withdrawal.
        holder: RequestKey,
        /// What the holder has done so far.
        holder_state: HolderState,
    },
    /// The key was used before for a different withdrawal.
    KeyReused {
        /// The key.
        key: RequestKey,
        /// Every field that differs: the recorded value, then the new one.
        #[serde(deserialize_with = "payonce_model::bounded::differences")]
        differences: Vec<Difference>,
    },
    /// An outcome is not the withdrawal the key claimed.
    OutcomeMismatch {
        /// The key.
        key: RequestKey,
        /// Every field that differs: the claimed value, then the outcome's.
        #[serde(deserialize_with = "payonce_model::bounded::differences")]
        differences: Vec<Difference>,
    },
    /// The key already has a different outcome.
    OutcomeDiffers {
        /// The key.
        key: RequestKey,
        /// The state of the recorded outcome.
        recorded_state: WithdrawalState,
        /// Its reference, if any.
        recorded_reference: Option<Reference>,
    },
    /// The key produced an outcome; releasing it would reopen a withdrawal
    /// that already has an answer.
    HasOutcome {
        /// The key.
        key: RequestKey,
        /// The state of its outcome.
        state: WithdrawalState,
    },
    /// The key is claimed and its outcome is not known yet.
    InFlight {
        /// The key.
        key: RequestKey,
        /// The withdrawal it holds.
        withdrawal: WithdrawalId,
        /// When it was claimed.
        since: Timestamp,
        /// The claim's sequence number in the log.
        seq: u64,
        /// Whether its send is running in this process right now; an
        /// operator cannot close a key under a send that may still succeed.
        send_running: bool,
    },
    /// The withdrawal id was not minted by this ledger.
    UnknownWithdrawal {
        /// The id.
        withdrawal: WithdrawalId,
    },
    /// The id was minted here, for a withdrawal with other fields.
    NotAsCreated {
        /// The id.
        withdrawal: WithdrawalId,
        /// Every field that differs: as created, then as given.
        #[serde(deserialize_with = "payonce_model::bounded::differences")]
        differences: Vec<Difference>,
    },
    /// A completion arrived for a key with no send running.
    NoSendRunning {
        /// The key.
        key: RequestKey,
    },
    /// Holding the withdrawal would take the funds held in its currency
    /// past [`crate::HELD_TOTAL_MAX`], the most the ledger can total.
    HeldTotalTooLarge {
        /// The key.
        key: RequestKey,
        /// The withdrawal it asked for.
        withdrawal: WithdrawalId,
        /// Its currency.
        currency: Currency,
        /// Its amount.
        amount: Amount,
    },
    /// An outcome in a state that does not say what the rail did
    /// (requested, approved or sending): only sent, confirmed, failed or
    /// rejected is an outcome.
    Unsettled {
        /// The key.
        key: RequestKey,
        /// The state given.
        state: WithdrawalState,
    },
    /// A later report that the state machine does not allow after the
    /// recorded outcome (a confirmed withdrawal failing, a failed one sent).
    ForbiddenMove {
        /// The key.
        key: RequestKey,
        /// The state of the recorded outcome.
        from: WithdrawalState,
        /// The state reported.
        to: WithdrawalState,
    },
    /// The key has no outcome to move on or correct.
    NoOutcome {
        /// The key.
        key: RequestKey,
    },
    /// The worker has no session to end: it never started on this ledger,
    /// or its session ended already.
    NoSession {
        /// The worker.
        worker: WorkerName,
    },
}

impl Refusal {
    /// The broad class of this refusal.
    pub fn kind(&self) -> RefusalKind {
        match self {
            Refusal::InFlight { .. } => RefusalKind::InFlight,
            Refusal::UnknownWithdrawal { .. } => RefusalKind::UnknownWithdrawal,
            Refusal::HeldTotalTooLarge { .. } => RefusalKind::Limit,
            _ => RefusalKind::Conflict,
        }
    }

    /// The request key the refusal is about.
    pub fn key(&self) -> Option<&RequestKey> {
        match self {
            Refusal::Claimed { key, .. }
            | Refusal::KeyReused { key, .. }
            | Refusal::OutcomeMismatch { key, .. }
            | Refusal::OutcomeDiffers { key, .. }
            | Refusal::HasOutcome { key, .. }
            | Refusal::InFlight { key, .. }
            | Refusal::NoSendRunning { key }
            | Refusal::HeldTotalTooLarge { key, .. }
            | Refusal::Unsettled { key, .. }
            | Refusal::ForbiddenMove { key, .. }
            | Refusal::NoOutcome { key } => Some(key),
            Refusal::UnknownWithdrawal { .. }
            | Refusal::NotAsCreated { .. }
            | Refusal::NoSession { .. } => None,
        }
    }

    /// The withdrawal the refusal is about, when it names one.
    pub fn withdrawal(&self) -> Option<&WithdrawalId> {
        match self {
            Refusal::Claimed { withdrawal, .. }
            | Refusal::InFlight { withdrawal, .. }
            | Refusal::UnknownWithdrawal { withdrawal }
            | Refusal::NotAsCreated { withdrawal, .. }
            | Refusal::HeldTotalTooLarge { withdrawal, .. } => Some(withdrawal),
            _ => None,
        }
    }

    /// The key holding the withdrawal, when another key does.
    pub fn holder(&self) -> Option<&RequestKey> {
        match self {
            Refusal::Claimed { holder, .. } => Some(holder),
            _ => None,
        }
    }
}

fn write_differences(f: &mut fmt::Formatter<'_>, differences: &[Difference]) -> fmt::Result {
    for (index, difference) in differences.iter().enumerate() {
        let separator = if index == 0 { "" } else { "; " };
        write!(f, "{separator}{difference}")?;
    }
    Ok(())
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Claimed {
                withdrawal,
                holder,
                holder_state,
                ..
            } => {
                write!(
                    f,
                    "withdrawal {withdrawal} is claimed by request key {holder}, {holder_state}"
                )
            }
            Refusal::KeyReused { key, differences } => {
                write!(f, "request key {key} belongs to another withdrawal: ")?;
                write_differences(f, differences)
            }
            Refusal::OutcomeMismatch { key, differences } => {
                write!(
                    f,
                    "the outcome for request key {key} is another withdrawal: "
                )?;
                write_differences(f, differences)
            }
            Refusal::OutcomeDiffers {
                key,
                recorded_state,
                recorded_reference,
            } => {
                write!(
                    f,
                    "request key {key} already has another outcome: {recorded_state}"
                )?;
                match recorded_reference {
                    Some(reference) => write!(f, ", reference {reference}"),
                    None => Ok(()),
                }
            }
            Refusal::HasOutcome { key, state } => {
                write!(
                    f,
                    "request key {key} already produced an outcome ({state}); it cannot be released"
                )
            }
            Refusal::InFlight {
                key,
                withdrawal,
                since,
                send_running,
                ..
            } => {
                write!(
                    f,
                    "request key {key} is claimed for withdrawal {withdrawal} and its outcome is not known yet \
                     (in flight since {since})"
                )?;
                if *send_running {
                    f.write_str("; send in progress")
                } else {
                    Ok(())
                }
            }
            Refusal::UnknownWithdrawal { withdrawal } => {
                write!(f, "withdrawal {withdrawal} was not created by this ledger")
            }
            Refusal::NotAsCreated {
                withdrawal,
                differences,
            } => {
                write!(f, "withdrawal {withdrawal} was created differently: ")?;
                write_differences(f, differences)
            }
            Refusal::NoSendRunning { key } => {
                write!(f, "request key {key} has no send running to complete")
            }
            Refusal::HeldTotalTooLarge {
                key,
                withdrawal,
                currency,
                amount,
            } => {
                write!(
                    f,
                    "request key {key} cannot hold withdrawal {withdrawal}: {amount} {currency} more \
                     would take the funds held in {currency} past the most the ledger can total"
                )
            }
            Refusal::Unsettled { key, state } => write!(
                f,
                "request key {key}: a withdrawal in state {state} is not an outcome; only sent, \
                 confirmed, failed or rejected says what the rail did"
            ),
            Refusal::ForbiddenMove { key, from, to } => write!(
                f,
                "request key {key}: its outcome is {from}, and a withdrawal cannot go from {from} \
                 to {to}"
            ),
            Refusal::NoOutcome { key } => {
                write!(f, "request key {key} has no outcome to move on or correct")
            }
            Refusal::NoSession { worker } => {
                write!(f, "worker {worker} has no session on this ledger to end")
            }
        }
    }
}

impl std::error::Error for Refusal {}
