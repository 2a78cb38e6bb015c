//! The timeline: one lane per withdrawal over the window's time axis,
//! each event a mark (its shape says its kind; its title says what
//! `history` says of it, with its sequence number), and each send a span
//! from its claim to its result. Computed here as numbers and words; the
//! template draws it as inline SVG.

use std::collections::BTreeMap;

use crate::escape::escape;
use payonce::{EventKind, Timestamp};

use crate::duration::format_age;
use crate::explain::explain;

use super::TIMELINE_LANES_MAX;
use super::axis::Axis;
use super::replay::Shown;

/// The drawing's width, in SVG units.
pub(super) const WIDTH: f64 = 1100.0;
/// Where lanes' marks start: the labels are left of it.
const PLOT_LEFT: f64 = 270.0;
const PLOT_RIGHT: f64 = 1050.0;
/// The axis's height above the first lane.
const AXIS: f64 = 34.0;
const LANE: f64 = 24.0;

/// A tick of the time axis.
#[derive(Debug, Clone)]
pub(super) struct Tick {
    pub(super) x: String,
    pub(super) label: String,
}

/// A mark: one event.
#[derive(Debug, Clone)]
pub(super) struct Mark {
    pub(super) seq: u64,
    /// The shape, an SVG path of numbers only.
    pub(super) d: String,
    /// Its kind, a CSS class: created, claimed, outcome, failed, refused...
    pub(super) class: &'static str,
    pub(super) title: String,
}

/// A span: a send from its claim to its result, or a key in flight.
#[derive(Debug, Clone)]
pub(super) struct Span {
    pub(super) x: String,
    pub(super) y: String,
    pub(super) width: String,
    pub(super) class: &'static str,
    pub(super) title: String,
}

/// A quiet stretch drawn shorter than it is (see [`super::axis`]).
#[derive(Debug, Clone)]
pub(super) struct GapMark {
    pub(super) x: String,
    pub(super) width: String,
    /// Its middle, for its label.
    pub(super) middle: String,
    pub(super) label: String,
    pub(super) title: String,
}

/// One lane: a withdrawal (or the ledger's own events) and its keys.
#[derive(Debug, Clone)]
pub(super) struct Lane {
    pub(super) label: String,
    pub(super) keys: String,
    /// Where its label's baseline and its line are.
    pub(super) y: String,
    pub(super) text_y: String,
    pub(super) marks: Vec<Mark>,
    pub(super) spans: Vec<Span>,
}

/// The timeline.
#[derive(Debug, Clone)]
pub(super) struct Timeline {
    pub(super) height: String,
    pub(super) axis_y: String,
    pub(super) plot_left: String,
    pub(super) plot_right: String,
    pub(super) ticks: Vec<Tick>,
    pub(super) lanes: Vec<Lane>,
    /// Withdrawals beyond [`TIMELINE_LANES_MAX`], listed in the table only.
    pub(super) hidden_lanes: usize,
    /// The quiet stretches drawn shorter than they are.
    pub(super) gaps: Vec<GapMark>,
    /// The sequence numbers that have a mark.
    pub(super) marked: std::collections::BTreeSet<u64>,
}

/// A number for SVG: one decimal.
pub(super) fn n(value: f64) -> String {
    format!("{value:.1}")
}

/// The mark's kind, as a CSS class, and its shape around (x, y).
fn shape(kind: &EventKind, x: f64, y: f64) -> (&'static str, String) {
    let (l, r, t, b) = (n(x - 5.0), n(x + 5.0), n(y - 5.0), n(y + 5.0));
    let (x, y) = (n(x), n(y));
    let circle = format!("M{l},{y} a5,5 0 1,0 10,0 a5,5 0 1,0 -10,0");
    let diamond = format!("M{x},{t} L{r},{y} L{x},{b} L{l},{y} Z");
    let triangle = format!("M{x},{t} L{r},{b} L{l},{b} Z");
    let square = format!("M{l},{t} H{r} V{b} H{l} Z");
    match kind {
        EventKind::Created { .. } => ("created", circle),
        EventKind::Claimed { .. } => ("claimed", circle),
        EventKind::Recorded { .. } => ("recorded", square),
        EventKind::Completed { .. } | EventKind::Advanced { .. } => ("outcome", diamond),
        EventKind::SendFailed { .. } => ("failed", triangle),
        EventKind::SendRejected { .. } => ("rejected", triangle),
        EventKind::Refused { .. } => ("refused", format!("M{l},{t} L{r},{b} M{l},{b} L{r},{t}")),
        EventKind::Resolved { .. } | EventKind::Released { .. } | EventKind::Corrected { .. } => {
            ("operator", square)
        }
        _ => ("ledger", format!("M{x},{t} V{b}")),
    }
}

