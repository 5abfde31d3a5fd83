//! Encryption at rest: kube-apiserver's `EncryptionConfiguration`
//! (`apiserver.config.k8s.io/v1`) and the value envelope it writes to storage.
//!
//! A configuration lists resources (`secrets`, `deployments.apps`, `*.apps`, `*.*`) and,
//! for each, providers in order. A write of a listed resource is transformed by the
//! first provider; a read tries the providers whose prefix the stored value carries.
//! Providers, each with kube's byte layout so a store moved between kube and k3rs reads:
//! - `aesgcm`: `k8s:enc:aesgcm:v1:<key name>:`, a 12-byte random nonce, then the AES-GCM
//!   ciphertext and tag, the storage key as additional data;
//! - `aescbc`: `k8s:enc:aescbc:v1:<key name>:`, a 16-byte random IV, then the AES-CBC
//!   ciphertext of the value with PKCS#7 padding (no authentication: a wrong key is
//!   noticed only by bad padding, as in kube);
//! - `secretbox`: `k8s:enc:secretbox:v1:<key name>:`, a 24-byte random nonce, then NaCl's
//!   `crypto_secretbox` (XSalsa20-Poly1305: the 16-byte tag, then the ciphertext);
//! - `identity`: no prefix; refuses to read a value that carries `k8s:enc:`.
//!
//! `kms` is refused when the file is loaded (k3rs has no KMS plugin client). Keys live
//! only in memory and in the configuration file.
//!
//! `--secrets-encryption` (k3s) writes `<data-dir>/server/cred/encryption-config.json`
//! with one random 32-byte `aesgcm` key and `identity` for `secrets`, mode 0600, when it
//! is missing ([`ensure_default_config`]). Pure but for that file and the random source.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use crypto_secretbox::XSalsa20Poly1305;
use ring::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

/// Every encrypted value starts with this.
pub const ENVELOPE_PREFIX: &[u8] = b"k8s:enc:";
const NONCE_LEN: usize = 12;
/// The key name k3rs gives the key it generates.
pub const DEFAULT_KEY_NAME: &str = "aesgcmkey";

/// Why a stored value could not be read (worded as kube's transformers word it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecryptError {
    #[error("no matching prefix found")]
    NoMatchingPrefix,
    #[error("identity transformer tried to read encrypted data")]
    IdentityReadEncrypted,
    #[error("the stored data was shorter than the required size")]
    TooShort,
    #[error("cipher: message authentication failed")]
    Authentication,
    #[error("the stored data is not a multiple of the block size")]
    NotBlockMultiple,
    #[error("invalid PKCS7 data (empty or not padded)")]
    InvalidPadding,
}

