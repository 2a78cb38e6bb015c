//! PostgreSQL over TLS, with libpq's meanings, against a real server that
//! takes TLS only (`hostssl` lines, scram-sha-256, and `cert` for one
//! role), with certificates the tests make. Each case is also given to
//! psql, whose libpq is the definition: both must connect or both refuse,
//! over TLS or not alike.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use payonce_postgres::cluster::{Cluster, Replication, ServerTls, Settings, free_port};
use payonce_postgres::{ConnectError, Environment, Refusal, probe};
use payonce_tls::testing::TestCa;

pub const PASSWORD: &str = "scram-secret-0123456789";

/// The servers and files every case of this file shares.
pub struct Servers {
    /// TLS only: `hostssl` lines, its certificate from `trusted` covering
    /// `localhost` and nothing else.
    pub _tls_cluster: Cluster,
    pub tls_port: u16,
    /// No TLS at all (`ssl = off`), scram-sha-256 over TCP.
    pub _plain_cluster: Cluster,
    pub plain_port: u16,
    /// A port nothing listens on.
    pub dead_port: u16,
    pub dir: tempfile::TempDir,
    /// The CA that signed the server's and the client's certificates.
    pub trusted: PathBuf,
    /// A CA that signed nothing here.
    pub unrelated: PathBuf,
    /// `certuser`'s client certificate and key, from `trusted`.
    pub client: (PathBuf, PathBuf),
    /// The servers' certificate and key, from `trusted`, for `localhost`.
    pub server: ServerTls,
}

/// Started on first use; `None` outside CI when no cluster can start.
pub fn servers() -> Option<&'static Servers> {
    static SERVERS: OnceLock<Result<Servers, String>> = OnceLock::new();
    let started = SERVERS.get_or_init(start_servers);
    match started {
        Ok(servers) => Some(servers),
        Err(error) if payonce_postgres::cluster::required() => {
            panic!("CI=true, and the TLS test servers could not be started: {error}")
        }
        Err(error) => {
            payonce_postgres::cluster::shout(&format!("SKIPPING a TLS test: {error}"));
            None
        }
    }
}

/// Any error, as text.
fn said(error: impl std::fmt::Display) -> String {
    error.to_string()
}

fn start_servers() -> Result<Servers, String> {
    let dir = tempfile::tempdir().map_err(said)?;
    let ca = TestCa::new("payonce test CA").map_err(said)?;
    let other = TestCa::new("an unrelated CA").map_err(said)?;
    let trusted = ca.write(dir.path(), "trusted").map_err(said)?;
    let unrelated = other.write(dir.path(), "unrelated").map_err(said)?;
    let server = ca.server(&["localhost"]).map_err(said)?;
    let (certificate, key) = server.write(dir.path(), "server").map_err(said)?;
    let client = ca.client("certuser").map_err(said)?;
    let client = client.write(dir.path(), "certuser").map_err(said)?;
    let tls_port = free_port().map_err(said)?;
    let server = ServerTls {
        certificate,
        key,
        client_ca: Some(trusted.clone()),
    };
    let tls = Cluster::start_with(tls_only(tls_port, &server)).map_err(said)?;
    let plain_port = free_port().map_err(said)?;
    let plain = Cluster::start_with(Settings {
        port: plain_port,
        listen: Some("127.0.0.1".into()),
        hba: Some("host all all 127.0.0.1/32 scram-sha-256".into()),
        ..Settings::default()
    })
    .map_err(said)?;
    for cluster in [&tls, &plain] {
        create_roles(cluster)?;
    }
    Ok(Servers {
        _tls_cluster: tls,
        tls_port,
        _plain_cluster: plain,
        plain_port,
        dead_port: free_port().map_err(said)?,
        dir,
        trusted,
        unrelated,
        client,
        server,
    })
}

/// A server on `port` of 127.0.0.1 that takes TLS only: `cert` for
/// certuser, scram-sha-256 for everyone else.
fn tls_only(port: u16, server: &ServerTls) -> Settings {
    Settings {
        port,
        listen: Some("127.0.0.1".into()),
        tls: Some(server.clone()),
        hba: Some(
            "hostssl all certuser 127.0.0.1/32 cert\n\
             hostssl all all 127.0.0.1/32 scram-sha-256"
                .into(),
        ),
        ..Settings::default()
    }
}

