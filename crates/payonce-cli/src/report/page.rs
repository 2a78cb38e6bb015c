//! The page: what the template is handed, every text already in words,
//! and its rendering. The template (`templates/report.html`, askama)
//! escapes every value for HTML; nothing here builds HTML.

use crate::escape::escape;
use askama::Template;
use payonce::Head;

use crate::explain::explain;

use super::holds::{self, HoldsChart};
use super::replay::Replayed;
use super::summary::Summary;
use super::timeline::{self, Timeline};

/// One line of the verification result.
#[derive(Debug, Clone)]
pub(super) struct Verdict {
    /// Whether it is good news.
    pub(super) ok: bool,
    pub(super) words: String,
}

/// The header: what the page is worth.
#[derive(Debug, Clone)]
pub(super) struct Header {
    pub(super) ledger: String,
    pub(super) window_asked: String,
    pub(super) window_found: String,
    pub(super) following: String,
    pub(super) made_at: String,
    pub(super) version: &'static str,
    pub(super) start_head: String,
    pub(super) end_head: String,
    pub(super) clean: bool,
    pub(super) verdicts: Vec<Verdict>,
}

/// A row of the events table.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) seq: u64,
    pub(super) at: String,
    pub(super) kind: &'static str,
    pub(super) key: String,
    pub(super) withdrawal: String,
    pub(super) words: String,
    pub(super) divergence: Option<String>,
    /// Whether the timeline has its mark.
    pub(super) marked: bool,
    /// What the filter matches: its keys and its withdrawal.
    pub(super) filter: String,
}

/// The whole page.
#[derive(Template)]
#[template(path = "report.html")]
pub(super) struct Page {
    pub(super) header: Header,
    pub(super) summary: Summary,
    pub(super) timeline: Timeline,
    pub(super) holds: Vec<HoldsChart>,
    pub(super) rows: Vec<Row>,
    pub(super) width: String,
    pub(super) holds_height: String,
}

/// Text that refuses to grow past `limit` bytes.
struct Bounded {
    text: String,
    limit: usize,
    over: bool,
}

impl std::fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.text.len() + s.len() > self.limit {
            self.over = true;
            return Err(std::fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

/// A head as `SEQ:DIGEST`, or what its absence means.
pub(super) fn head_words(head: Option<Head>, none: &str) -> String {
    head.map_or_else(|| none.to_owned(), |head| head.to_string())
}

/// The events table's rows.
pub(super) fn rows(found: &Replayed, timeline: &Timeline) -> Vec<Row> {
    found
        .shown
        .iter()
        .map(|shown| {
            let event = &shown.event;
            let keys: Vec<String> = event
                .kind
                .keys_touched()
                .iter()
                .map(|key| escape(key.as_str()).into_owned())
                .collect();
            let withdrawal = shown
                .withdrawal
                .as_ref()
                .map_or_else(String::new, |id| escape(id.as_str()).into_owned());
            let words = explain(event, shown.withdrawal.as_ref());
            Row {
                seq: event.seq,
                at: event.at.to_string(),
                kind: event.kind.name(),
                key: if keys.is_empty() {
                    "-".to_owned()
                } else {
                    keys.join(", ")
                },
                filter: format!("{} {withdrawal}", keys.join(" ")),
                withdrawal: if withdrawal.is_empty() {
                    "-".to_owned()
                } else {
                    withdrawal
                },
                words: escape(&words).into_owned(),
                divergence: shown.divergence.as_ref().map(|d| escape(d).into_owned()),
                marked: timeline.marked.contains(&event.seq),
            }
        })
        .collect()
}

impl Page {
    /// The page's parts, put together.
    pub(super) fn new(
        header: Header,
        summary: Summary,
        timeline: Timeline,
        holds: Vec<HoldsChart>,
        rows: Vec<Row>,
    ) -> Page {
        Page {
            header,
            summary,
            timeline,
            holds,
            rows,
            width: timeline::n(timeline::WIDTH),
            holds_height: holds::height(),
        }
    }

    /// The page as HTML, or `None` if it would be longer than `limit`
    /// bytes: the text stops growing at the limit.
    pub(super) fn html(&self, limit: usize) -> Result<Option<String>, askama::Error> {
        let mut page = Bounded {
            text: String::new(),
            limit,
            over: false,
        };
        match self.render_into(&mut page) {
            Ok(()) => Ok(Some(page.text)),
            Err(_) if page.over => Ok(None),
            Err(error) => Err(error),
        }
    }
}
