//! `serve_bench`: submissions per second and p99 latency at 64 concurrent
//! callers, for the library called directly (`AsyncLedger::submit`) and
//! for `payonce serve` over HTTP on the same kind of ledger, side by side
//! in one run, rounds alternating. Their difference is the HTTP cost.
//!
//! ```sh
//! cargo run --release -p payonce-bench --bin serve_bench            # the full run
//! cargo run --release -p payonce-bench --bin serve_bench -- --quick # seconds
//! cargo run --release -p payonce-bench --bin serve_bench -- --postgres # and 4 workers on PostgreSQL
//! cargo run --release -p payonce-bench --bin serve_bench -- --tls      # HTTPS beside plain HTTP
//! perf stat -e context-switches,task-clock target/release/serve_bench --only http # one side's costs
//! ```
//!
//! With `--tls` it runs `payonce serve` over HTTPS (a certificate of a CA
//! made for the run, the client trusting it) beside plain HTTP instead of
//! beside the library, on the file ledger: the same submissions, each
//! caller on a keep-alive connection of its own; then what a new
//! connection costs: `GET /healthz` on a new connection per request, at
//! 64 callers (requests per second) and at 1 (the mean time of one).
//!
//! With `--postgres` it also runs both sides on a throwaway PostgreSQL
//! cluster: 4 worker ledgers in this process sharing one database, the 64
//! callers spread over them (over HTTP, 4 servers, one per worker). Beside
//! them, in the same alternation, the same protocol written plainly, as
//! `pg_bench`'s plain side (`payonce_bench::pg`): a claims table, 64
//! connections each driven by a thread of its own, one transaction to
//! claim and one to record the outcome, for `--plain-secs` seconds a round.
//!
//! Each round runs on a ledger and a tokio runtime of its own, the two
//! sides' order swapped every round, so that no round inherits another
//! side's threads or place (docs/runs/performance.md, "A runtime per
//! round" and "Order").
//!
//! The rail is the simulated one with no latency and no rail log, so the
//! figures are the ledger's and the service's own. Both sides share the
//! machine's cores with their load generator (64 tokio tasks; over HTTP,
//! each on its own keep-alive connection).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::{Parser, ValueEnum};
use payonce::{AsyncLedger, Config, Ledger, NewWithdrawal};
use payonce_bench::pg::{self, Measured, Side};
use payonce_model::WithdrawalRequest;
use payonce_postgres::cluster::Cluster;
use payonce_server::rail::{Rail, RailSend, SimRail, SimRailConfig};
use payonce_server::{Embedded, Limits, Metrics, Server, ServerTls, ServerTlsFiles, Setup, Tokens};
use payonce_tls::testing::TestCa;

const TOKEN: &str = "bench-client-token-0123";
const CONCURRENCY: usize = 64;

#[derive(Debug, Parser)]
#[command(
    name = "serve_bench",
    about = "payonce serve beside the library, 64 callers"
)]
struct Args {
    /// Few submissions: checks that the harness works.
    #[arg(long)]
    quick: bool,
    /// Where the ledgers live (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Submissions per round (default 20000; quick 640).
    #[arg(long)]
    submissions: Option<usize>,
    /// Rounds per side, alternating, the order swapped each round (default
    /// 4: each side first twice; quick 1).
    #[arg(long)]
    rounds: Option<usize>,
    /// Also run on 4 workers sharing a PostgreSQL ledger, on a throwaway
    /// cluster, beside the protocol written plainly.
    #[arg(long)]
    postgres: bool,
    /// Seconds each round of the plain protocol runs (default 5; quick 1).
    #[arg(long)]
    plain_secs: Option<f64>,
    /// Runs one side alone (its ledgers still prepared round by round), so
    /// that a profiler or `perf stat` around the process sees that side's
    /// costs; no ratio is printed.
    #[arg(long, value_enum)]
    only: Option<Through>,
    /// `payonce serve` over HTTPS beside plain HTTP on the file ledger,
    /// instead of beside the library: keep-alive connections, then a new
    /// connection per request.
    #[arg(long, conflicts_with_all = ["postgres", "only"])]
    tls: bool,
    /// With --tls: requests on new connections per round at 64 callers
    /// (default 4000; quick 256), and a sixteenth of that at 1 caller.
    #[arg(long, requires = "tls")]
    fresh: Option<usize>,
}

