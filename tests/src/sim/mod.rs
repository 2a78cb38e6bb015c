//! The deterministic simulator: one seed drives a whole custody service
//! around the real ledger, in simulated time, in one thread.
//!
//! Several clients submit, retry and race: the user's phone and then the
//! laptop under another key, an operator's re-drive under a fresh key, a
//! provider's webhook replayed under a fresh key. Each send goes through
//! the two-phase API (`claim`, then `complete`), so many sends are in
//! flight at once and their interleaving is a pure function of the seed. A
//! simulated rail answers after a latency drawn from the seed, or never
//! before the client gives up; it moves the money or not, refuses cleanly,
//! or its client panics. The disk injects faults (failed writes and syncs,
//! a full disk...) after which a supervisor restarts the service, and loses
//! power between or inside operations, dropping, keeping or garbling what
//! was not synced. An operator sweeps the keys left in flight and resolves
//! or releases each from the rail's truth.
//!
//! Every step is checked by [`crate::harness::World`]; a failing seed panics
//! with the message of the check that failed, and [`run_seeds`] turns that
//! into the one command that replays it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use payonce_log::{CrashMode, Fault};
use payonce_model::WithdrawalRequest;
use payonce_runs::MERGE_TRIGGER;

use crate::harness::{
    Answer, CrashPlan, Later, SendKind, SlotId, Stats, World, WorldConfig, later,
};
use crate::rng::Rng;

/// Events one seed simulates, unless its queue runs dry first.
pub const EVENTS_MAX: u64 = 120;

/// Mean simulated milliseconds between snapshots the service takes.
const SNAPSHOT_EVERY_MS: u64 = 1_500;

/// Mean simulated milliseconds between restores of an old snapshot.
const RESTORE_EVERY_MS: u64 = 5_000;

/// Mixed into a seed for the draws of snapshots.
const SNAPSHOT_SEED_MIX: u64 = 0x5eed_5a45_0000_0001;

/// Withdrawals one seed creates.
const WITHDRAWALS_MAX: usize = 40;

/// How long a client waits for the rail before giving up, in simulated
/// milliseconds.
const CLIENT_TIMEOUT_MS: u64 = 1_000;

/// How often a client asks again after no answer, an unknown outcome or
/// a storage failure, before leaving the key to the operator.
const ATTEMPTS_MAX: u32 = 4;

/// Who is submitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Client {
    /// The user's phone: the first submission.
    Phone,
    /// The same user on a laptop, under its own key, moments later.
    Laptop,
    /// An operator re-driving a stuck item with a fresh key.
    Redrive(u32),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Create,
    Submit {
        client: Client,
        withdrawal: usize,
        attempt: u32,
    },
    CallRail {
        slot: SlotId,
    },
    RailAnswers {
        slot: SlotId,
    },
    ClientGivesUp {
        slot: SlotId,
    },
    Webhook {
        withdrawal: usize,
        number: u32,
    },
    /// The rail reports later what became of a sent withdrawal.
    RailReport {
        withdrawal: usize,
    },
    /// An operator corrects an outcome recorded in error.
    Correction {
        withdrawal: usize,
    },
    OperatorSweep,
    PowerLoss,
    Fault,
    Restart,
    /// The service's snapshot thread takes a snapshot of the projections.
    Snapshot,
    /// Someone restores an old copy of the snapshots' directory, whole,
    /// damaged or cut, and the service restarts.
    RestoreSnapshot,
}

/// What a seed's world is like: how often things go wrong.
#[derive(Debug, Clone, Copy)]
struct Weather {
    /// Mean simulated milliseconds between power losses; 0 for none.
    power_loss_every_ms: u64,
    /// Mean simulated milliseconds between storage faults; 0 for none.
    fault_every_ms: u64,
    /// Percent of sends the rail completes.
    success_percent: u64,
    /// Percent of slow answers (past the client's timeout).
    slow_percent: u64,
}

/// What a simulation went through, over one or many seeds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Seeds simulated.
    pub seeds: u64,
    /// Events simulated.
    pub events: u64,
    /// Withdrawals created.
    pub withdrawals: u64,
    /// Submissions, first attempts and retries.
    pub submissions: u64,
    /// Retries under the same key.
    pub retries: u64,
    /// A second device racing the first under its own key.
    pub races: u64,
    /// Operator re-drives under a fresh key.
    pub redrives: u64,
    /// Replayed webhooks.
    pub webhooks: u64,
    /// Later reports of the rail.
    pub rail_reports: u64,
    /// Operator corrections asked for.
    pub corrections: u64,
    /// Clients that gave up waiting for the rail.
    pub client_timeouts: u64,
    /// Service restarts after a storage fault.
    pub restarts: u64,
    /// The ledger's world: steps, power losses, faults, rail calls...
    pub world: Stats,
}

