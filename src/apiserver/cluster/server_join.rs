//! The endpoints servers use to form one cluster (k3s: `/v1-k3s/server-bootstrap` and its
//! etcd member calls), on the API port:
//!
//! - `GET /v1-k3rs/server-bootstrap`: the cluster's bootstrap data (CA certificates and
//!   keys, the service-account key, the peer CA; see [`crate::pki::bootstrap::BootstrapData`]) and the
//!   critical settings every server must share (cluster and service CIDRs, cluster DNS and
//!   domain), as `{"bootstrap": …, "config": {…}}`;
//! - `GET /v1-k3rs/members`: the raft group's members;
//! - `POST /v1-k3rs/members` with `{"name": …, "peerURL": "https://<ip>:2380"}`: adds a
//!   server as a learner (the leader promotes it once it has caught up) and answers with
//!   its id and every member's peer URL, which the new server needs to start its store;
//! - `DELETE /v1-k3rs/members/<name>`: removes a member (refused when the voters left would
//!   have no reachable quorum).
//!
//! - `PUT /v1-k3rs/token` with `{"token": <new>}` (`k3rs token rotate`): replaces the server
//!   token cluster-wide (see `join_tokens::rotate`).
//!
//! Only the server token may call them (k3s's `server` role): `Authorization: Basic
//! server:<secret>`, the token as a bearer token, or an admin client certificate
//! (`system:masters`, for the members list and removal). A server that was not started
//! with `--cluster-init` (or joined) answers 400 with what to do.
//!
//! Owns these endpoints only; membership itself is the store's.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::apiserver::AppState;
use crate::apiserver::auth::authn::Identity;
use crate::store::{Member, StoreError};

/// Path of the bootstrap data endpoint.
pub const BOOTSTRAP_PATH: &str = "/v1-k3rs/server-bootstrap";
/// Path of the member list (and prefix of one member).
pub const MEMBERS_PATH: &str = "/v1-k3rs/members";
/// Path of the server token (`PUT` rotates it: `k3rs token rotate`).
pub const TOKEN_PATH: &str = "/v1-k3rs/token";

/// Whether `path` is one of this module's endpoints.
pub fn handles(path: &str) -> bool {
    path == BOOTSTRAP_PATH
        || path == MEMBERS_PATH
        || path == TOKEN_PATH
        || path.starts_with("/v1-k3rs/members/")
}

/// What a joining server learns from `server-bootstrap`.
#[derive(Debug, Serialize, Deserialize)]
pub struct BootstrapResponse {
    pub bootstrap: crate::pki::bootstrap::BootstrapData,
    /// The settings that must be equal on every server, by flag name.
    pub config: BTreeMap<String, String>,
}

/// The body of `PUT /v1-k3rs/token`.
#[derive(Debug, Serialize, Deserialize)]
pub struct RotateRequest {
    /// The new server token: a bare secret or `K10<hash>::server:<secret>`.
    pub token: String,
}

/// A request to add a server.
#[derive(Debug, Serialize, Deserialize)]
pub struct JoinRequest {
    pub name: String,
    #[serde(rename = "peerURL")]
    pub peer_url: String,
}

/// One member as the endpoints show it (ids as hex, as etcd prints them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberView {
    pub id: String,
    pub name: String,
    #[serde(rename = "peerURL")]
    pub peer_url: String,
    pub role: String,
    #[serde(rename = "isLeader")]
    pub is_leader: bool,
}

/// The answer to a join: the new member and every member.
#[derive(Debug, Serialize, Deserialize)]
pub struct JoinResponse {
    pub member: MemberView,
    pub members: Vec<MemberView>,
    /// The cluster's id (hex), which the new member takes.
    #[serde(default, rename = "clusterID", skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
}

/// The member list.
#[derive(Debug, Serialize, Deserialize)]
pub struct MemberList {
    pub members: Vec<MemberView>,
}

/// A refusal as a `metav1.Status`, so kubectl (`get --raw`, `delete --raw`) prints its
/// message.
fn text(code: StatusCode, message: impl Into<String>) -> Response {
    let message = message.into();
    let reason = match code {
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::UNAUTHORIZED => "Unauthorized",
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::CONFLICT => "AlreadyExists",
        StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
        StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
        _ => "InternalError",
    };
    json(
        code,
        &serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message.trim_end(),
            "reason": reason,
            "code": code.as_u16(),
        }),
    )
}

