//! `pg_bench`: payonce on PostgreSQL beside the same protocol written
//! plainly and beside the raw single-row commit rate, on one throwaway
//! cluster in one run; prints a Markdown table (docs/performance.md).
//!
//! ```sh
//! cargo run --release -p payonce-bench --bin pg_bench               # about 1.5 minutes
//! cargo run --release -p payonce-bench --bin pg_bench -- --secs 0.5 # checks the harness
//! cargo run --release -p payonce-bench --bin pg_bench -- --tls-rounds 5 --workers 4 --threads 64
//! ```
//!
//! `--tls-rounds N` measures payonce alone, on a cluster listening on
//! 127.0.0.1 with TLS on, over TCP with `sslmode=verify-full` and with
//! `sslmode=disable`, N rounds of each, their order swapped every round:
//! what TLS costs the workers.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

use anyhow::{Context, bail, ensure};
use clap::{Args, Parser, Subcommand};
use payonce_bench::pg::{self, Measured, Side, WorkerFigures};
use payonce_postgres::cluster::Cluster;

/// What a worker writes once it is connected.
const READY: &str = "ready";

#[derive(Debug, Parser)]
#[command(
    name = "pg_bench",
    about = "payonce on PostgreSQL beside a plain implementation and the raw commit rate",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    worker: Option<WorkerCommand>,
    #[command(flatten)]
    plan: PlanArgs,
}

#[derive(Debug, Args)]
struct PlanArgs {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// Thread counts, over all worker processes.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    threads: Vec<usize>,
    /// Worker process counts.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    workers: Vec<usize>,
    /// Instead: payonce over TCP with sslmode=verify-full beside
    /// sslmode=disable, this many rounds of each, at the first worker and
    /// thread counts.
    #[arg(long, default_value_t = 0)]
    tls_rounds: usize,
}

