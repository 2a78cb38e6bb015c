//! The demo's story: the ledger it is told on, the story's clock, the
//! simulated rail that counts what it carries out, and how each step is
//! printed. The incidents (`mod.rs`) and the race (`race.rs`) tell it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use payonce::{
    Clock, Config, Ledger, LedgerError, ManualClock, NewWithdrawal, SendFailure, SubmitError,
    Timestamp,
};
use payonce_model::{Reference, WithdrawalRequest};

use crate::error::CliError;
use crate::escape::Escaped;
use crate::explain::outcome_words;

/// What the rail does with the next send.
#[derive(Debug, Clone, Copy)]
pub(super) enum Behaviour {
    /// Sends and answers with a reference.
    Answer,
    /// Sends, but the answer never arrives: the caller sees a timeout.
    TimeOutAfterSending,
    /// Refuses cleanly: nothing leaves the account.
    Refuse,
}

/// A rail that counts what it does per withdrawal.
#[derive(Debug, Default)]
pub(super) struct Rail {
    book: Mutex<RailBook>,
}

#[derive(Debug, Default)]
struct RailBook {
    transfers: BTreeMap<String, Vec<Reference>>,
    calls: BTreeMap<String, u32>,
    next_reference: u32,
}

impl Rail {
    fn book(&self) -> std::sync::MutexGuard<'_, RailBook> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn send(
        &self,
        request: &WithdrawalRequest,
        behaviour: Behaviour,
    ) -> Result<WithdrawalRequest, SendFailure> {
        let mut book = self.book();
        *book.calls.entry(request.id().to_string()).or_default() += 1;
        if let Behaviour::Refuse = behaviour {
            return Err(SendFailure::rejected(
                "hot wallet below its floor; nothing was broadcast",
            ));
        }
        book.next_reference += 1;
        let reference = Reference::new(format!("0xd3m0{:04}", book.next_reference))?;
        book.transfers
            .entry(request.id().to_string())
            .or_default()
            .push(reference.clone());
        match behaviour {
            Behaviour::TimeOutAfterSending => Err(SendFailure::failed(
                "timed out after 30s waiting for the rail's answer",
            )),
            _ => Ok(request.sent(reference.as_str())?),
        }
    }

    /// Transfers carried out and calls received, per withdrawal id: a
    /// clean refusal is a call without a transfer.
    pub(super) fn counts(&self) -> (BTreeMap<String, u32>, BTreeMap<String, u32>) {
        let book = self.book();
        let sends = book
            .calls
            .keys()
            .map(|id| {
                (
                    id.clone(),
                    book.transfers.get(id).map_or(0, |t| t.len() as u32),
                )
            })
            .collect();
        (sends, book.calls.clone())
    }

    /// What an operator finds on the rail's explorer for a withdrawal.
    pub(super) fn lookup(&self, request: &WithdrawalRequest) -> Option<Reference> {
        self.book()
            .transfers
            .get(request.id().as_str())
            .and_then(|references| references.last().cloned())
    }
}

/// The story being told: the ledger, its clock, the rail, and what it
/// prints.
pub(crate) struct Story<'a> {
    /// The ledger's directory, or a PostgreSQL ledger's URL (its password
    /// hidden).
    pub(super) dir: PathBuf,
    /// A PostgreSQL ledger's URL: the story is told by the story's
    /// worker, and worker processes race on it too.
    pub(super) url: Option<String>,
    pub(super) config: Config,
    pub(super) clock: Arc<ManualClock>,
    pub(super) ledger: Option<Ledger>,
    pub(super) rail: Rail,
    pub(super) refusals: Vec<String>,
    out: &'a mut dyn Write,
}

pub(crate) fn failed(step: impl Into<String>) -> CliError {
    CliError::DemoFailed { step: step.into() }
}

