//! Cluster DNS served by the binary itself: answers `<svc>.<ns>.svc.<domain>` and friends
//! from Services and EndpointSlices watched through the API; forwards the rest upstream.
//!
//! - [`wire`]: the DNS message codec (hand-written: it is small, and no crate here would
//!   save more than it costs).
//! - [`view`]: the in-memory view and CoreDNS `kubernetes`-plugin answers (pure).
//! - [`bootstrap`]: the server's `kube-system/kube-dns` Service and its EndpointSlice.
//! - [`run`]: the watchers that rebuild the view, the UDP and TCP listeners, forwarding to
//!   the upstream resolvers (from `--resolv-conf`; loopback servers are skipped as k3s does).
//!
//! The server listens on the node's addresses, which on a VPS are public. So that it is not
//! an open resolver, only sources in [`Config::recursion_for`] (the pod network, the node's
//! own addresses, loopback) and the addresses of the cluster's Nodes (host-network pods on
//! other nodes) get names outside the cluster forwarded; everyone else gets cluster names
//! and REFUSED for the rest. Forwarding is bounded: at most [`MAX_CONCURRENT_FORWARDS`]
//! upstream queries at once (REFUSED beyond, as CoreDNS's `max_concurrent`), each with a
//! timeout; at most [`MAX_TCP_CONNECTIONS`] TCP clients, each query read within
//! [`TCP_READ_TIMEOUT`]; forwarded answers are truncated (TC) to the client's UDP size.
//!
//! An API client only: it may not touch `store` or `apiserver` internals.

pub mod bootstrap;
pub mod view;
pub mod wire;

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{Notify, Semaphore};

use crate::cli::cidr::Cidr;
pub use view::{Answer, View};
use wire::Message;

/// How long one upstream gets to answer a forwarded query.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// k3s's fallback when the host has no usable resolver.
const FALLBACK_UPSTREAM: Ipv4Addr = Ipv4Addr::new(8, 8, 8, 8);
/// Upstream queries in flight at once; a query beyond gets REFUSED at once rather than a
/// task and a socket each (a flood of random names would otherwise hold thousands).
pub const MAX_CONCURRENT_FORWARDS: usize = 1000;
/// TCP clients served at once; a connection beyond is closed at once.
pub const MAX_TCP_CONNECTIONS: usize = 256;
/// How long a TCP client gets to send one whole query (length and body) and, after the
/// answer, to start the next: an idle or trickling connection is closed.
pub const TCP_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The DNS server's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (UDP and TCP on each).
    pub listen: Vec<SocketAddr>,
    /// The cluster domain (`cluster.local`).
    pub domain: String,
    /// Resolvers for every other name, tried in order.
    pub upstreams: Vec<SocketAddr>,
    /// Sources whose queries for names outside the cluster are forwarded (the pod network,
    /// the node's own addresses, loopback). Others get REFUSED for those names.
    pub recursion_for: Vec<Cidr>,
}

impl Config {
    /// The networks a node's DNS server forwards for: the cluster CIDRs (pods), the node's
    /// own addresses and loopback. A CIDR that does not parse is skipped with a warning.
    pub fn recursion_networks(cluster_cidrs: &[String], node_ips: &[IpAddr]) -> Vec<Cidr> {
        let mut networks: Vec<Cidr> = cluster_cidrs
            .iter()
            .flat_map(|list| list.split(','))
            .filter(|c| !c.trim().is_empty())
            .filter_map(|c| match c.trim().parse::<Cidr>() {
                Ok(cidr) => Some(cidr),
                Err(e) => {
                    tracing::warn!(cidr = %c, error = %e, "cluster DNS: skipping a cluster CIDR that does not parse");
                    None
                }
            })
            .collect();
        for &ip in node_ips {
            let prefix = if ip.is_ipv4() { 32 } else { 128 };
            networks.extend(Cidr::new(ip, prefix).ok());
        }
        if let Ok(loopback) = "127.0.0.0/8".parse::<Cidr>() {
            networks.push(loopback);
        }
        if let Ok(loopback) = "::1/128".parse::<Cidr>() {
            networks.push(loopback);
        }
        networks.sort();
        networks.dedup();
        networks
    }

