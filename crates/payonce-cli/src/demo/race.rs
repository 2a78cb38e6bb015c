//! `demo --postgres`'s last incident: API workers, each a process of its
//! own (`payonce demo-worker`), send the same withdrawals at once under
//! keys of their own, and each withdrawal still leaves custody once.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use payonce::{Config, Ledger, LedgerError, ManualClock, SubmitError, Timestamp};
use payonce_model::WithdrawalRequest;

use super::story::{Story, failed};
use crate::cli::DemoWorkerArgs;
use crate::env::Status;
use crate::error::CliError;

/// The worker that tells the story's incidents.
const STORY_WORKER: &str = "demo-story";

/// Worker processes in the race, and the withdrawals they race for.
const RACERS: usize = 4;
const RACED: usize = 3;

/// The line a worker writes once its ledger is open.
const READY: &str = "ready";

/// Opens the story's ledger as the story's worker.
pub(crate) fn open_story(url: &str, config: Config) -> Result<Ledger, LedgerError> {
    payonce_postgres::open(url, STORY_WORKER, config)
}

/// What the race left: its withdrawals, and the rail's transfers of each.
#[derive(Debug, Default)]
pub(crate) struct Raced {
    pub(crate) withdrawals: Vec<WithdrawalRequest>,
    pub(crate) sends: BTreeMap<String, u32>,
}

/// One worker's answer for one withdrawal.
struct Answer {
    withdrawal: String,
    key: String,
    /// The key holding it, for a worker that lost.
    holder: Option<String>,
}

/// Incident 7: the race.
pub(crate) fn race(story: &mut Story<'_>, url: &str, exe: &Path) -> Result<Raced, CliError> {
    story.heading(&format!(
        "7. {RACERS} API workers, each a process of its own, send the same {RACED} withdrawals at once."
    ))?;
    let withdrawals = (0..RACED)
        .map(|n| {
            story.create(
                &format!("{}.00", 100 * (n + 1)),
                "USDC",
                &format!("0x9ace{n}"),
                "heidi",
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let json = withdrawals
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| failed(format!("writing a withdrawal as JSON: {error}")))?;
    let at = story.now().unix_nanos().to_string();
    let mut racers = (0..RACERS)
        .map(|n| spawn(exe, url, &[&format!("api-{n}"), &at], &json))
        .collect::<Result<Vec<_>, _>>()?;
    let lines = run_racers(&mut racers)?;
    let (sends, answers) = parse(&lines)?;
    for withdrawal in &withdrawals {
        let id = withdrawal.id().to_string();
        let winner = answers
            .iter()
            .find(|answer| answer.withdrawal == id && answer.holder.is_none())
            .ok_or_else(|| failed(format!("no worker won {id}")))?;
        let losers: Vec<&Answer> = answers
            .iter()
            .filter(|answer| answer.withdrawal == id && answer.holder.is_some())
            .collect();
        if losers.len() != RACERS - 1
            || losers
                .iter()
                .any(|l| l.holder.as_deref() != Some(&winner.key))
        {
            return Err(failed(format!(
                "the losers of {id} were not all told {}",
                winner.key
            )));
        }
        story.step(&format!(
            "{id}: {} transfer, by {}; the {} other workers were refused, each told {} holds it",
            sends.get(&id).copied().unwrap_or(0),
            winner.key,
            losers.len(),
            winner.key
        ))?;
    }
    Ok(Raced { withdrawals, sends })
}

/// Starts `exe demo-worker URL WORKER AT WITHDRAWAL...`, `worker` being
/// `[WORKER, AT]`.
fn spawn(
    exe: &Path,
    url: &str,
    worker: &[&str; 2],
    withdrawals: &[String],
) -> Result<Child, CliError> {
    let [name, _] = worker;
    Command::new(exe)
        .args(["demo-worker", url])
        .args(worker)
        .args(withdrawals)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|error| CliError::Io {
            doing: format!("starting worker {name}"),
            error,
        })
}

/// Waits until every racer is ready, starts them all at once, and returns
/// every line they wrote.
fn run_racers(racers: &mut [Child]) -> Result<Vec<String>, CliError> {
    let io = |error| CliError::Io {
        doing: "talking to a demo worker".to_owned(),
        error,
    };
    let mut outputs = Vec::new();
    for racer in racers.iter_mut() {
        let stdout = racer
            .stdout
            .take()
            .ok_or_else(|| failed("a worker has no output"))?;
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        stdout.read_line(&mut line).map_err(io)?;
        if line.trim_end() != READY {
            return Err(failed(format!("a worker did not start: {line:?}")));
        }
        outputs.push(stdout);
    }
    for racer in racers.iter_mut() {
        let stdin = racer
            .stdin
            .as_mut()
            .ok_or_else(|| failed("a worker has no input"))?;
        writeln!(stdin, "go").map_err(io)?;
    }
    let mut lines = Vec::new();
    for output in outputs {
        for line in output.lines() {
            lines.push(line.map_err(io)?);
        }
    }
    for racer in racers {
        let status = racer.wait().map_err(io)?;
        if !status.success() {
            return Err(failed(format!("a worker ended with {status}")));
        }
    }
    Ok(lines)
}

/// The transfers per withdrawal, and every answer.
fn parse(lines: &[String]) -> Result<(BTreeMap<String, u32>, Vec<Answer>), CliError> {
    let (mut sends, mut answers) = (BTreeMap::new(), Vec::new());
    for line in lines {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["sent", id, _] => *sends.entry((*id).to_owned()).or_default() += 1,
            ["won", id, key] => answers.push(Answer {
                withdrawal: (*id).to_owned(),
                key: (*key).to_owned(),
                holder: None,
            }),
            ["lost", id, key, holder] => answers.push(Answer {
                withdrawal: (*id).to_owned(),
                key: (*key).to_owned(),
                holder: Some((*holder).to_owned()),
            }),
            _ => return Err(failed(format!("a worker said {line:?}"))),
        }
    }
    Ok((sends, answers))
}

