//! `payonce serve` over HTTPS as a process: a real HTTPS client is
//! answered and plain HTTP on the port is not; with `--tls-client-ca` only
//! a client with a certificate of that CA is served, and one without is
//! refused in the handshake; a certificate rotated on disk is served after
//! SIGHUP, without a restart, while a connection opened before keeps
//! working. The blocking TLS client of `payonce_tls::testing` runs in the
//! tests' bodies, off the runtime's worker threads.

use std::net::SocketAddr;
use std::path::Path;

use payonce_tls::testing::{TestCa, connect, get_on, served_certificate, tls_error};
use reqwest::StatusCode;
use rustls::AlertDescription;

use super::clients::http_client;
use super::served::Served;
use super::{ALICE, TOKENS};
use crate::fixture::arg;

/// `payonce serve --init` on a new ledger in `dir` with the TLS files
/// `tls`, and the tokens of the tests.
fn start_tls(dir: &Path, tls: &[&str]) -> (Served, String) {
    let tokens = dir.join("tokens.toml");
    std::fs::write(&tokens, TOKENS).unwrap();
    let ledger = arg(&dir.join("ledger"));
    let mut args: Vec<String> = ["--init", "--dir", &ledger, "--tokens", &arg(&tokens)]
        .map(str::to_owned)
        .into();
    args.extend(tls.iter().map(|&flag| flag.to_owned()));
    let (served, base) = Served::start(&args);
    assert!(base.starts_with("https://"), "{base}");
    (served, base)
}

fn addr_of(base: &str) -> SocketAddr {
    base.trim_start_matches("https://").parse().unwrap()
}

// Guards against a certificate rotated on disk that needs a restart, a
// reload that cuts the connections already open, or a TLS port that also
// answers in clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_after_sighup_and_open_connections_keep_working() {
    let scratch = tempfile::tempdir().unwrap();
    let ca = TestCa::new("payonce test CA").unwrap();
    let first = ca.server(&["localhost", "127.0.0.1"]).unwrap();
    let (certificate, key) = first.write(scratch.path(), "server").unwrap();
    let tls = ["--tls-cert", &arg(&certificate), "--tls-key", &arg(&key)];
    let (mut served, base) = start_tls(scratch.path(), &tls);
    let https = http_client(Some(&ca), None);
    let healthz = format!("{base}/healthz");
    assert_eq!(
        https.get(&healthz).send().await.unwrap().status(),
        StatusCode::OK
    );
    let plain = healthz.replacen("https://", "http://", 1);
    assert!(http_client(None, None).get(&plain).send().await.is_err());

    let mut open = connect(addr_of(&base), &ca, None).unwrap();
    assert_eq!(served_certificate(&open), first.der().ok());
    assert_eq!(get_on(&mut open, "/healthz", None).unwrap().0, 200);
    let second = ca.server(&["localhost", "127.0.0.1"]).unwrap();
    second.write(scratch.path(), "server").unwrap();
    served.signal("HUP");
    let reloaded = served.next_line();
    assert!(
        reloaded.contains("reloaded") && reloaded.contains("the listener's TLS files"),
        "{reloaded}"
    );
    assert!(!reloaded.contains("kept"), "{reloaded}");

    let fresh = connect(addr_of(&base), &ca, None).unwrap();
    assert_eq!(served_certificate(&fresh), second.der().ok());
    assert_eq!(served_certificate(&open), first.der().ok());
    assert_eq!(get_on(&mut open, "/healthz", None).unwrap().0, 200);
    let created = http_client(Some(&ca), None)
        .post(format!("{base}/v1/withdrawals"))
        .bearer_auth(ALICE)
        .json(&serde_json::json!({"amount": "3", "currency": "USDC", "destination": "0xabc"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let (printed, _) = served.stop();
    assert!(printed.contains("stopped"), "{printed}");
}

// Guards against mutual TLS that serves a client without a certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_a_client_without_a_certificate_is_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let (ca, clients) = (
        TestCa::new("server CA").unwrap(),
        TestCa::new("client CA").unwrap(),
    );
    let (certificate, key) = ca
        .server(&["localhost", "127.0.0.1"])
        .unwrap()
        .write(scratch.path(), "server")
        .unwrap();
    let client_ca = clients.write(scratch.path(), "clients").unwrap();
    let tls = [
        "--tls-cert",
        &arg(&certificate),
        "--tls-key",
        &arg(&key),
        "--tls-client-ca",
        &arg(&client_ca),
    ];
    let (_served, base) = start_tls(scratch.path(), &tls);
    let healthz = format!("{base}/healthz");
    // In TLS 1.3 the server checks the client's certificate last, so its
    // refusal comes with the first read.
    let refused: payonce_tls::testing::TestError = match connect(addr_of(&base), &ca, None) {
        Ok(mut anonymous) => get_on(&mut anonymous, "/healthz", None).unwrap_err().into(),
        Err(error) => error,
    };
    assert_eq!(
        tls_error(&*refused),
        Some(&rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired
        )),
        "{refused:?}"
    );
    let alice = clients.client("alice").unwrap();
    let known = http_client(Some(&ca), Some(&alice))
        .get(&healthz)
        .send()
        .await;
    assert_eq!(known.unwrap().status(), StatusCode::OK);
}
