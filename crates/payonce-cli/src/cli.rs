//! The command line, as clap parses it. Every command has `--help`; every
//! reporting command has `--json`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use payonce::Head;

use crate::duration::parse_duration;

const EXIT_CODES: &str = "\
Exit codes:
  0  the command worked and found nothing wrong
  1  the command worked and found a problem in the log: a torn tail (a write cut
     short, or one in progress beside a running service) or a divergence (a
     recorded decision the code would not make again)
  2  a usage or input error: a bad argument, a missing directory or a file in its
     place, a directory that is not a payonce log, an unknown key or withdrawal,
     a bad outcome file, a refusal by the ledger, or the writer lock held by
     another process. Nothing was changed
  3  (inflight --older-than) keys in flight for longer than that; it wins over 1
  4  the log is damaged where it cannot be a torn tail, reported with its file,
     offset and sequence number. Nothing was changed
  5  the command failed: reading or writing failed (a full disk, a permission) or
     a bug; the message says what failed and what may have changed
With --json, a failure also prints one JSON object on stdout: error (a stable
snake_case kind), message, exit_code, file, offset and seq (null if unknown).";

const AUDIT_NOTE: &str = "\
Audit commands never take the writer lock and never change the log (history and
state may bring the audit index beside it up to date), so they are safe beside a
running service and on a copy of a production directory. Text from the log is
printed with control characters escaped.";

/// payonce: audit a submission ledger's log, close keys left in flight, and
/// see the ledger at work in a demo.
#[derive(Debug, Parser)]
#[command(name = "payonce", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: CliCommand,
}

