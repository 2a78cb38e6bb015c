//! Snapshots of the projections on PostgreSQL: a worker opens from the
//! newest one any worker wrote, a forged or refused one is set aside by a
//! row and the worker falls back, the bytes of all but the newest two are
//! pruned while their rows stay, the auditor's role reads them, and a
//! snapshot that cannot be written never stops a worker from serving.

use payonce::{SnapshotError, SnapshotStore};
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
    assert_eq!(recovery.refused_snapshots.len(), 1, "{recovery:?}");
    assert!(
        matches!(
            &*recovery.refused_snapshots[0].error,
            SnapshotError::Invalid { field: "magic", .. }
        ),
        "{:?}",
        recovery.refused_snapshots[0].error
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
        assert_eq!(recovery.refused_snapshots.len(), 1, "{recovery:?}");
        let refused = &recovery.refused_snapshots[0];
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
    let checked = payonce::snapshots::checked(&bytes, log_id, |seq| {
        payonce_postgres::head_at(&auditor_url, seq)
    })
    .unwrap();
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
/// [`opened_stored`] opens it.
fn opened_as_stored(
    url: &str,
    row: (i64, i32),
    stored: &[(i32, Vec<u8>)],
) -> Result<Vec<u8>, SnapshotError> {
    drop(worked(url));
    stored_chunks(url, row, stored);
    opened_stored(url)
}

/// The snapshot at seq 1,000, opened as an opening opens it and read in
/// pieces of 7 MiB, which straddle its chunks.
fn opened_stored(url: &str) -> Result<Vec<u8>, SnapshotError> {
    let store = PgSnapshots::connect(url, "test").unwrap();
    let snapshot = payonce::StoredSnapshot {
        seq: 1000,
        name: "seq 1000".to_owned(),
    };
    let file = store.open(&snapshot)?.expect("read a chunk at a time");
    let (mut bytes, mut at) = (Vec::new(), 0);
    while at < file.byte_len() {
        file.read_at(at, 7 << 20, &mut bytes)?;
        at += 7 << 20;
    }
    Ok(bytes)
}

#[test]
fn a_snapshot_opened_in_the_database_is_read_across_its_chunks_and_a_missing_or_short_one_is_refused()
 {
    // Guards against pieces that straddle two chunks being joined wrong,
    // and a snapshot short of a chunk, or with a chunk shorter than its
    // place says, being read as whole.
    const CHUNK: usize = payonce_postgres::SNAPSHOT_CHUNK_LEN;
    let len = (CHUNK + 10) as i64;
    let first: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
    let parts = [(0, first.clone()), (1, vec![7u8; 10])];
    let url = database!();
    let whole = [parts[0].1.clone(), parts[1].1.clone()].concat();
    assert!(opened_as_stored(&url, (len, 2), &parts).unwrap() == whole);

    let url = database!();
    let missing = opened_as_stored(&url, (len, 2), &parts[..1]);
    assert!(
        matches!(missing, Err(SnapshotError::Store { ref detail }) if detail.contains("chunk 1 of snapshot 1000 is missing")),
        "{missing:?}"
    );

    let url = database!();
    let short = opened_as_stored(&url, (len, 2), &[(0, first), (1, vec![7u8; 9])]);
    assert!(
        matches!(short, Err(SnapshotError::Length { .. })),
        "{short:?}"
    );

    let url = database!();
    let miscounted = opened_as_stored(&url, (len, 3), &parts);
    assert!(
        matches!(miscounted, Err(SnapshotError::Store { ref detail }) if detail.contains("3 chunks where")),
        "{miscounted:?}"
    );
}

#[test]
fn a_snapshot_in_chunks_of_another_length_is_read_in_chunks_as_long_as_its_first() {
    // Guards against a reading that assumes this build's chunk length:
    // snapshots an earlier build wrote in chunks of 16 MiB, or any other
    // length, would all be refused and set aside by a new worker.
    for chunk_len in [16usize << 20, 5] {
        let whole: Vec<u8> = (0..2 * chunk_len + 3).map(|i| (i % 253) as u8).collect();
        let numbered: Vec<(i32, Vec<u8>)> = (0..)
            .zip(whole.chunks(chunk_len).map(<[u8]>::to_vec))
            .collect();
        let url = database!();
        assert!(
            opened_as_stored(&url, (whole.len() as i64, 3), &numbered).unwrap() == whole,
            "chunks of {chunk_len}"
        );
    }

    // A middle chunk shorter than the first is refused by its place.
    let url = database!();
    let uneven = opened_as_stored(
        &url,
        (13, 3),
        &[(0, vec![1; 5]), (1, vec![2; 4]), (2, vec![3; 4])],
    );
    assert!(
        matches!(uneven, Err(SnapshotError::Length { .. })),
        "{uneven:?}"
    );
}

#[test]
fn a_snapshot_whose_first_chunk_is_empty_too_long_or_missing_is_refused_before_its_bytes_are_read()
{
    // Guards against a chunk length read from the database being believed
    // past its limit, or a length of 0 dividing the snapshot into nothing.
    let url = database!();
    let empty = opened_as_stored(&url, (12, 1), &[(0, Vec::new())]);
    assert!(
        matches!(empty, Err(SnapshotError::Store { ref detail }) if detail.contains("holds 0 bytes")),
        "{empty:?}"
    );

    let max = payonce_postgres::SNAPSHOT_CHUNK_LEN_MAX as usize;
    let url = database!();
    let long = opened_as_stored(&url, ((max + 1) as i64, 1), &[(0, vec![0u8; max + 1])]);
    assert!(
        matches!(long, Err(SnapshotError::Store { ref detail }) if detail.contains("SNAPSHOT_CHUNK_LEN_MAX")),
        "{long:?}"
    );

    let url = database!();
    let headless = opened_as_stored(&url, (12, 2), &[(1, vec![0u8; 6])]);
    assert!(
        matches!(headless, Err(SnapshotError::Store { ref detail }) if detail.contains("chunk 0 of snapshot 1000 is missing")),
        "{headless:?}"
    );
}

/// Ends every other session on the database at `url`: the snapshots'
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
    // A reading whose connection was lost connects again, pins again,
    // and reads on.
    let file = store.open(&taken.stored).unwrap().expect("read in chunks");
    end_other_sessions(&url);
    let mut bytes = Vec::new();
    file.read_at(0, 100, &mut bytes).unwrap();
    assert_eq!(&bytes[..8], b"PAYONSS\0");

    // Failing set nothing aside: the next worker opens from it.
    drop(file);
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

/// How many chunks of the snapshot at `seq` the database holds.
fn chunks_held(url: &str, seq: u64) -> i64 {
    client(url)
        .query_one(
            "SELECT count(*) FROM payonce.snapshot_chunks WHERE seq = $1",
            &[&(seq as i64)],
        )
        .unwrap()
        .get(0)
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
fn a_snapshot_whose_archive_is_being_read_keeps_its_chunks_until_every_one_is_kept() {
    // Guards against a prune deleting the chunks of a snapshot a new
    // worker is still reading its archive from: the worker would fail
    // every name in a block it had not read yet.
    let url = database!();
    let worker = worked(&url);
    let first = worker.snapshot().unwrap().unwrap().stored;
    let store = PgSnapshots::connect(&url, "test").unwrap();
    let file = store.open(&first).unwrap().expect("read in chunks");
    let archive = file.lasting(0).expect("a pinned reading");
    drop(file);

    more_snapshots(&worker, "pinned", 2);
    assert_eq!(chunks_held(&url, first.seq), 1, "pinned: not pruned");

    let mut bytes = Vec::new();
    archive
        .read_at(0, archive.byte_len() as usize, &mut bytes)
        .unwrap();
    pins_go(&url);
    more_snapshots(&worker, "unpinned", 2);
    assert_eq!(
        chunks_held(&url, first.seq),
        0,
        "every chunk kept: unpinned"
    );
    let mut again = Vec::new();
    archive
        .read_at(0, archive.byte_len() as usize, &mut again)
        .unwrap();
    assert!(again == bytes, "read from the chunks kept");
    assert_eq!(&bytes[..8], b"PAYONSS\0");
}

#[test]
fn an_archive_block_found_damaged_after_opening_sets_the_snapshot_aside_and_answers_nothing() {
    // Guards against a worker that opened from a snapshot before reading
    // its archive answering from a damaged block, or leaving every next
    // worker to open from it again.
    let url = database!();
    let taken = snapshotted(&url);
    let mut admin = client(&url);
    let bytes: Vec<u8> = admin
        .query_one(
            "SELECT bytes FROM payonce.snapshot_chunks WHERE seq = $1 AND chunk = 0",
            &[&(taken.stored.seq as i64)],
        )
        .unwrap()
        .get(0);
    let body_len = u64::from_le_bytes(bytes[72..80].try_into().unwrap()) as usize;
    let mut damaged = bytes.clone();
    damaged[96 + body_len + 20] ^= 0x40;
    admin
        .batch_execute("ALTER TABLE payonce.snapshot_chunks DISABLE TRIGGER append_only")
        .unwrap();
    admin
        .execute(
            "UPDATE payonce.snapshot_chunks SET bytes = $2 WHERE seq = $1 AND chunk = 0",
            &[&(taken.stored.seq as i64), &damaged],
        )
        .unwrap();
    admin
        .batch_execute("ALTER TABLE payonce.snapshot_chunks ENABLE TRIGGER append_only")
        .unwrap();

    let worker = payonce_postgres::open(&url, "api-2", config()).unwrap();
    assert_eq!(
        worker.recovery().snapshot.as_ref().map(|s| s.seq),
        Some(taken.stored.seq),
        "believed once its body and fences check"
    );
    let read = worker.outcome("k-0");
    assert!(
        matches!(read, Err(payonce::LedgerError::Archive(_))),
        "{read:?}"
    );
    let refusals: i64 = admin
        .query_one(
            "SELECT count(*) FROM payonce.snapshot_refusals WHERE seq = $1",
            &[&(taken.stored.seq as i64)],
        )
        .unwrap()
        .get(0);
    assert_eq!(refusals, 1, "set aside for the next opening");
    drop(worker);

    let next = payonce_postgres::open(&url, "api-3", config()).unwrap();
    assert_eq!(next.recovery().snapshot, None, "a full replay");
    assert_eq!(
        next.outcome("k-0").unwrap().map(|o| o.state()),
        Some(payonce_model::WithdrawalState::Sent)
    );
}

/// Waits until no session holds a pin: a connection closed by a reading
/// ends its server process a moment later. Fails after 30 s.
fn pins_go(url: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while pins(url) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "a pin outlived its reading"
        );
        std::thread::yield_now();
    }
}

