//! The password file, as libpq reads it (`~/.pgpass`, or `PGPASSFILE`, or
//! the `passfile` option): lines of `host:port:database:user:password`,
//! `*` matching anything, `\` escaping `:` and `\`, `#` starting a
//! comment. The first line that matches wins.
//!
//! libpq's rule on the file's mode holds: a file that group or others may
//! read, or that is not a plain file, is ignored, and the reason is kept
//! for the message of a connection that then lacks a password.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Longest password file read, in bytes.
pub const PASSFILE_LEN_MAX: u64 = 1 << 20;

/// What one connection's lookup is made of: libpq matches the host as
/// given (a socket directory matches `localhost` when it is the default
/// one), the port as a number's text, the database and the user.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lookup<'a> {
    pub(crate) host: &'a str,
    pub(crate) port: &'a str,
    pub(crate) dbname: &'a str,
    pub(crate) user: &'a str,
}

/// A password file read, or why it is not used.
#[derive(Clone)]
pub(crate) enum Passfile {
    /// Read: its lines.
    Read(Vec<Line>),
    /// None at the path (libpq goes on without one).
    Missing,
    /// Ignored, and why (its mode, its kind, a failed read).
    Ignored { file: PathBuf, reason: String },
}

/// One entry, fields unescaped; `None` is `*`.
#[derive(Clone)]
pub(crate) struct Line {
    fields: [Option<String>; 4],
    password: String,
}

impl std::fmt::Debug for Passfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Passfile::Read(lines) => write!(f, "Passfile({} lines)", lines.len()),
            Passfile::Missing => write!(f, "Passfile(missing)"),
            Passfile::Ignored { file, reason } => {
                write!(f, "Passfile({} ignored: {reason})", file.display())
            }
        }
    }
}

impl Passfile {
    /// Reads `file` under libpq's rules.
    pub(crate) fn read(file: &Path) -> Passfile {
        let ignored = |reason: String| Passfile::Ignored {
            file: file.to_owned(),
            reason,
        };
        let metadata = match std::fs::metadata(file) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Passfile::Missing,
            Err(error) => return ignored(error.to_string()),
        };
        if !metadata.is_file() {
            return ignored("it is not a plain file".to_owned());
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return ignored(format!(
                    "it has group or world access (mode {mode:04o}); permissions should be u=rw \
                     (0600) or less"
                ));
            }
        }
        if metadata.len() > PASSFILE_LEN_MAX {
            return ignored(format!("it is longer than {PASSFILE_LEN_MAX} bytes"));
        }
        let mut text = String::new();
        let read = std::fs::File::open(file)
            .and_then(|opened| opened.take(PASSFILE_LEN_MAX).read_to_string(&mut text));
        match read {
            Ok(_) => Passfile::Read(text.lines().filter_map(parse_line).collect()),
            Err(error) => ignored(error.to_string()),
        }
    }

    /// The password of the first line that matches `lookup`.
    pub(crate) fn password(&self, lookup: Lookup<'_>) -> Option<&str> {
        let Passfile::Read(lines) = self else {
            return None;
        };
        let wanted = [lookup.host, lookup.port, lookup.dbname, lookup.user];
        lines
            .iter()
            .find(|line| {
                line.fields
                    .iter()
                    .zip(wanted)
                    .all(|(field, value)| field.as_deref().is_none_or(|field| field == value))
            })
            .map(|line| line.password.as_str())
    }
}

/// A line's five fields; `None` for a comment, a blank line, or a line
/// with fewer than five (libpq skips those too).
fn parse_line(line: &str) -> Option<Line> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let mut fields = Vec::with_capacity(5);
    let mut field = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => field.push(chars.next().unwrap_or('\\')),
            ':' if fields.len() < 4 => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    if fields.len() < 4 {
        return None;
    }
    let wildcard = |field: String| (field != "*").then_some(field);
    let mut fields = fields.into_iter().map(wildcard);
    Some(Line {
        fields: [
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        ],
        password: field,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{Lookup, Passfile};

    fn lookup<'a>(host: &'a str, user: &'a str) -> Lookup<'a> {
        Lookup {
            host,
            port: "5432",
            dbname: "custody",
            user,
        }
    }

    // Guards against a password file read other than libpq reads it: the
    // first matching line wins, `*` matches anything, `\:` is a colon.
    #[test]
    fn the_first_matching_line_wins_with_wildcards_and_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:*:*:*:no\ndb1:5432:custody:payonce:first\n\
             *:*:*:payonce:pa\\:ss\\\\word\n*:*:*:*:last\nshort:line\n",
        )
        .unwrap();
        set_mode(&file, 0o600);
        let passfile = Passfile::read(&file);
        assert_eq!(passfile.password(lookup("db1", "payonce")), Some("first"));
        assert_eq!(
            passfile.password(lookup("db2", "payonce")),
            Some("pa:ss\\word")
        );
        assert_eq!(passfile.password(lookup("db2", "auditor")), Some("last"));
    }

    // Guards against libpq's rule on the file's mode being dropped: a file
    // others may read is ignored, and the reason kept.
    #[test]
    fn a_file_group_or_others_may_read_is_ignored_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(&file, "*:*:*:*:secret\n").unwrap();
        set_mode(&file, 0o640);
        let passfile = Passfile::read(&file);
        assert_eq!(passfile.password(lookup("db1", "payonce")), None);
        let Passfile::Ignored { reason, .. } = passfile else {
            panic!("{passfile:?}")
        };
        assert!(reason.contains("0640"), "{reason}");
        assert!(matches!(
            Passfile::read(&dir.path().join("missing")),
            Passfile::Missing
        ));
    }

    fn set_mode(file: &std::path::Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}
