//! Why a connection could not be made, in words: a connection string or a
//! file that cannot be used, or what each host said. The driver's own
//! words are kept beside ours.

use std::fmt;
use std::path::PathBuf;

use payonce::StoreError;
use payonce_model::escape::{EchoPath, Escaped};
use payonce_tls::TlsFileError;
use postgres::error::SqlState;

use crate::conninfo::ConninfoError;

/// Why no connection was made. Never holds a password.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// The connection string was refused.
    Conninfo(ConninfoError),
    /// A file an option names (`sslrootcert`, `sslcert`, `sslkey`) cannot
    /// be used.
    File {
        /// The option.
        option: &'static str,
        /// Why.
        error: TlsFileError,
    },
    /// A private key file group or others may read, refused by libpq's
    /// rule: `u=rw` (0600) or less if the process's user owns it, `u=rw,g=r`
    /// (0640) or less if root does.
    KeyFileMode {
        /// The file.
        file: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// No user name was given (`user`, `PGUSER`) and the process's own
    /// (`USER`, `LOGNAME`) is unknown.
    NoUser,
    /// Every host was tried and none accepted: what each said, in order.
    Refused {
        /// One per attempt.
        attempts: Vec<HostRefusal>,
    },
}

/// What one attempt on one host came to.
#[derive(Debug, Clone)]
pub struct HostRefusal {
    /// The host as the connection string names it.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Whether the attempt asked for TLS.
    pub tls: bool,
    /// What failed.
    pub refusal: Refusal,
    /// The driver's words.
    pub cause: String,
}

