//! The operator exits, `resolve` and `release`: the only commands that
//! write. They check everything they can before taking the writer lock, so
//! a mistake (a bad outcome file, an outcome for another withdrawal, a key
//! that has no record) leaves the log's bytes untouched.

use std::fs::File;
use std::io::{Read, Write};
use std::ops::ControlFlow;

use payonce::{
    Command, Config, Decision, Event, EventKind, Ledger, LedgerError, SCHEMA_VERSION, State, apply,
    decide, rederive,
};
use payonce_log::{FsStorage, Storage};
use payonce_model::{Actor, Note, RequestKey, WithdrawalRequest};
use serde::Serialize;
use tracing::info;

use crate::cli::{ReleaseArgs, ResolveArgs};
use crate::env::{Env, Status};
use crate::error::CliError;
use crate::escape::Escaped;
use crate::json::{KeyRecordJson, key_records, to_json};
use crate::logdir::{LogDir, open_log};

/// Largest outcome file read, in bytes; checked before reading. A
/// withdrawal's JSON is well under 8 KiB even with every bump recorded.
pub const OUTCOME_FILE_LEN_MAX: u64 = 64 * 1024;

fn key_argument(key: &str) -> Result<RequestKey, CliError> {
    RequestKey::new(key).map_err(|error| CliError::InvalidArgument {
        argument: "KEY",
        value: key.to_owned(),
        error,
    })
}

fn note_argument(note: &str) -> Result<Note, CliError> {
    Note::new(note).map_err(|error| CliError::InvalidArgument {
        argument: "--note",
        value: note.to_owned(),
        error,
    })
}

/// The operator: `--by`, else `$USER`; refused if neither.
fn operator(by: Option<&str>, env: &Env) -> Result<Actor, CliError> {
    let (argument, name) = match (by, env.user.as_deref()) {
        (Some(by), _) => ("--by", by),
        (None, Some(user)) => ("$USER", user),
        (None, None) => return Err(CliError::NoOperator),
    };
    Actor::operator(name).map_err(|error| CliError::InvalidArgument {
        argument,
        value: name.to_owned(),
        error,
    })
}

/// Reads the outcome file: at most [`OUTCOME_FILE_LEN_MAX`] bytes of JSON
/// that the model accepts as a withdrawal.
fn read_outcome(path: &std::path::Path) -> Result<WithdrawalRequest, CliError> {
    let problem = |problem: String| CliError::OutcomeFile {
        file: path.to_owned(),
        problem,
    };
    let file = File::open(path).map_err(|error| problem(format!("cannot be read: {error}")))?;
    let mut bytes = Vec::new();
    file.take(OUTCOME_FILE_LEN_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| problem(format!("cannot be read: {error}")))?;
    if bytes.len() as u64 > OUTCOME_FILE_LEN_MAX {
        return Err(problem(format!(
            "is larger than {OUTCOME_FILE_LEN_MAX} bytes; a withdrawal is far smaller"
        )));
    }
    serde_json::from_slice(&bytes).map_err(|error| {
        problem(format!(
            "is not a withdrawal as JSON ({error}); it needs id, amount, currency, destination, \
             state and requested_by, plus reference when sent or confirmed and reason when \
             failed or rejected"
        ))
    })
}

/// Refuses early when another process holds the writer lock, before any
/// work; `Ledger::open` checks again for real.
fn check_unlocked(log: &LogDir) -> Result<(), CliError> {
    match FsStorage::new(&log.dir).try_lock() {
        Ok(Some(lock)) => {
            drop(lock);
            Ok(())
        }
        Ok(None) => Err(CliError::Locked {
            dir: log.dir.clone(),
        }),
        Err(error) => Err(CliError::Io {
            doing: format!("taking the writer lock of {}", log.dir.display()),
            error,
        }),
    }
}

