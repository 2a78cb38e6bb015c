//! The commands only a PostgreSQL ledger has: `migrate`, which applies the
//! schema, `end-session`, an operator's "this worker is gone", and `head`,
//! the chain's head to keep outside the database.

use std::io::Write;
use std::path::PathBuf;

use payonce::LedgerError;
use payonce_postgres::Migrated;
use tracing::info;

use crate::cli::{EndSessionArgs, HeadArgs, MigrateArgs};
use crate::env::{Env, Status};
use crate::error::{CliError, WriteStep};
use crate::escape::Echo;
use crate::operator::{note_argument, operator};

/// Refuses anything but a PostgreSQL connection string, checks it, and
/// gives it as it is shown.
fn url_argument(url: &str) -> Result<PathBuf, CliError> {
    match payonce_postgres::is_url(url) {
        true => crate::postgres_url::checked(url),
        false => Err(CliError::Usage {
            message: format!(
                "{} is not a PostgreSQL connection string: give postgresql://..., or libpq's \
                 key=value form (host=... dbname=...)",
                Echo(url)
            ),
        }),
    }
}

/// `payonce migrate URL`.
pub(crate) fn migrate(args: &MigrateArgs, out: &mut dyn Write) -> Result<Status, CliError> {
    let shown = url_argument(&args.url)?;
    let migrated = payonce_postgres::migrate(&args.url)
        .map_err(|error| CliError::from_writer(&shown, WriteStep::Recording, error.into()))?;
    let version = payonce_postgres::SCHEMA_VERSION;
    let words = match migrated {
        Migrated::Created => format!("created the payonce schema, version {version}"),
        Migrated::Current => format!("the payonce schema is at version {version}: nothing to do"),
        Migrated::Upgraded { from, events } => format!(
            "brought the payonce schema from version {from} to {version}, indexing {events} events"
        ),
    };
    info!(?migrated, version, "migrated");
    writeln!(out, "{words} in {}", shown.display()).map_err(CliError::output)?;
    Ok(Status::Clean)
}

/// `payonce end-session URL WORKER --note TEXT [--by NAME]`.
pub(crate) fn end_session(
    args: &EndSessionArgs,
    env: &Env,
    out: &mut dyn Write,
) -> Result<Status, CliError> {
    let shown = url_argument(&args.url)?;
    let note = note_argument(&args.note)?;
    let by = operator(args.by.as_deref(), env)?;
    payonce_postgres::end_session(&args.url, &args.worker, note.as_str(), by.as_str()).map_err(
        |error| match error {
            LedgerError::Invalid(error) => CliError::InvalidArgument {
                argument: "WORKER",
                value: args.worker.clone(),
                error,
            },
            error => CliError::from_writer(&shown, WriteStep::Recording, error),
        },
    )?;
    info!(worker = %args.worker, by = %by, "session ended by an operator");
    writeln!(
        out,
        "ended the session of worker {} by {}: its sends are over, and the keys it left in \
         flight can be resolved or released",
        Echo(&args.worker),
        Echo(&by)
    )
    .map_err(CliError::output)?;
    Ok(Status::Clean)
}

/// `payonce head URL [--expect-head SEQ:DIGEST]`.
pub(crate) fn head(args: &HeadArgs, out: &mut dyn Write) -> Result<Status, CliError> {
    let url = args.dir.to_str().unwrap_or_default();
    let shown = url_argument(url)?;
    let expected = args.expected_head();
    let read = |error: payonce::StoreError| CliError::from_ledger(&shown, error.into());
    let Some(expected) = expected else {
        let head = payonce_postgres::head(url).map_err(read)?;
        writeln!(out, "{head}").map_err(CliError::output)?;
        return Ok(Status::Clean);
    };
    let (head, found) = payonce_postgres::head_through(url, expected.seq).map_err(read)?;
    writeln!(out, "{head}").map_err(CliError::output)?;
    let line = match found {
        Some(found) if found == expected => {
            format!("the log passes through the expected head {expected}")
        }
        Some(found) => format!(
            "EXPECTED HEAD NOT FOUND: the batch ending at {} has digest {}, not {}: the log \
             was rewritten",
            expected.seq, found.digest, expected.digest
        ),
        None => format!(
            "EXPECTED HEAD NOT FOUND: no batch of the log ends at event {}: the log was \
             rewound or rewritten",
            expected.seq
        ),
    };
    info!(%head, %expected, kept = found == Some(expected), "head checked against the expected one");
    writeln!(out, "{line}").map_err(CliError::output)?;
    Ok(Status::problem_if(found != Some(expected)))
}
