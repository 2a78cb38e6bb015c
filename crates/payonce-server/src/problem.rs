//! Every refusal and failure as RFC 9457 problem+json: a stable `type` per
//! kind (`urn:payonce:problem:<kind>`), a status, a title, a detail in
//! words, and the facts as members.
//!
//! What a problem tells whom: a key that holds a withdrawal is named to the
//! client that owns it and to operators; another client learns that
//! another key holds the withdrawal, and its state, but not the key.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use payonce::{HolderState, LedgerError, Refusal, SubmitError};
use payonce_model::{Difference, FieldError};
use serde_json::{Map, Value, json};

use crate::rail::UnknownOutcome;
use crate::scope::{ScopeError, split_ledger_key};
use crate::tokens::Principal;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// One problem, ready to answer with.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The HTTP status.
    pub status: StatusCode,
    /// The kind: the last part of the `type` URI, and the metrics label.
    pub kind: &'static str,
    title: &'static str,
    detail: String,
    members: Map<String, Value>,
}

impl Problem {
    /// A problem without members.
    pub fn new(status: StatusCode, kind: &'static str, title: &'static str) -> Problem {
        Problem {
            status,
            kind,
            title,
            detail: title.to_owned(),
            members: Map::new(),
        }
    }

    /// With `detail` in words.
    pub fn detail(mut self, detail: impl Into<String>) -> Problem {
        self.detail = detail.into();
        self
    }

    /// With one more fact.
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Problem {
        self.members.insert(name.to_owned(), value.into());
        self
    }

    /// The body as JSON.
    pub fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert(
            "type".into(),
            format!("urn:payonce:problem:{}", self.kind).into(),
        );
        body.insert("title".into(), self.title.into());
        body.insert("status".into(), self.status.as_u16().into());
        body.insert("detail".into(), self.detail.clone().into());
        for (name, value) in &self.members {
            body.insert(name.clone(), value.clone());
        }
        Value::Object(body)
    }

    /// A value that broke its field's rules; nothing was written.
    pub fn field(error: &FieldError) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-field",
            "A field breaks its rules",
        )
        .detail(format!("{error}; nothing was written"))
        .with("field", error.field.name())
        .with("rule", error.rule.to_string())
    }

    /// A bad `Idempotency-Key`.
    pub fn idempotency_key(error: &ScopeError) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "idempotency-key-malformed",
            "The Idempotency-Key header is malformed",
        )
        .detail(format!("{error}; nothing was written"))
    }

    /// A key or a client name in a path that breaks its rules.
    pub fn invalid_key(error: &ScopeError) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-key",
            "A key or name breaks its rules",
        )
        .detail(format!("{error}; nothing was written"))
    }

    /// A body that is not the JSON this route takes.
    pub fn body_rejected(message: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "malformed-body",
            "The body is not what this route takes",
        )
        .detail(message)
    }

    /// An answer the ledger could not give: storage failed or the ledger
    /// is poisoned. What happened is in the service's log.
    pub fn unavailable(error: &LedgerError) -> Problem {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ledger-unavailable",
            "The ledger could not decide",
        )
        .detail(format!(
            "{error}; a submission whose claim was granted stays claimed"
        ))
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// A ledger key as `viewer` may see it: the client's own key to its
/// client, the key and its client to an operator, nothing to anyone else.
fn shown_key(ledger_key: &str, viewer: &Principal) -> Option<(String, Option<String>)> {
    let split = split_ledger_key(ledger_key);
    match (viewer, split) {
        (Principal::Operator(_), Some((client, key))) => Some((key.into(), Some(client.into()))),
        (Principal::Operator(_), None) => Some((ledger_key.into(), None)),
        (Principal::Client(name), Some((client, key))) if name == client => {
            Some((key.into(), None))
        }
        (Principal::Client(_), _) => None,
    }
}

fn holder_state(state: &HolderState) -> Value {
    match state {
        HolderState::InFlight {
            since,
            send_running,
            ..
        } => {
            json!({"status": "in_flight", "since": since.to_string(), "send_running": send_running})
        }
        HolderState::Decided { state, reference } => {
            json!({"status": "decided", "state": state, "reference": reference})
        }
        _ => json!({"status": "unknown"}),
    }
}

fn differences(differences: &[Difference]) -> Value {
    differences
        .iter()
        .map(|d| json!({"field": d.field, "recorded": d.ours, "given": d.theirs}))
        .collect()
}

fn claimed(withdrawal: &str, holder: &str, state: &HolderState, viewer: &Principal) -> Problem {
    let problem = Problem::new(
        StatusCode::CONFLICT,
        "withdrawal-claimed",
        "Another key holds this withdrawal",
    )
    .with("withdrawal", withdrawal)
    .with("holder_state", holder_state(state));
    match shown_key(holder, viewer) {
        Some((key, client)) => {
            let detail = format!(
                "withdrawal {withdrawal} is claimed by key {key}, {state}; nothing was sent"
            );
            let problem = problem.detail(detail).with("holder", key);
            match client {
                Some(client) => problem.with("holder_client", client),
                None => problem,
            }
        }
        None => problem.detail(format!(
            "withdrawal {withdrawal} is claimed by another client's key, {state}; nothing was sent"
        )),
    }
}

