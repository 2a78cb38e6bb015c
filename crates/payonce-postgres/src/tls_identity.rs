//! The client's certificate, for PostgreSQL's `cert` authentication:
//! `sslcert` and `sslkey`, or libpq's `~/.postgresql/postgresql.crt` and
//! `postgresql.key` when they exist. The key file passes libpq's rule on
//! its mode before it is read.

use std::path::{Path, PathBuf};

use payonce_tls::Identity;

use crate::conninfo::Conninfo;
use crate::refusal::ConnectError;

/// The client certificate `conninfo` names, or libpq's default one if it
/// exists; `None` without either. `dot` is `~/.postgresql`.
pub(crate) fn identity(
    conninfo: &Conninfo,
    dot: Option<&Path>,
) -> Result<Option<Identity>, ConnectError> {
    let default = |name: &str| dot.map(|dot| dot.join(name));
    let certificate = match conninfo.get("sslcert") {
        Some(file) => PathBuf::from(file),
        None => match default("postgresql.crt") {
            Some(file) if file.exists() => file,
            _ => return Ok(None),
        },
    };
    let key = match (conninfo.get("sslkey"), default("postgresql.key")) {
        (Some(file), _) => PathBuf::from(file),
        (None, Some(file)) => file,
        (None, None) => certificate.with_extension("key"),
    };
    check_key_mode(&key)?;
    payonce_tls::read_identity(&certificate, &key)
        .map(Some)
        .map_err(|error| ConnectError::File {
            option: "sslcert",
            error,
        })
}

/// libpq's rule: a key the process's user owns is `u=rw` (0600) or less;
/// one root owns is `u=rw,g=r` (0640) or less; another owner's is not
/// checked. A key that cannot be looked at is left to the read, which
/// names the failure.
fn check_key_mode(key: &Path) -> Result<(), ConnectError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let Ok(metadata) = std::fs::metadata(key) else {
            return Ok(());
        };
        // This process's user owns its /proc entry.
        let me = std::fs::metadata("/proc/self").map(|own| own.uid()).ok();
        let mode = metadata.mode() & 0o777;
        let forbidden = if Some(metadata.uid()) == me {
            0o077
        } else if metadata.uid() == 0 {
            0o037
        } else {
            0
        };
        if mode & forbidden != 0 {
            return Err(ConnectError::KeyFileMode {
                file: key.to_owned(),
                mode,
            });
        }
    }
    Ok(())
}