/// `payonce demo-worker URL WORKER AT WITHDRAWAL...`: opens the ledger as
/// WORKER, its clock stopped at AT, writes `ready`, waits for a line on its standard input, then
/// submits each withdrawal under a key of its own, writing `sent ID KEY`
/// when its send runs and `won ID KEY` or `lost ID KEY HOLDER` for each.
pub(crate) fn worker(args: &DemoWorkerArgs, out: &mut dyn Write) -> Result<Status, CliError> {
    let withdrawals = args
        .withdrawals
        .iter()
        .map(|json| serde_json::from_str::<WithdrawalRequest>(json))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| failed(format!("a withdrawal given as JSON: {error}")))?;
    let shown = payonce_postgres::redacted(&args.url);
    let config = Config {
        clock: Arc::new(ManualClock::new(Timestamp::from_unix_nanos(
            args.at_unix_nanos,
        ))),
        ..Config::default()
    };
    let ledger = payonce_postgres::open(&args.url, &args.worker, config)
        .map_err(|error| CliError::from_ledger(&shown, error))?;
    let say = |out: &mut dyn Write, line: String| {
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(CliError::output)
    };
    say(out, READY.to_owned())?;
    let mut go = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut go)
        .map_err(CliError::output)?;
    for request in &withdrawals {
        let key = format!("{}-{}", args.worker, request.id());
        let mut sent = false;
        let result = ledger.submit(&key, request, |request| {
            sent = true;
            Ok(request.sent(format!("0x{key}"))?)
        });
        if sent {
            say(out, format!("sent {} {key}", request.id()))?;
        }
        let line = match result {
            Ok(_) => format!("won {} {key}", request.id()),
            Err(SubmitError::Ledger(error))
                if error.refusal().and_then(|r| r.holder()).is_some() =>
            {
                let holder = error
                    .refusal()
                    .and_then(|r| r.holder())
                    .map(ToString::to_string);
                format!("lost {} {key} {}", request.id(), holder.unwrap_or_default())
            }
            Err(error) => return Err(failed(format!("{key}: {error}"))),
        };
        say(out, line)?;
    }
    Ok(Status::Clean)
}
