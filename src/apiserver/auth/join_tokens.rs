//! The join credentials, as k3s has them: none of them is a kube-apiserver bearer token,
//! they only open the join (supervisor) endpoints.
//!
//! - the **server token** (`--token`, `K10<ca hash>::server:<secret>`) joins servers and
//!   agents;
//! - the **agent token** (`--agent-token`, `K10<ca hash>::node:<secret>`) joins agents only;
//! - **bootstrap tokens** (`<id>.<secret>`, kube's `bootstrap-token-<id>` Secrets of type
//!   `bootstrap.kubernetes.io/token` in `kube-system`, made by `k3rs token create`) join agents
//!   only, until they expire or are deleted. Their identity is `system:bootstrap:<id>` in
//!   `system:bootstrappers` (and the Secret's `auth-extra-groups`).
//!
//! The server and agent secrets are checked against salted SHA-256 hashes kept in the
//! datastore (`/k3rs/join-token/server`, `/k3rs/join-token/agent`, outside `/registry/`), so
//! every member of a raft group accepts the same tokens and `k3rs token rotate` (see
//! [`rotate`]) takes effect on all of them at once.
//!
//! Owns those two keys and reading bootstrap-token Secrets; the bootstrap data re-encryption
//! on rotation is `bootstrap_copy`'s.

use axum::http::StatusCode;
use serde_json::Value;

use crate::apiserver::AppState;
use crate::apiserver::http::handlers;
use crate::apiserver::http::request::{Query, Target, Want};
use crate::store::StoreError;

/// Store key of the server token's hash.
const SERVER_KEY: &str = "/k3rs/join-token/server";
/// Store key of the agent token's hash.
const AGENT_KEY: &str = "/k3rs/join-token/agent";
/// Type of bootstrap-token Secrets.
pub const BOOTSTRAP_TOKEN_TYPE: &str = "bootstrap.kubernetes.io/token";
/// Name prefix of bootstrap-token Secrets.
pub const BOOTSTRAP_TOKEN_PREFIX: &str = "bootstrap-token-";
/// The group every bootstrap token is in.
pub const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";

/// Which credential a join request presented.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinRole {
    /// The server token: may join servers and agents.
    Server,
    /// The agent token: may join agents.
    Agent,
    /// A bootstrap token: may join agents.
    Bootstrap { id: String, groups: Vec<String> },
}

impl JoinRole {
    /// Whether this credential may fetch the cluster's bootstrap data and add members.
    pub fn may_join_servers(&self) -> bool {
        matches!(self, JoinRole::Server)
    }

    /// A name for logs.
    pub fn describe(&self) -> String {
        match self {
            JoinRole::Server => "the server token".to_string(),
            JoinRole::Agent => "the agent token".to_string(),
            JoinRole::Bootstrap { id, .. } => {
                format!("bootstrap token {id} (system:bootstrap:{id})")
            }
        }
    }
}

/// The secret of an `Authorization` header value: `Basic node:<secret>` /
/// `Basic server:<secret>`, or `Bearer <token>` where the token may be in the full
/// `K10<hash>::<user>:<secret>` / `K10<hash>::<id>.<secret>` form.
pub fn presented_secret(authorization: &str) -> Option<String> {
    if authorization.starts_with("Basic ") {
        let (user, secret) = super::authn::basic_credentials(authorization)?;
        return (user == "node" || user == "server").then_some(secret);
    }
    let token = authorization.strip_prefix("Bearer ")?.trim();
    let credentials = match token.strip_prefix("K10").and_then(|r| r.split_once("::")) {
        Some((_, creds)) => creds,
        None => token,
    };
    // `user:secret` in the full form; a bare secret or `id.secret` otherwise.
    let secret = match credentials.split_once(':') {
        Some((_, secret)) if token.starts_with("K10") => secret,
        _ => credentials,
    };
    (!secret.is_empty()).then(|| secret.to_string())
}

/// Whether `secret` has kube's bootstrap token form, `[a-z0-9]{6}.[a-z0-9]{16}`; the id.
pub fn bootstrap_token_id(secret: &str) -> Option<(&str, &str)> {
    let (id, token_secret) = secret.split_once('.')?;
    let ok = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (ok(id, 6) && ok(token_secret, 16)).then_some((id, token_secret))
}

