//! The shared log on PostgreSQL: [`PgLog`], what a worker appends through.
//!
//! A batch is one transaction: `BEGIN`, generic plans without JIT, the
//! ledger-wide advisory lock (`pg_advisory_xact_lock`, released by the
//! commit), the events after the last this process knows (with the batch
//! this process read last, to find a log rewritten under it), then the
//! batch's events, its chain digest and its constraint rows in one
//! statement, and `COMMIT`. The statements are prepared once per
//! connection and pipelined over tokio-postgres (the `pipeline` module):
//! `BEGIN`, the plan settings, the lock and the catch-up are sent
//! together, and so are the inserts and `COMMIT`, so a batch costs two
//! round trips. Sequence order is commit order is visibility order, so
//! every read view is a gapless prefix of the log.
//!
//! An insert the server refuses aborts the transaction, and the `COMMIT`
//! sent after it then answers with a rollback, not an error: the batch is
//! committed only if every insert and the `COMMIT` succeeded. A connection
//! lost before every answer came, or a failed `COMMIT`, leaves the outcome
//! unknown. Before it answers, [`PgLog`] takes the lock on a new
//! connection to whichever host accepts writes (after a failover, the
//! promoted standby), which waits for the old transaction to end, and
//! looks for the batch's last event: the answer is what it finds, once the
//! lookup's own commit, after it, is acknowledged.
//!
//! A lost connection is made again on the next use, to whichever of the
//! URL's hosts accepts writes, with bounded backoff (the `reach` module);
//! meanwhile every batch fails at once. A log that no longer holds what
//! this process read (an asynchronous standby promoted without the last
//! commits) is refused, saying how far it was rewound.

use std::fmt;
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Instant;

use payonce::{Appended, ClaimChange, SharedLog, SharedRecord, StoreError, Visit};
use payonce_model::WorkerName;
use postgres::types::ToSql;
use postgres::{Client, Statement};
use tracing::{info, warn};

use crate::backoff::Backoff;
use crate::error::{damaged, describe, failed, unsafe_store};
use crate::follow::{Follower, Row, rewound, scan, signed, unsigned};
use crate::index;
use crate::pipeline::{Pipeline, Pipelined, Request};
use crate::pooler::{self, PoolingError};
use crate::reach::{LOOKUP_PATIENCE, Target};
use crate::schema::{self, LOCK_CLASS, SCHEMA_VERSION, WORKER_LOCK_CLASS};
use payonce_log::chain::{Head, batch_digest};

/// How long a worker waits at its start for its lock, which the process
/// it replaces may hold until the server notices that process is gone.
const LOCK_TIMEOUT: &str = "2s";

/// How long a worker that lost its connection waits to take its own lock
/// again, which its old connection may hold until the server notices it
/// is gone (at most `reach::DEAD_PEER_MAX` on TCP); if it cannot, the
/// attempt fails and the next is made after the backoff.
const RELOCK_TIMEOUT: &str = "1s";

/// How a refusal of the worker's lock, held by another connection,
/// begins.
const ANOTHER_PROCESS: &str = "another process runs as worker";

/// Who writes through a [`PgLog`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// A worker: holds its worker lock while it runs.
    Worker(WorkerName),
    /// An operator's tool or the ledger's creator: writes as no worker and
    /// holds no worker's lock.
    Attached,
    /// An operator ending `worker`'s session: holds that worker's lock,
    /// which is free only if no process runs as it.
    Ending(WorkerName),
}

impl Role {
    /// The worker whose lock this role holds.
    fn locked(&self) -> Option<&WorkerName> {
        match self {
            Role::Worker(worker) | Role::Ending(worker) => Some(worker),
            Role::Attached => None,
        }
    }
}

/// The shared log of a ledger in a PostgreSQL database.
pub struct PgLog {
    url: String,
    role: Role,
    connection: Mutex<Connection>,
}

struct Connection {
    /// `None` after the connection was lost: made again on the next use.
    client: Option<Pipeline>,
    /// The statements a batch runs, prepared on `client` when it was made:
    /// a batch then sends no statement's text, and the server plans each
    /// once.
    statements: Option<Statements>,
    follower: Follower,
    /// Whether a batch's transaction is open.
    in_batch: bool,
    /// When to try connecting again, after a connection was lost.
    backoff: Backoff,
}

/// The statements of a batch, prepared on one connection.
struct Statements {
    /// The batch this process read last, and the events after it.
    catch_up: Statement,
    insert_batch: Statement,
    insert_release: Statement,
}

