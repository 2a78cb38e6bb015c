//! Snapshots of the projections on PostgreSQL: a worker opens from the
//! newest one any worker wrote, a forged or refused one is set aside by a
//! row and the worker falls back, the bytes of all but the newest two are
//! pruned while their rows stay, the auditor's role reads them, and a
//! snapshot that cannot be written never stops a worker from serving.

use payonce::{LedgerError, RunStore, SnapshotError, SnapshotStore};
use payonce_postgres::PgSnapshots;

use crate::{config, database, new_withdrawal, sent};

fn client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).unwrap()
}

/// A ledger at `url` with a few sends, its worker `api-1` still open.
fn worked(url: &str) -> payonce::Ledger {
    drop(payonce_postgres::init(url, config()).unwrap());
    let worker = payonce_postgres::open(url, "api-1", config()).unwrap();
    for n in 0..4 {
        let w = worker.create(new_withdrawal("10")).unwrap();
        worker
            .submit(&format!("k-{n}"), &w, |r| Ok(sent(r, "0x1")))
            .unwrap();
    }
    worker
}

/// The snapshot of a ledger at `url` worked as [`worked`] does, taken by
/// its worker, which is then closed.
fn snapshotted(url: &str) -> payonce::SnapshotTaken {
    let worker = worked(url);
    let taken = worker.snapshot().unwrap().unwrap();
    drop(worker);
    taken
}

#[test]
fn a_worker_opens_from_the_snapshot_another_worker_wrote() {
    // Guards against snapshots a worker writes that the next worker cannot use, or uses to a different state.
    let url = database!();
    let first = worked(&url);
    let taken = first.snapshot().unwrap().unwrap();
    let w = first.create(new_withdrawal("3")).unwrap();
    first.submit("k-after", &w, |r| Ok(sent(r, "0x9"))).unwrap();
    let second = payonce_postgres::open(&url, "api-2", config()).unwrap();
    let recovery = second.recovery().clone();
    assert_eq!(
        recovery.snapshot.as_ref().map(|s| s.seq),
        Some(taken.stored.seq)
    );
    assert!(recovery.replayed > 0, "the events after it are replayed");
    let state = second.state().unwrap();
    let (report, _) = payonce_postgres::verify(&url).unwrap();
    // The full replay also holds api-2's own start.
    assert_eq!(state.difference(&report.state), None);
    assert_eq!(
        second.outcome("k-after").unwrap().map(|o| o.state()),
        Some(payonce_model::WithdrawalState::Sent)
    );
}

/// Inserts a snapshot of one chunk, `bytes`, after the newest, as a
/// writer of `format_version` would: its row and its chunk in one
/// transaction. Returns its seq.
fn insert_snapshot(
    url: &str,
    digest: &[u8],
    format_version: u32,
    bytes: &[u8],
    writer: &str,
) -> i64 {
    let mut admin = client(url);
    let seq: i64 = admin
        .query_one("SELECT max(seq) + 1 FROM payonce.snapshots", &[])
        .unwrap()
        .get(0);
    let mut transaction = admin.transaction().unwrap();
    transaction
        .execute(
            "INSERT INTO payonce.snapshots (seq, digest, format_version, len, chunks, written_by) \
             VALUES ($1, $2, $3, $4, 1, $5)",
            &[
                &seq,
                &digest,
                &(format_version as i32),
                &(bytes.len() as i64),
                &writer,
            ],
        )
        .unwrap();
    transaction
        .execute(
            "INSERT INTO payonce.snapshot_chunks (seq, chunk, bytes) VALUES ($1, 0, $2)",
            &[&seq, &bytes],
        )
        .unwrap();
    transaction.commit().unwrap();
    seq
}

#[test]
fn a_forged_snapshot_is_set_aside_by_a_row_and_the_worker_falls_back() {
    // Guards against a snapshot row that is not a snapshot of this ledger reaching a worker, or being deleted unnoticed.
    let url = database!();
    let good = snapshotted(&url);
    let forged_seq = insert_snapshot(&url, &[7u8; 32], 1, &[0xEEu8; 200], "mallory");
    let reopened = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let recovery = reopened.recovery().clone();
    assert_eq!(recovery.snapshots_set_aside.len(), 1, "{recovery:?}");
    assert!(
        matches!(
            &*recovery.snapshots_set_aside[0].error,
            SnapshotError::Invalid { field: "magic", .. }
        ),
        "{:?}",
        recovery.snapshots_set_aside[0].error
    );
    assert_eq!(recovery.snapshot.map(|s| s.seq), Some(good.stored.seq));
    let refused: i64 = client(&url)
        .query_one(
            "SELECT count(*) FROM payonce.snapshot_refusals WHERE seq = $1",
            &[&forged_seq],
        )
        .unwrap()
        .get(0);
    assert_eq!(refused, 1, "set aside by a row, the forged row itself kept");
}

