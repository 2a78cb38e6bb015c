//! The withdrawal request and its state machine.
//!
//! Deserialising a request checks the same invariants as the transitions
//! (a reference exactly in the states that carry one, a reason exactly in
//! rejected and failed, replaced references only beside a current one), so
//! a value read from JSON or bincode is one the state machine could have
//! produced.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::amount::{Amount, Currency};
use crate::error::{Field, FieldError, Rule};
use crate::fingerprint::Fingerprint;
use crate::text::{Actor, Destination, Reason, Reference, TextView, WithdrawalId};

/// Most references a withdrawal can have replaced by bumps. A rail that needs
/// more replacements than this is stuck, and a person should look.
pub const REPLACED_MAX: usize = 32;

/// Where a withdrawal is in its life.
///
/// ```text
/// requested -> approved -> sending -> sent -> confirmed
///     |           |  \        \         \
///     +-> rejected+   +------> failed <--+
/// ```
/// Rejected is reachable only while the money has not moved (requested or
/// approved); failed from approved, sending or sent. Confirmed, rejected and
/// failed are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WithdrawalState {
    /// Asked for; nobody has approved it yet.
    Requested,
    /// Approved; not yet handed to the rail.
    Approved,
    /// Being handed to the rail; the money may be moving.
    Sending,
    /// The rail accepted it and gave a reference.
    Sent,
    /// The rail confirmed it. Terminal.
    Confirmed,
    /// Refused before any money moved. Terminal.
    Rejected,
    /// Failed after approval. Terminal.
    Failed,
}

impl WithdrawalState {
    /// Every state, in the order of their numbers in an encoding (the
    /// order of the declaration: docs/event-format.md).
    pub const ALL: [WithdrawalState; 7] = [
        WithdrawalState::Requested,
        WithdrawalState::Approved,
        WithdrawalState::Sending,
        WithdrawalState::Sent,
        WithdrawalState::Confirmed,
        WithdrawalState::Rejected,
        WithdrawalState::Failed,
    ];

    /// Whether no transition leaves this state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            WithdrawalState::Confirmed | WithdrawalState::Rejected | WithdrawalState::Failed
        )
    }

    /// Whether the state says what the rail did, and so can be a send's
    /// outcome: sent, confirmed, failed or rejected. Requested, approved
    /// and sending say only what was about to happen.
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            WithdrawalState::Sent
                | WithdrawalState::Confirmed
                | WithdrawalState::Failed
                | WithdrawalState::Rejected
        )
    }

    /// The state's name in messages and JSON.
    pub fn name(self) -> &'static str {
        match self {
            WithdrawalState::Requested => "requested",
            WithdrawalState::Approved => "approved",
            WithdrawalState::Sending => "sending",
            WithdrawalState::Sent => "sent",
            WithdrawalState::Confirmed => "confirmed",
            WithdrawalState::Rejected => "rejected",
            WithdrawalState::Failed => "failed",
        }
    }
}

impl fmt::Display for WithdrawalState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A transition a caller asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transition {
    /// [`WithdrawalRequest::approve`].
    Approve,
    /// [`WithdrawalRequest::reject`].
    Reject,
    /// [`WithdrawalRequest::start_sending`].
    StartSending,
    /// [`WithdrawalRequest::mark_sent`].
    MarkSent,
    /// [`WithdrawalRequest::confirm`].
    Confirm,
    /// [`WithdrawalRequest::fail`].
    Fail,
    /// [`WithdrawalRequest::bump`].
    Bump,
}

