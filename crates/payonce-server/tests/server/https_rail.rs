//! The HTTP rail over mutual TLS, against a rail served here on
//! tokio-rustls that requires a client certificate and records every send:
//! a submission is sent once and replayed on retry; a rail the adapter
//! must not trust, or one that refuses the adapter's certificate, leaves
//! the key claimed with an error that says what failed and that the rail
//! took no request; a TLS connection that fails once the request was sent
//! leaves it claimed saying the rail may have acted on it; a reload takes
//! a new client certificate for the next send.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use payonce::Ledger;
use payonce_server::rail::{HttpRail, HttpRailConfig};
use payonce_tls::testing::{Issued, TestCa, read_message};
use reqwest::StatusCode;
use serde_json::{Value, json};

use payonce_server::REPLAYED_HEADER;

use super::{ALICE, TestService, body, http_client, problem};

/// Every body the rail received.
type Sends = Arc<Mutex<Vec<Value>>>;

async fn record(State(sends): State<Sends>, Json(send): Json<Value>) -> Json<Value> {
    let mut sends = sends.lock().unwrap();
    sends.push(send);
    Json(json!({"reference": format!("0xfeed-{}", sends.len())}))
}

/// A rail on 127.0.0.1 showing `certificate`, serving only clients with a
/// certificate `clients` signed.
async fn start_rail(certificate: &Issued, clients: &TestCa) -> (SocketAddr, Sends) {
    let config = payonce_tls::testing::server_config(certificate, Some(clients)).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let sends = Sends::default();
    let app = axum::Router::new()
        .route("/send", post(record))
        .with_state(sends.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                // A refused handshake is what some tests are about.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = TowerToHyperService::new(app);
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service);
                let _ = connection.await;
            });
        }
    });
    (addr, sends)
}

/// The CAs of one test: the one that signs the rail's certificate and the
/// one the rail takes client certificates from; and their files.
struct Pki {
    dir: tempfile::TempDir,
    rail_ca: TestCa,
    client_ca: TestCa,
}

impl Pki {
    fn new() -> Pki {
        Pki {
            dir: tempfile::tempdir().unwrap(),
            rail_ca: TestCa::new("rail CA").unwrap(),
            client_ca: TestCa::new("client CA").unwrap(),
        }
    }

    /// The adapter's configuration: trusting `rail_ca`, showing a
    /// certificate `client_ca` signed.
    fn config(&self, addr: SocketAddr, client: Option<&Issued>) -> HttpRailConfig {
        let dir = self.dir.path();
        let (certificate, key) = match client {
            Some(issued) => {
                let (certificate, key) = issued.write(dir, "payonce").unwrap();
                (Some(certificate), Some(key))
            }
            None => (None, None),
        };
        HttpRailConfig {
            ca: Some(self.rail_ca.write(dir, "rail-ca").unwrap()),
            client_certificate: certificate,
            client_key: key,
            ..HttpRailConfig::new(
                &format!("https://localhost:{}/send", addr.port()),
                Duration::from_secs(5),
            )
        }
    }

    fn ca_file(&self) -> String {
        Path::new(self.dir.path())
            .join("rail-ca.crt")
            .display()
            .to_string()
    }
}

/// A service sending through `rail`.
async fn service_with(rail: HttpRail) -> TestService {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::init(dir.path()).unwrap();
    TestService::start_from(ledger, dir, http_client(None, None), |setup| {
        setup.rail = Arc::new(rail);
    })
    .await
}

// Guards against a rail over mutual TLS that is never reached, or a retry
// that sends a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_goes_once_over_mutual_tls_and_a_retry_replays_it() {
    let pki = Pki::new();
    let served = pki.rail_ca.server(&["localhost"]).unwrap();
    let (addr, sends) = start_rail(&served, &pki.client_ca).await;
    let ours = pki.client_ca.client("payonce").unwrap();
    let rail = HttpRail::with_config(pki.config(addr, Some(&ours))).unwrap();
    let service = service_with(rail).await;
    let id = service.create(ALICE).await;
    let first = service.submit(ALICE, &id, "k-1").await;
    assert_eq!(first.status(), StatusCode::OK);
    let first = body(first).await;
    assert_eq!(first["reference"], "0xfeed-1");
    let again = service.submit(ALICE, &id, "k-1").await;
    assert_eq!(again.headers()[REPLAYED_HEADER], "true");
    assert_eq!(body(again).await, first);
    let sends = sends.lock().unwrap().clone();
    assert_eq!(sends.len(), 1, "{sends:?}");
    assert_eq!(sends[0]["key"], "alice:k-1");
}

