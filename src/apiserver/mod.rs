//! The API server: the only door to the cluster's state, and the only module that may
//! use `store`. HTTPS (rustls) on :6443, and an in-process transport for the components
//! running inside `k3rs server` ([`local_client`]); authentication by client certificate or
//! bearer token; discovery, OpenAPI, health, version and metrics endpoints; the REST
//! verbs for every registered resource, served from a watch cache that one store
//! watch keeps current.
//!
//! May not touch: the scheduler, controllers, kubelet or proxy — they are clients.

pub mod admission;
pub mod auth;
pub mod cluster;
pub mod http;
pub mod storage;

use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use self::admission::pod_security;
use self::auth::{audit, authn, authz, join_tokens, sa_token};
use self::cluster::{
    bootstrap_copy, encryption_admin, master_endpoints, member_node, node_join, server_join,
    snapshots,
};
use self::http::{
    discovery, events_view, handlers, limits, local_client, metrics, node_proxy, openapi, request,
    status, tls,
};
use self::storage::{crd, encryption, kv, registry, watchcache};
use crate::cli::Cidr;
use crate::store::{Store, StoreConfig};
use authn::Identity;
use request::{Query, Route};
use status::ApiError;

/// Largest request body accepted (kube-apiserver's limit).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The Kubernetes version this server speaks.
pub const KUBE_VERSION: (&str, &str) = ("1", "33");

/// Everything the API server needs to start.
#[derive(Clone, Debug)]
pub struct ApiServerConfig {
    pub listen: SocketAddr,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    pub client_ca_pem: String,
    /// The server token's secret (joins servers and agents; no API credential).
    pub token_secret: Option<String>,
    /// `--agent-token`'s secret (joins agents only).
    pub agent_token_secret: Option<String>,
    /// Directory of the store (`<data-dir>/server/db`).
    pub store_dir: std::path::PathBuf,
    pub service_cidr: Cidr,
    pub cluster_dns: IpAddr,
    pub node_port_range: RangeInclusive<u16>,
    /// Address advertised in discovery (`serverAddressByClientCIDRs`) and the
    /// `kubernetes` Service's endpoints.
    pub advertise: SocketAddr,
    /// Snapshot settings; `None` leaves the snapshot endpoints unavailable.
    pub snapshots: Option<snapshots::SnapshotSettings>,
    /// Credentials for `pods/log|exec|attach|portforward` towards kubelets; `None` answers
    /// those with 503.
    pub kubelet_client: Option<node_proxy::KubeletClientConfig>,
    /// Signs joining nodes' kubelet certificates; `None` leaves the join endpoints
    /// (`/cacerts`, `/v1-k3rs/…`) answering 404.
    pub node_signer: Option<Arc<crate::pki::NodeSigner>>,
    /// The service-account signing key (`<data-dir>/server/tls/service.key`, created at first
    /// start); `None` disables TokenRequest and service-account bearer tokens.
    pub service_account_key_file: Option<std::path::PathBuf>,
    /// Further public keys accepted for service-account tokens (`service-account-key-file`),
    /// e.g. the previous signing key during a rotation.
    pub service_account_extra_key_files: Vec<std::path::PathBuf>,
    /// The raft group's clock.
    pub raft_timing: RaftTiming,
    /// Replication with other servers; `None`: a one-member store with no peer port.
    pub cluster: Option<ClusterConfig>,
    /// In-flight limits and request timeouts (`--kube-apiserver-arg`).
    pub limits: limits::ServingLimits,
    /// The PodSecurity admission's defaults and exemptions
    /// (`--pod-security-admission-config-file`).
    pub pod_security: pod_security::Config,
    /// Encryption at rest (`--secrets-encryption`, `encryption-provider-config`).
    pub encryption: Option<Arc<encryption::Transformer>>,
    /// The audit log's policy, path and rotation (`--kube-apiserver-arg audit-*`).
    pub audit: audit::Settings,
    /// Optional admission plugins and the TokenRequest cap (`--kube-apiserver-arg
    /// enable-admission-plugins`, `service-account-max-token-expiration`).
    pub admission: admission::Settings,
}

/// The store's raft clock, as `k3rs server --etcd-arg` sets it (the API server owns the
/// store; callers configure it through here, never through `store` itself).
pub use crate::store::RaftTiming;

/// Whether a datastore already exists in `store_dir` (a first start joins a cluster; a
/// later one ignores `--server`).
pub fn datastore_exists(store_dir: &std::path::Path) -> bool {
    store_dir.join(crate::store::DB_FILE_NAME).exists()
}

/// How this server takes part in a multi-server cluster.
#[derive(Clone)]
pub struct ClusterConfig {
    /// This member's name (the node name).
    pub name: String,
    /// The raft peer port's listening address.
    pub peer_listen: SocketAddr,
    /// The URL other members reach the peer port at, `https://<advertise ip>:2380`.
    pub peer_url: String,
    /// The peer CA and this member's peer certificate and key (PEM).
    pub peer_ca_pem: String,
    pub peer_cert_pem: String,
    pub peer_key_pem: String,
    /// `--cluster-init`: open the peer port even if the store has never been clustered.
    pub init: bool,
    /// Set when this server has just joined: its member id and the peers to start with.
    pub joined: Option<JoinedMember>,
    /// `<data-dir>/server/tls`, for the bootstrap data other servers fetch.
    pub tls_dir: std::path::PathBuf,
    /// The settings every server must share (see [`server_join`]).
    pub critical: std::collections::BTreeMap<String, String>,
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("name", &self.name)
            .field("peer_listen", &self.peer_listen)
            .field("peer_url", &self.peer_url)
            .field("init", &self.init)
            .field("joined", &self.joined)
            .finish()
    }
}

/// A server that was just added to the group: its raft id and the members' ids and peer
/// URLs, as the cluster answered (checked when the store starts).
#[derive(Clone, Debug)]
pub struct JoinedMember {
    pub id: u64,
    pub peers: Vec<(u64, String)>,
    /// The cluster's id, when the cluster has one.
    pub cluster_id: Option<[u8; 16]>,
}

