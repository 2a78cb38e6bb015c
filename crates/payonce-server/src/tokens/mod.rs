//! The tokens file: who may call the service, and in which role.
//!
//! ```toml
//! [clients]
//! alice = "alice-token-at-least-16-bytes"
//! # bob's token, written as its SHA-256: printf %s "$TOKEN" | sha256sum
//! bob = "sha256:5c5757c9b3a11017033edf71ccb42e0bea8f817cbbda2e17540e8488f02fd7b3"
//!
//! [operators]
//! frank = "frank-token-at-least-16-bytes"
//! ```
//!
//! A token is written in clear, or as `sha256:` and the 64 lowercase hex
//! digits of its SHA-256, so that a file of digests holds no secret. Every
//! entry is kept as a digest: a clear one is hashed when the file is read.
//!
//! A request names itself with `Authorization: Bearer TOKEN`. The token is
//! hashed once and its digest compared with every entry's, each in
//! constant time, and all of them every time, so how long the answer takes
//! says nothing about which entry came close.

mod error;
mod exposure;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::scope::check_name;

pub use self::error::TokensError;
pub use self::exposure::ExposedTokens;

/// Largest tokens file read, in bytes.
pub const TOKENS_FILE_LEN_MAX: u64 = 1 << 20;
/// Most names in a tokens file, clients and operators together.
pub const TOKENS_MAX: usize = 1024;
/// Shortest token in clear, in bytes: a guessable token is no token.
pub const TOKEN_LEN_MIN: usize = 16;
/// Longest token, in bytes, in clear or presented by a caller.
pub const TOKEN_LEN_MAX: usize = 256;
/// What starts an entry written as the SHA-256 of its token.
pub const DIGEST_PREFIX: &str = "sha256:";

/// A token's SHA-256.
type TokenDigest = [u8; 32];

/// Who a request is, by its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A client: creates and submits withdrawals under its own keys.
    Client(String),
    /// An operator: sees every key and closes keys in flight.
    Operator(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    clients: BTreeMap<String, String>,
    #[serde(default)]
    operators: BTreeMap<String, String>,
}

/// The callers the service knows, each by the digest of its token.
#[derive(Clone)]
pub struct Tokens {
    entries: Vec<(TokenDigest, Principal)>,
    /// How many entries were written in clear.
    clear: usize,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens, nor their digests.
        let names: Vec<&Principal> = self.entries.iter().map(|(_, who)| who).collect();
        f.debug_struct("Tokens")
            .field("names", &names)
            .field("clear", &self.clear)
            .finish()
    }
}

impl Tokens {
    /// Reads and checks the tokens file.
    pub fn read(file: &Path) -> Result<Tokens, TokensError> {
        let read = |error| TokensError::Read {
            file: file.to_owned(),
            error,
        };
        let len = std::fs::metadata(file).map_err(read)?.len();
        if len > TOKENS_FILE_LEN_MAX {
            return Err(TokensError::TooLarge {
                file: file.to_owned(),
                len,
            });
        }
        let text = std::fs::read_to_string(file).map_err(read)?;
        Tokens::parse(&text, file)
    }

