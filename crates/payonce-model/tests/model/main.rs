//! The withdrawal model through its public API.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fields;
mod properties;
mod transitions;

use payonce_model::{
    Actor, Amount, Currency, Destination, Reason, Reference, WithdrawalId, WithdrawalRequest,
};

/// A new request: 25.00 USDC to 0xabc, by alice.
fn make(id: &str) -> WithdrawalRequest {
    WithdrawalRequest::new(
        WithdrawalId::new(id).unwrap(),
        Amount::parse("25.00").unwrap(),
        Currency::new("USDC").unwrap(),
        Destination::new("0xabc").unwrap(),
        Actor::new("alice").unwrap(),
    )
}

fn reference(text: &str) -> Reference {
    Reference::new(text).unwrap()
}

fn reason(text: &str) -> Reason {
    Reason::new(text).unwrap()
}

/// `make(id)` moved to sent with `reference`.
fn sent(id: &str, reference_text: &str) -> WithdrawalRequest {
    make(id)
        .approve()
        .unwrap()
        .start_sending()
        .unwrap()
        .mark_sent(reference(reference_text))
        .unwrap()
}
