//! A primary lost under load and its standby promoted: four worker
//! processes of four threads each submit, in rounds, withdrawals they
//! race on, against a rail that records every send durably; the primary
//! is SIGKILLed at a random moment of a round, and the workers carry on
//! against the promoted standby through the URL that names both.
//!
//! `PAYONCE_FAILOVERS` sets how many failovers the synchronous test makes
//! (3 by default; the long mode of docs/reliability.md runs 50), and
//! `PAYONCE_FAILOVER_SEED` replays the moments it chose.

use std::collections::HashSet;

use payonce_postgres::cluster::Replication;
use payonce_tests::fleet::{self, Checked, Fleet, Told};
use payonce_tests::rng::{Rng, seed_from_env};
use payonce_tests::standby::Pair;

const WORKERS: usize = 4;
const THREADS: usize = 4;
/// Withdrawals per round, each raced on by every thread of every worker.
const WITHDRAWALS: usize = 16;

/// How many of something a test makes: `name` from the environment, or
/// `default`.
fn count_from_env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|text| text.parse().unwrap_or_else(|_| panic!("{name}={text}")))
        .unwrap_or(default)
}

fn worker_bin() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_failover_worker"))
}

#[test]
fn a_synchronous_failover_under_load_loses_no_acknowledged_claim_and_sends_nothing_twice() {
    // Guards against a failover to a synchronous standby losing a claim whose send ran or an outcome a client was told, a withdrawal sent twice across it, a head read before it that the promoted log no longer passes through, and workers that do not carry on against the promoted standby.
    let failovers = count_from_env("PAYONCE_FAILOVERS", 3);
    let seed = seed_from_env("PAYONCE_FAILOVER_SEED");
    eprintln!("PAYONCE_FAILOVER_SEED={seed} PAYONCE_FAILOVERS={failovers}");
    let mut rng = Rng::new(seed);
    let Some(mut pair) = Pair::start(Replication::Synchronous) else {
        return;
    };
    let url = pair.url().to_owned();
    let driver = fleet::driver(&url, "driver");
    let mut fleet = Fleet::start(worker_bin(), &url, WORKERS, THREADS);
    let (mut told, mut heads_read) = (Told::default(), Vec::new());
    let mut checked = Checked::default();
    let answers = WORKERS * THREADS * WITHDRAWALS;
    for round in 0..failovers {
        let withdrawals = fleet::create(&driver, WITHDRAWALS, round);
        heads_read.push(driver.head().unwrap());
        fleet.round(&withdrawals);
        // A random moment of the round's first half.
        let before = fleet.answers(1 + rng.below(answers as u64 / 2) as usize);
        heads_read.push(payonce_postgres::head(&url).unwrap());
        pair.kill_and_promote();
        let rest = fleet.finish_round();
        told.add(&before);
        told.add(&rest);
        assert!(told.rewound.is_empty(), "{:?}", told.rewound);

        let (report, head) = payonce_postgres::verify(&url).unwrap();
        assert!(report.is_clean(), "{:?}", report.divergences);
        assert_eq!(head.seq, report.events);
        let heads: Vec<_> = told.heads.iter().chain(&heads_read).copied().collect();
        checked = fleet::check(&report.state, &fleet.sends(), &told, &heads, |seq| {
            payonce_postgres::head_through(&url, seq).unwrap().1
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
        // The next failover needs a synchronous standby again.
        pair.replace_dead_primary();
    }
    fleet.stop();
    drop(driver);
    eprintln!(
        "failovers {failovers}: {} sends checked, {} outcomes told, {} losers told the holder, \
         {} heads read; {} answers \"cannot record\", the slowest {} ms",
        checked.sends,
        checked.outcomes,
        checked.losers,
        checked.heads,
        told.errors,
        told.slowest_error_ms
    );
    // A claim whose commit answer was lost and could not be looked up is
    // recorded as never sent, for an operator: at most one send each.
    assert!(checked.sends <= failovers * WITHDRAWALS);
    assert!(checked.sends > 0, "the load ran");
}
