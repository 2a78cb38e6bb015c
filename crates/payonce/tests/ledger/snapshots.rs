//! Snapshots of the projections: opening from one gives the state a full
//! replay gives; each way one can be wrong is refused, named, set aside,
//! and the opening falls back to an older one or a full replay, never
//! panicking and never opening a log a full replay would refuse for a
//! missing head; and `verify_snapshots` finds a snapshot whose state is not
//! the log's, even one every check of an opening passes.

use std::sync::Arc;

use payonce::NewWithdrawal;
use payonce::{
    Config, DirSnapshots, Ledger, LedgerError, RunOut, RunStore, SCHEMA_VERSION,
    SNAPSHOT_FORMAT_VERSION, SNAPSHOT_HEADER_LEN, SnapshotError, SnapshotPolicy, SnapshotSetAside,
    SnapshotStore, SnapshotVerdict, State, StoredSnapshot,
};
use payonce_log::{CrashMode, LogConfig, MemStorage, Storage};
use payonce_model::{Actor, Amount, Currency, Destination};

use crate::{Rail, START};

/// A ledger on in-memory storage whose snapshots go to a store of their own.
struct Setup {
    log: MemStorage,
    snapshots: MemStorage,
    config: Config,
}

impl Setup {
    fn new() -> Setup {
        let snapshots = MemStorage::new();
        let config = Config {
            clock: Arc::new(payonce::ManualClock::new(START)),
            snapshot_store: Some(Arc::new(DirSnapshots::on(Arc::new(snapshots.clone())))),
            snapshots: SnapshotPolicy::never(),
            ..Config::default()
        };
        Setup {
            log: MemStorage::new(),
            snapshots,
            config,
        }
    }

    fn store(&self) -> DirSnapshots {
        DirSnapshots::on(Arc::new(self.snapshots.clone()))
    }

    fn init(&self) -> Ledger {
        Ledger::init_on(Arc::new(self.log.clone()), self.config.clone()).unwrap()
    }

    fn open(&self) -> Result<Ledger, LedgerError> {
        Ledger::open_on(Arc::new(self.log.clone()), self.config.clone())
    }

    /// The state a read-only replay of every event gives.
    fn replayed(&self) -> State {
        payonce::verify_on(Arc::new(self.log.clone()), LogConfig::default())
            .unwrap()
            .state
    }

    /// The names of the snapshots held, newest first.
    fn held(&self) -> Vec<String> {
        self.store()
            .list()
            .unwrap()
            .into_iter()
            .map(|snapshot| snapshot.name)
            .collect()
    }

    fn bytes(&self, name: &str) -> Vec<u8> {
        self.snapshots.read(name, u64::MAX).unwrap()
    }

    fn put(&self, name: &str, bytes: &[u8]) {
        let tmp = format!("{name}.edit");
        let mut file = self.snapshots.create_new(&tmp).unwrap();
        file.append(bytes).unwrap();
        file.sync_data().unwrap();
        drop(file);
        self.snapshots.rename(&tmp, name).unwrap();
    }
}

/// Submits `count` new withdrawals, each under its own key, some failing.
fn submit(ledger: &Ledger, count: usize, rail: &Rail) {
    for n in 0..count {
        let fixture_key = format!("k-{}-{n}", ledger.last_seq());
        let request = ledger
            .create(NewWithdrawal {
                amount: Amount::parse("7.5").unwrap(),
                currency: Currency::new("USDC").unwrap(),
                destination: Destination::new("0xfeed").unwrap(),
                requested_by: Actor::new("alice").unwrap(),
            })
            .unwrap();
        let _ = if n % 5 == 4 {
            ledger.submit(&fixture_key, &request, rail.timeout())
        } else {
            ledger.submit(&fixture_key, &request, rail.ok())
        };
    }
}

/// A ledger with two snapshots, events after each, closed without a
/// snapshot at close: (older seq, newer seq).
fn two_snapshots(setup: &Setup) -> (u64, u64) {
    let ledger = setup.init();
    let rail = Rail::default();
    submit(&ledger, 6, &rail);
    let older = ledger.snapshot().unwrap().unwrap().stored.seq;
    submit(&ledger, 6, &rail);
    let newer = ledger.snapshot().unwrap().unwrap().stored.seq;
    submit(&ledger, 3, &rail);
    drop(ledger);
    assert_eq!(setup.held().len(), 2);
    (older, newer)
}

