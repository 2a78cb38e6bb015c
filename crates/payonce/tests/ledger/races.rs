//! Racing callers on a real, durable ledger: the rail is called once.

use std::sync::{Barrier, Condvar, Mutex};
use std::thread;

use payonce::{Ledger, Refusal, RefusalKind};
use payonce_model::WithdrawalRequest;

use crate::{Rail, sent};

const CALLERS: usize = 8;

/// Counts callers that have their answer, so the winning send can hold on
/// until every loser has been answered: the race is then certain, not
/// likely.
#[derive(Default)]
struct Answered {
    count: Mutex<usize>,
    changed: Condvar,
}

impl Answered {
    fn one_more(&self) {
        *self.count.lock().unwrap() += 1;
        self.changed.notify_all();
    }

    /// Waits until `count` callers have their answer. A loser that is not
    /// answered while the winner's send is running is itself the failure, so
    /// the wait is bounded rather than a hang.
    fn wait_for(&self, count: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut answered = self.count.lock().unwrap();
        while *answered < count {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(
                !left.is_zero(),
                "only {} of {count} racing callers were answered during the send",
                *answered
            );
            answered = self.changed.wait_timeout(answered, left).unwrap().0;
        }
    }
}

fn durable_ledger() -> (tempfile::TempDir, Ledger, WithdrawalRequest) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::init(dir.path()).unwrap();
    let w = ledger
        .create(payonce::NewWithdrawal {
            amount: "25".parse().unwrap(),
            currency: "USDC".parse().unwrap(),
            destination: "0xabc".parse().unwrap(),
            requested_by: "alice".parse().unwrap(),
        })
        .unwrap();
    (dir, ledger, w)
}

#[test]
fn callers_racing_with_the_same_key_send_once() {
    let (_dir, ledger, w) = durable_ledger();
    let rail = Rail::default();
    let start = Barrier::new(CALLERS);
    let answered = Answered::default();

    let results: Vec<_> = thread::scope(|scope| {
        let callers: Vec<_> = (0..CALLERS)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    let result = ledger.submit("req-1", w.clone(), |request| {
                        answered.wait_for(CALLERS - 1);
                        rail.ok()(request)
                    });
                    answered.one_more();
                    result
                })
            })
            .collect();
        callers
            .into_iter()
            .map(|caller| caller.join().unwrap())
            .collect()
    });

    assert_eq!(rail.sends(&w), 1);
    let outcome = sent(&w, &format!("0x{}", w.id()));
    let winners = results
        .iter()
        .filter(|r| matches!(r, Ok(o) if *o == outcome))
        .count();
    assert_eq!(winners, 1, "{results:?}");
    for result in results.iter().filter(|r| r.is_err()) {
        let error = result.as_ref().unwrap_err();
        assert_eq!(error.refusal_kind(), Some(RefusalKind::InFlight), "{error}");
    }
    assert_eq!(
        ledger.submit("req-1", w.clone(), rail.ok()).unwrap(),
        outcome,
        "a later retry replays"
    );
    assert_eq!(rail.sends(&w), 1);
}

#[test]
fn callers_racing_for_the_same_withdrawal_under_different_keys_send_once() {
    let (_dir, ledger, w) = durable_ledger();
    let rail = Rail::default();
    let start = Barrier::new(CALLERS);
    let answered = Answered::default();

    let results: Vec<_> = thread::scope(|scope| {
        let callers: Vec<_> = (0..CALLERS)
            .map(|caller| {
                let (ledger, rail, w, start, answered) = (&ledger, &rail, &w, &start, &answered);
                scope.spawn(move || {
                    let key = format!("device-{caller}");
                    start.wait();
                    let result = ledger.submit(&key, w.clone(), |request| {
                        answered.wait_for(CALLERS - 1);
                        rail.ok()(request)
                    });
                    answered.one_more();
                    (key, result)
                })
            })
            .collect();
        callers
            .into_iter()
            .map(|caller| caller.join().unwrap())
            .collect()
    });

    assert_eq!(rail.sends(&w), 1);
    let winner: Vec<_> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(key, _)| key.clone())
        .collect();
    assert_eq!(winner.len(), 1, "{results:?}");
    assert_eq!(
        ledger.claimed_by(w.id()).unwrap().unwrap().as_str(),
        winner[0]
    );
    for (key, result) in results.iter().filter(|(_, r)| r.is_err()) {
        let error = result.as_ref().unwrap_err();
        let Some(Refusal::Claimed { holder, .. }) = error.refusal() else {
            panic!("{key}: {error}")
        };
        assert_eq!(holder.as_str(), winner[0], "the refusal names the winner");
        assert_eq!(
            ledger.outcome(key).unwrap(),
            None,
            "a loser leaves no trace"
        );
    }
}
