//! A ledger whose runs of settled pairs cannot be read: every call that
//! names a pair in them fails closed, with nothing judged or appended, and
//! answers as before once the runs read again; a name the filters place in
//! no run is answered without reading them; an opening believes runs
//! before their blocks are checked, and sets aside one the check finds
//! damaged.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::tests_store::Hooked;
use super::{Config, Ledger, NewWithdrawal};
use crate::error::LedgerError;
use crate::snapshot::{DirSnapshots, SnapshotPolicy};
use payonce_log::MemStorage;
use payonce_model::{Actor, Amount, Currency, Destination, Reference, WithdrawalRequest};

/// Pairs set apart at each opening into runs of `store`; snapshots only
/// when asked for.
fn config(store: Arc<Hooked>) -> Config {
    Config {
        set_apart_settled: true,
        snapshots: SnapshotPolicy::never(),
        snapshot_store: Some(store),
        ..Config::default()
    }
}

fn new_withdrawal() -> NewWithdrawal {
    NewWithdrawal {
        amount: Amount::parse("7.5").unwrap_or_else(|e| panic!("{e}")),
        currency: Currency::new("USDC").unwrap_or_else(|e| panic!("{e}")),
        destination: Destination::new("0xfeed").unwrap_or_else(|e| panic!("{e}")),
        requested_by: Actor::new("alice").unwrap_or_else(|e| panic!("{e}")),
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

/// A ledger reopened with key `k-1`'s sent withdrawal in a run, out of
/// memory, and the switch that fails reading its runs.
fn reopened_with_switch(storage: &MemStorage) -> (Ledger, WithdrawalRequest, Arc<AtomicBool>) {
    let failing = Arc::new(AtomicBool::new(false));
    let switch = Arc::clone(&failing);
    let store = Arc::new(Hooked {
        store: DirSnapshots::on(Arc::new(MemStorage::new())),
        hook: Arc::new(move || switch.load(Ordering::SeqCst)),
    });
    let ledger = Ledger::init_on(Arc::new(storage.clone()), config(Arc::clone(&store)))
        .unwrap_or_else(|e| panic!("{e}"));
    let w = ledger
        .create(new_withdrawal())
        .unwrap_or_else(|e| panic!("{e}"));
    ledger
        .submit("k-1", &w, |r| Ok(sent(r)))
        .unwrap_or_else(|e| panic!("{e}"));
    drop(ledger);
    let ledger =
        Ledger::open_on(Arc::new(storage.clone()), config(store)).unwrap_or_else(|e| panic!("{e}"));
    (ledger, w, failing)
}

fn is_archive(error: &LedgerError) -> bool {
    matches!(error, LedgerError::Archive(_))
}

#[test]
fn an_archive_that_cannot_be_read_fails_every_call_naming_a_name_and_writes_nothing() {
    let storage = MemStorage::new();
    let (ledger, w, switch) = reopened_with_switch(&storage);
    switch.store(true, Ordering::SeqCst);
    let before = ledger.last_seq();
    let sends = std::cell::Cell::new(0);
    let retried = ledger.submit("k-1", &w, |r| {
        sends.set(sends.get() + 1);
        Ok(sent(r))
    });
    assert!(
        matches!(&retried, Err(crate::SubmitError::Ledger(error)) if is_archive(error)),
        "{retried:?}"
    );
    // Another key for the same withdrawal is not judged either: its
    // holder cannot be read.
    let other = ledger.claim("k-2", &w);
    assert!(
        matches!(&other, Err(error) if is_archive(error)),
        "{other:?}"
    );
    let asked = ledger.outcome("k-1");
    assert!(
        matches!(&asked, Err(error) if is_archive(error)),
        "{asked:?}"
    );
    assert!(matches!(ledger.claimed_by(w.id()), Err(ref error) if is_archive(error)));
    // A copy of the whole state cannot be made either.
    assert!(matches!(ledger.state(), Err(ref error) if is_archive(error)));
    assert_eq!(ledger.last_seq(), before, "nothing was appended");
    assert_eq!(sends.get(), 0, "nothing was sent");
    // Once the archive reads again, the retry replays the first outcome.
    switch.store(false, Ordering::SeqCst);
    let replayed = ledger
        .submit("k-1", &w, |_| panic!("a settled key sends again"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(replayed, sent(&w));
    assert_eq!(ledger.last_seq(), before);
    let refused = ledger.claim("k-2", &w);
    assert!(
        matches!(&refused, Err(LedgerError::Refused(crate::Refusal::Claimed { holder, .. })) if holder.as_str() == "k-1"),
        "{refused:?}"
    );
}

#[test]
fn a_new_key_is_judged_without_reading_the_runs_when_their_filters_place_it_in_none() {
    // Guards against every new key waiting on the runs: a filter that says
    // "not here" is believed, so only its rare false positives wait.
    let storage = MemStorage::new();
    let (ledger, _, switch) = reopened_with_switch(&storage);
    switch.store(true, Ordering::SeqCst);
    let mut waiting = Vec::new();
    for n in 0..64 {
        // A new withdrawal names no key, and its minted id is new.
        let created = ledger
            .create(new_withdrawal())
            .unwrap_or_else(|e| panic!("{e}"));
        let before = ledger.last_seq();
        let key = format!("k-new-{n}");
        match ledger.claim(&key, &created) {
            // A filter's false positive reads the run, which fails.
            Err(error) if is_archive(&error) => {
                assert_eq!(ledger.last_seq(), before, "{key}: nothing is appended");
                waiting.push((key, created));
            }
            Ok(super::Claim::Granted(_)) => {}
            other => panic!("{key}: {other:?}"),
        }
    }
    // A false positive is about 1 in 4,000 names: five of 64 would
    // happen far less than once in a billion runs.
    assert!(
        waiting.len() < 5,
        "{} new keys waited on the runs",
        waiting.len()
    );
    switch.store(false, Ordering::SeqCst);
    for (key, created) in waiting {
        let granted = ledger
            .submit(&key, &created, |r| Ok(sent(r)))
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(granted, sent(&created));
    }
}

#[test]
fn a_file_ledger_opens_without_reading_its_runs_and_sets_aside_one_its_check_finds_damaged() {
    // Guards against an opening whose time grows with the history (every
    // block of every run read before the first decision), and against a
    // damaged block believed meanwhile: the pass in the background finds
    // it, sets the run aside, and the next opening falls back.
    let (storage, runs) = (MemStorage::new(), Arc::new(MemStorage::new()));
    let config = || Config {
        snapshots: SnapshotPolicy::never(),
        snapshot_store: Some(Arc::new(DirSnapshots::on(runs.clone()))),
        ..Config::default()
    };
    let ledger =
        Ledger::init_on(Arc::new(storage.clone()), config()).unwrap_or_else(|e| panic!("{e}"));
    let w = ledger
        .create(new_withdrawal())
        .unwrap_or_else(|e| panic!("{e}"));
    ledger
        .submit("k-1", &w, |r| Ok(sent(r)))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(ledger.snapshot(), Ok(Some(_))));
    drop(ledger);
    let run = format!("{:020}.run", 1);
    let mut bytes = runs.file(&run).unwrap_or_else(|| panic!("no run {run}"));
    // The first record block starts the run: a byte flipped there fails
    // its checksum, not the trailer's.
    bytes[8] ^= 0x40;
    runs.put_file(&run, &bytes);

    let ledger =
        Ledger::open_on(Arc::new(storage.clone()), config()).unwrap_or_else(|e| panic!("{e}"));
    assert!(ledger.recovery().snapshot.is_some(), "believed at opening");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let checked = loop {
        match ledger.runs_checked() {
            Some(checked) => break checked,
            None if std::time::Instant::now() < deadline => std::thread::yield_now(),
            None => panic!("the check never ended"),
        }
    };
    assert!(checked.is_err(), "{checked:?}");
    assert!(runs.file(&run).is_none(), "the run is set aside");
    drop(ledger);

    let ledger =
        Ledger::open_on(Arc::new(storage.clone()), config()).unwrap_or_else(|e| panic!("{e}"));
    assert!(ledger.recovery().snapshot.is_none(), "fell back to the log");
    let replayed = ledger
        .submit("k-1", &w, |_| panic!("a settled key sends again"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(replayed, sent(&w));
}
