//! `cargo bench --bench api`: the k3rs API server measured end to end over HTTPS with
//! kube-rs clients, beside etcd 3.4's raw put rate for the same payloads.
//!
//! Owns: the API benchmark and its report. It runs the real binary cargo built for
//! this bench (`k3rs server --disable-agent`, bench profile = release settings) on
//! free loopback ports with temporary data directories, and measures
//!
//! * **ready time**: wall time from spawning the process to the first `200` from
//!   `/readyz`, polled every millisecond with a raw TLS client prepared before the
//!   spawn (no kubeconfig, no client construction in the measured interval); the
//!   median of several fresh starts on fresh data directories;
//! * **creates**: 16 concurrent clients, each with its own `kube::Client` (so its own
//!   connections, as 16 real clients would have), creating ConfigMaps that carry 1 KiB
//!   of data in one namespace for 20 s after a 1 s warm-up: rate, p50/p99/max;
//! * **etcd puts**: the same 16-client load as raw `KV/Put`s against etcd 3.4 (one
//!   HTTP/2 connection per client, default fsync), each value the JSON of the same
//!   ConfigMap under the key kube-apiserver would use (reuses `support/etcd.rs`);
//! * **GET**: 16 clients fetching random existing ConfigMaps for 5 s (etcd: random
//!   single-key ranges, for reference);
//! * **LIST** of 10,000 ConfigMaps: one unpaged LIST and a kubectl-like `limit=500`
//!   paged LIST, median of several (etcd: one range over the same 10,000 values);
//! * **watch fan-out**: 500 concurrent watches (`Api::watch` from the current
//!   resourceVersion) on one namespace's ConfigMaps, then 200 creates one after
//!   another; for every watcher and event, create call start → event received;
//! * **memory**: in a fresh server, VmRSS after start and after creating 10,000 small
//!   Pods (one nginx container with a port and resources, labels; nothing runs them),
//!   once for the default server (the figure in the RESULT line) and once with
//!   `--disable-scheduler --disable-controller-manager` (the API server alone). Pod
//!   creation stops early, and the report says so, if the server passes 4 GiB of RSS
//!   or 180 s, so a runaway server cannot exhaust the machine;
//! * **CPU**: for each load run, the cores used by the server, by this process (the
//!   clients) and by everything else on the machine, from `/proc`.
//!
//! The last line of output is machine-readable:
//! `RESULT api creates_per_s=… create_ratio_vs_etcd_put=… create_p99_ms=… get_p99_ms=…
//! rss_per_pod_bytes=… ready_ms=…`.
//!
//! The write runs alternate etcd and k3rs over 3 rounds, each on a fresh server, and
//! keep each side's median round (by throughput), so that a burst of background load
//! on the shared machine does not land on one side only; the read phases run on the
//! last round's servers.
//!
//! Environment: `K3RS_BENCH_SECS` (seconds of each create run, default 20; the GET
//! run lasts the smaller of this and 5 s), `K3RS_BENCH_ROUNDS` (alternating write
//! rounds, default 3), `K3RS_BENCH_SERVER_ARGS` (extra flags for every k3rs server,
//! e.g. `--disable-scheduler --disable-controller-manager` to measure the API server
//! alone; for diagnostics, the goals refer to the default server). Without `--bench` (e.g. `cargo test --benches`) everything
//! runs briefly, one round, as a smoke test.
//!
//! Everything runs on one machine: the clients share the CPU with the server (and
//! with etcd in the etcd phase), which the report states with the CPU count.

#[path = "support/etcd.rs"]
mod etcd;
#[path = "support/server.rs"]
mod server;
#[path = "support/stats.rs"]
mod stats;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures_util::StreamExt;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use rustls::pki_types::ServerName;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Endpoint;

use etcd::{EtcdServer, KvClient};
use server::k3rs_bin;
use stats::{
    Latencies, Summary, Table, fmt_bytes, fmt_duration, fmt_rate, fmt_ratio, fmt_thousands,
};

/// Concurrent clients in the create and GET runs (and in the fill phases).
const CLIENTS: usize = 16;
/// Bytes of data in every ConfigMap (one key, `payload`).
const PAYLOAD_BYTES: usize = 1024;
/// Page size of the paged LIST (kubectl's default chunk size).
const PAGE_LIMIT: usize = 500;
/// Namespaces of the phases (each starts empty).
const NS_CREATE: &str = "bench-create";
const NS_LIST: &str = "bench-list";
const NS_WATCH: &str = "bench-watch";
const NS_PODS: &str = "bench-pods";
/// Server-side timeout requested for every watch (longer than the watch phase).
const WATCH_TIMEOUT_SECS: u32 = 290;
/// How long a server may take to become ready before the bench gives up.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The goals from the issue; the report says which are met.
const GOAL_CREATE_RATIO: f64 = 1.0;
const GOAL_CREATE_P99_MS: f64 = 25.0;
const GOAL_GET_P99_MS: f64 = 5.0;
const GOAL_RSS_PER_POD: f64 = 8192.0;
const GOAL_READY_MS: f64 = 500.0;

/// How long and how much each phase runs.
#[derive(Clone, Debug)]
struct Settings {
    /// False when run without `--bench` (a quick smoke run).
    full: bool,
    warmup: Duration,
    measure: Duration,
    get_measure: Duration,
    list_objects: usize,
    list_runs: usize,
    watchers: usize,
    watch_events: usize,
    pods: usize,
    /// Safety limits of the pod phase (see `memory_phase`).
    rss_limit: u64,
    pods_time_limit: Duration,
    ready_starts: usize,
    /// Alternating etcd/k3rs rounds of the write runs (median kept).
    rounds: usize,
    /// Extra flags for every k3rs server, `K3RS_BENCH_SERVER_ARGS` (diagnostics).
    server_args: Vec<String>,
}

