//! Schema version 2: a database of version 1 refused until `migrate` brings
//! it up, its events indexed and its grants carried over; the snapshots'
//! tables append-only but for the bytes of old snapshots.

use payonce::{LedgerError, SendFailure, StoreError};
use payonce_postgres::Migrated;
use postgres::{Client, NoTls};

use crate::{config, database, new_withdrawal, sent};

fn client(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap()
}

/// What the server said of `error`.
fn said(error: &postgres::Error) -> String {
    error.as_db_error().unwrap().message().to_owned()
}

/// Writes a ledger into `url` through the library: claims, a send that
/// failed and was released, a claim taken again, and refusals that name a
/// holder key.
fn play(url: &str) {
    drop(payonce_postgres::init(url, config()).unwrap());
    let worker = payonce_postgres::open(url, "api-1", config()).unwrap();
    let paid = worker.create(new_withdrawal("10")).unwrap();
    worker.submit("k-1", &paid, |r| Ok(sent(r, "0x1"))).unwrap();
    assert!(worker.submit("k-2", &paid, |r| Ok(sent(r, "0x2"))).is_err());
    let retried = worker.create(new_withdrawal("20")).unwrap();
    let failed = worker.submit("k-3", &retried, |_| Err(SendFailure::failed("timeout")));
    assert!(failed.is_err());
    worker.release("k-3", "nothing on the rail", "ops").unwrap();
    worker
        .submit("k-4", &retried, |r| Ok(sent(r, "0x4")))
        .unwrap();
}

