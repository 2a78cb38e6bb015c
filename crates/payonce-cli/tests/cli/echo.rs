//! Values a user gave, echoed back: escaped and bounded, so a hostile
//! argument cannot flood the terminal or the log collector reading stderr.

use crate::fixture::{arg, payonce, scenario};

/// Ten thousand bytes: far past any field's limit.
const HOSTILE_LEN: usize = 10_000;

fn assert_bounded(what: &str, run: &crate::fixture::Run) {
    assert_eq!(run.code, 2, "{what}: {}", run.stderr);
    assert!(
        run.stderr.contains(&format!("… ({HOSTILE_LEN} bytes)")),
        "{what}: {}",
        &run.stderr[..run.stderr.len().min(400)]
    );
    assert!(
        run.stderr.len() < 1500 && run.stdout.len() < 1500,
        "{what}: {} bytes echoed",
        run.stderr.len().max(run.stdout.len())
    );
}

// Guards against a 10 KB key, note, operator, path or stray argument being
// printed back in full, in text or in a --json failure.
#[test]
fn long_values_are_echoed_as_a_short_prefix_and_their_length() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let d = arg(dir.path());
    let huge = "k".repeat(HOSTILE_LEN);
    let huge_path = format!("/tmp/{}", "p".repeat(HOSTILE_LEN - 5));
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("history key", vec!["history", &d, "--key", &huge]),
        (
            "history key json",
            vec!["history", &d, "--key", &huge, "--json"],
        ),
        ("withdrawal", vec!["history", &d, "--withdrawal", &huge]),
        (
            "release key",
            vec!["release", &d, &huge, "--note", "n", "--by", "o"],
        ),
        (
            "note",
            vec!["release", &d, "req-4", "--note", &huge, "--by", "o"],
        ),
        (
            "operator",
            vec!["release", &d, "req-4", "--note", "n", "--by", &huge],
        ),
        ("directory", vec!["verify", &huge_path]),
        ("directory json", vec!["inflight", &huge_path, "--json"]),
        (
            "outcome file",
            vec![
                "resolve",
                &d,
                "req-3",
                "--outcome",
                &huge_path,
                "--note",
                "n",
                "--by",
                "o",
            ],
        ),
        ("stray argument", vec!["verify", &d, &huge]),
        ("point", vec!["state", &d, "--at", &huge]),
    ];
    for (what, args) in cases {
        assert_bounded(what, &payonce(&args));
    }
}

// Guards against a bound that cuts what a user needs: a value within it is
// echoed whole.
#[test]
fn short_values_are_echoed_whole() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let key = "req-".repeat(15);
    let run = payonce(&["history", &arg(dir.path()), "--key", &key]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains(&format!("request key {key} appears in no event")),
        "{}",
        run.stderr
    );
}