/// Rewrites the header checksum (and the body's) of snapshot bytes after
/// an edit, so only the edited field is wrong.
fn reseal(bytes: &mut [u8]) {
    let body = crc32fast::hash(&bytes[SNAPSHOT_HEADER_LEN..body_end(bytes)]);
    bytes[80..84].copy_from_slice(&body.to_le_bytes());
    let header = crc32fast::hash(&bytes[0..92]);
    bytes[92..96].copy_from_slice(&header.to_le_bytes());
}

/// Where the body of snapshot bytes ends, and its manifest starts.
fn body_end(bytes: &[u8]) -> usize {
    let body_len = u64::from_le_bytes(bytes[72..80].try_into().unwrap());
    SNAPSHOT_HEADER_LEN + body_len as usize
}

/// What opening after an edit of the newest of two snapshots gave.
struct EditedNewest {
    setup: Setup,
    /// The newest snapshot's name, its seq, and its bytes as edited.
    name: String,
    seq: u64,
    bytes: Vec<u8>,
    refused: SnapshotSetAside,
}

/// Opens after the newest of two snapshots was edited by `edit`: that one
/// is refused, the older one is loaded, and the state is the full
/// replay's.
fn open_with_newest_edited(edit: impl FnOnce(&mut Vec<u8>)) -> EditedNewest {
    let setup = Setup::new();
    let (older, newer) = two_snapshots(&setup);
    let name = setup.held()[0].clone();
    let mut bytes = setup.bytes(&name);
    edit(&mut bytes);
    setup.put(&name, &bytes);
    let ledger = setup.open().unwrap();
    let recovery = ledger.recovery().clone();
    assert_eq!(recovery.snapshots_set_aside.len(), 1, "{recovery:?}");
    assert_eq!(
        recovery.snapshot.as_ref().map(|snapshot| snapshot.seq),
        Some(older)
    );
    let state = ledger.state().unwrap();
    drop(ledger);
    assert_eq!(state.difference(&setup.replayed()), None);
    let refused = recovery.snapshots_set_aside[0].clone();
    EditedNewest {
        setup,
        name,
        seq: newer,
        bytes,
        refused,
    }
}

/// Opens after the newest snapshot was edited by `edit`: the newest is
/// refused with an error `check` accepts and set aside, the older one is
/// loaded, and the state is the full replay's.
fn refused_then_older(edit: impl FnOnce(&mut Vec<u8>), check: impl FnOnce(&SnapshotError)) {
    let opened = open_with_newest_edited(edit);
    let refused = &opened.refused;
    assert_eq!(refused.name, opened.name);
    check(&refused.error);
    let aside = refused
        .set_aside_as
        .clone()
        .expect("a refused snapshot is set aside");
    assert!(
        aside.ends_with(&format!("{:020}.snapshot.refused", opened.seq)),
        "{aside}"
    );
    let names = payonce_log::Storage::list(&opened.setup.snapshots).unwrap();
    assert!(
        names.iter().any(|name| name.ends_with(".refused")),
        "never deleted: {names:?}"
    );
}

#[test]
fn opening_from_a_snapshot_replays_only_the_events_after_it() {
    // Guards against a snapshot that is loaded but then replayed over from the first event, or skipped.
    let setup = Setup::new();
    let (_, newer) = two_snapshots(&setup);
    let ledger = setup.open().unwrap();
    let recovery = ledger.recovery().clone();
    assert_eq!(
        recovery.snapshot.as_ref().map(|snapshot| snapshot.seq),
        Some(newer)
    );
    assert!(recovery.snapshots_set_aside.is_empty());
    assert_eq!(
        recovery.replayed,
        ledger.last_seq() - 1 - newer,
        "only the tail, before this open's own event"
    );
    let state = ledger.state().unwrap();
    drop(ledger);
    assert_eq!(state.difference(&setup.replayed()), None);
}