impl Transition {
    /// The state this transition leads to.
    pub fn target(self) -> WithdrawalState {
        match self {
            Transition::Approve => WithdrawalState::Approved,
            Transition::Reject => WithdrawalState::Rejected,
            Transition::StartSending => WithdrawalState::Sending,
            Transition::MarkSent | Transition::Bump => WithdrawalState::Sent,
            Transition::Confirm => WithdrawalState::Confirmed,
            Transition::Fail => WithdrawalState::Failed,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Transition::Approve => "approve",
            Transition::Reject => "reject",
            Transition::StartSending => "start_sending",
            Transition::MarkSent => "mark_sent",
            Transition::Confirm => "confirm",
            Transition::Fail => "fail",
            Transition::Bump => "bump",
        }
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why [`WithdrawalRequest::sent`] could not build the outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutcomeError {
    /// The reference is not a valid reference.
    Reference(FieldError),
    /// The withdrawal cannot be sent from where it is.
    Transition(InvalidTransition),
}

impl From<InvalidTransition> for OutcomeError {
    fn from(error: InvalidTransition) -> Self {
        OutcomeError::Transition(error)
    }
}

impl fmt::Display for OutcomeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutcomeError::Reference(error) => write!(f, "{error}"),
            OutcomeError::Transition(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for OutcomeError {}

/// Why a transition was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransitionRefusal {
    /// The state machine has no such move from the current state.
    NotAllowed,
    /// The transition already happened with another reference.
    DifferentReference {
        /// The reference the withdrawal holds.
        current: Reference,
        /// The reference the caller brought.
        requested: Reference,
    },
    /// The transition already happened with another reason.
    DifferentReason {
        /// The reason the withdrawal holds.
        current: Reason,
        /// The reason the caller brought.
        requested: Reason,
    },
    /// The reference was replaced by a bump and can never come back.
    ReplacedReference(Reference),
    /// The withdrawal has been bumped [`REPLACED_MAX`] times already.
    TooManyBumps,
}

/// A transition the state machine refuses: names the withdrawal, its current
/// state, the transition asked for, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidTransition {
    /// The withdrawal.
    pub id: WithdrawalId,
    /// Its state when the transition was asked for.
    pub current: WithdrawalState,
    /// The transition asked for; its target is `requested.target()`.
    pub requested: Transition,
    /// Why it was refused.
    pub refusal: TransitionRefusal,
}

impl fmt::Display for InvalidTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let InvalidTransition {
            id,
            current,
            requested,
            refusal,
        } = self;
        let target = requested.target();
        write!(
            f,
            "withdrawal {id} is {current}; {requested} (to {target}) refused: "
        )?;
        match refusal {
            TransitionRefusal::NotAllowed => write!(f, "no move from {current} to {target}"),
            TransitionRefusal::DifferentReference { current, requested } => {
                write!(f, "it holds reference {current}, not {requested}")
            }
            TransitionRefusal::DifferentReason { current, requested } => {
                write!(f, "it holds reason {current:?}, not {requested:?}")
            }
            TransitionRefusal::ReplacedReference(reference) => {
                write!(f, "reference {reference} was replaced by a bump")
            }
            TransitionRefusal::TooManyBumps => {
                write!(f, "it has been bumped {REPLACED_MAX} times already")
            }
        }
    }
}

impl std::error::Error for InvalidTransition {}

/// A request to move money out of custody, as a value.
///
/// Every transition returns a new value and leaves `self` untouched. A
/// transition that already happened, asked again with the same data, returns
/// an equal value: a callback delivered twice changes nothing. The
/// [`Fingerprint`] (id, amount, currency, destination) never changes.
///
/// Deserialisation checks the same invariants as the transitions: a value
/// read from JSON or bincode is one the state machine could have produced.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "WithdrawalFields")]
pub struct WithdrawalRequest {
    id: WithdrawalId,
    amount: Amount,
    currency: Currency,
    destination: Destination,
    state: WithdrawalState,
    reference: Option<Reference>,
    reason: Option<Reason>,
    requested_by: Actor,
    replaced: Vec<Reference>,
}

/// The unchecked shape of a [`WithdrawalRequest`] as it arrives from serde.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WithdrawalFields {
    id: WithdrawalId,
    amount: Amount,
    currency: Currency,
    destination: Destination,
    state: WithdrawalState,
    #[serde(default)]
    reference: Option<Reference>,
    #[serde(default)]
    reason: Option<Reason>,
    requested_by: Actor,
    #[serde(
        default,
        deserialize_with = "crate::bounded::vec_max::<_, _, REPLACED_MAX>"
    )]
    replaced: Vec<Reference>,
}

impl TryFrom<WithdrawalFields> for WithdrawalRequest {
    type Error = FieldError;

    fn try_from(fields: WithdrawalFields) -> Result<Self, FieldError> {
        let WithdrawalFields {
            id,
            amount,
            currency,
            destination,
            state,
            reference,
            reason,
            requested_by,
            replaced,
        } = fields;
        let progress = Progress::new(state, reference, reason, requested_by, replaced)?;
        Ok(WithdrawalRequest::from_parts(
            Fingerprint::new(id, amount, currency, destination),
            progress,
        ))
    }
}

/// Everything about a withdrawal but its [`Fingerprint`]: its state, what
/// the rail said, and who asked. Taken from a valid [`WithdrawalRequest`] or
/// built by [`Progress::new`] under the same rules, so putting it back
/// together with a fingerprint always gives a valid one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Progress {
    state: WithdrawalState,
    reference: Option<Reference>,
    reason: Option<Reason>,
    requested_by: Actor,
    replaced: Vec<Reference>,
}

