//! How the database's errors become the ledger's [`StoreError`]s.

use payonce::StoreError;
use postgres::error::SqlState;

/// `error` from a statement: a constraint's refusal is a conflict, a lost
/// connection or anything else a failure.
pub(crate) fn failed(error: postgres::Error) -> StoreError {
    let detail = describe(&error);
    match error.code() {
        Some(code)
            if *code == SqlState::UNIQUE_VIOLATION || *code == SqlState::FOREIGN_KEY_VIOLATION =>
        {
            StoreError::Conflict { detail }
        }
        _ => StoreError::Failed { detail },
    }
}

/// The error's message, with the server's detail when it gave one.
pub(crate) fn describe(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{}: {detail}", db.message()),
            None => db.message().to_owned(),
        },
        None => chain(error),
    }
}

/// `error` and every error under it (`source()`), joined by `: `:
/// tokio-postgres prints only the outermost (`invalid configuration`), and
/// keeps what went wrong (`invalid number of ports`) beneath it.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.ends_with(&said) {
            text = format!("{text}: {said}");
        }
        source = cause.source();
    }
    text
}

/// A store that refuses to be written as it is.
pub(crate) fn unsafe_store(detail: String) -> StoreError {
    StoreError::Unsafe { detail }
}

/// The log is not what it must be.
pub(crate) fn damaged(seq: u64, detail: String) -> StoreError {
    StoreError::Damaged { seq, detail }
}

/// `text`, a connection string that does not parse, with what may be a
/// password masked: a URL's `user:password@`, and every `password=` value.
pub(crate) fn masked(text: &str) -> String {
    let mut shown = match text.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(end);
            let authority = match authority.rsplit_once('@') {
                Some((user, host)) => {
                    let name = user.split_once(':').map_or(user, |(name, _)| name);
                    format!("{name}:***@{host}")
                }
                None => authority.to_owned(),
            };
            format!("{scheme}://{authority}{tail}")
        }
        None => text.to_owned(),
    };
    let mut from = 0;
    while let Some(found) = shown[from..].find("password=") {
        let start = from + found + "password=".len();
        let end = shown[start..]
            .find(|c: char| c == '&' || c.is_whitespace())
            .map_or(shown.len(), |end| start + end);
        shown.replace_range(start..end, "***");
        from = start + 3;
    }
    shown
}