#[derive(Debug, Subcommand)]
enum WorkerCommand {
    /// One worker process: connects, writes `ready`, waits for a line,
    /// works, prints a JSON report.
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        side: String,
        #[arg(long)]
        url: String,
        #[arg(long)]
        worker: String,
        #[arg(long)]
        threads: usize,
        #[arg(long)]
        secs: f64,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.worker {
        Some(WorkerCommand::Worker {
            side,
            url,
            worker,
            threads,
            secs,
        }) => {
            let side = Side::from_name(&side).context("--side: payonce, plain or raw")?;
            let report = pg::run_worker(side, &url, &worker, threads, secs, || {
                let mut out = std::io::stdout();
                writeln!(out, "{READY}")
                    .and_then(|()| out.flush())
                    .and_then(|()| std::io::stdin().lock().read_line(&mut String::new()))
                    .map(drop)
                    .map_err(|source| payonce_bench::BenchError::Worker {
                        worker: worker.clone(),
                        detail: format!("waiting for the start: {source}"),
                    })
            })?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
        None if cli.plan.tls_rounds > 0 => compare_tls(&cli.plan),
        None => compare(&cli.plan),
    }
}

/// Every measurement: raw inserts at each thread count in one process,
/// then plain and payonce at each worker and thread count.
fn compare(plan: &PlanArgs) -> anyhow::Result<()> {
    ensure!(
        plan.secs > 0.0 && plan.secs <= pg::PG_SECS_MAX,
        "--secs must be more than 0 and at most {}",
        pg::PG_SECS_MAX
    );
    let cluster = Cluster::start().context("starting a throwaway PostgreSQL cluster")?;
    let version: String = cluster
        .admin()?
        .query_one("SHOW server_version", &[])?
        .get(0);
    eprintln!("PostgreSQL {version}; {} s per measurement", plan.secs);
    let mut rows = Vec::new();
    for &threads in &plan.threads {
        rows.push(measure(&cluster, Side::Raw, 1, threads, plan.secs)?);
    }
    for &workers in &plan.workers {
        for &threads in &plan.threads {
            if threads < workers {
                eprintln!("skipped: {threads} thread(s) cannot span {workers} workers");
                continue;
            }
            for side in [Side::Plain, Side::Payonce] {
                rows.push(measure(&cluster, side, workers, threads, plan.secs)?);
            }
        }
    }
    println!(
        "PostgreSQL {version}, fsync and synchronous_commit on, one cluster; {} s per \
         measurement; load average before: {}\n",
        plan.secs,
        payonce_bench::load_average()
    );
    print!("{}", pg::pg_table(&rows));
    println!("\n{}", serde_json::to_string(&rows)?);
    Ok(())
}

/// One measurement on a fresh database: `threads` split over `workers`
/// processes, started at once, checked afterwards.
fn measure(
    cluster: &Cluster,
    side: Side,
    workers: usize,
    threads: usize,
    secs: f64,
) -> anyhow::Result<Measured> {
    let url = pg::prepare(cluster, side)?;
    measure_at(&url, side, workers, threads, secs)
}

/// One measurement on the prepared database at `url`.
fn measure_at(
    url: &str,
    side: Side,
    workers: usize,
    threads: usize,
    secs: f64,
) -> anyhow::Result<Measured> {
    let exe = std::env::current_exe().context("finding this binary to run its workers")?;
    let mut children = Vec::new();
    for worker in 0..workers {
        let share = threads / workers + usize::from(worker < threads % workers);
        let child = Command::new(&exe)
            .args(["worker", "--side", side.name(), "--url", url])
            .args(["--worker", &format!("bench-{worker}")])
            .args(["--threads", &share.to_string(), "--secs", &secs.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting a worker")?;
        children.push(child);
    }
    let mut outputs = Vec::new();
    for child in &mut children {
        let mut stdout = BufReader::new(child.stdout.take().context("a worker's output")?);
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        ensure!(line.trim_end() == READY, "a worker did not start: {line:?}");
        outputs.push(stdout);
    }
    for child in &mut children {
        writeln!(child.stdin.as_mut().context("a worker's input")?, "go")?;
    }
    let reports = collect(&mut children, outputs)?;
    let measured = Measured::combine(side, threads, &reports);
    pg::check(side, url, measured.units)?;
    eprintln!(
        "{} {workers}x{threads}: {:.0} decisions/s, p99 {:.2} ms",
        side.name(),
        measured.decisions_per_sec,
        measured.p99_ms
    );
    Ok(measured)
}

/// Every worker's report, once each has ended well.
fn collect(
    children: &mut [Child],
    outputs: Vec<BufReader<ChildStdout>>,
) -> anyhow::Result<Vec<WorkerFigures>> {
    let mut reports = Vec::new();
    for (child, output) in children.iter_mut().zip(outputs) {
        let mut last = String::new();
        for line in output.lines() {
            last = line?;
        }
        let status = child.wait()?;
        if !status.success() {
            bail!("a worker ended with {status}");
        }
        reports.push(serde_json::from_str(&last).with_context(|| format!("a report: {last:?}"))?);
    }
    Ok(reports)
}

/// payonce over TCP with `sslmode=verify-full` beside `sslmode=disable`,
/// `plan.tls_rounds` rounds of each, in alternating order.
fn compare_tls(plan: &PlanArgs) -> anyhow::Result<()> {
    let (workers, threads) = (plan.workers[0], plan.threads[0]);
    let dir = tempfile::tempdir()?;
    let (cluster, root, port) = tls_cluster(dir.path())?;
    let mut rows: Vec<(&str, Measured)> = Vec::new();
    for round in 0..plan.tls_rounds {
        let mut modes = ["verify-full", "disable"];
        if round % 2 == 1 {
            modes.reverse();
        }
        for mode in modes {
            let socket_url = pg::prepare(&cluster, Side::Payonce)?;
            let name = socket_url
                .split_once(":///")
                .and_then(|(_, rest)| rest.split_once('?'))
                .map(|(name, _)| name)
                .context("the database's name")?;
            let url = format!(
                "postgresql://postgres@localhost:{port}/{name}?sslmode={mode}&sslrootcert={}",
                root.display()
            );
            let measured = measure_at(&url, Side::Payonce, workers, threads, plan.secs)?;
            rows.push((mode, measured));
        }
    }
    println!("| round | sslmode | decisions/s | p99 ms |\n| ---: | --- | ---: | ---: |");
    for (index, (mode, measured)) in rows.iter().enumerate() {
        println!(
            "| {} | {mode} | {:.0} | {:.2} |",
            index / 2 + 1,
            measured.decisions_per_sec,
            measured.p99_ms
        );
    }
    let median = |wanted: &str| {
        let mut rates: Vec<f64> = rows
            .iter()
            .filter(|(mode, _)| *mode == wanted)
            .map(|(_, measured)| measured.decisions_per_sec)
            .collect();
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    println!(
        "\nverify-full / disable at the medians: {:.3} ({workers} workers, {threads} threads, \
         load average {})",
        median("verify-full") / median("disable"),
        payonce_bench::load_average()
    );
    let url = |mode: &str| {
        format!(
            "postgresql://postgres@localhost:{port}/postgres?sslmode={mode}&sslrootcert={}",
            root.display()
        )
    };
    let (tls, plain) = (
        connect_time(&url("verify-full"))?,
        connect_time(&url("disable"))?,
    );
    println!(
        "a new connection, median of {CONNECTS}: verify-full {:.2} ms, disable {:.2} ms",
        tls * 1e3,
        plain * 1e3
    );
    Ok(())
}

/// Connections timed for what a new one costs.
const CONNECTS: usize = 200;

/// The median time to connect to `url` and run one statement, in seconds.
fn connect_time(url: &str) -> anyhow::Result<f64> {
    let mut times = Vec::with_capacity(CONNECTS);
    for _ in 0..CONNECTS {
        let started = std::time::Instant::now();
        let mut client = payonce_postgres::client(url)?;
        client.simple_query("SELECT 1")?;
        times.push(started.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[CONNECTS / 2])
}

/// A throwaway cluster listening on 127.0.0.1 with TLS on (a certificate
/// for `localhost` from a CA of its own, whose root it returns), trusting
/// every local connection, TLS or not.
fn tls_cluster(dir: &std::path::Path) -> anyhow::Result<(Cluster, std::path::PathBuf, u16)> {
    use payonce_postgres::cluster::{ServerTls, Settings, free_port};
    let ca = payonce_tls::testing::TestCa::new("pg_bench CA")?;
    let root = ca.write(dir, "root")?;
    let (certificate, key) = ca.server(&["localhost"])?.write(dir, "server")?;
    let port = free_port()?;
    let cluster = Cluster::start_with(Settings {
        port,
        listen: Some("127.0.0.1".into()),
        tls: Some(ServerTls {
            certificate,
            key,
            client_ca: None,
        }),
        hba: Some("host all all 127.0.0.1/32 trust".into()),
        ..Settings::default()
    })?;
    Ok((cluster, root, port))
}
