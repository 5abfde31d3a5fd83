//! Service-account tokens: the signing key, the `serviceaccounts/<name>/token` subresource
//! (TokenRequest) and the verification of the JWTs it issues.
//!
//! Tokens are ES256 JWTs (ECDSA P-256 with `ring`) carrying the claims kube-apiserver sets:
//! `iss`, `sub` (`system:serviceaccount:<ns>:<name>`), `aud`, `exp`, `iat`, `nbf`, `jti` and the
//! private `kubernetes.io` claim with the namespace, the service account's name and uid and,
//! for bound tokens, the pod's. The key is a PKCS#8 file (`<data-dir>/server/tls/service.key`,
//! mode 0600) made at first start and reused. A token is valid while its signature, `iss`,
//! audience and `nbf`/`exp` check out *and* the objects it names still exist with the same
//! uids (a deleted pod's token stops working, as with bound tokens in Kubernetes).
//!
//! A node's request goes through NodeRestriction first (`authz::node::admit_token_request`);
//! `service-account-max-token-expiration` caps `expirationSeconds` as kube-apiserver does.
//! Key rotation: `service.key` may hold, after the one `PRIVATE KEY` that signs, further
//! keys (`PUBLIC KEY` in SubjectPublicKeyInfo form, or more `PRIVATE KEY`s) that are only
//! accepted for verification, as may the files of `--kube-apiserver-arg
//! service-account-key-file=a,b` (kube-apiserver accepts several). [`rotate_key_file`]
//! writes a new signing key and keeps the old one's public half; removing that block ends
//! the old tokens.
//!
//! Owns the key file and token wire format; reads service accounts and pods from the watch
//! cache only.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::apiserver::AppState;
use crate::apiserver::http::handlers::{ApiResult, json_response};
use crate::apiserver::http::request::Target;
use crate::apiserver::http::status::{ApiError, StatusCause};
use crate::apiserver::storage::objects;

/// The issuer and default audience, as k3s configures kube-apiserver.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// TokenRequest's default `expirationSeconds`, and the shortest it allows.
const DEFAULT_EXPIRATION: i64 = 3600;
const MIN_EXPIRATION: i64 = 600;
/// The longest `expirationSeconds` TokenRequest validation accepts (2^32).
const MAX_EXPIRATION: i64 = 1 << 32;
/// Clock skew tolerated on `nbf`/`iat` between nodes.
const LEEWAY: i64 = 60;

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("reading the service-account key {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the service-account key {path}: {reason}")]
    Write { path: String, reason: String },
    #[error("the service-account key {path} is not a PKCS#8 P-256 key: {reason}")]
    BadKey { path: String, reason: String },
    #[error("generating the service-account key failed")]
    Generate,
    #[error("token is malformed")]
    Malformed,
    #[error("token signature is invalid")]
    Signature,
    #[error("token has expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
    #[error("token has an unknown issuer or audience")]
    Audience,
}

/// The `kubernetes.io` claim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KubernetesClaim {
    pub namespace: String,
    pub serviceaccount: ObjectClaim,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectClaim>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectClaim {
    pub name: String,
    pub uid: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub nbf: i64,
    #[serde(default)]
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaim,
}

/// The signing key and what verification needs.
pub struct TokenSigner {
    key: EcdsaKeyPair,
    /// Further public keys (uncompressed P-256 points) accepted for verification only.
    verify_only: Vec<Vec<u8>>,
    /// The key id: the unpadded base64url SHA-256 of the public key, as kube-apiserver uses.
    kid: String,
    rng: SystemRandom,
}

fn pem_encode(der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut out = String::from("-----BEGIN PRIVATE KEY-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END PRIVATE KEY-----\n");
    out
}

/// The DER prefix of a P-256 SubjectPublicKeyInfo before its 65-byte uncompressed point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

fn pem_block(label: &str, der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The PEM blocks of `text` as (label, DER); `None` if a block is not base64 or unterminated.
fn pem_blocks(text: &str) -> Option<Vec<(String, Vec<u8>)>> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines().map(str::trim) {
        if let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        {
            if current.is_some() {
                return None;
            }
            current = Some((label.to_string(), String::new()));
        } else if line.starts_with("-----END ") {
            let (label, body) = current.take()?;
            blocks.push((label, STANDARD.decode(body).ok()?));
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
        }
    }
    if current.is_some() {
        None
    } else {
        Some(blocks)
    }
}