/// Whether `kind` ends the send of `key`, claimed earlier in its lane:
/// `Some(true)` its result came back, `Some(false)` an operator closed it.
fn ends_send(kind: &EventKind, key: &str) -> Option<bool> {
    match kind {
        EventKind::Completed { key: k, .. }
        | EventKind::SendFailed { key: k, .. }
        | EventKind::SendRejected { key: k, .. }
            if k.as_str() == key =>
        {
            Some(true)
        }
        EventKind::Resolved { key: k, .. } | EventKind::Released { key: k, .. }
            if k.as_str() == key =>
        {
            Some(false)
        }
        _ => None,
    }
}

/// The lane's spans: each claim of the window to the result of its send,
/// or to the window's end if none came in it.
fn spans(events: &[&Shown], axis: &Axis, y: f64, end: Timestamp) -> Vec<Span> {
    let mut spans = Vec::new();
    for (i, shown) in events.iter().enumerate() {
        let EventKind::Claimed { key, .. } = &shown.event.kind else {
            continue;
        };
        let result = events[i + 1..]
            .iter()
            .find_map(|later| ends_send(&later.event.kind, key.as_str()).map(|_| later));
        let (until, words) = match result {
            Some(later) => (
                later.event.at,
                format!("until seq {} ({})", later.event.seq, later.event.at),
            ),
            None => (end, "still unanswered at the window's end".to_owned()),
        };
        let x0 = axis.x(shown.event.at, PLOT_LEFT, PLOT_RIGHT);
        let x1 = axis.x(until, PLOT_LEFT, PLOT_RIGHT).max(x0 + 2.0);
        spans.push(Span {
            x: n(x0),
            y: n(y - 4.0),
            width: n(x1 - x0),
            class: if result.is_some() { "send" } else { "open" },
            title: format!(
                "the send under request key {}: claimed at seq {} ({}), {words}",
                escape(key.as_str()),
                shown.event.seq,
                shown.event.at
            ),
        });
    }
    spans
}

/// How far apart marks of one moment are drawn, side by side in log
/// order, so they can be told apart (at most three steps from their time).
const NUDGE: f64 = 8.0;

/// A lane's marks at `y`: each where its time is on `axis`, moved right of
/// the mark before it if they would overlap.
fn marks(events: &[&Shown], axis: &Axis, y: f64) -> Vec<Mark> {
    let mut previous = f64::NEG_INFINITY;
    events
        .iter()
        .map(|shown| {
            let at = axis.x(shown.event.at, PLOT_LEFT, PLOT_RIGHT);
            // A burst too long to set side by side is drawn where it is.
            let x = match previous + NUDGE - at {
                behind if behind > 0.0 && behind <= 3.0 * NUDGE => previous + NUDGE,
                _ => at,
            };
            previous = x;
            let (class, d) = shape(&shown.event.kind, x, y);
            let words = explain(&shown.event, shown.withdrawal.as_ref());
            Mark {
                seq: shown.event.seq,
                d,
                class: match shown.divergence {
                    Some(_) => "diverged",
                    None => class,
                },
                title: format!(
                    "seq {} at {}: {}",
                    shown.event.seq,
                    shown.event.at,
                    escape(&words)
                ),
            }
        })
        .collect()
}

/// The axis's shortened stretches, placed on the plot.
fn gap_marks(axis: &Axis) -> Vec<GapMark> {
    let width = PLOT_RIGHT - PLOT_LEFT;
    axis.gaps()
        .iter()
        .map(|gap| {
            let (x0, x1) = (PLOT_LEFT + gap.from * width, PLOT_LEFT + gap.to * width);
            let length = format_age(gap.length);
            GapMark {
                x: n(x0),
                width: n(x1 - x0),
                middle: n((x0 + x1) / 2.0),
                title: format!(
                    "{length} without an event here, drawn shorter than it is so the events \
                     around it can be told apart"
                ),
                label: length,
            }
        })
        .collect()
}