/// The way a round's submissions go: one side of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Through {
    /// `AsyncLedger::submit` called directly.
    Library,
    /// `payonce serve` over HTTP.
    Http,
}

/// Workers sharing the PostgreSQL ledger.
const WORKERS: usize = 4;

/// One round's figures.
#[derive(Debug, Clone, Copy)]
struct Round {
    per_second: f64,
    p50: Duration,
    p99: Duration,
}

fn round_of(mut latencies: Vec<Duration>, elapsed: Duration) -> Round {
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    Round {
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
    }
}

fn new_withdrawal() -> anyhow::Result<NewWithdrawal> {
    Ok(NewWithdrawal {
        amount: "25.00".parse()?,
        currency: "USDC".parse()?,
        destination: "0xabc".parse()?,
        requested_by: "bench".parse()?,
    })
}

/// Where a round runs: a file ledger in a directory, or a new database
/// of a PostgreSQL cluster.
#[derive(Clone, Copy)]
enum Where<'a> {
    File(&'a Path),
    Postgres(&'a Cluster),
}

/// A round's ledgers (one, or one per worker) and its withdrawals.
struct Prepared {
    _dir: Option<tempfile::TempDir>,
    ledgers: Vec<AsyncLedger>,
    withdrawals: Vec<WithdrawalRequest>,
}

/// A new ledger with `count` withdrawals, created 64 at a time. Opened,
/// and to be dropped, outside the runtime: PostgreSQL's client runs a
/// runtime of its own.
fn ledger_with(
    runtime: &tokio::runtime::Runtime,
    at: Where<'_>,
    count: usize,
) -> anyhow::Result<Prepared> {
    let (dir, ledgers) = match at {
        Where::File(base) => {
            let dir = tempfile::tempdir_in(base)?;
            let ledger = AsyncLedger::new(Ledger::init(dir.path())?);
            (Some(dir), vec![ledger])
        }
        Where::Postgres(cluster) => (None, workers(cluster)?),
    };
    let withdrawals = runtime.block_on(create(ledgers[0].clone(), count))?;
    Ok(Prepared {
        _dir: dir,
        ledgers,
        withdrawals,
    })
}

async fn create(ledger: AsyncLedger, count: usize) -> anyhow::Result<Vec<WithdrawalRequest>> {
    let mut created = Vec::with_capacity(count);
    while created.len() < count {
        let batch = CONCURRENCY.min(count - created.len());
        let tasks: Vec<_> = (0..batch)
            .map(|_| {
                let ledger = ledger.clone();
                tokio::spawn(async move {
                    Ok::<_, anyhow::Error>(ledger.create(new_withdrawal()?).await?)
                })
            })
            .collect();
        for task in tasks {
            created.push(task.await??);
        }
    }
    Ok(created)
}

/// [`WORKERS`] workers of a new ledger in a new database of `cluster`.
fn workers(cluster: &Cluster) -> anyhow::Result<Vec<AsyncLedger>> {
    let url = cluster.database()?;
    payonce_postgres::migrate(&url)?;
    drop(payonce_postgres::init(&url, Config::default())?);
    (0..WORKERS)
        .map(|n| {
            let ledger = payonce_postgres::open(&url, &format!("api-{n}"), Config::default())?;
            Ok(AsyncLedger::new(ledger))
        })
        .collect()
}

/// Runs `call(caller, i)` for every i below `count` on [`CONCURRENCY`]
/// callers, each taking the next i once its last call returned; the
/// latencies and the time it all took.
async fn drive<F, Fut>(count: usize, call: F) -> anyhow::Result<(Vec<Duration>, Duration)>
where
    F: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    drive_on(CONCURRENCY, count, call).await
}

/// [`drive`] on `callers` callers.
async fn drive_on<F, Fut>(
    callers: usize,
    count: usize,
    call: F,
) -> anyhow::Result<(Vec<Duration>, Duration)>
where
    F: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..callers)
        .map(|caller| {
            let (next, call) = (next.clone(), call.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return Ok::<_, anyhow::Error>(latencies);
                    }
                    let start = Instant::now();
                    call(caller, i).await?;
                    latencies.push(start.elapsed());
                }
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(count);
    for worker in workers {
        latencies.extend(worker.await??);
    }
    Ok((latencies, started.elapsed()))
}

