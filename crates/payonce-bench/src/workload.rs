//! The seeded workload every store runs: who submits what, under which key,
//! and what the fake rail answers.

use payonce::NewWithdrawal;
use payonce_model::{Actor, Amount, Currency, Destination, Reference};
use serde::{Deserialize, Serialize};

use crate::error::BenchError;

/// Most threads one run may start.
pub const THREADS_MAX: usize = 1024;
/// Most submissions one run may make, over all its threads.
pub const SUBMISSIONS_MAX: usize = 20_000_000;

/// What share of submissions, in percent, is of each kind. Whatever the
/// shares leave is new submissions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mix {
    /// The same key and withdrawal as an earlier submission of the thread:
    /// a retry, answered with the recorded outcome (or in flight).
    pub retry_percent: u32,
    /// A fresh key for a withdrawal an earlier submission of the thread
    /// claimed: a second client, refused with a conflict naming the holder.
    pub second_key_percent: u32,
    /// An earlier key of the thread for another of its withdrawals: a key
    /// reused by mistake, refused with a conflict naming the fields.
    pub key_reuse_percent: u32,
    /// Of the new submissions, the share whose send fails with an unknown
    /// outcome, leaving the key in flight.
    pub rail_failure_percent: u32,
}

impl Mix {
    /// 80% new submissions, 10% retries, 10% second keys; the rail always
    /// succeeds.
    pub const STANDARD: Mix = Mix {
        retry_percent: 10,
        second_key_percent: 10,
        key_reuse_percent: 0,
        rail_failure_percent: 0,
    };

    /// Every kind of answer at least now and then: for checking that the
    /// stores agree.
    pub const EVERY_ANSWER: Mix = Mix {
        retry_percent: 15,
        second_key_percent: 15,
        key_reuse_percent: 10,
        rail_failure_percent: 20,
    };

    fn validate(&self) -> Result<(), BenchError> {
        let refused = self.retry_percent + self.second_key_percent + self.key_reuse_percent;
        if refused > 100 || self.rail_failure_percent > 100 {
            return Err(BenchError::Setting {
                setting: "mix",
                value: format!("{self:?}"),
                rule: "the shares add up to at most 100%, and rail failures are at most 100%",
            });
        }
        Ok(())
    }
}

/// What a workload is made from: the same spec gives the same workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// Seeds every random choice.
    pub seed: u64,
    /// Submitting threads, each with its own stream of submissions.
    pub threads: usize,
    /// Submissions per thread.
    pub submissions_per_thread: usize,
    /// The kinds of submission.
    pub mix: Mix,
}

/// What the fake rail does with a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RailScript {
    /// Marks the withdrawal sent with the op's reference.
    Succeed,
    /// Fails with an unknown outcome.
    Fail,
}

/// One submission: a key, the withdrawal (an index into
/// [`Workload::withdrawals`]) and what the rail will answer if called.
#[derive(Debug, Clone)]
pub struct Op {
    /// The request key.
    pub key: String,
    /// Index of the withdrawal in [`Workload::withdrawals`].
    pub withdrawal: usize,
    /// What the rail does if this submission sends.
    pub rail: RailScript,
    /// The rail's reference for a successful send.
    pub reference: Reference,
}

/// Every thread's stream of submissions and the withdrawals they name,
/// in the order a store creates them.
#[derive(Debug, Clone)]
pub struct Workload {
    /// What was generated from.
    pub spec: WorkloadSpec,
    /// The withdrawals to create before the timed region.
    pub withdrawals: Vec<NewWithdrawal>,
    /// One stream of submissions per thread.
    pub threads: Vec<Vec<Op>>,
}

