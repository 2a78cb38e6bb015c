//! `payonce history`: every event that touched a request key or a
//! withdrawal, in order, each decision explained in words. From the audit
//! index when there is a usable one (a directory's sled index; a
//! PostgreSQL ledger's index in the database), else from one scan of the
//! log; each gives the same answer.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use payonce::{LedgerError, StoreError, needs_state, withdrawal_of};
use payonce_log::TornTail;
use payonce_model::{RequestKey, WithdrawalId};
use serde::Serialize;
use tracing::info;

use crate::attribution::{Attributed, Attributor};
use crate::cli::HistoryArgs;
use crate::env::{Env, Status};
use crate::error::CliError;
use crate::escape::{Echo, EchoPath, Escaped};
use crate::explain::explain;
use crate::index;
use crate::json::{EventJson, TornTailJson, to_json};
use crate::logdir::{LogDir, open_log};
use crate::output::{count, warn_torn_tail};
use crate::subject::{HISTORY_EVENTS_MAX, unknown};
use crate::table::Table;
use payonce::Subject;

/// Reads `--key` or `--withdrawal` through the model's rules, so a value
/// with a control character is refused before anything is read.
fn subject(args: &HistoryArgs) -> Result<Subject, CliError> {
    match (&args.key, &args.withdrawal) {
        (Some(key), None) => RequestKey::new(key.as_str())
            .map(Subject::Key)
            .map_err(|error| CliError::InvalidArgument {
                argument: "--key",
                value: key.clone(),
                error,
            }),
        (None, Some(withdrawal)) => WithdrawalId::new(withdrawal.as_str())
            .map(Subject::Withdrawal)
            .map_err(|error| CliError::InvalidArgument {
                argument: "--withdrawal",
                value: withdrawal.clone(),
                error,
            }),
        _ => Err(CliError::Usage {
            message: "give exactly one of --key and --withdrawal".to_owned(),
        }),
    }
}

/// The events found about a subject, and where they were found.
struct Found {
    /// In log order, each with the withdrawal it is about; one more than a
    /// history lists if there were more.
    events: Vec<Attributed>,
    /// A torn tail met while reading the log.
    torn_tail: Option<TornTail>,
    /// What answered.
    answered: Answered,
}

/// What answered a history.
enum Answered {
    /// One scan of the whole log.
    Scan,
    /// The audit index at this path, beside a directory.
    AuditIndex(PathBuf),
    /// A PostgreSQL ledger's index of the events about each key and
    /// withdrawal.
    Database,
}

/// The subject's events from the audit index beside `log`, if there is a
/// usable one. An index that cannot answer for this subject is passed
/// over with a warning on `err`.
fn from_index(
    log: &LogDir,
    subject: &Subject,
    err: &mut dyn Write,
) -> Result<Option<Found>, CliError> {
    let Some(index) = index::open_for_query(log, err)? else {
        return Ok(None);
    };
    match index.events_of(log, subject) {
        Ok(events) => Ok(Some(Found {
            events,
            torn_tail: index.torn_tail.clone(),
            answered: Answered::AuditIndex(index.path().to_owned()),
        })),
        Err(problem) => {
            writeln!(
                err,
                "warning: the audit index {} is not used: {}. Answering from the log instead; \
                 `payonce index {} --rebuild` rebuilds it",
                EchoPath(index.path()),
                Escaped(&problem),
                EchoPath(&log.dir)
            )
            .map_err(CliError::output)?;
            Ok(None)
        }
    }
}

