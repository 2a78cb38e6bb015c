//! [`World`]: the ledger, its disk, the rail and the model, stepped together.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use payonce::{
    Claim, Config, CountingEpochs, DirSnapshots, EventKind, Ledger, LedgerError, ManualClock,
    NewWithdrawal, Refusal, SendFailure, SnapshotPolicy, SnapshotStore, SubmitError, Ticket,
    Timestamp, decode_event, verify_on,
};
use payonce_log::{
    CrashMode, Durability, Fault, LogConfig, LogReader, MemStorage, MemWitness, Storage,
};
use payonce_model::{
    Actor, Amount, Currency, Destination, Reason, WithdrawalId, WithdrawalRequest,
};

use super::checks::{Projection, Shadow, assert_crash_prefix, assert_invariants, records};
use super::disk::{CrashPlan, Disk};
use super::model::{Answer, Completion, Model};
use super::rail::{Rail, RailAnswer, SendKind, impostor, reference, sent, unsettled};
use super::witness::{SimWitness, assert_rollback_refused};
use super::{catching_rail_client_panic, rail_client_panics};

/// Most bytes of one event in the simulated log: small, so segments roll
/// often, yet above any event the harness makes.
const RECORD_MAX: u32 = 1024;

/// Most bytes of one simulated segment: a roll every dozen events or so,
/// so faults and power losses land inside rolls too.
const SEGMENT_LEN_MAX: u64 = 2048;

/// Records between checkpoints, each published to the witness: a few
/// per segment.
const CHECKPOINT_RECORDS: u64 = 5;

/// Most attempts at opening after a failure before the harness gives up.
const OPEN_ATTEMPTS_MAX: u32 = 4;

/// 2026-11-30T12:00:00Z: when every simulated world starts.
pub const START: Timestamp = Timestamp::from_unix_nanos(1_796_040_000_000_000_000);

/// How the ledger under test is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorldConfig {
    /// Accept withdrawal ids the ledger did not mint.
    pub accept_foreign_ids: bool,
    /// Append refusals to the log (unsynced).
    pub log_refusals: bool,
    /// Replay every reopening on two threads; otherwise on one (a
    /// simulated ledger's log is far below the default threshold anyway).
    pub replay_on_two_threads: bool,
    /// Set settled pairs apart at every opening
    /// ([`Config::set_apart_settled`]).
    pub set_apart_settled: bool,
}

impl WorldConfig {
    /// The log settings of every simulated ledger.
    pub fn log() -> LogConfig {
        LogConfig {
            record_max: RECORD_MAX,
            segment_len_max: SEGMENT_LEN_MAX,
            durability: Durability::Always,
            // Checkpoints by count (every few events, so power losses and
            // faults land inside them), at rolls and at close: a thread on
            // a timer would make runs depend on time.
            checkpoint_interval: None,
            checkpoint_records: CHECKPOINT_RECORDS,
            ..LogConfig::default()
        }
    }
}

/// Names a granted claim whose send has not been completed.
pub type SlotId = u64;

struct Slot {
    ticket: Ticket,
    key: String,
    request: WithdrawalRequest,
    /// What the rail answered, once called.
    answer: Option<RailAnswer>,
    /// The rail client panicked: the ticket is dropped while unwinding.
    panicked: bool,
}

/// Counters of what a world went through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Steps taken.
    pub steps: u64,
    /// Power losses, by what they did to unsynced bytes.
    pub crashes_dropping: u64,
    /// Power losses that kept a prefix of unsynced bytes.
    pub crashes_keeping: u64,
    /// Power losses that garbled unsynced bytes.
    pub crashes_garbling: u64,
    /// Power losses that kept or lost each unsynced page on its own.
    pub crashes_paging: u64,
    /// Power losses in the middle of an operation (or of an open).
    pub crashes_mid_operation: u64,
    /// Clean closes and reopens.
    pub reopens: u64,
    /// Disks restored from a backup behind the witness, and refused.
    pub rollbacks_refused: u64,
    /// Snapshots of the projections taken at random points.
    pub snapshots_taken: u64,
    /// Snapshot files put back from earlier: intact, damaged or cut.
    pub snapshots_restored: u64,
    /// Openings that started from a snapshot.
    pub opens_from_snapshot: u64,
    /// Snapshots an opening refused and set aside.
    pub snapshots_refused: u64,
    /// Merges of runs of settled pairs made.
    pub runs_merged: u64,
    /// Merges the disk lost power or failed during.
    pub merges_cut: u64,
    /// Faults armed on the storage.
    pub faults_armed: u64,
    /// Faults the storage injected.
    pub faults_fired: u64,
    /// Opens that failed on an injected fault and were retried.
    pub failed_opens: u64,
    /// Calls that reached the rail.
    pub rail_calls: u64,
    /// Calls that moved money.
    pub money_moved: u64,
    /// Refusals answered.
    pub refusals: u64,
    /// Keys an operator resolved from the rail's truth.
    pub operator_resolves: u64,
    /// Keys an operator released after seeing nothing on the rail.
    pub operator_releases: u64,
    /// Later reports of the rail that moved an outcome on.
    pub advances: u64,
    /// Outcomes an operator corrected.
    pub corrections: u64,
}

impl Stats {
    /// Power losses of every kind.
    pub fn crashes(&self) -> u64 {
        self.crashes_dropping + self.crashes_keeping + self.crashes_garbling + self.crashes_paging
    }

    /// Adds `other` to these counters.
    pub fn add(&mut self, other: &Stats) {
        self.steps += other.steps;
        self.crashes_dropping += other.crashes_dropping;
        self.crashes_keeping += other.crashes_keeping;
        self.crashes_garbling += other.crashes_garbling;
        self.crashes_paging += other.crashes_paging;
        self.crashes_mid_operation += other.crashes_mid_operation;
        self.reopens += other.reopens;
        self.rollbacks_refused += other.rollbacks_refused;
        self.snapshots_taken += other.snapshots_taken;
        self.snapshots_restored += other.snapshots_restored;
        self.opens_from_snapshot += other.opens_from_snapshot;
        self.snapshots_refused += other.snapshots_refused;
        self.runs_merged += other.runs_merged;
        self.merges_cut += other.merges_cut;
        self.faults_armed += other.faults_armed;
        self.faults_fired += other.faults_fired;
        self.failed_opens += other.failed_opens;
        self.rail_calls += other.rail_calls;
        self.money_moved += other.money_moved;
        self.refusals += other.refusals;
        self.operator_resolves += other.operator_resolves;
        self.operator_releases += other.operator_releases;
        self.advances += other.advances;
        self.corrections += other.corrections;
    }
}