/// The roles and the database every case logs in to.
fn create_roles(cluster: &Cluster) -> Result<(), String> {
    let mut admin = cluster.admin().map_err(said)?;
    for statement in [
        format!("CREATE ROLE payonce LOGIN PASSWORD '{PASSWORD}'"),
        "CREATE ROLE certuser LOGIN".to_owned(),
        "CREATE DATABASE custody OWNER payonce".to_owned(),
    ] {
        admin
            .batch_execute(&statement)
            .map_err(|error| format!("{statement}: {error:?}"))?;
    }
    Ok(())
}

/// What a case's home directory holds.
#[derive(Default, Clone, Copy)]
struct Home {
    /// `~/.postgresql/root.crt`: the trusted CA (`Some(true)`), or the
    /// unrelated one.
    root: Option<bool>,
    /// `~/.pgpass` with the password, at this mode.
    pgpass: Option<u32>,
    /// `~/.postgresql/postgresql.crt` and `.key`: certuser's.
    client: bool,
}

/// What a case must come to.
enum Expected {
    /// Connected over TLS.
    Tls,
    /// Connected without TLS.
    Plain,
    /// Refused, as this says.
    Refused(fn(&ConnectError) -> bool),
}

struct Case {
    name: &'static str,
    conninfo: String,
    env: Vec<(&'static str, String)>,
    home: Home,
    expected: Expected,
    /// Whether psql (libpq) must agree: not where payonce refuses what
    /// libpq takes (a named file missing) or knows what libpq 15 does not
    /// (`sslrootcert=system`).
    libpq: bool,
}

fn refused_with(error: &ConnectError, wanted: impl Fn(&Refusal) -> bool) -> bool {
    match error {
        ConnectError::Refused { attempts } => {
            attempts.iter().any(|attempt| wanted(&attempt.refusal))
        }
        _ => false,
    }
}

impl Servers {
    fn path(&self, file: &Path) -> String {
        file.display().to_string()
    }

    /// key=value for the TLS server as payonce, with `more`.
    fn tls_kv(&self, host: &str, more: &str) -> String {
        format!(
            "host={host} port={} dbname=custody user=payonce {more}",
            self.tls_port
        )
    }

    /// Writes `home`'s files in a new directory and returns it.
    fn home(&self, home: Home) -> tempfile::TempDir {
        let dir = tempfile::tempdir_in(self.dir.path()).unwrap();
        let dot = dir.path().join(".postgresql");
        std::fs::create_dir(&dot).unwrap();
        if let Some(trusted) = home.root {
            let root = if trusted {
                &self.trusted
            } else {
                &self.unrelated
            };
            std::fs::copy(root, dot.join("root.crt")).unwrap();
        }
        if let Some(mode) = home.pgpass {
            let file = dir.path().join(".pgpass");
            std::fs::write(&file, format!("localhost:*:custody:payonce:{PASSWORD}\n")).unwrap();
            set_mode(&file, mode);
        }
        if home.client {
            std::fs::copy(&self.client.0, dot.join("postgresql.crt")).unwrap();
            std::fs::copy(&self.client.1, dot.join("postgresql.key")).unwrap();
            set_mode(&dot.join("postgresql.key"), 0o600);
        }
        dir
    }
}

pub fn set_mode(file: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// psql from the newest server installed, or on the PATH.
fn psql() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("bin/psql"))
        .filter(|path| path.exists())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| PathBuf::from("psql"))
}

/// Whether psql connects with `conninfo` in `env`, and over TLS.
fn libpq_connects(conninfo: &str, env: &[(&str, String)]) -> Option<bool> {
    let output = Command::new(psql())
        .env_clear()
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .args(["-X", "-w", "-At", "-c"])
        .arg("SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)")
        .arg(conninfo)
        .output()
        .unwrap();
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim() == "t")
}