/// The file format (only the fields k3rs reads; unknown fields are refused).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EncryptionConfiguration {
    pub kind: String,
    pub api_version: String,
    #[serde(default)]
    pub resources: Vec<ResourceConfiguration>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceConfiguration {
    pub resources: Vec<String>,
    pub providers: Vec<ProviderConfiguration>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderConfiguration {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aesgcm: Option<KeysConfiguration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aescbc: Option<KeysConfiguration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secretbox: Option<KeysConfiguration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kms: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeysConfiguration {
    pub keys: Vec<Key>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Key {
    pub name: String,
    pub secret: String,
}

/// One provider, ready to use.
enum Provider {
    AesGcm {
        prefix: Vec<u8>,
        key: Box<LessSafeKey>,
    },
    AesCbc {
        prefix: Vec<u8>,
        key: Box<CbcKey>,
    },
    SecretBox {
        prefix: Vec<u8>,
        key: Box<XSalsa20Poly1305>,
    },
    Identity,
}

/// An AES key of one of the three sizes kube accepts for `aescbc`.
enum CbcKey {
    Aes128(aes::Aes128),
    Aes192(aes::Aes192),
    Aes256(aes::Aes256),
}

const CBC_BLOCK: usize = 16;
const SECRETBOX_NONCE: usize = 24;
const SECRETBOX_TAG: usize = 16;

impl CbcKey {
    fn new(secret: &[u8]) -> Option<CbcKey> {
        use aes::cipher::KeyInit as _;
        Some(match secret.len() {
            16 => CbcKey::Aes128(aes::Aes128::new_from_slice(secret).ok()?),
            24 => CbcKey::Aes192(aes::Aes192::new_from_slice(secret).ok()?),
            32 => CbcKey::Aes256(aes::Aes256::new_from_slice(secret).ok()?),
            _ => return None,
        })
    }

    /// `iv` followed by the CBC ciphertext of `plain` padded with PKCS#7.
    fn seal(&self, iv: [u8; CBC_BLOCK], plain: &[u8]) -> Vec<u8> {
        use aes::cipher::{BlockEncryptMut as _, InnerIvInit as _, block_padding::Pkcs7};
        let iv = iv.into();
        let sealed =
            match self {
                CbcKey::Aes128(k) => cbc::Encryptor::inner_iv_init(k.clone(), &iv)
                    .encrypt_padded_vec_mut::<Pkcs7>(plain),
                CbcKey::Aes192(k) => cbc::Encryptor::inner_iv_init(k.clone(), &iv)
                    .encrypt_padded_vec_mut::<Pkcs7>(plain),
                CbcKey::Aes256(k) => cbc::Encryptor::inner_iv_init(k.clone(), &iv)
                    .encrypt_padded_vec_mut::<Pkcs7>(plain),
            };
        let mut out = Vec::with_capacity(CBC_BLOCK + sealed.len());
        out.extend_from_slice(iv.as_slice());
        out.extend_from_slice(&sealed);
        out
    }

    /// The plaintext of `iv || ciphertext`.
    fn open(&self, data: &[u8]) -> Result<Vec<u8>, DecryptError> {
        use aes::cipher::{BlockDecryptMut as _, InnerIvInit as _, block_padding::Pkcs7};
        if data.len() < CBC_BLOCK {
            return Err(DecryptError::TooShort);
        }
        let (iv, sealed) = data.split_at(CBC_BLOCK);
        if sealed.is_empty() || sealed.len() % CBC_BLOCK != 0 {
            return Err(DecryptError::NotBlockMultiple);
        }
        let iv = aes::cipher::generic_array::GenericArray::from_slice(iv);
        let plain =
            match self {
                CbcKey::Aes128(k) => cbc::Decryptor::inner_iv_init(k.clone(), iv)
                    .decrypt_padded_vec_mut::<Pkcs7>(sealed),
                CbcKey::Aes192(k) => cbc::Decryptor::inner_iv_init(k.clone(), iv)
                    .decrypt_padded_vec_mut::<Pkcs7>(sealed),
                CbcKey::Aes256(k) => cbc::Decryptor::inner_iv_init(k.clone(), iv)
                    .decrypt_padded_vec_mut::<Pkcs7>(sealed),
            };
        plain.map_err(|_| DecryptError::InvalidPadding)
    }
}

impl Provider {
    fn prefix(&self) -> &[u8] {
        match self {
            Provider::AesGcm { prefix, .. }
            | Provider::AesCbc { prefix, .. }
            | Provider::SecretBox { prefix, .. } => prefix,
            Provider::Identity => b"",
        }
    }
}

/// Which keys a resource rule covers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Selector {
    /// `secrets` (core) or `deployments.apps`: exactly `/registry/<...>/`.
    Exact(String),
    /// `*.apps`: every resource of a group.
    Group(String),
    /// `*.*`: everything.
    All,
}

impl Selector {
    fn parse(resource: &str) -> Result<Selector, String> {
        let resource = resource.trim().to_ascii_lowercase();
        if resource == "*.*" {
            return Ok(Selector::All);
        }
        if resource == "*." || resource == "*" {
            return Err(format!(
                "resource {resource:?}: k3rs cannot tell core resources apart from groups by key; \
                 name the core resources (e.g. secrets) or use *.*"
            ));
        }
        if let Some(group) = resource.strip_prefix("*.") {
            return Ok(Selector::Group(format!("/registry/{group}/")));
        }
        if resource.is_empty() || resource.contains('*') || resource.contains('/') {
            return Err(format!("resource {resource:?} is not a resource name"));
        }
        Ok(Selector::Exact(match resource.split_once('.') {
            None => format!("/registry/{resource}/"),
            Some((plural, group)) => format!("/registry/{group}/{plural}/"),
        }))
    }

    fn matches(&self, key: &[u8]) -> bool {
        match self {
            Selector::Exact(prefix) | Selector::Group(prefix) => key.starts_with(prefix.as_bytes()),
            Selector::All => key.starts_with(b"/registry/"),
        }
    }
}

/// A loaded configuration: transforms values on their way to and from the store.
pub struct Transformer {
    rules: Vec<(Vec<Selector>, Vec<Provider>)>,
    /// The configuration as loaded (for `secrets-encrypt status`).
    pub config: EncryptionConfiguration,
    /// The file it was loaded from ([`Transformer::load`]), which `secrets-encrypt`
    /// rewrites and reloads.
    pub source: Option<PathBuf>,
    /// [`config_hash`] of the text it was parsed from (empty when built from a value).
    pub hash: String,
    random: SystemRandom,
}

impl std::fmt::Debug for Transformer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transformer")
            .field("rules", &self.rules.len())
            .finish()
    }
}

