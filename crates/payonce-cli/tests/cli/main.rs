//! The `payonce` binary end to end: every command against logs built here
//! with the `payonce` library, checking output, exit codes, parsed `--json`,
//! and that audit commands leave the log's bytes as they were.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub
)]

mod audit;
mod bad_input;
mod consistency;
mod demo;
mod echo;
mod failures;
mod fixture;
mod heads;
mod index;
mod operator;
mod outcomes;
mod postgres;
mod postgres_tls;
mod report;
mod schemas;
mod serve;
mod snapshots;
