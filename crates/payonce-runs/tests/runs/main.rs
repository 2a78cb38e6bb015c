//! payonce-runs through its public API: round trips by both names, the
//! filters, the cache and prefetching, merging, the writer's refusals,
//! damage of every byte, and docs/run-format.md's worked example.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cache;
mod damage;
mod documented;
mod filters;
mod merge;
mod roundtrip;
mod support;
mod writer;
