//! `/k3rs/v1/secrets-encrypt/...`: the running server's side of `k3rs secrets-encrypt`
//! (k3s's supervisor endpoints `/v1-k3s/encrypt/...`). Admin (`system:masters`) only.
//!
//! - `GET status`: whether encryption is on, the rotation stage, the config hash, keys;
//! - `POST enable|disable`: the keyed provider, or `identity`, first;
//! - `POST prepare`: a new random key appended to the keyed provider (readable, not used);
//! - `POST rotate`: the prepared key first (new writes use it);
//! - `POST reencrypt` (`{"force":bool,"skip":bool}`): every Secret rewritten with the first
//!   provider, then (unless `skip`) every key but the active one removed;
//! - `POST rotate-keys`: a new key first, reencrypt, old keys removed, in one step;
//! - `POST reload`: reread the configuration file (after it was copied from another server).
//!
//! Each change rewrites the configuration file the server loaded (JSON, mode 0600,
//! through a temporary file and a rename) and puts it in force at once through
//! [`KvStore::replace_transformer`]; no restart is needed (k3s restarts its apiserver).
//! The stage is kept beside the file (`encryption-state.json`). Owns those two files; reads
//! and writes Secrets' stored values only through [`KvStore`].

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use crate::apiserver::auth::authn::Identity;
use crate::apiserver::http::status::ApiError;
use crate::apiserver::storage::encryption::{
    EncryptionConfiguration, Key, KeysConfiguration, ProviderConfiguration, Transformer,
};
use crate::apiserver::storage::kv::KvStore;
use crate::store::{RangeRequest, StoreError};

pub const API_PREFIX: &str = "/k3rs/v1/secrets-encrypt";
const SECRETS_PREFIX: &[u8] = b"/registry/secrets/";
/// A key under the Secrets prefix, to find the rule that covers Secrets.
const SECRET_PROBE: &[u8] = b"/registry/secrets/default/probe";

/// One change at a time.
static BUSY: LazyLock<tokio::sync::Mutex<()>> = LazyLock::new(|| tokio::sync::Mutex::new(()));

/// k3s's rotation stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Start,
    Prepare,
    Rotate,
    ReencryptActive,
    ReencryptFinished,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Start => "start",
            Stage::Prepare => "prepare",
            Stage::Rotate => "rotate",
            Stage::ReencryptActive => "reencrypt_active",
            Stage::ReencryptFinished => "reencrypt_finished",
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct StateFile {
    stage: Stage,
}

/// The answer to every call.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub enabled: bool,
    pub stage: String,
    pub hash: String,
    pub keys: Vec<KeyStatus>,
    /// What the call did, for the CLI to print.
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyStatus {
    pub active: bool,
    /// `AES-GCM`, `AES-CBC`, `XSalsa20-Poly1305` (secretbox) or `Identity`.
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReencryptRequest {
    pub force: bool,
    pub skip: bool,
}

fn state_path(config: &Path) -> PathBuf {
    config.with_file_name("encryption-state.json")
}

/// The rotation stage recorded beside the configuration file `config`.
pub fn stage_of(config: &Path) -> Stage {
    read_stage(config)
}

fn read_stage(config: &Path) -> Stage {
    std::fs::read(state_path(config))
        .ok()
        .and_then(|b| serde_json::from_slice::<StateFile>(&b).ok())
        .map(|s| s.stage)
        .unwrap_or(Stage::Start)
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("cannot replace {}: {e}", path.display()))
}

fn write_stage(config: &Path, stage: Stage) -> Result<(), String> {
    let bytes = serde_json::to_vec(&StateFile { stage }).map_err(|e| e.to_string())?;
    write_private(&state_path(config), &bytes)
}

/// The keyed provider's kind and keys, if `p` is one.
fn keyed(p: &ProviderConfiguration) -> Option<(&'static str, &KeysConfiguration)> {
    if let Some(k) = &p.aesgcm {
        return Some(("AES-GCM", k));
    }
    if let Some(k) = &p.aescbc {
        return Some(("AES-CBC", k));
    }
    if let Some(k) = &p.secretbox {
        return Some(("XSalsa20-Poly1305", k));
    }
    None
}

