//! payonce as a service embeds it: `Ledger::submit` with the default
//! configuration (durable, ids minted by the ledger, refusals logged).

use std::path::Path;

use payonce::{
    Config, HolderState, Ledger, LedgerError, NewWithdrawal, Refusal, SendFailure, SubmitError,
};
use payonce_log::{Durability as LogDurability, LogConfig};
use payonce_model::WithdrawalRequest;

use crate::error::BenchError;
use crate::store::{Answer, Durability, Rail, RailFailure, Session, Store, StoreKind};

pub(crate) struct PayonceStore {
    ledger: Ledger,
}

impl PayonceStore {
    pub(crate) fn open(dir: &Path, durability: Durability) -> Result<PayonceStore, BenchError> {
        let config = Config {
            log: LogConfig {
                durability: match durability {
                    Durability::Full => LogDurability::Always,
                    Durability::Relaxed => LogDurability::Never,
                },
                ..LogConfig::default()
            },
            ..Config::default()
        };
        // The bench prepares a store, then reopens it in another process.
        let ledger = match Ledger::open_with(dir, config.clone()) {
            Err(LedgerError::NoLog { .. }) => Ledger::init_with(dir, config),
            opened => opened,
        }
        .map_err(BenchError::ledger(None))?;
        Ok(PayonceStore { ledger })
    }
}

impl Store for PayonceStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Payonce
    }

    fn create(&self, withdrawals: &[NewWithdrawal]) -> Result<Vec<WithdrawalRequest>, BenchError> {
        withdrawals
            .iter()
            .map(|new| {
                self.ledger
                    .create(new.clone())
                    .map_err(BenchError::ledger(None))
            })
            .collect()
    }

    fn session(&self) -> Result<Box<dyn Session + '_>, BenchError> {
        Ok(Box::new(PayonceSession {
            ledger: self.ledger.clone(),
        }))
    }

    fn outcome_reference(&self, key: &str) -> Result<Option<String>, BenchError> {
        let outcome = self.ledger.outcome(key).map_err(BenchError::ledger(None))?;
        Ok(outcome.and_then(|outcome| outcome.reference().map(ToString::to_string)))
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        self.ledger.sync().map_err(BenchError::ledger(None))
    }
}

struct PayonceSession {
    ledger: Ledger,
}

impl Session for PayonceSession {
    fn submit(
        &mut self,
        key: &str,
        request: &WithdrawalRequest,
        rail: Rail<'_>,
    ) -> Result<Answer, BenchError> {
        let mut sent = false;
        let result = self.ledger.submit(key, request.clone(), |request| {
            sent = true;
            rail.send(request).map_err(SendFailure::failed)
        });
        let reference = |outcome: &WithdrawalRequest| {
            outcome
                .reference()
                .map(ToString::to_string)
                .unwrap_or_default()
        };
        match result {
            Ok(outcome) if sent => Ok(Answer::Sent {
                reference: reference(&outcome),
            }),
            Ok(outcome) => Ok(Answer::Replayed {
                reference: reference(&outcome),
            }),
            Err(SubmitError::Send(error)) if error.is::<RailFailure>() => Ok(Answer::SendFailed),
            Err(SubmitError::Ledger(LedgerError::Refused(refusal))) => match refusal {
                Refusal::InFlight { .. } => Ok(Answer::InFlight),
                Refusal::KeyReused { differences, .. } => Ok(Answer::KeyReused {
                    fields: differences
                        .iter()
                        .map(|difference| difference.field)
                        .collect(),
                }),
                Refusal::Claimed {
                    holder,
                    holder_state,
                    ..
                } => Ok(Answer::Claimed {
                    holder: holder.to_string(),
                    holder_decided: !matches!(holder_state, HolderState::InFlight { .. }),
                }),
                Refusal::UnknownWithdrawal { .. } => Ok(Answer::UnknownWithdrawal),
                Refusal::NotAsCreated { .. } => Ok(Answer::NotAsCreated),
                other => Err(BenchError::Unexpected {
                    store: "payonce",
                    key: key.to_owned(),
                    answer: format!("the refusal {other}"),
                }),
            },
            Err(SubmitError::Ledger(source)) => Err(BenchError::ledger(Some(key))(source)),
            Err(other) => Err(BenchError::Unexpected {
                store: "payonce",
                key: key.to_owned(),
                answer: other.to_string(),
            }),
        }
    }
}
