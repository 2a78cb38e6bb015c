//! The database schema: its tables, their constraints and triggers, and
//! its version. `payonce migrate URL` applies it; a worker refuses a
//! database whose schema is of another version than its own.
//!
//! - `events`: every event's bytes, by sequence number, with the batch
//!   (transaction) that wrote it.
//! - `batches`: each batch's first and last sequence number and chain
//!   digest (`crate::chain`).
//! - `withdrawal_claims`, `key_claims`, `releases`: the constraint rows. A
//!   claim takes the next round of its withdrawal and of its key, which a
//!   primary key makes unique; a release ends the round of both, which
//!   must exist and be its key's. Written in the claim's transaction, they
//!   let the database itself refuse a second winner, whatever a worker's
//!   memory says.
//!
//! Every table refuses UPDATE, DELETE and TRUNCATE by trigger: the ledger
//! is append-only at the database too.

use postgres::Client;

use crate::error::{failed, unsafe_store};
use payonce::StoreError;

/// The version of the schema this build writes and reads.
pub const SCHEMA_VERSION: i32 = 1;

/// The database schema (namespace) the ledger's tables live in.
pub const SCHEMA: &str = "payonce";

/// The advisory lock class of payonce's locks (`ponc`); key 0 is the
/// ledger-wide append lock, taken for one transaction at a time.
pub const LOCK_CLASS: i32 = 0x706f_6e63;

/// The advisory lock class of workers' locks: a worker holds the lock
/// keyed by `hashtext` of its name for as long as it runs, so two
/// processes never run as one worker, and an operator can tell a dead
/// worker from a live one.
pub const WORKER_LOCK_CLASS: i32 = LOCK_CLASS + 1;

