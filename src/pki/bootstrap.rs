//! The cluster's bootstrap data: the certificate authorities, their keys and the
//! service-account signing key, which every server of one cluster must share. A joining
//! server fetches them from a member (over HTTPS with the CA pinned by the token's hash);
//! the cluster also keeps a copy in its store encrypted with a key derived from the token
//! secret, so a snapshot restored on a fresh machine, or a `--cluster-reset` server, carries
//! its CAs (k3s keeps the same copy under `/bootstrap/<hash of token>`).
//!
//! Bootstrap data that arrives from the network or from the store is untrusted: only the
//! file names of [`BOOTSTRAP_FILES`] are accepted, each bounded in size, so nothing in it
//! can name a path outside the TLS directory.
//!
//! Encryption: PBKDF2-HMAC-SHA256 (100,000 iterations, 16-byte random salt) turns the token
//! secret into an AES-256-GCM key; the stored form is `<hex salt>:<base64 nonce‖ciphertext>`.
//! k3s uses PBKDF2-SHA1 with 4,096 iterations; ours costs a guesser more, and a server
//! derives the key only when it reads or writes the copy.
//!
//! Owns the bootstrap file set and its (de)serialisation and encryption; it reads and writes
//! files under the TLS directory only, and never touches the store or the network.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::PkiError;
use super::files::{self, PRIVATE_MODE, PUBLIC_MODE};

/// One file of the bootstrap set, relative to `<data-dir>/server/tls/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootstrapFile {
    pub name: &'static str,
    pub mode: u32,
    /// A server cannot start without it; optional files are carried when present.
    pub required: bool,
}

/// The files every server of a cluster shares.
pub const BOOTSTRAP_FILES: &[BootstrapFile] = &[
    BootstrapFile {
        name: "server-ca.crt",
        mode: PUBLIC_MODE,
        required: true,
    },
    BootstrapFile {
        name: "server-ca.key",
        mode: PRIVATE_MODE,
        required: true,
    },
    BootstrapFile {
        name: "client-ca.crt",
        mode: PUBLIC_MODE,
        required: true,
    },
    BootstrapFile {
        name: "client-ca.key",
        mode: PRIVATE_MODE,
        required: true,
    },
    BootstrapFile {
        name: "service.key",
        mode: PRIVATE_MODE,
        required: true,
    },
    BootstrapFile {
        name: "etcd/peer-ca.crt",
        mode: PUBLIC_MODE,
        required: false,
    },
    BootstrapFile {
        name: "etcd/peer-ca.key",
        mode: PRIVATE_MODE,
        required: false,
    },
];

/// No certificate or key of ours comes near this; anything bigger is refused unread.
const MAX_FILE_BYTES: usize = 64 * 1024;
const PBKDF2_ITERATIONS: u32 = 100_000;
const SALT_LEN: usize = 16;
/// Prefix of the store keys holding the encrypted copy.
pub const STORAGE_PREFIX: &str = "/bootstrap/";

/// The bootstrap files, by name. Serialised as JSON with base64 contents.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootstrapData {
    pub files: BTreeMap<String, BootstrapEntry>,
}

/// One file's content and its modification time (seconds since the epoch), so that the
/// newer copy wins when a server's files and the cluster's differ.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootstrapEntry {
    pub timestamp: i64,
    #[serde(with = "base64_bytes")]
    pub content: Vec<u8>,
}

impl std::fmt::Debug for BootstrapData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys are secrets: show names and sizes only.
        let mut list = f.debug_map();
        for (name, entry) in &self.files {
            list.entry(name, &format_args!("{} bytes", entry.content.len()));
        }
        list.finish()
    }
}

impl std::fmt::Debug for BootstrapEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes @ {}", self.content.len(), self.timestamp)
    }
}

mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&BASE64.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        BASE64.decode(text).map_err(serde::de::Error::custom)
    }
}

impl BootstrapData {
    /// Reads the bootstrap files of `tls_dir`; a missing required file is an error.
    pub fn collect(tls_dir: &Path) -> Result<Self, PkiError> {
        let mut files = BTreeMap::new();
        for file in BOOTSTRAP_FILES {
            let path = tls_dir.join(file.name);
            let content = match std::fs::read(&path) {
                Ok(content) => content,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !file.required => continue,
                Err(e) => return Err(PkiError::io("reading bootstrap file", &path, e)),
            };
            let timestamp = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            files.insert(file.name.to_string(), BootstrapEntry { timestamp, content });
        }
        let data = BootstrapData { files };
        data.check()?;
        Ok(data)
    }

