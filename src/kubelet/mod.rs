//! The kubelet: registers the Node, renews its Lease, and runs the Pods bound to it through
//! CRI (containerd over its gRPC socket), reporting their status through the API server.
//!
//! Talks CRI and the Kubernetes API, nothing else: it may not touch `store`, `apiserver`
//! internals or containerd's native API. `server/` (the kubelet API on :10250) belongs to the
//! streaming side and only shares [`Config`]'s paths with this module.
//!
//! Layout: [`node`] (Node object, Lease, conditions), [`pods`] (one worker per Pod: sandbox,
//! images, containers, probes, volumes, status, termination), [`gc`] (dead containers and
//! unused images), [`cri`] (the CRI client), [`host`] (what the machine has).

pub mod args;
pub mod cri;
pub mod gc;
pub mod host;
pub mod node;
pub mod pods;
pub mod server;
pub mod tokens;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Taint;

pub use args::{KubeletArgError, KubeletArgs};

/// The kubelet version reported in `nodeInfo`, consistent with the API server's `/version`.
pub fn kubelet_version() -> String {
    let (major, minor) = crate::apiserver::KUBE_VERSION;
    format!("v{major}.{minor}.0+k3rs{}", env!("CARGO_PKG_VERSION"))
}

/// The labels the kubelet sets on sandboxes and containers (the upstream kubelet's own
/// convention, so `crictl` users and the streaming server can find them).
pub mod labels {
    pub const POD_NAME: &str = "io.kubernetes.pod.name";
    pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
    pub const POD_UID: &str = "io.kubernetes.pod.uid";
    pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
    /// Our marker that a sandbox or container is the kubelet's (kubelet: `io.kubernetes.docker.type`).
    pub const MANAGED_BY: &str = "io.kubernetes.k3rs.managed";
    pub const RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
    pub const TERMINATION_GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";
    pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
    pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
    pub const INIT_CONTAINER: &str = "io.kubernetes.k3rs.init";
}

/// Everything the agent tells the kubelet (the seam with `agent::run`).
#[derive(Clone, Debug)]
pub struct Config {
    pub node_name: String,
    pub node_ip: IpAddr,
    pub node_external_ip: Option<IpAddr>,
    /// The CRI unix socket (a path, or `unix://` + path).
    pub cri_endpoint: PathBuf,
    /// `<data-dir>/agent/kubelet`: pod volumes live under `pods/<uid>/volumes/…`.
    pub root_dir: PathBuf,
    /// `/var/log/pods` unless a test moves it.
    pub pod_log_dir: PathBuf,
    /// `--node-label` (plus the control-plane role on servers).
    pub labels: BTreeMap<String, String>,
    /// `--node-taint`, applied when the Node is created.
    pub taints: Vec<Taint>,
    pub cluster_dns: Vec<IpAddr>,
    pub cluster_domain: String,
    /// The resolv.conf `dnsPolicy: Default` pods get (`--resolv-conf`).
    pub resolv_conf: PathBuf,
    /// Reported in `status.daemonEndpoints.kubeletEndpoint.port`.
    pub kubelet_port: u16,
    /// The documented `--kubelet-arg` subset.
    pub extra: KubeletArgs,
}

impl Config {
    /// A configuration with k3s's defaults for a node named `node_name` at `node_ip`.
    pub fn new(
        node_name: &str,
        node_ip: IpAddr,
        cri_endpoint: PathBuf,
        data_dir: PathBuf,
    ) -> Config {
        Config {
            node_name: node_name.to_string(),
            node_ip,
            node_external_ip: None,
            cri_endpoint,
            root_dir: data_dir.join("agent").join("kubelet"),
            pod_log_dir: PathBuf::from("/var/log/pods"),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            cluster_dns: vec![IpAddr::V4(std::net::Ipv4Addr::new(10, 43, 0, 10))],
            cluster_domain: "cluster.local".to_string(),
            resolv_conf: default_resolv_conf(),
            kubelet_port: 10250,
            extra: KubeletArgs::default(),
        }
    }
}

