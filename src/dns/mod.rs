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
//! An API client only: it may not touch `store` or `apiserver` internals.

pub mod bootstrap;
pub mod view;
pub mod wire;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Notify;

pub use view::{Answer, View};
use wire::Message;

/// How long one upstream gets to answer a forwarded query.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// k3s's fallback when the host has no usable resolver.
const FALLBACK_UPSTREAM: Ipv4Addr = Ipv4Addr::new(8, 8, 8, 8);

/// The DNS server's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (UDP and TCP on each).
    pub listen: Vec<SocketAddr>,
    /// The cluster domain (`cluster.local`).
    pub domain: String,
    /// Resolvers for every other name, tried in order.
    pub upstreams: Vec<SocketAddr>,
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
#[derive(Debug, Default)]
pub struct Shared {
    view: RwLock<Arc<View>>,
}

impl Shared {
    pub fn new(view: View) -> Shared {
        Shared {
            view: RwLock::new(Arc::new(view)),
        }
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
        kube::Api::<EndpointSlice>::all(client),
        changed.clone(),
        "dns",
    );
    let mut serial: u32 = 1;
    loop {
        changed.notified().await;
        // Coalesce a burst of events into one rebuild.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let services: Vec<Service> = services.state().iter().map(|s| (**s).clone()).collect();
        let slices: Vec<EndpointSlice> = slices.state().iter().map(|s| (**s).clone()).collect();
        serial = serial.wrapping_add(1);
        shared.set(View::build(&config.domain, &services, &slices, serial));
        if servers.iter().any(|s| s.is_finished()) {
            anyhow::bail!("a DNS listener stopped");
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
/// no other work (no second parse, no second lookup).
fn step(bytes: &[u8], shared: &Shared) -> Step {
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
        Answer::Forward => Step::Forward {
            id: query.id,
            servfail: query.response(wire::RCODE_SERVFAIL).to_bytes(),
            limit,
        },
    }
}

/// Asks the upstreams (`tcp` picks the transport); their reply, else `servfail`.
async fn forward(
    bytes: &[u8],
    id: u16,
    servfail: Vec<u8>,
    limit: usize,
    config: &Config,
    tcp: bool,
) -> (Vec<u8>, usize) {
    let forwarded = if tcp {
        forward_tcp(bytes, &config.upstreams).await
    } else {
        forward_udp(bytes, id, &config.upstreams).await
    };
    match forwarded {
        Some(reply) => (reply, usize::MAX),
        None => (servfail, limit),
    }
}

/// Answers one query: `Some(response)` from the view, or from the upstreams when it is
/// not a cluster name (`tcp` picks the transport towards them).
pub async fn handle(
    bytes: &[u8],
    shared: &Shared,
    config: &Config,
    tcp: bool,
) -> Option<(Vec<u8>, usize)> {
    match step(bytes, shared) {
        Step::Reply(reply, limit) => Some((reply, limit)),
        Step::Forward {
            id,
            servfail,
            limit,
        } => Some(forward(bytes, id, servfail, limit, config, tcp).await),
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
        // Cluster names are answered inline (fast); forwarded ones in their own task.
        match step(bytes, &shared) {
            Step::Reply(reply, limit) => send_udp(&socket, &reply, limit, peer).await,
            Step::Forward {
                id,
                servfail,
                limit,
            } => {
                let (socket, config, bytes) = (socket.clone(), config.clone(), bytes.to_vec());
                tokio::spawn(async move {
                    let (reply, limit) = forward(&bytes, id, servfail, limit, &config, false).await;
                    send_udp(&socket, &reply, limit, peer).await;
                });
            }
            Step::Ignore => {}
        }
    }
}

async fn send_udp(socket: &UdpSocket, reply: &[u8], limit: usize, peer: SocketAddr) {
    let truncated;
    let reply = if reply.len() > limit {
        truncated = match Message::parse(reply) {
            Ok(m) => m.to_udp_bytes(limit),
            Err(_) => return,
        };
        truncated.as_slice()
    } else {
        reply
    };
    if let Err(e) = socket.send_to(reply, peer).await {
        tracing::debug!(error = %e, %peer, "dns udp send");
    }
}

async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>, config: Arc<Config>) {
    loop {
        let (mut stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "dns tcp accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (shared, config) = (shared.clone(), config.clone());
        tokio::spawn(async move {
            // Several queries may come over one connection; idle ones are closed.
            loop {
                let mut len = [0u8; 2];
                match tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut len))
                    .await
                {
                    Ok(Ok(_)) => {}
                    _ => return,
                }
                let mut bytes = vec![0u8; usize::from(u16::from_be_bytes(len))];
                if stream.read_exact(&mut bytes).await.is_err() {
                    return;
                }
                let Some((reply, _)) = handle(&bytes, &shared, &config, true).await else {
                    return;
                };
                let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(&reply);
                if stream.write_all(&framed).await.is_err() {
                    return;
                }
            }
        });
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