impl Statements {
    fn prepare(client: &mut Pipeline) -> Result<Statements, StoreError> {
        Ok(Statements {
            catch_up: client.prepare(CATCH_UP).map_err(failed)?,
            insert_batch: client.prepare(INSERT_BATCH).map_err(failed)?,
            insert_release: client.prepare(INSERT_RELEASE).map_err(failed)?,
        })
    }
}

impl fmt::Debug for PgLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PostgreSQL ledger {}", crate::redacted(&self.url))
    }
}

/// Connects to `url`'s host that accepts writes and checks the server is
/// safe to write: `fsync` and `synchronous_commit` on, the schema of this
/// build's version.
pub(crate) fn connect(url: &str) -> Result<Client, StoreError> {
    let mut client = crate::connect::client(url, Target::Primary)?;
    schema::check_durability(&mut client)?;
    schema::check(&mut client)?;
    Ok(client)
}

/// Takes `worker`'s lock on `client`, waiting at most `wait` (a
/// PostgreSQL interval) for a connection that holds it to go: the server
/// lets the lock of a killed process go once it notices, a moment later.
/// Refuses a backend that holds a worker's lock already (another client's
/// session, handed out by a pooler), and one other than the connection's
/// setup ran on.
fn lock_worker(client: &mut Pipeline, worker: &WorkerName, wait: &str) -> Result<(), StoreError> {
    let held = client
        .query_one(pooler::WORKER_LOCKS_HELD, &[&WORKER_LOCK_CLASS])
        .map_err(failed)?;
    let (backend, locks): (i32, i64) = (held.get(0), held.get(1));
    if locks > 0 {
        return Err(PoolingError::Shared {
            backend,
            worker: worker.to_string(),
        }
        .into());
    }
    pooler::check_setup(client.backend(), backend)?;
    client
        .batch_execute(&format!("SET lock_timeout = '{wait}'"))
        .map_err(failed)?;
    let locked = client.query_one(
        "SELECT pg_backend_pid() FROM pg_advisory_lock($1, hashtext($2))",
        &[&WORKER_LOCK_CLASS, &worker.as_str()],
    );
    client.batch_execute("RESET lock_timeout").map_err(failed)?;
    match locked {
        Ok(row) => Ok(pooler::check_setup(client.backend(), row.get(0))?),
        Err(error) if error.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
            Err(unsafe_store(format!(
                "{ANOTHER_PROCESS} {worker} (it holds the worker's lock): give each process its \
                 own worker name, or stop the other one first"
            )))
        }
        Err(error) => Err(failed(error)),
    }
}

/// A connection to `url`'s host that accepts writes, set up for `role`:
/// the worker's lock taken (waiting at most `wait` for it) and the batch's
/// statements prepared, every statement of the setup checked to have run
/// on the backend the session's settings were made on.
fn set_up(url: &str, role: &Role, wait: &str) -> Result<(Pipeline, Statements), StoreError> {
    let mut client = schema::connect(url, Target::Primary)?;
    if let Some(worker) = role.locked() {
        lock_worker(&mut client, worker, wait)?;
    }
    let set_up = Statements::prepare(&mut client).and_then(|statements| {
        check_unshared(url, &mut client)?;
        Ok(statements)
    });
    match (set_up, role.locked()) {
        (Ok(statements), _) => Ok((client, statements)),
        (Err(error), Some(worker)) => {
            // Behind a pooler the lock may sit on a server session that
            // outlives this connection: let it go, wherever it is.
            let unlock = "SELECT pg_advisory_unlock($1, hashtext($2))";
            let _ = client.execute(unlock, &[&WORKER_LOCK_CLASS, &worker.as_str()]);
            Err(error)
        }
        (Err(error), None) => Err(error),
    }
}

/// Checks that the setup of `client` ran on one backend, which a second
/// connection to `url` is not handed: while `client` is idle, a pooler
/// that shares server sessions hands its backend to the next client.
fn check_unshared(url: &str, client: &mut Pipeline) -> Result<(), StoreError> {
    let ours = client.query_one(pooler::BACKEND, &[]).map_err(failed)?;
    pooler::check_setup(client.backend(), ours.get(0))?;
    let mut other = Pipeline::connect(url, Target::Primary)?;
    let theirs = other.query_one(pooler::BACKEND, &[]).map_err(failed)?;
    Ok(pooler::check_unshared(&ours, &theirs)?)
}