    /// Checks the text of a tokens file; `file` names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Tokens, TokensError> {
        let parsed: TokensFile = toml::from_str(text).map_err(|error| TokensError::Syntax {
            file: file.to_owned(),
            message: error::without_quoted(error.message()),
        })?;
        let count = parsed.clients.len() + parsed.operators.len();
        if count == 0 || count > TOKENS_MAX {
            return Err(TokensError::Count {
                file: file.to_owned(),
                count,
            });
        }
        let clients = parsed
            .clients
            .into_iter()
            .map(|(n, t)| (Principal::Client(n.clone()), n, t));
        let operators = parsed
            .operators
            .into_iter()
            .map(|(n, t)| (Principal::Operator(n.clone()), n, t));
        let mut tokens = Tokens {
            entries: Vec::with_capacity(count),
            clear: 0,
        };
        for (principal, name, token) in clients.chain(operators) {
            let (digest, in_clear) = entry_digest(file, &name, &token)?;
            let repeated = tokens
                .entries
                .iter()
                .any(|(other, who)| *other == digest || principal_name(who) == name);
            if repeated {
                return Err(TokensError::Repeated {
                    file: file.to_owned(),
                    name,
                });
            }
            tokens.clear += usize::from(in_clear);
            tokens.entries.push((digest, principal));
        }
        Ok(tokens)
    }

    /// Who `token` is, if anyone. Hashes it once and compares its digest
    /// with every entry's, each in constant time (`subtle`), and picks the
    /// match without a branch: neither where a guess first differs, nor
    /// which entry it came close to, nor how long the right token is
    /// changes the work.
    pub fn principal(&self, token: &[u8]) -> Option<Principal> {
        // No entry's token is longer, so a longer one's length tells
        // nothing about them.
        if token.len() > TOKEN_LEN_MAX {
            return None;
        }
        let given: TokenDigest = Sha256::digest(token).into();
        // One more than the index of the match; 0 for none.
        let mut found = 0u64;
        for (index, (known, _)) in self.entries.iter().enumerate() {
            found.conditional_assign(&(index as u64 + 1), known.ct_eq(&given));
        }
        let index = usize::try_from(found).ok()?.checked_sub(1)?;
        self.entries.get(index).map(|(_, who)| who.clone())
    }

    /// How many callers the file names.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it names none (a file read by [`Tokens::read`] never does).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many of the tokens were written in clear rather than as
    /// digests.
    pub fn clear_count(&self) -> usize {
        self.clear
    }
}

fn principal_name(principal: &Principal) -> &str {
    match principal {
        Principal::Client(name) | Principal::Operator(name) => name,
    }
}

/// The digest of `name`'s entry `token`, and whether it was in clear.
fn entry_digest(file: &Path, name: &str, token: &str) -> Result<(TokenDigest, bool), TokensError> {
    check_name(name).map_err(|error| TokensError::Name {
        file: file.to_owned(),
        error,
    })?;
    if let Some(hex) = token.strip_prefix(DIGEST_PREFIX) {
        let digest = parse_digest(hex).ok_or_else(|| TokensError::BadDigest {
            file: file.to_owned(),
            name: name.to_owned(),
        })?;
        return Ok((digest, false));
    }
    let printable = token.bytes().all(|b| b.is_ascii_graphic());
    if !(TOKEN_LEN_MIN..=TOKEN_LEN_MAX).contains(&token.len()) || !printable {
        return Err(TokensError::BadToken {
            file: file.to_owned(),
            name: name.to_owned(),
        });
    }
    Ok((Sha256::digest(token.as_bytes()).into(), true))
}

/// 64 lowercase hex digits as the 32 bytes they spell.
fn parse_digest(hex: &str) -> Option<TokenDigest> {
    let digits = hex.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let mut digest = [0; 32];
    for (byte, pair) in digest.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (hex_digit(pair[0])? << 4) | hex_digit(pair[1])?;
    }
    Some(digest)
}