/// What callers were told, and so what must survive.
#[derive(Debug, Default)]
struct Acked {
    /// Every event up to this one is on stable storage.
    seq: u64,
    /// Outcomes returned to a caller.
    outcomes: BTreeMap<String, WithdrawalRequest>,
    /// Claims known durable (granted, or a send ran under them): key to
    /// withdrawal id.
    claims: BTreeMap<String, String>,
    /// Keys whose release was asked for without an answer: it may or may
    /// not have happened.
    maybe_released: BTreeSet<String>,
    /// Outcomes a later report or a correction asked for without an
    /// answer may have recorded, by key: it may or may not have happened.
    maybe_moved: BTreeMap<String, Vec<WithdrawalRequest>>,
}

/// The ledger in its simulated world. See the harness documentation.
pub struct World {
    config: WorldConfig,
    clock: Arc<ManualClock>,
    epochs: Arc<CountingEpochs>,
    disk: Disk,
    /// The newest head the ledger published, kept off its disk.
    witness: MemWitness,
    /// The disk as the last clean reopen left it: what restoring a backup
    /// would bring back.
    backup: Option<MemStorage>,
    /// Every snapshot file the ledger wrote, as written: put back later, an
    /// old one in place of the newer ones.
    snapshots_seen: Vec<(String, Vec<u8>)>,
    ledger: Option<Ledger>,
    model: Model,
    rail: Rail,
    slots: BTreeMap<SlotId, Slot>,
    next_slot: SlotId,
    withdrawals: Vec<WithdrawalRequest>,
    /// A storage fault fired since the ledger was opened.
    poisoned: bool,
    acked: Acked,
    shadow: Shadow,
    stats: Stats,
    /// The planned power loss's mode, for the counters.
    crash_mode: Option<CrashMode>,
    /// What the last call answered; `None` if the process died during it.
    last_answer: Option<Answer>,
    /// The ledger's state as the last step left it.
    live: payonce::State,
    /// The step acknowledged something: everything it appended is durable.
    ack_pending: bool,
    context: String,
}

/// Whether to print every step as it starts: set `PAYONCE_TRACE=1` to
/// follow a failing input or seed.
fn tracing() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("PAYONCE_TRACE").is_some())
}

/// Parses fixture text.
///
/// # Panics
/// If `text` is not a valid `T`: fixtures are written by the harness.
#[allow(clippy::expect_used)]
fn fixture<T: std::str::FromStr>(text: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    text.parse().expect("fixture text is valid")
}

/// The answer a ledger error stands for.
fn ledger_answer(error: &LedgerError, context: &str) -> Answer {
    match error {
        LedgerError::Refused(refusal) => refusal_answer(refusal),
        LedgerError::Log(_) => Answer::StorageFailed,
        other => panic!("{context}: the ledger failed unexpectedly: {other}"),
    }
}

fn refusal_answer(refusal: &Refusal) -> Answer {
    match refusal {
        Refusal::InFlight { send_running, .. } => Answer::InFlight {
            send_running: *send_running,
        },
        _ => match refusal.holder() {
            Some(holder) => Answer::Held {
                holder: holder.to_string(),
            },
            None => Answer::Refused(refusal.kind()),
        },
    }
}

fn submit_answer(result: Result<WithdrawalRequest, SubmitError>, context: &str) -> Answer {
    match result {
        Ok(outcome) => Answer::Outcome(Box::new(outcome)),
        Err(SubmitError::Ledger(error)) => ledger_answer(&error, context),
        Err(SubmitError::Rejected { .. }) => Answer::Rejected,
        Err(SubmitError::Send(_)) => Answer::SendFailed,
        Err(SubmitError::Unrecorded { .. }) => Answer::Unrecorded,
        Err(other) => panic!("{context}: unexpected submit error: {other}"),
    }
}

fn completion_of(answer: &RailAnswer) -> Completion {
    match answer {
        Ok(outcome) => Completion::Sent(Box::new(outcome.clone())),
        Err(SendFailure::Rejected(_)) => Completion::Rejected,
        Err(SendFailure::Failed(_)) => Completion::Failed,
    }
}

/// What the model expects the ledger to be told for a send of `kind`.
fn expected_completion(kind: SendKind, request: &WithdrawalRequest, key: &str) -> Completion {
    match kind {
        SendKind::Succeed => Completion::Sent(Box::new(sent(request, &reference(request, key)))),
        SendKind::WrongOutcome => Completion::Sent(Box::new(impostor(request))),
        SendKind::Unsettled => Completion::Sent(Box::new(unsettled(request))),
        SendKind::Refuse => Completion::Rejected,
        SendKind::TimeoutAfterSending | SendKind::FailBeforeSending | SendKind::Panic => {
            Completion::Failed
        }
    }
}

/// Checks that the claim of `key` (event `seq`) would survive a power loss
/// that drops every unsynced byte: the whole log left by such a loss
/// verifies, and holds the claim.
fn assert_claim_durable(
    mem: &MemStorage,
    key: &str,
    request: &WithdrawalRequest,
    seq: u64,
    context: &str,
) {
    let image = mem.crash(CrashMode::DropUnsynced, seq);
    let reader = LogReader::open(Arc::new(image), WorldConfig::log())
        .unwrap_or_else(|error| panic!("{context}: no log on stable storage: {error}"));
    let mut claim = None;
    let scanned = reader.scan(|record| {
        if record.seq == seq {
            claim = Some(decode_event(record.seq, record.payload));
        }
        Ok::<(), std::convert::Infallible>(())
    });
    if let Err(error) = scanned {
        panic!("{context}: a power loss now would leave a log that does not open: {error}");
    }
    let Some(claim) = claim else {
        panic!(
            "{context}: the rail is called while the claim (event {seq}) is not on stable storage"
        );
    };
    let event =
        claim.unwrap_or_else(|error| panic!("{context}: event {seq} does not decode: {error}"));
    match &event.kind {
        EventKind::Claimed {
            key: claimed,
            request: claimed_request,
            ..
        } if claimed.as_str() == key && claimed_request.id() == request.id() => {}
        other => panic!("{context}: event {seq} on stable storage is {other:?}, not the claim"),
    }
}

/// Whether `storage` holds a segment of a log.
fn holds_a_log(storage: &MemStorage) -> bool {
    use payonce_log::Storage;
    storage
        .list()
        .is_ok_and(|names| names.iter().any(|name| name.ends_with(".log")))
}

