//! kube-proxy (nftables) end to end, as root: the real server (`--disable-agent`), a "node"
//! network namespace with a bridge and two "pod" namespaces running `busybox httpd`, an
//! uplink veth from the host into the node, and `k3rs::proxy::run` applying its rules inside
//! the node namespace. The test writes the Services' EndpointSlices itself.
//!
//! Addresses (unique per process so parallel runs do not collide): Services 10.98.0.0/24,
//! pods 10.98.(128+n).0/24, the uplink 10.98.(64+n).0/30. Everything is removed by a Drop
//! guard, also on failure.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::Server;

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {args:?}: {e} (install iproute2 and busybox-static)")
        });
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The namespaces, links and servers of one test; removed on drop.
struct Topology {
    node: String,
    pods: Vec<String>,
    servers: Vec<Child>,
    uplink: String,
    n: u8,
    _www: tempfile::TempDir,
}

impl Topology {
    fn pod_ip(&self, i: usize) -> String {
        format!("10.98.{}.{}", 128 + self.n, i + 2)
    }

    fn node_ip(&self) -> String {
        format!("10.98.{}.2", 64 + self.n)
    }

    fn create(tag: &str) -> Topology {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "tests/proxy_nft.rs needs root (network namespaces, nftables)"
        );
        let pid = std::process::id();
        let n = (pid % 60) as u8;
        let node = format!("k3rsp{pid}{tag}n");
        let pods: Vec<String> = ["a", "b"]
            .iter()
            .map(|p| format!("k3rsp{pid}{tag}{p}"))
            .collect();
        let uplink = format!("k3u{pid}{tag}");
        let www = tempfile::tempdir().expect("temp dir");
        let mut topo = Topology {
            node: node.clone(),
            pods: Vec::new(),
            servers: Vec::new(),
            uplink: uplink.clone(),
            n,
            _www: www,
        };
        run(&["ip", "netns", "add", &node]);
        run(&["ip", "-n", &node, "link", "set", "lo", "up"]);
        run(&["ip", "-n", &node, "link", "add", "br0", "type", "bridge"]);
        let gateway = format!("10.98.{}.1", 128 + n);
        run(&[
            "ip",
            "-n",
            &node,
            "addr",
            "add",
            &format!("{gateway}/24"),
            "dev",
            "br0",
        ]);
        run(&["ip", "-n", &node, "link", "set", "br0", "up"]);
        for (i, pod) in pods.iter().enumerate() {
            run(&["ip", "netns", "add", pod]);
            topo.pods.push(pod.clone());
            let port = format!("veth{i}");
            run(&["ip", "-n", pod, "link", "set", "lo", "up"]);
            run(&[
                "ip", "-n", &node, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                "netns", pod,
            ]);
            run(&[
                "ip", "-n", &node, "link", "set", &port, "master", "br0", "up",
            ]);
            let ip = topo.pod_ip(i);
            run(&[
                "ip",
                "-n",
                pod,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                "eth0",
            ]);
            run(&["ip", "-n", pod, "link", "set", "eth0", "up"]);
            run(&["ip", "-n", pod, "route", "add", "default", "via", &gateway]);
            let root = topo._www.path().join(pod);
            std::fs::create_dir_all(&root).expect("www dir");
            std::fs::write(root.join("index.html"), format!("pod-{i}\n")).expect("index");
            let server = Command::new("ip")
                .args([
                    "netns", "exec", pod, "busybox", "httpd", "-f", "-p", "8080", "-h",
                ])
                .arg(&root)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("busybox httpd (install busybox-static)");
            topo.servers.push(server);
        }
        run(&[
            "ip", "link", "add", &uplink, "type", "veth", "peer", "name", "eth0", "netns", &node,
        ]);
        run(&[
            "ip",
            "addr",
            "add",
            &format!("10.98.{}.1/30", 64 + n),
            "dev",
            &uplink,
        ]);
        run(&["ip", "link", "set", &uplink, "up"]);
        run(&[
            "ip",
            "-n",
            &node,
            "addr",
            "add",
            &format!("{}/30", topo.node_ip()),
            "dev",
            "eth0",
        ]);
        run(&["ip", "-n", &node, "link", "set", "eth0", "up"]);
        run(&[
            "ip",
            "-n",
            &node,
            "route",
            "add",
            "default",
            "via",
            &format!("10.98.{}.1", 64 + n),
        ]);
        topo
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        // Deleting the node namespace removes the bridge, the table and both uplink ends.
        for ns in self.pods.iter().chain([&self.node]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.uplink])
            .status();
    }
}

/// What one HTTP GET to `addr` (`ip:port`) returned: the body, or the client's error
/// text, and how long it took. `busybox nc` is the client (busybox wget crashes inside
/// network namespaces on some builds).
async fn get(netns: Option<&str>, addr: &str) -> (Result<String, String>, Duration) {
    use tokio::io::AsyncWriteExt;
    let mut command = match netns {
        Some(ns) => {
            let mut c = tokio::process::Command::new("ip");
            c.args(["netns", "exec", ns, "busybox"]);
            c
        }
        None => tokio::process::Command::new("busybox"),
    };
    let (host, port) = addr.rsplit_once(':').expect("ip:port");
    let started = Instant::now();
    let mut child = command
        .args(["nc", "-w", "3", host, port])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("busybox nc (install busybox-static)");
    let mut stdin = child.stdin.take().expect("stdin");
    let _ = stdin.write_all(b"GET / HTTP/1.0\r\n\r\n").await;
    drop(stdin);
    let out = child.wait_with_output().await.expect("busybox nc");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let result = match text.split_once("\r\n\r\n") {
        Some((head, body)) if out.status.success() && head.starts_with("HTTP/1.") => {
            Ok(body.trim().to_string())
        }
        _ => Err(format!(
            "{} {}",
            String::from_utf8_lossy(&out.stderr).trim(),
            text.trim()
        )),
    };
    (result, started.elapsed())
}

