//! The two indexes in SQLite, as a service would put them there: WAL,
//! `synchronous=FULL`, a table per index with a unique constraint (the
//! primary key), and one `BEGIN IMMEDIATE` transaction per step.
//!
//! By default each submitting thread has its own connection, and a writer
//! waiting for the write lock sleeps in SQLite's busy handler
//! (`busy_timeout`), as several processes or a connection pool would. The
//! variant [`StoreKind::SqliteShared`] shares one connection behind a mutex
//! instead: no busy waiting, but one process only.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use payonce::NewWithdrawal;
use payonce_model::codec::{decode, encode};
use payonce_model::{Fingerprint, WithdrawalId, WithdrawalRequest};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tracing::debug;

use crate::error::BenchError;
use crate::store::{Answer, ClaimStep, Durability, Rail, Session, Store, StoreKind};

/// The database file inside the store's directory.
pub const SQLITE_FILE: &str = "payonce.sqlite";

/// How long a writer waits for the write lock before SQLite gives up. Far
/// above any wait a run sees, so a busy database is never an error.
const BUSY_TIMEOUT: Duration = Duration::from_secs(600);

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS withdrawals (
        id TEXT PRIMARY KEY,
        fingerprint BLOB NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS records (
        key TEXT PRIMARY KEY,
        withdrawal TEXT NOT NULL,
        fingerprint BLOB NOT NULL,
        claimed_at_ns INTEGER NOT NULL,
        outcome BLOB,
        last_error TEXT
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS claims (
        withdrawal TEXT PRIMARY KEY,
        holder TEXT NOT NULL
    ) WITHOUT ROWID;
";

/// Who uses which connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Connections {
    /// A connection per session (per submitting thread).
    PerThread,
    /// Every session takes turns on the store's one connection.
    Shared,
}

pub(crate) struct SqliteStore {
    path: PathBuf,
    durability: Durability,
    connections: Connections,
    /// For creating withdrawals and for questions outside a session; and for
    /// every session when shared.
    connection: Mutex<Connection>,
}

fn connect(path: &Path, durability: Durability) -> Result<Connection, BenchError> {
    let connection = Connection::open(path).map_err(BenchError::sqlite("open", None))?;
    connection
        .busy_timeout(BUSY_TIMEOUT)
        .map_err(BenchError::sqlite("busy_timeout", None))?;
    connection
        .pragma_update(None, "journal_mode", "WAL")
        .map_err(BenchError::sqlite("journal_mode", None))?;
    let synchronous = match durability {
        Durability::Full => "FULL",
        Durability::Relaxed => "OFF",
    };
    connection
        .pragma_update(None, "synchronous", synchronous)
        .map_err(BenchError::sqlite("synchronous", None))?;
    Ok(connection)
}

impl SqliteStore {
    pub(crate) fn open(
        dir: &Path,
        durability: Durability,
        connections: Connections,
    ) -> Result<SqliteStore, BenchError> {
        std::fs::create_dir_all(dir).map_err(BenchError::io(dir))?;
        let path = dir.join(SQLITE_FILE);
        let connection = connect(&path, durability)?;
        connection
            .execute_batch(SCHEMA)
            .map_err(BenchError::sqlite("create tables", None))?;
        Ok(SqliteStore {
            path,
            durability,
            connections,
            connection: Mutex::new(connection),
        })
    }

    fn with_connection<T>(
        &self,
        use_it: impl FnOnce(&mut Connection) -> Result<T, BenchError>,
    ) -> Result<T, BenchError> {
        with_shared(&self.connection, use_it)
    }
}

fn with_shared<T>(
    connection: &Mutex<Connection>,
    use_it: impl FnOnce(&mut Connection) -> Result<T, BenchError>,
) -> Result<T, BenchError> {
    // A panic elsewhere cannot leave a connection half-changed: SQLite rolls
    // back an unfinished transaction.
    let mut connection = connection
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    use_it(&mut connection)
}

impl Store for SqliteStore {
    fn kind(&self) -> StoreKind {
        match self.connections {
            Connections::PerThread => StoreKind::Sqlite,
            Connections::Shared => StoreKind::SqliteShared,
        }
    }

    fn create(&self, withdrawals: &[NewWithdrawal]) -> Result<Vec<WithdrawalRequest>, BenchError> {
        self.with_connection(|connection| {
            let transaction = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(BenchError::sqlite("create", None))?;
            let existing: u64 = transaction
                .query_row("SELECT count(*) FROM withdrawals", [], |row| row.get(0))
                .map_err(BenchError::sqlite("create", None))?;
            let mut created = Vec::with_capacity(withdrawals.len());
            {
                let mut insert = transaction
                    .prepare_cached("INSERT INTO withdrawals (id, fingerprint) VALUES (?1, ?2)")
                    .map_err(BenchError::sqlite("create", None))?;
                for (index, new) in withdrawals.iter().enumerate() {
                    let request = WithdrawalRequest::new(
                        WithdrawalId::minted(existing + index as u64 + 1),
                        new.amount,
                        new.currency.clone(),
                        new.destination.clone(),
                        new.requested_by.clone(),
                    );
                    let fingerprint = encode(&request.fingerprint())
                        .map_err(BenchError::codec("a fingerprint"))?;
                    insert
                        .execute(params![request.id().as_str(), fingerprint])
                        .map_err(BenchError::sqlite("create", None))?;
                    created.push(request);
                }
            }
            transaction
                .commit()
                .map_err(BenchError::sqlite("create", None))?;
            Ok(created)
        })
    }

    fn session(&self) -> Result<Box<dyn Session + '_>, BenchError> {
        let connection = match self.connections {
            Connections::PerThread => Handle::Own(connect(&self.path, self.durability)?),
            Connections::Shared => Handle::Shared(&self.connection),
        };
        Ok(Box::new(SqliteSession { connection }))
    }

    fn outcome_reference(&self, key: &str) -> Result<Option<String>, BenchError> {
        self.with_connection(|connection| {
            let outcome: Option<Option<Vec<u8>>> = connection
                .query_row("SELECT outcome FROM records WHERE key = ?1", [key], |row| {
                    row.get(0)
                })
                .optional()
                .map_err(BenchError::sqlite("outcome", Some(key)))?;
            match outcome.flatten() {
                Some(bytes) => {
                    let outcome: WithdrawalRequest =
                        decode(&bytes).map_err(BenchError::codec("an outcome"))?;
                    Ok(outcome.reference().map(ToString::to_string))
                }
                None => Ok(None),
            }
        })
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        let connection = self
            .connection
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        connection
            .close()
            .map_err(|(_, source)| BenchError::Sqlite {
                step: "close",
                key: None,
                source,
            })
    }
}

