//! The network between the workers and the database fails: the database
//! runs in a network namespace of the test's own, the worker processes in
//! this process's namespace reach it over a veth pair, and the test cuts
//! the link (between batches, in the middle of a batch, while a batch's
//! `COMMIT` is in flight), heals it after a random delay, and checks the
//! ledger after each; then races workers over a link that delays and loses
//! packets.
//!
//! `PAYONCE_PARTITIONS` sets how many partitions (20 by default; the long
//! mode of docs/reliability.md runs 500), `PAYONCE_PARTITION_SEED` replays
//! the moments and delays chosen, and `PAYONCE_RACE_WITHDRAWALS` how many
//! withdrawals the race over the slow link has (8 by default).
//!
//! The workers are in this process's namespace and the database in the
//! test's: a test process cannot move itself into another namespace
//! without `setns`, which is unsafe, and cutting the link anywhere cuts
//! both sides off from each other all the same. Every worker shares the
//! one link, so a cut cuts them all: the one whose batch crossed the
//! marker mid-batch or mid-COMMIT, the others wherever they were.

use std::time::{Duration, Instant};

use payonce::Config;
use payonce_tests::fleet::{self, Checked, Fleet, Told};
use payonce_tests::netns::Link;
use payonce_tests::rng::{Rng, seed_from_env};

const WORKERS: usize = 2;
const THREADS: usize = 4;
/// Withdrawals per partition, each raced on by every thread.
const WITHDRAWALS: usize = 8;
/// The longest a partition lasts: past `DEAD_PEER_MAX` and the lookup's
/// patience, so some cuts end connections and lookups, others not.
const HEAL_AFTER_MAX_MS: u64 = 8_000;

/// Where a partition starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moment {
    /// While the workers are idle, before their next round.
    BetweenBatches,
    /// Once a batch took the ledger-wide lock.
    MidBatch,
    /// Once a batch's `COMMIT` went out: the commit lands, its answer not.
    MidCommit,
}

const MOMENTS: [Moment; 3] = [Moment::BetweenBatches, Moment::MidBatch, Moment::MidCommit];

fn count_from_env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|text| text.parse().unwrap_or_else(|_| panic!("{name}={text}")))
        .unwrap_or(default)
}

/// A ledger created in a cluster in `link`'s namespace; its URL over the
/// link.
fn ledger_over(link: &Link, cluster: &payonce_postgres::cluster::Cluster) -> String {
    cluster
        .admin()
        .unwrap()
        .batch_execute("CREATE DATABASE custody")
        .unwrap();
    let url = cluster.tcp_url("custody").unwrap();
    assert!(url.contains(&link.inside_addr), "{url}");
    payonce_postgres::migrate(&url).unwrap();
    drop(payonce_postgres::init(&url, Config::default()).unwrap());
    url
}

/// Starts a round of `withdrawals` with the link cut at `moment`; what
/// the workers said before the cut, and the cut's name if it waits for a
/// marker.
fn start_round_cut(
    link: &Link,
    fleet: &mut Fleet,
    moment: Moment,
    withdrawals: &[payonce_model::WithdrawalRequest],
    rng: &mut Rng,
) -> (Vec<payonce_tests::fleet::Said>, Option<String>) {
    if moment == Moment::BetweenBatches {
        link.partition();
        fleet.round(withdrawals);
        return (Vec::new(), None);
    }
    fleet.round(withdrawals);
    let answers = WORKERS * THREADS * WITHDRAWALS;
    let said = fleet.answers(rng.below(answers as u64 / 4) as usize);
    let marker = match moment {
        Moment::MidBatch => "pg_advisory_xact_lock",
        _ => "COMMIT",
    };
    (said, Some(link.cut_after(marker)))
}