#[test]
fn a_snapshot_whose_body_was_damaged_is_refused_by_its_checksum() {
    // Guards against a flipped bit in a snapshot's body reaching the projections.
    refused_then_older(
        |bytes| {
            let last = body_end(bytes) - 1;
            bytes[last] ^= 0x01;
        },
        |error| {
            assert!(
                matches!(error, SnapshotError::Checksum { part: "body", .. }),
                "{error}"
            )
        },
    );
}

#[test]
fn a_snapshot_whose_manifest_was_damaged_is_refused_by_its_checksum() {
    // Guards against an opening that believes a manifest without its
    // checksum: the last byte is the manifest's checksum.
    refused_then_older(
        |bytes| *bytes.last_mut().unwrap() ^= 0x01,
        |error| {
            assert!(
                matches!(
                    error,
                    SnapshotError::Checksum {
                        part: "manifest",
                        ..
                    }
                ),
                "{error}"
            )
        },
    );
}

#[test]
fn a_run_whose_fences_were_damaged_is_refused_at_opening_naming_the_run_and_the_offset() {
    // Guards against an opening that believes a run's fences without their
    // checksum: the run's last byte is the checksum of its fences and
    // trailer. Every snapshot naming the run is refused, and the opening
    // replays the log, answering as before.
    let setup = Setup::new();
    two_snapshots(&setup);
    let runs: Vec<String> = payonce_log::Storage::list(&setup.snapshots)
        .unwrap()
        .into_iter()
        .filter(|name| name.ends_with(".run"))
        .collect();
    let oldest = runs.iter().min().unwrap().clone();
    let mut bytes = setup.bytes(&oldest);
    *bytes.last_mut().unwrap() ^= 0x01;
    let len = bytes.len() as u64;
    setup.put(&oldest, &bytes);
    let ledger = setup.open().unwrap();
    let recovery = ledger.recovery().clone();
    assert_eq!(recovery.snapshot, None, "{recovery:?}");
    assert_eq!(recovery.snapshots_set_aside.len(), 2, "both name the run");
    for refused in &recovery.snapshots_set_aside {
        assert!(
            matches!(&*refused.error, SnapshotError::Run { run: 1, error: payonce_runs::RunError::Corrupt { offset, .. } }
                if *offset < len),
            "{}",
            refused.error
        );
    }
    assert_eq!(ledger.state().unwrap().difference(&setup.replayed()), None);
}

#[test]
fn a_run_whose_filter_was_damaged_is_read_without_it_and_answers_as_before() {
    // Guards against believing a filter whose bits changed: a filter that
    // says "not here" for a name that is there would hand a settled key a
    // second send. The run's blocks are checksummed, so the snapshot is
    // kept and the run read for every name.
    let setup = Setup::new();
    two_snapshots(&setup);
    let run = payonce_log::Storage::list(&setup.snapshots)
        .unwrap()
        .into_iter()
        .filter(|name| name.ends_with(".run"))
        .min()
        .unwrap();
    let mut bytes = setup.bytes(&run);
    let trailer = bytes.len() - payonce_runs::TRAILER_LEN;
    let filter_at = u64::from_le_bytes(bytes[trailer + 68..trailer + 76].try_into().unwrap());
    bytes[filter_at as usize] ^= 0xff;
    setup.put(&run, &bytes);
    let ledger = setup.open().unwrap();
    let recovery = ledger.recovery().clone();
    assert!(recovery.snapshot.is_some(), "{recovery:?}");
    assert!(recovery.snapshots_set_aside.is_empty(), "{recovery:?}");
    let memory = ledger.memory().unwrap();
    assert_eq!(memory.filters_ignored, 1, "{memory:?}");
    assert_eq!(ledger.state().unwrap().difference(&setup.replayed()), None);
}

#[test]
fn a_snapshot_whose_header_was_damaged_is_refused_by_its_checksum() {
    // Guards against believing a header whose bytes changed, its seq say.
    refused_then_older(
        |bytes| bytes[25] ^= 0x10,
        |error| {
            assert!(
                matches!(error, SnapshotError::Checksum { part: "header", .. }),
                "{error}"
            )
        },
    );
}

