//! Validated text newtypes. Each holds a string that passed its field's rules,
//! and deserialisation runs the same rules, so an invalid value cannot exist.

use std::borrow::Borrow;
use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use std::sync::Arc;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Field, FieldError, Rule};

/// Longest [`WithdrawalId`], in bytes of UTF-8.
pub const WITHDRAWAL_ID_LEN_MAX: usize = 128;
/// Longest [`RequestKey`] after trimming, in bytes of UTF-8.
pub const REQUEST_KEY_LEN_MAX: usize = 255;
/// Longest [`Destination`], in bytes of UTF-8.
pub const DESTINATION_LEN_MAX: usize = 256;
/// Longest free text ([`Reference`], [`Reason`], [`Actor`], [`Note`]), in bytes.
pub const TEXT_LEN_MAX: usize = 1024;
/// Most bytes in a [`WorkerName`].
pub const WORKER_NAME_LEN_MAX: usize = 64;

/// Whether a value made only of whitespace is acceptable.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Blank {
    Allowed,
    Refused,
}

/// The rules every text field shares: not empty, not longer than `len_max`,
/// no control characters, and (unless allowed) not only whitespace.
fn check_text(field: Field, value: &str, len_max: usize, blank: Blank) -> Result<(), FieldError> {
    if value.is_empty() {
        return Err(FieldError::new(field, Rule::Empty));
    }
    if value.len() > len_max {
        return Err(FieldError::new(
            field,
            Rule::TooLong {
                len: value.len(),
                max: len_max,
            },
        ));
    }
    // Most text is printable ASCII: no control character, and blank only
    // if all spaces (the only ASCII whitespace that is not a control
    // character). Replay checks every string of every event this way.
    let printable_ascii = is_printable_ascii(value.as_bytes());
    if !printable_ascii
        && let Some((offset, _)) = value.char_indices().find(|(_, c)| c.is_control())
    {
        return Err(FieldError::new(field, Rule::ControlCharacter { offset }));
    }
    let blank_text = if printable_ascii {
        value.bytes().all(|b| b == b' ')
    } else {
        value.trim().is_empty()
    };
    if blank == Blank::Refused && blank_text {
        return Err(FieldError::new(field, Rule::Blank));
    }
    Ok(())
}

/// Whether every byte of `bytes` is printable ASCII (`b' '..=b'~'`).
fn is_printable_ascii(bytes: &[u8]) -> bool {
    // Every byte looked at, with no early exit: the compiler then checks
    // many bytes per instruction.
    bytes
        .iter()
        .fold(true, |printable, &b| printable & matches!(b, b' '..=b'~'))
}

/// Keeps [`ValidText`]'s methods to this crate: only it knows each type's
/// rules, so only it may build a value from text it has checked.
pub(crate) mod sealed {
    /// Passed to [`super::ValidText`]'s methods; nameable only in this crate.
    pub struct Token;
    pub trait Sealed {}
}

/// A type of validated text: one of this crate's text newtypes, or
/// [`Currency`](crate::Currency). [`TextView`] reads text under its rules
/// without copying it. Implemented by this crate alone.
pub trait ValidText: sealed::Sealed + Sized {
    /// Checks `raw` against the type's rules and normalises it. The
    /// normalised text is a slice of `raw`; a normalisation that would
    /// change the text otherwise is refused as [`Rule::NotCanonical`].
    #[doc(hidden)]
    fn check_borrowed(raw: &str, token: sealed::Token) -> Result<&str, FieldError>;
    /// The owned value of text [`ValidText::check_borrowed`] returned.
    #[doc(hidden)]
    fn from_checked(text: &str, token: sealed::Token) -> Self;
}

/// Text that passed `T`'s rules, borrowed: what a [`ValidText`] type holds,
/// without the allocation. Replay reads millions of events through views;
/// [`TextView::to_value`] makes the owned value where one is kept.
///
/// Deserialises only from text the input lends (bincode from a slice does),
/// and only canonical text: what `T` would have to change (a lower-case
/// currency code) is refused, where `T` itself accepts and normalises it.
pub struct TextView<'a, T> {
    text: &'a str,
    kind: PhantomData<fn() -> T>,
}

