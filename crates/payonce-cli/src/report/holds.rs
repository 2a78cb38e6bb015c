//! Funds held over the window, per currency: a step chart from the held
//! total at the window's start, through each event that changed it, to the
//! total at its end (what `state --at` says there).

use std::collections::BTreeSet;

use payonce::Timestamp;
use payonce_model::Currency;

use crate::escape::escape;
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;

use super::axis::Axis;
use super::replay::{HoldStep, Replayed};
use super::timeline::n;

const HEIGHT: f64 = 120.0;
const LEFT: f64 = 270.0;
const RIGHT: f64 = 1050.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 100.0;

/// A point of the chart: the held total after an event (or at an edge).
#[derive(Debug, Clone)]
pub(super) struct HoldPoint {
    pub(super) x: String,
    pub(super) y: String,
    /// The held total, exactly.
    pub(super) held: String,
    pub(super) title: String,
}

/// One currency's chart.
#[derive(Debug, Clone)]
pub(super) struct HoldsChart {
    pub(super) currency: String,
    pub(super) path: String,
    pub(super) points: Vec<HoldPoint>,
    pub(super) top_label: String,
    pub(super) top_y: String,
    pub(super) bottom_y: String,
    pub(super) left: String,
    pub(super) right: String,
}

fn value_of(held: Decimal) -> f64 {
    held.to_f64().unwrap_or(0.0)
}

/// The held totals of `currency` over the axis, from `axis.start()` to
/// `end`: the total there, after each event between, and at `end`.
fn values(
    currency: &Currency,
    found: &Replayed,
    axis: &Axis,
    end: Timestamp,
) -> Vec<(Timestamp, Decimal, String)> {
    let start = axis.start();
    let steps: Vec<&HoldStep> = found
        .holds
        .iter()
        .filter(|step| step.currency == *currency && step.at <= end)
        .collect();
    // Before the axis starts (a report that follows some subjects starts
    // it at their first event), the last step before it is the total.
    let (before, during): (Vec<&HoldStep>, Vec<&HoldStep>) =
        steps.into_iter().partition(|step| step.at < start);
    let at_start = before.last().map_or_else(
        || found.start.held.get(currency).copied().unwrap_or_default(),
        |step| step.held,
    );
    let mut values = vec![(start, at_start, format!("at {start}"))];
    for step in during {
        values.push((
            step.at,
            step.held,
            format!("after seq {} ({})", step.seq, step.at),
        ));
    }
    let at_end = values.last().map_or(at_start, |(_, held, _)| *held);
    values.push((end, at_end, format!("at {end}")));
    values
}

/// The chart of `currency`: start, steps, end; `None` if nothing was
/// held in it over the axis.
fn chart(currency: &Currency, found: &Replayed, axis: &Axis, end: Timestamp) -> Option<HoldsChart> {
    let values = values(currency, found, axis, end);
    if values.iter().all(|(_, held, _)| held.is_zero()) {
        return None;
    }
    let max = values
        .iter()
        .map(|(_, held, _)| *held)
        .max()
        .unwrap_or_default();
    let scale = value_of(max).max(f64::MIN_POSITIVE);
    let y = |held: Decimal| BOTTOM - value_of(held) / scale * (BOTTOM - TOP);
    let currency = escape(currency.as_str()).into_owned();
    let mut path = String::new();
    let mut points = Vec::new();
    for (i, (at, held, when)) in values.iter().enumerate() {
        let (px, py) = (axis.x(*at, LEFT, RIGHT), y(*held));
        path.push_str(&match i {
            0 => format!("M{},{}", n(px), n(py)),
            _ => format!(" H{} V{}", n(px), n(py)),
        });
        points.push(HoldPoint {
            x: n(px),
            y: n(py),
            held: held.to_string(),
            title: format!("{held} {currency} held {when}"),
        });
    }
    Some(HoldsChart {
        top_label: format!("{max} {currency}"),
        currency,
        path,
        points,
        top_y: n(TOP),
        bottom_y: n(BOTTOM),
        left: n(LEFT),
        right: n(RIGHT),
    })
}

/// One chart per currency held at some time over the axis.
pub(super) fn charts(found: &Replayed, axis: &Axis, end: Timestamp) -> Vec<HoldsChart> {
    let currencies: BTreeSet<&Currency> = found
        .start
        .held
        .keys()
        .chain(found.end.held.keys())
        .chain(found.holds.iter().map(|step| &step.currency))
        .collect();
    currencies
        .into_iter()
        .filter_map(|currency| chart(currency, found, axis, end))
        .collect()
}

/// The chart's height, in SVG units.
pub(super) fn height() -> String {
    n(HEIGHT)
}
