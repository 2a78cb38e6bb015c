//! Invariants over arbitrary inputs: fingerprints never move, serde round
//! trips are the identity, and no input makes a constructor panic.

use payonce_model::{
    Actor, Amount, Currency, Destination, Field, FieldError, Note, Progress, Reason, Reference,
    RequestKey, Rule, TEXT_LEN_MAX, TextView, ValidText, WithdrawalId, WithdrawalRequest,
    WithdrawalState, WithdrawalView, codec,
};
use proptest::prelude::*;

use crate::make;

#[derive(Debug, Clone)]
enum Step {
    Approve,
    Reject(String),
    StartSending,
    MarkSent(String),
    Confirm,
    Fail(String),
    Bump(String),
}

fn step() -> impl Strategy<Value = Step> {
    // Few distinct texts, so repeats and conflicts happen often.
    let text =
        prop::sample::select(vec!["0xa", "0xb", "0xc", "late", "node down"]).prop_map(String::from);
    prop_oneof![
        Just(Step::Approve),
        text.clone().prop_map(Step::Reject),
        Just(Step::StartSending),
        text.clone().prop_map(Step::MarkSent),
        Just(Step::Confirm),
        text.clone().prop_map(Step::Fail),
        text.prop_map(Step::Bump),
    ]
}

fn apply(withdrawal: &WithdrawalRequest, step: &Step) -> Option<WithdrawalRequest> {
    let result = match step {
        Step::Approve => withdrawal.approve(),
        Step::Reject(text) => withdrawal.reject(Reason::new(text.as_str()).unwrap()),
        Step::StartSending => withdrawal.start_sending(),
        Step::MarkSent(text) => withdrawal.mark_sent(Reference::new(text.as_str()).unwrap()),
        Step::Confirm => withdrawal.confirm(),
        Step::Fail(text) => withdrawal.fail(Reason::new(text.as_str()).unwrap()),
        Step::Bump(text) => withdrawal.bump(Reference::new(text.as_str()).unwrap()),
    };
    result.ok()
}

