//! How a process reaches the ledger's database: the hosts its connection
//! string names, which of them it may use, the settings and password each
//! connection takes, and how long it waits for one.
//!
//! A connection string may name several hosts in any form libpq reads
//! ([`crate::conninfo`]): the URL's authority
//! (`postgresql://h1:5432,h2:5432/custody`, socket directories
//! percent-encoded), its query (`?host=h1,h2&port=5432,5432`), or key=value
//! (`host=h1,h2 port=5432,5432 dbname=custody`). A process that writes (a
//! worker, an operator, the ledger's creator) connects only to the host
//! that accepts writes (`target_session_attrs=read-write`, whatever the
//! string says), so after a failover it finds the promoted standby among
//! the hosts it was given. Readers (audits) take the string as it is.
//!
//! Where the string is silent, libpq's environment fills it (`PGHOST`,
//! `PGUSER`, `PGPASSWORD`, `PGSSLMODE`, ...), then libpq's defaults: the
//! default socket directory, port 5432, the process's user, a database
//! named after the user. A password comes from the string, `PGPASSWORD`, or
//! the password file ([`crate::passfile`]), looked up for each host.
//!
//! A worker that lost its connection tries to connect again at its next
//! batch ([`crate::backoff`]). An attempt waits at most [`CONNECT_TIMEOUT`]
//! for each host, unless the string says (`connect_timeout`). On TCP, a connection whose
//! peer stopped answering (a partition) is found dead by keepalives
//! within [`DEAD_PEER_MAX`] without a request's time limit, so a server
//! that is slow but alive (a long lock wait, a synchronous standby) is
//! never given up on.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_postgres::Config;
use tokio_postgres::config::{ChannelBinding, Host, SslNegotiation, TargetSessionAttrs};

use crate::conninfo::{Conninfo, ConninfoError};
use crate::passfile::{Lookup, Passfile};
use crate::refusal::ConnectError;
use crate::tls::{Plan, SslMode, Tls};

/// How long a connection attempt waits for each host, unless the URL says
/// (`connect_timeout`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The wait before the first attempt to connect again after a connection
/// was lost, or after a failed attempt.
pub const RECONNECT_DELAY_MIN: Duration = Duration::from_millis(100);

/// The longest wait between two attempts to connect again.
pub const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(2);

/// How long a worker whose batch's commit answer was lost keeps asking
/// whether it landed (the server may be failing over) before it answers
/// that it cannot tell.
pub const LOOKUP_PATIENCE: Duration = Duration::from_secs(5);

/// TCP keepalives: the first probe after this long without traffic ...
const KEEPALIVE_IDLE: Duration = Duration::from_secs(1);
/// ... then one every this long ...
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
/// ... and the connection is dead after this many unanswered.
const KEEPALIVE_RETRIES: u32 = 3;

/// How long a connection on TCP lives on once its peer stopped answering:
/// data sent and never acknowledged for this long ends it, and so do
/// three unanswered keepalive probes after an idle second (this
/// bound covers both).
pub const DEAD_PEER_MAX: Duration = Duration::from_secs(5);

/// What a writer's session asks of the server, on every connection: a
/// transaction left idle (its worker cut off mid-batch) is ended after 5 s,
/// which lets the ledger-wide lock go for the other workers, and the
/// server finds a client that stopped answering by the same keepalives.
/// A batch is idle between its two round trips only while its worker
/// decides, milliseconds.
pub(crate) const WRITER_SETTINGS: &str = "SET idle_in_transaction_session_timeout = '5s'; \
     SET tcp_keepalives_idle = 1; SET tcp_keepalives_interval = 1; \
     SET tcp_keepalives_count = 3; SET tcp_user_timeout = 5000";

/// Which of the URL's hosts a connection may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The one that accepts writes: a worker's, an operator's.
    Primary,
    /// Whichever the URL says (its own `target_session_attrs`): a reader's.
    AsGiven,
}

/// Most hosts one connection string names.
pub const HOSTS_MAX: usize = 64;

/// libpq's default port.
const PORT_DEFAULT: u16 = 5432;

/// The socket directories libpq builds default to: Debian's, then the
/// upstream one.
const SOCKET_DIRS: [&str; 2] = ["/var/run/postgresql", "/tmp"];

/// Where a process's libpq settings come from: its environment variables
/// and its home directory. Tests give their own.
pub struct Environment {
    variables: Box<Variables>,
}

/// Reads one environment variable.
type Variables = dyn Fn(&str) -> Option<String> + Send + Sync;

impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Environment").finish_non_exhaustive()
    }
}

impl Environment {
    /// This process's environment.
    pub fn process() -> Environment {
        Environment {
            variables: Box::new(|name| std::env::var(name).ok()),
        }
    }

    /// Only these variables (`HOME` among them, for `~/.pgpass` and
    /// `~/.postgresql/`).
    pub fn of<I, K, V>(variables: I) -> Environment
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let variables: Vec<(String, String)> = variables
            .into_iter()
            .map(|(name, value)| (name.into(), value.into()))
            .collect();
        Environment {
            variables: Box::new(move |wanted| {
                variables
                    .iter()
                    .find(|(name, _)| name == wanted)
                    .map(|(_, value)| value.clone())
            }),
        }
    }

    fn get(&self, name: &str) -> Option<String> {
        (self.variables)(name).filter(|value| !value.is_empty())
    }

    fn home(&self) -> Option<PathBuf> {
        self.get("HOME").map(PathBuf::from)
    }
}

/// One host to try, as the connection string names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) host: Host,
    pub(crate) hostaddr: Option<IpAddr>,
    pub(crate) port: u16,
}

impl Endpoint {
    /// The host's name, as messages and the password file give it.
    pub(crate) fn name(&self) -> String {
        match &self.host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        }
    }

    /// The host as the password file matches it: the default socket
    /// directory is `localhost`.
    fn passfile_host(&self) -> String {
        match &self.host {
            Host::Unix(path) if path == Path::new(SOCKET_DIRS[0]) => "localhost".to_owned(),
            _ => self.name(),
        }
    }
}

/// Where a connection's password comes from.
#[derive(Debug)]
enum Password {
    /// The string or `PGPASSWORD`.
    Given(Secret),
    /// The password file, for each host.
    File(Passfile),
}

/// A password: never printed.
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "***")
    }
}

/// A connection string resolved: the hosts to try in order, the settings
/// every connection takes, the password and the TLS.
#[derive(Debug)]
pub(crate) struct Reach {
    endpoints: Vec<Endpoint>,
    /// Every setting but the host, the password and the TLS mode.
    config: Config,
    user: String,
    dbname: String,
    password: Password,
    pub(crate) tls: Tls,
}

impl Reach {
    /// Resolves `url` in this process's environment, for `target`.
    pub(crate) fn new(url: &str, target: Target) -> Result<Reach, ConnectError> {
        Reach::in_environment(url, target, &Environment::process())
    }

    /// Resolves `url` in `environment`, for `target`.
    pub(crate) fn in_environment(
        url: &str,
        target: Target,
        environment: &Environment,
    ) -> Result<Reach, ConnectError> {
        let conninfo = Conninfo::parse(url)
            .map_err(ConnectError::Conninfo)?
            .with_environment(&|name| environment.get(name));
        let home = environment.home();
        let tls = Tls::new(&conninfo, home.as_deref())?;
        let user = conninfo
            .get("user")
            .map(str::to_owned)
            .or_else(|| environment.get("USER"))
            .or_else(|| environment.get("LOGNAME"))
            .ok_or(ConnectError::NoUser)?;
        let dbname = conninfo.get("dbname").unwrap_or(&user).to_owned();
        let password = match conninfo.get("password") {
            Some(password) => Password::Given(Secret(password.to_owned())),
            None => Password::File(Passfile::read(&passfile_path(&conninfo, home.as_deref()))),
        };
        let mut config = settings(&conninfo, tls.mode).map_err(ConnectError::Conninfo)?;
        config.user(&user).dbname(&dbname);
        if target == Target::Primary {
            config.target_session_attrs(TargetSessionAttrs::ReadWrite);
        }
        Ok(Reach {
            endpoints: endpoints(&conninfo).map_err(ConnectError::Conninfo)?,
            config,
            user,
            dbname,
            password,
            tls,
        })
    }

    /// The hosts to try, in order.
    pub(crate) fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The user every connection logs in as.
    pub(crate) fn user(&self) -> &str {
        &self.user
    }

