//! [`TextArena`]: validated text of many views copied end to end, so the
//! views can be handed to another thread in one allocation and read back
//! without being checked again.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::amount::{Amount, Currency};
use crate::text::{Actor, Destination, Reason, Reference, TextView, WithdrawalId};
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

/// A [`WithdrawalView`] copied into a [`TextArena`].
#[derive(Debug, Clone, Copy)]
pub struct ArenaRequest {
    id: ArenaText<WithdrawalId>,
    amount: Amount,
    currency: ArenaText<Currency>,
    destination: ArenaText<Destination>,
    state: WithdrawalState,
    reference: Option<ArenaText<Reference>>,
    reason: Option<ArenaText<Reason>>,
    requested_by: ArenaText<Actor>,
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
    pub fn push_request(&mut self, request: WithdrawalView<'_>) -> Option<ArenaRequest> {
        if !request.replaced().is_empty() {
            return None;
        }
        Some(ArenaRequest {
            id: self.push(request.id()),
            amount: request.amount(),
            currency: self.push(request.currency()),
            destination: self.push(request.destination()),
            state: request.state(),
            reference: request.reference().map(|text| self.push(text)),
            reason: request.reason().map(|text| self.push(text)),
            requested_by: self.push(request.requested_by()),
        })
    }

    /// The request copied in as `at`.
    ///
    /// # Panics
    /// As [`TextArena::get`].
    #[inline]
    pub fn request(&self, at: &ArenaRequest) -> WithdrawalView<'_> {
        WithdrawalView {
            id: self.get(at.id),
            amount: at.amount,
            currency: self.get(at.currency),
            destination: self.get(at.destination),
            state: at.state,
            reference: at.reference.map(|text| self.get(text)),
            reason: at.reason.map(|text| self.get(text)),
            requested_by: self.get(at.requested_by),
            replaced: &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::RequestKey;

    #[test]
    fn text_comes_back_as_it_went_in() {
        let key = RequestKey::new(" k-1 ").unwrap();
        let mut arena = TextArena::new();
        let at = arena.push(key.view());
        let other = arena.push(TextView::<Reason>::new("node down").unwrap());
        assert_eq!(arena.get(at).to_value(), key);
        assert_eq!(arena.get(other).as_str(), "node down");
    }

    #[test]
    #[should_panic(expected = "did not make it")]
    fn a_handle_from_before_a_clear_is_refused() {
        let mut arena = TextArena::new();
        let at = arena.push(TextView::<Reason>::new("node down").unwrap());
        arena.clear();
        arena.push(TextView::<Reason>::new("node up").unwrap());
        let _ = arena.get(at);
    }
}
