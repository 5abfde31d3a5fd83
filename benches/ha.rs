//! `cargo bench --bench ha`: a 3-member k3rs group side by side with a 3-member etcd 3.4
//! cluster, on distinct loopback addresses of this machine (issue 23).
//!
//! Owns: the HA benchmark and its report. In one run it measures
//!
//! * write throughput with 16 writers and 1 KiB values through each system's client path,
//!   round-robin over the members: k3rs through the API server of each member (ConfigMap
//!   creates with kube-rs), etcd through its gRPC `KV/Put` (default durability);
//! * failover: under that load, SIGKILL of the leader, then the time until the first write
//!   started after the kill succeeds through a surviving member — for both;
//! * agent failover (issue 24): the agent's API server load balancer (its own code) in
//!   front of server 1, knowing the others from `default/kubernetes`; SIGKILL of the server
//!   it uses; the time until a request through it succeeds again;
//! * controller takeover (issue 24): SIGKILL of the `kube-controller-manager` Lease holder;
//!   the time until a ReplicaSet created right after gets its pod from another server;
//! * join: a fourth k3rs server joins a group holding 10,000 objects; the time from its
//!   start until it is a voter.
//!
//! The last line is `RESULT ha write_ratio_16=<k3rs/etcd> failover_ms=… etcd_failover_ms=…
//! join_ms=… agent_failover_ms=… controller_takeover_ms=…`; the goal check before it covers
//! the issues' goals (`write_ratio_16 ≥ 1.0`, `failover_ms ≤ 2000` and `≤ etcd_failover_ms`,
//! `join_ms ≤ 5000`, `agent_failover_ms ≤ 3000`, `controller_takeover_ms ≤ 17000`).
//!
//! Environment: `K3RS_BENCH_SECS` (seconds of the write-load run, default 10). Without
//! `--bench` (e.g. `cargo test --benches`) everything runs briefly as a smoke test.

#[path = "support/etcd.rs"]
mod etcd;
#[path = "support/server.rs"]
mod server;
#[path = "support/stats.rs"]
mod stats;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, PostParams};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

const VALUE_SIZE: usize = 1024;
const WRITERS: usize = 16;
const K3RS_SUBNET: &str = "127.0.61";
const ETCD_SUBNET: &str = "127.0.62";

struct Settings {
    full: bool,
    measure: Duration,
    join_objects: usize,
}