fn rail() -> anyhow::Result<Arc<SimRail>> {
    Ok(Arc::new(SimRail::new(SimRailConfig::default())?))
}

/// The library called directly: `AsyncLedger::submit` with the rail.
async fn library_round(prepared: &Prepared, count: usize) -> anyhow::Result<Round> {
    let ledgers = Arc::new(prepared.ledgers.clone());
    let withdrawals = Arc::new(prepared.withdrawals.clone());
    let rail = rail()?;
    let (latencies, elapsed) = drive(count, move |caller, i| {
        let (ledgers, withdrawals, rail) = (ledgers.clone(), withdrawals.clone(), rail.clone());
        async move {
            let ledger = &ledgers[caller % ledgers.len()];
            let key = format!("bench:k-{i}");
            let request = withdrawals[i].clone();
            let send = RailSend {
                withdrawal: request.clone(),
                key: key.clone(),
            };
            let submitted = ledger
                .submit(&key, request, |r| async move {
                    rail.send(&send).await.into_result(&r)
                })
                .await?;
            ensure!(!submitted.replayed, "a new key replayed");
            Ok(())
        }
    })
    .await?;
    Ok(round_of(latencies, elapsed))
}

/// A CA made for the run and the certificate `payonce serve` shows over
/// HTTPS, for `localhost` and 127.0.0.1.
struct Pki {
    _dir: tempfile::TempDir,
    ca: TestCa,
    files: ServerTlsFiles,
}

impl Pki {
    fn new() -> anyhow::Result<Pki> {
        let dir = tempfile::tempdir()?;
        let ca = TestCa::new("serve_bench CA")?;
        let (certificate, key) = ca
            .server(&["localhost", "127.0.0.1"])?
            .write(dir.path(), "server")?;
        let files = ServerTlsFiles {
            certificate,
            key,
            client_ca: None,
        };
        Ok(Pki {
            _dir: dir,
            ca,
            files,
        })
    }
}

/// `payonce serve` on `ledger`, over HTTPS with `tls`.
async fn server_on(ledger: &AsyncLedger, tls: Option<&Pki>) -> anyhow::Result<Server> {
    let metrics = Arc::new(Metrics::default());
    let setup = Setup {
        ledger: Arc::new(Embedded::new(ledger.ledger().clone(), metrics.clone())),
        rail: rail()?,
        tokens: Tokens::parse(
            &format!("[clients]\nbench = \"{TOKEN}\"\n"),
            Path::new("tokens"),
        )?,
        metrics,
        limits: Limits::default(),
        tls: tls
            .map(|pki| ServerTls::load(pki.files.clone()))
            .transpose()?,
        tokens_file: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    Ok(payonce_server::start_with(listener, setup)?)
}

/// A caller's client: trusting the run's CA with `tls`, and keeping its
/// connection alive or opening a new one for every request. reqwest has
/// no cryptography of its own here: every client gets a rustls
/// configuration.
fn client(tls: Option<&Pki>, keep_alive: bool) -> anyhow::Result<reqwest::Client> {
    let config = payonce_tls::testing::client_config(tls.map(|pki| &pki.ca), None)
        .map_err(|error| anyhow::anyhow!("the client's TLS: {error}"))?;
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(usize::from(keep_alive))
        .use_preconfigured_tls(config)
        .build()?)
}

