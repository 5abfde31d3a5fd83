//! The `k3rs server` the end-to-end benchmarks measure: the binary cargo built for the
//! bench (bench profile), started as `k3rs server --disable-agent` on a free loopback
//! port with a private temporary data directory, its log in that directory, killed
//! (and the directory removed) on drop.
//!
//! Owns: the server process of one bench phase and the files under its temporary
//! directory. How readiness is *timed* stays with each bench (the API bench times
//! `/readyz` with its own TLS probe); this file only offers the plain waits.
//!
//! Include it from a bench with `#[path = "support/server.rs"] mod server;`, beside
//! `#[path = "support/stats.rs"] mod stats;` (its `log_tail`).

#![allow(dead_code)] // each bench uses a different subset

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The binary measured: `K3RS_RELEASE_BIN` when set (the shipped release build, to compare
/// it with the bench-profile one), else the one cargo built for this bench.
pub fn k3rs_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var_os("K3RS_RELEASE_BIN")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_k3rs")))
    })
}

/// A loopback port that was free a moment ago (bound to port 0, then released).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a free loopback port")?;
    Ok(listener
        .local_addr()
        .context("reading the address of a bound socket")?
        .port())
}

/// The 1, 5 and 15 minute load averages, for the report (figures on a loaded machine
/// are noisy).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// A running `k3rs server --disable-agent` with a private data directory; killed
/// on drop.
pub struct K3rsServer {
    pub child: Child,
    pub port: u16,
    pub kubeconfig: PathBuf,
    pub log_path: PathBuf,
    // Dropped after `child` is killed (see `Drop`), removing the data directory.
    _dir: tempfile::TempDir,
}

impl K3rsServer {
    /// Spawns the server (without waiting for it) in a fresh temporary directory
    /// named `<prefix>…`, with `args` after the standard flags. `K3RS_*` variables of
    /// the bench's own environment are not passed on (the server reads them).
    pub fn spawn(prefix: &str, args: &[&str]) -> Result<K3rsServer> {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .context("creating a temporary directory for the server")?;
        let port = free_port()?;
        let kubeconfig = dir.path().join("kc.yaml");
        let log_path = dir.path().join("server.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let log_err = log
            .try_clone()
            .with_context(|| format!("duplicating the handle of {}", log_path.display()))?;
        let mut command = Command::new(k3rs_bin());
        command
            .arg("server")
            .arg("--disable-agent")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--bind-address", "127.0.0.1"])
            .args(["--https-listen-port", &port.to_string()])
            .arg("--write-kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("K3RS_") {
                command.env_remove(name);
            }
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", k3rs_bin().display()))?;
        Ok(K3rsServer {
            child,
            port,
            kubeconfig,
            log_path,
            _dir: dir,
        })
    }

    /// Fails (with the end of the log) if the server has exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self
            .child
            .try_wait()
            .context("checking whether the server is still running")?
        {
            bail!(
                "k3rs server exited ({status}); {} ends with:\n{}",
                self.log_path.display(),
                self.log_tail()
            );
        }
        Ok(())
    }

    /// Waits until the admin kubeconfig exists and a client built from it can list
    /// Nodes (authentication, routing and the store all work).
    pub async fn wait_for_api(&mut self, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            self.check_running()?;
            if self.kubeconfig.exists()
                && let Ok(client) = self.client().await
                && client.apiserver_version().await.is_ok()
            {
                let nodes: Api<Node> = Api::all(client);
                if nodes.list(&Default::default()).await.is_ok() {
                    return Ok(());
                }
            }
            if started.elapsed() > timeout {
                bail!(
                    "k3rs server not ready within {timeout:?}; {} ends with:\n{}",
                    self.log_path.display(),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The admin kubeconfig is written before the server is ready; make sure.
    pub async fn wait_for_kubeconfig(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.kubeconfig.exists() {
            ensure!(
                Instant::now() < deadline,
                "{} missing although the server is ready",
                self.kubeconfig.display()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    /// A new client (with its own connection pool) from the admin kubeconfig.
    pub async fn client(&self) -> Result<kube::Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading {}", self.kubeconfig.display()))?;
        kube::Client::try_from(config).context("building a kube client")
    }

    /// `n` independent clients.
    pub async fn clients(&self, n: usize) -> Result<Vec<kube::Client>> {
        let mut clients = Vec::with_capacity(n);
        for _ in 0..n {
            clients.push(self.client().await?);
        }
        Ok(clients)
    }

    /// The server's resident set size (`VmRSS`) and its peak (`VmHWM`), in bytes.
    pub fn memory(&self) -> Result<(u64, u64)> {
        let path = format!("/proc/{}/status", self.child.id());
        let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let field = |name: &str| -> Result<u64> {
            let line = status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .with_context(|| format!("{path} has no {name} line"))?;
            let kib: u64 = line
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .with_context(|| format!("unexpected {name} line in {path}: {line:?}"))?;
            Ok(kib * 1024)
        };
        Ok((field("VmRSS:")?, field("VmHWM:")?))
    }

    /// The last 20 lines of the server's log.
    pub fn log_tail(&self) -> String {
        crate::stats::log_tail(&self.log_path)
    }

    /// SIGTERM, then SIGKILL (on drop) if it has not exited within 10 s.
    pub async fn stop(mut self) {
        // Errors mean the process is already gone.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for K3rsServer {
    fn drop(&mut self) {
        // Errors here mean the process is already gone; nothing else to clean up.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
