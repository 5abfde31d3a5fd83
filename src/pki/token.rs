//! The join tokens: the server token `K10<sha256 hex of server-ca.crt>::server:<secret>`,
//! written to `<data-dir>/server/token` and (as k3s does) `<data-dir>/server/node-token`, and
//! the optional agent token `K10<hash>::node:<secret>` in `<data-dir>/server/agent-token`.
//!
//! The CA hash lets a joining node pin the server CA before trusting anything it serves; the
//! secret authenticates the node. The secret is `--token` if given, otherwise 32 random hex
//! characters generated on first start and reused afterwards.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::PkiError;
use super::files::{self, PRIVATE_MODE};

/// Prefix of the full token format.
pub const TOKEN_PREFIX: &str = "K10";
/// The user of server tokens.
pub const SERVER_USER: &str = "server";
/// File name of the token under `<data-dir>/server/`.
pub const TOKEN_FILE: &str = "token";
/// File name of the token copy for agents under `<data-dir>/server/`.
pub const NODE_TOKEN_FILE: &str = "node-token";
/// File name of the agent token (`--agent-token`) under `<data-dir>/server/`.
pub const AGENT_TOKEN_FILE: &str = "agent-token";
/// The user of agent tokens.
pub const NODE_USER: &str = "node";

/// A token split into its parts. `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ParsedToken {
    /// The hex SHA-256 of the CA bundle, present in the full `K10…` form only.
    pub ca_hash: Option<String>,
    /// The user part (`server` for bare secrets; empty for a `K10<hash>::<id>.<secret>`
    /// bootstrap token, which is sent as a bearer token).
    pub username: String,
    /// The secret.
    pub secret: String,
}

impl fmt::Debug for ParsedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParsedToken")
            .field("ca_hash", &self.ca_hash)
            .field("username", &self.username)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Parses `K10<ca hash>::<user>:<secret>` or a bare secret (user `server`, no CA hash).
pub fn parse_token(token: &str) -> Result<ParsedToken, PkiError> {
    let token = token.trim();
    if token.is_empty() {
        return Err(PkiError::InvalidToken("empty".to_string()));
    }
    let full = token
        .strip_prefix(TOKEN_PREFIX)
        .and_then(|rest| rest.split_once("::"));
    let parsed = match full {
        None => ParsedToken {
            ca_hash: None,
            username: SERVER_USER.to_string(),
            secret: token.to_string(),
        },
        Some((hash, creds)) => {
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(PkiError::InvalidToken(
                    "the CA hash after K10 must be 64 hex characters (SHA-256)".to_string(),
                ));
            }
            // `K10<hash>::<id>.<secret>`: a bearer (bootstrap) token, no user.
            let (user, secret) = match creds.split_once(':') {
                Some(parts) => parts,
                None if is_bootstrap_token(creds) => ("", creds),
                None => {
                    return Err(PkiError::InvalidToken(
                        "expected K10<ca hash>::<user>:<secret> or K10<ca hash>::<id>.<secret>"
                            .to_string(),
                    ));
                }
            };
            if (user.is_empty() && !is_bootstrap_token(secret)) || secret.is_empty() {
                return Err(PkiError::InvalidToken(
                    "user and secret must not be empty".to_string(),
                ));
            }
            ParsedToken {
                ca_hash: Some(hash.to_ascii_lowercase()),
                username: user.to_string(),
                secret: secret.to_string(),
            }
        }
    };
    if parsed.secret.chars().any(char::is_whitespace) {
        return Err(PkiError::InvalidToken(
            "the secret must not contain whitespace".to_string(),
        ));
    }
    Ok(parsed)
}

/// Whether `token` has kube's bootstrap token form `[a-z0-9]{6}.[a-z0-9]{16}`.
pub fn is_bootstrap_token(token: &str) -> bool {
    let ok = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    token
        .split_once('.')
        .is_some_and(|(id, secret)| ok(id, 6) && ok(secret, 16))
}

/// The hex SHA-256 of the CA certificate file's bytes, as it appears in tokens.
pub fn ca_hash(ca_cert_file: &[u8]) -> String {
    hex::encode(Sha256::digest(ca_cert_file))
}

