//! Joining a server to an existing cluster: `k3rs server --server https://<server>:6443
//! --token K10<ca hash>::server:<secret>`, as k3s joins servers to embedded etcd.
//!
//! [`fetch_bootstrap`] runs before anything is written to the data dir: it checks the
//! server's CA against the token's hash, fetches the cluster's bootstrap data (CAs and keys)
//! with the server token over TLS pinned to that CA, and compares the settings every server
//! must share. Any failure is an error with nothing written. [`add_member`] then asks the
//! cluster to add this server as a learner and returns its member id and the members' peer
//! addresses, which the store starts with.
//!
//! Owns the joining server's side of the protocol; the serving side is
//! [`crate::apiserver::cluster::server_join`], and the files are written by [`crate::pki`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;

use super::config::ServerConfig;
use crate::agent::join::{self as wire, JoinError};
use crate::apiserver::cluster::server_join::{
    BOOTSTRAP_PATH, BootstrapResponse, JoinRequest, JoinResponse, MEMBERS_PATH,
};
use crate::pki;

/// How long a join waits for the cluster to accept it (another server may be joining).
const ADD_MEMBER_PATIENCE: Duration = Duration::from_secs(120);

/// The settings that must be equal on every server of a cluster (k3s refuses a server
/// whose values differ: "critical configuration value mismatch").
pub fn critical_settings(config: &ServerConfig) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("cluster-cidr".to_string(), config.cluster_cidr.to_string()),
        ("service-cidr".to_string(), config.service_cidr.to_string()),
        ("cluster-dns".to_string(), config.cluster_dns.to_string()),
        ("cluster-domain".to_string(), config.cluster_domain.clone()),
    ])
}

/// What the cluster handed a joining server.
pub struct Fetched {
    pub bootstrap: pki::bootstrap::BootstrapData,
    /// The cluster's server CA (PEM), verified against the token.
    pub server_ca_pem: String,
    /// The token's secret.
    pub secret: String,
}

impl std::fmt::Debug for Fetched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys and the secret stay out of logs.
        f.debug_struct("Fetched")
            .field("bootstrap", &self.bootstrap)
            .finish_non_exhaustive()
    }
}

/// Checks the token against the server and fetches the bootstrap data; writes nothing.
pub async fn fetch_bootstrap(config: &ServerConfig, url: &str) -> anyhow::Result<Fetched> {
    let token = config.token.as_ref().context(
        "--server needs --token: the cluster's server token (the content of \
         /var/lib/k3rs/server/token on an existing server, K10<hash>::server:<secret>)",
    )?;
    let parsed = pki::parse_token(token.expose()).context("invalid --token")?;
    let server = wire::server_addr(url)?;
    let ca = match wire::fetch_ca(&server, parsed.ca_hash.as_deref()).await {
        Ok(ca) => ca,
        Err(e @ JoinError::Status { .. }) => bail!("{e}: is {url} a k3rs server?"),
        Err(e) => return Err(e.into()),
    };
    if !ca.pinned {
        tracing::warn!(
            server = %url,
            "the token has no K10<CA hash> part, so the server's CA is not pinned; \
             use the full token from /var/lib/k3rs/server/token"
        );
    }
    let (server_ca_pem, actual) = (ca.pem, ca.hash);
    let reply = wire::https_request(
        &server,
        wire::pinned_tls(&server_ca_pem)?,
        http::Method::GET,
        BOOTSTRAP_PATH,
        &[basic_auth(&parsed.secret)],
        Vec::new(),
    )
    .await?;
    match reply.status {
        200 => {}
        401 => bail!("the server at {url} rejected the token (401 Unauthorized): check --token"),
        status => bail!("GET {url}{BOOTSTRAP_PATH}: {status} {}", reply.body.trim()),
    }
    let response: BootstrapResponse = serde_json::from_str(&reply.body)
        .with_context(|| format!("{url}{BOOTSTRAP_PATH} sent no bootstrap data"))?;
    response
        .bootstrap
        .check()
        .context("the cluster's bootstrap data")?;
    if response.bootstrap.server_ca_hash().as_deref() != Some(actual.as_str()) {
        bail!("the bootstrap data's server CA is not the CA the server presents");
    }
    let ours = critical_settings(config);
    for (key, theirs) in &response.config {
        if let Some(mine) = ours.get(key)
            && mine != theirs
        {
            bail!(
                "critical configuration value mismatch between servers: --{key} is {mine} \
                 here and {theirs} in the cluster; every server must use the same value"
            );
        }
    }
    Ok(Fetched {
        bootstrap: response.bootstrap,
        server_ca_pem,
        secret: parsed.secret,
    })
}

/// The message of a `metav1.Status` body, or the body itself.
fn message_of(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| body.trim().to_string())
}

fn basic_auth(secret: &str) -> (&'static str, String) {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("server:{secret}"));
    ("Authorization", format!("Basic {encoded}"))
}

/// Asks the cluster to add this server (`name`, reachable at `peer_url`) as a learner,
/// waiting while another server is still joining. Returns its id and the peers.
pub async fn add_member(
    url: &str,
    fetched: &Fetched,
    name: &str,
    peer_url: &str,
) -> anyhow::Result<crate::apiserver::JoinedMember> {
    let server = wire::server_addr(url)?;
    let body = serde_json::to_vec(&JoinRequest {
        name: name.to_string(),
        peer_url: peer_url.to_string(),
    })
    .context("encoding the join request")?;
    let started = Instant::now();
    loop {
        let reply = wire::https_request(
            &server,
            wire::pinned_tls(&fetched.server_ca_pem)?,
            http::Method::POST,
            MEMBERS_PATH,
            &[
                basic_auth(&fetched.secret),
                ("Content-Type", "application/json".to_string()),
            ],
            body.clone(),
        )
        .await;
        let retry_because = match reply {
            Ok(reply) if reply.status == 201 || reply.status == 200 => {
                let response: JoinResponse = serde_json::from_str(&reply.body)
                    .with_context(|| format!("{url}{MEMBERS_PATH} sent no member"))?;
                return joined(&response);
            }
            Ok(reply) if reply.status == 503 => message_of(&reply.body),
            Ok(reply) => bail!(
                "joining the cluster through {url}: {} {}",
                reply.status,
                message_of(&reply.body)
            ),
            Err(e) if e.is_transient() => e.to_string(),
            Err(e) => return Err(e.into()),
        };
        if started.elapsed() > ADD_MEMBER_PATIENCE {
            bail!(
                "the cluster did not accept this server within {ADD_MEMBER_PATIENCE:?}: {retry_because}"
            );
        }
        tracing::info!(reason = %retry_because, "the cluster cannot add this server yet; retrying");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn joined(response: &JoinResponse) -> anyhow::Result<crate::apiserver::JoinedMember> {
    let id = u64::from_str_radix(&response.member.id, 16)
        .with_context(|| format!("member id {:?} is not hex", response.member.id))?;
    let peers = response
        .members
        .iter()
        .filter_map(|m| {
            let id = u64::from_str_radix(&m.id, 16).ok()?;
            Some((id, m.peer_url.clone()))
        })
        .collect();
    tracing::info!(member = %response.member.id, name = %response.member.name, "added to the cluster as a learner");
    // A cluster id that does not parse is ignored: the leader's snapshot brings it.
    let cluster_id = response
        .cluster_id
        .as_deref()
        .and_then(|h| hex::decode(h).ok())
        .and_then(|b| <[u8; 16]>::try_from(b.as_slice()).ok());
    Ok(crate::apiserver::JoinedMember {
        id,
        peers,
        cluster_id,
    })
}
