//! Time as the ledger records it, and the clock it reads it from.
//!
//! Decisions never depend on time: the clock only stamps events, so an audit
//! can say when something happened. Timestamps are UTC nanoseconds since the
//! Unix epoch and print as RFC 3339.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A moment, in nanoseconds since 1970-01-01T00:00:00Z.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(u64);

const NANOS_PER_SECOND: u64 = 1_000_000_000;
const SECONDS_PER_DAY: u64 = 86_400;

impl Timestamp {
    /// The last moment a `Timestamp` holds: 2554-07-21T23:34:33.709551615Z.
    pub const LAST: Timestamp = Timestamp(u64::MAX);

    /// The moment `unix_nanos` nanoseconds after the Unix epoch.
    pub const fn from_unix_nanos(unix_nanos: u64) -> Self {
        Timestamp(unix_nanos)
    }

    /// Nanoseconds since the Unix epoch.
    pub const fn unix_nanos(self) -> u64 {
        self.0
    }

    /// How long after `earlier` this is; zero if it is not later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// This moment moved `duration` later, saturating at the end of time.
    pub fn plus(self, duration: Duration) -> Timestamp {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(nanos))
    }

    /// This moment moved `duration` earlier, saturating at the epoch.
    pub fn minus(self, duration: Duration) -> Timestamp {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_sub(nanos))
    }
}

/// Days since 1970-01-01 to a civil date (proleptic Gregorian), after
/// Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // Ranges: month 1..=12, day 1..=31, by construction.
    (year, month as u32, day as u32)
}

/// A civil date to days since 1970-01-01, after Howard Hinnant's
/// `days_from_civil`.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC, with the fraction of a second only when there is one:
    /// `2026-11-30T12:03:07Z`, `2026-11-30T12:03:07.25Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.0 / NANOS_PER_SECOND;
        let nanos = self.0 % NANOS_PER_SECOND;
        let days = (seconds / SECONDS_PER_DAY) as i64;
        let second_of_day = seconds % SECONDS_PER_DAY;
        let (year, month, day) = civil_from_days(days);
        let (hour, minute, second) = (
            second_of_day / 3600,
            second_of_day / 60 % 60,
            second_of_day % 60,
        );
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}"
        )?;
        if nanos != 0 {
            let fraction = format!("{nanos:09}");
            write!(f, ".{}", fraction.trim_end_matches('0'))?;
        }
        f.write_str("Z")
    }
}

/// How many bytes of a refused text an error keeps.
pub const TIMESTAMP_TEXT_MAX: usize = 64;

/// Why a text is not a timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimestampError {
    /// Not an RFC 3339 time.
    Malformed {
        /// The text, as given (its first [`TIMESTAMP_TEXT_MAX`] bytes).
        text: String,
    },
    /// A well-formed RFC 3339 time a `Timestamp` cannot hold: before
    /// 1970-01-01T00:00:00Z or after [`Timestamp::LAST`].
    OutOfRange {
        /// The text, as given (its first [`TIMESTAMP_TEXT_MAX`] bytes).
        text: String,
    },
}

impl TimestampError {
    /// The refused text (its first [`TIMESTAMP_TEXT_MAX`] bytes).
    pub fn text(&self) -> &str {
        match self {
            TimestampError::Malformed { text } | TimestampError::OutOfRange { text } => text,
        }
    }
}

impl fmt::Display for TimestampError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimestampError::Malformed { text } => write!(
                f,
                "{text:?} is not an RFC 3339 time (like 2026-11-30T12:03:07Z or 2026-11-30T13:03:07+01:00)"
            ),
            TimestampError::OutOfRange { text } => write!(
                f,
                "{text:?} is outside the times a ledger records (1970-01-01T00:00:00Z to {})",
                Timestamp::LAST
            ),
        }
    }
}

impl std::error::Error for TimestampError {}

