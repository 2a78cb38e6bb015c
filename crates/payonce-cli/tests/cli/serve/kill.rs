//! 64 clients send retries, second keys and in-flight collisions to
//! `payonce serve` while it is killed with SIGKILL and restarted. After
//! every restart: no withdrawal is in the rail log twice, every 2xx answer
//! is what the ledger now replays, and `verify` is clean.
//!
//! `PAYONCE_SERVE_KILLS` sets the number of kills (the long run: 50).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use payonce_server::rail::RailLogLine;
use reqwest::StatusCode;

use super::served::Served;
use super::{ALICE, BOB, TOKENS};
use crate::fixture::{arg, payonce};

/// Kills in the normal run.
const KILLS: usize = 6;
/// Concurrent clients.
pub const CLIENTS: usize = 64;

/// A 2xx submission answer: withdrawal, client token, key, body.
pub type Answer = (String, &'static str, String, String);

/// The server's arguments beside its ledger's: `tokens`, and a simulated
/// rail that logs to `rail_log`, answers in 1 ms, refuses 5% of sends
/// cleanly and loses 5% of its answers.
pub fn load_args(tokens: &Path, rail_log: &Path) -> Vec<String> {
    let rail = ["--rail-latency-ms", "1", "--rail-refuse-rate", "0.05"];
    let mut args = vec!["--tokens".to_owned(), arg(tokens)];
    args.extend(["--rail-log".to_owned(), arg(rail_log)]);
    args.extend(rail.map(str::to_owned));
    args.extend(["--rail-unknown-rate", "0.05"].map(str::to_owned));
    args
}

fn start(dir: &Path, tokens: &Path, rail_log: &Path, init: bool) -> (Served, String) {
    let mut args = vec!["--dir".to_owned(), arg(dir)];
    args.extend(load_args(tokens, rail_log));
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

/// One client's loop until `stop` or a server it calls dies: a
/// withdrawal, then a submission raced against its own retry, a second
/// key, and a retry. Its calls take the servers of `bases` in turn, so on
/// several workers the race, the second key and the retry each reach
/// another worker than the first.
pub async fn client(
    bases: Arc<Vec<String>>,
    generation: usize,
    number: usize,
    answers: Arc<Mutex<Vec<Answer>>>,
    stop: Arc<AtomicBool>,
) {
    let http = super::clients::http_client(None, None);
    let token = if number.is_multiple_of(2) { ALICE } else { BOB };
    let at = |turn: usize| bases[(number + turn) % bases.len()].as_str();
    for round in 0.. {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let created = http
            .post(format!("{}/v1/withdrawals", at(0)))
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
            submit(&http, at(0), token, &id, &key),
            submit(&http, at(1), token, &id, &key)
        );
        let second = submit(&http, at(2), token, &id, &second_key).await;
        let retry = submit(&http, at(3), token, &id, &key).await;
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

/// The checks after a restart: each answer is replayed by a server of
/// `bases` in turn; `ledger` is what `verify` takes.
pub async fn check(bases: &[String], ledger: &str, rail_log: &Path, answers: &[Answer]) {
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
    let http = super::clients::http_client(None, None);
    for (turn, (id, token, key, body)) in answers.iter().enumerate() {
        let base = &bases[turn % bases.len()];
        let replay = submit(&http, base, token, id, key).await.unwrap();
        assert_eq!(replay.status(), StatusCode::OK, "{id} {key}");
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        assert_eq!(&replay.text().await.unwrap(), body, "{id} {key}");
    }
    let verify = payonce(&["verify", ledger]);
    assert_eq!(verify.code, 0, "{}{}", verify.stdout, verify.stderr);
}

/// The 64 clients' load on some servers, recording every 2xx answer.
pub struct Load<'a> {
    pub runtime: &'a tokio::runtime::Runtime,
    pub bases: &'a Arc<Vec<String>>,
    pub answers: &'a Arc<Mutex<Vec<Answer>>>,
}

impl Load<'_> {
    /// Runs the load of `generation` until a [`pause`], then `kill`s, and
    /// waits for every client to stop.
    pub fn until_killed(&self, generation: usize, seed: &mut u64, kill: impl FnOnce()) {
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|number| {
                let (bases, answers) = (self.bases.clone(), self.answers.clone());
                let load = client(bases, generation, number, answers, stop.clone());
                self.runtime.spawn(load)
            })
            .collect();
        std::thread::sleep(pause(seed));
        kill();
        stop.store(true, Ordering::Relaxed);
        for task in clients {
            self.runtime.block_on(task).unwrap();
        }
    }
}

/// Kills in this run: `PAYONCE_SERVE_KILLS`, else [`KILLS`].
pub fn kills() -> usize {
    std::env::var("PAYONCE_SERVE_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(KILLS)
}

/// When the next kill lands: anywhere from early to well into the load.
pub fn pause(seed: &mut u64) -> Duration {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    Duration::from_millis(100 + *seed % 400)
}

// Guards against a crash of the service that sends a withdrawal twice,
// forgets an answer it gave, or leaves a log that does not verify.
#[test]
fn killed_and_restarted_under_load_the_service_keeps_every_answer() {
    let kills = kills();
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
        let bases = Arc::new(vec![base]);
        let recorded = answers.lock().unwrap().clone();
        runtime.block_on(check(&bases, &arg(&dir), &rail_log, &recorded));
        if kill == kills {
            break;
        }
        let load = Load {
            runtime: &runtime,
            bases: &bases,
            answers: &answers,
        };
        load.until_killed(kill, &mut seed, || child.kill());
    }
    let answered = answers.lock().unwrap().len();
    eprintln!("{kills} kills, {answered} answers replayed after each restart");
    assert!(
        answered > kills * CLIENTS,
        "the load answered only {answered} times"
    );
}
