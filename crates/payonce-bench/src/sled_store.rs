//! The two indexes in sled 0.34, as a service would put them there: a tree
//! per index (and one for created withdrawals), the claim written to both
//! in one transaction, and `flush` before any step is acknowledged.
//!
//! On Linux, sled 0.34.7's `flush` writes its buffers with `pwrite` and
//! waits with `sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)`, not
//! `fsync`: the data reaches the device, but the device's write cache is
//! not flushed and the file's size is not committed, so a power loss can
//! still lose it. [`StoreKind::Sled`] therefore adds an `fdatasync` of
//! sled's data file after every flush, for the same durability as the
//! others; [`StoreKind::SledFlushOnly`] is sled as shipped.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use payonce::NewWithdrawal;
use payonce_model::codec::CodecError;
use payonce_model::codec::{decode, encode};
use payonce_model::{Fingerprint, WithdrawalId, WithdrawalRequest};
use serde::{Deserialize, Serialize};
use sled::Transactional;
use sled::transaction::{
    ConflictableTransactionError, ConflictableTransactionResult, TransactionError,
    TransactionalTree,
};
use tracing::debug;

use crate::error::BenchError;
use crate::store::{Answer, ClaimStep, Durability, Rail, Session, Store, StoreKind};

/// A request key's record, as stored in the `records` tree.
#[derive(Debug, Serialize, Deserialize)]
struct StoredRecord {
    fingerprint: Fingerprint,
    claimed_at_ns: u64,
    outcome: Option<WithdrawalRequest>,
    last_error: Option<String>,
}

/// The file sled 0.34 keeps its log and pages in, inside its directory.
const SLED_DATA_FILE: &str = "db";

/// What a flush is followed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SledSync {
    /// `fdatasync` of the data file: the same durability as the others.
    Fdatasync,
    /// Nothing: sled's flush as shipped.
    FlushOnly,
}

pub(crate) struct SledStore {
    db: sled::Db,
    withdrawals: sled::Tree,
    records: sled::Tree,
    claims: sled::Tree,
    durability: Durability,
    sync: SledSync,
    /// sled's data file, for `fdatasync` after a flush.
    data_file: File,
    data_path: PathBuf,
}

impl SledStore {
    pub(crate) fn open(
        dir: &Path,
        durability: Durability,
        sync: SledSync,
    ) -> Result<SledStore, BenchError> {
        let error = |step| BenchError::sled(step, None);
        let db = open_after_close(dir).map_err(error("open"))?;
        let withdrawals = db
            .open_tree("withdrawals")
            .map_err(error("open withdrawals"))?;
        let records = db.open_tree("records").map_err(error("open records"))?;
        let claims = db.open_tree("claims").map_err(error("open claims"))?;
        let data_path = dir.join(SLED_DATA_FILE);
        let data_file = File::open(&data_path).map_err(BenchError::io(&data_path))?;
        Ok(SledStore {
            db,
            withdrawals,
            records,
            claims,
            durability,
            sync,
            data_file,
            data_path,
        })
    }

    /// Puts everything written so far on stable storage, unless durability
    /// is relaxed.
    fn flush(&self, step: &'static str, key: &str) -> Result<(), BenchError> {
        if self.durability == Durability::Full {
            self.db.flush().map_err(BenchError::sled(step, Some(key)))?;
            if self.sync == SledSync::Fdatasync {
                self.data_file
                    .sync_data()
                    .map_err(BenchError::io(&self.data_path))?;
            }
        }
        Ok(())
    }

    /// Makes what the claim step answered durable before the session acts
    /// on it: a claim before its send, and a replayed outcome before it is
    /// returned. A refusal wrote nothing: it is answered without a flush.
    fn acknowledge(&self, step: &ClaimStep, key: &str, id: &str) -> Result<(), BenchError> {
        match step {
            ClaimStep::Granted => {
                self.flush("claim: flush", key)?;
                debug!(key, withdrawal = id, "claimed");
            }
            ClaimStep::Answered(answer @ Answer::Replayed { .. }) => {
                // Another thread may have written the outcome and not flushed
                // it yet: nothing is acknowledged before it is durable.
                self.flush("replay: flush", key)?;
                debug!(key, withdrawal = id, ?answer, "replayed");
            }
            ClaimStep::Answered(answer) => debug!(key, withdrawal = id, ?answer, "refused"),
        }
        Ok(())
    }
}

