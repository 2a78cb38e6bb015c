//! The HTTP rail adapter against a rail client served here: which answers
//! are sent, refused cleanly, or unknown.

use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::routing::post;
use payonce::Ledger;
use payonce_server::rail::{HttpRail, Rail, RailAnswer, RailSend};
use serde_json::{Value, json};

/// A rail client that answers by the key's last word.
async fn rail_client(Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    let key = body["key"].as_str().unwrap_or_default().to_owned();
    assert!(body["withdrawal"]["id"].is_string(), "{body}");
    match key.rsplit('-').next().unwrap_or_default() {
        "sent" => (StatusCode::OK, Json(json!({"reference": "0xfeed"}))),
        "refused" => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"reason": "floor"})),
        ),
        "busy" => (
            StatusCode::TOO_MANY_REQUESTS,
            Json(json!({"reason": "slow down"})),
        ),
        "broken" => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"reason": "oops"})),
        ),
        _ => std::future::pending().await,
    }
}

// Guards against an adapter that gives money back for anything but a clear
// refusal, or calls a timeout anything but unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_rail_tells_sent_refused_and_unknown_apart() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/send", post(rail_client));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::init(dir.path()).unwrap();
    let withdrawal = ledger
        .create(payonce::NewWithdrawal {
            amount: "1".parse().unwrap(),
            currency: "USDC".parse().unwrap(),
            destination: "0xabc".parse().unwrap(),
            requested_by: "alice".parse().unwrap(),
        })
        .unwrap();
    let rail = HttpRail::new(&format!("http://{addr}/send"), Duration::from_millis(300)).unwrap();
    let send = |key: &str| RailSend {
        withdrawal: withdrawal.clone(),
        key: format!("alice:{key}"),
    };
    let answer = |key: &'static str| {
        let (rail, send) = (rail.clone(), send(key));
        async move { rail.send(&send).await }
    };
    assert_eq!(
        answer("k-sent").await,
        RailAnswer::Sent {
            reference: "0xfeed".into()
        }
    );
    assert_eq!(
        answer("k-refused").await,
        RailAnswer::Refused {
            reason: "floor".into()
        }
    );
    for key in ["k-busy", "k-broken"] {
        assert!(
            matches!(
                answer(key).await,
                RailAnswer::Unknown {
                    timed_out: false,
                    ..
                }
            ),
            "{key}"
        );
    }
    assert!(matches!(
        answer("k-hangs").await,
        RailAnswer::Unknown {
            timed_out: true,
            ..
        }
    ));
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nowhere = format!("http://{}/send", closed.local_addr().unwrap());
    drop(closed);
    let lost = HttpRail::new(&nowhere, Duration::from_millis(300)).unwrap();
    assert!(matches!(
        lost.send(&send("k-sent")).await,
        RailAnswer::Unknown {
            timed_out: false,
            ..
        }
    ));
}
