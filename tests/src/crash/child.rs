//! The process the crash test kills: opens the ledger, says it is ready,
//! then submits from several threads through clones of one `Ledger` until
//! it is killed, each thread noting its steps in its own trail.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use payonce::{Ledger, LedgerError, NewWithdrawal, SendFailure, SubmitError};
use payonce_model::{Reference, WithdrawalRequest};

use super::backend::Backend;
use super::trail::{Attempt, Step, TrailWriter};
use crate::rng::Rng;

/// The line the child writes on its standard output once its ledger is
/// open: the driver times submitting kills from reading it.
pub const READY: &str = "ready";

/// What the child is told on its command line.
#[derive(Debug, Clone)]
pub struct ChildArgs {
    /// Where the ledger is kept.
    pub backend: Backend,
    /// The ledger's location (for [`Backend::File`], its directory).
    pub ledger: PathBuf,
    /// Where the threads write their trails.
    pub trails: PathBuf,
    /// Decides every choice the threads make, and names their keys.
    pub seed: u64,
    /// Submitting threads.
    pub threads: usize,
}

/// What every thread may pick from: withdrawals created so far (for second
/// devices) and submissions answered so far (for retries). Shared, so
/// threads race each other for the same withdrawal and key.
#[derive(Default)]
struct Pools {
    withdrawals: Mutex<Vec<WithdrawalRequest>>,
    answered: Mutex<Vec<(String, WithdrawalRequest)>>,
}

fn pick<T: Clone>(pool: &Mutex<Vec<T>>, rng: &mut Rng) -> Option<T> {
    let pool = pool.lock().unwrap();
    if pool.is_empty() {
        return None;
    }
    Some(pool[rng.below(pool.len() as u64) as usize].clone())
}

/// Runs the child: returns only if a submitting thread stopped, which is a
/// failure (the driver kills the child before that).
pub fn run(args: &ChildArgs) {
    let ledger = args.backend.open_for_child(&args.ledger).unwrap();
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{READY}").unwrap();
    stdout.flush().unwrap();

    let pools = Arc::new(Pools::default());
    let mut rng = Rng::new(args.seed);
    let threads: Vec<_> = (0..args.threads)
        .map(|thread| {
            let (ledger, pools) = (ledger.clone(), Arc::clone(&pools));
            let trail = TrailWriter::open(&args.trails, thread).unwrap();
            let (seed, prefix) = (rng.next_u64(), format!("k{:x}-t{thread}", args.seed));
            std::thread::spawn(move || {
                submit_forever(&ledger, &pools, trail, Rng::new(seed), &prefix)
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

/// Submits until the process is killed: new withdrawals mostly, some
/// retries and second devices, one send in ten timing out after it went.
fn submit_forever(
    ledger: &Ledger,
    pools: &Pools,
    mut trail: TrailWriter,
    mut rng: Rng,
    prefix: &str,
) {
    for attempt in 0u64.. {
        let retry = pick(&pools.answered, &mut rng);
        let second = pick(&pools.withdrawals, &mut rng);
        let (kind, key, request) = match (rng.below(10), retry, second) {
            (0, Some((key, request)), _) => (Attempt::Retry, key, request),
            (1, _, Some(request)) => (
                Attempt::Second,
                format!("{prefix}-{attempt}-second"),
                request,
            ),
            _ => {
                trail.note(&Step::Create).unwrap();
                let request = create(ledger);
                pools.withdrawals.lock().unwrap().push(request.clone());
                (Attempt::New, format!("{prefix}-{attempt}"), request)
            }
        };
        trail
            .note(&Step::Begin {
                attempt: kind,
                key: key.clone(),
                withdrawal: request.id().to_string(),
            })
            .unwrap();
        let times_out = rng.percent(10);
        let result = ledger.submit(&key, &request, |request| {
            let reference = format!("0x{}", request.id());
            let send = Step::Send {
                withdrawal: request.id().to_string(),
                key: key.clone(),
                reference: reference.clone(),
            };
            trail.note_durably(&send).unwrap();
            if times_out {
                return Err(SendFailure::failed("rail timed out after the send"));
            }
            let sent = request.approve().and_then(|w| w.start_sending());
            Ok(sent
                .and_then(|w| w.mark_sent(Reference::new(reference).unwrap()))
                .unwrap())
        });
        let answer = match result {
            Ok(outcome) => Step::Ack {
                key: key.clone(),
                reference: outcome
                    .reference()
                    .expect("a sent outcome has a reference")
                    .to_string(),
            },
            Err(SubmitError::Send(_)) => Step::Failed { key: key.clone() },
            Err(SubmitError::Ledger(LedgerError::Refused(_))) => Step::Refused { key: key.clone() },
            Err(other) => panic!("unexpected: {other}"),
        };
        // An acknowledged outcome is what the checks hold the ledger to, so
        // the client keeps it durably; the other answers only place the
        // thread in the table.
        if matches!(answer, Step::Ack { .. }) {
            trail.note_durably(&answer).unwrap();
        } else {
            trail.note(&answer).unwrap();
        }
        // Offered for retries only once answered, so a retry never claims a
        // key before the thread that chose it.
        pools.answered.lock().unwrap().push((key, request));
    }
}

fn create(ledger: &Ledger) -> WithdrawalRequest {
    ledger
        .create(NewWithdrawal {
            amount: "25".parse().unwrap(),
            currency: "USDC".parse().unwrap(),
            destination: "0xabc".parse().unwrap(),
            requested_by: "crash-child".parse().unwrap(),
        })
        .unwrap()
}

/// Parses `BACKEND LEDGER TRAILS SEED THREADS`.
pub fn parse_args(mut args: impl Iterator<Item = String>) -> Result<ChildArgs, String> {
    let usage = "usage: crash_child BACKEND LEDGER TRAILS SEED THREADS";
    let mut next = || args.next().ok_or_else(|| usage.to_owned());
    let backend = next()?;
    let backend = Backend::from_name(&backend).ok_or_else(|| format!("no backend {backend:?}"))?;
    let (ledger, trails) = (PathBuf::from(next()?), PathBuf::from(next()?));
    let seed = next()?.parse().map_err(|_| "SEED is a number".to_owned())?;
    let threads = next()?
        .parse()
        .map_err(|_| "THREADS is a number".to_owned())?;
    Ok(ChildArgs {
        backend,
        ledger,
        trails,
        seed,
        threads,
    })
}

/// The command-line arguments that make a child run `args`.
pub fn to_args(args: &ChildArgs) -> Vec<std::ffi::OsString> {
    let path = |path: &Path| path.as_os_str().to_owned();
    vec![
        args.backend.name().into(),
        path(&args.ledger),
        path(&args.trails),
        args.seed.to_string().into(),
        args.threads.to_string().into(),
    ]
}