impl PgLog {
    /// Connects to the ledger at `url` as `role`, refusing a server that
    /// may lose an acknowledged commit, a schema of another version, and a
    /// worker some other process runs as.
    pub fn connect(url: &str, role: Role) -> Result<PgLog, StoreError> {
        let (client, statements) = set_up(url, &role, LOCK_TIMEOUT)?;
        Ok(PgLog {
            url: url.to_owned(),
            role,
            connection: Mutex::new(Connection {
                client: Some(client),
                statements: Some(statements),
                follower: Follower::default(),
                in_batch: false,
                backoff: Backoff::default(),
            }),
        })
    }

    /// The worker this log writes as, if it is a worker's.
    pub fn worker(&self) -> Option<&WorkerName> {
        match &self.role {
            Role::Worker(worker) => Some(worker),
            _ => None,
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, Connection>, StoreError> {
        self.connection.lock().map_err(|_| poisoned())
    }

    /// The connection, made again (and the worker's lock taken again) if
    /// it was lost: at once, then with bounded backoff while attempts
    /// fail, before which this fails at once with the last attempt's
    /// error.
    fn client<'a>(&self, connection: &'a mut Connection) -> Result<&'a mut Pipeline, StoreError> {
        if connection.client.as_ref().is_none_or(Pipeline::is_closed) {
            connection.client = None;
            connection.backoff.due()?;
            match self.reconnect() {
                Ok((client, statements)) => {
                    info!(log = ?self, "connected again");
                    connection.backoff.connected();
                    connection.statements = Some(statements);
                    connection.client = Some(client);
                }
                Err(error) => {
                    warn!(log = ?self, %error, "could not connect again");
                    connection.backoff.failed(&error);
                    return Err(error);
                }
            }
        }
        connection
            .client
            .as_mut()
            .ok_or_else(|| StoreError::Failed {
                detail: "no connection".to_owned(),
            })
    }

    /// A new connection to the host that accepts writes, with the worker's
    /// lock and the batch's statements.
    fn reconnect(&self) -> Result<(Pipeline, Statements), StoreError> {
        set_up(&self.url, &self.role, RELOCK_TIMEOUT).map_err(|error| match error {
            // Its own lost connection may hold it a little longer.
            StoreError::Unsafe { detail } if detail.starts_with(ANOTHER_PROCESS) => {
                StoreError::Failed {
                    detail: format!(
                        "the worker's lock is held, by this worker's lost connection until the \
                         server sees it gone, or by another process: {detail}"
                    ),
                }
            }
            error => error,
        })
    }

    /// [`SharedLog::reachable`]: its connection answers as a primary, or
    /// one can be made (with the backoff of a lost one). While a batch
    /// holds the connection, `Ok`: the batch's own answer tells.
    fn probe(&self) -> Result<(), StoreError> {
        let mut connection = match self.connection.try_lock() {
            Ok(connection) => connection,
            Err(TryLockError::WouldBlock) => return Ok(()),
            Err(TryLockError::Poisoned(_)) => return Err(poisoned()),
        };
        if connection.in_batch {
            return Ok(());
        }
        let in_recovery = self
            .client(&mut connection)?
            .query_one("SELECT pg_is_in_recovery()", &[])
            .map_err(failed);
        match in_recovery {
            Ok(row) if !row.get::<_, bool>(0) => Ok(()),
            Ok(_) => {
                connection.client = None;
                Err(StoreError::Failed {
                    detail: "the server is a standby now; the next batch connects again".to_owned(),
                })
            }
            Err(error) => {
                connection.client = None;
                Err(error)
            }
        }
    }

    /// Ends the open transaction without writing, after a failure; drops a
    /// connection that cannot.
    fn abandon(connection: &mut Connection) {
        connection.in_batch = false;
        if let Some(client) = connection.client.as_mut()
            && client.batch_execute("ROLLBACK").is_err()
        {
            connection.client = None;
        }
    }

    fn begin_locked(
        &self,
        connection: &mut Connection,
        after: u64,
    ) -> Result<Vec<SharedRecord>, StoreError> {
        if after != connection.follower.position() {
            return Err(StoreError::Failed {
                detail: format!(
                    "a batch begun after event {after}, where this process has read to {}",
                    connection.follower.position()
                ),
            });
        }
        let head_seq = signed(connection.follower.head.seq);
        self.client(connection)?;
        connection.in_batch = true;
        let (client, statements) = live(connection)?;
        // One round trip: the catch-up runs once the lock is taken.
        let backend = client.backend();
        let rows = client
            .then_query(&begin_batch(backend), &statements.catch_up, &[&head_seq])
            .map_err(|error| match pooler::moved(&error, backend) {
                Some(moved) => moved.into(),
                None => failed(error),
            })?;
        // Every row carries the head's batch; one row without an event
        // says there is none after it.
        let head = rows.first().and_then(|row| {
            let last_seq = row.get::<_, Option<i64>>(5)?;
            Some((unsigned(last_seq), row.get::<_, Option<Vec<u8>>>(6)?))
        });
        if let Err(error) = connection.follower.check_head(head) {
            let end = live(connection)
                .ok()
                .and_then(|(client, _)| log_end(client));
            return Err(match end {
                Some(end) => rewound(connection.follower.reached(), end),
                None => error,
            });
        }
        let records = follow_all(&mut connection.follower, &rows)?;
        connection.follower.check_whole()?;
        // Read under the lock to the log's end.
        connection.follower.check_reached()?;
        Ok(records)
    }

