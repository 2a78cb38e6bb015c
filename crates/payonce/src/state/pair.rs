//! A settled pair as a run's record (docs/snapshot-format.md, "Settled
//! pairs"): the key is the record's primary name, the withdrawal id its
//! secondary name, and the rest of the pair its payload. A payload read
//! back is checked under the rules replay checks, as a snapshot's body is:
//! a run is untrusted bytes.

use payonce_model::{
    Actor, Amount, Currency, Destination, Progress, REPLACED_MAX, Reason, Reference, RequestKey,
    WithdrawalId, WithdrawalState,
};
use payonce_runs::RecordRef;

use super::layout::{Funds, stored};
use crate::snapshot_format::error::SnapshotError;
use crate::snapshot_format::fields::{In, Out, ended};
use crate::time::Timestamp;

/// A payload flag: its withdrawal was minted by this ledger.
const CREATED: u8 = 1;
/// A payload flag: its funds left custody.
const CAPTURED: u8 = 2;

/// A settled key and the withdrawal it holds, owning its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SettledPair {
    pub(super) key: Box<str>,
    pub(super) claimed_seq: u64,
    pub(super) claimed_at: Timestamp,
    pub(super) state: WithdrawalState,
    pub(super) reference: Option<Box<str>>,
    pub(super) reason: Option<Box<str>>,
    pub(super) requested_by: Box<str>,
    pub(super) replaced: Box<[Reference]>,
    pub(super) id: Box<str>,
    pub(super) destination: Box<str>,
    pub(super) amount: Amount,
    pub(super) currency: Currency,
    pub(super) created: bool,
    /// Free or captured: never held.
    pub(super) funds: Funds,
}

/// A settled pair's fields, borrowed from the state's own slots, so that
/// encoding one copies no text first.
#[derive(Debug, Clone, Copy)]
pub(super) struct PairView<'a> {
    pub(super) key: &'a str,
    pub(super) claimed_seq: u64,
    pub(super) claimed_at: Timestamp,
    pub(super) state: WithdrawalState,
    pub(super) reference: Option<&'a str>,
    pub(super) reason: Option<&'a str>,
    pub(super) requested_by: &'a str,
    pub(super) replaced: &'a [Reference],
    pub(super) id: &'a str,
    pub(super) destination: &'a str,
    pub(super) amount: Amount,
    pub(super) currency: &'a str,
    pub(super) created: bool,
    pub(super) funds: Funds,
}

/// A state's byte on disk: its place in `WithdrawalState::ALL`.
pub(super) fn state_number(state: WithdrawalState) -> u8 {
    let number = WithdrawalState::ALL
        .iter()
        .position(|&known| known == state);
    number.unwrap_or_else(|| unreachable!("every state is in ALL")) as u8
}

impl PairView<'_> {
    /// The record's payload: everything but the key and the id.
    pub(super) fn payload(&self) -> Vec<u8> {
        let mut out = Out::default();
        out.u64(self.claimed_seq);
        out.u64(self.claimed_at.unix_nanos());
        out.u8(state_number(self.state));
        out.optional(self.reference);
        out.optional(self.reason);
        out.text(self.requested_by);
        assert!(
            self.replaced.len() <= REPLACED_MAX,
            "a pair replaced too many"
        );
        out.u8(self.replaced.len() as u8);
        for reference in self.replaced {
            out.text(reference.as_str());
        }
        out.text(self.destination);
        out.amount(self.amount);
        out.text(self.currency);
        let captured = match self.funds {
            Funds::Free => 0,
            Funds::Captured => CAPTURED,
            Funds::Held => unreachable!("a pair holding funds is never settled"),
        };
        out.u8(u8::from(self.created) | captured);
        out.bytes
    }
}