fn json(code: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(mut bytes) => {
            bytes.push(b'\n');
            (code, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding: {e}")),
    }
}

fn view(member: &Member, leader: Option<u64>) -> MemberView {
    MemberView {
        id: format!("{:x}", member.id),
        name: member.name.clone(),
        peer_url: member.peer_url.clone(),
        role: member.role.as_str().to_string(),
        is_leader: leader == Some(member.id),
    }
}

fn views(state: &AppState) -> Vec<MemberView> {
    let leader = state.store.leader_id();
    state
        .store
        .members()
        .iter()
        .map(|m| view(m, leader))
        .collect()
}

/// Whether the request carries the server token (Basic `server:<secret>` or as a bearer
/// token), or, when `admin_ok`, an admin client certificate. The agent token and bootstrap
/// tokens are refused here: they join agents only.
async fn authorized(
    state: &AppState,
    headers: &HeaderMap,
    cert_identity: Option<&Identity>,
    admin_ok: bool,
) -> bool {
    if admin_ok
        && cert_identity
            .is_some_and(|identity| identity.groups.iter().any(|g| g == "system:masters"))
    {
        return true;
    }
    let Some(authorization) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    match crate::apiserver::auth::join_tokens::authenticate(state, authorization).await {
        Some(role) if role.may_join_servers() => true,
        Some(role) => {
            tracing::warn!(credential = %role.describe(), "refused a server-join request made with a token that joins agents only");
            false
        }
        None => false,
    }
}

/// Serves one request to a [`handles`] path.
pub async fn serve(
    state: &Arc<AppState>,
    cert_identity: Option<&Identity>,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let Some(cluster) = state.config.cluster.as_ref() else {
        return text(StatusCode::NOT_FOUND, "this server does not accept servers");
    };
    let admin_ok = path != BOOTSTRAP_PATH && path != TOKEN_PATH && *method != Method::POST;
    if !authorized(state, headers, cert_identity, admin_ok).await {
        return text(
            StatusCode::UNAUTHORIZED,
            "the server token is required (Authorization: Basic server:<token secret>)",
        );
    }
    if path == TOKEN_PATH {
        return rotate_token(state, method, headers, body).await;
    }
    if !state.store.is_clustered() {
        return text(
            StatusCode::BAD_REQUEST,
            "this server runs a one-member datastore that other servers cannot join: \
             restart it with --cluster-init, then join servers to it",
        );
    }
    match (method, path) {
        (&Method::GET, BOOTSTRAP_PATH) => {
            match crate::pki::bootstrap::BootstrapData::collect(&cluster.tls_dir) {
                Ok(bootstrap) => json(
                    StatusCode::OK,
                    &BootstrapResponse {
                        bootstrap,
                        config: cluster.critical.clone(),
                    },
                ),
                Err(e) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("reading the bootstrap data: {e}"),
                ),
            }
        }
        (&Method::GET, MEMBERS_PATH) => json(
            StatusCode::OK,
            &MemberList {
                members: views(state),
            },
        ),
        (&Method::POST, MEMBERS_PATH) => join(state, body).await,
        (&Method::DELETE, _) if path.starts_with("/v1-k3rs/members/") => {
            let name = &path["/v1-k3rs/members/".len()..];
            remove(state, name).await
        }
        _ => text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    }
}

/// `PUT /v1-k3rs/token` with `{"token": <new>}`, authenticated with the current server token.
async fn rotate_token(
    state: &Arc<AppState>,
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    if *method != Method::PUT {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only PUT is supported");
    }
    let Some(old) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::apiserver::auth::join_tokens::presented_secret)
    else {
        return text(StatusCode::UNAUTHORIZED, "the server token is required");
    };
    let request: RotateRequest = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("the body must be {{\"token\": …}}: {e}"),
            );
        }
    };
    let new = match crate::pki::parse_token(&request.token) {
        Ok(parsed) if parsed.username == crate::pki::token::SERVER_USER => parsed.secret,
        Ok(parsed) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!(
                    "the new token is for user {:?}; a server token is K10<hash>::server:<secret> \
                     or a bare secret",
                    parsed.username
                ),
            );
        }
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("invalid new token: {e}")),
    };
    match crate::apiserver::auth::join_tokens::rotate(state, &old, &new).await {
        Ok(()) => json(
            StatusCode::OK,
            &serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "message": "the server token was rotated"}),
        ),
        Err(e @ crate::apiserver::auth::join_tokens::RotateError::Invalid(_)) => {
            text(StatusCode::BAD_REQUEST, e.to_string())
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("rotating the token: {e}"),
        ),
    }
}

async fn join(state: &Arc<AppState>, body: &[u8]) -> Response {
    let request: JoinRequest = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("the body must be {{\"name\": …, \"peerURL\": …}}: {e}"),
            );
        }
    };
    let problems = crate::names::dns1123_subdomain(&request.name);
    if !problems.is_empty() {
        return text(
            StatusCode::BAD_REQUEST,
            format!(
                "invalid server name {:?}: {}",
                request.name,
                problems.join("; ")
            ),
        );
    }
    if crate::store::peer_address(&request.peer_url).is_none() {
        return text(
            StatusCode::BAD_REQUEST,
            format!(
                "invalid peer URL {:?}: expected https://<ip>:<port>",
                request.peer_url
            ),
        );
    }
    match state
        .store
        .add_learner(&request.name, &request.peer_url)
        .await
    {
        Ok(member) => {
            tracing::info!(name = %member.name, id = %format!("{:x}", member.id), peer_url = %member.peer_url, "server joining the cluster as a learner");
            let leader = state.store.leader_id();
            let mut members = views(state);
            if !members.iter().any(|m| m.id == format!("{:x}", member.id)) {
                members.push(view(&member, leader));
            }
            json(
                StatusCode::CREATED,
                &JoinResponse {
                    member: view(&member, leader),
                    members,
                    cluster_id: state.store.cluster_id().map(hex::encode),
                },
            )
        }
        Err(e @ StoreError::AlreadyExists { .. }) => text(
            StatusCode::CONFLICT,
            format!("a server with this name is already a member: {e}"),
        ),
        Err(e) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("adding the server: {e}"),
        ),
    }
}

async fn remove(state: &Arc<AppState>, name: &str) -> Response {
    let Some(member) = state.store.members().into_iter().find(|m| m.name == name) else {
        return text(StatusCode::NOT_FOUND, format!("no member named {name:?}"));
    };
    match state.store.remove_member(member.id).await {
        Ok(()) => {
            tracing::info!(name, id = %format!("{:x}", member.id), "removed a member from the cluster");
            json(
                StatusCode::OK,
                &MemberList {
                    members: views(state),
                },
            )
        }
        Err(e) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("removing member {name:?}: {e}"),
        ),
    }
}
