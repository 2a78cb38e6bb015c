//! `payonce serve` stopped with SIGTERM while a send runs, and its rail
//! log: one line per transfer that left, synced before the answer.

use std::path::Path;

use payonce_server::rail::RailLogLine;
use reqwest::StatusCode;
use serde_json::Value;

use super::served::Served;
use super::{ALICE, TOKENS};
use crate::fixture::{arg, payonce};

/// Every line of the rail log.
fn rail_log(file: &Path) -> Vec<RailLogLine> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

async fn create(http: &reqwest::Client, base: &str) -> String {
    let created = http
        .post(format!("{base}/v1/withdrawals"))
        .bearer_auth(ALICE)
        .json(&serde_json::json!({"amount": "3", "currency": "USDC", "destination": "0xabc"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let created: Value = created.json().await.unwrap();
    created["id"].as_str().unwrap().to_owned()
}

async fn submit(http: &reqwest::Client, base: &str, id: &str, key: &str) -> reqwest::Response {
    http.post(format!("{base}/v1/withdrawals/{id}/submissions"))
        .bearer_auth(ALICE)
        .header("Idempotency-Key", format!("\"{key}\""))
        .send()
        .await
        .unwrap()
}

/// Waits until `key`'s send is running.
async fn until_sending(http: &reqwest::Client, base: &str, key: &str) {
    loop {
        let shown = http
            .get(format!("{base}/v1/keys/{key}"))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap();
        if shown.status() == StatusCode::OK {
            let shown: Value = shown.json().await.unwrap();
            if shown["send_running"] == true {
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

// Guards against a SIGTERM that cuts a running send short, exits before
// its outcome is recorded, or a rail log that misses or repeats a send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_waits_for_the_running_send_and_the_rail_log_counts_it() {
    let scratch = tempfile::tempdir().unwrap();
    let (dir, tokens, log) = (
        scratch.path().join("ledger"),
        scratch.path().join("tokens.toml"),
        scratch.path().join("rail.log"),
    );
    std::fs::write(&tokens, TOKENS).unwrap();
    let mut args: Vec<String> = ["--dir", &arg(&dir), "--tokens", &arg(&tokens)]
        .map(str::to_owned)
        .into();
    args.extend(["--rail-log", &arg(&log)].map(str::to_owned));
    let slow = [
        args.clone(),
        ["--init", "--rail-latency-ms", "2000"]
            .map(str::to_owned)
            .into(),
    ];
    let (mut served, base) = Served::start(&slow.concat());
    let http = super::clients::http_client(None, None);
    let id = create(&http, &base).await;
    let running = tokio::spawn({
        let (http, base, id) = (http.clone(), base.clone(), id.clone());
        async move { submit(&http, &base, &id, "k-1").await }
    });
    until_sending(&http, &base, "k-1").await;
    served.terminate();
    let addr = base.trim_start_matches("http://").to_owned();
    while tokio::net::TcpStream::connect(&addr).await.is_ok() {
        tokio::task::yield_now().await;
    }
    assert!(!running.is_finished(), "the send was still running");
    assert!(rail_log(&log).is_empty(), "nothing has left yet");
    let answered = running.await.unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    let answered = answered.text().await.unwrap();
    let (status, printed) = served.wait();
    assert!(status.success(), "{status:?}");
    assert!(
        printed.contains("every running send was recorded"),
        "{printed}"
    );
    let sent: Value = serde_json::from_str(&answered).unwrap();
    let line = RailLogLine {
        withdrawal: id.clone(),
        key: "alice:k-1".into(),
        reference: sent["reference"].as_str().unwrap().to_owned(),
    };
    assert_eq!(rail_log(&log), std::slice::from_ref(&line));

    let (_served, base) = Served::start(&args);
    let replay = submit(&http, &base, &id, "k-1").await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.text().await.unwrap(), answered);
    let other = create(&http, &base).await;
    let second = submit(&http, &base, &other, "k-2").await;
    assert_eq!(second.status(), StatusCode::OK);
    let second: Value = second.json().await.unwrap();
    let lines = rail_log(&log);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0], line);
    assert_eq!(
        (lines[1].withdrawal.as_str(), lines[1].key.as_str()),
        (other.as_str(), "alice:k-2")
    );
    assert_eq!(lines[1].reference, second["reference"].as_str().unwrap());
    let verify = payonce(&["verify", &arg(&dir)]);
    assert_eq!(verify.code, 0, "{}{}", verify.stdout, verify.stderr);
}
