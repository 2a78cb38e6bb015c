//! The protocol as a team writes it without payonce: one row per claim in
//! a table whose primary key is the withdrawal and whose request key is
//! unique, one connection per thread, one transaction per step. The claim
//! is committed before the send, the outcome after it; a conflict on
//! either constraint is answered from the row that holds it.

use postgres::Client;

use crate::error::BenchError;
use crate::pg::pg_error;

/// What a plain submission answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PlainAnswer {
    /// The claim was committed, the send ran, and its outcome committed.
    Sent,
    /// The key or the withdrawal was claimed already: by `holder`, in
    /// `state`.
    Held { holder: String, state: String },
}

/// Creates the claims table.
pub(crate) fn create(client: &mut Client) -> Result<(), BenchError> {
    client
        .batch_execute(
            "CREATE TABLE claims (
                 withdrawal text PRIMARY KEY,
                 key text NOT NULL UNIQUE,
                 amount numeric NOT NULL,
                 currency text NOT NULL,
                 destination text NOT NULL,
                 state text NOT NULL,
                 reference text,
                 claimed_at timestamptz NOT NULL DEFAULT now(),
                 settled_at timestamptz
             )",
        )
        .map_err(pg_error("creating the claims table"))
}

/// One submission: claim, send (`send` gives the reference), record the
/// outcome; each step its own transaction.
pub(crate) fn submit(
    client: &mut Client,
    key: &str,
    withdrawal: &str,
    amount: &str,
    send: impl FnOnce() -> String,
) -> Result<PlainAnswer, BenchError> {
    let claimed = client
        .execute(
            "INSERT INTO claims (withdrawal, key, amount, currency, destination, state) \
             VALUES ($1, $2, $3::text::numeric, 'USDC', '0xbench', 'in_flight') \
             ON CONFLICT DO NOTHING",
            &[&withdrawal, &key, &amount],
        )
        .map_err(pg_error("claiming"))?;
    if claimed == 0 {
        let row = client
            .query_one(
                "SELECT key, state FROM claims WHERE withdrawal = $1 OR key = $2 LIMIT 1",
                &[&withdrawal, &key],
            )
            .map_err(pg_error("reading the holder"))?;
        return Ok(PlainAnswer::Held {
            holder: row.get(0),
            state: row.get(1),
        });
    }
    let reference = send();
    client
        .execute(
            "UPDATE claims SET state = 'sent', reference = $2, settled_at = now() \
             WHERE key = $1 AND state = 'in_flight'",
            &[&key, &reference],
        )
        .map_err(pg_error("recording the outcome"))?;
    Ok(PlainAnswer::Sent)
}

/// Claims, and claims with an outcome.
pub(crate) fn count(client: &mut Client) -> Result<(u64, u64), BenchError> {
    let row = client
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE state = 'sent') FROM claims",
            &[],
        )
        .map_err(pg_error("counting claims"))?;
    let (claims, settled): (i64, i64) = (row.get(0), row.get(1));
    Ok((claims as u64, settled as u64))
}
