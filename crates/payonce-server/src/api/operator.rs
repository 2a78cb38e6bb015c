//! An operator's routes: the queue of keys in flight, and the three exits
//! (resolve, release, correct), each with a mandatory note and the
//! operator's name from its token.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use payonce::{Clock, SystemClock};
use payonce_model::WithdrawalRequest;
use serde::Deserialize;
use serde_json::json;

use super::extract::{JsonBody, OperatorCaller, Segments};
use super::{AppState, views};
use crate::problem::{self, Problem};
use crate::scope::{check_name, client_key, ledger_key, split_ledger_key};
use crate::tokens::Principal;

/// `resolve` and `correct`: what the rail shows, and why.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutcomeBody {
    outcome: WithdrawalRequest,
    note: String,
}

/// `release`: why nothing was sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReleaseBody {
    note: String,
}

pub(super) async fn in_flight(
    State(state): State<AppState>,
    OperatorCaller(_): OperatorCaller,
) -> Result<Response, Problem> {
    let in_flight = state
        .ledger
        .in_flight()
        .await
        .map_err(|error| Problem::unavailable(&error))?;
    let now = SystemClock.now();
    let entries: Vec<serde_json::Value> = in_flight
        .iter()
        .map(|entry| {
            let (client, key) = match split_ledger_key(&entry.key) {
                Some((client, key)) => (Some(client), key),
                None => (None, entry.key.as_str()),
            };
            json!({
                "client": client,
                "key": key,
                "withdrawal": entry.withdrawal.as_str(),
                "amount": entry.amount.to_string(),
                "currency": entry.currency.as_str(),
                "claimed_at": entry.claimed_at.to_string(),
                "age_seconds": now.since(entry.claimed_at).as_secs(),
                "held": entry.held,
                "send_running": entry.send_running,
                "last_error": entry.last_error.as_ref().map(|reason| reason.as_str()),
            })
        })
        .collect();
    let body = json!({"now": now.to_string(), "in_flight": entries});
    Ok((StatusCode::OK, axum::Json(body)).into_response())
}

/// The ledger key a path names.
fn path_key(client: &str, key: &str) -> Result<String, Problem> {
    check_name(client).map_err(|error| Problem::invalid_key(&error))?;
    let key = client_key(key).map_err(|error| Problem::invalid_key(&error))?;
    Ok(ledger_key(client, &key))
}

/// The key's state after an exit, as an operator sees it.
async fn key_after(state: &AppState, key: &str, viewer: &Principal) -> Result<Response, Problem> {
    let facts = state
        .ledger
        .key(key)
        .await
        .map_err(|error| Problem::unavailable(&error))?;
    let body = match facts {
        Some(facts) => views::key(&facts, viewer),
        None => json!({"status": "released"}),
    };
    Ok((StatusCode::OK, axum::Json(body)).into_response())
}

fn unknown_key() -> Problem {
    Problem::new(StatusCode::NOT_FOUND, "key-unknown", "No such key")
        .detail("the ledger has no record under that key; nothing was written")
}

pub(super) async fn resolve(
    State(state): State<AppState>,
    OperatorCaller(operator): OperatorCaller,
    Segments((client, key)): Segments<(String, String)>,
    JsonBody(body): JsonBody<OutcomeBody>,
) -> Result<Response, Problem> {
    record_outcome(&state, operator, &client, &key, body, Recorded::Resolved).await
}

pub(super) async fn correct(
    State(state): State<AppState>,
    OperatorCaller(operator): OperatorCaller,
    Segments((client, key)): Segments<(String, String)>,
    JsonBody(body): JsonBody<OutcomeBody>,
) -> Result<Response, Problem> {
    record_outcome(&state, operator, &client, &key, body, Recorded::Corrected).await
}

/// Which operator decision records an outcome under a key.
#[derive(Debug, Clone, Copy)]
enum Recorded {
    /// `resolve`: what happened to a send whose outcome was unknown.
    Resolved,
    /// `correct`: a recorded outcome replaced.
    Corrected,
}

/// `resolve` or `correct` of `client`'s `key` with `body`, by `operator`:
/// the key's state after it.
async fn record_outcome(
    state: &AppState,
    operator: String,
    client: &str,
    key: &str,
    body: OutcomeBody,
    recorded: Recorded,
) -> Result<Response, Problem> {
    let key = path_key(client, key)?;
    let viewer = Principal::Operator(operator.clone());
    let ledger = state.ledger.library();
    let (decided, label) = match recorded {
        Recorded::Resolved => (
            ledger
                .resolve(&key, body.outcome, &body.note, &operator)
                .await,
            "resolved",
        ),
        Recorded::Corrected => (
            ledger
                .correct(&key, body.outcome, &body.note, &operator)
                .await,
            "corrected",
        ),
    };
    decided.map_err(|error| problem::ledger(&error, &viewer))?;
    state.metrics.decided(label);
    key_after(state, &key, &viewer).await
}

pub(super) async fn release(
    State(state): State<AppState>,
    OperatorCaller(operator): OperatorCaller,
    Segments((client, key)): Segments<(String, String)>,
    JsonBody(body): JsonBody<ReleaseBody>,
) -> Result<Response, Problem> {
    let key = path_key(&client, &key)?;
    let viewer = Principal::Operator(operator.clone());
    // The ledger takes an unknown key's release as nothing to do; an
    // operator who typed a key wrong hears of it.
    let known = state
        .ledger
        .key(&key)
        .await
        .map_err(|error| Problem::unavailable(&error))?;
    if known.is_none() {
        return Err(unknown_key());
    }
    state
        .ledger
        .library()
        .release(&key, &body.note, &operator)
        .await
        .map_err(|error| problem::ledger(&error, &viewer))?;
    state.metrics.decided("released");
    key_after(&state, &key, &viewer).await
}
