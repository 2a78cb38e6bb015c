//! A service's submit path on payonce, from threads: a new ledger, a
//! withdrawal, its send, a retry that replays the outcome, and a second
//! key refused with the holder's name.
//!
//! `cargo run -p payonce --example sync [DIR]`: a new ledger in DIR (an
//! empty or missing directory; a temporary one by default), or the ledger
//! already there.

use std::error::Error;
use std::path::PathBuf;

use payonce::{Ledger, LedgerError, NewWithdrawal, SendFailure};
use payonce_model::WithdrawalRequest;

/// The rail: here it accepts every send and answers with a reference. A
/// real client calls the chain or the bank; an error it cannot classify
/// is `SendFailure::failed` (the outcome is unknown: the key stays in
/// flight), a clean refusal `SendFailure::rejected`.
fn rail(request: &WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> {
    Ok(request.sent(format!("0x{}", request.id()))?)
}

fn main() -> Result<(), Box<dyn Error>> {
    let temporary = tempfile::tempdir()?;
    let dir = std::env::args()
        .nth(1)
        .map_or_else(|| temporary.path().join("ledger"), PathBuf::from);
    // A ledger is created once, explicitly; after that it is opened.
    let ledger = match Ledger::open(&dir) {
        Err(LedgerError::NoLog { found, .. }) if found.is_empty() => Ledger::init(&dir)?,
        opened => opened?,
    };
    let request = ledger.create(NewWithdrawal {
        amount: "25.00".parse()?,
        currency: "USDC".parse()?,
        destination: "0xabc".parse()?,
        requested_by: "alice".parse()?,
    })?;
    let key = format!("phone-{}", request.id());
    let outcome = ledger.submit(&key, &request, rail)?;
    println!(
        "sent {} as {}",
        outcome.id(),
        outcome.reference().map_or("?", |r| r.as_str())
    );

    // The phone retries: the outcome is replayed, the rail is not called.
    let again = ledger.submit(&key, &request, |_| unreachable!("a retry never sends"))?;
    assert_eq!(again, outcome);

    // The laptop submits the same withdrawal under its own key: refused,
    // naming the key that holds it.
    let Err(refused) = ledger.submit("laptop-1", &request, |_| {
        unreachable!("a second key never sends")
    }) else {
        return Err("a second key for a claimed withdrawal was not refused".into());
    };
    let holder = refused.refusal().and_then(|refusal| refusal.holder());
    println!("a second key is refused: {refused}");
    assert_eq!(holder.map(|key| key.as_str()), Some(key.as_str()));
    println!("ledger in {}: {} events", dir.display(), ledger.last_seq());
    Ok(())
}