impl Progress {
    /// Checks the parts against the state machine's rules, the same rules
    /// deserialisation runs: a reference exactly in the states that carry
    /// one, a reason exactly in rejected and failed, and replaced references
    /// only beside a current one, distinct, at most [`REPLACED_MAX`].
    pub fn new(
        state: WithdrawalState,
        reference: Option<Reference>,
        reason: Option<Reason>,
        requested_by: Actor,
        replaced: Vec<Reference>,
    ) -> Result<Progress, FieldError> {
        let refuse = |field, rule| Err(FieldError::new(field, rule));
        check_state_fields(state, reference.is_some(), reason.is_some())?;
        if !replaced.is_empty() {
            let Some(current) = &reference else {
                return refuse(Field::Replaced, Rule::NotAllowedInState(state));
            };
            if replaced.len() > REPLACED_MAX {
                return refuse(
                    Field::Replaced,
                    Rule::TooMany {
                        count: replaced.len(),
                        max: REPLACED_MAX,
                    },
                );
            }
            for (index, old) in replaced.iter().enumerate() {
                if old == current || replaced[..index].contains(old) {
                    return refuse(Field::Replaced, Rule::Repeated);
                }
            }
        }
        Ok(Progress {
            state,
            reference,
            reason,
            requested_by,
            replaced,
        })
    }

    /// Where the withdrawal is in its life.
    pub fn state(&self) -> WithdrawalState {
        self.state
    }
    /// The rail's current transaction reference, once sent.
    pub fn reference(&self) -> Option<&Reference> {
        self.reference.as_ref()
    }
}

impl WithdrawalState {
    /// Checks the rule this state sets for a reference and a reason (a
    /// reference exactly in the states that carry one, a reason exactly in
    /// rejected and failed) without building the values: for readers that
    /// keep the fields apart, as a snapshot of the projections does.
    pub fn check_fields(self, has_reference: bool, has_reason: bool) -> Result<(), FieldError> {
        check_state_fields(self, has_reference, has_reason)
    }
}

/// The rule every state sets for a reference and a reason: a reference
/// exactly in the states that carry one, a reason exactly in rejected and
/// failed.
fn check_state_fields(
    state: WithdrawalState,
    has_reference: bool,
    has_reason: bool,
) -> Result<(), FieldError> {
    use WithdrawalState as S;
    let refuse = |field, rule| Err(FieldError::new(field, rule));
    let reference_required = matches!(state, S::Sent | S::Confirmed);
    let reference_allowed = reference_required || state == S::Failed;
    match (has_reference, reference_required, reference_allowed) {
        (false, true, _) => return refuse(Field::Reference, Rule::RequiredInState(state)),
        (true, _, false) => return refuse(Field::Reference, Rule::NotAllowedInState(state)),
        _ => {}
    }
    let reason_required = matches!(state, S::Rejected | S::Failed);
    match (has_reason, reason_required) {
        (false, true) => refuse(Field::Reason, Rule::RequiredInState(state)),
        (true, false) => refuse(Field::Reason, Rule::NotAllowedInState(state)),
        _ => Ok(()),
    }
}

/// A [`WithdrawalRequest`] whose text is borrowed: what replay reads from
/// each event without copying it. Holds only what passed the request's
/// rules, like the request itself.
///
/// Deserialises (from bincode read from a slice) only what it can borrow:
/// canonical text, and no replaced references (a bumped withdrawal); the
/// owned [`WithdrawalRequest`] reads everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WithdrawalView<'a> {
    pub(crate) id: TextView<'a, WithdrawalId>,
    pub(crate) amount: Amount,
    pub(crate) currency: TextView<'a, Currency>,
    pub(crate) destination: TextView<'a, Destination>,
    pub(crate) state: WithdrawalState,
    pub(crate) reference: Option<TextView<'a, Reference>>,
    pub(crate) reason: Option<TextView<'a, Reason>>,
    pub(crate) requested_by: TextView<'a, Actor>,
    pub(crate) replaced: &'a [Reference],
}