impl Store for SledStore {
    fn kind(&self) -> StoreKind {
        match self.sync {
            SledSync::Fdatasync => StoreKind::Sled,
            SledSync::FlushOnly => StoreKind::SledFlushOnly,
        }
    }

    fn create(&self, withdrawals: &[NewWithdrawal]) -> Result<Vec<WithdrawalRequest>, BenchError> {
        let mut created = Vec::with_capacity(withdrawals.len());
        for new in withdrawals {
            let seq = self
                .db
                .generate_id()
                .map_err(BenchError::sled("create: mint an id", None))?;
            let request = WithdrawalRequest::new(
                WithdrawalId::minted(seq + 1),
                new.amount,
                new.currency.clone(),
                new.destination.clone(),
                new.requested_by.clone(),
            );
            let fingerprint =
                encode(&request.fingerprint()).map_err(BenchError::codec("a fingerprint"))?;
            self.withdrawals
                .insert(request.id().as_str(), fingerprint)
                .map_err(BenchError::sled("create", None))?;
            created.push(request);
        }
        self.db
            .flush()
            .map_err(BenchError::sled("create: flush", None))?;
        Ok(created)
    }

    fn session(&self) -> Result<Box<dyn Session + '_>, BenchError> {
        Ok(Box::new(SledSession { store: self }))
    }

    fn outcome_reference(&self, key: &str) -> Result<Option<String>, BenchError> {
        let Some(bytes) = self
            .records
            .get(key)
            .map_err(BenchError::sled("outcome", Some(key)))?
        else {
            return Ok(None);
        };
        let record: StoredRecord = decode(&bytes).map_err(BenchError::codec("a record"))?;
        Ok(record
            .outcome
            .and_then(|outcome| outcome.reference().map(ToString::to_string)))
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        self.db.flush().map_err(BenchError::sled("close", None))?;
        self.data_file
            .sync_data()
            .map_err(BenchError::io(&self.data_path))
    }
}

/// How long an open waits for the lock of a database this process has
/// just closed.
const LOCK_WAIT_MAX: Duration = Duration::from_secs(5);

/// Opens the database in `dir`, waiting up to [`LOCK_WAIT_MAX`] for its
/// file lock: dropping a `sled::Db` does not release the lock at once
/// (sled's flusher thread holds it until it ends, spacejam/sled#1234), so
/// reopening what was just closed, as a run does after preparing its
/// withdrawals, can find it still held on a loaded machine.
fn open_after_close(dir: &Path) -> sled::Result<sled::Db> {
    let start = Instant::now();
    loop {
        match sled::Config::new().path(dir).open() {
            // sled 0.34.7 reports the lock held as an error of kind Other
            // whose text says so.
            Err(sled::Error::Io(error))
                if error.to_string().starts_with("could not acquire lock")
                    && start.elapsed() < LOCK_WAIT_MAX =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            opened => return opened,
        }
    }
}

struct SledSession<'a> {
    store: &'a SledStore,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// Turns a failed transaction into the harness's error.
fn transaction_error(
    step: &'static str,
    key: &str,
) -> impl FnOnce(TransactionError<CodecError>) -> BenchError {
    let key = key.to_owned();
    move |error| match error {
        TransactionError::Abort(source) => BenchError::Codec {
            what: "a stored record",
            source,
        },
        TransactionError::Storage(source) => BenchError::Sled {
            step,
            key: Some(key),
            source,
        },
    }
}

fn abort(error: CodecError) -> ConflictableTransactionError<CodecError> {
    ConflictableTransactionError::Abort(error)
}

/// The answer for a key that has a record: a conflict if it named another
/// withdrawal, else its outcome, else in flight.
fn answer_known_key(record: StoredRecord, fingerprint: &Fingerprint) -> Answer {
    if record.fingerprint != *fingerprint {
        let fields = record
            .fingerprint
            .differences(fingerprint)
            .iter()
            .map(|difference| difference.field)
            .collect();
        return Answer::KeyReused { fields };
    }
    match record.outcome {
        Some(outcome) => Answer::Replayed {
            reference: outcome
                .reference()
                .map(ToString::to_string)
                .unwrap_or_default(),
        },
        None => Answer::InFlight,
    }
}

