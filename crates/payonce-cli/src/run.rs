//! Running a parsed command line: the dispatch to each command, and the
//! flush of its output. Only this module knows every command.

use std::io::Write;

use crate::cli::{Cli, CliCommand};
use crate::env::{Env, Status};
use crate::error::CliError;
use crate::{audit, demo, head, history, index, operator, report, serve, shared, snapshots};

/// Runs `cli`: reports go to `out`, warnings to `err`. An `Err` is a command
/// that could not do its job; its [`CliError::exit_code`] says how to exit.
pub fn run(
    cli: Cli,
    env: &Env,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Status, CliError> {
    let status = match cli.command {
        CliCommand::Verify(args) => audit::verify(&args, env, out),
        CliCommand::Head(args) => head::head(&args, env, out, err),
        CliCommand::History(args) => history::history(&args, env, out, err),
        CliCommand::Report(args) => report::report(&args, env, out, err),
        CliCommand::State(args) => audit::state(&args, env, out, err),
        CliCommand::Inflight(args) => audit::inflight(&args, env, out, err),
        CliCommand::Export(args) => audit::export(&args, env, out, err),
        CliCommand::Resolve(args) => operator::resolve(&args, env, out, err),
        CliCommand::Correct(args) => operator::correct(&args, env, out, err),
        CliCommand::Release(args) => operator::release(&args, env, out, err),
        CliCommand::Snapshot(args) => snapshots::snapshot(&args, env, out, err),
        CliCommand::Index(args) => index::index_command(&args, env, out, err),
        CliCommand::Demo(args) => demo::demo_command(&args, env, out, err),
        CliCommand::Serve(args) => serve::serve_command(&args, out, err),
        CliCommand::Migrate(args) => shared::migrate(&args, out),
        CliCommand::EndSession(args) => shared::end_session(&args, env, out),
        CliCommand::DemoWorker(args) => demo::race::worker(&args, out),
    }?;
    out.flush().map_err(CliError::output)?;
    Ok(status)
}
