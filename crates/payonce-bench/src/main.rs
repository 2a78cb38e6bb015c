//! `payonce-bench`: payonce against SQLite and sled doing the same claims,
//! side by side in one run. Prints a Markdown table with payonce's ratios.
//!
//! Each store runs in its own child process (this binary again, with a
//! hidden subcommand), so its peak resident memory is its own.
//!
//! ```sh
//! cargo run --release -p payonce-bench            # the full run, minutes
//! cargo run --release -p payonce-bench -- --quick # seconds: checks the harness
//! ```

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use clap::{Args, Parser, Subcommand, ValueEnum};
use payonce_bench::{
    BuildFigures, Comparison, Mix, OpenFigures, RunFigures, StoreKind, WorkloadSpec, build,
    combine_rounds, disagreements, disk_bytes, fdatasync_rate, open_and_probe,
    overwrite_fdatasync_rate, payonce_log_records, peak_resident_bytes, timed_run,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The bytes each raw sync writes: a 128-byte record's frame in payonce's
/// log, as in the log's own benchmark.
const SYNC_WRITE_LEN: usize = 144;

#[derive(Debug, Parser)]
#[command(
    name = "payonce-bench",
    about = "payonce against SQLite and sled doing the same claims, side by side",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    child: Option<Child>,
    #[command(flatten)]
    compare: CompareArgs,
}

