//! 64 clients send retries, second keys and in-flight collisions to
//! `payonce serve` while it is killed with SIGKILL and restarted. After
//! every restart: no withdrawal is in the rail log twice, every 2xx answer
//! is what the ledger now replays, and `verify` is clean.
//!
//! `PAYONCE_SERVE_KILLS` sets the number of kills (the long run: 50).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use payonce_cli::serve::rail::RailLogLine;
use reqwest::StatusCode;

use super::served::Served;
use super::{ALICE, BOB, TOKENS};
use crate::fixture::{arg, payonce};

/// Kills in the normal run.
const KILLS: usize = 6;
/// Concurrent clients.
const CLIENTS: usize = 64;

/// A 2xx submission answer: withdrawal, client token, key, body.
type Answer = (String, &'static str, String, String);

fn start(dir: &Path, tokens: &Path, rail_log: &Path, init: bool) -> (Served, String) {
    let mut args = vec![
        "--dir".to_owned(),
        arg(dir),
        "--tokens".to_owned(),
        arg(tokens),
    ];
    for flag in [
        "--rail-log",
        &arg(rail_log),
        "--rail-latency-ms",
        "1",
        "--rail-refuse-rate",
        "0.05",
        "--rail-unknown-rate",
        "0.05",
    ] {
        args.push(flag.to_owned());
    }
    if init {
        args.push("--init".to_owned());
    }
    Served::start(&args)
}

async fn submit(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    id: &str,
    key: &str,
) -> Option<reqwest::Response> {
    http.post(format!("{base}/v1/withdrawals/{id}/submissions"))
        .bearer_auth(token)
        .header("Idempotency-Key", format!("\"{key}\""))
        .send()
        .await
        .ok()
}

/// Records a 2xx answer; a 5xx must be an unknown outcome.
async fn note(
    answers: &Mutex<Vec<Answer>>,
    response: reqwest::Response,
    id: &str,
    token: &'static str,
    key: &str,
) {
    let status = response.status();
    let Ok(text) = response.text().await else {
        return;
    };
    if status.is_success() {
        answers
            .lock()
            .unwrap()
            .push((id.to_owned(), token, key.to_owned(), text));
    } else {
        assert!(
            status.is_client_error() || text.contains("outcome-unknown"),
            "{status}: {text}"
        );
    }
}

/// One client's loop until the server dies: a withdrawal, then a
/// submission raced against its own retry, a second key, and a retry.
async fn client(base: String, generation: usize, number: usize, answers: Arc<Mutex<Vec<Answer>>>) {
    let http = reqwest::Client::new();
    let token = if number.is_multiple_of(2) { ALICE } else { BOB };
    for round in 0.. {
        let created = http
            .post(format!("{base}/v1/withdrawals"))
            .bearer_auth(token)
            .json(&serde_json::json!({"amount": "1.5", "currency": "USDC", "destination": "0xabc"}))
            .send()
            .await;
        let Ok(created) = created else { return };
        if created.status() != StatusCode::CREATED {
            return;
        }
        let Ok(created) = created.json::<serde_json::Value>().await else {
            return;
        };
        let id = created["id"].as_str().unwrap_or_default().to_owned();
        let key = format!("g{generation}-c{number}-r{round}");
        let second_key = format!("{key}-b");
        let (first, racing) = tokio::join!(
            submit(&http, &base, token, &id, &key),
            submit(&http, &base, token, &id, &key)
        );
        let second = submit(&http, &base, token, &id, &second_key).await;
        let retry = submit(&http, &base, token, &id, &key).await;
        for (response, key) in [
            (first, &key),
            (racing, &key),
            (second, &second_key),
            (retry, &key),
        ] {
            let Some(response) = response else { return };
            note(&answers, response, &id, token, key).await;
        }
    }
}

/// The checks after a restart.
async fn check(base: &str, dir: &Path, rail_log: &Path, answers: &[Answer]) {
    let mut sends: BTreeMap<String, u32> = BTreeMap::new();
    for line in std::fs::read_to_string(rail_log)
        .unwrap_or_default()
        .lines()
    {
        let line: RailLogLine = serde_json::from_str(line).unwrap();
        *sends.entry(line.withdrawal).or_default() += 1;
    }
    let twice: Vec<_> = sends.iter().filter(|(_, count)| **count > 1).collect();
    assert!(twice.is_empty(), "sent more than once: {twice:?}");
    let http = reqwest::Client::new();
    for (id, token, key, body) in answers {
        let replay = submit(&http, base, token, id, key).await.unwrap();
        assert_eq!(replay.status(), StatusCode::OK, "{id} {key}");
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        assert_eq!(&replay.text().await.unwrap(), body, "{id} {key}");
    }
    let verify = payonce(&["verify", &arg(dir)]);
    assert_eq!(verify.code, 0, "{}{}", verify.stdout, verify.stderr);
}

// Guards against a crash of the service that sends a withdrawal twice,
// forgets an answer it gave, or leaves a log that does not verify.
#[test]
fn killed_and_restarted_under_load_the_service_keeps_every_answer() {
    let kills = std::env::var("PAYONCE_SERVE_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(KILLS);
    let scratch = tempfile::tempdir().unwrap();
    let (dir, tokens, rail_log) = (
        scratch.path().join("ledger"),
        scratch.path().join("tokens.toml"),
        scratch.path().join("rail.log"),
    );
    std::fs::write(&tokens, TOKENS).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let answers = Arc::new(Mutex::new(Vec::new()));
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for kill in 0..=kills {
        let (mut child, base) = start(&dir, &tokens, &rail_log, kill == 0);
        let recorded = answers.lock().unwrap().clone();
        runtime.block_on(check(&base, &dir, &rail_log, &recorded));
        if kill == kills {
            break;
        }
        let clients: Vec<_> = (0..CLIENTS)
            .map(|number| runtime.spawn(client(base.clone(), kill, number, answers.clone())))
            .collect();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // When the kill lands: anywhere from early to well into the load.
        std::thread::sleep(Duration::from_millis(100 + seed % 400));
        child.kill();
        for task in clients {
            runtime.block_on(task).unwrap();
        }
    }
    let answered = answers.lock().unwrap().len();
    eprintln!("{kills} kills, {answered} answers replayed after each restart");
    assert!(
        answered > kills * CLIENTS,
        "the load answered only {answered} times"
    );
}
