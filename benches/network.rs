//! `cargo bench --bench network` (as root): the proxy's rule sync and the cluster DNS
//! server's query rate.
//!
//! * **full_sync_ms**: render + apply 1,000 Services × 10 endpoints (NodePort, one named
//!   TCP port each) as one full replacement of the table, inside a private network
//!   namespace (`ip netns exec`, so the host's rules are untouched); median of 3.
//! * **one_change_ms**: one endpoint of one Service replaced in that set; the proxy's
//!   normal partial update (render, diff, and the changed elements of that Service's
//!   endpoint map and of the hairpin set in one `nft -f`); median of 5.
//! * **dns_qps**: one client on loopback sending `web-N.default.svc.cluster.local` A queries
//!   back to back (each waits for its answer) for 2 s against `k3rs::dns::serve` with a view
//!   of the same 1,000 Services.
//!
//! * **reference**: the same client against a bare blocking UDP echo thread, so dns_qps can be
//!   read against what this machine's loopback round trip allows at all.
//!
//! Last line: `RESULT net full_sync_ms=<n> one_change_ms=<n> dns_qps=<n> udp_echo_rtt_per_s=<n>
//! dns_vs_echo=<r>`. Without
//! `--bench` (`cargo test --benches`) the sizes are tiny (a smoke test).

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k3rs::dns::{self, View};
use k3rs::proxy::model::{Endpoint, Protocol, ServicePort};
use k3rs::proxy::{Family, Host, RenderOptions, SyncKind, Syncer};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// Removes the namespace on drop (also on panic).
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn service_ports(services: usize, endpoints: usize) -> Vec<ServicePort> {
    (0..services)
        .map(|s| ServicePort {
            namespace: "default".into(),
            name: format!("web-{s}"),
            port_name: "http".into(),
            protocol: Protocol::Tcp,
            cluster_ips: vec![IpAddr::V4(Ipv4Addr::new(
                10,
                97,
                (s / 250) as u8,
                (s % 250 + 1) as u8,
            ))],
            port: 80,
            node_port: Some(30000 + s as u16),
            load_balancer_ips: vec![],
            external_ips: vec![],
            affinity_timeout: None,
            external_local: false,
            internal_local: false,
            endpoints: (0..endpoints)
                .map(|e| Endpoint {
                    ip: IpAddr::V4(Ipv4Addr::new(
                        10,
                        96,
                        (s / 25) as u8,
                        ((s % 25) * 10 + e) as u8,
                    )),
                    port: 8080,
                    local: e % 2 == 0,
                    ready: true,
                    serving: true,
                    terminating: false,
                })
                .collect(),
        })
        .collect()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn rule_sync(services: usize, rounds: usize) -> (f64, f64) {
    let name = format!("k3rsbench{}", std::process::id());
    let status = Command::new("ip")
        .args(["netns", "add", &name])
        .status()
        .expect("ip (install iproute2)");
    assert!(
        status.success(),
        "ip netns add {name} failed: the bench needs root"
    );
    let _guard = Netns(name.clone());
    let options = RenderOptions {
        table: "k3rs".into(),
        node_ips: vec![IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10))],
        cluster_cidrs: vec!["10.96.0.0/16".into()],
    };
    let host = Host { netns: Some(name) };
    let mut ports = service_ports(services, 10);
    let mut full = Vec::new();
    let mut syncer = Syncer::new(host.clone(), options.clone(), vec![Family::V4]);
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        let kind = syncer.sync(&ports, true).await.expect("full sync");
        full.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(kind, SyncKind::Full);
    }
    let mut change = Vec::new();
    for round in 0..5 {
        let target = &mut ports[services / 2].endpoints[round % 10];
        target.ip = IpAddr::V4(Ipv4Addr::new(10, 95, 0, round as u8 + 1));
        let started = Instant::now();
        let kind = syncer.sync(&ports, false).await.expect("partial sync");
        change.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(kind, SyncKind::Partial);
    }
    // The kernel holds what the model says: the changed endpoint's DNAT is there.
    let listing = host
        .list_table(Family::V4, "k3rs")
        .await
        .expect("list")
        .expect("table");
    assert!(
        listing.contains("10.95.0.5 . 8080"),
        "the last change is missing"
    );
    (median(full), median(change))
}

