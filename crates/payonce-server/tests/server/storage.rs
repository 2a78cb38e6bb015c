//! When the ledger's storage fails, the service fails closed: nothing is
//! sent without a durable claim, and an outcome it could not record is
//! unknown.

use std::sync::Arc;

use payonce::{Config, Ledger};
use payonce_log::{Fault, Faults, FaultyStorage, MemStorage};
use payonce_server::Limits;
use reqwest::StatusCode;

use super::{ALICE, TestService, problem};

/// A service on a ledger in memory whose storage fails on command.
async fn on_faulty_storage() -> (TestService, Faults) {
    let storage = FaultyStorage::new(Arc::new(MemStorage::new()));
    let faults = storage.faults().clone();
    let ledger = Ledger::init_on(Arc::new(storage), Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let service = TestService::start_on(ledger, dir, Limits::default()).await;
    (service, faults)
}

// Guards against a send that runs although its claim never reached stable
// storage, and a ledger that goes on deciding after its storage failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_cannot_be_synced_sends_nothing_and_is_503() {
    let (service, faults) = on_faulty_storage().await;
    let id = service.create(ALICE).await;
    faults.arm(Fault::SyncFails { nth: 1 });
    problem(
        service.submit(ALICE, &id, "k-1").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unavailable",
    )
    .await;
    assert!(service.rail.calls().is_empty(), "nothing was sent");
    // The writer is poisoned: nothing more is decided.
    let later = service
        .http
        .post(service.url("/v1/withdrawals"))
        .bearer_auth(ALICE)
        .json(&serde_json::json!({"amount": "1", "currency": "USDC", "destination": "0xabc"}))
        .send()
        .await
        .unwrap();
    problem(later, StatusCode::SERVICE_UNAVAILABLE, "ledger-unavailable").await;
    problem(
        service.submit(ALICE, &id, "k-2").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unavailable",
    )
    .await;
    assert!(service.rail.calls().is_empty(), "nothing was sent");
}

// Guards against an answer the rail gave that the ledger could not record
// being answered as sent, or freeing the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_that_cannot_be_synced_is_unknown_and_the_key_stays_claimed() {
    let (service, faults) = on_faulty_storage().await;
    let id = service.create(ALICE).await;
    // The first sync is the claim's, the second the outcome's.
    faults.arm(Fault::SyncFails { nth: 2 });
    let answer = problem(
        service.submit(ALICE, &id, "k-1").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "outcome-unknown",
    )
    .await;
    assert_eq!(answer["key_stays_claimed"], true);
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("could not record"),
        "{answer}"
    );
    assert_eq!(service.rail.calls().len(), 1, "sent once");
    // An outcome that may not be on stable storage is never replayed.
    problem(
        service.submit(ALICE, &id, "k-1").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unavailable",
    )
    .await;
    assert_eq!(service.rail.calls().len(), 1, "sent once");
}