impl World {
    /// A world with an empty ledger.
    pub fn new(config: WorldConfig) -> World {
        let mut world = World {
            config,
            clock: Arc::new(ManualClock::new(START)),
            epochs: Arc::new(CountingEpochs::new(1)),
            disk: Disk::new(MemStorage::new()),
            witness: MemWitness::new(),
            backup: None,
            snapshots_seen: Vec::new(),
            ledger: None,
            model: Model::new(config.accept_foreign_ids),
            rail: Rail::default(),
            slots: BTreeMap::new(),
            next_slot: 0,
            withdrawals: Vec::new(),
            poisoned: false,
            acked: Acked::default(),
            shadow: Shadow::default(),
            stats: Stats::default(),
            crash_mode: None,
            last_answer: None,
            live: payonce::State::new(),
            ack_pending: false,
            context: "opening an empty ledger".to_owned(),
        };
        world.open();
        world
    }

    /// The ledger's configuration, its snapshots kept beside its log on
    /// `storage`: taken on demand and at a clean close, never by a thread
    /// (whose timing would make a seed's run differ from run to run).
    fn ledger_config(&self, storage: Arc<dyn Storage>) -> Config {
        Config {
            snapshot_store: Some(Arc::new(DirSnapshots::on(storage))),
            snapshots: SnapshotPolicy {
                at_close: true,
                ..SnapshotPolicy::never()
            },
            log: WorldConfig::log(),
            witness: Some(Arc::new(SimWitness::on(&self.witness, &self.disk))),
            accept_foreign_ids: self.config.accept_foreign_ids,
            log_refusals: self.config.log_refusals,
            clock: self.clock.clone(),
            // Ids the trace of a seed shows alike on every run.
            epochs: self.epochs.clone(),
            replay_thread_min_len: if self.config.replay_on_two_threads {
                0
            } else {
                u64::MAX
            },
            memory_budget: payonce::MEMORY_BUDGET,
            set_apart_settled: self.config.set_apart_settled,
            // Runs written and merged on the simulation's own steps.
            settle_in_background: false,
        }
    }

    /// The open ledger.
    ///
    /// # Panics
    /// Never between steps: a world always has its ledger open.
    #[allow(clippy::expect_used)]
    pub fn ledger(&self) -> &Ledger {
        self.ledger.as_ref().expect("the world's ledger is open")
    }

    /// A copy of the open ledger's whole state.
    pub fn ledger_state(&self) -> payonce::State {
        self.ledger()
            .state()
            .unwrap_or_else(|error| panic!("{}: the ledger's state: {error}", self.context))
    }

    /// Withdrawals the ledger minted and acknowledged, in order.
    pub fn withdrawals(&self) -> &[WithdrawalRequest] {
        &self.withdrawals
    }

    /// The reference model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The rail's truth.
    pub fn rail(&self) -> &Rail {
        &self.rail
    }

    /// What the world went through.
    pub fn stats(&self) -> Stats {
        let mut stats = self.stats;
        stats.faults_fired += self.disk.faults_fired();
        stats
    }

    /// Claims granted and not completed, oldest first.
    pub fn slots(&self) -> Vec<SlotId> {
        self.slots.keys().copied().collect()
    }

    /// The key of a granted claim.
    pub fn slot_key(&self, slot: SlotId) -> Option<&str> {
        self.slots.get(&slot).map(|s| s.key.as_str())
    }

    /// Whether the rail has answered the claim's send.
    pub fn slot_answered(&self, slot: SlotId) -> bool {
        self.slots
            .get(&slot)
            .is_some_and(|s| s.answer.is_some() || s.panicked)
    }

    /// What the last call answered its caller; `None` if the process lost
    /// power during it, so the caller heard nothing.
    pub fn last_answer(&self) -> Option<&Answer> {
        self.last_answer.as_ref()
    }

    /// Whether a storage fault fired since the ledger was opened: it must
    /// refuse every write until reopened.
    pub fn poisoned(&self) -> bool {
        self.poisoned
    }

    /// Moves simulated time on.
    pub fn advance(&self, duration: Duration) {
        self.clock.advance(duration);
    }

    /// A request for a withdrawal this ledger never minted.
    pub fn foreign(&self, number: u8) -> WithdrawalRequest {
        WithdrawalRequest::new(
            fixture::<WithdrawalId>(&format!("ext-{number}")),
            fixture::<Amount>("7"),
            fixture::<Currency>("USDC"),
            fixture::<Destination>("0xabc"),
            fixture::<Actor>("alice"),
        )
    }

    /// `request` with another amount: the id minted for something else.
    pub fn tampered(&self, request: &WithdrawalRequest) -> WithdrawalRequest {
        WithdrawalRequest::new(
            request.id().clone(),
            fixture::<Amount>("99999"),
            request.currency().clone(),
            request.destination().clone(),
            request.requested_by().clone(),
        )
    }

    fn step<T>(&mut self, what: String, op: impl FnOnce(&mut World, u64) -> T) -> T {
        self.stats.steps += 1;
        self.context = format!("step {}: {what}", self.stats.steps);
        if tracing() {
            eprintln!("{}", self.context);
        }
        let faults_before = self.disk.faults_fired();
        let value = op(self, faults_before);
        if self.disk.dead() {
            self.stats.crashes_mid_operation += 1;
            self.recover();
        } else {
            self.check();
        }
        value
    }

    /// Compares what the ledger answered with what the model predicted;
    /// commits the prediction when they must agree. `predicted` is `None`
    /// while poisoned. Returns whether the answer was acknowledged.
    fn judge(
        &mut self,
        predicted: Option<(Model, Answer)>,
        actual: &Answer,
        faults_before: u64,
    ) -> bool {
        if self.disk.dead() {
            // The process lost power during the call: nobody heard the answer.
            self.last_answer = None;
            return false;
        }
        self.last_answer = Some(actual.clone());
        if matches!(
            actual,
            Answer::Held { .. } | Answer::InFlight { .. } | Answer::Refused(_)
        ) {
            self.stats.refusals += 1;
        }
        let acknowledges = matches!(actual, Answer::Outcome(_) | Answer::Granted | Answer::Done);
        if self.poisoned || self.disk.faults_fired() > faults_before {
            self.poisoned = true;
            assert!(
                !acknowledges,
                "{}: acknowledged {actual:?} after a storage fault, before a reopen",
                self.context
            );
            return false;
        }
        let Some((model, expected)) = predicted else {
            unreachable!("a prediction is made unless poisoned");
        };
        assert_eq!(
            actual, &expected,
            "{}: the ledger's answer is not the model's",
            self.context
        );
        self.model = model;
        self.ack_pending |= acknowledges;
        true
    }

    fn predict(&self, predict: impl FnOnce(&mut Model) -> Answer) -> Option<(Model, Answer)> {
        if self.poisoned {
            return None;
        }
        let mut model = self.model.clone();
        let answer = predict(&mut model);
        Some((model, answer))
    }

