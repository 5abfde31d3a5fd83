//! kube-proxy in nftables mode: renders the whole `k3rs` nftables table (`ip k3rs`, and
//! `ip6 k3rs` on dual-stack nodes) from Services and EndpointSlices watched through the API
//! and applies it atomically with `nft -f -`.
//!
//! - [`model`]: API objects → one `ServicePort` per Service port, with endpoint selection
//!   (ready, else serving-terminating; local ones for the Local traffic policies).
//! - [`render`]: pure; service ports + node addresses → the table's chains, sets and maps
//!   (kube-proxy's nftables layout), per owner (the fixed part, each Service port).
//! - [`table`]: pure; the per-owner cache of one table, which turns a changed model into
//!   the text of a partial update that touches only the changed ports, or a full one.
//! - [`apply`]: runs `nft`, detects hand edits, sets the bridge/forwarding sysctls, deletes
//!   stale UDP conntrack entries.
//! - [`run`]: the watch + sync loop: changes are coalesced (a minimum interval between syncs,
//!   1 s by default), partial updates normally, a full replacement when the kernel's table no
//!   longer matches what was applied (checked every resync interval, 30 s by default, against
//!   a listing taken once changes have settled for a minimum interval) or a sync fails.
//!
//! An API client only: it may not touch `store` or `apiserver` internals, nor any nftables
//! table but its own (NetworkPolicy lives in `inet k3rs-netpol`, owned by `network`).

pub mod apply;
pub mod model;
pub mod render;
pub mod table;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::sync::Notify;

pub use apply::{Host, SyncKind, Syncer};
pub use render::{Family, RenderOptions};

/// The proxy's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node's name: endpoints with this `nodeName` are local.
    pub node_name: String,
    /// The node's addresses; NodePorts answer on them.
    pub node_ips: Vec<IpAddr>,
    /// `--cluster-cidr`: ClusterIP traffic from outside these is masqueraded.
    pub cluster_cidrs: Vec<String>,
    /// The nftables table name (`k3rs`).
    pub table: String,
    /// Minimum time between two syncs (bursts of changes are coalesced).
    pub min_sync_interval: Duration,
    /// How often the kernel's table is compared with what was applied (and repaired).
    pub resync_interval: Duration,
    /// Apply the rules inside this named network namespace (`ip netns exec`) instead of the
    /// current one.
    pub netns: Option<String>,
}

impl Config {
    /// kube-proxy's defaults for `node_name`.
    pub fn new(node_name: &str, node_ips: Vec<IpAddr>, cluster_cidrs: Vec<String>) -> Config {
        Config {
            node_name: node_name.to_string(),
            node_ips,
            cluster_cidrs,
            table: "k3rs".to_string(),
            min_sync_interval: Duration::from_secs(1),
            resync_interval: Duration::from_secs(30),
            netns: None,
        }
    }

    /// IPv4 always; IPv6 when the node or the pod network has an IPv6 address.
    pub fn families(&self) -> Vec<Family> {
        let v6 = self.node_ips.iter().any(IpAddr::is_ipv6)
            || self.cluster_cidrs.iter().any(|c| c.contains(':'));
        if v6 {
            vec![Family::V4, Family::V6]
        } else {
            vec![Family::V4]
        }
    }
}