    fn may_recurse(&self, source: IpAddr, shared: &Shared) -> bool {
        let source = match source {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(source),
            v4 => v4,
        };
        self.recursion_for.iter().any(|c| c.contains(source)) || shared.is_in_node_networks(source)
    }
}

/// The `nameserver` entries of a resolv.conf, port 53, without loopback addresses (a local
/// stub such as systemd-resolved's 127.0.0.53 would loop queries back through the node).
/// When none is left, 8.8.8.8 as k3s does.
pub fn upstreams_from_resolv_conf(text: &str) -> Vec<SocketAddr> {
    let mut upstreams: Vec<SocketAddr> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter_map(|ip| ip.split('%').next()?.parse::<IpAddr>().ok())
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect();
    upstreams.dedup();
    if upstreams.is_empty() {
        tracing::warn!("no usable nameserver in resolv.conf; forwarding to {FALLBACK_UPSTREAM}");
        upstreams.push(SocketAddr::new(IpAddr::V4(FALLBACK_UPSTREAM), 53));
    }
    upstreams
}

/// The view queries are answered from; swapped whole when the cluster changes.
#[derive(Debug)]
pub struct Shared {
    view: RwLock<Arc<View>>,
    /// What the cluster's Nodes say about themselves: their addresses (host-network pods
    /// elsewhere) and pod CIDRs (pods elsewhere; an agent's config has no cluster CIDR).
    nodes: RwLock<Arc<NodeNetworks>>,
    /// Permits for upstream queries in flight.
    forwards: Arc<Semaphore>,
    /// Permits for TCP clients.
    tcp_clients: Arc<Semaphore>,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared::new(View::default())
    }
}

