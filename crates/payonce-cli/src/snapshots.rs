//! `payonce snapshot`: take a snapshot of the projections now, or list the
//! ones kept and whether each verifies; and the snapshots' part of `payonce
//! verify --snapshots`, which compares each with the state the replay
//! rebuilds at its seq. Every check of a snapshot is the library's
//! (`payonce::snapshots::checked`), the one an opening makes.

use std::io::Write;

use payonce::{
    Config, DirSnapshots, Ledger, SnapshotError, SnapshotInfo, SnapshotPolicy, SnapshotStore,
    State, StoredSnapshot,
};
use serde::Serialize;

use crate::cli::SnapshotArgs;
use crate::env::{Env, Status};
use crate::error::{CliError, WriteStep};
use crate::escape::{EchoPath, Escaped};
use crate::json::to_json;
use crate::logdir::{LogDir, check_directory, open_log};
use crate::output::say;

/// One snapshot kept, as `snapshot --list` and `verify --snapshots` report it.
#[derive(Debug, Serialize)]
pub(crate) struct SnapshotJson {
    name: String,
    /// The last event its state holds.
    seq: u64,
    /// The head of the log it names, `SEQ:DIGEST`, if its header reads.
    head: Option<String>,
    len: Option<u64>,
    /// `verifies`, `refused`, or (from `verify --snapshots`) `matches`,
    /// `differs` or `past the log`.
    verdict: &'static str,
    /// Why it is refused, or the first answer that differs.
    detail: Option<String>,
}

/// A snapshot kept, checked as an opening checks it.
pub(crate) struct Checked {
    pub(crate) stored: StoredSnapshot,
    pub(crate) checked: Result<(SnapshotInfo, State), SnapshotError>,
    pub(crate) info: Option<SnapshotInfo>,
}

impl Checked {
    /// The report of this snapshot with `verdict` and `detail`.
    pub(crate) fn json(&self, verdict: &'static str, detail: Option<String>) -> SnapshotJson {
        SnapshotJson {
            name: self.stored.name.clone(),
            seq: self.stored.seq,
            head: self.info.map(|info| info.head.to_string()),
            len: self.info.map(|info| info.len),
            verdict,
            detail,
        }
    }
}

/// The snapshots kept beside the ledger `log`: its directory's
/// `snapshots/`, or its database's `payonce.snapshots`.
pub(crate) fn store_of(log: &LogDir) -> Result<Box<dyn SnapshotStore>, CliError> {
    match log.url() {
        Some(url) => {
            let store =
                payonce_postgres::PgSnapshots::connect(url, "auditor").map_err(|error| {
                    CliError::from_ledger(&log.dir, payonce::LedgerError::Store(error))
                })?;
            Ok(Box::new(store))
        }
        None => Ok(Box::new(DirSnapshots::beside(&log.dir))),
    }
}

/// Every snapshot in `store`, newest first, checked against `log` as an
/// opening checks it.
pub(crate) fn check_all(log: &LogDir, store: &dyn SnapshotStore) -> Result<Vec<Checked>, CliError> {
    let listing = |error: SnapshotError| CliError::Usage {
        message: format!(
            "the snapshots of {} cannot be listed: {error}",
            log.dir.display()
        ),
    };
    let log_id = log.log_id()?;
    let mut all = Vec::new();
    for stored in store.list().map_err(listing)? {
        let checked = match store.read(&stored) {
            Ok(bytes) => {
                let info = payonce::snapshots::info(&bytes).ok();
                let head_at = |seq| log.head_at(seq);
                let checked = payonce::snapshots::checked(&bytes, log_id, head_at, store)?;
                Checked {
                    stored,
                    checked,
                    info,
                }
            }
            Err(error) => Checked {
                stored,
                checked: Err(error),
                info: None,
            },
        };
        all.push(checked);
    }
    Ok(all)
}

/// `payonce snapshot DIR [--list]`.
pub(crate) fn snapshot(
    args: &SnapshotArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    if args.list {
        return list(args, env, out);
    }
    take(args, out, err)
}

fn list(args: &SnapshotArgs, env: &Env, out: &mut dyn Write) -> Result<Status, CliError> {
    let log = open_log(&args.dir, env.progress_for(args.json))?;
    let store = store_of(&log)?;
    let checked = check_all(&log, &*store)?;
    let reports: Vec<SnapshotJson> = checked
        .iter()
        .map(|checked| match &checked.checked {
            Ok(_) => checked.json("verifies", None),
            Err(error) => checked.json("refused", Some(error.to_string())),
        })
        .collect();
    let status = Status::problem_if(checked.iter().any(|checked| checked.checked.is_err()));
    if args.json {
        say!(out, "{}", to_json(&reports))?;
        return Ok(status);
    }
    say!(out, "snapshots of {}", EchoPath(&log.dir))?;
    if reports.is_empty() {
        say!(out, "  none")?;
    }
    for report in &reports {
        print_snapshot(report, out)?;
    }
    Ok(status)
}

/// One snapshot as a line, and why it does not verify if it does not.
pub(crate) fn print_snapshot(report: &SnapshotJson, out: &mut dyn Write) -> Result<(), CliError> {
    say!(
        out,
        "  {}  seq {}  head {}  {} bytes  {}",
        Escaped(&report.name),
        report.seq,
        report.head.as_deref().unwrap_or("(unreadable)"),
        report
            .len
            .map_or_else(|| "?".to_owned(), |len| len.to_string()),
        report.verdict
    )?;
    if let Some(detail) = &report.detail {
        say!(out, "    {}", Escaped(detail))?;
    }
    Ok(())
}

