//! `cargo bench --bench network` (as root): the proxy's rule sync and the cluster DNS
//! server's query rate.
//!
//! * **full_sync_ms**: render + apply 1,000 Services × 10 endpoints (NodePort, one named
//!   TCP port each) as one full replacement of the table, inside a private network
//!   namespace (`ip netns exec`, so the host's rules are untouched); median of 3.
//! * **render_ms**: the Rust side of a full sync alone — the table rendered from the
//!   model and written out as the `nft -f` script — so the rest of `full_sync_ms` reads as
//!   `nft` and the kernel; median of 5.
//! * **one_change_ms**: one endpoint of one Service replaced in that set; the proxy's
//!   normal partial update (render, diff, and the changed elements of that Service's
//!   endpoint map and of the hairpin set in one `nft -f`); median of 5.
//! * **dns_qps**: one client on loopback sending `web-N.default.svc.cluster.local` A queries
//!   for 2 s against `k3rs::dns::serve` with a view of the same 1,000 Services, the way
//!   dnsperf measures a server: one socket keeping [`OUTSTANDING`] queries in flight (dnsperf's
//!   `-q` default is 100), a new one sent as each answer arrives. The sequential rate (each
//!   query waits for its answer) is printed too: on a VM it is bounded by wake-ups, not by the
//!   server.
//!
//! * **nft_load_ms**: the reference for `full_sync_ms`: the same script loaded by a bare
//!   `nft -f <file>` in the same namespace, alternated with the full syncs; median of 3.
//! * **reference**: the same two clients against a bare blocking UDP echo thread, so the DNS
//!   figures can be read against what this machine's loopback allows at all.
//!
//! Last line: `RESULT net full_sync_ms=<n> one_change_ms=<n> dns_qps=<n> udp_echo_per_s=<n>
//! dns_vs_echo=<r> dns_sequential_qps=<n> udp_echo_rtt_per_s=<n> render_ms=<n> nft_load_ms=<n>
//! full_vs_nft=<r>`. Without
//! `--bench` (`cargo test --benches`) the sizes are tiny (a smoke test).

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k3rs::dns::{self, View};
use k3rs::proxy::model::{Endpoint, Protocol, ServicePort};
use k3rs::proxy::table::TableState;
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
                    hairpin: e % 2 == 0,
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

/// Medians in milliseconds: full sync, one change, and the bare `nft -f` reference.
async fn rule_sync(services: usize, rounds: usize) -> (f64, f64, f64) {
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
    let options = render_options();
    let host = Host {
        netns: Some(name.clone()),
    };
    let mut ports = service_ports(services, 10);
    let mut full = Vec::new();
    let mut nft_alone = Vec::new();
    let mut syncer = Syncer::new(host.clone(), options.clone(), vec![Family::V4]);
    // The reference: the same script loaded by `nft -f <file>` with nothing of ours
    // around it, alternated with the full syncs so both see the same machine.
    let script_dir = tempfile::tempdir().expect("temp dir");
    let script_path = script_dir.path().join("full.nft");
    std::fs::write(
        &script_path,
        TableState::build(Family::V4, &options, &ports).full_text(),
    )
    .expect("write the script");
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        let kind = syncer.sync(&ports, true).await.expect("full sync");
        full.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(kind, SyncKind::Full);
        let started = Instant::now();
        let status = Command::new("ip")
            .args(["netns", "exec", &name, "nft", "-f"])
            .arg(&script_path)
            .status()
            .expect("nft (install nftables)");
        nft_alone.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(status.success(), "nft -f of the rendered script failed");
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
    // The kernel holds what the model says: the changed endpoint is an element of the
    // endpoint maps now (`<key> : <address>`; the port is the balancing rule's).
    let listing = host
        .list_table(Family::V4, "k3rs")
        .await
        .expect("list")
        .expect("table");
    assert!(
        listing.match_indices(": 10.95.0.5").any(|(at, found)| {
            !listing[at + found.len()..].starts_with(|c: char| c.is_ascii_digit())
        }),
        "the last change is missing"
    );
    (median(full), median(change), median(nft_alone))
}

/// The node and cluster the rule-sync figures render for.
fn render_options() -> RenderOptions {
    RenderOptions {
        table: "k3rs".into(),
        node_ips: vec![IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10))],
        cluster_cidrs: vec!["10.96.0.0/16".into()],
    }
}

/// The Rust side of a full sync: the IPv4 table built from the model and written as the
/// script `nft -f` would read; median of 5, in milliseconds.
fn render_time(services: usize) -> f64 {
    let options = render_options();
    let ports = service_ports(services, 10);
    let runs = (0..5)
        .map(|_| {
            let started = Instant::now();
            let script = TableState::build(Family::V4, &options, &ports).full_text();
            let elapsed = started.elapsed().as_secs_f64() * 1000.0;
            assert!(script.len() > services * 100, "the script is too short");
            elapsed
        })
        .collect();
    median(runs)
}

