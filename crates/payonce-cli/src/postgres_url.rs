//! A PostgreSQL connection string given where a directory may be: told
//! apart from a directory (a `postgresql://` URL, or libpq's key=value
//! form), checked before anything connects, so that a mistake in it is
//! bad input (exit 2) naming the option or the file, and shown without its
//! password.

use std::path::{Path, PathBuf};

use crate::error::CliError;

/// `given` as a connection string, if it is one.
pub(crate) fn as_url(given: &Path) -> Option<&str> {
    given.to_str().filter(|text| payonce_postgres::is_url(text))
}

/// `url` checked (its options, libpq's environment, the files it names),
/// and how messages show it.
pub(crate) fn checked(url: &str) -> Result<PathBuf, CliError> {
    payonce_postgres::check(url).map_err(|error| CliError::Usage {
        message: format!("{}: {error}", payonce_postgres::redacted(url)),
    })?;
    Ok(PathBuf::from(payonce_postgres::redacted(url)))
}