fn take(args: &SnapshotArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<Status, CliError> {
    let given = args.dir.as_path();
    let shown = match crate::postgres_url::as_url(given) {
        Some(url) => crate::postgres_url::checked(url)?,
        None => given.to_owned(),
    };
    let config = Config {
        // The one snapshot this command takes is the one it asks for.
        snapshots: SnapshotPolicy::never(),
        ..Config::default()
    };
    let ledger = match crate::postgres_url::as_url(given) {
        Some(url) => payonce_postgres::attach(url, config),
        None => {
            check_directory(given)?;
            Ledger::open_with(given, config)
        }
    }
    .map_err(|error| CliError::from_writer(&shown, WriteStep::Opening, error))?;
    warn_recovery(&ledger, err)?;
    let taken = ledger
        .snapshot()
        .map_err(|error| CliError::from_writer(&shown, WriteStep::Recording, error))?;
    match taken {
        Some(taken) if args.json => say!(
            out,
            "{}",
            to_json(&serde_json::json!({
                "name": taken.stored.name,
                "seq": taken.stored.seq,
                "head": taken.head.to_string(),
                "len": taken.len,
                "lock_held_us": taken.lock_held.as_micros() as u64,
                "took_ms": taken.took.as_millis() as u64,
            }))
        )?,
        Some(taken) => say!(
            out,
            "took a snapshot of {} at seq {} (head {}): {} bytes in {}, {} ms",
            EchoPath(&shown),
            taken.stored.seq,
            taken.head,
            taken.len,
            Escaped(&taken.stored.name),
            taken.took.as_millis()
        )?,
        None => say!(
            out,
            "the newest snapshot of {} is of its current state",
            EchoPath(&shown)
        )?,
    }
    Ok(Status::Clean)
}

/// Warns of every snapshot the opening of `ledger` refused, and where it was
/// set aside; says which one it opened from.
pub(crate) fn warn_recovery(ledger: &Ledger, err: &mut dyn Write) -> Result<(), CliError> {
    let recovery = ledger.recovery();
    for refused in &recovery.snapshots_set_aside {
        let aside = refused.set_aside_as.as_deref().unwrap_or("left in place");
        writeln!(
            err,
            "warning: refused snapshot {} ({}), set aside as {}; opened from an older one or \
             every event",
            Escaped(&refused.name),
            Escaped(&refused.error.to_string()),
            Escaped(aside)
        )
        .map_err(CliError::output)?;
    }
    if let Some(loaded) = &recovery.snapshot {
        writeln!(
            err,
            "opened from snapshot {} at seq {}, then {} events after it",
            Escaped(&loaded.name),
            loaded.seq,
            recovery.replayed
        )
        .map_err(CliError::output)?;
    }
    Ok(())
}

/// `verify --snapshots`: the snapshots kept, each compared with the state
/// the replay passes at its seq.
pub(crate) struct SnapshotAudit {
    checked: Vec<Checked>,
    /// The snapshots an opening would use, by seq, ascending.
    order: Vec<usize>,
    next: usize,
    verdicts: Vec<Option<(&'static str, Option<String>)>>,
}

impl SnapshotAudit {
    /// The audit of the snapshots kept beside `log`.
    pub(crate) fn of(log: &LogDir) -> Result<SnapshotAudit, CliError> {
        let store = store_of(log)?;
        let checked = check_all(log, &*store)?;
        let mut order: Vec<usize> = (0..checked.len())
            .filter(|&at| checked[at].checked.is_ok())
            .collect();
        order.sort_by_key(|&at| checked[at].stored.seq);
        let verdicts = checked.iter().map(|_| None).collect();
        Ok(SnapshotAudit {
            checked,
            order,
            next: 0,
            verdicts,
        })
    }

    /// The replay has applied every event up to `state`'s last: compares
    /// each snapshot of that seq with it.
    pub(crate) fn pass(&mut self, state: &State) {
        while let Some(&at) = self.order.get(self.next) {
            let Ok((_, snapshot)) = &self.checked[at].checked else {
                unreachable!("only snapshots an opening would use are ordered");
            };
            if snapshot.last_seq() > state.last_seq() {
                return;
            }
            self.verdicts[at] = Some(match snapshot.difference(state) {
                None => ("matches", None),
                Some(difference) => ("differs", Some(format!("first difference: {difference}"))),
            });
            self.next += 1;
        }
    }

    /// Every snapshot's report, newest first; whether all matched.
    pub(crate) fn finish(self) -> (Vec<SnapshotJson>, bool) {
        let mut clean = true;
        let reports = self
            .checked
            .iter()
            .zip(self.verdicts)
            .map(|(checked, verdict)| {
                let (verdict, detail) = match (&checked.checked, verdict) {
                    (Err(error), _) => ("refused", Some(error.to_string())),
                    (Ok(_), Some(verdict)) => verdict,
                    (Ok(_), None) => ("past the log", None),
                };
                clean &= verdict == "matches";
                checked.json(verdict, detail)
            })
            .collect();
        (reports, clean)
    }
}
