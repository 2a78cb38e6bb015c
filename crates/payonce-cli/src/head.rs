//! `payonce head`: the log's head, for an auditor to keep where the
//! ledger's disk cannot reach, and to check later with `verify
//! --expect-head`.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;

use serde::Serialize;

use crate::cli::HeadArgs;
use crate::env::{Env, Status};
use crate::error::CliError;
use crate::escape::EchoPath;
use crate::json::to_json;
use crate::logdir::open_log;
use crate::output::{say, warn_torn_tail};
use crate::shared;

/// `head --json`.
#[derive(Debug, Serialize)]
struct HeadJson {
    dir: String,
    events: u64,
    seq: u64,
    digest: String,
    /// `SEQ:DIGEST`.
    head: String,
    torn_tail: bool,
}

/// `payonce head DIR`: walks the whole log, verifying every checksum and the
/// digest chain, and prints its head as `SEQ:DIGEST` on the last line.
pub(crate) fn head(
    args: &HeadArgs,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    if args.pinned.is_some() {
        writeln!(
            err,
            "warning: --pinned is deprecated; it is now --expect-head, the same check"
        )
        .map_err(CliError::output)?;
    }
    if crate::postgres_url::as_url(&args.dir).is_some() {
        return shared::head(args, out);
    }
    let mut log = open_log(&args.dir, env.progress_for(args.json))?;
    if let Some(expected) = args.expected_head() {
        log.require(expected)?;
    }
    let walked = log.walk(1, |_, _| Ok(ControlFlow::Continue(())))?;
    let torn = warn_torn_tail(&log, walked.torn_tail.as_ref(), err)?;
    let head = walked.head;
    if args.json {
        let report = HeadJson {
            dir: log.dir.display().to_string(),
            events: walked.events,
            seq: head.seq,
            digest: head.digest.to_string(),
            head: head.to_string(),
            torn_tail: walked.torn_tail.is_some(),
        };
        say!(out, "{}", to_json(&report))?;
    } else {
        say!(
            out,
            "head of {} after {} events:",
            EchoPath(Path::new(&log.dir)),
            walked.events
        )?;
        say!(out, "{head}")?;
    }
    Ok(Status::problem_if(torn))
}