/// The role of an `Authorization` header value, if it carries a valid join credential.
pub async fn authenticate(state: &AppState, authorization: &str) -> Option<JoinRole> {
    let secret = presented_secret(authorization)?;
    if secret_matches(
        state,
        SERVER_KEY,
        &secret,
        state.config.token_secret.as_deref(),
    )
    .await
    {
        return Some(JoinRole::Server);
    }
    if secret_matches(
        state,
        AGENT_KEY,
        &secret,
        state.config.agent_token_secret.as_deref(),
    )
    .await
    {
        return Some(JoinRole::Agent);
    }
    let (id, token_secret) = bootstrap_token_id(&secret)?;
    bootstrap_token(state, id, token_secret).await
}

/// Checks `secret` against the hash under `key`; while no hash is stored (a store that
/// could not be written yet), against this server's own configured secret.
async fn secret_matches(state: &AppState, key: &str, secret: &str, local: Option<&str>) -> bool {
    match state.store.get(key.as_bytes()).await {
        Ok(Some(kv)) => std::str::from_utf8(&kv.value).is_ok_and(|stored| {
            crate::apiserver::cluster::node_join::password_matches(stored, secret)
        }),
        Ok(None) => local.is_some_and(|local| constant_time_eq(local, secret)),
        Err(e) => {
            tracing::warn!(key, error = %e, "cannot read the join token hash");
            false
        }
    }
}

fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn hash(secret: &str) -> Result<String, String> {
    let salt = crate::pki::token::random_secret().map_err(|e| format!("generating a salt: {e}"))?;
    Ok(crate::apiserver::cluster::node_join::hash_password(
        secret,
        salt.as_bytes(),
    ))
}