fn main() -> Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    let measure = Duration::from_secs(
        std::env::var("K3RS_BENCH_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if full { 10 } else { 2 }),
    );
    let settings = Settings {
        full,
        measure,
        join_objects: if full { 10_000 } else { 500 },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(run(&settings))
}

async fn run(settings: &Settings) -> Result<()> {
    println!(
        "ha bench: 3 k3rs servers on {K3RS_SUBNET}.x vs 3 etcd members on {ETCD_SUBNET}.x, \
         {WRITERS} writers, {VALUE_SIZE} B values, {:?} per load run (load average {})",
        settings.measure,
        server::load_average()
    );
    if !settings.full {
        println!(
            "(smoke run without --bench: short load, {} objects for the join)",
            settings.join_objects
        );
    }
    let root = tempfile::Builder::new()
        .prefix("k3rs-ha-bench-")
        .tempdir()
        .context("temporary directory")?;
    // K3RS_BENCH_KEEP=1 keeps the servers' logs and data for a look afterwards.
    let (_removed_at_end, root) = if std::env::var_os("K3RS_BENCH_KEEP").is_some() {
        let kept = root.keep();
        println!("keeping {}", kept.display());
        (None, kept)
    } else {
        let path = root.path().to_path_buf();
        (Some(root), path)
    };

    // etcd first (it is quick to start), then k3rs; each runs alone while measured.
    let mut etcd = EtcdCluster::start(&root.join("etcd")).await?;
    let etcd_rate = etcd_load(&etcd, settings.measure, None).await?;
    println!("etcd:  {:.0} writes/s", etcd_rate.rate);
    let etcd_failover = etcd_failover(&mut etcd).await?;
    println!("etcd:  failover {etcd_failover:?}");
    drop(etcd);

    let mut group = K3rsGroup::start(&root.join("k3rs"), 3).await?;
    let k3rs_rate = k3rs_load(&group, settings.measure, None).await?;
    println!("k3rs:  {:.0} writes/s", k3rs_rate.rate);
    let failover = k3rs_failover(&mut group).await?;
    println!("k3rs:  failover {failover:?}");
    let agent_failover = agent_failover(&mut group, &root.join("agent")).await?;
    println!("k3rs:  agent failover through its load balancer {agent_failover:?}");
    let takeover = controller_takeover(&mut group).await?;
    println!("k3rs:  controller-manager takeover {takeover:?}");
    let join = k3rs_join(&mut group, settings.join_objects).await?;
    println!(
        "k3rs:  join of a 4th server to {} objects: voter after {join:?}",
        settings.join_objects
    );

    let ratio = k3rs_rate.rate / etcd_rate.rate.max(1e-9);
    let mut table = stats::Table::new(["", "k3rs", "etcd 3.4", "k3rs/etcd"]);
    table.row([
        "writes/s (16 writers)".to_string(),
        format!("{:.0}", k3rs_rate.rate),
        format!("{:.0}", etcd_rate.rate),
        format!("{ratio:.2}"),
    ]);
    table.row([
        "write p50 / p99".to_string(),
        format!(
            "{} / {}",
            stats::fmt_duration(k3rs_rate.p50),
            stats::fmt_duration(k3rs_rate.p99)
        ),
        format!(
            "{} / {}",
            stats::fmt_duration(etcd_rate.p50),
            stats::fmt_duration(etcd_rate.p99)
        ),
        String::new(),
    ]);
    table.row([
        "leader SIGKILL → first write".to_string(),
        format!("{} ms", failover.as_millis()),
        format!("{} ms", etcd_failover.as_millis()),
        format!(
            "{:.2}",
            failover.as_secs_f64() / etcd_failover.as_secs_f64().max(1e-9)
        ),
    ]);
    table.row([
        "agent's server SIGKILL → next request via LB".to_string(),
        format!("{} ms", agent_failover.as_millis()),
        String::new(),
        String::new(),
    ]);
    table.row([
        "controller leader SIGKILL → next RS reconcile".to_string(),
        format!("{} ms", takeover.as_millis()),
        String::new(),
        String::new(),
    ]);
    table.row([
        format!("join ({} objects) → voter", settings.join_objects),
        format!("{} ms", join.as_millis()),
        String::new(),
        String::new(),
    ]);
    println!("{}", table.render());
    let goals = [
        ("write_ratio_16 ≥ 1.0", ratio >= 1.0),
        (
            "failover_ms ≤ 2000",
            failover <= Duration::from_millis(2000),
        ),
        ("failover_ms ≤ etcd_failover_ms", failover <= etcd_failover),
        ("join_ms ≤ 5000", join <= Duration::from_millis(5000)),
        (
            "agent_failover_ms ≤ 3000",
            agent_failover <= Duration::from_millis(3000),
        ),
        (
            "controller_takeover_ms ≤ 17000",
            takeover <= Duration::from_millis(17000),
        ),
    ];
    for (goal, met) in goals {
        println!("goal {goal}: {}", if met { "met" } else { "NOT met" });
    }
    println!(
        "RESULT ha write_ratio_16={ratio:.2} failover_ms={} etcd_failover_ms={} join_ms={} \
         agent_failover_ms={} controller_takeover_ms={}",
        failover.as_millis(),
        etcd_failover.as_millis(),
        join.as_millis(),
        agent_failover.as_millis(),
        takeover.as_millis()
    );
    Ok(())
}

/// What a load run measured.
struct LoadReport {
    rate: f64,
    p50: Duration,
    p99: Duration,
}

/// A failover in progress: writers skip `dead` and report the first success of a write
/// started after `killed_at`.
#[derive(Default)]
struct Failover {
    dead: AtomicUsize,
    killed_at: std::sync::Mutex<Option<Instant>>,
    first_success: std::sync::Mutex<Option<Instant>>,
}

impl Failover {
    fn new() -> Arc<Failover> {
        Arc::new(Failover {
            dead: AtomicUsize::new(usize::MAX),
            ..Default::default()
        })
    }

    fn note_success(&self, started: Instant) {
        let killed = *self.killed_at.lock().unwrap_or_else(|e| e.into_inner());
        if killed.is_some_and(|k| started >= k) {
            let mut first = self.first_success.lock().unwrap_or_else(|e| e.into_inner());
            if first.is_none() {
                *first = Some(Instant::now());
            }
        }
    }

    fn target(&self, writer: usize, n: usize, members: usize) -> usize {
        let mut target = (writer + n) % members;
        if target == self.dead.load(Ordering::SeqCst) {
            target = (target + 1) % members;
        }
        target
    }

    /// Kills with `kill`, then waits (up to 30 s) for the first write after it.
    async fn run(&self, victim: usize, kill: impl FnOnce()) -> Result<Duration> {
        self.dead.store(victim, Ordering::SeqCst);
        let killed = Instant::now();
        *self.killed_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(killed);
        kill();
        let deadline = killed + Duration::from_secs(30);
        loop {
            if let Some(first) = *self.first_success.lock().unwrap_or_else(|e| e.into_inner()) {
                return Ok(first.duration_since(killed));
            }
            if Instant::now() > deadline {
                bail!("no write succeeded within 30 s of the kill");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

// ------------------------------------------------------------------ k3rs

struct K3rsMember {
    name: String,
    ip: String,
    dir: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
}

impl K3rsMember {
    fn spawn(&mut self) -> Result<()> {
        std::fs::create_dir_all(&self.dir).context("member directory")?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .context("log file")?;
        let mut command = Command::new(server::k3rs_bin());
        command
            .arg("server")
            .arg("--disable-agent")
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--bind-address", &self.ip, "--advertise-address", &self.ip])
            .args(["--node-name", &self.name])
            .arg("--write-kubeconfig")
            .arg(self.dir.join("kc.yaml"))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("log")?)
            .stderr(log);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("K3RS_") {
                command.env_remove(name);
            }
        }
        self.child = Some(command.spawn().context("starting k3rs")?);
        Ok(())
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    async fn client(&self) -> Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.dir.join("kc.yaml"))
            .context("reading the kubeconfig")?;
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .context("kubeconfig")?;
        config.connect_timeout = Some(Duration::from_secs(1));
        config.read_timeout = Some(Duration::from_secs(10));
        kube::Client::try_from(config).context("client")
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait().context("checking the server")?
            {
                bail!("{} exited ({status}):\n{}", self.name, self.log_tail());
            }
            if self.dir.join("kc.yaml").exists()
                && let Ok(client) = self.client().await
            {
                let request = http::Request::get("/readyz").body(Vec::new())?;
                if client.request_text(request).await.is_ok() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "{} not ready in {timeout:?}:\n{}",
                    self.name,
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for K3rsMember {
    fn drop(&mut self) {
        self.kill();
    }
}

struct K3rsGroup {
    root: PathBuf,
    token: String,
    members: Vec<K3rsMember>,
    clients: Vec<kube::Client>,
}

impl K3rsGroup {
    async fn start(root: &std::path::Path, n: usize) -> Result<K3rsGroup> {
        let mut group = K3rsGroup {
            root: root.to_path_buf(),
            token: String::new(),
            members: Vec::new(),
            clients: Vec::new(),
        };
        for i in 1..=n {
            group.add_member(i).await?;
        }
        group.wait_voters(n, Duration::from_secs(60)).await?;
        Ok(group)
    }

    async fn add_member(&mut self, i: usize) -> Result<()> {
        let args = if i == 1 {
            vec![
                "--cluster-init".to_string(),
                "--token".into(),
                "ha-bench".into(),
            ]
        } else {
            vec![
                "--server".to_string(),
                format!("https://{K3RS_SUBNET}.1:6443"),
                "--token".into(),
                self.token.clone(),
            ]
        };
        let mut member = K3rsMember {
            name: format!("server-{i}"),
            ip: format!("{K3RS_SUBNET}.{i}"),
            dir: self.root.join(format!("server-{i}")),
            child: None,
            args,
        };
        member.spawn()?;
        member.wait_ready(Duration::from_secs(120)).await?;
        if i == 1 {
            self.token = std::fs::read_to_string(member.dir.join("data/server/token"))
                .context("reading the token")?
                .trim()
                .to_string();
        }
        self.clients.push(member.client().await?);
        self.members.push(member);
        Ok(())
    }

    async fn members(&self, via: usize) -> Result<serde_json::Value> {
        let request = http::Request::get("/v1-k3rs/members").body(Vec::new())?;
        let text = self.clients[via].request_text(request).await?;
        Ok(serde_json::from_str(&text)?)
    }

    async fn wait_voters(&self, n: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let voters = self
                .members(0)
                .await
                .ok()
                .and_then(|v| {
                    v["members"]
                        .as_array()
                        .map(|m| m.iter().filter(|m| m["role"] == "voter").count())
                })
                .unwrap_or(0);
            if voters >= n {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{voters} of {n} voters after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn leader(&self) -> Result<usize> {
        for via in 0..self.members.len() {
            if self.members[via].child.is_none() {
                continue;
            }
            let list = self.members(via).await?;
            if let Some(leader) = list["members"]
                .as_array()
                .and_then(|m| m.iter().find(|m| m["isLeader"] == true))
                && let Some(index) = self
                    .members
                    .iter()
                    .position(|m| leader["name"] == m.name.as_str())
            {
                return Ok(index);
            }
        }
        bail!("no k3rs leader")
    }
}

fn config_map(name: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_string());
    cm.data = Some([("v".to_string(), "x".repeat(VALUE_SIZE))].into());
    cm
}

/// 16 writers creating ConfigMaps round-robin over the members for `duration` (or until
/// `stop`), each write timed.
async fn k3rs_load(
    group: &K3rsGroup,
    duration: Duration,
    failover: Option<(Arc<Failover>, Arc<AtomicBool>)>,
) -> Result<LoadReport> {
    let clients = group.clients.clone();
    run_load(clients.len(), duration, failover, move |target, name| {
        let api: Api<ConfigMap> = Api::namespaced(clients[target].clone(), "default");
        async move {
            api.create(&PostParams::default(), &config_map(&name))
                .await
                .is_ok()
        }
    })
    .await
}

/// 16 writers, each writing fresh names round-robin over `members` with `write(member,
/// name)` for `duration` (or, in a failover run, until told to stop, skipping the dead
/// member and reporting the first success after the kill), every write timed.
async fn run_load<W, F>(
    members: usize,
    duration: Duration,
    failover: Option<(Arc<Failover>, Arc<AtomicBool>)>,
    write: W,
) -> Result<LoadReport>
where
    W: Fn(usize, String) -> F + Clone + Send + 'static,
    F: std::future::Future<Output = bool> + Send,
{
    static RUN: AtomicU64 = AtomicU64::new(0);
    let run = RUN.fetch_add(1, Ordering::SeqCst);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let (write, failover) = (write.clone(), failover.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = stats::Latencies::new();
            let mut n = 0usize;
            loop {
                match &failover {
                    Some((_, stop)) if stop.load(Ordering::SeqCst) => break,
                    None if started.elapsed() >= duration => break,
                    _ => {}
                }
                let target = failover.as_ref().map_or((writer + n) % members, |(f, _)| {
                    f.target(writer, n, members)
                });
                n += 1;
                let t = Instant::now();
                let written = tokio::time::timeout(
                    Duration::from_secs(10),
                    write(target, format!("bench-{run}-{writer}-{n}")),
                )
                .await;
                if matches!(written, Ok(true)) {
                    latencies.record(t.elapsed());
                    if let Some((f, _)) = &failover {
                        f.note_success(t);
                    }
                } else {
                    if failover.is_none() {
                        eprintln!("a write failed during the load run");
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            latencies
        }));
    }
    let mut all = stats::Latencies::new();
    for task in tasks {
        all.merge(task.await.context("writer")?);
    }
    let summary = all.summary();
    Ok(LoadReport {
        rate: all.len() as f64 / started.elapsed().as_secs_f64(),
        p50: summary.p50,
        p99: summary.p99,
    })
}

async fn k3rs_failover(group: &mut K3rsGroup) -> Result<Duration> {
    let leader = group.leader().await?;
    let failover = Failover::new();
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let clients = K3rsGroup {
            root: group.root.clone(),
            token: group.token.clone(),
            members: Vec::new(),
            clients: group.clients.clone(),
        };
        let (failover, stop) = (failover.clone(), stop.clone());
        tokio::spawn(
            async move { k3rs_load(&clients, Duration::MAX, Some((failover, stop))).await },
        )
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let member = &mut group.members[leader];
    let took = failover.run(leader, || member.kill()).await;
    stop.store(true, Ordering::SeqCst);
    load.await.context("load")??;
    let took = took?;
    // Back to three members for the join phase.
    group.members[leader].spawn()?;
    group.members[leader]
        .wait_ready(Duration::from_secs(120))
        .await?;
    group.clients[leader] = group.members[leader].client().await?;
    group.wait_voters(3, Duration::from_secs(60)).await?;
    Ok(took)
}

impl K3rsGroup {
    /// Starts member `index` again after a kill and waits until the group has all its
    /// voters back.
    async fn restart(&mut self, index: usize) -> Result<()> {
        self.members[index].spawn()?;
        self.members[index]
            .wait_ready(Duration::from_secs(120))
            .await?;
        self.clients[index] = self.members[index].client().await?;
        self.wait_voters(self.members.len(), Duration::from_secs(60))
            .await
    }

    /// The member whose address is `address` (`ip:port`).
    fn member_at(&self, address: &str) -> Option<usize> {
        self.members
            .iter()
            .position(|m| address.starts_with(&format!("{}:", m.ip)))
    }
}

/// The agent's side: its API server load balancer (the agent's own code, on an ephemeral
/// port) in front of server 1, learning the others from `default/kubernetes` as an agent
/// does; a list through it every 10 ms; SIGKILL of the server it uses; the time until the
/// first request started after the kill succeeds.
async fn agent_failover(group: &mut K3rsGroup, dir: &std::path::Path) -> Result<Duration> {
    use k3rs::agent::loadbalancer::{LoadBalancer, LoadBalancerConfig, watch_endpoints};
    let lb = LoadBalancer::start(LoadBalancerConfig {
        server_url: format!("https://{K3RS_SUBNET}.1:6443"),
        preferred: None,
        port: 0,
        data_dir: dir.to_path_buf(),
    })
    .await
    .context("starting the load balancer")?;
    let kubeconfig = kube::config::Kubeconfig::read_from(group.members[0].dir.join("kc.yaml"))
        .context("reading the kubeconfig")?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("kubeconfig")?;
    config.cluster_url = lb.local_url().parse().context("load balancer URL")?;
    config.connect_timeout = Some(Duration::from_secs(1));
    config.read_timeout = Some(Duration::from_secs(5));
    let client = kube::Client::try_from(config).context("client")?;
    let watcher = tokio::spawn(watch_endpoints(client.clone(), lb.updater()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while lb.servers().len() < group.members.len() {
        if Instant::now() > deadline {
            bail!("the load balancer knows only {:?}", lb.servers());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let probe = ListParams::default().limit(1);
    api.list(&probe)
        .await
        .context("a request through the load balancer")?;
    let current = lb.current().context("the load balancer used no server")?;
    let index = group
        .member_at(&current)
        .with_context(|| format!("{current} is no member"))?;
    let killed_at = Instant::now();
    group.members[index].kill();
    let took = loop {
        if api.list(&probe).await.is_ok() {
            break killed_at.elapsed();
        }
        if killed_at.elapsed() > Duration::from_secs(60) {
            bail!("no request through the load balancer succeeded within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!(
        "k3rs:  the load balancer moved from {current} to {:?}",
        lb.current()
    );
    watcher.abort();
    group.restart(index).await?;
    Ok(took)
}

/// The controller-manager's Lease holder is killed; a ReplicaSet created right after
/// through another server; the time from the kill until its pod exists (the next
/// ReplicaSet reconcile, on the new leader).
async fn controller_takeover(group: &mut K3rsGroup) -> Result<Duration> {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Pod;
    let holder = Api::<Lease>::namespaced(group.clients[0].clone(), "kube-system")
        .get("kube-controller-manager")
        .await
        .context("the kube-controller-manager Lease")?
        .spec
        .and_then(|s| s.holder_identity)
        .context("the kube-controller-manager Lease has no holder")?;
    let index = group
        .members
        .iter()
        .position(|m| holder.starts_with(&format!("{}_", m.name)))
        .with_context(|| format!("holder {holder} is no member"))?;
    let via = (index + 1) % group.members.len();
    let client = group.clients[via].clone();
    let rs: ReplicaSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "takeover"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "takeover"}},
            "template": {
                "metadata": {"labels": {"app": "takeover"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}
            }
        }
    }))?;
    let killed_at = Instant::now();
    group.members[index].kill();
    // When the lease moves, to tell the lease wait from the new leader's start-up.
    let lease_moved = {
        let leases = Api::<Lease>::namespaced(client.clone(), "kube-system");
        let holder = holder.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(lease) = leases.get("kube-controller-manager").await
                    && let Some(now) = lease.spec.and_then(|s| s.holder_identity)
                    && now != holder
                {
                    return Some((killed_at.elapsed(), now));
                }
                if killed_at.elapsed() > Duration::from_secs(90) {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    loop {
        match replica_sets.create(&PostParams::default(), &rs).await {
            Ok(_) => {
                println!(
                    "k3rs:  takeover: ReplicaSet created {:?} after the kill",
                    killed_at.elapsed()
                );
                break;
            }
            // The killed server may have led the raft group too: writes wait for a leader.
            Err(_) if killed_at.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e).context("creating the ReplicaSet"),
        }
    }
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let selector = ListParams::default().labels("app=takeover");
    let took = loop {
        if let Ok(list) = pods.list(&selector).await
            && !list.items.is_empty()
        {
            break killed_at.elapsed();
        }
        if killed_at.elapsed() > Duration::from_secs(90) {
            bail!("no ReplicaSet reconcile within 90 s of the kill");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if let Ok(Some((after, holder))) = lease_moved.await {
        println!("k3rs:  takeover: lease taken by {holder} {after:?} after the kill");
    }
    let _ = replica_sets.delete("takeover", &Default::default()).await;
    group.restart(index).await?;
    Ok(took)
}

async fn k3rs_join(group: &mut K3rsGroup, objects: usize) -> Result<Duration> {
    // Fill the store up to `objects` ConfigMaps.
    let have = Api::<ConfigMap>::namespaced(group.clients[0].clone(), "default")
        .list(&Default::default())
        .await?
        .items
        .len();
    let missing = objects.saturating_sub(have);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let (clients, next) = (group.clients.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= missing {
                    return Ok::<(), anyhow::Error>(());
                }
                let api: Api<ConfigMap> =
                    Api::namespaced(clients[(writer + n) % clients.len()].clone(), "default");
                api.create(&PostParams::default(), &config_map(&format!("fill-{n}")))
                    .await
                    .context("filling the store")?;
            }
        }));
    }
    for task in tasks {
        task.await.context("writer")??;
    }
    let started = Instant::now();
    group.add_member(4).await?;
    group.wait_voters(4, Duration::from_secs(120)).await?;
    Ok(started.elapsed())
}

// ------------------------------------------------------------------ etcd

struct EtcdCluster {
    children: Vec<Option<Child>>,
    channels: Vec<Channel>,
}

impl EtcdCluster {
    async fn start(root: &std::path::Path) -> Result<EtcdCluster> {
        if !std::path::Path::new(etcd::ETCD_BINARY).exists() {
            bail!(
                "{} not found; this bench compares with etcd 3.4: apt-get install -y etcd-server",
                etcd::ETCD_BINARY
            );
        }
        let initial: Vec<String> = (1..=3)
            .map(|i| format!("e{i}=http://{ETCD_SUBNET}.{i}:2380"))
            .collect();
        let mut children = Vec::new();
        let mut channels = Vec::new();
        for i in 1..=3 {
            let dir = root.join(format!("e{i}"));
            std::fs::create_dir_all(&dir).context("etcd dir")?;
            let log = std::fs::File::create(dir.join("etcd.log")).context("etcd log")?;
            let ip = format!("{ETCD_SUBNET}.{i}");
            let child = Command::new(etcd::ETCD_BINARY)
                .arg(format!("--name=e{i}"))
                .arg(format!("--data-dir={}", dir.join("data").display()))
                .arg(format!("--listen-client-urls=http://{ip}:2379"))
                .arg(format!("--advertise-client-urls=http://{ip}:2379"))
                .arg(format!("--listen-peer-urls=http://{ip}:2380"))
                .arg(format!("--initial-advertise-peer-urls=http://{ip}:2380"))
                .arg(format!("--initial-cluster={}", initial.join(",")))
                .arg("--initial-cluster-state=new")
                .arg("--log-level=warn")
                .arg("--logger=zap")
                .stdin(Stdio::null())
                .stdout(log.try_clone().context("log")?)
                .stderr(log)
                .spawn()
                .context("starting etcd")?;
            children.push(Some(child));
            channels.push(
                Endpoint::from_shared(format!("http://{ip}:2379"))?
                    .connect_timeout(Duration::from_millis(500))
                    .timeout(Duration::from_secs(10))
                    .tcp_nodelay(true)
                    .connect_lazy(),
            );
        }
        let cluster = EtcdCluster { children, channels };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let client = etcd::KvClient::new(cluster.channels[0].clone());
            if client.put(b"/ready", b"1".to_vec()).await.is_ok() {
                return Ok(cluster);
            }
            if Instant::now() > deadline {
                bail!("the etcd cluster did not answer in 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The index of the leader, from `Maintenance/Status` of a live member.
    async fn leader(&self) -> Result<usize> {
        let mut ids = Vec::new();
        let mut leader = 0;
        for channel in &self.channels {
            let status = status(channel.clone()).await?;
            ids.push(status.header.map_or(0, |h| h.member_id));
            leader = status.leader;
        }
        ids.iter()
            .position(|id| *id == leader)
            .context("no etcd member is the leader")
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[derive(Clone, PartialEq, prost::Message)]
struct StatusRequest {}

#[derive(Clone, PartialEq, prost::Message)]
struct StatusResponse {
    #[prost(message, optional, tag = "1")]
    header: Option<etcd::pb::ResponseHeader>,
    #[prost(string, tag = "2")]
    version: String,
    #[prost(int64, tag = "3")]
    db_size: i64,
    #[prost(uint64, tag = "4")]
    leader: u64,
}

async fn status(channel: Channel) -> Result<StatusResponse> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.context("etcd not ready")?;
    let codec = tonic_prost::ProstCodec::<StatusRequest, StatusResponse>::default();
    let response = grpc
        .unary(
            tonic::Request::new(StatusRequest {}),
            PathAndQuery::from_static("/etcdserverpb.Maintenance/Status"),
            codec,
        )
        .await
        .context("etcd Status")?;
    Ok(response.into_inner())
}

async fn etcd_load(
    cluster: &EtcdCluster,
    duration: Duration,
    failover: Option<(Arc<Failover>, Arc<AtomicBool>)>,
) -> Result<LoadReport> {
    let clients: Vec<etcd::KvClient> = cluster
        .channels
        .iter()
        .map(|c| etcd::KvClient::new(c.clone()))
        .collect();
    let value = vec![b'x'; VALUE_SIZE];
    run_load(clients.len(), duration, failover, move |target, name| {
        let (client, value) = (clients[target].clone(), value.clone());
        async move {
            let key = format!("/registry/configmaps/default/{name}");
            client.put(key.as_bytes(), value).await.is_ok()
        }
    })
    .await
}

async fn etcd_failover(cluster: &mut EtcdCluster) -> Result<Duration> {
    let leader = cluster.leader().await?;
    let failover = Failover::new();
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let view = EtcdCluster {
            children: Vec::new(),
            channels: cluster.channels.clone(),
        };
        let (failover, stop) = (failover.clone(), stop.clone());
        tokio::spawn(async move { etcd_load(&view, Duration::MAX, Some((failover, stop))).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let child = &mut cluster.children[leader];
    let took = failover
        .run(leader, || {
            if let Some(mut child) = child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        })
        .await;
    stop.store(true, Ordering::SeqCst);
    load.await.context("load")??;
    took
}
