//! The service's limits, and a shutdown that waits for running sends.

use std::time::Duration;

use payonce_server::Limits;
use payonce_server::rail::ScriptedSend;
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{ALICE, TestService, problem};

// Guards against a request whose headers have no bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_past_the_limit_are_431() {
    let service = TestService::start().await;
    let response = service
        .http
        .get(service.url("/healthz"))
        .header(
            "x-filler",
            "f".repeat(payonce_server::server::HEADERS_LEN_MAX + 1),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    );
    let mut many = service.http.get(service.url("/healthz"));
    for field in 0..=payonce_server::server::HEADERS_COUNT_MAX {
        many = many.header(format!("x-field-{field}"), "1");
    }
    assert_eq!(
        many.send().await.unwrap().status(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    );
}

// Guards against a client that holds a connection open by never finishing
// its headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_slow_to_send_its_headers_is_cut_off() {
    let limits = Limits {
        header_read_time_max: Duration::from_millis(200),
        ..Limits::default()
    };
    let service = TestService::start_with(limits).await;
    let addr = service.server.as_ref().unwrap().addr();
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut answer)).await;
    assert!(closed.is_ok(), "the connection is closed");
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.contains("200 OK"), "{answer}");
}

// Guards against a slow request holding its client forever, and a send
// that the time limit cuts short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_time_is_503_and_its_send_goes_on() {
    let limits = Limits {
        request_time_max: Duration::from_millis(200),
        ..Limits::default()
    };
    let service = TestService::start_with(limits).await;
    let id = service.create(ALICE).await;
    service.rail.then(ScriptedSend::Hold);
    let timed_out = service.submit(ALICE, &id, "k-1").await;
    let timed_out = problem(
        timed_out,
        StatusCode::SERVICE_UNAVAILABLE,
        "request-timeout",
    )
    .await;
    assert!(timed_out["detail"].as_str().unwrap().contains("same key"));
    assert_eq!(service.rail.held().await.as_deref(), Some("alice:k-1"));
    service.rail.release();
    // The send goes on without its request and records its outcome.
    let key = &service.ledger;
    while key.outcome("alice:k-1").unwrap().is_none() {
        tokio::task::yield_now().await;
    }
    let replay = service.submit(ALICE, &id, "k-1").await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
}

// Guards against a service that takes more connections than its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_wait_for_one_to_close() {
    let limits = Limits {
        connections_max: 1,
        ..Limits::default()
    };
    let service = TestService::start_with(limits).await;
    let addr = service.server.as_ref().unwrap().addr();
    let mut holder = tokio::net::TcpStream::connect(addr).await.unwrap();
    // Half a request: the connection is served and busy.
    holder
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    let waiting = service
        .http
        .get(service.url("/healthz"))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(
        waiting.unwrap_err().is_timeout(),
        "a second connection waits"
    );
    drop(holder);
    let served = service
        .http
        .get(service.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), StatusCode::OK);
}

// Guards against a shutdown that cuts a running send short or leaves its
// outcome unrecorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_waits_for_running_sends_and_records_them() {
    let mut service = TestService::start().await;
    let id = service.create(ALICE).await;
    service.rail.then(ScriptedSend::Hold);
    let running = service.submit_in_task(ALICE, &id, "k-1");
    service.rail.held().await;
    let server = service.server.take().unwrap();
    let addr = server.addr();
    let stopped = tokio::spawn(server.shut_down());
    // Once the listener is closed the shutdown is under way; only then
    // does the rail answer.
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        tokio::task::yield_now().await;
    }
    assert!(
        !stopped.is_finished(),
        "the shutdown waits for the running send"
    );
    service.rail.release();
    assert_eq!(running.await.unwrap().unwrap().status(), StatusCode::OK);
    stopped.await.unwrap();
    assert!(service.ledger.in_flight().is_empty());
    assert!(service.ledger.outcome("alice:k-1").unwrap().is_some());
    let refused = service.http.get(service.url("/healthz")).send().await;
    assert!(refused.is_err(), "a stopped server takes no connection");
}
