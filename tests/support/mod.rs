//! Shared helpers for integration tests: start the real `k3rs` binary (the one
//! `cargo test` built) on a free port with a temporary data dir, wait until it is
//! ready, and run kubectl against it.

#![allow(dead_code)]

pub mod cluster;
pub mod images;
pub mod runtime;
pub mod slowloris;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub kubeconfig: PathBuf,
    pub started_in: Duration,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub fn k3rs_bin() -> &'static str {
    env!("CARGO_BIN_EXE_k3rs")
}

impl Server {
    /// Starts `k3rs server --disable-agent` and waits for `/readyz`.
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::start_in(dir, extra)
    }

    pub fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Server {
        Self::start_in_with_env(dir, extra, &[])
    }

    /// Starts the server with extra environment variables (test-only knobs such as
    /// `K3RS_CRONJOB_TIME_SCALE`).
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::start_in_with_env(dir, extra, env)
    }

    pub fn start_in_with_env(
        dir: tempfile::TempDir,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        let port = free_port();
        let kubeconfig = dir.path().join("kubeconfig.yaml");
        let log = std::fs::File::create(dir.path().join("server.log")).expect("log file");
        let started = Instant::now();
        let child = Command::new(k3rs_bin())
            .arg("server")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args([
                "--bind-address",
                "127.0.0.1",
                "--https-listen-port",
                &port.to_string(),
            ])
            .arg("--write-kubeconfig")
            .arg(&kubeconfig)
            .arg("--disable-agent")
            .args(extra)
            .env_remove("K3RS_TOKEN")
            .env_remove("K3RS_DATA_DIR")
            .envs(env.iter().copied())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start k3rs server");
        let mut server = Server {
            child,
            dir,
            port,
            kubeconfig,
            started_in: Duration::ZERO,
        };
        server.wait_ready(Duration::from_secs(30));
        server.started_in = started.elapsed();
        // Ready is not the end of start-up for a test that creates Pods at once: until the
        // controllers create `default/default`, ServiceAccount admission refuses them
        // (as on any Kubernetes just started).
        if !extra.contains(&"--disable-controller-manager") {
            server.wait_default_service_account("default");
        }
        server
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self, timeout: Duration) {
        wait_readyz(
            &mut self.child,
            &self.kubeconfig,
            timeout,
            Duration::from_millis(20),
            &self.dir.path().join("server.log"),
        );
    }

    /// A kube-rs client with the admin credentials of the written kubeconfig.
    pub async fn client(&self) -> kube::Client {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("read kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("kubeconfig");
        kube::Client::try_from(config).expect("client")
    }

    /// Waits until the controllers have created the `default` ServiceAccount of `namespace`:
    /// until then kube's ServiceAccount admission refuses every Pod there (Forbidden), before
    /// validation could speak.
    pub fn wait_default_service_account(&self, namespace: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.kubectl_quiet(&["get", "serviceaccount", "default", "-n", namespace]);
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no default ServiceAccount in {namespace} after 30 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    fn kubectl_quiet(&self, args: &[&str]) -> Output {
        kubectl_at(&self.kubeconfig, args)
    }

    /// Runs a kubectl binary against this server.
    pub fn kubectl_with(&self, kubectl: &Path, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(kubectl);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        cmd.env("KUBECACHEDIR", self.dir.path().join("kubecache"));
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", kubectl.display()));
        if let Some(input) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("write stdin");
        }
        child.wait_with_output().expect("kubectl output")
    }

    /// Runs the `kubectl` on PATH against this server; panics with its output unless it
    /// succeeds, and returns its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl_with(Path::new("kubectl"), args, None);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    pub fn stop(&mut self) {
        unsafe_kill(&mut self.child, "TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the server and hands back its directory (data dir, kubeconfig, log), for
    /// offline commands on the data dir and `Server::start_in`.
    pub fn stop_keeping_dir(mut self) -> tempfile::TempDir {
        self.stop();
        std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir"))
    }

    /// Stops the server and starts it again on the same data dir with `extra` arguments
    /// (on another port).
    pub fn restart(self, extra: &[&str]) -> Server {
        Server::start_in(self.stop_keeping_dir(), extra)
    }
}

/// Runs the `kubectl` on PATH with `args` against the server of `kubeconfig`.
pub fn kubectl_at(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("run kubectl (install kubectl)")
}

/// Waits until the k3rs server process `child` answers `/readyz` through `kubeconfig` (once
/// the server has written it), polling every `every`; panics with the text of `log_file` when
/// the process exits or `timeout` passes.
pub fn wait_readyz(
    child: &mut Child,
    kubeconfig: &Path,
    timeout: Duration,
    every: Duration,
    log_file: &Path,
) {
    let log = || std::fs::read_to_string(log_file).unwrap_or_default();
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("k3rs server exited early ({status}):\n{}", log());
        }
        if kubeconfig.exists()
            && kubectl_at(kubeconfig, &["get", "--raw", "/readyz"])
                .status
                .success()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "k3rs server not ready in {timeout:?}:\n{}",
            log()
        );
        std::thread::sleep(every);
    }
}

