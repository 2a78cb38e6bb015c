//! Certificate authorities the tests make for themselves: a CA, the
//! certificates it issues for servers and clients, PEM files of both
//! written where a server or a client reads them, rustls configurations
//! of a client trusting a CA and of a server showing a certificate, and a
//! blocking HTTPS client to look at what a server serves (its certificate,
//! its refusals) and to ask it on one connection kept open, and a reader
//! of one HTTP/1.1 message for the tests' own small servers.

use std::error::Error;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConnection, StreamOwned};

/// What a helper here fails with.
pub type TestError = Box<dyn Error + Send + Sync>;

/// A certificate and its key, in PEM.
#[derive(Clone)]
pub struct Issued {
    /// The certificate.
    pub certificate: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").finish_non_exhaustive()
    }
}

impl Issued {
    /// The DER bytes of its certificate (the first of its chain).
    pub fn der(&self) -> Result<Vec<u8>, TestError> {
        Ok(CertificateDer::from_pem_slice(self.certificate.as_bytes())?.to_vec())
    }

    /// Its chain and key as rustls takes them.
    fn chain_and_key(
        &self,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TestError> {
        let chain = CertificateDer::pem_slice_iter(self.certificate.as_bytes())
            .collect::<Result<Vec<_>, _>>()?;
        Ok((chain, PrivateKeyDer::from_pem_slice(self.key.as_bytes())?))
    }

    /// Writes `NAME.crt` and `NAME.key` (mode 0600) in `dir`, and returns
    /// their paths.
    pub fn write(&self, dir: &Path, name: &str) -> std::io::Result<(PathBuf, PathBuf)> {
        let certificate = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&certificate, &self.certificate)?;
        std::fs::write(&key, &self.key)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
        }
        Ok((certificate, key))
    }
}

/// A certificate authority of the tests' own.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's own certificate, in PEM: what a peer trusts.
    pub certificate: String,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

fn named(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}

impl TestCa {
    /// A new CA named `common_name`, with a key of its own.
    pub fn new(common_name: &str) -> Result<TestCa, rcgen::Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = named(common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let certificate = params.self_signed(&key)?.pem();
        Ok(TestCa {
            issuer: Issuer::new(params, key),
            certificate,
        })
    }

    /// Writes the CA's certificate to `dir/NAME.crt` and returns its path.
    pub fn write(&self, dir: &Path, name: &str) -> std::io::Result<PathBuf> {
        let path = dir.join(format!("{name}.crt"));
        std::fs::write(&path, &self.certificate)?;
        Ok(path)
    }

