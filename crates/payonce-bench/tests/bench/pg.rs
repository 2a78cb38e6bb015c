//! The PostgreSQL benchmark's harness: every side does the work it
//! reports, and the database holds it afterwards.

use payonce_bench::pg::{self, Measured, Side};

#[test]
fn every_side_of_the_postgres_benchmark_does_the_work_it_reports() {
    // Guards against a figure for work that was not done durably, or a plain side that skips a step.
    let Some(cluster) = payonce_postgres::cluster::for_tests() else {
        return;
    };
    let mut rows = Vec::new();
    for side in Side::EVERY {
        let url = pg::prepare(cluster, side).unwrap();
        let report = pg::run_worker(side, &url, "bench-0", 2, 0.2, || Ok(())).unwrap();
        assert!(report.units > 0, "{side:?}");
        assert_eq!(report.latencies_us.len() as u64, report.units);
        pg::check(side, &url, report.units).unwrap();
        assert!(
            pg::check(side, &url, report.units + 1).is_err(),
            "the check counts what is there"
        );
        let measured = Measured::combine(side, 2, &[report]);
        assert_eq!(
            measured.decisions_per_sec,
            measured.units_per_sec * side.decisions_per_unit() as f64
        );
        rows.push(measured);
    }
    let table = pg::pg_table(&rows);
    assert_eq!(table.lines().count(), 2 + Side::EVERY.len(), "{table}");
    assert!(table.contains("| payonce | 1 | 2 |"), "{table}");
    let refused = pg::run_worker(
        Side::Raw,
        "postgresql:///none",
        "bench-0",
        0,
        1.0,
        || Ok(()),
    );
    assert!(refused.is_err(), "0 threads is refused before connecting");
}
