//! The `payonce` command line: how an auditor reconstructs an incident from
//! a ledger's log, and how an operator closes keys left in flight.
//!
//! - Audit commands, read-only: `verify`, `history`, `state --at`,
//!   `inflight`, `export`. They never take the writer lock and never change
//!   the log, so they are safe beside a running service and on a copy of a
//!   production directory. Untrusted text is printed escaped ([`escape`]).
//! - Operator exits, which write: `resolve` (what happened to a key in
//!   flight), `correct` (the outcome recorded for a key is wrong) and
//!   `release` (nothing was sent). They check everything they can read-only
//!   first, then take the writer lock (refused while a service holds it).
//! - The audit index (`payonce index`): a sled database beside the log that
//!   lets `history` answer without a scan. Derived data, never trusted over
//!   the log: every event it points to is read back and verified.
//! - The demo ([`run_demo`]): the incidents that pay a user twice, on a
//!   real ledger, each withdrawal sent once.
//!
//! The binary is a thin shell over [`run`]: it parses a [`Cli`], gathers an
//! [`Env`], and exits with [`Status::code`] or [`CliError::exit_code`]:
//! 0 all good, 1 the command worked and found a problem, 2 a usage or input
//! error. It holds no truth of its own and does not talk to a rail.
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
mod cli;
mod demo;
mod duration;
mod env;
mod error;
mod escape;
mod explain;
mod history;
mod index;
mod json;
mod logdir;
mod operator;
mod output;
mod run;
mod subject;
mod table;

pub use crate::audit::DIVERGENCES_LISTED_MAX;
pub use crate::cli::{
    Cli, CliCommand, CorrectArgs, DemoArgs, ExportArgs, HistoryArgs, IndexArgs, InflightArgs,
    ReleaseArgs, ResolveArgs, StateArgs, VerifyArgs,
};
pub use crate::demo::{DemoReport, run_demo};
pub use crate::duration::{DURATION_TEXT_LEN_MAX, format_age, parse_duration};
pub use crate::env::{Env, Status};
pub use crate::error::{CliError, EXIT_OK, EXIT_PROBLEM, EXIT_USAGE};
pub use crate::escape::{Escaped, escape};
pub use crate::index::{BUCKETS, CHUNK_BYTES_MAX, INDEX_DIR, INDEX_FORMAT, PENDING_EVENTS_MAX};
pub use crate::operator::OUTCOME_FILE_LEN_MAX;
pub use crate::run::run;
pub use crate::subject::HISTORY_EVENTS_MAX;