    fn issue(
        &self,
        params: &mut CertificateParams,
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<Issued, rcgen::Error> {
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let certificate = params.signed_by(&key, &self.issuer)?.pem();
        Ok(Issued {
            certificate,
            key: key.serialize_pem(),
        })
    }

    /// A server certificate covering `names` (DNS names or IP addresses).
    pub fn server(&self, names: &[&str]) -> Result<Issued, rcgen::Error> {
        let names: Vec<String> = names.iter().map(|&name| name.to_owned()).collect();
        let mut params = CertificateParams::new(names.clone())?;
        params.distinguished_name = named(names.first().map_or("server", String::as_str));
        self.issue(&mut params, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate whose common name is `common_name` (for
    /// PostgreSQL's `cert` authentication, the role's name).
    pub fn client(&self, common_name: &str) -> Result<Issued, rcgen::Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = named(common_name);
        self.issue(&mut params, ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// The roots of a trust store holding `ca` alone (nothing without it).
fn roots_of(ca: Option<&TestCa>) -> Result<rustls::RootCertStore, TestError> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = ca {
        roots.add(CertificateDer::from_pem_slice(ca.certificate.as_bytes())?)?;
    }
    Ok(roots)
}

/// A client's rustls configuration (on [`crate::provider`]) trusting `ca`
/// alone (nothing without it) and showing `identity` when given: what the
/// tests' HTTPS clients are built on.
pub fn client_config(
    ca: Option<&TestCa>,
    identity: Option<&Issued>,
) -> Result<rustls::ClientConfig, TestError> {
    let builder = rustls::ClientConfig::builder_with_provider(crate::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots_of(ca)?);
    Ok(match identity {
        Some(issued) => {
            let (chain, key) = issued.chain_and_key()?;
            builder.with_client_auth_cert(chain, key)?
        }
        None => builder.with_no_client_auth(),
    })
}

/// A server's rustls configuration (on [`crate::provider`]) showing
/// `issued`, and requiring a client certificate `client_ca` signed when
/// given; HTTP/1.1 by ALPN: what the tests' HTTPS servers (a rail) are
/// built on.
pub fn server_config(
    issued: &Issued,
    client_ca: Option<&TestCa>,
) -> Result<rustls::ServerConfig, TestError> {
    let provider = crate::provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match client_ca {
        Some(ca) => {
            let roots = Arc::new(roots_of(Some(ca))?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider).build()?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let (chain, key) = issued.chain_and_key()?;
    let mut config = builder.with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A blocking TLS connection of a test client.
pub type TlsClient = StreamOwned<ClientConnection, TcpStream>;

/// Longest a test client waits for a read: past it, the check fails
/// rather than hangs.
pub const CLIENT_READ_TIME_MAX: Duration = Duration::from_secs(30);

/// A TLS connection to `addr`, a server named `localhost` that `ca`
/// vouches for, showing `identity` if given; its handshake done, as far as
/// the client's side goes (in TLS 1.3 a server's refusal of the client's
/// certificate comes with the first read).
pub fn connect(
    addr: SocketAddr,
    ca: &TestCa,
    identity: Option<&Issued>,
) -> Result<TlsClient, TestError> {
    let config = Arc::new(client_config(Some(ca), identity)?);
    let mut connection = ClientConnection::new(config, ServerName::try_from("localhost")?)?;
    let mut tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(CLIENT_READ_TIME_MAX))?;
    while connection.is_handshaking() {
        connection.complete_io(&mut tcp)?;
    }
    Ok(StreamOwned::new(connection, tcp))
}

/// The DER bytes of the certificate the server showed on `stream`.
pub fn served_certificate(stream: &TlsClient) -> Option<Vec<u8>> {
    let certificates = stream.conn.peer_certificates()?;
    certificates.first().map(|certificate| certificate.to_vec())
}

/// The TLS error behind `error`, if TLS is what failed.
pub fn tls_error<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        let wrapped = current
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn Error + 'static));
        cause = wrapped.or_else(|| current.source());
    }
    None
}

/// `GET path` on an open connection (plain or TLS), kept alive, with a
/// bearer `token` if given; the answer's status and body.
pub fn get_on(
    stream: &mut (impl Read + Write),
    path: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let authorization = token.map_or(String::new(), |token| {
        format!("Authorization: Bearer {token}\r\n")
    });
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}\r\n");
    stream.write_all(request.as_bytes())?;
    stream.flush()?;
    let (head, body) = read_message(stream)?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok());
    let status = status.ok_or_else(|| invalid(&head))?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// One HTTP/1.1 message read from `stream`, a request or an answer: its
/// head (the start line and headers, in lowercase) and its body of
/// `Content-Length` bytes.
pub fn read_message(stream: &mut impl Read) -> std::io::Result<(String, Vec<u8>)> {
    let mut bytes = Vec::new();
    let mut chunk = [0; 4096];
    let mut read = |bytes: &mut Vec<u8>| -> std::io::Result<()> {
        let len = stream.read(&mut chunk)?;
        if len == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        bytes.extend_from_slice(&chunk[..len]);
        Ok(())
    };
    let head_len = loop {
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        read(&mut bytes)?;
    };
    let head = String::from_utf8_lossy(&bytes[..head_len]).to_ascii_lowercase();
    let len: usize = match head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
    {
        Some(len) => len.trim().parse().map_err(|_| invalid(&head))?,
        None => 0,
    };
    while bytes.len() < head_len + len {
        read(&mut bytes)?;
    }
    Ok((head, bytes[head_len..head_len + len].to_vec()))
}

fn invalid(head: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, head.to_owned())
}