/// One scan of the whole log, attributing each event to the withdrawal it
/// is about as it goes.
fn scan(log: &LogDir, subject: &Subject) -> Result<Found, CliError> {
    let mut attributor = Attributor::starting_at(1);
    let mut events = Vec::new();
    let walked = log.walk(1, |event, _| {
        let withdrawal = attributor.attribute(log, event)?;
        if subject.touched_by(&event.kind, withdrawal.as_ref()) {
            events.push(Attributed {
                event: event.clone(),
                withdrawal,
            });
            // One more than shown, so the caller knows there were more.
            if events.len() > HISTORY_EVENTS_MAX {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(Found {
        events,
        torn_tail: walked.torn_tail,
        answered: Answered::Scan,
    })
}

/// A PostgreSQL ledger's events about `subject`, from its index in the
/// database (`None` for a directory): each read with its whole batch and
/// checked against the chain, then attributed as [`scan`] attributes it;
/// an event the index lists about another subject is damage.
fn from_database(log: &LogDir, subject: &Subject) -> Result<Option<Found>, CliError> {
    // One more than shown, so the caller knows there were more.
    let Some(listed) = log.events_about_postgres(subject, HISTORY_EVENTS_MAX + 1) else {
        return Ok(None);
    };
    let mut events = Vec::new();
    for event in listed? {
        let withdrawal = match needs_state(&event) {
            true => withdrawal_of(&log.state_before(event.seq)?, &event.kind),
            false => event.kind.withdrawal().cloned(),
        };
        if !subject.touched_by(&event.kind, withdrawal.as_ref()) {
            let detail = format!(
                "the database's index lists event {} under {subject}, which it is not about",
                event.seq
            );
            let damaged = StoreError::Damaged {
                seq: event.seq,
                detail,
            };
            return Err(CliError::from_ledger(&log.dir, LedgerError::Store(damaged)));
        }
        events.push(Attributed { event, withdrawal });
    }
    Ok(Some(Found {
        events,
        torn_tail: None,
        answered: Answered::Database,
    }))
}

/// `history`'s report.
#[derive(Debug, Serialize)]
struct HistoryJson {
    dir: String,
    key: Option<String>,
    withdrawal: Option<String>,
    /// "index" or "scan".
    source: &'static str,
    /// Whether more events touched the subject than are listed.
    truncated: bool,
    events: Vec<EventJson>,
    torn_tail: Option<TornTailJson>,
}

/// `payonce history DIR --key K | --withdrawal W`.
pub(crate) fn history(
    args: &HistoryArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let subject = subject(args)?;
    let log = open_log(&args.dir, env.progress_for(args.json))?;
    let indexed = match (args.no_index, log.is_postgres()) {
        (true, _) => None,
        (false, true) => from_database(&log, &subject)?,
        (false, false) => from_index(&log, &subject, err)?,
    };
    let found = match indexed {
        Some(found) => found,
        None => scan(&log, &subject)?,
    };
    info!(
        subject = ?subject,
        events = found.events.len(),
        from_index = !matches!(found.answered, Answered::Scan),
        "history answered"
    );
    let torn = warn_torn_tail(&log, found.torn_tail.as_ref(), err)?;
    let Found {
        mut events,
        torn_tail,
        answered,
    } = found;
    if events.is_empty() {
        return Err(unknown(&subject));
    }
    let truncated = keep_listed_max(&mut events, err)?;
    let listed: Vec<EventJson> = events
        .iter()
        .map(|Attributed { event, withdrawal }| {
            EventJson::new(
                event,
                withdrawal.as_ref(),
                Some(explain(event, withdrawal.as_ref())),
            )
        })
        .collect();
    let status = Status::problem_if(torn);
    let (key, withdrawal) = match &subject {
        Subject::Key(key) => (Some(key.to_string()), None),
        Subject::Withdrawal(id) => (None, Some(id.to_string())),
    };
    let report = HistoryJson {
        dir: log.dir.display().to_string(),
        key,
        withdrawal,
        source: match answered {
            Answered::Scan => "scan",
            Answered::AuditIndex(_) | Answered::Database => "index",
        },
        truncated,
        events: listed,
        torn_tail: torn_tail.as_ref().map(|t| TornTailJson::new(&log, t)),
    };
    if args.json {
        writeln!(out, "{}", to_json(&report)).map_err(CliError::output)?;
    } else {
        print_history(&report, &answered, out)?;
    }
    Ok(status)
}

/// Keeps the first [`HISTORY_EVENTS_MAX`] events, with a warning on `err`
/// if there were more; returns whether there were.
fn keep_listed_max(events: &mut Vec<Attributed>, err: &mut dyn Write) -> Result<bool, CliError> {
    if events.len() <= HISTORY_EVENTS_MAX {
        return Ok(false);
    }
    events.truncate(HISTORY_EVENTS_MAX);
    writeln!(
        err,
        "warning: more than {HISTORY_EVENTS_MAX} events touch this subject; the first \
         {HISTORY_EVENTS_MAX} are listed. `payonce export` with --from and --to shows the rest"
    )
    .map_err(CliError::output)?;
    Ok(true)
}

/// The history as text: a headline, a table of the events with each
/// decision in words, and where the answer came from (`index`, or a scan).
fn print_history(
    report: &HistoryJson,
    answered: &Answered,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let what = match (&report.key, &report.withdrawal) {
        (Some(key), _) => format!("request key {}", Echo(key)),
        (_, Some(id)) => format!("withdrawal {}", Echo(id)),
        _ => String::new(),
    };
    writeln!(
        out,
        "history of {} in {}: {}",
        what,
        EchoPath(Path::new(&report.dir)),
        count(report.events.len(), "event")
    )
    .map_err(CliError::output)?;
    let mut table = Table::new(&["seq", "time", "event", "key", "withdrawal", "what happened"]);
    for line in &report.events {
        table.row(vec![
            line.seq.to_string(),
            line.at.clone(),
            line.event.to_owned(),
            line.key.clone().unwrap_or_else(|| "-".to_owned()),
            line.withdrawal.clone().unwrap_or_else(|| "-".to_owned()),
            line.explanation.clone().unwrap_or_default(),
        ]);
    }
    table.write(out, 2)?;
    let footer = match answered {
        Answered::AuditIndex(path) => format!(
            "answered from the audit index {}, every event read back and verified",
            EchoPath(path)
        ),
        Answered::Database => "answered from the database's index of the events about each key \
             and withdrawal, every event's batch read back and checked against its chain digest"
            .to_owned(),
        Answered::Scan => "answered by one scan of the log".to_owned(),
    };
    writeln!(out, "{}", Escaped(&footer)).map_err(CliError::output)
}
