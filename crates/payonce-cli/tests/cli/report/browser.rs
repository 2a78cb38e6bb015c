//! The report opened in a real browser: Debian's headless Chromium reads
//! the page the demo's ledger gives, and its DOM and a screenshot are
//! checked. Under `CI=true` a missing browser fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{by_id, demo, report, sends};
use crate::fixture::{arg, payonce};

/// Headless Chromium, found on this machine.
pub struct Chromium {
    path: PathBuf,
}

/// The browser, or `None` (with a note on stderr) where there is none and
/// `CI` is not `true`; under `CI=true` its absence fails the test.
pub fn chromium() -> Option<Chromium> {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    find_chromium(&["/usr/bin/chromium", "/usr/bin/chromium-browser"], ci)
}

/// The first of `candidates` that is a file; where none is, a panic when
/// `ci`, else `None` with a note on stderr.
fn find_chromium(candidates: &[&str], ci: bool) -> Option<Chromium> {
    let found = candidates
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file());
    match found {
        Some(path) => Some(Chromium { path }),
        None if ci => {
            panic!("CI=true and no chromium: install it (apt-get install -y chromium)")
        }
        None => {
            eprintln!("no chromium on this machine: the browser checks did not run");
            None
        }
    }
}

// Guards against the browser test passing under CI=true on a machine
// without a browser, by skipping instead of failing.
#[test]
fn under_ci_a_missing_browser_fails_and_elsewhere_skips() {
    let missing = ["/nonexistent/chromium"];
    let failed = std::panic::catch_unwind(|| find_chromium(&missing, true));
    assert!(failed.is_err(), "CI=true and no browser did not fail");
    assert!(find_chromium(&missing, false).is_none());
    let here = std::env::current_exe().unwrap();
    let found = find_chromium(&[missing[0], here.to_str().unwrap()], true).unwrap();
    assert_eq!(found.path, here);
}

impl Chromium {
    fn run(&self, page: &Path, args: &[&str]) -> std::process::Output {
        let profile = tempfile::tempdir().unwrap();
        let output = Command::new(&self.path)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(args)
            .arg(format!("file://{}", page.display()))
            .output()
            .unwrap();
        assert!(output.status.success(), "chromium failed: {output:?}");
        output
    }

    /// The DOM after the page loaded and its script ran, serialized.
    pub fn dom(&self, page: &Path) -> String {
        String::from_utf8(self.run(page, &["--dump-dom"]).stdout).unwrap()
    }

    /// The page printed to PDF as its print stylesheet lays it out; the
    /// PDF's bytes.
    pub fn print(&self, page: &Path, pdf: &Path) -> Vec<u8> {
        self.run(
            page,
            &[
                &format!("--print-to-pdf={}", pdf.display()),
                "--no-pdf-header-footer",
            ],
        );
        std::fs::read(pdf).unwrap()
    }

    /// A screenshot of the page at `width` by `height`; its PNG's bytes.
    pub fn screenshot(&self, page: &Path, png: &Path, width: u32, height: u32) -> Vec<u8> {
        self.run(
            page,
            &[
                &format!("--screenshot={}", png.display()),
                &format!("--window-size={width},{height}"),
                "--hide-scrollbars",
            ],
        );
        std::fs::read(png).unwrap()
    }
}

/// `text` as a serialized DOM writes a text node.
pub fn as_dom_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\u{a0}', "&nbsp;")
}

/// The lane of `withdrawal` in a serialized DOM.
fn lane<'a>(dom: &'a str, withdrawal: &str) -> &'a str {
    let at = dom
        .find(&format!("<g class=\"lane\" data-lane=\"{withdrawal}\">"))
        .unwrap_or_else(|| panic!("no lane for {withdrawal}"));
    &dom[at..at + dom[at..].find("</g>").unwrap()]
}

/// The held total at the last point of each currency's chart.
fn last_held_points(dom: &str) -> Vec<(String, String)> {
    dom.split("<svg class=\"holds\" data-currency=\"")
        .skip(1)
        .map(|chart| {
            let currency = chart[..chart.find('"').unwrap()].to_owned();
            let chart = &chart[..chart.find("</svg>").unwrap()];
            let last = chart.rsplit("data-held=\"").next().unwrap();
            (currency, last[..last.find('"').unwrap()].to_owned())
        })
        .collect()
}

/// The printed timeline is whole on one page: the page of the PDF (read
/// by poppler's `pdftotext`) that holds its heading and legend holds its
/// axis and every withdrawal's lane too. Under `CI=true` a missing
/// `pdftotext` fails the test.
fn timeline_prints_on_one_page(pdf: &Path, dom: &str) {
    let text = match Command::new("pdftotext").arg(pdf).arg("-").output() {
        Ok(output) if output.status.success() => String::from_utf8(output.stdout).unwrap(),
        found if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true and no pdftotext (apt-get install -y poppler-utils): {found:?}")
        }
        _ => {
            eprintln!("no pdftotext on this machine: the printed timeline was not read");
            return;
        }
    };
    let lanes: Vec<&str> = dom
        .split("<g class=\"lane\" data-lane=\"")
        .skip(1)
        .map(|lane| &lane[..lane.find('"').unwrap()])
        .filter(|lane| lane.starts_with("w-"))
        .collect();
    assert!(lanes.len() >= 3, "the demo's withdrawals: {lanes:?}");
    let pages: Vec<&str> = text.split('\u{c}').collect();
    let page = pages
        .iter()
        .find(|page| page.contains("Timeline") && page.contains("created"))
        .expect("a page with the timeline's heading and legend");
    for lane in &lanes {
        assert!(
            page.contains(lane),
            "lane {lane} is not on the timeline's page: {page}"
        );
    }
    let ticks: Vec<&str> = dom
        .split("<line class=\"tick\"")
        .skip(1)
        .map(|tick| {
            let label = &tick[tick.find("<text").unwrap()..];
            &label[label.find('>').unwrap() + 1..label.find("</text>").unwrap()]
        })
        .collect();
    assert!(!ticks.is_empty(), "a time axis");
    for tick in ticks {
        assert!(
            page.contains(tick),
            "the axis's {tick} is not on the timeline's page"
        );
    }
}

