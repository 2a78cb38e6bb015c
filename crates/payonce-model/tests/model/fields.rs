//! Validated fields: each invalid value refused with its own error, through
//! constructors and through deserialisation alike.

use payonce_model::{
    Actor, Amount, Currency, Destination, Field, FieldError, FingerprintField, Note, Reason,
    Reference, RequestKey, Rule, WithdrawalId, WithdrawalRequest, codec,
};

use crate::make;

fn refused(result: Result<impl std::fmt::Debug, FieldError>) -> (Field, Rule) {
    let error = result.unwrap_err();
    (error.field, error.rule)
}

#[test]
fn each_invalid_withdrawal_id_is_refused_with_its_own_error() {
    assert_eq!(
        refused(WithdrawalId::new("")),
        (Field::WithdrawalId, Rule::Empty)
    );
    assert_eq!(
        refused(WithdrawalId::new("   ")),
        (Field::WithdrawalId, Rule::Blank)
    );
    assert_eq!(
        refused(WithdrawalId::new("w".repeat(129))),
        (Field::WithdrawalId, Rule::TooLong { len: 129, max: 128 })
    );
    assert_eq!(
        refused(WithdrawalId::new("w-1\n")),
        (Field::WithdrawalId, Rule::ControlCharacter { offset: 3 })
    );
    assert_eq!(
        WithdrawalId::new("w".repeat(128)).unwrap().as_str().len(),
        128
    );
}

#[test]
fn a_key_is_trimmed() {
    let key = RequestKey::new("  req-1\t ").unwrap();
    assert_eq!(key.as_str(), "req-1");
    assert_eq!(key, RequestKey::new("req-1").unwrap());
    let from_json: RequestKey = serde_json::from_str("\" req-1 \"").unwrap();
    assert_eq!(from_json, key);
}

#[test]
fn each_invalid_request_key_is_refused_with_its_own_error() {
    assert_eq!(
        refused(RequestKey::new("")),
        (Field::RequestKey, Rule::Empty)
    );
    assert_eq!(
        refused(RequestKey::new(" \t ")),
        (Field::RequestKey, Rule::Empty)
    );
    assert_eq!(
        refused(RequestKey::new(format!(" {} ", "k".repeat(256)))),
        (Field::RequestKey, Rule::TooLong { len: 256, max: 255 })
    );
    assert_eq!(
        RequestKey::new(format!(" {} ", "k".repeat(255)))
            .unwrap()
            .as_str()
            .len(),
        255
    );
    assert_eq!(
        refused(RequestKey::new("req\u{1b}[2J")),
        (Field::RequestKey, Rule::ControlCharacter { offset: 3 })
    );
}

#[test]
fn each_invalid_amount_is_refused_with_its_own_error() {
    assert_eq!(refused(Amount::parse("")), (Field::Amount, Rule::Empty));
    assert_eq!(
        refused(Amount::parse("0")),
        (Field::Amount, Rule::NotPositive)
    );
    assert_eq!(
        refused(Amount::parse("0.000")),
        (Field::Amount, Rule::NotPositive)
    );
    assert_eq!(
        refused(Amount::parse("-5")),
        (Field::Amount, Rule::NotPositive)
    );
    for text in [
        "abc", "1e5", "1.", ".5", "+1", " 1", "1,000", "1.2.3", "NaN", "inf", "--1",
    ] {
        assert_eq!(
            refused(Amount::parse(text)),
            (Field::Amount, Rule::NotADecimal),
            "{text}"
        );
    }
    assert_eq!(
        refused(Amount::parse(&"9".repeat(29))),
        (
            Field::Amount,
            Rule::TooManyDigits {
                digits: 29,
                max: 28
            }
        )
    );
    assert_eq!(
        refused(Amount::parse(&format!("0.{}1", "0".repeat(28)))),
        (
            Field::Amount,
            Rule::TooManyDecimals {
                decimals: 29,
                max: 28
            }
        )
    );
    assert_eq!(
        refused(Amount::parse(&"1".repeat(65))),
        (Field::Amount, Rule::TooLong { len: 65, max: 64 })
    );
    assert_eq!(
        Amount::parse(&"9".repeat(28)).unwrap().to_string(),
        "9".repeat(28)
    );
    assert_eq!(
        Amount::parse("0.0000000000000000000000000001")
            .unwrap()
            .to_string(),
        "0.0000000000000000000000000001"
    );
}

#[test]
fn amounts_are_exact_and_canonical() {
    let a = Amount::parse("25.00").unwrap();
    let b = Amount::parse("25.0").unwrap();
    assert_eq!(a, b);
    assert_eq!(a.to_string(), "25");
    assert_eq!(b.to_string(), "25");
    assert_eq!(Amount::parse("0010.50").unwrap().to_string(), "10.5");
    assert_eq!(serde_json::to_string(&a).unwrap(), "\"25\"");
    // 0.1 + 0.2 is exactly 0.3: no float was involved.
    let sum = Amount::parse("0.1").unwrap().value() + Amount::parse("0.2").unwrap().value();
    assert_eq!(sum, Amount::parse("0.3").unwrap().value());
    let mut w1 = make("w-1");
    let mut w2 = make("w-1");
    w1 = serde_json::from_str(
        &serde_json::to_string(&w1)
            .unwrap()
            .replace("\"25\"", "\"25.0\""),
    )
    .unwrap();
    w2 = serde_json::from_str(
        &serde_json::to_string(&w2)
            .unwrap()
            .replace("\"25\"", "\"25.000\""),
    )
    .unwrap();
    assert_eq!(w1.fingerprint(), w2.fingerprint());
}