/// Shared state of every request.
pub struct AppState {
    pub config: ApiServerConfig,
    pub store: kv::KvStore,
    pub cache: Arc<watchcache::WatchCache>,
    pub registry: registry::Registry,
    pub custom: RwLock<crd::CustomVersions>,
    /// RBAC and the Node authorizer.
    pub authz: Arc<authz::Authorizer>,
    /// Signs and verifies service-account tokens.
    pub sa_tokens: Option<sa_token::TokenSigner>,
    pub allocation: tokio::sync::Mutex<()>,
    pub metrics: metrics::Metrics,
    pub snapshots: Option<Arc<snapshots::SnapshotManager>>,
    /// TLS towards kubelets (from `ApiServerConfig::kubelet_client`).
    pub kubelet_tls: Option<Arc<rustls::ClientConfig>>,
    /// The revision of the newest namespace write made through this server. A create
    /// checks its namespace in the watch cache once the cache has applied this revision,
    /// rather than every revision the store has committed: under load the latter costs
    /// each create a wait for other clients' writes to reach the cache.
    pub namespace_written: AtomicI64,
    /// The in-flight budgets of network requests (`config.limits`).
    pub inflight: limits::Inflight,
    /// The audit log; `None` when no policy and path are set.
    pub auditor: Option<Arc<audit::Auditor>>,
}

/// A running API server.
pub struct ApiServer {
    pub local_addr: SocketAddr,
    pub state: Arc<AppState>,
    shutdown: tokio::sync::watch::Sender<bool>,
    accept_loop: tokio::task::JoinHandle<()>,
    /// The raft peer port's accept loop (it holds a handle to the store).
    peer_loop: Option<tokio::task::JoinHandle<()>>,
    /// The serving certificate; updating it changes what the next handshake presents.
    pub serving_cert: crate::pki::live::LiveCert,
}

impl ApiServer {
    /// A client for a component running in this process, authenticated as `identity`
    /// (see [`local_client`]).
    pub fn local_client(&self, identity: Identity, component: &str) -> kube::Client {
        local_client::client(self.state.clone(), identity, component)
    }

    /// Resolves, with the reason, once this server's datastore member can no longer take
    /// part in the cluster (removed by `kubectl delete node`, or the cluster writes a
    /// format this build cannot read): the server must then stop.
    pub fn stopped_for_good(&self) -> impl std::future::Future<Output = anyhow::Error> + use<> {
        let store = self.state.store.clone();
        async move { anyhow::Error::new(store.stopped_for_good().await) }
    }

    /// Stops accepting connections, hands raft leadership to another server if this one
    /// leads (a clean stop, e.g. a rolling restart, then costs no election timeout), and
    /// stops the peer port.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.accept_loop.await;
        if self.peer_loop.is_some() && self.state.store.is_leader() {
            let moved = self.state.store.hand_over_leadership().await;
            tracing::info!(moved, "raft leadership handed over before stopping");
        }
        if let Some(peer_loop) = self.peer_loop {
            peer_loop.abort();
        }
    }
}

/// Opens the store, fills the watch cache, creates the built-in namespaces and the
/// `kubernetes` Service, and starts serving.
pub async fn start(config: ApiServerConfig) -> anyhow::Result<ApiServer> {
    let serving_cert = crate::pki::live::LiveCert::new(&crate::pki::IssuedCert {
        cert_pem: config.serving_cert_pem.clone(),
        key_pem: config.serving_key_pem.clone(),
    })
    .map_err(|e| anyhow::anyhow!("loading the serving certificate: {e}"))?;
    let tls = tls::server_config(&serving_cert, &config.client_ca_pem)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding the API server to {}", config.listen))?;
    let local_addr = listener
        .local_addr()
        .context("reading the listening address")?;
    let (raw_store, peer_loop) = open_store(&config).await?;
    let store = kv::KvStore::new(raw_store.clone(), config.encryption.clone());
    let cache = watchcache::WatchCache::start(store.clone())
        .await
        .context("filling the watch cache")?;
    let snapshot_manager = config
        .snapshots
        .clone()
        .map(|settings| snapshots::SnapshotManager::new(raw_store.clone(), settings));
    if let Some(manager) = &snapshot_manager {
        tokio::spawn(manager.clone().run_schedule());
        tokio::spawn(manager.clone().run_sync());
    }
    let kubelet_tls = config
        .kubelet_client
        .as_ref()
        .map(node_proxy::tls_config)
        .transpose()
        .context("loading the kubelet-client credentials")?;
    let authorizer = Arc::new(authz::Authorizer::new(&cache));
    authorizer.spawn_refresher(cache.clone());
    let sa_tokens = config
        .service_account_key_file
        .as_deref()
        .map(|path| {
            sa_token::TokenSigner::load_with_keys(path, &config.service_account_extra_key_files)
        })
        .transpose()
        .context("loading the service-account signing key")?;
    let auditor = audit::Auditor::start(&config.audit).context("starting the audit log")?;
    let store_revision = store.current_revision();
    let state = Arc::new(AppState {
        auditor,
        inflight: limits::Inflight::new(&config.limits),
        authz: authorizer,
        kubelet_tls,
        sa_tokens,
        snapshots: snapshot_manager,
        config,
        store,
        cache,
        registry: registry::Registry::new(),
        custom: RwLock::new(Default::default()),
        allocation: tokio::sync::Mutex::new(()),
        metrics: metrics::Metrics::default(),
        namespace_written: AtomicI64::new(store_revision),
    });
    crd::register_all(&state);
    bootstrap(&state)
        .await
        .context("creating the built-in namespaces and the kubernetes Service")?;
    bootstrap_rbac(&state)
        .await
        .context("creating the default RBAC roles")?;
    // A member of a group lists every live server: its first round (at once, below)
    // reads the master leases rather than writing itself alone over the list.
    if !state.store.is_clustered() {
        master_endpoints::reconcile(&state, &[state.config.advertise.ip()])
            .await
            .context("writing the kubernetes Service's endpoints")?;
    }
    master_endpoints::spawn(&state);
    member_node::spawn(&state);
    join_tokens::ensure(&state).await;
    if let (Some(secret), Some(cluster)) = (&state.config.token_secret, &state.config.cluster)
        && let Err(e) = bootstrap_copy::ensure(&state.store, secret, &cluster.tls_dir).await
    {
        tracing::warn!(error = %e, "could not keep the cluster's bootstrap data in the datastore");
    }
    let (shutdown, mut shutdown_rx) = tokio::sync::watch::channel(false);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let serve_state = state.clone();
    let accept_loop = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown_rx.changed() => break,
                accepted = listener.accept() => {
                    let Ok((stream, peer)) = accepted else { continue };
                    let _ = stream.set_nodelay(true);
                    let acceptor = acceptor.clone();
                    let state = serve_state.clone();
                    tokio::spawn(async move { serve_connection(acceptor, stream, peer, state).await });
                }
            }
        }
    });
    Ok(ApiServer {
        local_addr,
        state,
        shutdown,
        accept_loop,
        peer_loop,
        serving_cert,
    })
}

