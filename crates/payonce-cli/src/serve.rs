//! `payonce serve`: its command line, and the ledger it opens. The
//! service itself is the `payonce_server` crate.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use payonce::{Config, Ledger};
use payonce_server::rail::{HttpRail, Rail, SimRail, SimRailConfig};
use payonce_server::server::{CONNECTIONS_MAX, HEADER_READ_TIME_MAX, HEADERS_LEN_MAX, Limits};
use payonce_server::{ServeError, Service, Tokens};

use crate::env::Status;
use crate::error::CliError;

/// `payonce serve`.
#[derive(Debug, Args)]
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
    /// Where to listen.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The tokens file: TOML, a table of clients and one of operators, each name = "token".
    #[arg(long, value_name = "FILE")]
    pub tokens: PathBuf,
    /// Send through an HTTP rail client at this URL instead of the simulated rail.
    #[arg(long, value_name = "URL", conflicts_with = "rail_log")]
    pub rail_url: Option<String>,
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

    /// The rail: the HTTP adapter with --rail-url, the simulated one
    /// otherwise. Needs a runtime (the HTTP client starts on one).
    pub fn rail(&self) -> Result<Arc<dyn Rail>, ServeError> {
        if let Some(url) = &self.rail_url {
            let rail = HttpRail::new(url, Duration::from_millis(self.rail_timeout_ms))
                .map_err(ServeError::Rail)?;
            return Ok(Arc::new(rail));
        }
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
        Ledger::init_with(dir, Config::default())
    } else {
        Ledger::open_with(dir, Config::default())
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
    let shown = std::path::PathBuf::from(payonce_postgres::redacted(url));
    if args.init {
        let created = payonce_postgres::init(url, Config::default());
        drop(created.map_err(|error| CliError::from_ledger(&shown, error))?);
    }
    payonce_postgres::open(url, worker, Config::default())
        .map_err(|error| CliError::from_ledger(&shown, error))
}

/// `payonce serve`: everything that can be refused (the tokens file, the
/// rail) is checked before the ledger is opened, so a refusal writes
/// nothing; then the service runs until SIGTERM or SIGINT.
pub(crate) fn serve_command(args: &ServeArgs, out: &mut dyn Write) -> Result<Status, CliError> {
    let tokens = Tokens::read(&args.tokens).map_err(ServeError::Tokens)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| ServeError::Io {
            doing: "starting the async runtime".into(),
            error,
        })?;
    let rail = runtime.block_on(async { args.rail() })?;
    let ledger = open_ledger(args)?;
    let service = Service {
        listen: args.listen,
        tokens,
        rail,
        limits: args.limits(),
    };
    runtime.block_on(service.run(ledger, |addr| {
        writeln!(out, "payonce serve: listening on http://{addr}")?;
        out.flush()
    }))?;
    writeln!(
        out,
        "payonce serve: stopped; every running send was recorded"
    )
    .map_err(CliError::output)?;
    // Sends still on the blocking pool were waited for above.
    runtime.shutdown_timeout(Duration::from_secs(10));
    Ok(Status::Clean)
}
