//! The `payonce` binary: parses the command line and runs it; the work is
//! in the `payonce_cli` library.

use std::ffi::OsString;
use std::io::{ErrorKind, Write};
use std::process::ExitCode;

use clap::Parser;
use payonce_cli::{
    Cli, CliError, ECHO_LEN_MAX, EXIT_FAILED, EXIT_OK, EXIT_USAGE, Env, bounded_within, run,
};

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

/// Reports a command line clap refused: on stderr, escaped like any
/// untrusted text and with every long argument it quotes bounded, and,
/// when `--json` was among the arguments, as one JSON object on stdout.
fn usage_error(error: &clap::Error, args: &[OsString]) -> ExitCode {
    let args: Vec<String> = args
        .iter()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let quoted: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = bounded_within(&error.render().to_string(), &quoted, ECHO_LEN_MAX);
    let _ = writeln!(std::io::stderr(), "{}", text.trim_end());
    if args.iter().any(|arg| arg == "--json") {
        let first = text.lines().next().unwrap_or_default();
        let message = first.strip_prefix("error: ").unwrap_or(first).to_owned();
        let _ = writeln!(
            std::io::stdout(),
            "{}",
            CliError::Usage { message }.to_json_line()
        );
    }
    exit(EXIT_USAGE)
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // Help and version go to stdout as clap prints them.
        Err(error) if !error.use_stderr() => {
            let _ = error.print();
            return exit(EXIT_OK);
        }
        Err(error) => return usage_error(&error, &args),
    };
    let json = cli.json();
    let env = Env::from_process();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut err = std::io::stderr();
    let result = run(cli, &env, &mut out, &mut err);
    match result {
        Ok(status) => match out.flush() {
            Err(error) if error.kind() != ErrorKind::BrokenPipe => {
                let _ = writeln!(err, "payonce: writing the output: {error}");
                exit(EXIT_FAILED)
            }
            _ => exit(status.code()),
        },
        // A pipe closed early (`payonce export DIR | head`) is not an error
        // of ours.
        Err(CliError::Io { error, .. }) if error.kind() == ErrorKind::BrokenPipe => {
            let _ = out.flush();
            exit(EXIT_OK)
        }
        Err(error) => {
            if json {
                let _ = writeln!(out, "{}", error.to_json_line());
            }
            let _ = out.flush();
            let _ = writeln!(err, "payonce: {error}");
            exit(error.exit_code())
        }
    }
}
