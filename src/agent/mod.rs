//! The node agent (`k3rs agent`, and the agent embedded in `k3rs server`): joining a cluster
//! (CA pinning from the `K10…` token, node certificates), supervising containerd, importing
//! air-gap images, and starting the node components (kubelet, proxy, network, dns).
//!
//! [`run`] is the orchestrator: 0. the API server load balancer on 127.0.0.1:6444
//! ([`loadbalancer`]; every component's client goes through it), 1. credentials (the join
//! protocol in [`join`], or the embedded server's own certificates), 2. the container runtime, 3. the kubelet and its API server,
//! 4. kube-proxy and the cluster DNS server, 5. a watch on its own Node that rewrites the
//! CNI conflist when `spec.podCIDRs` is set.
//! Progress goes to systemd (`STATUS=`; `READY=1` once the Node is registered).
//!
//! Owns `<data-dir>/agent/` except what the kubelet keeps there. It is an API client only:
//! it may not touch `store` or `apiserver` internals.

pub mod containerd;
pub mod cri;
pub mod images;
pub mod join;
pub mod loadbalancer;
pub mod memory;
pub mod pause;
pub mod renewal;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;

use crate::cli::node_config::NodeConfig;
use crate::cli::notify::Notifier;

pub use join::{JoinError, JoinOptions, NodeCredentials};

/// Default run directory (containerd's socket and state live under it).
pub const DEFAULT_RUN_DIR: &str = "/run/k3rs";
/// Default root of the pod log tree.
pub const DEFAULT_POD_LOG_DIR: &str = "/var/log/pods";
/// The label k3s puts on server nodes (and its older twin).
pub const CONTROL_PLANE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// How the agent gets its credentials.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// `k3rs agent`: the join protocol against `server` with `token`.
    Join {
        server: String,
        token: crate::cli::Token,
    },
    /// `k3rs server`'s embedded agent: the certificates the server issued itself.
    Embedded(Box<NodeCredentials>),
}

/// Everything [`run`] needs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// `--node-name`.
    pub node_name: String,
    /// `<data-dir>`.
    pub data_dir: PathBuf,
    /// Run directory (`/run/k3rs`; `K3RS_RUN_DIR` so tests can run several agents).
    pub run_dir: PathBuf,
    /// Root of the pod log tree (`/var/log/pods`; `K3RS_POD_LOG_DIR` for tests).
    pub pod_log_dir: PathBuf,
    /// The node flags.
    pub node: NodeConfig,
    /// Where the credentials come from.
    pub credentials: Credentials,
    /// Whether this node runs the control plane (adds the control-plane labels).
    pub control_plane: bool,
    /// The cluster DNS Service IP handed to pods.
    pub cluster_dns: Vec<IpAddr>,
    /// The cluster domain.
    pub cluster_domain: String,
    /// The pod network (`--cluster-cidr`) for kube-proxy's masquerade decision; empty when
    /// unknown (a joining agent), in which case the proxy uses its Node's `podCIDRs`, as
    /// kube-proxy's `--detect-local-mode=NodeCIDR` does.
    pub cluster_cidrs: Vec<String>,
}

impl AgentOptions {
    /// The Node's labels: `--node-label` plus, on servers, the control-plane role labels.
    pub fn node_labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.node.labels.clone();
        if self.control_plane {
            for label in CONTROL_PLANE_LABELS {
                labels.insert(label.to_string(), "true".to_string());
            }
        }
        labels
    }
}