/// Raft traffic gets a runtime (and thread) of its own: on the API's runtime a busy
/// API server would queue the peer tasks behind its requests, and every write waits
/// for several peer messages. It runs for the life of the process.
fn peer_runtime() -> anyhow::Result<tokio::runtime::Handle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the raft peer runtime")?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("store-peers".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))
        .context("starting the raft peer thread")?;
    Ok(handle)
}

/// Opens the store: alone, or as a member of a raft group with its peer port serving
/// (with `--cluster-init`, after a join, or when the store on disk is already clustered).
/// A member waits until it has a leader and has caught up with the group before the API
/// server goes on, logging while it waits.
async fn open_store(
    config: &ApiServerConfig,
) -> anyhow::Result<(Store, Option<tokio::task::JoinHandle<()>>)> {
    let mut store_config = StoreConfig::new(&config.store_dir);
    store_config.timing = config.raft_timing;
    let Some(cluster) = config.cluster.clone() else {
        let store = tokio::task::spawn_blocking(move || Store::open(store_config))
            .await
            .context("opening the store")?
            .context("opening the store")?;
        return Ok((store, None));
    };
    if let Some(joined) = &cluster.joined {
        store_config.node_id = joined.id;
        store_config.join = true;
        store_config.cluster_id = joined.cluster_id;
    }
    let peer_tls = crate::store::peers::PeerTls::from_pem(
        &cluster.peer_ca_pem,
        &cluster.peer_cert_pem,
        &cluster.peer_key_pem,
    )
    .map_err(|e| anyhow::anyhow!("loading the raft peer certificate: {e}"))?;
    let peer_runtime = peer_runtime()?;
    let mut network = crate::store::peers::PeerNetwork::new(peer_runtime.clone(), &peer_tls)
        .with_source(cluster.peer_listen.ip())
        .with_snapshot_dir(config.store_dir.clone());
    if let Some(joined) = &cluster.joined {
        let mut peers = Vec::new();
        for (id, url) in joined.peers.iter().filter(|(id, _)| *id != joined.id) {
            match crate::store::peer_address(url) {
                Some(address) => peers.push((*id, address)),
                None => {
                    tracing::warn!(member = %format!("{id:x}"), %url, "skipping a member whose peer URL is not https://<ip>:<port>")
                }
            }
        }
        crate::store::Transport::set_peers(&mut network, &peers);
    }
    let store = tokio::task::spawn_blocking(move || {
        Store::open_with_transport(store_config, Box::new(network))
    })
    .await
    .context("opening the store")?
    .context("opening the store")?;
    if !(cluster.init || cluster.joined.is_some() || store.is_clustered()) {
        return Ok((store, None));
    }
    // Bound here (a bind error stops the server), registered with the peer runtime.
    let listener = std::net::TcpListener::bind(cluster.peer_listen)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .with_context(|| format!("binding the raft peer port {}", cluster.peer_listen))?;
    tracing::info!(address = %cluster.peer_listen, member = %format!("{:x}", store.member_id()), "raft peer port listening");
    let sink = crate::store::peers::store_sink(store.clone());
    let own_cluster: crate::store::peers::ClusterIdSource = {
        let store = store.clone();
        Arc::new(move || store.cluster_id())
    };
    let snapshot_dir = config.store_dir.clone();
    let peer_loop = peer_runtime.spawn(async move {
        match TcpListener::from_std(listener) {
            Ok(listener) => {
                crate::store::peers::serve(listener, peer_tls, sink, snapshot_dir, own_cluster)
                    .await
            }
            Err(e) => tracing::error!(error = %e, "raft peer port: cannot serve"),
        }
    });
    // Wait for a leader and for this member to have applied everything committed.
    let started = Instant::now();
    let mut last_log = Instant::now();
    loop {
        match store.read_barrier().await {
            Ok(_) => break,
            // A member removed from the group while it was down hears so from the others.
            Err(
                e @ (crate::store::StoreError::Removed { .. }
                | crate::store::StoreError::Incompatible { .. }),
            ) => return Err(e.into()),
            Err(e) => {
                if last_log.elapsed() >= Duration::from_secs(5) {
                    last_log = Instant::now();
                    tracing::warn!(error = %e, waited_s = started.elapsed().as_secs(), "waiting for the datastore's raft group (a majority of the servers must be up)");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    // Record (or update) this member's name and peer URL for the others.
    let me = store.member_id();
    let recorded = store
        .members()
        .into_iter()
        .find(|m| m.id == me)
        .is_some_and(|m| m.name == cluster.name && m.peer_url == cluster.peer_url);
    if !recorded {
        store
            .set_member(me, &cluster.name, &cluster.peer_url)
            .await
            .context("recording this server's peer URL in the datastore")?;
    }
    Ok((store, Some(peer_loop)))
}

async fn serve_connection(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    state: Arc<AppState>,
) {
    let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let identity = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(|cert| authn::from_certificate(cert));
    let activity = Arc::new(ConnActivity::new());
    let service_activity = activity.clone();
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let state = state.clone();
        let identity = identity.clone();
        let active = ActiveRequest::start(service_activity.clone());
        async move {
            let mut req = req.map(RequestBody::Network);
            req.extensions_mut().insert(PeerAddr(peer));
            let response = dispatch(state, identity, req).await;
            // The request stays active until its body is sent (a watch, for as long as it
            // streams).
            Ok::<_, std::convert::Infallible>(response.map(|body| body_with_guard(body, active)))
        }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // Slowloris: a client gets limits::HEADER_READ_TIMEOUT to send a request's headers,
    // which also ends an idle HTTP/1.1 keep-alive connection.
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits::HEADER_READ_TIMEOUT);
    builder.http2().timer(hyper_util::rt::TokioTimer::new());
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
    tokio::pin!(connection);
    let mut closing = false;
    loop {
        let idle_at = activity.idle_deadline();
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                break;
            }
            _ = tokio::time::sleep_until(idle_at.into()), if !closing => {
                if activity.idle_deadline() <= Instant::now() {
                    tracing::debug!(%peer, "closing an idle connection");
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
}

/// How many requests of a connection are in progress, and since when it has had none
/// (for [`limits::IDLE_TIMEOUT`]).
struct ConnActivity {
    active: std::sync::atomic::AtomicUsize,
    idle_since: std::sync::Mutex<Instant>,
}

impl ConnActivity {
    fn new() -> Self {
        ConnActivity {
            active: std::sync::atomic::AtomicUsize::new(0),
            idle_since: std::sync::Mutex::new(Instant::now()),
        }
    }

    /// When the connection will have been idle for [`limits::IDLE_TIMEOUT`]; while a
    /// request is in progress, a full timeout from now (checked again then).
    fn idle_deadline(&self) -> Instant {
        if self.active.load(std::sync::atomic::Ordering::Acquire) > 0 {
            return Instant::now() + limits::IDLE_TIMEOUT;
        }
        let since = *self
            .idle_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        since + limits::IDLE_TIMEOUT
    }
}

/// One request in progress on a connection, until its response body is dropped.
struct ActiveRequest(Arc<ConnActivity>);

impl ActiveRequest {
    fn start(activity: Arc<ConnActivity>) -> Self {
        activity
            .active
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        ActiveRequest(activity)
    }
}

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        let mut since = self
            .0
            .idle_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if self
            .0
            .active
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            *since = Instant::now();
        }
    }
}

/// A response body that holds `guard` until the body has been sent or dropped: a
/// connection's request stays counted as active, an audited stream writes its
/// ResponseComplete, when the guard drops.
pub(crate) fn body_with_guard<G: Send + Unpin + 'static>(
    body: axum::body::Body,
    guard: G,
) -> axum::body::Body {
    axum::body::Body::new(GuardedBody {
        body,
        _guard: guard,
    })
}

struct GuardedBody<G> {
    body: axum::body::Body,
    _guard: G,
}

impl<G: Unpin> hyper::body::Body for GuardedBody<G> {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

fn verb_of(method: &Method, route: &Route, query: &Query) -> &'static str {
    match (method, route) {
        (&Method::GET, Route::Resource(t)) if t.legacy_watch || query.flag("watch") => "WATCH",
        (&Method::GET, Route::Resource(t)) if t.name.is_none() => "LIST",
        (&Method::GET, _) => "GET",
        (&Method::POST, _) => "POST",
        (&Method::PUT, _) => "PUT",
        (&Method::PATCH, _) => "PATCH",
        (&Method::DELETE, _) => "DELETE",
        _ => "OTHER",
    }
}

/// A request's body: still arriving on a network connection, or already in memory (a
/// request from an in-process component, see [`local_client`]).
pub(crate) enum RequestBody {
    Network(hyper::body::Incoming),
    Local(bytes::Bytes),
}

/// Serves one request from a client authenticated as `cert_identity` (its client
/// certificate's subject) or by the request's own credentials. A panic while serving it
/// fails this request only, with a 500 Status worded as kube-apiserver's panic recovery
/// words it (the panic hook has logged where and why); the connection and every other
/// request go on.
pub(crate) async fn dispatch(
    state: Arc<AppState>,
    cert_identity: Option<Identity>,
    req: Request<RequestBody>,
) -> Response {
    // Both clones share the request's bytes: no allocation on the path of every request.
    let method = req.method().clone();
    let uri = req.uri().clone();
    let audit_id = audit::audit_id(req.headers());
    let served = dispatch_unguarded(state, cert_identity, req, audit_id.clone());
    let mut response = match crate::panics::catch("apiserver", served).await {
        Ok(response) => response,
        Err(panic) => {
            tracing::error!(%method, path = uri.path(), %panic, "a request handler panicked");
            panicked()
        }
    };
    // Every answer names its audit ID, audited or not, as kube-apiserver's do.
    if let Ok(value) = HeaderValue::from_str(&audit_id) {
        response.headers_mut().insert("audit-id", value);
    }
    response
}

/// The client's address, for the audit log's `sourceIPs` (absent on in-process requests).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerAddr(pub SocketAddr);

/// kube's `sourceIPs`: the `X-Forwarded-For` chain, `X-Real-Ip`, then the peer's address
/// (loopback for in-process clients).
fn source_ips(parts: &axum::http::request::Parts) -> Vec<String> {
    let mut ips: Vec<String> = parts
        .headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|ip| ip.parse::<IpAddr>().is_ok())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if ips.is_empty()
        && let Some(ip) = parts
            .headers
            .get("x-real-ip")
            .and_then(|v| v.to_str().ok())
            .filter(|ip| ip.trim().parse::<IpAddr>().is_ok())
    {
        ips.push(ip.trim().to_string());
    }
    let peer = parts
        .extensions
        .get::<PeerAddr>()
        .map(|p| p.0.ip().to_canonical().to_string())
        .unwrap_or_else(|| "127.0.0.1".to_string());
    if ips.last() != Some(&peer) {
        ips.push(peer);
    }
    ips
}

