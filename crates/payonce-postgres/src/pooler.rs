//! A connection pooler that shares server sessions between clients, found
//! and refused.
//!
//! payonce keeps state in its server session: a worker's advisory lock
//! for as long as it runs, the settings a writer's connection makes
//! (`idle_in_transaction_session_timeout`, keepalives), and the batch's
//! prepared statements. A pooler in transaction or statement pooling mode
//! (PgBouncer's `pool_mode = transaction`) hands each transaction of a
//! client whichever server session is free, so that state would stay on a
//! session another client then uses. Every connection records the backend
//! (`pg_backend_pid()`) its setup ran on; the setup's last statement and
//! the first statement of every batch's transaction check that they run
//! on it, and a backend that already holds a worker's lock when a worker
//! is about to take its own is another client's session. Either is
//! refused before the batch writes anything.

use std::fmt;

use payonce::StoreError;

/// The SQLSTATE a batch's first statement raises when its transaction
/// runs on another backend than its connection's setup.
pub(crate) const MOVED_SQLSTATE: &str = "PO001";

/// What to set, said in every refusal.
const REMEDY: &str = "payonce keeps its worker's lock, its settings and its prepared \
     statements in its server session, so a pooler in front of PostgreSQL must give each client \
     a server session of its own for as long as it is connected: set pool_mode = session for \
     this database in pgbouncer.ini (its [databases] line or [pgbouncer] section), or connect \
     to PostgreSQL directly";

/// A pooler between this process and PostgreSQL shares server sessions
/// between clients (transaction or statement pooling).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolingError {
    /// A statement of the connection ran on another backend than the one
    /// its setup ran on (which holds the worker's lock, if it is a
    /// worker's).
    Moved {
        /// What ran: the setup's check, or a batch.
        step: PoolingStep,
        /// The backend the setup ran on.
        setup_on: i32,
        /// The backend the statement ran on.
        ran_on: i32,
    },
    /// A second connection was handed the server session of this one, idle
    /// after its setup.
    Handed {
        /// The backend both ran on.
        backend: i32,
    },
    /// The backend a worker was about to take its lock on already holds a
    /// worker's lock: its session is another client's too.
    Shared {
        /// The backend.
        backend: i32,
        /// The worker whose lock was to be taken.
        worker: String,
    },
}

/// Where a connection found itself on another backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolingStep {
    /// The last statement of the connection's setup.
    Setup,
    /// The first statement of a batch's transaction.
    Batch,
}

impl fmt::Display for PoolingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolingError::Moved {
                step,
                setup_on,
                ran_on,
            } => {
                let what = match step {
                    PoolingStep::Setup => "the connection's setup ran on",
                    PoolingStep::Batch => "a batch's transaction ran on",
                };
                write!(
                    f,
                    "a connection pooler in transaction pooling mode (PgBouncer's pool_mode = \
                     transaction, or statement) is between this process and PostgreSQL: {what} \
                     server backend {ran_on}, not on backend {setup_on} that its setup ran on; \
                     nothing of the batch was written. {REMEDY}"
                )
            }
            PoolingError::Handed { backend } => write!(
                f,
                "a connection pooler in transaction pooling mode (PgBouncer's pool_mode = \
                 transaction, or statement) is between this process and PostgreSQL: a second \
                 connection was handed server backend {backend}, which this connection had \
                 just been set up on. {REMEDY}"
            ),
            PoolingError::Shared { backend, worker } => write!(
                f,
                "a connection pooler in transaction pooling mode (PgBouncer's pool_mode = \
                 transaction, or statement) is between this process and PostgreSQL: server \
                 backend {backend}, handed to worker {worker} to take its lock on, already \
                 holds another client's worker lock. {REMEDY}"
            ),
        }
    }
}

impl std::error::Error for PoolingError {}

impl From<PoolingError> for StoreError {
    fn from(error: PoolingError) -> StoreError {
        StoreError::Unsafe {
            detail: error.to_string(),
        }
    }
}

/// The first statement of a batch's transaction on a connection set up on
/// backend `setup_on`: it aborts the transaction, with [`MOVED_SQLSTATE`]
/// and the backend it ran on as the error's detail, unless it runs there.
pub(crate) fn same_backend(setup_on: i32) -> String {
    format!(
        "DO $$BEGIN IF pg_backend_pid() <> {setup_on} THEN RAISE EXCEPTION USING \
         ERRCODE = '{MOVED_SQLSTATE}', MESSAGE = 'payonce: a batch on another backend than \
         {setup_on}', DETAIL = pg_backend_pid()::text; END IF; END$$"
    )
}

/// The [`PoolingError`] a batch's first statement raised, if `error` is
/// its refusal.
pub(crate) fn moved(error: &postgres::Error, setup_on: i32) -> Option<PoolingError> {
    let db = error.as_db_error()?;
    if db.code().code() != MOVED_SQLSTATE {
        return None;
    }
    let ran_on = db.detail().and_then(|pid| pid.parse().ok()).unwrap_or(0);
    Some(PoolingError::Moved {
        step: PoolingStep::Batch,
        setup_on,
        ran_on,
    })
}

/// The backend running it, and how many worker locks it holds: what a
/// worker asks before it takes its own.
/// Its parameter is the class of worker locks (`WORKER_LOCK_CLASS`).
pub(crate) const WORKER_LOCKS_HELD: &str = "SELECT pg_backend_pid(), count(*) FROM pg_locks \
     WHERE locktype = 'advisory' AND classid = $1::int::oid AND objsubid = 2 \
     AND pid = pg_backend_pid() AND granted";

/// The backend running it, and when it started: two connections whose
/// answers are equal share one server session.
pub(crate) const BACKEND: &str = "SELECT pg_backend_pid(), (SELECT backend_start::text \
     FROM pg_stat_activity WHERE pid = pg_backend_pid())";

/// Refuses a connection whose idle server session a second connection
/// was handed: `ours` and `other` are their answers to [`BACKEND`].
pub(crate) fn check_unshared(
    ours: &postgres::Row,
    other: &postgres::Row,
) -> Result<(), PoolingError> {
    let backend = |row: &postgres::Row| (row.get::<_, i32>(0), row.get::<_, Option<String>>(1));
    let (ours, other) = (backend(ours), backend(other));
    match ours == other {
        false => Ok(()),
        true => Err(PoolingError::Handed { backend: ours.0 }),
    }
}

/// Checks the connection's setup, whose statements ran on backend
/// `setup_on`, against the backend of its last one, `ran_on`.
pub(crate) fn check_setup(setup_on: i32, ran_on: i32) -> Result<(), PoolingError> {
    match setup_on == ran_on {
        true => Ok(()),
        false => Err(PoolingError::Moved {
            step: PoolingStep::Setup,
            setup_on,
            ran_on,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::{PoolingError, PoolingStep, check_setup, same_backend};

    #[test]
    fn a_refusal_names_the_pooling_mode_and_what_to_set() {
        let error = check_setup(41, 42).unwrap_err();
        assert_eq!(
            error,
            PoolingError::Moved {
                step: PoolingStep::Setup,
                setup_on: 41,
                ran_on: 42
            }
        );
        let said = error.to_string();
        assert!(said.contains("pool_mode = transaction"), "{said}");
        assert!(said.contains("set pool_mode = session"), "{said}");
        assert!(check_setup(7, 7).is_ok());
        assert!(same_backend(7).contains("pg_backend_pid() <> 7"));
    }
}
