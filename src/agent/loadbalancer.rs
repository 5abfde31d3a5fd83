//! The agent's client-side load balancer, as k3s's `127.0.0.1:6444`: a local TCP proxy in
//! front of every API server, so the kubelet, kube-proxy, DNS and network controllers keep
//! working when the server the agent was installed against dies.
//!
//! What it owns:
//! - the listener on `127.0.0.1:<--lb-server-port>` (6444; an ephemeral port when that one
//!   is taken, e.g. by several test agents on one host — the clients are in this process);
//! - the server list: the `--server` address (the *default*, never dropped), then the
//!   addresses of the `default/kubernetes` Endpoints ([`watch_endpoints`] keeps them current),
//!   persisted in `<data-dir>/agent/etc/k3rs-agent-load-balancer.json` so a restarted agent can
//!   join and start while the first server is down;
//! - health: every server is dialed every [`HEALTH_INTERVAL`] with [`DIAL_TIMEOUT`], so a dead
//!   server is skipped within 2 s; a failed dial of a client connection marks it down at once.
//!   When a server goes down or leaves the list, the connections proxied to it are closed, so
//!   watches stuck on a silently dead machine reconnect (through us, to a live server) and
//!   resume from their resourceVersion.
//!
//! Choice: the *preferred* server while it is healthy (a server's embedded agent prefers its
//! own API server), else the server in use so far (connections stay on one server, as k3s's
//! do), else the next healthy one in list order; with none healthy, every server is tried.
//!
//! TLS stays end to end: this proxies bytes, and clients verify the server certificate for
//! `127.0.0.1`, which every server certificate carries. It talks to no API itself except
//! through [`watch_endpoints`]' client; it never touches `store` or `apiserver`.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Endpoints;
use tokio::net::{TcpListener, TcpStream};

/// The default local port (k3s's `--lb-server-port`).
pub const DEFAULT_PORT: u16 = 6444;
/// How often every server is dialed.
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(1);
/// How long a dial may take before the server counts as down.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(1);
/// The state file's name under `<data-dir>/agent/etc/`.
pub const STATE_FILE: &str = "k3rs-agent-load-balancer.json";
/// At most this many servers are kept (a hostile Endpoints object cannot grow the list).
const MAX_SERVERS: usize = 64;

/// Why the load balancer could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoadBalancerError {
    /// The `--server` URL has no usable `host:port`.
    #[error("--server {url:?}: {reason}")]
    ServerUrl { url: String, reason: String },
    /// Neither the configured nor an ephemeral local port could be bound.
    #[error("cannot listen on 127.0.0.1:{port} for the API server load balancer: {source}")]
    Bind {
        port: u16,
        #[source]
        source: std::io::Error,
    },
}

/// What starting needs.
#[derive(Debug, Clone)]
pub struct LoadBalancerConfig {
    /// The `--server` URL (`https://host:port`); its address is the default server.
    pub server_url: String,
    /// A server to use whenever it is healthy (the embedded agent's own API server).
    pub preferred: Option<String>,
    /// The local port (`--lb-server-port`).
    pub port: u16,
    /// `<data-dir>`; the state file lives in `<data-dir>/agent/etc/`.
    pub data_dir: PathBuf,
}

/// A running load balancer; dropping it stops the listener and the health checks.
pub struct LoadBalancer {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    state_file: PathBuf,
    server_url: String,
}

#[derive(Debug)]
struct State {
    default_server: String,
    preferred: Option<String>,
    /// In order: preferred, default, then the Endpoints' addresses.
    servers: Vec<Backend>,
    /// The server new connections went to last.
    current: Option<String>,
}

#[derive(Debug)]
struct Backend {
    address: String,
    healthy: bool,
    /// Bumped to close every connection proxied to this server.
    generation: tokio::sync::watch::Sender<u64>,
}