/// A refusal, as `viewer` may see it.
pub fn refusal(refusal: &Refusal, viewer: &Principal) -> Problem {
    let key = |key: &str| shown_key(key, viewer).map_or(Value::Null, |(key, _)| key.into());
    match refusal {
        Refusal::Claimed {
            withdrawal,
            holder,
            holder_state,
            ..
        } => claimed(withdrawal, holder, holder_state, viewer),
        Refusal::KeyReused {
            key: k,
            differences: d,
        } => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "key-reused",
            "The key was used for another withdrawal",
        )
        .detail("the key was used before for another withdrawal; nothing was sent")
        .with("key", key(k))
        .with("differences", differences(d)),
        Refusal::InFlight {
            key: k,
            withdrawal,
            since,
            send_running,
            ..
        } => Problem::new(
            StatusCode::CONFLICT,
            "key-in-flight",
            "The key's outcome is not known yet",
        )
        .detail(format!(
            "the key is claimed for withdrawal {withdrawal} since {since} and its outcome is not \
                 known yet; it stays claimed until its send ends or an operator closes it"
        ))
        .with("key", key(k))
        .with("withdrawal", withdrawal.as_str())
        .with("since", since.to_string())
        .with("send_running", *send_running),
        Refusal::UnknownWithdrawal { withdrawal } => unknown_withdrawal(withdrawal),
        other => operator_refusal(other, viewer),
    }
}

/// The withdrawal was not created by this ledger.
pub fn unknown_withdrawal(withdrawal: &str) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "withdrawal-unknown",
        "No such withdrawal",
    )
    .detail(format!(
        "withdrawal {} was not created by this ledger",
        payonce_model::escape::Echo(withdrawal)
    ))
}

/// The refusals an operator's exit meets, and the limits.
fn operator_refusal(refusal: &Refusal, viewer: &Principal) -> Problem {
    let (status, kind, title) = match refusal {
        Refusal::OutcomeMismatch { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "outcome-mismatch",
            "The outcome is another withdrawal",
        ),
        Refusal::Unsettled { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "not-an-outcome",
            "Only sent, confirmed, failed or rejected is an outcome",
        ),
        Refusal::HeldTotalTooLarge { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "held-total-too-large",
            "Holding it would pass the most the ledger can total",
        ),
        Refusal::OutcomeDiffers { .. } => (
            StatusCode::CONFLICT,
            "outcome-differs",
            "The key has another outcome",
        ),
        Refusal::HasOutcome { .. } => (
            StatusCode::CONFLICT,
            "has-outcome",
            "The key has an outcome",
        ),
        Refusal::NoOutcome { .. } => (StatusCode::CONFLICT, "no-outcome", "The key has no outcome"),
        Refusal::ForbiddenMove { .. } => (
            StatusCode::CONFLICT,
            "forbidden-move",
            "The outcome cannot move there",
        ),
        Refusal::NotAsCreated { .. } => (
            StatusCode::CONFLICT,
            "not-as-created",
            "The withdrawal was created differently",
        ),
        _ => (StatusCode::CONFLICT, "refused", "The ledger refused"),
    };
    let problem = Problem::new(status, kind, title);
    // Operators see every key; a client sees a refusal of its own key,
    // since the service scopes every key it sends.
    let detail = match viewer {
        Principal::Operator(_) => refusal.to_string(),
        Principal::Client(_) => title.to_owned(),
    };
    let problem = problem.detail(format!("{detail}; nothing was written"));
    match refusal {
        Refusal::OutcomeMismatch { differences: d, .. }
        | Refusal::NotAsCreated { differences: d, .. } => {
            problem.with("differences", differences(d))
        }
        _ => problem,
    }
}

/// A ledger error, as `viewer` may see it.
pub fn ledger(error: &LedgerError, viewer: &Principal) -> Problem {
    match error {
        LedgerError::Refused(refused) => refusal(refused, viewer),
        LedgerError::Invalid(field) => Problem::field(field),
        other => Problem::unavailable(other),
    }
}

/// What a submission's failure means to the client.
pub fn submit(error: &SubmitError, viewer: &Principal) -> Problem {
    match error {
        SubmitError::Ledger(error) => ledger(error, viewer),
        SubmitError::Rejected {
            withdrawal, reason, ..
        } => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "rail-refused",
            "The rail refused the withdrawal cleanly",
        )
        .detail(format!(
            "the rail refused withdrawal {withdrawal}: {reason}; nothing left the account and the \
             funds are no longer held, but the key stays claimed until an operator releases it"
        ))
        .with("withdrawal", withdrawal.as_str())
        .with("reason", reason.as_str())
        .with("key_stays_claimed", true),
        SubmitError::Send(cause) => {
            let timed_out = cause
                .downcast_ref::<UnknownOutcome>()
                .is_some_and(|unknown| unknown.timed_out);
            let status = if timed_out {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::BAD_GATEWAY
            };
            outcome_unknown(status, cause.to_string())
        }
        SubmitError::Unrecorded { cause, .. } => outcome_unknown(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the rail answered but the ledger could not record it: {cause}"),
        ),
        _ => Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ledger-unavailable",
            "The ledger could not decide",
        ),
    }
}

fn outcome_unknown(status: StatusCode, error: String) -> Problem {
    Problem::new(
        status,
        "outcome-unknown",
        "Whether the withdrawal left is not known",
    )
    .detail(format!(
        "{error}; the money may have left, so the key stays claimed and the funds held until \
             an operator looks at the rail and resolves or releases it; do not submit it under \
             another key"
    ))
    .with("key_stays_claimed", true)
}