impl Transformer {
    /// Parses and checks a configuration file's text (JSON or YAML).
    pub fn parse(text: &str) -> Result<Transformer, String> {
        let config: EncryptionConfiguration = serde_yaml::from_str(text)
            .map_err(|e| format!("not an EncryptionConfiguration: {e}"))?;
        let mut transformer = Transformer::new(config)?;
        transformer.hash = config_hash(text.as_bytes());
        Ok(transformer)
    }

    /// Reads and parses the configuration file at `path`.
    pub fn load(path: &Path) -> Result<Transformer, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut transformer =
            Transformer::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        transformer.source = Some(path.to_path_buf());
        Ok(transformer)
    }

    /// Checks a configuration and prepares its keys.
    pub fn new(config: EncryptionConfiguration) -> Result<Transformer, String> {
        if config.kind != "EncryptionConfiguration" {
            return Err(format!(
                "kind must be EncryptionConfiguration, not {:?}",
                config.kind
            ));
        }
        if config.api_version != "apiserver.config.k8s.io/v1" {
            return Err(format!(
                "apiVersion must be apiserver.config.k8s.io/v1, not {:?}",
                config.api_version
            ));
        }
        let mut rules = Vec::new();
        for (i, rule) in config.resources.iter().enumerate() {
            let at = format!("resources[{i}]");
            if rule.resources.is_empty() {
                return Err(format!("{at}.resources: Required value"));
            }
            if rule.providers.is_empty() {
                return Err(format!("{at}.providers: Required value"));
            }
            let selectors = rule
                .resources
                .iter()
                .map(|r| Selector::parse(r))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{at}: {e}"))?;
            let mut providers = Vec::new();
            for (j, p) in rule.providers.iter().enumerate() {
                let at = format!("{at}.providers[{j}]");
                let set = [
                    p.aesgcm.is_some(),
                    p.aescbc.is_some(),
                    p.secretbox.is_some(),
                    p.kms.is_some(),
                    p.identity.is_some(),
                ];
                if set.iter().filter(|s| **s).count() != 1 {
                    return Err(format!("{at}: exactly one provider must be set"));
                }
                if p.kms.is_some() {
                    return Err(format!(
                        "{at}: k3rs supports the aesgcm, aescbc, secretbox and identity providers, not kms"
                    ));
                }
                let keyed = [
                    (
                        "aesgcm",
                        &p.aesgcm,
                        aesgcm as fn(&Key) -> Result<Provider, String>,
                    ),
                    ("aescbc", &p.aescbc, aescbc),
                    ("secretbox", &p.secretbox, secretbox),
                ];
                let Some((kind, keys, make)) = keyed
                    .into_iter()
                    .find_map(|(kind, keys, make)| keys.as_ref().map(|k| (kind, k, make)))
                else {
                    providers.push(Provider::Identity);
                    continue;
                };
                if keys.keys.is_empty() {
                    return Err(format!("{at}.{kind}.keys: Required value"));
                }
                for (k, key) in keys.keys.iter().enumerate() {
                    providers.push(make(key).map_err(|e| format!("{at}.{kind}.keys[{k}]: {e}"))?);
                }
            }
            rules.push((selectors, providers));
        }
        Ok(Transformer {
            rules,
            config,
            source: None,
            hash: String::new(),
            random: SystemRandom::new(),
        })
    }

    fn providers_for(&self, key: &[u8]) -> Option<&[Provider]> {
        self.rules
            .iter()
            .find(|(selectors, _)| selectors.iter().any(|s| s.matches(key)))
            .map(|(_, providers)| providers.as_slice())
    }

    /// The index (in `config.resources`) of the rule that covers `key`.
    pub fn rule_index(&self, key: &[u8]) -> Option<usize> {
        self.rules
            .iter()
            .position(|(selectors, _)| selectors.iter().any(|s| s.matches(key)))
    }

    /// The prefix a value written now under `key` carries (empty: stored in plain).
    pub fn write_prefix(&self, key: &[u8]) -> Vec<u8> {
        self.providers_for(key)
            .and_then(|p| p.first())
            .map(|p| p.prefix().to_vec())
            .unwrap_or_default()
    }

    /// Whether values under `key` are transformed at all.
    pub fn covers(&self, key: &[u8]) -> bool {
        self.providers_for(key).is_some()
    }

    /// The value to store for `key`: encrypted by the resource's first provider.
    pub fn encrypt(&self, key: &[u8], value: Vec<u8>) -> Result<Vec<u8>, String> {
        match self.providers_for(key).and_then(|p| p.first()) {
            None | Some(Provider::Identity) => Ok(value),
            Some(Provider::AesGcm {
                prefix,
                key: cipher,
            }) => {
                let mut nonce = [0u8; NONCE_LEN];
                self.random
                    .fill(&mut nonce)
                    .map_err(|_| "the system's random source failed".to_string())?;
                let mut sealed = value;
                cipher
                    .seal_in_place_append_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(key),
                        &mut sealed,
                    )
                    .map_err(|_| "AES-GCM encryption failed".to_string())?;
                let mut out = Vec::with_capacity(prefix.len() + NONCE_LEN + sealed.len());
                out.extend_from_slice(prefix);
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
                Ok(out)
            }
            Some(Provider::AesCbc { prefix, key }) => {
                let mut iv = [0u8; CBC_BLOCK];
                self.random
                    .fill(&mut iv)
                    .map_err(|_| "the system's random source failed".to_string())?;
                let mut out = prefix.clone();
                out.extend_from_slice(&key.seal(iv, &value));
                Ok(out)
            }
            Some(Provider::SecretBox { prefix, key }) => {
                let mut nonce = [0u8; SECRETBOX_NONCE];
                self.random
                    .fill(&mut nonce)
                    .map_err(|_| "the system's random source failed".to_string())?;
                let mut out = prefix.clone();
                out.extend_from_slice(&secretbox_seal(key, nonce, &value)?);
                Ok(out)
            }
        }
    }

    /// The plaintext of the value stored under `key`. Values of resources the
    /// configuration does not list pass unless they carry an envelope, which then must
    /// match one of the configured keys.
    pub fn decrypt(&self, key: &[u8], value: &[u8]) -> Result<Vec<u8>, DecryptError> {
        let providers: Vec<&Provider> = match self.providers_for(key) {
            Some(p) => p.iter().collect(),
            None if !value.starts_with(ENVELOPE_PREFIX) => return Ok(value.to_vec()),
            // Written under an older configuration: any configured key may read it.
            None => self.rules.iter().flat_map(|(_, p)| p.iter()).collect(),
        };
        // The first provider whose prefix the value carries and that can read it wins;
        // identity (empty prefix) refusing an envelope, or a key of the same name that
        // does not authenticate, lets later providers try.
        let mut failure = None;
        for provider in providers {
            if !value.starts_with(provider.prefix()) {
                continue;
            }
            match provider {
                Provider::Identity if value.starts_with(ENVELOPE_PREFIX) => {
                    failure.get_or_insert(DecryptError::IdentityReadEncrypted);
                }
                Provider::Identity => return Ok(value.to_vec()),
                Provider::AesGcm {
                    prefix,
                    key: cipher,
                } => {
                    let rest = &value[prefix.len()..];
                    if rest.len() < NONCE_LEN + cipher.algorithm().tag_len() {
                        return Err(DecryptError::TooShort);
                    }
                    let (nonce, sealed) = rest.split_at(NONCE_LEN);
                    let nonce = Nonce::try_assume_unique_for_key(nonce)
                        .map_err(|_| DecryptError::TooShort)?;
                    let mut buffer = sealed.to_vec();
                    match cipher.open_in_place(nonce, Aad::from(key), &mut buffer) {
                        Ok(plain) => return Ok(plain.to_vec()),
                        Err(_) => failure = Some(DecryptError::Authentication),
                    }
                }
                Provider::AesCbc { prefix, key } => match key.open(&value[prefix.len()..]) {
                    Ok(plain) => return Ok(plain),
                    Err(e) => failure = Some(e),
                },
                Provider::SecretBox { prefix, key } => {
                    match secretbox_open(key, &value[prefix.len()..]) {
                        Ok(plain) => return Ok(plain),
                        Err(e) => failure = Some(e),
                    }
                }
            }
        }
        if let Some(failure) = failure {
            return Err(failure);
        }
        Err(DecryptError::NoMatchingPrefix)
    }

    /// The name of the key new writes of `resource_prefix` use (`None`: identity).
    pub fn active_key(&self, key: &[u8]) -> Option<String> {
        match self.providers_for(key)?.first()? {
            Provider::AesGcm { prefix, .. }
            | Provider::AesCbc { prefix, .. }
            | Provider::SecretBox { prefix, .. } => {
                let text = String::from_utf8_lossy(prefix);
                text.trim_end_matches(':')
                    .rsplit(':')
                    .next()
                    .map(str::to_string)
            }
            Provider::Identity => None,
        }
    }
}