#[test]
fn a_snapshot_naming_a_head_the_log_does_not_hold_is_refused() {
    // Guards against a snapshot of a rewritten history: its digest is not the log's at its head.
    refused_then_older(
        |bytes| {
            bytes[40] ^= 0xFF;
            reseal(bytes);
        },
        |error| {
            assert!(
                matches!(error, SnapshotError::HeadNotInLog { found: Some(_), .. }),
                "{error}"
            )
        },
    );
}

#[test]
fn a_snapshot_of_another_ledger_is_refused() {
    // Guards against a snapshot copied from another ledger's directory.
    refused_then_older(
        |bytes| {
            bytes[16] ^= 0x01;
            reseal(bytes);
        },
        |error| assert!(matches!(error, SnapshotError::OtherLog { .. }), "{error}"),
    );
}

#[test]
fn a_snapshot_of_a_newer_format_or_schema_is_refused_and_left_for_a_build_that_reads_it() {
    // Guards against reading a format this build does not know as if it
    // were its own, and against setting aside, for every later opening, a
    // snapshot this build is only too old to read: in a rolling deploy an
    // old worker's refusal would hide a new worker's snapshot.
    for (at, found) in [
        (8, SNAPSHOT_FORMAT_VERSION + 1),
        (12, u32::from(SCHEMA_VERSION) + 1),
    ] {
        let opened = open_with_newest_edited(|bytes| {
            bytes[at..at + 4].copy_from_slice(&found.to_le_bytes());
            reseal(bytes);
        });
        let refused = &opened.refused;
        assert!(refused.error.needs_a_newer_build(), "{}", refused.error);
        assert!(
            matches!(
                *refused.error,
                SnapshotError::Version { found: f, .. } | SnapshotError::Schema { found: f, .. }
                    if f == found
            ),
            "{}",
            refused.error
        );
        assert_eq!(refused.set_aside_as, None);
        assert_eq!(
            opened.setup.bytes(&opened.name),
            opened.bytes,
            "left in place, as it was"
        );
    }
}

#[test]
fn a_snapshot_of_an_older_format_is_refused_and_the_log_replayed_instead() {
    // Guards against a build reading format 1's body, which has no
    // `keys_at`, as its own: after an upgrade, the opening sets it aside
    // and replays.
    refused_then_older(
        |bytes| {
            bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
            reseal(bytes);
        },
        |error| {
            assert!(
                matches!(
                    error,
                    SnapshotError::Version {
                        found: 1,
                        supported: SNAPSHOT_FORMAT_VERSION
                    }
                ),
                "{error}"
            );
            assert!(!error.needs_a_newer_build());
        },
    );
}

#[test]
fn a_truncated_or_extended_snapshot_is_refused_by_its_length() {
    // Guards against a snapshot cut short by a crash, or with bytes appended, being read.
    refused_then_older(
        |bytes| {
            bytes.truncate(bytes.len() - 7);
        },
        |error| assert!(matches!(error, SnapshotError::Length { .. }), "{error}"),
    );
    refused_then_older(
        |bytes| bytes.extend_from_slice(&[0; 9]),
        |error| assert!(matches!(error, SnapshotError::Length { .. }), "{error}"),
    );
    refused_then_older(
        |bytes| bytes.truncate(40),
        |error| assert!(matches!(error, SnapshotError::Length { .. }), "{error}"),
    );
}

