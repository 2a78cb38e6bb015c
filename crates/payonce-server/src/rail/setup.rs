//! The HTTP rail's client, as configured: its URL and the rules it must
//! keep (https, or plain http to loopback only unless allowed), the CAs
//! its certificate is checked against, the client certificate it shows,
//! and the reqwest client built from them on rustls with
//! [`payonce_tls::provider`]. The client goes to the URL directly: proxy
//! variables (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`) are ignored, or
//! they would carry a plain http:// send off this host.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use payonce_model::escape::{EchoPath, Escaped};
use payonce_tls::TlsFileError;
use rustls::RootCertStore;
use rustls::sign::SingleCertAndKey;

/// How to reach a rail client over HTTP.
#[derive(Clone)]
pub struct HttpRailConfig {
    /// Where to POST each send: `https://…`, or `http://…` to a loopback
    /// host (127.0.0.0/8, ::1, `localhost`), or anywhere with
    /// [`HttpRailConfig::insecure_http`].
    pub url: String,
    /// How long an answer may take before the outcome is unknown.
    pub timeout: Duration,
    /// Trust only the CAs in this PEM file (`--rail-ca`); without it, the
    /// operating system's.
    pub ca: Option<PathBuf>,
    /// A client certificate chain to show the rail (`--rail-cert`), with
    /// [`HttpRailConfig::client_key`].
    pub client_certificate: Option<PathBuf>,
    /// Its private key (`--rail-key`).
    pub client_key: Option<PathBuf>,
    /// Allow a plain `http://` rail on a host other than loopback
    /// (`--rail-insecure-http`): the withdrawal and the rail's answer cross
    /// the network in clear.
    pub insecure_http: bool,
}

impl HttpRailConfig {
    /// A rail at `url` checked against the system's CAs, with no client
    /// certificate, and plain HTTP to loopback only.
    pub fn new(url: &str, timeout: Duration) -> HttpRailConfig {
        HttpRailConfig {
            url: url.to_owned(),
            timeout,
            ca: None,
            client_certificate: None,
            client_key: None,
            insecure_http: false,
        }
    }
}

/// The URL may hold a password or an API key: only its host is shown.
impl std::fmt::Debug for HttpRailConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = reqwest::Url::parse(&self.url).ok().map(|url| host_of(&url));
        f.debug_struct("HttpRailConfig")
            .field("host", &host)
            .field("timeout", &self.timeout)
            .field("ca", &self.ca)
            .field("client_certificate", &self.client_certificate)
            .field("client_key", &self.client_key)
            .field("insecure_http", &self.insecure_http)
            .finish()
    }
}

/// Why the HTTP rail could not be set up. No variant holds the URL whole
/// (it may carry a password) or a key's bytes.
#[derive(Debug)]
#[non_exhaustive]
pub enum HttpRailError {
    /// `--rail-url` does not parse.
    Url {
        /// What the URL parser said (it never quotes the URL).
        detail: String,
    },
    /// `--rail-url` is neither `http://` nor `https://`.
    Scheme {
        /// Its scheme.
        scheme: String,
    },
    /// `--rail-url` is plain `http://` to a host other than loopback,
    /// without `--rail-insecure-http`.
    Cleartext {
        /// The host and port.
        host: String,
    },
    /// A TLS flag was given with a plain `http://` URL.
    TlsWithHttp {
        /// The flag.
        flag: &'static str,
    },
    /// `--rail-insecure-http` was given with an `https://` URL, where it
    /// would change nothing: it never turns certificate checks off.
    InsecureWithHttps,
    /// Only one of `--rail-cert` and `--rail-key` was given.
    HalfIdentity {
        /// The one missing.
        missing: &'static str,
    },
    /// A TLS file (or the system's trust store) cannot be used.
    Tls(TlsFileError),
    /// The HTTP client could not be built.
    Client {
        /// What reqwest or rustls said.
        detail: String,
    },
}