impl Backend {
    fn new(address: String) -> Self {
        Backend {
            address,
            // Optimistic until the first check: a fresh agent should not wait a second.
            healthy: true,
            generation: tokio::sync::watch::channel(0).0,
        }
    }

    fn close_connections(&self) {
        self.generation.send_modify(|g| *g += 1);
    }
}

/// What the state file holds (k3s's field names).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PersistedState {
    #[serde(rename = "ServerURL")]
    server_url: String,
    server_addresses: Vec<String>,
}

/// The `host:port` of an `https://host[:port]` URL (port 443 when absent).
pub fn address_of_url(url: &str) -> Result<String, String> {
    let authority = url
        .strip_prefix("https://")
        .ok_or("the URL must start with https://")?
        .trim_end_matches('/');
    if authority.is_empty() || authority.contains(['/', '@', '?', '#']) {
        return Err("expected https://host[:port]".into());
    }
    let (host, port) = super::join::split_host_port(authority)?;
    let port: u16 = match port {
        Some(p) => p.parse().map_err(|_| format!("invalid port {p:?}"))?,
        None => 443,
    };
    if host.is_empty() {
        return Err("the URL has no host".into());
    }
    Ok(join_host_port(host, port))
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl LoadBalancer {
    /// Binds the local port, loads the persisted server list and starts proxying and health
    /// checking.
    pub async fn start(config: LoadBalancerConfig) -> Result<LoadBalancer, LoadBalancerError> {
        let default_server =
            address_of_url(&config.server_url).map_err(|reason| LoadBalancerError::ServerUrl {
                url: config.server_url.clone(),
                reason,
            })?;
        let state_file = config.data_dir.join("agent").join("etc").join(STATE_FILE);
        let persisted = read_state(&state_file, &config.server_url);
        let mut state = State {
            default_server,
            preferred: config.preferred.clone(),
            servers: Vec::new(),
            current: None,
        };
        state.set_servers(persisted);
        let listener = bind(config.port).await?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| LoadBalancerError::Bind {
                port: config.port,
                source,
            })?;
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            state_file,
            server_url: config.server_url,
        });
        tracing::info!(
            listen = %local_addr,
            servers = ?shared.lock().addresses(),
            "API server load balancer started"
        );
        let tasks = vec![
            tokio::spawn(accept_loop(listener, shared.clone())),
            tokio::spawn(health_loop(shared.clone())),
        ];
        Ok(LoadBalancer {
            shared,
            local_addr,
            tasks,
        })
    }

    /// The URL local clients use: `https://127.0.0.1:<port>`.
    pub fn local_url(&self) -> String {
        format!("https://{}", self.local_addr)
    }

    /// The local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The server the last proxied connection went to.
    pub fn current(&self) -> Option<String> {
        self.shared.lock().current.clone()
    }

    /// Every known server, in preference order.
    pub fn servers(&self) -> Vec<String> {
        self.shared.lock().addresses()
    }

    /// The servers to try first for something that cannot go through the proxy (joining,
    /// which needs the address the server sees): healthy ones first, in preference order.
    pub fn servers_healthy_first(&self) -> Vec<String> {
        let state = self.shared.lock();
        let mut order: Vec<&Backend> = state.servers.iter().collect();
        order.sort_by_key(|b| !b.healthy);
        order.iter().map(|b| b.address.clone()).collect()
    }

    /// Replaces the non-default servers with `addresses` (the `default/kubernetes`
    /// Endpoints), persisting the list when it changed.
    pub fn set_servers(&self, addresses: Vec<String>) {
        self.shared.set_servers(addresses);
    }

    /// A handle for [`watch_endpoints`].
    pub fn updater(&self) -> ServerListUpdater {
        ServerListUpdater {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for LoadBalancer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Updates a [`LoadBalancer`]'s server list from another task.
#[derive(Clone)]
pub struct ServerListUpdater {
    shared: Arc<Shared>,
}

impl ServerListUpdater {
    /// See [`LoadBalancer::set_servers`].
    pub fn set_servers(&self, addresses: Vec<String>) {
        self.shared.set_servers(addresses);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent under every panic point (plain field writes).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_servers(&self, addresses: Vec<String>) {
        let changed = {
            let mut state = self.lock();
            let before = state.addresses();
            state.set_servers(addresses);
            let after = state.addresses();
            (before != after).then_some(after)
        };
        if let Some(servers) = changed {
            tracing::info!(?servers, "API server load balancer: server list changed");
            self.persist(&servers);
        }
    }

    fn persist(&self, servers: &[String]) {
        let state = PersistedState {
            server_url: self.server_url.clone(),
            server_addresses: servers.to_vec(),
        };
        let result = serde_json::to_vec_pretty(&state)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                if let Some(dir) = self.state_file.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                let tmp = self.state_file.with_extension("json.tmp");
                std::fs::write(&tmp, bytes)?;
                std::fs::rename(&tmp, &self.state_file)
            });
        if let Err(e) = result {
            tracing::warn!(
                file = %self.state_file.display(),
                error = %e,
                "cannot save the API server list; a restart will start from --server only"
            );
        }
    }
}

impl State {
    fn addresses(&self) -> Vec<String> {
        self.servers.iter().map(|b| b.address.clone()).collect()
    }

    /// Preferred, default, then `extra` (deduplicated, capped); keeps the health of servers
    /// that stay and closes the connections of servers that leave.
    fn set_servers(&mut self, extra: Vec<String>) {
        let mut wanted: Vec<String> = Vec::new();
        let mut seen = BTreeSet::new();
        let firsts = self
            .preferred
            .iter()
            .chain(std::iter::once(&self.default_server))
            .cloned();
        for address in firsts.chain(extra) {
            if wanted.len() >= MAX_SERVERS {
                break;
            }
            if seen.insert(address.clone()) {
                wanted.push(address);
            }
        }
        let mut old = std::mem::take(&mut self.servers);
        for address in wanted {
            match old.iter().position(|b| b.address == address) {
                Some(i) => self.servers.push(old.swap_remove(i)),
                None => self.servers.push(Backend::new(address)),
            }
        }
        for gone in old {
            gone.close_connections();
        }
        if let Some(current) = &self.current
            && !self.servers.iter().any(|b| &b.address == current)
        {
            self.current = None;
        }
    }

    /// The servers to dial for a new connection, best first.
    fn candidates(&self) -> Vec<String> {
        let healthy = |address: &str| {
            self.servers
                .iter()
                .any(|b| b.address == address && b.healthy)
        };
        let mut order = Vec::new();
        if let Some(preferred) = &self.preferred
            && healthy(preferred)
        {
            order.push(preferred.clone());
        }
        if let Some(current) = &self.current
            && healthy(current)
            && !order.contains(current)
        {
            order.push(current.clone());
        }
        for backend in &self.servers {
            if backend.healthy && !order.contains(&backend.address) {
                order.push(backend.address.clone());
            }
        }
        // With nothing healthy, try everything: a check may just be behind.
        for backend in &self.servers {
            if !order.contains(&backend.address) {
                order.push(backend.address.clone());
            }
        }
        order
    }

    fn mark(&mut self, address: &str, healthy: bool) {
        let Some(backend) = self.servers.iter_mut().find(|b| b.address == address) else {
            return;
        };
        if backend.healthy == healthy {
            return;
        }
        backend.healthy = healthy;
        if healthy {
            tracing::info!(server = address, "API server is reachable again");
        } else {
            tracing::warn!(
                server = address,
                "API server unreachable; the load balancer skips it and closes its connections"
            );
            backend.close_connections();
            if self.current.as_deref() == Some(address) {
                self.current = None;
            }
        }
    }
}

fn read_state(path: &Path, server_url: &str) -> Vec<String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot read the saved API server list");
            return Vec::new();
        }
    };
    match serde_json::from_slice::<PersistedState>(&bytes) {
        // A list saved for another --server belongs to another cluster.
        Ok(state) if state.server_url == server_url => state
            .server_addresses
            .into_iter()
            .filter(|a| valid_address(a))
            .collect(),
        Ok(_) => Vec::new(),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "ignoring an unreadable saved API server list");
            Vec::new()
        }
    }
}

