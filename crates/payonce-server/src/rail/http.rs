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
//! - anything else (a timeout, a lost connection, a failed TLS handshake or
//!   connection, a 5xx, a 408 or 429, a redirect, a body that is not one of
//!   the two above): unknown.
//!
//! Redirects are never followed, and no proxy is used: a send goes to the
//! configured URL or nowhere. Over `https://` the rail's certificate is
//! checked against the system's CAs or the configured ones, and a client
//! certificate is shown when one is configured ([`HttpRailConfig`]). A TLS
//! failure is an unknown outcome whose error says when it happened: in the
//! handshake, so the rail took no request (what failed, in words, with the
//! rail's host and the CAs used), or after the request was sent, so the
//! rail may have acted on it.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::handshake::{TlsFailure, chain, describe, tls_failure};
use super::setup::{HttpRailConfig, HttpRailError, Target};
use super::{BoxFuture, Rail, RailAnswer, RailSend};
use crate::swap::Swap;

/// Largest answer body read from the rail client, in bytes.
pub const HTTP_RAIL_BODY_LEN_MAX: usize = 64 * 1024;

/// The HTTP rail adapter.
#[derive(Clone)]
pub struct HttpRail {
    target: Arc<Target>,
    /// Replaced when the TLS files are reread; a send keeps the client it
    /// started with.
    client: Arc<Swap<reqwest::Client>>,
}

impl std::fmt::Debug for HttpRail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpRail")
            .field("config", &self.target.config)
            .finish_non_exhaustive()
    }
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
    /// An adapter POSTing to `url`, giving up on an answer after `timeout`,
    /// with the system's CAs and no client certificate.
    pub fn new(url: &str, timeout: Duration) -> Result<HttpRail, HttpRailError> {
        HttpRail::with_config(HttpRailConfig::new(url, timeout))
    }

    /// An adapter as `config` says, its rules checked and its TLS files
    /// read now.
    pub fn with_config(config: HttpRailConfig) -> Result<HttpRail, HttpRailError> {
        let target = Target::new(config)?;
        let client = target.client()?;
        Ok(HttpRail {
            target: Arc::new(target),
            client: Arc::new(Swap::new(client)),
        })
    }

    /// Rereads the TLS files (the CA, the client certificate and key)
    /// for the sends that start after; all or nothing: on an error the
    /// client in use stays. Returns whether there was anything to reread
    /// (a plain http:// rail has no TLS).
    pub fn reload(&self) -> Result<bool, HttpRailError> {
        if !self.target.https() {
            return Ok(false);
        }
        self.client.set(self.target.client()?);
        Ok(true)
    }

    async fn call(&self, send: &RailSend) -> Result<RailAnswer, reqwest::Error> {
        let body = Request {
            withdrawal: &send.withdrawal,
            key: &send.key,
        };
        let client = self.client.get();
        let mut response = client
            .post(self.target.url.clone())
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

    /// What a send that got no answer says: a TLS failure by when it
    /// happened (in the handshake, in words, naming the rail's host and
    /// the CAs used; or after the request was sent), or the causes.
    fn failure(&self, error: reqwest::Error) -> RailAnswer {
        let timed_out = error.is_timeout();
        let host = &self.target.host;
        let error = match tls_failure(&error) {
            Some(TlsFailure::Handshake(tls)) => format!(
                "the TLS handshake with the rail at {host} failed, so the rail took no request: \
                 {}; checked against {}",
                describe(tls, self.target.client_files().is_some()),
                self.target.ca_shown()
            ),
            Some(TlsFailure::AfterRequest(tls)) => format!(
                "the TLS connection with the rail at {host} failed after the request was sent: \
                 the rail may have acted on it (TLS said: {tls})"
            ),
            None => format!(
                "the rail at {host} could not be reached or did not answer: {}",
                chain(error)
            ),
        };
        RailAnswer::Unknown { error, timed_out }
    }
}

/// How the adapter reaches its rail: the host (never the whole URL), and
/// over HTTPS the CAs and whether it shows a client certificate.
impl std::fmt::Display for HttpRail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let target = &self.target;
        if !target.https() {
            return write!(f, "the HTTP rail at {} in clear", target.host);
        }
        write!(
            f,
            "the HTTP rail at {} over HTTPS, checked against {}",
            target.host,
            target.ca_shown()
        )?;
        match target.client_files() {
            Some((certificate, _)) => write!(
                f,
                ", showing the client certificate in {}",
                payonce_model::escape::EchoPath(certificate)
            ),
            None => f.write_str(", without a client certificate"),
        }
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
                Err(error) => self.failure(error),
            }
        })
    }

    fn reload(&self) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
        Ok(HttpRail::reload(self)?)
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
            // A redirect is never followed, nor taken for an answer.
            (StatusCode::FOUND, sent),
            (StatusCode::TEMPORARY_REDIRECT, sent),
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