/// Decides `command` as the ledger will once opened, without writing: the
/// log replayed read-only (each decision re-derived, as opening does), then
/// the `opened` event opening appends, then `decide`.
fn preflight(
    log: &LogDir,
    command: &Command,
    accept_foreign_ids: bool,
    env: &Env,
    err: &mut dyn Write,
) -> Result<(State, Decision), CliError> {
    let mut state = State::new();
    let walked = log.walk(1, |event, _| {
        if let Some(divergence) = rederive(&state, event) {
            return Err(CliError::Damaged {
                dir: log.dir.clone(),
                error: Box::new(LedgerError::Divergence(Box::new(divergence))),
            });
        }
        apply(&mut state, event);
        Ok(ControlFlow::Continue(()))
    })?;
    let opened = Event {
        schema: SCHEMA_VERSION,
        seq: state.last_seq() + 1,
        at: env.now,
        // The epoch opening draws is unknown here, and no operator command
        // mints an id.
        kind: EventKind::Opened {
            accept_foreign_ids,
            epoch: None,
        },
    };
    apply(&mut state, &opened);
    if let Some(torn) = &walked.torn_tail {
        writeln!(
            err,
            "warning: {}. Opening the ledger for writing saves those bytes aside in the same \
             directory and cuts them off",
            Escaped(&log.describe_torn_tail(torn))
        )
        .map_err(CliError::output)?;
    }
    let decision = decide(&state, command).map_err(|refusal| {
        info!(%refusal, "refused before taking the writer lock; nothing written");
        CliError::Refused {
            refusal: Box::new(refusal),
        }
    })?;
    Ok((state, decision))
}

fn open_ledger(log: &LogDir, accept_foreign_ids: bool) -> Result<Ledger, CliError> {
    let config = Config {
        accept_foreign_ids,
        ..Config::default()
    };
    Ledger::open_with(&log.dir, config).map_err(|error| CliError::from_ledger(&log.dir, error))
}

/// What an operator exit prints as JSON.
#[derive(Debug, Serialize)]
struct ExitJson {
    dir: String,
    key: String,
    /// "resolved", "released" or "unchanged".
    action: &'static str,
    /// The log's last sequence number afterwards.
    last_seq: u64,
    /// The key's record afterwards; null once released.
    record: Option<KeyRecordJson>,
    withdrawal: String,
    /// The key holding the withdrawal afterwards, if any.
    claimed_by: Option<String>,
    /// Funds held for the withdrawal afterwards, if any.
    held: Option<String>,
}

fn exit_json(
    log: &LogDir,
    state: &State,
    key: &RequestKey,
    withdrawal: &str,
    action: &'static str,
) -> ExitJson {
    ExitJson {
        dir: log.dir.display().to_string(),
        key: key.to_string(),
        action,
        last_seq: state.last_seq(),
        record: key_records(state)
            .into_iter()
            .find(|r| r.key == key.as_str()),
        withdrawal: withdrawal.to_owned(),
        claimed_by: state.claimed_by(withdrawal).map(String::from),
        held: state
            .held(withdrawal)
            .map(|hold| format!("{} {}", hold.amount, hold.currency)),
    }
}

/// One line about a key's record, for the operator exits.
fn key_record_words(record: &KeyRecordJson) -> String {
    let outcome = if record.outcome == "in flight" {
        let error = record
            .last_error
            .as_ref()
            .map_or_else(String::new, |e| format!(", last error: {e}"));
        format!("in flight (outcome unknown{error})")
    } else {
        let mut words = format!("outcome {}", record.outcome);
        if let Some(reference) = &record.reference {
            words.push_str(&format!(", reference {reference}"));
        }
        if let Some(reason) = &record.reason {
            words.push_str(&format!(" ({reason})"));
        }
        words
    };
    format!(
        "request key {} holds withdrawal {} ({} {} to {}), claimed at seq {} ({}): {outcome}",
        record.key,
        record.withdrawal,
        record.amount,
        record.currency,
        record.destination,
        record.claimed_seq,
        record.claimed_at
    )
}

