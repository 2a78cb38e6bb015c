//! `payonce report`: an incident report, one self-contained HTML page of
//! a window of the log, for the people who sign an incident off.
//!
//! Built on one replay of the whole log, the one `verify` makes (every
//! checksum and chain link verified as read, every recorded decision
//! re-derived from the state before it), with each decision in the words
//! `history` uses. The page is written only once it is whole; bad
//! arguments, a window outside the log, an unknown key or withdrawal and a
//! window over [`REPORT_EVENTS_MAX`] write nothing. Damage does not stop
//! the page: it shows what came before the damage and says where it is,
//! and the command then exits as `verify` would (4).
//!
//! Its other limits: a page larger than `REPORT_BYTES_MAX` is refused
//! whole, and the timeline draws at most `TIMELINE_LANES_MAX` lanes (the
//! events of the withdrawals past them are in the table).

mod axis;
mod holds;
mod page;
mod replay;
mod summary;
mod timeline;
mod window;

use std::fs;
use std::io::Write;
use std::path::Path;

use payonce::Timestamp;
use tracing::info;

use crate::cli::ReportArgs;
use crate::env::{Env, Status};
use crate::error::CliError;
use crate::escape::{EchoPath, Escaped};
use crate::index;
use crate::logdir::{LogDir, open_log};
use crate::output::say;

use axis::Axis;
use page::{Header, Page, Verdict, head_words};
use replay::Replayed;
use summary::Summary;
use timeline::Timeline;
use window::{Ask, Bound};

/// Most events one report shows. The page for this many stays under
/// [`REPORT_BYTES_MAX`] with events of the usual size (2.1 MB) and opens
/// in headless Chromium in under 2 s, its start included
/// (docs/performance.md); past it, a narrower window or a key is the tool.
pub const REPORT_EVENTS_MAX: usize = 4_000;

/// The largest page a report writes: a window whose events' texts (notes,
/// errors, keys at their longest) would make a larger page is refused.
pub const REPORT_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Most lanes the timeline draws, so it stays legible and fits an A4
/// landscape page; the events of the withdrawals past them are in the
/// table.
pub const TIMELINE_LANES_MAX: usize = 40;

/// Refuses, before the replay, a `--key` or `--withdrawal` the audit index
/// lists no event about: the sled index beside a directory, or a
/// PostgreSQL ledger's index in its database. Without a usable index the
/// replay finds it out.
fn check_subjects_in_index(log: &LogDir, ask: &Ask, err: &mut dyn Write) -> Result<(), CliError> {
    if ask.subjects.is_empty() {
        return Ok(());
    }
    if log.is_postgres() {
        for subject in &ask.subjects {
            if let Some(listed) = log.events_about_postgres(subject, 1)
                && listed?.is_empty()
            {
                return Err(crate::subject::unknown(subject));
            }
        }
        return Ok(());
    }
    let Some(index) = index::open_for_query(log, err)? else {
        return Ok(());
    };
    for subject in &ask.subjects {
        if let Ok(false) = index.mentions(subject) {
            return Err(crate::subject::unknown(subject));
        }
    }
    Ok(())
}

/// Refuses what the replay shows the page cannot be: a window outside the
/// log, a subject no event is about, more events than the page holds.
/// Damage suspends the first two: the log past it is unknown.
fn check(found: &Replayed, ask: &Ask) -> Result<(), CliError> {
    if found.damage.is_none() {
        if let (Some(first), Some(last)) = (found.log_first, found.log_last) {
            ask.check_within(first, last)?;
        }
        if let Some(i) = found.mentioned.iter().position(|mentioned| !mentioned) {
            return Err(crate::subject::unknown(&ask.subjects[i]));
        }
    }
    if found.shown_count > REPORT_EVENTS_MAX {
        return Err(CliError::ReportTooLarge {
            limit_name: "REPORT_EVENTS_MAX",
            limit: REPORT_EVENTS_MAX,
            found: Some(found.shown_count),
            unit: "events",
        });
    }
    Ok(())
}

/// The window's time axis: the bounds asked as times, else the first and
/// last events shown (those of the window when none is shown).
fn axis(found: &Replayed, ask: &Ask) -> (Axis, Timestamp) {
    let shown = |i: Option<&replay::Shown>| i.map(|shown| shown.event.at);
    let first = shown(found.shown.first())
        .or(found.window_first.map(|(_, at)| at))
        .or(found.log_last.map(|(_, at)| at));
    let last = shown(found.shown.last())
        .or(found.window_last.map(|(_, at)| at))
        .or(first);
    let t0 = match ask.from {
        Bound::Time(time) => time,
        _ => first.unwrap_or_default(),
    };
    let t1 = match ask.to {
        Bound::Time(time) => time,
        _ => last.unwrap_or(t0),
    }
    .max(t0);
    let times: Vec<Timestamp> = found.shown.iter().map(|shown| shown.event.at).collect();
    (Axis::new(t0, t1, &times), t1)
}

