//! What the running service tells the one running it, beside its answers
//! to callers: where it listens, what each reload did, and each send whose
//! outcome the rail left unknown. `payonce serve` prints them; the
//! service needs no `tracing` subscriber for an operator to see them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

use crate::rail::{BoxFuture, Rail, RailAnswer, RailSend};
use crate::reload::Reload;

/// Most unknown outcomes waiting to be told; more are counted, not kept,
/// so a rail that fails every send never grows the service's memory.
pub const NOTICES_WAITING_MAX: usize = 1024;

/// What the service tells the one running it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Notice<'a> {
    /// It listens at this address, over TLS or not.
    Listening {
        /// Where.
        addr: SocketAddr,
        /// Whether it speaks HTTPS there.
        tls: bool,
    },
    /// A SIGHUP reloaded its files, or tried to.
    Reloaded(&'a Reload),
    /// The rail's answer to a send leaves its outcome unknown (a timeout,
    /// a 5xx, a failed TLS handshake or connection): the key stays
    /// claimed, its funds held, until an operator closes it. `error` is
    /// the key's `last_error`.
    OutcomeUnknown {
        /// The ledger's request key (`client:key`).
        key: &'a str,
        /// The withdrawal.
        withdrawal: &'a str,
        /// What went wrong, in the rail adapter's words.
        error: &'a str,
    },
    /// This many unknown outcomes came while [`NOTICES_WAITING_MAX`]
    /// waited to be told, and were not told (each is in the ledger, and in
    /// the operator's queue).
    Untold {
        /// How many.
        count: u64,
    },
}

/// An unknown outcome waiting to be told.
pub(crate) struct Unknown {
    pub(crate) key: String,
    pub(crate) withdrawal: String,
    pub(crate) error: String,
}

impl Unknown {
    pub(crate) fn notice(&self) -> Notice<'_> {
        Notice::OutcomeUnknown {
            key: &self.key,
            withdrawal: &self.withdrawal,
            error: &self.error,
        }
    }
}

/// A rail that tells every unknown outcome of the rail it wraps.
struct TellingRail {
    rail: Arc<dyn Rail>,
    told: mpsc::Sender<Unknown>,
    untold: Arc<AtomicU64>,
}

impl Rail for TellingRail {
    fn send<'a>(&'a self, send: &'a RailSend) -> BoxFuture<'a, RailAnswer> {
        Box::pin(async move {
            let answer = self.rail.send(send).await;
            if let RailAnswer::Unknown { error, .. } = &answer {
                let unknown = Unknown {
                    key: send.key.clone(),
                    withdrawal: send.withdrawal.id().to_string(),
                    error: error.clone(),
                };
                if self.told.try_send(unknown).is_err() {
                    self.untold.fetch_add(1, Ordering::Relaxed);
                }
            }
            answer
        })
    }

    fn reload(&self) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
        self.rail.reload()
    }
}

/// The unknown outcomes a [`telling`] rail heard.
pub(crate) struct Heard {
    receiver: mpsc::Receiver<Unknown>,
    untold: Arc<AtomicU64>,
}

impl Heard {
    /// The next unknown outcome; never `None` while its rail is in use.
    pub(crate) async fn next(&mut self) -> Option<Unknown> {
        self.receiver.recv().await
    }

    /// The next one already heard, without waiting.
    pub(crate) fn next_now(&mut self) -> Option<Unknown> {
        self.receiver.try_recv().ok()
    }

    /// How many were not kept since the last call.
    pub(crate) fn untold(&self) -> u64 {
        self.untold.swap(0, Ordering::Relaxed)
    }
}

/// `rail`, telling its unknown outcomes to the [`Heard`] returned beside it.
pub(crate) fn telling(rail: Arc<dyn Rail>) -> (Arc<dyn Rail>, Heard) {
    let (told, receiver) = mpsc::channel(NOTICES_WAITING_MAX);
    let untold = Arc::new(AtomicU64::new(0));
    let rail = TellingRail {
        rail,
        told,
        untold: untold.clone(),
    };
    (Arc::new(rail), Heard { receiver, untold })
}
