//! The demo: its claims hold (one transfer per withdrawal, verify clean),
//! through the library and through the binary.

use payonce_cli::run_demo;

use crate::fixture::{arg, payonce};

// Guards against a demo that tells a story the ledger did not live.
#[test]
fn the_demo_sends_every_withdrawal_once_and_leaves_a_clean_log() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("demo");
    let mut out = Vec::new();
    let report = run_demo(&dir, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(report.sends.len(), 6, "{text}");
    assert!(
        report.sends.values().all(|&sends| sends == 1),
        "{:?}",
        report.sends
    );
    assert!(
        report.calls.values().any(|&calls| calls == 2),
        "the refused send was a call"
    );
    assert!(report.verify.is_clean());
    assert_eq!(report.verify.in_flight, 0);
    assert!(report.verify.held.is_empty());
    assert!(report.same_after_reopen);
    assert_eq!(
        report.verify.events,
        report.replayed_events + 1,
        "reopening appends opened"
    );
    let refusals = report.refusals.join("\n");
    let [_, phone, _, _, timed_out, refused] = report.withdrawals.as_slice() else {
        panic!("six incidents, six withdrawals: {:?}", report.withdrawals);
    };
    for expected in [
        format!("withdrawal {phone} is claimed by request key bob-phone-7f3a, in flight since"),
        "its send in progress".to_owned(),
        "claimed by request key queue-item-311, which produced an outcome: sent".to_owned(),
        "claimed by request key dave-api-5521".to_owned(),
        format!(
            "request key erin-app-77 is claimed for withdrawal {timed_out} and its outcome is not \
             known yet"
        ),
        format!("request key grace-web-3 is claimed for withdrawal {refused}"),
    ] {
        assert!(
            refusals.contains(&expected),
            "missing {expected:?} in\n{refusals}"
        );
    }
    assert!(
        text.contains("Each withdrawal left custody exactly once."),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "payonce history {} --withdrawal {timed_out}",
            dir.display()
        )),
        "{text}"
    );
    // The directory it leaves behind audits cleanly.
    let history = payonce(&["history", &arg(&dir), "--withdrawal", timed_out, "--json"]).json();
    let names: Vec<&str> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "created",
            "claimed",
            "send_failed",
            "refused",
            "refused",
            "resolved"
        ]
    );
}

// Guards against the README's first command failing, or its exit code
// hiding a broken claim.
#[test]
fn the_demo_binary_runs_and_its_directory_verifies() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("demo");
    let run = payonce(&["demo", &arg(&dir)]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("Each withdrawal left custody exactly once."),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("refusals: clean"), "{}", run.stdout);
    assert!(
        run.stdout.contains("every answer is the same"),
        "{}",
        run.stdout
    );
    assert_eq!(payonce(&["verify", &arg(&dir)]).code, 0);
    let queue = payonce(&["inflight", &arg(&dir), "--json"]).json();
    assert_eq!(queue["keys"].as_array().unwrap().len(), 0);
    // It ends with the report of its ledger, and says where it is.
    let lines: Vec<&str> = run.stdout.lines().collect();
    let path = lines.last().unwrap().trim();
    assert!(
        lines[lines.len() - 2].starts_with("The incident report of this ledger"),
        "{}",
        run.stdout
    );
    assert_eq!(path, arg(&dir.join("payonce-report.html")));
    let page = std::fs::read_to_string(path).unwrap();
    assert!(page.contains("payonce incident report"));
    assert!(page.contains("Every recorded decision re-derived"));
}

// Guards against the demo writing into a directory that holds something.
#[test]
fn the_demo_refuses_a_directory_that_is_not_empty() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keep.txt"), "mine").unwrap();
    let run = payonce(&["demo", &arg(dir.path())]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("is not empty"), "{}", run.stderr);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

// Guards against the README's command (no directory given) failing or
// hiding where it left the ledger.
#[test]
fn the_demo_without_a_directory_makes_a_new_one_under_the_temp_dir() {
    let run = payonce(&["demo"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let line = run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("ledger directory: "))
        .expect("the demo prints its directory");
    let dir = std::path::PathBuf::from(line);
    assert!(dir.starts_with(std::env::temp_dir()), "{}", dir.display());
    assert_eq!(payonce(&["verify", &arg(&dir)]).code, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}
