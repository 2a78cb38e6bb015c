//! Where a kill landed: the child's phase, and for a child that was
//! submitting, each thread's place in the protocol, read from the last step
//! of its trail and what the reopened ledger holds.

use std::fmt;

use payonce::State;

use super::trail::{Attempt, Step};

/// A place a kill can land. A child killed before it was ready is in
/// [`KillPoint::Open`]; every thread of a child killed later is in exactly
/// one of the others. What a thread is in follows from what survived the
/// kill: a kill cannot tell a claim whose sync was still running from one
/// whose sync had returned (both survive a process kill), so a class names
/// what the next opening finds, not which system call was interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum KillPoint {
    /// Before the child said it was ready: starting, replaying the log, or
    /// recording the opening (or, in a fresh location, creating the ledger).
    Open,
    /// Between submissions: the thread had begun none yet, or was creating
    /// the next withdrawal (a durable write that claims nothing).
    Between,
    /// Inside `submit`, and the log holds nothing of it yet: deciding,
    /// waiting for a group commit to take its claim, or in one whose batch
    /// had not reached the log. A retry, and a key refused for a withdrawal
    /// another key holds, write no claim and stay here until answered.
    Claiming,
    /// The claim is in the log; the rail has not sent.
    Claimed,
    /// The rail sent; the outcome is not in the log.
    Sent,
    /// The outcome, or the send's failure, is in the log; the client had
    /// not yet recorded the answer `submit` was returning.
    Recorded,
    /// After the answer: the client had recorded it (and was syncing an
    /// acknowledgement, or choosing the next submission).
    Answered,
}

impl KillPoint {
    /// Every kill point, in the order a submission passes them.
    pub const ALL: [KillPoint; 7] = [
        KillPoint::Open,
        KillPoint::Between,
        KillPoint::Claiming,
        KillPoint::Claimed,
        KillPoint::Sent,
        KillPoint::Recorded,
        KillPoint::Answered,
    ];

    /// The row's label in the kill-point table.
    pub fn label(self) -> &'static str {
        match self {
            KillPoint::Open => "during open",
            KillPoint::Between => "between submissions (creating a withdrawal)",
            KillPoint::Claiming => "submitting, nothing of it in the log yet",
            KillPoint::Claimed => "claim in the log, not sent",
            KillPoint::Sent => "sent, outcome not in the log",
            KillPoint::Recorded => "outcome in the log, not yet acknowledged",
            KillPoint::Answered => "after the acknowledgement",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Where a thread was when its child was killed, from its trail and the
/// state of the ledger reopened after the kill. An answer of the ledger
/// that no step of the thread explains is an error: the checks should have
/// caught it first.
pub fn classify(trail: &[Step], state: &State) -> Result<KillPoint, String> {
    let point = match trail.last() {
        None | Some(Step::Create) => KillPoint::Between,
        // A retry writes no claim, whatever its key holds from before.
        Some(Step::Begin {
            attempt: Attempt::Retry,
            ..
        }) => KillPoint::Claiming,
        Some(Step::Begin {
            key, withdrawal, ..
        }) => match state.record(key) {
            None => KillPoint::Claiming,
            Some(record) if record.withdrawal().as_str() != withdrawal => {
                return Err(format!(
                    "key {key} holds {}, but was submitted for {withdrawal}",
                    record.withdrawal()
                ));
            }
            Some(record) if record.outcome_state().is_none() && record.last_error().is_none() => {
                KillPoint::Claimed
            }
            Some(_) => return Err(format!("key {key} has an answer in the log and no send")),
        },
        Some(Step::Send { key, .. }) => match state.record(key) {
            None => return Err(format!("key {key} sent without a claim in the log")),
            Some(record) if record.outcome_state().is_none() && record.last_error().is_none() => {
                KillPoint::Sent
            }
            Some(_) => KillPoint::Recorded,
        },
        Some(Step::Ack { .. } | Step::Failed { .. } | Step::Refused { .. }) => KillPoint::Answered,
    };
    Ok(point)
}

/// How many kills landed where. A kill of a submitting child counts once
/// in every class any of its threads was in, so the rows of a run with
/// several threads add up to more than its kills; `threads` counts the
/// threads themselves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillTable {
    kills: [u64; KillPoint::ALL.len()],
    threads: [u64; KillPoint::ALL.len()],
    total: u64,
}

impl KillTable {
    /// Counts a kill before the child was ready.
    pub fn add_open(&mut self) {
        self.kills[KillPoint::Open.index()] += 1;
        self.total += 1;
    }

    /// Counts a kill of a submitting child whose threads were at `points`.
    pub fn add_submitting(&mut self, points: &[KillPoint]) {
        for point in KillPoint::ALL {
            let threads = points.iter().filter(|&&at| at == point).count() as u64;
            self.threads[point.index()] += threads;
            self.kills[point.index()] += u64::from(threads > 0);
        }
        self.total += 1;
    }

    /// Kills counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Kills with at least one thread (or, for [`KillPoint::Open`], the
    /// child) at `point`.
    pub fn kills(&self, point: KillPoint) -> u64 {
        self.kills[point.index()]
    }

    /// Threads at `point` when their child was killed.
    pub fn threads(&self, point: KillPoint) -> u64 {
        self.threads[point.index()]
    }

    /// The kill points no kill landed in.
    pub fn missing(&self) -> Vec<KillPoint> {
        KillPoint::ALL
            .into_iter()
            .filter(|&point| self.kills(point) == 0)
            .collect()
    }
}

/// `12345` as `12,345`, as the tables in the docs write numbers.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

impl fmt::Display for KillTable {
    /// A Markdown table, ready to paste into `docs/runs/reliability.md`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "| kill point | kills | threads |")?;
        writeln!(f, "| --- | ---: | ---: |")?;
        for point in KillPoint::ALL {
            let threads = match point {
                KillPoint::Open => String::new(),
                _ => grouped(self.threads(point)),
            };
            writeln!(
                f,
                "| {} | {} | {threads} |",
                point.label(),
                grouped(self.kills(point))
            )?;
        }
        write!(f, "| all kills | {} | |", grouped(self.total))
    }
}
