//! Workers sharing one ledger: sessions, policy, minted ids, and the
//! database refusing a second winner whatever a worker's memory says.

use std::collections::HashSet;
use std::sync::Arc;

use payonce::{
    Appended, Claim, ClaimChange, Config, Event, EventKind, LedgerError, Refusal, SCHEMA_VERSION,
    SharedLog, StoreError,
};
use payonce_model::WithdrawalRequest;
use payonce_postgres::{PgLog, Role};

use crate::{START, config, database, new_withdrawal, sent};

#[test]
fn a_ledger_is_created_once_and_a_worker_with_another_policy_refuses_to_start() {
    // Guards against two creations, and against workers deciding under different id policies.
    let url = database!();
    assert!(matches!(
        payonce_postgres::open(&url, "api-1", config()),
        Err(LedgerError::NoLog { .. })
    ));
    drop(payonce_postgres::init(&url, config()).unwrap());
    assert!(matches!(
        payonce_postgres::init(&url, config()),
        Err(LedgerError::NotEmpty { .. })
    ));
    let mut foreign = config();
    foreign.accept_foreign_ids = true;
    let error = payonce_postgres::open(&url, "api-1", foreign).unwrap_err();
    assert!(
        matches!(
            error,
            LedgerError::PolicyMismatch {
                ledger: false,
                worker: true
            }
        ),
        "{error}"
    );
}

#[test]
fn two_processes_never_run_as_one_worker() {
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let first = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let error = payonce_postgres::open(&url, "api-1", config()).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("another process runs as worker api-1"),
        "{error}"
    );
    drop(first);
    drop(payonce_postgres::open(&url, "api-1", config()).unwrap());
}

#[test]
fn a_restart_ends_only_the_workers_own_sends_and_an_operator_ends_a_dead_workers() {
    // Guards against one worker's start letting an operator release a key another live worker is sending.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let a = payonce_postgres::open(&url, "api-a", config()).unwrap();
    let b = payonce_postgres::open(&url, "api-b", config()).unwrap();
    let (wa, wb) = (
        a.create(new_withdrawal("10")).unwrap(),
        b.create(new_withdrawal("20")).unwrap(),
    );
    let Claim::Granted(ticket_a) = a.claim("key-a", &wa).unwrap() else {
        panic!()
    };
    let Claim::Granted(ticket_b) = b.claim("key-b", &wb).unwrap() else {
        panic!()
    };
    // Both die with their sends running: no completion, no drop, their
    // connections gone.
    std::mem::forget((ticket_a, ticket_b, a, b));
    crate::kill_connections(&url);

    let a = payonce_postgres::open(&url, "api-a", config()).unwrap();
    let operator = payonce_postgres::attach(&url, config()).unwrap();
    operator
        .release("key-a", "api-a restarted; the rail shows nothing", "ops")
        .unwrap();
    let refused = operator.release("key-b", "looks stuck", "ops").unwrap_err();
    assert!(
        matches!(
            refused.refusal(),
            Some(Refusal::InFlight {
                send_running: true,
                ..
            })
        ),
        "{refused}"
    );
    let record = operator.state().unwrap();
    let record = record.record("key-b").unwrap();
    assert_eq!(record.send_worker().unwrap().as_str(), "api-b");

    payonce_postgres::end_session(&url, "api-b", "host api-b is gone", "ops").unwrap();
    operator
        .release("key-b", "api-b is gone; the rail shows nothing", "ops")
        .unwrap();
    let refused = payonce_postgres::end_session(&url, "api-b", "again", "ops").unwrap_err();
    assert!(
        matches!(refused.refusal(), Some(Refusal::NoSession { .. })),
        "{refused}"
    );
    // Its next decision catches api-a up on the operator's releases.
    let outcome = a.submit("key-c", &wb, |r| Ok(sent(r, "0xc"))).unwrap();
    assert_eq!(a.outcome("key-c").unwrap(), Some(outcome));
}

#[test]
fn an_operator_cannot_end_the_session_of_a_worker_that_runs() {
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let error = payonce_postgres::end_session(&url, "api-1", "looks dead", "ops").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("another process runs as worker api-1"),
        "{error}"
    );
    assert!(worker.state().unwrap().session("api-1").is_some());
}

#[test]
fn a_worker_whose_session_was_ended_decides_nothing_more() {
    // Guards against a worker thought dead claiming after an operator released its keys.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = payonce_postgres::open(&url, "api-1", config()).unwrap();
    // As if its lock were lost: the operator's tool writes the end directly.
    let operator = payonce_postgres::attach(&url, config()).unwrap();
    operator
        .end_session("api-1", "partitioned away", "ops")
        .unwrap();
    let error = worker.create(new_withdrawal("1")).unwrap_err();
    assert!(matches!(error, LedgerError::SessionOver { .. }), "{error}");
}