    /// The settings of one attempt on `endpoint` under `plan`, and why the
    /// password file gave no password, if it was ignored.
    pub(crate) fn config_for(&self, endpoint: &Endpoint, plan: Plan) -> (Config, Option<String>) {
        let mut config = self.config.clone();
        match &endpoint.host {
            Host::Tcp(name) => config.host(name),
            Host::Unix(path) => config.host_path(path),
        };
        if let Some(hostaddr) = endpoint.hostaddr {
            config.hostaddr(hostaddr);
        }
        config.port(endpoint.port).ssl_mode(plan.ssl_mode());
        let mut ignored = None;
        match &self.password {
            Password::Given(Secret(password)) => {
                config.password(password);
            }
            Password::File(passfile) => {
                let port = endpoint.port.to_string();
                let host = endpoint.passfile_host();
                let lookup = Lookup {
                    host: &host,
                    port: &port,
                    dbname: &self.dbname,
                    user: &self.user,
                };
                if let Some(password) = passfile.password(lookup) {
                    config.password(password);
                }
                if let Passfile::Ignored { file, reason } = passfile {
                    ignored = Some(format!("{}: {reason}", file.display()));
                }
            }
        }
        (config, ignored)
    }
}

/// `passfile`, `PGPASSFILE`, or `~/.pgpass`.
fn passfile_path(conninfo: &Conninfo, home: Option<&Path>) -> PathBuf {
    match (conninfo.get("passfile"), home) {
        (Some(file), _) => PathBuf::from(file),
        (None, Some(home)) => home.join(".pgpass"),
        (None, None) => PathBuf::from(".pgpass"),
    }
}

/// The hosts `conninfo` names, each with its port and address.
fn endpoints(conninfo: &Conninfo) -> Result<Vec<Endpoint>, ConninfoError> {
    let list = |option| {
        conninfo
            .get(option)
            .map(|value| value.split(',').collect::<Vec<_>>())
    };
    let hostaddrs = list("hostaddr").unwrap_or_default();
    let hosts = list("host").unwrap_or_else(|| vec![""; hostaddrs.len().max(1)]);
    let ports = list("port").unwrap_or_else(|| vec![""]);
    if hosts.len() > HOSTS_MAX {
        return Err(ConninfoError::Value {
            option: "host",
            value: format!("{} hosts", hosts.len()),
            expected: "at most 64 hosts",
        });
    }
    let counts_match = |count: usize| count == hosts.len() || count <= 1;
    if !counts_match(ports.len()) || !(hostaddrs.is_empty() || hostaddrs.len() == hosts.len()) {
        return Err(ConninfoError::Conflict {
            rule: format!(
                "{} hosts, {} ports and {} hostaddrs: give one port for all, or one per host, \
                 and one hostaddr per host if any",
                hosts.len(),
                ports.len(),
                hostaddrs.len()
            ),
        });
    }
    let mut endpoints = Vec::with_capacity(hosts.len());
    for (index, host) in hosts.iter().enumerate() {
        let port = ports.get(index).or(ports.first()).copied().unwrap_or("");
        endpoints.push(Endpoint {
            host: host_of(host, hostaddrs.get(index).copied()),
            hostaddr: hostaddrs
                .get(index)
                .filter(|address| !address.is_empty())
                .map(|address| parse_value("hostaddr", address, "an IP address"))
                .transpose()?,
            port: if port.is_empty() {
                PORT_DEFAULT
            } else {
                parse_value("port", port, "a port number")?
            },
        });
    }
    Ok(endpoints)
}

/// A host entry: a socket directory if it starts with `/`, the default
/// socket directory if empty (unless an address is given), a name or
/// address otherwise.
fn host_of(host: &str, hostaddr: Option<&str>) -> Host {
    if host.starts_with('/') {
        return Host::Unix(PathBuf::from(host));
    }
    if host.is_empty() {
        if let Some(address) = hostaddr.filter(|address| !address.is_empty()) {
            return Host::Tcp(address.to_owned());
        }
        let directory = SOCKET_DIRS
            .iter()
            .find(|directory| Path::new(directory).is_dir())
            .unwrap_or(&SOCKET_DIRS[0]);
        return Host::Unix(PathBuf::from(directory));
    }
    Host::Tcp(host.to_owned())
}

fn parse_value<T: std::str::FromStr>(
    option: &'static str,
    value: &str,
    expected: &'static str,
) -> Result<T, ConninfoError> {
    value.trim().parse().map_err(|_| ConninfoError::Value {
        option,
        value: value.to_owned(),
        expected,
    })
}

