//! A client's routes: create a withdrawal, submit it under a key, look at a
//! withdrawal or a key.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use payonce::{NewWithdrawal, Submission, SubmitError};
use payonce_model::{Actor, Amount, Currency, Destination, WithdrawalRequest};
use serde::Deserialize;

use super::extract::{Caller, ClientCaller, JsonBody, Segments};
use super::{AppState, REPLAYED_HEADER, views};
use crate::embedded::WithdrawalFacts;
use crate::problem::{self, Problem};
use crate::scope::{ScopeError, client_key, ledger_key, parse_sf_string};
use crate::tokens::Principal;

/// `POST /v1/withdrawals`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    amount: String,
    currency: String,
    destination: String,
}

/// `POST /v1/withdrawals/{id}/submissions` takes no fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubmitBody {}

fn json_response(status: StatusCode, body: serde_json::Value) -> Response {
    (status, axum::Json(body)).into_response()
}

pub(super) async fn create(
    State(state): State<AppState>,
    ClientCaller(client): ClientCaller,
    JsonBody(body): JsonBody<CreateBody>,
) -> Result<Response, Problem> {
    let field = |error| Problem::field(&error);
    let new = NewWithdrawal {
        amount: Amount::parse(&body.amount).map_err(field)?,
        currency: Currency::new(&body.currency).map_err(field)?,
        destination: Destination::new(&body.destination).map_err(field)?,
        requested_by: Actor::new(&client).map_err(field)?,
    };
    let viewer = Principal::Client(client);
    let created = state
        .ledger
        .create(new)
        .await
        .map_err(|error| problem::ledger(&error, &viewer))?;
    state.metrics.decided("created");
    let mut response = json_response(StatusCode::CREATED, views::withdrawal(&created));
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/withdrawals/{}", created.id())) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// The one `Idempotency-Key` header's key.
fn idempotency_key(headers: &HeaderMap) -> Result<payonce_model::RequestKey, Problem> {
    let mut values = headers.get_all("idempotency-key").iter();
    match (values.next(), values.next()) {
        (None, _) => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "idempotency-key-missing",
            "A submission needs an Idempotency-Key header",
        )
        .detail("send Idempotency-Key: \"KEY\" (an RFC 8941 string); nothing was written")),
        (Some(_), Some(_)) => Err(Problem::idempotency_key(&ScopeError::NotAString)),
        (Some(value), None) => parse_sf_string(value.as_bytes())
            .and_then(|text| client_key(&text))
            .map_err(|error| Problem::idempotency_key(&error)),
    }
}

pub(super) async fn submit(
    State(state): State<AppState>,
    ClientCaller(client): ClientCaller,
    Segments(id): Segments<String>,
    headers: HeaderMap,
    JsonBody(SubmitBody {}): JsonBody<SubmitBody>,
) -> Result<Response, Problem> {
    let key = ledger_key(&client, &idempotency_key(&headers)?);
    let fingerprint = state
        .ledger
        .fingerprint(&id)
        .await
        .map_err(|error| Problem::unavailable(&error))?
        .ok_or_else(|| problem::unknown_withdrawal(&id))?;
    let requested_by = Actor::new(&client).map_err(|error| Problem::field(&error))?;
    let request = WithdrawalRequest::new(
        fingerprint.id().clone(),
        fingerprint.amount(),
        fingerprint.currency().clone(),
        fingerprint.destination().clone(),
        requested_by,
    );
    // The send runs in a task of its own: a client that goes away, or a
    // request that passes its time limit, does not cut it short, and a
    // shutdown waits for it.
    let (ledger, rail) = (state.ledger.clone(), state.rail.clone());
    let sent = state
        .sends
        .spawn(async move { ledger.submit(&key, request, &*rail).await })
        .await;
    let viewer = Principal::Client(client);
    let answer = match sent {
        Ok(answer) => answer,
        Err(_) => Err(SubmitError::Send(
            "the send's task ended without an answer".into(),
        )),
    };
    submitted(&state, answer, &viewer)
}

fn submitted(
    state: &AppState,
    answer: Result<Submission, SubmitError>,
    viewer: &Principal,
) -> Result<Response, Problem> {
    match answer {
        Ok(Submission { outcome, replayed }) => {
            state
                .metrics
                .decided(if replayed { "replayed" } else { "sent" });
            let mut response = json_response(StatusCode::OK, views::withdrawal(&outcome));
            if replayed {
                response
                    .headers_mut()
                    .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
            }
            Ok(response)
        }
        Err(error) => {
            let problem = problem::submit(&error, viewer);
            state.metrics.decided(problem.kind);
            Err(problem)
        }
    }
}

/// What the ledger knows of withdrawal `id`, caught up; 404 for an id it
/// has never minted.
async fn known_withdrawal(state: &AppState, id: &str) -> Result<WithdrawalFacts, Problem> {
    state
        .ledger
        .withdrawal(id)
        .await
        .map_err(|error| Problem::unavailable(&error))?
        .ok_or_else(|| problem::unknown_withdrawal(id))
}

pub(super) async fn show(
    State(state): State<AppState>,
    Caller(viewer): Caller,
    Segments(id): Segments<String>,
) -> Result<Response, Problem> {
    let facts = known_withdrawal(&state, &id).await?;
    Ok(json_response(
        StatusCode::OK,
        views::withdrawal_status(&facts, &viewer),
    ))
}

pub(super) async fn key(
    State(state): State<AppState>,
    ClientCaller(client): ClientCaller,
    Segments(key): Segments<String>,
) -> Result<Response, Problem> {
    let key = client_key(&key).map_err(|error| Problem::invalid_key(&error))?;
    let facts = state
        .ledger
        .key(&ledger_key(&client, &key))
        .await
        .map_err(|error| Problem::unavailable(&error))?
        .ok_or_else(|| {
            Problem::new(StatusCode::NOT_FOUND, "key-unknown", "No such key")
                .detail("this client has no record under that key")
        })?;
    Ok(json_response(
        StatusCode::OK,
        views::key(&facts, &Principal::Client(client)),
    ))
}
