//! A ledger on in-memory storage with a manual clock, a rail that counts
//! sends, and helpers to reopen and compare.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use payonce::{
    Config, DirSnapshots, Hold, InFlight, Ledger, ManualClock, NewWithdrawal, SendFailure, State,
    Ticket, Timestamp,
};
use payonce_log::MemStorage;
use payonce_model::{
    Actor, Amount, Currency, Destination, Reference, RequestKey, WithdrawalRequest,
};

/// 2026-11-30T12:00:00Z.
pub const START: Timestamp = Timestamp::from_unix_nanos(1_796_040_000_000_000_000);

/// Where a fixture's ledger keeps its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The file log, on in-memory storage.
    File,
    /// A PostgreSQL database of its own, on the cluster the tests share,
    /// written by one worker.
    Postgres,
}

thread_local! {
    static BACKEND: Cell<Backend> = const { Cell::new(Backend::File) };
    /// Whether fixtures set settled pairs apart ([`Config::set_apart_settled`]).
    static SET_APART: Cell<bool> = const { Cell::new(false) };
}

/// Runs `body` with every fixture it makes on `backend`; on PostgreSQL,
/// skipped (loudly) when no cluster can be started outside CI.
pub fn on(backend: Backend, body: fn()) {
    if backend == Backend::Postgres && payonce_postgres::cluster::for_tests().is_none() {
        return;
    }
    BACKEND.with(|current| current.set(backend));
    body();
}

/// [`on`], with every ledger's settled pairs set apart at each opening.
pub fn on_set_apart(backend: Backend, body: fn()) {
    SET_APART.with(|set_apart| set_apart.set(true));
    on(backend, body);
}