/// The statements that create schema version 1.
const VERSION_1: &str = r#"
CREATE SCHEMA payonce;
CREATE TABLE payonce.schema_version (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE payonce.batches (
    first_seq bigint PRIMARY KEY CHECK (first_seq >= 1),
    last_seq bigint NOT NULL UNIQUE CHECK (last_seq >= first_seq),
    digest bytea NOT NULL CHECK (length(digest) = 32),
    worker text,
    committed_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE payonce.events (
    seq bigint PRIMARY KEY CHECK (seq >= 1),
    batch bigint NOT NULL,
    payload bytea NOT NULL
);
CREATE TABLE payonce.withdrawal_claims (
    withdrawal text NOT NULL,
    round bigint NOT NULL,
    key text NOT NULL,
    seq bigint NOT NULL UNIQUE,
    PRIMARY KEY (withdrawal, round),
    UNIQUE (withdrawal, round, key)
);
CREATE TABLE payonce.key_claims (
    key text NOT NULL,
    round bigint NOT NULL,
    withdrawal text NOT NULL,
    seq bigint NOT NULL UNIQUE,
    PRIMARY KEY (key, round),
    UNIQUE (key, round, withdrawal)
);
CREATE TABLE payonce.releases (
    seq bigint PRIMARY KEY,
    key text NOT NULL,
    key_round bigint NOT NULL,
    withdrawal text NOT NULL,
    round bigint NOT NULL,
    UNIQUE (withdrawal, round),
    UNIQUE (key, key_round),
    FOREIGN KEY (withdrawal, round, key)
        REFERENCES payonce.withdrawal_claims (withdrawal, round, key),
    FOREIGN KEY (key, key_round, withdrawal)
        REFERENCES payonce.key_claims (key, round, withdrawal)
);
CREATE FUNCTION payonce.refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'payonce: % on %.% is refused: the ledger is append-only',
        TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME;
END
$$;
"#;

/// The tables whose rows are never changed or taken away.
const APPEND_ONLY: [&str; 6] = [
    "schema_version",
    "batches",
    "events",
    "withdrawal_claims",
    "key_claims",
    "releases",
];

/// What [`migrate`](crate::migrate) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migrated {
    /// The schema was created at [`SCHEMA_VERSION`].
    Created,
    /// The schema was at [`SCHEMA_VERSION`] already: nothing was changed.
    Current,
}

/// Brings the database to [`SCHEMA_VERSION`], in one transaction: creates
/// the schema if there is none, leaves a current one alone, and refuses one
/// of another version.
pub(crate) fn migrate(client: &mut Client) -> Result<Migrated, StoreError> {
    let mut transaction = client.transaction().map_err(failed)?;
    // One migration at a time, whoever runs it.
    transaction
        .execute("SELECT pg_advisory_xact_lock($1, 0)", &[&LOCK_CLASS])
        .map_err(failed)?;
    let migrated = match version_in(&mut transaction)? {
        Some(version) if version < SCHEMA_VERSION => {
            return Err(unsafe_store(format!(
                "the database's payonce schema is version {version}, older than this build's \
                 {SCHEMA_VERSION}, and this build has no migration from it"
            )));
        }
        Some(version) => {
            check_version(version)?;
            Migrated::Current
        }
        None => {
            transaction.batch_execute(VERSION_1).map_err(failed)?;
            for table in APPEND_ONLY {
                transaction
                    .batch_execute(&format!(
                        "CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON payonce.{table} \
                         FOR EACH ROW EXECUTE FUNCTION payonce.refuse_change();
                         CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON payonce.{table} \
                         FOR EACH STATEMENT EXECUTE FUNCTION payonce.refuse_change();"
                    ))
                    .map_err(failed)?;
            }
            transaction
                .execute(
                    "INSERT INTO payonce.schema_version (version) VALUES ($1)",
                    &[&SCHEMA_VERSION],
                )
                .map_err(failed)?;
            Migrated::Created
        }
    };
    transaction.commit().map_err(failed)?;
    Ok(migrated)
}

/// What the checks ask of a connection: the synchronous client, a
/// transaction on it, or a [`PgLog`](crate::PgLog)'s pipelining session.
pub(crate) trait Queries {
    fn query_one(
        &mut self,
        query: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<postgres::Row, postgres::Error>;
}

impl<C: postgres::GenericClient> Queries for C {
    fn query_one(
        &mut self,
        query: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<postgres::Row, postgres::Error> {
        postgres::GenericClient::query_one(self, query, params)
    }
}

/// The schema version the database holds; `None` if it holds no payonce
/// schema.
fn version_in(client: &mut impl Queries) -> Result<Option<i32>, StoreError> {
    let exists = client
        .query_one(
            "SELECT to_regclass('payonce.schema_version') IS NOT NULL",
            &[],
        )
        .map_err(failed)?;
    if !exists.get::<_, bool>(0) {
        return Ok(None);
    }
    let row = client
        .query_one("SELECT max(version) FROM payonce.schema_version", &[])
        .map_err(failed)?;
    Ok(row.get::<_, Option<i32>>(0))
}

fn check_version(version: i32) -> Result<(), StoreError> {
    match version.cmp(&SCHEMA_VERSION) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(unsafe_store(format!(
            "the database's payonce schema is version {version}, newer than this build's \
             {SCHEMA_VERSION}: run a build that knows it"
        ))),
        std::cmp::Ordering::Less => Err(unsafe_store(format!(
            "the database's payonce schema is version {version}, older than this build's \
             {SCHEMA_VERSION}: run `payonce migrate URL` first"
        ))),
    }
}

/// Refuses a database whose payonce schema is missing or of another
/// version than this build's.
pub(crate) fn check(client: &mut impl Queries) -> Result<(), StoreError> {
    match version_in(client)? {
        Some(version) => check_version(version),
        None => Err(unsafe_store(
            "the database holds no payonce schema: run `payonce migrate URL` first".to_owned(),
        )),
    }
}

/// Refuses a server that may lose a commit it acknowledged: `fsync` or
/// `synchronous_commit` off.
pub(crate) fn check_durability(client: &mut impl Queries) -> Result<(), StoreError> {
    for setting in ["fsync", "synchronous_commit"] {
        let row = client
            .query_one("SELECT current_setting($1)", &[&setting])
            .map_err(failed)?;
        let value: String = row.get(0);
        if value == "off" {
            return Err(unsafe_store(format!(
                "the server has {setting} = off, so a commit it acknowledges can be lost and a \
                 claim with it after its send ran; set {setting} = on"
            )));
        }
    }
    Ok(())
}