/// The full token for `secret`.
pub fn format_token(ca_hash: &str, username: &str, secret: &str) -> String {
    format!("{TOKEN_PREFIX}{ca_hash}::{username}:{secret}")
}

/// The server's join token and where it was written. `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerToken {
    /// The full token, `K10…::server:<secret>`.
    pub token: String,
    /// `<data-dir>/server/token`.
    pub token_path: PathBuf,
    /// `<data-dir>/server/node-token`.
    pub node_token_path: PathBuf,
}

impl fmt::Debug for ServerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerToken")
            .field("token", &"<redacted>")
            .field("token_path", &self.token_path)
            .field("node_token_path", &self.node_token_path)
            .finish()
    }
}

/// Creates or refreshes `<server_dir>/token` and `node-token` (mode 0600) for the CA whose
/// certificate file is `ca_cert_path`.
///
/// The secret is `requested` (a bare secret or a full token for this CA), else the one
/// already stored, else a new random one. A `requested` secret that differs from the stored
/// one is an error, as in k3s: the cluster was initialised with the stored one.
pub fn ensure_server_token(
    server_dir: &Path,
    ca_cert_path: &Path,
    requested: Option<&str>,
) -> Result<ServerToken, PkiError> {
    let ca_file =
        std::fs::read(ca_cert_path).map_err(|e| PkiError::io("reading", ca_cert_path, e))?;
    let hash = ca_hash(&ca_file);
    let token_path = server_dir.join(TOKEN_FILE);
    let node_token_path = server_dir.join(NODE_TOKEN_FILE);

    let stored = match files::read_optional(&token_path)? {
        None => None,
        Some(text) => Some(parse_token(&text).map_err(|e| PkiError::Invalid {
            path: token_path.clone(),
            reason: e.to_string(),
        })?),
    };
    let requested = requested
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(parse_token)
        .transpose()?;
    if let Some(req) = &requested {
        if let Some(given) = &req.ca_hash
            && *given != hash
        {
            return Err(PkiError::CaHashMismatch {
                given: given.clone(),
                actual: hash,
            });
        }
        if req.username != SERVER_USER {
            return Err(PkiError::InvalidToken(format!(
                "expected a server token, this one is for user {:?}",
                req.username
            )));
        }
    }
    let secret = match (requested, stored) {
        (Some(req), Some(stored)) if req.secret != stored.secret => {
            return Err(PkiError::TokenMismatch { path: token_path });
        }
        (Some(req), _) => req.secret,
        (None, Some(stored)) => stored.secret,
        (None, None) => random_secret()?,
    };
    let token = format_token(&hash, SERVER_USER, &secret);
    let line = format!("{token}\n");
    files::write_atomic(&token_path, line.as_bytes(), PRIVATE_MODE)?;
    files::write_atomic(&node_token_path, line.as_bytes(), PRIVATE_MODE)?;
    Ok(ServerToken {
        token,
        token_path,
        node_token_path,
    })
}

/// After `k3rs token rotate`: writes `<server_dir>/token` and `node-token` with the new
/// secret and the CA hash of the current token file.
pub fn rewrite_server_token(server_dir: &Path, secret: &str) -> Result<String, PkiError> {
    let token_path = server_dir.join(TOKEN_FILE);
    let current = files::read_optional(&token_path)?.ok_or_else(|| PkiError::Invalid {
        path: token_path.clone(),
        reason: "the token file is missing".to_string(),
    })?;
    let hash = parse_token(&current)
        .map_err(|e| PkiError::Invalid {
            path: token_path.clone(),
            reason: e.to_string(),
        })?
        .ca_hash
        .ok_or_else(|| PkiError::Invalid {
            path: token_path.clone(),
            reason: "the token file has no K10<CA hash> part".to_string(),
        })?;
    let token = format_token(&hash, SERVER_USER, secret);
    let line = format!("{token}\n");
    files::write_atomic(&token_path, line.as_bytes(), PRIVATE_MODE)?;
    files::write_atomic(
        &server_dir.join(NODE_TOKEN_FILE),
        line.as_bytes(),
        PRIVATE_MODE,
    )?;
    Ok(token)
}

