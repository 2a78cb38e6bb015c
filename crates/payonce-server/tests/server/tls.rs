//! `payonce serve` over TLS in this process: HTTPS answers and plain HTTP
//! on the same port gets no HTTP answer; with a client CA, only a client
//! with a certificate it signed is served, and the others are refused in
//! the handshake, counted by reason; a slow handshake holds no one up,
//! counts against the connection limit and shares its deadline with the
//! headers; a reload takes new files for new connections, and one that
//! cannot read them keeps the old ones.
//!
//! The blocking TLS client of `payonce_tls::testing` runs in the tests'
//! bodies, which are not on the runtime's worker threads: the service goes
//! on serving meanwhile.

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use payonce::Ledger;
use payonce_server::{Limits, ServerTls, ServerTlsFiles, Tokens};
use payonce_tls::testing::{Issued, TestCa, connect, get_on, served_certificate, tls_error};
use reqwest::StatusCode;
use rustls::AlertDescription;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{ALICE, TOKENS, TestService, http_client};

/// A CA, and a server certificate it issued written to `dir`.
fn server_files(dir: &Path, ca: &TestCa, client_ca: Option<&TestCa>) -> (ServerTlsFiles, Issued) {
    let issued = ca.server(&["localhost", "127.0.0.1"]).unwrap();
    let (certificate, key) = issued.write(dir, "server").unwrap();
    let client_ca = client_ca.map(|ca| ca.write(dir, "client-ca").unwrap());
    let files = ServerTlsFiles {
        certificate,
        key,
        client_ca,
    };
    (files, issued)
}

/// A service over TLS on a new ledger, reached through `http`; its tokens
/// are read from `dir/tokens.toml`.
async fn tls_service(files: ServerTlsFiles, http: reqwest::Client) -> TestService {
    tls_service_within(files, http, Limits::default()).await
}

/// [`tls_service`] within `limits`.
async fn tls_service_within(
    files: ServerTlsFiles,
    http: reqwest::Client,
    limits: Limits,
) -> TestService {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::init(dir.path().join("ledger")).unwrap();
    let tokens_file = dir.path().join("tokens.toml");
    std::fs::write(&tokens_file, TOKENS).unwrap();
    let tls = ServerTls::load(files).unwrap();
    TestService::start_from(ledger, dir, http, |setup| {
        setup.limits = limits;
        setup.tokens = Tokens::read(&tokens_file).unwrap();
        setup.tokens_file = Some(tokens_file);
        setup.tls = Some(tls);
    })
    .await
}

fn addr(service: &TestService) -> std::net::SocketAddr {
    service.server.as_ref().unwrap().addr()
}

// Guards against a TLS port that also answers in clear, or a listener
// whose certificate a client of its CA does not accept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_answers_and_plain_http_on_the_same_port_does_not() {
    let certificates = tempfile::tempdir().unwrap();
    let ca = TestCa::new("payonce test CA").unwrap();
    let (files, _) = server_files(certificates.path(), &ca, None);
    let service = tls_service(files, http_client(Some(&ca), None)).await;
    assert!(service.base.starts_with("https://"));
    let id = service.create(ALICE).await;
    let answered = service.submit(ALICE, &id, "k-1").await;
    assert_eq!(answered.status(), StatusCode::OK);

    let plain = format!("http://{}/healthz", addr(&service));
    assert!(http_client(None, None).get(&plain).send().await.is_err());
    let mut tcp = tokio::net::TcpStream::connect(addr(&service))
        .await
        .unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer).await;
    assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");

    let another = TestCa::new("another CA").unwrap();
    let untrusting = connect(addr(&service), &another, None).unwrap_err();
    assert!(
        matches!(
            tls_error(&*untrusting),
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))
        ),
        "{untrusting:?}"
    );
}

// Guards against a handshake run in the accept loop, where one client that
// never speaks holds up every other, or one that never ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_handshake_holds_up_no_one_and_is_cut_off_at_the_header_read_time() {
    let certificates = tempfile::tempdir().unwrap();
    let ca = TestCa::new("payonce test CA").unwrap();
    let (files, _) = server_files(certificates.path(), &ca, None);
    let limits = Limits {
        header_read_time_max: Duration::from_millis(300),
        ..Limits::default()
    };
    let service = tls_service_within(files, http_client(Some(&ca), None), limits).await;
    let mut stalled = tokio::net::TcpStream::connect(addr(&service))
        .await
        .unwrap();
    let mut other = connect(addr(&service), &ca, None).unwrap();
    assert_eq!(get_on(&mut other, "/healthz", None).unwrap().0, 200);
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), stalled.read_to_end(&mut answer));
    assert!(
        closed.await.is_ok(),
        "the stalled connection was never cut off"
    );
    assert!(answer.is_empty(), "{answer:?}");
}

/// The TLS error that refused a client of `ca` showing `identity`: in the
/// handshake, or (TLS 1.3, where the server checks the client's
/// certificate last) with the first answer.
fn refusal(addr: std::net::SocketAddr, ca: &TestCa, identity: Option<&Issued>) -> rustls::Error {
    let error = match connect(addr, ca, identity) {
        Ok(mut stream) => match get_on(&mut stream, "/healthz", None) {
            Ok(answered) => panic!("served: {answered:?}"),
            Err(error) => error.into(),
        },
        Err(error) => error,
    };
    tls_error(&*error)
        .cloned()
        .unwrap_or_else(|| panic!("not a TLS refusal: {error:?}"))
}

