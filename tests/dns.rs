//! Cluster DNS end to end: the real server (`--disable-agent`), `k3rs::dns::run` from the
//! test on 127.0.0.1:<free port> answering from the Services and EndpointSlices the test
//! creates, and a fake upstream resolver on loopback for forwarded names. Queries come from
//! a hand-built client (UDP and TCP) and from `busybox nslookup -port=…`.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k3rs::dns::wire::{self, Message, RData};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::{Server, free_port};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;

/// A query packet for `name`/`qtype`, built by hand (RD set).
fn query_bytes(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut out = vec![
        (id >> 8) as u8,
        id as u8,
        0x01,
        0x00,
        0,
        1,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    for label in name.split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.extend_from_slice(&[0, (qtype >> 8) as u8, qtype as u8, 0, 1]);
    out
}

async fn ask_udp(server: SocketAddr, name: &str, qtype: u16) -> Message {
    let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    socket
        .send_to(&query_bytes(0x4242, name, qtype), server)
        .await
        .expect("send");
    let mut buf = [0u8; 4096];
    let (len, _) = tokio::time::timeout(Duration::from_secs(5), socket.recv_from(&mut buf))
        .await
        .expect("a DNS answer within 5 s")
        .expect("recv");
    let reply = Message::parse(&buf[..len]).expect("parse the answer");
    assert_eq!(reply.id, 0x4242);
    reply
}

async fn ask_tcp(server: SocketAddr, name: &str, qtype: u16) -> Message {
    let mut stream = tokio::net::TcpStream::connect(server)
        .await
        .expect("connect");
    let query = query_bytes(7, name, qtype);
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&query);
    stream.write_all(&framed).await.expect("write");
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await.expect("length");
    let mut reply = vec![0u8; u16::from_be_bytes(len) as usize];
    stream.read_exact(&mut reply).await.expect("reply");
    Message::parse(&reply).expect("parse")
}

