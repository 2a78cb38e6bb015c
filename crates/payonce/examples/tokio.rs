//! payonce from async code: claim, await the rail, complete, with every
//! call that waits for the disk (a claim is synced before it is granted,
//! an outcome before it is returned) on tokio's blocking pool, never on an
//! executor thread.
//!
//! `cargo run -p payonce --example tokio`
//!
//! It also shows what a cancelled request does: a request future dropped
//! while its send is awaited drops its ticket, which leaves the key in
//! flight (nothing is released, the hold stays) and records that the send
//! was abandoned, without waiting for the disk. An operator later resolves
//! or releases it from what the rail says.

use std::error::Error;
use std::time::Duration;

use payonce::{Claim, Ledger, NewWithdrawal, SendFailure, SubmitError};
use payonce_model::WithdrawalRequest;

/// An async rail client: the network call is awaited like any other.
async fn rail(request: WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(request.sent(format!("0x{}", request.id()))?)
}

type BoxError = Box<dyn Error + Send + Sync>;

/// Claims `key` for `request` on the blocking pool: the claim is on stable
/// storage before this returns `Claim::Granted`.
async fn claim(ledger: &Ledger, key: &str, request: WithdrawalRequest) -> Result<Claim, BoxError> {
    let (ledger, key) = (ledger.clone(), key.to_owned());
    Ok(tokio::task::spawn_blocking(move || ledger.claim(&key, &request)).await??)
}

/// A submit from async code. The claim and the completion wait for the
/// disk, so they run on the blocking pool; the send is awaited between.
async fn submit(
    ledger: Ledger,
    key: String,
    request: WithdrawalRequest,
) -> Result<WithdrawalRequest, BoxError> {
    let ticket = match claim(&ledger, &key, request).await? {
        Claim::Replayed(outcome) => return Ok(outcome),
        Claim::Granted(ticket) => ticket,
    };
    let sent = rail(ticket.request().clone()).await;
    let completed = tokio::task::spawn_blocking(move || ledger.complete(ticket, sent)).await?;
    completed.map_err(|error: SubmitError| error.into())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let dir = tempfile::tempdir()?;
    let ledger = Ledger::init(dir.path())?;
    let new = || NewWithdrawal {
        amount: "25.00".parse().unwrap_or_else(|e| panic!("{e}")),
        currency: "USDC".parse().unwrap_or_else(|e| panic!("{e}")),
        destination: "0xabc".parse().unwrap_or_else(|e| panic!("{e}")),
        requested_by: "alice".parse().unwrap_or_else(|e| panic!("{e}")),
    };
    let request = ledger.create(new())?;
    let outcome = submit(ledger.clone(), "req-1".into(), request.clone()).await?;
    println!("sent: {} {}", outcome.id(), outcome.state());
    // A retry replays it.
    assert_eq!(
        submit(ledger.clone(), "req-1".into(), request).await?,
        outcome
    );

    // A request whose caller goes away mid-send: the future awaiting the
    // rail is dropped, and the ticket with it, on this executor thread.
    let other = ledger.create(new())?;
    let Claim::Granted(ticket) = claim(&ledger, "req-2", other).await? else {
        unreachable!("a new key is granted")
    };
    let mid_send = async move {
        let sent = rail(ticket.request().clone()).await;
        (ticket, sent)
    };
    let timed_out = tokio::time::timeout(Duration::from_millis(1), mid_send).await;
    assert!(
        timed_out.is_err(),
        "the caller stopped waiting before the rail answered"
    );
    let in_flight = ledger.in_flight();
    println!(
        "after the cancelled request, {} stays in flight: {}",
        in_flight[0].key,
        in_flight[0].last_error.as_deref().unwrap_or("")
    );
    assert_eq!(in_flight.len(), 1);
    Ok(())
}