impl Settings {
    fn from_env(full: bool) -> Result<Settings> {
        let mut settings = if full {
            Settings {
                full,
                warmup: Duration::from_secs(1),
                measure: Duration::from_secs(20),
                get_measure: Duration::from_secs(5),
                list_objects: 10_000,
                list_runs: 5,
                watchers: 500,
                watch_events: 200,
                pods: 10_000,
                rss_limit: 4 << 30,
                pods_time_limit: Duration::from_secs(180),
                ready_starts: 5,
                rounds: 3,
                server_args: Vec::new(),
            }
        } else {
            Settings {
                full,
                warmup: Duration::from_millis(200),
                measure: Duration::from_secs(1),
                get_measure: Duration::from_millis(500),
                list_objects: 500,
                list_runs: 2,
                watchers: 20,
                watch_events: 20,
                pods: 500,
                rss_limit: 2 << 30,
                pods_time_limit: Duration::from_secs(60),
                ready_starts: 2,
                rounds: 1,
                server_args: Vec::new(),
            }
        };
        if let Some(secs) = stats::env_positive("K3RS_BENCH_SECS")? {
            settings.measure = Duration::from_secs(secs);
            settings.get_measure = settings.get_measure.min(settings.measure);
        }
        if let Some(rounds) = stats::env_positive("K3RS_BENCH_ROUNDS")? {
            settings.rounds = usize::try_from(rounds).context("K3RS_BENCH_ROUNDS is too big")?;
        }
        match std::env::var("K3RS_BENCH_SERVER_ARGS") {
            Ok(text) => settings.server_args = text.split_whitespace().map(str::to_owned).collect(),
            Err(std::env::VarError::NotPresent) => {}
            Err(e) => return Err(e).context("reading K3RS_BENCH_SERVER_ARGS"),
        }
        Ok(settings)
    }
}

fn main() -> Result<()> {
    // cargo passes `--bench` (plus any filter); other arguments are ignored.
    let full = std::env::args().any(|arg| arg == "--bench");
    let settings = Settings::from_env(full)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(run(settings))
}

async fn run(settings: Settings) -> Result<()> {
    if !settings.full {
        println!("(no --bench argument: smoke run with tiny sizes; use `cargo bench --bench api`)");
    }
    println!(
        "api benchmark: {} ({}), {CLIENTS} clients, {PAYLOAD_BYTES} B ConfigMap payloads, \
         create runs of {:?} after {:?} warm-up, {} CPUs shared by clients and servers",
        k3rs_bin().display(),
        k3rs_version(),
        settings.measure,
        settings.warmup,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    if !settings.server_args.is_empty() {
        println!(
            "K3RS_BENCH_SERVER_ARGS: every k3rs server also gets `{}` (not the default server)",
            settings.server_args.join(" ")
        );
    }
    println!("load average before: {}", load_average());
    let tls = ProbeTls::new()?;

    println!("k3rs: {} fresh starts …", settings.ready_starts);
    let ready = measure_ready(&settings, &tls).await?;

    // The machine is shared and noisy: alternate etcd and k3rs write runs over
    // several rounds, each on a fresh server, and keep each side's median run. The
    // last round's servers stay up for the read phases.
    let mut etcd_runs = Vec::new();
    let mut k3rs_runs = Vec::new();
    let mut last = None;
    for round in 1..=settings.rounds {
        println!(
            "round {round}/{}: etcd puts, then k3rs creates …",
            settings.rounds
        );
        let etcd = etcd_puts(&settings).await?;
        let k3rs = k3rs_creates(&settings, &tls).await?;
        if round < settings.rounds {
            etcd_runs.push(etcd.measured);
            k3rs_runs.push(k3rs.measured);
            k3rs.server.stop().await;
        } else {
            last = Some((etcd, k3rs));
        }
    }
    let (last_etcd, last_k3rs) = last.expect("at least one round (rounds ≥ 1)");
    println!("k3rs: GETs, LIST and watch fan-out …");
    let api = api_reads(&settings, last_k3rs, k3rs_runs).await?;
    println!("etcd: GETs and range …");
    let etcd = etcd_reads(&settings, last_etcd, etcd_runs).await?;

    println!(
        "k3rs: memory with {} pods (default server) …",
        fmt_thousands(settings.pods as u64)
    );
    let memory = memory_phase(&settings, &tls, &[]).await?;
    println!(
        "k3rs: memory with {} pods ({}) …",
        fmt_thousands(settings.pods as u64),
        APISERVER_ONLY.join(" ")
    );
    let memory_alone = memory_phase(&settings, &tls, APISERVER_ONLY).await?;

    let report = Report {
        settings: &settings,
        ready: &ready,
        etcd: &etcd,
        api: &api,
        memory: &memory,
        memory_alone: &memory_alone,
    };
    report.print();
    Ok(())
}

// ---------------------------------------------------------------------------------
// The k3rs server process
// ---------------------------------------------------------------------------------

fn k3rs_version() -> String {
    match Command::new(k3rs_bin()).arg("--version").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_owned(),
        Ok(out) => format!("--version failed: {}", out.status),
        Err(e) => format!("--version failed: {e}"),
    }
}

/// The shared bench server (`support/server.rs`) plus the time it took to answer
/// `/readyz`; derefs to the server.
struct K3rsServer {
    server: server::K3rsServer,
    /// Time from spawn to the first `200` from `/readyz`.
    ready_in: Duration,
}

impl std::ops::Deref for K3rsServer {
    type Target = server::K3rsServer;
    fn deref(&self) -> &server::K3rsServer {
        &self.server
    }
}

impl K3rsServer {
    /// Starts a server in a fresh temporary directory and waits for `/readyz`.
    async fn start(settings: &Settings, tls: &ProbeTls) -> Result<K3rsServer> {
        Self::start_with(settings, tls, &[]).await
    }

    /// [`Self::start`] with `extra` flags after the standard ones.
    /// `settings.server_args` come last; `extra` flags already among them are skipped.
    async fn start_with(settings: &Settings, tls: &ProbeTls, extra: &[&str]) -> Result<K3rsServer> {
        let args: Vec<&str> = extra
            .iter()
            .copied()
            .filter(|flag| !settings.server_args.iter().any(|a| a == flag))
            .chain(settings.server_args.iter().map(String::as_str))
            .collect();
        let spawned = Instant::now();
        let mut server = server::K3rsServer::spawn("k3rs-api-bench-", &args)?;
        let ready_in = wait_ready(&mut server, tls, spawned).await?;
        server.wait_for_kubeconfig().await?;
        Ok(K3rsServer { server, ready_in })
    }

    async fn stop(self) {
        self.server.stop().await
    }
}

