//! payonce-log through its public API: round trips, recovery from torn
//! writes, refusal of every other damage, injected faults, simulated power
//! loss, concurrency, read-only access, and the zeros written ahead of records.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod concurrency;
mod config;
mod crash;
mod edges;
mod faults;
mod heads;
mod late;
mod reader;
mod recovery;
mod required;
mod roundtrip;
mod support;
mod tamper;
mod torn;
mod upgrade;
mod zeros;
