//! Certificate material of a k3rs server, generated on first start with rcgen and reused
//! afterwards, plus the join token and kubeconfig files:
//!
//! - `<data-dir>/server/tls/`: the server CA and client CA (ECDSA P-256, 10 years), the API
//!   server's serving certificate (1 year, re-issued when its SANs no longer cover the
//!   configured names), and client certificates for the admin and each in-process component
//!   (see [`COMPONENT_CLIENTS`]);
//! - `<data-dir>/server/token` and `node-token`: `K10<sha256 of server-ca.crt>::server:<secret>`;
//! - kubeconfig files (`--write-kubeconfig`) embedding a client certificate;
//! - [`bootstrap`]: the CA and key set every server of one cluster shares, as JSON and
//!   in its token-encrypted form;
//! - [`insecure`]: the one verifier for the few places that must not verify a server.
//!
//! Private keys are written with mode 0600 and every write is atomic (temp file in the same
//! directory, fsync, rename). File names follow k3s.
//!
//! Owns certificate material and kubeconfig files only: it serves nothing, parses no flags,
//! and never touches `store`.

pub mod bootstrap;
mod ca;
pub mod files;
pub mod insecure;
pub(crate) mod inspect;
pub mod kubeconfig;
pub mod live;
pub mod node;
pub mod rotation;
mod sans;
pub(crate) mod server;
pub mod token;

use std::fmt;
use std::path::PathBuf;

pub use ca::CertificateAuthority;
pub use kubeconfig::{Kubeconfig, render_kubeconfig, write_kubeconfig};
pub use node::NodeSigner;
pub use sans::ServingSans;
/// File stems of the server's TLS directory.
pub mod server_stems {
    pub use super::server::{CLIENT_ADMIN, CLIENT_CA, CLIENT_KUBELET, SERVER_CA};
}
pub use server::{
    COMPONENT_CLIENTS, ClientIdentity, ServerPki, ServerPkiOptions, kubelet_identity,
};
pub use token::{ParsedToken, ServerToken, ca_hash, ensure_server_token, parse_token};

/// A certificate and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedCert {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The PKCS#8 private key, PEM. Keep it secret.
    pub key_pem: String,
}

impl fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCert")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Errors of the PKI module.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A filesystem operation failed.
    #[error("{action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// rcgen could not build or sign a certificate or key.
    #[error("cannot generate {what}")]
    Generate {
        what: String,
        #[source]
        source: rcgen::Error,
    },
    /// A file exists but does not hold what it should.
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    /// Only half of a CA is on disk. Regenerating it would invalidate every certificate and
    /// kubeconfig issued so far, so this is left to the operator.
    #[error(
        "{} exists but {} is missing; restore it (or remove both to create a new CA, which \
         invalidates every certificate, kubeconfig and join token issued so far)",
        present.display(),
        missing.display()
    )]
    IncompleteCa { present: PathBuf, missing: PathBuf },
    /// rcgen keeps one value per subject attribute type, which limits the groups (O) a
    /// client certificate can carry.
    #[error("a client certificate can carry at most 2 groups, got {0}")]
    TooManyGroups(usize),
    /// A token string is malformed.
    #[error("invalid token: {0}")]
    InvalidToken(String),
    /// `--token` differs from the token this server was initialised with.
    #[error(
        "the given token does not match the one this server was initialized with (stored in \
         {}); start the server with the original token, or without --token to keep using it",
        path.display()
    )]
    TokenMismatch { path: PathBuf },
    /// A full-form token pins a different CA than this server's.
    #[error("the token's CA hash {given} does not match this server's CA ({actual})")]
    CaHashMismatch { given: String, actual: String },
    /// Serializing a kubeconfig failed.
    #[error("cannot serialize kubeconfig")]
    Kubeconfig(#[source] serde_yaml::Error),
    /// Bootstrap data (from a peer or the store) is not what it must be.
    #[error("invalid bootstrap data: {0}")]
    InvalidBootstrap(String),
    /// The stored bootstrap data does not open with this token (k3s's words).
    #[error("bootstrap data already found and encrypted with different token")]
    BootstrapTokenMismatch,
}

impl PkiError {
    pub(crate) fn io(action: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        PkiError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn generate(what: impl Into<String>, source: rcgen::Error) -> Self {
        PkiError::Generate {
            what: what.into(),
            source,
        }
    }
}