fn pem_decode(text: &str) -> Option<Vec<u8>> {
    pem_blocks(text)?
        .into_iter()
        .find(|(label, _)| label == "PRIVATE KEY")
        .map(|(_, der)| der)
}

/// The public point of a P-256 key block (`PRIVATE KEY` PKCS#8 or `PUBLIC KEY` SPKI).
fn public_point(label: &str, der: &[u8]) -> Result<Vec<u8>, String> {
    match label {
        "PRIVATE KEY" => {
            let key = EcdsaKeyPair::from_pkcs8(
                &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                der,
                &SystemRandom::new(),
            )
            .map_err(|e| format!("not a PKCS#8 P-256 key: {e}"))?;
            Ok(key.public_key().as_ref().to_vec())
        }
        "PUBLIC KEY" => der
            .strip_prefix(&P256_SPKI_PREFIX[..])
            .filter(|point| point.len() == 65 && point[0] == 4)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| "not a P-256 public key".to_string()),
        other => Err(format!("unsupported PEM block {other:?}")),
    }
}

/// The verification keys of a key file: every key block in it. Blocks that cannot be used
/// are skipped with a warning.
fn verification_keys(path: &Path) -> Result<Vec<Vec<u8>>, TokenError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
        path: shown.clone(),
        source,
    })?;
    let blocks = pem_blocks(&text).ok_or_else(|| TokenError::BadKey {
        path: shown.clone(),
        reason: "not PEM".into(),
    })?;
    let mut keys = Vec::new();
    for (label, der) in blocks {
        match public_point(&label, &der) {
            Ok(point) => keys.push(point),
            Err(reason) => {
                tracing::warn!(path = %shown, %reason, "skipping a service-account key block")
            }
        }
    }
    Ok(keys)
}

/// Rotates the key file at `path`: a new signing key, followed by the public halves of every
/// key the file held (so tokens signed by them still verify until those blocks are removed).
/// Returns how many old keys are kept for verification.
pub fn rotate_key_file(path: &Path) -> Result<usize, TokenError> {
    let shown = path.display().to_string();
    let old = verification_keys(path)?;
    let rng = SystemRandom::new();
    let doc = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
        .map_err(|_| TokenError::Generate)?;
    let mut text = pem_encode(doc.as_ref());
    let mut kept = Vec::new();
    for point in old {
        if !kept.contains(&point) {
            let mut spki = P256_SPKI_PREFIX.to_vec();
            spki.extend_from_slice(&point);
            text.push_str(&pem_block("PUBLIC KEY", &spki));
            kept.push(point);
        }
    }
    crate::pki::files::write_atomic(path, text.as_bytes(), 0o600).map_err(|e| {
        TokenError::Write {
            path: shown,
            reason: e.to_string(),
        }
    })?;
    Ok(kept.len())
}

