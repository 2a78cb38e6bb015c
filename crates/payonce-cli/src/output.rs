//! Writing text reports: one line at a time, nouns counted, held totals
//! and torn tails in words. It is what every command's text output shares,
//! kept apart from the commands so that no command imports another.

use std::collections::BTreeMap;
use std::io::Write;

use payonce_log::TornTail;

use crate::error::CliError;
use crate::escape::Escaped;
use crate::logdir::LogDir;

/// Writes one line to `out`, turning a failed write into the command's
/// error: `say!(out, "events {}", n)?`.
macro_rules! say {
    ($out:expr) => {
        writeln!($out).map_err($crate::error::CliError::output)
    };
    ($out:expr, $($arg:tt)*) => {
        writeln!($out, $($arg)*).map_err($crate::error::CliError::output)
    };
}

pub(crate) use say;

/// Held totals in words: `10 USDC, 0.5 BTC`, or `none`.
pub(crate) fn held_words(held: &BTreeMap<String, String>) -> String {
    if held.is_empty() {
        return "none".to_owned();
    }
    held.iter()
        .map(|(currency, total)| format!("{total} {currency}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `1 key`, `2 keys`.
pub(crate) fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Warns about a torn tail on `err`; returns whether there was one.
pub(crate) fn warn_torn_tail(
    log: &LogDir,
    torn: Option<&TornTail>,
    err: &mut dyn Write,
) -> Result<bool, CliError> {
    let Some(torn) = torn else {
        return Ok(false);
    };
    writeln!(err, "warning: {}", Escaped(&log.describe_torn_tail(torn)))
        .map_err(CliError::output)?;
    Ok(true)
}
