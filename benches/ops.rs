//! `cargo bench --bench ops`: operational figures of the real binary.
//!
//! Owns: the operations benchmark and its report. It measures
//!
//! * **binary size**: the static release build (`K3RS_RELEASE_BIN`, else
//!   `target/x86_64-unknown-linux-musl/release/k3rs`, else the glibc static build in
//!   `target/x86_64-unknown-linux-gnu/release/k3rs`; see the README) when it exists, else the
//!   binary cargo built for this bench (dynamically linked against glibc);
//! * **idle RSS**: of that same release binary when it exists (what users run: its allocator
//!   and optimisation level decide the figure), else of the bench build: VmRSS of the
//!   `k3rs server` process with its embedded agent (kubelet and
//!   the kubelet API; containerd is its own process and not counted) after its Node is
//!   Ready and it has been idle for 60 s. Needs root and containerd (`apt-get install
//!   containerd runc containernetworking-plugins`); its containerd is stopped afterwards;
//! * **snapshot save / restore**: a server holding 10,000 Pods created through the API
//!   (16 concurrent kube-rs clients); `POST /k3rs/v1/etcd-snapshots` timed end to end
//!   (the size is the snapshot file's), then the server is stopped and
//!   `k3rs etcd-snapshot restore <name>` is timed as a process (verify, move aside,
//!   rebuild).
//!
//! Last line: `RESULT ops binary_mb=<n> idle_rss_mb=<n> snapshot_save_ms=<n> restore_ms=<n>`.
//!
//! Environment: `K3RS_BENCH_PODS` (default 10000), `K3RS_BENCH_IDLE_SECS` (default 60).
//! Without `--bench` (e.g. `cargo test --benches`) it runs a short smoke version
//! (200 pods, 2 s idle).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

struct Server {
    child: Child,
    kubeconfig: PathBuf,
    data: PathBuf,
}

impl Server {
    fn start(binary: &Path, root: &Path, with_agent: bool) -> Server {
        let port = free_port();
        let data = root.join("data");
        let kubeconfig = root.join("kubeconfig.yaml");
        let child = Command::new(binary)
            .arg("server")
            .arg("--data-dir")
            .arg(&data)
            .args(["--bind-address", "127.0.0.1", "--https-listen-port"])
            .arg(port.to_string())
            .arg("--write-kubeconfig")
            .arg(&kubeconfig)
            .args(if with_agent {
                // A CIDR no test uses, so the bench can run beside them.
                &["--cluster-cidr", "10.93.0.0/16"][..]
            } else {
                &["--disable-agent"][..]
            })
            .args(["--etcd-disable-snapshots", "--node-name", "bench"])
            .env("K3RS_RUN_DIR", root.join("run"))
            .env("K3RS_POD_LOG_DIR", root.join("pods"))
            .env("K3RS_KUBELET_PORT", free_port().to_string())
            .env_remove("K3RS_TOKEN")
            .env_remove("K3RS_DATA_DIR")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start k3rs server");
        let server = Server {
            child,
            kubeconfig,
            data,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !(server.kubeconfig.exists()
            && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok())
        {
            assert!(Instant::now() < deadline, "server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    async fn client(&self) -> kube::Client {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .expect("config");
            let client = kube::Client::try_from(config).expect("client");
            let ready = client
                .request_text(
                    http::Request::get("/readyz")
                        .body(Vec::new())
                        .expect("request"),
                )
                .await;
            if ready.is_ok() {
                return client;
            }
            assert!(Instant::now() < deadline, "not ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn rss_mb(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    }

    fn stop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The agent leaves its containerd running on purpose (as k3s does); this one
        // belongs to the bench, so stop it: every process whose command line names the
        // bench's data dir.
        let root = self.data.display().to_string();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&root) {
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            }
        }
    }
}

/// Waits until the Node `bench` reports Ready (its embedded agent registered and runs).
async fn wait_for_ready_node(client: &kube::Client) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ready = nodes
            .get_opt("bench")
            .await
            .ok()
            .flatten()
            .is_some_and(|node| {
                node.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the embedded agent's Node did not become Ready in 120 s (root and containerd are \
             needed: apt-get install containerd runc containernetworking-plugins)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn pod(i: u64) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("bench-{i}"), "labels": {"app": "bench", "shard": (i % 16).to_string()}},
        "spec": {"containers": [{
            "name": "web", "image": "nginx:1.27",
            "ports": [{"containerPort": 80}],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
        }]}
    }))
    .expect("pod")
}

