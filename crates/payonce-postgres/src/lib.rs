//! payonce on PostgreSQL: many workers on many hosts share one ledger, and
//! each withdrawal has one winner.
//!
//! Every worker decides with payonce's own `decide` over its own replay of
//! the one log (`payonce::Ledger::open_shared`); this crate is the
//! [`payonce::SharedLog`] it appends through ([`PgLog`]), the schema
//! ([`migrate`]), the audit reader ([`ReadView`]) and a throwaway cluster
//! for tests ([`cluster`]).
//!
//! - **One log.** Events are rows of one table, numbered without gaps in
//!   commit order: a ledger-wide advisory lock serialises the batches, and
//!   a worker catches its projection up under it before it decides. The
//!   event bytes are the file log's, chained per batch ([`payonce_log::chain`]).
//! - **One winner, enforced by the database too.** A claim's transaction
//!   also inserts a row keyed by its withdrawal and one keyed by its key,
//!   under primary keys: a worker whose memory is wrong cannot
//!   double-claim.
//! - **The claim is committed before the send runs**; a server with
//!   `fsync` or `synchronous_commit` off is refused; a commit whose answer
//!   was lost is looked up before anything is answered.
//! - **Sessions.** Each worker holds an advisory lock named after it for as
//!   long as it runs: a second process under its name is refused, and an
//!   operator ends a worker's session ([`end_session`]) only once the lock
//!   is free.
//!
//! docs/postgres.md describes deployment, grants, replication and audits.

mod backoff;
pub mod cluster;
mod connect;
mod conninfo;
mod copy;
mod error;
mod follow;
mod index;
mod passfile;
mod pipeline;
mod pooler;
mod reach;
mod read_view;
mod refusal;
mod runs;
mod schema;
mod snapshots;
mod store;
mod tls;
mod tls_identity;

use std::ops::ControlFlow;
use std::sync::Arc;

use payonce::{Config, Ledger, LedgerError, StoreError, Verification};
use payonce_model::WorkerName;

pub use crate::conninfo::{CONNINFO_LEN_MAX, Conninfo, ConninfoError};
pub use crate::passfile::PASSFILE_LEN_MAX;
pub use crate::pooler::{PoolingError, PoolingStep};
pub use crate::reach::{
    CONNECT_TIMEOUT, DEAD_PEER_MAX, Environment, HOSTS_MAX, LOOKUP_PATIENCE, RECONNECT_DELAY_MAX,
    RECONNECT_DELAY_MIN,
};
pub use crate::read_view::{ReadView, WalkError};
pub use crate::refusal::{ConnectError, HostRefusal, Refusal};
pub use crate::runs::RUN_CHUNK_LEN;
pub use crate::schema::{
    LOCK_CLASS, Migrated, RUN_NUMBER_LOCK_CLASS, RUN_PIN_LOCK_CLASS, SCHEMA, SCHEMA_VERSION,
    WORKER_LOCK_CLASS,
};
pub use crate::snapshots::{PgSnapshots, SNAPSHOT_CHUNK_LEN};
pub use crate::store::{PgLog, Role};
pub use crate::tls::SslMode;
/// The chain digest, shared with the file log (docs/log-format.md, "The
/// chain digest").
pub use payonce_log::chain::{Digest, Head};

/// Whether `text` names a PostgreSQL ledger rather than a directory: a
/// `postgres://` or `postgresql://` URL, or libpq's key=value form
/// (`host=db1 dbname=custody sslmode=verify-full`).
pub fn is_url(text: &str) -> bool {
    conninfo::is_conninfo(text)
}

/// `url` without its password, for messages: its options as key=value
/// pairs, the password shown as `***`. A string that does not parse keeps
/// its form, with anything after `password=` and a URL's `user:` masked.
pub fn redacted(url: &str) -> String {
    match Conninfo::parse(url) {
        Ok(conninfo) => conninfo.redacted(),
        Err(_) => error::masked(url),
    }
}

/// Checks `url` as a connection would, short of connecting: the string,
/// libpq's environment, and the files it names (roots, a client
/// certificate and its key's mode). What a command line does before it
/// opens anything, so a mistake is told as bad input.
pub fn check(url: &str) -> Result<(), ConnectError> {
    reach::Reach::new(url, reach::Target::AsGiven).map(drop)
}

/// What a connection to `url` came to, in `environment`: the host and
/// port that accepted it, the user, and whether it runs over TLS (as the
/// server sees it, `pg_stat_ssl`). What an operator checks a deployment's
/// connection string with, before giving it to workers.
pub fn probe(url: &str, environment: &Environment) -> Result<Probe, ConnectError> {
    let reach = reach::Reach::in_environment(url, reach::Target::AsGiven, environment)?;
    let mut client = connect::first_accepted(&reach, |config, tls| {
        postgres::Config::from(config.clone()).connect(tls)
    })?;
    let row = client
        .query_one(
            "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false), \
             current_user::text, coalesce(inet_server_port(), 0)",
            &[],
        )
        .map_err(|error| ConnectError::Refused {
            attempts: vec![HostRefusal {
                host: redacted(url),
                port: 0,
                tls: false,
                refusal: Refusal::Other,
                cause: error::chain(&error),
            }],
        })?;
    Ok(Probe {
        tls: row.get(0),
        user: row.get(1),
        port: u16::try_from(row.get::<_, i32>(2)).unwrap_or(0),
    })
}

/// What [`probe`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Probe {
    /// Whether the connection runs over TLS.
    pub tls: bool,
    /// The user it logged in as.
    pub user: String,
    /// The server's port (0 over a Unix socket).
    pub port: u16,
}