/// `/etc/resolv.conf`, or systemd-resolved's upstream list when the stub resolver is in use
/// (a 127.0.0.53 nameserver would be unreachable from a pod), as k3s chooses.
pub fn default_resolv_conf() -> PathBuf {
    let etc = PathBuf::from("/etc/resolv.conf");
    let upstream = PathBuf::from("/run/systemd/resolve/resolv.conf");
    let stub = std::fs::read_to_string(&etc)
        .map(|text| {
            text.lines().any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|ip| ip.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()))
                    && l.starts_with("nameserver")
            })
        })
        .unwrap_or(false);
    if stub && upstream.exists() {
        upstream
    } else {
        etc
    }
}

/// State shared by the kubelet's loops.
pub struct Kubelet {
    pub client: kube::Client,
    pub config: Config,
    pub cri: cri::Cri,
    pub recorder: crate::controllers::events::Recorder,
    /// One permit with `serialize-image-pulls=true` (the default): pulls wait their turn.
    pub image_pulls: tokio::sync::Semaphore,
    /// Pod-bound service-account tokens for projected volumes.
    pub tokens: tokens::TokenManager,
}

/// Runs the kubelet until an unrecoverable error: waits for the runtime, registers the Node
/// (then sets `registered`), and keeps the Lease, the Node status and the Pods in sync.
pub async fn run(
    client: kube::Client,
    config: Config,
    registered: tokio::sync::watch::Sender<bool>,
) -> anyhow::Result<()> {
    let cri = cri::Cri::new(&config.cri_endpoint);
    std::fs::create_dir_all(config.root_dir.join("pods"))
        .with_context(|| format!("creating the kubelet root {}", config.root_dir.display()))?;
    let version = wait_for_runtime(&cri).await;
    tracing::info!(
        runtime = %version.runtime_name,
        version = %version.runtime_version,
        node = %config.node_name,
        "kubelet starting"
    );
    let recorder = crate::controllers::events::Recorder::new(client.clone(), "kubelet")
        .with_host(config.node_name.clone());
    let image_pulls = tokio::sync::Semaphore::new(if config.extra.serialize_image_pulls {
        1
    } else {
        tokio::sync::Semaphore::MAX_PERMITS
    });
    let kubelet = Arc::new(Kubelet {
        tokens: tokens::TokenManager::new(client.clone()),
        client,
        config,
        cri,
        recorder,
        image_pulls,
    });
    let node = node::NodeAgent::new(kubelet.clone(), version);
    node.register().await;
    let _ = registered.send(true);

    // A JoinSet aborts every loop when `run` is dropped (the agent stopping the kubelet).
    let mut loops: tokio::task::JoinSet<(&'static str, anyhow::Result<()>)> =
        tokio::task::JoinSet::new();
    loops.spawn(async move {
        node.status_loop().await;
        ("node status loop", Ok(()))
    });
    let k = kubelet.clone();
    loops.spawn(async move {
        node::lease_loop(k).await;
        ("lease loop", Ok(()))
    });
    let k = kubelet.clone();
    loops.spawn(async move { ("pod manager", pods::run(k).await) });
    let k = kubelet.clone();
    loops.spawn(async move {
        gc::run(k).await;
        ("garbage collector", Ok(()))
    });
    match loops.join_next().await {
        Some(Ok((name, Ok(())))) => anyhow::bail!("the kubelet's {name} ended"),
        Some(Ok((name, Err(e)))) => Err(e.context(name)),
        Some(Err(e)) => Err(anyhow::anyhow!(e).context("a kubelet loop panicked")),
        None => anyhow::bail!("the kubelet has no loops"),
    }
}

/// Waits until the runtime answers `Version`, logging while it does not.
async fn wait_for_runtime(cri: &cri::Cri) -> k8s_cri::v1::VersionResponse {
    let mut delay = Duration::from_millis(100);
    let mut attempts = 0u32;
    loop {
        match cri.version().await {
            Ok(v) => return v,
            Err(e) => {
                attempts += 1;
                if attempts % 10 == 1 {
                    tracing::warn!(error = %e, "container runtime not answering yet");
                }
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// Now, as the timestamp type k8s-openapi uses.
pub fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// A CRI nanosecond timestamp as a Kubernetes time.
pub fn from_nanos(nanos: i64) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    if nanos <= 0 {
        return None;
    }
    let ts = k8s_openapi::jiff::Timestamp::from_nanosecond(nanos as i128).ok()?;
    // The API keeps seconds; truncating keeps status stable across identical reads.
    let ts = k8s_openapi::jiff::Timestamp::from_second(ts.as_second()).ok()?;
    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts))
}