#[test]
fn a_snapshot_whose_counts_pass_its_bytes_is_refused_before_allocating() {
    // Guards against a count field that would allocate more than the snapshot could hold.
    refused_then_older(
        |bytes| {
            // The currencies' count, the first field after the scalars.
            let at = SNAPSHOT_HEADER_LEN + 18;
            bytes[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
            reseal(bytes);
        },
        |error| {
            assert!(
                matches!(error, SnapshotError::Invalid { field: "currencies", offset, .. } if *offset == (SNAPSHOT_HEADER_LEN + 18) as u64),
                "{error}"
            )
        },
    );
}

#[test]
fn a_snapshot_with_an_invalid_field_is_refused_naming_it() {
    // Guards against a field that breaks the model's rules (a currency code in lower case) reaching the state.
    refused_then_older(
        |bytes| {
            // The first currency's code, after its count and length.
            let at = SNAPSHOT_HEADER_LEN + 18 + 8 + 2;
            bytes[at] = b'u';
            reseal(bytes);
        },
        |error| {
            assert!(
                matches!(
                    error,
                    SnapshotError::Invalid {
                        field: "currency code",
                        ..
                    }
                ),
                "{error}"
            )
        },
    );
}

#[test]
fn with_every_snapshot_refused_opening_replays_every_event() {
    // Guards against an open that fails, rather than falls back, when no snapshot is usable.
    let setup = Setup::new();
    two_snapshots(&setup);
    for name in setup.held() {
        let mut bytes = setup.bytes(&name);
        bytes[SNAPSHOT_HEADER_LEN] ^= 0x01;
        setup.put(&name, &bytes);
    }
    let ledger = setup.open().unwrap();
    assert_eq!(ledger.recovery().snapshots_set_aside.len(), 2);
    assert!(ledger.recovery().snapshot.is_none());
    assert_eq!(ledger.recovery().replayed, ledger.last_seq() - 1);
    assert!(setup.held().is_empty(), "both set aside");
}

#[test]
fn a_snapshot_past_a_log_restored_from_an_older_copy_is_refused_and_the_log_replayed() {
    // Guards against a snapshot newer than the log hiding that the log went back: the log's own checks decide, and the snapshot is refused.
    let setup = Setup::new();
    let ledger = setup.init();
    let rail = Rail::default();
    submit(&ledger, 4, &rail);
    ledger.sync().unwrap();
    let older_copy = setup.log.crash(CrashMode::DropUnsynced, 1);
    submit(&ledger, 4, &rail);
    let taken = ledger.snapshot().unwrap().unwrap();
    drop(ledger);
    let restored = Setup {
        log: older_copy,
        snapshots: setup.snapshots.clone(),
        config: setup.config.clone(),
    };
    let ledger = restored.open().unwrap();
    let recovery = ledger.recovery().clone();
    assert!(recovery.snapshot.is_none());
    assert_eq!(recovery.snapshots_set_aside.len(), 1);
    assert!(
        matches!(&*recovery.snapshots_set_aside[0].error, SnapshotError::HeadNotInLog { head, found: None } if *head == taken.head),
        "{:?}",
        recovery.snapshots_set_aside[0].error
    );
    assert!(ledger.last_seq() < taken.stored.seq);
}

#[test]
fn verify_snapshots_finds_a_snapshot_written_with_a_wrong_field() {
    // Guards against a bug in writing snapshots hiding: the refusals count is wrong, every check of an opening passes, and the audit names the field.
    let setup = Setup::new();
    let (_, newer) = two_snapshots(&setup);
    let newest = setup.held()[0].clone();
    let mut bytes = setup.bytes(&newest);
    // The refusals count, the last of the scalars.
    let at = SNAPSHOT_HEADER_LEN + 10;
    let refusals = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    bytes[at..at + 8].copy_from_slice(&(refusals + 3).to_le_bytes());
    reseal(&mut bytes);
    setup.put(&newest, &bytes);
    let (_, checks) = payonce::verify_snapshots(
        Arc::new(setup.log.clone()),
        LogConfig::default(),
        &setup.store(),
    )
    .unwrap();
    assert_eq!(checks.len(), 2);
    match &checks[0].verdict {
        SnapshotVerdict::Differs(difference) => {
            assert_eq!(difference.what, "refusals");
            assert_eq!(difference.left, (refusals + 3).to_string());
            assert_eq!(difference.right, refusals.to_string());
        }
        other => panic!("expected the refusals named, got {other:?}"),
    }
    assert_eq!(checks[0].snapshot.seq, newer);
    assert!(matches!(checks[1].verdict, SnapshotVerdict::Matches));
    // The opening itself accepts it: only the audit can tell.
    let ledger = setup.open().unwrap();
    assert_eq!(
        ledger
            .recovery()
            .snapshot
            .as_ref()
            .map(|snapshot| snapshot.seq),
        Some(newer)
    );
}

#[test]
fn snapshots_are_kept_two_at_a_time_and_taken_at_a_clean_close() {
    // Guards against snapshots piling up, and against a close that leaves the next open a tail to replay.
    let setup = Setup::new();
    let config = Config {
        snapshots: SnapshotPolicy {
            at_close: true,
            ..SnapshotPolicy::never()
        },
        ..setup.config.clone()
    };
    let ledger = Ledger::init_on(Arc::new(setup.log.clone()), config.clone()).unwrap();
    let rail = Rail::default();
    for _ in 0..4 {
        submit(&ledger, 2, &rail);
        ledger.snapshot().unwrap().unwrap();
    }
    assert_eq!(setup.held().len(), 2);
    assert!(
        ledger.snapshot().unwrap().is_none(),
        "nothing new since the last"
    );
    submit(&ledger, 1, &rail);
    let last = ledger.last_seq();
    drop(ledger);
    let newest = setup.store().list().unwrap()[0].seq;
    assert_eq!(newest, last, "the close took one of the last state");
    let ledger = Ledger::open_on(Arc::new(setup.log.clone()), config).unwrap();
    assert_eq!(
        ledger.recovery().replayed,
        0,
        "nothing past the snapshot at close"
    );
}

#[test]
fn snapshots_are_taken_in_the_background_every_so_many_events() {
    // Guards against a policy by count that never fires without a caller asking.
    let setup = Setup::new();
    let config = Config {
        snapshots: SnapshotPolicy {
            events: 10,
            share_max: 100,
            ..SnapshotPolicy::never()
        },
        ..setup.config.clone()
    };
    let ledger = Ledger::init_on(Arc::new(setup.log.clone()), config).unwrap();
    let rail = Rail::default();
    submit(&ledger, 8, &rail);
    // The thread is woken by the event that made the count; it holds the
    // store's newest name once it has written, which the loop waits for
    // by polling the store (no sleep decides the outcome).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while setup.held().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no snapshot was taken in the background"
        );
        std::thread::yield_now();
    }
    drop(ledger);
}

