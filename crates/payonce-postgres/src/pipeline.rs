//! A [`PgLog`](crate::PgLog)'s connection: tokio-postgres driven on a
//! current-thread runtime of its own, as the `postgres` crate drives it,
//! so that a batch can send several statements before it waits for their
//! answers (pipelining), which the `postgres` crate cannot.
//!
//! The server runs what one connection sends in the order it was sent, and
//! answers in that order: sending the next statement before the answer to
//! the one before saves a round trip, not a step.

use std::future::{Future, poll_fn};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::Poll;

use futures_util::StreamExt;
use payonce::StoreError;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Error, Row, SimpleQueryMessage, Statement, ToStatement};

use crate::connect::first_accepted;
use crate::error::failed;
use crate::reach::{self, Reach, Target};

/// A connection and the runtime that drives it.
pub(crate) struct Pipeline {
    /// Dropped first, which tells the connection to end.
    client: Client,
    runtime: Driver,
    /// The server backend (`pg_backend_pid()`) the session's settings were
    /// made on: every statement of this connection must run there (the
    /// `pooler` module).
    backend: i32,
}

/// The runtime and its task that owns the socket, which it closes with a
/// goodbye to the server once the client is gone, as the `postgres` crate
/// does, rather than cutting it.
struct Driver {
    runtime: Runtime,
    connection: Option<JoinHandle<Result<(), Error>>>,
}

impl Driver {
    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            let _ = self.runtime.block_on(connection);
        }
    }
}

/// Messages of a `COPY` (a row each) taken from the runtime at a time:
/// enough that entering it costs little per row, few enough that their
/// bytes stay in cache.
const COPY_MESSAGES_TAKEN_MAX: usize = 256;

/// A statement sent in a pipeline, and what it answered.
pub(crate) type Request<'a> = Pin<Box<dyn Future<Output = Result<u64, Error>> + 'a>>;

/// What a pipeline of statements followed by `COMMIT` came to.
pub(crate) enum Pipelined {
    /// Every statement and the `COMMIT` succeeded: the batch is committed.
    Committed,
    /// A statement could not be sent, so neither it nor the `COMMIT` was:
    /// the transaction is still open, and nothing of it committed.
    Unsent(Error),
    /// The server refused a statement, which aborted the transaction: the
    /// `COMMIT` after it ended the transaction with a rollback, whatever it
    /// answered.
    Refused(Error),
    /// The connection failed before every answer came, or the `COMMIT`
    /// failed: the batch may have committed or not.
    Unknown(Error),
}