struct SqliteSession<'a> {
    connection: Handle<'a>,
}

enum Handle<'a> {
    Own(Connection),
    Shared(&'a Mutex<Connection>),
}

impl SqliteSession<'_> {
    /// Runs one step on the session's connection; a shared one is held for
    /// the step only.
    fn step<T>(
        &mut self,
        step: impl FnOnce(&mut Connection) -> Result<T, BenchError>,
    ) -> Result<T, BenchError> {
        match &mut self.connection {
            Handle::Own(connection) => step(connection),
            Handle::Shared(connection) => with_shared(connection, step),
        }
    }
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
        })
}

/// Step 1, in one transaction: the key's record, else the withdrawal's
/// creation and claim, else both rows inserted.
fn claim(
    connection: &mut Connection,
    key: &str,
    request: &WithdrawalRequest,
) -> Result<ClaimStep, BenchError> {
    let error = |step| BenchError::sqlite(step, Some(key));
    let fingerprint = request.fingerprint();
    let fingerprint_bytes = encode(&fingerprint).map_err(BenchError::codec("a fingerprint"))?;
    let id = request.id().as_str();
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(error("claim: begin"))?;
    let answer = match read_key(&transaction, key)? {
        Some(record) => Some(answer_known_key(
            key,
            &fingerprint,
            &fingerprint_bytes,
            &record.fingerprint,
            record.outcome,
        )?),
        None => withdrawal_refusal(&transaction, key, id, &fingerprint_bytes)?,
    };
    if let Some(answer) = answer {
        debug!(key, withdrawal = id, ?answer, "answered without a claim");
        // Nothing was written: ending the transaction syncs nothing.
        transaction.commit().map_err(error("claim: end"))?;
        return Ok(ClaimStep::Answered(answer));
    }
    insert_claim(&transaction, key, id, &fingerprint_bytes)?;
    transaction.commit().map_err(error("claim: commit"))?;
    debug!(key, withdrawal = id, "claimed");
    Ok(ClaimStep::Granted)
}

/// What the claim step reads of a key's record: both fields still encoded.
struct RecordRow {
    /// The fingerprint of the withdrawal the key claimed.
    fingerprint: Vec<u8>,
    /// The outcome, once there is one.
    outcome: Option<Vec<u8>>,
}

/// The key's record, if it has one.
fn read_key(connection: &Connection, key: &str) -> Result<Option<RecordRow>, BenchError> {
    connection
        .prepare_cached("SELECT fingerprint, outcome FROM records WHERE key = ?1")
        .and_then(|mut select| {
            select
                .query_row([key], |row| {
                    Ok(RecordRow {
                        fingerprint: row.get(0)?,
                        outcome: row.get(1)?,
                    })
                })
                .optional()
        })
        .map_err(BenchError::sqlite("claim: read the key", Some(key)))
}