/// At start: stores this server's token hashes when the datastore has none. A server token
/// that differs from the cluster's (rotated elsewhere) is reported, never written over; a
/// configured agent token replaces the stored one (the last server started with
/// `--agent-token` sets it).
pub async fn ensure(state: &AppState) {
    if let Some(secret) = state.config.token_secret.as_deref() {
        match state.store.get(SERVER_KEY.as_bytes()).await {
            Ok(None) => store_hash(state, SERVER_KEY, secret, None).await,
            Ok(Some(kv)) => {
                let same = std::str::from_utf8(&kv.value).is_ok_and(|stored| {
                    crate::apiserver::cluster::node_join::password_matches(stored, secret)
                });
                if !same {
                    tracing::error!(
                        "this server's token is not the cluster's server token (it was \
                         rotated with `k3rs token rotate`?): joins use the cluster's token; put \
                         the new token in --token / <data-dir>/server/token on this server"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the server token hash"),
        }
    }
    if let Some(secret) = state.config.agent_token_secret.as_deref() {
        match state.store.get(AGENT_KEY.as_bytes()).await {
            Ok(None) => store_hash(state, AGENT_KEY, secret, None).await,
            Ok(Some(kv)) => {
                let same = std::str::from_utf8(&kv.value).is_ok_and(|stored| {
                    crate::apiserver::cluster::node_join::password_matches(stored, secret)
                });
                if !same {
                    tracing::info!("replacing the cluster's agent token with --agent-token");
                    store_hash(state, AGENT_KEY, secret, Some(kv.mod_revision)).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the agent token hash"),
        }
    }
}

async fn store_hash(state: &AppState, key: &str, secret: &str, revision: Option<i64>) {
    let hashed = match hash(secret) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(key, error = %e, "cannot hash the join token");
            return;
        }
    };
    let result = match revision {
        None => {
            state
                .store
                .create(key.as_bytes(), hashed.into_bytes())
                .await
        }
        Some(rev) => {
            state
                .store
                .update(key.as_bytes(), hashed.into_bytes(), rev)
                .await
        }
    };
    match result {
        Ok(_) => tracing::info!(key, "stored the join token's hash in the datastore"),
        // Another server stored it meanwhile.
        Err(StoreError::AlreadyExists { .. }) => {}
        Err(e) => tracing::warn!(key, error = %e, "cannot store the join token's hash"),
    }
}

/// Why a rotation failed.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("{0}")]
    Invalid(String),
    #[error("the datastore: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Other(String),
}

/// `k3rs token rotate`: the cluster's server token becomes `new` (already authenticated
/// with the old one, `old`). Re-encrypts the bootstrap data under the new token, replaces
/// the stored hash (every member accepts the new token and refuses the old one from then
/// on) and rewrites this server's `token` and `node-token` files. Other servers keep their
/// old token file until the operator updates it (as k3s requires).
pub async fn rotate(state: &AppState, old: &str, new: &str) -> Result<(), RotateError> {
    let new = new.trim();
    if new.is_empty() || new.chars().any(|c| c.is_whitespace() || c == ':') {
        return Err(RotateError::Invalid(
            "the new token must be a non-empty secret without whitespace or ':' \
             (a bare secret or K10<hash>::server:<secret>)"
                .to_string(),
        ));
    }
    if constant_time_eq(old, new) {
        return Err(RotateError::Invalid(
            "the new token is the current token".to_string(),
        ));
    }
    if let Some(cluster) = state.config.cluster.as_ref() {
        crate::apiserver::cluster::bootstrap_copy::rotate(&state.store, old, new, &cluster.tls_dir)
            .await
            .map_err(|e| RotateError::Other(format!("re-encrypting the bootstrap data: {e}")))?;
    }
    let hashed = hash(new).map_err(RotateError::Other)?;
    match state.store.get(SERVER_KEY.as_bytes()).await? {
        Some(kv) => {
            state
                .store
                .update(SERVER_KEY.as_bytes(), hashed.into_bytes(), kv.mod_revision)
                .await?;
        }
        None => {
            state
                .store
                .create(SERVER_KEY.as_bytes(), hashed.into_bytes())
                .await?;
        }
    }
    if let Some(server_dir) = state
        .config
        .cluster
        .as_ref()
        .and_then(|c| c.tls_dir.parent())
    {
        crate::pki::token::rewrite_server_token(server_dir, new)
            .map_err(|e| RotateError::Other(format!("writing the token files: {e}")))?;
    }
    tracing::info!("the server token was rotated");
    Ok(())
}

/// A bootstrap token's Secret, checked as kube's bootstrap authenticator checks it: the
/// type, the id, the secret (constant time), `usage-bootstrap-authentication: "true"` and
/// an expiration that has not passed.
async fn bootstrap_token(state: &AppState, id: &str, token_secret: &str) -> Option<JoinRole> {
    let name = format!("{BOOTSTRAP_TOKEN_PREFIX}{id}");
    let secret = match read_secret(state, "kube-system", &name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            tracing::info!(id, "no such bootstrap token");
            return None;
        }
        Err(e) => {
            tracing::warn!(id, error = %e, "cannot read a bootstrap token");
            return None;
        }
    };
    check_bootstrap_secret(&secret, id, token_secret, jiff::Timestamp::now())
}

/// The checks of [`bootstrap_token`] on the Secret's JSON.
fn check_bootstrap_secret(
    secret: &Value,
    id: &str,
    token_secret: &str,
    now: jiff::Timestamp,
) -> Option<JoinRole> {
    if secret.get("type").and_then(Value::as_str) != Some(BOOTSTRAP_TOKEN_TYPE) {
        tracing::info!(id, "the bootstrap token's Secret has another type");
        return None;
    }
    let field = |name: &str| -> Option<String> {
        use base64::Engine as _;
        let b64 = secret.get("data")?.get(name)?.as_str()?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        String::from_utf8(bytes).ok()
    };
    if field("token-id").as_deref() != Some(id) {
        return None;
    }
    if !field("token-secret").is_some_and(|s| constant_time_eq(&s, token_secret)) {
        tracing::info!(id, "wrong secret for a bootstrap token");
        return None;
    }
    if field("usage-bootstrap-authentication").as_deref() != Some("true") {
        tracing::info!(id, "the bootstrap token is not for authentication");
        return None;
    }
    if let Some(expiration) = field("expiration") {
        match expiration.parse::<jiff::Timestamp>() {
            Ok(at) if at > now => {}
            Ok(_) => {
                tracing::info!(id, %expiration, "the bootstrap token has expired");
                return None;
            }
            Err(e) => {
                tracing::warn!(id, %expiration, error = %e, "the bootstrap token's expiration does not parse");
                return None;
            }
        }
    }
    let mut groups = vec![BOOTSTRAPPERS_GROUP.to_string()];
    for group in field("auth-extra-groups").unwrap_or_default().split(',') {
        let group = group.trim();
        if group.is_empty() || groups.iter().any(|g| g == group) {
            continue;
        }
        if group.starts_with("system:bootstrappers:") {
            groups.push(group.to_string());
        } else {
            tracing::warn!(
                id,
                group,
                "ignoring an extra group outside system:bootstrappers:"
            );
        }
    }
    Some(JoinRole::Bootstrap {
        id: id.to_string(),
        groups,
    })
}

/// A Secret as JSON through the registry (so encryption at rest applies), `None` if absent.
pub(in crate::apiserver) async fn read_secret(
    state: &AppState,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, String> {
    let info = state
        .registry
        .find("", "v1", "secrets")
        .ok_or_else(|| "no secrets resource in the registry".to_string())?;
    let target = Target {
        info,
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        subresource: None,
        legacy_watch: false,
    };
    match handlers::get(state, &target, &Query::default(), Want::Json).await {
        Ok(response) => {
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .map_err(|e| format!("reading the Secret: {e}"))?;
            serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| format!("decoding the Secret: {e}"))
        }
        Err(e) if e.code == StatusCode::NOT_FOUND => Ok(None),
        Err(e) => Err(format!("reading the Secret: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn basic(creds: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(creds)
        )
    }

    #[test]
    fn secrets_are_taken_from_every_header_form() {
        let hash = "a".repeat(64);
        assert_eq!(presented_secret("Bearer s3cret").as_deref(), Some("s3cret"));
        assert_eq!(
            presented_secret(&format!("Bearer K10{hash}::server:s3cret")).as_deref(),
            Some("s3cret")
        );
        assert_eq!(
            presented_secret(&format!("Bearer K10{hash}::abcdef.0123456789abcdef")).as_deref(),
            Some("abcdef.0123456789abcdef")
        );
        assert_eq!(
            presented_secret(&basic("node:s3cret")).as_deref(),
            Some("s3cret")
        );
        assert_eq!(
            presented_secret(&basic("server:s3cret")).as_deref(),
            Some("s3cret")
        );
        assert_eq!(presented_secret(&basic("admin:s3cret")), None);
        assert_eq!(presented_secret("Basic !!!"), None);
        assert_eq!(presented_secret("Bearer "), None);
        assert_eq!(presented_secret("Digest x"), None);
    }

    #[test]
    fn bootstrap_token_form() {
        assert_eq!(
            bootstrap_token_id("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        for bad in [
            "abcdef.0123456789abcde",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdefg",
            "abcdef0123456789abcdef",
            "abcdef.0123456789abcde!",
        ] {
            assert_eq!(bootstrap_token_id(bad), None, "{bad}");
        }
    }

    fn bootstrap_secret(secret: &str, usage: &str, expiration: Option<&str>) -> Value {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let mut data = serde_json::json!({
            "token-id": b64("abcdef"),
            "token-secret": b64(secret),
            "usage-bootstrap-authentication": b64(usage),
            "auth-extra-groups": b64("system:bootstrappers:k3rs:default-node-token,system:masters"),
        });
        if let Some(e) = expiration {
            data["expiration"] = Value::String(b64(e));
        }
        serde_json::json!({"type": BOOTSTRAP_TOKEN_TYPE, "data": data})
    }

    #[test]
    fn bootstrap_secrets_are_checked_like_kube() {
        let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        let good = bootstrap_secret("0123456789abcdef", "true", Some("2026-01-02T00:00:00Z"));
        let role = check_bootstrap_secret(&good, "abcdef", "0123456789abcdef", now);
        assert_eq!(
            role,
            Some(JoinRole::Bootstrap {
                id: "abcdef".into(),
                groups: vec![
                    "system:bootstrappers".into(),
                    "system:bootstrappers:k3rs:default-node-token".into()
                ],
            }),
            "system:masters is not a bootstrap group"
        );
        assert!(!role.is_some_and(|r| r.may_join_servers()));
        assert_eq!(
            check_bootstrap_secret(&good, "abcdef", "0123456789abcdeX", now),
            None
        );
        let expired = bootstrap_secret("0123456789abcdef", "true", Some("2025-12-31T00:00:00Z"));
        assert_eq!(
            check_bootstrap_secret(&expired, "abcdef", "0123456789abcdef", now),
            None
        );
        let unusable = bootstrap_secret("0123456789abcdef", "false", None);
        assert_eq!(
            check_bootstrap_secret(&unusable, "abcdef", "0123456789abcdef", now),
            None
        );
        let mut wrong_type = bootstrap_secret("0123456789abcdef", "true", None);
        wrong_type["type"] = Value::String("Opaque".into());
        assert_eq!(
            check_bootstrap_secret(&wrong_type, "abcdef", "0123456789abcdef", now),
            None
        );
        let no_expiry = bootstrap_secret("0123456789abcdef", "true", None);
        assert!(check_bootstrap_secret(&no_expiry, "abcdef", "0123456789abcdef", now).is_some());
    }
}
