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
//! - `key_events`, `withdrawal_events` (version 2): which events are about
//!   each request key and each withdrawal, written in each batch's
//!   transaction, so an audit that follows one reads those events alone.
//!   A database migrated from version 1 has them for its older events too:
//!   the migration reads the log and writes them.
//! - `snapshot_refusals` (version 2): a snapshot an opening refused, set
//!   aside by this row rather than deleted.
//! - `snapshots`, `snapshot_chunks` (version 2): snapshots of the
//!   projections, their bytes in chunks.
//! - `runs`, `run_chunks` (version 3): the runs of settled pairs that
//!   snapshots' manifests name, each written once and shared by every
//!   snapshot that names it, its bytes in chunks; `run_refusals`: a run a
//!   worker found damaged after believing it, set aside by this row, so
//!   every snapshot naming it is refused.
//!
//! Every table refuses UPDATE, DELETE and TRUNCATE by trigger: the ledger
//! is append-only at the database too. The exceptions: the chunks of a
//! snapshot older than the newest two, and the chunks of a run no kept
//! snapshot names, may be deleted (their `snapshots` and `runs` rows
//! stay).

use postgres::{Client, Transaction};

use crate::error::{failed, unsafe_store};
use crate::index;
use crate::pipeline::Pipeline;
use crate::reach::Target;
use payonce::StoreError;

/// The version of the schema this build writes and reads.
pub const SCHEMA_VERSION: i32 = 3;

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

/// The advisory lock class of runs' pins: a worker reading a run holds the
/// lock keyed by its number (folded to 32 bits) shared, and a prune
/// deletes a run's chunks only if it takes that lock exclusively. (The
/// class below it, `LOCK_CLASS + 2`, pinned the snapshots of earlier
/// builds.)
pub const RUN_PIN_LOCK_CLASS: i32 = LOCK_CLASS + 3;

/// The advisory lock class under which a new run takes its number: one
/// writer at a time, for the length of its transaction.
pub const RUN_NUMBER_LOCK_CLASS: i32 = LOCK_CLASS + 4;

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

/// The tables of version 1, whose rows are never changed or taken away.
const APPEND_ONLY_1: [&str; 6] = [
    "schema_version",
    "batches",
    "events",
    "withdrawal_claims",
    "key_claims",
    "releases",
];