fn unsafe_kill(child: &mut Child, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status();
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client for `server` that authenticates with `token` only (no client certificate).
pub async fn client_with_token(server: &Server, token: &str) -> kube::Client {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(&server.kubeconfig).expect("read kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig");
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_string().into()),
        ..Default::default()
    };
    kube::Client::try_from(config).expect("token client")
}

/// An admin client for `server` that impersonates `user` (`kubectl --as`): requests are
/// authorized as that user's own rights.
pub async fn client_as(server: &Server, user: &str) -> kube::Client {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(&server.kubeconfig).expect("read kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig");
    config.auth_info.impersonate = Some(user.to_string());
    kube::Client::try_from(config).expect("impersonating client")
}

/// Stops `server` and writes `objects` (store key, object) straight into its store, past
/// the API's validation (as an older version or a restored snapshot could have left
/// them); returns its data directory for `Server::start_in`.
pub async fn stop_and_write_past_validation(
    server: Server,
    objects: &[(String, serde_json::Value)],
) -> tempfile::TempDir {
    let dir = server.stop_keeping_dir();
    let store = k3rs::store::Store::open(k3rs::store::StoreConfig::new(
        dir.path().join("data/server/db"),
    ))
    .expect("open the stopped server's store");
    for (key, object) in objects {
        store
            .create(key.as_bytes(), serde_json::to_vec(object).expect("json"))
            .await
            .expect("write past validation");
    }
    dir
}

/// Polls `check` every 100 ms until it returns `Some`, and panics naming `what` once
/// `timeout` has passed.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_for_every(what, timeout, Duration::from_millis(100), check).await
}

/// [`wait_for`] with its own poll interval `every`.
pub async fn wait_for_every<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(every).await;
    }
}

/// Every installed kubectl version (1.27 ... 1.33); fails loudly if none is present.
pub fn kubectls() -> Vec<PathBuf> {
    let dir = Path::new("/usr/lib/google-cloud-sdk/bin");
    let found: Vec<PathBuf> = (27..=33)
        .map(|minor| dir.join(format!("kubectl.1.{minor}")))
        .filter(|p| p.exists())
        .collect();
    assert!(
        !found.is_empty(),
        "no kubectl 1.27-1.33 under {}: install the google-cloud-sdk kubectl components",
        dir.display()
    );
    found
}

/// Removes the environment variables `k3rs agent` reads its flags from (`K3RS_TOKEN`,
/// `K3RS_URL`, …), so a test's agent sees only the arguments it is given.
pub fn without_agent_env(command: &mut Command) -> &mut Command {
    command
        .env_remove("K3RS_TOKEN")
        .env_remove("K3RS_URL")
        .env_remove("K3RS_DATA_DIR")
        .env_remove("K3RS_NODE_NAME")
        .env_remove("K3RS_CONFIG_FILE")
}

/// Runs `k3rs agent` with `args` to completion (at most 60 s).
pub fn run_agent(args: &[&str]) -> Output {
    let mut child = without_agent_env(Command::new(k3rs_bin()).arg("agent").args(args))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start k3rs agent");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "k3rs agent did not exit within 60 s:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `k3rs agent`'s join-only arguments: server, token, data dir, node name, 127.0.0.1, and a
/// container runtime socket that does not exist (the agent stops after joining).
pub fn join_args<'a>(
    server_url: &'a str,
    token: &'a str,
    data: &'a str,
    node: &'a str,
) -> Vec<&'a str> {
    vec![
        "--server",
        server_url,
        "--token",
        token,
        "--data-dir",
        data,
        "--node-name",
        node,
        "--node-ip",
        "127.0.0.1",
        "--container-runtime-endpoint",
        "unix:///nonexistent/k3rs-test/cri.sock",
    ]
}
