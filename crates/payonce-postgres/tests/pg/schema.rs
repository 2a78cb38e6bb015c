//! The schema: applied once, versioned, append-only, and a server that may
//! lose a commit refused.

use std::time::{Duration, Instant};

use payonce::{LedgerError, StoreError};
use payonce_postgres::Migrated;

use crate::{config, database};

fn client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).unwrap()
}

#[test]
fn migrate_creates_the_schema_once_and_leaves_a_current_one_alone() {
    // Guards against a second migrate failing or re-creating tables.
    let url = database!();
    assert_eq!(payonce_postgres::migrate(&url).unwrap(), Migrated::Current);
    let version: i32 = client(&url)
        .query_one("SELECT max(version) FROM payonce.schema_version", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, payonce_postgres::SCHEMA_VERSION);
}

#[test]
fn a_schema_of_another_version_is_refused_by_migrate_and_by_workers() {
    // Guards against a worker writing a schema it does not know.
    let url = database!();
    let mut admin = client(&url);
    admin
        .batch_execute("ALTER TABLE payonce.schema_version DISABLE TRIGGER append_only")
        .unwrap();
    admin
        .batch_execute(&format!(
            "INSERT INTO payonce.schema_version (version) VALUES ({})",
            payonce_postgres::SCHEMA_VERSION + 1
        ))
        .unwrap();
    let error = payonce_postgres::migrate(&url).unwrap_err();
    assert!(
        matches!(&error, StoreError::Unsafe { detail } if detail.contains("newer")),
        "{error}"
    );
    let error = payonce_postgres::init(&url, config()).unwrap_err();
    assert!(
        matches!(&error, LedgerError::Store(StoreError::Unsafe { .. })),
        "{error}"
    );
}

#[test]
fn a_schema_older_than_any_this_build_migrates_from_is_refused_by_migrate_and_by_workers() {
    // Guards against a worker appending to tables whose constraints it does not know.
    let Some(cluster) = payonce_postgres::cluster::for_tests() else {
        return;
    };
    let url = cluster.database().unwrap();
    client(&url)
        .batch_execute(
            "CREATE SCHEMA payonce; \
             CREATE TABLE payonce.schema_version (version integer PRIMARY KEY); \
             INSERT INTO payonce.schema_version VALUES (0)",
        )
        .unwrap();
    let error = payonce_postgres::migrate(&url).unwrap_err();
    assert!(
        matches!(&error, StoreError::Unsafe { detail } if detail.contains("older") && detail.contains("no migration")),
        "{error}"
    );
    for error in [
        payonce_postgres::init(&url, config()).unwrap_err(),
        payonce_postgres::open(&url, "api-1", config()).unwrap_err(),
    ] {
        assert!(
            matches!(&error, LedgerError::Store(StoreError::Unsafe { detail }) if detail.contains("older")),
            "{error}"
        );
    }
    assert!(
        payonce_postgres::verify(&url).is_err(),
        "audits refuse it too"
    );
}

#[test]
fn a_database_without_the_schema_is_refused_with_the_command_that_applies_it() {
    let Some(cluster) = payonce_postgres::cluster::for_tests() else {
        return;
    };
    let url = cluster.database().unwrap();
    let error = payonce_postgres::init(&url, config()).unwrap_err();
    assert!(error.to_string().contains("payonce migrate"), "{error}");
}

#[test]
fn events_and_constraint_rows_refuse_update_delete_and_truncate() {
    // Guards against the ledger's role, or anyone with its rights, rewriting history.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    // A row in every table: a claim, and a release of it.
    let worker = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let w = worker.create(crate::new_withdrawal("10")).unwrap();
    let failed = worker.submit("k-1", &w, |_| Err(payonce::SendFailure::failed("timeout")));
    assert!(failed.is_err());
    worker.release("k-1", "nothing on the rail", "ops").unwrap();
    let mut admin = client(&url);
    for statement in [
        "UPDATE payonce.events SET payload = '\\x00'",
        "DELETE FROM payonce.events",
        "TRUNCATE payonce.events",
        "DELETE FROM payonce.batches",
        "DELETE FROM payonce.withdrawal_claims",
        "TRUNCATE payonce.releases",
        "UPDATE payonce.key_claims SET round = 7",
        "DELETE FROM payonce.releases",
        "DELETE FROM payonce.key_events",
        "UPDATE payonce.withdrawal_events SET seq = 1",
        "TRUNCATE payonce.key_events",
    ] {
        let error = admin.batch_execute(statement).unwrap_err();
        let message = error.as_db_error().unwrap().message().to_owned();
        assert!(message.contains("append-only"), "{statement}: {message}");
    }
    let events: i64 = admin
        .query_one("SELECT count(*) FROM payonce.events", &[])
        .unwrap()
        .get(0);
    assert_eq!(events, 6, "every event is still there");
}

