//! payonce-postgres against a real server: a throwaway cluster that every
//! test of this binary shares (`payonce_postgres::cluster::for_tests`),
//! a database of its own per test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub
)]

mod failover;
mod faults;
mod ledger;
mod migration;
mod same;
mod scan;
mod schema;
mod snapshots;
mod tls;

use payonce::{Config, ManualClock, NewWithdrawal, Timestamp};
use payonce_model::WithdrawalRequest;
use std::sync::Arc;

/// A migrated database for one test, or return (after a loud message) when
/// no cluster can be started outside CI.
#[macro_export]
macro_rules! database {
    () => {
        match payonce_postgres::cluster::test_database() {
            Some(url) => url,
            None => return,
        }
    };
}

/// 2026-11-30T12:00:00Z.
pub const START: Timestamp = Timestamp::from_unix_nanos(1_796_040_000_000_000_000);

pub fn config() -> Config {
    Config {
        clock: Arc::new(ManualClock::new(START)),
        ..Config::default()
    }
}

pub fn new_withdrawal(amount: &str) -> NewWithdrawal {
    NewWithdrawal {
        amount: amount.parse().unwrap(),
        currency: "USDC".parse().unwrap(),
        destination: "0xabc".parse().unwrap(),
        requested_by: "alice".parse().unwrap(),
    }
}

/// Ends every other connection to the database of `url`, as a crash of
/// every process using it would.
pub fn kill_connections(url: &str) {
    let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
    admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND backend_type = 'client backend'",
            &[],
        )
        .unwrap();
}

pub fn sent(request: &WithdrawalRequest, reference: &str) -> WithdrawalRequest {
    request.sent(reference).unwrap()
}