fn nslookup(port: u16, args: &[&str]) -> String {
    let port_arg = format!("-port={port}");
    let out = std::process::Command::new("busybox")
        .arg("nslookup")
        .arg(&port_arg)
        .args(args)
        .arg("127.0.0.1")
        .output()
        .expect("busybox nslookup (install busybox-static)");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_dns_answers_from_services_and_forwards_the_rest() {
    let server = Server::start();
    let client = server.client().await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let create = |value: serde_json::Value| {
        let services = services.clone();
        async move {
            let svc: Service = serde_json::from_value(value).expect("service");
            services
                .create(&PostParams::default(), &svc)
                .await
                .expect("create service")
        }
    };
    let web = create(json!({"metadata": {"name": "web"},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}))
    .await;
    let web_ip: IpAddr = web
        .spec
        .expect("spec")
        .cluster_ip
        .expect("ip")
        .parse()
        .expect("ip");
    create(json!({"metadata": {"name": "db"},
        "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}}))
    .await;
    create(json!({"metadata": {"name": "ext"},
        "spec": {"type": "ExternalName", "externalName": "example.com"}}))
    .await;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "db-test", "labels": {"kubernetes.io/service-name": "db",
            "endpointslice.kubernetes.io/managed-by": "dns-test"}},
        "addressType": "IPv4",
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["10.96.5.7"], "hostname": "db-0", "conditions": {"ready": true}},
            {"addresses": ["10.96.5.8"], "hostname": "db-1", "conditions": {"ready": true}}
        ]
    }))
    .expect("slice");
    slices
        .create(&PostParams::default(), &slice)
        .await
        .expect("create slice");

    // The fake upstream resolver (www.example.test A 192.0.2.53) shared with multinode.rs.
    let upstream = support::cluster::fake_upstream("127.0.0.1:0", Arc::default());
    let port = free_port();
    let listen: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let dns = tokio::spawn(k3rs::dns::run(
        client.clone(),
        k3rs::dns::Config {
            listen: vec![listen],
            domain: "cluster.local".into(),
            upstreams: vec![upstream],
            recursion_for: vec!["127.0.0.0/8".parse().expect("cidr")],
        },
    ));

    // The view fills once the watches have listed.
    // The server task may not have bound its socket yet: a query sent before that is lost,
    // so keep asking.
    let deadline = Instant::now() + Duration::from_secs(20);
    let reply = loop {
        let asked = tokio::time::timeout(
            Duration::from_secs(1),
            ask_udp(listen, "web.default.svc.cluster.local", wire::TYPE_A),
        )
        .await;
        if let Ok(reply) = &asked
            && !reply.answers.is_empty()
        {
            break asked.expect("answered");
        }
        assert!(Instant::now() < deadline, "web never resolved: {asked:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(reply.rcode(), wire::RCODE_NOERROR);
    assert_eq!(
        reply.answers[0].data,
        RData::A(match web_ip {
            IpAddr::V4(v4) => v4,
            IpAddr::V6(_) => panic!("IPv4 cluster"),
        })
    );
    assert!(reply.flags & 0x0400 != 0, "authoritative");

    // The server made the kube-dns Service at --cluster-dns (k3s's ports), and it resolves.
    let deadline = Instant::now() + Duration::from_secs(20);
    let reply = loop {
        let reply = ask_udp(
            listen,
            "kube-dns.kube-system.svc.cluster.local",
            wire::TYPE_A,
        )
        .await;
        if !reply.answers.is_empty() {
            break reply;
        }
        assert!(
            Instant::now() < deadline,
            "kube-dns never resolved: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        reply.answers[0].data,
        RData::A("10.43.0.10".parse().expect("ip"))
    );
    let reply = ask_udp(
        listen,
        "_dns-tcp._tcp.kube-dns.kube-system.svc.cluster.local",
        wire::TYPE_SRV,
    )
    .await;
    assert!(
        matches!(&reply.answers[0].data, RData::Srv { port: 53, .. }),
        "{reply:?}"
    );
    let kube_system: Api<EndpointSlice> = Api::namespaced(client.clone(), "kube-system");
    // The server's DNS bootstrap writes the slice shortly after start.
    let deadline = Instant::now() + Duration::from_secs(20);
    let dns_slice = loop {
        match kube_system
            .get_opt("kube-dns-k3rs")
            .await
            .expect("get slice")
        {
            Some(slice) => break slice,
            None => {
                assert!(
                    Instant::now() < deadline,
                    "no kube-dns EndpointSlice after 20 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(dns_slice.ports.expect("ports").len(), 2);

    // Over TCP too.
    let reply = ask_tcp(listen, "web.default.svc.cluster.local", wire::TYPE_A).await;
    assert_eq!(reply.answers.len(), 1);

    // Headless: the endpoints, and each endpoint's hostname.
    let reply = ask_udp(listen, "db.default.svc.cluster.local", wire::TYPE_A).await;
    let mut ips: Vec<String> = reply
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::A(ip) => ip.to_string(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    ips.sort();
    assert_eq!(ips, ["10.96.5.7", "10.96.5.8"]);
    let reply = ask_udp(listen, "db-1.db.default.svc.cluster.local", wire::TYPE_A).await;
    assert_eq!(
        reply.answers[0].data,
        RData::A("10.96.5.8".parse().expect("ip"))
    );

    // SRV for the named port.
    let reply = ask_udp(
        listen,
        "_http._tcp.web.default.svc.cluster.local",
        wire::TYPE_SRV,
    )
    .await;
    assert!(matches!(&reply.answers[0].data,
        RData::Srv { port: 80, target, .. } if target == "web.default.svc.cluster.local"));

    // PTR for the ClusterIP.
    let reverse = k3rs::dns::view::reverse_name(&web_ip);
    let reply = ask_udp(listen, &reverse, wire::TYPE_PTR).await;
    assert_eq!(
        reply.answers[0].data,
        RData::Ptr("web.default.svc.cluster.local".into())
    );

    // ExternalName → CNAME.
    let reply = ask_udp(listen, "ext.default.svc.cluster.local", wire::TYPE_A).await;
    assert_eq!(reply.answers[0].data, RData::Cname("example.com".into()));

    // Unknown in the cluster domain → NXDOMAIN with the SOA; an existing parent → NODATA.
    let reply = ask_udp(listen, "nope.default.svc.cluster.local", wire::TYPE_A).await;
    assert_eq!(reply.rcode(), wire::RCODE_NXDOMAIN);
    assert_eq!(reply.authority[0].data.rtype(), wire::TYPE_SOA);
    let reply = ask_udp(listen, "default.svc.cluster.local", wire::TYPE_A).await;
    assert_eq!(
        (reply.rcode(), reply.answers.len()),
        (wire::RCODE_NOERROR, 0)
    );

    // Everything else goes to the upstream, over UDP and TCP (the fake only speaks UDP,
    // so TCP clients get SERVFAIL rather than a hang).
    let reply = ask_udp(listen, "www.example.test", wire::TYPE_A).await;
    assert_eq!(
        reply.answers[0].data,
        RData::A("192.0.2.53".parse().expect("ip"))
    );
    let reply = ask_udp(listen, "missing.example.test", wire::TYPE_A).await;
    assert_eq!(reply.rcode(), wire::RCODE_NXDOMAIN);
    let reply = ask_tcp(listen, "www.example.test", wire::TYPE_A).await;
    assert_eq!(reply.rcode(), wire::RCODE_SERVFAIL);

    // The same through busybox nslookup.
    let p = port;
    let web_name = "web.default.svc.cluster.local";
    let expected_web_ip = web_ip.to_string();
    let web_ip = expected_web_ip.clone();
    let out = tokio::task::spawn_blocking(move || {
        [
            nslookup(p, &["-type=a", web_name]),
            nslookup(p, &["-type=a", "db.default.svc.cluster.local"]),
            nslookup(p, &["-type=srv", "_pg._tcp.db.default.svc.cluster.local"]),
            nslookup(p, &[&web_ip]),
            nslookup(p, &["-type=a", "ext.default.svc.cluster.local"]),
            nslookup(p, &["-type=a", "nope.default.svc.cluster.local"]),
            nslookup(p, &["-type=a", "www.example.test"]),
        ]
    })
    .await
    .expect("nslookup");
    assert_eq!(reply_ip(&out[0]), expected_web_ip, "{}", out[0]);
    assert!(
        out[1].contains("10.96.5.7") && out[1].contains("10.96.5.8"),
        "{}",
        out[1]
    );
    assert!(
        out[2].contains("5432") && out[2].contains("db-0.db.default.svc.cluster.local"),
        "{}",
        out[2]
    );
    assert!(
        out[3].contains("web.default.svc.cluster.local"),
        "{}",
        out[3]
    );
    assert!(
        out[4].contains("canonical name = example.com"),
        "{}",
        out[4]
    );
    assert!(out[5].contains("NXDOMAIN"), "{}", out[5]);
    assert!(out[6].contains("192.0.2.53"), "{}", out[6]);

    assert!(
        !dns.is_finished(),
        "the DNS server stopped: {:?}",
        dns.await
    );
    dns.abort();
}

/// The "Address: x" line after the "Name:" line of busybox nslookup's output.
fn reply_ip(output: &str) -> String {
    output
        .split("Name:")
        .nth(1)
        .and_then(|rest| rest.lines().find_map(|l| l.trim().strip_prefix("Address:")))
        .map(|a| a.trim().to_string())
        .unwrap_or_default()
}

/// A counting upstream on loopback: answers `www.example.test` with one A record and
/// `big.example.test` with 60 (larger than 512 bytes), NXDOMAIN for the rest.
fn counting_upstream(queries: Arc<std::sync::atomic::AtomicUsize>) -> SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind the upstream");
    let addr = socket.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok((len, peer)) = socket.recv_from(&mut buf) {
            queries.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let Ok(query) = Message::parse(&buf[..len]) else {
                continue;
            };
            let name = query.questions[0].name.trim_end_matches('.').to_lowercase();
            let count = match name.as_str() {
                "www.example.test" => 1,
                "big.example.test" => 60,
                _ => 0,
            };
            let rcode = if count == 0 {
                wire::RCODE_NXDOMAIN
            } else {
                wire::RCODE_NOERROR
            };
            let mut reply = query.response(rcode);
            reply.additional.clear();
            for i in 0..count {
                reply.answers.push(wire::Record {
                    name: name.clone(),
                    class: 1,
                    ttl: 60,
                    data: RData::A(std::net::Ipv4Addr::new(192, 0, 2, i as u8)),
                });
            }
            let _ = socket.send_to(&reply.to_bytes(), peer);
        }
    });
    addr
}

/// Starts `k3rs::dns::serve` on a loopback port free for UDP and TCP, forwarding for
/// 127.0.0.1 only, with one Service in the view.
async fn serve_dns(upstream: SocketAddr) -> SocketAddr {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "web"},
        "spec": {"clusterIP": "10.43.0.20"}
    }))
    .expect("svc");
    let view = k3rs::dns::View::build("cluster.local", &[svc], &[], 1);
    for _ in 0..100 {
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let config = k3rs::dns::Config {
            listen: vec![listen],
            domain: "cluster.local".into(),
            upstreams: vec![upstream],
            recursion_for: vec!["127.0.0.1/32".parse().expect("cidr")],
        };
        if k3rs::dns::serve(
            Arc::new(config),
            Arc::new(k3rs::dns::Shared::new(view.clone())),
        )
        .await
        .is_ok()
        {
            return listen;
        }
    }
    panic!("no loopback port free for UDP and TCP");
}