impl Shared {
    pub fn new(view: View) -> Shared {
        Shared {
            view: RwLock::new(Arc::new(view)),
            nodes: RwLock::default(),
            forwards: Arc::new(Semaphore::new(MAX_CONCURRENT_FORWARDS)),
            tcp_clients: Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS)),
        }
    }
    /// Replaces what the Nodes say (their addresses and pod CIDRs may recurse).
    pub fn set_node_networks(&self, networks: NodeNetworks) {
        match self.nodes.write() {
            Ok(mut v) => *v = Arc::new(networks),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(networks),
        }
    }
    fn is_in_node_networks(&self, ip: IpAddr) -> bool {
        let nodes = match self.nodes.read() {
            Ok(v) => v.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        nodes.addresses.contains(&ip) || nodes.pod_cidrs.iter().any(|c| c.contains(ip))
    }
    pub fn get(&self) -> Arc<View> {
        match self.view.read() {
            Ok(v) => v.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
    pub fn set(&self, view: View) {
        match self.view.write() {
            Ok(mut v) => *v = Arc::new(view),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(view),
        }
    }
}

/// Binds every listen address (UDP and TCP) and serves queries from `shared` in background
/// tasks; returns their handles.
pub async fn serve(
    config: Arc<Config>,
    shared: Arc<Shared>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut servers = Vec::new();
    for addr in &config.listen {
        let udp = UdpSocket::bind(addr)
            .await
            .with_context(|| format!("binding the DNS server to {addr}/udp"))?;
        let tcp = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the DNS server to {addr}/tcp"))?;
        servers.push(tokio::spawn(serve_udp(
            Arc::new(udp),
            shared.clone(),
            config.clone(),
        )));
        servers.push(tokio::spawn(serve_tcp(tcp, shared.clone(), config.clone())));
    }
    Ok(servers)
}

/// Runs the DNS server until the future is dropped. Fails if a listener cannot be bound.
pub async fn run(client: kube::Client, config: Config) -> anyhow::Result<()> {
    let shared = Arc::new(Shared::new(View::build(&config.domain, &[], &[], 1)));
    let config = Arc::new(config);
    let servers = serve(config.clone(), shared.clone()).await?;
    tracing::info!(listen = ?config.listen, domain = %config.domain, upstreams = ?config.upstreams, "cluster DNS started");
    let changed = Arc::new(Notify::new());
    let services = crate::informer::reflect(
        kube::Api::<Service>::all(client.clone()),
        changed.clone(),
        "dns",
    );
    let slices = crate::informer::reflect(
        kube::Api::<EndpointSlice>::all(client.clone()),
        changed.clone(),
        "dns",
    );
    let nodes = crate::informer::reflect(kube::Api::<Node>::all(client), changed.clone(), "dns");
    let mut serial: u32 = 1;
    loop {
        changed.notified().await;
        // Coalesce a burst of events into one rebuild.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let services: Vec<Service> = services.state().iter().map(|s| (**s).clone()).collect();
        let slices: Vec<EndpointSlice> = slices.state().iter().map(|s| (**s).clone()).collect();
        serial = serial.wrapping_add(1);
        shared.set(View::build(&config.domain, &services, &slices, serial));
        shared.set_node_networks(NodeNetworks::from_nodes(&nodes.state()));
        if servers.iter().any(|s| s.is_finished()) {
            anyhow::bail!("a DNS listener stopped");
        }
    }
}

/// The Nodes' addresses and pod CIDRs: sources inside the cluster that may recurse.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NodeNetworks {
    pub addresses: HashSet<IpAddr>,
    pub pod_cidrs: Vec<Cidr>,
}

impl NodeNetworks {
    /// Every `status.addresses` entry that parses as an IP and every `spec.podCIDRs` (or
    /// `spec.podCIDR`) entry that parses as a CIDR; the rest is skipped (fields are
    /// untrusted).
    pub fn from_nodes(nodes: &[Arc<Node>]) -> NodeNetworks {
        let addresses = nodes
            .iter()
            .filter_map(|n| n.status.as_ref()?.addresses.as_ref())
            .flatten()
            .filter_map(|a| a.address.parse::<IpAddr>().ok())
            .collect();
        let mut pod_cidrs: Vec<Cidr> = nodes
            .iter()
            .filter_map(|n| n.spec.as_ref())
            .flat_map(|spec| {
                spec.pod_cidrs
                    .iter()
                    .flatten()
                    .chain(spec.pod_cidr.iter())
                    .filter_map(|c| c.parse::<Cidr>().ok())
                    .collect::<Vec<_>>()
            })
            .collect();
        pod_cidrs.sort();
        pod_cidrs.dedup();
        NodeNetworks {
            addresses,
            pod_cidrs,
        }
    }
}

/// What to do with one query.
enum Step {
    /// Send these bytes (truncated to the client's UDP size when over UDP).
    Reply(Vec<u8>, usize),
    /// Not a cluster name: ask the upstreams, SERVFAIL (this response) if none answers.
    Forward {
        id: u16,
        servfail: Vec<u8>,
        limit: usize,
    },
    /// Not a query (a response, or too short to echo): stay silent.
    Ignore,
}

/// Parses and answers one query from the view, once: the hot path for cluster names does
/// no other work (no second parse, no second lookup). A name outside the cluster is
/// forwarded only when `may_recurse()` (asked only then); otherwise it is REFUSED.
fn step(bytes: &[u8], shared: &Shared, may_recurse: impl FnOnce() -> bool) -> Step {
    let query = match Message::parse(bytes) {
        Ok(q) if !q.is_response() => q,
        Ok(_) => return Step::Ignore,
        Err(_) if bytes.len() >= 12 => {
            // Echo the id and say FORMERR.
            let mut header = bytes[..12].to_vec();
            header[2] = 0x80 | (header[2] & 0x78);
            header[3] = wire::RCODE_FORMERR;
            header[4..12].fill(0);
            return Step::Reply(header, wire::UDP_LIMIT);
        }
        Err(_) => return Step::Ignore,
    };
    let limit = query.udp_size().min(4096);
    if query.opcode() != 0 {
        return Step::Reply(query.response(wire::RCODE_NOTIMP).to_bytes(), limit);
    }
    match shared.get().answer(&query) {
        Answer::Local(mut response) => {
            if let Some(opt) = query
                .additional
                .iter()
                .find(|r| r.data.rtype() == wire::TYPE_OPT)
            {
                let mut opt = opt.clone();
                opt.class = 4096;
                opt.ttl = 0;
                opt.data = wire::RData::Raw(wire::TYPE_OPT, Vec::new());
                response.additional.push(opt);
            }
            Step::Reply(response.to_bytes(), limit)
        }
        Answer::Forward if !may_recurse() => {
            Step::Reply(query.response(wire::RCODE_REFUSED).to_bytes(), limit)
        }
        Answer::Forward => Step::Forward {
            id: query.id,
            servfail: query.response(wire::RCODE_SERVFAIL).to_bytes(),
            limit,
        },
    }
}

/// Asks the upstreams (`tcp` picks the transport); their reply, else `servfail`. The
/// caller holds a forwarding permit.
async fn forward(bytes: &[u8], id: u16, servfail: Vec<u8>, config: &Config, tcp: bool) -> Vec<u8> {
    let forwarded = if tcp {
        forward_tcp(bytes, &config.upstreams).await
    } else {
        forward_udp(bytes, id, &config.upstreams).await
    };
    forwarded.unwrap_or(servfail)
}

/// The REFUSED answer for a query that cannot be forwarded now (too many in flight).
fn refused(bytes: &[u8]) -> Option<Vec<u8>> {
    Some(
        Message::parse(bytes)
            .ok()?
            .response(wire::RCODE_REFUSED)
            .to_bytes(),
    )
}

/// Answers one query from `source`: `Some((response, udp_limit))` from the view, or from
/// the upstreams when it is not a cluster name and `source` may recurse (`tcp` picks the
/// transport towards them).
pub async fn handle(
    bytes: &[u8],
    source: IpAddr,
    shared: &Shared,
    config: &Config,
    tcp: bool,
) -> Option<(Vec<u8>, usize)> {
    match step(bytes, shared, || config.may_recurse(source, shared)) {
        Step::Reply(reply, limit) => Some((reply, limit)),
        Step::Forward {
            id,
            servfail,
            limit,
        } => {
            let Ok(_permit) = shared.forwards.try_acquire() else {
                return Some((refused(bytes)?, limit));
            };
            Some((forward(bytes, id, servfail, config, tcp).await, limit))
        }
        Step::Ignore => None,
    }
}

async fn serve_udp(socket: Arc<UdpSocket>, shared: Arc<Shared>, config: Arc<Config>) {
    let mut buf = vec![0u8; 65535];
    loop {
        let (len, peer) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, "dns udp receive");
                continue;
            }
        };
        let bytes = &buf[..len];
        // Cluster names are answered inline (fast); forwarded ones in their own task, at
        // most MAX_CONCURRENT_FORWARDS of them.
        match step(bytes, &shared, || config.may_recurse(peer.ip(), &shared)) {
            Step::Reply(reply, limit) => send_udp(&socket, &reply, limit, peer).await,
            Step::Forward {
                id,
                servfail,
                limit,
            } => {
                let permit = match shared.forwards.clone().try_acquire_owned() {
                    Ok(permit) => permit,
                    Err(_) => {
                        if let Some(reply) = refused(bytes) {
                            send_udp(&socket, &reply, limit, peer).await;
                        }
                        continue;
                    }
                };
                let (socket, config, bytes) = (socket.clone(), config.clone(), bytes.to_vec());
                tokio::spawn(async move {
                    let reply = forward(&bytes, id, servfail, &config, false).await;
                    drop(permit);
                    send_udp(&socket, &reply, limit, peer).await;
                });
            }
            Step::Ignore => {}
        }
    }
}