impl<'a, T: ValidText> TextView<'a, T> {
    /// Checks `raw` against `T`'s rules; borrows its normalised text.
    pub fn new(raw: &'a str) -> Result<Self, FieldError> {
        Ok(TextView {
            text: T::check_borrowed(raw, sealed::Token)?,
            kind: PhantomData,
        })
    }

    /// The owned value.
    pub fn to_value(&self) -> T {
        T::from_checked(self.text, sealed::Token)
    }
}

impl<'a, T> TextView<'a, T> {
    /// The validated text, with the lifetime of what it borrows.
    pub fn as_str(&self) -> &'a str {
        self.text
    }

    /// A view of text the type already holds.
    pub(crate) fn of(text: &'a str) -> Self {
        TextView {
            text,
            kind: PhantomData,
        }
    }
}

impl<T> Clone for TextView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for TextView<'_, T> {}

impl<T> PartialEq for TextView<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl<T> Eq for TextView<'_, T> {}

impl<T> std::ops::Deref for TextView<'_, T> {
    type Target = str;
    fn deref(&self) -> &str {
        self.text
    }
}

impl<T> fmt::Debug for TextView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.text, f)
    }
}

impl<T> fmt::Display for TextView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text)
    }
}

impl<T> Serialize for TextView<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.text)
    }
}

impl<'de: 'a, 'a, T: ValidText> Deserialize<'de> for TextView<'a, T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Borrowing<'a, T>(PhantomData<fn() -> TextView<'a, T>>);
        impl<'de: 'a, 'a, T: ValidText> Visitor<'de> for Borrowing<'a, T> {
            type Value = TextView<'a, T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a borrowed string")
            }
            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
                TextView::new(text).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Borrowing(PhantomData))
    }
}

macro_rules! text_newtype {
    (
        $(#[$doc:meta])*
        $name:ident, field: $field:expr, len_max: $len_max:expr, blank: $blank:expr,
        normalise: |$raw:ident| $normalise:expr
    ) => {
        $(#[$doc])*
        ///
        /// Cloning is cheap: the text is shared, not copied.
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Validates `value` against this field's rules.
            pub fn new(value: impl AsRef<str>) -> Result<Self, FieldError> {
                Self::new_as($field, value.as_ref())
            }

            /// Validates `$raw`, naming `field` in the error if it is refused.
            fn new_as(field: Field, raw: &str) -> Result<Self, FieldError> {
                Ok($name(Arc::from(Self::checked_as(field, raw)?)))
            }

            /// Normalises `$raw` and checks it, naming `field` in the error.
            fn checked_as(field: Field, $raw: &str) -> Result<&str, FieldError> {
                let normalised: &str = $normalise;
                check_text(field, normalised, $len_max, $blank)?;
                Ok(normalised)
            }

            /// The validated text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The text, borrowed as a [`TextView`].
            pub fn view(&self) -> TextView<'_, $name> {
                TextView::of(&self.0)
            }
        }

        impl sealed::Sealed for $name {}

        impl ValidText for $name {
            fn check_borrowed(raw: &str, _: sealed::Token) -> Result<&str, FieldError> {
                Self::checked_as($field, raw)
            }

            fn from_checked(text: &str, _: sealed::Token) -> Self {
                $name(Arc::from(text))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        // Reading a validated string as a `&str` cannot break its rules, so
        // it derefs like one; there is no `DerefMut`.
        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = FieldError;
            fn try_from(value: String) -> Result<Self, FieldError> {
                Self::new(value)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = FieldError;
            fn try_from(value: &str) -> Result<Self, FieldError> {
                Self::new(value)
            }
        }

        impl FromStr for $name {
            type Err = FieldError;
            fn from_str(value: &str) -> Result<Self, FieldError> {
                Self::new(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0.to_string()
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                // Validates straight from the borrowed text: one allocation,
                // for the value kept.
                deserialize_validated(deserializer, |text| Self::new(text))
            }
        }
    };
}

/// A serde visitor that reads a string and validates it with `build`.
struct ValidatingVisitor<F>(F);

impl<'de, T, F: FnOnce(&str) -> Result<T, FieldError>> Visitor<'de> for ValidatingVisitor<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        (self.0)(text).map_err(E::custom)
    }
}

/// Deserialises a string through `build`, which validates it.
pub(crate) fn deserialize_validated<'de, D, T>(
    deserializer: D,
    build: impl FnOnce(&str) -> Result<T, FieldError>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    deserializer.deserialize_str(ValidatingVisitor(build))
}

