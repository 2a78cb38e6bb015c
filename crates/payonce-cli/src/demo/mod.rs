//! `payonce demo`: the incidents that pay a user twice, played against a simulated
//! rail on a real, durable ledger, showing that each withdrawal leaves
//! custody once.

pub(crate) mod race;
mod story;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use payonce::{
    Claim, Clock, Config, Ledger, LedgerError, ManualClock, SubmitError, SystemClock, Timestamp,
    Verification,
};
use payonce_model::WithdrawalRequest;

use self::story::{Behaviour, Story, failed};
use crate::cli::{DemoArgs, ReportArgs};
use crate::env::{Env, Status};
use crate::error::CliError;
use crate::escape::EchoPath;
use crate::explain::outcome_words;
use crate::output::count;

/// Attempts at finding an unused name for the default demo directory.
const DIRECTORY_ATTEMPTS_MAX: u32 = 100;

/// What the demo did, for the caller to check.
#[derive(Debug)]
pub struct DemoOutcome {
    /// The ledger's directory, left behind for auditing.
    pub dir: PathBuf,
    /// Transfers the simulated rail carried out, per withdrawal id.
    pub sends: BTreeMap<String, u32>,
    /// Calls to the simulated rail, per withdrawal id: a clean refusal is a
    /// call without a transfer.
    pub calls: BTreeMap<String, u32>,
    /// The withdrawal of each incident, in the order told: its id carries
    /// the epoch the ledger drew at random when it was created.
    pub withdrawals: Vec<String>,
    /// Every refusal the ledger gave during the story, as text.
    pub refusals: Vec<String>,
    /// Whether every answer was the same after closing and reopening.
    pub same_after_reopen: bool,
    /// Events replayed by the reopening.
    pub replayed_events: u64,
    /// `payonce::verify` on the directory afterwards.
    pub verify: Verification,
}

/// `250 USDC`.
fn money(request: &WithdrawalRequest) -> String {
    format!("{} {}", request.amount(), request.currency())
}

/// Picks a new directory under the system's temporary directory.
fn default_directory() -> Result<PathBuf, CliError> {
    let base = std::env::temp_dir();
    let stamp = SystemClock.now().unix_nanos();
    for attempt in 0..DIRECTORY_ATTEMPTS_MAX {
        let dir = base.join(format!(
            "payonce-demo-{}-{stamp}-{attempt}",
            std::process::id()
        ));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => {
                return Err(CliError::Io {
                    doing: format!("creating {}", EchoPath(&dir)),
                    error,
                });
            }
        }
    }
    Err(CliError::Io {
        doing: format!("finding an unused directory name in {}", EchoPath(&base)),
        error: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
    })
}