/// `--agent-token`: checks it (a bare secret or `K10<this CA's hash>::node:<secret>`, not
/// the server token's secret) and writes the full form to `<server_dir>/agent-token` (0600),
/// as k3s does. Returns the secret.
pub fn ensure_agent_token(
    server_dir: &Path,
    ca_cert_path: &Path,
    requested: &str,
    server_secret: &str,
) -> Result<String, PkiError> {
    let ca_file =
        std::fs::read(ca_cert_path).map_err(|e| PkiError::io("reading", ca_cert_path, e))?;
    let hash = ca_hash(&ca_file);
    let parsed = parse_token(requested)?;
    if let Some(given) = &parsed.ca_hash {
        if *given != hash {
            return Err(PkiError::CaHashMismatch {
                given: given.clone(),
                actual: hash,
            });
        }
        if parsed.username != NODE_USER {
            return Err(PkiError::InvalidToken(format!(
                "--agent-token: expected K10<hash>::node:<secret>, this one is for user {:?}",
                parsed.username
            )));
        }
    }
    if parsed.secret == server_secret {
        return Err(PkiError::InvalidToken(
            "--agent-token must differ from the server token (an agent token joins agents only)"
                .to_string(),
        ));
    }
    let line = format!("{}\n", format_token(&hash, NODE_USER, &parsed.secret));
    files::write_atomic(
        &server_dir.join(AGENT_TOKEN_FILE),
        line.as_bytes(),
        PRIVATE_MODE,
    )?;
    Ok(parsed.secret)
}