    /// Calls the rail for `key`, after checking that its claim is durable.
    /// A dead process reaches nothing.
    fn send(&mut self, key: &str, request: &WithdrawalRequest, kind: SendKind) -> RailAnswer {
        if self.disk.dead() {
            return Err(SendFailure::failed(
                "the process lost power before the send".to_owned(),
            ));
        }
        let seq = self
            .ledger_state()
            .record(key)
            .map(|record| record.claimed_seq());
        let Some(seq) = seq else {
            panic!(
                "{}: a send runs for key {key}, which has no claim",
                self.context
            );
        };
        assert_claim_durable(self.disk.mem(), key, request, seq, &self.context);
        if kind == SendKind::Panic {
            rail_client_panics();
        }
        self.stats.rail_calls += 1;
        if kind.moves_money() {
            self.stats.money_moved += 1;
        }
        self.rail.call(key, request, kind)
    }

    /// Mints a withdrawal of `amount` in `currency`.
    pub fn create(&mut self, amount: &str, currency: &str) -> Option<WithdrawalRequest> {
        self.step(format!("create {amount} {currency}"), |world, before| {
            let seq = world.live.last_seq() + 1;
            let next_id = match world.live.epoch() {
                Some(epoch) => WithdrawalId::minted_in(epoch, seq),
                None => WithdrawalId::minted(seq),
            };
            let result = world.ledger().create(NewWithdrawal {
                amount: fixture(amount),
                currency: fixture(currency),
                destination: fixture("0xabc"),
                requested_by: fixture("alice"),
            });
            let actual = match &result {
                Ok(_) => Answer::Done,
                Err(error) => ledger_answer(error, &world.context),
            };
            let predicted = world.predict(|_| Answer::Done);
            if !world.judge(predicted, &actual, before) {
                return None;
            }
            let withdrawal = result.ok()?;
            assert_eq!(withdrawal.id(), &next_id, "{}: minted id", world.context);
            world.model.created(&withdrawal);
            world.withdrawals.push(withdrawal.clone());
            Some(withdrawal)
        })
    }

    /// `submit(key, request, send)` with a send of `kind`.
    pub fn submit(&mut self, key: &str, request: &WithdrawalRequest, kind: SendKind) {
        self.step(
            format!("submit {key} {} ({kind:?})", request.id()),
            |world, before| {
                let mut granted = false;
                let predicted = world.predict(|model| match model.claim(key, request) {
                    Answer::Granted => {
                        granted = true;
                        let completion = expected_completion(kind, request, key);
                        let answer = model.complete(key, &completion);
                        if kind == SendKind::Panic {
                            Answer::Panicked
                        } else {
                            answer
                        }
                    }
                    other => other,
                });
                let ledger = world.ledger().clone();
                let mut calls = 0;
                let result = catching_rail_client_panic(|| {
                    ledger.submit(key, request.clone(), |sending| {
                        calls += 1;
                        assert_eq!(
                            world.disk.faults_fired(),
                            before,
                            "{}: the send runs after a storage fault in the same call",
                            world.context
                        );
                        world.send(key, sending, kind)
                    })
                });
                let context = world.context.clone();
                let actual = match result {
                    None => Answer::Panicked,
                    Some(result) => submit_answer(result, &context),
                };
                if calls > 0 && !world.disk.dead() {
                    // The send ran, so the claim was durable.
                    world
                        .acked
                        .claims
                        .insert(key.to_owned(), request.id().to_string());
                }
                if world.judge(predicted, &actual, before) {
                    assert_eq!(
                        calls,
                        usize::from(granted),
                        "{}: calls of send",
                        world.context
                    );
                    if let Answer::Outcome(outcome) = &actual {
                        world
                            .acked
                            .outcomes
                            .insert(key.to_owned(), (**outcome).clone());
                    }
                }
            },
        );
    }

    /// `record(key, request)`: a submission without a send.
    pub fn record(&mut self, key: &str, request: &WithdrawalRequest) {
        self.step(format!("record {key} {}", request.id()), |world, before| {
            let predicted = world.predict(|model| model.record(key, request));
            let actual = match world.ledger().record(key, request.clone()) {
                Ok(outcome) => Answer::Outcome(Box::new(outcome)),
                Err(error) => ledger_answer(&error, &world.context),
            };
            if world.judge(predicted, &actual, before)
                && let Answer::Outcome(outcome) = &actual
            {
                world
                    .acked
                    .outcomes
                    .insert(key.to_owned(), (**outcome).clone());
                world
                    .acked
                    .claims
                    .insert(key.to_owned(), request.id().to_string());
            }
        });
    }

    /// `claim(key, request)`: the first half of the two-phase API. A granted
    /// claim becomes a slot to call the rail for and complete.
    pub fn begin(&mut self, key: &str, request: &WithdrawalRequest) -> Option<SlotId> {
        self.step(format!("claim {key} {}", request.id()), |world, before| {
            let predicted = world.predict(|model| model.claim(key, request));
            let (actual, ticket) = match world.ledger().claim(key, request.clone()) {
                Ok(Claim::Granted(ticket)) => (Answer::Granted, Some(ticket)),
                Ok(Claim::Replayed(outcome)) => (Answer::Outcome(Box::new(outcome)), None),
                Err(error) => (ledger_answer(&error, &world.context), None),
            };
            let acknowledged = world.judge(predicted, &actual, before);
            let ticket = ticket?;
            let slot = world.next_slot;
            world.next_slot += 1;
            world.slots.insert(
                slot,
                Slot {
                    ticket,
                    key: key.to_owned(),
                    request: request.clone(),
                    answer: None,
                    panicked: false,
                },
            );
            if acknowledged {
                world
                    .acked
                    .claims
                    .insert(key.to_owned(), request.id().to_string());
            }
            Some(slot)
        })
    }

    /// The client of a granted claim calls the rail; the answer is kept
    /// for [`World::finish`] (in the simulator, it arrives later).
    pub fn call_rail(&mut self, slot: SlotId, kind: SendKind) {
        let Some((key, request)) = self
            .slots
            .get(&slot)
            .filter(|s| s.answer.is_none() && !s.panicked)
            .map(|s| (s.key.clone(), s.request.clone()))
        else {
            return;
        };
        self.step(format!("rail call for {key} ({kind:?})"), |world, _| {
            let answer = catching_rail_client_panic(|| world.send(&key, &request, kind));
            if let Some(s) = world.slots.get_mut(&slot) {
                match answer {
                    Some(answer) => s.answer = Some(answer),
                    None => s.panicked = true,
                }
            }
        });
    }

