//! The properties the fuzz targets check, as plain functions over bytes.
//!
//! The cargo-fuzz targets in `fuzz/` are one-line wrappers around these, and
//! the acceptance tests replay every committed corpus and regression input
//! through them with the ordinary `cargo test` on the stable toolchain.

pub mod event_decode;
pub mod ledger_ops;
pub mod log_open;
mod model_transitions;
pub mod snapshot_decode;

pub use self::event_decode::event_decode;
pub use self::ledger_ops::ledger_ops;
pub use self::log_open::log_open;
pub use self::model_transitions::model_transitions;
pub use self::snapshot_decode::snapshot_decode;

/// A fuzz property: checks one input, panicking when the property fails.
pub type Check = fn(&[u8]);

/// Every fuzz target, by the name of its folder under `fuzz/corpus` and
/// `fuzz/regressions`, with the function that checks one input.
pub const TARGETS: &[(&str, Check)] = &[
    ("event_decode", event_decode),
    ("ledger_ops", ledger_ops),
    ("log_open", log_open),
    ("model_transitions", model_transitions),
    ("snapshot_decode", snapshot_decode),
];
