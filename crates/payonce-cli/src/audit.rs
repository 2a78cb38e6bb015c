//! The read-only audit commands that replay the log: `verify`, `state`,
//! `inflight` and `export`. (`history` has its own module: it can use the
//! audit index.)

use std::collections::BTreeMap;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;

use payonce::{
    Divergence, Head, LedgerError, ReplayHook, Replaying, State, Timestamp, TimestampError,
    Verification,
};
use payonce_log::TornTail;
use serde::Serialize;

use crate::cli::{ExportArgs, InflightArgs, StateArgs, VerifyArgs};
use crate::duration::format_age;
use crate::env::{Env, Status};
use crate::error::CliError;
use crate::escape::{EchoPath, Escaped};
use crate::index;
use crate::json::{
    EventJson, InFlightKeyJson, KeyRecordJson, TornTailJson, held_totals_json, key_records, to_json,
};
use crate::logdir::{LogDir, Walked, open_log};
use crate::output::{count, held_words, say, warn_torn_tail};
use crate::replay::{Applied, Until};
use crate::snapshots::{SnapshotAudit, SnapshotJson, print_snapshot};
use crate::table::Table;

/// Most divergences listed one by one; the rest are counted. A log that the
/// code disagrees with everywhere would otherwise print itself whole.
pub const DIVERGENCES_LISTED_MAX: usize = 100;

/// What `verify` found.
#[derive(Debug, Serialize)]
struct VerifyJson {
    dir: String,
    clean: bool,
    events: u64,
    segments: usize,
    keys: usize,
    in_flight: usize,
    held: BTreeMap<String, String>,
    refusals: u64,
    divergence_count: usize,
    divergences: Vec<DivergenceJson>,
    torn_tail: Option<TornTailJson>,
    /// The log's head, `SEQ:DIGEST`.
    head: String,
    /// The head `--expect-head` asked for, which the log holds.
    expected_head: Option<String>,
    /// With `--snapshots`: every snapshot kept, audited.
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshots: Option<Vec<SnapshotJson>>,
}

#[derive(Debug, Serialize)]
struct DivergenceJson {
    seq: u64,
    recorded_event: &'static str,
    message: String,
}

impl DivergenceJson {
    fn new(divergence: &Divergence) -> Self {
        DivergenceJson {
            seq: divergence.seq,
            recorded_event: divergence.recorded.name(),
            message: divergence.to_string(),
        }
    }
}

/// `payonce verify DIR`: every checksum and chain link, and every recorded
/// decision re-derived from the state before it, as `payonce::verify` does,
/// with a progress bar.
pub(crate) fn verify(
    args: &VerifyArgs,
    env: &Env,
    out: &mut dyn Write,
) -> Result<Status, CliError> {
    let mut log = open_log(&args.dir, env.progress_for(args.json))?;
    if let Some(head) = args.expect_head {
        log.require(head)?;
    }
    let audit = match args.snapshots {
        true => Some(SnapshotAudit::of(&log)?),
        false => None,
    };
    let (mut found, torn_tail) = rederive_all(&log, audit)?;
    found.expected_head = args.expect_head.map(|head| head.to_string());
    let status = Status::problem_if(!found.clean);
    if args.json {
        say!(out, "{}", to_json(&found))?;
        return Ok(status);
    }
    print_verify(&found, &log, torn_tail.as_ref(), out)?;
    Ok(status)
}

/// `verify`'s hook on the replay: the divergences, and the snapshots'
/// audit at each one's seq.
struct Verifying {
    divergences: Vec<DivergenceJson>,
    divergence_count: usize,
    audit: Option<SnapshotAudit>,
}

