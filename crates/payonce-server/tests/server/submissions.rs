//! Creating and submitting withdrawals: the answers a client sees.

use payonce_server::rail::ScriptedSend;
use reqwest::StatusCode;
use serde_json::json;

use super::{ALICE, BOB, FRANK, TestService, body, problem};

// Guards against a create that takes numbers for amounts, unknown fields
// or hostile text, or writes anything when it refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_is_created_with_its_id_and_bad_bodies_write_nothing() {
    let service = TestService::start().await;
    let id = service.create(ALICE).await;
    let shown = service
        .http
        .get(service.url(&format!("/v1/withdrawals/{id}")))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    let shown = body(shown).await;
    assert_eq!(
        (shown["id"].as_str(), shown["amount"].as_str()),
        (Some(id.as_str()), Some("25"))
    );
    assert_eq!(shown["claim"], serde_json::Value::Null);
    let before = service.ledger.last_seq();
    let post = |body: serde_json::Value| {
        service
            .http
            .post(service.url("/v1/withdrawals"))
            .bearer_auth(ALICE)
            .json(&body)
            .send()
    };
    let number = post(json!({"amount": 25, "currency": "USDC", "destination": "0xabc"}))
        .await
        .unwrap();
    problem(number, StatusCode::BAD_REQUEST, "malformed-body").await;
    let unknown =
        post(json!({"amount": "1", "currency": "USDC", "destination": "0xabc", "memo": "x"}))
            .await
            .unwrap();
    let unknown = problem(unknown, StatusCode::BAD_REQUEST, "malformed-body").await;
    assert!(
        unknown["detail"].as_str().unwrap().contains("memo"),
        "{unknown}"
    );
    let hostile = post(json!({"amount": "1", "currency": "USDC", "destination": "0x\u{1b}[2J"}))
        .await
        .unwrap();
    let hostile = problem(hostile, StatusCode::BAD_REQUEST, "invalid-field").await;
    assert_eq!(hostile["field"], "destination");
    let long = post(json!({"amount": "1", "currency": "USDC", "destination": "d".repeat(300)}))
        .await
        .unwrap();
    let long = problem(long, StatusCode::BAD_REQUEST, "invalid-field").await;
    assert!(
        long["rule"].as_str().unwrap().contains("at most 256"),
        "{long}"
    );
    let huge = post(json!({"amount": "1", "currency": "USDC", "destination": "d".repeat(70_000)}))
        .await
        .unwrap();
    problem(huge, StatusCode::PAYLOAD_TOO_LARGE, "body-too-large").await;
    assert_eq!(
        service.ledger.last_seq(),
        before,
        "a refused body wrote nothing"
    );
    let unknown_id = service
        .http
        .get(service.url("/v1/withdrawals/w-nope"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    problem(unknown_id, StatusCode::NOT_FOUND, "withdrawal-unknown").await;
}

// Guards against a service that lets a caller in without a token or in
// the wrong role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_is_401_and_the_wrong_role_403() {
    let service = TestService::start().await;
    let url = service.url("/v1/withdrawals");
    let none = service
        .http
        .post(&url)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(none.headers()["www-authenticate"], "Bearer");
    problem(none, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let wrong = service
        .http
        .post(&url)
        .bearer_auth("alice-token-012345678X")
        .send()
        .await
        .unwrap();
    problem(wrong, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let operator = service
        .http
        .post(&url)
        .bearer_auth(FRANK)
        .send()
        .await
        .unwrap();
    problem(operator, StatusCode::FORBIDDEN, "forbidden").await;
    let client = service
        .http
        .get(service.url("/v1/operator/in-flight"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    problem(client, StatusCode::FORBIDDEN, "forbidden").await;
    let health = service
        .http
        .get(service.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
}

// Guards against a retry that sends again or answers differently, and a
// second key that is not refused with its holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_its_replay_and_a_second_key() {
    let service = TestService::start().await;
    let id = service.create(ALICE).await;
    let first = service.submit(ALICE, &id, "k-1").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first_body = first.text().await.unwrap();
    let again = service.submit(ALICE, &id, "k-1").await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(
        again.text().await.unwrap(),
        first_body,
        "a replay is the same body"
    );
    assert_eq!(service.rail.calls().len(), 1, "one send");
    let sent: serde_json::Value = serde_json::from_str(&first_body).unwrap();
    assert_eq!(
        (sent["state"].as_str(), sent["amount"].as_str()),
        (Some("sent"), Some("25"))
    );

    let second = problem(
        service.submit(ALICE, &id, "k-2").await,
        StatusCode::CONFLICT,
        "withdrawal-claimed",
    )
    .await;
    assert_eq!(second["holder"], "k-1");
    assert_eq!(second["holder_state"]["status"], "decided");
    // Another client learns that another key holds it, and its state.
    let other = problem(
        service.submit(BOB, &id, "k-9").await,
        StatusCode::CONFLICT,
        "withdrawal-claimed",
    )
    .await;
    assert!(other.get("holder").is_none(), "{other}");
    assert!(!other.to_string().contains("k-1"), "{other}");
    assert_eq!(other["holder_state"]["state"], "sent");

    let another = service.create(ALICE).await;
    let reused = problem(
        service.submit(ALICE, &another, "k-1").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "key-reused",
    )
    .await;
    assert_eq!(reused["differences"][0]["field"], "id");
    assert_eq!(reused["differences"][0]["recorded"], id.as_str());
    assert_eq!(reused["differences"][0]["given"], another.as_str());
    let missing = problem(
        service.submit(ALICE, "w-nope", "k-7").await,
        StatusCode::NOT_FOUND,
        "withdrawal-unknown",
    )
    .await;
    assert!(missing["detail"].as_str().unwrap().contains("w-nope"));
    assert_eq!(service.rail.calls().len(), 1, "no refusal sent anything");
}

// Guards against a missing or malformed Idempotency-Key being taken as a
// key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_or_a_malformed_one_is_400() {
    let service = TestService::start().await;
    let id = service.create(ALICE).await;
    let url = service.url(&format!("/v1/withdrawals/{id}/submissions"));
    let none = service
        .http
        .post(&url)
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    problem(none, StatusCode::BAD_REQUEST, "idempotency-key-missing").await;
    for bad in ["k-1", "\"k-1", "\"\"", "\"   \"", "\"a\\n\""] {
        let response = service
            .http
            .post(&url)
            .bearer_auth(ALICE)
            .header("Idempotency-Key", bad)
            .send()
            .await
            .unwrap();
        problem(
            response,
            StatusCode::BAD_REQUEST,
            "idempotency-key-malformed",
        )
        .await;
    }
    let long = format!(
        "\"{}\"",
        "k".repeat(payonce_server::scope::CLIENT_KEY_LEN_MAX + 1)
    );
    let response = service
        .http
        .post(&url)
        .bearer_auth(ALICE)
        .header("Idempotency-Key", long)
        .send()
        .await
        .unwrap();
    problem(
        response,
        StatusCode::BAD_REQUEST,
        "idempotency-key-malformed",
    )
    .await;
    let body = service
        .http
        .post(&url)
        .bearer_auth(ALICE)
        .header("Idempotency-Key", "\"k\"")
        .json(&json!({"x": 1}))
        .send()
        .await
        .unwrap();
    problem(body, StatusCode::BAD_REQUEST, "malformed-body").await;
    assert!(service.rail.calls().is_empty());
    assert!(service.ledger.in_flight().is_empty());
}

// Guards against two clients' equal keys colliding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_with_the_same_key_never_collide() {
    let service = TestService::start().await;
    let (mine, theirs) = (service.create(ALICE).await, service.create(BOB).await);
    assert_eq!(
        service.submit(ALICE, &mine, "k-1").await.status(),
        StatusCode::OK
    );
    assert_eq!(
        service.submit(BOB, &theirs, "k-1").await.status(),
        StatusCode::OK
    );
    for (token, id) in [(ALICE, &mine), (BOB, &theirs)] {
        let key = service
            .http
            .get(service.url("/v1/keys/k-1"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let key = body(key).await;
        assert_eq!(key["withdrawal"], id.as_str());
        assert_eq!(key["status"], "decided");
    }
    let unknown = service
        .http
        .get(service.url("/v1/keys/k-2"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    problem(unknown, StatusCode::NOT_FOUND, "key-unknown").await;
    // The holder is named to its client and to operators, to no one else.
    let url = service.url(&format!("/v1/withdrawals/{mine}"));
    for (token, holder) in [(ALICE, Some("k-1")), (FRANK, Some("k-1")), (BOB, None)] {
        let shown = body(
            service
                .http
                .get(&url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(shown["claim"]["holder"].as_str(), holder, "{shown}");
        assert_eq!(shown["claim"]["state"], "sent");
    }
}

// Guards against a key in flight that a retry or a second key gets past.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_flight_is_409_with_since_and_its_send_completes() {
    let service = TestService::start().await;
    let id = service.create(ALICE).await;
    service.rail.then(ScriptedSend::Hold);
    let first = service.submit_in_task(ALICE, &id, "k-1");
    assert_eq!(service.rail.held().await.as_deref(), Some("alice:k-1"));
    let retry = problem(
        service.submit(ALICE, &id, "k-1").await,
        StatusCode::CONFLICT,
        "key-in-flight",
    )
    .await;
    assert_eq!(retry["key"], "k-1");
    assert!(retry["since"].as_str().unwrap().ends_with('Z'), "{retry}");
    assert_eq!(retry["send_running"], true);
    let second = problem(
        service.submit(ALICE, &id, "k-2").await,
        StatusCode::CONFLICT,
        "withdrawal-claimed",
    )
    .await;
    assert_eq!(second["holder"], "k-1");
    assert_eq!(second["holder_state"]["status"], "in_flight");
    let queue = service
        .http
        .get(service.url("/v1/operator/in-flight"))
        .bearer_auth(FRANK)
        .send()
        .await
        .unwrap();
    let queue = body(queue).await;
    assert_eq!(queue["in_flight"][0]["client"], "alice");
    assert_eq!(queue["in_flight"][0]["key"], "k-1");
    assert!(queue["in_flight"][0]["age_seconds"].is_u64());
    service.rail.release();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(service.rail.calls().len(), 1);
}

// Guards against a clean refusal or an unknown outcome that frees the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rail_refusal_and_an_unknown_outcome_keep_the_key_claimed() {
    let service = TestService::start().await;
    let refused = service.create(ALICE).await;
    service
        .rail
        .then(ScriptedSend::Refuse("hot wallet below its floor".into()));
    let answer = problem(
        service.submit(ALICE, &refused, "k-r").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "rail-refused",
    )
    .await;
    assert_eq!(answer["reason"], "hot wallet below its floor");
    assert_eq!(answer["key_stays_claimed"], true);
    problem(
        service.submit(ALICE, &refused, "k-r").await,
        StatusCode::CONFLICT,
        "key-in-flight",
    )
    .await;
    for (timed_out, status) in [
        (false, StatusCode::BAD_GATEWAY),
        (true, StatusCode::GATEWAY_TIMEOUT),
    ] {
        let id = service.create(ALICE).await;
        service.rail.then(ScriptedSend::Unknown { timed_out });
        let key = format!("k-u{timed_out}");
        let answer = problem(
            service.submit(ALICE, &id, &key).await,
            status,
            "outcome-unknown",
        )
        .await;
        assert_eq!(answer["key_stays_claimed"], true);
        assert!(answer["detail"].as_str().unwrap().contains("stays claimed"));
        problem(
            service.submit(ALICE, &id, "k-other").await,
            StatusCode::CONFLICT,
            "withdrawal-claimed",
        )
        .await;
    }
    assert_eq!(service.ledger.in_flight().len(), 3);
    let metrics = service
        .http
        .get(service.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert!(
        metrics.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let metrics = metrics.text().await.unwrap();
    assert!(metrics.contains("payonce_keys_in_flight 3\n"), "{metrics}");
    assert!(
        metrics.contains("payonce_decisions_total{kind=\"rail-refused\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("payonce_decisions_total{kind=\"outcome-unknown\"} 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("payonce_durable_commit_seconds_count"),
        "{metrics}"
    );
}

// Guards against a client that goes away mid-send freeing its key, or
// cutting the send short so that its outcome is never recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_send_leaves_its_key_in_flight_until_the_send_ends() {
    let service = TestService::start().await;
    let id = service.create(ALICE).await;
    service.rail.then(ScriptedSend::Hold);
    let gone = service.submit_in_task(ALICE, &id, "k-1");
    assert_eq!(service.rail.held().await.as_deref(), Some("alice:k-1"));
    // Dropping the request closes its connection.
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    let key = service
        .http
        .get(service.url("/v1/keys/k-1"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    let key = body(key).await;
    assert_eq!(
        (key["status"].as_str(), key["send_running"].as_bool()),
        (Some("in_flight"), Some(true)),
        "{key}"
    );
    problem(
        service.submit(ALICE, &id, "k-2").await,
        StatusCode::CONFLICT,
        "withdrawal-claimed",
    )
    .await;
    service.rail.release();
    while service.ledger.outcome("alice:k-1").unwrap().is_none() {
        tokio::task::yield_now().await;
    }
    let replay = service.submit(ALICE, &id, "k-1").await;
    assert_eq!(replay.status(), StatusCode::OK);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(body(replay).await["state"], "sent");
    assert_eq!(service.rail.calls().len(), 1, "one send");
}

// Guards against a route, method or media type outside the contract that
// is answered with anything but its problem, or writes anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_routes_methods_and_media_types_are_problems() {
    let service = TestService::start().await;
    let before = service.ledger.last_seq();
    let route = service
        .http
        .get(service.url("/v1/nothing"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    problem(route, StatusCode::NOT_FOUND, "not-found").await;
    let method = service
        .http
        .delete(service.url("/v1/withdrawals"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    problem(method, StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed").await;
    let form = service
        .http
        .post(service.url("/v1/withdrawals"))
        .bearer_auth(ALICE)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("amount=1&currency=USDC&destination=0xabc")
        .send()
        .await
        .unwrap();
    problem(
        form,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported-media-type",
    )
    .await;
    assert_eq!(service.ledger.last_seq(), before, "nothing was written");
}

// Guards against a durable commit timed twice, or not at all: a creation
// is one commit, a sent submission two (its claim, its outcome), a replay
// and a refusal one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_durable_commit_is_timed_once() {
    let service = TestService::start().await;
    let id = service.create(ALICE).await;
    assert_eq!(
        service.submit(ALICE, &id, "k-1").await.status(),
        StatusCode::OK
    );
    assert_eq!(
        service.submit(ALICE, &id, "k-1").await.status(),
        StatusCode::OK
    );
    problem(
        service.submit(ALICE, &id, "k-2").await,
        StatusCode::CONFLICT,
        "withdrawal-claimed",
    )
    .await;
    assert_eq!(service.rail.calls().len(), 1);
    let metrics = service
        .http
        .get(service.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("payonce_durable_commit_seconds_count 5\n"),
        "{metrics}"
    );
}
