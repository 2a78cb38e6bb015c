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

impl WorkloadSpec {
    /// Checks the mix and the counts against their limits before anything
    /// is allocated.
    fn validate(&self) -> Result<(), BenchError> {
        self.mix.validate()?;
        if self.threads == 0 || self.threads > THREADS_MAX {
            return Err(BenchError::Setting {
                setting: "threads",
                value: self.threads.to_string(),
                rule: "from 1 to THREADS_MAX (1024)",
            });
        }
        let total = self.threads.checked_mul(self.submissions_per_thread);
        if total.is_none_or(|total| total > SUBMISSIONS_MAX) {
            return Err(BenchError::Setting {
                setting: "submissions_per_thread",
                value: self.submissions_per_thread.to_string(),
                rule: "threads × submissions per thread at most SUBMISSIONS_MAX (20,000,000)",
            });
        }
        Ok(())
    }
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
        spec.validate()?;
        let mut withdrawals = Vec::new();
        let mut threads = Vec::with_capacity(spec.threads);
        for thread in 0..spec.threads {
            let mut stream = Stream::new(spec, thread, &mut withdrawals);
            let mut ops = Vec::with_capacity(spec.submissions_per_thread);
            for index in 0..spec.submissions_per_thread {
                ops.push(stream.next_op(index)?);
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

/// One thread's stream of submissions while it is generated: its own random
/// numbers, and the new submissions it has made so far, which are all its
/// later submissions may name.
struct Stream<'a> {
    thread: usize,
    mix: Mix,
    rng: Rng,
    /// This thread's new submissions so far: (key, withdrawal).
    earlier: Vec<(String, usize)>,
    /// Every thread's withdrawals, in the order a store creates them.
    withdrawals: &'a mut Vec<NewWithdrawal>,
}

impl<'a> Stream<'a> {
    fn new(spec: WorkloadSpec, thread: usize, withdrawals: &'a mut Vec<NewWithdrawal>) -> Self {
        Stream {
            thread,
            mix: spec.mix,
            rng: Rng::new(spec.seed ^ (thread as u64).wrapping_mul(0xA076_1D64_78BD_642F)),
            earlier: Vec::new(),
            withdrawals,
        }
    }

    /// The thread's submission number `index`: a repeat of an earlier one
    /// if the roll says so and there is one to repeat, else a new one. The
    /// random numbers are drawn in the same order whichever it is, so a
    /// seed always gives the same workload.
    fn next_op(&mut self, index: usize) -> Result<Op, BenchError> {
        let roll = self.rng.below(100);
        let reference = reference(&mut self.rng)?;
        match self.repeat(roll, index, &reference) {
            Some(op) => Ok(op),
            None => self.new_submission(index, reference),
        }
    }

    /// A retry, a second key or a reused key, as `roll` falls in the mix's
    /// shares; `None` when the roll is for a new submission or there are
    /// not enough earlier ones to repeat.
    fn repeat(&mut self, roll: u64, index: usize, reference: &Reference) -> Option<Op> {
        let retry = u64::from(self.mix.retry_percent);
        let second = retry + u64::from(self.mix.second_key_percent);
        let reuse = second + u64::from(self.mix.key_reuse_percent);
        let op = |key: String, withdrawal: usize| Op {
            key,
            withdrawal,
            rail: RailScript::Succeed,
            reference: reference.clone(),
        };
        if roll < retry && !self.earlier.is_empty() {
            self.pick()
                .map(|(key, withdrawal)| op(key.clone(), *withdrawal))
        } else if roll < second && !self.earlier.is_empty() {
            let key = request_key(&mut self.rng, self.thread, index);
            self.pick().map(|(_, withdrawal)| op(key, *withdrawal))
        } else if roll < reuse && self.earlier.len() >= 2 {
            let first = self.pick().cloned();
            let other = self.pick().cloned();
            match (first, other) {
                (Some((key, own)), Some((_, other))) if own != other => Some(op(key, other)),
                _ => None,
            }
        } else {
            None
        }
    }

    /// One of the thread's earlier new submissions, at random.
    fn pick(&mut self) -> Option<&(String, usize)> {
        let at = self.rng.below(self.earlier.len() as u64) as usize;
        self.earlier.get(at)
    }

    /// A new withdrawal under a fresh key, whose send fails as often as the
    /// mix says.
    fn new_submission(&mut self, index: usize, reference: Reference) -> Result<Op, BenchError> {
        let withdrawal = self.withdrawals.len();
        self.withdrawals.push(new_withdrawal(&mut self.rng)?);
        let key = request_key(&mut self.rng, self.thread, index);
        self.earlier.push((key.clone(), withdrawal));
        let rail = if self.rng.below(100) < u64::from(self.mix.rail_failure_percent) {
            RailScript::Fail
        } else {
            RailScript::Succeed
        };
        Ok(Op {
            key,
            withdrawal,
            rail,
            reference,
        })
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