/// Sets the labels of `node_name`'s Node that a node may not set on itself (the
/// control-plane role labels, and any such `--node-label`), with `client`, a server's own
/// identity, as k3s's server labels its own Node. Waits for the kubelet to register the
/// Node, then merges the labels in; retries until it succeeds.
pub async fn label_own_node(
    client: kube::Client,
    node_name: String,
    labels: BTreeMap<String, String>,
) {
    let (_, restricted) = crate::kubelet::node::split_restricted(labels);
    if restricted.is_empty() {
        return;
    }
    let nodes: kube::Api<Node> = kube::Api::all(client);
    let patch = serde_json::json!({"metadata": {"labels": restricted}});
    let mut delay = Duration::from_millis(200);
    loop {
        match nodes.get_opt(&node_name).await {
            Ok(Some(_)) => match nodes
                .patch(
                    &node_name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(node = %node_name, labels = ?restricted.keys().collect::<Vec<_>>(), "set the server's own node labels");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "labelling the server's own node; will retry"),
            },
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "waiting for the server's own node"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// The resolv.conf handed to pods: `--resolv-conf`, else systemd-resolved's upstream file
/// when `/etc/resolv.conf` only names the local stub (127.0.0.53), else `/etc/resolv.conf`
/// (as the kubelet in k3s does).
pub fn resolv_conf(explicit: Option<&Path>) -> PathBuf {
    if let Some(path) = explicit {
        return path.to_path_buf();
    }
    let etc = PathBuf::from("/etc/resolv.conf");
    let upstream = PathBuf::from("/run/systemd/resolve/resolv.conf");
    let only_stub = std::fs::read_to_string(&etc).is_ok_and(|text| {
        let servers: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("nameserver"))
            .map(str::trim)
            .collect();
        !servers.is_empty() && servers.iter().all(|s| s.starts_with("127."))
    });
    if only_stub && upstream.is_file() {
        upstream
    } else {
        etc
    }
}

/// Starts the API server load balancer ([`loadbalancer`]): in front of `--server` and the
/// servers it learns, or, for a server's embedded agent, in front of that server first.
async fn load_balancer(options: &AgentOptions) -> anyhow::Result<loadbalancer::LoadBalancer> {
    let (server_url, preferred) = match &options.credentials {
        Credentials::Join { server, .. } => (server.clone(), None),
        Credentials::Embedded(credentials) => {
            let own = loadbalancer::address_of_url(&credentials.server)
                .map_err(|reason| anyhow::anyhow!("{}: {reason}", credentials.server))?;
            (credentials.server.clone(), Some(own))
        }
    };
    loadbalancer::LoadBalancer::start(loadbalancer::LoadBalancerConfig {
        server_url,
        preferred,
        port: options.node.lb_server_port,
        data_dir: options.data_dir.clone(),
    })
    .await
    .context("starting the API server load balancer")
}

/// Obtains the credentials, retrying while no server is reachable; refusals (wrong CA
/// hash, bad token, node password) end the agent. Joining talks to one server directly (the
/// server reports the address it sees), trying every server the load balancer knows, so a
/// restarted agent starts while the server it was installed against is down. The
/// credentials' server is then the load balancer.
async fn credentials(
    options: &AgentOptions,
    notifier: &Notifier,
    lb: &loadbalancer::LoadBalancer,
) -> anyhow::Result<NodeCredentials> {
    let token = match &options.credentials {
        Credentials::Embedded(credentials) => {
            let mut credentials = (**credentials).clone();
            credentials.server = lb.local_url();
            return join::store_credentials(credentials)
                .context("storing the embedded agent's credentials");
        }
        Credentials::Join { token, .. } => token,
    };
    let mut delay = Duration::from_secs(1);
    loop {
        let mut last_error = None;
        for address in lb.servers_healthy_first() {
            let server = format!("https://{address}");
            notifier.status(&format!("Joining the cluster at {server}"));
            let join_options = JoinOptions {
                server: server.clone(),
                token: token.clone(),
                node_name: options.node_name.clone(),
                node_ips: options.node.node_ips.clone(),
                data_dir: options.data_dir.clone(),
                client_url: Some(lb.local_url()),
            };
            match join::join(&join_options).await {
                Ok(credentials) => return Ok(credentials),
                Err(e) if e.is_transient() => {
                    tracing::warn!(%server, error = %e, "cannot join through this server");
                    last_error = Some(e);
                }
                Err(e) => return Err(e).context("joining the cluster"),
            }
        }
        if let Some(e) = last_error {
            tracing::warn!(error = %e, retry_in = ?delay, "waiting for a server");
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// A kube client authenticated as the node (`system:node:<name>`) with `client`'s current
/// certificate at every new connection.
pub async fn node_client(
    credentials: &NodeCredentials,
    client: &crate::pki::live::LiveCert,
) -> anyhow::Result<kube::Client> {
    crate::kube_client::with_live_certificate(
        &credentials.server,
        &credentials.server_ca_pem,
        client,
    )
    .context("building the node's API client")
}

/// Starts (or connects to) the container runtime. With `--container-runtime-endpoint` the
/// socket must exist; without one the agent supervises its own containerd.
async fn container_runtime(
    options: &AgentOptions,
    notifier: &Notifier,
) -> anyhow::Result<containerd::Runtime> {
    notifier.status("Starting the container runtime");
    if let Some(endpoint) = &options.node.container_runtime_endpoint
        && !endpoint.exists()
    {
        anyhow::bail!(
            "--container-runtime-endpoint {} does not exist: start that runtime, or leave \
             the flag out to let k3rs run containerd",
            endpoint.display()
        );
    }
    let runtime_options = containerd::RuntimeOptions {
        data_dir: options.data_dir.clone(),
        run_dir: options.run_dir.clone(),
        pause_image: options.node.pause_image.clone(),
        private_registry: options.node.private_registry.clone(),
        external_endpoint: options
            .node
            .container_runtime_endpoint
            .as_ref()
            .map(|p| p.display().to_string()),
    };
    containerd::start(runtime_options)
        .await
        .context("starting the container runtime")
}

/// Runs the agent until it fails or SIGTERM/SIGINT (the caller handles signals by dropping
/// the future).
pub async fn run(options: AgentOptions, notifier: Arc<Notifier>) -> anyhow::Result<()> {
    let lb = load_balancer(&options).await?;
    let credentials = credentials(&options, &notifier, &lb).await?;
    tracing::info!(
        node = %options.node_name,
        server = %credentials.server,
        kubeconfig = %credentials.kubeconfig.display(),
        "node credentials ready"
    );
    let client_cert = crate::pki::live::LiveCert::new(&credentials.client)
        .map_err(|e| anyhow::anyhow!("the kubelet client certificate: {e}"))?;
    let serving_cert = crate::pki::live::LiveCert::new(&credentials.serving)
        .map_err(|e| anyhow::anyhow!("the kubelet serving certificate: {e}"))?;
    let client = node_client(&credentials, &client_cert).await?;
    tokio::spawn(
        renewal::AgentRenewal {
            node_name: options.node_name.clone(),
            data_dir: options.data_dir.clone(),
            credentials: credentials.clone(),
            client: client_cert,
            serving: serving_cert.clone(),
            source: match &options.credentials {
                Credentials::Join { token, .. } => renewal::Source::Join {
                    token: Some(token.clone()),
                },
                Credentials::Embedded(_) => renewal::Source::Embedded {
                    tls_dir: options.data_dir.join("server").join("tls"),
                },
            },
        }
        .run(),
    );
    // The load balancer learns every server from the default/kubernetes Endpoints.
    let lb_watch = tokio::spawn(loadbalancer::watch_endpoints(client.clone(), lb.updater()));
    let runtime = container_runtime(&options, &notifier).await?;
    let cri_endpoint = runtime.cri_endpoint().to_path_buf();
    tracing::info!(cri = %cri_endpoint.display(), "container runtime ready");
    let cni_conf_dir = containerd::Paths::new(&containerd::RuntimeOptions {
        data_dir: options.data_dir.clone(),
        run_dir: options.run_dir.clone(),
        pause_image: options.node.pause_image.clone(),
        private_registry: options.node.private_registry.clone(),
        external_endpoint: None,
    })
    .cni_conf_dir;
    let (registered_tx, mut registered_rx) = tokio::sync::watch::channel(false);
    let kubelet_port = kubelet_port();
    let node_ip = credentials
        .node_ips
        .first()
        .copied()
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    let mut kubelet_config = crate::kubelet::Config::new(
        &options.node_name,
        node_ip,
        cri_endpoint.clone(),
        options.data_dir.clone(),
    );
    kubelet_config.node_external_ip = options.node.node_external_ips.first().copied();
    kubelet_config.pod_log_dir = options.pod_log_dir.clone();
    kubelet_config.labels = options.node_labels();
    kubelet_config.taints = options.node.taints.clone();
    kubelet_config.cluster_dns = options.cluster_dns.clone();
    kubelet_config.cluster_domain = options.cluster_domain.clone();
    kubelet_config.resolv_conf = resolv_conf(options.node.resolv_conf.as_deref());
    kubelet_config.kubelet_port = kubelet_port;
    kubelet_config.extra = options.node.kubelet.clone();
    // The node watch below reports registration too; this receiver only keeps the kubelet's
    // sender connected.
    let (kubelet_registered_tx, _kubelet_registered_rx) = tokio::sync::watch::channel(false);
    let kubelet = tokio::spawn(crate::kubelet::run(
        client.clone(),
        kubelet_config,
        kubelet_registered_tx,
    ));
    let server_config = crate::kubelet::server::ServerConfig {
        listen: std::net::SocketAddr::new(
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            kubelet_port,
        ),
        serving: serving_cert,
        client_ca_pem: credentials.client_ca_pem.clone(),
        cri_endpoint: cri_endpoint.clone(),
        pod_log_dir: options.pod_log_dir.clone(),
        stream_idle_timeout: Some(options.node.kubelet.streaming_connection_idle_timeout)
            .filter(|t| !t.is_zero()),
    };
    tokio::spawn(async move {
        if let Err(e) = crate::kubelet::server::serve(server_config).await {
            tracing::error!(error = %format!("{e:#}"), "the kubelet API on :{kubelet_port} stopped");
        }
    });
    let client_for_network = client.clone();
    // The pod network across nodes (flannel host-gw/vxlan) and NetworkPolicy: src/network.
    let network_options = crate::network::NetworkOptions {
        node_name: options.node_name.clone(),
        node_ip,
        backend: options.node.flannel_backend,
        iface: options.node.flannel_iface.clone(),
        network_policy: !options.node.disable_network_policy,
        data_dir: options.data_dir.clone(),
    };
    let conflist_options = network_options.conflist();
    crate::panics::supervise("network", move || {
        let (client, options) = (client_for_network.clone(), network_options.clone());
        async move {
            if let Err(e) = crate::network::run(client, options).await {
                tracing::error!(error = %format!("{e:#}"), "the pod network controllers stopped");
            }
        }
    });
    // Node networking for Services: kube-proxy (nftables) and the cluster DNS server on the
    // node address, port 53 (the kube-dns Service's endpoints; see dns::bootstrap).
    {
        let node_ips = credentials.node_ips.clone();
        if options.node.disable_kube_proxy {
            tracing::info!("kube-proxy disabled (--disable-kube-proxy)");
        } else {
            let proxy_config = crate::proxy::Config::new(
                &options.node_name,
                node_ips.clone(),
                options.cluster_cidrs.clone(),
            );
            let proxy_client = client.clone();
            crate::panics::supervise("proxy", move || {
                let (client, config) = (proxy_client.clone(), proxy_config.clone());
                async move {
                    if let Err(e) = crate::proxy::run(client, config).await {
                        tracing::error!(error = %format!("{e:#}"), "kube-proxy stopped");
                    }
                }
            });
        }
        let resolv = resolv_conf(options.node.resolv_conf.as_deref());
        let upstreams = crate::dns::upstreams_from_resolv_conf(
            &std::fs::read_to_string(&resolv).unwrap_or_default(),
        );
        let dns_config = crate::dns::Config {
            listen: node_ips
                .iter()
                .map(|ip| std::net::SocketAddr::new(*ip, 53))
                .collect(),
            domain: options.cluster_domain.clone(),
            upstreams,
            recursion_for: crate::dns::Config::recursion_networks(
                &options.cluster_cidrs,
                &node_ips,
            ),
        };
        let dns_client = client.clone();
        crate::panics::supervise("dns", move || {
            let (client, config) = (dns_client.clone(), dns_config.clone());
            async move {
                if let Err(e) = crate::dns::run(client, config).await {
                    tracing::error!(error = %format!("{e:#}"), "cluster DNS stopped");
                }
            }
        });
    }
    notifier.status("Waiting for the Node to be registered");
    let watch = tokio::spawn(watch_own_node(
        client.clone(),
        options.node_name.clone(),
        registered_tx,
        Arc::new(move |cidrs: &[String]| {
            crate::network::cni::write_conflist_with(&cni_conf_dir, cidrs, &conflist_options)
        }),
    ));
    let ready_notifier = notifier.clone();
    let node_name = options.node_name.clone();
    tokio::spawn(async move {
        if registered_rx.wait_for(|r| *r).await.is_ok() {
            tracing::info!(node = %node_name, "node registered");
            ready_notifier.ready("k3rs agent is running");
        }
    });
    // The agent lives as long as its kubelet and its node watch.
    let result = tokio::select! {
        done = watch => done.context("the node watch task")?,
        done = kubelet => done.context("the kubelet task")?.context("the kubelet"),
    };
    // Dropping the runtime leaves containerd (and the pods) running, as k3s does.
    drop(runtime);
    lb_watch.abort();
    drop(lb);
    result
}

/// The kubelet API port: 10250, or `K3RS_KUBELET_PORT` (tests run several agents on one host).
fn kubelet_port() -> u16 {
    std::env::var("K3RS_KUBELET_PORT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10250)
}

/// What to do when the Node's pod CIDRs appear or change: `Ok(true)` if something changed.
pub type PodCidrHandler = Arc<dyn Fn(&[String]) -> anyhow::Result<bool> + Send + Sync>;

/// Watches the Node named `node_name`: sets `registered` once it exists and calls
/// `on_pod_cidrs` whenever `spec.podCIDRs` (or `spec.podCIDR`) is set or changes. Runs until
/// the watch stream ends, re-establishing it on errors.
pub async fn watch_own_node(
    client: kube::Client,
    node_name: String,
    registered: tokio::sync::watch::Sender<bool>,
    on_pod_cidrs: PodCidrHandler,
) -> anyhow::Result<()> {
    use kube::runtime::{WatchStreamExt, watcher};
    let nodes: kube::Api<Node> = kube::Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    let mut stream = watcher(nodes, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    let mut last: Option<Vec<String>> = None;
    while let Some(event) = stream.next().await {
        let node = match event {
            Ok(node) => node,
            Err(e) => {
                tracing::debug!(error = %e, "node watch error (retrying)");
                continue;
            }
        };
        registered.send_replace(true);
        let spec = node.spec.unwrap_or_default();
        let cidrs = match spec.pod_cidrs {
            Some(cidrs) if !cidrs.is_empty() => cidrs,
            _ => spec.pod_cidr.into_iter().collect(),
        };
        if cidrs.is_empty() || last.as_ref() == Some(&cidrs) {
            continue;
        }
        match on_pod_cidrs(&cidrs) {
            Ok(changed) => {
                tracing::info!(?cidrs, changed, "applied the node's pod CIDRs");
                last = Some(cidrs);
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "cannot apply the node's pod CIDRs")
            }
        }
    }
    Ok(())
}