/// The rows of `table`'s `columns`, as text, in order.
fn rows(client: &mut Client, table: &str, columns: &str) -> Vec<Vec<Option<String>>> {
    let count = columns.split(',').count();
    client
        .query(
            &format!("SELECT {columns} FROM payonce.{table} ORDER BY 1, 2"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| {
            (0..count)
                .map(|i| row.get::<_, Option<String>>(i))
                .collect()
        })
        .collect()
}

/// Copies what a build of version 1 wrote (every table of version 1, the
/// columns it knew) from the database at `from` to the one at `to`.
fn copy_version_1(from: &str, to: &str) {
    let (mut from, mut to) = (client(from), client(to));
    for (table, columns) in [
        (
            "batches",
            "first_seq, last_seq, digest, worker, committed_at",
        ),
        ("events", "seq, batch, payload"),
        ("withdrawal_claims", "withdrawal, round, key, seq"),
        ("key_claims", "key, round, withdrawal, seq"),
        ("releases", "seq, key, key_round, withdrawal, round"),
    ] {
        let mut data = Vec::new();
        let mut out = from
            .copy_out(&format!(
                "COPY (SELECT {columns} FROM payonce.{table}) TO STDOUT"
            ))
            .unwrap();
        std::io::Read::read_to_end(&mut out, &mut data).unwrap();
        drop(out);
        let mut sink = to
            .copy_in(&format!("COPY payonce.{table} ({columns}) FROM STDIN"))
            .unwrap();
        std::io::Write::write_all(&mut sink, &data).unwrap();
        sink.finish().unwrap();
    }
}

#[test]
fn a_database_of_version_1_is_refused_until_migrate_indexes_its_events_and_keeps_its_grants() {
    // Guards against history answering from an index that misses the events written before it existed.
    let Some(cluster) = payonce_postgres::cluster::for_tests() else {
        return;
    };
    let current = cluster.database().unwrap();
    payonce_postgres::migrate(&current).unwrap();
    play(&current);
    let old = cluster.database().unwrap();
    payonce_postgres::migrate_to(&old, 1).unwrap();
    copy_version_1(&current, &old);
    let name: String = client(&old)
        .query_one("SELECT current_database()", &[])
        .unwrap()
        .get(0);
    let (worker_role, auditor_role) = (format!("{name}_worker"), format!("{name}_auditor"));
    // docs/postgres.md's grants, given while the database was at version 1.
    client(&old)
        .batch_execute(&format!(
            "CREATE ROLE {worker_role} LOGIN; \
             GRANT USAGE ON SCHEMA payonce TO {worker_role}; \
             GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA payonce TO {worker_role}; \
             CREATE ROLE {auditor_role} LOGIN; \
             GRANT USAGE ON SCHEMA payonce TO {auditor_role}; \
             GRANT SELECT ON ALL TABLES IN SCHEMA payonce TO {auditor_role};"
        ))
        .unwrap();

    // Version 1: every worker and audit refuses it, naming the command.
    let error = payonce_postgres::open(&old, "api-2", config()).unwrap_err();
    assert!(
        matches!(&error, LedgerError::Store(StoreError::Unsafe { detail })
            if detail.contains("version 1") && detail.contains("payonce migrate")),
        "{error}"
    );
    assert!(payonce_postgres::verify(&old).is_err());
    assert!(payonce_postgres::ReadView::open(&old).is_err());

    let events = payonce_postgres::verify(&current).unwrap().0.events;
    assert_eq!(
        payonce_postgres::migrate(&old).unwrap(),
        Migrated::Upgraded { from: 1, events }
    );
    assert_eq!(payonce_postgres::migrate(&old).unwrap(), Migrated::Current);
    // The index the migration wrote is the one the workers wrote.
    let (mut old_client, mut current_client) = (client(&old), client(&current));
    for (table, columns) in [
        ("key_events", "key, seq::text"),
        ("withdrawal_events", "withdrawal, seq::text"),
    ] {
        let written = rows(&mut current_client, table, columns);
        assert!(!written.is_empty());
        assert_eq!(rows(&mut old_client, table, columns), written, "{table}");
    }

    // A worker of a build of version 1 still running is refused its next
    // batch: it does not write the index.
    let error = old_client
        .batch_execute(&format!(
            "INSERT INTO payonce.batches (first_seq, last_seq, digest, worker) \
             VALUES ({0}, {0}, decode(repeat('ab', 32), 'hex'), 'api-9')",
            events + 1
        ))
        .unwrap_err();
    assert!(said(&error).contains("written_under"), "{error:?}");

    // The roles' grants reach the new tables: a worker writes the index,
    // an auditor reads it and the snapshots, and writes nothing.
    let as_role = |role: &str| old.replace("user=postgres", &format!("user={role}"));
    let worker = payonce_postgres::open(&as_role(&worker_role), "api-1", config()).unwrap();
    let w = worker.create(new_withdrawal("30")).unwrap();
    worker.submit("k-5", &w, |r| Ok(sent(r, "0x5"))).unwrap();
    let mut auditor = client(&as_role(&auditor_role));
    let indexed: i64 = auditor
        .query_one(
            "SELECT count(*) FROM payonce.key_events WHERE key = 'k-5'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(indexed, 2, "k-5's claim and outcome");
    for table in [
        "snapshots",
        "snapshot_chunks",
        "withdrawal_events",
        "runs",
        "run_chunks",
    ] {
        auditor
            .query(&format!("SELECT * FROM payonce.{table}"), &[])
            .unwrap();
    }
    let error = auditor
        .batch_execute("INSERT INTO payonce.key_events VALUES ('k-6', 1)")
        .unwrap_err();
    assert!(said(&error).contains("permission denied"), "{error:?}");
    let under: Vec<i32> = old_client
        .query(
            "SELECT DISTINCT written_under FROM payonce.batches ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        under,
        [1, payonce_postgres::SCHEMA_VERSION],
        "the batches before and after the migration"
    );
}

/// Inserts snapshot `seq` with two chunks, the chunks first: the foreign
/// key waits for the commit.
fn snapshot(client: &mut Client, seq: i64) {
    client
        .batch_execute(&format!(
            "BEGIN; \
             INSERT INTO payonce.snapshot_chunks (seq, chunk, bytes) VALUES ({seq}, 0, '\\x01'), ({seq}, 1, '\\x02'); \
             INSERT INTO payonce.snapshots (seq, digest, format_version, len, chunks, written_by) \
             VALUES ({seq}, decode(repeat('cd', 32), 'hex'), 1, 2, 2, 'api-1'); \
             COMMIT"
        ))
        .unwrap();
}

#[test]
fn snapshots_are_append_only_and_only_the_bytes_of_older_than_the_newest_two_can_go() {
    // Guards against a snapshot's record rewritten, or the bytes of a snapshot a worker may open from deleted.
    let url = database!();
    let mut admin = client(&url);
    for seq in [10, 20, 30] {
        snapshot(&mut admin, seq);
    }
    let refused =
        |admin: &mut Client, statement: &str| said(&admin.batch_execute(statement).unwrap_err());
    for statement in [
        "UPDATE payonce.snapshots SET len = 3",
        "DELETE FROM payonce.snapshots WHERE seq = 10",
        "TRUNCATE payonce.snapshots CASCADE",
        "UPDATE payonce.snapshot_chunks SET bytes = '\\x00'",
        "TRUNCATE payonce.snapshot_chunks",
    ] {
        let message = refused(&mut admin, statement);
        assert!(message.contains("append-only"), "{statement}: {message}");
    }
    for seq in [30, 20] {
        let message = refused(
            &mut admin,
            &format!("DELETE FROM payonce.snapshot_chunks WHERE seq = {seq}"),
        );
        assert!(message.contains("newest two"), "{seq}: {message}");
    }
    let deleted = admin
        .execute("DELETE FROM payonce.snapshot_chunks WHERE seq = 10", &[])
        .unwrap();
    assert_eq!(deleted, 2, "the bytes of the oldest go");
    let kept: i64 = admin
        .query_one("SELECT count(*) FROM payonce.snapshots", &[])
        .unwrap()
        .get(0);
    assert_eq!(kept, 3, "its record stays");
    // A newer snapshot makes the one before the newest two prunable.
    snapshot(&mut admin, 40);
    admin
        .execute("DELETE FROM payonce.snapshot_chunks WHERE seq = 20", &[])
        .unwrap();
    let message = refused(
        &mut admin,
        "DELETE FROM payonce.snapshot_chunks WHERE seq = 30",
    );
    assert!(message.contains("newest two"), "{message}");

    // Chunks of no snapshot, and a snapshot's record that breaks a rule,
    // are refused.
    let error = admin
        .batch_execute("INSERT INTO payonce.snapshot_chunks VALUES (50, 0, '\\x01')")
        .unwrap_err();
    assert!(said(&error).contains("foreign key"), "{error:?}");
    for values in [
        "(0, decode(repeat('cd', 32), 'hex'), 1, 2, 2, 'a')",
        "(60, '\\x00', 1, 2, 2, 'a')",
        "(60, decode(repeat('cd', 32), 'hex'), 1, -1, 2, 'a')",
        "(60, decode(repeat('cd', 32), 'hex'), 1, 2, 0, 'a')",
    ] {
        let error = admin
            .batch_execute(&format!(
                "INSERT INTO payonce.snapshots (seq, digest, format_version, len, chunks, written_by) \
                 VALUES {values}"
            ))
            .unwrap_err();
        assert!(
            said(&error).contains("check constraint"),
            "{values}: {error:?}"
        );
    }
}