async fn dns_rate(services: usize, duration: Duration) -> f64 {
    let svcs: Vec<Service> = (0..services)
        .map(|s| {
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "default", "name": format!("web-{s}")},
                "spec": {"clusterIP": format!("10.97.{}.{}", s / 250, s % 250 + 1),
                         "ports": [{"name": "http", "port": 80}]}
            }))
            .expect("service")
        })
        .collect();
    let view = View::build("cluster.local", &svcs, &Vec::<EndpointSlice>::new(), 1);
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("free port")
        .port();
    let listen = format!("127.0.0.1:{port}").parse().expect("addr");
    let config = Arc::new(dns::Config {
        listen: vec![listen],
        domain: "cluster.local".into(),
        upstreams: vec![],
    });
    let _servers = dns::serve(config, Arc::new(dns::Shared::new(view)))
        .await
        .expect("serve");
    let query = dns::wire::query(
        1,
        &format!("web-{}.default.svc.cluster.local", services / 2),
        dns::wire::TYPE_A,
    )
    .to_bytes();
    let client = move || sequential_queries(listen, &query, duration, true);
    tokio::task::spawn_blocking(client)
        .await
        .expect("client thread")
}

/// One client sending `query` to `server` back to back (each waits for its answer) for
/// `duration`; queries per second. The client is a plain blocking socket on its own thread,
/// as dnsperf or a libc resolver is, so the figure is the server's, not an async client's.
fn sequential_queries(
    server: std::net::SocketAddr,
    query: &[u8],
    duration: Duration,
    expect_answer: bool,
) -> f64 {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.connect(server).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 1500];
    let started = Instant::now();
    let mut answered = 0u64;
    let mut len = 0;
    while started.elapsed() < duration {
        socket.send(query).expect("send");
        len = socket.recv(&mut buf).expect("recv");
        answered += 1;
    }
    if expect_answer {
        let answers = dns::wire::Message::parse(&buf[..len])
            .map(|m| m.answers.len())
            .unwrap_or(0);
        assert!(answers > 0, "the last reply has no answer");
    }
    answered as f64 / started.elapsed().as_secs_f64()
}

/// The reference: the same client against the least a UDP server can do (a blocking thread
/// that echoes each datagram), so the DNS figure can be read against this machine's own
/// loopback round trip, which on a VM is dominated by wake-ups, not by the answer.
fn echo_rate(duration: Duration) -> f64 {
    let echo = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind echo");
    let addr = echo.local_addr().expect("echo addr");
    echo.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = stop.clone();
    let server = std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok((len, peer)) = echo.recv_from(&mut buf) {
                let _ = echo.send_to(&buf[..len], peer);
            }
        }
    });
    let rate = sequential_queries(addr, &[0u8; 50], duration, false);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = server.join();
    rate
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (services, rounds, duration) = if bench {
        (1000, 3, Duration::from_secs(2))
    } else {
        (20, 1, Duration::from_millis(200))
    };
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "network bench: {services} Services x 10 endpoints, {cpus} CPUs (shared machine: figures are noisy)"
    );
    let (full, change) = rule_sync(services, rounds).await;
    println!(
        "rule sync: full render+apply {full:.1} ms (median of {rounds}), one endpoint change {change:.1} ms (median of 5)"
    );
    // Alternate the two so both see the same machine; medians of three each.
    let (mut qps_runs, mut echo_runs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        qps_runs.push(dns_rate(services, duration).await);
        echo_runs.push(
            tokio::task::spawn_blocking(move || echo_rate(duration))
                .await
                .expect("echo"),
        );
    }
    let (qps, echo) = (median(qps_runs), median(echo_runs));
    println!(
        "dns: {qps:.0} queries/s from one client on loopback; reference UDP echo thread: {echo:.0} round trips/s (dns/echo {:.2})",
        qps / echo
    );
    println!(
        "RESULT net full_sync_ms={} one_change_ms={} dns_qps={} udp_echo_rtt_per_s={} dns_vs_echo={:.2}",
        full.round(),
        change.round(),
        qps.round(),
        echo.round(),
        qps / echo
    );
}