/// Starts auditing a request as the policy decides, with the authenticated (not the
/// impersonated) user, as kube's audit filter does.
fn begin_audit(
    state: &AppState,
    identity: &Identity,
    parts: &axum::http::request::Parts,
    route: Option<&Route>,
    query: Option<&Query>,
    audit_id: String,
    received: std::time::SystemTime,
) -> Option<audit::Recorder> {
    let auditor = state.auditor.as_ref()?;
    let path = parts.uri.path();
    let (verb, resource) = match (route, query) {
        (Some(Route::Resource(target)), Some(query)) => (
            authz::resource_verb(&parts.method, target, query),
            Some(audit::ResourceAttributes {
                group: &target.info.group,
                version: &target.info.version,
                resource: &target.info.plural,
                subresource: target.subresource.as_deref().unwrap_or_default(),
                namespace: target.namespace.as_deref().unwrap_or_default(),
                name: target.name.as_deref().unwrap_or_default(),
                kind: if target.subresource.is_none() {
                    &target.info.kind
                } else {
                    ""
                },
            }),
        ),
        _ => (authz::path_attributes(&parts.method, path).verb, None),
    };
    let attrs = audit::Attributes {
        user: identity,
        verb,
        resource,
        path,
    };
    let uri = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str().to_string())
        .unwrap_or_else(|| path.to_string());
    let user_agent = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    auditor.begin(
        &attrs,
        audit::RequestFacts {
            audit_id,
            uri,
            source_ips: source_ips(parts),
            user_agent,
            received,
        },
    )
}

