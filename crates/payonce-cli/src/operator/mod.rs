//! The operator exits, `resolve`, `correct` and `release`: the only
//! commands that write. They check everything they can before taking the
//! writer lock, so a mistake (a bad outcome file, an outcome for another
//! withdrawal, a key that has no record) leaves the log's bytes untouched.
//! Each command is decided first with the library's `decide`, on a
//! read-only replay of the log (every decision re-derived, as opening
//! does), and the ledger, once opened for writing, decides it again.

mod receipt;

use std::fs::File;
use std::io::{Read, Write};

use payonce::{
    Command, Config, Decision, Event, EventKind, Ledger, LedgerError, SCHEMA_VERSION, State,
    StopAtDivergence, apply, decide,
};
use payonce_log::{FsStorage, Storage};
use payonce_model::{Actor, Note, RequestKey, WithdrawalRequest};
use tracing::info;

use self::receipt::{exit_json, print_exit};
use crate::cli::{CorrectArgs, ReleaseArgs, ResolveArgs};
use crate::env::{Env, Status};
use crate::error::{CliError, WriteStep};
use crate::escape::{Echo, EchoPath, Escaped};
use crate::explain::outcome_words;
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

pub(crate) fn note_argument(note: &str) -> Result<Note, CliError> {
    Note::new(note).map_err(|error| CliError::InvalidArgument {
        argument: "--note",
        value: note.to_owned(),
        error,
    })
}

/// The operator: `--by`, else `$USER`; refused if neither.
pub(crate) fn operator(by: Option<&str>, env: &Env) -> Result<Actor, CliError> {
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
    // Workers share a PostgreSQL ledger: an operator writes beside them.
    if log.is_postgres() {
        return Ok(());
    }
    match FsStorage::new(&log.dir).try_lock() {
        Ok(Some(lock)) => {
            drop(lock);
            Ok(())
        }
        Ok(None) => Err(CliError::Locked {
            dir: log.dir.clone(),
        }),
        Err(error) => Err(CliError::Io {
            doing: format!("taking the writer lock of {}", EchoPath(&log.dir)),
            error,
        }),
    }
}