    /// The follower of a scan after event `after`: this process's own if
    /// it has read to there, a new one from the first event, or one from
    /// the batch of the log that ends at `after`.
    fn follower_at(&self, connection: &mut Connection, after: u64) -> Result<(), StoreError> {
        if after == connection.follower.position() {
            return Ok(());
        }
        if after == 0 {
            connection.follower.restart(Head::default());
            return Ok(());
        }
        let row = self
            .client(connection)?
            .query(
                "SELECT digest FROM payonce.batches WHERE last_seq = $1",
                &[&signed(after)],
            )
            .map_err(failed)?;
        let digest = row
            .first()
            .and_then(|row| <[u8; 32]>::try_from(row.get::<_, &[u8]>(0)).ok())
            .ok_or_else(|| {
                damaged(
                    after,
                    format!("no batch of the log ends at event {after}, where a read was to begin"),
                )
            })?;
        connection.follower.restart(Head {
            seq: after,
            digest: payonce_log::chain::Digest(digest),
        });
        Ok(())
    }

    fn commit_locked(
        &self,
        connection: &mut Connection,
        batch: &[Appended],
    ) -> Result<(), StoreError> {
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            connection.in_batch = false;
            return live(connection)?.0.batch_execute("COMMIT").map_err(failed);
        };
        let head = connection.follower.head;
        assert_eq!(first.seq, head.seq + 1, "a batch follows the head it read");
        let digest = batch_digest(
            &head.digest,
            first.seq,
            batch.iter().map(|event| event.payload.as_slice()),
        );
        let worker = self.worker().map(WorkerName::as_str);
        let (conn, statements) = live(connection)?;
        let conn: &Pipeline = conn;
        // One round trip: the inserts and the COMMIT are sent together.
        let mut requests = vec![insert_batch(conn, statements, batch, &digest.0, worker)];
        requests.extend(insert_releases(conn, statements, batch));
        let pipelined = conn.commit_after(requests);
        if let Pipelined::Unsent(error) = pipelined {
            // The COMMIT was not sent (statements before the one that could
            // not be may have been): the transaction is open, and
            // abandoned, which rolls it back.
            return Err(failed(error));
        }
        connection.in_batch = false;
        let committed = match pipelined {
            Pipelined::Committed => Ok(()),
            // The COMMIT after it rolled the transaction back.
            Pipelined::Refused(error) | Pipelined::Unsent(error) => Err(failed(error)),
            Pipelined::Unknown(error) => {
                connection.client = None;
                self.landed(last, &describe(&error))
            }
        };
        if committed.is_ok() {
            connection.follower.committed(Head {
                seq: last.seq,
                digest,
            });
        }
        committed
    }

    /// Whether the batch ending with `last`, whose `COMMIT` failed with
    /// `error`, was committed all the same: asked on a new connection to
    /// whichever host accepts writes, under the lock, so the old
    /// transaction has ended either way. The host may be a standby being
    /// promoted: asked again with backoff for up to [`LOOKUP_PATIENCE`].
    fn landed(&self, last: &Appended, error: &str) -> Result<(), StoreError> {
        let started = Instant::now();
        let mut backoff = Backoff::default();
        let found = loop {
            match self.look_up(last.seq) {
                Ok(found) => break found,
                Err(why) if started.elapsed() < LOOKUP_PATIENCE => {
                    warn!(seq = last.seq, %why, "could not ask whether a batch landed; asking again");
                    backoff.failed(&why);
                    std::thread::sleep(backoff.wait());
                }
                Err(why) => {
                    return Err(StoreError::Unknown {
                        detail: format!(
                            "the commit failed ({error}), and asking whether it landed failed \
                             for {} ms: {why}",
                            started.elapsed().as_millis()
                        ),
                    });
                }
            }
        };
        match found {
            Some(payload) if payload == last.payload => {
                warn!(
                    seq = last.seq,
                    error, "the commit's answer was lost, but it landed"
                );
                Ok(())
            }
            _ => Err(StoreError::Failed {
                detail: format!("the commit failed ({error}) and did not land"),
            }),
        }
    }
}