/// kube-apiserver's answer to a request whose handler panicked.
fn panicked() -> Response {
    status::ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        "This request caused apiserver to panic. Look in the logs for details.",
    )
    .into_response()
}

async fn dispatch_unguarded(
    state: Arc<AppState>,
    cert_identity: Option<Identity>,
    req: Request<RequestBody>,
    audit_id: String,
) -> Response {
    let started = Instant::now();
    let received = std::time::SystemTime::now();
    let (parts, body) = req.into_parts();
    if server_join::handles(parts.uri.path()) {
        let body = match read_body(body, &parts.method).await {
            Ok(body) => body,
            Err(e) => return e.into_response(),
        };
        let response = server_join::serve(
            &state,
            cert_identity.as_ref(),
            &parts.method,
            parts.uri.path(),
            &parts.headers,
            &body,
        )
        .await;
        tracing::debug!(path = %parts.uri.path(), code = response.status().as_u16(), "server join request");
        return response;
    }
    if node_join::handles(parts.uri.path()) {
        let response = node_join::serve(
            &state,
            state.config.node_signer.as_deref(),
            cert_identity.as_ref(),
            &parts.method,
            parts.uri.path(),
            &parts.headers,
        )
        .await;
        tracing::debug!(path = %parts.uri.path(), code = response.status().as_u16(), "join request");
        return response;
    }
    let identity = cert_identity
        .or_else(|| {
            parts
                .headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|a| authn::bearer_identity(&state, a))
        })
        .unwrap_or_else(Identity::anonymous);
    let query = Query::parse(parts.uri.query());
    let route = request::route(parts.uri.path(), &state.registry);
    let mut recorder = begin_audit(
        &state,
        &identity,
        &parts,
        route.as_ref().ok(),
        query.as_ref().ok(),
        audit_id,
        received,
    );
    let long_running = match (&route, &query) {
        (Ok(route), Ok(query)) => limits::is_long_running(&parts.method, route, query),
        _ => false,
    };
    let response = dispatch_authenticated(
        state,
        identity,
        parts,
        body,
        query,
        route,
        started,
        &mut recorder,
    )
    .await;
    match recorder {
        Some(recorder) => recorder.finish(response, long_running).await,
        None => response,
    }
}