    /// Checks data that came from elsewhere: known names only, bounded sizes, every
    /// required file present, certificates and keys in PEM.
    pub fn check(&self) -> Result<(), PkiError> {
        for (name, entry) in &self.files {
            if !BOOTSTRAP_FILES.iter().any(|f| f.name == name) {
                return Err(PkiError::InvalidBootstrap(format!("unknown file {name:?}")));
            }
            if entry.content.len() > MAX_FILE_BYTES {
                return Err(PkiError::InvalidBootstrap(format!(
                    "{name} is {} bytes, more than {MAX_FILE_BYTES}",
                    entry.content.len()
                )));
            }
            let pem = std::str::from_utf8(&entry.content).ok();
            if !pem.is_some_and(|text| text.trim_start().starts_with("-----BEGIN ")) {
                return Err(PkiError::InvalidBootstrap(format!("{name} is not PEM")));
            }
        }
        for file in BOOTSTRAP_FILES.iter().filter(|f| f.required) {
            if !self.files.contains_key(file.name) {
                return Err(PkiError::InvalidBootstrap(format!(
                    "{} is missing",
                    file.name
                )));
            }
        }
        Ok(())
    }

    /// Writes every file into `tls_dir` (atomically, with its mode), creating `etcd/`.
    pub fn write(&self, tls_dir: &Path) -> Result<(), PkiError> {
        self.check()?;
        for file in BOOTSTRAP_FILES {
            let Some(entry) = self.files.get(file.name) else {
                continue;
            };
            let path = tls_dir.join(file.name);
            if let Some(parent) = path.parent() {
                files::create_private_dir(parent)?;
            }
            files::write_atomic(&path, &entry.content, file.mode)?;
        }
        Ok(())
    }

    /// The hex SHA-256 of `server-ca.crt`, as the `K10` token carries it.
    pub fn server_ca_hash(&self) -> Option<String> {
        self.files
            .get("server-ca.crt")
            .map(|entry| super::ca_hash(&entry.content))
    }

    pub fn to_json(&self) -> Vec<u8> {
        // Serialising maps of strings and byte strings cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, PkiError> {
        let data: BootstrapData = serde_json::from_slice(bytes)
            .map_err(|e| PkiError::InvalidBootstrap(format!("not bootstrap JSON: {e}")))?;
        data.check()?;
        Ok(data)
    }
}

/// The store key of the copy encrypted with `secret`: the same token always finds it,
/// another token finds nothing (and cannot tell what is there).
pub fn storage_key(secret: &str) -> String {
    let digest = hex::encode(Sha256::digest(secret.as_bytes()));
    format!("{STORAGE_PREFIX}{}", &digest[..12])
}

fn derive_key(secret: &str, salt: &[u8]) -> Result<LessSafeKey, PkiError> {
    let mut key = [0u8; 32];
    let iterations = NonZeroU32::new(PBKDF2_ITERATIONS).unwrap_or(NonZeroU32::MIN);
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        salt,
        secret.as_bytes(),
        &mut key,
    );
    let unbound = UnboundKey::new(&AES_256_GCM, &key)
        .map_err(|_| PkiError::InvalidBootstrap("cannot build the AES key".into()))?;
    Ok(LessSafeKey::new(unbound))
}

/// Encrypts `plaintext` with a key derived from `secret`.
pub fn encrypt(secret: &str, plaintext: &[u8]) -> Result<String, PkiError> {
    let rng = SystemRandom::new();
    let mut salt = [0u8; SALT_LEN];
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill(&mut salt)
        .and_then(|()| rng.fill(&mut nonce))
        .map_err(|_| PkiError::InvalidBootstrap("the system random source failed".into()))?;
    let key = derive_key(secret, &salt)?;
    let mut sealed = plaintext.to_vec();
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::empty(),
        &mut sealed,
    )
    .map_err(|_| PkiError::InvalidBootstrap("encryption failed".into()))?;
    let mut body = nonce.to_vec();
    body.extend_from_slice(&sealed);
    Ok(format!("{}:{}", hex::encode(salt), BASE64.encode(body)))
}