fn keyed_mut(p: &mut ProviderConfiguration) -> Option<&mut KeysConfiguration> {
    p.aesgcm
        .as_mut()
        .or(p.aescbc.as_mut())
        .or(p.secretbox.as_mut())
}

/// The providers of the rule that covers Secrets.
fn secrets_providers(
    config: &mut EncryptionConfiguration,
) -> Result<&mut Vec<ProviderConfiguration>, String> {
    let index = Transformer::new(config.clone())?
        .rule_index(SECRET_PROBE)
        .ok_or("the encryption configuration does not list secrets")?;
    Ok(&mut config.resources[index].providers)
}

/// The index of the keyed provider of the Secrets rule.
fn keyed_index(providers: &[ProviderConfiguration]) -> Result<usize, String> {
    providers
        .iter()
        .position(|p| keyed(p).is_some())
        .ok_or_else(|| {
            "the secrets rule has no aesgcm, aescbc or secretbox provider to manage".to_string()
        })
}

/// A new random 32-byte key named after its provider and the time (k3s names keys
/// `aescbckey-<time>`; ':' is not allowed in a key name, so the time is compact).
fn new_key(provider: &ProviderConfiguration) -> Result<Key, String> {
    let kind = if provider.aescbc.is_some() {
        "aescbc"
    } else if provider.secretbox.is_some() {
        "secretbox"
    } else {
        "aesgcm"
    };
    let mut secret = [0u8; 32];
    SystemRandom::new()
        .fill(&mut secret)
        .map_err(|_| "the system's random source failed".to_string())?;
    let now = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S%.fZ");
    Ok(Key {
        name: format!("{kind}key-{now}").replace('.', "-"),
        secret: base64::engine::general_purpose::STANDARD.encode(secret),
    })
}

/// `enable`: the keyed provider first.
pub fn enable(config: &mut EncryptionConfiguration) -> Result<(), String> {
    let providers = secrets_providers(config)?;
    let i = keyed_index(providers)?;
    let p = providers.remove(i);
    providers.insert(0, p);
    Ok(())
}

/// `disable`: `identity` first (added when missing), so Secrets are written in plain
/// but the keys still read what they wrote.
pub fn disable(config: &mut EncryptionConfiguration) -> Result<(), String> {
    let providers = secrets_providers(config)?;
    let identity = match providers.iter().position(|p| p.identity.is_some()) {
        Some(i) => providers.remove(i),
        None => ProviderConfiguration {
            identity: Some(serde_json::json!({})),
            ..Default::default()
        },
    };
    providers.insert(0, identity);
    Ok(())
}

/// `prepare`: a new key after the keyed provider's keys. Returns its name.
pub fn prepare(config: &mut EncryptionConfiguration) -> Result<String, String> {
    let providers = secrets_providers(config)?;
    let i = keyed_index(providers)?;
    let key = new_key(&providers[i])?;
    let name = key.name.clone();
    if let Some(keys) = keyed_mut(&mut providers[i]) {
        keys.keys.push(key);
    }
    Ok(name)
}

/// `rotate`: the newest (last) key first. Returns its name.
pub fn rotate(config: &mut EncryptionConfiguration) -> Result<String, String> {
    let providers = secrets_providers(config)?;
    let i = keyed_index(providers)?;
    let keys = keyed_mut(&mut providers[i]).ok_or("no keyed provider")?;
    let newest = keys.keys.pop().ok_or("the keyed provider has no keys")?;
    let name = newest.name.clone();
    keys.keys.insert(0, newest);
    Ok(name)
}

/// After a re-encryption: only the active key stays, when the keyed provider is the one
/// in use (with `identity` first nothing is removed: the keys may still be needed).
pub fn drop_old_keys(config: &mut EncryptionConfiguration) -> Result<usize, String> {
    let providers = secrets_providers(config)?;
    let i = keyed_index(providers)?;
    if i != 0 {
        return Ok(0);
    }
    let keys = keyed_mut(&mut providers[i]).ok_or("no keyed provider")?;
    let removed = keys.keys.len().saturating_sub(1);
    keys.keys.truncate(1);
    Ok(removed)
}

