//! The endpoints a joining agent uses before it has any certificate, named as k3s names them
//! (`/v1-k3s/…` becomes `/v1-k3rs/…`):
//!
//! - `GET /cacerts` (no authentication): `server-ca.crt` exactly as on disk, so the agent can
//!   compare its SHA-256 with the `K10<hash>` part of the token before trusting anything else;
//! - `GET /v1-k3rs/server-ca.crt`, `/v1-k3rs/client-ca.crt`: the CAs;
//! - `GET /v1-k3rs/client-kubelet.crt`: a fresh kubelet client certificate
//!   (`system:node:<name>`, `system:nodes`), body = certificate PEM then key PEM;
//! - `GET /v1-k3rs/serving-kubelet.crt`: a fresh kubelet serving certificate for the node name,
//!   the `K3rs-Node-IP` addresses (comma-separated), `localhost` and the loopback addresses.
//!
//! Authentication: a join credential ([`join_tokens`]: the server token, the agent token or
//! a bootstrap token) as `Authorization: Bearer <token>` or k3s's `Authorization: Basic
//! node:<secret>`, or the node's own client certificate (renewal; an agent restarted after
//! its token was rotated or expired).
//! The certificate endpoints need `K3rs-Node-Name` and `K3rs-Node-Password`: the first join
//! of a node name stores a salted SHA-256 of the password in the Secret
//! `kube-system/<node>.node-password.k3rs` (through the registry's create path); a later
//! request for that name with another password is refused with 403 (k3s's node-password
//! check), so one machine cannot take over another's node name.
//!
//! Owns only these endpoints and the node-password Secrets. Signing is [`crate::pki::node`]'s.

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::apiserver::AppState;
use crate::apiserver::auth::authn::Identity;
use crate::apiserver::auth::join_tokens::{self, JoinRole};
use crate::apiserver::http::handlers;
use crate::apiserver::http::request::{Query, Target, Want};
use crate::pki::NodeSigner;

/// The unauthenticated CA endpoint.
pub const CACERTS_PATH: &str = "/cacerts";
/// Prefix of the authenticated join endpoints.
pub const JOIN_PREFIX: &str = "/v1-k3rs/";
/// Header naming the joining node.
pub const NODE_NAME_HEADER: &str = "K3rs-Node-Name";
/// Header carrying the node password.
pub const NODE_PASSWORD_HEADER: &str = "K3rs-Node-Password";
/// Header listing the node's IP addresses (comma-separated) for its serving certificate.
pub const NODE_IP_HEADER: &str = "K3rs-Node-IP";
/// Suffix of the node-password Secrets' names in `kube-system`.
pub const NODE_PASSWORD_SECRET_SUFFIX: &str = ".node-password.k3rs";
/// Type of the node-password Secrets.
const NODE_PASSWORD_SECRET_TYPE: &str = "k3rs.io/node-password";

/// Whether `path` is one of this module's endpoints.
pub fn handles(path: &str) -> bool {
    path == CACERTS_PATH || path.starts_with(JOIN_PREFIX)
}

/// A plain-text answer (what k3s's agent prints when it fails).
fn text(code: StatusCode, body: impl Into<String>) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body.into(),
    )
        .into_response()
}

