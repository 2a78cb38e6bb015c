//! Timestamps as the ledger prints and reads them: RFC 3339, round trips,
//! and refusals that tell a malformed text from a time out of range.

use payonce::{TIMESTAMP_TEXT_MAX, Timestamp, TimestampError};
use proptest::prelude::*;

fn parse(text: &str) -> Result<Timestamp, TimestampError> {
    text.parse()
}

proptest! {
    #[test]
    fn every_timestamp_reads_back_as_itself(nanos in any::<u64>()) {
        let moment = Timestamp::from_unix_nanos(nanos);
        prop_assert_eq!(parse(&moment.to_string()), Ok(moment));
    }

    #[test]
    fn an_offset_names_the_same_moment_as_utc(seconds in 86_400u64..4_000_000_000, minutes in 0i64..(24 * 60)) {
        let moment = Timestamp::from_unix_nanos(seconds * 1_000_000_000);
        let local = Timestamp::from_unix_nanos((seconds as i64 + minutes * 60) as u64 * 1_000_000_000);
        let utc = local.to_string();
        let text = format!("{}+{:02}:{:02}", &utc[..utc.len() - 1], minutes / 60, minutes % 60);
        prop_assert_eq!(parse(&text), Ok(moment));
    }
}

#[test]
fn the_epoch_and_the_last_moment_are_in_range() {
    assert_eq!(
        parse("1970-01-01T00:00:00Z"),
        Ok(Timestamp::from_unix_nanos(0))
    );
    assert_eq!(parse("2554-07-21T23:34:33.709551615Z"), Ok(Timestamp::LAST));
    assert_eq!(
        Timestamp::LAST.to_string(),
        "2554-07-21T23:34:33.709551615Z"
    );
}

#[test]
fn well_formed_times_outside_the_range_are_out_of_range_not_malformed() {
    for text in [
        "1969-12-31T23:59:59Z",
        "1970-01-01T00:30:00+01:00",
        "2554-07-21T23:34:33.709551616Z",
        "9999-12-31T23:59:59Z",
        "1600-02-29T00:00:00Z",
    ] {
        let error = parse(text).unwrap_err();
        assert_eq!(
            error,
            TimestampError::OutOfRange {
                text: text.to_owned()
            },
            "{text}"
        );
        assert!(error.to_string().contains("2554-07-21T23:34:33.709551615Z"));
    }
}

#[test]
fn malformed_texts_are_malformed_and_echoed_bounded() {
    for text in [
        "",
        "yesterday",
        "2026-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-11-30T24:00:00Z",
        "2026-11-30T12:00:00",
        "2026-11-30T12:00:00+24:00",
        "2026-11-30T12:00:00.Z",
        "2026-11-30T12:00:00.1234567891Z",
        "2026-11-30T12:00:00Zjunk",
    ] {
        assert_eq!(
            parse(text),
            Err(TimestampError::Malformed {
                text: text.to_owned()
            }),
            "{text}"
        );
    }
    let long = "ä".repeat(100);
    let error = parse(&long).unwrap_err();
    assert!(matches!(error, TimestampError::Malformed { .. }));
    assert!(error.text().len() <= TIMESTAMP_TEXT_MAX);
    assert!(long.starts_with(error.text()));
}

#[test]
fn a_leap_second_reads_as_the_last_second_of_its_minute() {
    assert_eq!(parse("2016-12-31T23:59:60Z"), parse("2016-12-31T23:59:59Z"));
}
