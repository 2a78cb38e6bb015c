//! Benchmarks of payonce-log; see docs/performance.md.

fn main() {}