#[derive(Debug, Args)]
struct CompareArgs {
    /// Small counts that finish in seconds: checks that the harness works.
    #[arg(long)]
    quick: bool,
    /// Where the stores live (default: the system temp dir). Use the disk
    /// you want measured.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seeds the workload.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Thread counts to measure (default 1,8,64).
    #[arg(long, value_delimiter = ',')]
    threads: Option<Vec<usize>>,
    /// Submissions per run, one per thread count, spread evenly over the
    /// threads (default 8000,24000,64000; quick 200,400,1280).
    #[arg(long, value_delimiter = ',')]
    submissions: Option<Vec<usize>>,
    /// Submissions before the open is timed (default 1000000; quick 2000).
    #[arg(long)]
    open_submissions: Option<usize>,
    /// Seconds per raw fdatasync measurement (default 2; quick 0.3).
    #[arg(long)]
    sync_secs: Option<f64>,
    /// Rounds per thread count (default 3; quick 1): each round runs every
    /// store once, in a rotating order, on a seed of its own, with the
    /// submissions split evenly between rounds; the table shows medians.
    #[arg(long)]
    rounds: Option<usize>,
    /// Compare with SQLite sharing one connection behind a mutex, instead
    /// of a connection per thread.
    #[arg(long)]
    sqlite_shared: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum MixName {
    Standard,
    EveryAnswer,
}

impl MixName {
    fn mix(self) -> Mix {
        match self {
            MixName::Standard => Mix::STANDARD,
            MixName::EveryAnswer => Mix::EVERY_ANSWER,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Child {
    /// One timed run of one store; prints a JSON report.
    #[command(hide = true)]
    Run {
        #[arg(long)]
        store: StoreKind,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        threads: usize,
        #[arg(long)]
        submissions_per_thread: usize,
        #[arg(long, value_enum)]
        mix: MixName,
    },
    /// Builds a large state with durability relaxed; prints a JSON report.
    #[command(hide = true)]
    Build {
        #[arg(long)]
        store: StoreKind,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        submissions: usize,
    },
    /// Opens a built state and asks one question; prints a JSON report.
    #[command(hide = true)]
    Open {
        #[arg(long)]
        store: StoreKind,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        probe_key: String,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.child {
        Some(child) => run_child(child),
        None => compare(&cli.compare),
    }
}

fn print_json(report: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(report)?);
    Ok(())
}

fn run_child(child: Child) -> anyhow::Result<()> {
    match child {
        Child::Run {
            store,
            dir,
            seed,
            threads,
            submissions_per_thread,
            mix,
        } => {
            let spec = WorkloadSpec {
                seed,
                threads,
                submissions_per_thread,
                mix: mix.mix(),
            };
            let mut report = timed_run(store, &dir, spec)?;
            report.peak_resident_bytes = Some(peak_resident_bytes()?);
            print_json(&report)
        }
        Child::Build {
            store,
            dir,
            seed,
            submissions,
        } => {
            let spec = WorkloadSpec {
                seed,
                threads: 1,
                submissions_per_thread: submissions,
                mix: Mix::STANDARD,
            };
            print_json(&build(store, &dir, spec)?)
        }
        Child::Open {
            store,
            dir,
            probe_key,
        } => {
            let mut report = open_and_probe(store, &dir, &probe_key)?;
            report.peak_resident_bytes = Some(peak_resident_bytes()?);
            // Counted after the peak is read: the scan's buffers are not the
            // store's.
            if store == StoreKind::Payonce {
                report.log_records = Some(payonce_log_records(&dir)?);
            }
            print_json(&report)
        }
    }
}

/// Runs this binary again with `args` and reads the JSON report it prints
/// last.
fn child<T: DeserializeOwned>(args: &[String]) -> anyhow::Result<T> {
    let exe = std::env::current_exe().context("finding this binary to run a child")?;
    let output = Command::new(&exe)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {} {}", exe.display(), args.join(" ")))?;
    ensure!(
        output.status.success(),
        "child `{}` failed: {}",
        args.join(" "),
        output.status
    );
    let stdout = String::from_utf8(output.stdout).context("child output is not UTF-8")?;
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).with_context(|| format!("reading child report {last:?}"))
}

fn arg(name: &str, value: impl ToString) -> [String; 2] {
    [format!("--{name}"), value.to_string()]
}

fn store_arg(store: StoreKind) -> String {
    store.name().to_ascii_lowercase()
}

fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The file system type of the mount holding `dir`, from /proc/mounts.
fn filesystem(dir: &Path) -> String {
    let Ok(dir) = dir.canonicalize() else {
        return "unknown".to_owned();
    };
    let Ok(mounts) = fs::read_to_string("/proc/mounts") else {
        return "unknown".to_owned();
    };
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (device, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            dir.starts_with(point)
                .then(|| (point.len(), format!("{kind} on {device}")))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "unknown".to_owned(), |(_, name)| name)
}

/// What a comparison runs: the flags with the defaults of the mode filled
/// in, checked before anything is measured.
struct Plan {
    quick: bool,
    seed: u64,
    /// The thread count of each run, beside `submissions`.
    threads: Vec<usize>,
    /// The submissions of each run, over all its rounds and threads.
    submissions: Vec<usize>,
    open_submissions: usize,
    sync_duration: Duration,
    rounds: usize,
    sqlite_shared: bool,
    /// Where the scratch directory is made.
    base: PathBuf,
}

impl Plan {
    fn new(args: &CompareArgs) -> anyhow::Result<Plan> {
        let threads = args.threads.clone().unwrap_or_else(|| vec![1, 8, 64]);
        let submissions = args.submissions.clone().unwrap_or_else(|| {
            if args.quick {
                vec![200, 400, 1280]
            } else {
                vec![8_000, 24_000, 64_000]
            }
        });
        ensure!(
            threads.len() == submissions.len(),
            "--threads and --submissions need one value each per run ({} and {} given)",
            threads.len(),
            submissions.len()
        );
        let open_submissions =
            args.open_submissions
                .unwrap_or(if args.quick { 2_000 } else { 1_000_000 });
        let sync_duration =
            Duration::from_secs_f64(args.sync_secs.unwrap_or(if args.quick { 0.3 } else { 2.0 }));
        let rounds = args.rounds.unwrap_or(if args.quick { 1 } else { 3 });
        ensure!(rounds > 0, "--rounds must be at least 1");
        Ok(Plan {
            quick: args.quick,
            seed: args.seed,
            threads,
            submissions,
            open_submissions,
            sync_duration,
            rounds,
            sqlite_shared: args.sqlite_shared,
            base: args.dir.clone().unwrap_or_else(std::env::temp_dir),
        })
    }

    /// An empty comparison with the table's columns.
    fn comparison(&self) -> Comparison {
        let mut comparison = Comparison::default();
        if self.sqlite_shared {
            for store in &mut comparison.stores {
                if *store == StoreKind::Sqlite {
                    *store = StoreKind::SqliteShared;
                }
            }
        }
        comparison
    }
}

/// The parent side: the raw sync rate between phases, the timed runs of
/// each thread count, then building and reopening a large state, each store
/// in a child; then the table.
fn compare(args: &CompareArgs) -> anyhow::Result<()> {
    let plan = Plan::new(args)?;
    let scratch = tempfile::Builder::new()
        .prefix("payonce-bench-")
        .tempdir_in(&plan.base)
        .with_context(|| format!("making a directory in {}", plan.base.display()))?;
    let work = scratch.path();
    println!(
        "payonce-bench{}: {} cores ({}), {} in {}; load average at start {}",
        if plan.quick { " --quick" } else { "" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        filesystem(work),
        work.display(),
        payonce_bench::load_average()
    );
    let mut comparison = plan.comparison();
    let stores = comparison.stores.clone();
    measure_sync(work, plan.sync_duration, &mut comparison)?;
    let mut spreads = Vec::new();
    for (&threads, &total) in plan.threads.iter().zip(&plan.submissions) {
        ensure!(threads > 0, "a thread count must be at least 1");
        spreads.extend(measure_runs(
            &plan,
            work,
            &stores,
            threads,
            total,
            &mut comparison,
        )?);
        measure_sync(work, plan.sync_duration, &mut comparison)?;
    }
    if plan.open_submissions > 0 {
        measure_opens(&plan, work, &stores, &mut comparison)?;
        measure_sync(work, plan.sync_duration, &mut comparison)?;
    }
    print_results(&comparison, plan.rounds, &spreads);
    Ok(())
}

/// Measures the raw append and overwrite sync rates in `work`, so the
/// table can show the disk's limit as it was during the run.
fn measure_sync(
    work: &Path,
    sync_duration: Duration,
    comparison: &mut Comparison,
) -> anyhow::Result<()> {
    let rate = fdatasync_rate(work, SYNC_WRITE_LEN, sync_duration)?;
    let overwrite = overwrite_fdatasync_rate(work, SYNC_WRITE_LEN, sync_duration)?;
    eprintln!(
        "raw append + fdatasync: {rate:.0}/s; overwrite + fdatasync: {overwrite:.0}/s; load average {}",
        payonce_bench::load_average()
    );
    comparison.fdatasync_rates.push(rate);
    comparison.overwrite_fdatasync_rates.push(overwrite);
    Ok(())
}

/// Every round of the timed runs with `threads` threads, checks that the
/// stores answered each round alike, and adds each store's combined run
/// to the comparison. Returns a line per store with each round's rate.
fn measure_runs(
    plan: &Plan,
    work: &Path,
    stores: &[StoreKind],
    threads: usize,
    total: usize,
    comparison: &mut Comparison,
) -> anyhow::Result<Vec<String>> {
    let per_thread = (total / threads / plan.rounds).max(1);
    let mut by_store: Vec<Vec<RunFigures>> = vec![Vec::new(); stores.len()];
    for round in 0..plan.rounds {
        let seed = plan.seed.wrapping_add(round as u64);
        let mut reports: Vec<RunFigures> = Vec::new();
        // A rotating order, so no store always runs first after a pause.
        for turn in 0..stores.len() {
            let index = (turn + round) % stores.len();
            let dir = work.join(format!("{}-{threads}-{round}", store_arg(stores[index])));
            let report = timed_run_in_child(stores[index], &dir, seed, threads, per_thread, round)?;
            by_store[index].push(report.clone());
            reports.push(report);
        }
        if let Some(differ) = disagreements(&reports) {
            bail!(
                "the stores answered the {threads}-thread workload of round {round} differently: {differ:?}"
            );
        }
    }
    let mut spreads = Vec::new();
    for reports in &by_store {
        if let Some(combined) = combine_rounds(reports) {
            let rates: Vec<String> = combined
                .round_rates
                .iter()
                .map(|rate| format!("{rate:.0}"))
                .collect();
            spreads.push(format!(
                "{}, {threads} threads: {}",
                combined.store,
                rates.join(", ")
            ));
            comparison.runs.push(combined);
        }
    }
    Ok(spreads)
}

/// One timed run of `store` in a child, in `dir`, which is removed after.
fn timed_run_in_child(
    store: StoreKind,
    dir: &Path,
    seed: u64,
    threads: usize,
    per_thread: usize,
    round: usize,
) -> anyhow::Result<RunFigures> {
    let mut child_args = vec!["run".to_owned()];
    child_args.extend(arg("store", store_arg(store)));
    child_args.extend(arg("dir", dir.display()));
    child_args.extend(arg("seed", seed));
    child_args.extend(arg("threads", threads));
    child_args.extend(arg("submissions-per-thread", per_thread));
    child_args.extend(arg("mix", "standard"));
    let report: RunFigures = child(&child_args)?;
    eprintln!(
        "{store}, {threads} threads, round {round}: {:.0} submits/s, p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs, {:?}",
        report.submits_per_sec,
        report.latency_p50_us,
        report.latency_p99_us,
        report.latency_max_us,
        report.tally
    );
    fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    Ok(report)
}

/// Builds a large state in each store and times its reopening, each in a
/// child, and checks that the stores answered the build alike.
fn measure_opens(
    plan: &Plan,
    work: &Path,
    stores: &[StoreKind],
    comparison: &mut Comparison,
) -> anyhow::Result<()> {
    let mut tallies = Vec::new();
    // sled with and without the added fdatasync build the same files and
    // open them alike: the state is built once, as sled.
    for &store in stores
        .iter()
        .filter(|&&store| store != StoreKind::SledFlushOnly)
    {
        let dir = work.join(format!("{}-open", store_arg(store)));
        let built = build_in_child(store, &dir, plan.seed, plan.open_submissions)?;
        let opened = open_in_child(store, &dir, &built)?;
        eprintln!(
            "{store}: built {} submissions in {:.1} s (relaxed), {:.1} MiB on disk; opened in {:.0} ms",
            built.submissions,
            built.elapsed_secs,
            built.disk_bytes as f64 / f64::from(1u32 << 20),
            opened.open_secs * 1000.0
        );
        if let Some(records) = opened.log_records {
            println!(
                "{store} replayed {records} events at open: {:.0} events/s",
                records as f64 / opened.open_secs
            );
        }
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        tallies.push((store, built.tally.clone()));
        comparison.opens.push((built, opened));
    }
    if tallies.iter().any(|(_, tally)| *tally != tallies[0].1) {
        bail!("the stores answered the build's workload differently: {tallies:?}");
    }
    Ok(())
}

/// Builds the state after `submissions` in a child, and checks that the
/// files did not change once the child closed the store.
fn build_in_child(
    store: StoreKind,
    dir: &Path,
    seed: u64,
    submissions: usize,
) -> anyhow::Result<BuildFigures> {
    let mut build_args = vec!["build".to_owned()];
    build_args.extend(arg("store", store_arg(store)));
    build_args.extend(arg("dir", dir.display()));
    build_args.extend(arg("seed", seed));
    build_args.extend(arg("submissions", submissions));
    let built: BuildFigures = child(&build_args)?;
    ensure!(
        built.disk_bytes == disk_bytes(dir)?,
        "{store}: the files changed after the build closed the store"
    );
    Ok(built)
}

/// Reopens the built state in a child, and checks that it gives the probe
/// key's outcome as the build recorded it.
fn open_in_child(
    store: StoreKind,
    dir: &Path,
    built: &BuildFigures,
) -> anyhow::Result<OpenFigures> {
    let mut open_args = vec!["open".to_owned()];
    open_args.extend(arg("store", store_arg(store)));
    open_args.extend(arg("dir", dir.display()));
    open_args.extend(arg("probe-key", &built.probe_key));
    let opened: OpenFigures = child(&open_args)?;
    ensure!(
        opened.probe_reference.as_deref() == Some(built.probe_reference.as_str()),
        "{store}: after reopening, key {} answers {:?}, not {:?}",
        built.probe_key,
        opened.probe_reference,
        built.probe_reference
    );
    Ok(opened)
}

/// The table, each round's rates when there were several, and the closing
/// line.
fn print_results(comparison: &Comparison, rounds: usize, spreads: &[String]) {
    println!();
    print!("{}", comparison.table());
    if rounds > 1 {
        println!("submits/s of each round (the table shows the median):");
        for spread in spreads {
            println!("- {spread}");
        }
    }
    println!(
        "every store answered every submission alike; load average at end {}",
        payonce_bench::load_average()
    );
}