fn print_exit(
    report: &ExitJson,
    headline: &str,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let say = |out: &mut dyn Write, text: &str| {
        writeln!(out, "{}", Escaped(text)).map_err(CliError::output)
    };
    if json {
        return writeln!(out, "{}", to_json(report)).map_err(CliError::output);
    }
    say(out, headline)?;
    match &report.record {
        Some(record) => say(out, &key_record_words(record))?,
        None => say(out, &format!("request key {} has no record", report.key))?,
    }
    say(
        out,
        &format!(
            "withdrawal {}: {}; {}",
            report.withdrawal,
            report.claimed_by.as_ref().map_or_else(
                || "claimed by no key (it may be submitted again)".to_owned(),
                |key| format!("claimed by request key {key}")
            ),
            report.held.as_ref().map_or_else(
                || "no funds held for it".to_owned(),
                |held| format!("{held} held for it")
            )
        ),
    )
}

/// `payonce resolve DIR KEY --outcome FILE --note TEXT [--by NAME]`.
pub(crate) fn resolve(
    args: &ResolveArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let key = key_argument(&args.key)?;
    let note = note_argument(&args.note)?;
    let by = operator(args.by.as_deref(), env)?;
    let outcome = read_outcome(&args.outcome)?;
    let log = open_log(&args.dir, env.progress_for(args.json))?;
    check_unlocked(&log)?;
    let withdrawal = outcome.id().to_string();
    let command = Command::Resolve {
        key: key.clone(),
        outcome: outcome.clone(),
        note: note.clone(),
        by: by.clone(),
    };
    let (state, decision) = preflight(&log, &command, args.accept_foreign_ids, env, err)?;
    if decision == Decision::Unchanged {
        let report = exit_json(&log, &state, &key, &withdrawal, "unchanged");
        let headline = format!("request key {key} already has this outcome; nothing was written");
        print_exit(&report, &headline, args.json, out)?;
        return Ok(Status::Clean);
    }
    let ledger = open_ledger(&log, args.accept_foreign_ids)?;
    ledger
        .resolve(key.as_str(), outcome.clone(), note.as_str(), by.as_str())
        .map_err(|error| CliError::from_ledger(&log.dir, error))?;
    let state = ledger.state();
    drop(ledger);
    info!(key = %key, withdrawal = %withdrawal, by = %by, seq = state.last_seq(), "resolved by an operator");
    let report = exit_json(&log, &state, &key, &withdrawal, "resolved");
    let headline = format!(
        "resolved request key {key} by {by}: withdrawal {withdrawal} is {} (event {})",
        crate::explain::outcome_words(&outcome),
        state.last_seq()
    );
    print_exit(&report, &headline, args.json, out)?;
    Ok(Status::Clean)
}

/// `payonce release DIR KEY --note TEXT [--by NAME]`.
pub(crate) fn release(
    args: &ReleaseArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let key = key_argument(&args.key)?;
    let note = note_argument(&args.note)?;
    let by = operator(args.by.as_deref(), env)?;
    let log = open_log(&args.dir, env.progress_for(args.json))?;
    check_unlocked(&log)?;
    let command = Command::Release {
        key: key.clone(),
        note: note.clone(),
        by: by.clone(),
    };
    let (state, decision) = preflight(&log, &command, false, env, err)?;
    let Some(record) = state.record(&key) else {
        return Err(CliError::NoRecord {
            key: key.to_string(),
        });
    };
    let withdrawal = record.fingerprint().id().to_string();
    if decision == Decision::Unchanged {
        return Err(CliError::NoRecord {
            key: key.to_string(),
        });
    }
    // A release never checks ids, so the id policy does not matter here; the
    // service's own next open records its policy again.
    let ledger = open_ledger(&log, false)?;
    ledger
        .release(key.as_str(), note.as_str(), by.as_str())
        .map_err(|error| CliError::from_ledger(&log.dir, error))?;
    let state = ledger.state();
    drop(ledger);
    info!(key = %key, withdrawal = %withdrawal, by = %by, seq = state.last_seq(), "released by an operator");
    let report = exit_json(&log, &state, &key, &withdrawal, "released");
    let headline = format!(
        "released request key {key} by {by}: nothing was sent for withdrawal {withdrawal} (event {})",
        state.last_seq()
    );
    print_exit(&report, &headline, args.json, out)?;
    Ok(Status::Clean)
}