impl std::fmt::Display for HttpRailError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpRailError::Url { detail } => {
                write!(f, "--rail-url does not parse: {}", Escaped(detail))
            }
            HttpRailError::Scheme { scheme } => write!(
                f,
                "--rail-url must be https:// (or http:// to loopback), not {}://",
                Escaped(scheme)
            ),
            HttpRailError::Cleartext { host } => write!(
                f,
                "--rail-url is plain http:// to {}, which is not loopback (127.0.0.0/8, ::1, \
                 localhost): every withdrawal would cross the network in clear; give an \
                 https:// URL, or --rail-insecure-http to allow it",
                Escaped(host)
            ),
            HttpRailError::TlsWithHttp { flag } => write!(
                f,
                "{flag} is for an https:// rail, and --rail-url is plain http://"
            ),
            HttpRailError::InsecureWithHttps => f.write_str(
                "--rail-insecure-http allows a plain http:// rail; it never turns off the \
                 certificate checks of an https:// one (give the rail's CA with --rail-ca)",
            ),
            HttpRailError::HalfIdentity { missing } => write!(
                f,
                "--rail-cert and --rail-key go together, and {missing} is missing"
            ),
            HttpRailError::Tls(error) => write!(f, "the rail's TLS: {error}"),
            HttpRailError::Client { detail } => {
                write!(f, "the rail's HTTP client: {}", Escaped(detail))
            }
        }
    }
}

impl std::error::Error for HttpRailError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HttpRailError::Tls(error) => Some(error),
            _ => None,
        }
    }
}

impl From<TlsFileError> for HttpRailError {
    fn from(error: TlsFileError) -> HttpRailError {
        HttpRailError::Tls(error)
    }
}

/// A configuration that keeps the rules, ready to build clients from.
pub(super) struct Target {
    pub(super) url: reqwest::Url,
    /// The host and port, for messages.
    pub(super) host: String,
    pub(super) config: HttpRailConfig,
}

/// Its URL may hold a password: shown as the configuration is.
impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.config.fmt(f)
    }
}

impl Target {
    /// Checks `config` against the rules, reading no file.
    pub(super) fn new(config: HttpRailConfig) -> Result<Target, HttpRailError> {
        let url = reqwest::Url::parse(&config.url).map_err(|error| HttpRailError::Url {
            detail: error.to_string(),
        })?;
        let host = host_of(&url);
        match url.scheme() {
            "https" if config.insecure_http => return Err(HttpRailError::InsecureWithHttps),
            "https" => {}
            "http" => {
                if config.ca.is_some() {
                    return Err(HttpRailError::TlsWithHttp { flag: "--rail-ca" });
                }
                if config.client_certificate.is_some() || config.client_key.is_some() {
                    return Err(HttpRailError::TlsWithHttp {
                        flag: "--rail-cert",
                    });
                }
                if !config.insecure_http && !is_loopback(&url) {
                    return Err(HttpRailError::Cleartext { host });
                }
            }
            scheme => {
                return Err(HttpRailError::Scheme {
                    scheme: scheme.to_owned(),
                });
            }
        }
        match (&config.client_certificate, &config.client_key) {
            (Some(_), None) => {
                return Err(HttpRailError::HalfIdentity {
                    missing: "--rail-key",
                });
            }
            (None, Some(_)) => {
                return Err(HttpRailError::HalfIdentity {
                    missing: "--rail-cert",
                });
            }
            _ => {}
        }
        Ok(Target { url, host, config })
    }

    pub(super) fn https(&self) -> bool {
        self.url.scheme() == "https"
    }

    /// Which CAs the rail's certificate is checked against, in words.
    pub(super) fn ca_shown(&self) -> String {
        match &self.config.ca {
            Some(file) => format!("--rail-ca {}", EchoPath(file)),
            None => "the system's CAs".to_owned(),
        }
    }

    /// A new client, its TLS files read now. Redirects are not followed: a
    /// send goes to the configured URL or nowhere, never to wherever an
    /// answer points (perhaps in clear). No proxy is used, whatever the
    /// environment says: the rule for plain http:// is about where the
    /// bytes go, and a proxy would take them off this host.
    pub(super) fn client(&self) -> Result<reqwest::Client, HttpRailError> {
        reqwest::Client::builder()
            .timeout(self.config.timeout)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .https_only(self.https())
            .use_preconfigured_tls(self.tls()?)
            .build()
            .map_err(|error| HttpRailError::Client {
                detail: error.to_string(),
            })
    }