async fn ask_from(source: &str, server: SocketAddr, query: &[u8]) -> Vec<u8> {
    let socket = UdpSocket::bind(source).await.expect("bind the client");
    socket.send_to(query, server).await.expect("send");
    let mut buf = [0u8; 4096];
    let (len, _) = tokio::time::timeout(Duration::from_secs(5), socket.recv_from(&mut buf))
        .await
        .expect("an answer within 5 s")
        .expect("recv");
    buf[..len].to_vec()
}

/// Issue 25 item 7: on a node address (public on a VPS) the DNS server answers cluster
/// names to anyone but forwards only for the pod network and the node itself — 10,000
/// queries for outside names from elsewhere are all REFUSED and none reaches the upstream;
/// forwarded answers are cut to the client's UDP size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_is_not_an_open_resolver_and_truncates_forwarded_answers() {
    let upstream_queries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let upstream = counting_upstream(upstream_queries.clone());
    let listen = serve_dns(upstream).await;

    // From 127.0.0.2 (not in recursion_for): cluster names yes, everything else REFUSED.
    let socket = UdpSocket::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    let mut buf = [0u8; 4096];
    let mut refused = 0;
    for i in 0..10_000u16 {
        let name = format!("q{i}.example.test");
        socket
            .send_to(&query_bytes(i, &name, wire::TYPE_A), listen)
            .await
            .expect("send");
        let (len, _) = tokio::time::timeout(Duration::from_secs(5), socket.recv_from(&mut buf))
            .await
            .expect("an answer within 5 s")
            .expect("recv");
        let reply = Message::parse(&buf[..len]).expect("parse");
        assert_eq!(reply.id, i);
        if reply.rcode() == wire::RCODE_REFUSED {
            refused += 1;
        }
    }
    assert_eq!(
        refused, 10_000,
        "every outside name refused to a non-pod source"
    );
    let reply = ask_from(
        "127.0.0.2:0",
        listen,
        &query_bytes(1, "web.default.svc.cluster.local", wire::TYPE_A),
    )
    .await;
    let reply = Message::parse(&reply).expect("parse");
    assert_eq!(
        (reply.rcode(), reply.answers.len()),
        (wire::RCODE_NOERROR, 1),
        "cluster names are answered to anyone"
    );
    assert_eq!(
        upstream_queries.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no refused query reached the upstream"
    );

    // From 127.0.0.1 (the node itself): forwarded.
    let reply = ask_from(
        "127.0.0.1:0",
        listen,
        &query_bytes(2, "www.example.test", wire::TYPE_A),
    )
    .await;
    let reply = Message::parse(&reply).expect("parse");
    assert_eq!(
        reply.answers[0].data,
        RData::A("192.0.2.0".parse().expect("ip"))
    );
    // A forwarded answer larger than the client's 512 bytes (no EDNS) is truncated: TC set.
    let raw = ask_from(
        "127.0.0.1:0",
        listen,
        &query_bytes(3, "big.example.test", wire::TYPE_A),
    )
    .await;
    assert!(raw.len() <= wire::UDP_LIMIT, "{} bytes", raw.len());
    let reply = Message::parse(&raw).expect("parse");
    assert!(reply.truncated(), "TC set on a cut answer");
    assert!(reply.answers.len() < 60);
    // A client that says (EDNS) it takes 4096 bytes gets the whole answer.
    let mut query = wire::query(4, "big.example.test", wire::TYPE_A);
    query.additional.push(wire::Record {
        name: String::new(),
        class: 4096,
        ttl: 0,
        data: RData::Raw(wire::TYPE_OPT, Vec::new()),
    });
    let raw = ask_from("127.0.0.1:0", listen, &query.to_bytes()).await;
    let reply = Message::parse(&raw).expect("parse");
    assert!(!reply.truncated());
    assert_eq!(reply.answers.len(), 60);
}