#[test]
fn workers_mint_ids_unique_across_the_ledger_and_see_each_others_claims() {
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let workers: Vec<_> = (0..3)
        .map(|n| payonce_postgres::open(&url, &format!("api-{n}"), config()).unwrap())
        .collect();
    let ids: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .iter()
            .flat_map(|worker| (0..4).map(move |_| worker))
            .map(|worker| {
                scope.spawn(move || {
                    (0..10)
                        .map(|_| worker.create(new_withdrawal("5")).unwrap().id().to_string())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 120);
    let w = workers[0].create(new_withdrawal("7")).unwrap();
    workers[0]
        .submit("k-1", &w, |r| Ok(sent(r, "0x1")))
        .unwrap();
    let refused = workers[2]
        .submit("k-2", &w, |_| unreachable!())
        .unwrap_err();
    assert_eq!(
        refused
            .refusal()
            .and_then(Refusal::holder)
            .unwrap()
            .as_str(),
        "k-1"
    );
    let (report, head) = payonce_postgres::verify(&url).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    assert_eq!(head.seq, report.events);
}

#[test]
fn a_worker_with_settled_pairs_set_apart_catches_up_on_a_refusal_about_one() {
    // Guards against replaying a logged refusal without reading back the
    // withdrawal its command names, which replay judges again: the worker
    // would report a divergence and drop what it had set apart.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let a = payonce_postgres::open(&url, "api-a", config()).unwrap();
    let w = a.create(new_withdrawal("3")).unwrap();
    a.submit("k-1", &w, |r| Ok(sent(r, "0xa"))).unwrap();
    let apart = Config {
        set_apart_settled: true,
        ..config()
    };
    let b = payonce_postgres::open(&url, "api-b", apart).unwrap();
    let refused = a.claim("k-2", &w);
    assert!(
        matches!(&refused, Err(LedgerError::Refused(Refusal::Claimed { holder, .. })) if holder.as_str() == "k-1"),
        "{refused:?}"
    );
    b.refresh().unwrap();
    // A decision after the catch-up, and the withdrawal's claim.
    b.create(new_withdrawal("4")).unwrap();
    assert_eq!(
        b.claimed_by(w.id().as_str()).unwrap().unwrap().as_str(),
        "k-1"
    );
    a.refresh().unwrap();
    assert_eq!(a.state().unwrap(), b.state().unwrap());
}

#[test]
fn a_worker_reads_another_workers_claims_once_it_refreshes() {
    // Guards against a refresh that leaves a worker's reads behind the log, or applies an event twice.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let (a, b) = (
        payonce_postgres::open(&url, "api-a", config()).unwrap(),
        payonce_postgres::open(&url, "api-b", config()).unwrap(),
    );
    let w = b.create(new_withdrawal("3")).unwrap();
    b.submit("k-b", &w, |r| Ok(sent(r, "0xb"))).unwrap();
    assert_eq!(
        a.claimed_by(w.id().as_str()).unwrap(),
        None,
        "reads are as of a's last batch"
    );
    a.refresh().unwrap();
    assert_eq!(
        a.claimed_by(w.id().as_str()).unwrap().unwrap().as_str(),
        "k-b"
    );
    assert_eq!(a.outcome("k-b").unwrap(), b.outcome("k-b").unwrap());
    assert_eq!(a.state().unwrap(), b.state().unwrap());
    a.refresh().unwrap();
    assert_eq!(
        a.last_seq(),
        b.last_seq(),
        "a second refresh reads nothing more"
    );
}

#[test]
fn the_database_refuses_a_second_claim_whatever_a_workers_memory_says() {
    // Guards against one worker's wrong projection granting a withdrawal another key holds.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let w = worker.create(new_withdrawal("10")).unwrap();
    worker.submit("k-1", &w, |r| Ok(sent(r, "0x1"))).unwrap();
    drop(worker);

    // A writer whose memory missed k-1's claim appends a claim for k-2.
    let log = PgLog::connect(&url, Role::Attached).unwrap();
    let last = read_to_end(&log);
    assert!(log.begin(last).unwrap().is_empty());
    let error = log.commit(&[claim_at(last + 1, "k-2", &w)]).unwrap_err();
    assert!(matches!(error, StoreError::Conflict { .. }), "{error}");
    let (report, _) = payonce_postgres::verify(&url).unwrap();
    assert_eq!(report.events, last, "nothing of the batch was committed");
    drop(Arc::new(log));
}

#[test]
fn an_audit_read_view_never_blocks_a_worker_and_reads_one_gapless_prefix() {
    // Guards against an audit that takes a lock the workers wait on, or reads a log still moving.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let w = worker.create(new_withdrawal("10")).unwrap();
    worker.submit("k-1", &w, |r| Ok(sent(r, "0x1"))).unwrap();
    let before = worker.last_seq();

    let mut view = payonce_postgres::ReadView::open(&url).unwrap();
    let mut seen = Vec::new();
    // Half-way through the audit's walk, the worker decides and commits.
    let head = view
        .walk(|seq, _| {
            seen.push(seq);
            if seq == 1 {
                let more = worker.create(new_withdrawal("20")).unwrap();
                worker.submit("k-2", &more, |r| Ok(sent(r, "0x2"))).unwrap();
            }
            Ok::<_, ()>(std::ops::ControlFlow::Continue(()))
        })
        .unwrap();
    assert!(worker.last_seq() > before, "the worker was not blocked");
    assert_eq!(
        seen,
        (1..=before).collect::<Vec<_>>(),
        "the read view's prefix, whole"
    );
    assert_eq!(head.seq, before);
    assert_eq!(payonce_postgres::head(&url).unwrap().seq, worker.last_seq());
}

#[test]
fn a_batch_whose_release_the_database_refuses_commits_nothing_and_the_next_batch_commits() {
    // Guards against a batch taken as committed when a statement sent
    // before its COMMIT failed: the server ends such a transaction with a
    // rollback and answers the COMMIT without an error.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let w = worker.create(new_withdrawal("10")).unwrap();
    let last = worker.last_seq();
    drop(worker);

    let log = PgLog::connect(&url, Role::Attached).unwrap();
    assert_eq!(read_to_end(&log), last);
    let claim = claim_at(last + 1, "k-1", &w);
    // The claim's rows go in; the release after it names a key that holds
    // no claim, which the foreign keys refuse.
    let release = Appended {
        seq: last + 2,
        payload: claim.payload.clone(),
        claim: Some(ClaimChange::Frees {
            key: "k-9".parse().unwrap(),
            withdrawal: w.id().clone(),
        }),
        keys: Vec::new(),
        withdrawal: None,
    };
    assert!(log.begin(last).unwrap().is_empty());
    let error = log.commit(&[claim.clone(), release]).unwrap_err();
    assert!(matches!(error, StoreError::Conflict { .. }), "{error}");
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let count = |admin: &mut postgres::Client, table: &str| {
        admin
            .query_one(&format!("SELECT count(*) FROM payonce.{table}"), &[])
            .unwrap()
            .get::<_, i64>(0)
    };
    assert_eq!(count(&mut admin, "events"), i64::try_from(last).unwrap());
    assert_eq!(count(&mut admin, "withdrawal_claims"), 0);
    assert_eq!(log.head().unwrap().seq, last, "the head did not move");

    // The same connection goes on: the claim alone commits.
    assert!(log.begin(last).unwrap().is_empty());
    log.commit(&[claim]).unwrap();
    assert_eq!(
        count(&mut admin, "events"),
        i64::try_from(last + 1).unwrap()
    );
    let (report, _) = payonce_postgres::verify(&url).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    assert_eq!(report.state.claimed_by(w.id()).unwrap().as_str(), "k-1");
    drop(Arc::new(log));
}

/// Reads `log` to its end, as a worker does before its first batch, and
/// returns the last sequence number.
fn read_to_end(log: &PgLog) -> u64 {
    let mut last = 0;
    log.scan(0, &mut |seq, _| {
        last = seq;
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    last
}

/// `key`'s claim of `request` as the event at `seq`, appended the way a
/// worker appends it, with its constraint rows.
fn claim_at(seq: u64, key: &str, request: &WithdrawalRequest) -> Appended {
    let claimed = Event {
        schema: SCHEMA_VERSION,
        seq,
        at: START,
        kind: EventKind::Claimed {
            key: key.parse().unwrap(),
            request: request.clone(),
            worker: None,
        },
    };
    Appended {
        seq,
        payload: claimed.encode().unwrap(),
        claim: Some(ClaimChange::Claims {
            key: key.parse().unwrap(),
            withdrawal: request.id().clone(),
        }),
        keys: vec![key.parse().unwrap()],
        withdrawal: Some(request.id().clone()),
    }
}