/// For a key without a record, why its withdrawal cannot be claimed: it was
/// not created, it was created with other fields, or another key holds it.
/// `None` when it can be.
fn withdrawal_refusal(
    records: &TransactionalTree,
    claims: &TransactionalTree,
    withdrawals: &TransactionalTree,
    id: &str,
    fingerprint_bytes: &[u8],
) -> ConflictableTransactionResult<Option<Answer>, CodecError> {
    match withdrawals.get(id)? {
        None => return Ok(Some(Answer::UnknownWithdrawal)),
        Some(created) if created != fingerprint_bytes => return Ok(Some(Answer::NotAsCreated)),
        Some(_) => {}
    }
    let Some(holder) = claims.get(id)? else {
        return Ok(None);
    };
    let holder_decided = match records.get(&holder)? {
        Some(bytes) => decode::<StoredRecord>(&bytes)
            .map_err(abort)?
            .outcome
            .is_some(),
        None => false,
    };
    Ok(Some(Answer::Claimed {
        holder: String::from_utf8_lossy(&holder).into_owned(),
        holder_decided,
    }))
}

impl SledSession<'_> {
    /// Step 1, in one transaction over the three trees: the key's record,
    /// else the withdrawal's creation and claim, else both entries written.
    fn claim(&mut self, key: &str, request: &WithdrawalRequest) -> Result<ClaimStep, BenchError> {
        let store = self.store;
        let fingerprint = request.fingerprint();
        let fingerprint_bytes = encode(&fingerprint).map_err(BenchError::codec("a fingerprint"))?;
        let id = request.id().as_str();
        let step = (&store.records, &store.claims, &store.withdrawals)
            .transaction(|(records, claims, withdrawals)| {
                if let Some(bytes) = records.get(key)? {
                    let record: StoredRecord = decode(&bytes).map_err(abort)?;
                    return Ok(ClaimStep::Answered(answer_known_key(record, &fingerprint)));
                }
                if let Some(answer) =
                    withdrawal_refusal(records, claims, withdrawals, id, &fingerprint_bytes)?
                {
                    return Ok(ClaimStep::Answered(answer));
                }
                let record = StoredRecord {
                    fingerprint: fingerprint.clone(),
                    claimed_at_ns: now_ns(),
                    outcome: None,
                    last_error: None,
                };
                records.insert(key, encode(&record).map_err(abort)?)?;
                claims.insert(id, key)?;
                Ok(ClaimStep::Granted)
            })
            .map_err(transaction_error("claim", key))?;
        store.acknowledge(&step, key, id)?;
        Ok(step)
    }

    /// Step 3, in one transaction: the outcome, or the send's error.
    fn complete(
        &mut self,
        key: &str,
        request: &WithdrawalRequest,
        outcome: Option<&WithdrawalRequest>,
        failure: Option<&str>,
    ) -> Result<(), BenchError> {
        let store = self.store;
        let completed = store
            .records
            .transaction(|records| {
                let Some(bytes) = records.get(key)? else {
                    return Ok(false);
                };
                let mut record: StoredRecord = decode(&bytes).map_err(abort)?;
                if record.outcome.is_some() {
                    return Ok(false);
                }
                record.outcome = outcome.cloned();
                record.last_error = failure.map(str::to_owned);
                records.insert(key, encode(&record).map_err(abort)?)?;
                Ok(true)
            })
            .map_err(transaction_error("complete", key))?;
        if !completed {
            return Err(BenchError::Unexpected {
                store: "sled",
                key: key.to_owned(),
                answer: "no record in flight to complete".to_owned(),
            });
        }
        store.flush("complete: flush", key)?;
        debug!(key, withdrawal = %request.id(), sent = outcome.is_some(), "completed");
        Ok(())
    }
}

impl Session for SledSession<'_> {
    fn submit(
        &mut self,
        key: &str,
        request: &WithdrawalRequest,
        rail: Rail<'_>,
    ) -> Result<Answer, BenchError> {
        if let ClaimStep::Answered(answer) = self.claim(key, request)? {
            return Ok(answer);
        }
        match rail.send(request) {
            Ok(outcome) if outcome.fingerprint() == request.fingerprint() => {
                self.complete(key, request, Some(&outcome), None)?;
                Ok(Answer::Sent {
                    reference: outcome
                        .reference()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                })
            }
            Ok(_) => {
                self.complete(
                    key,
                    request,
                    None,
                    Some("the rail answered about another withdrawal"),
                )?;
                Ok(Answer::SendFailed)
            }
            Err(failure) => {
                self.complete(key, request, None, Some(&failure.reason))?;
                Ok(Answer::SendFailed)
            }
        }
    }
}
