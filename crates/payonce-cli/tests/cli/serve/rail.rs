//! `payonce serve`'s HTTP rail from the command line: its URL from the
//! environment, and proxy variables that never carry a send elsewhere.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use payonce_tls::testing::read_message;
use reqwest::StatusCode;
use serde_json::Value;

use super::served::Served;
use super::{ALICE, TOKENS};
use crate::fixture::arg;

/// A rail client on 127.0.0.1 that answers every send with a reference,
/// counting them, on a thread of its own.
fn start_rail() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sends = Arc::new(AtomicUsize::new(0));
    let counted = sends.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let Ok(_) = read_message(&mut stream) else {
                continue;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            let body = r#"{"reference":"0xfeed"}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (addr, sends)
}

/// A proxy that takes connections, counts them, and closes them.
fn start_proxy() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    (addr, connections)
}

// Guards against proxy variables in the service's environment carrying a
// plain http:// send to loopback off the host, to a proxy the loopback
// rule never checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_variables_never_carry_a_send() {
    let scratch = tempfile::tempdir().unwrap();
    let tokens = scratch.path().join("tokens.toml");
    std::fs::write(&tokens, TOKENS).unwrap();
    let (rail, sends) = start_rail();
    let (proxy, proxied) = start_proxy();
    let proxy = format!("http://{proxy}");
    let ledger = arg(&scratch.path().join("ledger"));
    let rail_url = format!("http://{rail}/send");
    let args = [
        "--init",
        "--dir",
        &ledger,
        "--tokens",
        &arg(&tokens),
        "--rail-url",
        &rail_url,
    ]
    .map(str::to_owned);
    let variables = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];
    let env: Vec<(&str, &str)> = variables.iter().map(|&name| (name, &*proxy)).collect();
    let mut served = Served::launch_with(&args, &env);
    let base = served.listening();
    let http = super::clients::http_client(None, None);
    let created = http
        .post(format!("{base}/v1/withdrawals"))
        .bearer_auth(ALICE)
        .json(&serde_json::json!({"amount": "3", "currency": "USDC", "destination": "0xabc"}))
        .send()
        .await
        .unwrap();
    let created: Value = created.json().await.unwrap();
    let id = created["id"].as_str().unwrap();
    let sent = http
        .post(format!("{base}/v1/withdrawals/{id}/submissions"))
        .bearer_auth(ALICE)
        .header("Idempotency-Key", "\"k-1\"")
        .send()
        .await
        .unwrap();
    let status = sent.status();
    assert_eq!(status, StatusCode::OK, "{}", sent.text().await.unwrap());
    assert_eq!(sends.load(Ordering::SeqCst), 1);
    assert_eq!(proxied.load(Ordering::SeqCst), 0);
    let (_, stderr) = served.stop();
    assert!(
        stderr.contains(&format!("sending through the HTTP rail at {rail} in clear")),
        "{stderr}"
    );
}

// Guards against a rail URL (which may hold a password) that only the
// command line can give, where ps shows it to every user of the host, or
// one shown by --help when it comes from the environment.
#[test]
fn the_rail_url_comes_from_the_environment_and_is_shown_nowhere() {
    let scratch = tempfile::tempdir().unwrap();
    let tokens = scratch.path().join("tokens.toml");
    std::fs::write(&tokens, TOKENS).unwrap();
    let ledger = scratch.path().join("never");
    let secret_url = "http://payonce:rail-password-42@10.0.0.7/send";
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_payonce"))
            .args(args)
            .env("PAYONCE_RAIL_URL", secret_url)
            .output()
            .unwrap()
    };
    let refused = run(&[
        "serve",
        "--init",
        "--dir",
        &arg(&ledger),
        "--tokens",
        &arg(&tokens),
    ]);
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--rail-url is plain http:// to 10.0.0.7:80, which is not loopback"),
        "{stderr}"
    );
    assert!(!ledger.exists(), "nothing was written");
    let help = run(&["serve", "--help"]);
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("PAYONCE_RAIL_URL"), "{help}");
    for shown in [stderr, help] {
        assert!(!shown.contains("rail-password-42"), "{shown}");
    }
}

// Guards against an unknown outcome (a key an operator must close) that
// the service tells no one but a tracing subscriber the binary does not
// have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_unknown_outcome_is_told_on_stderr() {
    let scratch = tempfile::tempdir().unwrap();
    let tokens = scratch.path().join("tokens.toml");
    std::fs::write(&tokens, TOKENS).unwrap();
    let ledger = arg(&scratch.path().join("ledger"));
    let args = [
        "--init",
        "--dir",
        &ledger,
        "--tokens",
        &arg(&tokens),
        "--rail-unknown-rate",
        "1",
    ]
    .map(str::to_owned);
    let (served, base) = Served::start_capturing(&args);
    let http = super::clients::http_client(None, None);
    let created = http
        .post(format!("{base}/v1/withdrawals"))
        .bearer_auth(ALICE)
        .json(&serde_json::json!({"amount": "3", "currency": "USDC", "destination": "0xabc"}))
        .send()
        .await
        .unwrap();
    let created: Value = created.json().await.unwrap();
    let id = created["id"].as_str().unwrap();
    let lost = http
        .post(format!("{base}/v1/withdrawals/{id}/submissions"))
        .bearer_auth(ALICE)
        .header("Idempotency-Key", "\"k-1\"")
        .send()
        .await
        .unwrap();
    assert_eq!(lost.status(), StatusCode::BAD_GATEWAY);
    let (_, stderr) = served.stop();
    assert!(
        stderr.contains(&format!(
            "the outcome of alice:k-1 (withdrawal {id}) is unknown"
        )) && stderr.contains("the key stays claimed until an operator closes it"),
        "{stderr}"
    );
}