impl SimStats {
    /// Adds `other` to these counters.
    pub fn add(&mut self, other: &SimStats) {
        self.seeds += other.seeds;
        self.events += other.events;
        self.withdrawals += other.withdrawals;
        self.submissions += other.submissions;
        self.retries += other.retries;
        self.races += other.races;
        self.redrives += other.redrives;
        self.webhooks += other.webhooks;
        self.rail_reports += other.rail_reports;
        self.corrections += other.corrections;
        self.client_timeouts += other.client_timeouts;
        self.restarts += other.restarts;
        self.world.add(&other.world);
    }
}

struct Sim {
    rng: Rng,
    /// Draws for snapshots alone, so a seed's other draws are what they
    /// were before snapshots existed.
    snapshot_rng: Rng,
    weather: Weather,
    world: World,
    now_ms: u64,
    queue: BinaryHeap<Reverse<(u64, u64, Event)>>,
    scheduled: u64,
    withdrawals: Vec<WithdrawalRequest>,
    /// Granted claims whose client is still waiting: slot to the
    /// submission to retry if the process dies under it.
    waiting: BTreeMap<SlotId, (Client, usize, u32)>,
    restart_scheduled: bool,
    redrives: u32,
    stats: SimStats,
}

fn key(client: Client, withdrawal: &WithdrawalRequest) -> String {
    match client {
        Client::Phone => format!("phone-{}", withdrawal.id()),
        Client::Laptop => format!("laptop-{}", withdrawal.id()),
        Client::Redrive(number) => format!("redrive-{}-{number}", withdrawal.id()),
    }
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let config = WorldConfig {
            accept_foreign_ids: rng.percent(10),
            log_refusals: rng.percent(70),
            // From the seed, not the generator, so every other draw of a
            // seed is what it was before this setting existed.
            replay_on_two_threads: seed % 2 == 1,
            set_apart_settled: seed / 2 % 2 == 1,
        };
        let weather = Weather {
            power_loss_every_ms: [0, 4_000, 1_500][rng.below(3) as usize],
            fault_every_ms: [0, 5_000, 2_000][rng.below(3) as usize],
            success_percent: [90, 60, 30][rng.below(3) as usize],
            slow_percent: [2, 10, 30][rng.below(3) as usize],
        };
        let mut sim = Sim {
            rng,
            snapshot_rng: Rng::new(seed ^ SNAPSHOT_SEED_MIX),
            weather,
            world: World::new(config),
            now_ms: 0,
            queue: BinaryHeap::new(),
            scheduled: 0,
            withdrawals: Vec::new(),
            waiting: BTreeMap::new(),
            restart_scheduled: false,
            redrives: 0,
            stats: SimStats {
                seeds: 1,
                ..SimStats::default()
            },
        };
        sim.schedule(0, Event::Create);
        sim.schedule(500, Event::OperatorSweep);
        let first_snapshot = sim.snapshot_rng.below(SNAPSHOT_EVERY_MS * 2);
        sim.schedule(first_snapshot, Event::Snapshot);
        let first_restore = sim.snapshot_rng.below(RESTORE_EVERY_MS * 2);
        sim.schedule(first_restore, Event::RestoreSnapshot);
        if weather.power_loss_every_ms > 0 {
            let after = sim.rng.below(weather.power_loss_every_ms * 2);
            sim.schedule(after, Event::PowerLoss);
        }
        if weather.fault_every_ms > 0 {
            let after = sim.rng.below(weather.fault_every_ms * 2);
            sim.schedule(after, Event::Fault);
        }
        sim
    }

    fn schedule(&mut self, after_ms: u64, event: Event) {
        self.scheduled += 1;
        self.queue
            .push(Reverse((self.now_ms + after_ms, self.scheduled, event)));
    }

    fn run(mut self) -> SimStats {
        while self.stats.events < EVENTS_MAX {
            let Some(Reverse((at, _, event))) = self.queue.pop() else {
                break;
            };
            self.world
                .advance(Duration::from_millis(at.saturating_sub(self.now_ms)));
            self.now_ms = self.now_ms.max(at);
            self.stats.events += 1;
            self.handle(event);
            self.notice_lost_claims();
            if self.world.poisoned() && !self.restart_scheduled {
                // The service's calls fail; its supervisor restarts it.
                self.restart_scheduled = true;
                let after = 20 + self.rng.below(200);
                self.schedule(after, Event::Restart);
            }
        }
        // Drain the clients' claims, then one last close and reopen.
        self.world.reopen();
        self.stats.world = self.world.stats();
        self.stats
    }

    /// Clients whose granted claim vanished with the process (a power loss
    /// or a restart) never heard an answer: they ask again.
    fn notice_lost_claims(&mut self) {
        let live = self.world.slots();
        let lost: Vec<SlotId> = self
            .waiting
            .keys()
            .filter(|slot| !live.contains(slot))
            .copied()
            .collect();
        for slot in lost {
            if let Some((client, withdrawal, attempt)) = self.waiting.remove(&slot) {
                self.retry(client, withdrawal, attempt);
            }
        }
    }

    fn retry(&mut self, client: Client, withdrawal: usize, attempt: u32) {
        if attempt + 1 < ATTEMPTS_MAX {
            self.stats.retries += 1;
            let after = 100 + self.rng.below(2_000);
            self.schedule(
                after,
                Event::Submit {
                    client,
                    withdrawal,
                    attempt: attempt + 1,
                },
            );
        }
    }

    fn send_kind(&mut self) -> SendKind {
        if self.rng.percent(self.weather.success_percent) {
            return SendKind::Succeed;
        }
        match self.rng.below(10) {
            0..=2 => SendKind::TimeoutAfterSending,
            3..=4 => SendKind::FailBeforeSending,
            5..=7 => SendKind::Refuse,
            8 => SendKind::Panic,
            _ if self.rng.percent(50) => SendKind::WrongOutcome,
            _ => SendKind::Unsettled,
        }
    }

    fn fault(&mut self) -> Fault {
        let nth = self.rng.below(2) + 1;
        match self.rng.below(7) {
            0 => Fault::WriteFails { nth },
            1 => Fault::WriteShort {
                nth,
                landed: self.rng.below(200) as usize,
            },
            2 => Fault::SyncFails { nth },
            3 => Fault::DirSyncFails { nth },
            4 => Fault::RenameFails { nth },
            5 => Fault::CreateFails { nth },
            _ => Fault::NoSpace {
                budget: self.rng.below(3_000),
            },
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Create => self.create(),
            Event::Submit {
                client,
                withdrawal,
                attempt,
            } => self.submit(client, withdrawal, attempt),
            Event::CallRail { slot } => self.call_rail(slot),
            Event::RailAnswers { slot } => {
                if let Some((client, withdrawal, attempt)) = self.waiting.remove(&slot) {
                    self.world.finish(slot);
                    if !matches!(
                        self.world.last_answer(),
                        Some(Answer::Outcome(_) | Answer::Rejected | Answer::Refused(_))
                    ) {
                        self.retry(client, withdrawal, attempt);
                    }
                }
            }
            Event::ClientGivesUp { slot } => {
                if let Some((client, withdrawal, attempt)) = self.waiting.remove(&slot) {
                    self.stats.client_timeouts += 1;
                    self.world.time_out(slot);
                    self.retry(client, withdrawal, attempt);
                }
            }
            Event::Webhook { withdrawal, number } => {
                let request = self.withdrawals[withdrawal].clone();
                self.stats.webhooks += 1;
                let key = format!("hook-{}-{number}", request.id());
                let confirmed = self.rng.percent(50);
                self.world.webhook(&key, &request, confirmed);
            }
            Event::RailReport { withdrawal } => self.rail_report(withdrawal),
            Event::Correction { withdrawal } => self.correction(withdrawal),
            Event::OperatorSweep => {
                for entry in self.world.ledger().in_flight() {
                    if !entry.send_running && self.rng.percent(70) {
                        self.world.operator(&entry.key);
                    }
                }
                let after = 500 + self.rng.below(3_000);
                self.schedule(after, Event::OperatorSweep);
            }
            Event::PowerLoss => {
                let mode = [
                    CrashMode::DropUnsynced,
                    CrashMode::KeepPrefix,
                    CrashMode::Garble,
                    CrashMode::Pages,
                ][self.rng.below(4) as usize];
                let seed = self.rng.next_u64();
                if self.rng.percent(30) {
                    self.world.crash(mode, seed);
                } else {
                    // Somewhere inside one of the next operations.
                    let after = self.rng.below(16);
                    self.world.plan_crash(CrashPlan { after, mode, seed });
                }
                let after = self.rng.below(self.weather.power_loss_every_ms * 2);
                self.schedule(after, Event::PowerLoss);
            }
            Event::Fault => {
                let fault = self.fault();
                self.world.arm(fault);
                let after = self.rng.below(self.weather.fault_every_ms * 2);
                self.schedule(after, Event::Fault);
            }
            Event::Restart => {
                self.restart_scheduled = false;
                self.stats.restarts += 1;
                self.world.reopen();
            }
            Event::Snapshot => {
                if !self.world.poisoned() {
                    self.world.take_snapshot();
                }
                if !self.world.poisoned() {
                    self.merge_runs();
                }
                let after = self.snapshot_rng.below(SNAPSHOT_EVERY_MS * 2);
                self.schedule(after, Event::Snapshot);
            }
            Event::RestoreSnapshot => {
                let pick = self.snapshot_rng.next_u64();
                let damage = self.snapshot_rng.below(3) as u8;
                self.world.restore_old_snapshot(pick, damage);
                let after = self.snapshot_rng.below(RESTORE_EVERY_MS * 2);
                self.schedule(after, Event::RestoreSnapshot);
            }
        }
    }

    /// Merges the ledger's runs as its settling thread would; now and then,
    /// with the power planned to fail within the merge's first writes.
    fn merge_runs(&mut self) {
        let wanted =
            (self.world.ledger().memory()).is_ok_and(|memory| memory.runs >= MERGE_TRIGGER);
        if wanted && self.snapshot_rng.percent(30) {
            let mode = [
                CrashMode::DropUnsynced,
                CrashMode::KeepPrefix,
                CrashMode::Garble,
                CrashMode::Pages,
            ][self.snapshot_rng.below(4) as usize];
            let (after, seed) = (self.snapshot_rng.below(6), self.snapshot_rng.next_u64());
            self.world.plan_crash(CrashPlan { after, mode, seed });
        }
        self.world.merge_runs();
    }

    fn create(&mut self) {
        let amount = ["1", "25.5", "100"][self.rng.below(3) as usize];
        let currency = if self.rng.percent(70) { "USDC" } else { "BTC" };
        if let Some(withdrawal) = self.world.create(amount, currency) {
            let index = self.withdrawals.len();
            self.withdrawals.push(withdrawal);
            self.stats.withdrawals += 1;
            let submit = |client| Event::Submit {
                client,
                withdrawal: index,
                attempt: 0,
            };
            let after = self.rng.below(20);
            self.schedule(after, submit(Client::Phone));
            if self.rng.percent(30) {
                self.stats.races += 1;
                let after = self.rng.below(40);
                self.schedule(after, submit(Client::Laptop));
            }
            if self.rng.percent(15) {
                self.stats.redrives += 1;
                self.redrives += 1;
                let after = 500 + self.rng.below(5_000);
                self.schedule(after, submit(Client::Redrive(self.redrives)));
            }
            if self.rng.percent(15) {
                let after = 100 + self.rng.below(4_000);
                let number = self.rng.below(1_000) as u32;
                self.schedule(
                    after,
                    Event::Webhook {
                        withdrawal: index,
                        number,
                    },
                );
            }
            if self.rng.percent(20) {
                let after = 1_000 + self.rng.below(8_000);
                self.schedule(after, Event::RailReport { withdrawal: index });
            }
            if self.rng.percent(3) {
                let after = 2_000 + self.rng.below(8_000);
                self.schedule(after, Event::Correction { withdrawal: index });
            }
        }
        if self.withdrawals.len() < WITHDRAWALS_MAX {
            let after = 50 + self.rng.below(600);
            self.schedule(after, Event::Create);
        }
    }

    /// The key holding withdrawal `index`'s claim, and its outcome, if it
    /// has one.
    fn holder_outcome(&self, index: usize) -> Option<(String, WithdrawalRequest)> {
        let id = self.withdrawals[index].id().to_string();
        let key = self.world.model().claims.get(&id)?.clone();
        let outcome = self.world.model().outcome(&key)?.clone();
        Some((key, outcome))
    }

    /// The rail moves withdrawal `index` on (confirmed, failed on the
    /// rail, bumped), if money moved for it, and reports it to the key
    /// holding it, unless the report is lost; or a report replayed, which
    /// changes nothing. For a withdrawal that never moved, a report comes
    /// for a key that holds no outcome of it.
    fn rail_report(&mut self, index: usize) {
        self.stats.rail_reports += 1;
        let request = self.withdrawals[index].clone();
        let truth = self.world.rail_truth(request.id().as_str()).cloned();
        let (Some(truth), Some((key, _))) = (truth, self.holder_outcome(index)) else {
            self.world
                .rail_report("nobody", &fixture_sent(&request, "0xlate"));
            return;
        };
        let report = match self.rng.below(10) {
            0..=4 => Some(Later::Confirmed),
            5..=6 => Some(Later::Failed),
            7..=8 => Some(Later::Bumped(self.rng.below(3) as u8)),
            _ => None,
        };
        let later = report.and_then(|report| later(&truth, report));
        match later {
            Some(later) => {
                let told = self.rng.percent(80);
                self.world.rail_moves_on(&key, &later, told);
            }
            None => self.world.rail_report(&key, &truth),
        }
    }

    /// An operator compares the outcome recorded for withdrawal `index`
    /// with the rail's truth and corrects it to the truth; the same outcome
    /// again changes nothing.
    fn correction(&mut self, index: usize) {
        let request = self.withdrawals[index].clone();
        let (Some(truth), Some((key, _))) = (
            self.world.rail_truth(request.id().as_str()).cloned(),
            self.holder_outcome(index),
        ) else {
            return;
        };
        self.stats.corrections += 1;
        self.world.correct(&key, &truth);
    }

    fn submit(&mut self, client: Client, withdrawal: usize, attempt: u32) {
        let request = self.withdrawals[withdrawal].clone();
        let key = key(client, &request);
        self.stats.submissions += 1;
        match self.world.begin(&key, &request) {
            Some(slot) => {
                self.waiting.insert(slot, (client, withdrawal, attempt));
                let after = self.rng.below(5);
                self.schedule(after, Event::CallRail { slot });
            }
            None => match self.world.last_answer() {
                // Replayed, or another key holds it: the client looks it up.
                Some(Answer::Outcome(_) | Answer::Held { .. } | Answer::Refused(_)) => {}
                // Unknown outcome, a storage failure, or no answer at all.
                _ => self.retry(client, withdrawal, attempt),
            },
        }
    }

    fn call_rail(&mut self, slot: SlotId) {
        if !self.waiting.contains_key(&slot) {
            return;
        }
        let kind = self.send_kind();
        self.world.call_rail(slot, kind);
        if !self.world.slot_answered(slot) {
            // The process died during the call; the client hears nothing.
            return;
        }
        if self.rng.percent(self.weather.slow_percent) {
            let after = CLIENT_TIMEOUT_MS + self.rng.below(5_000);
            self.schedule(after, Event::RailAnswers { slot });
            self.schedule(CLIENT_TIMEOUT_MS, Event::ClientGivesUp { slot });
        } else {
            let after = 1 + self.rng.below(CLIENT_TIMEOUT_MS - 1);
            self.schedule(after, Event::RailAnswers { slot });
        }
    }
}