impl PgLog {
    /// The payload of event `seq`, if the log holds it, read under the
    /// ledger-wide lock. The lookup's transaction takes a transaction id,
    /// so its commit waits, as a batch's does, for the synchronous
    /// standby: an event found is answered as committed only once the
    /// standby holds it too, even one whose own wait was cancelled.
    fn look_up(&self, seq: u64) -> Result<Option<Vec<u8>>, StoreError> {
        let mut client = connect(&self.url)?;
        let mut transaction = client.transaction().map_err(failed)?;
        transaction
            .execute("SELECT pg_advisory_xact_lock($1, 0)", &[&LOCK_CLASS])
            .map_err(failed)?;
        transaction
            .execute("SELECT pg_current_xact_id()", &[])
            .map_err(failed)?;
        let row = transaction
            .query_opt(
                "SELECT payload FROM payonce.events WHERE seq = $1",
                &[&signed(seq)],
            )
            .map_err(failed)?;
        transaction.commit().map_err(failed)?;
        Ok(row.map(|row| row.get::<_, Vec<u8>>(0)))
    }
}

/// The last event of the log `conn` reads, `None` if it cannot tell.
fn log_end(conn: &mut Pipeline) -> Option<u64> {
    let row = conn
        .query_one(
            "SELECT coalesce(max(last_seq), 0) FROM payonce.batches",
            &[],
        )
        .ok()?;
    Some(unsigned(row.get::<_, i64>(0)))
}

fn poisoned() -> StoreError {
    StoreError::Failed {
        detail: "a panic while the connection was in use".to_owned(),
    }
}

impl Drop for PgLog {
    /// Lets the worker's lock go before the connection closes: the server
    /// would let it go only once it notices the connection is gone, and a
    /// restart at once would find it held.
    fn drop(&mut self) {
        let Some(worker) = self.role.locked() else {
            return;
        };
        if let Ok(mut connection) = self.connection.lock()
            && let Some(client) = connection.client.as_mut()
        {
            let _ = client.execute(
                "SELECT pg_advisory_unlock($1, hashtext($2))",
                &[&WORKER_LOCK_CLASS, &worker.as_str()],
            );
        }
    }
}

/// The connection of a batch under way: never made again in the middle of
/// one, whose transaction a lost connection ended.
fn live(connection: &mut Connection) -> Result<(&mut Pipeline, &Statements), StoreError> {
    match (connection.client.as_mut(), connection.statements.as_ref()) {
        (Some(client), Some(statements)) if !client.is_closed() => Ok((client, statements)),
        _ => Err(StoreError::Failed {
            detail: "the connection was lost during a batch, which was not committed".to_owned(),
        }),
    }
}

/// What a batch reads under the lock, in one round trip: the events after
/// `$1` (the last this process read), each with its batch's row (its
/// first and last event and its digest), and with the batch ending at `$1` beside it (`last_seq`, `digest`: null if
/// the log no longer has it); a single row of nulls but those when there
/// are no events after it.
///
/// Each event's batch is looked up by its key, one at a time (the
/// `LATERAL ... LIMIT 1` keeps the planner from joining it back): a batch
/// runs this statement under a generic plan ([`begin_batch`]), which
/// cannot know that few events follow `$1`, and would otherwise hash every
/// batch of the log on each call.
pub(crate) const CATCH_UP: &str = "
SELECT e.seq, e.payload, b.first_seq, b.last_seq, b.digest, h.last_seq, h.digest
FROM (SELECT 1) AS one
LEFT JOIN payonce.batches h ON h.last_seq = $1
LEFT JOIN (payonce.events e LEFT JOIN LATERAL (
    SELECT first_seq, last_seq, digest FROM payonce.batches WHERE first_seq = e.batch LIMIT 1
) b ON true) ON e.seq > $1
ORDER BY e.seq";