/// Serves an authenticated (or anonymous) request: impersonation, in-flight limits,
/// authorization, then the handler; `recorder` learns what the audit log needs.
#[allow(clippy::too_many_arguments)]
async fn dispatch_authenticated(
    state: Arc<AppState>,
    identity: Identity,
    parts: axum::http::request::Parts,
    body: RequestBody,
    query: Result<Query, ApiError>,
    route: Result<Route, ApiError>,
    started: Instant,
    recorder: &mut Option<audit::Recorder>,
) -> Response {
    let identity = if identity.is_anonymous() {
        identity
    } else {
        match authz::impersonate(&state.authz, identity.clone(), &parts.headers) {
            Ok(impersonated) => {
                if impersonated != identity
                    && let Some(recorder) = recorder.as_mut()
                {
                    recorder.impersonated(&impersonated);
                }
                impersonated
            }
            Err(e) => return e.into_response(),
        }
    };
    if parts.uri.path().starts_with(encryption_admin::API_PREFIX) {
        if let Err(e) = authz::require_masters(&identity, encryption_admin::ADMIN_ACTION) {
            return e.into_response();
        }
        let body = match read_body(body, &parts.method).await {
            Ok(b) => b,
            Err(e) => return e.into_response(),
        };
        return encryption_admin::serve(
            &state.store,
            &identity,
            &parts.method,
            parts.uri.path(),
            &body,
        )
        .await;
    }
    if parts.uri.path().starts_with(snapshots::API_PREFIX) {
        if let Err(e) = authz::require_masters(&identity, snapshots::ADMIN_ACTION) {
            return e.into_response();
        }
        let body = match read_body(body, &parts.method).await {
            Ok(b) => b,
            Err(e) => return e.into_response(),
        };
        let response = snapshots::serve(
            state.snapshots.as_ref(),
            &identity,
            &parts.method,
            parts.uri.path(),
            &body,
        )
        .await;
        tracing::debug!(user = %identity.user, path = %parts.uri.path(), code = response.status().as_u16(), "request");
        return response;
    }
    let query = match query {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    let route = match route {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let verb = verb_of(&parts.method, &route, &query);
    let resource = match &route {
        Route::Resource(t) => t.info.plural.clone(),
        _ => String::new(),
    };
    let public = matches!(route, Route::Healthz(_) | Route::Version);
    // Every answer from here on is counted in the metrics and logged once.
    let finish = |response: Response, path: &str| -> Response {
        let code = response.status().as_u16();
        state
            .metrics
            .observe(verb, &resource, code, started.elapsed());
        tracing::debug!(user = %identity.user, verb, path, code, "request");
        response
    };
    // kube's in-flight limits apply after authentication and before authorization, to
    // network requests that are not long-running. The in-process components' requests
    // are not counted: they are the server's own, which kube's priority and fairness keeps
    // apart from user traffic too.
    let long_running = limits::is_long_running(&parts.method, &route, &query);
    let inflight_slot = if long_running || matches!(body, RequestBody::Local(_)) {
        None
    } else {
        match state
            .inflight
            .admit(limits::is_mutating(&parts.method), &identity.groups)
        {
            limits::Admission::Serve(slot) => slot,
            limits::Admission::Refuse => {
                return finish(limits::too_many_requests(), parts.uri.path());
            }
        }
    };
    let decision = if identity.is_anonymous() {
        Ok(())
    } else {
        authorize(
            &state,
            &identity,
            &parts.method,
            &route,
            &query,
            parts.uri.path(),
        )
    };
    if !identity.is_anonymous()
        && let Some(recorder) = recorder.as_mut()
    {
        match &decision {
            Ok(()) => recorder.decision(true, ""),
            Err((_, reason)) => recorder.decision(false, reason),
        }
    }
    if let Err((denied, _)) = decision {
        return finish(denied.into_response(), parts.uri.path());
    }
    // Node streams (logs, exec, attach, port-forward) keep the connection for the upgrade
    // and stream their bodies, so they take the request before any body is read.
    if let Route::Resource(target) = &route
        && node_proxy::handles(target)
        && !identity.is_anonymous()
    {
        let path = parts.uri.path().to_string();
        let response = match body {
            RequestBody::Network(body) => {
                node_proxy::serve(&state, target, Request::from_parts(parts, body)).await
            }
            RequestBody::Local(_) => ApiError::bad_request(
                "logs, exec, attach and port-forward need a network connection to the API server",
            )
            .into_response(),
        };
        return finish(response, &path);
    }
    let path = parts.uri.path().to_string();
    let response = if identity.is_anonymous() && !public {
        ApiError::unauthorized().into_response()
    } else if long_running {
        let slot = recorder.as_ref().map(audit::Recorder::body_slot);
        let annotations = recorder.as_ref().map(audit::Recorder::annotation_slot);
        let work = read_and_serve(
            state.clone(),
            identity.clone(),
            parts,
            route,
            query,
            body,
            slot,
        );
        audit::with_annotations(annotations, work).await
    } else {
        // kube's request timeout: past it the client gets a 504 and the handler goes on
        // in the background (a write still completes), as kube-apiserver's does. Reading
        // the body counts, so a slow upload is bounded too.
        let deadline = limits::request_deadline(&state.config.limits, &query);
        let slot = recorder.as_ref().map(audit::Recorder::body_slot);
        let annotations = recorder.as_ref().map(audit::Recorder::annotation_slot);
        let work = read_and_serve(
            state.clone(),
            identity.clone(),
            parts,
            route,
            query,
            body,
            slot,
        );
        // The slot is held until the handler is done, also past a timeout.
        let work = async move {
            let _slot = inflight_slot;
            audit::with_annotations(annotations, work).await
        };
        let mut task = tokio::spawn(crate::panics::catch("apiserver", work));
        match tokio::time::timeout(deadline, &mut task).await {
            Ok(Ok(Ok(response))) => response,
            Ok(Ok(Err(panic))) => {
                tracing::error!(%path, %panic, "a request handler panicked");
                if let Some(recorder) = recorder.take() {
                    recorder.panicked(&panic.to_string());
                }
                panicked()
            }
            Ok(Err(e)) => {
                tracing::error!(%path, error = %e, "a request handler ended abnormally");
                panicked()
            }
            Err(_) => {
                tracing::debug!(%path, ?deadline, "request timed out");
                limits::timed_out()
            }
        }
    };
    finish(response, &path)
}

/// Reads a request's body and serves it with the requester recorded for escalation
/// checks.
async fn read_and_serve(
    state: Arc<AppState>,
    identity: Identity,
    parts: axum::http::request::Parts,
    route: Route,
    query: Query,
    body: RequestBody,
    audit_body: Option<audit::BodySlot>,
) -> Response {
    let body = match read_body(body, &parts.method).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    if let Some(slot) = audit_body
        && !body.is_empty()
        && let Ok(mut slot) = slot.lock()
    {
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        *slot = Some((body.clone(), content_type));
    }
    let served = authz::escalation::REQUESTER.scope(
        identity.clone(),
        serve(&state, &identity, &parts, &route, &query, &body),
    );
    match served.await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// kube-apiserver's answer to a body over [`MAX_BODY_BYTES`].
pub(crate) fn body_too_large() -> ApiError {
    ApiError::too_large(format!(
        "Request entity too large: limit is {MAX_BODY_BYTES}"
    ))
}

async fn read_body(body: RequestBody, method: &Method) -> Result<bytes::Bytes, ApiError> {
    if *method == Method::GET || *method == Method::HEAD {
        return Ok(bytes::Bytes::new());
    }
    let mut body = match body {
        RequestBody::Network(body) => body,
        RequestBody::Local(bytes) if bytes.len() > MAX_BODY_BYTES => {
            return Err(body_too_large());
        }
        RequestBody::Local(bytes) => return Ok(bytes),
    };
    // Read up to the limit; past it, keep draining (to a point) so the client is not
    // cut off mid-upload and actually receives the 413.
    const DRAIN_LIMIT: usize = 64 * 1024 * 1024;
    let mut buffer = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            seen += data.len();
            if seen <= MAX_BODY_BYTES {
                buffer.extend_from_slice(&data);
            } else if seen > DRAIN_LIMIT {
                break;
            }
        }
    }
    if seen > MAX_BODY_BYTES {
        return Err(body_too_large());
    }
    Ok(buffer.freeze())
}

fn json(status: StatusCode, value: &Value) -> Response {
    handlers::json_response(status, serde_json::to_vec(value).unwrap_or_default())
}

fn with_etag(mut response: Response, etag: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(&format!("\"{etag}\"")) {
        response.headers_mut().insert(header::ETAG, v);
    }
    response
}

fn with_content_type(mut response: Response, content_type: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    response
}

async fn serve(
    state: &Arc<AppState>,
    identity: &Identity,
    parts: &axum::http::request::Parts,
    route: &Route,
    query: &Query,
    body: &[u8],
) -> Result<Response, ApiError> {
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let method = &parts.method;
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        )
    };
    match route {
        Route::Healthz(which) => Ok(health(state, which, query)),
        Route::Version => Ok(json(StatusCode::OK, &version())),
        Route::Metrics => {
            let mut text = state.metrics.render(state.cache.watcher_count());
            text.push_str(&metrics::render_store(&state.store));
            Ok(with_content_type(
                (StatusCode::OK, text).into_response(),
                "text/plain; version=0.0.4",
            ))
        }
        Route::LegacyVersions | Route::Groups => {
            let legacy = matches!(route, Route::LegacyVersions);
            match discovery::aggregated_version(accept) {
                Some(version) => Ok(with_content_type(
                    json(
                        StatusCode::OK,
                        &discovery::aggregated(&state.registry, legacy, version),
                    ),
                    &format!(
                        "application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
                    ),
                )),
                None if legacy => Ok(json(
                    StatusCode::OK,
                    &discovery::legacy_versions(&state.config.advertise.to_string()),
                )),
                None => Ok(json(
                    StatusCode::OK,
                    &discovery::group_list(&state.registry),
                )),
            }
        }
        Route::Group(group) => discovery::group(&state.registry, group)
            .map(|v| json(StatusCode::OK, &v))
            .ok_or_else(not_found),
        Route::ResourceList { group, version } => {
            discovery::resource_list(&state.registry, group, version)
                .map(|v| json(StatusCode::OK, &v))
                .ok_or_else(not_found)
        }
        Route::OpenApiV2 | Route::OpenApiV3Root | Route::OpenApiV3 { .. } => {
            let custom = |info: &registry::ResourceInfo| -> Option<Value> {
                let versions = state.custom.read().ok()?;
                versions
                    .get(&(
                        info.group.clone(),
                        info.version.clone(),
                        info.plural.clone(),
                    ))?
                    .schema
                    .clone()
            };
            match route {
                Route::OpenApiV2 => {
                    let served = openapi::v2_served(&state.registry, Some(&custom));
                    // kubectl asks for (and always decodes) the protobuf form.
                    if accept.is_some_and(|a| a.contains("protobuf")) {
                        let mut response =
                            (StatusCode::OK, served.protobuf.clone()).into_response();
                        response.headers_mut().insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static(openapi::V2_PROTOBUF_RESPONSE_CONTENT_TYPE),
                        );
                        Ok(with_etag(response, &served.protobuf_etag))
                    } else {
                        Ok(with_etag(
                            handlers::json_response(StatusCode::OK, served.document.json.clone()),
                            &served.document.etag,
                        ))
                    }
                }
                Route::OpenApiV3Root => Ok(json(
                    StatusCode::OK,
                    &openapi::v3_index_with(&state.registry, &custom),
                )),
                Route::OpenApiV3 { group, version } => {
                    let document = openapi::v3_group_version_document(
                        &state.registry,
                        group,
                        version,
                        &custom,
                    )
                    .ok_or_else(not_found)?;
                    Ok(with_etag(
                        handlers::json_response(StatusCode::OK, document.json.clone()),
                        &document.etag,
                    ))
                }
                _ => Err(not_found()),
            }
        }
        Route::NotFound => Err(not_found()),
        Route::Resource(target) => {
            if authz::reviews::is_review(&target.info) {
                if *method != Method::POST {
                    return Err(ApiError::method_not_allowed(
                        "the server does not allow this method on the requested resource",
                    ));
                }
                return authz::reviews::serve(&state.authz, identity, target, &parts.headers, body);
            }
            let want = request::negotiate(accept)?;
            if events_view::is_view(&target.info) {
                return events_view::serve(
                    state,
                    method,
                    &parts.headers,
                    target,
                    query,
                    body,
                    want,
                )
                .await;
            }
            match *method {
                Method::GET => {
                    if target.legacy_watch || query.flag("watch") {
                        handlers::watch(state, target, query, want).await
                    } else if target.name.is_some() {
                        handlers::get(state, target, query, want).await
                    } else {
                        handlers::list(state, target, query, want).await
                    }
                }
                Method::POST if target.name.is_none() || target.subresource.is_some() => {
                    handlers::create(state, target, query, &parts.headers, body).await
                }
                Method::PUT if target.name.is_some() => {
                    handlers::update(state, target, query, &parts.headers, body).await
                }
                Method::PATCH if target.name.is_some() => {
                    handlers::patch(state, target, query, &parts.headers, body, None).await
                }
                Method::DELETE if target.name.is_some() && target.subresource.is_none() => {
                    handlers::delete(state, target, query, body).await
                }
                Method::DELETE if target.name.is_none() => {
                    handlers::delete_collection(state, target, query, body).await
                }
                _ => Err(ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                )),
            }
        }
    }
}

