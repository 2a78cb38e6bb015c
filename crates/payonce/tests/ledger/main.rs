//! The ledger through its public API: the seed's scenarios, races, crashes
//! and a model check.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub
)]

mod durability;
mod fixture;
mod logs;
mod model;
mod openings;
mod outcomes;
mod races;
mod scenarios;
mod schemas;
mod snapshots;
mod times;
mod walks;

pub use fixture::*;