/// The same submissions through `payonce serve` (one server per ledger),
/// over HTTPS with `tls`, one keep-alive connection per caller.
async fn http_round(prepared: &Prepared, count: usize, tls: Option<&Pki>) -> anyhow::Result<Round> {
    let mut servers = Vec::new();
    for ledger in &prepared.ledgers {
        servers.push(server_on(ledger, tls).await?);
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    let urls: Arc<Vec<String>> = Arc::new(
        servers
            .iter()
            .map(|server| format!("{scheme}://{}/v1/withdrawals", server.addr()))
            .collect(),
    );
    let ids: Arc<Vec<String>> = Arc::new(
        prepared
            .withdrawals
            .iter()
            .map(|w| w.id().to_string())
            .collect(),
    );
    let clients: Arc<Vec<reqwest::Client>> = Arc::new(
        (0..CONCURRENCY)
            .map(|_| client(tls, true))
            .collect::<Result<_, _>>()?,
    );
    let (latencies, elapsed) = drive(count, move |caller, i| {
        let (urls, ids, clients) = (urls.clone(), ids.clone(), clients.clone());
        async move {
            let url = &urls[caller % urls.len()];
            let response = clients[caller]
                .post(format!("{url}/{}/submissions", ids[i]))
                .bearer_auth(TOKEN)
                .header("Idempotency-Key", format!("\"k-{i}\""))
                .send()
                .await?;
            ensure!(
                response.status() == 200,
                "submission {i}: {}",
                response.status()
            );
            response.bytes().await?;
            Ok(())
        }
    })
    .await?;
    for server in servers {
        server.shut_down().await;
    }
    Ok(round_of(latencies, elapsed))
}

/// `count` requests of `GET /healthz` from `callers` callers, each on a
/// new connection (TCP, and over HTTPS a full handshake), to a server on
/// a ledger of its own.
async fn fresh_round(
    prepared: &Prepared,
    (callers, count): (usize, usize),
    tls: Option<&Pki>,
) -> anyhow::Result<Round> {
    let server = server_on(&prepared.ledgers[0], tls).await?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = Arc::new(format!("{scheme}://{}/healthz", server.addr()));
    let http = client(tls, false)?;
    let (latencies, elapsed) = drive_on(callers, count, move |_, i| {
        let (url, http) = (url.clone(), http.clone());
        async move {
            let response = http.get(url.as_str()).send().await?;
            ensure!(
                response.status() == 200,
                "request {i}: {}",
                response.status()
            );
            response.bytes().await?;
            Ok(())
        }
    })
    .await?;
    server.shut_down().await;
    Ok(round_of(latencies, elapsed))
}

/// The protocol written plainly, on a new database of `cluster`: 64
/// connections, each a thread submitting in a loop for `secs` seconds;
/// what the database holds afterwards is checked.
fn plain_round(cluster: &Cluster, secs: f64) -> anyhow::Result<Round> {
    let url = pg::prepare(cluster, Side::Plain)?;
    let report = pg::run_worker(Side::Plain, &url, "plain", CONCURRENCY, secs, || Ok(()))?;
    let measured = Measured::combine(Side::Plain, CONCURRENCY, std::slice::from_ref(&report));
    pg::check(Side::Plain, &url, measured.units)?;
    Ok(Round {
        per_second: measured.units_per_sec,
        p50: Duration::from_secs_f64(measured.p50_ms / 1e3),
        p99: Duration::from_secs_f64(measured.p99_ms / 1e3),
    })
}

/// The median of `figure` over `rounds`: of an even number, the mean of
/// the middle two.
fn median(rounds: &[Round], figure: impl Fn(&Round) -> f64) -> f64 {
    let mut values: Vec<f64> = rounds.iter().map(figure).collect();
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() % 2 {
        1 => values[middle],
        _ => (values[middle - 1] + values[middle]) / 2.0,
    }
}

/// Every round of each side on one kind of ledger.
#[derive(Debug, Default)]
struct Sides {
    library: Vec<Round>,
    http: Vec<Round>,
    /// The plain protocol's, on PostgreSQL.
    plain: Vec<Round>,
}

/// A row of the table: the medians of `rounds`.
fn print_row(ledger: &str, path: &str, rounds: &[Round]) -> (f64, f64, f64) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let figures = (
        median(rounds, |r| r.per_second),
        median(rounds, |r| ms(r.p50)),
        median(rounds, |r| ms(r.p99)),
    );
    println!(
        "| {ledger} | {path} | {:.0} | {:.2} | {:.2} |",
        figures.0, figures.1, figures.2
    );
    figures
}

fn print_rows(ledger: &str, sides: &Sides) {
    let row = |path: &str, rounds: &[Round]| {
        (!rounds.is_empty()).then(|| print_row(ledger, path, rounds))
    };
    let lib = row("library (`AsyncLedger::submit`)", &sides.library);
    let web = row("`payonce serve` over HTTP", &sides.http);
    // One side alone (`--only`) has nothing to divide.
    let (Some(lib), Some(web)) = (lib, web) else {
        return;
    };
    println!(
        "| {ledger} | HTTP / library | {:.2} | {:.2} | {:.2} |",
        web.0 / lib.0,
        web.1 / lib.1,
        web.2 / lib.2
    );
    if sides.plain.is_empty() {
        return;
    }
    let path = "plain SQL, 64 connections (2 transactions a submission)";
    let plain = print_row("PostgreSQL", path, &sides.plain);
    println!(
        "| {ledger} | HTTP / plain | {:.2} | {:.2} | {:.2} |",
        web.0 / plain.0,
        web.1 / plain.1,
        web.2 / plain.2
    );
}