text_newtype! {
    /// A withdrawal's identity: non-empty, not blank, at most
    /// [`WITHDRAWAL_ID_LEN_MAX`] bytes, no control characters.
    WithdrawalId, field: Field::WithdrawalId, len_max: WITHDRAWAL_ID_LEN_MAX, blank: Blank::Refused,
    normalise: |raw| raw
}

text_newtype! {
    /// A client's request key. Surrounding whitespace is trimmed, so
    /// `" req-1 "` and `"req-1"` are the same key; then it must be non-empty,
    /// at most [`REQUEST_KEY_LEN_MAX`] bytes, with no control characters.
    RequestKey, field: Field::RequestKey, len_max: REQUEST_KEY_LEN_MAX, blank: Blank::Allowed,
    normalise: |raw| raw.trim()
}

text_newtype! {
    /// Where the money goes (an address or an account): not blank, at most
    /// [`DESTINATION_LEN_MAX`] bytes, no control characters.
    Destination, field: Field::Destination, len_max: DESTINATION_LEN_MAX, blank: Blank::Refused,
    normalise: |raw| raw
}

text_newtype! {
    /// The rail's transaction reference (a hash, a payment id): not blank,
    /// at most [`TEXT_LEN_MAX`] bytes, no control characters.
    Reference, field: Field::Reference, len_max: TEXT_LEN_MAX, blank: Blank::Refused,
    normalise: |raw| raw
}

text_newtype! {
    /// Why a withdrawal was rejected or failed: not blank, at most
    /// [`TEXT_LEN_MAX`] bytes, no control characters.
    Reason, field: Field::Reason, len_max: TEXT_LEN_MAX, blank: Blank::Refused,
    normalise: |raw| raw
}

text_newtype! {
    /// Who acted: the person or service that requested a withdrawal, or the
    /// operator who closed a key. Not blank, at most [`TEXT_LEN_MAX`] bytes,
    /// no control characters.
    Actor, field: Field::RequestedBy, len_max: TEXT_LEN_MAX, blank: Blank::Refused,
    normalise: |raw| raw
}

text_newtype! {
    /// An operator's note on a resolve or a release: not blank, at most
    /// [`TEXT_LEN_MAX`] bytes, no control characters.
    Note, field: Field::Note, len_max: TEXT_LEN_MAX, blank: Blank::Refused,
    normalise: |raw| raw
}

text_newtype! {
    /// The name of a worker of a ledger several processes share (a host and
    /// a slot, say `api-3`): stable across the worker's restarts, so its
    /// next start ends the sends of its earlier ones. Not blank, at most
    /// [`WORKER_NAME_LEN_MAX`] bytes, no control characters.
    WorkerName, field: Field::Worker, len_max: WORKER_NAME_LEN_MAX, blank: Blank::Refused,
    normalise: |raw| raw
}

impl WithdrawalId {
    /// The id a ledger minted, before schema 3, for the withdrawal created
    /// by the event with sequence number `seq`: `w-<seq>`. Unique within
    /// one ledger because sequence numbers are, but not across ledgers.
    pub fn minted(seq: u64) -> Self {
        WithdrawalId::checked_minted(format!("w-{seq}"))
    }