/// Submits a new withdrawal under `k-1`, expects an unknown outcome, and
/// returns its error, after checking the key stays claimed.
async fn unknown_outcome(service: &TestService) -> String {
    let id = service.create(ALICE).await;
    let answered = service.submit(ALICE, &id, "k-1").await;
    let answered = problem(answered, StatusCode::BAD_GATEWAY, "outcome-unknown").await;
    let key = service
        .http
        .get(service.url("/v1/keys/k-1"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    let key = body(key).await;
    assert_eq!(key["status"], "in_flight", "{key}");
    assert_eq!(key["held"], true, "{key}");
    answered["detail"].as_str().unwrap().to_owned()
}

// Guards against an adapter that trusts a rail its roots did not vouch
// for, or that names a certificate problem only as a lost connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_or_misnamed_rail_certificate_leaves_the_key_claimed_and_says_why() {
    let pki = Pki::new();
    let ours = pki.client_ca.client("payonce").unwrap();
    let impostor = TestCa::new("unrelated CA").unwrap();
    let cases = [
        (
            impostor.server(&["localhost"]).unwrap(),
            "is not signed by a CA we trust",
        ),
        (
            pki.rail_ca.server(&["rail.example"]).unwrap(),
            "does not cover the rail's host name",
        ),
    ];
    for (served, words) in cases {
        let (addr, sends) = start_rail(&served, &pki.client_ca).await;
        let rail = HttpRail::with_config(pki.config(addr, Some(&ours))).unwrap();
        let service = service_with(rail).await;
        let error = unknown_outcome(&service).await;
        assert!(error.contains(words), "{error}");
        assert!(error.contains("handshake") && error.contains("took no request"));
        assert!(
            error.contains(&format!("localhost:{}", addr.port())),
            "{error}"
        );
        assert!(
            error.contains(&format!("--rail-ca {}", pki.ca_file())),
            "{error}"
        );
        assert!(sends.lock().unwrap().is_empty());
    }
}

// Guards against a rail's refusal of our certificate that reads as
// anything but that, or a key given back for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rail_that_refuses_our_certificate_leaves_the_key_claimed_and_says_so() {
    let pki = Pki::new();
    let served = pki.rail_ca.server(&["localhost"]).unwrap();
    let (addr, sends) = start_rail(&served, &pki.client_ca).await;
    let stranger = TestCa::new("stranger CA")
        .unwrap()
        .client("payonce")
        .unwrap();
    let cases = [
        (Some(&stranger), "the rail refused our client certificate"),
        (
            None,
            "the rail requires a client certificate and we showed none",
        ),
    ];
    let mut services = Vec::new();
    for (client, words) in cases {
        let rail = HttpRail::with_config(pki.config(addr, client)).unwrap();
        let service = service_with(rail).await;
        let error = unknown_outcome(&service).await;
        assert!(error.contains(words), "{error}");
        assert!(error.contains("took no request"), "{error}");
        assert!(
            error.contains(&format!("localhost:{}", addr.port())),
            "{error}"
        );
        services.push(service);
    }
    assert!(sends.lock().unwrap().is_empty());

    // The right certificate written over the files is taken by a reload,
    // for the next send.
    let service = &services[0];
    let ours = pki.client_ca.client("payonce").unwrap();
    ours.write(pki.dir.path(), "payonce").unwrap();
    let reload = service.server.as_ref().unwrap().reload().await;
    assert!(matches!(reload.rail, Some(Ok(()))), "{reload}");
    let id = service.create(ALICE).await;
    assert_eq!(
        service.submit(ALICE, &id, "k-2").await.status(),
        StatusCode::OK
    );
    assert_eq!(sends.lock().unwrap().len(), 1);
}

/// A rail that completes the handshake, reads the whole request, counts
/// it, and then answers with a record that cannot be decrypted: written
/// under TLS's framing, but not by the connection's keys. It runs on a
/// thread of its own, with blocking I/O.
fn start_garbling_rail(certificate: &Issued, clients: &TestCa) -> (SocketAddr, Sends) {
    let config = payonce_tls::testing::server_config(certificate, Some(clients)).unwrap();
    let config = Arc::new(config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sends = Sends::default();
    let received = sends.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { return };
            let connection = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(connection, tcp);
            let Ok((_, body)) = read_message(&mut tls) else {
                continue;
            };
            received
                .lock()
                .unwrap()
                .push(serde_json::from_slice(&body).unwrap());
            // An application-data record of 32 bytes the client cannot
            // decrypt, straight onto the socket under the TLS layer.
            let mut record = vec![0x17, 0x03, 0x03, 0x00, 0x20];
            record.extend_from_slice(&[0x42; 32]);
            tls.sock.write_all(&record).unwrap();
            let _ = tls.sock.read_to_end(&mut Vec::new());
        }
    });
    (addr, sends)
}

// Guards against a TLS failure after the rail read the request told as a
// failed handshake, which the runbook reads as "the rail took nothing": a
// release on that word would pay twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_failure_after_the_request_was_sent_says_the_rail_may_have_acted() {
    let pki = Pki::new();
    let served = pki.rail_ca.server(&["localhost"]).unwrap();
    let (addr, sends) = start_garbling_rail(&served, &pki.client_ca);
    let ours = pki.client_ca.client("payonce").unwrap();
    let rail = HttpRail::with_config(pki.config(addr, Some(&ours))).unwrap();
    let service = service_with(rail).await;
    let error = unknown_outcome(&service).await;
    assert!(
        error.contains("failed after the request was sent")
            && error.contains("the rail may have acted on it"),
        "{error}"
    );
    assert!(!error.contains("handshake"), "{error}");
    let sends = sends.lock().unwrap().clone();
    assert_eq!(sends.len(), 1, "{sends:?}");
    assert_eq!(sends[0]["key"], "alice:k-1");
}