/// The status of a configuration.
pub fn status_of(transformer: &Transformer, stage: Stage, message: String) -> Status {
    let mut config = transformer.config.clone();
    let mut keys = Vec::new();
    let mut enabled = false;
    if let Ok(providers) = secrets_providers(&mut config) {
        for (i, p) in providers.iter().enumerate() {
            match keyed(p) {
                Some((kind, k)) => {
                    enabled |= i == 0;
                    for (j, key) in k.keys.iter().enumerate() {
                        keys.push(KeyStatus {
                            active: i == 0 && j == 0,
                            kind: kind.into(),
                            name: key.name.clone(),
                        });
                    }
                }
                None if p.identity.is_some() => keys.push(KeyStatus {
                    active: i == 0,
                    kind: "Identity".into(),
                    name: "identity".into(),
                }),
                None => {}
            }
        }
    }
    Status {
        enabled,
        stage: stage.as_str().into(),
        hash: transformer.hash.clone(),
        keys,
        message,
    }
}

/// Serves `/k3rs/v1/secrets-encrypt/<action>`.
pub async fn serve(
    store: &KvStore,
    identity: &Identity,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Response {
    match serve_inner(store, identity, method, path, body).await {
        Ok(status) => crate::apiserver::http::handlers::json_response(
            StatusCode::OK,
            serde_json::to_vec(&status).unwrap_or_default(),
        ),
        Err(e) => e.into_response(),
    }
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", message.into())
}

fn internal(message: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        message.into(),
    )
}

/// What the encryption endpoints tell a caller outside `system:masters` it may not do.
pub const ADMIN_ACTION: &str = "manage secrets encryption";

async fn serve_inner(
    store: &KvStore,
    identity: &Identity,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Result<Status, ApiError> {
    crate::apiserver::auth::authz::require_masters(identity, ADMIN_ACTION)?;
    let Some(current) = store.transformer() else {
        return Err(invalid(
            "secrets encryption is not enabled on this server (start it with --secrets-encryption)",
        ));
    };
    let Some(source) = current.source.clone() else {
        return Err(internal("the encryption configuration has no file"));
    };
    let action = path
        .strip_prefix(API_PREFIX)
        .unwrap_or("")
        .trim_matches('/');
    if *method == Method::GET && matches!(action, "" | "status") {
        return Ok(status_of(&current, read_stage(&source), String::new()));
    }
    if *method != Method::POST {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("{method} is not allowed on {path}"),
        ));
    }
    let _busy = BUSY.lock().await;
    let stage = read_stage(&source);
    let mut config = current.config.clone();
    let ready_for_new_key = matches!(stage, Stage::Start | Stage::ReencryptFinished);
    let message = match action {
        "reload" => {
            reload(store, &source)?;
            "configuration reloaded".to_string()
        }
        "enable" | "disable" => {
            if action == "enable" {
                enable(&mut config).map_err(invalid)?;
            } else {
                disable(&mut config).map_err(invalid)?;
            }
            save(store, &source, &config)?;
            format!(
                "secrets encryption {action}d; run `k3rs secrets-encrypt reencrypt --force` to rewrite existing Secrets"
            )
        }
        "prepare" => {
            if !ready_for_new_key {
                return Err(invalid(format!(
                    "error, incorrect stage: {}; prepare follows start or reencrypt_finished",
                    stage.as_str()
                )));
            }
            let name = prepare(&mut config).map_err(invalid)?;
            save(store, &source, &config)?;
            write_stage(&source, Stage::Prepare).map_err(internal)?;
            format!("prepared key {name}")
        }
        "rotate" => {
            if stage != Stage::Prepare {
                return Err(invalid(format!(
                    "error, incorrect stage: {}; rotate follows prepare",
                    stage.as_str()
                )));
            }
            let name = rotate(&mut config).map_err(invalid)?;
            save(store, &source, &config)?;
            write_stage(&source, Stage::Rotate).map_err(internal)?;
            format!("key {name} is now used for new writes")
        }
        "reencrypt" => {
            let request: ReencryptRequest = if body.iter().all(u8::is_ascii_whitespace) {
                ReencryptRequest::default()
            } else {
                serde_json::from_slice(body)
                    .map_err(|e| invalid(format!("invalid reencrypt request: {e}")))?
            };
            if stage != Stage::Rotate && !request.force {
                return Err(invalid(format!(
                    "error, incorrect stage: {}; reencrypt follows rotate (use --force to reencrypt anyway)",
                    stage.as_str()
                )));
            }
            finish_reencrypt(store, &source, config, !request.skip).await?
        }
        "rotate-keys" => {
            if !ready_for_new_key {
                return Err(invalid(format!(
                    "error, incorrect stage: {}; rotate-keys follows start or reencrypt_finished",
                    stage.as_str()
                )));
            }
            let name = prepare(&mut config).map_err(invalid)?;
            rotate(&mut config).map_err(invalid)?;
            enable(&mut config).map_err(invalid)?;
            save(store, &source, &config)?;
            let done = finish_reencrypt(store, &source, config, true).await?;
            format!("rotated to key {name}; {done}")
        }
        _ => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
            ));
        }
    };
    let now = store.transformer().unwrap_or(current);
    tracing::info!(action, %message, "secrets-encrypt");
    Ok(status_of(&now, read_stage(&source), message))
}