/// `host:port` with a numeric port and a host without whitespace or URL syntax.
fn valid_address(address: &str) -> bool {
    super::join::split_host_port(address).is_ok_and(|(host, port)| {
        !host.is_empty()
            && !host.contains(|c: char| c.is_whitespace() || "/@?#".contains(c))
            && port.is_some_and(|p| p.parse::<u16>().is_ok())
    })
}

async fn bind(port: u16) -> Result<TcpListener, LoadBalancerError> {
    let wanted = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
    match TcpListener::bind(wanted).await {
        Ok(listener) => Ok(listener),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && port != 0 => {
            tracing::warn!(
                port,
                "127.0.0.1:{port} is in use (another agent on this host?); the API server \
                 load balancer takes an ephemeral port"
            );
            TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
                .await
                .map_err(|source| LoadBalancerError::Bind { port, source })
        }
        Err(source) => Err(LoadBalancerError::Bind { port, source }),
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((client, _)) => {
                let shared = shared.clone();
                tokio::spawn(async move { proxy(client, shared).await });
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "load balancer accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn dial(address: &str) -> std::io::Result<TcpStream> {
    match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(address)).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connect timed out",
        )),
    }
}

async fn proxy(mut client: TcpStream, shared: Arc<Shared>) {
    let candidates = shared.lock().candidates();
    for address in candidates {
        match dial(&address).await {
            Ok(mut upstream) => {
                let _ = upstream.set_nodelay(true);
                let _ = client.set_nodelay(true);
                let mut closed = {
                    let mut state = shared.lock();
                    if state.current.as_deref() != Some(address.as_str()) {
                        tracing::info!(server = %address, "API server load balancer now uses this server");
                        state.current = Some(address.clone());
                    }
                    match state.servers.iter().find(|b| b.address == address) {
                        Some(backend) => backend.generation.subscribe(),
                        // Removed while dialing: use it for this one connection anyway.
                        None => tokio::sync::watch::channel(0).1,
                    }
                };
                closed.mark_unchanged();
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                    _ = closed.changed() => {
                        tracing::debug!(server = %address, "closing a connection to a server that went away");
                    }
                }
                return;
            }
            Err(e) => {
                tracing::debug!(server = %address, error = %e, "load balancer dial failed");
                shared.lock().mark(&address, false);
            }
        }
    }
    tracing::warn!("no API server reachable; closing the client connection");
}

