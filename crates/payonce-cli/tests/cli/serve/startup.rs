//! What `payonce serve` refuses before it listens.

use crate::fixture::{Run, arg, payonce};

/// Checks that `run` was refused as bad input, saying `text`.
fn refused(run: &Run, text: &str) {
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains(text), "{}", run.stderr);
}

// Guards against a PostgreSQL worker without a name, a service that
// starts on a directory without a ledger, or on a tokens file it cannot
// trust.
#[test]
fn serve_refuses_a_nameless_worker_a_missing_ledger_and_a_bad_tokens_file() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, super::TOKENS).unwrap();
    let postgres = payonce(&[
        "serve",
        "--postgres",
        "postgres://db/ledger",
        "--tokens",
        &arg(&tokens),
    ]);
    refused(&postgres, "--worker");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let no_ledger = payonce(&["serve", "--dir", &arg(&empty), "--tokens", &arg(&tokens)]);
    refused(&no_ledger, "is not a payonce log");
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "nothing was written"
    );
    std::fs::write(&tokens, "[clients]\nalice = \"short\"\n").unwrap();
    let bad = payonce(&[
        "serve",
        "--init",
        "--dir",
        &arg(&empty),
        "--tokens",
        &arg(&tokens),
    ]);
    refused(&bad, "the token of alice");
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "nothing was written"
    );
}

// Guards against a README command whose tokens file the service refuses.
#[test]
fn the_example_tokens_file_is_one_the_service_takes() {
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/tokens.example.toml");
    let tokens = payonce_server::Tokens::read(&file).unwrap();
    assert!(tokens.principal(b"frank-token-0123456789").is_some());
}
