//! The operator's routes: the exits, their notes, and who is recorded.

use payonce_server::rail::ScriptedSend;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{ALICE, FRANK, TestService, body, problem};

impl TestService {
    async fn exit(&self, token: &str, key: &str, action: &str, body: Value) -> reqwest::Response {
        self.http
            .post(self.url(&format!("/v1/operator/clients/alice/keys/{key}/{action}")))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Every event's debug text, from the log.
    fn events(&self) -> Vec<String> {
        let log = payonce::EventLog::open(self._dir.path()).unwrap();
        let mut events = log.events_from(1).unwrap();
        let mut texts = Vec::new();
        while let Some((event, _)) = events.next_event().unwrap() {
            texts.push(format!("{event:?}"));
        }
        texts
    }
}

/// `id`'s outcome as the rail shows it: sent under `reference`.
fn sent(id: &str, reference: &str) -> Value {
    json!({"id": id, "amount": "25", "currency": "USDC", "destination": "0xabc",
           "requested_by": "alice", "state": "sent", "reference": reference})
}

// Guards against an exit without a note, one recorded under another name,
// or a resolve that a retry does not replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_resolves_and_corrects_a_key_and_the_client_replays_it() {
    let service = TestService::start().await;
    let id = service.create(ALICE).await;
    service.rail.then(ScriptedSend::Unknown { timed_out: true });
    problem(
        service.submit(ALICE, &id, "k-1").await,
        StatusCode::GATEWAY_TIMEOUT,
        "outcome-unknown",
    )
    .await;
    let outcome = sent(&id, "0xfound");
    let no_note = service
        .exit(FRANK, "k-1", "resolve", json!({"outcome": outcome}))
        .await;
    problem(no_note, StatusCode::BAD_REQUEST, "malformed-body").await;
    let empty = service
        .exit(
            FRANK,
            "k-1",
            "resolve",
            json!({"outcome": outcome, "note": ""}),
        )
        .await;
    assert_eq!(
        problem(empty, StatusCode::BAD_REQUEST, "invalid-field").await["field"],
        "note"
    );
    let other = sent("w-else", "0xfound");
    let mismatch = service
        .exit(
            FRANK,
            "k-1",
            "resolve",
            json!({"outcome": other, "note": "looked"}),
        )
        .await;
    let mismatch = problem(
        mismatch,
        StatusCode::UNPROCESSABLE_ENTITY,
        "outcome-mismatch",
    )
    .await;
    assert_eq!(mismatch["differences"][0]["field"], "id");
    let client = service
        .exit(
            ALICE,
            "k-1",
            "resolve",
            json!({"outcome": outcome, "note": "looked"}),
        )
        .await;
    problem(client, StatusCode::FORBIDDEN, "forbidden").await;

    let resolved = service
        .exit(
            FRANK,
            "k-1",
            "resolve",
            json!({"outcome": outcome, "note": "found 0xfound"}),
        )
        .await;
    assert_eq!(resolved.status(), StatusCode::OK);
    let resolved = body(resolved).await;
    assert_eq!(
        (resolved["status"].as_str(), resolved["client"].as_str()),
        (Some("decided"), Some("alice"))
    );
    let replay = service.submit(ALICE, &id, "k-1").await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(body(replay).await["reference"], "0xfound");

    let failed = json!({"id": id, "amount": "25", "currency": "USDC", "destination": "0xabc",
                        "requested_by": "alice", "state": "failed", "reference": "0xfound",
                        "reason": "dropped from the mempool"});
    let corrected = service
        .exit(
            FRANK,
            "k-1",
            "correct",
            json!({"outcome": failed, "note": "dropped"}),
        )
        .await;
    assert_eq!(corrected.status(), StatusCode::OK);
    assert_eq!(
        body(service.submit(ALICE, &id, "k-1").await).await["state"],
        "failed"
    );
    let events = service.events();
    assert!(
        events.iter().any(|e| e.contains("Resolved")
            && e.contains("\"frank\"")
            && e.contains("found 0xfound")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains("Corrected") && e.contains("\"frank\"")),
        "{events:?}"
    );
    assert!(service.rail.calls().len() == 1, "no exit sent anything");
}

// Guards against a release that frees a key with an outcome, or that
// answers success for a key that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_releases_a_refused_key_and_the_withdrawal_sends_again() {
    let service = TestService::start().await;
    let id = service.create(ALICE).await;
    service.rail.then(ScriptedSend::Refuse("floor".into()));
    problem(
        service.submit(ALICE, &id, "k-1").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "rail-refused",
    )
    .await;
    let unknown = service
        .exit(FRANK, "k-404", "release", json!({"note": "typo"}))
        .await;
    problem(unknown, StatusCode::NOT_FOUND, "key-unknown").await;
    let bad = service
        .exit(
            FRANK,
            "k-1",
            "release",
            json!({"note": "x", "by": "mallory"}),
        )
        .await;
    problem(bad, StatusCode::BAD_REQUEST, "malformed-body").await;
    let released = service
        .exit(
            FRANK,
            "k-1",
            "release",
            json!({"note": "rail shows nothing"}),
        )
        .await;
    assert_eq!(body(released).await["status"], "released");
    assert!(service.ledger.in_flight().is_empty());
    assert_eq!(
        service.submit(ALICE, &id, "k-2").await.status(),
        StatusCode::OK
    );
    let again = service
        .exit(FRANK, "k-2", "release", json!({"note": "wrong"}))
        .await;
    problem(again, StatusCode::CONFLICT, "has-outcome").await;
    let events = service.events();
    assert!(
        events
            .iter()
            .any(|e| e.contains("Released") && e.contains("\"frank\"")),
        "{events:?}"
    );
}
