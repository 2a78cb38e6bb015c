//! payonce's acceptance tests: behaviour seen across crate boundaries.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod crash;
mod failover;
mod fuzz_regressions;
mod imports;
mod model;
mod network;
mod patroni;
mod pgbouncer;
mod postgres;
mod sim;
