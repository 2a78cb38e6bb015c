//! Creating a ledger is explicit, its ids are unique across ledgers, and
//! opening tells a caller without a subscriber what it repaired.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use payonce::{Config, Ledger, LedgerError, NewWithdrawal};
use payonce_log::{FaultyStorage, FsStorage, MemStorage};
use payonce_model::WithdrawalRequest;

use crate::{Rail, records_end};

fn new_withdrawal(ledger: &Ledger) -> WithdrawalRequest {
    ledger
        .create(NewWithdrawal {
            amount: "10".parse().unwrap(),
            currency: "USDC".parse().unwrap(),
            destination: "0xabc".parse().unwrap(),
            requested_by: "alice".parse().unwrap(),
        })
        .unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn open_refuses_a_directory_holding_traces_of_a_ledger_but_no_log() {
    // Guards against a directory whose segment was deleted reopening as a new ledger that mints ids again.
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::init(dir.path()).unwrap();
    let w = new_withdrawal(&ledger);
    ledger.submit("req-1", &w, Rail::default().ok()).unwrap();
    drop(ledger);
    for name in names(dir.path()) {
        if name.ends_with(".log") {
            fs::remove_file(dir.path().join(name)).unwrap();
        }
    }
    fs::create_dir(dir.path().join("audit-index")).unwrap();
    let before = names(dir.path());
    let error = Ledger::open(dir.path()).unwrap_err();
    match &error {
        LedgerError::NoLog { found, .. } => {
            assert_eq!(found, &["CHECKPOINT", "LOCK", "audit-index", "snapshots"]);
        }
        other => panic!("{other}"),
    }
    assert!(error.to_string().contains("traces of a ledger"), "{error}");
    assert_eq!(names(dir.path()), before, "nothing was written");
    // Nor does an explicit creation take it for an empty directory.
    assert!(matches!(
        Ledger::init(dir.path()).unwrap_err(),
        LedgerError::NotEmpty { .. }
    ));
}

#[test]
fn open_refuses_an_empty_or_missing_directory_and_init_creates_a_ledger_there() {
    // Guards against opening creating a ledger nobody asked for.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("ledger");
    let error = Ledger::open(&missing).unwrap_err();
    assert!(
        matches!(&error, LedgerError::NoLog { found, .. } if found.is_empty()),
        "{error}"
    );
    assert!(!missing.exists(), "nothing was created");
    drop(Ledger::init(&missing).unwrap());
    drop(Ledger::open(&missing).unwrap());
}

#[test]
fn init_refuses_a_directory_holding_a_log_or_anything_else() {
    // Guards against an explicit creation writing over, or beside, a ledger.
    let dir = tempfile::tempdir().unwrap();
    drop(Ledger::init(dir.path()).unwrap());
    match Ledger::init(dir.path()).unwrap_err() {
        LedgerError::NotEmpty { found, count, .. } => {
            assert_eq!(
                found,
                [
                    "00000000000000000001.log",
                    "CHECKPOINT",
                    "LOCK",
                    "snapshots"
                ]
            );
            assert_eq!(count, 4);
        }
        other => panic!("{other}"),
    }
    let other = tempfile::tempdir().unwrap();
    fs::write(other.path().join("notes.txt"), b"not a ledger").unwrap();
    assert!(matches!(
        Ledger::init(other.path()).unwrap_err(),
        LedgerError::NotEmpty { count: 1, .. }
    ));
}

#[test]
fn a_creation_a_crash_cut_short_is_made_again() {
    // Guards against a crash during init leaving a directory nothing can open or create.
    let dir = tempfile::tempdir().unwrap();
    // What init leaves when it dies before its first segment is in place.
    fs::write(dir.path().join("LOCK"), b"").unwrap();
    fs::write(dir.path().join("00000000000000000001.log.tmp"), b"torn").unwrap();
    let ledger = Ledger::init(dir.path()).unwrap();
    assert_eq!(ledger.last_seq(), 1);
}

#[test]
fn minted_ids_are_unique_across_ledgers_and_restored_copies() {
    // Guards against two ledgers, or a ledger and an old backup of it, minting the same id for different money.
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (
        Ledger::init(one.path()).unwrap(),
        Ledger::init(two.path()).unwrap(),
    );
    let (wa, wb) = (new_withdrawal(&a), new_withdrawal(&b));
    assert_ne!(wa.id(), wb.id());
    drop(b);
    // A backup taken now, restored later beside the ledger it copies.
    a.sync().unwrap();
    let backup = tempfile::tempdir().unwrap();
    for name in names(one.path()) {
        fs::copy(one.path().join(&name), backup.path().join(&name)).unwrap();
    }
    let later = new_withdrawal(&a);
    let restored = Ledger::open(backup.path()).unwrap();
    let from_backup = new_withdrawal(&restored);
    assert_eq!(later.id().as_str().rsplit('-').next(), Some("3"));
    assert_eq!(from_backup.id().as_str().rsplit('-').next(), Some("4"));
    assert_ne!(later.id(), from_backup.id());
    // The form: `w-<epoch in hex>-<sequence number>`.
    let epoch = restored.state().unwrap().epoch().unwrap();
    assert_eq!(from_backup.id().as_str(), format!("w-{epoch:x}-4"));
}

#[test]
fn opening_reports_what_it_repaired_to_a_caller_without_a_subscriber() {
    // Guards against a torn tail cut at open reaching an embedder only through tracing.
    let dir = tempfile::tempdir().unwrap();
    drop(Ledger::init(dir.path()).unwrap());
    let segment = dir.path().join("00000000000000000001.log");
    let mut bytes = fs::read(&segment).unwrap();
    // The records end where the zeros written ahead of them begin.
    let clean_len = records_end(Arc::new(FsStorage::new(dir.path())));
    bytes[clean_len..clean_len + 13].fill(0xab);
    fs::write(&segment, &bytes).unwrap();
    let clean_len = clean_len as u64;
    let ledger = Ledger::open(dir.path()).unwrap();
    let torn = ledger.recovery().log.torn_tail.clone().unwrap();
    assert_eq!((torn.segment, torn.offset, torn.len), (1, clean_len, 13));
    let saved_as = torn.saved_as.unwrap();
    assert!(saved_as.contains(".torn-"), "{saved_as}");
    assert_eq!(ledger.recovery().log.records, 1);
}

#[test]
fn a_dropped_ticket_does_not_wait_for_the_disk() {
    // Guards against a cancelled request future blocking an async executor's thread on an fsync.
    let storage = FaultyStorage::new(Arc::new(MemStorage::new()));
    let faults = storage.faults().clone();
    let ledger = Ledger::init_on(Arc::new(storage), Config::default()).unwrap();
    let w = new_withdrawal(&ledger);
    let payonce::Claim::Granted(ticket) = ledger.claim("req-1", &w).unwrap() else {
        panic!("a new key is granted")
    };
    let held = faults.hold_syncs();
    // With every sync held, a drop that waited for one would never return.
    drop(ticket);
    let record = ledger
        .state()
        .unwrap()
        .record("req-1")
        .map(|r| r.last_error());
    assert!(record.flatten().unwrap().contains("dropped"));
    held.release();
    ledger.sync().unwrap();
    assert_eq!(ledger.in_flight().len(), 1, "the key stays in flight");
}

#[test]
fn a_ledger_restored_from_a_snapshot_behind_its_witness_is_refused() {
    // Guards against a restored disk snapshot forgetting every claim made since, and a second send.
    // Kept in memory, as an embedder keeps it in its own database.
    let witness = payonce_log::MemWitness::new();
    let config = || Config {
        witness: Some(Arc::new(witness.clone())),
        ..Config::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::init_with(dir.path(), config()).unwrap();
    let w = new_withdrawal(&ledger);
    ledger.submit("req-1", &w, Rail::default().ok()).unwrap();
    // The snapshot: every file as it is now, the checkpoint included.
    let snapshot = tempfile::tempdir().unwrap();
    for name in names(dir.path()) {
        fs::copy(dir.path().join(&name), snapshot.path().join(&name)).unwrap();
    }
    let later = new_withdrawal(&ledger);
    ledger
        .submit("req-2", &later, Rail::default().ok())
        .unwrap();
    let head = ledger.head().unwrap();
    drop(ledger);
    assert_eq!(witness.head(), Some(head), "a clean close publishes");
    // The snapshot is consistent with itself: without the witness it opens.
    let copy = tempfile::tempdir().unwrap();
    for name in names(snapshot.path()) {
        fs::copy(snapshot.path().join(&name), copy.path().join(&name)).unwrap();
    }
    drop(Ledger::open(copy.path()).unwrap());
    // With it, it is refused, naming the head it lacks; nothing is written.
    let before = names(snapshot.path());
    let error = Ledger::open_with(snapshot.path(), config()).unwrap_err();
    assert!(
        matches!(
            &error,
            LedgerError::Log(payonce_log::LogError::MissingHead { expected, .. }) if *expected == head
        ),
        "{error}"
    );
    assert!(error.to_string().contains("its witness"), "{error}");
    assert_eq!(names(snapshot.path()), before);
    // The ledger itself opens with its witness and goes on from its head.
    let ledger = Ledger::open_with(dir.path(), config()).unwrap();
    assert!(
        ledger.head().unwrap().seq > head.seq,
        "opening appended its `opened` event"
    );
}
