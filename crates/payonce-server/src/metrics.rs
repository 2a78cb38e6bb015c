//! What the service counts, and its Prometheus text exposition.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use payonce::MemoryUse;

/// Upper bounds of the durable-commit latency buckets, in seconds.
pub const COMMIT_BUCKETS: [f64; 12] = [
    0.000_5, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// The service's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Answers by kind: `created`, `sent`, `replayed`, `rail_refused`,
    /// `outcome_unknown`, `resolved`, `released`, `corrected`, and each
    /// refusal's problem type.
    decisions: Mutex<BTreeMap<&'static str, u64>>,
    /// One count per bucket of [`COMMIT_BUCKETS`], then the overflow.
    commit_buckets: [AtomicU64; COMMIT_BUCKETS.len() + 1],
    commit_count: AtomicU64,
    commit_nanos: AtomicU64,
    /// TLS handshakes on the listener that failed, by [`HandshakeFailure`].
    handshake_failures: [AtomicU64; HandshakeFailure::ALL.len()],
}

/// Why a TLS handshake on the listener failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeFailure {
    /// It was not done within the header read time.
    TimedOut,
    /// It failed: a client without an acceptable certificate, one that
    /// speaks no TLS (plain HTTP on the HTTPS port), or one that went away.
    Refused,
}

impl HandshakeFailure {
    /// Every reason, in the order the metric lists them.
    pub const ALL: [HandshakeFailure; 2] = [HandshakeFailure::TimedOut, HandshakeFailure::Refused];

    /// Its `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            HandshakeFailure::TimedOut => "timed_out",
            HandshakeFailure::Refused => "refused",
        }
    }
}

/// What the ledger's queue looks like at one scrape.
#[derive(Debug, Clone, Copy, Default)]
pub struct InFlightGauge {
    /// Keys in flight.
    pub keys: usize,
    /// Age of the oldest, in seconds (0 when none).
    pub oldest_age: Duration,
}

impl Metrics {
    /// Counts one decision of `kind`.
    pub fn decided(&self, kind: &'static str) {
        *self
            .decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(kind)
            .or_default() += 1;
    }

    /// How many decisions of `kind` were counted.
    pub fn decisions(&self, kind: &str) -> u64 {
        let decisions = self
            .decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        decisions.get(kind).copied().unwrap_or(0)
    }

