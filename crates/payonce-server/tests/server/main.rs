//! The HTTP service end to end, in this process, through a real HTTP
//! client: every status of the contract in docs/http.md, the limits, the
//! ledger's storage failing, the HTTP rail (in clear and over mutual TLS),
//! the service over TLS and its reload, two reloads at once, and workers
//! of one PostgreSQL ledger. `payonce serve` as a process (SIGTERM, SIGHUP, SIGKILL under
//! load, its startup refusals) is tested with the binary, in payonce-cli.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub
)]

mod http_rail;
mod https_rail;
mod limits;
mod operator;
mod reload;
mod storage;
mod submissions;
mod tls;
mod workers;

use std::sync::Arc;

use payonce::Ledger;
use payonce_server::rail::ScriptedRail;
use payonce_server::{self, Embedded, Limits, Metrics, Server, Setup, Tokens};
use payonce_tls::testing::{Issued, TestCa};
use reqwest::{Response, StatusCode};
use serde_json::Value;

pub const ALICE: &str = "alice-token-0123456789";
pub const BOB: &str = "bob-token-0123456789";
pub const FRANK: &str = "frank-token-0123456789";

pub const TOKENS: &str = "[clients]\nalice = \"alice-token-0123456789\"\nbob = \"bob-token-0123456789\"\n\
                          [operators]\nfrank = \"frank-token-0123456789\"\n";

/// A service on a new ledger and the test rail, and a client for it.
pub struct TestService {
    pub ledger: Ledger,
    pub rail: Arc<ScriptedRail>,
    pub server: Option<Server>,
    pub base: String,
    pub http: reqwest::Client,
    pub _dir: tempfile::TempDir,
}

impl TestService {
    pub async fn start() -> TestService {
        TestService::start_with(Limits::default()).await
    }

    pub async fn start_with(limits: Limits) -> TestService {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::init(dir.path()).unwrap();
        TestService::start_on(ledger, dir, limits).await
    }

    /// A service on `ledger`, whose files (if any) are in `dir`.
    pub async fn start_on(ledger: Ledger, dir: tempfile::TempDir, limits: Limits) -> TestService {
        TestService::start_sending_to(ledger, dir, limits, Arc::new(ScriptedRail::default())).await
    }

    /// A service on `ledger` sending through `rail`, which other services
    /// may share.
    pub async fn start_sending_to(
        ledger: Ledger,
        dir: tempfile::TempDir,
        limits: Limits,
        rail: Arc<ScriptedRail>,
    ) -> TestService {
        let scripted = rail.clone();
        let mut service = TestService::start_from(ledger, dir, http_client(None, None), |setup| {
            setup.limits = limits;
            setup.rail = scripted;
        })
        .await;
        service.rail = rail;
        service
    }

    /// A service on `ledger` as `change` makes its setup (another rail,
    /// TLS, a tokens file to reload), reached through `http`. Its test rail
    /// is the one it sends through unless `change` gives another.
    pub async fn start_from(
        ledger: Ledger,
        dir: tempfile::TempDir,
        http: reqwest::Client,
        change: impl FnOnce(&mut Setup),
    ) -> TestService {
        let metrics = Arc::new(Metrics::default());
        let rail = Arc::new(ScriptedRail::default());
        let mut setup = Setup {
            ledger: Arc::new(Embedded::new(ledger.clone(), metrics.clone())),
            rail: rail.clone(),
            tokens: Tokens::parse(TOKENS, std::path::Path::new("tokens.toml")).unwrap(),
            metrics,
            limits: Limits::default(),
            tls: None,
            tokens_file: None,
        };
        change(&mut setup);
        let scheme = if setup.tls.is_some() { "https" } else { "http" };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = payonce_server::start_with(listener, setup).unwrap();
        TestService {
            ledger,
            rail,
            base: format!("{scheme}://{}", server.addr()),
            server: Some(server),
            http,
            _dir: dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Creates a withdrawal as `token`'s client; returns its id.
    pub async fn create(&self, token: &str) -> String {
        let response = self
            .http
            .post(self.url("/v1/withdrawals"))
            .bearer_auth(token)
            .json(
                &serde_json::json!({"amount": "25.00", "currency": "USDC", "destination": "0xabc"}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        body(response).await["id"].as_str().unwrap().to_owned()
    }

    /// Submits withdrawal `id` as `token`'s client under `key` (an RFC 8941
    /// string).
    pub async fn submit(&self, token: &str, id: &str, key: &str) -> Response {
        self.submission(token, id, key).send().await.unwrap()
    }

    /// Submits as [`TestService::submit`] does, in a task of its own, so
    /// the test can act while the send runs.
    pub fn submit_in_task(
        &self,
        token: &str,
        id: &str,
        key: &str,
    ) -> tokio::task::JoinHandle<reqwest::Result<Response>> {
        tokio::spawn(self.submission(token, id, key).send())
    }

    fn submission(&self, token: &str, id: &str, key: &str) -> reqwest::RequestBuilder {
        self.http
            .post(self.url(&format!("/v1/withdrawals/{id}/submissions")))
            .bearer_auth(token)
            .header("Idempotency-Key", format!("\"{key}\""))
    }
}

/// A rustls client configuration trusting `ca` (nothing without it) and
/// showing `identity` when given. reqwest has no cryptography of its own
/// here: every client is built on this.
pub fn client_tls(ca: Option<&TestCa>, identity: Option<&Issued>) -> rustls::ClientConfig {
    payonce_tls::testing::client_config(ca, identity).unwrap()
}

/// A reqwest client on [`client_tls`].
pub fn http_client(ca: Option<&TestCa>, identity: Option<&Issued>) -> reqwest::Client {
    reqwest::Client::builder()
        .use_preconfigured_tls(client_tls(ca, identity))
        .build()
        .unwrap()
}

/// The response's body as JSON.
pub async fn body(response: Response) -> Value {
    let text = response.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("not JSON ({error}): {text}"))
}

/// Checks a problem+json answer: its status and type; returns its body.
pub async fn problem(response: Response, status: StatusCode, kind: &str) -> Value {
    assert_eq!(response.status(), status);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body = body(response).await;
    assert_eq!(
        body["type"],
        format!("urn:payonce:problem:{kind}"),
        "{body}"
    );
    assert_eq!(body["status"], status.as_u16());
    body
}