/// The unchecked shape of a [`WithdrawalView`]: [`WithdrawalFields`],
/// borrowed, field for field.
/// Also what [`crate::codec::Fields::withdrawal`] reads, without serde.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WithdrawalFieldsView<'a> {
    #[serde(borrow)]
    pub(crate) id: TextView<'a, WithdrawalId>,
    pub(crate) amount: Amount,
    #[serde(borrow)]
    pub(crate) currency: TextView<'a, Currency>,
    #[serde(borrow)]
    pub(crate) destination: TextView<'a, Destination>,
    pub(crate) state: WithdrawalState,
    #[serde(default, borrow)]
    pub(crate) reference: Option<TextView<'a, Reference>>,
    #[serde(default, borrow)]
    pub(crate) reason: Option<TextView<'a, Reason>>,
    #[serde(borrow)]
    pub(crate) requested_by: TextView<'a, Actor>,
    #[serde(default)]
    pub(crate) replaced: NoReplaced,
}

/// An empty list of replaced references; a view refuses any other.
#[derive(Default)]
pub(crate) struct NoReplaced;

impl<'de> Deserialize<'de> for NoReplaced {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Empty;
        impl<'de> Visitor<'de> for Empty {
            type Value = NoReplaced;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an empty list of references")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NoReplaced, A::Error> {
                match seq.next_element::<TextView<'de, Reference>>()? {
                    None => Ok(NoReplaced),
                    Some(_) => Err(de::Error::custom(
                        "a withdrawal view holds no replaced references",
                    )),
                }
            }
        }
        deserializer.deserialize_seq(Empty)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for WithdrawalView<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        WithdrawalFieldsView::deserialize(deserializer)?
            .checked()
            .map_err(de::Error::custom)
    }
}

impl<'a> WithdrawalFieldsView<'a> {
    /// The view, if the fields are as its state requires.
    pub(crate) fn checked(self) -> Result<WithdrawalView<'a>, FieldError> {
        let WithdrawalFieldsView {
            id,
            amount,
            currency,
            destination,
            state,
            reference,
            reason,
            requested_by,
            replaced: NoReplaced,
        } = self;
        check_state_fields(state, reference.is_some(), reason.is_some())?;
        Ok(WithdrawalView {
            id,
            amount,
            currency,
            destination,
            state,
            reference,
            reason,
            requested_by,
            replaced: &[],
        })
    }
}

impl<'a> WithdrawalView<'a> {
    /// The withdrawal's identity.
    pub fn id(&self) -> TextView<'a, WithdrawalId> {
        self.id
    }
    /// How much.
    pub fn amount(&self) -> Amount {
        self.amount
    }
    /// In what.
    pub fn currency(&self) -> TextView<'a, Currency> {
        self.currency
    }
    /// To where.
    pub fn destination(&self) -> TextView<'a, Destination> {
        self.destination
    }
    /// Where it is in its life.
    pub fn state(&self) -> WithdrawalState {
        self.state
    }
    /// The rail's current transaction reference, once sent.
    pub fn reference(&self) -> Option<TextView<'a, Reference>> {
        self.reference
    }
    /// Why it was rejected or failed.
    pub fn reason(&self) -> Option<TextView<'a, Reason>> {
        self.reason
    }
    /// Who asked for it.
    pub fn requested_by(&self) -> TextView<'a, Actor> {
        self.requested_by
    }
    /// References replaced by bumps, oldest first.
    pub fn replaced(&self) -> &'a [Reference] {
        self.replaced
    }
    /// What makes two requests the same withdrawal, owned.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::new(
            self.id.to_value(),
            self.amount,
            self.currency.to_value(),
            self.destination.to_value(),
        )
    }
    /// The owned request.
    pub fn to_value(&self) -> WithdrawalRequest {
        WithdrawalRequest {
            id: self.id.to_value(),
            amount: self.amount,
            currency: self.currency.to_value(),
            destination: self.destination.to_value(),
            state: self.state,
            reference: self.reference.map(|text| text.to_value()),
            reason: self.reason.map(|text| text.to_value()),
            requested_by: self.requested_by.to_value(),
            replaced: self.replaced.to_vec(),
        }
    }
}