/// Sends `reply`, truncated (TC set) when it is larger than the client's UDP size: ours
/// and the upstreams' alike, since an upstream may answer larger than the client asked.
async fn send_udp(socket: &UdpSocket, reply: &[u8], limit: usize, peer: SocketAddr) {
    let truncated;
    let reply = if reply.len() > limit {
        truncated = truncate_for_udp(reply, limit);
        truncated.as_slice()
    } else {
        reply
    };
    if let Err(e) = socket.send_to(reply, peer).await {
        tracing::debug!(error = %e, %peer, "dns udp send");
    }
}

/// `reply` cut to `limit` bytes: whole records dropped, TC set. A reply we cannot parse
/// (an upstream's odd record) is cut to its header with TC set and no records, so the
/// client retries over TCP.
fn truncate_for_udp(reply: &[u8], limit: usize) -> Vec<u8> {
    match Message::parse(reply) {
        Ok(m) => m.to_udp_bytes(limit),
        Err(_) => {
            let mut header = reply[..reply.len().min(12)].to_vec();
            header.resize(12, 0);
            header[2] |= 0x02;
            header[4..12].fill(0);
            header
        }
    }
}

async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>, config: Arc<Config>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "dns tcp accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Beyond MAX_TCP_CONNECTIONS the connection is dropped (closed) at once.
        let Ok(permit) = shared.tcp_clients.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "dns tcp: too many clients, closing");
            continue;
        };
        let (shared, config) = (shared.clone(), config.clone());
        tokio::spawn(async move {
            serve_tcp_client(stream, peer.ip(), &shared, &config).await;
            drop(permit);
        });
    }
}

