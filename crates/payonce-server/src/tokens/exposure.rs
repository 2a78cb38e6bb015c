//! A tokens file that others can read while it holds tokens in clear: the
//! service starts, and says so.

use std::path::{Path, PathBuf};

use payonce_model::escape::EchoPath;

use super::{DIGEST_PREFIX, Tokens};

/// A tokens file that holds tokens in clear and whose mode lets its group
/// or others read it (mode & 0o077 is not 0, on unix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExposedTokens {
    /// The file.
    pub file: PathBuf,
    /// Its permission bits.
    pub mode: u32,
    /// How many of its tokens are in clear.
    pub clear: usize,
}

impl std::fmt::Display for ExposedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tokens file {} holds {} token(s) in clear and its mode {:04o} gives its group or others access: \
             write them as {DIGEST_PREFIX} entries (printf %s \"$TOKEN\" | sha256sum), \
             or chmod 600 {}",
            EchoPath(&self.file),
            self.clear,
            self.mode,
            EchoPath(&self.file)
        )
    }
}

impl Tokens {
    /// Whether `file`, the file these tokens were read from, exposes them:
    /// some are in clear and its group or others may read it. Logs a
    /// warning when it does. A file that cannot be examined any more (it
    /// was read a moment ago) is not reported.
    pub fn exposure(&self, file: &Path) -> Option<ExposedTokens> {
        if self.clear_count() == 0 {
            return None;
        }
        let mode = others_may_read(file)?;
        let exposed = ExposedTokens {
            file: file.to_owned(),
            mode,
            clear: self.clear_count(),
        };
        tracing::warn!(file = %EchoPath(file), mode = format!("{mode:04o}"), clear = exposed.clear,
            "the tokens file holds tokens in clear that others can read");
        Some(exposed)
    }
}

/// The permission bits of `file` if its group or others may read it.
#[cfg(unix)]
fn others_may_read(file: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(file).ok()?.permissions().mode() & 0o7777;
    (mode & 0o077 != 0).then_some(mode)
}

/// Other systems' permissions are not modes; nothing is reported.
#[cfg(not(unix))]
fn others_may_read(_file: &Path) -> Option<u32> {
    None
}
