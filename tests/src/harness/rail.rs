//! The simulated rail: the world's truth about which money moved, kept
//! outside the ledger, and the judge of "never sent twice".

use std::collections::BTreeMap;

use payonce::SendFailure;
use payonce_model::{Actor, Destination, Reason, Reference, WithdrawalRequest};

/// What a rail call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SendKind {
    /// The money moves and the rail answers with a reference.
    Succeed,
    /// The money moves, then the call times out: the caller does not know.
    TimeoutAfterSending,
    /// The call fails before reaching the rail: nothing moved.
    FailBeforeSending,
    /// The rail refuses cleanly: nothing moved, and the caller knows it.
    Refuse,
    /// The caller's rail client panics before sending: nothing moved.
    Panic,
    /// The money moves, but the rail client answers with another
    /// withdrawal (a bug in the client): the outcome is unknown.
    WrongOutcome,
    /// The money moves, but the rail client answers with the request it
    /// was given, approved (a bug in the client): not an outcome, so the
    /// outcome is unknown.
    Unsettled,
}

impl SendKind {
    /// Every kind, for choosing one from input.
    pub const ALL: [SendKind; 7] = [
        SendKind::Succeed,
        SendKind::TimeoutAfterSending,
        SendKind::FailBeforeSending,
        SendKind::Refuse,
        SendKind::Panic,
        SendKind::WrongOutcome,
        SendKind::Unsettled,
    ];

    /// Whether the money leaves custody.
    pub fn moves_money(self) -> bool {
        matches!(
            self,
            SendKind::Succeed
                | SendKind::TimeoutAfterSending
                | SendKind::WrongOutcome
                | SendKind::Unsettled
        )
    }
}

/// What the caller of the rail hears back.
pub type RailAnswer = Result<WithdrawalRequest, SendFailure>;

/// Money that left custody: which key's send moved it, and the withdrawal
/// as the rail knows it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Movement {
    /// The request key whose send moved it.
    pub key: String,
    /// The withdrawal as the rail knows it now: as sent, with the rail's
    /// reference, or as a later report moved it on.
    pub outcome: WithdrawalRequest,
    /// What the rail knew of it before, oldest first: a ledger not told of
    /// a later report (a report lost) still holds one of these.
    pub earlier: Vec<WithdrawalRequest>,
}

/// The rail's truth and counters.
#[derive(Debug, Clone, Default)]
pub struct Rail {
    /// Withdrawal id to the money movement, at most one each.
    pub moved: BTreeMap<String, Movement>,
    /// Withdrawal id to the key of the last call for it that no operator
    /// has closed with a release since: a second call before that release
    /// is a double send waiting to happen.
    pub open_calls: BTreeMap<String, String>,
    /// Calls made.
    pub calls: u64,
}

/// `request` as the rail sends it, with `reference`.
///
/// # Panics
/// If `request` cannot be sent (it is not in state requested) or the
/// reference is not valid text: fixtures make both.
#[allow(clippy::expect_used)]
pub fn sent(request: &WithdrawalRequest, reference: &str) -> WithdrawalRequest {
    request
        .approve()
        .and_then(|w| w.start_sending())
        .and_then(|w| w.mark_sent(Reference::new(reference).expect("a fixture reference is valid")))
        .expect("a requested withdrawal can be sent")
}

/// What a rail may later say of an outcome it gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Later {
    /// The send confirmed.
    Confirmed,
    /// The send failed after all.
    Failed,
    /// The send was replaced by one with reference `0xbump<n>`.
    Bumped(u8),
}

/// `truth` as the rail later reports it; `None` when that report cannot
/// follow `truth` (a failure after a confirmation, say).
///
/// # Panics
/// Never: the reason and the reference are valid text.
#[allow(clippy::expect_used)]
pub fn later(truth: &WithdrawalRequest, later: Later) -> Option<WithdrawalRequest> {
    match later {
        Later::Confirmed => truth.confirm().ok(),
        Later::Failed => truth
            .fail(Reason::new("the rail reports a failure").expect("a fixture reason"))
            .ok(),
        Later::Bumped(n) => truth
            .bump(Reference::new(format!("0xbump{n}")).expect("a fixture reference"))
            .ok(),
    }
}