/// Polls `/readyz` (a new TLS connection each time, 1 ms apart) until it answers
/// `200`; returns the time since `spawned`.
async fn wait_ready(
    server: &mut server::K3rsServer,
    tls: &ProbeTls,
    spawned: Instant,
) -> Result<Duration> {
    loop {
        server
            .check_running()
            .context("k3rs server failed during startup")?;
        let last = match tokio::time::timeout(Duration::from_secs(2), tls.readyz(server.port)).await
        {
            Ok(Ok(200)) => return Ok(spawned.elapsed()),
            Ok(Ok(code)) => format!("/readyz answered {code}"),
            Ok(Err(e)) => format!("{e:#}"),
            Err(_) => "/readyz did not answer within 2 s".to_owned(),
        };
        if spawned.elapsed() > READY_TIMEOUT {
            bail!(
                "k3rs server not ready within {READY_TIMEOUT:?} (last: {last}); {} ends with:\n{}",
                server.log_path.display(),
                server.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A raw TLS client for `/readyz`, built before the server exists. It cannot know the
/// server's (not yet generated) CA, so it accepts any certificate: it only times
/// readiness and sends nothing secret.
struct ProbeTls {
    connector: tokio_rustls::TlsConnector,
}

impl ProbeTls {
    fn new() -> Result<ProbeTls> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("choosing TLS versions for the readiness probe")?
            .dangerous()
            .with_custom_certificate_verifier(k3rs::pki::insecure::AcceptAnyServerCertificate::new(
                provider,
            ))
            .with_no_client_auth();
        Ok(ProbeTls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// One `GET /readyz` on a new connection; returns the HTTP status code.
    async fn readyz(&self, port: u16) -> Result<u16> {
        let tcp = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .context("connecting")?;
        tcp.set_nodelay(true).context("setting TCP_NODELAY")?;
        let name = ServerName::from(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let mut stream = self
            .connector
            .connect(name, tcp)
            .await
            .context("TLS handshake")?;
        stream
            .write_all(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .context("sending GET /readyz")?;
        let mut head = Vec::with_capacity(256);
        let mut buf = [0u8; 256];
        while !head.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut buf).await.context("reading the answer")?;
            ensure!(n > 0, "connection closed before a status line");
            head.extend_from_slice(&buf[..n]);
            ensure!(head.len() < 16 * 1024, "no status line in 16 KiB");
        }
        let text = String::from_utf8_lossy(&head);
        let status_line = text.lines().next().unwrap_or("");
        status_line
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .with_context(|| format!("unexpected status line {status_line:?}"))
    }
}

// ---------------------------------------------------------------------------------
// CPU accounting (who used the 2 cores during a run)
// ---------------------------------------------------------------------------------

/// Clock ticks per second of `/proc` CPU times (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// CPU times at one instant: a server process, this bench process, the machine.
#[derive(Clone, Copy, Debug)]
struct CpuSnapshot {
    at: Instant,
    server_ticks: Option<u64>,
    bench_ticks: u64,
    busy_ticks: u64,
}

impl CpuSnapshot {
    /// Reads `/proc`; `server` is the pid of the server under load, if known.
    fn take(server: Option<u32>) -> Result<CpuSnapshot> {
        let server_ticks = match server {
            Some(pid) => Some(process_ticks(&pid.to_string())?),
            None => None,
        };
        let bench_ticks = process_ticks("self")?;
        let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        let line = stat
            .lines()
            .find(|l| l.starts_with("cpu "))
            .context("/proc/stat has no cpu line")?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|f| {
                f.parse()
                    .with_context(|| format!("bad /proc/stat line {line:?}"))
            })
            .collect::<Result<_>>()?;
        // user nice system idle iowait irq softirq steal [guest guest_nice]; guest
        // time is already counted in user and nice.
        let total: u64 = fields.iter().take(8).sum();
        let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
        Ok(CpuSnapshot {
            at: Instant::now(),
            server_ticks,
            bench_ticks,
            busy_ticks: total.saturating_sub(idle),
        })
    }

    /// Average cores busy between `self` and a later snapshot.
    fn until(&self, later: &CpuSnapshot) -> CpuUse {
        let secs = (later.at - self.at).as_secs_f64().max(1e-9);
        let cores = |a: u64, b: u64| b.saturating_sub(a) as f64 / USER_HZ / secs;
        CpuUse {
            server: match (self.server_ticks, later.server_ticks) {
                (Some(a), Some(b)) => Some(cores(a, b)),
                _ => None,
            },
            bench: cores(self.bench_ticks, later.bench_ticks),
            machine: cores(self.busy_ticks, later.busy_ticks),
        }
    }
}

/// utime + stime of `/proc/<pid>/stat`, in ticks.
fn process_ticks(pid: &str) -> Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name (field 2) is in parentheses and may contain spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .with_context(|| format!("unexpected {path}: {stat:?}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); utime and stime are fields 14 and 15.
    let tick = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("unexpected {path}: {stat:?}"))
    };
    Ok(tick(11)? + tick(12)?)
}

/// The pid of the process whose command line contains `arg` exactly.
fn find_pid_with_arg(arg: &str) -> Option<u32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    entries.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        cmdline
            .split(|b| *b == 0)
            .any(|a| a == arg.as_bytes())
            .then_some(pid)
    })
}

/// Average cores in use during one run.
#[derive(Clone, Copy, Debug, Default)]
struct CpuUse {
    /// The server under load (k3rs or etcd), if its pid was found.
    server: Option<f64>,
    /// This bench process (the clients).
    bench: f64,
    /// Every process on the machine.
    machine: f64,
}

/// Runs `run`, measuring CPU use from just before to just after it.
async fn with_cpu<T>(
    server: Option<u32>,
    run: impl Future<Output = Result<T>>,
) -> Result<(T, CpuUse)> {
    let before = CpuSnapshot::take(server)?;
    let value = run.await?;
    let after = CpuSnapshot::take(server)?;
    Ok((value, before.until(&after)))
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

// ---------------------------------------------------------------------------------
// Objects and requests
// ---------------------------------------------------------------------------------

/// A ConfigMap with one 1 KiB value.
fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([("app".to_owned(), "bench".to_owned())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "payload".to_owned(),
            "x".repeat(PAYLOAD_BYTES),
        )])),
        ..Default::default()
    }
}

/// A small, realistic Pod: one nginx container with a port and resources, labels.
fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7d4b9c8f6d"},
        },
        "spec": {
            "containers": [{
                "name": "nginx",
                "image": "nginx:1.27",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi"},
                    "limits": {"cpu": "500m", "memory": "256Mi"},
                },
            }],
        },
    }))
    .expect("the pod template is a valid Pod")
}

/// Name of the `n`-th object created by worker `w`.
fn object_name(w: usize, n: u64) -> String {
    format!("c-{w:02}-{n:07}")
}

/// The key kube-apiserver would store a ConfigMap under in etcd.
fn etcd_key(namespace: &str, name: &str) -> Vec<u8> {
    format!("/registry/configmaps/{namespace}/{name}").into_bytes()
}