/// The seed's scenarios, each a test on the file log (`file::`) and on
/// PostgreSQL (`postgres::`), with the same body; and on both with settled
/// pairs set apart (`file_set_apart::`, `postgres_set_apart::`), which a
/// file ledger brings back under its lock and a shared one in its batches.
#[macro_export]
macro_rules! on_both_backends {
    ($($(#[$meta:meta])* fn $name:ident() $body:block)*) => {
        $($(#[$meta])* fn $name() $body)*
        mod file {
            $(#[test] fn $name() { $crate::on($crate::Backend::File, super::$name) })*
        }
        mod postgres {
            $(#[test] fn $name() { $crate::on($crate::Backend::Postgres, super::$name) })*
        }
        mod file_set_apart {
            $(#[test] fn $name() {
                $crate::on_set_apart($crate::Backend::File, super::$name)
            })*
        }
        mod postgres_set_apart {
            $(#[test] fn $name() {
                $crate::on_set_apart($crate::Backend::Postgres, super::$name)
            })*
        }
    };
}

/// The worker a PostgreSQL fixture writes as.
const WORKER: &str = "worker-1";

pub struct Fixture {
    pub storage: MemStorage,
    /// Where a file ledger's snapshots are kept.
    pub snapshots: MemStorage,
    pub clock: Arc<ManualClock>,
    pub config: Config,
    ledger: Option<Ledger>,
    /// The database of a fixture on PostgreSQL.
    url: Option<String>,
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture::new()
    }
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::with(|_| {})
    }

    pub fn with(adjust: impl FnOnce(&mut Config)) -> Fixture {
        let storage = MemStorage::new();
        let snapshots = MemStorage::new();
        let clock = Arc::new(ManualClock::new(START));
        let mut config = Config {
            clock: clock.clone(),
            snapshot_store: Some(Arc::new(DirSnapshots::on(Arc::new(snapshots.clone())))),
            set_apart_settled: SET_APART.with(Cell::get),
            ..Config::default()
        };
        adjust(&mut config);
        let (ledger, url) = match BACKEND.with(Cell::get) {
            Backend::File => (
                Ledger::init_on(Arc::new(storage.clone()), config.clone()).unwrap(),
                None,
            ),
            Backend::Postgres => {
                let url = payonce_postgres::cluster::test_database().unwrap();
                // Its snapshots are the database's own (PgSnapshots).
                config.snapshot_store = None;
                drop(payonce_postgres::init(&url, config.clone()).unwrap());
                let ledger = payonce_postgres::open(&url, WORKER, config.clone()).unwrap();
                (ledger, Some(url))
            }
        };
        Fixture {
            storage,
            snapshots,
            clock,
            config,
            ledger: Some(ledger),
            url,
        }
    }

    /// Whether the ledger is shared (on PostgreSQL), where the policy on
    /// foreign ids is the ledger's, recorded at its creation.
    pub fn is_shared(&self) -> bool {
        self.url.is_some()
    }

    /// Opens the ledger again after it was closed.
    fn open(&self) -> Result<Ledger, payonce::LedgerError> {
        match &self.url {
            None => Ledger::open_on(Arc::new(self.storage.clone()), self.config.clone()),
            Some(url) => payonce_postgres::open(url, WORKER, self.config.clone()),
        }
    }

    /// The process dies while `ticket`'s send runs: no completion, no drop,
    /// nothing unsynced kept; then the ledger is opened again, as a
    /// restarted service opens it.
    pub fn crash(&mut self, ticket: Ticket) {
        std::mem::forget(ticket);
        match &self.url {
            None => self.storage = self.storage.crash(payonce_log::CrashMode::DropUnsynced, 7),
            Some(url) => {
                std::mem::forget(self.ledger.take());
                let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
                admin
                    .query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE datname = current_database() AND pid <> pg_backend_pid() \
                         AND backend_type = 'client backend'",
                        &[],
                    )
                    .unwrap();
            }
        }
        self.ledger = None;
        self.ledger = Some(self.open().unwrap());
    }

    pub fn ledger(&self) -> &Ledger {
        self.ledger.as_ref().expect("the fixture's ledger is open")
    }

    /// A new withdrawal minted by the ledger: 25 USDC to 0xabc.
    pub fn withdrawal(&self) -> WithdrawalRequest {
        self.withdrawal_of("25.00")
    }

    pub fn withdrawal_of(&self, amount: &str) -> WithdrawalRequest {
        self.ledger()
            .create(NewWithdrawal {
                amount: Amount::parse(amount).unwrap(),
                currency: Currency::new("USDC").unwrap(),
                destination: Destination::new("0xabc").unwrap(),
                requested_by: Actor::new("alice").unwrap(),
            })
            .unwrap()
    }

    /// Closes the ledger and opens it again, or says why it would not open.
    pub fn try_reopen(&mut self) -> Result<(), payonce::LedgerError> {
        self.ledger = None;
        self.ledger = Some(self.open()?);
        Ok(())
    }

    /// Closes the ledger and opens it again on the same storage.
    pub fn reopen(&mut self) {
        // The open ledger holds the writer lock: close it first.
        self.ledger = None;
        self.ledger = Some(self.open().unwrap());
    }

    pub fn tick(&self) {
        self.clock.advance(Duration::from_secs(1));
    }

    /// Where a test asks what a caller would: the ledger, or, with settled
    /// pairs set apart, a copy of its whole state, so that asking brings
    /// none of them back before a decision needs it.
    pub fn asked(&self) -> Asked<'_> {
        self.asked_through(false)
    }

    /// [`Fixture::asked`], but through the ledger's own queries (which
    /// bring back what they name) when `ledger` is set.
    pub fn asked_through(&self, ledger: bool) -> Asked<'_> {
        if self.config.set_apart_settled && !ledger {
            Asked::Copy(Box::new(self.ledger().state().unwrap()))
        } else {
            Asked::Ledger(self.ledger())
        }
    }

    /// What a caller can ask the ledger about these keys and withdrawals.
    pub fn answers(&self, keys: &[&str], withdrawals: &[&WithdrawalRequest]) -> Answers {
        let asked = self.asked();
        Answers {
            outcomes: keys.iter().map(|key| asked.outcome(key)).collect(),
            claims: withdrawals
                .iter()
                .map(|w| asked.claimed_by(w.id()).map(|k| k.to_string()))
                .collect(),
            holds: withdrawals
                .iter()
                .map(|w| asked.held(w.id()).map(|h| h.amount.to_string()))
                .collect(),
            in_flight: self
                .ledger()
                .in_flight()
                .into_iter()
                .map(without_send_running)
                .collect(),
            totals: self
                .ledger()
                .held_totals()
                .into_iter()
                .map(|(c, t)| (c.to_string(), t.to_string()))
                .collect(),
        }
    }

    /// Closes and reopens, then checks every answer is what it was.
    pub fn assert_same_after_reopen(&mut self, keys: &[&str], withdrawals: &[&WithdrawalRequest]) {
        self.assert_same_after(keys, withdrawals, Fixture::reopen);
    }

    /// Closes, drops the snapshot taken at the close, and reopens: from an
    /// older snapshot and the events after it, or every event. Then checks
    /// every answer is what it was.
    pub fn assert_same_after_reopen_from_older(
        &mut self,
        keys: &[&str],
        withdrawals: &[&WithdrawalRequest],
    ) {
        self.assert_same_after(keys, withdrawals, |fixture| {
            fixture.ledger = None;
            let store = DirSnapshots::on(Arc::new(fixture.snapshots.clone()));
            if let Some(newest) = payonce::SnapshotStore::list(&store).unwrap().first() {
                payonce_log::Storage::remove(&fixture.snapshots, &newest.name).unwrap();
            }
            fixture.reopen();
        });
    }

    fn assert_same_after(
        &mut self,
        keys: &[&str],
        withdrawals: &[&WithdrawalRequest],
        reopen: impl FnOnce(&mut Fixture),
    ) {
        let before = self.answers(keys, withdrawals);
        let state = self.ledger().state().unwrap();
        reopen(self);
        assert_eq!(
            self.answers(keys, withdrawals),
            before,
            "answers changed across a reopen"
        );
        assert_same_projections(&state, &self.ledger().state().unwrap());
    }
}