fn run(servers: &Servers, case: &Case) {
    let home = servers.home(case.home);
    let mut env = case.env.clone();
    env.push(("HOME", home.path().display().to_string()));
    let ours = probe(&case.conninfo, &Environment::of(env.iter().cloned()));
    let name = case.name;
    match (&case.expected, &ours) {
        (Expected::Tls, Ok(probe)) => assert!(probe.tls, "{name}: connected without TLS"),
        (Expected::Plain, Ok(probe)) => assert!(!probe.tls, "{name}: connected over TLS"),
        (Expected::Refused(wanted), Err(error)) => {
            assert!(wanted(error), "{name}: refused otherwise: {error}")
        }
        (_, other) => panic!("{name}: {other:?}"),
    }
    if let Err(error) = &ours {
        let said = error.to_string();
        assert!(!said.contains(PASSWORD), "{name}: the password in {said}");
    }
    if case.libpq {
        let libpq = libpq_connects(&case.conninfo, &env);
        let payonce = ours.as_ref().ok().map(|probe| probe.tls);
        assert_eq!(
            payonce, libpq,
            "{name}: payonce and libpq disagree ({ours:?})"
        );
    }
}

fn password() -> Vec<(&'static str, String)> {
    vec![("PGPASSWORD", PASSWORD.to_owned())]
}

fn case(name: &'static str, conninfo: String, home: Home, expected: Expected) -> Case {
    Case {
        name,
        conninfo,
        env: password(),
        home,
        expected,
        libpq: true,
    }
}

// Guards against any sslmode meaning other than libpq's on a server that
// takes TLS only, the root certificate rule of `require` included.
#[test]
fn every_sslmode_means_what_libpq_means_on_a_tls_only_server() {
    let Some(servers) = servers() else { return };
    let kv = |host: &str, more: &str| servers.tls_kv(host, more);
    let trusted = servers.path(&servers.trusted);
    let unrelated = servers.path(&servers.unrelated);
    let untrusted = Expected::Refused(|error| {
        refused_with(error, |refusal| {
            matches!(refusal, Refusal::UntrustedCertificate { .. })
        })
    });
    let none = Home::default();
    let cases = [
        case(
            "disable to a TLS-only server",
            kv("localhost", "sslmode=disable"),
            none,
            Expected::Refused(|error| {
                refused_with(error, |refusal| *refusal == Refusal::EncryptionRequired)
            }),
        ),
        case(
            "allow",
            kv("localhost", "sslmode=allow"),
            none,
            Expected::Tls,
        ),
        case(
            "prefer",
            kv("localhost", "sslmode=prefer"),
            none,
            Expected::Tls,
        ),
        case("no sslmode", kv("localhost", ""), none, Expected::Tls),
        case(
            "require without roots checks nothing",
            kv("127.0.0.1", "sslmode=require"),
            none,
            Expected::Tls,
        ),
        case(
            "require with an unrelated sslrootcert",
            kv(
                "localhost",
                &format!("sslmode=require sslrootcert={unrelated}"),
            ),
            none,
            untrusted,
        ),
        case(
            "require with an unrelated ~/.postgresql/root.crt",
            kv("localhost", "sslmode=require"),
            Home {
                root: Some(false),
                ..none
            },
            Expected::Refused(|error| {
                refused_with(error, |refusal| {
                    matches!(refusal, Refusal::UntrustedCertificate { .. })
                })
            }),
        ),
        case(
            "require with the right ~/.postgresql/root.crt",
            kv("localhost", "sslmode=require"),
            Home {
                root: Some(true),
                ..none
            },
            Expected::Tls,
        ),
        case(
            "verify-ca does not check the name",
            kv(
                "127.0.0.1",
                &format!("sslmode=verify-ca sslrootcert={trusted}"),
            ),
            none,
            Expected::Tls,
        ),
        case(
            "verify-full on a name the certificate does not cover",
            kv(
                "127.0.0.1",
                &format!("sslmode=verify-full sslrootcert={trusted}"),
            ),
            none,
            Expected::Refused(|error| {
                refused_with(error, |refusal| {
                    *refusal
                        == Refusal::NameNotCovered {
                            name: "127.0.0.1".into(),
                        }
                })
            }),
        ),
        case(
            "verify-full",
            kv(
                "localhost",
                &format!("sslmode=verify-full sslrootcert={trusted}"),
            ),
            none,
            Expected::Tls,
        ),
        case(
            "verify-full against an unrelated CA",
            kv(
                "localhost",
                &format!("sslmode=verify-full sslrootcert={unrelated}"),
            ),
            none,
            Expected::Refused(|error| {
                refused_with(error, |refusal| {
                    matches!(refusal, Refusal::UntrustedCertificate { .. })
                })
            }),
        ),
        case(
            "verify-full without any root file",
            kv("localhost", "sslmode=verify-full"),
            none,
            Expected::Refused(|error| {
                matches!(error, ConnectError::Conninfo(_)) && error.to_string().contains("root.crt")
            }),
        ),
        case(
            "prefer with an unrelated ~/.postgresql/root.crt falls back to plain, refused",
            kv("localhost", "sslmode=prefer"),
            Home {
                root: Some(false),
                ..none
            },
            Expected::Refused(|error| {
                refused_with(error, |refusal| *refusal == Refusal::EncryptionRequired)
            }),
        ),
        case(
            "allow with an unrelated ~/.postgresql/root.crt",
            kv("localhost", "sslmode=allow"),
            Home {
                root: Some(false),
                ..none
            },
            Expected::Refused(|error| {
                refused_with(error, |refusal| {
                    matches!(refusal, Refusal::UntrustedCertificate { .. })
                })
            }),
        ),
        case(
            "verify-ca with ~/.postgresql/root.crt",
            kv("127.0.0.1", "sslmode=verify-ca"),
            Home {
                root: Some(true),
                ..none
            },
            Expected::Tls,
        ),
    ];
    for case in &cases {
        run(servers, case);
    }
}