/// One round of `side` on a new ledger at `at` (kept in `kept`), over
/// HTTPS with `tls`, on a runtime of its own, dropped after the round: a round inherits no
/// threads from the one before. The library's rounds grow tokio's blocking
/// pool to hundreds of threads (a caller's next call often comes before
/// the thread of its last is idle again), and a round of the service run
/// after one on the same runtime measured slower.
fn side_round(
    side: Through,
    at: Where<'_>,
    count: usize,
    kept: &mut Vec<Prepared>,
    tls: Option<&Pki>,
) -> anyhow::Result<Round> {
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    let prepared = ledger_with(&runtime, at, count)?;
    let measured = match side {
        Through::Library => runtime.block_on(library_round(&prepared, count)),
        Through::Http => runtime.block_on(http_round(&prepared, count, tls)),
    };
    // The runtime first, then (at the end) the ledger: see `ledger_with`.
    drop(runtime);
    kept.push(prepared);
    measured
}

/// `rounds` rounds of each side on `at` (or of the `only` one), the
/// order of the two sides swapped from one round to the next (library
/// first in odd rounds, HTTP first in even ones): the side run second in a
/// round was measured slower, so each side takes each place in turn. With
/// `plain`, the protocol written plainly on that cluster too, for that many
/// seconds, after both.
fn measure(
    at: Where<'_>,
    (count, rounds, only): (usize, usize, Option<Through>),
    plain: Option<(&Cluster, f64)>,
    kept: &mut Vec<Prepared>,
) -> anyhow::Result<Sides> {
    let mut sides = Sides::default();
    for round in 1..=rounds {
        let order = match round % 2 {
            1 => [Through::Library, Through::Http],
            _ => [Through::Http, Through::Library],
        };
        for side in order
            .into_iter()
            .filter(|&side| only.is_none_or(|o| o == side))
        {
            let measured = side_round(side, at, count, kept, None)?;
            match side {
                Through::Library => sides.library.push(measured),
                Through::Http => sides.http.push(measured),
            }
        }
        if let (Some((cluster, secs)), None) = (plain, only) {
            sides.plain.push(plain_round(cluster, secs)?);
        }
        eprintln!(
            "round {round} of {rounds}: library {:?}, http {:?}, plain {:?}",
            sides.library.last(),
            sides.http.last(),
            sides.plain.last()
        );
    }
    Ok(sides)
}

/// Every round of `payonce serve` over HTTPS and over plain HTTP.
#[derive(Debug, Default)]
struct TlsSides {
    /// Submissions on keep-alive connections: plain, then HTTPS.
    kept_alive: [Vec<Round>; 2],
    /// `GET /healthz` on a new connection per request, at 64 callers.
    fresh: [Vec<Round>; 2],
    /// The same at 1 caller.
    fresh_alone: [Vec<Round>; 2],
}

/// One round of new connections, plain or over HTTPS, on a ledger and a
/// runtime of its own.
fn fresh_side(
    base: &Path,
    load: (usize, usize),
    tls: Option<&Pki>,
    kept: &mut Vec<Prepared>,
) -> anyhow::Result<Round> {
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    let prepared = ledger_with(&runtime, Where::File(base), 0)?;
    let measured = runtime.block_on(fresh_round(&prepared, load, tls));
    drop(runtime);
    kept.push(prepared);
    measured
}

