//! A ledger in a simulated world, checked after every step.
//!
//! [`World`] runs the real [`payonce::Ledger`] on a simulated [`Disk`] (a
//! `MemStorage` that injects faults and can lose power after any storage
//! operation), in front of a simulated [`Rail`] that keeps the truth of which
//! money moved, beside a reference [`Model`] of the seed article's
//! semantics. The `ledger_ops` fuzz target and the deterministic simulator
//! both drive it; neither holds a property of its own.
//!
//! What it checks (each a panic naming what broke):
//! - while nothing fails, every answer is the model's, and the projections
//!   are the model's;
//! - no withdrawal's money moves twice, and the rail is never called again
//!   for a withdrawal until an operator released the key of the last call;
//! - at the moment the rail is called, the claim is on stable storage: a
//!   power loss that drops every unsynced byte still holds it;
//! - after a storage fault, nothing more is acknowledged until a reopen;
//! - after a power loss, the log is a prefix of what was written that holds
//!   everything acknowledged, every acknowledged outcome and claim is there,
//!   and the rail's truth never contradicts the ledger;
//! - the live state equals an incremental replay of the log, and a reopen
//!   and `payonce::verify_on` give the same state;
//! - the ledger publishes to its witness (kept off the disk, so power
//!   losses do not roll it back) only heads that survive any power loss,
//!   in order: every open after a power loss succeeds against it; and a
//!   disk restored from the snapshot of the previous clean reopen, once
//!   behind the witness, is refused naming the witness's head;
//! - the projections' invariants, and an account of holds kept from the
//!   events alone that matches the ledger's.

mod checks;
mod disk;
mod model;
mod rail;
mod witness;
mod world;

pub use self::checks::{
    HoldAudit, Projection, Shadow, assert_crash_prefix, assert_invariants, records,
};
pub use self::disk::{CrashPlan, Disk};
pub use self::model::{Answer, Completion, Model, ModelRecord};
pub use self::rail::{
    Later, Movement, Rail, RailAnswer, SendKind, impostor, later, reference, sent,
};
pub use self::witness::{SimWitness, assert_rollback_refused};
pub use self::world::{START, SlotId, Stats, World, WorldConfig};

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, panic_any, resume_unwind};
use std::sync::Once;

/// The payload of the panic a simulated rail client raises on purpose.
#[derive(Debug)]
pub struct RailClientPanic;

thread_local! {
    static EXPECTED_PANIC: Cell<bool> = const { Cell::new(false) };
}

static QUIET_HOOK: Once = Once::new();

/// Panics with [`RailClientPanic`] without printing it: the panic hook
/// (libFuzzer's, which aborts, or the test harness's) is skipped for this
/// one panic only.
pub fn rail_client_panics() -> ! {
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !EXPECTED_PANIC.with(Cell::get) {
                previous(info);
            }
        }));
    });
    EXPECTED_PANIC.with(|expected| expected.set(true));
    panic_any(RailClientPanic)
}

/// Runs `f`; `None` if it raised [`rail_client_panics`]. Any other panic
/// goes on unwinding: it is a finding.
pub fn catching_rail_client_panic<T>(f: impl FnOnce() -> T) -> Option<T> {
    let result = catch_unwind(AssertUnwindSafe(f));
    EXPECTED_PANIC.with(|expected| expected.set(false));
    match result {
        Ok(value) => Some(value),
        Err(payload) if payload.is::<RailClientPanic>() => None,
        Err(payload) => resume_unwind(payload),
    }
}