/// `/healthz`, `/livez`, `/readyz` as kube-apiserver words them. The `etcd` check fails
/// while this server's store member knows no raft leader (it cannot commit writes nor
/// serve linearizable reads then).
fn health(state: &AppState, which: &str, query: &Query) -> Response {
    let etcd_ok = which == "livez" || which == "healthz" || state.store.has_leader();
    let checks = [
        ("ping", true),
        ("log", true),
        ("etcd", etcd_ok),
        ("informer-sync", true),
        ("poststarthook/start-apiextensions-controllers", true),
    ];
    let healthy = checks.iter().all(|(_, ok)| *ok);
    let body = if query.get("verbose").is_some() || !healthy {
        let mut text: String = checks
            .iter()
            .map(|(c, ok)| {
                if *ok {
                    format!("[+]{c} ok\n")
                } else {
                    format!("[-]{c} failed: reason withheld\n")
                }
            })
            .collect();
        if healthy {
            text.push_str(&format!("{which} check passed\n"));
        } else {
            text.push_str(&format!("{which} check failed\n"));
        }
        text
    } else {
        "ok".to_string()
    };
    let code = if healthy {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    with_content_type((code, body).into_response(), "text/plain; charset=utf-8")
}

/// The server's version as `/version` reports it: the Kubernetes release it serves,
/// tagged with k3rs's own version (`v1.33.0+k3rs0.1.0`), as k3s tags its builds.
pub(crate) fn git_version() -> String {
    let (major, minor) = KUBE_VERSION;
    format!("v{major}.{minor}.0+k3rs{}", env!("CARGO_PKG_VERSION"))
}

fn version() -> Value {
    let (major, minor) = KUBE_VERSION;
    json!({
        "major": major,
        "minor": minor,
        "gitVersion": git_version(),
        "gitCommit": crate::cli::GIT_COMMIT,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": format!("linux/{}", crate::cli::go_arch()),
    })
}

/// The namespaces every cluster has and the `kubernetes` Service.
async fn bootstrap(state: &Arc<AppState>) -> anyhow::Result<()> {
    let ns_info = state
        .registry
        .find("", "v1", "namespaces")
        .context("namespaces resource")?;
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let target = request::Target {
            info: ns_info.clone(),
            namespace: None,
            name: None,
            subresource: None,
            legacy_watch: false,
        };
        let object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        create_builtin(state, &target, object).await?;
    }
    let svc_info = state
        .registry
        .find("", "v1", "services")
        .context("services resource")?;
    // On restart (or after a restore) the Service exists and owns its IP; creating it
    // again would fail the IP allocation before the "already exists" check.
    let key = svc_info.key(Some("default"), "kubernetes");
    if state
        .store
        .get(key.as_bytes())
        .await
        .context("reading the kubernetes Service")?
        .is_some()
    {
        return Ok(());
    }
    let target = request::Target {
        info: svc_info,
        namespace: Some("default".into()),
        name: None,
        subresource: None,
        legacy_watch: false,
    };
    let ip = state
        .config
        .service_cidr
        .nth(1)
        .context("the service CIDR has no first address")?;
    let object = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"clusterIP": ip.to_string(), "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": state.config.advertise.port()}]}
    });
    create_builtin(state, &target, object).await
}