/// A store whose snapshots cannot be read for now: every read fails as a
/// disk's or a database's would; listing and setting aside work.
#[derive(Debug)]
struct Unreadable(DirSnapshots);

impl SnapshotStore for Unreadable {
    fn list(&self) -> Result<Vec<StoredSnapshot>, SnapshotError> {
        self.0.list()
    }

    fn read(&self, snapshot: &StoredSnapshot) -> Result<Vec<u8>, SnapshotError> {
        Err(SnapshotError::Io {
            op: "reading",
            file: snapshot.name.clone(),
            source: std::io::Error::other("the device is gone for now"),
        })
    }

    fn write(&self, seq: u64, bytes: &[u8]) -> Result<StoredSnapshot, SnapshotError> {
        self.0.write(seq, bytes)
    }

    fn set_aside(&self, snapshot: &StoredSnapshot) -> Result<String, SnapshotError> {
        self.0.set_aside(snapshot)
    }

    fn prune(&self, kept: usize) -> Result<Vec<StoredSnapshot>, SnapshotError> {
        self.0.prune(kept)
    }
}

impl RunStore for Unreadable {
    fn create_run(&self) -> Result<Box<dyn RunOut + '_>, SnapshotError> {
        self.0.create_run()
    }

    fn open_run(&self, number: u64) -> Result<Arc<dyn payonce_runs::RunSource>, SnapshotError> {
        self.0.open_run(number)
    }

    fn list_runs(&self) -> Result<Vec<u64>, SnapshotError> {
        self.0.list_runs()
    }

    fn remove_run(&self, number: u64) -> Result<(), SnapshotError> {
        self.0.remove_run(number)
    }
}

#[test]
fn a_snapshot_that_cannot_be_read_for_now_is_left_in_place_and_used_once_it_can() {
    // Guards against a failed read, which says nothing of a snapshot's
    // bytes, setting a good snapshot aside for every later opening.
    let setup = Setup::new();
    let (_, newer) = two_snapshots(&setup);
    let held = setup.held();
    let config = Config {
        snapshot_store: Some(Arc::new(Unreadable(setup.store()))),
        ..setup.config.clone()
    };
    let ledger = Ledger::open_on(Arc::new(setup.log.clone()), config).unwrap();
    let recovery = ledger.recovery().clone();
    assert_eq!(recovery.snapshot.as_ref().map(|s| s.seq), None);
    assert_eq!(recovery.snapshots_set_aside.len(), 2, "{recovery:?}");
    for refused in &recovery.snapshots_set_aside {
        assert!(matches!(*refused.error, SnapshotError::Io { .. }));
        assert_eq!(refused.set_aside_as, None, "{refused:?}");
    }
    assert_eq!(ledger.state().unwrap().difference(&setup.replayed()), None);
    drop(ledger);
    assert_eq!(setup.held(), held, "both left in place");
    let reopened = setup.open().unwrap();
    assert_eq!(
        reopened.recovery().snapshot.as_ref().map(|s| s.seq),
        Some(newer)
    );
}

