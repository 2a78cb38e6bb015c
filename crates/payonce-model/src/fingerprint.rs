//! What makes two requests the same withdrawal.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::amount::{Amount, Currency};
use crate::text::{Destination, WithdrawalId};

/// The identity of a withdrawal: id, amount, currency and destination.
///
/// No transition changes it, so a request and any later state of it share a
/// fingerprint: that is how an outcome is matched to the request it answers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    id: WithdrawalId,
    amount: Amount,
    currency: Currency,
    destination: Destination,
}

/// A fingerprint field, as named in a [`Difference`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FingerprintField {
    /// The withdrawal id.
    Id,
    /// The amount.
    Amount,
    /// The currency.
    Currency,
    /// The destination.
    Destination,
}

impl fmt::Display for FingerprintField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FingerprintField::Id => "withdrawal id",
            FingerprintField::Amount => "amount",
            FingerprintField::Currency => "currency",
            FingerprintField::Destination => "destination",
        })
    }
}

/// Most differences two fingerprints can have: one per field.
pub const DIFFERENCES_MAX: usize = 4;

/// One field on which two fingerprints differ, with both values as text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Difference {
    /// The field.
    pub field: FingerprintField,
    /// The value in the fingerprint `differences` was called on.
    pub ours: String,
    /// The value in the other one.
    pub theirs: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} differs: {} vs {}",
            self.field, self.ours, self.theirs
        )
    }
}

impl Fingerprint {
    /// The fingerprint of a withdrawal with these fields.
    pub fn new(
        id: WithdrawalId,
        amount: Amount,
        currency: Currency,
        destination: Destination,
    ) -> Self {
        Fingerprint {
            id,
            amount,
            currency,
            destination,
        }
    }

    pub(crate) fn into_fields(self) -> (WithdrawalId, Amount, Currency, Destination) {
        (self.id, self.amount, self.currency, self.destination)
    }

    /// The withdrawal id.
    pub fn id(&self) -> &WithdrawalId {
        &self.id
    }
    /// The amount.
    pub fn amount(&self) -> Amount {
        self.amount
    }
    /// The currency.
    pub fn currency(&self) -> &Currency {
        &self.currency
    }
    /// The destination.
    pub fn destination(&self) -> &Destination {
        &self.destination
    }

    /// Whether `request` is this withdrawal: same id, amount, currency and
    /// destination. Builds nothing.
    pub fn matches(&self, request: &crate::WithdrawalRequest) -> bool {
        self.id == *request.id()
            && self.amount == request.amount()
            && self.currency == *request.currency()
            && self.destination == *request.destination()
    }

    /// Every field that differs, in a fixed order, with both values; empty
    /// when the fingerprints are equal.
    pub fn differences(&self, other: &Fingerprint) -> Vec<Difference> {
        let mut differences = Vec::new();
        // Text only for what differs: equal fingerprints cost no allocation.
        let mut compare =
            |field, ours: &dyn fmt::Display, theirs: &dyn fmt::Display, equal: bool| {
                if !equal {
                    differences.push(Difference {
                        field,
                        ours: ours.to_string(),
                        theirs: theirs.to_string(),
                    });
                }
            };
        compare(
            FingerprintField::Id,
            &self.id,
            &other.id,
            self.id == other.id,
        );
        compare(
            FingerprintField::Amount,
            &self.amount,
            &other.amount,
            self.amount == other.amount,
        );
        compare(
            FingerprintField::Currency,
            &self.currency,
            &other.currency,
            self.currency == other.currency,
        );
        compare(
            FingerprintField::Destination,
            &self.destination,
            &other.destination,
            self.destination == other.destination,
        );
        differences
    }
}
