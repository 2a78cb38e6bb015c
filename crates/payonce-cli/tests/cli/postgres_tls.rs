//! The command line on a PostgreSQL that takes TLS only, as a managed
//! database does: libpq's key=value line with `sslmode=verify-full`, the
//! password from `PGPASSWORD` or `~/.pgpass` and never on the command line,
//! and refusals told in words, with bad input exiting 2.

use std::path::{Path, PathBuf};
use std::process::Command;

use payonce_postgres::cluster::{Cluster, ServerTls, Settings, free_port};
use payonce_tls::testing::TestCa;

use crate::fixture::Run;

const PASSWORD: &str = "cli-scram-secret-0123456789";

struct Server {
    _cluster: Cluster,
    port: u16,
    dir: tempfile::TempDir,
    trusted: PathBuf,
    unrelated: PathBuf,
}

/// A TLS-only server (`hostssl` and scram-sha-256 only) whose certificate
/// covers `localhost`, with a role `payonce` owning a database `custody`.
fn tls_only_server() -> Option<Server> {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("payonce CLI test CA").unwrap();
    let trusted = ca.write(dir.path(), "trusted").unwrap();
    let unrelated = TestCa::new("unrelated")
        .unwrap()
        .write(dir.path(), "unrelated")
        .unwrap();
    let (certificate, key) = ca
        .server(&["localhost"])
        .unwrap()
        .write(dir.path(), "server")
        .unwrap();
    let port = free_port().unwrap();
    let started = Cluster::start_with(Settings {
        port,
        listen: Some("127.0.0.1".into()),
        tls: Some(ServerTls {
            certificate,
            key,
            client_ca: None,
        }),
        hba: Some("hostssl all all 127.0.0.1/32 scram-sha-256".into()),
        ..Settings::default()
    });
    let cluster = match started {
        Ok(cluster) => cluster,
        Err(error) if payonce_postgres::cluster::required() => {
            panic!("CI=true, and no TLS cluster started: {error}")
        }
        Err(error) => {
            payonce_postgres::cluster::shout(&format!("SKIPPING a TLS CLI test: {error}"));
            return None;
        }
    };
    let mut admin = cluster.admin().unwrap();
    admin
        .batch_execute(&format!("CREATE ROLE payonce LOGIN PASSWORD '{PASSWORD}'"))
        .unwrap();
    admin
        .batch_execute("CREATE DATABASE custody OWNER payonce")
        .unwrap();
    Some(Server {
        _cluster: cluster,
        port,
        dir,
        trusted,
        unrelated,
    })
}

/// The binary with `args`, in an environment of `env` alone (and `HOME`).
fn payonce_in(env: &[(&str, String)], home: &Path, args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_payonce"))
        .env_clear()
        .env("HOME", home)
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .args(args)
        .output()
        .unwrap();
    Run {
        code: output.status.code().expect("the binary exits, not killed"),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

fn no_secret(run: &Run) {
    assert!(
        !run.stdout.contains(PASSWORD) && !run.stderr.contains(PASSWORD),
        "the password in the output: {}{}",
        run.stdout,
        run.stderr
    );
}

// Guards against the line a DBA pastes (key=value, verify-full, a root
// file) being taken for a directory or refused, and against a password that
// must sit on the command line.
#[test]
fn a_tls_only_server_is_reached_with_libpqs_line_and_no_secret_on_the_command_line() {
    let Some(server) = tls_only_server() else {
        return;
    };
    let home = tempfile::tempdir_in(server.dir.path()).unwrap();
    let line = format!(
        "host=localhost port={} dbname=custody user=payonce sslmode=verify-full sslrootcert={}",
        server.port,
        server.trusted.display()
    );
    let password = [("PGPASSWORD", PASSWORD.to_owned())];
    let migrated = payonce_in(&password, home.path(), &["migrate", &line]);
    assert_eq!(migrated.code, 0, "{}", migrated.stderr);
    assert!(
        migrated.stdout.contains("created the payonce schema"),
        "{}",
        migrated.stdout
    );
    no_secret(&migrated);

    // Everything from libpq's environment and ~/.pgpass: the command line
    // names only the kind of ledger.
    let pgpass = home.path().join(".pgpass");
    std::fs::write(&pgpass, format!("localhost:*:custody:payonce:{PASSWORD}\n")).unwrap();
    std::fs::set_permissions(&pgpass, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let env = [
        ("PGHOST", "localhost".to_owned()),
        ("PGPORT", server.port.to_string()),
        ("PGUSER", "payonce".to_owned()),
        ("PGDATABASE", "custody".to_owned()),
        ("PGSSLMODE", "verify-full".to_owned()),
        ("PGSSLROOTCERT", server.trusted.display().to_string()),
    ];
    let migrated = payonce_in(&env, home.path(), &["migrate", "postgresql://"]);
    assert_eq!(migrated.code, 0, "{}", migrated.stderr);
    assert!(
        migrated.stdout.contains("nothing to do"),
        "{}",
        migrated.stdout
    );
    let verified = payonce_in(&env, home.path(), &["verify", "postgresql://", "--json"]);
    // No ledger is in the database yet: an empty log verifies clean.
    assert_eq!(verified.code, 0, "{}{}", verified.stdout, verified.stderr);
    no_secret(&verified);
}

// Guards against a refused connection told vaguely, or a mistake in the
// connection string taken for a failed read rather than bad input.
#[test]
fn refusals_say_what_failed_and_a_mistake_in_the_string_exits_2() {
    let Some(server) = tls_only_server() else {
        return;
    };
    let home = tempfile::tempdir_in(server.dir.path()).unwrap();
    let password = [("PGPASSWORD", PASSWORD.to_owned())];
    let url = |more: &str| {
        format!(
            "postgresql://payonce@localhost:{}/custody?{more}",
            server.port
        )
    };
    let untrusted = payonce_in(
        &password,
        home.path(),
        &[
            "migrate",
            &url(&format!(
                "sslmode=verify-full&sslrootcert={}",
                server.unrelated.display()
            )),
        ],
    );
    assert_eq!(untrusted.code, 5, "{}", untrusted.stderr);
    assert!(
        untrusted.stderr.contains("not signed by a trusted CA"),
        "{}",
        untrusted.stderr
    );
    let disabled = payonce_in(
        &password,
        home.path(),
        &["migrate", &url("sslmode=disable")],
    );
    assert_eq!(disabled.code, 5, "{}", disabled.stderr);
    assert!(
        disabled.stderr.contains("accepts only TLS"),
        "{}",
        disabled.stderr
    );
    let wrong = payonce_in(
        &[("PGPASSWORD", "not-the-password".to_owned())],
        home.path(),
        &["migrate", &url("sslmode=require")],
    );
    assert!(
        wrong.stderr.contains("refused the password of payonce"),
        "{}",
        wrong.stderr
    );
    for (bad, named) in [
        (url("sslmode=verify"), "sslmode=verify"),
        (
            url("sslrootcert=/nonexistent/ca.crt&sslmode=verify-ca"),
            "/nonexistent/ca.crt",
        ),
        (url("sslcrl=/x"), "sslcrl"),
    ] {
        let refused = payonce_in(&password, home.path(), &["verify", &bad]);
        assert_eq!(refused.code, 2, "{bad}: {}", refused.stderr);
        assert!(refused.stderr.contains(named), "{bad}: {}", refused.stderr);
    }
    for run in [&untrusted, &disabled, &wrong] {
        no_secret(run);
    }
}