// Guards against sslrootcert=system meaning anything but libpq 16's: the
// operating system's roots, with verify-full only.
#[test]
fn sslrootcert_system_trusts_the_systems_roots_with_verify_full_only() {
    let Some(servers) = servers() else { return };
    let system = |mode: &str| Case {
        libpq: false,
        ..case(
            "sslrootcert=system",
            servers.tls_kv("localhost", &format!("sslrootcert=system {mode}")),
            Home::default(),
            Expected::Tls,
        )
    };
    // The tests' CA is not among the system's roots.
    let untrusted = Expected::Refused(|error| {
        refused_with(error, |refusal| {
            *refusal
                == Refusal::UntrustedCertificate {
                    roots: "the system's roots".into(),
                }
        })
    });
    run(
        servers,
        &Case {
            expected: untrusted,
            ..system("")
        },
    );
    let weak = |error: &ConnectError| {
        error
            .to_string()
            .contains("weak sslmode \"require\" may not be used with sslrootcert=system")
    };
    run(
        servers,
        &Case {
            expected: Expected::Refused(weak),
            ..system("sslmode=require")
        },
    );
}

// Guards against passwords found other than libpq finds them: the string,
// PGPASSWORD, the password file and its mode, and refusals in words.
#[test]
fn passwords_come_from_the_string_the_environment_or_a_password_file() {
    let Some(servers) = servers() else { return };
    let trusted = servers.path(&servers.trusted);
    let kv = |more: &str| {
        servers.tls_kv(
            "localhost",
            &format!("sslmode=verify-full sslrootcert={trusted} {more}"),
        )
    };
    let no_password = |name, home| Case {
        env: Vec::new(),
        ..case(name, kv(""), home, Expected::Tls)
    };
    let none = Home::default();
    let passfile = |home: &Home| Case {
        env: vec![("PGPASSFILE", "/nonexistent".to_owned())],
        ..no_password("PGPASSFILE names a missing file", *home)
    };
    let cases = [
        case("PGPASSWORD", kv(""), none, Expected::Tls),
        Case {
            env: Vec::new(),
            ..case(
                "in the string",
                kv(&format!("password={PASSWORD}")),
                none,
                Expected::Tls,
            )
        },
        case(
            "a wrong password",
            kv("password=wrong-password-0000"),
            none,
            Expected::Refused(|error| {
                refused_with(error, |refusal| {
                    *refusal
                        == Refusal::PasswordRefused {
                            user: "payonce".into(),
                        }
                })
            }),
        ),
        Case {
            expected: Expected::Refused(|error| {
                refused_with(error, |refusal| {
                    matches!(refusal, Refusal::PasswordMissing { passfile: None, .. })
                })
            }),
            ..no_password("no password anywhere", none)
        },
        no_password(
            "~/.pgpass at 0600",
            Home {
                pgpass: Some(0o600),
                ..none
            },
        ),
        Case {
            expected: Expected::Refused(|error| {
                refused_with(error, |refusal| match refusal {
                    Refusal::PasswordMissing {
                        passfile: Some(reason),
                        ..
                    } => reason.contains("0644"),
                    _ => false,
                })
            }),
            ..no_password(
                "~/.pgpass at 0644 is ignored",
                Home {
                    pgpass: Some(0o644),
                    ..none
                },
            )
        },
        Case {
            expected: Expected::Refused(|error| {
                refused_with(error, |refusal| {
                    matches!(refusal, Refusal::PasswordMissing { .. })
                })
            }),
            ..passfile(&Home {
                pgpass: Some(0o600),
                ..none
            })
        },
    ];
    for case in &cases {
        run(servers, case);
    }
    // PGPASSFILE names the file.
    let home = servers.home(Home {
        pgpass: Some(0o600),
        ..none
    });
    let file = home.path().join(".pgpass").display().to_string();
    run(
        servers,
        &Case {
            env: vec![("PGPASSFILE", file)],
            ..no_password("PGPASSFILE", none)
        },
    );
}

