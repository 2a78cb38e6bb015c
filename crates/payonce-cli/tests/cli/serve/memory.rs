//! `payonce serve --memory-budget`: refused below its least, before the
//! ledger is written; taken by the ledger, as its metrics say.

use super::TOKENS;
use super::served::Served;
use crate::fixture::{arg, payonce};

// Guards against a budget the ledger would silently raise, a unit read
// wrongly, or a flag that never reaches the ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_budget_is_refused_below_its_least_and_reaches_the_ledger() {
    let scratch = tempfile::tempdir().unwrap();
    let (dir, tokens) = (
        scratch.path().join("ledger"),
        scratch.path().join("tokens.toml"),
    );
    std::fs::write(&tokens, TOKENS).unwrap();
    let base: Vec<String> = [
        "serve",
        "--init",
        "--dir",
        &arg(&dir),
        "--tokens",
        &arg(&tokens),
    ]
    .map(str::to_owned)
    .into();
    for (budget, says) in [
        ("1MiB", "4194304"),
        ("64XB", "unknown unit"),
        ("MiB", "no number"),
    ] {
        let run = payonce(
            &[
                base.clone(),
                vec!["--memory-budget".to_owned(), budget.to_owned()],
            ]
            .concat(),
        );
        assert_eq!(run.code, 2, "{budget}: {}", run.stderr);
        assert!(
            run.stderr.contains("--memory-budget"),
            "{budget}: {}",
            run.stderr
        );
        assert!(run.stderr.contains(says), "{budget}: {}", run.stderr);
        assert!(!dir.exists(), "{budget}: nothing was written");
    }
    let args = [
        &base[1..],
        &["--memory-budget".to_owned(), "64MiB".to_owned()],
    ]
    .concat();
    let (_served, url) = Served::start(&args);
    let http = super::clients::http_client(None, None);
    let metrics = http.get(format!("{url}/metrics")).send().await.unwrap();
    let text = metrics.text().await.unwrap();
    assert!(
        text.contains(&format!("payonce_memory_budget_bytes {}\n", 64 << 20)),
        "{text}"
    );
    assert!(text.contains("payonce_runs 0\n"), "{text}");
}
