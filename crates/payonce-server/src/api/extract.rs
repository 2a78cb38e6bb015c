//! How a request's parts become what a handler takes: the caller from its
//! token, path segments, and bodies read within their limit.

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use super::AppState;
use crate::problem::Problem;
use crate::tokens::Principal;

/// Largest request body read, in bytes.
pub const BODY_LEN_MAX: usize = 64 * 1024;

/// Any caller with a valid token.
#[derive(Debug, Clone)]
pub(crate) struct Caller(pub Principal);

/// A caller with a client's token: its name.
#[derive(Debug, Clone)]
pub(crate) struct ClientCaller(pub String);

/// A caller with an operator's token: its name.
#[derive(Debug, Clone)]
pub(crate) struct OperatorCaller(pub String);

fn unauthorized(detail: &str) -> Problem {
    Problem::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "A bearer token is needed",
    )
    .detail(detail.to_owned())
}

fn forbidden(role: &str) -> Problem {
    Problem::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        "This token's role may not do that",
    )
    .detail(format!("this route takes {role} token"))
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let mut values = parts.headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(unauthorized("send one Authorization: Bearer TOKEN header"));
        };
        let token = value
            .as_bytes()
            .strip_prefix(b"Bearer ")
            .ok_or_else(|| unauthorized("the Authorization header is not Bearer TOKEN"))?;
        match state.tokens.get().principal(token.trim_ascii()) {
            Some(principal) => Ok(Caller(principal)),
            None => Err(unauthorized("the token is not one this service knows")),
        }
    }
}

impl FromRequestParts<AppState> for ClientCaller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        match Caller::from_request_parts(parts, state).await?.0 {
            Principal::Client(name) => Ok(ClientCaller(name)),
            Principal::Operator(_) => Err(forbidden("a client's")),
        }
    }
}

impl FromRequestParts<AppState> for OperatorCaller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        match Caller::from_request_parts(parts, state).await?.0 {
            Principal::Operator(name) => Ok(OperatorCaller(name)),
            Principal::Client(_) => Err(forbidden("an operator's")),
        }
    }
}

/// Path segments, with a problem for what does not decode.
#[derive(Debug)]
pub(crate) struct Segments<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequestParts<AppState> for Segments<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Segments(value)),
            Err(rejection) => Err(path_problem(&rejection)),
        }
    }
}

fn path_problem(rejection: &PathRejection) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "malformed-path",
        "A path segment does not decode",
    )
    .detail(rejection.body_text())
}

/// A JSON body of type `T`, read within [`BODY_LEN_MAX`], unknown fields
/// refused (by `T`'s `deny_unknown_fields`). An empty body reads as `{}`.
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = Problem;

    async fn from_request(request: Request, _: &AppState) -> Result<Self, Problem> {
        let json_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(|value| {
                value
                    .split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .eq_ignore_ascii_case("application/json")
            });
        let bytes = read_body(request.into_body()).await?;
        if bytes.is_empty() {
            return parse(b"{}").map(JsonBody);
        }
        if json_type != Some(true) {
            return Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "The body must be application/json",
            ));
        }
        parse(&bytes).map(JsonBody)
    }
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    serde_json::from_slice(bytes)
        .map_err(|error| Problem::body_rejected(format!("{error}; nothing was written")))
}

async fn read_body(body: Body) -> Result<axum::body::Bytes, Problem> {
    axum::body::to_bytes(body, BODY_LEN_MAX).await.map_err(|_| {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "The body is too large",
        )
        .detail(format!(
            "a body is at most {BODY_LEN_MAX} bytes; nothing was written"
        ))
        .with("limit", BODY_LEN_MAX)
    })
}