    /// Completes a claim with what the rail answered. A claim whose client
    /// panicked is abandoned instead; one the rail never answered is
    /// completed as failed.
    pub fn finish(&mut self, slot: SlotId) {
        let Some(s) = self.slots.remove(&slot) else {
            return;
        };
        if s.panicked {
            self.abandon_slot(s);
            return;
        }
        let answer = s
            .answer
            .unwrap_or_else(|| Err(SendFailure::failed("the rail never answered".to_owned())));
        self.complete(s.ticket, s.key, answer);
    }

    /// The client gives up waiting for the rail: the outcome is unknown.
    pub fn time_out(&mut self, slot: SlotId) {
        let Some(s) = self.slots.remove(&slot) else {
            return;
        };
        let answer = Err(SendFailure::failed(
            "the client timed out waiting for the rail".to_owned(),
        ));
        self.complete(s.ticket, s.key, answer);
    }

    fn complete(&mut self, ticket: Ticket, key: String, answer: RailAnswer) {
        self.step(format!("complete {key}"), |world, before| {
            let completion = completion_of(&answer);
            let predicted = world.predict(|model| model.complete(&key, &completion));
            let result = world.ledger().complete(ticket, answer);
            let actual = submit_answer(result, &world.context);
            if world.judge(predicted, &actual, before)
                && let Answer::Outcome(outcome) = &actual
            {
                world
                    .acked
                    .outcomes
                    .insert(key.clone(), (**outcome).clone());
            }
        });
    }

    /// Drops a claim's ticket without completing it.
    pub fn abandon(&mut self, slot: SlotId) {
        if let Some(s) = self.slots.remove(&slot) {
            self.abandon_slot(s);
        }
    }

    fn abandon_slot(&mut self, slot: Slot) {
        let Slot { ticket, key, .. } = slot;
        self.step(format!("abandon {key}"), |world, before| {
            world.last_answer = None;
            let predicted = world.predict(|model| model.complete(&key, &Completion::Failed));
            // Dropping appends the note without waiting; the next sync, by
            // anyone, makes it durable.
            drop(ticket);
            if !world.disk.dead() && !world.poisoned {
                let _ = world.ledger().sync();
            }
            if world.disk.dead() {
                return;
            }
            if world.poisoned || world.disk.faults_fired() > before {
                world.poisoned = true;
            } else if let Some((model, _)) = predicted {
                // The abandonment was recorded, and synced since: durable.
                world.model = model;
                world.ack_pending = true;
            }
        });
    }

    /// An operator looks at `key` and at the rail: resolves it with what
    /// the rail did, or releases it when nothing moved. Keys with an
    /// outcome are released too, to check the refusal.
    pub fn operator(&mut self, key: &str) {
        let record = self
            .live
            .record(key)
            .as_ref()
            .map(crate::harness::checks::RecordValue::of);
        let truth = record.as_ref().and_then(|record| {
            if record.outcome.is_some() {
                return None;
            }
            self.rail
                .moved
                .get(record.fingerprint.id().as_str())
                .cloned()
        });
        match truth {
            Some(movement) => {
                assert_eq!(
                    movement.key,
                    key,
                    "{}: the money for {} moved under key {} while key {key} holds it",
                    self.context,
                    movement.outcome.id(),
                    movement.key
                );
                self.resolve(key, &movement.outcome, "operator", true);
            }
            None => self.release(key),
        }
    }

    /// A provider's webhook, replayed under `key`: resolves the withdrawal
    /// with the rail's truth if money moved, else with the failure the
    /// provider reports.
    pub fn webhook(&mut self, key: &str, request: &WithdrawalRequest, confirmed: bool) {
        let outcome = match self.rail.moved.get(request.id().as_str()) {
            Some(movement) if confirmed => match movement.outcome.confirm() {
                // The provider says the rail confirmed it: that is the
                // rail's truth from now on, which no later report can fail.
                Ok(confirmation) => {
                    self.rail
                        .moves_on(request.id().as_str(), confirmation.clone());
                    confirmation
                }
                Err(_) => movement.outcome.clone(),
            },
            Some(movement) => movement.outcome.clone(),
            None if confirmed => request
                .reject(fixture::<Reason>("the provider declined it"))
                .unwrap_or_else(|_| request.clone()),
            None => request
                .approve()
                .and_then(|w| w.fail(fixture::<Reason>("the provider reports a failure")))
                .unwrap_or_else(|_| request.clone()),
        };
        self.resolve(key, &outcome, "webhook", false);
    }

    fn resolve(&mut self, key: &str, outcome: &WithdrawalRequest, by: &str, operator: bool) {
        self.step(
            format!(
                "{by} resolves {key} as {} {}",
                outcome.id(),
                outcome.state()
            ),
            |world, before| {
                let predicted = world.predict(|model| model.resolve(key, outcome));
                let actual = match world.ledger().resolve(key, outcome.clone(), "looked", by) {
                    Ok(()) => Answer::Done,
                    Err(error) => ledger_answer(&error, &world.context),
                };
                if world.judge(predicted, &actual, before) && actual == Answer::Done {
                    if let Some(outcome) = world.model.outcome(key).cloned() {
                        world.acked.outcomes.insert(key.to_owned(), outcome);
                    }
                    if operator {
                        world.stats.operator_resolves += 1;
                    }
                }
            },
        );
    }

    fn release(&mut self, key: &str) {
        self.step(format!("operator releases {key}"), |world, before| {
            let id = world
                .live
                .record(key)
                .map(|record| record.fingerprint().id().to_string());
            let predicted = world.predict(|model| model.release(key));
            let actual = match world
                .ledger()
                .release(key, "nothing on the rail", "operator")
            {
                Ok(()) => Answer::Done,
                Err(error) => ledger_answer(&error, &world.context),
            };
            if world.judge(predicted, &actual, before) {
                if actual == Answer::Done
                    && let Some(id) = id
                {
                    world.rail.released(&id, key);
                    world.acked.claims.remove(key);
                    world.stats.operator_releases += 1;
                }
            } else {
                world.acked.maybe_released.insert(key.to_owned());
            }
        });
    }

    /// The rail moves the withdrawal it sent on to `later`; the ledger
    /// hears of it only if `told` (else the report is lost, and an
    /// operator's correction catches up).
    pub fn rail_moves_on(&mut self, key: &str, later: &WithdrawalRequest, told: bool) {
        self.rail.moves_on(later.id().as_str(), later.clone());
        if told {
            self.rail_report(key, later);
        }
    }

    /// The rail's truth for withdrawal `id`, if money moved for it.
    pub fn rail_truth(&self, id: &str) -> Option<&WithdrawalRequest> {
        Some(&self.rail.moved.get(id)?.outcome)
    }

