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

use crate::failover::{count_from_env, payonce};

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
    /// Faults after which Patroni promoted no member (see
    /// [`promoted_or_stalled`]).
    stalls: usize,
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
        let (report, head) = until_answered("verify", || payonce_postgres::verify(url));
        assert!(report.is_clean(), "{:?}", report.divergences);
        assert_eq!(head.seq, report.events);
        until_answered("payonce verify", || match payonce(&["verify", url]) {
            (payonce_cli::EXIT_OK, _) => Ok(()),
            (code, out) => Err(format!("exit {code}: {out}")),
        });
        let heads: Vec<_> = self
            .told
            .heads
            .iter()
            .chain(&self.heads_read)
            .copied()
            .collect();
        self.checked = fleet::check(&report.state, &fleet.sends(), &self.told, &heads, |seq| {
            until_answered("head_through", || payonce_postgres::head_through(url, seq)).1
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
             answered again: median {median} ms, worst {worst} ms; {} faults after which \
             Patroni promoted no member until the old leader was back",
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
            self.stalls,
        );
    }
}

/// Waits for Patroni to promote a member other than `old` after a fault
/// to the leader `old`; `true` if it promoted none within four `ttl`s because etcd named no
/// synchronous standby when the fault came (the leader was changing it,
/// which Patroni does by taking the old one's right to be promoted away
/// first): then Patroni waits for the old leader, by design, and the stall
/// is counted. A stall with a synchronous standby named fails the test.
fn promoted_or_stalled(cluster: &Patroni, run: &mut Run, old: usize) -> bool {
    let wait = Duration::from_secs(4 * u64::from(TIMINGS.ttl));
    let promoted = cluster.wait_until("a member promoted", wait, |c| c.leader_but(old).is_some());
    if promoted.is_ok() {
        return false;
    }
    let dcs = cluster.dcs();
    assert_eq!(
        dcs.sync_standby, None,
        "Patroni promoted no member: {dcs:?}"
    );
    eprintln!("no member promoted: etcd named no synchronous standby ({dcs:?})");
    run.stalls += 1;
    true
}