fn hex_digit(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Tokens, TokensError> {
        Tokens::parse(text, Path::new("tokens.toml"))
    }

    // Guards against a token that names the wrong caller, or a file that
    // lets two callers share one.
    #[test]
    fn tokens_name_their_caller_and_bad_files_are_refused() {
        let tokens = parse(
            "[clients]\nalice = \"alice-token-0123456\"\n[operators]\nfrank = \"frank-token-0123456\"\n",
        )
        .unwrap();
        assert_eq!(
            tokens.principal(b"alice-token-0123456"),
            Some(Principal::Client("alice".into()))
        );
        assert_eq!(
            tokens.principal(b"frank-token-0123456"),
            Some(Principal::Operator("frank".into()))
        );
        // A prefix, one byte more, the last byte wrong, a token padded with
        // the zeros the comparison pads with, one past the longest.
        for guess in [
            &b"alice-token-012345"[..],
            b"alice-token-01234567",
            b"alice-token-0123457",
            b"alice-token-0123456\0",
            &[b'a'; TOKEN_LEN_MAX + 1],
            b"",
        ] {
            assert_eq!(tokens.principal(guess), None, "{guess:?}");
        }
        let longest = "t".repeat(TOKEN_LEN_MAX);
        let tokens = parse(&format!("[clients]\nbob = \"{longest}\"\n")).unwrap();
        assert_eq!(
            tokens.principal(longest.as_bytes()),
            Some(Principal::Client("bob".into()))
        );
        assert!(!format!("{tokens:?}").contains("token-0"));
        let refused = [
            ("[clients]\nalice = \"short\"\n", "token"),
            ("[clients]\n\"a:b\" = \"alice-token-0123456\"\n", "name"),
            (
                "[clients]\nalice = \"alice-token-0123456\"\n[operators]\nbob = \"alice-token-0123456\"\n",
                "repeats",
            ),
            (
                "[clients]\nalice = \"alice-token-0123456\"\n[operators]\nalice = \"other-token-0123456\"\n",
                "repeats",
            ),
            (
                "[admins]\nalice = \"alice-token-0123456\"\n",
                "unknown field",
            ),
            ("", "0 entries"),
        ];
        for (text, words) in refused {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains(words), "{text:?}: {error}");
        }
    }

    /// The entry of `token` written as its digest.
    fn digest_of(token: &str) -> String {
        let digest = Sha256::digest(token.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("{DIGEST_PREFIX}{hex}")
    }

    // Guards against a digest entry that does not authenticate its token,
    // a malformed one taken for a clear token or for some other digest, and
    // two entries that name one token, once in clear and once hashed.
    #[test]
    fn digest_entries_authenticate_and_malformed_ones_are_refused_by_name() {
        let (alice, frank) = ("alice-token-0123456", "frank-token-0123456");
        let text = format!(
            "[clients]\nalice = \"{}\"\n[operators]\nfrank = \"{frank}\"\n",
            digest_of(alice)
        );
        let tokens = parse(&text).unwrap();
        assert_eq!(tokens.clear_count(), 1);
        assert_eq!(
            tokens.principal(alice.as_bytes()),
            Some(Principal::Client("alice".into()))
        );
        assert_eq!(
            tokens.principal(frank.as_bytes()),
            Some(Principal::Operator("frank".into()))
        );
        // The digest itself is not the token.
        assert_eq!(tokens.principal(digest_of(alice).as_bytes()), None);
        let digest = digest_of(alice);
        let hex = &digest[DIGEST_PREFIX.len()..];
        for bad in [
            format!("{DIGEST_PREFIX}{}", &hex[1..]),
            format!("{digest}0"),
            format!("{DIGEST_PREFIX}{}", hex.to_uppercase()),
            format!("{DIGEST_PREFIX}{}g", &hex[1..]),
            DIGEST_PREFIX.to_owned(),
        ] {
            let text = format!("[clients]\nalice = \"{bad}\"\n");
            let error = parse(&text).unwrap_err();
            assert!(
                matches!(&error, TokensError::BadDigest { name, .. } if name == "alice"),
                "{bad}: {error:?}"
            );
            let message = error.to_string();
            assert!(message.contains("alice") && message.contains("64 lowercase hex"));
        }
        let twice = format!(
            "[clients]\nalice = \"{alice}\"\n[operators]\nfrank = \"{}\"\n",
            digest_of(alice)
        );
        assert!(matches!(
            parse(&twice).unwrap_err(),
            TokensError::Repeated { name, .. } if name == "frank"
        ));
    }

    // Guards against a refusal or a debug print that shows a token: serde
    // quotes a value of the wrong type, and a digest is as good as a
    // password to anyone who can try guesses offline.
    #[test]
    fn no_refusal_and_no_debug_print_shows_a_token() {
        let secret = "secret-token-0123456789";
        for text in [
            format!("clients = \"{secret}\"\n"),
            format!("[clients]\nalice = \"{secret} x\"\n"),
            format!("[clients]\nalice = [\"{secret}\"]\n"),
            format!("[clients]\nalice = \"{secret}\"\nalice = \"{secret}\"\n"),
        ] {
            let error = parse(&text).unwrap_err();
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains(secret), "{shown}");
        }
        let hashed = digest_of(secret);
        let tokens = parse(&format!("[clients]\nalice = \"{hashed}\"\n")).unwrap();
        let shown = format!("{tokens:?}");
        assert!(!shown.contains(&hashed[DIGEST_PREFIX.len()..]), "{shown}");
        assert_eq!(
            error::without_quoted(r#"invalid type: string "a\"b", expected a map"#),
            r#"invalid type: string "…", expected a map"#
        );
    }
}