impl TokenSigner {
    /// Loads the key at `path`, creating it (0600) on first start.
    pub fn load_or_create(path: &Path) -> Result<TokenSigner, TokenError> {
        let shown = path.display().to_string();
        let rng = SystemRandom::new();
        let pkcs8 = match std::fs::read_to_string(path) {
            Ok(text) => pem_decode(&text).ok_or_else(|| TokenError::BadKey {
                path: shown.clone(),
                reason: "not PEM".into(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let doc =
                    EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                        .map_err(|_| TokenError::Generate)?;
                if let Some(dir) = path.parent() {
                    crate::pki::files::create_private_dir(dir).map_err(|e| TokenError::Write {
                        path: shown.clone(),
                        reason: e.to_string(),
                    })?;
                }
                crate::pki::files::write_atomic(path, pem_encode(doc.as_ref()).as_bytes(), 0o600)
                    .map_err(|e| TokenError::Write {
                    path: shown.clone(),
                    reason: e.to_string(),
                })?;
                doc.as_ref().to_vec()
            }
            Err(source) => {
                return Err(TokenError::Read {
                    path: shown,
                    source,
                });
            }
        };
        let mut signer = Self::from_pkcs8(&pkcs8).map_err(|reason| TokenError::BadKey {
            path: shown,
            reason,
        })?;
        for point in verification_keys(path)? {
            signer.accept(point);
        }
        Ok(signer)
    }

    /// [`load_or_create`](Self::load_or_create), also accepting for verification the keys
    /// in `extra_files` (`service-account-key-file`; each must be readable).
    pub fn load_with_keys(
        path: &Path,
        extra_files: &[std::path::PathBuf],
    ) -> Result<TokenSigner, TokenError> {
        let mut signer = Self::load_or_create(path)?;
        for file in extra_files {
            let keys = verification_keys(file)?;
            if keys.is_empty() {
                return Err(TokenError::BadKey {
                    path: file.display().to_string(),
                    reason: "no usable P-256 key in it".into(),
                });
            }
            for point in keys {
                signer.accept(point);
            }
        }
        if !signer.verify_only.is_empty() {
            tracing::info!(
                keys = signer.verify_only.len(),
                "accepting service-account tokens of previous keys"
            );
        }
        Ok(signer)
    }

    /// Accepts tokens signed by the key with public point `point`.
    fn accept(&mut self, point: Vec<u8>) {
        if point != self.key.public_key().as_ref() && !self.verify_only.contains(&point) {
            self.verify_only.push(point);
        }
    }

    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<TokenSigner, String> {
        let rng = SystemRandom::new();
        let key =
            EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &rng)
                .map_err(|e| e.to_string())?;
        let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
        let kid = URL_SAFE_NO_PAD.encode(digest.as_ref());
        Ok(TokenSigner {
            key,
            verify_only: Vec::new(),
            kid,
            rng,
        })
    }

    /// Signs `claims` into a compact JWT.
    pub fn sign(&self, claims: &Claims) -> Result<String, TokenError> {
        let header = json!({"alg": "ES256", "kid": self.kid});
        let claims = serde_json::to_vec(claims).map_err(|_| TokenError::Malformed)?;
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims)
        );
        let sig = self
            .key
            .sign(&self.rng, input.as_bytes())
            .map_err(|_| TokenError::Generate)?;
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref())))
    }

    /// Checks signature, issuer, audience and time of `token` (at unix time `now`); whether the
    /// named objects still exist is the caller's check.
    pub fn verify(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let header: Value = URL_SAFE_NO_PAD
            .decode(header)
            .ok()
            .and_then(|h| serde_json::from_slice(&h).ok())
            .ok_or(TokenError::Malformed)?;
        if header["alg"] != "ES256" {
            return Err(TokenError::Signature);
        }
        let sig = URL_SAFE_NO_PAD
            .decode(sig)
            .map_err(|_| TokenError::Malformed)?;
        let signed = &token[..header_payload_len(token)];
        let valid = std::iter::once(self.key.public_key().as_ref())
            .chain(self.verify_only.iter().map(Vec::as_slice))
            .any(|public| {
                signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, public)
                    .verify(signed.as_bytes(), &sig)
                    .is_ok()
            });
        if !valid {
            return Err(TokenError::Signature);
        }
        let claims: Claims = URL_SAFE_NO_PAD
            .decode(payload)
            .ok()
            .and_then(|p| serde_json::from_slice(&p).ok())
            .ok_or(TokenError::Malformed)?;
        if claims.iss != ISSUER || !claims.aud.iter().any(|a| a == ISSUER) {
            return Err(TokenError::Audience);
        }
        if now >= claims.exp {
            return Err(TokenError::Expired);
        }
        if now + LEEWAY < claims.nbf {
            return Err(TokenError::NotYetValid);
        }
        Ok(claims)
    }
}

/// `header.payload` of a compact JWT (everything before the last dot).
fn header_payload_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(0)
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn cached(state: &AppState, resource: &str, namespace: &str, name: &str) -> Option<Value> {
    let object = state
        .cache
        .get(&format!("/registry/{resource}/{namespace}/{name}"))?;
    serde_json::from_slice(&object.bytes).ok()
}

fn uid_of(object: &Value) -> String {
    object["metadata"]["uid"].as_str().unwrap_or("").to_string()
}

