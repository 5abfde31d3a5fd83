//! `cargo bench --bench kubelet` (root): the kubelet measured through the real binaries.
//!
//! Owns: the kubelet benchmark and its report. It starts `k3rs server --disable-agent` and a
//! `k3rs agent` that joins it with the token (the agent is what is measured; it runs its own
//! supervised containerd), each with its own data dir, run dir and pod log dir under one short
//! base directory, on cluster CIDR 10.95.0.0/16 and service CIDR 10.94.0.0/16 (other tests use
//! 10.42 and 10.96–10.99). The busybox test image is dropped into the agent's air-gap images
//! folder before it starts, so no pod pulls anything. Then:
//!
//! * **idle RSS**: VmRSS of the agent process (containerd and the shims are separate
//!   processes and not counted) once the Node is Ready and has been idle for 10 s;
//! * **startup latency**: 100 pods (busybox `sleep`, no probes) created one after another at
//!   10 pods/s and scheduled by the real scheduler; for each, the time from just before its
//!   POST to the first watch event showing it `Running` (the Kubernetes pod-startup SLI:
//!   creation → Running observed via watch; image pulls excluded since the image is present);
//!   p50, p99 and max;
//! * **where the time went**: the agent runs with the pod worker's debug timings on; each
//!   pod's first sync is split into phases, and the part spent inside containerd's CRI calls
//!   (RunPodSandbox with its CNI plugins, CreateContainer, StartContainer with runc) is
//!   printed apart from the kubelet's own share, as the machine's floor for a pod start;
//! * **RSS with 50 pods**: 50 of the pods are deleted, and once they are gone and the node
//!   has settled for 10 s, VmRSS of the agent again.
//!
//! The binary is `K3RS_RELEASE_BIN` when set (the shipped build, whose memory users get),
//! else the bench-profile build.
//!
//! Everything (pods, containerd, shims, mounts, the bridge address) is torn down at the end,
//! also on failure. Figures on a shared machine are noisy: run it once or twice, not more.
//! Last line: `RESULT kubelet startup_p50_ms=… startup_p99_ms=… agent_rss_idle_mb=…
//! agent_rss_50pods_mb=…`.

#[path = "../tests/support/images.rs"]
#[allow(dead_code)]
mod images;
#[path = "../tests/support/runtime.rs"]
mod runtime;
#[path = "support/stats.rs"]
mod stats;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use stats::Latencies;

const PODS: usize = 100;
const KEEP: usize = 50;
const CREATE_INTERVAL: Duration = Duration::from_millis(100);
const SETTLE: Duration = Duration::from_secs(10);
const CLUSTER_CIDR: &str = "10.95.0.0/16";
/// The first node's podCIDR gets this gateway on `cni0`.
const BRIDGE_ADDRESS: &str = "10.95.0.1/24";
const IMAGE: &str = "k3rs.test/busybox:1";

/// A child process killed (and reaped) on drop.
struct Process {
    child: Child,
    log: PathBuf,
}

