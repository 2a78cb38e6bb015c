//! Text from the log that looks like HTML: keys, notes, references,
//! errors with `<`, `>`, `"`, `&`, `'`. The page shows it as text; no
//! element or attribute comes of it.

use std::sync::Arc;

use payonce::{Ledger, ManualClock, SendFailure};

use super::browser::{as_dom_text, chromium};
use super::report;
use crate::fixture::{START, arg, config, new_withdrawal, sent};

const KEY: &str = "<script>alert(1)</script>";
const SECOND_KEY: &str = "\" onmouseover=\"x";
const NOTE: &str = "checked <b>'the rail'</b> & found \"it\"";
const REFERENCE: &str = "0x<i>'&\"</i>";
const ERROR: &str = "<img src=x onerror=alert(2)>";

// Guards against text from the log reaching the page as markup.
#[test]
fn hostile_text_from_the_log_is_text_in_the_page_and_in_the_dom() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ledger");
    let ledger = Ledger::init_with(&log, config(Arc::new(ManualClock::new(START)))).unwrap();
    let request = new_withdrawal(&ledger, "10");
    let failed = ledger.submit(KEY, &request, |_| Err(SendFailure::failed(ERROR)));
    assert!(failed.is_err());
    let refused = ledger.submit(SECOND_KEY, &request, |_| Err(SendFailure::failed("no")));
    assert!(refused.is_err());
    ledger
        .resolve(KEY, sent(&request, REFERENCE), NOTE, "ops")
        .unwrap();
    drop(ledger);

    let out = dir.path().join("r.html");
    let (run, page) = report(&arg(&log), &out, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let page = page.unwrap();
    assert_eq!(
        page.matches("<script").count(),
        1,
        "the page's own script only"
    );
    for markup in ["<b>", "<i>", "<img", "onmouseover=\"x", "<script>alert"] {
        assert!(
            !page.contains(markup),
            "{markup} reached the page as markup"
        );
    }
    // askama writes `<` `>` `&` `"` `'` as numeric references.
    assert!(page.contains("&#60;script&#62;alert(1)&#60;/script&#62;"));
    assert!(page.contains("&#34; onmouseover=&#34;x"));
    assert!(page.contains("&#60;b&#62;&#39;the rail&#39;&#60;/b&#62; &#38; found &#34;it&#34;"));

    let Some(browser) = chromium() else {
        return;
    };
    let dom = browser.dom(&out);
    assert_eq!(
        dom.matches("<script").count(),
        1,
        "no script element from the log"
    );
    for markup in ["<b>", "<i>", "<img", "onmouseover=\"x\""] {
        assert!(
            !dom.contains(markup),
            "{markup} became an element or attribute"
        );
    }
    // Text nodes serialize with `&`, `<` and `>` escaped and quotes as they
    // are: the same text, read back.
    for text in [KEY, SECOND_KEY, NOTE, REFERENCE, ERROR] {
        assert!(
            dom.contains(&as_dom_text(text)),
            "{text} is not in the DOM as text"
        );
    }
}