impl WithdrawalRequest {
    /// The request, borrowed as a [`WithdrawalView`].
    pub fn view(&self) -> WithdrawalView<'_> {
        WithdrawalView {
            id: self.id.view(),
            amount: self.amount,
            currency: self.currency.view(),
            destination: self.destination.view(),
            state: self.state,
            reference: self.reference.as_ref().map(Reference::view),
            reason: self.reason.as_ref().map(Reason::view),
            requested_by: self.requested_by.view(),
            replaced: &self.replaced,
        }
    }

    /// Splits the request into what identifies it and what has happened to
    /// it, so a store can keep one copy of the fingerprint per withdrawal.
    pub fn into_parts(self) -> (Fingerprint, Progress) {
        let WithdrawalRequest {
            id,
            amount,
            currency,
            destination,
            state,
            reference,
            reason,
            requested_by,
            replaced,
        } = self;
        let progress = Progress {
            state,
            reference,
            reason,
            requested_by,
            replaced,
        };
        (
            Fingerprint::new(id, amount, currency, destination),
            progress,
        )
    }

    /// Puts a request back together from [`into_parts`](Self::into_parts).
    pub fn from_parts(fingerprint: Fingerprint, progress: Progress) -> Self {
        let (id, amount, currency, destination) = fingerprint.into_fields();
        let Progress {
            state,
            reference,
            reason,
            requested_by,
            replaced,
        } = progress;
        WithdrawalRequest {
            id,
            amount,
            currency,
            destination,
            state,
            reference,
            reason,
            requested_by,
            replaced,
        }
    }

    /// Whether this request's progress is `progress`. Builds nothing.
    pub fn has_progress(&self, progress: &Progress) -> bool {
        self.state == progress.state
            && self.reference == progress.reference
            && self.reason == progress.reason
            && self.requested_by == progress.requested_by
            && self.replaced == progress.replaced
    }

    /// A new request, in state [`WithdrawalState::Requested`].
    pub fn new(
        id: WithdrawalId,
        amount: Amount,
        currency: Currency,
        destination: Destination,
        requested_by: Actor,
    ) -> Self {
        WithdrawalRequest {
            id,
            amount,
            currency,
            destination,
            state: WithdrawalState::Requested,
            reference: None,
            reason: None,
            requested_by,
            replaced: Vec::new(),
        }
    }

    /// The withdrawal's identity.
    pub fn id(&self) -> &WithdrawalId {
        &self.id
    }
    /// How much.
    pub fn amount(&self) -> Amount {
        self.amount
    }
    /// In what.
    pub fn currency(&self) -> &Currency {
        &self.currency
    }
    /// To where.
    pub fn destination(&self) -> &Destination {
        &self.destination
    }
    /// Where it is in its life.
    pub fn state(&self) -> WithdrawalState {
        self.state
    }
    /// The rail's current transaction reference, once sent.
    pub fn reference(&self) -> Option<&Reference> {
        self.reference.as_ref()
    }
    /// Why it was rejected or failed.
    pub fn reason(&self) -> Option<&Reason> {
        self.reason.as_ref()
    }
    /// Who asked for it.
    pub fn requested_by(&self) -> &Actor {
        &self.requested_by
    }
    /// References replaced by bumps, oldest first.
    pub fn replaced(&self) -> &[Reference] {
        &self.replaced
    }
    /// What makes two requests the same withdrawal.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::new(
            self.id.clone(),
            self.amount,
            self.currency.clone(),
            self.destination.clone(),
        )
    }

    fn refuse(&self, requested: Transition, refusal: TransitionRefusal) -> InvalidTransition {
        InvalidTransition {
            id: self.id.clone(),
            current: self.state,
            requested,
            refusal,
        }
    }

    /// A move with no data: `from` goes to the transition's target; already
    /// being at the target is a repeat and changes nothing.
    fn step(
        &self,
        transition: Transition,
        from: &[WithdrawalState],
    ) -> Result<Self, InvalidTransition> {
        let target = transition.target();
        if self.state == target {
            return Ok(self.clone());
        }
        if !from.contains(&self.state) {
            return Err(self.refuse(transition, TransitionRefusal::NotAllowed));
        }
        Ok(WithdrawalRequest {
            state: target,
            ..self.clone()
        })
    }

    /// A move that records a reason (reject, fail).
    fn step_with_reason(
        &self,
        transition: Transition,
        from: &[WithdrawalState],
        reason: Reason,
    ) -> Result<Self, InvalidTransition> {
        if self.state == transition.target() {
            return match &self.reason {
                Some(current) if *current == reason => Ok(self.clone()),
                Some(current) => Err(self.refuse(
                    transition,
                    TransitionRefusal::DifferentReason {
                        current: current.clone(),
                        requested: reason,
                    },
                )),
                None => Err(self.refuse(transition, TransitionRefusal::NotAllowed)),
            };
        }
        let mut next = self.step(transition, from)?;
        next.reason = Some(reason);
        Ok(next)
    }

    /// Requested to approved.
    pub fn approve(&self) -> Result<Self, InvalidTransition> {
        self.step(Transition::Approve, &[WithdrawalState::Requested])
    }

    /// Requested or approved to rejected: only while no money has moved.
    pub fn reject(&self, reason: Reason) -> Result<Self, InvalidTransition> {
        self.step_with_reason(
            Transition::Reject,
            &[WithdrawalState::Requested, WithdrawalState::Approved],
            reason,
        )
    }

    /// Approved to sending.
    pub fn start_sending(&self) -> Result<Self, InvalidTransition> {
        self.step(Transition::StartSending, &[WithdrawalState::Approved])
    }

    /// Sending to sent, with the rail's reference. Delivered again with the
    /// same reference it changes nothing; with another it is refused.
    pub fn mark_sent(&self, reference: Reference) -> Result<Self, InvalidTransition> {
        let transition = Transition::MarkSent;
        if self.replaced.contains(&reference) {
            return Err(self.refuse(transition, TransitionRefusal::ReplacedReference(reference)));
        }
        if self.state == WithdrawalState::Sent {
            return match &self.reference {
                Some(current) if *current == reference => Ok(self.clone()),
                Some(current) => Err(self.refuse(
                    transition,
                    TransitionRefusal::DifferentReference {
                        current: current.clone(),
                        requested: reference,
                    },
                )),
                None => Err(self.refuse(transition, TransitionRefusal::NotAllowed)),
            };
        }
        let mut next = self.step(transition, &[WithdrawalState::Sending])?;
        next.reference = Some(reference);
        Ok(next)
    }

    /// The withdrawal handed to the rail and sent under `reference`: from
    /// requested, approved or sending, through every step between. What a
    /// rail client returns when the rail accepted the send.
    pub fn sent(&self, reference: impl AsRef<str>) -> Result<Self, OutcomeError> {
        let reference = Reference::new(reference).map_err(OutcomeError::Reference)?;
        let mut next = self.clone();
        if next.state == WithdrawalState::Requested {
            next = next.approve()?;
        }
        if next.state == WithdrawalState::Approved {
            next = next.start_sending()?;
        }
        Ok(next.mark_sent(reference)?)
    }

    /// The forward transition that leads from this outcome to `later`, a
    /// later report of the same withdrawal: confirmed, failed, or bumped to
    /// another reference. `None` if no single transition does, or `later`
    /// is this outcome itself.
    pub fn advance_to(&self, later: &WithdrawalRequest) -> Option<Transition> {
        let confirmed = || self.confirm().ok();
        let failed = || self.fail(later.reason.clone()?).ok();
        let bumped = || self.bump(later.reference.clone()?).ok();
        let moves: [(Transition, &dyn Fn() -> Option<Self>); 3] = [
            (Transition::Confirm, &confirmed),
            (Transition::Fail, &failed),
            (Transition::Bump, &bumped),
        ];
        if later == self {
            return None;
        }
        moves
            .into_iter()
            .find(|(_, step)| step().as_ref() == Some(later))
            .map(|(transition, _)| transition)
    }

    /// Sent to confirmed.
    pub fn confirm(&self) -> Result<Self, InvalidTransition> {
        self.step(Transition::Confirm, &[WithdrawalState::Sent])
    }

    /// Approved, sending or sent to failed.
    pub fn fail(&self, reason: Reason) -> Result<Self, InvalidTransition> {
        self.step_with_reason(
            Transition::Fail,
            &[
                WithdrawalState::Approved,
                WithdrawalState::Sending,
                WithdrawalState::Sent,
            ],
            reason,
        )
    }

    /// A sent transaction replaced by another (a fee bump): the old reference
    /// joins [`replaced`](Self::replaced) and can never come back. Bumping to
    /// the current reference changes nothing.
    pub fn bump(&self, reference: Reference) -> Result<Self, InvalidTransition> {
        let transition = Transition::Bump;
        if self.state != WithdrawalState::Sent {
            return Err(self.refuse(transition, TransitionRefusal::NotAllowed));
        }
        if self.replaced.contains(&reference) {
            return Err(self.refuse(transition, TransitionRefusal::ReplacedReference(reference)));
        }
        let Some(current) = &self.reference else {
            return Err(self.refuse(transition, TransitionRefusal::NotAllowed));
        };
        if *current == reference {
            return Ok(self.clone());
        }
        if self.replaced.len() >= REPLACED_MAX {
            return Err(self.refuse(transition, TransitionRefusal::TooManyBumps));
        }
        let mut next = self.clone();
        next.replaced.push(current.clone());
        next.reference = Some(reference);
        Ok(next)
    }
}