/// Opens the ledger `open` gives from the newest of two snapshots, takes
/// two more, each after more events, so pruning removes the one it opened
/// from, and checks that its state, archived pairs and all, is still the
/// full replay's (`replayed`), and so is the state of a ledger opened
/// from the newest, whose archive merged the first one's; `held` lists
/// the snapshots' names.
fn reads_its_runs_after_pruning(
    open: impl Fn() -> Ledger,
    held: impl Fn() -> Vec<String>,
    replayed: impl Fn() -> State,
) {
    let ledger = open();
    let opened_from = ledger
        .recovery()
        .snapshot
        .as_ref()
        .map(|snapshot| snapshot.name.clone())
        .expect("opened from a snapshot");
    let rail = Rail::default();
    for _ in 0..2 {
        submit(&ledger, 3, &rail);
        ledger.snapshot().unwrap().unwrap();
    }
    assert!(!held().contains(&opened_from), "pruned: {:?}", held());
    let state = ledger.state().unwrap();
    let newest = held()[0].clone();
    drop(ledger);
    assert_eq!(state.difference(&replayed()), None);
    let reopened = open();
    let loaded = reopened
        .recovery()
        .snapshot
        .as_ref()
        .map(|s| s.name.clone());
    assert!(
        loaded.as_ref().is_some_and(|name| *name >= newest),
        "{loaded:?}"
    );
    let state = reopened.state().unwrap();
    drop(reopened);
    assert_eq!(state.difference(&replayed()), None);
}

/// Panics unless snapshot `bytes` name a run of settled pairs.
fn assert_names_runs(bytes: &[u8]) {
    let at = body_end(bytes);
    let manifest = payonce::snapshots::Manifest::decode(&bytes[at..], at - SNAPSHOT_HEADER_LEN)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !manifest.runs.is_empty(),
        "the snapshot sets settled pairs apart"
    );
}

#[test]
fn a_ledger_in_memory_reads_its_runs_after_newer_snapshots_prune_the_snapshot_it_opened_from() {
    // Guards against an archive read by its snapshot's name: once newer
    // snapshots prune the file a ledger opened from, its settled pairs
    // must still be read from it.
    let setup = Setup::new();
    two_snapshots(&setup);
    assert_names_runs(&setup.bytes(&setup.held()[0]));
    reads_its_runs_after_pruning(
        || setup.open().unwrap(),
        || setup.held(),
        || setup.replayed(),
    );
}

#[test]
fn a_ledger_on_disk_reads_its_runs_after_newer_snapshots_prune_the_snapshot_it_opened_from() {
    // Guards against the same on the file system, where the ledger holds
    // the pruned snapshot's file open.
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        clock: Arc::new(payonce::ManualClock::new(START)),
        snapshots: SnapshotPolicy::never(),
        ..Config::default()
    };
    let ledger = Ledger::init_with(dir.path(), config.clone()).unwrap();
    submit(&ledger, 12, &Rail::default());
    ledger.snapshot().unwrap().unwrap();
    submit(&ledger, 2, &Rail::default());
    drop(ledger);
    let store = DirSnapshots::beside(dir.path());
    assert_names_runs(&store.read(&store.list().unwrap()[0]).unwrap());
    let held = || -> Vec<String> {
        let listed = store.list().unwrap();
        listed.into_iter().map(|snapshot| snapshot.name).collect()
    };
    reads_its_runs_after_pruning(
        || Ledger::open_with(dir.path(), config.clone()).unwrap(),
        held,
        || payonce::verify(dir.path()).unwrap().state,
    );
}
