//! The tests' HTTP client of `payonce serve`: reqwest on rustls (reqwest
//! has no cryptography of its own here). A raw TLS connection kept alive,
//! to see which certificate it was served and to ask on it again, is
//! `payonce_tls::testing`'s.

use payonce_tls::testing::{Issued, TestCa};

/// A reqwest client trusting `ca` (nothing without it) and showing
/// `identity` when given.
pub fn http_client(ca: Option<&TestCa>, identity: Option<&Issued>) -> reqwest::Client {
    let tls = payonce_tls::testing::client_config(ca, identity).unwrap();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .build()
        .unwrap()
}