proptest! {
    #[test]
    fn the_fingerprint_is_unchanged_by_any_sequence_of_transitions(steps in prop::collection::vec(step(), 0..24)) {
        let original = make("w-1");
        let mut withdrawal = original.clone();
        for step in &steps {
            if let Some(next) = apply(&withdrawal, step) {
                // A repeated step is free: applying it again gives the same value.
                let again = apply(&next, step);
                prop_assert_eq!(again.as_ref(), Some(&next));
                withdrawal = next;
            }
            prop_assert_eq!(withdrawal.fingerprint(), original.fingerprint());
        }
    }

    #[test]
    fn serde_round_trips_are_the_identity(steps in prop::collection::vec(step(), 0..24), amount in "[0-9]{1,20}(\\.[0-9]{1,8})?") {
        let mut json = serde_json::to_value(make("w-1")).unwrap();
        json["amount"] = amount.clone().into();
        let Ok(mut withdrawal) = serde_json::from_value::<WithdrawalRequest>(json) else {
            prop_assert!(Amount::parse(&amount).is_err());
            return Ok(());
        };
        for step in &steps {
            withdrawal = apply(&withdrawal, step).unwrap_or(withdrawal);
            let text = serde_json::to_string(&withdrawal).unwrap();
            prop_assert_eq!(&serde_json::from_str::<WithdrawalRequest>(&text).unwrap(), &withdrawal);
            let bytes = codec::encode(&withdrawal).unwrap();
            prop_assert_eq!(&codec::decode::<WithdrawalRequest>(&bytes).unwrap(), &withdrawal);
            prop_assert_eq!(codec::encode(&codec::decode::<WithdrawalRequest>(&bytes).unwrap()).unwrap(), bytes);
        }
    }

    #[test]
    fn progress_new_accepts_exactly_what_deserialisation_accepts(
        state in prop::sample::select(vec![
            WithdrawalState::Requested, WithdrawalState::Approved, WithdrawalState::Sending,
            WithdrawalState::Sent, WithdrawalState::Confirmed, WithdrawalState::Rejected,
            WithdrawalState::Failed,
        ]),
        reference in prop::option::of(prop::sample::select(vec!["0xa", "0xb"])),
        reason in prop::option::of(Just("late")),
        replaced in prop::collection::vec(prop::sample::select(vec!["0xa", "0xb", "0xc"]), 0..3),
    ) {
        let mut json = serde_json::to_value(make("w-1")).unwrap();
        json["state"] = serde_json::to_value(state).unwrap();
        json["reference"] = serde_json::to_value(reference).unwrap();
        json["reason"] = serde_json::to_value(reason).unwrap();
        json["replaced"] = serde_json::to_value(&replaced).unwrap();
        let built = Progress::new(
            state,
            reference.map(|text| Reference::new(text).unwrap()),
            reason.map(|text| Reason::new(text).unwrap()),
            make("w-1").requested_by().clone(),
            replaced.iter().map(|text| Reference::new(*text).unwrap()).collect(),
        );
        match serde_json::from_value::<WithdrawalRequest>(json) {
            Ok(read) => {
                let progress = built.unwrap();
                prop_assert_eq!(&read.clone().into_parts().1, &progress);
                prop_assert_eq!(WithdrawalRequest::from_parts(read.fingerprint(), progress), read);
            }
            Err(error) => {
                let refused = built.unwrap_err();
                prop_assert!(error.to_string().contains(&refused.to_string()), "{} vs {}", error, refused);
            }
        }
    }

    #[test]
    fn no_string_makes_a_constructor_panic(text in any::<String>()) {
        let _ = WithdrawalId::new(text.as_str());
        let _ = RequestKey::new(text.as_str());
        let _ = Amount::parse(&text);
        let _ = Currency::new(&text);
        let _ = Destination::new(text.as_str());
        let _ = Reference::new(text.as_str());
        let _ = Reason::new(text.as_str());
        let _ = Actor::new(text.as_str());
        let _ = Note::new(text.as_str());
    }

    #[test]
    fn every_accepted_amount_prints_and_parses_to_itself(text in "[0-9]{1,30}(\\.[0-9]{1,30})?") {
        if let Ok(amount) = Amount::parse(&text) {
            prop_assert_eq!(Amount::parse(&amount.to_string()).unwrap(), amount);
            prop_assert_eq!(amount.to_string(), Amount::parse(&amount.to_string()).unwrap().to_string());
        }
    }

    #[test]
    fn no_bytes_make_a_deserialiser_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = codec::decode::<WithdrawalRequest>(&bytes);
        let _ = codec::decode::<Amount>(&bytes);
        let _ = codec::decode::<RequestKey>(&bytes);
        let _ = serde_json::from_slice::<WithdrawalRequest>(&bytes);
    }

    #[test]
    fn mutated_encodings_decode_only_to_valid_values(steps in prop::collection::vec(step(), 0..12), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
        let withdrawal = after(&steps);
        let mut bytes = codec::encode(&withdrawal).unwrap();
        overwrite(&mut bytes, flips);
        if let Ok(decoded) = codec::decode::<WithdrawalRequest>(&bytes) {
            // Whatever came back passed every rule: it re-encodes and round trips.
            let again = codec::encode(&decoded).unwrap();
            prop_assert_eq!(codec::decode::<WithdrawalRequest>(&again).unwrap(), decoded);
        }
    }

    #[test]
    fn free_text_rules_are_those_of_the_reference_check(text in any::<String>(), ascii in "[ -~]{0,40}", near_ascii in "[\\x00-\\x7f\\u{80}-\\u{ff} -~]{0,40}", printable in "[ -~]{8,40}", at in any::<prop::sample::Index>(), odd in prop_oneof![Just('\x7f'), prop::char::range('\x00', '\x1f'), prop::char::range('\u{80}', '\u{ff}')]) {
        // Guards the printable-ASCII shortcut, which checks every byte without stopping early: it must refuse and accept exactly as the plain rules do.
        // One control character, DEL or Latin-1 letter among printable ones, at any place of any word.
        let mut one_odd: Vec<char> = printable.chars().collect();
        let place = at.index(one_odd.len());
        one_odd[place] = odd;
        let one_odd: String = one_odd.into_iter().collect();
        for text in [text, ascii, near_ascii, one_odd] {
            prop_assert_eq!(Reason::new(text.as_str()).err().map(|error| (error.field, error.rule)), reference_text_check(&text).map(|rule| (Field::Reason, rule)));
        }
    }

    #[test]
    fn a_text_view_accepts_what_its_type_accepts_unchanged_or_trimmed(text in any::<String>(), ascii in "[ -~]{0,16}") {
        // Guards against a view that accepts text its owned type refuses, or keeps other text.
        for text in [text, ascii] {
            view_agrees::<WithdrawalId>(&text, WithdrawalId::new(text.as_str()).map(|v| v.to_string()))?;
            view_agrees::<RequestKey>(&text, RequestKey::new(text.as_str()).map(|v| v.to_string()))?;
            view_agrees::<Destination>(&text, Destination::new(text.as_str()).map(|v| v.to_string()))?;
            view_agrees::<Reference>(&text, Reference::new(text.as_str()).map(|v| v.to_string()))?;
            view_agrees::<Reason>(&text, Reason::new(text.as_str()).map(|v| v.to_string()))?;
            view_agrees::<Actor>(&text, Actor::new(text.as_str()).map(|v| v.to_string()))?;
            view_agrees::<Note>(&text, Note::new(text.as_str()).map(|v| v.to_string()))?;
            // A currency in lower case is the one text a view cannot keep.
            let owned = Currency::new(&text).map(|v| v.to_string());
            match TextView::<Currency>::new(&text) {
                Ok(view) => prop_assert_eq!(Ok(view.to_value().to_string()), owned),
                Err(error) if error.rule == Rule::NotCanonical => {
                    prop_assert_eq!(owned, Ok(text.to_ascii_uppercase()));
                }
                Err(error) => prop_assert_eq!(Err(error), owned),
            }
        }
    }

    #[test]
    fn a_view_decodes_to_the_request_the_owned_decoding_reads(steps in prop::collection::vec(step(), 0..12), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4)) {
        // Guards against borrowed decoding reading what the owned one would not.
        let withdrawal = after(&steps);
        let mut bytes = codec::encode(&withdrawal).unwrap();
        let unchanged = bytes.clone();
        overwrite(&mut bytes, flips);
        let owned = codec::decode::<WithdrawalRequest>(&bytes);
        match codec::decode_borrowed::<WithdrawalView<'_>>(&bytes) {
            Ok(view) => {
                let owned = owned.unwrap();
                prop_assert_eq!(view.to_value(), owned.clone());
                prop_assert_eq!(owned.view(), view);
            }
            // A view refuses only what it cannot borrow, or what the owned
            // decoding refuses too.
            Err(_) => if let Ok(owned) = owned {
                prop_assert!(
                    !owned.replaced().is_empty() || bytes != unchanged,
                    "refused the unchanged encoding of {:?}", owned
                );
                prop_assert!(
                    !owned.replaced().is_empty() || codec::encode(&owned).unwrap() != bytes,
                    "refused the canonical encoding of {:?}", owned
                );
            },
        }
    }
}

