//! The HTTP rail adapter: POSTs each send to a configured URL, where a real
//! rail client listens.
//!
//! The request is JSON: `{"withdrawal": <the withdrawal>, "key": <the
//! ledger's request key>}`; the rail client should use `key` as its own
//! idempotency key. The answer:
//!
//! - a 2xx with `{"reference": "..."}`: sent;
//! - a 4xx other than 408 and 429, with `{"reason": "..."}`: refused
//!   cleanly, nothing left the account;
//! - anything else (a timeout, a lost connection, a 5xx, a 408 or 429, a
//!   body that is not one of the two above): unknown.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{BoxFuture, Rail, RailAnswer, RailSend};

/// Largest answer body read from the rail client, in bytes.
pub const HTTP_RAIL_BODY_LEN_MAX: usize = 64 * 1024;

/// The HTTP rail adapter.
#[derive(Debug, Clone)]
pub struct HttpRail {
    client: reqwest::Client,
    url: reqwest::Url,
}

#[derive(Serialize)]
struct Request<'a> {
    withdrawal: &'a payonce_model::WithdrawalRequest,
    key: &'a str,
}

#[derive(Deserialize)]
struct SentBody {
    reference: String,
}

#[derive(Deserialize)]
struct RefusedBody {
    reason: String,
}

impl HttpRail {
    /// An adapter POSTing to `url`, giving up on an answer after `timeout`.
    pub fn new(url: &str, timeout: Duration) -> Result<HttpRail, String> {
        let url = reqwest::Url::parse(url).map_err(|error| format!("--rail-url: {error}"))?;
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|error| format!("the rail's HTTP client: {error}"))?;
        Ok(HttpRail { client, url })
    }

    async fn call(&self, send: &RailSend) -> Result<RailAnswer, reqwest::Error> {
        let body = Request {
            withdrawal: &send.withdrawal,
            key: &send.key,
        };
        let mut response = self
            .client
            .post(self.url.clone())
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if bytes.len() + chunk.len() > HTTP_RAIL_BODY_LEN_MAX {
                return Ok(unknown(format!(
                    "the rail answered {status} with a body over {HTTP_RAIL_BODY_LEN_MAX} bytes"
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(answer(status, &bytes))
    }
}

fn unknown(error: String) -> RailAnswer {
    RailAnswer::Unknown {
        error,
        timed_out: false,
    }
}

/// What a status and body from the rail client mean.
fn answer(status: reqwest::StatusCode, body: &[u8]) -> RailAnswer {
    let clean_refusal = status.is_client_error()
        && status != reqwest::StatusCode::REQUEST_TIMEOUT
        && status != reqwest::StatusCode::TOO_MANY_REQUESTS;
    if status.is_success() {
        if let Ok(SentBody { reference }) = serde_json::from_slice(body) {
            return RailAnswer::Sent { reference };
        }
    } else if clean_refusal {
        if let Ok(RefusedBody { reason }) = serde_json::from_slice(body) {
            return RailAnswer::Refused { reason };
        }
    } else if status == reqwest::StatusCode::GATEWAY_TIMEOUT {
        return RailAnswer::Unknown {
            error: format!("the rail answered {status}"),
            timed_out: true,
        };
    }
    unknown(format!(
        "the rail answered {status} with a body that does not say what happened"
    ))
}

impl Rail for HttpRail {
    fn send<'a>(&'a self, send: &'a RailSend) -> BoxFuture<'a, RailAnswer> {
        Box::pin(async move {
            match self.call(send).await {
                Ok(answer) => answer,
                Err(error) => RailAnswer::Unknown {
                    timed_out: error.is_timeout(),
                    error: format!("the rail could not be reached or did not answer: {error}"),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::StatusCode;

    // Guards against an adapter that gives money back on anything short of
    // a clear refusal.
    #[test]
    fn only_a_clear_refusal_is_refused_and_only_a_reference_is_sent() {
        let sent = br#"{"reference":"0xfeed"}"#;
        let refused = br#"{"reason":"floor"}"#;
        assert!(matches!(
            answer(StatusCode::OK, sent),
            RailAnswer::Sent { .. }
        ));
        assert!(matches!(
            answer(StatusCode::UNPROCESSABLE_ENTITY, refused),
            RailAnswer::Refused { .. }
        ));
        for (status, body) in [
            (StatusCode::OK, &b"{}"[..]),
            (StatusCode::OK, refused),
            (StatusCode::UNPROCESSABLE_ENTITY, sent),
            (StatusCode::TOO_MANY_REQUESTS, refused),
            (StatusCode::REQUEST_TIMEOUT, refused),
            (StatusCode::INTERNAL_SERVER_ERROR, refused),
            (StatusCode::BAD_GATEWAY, sent),
        ] {
            assert!(
                matches!(
                    answer(status, body),
                    RailAnswer::Unknown {
                        timed_out: false,
                        ..
                    }
                ),
                "{status}"
            );
        }
        assert!(matches!(
            answer(StatusCode::GATEWAY_TIMEOUT, b""),
            RailAnswer::Unknown {
                timed_out: true,
                ..
            }
        ));
    }
}