/// Decides `command` as the ledger will once opened, without writing: the
/// log replayed read-only (each decision re-derived, as opening does), then
/// the `opened` event opening appends (a directory's: a PostgreSQL
/// ledger's operator appends none, and its workers' sends may run), then
/// `decide`.
fn preflight(
    log: &LogDir,
    command: &Command,
    accept_foreign_ids: bool,
    env: &Env,
    err: &mut dyn Write,
) -> Result<(State, Decision), CliError> {
    let mut state = State::new();
    let walked = log.replay(&mut state, &mut StopAtDivergence)?;
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
    if !log.is_postgres() {
        apply(&mut state, &opened);
    }
    if let Some(torn) = &walked.torn_tail {
        writeln!(
            err,
            "warning: {}. This command opens the ledger for writing, so it does that now, \
             keeping the bytes in the same directory",
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

fn open_ledger(
    log: &LogDir,
    given: &std::path::Path,
    accept_foreign_ids: bool,
    err: &mut dyn std::io::Write,
) -> Result<Ledger, CliError> {
    let config = Config {
        accept_foreign_ids,
        // An operator's command adds an event or two: the service's next
        // snapshot covers them.
        snapshots: payonce::SnapshotPolicy::never(),
        ..Config::default()
    };
    let opened = match crate::postgres_url::as_url(given) {
        // The ledger's own policy decides; an operator claims nothing.
        Some(url) => payonce_postgres::attach(url, config),
        None => Ledger::open_with(&log.dir, config),
    };
    let ledger =
        opened.map_err(|error| CliError::from_writer(&log.dir, WriteStep::Opening, error))?;
    crate::snapshots::warn_recovery(&ledger, err)?;
    Ok(ledger)
}

/// What an operator states with an outcome file: what happened to a key
/// in flight (`resolve`), or that the outcome recorded for a key is wrong
/// (`correct`). Both are checked the same way: the outcome must be settled
/// and of the key's withdrawal, and no send may be running for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stating {
    Resolve,
    Correct,
}

/// The arguments `resolve` and `correct` share.
struct OutcomeArgs<'a> {
    dir: &'a std::path::Path,
    key: &'a str,
    outcome: &'a std::path::Path,
    note: &'a str,
    by: Option<&'a str>,
    accept_foreign_ids: bool,
    json: bool,
}

/// Everything an outcome exit was given, validated.
struct Stated {
    key: RequestKey,
    outcome: WithdrawalRequest,
    note: Note,
    by: Actor,
}

impl Stated {
    fn command(&self, stating: Stating) -> Command {
        let (key, outcome) = (self.key.clone(), self.outcome.clone());
        let (note, by) = (self.note.clone(), self.by.clone());
        match stating {
            Stating::Resolve => Command::Resolve {
                key,
                outcome,
                note,
                by,
            },
            Stating::Correct => Command::Correct {
                key,
                outcome,
                note,
                by,
            },
        }
    }

    /// Writes the statement through the ledger, which decides it again.
    fn write(&self, stating: Stating, ledger: &Ledger) -> Result<(), LedgerError> {
        let (key, note, by) = (self.key.as_str(), self.note.as_str(), self.by.as_str());
        match stating {
            Stating::Resolve => ledger.resolve(key, self.outcome.clone(), note, by),
            Stating::Correct => ledger.correct(key, &self.outcome, note, by),
        }
    }
}

/// `payonce resolve DIR KEY --outcome FILE --note TEXT [--by NAME]`.
pub(crate) fn resolve(
    args: &ResolveArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let args = OutcomeArgs {
        dir: &args.dir,
        key: &args.key,
        outcome: &args.outcome,
        note: &args.note,
        by: args.by.as_deref(),
        accept_foreign_ids: args.accept_foreign_ids,
        json: args.json,
    };
    state_outcome(Stating::Resolve, &args, env, out, err)
}

/// `payonce correct DIR KEY --outcome FILE --note TEXT [--by NAME]`.
pub(crate) fn correct(
    args: &CorrectArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let args = OutcomeArgs {
        dir: &args.dir,
        key: &args.key,
        outcome: &args.outcome,
        note: &args.note,
        by: args.by.as_deref(),
        // A correction names a key that has an outcome, so its withdrawal
        // was accepted when it was claimed: the id policy is not asked.
        accept_foreign_ids: false,
        json: args.json,
    };
    state_outcome(Stating::Correct, &args, env, out, err)
}

/// Resolves or corrects: validates everything given, decides the command
/// read-only, and only then opens the ledger for writing.
fn state_outcome(
    stating: Stating,
    args: &OutcomeArgs<'_>,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let stated = Stated {
        key: key_argument(args.key)?,
        note: note_argument(args.note)?,
        by: operator(args.by, env)?,
        outcome: read_outcome(args.outcome)?,
    };
    let log = open_log(args.dir, env.progress_for(args.json))?;
    check_unlocked(&log)?;
    let (key, withdrawal) = (&stated.key, stated.outcome.id().to_string());
    let command = stated.command(stating);
    let (before, decision) = preflight(&log, &command, args.accept_foreign_ids, env, err)?;
    if decision == Decision::Unchanged {
        let receipt = exit_json(&log, &before, key, &withdrawal, "unchanged");
        let headline = format!(
            "request key {} already has this outcome; nothing was written",
            Echo(key)
        );
        print_exit(&receipt, &headline, args.json, out)?;
        return Ok(Status::Clean);
    }
    let ledger = open_ledger(&log, args.dir, args.accept_foreign_ids, err)?;
    stated
        .write(stating, &ledger)
        .map_err(|error| CliError::from_writer(&log.dir, WriteStep::Recording, error))?;
    let state = ledger
        .state()
        .map_err(|error| CliError::from_ledger(log.dir.clone(), error))?;
    drop(ledger);
    let (seq, by) = (state.last_seq(), &stated.by);
    let (action, headline) = stated_headline(stating, &before, &stated, seq);
    info!(key = %key, withdrawal = %withdrawal, by = %by, seq, action, "stated by an operator");
    print_exit(
        &exit_json(&log, &state, key, &withdrawal, action),
        &headline,
        args.json,
        out,
    )?;
    Ok(Status::Clean)
}

/// What an outcome exit did, as its receipt's action and headline; `before`
/// is the state before it, for the outcome a correction replaced.
fn stated_headline(
    stating: Stating,
    before: &State,
    stated: &Stated,
    seq: u64,
) -> (&'static str, String) {
    let (key, by) = (Echo(&stated.key), Echo(&stated.by));
    let withdrawal = Echo(stated.outcome.id());
    let now = outcome_words(&stated.outcome);
    match stating {
        Stating::Resolve => (
            "resolved",
            format!(
                "resolved request key {key} by {by}: withdrawal {withdrawal} is {now} (event {seq})"
            ),
        ),
        Stating::Correct => {
            let was = before
                .outcome(&stated.key)
                .map_or_else(|| "unknown".to_owned(), |old| outcome_words(&old));
            (
                "corrected",
                format!(
                    "corrected request key {key} by {by}: withdrawal {withdrawal} was {was} and is \
                     now {now} (event {seq})"
                ),
            )
        }
    }
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
    let ledger = open_ledger(&log, &args.dir, false, err)?;
    ledger
        .release(key.as_str(), note.as_str(), by.as_str())
        .map_err(|error| CliError::from_writer(&log.dir, WriteStep::Recording, error))?;
    let state = ledger
        .state()
        .map_err(|error| CliError::from_ledger(log.dir.clone(), error))?;
    drop(ledger);
    info!(key = %key, withdrawal = %withdrawal, by = %by, seq = state.last_seq(), "released by an operator");
    let receipt = exit_json(&log, &state, &key, &withdrawal, "released");
    let headline = format!(
        "released request key {} by {}: nothing was sent for withdrawal {} (event {})",
        Echo(&key),
        Echo(&by),
        Echo(&withdrawal),
        state.last_seq()
    );
    print_exit(&receipt, &headline, args.json, out)?;
    Ok(Status::Clean)
}
