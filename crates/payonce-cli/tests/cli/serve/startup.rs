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
    refused(&bad, "the token of the entry on line 2 ([clients])");
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
    assert!(
        tokens.principal(b"bob-token-0123456789").is_some(),
        "a digest entry"
    );
}

/// `payonce serve --init` on a ledger directory that must stay unwritten,
/// with the tests' tokens and `rest`; checks it was refused saying every
/// one of `texts`.
fn refused_before_the_ledger(scratch: &std::path::Path, rest: &[String], texts: &[&str]) {
    let tokens = scratch.join("tokens.toml");
    std::fs::write(&tokens, super::TOKENS).unwrap();
    let ledger = scratch.join("never");
    let mut args = vec!["serve", "--init", "--dir"]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    args.extend([arg(&ledger), "--tokens".to_owned(), arg(&tokens)]);
    args.extend(rest.iter().cloned());
    let run = payonce(&args);
    for text in texts {
        refused(&run, text);
    }
    assert!(!ledger.exists(), "nothing was written: {}", run.stderr);
}

// Guards against a service that starts on TLS files it cannot use (its
// own, or the client certificate it shows the rail), or that sends
// withdrawals or takes bearer tokens in clear across a network without
// being told to.
#[test]
fn serve_refuses_unusable_tls_files_and_cleartext_beyond_loopback() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let ca = payonce_tls::testing::TestCa::new("test CA").unwrap();
    let (certificate, key) = ca.server(&["localhost"]).unwrap().write(dir, "a").unwrap();
    let (_, other_key) = ca.server(&["localhost"]).unwrap().write(dir, "b").unwrap();
    let ca_file = ca.write(dir, "ca").unwrap();
    let missing = dir.join("missing.crt");
    let to_args = |args: &[&str]| args.iter().map(|&a| a.to_owned()).collect::<Vec<_>>();
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        (
            to_args(&["--tls-cert", &arg(&missing), "--tls-key", &arg(&key)]),
            vec!["missing.crt"],
        ),
        (
            to_args(&[
                "--tls-cert",
                &arg(&certificate),
                "--tls-key",
                &arg(&other_key),
            ]),
            vec!["b.key", "a.crt", "is not the key of the certificate"],
        ),
        (
            to_args(&["--rail-url", "http://10.0.0.7:9000/send"]),
            vec![
                "10.0.0.7:9000, which is not loopback",
                "--rail-insecure-http",
            ],
        ),
        (
            to_args(&[
                "--rail-url",
                "http://127.0.0.1:9/send",
                "--rail-ca",
                &arg(&ca_file),
            ]),
            vec!["--rail-ca is for an https:// rail"],
        ),
        (
            to_args(&[
                "--rail-url",
                "https://localhost/send",
                "--rail-ca",
                &arg(&missing),
            ]),
            vec!["missing.crt"],
        ),
        (
            to_args(&[
                "--rail-url",
                "https://localhost/",
                "--rail-cert",
                &arg(&certificate),
            ]),
            vec!["--rail-key"],
        ),
        (
            to_args(&[
                "--rail-url",
                "https://localhost/send",
                "--rail-cert",
                &arg(&certificate),
                "--rail-key",
                &arg(&other_key),
            ]),
            vec![
                "the rail's TLS",
                "b.key",
                "a.crt",
                "is not the key of the certificate",
            ],
        ),
        (
            to_args(&[
                "--rail-url",
                "https://localhost/send",
                "--rail-cert",
                &arg(&missing),
                "--rail-key",
                &arg(&key),
            ]),
            vec!["the rail's TLS", "missing.crt"],
        ),
        (
            to_args(&["--listen", "0.0.0.0:0"]),
            vec![
                "--listen 0.0.0.0:0 is not a loopback address",
                "--insecure-http",
            ],
        ),
    ];
    for (rest, texts) in cases {
        refused_before_the_ledger(dir, &rest, &texts);
    }
}