/// For a key without a record, why its withdrawal cannot be claimed: it was
/// not created, it was created with other fields, or another key holds it.
/// `None` when it can be.
fn withdrawal_refusal(
    connection: &Connection,
    key: &str,
    id: &str,
    fingerprint_bytes: &[u8],
) -> Result<Option<Answer>, BenchError> {
    let error = |step| BenchError::sqlite(step, Some(key));
    let created: Option<Vec<u8>> = connection
        .prepare_cached("SELECT fingerprint FROM withdrawals WHERE id = ?1")
        .and_then(|mut select| select.query_row([id], |row| row.get(0)).optional())
        .map_err(error("claim: read the withdrawal"))?;
    match created {
        None => return Ok(Some(Answer::UnknownWithdrawal)),
        Some(created) if created != fingerprint_bytes => return Ok(Some(Answer::NotAsCreated)),
        Some(_) => {}
    }
    let holder: Option<(String, bool)> = connection
        .prepare_cached(
            "SELECT claims.holder, records.outcome IS NOT NULL \
                 FROM claims JOIN records ON records.key = claims.holder \
                 WHERE claims.withdrawal = ?1",
        )
        .and_then(|mut select| {
            select
                .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(error("claim: read the claim"))?;
    Ok(holder.map(|(holder, holder_decided)| Answer::Claimed {
        holder,
        holder_decided,
    }))
}

/// Inserts the key's record and the withdrawal's claim: the claim itself.
fn insert_claim(
    connection: &Connection,
    key: &str,
    id: &str,
    fingerprint_bytes: &[u8],
) -> Result<(), BenchError> {
    let error = |step| BenchError::sqlite(step, Some(key));
    connection
        .prepare_cached(
            "INSERT INTO records (key, withdrawal, fingerprint, claimed_at_ns) \
                 VALUES (?1, ?2, ?3, ?4)",
        )
        .and_then(|mut insert| insert.execute(params![key, id, fingerprint_bytes, now_ns()]))
        .map_err(error("claim: insert the record"))?;
    connection
        .prepare_cached("INSERT INTO claims (withdrawal, holder) VALUES (?1, ?2)")
        .and_then(|mut insert| insert.execute(params![id, key]))
        .map_err(error("claim: insert the claim"))?;
    Ok(())
}

/// Step 3, in one transaction: the outcome, or the send's error.
fn complete(
    connection: &mut Connection,
    key: &str,
    request: &WithdrawalRequest,
    outcome: Option<&WithdrawalRequest>,
    failure: Option<&str>,
) -> Result<(), BenchError> {
    let error = |step| BenchError::sqlite(step, Some(key));
    let outcome_bytes = outcome
        .map(|outcome| encode(outcome).map_err(BenchError::codec("an outcome")))
        .transpose()?;
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(error("complete: begin"))?;
    let changed = transaction
        .prepare_cached(
            "UPDATE records SET outcome = ?2, last_error = ?3 \
                 WHERE key = ?1 AND outcome IS NULL",
        )
        .and_then(|mut update| update.execute(params![key, outcome_bytes, failure]))
        .map_err(error("complete: update the record"))?;
    if changed != 1 {
        return Err(BenchError::Unexpected {
            store: "SQLite",
            key: key.to_owned(),
            answer: format!("{changed} records to complete"),
        });
    }
    transaction.commit().map_err(error("complete: commit"))?;
    debug!(key, withdrawal = %request.id(), sent = outcome.is_some(), "completed");
    Ok(())
}

/// The answer for a key that has a record: a conflict if it named another
/// withdrawal, else its outcome, else in flight.
fn answer_known_key(
    key: &str,
    fingerprint: &Fingerprint,
    fingerprint_bytes: &[u8],
    recorded_fingerprint: &[u8],
    outcome: Option<Vec<u8>>,
) -> Result<Answer, BenchError> {
    if recorded_fingerprint != fingerprint_bytes {
        let recorded: Fingerprint =
            decode(recorded_fingerprint).map_err(BenchError::codec("a fingerprint"))?;
        let fields = recorded
            .differences(fingerprint)
            .iter()
            .map(|difference| difference.field)
            .collect();
        debug!(key, withdrawal = %fingerprint.id(), "the key belongs to another withdrawal");
        return Ok(Answer::KeyReused { fields });
    }
    Ok(match outcome {
        Some(bytes) => {
            let outcome: WithdrawalRequest =
                decode(&bytes).map_err(BenchError::codec("an outcome"))?;
            Answer::Replayed {
                reference: outcome
                    .reference()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            }
        }
        None => Answer::InFlight,
    })
}

impl Session for SqliteSession<'_> {
    fn submit(
        &mut self,
        key: &str,
        request: &WithdrawalRequest,
        rail: Rail<'_>,
    ) -> Result<Answer, BenchError> {
        if let ClaimStep::Answered(answer) = self.step(|c| claim(c, key, request))? {
            return Ok(answer);
        }
        match rail.send(request) {
            Ok(outcome) if outcome.fingerprint() == request.fingerprint() => {
                self.step(|c| complete(c, key, request, Some(&outcome), None))?;
                Ok(Answer::Sent {
                    reference: outcome
                        .reference()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                })
            }
            Ok(_) => {
                let failure = "the rail answered about another withdrawal";
                self.step(|c| complete(c, key, request, None, Some(failure)))?;
                Ok(Answer::SendFailed)
            }
            Err(failure) => {
                self.step(|c| complete(c, key, request, None, Some(&failure.reason)))?;
                Ok(Answer::SendFailed)
            }
        }
    }
}