impl Process {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn check_alive(&mut self, what: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{what} exited ({status}):\n{}", tail(&self.log()));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // SAFETY: signalling the child this bench spawned.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The CRI calls of a pod start: the part containerd (with runc and the CNI plugins) owns.
const RUNTIME_PHASES: [&str; 3] = ["run-sandbox", "create", "start"];

/// Reads the agent's `first pod sync` debug lines (`phases=total=…ms permit=…ms …`) for the
/// bench pods and prints, per phase, the median, and how much of each start was spent inside
/// containerd's CRI calls: the floor the kubelet cannot go below on this machine.
fn phase_breakdown(log: &str) {
    let mut per_phase: Vec<(String, Latencies)> = Vec::new();
    let (mut runtime, mut ours) = (Latencies::new(), Latencies::new());
    for line in log.lines() {
        if !line.contains("first pod sync") || !line.contains("pod=bench-") {
            continue;
        }
        let (mut in_runtime, mut total) = (Duration::ZERO, None);
        for field in line.split_whitespace() {
            let field = field.strip_prefix("phases=").unwrap_or(field);
            let Some((name, value)) = field.split_once('=') else {
                continue;
            };
            let Some(ms) = value.strip_suffix("ms").and_then(|v| v.parse::<u64>().ok()) else {
                continue;
            };
            let took = Duration::from_millis(ms);
            if name == "total" {
                total = Some(took);
                continue;
            }
            if RUNTIME_PHASES.contains(&name) {
                in_runtime += took;
            }
            match per_phase.iter_mut().find(|(n, _)| n == name) {
                Some((_, l)) => l.record(took),
                None => {
                    let mut l = Latencies::new();
                    l.record(took);
                    per_phase.push((name.to_string(), l));
                }
            }
        }
        if let Some(total) = total {
            runtime.record(in_runtime);
            ours.record(total.saturating_sub(in_runtime));
        }
    }
    if runtime.is_empty() {
        println!("pod start phases: no `first pod sync` lines in the agent log");
        return;
    }
    let medians: Vec<String> = per_phase
        .iter()
        .map(|(name, l)| format!("{name}={:.0}", l.summary().p50.as_secs_f64() * 1e3))
        .collect();
    println!(
        "pod start phases over {} pods, median ms: {}",
        runtime.len(),
        medians.join(" ")
    );
    let (rt, us) = (runtime.summary(), ours.summary());
    println!(
        "inside containerd's CRI calls ({}): p50 {:.0} ms, p99 {:.0} ms; the rest of the kubelet's sync: p50 {:.0} ms, p99 {:.0} ms",
        RUNTIME_PHASES.join(" + "),
        rt.p50.as_secs_f64() * 1e3,
        rt.p99.as_secs_f64() * 1e3,
        us.p50.as_secs_f64() * 1e3,
        us.p99.as_secs_f64() * 1e3,
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The binary measured: the shipped release build when `K3RS_RELEASE_BIN` names one (its
/// memory is what users get), else the one cargo built for this bench.
fn k3rs_binary() -> PathBuf {
    std::env::var_os("K3RS_RELEASE_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_k3rs")))
}

fn spawn(args: &[&str], env: &[(&str, &Path)], log: PathBuf) -> Process {
    let file = std::fs::File::create(&log).expect("log file");
    let child = Command::new(k3rs_binary())
        .args(args)
        .env_remove("K3RS_TOKEN")
        .env_remove("K3RS_DATA_DIR")
        .env_remove("K3RS_URL")
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .stdout(file.try_clone().expect("log"))
        .stderr(file)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn k3rs");
    Process { child, log }
}

fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kb / 1024.0
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn client(kubeconfig: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig");
    kube::Client::try_from(config).expect("client")
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn bench_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"bench": "kubelet"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sleep", "3600"]
            }]
        }
    }))
    .expect("pod")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    runtime::require_root("cargo bench --bench kubelet");
    runtime::require_runtime_tools();
    let base = runtime::base_dir("bk");
    let _guard = runtime::RuntimeGuard::new(&base).with_bridge_address(BRIDGE_ADDRESS);
    println!("kubelet bench: {}", k3rs_binary().display());

    // The API server, scheduler and controllers (node IPAM hands out 10.95.x.0/24).
    let port = free_port();
    let server_dir = base.join("server");
    let kubeconfig = base.join("kubeconfig.yaml");
    let server_data = server_dir.join("data");
    std::fs::create_dir_all(&server_dir).expect("server dir");
    let mut server = spawn(
        &[
            "server",
            "--disable-agent",
            "--data-dir",
            &server_data.to_string_lossy(),
            "--bind-address",
            "127.0.0.1",
            "--https-listen-port",
            &port.to_string(),
            "--write-kubeconfig",
            &kubeconfig.to_string_lossy(),
            "--cluster-cidr",
            CLUSTER_CIDR,
            "--service-cidr",
            "10.94.0.0/16",
            "--cluster-dns",
            "10.94.0.10",
        ],
        &[],
        base.join("server.log"),
    );
    let token_file = server_data.join("server/token");
    let started = Instant::now();
    while !(kubeconfig.exists() && token_file.exists()) {
        server.check_alive("k3rs server");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "k3rs server not up in 60 s:\n{}",
            tail(&server.log())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let admin = client(&kubeconfig).await;
    wait_for("the API server", Duration::from_secs(60), || async {
        admin
            .request_text(http::Request::get("/readyz").body(Vec::new()).expect("req"))
            .await
            .ok()
    })
    .await;

    // The agent under test, with its own containerd and the image already in place.
    let agent_dir = base.join("agent");
    let agent_data = agent_dir.join("data");
    images::TestImage::busybox().write_to(&agent_data.join("agent/images"));
    let node_name = format!("bench-kubelet-{}", std::process::id());
    let kubelet_port = free_port().to_string();
    let run_dir = agent_dir.join("run");
    let log_dir = agent_dir.join("pod-logs");
    let mut agent = spawn(
        &[
            "agent",
            "--server",
            &format!("https://127.0.0.1:{port}"),
            "--token-file",
            &token_file.to_string_lossy(),
            "--data-dir",
            &agent_data.to_string_lossy(),
            "--node-name",
            &node_name,
            "--node-ip",
            "127.0.0.1",
            "--private-registry",
            &agent_dir.join("registries.yaml").to_string_lossy(),
            // A full CI disk must not put the node under DiskPressure or start image GC.
            "--kubelet-arg",
            "eviction-hard=memory.available<1Mi,nodefs.available<1%",
            "--kubelet-arg",
            "image-gc-high-threshold=100",
            "--kubelet-arg",
            "image-gc-low-threshold=99",
        ],
        &[
            ("K3RS_RUN_DIR", &run_dir),
            ("K3RS_POD_LOG_DIR", &log_dir),
            ("K3RS_KUBELET_PORT", Path::new(&kubelet_port)),
            // Each pod's first sync logs where its time went (see `phase_breakdown`).
            (
                "RUST_LOG",
                Path::new("info,k3rs::kubelet::pods::worker=debug"),
            ),
        ],
        base.join("agent.log"),
    );
    let nodes: Api<Node> = Api::all(admin.clone());
    let ready_wait = Instant::now();
    wait_for("the node to be Ready", Duration::from_secs(120), || {
        agent.check_alive("k3rs agent");
        let nodes = nodes.clone();
        let name = node_name.clone();
        async move {
            let node = nodes.get_opt(&name).await.ok().flatten()?;
            node_ready(&node).then_some(())
        }
    })
    .await;
    println!(
        "node {node_name} Ready {:.1} s after the agent started",
        ready_wait.elapsed().as_secs_f64()
    );
    tokio::time::sleep(SETTLE).await;
    let rss_idle = rss_mb(agent.pid());
    println!("agent RSS idle: {rss_idle:.1} MB");

    // Startup latency: creation → Running seen in a watch.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let watch = pods
        .watch(&WatchParams::default().labels("bench=kubelet"), "0")
        .await
        .expect("watch pods");
    let (running_tx, mut running_rx) = tokio::sync::mpsc::unbounded_channel();
    let watcher = tokio::spawn(async move {
        let mut watch = watch.boxed();
        while let Ok(Some(event)) = watch.try_next().await {
            if let WatchEvent::Added(pod) | WatchEvent::Modified(pod) = event
                && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && let Some(name) = pod.metadata.name
            {
                let _ = running_tx.send((name, Instant::now()));
            }
        }
    });
    let mut created: HashMap<String, Instant> = HashMap::new();
    let mut running: HashMap<String, Instant> = HashMap::new();
    let run_started = Instant::now();
    for i in 0..PODS {
        let name = format!("bench-{i:03}");
        let at = Instant::now();
        pods.create(&PostParams::default(), &bench_pod(&name))
            .await
            .expect("create pod");
        created.insert(name, at);
        let next = run_started + CREATE_INTERVAL * (i as u32 + 1);
        while let Ok((name, at)) = running_rx.try_recv() {
            running.entry(name).or_insert(at);
        }
        tokio::time::sleep_until(next.into()).await;
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while running.len() < PODS {
        agent.check_alive("k3rs agent");
        match tokio::time::timeout_at(deadline.into(), running_rx.recv()).await {
            Ok(Some((name, at))) => {
                running.entry(name).or_insert(at);
            }
            _ => panic!(
                "only {} of {PODS} pods Running after 300 s:\n{}",
                running.len(),
                tail(&agent.log())
            ),
        }
    }
    watcher.abort();
    let mut latencies = Latencies::with_capacity(PODS);
    for (name, at) in &running {
        if let Some(start) = created.get(name) {
            latencies.record(at.saturating_duration_since(*start));
        }
    }
    let summary = latencies.summary();
    println!(
        "pod startup ({PODS} pods, one every {} ms): p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms; all Running {:.1} s after the first create",
        CREATE_INTERVAL.as_millis(),
        summary.p50.as_secs_f64() * 1e3,
        summary.p90.as_secs_f64() * 1e3,
        summary.p99.as_secs_f64() * 1e3,
        summary.max.as_secs_f64() * 1e3,
        running
            .values()
            .max()
            .map_or(0.0, |last| last.duration_since(run_started).as_secs_f64()),
    );

    phase_breakdown(&agent.log());

    // RSS with 50 pods.
    for i in KEEP..PODS {
        let _ = pods
            .delete(&format!("bench-{i:03}"), &DeleteParams::default())
            .await;
    }
    wait_for("50 pods to be gone", Duration::from_secs(120), || async {
        let list = pods
            .list(&ListParams::default().labels("bench=kubelet"))
            .await
            .ok()?;
        (list.items.len() == KEEP).then_some(())
    })
    .await;
    tokio::time::sleep(SETTLE).await;
    agent.check_alive("k3rs agent");
    let rss_50 = rss_mb(agent.pid());
    println!("agent RSS with {KEEP} pods: {rss_50:.1} MB");

    // Tear down through the kubelet, so containerd removes what it made.
    let _ = pods
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("bench=kubelet"),
        )
        .await;
    let _ = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            match pods
                .list(&ListParams::default().labels("bench=kubelet"))
                .await
            {
                Ok(list) if list.items.is_empty() => break,
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    })
    .await;
    drop(agent);
    drop(server);

    println!(
        "goals: startup_p99_ms <= 1000 ({}), agent_rss_idle_mb <= 24 ({}); the machine is shared, figures are noisy",
        if summary.p99 <= Duration::from_secs(1) {
            "met"
        } else {
            "MISSED"
        },
        if rss_idle <= 24.0 { "met" } else { "MISSED" },
    );
    println!(
        "RESULT kubelet startup_p50_ms={:.0} startup_p99_ms={:.0} agent_rss_idle_mb={:.1} agent_rss_50pods_mb={:.1}",
        summary.p50.as_secs_f64() * 1e3,
        summary.p99.as_secs_f64() * 1e3,
        rss_idle,
        rss_50,
    );
}
