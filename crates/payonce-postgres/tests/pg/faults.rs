//! The connection lost under a batch: no send without a committed claim.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use payonce::{Appended, Claim, Ledger, LedgerError, SharedLog, SharedRecord, StoreError, Visit};
use payonce_model::WorkerName;
use payonce_postgres::{Head, PgLog, Role};

use crate::{config, database, new_withdrawal, sent};

/// A worker's log whose connection is terminated by the server
/// (`pg_terminate_backend`) after the next batch's inserts are sent, before
/// its commit.
#[derive(Debug)]
struct Terminating {
    log: PgLog,
    url: String,
    armed: AtomicBool,
}

impl SharedLog for Terminating {
    fn scan(&self, after: u64, visit: Visit<'_>) -> Result<(), StoreError> {
        self.log.scan(after, visit)
    }
    fn begin(&self, after: u64) -> Result<Vec<SharedRecord>, StoreError> {
        let records = self.log.begin(after)?;
        if self.armed.swap(false, Ordering::SeqCst) {
            let mut admin = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
            admin
                .query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid() \
                     AND backend_type = 'client backend'",
                    &[],
                )
                .unwrap();
        }
        Ok(records)
    }
    fn commit(&self, batch: &[Appended]) -> Result<(), StoreError> {
        self.log.commit(batch)
    }

    fn head(&self) -> Result<Head, StoreError> {
        SharedLog::head(&self.log)
    }
}

#[test]
fn a_connection_terminated_mid_transaction_grants_nothing_and_the_worker_goes_on() {
    // Guards against a claim granted, and its send run, on a transaction the server never committed.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = WorkerName::new("api-1").unwrap();
    let log = Arc::new(Terminating {
        log: PgLog::connect(&url, Role::Worker(worker.clone())).unwrap(),
        url: url.clone(),
        armed: AtomicBool::new(false),
    });
    let ledger = Ledger::open_shared(log.clone(), worker, config()).unwrap();
    let w = ledger.create(new_withdrawal("10")).unwrap();

    log.armed.store(true, Ordering::SeqCst);
    let error = ledger.claim("k-1", &w).unwrap_err();
    assert!(matches!(error, LedgerError::Store(_)), "{error}");
    let (report, _) = payonce_postgres::verify(&url).unwrap();
    assert_eq!(
        report.state.claimed_by(w.id()),
        None,
        "the claim was not committed"
    );

    // The worker connects again (and takes its lock again) and goes on.
    let Claim::Granted(ticket) = ledger.claim("k-1", &w).unwrap() else {
        panic!("the key is free")
    };
    let outcome = sent(ticket.request(), "0x1");
    ledger.complete(ticket, Ok(outcome.clone())).unwrap();
    let (report, _) = payonce_postgres::verify(&url).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    assert_eq!(report.state.outcome("k-1"), Some(outcome));
}

/// A log whose next commit lands but whose answer is lost.
#[derive(Debug)]
struct LostAnswer {
    log: PgLog,
    armed: AtomicBool,
}

impl SharedLog for LostAnswer {
    fn scan(&self, after: u64, visit: Visit<'_>) -> Result<(), StoreError> {
        self.log.scan(after, visit)
    }
    fn begin(&self, after: u64) -> Result<Vec<SharedRecord>, StoreError> {
        self.log.begin(after)
    }
    fn commit(&self, batch: &[Appended]) -> Result<(), StoreError> {
        self.log.commit(batch)?;
        match self.armed.swap(false, Ordering::SeqCst) {
            true => Err(StoreError::Unknown {
                detail: "the answer was lost".to_owned(),
            }),
            false => Ok(()),
        }
    }
    fn head(&self) -> Result<Head, StoreError> {
        SharedLog::head(&self.log)
    }
}

#[test]
fn a_claim_whose_commit_answer_was_lost_is_not_granted_and_recorded_as_never_sent() {
    // Guards against a key stuck as "send running" in a live worker that never sent it.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = WorkerName::new("api-1").unwrap();
    let log = Arc::new(LostAnswer {
        log: PgLog::connect(&url, Role::Worker(worker.clone())).unwrap(),
        armed: AtomicBool::new(false),
    });
    let ledger = Ledger::open_shared(log.clone(), worker, config()).unwrap();
    let w = ledger.create(new_withdrawal("10")).unwrap();
    log.armed.store(true, Ordering::SeqCst);
    assert!(ledger.claim("k-1", &w).is_err(), "not granted");

    // The next decision rebuilds the state, finds the claim, and records
    // that its send never ran.
    drop(ledger.create(new_withdrawal("1")).unwrap());
    let in_flight = ledger.in_flight();
    assert_eq!(in_flight.len(), 1);
    assert!(!in_flight[0].send_running, "no send runs for it");
    assert!(
        in_flight[0]
            .last_error
            .as_ref()
            .unwrap()
            .as_str()
            .contains("no send ran")
    );
    ledger.release("k-1", "never sent", "ops").unwrap();
    let (report, _) = payonce_postgres::verify(&url).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
}

/// What the rail and the clients of the load saw.
#[derive(Default)]
struct Seen {
    /// By withdrawal: the keys whose send went out.
    sends: std::collections::HashMap<String, Vec<String>>,
    /// Key and reference of every acknowledged outcome.
    acks: Vec<(String, String)>,
    /// When the server was up again after its crash.
    restarted_at: Option<Instant>,
}

/// How long after the server is back a worker may still answer that it
/// cannot record: the longest wait between two attempts to connect, and
/// the lookup of a batch whose commit answer was lost.
const SERVING_AGAIN_MAX: Duration = Duration::from_secs(10);