/// Serves the queries of one TCP client (several may come over one connection) until it
/// closes, idles or trickles for TCP_READ_TIMEOUT, or sends something that is not a query.
async fn serve_tcp_client(mut stream: TcpStream, source: IpAddr, shared: &Shared, config: &Config) {
    loop {
        let read_query = async {
            let mut len = [0u8; 2];
            stream.read_exact(&mut len).await.ok()?;
            let mut bytes = vec![0u8; usize::from(u16::from_be_bytes(len))];
            stream.read_exact(&mut bytes).await.ok()?;
            Some(bytes)
        };
        let Ok(Some(bytes)) = tokio::time::timeout(TCP_READ_TIMEOUT, read_query).await else {
            return;
        };
        let Some((reply, _)) = handle(&bytes, source, shared, config, true).await else {
            return;
        };
        let Ok(len) = u16::try_from(reply.len()) else {
            return;
        };
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(&reply);
        match tokio::time::timeout(TCP_READ_TIMEOUT, stream.write_all(&framed)).await {
            Ok(Ok(())) => {}
            _ => return,
        }
    }
}

/// Sends the query to each upstream in turn over UDP; the first reply with our id wins.
async fn forward_udp(bytes: &[u8], id: u16, upstreams: &[SocketAddr]) -> Option<Vec<u8>> {
    for upstream in upstreams {
        let bind: SocketAddr = if upstream.is_ipv6() {
            "[::]:0".parse().ok()?
        } else {
            "0.0.0.0:0".parse().ok()?
        };
        let Ok(socket) = UdpSocket::bind(bind).await else {
            continue;
        };
        if socket.connect(upstream).await.is_err() || socket.send(bytes).await.is_err() {
            continue;
        }
        let mut buf = vec![0u8; 65535];
        let deadline = tokio::time::Instant::now() + UPSTREAM_TIMEOUT;
        while let Ok(Ok(len)) = tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await {
            if len >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == id {
                buf.truncate(len);
                return Some(buf);
            }
        }
        tracing::debug!(%upstream, "upstream DNS server did not answer");
    }
    None
}