/// What `ask` answers, asked again while it fails for at most a minute:
/// under load a member may lose the leader key for a moment, and none
/// takes writes until Patroni elects one again.
fn until_answered<T, E: std::fmt::Display>(what: &str, mut ask: impl FnMut() -> Result<T, E>) -> T {
    let started = Instant::now();
    loop {
        match ask() {
            Ok(answer) => return answer,
            Err(error) if started.elapsed() < Duration::from_secs(60) => {
                eprintln!("{what}: {error}; asking again");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(error) => panic!("{what}: {error}"),
        }
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
        run.heads_read
            .push(until_answered("head", || driver.head()));
        fleet.round(&withdrawals);
        let before = fleet.answers(1 + rng.below(answers as u64 / 2) as usize);
        run.heads_read
            .push(until_answered("head", || payonce_postgres::head(&url)));
        let killed_at = Instant::now();
        let killed = cluster.kill_leader();
        promoted_or_stalled(&cluster, &mut run, killed);
        // Its service manager starts it again, as systemd would: it rejoins
        // as a standby of the new leader (or, after a stall, leads again).
        cluster.restart(killed);
        let (rest, window) = finish_round_timed(&fleet, killed_at);
        run.windows_ms.extend(window);
        run.told.add(&before);
        run.told.add(&rest);
        run.check(&url, &fleet, &withdrawals);
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

/// Every batch row of the ledger on member `n`, over its socket: first
/// event, last event, digest, and when its transaction began (as the
/// servers' logs write it).
fn batches(cluster: &Patroni, n: usize) -> Vec<(i64, i64, Vec<u8>, String)> {
    let url = cluster.members[n].socket_url(payonce_tests::patroni::DATABASE);
    let mut client = payonce_postgres::client(&url).unwrap();
    client
        .query(
            "SELECT first_seq, last_seq, digest, \
             to_char(committed_at AT TIME ZONE current_setting('log_timezone'), \
             'YYYY-MM-DD HH24:MI:SS.MS') FROM payonce.batches ORDER BY first_seq",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect()
}

/// The timestamp (`log_line_prefix = '%m '`, one format and zone on every
/// member, so they compare as text) of the last line of `log` that `is`
/// holds, or of the entry it continues.
fn last_logged(log: &str, is: impl Fn(&str) -> bool) -> Option<String> {
    let mut stamp: Option<&str> = None;
    let mut found = None;
    for line in log.lines() {
        if line.len() > 23 && line.as_bytes()[4] == b'-' && line.as_bytes()[10] == b' ' {
            stamp = Some(&line[..23]);
        }
        if is(line) {
            found = stamp.map(str::to_owned);
        }
    }
    found
}

/// What the servers' logs and the chain show of a cut-off leader `old`
/// and the member `new` Patroni promoted: no batch was inserted on `old`
/// after `new`'s promotion, and every batch `old` holds that `new` does
/// not was begun before it. Returns how many batches `old` holds that
/// `new` does not (commits that waited for the synchronous standby, cut
/// off too, and were never acknowledged).
fn fenced(cluster: &Patroni, old: usize, new: usize) -> usize {
    let promoted = last_logged(&cluster.members[new].server_log(), |line| {
        line.contains("received promote request")
    })
    .expect("the promoted member's log shows its promotion");
    let inserted = last_logged(&cluster.members[old].server_log(), |line| {
        line.contains("INSERT INTO payonce.batches")
    })
    .expect("the old leader's log shows its batches");
    assert!(
        inserted < promoted,
        "a batch inserted on the old leader at {inserted}, after {} was promoted at {promoted}",
        cluster.members[new].name()
    );
    assert!(
        cluster.members[old]
            .patroni_log()
            .contains("demoting self because DCS is not accessible and I was a leader"),
        "Patroni did not demote the cut-off leader for want of etcd"
    );
    let kept: std::collections::HashMap<i64, (i64, Vec<u8>)> = batches(cluster, new)
        .into_iter()
        .map(|(first, last, digest, _)| (first, (last, digest)))
        .collect();
    let lacking: Vec<_> = batches(cluster, old)
        .into_iter()
        .filter(|(first, last, digest, _)| kept.get(first) != Some(&(*last, digest.clone())))
        .collect();
    for (first, last, _, begun) in &lacking {
        assert!(
            begun.as_str() < &promoted[..23],
            "batch {first}..{last}, on the old leader only, was begun at {begun}, after the \
             promotion at {promoted}"
        );
    }
    lacking.len()
}

/// The rest of a round whose leader `old` was cut off at `cut_at` and a
/// new one promoted: what the workers said, once the old leader is
/// demoted and the evidence of [`fenced`] checked, and the link healed.
fn cut_off_round(
    cluster: &Patroni,
    fleet: &Fleet,
    run: &mut Run,
    old: usize,
    cut_at: Instant,
) -> (Vec<Said>, usize) {
    let new = cluster.leader_but(old).unwrap();
    let promoted_after = cut_at.elapsed();
    let (rest, window) = finish_round_timed(fleet, cut_at);
    run.windows_ms.extend(window);
    let finished_after = cut_at.elapsed();
    cluster
        .wait_until(
            "the cut-off leader demoted",
            Duration::from_secs(120),
            |c| c.takes_writes(old) == Some(false),
        )
        .unwrap();
    eprintln!(
        "{} promoted after {promoted_after:?}, the round finished after {finished_after:?}, \
         the old leader read-only after {:?}",
        cluster.members[new].name(),
        cut_at.elapsed()
    );
    let lacking = fenced(cluster, old, new);
    cluster.net.heal(Patroni::net_member(old));
    (rest, lacking)
}

#[test]
fn patroni_leader_cut_off_from_etcd_and_the_workers_is_fenced_and_no_write_lands_on_it_after_the_promotion()
 {
    // Guards against a leader that runs on, cut off from etcd and from the workers, taking a write after Patroni promoted its synchronous standby (two primaries), and against the workers not following the promotion.
    let partitions = count_from_env("PAYONCE_PATRONI_PARTITIONS", 3);
    let seed = seed_from_env("PAYONCE_PATRONI_SEED");
    eprintln!("PAYONCE_PATRONI_SEED={seed} PAYONCE_PATRONI_PARTITIONS={partitions}");
    let mut rng = Rng::new(seed);
    let Some(cluster) = Patroni::start() else {
        return;
    };
    let url = cluster.url().to_owned();
    let driver = fleet::driver(&url, "driver");
    let mut fleet = Fleet::start(worker_bin(), &url, WORKERS, THREADS);
    let (mut run, mut lacking) = (Run::default(), 0);
    let answers = WORKERS * THREADS * WITHDRAWALS;
    let started = Instant::now();
    for round in 0..partitions {
        let withdrawals = fleet::create(&driver, WITHDRAWALS, round);
        run.heads_read
            .push(until_answered("head", || driver.head()));
        fleet.round(&withdrawals);
        let before = fleet.answers(1 + rng.below(answers as u64 / 2) as usize);
        run.heads_read
            .push(until_answered("head", || payonce_postgres::head(&url)));
        let old = cluster.leader().unwrap();
        let cut_at = Instant::now();
        cluster.net.cut(Patroni::net_member(old));
        let rest = match promoted_or_stalled(&cluster, &mut run, old) {
            true => {
                cluster.net.heal(Patroni::net_member(old));
                let (rest, window) = finish_round_timed(&fleet, cut_at);
                run.windows_ms.extend(window);
                rest
            }
            false => {
                let (rest, fenced_batches) = cut_off_round(&cluster, &fleet, &mut run, old, cut_at);
                lacking += fenced_batches;
                rest
            }
        };
        run.told.add(&before);
        run.told.add(&rest);
        run.check(&url, &fleet, &withdrawals);
        cluster.wait_ready().unwrap();
        if (round + 1) % 10 == 0 {
            run.report("partitions so far:", round + 1, started);
        }
    }
    fleet.stop();
    drop(driver);
    run.report("Patroni leader partitions", partitions, started);
    eprintln!(
        "batches the cut-off leaders held that the promoted ones did not (never acknowledged, \
         rewound when they rejoined): {lacking}"
    );
    assert!(run.checked.sends > 0, "the load ran");
}

/// Submits `request` again and again for 3 s while no member takes
/// writes: every submission must be answered "cannot record" and its send
/// never run. Returns how many were.
fn refused_meanwhile(
    driver: &payonce::Ledger,
    request: &payonce_model::WithdrawalRequest,
) -> usize {
    let (mut refused, observed) = (0, Instant::now());
    while observed.elapsed() < Duration::from_secs(3) {
        let sent = std::cell::Cell::new(false);
        let result = driver.submit(&format!("driver-{refused}"), request, |request| {
            sent.set(true);
            Ok(request.sent("0xnever")?)
        });
        let error = result.expect_err("an answer while etcd has no quorum");
        assert!(!sent.get(), "a send while etcd has no quorum: {error}");
        let said = error.to_string();
        assert!(said.contains("shared log"), "{said}");
        refused += 1;
        // A client's pace, not a wait for anything.
        std::thread::sleep(Duration::from_millis(10));
    }
    refused
}

#[test]
fn patroni_without_an_etcd_quorum_demotes_its_leader_and_workers_answer_cannot_record_never_sent() {
    // Guards against a worker being told "sent", or a send running, while etcd has lost its quorum and Patroni can no longer hold a leader, and against the workers not serving again once etcd has its quorum back.
    let Some(cluster) = Patroni::start() else {
        return;
    };
    let url = cluster.url().to_owned();
    let driver = fleet::driver(&url, "driver");
    let mut fleet = Fleet::start(worker_bin(), &url, WORKERS, THREADS);
    let withdrawals = fleet::create(&driver, WITHDRAWALS, 0);
    let leader = cluster.leader().unwrap();
    // Two of three members hang: no quorum.
    cluster.etcd.freeze(1).unwrap();
    cluster.etcd.freeze(2).unwrap();
    let lost_at = Instant::now();
    let wait = Duration::from_secs(120);
    cluster
        .wait_until("no member takes writes", wait, |c| c.leader().is_none())
        .unwrap();
    let demoted_after = lost_at.elapsed();
    assert!(
        cluster.members[leader]
            .patroni_log()
            .contains("demoting self because DCS is not accessible and I was a leader"),
        "{}",
        cluster.members[leader].patroni_log()
    );
    fleet.round(&withdrawals);
    let refused = refused_meanwhile(&driver, &withdrawals[0]);
    assert!(
        fleet.said_so_far().is_empty(),
        "a worker answered while etcd had no quorum"
    );
    assert!(fleet.sends().is_empty(), "a send while etcd had no quorum");
    cluster.etcd.thaw(1).unwrap();
    cluster.etcd.thaw(2).unwrap();
    let back_at = Instant::now();
    let mut told = Told::default();
    told.add(&fleet.finish_round());
    let served_after = back_at.elapsed();
    let (report, _) = payonce_postgres::verify(&url).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    let checked = fleet::check(&report.state, &fleet.sends(), &told, &told.heads, |seq| {
        payonce_postgres::head_through(&url, seq).unwrap().1
    });
    fleet.stop();
    eprintln!(
        "etcd without quorum: the leader demoted itself {demoted_after:?} after, {refused} \
         submissions answered \"cannot record\" and none sent meanwhile; the workers' round \
         finished {served_after:?} after the quorum was back: {} sends, {} outcomes told",
        checked.sends, checked.outcomes
    );
    assert_eq!(checked.sends, WITHDRAWALS);
}