/// Serves one request to a [`handles`] path.
pub async fn serve(
    state: &Arc<AppState>,
    signer: Option<&NodeSigner>,
    cert_identity: Option<&Identity>,
    method: &http::Method,
    path: &str,
    headers: &HeaderMap,
) -> Response {
    let Some(signer) = signer else {
        return text(StatusCode::NOT_FOUND, "this server does not accept nodes\n");
    };
    if method != http::Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is supported\n");
    }
    if path == CACERTS_PATH {
        return text(StatusCode::OK, signer.server_ca_pem());
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let authorization = header(header::AUTHORIZATION.as_str());
    let node_name = header(NODE_NAME_HEADER);
    let Some(who) = authorized(state, authorization, cert_identity, node_name).await else {
        return text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
    };
    let endpoint = &path[JOIN_PREFIX.len()..];
    match endpoint {
        "server-ca.crt" => return text(StatusCode::OK, signer.server_ca_pem()),
        "client-ca.crt" => return text(StatusCode::OK, signer.client_ca_pem()),
        "client-kubelet.crt" | "serving-kubelet.crt" => {}
        _ => return text(StatusCode::NOT_FOUND, format!("no such endpoint {path}\n")),
    }
    let Some(node_name) = node_name else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("the {NODE_NAME_HEADER} header is required\n"),
        );
    };
    if let Err(reason) = check_node_name(node_name) {
        return text(
            StatusCode::BAD_REQUEST,
            format!("invalid node name {node_name:?}: {reason}\n"),
        );
    }
    let Some(password) = header(NODE_PASSWORD_HEADER) else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("the {NODE_PASSWORD_HEADER} header is required\n"),
        );
    };
    if let Err(response) = verify_node_password(state, node_name, password).await {
        return response;
    }
    let issued = if endpoint == "client-kubelet.crt" {
        signer.issue_kubelet_client(node_name)
    } else {
        let mut ips = Vec::new();
        for part in header(NODE_IP_HEADER).unwrap_or("").split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            match part.parse::<IpAddr>() {
                Ok(ip) => ips.push(ip),
                Err(_) => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        format!("{NODE_IP_HEADER}: {part:?} is not an IP address\n"),
                    );
                }
            }
        }
        signer.issue_kubelet_serving(node_name, &ips)
    };
    match issued {
        Ok(cert) => {
            tracing::info!(node = node_name, endpoint, by = %who, "issued a node certificate");
            text(StatusCode::OK, format!("{}{}", cert.cert_pem, cert.key_pem))
        }
        Err(e) => {
            tracing::error!(node = node_name, error = %e, "cannot issue a node certificate");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot issue the certificate: {e}\n"),
            )
        }
    }
}

/// Who may call the join endpoints: the node's own client certificate (renewal, and an agent
/// restarted after its token was rotated or expired), or any join credential (server, agent
/// or bootstrap token; see [`join_tokens`]). A description for logs.
async fn authorized(
    state: &AppState,
    authorization: Option<&str>,
    cert_identity: Option<&Identity>,
    node_name: Option<&str>,
) -> Option<String> {
    if let (Some(identity), Some(node)) = (cert_identity, node_name)
        && cert_is_node(identity, node)
    {
        return Some(identity.user.clone());
    }
    let role: JoinRole = join_tokens::authenticate(state, authorization?).await?;
    Some(role.describe())
}

/// Whether a client certificate is node `node`'s.
fn cert_is_node(identity: &Identity, node: &str) -> bool {
    identity.user == format!("system:node:{node}")
        && identity.groups.iter().any(|g| g == "system:nodes")
}

fn check_node_name(name: &str) -> Result<(), String> {
    if name.len() > 253 {
        return Err("longer than 253 characters".to_string());
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err("node names must be lower-case RFC 1123 subdomains".to_string());
        }
    }
    Ok(())
}

/// `$sha256$<salt hex>$<hex of SHA-256(salt ‖ password)>`. The password is 128 random bits,
/// so a fast salted hash is enough; the salt keeps equal passwords from looking equal.
pub(in crate::apiserver) fn hash_password(password: &str, salt: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(password.as_bytes());
    format!(
        "$sha256${}${}",
        hex::encode(salt),
        hex::encode(hasher.finalize())
    )
}

