//! `AsyncLedger` on tokio: submissions, replays, and what a cancelled
//! request future leaves behind.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub
)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use payonce::{
    AsyncLedger, Clock, Config, Ledger, NewWithdrawal, Refusal, SendFailure, SubmitError,
    SystemClock, Timestamp,
};
use payonce_model::WithdrawalRequest;
use tokio::sync::oneshot;

fn new_withdrawal() -> NewWithdrawal {
    NewWithdrawal {
        amount: "25.00".parse().unwrap(),
        currency: "USDC".parse().unwrap(),
        destination: "0xabc".parse().unwrap(),
        requested_by: "alice".parse().unwrap(),
    }
}

async fn sent(request: WithdrawalRequest) -> Result<WithdrawalRequest, SendFailure> {
    Ok(request.sent("0xfeed")?)
}

// Guards against an async submit that sends on a retry, or hides a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_replays_without_sending_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = AsyncLedger::new(Ledger::init(dir.path()).unwrap());
    let request = ledger.create(new_withdrawal()).await.unwrap();
    let first = ledger.submit("k-1", request.clone(), sent).await.unwrap();
    assert!(!first.replayed);
    let sends = AtomicU32::new(0);
    let again = ledger
        .submit("k-1", request.clone(), |r| {
            sends.fetch_add(1, Ordering::SeqCst);
            sent(r)
        })
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.outcome, first.outcome);
    assert_eq!(sends.load(Ordering::SeqCst), 0);
    let refused = ledger.submit("k-2", request, sent).await.unwrap_err();
    assert_eq!(
        refused
            .refusal()
            .and_then(Refusal::holder)
            .unwrap()
            .as_str(),
        "k-1"
    );
}

// Guards against a clean refusal or a failure that frees the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_and_a_failure_keep_their_keys_claimed() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = AsyncLedger::new(Ledger::init(dir.path()).unwrap());
    let refused = ledger.create(new_withdrawal()).await.unwrap();
    let error = ledger
        .submit("k-r", refused.clone(), |_| async {
            Err(SendFailure::rejected("floor"))
        })
        .await
        .unwrap_err();
    assert!(matches!(error, SubmitError::Rejected { .. }), "{error}");
    let failed = ledger.create(new_withdrawal()).await.unwrap();
    let error = ledger
        .submit("k-f", failed.clone(), |_| async {
            Err(SendFailure::failed("timeout"))
        })
        .await
        .unwrap_err();
    assert!(matches!(error, SubmitError::Send(_)), "{error}");
    let in_flight: Vec<String> = ledger
        .ledger()
        .in_flight()
        .iter()
        .map(|entry| entry.key.to_string())
        .collect();
    assert_eq!(in_flight, ["k-r", "k-f"]);
    assert!(ledger.ledger().held(refused.id()).unwrap().is_none());
    assert!(ledger.ledger().held(failed.id()).unwrap().is_some());
}

/// The checks after a request future was cancelled: the key in flight
/// with its hold, a retry and a second key refused, before and after
/// reopening.
fn assert_left_in_flight(
    dir: &std::path::Path,
    async_ledger: AsyncLedger,
    request: &WithdrawalRequest,
) {
    // Only this clone may keep the ledger open: reopening needs its lock.
    let ledger = Ledger::clone(async_ledger.ledger());
    drop(async_ledger);
    let in_flight = ledger.in_flight();
    assert_eq!(in_flight.len(), 1);
    assert_eq!(in_flight[0].key.as_str(), "k-1");
    assert!(in_flight[0].held, "the hold stays");
    let retry = ledger
        .submit("k-1", request, |_| unreachable!())
        .unwrap_err();
    assert!(
        matches!(retry.refusal(), Some(Refusal::InFlight { .. })),
        "{retry}"
    );
    let other = ledger
        .submit("k-2", request, |_| unreachable!())
        .unwrap_err();
    assert_eq!(
        other.refusal().and_then(Refusal::holder).unwrap().as_str(),
        "k-1"
    );
    drop(ledger);
    let reopened = Ledger::open(dir).unwrap();
    let in_flight = reopened.in_flight();
    assert_eq!(in_flight.len(), 1, "nothing released the key");
    assert_eq!(in_flight[0].key.as_str(), "k-1");
    assert!(reopened.held(request.id()).unwrap().is_some());
}

// Guards against a cancelled request that releases its key: the send may
// have reached the rail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cancelled_mid_send_leaves_its_key_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = AsyncLedger::new(Ledger::init(dir.path()).unwrap());
    let request = ledger.create(new_withdrawal()).await.unwrap();
    let (started, sending) = oneshot::channel();
    let task = {
        let (ledger, request) = (ledger.clone(), request.clone());
        tokio::spawn(async move {
            ledger
                .submit("k-1", request, |_| async move {
                    started.send(()).unwrap();
                    // The rail never answers.
                    std::future::pending().await
                })
                .await
        })
    };
    sending.await.unwrap();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let abandoned = ledger.ledger().in_flight();
    assert!(
        abandoned[0]
            .last_error
            .as_ref()
            .unwrap()
            .contains("dropped"),
        "{abandoned:?}"
    );
    assert_left_in_flight(dir.path(), ledger, &request);
}

/// A clock that tells the test each time it is read, and holds the caller
/// while the test holds its gate: a way to cancel a future while its claim
/// is being written.
#[derive(Debug)]
struct GateClock {
    reads: Mutex<mpsc::Sender<()>>,
    gate: Arc<Mutex<()>>,
}

impl Clock for GateClock {
    fn now(&self) -> Timestamp {
        let _ = self.reads.lock().unwrap().send(());
        drop(self.gate.lock().unwrap());
        SystemClock.now()
    }
}

// Guards against a claim that a cancelled future undoes, or leaves granted
// with nobody to complete it and nothing recorded.
#[test]
fn a_request_cancelled_mid_claim_leaves_its_key_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let (reads, read) = mpsc::channel();
    let gate = Arc::new(Mutex::new(()));
    let clock = Arc::new(GateClock {
        reads: Mutex::new(reads),
        gate: gate.clone(),
    });
    let config = Config {
        clock,
        ..Config::default()
    };
    let ledger = AsyncLedger::new(Ledger::init_with(dir.path(), config).unwrap());
    let request = ledger.ledger().create(new_withdrawal()).unwrap();
    while read.try_recv().is_ok() {} // the opening and the creation
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let held = gate.lock().unwrap();
    let task = {
        let (ledger, request) = (ledger.clone(), request.clone());
        runtime.spawn(async move { ledger.submit("k-1", request, sent).await })
    };
    // The claim is being appended, on the blocking pool: cancel the
    // request future there, then let the claim go on.
    read.recv().unwrap();
    task.abort();
    drop(held);
    // The next read of the clock is the abandoned ticket's note.
    read.recv().unwrap();
    // Dropping the runtime waits for its blocking tasks: the claim's, and
    // the ledger clone it holds.
    drop(runtime);
    let in_flight = ledger.ledger().in_flight();
    assert!(
        in_flight[0]
            .last_error
            .as_ref()
            .unwrap()
            .contains("dropped"),
        "{in_flight:?}"
    );
    assert_left_in_flight(dir.path(), ledger, &request);
}