/// 32 random hex characters (16 bytes from the kernel's CSPRNG), like k3s's generated tokens.
pub fn random_secret() -> Result<String, PkiError> {
    let path = Path::new("/dev/urandom");
    let mut bytes = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| PkiError::io("reading", path, e))?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const HASH: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("server-ca.crt");
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        (dir, ca)
    }

    #[test]
    fn parses_full_and_bare_tokens() {
        let full = parse_token(&format!("K10{HASH}::server:s3cret")).expect("full");
        assert_eq!(full.ca_hash.as_deref(), Some(HASH));
        assert_eq!(full.username, "server");
        assert_eq!(full.secret, "s3cret");
        let node = parse_token(&format!("K10{HASH}::node:a:b")).expect("colon in secret");
        assert_eq!(
            (node.username.as_str(), node.secret.as_str()),
            ("node", "a:b")
        );
        let bare = parse_token(" abcdef.0123456789abcdef\n").expect("bare");
        assert_eq!(bare.ca_hash, None);
        assert_eq!(bare.username, "server");
        assert_eq!(bare.secret, "abcdef.0123456789abcdef");
        let bare = parse_token("K10abc").expect("K10 without :: is a bare secret");
        assert_eq!(bare.secret, "K10abc");
        assert!(!format!("{full:?}").contains("s3cret"));

        for bad in [
            "",
            "   ",
            "K10abcd::server:x",
            &format!("K10{HASH}::server"),
            &format!("K10{HASH}::server:"),
            &format!("K10{HASH}:::x"),
            "two words",
        ] {
            assert!(parse_token(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn generates_and_reuses_the_secret() {
        let (dir, ca) = setup();
        let t = ensure_server_token(dir.path(), &ca, None).expect("generate");
        let expected_hash = hex::encode(Sha256::digest(std::fs::read(&ca).expect("read")));
        let parsed = parse_token(&t.token).expect("parses");
        assert_eq!(parsed.ca_hash.as_deref(), Some(expected_hash.as_str()));
        assert_eq!(parsed.username, "server");
        assert_eq!(parsed.secret.len(), 32);
        assert!(parsed.secret.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(
            t.token,
            format!("K10{expected_hash}::server:{}", parsed.secret)
        );

        let file = std::fs::read_to_string(&t.token_path).expect("read");
        assert_eq!(file, format!("{}\n", t.token));
        assert_eq!(
            std::fs::read_to_string(&t.node_token_path).expect("read"),
            file
        );
        for p in [&t.token_path, &t.node_token_path] {
            let mode = std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }

        let again = ensure_server_token(dir.path(), &ca, None).expect("reuse");
        assert_eq!(again.token, t.token);
        let same = ensure_server_token(dir.path(), &ca, Some(&parsed.secret)).expect("same");
        assert_eq!(same.token, t.token);
        let full = ensure_server_token(dir.path(), &ca, Some(&t.token)).expect("full form");
        assert_eq!(full.token, t.token);
    }

    #[test]
    fn given_token_is_used_and_then_enforced() {
        let (dir, ca) = setup();
        let t = ensure_server_token(dir.path(), &ca, Some("my-secret")).expect("given");
        assert!(t.token.ends_with("::server:my-secret"), "{:?}", t.token);
        let e = ensure_server_token(dir.path(), &ca, Some("other")).expect_err("mismatch");
        assert!(matches!(e, PkiError::TokenMismatch { .. }), "{e}");
        assert!(e.to_string().contains("does not match"), "{e}");
        let e = ensure_server_token(
            dir.path(),
            &ca,
            Some(&format!("K10{HASH}::server:my-secret")),
        )
        .expect_err("other CA");
        assert!(matches!(e, PkiError::CaHashMismatch { .. }), "{e}");
        let hash = ca_hash(&std::fs::read(&ca).expect("read"));
        let e = ensure_server_token(dir.path(), &ca, Some(&format!("K10{hash}::node:my-secret")))
            .expect_err("agent token");
        assert!(matches!(e, PkiError::InvalidToken(_)), "{e}");
    }

    #[test]
    fn bootstrap_tokens_in_the_full_form() {
        let t = parse_token(&format!("K10{HASH}::abcdef.0123456789abcdef")).expect("bootstrap");
        assert_eq!(t.username, "", "a bearer token has no user");
        assert_eq!(t.secret, "abcdef.0123456789abcdef");
        assert!(parse_token(&format!("K10{HASH}::notabootstraptoken")).is_err());
        assert!(is_bootstrap_token("abcdef.0123456789abcdef"));
        assert!(!is_bootstrap_token("abcdef.0123456789ABCDEF"));
        assert!(!is_bootstrap_token("abcdefg.0123456789abcdef"));
    }

    #[test]
    fn agent_token_file_and_rotation() {
        let (dir, ca) = setup();
        let server = ensure_server_token(dir.path(), &ca, Some("server-secret")).expect("server");
        let hash = ca_hash(&std::fs::read(&ca).expect("read"));
        let secret = ensure_agent_token(dir.path(), &ca, "agent-secret", "server-secret")
            .expect("agent token");
        assert_eq!(secret, "agent-secret");
        let path = dir.path().join(AGENT_TOKEN_FILE);
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            format!("K10{hash}::node:agent-secret\n")
        );
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let full = format!("K10{hash}::node:agent-secret");
        assert_eq!(
            ensure_agent_token(dir.path(), &ca, &full, "server-secret").expect("full"),
            "agent-secret"
        );
        for bad in [
            "server-secret".to_string(),
            format!("K10{hash}::server:agent-secret"),
            format!("K10{HASH}::node:agent-secret"),
        ] {
            assert!(
                ensure_agent_token(dir.path(), &ca, &bad, "server-secret").is_err(),
                "{bad}"
            );
        }

        let rotated = rewrite_server_token(dir.path(), "n3w").expect("rotate");
        assert_eq!(rotated, format!("K10{hash}::server:n3w"));
        for file in [TOKEN_FILE, NODE_TOKEN_FILE] {
            assert_eq!(
                std::fs::read_to_string(dir.path().join(file)).expect("read"),
                format!("{rotated}\n")
            );
        }
        assert_ne!(server.token, rotated);
        // The next start reads the rotated token.
        let again = ensure_server_token(dir.path(), &ca, None).expect("reuse");
        assert_eq!(again.token, rotated);
    }

    #[test]
    fn random_secrets_differ() {
        let a = random_secret().expect("random");
        let b = random_secret().expect("random");
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
