//! Running a workload on a store and measuring it: throughput, latency,
//! answers, disk, memory; and the raw fdatasync rate beside them.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use payonce_log::{FsStorage, LogConfig, LogReader, OpenError};
use payonce_model::WithdrawalRequest;
use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::open::open_store;
use crate::store::{Answer, Durability, Rail, Session, Store, StoreKind};
use crate::workload::{Op, Workload, WorkloadSpec};

/// Most directory entries [`disk_bytes`] and [`sync_files`] visit, so a
/// wrong path cannot walk the whole disk.
pub const DIR_ENTRIES_MAX: usize = 100_000;

/// How many submissions got each kind of answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Claimed, sent, outcome recorded.
    pub sent: u64,
    /// The recorded outcome, without a send.
    pub replayed: u64,
    /// Sent, outcome unknown.
    pub send_failed: u64,
    /// Refused: the key's outcome is unknown.
    pub in_flight: u64,
    /// Refused: the key belongs to another withdrawal.
    pub key_reused: u64,
    /// Refused: another key holds the withdrawal.
    pub claimed: u64,
    /// Refused: not created here, or created otherwise.
    pub unknown: u64,
}

impl Tally {
    fn count(&mut self, answer: &Answer) {
        let counter = match answer {
            Answer::Sent { .. } => &mut self.sent,
            Answer::Replayed { .. } => &mut self.replayed,
            Answer::SendFailed => &mut self.send_failed,
            Answer::InFlight => &mut self.in_flight,
            Answer::KeyReused { .. } => &mut self.key_reused,
            Answer::Claimed { .. } => &mut self.claimed,
            Answer::UnknownWithdrawal | Answer::NotAsCreated => &mut self.unknown,
        };
        *counter += 1;
    }

    fn add(&mut self, other: &Tally) {
        self.sent += other.sent;
        self.replayed += other.replayed;
        self.send_failed += other.send_failed;
        self.in_flight += other.in_flight;
        self.key_reused += other.key_reused;
        self.claimed += other.claimed;
        self.unknown += other.unknown;
    }

    /// Submissions counted.
    pub fn total(&self) -> u64 {
        self.sent
            + self.replayed
            + self.send_failed
            + self.in_flight
            + self.key_reused
            + self.claimed
            + self.unknown
    }
}

/// What one timed run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFigures {
    /// The store.
    pub store: StoreKind,
    /// The workload.
    pub spec: WorkloadSpec,
    /// Submissions answered.
    pub submissions: u64,
    /// Wall time from the first submission to the last answer.
    pub elapsed_secs: f64,
    /// Submissions per second.
    pub submits_per_sec: f64,
    /// Median latency of one submission.
    pub latency_p50_us: f64,
    /// 99th percentile latency of one submission.
    pub latency_p99_us: f64,
    /// The slowest submission.
    #[serde(default)]
    pub latency_max_us: f64,
    /// The answers by kind.
    pub tally: Tally,
    /// A hash of every answer, thread by thread in order: equal digests
    /// mean the stores answered every submission alike.
    pub digest: u64,
    /// Peak resident memory of the process (VmHWM), if measured.
    pub peak_resident_bytes: Option<u64>,
    /// Submissions per second of each round, when this report combines
    /// several ([`combine_rounds`]).
    #[serde(default)]
    pub round_rates: Vec<f64>,
}