impl Pipeline {
    /// Connects to `url` (to its host that accepts writes, for
    /// [`Target::Primary`], with a writer's settings). Whether the server
    /// is safe to write, and its schema this build's, is
    /// `schema::connect`'s to check.
    pub(crate) fn connect(url: &str, target: Target) -> Result<Pipeline, StoreError> {
        let reach = Reach::new(url, target)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| StoreError::Failed {
                detail: format!("no runtime for the connection: {error}"),
            })?;
        let (client, connection) =
            first_accepted(&reach, |config, tls| runtime.block_on(config.connect(tls)))?;
        // Runs whenever the session waits on the runtime: every request
        // below does.
        let connection = Some(runtime.spawn(connection));
        let runtime = Driver {
            runtime,
            connection,
        };
        let mut conn = Pipeline {
            client,
            runtime,
            backend: 0,
        };
        // Every statement a session runs finds its rows by a key, or reads
        // the log in order once: compiling one costs more than it saves (a
        // scan of 3M events took 1.5 s with JIT, 1.0 s without). One query,
        // which a pooler runs on one backend: the one named with them.
        let settings = match target {
            Target::Primary => format!("SET jit = off; {}", reach::WRITER_SETTINGS),
            Target::AsGiven => "SET jit = off".to_owned(),
        };
        conn.backend = conn.backend_after(&settings)?;
        Ok(conn)
    }

    /// Runs `settings` and reads the backend they ran on, in one query.
    fn backend_after(&mut self, settings: &str) -> Result<i32, StoreError> {
        let query = format!("{settings}; SELECT pg_backend_pid()");
        let messages = self
            .runtime
            .block_on(self.client.simple_query(&query))
            .map_err(failed)?;
        messages
            .iter()
            .find_map(|message| match message {
                SimpleQueryMessage::Row(row) => row.get(0)?.parse().ok(),
                _ => None,
            })
            .ok_or_else(|| StoreError::Failed {
                detail: "the server did not say which backend it is".to_owned(),
            })
    }

    /// The server backend the session's settings were made on.
    pub(crate) fn backend(&self) -> i32 {
        self.backend
    }

    /// Takes the session's settings to have been made on `backend`: what
    /// a pooler that moved the session would make it see.
    #[cfg(test)]
    pub(crate) fn pretend_backend(&mut self, backend: i32) {
        self.backend = backend;
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    pub(crate) fn batch_execute(&mut self, query: &str) -> Result<(), Error> {
        self.runtime.block_on(self.client.batch_execute(query))
    }

    pub(crate) fn execute<T>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, Error>
    where
        T: ?Sized + ToStatement,
    {
        self.runtime
            .block_on(self.client.execute(statement, params))
    }

    pub(crate) fn query<T>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error>
    where
        T: ?Sized + ToStatement,
    {
        self.runtime.block_on(self.client.query(statement, params))
    }

    pub(crate) fn query_one(
        &mut self,
        query: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error> {
        self.runtime.block_on(self.client.query_one(query, params))
    }

    pub(crate) fn prepare(&mut self, query: &str) -> Result<Statement, Error> {
        self.runtime.block_on(self.client.prepare(query))
    }

    /// Runs `first` (a simple query) and then `statement`, sent together:
    /// one round trip. The answer to `statement` is the answer if both
    /// succeeded.
    pub(crate) fn then_query(
        &mut self,
        first: &str,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        let client = &self.client;
        // `biased`: polled in the order written, so `first` is queued, and
        // sent, before `statement` (a query queues its message when first
        // polled).
        let (first, rows) = self.runtime.block_on(async {
            tokio::join!(biased; client.batch_execute(first), client.query(statement, params))
        });
        first?;
        rows
    }

    /// Runs `query`, a `COPY ... TO STDOUT`, handing `each` every message
    /// of its output as it arrives, until the last or until `each` breaks
    /// (the rest is read and dropped). `each` runs outside the runtime, so
    /// it may use another session: messages are taken from the runtime
    /// [`COPY_MESSAGES_TAKEN_MAX`] at a time.
    pub(crate) fn copy_out_each(
        &mut self,
        query: &str,
        mut each: impl FnMut(&[u8]) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<ControlFlow<()>, StoreError> {
        let client = &self.client;
        let stream = self
            .runtime
            .block_on(client.copy_out(query))
            .map_err(failed)?;
        let mut messages = Box::pin(stream);
        let mut taken = Vec::with_capacity(COPY_MESSAGES_TAKEN_MAX);
        loop {
            let end = self.runtime.block_on(async {
                while taken.len() < COPY_MESSAGES_TAKEN_MAX {
                    match messages.next().await {
                        Some(message) => taken.push(message.map_err(failed)?),
                        None => return Ok::<_, StoreError>(true),
                    }
                }
                Ok(false)
            })?;
            for message in taken.drain(..) {
                if each(&message)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            if end {
                return Ok(ControlFlow::Continue(()));
            }
        }
    }

    /// Sends `requests` (built on [`Pipeline::client`]) and then `COMMIT`,
    /// all before waiting for an answer: one round trip.
    pub(crate) fn commit_after(&self, requests: Vec<Request<'_>>) -> Pipelined {
        self.runtime.block_on(pipeline(&self.client, requests))
    }

    /// The client that [`Pipeline::commit_after`]'s requests are built on.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }
}

/// The answers of a pipeline so far: `None` for a request still waiting.
type Answers = Vec<Option<Result<u64, Error>>>;

/// Sends each of `requests`, in order, then `COMMIT` if every one of them
/// was sent, and waits for all their answers.
async fn pipeline(client: &Client, mut requests: Vec<Request<'_>>) -> Pipelined {
    let mut answers: Answers = requests.iter().map(|_| None).collect();
    // A request is sent in its first poll, which answers only if it could
    // not be sent: no answer is read before this poll returns.
    let unsent = poll_fn(|cx| {
        for (request, answer) in requests.iter_mut().zip(answers.iter_mut()) {
            match request.as_mut().poll(cx) {
                Poll::Ready(Err(error)) => return Poll::Ready(Some(error)),
                Poll::Ready(Ok(rows)) => *answer = Some(Ok(rows)),
                Poll::Pending => {}
            }
        }
        Poll::Ready(None)
    })
    .await;
    if let Some(error) = unsent {
        return Pipelined::Unsent(error);
    }
    let answered = poll_fn(|cx| {
        let mut waiting = false;
        for (request, answer) in requests.iter_mut().zip(answers.iter_mut()) {
            if answer.is_none() {
                match request.as_mut().poll(cx) {
                    Poll::Ready(result) => *answer = Some(result),
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    });
    let ((), committed) = tokio::join!(biased; answered, client.batch_execute("COMMIT"));
    outcome(answers, committed)
}

/// What the answers of a pipeline and of its `COMMIT` say of the batch.
fn outcome(answers: Answers, committed: Result<(), Error>) -> Pipelined {
    let mut lost = None;
    for answer in answers.into_iter().flatten() {
        match answer {
            Ok(_) => {}
            // The server ran it and refused it, which aborted the
            // transaction: no COMMIT after it commits.
            Err(error) if error.as_db_error().is_some() => return Pipelined::Refused(error),
            Err(error) => lost = lost.or(Some(error)),
        }
    }
    match (lost, committed) {
        (Some(error), _) | (None, Err(error)) => Pipelined::Unknown(error),
        (None, Ok(())) => Pipelined::Committed,
    }
}
