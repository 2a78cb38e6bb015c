//! `payonce report`: the page it writes, what it says of the log's
//! verification, and the windows it refuses without writing anything.

mod browser;
mod damaged;
mod hostile;
mod postgres;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use payonce::{Ledger, ManualClock, SendFailure};

use crate::fixture::{START, arg, config, new_withdrawal, payonce, scenario, sent, snapshot};

/// The text of the element whose id is `id`, up to its first child tag.
pub fn by_id<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no element #{id} in the page"));
    let open = at + html[at..].find('>').unwrap() + 1;
    let close = open + html[open..].find('<').unwrap();
    &html[open..close]
}

/// The summary's held funds at the window's end, per currency, as the
/// page's funds table says.
pub fn held_at_end(html: &str) -> BTreeMap<String, String> {
    html.split("<tr data-currency=\"")
        .skip(1)
        .map(|row| {
            let currency = &row[..row.find('"').unwrap()];
            let cell = &row[row.find("held-end\">").unwrap() + "held-end\">".len()..];
            (
                currency.to_owned(),
                cell[..cell.find('<').unwrap()].to_owned(),
            )
        })
        .collect()
}

/// The contrast ratio of the colour `#rgb` or `#rrggbb` on white (WCAG 2).
fn contrast_on_white(hex: &str) -> f64 {
    let hex: String = match hex.len() {
        3 => hex.chars().flat_map(|c| [c, c]).collect(),
        _ => hex.to_owned(),
    };
    let channel = |i: usize| {
        let c = f64::from(u8::from_str_radix(&hex[i..i + 2], 16).unwrap()) / 255.0;
        if c <= 0.03928 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    let luminance = 0.2126 * channel(0) + 0.7152 * channel(2) + 0.0722 * channel(4);
    1.05 / (luminance + 0.05)
}

/// Runs `payonce report DIR -o OUT` with `rest`; returns the run and the
/// page, if one was written.
pub fn report(dir: &str, out: &Path, rest: &[&str]) -> (crate::fixture::Run, Option<String>) {
    let mut args = vec!["report", dir, "-o", out.to_str().unwrap()];
    args.extend_from_slice(rest);
    let run = payonce(&args);
    let page = std::fs::read_to_string(out).ok();
    (run, page)
}

/// The demo's ledger in a new directory, and the directory.
pub fn demo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let run = payonce(&["demo", &arg(&ledger)]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    dir
}

// Guards against a summary that counts otherwise than verify, or a page
// that claims a verification it did not make.
#[test]
fn the_whole_logs_report_counts_as_verify_and_names_its_heads() {
    let dir = demo();
    let ledger = arg(&dir.path().join("ledger"));
    let before = snapshot(&dir.path().join("ledger"));
    let out = dir.path().join("report.html");
    let (run, page) = report(&ledger, &out, &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("report written to"), "{}", run.stdout);
    let page = page.unwrap();
    let verify = payonce(&["verify", &ledger, "--json"]).json();
    assert_eq!(by_id(&page, "count-events"), verify["events"].to_string());
    assert_eq!(
        by_id(&page, "count-refusals"),
        verify["refusals"].to_string()
    );
    assert_eq!(by_id(&page, "count-keys"), verify["keys"].to_string());
    assert_eq!(
        by_id(&page, "count-in-flight"),
        verify["in_flight"].to_string()
    );
    let held: BTreeMap<String, String> = held_at_end(&page)
        .into_iter()
        .filter(|(_, amount)| amount != "0")
        .collect();
    let verified: BTreeMap<String, String> =
        serde_json::from_value(verify["held"].clone()).unwrap();
    assert_eq!(held, verified);
    assert_eq!(by_id(&page, "end-head"), verify["head"].as_str().unwrap());
    assert!(by_id(&page, "start-head").starts_with("none"));
    assert!(page.contains("Every checksum and chain link verified"));
    assert!(page.contains("Every recorded decision re-derived"));
    // Without scripts the page reads whole: every row shown, the filter
    // (which needs the script) hidden; the one script is inline and small,
    // and nothing is fetched from elsewhere.
    assert!(page.contains("<p id=\"filter-box\" hidden>"));
    assert_eq!(page.matches("<tr id=\"e-").count(), 31);
    assert_eq!(
        page.matches(" hidden>").count(),
        1,
        "only the filter is hidden"
    );
    let script = &page[page.find("<script>").unwrap()..page.find("</script>").unwrap()];
    assert!(script.len() < 1024, "{} bytes of script", script.len());
    for remote in ["src=", "http://", "https://", "@import", "url("] {
        let outside = page.replace("http://www.w3.org/2000/svg", "");
        assert!(!outside.contains(remote), "{remote} in the page");
    }
    // Every text colour reads on white at WCAG AA's 4.5:1 at least.
    let colours = page
        .match_indices("color:")
        .filter(|(at, _)| !page[..*at].ends_with('-'))
        .filter_map(|(at, _)| page[at + "color:".len()..].trim_start().strip_prefix('#'));
    for hex in colours {
        let hex: String = hex.chars().take_while(char::is_ascii_hexdigit).collect();
        assert!(
            contrast_on_white(&hex) >= 4.5,
            "#{hex}: {}",
            contrast_on_white(&hex)
        );
    }
    assert_eq!(
        snapshot(&dir.path().join("ledger")),
        before,
        "nothing written to the log"
    );
}

// Guards against a window that leaks events from outside it, or heads that
// do not bracket it.
#[test]
fn a_window_shows_only_its_events_between_the_heads_around_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ledger");
    scenario(&log);
    let out = dir.path().join("r.html");
    // seq 5 is at START + 3 min; 7 and 8 at START + 5 min.
    let from = START.plus(Duration::from_secs(3 * 60)).to_string();
    let to = START.plus(Duration::from_secs(5 * 60)).to_string();
    let (run, page) = report(&arg(&log), &out, &["--from", &from, "--to", &to]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let page = page.unwrap();
    assert_eq!(by_id(&page, "count-events"), "4");
    for seq in 5..=8 {
        assert!(page.contains(&format!("id=\"e-{seq}\"")), "event {seq}");
    }
    for seq in [4, 9] {
        assert!(!page.contains(&format!("id=\"e-{seq}\"")), "event {seq}");
    }
    let heads = [by_id(&page, "start-head"), by_id(&page, "end-head")];
    let (start, end) = (heads[0].split(':').next(), heads[1].split(':').next());
    let start: u64 = start.unwrap().parse().unwrap();
    let end: u64 = end.unwrap().parse().unwrap();
    assert!(start < 5, "the head before the window: {}", heads[0]);
    assert!(end >= 8, "the head through the window: {}", heads[1]);
    // The nearest heads: the last batch to end before seq 5, the first to
    // end at or after seq 8.
    let reader = payonce_log::LogReader::open(
        Arc::new(payonce_log::FsStorage::new(&log)),
        payonce_log::LogConfig::default(),
    )
    .unwrap();
    let head_at = |seq: u64| reader.head_at(seq).unwrap();
    let before = (1..5).rev().find_map(head_at).unwrap();
    let through = (8..=12).find_map(head_at).unwrap();
    assert_eq!(heads[0], before.to_string());
    assert_eq!(heads[1], through.to_string());
    let pinned = payonce(&["verify", &arg(&log), "--expect-head", heads[1]]);
    assert_eq!(
        pinned.code, 0,
        "the log holds the end head: {}",
        pinned.stderr
    );
    let by_seq = report(&arg(&log), &out, &["--from", "5", "--to", "8"])
        .1
        .unwrap();
    assert_eq!(by_id(&by_seq, "count-events"), "4");
    assert_eq!(by_id(&by_seq, "end-head"), heads[1]);
}

// Guards against --key following other keys' events, or the in-flight key
// left out of the summary.
#[test]
fn a_key_keeps_only_its_events_and_its_key_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ledger");
    let scenario = scenario(&log);
    let out = dir.path().join("r.html");
    let (run, page) = report(&arg(&log), &out, &["--key", "req-3"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let page = page.unwrap();
    // 7 claimed, 8 send_failed, 12 refused (in flight).
    assert_eq!(by_id(&page, "count-events"), "3");
    assert_eq!(by_id(&page, "count-in-flight"), "1");
    assert!(page.contains(&format!("id=\"e-{}\"", scenario.failed_claim_seq)));
    assert!(!page.contains("id=\"e-3\""));
    // The held chart spans the key's events, 00:05 to 00:08: the whole
    // ledger's USDC from its claim (seq 7), through req-4's (10, 11).
    let chart = &page[page
        .find("<svg class=\"holds\" data-currency=\"USDC\"")
        .unwrap()..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    let held: Vec<&str> = chart
        .split("data-held=\"")
        .skip(1)
        .map(|point| &point[..point.find('"').unwrap()])
        .collect();
    assert_eq!(held, ["0", "10", "17.5", "10", "10"]);
}

/// A closed ledger of `withdrawals` withdrawals each created, claimed and
/// sent, a second apart.
pub fn sends(dir: &Path, withdrawals: usize) {
    let clock = Arc::new(ManualClock::new(START));
    let ledger = Ledger::init_with(dir, config(clock.clone())).unwrap();
    for i in 0..withdrawals {
        clock.advance(Duration::from_secs(1));
        let request = new_withdrawal(&ledger, "1.00");
        ledger
            .submit(format!("k-{i}").as_str(), request, |r| {
                Ok::<_, SendFailure>(sent(r, "0x1"))
            })
            .unwrap();
    }
}

// Guards against a refused window that still writes a page, or an error
// that does not say what to do, or exits with the wrong code.
#[test]
fn bad_windows_unknown_subjects_and_oversized_windows_write_nothing_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ledger");
    let limit = payonce_cli::REPORT_EVENTS_MAX;
    sends(&log, limit / 3 + 1);
    let out = dir.path().join("r.html");
    let after = START.plus(Duration::from_secs(86_400)).to_string();
    let before = START.minus(Duration::from_secs(60)).to_string();
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (vec!["--from", &after], "outside_log", "outside the log"),
        (vec!["--to", &before], "outside_log", "outside the log"),
        (vec!["--from", "999999"], "point_past_end", "past the end"),
        (
            vec!["--from", "9", "--to", "3"],
            "usage",
            "--from is after --to",
        ),
        (
            vec!["--from", "yesterday"],
            "bad_point",
            "--from \"yesterday\"",
        ),
        (
            vec!["--to", "3000-01-01T00:00:00Z"],
            "point_out_of_range",
            "--to \"3000",
        ),
        (vec!["--key", "nobody"], "unknown_key", "nobody"),
        (vec!["--withdrawal", "w-0-7"], "unknown_withdrawal", "w-0-7"),
        (vec![], "report_too_large", "REPORT_EVENTS_MAX"),
    ];
    for (rest, kind, says) in &cases {
        let mut args = rest.clone();
        args.push("--json");
        let (run, page) = report(&arg(&log), &out, rest);
        assert_eq!(run.code, 2, "{rest:?}: {}{}", run.stdout, run.stderr);
        assert!(run.stderr.contains(says), "{rest:?}: {}", run.stderr);
        assert!(run.stderr.contains("Nothing was written") || *kind != "report_too_large");
        assert!(page.is_none(), "{rest:?} wrote a page");
        let json = payonce(
            &[
                ["report", &arg(&log), "-o", out.to_str().unwrap()].as_slice(),
                &args,
            ]
            .concat(),
        );
        assert!(
            json.stdout.contains(&format!("\"error\":\"{kind}\"")),
            "{rest:?}: {}",
            json.stdout
        );
        assert!(!out.exists());
    }
    // 100 withdrawals: the timeline draws TIMELINE_LANES_MAX lanes and
    // says how many it left to the table, whose rows for them link nowhere.
    let page = report(&arg(&log), &out, &["--from", "2", "--to", "301"])
        .1
        .unwrap();
    assert_eq!(by_id(&page, "count-events"), "300");
    let lanes = payonce_cli::TIMELINE_LANES_MAX;
    assert_eq!(page.matches("<g class=\"lane\"").count(), lanes);
    assert!(page.contains(&format!("{} more withdrawal(s) are not drawn", 100 - lanes)));
    let last_drawn = 1 + 3 * lanes as u64;
    assert!(page.contains(&format!("<a href=\"#m-{last_drawn}\">")));
    assert!(!page.contains(&format!("<a href=\"#m-{}\">", last_drawn + 1)));
    assert!(page.contains(&format!("id=\"e-{}\"", last_drawn + 1)));
    std::fs::remove_file(&out).unwrap();
    payonce(&["index", &arg(&log)]);
    let (run, page) = report(&arg(&log), &dir.path().join("k.html"), &["--key", "nobody"]);
    assert_eq!(run.code, 2, "with the index too: {}", run.stderr);
    assert!(page.is_none());
}

// Guards against a page that grows past its named size: events within the
// count limit whose texts are at their longest, escaped, are refused.
#[test]
fn a_page_over_report_bytes_max_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ledger");
    let clock = Arc::new(ManualClock::new(START));
    let ledger = Ledger::init_with(&log, config(clock.clone())).unwrap();
    // Every `<` is written `&#60;`: five bytes in the page for each.
    let error = "<".repeat(payonce_model::TEXT_LEN_MAX);
    for i in 0..800 {
        clock.advance(Duration::from_secs(1));
        let request = new_withdrawal(&ledger, "1.00");
        let failed = ledger.submit(format!("k-{i}").as_str(), request, |_| {
            Err::<payonce_model::WithdrawalRequest, _>(SendFailure::failed(error.as_str()))
        });
        assert!(failed.is_err());
    }
    drop(ledger);
    let out = dir.path().join("r.html");
    let (run, page) = report(&arg(&log), &out, &["--json"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("REPORT_BYTES_MAX"), "{}", run.stderr);
    assert!(
        run.stdout.contains("\"error\":\"report_too_large\""),
        "{}",
        run.stdout
    );
    assert!(page.is_none());
    let (run, page) = report(&arg(&log), &out, &["--from", "1", "--to", "301"]);
    assert_eq!(run.code, 0, "a narrower window fits: {}", run.stderr);
    assert!(page.unwrap().len() < payonce_cli::REPORT_BYTES_MAX);
}

// Guards against a report of an early build's log (format 1 segments,
// schema 1 events) that loses its heads or the withdrawal of an event that
// named only its key.
#[test]
fn an_early_logs_report_names_its_heads_and_attributes_key_only_events() {
    let dir = crate::schemas::schema_1_copy();
    let out = tempfile::tempdir().unwrap();
    let out = out.path().join("r.html");
    let (run, page) = report(&arg(dir.path()), &out, &["--withdrawal", "w-6"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let page = page.unwrap();
    let verify = payonce(&["verify", &arg(dir.path()), "--json"]).json();
    assert_eq!(by_id(&page, "end-head"), verify["head"].as_str().unwrap());
    // 6 created, 7 claimed, 8 send_rejected and 9 released (these two of
    // schema 1 name only k-rejected): all in w-6's lane.
    let lane = &page[page.find("data-lane=\"w-6\"").unwrap()..];
    let lane = &lane[..lane.find("</g>").unwrap()];
    for seq in 6..=9 {
        assert!(lane.contains(&format!("id=\"m-{seq}\"")), "mark {seq}");
    }
    assert_eq!(by_id(&page, "count-events"), "4");
}

// Guards against operator actions or later rail reports missing from the
// summary or the timeline: a release, a rail's confirmation, a correction.
#[test]
fn releases_later_reports_and_corrections_are_in_the_summary_and_the_lanes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ledger");
    let clock = Arc::new(ManualClock::new(START));
    let ledger = Ledger::init_with(&log, config(clock.clone())).unwrap();
    let paid = new_withdrawal(&ledger, "5");
    let sent_out = ledger
        .submit("k-paid", &paid, |r| Ok(sent(r, "0xa")))
        .unwrap();
    clock.advance(Duration::from_secs(60));
    ledger
        .advance("k-paid", &sent_out.confirm().unwrap())
        .unwrap();
    clock.advance(Duration::from_secs(60));
    ledger
        .correct(
            "k-paid",
            &sent(&paid, "0xb"),
            "the rail's explorer says 0xb",
            "ops-ann",
        )
        .unwrap();
    let refused = new_withdrawal(&ledger, "6");
    let failed = ledger.submit("k-refused", &refused, |_| {
        Err(SendFailure::Rejected("no funds".parse().unwrap()))
    });
    assert!(failed.is_err());
    ledger
        .release("k-refused", "nothing left custody", "ops-bob")
        .unwrap();
    drop(ledger);

    let out = dir.path().join("r.html");
    let (run, page) = report(&arg(&log), &out, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let page = page.unwrap();
    let actions = &page[page.find("<table id=\"actions\">").unwrap()..];
    let actions = &actions[..actions.find("</table>").unwrap()];
    for expected in [
        "<td>correct</td>",
        "<td>ops-ann</td>",
        "the rail&#39;s explorer says 0xb",
        "<td>release</td>",
        "<td>ops-bob</td>",
        "nothing left custody",
    ] {
        assert!(actions.contains(expected), "{expected} in {actions}");
    }
    let lane = &page[page.find(&format!("data-lane=\"{}\"", paid.id())).unwrap()..];
    let lane = &lane[..lane.find("</g>").unwrap()];
    // Completed and advanced: two outcomes; the correction, an operator's.
    assert_eq!(lane.matches("class=\"outcome\"").count(), 2, "{lane}");
    assert_eq!(lane.matches("class=\"operator\"").count(), 1, "{lane}");
    let other = &page[page
        .find(&format!("data-lane=\"{}\"", refused.id()))
        .unwrap()..];
    let other = &other[..other.find("</g>").unwrap()];
    assert!(other.contains("class=\"rejected\"") && other.contains("class=\"operator\""));
}