/// Combines one store's rounds of the same kind of run: the median
/// throughput and median latencies, the sum of the answers, the highest
/// peak memory. Medians, because a shared machine's bursts of load hit
/// single rounds.
pub fn combine_rounds(rounds: &[RunFigures]) -> Option<RunFigures> {
    let first = rounds.first()?;
    let median = |value: fn(&RunFigures) -> f64| {
        let mut values: Vec<f64> = rounds.iter().map(value).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let mut tally = Tally::default();
    let mut digest = DefaultHasher::new();
    for round in rounds {
        tally.add(&round.tally);
        round.digest.hash(&mut digest);
    }
    Some(RunFigures {
        store: first.store,
        spec: first.spec,
        submissions: rounds.iter().map(|round| round.submissions).sum(),
        elapsed_secs: rounds.iter().map(|round| round.elapsed_secs).sum(),
        submits_per_sec: median(|round| round.submits_per_sec),
        latency_p50_us: median(|round| round.latency_p50_us),
        latency_p99_us: median(|round| round.latency_p99_us),
        latency_max_us: rounds
            .iter()
            .map(|round| round.latency_max_us)
            .fold(0.0, f64::max),
        tally,
        digest: digest.finish(),
        peak_resident_bytes: rounds
            .iter()
            .filter_map(|round| round.peak_resident_bytes)
            .max(),
        round_rates: rounds.iter().map(|round| round.submits_per_sec).collect(),
    })
}

/// Creates the workload's withdrawals in a fresh store in `dir`, with
/// durability relaxed, then closes it and fsyncs every file: creation is not
/// part of any measurement, and no timed sync pays for its writes.
pub fn prepare(
    kind: StoreKind,
    dir: &Path,
    workload: &Workload,
) -> Result<Vec<WithdrawalRequest>, BenchError> {
    let store = open_store(kind, dir, Durability::Relaxed)?;
    let requests = store.create(&workload.withdrawals)?;
    store.close()?;
    sync_files(dir)?;
    Ok(requests)
}

/// Runs every thread's stream of submissions against `store` at once and
/// measures it. `requests` are the created withdrawals, as [`prepare`]
/// returned them.
pub fn run(
    store: &dyn Store,
    workload: &Workload,
    requests: &[WithdrawalRequest],
) -> Result<RunFigures, BenchError> {
    if requests.len() != workload.withdrawals.len() {
        return Err(BenchError::Setting {
            setting: "requests",
            value: requests.len().to_string(),
            rule: "one created request per withdrawal of the workload",
        });
    }
    let (elapsed_secs, results) = submit_streams(store, workload, requests);
    summarise(store.kind(), workload, elapsed_secs, results)
}

/// Starts a thread per stream, lets them all go at once, and waits for the
/// last: the seconds from the start to the last answer, and what each
/// thread measured.
fn submit_streams(
    store: &dyn Store,
    workload: &Workload,
    requests: &[WithdrawalRequest],
) -> (f64, Vec<Result<ThreadResult, BenchError>>) {
    let start_line = Barrier::new(workload.threads.len() + 1);
    let (started, results) = thread::scope(|scope| {
        let handles: Vec<_> = workload
            .threads
            .iter()
            .map(|ops| {
                let start_line = &start_line;
                scope.spawn(move || -> Result<ThreadResult, BenchError> {
                    // Opened before the start so a connection's setup is not
                    // timed; the barrier is passed even on failure so the
                    // others are not left waiting.
                    let session = store.session();
                    start_line.wait();
                    let mut session = session?;
                    submit_stream(session.as_mut(), ops, requests)
                })
            })
            .collect();
        start_line.wait();
        let started = Instant::now();
        let results: Vec<_> = handles
            .into_iter()
            .enumerate()
            .map(|(thread, handle)| {
                handle
                    .join()
                    .map_err(|_| BenchError::ThreadPanicked { thread })
                    .and_then(|result| result)
            })
            .collect();
        (started, results)
    });
    (started.elapsed().as_secs_f64(), results)
}

/// One thread's submissions, in order, each timed, counted and hashed.
fn submit_stream(
    session: &mut dyn Session,
    ops: &[Op],
    requests: &[WithdrawalRequest],
) -> Result<ThreadResult, BenchError> {
    let mut result = ThreadResult {
        latencies_ns: Vec::with_capacity(ops.len()),
        tally: Tally::default(),
        hasher: DefaultHasher::new(),
    };
    for op in ops {
        let request = &requests[op.withdrawal];
        let rail = Rail {
            script: op.rail,
            reference: &op.reference,
        };
        let begun = Instant::now();
        let answer = session.submit(&op.key, request, rail)?;
        let latency = begun.elapsed();
        result
            .latencies_ns
            .push(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
        result.tally.count(&answer);
        answer.hash(&mut result.hasher);
    }
    Ok(result)
}

/// The run's report from what its threads measured: the first thread's
/// failure, if any, is the run's.
fn summarise(
    store: StoreKind,
    workload: &Workload,
    elapsed_secs: f64,
    results: Vec<Result<ThreadResult, BenchError>>,
) -> Result<RunFigures, BenchError> {
    let mut latencies = Vec::with_capacity(workload.submissions());
    let mut tally = Tally::default();
    let mut digest = DefaultHasher::new();
    for result in results {
        let result = result?;
        latencies.extend_from_slice(&result.latencies_ns);
        tally.add(&result.tally);
        result.hasher.finish().hash(&mut digest);
    }
    latencies.sort_unstable();
    let submissions = tally.total();
    Ok(RunFigures {
        store,
        spec: workload.spec,
        submissions,
        elapsed_secs,
        submits_per_sec: submissions as f64 / elapsed_secs.max(f64::MIN_POSITIVE),
        latency_p50_us: percentile(&latencies, 50.0) / 1000.0,
        latency_p99_us: percentile(&latencies, 99.0) / 1000.0,
        latency_max_us: percentile(&latencies, 100.0) / 1000.0,
        tally,
        digest: digest.finish(),
        peak_resident_bytes: None,
        round_rates: Vec::new(),
    })
}

/// What one submitting thread measured.
struct ThreadResult {
    latencies_ns: Vec<u64>,
    tally: Tally,
    hasher: DefaultHasher,
}

/// The nearest-rank percentile of sorted values (0 for none).
pub(crate) fn percentile(sorted: &[u64], percent: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (percent / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64
}

/// Generates the workload, prepares a fresh store of `kind` in `dir`, opens
/// it with full durability and runs the workload: one timed run.
pub fn timed_run(
    kind: StoreKind,
    dir: &Path,
    spec: WorkloadSpec,
) -> Result<RunFigures, BenchError> {
    let workload = Workload::generate(spec)?;
    let requests = prepare(kind, dir, &workload)?;
    let store = open_store(kind, dir, Durability::Full)?;
    let report = run(store.as_ref(), &workload, &requests)?;
    store.close()?;
    Ok(report)
}

/// What building a large state left behind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildFigures {
    /// The store.
    pub store: StoreKind,
    /// Submissions made.
    pub submissions: u64,
    /// The answers by kind.
    pub tally: Tally,
    /// Seconds the submissions took, with durability relaxed.
    pub elapsed_secs: f64,
    /// A key with an outcome, to ask after reopening.
    pub probe_key: String,
    /// That key's outcome's reference.
    pub probe_reference: String,
    /// Bytes of every file in the store's directory, once closed.
    pub disk_bytes: u64,
}

/// Builds the state after `spec`'s submissions in a fresh store in `dir`
/// with durability relaxed (the same protocol, nothing synced until the
/// end), then closes the store and fsyncs its files.
pub fn build(kind: StoreKind, dir: &Path, spec: WorkloadSpec) -> Result<BuildFigures, BenchError> {
    let workload = Workload::generate(spec)?;
    let requests = prepare(kind, dir, &workload)?;
    let store = open_store(kind, dir, Durability::Relaxed)?;
    let report = run(store.as_ref(), &workload, &requests)?;
    let probe = workload
        .threads
        .iter()
        .flatten()
        .find(|op| op.rail == crate::workload::RailScript::Succeed);
    let (probe_key, probe_reference) = match probe {
        Some(op) => {
            let reference = store.outcome_reference(&op.key)?.unwrap_or_default();
            (op.key.clone(), reference)
        }
        None => (String::new(), String::new()),
    };
    store.close()?;
    sync_files(dir)?;
    Ok(BuildFigures {
        store: kind,
        submissions: report.submissions,
        tally: report.tally,
        elapsed_secs: report.elapsed_secs,
        probe_key,
        probe_reference,
        disk_bytes: disk_bytes(dir)?,
    })
}

/// What opening a built state took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenFigures {
    /// The store.
    pub store: StoreKind,
    /// Seconds from opening with full durability to the first answer (the
    /// probe key's outcome).
    pub open_secs: f64,
    /// The probe key's outcome's reference, as the reopened store gave it.
    pub probe_reference: Option<String>,
    /// Peak resident memory of the process after opening (VmHWM), if
    /// measured.
    pub peak_resident_bytes: Option<u64>,
    /// For payonce: the events its open replayed (the log's records), to
    /// tell its replay rate.
    pub log_records: Option<u64>,
}

/// Opens the store in `dir` as a service starts it (full durability) and
/// asks for `probe_key`'s outcome: the time until the first answer.
pub fn open_and_probe(
    kind: StoreKind,
    dir: &Path,
    probe_key: &str,
) -> Result<OpenFigures, BenchError> {
    let started = Instant::now();
    let store = open_store(kind, dir, Durability::Full)?;
    let probe_reference = store.outcome_reference(probe_key)?;
    let open_secs = started.elapsed().as_secs_f64();
    store.close()?;
    Ok(OpenFigures {
        store: kind,
        open_secs,
        probe_reference,
        peak_resident_bytes: None,
        log_records: None,
    })
}

/// The records in the payonce log in `dir`, counted by a verifying scan.
pub fn payonce_log_records(dir: &Path) -> Result<u64, BenchError> {
    let storage = Arc::new(FsStorage::new(dir));
    let reader =
        LogReader::open(storage, LogConfig::default()).map_err(|source| BenchError::Log {
            dir: dir.to_path_buf(),
            source: Box::new(source),
        })?;
    let recovery = reader
        .scan(|_| Ok::<(), std::convert::Infallible>(()))
        .map_err(|error| match error {
            OpenError::Log(source) => BenchError::Log {
                dir: dir.to_path_buf(),
                source: Box::new(source),
            },
            OpenError::Visit(never) => match never {},
        })?;
    Ok(recovery.records)
}

/// Writes `len` bytes and fdatasyncs them, in a loop, for `duration`, on a
/// new file in `dir`: the most durable writes per second one thread can get
/// from this disk. Returns syncs per second.
pub fn fdatasync_rate(dir: &Path, len: usize, duration: Duration) -> Result<f64, BenchError> {
    payonce_log::sync_rate(&FsStorage::new(dir), len, duration)
        .map_err(BenchError::io(dir.join(payonce_log::SYNC_PROBE_FILE)))
}

/// Like [`fdatasync_rate`], but each write overwrites bytes inside a file
/// already written and synced, so `fdatasync` has no file size to commit:
/// what a store that reuses its space pays.
pub fn overwrite_fdatasync_rate(
    dir: &Path,
    len: usize,
    duration: Duration,
) -> Result<f64, BenchError> {
    payonce_log::overwrite_sync_rate(&FsStorage::new(dir), len, duration)
        .map_err(BenchError::io(dir.join(payonce_log::SYNC_PROBE_FILE)))
}

/// Visits every file under `dir` (at most [`DIR_ENTRIES_MAX`] entries).
fn visit_files(
    dir: &Path,
    visit: &mut dyn FnMut(&Path, &fs::Metadata) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    let mut pending = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).map_err(BenchError::io(&dir))? {
            seen += 1;
            if seen > DIR_ENTRIES_MAX {
                return Err(BenchError::Setting {
                    setting: "store directory",
                    value: dir.display().to_string(),
                    rule: "at most DIR_ENTRIES_MAX (100,000) entries",
                });
            }
            let entry = entry.map_err(BenchError::io(&dir))?;
            let path = entry.path();
            let metadata = entry.metadata().map_err(BenchError::io(&path))?;
            if metadata.is_dir() {
                pending.push(path);
            } else if metadata.is_file() {
                visit(&path, &metadata)?;
            }
        }
    }
    Ok(())
}