async fn create_namespace(client: &kube::Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// GET `path`; the body of a `200` answer, or an error with the status and body.
async fn get_bytes(client: &kube::Client, path: &str) -> Result<bytes::Bytes> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .with_context(|| format!("building GET {path}"))?;
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .with_context(|| format!("GET {path}"))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .with_context(|| format!("reading the answer to GET {path}"))?
        .to_bytes();
    ensure!(
        status == http::StatusCode::OK,
        "GET {path}: {status}: {}",
        String::from_utf8_lossy(&body[..body.len().min(500)])
    );
    Ok(body)
}

/// What a client must parse of a list page: the continue token and the items
/// (counted, not decoded).
#[derive(serde::Deserialize)]
struct ListPage {
    #[serde(default)]
    metadata: ListPageMeta,
    #[serde(default)]
    items: Vec<serde::de::IgnoredAny>,
}

#[derive(Default, serde::Deserialize)]
struct ListPageMeta {
    #[serde(default, rename = "continue")]
    continue_token: Option<String>,
}

/// SplitMix64: a deterministic spread of `(worker, n)` over `0..bound`.
fn pick(worker: usize, n: u64, bound: u64) -> u64 {
    let mut z = (worker as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(n)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    z % bound.max(1)
}

// ---------------------------------------------------------------------------------
// Timed load (shared by k3rs and etcd)
// ---------------------------------------------------------------------------------

/// The outcome of one timed run.
struct LoadRun {
    per_second: f64,
    latency: Summary,
    /// Operations each worker completed, warm-up included (for creates: how many
    /// objects worker `w` created, `0..done[w]`).
    done: Vec<u64>,
}

/// Runs `workers` concurrent loops of `op(worker, n)` (n = 0, 1, 2, …) for
/// `warmup + measure`; only operations *started* after the warm-up are recorded, and
/// throughput is recorded operations / (last completion − end of warm-up).
async fn timed_load<F, Fut>(
    workers: usize,
    warmup: Duration,
    measure: Duration,
    op: F,
) -> Result<LoadRun>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let op = Arc::new(op);
    let begin = Instant::now();
    let measure_from = begin + warmup;
    let stop_at = measure_from + measure;
    let mut tasks = Vec::with_capacity(workers);
    for worker in 0..workers {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Latencies::with_capacity(64 * 1024);
            let mut last_done = measure_from;
            let mut n = 0u64;
            loop {
                let start = Instant::now();
                if start >= stop_at {
                    break;
                }
                op(worker, n)
                    .await
                    .with_context(|| format!("worker {worker}, operation {n}"))?;
                n += 1;
                let done = Instant::now();
                if start >= measure_from {
                    latencies.record(done - start);
                    last_done = done;
                }
            }
            anyhow::Ok((latencies, last_done, n))
        }));
    }
    let mut all = Latencies::new();
    let mut last_done = measure_from;
    let mut done = Vec::with_capacity(workers);
    for task in tasks {
        let (latencies, finished, count) = task.await.context("a worker task panicked")??;
        all.merge(latencies);
        last_done = last_done.max(finished);
        done.push(count);
    }
    let latency = all.summary();
    Ok(LoadRun {
        per_second: stats::per_second(latency.count, last_done - measure_from),
        latency,
        done,
    })
}

/// Runs `op(i)` for every `i` in `0..count`, `CLIENTS` at a time (worker `w` takes
/// `w, w + CLIENTS, …`); returns the elapsed time.
async fn fill<F, Fut>(count: usize, op: F) -> Result<Duration>
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let workers = CLIENTS.min(count.max(1));
    let mut tasks = Vec::with_capacity(workers);
    for w in 0..workers {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..count).step_by(workers) {
                op(w, i).await.with_context(|| format!("object {i}"))?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await.context("a fill task panicked")??;
    }
    Ok(start.elapsed())
}

// ---------------------------------------------------------------------------------
// Phases
// ---------------------------------------------------------------------------------

struct ReadyReport {
    samples: Vec<Duration>,
    median: Duration,
}

async fn measure_ready(settings: &Settings, tls: &ProbeTls) -> Result<ReadyReport> {
    let mut samples = Vec::with_capacity(settings.ready_starts);
    for _ in 0..settings.ready_starts {
        let server = K3rsServer::start(settings, tls).await?;
        samples.push(server.ready_in);
        server.stop().await;
    }
    Ok(ReadyReport {
        median: stats::median(&samples),
        samples,
    })
}

/// A timed run and the CPU use during it.
struct Measured {
    run: LoadRun,
    cpu: CpuUse,
}

/// The run with the median throughput, and every run's throughput in order.
fn median_run(runs: Vec<Measured>) -> (Measured, Vec<f64>) {
    let rates = runs.iter().map(|m| m.run.per_second).collect();
    let mut runs = runs;
    runs.sort_by(|a, b| a.run.per_second.total_cmp(&b.run.per_second));
    let middle = runs.len() / 2;
    (runs.swap_remove(middle), rates)
}

struct EtcdReport {
    version: String,
    puts: LoadRun,
    puts_cpu: CpuUse,
    /// Throughput of each round, in order (the median round is `puts`).
    put_rates: Vec<f64>,
    gets: LoadRun,
    gets_cpu: CpuUse,
    range: Duration,
}

/// One HTTP/2 connection per client, like the k3rs clients' own connections.
async fn etcd_clients(server: &EtcdServer, n: usize) -> Result<Vec<KvClient>> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let channel = Endpoint::from_shared(server.client_url().to_owned())
            .context("building the etcd endpoint")?
            .tcp_nodelay(true)
            .connect()
            .await
            .with_context(|| format!("connecting to etcd at {}", server.client_url()))?;
        clients.push(KvClient::new(channel));
    }
    Ok(clients)
}

/// A fresh etcd after one put run (kept for the read phases of the last round).
struct EtcdPuts {
    server: EtcdServer,
    clients: Arc<Vec<KvClient>>,
    pid: Option<u32>,
    measured: Measured,
}

async fn etcd_puts(settings: &Settings) -> Result<EtcdPuts> {
    let server = EtcdServer::start().await.context("starting etcd")?;
    let clients = Arc::new(etcd_clients(&server, CLIENTS).await?);
    let pid = find_pid_with_arg(&format!("--listen-client-urls={}", server.client_url()));
    let put_clients = clients.clone();
    let puts = timed_load(CLIENTS, settings.warmup, settings.measure, move |w, n| {
        let client = put_clients[w].clone();
        async move {
            let name = object_name(w, n);
            let value = serde_json::to_vec(&config_map(&name)).context("encoding a ConfigMap")?;
            client.put(&etcd_key(NS_CREATE, &name), value).await?;
            Ok(())
        }
    });
    let (run, cpu) = with_cpu(pid, puts).await.context("etcd puts")?;
    Ok(EtcdPuts {
        server,
        clients,
        pid,
        measured: Measured { run, cpu },
    })
}

