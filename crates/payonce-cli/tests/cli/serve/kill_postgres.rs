//! The load of `kill.rs` on 4 `payonce serve` workers sharing one
//! PostgreSQL ledger, one worker at a time killed with SIGKILL and
//! restarted under its name. After every restart: no withdrawal is in the
//! rail log (which the workers share) twice, every 2xx answer is what the
//! workers now replay, each answer asked of another worker in turn, and
//! `verify` on the database is clean.
//!
//! `PAYONCE_SERVE_KILLS` sets the number of kills, as for `kill.rs`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::TOKENS;
use super::kill::{CLIENTS, Load, check, kills, load_args};
use super::served::Served;

/// Workers sharing the ledger.
const WORKERS: usize = 4;

/// Starts worker `api-{number}` on the ledger at `url`.
fn start_worker(url: &str, number: usize, tokens: &Path, rail_log: &Path) -> (Served, String) {
    let worker = format!("api-{number}");
    let mut args = ["--postgres", url, "--worker", &worker]
        .map(str::to_owned)
        .to_vec();
    args.extend(load_args(tokens, rail_log));
    Served::start(&args)
}

// Guards against workers of one ledger that send a withdrawal twice
// between them, forget an answer one of them gave when it is killed, or
// leave a log that does not verify.
#[test]
fn four_workers_on_one_postgres_keep_every_answer_while_one_at_a_time_is_killed() {
    let Some(url) = payonce_postgres::cluster::test_database() else {
        return;
    };
    drop(payonce_postgres::init(&url, payonce::Config::default()).unwrap());
    let scratch = tempfile::tempdir().unwrap();
    let (tokens, rail_log) = (
        scratch.path().join("tokens.toml"),
        scratch.path().join("rail.log"),
    );
    std::fs::write(&tokens, TOKENS).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let answers = Arc::new(Mutex::new(Vec::new()));
    let mut workers: Vec<(Served, String)> = (0..WORKERS)
        .map(|number| start_worker(&url, number, &tokens, &rail_log))
        .collect();
    let (kills, mut seed) = (kills().max(WORKERS), 0x2545_f491_4f6c_dd1d_u64);
    for kill in 0..=kills {
        let bases = Arc::new(
            workers
                .iter()
                .map(|(_, base)| base.clone())
                .collect::<Vec<_>>(),
        );
        let recorded = answers.lock().unwrap().clone();
        runtime.block_on(check(&bases, &url, &rail_log, &recorded));
        if kill == kills {
            break;
        }
        let victim = kill % WORKERS;
        let load = Load {
            runtime: &runtime,
            bases: &bases,
            answers: &answers,
        };
        load.until_killed(kill, &mut seed, || workers[victim].0.kill());
        workers[victim] = start_worker(&url, victim, &tokens, &rail_log);
    }
    let answered = answers.lock().unwrap().len();
    eprintln!("{kills} kills of {WORKERS} workers, {answered} answers replayed after each restart");
    assert!(
        answered > kills * CLIENTS,
        "the load answered only {answered} times"
    );
}
