//! Durations as operators type them (`30m`, `2h`, `45s`, `1d`, `1h30m`), and
//! ages as they read them.

use std::time::Duration;

/// Longest duration text accepted, in bytes; checked before parsing.
pub const DURATION_TEXT_LEN_MAX: usize = 32;

/// Parses a duration: one or more `<digits><unit>` parts, unit `s`, `m`,
/// `h` or `d`, such as `30m`, `2h`, `45s`, `1d` or `1h30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let refuse = |why: &str| {
        format!(
            "{:?} is not a duration ({why}); write digits and a unit: 45s, 30m, 2h, 1d, 1h30m",
            text.chars().take(DURATION_TEXT_LEN_MAX).collect::<String>()
        )
    };
    if text.is_empty() {
        return Err(refuse("it is empty"));
    }
    if text.len() > DURATION_TEXT_LEN_MAX {
        return Err(refuse("it is too long"));
    }
    let mut seconds: u64 = 0;
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit: u64 = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(refuse("unknown unit")),
        };
        if digits.is_empty() {
            return Err(refuse("a unit without a number"));
        }
        let part = digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(unit))
            .ok_or_else(|| refuse("it is too large"))?;
        seconds = seconds
            .checked_add(part)
            .ok_or_else(|| refuse("it is too large"))?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(refuse("a number without a unit"));
    }
    Ok(Duration::from_secs(seconds))
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
