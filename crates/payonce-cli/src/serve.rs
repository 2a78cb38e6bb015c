//! `payonce serve`: its command line, and the ledger it opens. The
//! service itself is the `payonce_server` crate.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use payonce::{Config, Ledger};
use payonce_model::escape::Escaped;
use payonce_server::rail::{HttpRail, HttpRailConfig, Rail, SimRail, SimRailConfig};
use payonce_server::server::{CONNECTIONS_MAX, HEADER_READ_TIME_MAX, HEADERS_LEN_MAX, Limits};
use payonce_server::{
    Notice, ServeError, ServerTls, ServerTlsFiles, Service, Signals, Tokens, Transport,
};

use crate::bytes::parse_memory_budget;
use crate::env::Status;
use crate::error::CliError;

/// `payonce serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// The embedded file ledger's directory.
    #[arg(
        long,
        required_unless_present = "postgres",
        conflicts_with = "postgres"
    )]
    pub dir: Option<PathBuf>,
    /// Create a new ledger: in --dir, which must be empty or missing, or in
    /// --postgres's database, whose schema is applied (`payonce migrate`) and
    /// which holds no ledger yet. Without it, the ledger must exist: a lost
    /// log is never taken for a new one.
    #[arg(long)]
    pub init: bool,
    /// Run as one worker of the PostgreSQL ledger at this URL, beside others.
    #[arg(long, value_name = "URL", requires = "worker")]
    pub postgres: Option<String>,
    /// With --postgres: this worker's name, the same across its restarts
    /// (api-3); one process at a time runs under it.
    #[arg(long, value_name = "NAME", requires = "postgres")]
    pub worker: Option<String>,
    /// Where to listen. An address other than loopback needs --tls-cert (or --insecure-http).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The tokens file: TOML, a table of clients and one of operators, each name = "token"
    /// or name = "sha256:HEX" (the token's SHA-256). SIGHUP rereads it.
    #[arg(long, value_name = "FILE")]
    pub tokens: PathBuf,
    /// Serve HTTPS only, with this PEM certificate chain (the server's own first). SIGHUP
    /// rereads it, its key and --tls-client-ca.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert, in PEM.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require a client certificate signed by a CA in this PEM file (mutual TLS).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Allow plain HTTP on an address other than loopback (behind a proxy that terminates
    /// TLS): bearer tokens cross the network in clear.
    #[arg(long, conflicts_with = "tls_cert")]
    pub insecure_http: bool,
    /// Send through an HTTP rail client at this URL instead of the simulated rail: https://,
    /// or http:// to loopback. Proxy variables are ignored. A URL that holds a password or a
    /// key is better given in the environment, where ps does not show it.
    #[arg(
        long,
        value_name = "URL",
        env = "PAYONCE_RAIL_URL",
        hide_env_values = true,
        conflicts_with = "rail_log"
    )]
    pub rail_url: Option<String>,
    /// Check the HTTPS rail's certificate against the CAs in this PEM file only, instead of
    /// the system's. SIGHUP rereads it and the client certificate.
    #[arg(long, value_name = "FILE", requires = "rail_url")]
    pub rail_ca: Option<PathBuf>,
    /// Show the HTTPS rail this client certificate chain, in PEM (mutual TLS).
    #[arg(long, value_name = "FILE", requires_all = ["rail_key", "rail_url"])]
    pub rail_cert: Option<PathBuf>,
    /// The private key of --rail-cert, in PEM.
    #[arg(long, value_name = "FILE", requires = "rail_cert")]
    pub rail_key: Option<PathBuf>,
    /// Allow a plain http:// rail on a host other than loopback: withdrawals cross the
    /// network in clear.
    #[arg(long, requires = "rail_url")]
    pub rail_insecure_http: bool,
    /// How long the HTTP rail may take to answer before the outcome is unknown.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub rail_timeout_ms: u64,
    /// The simulated rail appends one JSON line per transfer here
    /// ({"withdrawal","key","reference"}), synced before it answers.
    #[arg(long, value_name = "FILE")]
    pub rail_log: Option<PathBuf>,
    /// The simulated rail's latency per send.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub rail_latency_ms: u64,
    /// The share of simulated sends refused cleanly, 0 to 1.
    #[arg(long, value_name = "RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub rail_refuse_rate: f64,
    /// The share of simulated sends that leave but whose answer is lost, 0 to 1.
    #[arg(long, value_name = "RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub rail_unknown_rate: f64,
    /// Seeds the simulated rail's draws.
    #[arg(long, value_name = "SEED", default_value_t = 1)]
    pub rail_seed: u64,
    /// Connections served at once.
    #[arg(long, value_name = "N", default_value_t = CONNECTIONS_MAX)]
    pub connections_max: usize,
    /// Bytes of request line and headers accepted (at least 8192).
    #[arg(long, value_name = "BYTES", default_value_t = HEADERS_LEN_MAX)]
    pub headers_len_max: usize,
    /// Longest a request may take before it is answered 503.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub request_timeout_ms: u64,
    /// Memory for the ledger's state, whatever its history: live keys, the cache of settled
    /// pairs read back, and filters (64MiB, 1GiB; at least 4MiB). Settled pairs beyond it
    /// stay on disk or in the database.
    #[arg(long, value_name = "BYTES", default_value = "256MiB", value_parser = parse_memory_budget)]
    pub memory_budget: u64,
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if (0.0..=1.0).contains(&rate) => Ok(rate),
        _ => Err(format!(
            "{} is not a rate from 0 to 1",
            crate::escape::Echo(text)
        )),
    }
}