/// The identity of a valid service-account token: its signature and times check out and the
/// service account (and the pod it is bound to) still exist with the uids it names.
pub fn authenticate(state: &AppState, token: &str) -> Option<super::authn::Identity> {
    let signer = state.sa_tokens.as_ref()?;
    let claims = match signer.verify(token, now_unix()) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(error = %e, "service-account token refused");
            return None;
        }
    };
    let k = &claims.kubernetes;
    let account = cached(
        state,
        "serviceaccounts",
        &k.namespace,
        &k.serviceaccount.name,
    )?;
    if uid_of(&account) != k.serviceaccount.uid {
        tracing::debug!(sub = %claims.sub, "service-account token of a re-created account");
        return None;
    }
    if let Some(pod) = &k.pod {
        let current = cached(state, "pods", &k.namespace, &pod.name)?;
        if uid_of(&current) != pod.uid {
            tracing::debug!(sub = %claims.sub, pod = %pod.name, "token bound to a pod that is gone");
            return None;
        }
    }
    Some(super::authn::Identity {
        user: format!(
            "system:serviceaccount:{}:{}",
            k.namespace, k.serviceaccount.name
        ),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", k.namespace),
            "system:authenticated".into(),
        ],
    })
}

/// Where the ServiceAccount admission mounts the API credentials in every container.
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The ConfigMap with the cluster CA that every namespace gets.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// How often admission looks the `default` ServiceAccount up again before refusing a pod: the
/// serviceaccount controller creates it right after its namespace, and a pod created in the
/// same moment must not lose that race (kube-apiserver tries 10 times, 100–200 ms apart).
const DEFAULT_ACCOUNT_ATTEMPTS: u32 = 10;
const ACCOUNT_RETRY: std::time::Duration = std::time::Duration::from_millis(150);

/// The pod's ServiceAccount: from the watch cache, else from the store itself (the cache may
/// not have caught up with a just-created account), retried for `default` as above. `None`
/// when it does not exist.
async fn find_service_account(
    state: &AppState,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, ApiError> {
    if let Some(sa) = cached(state, "serviceaccounts", namespace, name) {
        return Ok(Some(sa));
    }
    let key = format!("/registry/serviceaccounts/{namespace}/{name}");
    let attempts = if name == "default" {
        DEFAULT_ACCOUNT_ATTEMPTS
    } else {
        1
    };
    for attempt in 0..attempts {
        if attempt > 0 {
            tokio::time::sleep(ACCOUNT_RETRY).await;
        }
        let stored = state.store.get(key.as_bytes()).await.map_err(|e| {
            ApiError::internal(format!(
                "error looking up service account {namespace}/{name}: {e}"
            ))
        })?;
        if let Some(kv) = stored {
            return Ok(serde_json::from_slice(&kv.value).ok());
        }
    }
    Ok(None)
}

/// The ServiceAccount admission for a new pod, as kube-apiserver's: `serviceAccountName`
/// defaults to `default` and must name an existing ServiceAccount (otherwise the pod is
/// forbidden, worded as Kubernetes words it; mirror pods are exempt); unless the pod or its
/// account sets `automountServiceAccountToken: false`, or a container already mounts
/// something at [`MOUNT_PATH`], a projected volume `kube-api-access-<5 chars>` (a bound token,
/// `kube-root-ca.crt`'s `ca.crt`, the namespace) is added and mounted read-only in every
/// container and init container.
pub async fn admit_pod(state: &AppState, pod: &mut Value) -> Result<(), ApiError> {
    let namespace = pod["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    let mirror = pod
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some();
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if mirror {
        return Ok(());
    }
    let account = match spec.get("serviceAccountName").and_then(Value::as_str) {
        Some(a) if !a.is_empty() => a.to_string(),
        _ => {
            spec.insert("serviceAccountName".into(), json!("default"));
            "default".to_string()
        }
    };
    let Some(service_account) = find_service_account(state, &namespace, &account).await? else {
        return Err(ApiError::forbidden(format!(
            "pods \"{pod_name}\" is forbidden: error looking up service account \
             {namespace}/{account}: serviceaccount \"{account}\" not found"
        )));
    };
    let automount = match spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
    {
        Some(choice) => choice,
        None => service_account["automountServiceAccountToken"]
            .as_bool()
            .unwrap_or(true),
    };
    if !automount {
        return Ok(());
    }
    let kinds = ["initContainers", "containers", "ephemeralContainers"];
    let already_mounted = kinds.iter().any(|kind| {
        spec.get(*kind)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|c| c["volumeMounts"].as_array().into_iter().flatten())
            .any(|m| m["mountPath"].as_str().map(|p| p.trim_end_matches('/')) == Some(MOUNT_PATH))
    });
    if already_mounted {
        return Ok(());
    }
    let name = format!("kube-api-access-{}", objects::name_suffix());
    let volume = json!({
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]
        }
    });
    match spec.get_mut("volumes").and_then(Value::as_array_mut) {
        Some(volumes) => volumes.push(volume),
        None => {
            spec.insert("volumes".into(), json!([volume]));
        }
    }
    let mount = json!({"name": name, "readOnly": true, "mountPath": MOUNT_PATH});
    for kind in ["initContainers", "containers"] {
        for container in spec
            .get_mut(kind)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            match container
                .get_mut("volumeMounts")
                .and_then(Value::as_array_mut)
            {
                Some(mounts) => mounts.push(mount.clone()),
                None => container["volumeMounts"] = json!([mount]),
            }
        }
    }
    Ok(())
}

