//! payonce-log through its public API: round trips, recovery from torn
//! writes, refusal of every other damage, injected faults, simulated power
//! loss, concurrency, and read-only access.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod concurrency;
mod config;
mod crash;
mod edges;
mod faults;
mod reader;
mod recovery;
mod roundtrip;
mod support;
mod tamper;
