//! The checks after each kill: the reopened ledger against the rail's and
//! the client's durable records, and its log against a fresh replay.

use std::collections::HashMap;
use std::path::Path;

use payonce::State;

use super::backend::Backend;
use super::point::{KillPoint, classify};
use super::trail::Step;

/// A send the rail recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sent {
    key: String,
    reference: String,
}

/// What the trails of every round on one ledger have recorded: the rail's
/// sends and the client's acknowledgements, which every later reopening of
/// that ledger must agree with.
#[derive(Debug, Default)]
pub struct Seen {
    /// By withdrawal: at most one each.
    sends: HashMap<String, Sent>,
    /// Key and reference of every acknowledged outcome.
    acks: Vec<(String, String)>,
}

impl Seen {
    /// Takes in one round's trails. A withdrawal the rail sent twice, in
    /// this round or across rounds, is a failure.
    pub fn take(&mut self, trails: &[Vec<Step>]) -> Result<(), String> {
        for step in trails.iter().flatten() {
            match step {
                Step::Send {
                    withdrawal,
                    key,
                    reference,
                } => {
                    let sent = Sent {
                        key: key.clone(),
                        reference: reference.clone(),
                    };
                    if let Some(before) = self.sends.insert(withdrawal.clone(), sent) {
                        return Err(format!(
                            "withdrawal {withdrawal} was sent twice: for key {} and for key {key}",
                            before.key
                        ));
                    }
                }
                Step::Ack { key, reference } => self.acks.push((key.clone(), reference.clone())),
                _ => {}
            }
        }
        Ok(())
    }

    /// Sends recorded so far.
    pub fn sends(&self) -> usize {
        self.sends.len()
    }

    /// Acknowledged outcomes recorded so far.
    pub fn acks(&self) -> usize {
        self.acks.len()
    }
}

/// Reopens the ledger at `location` after a kill and checks it against
/// `seen` (which must already hold this round's trails); then returns where
/// each thread was, or nothing for a child killed before it was `ready`.
///
/// Checked: every send's key holds its withdrawal's claim (so the claim was
/// on stable storage before the send), with no outcome or the rail's;
/// every acknowledged outcome is there; two read-only replays re-derive
/// every decision without a divergence and agree with each other and with
/// the opened ledger, which opened from a snapshot (the second answer) or
/// replayed every event.
pub fn check_after_kill(
    backend: Backend,
    location: &Path,
    ready: bool,
    trails: &[Vec<Step>],
    seen: &Seen,
) -> Result<(Vec<KillPoint>, bool), String> {
    let reopened = backend
        .reopen(location)
        .map_err(|error| format!("reopening after the kill: {error}"))?;
    let Some(ledger) = reopened else {
        // Killed before its creation of the ledger was durable: nothing can
        // have been sent.
        if ready || seen.sends() > 0 {
            return Err(format!(
                "no ledger after the kill, yet the child was {}ready and the rail sent {}",
                if ready { "" } else { "not " },
                seen.sends()
            ));
        }
        return Ok((Vec::new(), false));
    };
    let live = ledger
        .state()
        .map_err(|error| format!("reading the reopened ledger's state: {error}"))?;
    let from_snapshot = ledger.recovery().snapshot.is_some();
    drop(ledger);
    check_sends(&live, seen)?;
    check_acks(&live, seen)?;
    check_replays(backend, location, &live)?;
    if !ready {
        return match trails.iter().all(Vec::is_empty) {
            true => Ok((Vec::new(), from_snapshot)),
            false => Err("a thread wrote its trail before the child was ready".to_owned()),
        };
    }
    let points = trails
        .iter()
        .enumerate()
        .map(|(thread, trail)| classify(trail, &live).map_err(|e| format!("thread {thread}: {e}")))
        .collect::<Result<_, _>>()?;
    Ok((points, from_snapshot))
}

fn check_sends(live: &State, seen: &Seen) -> Result<(), String> {
    for (withdrawal, Sent { key, reference }) in &seen.sends {
        let holder = live.claimed_by(withdrawal);
        if holder.as_ref().map(|holder| holder.as_str()) != Some(key.as_str()) {
            let holder = holder.map_or("no key".to_owned(), |holder| format!("key {holder}"));
            return Err(format!(
                "the rail sent {withdrawal} for key {key}, but in the reopened ledger {holder} \
                 holds it: the claim was not durable before the send"
            ));
        }
        if let Some(outcome) = live.outcome(key) {
            let recorded = outcome.reference().map(|r| r.as_str().to_owned());
            if recorded.as_deref() != Some(reference.as_str()) {
                return Err(format!(
                    "key {key} has an outcome with reference {} where the rail answered \
                     {reference}",
                    recorded.as_deref().unwrap_or("none")
                ));
            }
        }
    }
    Ok(())
}

fn check_acks(live: &State, seen: &Seen) -> Result<(), String> {
    for (key, reference) in &seen.acks {
        let outcome = live.outcome(key);
        let recorded = outcome.as_ref().and_then(|o| o.reference());
        if recorded.map(|r| r.as_str()) != Some(reference.as_str()) {
            let recorded = recorded.map_or("no outcome".to_owned(), |r| format!("reference {r}"));
            return Err(format!(
                "the outcome acknowledged for key {key} (reference {reference}) is gone: the \
                 reopened ledger has {recorded}"
            ));
        }
    }
    Ok(())
}

fn check_replays(backend: Backend, location: &Path, live: &State) -> Result<(), String> {
    let verify = || {
        backend
            .verify(location)
            .map_err(|error| format!("verifying: {error}"))
    };
    let (first, second) = (verify()?, verify()?);
    if !first.divergences.is_empty() {
        return Err(format!("verify found divergences: {:?}", first.divergences));
    }
    if first.state != second.state {
        return Err("two replays of the same log differ".to_owned());
    }
    if first.state != *live {
        return Err("the replay differs from the opened ledger".to_owned());
    }
    Ok(())
}
