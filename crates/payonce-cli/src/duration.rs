//! Durations as operators type them (`30m`, `2h`, `45s`, `1d`, `1h30m`,
//! `2 hours`: humantime's units), and ages as they read them.

use std::time::Duration;

use humantime::DurationError;

/// Longest duration text accepted, in bytes; checked before parsing.
pub const DURATION_TEXT_LEN_MAX: usize = 32;

/// Parses a duration: one or more `<digits><unit>` parts, such as `30m`,
/// `2h`, `45s`, `1d` or `1h30m`, with humantime's units (`ms`, `min`,
/// `hours`, `w`, ...).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let refuse = |why: &str| {
        format!(
            "{:?} is not a duration ({why}); write digits and a unit: 45s, 30m, 2h, 1d, 1h30m",
            text.chars().take(DURATION_TEXT_LEN_MAX).collect::<String>()
        )
    };
    if text.len() > DURATION_TEXT_LEN_MAX {
        return Err(refuse("it is too long"));
    }
    humantime::parse_duration(text).map_err(|error| {
        refuse(match error {
            DurationError::Empty => "it is empty",
            DurationError::NumberExpected(at)
                if text
                    .get(at..)
                    .is_some_and(|rest| rest.starts_with(char::is_alphabetic)) =>
            {
                "a unit without a number"
            }
            DurationError::UnknownUnit { unit, .. } if unit.is_empty() => "a number without a unit",
            DurationError::UnknownUnit { .. } => "unknown unit",
            DurationError::NumberExpected(_) | DurationError::InvalidCharacter(_) => {
                "unknown unit or character"
            }
            DurationError::NumberOverflow => "it is too large",
        })
    })
}

/// An age in the two largest units that matter: `3d 4h`, `2h 5m`, `7m 3s`,
/// `45s`.
pub fn format_age(age: Duration) -> String {
    let total = age.as_secs();
    let (days, hours, minutes, seconds) = (
        total / 86_400,
        total / 3600 % 24,
        total / 60 % 60,
        total % 60,
    );
    let two = |major: u64, major_unit: &str, minor: u64, minor_unit: &str| {
        if minor == 0 {
            format!("{major}{major_unit}")
        } else {
            format!("{major}{major_unit} {minor}{minor_unit}")
        }
    };
    if days > 0 {
        two(days, "d", hours, "h")
    } else if hours > 0 {
        two(hours, "h", minutes, "m")
    } else if minutes > 0 {
        two(minutes, "m", seconds, "s")
    } else {
        format!("{seconds}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Guards against misreading the units operators type.
    #[test]
    fn durations_parse_in_every_unit_and_in_combination() {
        assert_eq!(parse_duration("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("2 hours"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
    }

    // Guards against silently accepting a duration that means nothing.
    #[test]
    fn malformed_durations_are_refused_with_the_reason() {
        for (text, why) in [
            ("", "empty"),
            ("30", "without a unit"),
            ("m", "without a number"),
            ("30x", "unknown unit"),
            ("-5m", "unknown unit"),
            ("99999999999999999999d", "too large"),
            ("1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d", "too long"),
        ] {
            let error = parse_duration(text).unwrap_err();
            assert!(error.contains(why), "{text:?}: {error}");
        }
    }

    // Guards against ages that hide the unit that matters.
    #[test]
    fn ages_show_the_two_largest_units() {
        assert_eq!(format_age(Duration::from_secs(45)), "45s");
        assert_eq!(format_age(Duration::from_secs(7 * 60 + 3)), "7m 3s");
        assert_eq!(format_age(Duration::from_secs(2 * 3600 + 5 * 60)), "2h 5m");
        assert_eq!(
            format_age(Duration::from_secs(3 * 86_400 + 4 * 3600)),
            "3d 4h"
        );
        assert_eq!(format_age(Duration::from_secs(30 * 60)), "30m");
        assert_eq!(format_age(Duration::from_secs(86_400 + 59)), "1d");
    }
}
