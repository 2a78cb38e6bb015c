//! The `payonce` command line: how an auditor reconstructs an incident from
//! a ledger's log, and how an operator closes keys left in flight.
//!
//! - Audit commands, read-only: `verify`, `history`, `state --at`,
//!   `inflight`, `export`, and `report`, an incident report as one
//!   self-contained HTML page (at most [`REPORT_EVENTS_MAX`] events). They
//!   never take the writer lock and never change the log, so they are safe
//!   beside a running service and on a copy of a production directory.
//!   Untrusted text is printed escaped ([`escape()`]); in the report, the
//!   template engine escapes it for HTML too.
//! - Operator exits, which write: `resolve` (what happened to a key in
//!   flight), `correct` (the outcome recorded for a key is wrong) and
//!   `release` (nothing was sent). They check everything they can read-only
//!   first, then take the writer lock (refused while a service holds it).
//! - The audit index (`payonce index`): a sled database beside the log that
//!   lets `history` answer without a scan. Derived data, never trusted over
//!   the log: every event it points to is read back and verified.
//! - The demo ([`run_demo`]): the incidents that pay a user twice, on a
//!   real ledger, each withdrawal sent once.
//! - `payonce serve` ([`ServeArgs`]): its flags, and the ledger it opens
//!   (or with `--init` creates); the HTTP service itself is the
//!   `payonce_server` crate.
//! - A PostgreSQL ledger (a `postgres://` or `postgresql://` URL wherever a
//!   directory is taken): audit commands read one read view (a read-only
//!   transaction);
//!   `migrate` applies the schema, `end-session` ends a dead worker's
//!   session.
//!
//! The binary is a thin shell over [`run`]: it parses a [`Cli`], gathers an
//! [`Env`], and exits with [`Status::code`] or [`CliError::exit_code`]. It
//! holds no truth of its own and does not talk to a rail.
//!
//! | code | constant | meaning |
//! | --- | --- | --- |
//! | 0 | [`EXIT_OK`] | the command worked and found nothing wrong |
//! | 1 | [`EXIT_PROBLEM`] | it found a problem in the log: a torn tail or a divergence |
//! | 2 | [`EXIT_USAGE`] | a usage or input error (a refusal and a held lock included); nothing was changed |
//! | 3 | [`EXIT_OVERDUE`] | `inflight --older-than`: keys in flight for longer than that (wins over 1) |
//! | 4 | [`EXIT_DAMAGED`] | the log is damaged where it cannot be a torn tail; nothing was changed |
//! | 5 | [`EXIT_FAILED`] | reading or writing failed (a full disk, a permission) or a bug |
//!
//! With `--json`, a failure is also one JSON object on stdout
//! ([`CliError::to_json_line`]). Values a user gave are echoed back
//! escaped and bounded ([`ECHO_LEN_MAX`], [`ECHO_PATH_LEN_MAX`]).
//!
//! ```
//! use clap::Parser;
//! use payonce_cli::{Cli, Env, Status, run};
//!
//! let dir = tempfile::tempdir()?;
//! drop(payonce::Ledger::init(dir.path())?); // a new ledger with one event: opened
//! let cli = Cli::try_parse_from(["payonce", "verify", "--json"].into_iter().map(Into::into)
//!     .chain([dir.path().as_os_str().to_owned()]))?;
//! let (mut out, mut err) = (Vec::new(), Vec::new());
//! let status = run(cli, &Env::quiet(payonce::Timestamp::default()), &mut out, &mut err)?;
//! assert_eq!(status, Status::Clean);
//! let report: serde_json::Value = serde_json::from_slice(&out)?;
//! assert_eq!(report["events"], 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod attribution;
mod audit;
mod bytes;
mod cli;
mod demo;
mod duration;
mod env;
mod error;
mod explain;
mod head;
mod history;
mod index;
mod json;
mod logdir;
mod operator;
mod output;
mod postgres_url;
mod replay;
mod report;
mod run;
mod serve;
mod shared;
mod snapshots;
mod subject;
mod table;

// Escaping untrusted text is the model's, shared with the HTTP service.
use payonce_model::escape;

pub use crate::audit::DIVERGENCES_LISTED_MAX;
pub use crate::cli::{
    Cli, CliCommand, CorrectArgs, DemoArgs, DemoWorkerArgs, EndSessionArgs, ExportArgs, HeadArgs,
    HistoryArgs, IndexArgs, InflightArgs, MigrateArgs, ReleaseArgs, ReportArgs, ResolveArgs,
    StateArgs, VerifyArgs,
};
pub use crate::demo::{DemoOutcome, run_demo, run_demo_postgres};
pub use crate::duration::{DURATION_TEXT_LEN_MAX, format_age, parse_duration};
pub use crate::env::{Env, Status};
pub use crate::error::{
    CliError, EXIT_DAMAGED, EXIT_FAILED, EXIT_OK, EXIT_OVERDUE, EXIT_PROBLEM, EXIT_USAGE, WriteStep,
};
pub use crate::escape::{
    ECHO_LEN_MAX, ECHO_PATH_LEN_MAX, Echo, EchoPath, Escaped, bounded, bounded_within, escape,
};
pub use crate::index::{BUCKETS, CHUNK_BYTES_MAX, INDEX_DIR, INDEX_FORMAT, PENDING_EVENTS_MAX};
pub use crate::operator::OUTCOME_FILE_LEN_MAX;
pub use crate::report::{REPORT_BYTES_MAX, REPORT_EVENTS_MAX, TIMELINE_LANES_MAX};
pub use crate::run::run;
pub use crate::serve::ServeArgs;
pub use crate::subject::HISTORY_EVENTS_MAX;
