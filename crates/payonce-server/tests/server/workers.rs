//! Two services, each a worker of one PostgreSQL ledger, behind one load
//! balancer: a client's next call may reach either, and each answers as
//! the other would.

use std::sync::Arc;

use payonce::{Config, Ledger};
use payonce_server::Limits;
use payonce_server::rail::ScriptedRail;
use reqwest::StatusCode;
use serde_json::Value;

use super::{ALICE, TestService, body};

/// Submits `id` under `key` through `to`; the status, whether it was
/// replayed, and the body.
async fn submit(to: &TestService, id: &str, key: &str) -> (StatusCode, bool, Value) {
    let response = to.submit(ALICE, id, key).await;
    let status = response.status();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    (status, replayed, body(response).await)
}

/// `path` read through `from` as alice.
async fn read(from: &TestService, path: &str) -> Value {
    let response = from
        .http
        .get(from.url(path))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    body(response).await
}

/// A withdrawal created through `creator`, submitted through `sender`, then
/// at once read and retried through `other`: the reads show the decision,
/// the retry replays it, and the rail saw one send.
async fn submitted_then_seen_elsewhere(
    creator: &TestService,
    sender: &TestService,
    other: &TestService,
    key: &str,
) {
    let id = creator.create(ALICE).await;
    let (status, replayed, sent) = submit(sender, &id, key).await;
    assert_eq!((status, replayed), (StatusCode::OK, false), "{sent}");
    let reference = sent["reference"].as_str().unwrap().to_owned();

    let shown = read(other, &format!("/v1/withdrawals/{id}")).await;
    assert_eq!(shown["claim"]["holder"], key, "{shown}");
    assert_eq!(shown["claim"]["state"], "sent", "{shown}");
    assert_eq!(shown["claim"]["reference"], reference.as_str(), "{shown}");
    let by_key = read(other, &format!("/v1/keys/{key}")).await;
    assert_eq!(by_key["outcome"], sent, "{by_key}");

    let (status, replayed, again) = submit(other, &id, key).await;
    assert_eq!((status, replayed), (StatusCode::OK, true), "{again}");
    assert_eq!(again, sent);
}

// Guards against a worker answering from what it alone has seen: a read
// through one worker that misses what another acknowledged before it
// began, a submission refused as unknown because another worker created
// the withdrawal, or a retry through another worker that sends again.
#[test]
fn a_decision_through_one_worker_is_read_and_replayed_through_another_at_once() {
    let Some(url) = payonce_postgres::cluster::test_database() else {
        return;
    };
    drop(payonce_postgres::init(&url, Config::default()).unwrap());
    let open = |worker: &str| -> Ledger {
        payonce_postgres::open(&url, worker, Config::default()).unwrap()
    };
    // The ledgers are dropped after the runtime: PostgreSQL's client runs a
    // runtime of its own, which cannot be dropped inside another's.
    let (a, b) = (open("api-a"), open("api-b"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rail = Arc::new(ScriptedRail::default());
    runtime.block_on(async {
        let start = |ledger: &Ledger| {
            let dir = tempfile::tempdir().unwrap();
            TestService::start_sending_to(ledger.clone(), dir, Limits::default(), rail.clone())
        };
        let (api_a, api_b) = (start(&a).await, start(&b).await);
        // The order: submitted through A, read and retried through B.
        submitted_then_seen_elsewhere(&api_a, &api_a, &api_b, "k-1").await;
        // B has not yet seen a withdrawal A just created, nor A what B just
        // decided.
        submitted_then_seen_elsewhere(&api_a, &api_b, &api_a, "k-2").await;
        for service in [api_a, api_b] {
            service.server.unwrap().shut_down().await;
        }
    });
    drop(runtime);
    assert_eq!(rail.calls().len(), 2, "{:?}", rail.calls());
}

/// `GET /healthz` through `service`: its status and body.
async fn health(service: &TestService) -> (StatusCode, Value) {
    let response = service
        .http
        .get(service.url("/healthz"))
        .send()
        .await
        .unwrap();
    (response.status(), body(response).await)
}

// Guards against a health check that says a worker can serve while it
// reaches no database that takes writes (a load balancer would keep
// sending it submissions it answers 503), one that stays unhealthy once
// the database is back, and a submission sent while nothing can record
// its claim.
#[test]
fn healthz_says_503_while_the_worker_reaches_no_primary_and_200_once_it_does_again() {
    let cluster = match payonce_postgres::cluster::Cluster::start() {
        Ok(cluster) => cluster,
        Err(error) if payonce_postgres::cluster::required() => panic!("{error}"),
        Err(error) => return payonce_postgres::cluster::shout(&format!("SKIPPING: {error}")),
    };
    let url = cluster.database().unwrap();
    payonce_postgres::migrate(&url).unwrap();
    drop(payonce_postgres::init(&url, Config::default()).unwrap());
    let ledger = payonce_postgres::open(&url, "api-a", Config::default()).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rail = Arc::new(ScriptedRail::default());
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let api =
            TestService::start_sending_to(ledger.clone(), dir, Limits::default(), rail.clone())
                .await;
        assert_eq!(health(&api).await.0, StatusCode::OK);
        let id = api.create(ALICE).await;

        cluster.stop_immediate().unwrap();
        let (status, said) = health(&api).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{said}");
        assert!(
            said["type"]
                .as_str()
                .unwrap()
                .ends_with("ledger-unreachable"),
            "{said}"
        );
        let refused = api.submit(ALICE, &id, "k-1").await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(rail.calls().is_empty(), "a send without a committed claim");
        assert_eq!(health(&api).await.0, StatusCode::SERVICE_UNAVAILABLE);

        cluster.start_server().unwrap();
        // Healthy again once the next attempt to connect is due.
        let started = std::time::Instant::now();
        while health(&api).await.0 != StatusCode::OK {
            assert!(
                started.elapsed() < payonce_postgres::RECONNECT_DELAY_MAX * 3,
                "still unhealthy"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let (status, replayed, sent) = submit(&api, &id, "k-1").await;
        assert_eq!((status, replayed), (StatusCode::OK, false), "{sent}");
        api.server.unwrap().shut_down().await;
    });
    drop(runtime);
    drop(ledger);
    assert_eq!(rail.calls().len(), 1, "{:?}", rail.calls());
}
