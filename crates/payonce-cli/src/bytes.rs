//! Byte counts as operators type them: `64MiB`, `1GiB`, `512MB`,
//! `268435456`.

use payonce::MEMORY_BUDGET_MIN;

/// Longest byte count text accepted, in bytes; checked before parsing.
pub(crate) const BYTES_TEXT_LEN_MAX: usize = 32;

/// The units taken, and how many bytes each is: binary (`KiB`, `MiB`,
/// `GiB`, `TiB`) and decimal (`kB`, `MB`, `GB`, `TB`), any case.
const UNITS: [(&str, u64); 9] = [
    ("b", 1),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
];

/// Parses a byte count: digits, then a unit or none (bytes).
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let refuse = |why: &str| {
        format!(
            "{:?} is not a byte count ({why}); write digits and a unit: 64MiB, 1GiB, 512MB",
            text.chars().take(BYTES_TEXT_LEN_MAX).collect::<String>()
        )
    };
    if text.len() > BYTES_TEXT_LEN_MAX {
        return Err(refuse("it is too long"));
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(refuse("no number"));
    }
    let unit = unit.trim_start().to_ascii_lowercase();
    let times = match unit.as_str() {
        "" => 1,
        unit => match UNITS.iter().find(|(name, _)| *name == unit) {
            Some((_, times)) => *times,
            None => return Err(refuse("unknown unit")),
        },
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|count| count.checked_mul(times))
        .ok_or_else(|| refuse("it is too large"))
}

/// Parses `--memory-budget`: a byte count of at least
/// [`MEMORY_BUDGET_MIN`].
pub(crate) fn parse_memory_budget(text: &str) -> Result<u64, String> {
    let budget = parse_bytes(text)?;
    if budget < MEMORY_BUDGET_MIN {
        return Err(format!(
            "a memory budget of {budget} bytes is below the least, {MEMORY_BUDGET_MIN} bytes \
             (4MiB)"
        ));
    }
    Ok(budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_decimal_units_and_none() {
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("64mib"), Ok(64 << 20));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("512MB"), Ok(512_000_000));
        assert_eq!(parse_bytes("3 kB"), Ok(3_000));
        assert_eq!(parse_bytes("268435456"), Ok(268_435_456));
        assert_eq!(parse_bytes("10B"), Ok(10));
    }

    #[test]
    fn what_is_no_byte_count_is_refused_saying_why() {
        for (text, why) in [
            ("", "no number"),
            ("MiB", "no number"),
            ("64XB", "unknown unit"),
            ("64MiB5", "unknown unit"),
            ("-1", "no number"),
            ("99999999999TiB", "too large"),
            ("1111111111111111111111111111111111", "too long"),
        ] {
            let refused = parse_bytes(text).unwrap_err();
            assert!(refused.contains(why), "{text}: {refused}");
        }
    }

    #[test]
    fn a_budget_below_the_least_is_refused_naming_it() {
        let refused = parse_memory_budget("1MiB").unwrap_err();
        assert!(refused.contains("4194304"), "{refused}");
        assert_eq!(parse_memory_budget("4MiB"), Ok(MEMORY_BUDGET_MIN));
    }
}
