//! A granted claim, waiting for its send's result.

use std::fmt;

use payonce_model::{Reason, RequestKey, WithdrawalRequest};
use tracing::warn;

use super::{Ledger, Wait};
use crate::command::{FailureCause, SendResult};
use crate::decide::proposal;

/// The answer to [`Ledger::claim`].
#[derive(Debug)]
#[must_use = "a granted claim must be completed, or its key stays in flight"]
pub enum Claim {
    /// The claim is on stable storage: send now, then
    /// [`complete`](Ledger::complete) the ticket.
    Granted(Ticket),
    /// The key already has this outcome: do not send.
    Replayed(WithdrawalRequest),
}

/// A claim on stable storage, waiting for its send's result.
///
/// Dropped without [`Ledger::complete`], it leaves the key in flight, records
/// that it was abandoned, and logs a warning. Dropping does not wait for
/// stable storage: the note is appended, and made durable by the next sync
/// of anyone. It takes the ledger's lock for the time of a decision, and
/// writes only if more than `payonce_log::PENDING_LEN_MAX` bytes of events
/// are waiting to be written (then it writes them, as any append does), so
/// a request future cancelled mid-send on an async executor, which drops
/// its ticket, does not block that thread on the disk in the usual case.
#[must_use = "complete the ticket with what the send did"]
pub struct Ticket {
    pub(super) ledger: Ledger,
    pub(super) key: RequestKey,
    pub(super) request: WithdrawalRequest,
    pub(super) claimed_seq: u64,
    pub(super) completed: bool,
}

impl Ticket {
    /// The claimed key.
    pub fn key(&self) -> &RequestKey {
        &self.key
    }
    /// The request to send.
    pub fn request(&self) -> &WithdrawalRequest {
        &self.request
    }
    /// Sequence number of the claim in the log.
    pub fn claimed_seq(&self) -> u64 {
        self.claimed_seq
    }

    /// Records that the send's outcome is unknown, for reasons other than an
    /// error the caller holds; waits for stable storage as `wait` says.
    pub(super) fn fail(&mut self, error: &str, cause: FailureCause, wait: Wait) {
        self.completed = true;
        warn!(
            key = %self.key, withdrawal = %self.request.id(), error,
            "the send's outcome is unknown; the key stays claimed until it is resolved or released"
        );
        let result = SendResult::Failed {
            error: Reason::lossy(error),
            cause,
        };
        let proposal = proposal::complete(self.key.clone(), result);
        if let Err(failure) = self.ledger.execute_then(proposal, wait) {
            warn!(key = %self.key, %failure, "could not record the unknown outcome; the claim stands");
        }
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("key", &self.key)
            .field("withdrawal", self.request.id())
            .field("claimed_seq", &self.claimed_seq)
            .finish_non_exhaustive()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.completed {
            self.fail(
                "the claim's ticket was dropped without being completed",
                FailureCause::Abandoned,
                Wait::Appended,
            );
        }
    }
}