    /// The id a ledger mints for the withdrawal created by the event with
    /// sequence number `seq`, in the opening numbered `epoch`:
    /// `w-<epoch in lower-case hex, no leading zeros>-<seq in decimal>`.
    /// Unique within one ledger because sequence numbers are, and across
    /// ledgers and restored copies because every opening draws its epoch
    /// at random.
    pub fn minted_in(epoch: u64, seq: u64) -> Self {
        WithdrawalId::checked_minted(format!("w-{epoch:x}-{seq}"))
    }

    fn checked_minted(id: String) -> Self {
        // Digits, hex digits and dashes: far below the length limit, no
        // control characters.
        debug_assert!(
            check_text(
                Field::WithdrawalId,
                &id,
                WITHDRAWAL_ID_LEN_MAX,
                Blank::Refused
            )
            .is_ok()
        );
        WithdrawalId(Arc::from(id))
    }

    /// Whether `id` is the id [`WithdrawalId::minted`] gives for `seq`.
    /// Builds nothing: replay asks it of every creation.
    pub fn is_minted(id: &str, seq: u64) -> bool {
        id.strip_prefix("w-")
            .is_some_and(|digits| is_decimal_of(digits.as_bytes(), seq))
    }

    /// Whether `id` is the id [`WithdrawalId::minted_in`] gives for
    /// `epoch` and `seq`. Builds nothing.
    pub fn is_minted_in(id: &str, epoch: u64, seq: u64) -> bool {
        let Some((hex, digits)) = id.strip_prefix("w-").and_then(|rest| rest.split_once('-'))
        else {
            return false;
        };
        // Compared as text, so another spelling of the number (upper case,
        // a leading zero, a sign) is not the minted id.
        let mut spelled = [0; 16];
        hex.as_bytes() == lower_hex(epoch, &mut spelled) && is_decimal_of(digits.as_bytes(), seq)
    }
}

/// `number` in lower-case hex without leading zeros, written into the end
/// of `into`.
fn lower_hex(number: u64, into: &mut [u8; 16]) -> &[u8] {
    let mut start = into.len();
    let mut rest = number;
    loop {
        start -= 1;
        into[start] = b"0123456789abcdef"[(rest % 16) as usize];
        rest /= 16;
        if rest == 0 {
            return &into[start..];
        }
    }
}

/// Whether `digits` are exactly the decimal digits of `number`: compared
/// from the last, so a leading zero or sign is never read as part of it.
fn is_decimal_of(digits: &[u8], number: u64) -> bool {
    let mut rest = number;
    let mut end = digits.len();
    loop {
        let Some(at) = end.checked_sub(1) else {
            return false;
        };
        // `rest % 10` is a single digit.
        if digits[at] != b'0' + (rest % 10) as u8 {
            return false;
        }
        rest /= 10;
        end = at;
        if rest == 0 {
            return end == 0;
        }
    }
}

impl Reason {
    /// A reason made from any text, such as an error's message: control
    /// characters are escaped (`\n`), the text is cut at [`TEXT_LEN_MAX`]
    /// bytes on a character boundary, and blank text becomes
    /// `(no message)`. Never fails, so recording why something failed cannot
    /// itself fail.
    pub fn lossy(text: &str) -> Self {
        const ELLIPSIS: &str = "...";
        let mut reason = String::with_capacity(text.len().min(TEXT_LEN_MAX));
        for c in text.chars() {
            let piece: String = if c.is_control() {
                c.escape_default().collect()
            } else {
                c.to_string()
            };
            if reason.len() + piece.len() > TEXT_LEN_MAX - ELLIPSIS.len() {
                reason.push_str(ELLIPSIS);
                break;
            }
            reason.push_str(&piece);
        }
        if reason.trim().is_empty() {
            reason = "(no message)".to_owned();
        }
        debug_assert!(check_text(Field::Reason, &reason, TEXT_LEN_MAX, Blank::Refused).is_ok());
        Reason(Arc::from(reason))
    }
}

impl Actor {
    /// Validates an operator's name; a refusal names the `operator` field.
    pub fn operator(value: impl AsRef<str>) -> Result<Self, FieldError> {
        Self::new_as(Field::Operator, value.as_ref())
    }
}