#[test]
fn an_amount_is_never_read_from_a_float() {
    assert!(serde_json::from_str::<Amount>("25.5").is_err());
    assert_eq!(
        serde_json::from_str::<Amount>("\"25.5\"")
            .unwrap()
            .to_string(),
        "25.5"
    );
}

#[test]
fn currency_is_upper_cased() {
    assert_eq!(Currency::new("usdc").unwrap().as_str(), "USDC");
    assert_eq!(
        Currency::new("usdc").unwrap(),
        Currency::new("USDC").unwrap()
    );
    let from_json: Currency = serde_json::from_str("\"eur\"").unwrap();
    assert_eq!(from_json.as_str(), "EUR");
}

#[test]
fn each_invalid_currency_is_refused_with_its_own_error() {
    assert_eq!(
        refused(Currency::new("U")),
        (Field::Currency, Rule::TooShort { len: 1, min: 2 })
    );
    assert_eq!(
        refused(Currency::new("")),
        (Field::Currency, Rule::TooShort { len: 0, min: 2 })
    );
    assert_eq!(
        refused(Currency::new("ABCDEFGHIJKLM")),
        (Field::Currency, Rule::TooLong { len: 13, max: 12 })
    );
    assert_eq!(
        refused(Currency::new("US-D")),
        (Field::Currency, Rule::NotAlphanumeric { offset: 2 })
    );
    assert_eq!(
        refused(Currency::new("ÜSD")),
        (Field::Currency, Rule::NotAlphanumeric { offset: 0 })
    );
}

#[test]
fn each_invalid_destination_is_refused_with_its_own_error() {
    assert_eq!(
        refused(Destination::new("")),
        (Field::Destination, Rule::Empty)
    );
    assert_eq!(
        refused(Destination::new("  ")),
        (Field::Destination, Rule::Blank)
    );
    let error = Destination::new("d".repeat(300)).unwrap_err();
    assert_eq!(error.to_string(), "destination is 300 bytes; at most 256");
    assert_eq!(
        refused(Destination::new("0x\u{7}")),
        (Field::Destination, Rule::ControlCharacter { offset: 2 })
    );
}

#[test]
fn each_invalid_free_text_is_refused_with_its_own_error() {
    let long = "t".repeat(1025);
    assert_eq!(
        refused(Reference::new(" ")),
        (Field::Reference, Rule::Blank)
    );
    assert_eq!(
        refused(Reason::new(long.clone())),
        (
            Field::Reason,
            Rule::TooLong {
                len: 1025,
                max: 1024
            }
        )
    );
    assert_eq!(refused(Actor::new("")), (Field::RequestedBy, Rule::Empty));
    assert_eq!(
        refused(Actor::operator("\u{0}")),
        (Field::Operator, Rule::ControlCharacter { offset: 0 })
    );
    assert_eq!(
        refused(Note::new("ok\r\n")),
        (Field::Note, Rule::ControlCharacter { offset: 2 })
    );
    assert_eq!(Note::new("t".repeat(1024)).unwrap().as_str().len(), 1024);
}

#[test]
fn deserialisation_refuses_what_constructors_refuse() {
    let json = serde_json::to_value(make("w-1")).unwrap();
    let with = |field: &str, value: serde_json::Value| {
        let mut json = json.clone();
        json[field] = value;
        serde_json::from_value::<WithdrawalRequest>(json)
            .unwrap_err()
            .to_string()
    };
    assert!(
        with("destination", "d".repeat(300).into())
            .contains("destination is 300 bytes; at most 256")
    );
    assert!(with("amount", "-1".into()).contains("amount is not greater than zero"));
    assert!(with("amount", 25.into()).contains("invalid type"));
    assert!(with("currency", "U".into()).contains("currency is 1 bytes; at least 2"));
    assert!(with("id", "".into()).contains("withdrawal id is empty"));
    // A state the transitions could not have produced.
    assert!(with("state", "sent".into()).contains("reference is required when the state is sent"));
    assert!(
        with("reference", "0xa".into())
            .contains("reference is not allowed when the state is requested")
    );
    assert!(with("state", "failed".into()).contains("reason is required when the state is failed"));
    assert!(with("extra", 1.into()).contains("unknown field"));

    let bytes = codec::encode(&Destination::new("d".repeat(256)).unwrap()).unwrap();
    let mut too_long = bytes.clone();
    too_long[0] = 255; // length prefix claims more than the buffer holds
    assert!(codec::decode::<Destination>(&too_long).is_err());
    let mut trailing = bytes;
    trailing.push(0);
    assert!(matches!(
        codec::decode::<Destination>(&trailing),
        Err(codec::CodecError::TrailingBytes { .. })
    ));
}