// Guards against mutual TLS that serves a client without a certificate,
// or with one another CA signed, and handshake failures no one can see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_its_clients_are_served() {
    let certificates = tempfile::tempdir().unwrap();
    let (ca, clients) = (
        TestCa::new("server CA").unwrap(),
        TestCa::new("client CA").unwrap(),
    );
    let (files, _) = server_files(certificates.path(), &ca, Some(&clients));
    let alice = clients.client("alice").unwrap();
    let service = tls_service(files, http_client(Some(&ca), Some(&alice))).await;
    let id = service.create(ALICE).await;
    assert_eq!(
        service.submit(ALICE, &id, "k-1").await.status(),
        StatusCode::OK
    );

    let stranger = TestCa::new("stranger CA")
        .unwrap()
        .client("mallory")
        .unwrap();
    let anonymous = refusal(addr(&service), &ca, None);
    assert_eq!(
        anonymous,
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired)
    );
    let unknown = refusal(addr(&service), &ca, Some(&stranger));
    assert_eq!(
        unknown,
        rustls::Error::AlertReceived(AlertDescription::UnknownCA)
    );
    let metrics = service.http.get(service.url("/metrics")).send().await;
    let metrics = metrics.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("payonce_tls_handshake_failures_total{reason=\"refused\"} 2\n"),
        "{metrics}"
    );
}

// Guards against a client that never finishes its handshake while the
// service counts it nowhere: it holds a connection, so past the limit the
// next client waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_handshake_counts_against_the_connection_limit() {
    let certificates = tempfile::tempdir().unwrap();
    let ca = TestCa::new("payonce test CA").unwrap();
    let (files, _) = server_files(certificates.path(), &ca, None);
    let limits = Limits {
        connections_max: 1,
        ..Limits::default()
    };
    let service = tls_service_within(files, http_client(Some(&ca), None), limits).await;
    let stalled = tokio::net::TcpStream::connect(addr(&service))
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
        "a second connection waits for the stalled handshake"
    );
    drop(stalled);
    let served = service.http.get(service.url("/healthz")).send().await;
    assert_eq!(served.unwrap().status(), StatusCode::OK);
}

// Guards against a client that takes the whole header read time for its
// handshake and then as long again for its headers: one deadline, from
// the accept, covers both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_and_the_headers_share_one_deadline() {
    let certificates = tempfile::tempdir().unwrap();
    let ca = TestCa::new("payonce test CA").unwrap();
    let (files, _) = server_files(certificates.path(), &ca, None);
    let header_read_time_max = Duration::from_secs(2);
    let limits = Limits {
        header_read_time_max,
        ..Limits::default()
    };
    let service = tls_service_within(files, http_client(Some(&ca), None), limits).await;
    let accepted = Instant::now();
    let tcp = std::net::TcpStream::connect(addr(&service)).unwrap();
    // A slow client: silent for most of the header read time, then a
    // handshake, then half a request.
    std::thread::sleep(header_read_time_max * 4 / 5);
    let config = std::sync::Arc::new(payonce_tls::testing::client_config(Some(&ca), None).unwrap());
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(config, name).unwrap();
    let mut slow = rustls::StreamOwned::new(connection, tcp);
    slow.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
    slow.flush().unwrap();
    let mut answer = Vec::new();
    let _ = slow.read_to_end(&mut answer);
    let closed_after = accepted.elapsed();
    assert!(!String::from_utf8_lossy(&answer).contains("200 OK"));
    // By the deadline, with room for a loaded machine; two header read
    // times if the headers got a deadline of their own.
    assert!(
        closed_after < header_read_time_max * 3 / 2,
        "closed after {closed_after:?}"
    );
}

// Guards against a reload that drops the files in use for ones it cannot
// read, one whose new certificate or tokens are not used, or one that cuts
// connections already open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_takes_new_files_for_new_connections_and_keeps_the_old_on_an_error() {
    let certificates = tempfile::tempdir().unwrap();
    let ca = TestCa::new("payonce test CA").unwrap();
    let (files, first) = server_files(certificates.path(), &ca, None);
    let key = files.key.clone();
    let service = tls_service(files, http_client(Some(&ca), None)).await;
    let server = service.server.as_ref().unwrap();
    let mut open = connect(addr(&service), &ca, None).unwrap();
    assert_eq!(served_certificate(&open), first.der().ok());

    std::fs::write(&key, "not a key").unwrap();
    let tokens_file = service._dir.path().join("tokens.toml");
    std::fs::write(
        &tokens_file,
        "[clients]\ncarol = \"carol-token-0123456789\"\n",
    )
    .unwrap();
    let reload = server.reload().await;
    assert!(
        reload.refused() && matches!(reload.tls, Some(Err(_))),
        "{reload}"
    );
    assert!(matches!(reload.tokens, Some(Ok(1))), "{reload}");
    let line = reload.to_string();
    assert!(line.contains("kept the listener's old TLS files") && line.contains("server.key"));
    let again = connect(addr(&service), &ca, None).unwrap();
    assert_eq!(
        served_certificate(&again),
        first.der().ok(),
        "the old files stay"
    );
    let get = |open: &mut _, token| get_on(open, "/v1/withdrawals/w-1", Some(token)).unwrap().0;
    assert_eq!(get(&mut open, ALICE), 401);
    assert_eq!(get(&mut open, "carol-token-0123456789"), 404);

    let second = ca.server(&["localhost", "127.0.0.1"]).unwrap();
    second.write(certificates.path(), "server").unwrap();
    let reload = server.reload().await;
    assert!(!reload.refused(), "{reload}");
    let fresh = connect(addr(&service), &ca, None).unwrap();
    assert_eq!(served_certificate(&fresh), second.der().ok());
    assert_eq!(served_certificate(&open), first.der().ok());
    assert_eq!(get_on(&mut open, "/healthz", None).unwrap().0, 200);
}