/// The statements that bring schema version 1 to version 2: the index of
/// the events about each key and each withdrawal, the snapshots' tables,
/// and a column of `batches` that a build of version 1 does not write, so
/// a worker of such a build still running is refused its next batch
/// rather than leaving its events out of the index.
const VERSION_2: &str = r#"
CREATE TABLE payonce.key_events (
    key text NOT NULL,
    seq bigint NOT NULL CHECK (seq >= 1),
    PRIMARY KEY (key, seq)
);
CREATE TABLE payonce.withdrawal_events (
    withdrawal text NOT NULL,
    seq bigint NOT NULL CHECK (seq >= 1),
    PRIMARY KEY (withdrawal, seq)
);
ALTER TABLE payonce.batches ADD COLUMN written_under integer NOT NULL DEFAULT 1;
ALTER TABLE payonce.batches ALTER COLUMN written_under DROP DEFAULT;
CREATE TABLE payonce.snapshots (
    seq bigint PRIMARY KEY CHECK (seq >= 1),
    digest bytea NOT NULL CHECK (length(digest) = 32),
    format_version integer NOT NULL,
    len bigint NOT NULL CHECK (len >= 0),
    chunks integer NOT NULL CHECK (chunks >= 1),
    written_by text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE payonce.snapshot_chunks (
    seq bigint NOT NULL REFERENCES payonce.snapshots (seq) DEFERRABLE INITIALLY DEFERRED,
    chunk integer NOT NULL CHECK (chunk >= 0),
    bytes bytea NOT NULL,
    PRIMARY KEY (seq, chunk)
);
CREATE FUNCTION payonce.keep_newest_snapshots() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.seq IN (SELECT seq FROM payonce.snapshots ORDER BY seq DESC LIMIT 2) THEN
        RAISE EXCEPTION 'payonce: DELETE of chunk % of snapshot % is refused: the newest two snapshots keep their bytes',
            OLD.chunk, OLD.seq;
    END IF;
    RETURN OLD;
END
$$;
CREATE TRIGGER keep_newest BEFORE DELETE ON payonce.snapshot_chunks
    FOR EACH ROW EXECUTE FUNCTION payonce.keep_newest_snapshots();
CREATE TRIGGER append_only BEFORE UPDATE ON payonce.snapshot_chunks
    FOR EACH ROW EXECUTE FUNCTION payonce.refuse_change();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON payonce.snapshot_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION payonce.refuse_change();
CREATE TABLE payonce.snapshot_refusals (
    seq bigint PRIMARY KEY REFERENCES payonce.snapshots (seq),
    refused_by text NOT NULL,
    refused_at timestamptz NOT NULL DEFAULT now()
);
"#;

/// The tables of version 2 that refuse UPDATE, DELETE and TRUNCATE
/// (`snapshot_chunks` has triggers of its own).
const APPEND_ONLY_2: [&str; 4] = [
    "key_events",
    "withdrawal_events",
    "snapshots",
    "snapshot_refusals",
];

/// The tables of version 2, which every role that may read, or append to,
/// the log may read, or append to, too: the grants of `events` are given
/// on them.
const TABLES_2: &str = "payonce.key_events, payonce.withdrawal_events, payonce.snapshots, \
     payonce.snapshot_chunks, payonce.snapshot_refusals";

/// The statements that bring schema version 2 to version 3: the runs of
/// settled pairs that snapshots' manifests name.
const VERSION_3: &str = r#"
CREATE TABLE payonce.runs (
    run bigint PRIMARY KEY CHECK (run >= 1),
    len bigint NOT NULL CHECK (len >= 0),
    chunks integer NOT NULL CHECK (chunks >= 1),
    written_by text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE payonce.run_chunks (
    run bigint NOT NULL REFERENCES payonce.runs (run) DEFERRABLE INITIALLY DEFERRED,
    chunk integer NOT NULL CHECK (chunk >= 0),
    bytes bytea NOT NULL,
    PRIMARY KEY (run, chunk)
);
CREATE TRIGGER append_only BEFORE UPDATE ON payonce.run_chunks
    FOR EACH ROW EXECUTE FUNCTION payonce.refuse_change();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON payonce.run_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION payonce.refuse_change();
CREATE TABLE payonce.run_refusals (
    run bigint PRIMARY KEY REFERENCES payonce.runs (run),
    refused_by text NOT NULL,
    detail text NOT NULL,
    refused_at timestamptz NOT NULL DEFAULT now()
);
"#;

/// The tables of version 3 that refuse UPDATE, DELETE and TRUNCATE
/// (`run_chunks` has triggers of its own: a prune deletes its rows).
const APPEND_ONLY_3: [&str; 2] = ["runs", "run_refusals"];

/// The tables of version 3: the grants of `events` are given on them.
const TABLES_3: &str = "payonce.runs, payonce.run_chunks, payonce.run_refusals";

/// What [`migrate`](crate::migrate) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migrated {
    /// The schema was created at [`SCHEMA_VERSION`].
    Created,
    /// The schema was at [`SCHEMA_VERSION`] already: nothing was changed.
    Current,
    /// The schema was brought from an older version to
    /// [`SCHEMA_VERSION`], the index of its events about each key and
    /// withdrawal written for the events it held.
    Upgraded {
        /// The version it was at.
        from: i32,
        /// The events read to write the index.
        events: u64,
    },
}

/// Brings the database to [`SCHEMA_VERSION`], in one transaction, under
/// the ledger-wide lock (no batch commits meanwhile): creates the schema
/// if there is none, brings an older one up, leaves a current one alone,
/// and refuses a newer one.
pub(crate) fn migrate(client: &mut Client) -> Result<Migrated, StoreError> {
    migrate_to(client, SCHEMA_VERSION)
}

/// [`migrate`] to `target`, a version this build knows how to write.
pub(crate) fn migrate_to(client: &mut Client, target: i32) -> Result<Migrated, StoreError> {
    let mut transaction = client.transaction().map_err(failed)?;
    // One migration at a time, whoever runs it, and no batch meanwhile.
    transaction
        .execute("SELECT pg_advisory_xact_lock($1, 0)", &[&LOCK_CLASS])
        .map_err(failed)?;
    let migrated = match version_in(&mut transaction)? {
        Some(version) if version > SCHEMA_VERSION => {
            check_version(version)?;
            Migrated::Current
        }
        Some(version) if version >= target => Migrated::Current,
        Some(version) if version < 1 => {
            return Err(unsafe_store(format!(
                "the database's payonce schema is version {version}, older than this build's \
                 {SCHEMA_VERSION}, and this build has no migration from it"
            )));
        }
        Some(from) => Migrated::Upgraded {
            from,
            events: upgrade(&mut transaction, from, target)?,
        },
        None => {
            create_version_1(&mut transaction)?;
            upgrade(&mut transaction, 1, target)?;
            Migrated::Created
        }
    };
    transaction.commit().map_err(failed)?;
    Ok(migrated)
}

fn create_version_1(transaction: &mut Transaction<'_>) -> Result<(), StoreError> {
    transaction.batch_execute(VERSION_1).map_err(failed)?;
    refuse_changes(transaction, &APPEND_ONLY_1)?;
    record_version(transaction, 1)
}

/// The append-only triggers on each of `tables`.
fn refuse_changes(transaction: &mut Transaction<'_>, tables: &[&str]) -> Result<(), StoreError> {
    for table in tables {
        transaction
            .batch_execute(&format!(
                "CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON payonce.{table} \
                 FOR EACH ROW EXECUTE FUNCTION payonce.refuse_change();
                 CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON payonce.{table} \
                 FOR EACH STATEMENT EXECUTE FUNCTION payonce.refuse_change();"
            ))
            .map_err(failed)?;
    }
    Ok(())
}

fn record_version(transaction: &mut Transaction<'_>, version: i32) -> Result<(), StoreError> {
    transaction
        .execute(
            "INSERT INTO payonce.schema_version (version) VALUES ($1)",
            &[&version],
        )
        .map_err(failed)?;
    Ok(())
}

/// Brings the schema from version `from` to `target`, one version at a
/// time; returns the events read to index them.
fn upgrade(transaction: &mut Transaction<'_>, from: i32, target: i32) -> Result<u64, StoreError> {
    let mut events = 0;
    for version in from + 1..=target {
        match version {
            2 => {
                transaction.batch_execute(VERSION_2).map_err(failed)?;
                refuse_changes(transaction, &APPEND_ONLY_2)?;
                grant_as_events(transaction, TABLES_2)?;
                events = index::backfill(transaction)?;
            }
            3 => {
                transaction.batch_execute(VERSION_3).map_err(failed)?;
                refuse_changes(transaction, &APPEND_ONLY_3)?;
                grant_as_events(transaction, TABLES_3)?;
            }
            _ => {
                return Err(unsafe_store(format!(
                    "this build has no migration to version {version}"
                )));
            }
        }
        record_version(transaction, version)?;
    }
    Ok(events)
}

/// Gives every role that may read, or insert into, `events` the same on
/// `tables`, a version's new tables: the grants docs/postgres.md gives were
/// given on the tables there were.
fn grant_as_events(transaction: &mut Transaction<'_>, tables: &str) -> Result<(), StoreError> {
    let grants = transaction
        .query(
            "SELECT a.privilege_type, CASE WHEN a.grantee = 0 THEN 'PUBLIC' \
             ELSE a.grantee::regrole::text END \
             FROM pg_class c, aclexplode(c.relacl) a \
             WHERE c.oid = 'payonce.events'::regclass AND a.grantee <> c.relowner \
             AND a.privilege_type IN ('SELECT', 'INSERT')",
            &[],
        )
        .map_err(failed)?;
    for grant in grants {
        let (privilege, grantee): (String, String) = (grant.get(0), grant.get(1));
        transaction
            .batch_execute(&format!("GRANT {privilege} ON {tables} TO {grantee}"))
            .map_err(failed)?;
    }
    Ok(())
}

/// What the checks ask of a connection: the synchronous client, a
/// transaction on it, or a [`PgLog`](crate::PgLog)'s pipelined connection.
/// A pipelined connection to the database at `url`, once the server is found safe to
/// write (`fsync` and `synchronous_commit` on) and its schema this build's.
pub(crate) fn connect(url: &str, target: Target) -> Result<Pipeline, StoreError> {
    let mut conn = Pipeline::connect(url, target)?;
    check_durability(&mut conn)?;
    check(&mut conn)?;
    Ok(conn)
}

impl Queries for Pipeline {
    fn query_one(
        &mut self,
        query: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<postgres::Row, postgres::Error> {
        Pipeline::query_one(self, query, params)
    }
}

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