/// Random GETs of the keys `last` put, then a range over `list_objects` keys.
async fn etcd_reads(
    settings: &Settings,
    last: EtcdPuts,
    put_runs: Vec<Measured>,
) -> Result<EtcdReport> {
    let EtcdPuts {
        server,
        clients,
        pid,
        measured: last_puts,
    } = last;
    let created = Arc::new(last_puts.run.done.clone());
    let get_clients = clients.clone();
    let gets = timed_load(
        CLIENTS,
        Duration::ZERO,
        settings.get_measure,
        move |w, n| {
            let client = get_clients[w].clone();
            let owner = pick(w, n, CLIENTS as u64) as usize;
            let index = pick(w + CLIENTS, n, created[owner]);
            async move {
                let key = etcd_key(NS_CREATE, &object_name(owner, index));
                let found = client.get(&key).await?;
                ensure!(
                    found.is_some(),
                    "etcd has no {}",
                    String::from_utf8_lossy(&key)
                );
                Ok(())
            }
        },
    );
    let (gets, gets_cpu) = with_cpu(pid, gets).await.context("etcd gets")?;

    let count = settings.list_objects;
    let fill_clients = clients.clone();
    fill(count, move |w, i| {
        let client = fill_clients[w].clone();
        async move {
            let name = object_name(0, i as u64);
            let value = serde_json::to_vec(&config_map(&name)).context("encoding a ConfigMap")?;
            client.put(&etcd_key(NS_LIST, &name), value).await?;
            Ok(())
        }
    })
    .await
    .context("filling etcd for the range")?;
    let prefix = format!("/registry/configmaps/{NS_LIST}/");
    let mut timings = Vec::with_capacity(settings.list_runs);
    for run in 0..=settings.list_runs {
        let start = Instant::now();
        let response = clients[0].range_prefix(prefix.as_bytes()).await?;
        let elapsed = start.elapsed();
        ensure!(
            response.kvs.len() == count && !response.more,
            "etcd range returned {} keys (more: {}), expected {count}",
            response.kvs.len(),
            response.more
        );
        if run > 0 {
            // run 0 warms caches
            timings.push(elapsed);
        }
    }
    let mut runs = put_runs;
    runs.push(last_puts);
    let (puts, put_rates) = median_run(runs);
    Ok(EtcdReport {
        version: server.version().to_owned(),
        puts: puts.run,
        puts_cpu: puts.cpu,
        put_rates,
        gets,
        gets_cpu,
        range: stats::median(&timings),
    })
}

struct ApiReport {
    creates: LoadRun,
    creates_cpu: CpuUse,
    /// Throughput of each round, in order (the median round is `creates`).
    create_rates: Vec<f64>,
    objects_created: u64,
    gets: LoadRun,
    gets_cpu: CpuUse,
    list_fill: Duration,
    list_whole: Duration,
    list_whole_bytes: usize,
    list_paged: Duration,
    list_pages: usize,
    watch: WatchReport,
    watch_cpu: CpuUse,
    rss_after: u64,
}

/// A fresh k3rs server after one create run (kept for the read phases of the last
/// round).
struct K3rsCreates {
    server: K3rsServer,
    clients: Vec<kube::Client>,
    measured: Measured,
}

async fn k3rs_creates(settings: &Settings, tls: &ProbeTls) -> Result<K3rsCreates> {
    let server = K3rsServer::start(settings, tls).await?;
    let pid = Some(server.child.id());
    let clients = server.clients(CLIENTS).await?;
    for ns in [NS_CREATE, NS_LIST, NS_WATCH] {
        create_namespace(&clients[0], ns).await?;
    }
    let apis: Vec<Api<ConfigMap>> = clients
        .iter()
        .map(|c| Api::namespaced(c.clone(), NS_CREATE))
        .collect();
    let creates = timed_load(CLIENTS, settings.warmup, settings.measure, move |w, n| {
        let api = apis[w].clone();
        async move {
            api.create(&PostParams::default(), &config_map(&object_name(w, n)))
                .await
                .context("creating a ConfigMap")?;
            Ok(())
        }
    });
    let (run, cpu) = with_cpu(pid, creates)
        .await
        .with_context(|| format!("k3rs creates; server log:\n{}", server.log_tail()))?;
    Ok(K3rsCreates {
        server,
        clients,
        measured: Measured { run, cpu },
    })
}