/// Follows the rows of [`CATCH_UP`] along the chain, handing back their
/// records: a single row without an event says there is none.
fn follow_all(
    follower: &mut Follower,
    rows: &[postgres::Row],
) -> Result<Vec<SharedRecord>, StoreError> {
    let mut records = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(seq) = row.get::<_, Option<i64>>(0).map(unsigned) else {
            continue;
        };
        let payload: &[u8] = row.get(1);
        let first_seq = row.get::<_, Option<i64>>(2).map(unsigned);
        let batch = Row {
            seq,
            // No batch: one that begins at no event, which the follower
            // refuses.
            batch: first_seq.unwrap_or(0),
            payload,
            starts: match (first_seq, row.get::<_, Option<i64>>(3)) {
                (Some(first_seq), Some(last_seq)) if first_seq == seq => {
                    Some((unsigned(last_seq), row.get::<_, &[u8]>(4)))
                }
                _ => None,
            },
        };
        follower.follow(&batch)?;
        records.push(SharedRecord {
            seq,
            payload: payload.to_vec(),
        });
    }
    Ok(records)
}

/// A batch's first round trip: its transaction, the check that it runs on
/// `backend`, the one its connection was set up on (the `pooler` module),
/// how the server plans the batch's statements, and the ledger-wide lock.
///
/// - Generic plans: the plans do not depend on the values (every lookup
///   is by a key), so planning them again on each execution, as the
///   server does for the first few and whenever it guesses a custom plan
///   cheaper, only costs time under the lock (about half of the insert's).
/// - No JIT compilation: a generic plan's cost is estimated for a third of
///   the log after `$1`, which passes `jit_above_cost` once the log is
///   long, and compiling then took 160 ms for a statement that runs in
///   0.05 ms.
fn begin_batch(backend: i32) -> String {
    format!(
        "BEGIN; {}; SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL jit = off; \
         SELECT pg_advisory_xact_lock({LOCK_CLASS}, 0)",
        pooler::same_backend(backend)
    )
}

/// The batch's row, its events, the rows of its claims and its index rows
/// (the events about each key and withdrawal), in one statement. A claim
/// takes the next round of its withdrawal and of its key: the releases of
/// each before it, in the database and in the batch.
const INSERT_BATCH: &str = "
WITH batch AS (
    INSERT INTO payonce.batches (first_seq, last_seq, digest, worker, written_under)
    VALUES ($1, $2, $3, $4, $13)
), key_index AS (
    INSERT INTO payonce.key_events (key, seq) SELECT * FROM unnest($14::text[], $15::bigint[])
), withdrawal_index AS (
    INSERT INTO payonce.withdrawal_events (withdrawal, seq)
    SELECT * FROM unnest($16::text[], $17::bigint[])
), events AS (
    INSERT INTO payonce.events (seq, batch, payload)
    SELECT e.seq, $1, e.payload FROM unnest($5::bigint[], $6::bytea[]) AS e(seq, payload)
), claims AS (
    SELECT * FROM unnest($7::bigint[], $8::text[], $9::text[]) AS c(seq, key, withdrawal)
), freed AS (
    SELECT * FROM unnest($10::bigint[], $11::text[], $12::text[]) AS r(seq, key, withdrawal)
), withdrawal_rows AS (
    INSERT INTO payonce.withdrawal_claims (withdrawal, round, key, seq)
    SELECT c.withdrawal,
        (SELECT count(*) FROM payonce.releases r WHERE r.withdrawal = c.withdrawal)
        + (SELECT count(*) FROM freed r WHERE r.withdrawal = c.withdrawal AND r.seq < c.seq),
        c.key, c.seq
    FROM claims c
)
INSERT INTO payonce.key_claims (key, round, withdrawal, seq)
SELECT c.key,
    (SELECT count(*) FROM payonce.releases r WHERE r.key = c.key)
    + (SELECT count(*) FROM freed r WHERE r.key = c.key AND r.seq < c.seq),
    c.withdrawal, c.seq
FROM claims c";

/// A release ends the current round of its key and of its withdrawal,
/// which must be a claim of that key: the foreign keys refuse anything
/// else.
const INSERT_RELEASE: &str = "
INSERT INTO payonce.releases (seq, key, key_round, withdrawal, round)
VALUES ($1, $2, (SELECT count(*) FROM payonce.releases WHERE key = $2),
        $3, (SELECT count(*) FROM payonce.releases WHERE withdrawal = $3))";