/// Simulates one seed. Panics, naming the check, if any property fails.
pub fn run(seed: u64) -> SimStats {
    Sim::new(seed).run()
}

/// A seed that failed, with what failed and how to replay it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The failed check's message.
    pub message: String,
}

/// The one command that replays `seed`, printing every step.
pub fn replay_command(seed: u64) -> String {
    format!(
        "PAYONCE_SIM_SEED={seed} PAYONCE_TRACE=1 cargo test -p payonce-tests --test it \
         sim:: -- --nocapture"
    )
}

/// Simulates `count` seeds from `first`, stopping at the first failure.
pub fn run_seeds(first: u64, count: u64) -> Result<SimStats, Failure> {
    let mut total = SimStats::default();
    for seed in first..first.saturating_add(count) {
        match catch_unwind(AssertUnwindSafe(|| run(seed))) {
            Ok(stats) => total.add(&stats),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "a panic without a message".to_owned());
                return Err(Failure { seed, message });
            }
        }
    }
    Ok(total)
}

/// `request` (in state requested) sent under `reference`.
#[allow(clippy::expect_used)]
fn fixture_sent(request: &WithdrawalRequest, reference: &str) -> WithdrawalRequest {
    request
        .sent(reference)
        .expect("a requested withdrawal is sent")
}