/// What failed on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The server's certificate is not signed by a trusted CA.
    UntrustedCertificate {
        /// Which roots were trusted: the `sslrootcert` file, or the
        /// system's.
        roots: String,
    },
    /// The server's certificate does not cover the host's name
    /// (`sslmode=verify-full`).
    NameNotCovered {
        /// The name asked for.
        name: String,
    },
    /// The server's certificate has expired or is not valid yet.
    CertificateExpired,
    /// The server's certificate is unusable otherwise (revoked, a wrong
    /// purpose, a bad signature).
    CertificateInvalid,
    /// The server refused this client's certificate, or wanted one and got
    /// none (`cert` authentication).
    ClientCertificateRefused,
    /// The server does not speak TLS, and the mode requires it.
    ServerWithoutTls,
    /// The server admits no unencrypted connection from here (its
    /// `pg_hba.conf` has `hostssl` lines only), and the mode did not try TLS.
    EncryptionRequired,
    /// The server refused the password.
    PasswordRefused {
        /// The user.
        user: String,
    },
    /// The server asked for a password and none was found.
    PasswordMissing {
        /// The user.
        user: String,
        /// Why the password file gave none, when one was ignored.
        passfile: Option<String>,
    },
    /// The server's `pg_hba.conf` admits no such connection.
    NotAdmitted,
    /// The host accepts no writes (a standby), and a writer needs them.
    ReadOnly,
    /// The host could not be reached, or did not answer in time.
    Unreachable,
    /// Anything else the server or the driver said.
    Other,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::UntrustedCertificate { roots } => write!(
                f,
                "the server's certificate is not signed by a trusted CA (trusted: {})",
                Escaped(roots)
            ),
            Refusal::NameNotCovered { name } => write!(
                f,
                "the server's certificate does not cover the name {}",
                Escaped(name)
            ),
            Refusal::CertificateExpired => {
                write!(
                    f,
                    "the server's certificate has expired or is not valid yet"
                )
            }
            Refusal::CertificateInvalid => write!(f, "the server's certificate is not valid"),
            Refusal::ClientCertificateRefused => write!(
                f,
                "the server refused this client's certificate, or wanted one (sslcert, sslkey)"
            ),
            Refusal::ServerWithoutTls => write!(f, "the server does not accept TLS"),
            Refusal::EncryptionRequired => write!(
                f,
                "the server accepts only TLS connections from here; sslmode does not try TLS"
            ),
            Refusal::PasswordRefused { user } => {
                write!(f, "the server refused the password of {}", Escaped(user))
            }
            Refusal::PasswordMissing { user, passfile } => {
                write!(
                    f,
                    "the server wants a password for {} and none was given (password, \
                     PGPASSWORD, a password file)",
                    Escaped(user)
                )?;
                match passfile {
                    Some(reason) => write!(f, "; the password file was ignored: {reason}"),
                    None => Ok(()),
                }
            }
            Refusal::NotAdmitted => write!(f, "the server's pg_hba.conf admits no such connection"),
            Refusal::ReadOnly => write!(f, "the server accepts no writes (a standby)"),
            Refusal::Unreachable => write!(f, "the server could not be reached"),
            Refusal::Other => write!(f, "the connection failed"),
        }
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Conninfo(error) => write!(f, "{error}"),
            ConnectError::File { option, error } => write!(f, "{option}: {error}"),
            ConnectError::KeyFileMode { file, mode } => write!(
                f,
                "sslkey: private key file {} has group or world access (mode {mode:04o}); it \
                 must be u=rw (0600) or less if owned by this user, or u=rw,g=r (0640) or less \
                 if owned by root",
                EchoPath(file)
            ),
            ConnectError::NoUser => write!(
                f,
                "no user name: give user= in the connection string, or PGUSER"
            ),
            ConnectError::Refused { attempts } => {
                write!(f, "no host accepted the connection")?;
                for attempt in attempts {
                    let tls = if attempt.tls { "TLS" } else { "no TLS" };
                    write!(
                        f,
                        "; {}:{} ({tls}): {} ({})",
                        Escaped(&attempt.host),
                        attempt.port,
                        attempt.refusal,
                        Escaped(&attempt.cause)
                    )?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ConnectError {}

impl From<ConnectError> for StoreError {
    fn from(error: ConnectError) -> StoreError {
        StoreError::Failed {
            detail: error.to_string(),
        }
    }
}

/// What `error` from one attempt means. `roots` names the trusted roots,
/// `name` the host's name, `user` the user, `passfile` why a password
/// file was ignored.
pub(crate) fn classify(
    error: &tokio_postgres::Error,
    roots: &str,
    name: &str,
    user: &str,
    passfile: Option<&str>,
) -> Refusal {
    if let Some(db) = error.as_db_error() {
        return match *db.code() {
            SqlState::INVALID_PASSWORD => Refusal::PasswordRefused {
                user: user.to_owned(),
            },
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
                let message = db.message();
                if message.contains("certificate") {
                    Refusal::ClientCertificateRefused
                } else if message.contains("no encryption") || message.contains("SSL off") {
                    Refusal::EncryptionRequired
                } else {
                    Refusal::NotAdmitted
                }
            }
            _ => Refusal::Other,
        };
    }
    if let Some(tls) = rustls_error(error) {
        return certificate_refusal(tls, roots, name);
    }
    let said = crate::error::chain(error);
    if said.contains("server does not support TLS") {
        Refusal::ServerWithoutTls
    } else if said.contains("password missing") {
        Refusal::PasswordMissing {
            user: user.to_owned(),
            passfile: passfile.map(str::to_owned),
        }
    } else if said.contains("does not allow writes") {
        Refusal::ReadOnly
    } else if error_chain_has_io(error) {
        Refusal::Unreachable
    } else {
        Refusal::Other
    }
}

/// What rustls said of the handshake, if it failed there.
fn rustls_error(error: &tokio_postgres::Error) -> Option<&rustls::Error> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && let Some(tls) = io.get_ref().and_then(|inner| inner.downcast_ref())
        {
            return Some(tls);
        }
        source = cause.source();
    }
    None
}

fn error_chain_has_io(error: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// A handshake's failure, by what was wrong with which certificate.
fn certificate_refusal(error: &rustls::Error, roots: &str, name: &str) -> Refusal {
    use rustls::{AlertDescription, CertificateError};
    match error {
        rustls::Error::InvalidCertificate(certificate) => match certificate {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                Refusal::UntrustedCertificate {
                    roots: roots.to_owned(),
                }
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                Refusal::NameNotCovered {
                    name: name.to_owned(),
                }
            }
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => Refusal::CertificateExpired,
            _ => Refusal::CertificateInvalid,
        },
        rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::AccessDenied,
        ) => Refusal::ClientCertificateRefused,
        _ => Refusal::Other,
    }
}