/// GETs of the objects `last` created, LIST, watch fan-out; stops the server.
async fn api_reads(
    settings: &Settings,
    last: K3rsCreates,
    create_runs: Vec<Measured>,
) -> Result<ApiReport> {
    let K3rsCreates {
        server,
        clients,
        measured: last_creates,
    } = last;
    let pid = Some(server.child.id());
    let objects_created = last_creates.run.done.iter().sum();

    // GETs of random existing objects.
    let created = Arc::new(last_creates.run.done.clone());
    let get_apis: Vec<Api<ConfigMap>> = clients
        .iter()
        .map(|c| Api::namespaced(c.clone(), NS_CREATE))
        .collect();
    let gets = timed_load(
        CLIENTS,
        Duration::ZERO,
        settings.get_measure,
        move |w, n| {
            let api = get_apis[w].clone();
            let owner = pick(w, n, CLIENTS as u64) as usize;
            let index = pick(w + CLIENTS, n, created[owner]);
            async move {
                api.get(&object_name(owner, index))
                    .await
                    .context("getting a ConfigMap")?;
                Ok(())
            }
        },
    );
    let (gets, gets_cpu) = with_cpu(pid, gets)
        .await
        .with_context(|| format!("k3rs GETs; server log:\n{}", server.log_tail()))?;

    // LIST of `list_objects` ConfigMaps.
    let count = settings.list_objects;
    let list_apis: Vec<Api<ConfigMap>> = clients
        .iter()
        .map(|c| Api::namespaced(c.clone(), NS_LIST))
        .collect();
    let list_fill = fill(count, move |w, i| {
        let api = list_apis[w].clone();
        async move {
            api.create(
                &PostParams::default(),
                &config_map(&object_name(0, i as u64)),
            )
            .await
            .context("creating a ConfigMap")?;
            Ok(())
        }
    })
    .await
    .context("filling the LIST namespace")?;
    let path = format!("/api/v1/namespaces/{NS_LIST}/configmaps");
    let client = &clients[0];
    // The namespace also holds its `kube-root-ca.crt` ConfigMap (as every namespace does in
    // Kubernetes) once the root-CA controller has written it.
    let expected = count..=count + 1;
    let mut whole = Vec::with_capacity(settings.list_runs);
    let mut paged = Vec::with_capacity(settings.list_runs);
    let mut list_whole_bytes = 0;
    let mut list_pages = 0;
    for run in 0..=settings.list_runs {
        let start = Instant::now();
        let body = get_bytes(client, &path).await?;
        let page: ListPage = serde_json::from_slice(&body).context("decoding a LIST")?;
        let elapsed = start.elapsed();
        ensure!(
            expected.contains(&page.items.len()) && page.metadata.continue_token.is_none(),
            "LIST returned {} items, expected {count} (+ kube-root-ca.crt)",
            page.items.len()
        );
        list_whole_bytes = body.len();

        let start = Instant::now();
        let mut items = 0;
        let mut pages = 0;
        let mut token: Option<String> = None;
        loop {
            let mut query = vec![("limit", PAGE_LIMIT.to_string())];
            if let Some(t) = token.take() {
                query.push(("continue", t));
            }
            let query = serde_urlencoded::to_string(&query).context("encoding the list query")?;
            let body = get_bytes(client, &format!("{path}?{query}")).await?;
            let page: ListPage = serde_json::from_slice(&body).context("decoding a LIST page")?;
            items += page.items.len();
            pages += 1;
            match page.metadata.continue_token.filter(|t| !t.is_empty()) {
                Some(t) => token = Some(t),
                None => break,
            }
            ensure!(pages <= count + 1, "paged LIST does not end");
        }
        let elapsed_paged = start.elapsed();
        ensure!(
            expected.contains(&items),
            "paged LIST returned {items} items in {pages} pages, expected {count} (+ kube-root-ca.crt)"
        );
        list_pages = pages;
        if run > 0 {
            // run 0 warms caches
            whole.push(elapsed);
            paged.push(elapsed_paged);
        }
    }

    let (watch, watch_cpu) = with_cpu(pid, watch_fanout(settings, &server, &clients))
        .await
        .with_context(|| format!("watch fan-out; server log:\n{}", server.log_tail()))?;
    let (rss_after, _) = server.memory()?;
    server.stop().await;
    let mut runs = create_runs;
    runs.push(last_creates);
    let (creates, create_rates) = median_run(runs);
    Ok(ApiReport {
        creates: creates.run,
        creates_cpu: creates.cpu,
        create_rates,
        objects_created,
        gets,
        gets_cpu,
        list_fill,
        list_whole: stats::median(&whole),
        list_whole_bytes,
        list_paged: stats::median(&paged),
        list_pages,
        watch,
        watch_cpu,
        rss_after,
    })
}

struct WatchReport {
    watchers: usize,
    events: usize,
    open_time: Duration,
    delivery: Summary,
    creates: Summary,
}

/// `watchers` watches from the current resourceVersion, then `events` creates one
/// after another; every (watcher, event) pair is one delivery sample.
async fn watch_fanout(
    settings: &Settings,
    server: &K3rsServer,
    clients: &[kube::Client],
) -> Result<WatchReport> {
    let watchers = settings.watchers;
    let events = settings.watch_events;
    let creator: Api<ConfigMap> = Api::namespaced(server.client().await?, NS_WATCH);
    let rv = creator
        .list_metadata(&ListParams::default().limit(1))
        .await
        .context("listing the watch namespace")?
        .metadata
        .resource_version
        .context("the list has no resourceVersion")?;

    // Open the watches, 32 at a time; each gets its own connection (HTTP/1.1).
    let open_start = Instant::now();
    let opened: Vec<Result<_>> = futures_util::stream::iter(0..watchers)
        .map(|i| {
            let api: Api<ConfigMap> = Api::namespaced(clients[i % clients.len()].clone(), NS_WATCH);
            let rv = rv.clone();
            async move {
                api.watch(&WatchParams::default().timeout(WATCH_TIMEOUT_SECS), &rv)
                    .await
                    .with_context(|| format!("opening watch {i}"))
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let open_time = open_start.elapsed();
    let mut tasks = Vec::with_capacity(watchers);
    for stream in opened {
        let mut stream = stream?.boxed();
        tasks.push(tokio::spawn(async move {
            let mut received: Vec<(usize, Instant)> = Vec::with_capacity(events);
            while received.len() < events {
                let Some(item) = stream.next().await else {
                    bail!(
                        "the watch ended after {} of {events} events",
                        received.len()
                    );
                };
                let at = Instant::now();
                match item.context("watch stream")? {
                    WatchEvent::Added(cm) => {
                        let name = cm.metadata.name.unwrap_or_default();
                        let index = name
                            .strip_prefix("w-")
                            .and_then(|n| n.parse().ok())
                            .with_context(|| format!("unexpected object {name:?}"))?;
                        received.push((index, at));
                    }
                    WatchEvent::Bookmark(_) => {}
                    WatchEvent::Error(status) => bail!("watch error: {status:?}"),
                    other => bail!("unexpected watch event: {other:?}"),
                }
            }
            anyhow::Ok(received)
        }));
    }
    // Let the connections settle before the first create.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut sent = Vec::with_capacity(events);
    let mut create_latency = Latencies::with_capacity(events);
    for i in 0..events {
        let cm = config_map(&format!("w-{i:05}"));
        let start = Instant::now();
        creator
            .create(&PostParams::default(), &cm)
            .await
            .with_context(|| format!("creating watched ConfigMap {i}"))?;
        create_latency.record(start.elapsed());
        sent.push(start);
    }

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut delivery = Latencies::with_capacity(watchers * events);
    for (i, task) in tasks.into_iter().enumerate() {
        let received = tokio::time::timeout_at(deadline, task)
            .await
            .with_context(|| format!("watcher {i} did not receive all events within 60 s"))?
            .context("a watcher task panicked")?
            .with_context(|| format!("watcher {i}"))?;
        for (index, at) in received {
            let start = sent
                .get(index)
                .with_context(|| format!("watcher {i} saw w-{index:05}, which was not created"))?;
            delivery.record(at.saturating_duration_since(*start));
        }
    }
    Ok(WatchReport {
        watchers,
        events,
        open_time,
        delivery: delivery.summary(),
        creates: create_latency.summary(),
    })
}

/// Flags of the "API server alone" memory variant.
const APISERVER_ONLY: &[&str] = &["--disable-scheduler", "--disable-controller-manager"];

struct MemoryReport {
    /// Extra server flags of this variant.
    flags: &'static [&'static str],
    /// Pods requested, and pods actually created (fewer when a limit stopped it).
    pods_wanted: usize,
    pods: usize,
    baseline: u64,
    after: u64,
    peak: u64,
    create_time: Duration,
    /// Why pod creation stopped early, if it did.
    stopped: Option<String>,
}

impl MemoryReport {
    fn per_pod(&self) -> f64 {
        self.after.saturating_sub(self.baseline) as f64 / self.pods.max(1) as f64
    }

    fn label(&self) -> &'static str {
        if self.flags.is_empty() {
            "default server"
        } else {
            "API server only"
        }
    }
}

/// Pods need their ServiceAccount (admission refuses them otherwise, as Kubernetes does).
/// Without the controller-manager nothing creates `default`, so the bench does; with it,
/// the controller may have been first (409 is fine).
async fn ensure_default_service_account(client: &kube::Client, namespace: &str) -> Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("default".to_owned()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    match accounts.create(&PostParams::default(), &account).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating {namespace}/default service account")),
    }
}

