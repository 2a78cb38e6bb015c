//! `Server::reload` called twice at once: the later call applies what it
//! read after the earlier one has applied its own, never before. A FIFO
//! as the tokens file holds the first reload at its read for as long as
//! the test wants.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use payonce::Ledger;
use payonce_server::Tokens;
use reqwest::StatusCode;

use super::{TestService, http_client};

const OLD: &str = "[clients]\nold = \"old-token-0123456789\"\n";
const NEW: &str = "[clients]\nnew = \"new-token-0123456789\"\n";

/// Makes a FIFO at `path`.
fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// The status of a read as the caller of `token`.
async fn status_as(service: &TestService, token: &str) -> StatusCode {
    let answer = service
        .http
        .get(service.url("/v1/withdrawals/w-1"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    answer.status()
}

// Guards against two reloads at once where the one that read the file
// first applies last, leaving the service on the older file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_reload_applies_after_the_first_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::init(dir.path().join("ledger")).unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, OLD).unwrap();
    let file = tokens.clone();
    let service = TestService::start_from(ledger, dir, http_client(None, None), |setup| {
        setup.tokens = Tokens::read(&file).unwrap();
        setup.tokens_file = Some(file);
    })
    .await;
    let server = service.server.as_ref().unwrap();
    std::fs::remove_file(&tokens).unwrap();
    mkfifo(&tokens);

    let first = server.reload();
    tokio::pin!(first);
    let fifo = tokens.clone();
    let opened = tokio::task::spawn_blocking(move || {
        std::fs::OpenOptions::new().write(true).open(fifo).unwrap()
    });
    // The first reload is reading the FIFO once its other end opens.
    let mut writer = tokio::select! {
        report = &mut first => panic!("the first reload ended early: {report}"),
        opened = opened => opened.unwrap(),
    };
    let newer = tokens.with_extension("new");
    std::fs::write(&newer, NEW).unwrap();
    std::fs::rename(&newer, &tokens).unwrap();
    let second = server.reload();
    tokio::pin!(second);
    // Not a wait for anything to happen: the second reload cannot finish
    // before the first while reloads take turns, however long this is;
    // without turns it finishes well within it, having applied the newer
    // file first.
    let early = tokio::time::timeout(Duration::from_secs(1), &mut second).await;
    assert!(early.is_err(), "the second reload did not wait: {early:?}");

    writer.write_all(OLD.as_bytes()).unwrap();
    drop(writer);
    let first = first.await;
    assert!(matches!(first.tokens, Some(Ok(1))), "{first}");
    let second = second.await;
    assert!(matches!(second.tokens, Some(Ok(1))), "{second}");
    assert_eq!(
        status_as(&service, "new-token-0123456789").await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        status_as(&service, "old-token-0123456789").await,
        StatusCode::UNAUTHORIZED
    );
}
