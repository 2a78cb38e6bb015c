//! Bad input: each with a clear message, a non-zero exit, and the log's
//! bytes unchanged.

use crate::fixture::{arg, diverged, first_segment, payonce, scenario, snapshot, tear_last_record};

/// The audit commands, each as arguments after the directory.
fn audit_commands() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        ("verify", vec![]),
        ("history", vec!["--key", "req-1"]),
        ("state", vec![]),
        ("inflight", vec![]),
        ("export", vec![]),
    ]
}

fn run_on(command: &str, dir: &str, rest: &[&str]) -> crate::fixture::Run {
    let mut args = vec![command, dir];
    args.extend_from_slice(rest);
    payonce(&args)
}

// Guards against a typo in a path being reported as something else, or
// creating a directory.
#[test]
fn a_missing_directory_is_named_and_exits_2() {
    let parent = tempfile::tempdir().unwrap();
    let missing = parent.path().join("no-such-ledger");
    for (command, rest) in audit_commands() {
        let run = run_on(command, &arg(&missing), &rest);
        assert_eq!(run.code, 2, "{command}");
        assert!(
            run.stderr.contains("does not exist"),
            "{command}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("no-such-ledger"), "{}", run.stderr);
    }
    assert!(!missing.exists(), "a command created the directory");
}

// Guards against reading an unrelated directory as an empty ledger.
#[test]
fn a_directory_that_is_not_a_log_is_named_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a log").unwrap();
    let before = snapshot(dir.path());
    for (command, rest) in audit_commands() {
        let run = run_on(command, &arg(dir.path()), &rest);
        assert_eq!(run.code, 2, "{command}");
        assert!(
            run.stderr.contains("is not a payonce log"),
            "{command}: {}",
            run.stderr
        );
    }
    assert_eq!(snapshot(dir.path()), before);
}

// Guards against damage that is skipped, reported without its place, or
// given the exit code of a torn tail.
#[test]
fn a_corrupt_log_is_reported_with_its_location_and_exits_4() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let segment = first_segment(dir.path());
    let mut bytes = std::fs::read(&segment).unwrap();
    // A byte inside the first record's payload, with valid records after it.
    bytes[40 + 20] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    let before = snapshot(dir.path());
    for (command, rest) in audit_commands() {
        let run = run_on(command, &arg(dir.path()), &rest);
        assert_eq!(run.code, 4, "{command}: {}", run.stderr);
        assert!(
            run.stderr.contains("00000000000000000001.log") && run.stderr.contains("at byte 40"),
            "{command}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("damaged"), "{}", run.stderr);
    }
    assert_eq!(snapshot(dir.path()), before);
}

// Guards against audit commands that repair (cut) a torn tail, or do not
// mention it.
#[test]
fn a_torn_tail_is_reported_not_repaired_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let good_len = tear_last_record(dir.path(), &[0x5a; 11]);
    let before = snapshot(dir.path());
    for (command, rest) in audit_commands() {
        let run = run_on(command, &arg(dir.path()), &rest);
        assert_eq!(run.code, 1, "{command}: {} {}", run.stdout, run.stderr);
        let report = format!("{}{}", run.stdout, run.stderr);
        assert!(
            report.contains(&format!("torn tail: 11 bytes at byte {good_len}")),
            "{command}: {report}"
        );
    }
    let json = payonce(&["verify", &arg(dir.path()), "--json"]).json();
    assert_eq!(json["torn_tail"]["offset"], good_len);
    assert_eq!(json["torn_tail"]["len"], 11);
    assert_eq!(json["clean"], false);
    assert_eq!(
        snapshot(dir.path()),
        before,
        "an audit command cut the torn tail"
    );
}

// Guards against a recorded decision the code would not make being
// accepted silently.
#[test]
fn a_divergence_is_reported_with_its_sequence_number_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    // A claim for a withdrawal the ledger never created: the code would
    // refuse it.
    diverged(dir.path());
    let before = snapshot(dir.path());
    let run = payonce(&["verify", &arg(dir.path()), "--json"]);
    assert_eq!(run.code, 1);
    let report = run.json();
    assert_eq!(report["divergence_count"], 1);
    assert_eq!(report["divergences"][0]["seq"], 2);
    assert_eq!(report["divergences"][0]["recorded_event"], "claimed");
    let text = payonce(&["verify", &arg(dir.path())]);
    assert_eq!(text.code, 1);
    assert!(
        text.stdout.contains("divergence at seq 2"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("not created by this ledger"),
        "{}",
        text.stdout
    );
    assert_eq!(snapshot(dir.path()), before);
}

// Guards against an unknown subject answering with an empty history.
#[test]
fn an_unknown_key_or_withdrawal_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let before = snapshot(dir.path());
    let key = payonce(&["history", &arg(dir.path()), "--key", "req-404"]);
    assert_eq!(key.code, 2);
    assert!(
        key.stderr
            .contains("request key req-404 appears in no event"),
        "{}",
        key.stderr
    );
    let withdrawal = payonce(&["history", &arg(dir.path()), "--withdrawal", "w-404"]);
    assert_eq!(withdrawal.code, 2);
    assert!(
        withdrawal
            .stderr
            .contains("withdrawal w-404 appears in no event"),
        "{}",
        withdrawal.stderr
    );
    assert_eq!(snapshot(dir.path()), before);
}