#[test]
fn partitions_between_batches_mid_batch_and_mid_commit_lose_nothing_and_the_workers_serve_again() {
    // Guards against a send without a committed claim, a claim answered twice, an acknowledged outcome lost, or a worker that needs a restart, when the link to the database is cut at any moment of a batch, its COMMIT included, and healed later.
    let partitions = count_from_env("PAYONCE_PARTITIONS", 20);
    let seed = seed_from_env("PAYONCE_PARTITION_SEED");
    eprintln!("PAYONCE_PARTITION_SEED={seed} PAYONCE_PARTITIONS={partitions}");
    let mut rng = Rng::new(seed);
    let Some(link) = Link::make_or_skip() else {
        return;
    };
    let cluster = link.cluster();
    let url = ledger_over(&link, &cluster);
    let driver = fleet::driver(&url, "driver");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_failover_worker"));
    let mut fleet = Fleet::start(bin, &url, WORKERS, THREADS);
    let mut told = Told::default();
    let (mut checked, mut fired) = (Checked::default(), [0; 3]);
    let started = Instant::now();
    for n in 0..partitions {
        let moment = MOMENTS[n % MOMENTS.len()];
        let withdrawals = fleet::create(&driver, WITHDRAWALS, n);
        let heads_before = told.heads.len();
        let heal_after = Duration::from_millis(100 + rng.below(HEAL_AFTER_MAX_MS));
        let (mut said, cut) = start_round_cut(&link, &mut fleet, moment, &withdrawals, &mut rng);
        // The fault's length, not a wait for anything.
        std::thread::sleep(heal_after);
        let cut_fired = cut.as_ref().is_none_or(|cut| link.fired(cut));
        link.heal();
        said.extend(fleet.finish_round());
        told.add(&said);
        if cut_fired {
            fired[n % MOMENTS.len()] += 1;
        }
        let (report, head) = payonce_postgres::verify(&url).unwrap();
        assert!(report.is_clean(), "{:?}", report.divergences);
        assert_eq!(head.seq, report.events);
        // The heads read in this round: the chain checked now passes
        // through them, and every earlier one was checked in its round on
        // a log that only grew since (no failover here), so checking all
        // again each round would only make the long mode quadratic.
        let heads_this_round = &told.heads[heads_before..];
        checked = fleet::check(
            &report.state,
            &fleet.sends(),
            &told,
            heads_this_round,
            |seq| payonce_postgres::head_through(&url, seq).unwrap().1,
        );
        checked.heads = told.heads.len();
        if (n + 1) % 50 == 0 {
            eprintln!("{} partitions in {:?}", n + 1, started.elapsed());
        }
    }
    fleet.stop();
    drop(driver);
    eprintln!(
        "partitions {partitions} in {:?}: cut between batches {}, mid-batch {}, mid-COMMIT {} \
         (the rest healed before a batch crossed the cut); {} sends checked, {} outcomes told, \
         {} losers told the holder; {} answers \"cannot record\", the slowest {} ms",
        started.elapsed(),
        fired[0],
        fired[1],
        fired[2],
        checked.sends,
        checked.outcomes,
        checked.losers,
        told.errors,
        told.slowest_error_ms
    );
    assert!(fired.iter().all(|&count| count > 0) || partitions < MOMENTS.len());
}

/// The link's latency each way, and the share of packets it loses each
/// way, in the race over a slow, lossy link.
const DELAY: Duration = Duration::from_millis(50);
const LOSS_PERCENT: u32 = 5;

#[test]
fn workers_racing_over_a_link_with_50_ms_delay_and_5_percent_loss_send_each_once_and_tell_losers_the_holder()
 {
    // Guards against a slow, lossy link between workers and the database letting two workers both win a withdrawal, or telling a loser a key that does not hold it.
    let withdrawals = count_from_env("PAYONCE_RACE_WITHDRAWALS", 8);
    let Some(link) = Link::make_or_skip() else {
        return;
    };
    let cluster = link.cluster();
    ledger_over(&link, &cluster);
    link.lose(LOSS_PERCENT);
    let database = format!("{}:5432", link.inside_addr).parse().unwrap();
    let relay = payonce_tests::relay::Relay::start(database, DELAY);
    let slow = format!(
        "postgresql://postgres@{}/custody?sslmode=disable",
        relay.addr
    );
    let started = Instant::now();
    crate::postgres::race(&slow, withdrawals);
    eprintln!(
        "the 8x8 race over {} ms each way and {LOSS_PERCENT}% loss each way: {withdrawals} \
         withdrawals, {} submissions, in {:?}",
        DELAY.as_millis(),
        withdrawals * 64,
        started.elapsed()
    );
}