/// Polls `url` until `check` accepts the result or `timeout` passes.
async fn wait_get(
    netns: Option<&str>,
    url: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&Result<String, String>) -> bool,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let (result, _) = get(netns, url).await;
        if check(&result) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: last {result:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn refused(result: &Result<String, String>) -> bool {
    matches!(result, Err(e) if e.contains("refused"))
}

async fn create_service(client: &kube::Client, name: &str, type_: &str) -> Service {
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"type": type_, "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    }))
    .expect("service");
    api.create(&PostParams::default(), &svc)
        .await
        .expect("create service")
}

fn slice(service: &str, ips: &[String]) -> EndpointSlice {
    let endpoints: Vec<_> = ips
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}, "nodeName": "node-1"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": format!("{service}-test"), "labels": {
            "kubernetes.io/service-name": service,
            "endpointslice.kubernetes.io/managed-by": "proxy-test"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints
    }))
    .expect("slice")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_reach_pods_through_the_nftables_rules() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("k3rs=debug")
        .with_test_writer()
        .try_init();
    let topo = Topology::create("");
    let server = Server::start_with(&[
        "--service-cidr",
        "10.98.0.0/24",
        "--cluster-cidr",
        "10.98.128.0/17",
        "--cluster-dns",
        "10.98.0.10",
    ]);
    let client = server.client().await;
    let mut config = k3rs::proxy::Config::new(
        "node-1",
        vec![topo.node_ip().parse().expect("node ip")],
        vec!["10.98.128.0/17".to_string()],
    );
    config.netns = Some(topo.node.clone());
    config.min_sync_interval = Duration::from_millis(200);
    config.resync_interval = Duration::from_secs(2);
    let proxy = tokio::spawn(k3rs::proxy::run(client.clone(), config));

    let web = create_service(&client, "web", "NodePort").await;
    let spec = web.spec.expect("spec");
    let cluster_ip = spec.cluster_ip.expect("clusterIP");
    let node_port = spec.ports.expect("ports")[0].node_port.expect("nodePort");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let both = vec![topo.pod_ip(0), topo.pod_ip(1)];
    slices
        .create(&PostParams::default(), &slice("web", &both))
        .await
        .expect("slice");
    let url = format!("{cluster_ip}:80");
    let node = Some(topo.node.as_str());
    wait_get(
        node,
        &url,
        "the ClusterIP to answer",
        Duration::from_secs(20),
        |r| r.is_ok(),
    )
    .await;

    // Random balancing: both endpoints answer over many connections.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let (result, _) = get(node, &url).await;
        seen.insert(result.expect("ClusterIP connection"));
    }
    assert_eq!(seen.len(), 2, "both endpoints should answer: {seen:?}");

    // A pod reaches the ClusterIP too (bridged replies go through br_netfilter). The first
    // packet from a fresh pod namespace can be lost while its neighbour entry for the gateway
    // is resolved under load, so this waits rather than judging one connection.
    wait_get(
        Some(&topo.pods[0]),
        &url,
        "pod → ClusterIP",
        Duration::from_secs(10),
        |r| r.is_ok(),
    )
    .await;

    // NodePort from the host, through the uplink.
    let node_port_url = format!("{}:{node_port}", topo.node_ip());
    wait_get(
        None,
        &node_port_url,
        "the NodePort",
        Duration::from_secs(10),
        |r| r.is_ok(),
    )
    .await;

    // Session affinity keeps one client on one endpoint.
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}})),
        )
        .await
        .expect("patch affinity");
    // Wait until the affinity rules are in (the answer stops changing), then count.
    let deadline = Instant::now() + Duration::from_secs(20);
    let sticky = loop {
        let mut answers = std::collections::BTreeSet::new();
        for _ in 0..15 {
            answers.insert(get(node, &url).await.0.expect("affinity connection"));
        }
        if answers.len() == 1 {
            break answers.into_iter().next().expect("one");
        }
        assert!(
            Instant::now() < deadline,
            "sessionAffinity never held: {answers:?}"
        );
    };
    for _ in 0..20 {
        assert_eq!(get(node, &url).await.0.expect("sticky connection"), sticky);
    }

    // A Service without endpoints is rejected at once.
    let empty = create_service(&client, "empty", "ClusterIP").await;
    let empty_url = format!("{}:80", empty.spec.expect("spec").cluster_ip.expect("ip"));
    wait_get(
        node,
        &empty_url,
        "the empty Service to be rejected",
        Duration::from_secs(20),
        refused,
    )
    .await;
    let (result, took) = get(node, &empty_url).await;
    assert!(
        refused(&result) && took < Duration::from_secs(1),
        "{result:?} after {took:?}"
    );

    // Hand edits are repaired within the resync interval.
    run(&["ip", "netns", "exec", &topo.node, "nft", "flush", "ruleset"]);
    wait_get(
        node,
        &url,
        "the rules to be repaired",
        Duration::from_secs(10),
        |r| r.is_ok(),
    )
    .await;

    // Endpoints removed: traffic stops (and is refused, the Service has none left).
    slices
        .patch(
            "web-test",
            &PatchParams::default(),
            &Patch::Merge(json!({"endpoints": []})),
        )
        .await
        .expect("remove endpoints");
    wait_get(
        node,
        &url,
        "traffic to stop",
        Duration::from_secs(20),
        refused,
    )
    .await;
    let (result, _) = get(None, &node_port_url).await;
    assert!(refused(&result), "NodePort without endpoints: {result:?}");

    assert!(!proxy.is_finished(), "the proxy stopped: {:?}", proxy.await);
    proxy.abort();
}