pub(in crate::apiserver) fn password_matches(stored: &str, password: &str) -> bool {
    let mut parts = stored.trim().split('$');
    let (Some(""), Some("sha256"), Some(salt), Some(_), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    let Ok(salt) = hex::decode(salt) else {
        return false;
    };
    let expected = hash_password(password, &salt);
    expected.len() == stored.len()
        && expected
            .bytes()
            .zip(stored.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// The server's own node (its embedded agent) proves its node password like any agent: the
/// first start stores its Secret, a later start with another password is refused.
pub async fn register_own_node(
    state: &AppState,
    node_name: &str,
    password: &str,
) -> Result<(), (StatusCode, String)> {
    match verify_node_password(state, node_name, password).await {
        Ok(()) => Ok(()),
        Err(response) => {
            let code = response.status();
            let body = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .map(|b| String::from_utf8_lossy(&b).trim().to_string())
                .unwrap_or_default();
            Err((code, body))
        }
    }
}

/// Checks `password` against the node's Secret, creating the Secret on first join.
async fn verify_node_password(
    state: &AppState,
    node_name: &str,
    password: &str,
) -> Result<(), Response> {
    let internal = |what: String| {
        tracing::error!(node = node_name, error = %what, "node password check failed");
        text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot check the node password: {what}\n"),
        )
    };
    let Some(info) = state.registry.find("", "v1", "secrets") else {
        return Err(internal("no secrets resource in the registry".to_string()));
    };
    let secret_name = format!("{node_name}{NODE_PASSWORD_SECRET_SUFFIX}");
    let target = Target {
        info,
        namespace: Some("kube-system".into()),
        name: Some(secret_name.clone()),
        subresource: None,
        legacy_watch: false,
    };
    let refused = || {
        tracing::warn!(
            node = node_name,
            "refused a node with a different node password"
        );
        text(
            StatusCode::FORBIDDEN,
            format!(
                "Node password rejected, duplicate hostname or contents of \
                 '/etc/k3rs/node/password' may not match server node-passwd entry: a node \
                 named {node_name:?} already joined with another password; use another \
                 --node-name, or delete the Secret kube-system/{secret_name} (and the Node) \
                 if this machine replaces it\n"
            ),
        )
    };
    match handlers::get(state, &target, &Query::default(), Want::Json).await {
        Ok(response) => {
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .map_err(|e| internal(format!("reading the Secret: {e}")))?;
            let secret: Value = serde_json::from_slice(&body)
                .map_err(|e| internal(format!("decoding the Secret: {e}")))?;
            let stored = secret
                .pointer("/data/hash")
                .and_then(Value::as_str)
                .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .unwrap_or_default();
            if password_matches(&stored, password) {
                Ok(())
            } else {
                Err(refused())
            }
        }
        Err(e) if e.code == StatusCode::NOT_FOUND => {
            let salt = crate::pki::token::random_secret()
                .map_err(|e| internal(format!("generating a salt: {e}")))?;
            let hash = hash_password(password, salt.as_bytes());
            let secret = json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": secret_name, "namespace": "kube-system"},
                "type": NODE_PASSWORD_SECRET_TYPE,
                "immutable": true,
                "data": {"hash": base64::engine::general_purpose::STANDARD.encode(hash)},
            });
            let create_target = Target {
                name: None,
                ..target
            };
            match handlers::create_object(
                state,
                &create_target,
                &Query::default(),
                secret,
                Vec::new(),
                Some("k3rs"),
            )
            .await
            {
                Ok(_) => {
                    tracing::info!(node = node_name, "stored the password of a new node");
                    Ok(())
                }
                // Two first joins raced: the winner's password decides.
                Err(e) if e.code == StatusCode::CONFLICT => {
                    Box::pin(verify_node_password(state, node_name, password)).await
                }
                Err(e) => Err(internal(format!("creating the Secret: {e}"))),
            }
        }
        Err(e) => Err(internal(format!("reading the Secret: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_hashes_are_salted_and_verifiable() {
        let a = hash_password("pw", b"salt-1");
        let b = hash_password("pw", b"salt-2");
        assert_ne!(a, b);
        assert!(password_matches(&a, "pw"));
        assert!(password_matches(&b, "pw"));
        assert!(!password_matches(&a, "other"));
        assert!(!password_matches("", "pw"));
        assert!(!password_matches("$sha256$zz$00", "pw"));
    }

    #[test]
    fn node_certificates_authenticate_their_own_node_only() {
        let node = Identity {
            user: "system:node:n1".into(),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
        };
        assert!(cert_is_node(&node, "n1"));
        assert!(!cert_is_node(&node, "n2"));
        let admin = Identity {
            user: "system:node:n1".into(),
            groups: vec!["system:masters".into()],
        };
        assert!(!cert_is_node(&admin, "n1"));
    }

    #[test]
    fn only_join_paths_are_handled() {
        assert!(handles("/cacerts"));
        assert!(handles("/v1-k3rs/client-kubelet.crt"));
        assert!(!handles("/api/v1/nodes"));
        assert!(!handles("/cacerts/x"));
    }
}