fn required(field: &str, message: &str) -> StatusCause {
    StatusCause {
        reason: Some("FieldValueInvalid".into()),
        message: Some(message.into()),
        field: Some(field.into()),
    }
}

/// `POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`: a TokenRequest in, the same
/// TokenRequest with `status.token` and `status.expirationTimestamp` out (201).
pub async fn create(state: &AppState, target: &Target, request: &Value) -> ApiResult {
    let namespace = target.namespace.clone().unwrap_or_default();
    let name = target.name.clone().unwrap_or_default();
    let signer = state.sa_tokens.as_ref().ok_or_else(|| {
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "service-account token signing is not configured",
        )
    })?;
    // NodeRestriction: a node's token must be bound to a pod on that node.
    if let Ok(Err(denied)) = super::authz::escalation::REQUESTER.try_with(|who| {
        super::authz::node::admit_token_request(&state.cache, who, &namespace, &name, request)
    }) {
        return Err(denied);
    }
    let account = cached(state, "serviceaccounts", &namespace, &name)
        .ok_or_else(|| ApiError::not_found("", "serviceaccounts", &name))?;
    let spec = &request["spec"];
    let requested = spec["expirationSeconds"]
        .as_i64()
        .unwrap_or(DEFAULT_EXPIRATION);
    let too_short = requested < MIN_EXPIRATION;
    if too_short || requested > MAX_EXPIRATION {
        return Err(ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            &name,
            vec![required(
                "spec.expirationSeconds",
                if too_short {
                    "may not specify a duration less than 10 minutes"
                } else {
                    "may not specify a duration larger than 2^32 seconds"
                },
            )],
        ));
    }
    let (expiration, warning) =
        cap_expiration(requested, state.config.admission.max_token_expiration);
    let mut audiences: Vec<String> = spec["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences.push(ISSUER.to_string());
    }
    let pod = match spec.get("boundObjectRef").filter(|r| !r.is_null()) {
        None => None,
        Some(bound) => {
            let kind = bound["kind"].as_str().unwrap_or("");
            let bound_name = bound["name"].as_str().unwrap_or("");
            if kind != "Pod" {
                return Err(ApiError::invalid(
                    "authentication.k8s.io",
                    "TokenRequest",
                    &name,
                    vec![required(
                        "spec.boundObjectRef.kind",
                        "supported values: \"Pod\"",
                    )],
                ));
            }
            let current = cached(state, "pods", &namespace, bound_name)
                .ok_or_else(|| ApiError::not_found("", "pods", bound_name))?;
            let uid = uid_of(&current);
            if let Some(wanted) = bound["uid"].as_str().filter(|u| !u.is_empty())
                && wanted != uid
            {
                return Err(ApiError::conflict(
                    "",
                    "pods",
                    bound_name,
                    &format!(
                        "the UID in the bound object reference ({wanted}) does not match the UID in record ({uid})"
                    ),
                ));
            }
            let pod_account = current["spec"]["serviceAccountName"]
                .as_str()
                .unwrap_or("default");
            if pod_account != name {
                return Err(ApiError::invalid(
                    "authentication.k8s.io",
                    "TokenRequest",
                    &name,
                    vec![required(
                        "spec.boundObjectRef.name",
                        &format!("pod {bound_name} uses service account {pod_account}"),
                    )],
                ));
            }
            Some(ObjectClaim {
                name: bound_name.to_string(),
                uid,
            })
        }
    };
    let now = now_unix();
    let claims = Claims {
        iss: ISSUER.to_string(),
        sub: format!("system:serviceaccount:{namespace}:{name}"),
        aud: audiences.clone(),
        exp: now + expiration,
        iat: now,
        nbf: now,
        jti: objects::new_uid(),
        kubernetes: KubernetesClaim {
            namespace: namespace.clone(),
            serviceaccount: ObjectClaim {
                name: name.clone(),
                uid: uid_of(&account),
            },
            pod,
        },
    };
    let token = signer
        .sign(&claims)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut response = request.clone();
    response["apiVersion"] = json!("authentication.k8s.io/v1");
    response["kind"] = json!("TokenRequest");
    response["metadata"]["name"] = json!(name);
    response["metadata"]["namespace"] = json!(namespace);
    response["metadata"]["creationTimestamp"] = json!(objects::format_rfc3339(now));
    response["spec"]["audiences"] = json!(audiences);
    response["spec"]["expirationSeconds"] = json!(expiration);
    response["status"] = json!({
        "token": token,
        "expirationTimestamp": objects::format_rfc3339(now + expiration),
    });
    Ok(crate::apiserver::http::handlers::with_warnings(
        json_response(
            axum::http::StatusCode::CREATED,
            serde_json::to_vec(&response).unwrap_or_default(),
        ),
        &warning.into_iter().collect::<Vec<_>>(),
    ))
}