    /// Records one durable commit that took `elapsed`.
    pub fn committed(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let bucket = COMMIT_BUCKETS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(COMMIT_BUCKETS.len());
        self.commit_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.commit_count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.commit_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Counts one TLS handshake on the listener that failed.
    pub fn handshake_failed(&self, why: HandshakeFailure) {
        self.handshake_failures[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How many TLS handshakes on the listener failed for `why`.
    pub fn handshake_failures(&self, why: HandshakeFailure) -> u64 {
        self.handshake_failures[why as usize].load(Ordering::Relaxed)
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self, in_flight: InFlightGauge, memory: Option<MemoryUse>) -> String {
        let mut text = String::new();
        text.push_str("# HELP payonce_decisions_total Answers the service gave, by kind.\n");
        text.push_str("# TYPE payonce_decisions_total counter\n");
        let decisions = self
            .decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (kind, count) in decisions {
            let _ = writeln!(text, "payonce_decisions_total{{kind=\"{kind}\"}} {count}");
        }
        text.push_str("# HELP payonce_keys_in_flight Keys whose outcome is unknown.\n");
        text.push_str("# TYPE payonce_keys_in_flight gauge\n");
        let _ = writeln!(text, "payonce_keys_in_flight {}", in_flight.keys);
        text.push_str(
            "# HELP payonce_key_in_flight_oldest_age_seconds Age of the oldest key in flight.\n",
        );
        text.push_str("# TYPE payonce_key_in_flight_oldest_age_seconds gauge\n");
        let _ = writeln!(
            text,
            "payonce_key_in_flight_oldest_age_seconds {}",
            in_flight.oldest_age.as_secs_f64()
        );
        self.render_commits(&mut text);
        self.render_handshakes(&mut text);
        if let Some(memory) = memory {
            render_memory(&mut text, &memory);
        }
        text
    }

    fn render_handshakes(&self, text: &mut String) {
        text.push_str(
            "# HELP payonce_tls_handshake_failures_total TLS handshakes on the listener that \
             failed, by reason.\n",
        );
        text.push_str("# TYPE payonce_tls_handshake_failures_total counter\n");
        for why in HandshakeFailure::ALL {
            let _ = writeln!(
                text,
                "payonce_tls_handshake_failures_total{{reason=\"{}\"}} {}",
                why.label(),
                self.handshake_failures(why)
            );
        }
    }

    fn render_commits(&self, text: &mut String) {
        text.push_str(
            "# HELP payonce_durable_commit_seconds Time for a decision to reach stable storage.\n",
        );
        text.push_str("# TYPE payonce_durable_commit_seconds histogram\n");
        let mut cumulative = 0;
        for (bound, count) in COMMIT_BUCKETS.iter().zip(&self.commit_buckets) {
            cumulative += count.load(Ordering::Relaxed);
            let _ = writeln!(
                text,
                "payonce_durable_commit_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.commit_count.load(Ordering::Relaxed);
        let _ = writeln!(
            text,
            "payonce_durable_commit_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let seconds = self.commit_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(text, "payonce_durable_commit_seconds_sum {seconds}");
        let _ = writeln!(text, "payonce_durable_commit_seconds_count {count}");
    }
}

/// What the ledger's state takes of its memory budget.
fn render_memory(text: &mut String, memory: &MemoryUse) {
    let gauges = [
        (
            "payonce_memory_budget_bytes",
            "The ledger state's memory budget.",
            memory.budget,
        ),
        (
            "payonce_memory_live_bytes",
            "Bytes the live keys and their withdrawals take.",
            memory.live_bytes,
        ),
        (
            "payonce_memory_cache_bytes",
            "Bytes of run blocks cached.",
            memory.cache_bytes,
        ),
        (
            "payonce_memory_filter_bytes",
            "Bytes the runs' filters take.",
            memory.filter_bytes,
        ),
        (
            "payonce_live_keys",
            "Keys held in memory.",
            memory.live_keys,
        ),
        (
            "payonce_runs",
            "Runs of settled pairs the state holds.",
            memory.runs as u64,
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(
            text,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
    let _ = writeln!(
        text,
        "# HELP payonce_reads_under_lock_total Lookups in the runs made under the ledger's \
         lock.\n# TYPE payonce_reads_under_lock_total counter\npayonce_reads_under_lock_total {}",
        memory.reads_under_lock
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards against a histogram whose buckets are not cumulative or lose
    // the slow commits.
    #[test]
    fn the_histogram_is_cumulative_and_counts_every_commit() {
        let metrics = Metrics::default();
        metrics.committed(Duration::from_micros(300));
        metrics.committed(Duration::from_millis(3));
        metrics.committed(Duration::from_secs(9));
        metrics.decided("sent");
        let text = metrics.render(InFlightGauge::default(), None);
        assert!(text.contains("payonce_durable_commit_seconds_bucket{le=\"0.0005\"} 1\n"));
        assert!(text.contains("payonce_durable_commit_seconds_bucket{le=\"0.005\"} 2\n"));
        assert!(text.contains("payonce_durable_commit_seconds_bucket{le=\"2.5\"} 2\n"));
        assert!(text.contains("payonce_durable_commit_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("payonce_decisions_total{kind=\"sent\"} 1\n"));
    }

    // Guards against an exposition a Prometheus scraper refuses: a sample
    // without its family's HELP and TYPE, or a value that is not a number;
    // and against a queue gauge that does not show the oldest key's age.
    #[test]
    fn every_sample_is_typed_and_the_queue_shows_its_oldest_age() {
        let metrics = Metrics::default();
        metrics.decided("key-in-flight");
        metrics.committed(Duration::from_millis(1));
        metrics.handshake_failed(HandshakeFailure::TimedOut);
        let in_flight = InFlightGauge {
            keys: 2,
            oldest_age: Duration::from_millis(90_500),
        };
        let text = metrics.render(in_flight, None);
        assert!(text.contains("payonce_keys_in_flight 2\n"), "{text}");
        assert!(
            text.contains("payonce_key_in_flight_oldest_age_seconds 90.5\n"),
            "{text}"
        );
        assert!(text.contains("payonce_decisions_total{kind=\"key-in-flight\"} 1\n"));
        assert!(
            text.contains("payonce_tls_handshake_failures_total{reason=\"timed_out\"} 1\n"),
            "{text}"
        );
        let mut typed = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (family, kind) = rest.split_once(' ').unwrap();
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                typed.push(family.to_owned());
            } else if !line.starts_with("# HELP ") {
                let (sample, value) = line.rsplit_once(' ').unwrap();
                assert!(value.parse::<f64>().is_ok(), "{line}");
                let name = sample.split('{').next().unwrap();
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .filter(|family| typed.iter().any(|t| t == family))
                    .unwrap_or(name);
                assert!(typed.iter().any(|t| t == family), "untyped: {line}");
            }
        }
        assert_eq!(typed.len(), 5, "{text}");
    }
}