/// See [`Fixture::asked`].
pub enum Asked<'a> {
    Ledger(&'a Ledger),
    Copy(Box<State>),
}

impl Asked<'_> {
    pub fn outcome(&self, key: &str) -> Option<WithdrawalRequest> {
        match self {
            Asked::Ledger(ledger) => ledger.outcome(key).unwrap(),
            Asked::Copy(state) => state.outcome(key),
        }
    }

    pub fn claimed_by(&self, id: &str) -> Option<RequestKey> {
        match self {
            Asked::Ledger(ledger) => ledger.claimed_by(id).unwrap(),
            Asked::Copy(state) => state.claimed_by(id),
        }
    }

    pub fn held(&self, id: &str) -> Option<Hold> {
        match self {
            Asked::Ledger(ledger) => ledger.held(id).unwrap(),
            Asked::Copy(state) => state.held(id),
        }
    }

    pub fn captured(&self, id: &str) -> Option<Hold> {
        match self {
            Asked::Ledger(ledger) => ledger.captured(id).unwrap(),
            Asked::Copy(state) => state.captured(id),
        }
    }
}

impl Drop for Fixture {
    /// Every test's file ledger ends by checking that opening from the
    /// snapshot its clean close takes gives the state a full replay gives.
    fn drop(&mut self) {
        if std::thread::panicking() || self.ledger.is_none() {
            return;
        }
        match self.url.clone() {
            None => self.assert_snapshot_opens_as_replay(),
            Some(url) => self.assert_snapshot_opens_as_replay_on(&url),
        }
    }
}

impl Fixture {
    /// The same on PostgreSQL: a worker takes a snapshot into the database,
    /// closes, and the next worker's opening starts from it and ends in the
    /// state a full read-only replay gives.
    pub fn assert_snapshot_opens_as_replay_on(&mut self, url: &str) {
        let taken = self.ledger().snapshot();
        self.ledger = None;
        let taken = taken.expect("a worker takes a snapshot between batches");
        let reopened = self.open().expect("a worker closed cleanly opens again");
        let recovery_seen = reopened.recovery().clone();
        let loaded = reopened.recovery().snapshot.clone();
        let state = reopened.state().unwrap();
        drop(reopened);
        let loaded = loaded.unwrap_or_else(|| {
            panic!(
                "the next worker opened from no snapshot: took {taken:?}, {:?}",
                recovery_seen
            )
        });
        if let Some(taken) = taken {
            assert!(loaded.seq >= taken.stored.seq);
        }
        let (report, _) = payonce_postgres::verify(url).expect("the log verifies");
        assert_eq!(
            state.difference(&report.state),
            None,
            "opening from the snapshot at seq {} and a full replay differ",
            loaded.seq
        );
    }

    /// Closes the ledger (taking a snapshot), opens it from the snapshot,
    /// and checks its state against a read-only replay of the whole log.
    pub fn assert_snapshot_opens_as_replay(&mut self) {
        let healthy = self.ledger().sync().is_ok();
        self.ledger = None;
        if !healthy {
            // A ledger whose storage failed takes no snapshot at close.
            return;
        }
        let reopened = self.open().expect("a ledger closed cleanly opens again");
        let loaded = reopened.recovery().snapshot.clone();
        let state = reopened.state().unwrap();
        drop(reopened);
        let loaded = loaded.expect("opening used the snapshot taken at close");
        assert!(loaded.seq <= state.last_seq());
        let store = DirSnapshots::on(Arc::new(self.snapshots.clone()));
        let (report, checks) = payonce::verify_snapshots(
            Arc::new(self.storage.clone()),
            self.config.log.clone(),
            &store,
        )
        .expect("the log verifies");
        assert_eq!(
            state.difference(&report.state),
            None,
            "opening from the snapshot at seq {} and a full replay differ",
            loaded.seq
        );
        for check in checks {
            assert!(
                matches!(check.verdict, payonce::SnapshotVerdict::Matches),
                "snapshot {}: {:?}",
                check.snapshot.name,
                check.verdict
            );
        }
    }
}