/// A fresh server (with `flags`): VmRSS after start, then after creating the pods.
/// Creation stops early (and says so) if the server's RSS passes
/// `settings.rss_limit` or creation takes longer than `settings.pods_time_limit`,
/// so that a runaway server cannot take the machine down with it.
async fn memory_phase(
    settings: &Settings,
    tls: &ProbeTls,
    flags: &'static [&'static str],
) -> Result<MemoryReport> {
    let server = K3rsServer::start_with(settings, tls, flags).await?;
    let clients = server.clients(CLIENTS).await?;
    create_namespace(&clients[0], NS_PODS).await?;
    ensure_default_service_account(&clients[0], NS_PODS).await?;
    // Open every client's connection before the baseline, so the difference is the
    // pods and not the connections.
    for client in &clients {
        get_bytes(client, &format!("/api/v1/namespaces/{NS_PODS}")).await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (baseline, _) = server.memory()?;

    let stop = Arc::new(AtomicBool::new(false));
    let created = Arc::new(AtomicUsize::new(0));
    let count = settings.pods;
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(CLIENTS);
    for (w, client) in clients.iter().enumerate() {
        let api: Api<Pod> = Api::namespaced(client.clone(), NS_PODS);
        let stop = stop.clone();
        let created = created.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..count).step_by(CLIENTS) {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                api.create(&PostParams::default(), &pod(&format!("web-{i:05}")))
                    .await
                    .with_context(|| format!("creating pod {i}"))?;
                created.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    let all_done = futures_util::future::try_join_all(tasks);
    tokio::pin!(all_done);
    let mut stopped = None;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            result = &mut all_done => {
                for task in result.context("a pod creation task panicked")? {
                    task.with_context(|| format!("server log:\n{}", server.log_tail()))?;
                }
                break;
            }
            _ = tick.tick(), if stopped.is_none() => {
                let (rss, _) = server.memory()?;
                let n = created.load(Ordering::Relaxed);
                if rss > settings.rss_limit {
                    stopped = Some(format!(
                        "stopped after {} pods: server RSS {} passed the bench's limit of {}",
                        fmt_thousands(n as u64),
                        fmt_bytes(rss),
                        fmt_bytes(settings.rss_limit)
                    ));
                } else if start.elapsed() > settings.pods_time_limit {
                    stopped = Some(format!(
                        "stopped after {} pods: creating them took longer than the bench's \
                         limit of {:?} (server RSS {})",
                        fmt_thousands(n as u64),
                        settings.pods_time_limit,
                        fmt_bytes(rss)
                    ));
                }
                if stopped.is_some() {
                    stop.store(true, Ordering::Relaxed);
                }
            }
        }
    }
    let create_time = start.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (after, peak) = server.memory()?;
    server.stop().await;
    Ok(MemoryReport {
        flags,
        pods_wanted: count,
        pods: created.load(Ordering::Relaxed),
        baseline,
        after,
        peak,
        create_time,
        stopped,
    })
}

// ---------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------

struct Report<'a> {
    settings: &'a Settings,
    ready: &'a ReadyReport,
    etcd: &'a EtcdReport,
    api: &'a ApiReport,
    memory: &'a MemoryReport,
    memory_alone: &'a MemoryReport,
}

