//! Connection strings as libpq reads them: `postgresql://` URLs (hosts in
//! the authority, or in the query as `?host=a,b&port=p1,p2`) and
//! key=value strings (`host=a,b port=p1,p2 sslmode=verify-full`), with
//! libpq's environment variables where the string is silent.
//!
//! A [`Conninfo`] is the options a string gives, by libpq's keyword; what
//! they mean for a connection (its hosts, its TLS, its password) is
//! [`crate::reach`]'s. An option libpq has and payonce does not take
//! (`service`, `sslcrl`, ...) is refused by name rather than ignored: a
//! connection that silently drops a security option is not the one its
//! operator asked for.
//!
//! A conninfo never prints a password: [`Conninfo::redacted`] is what
//! messages show.

mod error;
mod pairs;
mod url;

use std::collections::BTreeMap;
use std::fmt;

pub use self::error::ConninfoError;

/// Longest connection string read, in bytes.
pub const CONNINFO_LEN_MAX: usize = 16 * 1024;

/// A libpq option payonce takes, and the environment variable that gives
/// it where the string is silent.
struct Keyword {
    name: &'static str,
    env: Option<&'static str>,
}

const fn keyword(name: &'static str, env: Option<&'static str>) -> Keyword {
    Keyword { name, env }
}

/// Every option payonce takes, with libpq's environment variables.
const KEYWORDS: &[Keyword] = &[
    keyword("host", Some("PGHOST")),
    keyword("hostaddr", Some("PGHOSTADDR")),
    keyword("port", Some("PGPORT")),
    keyword("dbname", Some("PGDATABASE")),
    keyword("user", Some("PGUSER")),
    keyword("password", Some("PGPASSWORD")),
    keyword("passfile", Some("PGPASSFILE")),
    keyword("connect_timeout", Some("PGCONNECT_TIMEOUT")),
    keyword("application_name", Some("PGAPPNAME")),
    keyword("fallback_application_name", None),
    keyword("options", Some("PGOPTIONS")),
    keyword("sslmode", Some("PGSSLMODE")),
    keyword("requiressl", Some("PGREQUIRESSL")),
    keyword("sslrootcert", Some("PGSSLROOTCERT")),
    keyword("sslcert", Some("PGSSLCERT")),
    keyword("sslkey", Some("PGSSLKEY")),
    keyword("sslnegotiation", Some("PGSSLNEGOTIATION")),
    keyword("sslsni", Some("PGSSLSNI")),
    keyword("sslcompression", Some("PGSSLCOMPRESSION")),
    keyword("gssencmode", Some("PGGSSENCMODE")),
    keyword("channel_binding", Some("PGCHANNELBINDING")),
    keyword("target_session_attrs", Some("PGTARGETSESSIONATTRS")),
    keyword("load_balance_hosts", Some("PGLOADBALANCEHOSTS")),
    keyword("client_encoding", Some("PGCLIENTENCODING")),
    keyword("keepalives", None),
    keyword("keepalives_idle", None),
    keyword("keepalives_interval", None),
    keyword("keepalives_count", None),
    keyword("tcp_user_timeout", None),
];

/// libpq's options payonce does not take: refused by name.
const NOT_TAKEN: &[&str] = &[
    "service",
    "servicefile",
    "sslpassword",
    "sslcrl",
    "sslcrldir",
    "sslcertmode",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "sslkeylogfile",
    "requirepeer",
    "require_auth",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "replication",
    "min_protocol_version",
    "max_protocol_version",
];

/// The options of a connection string, by libpq keyword.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Conninfo {
    options: BTreeMap<&'static str, String>,
}

/// The password stays out.
impl fmt::Debug for Conninfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Conninfo({})", self.redacted())
    }
}

/// Whether `text` is a connection string rather than a directory: a
/// `postgres://` or `postgresql://` URL, or key=value pairs whose first key
/// is an option libpq has.
pub(crate) fn is_conninfo(text: &str) -> bool {
    if url_rest(text).is_some() {
        return true;
    }
    let first = text.trim_start();
    first.split_once('=').is_some_and(|(key, _)| {
        let key = key.trim_end();
        KEYWORDS.iter().any(|known| known.name == key) || NOT_TAKEN.contains(&key)
    })
}

fn url_rest(text: &str) -> Option<&str> {
    ["postgresql://", "postgres://"]
        .iter()
        .find_map(|prefix| text.strip_prefix(prefix))
}

impl Conninfo {
    /// Reads `text`, a URL or key=value pairs, as libpq does.
    pub fn parse(text: &str) -> Result<Conninfo, ConninfoError> {
        if text.len() > CONNINFO_LEN_MAX {
            return Err(ConninfoError::TooLong {
                len: text.len(),
                max: CONNINFO_LEN_MAX,
            });
        }
        let pairs = match url_rest(text) {
            Some(rest) => url::parse(rest, text.len() - rest.len())?,
            None => pairs::parse(text)?,
        };
        let mut conninfo = Conninfo::default();
        for (option, value) in pairs {
            conninfo.set(&option, value)?;
        }
        Ok(conninfo)
    }

    /// Sets `option` to `value`, the last value of an option given twice
    /// winning, as in libpq.
    fn set(&mut self, option: &str, value: String) -> Result<(), ConninfoError> {
        let Some(known) = KEYWORDS.iter().find(|known| known.name == option) else {
            if NOT_TAKEN.contains(&option) {
                return Err(ConninfoError::NotTaken {
                    option: option.to_owned(),
                });
            }
            return Err(ConninfoError::Unknown {
                option: option.to_owned(),
            });
        };
        self.options.insert(known.name, value);
        Ok(())
    }

    /// The value of `option`, if the string or the environment gave one.
    pub fn get(&self, option: &str) -> Option<&str> {
        self.options.get(option).map(String::as_str)
    }

    /// Whether the string or the environment gave `option`.
    pub fn has(&self, option: &str) -> bool {
        self.options.contains_key(option)
    }

    /// Fills every option the string is silent on from its libpq
    /// environment variable (`PGHOST`, `PGPASSWORD`, `PGSSLMODE`, ...), as
    /// `env` reads them.
    pub fn with_environment(mut self, env: &dyn Fn(&str) -> Option<String>) -> Conninfo {
        for known in KEYWORDS {
            let Some(variable) = known.env else { continue };
            if self.options.contains_key(known.name) {
                continue;
            }
            if let Some(value) = env(variable).filter(|value| !value.is_empty()) {
                self.options.insert(known.name, value);
            }
        }
        self
    }

    /// The options as key=value pairs, the password shown as `***`: what a
    /// message says of a connection string.
    pub fn redacted(&self) -> String {
        let shown: Vec<String> = self
            .options
            .iter()
            .map(|(name, value)| {
                if *name == "password" {
                    format!("{name}=***")
                } else {
                    format!("{name}={}", quoted(value))
                }
            })
            .collect();
        shown.join(" ")
    }
}

/// `value` as a key=value string writes it: bare when it can be.
fn quoted(value: &str) -> String {
    let bare = !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c == '\'' || c == '\\');
    if bare {
        return value.to_owned();
    }
    let mut text = String::from("'");
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            text.push('\\');
        }
        text.push(c);
    }
    text.push('\'');
    text
}

#[cfg(test)]
mod tests;
