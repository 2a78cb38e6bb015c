//! The report's summary: what the window's events did, counted, and what
//! the ledger held at its two edges. Every text is the log's, escaped for a
//! terminal's sake here and for HTML by the template.

use std::collections::{BTreeMap, BTreeSet};

use crate::escape::escape;
use payonce::{EventKind, Refusal, Timestamp};

use crate::duration::format_age;

use super::replay::{Edge, Replayed};
use super::window::Ask;

/// Funds in one currency at the window's edges.
#[derive(Debug, Clone)]
pub(super) struct Funds {
    pub(super) currency: String,
    pub(super) held_start: String,
    pub(super) held_end: String,
    pub(super) captured_start: String,
    pub(super) captured_end: String,
}

/// A key left in flight at the window's end.
#[derive(Debug, Clone)]
pub(super) struct InFlightRow {
    pub(super) key: String,
    pub(super) withdrawal: String,
    pub(super) amount: String,
    pub(super) claimed: String,
    pub(super) claimed_seq: u64,
    pub(super) age: String,
    pub(super) last_error: String,
}

/// An operator's action: resolve, release, correct, end-session.
#[derive(Debug, Clone)]
pub(super) struct Action {
    pub(super) seq: u64,
    pub(super) at: String,
    pub(super) action: &'static str,
    pub(super) subject: String,
    pub(super) by: String,
    pub(super) note: String,
}

/// The summary.
#[derive(Debug, Clone)]
pub(super) struct Summary {
    pub(super) events: usize,
    pub(super) withdrawals: usize,
    pub(super) sends: usize,
    pub(super) refusals: usize,
    /// Refusals per kind, in words.
    pub(super) refusal_kinds: Vec<(String, usize)>,
    /// Request keys with a record at the end (the whole ledger's).
    pub(super) keys_at_end: usize,
    pub(super) in_flight: Vec<InFlightRow>,
    pub(super) funds: Vec<Funds>,
    pub(super) actions: Vec<Action>,
}

/// A refusal's kind in an auditor's words.
pub(super) fn refusal_words(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::Claimed { .. } => "a second key for a claimed withdrawal",
        Refusal::InFlight { .. } => "a retry while in flight",
        Refusal::KeyReused { .. } => "a key reused with a conflicting fingerprint",
        Refusal::OutcomeMismatch { .. } => "an outcome that is not the claimed withdrawal",
        Refusal::OutcomeDiffers { .. } => "a different outcome for a settled key",
        Refusal::HasOutcome { .. } => "a key that already has an outcome",
        Refusal::UnknownWithdrawal { .. } => "an unknown withdrawal",
        Refusal::NotAsCreated { .. } => "a withdrawal not as created",
        Refusal::NoSendRunning { .. } => "a send result with no send running",
        Refusal::HeldTotalTooLarge { .. } => "a held total over its limit",
        Refusal::Unsettled { .. } => "an outcome that is not settled",
        Refusal::ForbiddenMove { .. } => "a move the state machine forbids",
        Refusal::NoOutcome { .. } => "a correction of a key with no outcome",
        Refusal::NoSession { .. } => "a session that is not running",
        _ => "another refusal",
    }
}

/// An operator's action, if the event is one.
fn action(kind: &EventKind) -> Option<(&'static str, String, String, String)> {
    let text = |text: &str| escape(text).into_owned();
    match kind {
        EventKind::Resolved { key, note, by, .. } => Some((
            "resolve",
            format!("request key {}", text(key.as_str())),
            text(by.as_str()),
            text(note.as_str()),
        )),
        EventKind::Released { key, note, by, .. } => Some((
            "release",
            format!("request key {}", text(key.as_str())),
            text(by.as_str()),
            text(note.as_str()),
        )),
        EventKind::Corrected { key, note, by, .. } => Some((
            "correct",
            format!("request key {}", text(key.as_str())),
            text(by.as_str()),
            text(note.as_str()),
        )),
        EventKind::SessionEnded { worker, note, by } => Some((
            "end-session",
            format!("worker {}", text(worker.as_str())),
            text(by.as_str()),
            text(note.as_str()),
        )),
        _ => None,
    }
}

/// Funds per currency at both edges, every currency either edge names.
fn funds(start: &Edge, end: &Edge) -> Vec<Funds> {
    let currencies: BTreeSet<_> = [&start.held, &end.held, &start.captured, &end.captured]
        .into_iter()
        .flat_map(BTreeMap::keys)
        .collect();
    let amount = |totals: &BTreeMap<_, rust_decimal::Decimal>, currency| {
        totals
            .get(currency)
            .map_or_else(|| "0".to_owned(), ToString::to_string)
    };
    currencies
        .into_iter()
        .map(|currency| Funds {
            currency: escape(currency.as_str()).into_owned(),
            held_start: amount(&start.held, currency),
            held_end: amount(&end.held, currency),
            captured_start: amount(&start.captured, currency),
            captured_end: amount(&end.captured, currency),
        })
        .collect()
}

/// The keys in flight at the window's end that the report follows, aged
/// as of `now`.
fn in_flight(end: &Edge, ask: &Ask, now: Timestamp) -> Vec<InFlightRow> {
    end.in_flight
        .iter()
        .filter(|entry| {
            ask.subjects.is_empty()
                || ask.subjects.iter().any(|subject| match subject {
                    payonce::Subject::Key(key) => *key == entry.key,
                    payonce::Subject::Withdrawal(id) => *id == entry.withdrawal,
                })
        })
        .map(|entry| InFlightRow {
            key: escape(entry.key.as_str()).into_owned(),
            withdrawal: escape(entry.withdrawal.as_str()).into_owned(),
            amount: format!("{} {}", entry.amount, escape(entry.currency.as_str())),
            claimed: entry.claimed_at.to_string(),
            claimed_seq: entry.claimed_seq,
            age: format_age(now.since(entry.claimed_at)),
            last_error: entry
                .last_error
                .as_ref()
                .map_or_else(|| "-".to_owned(), |e| escape(e.as_str()).into_owned()),
        })
        .collect()
}

impl Summary {
    /// The summary of `found`'s window.
    pub(super) fn of(found: &Replayed, ask: &Ask) -> Summary {
        let mut withdrawals = BTreeSet::new();
        let mut kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
        let (mut sends, mut refusals, mut actions) = (0, 0, Vec::new());
        for shown in &found.shown {
            if let Some(id) = &shown.withdrawal {
                withdrawals.insert(id.clone());
            }
            match &shown.event.kind {
                EventKind::Claimed { .. } => sends += 1,
                EventKind::Refused { refusal, .. } => {
                    refusals += 1;
                    *kinds.entry(refusal_words(refusal)).or_default() += 1;
                }
                kind => {
                    if let Some((action, subject, by, note)) = action(kind) {
                        actions.push(Action {
                            seq: shown.event.seq,
                            at: shown.event.at.to_string(),
                            action,
                            subject,
                            by,
                            note,
                        });
                    }
                }
            }
        }
        // Ages are as of the window's end, as `state --at` ages them.
        let now = found.end.at.unwrap_or_default();
        Summary {
            events: found.shown_count,
            withdrawals: withdrawals.len(),
            sends,
            refusals,
            refusal_kinds: kinds
                .into_iter()
                .map(|(kind, n)| (kind.to_owned(), n))
                .collect(),
            keys_at_end: found.end.keys,
            in_flight: in_flight(&found.end, ask, now),
            funds: funds(&found.start, &found.end),
            actions,
        }
    }
}
