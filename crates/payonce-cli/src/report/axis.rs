//! The window's time axis, shared by the timeline and the held-funds
//! charts. An incident is bursts of events with quiet stretches between
//! them (a timeout, then forty minutes until an operator looks): drawn to
//! scale, each burst would be one smudge. So a quiet stretch longer than
//! [`GAP_SHARE`] of the window is drawn as wide as that share of the busy
//! stretches together, and is marked as shortened with its true length;
//! the order of events and the scale within the busy stretches are kept.

use std::time::Duration;

use payonce::Timestamp;

/// A stretch longer than this share of the window is quiet, and is drawn
/// this share of the busy stretches' width.
pub(super) const GAP_SHARE: f64 = 0.06;

/// A quiet stretch drawn shorter than it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Gap {
    /// Where it starts and ends on the axis, as shares of its width.
    pub(super) from: f64,
    pub(super) to: f64,
    /// How long it really was.
    pub(super) length: Duration,
}

/// The axis: times to shares of its width, piecewise linear.
#[derive(Debug, Clone)]
pub(super) struct Axis {
    /// (time in nanoseconds, share of the width), ascending in both; the
    /// first is the window's start at 0, the last its end at 1.
    stops: Vec<(u64, f64)>,
    gaps: Vec<Gap>,
}

impl Axis {
    /// The axis from `t0` to `t1` (a second wide at least) for events at
    /// `times`.
    pub(super) fn new(t0: Timestamp, t1: Timestamp, times: &[Timestamp]) -> Axis {
        let t0 = t0.unix_nanos();
        let t1 = t1.unix_nanos().max(t0.saturating_add(1_000_000_000));
        let mut points: Vec<u64> = times
            .iter()
            .map(|at| at.unix_nanos().clamp(t0, t1))
            .chain([t0, t1])
            .collect();
        points.sort_unstable();
        points.dedup();
        // A stretch longer than `long` is quiet: it weighs a share of what
        // the others weigh together, and the others their length.
        let long = ((t1 - t0) as f64 * GAP_SHARE) as u64;
        let busy: u64 = points
            .windows(2)
            .map(|pair| pair[1] - pair[0])
            .filter(|length| *length <= long)
            .sum();
        let quiet = ((busy as f64 * GAP_SHARE) as u64).max(1);
        let weights: Vec<u64> = points
            .windows(2)
            .map(|pair| match pair[1] - pair[0] {
                length if length > long => quiet.min(length),
                length => length,
            })
            .collect();
        let total: u64 = weights.iter().sum::<u64>().max(1);
        let mut stops = vec![(t0, 0.0)];
        let mut gaps = Vec::new();
        let mut walked = 0;
        for (pair, weight) in points.windows(2).zip(&weights) {
            let from = walked as f64 / total as f64;
            walked += weight;
            let to = walked as f64 / total as f64;
            stops.push((pair[1], to));
            if pair[1] - pair[0] > *weight {
                gaps.push(Gap {
                    from,
                    to,
                    length: Duration::from_nanos(pair[1] - pair[0]),
                });
            }
        }
        Axis { stops, gaps }
    }

    /// The share of the width at which `at` is drawn.
    fn share(&self, at: u64) -> f64 {
        let i = self.stops.partition_point(|(time, _)| *time <= at);
        match (
            i.checked_sub(1).map(|i| self.stops[i]),
            self.stops.get(i).copied(),
        ) {
            (Some((t, s)), Some((t_next, s_next))) => {
                s + (s_next - s) * (at - t) as f64 / (t_next - t) as f64
            }
            (Some((_, s)), None) => s,
            (None, _) => 0.0,
        }
    }

    /// The time drawn at `share` of the width.
    fn time_at(&self, share: f64) -> u64 {
        let i = self.stops.partition_point(|(_, s)| *s <= share);
        match (
            i.checked_sub(1).map(|i| self.stops[i]),
            self.stops.get(i).copied(),
        ) {
            (Some((t, s)), Some((t_next, s_next))) if s_next > s => {
                t + ((t_next - t) as f64 * (share - s) / (s_next - s)) as u64
            }
            (Some((t, _)), _) => t,
            (None, _) => self.stops[0].0,
        }
    }

    /// Where `at` is, between `left` and `right`.
    pub(super) fn x(&self, at: Timestamp, left: f64, right: f64) -> f64 {
        left + self.share(at.unix_nanos()) * (right - left)
    }

    /// Six evenly spaced places with the times drawn there (UTC, to the
    /// second).
    pub(super) fn ticks(&self, left: f64, right: f64) -> Vec<(f64, String)> {
        (0..=5)
            .map(|i| {
                let share = f64::from(i) / 5.0;
                let text = Timestamp::from_unix_nanos(self.time_at(share)).to_string();
                let label = text.get(11..19).unwrap_or(&text).to_owned();
                (left + (right - left) * share, label)
            })
            .collect()
    }

    /// The quiet stretches drawn shorter than they are.
    pub(super) fn gaps(&self) -> &[Gap] {
        &self.gaps
    }

    /// The axis's start time.
    pub(super) fn start(&self) -> Timestamp {
        Timestamp::from_unix_nanos(self.stops[0].0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> Timestamp {
        Timestamp::from_unix_nanos(seconds * 1_000_000_000)
    }

    // Guards against an axis that reorders events or draws a long quiet
    // stretch at full length without saying so.
    #[test]
    fn a_long_quiet_stretch_is_drawn_short_and_marked_and_order_is_kept() {
        let times = [at(0), at(10), at(20), at(2400), at(2410)];
        let axis = Axis::new(at(0), at(2410), &times);
        let xs: Vec<f64> = times.iter().map(|t| axis.x(*t, 0.0, 1.0)).collect();
        assert!(xs.windows(2).all(|pair| pair[0] < pair[1]), "{xs:?}");
        assert_eq!(xs[0], 0.0);
        assert!((xs[4] - 1.0).abs() < 1e-9);
        assert_eq!(axis.gaps().len(), 1);
        let gap = axis.gaps()[0];
        assert_eq!(gap.length, Duration::from_secs(2380));
        assert!(gap.to - gap.from < 0.5, "drawn short: {gap:?}");
        // Within a burst the scale is kept: 0 to 10 as wide as 10 to 20.
        assert!(((xs[1] - xs[0]) - (xs[2] - xs[1])).abs() < 1e-9);
        // Ticks read back the times drawn there.
        let ticks = axis.ticks(0.0, 1.0);
        assert_eq!(ticks[0].1, "00:00:00");
        assert_eq!(ticks[5].1, "00:40:10");
    }

    // Guards against an even stream of events being distorted.
    #[test]
    fn evenly_spread_events_are_drawn_to_scale() {
        let times: Vec<Timestamp> = (0..=100).map(|i| at(i * 60)).collect();
        let axis = Axis::new(at(0), at(6000), &times);
        assert!(axis.gaps().is_empty());
        assert!((axis.x(at(3000), 0.0, 1.0) - 0.5).abs() < 1e-9);
    }
}