#[test]
fn a_bump_history_is_checked_on_the_way_in() {
    let bumped = crate::sent("w-1", "0xa")
        .bump(Reference::new("0xb").unwrap())
        .unwrap();
    let mut json = serde_json::to_value(&bumped).unwrap();
    json["replaced"] = serde_json::json!(["0xa", "0xa"]);
    let error = serde_json::from_value::<WithdrawalRequest>(json.clone()).unwrap_err();
    assert!(
        error.to_string().contains("replaced repeats a reference"),
        "{error}"
    );
    json["replaced"] = serde_json::json!(["0xb"]);
    assert!(
        serde_json::from_value::<WithdrawalRequest>(json).is_err(),
        "current reference in replaced"
    );
}

#[test]
fn differences_name_each_field_with_both_values() {
    let ours = make("w-1").fingerprint();
    assert!(ours.differences(&ours.clone()).is_empty());
    let json = serde_json::to_value(make("w-2")).unwrap();
    let mut theirs = json.clone();
    theirs["amount"] = "26.00".into();
    theirs["destination"] = "0xdef".into();
    let theirs: WithdrawalRequest = serde_json::from_value(theirs).unwrap();
    let differences = ours.differences(&theirs.fingerprint());
    let fields: Vec<_> = differences.iter().map(|d| d.field).collect();
    assert_eq!(
        fields,
        [
            FingerprintField::Id,
            FingerprintField::Amount,
            FingerprintField::Destination
        ]
    );
    assert_eq!(differences[1].to_string(), "amount differs: 25 vs 26");
    assert_eq!(
        (differences[0].ours.as_str(), differences[0].theirs.as_str()),
        ("w-1", "w-2")
    );
}

#[test]
fn a_binary_amount_is_exact_and_only_its_canonical_encoding_decodes() {
    let amount = Amount::parse("25.50").unwrap();
    let bytes = codec::encode(&amount).unwrap();
    // Mantissa 255 and scale 1, fixed-width little-endian: no text to parse.
    assert_eq!(bytes.len(), 17);
    assert_eq!(codec::decode::<Amount>(&bytes).unwrap(), amount);

    let parts = |mantissa: u128, scale: u8| {
        let mut bytes = mantissa.to_le_bytes().to_vec();
        bytes.push(scale);
        codec::decode::<Amount>(&bytes)
    };
    assert_eq!(parts(255, 1).unwrap(), amount);
    assert!(
        parts(2550, 2).is_err(),
        "a trailing zero is not the canonical form"
    );
    assert!(
        parts(0, 0)
            .unwrap_err()
            .to_string()
            .contains("amount is not greater than zero")
    );
    assert!(
        parts(10u128.pow(28), 0)
            .unwrap_err()
            .to_string()
            .contains("significant digits")
    );
    assert!(
        parts(1, 29)
            .unwrap_err()
            .to_string()
            .contains("digits after the point")
    );
}

#[test]
fn a_request_splits_into_fingerprint_and_progress_and_back() {
    let bumped = crate::sent("w-1", "0xa")
        .bump(Reference::new("0xb").unwrap())
        .unwrap();
    let (fingerprint, progress) = bumped.clone().into_parts();
    assert_eq!(fingerprint, bumped.fingerprint());
    assert!(fingerprint.matches(&bumped));
    assert!(bumped.has_progress(&progress));
    assert!(!make("w-1").has_progress(&progress));
    assert_eq!(progress.state(), payonce_model::WithdrawalState::Sent);
    assert_eq!(WithdrawalRequest::from_parts(fingerprint, progress), bumped);
    assert!(!make("w-1").fingerprint().matches(&make("w-2")));
}

#[test]
fn a_list_longer_than_its_limit_is_refused_before_it_is_read() {
    // Guards against a length prefix making the decoder reserve memory:
    // a bump history claiming a million entries is refused at once.
    let bumped = crate::sent("w-1", "0xa")
        .bump(Reference::new("0xb").unwrap())
        .unwrap();
    let bytes = codec::encode(&bumped).unwrap();
    // `replaced` is last: its u64 length prefix, then one entry (a u64
    // length and the 3 bytes of "0xa").
    let prefix_at = bytes.len() - (8 + 3) - 8;
    assert_eq!(bytes[prefix_at..prefix_at + 8], 1u64.to_le_bytes());
    let mut long = bytes.clone();
    long[prefix_at..prefix_at + 8].copy_from_slice(&1_000_000u64.to_le_bytes());

    let error = codec::decode::<WithdrawalRequest>(&long).unwrap_err();

    assert!(error.to_string().contains("at most 32 entries"), "{error}");
    assert_eq!(codec::decode::<WithdrawalRequest>(&bytes).unwrap(), bumped);
}
