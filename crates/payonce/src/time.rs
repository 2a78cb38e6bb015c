//! Time as the ledger records it, and the clock it reads it from.
//!
//! Decisions never depend on time: the clock only stamps events, so an audit
//! can say when something happened. Timestamps are UTC nanoseconds since the
//! Unix epoch and print as RFC 3339.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::time::OffsetDateTime;
use ::time::format_description::well_known::Rfc3339;
use serde::{Deserialize, Serialize};

/// A moment, in nanoseconds since 1970-01-01T00:00:00Z.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(u64);

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

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC, with the fraction of a second only when there is one:
    /// `2026-11-30T12:03:07Z`, `2026-11-30T12:03:07.25Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Every u64 of nanoseconds is a moment before the year 2555, which
        // `time` holds and RFC 3339 prints.
        let moment = OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.0))
            .map_err(|_| fmt::Error)?;
        f.write_str(&moment.format(&Rfc3339).map_err(|_| fmt::Error)?)
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

/// `text` as the `time` crate's RFC 3339 parser takes it, when it holds
/// to the rules that parser leaves open: `T`, `t` or a space between date
/// and time, at most 9 digits of fraction, and a leap second (`:60`) read
/// as the last second of its minute.
fn rfc3339_text(text: &str) -> Option<Cow<'_, str>> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 || bytes.len() > 40 || !text.is_ascii() {
        return None;
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') {
        return None;
    }
    let fraction_digits = text[19..].strip_prefix('.').map_or(0, |fraction| {
        fraction.bytes().take_while(u8::is_ascii_digit).count()
    });
    if fraction_digits > 9 {
        return None;
    }
    if &text[17..19] == "60" {
        return Some(Cow::Owned(format!("{}59{}", &text[..17], &text[19..])));
    }
    Some(Cow::Borrowed(text))
}

impl FromStr for Timestamp {
    type Err = TimestampError;

    /// Parses RFC 3339: `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, `T` or a
    /// space between date and time. A well-formed time outside the range a
    /// `Timestamp` holds is told apart from a malformed one.
    fn from_str(text: &str) -> Result<Self, TimestampError> {
        let moment = rfc3339_text(text)
            .and_then(|text| OffsetDateTime::parse(&text, &Rfc3339).ok())
            .ok_or_else(|| TimestampError::Malformed {
                text: bounded(text),
            })?;
        u64::try_from(moment.unix_timestamp_nanos())
            .map(Timestamp)
            .map_err(|_| TimestampError::OutOfRange {
                text: bounded(text),
            })
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