async fn health_loop(shared: Arc<Shared>) {
    let mut ticks = tokio::time::interval(HEALTH_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let addresses = shared.lock().addresses();
        let checks = addresses.into_iter().map(|address| async move {
            let healthy = dial(&address).await.is_ok();
            (address, healthy)
        });
        for (address, healthy) in futures_util::future::join_all(checks).await {
            shared.lock().mark(&address, healthy);
        }
    }
}

/// The `host:port` addresses of the `default/kubernetes` Endpoints (port `https`, else the
/// first port); addresses that are not IPs are skipped.
pub fn endpoint_addresses(endpoints: &Endpoints) -> Vec<String> {
    let mut out = Vec::new();
    for subset in endpoints.subsets.iter().flatten() {
        let ports = subset.ports.as_deref().unwrap_or_default();
        let port = ports
            .iter()
            .find(|p| p.name.as_deref() == Some("https"))
            .or_else(|| ports.first())
            .and_then(|p| u16::try_from(p.port).ok())
            .filter(|p| *p != 0);
        let Some(port) = port else { continue };
        for address in subset.addresses.iter().flatten() {
            match address.ip.parse::<IpAddr>() {
                Ok(ip) => out.push(SocketAddr::new(ip, port).to_string()),
                Err(_) => crate::skip::warn_once(&format!("lb-endpoint-ip/{}", address.ip), || {
                    tracing::warn!(
                        address = %address.ip,
                        "default/kubernetes endpoint address is not an IP; skipped"
                    )
                }),
            }
        }
    }
    out
}