impl Cli {
    /// Whether the command was given `--json`: its failure is then printed
    /// as one JSON object on stdout too.
    pub fn json(&self) -> bool {
        match &self.command {
            CliCommand::Verify(args) => args.json,
            CliCommand::Head(args) => args.json,
            CliCommand::History(args) => args.json,
            CliCommand::State(args) => args.json,
            CliCommand::Inflight(args) => args.json,
            CliCommand::Export(args) => args.json,
            CliCommand::Resolve(args) => args.json,
            CliCommand::Correct(args) => args.json,
            CliCommand::Release(args) => args.json,
            CliCommand::Snapshot(args) => args.json,
            CliCommand::Report(args) => args.json,
            CliCommand::Index(_)
            | CliCommand::Demo(_)
            | CliCommand::Serve(_)
            | CliCommand::Migrate(_)
            | CliCommand::EndSession(_)
            | CliCommand::DemoWorker(_) => false,
        }
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum CliCommand {
    /// Checksums, chain and a re-derivation of every recorded decision.
    ///
    /// Prints a summary (events, segments, keys, in flight, holds by
    /// currency, refusals) and every problem with its location. Exit code 1
    /// for a divergence or a torn tail (an empty newest segment, whose
    /// header never reached the disk, included: the next writer saves it
    /// aside), 4 for damage.
    ///
    /// With `--expect-head SEQ:DIGEST` (a head printed earlier by `payonce
    /// head`), it also fails with exit code 4 unless the log holds that
    /// head, unchanged: the batch ending at SEQ has that digest, so no
    /// event up to it was edited, removed, inserted or reordered.
    ///
    /// With `--snapshots`, it also audits every snapshot of the projections
    /// kept beside the log: whether an opening would use it, and whether its
    /// state equals, answer for answer, the state the replay rebuilds at its
    /// seq, naming the first answer that differs. Exit code 1 if a snapshot
    /// is refused or differs.
    #[command(after_help = format!("{AUDIT_NOTE}\n\n{EXIT_CODES}"))]
    Verify(VerifyArgs),
    /// The log's head, `SEQ:DIGEST`, on the last line: the seq of its last
    /// whole batch and that batch's SHA-256 chain digest.
    ///
    /// Verifies every checksum and the digest chain on the way. Keep the
    /// head somewhere the ledger's disk (or database) cannot reach;
    /// `--expect-head`, here or on `payonce verify` for a directory, later
    /// proves the log still holds it, unchanged. Exit code 1 if the log
    /// ends in a torn tail (the head is then the last one before it), or
    /// if a PostgreSQL ledger no longer passes through the expected head;
    /// 4 if a directory's log does not hold it.
    #[command(after_help = format!("{AUDIT_NOTE}\n\n{EXIT_CODES}"))]
    Head(HeadArgs),
    /// Every event that touched a request key or a withdrawal, in order,
    /// each decision explained in words.
    ///
    /// Events that name only a key (send_rejected, send_failed, released)
    /// belong to the withdrawal that key held at the time. Uses the audit
    /// index (`payonce index`) when present, after bringing it up to date;
    /// every record it points to is read back from the log and verified.
    #[command(after_help = format!("{AUDIT_NOTE}\n\n{EXIT_CODES}"))]
    History(HistoryArgs),
    /// An incident report: one self-contained HTML page of a window of the
    /// log (default payonce-report.html).
    ///
    /// Built from the same verified replay as verify: the header names the
    /// chain heads at the window's start and end and whether every
    /// checksum, chain link and decision verified (a torn tail, a
    /// divergence or damage is said at the top, and the page is still
    /// written); then a summary, a timeline with one lane per withdrawal,
    /// the funds held over time, and every event in the window. --from and
    /// --to take a sequence number or an RFC 3339 time; --key and
    /// --withdrawal (each may repeat) keep only what touched them. A window
    /// of more than REPORT_EVENTS_MAX (4,000) events is refused and nothing
    /// is written. Exit code 4 (with the page written up to the damage) if
    /// the log is damaged.
    #[command(after_help = format!("{AUDIT_NOTE}\n\n{EXIT_CODES}"))]
    Report(ReportArgs),
    /// What the ledger believed at a point in the log: records, claims,
    /// keys in flight, holds.
    ///
    /// Replays the log up to `--at` (a sequence number, or an RFC 3339 time:
    /// every event up to the first stamped later than it), without
    /// re-deriving decisions (that is `verify`'s job).
    #[command(after_help = format!("{AUDIT_NOTE}\n\n{EXIT_CODES}"))]
    State(StateArgs),
    /// The operator's queue: keys whose outcome is unknown, with their
    /// withdrawal, amount, age and last send error.
    ///
    /// With `--older-than`, only keys claimed longer ago than that are
    /// listed, and the exit code is 3 if there is any (1 if there is none
    /// but the log has a torn tail).
    #[command(after_help = format!("{AUDIT_NOTE}\n\n{EXIT_CODES}"))]
    Inflight(InflightArgs),
    /// Every event as one JSON object per line (JSON Lines).
    ///
    /// Each line: seq, at (RFC 3339), at_unix_nanos, schema, event (its
    /// name), key, withdrawal (when the event names one) and kind (the
    /// event's full content). Its output is always JSON; --json is
    /// accepted, and makes a failure end the output with one error object.
    /// A --from past the last event is an error naming it, as state --at is.
    #[command(after_help = format!("{AUDIT_NOTE}\n\n{EXIT_CODES}"))]
    Export(ExportArgs),
    /// Close a key in flight with what happened: "I looked; here is the
    /// outcome".
    ///
    /// Opens the ledger for writing (refused while a service holds its
    /// lock), checks the outcome against the key's claim, records the note
    /// and the operator, and prints the key's resulting state. See
    /// docs/operations.md before using it.
    #[command(after_help = EXIT_CODES)]
    Resolve(ResolveArgs),
    /// Correct the outcome recorded for a key: "the recorded outcome is
    /// wrong; here is the right one".
    ///
    /// For a key that has an outcome (a send's, a resolve's or a later
    /// report's) that the rail contradicts. The same checks as resolve: the
    /// outcome must be settled (sent, confirmed, failed or rejected) and be
    /// the key's withdrawal (the same id, amount, currency and destination),
    /// and no send may be running for it. The event records the old and the
    /// new outcome, the note and the operator; the funds follow the new one.
    /// Opens the ledger for writing (refused while a service holds its
    /// lock). See docs/operations.md before using it.
    #[command(after_help = EXIT_CODES)]
    Correct(CorrectArgs),
    /// Release a key in flight: "I looked; nothing was sent". Drops the
    /// key, its claim and its hold, so the withdrawal can be sent again.
    ///
    /// Never release a key whose send may have reached the rail: the next
    /// submission sends the money a second time. Opens the ledger for
    /// writing (refused while a service holds its lock). See
    /// docs/operations.md before using it.
    #[command(after_help = EXIT_CODES)]
    Release(ReleaseArgs),
    /// Take a snapshot of the projections now, or list the ones kept.
    ///
    /// A snapshot lets the next opening replay only the events after it
    /// (docs/snapshot-format.md). Without `--list`, it opens the ledger for
    /// writing (refused while a service holds its lock; on PostgreSQL as no
    /// worker), takes a snapshot of the state after its last event, keeps
    /// the newest two and prints where it went. With `--list` it is
    /// read-only: every snapshot kept, newest first, with its seq, the head
    /// of the log it names, its length, and whether it verifies, that is
    /// whether an opening would use it (its checksums, its log, the head
    /// it names against the one the log holds, every field). `verify
    /// --snapshots` also compares each with the state a replay rebuilds.
    /// With `--list`, exit code 1 if a snapshot does not verify.
    #[command(after_help = EXIT_CODES)]
    Snapshot(SnapshotArgs),
    /// Build or update the audit index beside the log (DIR/audit-index).
    ///
    /// The index maps withdrawal ids and request keys to the events that
    /// touched them, and times to sequence numbers, so `history` need not
    /// scan. It is derived data: deleting it loses nothing. An index built
    /// from another log, or that no longer matches this one, is rebuilt.
    #[command(after_help = EXIT_CODES)]
    Index(IndexArgs),
    /// Play the incidents that pay a user twice (a client retry, a phone and
    /// a laptop, a re-drive, a replayed webhook, a rail timeout, a rail
    /// refusal) against a simulated rail on a real, durable ledger, and show
    /// that every withdrawal was sent once.
    ///
    /// Leaves the ledger's directory behind and prints the commands to
    /// audit it.
    #[command(after_help = EXIT_CODES)]
    Demo(DemoArgs),
    /// Run the ledger as an HTTP service: withdrawals, submissions under an
    /// Idempotency-Key, operator exits, health and metrics (docs/http.md).
    ///
    /// Runs on the embedded file ledger in --dir (--init creates it), or as
    /// --worker of the PostgreSQL ledger at --postgres.
    /// HTTPS with --tls-cert and --tls-key. SIGTERM stops accepting, waits
    /// for running sends and records their outcomes; SIGHUP rereads the
    /// tokens file and the TLS files.
    #[command(after_help = EXIT_CODES)]
    // Boxed: its many flags would make every command's value as large.
    Serve(Box<crate::serve::ServeArgs>),
    /// Apply the payonce schema to a PostgreSQL database: tables, their
    /// constraints, the triggers that make them append-only, and the
    /// schema's version.
    ///
    /// Safe to run again: a database at this build's version is left as
    /// it is; one of another version is refused. Run it with a role that
    /// may create a schema; workers need only INSERT and SELECT (see
    /// docs/postgres.md).
    #[command(after_help = EXIT_CODES)]
    Migrate(MigrateArgs),
    /// End the session of a worker of a PostgreSQL ledger that is gone:
    /// "I looked; this worker is not running". Its sends no longer count
    /// as running, so the keys it left in flight can be resolved or
    /// released.
    ///
    /// Refused while a process runs as the worker (it holds the worker's
    /// lock), and for a worker without a live session. A worker that
    /// restarts ends its own earlier session itself.
    #[command(after_help = EXIT_CODES)]
    EndSession(EndSessionArgs),
    /// One worker process of `demo --postgres`: waits for a line on its
    /// standard input, then submits its withdrawals.
    #[command(hide = true)]
    DemoWorker(DemoWorkerArgs),
}

/// `payonce migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The database: a postgres:// or postgresql:// URL.
    pub url: String,
}

/// `payonce end-session`.
#[derive(Debug, Args)]
pub struct EndSessionArgs {
    /// The ledger: a postgres:// or postgresql:// URL.
    pub url: String,
    /// The worker whose session to end.
    pub worker: String,
    /// Why you believe it is gone: what you looked at.
    #[arg(long)]
    pub note: String,
    /// Who you are (default: $USER).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

/// `payonce verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The ledger's directory, or a PostgreSQL ledger's postgres:// URL.
    pub dir: PathBuf,
    /// Also audit every snapshot of the projections against the replay.
    #[arg(long)]
    pub snapshots: bool,
    /// Fail unless the log holds this head (as `payonce head` printed it),
    /// unchanged, as the batch ending at SEQ.
    #[arg(long, value_name = "SEQ:DIGEST")]
    pub expect_head: Option<Head>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `payonce head`.
#[derive(Debug, Args)]
pub struct HeadArgs {
    /// The ledger's directory, or a PostgreSQL ledger's postgres:// URL.
    pub dir: PathBuf,
    /// A head printed earlier, `SEQ:DIGEST`: check the log still passes
    /// through it (on a directory, as `verify --expect-head` does).
    #[arg(long, value_name = "SEQ:DIGEST")]
    pub expect_head: Option<Head>,
    /// The former name of `--expect-head`, deprecated: it still works,
    /// with a warning.
    #[arg(
        long,
        value_name = "SEQ:DIGEST",
        hide = true,
        conflicts_with = "expect_head"
    )]
    pub pinned: Option<Head>,
    /// Print the head as one JSON object (directories only).
    #[arg(long)]
    pub json: bool,
}