/// The batch's [`INSERT_BATCH`], to be sent in the batch's pipeline.
fn insert_batch<'a>(
    conn: &'a Pipeline,
    statements: &'a Statements,
    batch: &'a [Appended],
    digest: &'a [u8],
    worker: Option<&'a str>,
) -> Request<'a> {
    let seqs: Vec<i64> = batch.iter().map(|event| signed(event.seq)).collect();
    let payloads: Vec<&[u8]> = batch.iter().map(|event| event.payload.as_slice()).collect();
    let rows = |claims: bool| {
        let mut columns: (Vec<i64>, Vec<&str>, Vec<&str>) = Default::default();
        for event in batch {
            let (key, withdrawal) = match (&event.claim, claims) {
                (Some(ClaimChange::Claims { key, withdrawal }), true)
                | (Some(ClaimChange::Frees { key, withdrawal }), false) => (key, withdrawal),
                _ => continue,
            };
            columns.0.push(signed(event.seq));
            columns.1.push(key.as_str());
            columns.2.push(withdrawal.as_str());
        }
        columns
    };
    let (claim_seqs, claim_keys, claim_withdrawals) = rows(true);
    let (free_seqs, free_keys, free_withdrawals) = rows(false);
    let first = seqs.first().copied().unwrap_or(0);
    let last = seqs.last().copied().unwrap_or(0);
    let index = index::Rows::of(batch);
    Box::pin(async move {
        let params: [&(dyn ToSql + Sync); 17] = [
            &first,
            &last,
            &digest,
            &worker,
            &seqs,
            &payloads,
            &claim_seqs,
            &claim_keys,
            &claim_withdrawals,
            &free_seqs,
            &free_keys,
            &free_withdrawals,
            &SCHEMA_VERSION,
            &index.keys,
            &index.key_seqs,
            &index.withdrawals,
            &index.withdrawal_seqs,
        ];
        conn.client()
            .execute(&statements.insert_batch, &params)
            .await
    })
}

/// An [`INSERT_RELEASE`] for each release of the batch, in its order, to
/// be sent in the batch's pipeline after [`insert_batch`].
fn insert_releases<'a>(
    conn: &'a Pipeline,
    statements: &'a Statements,
    batch: &'a [Appended],
) -> impl Iterator<Item = Request<'a>> {
    batch.iter().filter_map(move |event| {
        let Some(ClaimChange::Frees { key, withdrawal }) = &event.claim else {
            return None;
        };
        let (seq, key, withdrawal) = (signed(event.seq), key.as_str(), withdrawal.as_str());
        let request: Request<'a> = Box::pin(async move {
            conn.client()
                .execute(&statements.insert_release, &[&seq, &key, &withdrawal])
                .await
        });
        Some(request)
    })
}

impl SharedLog for PgLog {
    fn scan(&self, after: u64, visit: Visit<'_>) -> Result<(), StoreError> {
        let mut connection = self.lock()?;
        self.follower_at(&mut connection, after)?;
        self.client(&mut connection)?;
        let Connection {
            client: Some(conn),
            follower,
            ..
        } = &mut *connection
        else {
            unreachable!("connected just above")
        };
        scan(conn, follower, &mut |seq, payload, _| visit(seq, payload))?;
        Ok(())
    }

    fn begin(&self, after: u64) -> Result<Vec<SharedRecord>, StoreError> {
        let mut connection = self.lock()?;
        let begun = self.begin_locked(&mut connection, after);
        if begun.is_err() && connection.in_batch {
            PgLog::abandon(&mut connection);
        }
        begun
    }

    fn commit(&self, batch: &[Appended]) -> Result<(), StoreError> {
        let mut connection = self.lock()?;
        let committed = self.commit_locked(&mut connection, batch);
        if committed.is_err() && connection.in_batch {
            PgLog::abandon(&mut connection);
        }
        committed
    }

    fn head(&self) -> Result<Head, StoreError> {
        Ok(self.lock()?.follower.head)
    }

    fn reachable(&self) -> Result<(), StoreError> {
        self.probe()
    }

    fn log_id(&self) -> Result<Option<u64>, StoreError> {
        log_id_in(&mut connect(&self.url)?)
    }

    fn head_at(&self, seq: u64) -> Result<Option<Head>, StoreError> {
        head_at_in(&mut connect(&self.url)?, seq)
    }
}

/// The identity of the ledger in `client`'s database, which its snapshots
/// name: the first 8 bytes (little-endian) of its first batch's digest, a
/// digest over its first event, the `opened` of its creation, which
/// records a random epoch, so no two ledgers share it. `None` for a
/// database without a ledger.
pub(crate) fn log_id_in(client: &mut Client) -> Result<Option<u64>, StoreError> {
    let row = client
        .query_opt(
            "SELECT digest FROM payonce.batches WHERE first_seq = 1",
            &[],
        )
        .map_err(failed)?;
    row.map(|row| {
        let digest: &[u8] = row.get(0);
        let first: [u8; 8] = digest
            .get(..8)
            .and_then(|first| first.try_into().ok())
            .ok_or_else(|| damaged(1, format!("a batch digest of {} bytes", digest.len())))?;
        Ok(u64::from_le_bytes(first))
    })
    .transpose()
}

