//! What `payonce serve` says of secrets: a warning when its tokens file
//! holds tokens in clear that others can read, and no token, password or
//! key in anything it prints, started or refused.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::served::Served;
use crate::fixture::{arg, payonce};

const SECRET: &str = "secret-token-0123456789";

/// A token of digits, which TOML reads as a number if its quotes are
/// forgotten.
const NUMBER: &str = "4242424242424242";

/// A token of 64 hex digits, which is a valid name once cut to 32 bytes.
const HEX_TOKEN: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

/// `printf %s SECRET | sha256sum`, as a tokens entry.
const SECRET_DIGEST: &str =
    "sha256:64dedf2646a3cb615cc57769d5d812169bf61a67fedb268d785690a17226012f";

/// Starts and stops `payonce serve` on a new ledger with the tokens file
/// `tokens` at `mode`; what it printed on stdout and stderr.
fn started(scratch: &Path, tokens: &str, mode: u32) -> (String, String) {
    let file = scratch.join("tokens.toml");
    std::fs::write(&file, tokens).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    let ledger = tempfile::tempdir_in(scratch).unwrap();
    let args = [
        "--init",
        "--dir",
        &arg(&ledger.path().join("l")),
        "--tokens",
        &arg(&file),
    ];
    let (served, _) = Served::start_capturing(&args.map(str::to_owned));
    served.stop()
}

// Guards against a tokens file of clear tokens that others can read
// starting without a word, a warning where none is due (a 0600 file, a
// file of digests), and a token in the warning.
#[test]
fn clear_tokens_that_others_can_read_are_warned_of_and_only_they() {
    let scratch = tempfile::tempdir().unwrap();
    let clear = format!("[clients]\nalice = \"{SECRET}\"\n");
    let (stdout, stderr) = started(scratch.path(), &clear, 0o644);
    assert!(stderr.contains("warning: tokens file"), "{stderr}");
    for words in ["tokens.toml", "mode 0644", "sha256:", "chmod 600"] {
        assert!(stderr.contains(words), "{words}: {stderr}");
    }
    assert!(!format!("{stdout}{stderr}").contains(SECRET));
    let (_, stderr) = started(scratch.path(), &clear, 0o600);
    assert!(!stderr.contains("warning"), "{stderr}");
    let digests = format!("[clients]\nalice = \"{SECRET_DIGEST}\"\n");
    let (_, stderr) = started(scratch.path(), &digests, 0o644);
    assert!(!stderr.contains("warning"), "{stderr}");
}

// Guards against a token, a password in a URL or a private key echoed by
// a refusal: a token without its quotes (a number), a token where a key
// or a name belongs, or one too long to be a name.
#[test]
fn no_refusal_prints_a_token_a_password_or_a_key() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let tokens = dir.join("tokens.toml");
    let key = dir.join("broken.key");
    let key_body = "c2VjcmV0LWtleS1tYXRlcmlhbA";
    std::fs::write(
        &key,
        format!("-----BEGIN PRIVATE KEY-----\n{key_body}\n-----END PRIVATE KEY-----\n"),
    )
    .unwrap();
    let ca = payonce_tls::testing::TestCa::new("test CA").unwrap();
    let (certificate, _) = ca
        .server(&["localhost"])
        .unwrap()
        .write(dir, "server")
        .unwrap();
    let ledger = arg(&dir.join("never"));
    let (certificate, key) = (arg(&certificate), arg(&key));
    let base = [
        "serve",
        "--init",
        "--dir",
        &ledger,
        "--tokens",
        &arg(&tokens),
    ];
    let runs = [
        (format!("clients = \"{SECRET}\"\n"), vec![]),
        (format!("[clients]\nalice = \"{SECRET} \"\n"), vec![]),
        (format!("[clients]\nalice = {NUMBER}\n"), vec![]),
        (format!("[clients]\nalice = {NUMBER}.5\n"), vec![]),
        (format!("{SECRET} = \"x\"\n"), vec![]),
        (format!("[clients]\n{SECRET} = \"alice\"\n"), vec![]),
        (format!("[clients]\n{HEX_TOKEN} = \"{SECRET}\"\n"), vec![]),
        (
            format!("[clients]\nalice = \"{SECRET}\"\n"),
            vec![
                "--rail-url",
                "http://payonce:rail-password-42@10.0.0.7/send",
            ],
        ),
        (
            format!("[clients]\nalice = \"{SECRET}\"\n"),
            vec!["--tls-cert", &certificate, "--tls-key", &key],
        ),
    ];
    for (text, rest) in runs {
        std::fs::write(&tokens, text).unwrap();
        let args: Vec<&str> = base.iter().copied().chain(rest.iter().copied()).collect();
        let run = payonce(&args);
        assert_eq!(run.code, 2, "{}", run.stderr);
        let printed = format!("{}{}", run.stdout, run.stderr);
        for secret in [
            SECRET,
            NUMBER,
            &HEX_TOKEN[..32],
            "rail-password-42",
            key_body,
        ] {
            assert!(!printed.contains(secret), "{secret}: {printed}");
        }
    }
}

// Guards against a reload that reads clear tokens others can read without
// a word, a reload line that quotes a token of a refused file, or one that
// says "nothing to reload" beside what it kept.
#[test]
fn a_reload_warns_of_exposed_tokens_and_its_refusal_quotes_no_token() {
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("tokens.toml");
    std::fs::write(&file, format!("[clients]\nalice = \"{SECRET}\"\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ledger = arg(&scratch.path().join("ledger"));
    let args = ["--init", "--dir", &ledger, "--tokens", &arg(&file)].map(str::to_owned);
    let (mut served, _) = Served::start_capturing(&args);

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    served.signal("HUP");
    let reloaded = served.next_line();
    assert!(
        reloaded.contains("reloaded the tokens file (1 callers)"),
        "{reloaded}"
    );
    std::fs::write(&file, format!("[clients]\nalice = {NUMBER}\n")).unwrap();
    served.signal("HUP");
    let refused = served.next_line();
    assert!(
        refused.contains("reload refused, kept the old tokens")
            && refused.contains("line 2, column 9"),
        "{refused}"
    );
    assert!(!refused.contains("nothing to reload"), "{refused}");
    let (stdout, stderr) = served.stop();
    let printed = format!("{reloaded}{refused}{stdout}{stderr}");
    for secret in [SECRET, NUMBER] {
        assert!(!printed.contains(secret), "{secret}: {printed}");
    }
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("warning: tokens file"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "only the reload that read them: {stderr}"
    );
    assert!(warnings[0].contains("mode 0644"), "{stderr}");
}