impl ReplayHook for Verifying {
    fn before(
        &mut self,
        _: &State,
        _: &Replaying<'_>,
        divergence: Option<Divergence>,
    ) -> Result<ControlFlow<()>, LedgerError> {
        if let Some(divergence) = divergence {
            self.divergence_count += 1;
            if self.divergences.len() < DIVERGENCES_LISTED_MAX {
                self.divergences.push(DivergenceJson::new(&divergence));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    fn after(&mut self, state: &State, _: &Replaying<'_>) {
        if let Some(audit) = &mut self.audit {
            audit.pass(state);
        }
    }
}

/// Replays the whole log, re-deriving every recorded decision from the
/// state before it; returns what it found and the torn tail, if any.
fn rederive_all(
    log: &LogDir,
    audit: Option<SnapshotAudit>,
) -> Result<(VerifyJson, Option<TornTail>), CliError> {
    // Auditing snapshots needs the state at each one's seq: the walk below.
    if audit.is_none()
        && let Some(verified) = log.verify_postgres()
    {
        return Ok((postgres_verification(log, verified?), None));
    }
    let segments = log.segment_files()?.len();
    let mut state = State::new();
    let mut verifying = Verifying {
        divergences: Vec::new(),
        divergence_count: 0,
        audit,
    };
    let walked = log.replay(&mut state, &mut verifying)?;
    let Verifying {
        divergences,
        divergence_count,
        audit,
    } = verifying;
    let (snapshots, snapshots_clean) = match audit {
        Some(audit) => {
            let (verdicts, clean) = audit.finish();
            (Some(verdicts), clean)
        }
        None => (None, true),
    };
    let found = VerifyJson {
        dir: log.dir.display().to_string(),
        clean: divergence_count == 0 && walked.torn_tail.is_none() && snapshots_clean,
        events: walked.events,
        segments,
        keys: state.key_count(),
        in_flight: state.in_flight().len(),
        held: held_totals_json(&state),
        refusals: state.refusal_count(),
        divergence_count,
        divergences,
        torn_tail: walked.torn_tail.as_ref().map(|t| TornTailJson::new(log, t)),
        head: walked.head.to_string(),
        expected_head: None,
        snapshots,
    };
    Ok((found, walked.torn_tail))
}

/// What `verify` found of a PostgreSQL ledger, replayed by the library
/// from the log's read view (`payonce_postgres::ReadView::scan`).
fn postgres_verification(log: &LogDir, (found, head): (Verification, Head)) -> VerifyJson {
    VerifyJson {
        dir: log.dir.display().to_string(),
        clean: found.is_clean(),
        events: found.events,
        segments: 0,
        keys: found.keys,
        in_flight: found.in_flight,
        held: held_totals_json(&found.state),
        refusals: found.refusals,
        divergence_count: found.divergences.len(),
        divergences: found
            .divergences
            .iter()
            .take(DIVERGENCES_LISTED_MAX)
            .map(DivergenceJson::new)
            .collect(),
        torn_tail: None,
        head: head.to_string(),
        expected_head: None,
        snapshots: None,
    }
}

/// What `verify` found as text: the summary, then clean or every problem.
fn print_verify(
    found: &VerifyJson,
    log: &LogDir,
    torn_tail: Option<&TornTail>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    say!(out, "verified {}", EchoPath(Path::new(&found.dir)))?;
    say!(out, "  events     {}", found.events)?;
    say!(out, "  segments   {}", found.segments)?;
    say!(
        out,
        "  keys       {} ({} in flight)",
        found.keys,
        found.in_flight
    )?;
    say!(out, "  held       {}", Escaped(&held_words(&found.held)))?;
    say!(out, "  refusals   {}", found.refusals)?;
    say!(out, "  head       {}", found.head)?;
    if let Some(expected) = &found.expected_head {
        say!(out, "  expected   {expected}: held, unchanged")?;
    }
    if let Some(snapshots) = &found.snapshots {
        say!(out, "  snapshots  {}", snapshots.len())?;
        for snapshot in snapshots {
            print_snapshot(snapshot, out)?;
        }
    }
    if found.clean {
        let snapshots = match found.snapshots {
            Some(_) => ", and every snapshot's state is the replay's at its seq",
            None => "",
        };
        return say!(
            out,
            "clean: every checksum and chain link verifies, and every recorded decision is the \
             one the code makes again{snapshots}"
        );
    }
    say!(out, "problems:")?;
    for divergence in &found.divergences {
        say!(
            out,
            "  divergence at seq {}: {}",
            divergence.seq,
            Escaped(&divergence.message)
        )?;
    }
    if found.divergence_count > found.divergences.len() {
        say!(
            out,
            "  ... and {} more divergences",
            found.divergence_count - found.divergences.len()
        )?;
    }
    if let Some(torn) = torn_tail {
        say!(out, "  {}", Escaped(&log.describe_torn_tail(torn)))?;
    }
    Ok(())
}

/// Where `state --at` stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    /// After this sequence number (0: before any event).
    Seq(u64),
    /// After every event up to the first one stamped later than this.
    Time(Timestamp),
    /// The end of the log.
    End,
}

/// Reads a point given as `argument` (`--at`, or a report's `--from` and
/// `--to`): digits are a sequence number, anything else an RFC 3339 time.
/// A well-formed time a ledger cannot record (before 1970, after the last
/// nanosecond a `Timestamp` holds) is told apart from a malformed one.
pub(crate) fn parse_point(argument: &'static str, text: Option<&str>) -> Result<Point, CliError> {
    let Some(text) = text else {
        return Ok(Point::End);
    };
    // The whole text: the error echoes it bounded, with its length.
    let refuse = || CliError::BadPoint {
        argument,
        text: text.to_owned(),
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map(Point::Seq).map_err(|_| refuse());
    }
    text.parse().map(Point::Time).map_err(|error| match error {
        TimestampError::OutOfRange { .. } => CliError::PointOutOfRange {
            argument,
            text: text.to_owned(),
        },
        _ => refuse(),
    })
}

/// What `state` prints as JSON.
#[derive(Debug, Serialize)]
struct StateJson {
    dir: String,
    /// The last event applied; 0 before any.
    seq: u64,
    at: Option<String>,
    event: Option<&'static str>,
    /// For `--at TIME`: the time asked about.
    asked_time: Option<String>,
    records: Vec<KeyRecordJson>,
    claims: Vec<ClaimJson>,
    in_flight: Vec<InFlightKeyJson>,
    holds: Vec<HoldJson>,
    held_totals: BTreeMap<String, String>,
    refusals: u64,
    torn_tail: Option<TornTailJson>,
}

#[derive(Debug, Serialize)]
struct ClaimJson {
    withdrawal: String,
    key: String,
}

#[derive(Debug, Serialize)]
struct HoldJson {
    withdrawal: String,
    amount: String,
    currency: String,
}

/// `payonce state DIR [--at SEQ|TIME]`: replays up to the point and shows
/// what the ledger believed then.
pub(crate) fn state(
    args: &StateArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let point = parse_point("--at", args.at.as_deref())?;
    let log = open_log(&args.dir, env.progress_for(args.json))?;
    // With an index, a time is placed without reading: the replay then
    // stops at the first event stamped later, at the latest at `bound`.
    let bound = match point {
        Point::Time(time) if !args.no_index && !log.is_postgres() => {
            index::time_bound(&log, time, err)?
        }
        _ => None,
    };
    let (state, last, walked) = replay_to(&log, point, bound)?;
    let torn = warn_torn_tail(&log, walked.torn_tail.as_ref(), err)?;
    // Ages are as of the point, not as of now.
    let now = last.map_or(env.now, |applied| applied.at);
    let shown = StateJson {
        dir: log.dir.display().to_string(),
        seq: last.map_or(0, |applied| applied.seq),
        at: last.map(|applied| applied.at.to_string()),
        event: last.map(|applied| applied.event),
        asked_time: match point {
            Point::Time(time) => Some(time.to_string()),
            _ => None,
        },
        records: key_records(&state),
        claims: claims_json(&state),
        in_flight: state
            .in_flight()
            .iter()
            .map(|entry| InFlightKeyJson::new(entry, now))
            .collect(),
        holds: holds_json(&state),
        held_totals: held_totals_json(&state),
        refusals: state.refusal_count(),
        torn_tail: walked
            .torn_tail
            .as_ref()
            .map(|t| TornTailJson::new(&log, t)),
    };
    let status = Status::problem_if(torn);
    if args.json {
        say!(out, "{}", to_json(&shown))?;
        return Ok(status);
    }
    print_state(&shown, out)?;
    Ok(status)
}

/// Replays the log up to `point` (for a time, at the latest up to the
/// index's `bound`), without re-deriving decisions. A sequence number past
/// the end is refused.
fn replay_to(
    log: &LogDir,
    point: Point,
    bound: Option<u64>,
) -> Result<(State, Option<Applied>, Walked), CliError> {
    let mut state = State::new();
    let mut to = Until::new(|event: &Replaying<'_>| {
        let (seq, at) = (event.seq(), event.at());
        match point {
            Point::Seq(point) => seq > point,
            Point::Time(time) => at > time || bound.is_some_and(|bound| seq >= bound),
            Point::End => false,
        }
    });
    let walked = log.replay(&mut state, &mut to)?;
    let last = to.last;
    if let Point::Seq(seq) = point
        && seq > walked.last_seq
    {
        return Err(CliError::PointPastEnd {
            argument: "--at",
            seq,
            last_seq: walked.last_seq,
        });
    }
    Ok((state, last, walked))
}

/// The sequence number at which `key` claimed what it holds, so claims and
/// holds are listed in the order the keys' records are; `u64::MAX` for no
/// key.
fn claimed_seq(state: &State, key: Option<&str>) -> u64 {
    key.and_then(|key| state.record(key))
        .map_or(u64::MAX, |record| record.claimed_seq())
}

/// Every claim in `state`, in the order the keys claimed them.
fn claims_json(state: &State) -> Vec<ClaimJson> {
    let mut claims: Vec<ClaimJson> = state
        .claims()
        .map(|(withdrawal, key)| ClaimJson {
            withdrawal: withdrawal.to_string(),
            key: key.to_string(),
        })
        .collect();
    claims.sort_by_key(|claim| {
        (
            claimed_seq(state, Some(&claim.key)),
            claim.withdrawal.clone(),
        )
    });
    claims
}

/// Every hold in `state`, in the order the keys holding them claimed them.
fn holds_json(state: &State) -> Vec<HoldJson> {
    let mut holds: Vec<HoldJson> = state
        .holds()
        .map(|(withdrawal, hold)| HoldJson {
            withdrawal: withdrawal.to_string(),
            amount: hold.amount.to_string(),
            currency: hold.currency.to_string(),
        })
        .collect();
    holds.sort_by_key(|hold| {
        let holder = state.claimed_by(&hold.withdrawal);
        (
            claimed_seq(state, holder.as_deref()),
            hold.withdrawal.clone(),
        )
    });
    holds
}

/// What `state` prints as text: where it stands, then records, claims, keys
/// in flight and holds, each counted and tabled.
fn print_state(shown: &StateJson, out: &mut dyn Write) -> Result<(), CliError> {
    match (&shown.at, shown.event) {
        (Some(at), Some(event)) => say!(
            out,
            "state of {} after seq {} ({}, {})",
            EchoPath(Path::new(&shown.dir)),
            shown.seq,
            at,
            event
        )?,
        _ => say!(
            out,
            "state of {} before any event",
            EchoPath(Path::new(&shown.dir))
        )?,
    }
    if let Some(asked) = &shown.asked_time {
        say!(
            out,
            "every event stamped at or before {asked}; the next event, if any, is stamped later"
        )?;
    }
    say!(out)?;
    say!(
        out,
        "records: {}, {} in flight",
        count(shown.records.len(), "key"),
        shown.in_flight.len()
    )?;
    if !shown.records.is_empty() {
        key_records_table(&shown.records).write(out, 2)?;
    }
    say!(out)?;
    say!(
        out,
        "claims: {} held by a key",
        count(shown.claims.len(), "withdrawal")
    )?;
    if !shown.claims.is_empty() {
        claims_table(&shown.claims).write(out, 2)?;
    }
    say!(out)?;
    say!(
        out,
        "in flight: {} with an unknown outcome (ages as of seq {})",
        count(shown.in_flight.len(), "key"),
        shown.seq
    )?;
    if !shown.in_flight.is_empty() {
        in_flight_table(&shown.in_flight).write(out, 2)?;
    }
    say!(out)?;
    say!(
        out,
        "holds: {}; held in total: {}",
        count(shown.holds.len(), "withdrawal"),
        Escaped(&held_words(&shown.held_totals))
    )?;
    if !shown.holds.is_empty() {
        holds_table(&shown.holds).write(out, 2)?;
    }
    say!(out)?;
    say!(out, "refusals so far: {}", shown.refusals)
}

/// The table of request keys' records: key, withdrawal, amount, claim,
/// outcome, and the outcome's reference or reason or the last send error.
fn key_records_table(records: &[KeyRecordJson]) -> Table {
    let mut table = Table::new(&[
        "key",
        "withdrawal",
        "amount",
        "claimed (seq)",
        "outcome",
        "reference / reason / last error",
    ]);
    for record in records {
        let detail = [&record.reference, &record.reason, &record.last_error]
            .into_iter()
            .flatten()
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        table.row(vec![
            record.key.clone(),
            record.withdrawal.clone(),
            format!("{} {}", record.amount, record.currency),
            format!("{} ({})", record.claimed_at, record.claimed_seq),
            record.outcome.clone(),
            if detail.is_empty() {
                "-".to_owned()
            } else {
                detail
            },
        ]);
    }
    table
}

/// The table of claims: each withdrawal and the key that holds it.
fn claims_table(claims: &[ClaimJson]) -> Table {
    let mut table = Table::new(&["withdrawal", "claimed by key"]);
    for claim in claims {
        table.row(vec![claim.withdrawal.clone(), claim.key.clone()]);
    }
    table
}

/// The table of holds: each withdrawal and the funds held for it.
fn holds_table(holds: &[HoldJson]) -> Table {
    let mut table = Table::new(&["withdrawal", "held"]);
    for hold in holds {
        table.row(vec![
            hold.withdrawal.clone(),
            format!("{} {}", hold.amount, hold.currency),
        ]);
    }
    table
}

/// `inflight`'s shown.
#[derive(Debug, Serialize)]
struct InflightJson {
    dir: String,
    now: String,
    older_than_seconds: Option<u64>,
    keys: Vec<InFlightKeyJson>,
    torn_tail: Option<TornTailJson>,
}

/// `payonce inflight DIR [--older-than D]`: the operator's queue.
pub(crate) fn inflight(
    args: &InflightArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let log = open_log(&args.dir, env.progress_for(args.json))?;
    let mut state = State::new();
    // Never ends before the end.
    let walked = log.replay(&mut state, &mut Until::new(|_: &Replaying<'_>| false))?;
    let torn = warn_torn_tail(&log, walked.torn_tail.as_ref(), err)?;
    let keys: Vec<InFlightKeyJson> = state
        .in_flight()
        .iter()
        .filter(|entry| {
            args.older_than
                .is_none_or(|older_than| env.now.since(entry.claimed_at) > older_than)
        })
        .map(|entry| InFlightKeyJson::new(entry, env.now))
        .collect();
    let overdue = args.older_than.is_some() && !keys.is_empty();
    let report = InflightJson {
        dir: log.dir.display().to_string(),
        now: env.now.to_string(),
        older_than_seconds: args.older_than.map(|d| d.as_secs()),
        keys,
        torn_tail: walked
            .torn_tail
            .as_ref()
            .map(|t| TornTailJson::new(&log, t)),
    };
    // A stuck key is what a monitor pages for; a torn tail alone is not
    // one, so it says so only when no key is overdue (and is reported on
    // stderr and in `torn_tail` either way).
    let status = if overdue {
        Status::KeysOverdue
    } else {
        Status::problem_if(torn)
    };
    if args.json {
        say!(out, "{}", to_json(&report))?;
        return Ok(status);
    }
    let threshold = args.older_than.map_or_else(String::new, |d| {
        format!(" claimed more than {} ago", format_age(d))
    });
    say!(
        out,
        "{} in flight{threshold} in {} (now {})",
        count(report.keys.len(), "key"),
        EchoPath(Path::new(&report.dir)),
        report.now
    )?;
    if !report.keys.is_empty() {
        in_flight_table(&report.keys).write(out, 2)?;
        say!(
            out,
            "Each key's outcome is unknown. Look at the rail, then `payonce resolve` (it was \
             sent) or `payonce release` (nothing was sent); see docs/operations.md."
        )?;
    }
    Ok(status)
}

/// `payonce export DIR [--from SEQ] [--to SEQ]`: one JSON object per line.
pub(crate) fn export(
    args: &ExportArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let from = args.from.unwrap_or(1);
    let to = args.to.unwrap_or(u64::MAX);
    if from > to {
        return Err(CliError::Usage {
            message: format!("--from {from} is after --to {to}: nothing to export"),
        });
    }
    // Export's output is JSON, so it never draws a progress bar.
    let log = open_log(&args.dir, env.progress_for(true))?;
    let mut exported = 0;
    let walked = log.walk(from, |event, _| {
        if event.seq < from {
            return Ok(ControlFlow::Continue(()));
        }
        if event.seq > to {
            return Ok(ControlFlow::Break(()));
        }
        let report = EventJson::new(event, event.kind.withdrawal(), None);
        say!(out, "{}", to_json(&report))?;
        exported += 1;
        Ok(ControlFlow::Continue(()))
    })?;
    // As `state --at` past the end: an error naming the last event, not an
    // empty export that looks like a log with nothing in that range.
    if let Some(from) = args.from
        && exported == 0
    {
        return Err(CliError::PointPastEnd {
            argument: "--from",
            seq: from,
            last_seq: last_seq(&log, &walked)?,
        });
    }
    let torn = warn_torn_tail(&log, walked.torn_tail.as_ref(), err)?;
    Ok(Status::problem_if(torn))
}

/// The log's last sequence number, from a walk that may have started in
/// its newest segment and found nothing there (then from a walk of the
/// whole log, which only this error path pays for).
fn last_seq(log: &LogDir, walked: &Walked) -> Result<u64, CliError> {
    if walked.events > 0 {
        return Ok(walked.last_seq);
    }
    Ok(log.walk(1, |_, _| Ok(ControlFlow::Continue(())))?.last_seq)
}

/// The in-flight table: key, withdrawal, amount, claim, age, hold, send, last error.
fn in_flight_table(entries: &[InFlightKeyJson]) -> Table {
    let mut table = Table::new(&[
        "key",
        "withdrawal",
        "amount",
        "claimed (seq)",
        "age",
        "held",
        "send may run",
        "last error",
    ]);
    for entry in entries {
        table.row(vec![
            entry.key.clone(),
            entry.withdrawal.clone(),
            format!("{} {}", entry.amount, entry.currency),
            format!("{} ({})", entry.claimed_at, entry.claimed_seq),
            format_age(std::time::Duration::from_secs(entry.age_seconds)),
            yes_no(entry.held).to_owned(),
            yes_no(entry.send_may_be_running).to_owned(),
            entry.last_error.clone().unwrap_or_else(|| "-".to_owned()),
        ]);
    }
    table
}

fn yes_no(value: bool) -> &'static str {
    if value { "yes" } else { "no" }
}
