//! What an operator exit prints, its receipt: the key's record, its
//! withdrawal's claim and funds afterwards, as JSON or as a few lines of
//! text.

use std::io::Write;

use payonce::State;
use payonce_model::RequestKey;
use serde::Serialize;

use crate::error::CliError;
use crate::escape::Escaped;
use crate::json::{KeyRecordJson, key_records, to_json};
use crate::logdir::LogDir;

/// What an operator exit prints as JSON.
#[derive(Debug, Serialize)]
pub(super) struct ExitJson {
    dir: String,
    key: String,
    /// "resolved", "corrected", "released" or "unchanged".
    action: &'static str,
    /// The log's last sequence number afterwards.
    last_seq: u64,
    /// The key's record afterwards; null once released.
    record: Option<KeyRecordJson>,
    withdrawal: String,
    /// The key holding the withdrawal afterwards, if any.
    claimed_by: Option<String>,
    /// Funds held for the withdrawal afterwards, if any.
    held: Option<String>,
    /// Funds of the withdrawal that left custody, as the ledger counts
    /// them afterwards (captured while sent or confirmed), if any.
    captured: Option<String>,
}

/// The receipt of an operator exit on `key`, whose claim was (or is) on
/// `withdrawal`, from the state afterwards.
pub(super) fn exit_json(
    log: &LogDir,
    state: &State,
    key: &RequestKey,
    withdrawal: &str,
    action: &'static str,
) -> ExitJson {
    ExitJson {
        dir: log.dir.display().to_string(),
        key: key.to_string(),
        action,
        last_seq: state.last_seq(),
        record: key_records(state)
            .into_iter()
            .find(|r| r.key == key.as_str()),
        withdrawal: withdrawal.to_owned(),
        claimed_by: state.claimed_by(withdrawal).map(String::from),
        held: state
            .held(withdrawal)
            .map(|hold| format!("{} {}", hold.amount, hold.currency)),
        captured: state
            .captured(withdrawal)
            .map(|hold| format!("{} {}", hold.amount, hold.currency)),
    }
}

/// One line about a key's record, for the operator exits.
fn key_record_words(record: &KeyRecordJson) -> String {
    let outcome = if record.outcome == "in flight" {
        let error = record
            .last_error
            .as_ref()
            .map_or_else(String::new, |e| format!(", last error: {e}"));
        format!("in flight (outcome unknown{error})")
    } else {
        let mut words = format!("outcome {}", record.outcome);
        if let Some(reference) = &record.reference {
            words.push_str(&format!(", reference {reference}"));
        }
        if let Some(reason) = &record.reason {
            words.push_str(&format!(" ({reason})"));
        }
        words
    };
    format!(
        "request key {} holds withdrawal {} ({} {} to {}), claimed at seq {} ({}): {outcome}",
        record.key,
        record.withdrawal,
        record.amount,
        record.currency,
        record.destination,
        record.claimed_seq,
        record.claimed_at
    )
}

/// Prints `receipt` as one JSON object, or as its headline and a line each
/// about the key and its withdrawal.
pub(super) fn print_exit(
    receipt: &ExitJson,
    headline: &str,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let say = |out: &mut dyn Write, text: &str| {
        writeln!(out, "{}", Escaped(text)).map_err(CliError::output)
    };
    if json {
        return writeln!(out, "{}", to_json(receipt)).map_err(CliError::output);
    }
    say(out, headline)?;
    match &receipt.record {
        Some(record) => say(out, &key_record_words(record))?,
        None => say(out, &format!("request key {} has no record", receipt.key))?,
    }
    say(
        out,
        &format!(
            "withdrawal {}: {}; {}",
            receipt.withdrawal,
            receipt.claimed_by.as_ref().map_or_else(
                || "claimed by no key (it may be submitted again)".to_owned(),
                |key| format!("claimed by request key {key}")
            ),
            funds_words(receipt)
        ),
    )
}

/// What the ledger holds or counts as gone for the receipt's withdrawal.
fn funds_words(receipt: &ExitJson) -> String {
    match (&receipt.held, &receipt.captured) {
        (Some(held), _) => format!("{held} held for it"),
        (None, Some(captured)) => format!("no funds held for it; {captured} left custody"),
        (None, None) => "no funds held for it".to_owned(),
    }
}