/// Issue 25 item 7: forwarding is bounded — against an upstream that never answers, the
/// queries beyond MAX_CONCURRENT_FORWARDS are REFUSED at once instead of each holding a
/// task and a socket; TCP clients beyond MAX_TCP_CONNECTIONS are closed at once, and the
/// server still answers afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_bounds_upstream_queries_and_tcp_clients() {
    // A black hole: bound, never read.
    let black_hole = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let listen = serve_dns(black_hole.local_addr().expect("addr")).await;

    let extra = 300;
    let total = k3rs::dns::MAX_CONCURRENT_FORWARDS + extra;
    let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind"));
    let started = Instant::now();
    // Read while sending, so the client's own receive buffer does not drop replies.
    let receiver = socket.clone();
    let refused_early = tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        let mut refused_early = 0;
        while let Ok(Ok((len, _))) =
            tokio::time::timeout(Duration::from_millis(1500), receiver.recv_from(&mut buf)).await
        {
            let reply = Message::parse(&buf[..len]).expect("parse");
            if reply.rcode() == wire::RCODE_REFUSED
                && started.elapsed() < Duration::from_millis(1900)
            {
                refused_early += 1;
            }
        }
        refused_early
    });
    for i in 0..total {
        socket
            .send_to(
                &query_bytes(i as u16, &format!("q{i}.example.test"), wire::TYPE_A),
                listen,
            )
            .await
            .expect("send");
        if i % 100 == 99 {
            // Let the server drain its receive buffer.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let refused_early = refused_early.await.expect("receiver");
    assert!(
        refused_early >= extra * 9 / 10,
        "only {refused_early} of the {extra} queries over the limit were refused at once"
    );

    // TCP: hold MAX_TCP_CONNECTIONS idle clients; the ones beyond are closed at once.
    let mut held = Vec::new();
    for _ in 0..k3rs::dns::MAX_TCP_CONNECTIONS {
        held.push(
            tokio::net::TcpStream::connect(listen)
                .await
                .expect("connect"),
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut over = tokio::net::TcpStream::connect(listen)
        .await
        .expect("connect");
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(2), over.read(&mut byte)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "a client over the TCP limit is closed at once: {closed:?}"
    );
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let reply = ask_tcp(listen, "web.default.svc.cluster.local", wire::TYPE_A).await;
    assert_eq!(
        reply.answers.len(),
        1,
        "TCP answers again once clients left"
    );
    drop(black_hole);
}
