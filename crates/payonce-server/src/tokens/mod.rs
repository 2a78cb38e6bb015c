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
//! A `sha256:` entry's digits are read with the model's one hex codec
//! (`payonce_model::hex`).
//!
//! A request names itself with `Authorization: Bearer TOKEN`. The token is
//! hashed once and its digest compared with every entry's, each in
//! constant time, and all of them every time, so how long the answer takes
//! says nothing about which entry came close.

mod error;
mod exposure;

use std::collections::BTreeMap;
use std::path::Path;

use payonce_model::hex::parse_digest;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};
use toml::Spanned;

use crate::scope::{NAME_LEN_MAX, check_name};

pub use self::error::{Entry, Position, SyntaxProblem, Table, TokensError};
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

/// One table of the file, each name and token with where it was written.
type Written = BTreeMap<Spanned<String>, Spanned<String>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    clients: Written,
    #[serde(default)]
    operators: Written,
}

/// One entry as the file has it.
struct Line {
    entry: Entry,
    name: String,
    token: String,
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
        // Never the tokens, nor their digests, nor the names: a name may
        // be a token written in its place.
        let operators = self
            .entries
            .iter()
            .filter(|(_, who)| matches!(who, Principal::Operator(_)))
            .count();
        f.debug_struct("Tokens")
            .field("clients", &(self.entries.len() - operators))
            .field("operators", &operators)
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
                len_max: TOKENS_FILE_LEN_MAX,
            });
        }
        let text = std::fs::read_to_string(file).map_err(read)?;
        Tokens::parse(&text, file)
    }

    /// Checks the text of a tokens file; `file` names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Tokens, TokensError> {
        let parsed: TokensFile = toml::from_str(text).map_err(|error| TokensError::Syntax {
            file: file.to_owned(),
            at: error.span().map(|span| position(text, span.start)),
            problem: SyntaxProblem::of(error.message()),
        })?;
        let lines = lines(text, parsed);
        let count = lines.len();
        if count == 0 || count > TOKENS_MAX {
            return Err(TokensError::Count {
                file: file.to_owned(),
                count,
                count_max: TOKENS_MAX,
            });
        }
        let mut tokens = Tokens {
            entries: Vec::with_capacity(count),
            clear: 0,
        };
        let mut read: Vec<Entry> = Vec::with_capacity(count);
        for line in lines {
            let (digest, in_clear) = entry_digest(file, &line)?;
            let first = tokens
                .entries
                .iter()
                .zip(&read)
                .find(|((other, who), _)| *other == digest || principal_name(who) == line.name);
            if let Some((_, &first)) = first {
                return Err(TokensError::Repeated {
                    file: file.to_owned(),
                    entry: line.entry,
                    first,
                });
            }
            let principal = match line.entry.table {
                Table::Clients => Principal::Client(line.name),
                Table::Operators => Principal::Operator(line.name),
            };
            tokens.clear += usize::from(in_clear);
            tokens.entries.push((digest, principal));
            read.push(line.entry);
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

    /// Whether `file`, the file these tokens were read from, exposes them:
    /// some are in clear and its mode gives its group or others access. A
    /// file that cannot be examined any more (it was read a moment ago) is
    /// not reported.
    pub fn exposure(&self, file: &Path) -> Option<ExposedTokens> {
        exposure::exposed(file, self.clear)
    }
}

fn principal_name(principal: &Principal) -> &str {
    match principal {
        Principal::Client(name) | Principal::Operator(name) => name,
    }
}

/// The line and column of byte `offset` of `text`.
fn position(text: &str, offset: usize) -> Position {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |at| at + 1);
    Position {
        line: before.matches('\n').count() + 1,
        column: before[line_start..].chars().count() + 1,
    }
}

/// Every entry of `parsed`, in the order of the file.
fn lines(text: &str, parsed: TokensFile) -> Vec<Line> {
    let clients = parsed.clients.into_iter().map(|e| (Table::Clients, e));
    let operators = parsed.operators.into_iter().map(|e| (Table::Operators, e));
    let mut lines: Vec<(usize, Line)> = clients
        .chain(operators)
        .map(|(table, (name, token))| {
            let offset = name.span().start;
            let line = position(text, offset).line;
            let entry = Entry { line, table };
            let (name, token) = (name.into_inner(), token.into_inner());
            (offset, Line { entry, name, token })
        })
        .collect();
    lines.sort_by_key(|(offset, _)| *offset);
    lines.into_iter().map(|(_, line)| line).collect()
}

/// The digest of `line`'s token, and whether it was in clear.
fn entry_digest(file: &Path, line: &Line) -> Result<(TokenDigest, bool), TokensError> {
    let entry = line.entry;
    check_name(&line.name).map_err(|_| TokensError::Name {
        file: file.to_owned(),
        entry,
        len_max: NAME_LEN_MAX,
    })?;
    let token = line.token.as_str();
    if let Some(hex) = token.strip_prefix(DIGEST_PREFIX) {
        let digest = parse_digest(hex).map_err(|_| TokensError::BadDigest {
            file: file.to_owned(),
            entry,
            prefix: DIGEST_PREFIX,
        })?;
        return Ok((digest, false));
    }
    let printable = token.bytes().all(|b| b.is_ascii_graphic());
    if !(TOKEN_LEN_MIN..=TOKEN_LEN_MAX).contains(&token.len()) || !printable {
        return Err(TokensError::BadToken {
            file: file.to_owned(),
            entry,
            len_min: TOKEN_LEN_MIN,
            len_max: TOKEN_LEN_MAX,
        });
    }
    Ok((Sha256::digest(token.as_bytes()).into(), true))
}