/// `rounds` rounds of `payonce serve` over plain HTTP and over HTTPS on
/// the file ledger, plain first in odd rounds and HTTPS first in even
/// ones: `count` submissions on keep-alive connections, then `fresh`
/// requests on new connections at 64 callers and a sixteenth of them at
/// one.
fn measure_tls(
    base: &Path,
    (count, rounds, fresh): (usize, usize, usize),
    kept: &mut Vec<Prepared>,
) -> anyhow::Result<TlsSides> {
    let pki = Pki::new()?;
    let mut sides = TlsSides::default();
    for round in 1..=rounds {
        let order = match round % 2 {
            1 => [0, 1],
            _ => [1, 0],
        };
        for side in order {
            let tls = (side == 1).then_some(&pki);
            let at = Where::File(base);
            let measured = side_round(Through::Http, at, count, kept, tls)?;
            sides.kept_alive[side].push(measured);
            let load = (CONCURRENCY, fresh);
            sides.fresh[side].push(fresh_side(base, load, tls, kept)?);
            let load = (1, (fresh / 16).max(1));
            sides.fresh_alone[side].push(fresh_side(base, load, tls, kept)?);
        }
        eprintln!(
            "round {round} of {rounds}: http {:?} {:?} {:?}, https {:?} {:?} {:?}",
            sides.kept_alive[0].last(),
            sides.fresh[0].last(),
            sides.fresh_alone[0].last(),
            sides.kept_alive[1].last(),
            sides.fresh[1].last(),
            sides.fresh_alone[1].last(),
        );
    }
    Ok(sides)
}

/// The tables of `--tls`: medians of the rounds.
fn print_tls(sides: &TlsSides) {
    println!("| ledger | path | submissions/s | p50 ms | p99 ms |");
    println!("| --- | --- | ---: | ---: | ---: |");
    let plain = print_row(
        "file",
        "`payonce serve` over HTTP, keep-alive",
        &sides.kept_alive[0],
    );
    let tls = print_row(
        "file",
        "`payonce serve` over HTTPS, keep-alive",
        &sides.kept_alive[1],
    );
    println!(
        "| file | HTTPS / HTTP | {:.2} | {:.2} | {:.2} |\n",
        tls.0 / plain.0,
        tls.1 / plain.1,
        tls.2 / plain.2
    );
    println!("| a new connection per request | requests/s, 64 callers | mean ms, 1 caller |");
    println!("| --- | ---: | ---: |");
    let figures = |side: usize| {
        let mean_ms = median(&sides.fresh_alone[side], |r| 1e3 / r.per_second);
        (median(&sides.fresh[side], |r| r.per_second), mean_ms)
    };
    let (plain, tls) = (figures(0), figures(1));
    println!("| HTTP | {:.0} | {:.3} |", plain.0, plain.1);
    println!("| HTTPS | {:.0} | {:.3} |", tls.0, tls.1);
    println!(
        "| HTTPS / HTTP | {:.2} | {:.2} |",
        tls.0 / plain.0,
        tls.1 / plain.1
    );
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let count = args
        .submissions
        .unwrap_or(if args.quick { 640 } else { 20_000 });
    let rounds = args.rounds.unwrap_or(if args.quick { 1 } else { 4 });
    let plain_secs = args
        .plain_secs
        .unwrap_or(if args.quick { 1.0 } else { 5.0 });
    ensure!(
        count > 0 && rounds > 0,
        "--submissions and --rounds must be at least 1"
    );
    let base = args.dir.unwrap_or_else(std::env::temp_dir);
    // Every round's ledgers, dropped only at the end, once their runtimes
    // are.
    let mut kept = Vec::new();
    if args.tls {
        let fresh = args.fresh.unwrap_or(if args.quick { 256 } else { 4000 });
        let sides = measure_tls(&base, (count, rounds, fresh), &mut kept)?;
        println!(
            "{count} submissions and {fresh} new connections ({} at 1 caller) per round, \
             {rounds} rounds each (medians)\n",
            (fresh / 16).max(1)
        );
        print_tls(&sides);
        return Ok(());
    }
    let file = measure(
        Where::File(&base),
        (count, rounds, args.only),
        None,
        &mut kept,
    )?;
    let postgres = match args.postgres {
        true => {
            let cluster = Cluster::start()
                .map_err(|error| anyhow::anyhow!("starting PostgreSQL: {error}"))?;
            let at = Where::Postgres(&cluster);
            let plain = Some((&cluster, plain_secs));
            let measured = measure(at, (count, rounds, args.only), plain, &mut kept)?;
            drop(kept);
            Some(measured)
        }
        false => None,
    };
    println!(
        "{count} submissions per round, {rounds} rounds each, {CONCURRENCY} concurrent callers (medians)\n"
    );
    println!("| ledger | path | submissions/s | p50 ms | p99 ms |");
    println!("| --- | --- | ---: | ---: | ---: |");
    print_rows("file", &file);
    if let Some(postgres) = &postgres {
        print_rows("PostgreSQL, 4 workers", postgres);
    }
    Ok(())
}