    /// A later report of what the rail did with `key`'s outcome (confirmed,
    /// failed, bumped, or the same again), recorded with `advance`.
    pub fn rail_report(&mut self, key: &str, later: &WithdrawalRequest) {
        let what = format!("the rail reports {key} as {} {}", later.id(), later.state());
        self.step(what, |world, before| {
            let predicted = world.predict(|model| model.advance(key, later));
            let actual = match world.ledger().advance(key, later) {
                Ok(()) => Answer::Done,
                Err(error) => ledger_answer(&error, &world.context),
            };
            if world.judge(predicted, &actual, before) && actual == Answer::Done {
                world.moved_on(key);
                world.stats.advances += 1;
            } else {
                world.maybe_moved(key, later);
            }
        });
    }

    /// An operator corrects `key`'s outcome to `right`.
    pub fn correct(&mut self, key: &str, right: &WithdrawalRequest) {
        let what = format!(
            "operator corrects {key} to {} {}",
            right.id(),
            right.state()
        );
        self.step(what, |world, before| {
            let predicted = world.predict(|model| model.correct(key, right));
            let actual = match world
                .ledger()
                .correct(key, right, "recorded in error", "operator")
            {
                Ok(()) => Answer::Done,
                Err(error) => ledger_answer(&error, &world.context),
            };
            if world.judge(predicted, &actual, before) && actual == Answer::Done {
                world.moved_on(key);
                world.stats.corrections += 1;
            } else {
                world.maybe_moved(key, right);
            }
        });
    }

    /// `key`'s outcome was replaced and acknowledged: the new one must
    /// survive.
    fn moved_on(&mut self, key: &str) {
        if let Some(outcome) = self.model.outcome(key).cloned() {
            self.acked.outcomes.insert(key.to_owned(), outcome);
            self.acked.maybe_moved.remove(key);
        }
    }

    /// A report or correction of `key` to `outcome` had no answer, or a
    /// refusal from a ledger that had already failed: it may or may not
    /// have been recorded.
    fn maybe_moved(&mut self, key: &str, outcome: &WithdrawalRequest) {
        if self.acked.outcomes.contains_key(key) {
            let maybe = self.acked.maybe_moved.entry(key.to_owned()).or_default();
            maybe.push(outcome.clone());
        }
    }

    /// `sync()`: makes the unsynced refusals durable.
    pub fn sync(&mut self) {
        self.step("sync".to_owned(), |world, before| {
            let actual = match world.ledger().sync() {
                Ok(()) => Answer::Done,
                Err(error) => ledger_answer(&error, &world.context),
            };
            let predicted = world.predict(|_| Answer::Done);
            world.judge(predicted, &actual, before);
        });
    }

    /// Takes a snapshot of the projections now, as a service's snapshot
    /// thread would; the disk may lose power or fail while it is written.
    pub fn take_snapshot(&mut self) {
        self.step("take a snapshot".to_owned(), |world, faults_before| {
            let taken = world.ledger().snapshot();
            // Waiting for the events it holds to be durable writes to the
            // log: a fault there poisons the ledger as any write does. A
            // fault writing the snapshot itself leaves the log as it was.
            if matches!(&taken, Err(error) if !matches!(error, LedgerError::Snapshot(_))) {
                world.poisoned = true;
            }
            match taken {
                Ok(Some(taken)) => {
                    world.stats.snapshots_taken += 1;
                    if let Ok(bytes) = world.disk.mem().read(&taken.stored.name, u64::MAX) {
                        world.snapshots_seen.push((taken.stored.name, bytes));
                    }
                }
                Ok(None) => {}
                Err(error) => assert!(
                    world.disk.dead()
                        || world.poisoned
                        || world.disk.faults_fired() > faults_before,
                    "{}: taking a snapshot failed with no fault injected: {error}",
                    world.context
                ),
            }
        });
    }

    /// Merges the ledger's newest runs while they want it, as its settling
    /// thread would; the disk may lose power or fail while the merged run
    /// is written, which leaves the log and the runs before as they were.
    pub fn merge_runs(&mut self) {
        self.step("merge runs".to_owned(), |world, faults_before| {
            loop {
                match world.ledger().merge_runs() {
                    Ok(Some(_)) if !world.disk.dead() => world.stats.runs_merged += 1,
                    Ok(Some(_)) | Ok(None) => break,
                    Err(error) => {
                        assert!(
                            world.disk.dead() || world.disk.faults_fired() > faults_before,
                            "{}: merging runs failed with no fault injected: {error}",
                            world.context
                        );
                        break;
                    }
                }
            }
            // What the merge wrote after the plug was pulled never reached
            // the disk: the reopening finds the runs as they were before.
            if world.disk.dead() || world.disk.faults_fired() > faults_before {
                world.stats.merges_cut += 1;
            }
        });
    }

    /// Closes the ledger, puts back snapshot file `pick` (modulo those
    /// seen) in place of every snapshot the disk holds, as restoring an old
    /// copy of the snapshots' directory does: intact, one byte flipped
    /// (`damage` 1) or cut short (2); then opens again, which must load it,
    /// or refuse it and fall back, and give the answers it gave before.
    pub fn restore_old_snapshot(&mut self, pick: u64, damage: u8) {
        if self.snapshots_seen.is_empty() {
            return;
        }
        for slot in self.slots() {
            self.abandon(slot);
        }
        let seen = &self.snapshots_seen[(pick % self.snapshots_seen.len() as u64) as usize];
        let (name, mut bytes) = seen.clone();
        match damage {
            1 => {
                let at = (pick as usize).wrapping_mul(7919) % bytes.len();
                bytes[at] ^= 0x10;
            }
            2 => bytes.truncate(bytes.len() / 2),
            _ => {}
        }
        self.step(
            format!("restore snapshot {name} ({damage}) and reopen"),
            |world, _| {
                world.stats.reopens += 1;
                let at_rest = (!world.poisoned).then(|| Projection::of(&world.live).at_rest());
                world.ledger = None;
                if world.disk.dead() {
                    // Power went while the close took its snapshot.
                    return;
                }
                world.put_back_snapshot(&name, &bytes);
                world.open();
                if let Some(before) = at_rest {
                    let after = Projection::of(&world.ledger_state());
                    assert_eq!(
                        after, before,
                        "{}: the projections changed across a reopen from an old snapshot",
                        world.context
                    );
                }
            },
        );
    }

    /// Replaces every snapshot on the disk with `bytes` under `name`,
    /// behind the ledger's back (no fault, no power loss counts it).
    fn put_back_snapshot(&mut self, name: &str, bytes: &[u8]) {
        let mem = self.disk.mem();
        let store = DirSnapshots::on(Arc::new(mem.clone()));
        for snapshot in store.list().unwrap_or_default() {
            let _ = mem.remove(&snapshot.name);
        }
        let put = mem.create_new(name).and_then(|mut file| {
            file.append(bytes)?;
            file.sync_data()
        });
        if put.and_then(|()| mem.sync_dir()).is_ok() {
            self.stats.snapshots_restored += 1;
        }
    }