#[test]
fn postgres_stopped_immediately_under_load_loses_no_acknowledged_outcome_and_sends_nothing_twice() {
    // Guards against a server crash under load turning an unknown commit into a second send, or losing an outcome a client was given.
    use std::sync::{Condvar, Mutex};
    let cluster = match payonce_postgres::cluster::Cluster::start() {
        Ok(cluster) => cluster,
        Err(error) if payonce_postgres::cluster::required() => panic!("{error}"),
        Err(error) => return payonce_postgres::cluster::shout(&format!("SKIPPING: {error}")),
    };
    let url = cluster.database().unwrap();
    payonce_postgres::migrate(&url).unwrap();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let setup = payonce_postgres::open(&url, "setup", config()).unwrap();
    let withdrawals: Vec<_> = (0..60)
        .map(|_| setup.create(new_withdrawal("3")).unwrap())
        .collect();
    drop(setup);
    let workers: Vec<Ledger> = (0..2)
        .map(|n| payonce_postgres::open(&url, &format!("api-{n}"), config()).unwrap())
        .collect();
    let seen = Mutex::new(Seen::default());
    let turn = Condvar::new();
    std::thread::scope(|scope| {
        for (n, worker) in workers.iter().enumerate() {
            for thread in 0..3 {
                let (seen, turn, withdrawals) = (&seen, &turn, &withdrawals);
                scope.spawn(move || {
                    for request in withdrawals {
                        let key = format!("api-{n}-t{thread}-{}", request.id());
                        loop {
                            let began_after_restart = seen.lock().unwrap().restarted_at;
                            let result = worker.submit(&key, request, |request| {
                                let mut seen = seen.lock().unwrap();
                                let sends = seen.sends.entry(request.id().to_string()).or_default();
                                sends.push(key.clone());
                                Ok(sent(request, &format!("0x{key}")))
                            });
                            let mut seen = seen.lock().unwrap();
                            match result {
                                Ok(outcome) => {
                                    let reference = outcome.reference().unwrap().to_string();
                                    seen.acks.push((key.clone(), reference));
                                    turn.notify_all();
                                }
                                Err(error) if error.refusal().is_some() => {}
                                // The server is down: try again once it is up.
                                Err(_) if seen.restarted_at.is_none() => {
                                    drop(
                                        turn.wait_while(seen, |seen| seen.restarted_at.is_none())
                                            .unwrap(),
                                    );
                                    continue;
                                }
                                // A call begun before the restart, or one the
                                // backoff of the failed attempts to connect
                                // answers at once, within its bound.
                                Err(error) => {
                                    let serving_by = seen.restarted_at.unwrap() + SERVING_AGAIN_MAX;
                                    assert!(
                                        began_after_restart.is_none()
                                            || Instant::now() < serving_by,
                                        "after the restart: {error}"
                                    );
                                    drop(seen);
                                    std::thread::sleep(Duration::from_millis(20));
                                    continue;
                                }
                            }
                            break;
                        }
                    }
                });
            }
        }
        let seen_now = turn
            .wait_while(seen.lock().unwrap(), |seen| seen.acks.len() < 10)
            .unwrap();
        drop(seen_now);
        cluster.stop_immediate().unwrap();
        cluster.start_server().unwrap();
        seen.lock().unwrap().restarted_at = Some(Instant::now());
        turn.notify_all();
    });
    drop(workers);

    let seen = seen.into_inner().unwrap();
    let (report, _) = payonce_postgres::verify(&url).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    let state = &report.state;
    for (withdrawal, keys) in &seen.sends {
        assert_eq!(keys.len(), 1, "{withdrawal} sent for {keys:?}");
        assert_eq!(state.claimed_by(withdrawal).unwrap().as_str(), keys[0]);
    }
    for (key, reference) in &seen.acks {
        let outcome = state
            .outcome(key)
            .unwrap_or_else(|| panic!("{key}'s outcome is gone"));
        assert_eq!(outcome.reference().unwrap().as_str(), reference);
    }
    assert!(seen.acks.len() >= 10, "the load ran");
}

#[test]
fn a_worker_refuses_to_append_to_a_log_rewound_under_it() {
    // Guards against a worker appending after a restore or a lossy failover took away commits it read, which would re-grant claims whose sends ran.
    let url = database!();
    drop(payonce_postgres::init(&url, config()).unwrap());
    let worker = payonce_postgres::open(&url, "api-1", config()).unwrap();
    let w = worker.create(new_withdrawal("10")).unwrap();
    worker.submit("k-1", &w, |r| Ok(sent(r, "0x1"))).unwrap();
    let last = worker.last_seq();

    // The last batch (k-1's outcome) vanishes, as an asynchronous standby
    // promoted before it received it would not have it.
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let last = i64::try_from(last).unwrap();
    admin
        .batch_execute(&format!(
            "ALTER TABLE payonce.events DISABLE TRIGGER append_only; \
             ALTER TABLE payonce.batches DISABLE TRIGGER append_only; \
             DELETE FROM payonce.events WHERE seq = {last}; \
             DELETE FROM payonce.batches WHERE last_seq = {last};"
        ))
        .unwrap();
    let error = worker.create(new_withdrawal("20")).unwrap_err();
    assert!(
        matches!(&error, LedgerError::Store(StoreError::Damaged { detail, .. }) if detail.contains("rewound")),
        "{error}"
    );
    let events: i64 = admin
        .query_one("SELECT count(*) FROM payonce.events", &[])
        .unwrap()
        .get(0);
    assert_eq!(events, last - 1, "nothing was appended");
}
