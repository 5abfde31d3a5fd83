//! `cargo bench --bench scheduler`: the scheduler inside the real `k3rs server`,
//! measured end to end over HTTPS with kube-rs clients, as kube-scheduler's
//! `scheduler_perf` does (fake nodes, no kubelets).
//!
//! Owns: the scheduler benchmark and its report. It runs the binary cargo built for
//! this bench (`k3rs server --disable-agent`) on a free loopback port with a
//! temporary data directory, creates
//!
//! * **1,000 fake nodes** (Node objects with allocatable cpu/memory/pods, Ready, zone
//!   labels over 10 zones, and a Lease each in `kube-node-lease`; the server runs with
//!   `--cluster-cidr 10.64.0.0/12` (a /24 for each of them) and
//!   `--kube-controller-manager-arg node-monitor-grace-period=1h` and
//!   `node-startup-grace-period=1h` because nothing renews those Leases), then
//! * **10,000 bare pods** from 32 concurrent clients: **pods/s** from the first
//!   create call to the last pod seen bound through a watch, the create rate alone
//!   (the API server's share), and the **scheduling latency** of each pod (its
//!   create call starting → the watch showing it bound): p50/p99/max, then
//! * **a 5,000-replica Deployment**: the time from creating it to its 5,000th pod
//!   appearing in a watch (the controllers' rate), and to all of them bound.
//!
//! The last line is machine-readable:
//! `RESULT sched pods_per_s=… p99_ms=… deploy5k_s=…`.
//!
//! Everything runs on one machine: the clients share the CPU with the server, which
//! the report states with the CPU count. Without `--bench` (e.g. `cargo test
//! --benches`) it runs with tiny sizes as a smoke test.

#[path = "support/server.rs"]
mod server;
#[path = "support/stats.rs"]
mod stats;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use server::{K3rsServer, k3rs_bin, load_average};
use stats::{Latencies, fmt_duration, fmt_rate, per_second};

/// Concurrent clients creating nodes and pods.
const CLIENTS: usize = 32;
const ZONES: usize = 10;
const READY_TIMEOUT: Duration = Duration::from_secs(60);

struct Sizes {
    nodes: usize,
    pods: usize,
    deployment: usize,
    /// How long to wait for everything to be bound before giving up.
    timeout: Duration,
}