impl HeadArgs {
    /// The head to check the log against, under its name or its
    /// deprecated one.
    pub fn expected_head(&self) -> Option<Head> {
        self.expect_head.or(self.pinned)
    }
}

/// `payonce history`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("subject").required(true).args(["key", "withdrawal"]))]
pub struct HistoryArgs {
    /// The ledger's directory, or a PostgreSQL ledger's postgres:// URL.
    pub dir: PathBuf,
    /// The request key whose history to show.
    #[arg(long)]
    pub key: Option<String>,
    /// The withdrawal id whose history to show.
    #[arg(long)]
    pub withdrawal: Option<String>,
    /// Scan the log even if an audit index is present (a directory's, or a
    /// PostgreSQL ledger's index in the database).
    #[arg(long)]
    pub no_index: bool,
    /// Print the history as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `payonce report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The ledger's directory, or a PostgreSQL ledger's postgres:// URL.
    pub dir: PathBuf,
    /// The window's start: a sequence number (the first event shown) or an
    /// RFC 3339 time (every event stamped at or after it); the log's first
    /// event if absent.
    #[arg(long, value_name = "SEQ|TIME")]
    pub from: Option<String>,
    /// The window's end: a sequence number (the last event shown) or an
    /// RFC 3339 time (every event up to the first stamped later); the
    /// log's end if absent.
    #[arg(long, value_name = "SEQ|TIME")]
    pub to: Option<String>,
    /// Keep only the events that touched this request key (repeatable).
    #[arg(long = "key", value_name = "KEY")]
    pub keys: Vec<String>,
    /// Keep only the events about this withdrawal (repeatable).
    #[arg(long = "withdrawal", value_name = "ID")]
    pub withdrawals: Vec<String>,
    /// The file to write.
    #[arg(short = 'o', long, default_value = "payonce-report.html")]
    pub output: PathBuf,
    /// Do not use the audit index (a directory's, or a PostgreSQL ledger's
    /// in its database) to check --key and --withdrawal before reading the
    /// log.
    #[arg(long)]
    pub no_index: bool,
    /// Print what was written as one JSON object (and a failure as one).
    #[arg(long)]
    pub json: bool,
}