/// Runs the proxy until the future is dropped. Fails only if `nft` cannot be run at all.
pub async fn run(client: kube::Client, config: Config) -> anyhow::Result<()> {
    let host = Host {
        netns: config.netns.clone(),
    };
    host.prepare_kernel().await;
    let changed = Arc::new(Notify::new());
    let services = crate::informer::reflect(
        kube::Api::<Service>::all(client.clone()),
        changed.clone(),
        "proxy",
    );
    let slices = crate::informer::reflect(
        kube::Api::<EndpointSlice>::all(client.clone()),
        changed.clone(),
        "proxy",
    );
    services
        .wait_until_ready()
        .await
        .context("waiting for the Service list")?;
    slices
        .wait_until_ready()
        .await
        .context("waiting for the EndpointSlice list")?;
    let options = RenderOptions {
        table: config.table.clone(),
        node_ips: config.node_ips.clone(),
        cluster_cidrs: config.cluster_cidrs.clone(),
    };
    let mut syncer = Syncer::new(host, options, config.families());
    // Without --cluster-cidr (a joining agent) the local pod network is this node's podCIDRs,
    // as with kube-proxy's --detect-local-mode=NodeCIDR; until they are known, everything
    // reaching a ClusterIP is masqueraded (correct, only less transparent).
    let node_cidrs = Arc::new(std::sync::Mutex::new(None::<Vec<String>>));
    if config.cluster_cidrs.is_empty() {
        tokio::spawn(learn_node_cidrs(
            kube::Api::<Node>::all(client.clone()),
            config.node_name.clone(),
            node_cidrs.clone(),
            changed.clone(),
        ));
    }
    let mut last_sync: Option<Instant> = None;
    let mut next_resync = Instant::now() + config.resync_interval;
    let mut force_full = true;
    let mut fingerprint_due: Option<Instant> = None;
    let mut failures = 0u32;
    tracing::info!(node = %config.node_name, table = %config.table, "kube-proxy (nftables) started");
    loop {
        let delay = apply::next_sync_delay(last_sync, config.min_sync_interval, Instant::now());
        tokio::time::sleep(delay).await;
        // A panic while rendering or applying fails this sync only (retried with the same
        // backoff as a failed `nft -f`), never the node's proxy or the process.
        let ports = match crate::panics::catch_sync("proxy", || {
            model::service_ports(&services.state(), &slices.state(), &config.node_name)
        }) {
            Ok(ports) => ports,
            Err(panic) => {
                failures += 1;
                tracing::error!(%panic, failures, "reading Services panicked; retrying");
                tokio::time::sleep(Duration::from_secs(u64::from(failures.min(30)))).await;
                continue;
            }
        };
        if syncer.options.cluster_cidrs.is_empty() {
            let learned = node_cidrs.lock().map(|c| c.clone()).unwrap_or_default();
            if let Some(cidrs) = learned {
                tracing::info!(
                    ?cidrs,
                    "masquerading ClusterIP traffic from outside this node's pod CIDRs"
                );
                syncer.options.cluster_cidrs = cidrs;
            }
        }
        last_sync = Some(Instant::now());
        let synced = crate::panics::catch("proxy", syncer.sync(&ports, force_full))
            .await
            .unwrap_or_else(|panic| Err(apply::ApplyError::Panicked(panic)));
        match synced {
            Ok(kind) => {
                failures = 0;
                force_full = false;
                if kind != SyncKind::Unchanged {
                    tracing::info!(?kind, service_ports = ports.len(), "synced Service rules");
                    // The reference listing for the drift check is taken once changes
                    // settle: listing a 1,000-Service table costs nft about as much CPU
                    // as loading it, too much to repeat after every sync of a burst.
                    fingerprint_due = Some(Instant::now() + config.min_sync_interval);
                }
            }
            Err(e @ apply::ApplyError::Spawn { .. }) => {
                return Err(e).context("applying Service rules");
            }
            Err(e) => {
                failures += 1;
                force_full = true;
                tracing::error!(error = %e, failures, "cannot apply Service rules; retrying");
                // Back off a little more on each failure (up to 30 s).
                tokio::time::sleep(Duration::from_secs(u64::from(failures.min(30)))).await;
                continue;
            }
        }
        // Wait for a change or the resync tick, recording the reference listing meanwhile.
        loop {
            let now = Instant::now();
            let until_resync = next_resync.saturating_duration_since(now);
            let until_fingerprint = fingerprint_due.map(|due| due.saturating_duration_since(now));
            tokio::select! {
                _ = changed.notified() => break,
                _ = tokio::time::sleep(until_fingerprint.unwrap_or_default()),
                    if until_fingerprint.is_some() => {
                    fingerprint_due = None;
                    if !record_reference(&mut syncer, &config.table).await {
                        force_full = true;
                        break;
                    }
                }
                _ = tokio::time::sleep(until_resync) => {
                    next_resync = Instant::now() + config.resync_interval;
                    if !syncer.has_fingerprint() {
                        // Changes kept coming (or listing failed): take the reference now.
                        fingerprint_due = None;
                        if !record_reference(&mut syncer, &config.table).await {
                            force_full = true;
                            break;
                        }
                    } else if syncer.drifted().await {
                        tracing::warn!(table = %config.table, "the nftables table was changed by hand; restoring it");
                        force_full = true;
                        break;
                    }
                }
            }
        }
    }
}

/// Records the reference listing for the drift check; false when the table is already
/// gone (a full sync is due). A listing error is logged and retried at the next tick.
async fn record_reference(syncer: &mut Syncer, table: &str) -> bool {
    match syncer.record_fingerprint().await {
        Ok(true) => true,
        Ok(false) => {
            tracing::warn!(
                table,
                "the nftables table was removed by hand; restoring it"
            );
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the proxy's nftables table");
            true
        }
    }
}

/// Polls this node's Node until `spec.podCIDRs` is set, then publishes them and pokes the
/// sync loop. Gives up quietly if the task is dropped with the proxy.
async fn learn_node_cidrs(
    nodes: kube::Api<Node>,
    node_name: String,
    out: Arc<std::sync::Mutex<Option<Vec<String>>>>,
    changed: Arc<Notify>,
) {
    loop {
        match nodes.get_opt(&node_name).await {
            Ok(Some(node)) => {
                let spec = node.spec.unwrap_or_default();
                let mut cidrs = spec.pod_cidrs.unwrap_or_default();
                if cidrs.is_empty() {
                    cidrs.extend(spec.pod_cidr);
                }
                if !cidrs.is_empty() {
                    if let Ok(mut slot) = out.lock() {
                        *slot = Some(cidrs);
                    }
                    changed.notify_one();
                    return;
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, node = %node_name, "cannot read the Node (retrying)")
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