fn main() -> Result<()> {
    let full = std::env::args().any(|arg| arg == "--bench");
    let sizes = if full {
        Sizes {
            nodes: 1000,
            pods: 10_000,
            deployment: 5000,
            timeout: Duration::from_secs(600),
        }
    } else {
        Sizes {
            nodes: 20,
            pods: 200,
            deployment: 100,
            timeout: Duration::from_secs(120),
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    if !full {
        println!(
            "(no --bench argument: smoke run with tiny sizes; use `cargo bench --bench scheduler`)"
        );
    }
    runtime.block_on(run(sizes))
}

async fn run(sizes: Sizes) -> Result<()> {
    println!(
        "scheduler benchmark: {}, {} nodes, {} bare pods, a {}-replica Deployment, {CLIENTS} \
         clients, {} CPUs shared by clients and server; load average before: {}",
        k3rs_bin().display(),
        sizes.nodes,
        sizes.pods,
        sizes.deployment,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
    );
    let mut server = K3rsServer::spawn(
        "k3rs-sched-bench-",
        &[
            // The default 10.42.0.0/16 has /24s for 256 nodes only (and a wider one must miss
            // the 10.43.0.0/16 service CIDR); node IPAM would keep
            // retrying (and logging) the other 744 throughout the run.
            "--cluster-cidr",
            "10.64.0.0/12",
            "--kube-controller-manager-arg",
            "node-monitor-grace-period=1h",
            "--kube-controller-manager-arg",
            "node-startup-grace-period=1h",
        ],
    )?;
    server.wait_for_api(READY_TIMEOUT).await?;
    let clients = server.clients(CLIENTS).await?;
    let admin = clients[0].clone();

    let started = Instant::now();
    create_nodes(&clients, sizes.nodes).await?;
    println!(
        "created {} nodes (with Leases) in {}",
        sizes.nodes,
        fmt_duration(started.elapsed())
    );
    for ns in ["bench", "deploy"] {
        let api: Api<Namespace> = Api::all(admin.clone());
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        api.create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("creating namespace {ns}"))?;
    }
    // Give the scheduler a moment to see every node (its watch is not ours to read).
    tokio::time::sleep(Duration::from_secs(2)).await;

    // --- 10,000 bare pods -------------------------------------------------------
    let bound = BoundWatch::start(admin.clone(), "bench").await?;
    let created_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let first_create = Instant::now();
    let per_client = sizes.pods.div_ceil(CLIENTS);
    let mut tasks = tokio::task::JoinSet::new();
    for (c, client) in clients.iter().enumerate() {
        let client = client.clone();
        let created_at = created_at.clone();
        let range = (c * per_client)..((c + 1) * per_client).min(sizes.pods);
        tasks.spawn(async move {
            let api: Api<Pod> = Api::namespaced(client, "bench");
            for i in range {
                let name = format!("pod-{i:05}");
                let pod = bench_pod(&name)?;
                let t = Instant::now();
                created_at
                    .lock()
                    .map_err(|_| anyhow::anyhow!("poisoned"))?
                    .insert(name.clone(), t);
                api.create(&PostParams::default(), &pod)
                    .await
                    .with_context(|| format!("creating {name}"))?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("a creating task panicked")??;
    }
    let create_time = first_create.elapsed();
    println!(
        "created {} pods in {} ({} creates)",
        sizes.pods,
        fmt_duration(create_time),
        fmt_rate(per_second(sizes.pods, create_time))
    );
    let bound_at = bound.wait_for(sizes.pods, sizes.timeout).await?;
    let last_bound = bound_at.values().copied().max().unwrap_or(first_create);
    let schedule_time = last_bound.saturating_duration_since(first_create);
    let pods_per_s = per_second(sizes.pods, schedule_time);
    let mut latencies = Latencies::with_capacity(sizes.pods);
    {
        let created = created_at.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        for (name, t) in &bound_at {
            if let Some(c) = created.get(name) {
                latencies.record(t.saturating_duration_since(*c));
            }
        }
    }
    let lat = latencies.summary();
    println!(
        "bound {} pods in {} from the first create: {} pods",
        sizes.pods,
        fmt_duration(schedule_time),
        fmt_rate(pods_per_s)
    );
    println!(
        "scheduling latency (create call → bound seen in watch): p50 {} p90 {} p99 {} max {}",
        fmt_duration(lat.p50),
        fmt_duration(lat.p90),
        fmt_duration(lat.p99),
        fmt_duration(lat.max)
    );
    let per_node = spread_summary(&admin, "bench").await?;
    println!("pods per node: {per_node}");
    if let Ok((rss, _)) = server.memory() {
        println!(
            "server RSS with {} nodes and {} bound pods: {} MiB",
            sizes.nodes,
            sizes.pods,
            rss / (1024 * 1024)
        );
    }
    drop(bound);

    // --- a 5,000-replica Deployment ---------------------------------------------
    let pods_seen = BoundWatch::start(admin.clone(), "deploy").await?;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "deploy");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "big"},
        "spec": {
            "replicas": sizes.deployment,
            "selector": {"matchLabels": {"app": "big"}},
            "template": {
                "metadata": {"labels": {"app": "big"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
            }
        }
    }))?;
    let deploy_start = Instant::now();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .context("creating the Deployment")?;
    let created = pods_seen
        .wait_for_created(sizes.deployment, sizes.timeout)
        .await?;
    let deploy_created = created.saturating_duration_since(deploy_start);
    println!(
        "Deployment of {}: all pods created in {} ({} pods)",
        sizes.deployment,
        fmt_duration(deploy_created),
        fmt_rate(per_second(sizes.deployment, deploy_created))
    );
    let deploy_bound = pods_seen.wait_for(sizes.deployment, sizes.timeout).await?;
    let all_bound = deploy_bound
        .values()
        .copied()
        .max()
        .unwrap_or(deploy_start)
        .saturating_duration_since(deploy_start);
    println!(
        "Deployment of {}: all pods bound in {}",
        sizes.deployment,
        fmt_duration(all_bound)
    );
    println!("load average after: {}", load_average());
    println!(
        "RESULT sched pods_per_s={:.0} p99_ms={:.0} deploy5k_s={:.1}",
        pods_per_s,
        lat.p99.as_secs_f64() * 1000.0,
        deploy_created.as_secs_f64()
    );
    server.stop().await;
    Ok(())
}

fn bench_pod(name: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    }))?)
}

