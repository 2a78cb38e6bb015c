//! The properties the fuzz targets check, as plain functions over bytes.
//!
//! The cargo-fuzz targets in `fuzz/` are one-line wrappers around these, and
//! the acceptance tests replay every committed corpus and regression input
//! through them with the ordinary `cargo test` on the stable toolchain.

mod model_transitions;

pub use self::model_transitions::model_transitions;

/// A fuzz property: checks one input, panicking when the property fails.
pub type Check = fn(&[u8]);

/// Every fuzz target, by the name of its folder under `fuzz/corpus` and
/// `fuzz/regressions`, with the function that checks one input.
pub const TARGETS: &[(&str, Check)] = &[("model_transitions", model_transitions)];
