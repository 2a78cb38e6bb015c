//! `payonce serve` over TLS in this process: HTTPS answers and plain HTTP
//! on the same port gets no HTTP answer; with a client CA, only a client
//! with a certificate it signed is served; a reload takes new files for new
//! connections, and one that cannot read them keeps the old ones.

use std::path::Path;

use std::time::Duration;

use payonce::Ledger;
use payonce_server::{Limits, ServerTls, ServerTlsFiles, Tokens};
use payonce_tls::testing::{Issued, TestCa};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{
    ALICE, TOKENS, TestService, der, get_on, http_client, served_certificate, tls_connect,
};

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

    let untrusting = http_client(Some(&TestCa::new("another CA").unwrap()), None);
    let https = format!("{}/healthz", service.base);
    assert!(untrusting.get(&https).send().await.is_err());
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
    let mut other = tls_connect(addr(&service), &ca, None).await.unwrap();
    assert_eq!(get_on(&mut other, "/healthz", ALICE).await.0, 200);
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), stalled.read_to_end(&mut answer));
    assert!(
        closed.await.is_ok(),
        "the stalled connection was never cut off"
    );
    assert!(answer.is_empty(), "{answer:?}");
}

// Guards against mutual TLS that serves a client without a certificate,
// or with one another CA signed.
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

    let url = format!("{}/v1/withdrawals/{id}", service.base);
    let stranger = TestCa::new("stranger CA")
        .unwrap()
        .client("mallory")
        .unwrap();
    for client in [
        http_client(Some(&ca), None),
        http_client(Some(&ca), Some(&stranger)),
    ] {
        let refused = client.get(&url).bearer_auth(ALICE).send().await;
        assert!(refused.is_err(), "{refused:?}");
    }
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
    let mut open = tls_connect(addr(&service), &ca, None).await.unwrap();
    assert_eq!(served_certificate(&open), der(&first));

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
    let again = tls_connect(addr(&service), &ca, None).await.unwrap();
    assert_eq!(
        served_certificate(&again),
        der(&first),
        "the old files stay"
    );
    assert_eq!(get_on(&mut open, "/v1/withdrawals/w-1", ALICE).await.0, 401);
    assert_eq!(
        get_on(&mut open, "/v1/withdrawals/w-1", "carol-token-0123456789")
            .await
            .0,
        404
    );

    let second = ca.server(&["localhost", "127.0.0.1"]).unwrap();
    second.write(certificates.path(), "server").unwrap();
    let reload = server.reload().await;
    assert!(!reload.refused(), "{reload}");
    let fresh = tls_connect(addr(&service), &ca, None).await.unwrap();
    assert_eq!(served_certificate(&fresh), der(&second));
    assert_eq!(served_certificate(&open), der(&first));
    assert_eq!(get_on(&mut open, "/healthz", ALICE).await.0, 200);
}
