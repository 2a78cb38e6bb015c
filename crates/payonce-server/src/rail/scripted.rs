//! The test rail: answers from a script, counts every call, and can hold a
//! send until the test lets it go, so a test can make a key stay in flight
//! exactly as long as it needs.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use tokio::sync::{Semaphore, mpsc};

use super::{BoxFuture, Rail, RailAnswer, RailSend};

/// What the test rail does with one send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptedSend {
    /// Sends, with a reference of its own.
    Send,
    /// Refuses cleanly, for this reason.
    Refuse(String),
    /// Loses the answer: unknown, timed out or not.
    Unknown {
        /// Whether it is a timeout.
        timed_out: bool,
    },
    /// Tells [`ScriptedRail::held`] and waits for
    /// [`ScriptedRail::release`], then sends.
    Hold,
}

/// The test rail. Unscripted sends are sent.
#[derive(Debug)]
pub struct ScriptedRail {
    script: Mutex<VecDeque<ScriptedSend>>,
    calls: Mutex<Vec<(String, String)>>,
    holding: mpsc::UnboundedSender<String>,
    held: tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>,
    gate: Semaphore,
}

impl Default for ScriptedRail {
    fn default() -> Self {
        let (holding, held) = mpsc::unbounded_channel();
        ScriptedRail {
            script: Mutex::default(),
            calls: Mutex::default(),
            holding,
            held: tokio::sync::Mutex::new(held),
            gate: Semaphore::new(0),
        }
    }
}

impl ScriptedRail {
    /// Queues what the next unscripted send does.
    pub fn then(&self, send: ScriptedSend) {
        self.script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(send);
    }

    /// Every call so far: withdrawal id and ledger key.
    pub fn calls(&self) -> Vec<(String, String)> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until a held send has started; returns its ledger key.
    pub async fn held(&self) -> Option<String> {
        self.held.lock().await.recv().await
    }

    /// Lets one held send go on.
    pub fn release(&self) {
        self.gate.add_permits(1);
    }
}

impl Rail for ScriptedRail {
    fn send<'a>(&'a self, send: &'a RailSend) -> BoxFuture<'a, RailAnswer> {
        Box::pin(async move {
            let number = {
                let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
                calls.push((send.withdrawal.id().to_string(), send.key.clone()));
                calls.len()
            };
            let next = self
                .script
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front()
                .unwrap_or(ScriptedSend::Send);
            match next {
                ScriptedSend::Send => {}
                ScriptedSend::Refuse(reason) => return RailAnswer::Refused { reason },
                ScriptedSend::Unknown { timed_out } => {
                    return RailAnswer::Unknown {
                        error: "scripted: the answer was lost".to_owned(),
                        timed_out,
                    };
                }
                ScriptedSend::Hold => {
                    let _ = self.holding.send(send.key.clone());
                    if let Ok(permit) = self.gate.acquire().await {
                        permit.forget();
                    }
                }
            }
            RailAnswer::Sent {
                reference: format!("ref-{number}"),
            }
        })
    }
}
