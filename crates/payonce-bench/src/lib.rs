//! The comparison benchmark: runs the same claim protocol on payonce,
//! SQLite and sled, side by side in one run, and reports payonce's ratios.
//!
//! - A [`Workload`] is generated from a seed ([`WorkloadSpec`]): new
//!   submissions, retries under the same key, second keys for claimed
//!   withdrawals (and, for agreement checks, reused keys and failing sends),
//!   answered by a zero-latency fake [`Rail`].
//! - Each store implements [`Store`] (and a per-thread [`Session`]): claim
//!   the request key and the withdrawal atomically and durably before the
//!   send; record the outcome durably after it; the same refusals. Every
//!   store answers each submission with an [`Answer`]; for the same workload
//!   all stores must answer alike, which [`RunFigures::digest`] checks.
//! - [`timed_run`], [`build`] and [`open_and_probe`] measure throughput and
//!   latency, the state after many submissions, and reopening it;
//!   [`fdatasync_rate`] measures the disk's limit beside them.
//! - [`Comparison::table`] prints the figures and ratios.
//!
//! It is not part of the library and measures only what the protocol
//! needs: no holds in SQLite or sled (payonce keeps them in memory), and no
//! audit events outside payonce.
//!
//! ```
//! use payonce_bench::{Mix, StoreKind, WorkloadSpec, disagreements, timed_run};
//!
//! let spec = WorkloadSpec { seed: 7, threads: 2, submissions_per_thread: 20, mix: Mix::EVERY_ANSWER };
//! let mut reports = Vec::new();
//! for kind in StoreKind::EVERY {
//!     let dir = tempfile::tempdir()?;
//!     reports.push(timed_run(kind, dir.path(), spec)?);
//! }
//! assert_eq!(disagreements(&reports), None, "every store answers alike");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod counting;
mod error;
mod open;
mod payonce_store;
pub mod pg;
mod run;
mod sled_store;
mod sqlite_store;
mod store;
mod table;
mod workload;

pub use crate::counting::CountingStorage;
pub use crate::error::BenchError;
pub use crate::open::open_store;
pub use crate::run::{
    BuildFigures, DIR_ENTRIES_MAX, OpenFigures, RunFigures, Tally, build, combine_rounds,
    disagreements, disk_bytes, fdatasync_rate, load_average, open_and_probe,
    overwrite_fdatasync_rate, payonce_log_records, peak_resident_bytes, prepare, run, sync_files,
    timed_run,
};
pub use crate::sqlite_store::SQLITE_FILE;
pub use crate::store::{Answer, Durability, Rail, RailFailure, Session, Store, StoreKind};
pub use crate::table::{Comparison, share_of_sync_limit};
pub use crate::workload::{
    Mix, Op, RailScript, SUBMISSIONS_MAX, THREADS_MAX, Workload, WorkloadSpec,
};
