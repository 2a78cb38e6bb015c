//! The driver: spawns the child, kills it at a random moment, checks and
//! classifies what survived, many times over.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use super::backend::{Backend, run_write_cut, snapshot_write_cut};
use super::check::{Seen, check_after_kill};
use super::child::{ChildArgs, READY, to_args};
use super::point::{KillPoint, KillTable};
use super::trail::read_trail;
use crate::rng::Rng;

/// What a crash run does.
#[derive(Debug, Clone)]
pub struct CrashConfig {
    /// Where the ledger is kept.
    pub backend: Backend,
    /// The child binary (`CARGO_BIN_EXE_crash_child` in a test).
    pub child: PathBuf,
    /// Kills, one per round.
    pub kills: u64,
    /// Decides every delay and every child's seed.
    pub seed: u64,
    /// Submitting threads in each child.
    pub threads: usize,
    /// Rounds on one ledger before the next round starts a fresh one.
    pub rounds_per_ledger: u64,
    /// The share of kills timed from the spawn, to land during open.
    pub open_percent: u64,
    /// Submitting kills land uniformly in this long after the readiness
    /// line.
    pub submitting_window: Duration,
}

/// What a crash run found.
#[derive(Debug, Clone)]
pub struct CrashOutcome {
    /// Where the kills landed.
    pub table: KillTable,
    /// Ledgers started fresh.
    pub ledgers: u64,
    /// Sends the rail recorded, over every ledger.
    pub sends: usize,
    /// Outcomes acknowledged, over every ledger.
    pub acks: usize,
    /// The longest time from spawning a child to reading its readiness line.
    pub open_max: Duration,
    /// Kills that cut a snapshot's write short (its temporary file left).
    pub snapshot_writes_cut: u64,
    /// Kills that cut a run's write short, a snapshot's or a merge's (its
    /// temporary file left).
    pub run_writes_cut: u64,
    /// Reopenings after a kill that started from a snapshot.
    pub opens_from_snapshot: u64,
    /// How long the run took.
    pub elapsed: Duration,
}

/// A failed check, in the round it failed in.
#[derive(Debug, Clone)]
pub struct CrashFailure {
    /// The kill whose checks failed, numbered from 1.
    pub kill: u64,
    /// What broke.
    pub message: String,
    /// The ledger and trails that show it, kept for inspection.
    pub dir: PathBuf,
}

/// One ledger's life: its directory (the ledger, each round's trails, the
/// child's stderr) and what its rounds recorded.
struct Life {
    dir: PathBuf,
    /// Where its ledger is: a directory, or a database's URL.
    ledger: PathBuf,
    seen: Seen,
}

impl Life {
    fn ledger(&self) -> PathBuf {
        self.ledger.clone()
    }
}