/// How many pins on snapshots the database's sessions hold.
fn pins(url: &str) -> i64 {
    client(url)
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid::int = $1",
            &[&payonce_postgres::PIN_LOCK_CLASS],
        )
        .unwrap()
        .get(0)
}

#[test]
fn an_archive_read_in_pieces_keeps_each_chunk_once_and_lets_its_pin_go_when_all_are_kept() {
    // Guards against a reading that joins kept and fetched chunks in the
    // wrong order, fetches a run of chunks short, or lets the pin go (or
    // keeps it) at the wrong time.
    let whole: Vec<u8> = (0..43u8).collect();
    let numbered: Vec<(i32, Vec<u8>)> = (0..).zip(whole.chunks(5).map(<[u8]>::to_vec)).collect();
    let url = database!();
    drop(worked(&url));
    stored_chunks(&url, (43, 9), &numbered);
    let store = PgSnapshots::connect(&url, "test").unwrap();
    let file = store
        .open(&payonce::StoredSnapshot {
            seq: 1000,
            name: "seq 1000".to_owned(),
        })
        .unwrap()
        .expect("read in chunks");
    let archive = file.lasting(10).expect("a pinned reading");
    drop(file);
    assert_eq!(pins(&url), 1);

    let mut bytes = Vec::new();
    archive.read_at(22, 6, &mut bytes).unwrap();
    assert_eq!(bytes, whole[22..28]);
    bytes.clear();
    archive.read_at(10, 30, &mut bytes).unwrap();
    assert_eq!(bytes, whole[10..40]);
    assert_eq!(pins(&url), 1, "chunk 8 is not kept yet");
    bytes.clear();
    archive.read_at(38, 100, &mut bytes).unwrap();
    assert_eq!(bytes, whole[38..], "cut at the snapshot's end");
    pins_go(&url);
    let mut admin = client(&url);
    admin
        .batch_execute(
            "ALTER TABLE payonce.snapshot_chunks DISABLE TRIGGER keep_newest; \
             DELETE FROM payonce.snapshot_chunks WHERE seq = 1000; \
             ALTER TABLE payonce.snapshot_chunks ENABLE TRIGGER keep_newest",
        )
        .unwrap();
    bytes.clear();
    let before = archive.read_at(0, 43, &mut bytes);
    assert!(
        matches!(before, Err(SnapshotError::Store { ref detail }) if detail.contains("before the archive's")),
        "{before:?}"
    );
    archive.read_at(10, 33, &mut bytes).unwrap();
    assert_eq!(bytes, whole[10..], "read from memory: the chunks are gone");
}