// Guards against client certificates (`cert` authentication) being left
// out, taken from a key others may read, or their refusal told vaguely.
#[test]
fn a_client_certificate_logs_in_a_cert_role() {
    let Some(servers) = servers() else { return };
    let trusted = servers.path(&servers.trusted);
    let (certificate, key) = (
        servers.path(&servers.client.0),
        servers.path(&servers.client.1),
    );
    let kv = |more: &str| {
        format!(
            "host=localhost port={} dbname=custody user=certuser sslmode=verify-full \
             sslrootcert={trusted} {more}",
            servers.tls_port
        )
    };
    let open_key = servers.dir.path().join("open.key");
    std::fs::copy(&servers.client.1, &open_key).unwrap();
    set_mode(&open_key, 0o644);
    let none = Home::default();
    let cases = [
        case(
            "sslcert and sslkey",
            kv(&format!("sslcert={certificate} sslkey={key}")),
            none,
            Expected::Tls,
        ),
        case(
            "~/.postgresql/postgresql.crt",
            kv(""),
            Home {
                client: true,
                ..none
            },
            Expected::Tls,
        ),
        case(
            "no client certificate",
            kv(""),
            none,
            Expected::Refused(|error| {
                refused_with(error, |refusal| {
                    *refusal == Refusal::ClientCertificateRefused
                })
            }),
        ),
        case(
            "a key others may read",
            kv(&format!(
                "sslcert={certificate} sslkey={}",
                open_key.display()
            )),
            none,
            Expected::Refused(|error| {
                matches!(error, ConnectError::KeyFileMode { mode: 0o644, .. })
            }),
        ),
    ];
    for case in &cases {
        run(servers, case);
    }
}

// Guards against a form of naming several hosts being refused or read as
// one: the first host is dead, the second takes the connection.
#[test]
fn every_form_names_several_hosts_over_tls() {
    let Some(servers) = servers() else { return };
    let trusted = servers.path(&servers.trusted);
    let (dead, live) = (servers.dead_port, servers.tls_port);
    let tls = format!("sslmode=verify-full&sslrootcert={trusted}");
    let cases = [
        case(
            "the authority",
            format!("postgresql://payonce@localhost:{dead},localhost:{live}/custody?{tls}"),
            Home::default(),
            Expected::Tls,
        ),
        case(
            "the query",
            format!(
                "postgresql:///custody?host=localhost,localhost&port={dead},{live}&user=payonce&{tls}"
            ),
            Home::default(),
            Expected::Tls,
        ),
        case(
            "key=value",
            format!(
                "host=localhost,localhost port={dead},{live} dbname=custody user=payonce \
                 sslmode=verify-full sslrootcert={trusted}"
            ),
            Home::default(),
            Expected::Tls,
        ),
    ];
    for case in &cases {
        run(servers, case);
    }
}