/// Runs `config.kills` rounds in directories under `root`, and returns
/// where the kills landed, or the first failed check.
///
/// Every `rounds_per_ledger` rounds the next round starts on a fresh
/// ledger, so the log a child replays stays as short in the last round as
/// in the first, and each kill tests the same mix of phases.
pub fn run(config: &CrashConfig, root: &Path) -> Result<CrashOutcome, CrashFailure> {
    let started = Instant::now();
    let mut rng = Rng::new(config.seed);
    let mut report = CrashOutcome {
        table: KillTable::default(),
        ledgers: 0,
        sends: 0,
        acks: 0,
        open_max: Duration::ZERO,
        snapshot_writes_cut: 0,
        run_writes_cut: 0,
        opens_from_snapshot: 0,
        elapsed: Duration::ZERO,
    };
    // How long recent children took to be ready. A kill during open is
    // timed within the shortest of them: open times vary (mostly with the
    // disk's sync latency), and a kill timed within a typical one would
    // often find the child already submitting.
    let mut opens = RecentOpens::default();
    let mut life: Option<Life> = None;
    for round in 0..config.kills {
        if round.is_multiple_of(config.rounds_per_ledger) {
            if let Some(done) = life.take() {
                report.sends += done.seen.sends();
                report.acks += done.seen.acks();
                std::fs::remove_dir_all(&done.dir).unwrap();
            }
            let dir = root.join(format!("ledger-{}", report.ledgers));
            std::fs::create_dir_all(&dir).unwrap();
            life = Some(Life {
                ledger: config.backend.new_location(&dir),
                dir,
                seen: Seen::default(),
            });
            report.ledgers += 1;
        }
        let life = life.as_mut().expect("a life was started above");
        let timing = Timing {
            in_open: rng.percent(config.open_percent),
            open_delay: Duration::from_micros(rng.below(opens.shortest().as_micros() as u64 + 1)),
            submitting_delay: Duration::from_micros(
                rng.below(config.submitting_window.as_micros() as u64 + 1),
            ),
        };
        let child_seed = rng.next_u64();
        let checked = kill_and_check(config, life, round, child_seed, &timing);
        if let Ok((_, snapshots)) = &checked {
            report.snapshot_writes_cut += u64::from(snapshots.write_cut);
            report.run_writes_cut += u64::from(snapshots.run_cut);
            report.opens_from_snapshot += u64::from(snapshots.opened_from);
        }
        match checked.map(|(killed, _)| killed) {
            Ok(Killed::Open) => report.table.add_open(),
            Ok(Killed::Submitting { open, points }) => {
                report.table.add_submitting(&points);
                if let Some(open) = open {
                    opens.push(open);
                    report.open_max = report.open_max.max(open);
                }
            }
            Err(message) => {
                return Err(CrashFailure {
                    kill: round + 1,
                    message,
                    dir: life.dir.clone(),
                });
            }
        }
        if (round + 1).is_multiple_of(1000) {
            eprintln!(
                "crash test: {} kills in {:.0} s",
                round + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    if let Some(done) = life {
        report.sends += done.seen.sends();
        report.acks += done.seen.acks();
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// The last few times from spawning a child to reading its readiness line.
#[derive(Default)]
struct RecentOpens {
    opens: std::collections::VecDeque<Duration>,
}

impl RecentOpens {
    /// How many are kept.
    const LEN_MAX: usize = 8;

    fn push(&mut self, open: Duration) {
        if self.opens.len() == Self::LEN_MAX {
            self.opens.pop_front();
        }
        self.opens.push_back(open);
    }

    /// The shortest kept; before any child was ready, a guess of a few
    /// milliseconds.
    fn shortest(&self) -> Duration {
        self.opens
            .iter()
            .copied()
            .min()
            .unwrap_or(Duration::from_millis(5))
    }
}

/// When a round's kill lands.
struct Timing {
    /// Timed from the spawn, to land during open; else from the readiness
    /// line.
    in_open: bool,
    open_delay: Duration,
    submitting_delay: Duration,
}

/// Where a round's kill found the child.
enum Killed {
    /// Before it was ready.
    Open,
    /// Submitting, its threads at `points`; `open` is how long it took to
    /// be ready, if the kill was timed from that.
    Submitting {
        open: Option<Duration>,
        points: Vec<KillPoint>,
    },
}

/// What a round saw of snapshots.
struct RoundSnapshots {
    /// The kill cut a snapshot's write short.
    write_cut: bool,
    /// The kill cut a run's write short: a snapshot's new run, or a
    /// merge's.
    run_cut: bool,
    /// The reopening after it started from a snapshot.
    opened_from: bool,
}

/// One round: spawns a child on `life`'s ledger, kills it as `timing`
/// says, checks what survived and says where the kill landed.
fn kill_and_check(
    config: &CrashConfig,
    life: &mut Life,
    round: u64,
    seed: u64,
    timing: &Timing,
) -> Result<(Killed, RoundSnapshots), String> {
    let trails = life.dir.join("trails").join(format!("round-{round}"));
    std::fs::create_dir_all(&trails).unwrap();
    let args = ChildArgs {
        backend: config.backend,
        ledger: life.ledger(),
        trails: trails.clone(),
        seed,
        threads: config.threads,
    };
    let stderr_path = life.dir.join("child.stderr");
    let spawned = Instant::now();
    let mut child = Command::new(&config.child)
        .args(to_args(&args))
        .stdout(Stdio::piped())
        .stderr(File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let open = if timing.in_open {
        std::thread::sleep(timing.open_delay);
        None
    } else {
        // Reading the pipe is what waits for the child's open to finish;
        // only the kill after it is timed.
        let ready = wait_ready(&mut stdout);
        let open = spawned.elapsed();
        if !ready {
            return Err(stopped(&mut child, &stderr_path, "before it was ready"));
        }
        std::thread::sleep(timing.submitting_delay);
        Some(open)
    };
    child.kill().unwrap();
    let status = child.wait().unwrap();
    let child_error = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    if status.code().is_some() || !child_error.is_empty() {
        return Err(format!(
            "the child exited on its own ({status}): {child_error}"
        ));
    }
    // A pipe keeps what the child wrote after it died: a kill timed from
    // the spawn may still have come after the readiness line.
    let ready = open.is_some() || wait_ready(&mut stdout);
    let trails: Vec<_> = (0..config.threads)
        .map(|thread| read_trail(&trails, thread))
        .collect::<Result<_, _>>()?;
    life.seen.take(&trails)?;
    let write_cut = snapshot_write_cut(config.backend, &life.ledger());
    let run_cut = run_write_cut(config.backend, &life.ledger());
    let (points, opened_from) =
        check_after_kill(config.backend, &life.ledger(), ready, &trails, &life.seen)?;
    let killed = match ready {
        true => Killed::Submitting { open, points },
        false => Killed::Open,
    };
    Ok((
        killed,
        RoundSnapshots {
            write_cut,
            run_cut,
            opened_from,
        },
    ))
}

/// Reads the child's first line: whether it says the child is ready. Ends
/// at the line or when the child closes its output by dying.
fn wait_ready(stdout: &mut BufReader<ChildStdout>) -> bool {
    let mut line = String::new();
    stdout.read_line(&mut line).is_ok() && line.strip_suffix('\n') == Some(READY)
}

/// The message for a child that stopped `when`, after reaping it.
fn stopped(child: &mut Child, stderr_path: &Path, when: &str) -> String {
    // It may have exited already; the kill only makes sure it is gone.
    child.kill().ok();
    let status = child.wait().unwrap();
    let child_error = std::fs::read_to_string(stderr_path).unwrap_or_default();
    format!("the child stopped {when} ({status}): {child_error}")
}