    /// The rustls configuration: for a plain http:// rail, one that trusts
    /// nothing (it is never used, and needs no trust store on the machine).
    fn tls(&self) -> Result<rustls::ClientConfig, HttpRailError> {
        let roots = match (self.https(), &self.config.ca) {
            (false, _) => RootCertStore::empty(),
            (true, Some(file)) => payonce_tls::read_roots(file)?,
            (true, None) => payonce_tls::system_roots()?,
        };
        let builder = rustls::ClientConfig::builder_with_provider(payonce_tls::provider())
            .with_safe_default_protocol_versions()
            .map_err(|error| HttpRailError::Client {
                detail: error.to_string(),
            })?
            .with_root_certificates(roots);
        let mut config = match self.client_files() {
            Some((certificate, key)) => {
                let identity = payonce_tls::read_identity(certificate, key)?;
                let resolver = SingleCertAndKey::from(identity.certified_key());
                builder.with_client_cert_resolver(Arc::new(resolver))
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// The client certificate's file and its key's, if given.
    pub(super) fn client_files(&self) -> Option<(&Path, &Path)> {
        let certificate = self.config.client_certificate.as_deref()?;
        Some((certificate, self.config.client_key.as_deref()?))
    }
}

/// `url`'s host and port, as messages name the rail.
fn host_of(url: &reqwest::Url) -> String {
    let host = url.host_str().unwrap_or("no host");
    match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// Whether `url`'s host is this machine: 127.0.0.0/8, ::1 or `localhost`.
fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(
        url: &str,
        change: impl FnOnce(&mut HttpRailConfig),
    ) -> Result<Target, HttpRailError> {
        let mut config = HttpRailConfig::new(url, Duration::from_secs(1));
        change(&mut config);
        Target::new(config)
    }

    // Guards against a rail in clear on a network, TLS files that an
    // http:// URL would silently ignore, or a flag taken for turning
    // certificate checks off.
    #[test]
    fn the_rules_of_a_rail_url() {
        for url in [
            "http://127.0.0.1:9000/send",
            "http://127.8.9.10/send",
            "http://[::1]:9000/send",
            "http://localhost:9000/send",
            "http://LOCALHOST/send",
            "https://rail.example/send",
        ] {
            assert!(target(url, |_| {}).is_ok(), "{url}");
        }
        let refused = [
            (
                "http://10.0.0.7:9000/send",
                "10.0.0.7:9000, which is not loopback",
            ),
            ("http://localhost.evil.example/send", "not loopback"),
            ("http://[::2]/send", "not loopback"),
            ("ftp://rail.example/send", "not ftp://"),
            ("rail.example/send", "does not parse"),
        ];
        for (url, words) in refused {
            let error = target(url, |_| {}).unwrap_err().to_string();
            assert!(error.contains(words), "{url}: {error}");
        }
        let insecure = target("http://10.0.0.7/send", |c| c.insecure_http = true);
        assert!(insecure.is_ok());
        let error = target("https://rail.example/", |c| c.insecure_http = true);
        assert!(matches!(error, Err(HttpRailError::InsecureWithHttps)));
        let error = target("http://127.0.0.1/", |c| c.ca = Some("ca.crt".into()));
        assert!(matches!(
            error,
            Err(HttpRailError::TlsWithHttp { flag: "--rail-ca" })
        ));
        let error = target("https://rail.example/", |c| c.client_key = Some("k".into()));
        assert!(matches!(
            error,
            Err(HttpRailError::HalfIdentity {
                missing: "--rail-cert"
            })
        ));
    }

    // Guards against a password in the rail's URL reaching an error or a
    // debug print.
    #[test]
    fn the_url_shows_only_its_host() {
        let url = "http://user:hunter2-secret@10.0.0.7:9000/send?api_key=k-secret";
        let config = HttpRailConfig::new(url, Duration::from_secs(1));
        let error = Target::new(config.clone()).unwrap_err();
        for shown in [
            format!("{config:?}"),
            error.to_string(),
            format!("{error:?}"),
        ] {
            assert!(!shown.contains("secret"), "{shown}");
            assert!(shown.contains("10.0.0.7:9000"), "{shown}");
        }
    }
}