    /// Arms a storage fault.
    pub fn arm(&mut self, fault: Fault) {
        self.step(format!("arm {fault:?}"), |world, _| {
            world.stats.faults_armed += 1;
            world.disk.arm(fault);
        });
    }

    /// Plans a power loss after some more storage operations.
    pub fn plan_crash(&mut self, plan: CrashPlan) {
        if !self.disk.dead() {
            self.crash_mode = Some(plan.mode);
            self.disk.plan_crash(plan);
        }
    }

    /// Loses power now, between operations.
    pub fn crash(&mut self, mode: CrashMode, seed: u64) {
        self.stats.steps += 1;
        self.context = format!(
            "step {}: power loss ({mode:?}, seed {seed})",
            self.stats.steps
        );
        self.crash_mode = Some(mode);
        self.disk.crash_now(mode, seed);
        self.recover();
    }

    /// Closes the ledger (abandoning every claim in progress) and opens it
    /// again on the same storage.
    pub fn reopen(&mut self) {
        for slot in self.slots() {
            self.abandon(slot);
        }
        self.step("close and reopen".to_owned(), |world, _| {
            world.stats.reopens += 1;
            let at_rest = (!world.poisoned).then(|| Projection::of(&world.live).at_rest());
            world.ledger = None;
            world.open();
            if let Some(before) = at_rest {
                let after = Projection::of(&world.ledger_state());
                assert_eq!(
                    after, before,
                    "{}: the projections changed across a reopen",
                    world.context
                );
            }
            world.restore_backup();
        });
    }

    /// Restores the disk from the backup the last clean reopen took,
    /// beside the live one: behind the witness, it must be refused. Then
    /// takes the next backup.
    fn restore_backup(&mut self) {
        if let Some(backup) = self.backup.take() {
            let config = self.ledger_config(Arc::new(backup.clone()));
            if assert_rollback_refused(&backup, self.witness.head(), config, &self.context) {
                self.stats.rollbacks_refused += 1;
            }
        }
        self.backup = Some(self.disk.mem().crash(CrashMode::DropUnsynced, 0));
    }

    fn count_crash(&mut self) {
        match self.crash_mode.take() {
            Some(CrashMode::DropUnsynced) | None => self.stats.crashes_dropping += 1,
            Some(CrashMode::KeepPrefix) => self.stats.crashes_keeping += 1,
            Some(CrashMode::Garble) => self.stats.crashes_garbling += 1,
            Some(CrashMode::Pages) => self.stats.crashes_paging += 1,
        }
    }

    /// The plug was pulled: the process is gone with its claims in
    /// progress; what the disk held is what the next process finds.
    fn recover(&mut self) {
        self.count_crash();
        let Some(image) = self.disk.image() else {
            unreachable!("recovering from a power loss that did not happen");
        };
        // The dead process's tickets write to the dead disk; nobody hears.
        self.slots.clear();
        self.ledger = None;
        assert_crash_prefix(
            self.disk.mem(),
            &image,
            &WorldConfig::log(),
            self.acked.seq,
            &self.context,
        );
        self.stats.faults_fired += self.disk.faults_fired();
        self.disk = Disk::new(image);
        self.open();
    }

    /// Opens the ledger on the disk (retrying after an injected fault, or
    /// from the image of a power loss during the open), then checks what it
    /// holds against everything acknowledged and re-reads the model from it.
    fn open(&mut self) {
        let log = WorldConfig::log();
        let mut attempts = 0;
        let ledger = loop {
            attempts += 1;
            assert!(
                attempts <= OPEN_ATTEMPTS_MAX,
                "{}: the ledger does not open after {OPEN_ATTEMPTS_MAX} attempts",
                self.context
            );
            let before = records(self.disk.mem(), &log, &self.context);
            let faults_before = self.disk.faults_fired();
            // A ledger is created once; a creation a crash cut short is
            // made again, as an operator provisioning it would.
            let storage = Arc::new(self.disk.clone());
            let config = self.ledger_config(storage.clone());
            let opened = match holds_a_log(self.disk.mem()) {
                true => Ledger::open_on(storage, config),
                false => Ledger::init_on(storage, config),
            };
            if self.disk.dead() {
                drop(opened);
                self.stats.crashes_mid_operation += 1;
                self.count_crash();
                let Some(image) = self.disk.image() else {
                    unreachable!("a dead disk has an image");
                };
                assert_crash_prefix(self.disk.mem(), &image, &log, self.acked.seq, &self.context);
                self.stats.faults_fired += self.disk.faults_fired();
                self.disk = Disk::new(image);
                continue;
            }
            match opened {
                Ok(ledger) => {
                    let after = records(self.disk.mem(), &log, &self.context);
                    assert!(
                        after.len() > before.len() && after[..before.len()] == before[..],
                        "{}: opening changed or lost records ({} before, {} after)",
                        self.context,
                        before.len(),
                        after.len()
                    );
                    break ledger;
                }
                Err(error) => {
                    assert!(
                        self.disk.faults_fired() > faults_before,
                        "{}: the ledger does not open, with no fault injected: {error}",
                        self.context
                    );
                    self.stats.failed_opens += 1;
                    self.disk.disarm();
                }
            }
        };
        self.ledger = Some(ledger);
        self.poisoned = false;
        self.after_open();
    }

    /// Checks the opened ledger's `state` against `verify_on` and a replay
    /// of its own (returned), and its head against the witness.
    fn assert_replays_agree(&self, state: &payonce::State) -> Shadow {
        let context = &self.context;
        let report = verify_on(Arc::new(self.disk.mem().clone()), WorldConfig::log())
            .unwrap_or_else(|error| panic!("{context}: verify refuses the log: {error}"));
        assert!(
            report.divergences.is_empty(),
            "{context}: verify finds divergences: {:?}",
            report.divergences
        );
        assert_eq!(
            report.state, *state,
            "{context}: verify's replay differs from the opened ledger"
        );
        let head = self
            .ledger()
            .head()
            .unwrap_or_else(|error| panic!("{context}: the opened ledger has no head: {error}"));
        if let Some(witnessed) = self.witness.head() {
            assert!(
                head.seq >= witnessed.seq,
                "{context}: the ledger opened at head {head}, behind its witness's {witnessed}"
            );
        }
        let mut shadow = Shadow::default();
        shadow.catch_up(self.disk.mem(), &WorldConfig::log(), context);
        assert_eq!(
            shadow.state, *state,
            "{context}: a replay differs from the opened ledger"
        );
        shadow.audit.assert_matches(state, context);
        shadow
    }