async fn create_pods(client: &kube::Client, count: u64) {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let workers = 16;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while i < count {
                api.create(&PostParams::default(), &pod(i))
                    .await
                    .expect("create pod");
                i += workers;
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let pods = env_or("K3RS_BENCH_PODS", if full { 10_000 } else { 200 });
    let idle_secs = env_or("K3RS_BENCH_IDLE_SECS", if full { 60 } else { 2 });
    let runtime = tokio::runtime::Runtime::new().expect("runtime");

    // Binary size.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bench_build = PathBuf::from(env!("CARGO_BIN_EXE_k3rs"));
    let release = std::env::var_os("K3RS_RELEASE_BIN")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            root.join("target/x86_64-unknown-linux-musl/release/k3rs"),
            root.join("target/x86_64-unknown-linux-gnu/release/k3rs"),
        ])
        .find(|p| p.exists());
    let (binary, which) = match &release {
        Some(path) => (path.clone(), "static release build"),
        None => (
            bench_build.clone(),
            "bench build (dynamic; build the static one for the real figure)",
        ),
    };
    let binary_mb = std::fs::metadata(&binary).map(|m| m.len()).unwrap_or(0) as f64 / 1e6;
    println!("binary: {binary_mb:.1} MB ({which}: {})", binary.display());

    // Idle RSS.
    let idle_dir = tempfile::tempdir().expect("tempdir");
    assert!(
        unsafe { libc::geteuid() } == 0,
        "the idle figure runs k3rs server with its agent: run the bench as root"
    );
    let idle = Server::start(&binary, idle_dir.path(), true);
    let ready_started = Instant::now();
    runtime.block_on(async {
        let client = idle.client().await;
        wait_for_ready_node(&client).await;
    });
    println!(
        "node Ready {:.1} s after start (embedded agent, own containerd)",
        ready_started.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(idle_secs));
    let idle_rss_mb = idle.rss_mb();
    println!(
        "idle RSS after {idle_secs} s: {idle_rss_mb:.1} MB (k3rs server with its agent; containerd excluded; {which})"
    );
    drop(idle);

    // Snapshot save and restore with `pods` Pods.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Server::start(&bench_build, dir.path(), false);
    let (save_ms, snapshot_name, snapshot_size) = runtime.block_on(async {
        let client = server.client().await;
        let started = Instant::now();
        create_pods(&client, pods).await;
        println!(
            "created {pods} pods in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let started = Instant::now();
        let request = http::Request::post("/k3rs/v1/etcd-snapshots")
            .header("content-type", "application/json")
            .body(br#"{"name":"bench"}"#.to_vec())
            .expect("request");
        let answer = client.request_text(request).await.expect("snapshot save");
        let save_ms = started.elapsed().as_secs_f64() * 1000.0;
        let value: serde_json::Value = serde_json::from_str(&answer).expect("json");
        let item = &value["items"][0];
        (
            save_ms,
            item["name"].as_str().unwrap_or_default().to_string(),
            item["size"].as_u64().unwrap_or(0),
        )
    });
    println!(
        "snapshot save: {save_ms:.0} ms, {:.1} MB ({snapshot_name})",
        snapshot_size as f64 / 1e6
    );
    server.stop();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_k3rs"))
        .args(["etcd-snapshot", "restore", &snapshot_name, "--data-dir"])
        .arg(&server.data)
        .output()
        .expect("restore");
    let restore_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert!(
        out.status.success(),
        "restore failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("snapshot restore (offline, verify + move aside + rebuild): {restore_ms:.0} ms");
    println!(
        "RESULT ops binary_mb={binary_mb:.1} idle_rss_mb={idle_rss_mb:.1} snapshot_save_ms={save_ms:.0} restore_ms={restore_ms:.0}"
    );
}
