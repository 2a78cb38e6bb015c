//! A ledger deciding far more withdrawals than its budget holds keeps its
//! live keys within their share: half of what the cache and the filters
//! leave, the other half kept for the copies a snapshot or a new run makes
//! while decisions go on.

use std::sync::Arc;

use payonce_log::MemStorage;
use payonce_model::{Actor, Amount, Currency, Destination, Reference, WithdrawalRequest};

use super::settle::PAIR_BYTES;
use super::{Config, Ledger, MEMORY_BUDGET_MIN, NewWithdrawal};
use crate::snapshot::{DirSnapshots, SnapshotPolicy};

fn sent(request: &WithdrawalRequest) -> WithdrawalRequest {
    let reference = Reference::new("0xabc").unwrap_or_else(|e| panic!("{e}"));
    request
        .approve()
        .and_then(|r| r.start_sending())
        .and_then(|r| r.mark_sent(reference))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn new_withdrawal() -> NewWithdrawal {
    NewWithdrawal {
        amount: Amount::parse("2").unwrap_or_else(|e| panic!("{e}")),
        currency: Currency::new("USDC").unwrap_or_else(|e| panic!("{e}")),
        destination: Destination::new("0xfeed").unwrap_or_else(|e| panic!("{e}")),
        requested_by: Actor::new("alice").unwrap_or_else(|e| panic!("{e}")),
    }
}

#[test]
fn the_live_keys_keep_within_half_of_what_the_cache_and_filters_leave() {
    // Guards against live slots that fill the whole budget left by the
    // cache and the filters: a snapshot or a new run copies the slots
    // decisions change while it is written, and that copy would then
    // double the state past its budget.
    let config = Config {
        memory_budget: MEMORY_BUDGET_MIN,
        snapshots: SnapshotPolicy::never(),
        snapshot_store: Some(Arc::new(DirSnapshots::on(Arc::new(MemStorage::new())))),
        settle_in_background: false,
        ..Config::default()
    };
    let ledger =
        Ledger::init_on(Arc::new(MemStorage::new()), config).unwrap_or_else(|e| panic!("{e}"));
    let mut most = 0;
    for n in 0..10_000 {
        let w = ledger
            .create(new_withdrawal())
            .unwrap_or_else(|e| panic!("{e}"));
        ledger
            .submit(&format!("k-{n}"), &w, |r| Ok(sent(r)))
            .unwrap_or_else(|e| panic!("{e}"));
        if n % 500 == 0 {
            let memory = ledger.memory().unwrap_or_else(|e| panic!("{e}"));
            let share = (memory.budget - memory.budget / 4 - memory.filter_bytes) / 2;
            // Half the share for pairs no run holds yet, half for pairs
            // kept in memory that one does: the rest leave.
            assert!(
                memory.live_keys <= share / PAIR_BYTES + 1,
                "after {n}: {memory:?}, share {share}"
            );
            most = most.max(memory.live_keys);
        }
    }
    let memory = ledger.memory().unwrap_or_else(|e| panic!("{e}"));
    assert!(memory.runs > 0, "{memory:?}");
    // The share is used, not left empty: pairs stay until it is full.
    assert!(
        most > MEMORY_BUDGET_MIN / 4 / PAIR_BYTES,
        "at most {most} keys live"
    );
}