    fn after_open(&mut self) {
        let context = self.context.clone();
        self.assert_storage_failed_only_where_armed();
        let recovery = self.ledger().recovery().clone();
        self.stats.opens_from_snapshot += u64::from(recovery.snapshot.is_some());
        self.stats.snapshots_refused += recovery.snapshots_set_aside.len() as u64;
        let state = self.ledger_state();
        let shadow = self.assert_replays_agree(&state);
        assert_invariants(&state, &context);

        self.assert_acknowledged_outcomes_present(&state);
        for (key, id) in &self.acked.claims {
            if self.acked.maybe_released.contains(key) {
                continue;
            }
            let held = state
                .record(key)
                .map(|record| record.fingerprint().id().to_string());
            assert_eq!(
                held.as_ref(),
                Some(id),
                "{context}: the durable claim of key {key} on {id} did not survive"
            );
        }
        for withdrawal in &self.withdrawals {
            assert!(
                state.was_created(withdrawal.id()),
                "{context}: the acknowledged creation of {} did not survive",
                withdrawal.id()
            );
        }
        for (id, key) in self.rail.open_calls.clone() {
            if state.claimed_by(&id).as_deref() != Some(key.as_str()) {
                assert!(
                    self.acked.maybe_released.contains(&key),
                    "{context}: the rail was called for {id} under key {key}, whose claim is gone"
                );
                self.rail.released(&id, &key);
            }
        }
        self.check_rail_truth(&state);

        let created = std::mem::take(&mut self.model.created);
        self.model = Model::from_state(&state, self.config.accept_foreign_ids);
        self.model.created = created;
        self.acked.seq = state.last_seq();
        self.acked.claims.retain(|key, id| {
            state
                .record(key)
                .is_some_and(|r| r.fingerprint().id().as_str() == id)
        });
        self.acked.maybe_released.clear();
        // The log now says whether each unanswered report or correction
        // was recorded: what it says is what must survive.
        for (key, maybe) in std::mem::take(&mut self.acked.maybe_moved) {
            if let Some(now) = state.outcome(&key)
                && maybe.contains(&now)
            {
                self.acked.outcomes.insert(key, now);
            }
        }
        self.ack_pending = false;
        self.shadow = shadow;
        self.live = state;
    }

    /// Money that moved is held by the key that moved it, with no outcome
    /// yet or the rail's.
    fn check_rail_truth(&self, state: &payonce::State) {
        for (id, movement) in &self.rail.moved {
            let holder = state.claimed_by(id).map(|key| key.to_string());
            assert_eq!(
                holder.as_deref(),
                Some(movement.key.as_str()),
                "{}: {id} left custody under key {}, but the ledger says it is held by {holder:?}",
                self.context,
                movement.key
            );
            if let Some(outcome) = state.outcome(&movement.key) {
                let confirmed = movement.outcome.confirm().ok();
                assert!(
                    outcome == movement.outcome
                        || Some(&outcome) == confirmed.as_ref()
                        || movement.earlier.contains(&outcome),
                    "{}: key {} has outcome {outcome:?}, but the rail sent {:?}",
                    self.context,
                    movement.key,
                    movement.outcome
                );
            }
        }
    }

    /// Every storage error so far came from a fault the world armed.
    fn assert_storage_failed_only_where_armed(&self) {
        let context = &self.context;
        let unexpected = self.disk.unexpected_errors();
        assert!(
            unexpected.is_empty(),
            "{context}: the storage failed without an injected fault: {unexpected:?}"
        );
    }

    /// Every outcome acknowledged to a caller is in `state`, or one a later
    /// report or correction asked for without an answer replaced it with.
    fn assert_acknowledged_outcomes_present(&self, state: &payonce::State) {
        let context = &self.context;
        for (key, outcome) in &self.acked.outcomes {
            let now = state.outcome(key);
            let maybe = self
                .acked
                .maybe_moved
                .get(key)
                .map_or(&[][..], Vec::as_slice);
            assert!(
                now.as_ref() == Some(outcome)
                    || now.as_ref().is_some_and(|now| maybe.contains(now)),
                "{context}: the outcome acknowledged for key {key} is gone: {outcome:?} \
                 acknowledged, {now:?} in the ledger"
            );
        }
    }

    /// The checks after every step the process survived.
    fn check(&mut self) {
        let context = self.context.clone();
        self.assert_storage_failed_only_where_armed();
        let state = self.ledger_state();
        if std::mem::take(&mut self.ack_pending) {
            self.acked.seq = state.last_seq();
        }
        assert_invariants(&state, &context);
        if !self.poisoned {
            self.assert_model_matches(&state);
        }
        self.shadow
            .catch_up(self.disk.mem(), &WorldConfig::log(), &context);
        self.shadow
            .audit
            .assert_matches(&self.shadow.state, &context);
        if !self.poisoned {
            if self.shadow.state.last_seq() == state.last_seq() {
                assert_eq!(
                    self.shadow.state, state,
                    "{context}: the replayed log differs from the live ledger"
                );
            } else {
                // Refusals appended but not yet written change no projection.
                assert_eq!(
                    Projection::of(&self.shadow.state),
                    Projection::of(&state),
                    "{context}: the replayed log differs from the live ledger"
                );
            }
        } else {
            assert_invariants(&self.shadow.state, &format!("{context} (replayed)"));
        }
        self.check_rail_truth(&state);
        self.assert_acknowledged_outcomes_present(&state);
        self.live = state;
    }

    /// The ledger's projections are the model's.
    fn assert_model_matches(&self, state: &payonce::State) {
        let context = &self.context;
        let model = &self.model;
        assert_eq!(
            state.key_count(),
            model.records.len(),
            "{context}: the ledger has {} keys, the model {}",
            state.key_count(),
            model.records.len()
        );
        for (key, expected) in &model.records {
            let record = state.record(key);
            assert!(
                record
                    .is_some_and(|r| r.fingerprint() == expected.fingerprint
                        && r.outcome() == expected.outcome),
                "{context}: key {key} has {record:?} in the ledger, {expected:?} in the model"
            );
            assert_eq!(
                state.is_sending(key),
                model.sending.contains(key),
                "{context}: whether key {key} is sending"
            );
        }
        assert_eq!(
            state.claims().count(),
            model.claims.len(),
            "{context}: claims differ from the model's"
        );
        for (id, key) in &model.claims {
            assert_eq!(
                state.claimed_by(id).as_deref(),
                Some(key.as_str()),
                "{context}: the holder of {id}"
            );
        }
        assert_eq!(
            state.holds().count(),
            model.holds.len(),
            "{context}: holds differ from the model's"
        );
        for id in &model.holds {
            assert!(state.held(id).is_some(), "{context}: {id} is not held");
        }
    }
}