// Guards against a page a browser reads otherwise than the file says: a
// lane or mark missing, counts that differ from verify's, a held chart
// that ends elsewhere than the state at the window's end, a blank page.
#[test]
fn the_demos_report_reads_right_in_a_browser() {
    let Some(browser) = chromium() else {
        return;
    };
    let dir = demo();
    let ledger = arg(&dir.path().join("ledger"));
    let out = dir.path().join("report.html");
    let (run, _) = report(&ledger, &out, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let dom = browser.dom(&out);
    assert!(
        dom.contains("id=\"filter-box\">"),
        "the script showed the filter"
    );

    let exported = payonce(&["export", &ledger]);
    let events: Vec<serde_json::Value> = exported
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let created: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "created")
        .map(|e| e["withdrawal"].as_str().unwrap())
        .collect();
    assert_eq!(created.len(), 6, "the demo's six incidents");
    assert_eq!(dom.matches("<g class=\"lane\" data-lane=\"w-").count(), 6);
    for withdrawal in &created {
        let history = payonce(&["history", &ledger, "--withdrawal", withdrawal, "--json"]);
        let lane = lane(&dom, withdrawal);
        for event in history.json()["events"].as_array().unwrap() {
            let seq = event["seq"].as_u64().unwrap();
            let mark = &lane[lane.find(&format!("id=\"m-{seq}\"")).unwrap()..];
            let mark = &mark[..mark.find("</a>").unwrap()];
            let words = event["explanation"].as_str().unwrap();
            let title = format!(
                "<title>seq {seq} at {}: {}",
                event["at"].as_str().unwrap(),
                as_dom_text(words)
            );
            assert!(mark.contains(&title), "{withdrawal} seq {seq}: {mark}");
        }
    }
    let timeout = events.iter().find(|e| e["event"] == "resolved").unwrap()["withdrawal"]
        .as_str()
        .unwrap();
    let marks = lane(&dom, timeout);
    for class in ["created", "claimed", "failed", "refused", "operator"] {
        assert!(
            marks.contains(&format!("class=\"{class}\"")),
            "{class} in {marks}"
        );
    }
    assert_eq!(
        marks.matches("class=\"refused\"").count(),
        2,
        "a retry and a fresh key"
    );

    let verify = payonce(&["verify", &ledger, "--json"]).json();
    for (id, field) in [
        ("count-events", "events"),
        ("count-refusals", "refusals"),
        ("count-keys", "keys"),
        ("count-in-flight", "in_flight"),
    ] {
        assert_eq!(by_id(&dom, id), verify[field].to_string(), "{id}");
    }
    let end = events.last().unwrap()["at"].as_str().unwrap();
    let state = payonce(&["state", &ledger, "--at", end, "--json"]).json();
    let charts = last_held_points(&dom);
    assert!(!charts.is_empty(), "the demo held funds in the window");
    for (currency, held) in charts {
        let expected = state["held_totals"][&currency].as_str().unwrap_or("0");
        assert_eq!(held, expected, "{currency} at the window's end");
    }

    // Printed, every page is A4 landscape (841.92 by 595.2 points).
    let pdf = browser.print(&out, &dir.path().join("report.pdf"));
    let pdf = String::from_utf8_lossy(&pdf);
    let boxes: Vec<&str> = pdf.split("/MediaBox [").skip(1).collect();
    assert!(!boxes.is_empty(), "a PDF with pages");
    for media in boxes {
        let numbers: Vec<f64> = media[..media.find(']').unwrap()]
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert!(
            (numbers[2] - 841.92).abs() < 1.0 && (numbers[3] - 595.2).abs() < 1.0,
            "{numbers:?}"
        );
    }

    timeline_prints_on_one_page(&dir.path().join("report.pdf"), &dom);

    let png = browser.screenshot(&out, &dir.path().join("report.png"), 1280, 1600);
    let blank_page = dir.path().join("blank.html");
    std::fs::write(&blank_page, "<!DOCTYPE html><title>blank</title>").unwrap();
    let blank = browser.screenshot(&blank_page, &dir.path().join("blank.png"), 1280, 1600);
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    assert!(
        png.len() > 10 * blank.len(),
        "the screenshot is not blank: {} bytes, a blank page's {}",
        png.len(),
        blank.len()
    );
}

// Guards against a timeline that a printer cuts across pages: the most
// lanes a page draws, far taller than a page at full width, printed.
#[test]
fn a_timeline_of_the_most_lanes_prints_on_one_a4_page() {
    let Some(browser) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ledger");
    sends(&log, payonce_cli::TIMELINE_LANES_MAX + 5);
    let out = dir.path().join("r.html");
    let (run, _) = report(&arg(&log), &out, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let dom = browser.dom(&out);
    let lanes = dom.matches("<g class=\"lane\"").count();
    assert_eq!(lanes, payonce_cli::TIMELINE_LANES_MAX);
    let pdf = dir.path().join("r.pdf");
    browser.print(&out, &pdf);
    timeline_prints_on_one_page(&pdf, &dom);
}