#[test]
fn a_server_that_may_lose_an_acknowledged_commit_is_refused() {
    // Guards against a claim acknowledged by a server that may forget it after its send ran.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let name: String = client(&url)
        .query_one("SELECT current_database()", &[])
        .unwrap()
        .get(0);
    client(&url)
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET synchronous_commit = off"
        ))
        .unwrap();
    let error = payonce_postgres::open(&url, "api-1", config()).unwrap_err();
    assert!(
        matches!(&error, LedgerError::Store(StoreError::Unsafe { detail }) if detail.contains("synchronous_commit")),
        "{error}"
    );
}

#[test]
fn a_server_with_fsync_off_is_refused() {
    // Guards against a claim acknowledged by a server that does not flush its WAL.
    // fsync is the whole server's setting: this test has a cluster of its own.
    let Some(cluster) = payonce_postgres::cluster::own_for_tests() else {
        return;
    };
    let url = cluster.database().unwrap();
    payonce_postgres::migrate(&url).unwrap();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let mut admin = cluster.admin().unwrap();
    admin.batch_execute("ALTER SYSTEM SET fsync = off").unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    // The reload is asynchronous: a new session sees it once the server
    // has read the file, which pg_reload_conf only signals.
    let (mut fsync, deadline) = (String::new(), Instant::now() + Duration::from_secs(30));
    while Instant::now() < deadline {
        fsync = client(&url)
            .query_one("SELECT current_setting('fsync')", &[])
            .unwrap()
            .get(0);
        if fsync == "off" {
            break;
        }
    }
    assert_eq!(fsync, "off", "the server took the setting");
    let error = payonce_postgres::open(&url, "api-1", config()).unwrap_err();
    assert!(
        matches!(&error, LedgerError::Store(StoreError::Unsafe { detail }) if detail.contains("fsync")),
        "{error}"
    );
}

#[test]
fn workers_need_only_insert_and_select_and_auditors_only_select() {
    // Guards against docs/postgres.md's grants being too few for a worker, or an auditor's role able to write.
    let url = database!();
    let name: String = client(&url)
        .query_one("SELECT current_database()", &[])
        .unwrap()
        .get(0);
    let (worker_role, auditor_role) = (format!("{name}_worker"), format!("{name}_auditor"));
    // The grants docs/postgres.md gives.
    client(&url)
        .batch_execute(&format!(
            "CREATE ROLE {worker_role} LOGIN; \
             GRANT USAGE ON SCHEMA payonce TO {worker_role}; \
             GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA payonce TO {worker_role}; \
             CREATE ROLE {auditor_role} LOGIN; \
             GRANT USAGE ON SCHEMA payonce TO {auditor_role}; \
             GRANT SELECT ON ALL TABLES IN SCHEMA payonce TO {auditor_role};"
        ))
        .unwrap();
    let as_role = |role: &str| url.replace("user=postgres", &format!("user={role}"));
    let (worker_url, auditor_url) = (as_role(&worker_role), as_role(&auditor_role));

    drop(payonce_postgres::init(&worker_url, config()).unwrap());
    let worker = payonce_postgres::open(&worker_url, "api-1", config()).unwrap();
    let w = worker.create(crate::new_withdrawal("10")).unwrap();
    let failed = worker.submit("k-1", &w, |_| Err(payonce::SendFailure::failed("timeout")));
    assert!(failed.is_err());
    worker.release("k-1", "nothing on the rail", "ops").unwrap();
    worker
        .submit("k-2", &w, |r| Ok(crate::sent(r, "0x2")))
        .unwrap();

    let (report, head) = payonce_postgres::verify(&auditor_url).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    assert_eq!(head.seq, report.events);
    let error = payonce_postgres::open(&auditor_url, "api-2", config()).unwrap_err();
    assert!(error.to_string().contains("permission denied"), "{error}");
    let error = client(&worker_url)
        .batch_execute("UPDATE payonce.events SET payload = '\\x00'")
        .unwrap_err();
    let message = error.as_db_error().unwrap().message().to_owned();
    assert!(message.contains("permission denied"), "{message}");
}