/// Every setting `conninfo` gives but the hosts, the password and the TLS
/// files, with this crate's defaults where it is silent.
fn settings(conninfo: &Conninfo, mode: SslMode) -> Result<Config, ConninfoError> {
    let mut config = Config::new();
    let value = |option| conninfo.get(option);
    if let Some(name) = value("application_name").or(value("fallback_application_name")) {
        config.application_name(name);
    }
    if let Some(options) = value("options") {
        config.options(options);
    }
    match value("connect_timeout")
        .map(|text| parse_value::<u64>("connect_timeout", text, "seconds"))
    {
        // libpq: zero waits forever, and less than two seconds is two.
        Some(Ok(0)) => {}
        Some(seconds) => {
            config.connect_timeout(Duration::from_secs(seconds?.max(2)));
        }
        None => {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
    }
    config.target_session_attrs(match value("target_session_attrs").unwrap_or("any") {
        "any" => TargetSessionAttrs::Any,
        "read-write" => TargetSessionAttrs::ReadWrite,
        "read-only" => TargetSessionAttrs::ReadOnly,
        other => {
            return Err(unsupported(
                "target_session_attrs",
                other,
                "any, read-write or read-only",
            ));
        }
    });
    config.channel_binding(match value("channel_binding").unwrap_or("prefer") {
        "disable" => ChannelBinding::Disable,
        "prefer" => ChannelBinding::Prefer,
        "require" => ChannelBinding::Require,
        other => {
            return Err(unsupported(
                "channel_binding",
                other,
                "disable, prefer or require",
            ));
        }
    });
    config.ssl_negotiation(negotiation(value("sslnegotiation"), mode)?);
    check_accepted(conninfo)?;
    keepalives(conninfo, &mut config)?;
    Ok(config)
}

fn unsupported(option: &'static str, value: &str, expected: &'static str) -> ConninfoError {
    ConninfoError::Value {
        option,
        value: value.to_owned(),
        expected,
    }
}

/// `sslnegotiation`, under libpq's rule that `direct` takes a mode with no
/// plain fallback.
fn negotiation(value: Option<&str>, mode: SslMode) -> Result<SslNegotiation, ConninfoError> {
    match value.unwrap_or("postgres") {
        "postgres" => Ok(SslNegotiation::Postgres),
        "direct"
            if matches!(
                mode,
                SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
            ) =>
        {
            Ok(SslNegotiation::Direct)
        }
        "direct" => Err(ConninfoError::Conflict {
            rule: format!(
                "weak sslmode \"{}\" may not be used with sslnegotiation=direct (use \"require\", \
                 \"verify-ca\", or \"verify-full\")",
                mode.as_str()
            ),
        }),
        other => Err(unsupported("sslnegotiation", other, "postgres or direct")),
    }
}

/// Options payonce takes only at the values that change nothing here:
/// no GSSAPI, no load balancing (a writer wants the one primary), UTF-8.
fn check_accepted(conninfo: &Conninfo) -> Result<(), ConninfoError> {
    let rules: [(&'static str, &[&str], &'static str); 5] = [
        (
            "gssencmode",
            &["disable", "prefer"],
            "disable or prefer (payonce has no GSSAPI)",
        ),
        (
            "load_balance_hosts",
            &["disable"],
            "disable (hosts are tried in order)",
        ),
        ("client_encoding", &["UTF8", "utf8", "auto"], "UTF8"),
        (
            "sslcompression",
            &["0", "1"],
            "0 or 1 (TLS compression is never used)",
        ),
        ("sslsni", &["1"], "1 (the host's name is always sent)"),
    ];
    for (option, accepted, expected) in rules {
        if let Some(value) = conninfo
            .get(option)
            .filter(|value| !accepted.contains(value))
        {
            return Err(unsupported(option, value, expected));
        }
    }
    Ok(())
}

/// TCP keepalives and the user timeout: what the string gives, this
/// crate's (which find a dead peer within [`DEAD_PEER_MAX`]) otherwise.
fn keepalives(conninfo: &Conninfo, config: &mut Config) -> Result<(), ConninfoError> {
    let seconds = |option: &'static str, default: Duration| match conninfo.get(option) {
        Some(text) => parse_value::<u64>(option, text, "seconds").map(Duration::from_secs),
        None => Ok(default),
    };
    let on = conninfo.get("keepalives").is_none_or(|value| value != "0");
    config
        .keepalives(on)
        .keepalives_idle(seconds("keepalives_idle", KEEPALIVE_IDLE)?)
        .keepalives_interval(seconds("keepalives_interval", KEEPALIVE_INTERVAL)?)
        .keepalives_retries(match conninfo.get("keepalives_count") {
            Some(text) => parse_value("keepalives_count", text, "a count")?,
            None => KEEPALIVE_RETRIES,
        });
    let user_timeout = match conninfo.get("tcp_user_timeout") {
        Some(text) => Duration::from_millis(parse_value("tcp_user_timeout", text, "milliseconds")?),
        None => DEAD_PEER_MAX,
    };
    config.tcp_user_timeout(user_timeout);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use tokio_postgres::config::{Host, TargetSessionAttrs};

    use super::{CONNECT_TIMEOUT, Endpoint, Environment, Reach, Target};
    use crate::refusal::ConnectError;
    use crate::tls::Plan;

    fn reach(url: &str, target: Target) -> Result<Reach, ConnectError> {
        Reach::in_environment(url, target, &Environment::of([("USER", "payonce")]))
    }

    fn unix(path: &str, port: u16) -> Endpoint {
        Endpoint {
            host: Host::Unix(path.into()),
            hostaddr: None,
            port,
        }
    }

    // Guards against a form of libpq's that names several hosts being read
    // as one host, or refused: the authority, the query and key=value.
    #[test]
    fn every_form_names_several_hosts_and_a_writer_takes_only_the_one_that_accepts_writes() {
        let forms = [
            "postgresql://%2Ftmp%2Fa:5433,%2Ftmp%2Fb:5434/custody?user=payonce",
            "postgresql:///custody?host=/tmp/a,/tmp/b&port=5433,5434&user=payonce",
            "host=/tmp/a,/tmp/b port=5433,5434 dbname=custody user=payonce",
        ];
        for url in forms {
            let primary = reach(url, Target::Primary).unwrap();
            assert_eq!(
                primary.endpoints(),
                [unix("/tmp/a", 5433), unix("/tmp/b", 5434)],
                "{url}"
            );
            let (config, _) = primary.config_for(&primary.endpoints()[0], Plan::Plain);
            assert_eq!(
                config.get_target_session_attrs(),
                TargetSessionAttrs::ReadWrite
            );
            assert_eq!(config.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
            assert_eq!(config.get_dbname(), Some("custody"));
            let reader = reach(url, Target::AsGiven).unwrap();
            let (config, _) = reader.config_for(&reader.endpoints()[1], Plan::Plain);
            assert_eq!(config.get_target_session_attrs(), TargetSessionAttrs::Any);
        }
        let timeout = reach("host=a,b connect_timeout=7", Target::Primary).unwrap();
        let (config, _) = timeout.config_for(&timeout.endpoints()[1], Plan::Plain);
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(7)));
        assert_eq!(config.get_hosts(), [Host::Tcp("b".into())]);
        assert_eq!(config.get_ports(), [5432]);
    }

    // Guards against a count of ports that fits no host being guessed at.
    #[test]
    fn ports_that_fit_neither_one_for_all_nor_one_per_host_are_refused() {
        let error = reach("host=a,b,c port=1,2", Target::Primary).unwrap_err();
        assert!(error.to_string().contains("3 hosts, 2 ports"), "{error}");
    }

    // Guards against the environment winning over the string, or being
    // ignored where the string is silent.
    #[test]
    fn the_environment_fills_what_the_string_leaves_out_and_never_more() {
        let environment = Environment::of([
            ("PGHOST", "envhost"),
            ("PGPORT", "6000"),
            ("PGUSER", "envuser"),
            ("PGDATABASE", "envdb"),
            ("PGPASSWORD", "envsecret"),
        ]);
        let silent = Reach::in_environment("", Target::AsGiven, &environment).unwrap();
        let (config, _) = silent.config_for(&silent.endpoints()[0], Plan::Plain);
        assert_eq!(config.get_hosts(), [Host::Tcp("envhost".into())]);
        assert_eq!(config.get_ports(), [6000]);
        assert_eq!(config.get_user(), Some("envuser"));
        assert_eq!(config.get_dbname(), Some("envdb"));
        assert_eq!(config.get_password(), Some(&b"envsecret"[..]));
        let given = Reach::in_environment(
            "postgresql://alice:urlsecret@db:7000/custody",
            Target::AsGiven,
            &environment,
        )
        .unwrap();
        let (config, _) = given.config_for(&given.endpoints()[0], Plan::Plain);
        assert_eq!(config.get_hosts(), [Host::Tcp("db".into())]);
        assert_eq!(config.get_user(), Some("alice"));
        assert_eq!(config.get_password(), Some(&b"urlsecret"[..]));
        assert!(!format!("{given:?}").contains("urlsecret"));
    }
}
