//! The rail: where a withdrawal leaves custody, behind one async trait.
//!
//! A rail's answer is one of three, and the contract is in what each
//! promises:
//!
//! - [`RailAnswer::Sent`]: the rail took the withdrawal and gave a
//!   reference. The money left.
//! - [`RailAnswer::Refused`]: the rail refused it cleanly and nothing left
//!   the account. The ledger gives the held funds back; the key stays
//!   claimed until an operator releases it.
//! - [`RailAnswer::Unknown`]: anything else. A timeout, a 5xx, a lost
//!   connection, an answer that cannot be read: the money may have left.
//!   The key stays claimed with its funds held until an operator looks at
//!   the rail and resolves or releases it.
//!
//! An implementation that cannot tell answers `Unknown`: only a rail that
//! says "refused" in so many words gives money back.

mod handshake;
mod http;
mod scripted;
mod setup;
mod sim;

use std::future::Future;
use std::pin::Pin;

use payonce::SendFailure;
use payonce_model::WithdrawalRequest;

pub use self::http::{HTTP_RAIL_BODY_LEN_MAX, HttpRail};
pub use self::scripted::{ScriptedRail, ScriptedSend};
pub use self::setup::{HttpRailConfig, HttpRailError};
pub use self::sim::{RailLogLine, SimRail, SimRailConfig};

/// A boxed future that can be sent between threads.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the rail answered to one send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RailAnswer {
    /// Sent under this reference: the money left.
    Sent {
        /// The rail's reference.
        reference: String,
    },
    /// Refused cleanly: nothing left the account.
    Refused {
        /// The rail's reason.
        reason: String,
    },
    /// Not known whether the money left.
    Unknown {
        /// What went wrong.
        error: String,
        /// Whether it was a timeout (the caller answers 504 rather than
        /// 502).
        timed_out: bool,
    },
}

/// One withdrawal handed to the rail.
#[derive(Debug, Clone)]
pub struct RailSend {
    /// The withdrawal, as claimed.
    pub withdrawal: WithdrawalRequest,
    /// The ledger's request key that claimed it: a real rail takes it as
    /// its own idempotency key.
    pub key: String,
}

/// A rail. See the module's documentation for what each answer promises.
pub trait Rail: Send + Sync + 'static {
    /// Hands `send` to the rail and waits for its answer.
    fn send<'a>(&'a self, send: &'a RailSend) -> BoxFuture<'a, RailAnswer>;

    /// Rereads the files the rail was set up from (an HTTPS rail's CA,
    /// client certificate and key) for the sends that start after, all or
    /// nothing: on an error the rail goes on as it was. Returns whether it
    /// had anything to reread; a rail without files has not.
    fn reload(&self) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
        Ok(false)
    }
}

/// An unknown outcome as the error a send reports to the ledger, so the
/// service can tell a timeout from other failures when it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownOutcome {
    /// What went wrong.
    pub error: String,
    /// Whether it was a timeout.
    pub timed_out: bool,
}

impl std::fmt::Display for UnknownOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error)
    }
}

impl std::error::Error for UnknownOutcome {}

impl RailAnswer {
    /// What the ledger records for this answer to a send of `request`.
    pub fn into_result(
        self,
        request: &WithdrawalRequest,
    ) -> Result<WithdrawalRequest, SendFailure> {
        match self {
            // A reference the ledger cannot hold (a control character, too
            // long) is an answer the ledger cannot record: unknown.
            RailAnswer::Sent { reference } => Ok(request.sent(reference)?),
            RailAnswer::Refused { reason } => Err(SendFailure::rejected(reason)),
            RailAnswer::Unknown { error, timed_out } => {
                Err(SendFailure::failed(UnknownOutcome { error, timed_out }))
            }
        }
    }
}
