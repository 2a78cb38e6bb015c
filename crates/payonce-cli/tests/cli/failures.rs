//! How commands fail: exit codes that tell a log problem from stuck keys
//! and from damage, and the one JSON object a `--json` command prints.

use serde_json::Value;

use crate::fixture::{
    a_sent_outcome, arg, commands_on_a_directory, first_segment, outcome_file, payonce, run_on,
    scenario, sent, settled, tear_last_record,
};

/// The one JSON object `run` printed on stdout.
fn failure(run: &crate::fixture::Run) -> Value {
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one object on stdout: {:?}", run.stdout);
    let value: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(value["exit_code"], run.code, "{value}");
    assert!(value["message"].as_str().is_some_and(|m| !m.is_empty()));
    value
}

// Guards against a cron monitor paging for a stuck key that does not
// exist: a torn tail with no key in flight is 1, not the code for keys
// past --older-than.
#[test]
fn inflight_tells_a_torn_tail_from_keys_past_the_threshold() {
    let quiet = tempfile::tempdir().unwrap();
    settled(quiet.path());
    tear_last_record(quiet.path(), &[0x5a; 11]);
    let torn = payonce(&[
        "inflight",
        &arg(quiet.path()),
        "--older-than",
        "30m",
        "--json",
    ]);
    assert_eq!(torn.code, 1, "{}", torn.stderr);
    assert_eq!(torn.json()["keys"].as_array().unwrap().len(), 0);
    assert!(torn.json()["torn_tail"].is_object());
    let stuck = tempfile::tempdir().unwrap();
    scenario(stuck.path());
    let overdue = payonce(&["inflight", &arg(stuck.path()), "--older-than", "30m"]);
    assert_eq!(overdue.code, 3, "{}", overdue.stderr);
    tear_last_record(stuck.path(), &[0x5a; 11]);
    let both = payonce(&["inflight", &arg(stuck.path()), "--older-than", "30m"]);
    assert_eq!(both.code, 3, "a stuck key wins over a torn tail");
    assert!(
        both.stderr.contains("torn tail: 11 bytes"),
        "{}",
        both.stderr
    );
}

// Guards against a --json caller that gets an empty stdout when a command
// fails: every command prints one object with the error's kind.
#[test]
fn every_json_command_prints_one_object_when_it_fails() {
    let parent = tempfile::tempdir().unwrap();
    let missing = parent.path().join("no-such-ledger");
    let file = outcome_file(parent.path(), "o.json", &a_sent_outcome());
    for (command, rest) in commands_on_a_directory(&file) {
        let mut rest = rest;
        rest.push("--json".to_owned());
        let run = run_on(command, &arg(&missing), &rest);
        assert_eq!(run.code, 2, "{command}: {}", run.stderr);
        let value = failure(&run);
        assert_eq!(value["error"], "no_directory", "{command}: {value}");
        assert_eq!(value["file"], arg(&missing), "{command}: {value}");
    }
    let clap = payonce(&[
        "inflight",
        &arg(parent.path()),
        "--older-than",
        "30",
        "--json",
    ]);
    assert_eq!(clap.code, 2);
    assert_eq!(failure(&clap)["error"], "usage");
}

// Guards against a --json failure that drops where the damage is, or what
// the ledger refused.
#[test]
fn a_json_failure_names_the_file_offset_and_seq_or_the_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let d = arg(dir.path());
    let past = payonce(&["state", &d, "--at", "99", "--json"]);
    let value = failure(&past);
    assert_eq!(
        (value["error"].as_str(), value["seq"].as_u64()),
        (Some("point_past_end"), Some(99))
    );
    let unknown = payonce(&["history", &d, "--key", "req-404", "--json"]);
    assert_eq!(failure(&unknown)["error"], "unknown_key");
    let other = outcome_file(
        files.path(),
        "other.json",
        &serde_json::to_string(&sent(&scenario.sent, "0x2")).unwrap(),
    );
    let refused = payonce(&[
        "resolve",
        &d,
        "req-3",
        "--outcome",
        &other,
        "--note",
        "n",
        "--by",
        "ops",
        "--json",
    ]);
    let value = failure(&refused);
    assert_eq!(value["error"], "refused");
    assert!(value["refusal"]["OutcomeMismatch"].is_object(), "{value}");
    let segment = first_segment(dir.path());
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[40 + 20] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    for args in [vec!["verify", &d, "--json"], vec!["export", &d, "--json"]] {
        let run = payonce(&args);
        assert_eq!(run.code, 4, "{args:?}: {}", run.stderr);
        let value = failure(&run);
        assert_eq!(value["error"], "damaged");
        assert_eq!(value["file"], arg(&segment));
        assert_eq!(
            (value["offset"].as_u64(), value["seq"].as_u64()),
            (Some(40), Some(1))
        );
    }
}

// Guards against an exit code that the help, the library's constants and
// the runbook do not all explain the same way.
#[test]
fn every_exit_code_is_in_the_help_and_the_runbook() {
    let help = payonce(&["--help"]).stdout;
    let runbook = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md"),
    )
    .unwrap();
    for code in [
        payonce_cli::EXIT_OK,
        payonce_cli::EXIT_PROBLEM,
        payonce_cli::EXIT_USAGE,
        payonce_cli::EXIT_OVERDUE,
        payonce_cli::EXIT_DAMAGED,
        payonce_cli::EXIT_FAILED,
    ] {
        assert!(
            help.contains(&format!("\n  {code}  ")),
            "help lacks {code}: {help}"
        );
        assert!(
            runbook.contains(&format!("\n| {code} | ")),
            "the runbook lacks {code}"
        );
    }
    assert!(help.contains("3  (inflight --older-than)"), "{help}");
}