/// `payonce state`.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// The ledger's directory, or a PostgreSQL ledger's postgres:// URL.
    pub dir: PathBuf,
    /// A sequence number (`42`) or an RFC 3339 time (`2026-11-30T12:03:07Z`,
    /// `2026-11-30T13:03:07+01:00`, from 1970-01-01T00:00:00Z to
    /// 2554-07-21T23:34:33Z); the end of the log if absent. A sequence
    /// number past the last event is an error naming it.
    #[arg(long, value_name = "SEQ|TIME")]
    pub at: Option<String>,
    /// Do not use the audit index to find where a time falls.
    #[arg(long)]
    pub no_index: bool,
    /// Print the state as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `payonce inflight`.
#[derive(Debug, Args)]
pub struct InflightArgs {
    /// The ledger's directory, or a PostgreSQL ledger's postgres:// URL.
    pub dir: PathBuf,
    /// List only keys claimed longer ago than this (45s, 30m, 2h, 1d,
    /// 1h30m); exit 3 if there is any.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub older_than: Option<Duration>,
    /// Print the queue as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `payonce export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The ledger's directory, or a PostgreSQL ledger's postgres:// URL.
    pub dir: PathBuf,
    /// The first sequence number to export (default: the first event).
    #[arg(long, value_name = "SEQ")]
    pub from: Option<u64>,
    /// The last sequence number to export (default: the last event).
    #[arg(long, value_name = "SEQ")]
    pub to: Option<u64>,
    /// Accepted for symmetry with the other commands: export always prints
    /// JSON Lines. With it, a failure is also printed as one JSON object on
    /// stdout (the last line).
    #[arg(long)]
    pub json: bool,
}