/// The PostgreSQL URL and the rail's URL may hold passwords: the one is
/// shown redacted, the other not at all.
impl std::fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeArgs")
            .field("dir", &self.dir)
            .field(
                "postgres",
                &self.postgres.as_deref().map(payonce_postgres::redacted),
            )
            .field("worker", &self.worker)
            .field("listen", &self.listen)
            .field("tokens", &self.tokens)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("tls_client_ca", &self.tls_client_ca)
            .field("rail_url", &self.rail_url.is_some())
            .field("rail_ca", &self.rail_ca)
            .field("rail_cert", &self.rail_cert)
            .field("rail_key", &self.rail_key)
            .finish_non_exhaustive()
    }
}

impl ServeArgs {
    /// The service's limits.
    pub fn limits(&self) -> Limits {
        Limits {
            connections_max: self.connections_max,
            headers_len_max: self.headers_len_max,
            header_read_time_max: HEADER_READ_TIME_MAX,
            request_time_max: Duration::from_millis(self.request_timeout_ms),
        }
    }

    /// The listener's TLS with --tls-cert, its files read now.
    pub fn tls(&self) -> Result<Option<ServerTls>, ServeError> {
        let (Some(certificate), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = ServerTlsFiles {
            certificate: certificate.clone(),
            key: key.clone(),
            client_ca: self.tls_client_ca.clone(),
        };
        ServerTls::load(files).map(Some).map_err(ServeError::Tls)
    }

    /// The HTTP rail adapter with --rail-url (its rules checked and its
    /// TLS files read now), or `None` without it. Needs a runtime (the HTTP
    /// client starts on one).
    pub fn http_rail(&self) -> Result<Option<HttpRail>, ServeError> {
        let Some(url) = &self.rail_url else {
            return Ok(None);
        };
        let config = HttpRailConfig {
            ca: self.rail_ca.clone(),
            client_certificate: self.rail_cert.clone(),
            client_key: self.rail_key.clone(),
            insecure_http: self.rail_insecure_http,
            ..HttpRailConfig::new(url, Duration::from_millis(self.rail_timeout_ms))
        };
        let rail = HttpRail::with_config(config).map_err(ServeError::HttpRail)?;
        Ok(Some(rail))
    }

    /// The rail: the HTTP adapter with --rail-url, the simulated one
    /// otherwise. Needs a runtime (the HTTP client starts on one).
    pub fn rail(&self) -> Result<Arc<dyn Rail>, ServeError> {
        if let Some(rail) = self.http_rail()? {
            return Ok(Arc::new(rail));
        }
        self.sim_rail()
    }

    /// The simulated rail, as its flags say.
    fn sim_rail(&self) -> Result<Arc<dyn Rail>, ServeError> {
        if self.rail_refuse_rate + self.rail_unknown_rate > 1.0 {
            return Err(ServeError::Rail(
                "--rail-refuse-rate and --rail-unknown-rate add up to more than 1".into(),
            ));
        }
        let config = SimRailConfig {
            latency: Duration::from_millis(self.rail_latency_ms),
            refuse_rate: self.rail_refuse_rate,
            unknown_rate: self.rail_unknown_rate,
            seed: self.rail_seed,
            log: self.rail_log.clone(),
        };
        let rail = SimRail::new(config)
            .map_err(|error| ServeError::Rail(format!("the rail log: {error}")))?;
        Ok(Arc::new(rail))
    }
}

/// `payonce serve`'s refusals are a user's to fix, but for the operating
/// system's.
impl From<ServeError> for CliError {
    fn from(error: ServeError) -> CliError {
        match error {
            ServeError::Io { doing, error } => CliError::Io { doing, error },
            other => CliError::Usage {
                message: other.to_string(),
            },
        }
    }
}

/// Opens (or with `--init` creates) the ledger: in `--dir`, or as
/// `--worker` of the PostgreSQL ledger at `--postgres`.
fn open_ledger(args: &ServeArgs) -> Result<Ledger, CliError> {
    let Some(dir) = &args.dir else {
        return open_worker(args);
    };
    let opened = if args.init {
        Ledger::init_with(dir, config(args))
    } else {
        Ledger::open_with(dir, config(args))
    };
    opened.map_err(|error| CliError::from_ledger(dir, error))
}

/// Opens the PostgreSQL ledger of `--postgres` as `--worker`, creating it
/// first with `--init`.
fn open_worker(args: &ServeArgs) -> Result<Ledger, CliError> {
    let (Some(url), Some(worker)) = (&args.postgres, &args.worker) else {
        return Err(CliError::Usage {
            message: "give --dir DIR, or --postgres URL with --worker NAME".to_owned(),
        });
    };
    let shown = crate::postgres_url::checked(url)?;
    if args.init {
        let created = payonce_postgres::init(url, config(args));
        drop(created.map_err(|error| CliError::from_ledger(&shown, error))?);
    }
    payonce_postgres::open(url, worker, config(args))
        .map_err(|error| CliError::from_ledger(&shown, error))
}

/// The ledger's configuration: the defaults, under `--memory-budget`.
fn config(args: &ServeArgs) -> Config {
    Config {
        memory_budget: args.memory_budget,
        ..Config::default()
    }
}

/// Everything that can be refused, checked before the ledger is opened so
/// that a refusal writes nothing: the tokens file (and a warning on `err`
/// when others can read its tokens), the listener's TLS and where it may
/// listen in clear (a warning on `err` when in clear beyond loopback), the
/// rail and its TLS (said on `err`, by its host alone).
fn checked_service(
    args: &ServeArgs,
    runtime: &tokio::runtime::Runtime,
    err: &mut dyn Write,
) -> Result<Service, CliError> {
    let tokens = Tokens::read(&args.tokens).map_err(ServeError::Tokens)?;
    if let Some(exposed) = tokens.exposure(&args.tokens) {
        writeln!(err, "payonce serve: warning: {exposed}").map_err(CliError::output)?;
    }
    let tls = args.tls()?;
    let rail: Arc<dyn Rail> = match runtime.block_on(async { args.http_rail() })? {
        Some(http) => {
            writeln!(err, "payonce serve: sending through {http}").map_err(CliError::output)?;
            Arc::new(http)
        }
        None => args.sim_rail()?,
    };
    let service = Service {
        listen: args.listen,
        tokens,
        tokens_file: Some(args.tokens.clone()),
        rail,
        limits: args.limits(),
        tls,
        insecure_http: args.insecure_http,
    };
    if service.check()? == Transport::InsecureHttp {
        writeln!(
            err,
            "payonce serve: warning: plain HTTP on {} (--insecure-http): bearer tokens cross \
             the network in clear up to whatever terminates TLS",
            args.listen
        )
        .map_err(CliError::output)?;
    }
    Ok(service)
}

/// What the running service says: where it listens and each reload (one
/// line on `out`; on `err` if `out` cannot take it, and a warning on `err`
/// if the tokens file read exposes tokens), and each unknown outcome (on
/// `err`: the key an operator must close).
fn tell(out: &mut dyn Write, err: &mut dyn Write, notice: Notice<'_>) -> std::io::Result<()> {
    match notice {
        Notice::Listening { addr, tls } => {
            let scheme = if tls { "https" } else { "http" };
            writeln!(out, "payonce serve: listening on {scheme}://{addr}")?;
            out.flush()
        }
        Notice::Reloaded(reload) => {
            if let Some(exposed) = &reload.exposed {
                writeln!(err, "payonce serve: warning: {exposed}")?;
            }
            let line = format!("payonce serve: {reload}");
            match writeln!(out, "{line}").and_then(|()| out.flush()) {
                Ok(()) => Ok(()),
                Err(error) => writeln!(err, "{line} (not on stdout: {error})"),
            }
        }
        Notice::OutcomeUnknown {
            key,
            withdrawal,
            error,
        } => writeln!(
            err,
            "payonce serve: the outcome of {} (withdrawal {}) is unknown: {}; the key stays \
             claimed until an operator closes it",
            Escaped(key),
            Escaped(withdrawal),
            Escaped(error)
        ),
        Notice::Untold { count } => writeln!(
            err,
            "payonce serve: {count} more outcomes were unknown and are not told here: see \
             payonce inflight"
        ),
        _ => Ok(()),
    }
}

/// `payonce serve`: SIGHUP's handler is installed first (a SIGHUP during
/// start-up is remembered, and rereads the files once the service
/// listens), then everything that can be refused is checked before the
/// ledger is opened, so a refusal writes nothing; then the service runs
/// until SIGTERM or SIGINT, reloading its files on SIGHUP.
pub(crate) fn serve_command(
    args: &ServeArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| ServeError::Io {
            doing: "starting the async runtime".into(),
            error,
        })?;
    let signals = {
        let _entered = runtime.enter();
        Signals::new()
    };
    let signals = signals.map_err(|error| ServeError::Io {
        doing: "listening for SIGHUP".into(),
        error,
    })?;
    let service = checked_service(args, &runtime, err)?;
    let ledger = open_ledger(args)?;
    runtime.block_on(service.run(ledger, signals, |notice| tell(out, err, notice)))?;
    writeln!(
        out,
        "payonce serve: stopped; every running send was recorded"
    )
    .map_err(CliError::output)?;
    // Sends still on the blocking pool were waited for above; a reload
    // hung on a file runs on a thread of its own, which exiting ends.
    runtime.shutdown_timeout(Duration::from_secs(10));
    Ok(Status::Clean)
}
