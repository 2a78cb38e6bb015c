//! The crash test's harness: a child process submitting from several
//! threads is killed with SIGKILL at random moments, and after every kill
//! the ledger is reopened and checked against the rail's and the client's
//! own durable records of what was sent and acknowledged.
//!
//! - [`child`]: the process that is killed (run by `src/bin/crash_child.rs`),
//!   which says when its open is done and notes each thread's steps in a
//!   [`trail`].
//! - [`run`]: the driver, which times each kill from the spawn (to land
//!   during open) or from the readiness line (to land while submitting),
//!   and starts a fresh ledger every few rounds so the log stays short.
//! - [`check_after_kill`]: nothing sent twice, every send's claim and
//!   every acknowledged outcome in the reopened ledger, every decision
//!   re-derived by two clean replays.
//! - [`KillPoint`] and [`KillTable`]: where each kill landed.
//! - [`Backend`]: how a ledger is opened, reopened and verified; the only
//!   part another store would change.
//!
//! Test code: an I/O error of the harness itself is a failed run, so it
//! unwraps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backend;
mod check;
pub mod child;
mod point;
mod run;
pub mod trail;

pub use self::backend::Backend;
pub use self::check::{Seen, check_after_kill};
pub use self::point::{KillPoint, KillTable, classify};
pub use self::run::{CrashConfig, CrashFailure, CrashOutcome, run};
