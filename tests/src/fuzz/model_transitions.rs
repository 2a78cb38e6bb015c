//! `model_transitions`: arbitrary transition sequences on a withdrawal.

use arbitrary::{Result, Unstructured};
use payonce_model::{Reason, Reference, WithdrawalRequest, codec};

/// Texts the transitions draw from: few, so repeats and conflicts are common.
const TEXTS: &[&str] = &["0xa", "0xb", "0xc", "node down", "limits", "ü ✓"];

/// Applies the transitions the bytes describe to a fresh withdrawal. Checks
/// that nothing panics, the fingerprint never changes, an accepted transition
/// repeated is free, and JSON and codec round trips are the identity.
///
/// # Panics
/// When a property does not hold: that is the finding.
pub fn model_transitions(data: &[u8]) {
    let mut input = Unstructured::new(data);
    let _ = run(&mut input);
}

fn run(input: &mut Unstructured<'_>) -> Result<()> {
    let original = crate::withdrawal("w-fuzz");
    let mut withdrawal = original.clone();
    while !input.is_empty() {
        let kind: u8 = input.int_in_range(0..=6)?;
        let text = *input.choose(TEXTS)?;
        let next = apply(&withdrawal, kind, text);
        if let Some(next) = next {
            assert_eq!(
                apply(&next, kind, text).as_ref(),
                Some(&next),
                "a repeated transition changed the value"
            );
            withdrawal = next;
        }
        assert_eq!(
            withdrawal.fingerprint(),
            original.fingerprint(),
            "a transition changed the fingerprint"
        );
        let json = serde_json::to_string(&withdrawal).unwrap_or_default();
        let from_json: Option<WithdrawalRequest> = serde_json::from_str(&json).ok();
        assert_eq!(
            from_json.as_ref(),
            Some(&withdrawal),
            "JSON round trip of {json}"
        );
        let bytes = codec::encode(&withdrawal).unwrap_or_default();
        let from_codec: Option<WithdrawalRequest> = codec::decode(&bytes).ok();
        assert_eq!(from_codec.as_ref(), Some(&withdrawal), "codec round trip");
    }
    Ok(())
}

fn apply(withdrawal: &WithdrawalRequest, kind: u8, text: &str) -> Option<WithdrawalRequest> {
    let reference = || Reference::new(text).ok();
    let reason = || Reason::new(text).ok();
    match kind {
        0 => withdrawal.approve().ok(),
        1 => withdrawal.reject(reason()?).ok(),
        2 => withdrawal.start_sending().ok(),
        3 => withdrawal.mark_sent(reference()?).ok(),
        4 => withdrawal.confirm().ok(),
        5 => withdrawal.fail(reason()?).ok(),
        _ => withdrawal.bump(reference()?).ok(),
    }
}
