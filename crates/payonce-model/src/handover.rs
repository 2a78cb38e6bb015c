//! Handing borrowed values to another thread: [`TextArena`] copies the
//! validated text of many views end to end, so the views can cross to
//! another thread in one allocation and be read back without being checked
//! again. A replay that decodes on one thread and applies on another uses
//! it; nothing else in the model depends on it.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::amount::Amount;
use crate::text::{TEXT_LEN_MAX, TextView};
use crate::withdrawal::{WithdrawalState, WithdrawalView};

/// Most bytes of text a [`TextArena`] holds: handles are 32-bit offsets.
pub const ARENA_LEN_MAX: usize = u32::MAX as usize;

/// Numbers every arena, and every clearing of one, apart: a handle read
/// from another arena, or from before a clear, is a bug caught at once
/// rather than a wrong piece of text.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, Ordering::Relaxed)
}

/// Text that passed its type's rules, copied end to end. [`TextArena::push`]
/// copies a [`TextView`] in and returns a handle; [`TextArena::get`] gives
/// the view back. Only checked text goes in, and a handle names exactly
/// what was pushed, so what comes out is valid without a second check.
#[derive(Debug)]
pub struct TextArena {
    text: String,
    generation: u64,
}

/// Where a [`TextView`] of type `T` was copied in a [`TextArena`].
pub struct ArenaText<T> {
    start: u32,
    end: u32,
    generation: u64,
    kind: PhantomData<fn() -> T>,
}

impl<T> Clone for ArenaText<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for ArenaText<T> {}

impl<T> std::fmt::Debug for ArenaText<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ArenaText({}..{})", self.start, self.end)
    }
}

/// A [`WithdrawalView`] copied into a [`TextArena`]: its text end to end
/// from `start`, in the order of `lens` (a length of 0 for an absent
/// reference or reason: checked text is never empty). 48 bytes, so a
/// batch of packed events stays small.
#[derive(Debug, Clone, Copy)]
pub struct ArenaRequest {
    generation: u64,
    start: u32,
    /// Id, currency, destination, reference, reason, requester.
    lens: [u16; 6],
    amount: Amount,
    state: WithdrawalState,
}

impl Default for TextArena {
    fn default() -> Self {
        TextArena::new()
    }
}

impl TextArena {
    /// An empty arena.
    pub fn new() -> Self {
        TextArena {
            text: String::new(),
            generation: next_generation(),
        }
    }

    /// An empty arena with room for `len` bytes of text.
    pub fn with_capacity(len: usize) -> Self {
        TextArena {
            text: String::with_capacity(len),
            generation: next_generation(),
        }
    }

    /// Empties the arena, keeping its memory. Handles into it from before
    /// are no longer valid.
    pub fn clear(&mut self) {
        self.text.clear();
        self.generation = next_generation();
    }

    /// Bytes of text held.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    /// Whether it holds no text.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Copies `view` in.
    ///
    /// # Panics
    /// If the arena would hold more than [`ARENA_LEN_MAX`] bytes.
    #[inline]
    pub fn push<T>(&mut self, view: TextView<'_, T>) -> ArenaText<T> {
        let start = self.text.len();
        self.text.push_str(view.as_str());
        let end = self.text.len();
        assert!(
            end <= ARENA_LEN_MAX,
            "a text arena outgrew {ARENA_LEN_MAX} bytes"
        );
        ArenaText {
            start: start as u32,
            end: end as u32,
            generation: self.generation,
            kind: PhantomData,
        }
    }

