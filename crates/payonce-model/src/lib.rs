//! The withdrawal as a value: a request to move money out of custody, its
//! state machine, and the validated types it is made of.
//!
//! - [`WithdrawalRequest`] and its transitions ([`approve`], [`mark_sent`],
//!   ...), each returning a new value or an [`InvalidTransition`].
//! - Validated newtypes ([`WithdrawalId`], [`RequestKey`], [`Amount`],
//!   [`Currency`], [`Destination`], and free text) that cannot hold an invalid
//!   value, not even when deserialised. A refusal is a [`FieldError`] naming
//!   the field and the rule.
//! - Borrowed views of them ([`TextView`], [`WithdrawalView`]): the same
//!   rules over text borrowed from the bytes being decoded, for readers of
//!   millions of records that keep little of each.
//! - [`handover`]: many views' text copied into one buffer, to hand them
//!   to another thread without checking them again.
//! - [`Fingerprint`]: what makes two requests the same withdrawal.
//! - [`codec`]: the one pair of functions that turns values into bytes,
//!   and a reader of the same bytes field by field for replay's hot path.
//! - [`escape`]: untrusted text (a key, a note, a rail's error) made safe
//!   to print, and a value a user gave echoed back bounded.
//! - [`hex`]: a 32-byte digest as 64 lowercase hex digits, both ways.
//!
//! This crate does no I/O, reads no clock and stores nothing: deciding
//! whether a withdrawal may be sent is the `payonce` crate's job.
//!
//! ```
//! use payonce_model::{Actor, Amount, Currency, Destination, Reference, WithdrawalId, WithdrawalRequest};
//!
//! let request = WithdrawalRequest::new(
//!     WithdrawalId::new("w-1041")?,
//!     Amount::parse("25.00")?,
//!     Currency::new("usdc")?,
//!     Destination::new("0xabc")?,
//!     Actor::new("alice")?,
//! );
//! let sent = request.approve()?.start_sending()?.mark_sent(Reference::new("0xdeadbeef")?)?;
//! assert_eq!(sent.fingerprint(), request.fingerprint());
//! assert_eq!(sent.currency().as_str(), "USDC");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`approve`]: WithdrawalRequest::approve
//! [`mark_sent`]: WithdrawalRequest::mark_sent

mod amount;
pub mod bounded;
pub mod codec;
mod error;
pub mod escape;
mod fingerprint;
pub mod handover;
pub mod hex;
mod text;
mod withdrawal;

pub use crate::amount::{
    AMOUNT_DECIMALS_MAX, AMOUNT_DIGITS_MAX, AMOUNT_TEXT_LEN_MAX, Amount, CURRENCY_LEN_MAX,
    CURRENCY_LEN_MIN, Currency,
};
pub use crate::error::{Field, FieldError, Rule};
pub use crate::fingerprint::{DIFFERENCES_MAX, Difference, Fingerprint, FingerprintField};
pub use crate::text::{
    Actor, DESTINATION_LEN_MAX, Destination, Note, REQUEST_KEY_LEN_MAX, Reason, Reference,
    RequestKey, TEXT_LEN_MAX, TextView, ValidText, WITHDRAWAL_ID_LEN_MAX, WORKER_NAME_LEN_MAX,
    WithdrawalId, WorkerName,
};
pub use crate::withdrawal::{
    InvalidTransition, OutcomeError, Progress, REPLACED_MAX, Transition, TransitionRefusal,
    WithdrawalRequest, WithdrawalState, WithdrawalView,
};