/// `payonce resolve`.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The ledger's directory, or a PostgreSQL ledger's postgres:// URL.
    pub dir: PathBuf,
    /// The request key to close.
    pub key: String,
    /// A JSON file holding the withdrawal as it is now (the same id, amount,
    /// currency and destination as the key's claim), such as one with state
    /// "sent" and the rail's reference.
    #[arg(long, value_name = "FILE.json")]
    pub outcome: PathBuf,
    /// Why you believe it: what you looked at on the rail.
    #[arg(long)]
    pub note: String,
    /// Who you are (default: $USER).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// Accept a withdrawal id this ledger did not mint, as a service
    /// configured with `accept_foreign_ids` does.
    #[arg(long)]
    pub accept_foreign_ids: bool,
    /// Print the key's resulting state as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `payonce correct`.
#[derive(Debug, Args)]
pub struct CorrectArgs {
    /// The ledger's directory, or a PostgreSQL ledger's postgres:// URL.
    pub dir: PathBuf,
    /// The request key whose outcome to correct.
    pub key: String,
    /// A JSON file holding the withdrawal as it really is (the same id,
    /// amount, currency and destination as the key's claim, in a settled
    /// state: sent, confirmed, failed or rejected).
    #[arg(long, value_name = "FILE.json")]
    pub outcome: PathBuf,
    /// Why the recorded outcome is wrong: what you looked at on the rail.
    #[arg(long)]
    pub note: String,
    /// Who you are (default: $USER).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// Print the key's resulting state as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `payonce snapshot`.
#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// The ledger's directory, or a PostgreSQL ledger's postgres:// URL.
    pub dir: PathBuf,
    /// List the snapshots kept, read-only, instead of taking one.
    #[arg(long)]
    pub list: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `payonce release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The ledger's directory, or a PostgreSQL ledger's postgres:// URL.
    pub dir: PathBuf,
    /// The request key to release.
    pub key: String,
    /// Why you believe nothing was sent: what you looked at on the rail.
    #[arg(long)]
    pub note: String,
    /// Who you are (default: $USER).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// Print the key's resulting state as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `payonce index`.
#[derive(Debug, Args)]
pub struct IndexArgs {
    /// The ledger's directory, or a PostgreSQL ledger's postgres:// URL.
    pub dir: PathBuf,
    /// Throw the existing index away and build it again from the log.
    #[arg(long)]
    pub rebuild: bool,
}

/// `payonce demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to create the ledger: a new or empty directory (default: a new
    /// directory under the system's temporary directory).
    #[arg(conflicts_with = "postgres")]
    pub dir: Option<PathBuf>,
    /// Play it on a PostgreSQL database instead (the schema is applied if
    /// missing; the database must hold no ledger yet), with worker
    /// processes racing on the same withdrawals.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
}

/// `payonce demo-worker`: one worker process of `demo --postgres`.
#[derive(Debug, Args)]
pub struct DemoWorkerArgs {
    /// The ledger's URL.
    pub url: String,
    /// The worker's name.
    pub worker: String,
    /// The time its events are stamped with (nanoseconds since the Unix
    /// epoch): the story's clock, so the log's times never go backwards.
    pub at_unix_nanos: u64,
    /// The withdrawals to submit, as JSON.
    pub withdrawals: Vec<String>,
}