impl<'a> Story<'a> {
    pub(super) fn new(
        dir: PathBuf,
        url: Option<String>,
        config: Config,
        clock: Arc<ManualClock>,
        ledger: Ledger,
        out: &'a mut dyn Write,
    ) -> Story<'a> {
        Story {
            dir,
            url,
            config,
            clock,
            ledger: Some(ledger),
            rail: Rail::default(),
            refusals: Vec::new(),
            out,
        }
    }

    pub(crate) fn say(&mut self, text: &str) -> Result<(), CliError> {
        writeln!(self.out, "{}", Escaped(text)).map_err(CliError::output)
    }

    /// A blank line, then an incident's title.
    pub(crate) fn heading(&mut self, text: &str) -> Result<(), CliError> {
        self.say("")?;
        self.say(text)
    }

    /// The story's time.
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// A line of the story, stamped with the story's clock.
    pub(crate) fn step(&mut self, text: &str) -> Result<(), CliError> {
        let now = self.clock.now().to_string();
        let time = now.get(11..19).unwrap_or(&now).to_owned();
        self.say(&format!("   [{time}] {text}"))
    }

    pub(super) fn ledger(&self) -> Result<&Ledger, CliError> {
        self.ledger
            .as_ref()
            .ok_or_else(|| failed("the ledger is closed"))
    }

    pub(super) fn ledger_error(&self, error: LedgerError) -> CliError {
        CliError::from_ledger(&self.dir, error)
    }

    pub(super) fn tick(&self, seconds: u64) {
        self.clock.advance(Duration::from_secs(seconds));
    }

    pub(crate) fn create(
        &mut self,
        amount: &str,
        currency: &str,
        destination: &str,
        by: &str,
    ) -> Result<WithdrawalRequest, CliError> {
        let field = |error: payonce_model::FieldError| failed(format!("a demo value: {error}"));
        let new = NewWithdrawal {
            amount: amount.parse().map_err(field)?,
            currency: currency.parse().map_err(field)?,
            destination: destination.parse().map_err(field)?,
            requested_by: by.parse().map_err(field)?,
        };
        self.tick(2);
        let created = self
            .ledger()?
            .create(new)
            .map_err(|e| self.ledger_error(e))?;
        Ok(created)
    }

    pub(super) fn submit(
        &mut self,
        key: &str,
        request: &WithdrawalRequest,
        behaviour: Behaviour,
    ) -> Result<Result<WithdrawalRequest, SubmitError>, CliError> {
        self.tick(3);
        let ledger = self.ledger()?.clone();
        let rail = &self.rail;
        let result = ledger.submit(key, request.clone(), |r| rail.send(r, behaviour));
        if let Err(error) = &result
            && let Some(refusal) = error.refusal()
        {
            self.refusals.push(refusal.to_string());
        }
        Ok(result)
    }

    /// Submits and expects the rail to send.
    pub(super) fn submit_sent(
        &mut self,
        key: &str,
        request: &WithdrawalRequest,
    ) -> Result<WithdrawalRequest, CliError> {
        match self.submit(key, request, Behaviour::Answer)? {
            Ok(outcome) => Ok(outcome),
            Err(error) => Err(failed(format!("{key} was expected to send: {error}"))),
        }
    }

    /// Submits and expects a refusal, returned as text.
    pub(super) fn submit_refused(
        &mut self,
        key: &str,
        request: &WithdrawalRequest,
    ) -> Result<String, CliError> {
        match self.submit(key, request, Behaviour::Answer)? {
            Err(error) if error.refusal().is_some() => Ok(error.to_string()),
            Err(error) => Err(failed(format!("{key} was expected to be refused: {error}"))),
            Ok(outcome) => Err(failed(format!(
                "{key} was expected to be refused, but got {}",
                outcome_words(&outcome)
            ))),
        }
    }

    pub(super) fn sent(
        request: &WithdrawalRequest,
        reference: Reference,
    ) -> Result<WithdrawalRequest, CliError> {
        request
            .approve()
            .and_then(|w| w.start_sending())
            .and_then(|w| w.mark_sent(reference))
            .map_err(|error| failed(format!("building the outcome: {error}")))
    }

    /// What a caller can ask the ledger, to compare across a reopening.
    pub(super) fn answers(
        &self,
        keys: &[&str],
        withdrawals: &[&WithdrawalRequest],
    ) -> Result<String, CliError> {
        let ledger = self.ledger()?;
        let mut answers = String::new();
        for key in keys {
            answers.push_str(&format!("{key}: {:?}\n", ledger.outcome(key)));
        }
        for withdrawal in withdrawals {
            let id = withdrawal.id().as_str();
            answers.push_str(&format!(
                "{id}: {:?} {:?}\n",
                ledger.claimed_by(id),
                ledger.held(id)
            ));
        }
        let mut in_flight = ledger.in_flight();
        for entry in &mut in_flight {
            // Whether a send runs is about this process, not the log.
            entry.send_running = false;
        }
        answers.push_str(&format!("{in_flight:?}\n{:?}\n", ledger.held_totals()));
        Ok(answers)
    }
}