/// The key's bytes, after checking its name.
fn key_secret(key: &Key) -> Result<Vec<u8>, String> {
    if key.name.is_empty() || key.name.contains(':') {
        return Err(format!(
            "key name {:?} must be non-empty without ':'",
            key.name
        ));
    }
    base64::engine::general_purpose::STANDARD
        .decode(key.secret.trim())
        .map_err(|e| format!("secret of key {:?} is not base64: {e}", key.name))
}

fn aescbc(key: &Key) -> Result<Provider, String> {
    let secret = key_secret(key)?;
    let cipher = CbcKey::new(&secret).ok_or_else(|| {
        format!(
            "key {:?} is {} bytes; aescbc needs 16, 24 or 32",
            key.name,
            secret.len()
        )
    })?;
    Ok(Provider::AesCbc {
        prefix: format!("k8s:enc:aescbc:v1:{}:", key.name).into_bytes(),
        key: Box::new(cipher),
    })
}

fn secretbox(key: &Key) -> Result<Provider, String> {
    use crypto_secretbox::KeyInit as _;
    let secret = key_secret(key)?;
    let cipher = XSalsa20Poly1305::new_from_slice(&secret).map_err(|_| {
        format!(
            "key {:?} is {} bytes; secretbox needs 32",
            key.name,
            secret.len()
        )
    })?;
    Ok(Provider::SecretBox {
        prefix: format!("k8s:enc:secretbox:v1:{}:", key.name).into_bytes(),
        key: Box::new(cipher),
    })
}