/// Asks the authorizer whether `identity` may make this request.
fn authorize(
    state: &AppState,
    identity: &Identity,
    method: &Method,
    route: &Route,
    query: &Query,
    path: &str,
) -> Result<(), (ApiError, String)> {
    let verb;
    let attrs = match route {
        // Everyone may ask for health and the version (system:public-info-viewer).
        Route::Healthz(_) | Route::Version => return Ok(()),
        Route::Resource(target) => {
            verb = authz::resource_verb(method, target, query);
            let mut attrs = authz::resource_attributes(verb, target);
            // A list or watch narrowed to one name by `metadata.name=` is authorized for
            // that name, as kube-apiserver's request info does.
            if let authz::RequestKind::Resource { name, .. } = &mut attrs.kind
                && name.is_none()
                && matches!(verb, "list" | "watch")
            {
                *name = authz::node::field_selected_name(query);
            }
            attrs
        }
        _ => authz::path_attributes(method, path),
    };
    state.authz.check(identity, &attrs).map_err(|denial| {
        let reason = match &denial {
            authz::Denial::NotAllowed(reason) => reason.clone().unwrap_or_default(),
            authz::Denial::Restricted(message) => message.clone(),
        };
        (authz::denied(identity, &attrs, denial), reason)
    })
}

/// Stores the default ClusterRoles and ClusterRoleBindings that are missing (Kubernetes's
/// `rbac/bootstrap-roles`); existing ones are left as the user edited them.
async fn bootstrap_rbac(state: &Arc<AppState>) -> anyhow::Result<()> {
    for (plural, object) in authz::missing_defaults(&state.cache) {
        let info = state
            .registry
            .find("rbac.authorization.k8s.io", "v1", plural)
            .with_context(|| format!("{plural} resource"))?;
        let target = request::Target {
            info,
            namespace: None,
            name: None,
            subresource: None,
            legacy_watch: false,
        };
        create_builtin(state, &target, object).await?;
    }
    state.authz.refresh(&state.cache);
    Ok(())
}

/// Creates an object k3rs itself owns (field manager `k3rs`); one that exists is fine.
async fn create_builtin(
    state: &AppState,
    target: &request::Target,
    object: Value,
) -> anyhow::Result<()> {
    ignore_exists(
        handlers::create_object(
            state,
            target,
            &Query::default(),
            object,
            Vec::new(),
            Some("k3rs"),
        )
        .await,
    )
}

fn ignore_exists(result: Result<Response, ApiError>) -> anyhow::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(e) if e.code == StatusCode::CONFLICT => Ok(()),
        Err(e) => Err(anyhow::anyhow!("{e}")),
    }
}