/// The verification result, in words.
fn verdicts(found: &Replayed) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    match &found.damage {
        Some(damage) => verdicts.push(Verdict {
            ok: false,
            words: format!(
                "Damage: {}. The log cannot be read past it: this report shows nothing from seq \
                 {} on.",
                damage.error, damage.seq
            ),
        }),
        None => verdicts.push(Verdict {
            ok: true,
            words: format!(
                "Every checksum and chain link verified, from the first event to the end of the \
                 log (head {}).",
                found.log_head
            ),
        }),
    }
    if let Some(torn) = &found.torn_tail {
        verdicts.push(Verdict {
            ok: false,
            words: format!(
                "The log ends in a torn tail: {}.",
                crate::escape::escape(torn)
            ),
        });
    }
    verdicts.push(match found.divergence_count {
        0 => Verdict {
            ok: true,
            words: "Every recorded decision re-derived: the code makes each one again.".to_owned(),
        },
        count => Verdict {
            ok: false,
            words: format!(
                "{count} recorded decision(s) the code would not make again (divergences), \
                 first at seq {}; each is marked at its event.",
                found.divergences.first().map_or(0, |(seq, _)| *seq)
            ),
        },
    });
    verdicts
}

/// The header of `found`'s page.
fn header(log: &LogDir, ask: &Ask, found: &Replayed, env: &Env) -> Header {
    let window_found = match (found.window_first, found.window_last) {
        (Some((first, first_at)), Some((last, last_at))) => format!(
            "seq {first} ({first_at}) to seq {last} ({last_at}); {} shown",
            crate::output::count(found.shown_count, "event")
        ),
        _ => "no event".to_owned(),
    };
    let following = match ask.subjects.is_empty() {
        true => "every key and withdrawal".to_owned(),
        false => crate::escape::escape(
            &ask.subjects
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        )
        .into_owned(),
    };
    let verdicts = verdicts(found);
    Header {
        ledger: crate::escape::escape(&log.dir.display().to_string()).into_owned(),
        window_asked: crate::escape::escape(&ask.words()).into_owned(),
        window_found,
        following,
        made_at: env.now.to_string(),
        version: env!("CARGO_PKG_VERSION"),
        start_head: head_words(found.start_head, "none: the window starts with the log"),
        end_head: head_words(
            found.end_head,
            "none: no batch that ends after the window verified",
        ),
        clean: verdicts.iter().all(|verdict| verdict.ok),
        verdicts,
    }
}

/// The page of `found` as HTML.
fn render(log: &LogDir, ask: &Ask, found: &Replayed, env: &Env) -> Result<String, CliError> {
    let (axis, end) = axis(found, ask);
    let timeline = Timeline::of(&found.shown, &axis, end);
    let rows = page::rows(found, &timeline);
    let page = Page::new(
        header(log, ask, found, env),
        Summary::of(found, ask),
        timeline,
        holds::charts(found, &axis, end),
        rows,
    );
    let html = page.html(REPORT_BYTES_MAX).map_err(|error| CliError::Io {
        doing: "rendering the report".to_owned(),
        error: std::io::Error::other(error.to_string()),
    })?;
    html.ok_or(CliError::ReportTooLarge {
        limit_name: "REPORT_BYTES_MAX",
        limit: REPORT_BYTES_MAX,
        found: None,
        unit: "bytes",
    })
}

/// Writes `html` to `path` whole or not at all: a file beside it, then
/// renamed over it.
fn write_page(path: &Path, html: &str) -> Result<(), CliError> {
    let io = |error| CliError::Io {
        doing: format!("writing the report {}", EchoPath(path)),
        error,
    };
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(".partial-{}", std::process::id()));
    fs::write(&partial, html).map_err(io)?;
    fs::rename(&partial, path).map_err(|error| {
        let _ = fs::remove_file(&partial);
        io(error)
    })
}

/// What `report --json` prints once the page is written.
#[derive(Debug, serde::Serialize)]
struct WrittenJson {
    path: String,
    dir: String,
    events: usize,
    bytes: usize,
    /// No damage, torn tail or divergence.
    clean: bool,
}

/// `payonce report DIR|URL [--from T] [--to T] [--key K]... [--withdrawal W]... [-o FILE]`.
pub(crate) fn report(
    args: &ReportArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let ask = Ask::parse(args)?;
    let log = open_log(&args.dir, env.progress_for(false))?;
    if !args.no_index {
        check_subjects_in_index(&log, &ask, err)?;
    }
    let found = replay::replay(&log, &ask)?;
    check(&found, &ask)?;
    let html = render(&log, &ask, &found, env)?;
    write_page(&args.output, &html)?;
    info!(
        events = found.shown_count,
        bytes = html.len(),
        damaged = found.damage.is_some(),
        "report written"
    );
    if args.json {
        let written = WrittenJson {
            path: args.output.display().to_string(),
            dir: log.dir.display().to_string(),
            events: found.shown_count,
            bytes: html.len(),
            clean: found.damage.is_none()
                && found.torn_tail.is_none()
                && found.divergence_count == 0,
        };
        say!(out, "{}", crate::json::to_json(&written))?;
    } else {
        let about: Vec<String> = ask.subjects.iter().map(ToString::to_string).collect();
        let about = match about.is_empty() {
            true => String::new(),
            false => format!(" about {}", about.join(", ")),
        };
        say!(
            out,
            "report written to {}: {}{} in {}, {}",
            EchoPath(&args.output),
            crate::output::count(found.shown_count, "event"),
            Escaped(&about),
            EchoPath(&log.dir),
            Escaped(&ask.words())
        )?;
    }
    if let Some(torn) = &found.torn_tail {
        writeln!(err, "warning: {}", Escaped(torn)).map_err(CliError::output)?;
    }
    if let Some(damage) = found.damage {
        return Err(damage.error);
    }
    Ok(Status::problem_if(
        found.torn_tail.is_some() || found.divergence_count > 0,
    ))
}