#[test]
fn a_snapshot_of_a_newer_format_gets_no_refusal_row_and_stays_for_a_newer_worker() {
    // Guards against an old worker, in a rolling deploy, setting aside for
    // every worker a snapshot a new worker wrote: it is refused, and left.
    let url = database!();
    let good = snapshotted(&url);
    let (digest, mut bytes): (Vec<u8>, Vec<u8>) = {
        let row = client(&url)
            .query_one(
                "SELECT s.digest, c.bytes FROM payonce.snapshots s \
                 JOIN payonce.snapshot_chunks c ON c.seq = s.seq AND c.chunk = 0 WHERE s.seq = $1",
                &[&(good.stored.seq as i64)],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let newer = payonce::SNAPSHOT_FORMAT_VERSION + 1;
    bytes[8..12].copy_from_slice(&newer.to_le_bytes());
    let header = crc32fast::hash(&bytes[..92]);
    bytes[92..96].copy_from_slice(&header.to_le_bytes());
    insert_snapshot(&url, &digest, newer, &bytes, "api-new");
    for _ in 0..2 {
        let reopened = payonce_postgres::open(&url, "api-1", config()).unwrap();
        let recovery = reopened.recovery().clone();
        assert_eq!(recovery.snapshots_set_aside.len(), 1, "{recovery:?}");
        let refused = &recovery.snapshots_set_aside[0];
        assert!(
            matches!(&*refused.error, SnapshotError::Version { found, .. } if *found == newer),
            "{:?}",
            refused.error
        );
        assert_eq!(refused.set_aside_as, None);
        assert_eq!(recovery.snapshot.map(|s| s.seq), Some(good.stored.seq));
    }
    let refusals: i64 = client(&url)
        .query_one("SELECT count(*) FROM payonce.snapshot_refusals", &[])
        .unwrap()
        .get(0);
    assert_eq!(refusals, 0, "no row sets the newer snapshot aside");
}

/// `count` more sends on `worker`, keys `k-{round}-0` on, each followed
/// by a snapshot, whose writing prunes all but the newest two.
fn more_snapshots(worker: &payonce::Ledger, round: &str, count: usize) {
    for n in 0..count {
        let w = worker.create(new_withdrawal("1")).unwrap();
        worker
            .submit(&format!("k-{round}-{n}"), &w, |r| Ok(sent(r, "0x2")))
            .unwrap();
        worker.snapshot().unwrap().unwrap();
    }
}

#[test]
fn the_bytes_of_all_but_the_newest_two_are_pruned_and_every_row_stays() {
    // Guards against snapshots' bytes piling up in the database, and against a snapshot's record disappearing.
    let url = database!();
    let worker = worked(&url);
    more_snapshots(&worker, "more", 3);
    let mut admin = client(&url);
    let rows: i64 = admin
        .query_one("SELECT count(*) FROM payonce.snapshots", &[])
        .unwrap()
        .get(0);
    let with_bytes: i64 = admin
        .query_one(
            "SELECT count(DISTINCT seq) FROM payonce.snapshot_chunks",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!((rows, with_bytes), (3, 2));
    let error = admin
        .batch_execute("DELETE FROM payonce.snapshot_chunks")
        .unwrap_err();
    assert!(format!("{error:?}").contains("newest two"), "{error:?}");
}

#[test]
fn the_auditor_role_reads_snapshots_and_cannot_write_them() {
    // Guards against snapshots an auditor cannot check, or can forge.
    let url = database!();
    let worker = worked(&url);
    worker.snapshot().unwrap().unwrap();
    let name: String = client(&url)
        .query_one("SELECT current_database()", &[])
        .unwrap()
        .get(0);
    let auditor = format!("{name}_snap_auditor");
    client(&url)
        .batch_execute(&format!(
            "CREATE ROLE {auditor} LOGIN; GRANT USAGE ON SCHEMA payonce TO {auditor}; \
             GRANT SELECT ON ALL TABLES IN SCHEMA payonce TO {auditor};"
        ))
        .unwrap();
    let auditor_url = url.replace("user=postgres", &format!("user={auditor}"));
    let store = PgSnapshots::connect(&auditor_url, "auditor").unwrap();
    let listed = store.list().unwrap();
    assert_eq!(listed.len(), 1);
    let bytes = store.read(&listed[0]).unwrap();
    let log_id = payonce_postgres::log_id(&auditor_url).unwrap().unwrap();
    let head_at = |seq| payonce_postgres::head_at(&auditor_url, seq);
    let checked = payonce::snapshots::checked(&bytes, log_id, head_at, &store).unwrap();
    assert!(checked.is_ok(), "{checked:?}");
    let written = store.write(listed[0].seq, &bytes);
    assert!(written.is_err(), "an auditor writes nothing");
}

#[test]
fn a_snapshot_that_cannot_be_written_never_stops_a_worker_from_serving() {
    // Guards against a failing snapshot write, or its thread, holding up or failing the worker's submissions.
    let url = database!();
    let worker = worked(&url);
    client(&url)
        .batch_execute(
            "CREATE FUNCTION payonce.refuse_snapshot() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'no room for snapshots'; END $$; \
             CREATE TRIGGER refuse BEFORE INSERT ON payonce.snapshots \
             FOR EACH ROW EXECUTE FUNCTION payonce.refuse_snapshot();",
        )
        .unwrap();
    let error = worker.snapshot().unwrap_err();
    assert!(
        error.to_string().contains("no room for snapshots"),
        "{error}"
    );
    let w = worker.create(new_withdrawal("5")).unwrap();
    let outcome = worker
        .submit("k-still", &w, |r| Ok(sent(r, "0x5")))
        .unwrap();
    assert_eq!(outcome.state(), payonce_model::WithdrawalState::Sent);
    let stats = worker.snapshot_stats().unwrap();
    assert_eq!((stats.taken, stats.failed), (0, 1));
}

#[test]
fn a_worker_takes_no_snapshot_while_another_worker_wrote_a_fresh_one() {
    // Guards against every worker of a shared ledger encoding and writing its own snapshot of the same stretch of the log.
    let url = database!();
    let every = |worker: &str| {
        let config = payonce::Config {
            snapshots: payonce::SnapshotPolicy {
                events: 40,
                ..payonce::SnapshotPolicy::never()
            },
            ..config()
        };
        payonce_postgres::open(&url, worker, config).unwrap()
    };
    let first = worked(&url);
    let second = every("api-2");
    first.snapshot().unwrap().unwrap();
    assert!(
        second.snapshot_if_due().unwrap().is_none(),
        "api-1's is fresh"
    );
    for n in 0..20 {
        let w = second.create(new_withdrawal("1")).unwrap();
        second
            .submit(&format!("due-{n}"), &w, |r| Ok(sent(r, "0x3")))
            .unwrap();
    }
    // 60 events later one is due again: taken by this call, or already by
    // the worker's own snapshot thread, woken by the count.
    second.snapshot_if_due().unwrap();
    let newest = PgSnapshots::connect(&url, "auditor")
        .unwrap()
        .list()
        .unwrap()[0]
        .seq;
    assert!(
        second.last_seq() - newest < 40,
        "{newest} of {}",
        second.last_seq()
    );
    assert!(second.snapshot_stats().unwrap().taken >= 1);
}

/// Writes a snapshot row at seq 1,000 whose row says `chunks` chunks of
/// `len` bytes in all, with `stored` as its chunks, numbered as given.
fn stored_chunks(url: &str, (len, chunks): (i64, i32), stored: &[(i32, Vec<u8>)]) {
    let mut admin = client(url);
    let mut transaction = admin.transaction().unwrap();
    transaction
        .execute(
            "INSERT INTO payonce.snapshots (seq, digest, format_version, len, chunks, written_by) \
             VALUES (1000, $1, 1, $2, $3, 'test')",
            &[&vec![7u8; 32], &len, &chunks],
        )
        .unwrap();
    for (chunk, bytes) in stored {
        transaction
            .execute(
                "INSERT INTO payonce.snapshot_chunks (seq, chunk, bytes) VALUES (1000, $1, $2)",
                &[chunk, bytes],
            )
            .unwrap();
    }
    transaction.commit().unwrap();
}

fn read_stored(url: &str) -> Result<Vec<u8>, SnapshotError> {
    let store = PgSnapshots::connect(url, "test").unwrap();
    store.read(&payonce::StoredSnapshot {
        seq: 1000,
        name: "seq 1000".to_owned(),
    })
}

#[test]
fn a_snapshots_chunks_are_read_in_order_and_a_missing_one_is_refused() {
    // Guards against chunks read row by row being joined out of order, or
    // a snapshot short of a chunk being read as whole.
    let url = database!();
    drop(worked(&url));
    let parts = [vec![1u8; 5], vec![2u8; 3], vec![3u8; 4]];
    let numbered: Vec<(i32, Vec<u8>)> = (0..).zip(parts.iter().cloned()).collect();
    stored_chunks(&url, (12, 3), &numbered);
    assert_eq!(read_stored(&url).unwrap(), parts.concat());

    let url = database!();
    drop(worked(&url));
    stored_chunks(&url, (12, 3), &numbered[..2]);
    assert!(
        matches!(read_stored(&url), Err(SnapshotError::Store { ref detail }) if detail.contains("2 chunks where the row says 3")),
        "{:?}",
        read_stored(&url)
    );

    let url = database!();
    drop(worked(&url));
    stored_chunks(&url, (12, 3), &[numbered[0].clone(), numbered[2].clone()]);
    assert!(
        matches!(read_stored(&url), Err(SnapshotError::Length { .. })),
        "{:?}",
        read_stored(&url)
    );
}

/// A ledger at `url` worked as [`worked`] does, with a snapshot row at
/// seq 1,000 written as [`stored_chunks`] writes it, then opened as
/// connection of a store made there, once no worker is open.
fn end_other_sessions(url: &str) {
    client(url)
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap();
}

#[test]
fn a_snapshot_the_database_fails_to_serve_is_left_for_the_next_opening() {
    // Guards against a dropped connection or a timeout, which say nothing
    // of a snapshot's bytes, being taken for a refusal that sets a good
    // snapshot aside for every worker.
    let url = database!();
    let taken = snapshotted(&url);
    let store = PgSnapshots::connect(&url, "test").unwrap();
    end_other_sessions(&url);
    let failed = store.list().map(|_| ());
    assert!(
        matches!(failed, Err(SnapshotError::Io { .. })),
        "{failed:?}"
    );
    // A run's reading whose connection was lost connects again, pins
    // again, and reads on.
    let run = store.open_run(1).unwrap();
    end_other_sessions(&url);
    let mut bytes = Vec::new();
    run.read_at(0, 100, &mut bytes).unwrap();
    assert_eq!(bytes.len(), 100);

    // Failing set nothing aside: the next worker opens from it.
    drop(run);
    drop(store);
    let reopened = payonce_postgres::open(&url, "api-1", config()).unwrap();
    assert_eq!(
        reopened.recovery().snapshot.as_ref().map(|s| s.seq),
        Some(taken.stored.seq)
    );
    let refusals: i64 = client(&url)
        .query_one("SELECT count(*) FROM payonce.snapshot_refusals", &[])
        .unwrap()
        .get(0);
    assert_eq!(refusals, 0);
}

/// The numbers of the runs whose chunks the database holds.
fn runs_held(url: &str) -> Vec<i64> {
    client(url)
        .query(
            "SELECT DISTINCT run FROM payonce.run_chunks ORDER BY run",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[test]
fn a_snapshot_writes_only_the_pairs_settled_since_the_last_one_as_a_new_run() {
    // Guards against a snapshot that rewrites every settled pair, and
    // against a worker that reads a run from the database other than
    // through the cache: the second snapshot's run holds the new sends
    // alone, and a worker opened from it finds the first ones too.
    let url = database!();
    let worker = worked(&url);
    worker.snapshot().unwrap().unwrap();
    let first = worker.memory().unwrap();
    for n in 0..3 {
        let w = worker.create(new_withdrawal("2")).unwrap();
        worker
            .submit(&format!("k-more-{n}"), &w, |r| Ok(sent(r, "0x3")))
            .unwrap();
    }
    worker.snapshot().unwrap().unwrap();
    drop(worker);
    assert_eq!(first.runs, 1);
    assert_eq!(runs_held(&url), [1, 2]);
    let records: Vec<i64> = client(&url)
        .query("SELECT len FROM payonce.runs ORDER BY run", &[])
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(records.len(), 2);
    let reopened = payonce_postgres::open(&url, "api-2", config()).unwrap();
    assert_eq!(reopened.memory().unwrap().runs, 2);
    for key in ["k-0", "k-3", "k-more-2"] {
        assert!(
            matches!(reopened.outcome(key), Ok(Some(_))),
            "{key}: {:?}",
            reopened.outcome(key)
        );
    }
}

#[test]
fn a_run_found_damaged_after_opening_answers_nothing_for_its_pairs() {
    // Guards against a worker judging from a run block that fails its
    // checks: a PostgreSQL worker believes a run once its trailer, fences
    // and filters check, and every block is checked as it is read.
    let url = database!();
    let taken = snapshotted(&url);
    assert!(taken.len > 0);
    // The first chunk holds the first record blocks: a byte flipped there
    // fails their checksum, not the trailer's.
    let mut admin = client(&url);
    let mut bytes: Vec<u8> = admin
        .query_one(
            "SELECT bytes FROM payonce.run_chunks WHERE run = 1 AND chunk = 0",
            &[],
        )
        .unwrap()
        .get(0);
    bytes[20] ^= 0xff;
    admin
        .batch_execute("ALTER TABLE payonce.run_chunks DISABLE TRIGGER append_only")
        .unwrap();
    admin
        .execute(
            "UPDATE payonce.run_chunks SET bytes = $1 WHERE run = 1 AND chunk = 0",
            &[&bytes],
        )
        .unwrap();
    admin
        .batch_execute("ALTER TABLE payonce.run_chunks ENABLE TRIGGER append_only")
        .unwrap();
    let worker = payonce_postgres::open(&url, "api-2", config()).unwrap();
    let answered: Vec<_> = (0..4).map(|n| worker.outcome(&format!("k-{n}"))).collect();
    assert!(
        answered
            .iter()
            .any(|answer| matches!(answer, Err(LedgerError::Archive(_)))),
        "{answered:?}"
    );
    for answer in &answered {
        assert!(
            matches!(answer, Err(LedgerError::Archive(_))),
            "a key answered from a damaged run: {answer:?}"
        );
    }
    assert!(
        matches!(worker.runs_checked(), None | Some(Err(_))),
        "the check pass does not pass a damaged run"
    );
    // Set aside, its place named: the next opening refuses every snapshot
    // naming it and replays, answering every key.
    let detail: String = admin
        .query_one("SELECT detail FROM payonce.run_refusals WHERE run = 1", &[])
        .unwrap()
        .get(0);
    assert!(
        detail.contains("run 1") && detail.contains("at byte"),
        "{detail}"
    );
    drop(worker);
    let reopened = payonce_postgres::open(&url, "api-2", config()).unwrap();
    let recovery = reopened.recovery();
    assert!(recovery.snapshot.is_none(), "{recovery:?}");
    assert!(!recovery.snapshots_set_aside.is_empty(), "{recovery:?}");
    for n in 0..4 {
        let key = format!("k-{n}");
        assert!(matches!(reopened.outcome(&key), Ok(Some(_))), "{key}");
    }
}

#[test]
fn a_run_just_written_is_pinned_before_it_commits_so_no_prune_takes_it_before_it_is_read() {
    // Guards against a prune by another worker, between a run's commit and
    // its writer's first read, deleting the chunks of a run no snapshot
    // names yet but the writer's state is about to hold.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let writer = PgSnapshots::connect(&url, "api-1").unwrap();
    let pruner = PgSnapshots::connect(&url, "api-2").unwrap();
    let mut out = writer.create_run().unwrap();
    out.append(&[7u8; 100]).unwrap();
    let number = out.finish().unwrap();
    pruner.remove_run(number).unwrap();
    assert_eq!(pruner.list_runs().unwrap(), vec![number], "the chunks stay");
    let source = writer.open_run(number).unwrap();
    let mut read = Vec::new();
    source.read_at(0, 100, &mut read).unwrap();
    assert_eq!(read, vec![7u8; 100]);
    // Once its reader lets go, a prune removes it. The pin goes with the
    // reader's connection, once the server has seen it close: a prune
    // racing that sees it still held and leaves the run to a later one.
    drop(source);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        pruner.remove_run(number).unwrap();
        let left = pruner.list_runs().unwrap();
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still pinned 10 s after its reader closed: {left:?}"
        );
        std::thread::yield_now();
    }
}