/// Keeps `updater`'s server list equal to the `default/kubernetes` Endpoints (plus the
/// default server), re-watching on errors. Runs until the task is dropped.
pub async fn watch_endpoints(client: kube::Client, updater: ServerListUpdater) {
    use kube::runtime::{WatchStreamExt, watcher};
    let api: kube::Api<Endpoints> = kube::Api::namespaced(client, "default");
    let config = watcher::Config::default().fields("metadata.name=kubernetes");
    let mut stream = watcher(api, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(endpoints) => {
                let addresses = endpoint_addresses(&endpoints);
                // An empty list is a transient state of the reconciler, not "no servers".
                if !addresses.is_empty() {
                    updater.set_servers(addresses);
                }
            }
            Err(e) => tracing::debug!(error = %e, "default/kubernetes watch error (retrying)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A TCP server that answers every connection with its name, then echoes.
    async fn named_server(name: &'static str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let _ = stream.write_all(name.as_bytes()).await;
                    let mut buf = [0u8; 64];
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (addr, task)
    }

    async fn who_answers(lb: &LoadBalancer) -> String {
        let mut stream = TcpStream::connect(lb.local_addr()).await.expect("connect");
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("an answer in time")
            .expect("read");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    fn config(dir: &Path, server: SocketAddr) -> LoadBalancerConfig {
        LoadBalancerConfig {
            server_url: format!("https://{server}"),
            preferred: None,
            port: 0,
            data_dir: dir.to_path_buf(),
        }
    }

    #[test]
    fn urls_become_addresses() {
        assert_eq!(
            address_of_url("https://10.0.0.1:6443").as_deref(),
            Ok("10.0.0.1:6443")
        );
        assert_eq!(
            address_of_url("https://k3s.example.com/").as_deref(),
            Ok("k3s.example.com:443")
        );
        assert_eq!(
            address_of_url("https://[fd00::1]:6443").as_deref(),
            Ok("[fd00::1]:6443")
        );
        for bad in [
            "http://x:1",
            "https://",
            "https://a:b",
            "https://u@h:1",
            "x",
        ] {
            assert!(address_of_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn endpoints_give_ip_port_pairs_and_skip_garbage() {
        let endpoints: Endpoints = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "subsets": [
                {"addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::2"}, {"ip": "not-an-ip"}],
                 "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]},
                {"addresses": [{"ip": "10.0.0.9"}], "ports": [{"port": 70000}]},
                {"addresses": [{"ip": "10.0.0.8"}]}
            ]
        }))
        .expect("endpoints");
        assert_eq!(
            endpoint_addresses(&endpoints),
            vec!["10.0.0.1:6443".to_string(), "[fd00::2]:6443".to_string()]
        );
    }

    #[tokio::test]
    async fn a_dead_server_is_skipped_and_its_connections_closed() {
        let dir = tempfile::tempdir().expect("dir");
        let (a, a_task) = named_server("a").await;
        let (b, _b_task) = named_server("b").await;
        let lb = LoadBalancer::start(config(dir.path(), a))
            .await
            .expect("start");
        lb.set_servers(vec![b.to_string()]);
        assert_eq!(lb.servers(), vec![a.to_string(), b.to_string()]);
        assert_eq!(who_answers(&lb).await, "a");
        // A long-lived connection to a (a watch).
        let mut held = TcpStream::connect(lb.local_addr()).await.expect("connect");
        let mut first = [0u8; 1];
        held.read_exact(&mut first).await.expect("greeting");
        assert_eq!(&first, b"a");
        // a dies: its listener goes away, so dials are refused.
        a_task.abort();
        let _ = a_task.await;
        let started = std::time::Instant::now();
        assert_eq!(who_answers(&lb).await, "b", "new connections go to b");
        assert!(started.elapsed() < Duration::from_secs(2));
        // The open connection to a is closed by the next health check (the process behind it
        // is in this test, so the kernel would not close it).
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(Duration::from_secs(3), held.read(&mut buf))
            .await
            .expect("closed within the health interval")
            .unwrap_or(0);
        assert_eq!(n, 0, "the connection to the dead server is closed");
        // Sticky: b stays in use.
        assert_eq!(who_answers(&lb).await, "b");
    }

    #[tokio::test]
    async fn the_preferred_server_wins_while_healthy() {
        let dir = tempfile::tempdir().expect("dir");
        let (a, _a_task) = named_server("a").await;
        let (own, own_task) = named_server("o").await;
        let mut cfg = config(dir.path(), a);
        cfg.preferred = Some(own.to_string());
        let lb = LoadBalancer::start(cfg).await.expect("start");
        assert_eq!(who_answers(&lb).await, "o");
        own_task.abort();
        let _ = own_task.await;
        assert_eq!(who_answers(&lb).await, "a");
    }

    #[tokio::test]
    async fn the_server_list_survives_a_restart_for_the_same_server_url_only() {
        let dir = tempfile::tempdir().expect("dir");
        let (a, _a) = named_server("a").await;
        let (b, _b) = named_server("b").await;
        {
            let lb = LoadBalancer::start(config(dir.path(), a))
                .await
                .expect("start");
            lb.set_servers(vec![b.to_string(), "10.255.0.1:6443".into()]);
        }
        let file = dir.path().join("agent/etc").join(STATE_FILE);
        assert!(file.is_file());
        let lb = LoadBalancer::start(config(dir.path(), a))
            .await
            .expect("restart");
        assert_eq!(
            lb.servers(),
            vec![a.to_string(), b.to_string(), "10.255.0.1:6443".to_string()]
        );
        drop(lb);
        // Another cluster's list is not used.
        let lb = LoadBalancer::start(config(dir.path(), b))
            .await
            .expect("other url");
        assert_eq!(lb.servers(), vec![b.to_string()]);
        drop(lb);
        // Garbage in the file is ignored, not fatal.
        std::fs::write(&file, b"{not json").expect("write");
        let lb = LoadBalancer::start(config(dir.path(), a))
            .await
            .expect("garbage");
        assert_eq!(lb.servers(), vec![a.to_string()]);
    }

    #[tokio::test]
    async fn the_default_server_is_never_dropped_and_the_list_is_capped() {
        let dir = tempfile::tempdir().expect("dir");
        let (a, _a) = named_server("a").await;
        let lb = LoadBalancer::start(config(dir.path(), a))
            .await
            .expect("start");
        let many: Vec<String> = (0..200)
            .map(|i| format!("10.1.{}.{}:6443", i / 250, i % 250))
            .collect();
        lb.set_servers(many);
        let servers = lb.servers();
        assert_eq!(servers.len(), MAX_SERVERS);
        assert_eq!(servers[0], a.to_string());
        lb.set_servers(Vec::new());
        assert_eq!(lb.servers(), vec![a.to_string()]);
    }

    #[tokio::test]
    async fn a_taken_port_falls_back_to_an_ephemeral_one() {
        let dir = tempfile::tempdir().expect("dir");
        let (a, _a) = named_server("a").await;
        let taken = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let mut cfg = config(dir.path(), a);
        cfg.port = taken.local_addr().expect("addr").port();
        let lb = LoadBalancer::start(cfg).await.expect("start");
        assert_ne!(lb.local_addr().port(), cfg_port(&taken));
        assert_eq!(who_answers(&lb).await, "a");
    }

    fn cfg_port(listener: &TcpListener) -> u16 {
        listener.local_addr().expect("addr").port()
    }
}
