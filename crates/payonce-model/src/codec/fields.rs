//! Reading an encoding field by field, without serde: replay reads
//! millions of the same few events, and serde's visitors cost about as
//! much as everything else it does with a record.
//!
//! The rules are the codec's (docs/event-format.md): fixed-width
//! little-endian integers, a text as a `u64` length and its bytes, a `u32`
//! variant number, a `u8` before an optional value. Every method answers
//! `None` where [`super::decode_borrowed`] refuses, and also where this
//! reader does not decide (a withdrawal with replaced references): the
//! caller then decodes the bytes with `decode_borrowed`, which says why it
//! refuses, if it does. What it answers otherwise is what
//! `decode_borrowed` gives for the same bytes; the tests read every kind of
//! field both ways.

use super::ENCODED_LEN_MAX;
use crate::amount::Amount;
use crate::text::{TextView, ValidText};
use crate::withdrawal::{NoReplaced, WithdrawalFieldsView, WithdrawalState, WithdrawalView};

/// The fields of one encoded value, read in order.
#[derive(Debug)]
pub struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    /// Reads `bytes` from their start; `None` if there are more than
    /// [`ENCODED_LEN_MAX`] of them.
    pub fn new(bytes: &'a [u8]) -> Option<Self> {
        (bytes.len() <= ENCODED_LEN_MAX).then_some(Fields { bytes, at: 0 })
    }

    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(len)?;
        let taken = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(taken)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    /// A `u8`.
    pub fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }

    /// A `u16`.
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.array()?))
    }

    /// A `u32`, or an enum's variant number.
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.array()?))
    }

    /// A `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.array()?))
    }

    /// A `bool`: a byte, 0 or 1.
    pub fn bool(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// An optional value, whose value `read` reads.
    pub fn option<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.u8()? {
            0 => Some(None),
            1 => read(self).map(Some),
            _ => None,
        }
    }

    /// A text, under `T`'s rules.
    pub fn text<T: ValidText>(&mut self) -> Option<TextView<'a, T>> {
        let len = usize::try_from(self.u64()?).ok()?;
        let text = std::str::from_utf8(self.take(len)?).ok()?;
        TextView::new(text).ok()
    }

    /// An amount: its mantissa and scale.
    pub fn amount(&mut self) -> Option<Amount> {
        let mantissa = u128::from_le_bytes(self.array()?);
        Amount::from_parts(mantissa, self.u8()?).ok()
    }

    /// A withdrawal's state.
    pub fn state(&mut self) -> Option<WithdrawalState> {
        let number = usize::try_from(self.u32()?).ok()?;
        WithdrawalState::ALL.get(number).copied()
    }

    /// A withdrawal, borrowed; `None` also for one with replaced
    /// references, which a view does not hold.
    pub fn withdrawal(&mut self) -> Option<WithdrawalView<'a>> {
        let fields = WithdrawalFieldsView {
            id: self.text()?,
            amount: self.amount()?,
            currency: self.text()?,
            destination: self.text()?,
            state: self.state()?,
            reference: self.option(Fields::text)?,
            reason: self.option(Fields::text)?,
            requested_by: self.text()?,
            replaced: NoReplaced,
        };
        if self.u64()? != 0 {
            return None;
        }
        fields.checked().ok()
    }

    /// Ends the reading: `None` unless every byte was read.
    pub fn finish(self) -> Option<()> {
        (self.at == self.bytes.len()).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::codec::{decode_borrowed, encode};
    use crate::text::{Actor, Destination, Reason, Reference, RequestKey, WithdrawalId};
    use crate::{Currency, WithdrawalRequest};

    fn request(id: &str, amount: &str) -> WithdrawalRequest {
        WithdrawalRequest::new(
            WithdrawalId::new(id).unwrap(),
            Amount::parse(amount).unwrap(),
            Currency::new("USDC").unwrap(),
            Destination::new("0xabc").unwrap(),
            Actor::new("alice").unwrap(),
        )
    }

    /// A withdrawal in every state, and one with a replaced reference.
    fn every_state() -> Vec<WithdrawalRequest> {
        let requested = request("w-1", "2.5");
        let approved = requested.approve().unwrap();
        let sending = approved.start_sending().unwrap();
        let sent = sending
            .mark_sent(Reference::new("0xfeed").unwrap())
            .unwrap();
        vec![
            requested.clone(),
            approved.clone(),
            sending.clone(),
            sent.clone(),
            sent.confirm().unwrap(),
            requested.reject(Reason::new("limits").unwrap()).unwrap(),
            sending.fail(Reason::new("node down").unwrap()).unwrap(),
            sent.bump(Reference::new("0xbeef").unwrap()).unwrap(),
        ]
    }

    #[test]
    fn a_withdrawal_in_every_state_reads_as_serde_reads_it() {
        // Guards against the reader and serde numbering states, ordering fields or checking a state's fields differently.
        for request in every_state() {
            let bytes = encode(&request).unwrap();
            let mut fields = Fields::new(&bytes).unwrap();
            let read = fields.withdrawal();
            match decode_borrowed::<WithdrawalView<'_>>(&bytes) {
                Ok(view) => {
                    assert_eq!(read.map(|read| read.to_value()), Some(view.to_value()));
                    assert_eq!(fields.finish(), Some(()));
                }
                // A bump: serde refuses it as a view, and so does the reader.
                Err(_) => assert!(read.is_none(), "{request:?}"),
            }
        }
    }

    #[test]
    fn a_state_number_is_its_place_in_the_declaration() {
        // Guards against ALL drifting from the order serde numbers the variants in.
        for (number, state) in WithdrawalState::ALL.iter().enumerate() {
            let bytes = encode(state).unwrap();
            assert_eq!(bytes, (number as u32).to_le_bytes());
            assert_eq!(Fields::new(&bytes).unwrap().state(), Some(*state));
        }
        assert_eq!(Fields::new(&7u32.to_le_bytes()).unwrap().state(), None);
    }

    /// The shapes the reader reads besides a withdrawal, as serde reads
    /// them.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Sample<'a> {
        flag: bool,
        count: Option<u64>,
        #[serde(borrow)]
        key: TextView<'a, RequestKey>,
        #[serde(borrow)]
        reason: Option<TextView<'a, Reason>>,
        amount: Amount,
    }

    fn read_sample<'a>(bytes: &'a [u8]) -> Option<Sample<'a>> {
        let mut fields = Fields::new(bytes)?;
        let sample = Sample {
            flag: fields.bool()?,
            count: fields.option(Fields::u64)?,
            key: fields.text()?,
            reason: fields.option(Fields::text)?,
            amount: fields.amount()?,
        };
        fields.finish()?;
        Some(sample)
    }

    fn sample_bytes() -> impl Strategy<Value = Vec<u8>> {
        let sample = (
            any::<bool>(),
            any::<Option<u64>>(),
            "[ -~]{1,20}",
            prop::option::of("[ -~]{1,20}"),
            1u64..1_000_000,
            0u8..6,
        );
        sample.prop_map(|(flag, count, key, reason, mantissa, scale)| {
            let mut bytes = vec![u8::from(flag)];
            match count {
                None => bytes.push(0),
                Some(count) => {
                    bytes.push(1);
                    bytes.extend(count.to_le_bytes());
                }
            }
            bytes.extend((key.len() as u64).to_le_bytes());
            bytes.extend(key.as_bytes());
            match reason {
                None => bytes.push(0),
                Some(reason) => {
                    bytes.push(1);
                    bytes.extend((reason.len() as u64).to_le_bytes());
                    bytes.extend(reason.as_bytes());
                }
            }
            bytes.extend(u128::from(mantissa).to_le_bytes());
            bytes.push(scale);
            bytes
        })
    }

    proptest! {
        #[test]
        fn whatever_the_reader_accepts_serde_accepts_alike(
            bytes in sample_bytes(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
            cut in any::<prop::sample::Index>(),
            extra in prop::collection::vec(any::<u8>(), 0..2),
        ) {
            // Guards against the reader accepting what serde refuses (a bad tag, a bad length, text its type refuses, bytes left over), or reading it otherwise.
            let mut bytes = bytes;
            for (at, value) in flips {
                let at = at.index(bytes.len());
                bytes[at] = value;
            }
            if cut.index(4) == 0 {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            bytes.extend(extra);
            let by_serde = decode_borrowed::<Sample<'_>>(&bytes).ok();
            match read_sample(&bytes) {
                Some(read) => prop_assert_eq!(Some(read), by_serde),
                // Where the reader refuses, serde refuses too: the reader
                // leaves nothing undecided for these shapes.
                None => prop_assert_eq!(by_serde, None),
            }
        }
    }

    #[test]
    fn more_bytes_than_an_encoding_may_hold_are_not_read() {
        // Guards against the reader taking what decode_borrowed refuses by its length limit.
        assert!(Fields::new(&vec![0; ENCODED_LEN_MAX + 1]).is_none());
        assert!(Fields::new(&vec![0; ENCODED_LEN_MAX]).is_some());
    }
}