impl Workload {
    /// Generates the workload for `spec`.
    ///
    /// A thread's retries, second keys and reused keys name only its own
    /// earlier submissions, which it has finished before making them: so
    /// every answer is the same whatever the threads' interleaving, and
    /// the stores can be compared answer by answer.
    pub fn generate(spec: WorkloadSpec) -> Result<Workload, BenchError> {
        spec.mix.validate()?;
        if spec.threads == 0 || spec.threads > THREADS_MAX {
            return Err(BenchError::Setting {
                setting: "threads",
                value: spec.threads.to_string(),
                rule: "from 1 to THREADS_MAX (1024)",
            });
        }
        let total = spec.threads.checked_mul(spec.submissions_per_thread);
        if total.is_none_or(|total| total > SUBMISSIONS_MAX) {
            return Err(BenchError::Setting {
                setting: "submissions_per_thread",
                value: spec.submissions_per_thread.to_string(),
                rule: "threads × submissions per thread at most SUBMISSIONS_MAX (20,000,000)",
            });
        }
        let mut withdrawals = Vec::new();
        let mut threads = Vec::with_capacity(spec.threads);
        for thread in 0..spec.threads {
            let mut rng = Rng::new(spec.seed ^ (thread as u64).wrapping_mul(0xA076_1D64_78BD_642F));
            let mut ops = Vec::with_capacity(spec.submissions_per_thread);
            // This thread's new submissions so far: (key, withdrawal).
            let mut earlier: Vec<(String, usize)> = Vec::new();
            for index in 0..spec.submissions_per_thread {
                let roll = rng.below(100);
                let mix = spec.mix;
                let retry = u64::from(mix.retry_percent);
                let second = retry + u64::from(mix.second_key_percent);
                let reuse = second + u64::from(mix.key_reuse_percent);
                let reference = reference(&mut rng)?;
                let pick = |rng: &mut Rng| earlier.get(rng.below(earlier.len() as u64) as usize);
                let op = if roll < retry && !earlier.is_empty() {
                    pick(&mut rng).map(|(key, withdrawal)| Op {
                        key: key.clone(),
                        withdrawal: *withdrawal,
                        rail: RailScript::Succeed,
                        reference: reference.clone(),
                    })
                } else if roll < second && !earlier.is_empty() {
                    let key = request_key(&mut rng, thread, index);
                    pick(&mut rng).map(|(_, withdrawal)| Op {
                        key,
                        withdrawal: *withdrawal,
                        rail: RailScript::Succeed,
                        reference: reference.clone(),
                    })
                } else if roll < reuse && earlier.len() >= 2 {
                    let first = pick(&mut rng).cloned();
                    let other = pick(&mut rng).cloned();
                    match (first, other) {
                        (Some((key, own)), Some((_, other))) if own != other => Some(Op {
                            key,
                            withdrawal: other,
                            rail: RailScript::Succeed,
                            reference: reference.clone(),
                        }),
                        _ => None,
                    }
                } else {
                    None
                };
                let op = match op {
                    Some(op) => op,
                    None => {
                        let withdrawal = withdrawals.len();
                        withdrawals.push(new_withdrawal(&mut rng)?);
                        let key = request_key(&mut rng, thread, index);
                        earlier.push((key.clone(), withdrawal));
                        let rail = if rng.below(100) < u64::from(mix.rail_failure_percent) {
                            RailScript::Fail
                        } else {
                            RailScript::Succeed
                        };
                        Op {
                            key,
                            withdrawal,
                            rail,
                            reference,
                        }
                    }
                };
                ops.push(op);
            }
            threads.push(ops);
        }
        Ok(Workload {
            spec,
            withdrawals,
            threads,
        })
    }

    /// Submissions over all threads.
    pub fn submissions(&self) -> usize {
        self.threads.iter().map(Vec::len).sum()
    }
}

/// A request key shaped like the UUIDs services use (36 characters), unique
/// per thread and index.
fn request_key(rng: &mut Rng, thread: usize, index: usize) -> String {
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        rng.next() as u32,
        thread as u16,
        (index >> 16) as u16,
        index as u16,
        rng.next() & 0xFFFF_FFFF_FFFF
    )
}

fn reference(rng: &mut Rng) -> Result<Reference, BenchError> {
    Ok(Reference::new(format!(
        "0x{:016x}{:016x}",
        rng.next(),
        rng.next()
    ))?)
}

const CURRENCIES: [&str; 4] = ["USDC", "USDT", "BTC", "ETH"];

fn new_withdrawal(rng: &mut Rng) -> Result<NewWithdrawal, BenchError> {
    let amount = format!("{}.{:02}", 1 + rng.below(100_000), rng.below(100));
    let currency = CURRENCIES[rng.below(CURRENCIES.len() as u64) as usize];
    // An address the length of an Ethereum one.
    let destination = format!(
        "0x{:016x}{:016x}{:08x}",
        rng.next(),
        rng.next(),
        rng.next() as u32
    );
    let requested_by = format!("user-{}", rng.below(10_000));
    Ok(NewWithdrawal {
        amount: Amount::parse(&amount)?,
        currency: Currency::new(currency)?,
        destination: Destination::new(&destination)?,
        requested_by: Actor::new(&requested_by)?,
    })
}

/// SplitMix64: small, fast, and the same on every machine, which is all a
/// reproducible workload needs.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `bound` (0 when `bound` is 0).
    fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 { 0 } else { self.next() % bound }
    }
}