/// Decrypts what [`encrypt`] produced. A different secret, or a damaged value, is
/// [`PkiError::BootstrapTokenMismatch`]: AES-GCM cannot tell the two apart.
pub fn decrypt(secret: &str, stored: &str) -> Result<Vec<u8>, PkiError> {
    let malformed = || PkiError::InvalidBootstrap("the stored bootstrap data is malformed".into());
    let (salt, body) = stored.trim().split_once(':').ok_or_else(malformed)?;
    let salt = hex::decode(salt).map_err(|_| malformed())?;
    let body = BASE64.decode(body).map_err(|_| malformed())?;
    if salt.len() != SALT_LEN || body.len() < NONCE_LEN + AES_256_GCM.tag_len() {
        return Err(malformed());
    }
    let (nonce, sealed) = body.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| malformed())?;
    let key = derive_key(secret, &salt)?;
    let mut in_out = sealed.to_vec();
    let plain = key
        .open_in_place(nonce, Aad::empty(), &mut in_out)
        .map_err(|_| PkiError::BootstrapTokenMismatch)?;
    Ok(plain.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BootstrapData {
        let mut files = BTreeMap::new();
        for file in BOOTSTRAP_FILES.iter().filter(|f| f.required) {
            files.insert(
                file.name.to_string(),
                BootstrapEntry {
                    timestamp: 1_700_000_000,
                    content: format!("-----BEGIN TEST-----\n{}\n-----END TEST-----\n", file.name)
                        .into_bytes(),
                },
            );
        }
        BootstrapData { files }
    }

    #[test]
    fn encrypted_data_round_trips_with_the_same_secret_only() {
        let json = sample().to_json();
        let stored = encrypt("s3cret", &json).expect("encrypt");
        assert!(!stored.contains("BEGIN"), "the plaintext must not show");
        let plain = decrypt("s3cret", &stored).expect("decrypt");
        assert_eq!(BootstrapData::from_json(&plain).expect("parse"), sample());
        let wrong = decrypt("other", &stored).expect_err("another token");
        assert!(matches!(wrong, PkiError::BootstrapTokenMismatch), "{wrong}");
        assert!(wrong.to_string().contains("different token"), "{wrong}");
        // Two encryptions of the same data differ (fresh salt and nonce).
        assert_ne!(stored, encrypt("s3cret", &json).expect("encrypt"));
    }

    #[test]
    fn damaged_ciphertext_is_refused() {
        let stored = encrypt("s3cret", b"{}").expect("encrypt");
        let (salt, body) = stored.split_once(':').expect("two parts");
        let mut bytes = BASE64.decode(body).expect("base64");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let damaged = format!("{salt}:{}", BASE64.encode(bytes));
        assert!(decrypt("s3cret", &damaged).is_err());
        for garbage in ["", "nocolon", "zz:AAAA", "00:AAAA", &format!("{salt}:AAAA")] {
            assert!(decrypt("s3cret", garbage).is_err(), "{garbage:?}");
        }
    }

    #[test]
    fn hostile_bootstrap_data_is_refused() {
        let mut data = sample();
        data.files.insert(
            "../../etc/passwd".into(),
            BootstrapEntry {
                timestamp: 0,
                content: b"-----BEGIN X-----".to_vec(),
            },
        );
        let err = data.check().expect_err("unknown name");
        assert!(err.to_string().contains("unknown file"), "{err}");

        let mut data = sample();
        data.files.remove("server-ca.key");
        assert!(
            data.check()
                .expect_err("missing")
                .to_string()
                .contains("server-ca.key")
        );

        let mut data = sample();
        if let Some(entry) = data.files.get_mut("service.key") {
            entry.content = vec![b'-'; MAX_FILE_BYTES + 1];
        }
        assert!(data.check().is_err());

        let mut data = sample();
        if let Some(entry) = data.files.get_mut("service.key") {
            entry.content = b"not pem".to_vec();
        }
        assert!(data.check().is_err());

        for json in [
            &b"[]"[..],
            b"{\"files\":{\"server-ca.crt\":{\"timestamp\":1,\"content\":\"!!\"}}}",
            b"\xff",
        ] {
            assert!(BootstrapData::from_json(json).is_err());
        }
    }

    #[test]
    fn files_are_collected_and_written_with_their_modes() {
        use std::os::unix::fs::PermissionsExt;
        let source = tempfile::tempdir().expect("tempdir");
        sample().write(source.path()).expect("write");
        let collected = BootstrapData::collect(source.path()).expect("collect");
        assert_eq!(collected.files.len(), sample().files.len());
        let target = tempfile::tempdir().expect("tempdir");
        let mut with_peer = collected.clone();
        with_peer.files.insert(
            "etcd/peer-ca.key".into(),
            BootstrapEntry {
                timestamp: 2,
                content: b"-----BEGIN KEY-----\n".to_vec(),
            },
        );
        with_peer.write(target.path()).expect("write");
        for (name, mode) in [
            ("server-ca.crt", 0o644),
            ("server-ca.key", 0o600),
            ("etcd/peer-ca.key", 0o600),
        ] {
            let meta = std::fs::metadata(target.path().join(name)).expect(name);
            assert_eq!(meta.permissions().mode() & 0o777, mode, "{name}");
        }
        let missing = tempfile::tempdir().expect("tempdir");
        let err = BootstrapData::collect(missing.path()).expect_err("nothing there");
        assert!(err.to_string().contains("server-ca.crt"), "{err}");
    }

    #[test]
    fn storage_key_depends_on_the_secret_only() {
        assert_eq!(storage_key("a"), storage_key("a"));
        assert_ne!(storage_key("a"), storage_key("b"));
        assert!(storage_key("a").starts_with("/bootstrap/"));
        assert_eq!(storage_key("a").len(), "/bootstrap/".len() + 12);
    }
}
