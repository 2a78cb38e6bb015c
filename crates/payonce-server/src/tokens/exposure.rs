//! A tokens file that its group or others may get at while it holds tokens
//! in clear: the service starts, and says so.

use std::path::{Path, PathBuf};

use payonce_model::escape::EchoPath;

/// A tokens file that holds tokens in clear and whose mode gives its group
/// or others any access (mode & 0o077 is not 0, on unix).
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
        // "sha256:" is the tokens file's digest prefix; a test in the
        // parent module holds the two together.
        write!(
            f,
            "tokens file {} holds {} token(s) in clear and its mode {:04o} gives its group or \
             others access: write them as sha256: entries (printf %s \"$TOKEN\" | sha256sum), \
             or chmod 600 {}",
            EchoPath(&self.file),
            self.clear,
            self.mode,
            EchoPath(&self.file)
        )
    }
}

/// Whether `file`, read a moment ago with `clear` tokens in clear, exposes
/// them: some are in clear and its mode gives its group or others access.
/// A file that cannot be examined any more is not reported.
pub(super) fn exposed(file: &Path, clear: usize) -> Option<ExposedTokens> {
    if clear == 0 {
        return None;
    }
    let mode = group_or_other_access(file)?;
    Some(ExposedTokens {
        file: file.to_owned(),
        mode,
        clear,
    })
}

/// The permission bits of `file` if any of them gives its group or others
/// access (to read, write or run it).
#[cfg(unix)]
fn group_or_other_access(file: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(file).ok()?.permissions().mode() & 0o7777;
    (mode & 0o077 != 0).then_some(mode)
}

/// Other systems' permissions are not modes; nothing is reported.
#[cfg(not(unix))]
fn group_or_other_access(_file: &Path) -> Option<u32> {
    None
}
