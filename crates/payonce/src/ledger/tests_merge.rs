//! Runs merged as the set asks: every pair answers as before, through the
//! merged run, after a snapshot and a reopening; the inputs leave the store
//! once no kept snapshot names them; prefetches read what decisions need.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use payonce_log::MemStorage;
use payonce_model::{Actor, Amount, Currency, Destination, Reference, WithdrawalRequest};
use payonce_runs::{RUNS_MAX, merge_prefix};

use super::tests_store::Hooked;
use super::{Config, Inner, Ledger, NewWithdrawal};
use crate::snapshot::{DirSnapshots, RunStore, SNAPSHOTS_KEPT, SnapshotPolicy};

fn config(store: &Arc<DirSnapshots>) -> Config {
    Config {
        set_apart_settled: true,
        snapshots: SnapshotPolicy::never(),
        snapshot_store: Some(store.clone()),
        ..Config::default()
    }
}

fn sent(request: &WithdrawalRequest) -> WithdrawalRequest {
    let reference = Reference::new("0xabc").unwrap_or_else(|e| panic!("{e}"));
    request
        .approve()
        .and_then(|r| r.start_sending())
        .and_then(|r| r.mark_sent(reference))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn new_withdrawal() -> NewWithdrawal {
    NewWithdrawal {
        amount: Amount::parse("2").unwrap_or_else(|e| panic!("{e}")),
        currency: Currency::new("USDC").unwrap_or_else(|e| panic!("{e}")),
        destination: Destination::new("0xfeed").unwrap_or_else(|e| panic!("{e}")),
        requested_by: Actor::new("alice").unwrap_or_else(|e| panic!("{e}")),
    }
}

/// Sends a withdrawal under each key `k-{n}` of `keys`, each settled pair
/// written into a run of its own.
fn settle_one_run_each(ledger: &Ledger, keys: std::ops::Range<usize>) -> Vec<WithdrawalRequest> {
    let mut sent_ones = Vec::new();
    for n in keys {
        let w = ledger
            .create(new_withdrawal())
            .unwrap_or_else(|e| panic!("{e}"));
        let answer = ledger
            .submit(&format!("k-{n}"), &w, |r| Ok(sent(r)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(answer, sent(&w));
        // The settling thread may have written it already.
        ledger.flush_settled().unwrap_or_else(|e| panic!("{e}"));
        sent_ones.push(w);
    }
    sent_ones
}

/// Merges until the set wants no merge; returns how many were made.
fn merge_all(ledger: &Ledger) -> usize {
    let mut merges = 0;
    while ledger
        .merge_runs()
        .unwrap_or_else(|e| panic!("{e}"))
        .is_some()
    {
        merges += 1;
    }
    merges
}

/// Every key answers its first outcome without sending, and every
/// withdrawal names its key.
fn assert_every_pair_answers(ledger: &Ledger, sent_ones: &[WithdrawalRequest]) {
    for (n, w) in sent_ones.iter().enumerate() {
        let key = format!("k-{n}");
        let replayed = ledger
            .submit(&key, w, |_| panic!("{key}: a settled key sends again"))
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(replayed, sent(w), "{key}");
        let holder = ledger.claimed_by(w.id()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(holder.map(|k| k.to_string()), Some(key));
    }
}

#[test]
fn runs_written_one_by_one_are_merged_and_every_pair_answers_from_the_merged_ones() {
    let store = Arc::new(DirSnapshots::on(Arc::new(MemStorage::new())));
    let storage = MemStorage::new();
    let ledger = Ledger::init_on(Arc::new(storage.clone()), config(&store))
        .unwrap_or_else(|e| panic!("{e}"));
    let sent_ones = settle_one_run_each(&ledger, 0..40);
    merge_all(&ledger);
    let memory = ledger.memory().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        (1..=RUNS_MAX).contains(&memory.runs) && memory.runs < 10,
        "40 runs written, {} held: {memory:?}",
        memory.runs
    );
    assert_eq!(memory.live_keys, 0, "every settled pair left memory");
    assert_every_pair_answers(&ledger, &sent_ones);
    // The state's runs are what a snapshot names; the inputs go once no
    // kept snapshot names them.
    for _ in 0..=SNAPSHOTS_KEPT {
        ledger.snapshot().unwrap_or_else(|e| panic!("{e}"));
        let w = ledger
            .create(new_withdrawal())
            .unwrap_or_else(|e| panic!("{e}"));
        ledger.claim("k-more", &w).ok();
    }
    let held = ledger.memory().unwrap_or_else(|e| panic!("{e}")).runs;
    let stored = store.list_runs().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        stored.len() <= held + SNAPSHOTS_KEPT,
        "{} runs stored, {held} held: {stored:?}",
        stored.len()
    );
    drop(ledger);
    let ledger =
        Ledger::open_on(Arc::new(storage), config(&store)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        ledger.recovery().snapshot.is_some(),
        "opened from a snapshot"
    );
    assert_every_pair_answers(&ledger, &sent_ones);
}

#[test]
fn a_set_of_runs_never_passes_its_most_however_many_are_written() {
    let store = Arc::new(DirSnapshots::on(Arc::new(MemStorage::new())));
    let ledger = Ledger::init_on(Arc::new(MemStorage::new()), config(&store))
        .unwrap_or_else(|e| panic!("{e}"));
    for n in 0..30 {
        settle_one_run_each(&ledger, n..n + 1);
        merge_all(&ledger);
        let memory = ledger.memory().unwrap_or_else(|e| panic!("{e}"));
        assert!(memory.runs <= RUNS_MAX, "after {n}: {memory:?}");
    }
    assert_eq!(merge_prefix(&[1, 1, 1, 1]), 4, "equal runs merge");
}

#[test]
fn a_decision_on_a_settled_key_reads_its_run_before_the_lock() {
    // Every read of a run asks whether the ledger's lock is free: the test
    // thread alone decides, and the settling thread has nothing to do
    // while the retries run, so a lock held there is the decision's own.
    let inner: Arc<OnceLock<Weak<Inner>>> = Arc::new(OnceLock::new());
    let under_lock = Arc::new(AtomicUsize::new(0));
    let (watched, counted) = (Arc::clone(&inner), Arc::clone(&under_lock));
    let store = Arc::new(Hooked {
        store: DirSnapshots::on(Arc::new(MemStorage::new())),
        hook: Arc::new(move || {
            let held = (watched.get().and_then(Weak::upgrade))
                .is_some_and(|inner| inner.state.try_lock().is_err());
            if held {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            false
        }),
    });
    let config = Config {
        set_apart_settled: true,
        snapshots: SnapshotPolicy::never(),
        snapshot_store: Some(store),
        ..Config::default()
    };
    let storage = MemStorage::new();
    let ledger = Ledger::init_on(Arc::new(storage.clone()), config.clone())
        .unwrap_or_else(|e| panic!("{e}"));
    let sent_ones = settle_one_run_each(&ledger, 0..8);
    drop(ledger);
    // Reopened, every pair is in a run and none in the cache.
    let ledger = Ledger::open_on(Arc::new(storage), config).unwrap_or_else(|e| panic!("{e}"));
    let _ = inner.set(Arc::downgrade(&ledger.inner));
    assert_every_pair_answers(&ledger, &sent_ones);
    assert_eq!(
        under_lock.load(Ordering::SeqCst),
        0,
        "a run was read under the lock"
    );
    let memory = ledger.memory().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(memory.reads_under_lock, 0, "{memory:?}");
}

#[test]
fn a_run_written_during_a_merge_is_taken_at_once_and_stays_before_the_merged_one() {
    // Guards against a merge that keeps every flush and snapshot waiting
    // while it writes (settled pairs then pile up in memory past the
    // budget), and against a merged run taken before the newer run
    // written meanwhile, which would shadow its pairs.
    use std::sync::mpsc;
    let (started, merge_started) = mpsc::channel::<()>();
    let (go, release) = mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(Some((started, release)));
    let store = Arc::new(Hooked {
        store: DirSnapshots::on(Arc::new(MemStorage::new())),
        hook: Arc::new(move || {
            if std::thread::current().name() == Some("test-merge")
                && let Some((started, release)) = gate.lock().ok().and_then(|mut g| g.take())
            {
                let _ = started.send(());
                let _ = release.recv();
            }
            false
        }),
    });
    let config = Config {
        snapshots: SnapshotPolicy::never(),
        snapshot_store: Some(store),
        settle_in_background: false,
        ..Config::default()
    };
    let ledger = Arc::new(
        Ledger::init_on(Arc::new(MemStorage::new()), config).unwrap_or_else(|e| panic!("{e}")),
    );
    let mut sent_ones = settle_one_run_each(&ledger, 0..4);
    let merging = Arc::clone(&ledger);
    let merge = std::thread::Builder::new()
        .name("test-merge".to_owned())
        .spawn(move || merging.merge_runs())
        .unwrap_or_else(|e| panic!("{e}"));
    merge_started
        .recv_timeout(std::time::Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("the merge never read: {e}"));
    // The merge is stopped in its first read: a flush is taken now.
    let (flushed, done) = mpsc::channel();
    let flushing = Arc::clone(&ledger);
    let flush = std::thread::spawn(move || {
        let sent = settle_one_run_each(&flushing, 4..5);
        let _ = flushed.send(());
        sent
    });
    let waited = done.recv_timeout(std::time::Duration::from_secs(30));
    let _ = go.send(());
    assert!(waited.is_ok(), "the flush waited for the merge");
    sent_ones.extend(
        flush
            .join()
            .unwrap_or_else(|_| panic!("the flush panicked")),
    );
    let merged = merge
        .join()
        .unwrap_or_else(|_| panic!("the merge panicked"));
    assert!(matches!(merged, Ok(Some(_))), "{merged:?}");
    let memory = ledger.memory().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        memory.runs, 2,
        "the flush's run, then the merged one: {memory:?}"
    );
    assert_every_pair_answers(&ledger, &sent_ones);
}