fn duration_ratio(a: Duration, b: Duration) -> f64 {
    stats::ratio(a.as_secs_f64(), b.as_secs_f64())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Report<'_> {
    fn print(&self) {
        let Report {
            settings,
            ready,
            etcd,
            api,
            memory,
            memory_alone,
        } = self;
        let mut table = Table::new([
            String::new(),
            "k3rs API".to_owned(),
            format!("etcd {} raw", etcd.version),
            "k3rs/etcd".to_owned(),
        ]);
        type Pick = fn(&Summary) -> Duration;
        let picks: [(&str, Pick); 3] = [
            ("  latency p50", |s| s.p50),
            ("  latency p99", |s| s.p99),
            ("  latency max", |s| s.max),
        ];
        for (title, k3rs, reference) in [
            (
                format!(
                    "creates, {CLIENTS} clients, {PAYLOAD_BYTES} B ConfigMaps, {:?}, median of \
                     {} round(s) (etcd: Put of the same JSON)",
                    settings.measure, settings.rounds
                ),
                &api.creates,
                &etcd.puts,
            ),
            (
                format!(
                    "GET, {CLIENTS} clients, random existing ConfigMaps, {:?} \
                     (etcd: single-key Range)",
                    settings.get_measure
                ),
                &api.gets,
                &etcd.gets,
            ),
        ] {
            table.section(title);
            table.row([
                "  throughput".to_owned(),
                fmt_rate(k3rs.per_second),
                fmt_rate(reference.per_second),
                fmt_ratio(stats::ratio(k3rs.per_second, reference.per_second)),
            ]);
            for (label, pick) in picks {
                table.row([
                    label.to_owned(),
                    fmt_duration(pick(&k3rs.latency)),
                    fmt_duration(pick(&reference.latency)),
                    fmt_ratio(duration_ratio(
                        pick(&k3rs.latency),
                        pick(&reference.latency),
                    )),
                ]);
            }
            table.row([
                "  operations measured".to_owned(),
                fmt_thousands(k3rs.latency.count as u64),
                fmt_thousands(reference.latency.count as u64),
            ]);
        }
        table.section(format!(
            "LIST of {} ConfigMaps, median of {} (etcd: one prefix Range)",
            fmt_thousands(settings.list_objects as u64),
            settings.list_runs
        ));
        table.row([
            "  unpaged".to_owned(),
            fmt_duration(api.list_whole),
            fmt_duration(etcd.range),
            fmt_ratio(duration_ratio(api.list_whole, etcd.range)),
        ]);
        table.row([
            format!("  limit={PAGE_LIMIT} ({} pages)", api.list_pages),
            fmt_duration(api.list_paged),
            String::new(),
        ]);
        let w = &api.watch;
        table.section(format!(
            "watch fan-out: {} watchers × {} sequential creates, create start → event",
            w.watchers, w.events
        ));
        for (label, pick) in picks {
            table.row([
                label.replace("latency", "delivery"),
                fmt_duration(pick(&w.delivery)),
                "not measured".to_owned(),
            ]);
        }
        table.row([
            "  deliveries".to_owned(),
            fmt_thousands(w.delivery.count as u64),
        ]);
        table.row([
            "  create p50 / p99 meanwhile".to_owned(),
            format!(
                "{} / {}",
                fmt_duration(w.creates.p50),
                fmt_duration(w.creates.p99)
            ),
        ]);
        table.section(format!(
            "startup, fresh data dir, spawn → /readyz 200 (median of {})",
            ready.samples.len()
        ));
        table.row(["  ready".to_owned(), fmt_duration(ready.median)]);
        println!();
        print!("{table}");

        println!();
        let mut mem = Table::new([
            "memory of a fresh server (VmRSS)",
            memory.label(),
            memory_alone.label(),
        ]);
        type MemCell = fn(&MemoryReport) -> String;
        let mem_rows: [(&str, MemCell); 7] = [
            ("  pods created", |m| {
                format!(
                    "{} of {}",
                    fmt_thousands(m.pods as u64),
                    fmt_thousands(m.pods_wanted as u64)
                )
            }),
            ("  after start", |m| fmt_bytes(m.baseline)),
            ("  with the pods", |m| fmt_bytes(m.after)),
            ("  peak (VmHWM)", |m| fmt_bytes(m.peak)),
            ("  per pod", |m| format!("{:.0} B", m.per_pod())),
            ("  creation time", |m| fmt_duration(m.create_time)),
            ("  creation rate", |m| {
                fmt_rate(stats::per_second(m.pods, m.create_time))
            }),
        ];
        for (label, cell) in mem_rows {
            mem.row([label.to_owned(), cell(memory), cell(memory_alone)]);
        }
        print!("{mem}");
        println!(
            "  ({} = {}; the default server also runs the scheduler and controllers)",
            memory_alone.label(),
            APISERVER_ONLY.join(" ")
        );
        for m in [memory, memory_alone] {
            if let Some(reason) = &m.stopped {
                println!("  {}: {reason}", m.label());
            }
        }

        println!();
        println!(
            "ready samples: {}",
            ready
                .samples
                .iter()
                .map(|d| fmt_duration(*d))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let rates = |r: &[f64]| {
            r.iter()
                .map(|x| fmt_rate(*x))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "write rounds (median kept): k3rs creates {}; etcd puts {}",
            rates(&api.create_rates),
            rates(&etcd.put_rates)
        );
        println!(
            "last create run: {} ConfigMaps created (warm-up included); LIST fill of {} took {} ({}); \
             unpaged LIST body {}",
            fmt_thousands(api.objects_created),
            fmt_thousands(settings.list_objects as u64),
            fmt_duration(api.list_fill),
            fmt_rate(stats::per_second(settings.list_objects, api.list_fill)),
            fmt_bytes(api.list_whole_bytes as u64),
        );
        println!(
            "watch: {} watches opened in {}; server VmRSS at the end of the API phase {}",
            w.watchers,
            fmt_duration(w.open_time),
            fmt_bytes(api.rss_after),
        );

        println!();
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        println!(
            "CPU use during the runs (average cores busy of {cores}, warm-up included; load \
             average now {}):",
            load_average()
        );
        let mut cpu = Table::new([
            "",
            "server",
            "bench (clients)",
            "other processes",
            "whole machine",
        ]);
        let cell = |v: f64| format!("{v:.2}");
        for (label, used) in [
            ("k3rs creates", api.creates_cpu),
            ("etcd puts", etcd.puts_cpu),
            ("k3rs GETs", api.gets_cpu),
            ("etcd GETs", etcd.gets_cpu),
            ("k3rs watch fan-out", api.watch_cpu),
        ] {
            let server = used.server.map_or("n/a".to_owned(), cell);
            let other = used.machine - used.bench - used.server.unwrap_or(0.0);
            cpu.row([
                format!("  {label}"),
                server,
                cell(used.bench),
                cell(other.max(0.0)),
                cell(used.machine),
            ]);
        }
        print!("{cpu}");

        let creates_per_s = api.creates.per_second;
        let create_ratio = stats::ratio(creates_per_s, etcd.puts.per_second);
        let create_p99_ms = ms(api.creates.latency.p99);
        let get_p99_ms = ms(api.gets.latency.p99);
        let rss_per_pod = memory.per_pod();
        let ready_ms = ms(ready.median);

        println!();
        println!("goals:");
        let goals: [(&str, f64, &str, f64, bool); 5] = [
            (
                "create_ratio_vs_etcd_put",
                create_ratio,
                "≥",
                GOAL_CREATE_RATIO,
                create_ratio >= GOAL_CREATE_RATIO,
            ),
            (
                "create_p99_ms",
                create_p99_ms,
                "≤",
                GOAL_CREATE_P99_MS,
                create_p99_ms <= GOAL_CREATE_P99_MS,
            ),
            (
                "get_p99_ms",
                get_p99_ms,
                "≤",
                GOAL_GET_P99_MS,
                get_p99_ms <= GOAL_GET_P99_MS,
            ),
            (
                "rss_per_pod_bytes",
                rss_per_pod,
                "≤",
                GOAL_RSS_PER_POD,
                rss_per_pod <= GOAL_RSS_PER_POD,
            ),
            (
                "ready_ms",
                ready_ms,
                "≤",
                GOAL_READY_MS,
                ready_ms <= GOAL_READY_MS,
            ),
        ];
        for (name, value, op, goal, met) in goals {
            println!(
                "  {name:<26} {value:>10.2}  (goal {op} {goal})  {}",
                if met { "met" } else { "MISSED" }
            );
        }
        if !settings.full {
            println!("  (smoke run: sizes are tiny, the figures are not meaningful)");
        }

        println!();
        println!(
            "RESULT api creates_per_s={:.0} create_ratio_vs_etcd_put={create_ratio:.2} \
             create_p99_ms={create_p99_ms:.2} get_p99_ms={get_p99_ms:.2} \
             rss_per_pod_bytes={rss_per_pod:.0} ready_ms={ready_ms:.0}",
            creates_per_s
        );
    }
}
