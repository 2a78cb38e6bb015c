//! What reports print as JSON: one serialisable shape per thing a report
//! shows (an event, a key in flight, a request key's record, a torn tail,
//! the held totals), and the one function that writes any of them as a
//! line. The text reports read the same shapes, so both outputs say the
//! same thing.

use std::collections::BTreeMap;

use payonce::{Event, InFlight, State, Timestamp};
use payonce_log::TornTail;
use payonce_model::WithdrawalId;
use serde::Serialize;
use serde_json::Value;

use crate::logdir::LogDir;
use payonce_log::segment_name;

/// One event, for `history --json` and `export`.
#[derive(Debug, Serialize)]
pub(crate) struct EventJson {
    pub(crate) seq: u64,
    /// RFC 3339.
    pub(crate) at: String,
    pub(crate) at_unix_nanos: u64,
    pub(crate) schema: u16,
    /// The kind's short name: claimed, refused, ...
    pub(crate) event: &'static str,
    pub(crate) key: Option<String>,
    /// The withdrawal the event is about. For history, a schema-1 event
    /// about a key alone is attributed to the withdrawal its key held, as
    /// the ledger's state before the event says; for export, only the one
    /// the event names.
    pub(crate) withdrawal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) explanation: Option<String>,
    /// The event's full content, as the log holds it.
    pub(crate) kind: Value,
}

impl EventJson {
    /// `withdrawal` is the one the event is attributed to; `explanation`,
    /// if any, is the decision in words.
    pub(crate) fn new(
        event: &Event,
        withdrawal: Option<&WithdrawalId>,
        explanation: Option<String>,
    ) -> Self {
        EventJson {
            seq: event.seq,
            at: event.at.to_string(),
            at_unix_nanos: event.at.unix_nanos(),
            schema: event.schema,
            event: event.kind.name(),
            key: event.kind.key().map(ToString::to_string),
            withdrawal: withdrawal.map(ToString::to_string),
            explanation,
            // Events are plain data; serialising one cannot fail.
            kind: serde_json::to_value(&event.kind).unwrap_or(Value::Null),
        }
    }
}

/// A torn tail, for JSON.
#[derive(Debug, Serialize)]
pub(crate) struct TornTailJson {
    pub(crate) file: String,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

impl TornTailJson {
    pub(crate) fn new(log: &LogDir, torn: &TornTail) -> Self {
        TornTailJson {
            file: log
                .dir
                .join(segment_name(torn.segment))
                .display()
                .to_string(),
            offset: torn.offset,
            len: torn.len,
        }
    }
}

/// A key in flight, for JSON.
#[derive(Debug, Serialize)]
pub(crate) struct InFlightKeyJson {
    pub(crate) key: String,
    pub(crate) withdrawal: String,
    pub(crate) amount: String,
    pub(crate) currency: String,
    pub(crate) claimed_seq: u64,
    pub(crate) claimed_at: String,
    pub(crate) age_seconds: u64,
    /// Whether funds are still held (a rail refusal gave them back).
    pub(crate) held: bool,
    /// Claimed since the ledger was last opened and not completed: the
    /// process that claimed it may still be sending.
    pub(crate) send_may_be_running: bool,
    pub(crate) last_error: Option<String>,
}

impl InFlightKeyJson {
    pub(crate) fn new(entry: &InFlight, now: Timestamp) -> Self {
        InFlightKeyJson {
            key: entry.key.to_string(),
            withdrawal: entry.withdrawal.to_string(),
            amount: entry.amount.to_string(),
            currency: entry.currency.to_string(),
            claimed_seq: entry.claimed_seq,
            claimed_at: entry.claimed_at.to_string(),
            age_seconds: now.since(entry.claimed_at).as_secs(),
            held: entry.held,
            send_may_be_running: entry.send_running,
            last_error: entry.last_error.as_ref().map(ToString::to_string),
        }
    }
}

/// A request key's record, for JSON.
#[derive(Debug, Serialize)]
pub(crate) struct KeyRecordJson {
    pub(crate) key: String,
    pub(crate) withdrawal: String,
    pub(crate) amount: String,
    pub(crate) currency: String,
    pub(crate) destination: String,
    pub(crate) claimed_seq: u64,
    pub(crate) claimed_at: String,
    /// The outcome's state, or "in flight".
    pub(crate) outcome: String,
    pub(crate) reference: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) last_error: Option<String>,
    /// The outcome as the ledger holds it; null while in flight.
    pub(crate) outcome_withdrawal: Value,
}

/// Every request key's record in `state`, oldest claim first.
pub(crate) fn key_records(state: &State) -> Vec<KeyRecordJson> {
    let mut records: Vec<KeyRecordJson> = state
        .records()
        .map(|(key, record)| {
            let fingerprint = record.fingerprint();
            let outcome = record.outcome();
            let outcome = outcome.as_ref();
            KeyRecordJson {
                key: key.to_string(),
                withdrawal: fingerprint.id().to_string(),
                amount: fingerprint.amount().to_string(),
                currency: fingerprint.currency().to_string(),
                destination: fingerprint.destination().to_string(),
                claimed_seq: record.claimed_seq(),
                claimed_at: record.claimed_at().to_string(),
                outcome: outcome.map_or_else(|| "in flight".to_owned(), |o| o.state().to_string()),
                reference: outcome.and_then(|o| o.reference()).map(ToString::to_string),
                reason: outcome.and_then(|o| o.reason()).map(ToString::to_string),
                last_error: record.last_error().map(String::from),
                outcome_withdrawal: outcome
                    .and_then(|o| serde_json::to_value(o).ok())
                    .unwrap_or(Value::Null),
            }
        })
        .collect();
    records.sort_by_key(|record| record.claimed_seq);
    records
}

/// The funds held in total per currency, for JSON.
pub(crate) fn held_totals_json(state: &State) -> BTreeMap<String, String> {
    state
        .held_totals()
        .iter()
        // A total keeps the scale of the arithmetic that made it (10.0
        // after adding and removing 7.5); print it as an amount prints.
        .map(|(currency, total)| (currency.to_string(), total.normalize().to_string()))
        .collect()
}

/// One line of JSON. Reports are plain data, so this cannot fail.
pub(crate) fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|error| format!("{{\"error\":\"{error}\"}}"))
}
