//! Fixtures shared by payonce's acceptance tests: ready-made withdrawals and
//! the helpers every scenario needs. Nothing here is part of any public API.

pub mod crash;
pub mod fleet;
pub mod fuzz;
pub mod harness;
pub mod imports;
pub mod netns;
pub mod patroni;
pub mod relay;
pub mod rng;
pub mod sim;
pub mod standby;

use payonce_model::{Actor, Amount, Currency, Destination, WithdrawalId, WithdrawalRequest};

/// A fresh request for withdrawal `id`: 25 USDC to `0xabc`, requested by alice.
///
/// # Panics
/// If `id` is not a valid withdrawal id; fixtures are written by tests.
#[allow(clippy::expect_used)]
pub fn withdrawal(id: &str) -> WithdrawalRequest {
    WithdrawalRequest::new(
        WithdrawalId::new(id).expect("fixture id is valid"),
        Amount::parse("25.00").expect("fixture amount is valid"),
        Currency::new("USDC").expect("fixture currency is valid"),
        Destination::new("0xabc").expect("fixture destination is valid"),
        Actor::new("alice").expect("fixture actor is valid"),
    )
}
