//! What the API answers with, as JSON, for whom.

use payonce_model::WithdrawalRequest;
use serde_json::{Value, json};

use crate::embedded::{KeyFacts, WithdrawalFacts};
use crate::scope::split_ledger_key;
use crate::tokens::Principal;

/// A withdrawal as JSON: its fields, amounts as strings.
pub(crate) fn withdrawal(request: &WithdrawalRequest) -> Value {
    serde_json::to_value(request).unwrap_or(Value::Null)
}

fn status(facts: &KeyFacts) -> &'static str {
    if facts.outcome.is_some() {
        "decided"
    } else {
        "in_flight"
    }
}

/// A key the caller owns (or any key, to an operator): everything about it.
pub(crate) fn key(facts: &KeyFacts, viewer: &Principal) -> Value {
    let (client, key) = match split_ledger_key(&facts.key) {
        Some((client, key)) => (Some(client), key),
        None => (None, facts.key.as_str()),
    };
    let mut view = json!({
        "key": key,
        "withdrawal": facts.withdrawal.as_str(),
        "status": status(facts),
        "claimed_at": facts.claimed_at.to_string(),
        "outcome": facts.outcome.as_ref().map(withdrawal),
        "last_error": facts.last_error.as_ref().map(|reason| reason.as_str()),
        "held": facts.held,
        "send_running": facts.send_running,
    });
    if matches!(viewer, Principal::Operator(_)) {
        view["client"] = client.into();
    }
    view
}

/// A withdrawal and its claim, as `viewer` may see it: the holder key only
/// to the client that owns it and to operators.
pub(crate) fn withdrawal_status(facts: &WithdrawalFacts, viewer: &Principal) -> Value {
    let fingerprint = &facts.fingerprint;
    let claim = facts.holder.as_ref().map(|holder| {
        let owner = split_ledger_key(&holder.key);
        let mut claim = json!({
            "status": status(holder),
            "claimed_at": holder.claimed_at.to_string(),
            "state": holder.outcome.as_ref().map(|outcome| outcome.state()),
            "reference": holder.outcome.as_ref().and_then(|o| o.reference()).map(|r| r.as_str()),
            "held": holder.held,
        });
        match (viewer, owner) {
            (Principal::Operator(_), Some((client, key))) => {
                claim["holder"] = key.into();
                claim["holder_client"] = client.into();
            }
            (Principal::Operator(_), None) => claim["holder"] = holder.key.as_str().into(),
            (Principal::Client(name), Some((client, key))) if name == client => {
                claim["holder"] = key.into();
            }
            (Principal::Client(_), _) => {}
        }
        claim
    });
    json!({
        "id": fingerprint.id().as_str(),
        "amount": fingerprint.amount().to_string(),
        "currency": fingerprint.currency().as_str(),
        "destination": fingerprint.destination().as_str(),
        "claim": claim,
    })
}