// Guards against libpq's environment variables being ignored where the
// string is silent: every setting from them, and no secret on a command
// line.
#[test]
fn the_environment_alone_reaches_the_server() {
    let Some(servers) = servers() else { return };
    let env = vec![
        ("PGHOST", "localhost".to_owned()),
        ("PGPORT", servers.tls_port.to_string()),
        ("PGUSER", "payonce".to_owned()),
        ("PGDATABASE", "custody".to_owned()),
        ("PGPASSWORD", PASSWORD.to_owned()),
        ("PGSSLMODE", "verify-full".to_owned()),
        ("PGSSLROOTCERT", servers.path(&servers.trusted)),
    ];
    run(
        servers,
        &Case {
            env,
            ..case(
                "only the environment",
                String::new(),
                Home::default(),
                Expected::Tls,
            )
        },
    );
}

// Guards against a server without TLS being taken when the mode needs TLS,
// or refused when it does not.
#[test]
fn a_server_without_tls_is_refused_by_the_modes_that_need_tls() {
    let Some(servers) = servers() else { return };
    let kv = |more: &str| {
        format!(
            "host=localhost port={} dbname=custody user=payonce {more}",
            servers.plain_port
        )
    };
    let without_tls = || {
        Expected::Refused(|error| {
            refused_with(error, |refusal| *refusal == Refusal::ServerWithoutTls)
        })
    };
    let trusted = servers.path(&servers.trusted);
    let cases = [
        case(
            "prefer",
            kv("sslmode=prefer"),
            Home::default(),
            Expected::Plain,
        ),
        case(
            "allow",
            kv("sslmode=allow"),
            Home::default(),
            Expected::Plain,
        ),
        case(
            "require",
            kv("sslmode=require"),
            Home::default(),
            without_tls(),
        ),
        case(
            "verify-full",
            kv(&format!("sslmode=verify-full sslrootcert={trusted}")),
            Home::default(),
            without_tls(),
        ),
    ];
    for case in &cases {
        run(servers, case);
    }
}

// Guards against a worker that loses TLS, or its certificate check, when
// it follows a failover: the multi-host URL with verify-full reaches the
// promoted standby over TLS, and the acknowledged outcome is there.
#[test]
fn a_worker_follows_a_failover_over_tls_with_verify_full() {
    let Some(servers) = servers() else { return };
    let (first, second) = (free_port().unwrap(), free_port().unwrap());
    let primary = Cluster::start_with(tls_only(first, &servers.server)).unwrap();
    create_roles(&primary).unwrap();
    let standby = primary
        .standby(
            Settings {
                port: second,
                listen: Some("127.0.0.1".into()),
                ..Settings::default()
            },
            Replication::Synchronous,
        )
        .unwrap();
    let url = format!(
        "postgresql://payonce:{PASSWORD}@localhost:{first},localhost:{second}/custody\
         ?sslmode=verify-full&sslrootcert={}",
        servers.path(&servers.trusted)
    );
    payonce_postgres::migrate(&url).unwrap();
    drop(payonce_postgres::init(&url, crate::config()).unwrap());
    let ledger = payonce_postgres::open(&url, "api-tls", crate::config()).unwrap();
    let before = ledger.create(crate::new_withdrawal("10")).unwrap();
    let told = ledger
        .submit("k-1", &before, |request| Ok(crate::sent(request, "0x1")))
        .unwrap();
    let environment = Environment::of([("HOME", "/nonexistent")]);
    let reached = probe(&url, &environment).unwrap();
    assert!(reached.tls && reached.port == first, "{reached:?}");

    primary.kill().unwrap();
    standby.promote().unwrap();
    let deadline = std::time::Instant::now() + payonce_postgres::RECONNECT_DELAY_MAX * 3;
    let replayed = loop {
        match ledger.submit("k-1", &before, |_| panic!("a replay sends nothing")) {
            Ok(outcome) => break outcome,
            Err(error) if std::time::Instant::now() < deadline => {
                assert!(!error.to_string().contains(PASSWORD), "{error}");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(error) => panic!("still refused: {error}"),
        }
    };
    assert_eq!(replayed, told);
    let after = ledger.create(crate::new_withdrawal("20")).unwrap();
    ledger
        .submit("k-2", &after, |request| Ok(crate::sent(request, "0x2")))
        .unwrap();
    let reached = probe(&url, &environment).unwrap();
    assert!(reached.tls && reached.port == second, "{reached:?}");
    let (report, _) = payonce_postgres::verify(&url).unwrap();
    assert!(report.is_clean(), "{report:?}");
}