/// The pair `record` of run `run` holds, in a state whose last event is
/// `last_seq`: its names and every field checked. A refusal names the
/// run and the key.
pub(super) fn read_pair(record: &RecordRef, last_seq: u64) -> Result<SettledPair, SnapshotError> {
    let refused = |detail: String| SnapshotError::Pair {
        run: record.run_number(),
        key: String::from_utf8_lossy(record.primary()).into_owned(),
        detail,
    };
    let name = |bytes: &[u8], field: &str| {
        std::str::from_utf8(bytes)
            .map_err(|_| refused(format!("its {field} is not UTF-8")))
            .map(str::to_owned)
    };
    let key = name(record.primary(), "key")?;
    let id = name(record.secondary(), "withdrawal id")?;
    RequestKey::new(&key).map_err(|error| refused(format!("its key: {error}")))?;
    WithdrawalId::new(&id).map_err(|error| refused(format!("its withdrawal id: {error}")))?;
    let payload = record.payload();
    let mut input = In::window(payload, 0, payload.len());
    let read = read_payload(&mut input, last_seq, key, id)
        .and_then(|pair| ended(input.at(), payload.len()).map(|()| pair));
    read.map_err(|error| refused(error.to_string()))
}

/// The payload's fields, after the names `key` and `id`.
fn read_payload(
    input: &mut In<'_>,
    last_seq: u64,
    key: String,
    id: String,
) -> Result<SettledPair, SnapshotError> {
    let claimed_seq = input.u64("claim seq")?;
    if !(1..=last_seq).contains(&claimed_seq) {
        let expected = format!("a seq from 1 to {last_seq}");
        return Err(input.invalid("claim seq", expected, claimed_seq.to_string()));
    }
    let claimed_at = Timestamp::from_unix_nanos(input.u64("claim time")?);
    let outcome = read_outcome(input)?;
    let destination = input.text::<Destination>("destination")?;
    let amount = input.amount("amount", "amount scale")?;
    let currency = input.text::<Currency>("currency")?;
    let flags = input.u8("flags")?;
    if flags & !(CREATED | CAPTURED) != 0 {
        let expected = format!("only bits {:#04b}", CREATED | CAPTURED);
        return Err(input.invalid("flags", expected, flags.to_string()));
    }
    Ok(SettledPair {
        key: key.into(),
        claimed_seq,
        claimed_at,
        state: outcome.state,
        reference: outcome.reference.map(|text| text.as_str().into()),
        reason: outcome.reason.map(|text| text.as_str().into()),
        requested_by: outcome.requested_by.as_str().into(),
        replaced: outcome.replaced.into(),
        id: id.into(),
        destination: destination.into(),
        amount,
        currency: stored(currency, Currency::new),
        created: flags & CREATED != 0,
        funds: if flags & CAPTURED != 0 {
            Funds::Captured
        } else {
            Funds::Free
        },
    })
}

/// A settled outcome: its state and texts.
struct Outcome {
    state: WithdrawalState,
    reference: Option<Reference>,
    reason: Option<Reason>,
    requested_by: Actor,
    replaced: Vec<Reference>,
}

/// A settled outcome's state and texts, checked as the model checks them.
fn read_outcome(input: &mut In<'_>) -> Result<Outcome, SnapshotError> {
    let at = input.offset();
    let number = input.u8("state")?;
    let state = WithdrawalState::ALL
        .get(usize::from(number))
        .copied()
        .filter(|state| state.is_settled())
        .ok_or_else(|| input.invalid("state", "a settled state".to_owned(), number.to_string()))?;
    let reference = input.optional::<Reference>("reference")?;
    let reason = input.optional::<Reason>("reason")?;
    let requested_by = input.text::<Actor>("requester")?;
    let count = usize::from(input.u8("replaced count")?);
    if count > REPLACED_MAX {
        let expected = format!("at most {REPLACED_MAX}");
        return Err(input.invalid("replaced count", expected, count.to_string()));
    }
    let mut replaced = Vec::with_capacity(count);
    for _ in 0..count {
        let text = input.text::<Reference>("replaced reference")?;
        replaced.push(stored(text, Reference::new));
    }
    let outcome = Outcome {
        state,
        reference: reference.map(|text| stored(text, Reference::new)),
        reason: reason.map(|text| stored(text, Reason::new)),
        requested_by: stored(requested_by, Actor::new),
        replaced,
    };
    let checked = Progress::new(
        state,
        outcome.reference.clone(),
        outcome.reason.clone(),
        outcome.requested_by.clone(),
        outcome.replaced.clone(),
    );
    match checked {
        Ok(_) => Ok(outcome),
        Err(error) => Err(input.invalid_at(at, "outcome", error.to_string(), state.to_string())),
    }
}