/// Withdrawal `w-1` after `steps`, each skipped if its transition is refused.
fn after(steps: &[Step]) -> WithdrawalRequest {
    steps.iter().fold(make("w-1"), |withdrawal, step| {
        apply(&withdrawal, step).unwrap_or(withdrawal)
    })
}

/// Sets each byte `flips` names, at an index scaled to `bytes`, to its value.
fn overwrite(bytes: &mut [u8], flips: Vec<(prop::sample::Index, u8)>) {
    if bytes.is_empty() {
        return;
    }
    for (index, value) in flips {
        bytes[index.index(bytes.len())] = value;
    }
}

/// The free-text rules, written out plainly: empty, too long, a control
/// character (the first), blank.
fn reference_text_check(text: &str) -> Option<Rule> {
    let rule = if text.is_empty() {
        Rule::Empty
    } else if text.len() > TEXT_LEN_MAX {
        Rule::TooLong {
            len: text.len(),
            max: TEXT_LEN_MAX,
        }
    } else if let Some((offset, _)) = text.char_indices().find(|(_, c)| c.is_control()) {
        Rule::ControlCharacter { offset }
    } else if text.trim().is_empty() {
        Rule::Blank
    } else {
        return None;
    };
    Some(rule)
}

/// A view of `text` accepts what the owned type accepts, borrowing the
/// text the owned value holds, and refuses with the owned type's error.
fn view_agrees<T: ValidText + std::fmt::Display>(
    text: &str,
    owned: Result<String, FieldError>,
) -> Result<(), TestCaseError> {
    match TextView::<T>::new(text) {
        Ok(view) => {
            prop_assert_eq!(Ok(view.as_str().to_owned()), owned);
            prop_assert_eq!(view.to_value().to_string(), view.as_str());
        }
        Err(error) => prop_assert_eq!(Err(error), owned),
    }
    Ok(())
}

proptest! {
    #[test]
    fn an_id_is_minted_for_a_sequence_number_exactly_when_minting_gives_it(seq in any::<u64>(), other in any::<u64>(), text in "w-[+0-9]{0,21}") {
        // Guards replay's check of minted ids against leading zeros, signs and other numbers.
        let minted = WithdrawalId::minted(seq);
        prop_assert!(WithdrawalId::is_minted(&minted, seq));
        prop_assert_eq!(WithdrawalId::is_minted(&minted, other), other == seq);
        prop_assert_eq!(WithdrawalId::is_minted(&text, seq), text == minted.as_str());
        prop_assert_eq!(WithdrawalId::is_minted(&format!("w-0{seq}"), seq), false);
    }
}

proptest! {
    #[test]
    fn a_minted_id_is_recognised_for_its_epoch_and_sequence_number_alone(epoch in any::<u64>(), seq in any::<u64>(), other in any::<u64>()) {
        // Guards against replay accepting an id minted in another opening or for another event.
        let id = WithdrawalId::minted_in(epoch, seq);
        prop_assert!(WithdrawalId::is_minted_in(&id, epoch, seq));
        prop_assert_eq!(WithdrawalId::is_minted_in(&id, other, seq), other == epoch);
        prop_assert_eq!(WithdrawalId::is_minted_in(&id, epoch, other), other == seq);
        prop_assert!(!WithdrawalId::is_minted(&id, seq));
        prop_assert!(!WithdrawalId::is_minted_in(&WithdrawalId::minted(seq), epoch, seq));
        // Another spelling of the same numbers is another id.
        let upper = format!("w-{epoch:X}-{seq}");
        prop_assert_eq!(WithdrawalId::is_minted_in(&upper, epoch, seq), upper == id.as_str());
        let (zero_epoch, zero_seq) = (format!("w-0{epoch:x}-{seq}"), format!("w-{epoch:x}-0{seq}"));
        prop_assert!(!WithdrawalId::is_minted_in(&zero_epoch, epoch, seq));
        prop_assert!(!WithdrawalId::is_minted_in(&zero_seq, epoch, seq));
    }
}