/// Rereads `source` and puts it in force.
fn reload(store: &KvStore, source: &Path) -> Result<(), ApiError> {
    let next = Transformer::load(source).map_err(invalid)?;
    if !store.replace_transformer(next) {
        return Err(internal("encryption at rest was not configured at start"));
    }
    Ok(())
}

/// Writes `config` over `source` and puts it in force; a configuration that does not
/// load is refused before the file is touched.
fn save(store: &KvStore, source: &Path, config: &EncryptionConfiguration) -> Result<(), ApiError> {
    let text = serde_json::to_vec_pretty(config).map_err(|e| internal(e.to_string()))?;
    Transformer::parse(&String::from_utf8_lossy(&text)).map_err(internal)?;
    write_private(source, &text).map_err(internal)?;
    reload(store, source)
}

/// Reencrypts, then drops the old keys when asked; the stage ends at reencrypt_finished.
async fn finish_reencrypt(
    store: &KvStore,
    source: &Path,
    mut config: EncryptionConfiguration,
    drop_keys: bool,
) -> Result<String, ApiError> {
    write_stage(source, Stage::ReencryptActive).map_err(internal)?;
    let (rewritten, failed) = reencrypt(store)
        .await
        .map_err(|e| internal(e.to_string()))?;
    if failed > 0 {
        return Err(internal(format!(
            "{failed} Secrets could not be read with the configured keys and were left as \
             stored; the old keys were kept ({rewritten} rewritten)"
        )));
    }
    let mut message = format!("reencrypted {rewritten} Secrets");
    if drop_keys {
        let removed = drop_old_keys(&mut config).map_err(invalid)?;
        if removed > 0 {
            save(store, source, &config)?;
            message.push_str(&format!("; removed {removed} old keys"));
        }
    }
    write_stage(source, Stage::ReencryptFinished).map_err(internal)?;
    Ok(message)
}