/// Bytes of every file under `dir`.
pub fn disk_bytes(dir: &Path) -> Result<u64, BenchError> {
    let mut total = 0;
    visit_files(dir, &mut |_, metadata| {
        total += metadata.len();
        Ok(())
    })?;
    Ok(total)
}

/// fsyncs every file under `dir`, and `dir` itself.
pub fn sync_files(dir: &Path) -> Result<(), BenchError> {
    visit_files(dir, &mut |path, _| {
        File::open(path)
            .and_then(|file| file.sync_all())
            .map_err(BenchError::io(path))
    })?;
    File::open(dir)
        .and_then(|file| file.sync_all())
        .map_err(BenchError::io(dir))
}

/// This process's peak resident memory (VmHWM in /proc/self/status).
pub fn peak_resident_bytes() -> Result<u64, BenchError> {
    const STATUS: &str = "/proc/self/status";
    let status = fs::read_to_string(STATUS).map_err(BenchError::io(STATUS))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kib| kib * 1024)
        .ok_or(BenchError::Proc {
            path: STATUS,
            field: "VmHWM",
        })
}

/// Whether every report answered every submission alike: the stores'
/// digests and tallies, by store, when they differ.
pub fn disagreements(reports: &[RunFigures]) -> Option<BTreeMap<String, (u64, Tally)>> {
    let first = reports.first()?;
    let agree = reports
        .iter()
        .all(|report| report.digest == first.digest && report.tally == first.tally);
    if agree {
        return None;
    }
    Some(
        reports
            .iter()
            .map(|report| {
                (
                    report.store.to_string(),
                    (report.digest, report.tally.clone()),
                )
            })
            .collect(),
    )
}

/// The system's load averages over 1, 5 and 15 minutes, from
/// /proc/loadavg: printed beside every run's figures.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_owned())
}