    /// The view copied in as `at`.
    ///
    /// # Panics
    /// If `at` was made by another arena, or by this one before a clear.
    #[inline]
    pub fn get<T>(&self, at: ArenaText<T>) -> TextView<'_, T> {
        assert_eq!(
            at.generation, self.generation,
            "a text handle read from an arena that did not make it"
        );
        TextView::of(&self.text[at.start as usize..at.end as usize])
    }

    /// Copies `request` in; `None` if it has replaced references, which an
    /// arena does not hold.
    #[inline]
    pub fn push_request(&mut self, request: &WithdrawalView<'_>) -> Option<ArenaRequest> {
        if !request.replaced().is_empty() {
            return None;
        }
        let start = self.text.len();
        let texts = [
            Some(request.id().as_str()),
            Some(request.currency().as_str()),
            Some(request.destination().as_str()),
            request.reference().map(|text| text.as_str()),
            request.reason().map(|text| text.as_str()),
            Some(request.requested_by().as_str()),
        ];
        let mut lens = [0u16; 6];
        for (len, text) in lens.iter_mut().zip(texts) {
            let Some(text) = text else { continue };
            // Checked text is never empty, and no field allows more than
            // TEXT_LEN_MAX bytes.
            assert!(
                !text.is_empty() && text.len() <= TEXT_LEN_MAX,
                "a withdrawal's text of {} bytes in an arena",
                text.len()
            );
            *len = text.len() as u16;
            self.text.push_str(text);
        }
        assert!(
            self.text.len() <= ARENA_LEN_MAX,
            "a text arena outgrew {ARENA_LEN_MAX} bytes"
        );
        Some(ArenaRequest {
            generation: self.generation,
            start: start as u32,
            lens,
            amount: request.amount(),
            state: request.state(),
        })
    }

    /// The request copied in as `at`.
    ///
    /// # Panics
    /// As [`TextArena::get`].
    #[inline]
    pub fn request(&self, at: &ArenaRequest) -> WithdrawalView<'_> {
        assert_eq!(
            at.generation, self.generation,
            "a request handle read from an arena that did not make it"
        );
        let mut texts = [None; 6];
        let mut start = at.start as usize;
        for (text, &len) in texts.iter_mut().zip(&at.lens) {
            if len > 0 {
                let end = start + usize::from(len);
                *text = Some(&self.text[start..end]);
                start = end;
            }
        }
        // Present exactly where `push_request` found text.
        fn present(text: Option<&str>) -> &str {
            match text {
                Some(text) => text,
                None => unreachable!("a request packed without its required text"),
            }
        }
        WithdrawalView {
            id: TextView::of(present(texts[0])),
            amount: at.amount,
            currency: TextView::of(present(texts[1])),
            destination: TextView::of(present(texts[2])),
            state: at.state,
            reference: texts[3].map(TextView::of),
            reason: texts[4].map(TextView::of),
            requested_by: TextView::of(present(texts[5])),
            replaced: &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{Actor, Destination, Reason, Reference, RequestKey, WithdrawalId};
    use crate::{Amount, Currency, WithdrawalRequest};

    #[test]
    fn text_comes_back_as_it_went_in() {
        // Guards against handles that name other text than was pushed.
        let key = RequestKey::new(" k-1 ").unwrap();
        let mut arena = TextArena::new();
        let at = arena.push(key.view());
        let other = arena.push(TextView::<Reason>::new("node down").unwrap());
        assert_eq!(arena.get(at).to_value(), key);
        assert_eq!(arena.get(other).as_str(), "node down");
    }

    #[test]
    fn a_request_comes_back_as_it_went_in() {
        // Guards against a packed request losing or mixing its fields, and against packing a bump.
        let requested = WithdrawalRequest::new(
            WithdrawalId::new("w-1").unwrap(),
            Amount::parse("2.5").unwrap(),
            Currency::new("USDC").unwrap(),
            Destination::new("0xabc").unwrap(),
            Actor::new("alice").unwrap(),
        );
        let approved = requested.approve().unwrap();
        let sent = approved
            .start_sending()
            .unwrap()
            .mark_sent(Reference::new("0xfeed").unwrap())
            .unwrap();
        let failed = approved.fail(Reason::new("node down").unwrap()).unwrap();
        let bumped = sent.bump(Reference::new("0xbeef").unwrap()).unwrap();
        let mut arena = TextArena::new();
        let packed: Vec<_> = [&requested, &sent, &failed]
            .iter()
            .map(|request| arena.push_request(&request.view()).unwrap())
            .collect();
        assert!(arena.push_request(&bumped.view()).is_none());
        for (request, at) in [&requested, &sent, &failed].iter().zip(&packed) {
            assert_eq!(arena.request(at).to_value(), **request);
        }
    }

    #[test]
    fn a_handle_from_before_a_clear_is_refused() {
        // Guards against reading a stale handle as whatever text now sits there.
        let mut arena = TextArena::new();
        let at = arena.push(TextView::<Reason>::new("node down").unwrap());
        arena.clear();
        arena.push(TextView::<Reason>::new("node up").unwrap());
        let refused = std::panic::catch_unwind(|| arena.get(at).as_str().to_owned());
        let message = refused.expect_err("a stale handle was read");
        let message = message
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        assert!(message.contains("did not make it"), "{message}");
    }
}
