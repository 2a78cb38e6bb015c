//! When a ledger takes snapshots: every so many events or so much time,
//! whichever comes first, and at a clean close; never so often that
//! taking them costs more than a set share of the time.

use std::time::Duration;

/// Events after the last snapshot at which a ledger takes the next, by
/// default: the most a reopening replays past its newest snapshot
/// (docs/performance.md: about 0.25 s of replay).
pub const SNAPSHOT_EVENTS: u64 = 1_000_000;

/// Time after the last snapshot at which a ledger with new events takes
/// the next, by default.
pub const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(600);

/// The most of the time a ledger spends taking snapshots, in percent: after
/// a snapshot that took `t`, the next waits at least `t × (100 / share -
/// 1)`, however many events come, so a large state is snapshotted less
/// often rather than more expensively.
pub const SNAPSHOT_SHARE_MAX: u32 = 5;

/// Whether a ledger opens from snapshots of its projections, and when it
/// takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// Open from the newest snapshot the log vouches for (the default);
    /// `false` replays every event, as an auditor's verify does.
    pub load: bool,
    /// Take one once this many events followed the last; `0` for never by
    /// count.
    pub events: u64,
    /// Take one once this long passed since the last and an event came;
    /// `None` for never by time.
    pub interval: Option<Duration>,
    /// Take one when the ledger is closed cleanly (its last handle dropped).
    pub at_close: bool,
    /// The most of the time taking snapshots may cost, in percent (1 to 100).
    pub share_max: u32,
}

impl Default for SnapshotPolicy {
    fn default() -> Self {
        SnapshotPolicy {
            load: true,
            events: SNAPSHOT_EVENTS,
            interval: Some(SNAPSHOT_INTERVAL),
            at_close: true,
            share_max: SNAPSHOT_SHARE_MAX,
        }
    }
}

impl SnapshotPolicy {
    /// Never take a snapshot (the ledger still opens from the ones it has).
    pub fn never() -> Self {
        SnapshotPolicy {
            load: true,
            events: 0,
            interval: None,
            at_close: false,
            share_max: SNAPSHOT_SHARE_MAX,
        }
    }

    /// Neither open from snapshots nor take any: every opening replays
    /// every event.
    pub fn off() -> Self {
        SnapshotPolicy {
            load: false,
            ..SnapshotPolicy::never()
        }
    }

    /// Whether snapshots are taken while the ledger runs.
    pub fn is_running(&self) -> bool {
        self.events > 0 || self.interval.is_some()
    }

    /// How long to wait after a snapshot that took `took` before the next,
    /// so that taking them costs at most [`SnapshotPolicy::share_max`]
    /// percent of the time.
    pub fn rest_after(&self, took: Duration) -> Duration {
        let share = self.share_max.clamp(1, 100);
        took.saturating_mul(100 / share - 1)
            .saturating_add(took.saturating_mul(100 % share) / share)
    }
}