/// Sends the query to each upstream in turn over TCP.
async fn forward_tcp(bytes: &[u8], upstreams: &[SocketAddr]) -> Option<Vec<u8>> {
    for upstream in upstreams {
        let attempt = async {
            let mut stream = TcpStream::connect(upstream).await.ok()?;
            let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(bytes);
            stream.write_all(&framed).await.ok()?;
            let mut len = [0u8; 2];
            stream.read_exact(&mut len).await.ok()?;
            let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
            stream.read_exact(&mut reply).await.ok()?;
            Some(reply)
        };
        if let Ok(Some(reply)) = tokio::time::timeout(UPSTREAM_TIMEOUT, attempt).await {
            return Some(reply);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recursion_is_for_the_pod_network_the_node_and_loopback_only() {
        let networks = Config::recursion_networks(
            &["10.42.0.0/16".into(), "not-a-cidr".into()],
            &["203.0.113.7".parse().expect("ip")],
        );
        let config = Config {
            listen: vec![],
            domain: "cluster.local".into(),
            upstreams: vec![],
            recursion_for: networks,
        };
        let shared = Shared::default();
        let may = |ip: &str| config.may_recurse(ip.parse().expect("ip"), &shared);
        assert!(may("10.42.3.9"), "a pod");
        assert!(may("203.0.113.7"), "the node itself");
        assert!(may("127.0.0.1") && may("::1"), "loopback");
        assert!(may("::ffff:10.42.3.9"), "a v4-mapped pod address");
        assert!(!may("203.0.113.8"), "a stranger on the internet");
        assert!(!may("198.51.100.1"));
        // Other Nodes' addresses and pod CIDRs, learned from the API (an agent's own
        // config has no cluster CIDR); fields that do not parse are skipped.
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n2"},
            "spec": {"podCIDR": "10.99.1.0/24", "podCIDRs": ["10.99.1.0/24", "junk"]},
            "status": {"addresses": [
                {"type": "InternalIP", "address": "198.51.100.1"},
                {"type": "Hostname", "address": "n2"}
            ]}
        }))
        .expect("node");
        let networks = NodeNetworks::from_nodes(&[Arc::new(node)]);
        assert_eq!(networks.pod_cidrs.len(), 1);
        assert_eq!(networks.addresses.len(), 1);
        shared.set_node_networks(networks);
        assert!(may("198.51.100.1"), "another node (host-network pods)");
        assert!(may("10.99.1.20"), "a pod on another node");
        assert!(!may("198.51.100.2"));
    }

    #[test]
    fn outside_names_are_refused_without_recursion() {
        let shared = Shared::new(View::build("cluster.local", &[], &[], 1));
        let query = wire::query(5, "www.example.com", wire::TYPE_A).to_bytes();
        let Step::Reply(reply, _) = step(&query, &shared, || false) else {
            panic!("a reply, not a forward");
        };
        let reply = Message::parse(&reply).expect("parse");
        assert_eq!((reply.id, reply.rcode()), (5, wire::RCODE_REFUSED));
        assert!(matches!(
            step(&query, &shared, || true),
            Step::Forward { id: 5, .. }
        ));
        // An unparseable upstream answer is cut to a header with TC set.
        let cut = truncate_for_udp(&[0xab, 0xcd, 0x81, 0x80, 0, 1, 0, 9, 0, 0, 0, 0, 99], 12);
        assert_eq!(cut.len(), 12);
        assert_eq!(&cut[..2], &[0xab, 0xcd]);
        assert!(cut[2] & 0x02 != 0, "TC");
        assert_eq!(&cut[4..], &[0; 8]);
    }

    #[test]
    fn resolv_conf_skips_loopback_and_falls_back() {
        let text = "# generated\nsearch example.com\nnameserver 127.0.0.53\nnameserver 1.1.1.1\nnameserver ::1\nnameserver fe80::1%eth0\noptions edns0\n";
        let upstreams = upstreams_from_resolv_conf(text);
        assert_eq!(
            upstreams,
            [
                "1.1.1.1:53".parse().expect("addr"),
                "[fe80::1]:53".parse().expect("addr")
            ]
        );
        assert_eq!(
            upstreams_from_resolv_conf("nameserver 127.0.0.53\n"),
            ["8.8.8.8:53".parse::<SocketAddr>().expect("addr")]
        );
    }

    #[tokio::test]
    async fn udp_answers_are_truncated_to_the_clients_size() {
        use k8s_openapi::api::core::v1::Service;
        use k8s_openapi::api::discovery::v1::EndpointSlice;
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "default", "name": "big"},
            "spec": {"clusterIP": "None"}
        }))
        .expect("svc");
        let endpoints: Vec<_> = (0..60)
            .map(|i| serde_json::json!({"addresses": [format!("10.42.1.{i}")]}))
            .collect();
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "default", "name": "big-1",
                         "labels": {"kubernetes.io/service-name": "big"}},
            "addressType": "IPv4", "endpoints": endpoints
        }))
        .expect("slice");
        let shared = Shared::new(View::build("cluster.local", &[svc], &[slice], 1));
        let config = Config {
            listen: vec![],
            domain: "cluster.local".into(),
            upstreams: vec![],
            recursion_for: vec![],
        };
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let server = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind"));
        let server_addr = server.local_addr().expect("addr");
        let serving = tokio::spawn(serve_udp(server, Arc::new(shared), Arc::new(config)));
        let query = wire::query(9, "big.default.svc.cluster.local", wire::TYPE_A).to_bytes();
        socket.send_to(&query, server_addr).await.expect("send");
        let mut buf = [0u8; 4096];
        let (len, _) = socket.recv_from(&mut buf).await.expect("recv");
        assert!(len <= wire::UDP_LIMIT, "{len}");
        let reply = Message::parse(&buf[..len]).expect("parse");
        assert!(reply.truncated());
        assert_eq!(reply.id, 9);
        serving.abort();
    }
}
