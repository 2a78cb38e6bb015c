//! The `payonce` binary: parses the command line and runs it; the work is
//! in the `payonce_cli` library.

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

use clap::Parser;
use payonce_cli::{Cli, CliError, EXIT_OK, EXIT_USAGE, Env, escape, run};

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version go to stdout as clap prints them; a usage
            // error echoes the argument given, so it is escaped like any
            // untrusted text before it reaches the terminal.
            if !error.use_stderr() {
                let _ = error.print();
                return exit(EXIT_OK);
            }
            let text = error.render().to_string();
            let escaped: Vec<String> = text.lines().map(|line| escape(line).into_owned()).collect();
            let _ = writeln!(std::io::stderr(), "{}", escaped.join("\n"));
            return exit(EXIT_USAGE);
        }
    };
    let env = Env::from_process();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut err = std::io::stderr();
    let result = run(cli, &env, &mut out, &mut err);
    let flushed = out.flush();
    match result {
        Ok(status) => match flushed {
            Err(error) if error.kind() != ErrorKind::BrokenPipe => {
                let _ = writeln!(err, "payonce: writing the output: {error}");
                exit(EXIT_USAGE)
            }
            _ => exit(status.code()),
        },
        // A pipe closed early (`payonce export DIR | head`) is not an error
        // of ours.
        Err(CliError::Io { error, .. }) if error.kind() == ErrorKind::BrokenPipe => exit(EXIT_OK),
        Err(error) => {
            let _ = writeln!(err, "payonce: {error}");
            exit(error.exit_code())
        }
    }
}