/// The lanes' subjects in order of first appearance: `None` is the
/// ledger's own lane (openings, worker sessions).
fn group(shown: &[Shown]) -> Vec<(Option<String>, Vec<&Shown>)> {
    let mut order: Vec<Option<String>> = Vec::new();
    let mut lanes: BTreeMap<Option<String>, Vec<&Shown>> = BTreeMap::new();
    for event in shown {
        let lane = event.withdrawal.as_ref().map(ToString::to_string);
        let events = lanes.entry(lane.clone()).or_default();
        if events.is_empty() {
            order.push(lane);
        }
        events.push(event);
    }
    order
        .into_iter()
        .map(|lane| {
            let events = lanes.remove(&lane).unwrap_or_default();
            (lane, events)
        })
        .collect()
}

/// The keys a lane's events touch, in words.
fn keys_of(events: &[&Shown]) -> String {
    let mut keys: Vec<String> = Vec::new();
    for shown in events {
        for key in shown.event.kind.keys_touched() {
            let key = escape(key.as_str()).into_owned();
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    keys.join(", ")
}

impl Timeline {
    /// The timeline of `shown` on `axis`, whose right end is `end`.
    pub(super) fn of(shown: &[Shown], axis: &Axis, end: Timestamp) -> Timeline {
        let grouped = group(shown);
        let hidden_lanes = grouped.len().saturating_sub(TIMELINE_LANES_MAX);
        let mut marked = std::collections::BTreeSet::new();
        let lanes: Vec<Lane> = grouped
            .into_iter()
            .take(TIMELINE_LANES_MAX)
            .enumerate()
            .map(|(i, (lane, events))| {
                let y = AXIS + LANE * i as f64 + LANE / 2.0;
                let marks = marks(&events, axis, y);
                marked.extend(marks.iter().map(|mark| mark.seq));
                Lane {
                    label: lane
                        .map_or_else(|| "the ledger".to_owned(), |id| escape(&id).into_owned()),
                    keys: keys_of(&events),
                    y: n(y),
                    text_y: n(y + 4.0),
                    spans: spans(&events, axis, y, end),
                    marks,
                }
            })
            .collect();
        let height = AXIS + LANE * lanes.len() as f64 + 8.0;
        Timeline {
            height: n(height),
            axis_y: n(AXIS - 14.0),
            plot_left: n(PLOT_LEFT),
            plot_right: n(PLOT_RIGHT),
            ticks: axis
                .ticks(PLOT_LEFT, PLOT_RIGHT)
                .into_iter()
                .map(|(x, label)| Tick { x: n(x), label })
                .collect(),
            lanes,
            hidden_lanes,
            gaps: gap_marks(axis),
            marked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce::{Event, SCHEMA_VERSION};

    fn opened(seq: u64, at: Timestamp) -> Shown {
        Shown {
            event: Event {
                schema: SCHEMA_VERSION,
                seq,
                at,
                kind: EventKind::Opened {
                    accept_foreign_ids: false,
                    epoch: None,
                },
            },
            withdrawal: None,
            divergence: None,
        }
    }

    /// Where a mark's path starts: its x.
    fn x_of(mark: &Mark) -> f64 {
        mark.d[1..mark.d.find(',').unwrap()].parse().unwrap()
    }

    // Guards against marks of one moment drawn on top of each other, or a
    // burst pushed far from its time.
    #[test]
    fn marks_of_one_moment_are_side_by_side_and_a_long_burst_stays_put() {
        let t = Timestamp::from_unix_nanos(1_000_000_000_000);
        let later = t.plus(std::time::Duration::from_secs(60));
        let events: Vec<Shown> = (1..=8)
            .map(|seq| opened(seq, t))
            .chain([opened(9, later)])
            .collect();
        let refs: Vec<&Shown> = events.iter().collect();
        let axis = Axis::new(t, later, &[t, later]);
        let xs: Vec<f64> = marks(&refs, &axis, 50.0).iter().map(x_of).collect();
        let at = axis.x(t, PLOT_LEFT, PLOT_RIGHT);
        assert_eq!(xs[0], at);
        assert!((xs[1] - at - NUDGE).abs() < 0.2, "{xs:?}");
        assert!((xs[3] - at - 3.0 * NUDGE).abs() < 0.2, "{xs:?}");
        assert!(
            (xs[4] - at).abs() < 0.2,
            "past three steps, back to its time: {xs:?}"
        );
        assert_eq!(xs[8], axis.x(later, PLOT_LEFT, PLOT_RIGHT));
    }
}