// Guards against a malformed or impossible point being read as something.
#[test]
fn a_malformed_or_past_the_end_at_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    for bad in [
        "yesterday",
        "2025-13-01T00:00:00Z",
        "2025-01-01 00:00",
        "-3",
        "12:03",
    ] {
        let run = payonce(&["state", &arg(dir.path()), &format!("--at={bad}")]);
        assert_eq!(run.code, 2, "{bad}");
        assert!(
            run.stderr.contains("is neither a sequence number"),
            "{bad}: {}",
            run.stderr
        );
    }
    let past = payonce(&["state", &arg(dir.path()), "--at", "99"]);
    assert_eq!(past.code, 2);
    assert!(
        past.stderr
            .contains("past the end of the log, whose last event is 12"),
        "{}",
        past.stderr
    );
}

// Guards against a key with control characters reaching a terminal or a
// lookup: it is refused, escaped, before anything is read.
#[test]
fn a_key_with_control_characters_is_refused_escaped_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let before = snapshot(dir.path());
    let hostile = "req-1\u{1b}[2J";
    let runs = [
        payonce(&["history", &arg(dir.path()), "--key", hostile]),
        payonce(&["history", &arg(dir.path()), "--withdrawal", "w-1-2\u{7}"]),
        payonce(&[
            "release",
            &arg(dir.path()),
            hostile,
            "--note",
            "n",
            "--by",
            "ops",
        ]),
    ];
    for run in &runs {
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(
            run.stderr.contains("has a control character"),
            "{}",
            run.stderr
        );
        assert!(
            !run.stderr.contains('\u{1b}') && !run.stderr.contains('\u{7}'),
            "{:?}",
            run.stderr
        );
    }
    assert!(
        runs[0].stderr.contains(r"req-1\u{1b}[2J"),
        "{}",
        runs[0].stderr
    );
    assert_eq!(snapshot(dir.path()), before);
}

// Guards against clap echoing a hostile argument raw in its usage error.
#[test]
fn usage_errors_exit_2_with_the_argument_escaped() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let d = arg(dir.path());
    for args in [
        vec!["verify"],
        vec!["frobnicate", &d],
        vec!["verify", &d, "--no-such-flag"],
        vec!["history", &d],
        vec!["history", &d, "--key", "a", "--withdrawal", "w-1-2"],
        vec!["export", &d, "--from", "three"],
        vec!["inflight", &d, "--older-than", "30"],
    ] {
        let run = payonce(&args);
        assert_eq!(run.code, 2, "{args:?}");
        assert!(run.stderr.contains("error"), "{args:?}: {}", run.stderr);
    }
    let bell = payonce(&["inflight", &d, "--older-than", "5\u{7}m"]);
    assert_eq!(bell.code, 2);
    assert!(!bell.stderr.contains('\u{7}'), "{:?}", bell.stderr);
    assert!(bell.stderr.contains(r"\u{7}"), "{}", bell.stderr);
    let order = payonce(&["export", &d, "--from", "5", "--to", "3"]);
    assert_eq!(order.code, 2);
    assert!(
        order.stderr.contains("--from 5 is after --to 3"),
        "{}",
        order.stderr
    );
}

// Guards against a command whose help does not say what its exit codes mean.
#[test]
fn every_command_has_help_that_explains_exit_codes() {
    for command in [
        "verify", "history", "state", "inflight", "export", "resolve", "correct", "release",
        "index", "demo",
    ] {
        let run = payonce(&[command, "--help"]);
        assert_eq!(run.code, 0, "{command}");
        assert!(
            run.stdout.contains("Exit codes:"),
            "{command}: {}",
            run.stdout
        );
        assert!(run.stdout.contains("Usage: payonce"), "{command}");
    }
    let top = payonce(&["--help"]);
    assert_eq!(top.code, 0);
    assert!(
        top.stdout.contains("2  a usage or input error"),
        "{}",
        top.stdout
    );
    for command in ["verify", "history", "state", "inflight"] {
        assert!(
            payonce(&[command, "--help"]).stdout.contains("--json"),
            "{command}"
        );
    }
}

// Guards against a file given where the ledger's directory is expected
// being reported as missing, as not a log, or (by the demo) as a directory
// in use: every command says it is not a directory, naming it.
#[test]
fn a_file_given_for_the_directory_is_named_the_same_way_by_every_command() {
    let parent = tempfile::tempdir().unwrap();
    let file = parent.path().join("ledger.txt");
    std::fs::write(&file, "not a directory").unwrap();
    let outcome =
        crate::fixture::outcome_file(parent.path(), "o.json", &crate::fixture::a_sent_outcome());
    let mut runs: Vec<(String, crate::fixture::Run)> =
        crate::fixture::commands_on_a_directory(&outcome)
            .into_iter()
            .map(|(command, rest)| {
                let run = crate::fixture::run_on(command, &arg(&file), &rest);
                (command.to_owned(), run)
            })
            .collect();
    for command in ["index", "demo"] {
        runs.push((command.to_owned(), payonce(&[command, &arg(&file)])));
    }
    let expected = format!("{} is not a directory", file.display());
    for (command, run) in runs {
        assert_eq!(run.code, 2, "{command}: {}", run.stderr);
        assert!(run.stderr.contains(&expected), "{command}: {}", run.stderr);
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"not a directory");
}