/// The reference the rail gives the send of `request` under `key`.
pub fn reference(request: &WithdrawalRequest, key: &str) -> String {
    format!("0x{}-{key}", request.id())
}

/// Another withdrawal with the same id: what a buggy rail client answers.
///
/// # Panics
/// Never for fixtures: the destination and actor are valid text.
#[allow(clippy::expect_used)]
pub fn impostor(request: &WithdrawalRequest) -> WithdrawalRequest {
    let other = WithdrawalRequest::new(
        request.id().clone(),
        request.amount(),
        request.currency().clone(),
        Destination::new("0xe711").expect("fixture destination"),
        Actor::new("mallory").expect("fixture actor"),
    );
    sent(&other, "0xe711")
}

/// `request` as a buggy rail client answers it: approved, which says
/// nothing of what the rail did.
#[allow(clippy::expect_used)]
pub(super) fn unsettled(request: &WithdrawalRequest) -> WithdrawalRequest {
    request
        .approve()
        .expect("a request in state requested approves")
}

impl Rail {
    /// The rail moves withdrawal `id` on, from what it knows to `later`
    /// (confirmed, failed on the rail, bumped): what a later report says.
    pub fn moves_on(&mut self, id: &str, later: WithdrawalRequest) {
        if let Some(movement) = self.moved.get_mut(id) {
            let before = std::mem::replace(&mut movement.outcome, later);
            movement.earlier.push(before);
        }
    }

    /// A call for `request` under `key`, doing what `kind` says. The caller
    /// checked that the claim is on stable storage.
    ///
    /// # Panics
    /// When the withdrawal was already sent, or a call for it is still
    /// open (no operator release since): the finding this harness exists
    /// for.
    #[allow(clippy::expect_used)]
    pub fn call(&mut self, key: &str, request: &WithdrawalRequest, kind: SendKind) -> RailAnswer {
        let id = request.id().to_string();
        self.calls += 1;
        if let Some(movement) = self.moved.get(&id) {
            panic!(
                "withdrawal {id} sent twice: first under key {}, again under key {key}",
                movement.key
            );
        }
        if let Some(open) = self.open_calls.get(&id) {
            panic!(
                "the rail was called for withdrawal {id} under key {key} while the call under \
                 key {open} was never closed by a release"
            );
        }
        self.open_calls.insert(id.clone(), key.to_owned());
        let outcome = sent(request, &reference(request, key));
        if kind.moves_money() {
            self.moved.insert(
                id,
                Movement {
                    key: key.to_owned(),
                    outcome: outcome.clone(),
                    earlier: Vec::new(),
                },
            );
        }
        match kind {
            SendKind::Succeed => Ok(outcome),
            SendKind::TimeoutAfterSending => Err(SendFailure::failed(
                "rail timed out after the send".to_owned(),
            )),
            SendKind::FailBeforeSending => Err(SendFailure::failed(
                "connection refused before the send".to_owned(),
            )),
            SendKind::Refuse => Err(SendFailure::Rejected(
                Reason::new("insufficient hot wallet balance").expect("fixture reason"),
            )),
            SendKind::WrongOutcome => Ok(impostor(request)),
            SendKind::Unsettled => Ok(unsettled(request)),
            SendKind::Panic => unreachable!("a panicking client never reaches the rail"),
        }
    }

    /// An operator released `key` after seeing that nothing moved for
    /// withdrawal `id`: a new call for it may go out.
    pub fn released(&mut self, id: &str, key: &str) {
        if self.open_calls.get(id).map(String::as_str) == Some(key) {
            self.open_calls.remove(id);
        }
    }
}