#[cfg(test)]
mod tests {
    use payonce_model::hex::DigestHex;

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
            (
                "[clients]\nalice = \"short\"\n",
                "the token of the entry on line 2 ([clients])",
            ),
            (
                "[clients]\n\"a:b\" = \"alice-token-0123456\"\n",
                "the name of the entry on line 2",
            ),
            (
                "[clients]\nalice = \"alice-token-0123456\"\n[operators]\nbob = \"alice-token-0123456\"\n",
                "the entry on line 4 ([operators]) repeats the name or the token of the entry on \
                 line 2 ([clients])",
            ),
            (
                "[clients]\nalice = \"alice-token-0123456\"\n[operators]\nalice = \"other-token-0123456\"\n",
                "repeats",
            ),
            (
                "[admins]\nalice = \"alice-token-0123456\"\n",
                "line 1, column 2: a key other than [clients] and [operators]",
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
        let digest: TokenDigest = Sha256::digest(token.as_bytes()).into();
        format!("{DIGEST_PREFIX}{}", DigestHex(&digest))
    }

    // Guards against a digest entry that does not authenticate its token,
    // a malformed one taken for a clear token or for some other digest, and
    // two entries that name one token, once in clear and once hashed.
    #[test]
    fn digest_entries_authenticate_and_malformed_ones_are_refused_by_place() {
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
            let text = format!("[clients]\n\n  alice = \"{bad}\"\n");
            let error = parse(&text).unwrap_err();
            let place = Entry {
                line: 3,
                table: Table::Clients,
            };
            assert!(
                matches!(&error, TokensError::BadDigest { entry, .. } if *entry == place),
                "{bad}: {error:?}"
            );
            let message = error.to_string();
            assert!(message.contains("line 3") && message.contains("64 lowercase hex"));
        }
        let twice = format!(
            "[clients]\nalice = \"{alice}\"\n[operators]\nfrank = \"{}\"\n",
            digest_of(alice)
        );
        assert!(matches!(
            parse(&twice).unwrap_err(),
            TokensError::Repeated { entry, first, .. } if entry.line == 4 && first.line == 2
        ));
    }

    // Guards against a refusal or a debug print that shows a token: the
    // TOML parser quotes the value or key it stumbled on (a number in
    // backticks, a string in quotes), an entry may be swapped (the token
    // where the name belongs), and a digest is as good as a password to
    // anyone who can try guesses offline.
    #[test]
    fn no_refusal_and_no_debug_print_shows_a_token() {
        let secret = "secret-token-0123456789";
        let number = "4242424242424242";
        let hex_name = &"a1b2c3d4".repeat(8);
        for (text, shown_secret) in [
            (format!("clients = \"{secret}\"\n"), secret),
            (format!("[clients]\nalice = \"{secret} x\"\n"), secret),
            (format!("[clients]\nalice = [\"{secret}\"]\n"), secret),
            (
                format!("[clients]\nalice = \"{secret}\"\nalice = \"{secret}\"\n"),
                secret,
            ),
            (format!("[clients]\nalice = {number}\n"), number),
            (format!("[clients]\nalice = {number}.5\n"), number),
            (format!("{secret} = \"x\"\n"), secret),
            (format!("[clients]\n{secret} = \"alice\"\n"), secret),
            (
                format!("[clients]\n{hex_name} = \"{secret}\"\n"),
                &hex_name[..32],
            ),
            (
                format!(
                    "[clients]\n\"{secret}\" = \"{secret}-2\"\n[operators]\n{secret} = \"{secret}-3\"\n"
                ),
                secret,
            ),
        ] {
            let error = parse(&text).unwrap_err();
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains(shown_secret), "{text:?}: {shown}");
        }
        let hashed = digest_of(secret);
        let tokens = parse(&format!("[clients]\nalice = \"{hashed}\"\n")).unwrap();
        let shown = format!("{tokens:?}");
        assert!(!shown.contains(&hashed[DIGEST_PREFIX.len()..]), "{shown}");
        let swapped = parse(&format!("[clients]\n{secret} = \"alice-token-0123456\"\n")).unwrap();
        let shown = format!("{swapped:?}");
        assert!(!shown.contains(secret), "{shown}");
    }

    // Guards against the exposure warning and the file's syntax naming two
    // different prefixes.
    #[test]
    fn the_exposure_warning_names_the_digest_prefix() {
        let exposed = ExposedTokens {
            file: "tokens.toml".into(),
            mode: 0o644,
            clear: 1,
        };
        assert!(exposed.to_string().contains(DIGEST_PREFIX));
    }
}