/// kube's `service-account-max-token-expiration`: a longer request is shortened to the
/// cap, with the warning kube gives. Returns the expiration to issue and the warning.
fn cap_expiration(requested: i64, max: Option<std::time::Duration>) -> (i64, Option<String>) {
    let Some(max) = max
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .filter(|m| *m > 0)
    else {
        return (requested, None);
    };
    if requested <= max {
        return (requested, None);
    }
    (
        max,
        Some(format!(
            "requested expiration of {requested} seconds shortened to {max} seconds"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> TokenSigner {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("key");
        TokenSigner::from_pkcs8(doc.as_ref()).expect("signer")
    }

    fn claims(now: i64) -> Claims {
        Claims {
            iss: ISSUER.into(),
            sub: "system:serviceaccount:default:app".into(),
            aud: vec![ISSUER.into()],
            exp: now + 600,
            iat: now,
            nbf: now,
            jti: "j".into(),
            kubernetes: KubernetesClaim {
                namespace: "default".into(),
                serviceaccount: ObjectClaim {
                    name: "app".into(),
                    uid: "u1".into(),
                },
                pod: None,
            },
        }
    }

    #[test]
    fn signs_and_verifies() {
        let s = signer();
        let now = 1_700_000_000;
        let token = s.sign(&claims(now)).expect("sign");
        assert_eq!(s.verify(&token, now + 1).expect("valid"), claims(now));
        let header: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(token.split('.').next().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(header["alg"], "ES256");
        assert!(matches!(
            s.verify(&token, now + 600),
            Err(TokenError::Expired)
        ));
        assert!(matches!(
            s.verify(&token, now - 3600),
            Err(TokenError::NotYetValid)
        ));
    }

    #[test]
    fn refuses_tampered_foreign_and_wrong_audience() {
        let s = signer();
        let now = 1_700_000_000;
        let token = s.sign(&claims(now)).expect("sign");
        // Another payload under the same signature.
        let mut forged = claims(now);
        forged.kubernetes.namespace = "kube-system".into();
        let forged_payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        let parts: Vec<&str> = token.split('.').collect();
        let tampered = format!("{}.{}.{}", parts[0], forged_payload, parts[2]);
        assert!(matches!(
            s.verify(&tampered, now),
            Err(TokenError::Signature)
        ));
        // Another key's token.
        let other = signer().sign(&claims(now)).expect("sign");
        assert!(matches!(s.verify(&other, now), Err(TokenError::Signature)));
        let mut elsewhere = claims(now);
        elsewhere.aud = vec!["vault".into()];
        let token = s.sign(&elsewhere).expect("sign");
        assert!(matches!(s.verify(&token, now), Err(TokenError::Audience)));
        assert!(matches!(s.verify("a.b", now), Err(TokenError::Malformed)));
    }

    #[test]
    fn key_file_is_created_once_and_reused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("tls/service.key");
        let first = TokenSigner::load_or_create(&path).expect("create");
        let token = first.sign(&claims(1_700_000_000)).expect("sign");
        let second = TokenSigner::load_or_create(&path).expect("reuse");
        assert!(second.verify(&token, 1_700_000_001).is_ok());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&path, "junk").expect("write");
        assert!(matches!(
            TokenSigner::load_or_create(&path),
            Err(TokenError::BadKey { .. })
        ));
        std::fs::write(&path, "-----BEGIN PUBLIC KEY-----\nAAAA\n").expect("write");
        assert!(matches!(
            TokenSigner::load_or_create(&path),
            Err(TokenError::BadKey { .. })
        ));
    }

    #[test]
    fn rotation_keeps_old_tokens_until_the_old_key_is_removed() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("service.key");
        let now = 1_700_000_000;
        let first = TokenSigner::load_or_create(&path).expect("create");
        let old_token = first.sign(&claims(now)).expect("sign");
        assert_eq!(rotate_key_file(&path).expect("rotate"), 1);
        let rotated = TokenSigner::load_or_create(&path).expect("reload");
        assert_ne!(rotated.kid, first.kid, "signs with the new key");
        assert!(
            rotated.verify(&old_token, now + 1).is_ok(),
            "old key still listed"
        );
        let new_token = rotated.sign(&claims(now)).expect("sign");
        assert!(first.verify(&new_token, now + 1).is_err());
        // A second rotation keeps both previous keys.
        assert_eq!(rotate_key_file(&path).expect("rotate"), 2);
        let twice = TokenSigner::load_or_create(&path).expect("reload");
        assert!(twice.verify(&old_token, now + 1).is_ok());
        assert!(twice.verify(&new_token, now + 1).is_ok());
        // Dropping the PUBLIC KEY blocks ends the old tokens.
        let text = std::fs::read_to_string(&path).expect("read");
        let end = "-----END PRIVATE KEY-----\n";
        let only_current = &text[..text.find(end).expect("private block") + end.len()];
        std::fs::write(&path, only_current).expect("write");
        let current = TokenSigner::load_or_create(&path).expect("reload");
        assert!(matches!(
            current.verify(&old_token, now + 1),
            Err(TokenError::Signature)
        ));
        assert!(matches!(
            current.verify(&new_token, now + 1),
            Err(TokenError::Signature)
        ));

        // Or the old key in a file of its own (service-account-key-file).
        let old_file = dir.path().join("old.pub");
        std::fs::write(&old_file, only_current).expect("write");
        let other = dir.path().join("other.key");
        let with = TokenSigner::load_with_keys(&other, &[old_file]).expect("with extra");
        let by_old = current.sign(&claims(now)).expect("sign");
        assert!(with.verify(&by_old, now + 1).is_ok());
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").expect("write");
        assert!(TokenSigner::load_with_keys(&other, &[empty]).is_err());
    }

    #[test]
    fn the_expiration_cap_shortens_with_kubes_warning() {
        let hour = Some(std::time::Duration::from_secs(3600));
        assert_eq!(cap_expiration(7200, None), (7200, None));
        assert_eq!(cap_expiration(3600, hour), (3600, None));
        assert_eq!(
            cap_expiration(7200, hour),
            (
                3600,
                Some("requested expiration of 7200 seconds shortened to 3600 seconds".into())
            )
        );
    }
}
