//! The schema: applied once, versioned, append-only, and a server that may
//! lose a commit refused.

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
        .batch_execute("INSERT INTO payonce.schema_version (version) VALUES (2)")
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