/// Creates `count` Ready nodes and their Leases, spread over the clients.
async fn create_nodes(clients: &[kube::Client], count: usize) -> Result<()> {
    let per_client = count.div_ceil(clients.len());
    let mut tasks = tokio::task::JoinSet::new();
    for (c, client) in clients.iter().enumerate() {
        let client = client.clone();
        let range = (c * per_client)..((c + 1) * per_client).min(count);
        tasks.spawn(async move {
            let nodes: Api<Node> = Api::all(client.clone());
            let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
            for i in range {
                let name = format!("node-{i:04}");
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "topology.kubernetes.io/zone": format!("zone-{}", i % ZONES)}},
                }))?;
                nodes
                    .create(&PostParams::default(), &node)
                    .await
                    .with_context(|| format!("creating node {name}"))?;
                let status = json!({"status": {
                    "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
                    "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "fake node", "lastHeartbeatTime": now(),
                        "lastTransitionTime": now()}]
                }});
                nodes
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .with_context(|| format!("setting the status of node {name}"))?;
                let lease: Lease = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                             "renewTime": now_micro()}
                }))?;
                leases
                    .create(&PostParams::default(), &lease)
                    .await
                    .with_context(|| format!("creating the Lease of node {name}"))?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("a node-creating task panicked")??;
    }
    Ok(())
}

fn now() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    k8s_openapi::jiff::Timestamp::from_second(t.as_secs() as i64)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

fn now_micro() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    k8s_openapi::jiff::Timestamp::new(t.as_secs() as i64, (t.subsec_micros() * 1000) as i32)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
        .unwrap_or_default()
}

/// Min / max pods per node in a namespace (a sanity check that the pods spread).
async fn spread_summary(client: &kube::Client, namespace: &str) -> Result<String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = api
        .list(&Default::default())
        .await
        .context("listing the bench pods")?;
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for p in &pods.items {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            *per_node.entry(n).or_default() += 1;
        }
    }
    let min = per_node.values().min().copied().unwrap_or(0);
    let max = per_node.values().max().copied().unwrap_or(0);
    Ok(format!(
        "{} nodes used, min {min}, max {max}",
        per_node.len()
    ))
}

/// A watch on one namespace's pods recording when each was first seen and first
/// seen bound.
struct BoundWatch {
    state: Arc<Mutex<WatchState>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct WatchState {
    synced: bool,
    seen: usize,
    last_seen: Option<Instant>,
    bound: HashMap<String, Instant>,
    error: Option<String>,
}

impl BoundWatch {
    async fn start(client: kube::Client, namespace: &str) -> Result<BoundWatch> {
        let api: Api<Pod> = Api::namespaced(client, namespace);
        let state: Arc<Mutex<WatchState>> = Arc::default();
        let shared = state.clone();
        let task = tokio::spawn(async move {
            let mut known = std::collections::HashSet::new();
            let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
            loop {
                let event = match stream.try_next().await {
                    Ok(Some(e)) => e,
                    Ok(None) => break,
                    Err(e) => {
                        if let Ok(mut st) = shared.lock() {
                            st.error = Some(format!("{e}"));
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let now = Instant::now();
                let Ok(mut st) = shared.lock() else { break };
                match event {
                    Event::InitDone => st.synced = true,
                    Event::Init | Event::Delete(_) => {}
                    Event::InitApply(pod) | Event::Apply(pod) => {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        if known.insert(name.clone()) {
                            st.seen += 1;
                            st.last_seen = Some(now);
                        }
                        let is_bound = pod
                            .spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_deref())
                            .is_some_and(|n| !n.is_empty());
                        if is_bound {
                            st.bound.entry(name).or_insert(now);
                        }
                    }
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if state.lock().map(|s| s.synced).unwrap_or(false) {
                break;
            }
            if Instant::now() > deadline {
                bail!("the pod watch did not sync within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(BoundWatch { state, task })
    }

    /// Waits until `count` pods were seen bound; returns when each was.
    async fn wait_for(&self, count: usize, timeout: Duration) -> Result<HashMap<String, Instant>> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let st = self.state.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                if st.bound.len() >= count {
                    return Ok(st.bound.clone());
                }
                if Instant::now() > deadline {
                    bail!(
                        "only {} of {count} pods bound after {timeout:?} (last watch error: {:?})",
                        st.bound.len(),
                        st.error
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `count` pods exist; returns when the last appeared.
    async fn wait_for_created(&self, count: usize, timeout: Duration) -> Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let st = self.state.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                if st.seen >= count
                    && let Some(t) = st.last_seen
                {
                    return Ok(t);
                }
                if Instant::now() > deadline {
                    bail!("only {} of {count} pods created after {timeout:?}", st.seen);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for BoundWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