/// The first [`TIMESTAMP_TEXT_MAX`] bytes of `text`, cut at a character.
fn bounded(text: &str) -> String {
    let mut end = text.len().min(TIMESTAMP_TEXT_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The fields of an RFC 3339 text, each in its range, not yet a moment.
struct Civil {
    year: u64,
    month: u64,
    day: u64,
    second_of_day: u64,
    nanos: u64,
    offset_seconds: i64,
}

impl Civil {
    /// Reads `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; `None` when any
    /// part is malformed or out of its field's range.
    fn parse(text: &str) -> Option<Civil> {
        let bytes = text.as_bytes();
        if bytes.len() < 20 || bytes.len() > 40 || !text.is_ascii() {
            return None;
        }
        let number = |range: std::ops::Range<usize>| -> Option<u64> {
            let part = &text[range];
            part.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| part.parse().ok())
                .flatten()
        };
        let separators_ok = bytes[4] == b'-'
            && bytes[7] == b'-'
            && matches!(bytes[10], b'T' | b't' | b' ')
            && bytes[13] == b':'
            && bytes[16] == b':';
        if !separators_ok {
            return None;
        }
        let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
        let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
        let (nanos, rest) = fraction(&text[19..])?;
        let offset_seconds = utc_offset_seconds(rest)?;
        let days_in_month = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
            2 => 28,
            _ => return None,
        };
        // A leap second (:60) is read as the last second of the minute.
        if day == 0 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
            return None;
        }
        let second_of_day = hour * 3600 + minute * 60 + second.min(59);
        Some(Civil {
            year,
            month,
            day,
            second_of_day,
            nanos,
            offset_seconds,
        })
    }

    /// The moment, when a `Timestamp` holds it.
    fn moment(&self) -> Option<Timestamp> {
        // Ranges: year < 10_000, month 1..=12, day 1..=31, by parse.
        let days = days_from_civil(self.year as i64, self.month as u32, self.day as u32);
        let local = days * SECONDS_PER_DAY as i64 + self.second_of_day as i64;
        let utc = u64::try_from(local - self.offset_seconds).ok()?;
        utc.checked_mul(NANOS_PER_SECOND)
            .and_then(|n| n.checked_add(self.nanos))
            .map(Timestamp)
    }
}

impl FromStr for Timestamp {
    type Err = TimestampError;

    /// Parses RFC 3339: `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, `T` or a
    /// space between date and time. A well-formed time outside the range a
    /// `Timestamp` holds is told apart from a malformed one.
    fn from_str(text: &str) -> Result<Self, TimestampError> {
        let civil = Civil::parse(text).ok_or_else(|| TimestampError::Malformed {
            text: bounded(text),
        })?;
        civil.moment().ok_or_else(|| TimestampError::OutOfRange {
            text: bounded(text),
        })
    }
}

/// The nanoseconds of an optional `.fraction` (1 to 9 digits) at the start
/// of `rest`, and what follows it.
fn fraction(rest: &str) -> Option<(u64, &str)> {
    let Some(fraction) = rest.strip_prefix('.') else {
        return Some((0, rest));
    };
    let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 9 {
        return None;
    }
    let nanos = fraction[..digits].parse::<u64>().ok()? * 10u64.pow(9 - digits as u32);
    Some((nanos, &fraction[digits..]))
}

/// The offset from UTC `rest` names, `Z` or `±HH:MM`, in seconds.
fn utc_offset_seconds(rest: &str) -> Option<i64> {
    match rest.as_bytes() {
        [b'Z' | b'z'] => Some(0),
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let digits = [*h1, *h2, *m1, *m2];
            if !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let hours = i64::from((h1 - b'0') * 10 + (h2 - b'0'));
            let minutes = i64::from((m1 - b'0') * 10 + (m2 - b'0'));
            if hours > 23 || minutes > 59 {
                return None;
            }
            let magnitude = hours * 3600 + minutes * 60;
            Some(if *sign == b'+' { magnitude } else { -magnitude })
        }
        _ => None,
    }
}

/// Where events get their time. Behind a trait so tests can drive time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current moment.
    fn now(&self) -> Timestamp;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told: for tests and simulations.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock(AtomicU64::new(start.0))
    }

    /// Moves the clock to `now`.
    pub fn set(&self, now: Timestamp) {
        self.0.store(now.0, Ordering::SeqCst);
    }

    /// Moves the clock `duration` later.
    pub fn advance(&self, duration: Duration) {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(nanos, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}