/// A path as a shell word, quoted when it needs to be.
fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:".contains(c))
    {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// `payonce demo [DIR]`.
pub(crate) fn demo_command(
    args: &DemoArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let report = match &args.postgres {
        Some(url) => {
            let exe = std::env::current_exe().map_err(|error| CliError::Io {
                doing: "finding the payonce binary to run its workers".to_owned(),
                error,
            })?;
            run_demo_postgres(url, &exe, out)?
        }
        None => {
            let dir = match &args.dir {
                Some(dir) => dir.clone(),
                None => default_directory()?,
            };
            run_demo(&dir, out)?
        }
    };
    write_report(args, &report, env, out, err)?;
    let each_once = report.sends.values().all(|&sends| sends == 1);
    Ok(Status::problem_if(
        !each_once || !report.same_after_reopen || !report.verify.is_clean(),
    ))
}

/// Where the demo writes the report of its ledger: in its directory, or
/// for a PostgreSQL ledger under the system's temporary directory.
fn report_path(args: &DemoArgs, report: &DemoOutcome) -> PathBuf {
    match &args.postgres {
        Some(_) => {
            std::env::temp_dir().join(format!("payonce-demo-report-{}.html", std::process::id()))
        }
        None => report.dir.join("payonce-report.html"),
    }
}

/// The demo's last step: `payonce report` of the ledger it played on,
/// and where the page is.
fn write_report(
    args: &DemoArgs,
    report: &DemoOutcome,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CliError> {
    let path = report_path(args, report);
    let ledger = match &args.postgres {
        Some(url) => PathBuf::from(url),
        None => report.dir.clone(),
    };
    let report_args = ReportArgs {
        dir: ledger,
        from: None,
        to: None,
        keys: Vec::new(),
        withdrawals: Vec::new(),
        output: path.clone(),
        no_index: false,
        json: false,
    };
    // The report's own line is not the story's: the path is said below.
    crate::report::report(&report_args, env, &mut std::io::sink(), err)?;
    writeln!(out).map_err(CliError::output)?;
    writeln!(
        out,
        "The incident report of this ledger, one HTML page to open in a browser, print or share:"
    )
    .map_err(CliError::output)?;
    writeln!(out, "  {}", shell_word(&path)).map_err(CliError::output)
}

/// Plays the demo in `dir` (new or empty), printing the story to `out`.
pub fn run_demo(dir: &Path, out: &mut dyn Write) -> Result<DemoOutcome, CliError> {
    if dir.exists() && !dir.is_dir() {
        return Err(CliError::NotADirectory {
            path: dir.to_owned(),
        });
    }
    if dir.exists() {
        let in_use = std::fs::read_dir(dir)
            .map(|mut entries| entries.next().is_some())
            .unwrap_or(true);
        if in_use {
            return Err(CliError::DemoDirectoryInUse {
                dir: dir.to_owned(),
            });
        }
    }
    let (clock, config) = story_clock();
    // The demo is the one command that creates a ledger: its directory is
    // new or empty, checked above, and `init` checks again.
    let ledger =
        Ledger::init_with(dir, config.clone()).map_err(|e| CliError::from_ledger(dir, e))?;
    let mut story = Story::new(dir.to_owned(), None, config, clock, ledger, out);
    play(&mut story, None)
}

/// The story's clock, and a ledger configuration that reads it. The story
/// spans about an hour that ends now, so ages and `--at` times read
/// naturally; whole seconds keep the times short.
fn story_clock() -> (Arc<ManualClock>, Config) {
    let start = SystemClock.now().minus(Duration::from_secs(3600));
    let start = Timestamp::from_unix_nanos(start.unix_nanos() / 1_000_000_000 * 1_000_000_000);
    let clock = Arc::new(ManualClock::new(start));
    let config = Config {
        clock: clock.clone(),
        ..Config::default()
    };
    (clock, config)
}

/// Plays the demo on the PostgreSQL ledger at `url`, whose database has no
/// payonce ledger yet (the schema is applied if missing): the story's
/// incidents told by one worker, then worker processes (`exe demo-worker`,
/// the `payonce` binary) racing on the same withdrawals.
pub fn run_demo_postgres(
    url: &str,
    exe: &Path,
    out: &mut dyn Write,
) -> Result<DemoOutcome, CliError> {
    let shown = crate::postgres_url::checked(url)?;
    let store = |error: payonce::StoreError| CliError::from_ledger(&shown, error.into());
    payonce_postgres::migrate(url).map_err(store)?;
    let (clock, config) = story_clock();
    drop(
        payonce_postgres::init(url, config.clone())
            .map_err(|e| CliError::from_ledger(&shown, e))?,
    );
    let ledger =
        race::open_story(url, config.clone()).map_err(|e| CliError::from_ledger(&shown, e))?;
    let mut story = Story::new(shown, Some(url.to_owned()), config, clock, ledger, out);
    play(&mut story, Some(exe))
}

/// The whole demo: the incidents one after another, then the checks that
/// each withdrawal left custody once.
fn play(story: &mut Story<'_>, race: Option<&Path>) -> Result<DemoOutcome, CliError> {
    introduce(story)?;
    let w1 = retry_without_answer(story)?;
    let w2 = two_devices_one_withdrawal(story)?;
    let w3 = redrive_under_fresh_key(story)?;
    let w4 = replayed_webhook(story)?;
    let (w5, in_flight_at) = timeout_after_sending(story)?;
    let w6 = clean_rail_refusal(story)?;
    let raced = match (race, story.url.clone()) {
        (Some(exe), Some(url)) => race::race(story, &url, exe)?,
        _ => race::Raced::default(),
    };
    let mut withdrawals = vec![&w1, &w2, &w3, &w4, &w5, &w6];
    withdrawals.extend(raced.withdrawals.iter());
    story.say("")?;
    let (events, same_after_reopen) = reopen_and_compare(story, &withdrawals)?;
    let (mut sends, mut calls) = story.rail.counts();
    for (id, count) in raced.sends {
        *sends.entry(id.clone()).or_default() += count;
        *calls.entry(id).or_default() += count;
    }
    tell_transfers(story, &withdrawals, &sends, &calls)?;
    let verify = tell_verify(story)?;
    tell_audit_commands(story, &w5, in_flight_at)?;
    Ok(DemoOutcome {
        dir: story.dir.clone(),
        sends,
        calls,
        withdrawals: withdrawals.iter().map(|w| w.id().to_string()).collect(),
        refusals: std::mem::take(&mut story.refusals),
        same_after_reopen,
        replayed_events: events,
        verify,
    })
}

fn introduce(story: &mut Story<'_>) -> Result<(), CliError> {
    story.say(
        "payonce demo: the incidents that pay a user twice, against a simulated rail that counts its sends,",
    )?;
    match story.url {
        None => {
            story.say("on a real, durable ledger (every claim is on disk before its send).")?;
            story.say(&format!("ledger directory: {}", story.dir.display()))?;
        }
        Some(_) => {
            story.say("on a PostgreSQL ledger (every claim is committed before its send),")?;
            story.say("told by one worker; then worker processes race on the same withdrawals.")?;
            story.say(&format!("ledger: {}", story.dir.display()))?;
        }
    }
    story.say("story clock: starts an hour ago and moves on with each step")
}

/// Incident 1: a retry under the same key replays the first outcome.
fn retry_without_answer(story: &mut Story<'_>) -> Result<WithdrawalRequest, CliError> {
    story.heading("1. A client retries a request whose answer it did not get.")?;
    let w1 = story.create("250.00", "USDC", "0x4f3c9a1e", "alice")?;
    let first = story.submit_sent("alice-web-1", &w1)?;
    story.step(&format!(
        "alice-web-1 submits {} ({}): the rail sends it: {}",
        w1.id(),
        money(&w1),
        outcome_words(&first)
    ))?;
    let again = story.submit_sent("alice-web-1", &w1)?;
    if again != first {
        return Err(failed("the retry did not replay the first outcome"));
    }
    story.step(&format!(
        "alice-web-1 retries: replayed {}; the rail was not called",
        outcome_words(&again)
    ))?;
    Ok(w1)
}

/// Incident 2: while one key's send runs, and after it, a second key for
/// the same withdrawal is refused.
fn two_devices_one_withdrawal(story: &mut Story<'_>) -> Result<WithdrawalRequest, CliError> {
    story.heading("2. A phone and a laptop submit the same withdrawal under two keys.")?;
    let w2 = story.create("1200.00", "EUR", "DE89370400440532013000", "bob")?;
    story.tick(3);
    let ledger = story.ledger()?.clone();
    let ticket = match ledger
        .claim("bob-phone-7f3a", w2.clone())
        .map_err(|e| story.ledger_error(e))?
    {
        Claim::Granted(ticket) => ticket,
        Claim::Replayed(_) => return Err(failed("the phone's first claim replayed")),
    };
    story.step(&format!(
        "bob-phone-7f3a claims {} ({}); its send starts",
        w2.id(),
        money(&w2)
    ))?;
    let refused = story.submit_refused("bob-laptop-91c2", &w2)?;
    story.step(&format!(
        "bob-laptop-91c2 submits {} while the phone's send runs: {refused}",
        w2.id()
    ))?;
    let result = story.rail.send(ticket.request(), Behaviour::Answer);
    let outcome = ledger
        .complete(ticket, result)
        .map_err(|e| failed(format!("the phone's send: {e}")))?;
    story.step(&format!(
        "the phone's send returns: {}",
        outcome_words(&outcome)
    ))?;
    let refused = story.submit_refused("bob-laptop-91c2", &w2)?;
    story.step(&format!("bob-laptop-91c2 tries again: {refused}"))?;
    Ok(w2)
}

/// Incident 3: a re-drive under a fresh key is refused, because the first
/// key still holds the withdrawal.
fn redrive_under_fresh_key(story: &mut Story<'_>) -> Result<WithdrawalRequest, CliError> {
    story.heading("3. An operator re-drives a queue item under a fresh key.")?;
    let w3 = story.create("75.50", "USDC", "0x91be04d2", "carol")?;
    let sent3 = story.submit_sent("queue-item-311", &w3)?;
    story.step(&format!(
        "queue-item-311 sends {}: {}, but the queue never records the answer",
        w3.id(),
        outcome_words(&sent3)
    ))?;
    let refused = story.submit_refused("redrive-ops-311", &w3)?;
    story.step(&format!(
        "the operator's re-drive as redrive-ops-311: {refused}"
    ))?;
    Ok(w3)
}

/// Incident 4: a replayed webhook's resolve under a fresh key is refused.
fn replayed_webhook(story: &mut Story<'_>) -> Result<WithdrawalRequest, CliError> {
    story.heading(
        "4. A provider's webhook is replayed and handled as a new instruction under a fresh key.",
    )?;
    let w4 = story.create(
        "0.5",
        "BTC",
        "bc1qxy2kgdygjrsqtzq2n0yrf2493p83kkfjhx0wlh",
        "dave",
    )?;
    let sent4 = story.submit_sent("dave-api-5521", &w4)?;
    story.step(&format!(
        "dave-api-5521 sends {}: {}",
        w4.id(),
        outcome_words(&sent4)
    ))?;
    let confirmed = sent4
        .confirm()
        .map_err(|e| failed(format!("confirming: {e}")))?;
    story.tick(3);
    let webhook = story.ledger()?.resolve(
        "webhook-evt-8812",
        confirmed,
        "provider callback: confirmed",
        "webhook-handler",
    );
    let refused = match webhook {
        Err(LedgerError::Refused(refusal)) => {
            story.refusals.push(refusal.to_string());
            refusal.to_string()
        }
        Err(error) => {
            return Err(failed(format!(
                "the webhook's resolve failed otherwise: {error}"
            )));
        }
        Ok(()) => {
            return Err(failed(
                "the webhook resolved a withdrawal another key holds",
            ));
        }
    };
    story.step(&format!(
        "the replayed webhook resolves under webhook-evt-8812: refused: {refused}"
    ))?;
    Ok(w4)
}

/// Incident 5: a send whose answer never came stays in flight until an
/// operator finds it on the rail and resolves it. Returns the withdrawal
/// and a time while it was in flight.
fn timeout_after_sending(
    story: &mut Story<'_>,
) -> Result<(WithdrawalRequest, Timestamp), CliError> {
    story.heading(
        "5. The rail times out after sending; the key stays in flight until an operator looks.",
    )?;
    let w5 = story.create("3000.00", "USDT", "0x7d2e55aa", "erin")?;
    match story.submit("erin-app-77", &w5, Behaviour::TimeOutAfterSending)? {
        Err(SubmitError::Send(error)) => story.step(&format!(
            "erin-app-77 submits {} ({}): {error}; the outcome is unknown, so the key stays claimed and the funds held",
            w5.id(),
            money(&w5)
        ))?,
        other => return Err(failed(format!("the timeout was expected, got {other:?}"))),
    }
    let in_flight_at = story.clock.now();
    let refused = story.submit_refused("erin-app-77", &w5)?;
    story.step(&format!(
        "erin-app-77 retries: {refused}; the rail was not called"
    ))?;
    let refused = story.submit_refused("erin-app-78", &w5)?;
    story.step(&format!("erin-app-78 tries a fresh key: {refused}"))?;
    story.tick(40 * 60);
    let queue = story.ledger()?.in_flight();
    story.step(&format!(
        "40 minutes later the operator's queue (payonce inflight) holds {}: {}",
        count(queue.len(), "key"),
        queue
            .iter()
            .map(|k| format!("{} for {}", k.key, k.withdrawal))
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    let found = story
        .rail
        .lookup(&w5)
        .ok_or_else(|| failed("the timed-out transfer is not on the rail"))?;
    let outcome5 = Story::sent(&w5, found.clone())?;
    story.tick(60);
    story
        .ledger()?
        .resolve(
            "erin-app-77",
            outcome5,
            &format!("found {found} on the rail's explorer after the timeout"),
            "ops-frank",
        )
        .map_err(|e| story.ledger_error(e))?;
    story.step(&format!(
        "ops-frank finds {found} on the rail and resolves erin-app-77 as sent"
    ))?;
    let replayed = story.submit_sent("erin-app-77", &w5)?;
    story.step(&format!(
        "erin-app-77 retries: replayed {}",
        outcome_words(&replayed)
    ))?;
    Ok((w5, in_flight_at))
}

/// Incident 6: a clean refusal by the rail releases the hold; once an
/// operator releases the key, a retry sends.
fn clean_rail_refusal(story: &mut Story<'_>) -> Result<WithdrawalRequest, CliError> {
    story.heading(
        "6. The rail refuses cleanly: the hold is released, the key released, and a retry sends.",
    )?;
    let w6 = story.create("500.00", "USDC", "0x2b8f61c0", "grace")?;
    match story.submit("grace-web-3", &w6, Behaviour::Refuse)? {
        Err(error @ SubmitError::Rejected { .. }) => story.step(&format!(
            "grace-web-3 submits {} ({}): {error}",
            w6.id(),
            money(&w6)
        ))?,
        other => {
            return Err(failed(format!(
                "the rail's refusal was expected, got {other:?}"
            )));
        }
    }
    let held = story
        .ledger()?
        .held(w6.id())
        .map_err(|e| story.ledger_error(e))?;
    story.step(&format!(
        "funds held for {}: {}; grace-web-3 still claims it with an unknown outcome",
        w6.id(),
        held.map_or_else(
            || "none".to_owned(),
            |h| format!("{} {}", h.amount, h.currency)
        )
    ))?;
    let refused = story.submit_refused("grace-web-3", &w6)?;
    story.step(&format!("grace-web-3 retries at once: {refused}"))?;
    if story.rail.lookup(&w6).is_some() {
        return Err(failed("the refused send left a transfer on the rail"));
    }
    story.tick(5 * 60);
    story
        .ledger()?
        .release(
            "grace-web-3",
            "rail refused before broadcast; nothing on chain for this withdrawal",
            "ops-frank",
        )
        .map_err(|e| story.ledger_error(e))?;
    story.step("ops-frank checks the rail, finds nothing sent, and releases grace-web-3")?;
    let sent6 = story.submit_sent("grace-web-3", &w6)?;
    story.step(&format!(
        "grace-web-3 retries: the rail sends it: {}",
        outcome_words(&sent6)
    ))?;
    Ok(w6)
}

/// Closes the ledger, reopens it (replaying and re-deriving every event)
/// and compares every answer a caller can ask for. Returns the events
/// replayed and whether every answer was the same; the ledger is closed
/// afterwards.
fn reopen_and_compare(
    story: &mut Story<'_>,
    withdrawals: &[&WithdrawalRequest],
) -> Result<(u64, bool), CliError> {
    let keys = [
        "alice-web-1",
        "bob-phone-7f3a",
        "bob-laptop-91c2",
        "queue-item-311",
        "redrive-ops-311",
        "dave-api-5521",
        "webhook-evt-8812",
        "erin-app-77",
        "erin-app-78",
        "grace-web-3",
    ];
    // The story's worker catches up on what the racing workers decided.
    story
        .ledger()?
        .refresh()
        .map_err(|e| story.ledger_error(e))?;
    let before = story.answers(&keys, withdrawals)?;
    let events = story.ledger()?.last_seq();
    story.ledger = None;
    // Reopening right away is safe: the log releases its lock when dropped,
    // even while a child process being spawned holds a copy of its file.
    let reopened = match &story.url {
        Some(url) => race::open_story(url, story.config.clone()),
        None => Ledger::open_with(&story.dir, story.config.clone()),
    }
    .map_err(|e| story.ledger_error(e))?;
    story.ledger = Some(reopened);
    let after = story.answers(&keys, withdrawals)?;
    let same_after_reopen = before == after;
    story.say(&format!(
        "Closed and reopened the ledger: {events} events replayed, every decision re-derived; every answer is {}.",
        if same_after_reopen { "the same" } else { "NOT the same" }
    ))?;
    story.ledger = None;
    Ok((events, same_after_reopen))
}

/// The rail's own count of transfers per withdrawal, and whether each left
/// custody exactly once.
fn tell_transfers(
    story: &mut Story<'_>,
    withdrawals: &[&WithdrawalRequest],
    sends: &BTreeMap<String, u32>,
    calls: &BTreeMap<String, u32>,
) -> Result<(), CliError> {
    story.say("")?;
    story.say("The rail's count of transfers per withdrawal:")?;
    for withdrawal in withdrawals {
        let id = withdrawal.id().to_string();
        let count = &sends.get(&id).copied().unwrap_or(0);
        let calls_here = calls.get(&id).copied().unwrap_or(0);
        let note = if calls_here > *count {
            format!(" (called {calls_here} times: the rail refused the first)")
        } else {
            String::new()
        };
        story.say(&format!(
            "  {id}: {count} transfer{}{note}",
            if *count == 1 { "" } else { "s" }
        ))?;
    }
    let each_once = sends.values().all(|&count| count == 1);
    story.say(if each_once {
        "Each withdrawal left custody exactly once."
    } else {
        "A WITHDRAWAL WAS SENT TWICE OR NOT AT ALL."
    })
}

/// `payonce::verify` on what the story left behind, in one line.
fn tell_verify(story: &mut Story<'_>) -> Result<Verification, CliError> {
    let verify = match &story.url {
        Some(url) => payonce_postgres::verify(url).map(|(report, _)| report),
        None => payonce::verify(&story.dir),
    }
    .map_err(|e| story.ledger_error(e))?;
    let held = if verify.held.is_empty() {
        "none".to_owned()
    } else {
        verify
            .held
            .iter()
            .map(|(c, t)| format!("{t} {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let place = match story.url {
        None => format!(" in {} segment(s)", verify.segments),
        Some(_) => String::new(),
    };
    story.say("")?;
    story.say(&format!(
        "verify: {} events{place}, {} keys, {} in flight, held: {held}, {} refusals: {}",
        verify.events,
        verify.keys,
        verify.in_flight,
        verify.refusals,
        if verify.is_clean() {
            "clean"
        } else {
            "PROBLEMS FOUND"
        }
    ))?;
    Ok(verify)
}

/// The audit commands to run on the directory next, pointing at the timeout
/// (`timed_out`) and at a time while it was in flight.
fn tell_audit_commands(
    story: &mut Story<'_>,
    timed_out: &WithdrawalRequest,
    in_flight_at: Timestamp,
) -> Result<(), CliError> {
    let d = shell_word(&story.dir);
    story.say("")?;
    story.say("Audit what it left behind (with cargo, write `cargo run -p payonce-cli --release --` for `payonce`):")?;
    story.say(&format!("  payonce verify {d}"))?;
    story.say(&format!(
        "  payonce history {d} --withdrawal {}    # the timeout an operator resolved",
        timed_out.id()
    ))?;
    story.say(&format!(
        "  payonce history {d} --key bob-phone-7f3a    # the key that held off the laptop"
    ))?;
    story.say(&format!(
        "  payonce state {d} --at {in_flight_at}    # while erin-app-77 was in flight"
    ))?;
    story.say(&format!(
        "  payonce report {d} --withdrawal {} -o timeout.html    # the timeout's incident report",
        timed_out.id()
    ))?;
    story.say(&format!("  payonce inflight {d}"))?;
    story.say(&format!("  payonce export {d}"))?;
    if story.url.is_some() {
        return story.say(&format!(
            "  payonce head {d}    # keep it outside the database"
        ));
    }
    story.say(&format!(
        "  payonce index {d}    # then history answers from the index"
    ))
}
