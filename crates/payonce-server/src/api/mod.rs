//! The HTTP API: routes, who may call them, and how a request's parts
//! become model values. Handlers are thin: parse, ask the ledger, answer;
//! every refusal becomes a problem in `problem.rs`.
//!
//! `mod.rs` is the router and the request time limit: a request that takes
//! longer is answered 503, while a submission's send, in a task of its
//! own, goes on and records its outcome.

mod extract;
mod operator;
mod views;
mod withdrawals;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use payonce::{Clock, SystemClock};
use tokio_util::task::TaskTracker;

use super::metrics::{InFlightGauge, Metrics};
use super::problem::Problem;
use super::rail::Rail;
use super::swap::Swap;
use super::tokens::Tokens;
use crate::embedded::Embedded;

pub use self::extract::BODY_LEN_MAX;

/// The header a replayed submission carries.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// Everything a handler may use.
#[derive(Clone)]
pub(crate) struct AppState {
    /// The ledger.
    pub ledger: Arc<Embedded>,
    /// The rail.
    pub rail: Arc<dyn Rail>,
    /// Who may call, as the tokens file said when last read.
    pub tokens: Arc<Swap<Tokens>>,
    /// What the service counts.
    pub metrics: Arc<Metrics>,
    /// The sends running: a shutdown waits for them.
    pub sends: TaskTracker,
    /// Longest a request may take before the service answers 503 (a send
    /// it started goes on and records its outcome).
    pub request_time_max: Duration,
}

/// The service's routes.
pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/withdrawals", post(withdrawals::create))
        .route("/v1/withdrawals/{id}", get(withdrawals::show))
        .route(
            "/v1/withdrawals/{id}/submissions",
            post(withdrawals::submit),
        )
        .route("/v1/keys/{key}", get(withdrawals::key))
        .route("/v1/operator/in-flight", get(operator::in_flight))
        .route(
            "/v1/operator/clients/{client}/keys/{key}/resolve",
            post(operator::resolve),
        )
        .route(
            "/v1/operator/clients/{client}/keys/{key}/release",
            post(operator::release),
        )
        .route(
            "/v1/operator/clients/{client}/keys/{key}/correct",
            post(operator::correct),
        )
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), time_limit))
        .with_state(state)
}

/// Answers 503 when a request takes longer than the limit. A submission's
/// send runs in a task of its own, so it goes on and records its outcome;
/// the same key again replays it.
async fn time_limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(state.request_time_max, next.run(request)).await {
        Ok(response) => response,
        Err(_) => Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "request-timeout",
            "The request took too long",
        )
        .detail(format!(
            "no answer within {} ms; a submission already started goes on and records its \
             outcome: ask again with the same key",
            state.request_time_max.as_millis()
        ))
        .into_response(),
    }
}

async fn not_found() -> Problem {
    Problem::new(StatusCode::NOT_FOUND, "not-found", "No such route")
}

async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "This route does not take that method",
    )
}

/// 200 while the ledger can record a decision; 503 while it cannot (a
/// worker that reaches no database accepting writes), saying why, so a load
/// balancer sends no submission to a worker that would answer it 503.
async fn healthz(State(state): State<AppState>) -> Response {
    match state.ledger.reachable().await {
        Ok(()) => axum::Json(serde_json::json!({"status": "ok"})).into_response(),
        Err(error) => {
            tracing::warn!(%error, "health check: the ledger cannot record");
            // The route takes no token: the cause (hosts, users) stays in
            // the service's log.
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ledger-unreachable",
                "The ledger cannot record a decision now",
            )
            .detail(
                "no database that accepts writes is reachable; submissions are answered 503 \
                 until one is, and the service's log says why",
            )
            .into_response()
        }
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    let gauge = match state.ledger.in_flight().await {
        Ok(in_flight) => {
            let now = SystemClock.now();
            InFlightGauge {
                keys: in_flight.len(),
                oldest_age: in_flight
                    .iter()
                    .map(|entry| now.since(entry.claimed_at))
                    .max()
                    .unwrap_or_default(),
            }
        }
        Err(error) => return Problem::unavailable(&error).into_response(),
    };
    // Told whenever the state can say it; the rest answers regardless.
    let memory = state.ledger.memory().ok();
    let mut response = state.metrics.render(gauge, memory).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}