/// Rewrites every Secret whose stored value is not already under the first provider's
/// prefix, through [`KvStore`] (so the configuration in force encrypts it). Returns
/// (rewritten, unreadable).
async fn reencrypt(store: &KvStore) -> Result<(usize, usize), StoreError> {
    let raw: &crate::store::Store = store;
    let mut rewritten = 0;
    let mut failed = 0;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = raw
            .range(RangeRequest {
                prefix: SECRETS_PREFIX.to_vec(),
                limit: 200,
                start_after_key: after.clone(),
                ..Default::default()
            })
            .await?;
        for stored in &page.kvs {
            let Some(transformer) = store.transformer() else {
                return Ok((rewritten, failed));
            };
            let target = transformer.write_prefix(&stored.key);
            if !target.is_empty() && stored.value.starts_with(&target) {
                continue;
            }
            if target.is_empty()
                && !stored
                    .value
                    .starts_with(crate::apiserver::storage::encryption::ENVELOPE_PREFIX)
            {
                continue;
            }
            match rewrite(store, &stored.key).await {
                Ok(true) => rewritten += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(key = %String::from_utf8_lossy(&stored.key), error = %e, "cannot reencrypt a Secret");
                    failed += 1;
                }
            }
        }
        if !page.more {
            break;
        }
        after = page.kvs.last().map(|kv| kv.key.clone());
        if after.is_none() {
            break;
        }
    }
    Ok((rewritten, failed))
}

/// Reads one Secret (decrypted) and writes it back unchanged; retries a concurrent write.
/// `Ok(false)`: it was deleted meanwhile.
async fn rewrite(store: &KvStore, key: &[u8]) -> Result<bool, StoreError> {
    for _ in 0..5 {
        let Some(current) = store.get(key).await? else {
            return Ok(false);
        };
        match store.update(key, current.value, current.mod_revision).await {
            Ok(_) => return Ok(true),
            Err(StoreError::Conflict { .. }) => continue,
            Err(StoreError::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Transform(format!(
        "{} kept changing while it was reencrypted",
        String::from_utf8_lossy(key)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated() -> EncryptionConfiguration {
        crate::apiserver::storage::encryption::generate_config().expect("generate")
    }

    fn names(config: &EncryptionConfiguration) -> Vec<String> {
        config.resources[0].providers[0]
            .aesgcm
            .as_ref()
            .map(|k| k.keys.iter().map(|k| k.name.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn prepare_rotate_and_drop_keys() {
        let mut config = generated();
        let name = prepare(&mut config).expect("prepare");
        assert!(name.starts_with("aesgcmkey-"), "{name}");
        assert!(!name.contains(':'));
        assert_eq!(names(&config), vec!["aesgcmkey".to_string(), name.clone()]);
        // The prepared key reads but does not write.
        let t = Transformer::new(config.clone()).expect("loads");
        assert_eq!(t.active_key(SECRET_PROBE).as_deref(), Some("aesgcmkey"));
        assert_eq!(rotate(&mut config).expect("rotate"), name);
        assert_eq!(names(&config), vec![name.clone(), "aesgcmkey".to_string()]);
        let t = Transformer::new(config.clone()).expect("loads");
        assert_eq!(t.active_key(SECRET_PROBE).as_deref(), Some(name.as_str()));
        assert_eq!(drop_old_keys(&mut config).expect("drop"), 1);
        assert_eq!(names(&config), vec![name]);
    }

    #[test]
    fn disable_and_enable_swap_the_first_provider() {
        let mut config = generated();
        disable(&mut config).expect("disable");
        assert!(config.resources[0].providers[0].identity.is_some());
        let t = Transformer::new(config.clone()).expect("loads");
        assert_eq!(t.active_key(SECRET_PROBE), None);
        let status = status_of(&t, Stage::Start, String::new());
        assert!(!status.enabled);
        // With identity first no key is dropped.
        prepare(&mut config).expect("prepare");
        assert_eq!(drop_old_keys(&mut config).expect("drop"), 0);
        enable(&mut config).expect("enable");
        let t = Transformer::new(config).expect("loads");
        assert_eq!(t.active_key(SECRET_PROBE).as_deref(), Some("aesgcmkey"));
        let status = status_of(&t, Stage::Prepare, String::new());
        assert!(status.enabled);
        assert_eq!(status.stage, "prepare");
        assert!(status.keys[0].active && status.keys[0].name == "aesgcmkey");
        assert!(!status.keys[1].active);
    }

    #[test]
    fn a_config_without_secrets_is_refused() {
        let mut config = generated();
        config.resources[0].resources = vec!["configmaps".into()];
        assert!(
            prepare(&mut config)
                .unwrap_err()
                .contains("does not list secrets")
        );
    }
}
