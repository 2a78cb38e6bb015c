//! The withdrawal value as other crates see it: through JSON and the codec.

use payonce_model::{Reference, WithdrawalRequest, codec};
use payonce_tests::withdrawal;

/// Guards the value every other crate stores: a sent withdrawal with a bump
/// history must come back unchanged from both encodings.
#[test]
fn a_bumped_withdrawal_survives_json_and_the_codec() {
    let sent = withdrawal("w-1")
        .approve()
        .and_then(|w| w.start_sending())
        .and_then(|w| w.mark_sent(Reference::new("0xaaa").unwrap()))
        .and_then(|w| w.bump(Reference::new("0xbbb").unwrap()))
        .unwrap();

    let json = serde_json::to_string(&sent).unwrap();
    let from_json: WithdrawalRequest = serde_json::from_str(&json).unwrap();
    let from_codec: WithdrawalRequest = codec::decode(&codec::encode(&sent).unwrap()).unwrap();

    assert_eq!(from_json, sent);
    assert_eq!(from_codec, sent);
    assert_eq!(from_codec.replaced(), [Reference::new("0xaaa").unwrap()]);
}
