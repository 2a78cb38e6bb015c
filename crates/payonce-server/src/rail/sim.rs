//! The simulated rail: answers after a set latency, refuses or loses its
//! answer at set rates, and can append every transfer it makes to a rail
//! log, synced before it answers, so a test can count what left.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{BoxFuture, Rail, RailAnswer, RailSend};

/// How the simulated rail behaves.
#[derive(Debug, Clone, Default)]
pub struct SimRailConfig {
    /// How long each send takes.
    pub latency: Duration,
    /// The share of sends refused cleanly (nothing leaves), from 0 to 1.
    pub refuse_rate: f64,
    /// The share of sends that leave but whose answer is lost (an unknown
    /// outcome), from 0 to 1.
    pub unknown_rate: f64,
    /// Seeds the draws.
    pub seed: u64,
    /// Where to append one JSON line per transfer.
    pub log: Option<PathBuf>,
}

/// One line of the rail log: a transfer that left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RailLogLine {
    /// The withdrawal id.
    pub withdrawal: String,
    /// The ledger's request key that sent it.
    pub key: String,
    /// The reference the rail gave it.
    pub reference: String,
}

#[derive(Debug)]
struct Draws {
    rng: u64,
    next_reference: u64,
}

/// The simulated rail.
#[derive(Debug)]
pub struct SimRail {
    config: SimRailConfig,
    draws: Mutex<Draws>,
    log: Option<Arc<Mutex<File>>>,
    /// Sets this process's references apart from an earlier one's.
    prefix: u64,
}

impl SimRail {
    /// A simulated rail; opens (creates, appends to) the rail log if set.
    pub fn new(config: SimRailConfig) -> std::io::Result<SimRail> {
        let log = match &config.log {
            Some(path) => {
                let file = OpenOptions::new().create(true).append(true).open(path)?;
                Some(Arc::new(Mutex::new(file)))
            }
            None => None,
        };
        let prefix =
            payonce::Clock::now(&payonce::SystemClock).unix_nanos() ^ u64::from(std::process::id());
        Ok(SimRail {
            draws: Mutex::new(Draws {
                rng: config.seed | 1,
                next_reference: 0,
            }),
            config,
            log,
            prefix,
        })
    }

    /// A number in [0, 1) and the next reference number.
    fn draw(&self) -> (f64, u64) {
        let mut draws = self.draws.lock().unwrap_or_else(PoisonError::into_inner);
        // xorshift64: enough to spread the simulated answers.
        let mut x = draws.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        draws.rng = x;
        draws.next_reference += 1;
        ((x >> 11) as f64 / (1u64 << 53) as f64, draws.next_reference)
    }

    /// Appends `line` to the rail log and syncs it.
    async fn record(&self, line: RailLogLine) -> Result<(), String> {
        let Some(log) = self.log.clone() else {
            return Ok(());
        };
        let mut text = serde_json::to_string(&line).map_err(|e| e.to_string())?;
        text.push('\n');
        let written = tokio::task::spawn_blocking(move || {
            let mut file = log.lock().unwrap_or_else(PoisonError::into_inner);
            file.write_all(text.as_bytes())?;
            file.sync_data()
        })
        .await;
        match written {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(format!("the rail log could not be written: {error}")),
            Err(error) => Err(format!("the rail log writer stopped: {error}")),
        }
    }
}

impl Rail for SimRail {
    fn send<'a>(&'a self, send: &'a RailSend) -> BoxFuture<'a, RailAnswer> {
        Box::pin(async move {
            if !self.config.latency.is_zero() {
                tokio::time::sleep(self.config.latency).await;
            }
            let (roll, number) = self.draw();
            if roll < self.config.refuse_rate {
                return RailAnswer::Refused {
                    reason: "simulated refusal: nothing was sent".to_owned(),
                };
            }
            let reference = format!("sim-{:x}-{number}", self.prefix);
            let line = RailLogLine {
                withdrawal: send.withdrawal.id().to_string(),
                key: send.key.clone(),
                reference: reference.clone(),
            };
            if let Err(error) = self.record(line).await {
                // Whether it left is what the log would have said.
                return RailAnswer::Unknown {
                    error,
                    timed_out: false,
                };
            }
            if roll < self.config.refuse_rate + self.config.unknown_rate {
                return RailAnswer::Unknown {
                    error: "simulated: the transfer left but its answer was lost".to_owned(),
                    timed_out: number.is_multiple_of(2),
                };
            }
            RailAnswer::Sent { reference }
        })
    }
}