/// `nonce`, then NaCl's secretbox of `plain` (tag first).
fn secretbox_seal(
    key: &XSalsa20Poly1305,
    nonce: [u8; SECRETBOX_NONCE],
    plain: &[u8],
) -> Result<Vec<u8>, String> {
    use crypto_secretbox::aead::Aead as _;
    let sealed = key
        .encrypt(&nonce.into(), plain)
        .map_err(|_| "secretbox encryption failed".to_string())?;
    let mut out = Vec::with_capacity(SECRETBOX_NONCE + sealed.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    Ok(out)
}

fn secretbox_open(key: &XSalsa20Poly1305, data: &[u8]) -> Result<Vec<u8>, DecryptError> {
    use crypto_secretbox::aead::Aead as _;
    if data.len() < SECRETBOX_NONCE + SECRETBOX_TAG {
        return Err(DecryptError::TooShort);
    }
    let (nonce, sealed) = data.split_at(SECRETBOX_NONCE);
    key.decrypt(crypto_secretbox::Nonce::from_slice(nonce), sealed)
        .map_err(|_| DecryptError::Authentication)
}

fn aesgcm(key: &Key) -> Result<Provider, String> {
    let secret = key_secret(key)?;
    let algorithm = match secret.len() {
        16 => &AES_128_GCM,
        32 => &AES_256_GCM,
        24 => {
            return Err(format!(
                "key {:?}: 24-byte (AES-192) keys are not supported by k3rs; use 16 or 32 bytes",
                key.name
            ));
        }
        n => {
            return Err(format!(
                "key {:?} is {n} bytes; aesgcm needs 16, 24 or 32",
                key.name
            ));
        }
    };
    let unbound = UnboundKey::new(algorithm, &secret)
        .map_err(|_| format!("key {:?} is not a valid AES key", key.name))?;
    Ok(Provider::AesGcm {
        prefix: format!("k8s:enc:aesgcm:v1:{}:", key.name).into_bytes(),
        key: Box::new(LessSafeKey::new(unbound)),
    })
}

/// Where k3s keeps the generated configuration.
pub fn default_config_path(data_dir: &Path) -> PathBuf {
    data_dir.join("server/cred/encryption-config.json")
}

/// A configuration encrypting Secrets with a fresh random 32-byte aesgcm key, reading
/// unencrypted ones (identity second).
pub fn generate_config() -> Result<EncryptionConfiguration, String> {
    let mut secret = [0u8; 32];
    SystemRandom::new()
        .fill(&mut secret)
        .map_err(|_| "the system's random source failed".to_string())?;
    Ok(EncryptionConfiguration {
        kind: "EncryptionConfiguration".into(),
        api_version: "apiserver.config.k8s.io/v1".into(),
        resources: vec![ResourceConfiguration {
            resources: vec!["secrets".into()],
            providers: vec![
                ProviderConfiguration {
                    aesgcm: Some(KeysConfiguration {
                        keys: vec![Key {
                            name: DEFAULT_KEY_NAME.into(),
                            secret: base64::engine::general_purpose::STANDARD.encode(secret),
                        }],
                    }),
                    ..Default::default()
                },
                ProviderConfiguration {
                    identity: Some(serde_json::json!({})),
                    ..Default::default()
                },
            ],
        }],
    })
}

/// Writes a generated configuration to `path` (mode 0600) unless the file exists.
pub fn ensure_default_config(path: &Path) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    if path.exists() {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let text = serde_json::to_vec(&generate_config()?).map_err(|e| e.to_string())?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    file.write_all(&text)
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A short, non-secret fingerprint of the configuration file's bytes (k3s prints a hash
/// of it per server).
pub fn config_hash(text: &[u8]) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(text);
    format!("start-{}", hex::encode(digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"/registry/secrets/default/s";

    fn config(name: &str, secret: &[u8], identity_first: bool) -> Transformer {
        let aes = serde_json::json!({"aesgcm": {"keys": [{"name": name,
            "secret": base64::engine::general_purpose::STANDARD.encode(secret)}]}});
        let identity = serde_json::json!({"identity": {}});
        let providers = if identity_first {
            vec![identity, aes]
        } else {
            vec![aes, identity]
        };
        let text = serde_json::json!({"kind": "EncryptionConfiguration",
            "apiVersion": "apiserver.config.k8s.io/v1",
            "resources": [{"resources": ["secrets"], "providers": providers}]})
        .to_string();
        Transformer::parse(&text).expect("config")
    }

    #[test]
    fn round_trip_with_kube_envelope() {
        let t = config("k1", &[7u8; 32], false);
        let stored = t.encrypt(KEY, b"{\"data\":1}".to_vec()).expect("encrypt");
        assert!(stored.starts_with(b"k8s:enc:aesgcm:v1:k1:"));
        // prefix + 12-byte nonce + plaintext + 16-byte tag
        assert_eq!(stored.len(), "k8s:enc:aesgcm:v1:k1:".len() + 12 + 10 + 16);
        assert_eq!(t.decrypt(KEY, &stored).expect("decrypt"), b"{\"data\":1}");
        // Random nonces: the same value twice is stored differently.
        assert_ne!(
            stored,
            t.encrypt(KEY, b"{\"data\":1}".to_vec()).expect("again")
        );
        // The key is authenticated: the value cannot be moved to another key.
        assert_eq!(
            t.decrypt(b"/registry/secrets/default/other", &stored),
            Err(DecryptError::Authentication)
        );
        // Other resources are not touched.
        let cm = b"/registry/configmaps/default/c";
        assert_eq!(t.encrypt(cm, b"x".to_vec()).expect("cm"), b"x");
        assert_eq!(t.decrypt(cm, b"x").expect("cm"), b"x");
        assert_eq!(t.active_key(KEY).as_deref(), Some("k1"));
    }

    #[test]
    fn wrong_key_and_bad_prefix_fail() {
        let a = config("k1", &[7u8; 32], false);
        let stored = a.encrypt(KEY, b"secret".to_vec()).expect("encrypt");
        let same_name_other_secret = config("k1", &[8u8; 32], false);
        assert_eq!(
            same_name_other_secret.decrypt(KEY, &stored),
            Err(DecryptError::Authentication)
        );
        // A key name that is not configured falls to identity, which refuses envelopes.
        let other_name = config("k2", &[7u8; 32], false);
        assert_eq!(
            other_name.decrypt(KEY, &stored),
            Err(DecryptError::IdentityReadEncrypted)
        );
        let mut tampered = stored.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert_eq!(a.decrypt(KEY, &tampered), Err(DecryptError::Authentication));
        assert_eq!(
            a.decrypt(KEY, b"k8s:enc:aesgcm:v1:k1:short"),
            Err(DecryptError::TooShort)
        );
        // Plain values pass through identity.
        assert_eq!(a.decrypt(KEY, b"{}").expect("plain"), b"{}");
        // Without identity, a plain value has no matching prefix.
        let only_aes = Transformer::parse(
            &serde_json::json!({"kind": "EncryptionConfiguration",
                "apiVersion": "apiserver.config.k8s.io/v1",
                "resources": [{"resources": ["secrets"], "providers": [{"aesgcm": {"keys": [
                    {"name": "k1", "secret": base64::engine::general_purpose::STANDARD.encode([7u8; 32])}]}}]}]})
            .to_string(),
        )
        .expect("config");
        assert_eq!(
            only_aes.decrypt(KEY, b"{}"),
            Err(DecryptError::NoMatchingPrefix)
        );
        assert_eq!(only_aes.decrypt(KEY, &stored).expect("decrypt"), b"secret");
    }

    #[test]
    fn identity_first_writes_plain_and_still_reads_encrypted() {
        let enc = config("k1", &[7u8; 32], false);
        let stored = enc.encrypt(KEY, b"secret".to_vec()).expect("encrypt");
        let dec = config("k1", &[7u8; 32], true);
        assert_eq!(dec.encrypt(KEY, b"p".to_vec()).expect("plain"), b"p");
        assert_eq!(dec.decrypt(KEY, &stored).expect("decrypt"), b"secret");
    }

    #[test]
    fn config_errors_name_the_field() {
        let bad = |text: serde_json::Value| Transformer::parse(&text.to_string()).unwrap_err();
        let base = |providers: serde_json::Value| {
            serde_json::json!({"kind": "EncryptionConfiguration",
                "apiVersion": "apiserver.config.k8s.io/v1",
                "resources": [{"resources": ["secrets"], "providers": providers}]})
        };
        assert!(
            bad(base(
                serde_json::json!([{"aesgcm": {"keys": [{"name": "k", "secret": "AAAA"}]}}])
            ))
            .contains("needs 16, 24 or 32")
        );
        assert!(bad(base(serde_json::json!([{"kms": {"name": "k"}}]))).contains("not kms"));
        assert!(bad(base(serde_json::json!([]))).contains("providers: Required value"));
        assert!(
            bad(serde_json::json!({"kind": "Other", "apiVersion": "apiserver.config.k8s.io/v1"}))
                .contains("kind")
        );
        assert_eq!(
            Selector::parse("deployments.apps"),
            Ok(Selector::Exact("/registry/apps/deployments/".into()))
        );
        assert!(Selector::parse("*.").is_err());
    }

    fn keyed(kind: &str, name: &str, secret: &[u8]) -> Transformer {
        let text = serde_json::json!({"kind": "EncryptionConfiguration",
            "apiVersion": "apiserver.config.k8s.io/v1",
            "resources": [{"resources": ["secrets"], "providers": [
                {kind: {"keys": [{"name": name,
                    "secret": base64::engine::general_purpose::STANDARD.encode(secret)}]}},
                {"identity": {}}]}]})
        .to_string();
        Transformer::parse(&text).expect("config")
    }

    const PLAIN: &[u8] = br#"{"kind":"Secret","data":{"k":"dmFsdWU="}}"#;
    const VECTOR_KEY: [u8; 32] = {
        let mut k = [0u8; 32];
        let mut i = 0;
        while i < 32 {
            k[i] = i as u8;
            i += 1;
        }
        k
    };

    /// Computed with python3 `cryptography` (AES-CBC, PKCS7 padder): key 00..1f,
    /// IV 64..73, the plaintext `PLAIN`.
    const CBC_VECTOR: &str = "6465666768696a6b6c6d6e6f7071727344283a8a80a45cba29966b60a5c5bdab\
        be77cec9499d2c759c316b9b82692806a5be84ab06db5eae2a404364b70ff36f";
    /// Computed with an independent python3 XSalsa20 (from the Salsa20 spec) and
    /// `cryptography`'s Poly1305: key 00..1f, nonce c8..df, the plaintext `PLAIN`.
    const SECRETBOX_VECTOR: &str = "c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf\
        52d5df69f902c4bbd5edf6fe004624028170041c2e5673f8afbbe6a0dc58cb2dc931faf477dc07bb\
        1d05f6bcb391469bd9e5d11cbfe579f045";

    fn vector(hex_text: &str) -> Vec<u8> {
        let compact: String = hex_text.split_whitespace().collect();
        hex::decode(compact).expect("hex")
    }

    #[test]
    fn aescbc_matches_kube_layout_and_known_vector() {
        let iv: [u8; 16] = std::array::from_fn(|i| 100 + i as u8);
        let cipher = CbcKey::new(&VECTOR_KEY).expect("key");
        assert_eq!(
            hex::encode(cipher.seal(iv, PLAIN)),
            hex::encode(vector(CBC_VECTOR))
        );
        let t = keyed("aescbc", "cbckey", &VECTOR_KEY);
        let mut stored = b"k8s:enc:aescbc:v1:cbckey:".to_vec();
        stored.extend_from_slice(&vector(CBC_VECTOR));
        assert_eq!(t.decrypt(KEY, &stored).expect("decrypt"), PLAIN);
        // Round trip through the transformer: prefix, random IV, padded blocks.
        let sealed = t.encrypt(KEY, PLAIN.to_vec()).expect("encrypt");
        let prefix = b"k8s:enc:aescbc:v1:cbckey:";
        assert!(sealed.starts_with(prefix));
        assert_eq!(
            sealed.len(),
            prefix.len() + 16 + PLAIN.len().div_ceil(16) * 16
        );
        assert_ne!(sealed, stored, "the IV is random");
        assert_eq!(t.decrypt(KEY, &sealed).expect("decrypt"), PLAIN);
        assert_eq!(t.active_key(KEY).as_deref(), Some("cbckey"));
        // 16- and 24-byte keys work too; other sizes are refused.
        for size in [16, 24] {
            let t = keyed("aescbc", "k", &VECTOR_KEY[..size]);
            let sealed = t.encrypt(KEY, PLAIN.to_vec()).expect("encrypt");
            assert_eq!(t.decrypt(KEY, &sealed).expect("decrypt"), PLAIN);
        }
        let err = Transformer::parse(
            &serde_json::json!({"kind": "EncryptionConfiguration",
                "apiVersion": "apiserver.config.k8s.io/v1",
                "resources": [{"resources": ["secrets"], "providers": [{"aescbc": {"keys": [
                    {"name": "k", "secret": base64::engine::general_purpose::STANDARD.encode([1u8; 20])}]}}]}]})
            .to_string(),
        )
        .unwrap_err();
        assert!(err.contains("aescbc needs 16, 24 or 32"), "{err}");
    }

    #[test]
    fn aescbc_refuses_wrong_key_and_bad_lengths() {
        let t = keyed("aescbc", "cbckey", &VECTOR_KEY);
        let mut stored = b"k8s:enc:aescbc:v1:cbckey:".to_vec();
        stored.extend_from_slice(&vector(CBC_VECTOR));
        // The known vector under another key of the same name: the padding does not
        // check out (a fixed vector, so this is deterministic).
        let wrong = keyed("aescbc", "cbckey", &[9u8; 32]);
        assert_eq!(
            wrong.decrypt(KEY, &stored),
            Err(DecryptError::InvalidPadding)
        );
        let mut cut = stored.clone();
        cut.pop();
        assert_eq!(t.decrypt(KEY, &cut), Err(DecryptError::NotBlockMultiple));
        assert_eq!(
            t.decrypt(KEY, b"k8s:enc:aescbc:v1:cbckey:short"),
            Err(DecryptError::TooShort)
        );
    }

    #[test]
    fn secretbox_matches_kube_layout_and_known_vector() {
        let nonce: [u8; 24] = std::array::from_fn(|i| 200 + i as u8);
        use crypto_secretbox::KeyInit as _;
        let cipher = XSalsa20Poly1305::new_from_slice(&VECTOR_KEY).expect("key");
        assert_eq!(
            hex::encode(secretbox_seal(&cipher, nonce, PLAIN).expect("seal")),
            hex::encode(vector(SECRETBOX_VECTOR))
        );
        let t = keyed("secretbox", "boxkey", &VECTOR_KEY);
        let mut stored = b"k8s:enc:secretbox:v1:boxkey:".to_vec();
        stored.extend_from_slice(&vector(SECRETBOX_VECTOR));
        assert_eq!(t.decrypt(KEY, &stored).expect("decrypt"), PLAIN);
        let sealed = t.encrypt(KEY, PLAIN.to_vec()).expect("encrypt");
        let prefix = b"k8s:enc:secretbox:v1:boxkey:";
        assert!(sealed.starts_with(prefix));
        assert_eq!(sealed.len(), prefix.len() + 24 + 16 + PLAIN.len());
        assert_eq!(t.decrypt(KEY, &sealed).expect("decrypt"), PLAIN);
        // A wrong key, or a flipped bit, fails authentication.
        let wrong = keyed("secretbox", "boxkey", &[9u8; 32]);
        assert_eq!(
            wrong.decrypt(KEY, &stored),
            Err(DecryptError::Authentication)
        );
        let mut tampered = stored.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert_eq!(t.decrypt(KEY, &tampered), Err(DecryptError::Authentication));
        let err = Transformer::parse(
            &serde_json::json!({"kind": "EncryptionConfiguration",
                "apiVersion": "apiserver.config.k8s.io/v1",
                "resources": [{"resources": ["secrets"], "providers": [{"secretbox": {"keys": [
                    {"name": "k", "secret": base64::engine::general_purpose::STANDARD.encode([1u8; 16])}]}}]}]})
            .to_string(),
        )
        .unwrap_err();
        assert!(err.contains("secretbox needs 32"), "{err}");
    }

    #[test]
    fn providers_read_each_others_values_in_one_config() {
        // A configuration listing all three keyed providers writes with the first and
        // reads what any of them wrote.
        let b64 = |k: &[u8]| base64::engine::general_purpose::STANDARD.encode(k);
        let text = serde_json::json!({"kind": "EncryptionConfiguration",
            "apiVersion": "apiserver.config.k8s.io/v1",
            "resources": [{"resources": ["secrets"], "providers": [
                {"secretbox": {"keys": [{"name": "b", "secret": b64(&[1u8; 32])}]}},
                {"aescbc": {"keys": [{"name": "c", "secret": b64(&[2u8; 32])}]}},
                {"aesgcm": {"keys": [{"name": "g", "secret": b64(&[3u8; 32])}]}}]}]})
        .to_string();
        let all = Transformer::parse(&text).expect("config");
        for (kind, name, secret) in [("aescbc", "c", [2u8; 32]), ("aesgcm", "g", [3u8; 32])] {
            let one = keyed(kind, name, &secret);
            let sealed = one.encrypt(KEY, PLAIN.to_vec()).expect("encrypt");
            assert_eq!(all.decrypt(KEY, &sealed).expect(kind), PLAIN);
        }
        assert!(
            all.encrypt(KEY, PLAIN.to_vec())
                .expect("encrypt")
                .starts_with(b"k8s:enc:secretbox:v1:b:")
        );
    }

    #[test]
    fn generated_config_loads() {
        let text = serde_json::to_string(&generate_config().expect("generate")).expect("json");
        let t = Transformer::parse(&text).expect("loads");
        assert_eq!(t.active_key(KEY).as_deref(), Some(DEFAULT_KEY_NAME));
        assert!(text.contains("\"identity\":{}"));
    }
}
