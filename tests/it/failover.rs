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

use payonce_log::Head;
use payonce_model::WithdrawalRequest;
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
pub(crate) fn count_from_env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|text| text.parse().unwrap_or_else(|_| panic!("{name}={text}")))
        .unwrap_or(default)
}

/// Runs the `payonce` command line with `args` as its binary does, and
/// returns its exit code and what it printed.
pub(crate) fn payonce(args: &[&str]) -> (i32, String) {
    use clap::Parser;
    let words = std::iter::once("payonce").chain(args.iter().copied());
    let cli = payonce_cli::Cli::try_parse_from(words).unwrap();
    let env = payonce_cli::Env::quiet(payonce::Timestamp::default());
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = match payonce_cli::run(cli, &env, &mut out, &mut err) {
        Ok(status) => status.code(),
        Err(error) => error.exit_code(),
    };
    (code, String::from_utf8_lossy(&out).into_owned())
}

/// `payonce verify URL` finds the log clean.
pub(crate) fn assert_verify_clean(url: &str) {
    let (code, out) = payonce(&["verify", url]);
    assert_eq!(code, payonce_cli::EXIT_OK, "payonce verify: {out}");
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
    failovers_under_load(&mut pair, &url, failovers, &mut rng);
}

/// `failovers` rounds of 4 workers of 4 threads racing on the ledger at
/// `url`, which reaches `pair`, each round's primary killed and its
/// standby promoted at a random moment, and the checks after each.
pub(crate) fn failovers_under_load(pair: &mut Pair, url: &str, failovers: usize, rng: &mut Rng) {
    let url = url.to_owned();
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
        assert_verify_clean(&url);
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

/// What a worker said when it refused a rewound log: the last event it
/// read, where the log now ends, and how many events are missing.
fn how_far(message: &str) -> (u64, u64, u64) {
    let after = |marker: &str| -> u64 {
        let (_, rest) = message
            .split_once(marker)
            .unwrap_or_else(|| panic!("no {marker:?} in {message}"));
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap()
    };
    let short = message
        .split_once(" events short")
        .and_then(|(before, _)| before.rsplit(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no count of missing events in {message}"));
    (
        after("read the log to event "),
        after("now ends at event "),
        short,
    )
}

#[test]
fn an_asynchronous_failover_that_loses_commits_is_refused_shown_and_repaired_by_the_runbook() {
    // Guards against workers appending to a promoted standby that lacks commits they saw (a retry would be sent twice), a refusal that does not say how far the log went back, an expected head whose loss is not reported, and a runbook (docs/postgres.md) whose steps do not repair it.
    let Some(mut pair) = Pair::start(Replication::Asynchronous) else {
        return;
    };
    let url = pair.url().to_owned();
    let driver = fleet::driver(&url, "driver");
    let mut fleet = Fleet::start(worker_bin(), &url, WORKERS, THREADS);
    let mut told = Told::default();
    let kept = fleet::create(&driver, WITHDRAWALS, 0);
    // Created while the standby streams: only their claims are lost.
    let lost = fleet::create(&driver, WITHDRAWALS, 1);
    drop(driver);
    fleet.round(&kept);
    told.add(&fleet.finish_round());
    pair.cut_standby_off();
    let shipped = payonce_postgres::head(&url).unwrap();
    fleet.round(&lost);
    told.add(&fleet.finish_round());
    // An auditor keeps the head before the failover.
    let kept = payonce_postgres::head(&url).unwrap();
    assert!(kept.seq > shipped.seq);
    let sent_before = fleet.sends();
    pair.kill_and_promote();

    // Step 1: clients retry; every worker refuses, saying how far the log
    // went back, and sends nothing.
    fleet.round(&lost);
    let mut refused = Told::default();
    refused.add(&fleet.finish_round());
    assert!(refused.outcomes.is_empty() && refused.lost.is_empty());
    assert_eq!(refused.rewound.len(), WORKERS * THREADS * WITHDRAWALS);
    for (key, message) in &refused.rewound {
        let (read, end, short) = how_far(message);
        assert_eq!(end, shipped.seq, "{key}: {message}");
        assert!(read > end && read <= kept.seq, "{key}: {message}");
        assert_eq!(short, read - end, "{message}");
    }
    assert_eq!(
        fleet.sends(),
        sent_before,
        "a send while the workers refuse"
    );
    fleet.stop();
    runbook(&url, &kept, &shipped, &sent_before, &told, &lost);
}

/// The runbook of docs/postgres.md ("Replication and failover"), step by
/// step from step 2, after an asynchronous failover that lost the commits
/// after `shipped`; `kept` is the head an auditor kept before it.
fn runbook(
    url: &str,
    kept: &Head,
    shipped: &Head,
    sent: &[(String, String)],
    told: &Told,
    lost_round: &[WithdrawalRequest],
) {
    // Step 2: `payonce head URL --expect-head` reports the kept head
    // gone, and `payonce head URL` where the log now ends.
    let (code, out) = payonce(&["head", url, "--expect-head", &kept.to_string()]);
    assert_eq!(
        code,
        payonce_cli::EXIT_PROBLEM,
        "payonce head --expect-head: {out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&shipped.to_string().as_str()), "{out}");
    let expected = format!("no batch of the log ends at event {}", kept.seq);
    assert!(
        lines[1].starts_with("EXPECTED HEAD NOT FOUND") && lines[1].contains(&expected),
        "{out}"
    );
    let (code, out) = payonce(&["head", url]);
    assert_eq!(
        (code, out.trim_end()),
        (payonce_cli::EXIT_OK, shipped.to_string().as_str())
    );
    // Step 3: what was lost.
    let lost = lost_sends(url, sent, told, lost_round);
    eprintln!(
        "asynchronous failover: {} events lost ({} to {}), {} acknowledged claims whose send \
         ran lost, and as many outcomes told",
        kept.seq - shipped.seq,
        shipped.seq + 1,
        kept.seq,
        lost.len(),
    );
    // Step 4: each lost send recorded under its key with the rail's
    // outcome, without calling the rail.
    let ops = payonce_postgres::open(url, "ops-recovery", payonce::Config::default()).unwrap();
    for (id, key) in &lost {
        let request = lost_round.iter().find(|r| r.id().as_str() == id).unwrap();
        let recorded = |request: &WithdrawalRequest| Ok(request.sent(format!("0x{key}"))?);
        ops.submit(key, request, recorded).unwrap();
    }
    drop(ops);
    // Step 5: keep the new head, start the workers again; clients retry.
    let kept_again = payonce_postgres::head(url).unwrap();
    let mut fleet = Fleet::start(worker_bin(), url, WORKERS, THREADS);
    fleet.round(lost_round);
    let mut again = Told::default();
    again.add(&fleet.finish_round());
    assert!(fleet.sends().is_empty(), "a lost send sent again");
    assert!(again.rewound.is_empty(), "{:?}", again.rewound);
    let lost_keys: HashSet<_> = lost.iter().map(|(_, key)| key).collect();
    for told in told
        .outcomes
        .iter()
        .filter(|(key, _)| lost_keys.contains(key))
    {
        assert!(again.outcomes.contains(told), "{told:?} not replayed");
    }
    fleet.stop();
    assert_verify_clean(url);
    let (report, head) = payonce_postgres::verify(url).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    fleet::check(&report.state, sent, &again, &[kept_again], |seq| {
        payonce_postgres::head_through(url, seq).unwrap().1
    });
    assert!(head.seq > kept_again.seq);
}

/// The sends (withdrawal, key) whose claim the log at `url` lost, checked
/// to be those of `lost_round` and to match the outcomes clients were
/// told that it lost.
fn lost_sends(
    url: &str,
    sent: &[(String, String)],
    told: &Told,
    lost_round: &[WithdrawalRequest],
) -> Vec<(String, String)> {
    let (report, _) = payonce_postgres::verify(url).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergences);
    let state = &report.state;
    let holder = |id: &str| state.claimed_by(id).map(|key| key.to_string());
    let lost: Vec<_> = sent
        .iter()
        .filter(|(id, key)| holder(id).as_ref() != Some(key))
        .cloned()
        .collect();
    let ids: HashSet<_> = lost_round.iter().map(|r| r.id().to_string()).collect();
    assert_eq!(lost.len(), WITHDRAWALS, "each of the last round's sends");
    assert!(lost.iter().all(|(id, _)| ids.contains(id)));
    let lost_outcomes: HashSet<_> = told
        .outcomes
        .iter()
        .filter(|(key, _)| state.outcome(key).is_none())
        .map(|(key, _)| key.clone())
        .collect();
    let lost_keys: HashSet<_> = lost.iter().map(|(_, key)| key.clone()).collect();
    assert_eq!(lost_outcomes, lost_keys, "the outcomes told of those sends");
    lost
}