async fn dns_rate(services: usize, duration: Duration) -> DnsRates {
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
    // The server listens on UDP and TCP: take a port free for both (a free UDP port may
    // be taken for TCP, which made a run fail now and then).
    let port = (0..100)
        .find_map(|_| {
            let tcp = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
            let port = tcp.local_addr().ok()?.port();
            std::net::UdpSocket::bind(("127.0.0.1", port)).ok()?;
            Some(port)
        })
        .expect("a port free for UDP and TCP");
    let listen = format!("127.0.0.1:{port}").parse().expect("addr");
    let config = Arc::new(dns::Config {
        listen: vec![listen],
        domain: "cluster.local".into(),
        upstreams: vec![],
        recursion_for: vec![],
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
    let sequential_query = query.clone();
    let sequential = tokio::task::spawn_blocking(move || {
        sequential_queries(listen, &sequential_query, duration, true)
    })
    .await
    .expect("client thread");
    let pipelined =
        tokio::task::spawn_blocking(move || pipelined_queries(listen, &query, duration))
            .await
            .expect("client thread");
    DnsRates {
        pipelined,
        sequential,
    }
}

/// Queries kept in flight by the pipelined client (dnsperf's `-q` default is 100).
const OUTSTANDING: usize = 64;

/// Answers per second for one client in each of the two ways it can ask.
struct DnsRates {
    pipelined: f64,
    sequential: f64,
}

/// One client keeping [`OUTSTANDING`] copies of `query` in flight to `server` for
/// `duration` (a new one sent per reply, as dnsperf does); replies per second. Each copy
/// gets its own DNS id so a reply can be told from a stray. A lost datagram shrinks the
/// window until a receive times out, which refills it.
fn pipelined_queries(server: std::net::SocketAddr, query: &[u8], duration: Duration) -> f64 {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.connect(server).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let mut query = query.to_vec();
    let mut next_id: u16 = 0;
    let mut send_one = |socket: &std::net::UdpSocket| {
        next_id = next_id.wrapping_add(1);
        if query.len() >= 2 {
            query[..2].copy_from_slice(&next_id.to_be_bytes());
        }
        socket.send(&query).expect("send");
    };
    let mut buf = [0u8; 1500];
    let started = Instant::now();
    let mut answered = 0u64;
    let mut in_flight = 0usize;
    while started.elapsed() < duration {
        while in_flight < OUTSTANDING {
            send_one(&socket);
            in_flight += 1;
        }
        match socket.recv(&mut buf) {
            Ok(_) => {
                answered += 1;
                in_flight -= 1;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                in_flight = 0;
            }
            Err(e) => panic!("recv: {e}"),
        }
    }
    answered as f64 / started.elapsed().as_secs_f64()
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
fn echo_rate(duration: Duration, pipelined: bool) -> f64 {
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
    let rate = if pipelined {
        pipelined_queries(addr, &[0u8; 50], duration)
    } else {
        sequential_queries(addr, &[0u8; 50], duration, false)
    };
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
    let (full, change, nft_load) = rule_sync(services, rounds).await;
    println!(
        "rule sync: full render+apply {full:.1} ms (median of {rounds}), one endpoint change {change:.1} ms (median of 5)"
    );
    println!(
        "rule sync reference: the same script by `nft -f <file>` alone {nft_load:.1} ms (median of {rounds}; full sync / nft alone {:.2})",
        full / nft_load
    );
    let render = render_time(services);
    println!(
        "rule sync: render alone {render:.1} ms (median of 5; the rest is nft and the kernel)"
    );
    // Alternate the two so both see the same machine; medians of three each.
    let (mut qps_runs, mut sequential_runs, mut echo_runs, mut echo_rtt_runs) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let rates = dns_rate(services, duration).await;
        qps_runs.push(rates.pipelined);
        sequential_runs.push(rates.sequential);
        echo_runs.push(
            tokio::task::spawn_blocking(move || echo_rate(duration, true))
                .await
                .expect("echo"),
        );
        echo_rtt_runs.push(
            tokio::task::spawn_blocking(move || echo_rate(duration, false))
                .await
                .expect("echo"),
        );
    }
    let (qps, sequential, echo, echo_rtt) = (
        median(qps_runs),
        median(sequential_runs),
        median(echo_runs),
        median(echo_rtt_runs),
    );
    println!(
        "dns: {qps:.0} queries/s from one client with {OUTSTANDING} in flight; reference UDP echo thread: {echo:.0}/s (dns/echo {:.2})",
        qps / echo
    );
    println!(
        "dns, one query at a time: {sequential:.0} queries/s; reference UDP echo: {echo_rtt:.0} round trips/s (dns/echo {:.2})",
        sequential / echo_rtt
    );
    println!(
        "RESULT net full_sync_ms={} one_change_ms={} dns_qps={} udp_echo_per_s={} dns_vs_echo={:.2} dns_sequential_qps={} udp_echo_rtt_per_s={} render_ms={} nft_load_ms={} full_vs_nft={:.2}",
        full.round(),
        change.round(),
        qps.round(),
        echo.round(),
        qps / echo,
        sequential.round(),
        echo_rtt.round(),
        render.round(),
        nft_load.round(),
        full / nft_load,
    );
}