/// A synchronous client of the database at `url`, made as every payonce
/// connection is (libpq's options and environment, TLS as `sslmode`
/// says): for the benchmarks' and tools' own statements.
pub fn client(url: &str) -> Result<postgres::Client, ConnectError> {
    connect::client(url, reach::Target::AsGiven)
}

/// Applies the schema to the database at `url` (`payonce migrate URL`): see
/// [`Migrated`].
pub fn migrate(url: &str) -> Result<Migrated, StoreError> {
    let mut client = connect::client(url, reach::Target::Primary)?;
    schema::migrate(&mut client)
}

/// Brings the database at `url` to schema `version`, one this build can
/// write, and no further: a database as an older build left it, for tests
/// of the migration from it.
#[doc(hidden)]
pub fn migrate_to(url: &str, version: i32) -> Result<Migrated, StoreError> {
    let mut client = connect::client(url, reach::Target::Primary)?;
    schema::migrate_to(&mut client, version)
}

/// Creates the ledger in the database at `url`, whose schema is applied
/// and whose log is empty: its first event records `config`'s policy, which
/// every worker must share. See `payonce::Ledger::init_shared`.
pub fn init(url: &str, config: Config) -> Result<Ledger, LedgerError> {
    let log = PgLog::connect(url, Role::Attached)?;
    Ledger::init_shared(Arc::new(log), config)
}

/// Opens the ledger at `url` as `worker`: a name that stays the same across
/// the worker's restarts (`api-3`), held by one process at a time. See
/// `payonce::Ledger::open_shared`.
pub fn open(url: &str, worker: &str, config: Config) -> Result<Ledger, LedgerError> {
    let worker = WorkerName::new(worker)?;
    let log = PgLog::connect(url, Role::Worker(worker.clone()))?;
    let config = with_snapshots(config, url, worker.as_str())?;
    Ledger::open_shared(Arc::new(log), worker, config)
}

/// `config`, keeping the ledger's snapshots in its database
/// ([`PgSnapshots`], written as `writer`) unless it names a store of its
/// own or takes and loads none.
fn with_snapshots(mut config: Config, url: &str, writer: &str) -> Result<Config, LedgerError> {
    let wanted =
        config.snapshots.load || config.snapshots.is_running() || config.snapshots.at_close;
    if config.snapshot_store.is_none() && wanted {
        config.snapshot_store = Some(Arc::new(PgSnapshots::connect(url, writer)?));
    }
    Ok(config)
}

/// Opens the ledger at `url` for an operator: it resolves, corrects and
/// releases, and claims nothing. See `payonce::Ledger::attach_shared`.
pub fn attach(url: &str, config: Config) -> Result<Ledger, LedgerError> {
    let log = PgLog::connect(url, Role::Attached)?;
    let config = with_snapshots(config, url, "operator")?;
    Ledger::attach_shared(Arc::new(log), config)
}

/// An operator's "this worker is gone": ends `worker`'s session on the
/// ledger at `url`, so its sends no longer count as running. Refused while
/// a process runs as `worker` (it holds the worker's lock), and for a
/// worker without a live session.
pub fn end_session(url: &str, worker: &str, note: &str, by: &str) -> Result<(), LedgerError> {
    let name = WorkerName::new(worker)?;
    let log = PgLog::connect(url, Role::Ending(name))?;
    let ledger = Ledger::attach_shared(Arc::new(log), Config::default())?;
    ledger.end_session(worker, note, by)
}

/// Verifies the ledger at `url` from one read view: every batch's
/// chain digest, and every recorded decision re-derived from the state
/// before it. Divergences are collected; damage stops it with its place.
/// Returns the report and the head of the log read.
pub fn verify(url: &str) -> Result<(Verification, Head), LedgerError> {
    let mut view = ReadView::open(url)?;
    let mut head = Head::default();
    let report = payonce::verify_scan(|visit| {
        head = view.scan(visit)?;
        Ok(())
    })?;
    Ok((report, head))
}

/// The head of the ledger at `url`, and the head of its batch that ends
/// at event `seq` (`None` if none does), from one read view with
/// every batch's chain checked: what `payonce head URL --expect-head`
/// compares a head kept earlier with.
pub fn head_through(url: &str, seq: u64) -> Result<(Head, Option<Head>), StoreError> {
    ReadView::open(url)?.head_through(seq)
}

/// The identity of the ledger at `url`, which its snapshots name (see
/// `PgLog`'s `SharedLog::log_id`); `None` for a database without one.
pub fn log_id(url: &str) -> Result<Option<u64>, StoreError> {
    store::log_id_in(&mut store::connect(url)?)
}

/// The head of the batch of the ledger at `url` that ends at `seq`, as its
/// row in `payonce.batches` says: what an opening checks a snapshot's head
/// against. `None` if no batch ends there.
pub fn head_at(url: &str, seq: u64) -> Result<Option<Head>, StoreError> {
    store::head_at_in(&mut store::connect(url)?, seq)
}

/// The head of the ledger at `url`: the last committed batch's last
/// sequence number and chain digest, after checking the whole chain. What
/// `payonce head URL` prints, to keep outside the database.
pub fn head(url: &str) -> Result<Head, StoreError> {
    let mut view = ReadView::open(url)?;
    view.walk(|_, _| Ok::<_, StoreError>(ControlFlow::Continue(())))
        .map_err(|error| match error {
            WalkError::Store(error) | WalkError::Visit(error) => error,
        })
}
