//! The tests' clients of `payonce serve`: reqwest on rustls (reqwest has no
//! cryptography of its own here), and a raw TLS connection kept alive, to
//! see which certificate it was served and to ask on it again.

use std::net::SocketAddr;
use std::sync::Arc;

use payonce_tls::testing::{Issued, TestCa};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A rustls client configuration trusting `ca` (nothing without it) and
/// showing `identity` when given.
pub fn client_tls(ca: Option<&TestCa>, identity: Option<&Issued>) -> rustls::ClientConfig {
    payonce_tls::testing::client_config(ca, identity).unwrap()
}

/// A reqwest client on [`client_tls`].
pub fn http_client(ca: Option<&TestCa>, identity: Option<&Issued>) -> reqwest::Client {
    reqwest::Client::builder()
        .use_preconfigured_tls(client_tls(ca, identity))
        .build()
        .unwrap()
}

/// A TLS connection to `addr`, a server named `localhost` that `ca` vouches
/// for.
pub async fn tls_connect(addr: SocketAddr, ca: &TestCa) -> TlsStream<TcpStream> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_tls(Some(ca), None)));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    connector.connect(name, tcp).await.unwrap()
}

/// The certificate the server showed on `stream`.
pub fn served_certificate(stream: &TlsStream<TcpStream>) -> Vec<u8> {
    stream.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// The DER bytes of `issued`'s certificate.
pub fn der(issued: &Issued) -> Vec<u8> {
    CertificateDer::from_pem_slice(issued.certificate.as_bytes())
        .unwrap()
        .to_vec()
}

/// `GET path` on an open connection, kept alive; the answer's status.
pub async fn status_on<S>(stream: &mut S, path: &str) -> u16
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    let mut chunk = [0; 4096];
    let head_len = loop {
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "the connection closed before an answer");
        bytes.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&bytes[..head_len]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |len| len.trim().parse().unwrap());
    while bytes.len() < head_len + len {
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "the connection closed mid-answer");
        bytes.extend_from_slice(&chunk[..read]);
    }
    head.split(' ').nth(1).unwrap().parse().unwrap()
}