/// Whether a send is running is about this process, not the log.
fn without_send_running(mut entry: InFlight) -> InFlight {
    entry.send_running = false;
    entry.send_worker = None;
    entry
}

pub fn assert_same_projections(a: &State, b: &State) {
    let records = |s: &State| {
        let mut r: Vec<_> = s
            .records()
            .map(|(k, r)| {
                let what = (
                    r.fingerprint(),
                    r.outcome(),
                    r.claimed_seq(),
                    r.claimed_at(),
                    r.last_error(),
                );
                (k.clone(), what)
            })
            .collect();
        r.sort_by(|x, y| x.0.cmp(&y.0));
        r
    };
    let claims = |s: &State| {
        let mut c: Vec<_> = s.claims().map(|(w, k)| (w.clone(), k.clone())).collect();
        c.sort();
        c
    };
    let holds = |s: &State| {
        let mut h: Vec<_> = s.holds().map(|(w, h)| (w.clone(), h.clone())).collect();
        h.sort_by(|x, y| x.0.cmp(&y.0));
        h
    };
    assert_eq!(records(a), records(b), "records differ");
    assert_eq!(claims(a), claims(b), "claims differ");
    assert_eq!(holds(a), holds(b), "holds differ");
    assert_eq!(a.held_totals(), b.held_totals(), "held totals differ");
}

#[derive(Debug, PartialEq)]
pub struct Answers {
    outcomes: Vec<Option<WithdrawalRequest>>,
    claims: Vec<Option<String>>,
    holds: Vec<Option<String>>,
    in_flight: Vec<InFlight>,
    totals: Vec<(String, String)>,
}

/// A simulated rail: counts sends per withdrawal, answers as scripted.
#[derive(Clone, Default)]
pub struct Rail {
    sends: Arc<Mutex<HashMap<String, usize>>>,
}

#[derive(Debug)]
pub struct RailDown;

impl std::fmt::Display for RailDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("rail timed out")
    }
}

impl std::error::Error for RailDown {}

impl Rail {
    fn count(&self, request: &WithdrawalRequest) {
        *self
            .sends
            .lock()
            .unwrap()
            .entry(request.id().to_string())
            .or_default() += 1;
    }

    /// Sends count of `request`'s withdrawal.
    pub fn sends(&self, request: &WithdrawalRequest) -> usize {
        self.sends
            .lock()
            .unwrap()
            .get(request.id().as_str())
            .copied()
            .unwrap_or(0)
    }

    pub fn total(&self) -> usize {
        self.sends.lock().unwrap().values().sum()
    }

    /// A send that succeeds with reference `0x<id>`.
    pub fn ok(
        &self,
    ) -> impl FnOnce(&WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> + '_ {
        move |request| {
            self.count(request);
            Ok(sent(request, &format!("0x{}", request.id())))
        }
    }

    /// A send that times out: the outcome is unknown.
    pub fn timeout(
        &self,
    ) -> impl FnOnce(&WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> + '_ {
        move |request| {
            self.count(request);
            Err(SendFailure::failed(RailDown))
        }
    }

    /// A send the rail refuses cleanly.
    pub fn refuse(
        &self,
    ) -> impl FnOnce(&WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> + '_ {
        move |request| {
            self.count(request);
            Err(SendFailure::Rejected(
                payonce_model::Reason::new("insufficient hot wallet balance").unwrap(),
            ))
        }
    }
}

/// `request` moved to sent with `reference`.
pub fn sent(request: &WithdrawalRequest, reference: &str) -> WithdrawalRequest {
    request
        .approve()
        .unwrap()
        .start_sending()
        .unwrap()
        .mark_sent(Reference::new(reference).unwrap())
        .unwrap()
}

/// Where the last record of the one-segment log in `storage` ends: the
/// zeros written ahead of the records begin there.
pub fn records_end(storage: Arc<dyn payonce_log::Storage>) -> usize {
    let reader = payonce_log::LogReader::open(storage, payonce_log::LogConfig::default()).unwrap();
    let last = reader.records_from(1).unwrap().last().unwrap().unwrap();
    assert_eq!(last.position.segment, 1, "a small log has one segment");
    let frame = payonce_log::FRAME_HEADER_LEN + last.payload.len().div_ceil(8) * 8;
    last.position.offset as usize + frame
}
