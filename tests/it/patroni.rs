//! Failovers payonce does not choose: PostgreSQL under Patroni and etcd
//! (`tests/src/patroni.rs`), workers reaching every member through one URL
//! with `sslmode=verify-full`. The leader is killed under the synchronous
//! failover test's load, or cut off from etcd and from the workers while it
//! runs on, and Patroni fences it and promotes the synchronous standby on
//! its own; etcd loses its quorum, and Patroni stops every write.
//!
//! `PAYONCE_PATRONI_KILLS` and `PAYONCE_PATRONI_PARTITIONS` set how many
//! faults of each kind (3 by default; the long mode of docs/reliability.md
//! runs 100 of each), and `PAYONCE_PATRONI_SEED` replays the moments chosen.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use payonce_log::Head;
use payonce_tests::fleet::{self, Checked, Fleet, Said, Told};
use payonce_tests::patroni::{Patroni, TIMINGS};
use payonce_tests::rng::{Rng, seed_from_env};

use crate::failover::{assert_verify_clean, count_from_env};

const WORKERS: usize = 4;
const THREADS: usize = 4;
/// Withdrawals per round, each raced on by every thread of every worker.
const WITHDRAWALS: usize = 16;

/// Answers that reach the test this soon after a kill were given before
/// it: the old leader acknowledged them. Nothing is answered anew before
/// Patroni's leader key expires, seconds later.
const ANSWERED_BEFORE: Duration = Duration::from_millis(500);

fn worker_bin() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_failover_worker"))
}

/// What a run of faults measured.
#[derive(Default)]
struct Run {
    told: Told,
    heads_read: Vec<Head>,
    checked: Checked,
    /// From each fault to the first submission answered again, ms.
    windows_ms: Vec<u64>,
}

impl Run {
    /// The checks after a fault, on the ledger the new leader holds: the
    /// chain verifies (`payonce verify URL` too), no withdrawal sent twice,
    /// every send's claim and every outcome told there, every head read
    /// still in the log, every withdrawal of the round claimed.
    fn check(
        &mut self,
        url: &str,
        fleet: &Fleet,
        withdrawals: &[payonce_model::WithdrawalRequest],
    ) {
        assert!(self.told.rewound.is_empty(), "{:?}", self.told.rewound);
        let (report, head) = payonce_postgres::verify(url).unwrap();
        assert!(report.is_clean(), "{:?}", report.divergences);
        assert_eq!(head.seq, report.events);
        assert_verify_clean(url);
        let heads: Vec<_> = self
            .told
            .heads
            .iter()
            .chain(&self.heads_read)
            .copied()
            .collect();
        self.checked = fleet::check(&report.state, &fleet.sends(), &self.told, &heads, |seq| {
            payonce_postgres::head_through(url, seq).unwrap().1
        });
        let claimed: HashSet<_> = withdrawals
            .iter()
            .filter(|request| report.state.claimed_by(request.id()).is_some())
            .collect();
        assert_eq!(
            claimed.len(),
            withdrawals.len(),
            "a withdrawal nobody claimed"
        );
    }

    /// The median and the worst window, ms.
    fn windows(&self) -> (u64, u64) {
        let mut sorted = self.windows_ms.clone();
        sorted.sort_unstable();
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
        (median, sorted.last().copied().unwrap_or(0))
    }

    fn report(&self, what: &str, faults: usize, started: Instant) {
        let (median, worst) = self.windows();
        eprintln!(
            "{what} {faults} in {:?} (ttl {} s, loop_wait {} s, retry_timeout {} s): {} sends \
             checked, {} outcomes told, {} losers told the holder, {} heads read; {} answers \
             \"cannot record\", the slowest {} ms; from the fault to the first submission \
             answered again: median {median} ms, worst {worst} ms",
            started.elapsed(),
            TIMINGS.ttl,
            TIMINGS.loop_wait,
            TIMINGS.retry_timeout,
            self.checked.sends,
            self.checked.outcomes,
            self.checked.losers,
            self.checked.heads,
            self.told.errors,
            self.told.slowest_error_ms,
        );
    }
}

/// Reads what the workers say until each finished its round; also the time
/// from `fault` to the first answer after it that the old leader cannot
/// have given.
fn finish_round_timed(fleet: &Fleet, fault: Instant) -> (Vec<Said>, Option<u64>) {
    let mut said = Vec::new();
    let mut window = None;
    let mut done = 0;
    while done < WORKERS {
        let line = fleet.next_line();
        if line.line == "done" {
            done += 1;
            continue;
        }
        let answer = ["told ", "lost "]
            .iter()
            .any(|word| line.line.starts_with(word));
        if answer && window.is_none() && fault.elapsed() > ANSWERED_BEFORE {
            window = Some(fault.elapsed().as_millis() as u64);
        }
        said.push(line);
    }
    (said, window)
}

#[test]
fn patroni_kills_of_the_leader_under_load_lose_no_acknowledged_claim_and_send_nothing_twice() {
    // Guards against a failover Patroni makes on its own (the leader's PostgreSQL and Patroni SIGKILLed, the synchronous standby promoted once the leader key expires) losing a claim whose send ran or an outcome a client was told, sending a withdrawal twice, or leaving workers that do not follow the new leader through their URL.
    let kills = count_from_env("PAYONCE_PATRONI_KILLS", 3);
    let seed = seed_from_env("PAYONCE_PATRONI_SEED");
    eprintln!("PAYONCE_PATRONI_SEED={seed} PAYONCE_PATRONI_KILLS={kills}");
    let mut rng = Rng::new(seed);
    let Some(mut cluster) = Patroni::start() else {
        return;
    };
    let url = cluster.url().to_owned();
    let driver = fleet::driver(&url, "driver");
    let mut fleet = Fleet::start(worker_bin(), &url, WORKERS, THREADS);
    let mut run = Run::default();
    let answers = WORKERS * THREADS * WITHDRAWALS;
    let started = Instant::now();
    for round in 0..kills {
        let withdrawals = fleet::create(&driver, WITHDRAWALS, round);
        run.heads_read.push(driver.head().unwrap());
        fleet.round(&withdrawals);
        let before = fleet.answers(1 + rng.below(answers as u64 / 2) as usize);
        run.heads_read.push(payonce_postgres::head(&url).unwrap());
        let killed_at = Instant::now();
        let killed = cluster.kill_leader();
        let (rest, window) = finish_round_timed(&fleet, killed_at);
        run.windows_ms.extend(window);
        run.told.add(&before);
        run.told.add(&rest);
        run.check(&url, &fleet, &withdrawals);
        // Back to three members, so the next kill has a synchronous
        // standby to promote and a third to stream to.
        cluster.restart(killed);
        cluster.wait_ready().unwrap();
        if (round + 1) % 10 == 0 {
            run.report("kills so far:", round + 1, started);
        }
    }
    fleet.stop();
    drop(driver);
    run.report("Patroni leader kills", kills, started);
    assert!(run.checked.sends <= kills * WITHDRAWALS);
    assert!(run.checked.sends > 0, "the load ran");
}