/// The head of the batch of the ledger in `client`'s database that ends at
/// `seq`, as its row says; `None` if none does.
pub(crate) fn head_at_in(client: &mut Client, seq: u64) -> Result<Option<Head>, StoreError> {
    let row = client
        .query_opt(
            "SELECT digest FROM payonce.batches WHERE last_seq = $1",
            &[&signed(seq)],
        )
        .map_err(failed)?;
    row.map(|row| {
        let digest: Vec<u8> = row.get(0);
        let digest: [u8; 32] = digest.try_into().map_err(|digest: Vec<u8>| {
            damaged(seq, format!("a batch digest of {} bytes", digest.len()))
        })?;
        Ok(Head {
            seq,
            digest: payonce_log::chain::Digest(digest),
        })
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{CATCH_UP, PgLog, Role, live};
    use payonce::{SharedLog, StoreError};
    use postgres::{Client, NoTls, SimpleQueryMessage};

    /// The plan the server keeps for `sql` once it plans it generically,
    /// as a batch has it do.
    fn generic_plan(client: &mut Client, sql: &str) -> String {
        client
            .simple_query(&format!(
                "SET plan_cache_mode = force_generic_plan; EXPLAIN {sql}"
            ))
            .unwrap()
            .into_iter()
            .filter_map(|message| match message {
                SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn a_batch_plans_its_statements_generically_and_without_jit() {
        let Some(url) = crate::cluster::test_database() else {
            return;
        };
        let log = PgLog::connect(&url, Role::Attached).unwrap();
        log.begin(0).unwrap();
        let mut connection = log.lock().unwrap();
        let (client, _) = live(&mut connection).unwrap();
        let settings = client
            .query_one(
                "SELECT current_setting('plan_cache_mode'), current_setting('jit')",
                &[],
            )
            .unwrap();
        assert_eq!(settings.get::<_, String>(0), "force_generic_plan");
        assert_eq!(settings.get::<_, String>(1), "off");
        drop(connection);
        log.commit(&[]).unwrap();
    }

    #[test]
    fn a_batch_on_another_backend_than_its_connection_was_set_up_on_is_refused_before_it_reads() {
        // Guards against a batch running on a server session a pooler handed out in place of the one holding the worker's lock and prepared statements.
        let Some(url) = crate::cluster::test_database() else {
            return;
        };
        let log = PgLog::connect(&url, Role::Attached).unwrap();
        let backend = {
            let mut connection = log.lock().unwrap();
            let (client, _) = live(&mut connection).unwrap();
            let backend = client.backend();
            client.pretend_backend(backend + 1);
            backend
        };
        let error = log.begin(0).unwrap_err();
        let StoreError::Unsafe { detail } = &error else {
            panic!("{error:?}");
        };
        assert!(
            detail.contains(&format!(
                "ran on server backend {backend}, not on backend {}",
                backend + 1
            )),
            "{detail}"
        );
        assert!(detail.contains("set pool_mode = session"), "{detail}");
        // The transaction was rolled back: the connection goes on once it
        // is where its setup was.
        live(&mut log.lock().unwrap())
            .unwrap()
            .0
            .pretend_backend(backend);
        log.begin(0).unwrap();
        log.commit(&[]).unwrap();
    }

    #[test]
    fn the_catch_up_looks_each_batch_up_by_its_key_however_long_the_log() {
        let Some(url) = crate::cluster::test_database() else {
            return;
        };
        let mut client = Client::connect(&url, NoTls).unwrap();
        client
            .batch_execute(
                "INSERT INTO payonce.batches (first_seq, last_seq, digest, written_under) \
                 SELECT n, n, decode(repeat('ab', 32), 'hex'), 2 FROM generate_series(1, 20000) n;
                 INSERT INTO payonce.events (seq, batch, payload) \
                 SELECT n, n, '\\x00' FROM generate_series(1, 20000) n;
                 ANALYZE payonce.batches; ANALYZE payonce.events;",
            )
            .unwrap();
        client
            .batch_execute(&format!("PREPARE catch_up(bigint) AS {CATCH_UP}"))
            .unwrap();
        let plan = generic_plan(&mut client, "EXECUTE catch_up(19990)");
        assert!(
            !plan.contains("Seq Scan"),
            "a table is scanned whole:\n{plan}"
        );
        assert!(plan.contains("Index Scan using batches_pkey"), "{plan}");
    }
}
