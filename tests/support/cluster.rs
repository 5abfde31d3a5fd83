//! A real multi-node cluster on one host (root only): `k3rs server --disable-agent` in the host
//! network namespace bound to a test bridge address, plus N `k3rs agent`s, each in a network
//! namespace of its own (veth to the bridge, address 10.97.<n>.<10+i>/24) with its own data
//! dir, run dir, pod log dir and containerd (the agent runs it), and the busybox test image
//! in its air-gap folder. Every cluster takes a free slot `n` (the bridge `k3rs-br<n>` is the
//! lock) and the cluster CIDR `10.96.<4n>.0/22`, so parallel tests never clash.
//!
//! The cluster's directory is a tmpfs (so the kubelets' disk-pressure checks see it, not the
//! CI disk). [`Cluster`]'s Drop kills the agents, their containerd, shims and containers, removes the
//! pod sandboxes' network namespaces, the mounts under the cluster's temp dir, the node
//! namespaces (with their veths, routes and nftables tables), the bridge and the server — on
//! failure too. (The containerd cleanup mirrors `tests/kubelet_e2e.rs`'s; the lead may fold
//! both into `tests/support/runtime.rs`.)

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{Server, free_port, k3rs_bin, wait_readyz};

/// Fails loudly (never skips) when the test cannot run here.
pub fn require_root_and_tools() {
    // SAFETY: geteuid has no preconditions.
    assert!(
        unsafe { libc::geteuid() } == 0,
        "multi-node tests need root (network namespaces, containerd, CNI)"
    );
    for (bin, package) in [
        ("containerd", "containerd"),
        ("runc", "runc"),
        ("containerd-shim-runc-v2", "containerd"),
        ("ip", "iproute2"),
        ("bridge", "iproute2"),
        ("nsenter", "util-linux"),
        ("nft", "nftables"),
    ] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .chain([
                PathBuf::from("/usr/sbin"),
                PathBuf::from("/usr/bin"),
                PathBuf::from("/sbin"),
            ])
            .any(|d| d.join(bin).exists());
        assert!(found, "{bin} missing: apt-get install {package}");
    }
    let cni = k3rs::network::cni::default_plugin_dir();
    assert!(
        cni.join("bridge").exists() && cni.join("host-local").exists(),
        "CNI plugins missing in {}: apt-get install containernetworking-plugins",
        cni.display()
    );
}

/// Runs a command and panics with its stderr when it fails.
pub fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn quiet(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One agent in its network namespace.
pub struct Agent {
    pub name: String,
    pub netns: String,
    pub ip: String,
    pub dir: PathBuf,
    pub child: Option<Child>,
    pub started: Instant,
    /// Agent start → its Node Ready with a podCIDR (set by [`Cluster::wait_nodes_ready`]).
    pub ready_in: Option<Duration>,
}

impl Agent {
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    /// Runs `args` inside this node's network namespace.
    pub fn exec(&self, program: &str, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.netns))
            .arg("--")
            .arg(program)
            .args(args)
            .output()
            .expect("nsenter")
    }

    /// `exec`, stdout as a string; panics on failure.
    pub fn exec_ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.exec(program, args);
        assert!(
            out.status.success(),
            "{program} {} in {} failed: {}",
            args.join(" "),
            self.netns,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the agent this harness started.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What a test cluster looks like.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub agents: usize,
    /// Extra arguments for every agent (e.g. `--flannel-backend=host-gw`).
    pub agent_args: Vec<String>,
    /// Extra environment for every agent (e.g. `NOTIFY_SOCKET`).
    pub agent_env: Vec<(String, String)>,
    /// Run [`fake_upstream`] on the bridge address, port 53, and give the agents a
    /// `--resolv-conf` naming it, so cluster DNS forwards there (no internet needed).
    pub upstream_dns: bool,
    /// How many servers: the first with `--cluster-init` on the bridge's `.1`, the others
    /// join it from `.2`, `.3`, … (same HTTPS port, default raft ports).
    pub servers: usize,
}

impl ClusterSpec {
    pub fn new(agents: usize) -> Self {
        Self {
            agents,
            agent_args: Vec::new(),
            agent_env: Vec::new(),
            upstream_dns: false,
            servers: 1,
        }
    }

    pub fn servers(mut self, n: usize) -> Self {
        self.servers = n;
        self
    }

    pub fn upstream_dns(mut self) -> Self {
        self.upstream_dns = true;
        self
    }

    pub fn agent_arg(mut self, arg: &str) -> Self {
        self.agent_args.push(arg.to_string());
        self
    }

    pub fn agent_env(mut self, key: &str, value: &str) -> Self {
        self.agent_env.push((key.to_string(), value.to_string()));
        self
    }
}

pub struct Cluster {
    pub server: Server,
    /// Servers 2, 3, … of a [`ClusterSpec::servers`] cluster.
    pub extra_servers: Vec<Server>,
    /// The server [`Cluster::kubectl`] talks to (0 is the first); a test that kills a server
    /// points it at a live one.
    pub kubectl_server: usize,
    pub agents: Vec<Agent>,
    /// The slot: bridge `k3rs-br<n>`, nodes on 10.97.<n>.0/24.
    pub slot: u8,
    pub bridge: String,
    pub cluster_cidr: String,
    pub token: String,
    spec: ClusterSpec,
    base: PathBuf,
    /// Tells the fake upstream resolver's thread to end.
    upstream_stop: Arc<AtomicBool>,
}

/// The name [`fake_upstream`] knows, and its address.
pub const UPSTREAM_NAME: &str = "www.example.test";
pub const UPSTREAM_ADDRESS: &str = "192.0.2.53";

/// A fake upstream resolver on `bind` (UDP): `www.example.test` A 192.0.2.53, everything
/// else NXDOMAIN. Written on raw bytes so it shares nothing with the server's codec. Runs
/// on a thread until `stop` is set.
pub fn fake_upstream(bind: &str, stop: Arc<AtomicBool>) -> std::net::SocketAddr {
    let socket = std::net::UdpSocket::bind(bind).expect("bind the fake upstream resolver");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("read timeout");
    let addr = socket.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while !stop.load(Ordering::Relaxed) {
            let Ok((len, peer)) = socket.recv_from(&mut buf) else {
                continue;
            };
            if let Some(reply) = upstream_reply(&buf[..len]) {
                let _ = socket.send_to(&reply, peer);
            }
        }
    });
    addr
}

fn upstream_reply(query: &[u8]) -> Option<Vec<u8>> {
    // Keep only the header and the question (drop any OPT record).
    let mut end = 12;
    while *query.get(end)? != 0 {
        end += 1 + usize::from(query[end]);
    }
    end += 5;
    let mut reply = query.get(..end)?.to_vec();
    let qtype = u16::from_be_bytes([reply[end - 4], reply[end - 3]]);
    let known = reply[12..end - 4].eq_ignore_ascii_case(b"\x03www\x07example\x04test\x00");
    reply[2] = 0x81;
    reply[3] = if known { 0x80 } else { 0x83 };
    reply[6..12].fill(0);
    if known && qtype == 1 {
        reply[7] = 1;
        reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 53]);
    }
    Some(reply)
}

/// Takes the first free slot: creating the bridge is the atomic test-and-set.
fn take_slot() -> u8 {
    let start = (std::process::id() % 60) as u8;
    for k in 0..63u8 {
        let n = 1 + (start + k) % 63;
        if quiet(
            "ip",
            &["link", "add", &format!("k3rs-br{n}"), "type", "bridge"],
        ) {
            return n;
        }
    }
    panic!("no free test bridge k3rs-br1..63: remove stale ones with `ip link del k3rs-brN`");
}

impl Cluster {
    /// Starts the server and `spec.agents` agents and waits until every Node is Ready with a
    /// podCIDR.
    pub fn start(spec: ClusterSpec) -> Cluster {
        require_root_and_tools();
        let base = tempfile::Builder::new()
            .prefix("k3rs-cluster-")
            .tempdir()
            .expect("temp dir")
            .keep();
        // Node state lives on a tmpfs: the kubelet's DiskPressure and image GC then measure
        // this cluster, not how full the CI disk is, and nothing of it is left on disk.
        sh(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                "size=4g,mode=0755",
                "k3rs-cluster",
                &base.to_string_lossy(),
            ],
        );
        let slot = take_slot();
        let bridge = format!("k3rs-br{slot}");
        let bridge_ip = format!("10.97.{slot}.1");
        // From here on the Drop guard cleans up, even if the rest panics.
        let server_dir = tempfile::Builder::new()
            .prefix("server-")
            .tempdir_in(&base)
            .expect("server dir");
        let mut cluster = Cluster {
            server: Server {
                child: Command::new("true").spawn().expect("placeholder child"),
                dir: server_dir,
                port: 0,
                kubeconfig: PathBuf::new(),
                started_in: Duration::ZERO,
            },
            extra_servers: Vec::new(),
            kubectl_server: 0,
            agents: Vec::new(),
            slot,
            bridge: bridge.clone(),
            cluster_cidr: format!("10.96.{}.0/22", u32::from(slot) * 4),
            token: String::new(),
            spec: spec.clone(),
            base: base.clone(),
            upstream_stop: Arc::default(),
        };
        sh(
            "ip",
            &["addr", "add", &format!("{bridge_ip}/24"), "dev", &bridge],
        );
        sh("ip", &["link", "set", &bridge, "up"]);
        if spec.upstream_dns {
            fake_upstream(&format!("{bridge_ip}:53"), cluster.upstream_stop.clone());
            std::fs::write(
                base.join("resolv.conf"),
                format!("nameserver {bridge_ip}\n"),
            )
            .expect("write the agents' resolv.conf");
        }
        cluster.start_server(&bridge_ip);
        for k in 2..=spec.servers {
            cluster.start_joining_server(k);
        }
        for i in 0..spec.agents {
            cluster.add_agent(i);
        }
        cluster.wait_nodes_ready(Duration::from_secs(120));
        cluster
    }

    fn start_server(&mut self, bridge_ip: &str) {
        let _ = self.server.child.wait();
        let port = free_port();
        let dir = self.server.dir.path().to_path_buf();
        let kubeconfig = dir.join("kubeconfig.yaml");
        let log = std::fs::File::create(dir.join("server.log")).expect("log file");
        let started = Instant::now();
        let child = Command::new(k3rs_bin())
            .arg("server")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--bind-address", bridge_ip])
            .args(["--https-listen-port", &port.to_string()])
            .arg("--write-kubeconfig")
            .arg(&kubeconfig)
            .args(["--cluster-cidr", &self.cluster_cidr])
            .arg("--disable-agent")
            .args(if self.spec.servers > 1 {
                vec![
                    "--cluster-init".to_string(),
                    "--advertise-address".to_string(),
                    bridge_ip.to_string(),
                    "--node-name".to_string(),
                    format!("server-{}-1", self.slot),
                ]
            } else {
                Vec::new()
            })
            .env_remove("K3RS_TOKEN")
            .env_remove("K3RS_DATA_DIR")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start k3rs server");
        self.server.child = child;
        self.server.port = port;
        self.server.kubeconfig = kubeconfig.clone();
        wait_readyz(
            &mut self.server.child,
            &kubeconfig,
            Duration::from_secs(30),
            Duration::from_millis(50),
            &dir.join("server.log"),
        );
        self.server.started_in = started.elapsed();
        self.token = std::fs::read_to_string(dir.join("data/server/node-token"))
            .expect("node-token")
            .trim()
            .to_string();
    }

    /// Starts server `k` (2, 3, …) on the bridge's `.k`, joining the first with its full
    /// token, and waits for its `/readyz`.
    fn start_joining_server(&mut self, k: usize) {
        let ip = format!("10.97.{}.{k}", self.slot);
        sh(
            "ip",
            &["addr", "add", &format!("{ip}/24"), "dev", &self.bridge],
        );
        let full_token = std::fs::read_to_string(self.server.dir.path().join("data/server/token"))
            .expect("the first server's full token")
            .trim()
            .to_string();
        let dir = tempfile::Builder::new()
            .prefix(&format!("server{k}-"))
            .tempdir_in(&self.base)
            .expect("server dir");
        let kubeconfig = dir.path().join("kubeconfig.yaml");
        let log = std::fs::File::create(dir.path().join("server.log")).expect("log file");
        let started = Instant::now();
        let child = Command::new(k3rs_bin())
            .arg("server")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--bind-address", &ip, "--advertise-address", &ip])
            .args(["--https-listen-port", &self.server.port.to_string()])
            .args(["--node-name", &format!("server-{}-{k}", self.slot)])
            .args(["--server", &self.server_url(), "--token", &full_token])
            .arg("--write-kubeconfig")
            .arg(&kubeconfig)
            .args(["--cluster-cidr", &self.cluster_cidr])
            .arg("--disable-agent")
            .env_remove("K3RS_TOKEN")
            .env_remove("K3RS_DATA_DIR")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start a joining k3rs server");
        let mut server = Server {
            child,
            dir,
            port: self.server.port,
            kubeconfig: kubeconfig.clone(),
            started_in: Duration::ZERO,
        };
        wait_readyz(
            &mut server.child,
            &kubeconfig,
            Duration::from_secs(60),
            Duration::from_millis(100),
            &server.dir.path().join("server.log"),
        );
        server.started_in = started.elapsed();
        self.extra_servers.push(server);
    }

    /// The server URL agents use.
    pub fn server_url(&self) -> String {
        format!("https://10.97.{}.1:{}", self.slot, self.server.port)
    }

    /// Creates the namespace and veth of agent `i` and starts it (not waiting).
    pub fn add_agent(&mut self, i: usize) {
        let slot = self.slot;
        let netns = format!("k3rs-n{slot}-{i}");
        let veth = format!("k3v{slot}-{i}");
        let ip = format!("10.97.{slot}.{}", 10 + i);
        let name = format!("node-{slot}-{i}");
        if self.agents.iter().all(|a| a.netns != netns) {
            sh("ip", &["netns", "add", &netns]);
            sh(
                "ip",
                &[
                    "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &netns,
                ],
            );
            sh("ip", &["link", "set", &veth, "master", &self.bridge, "up"]);
            let inside = |args: &[&str]| sh("ip", &[&["-n", netns.as_str()], args].concat());
            inside(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
            inside(&["link", "set", "eth0", "up"]);
            inside(&["link", "set", "lo", "up"]);
            inside(&["route", "add", "default", "via", &format!("10.97.{slot}.1")]);
        }
        let dir = self.base.join(format!("agent-{i}"));
        std::fs::create_dir_all(&dir).expect("agent dir");
        super::images::TestImage::busybox().write_to(&dir.join("data/agent/images"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("agent.log"))
            .expect("agent log");
        let started = Instant::now();
        let mut command = Command::new("nsenter");
        super::without_agent_env(&mut command);
        let child = command
            .arg(format!("--net=/run/netns/{netns}"))
            .arg("--")
            .arg(k3rs_bin())
            .arg("agent")
            .args(["--server", &self.server_url()])
            .args(["--token", &self.token])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--node-name", &name])
            .args(["--node-ip", &ip])
            .arg("--private-registry")
            .arg(dir.join("registries.yaml"))
            .args(&self.spec.agent_args)
            .args(
                self.spec
                    .upstream_dns
                    .then(|| format!("--resolv-conf={}", self.base.join("resolv.conf").display())),
            )
            .env("K3RS_RUN_DIR", dir.join("run"))
            .env("K3RS_POD_LOG_DIR", dir.join("pod-logs"))
            .env("K3RS_KUBELET_PORT", "10250")
            .env("RUST_LOG", "info,k3rs::network=debug")
            .envs(self.spec.agent_env.iter().map(|(k, v)| (k, v)))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start k3rs agent");
        let agent = Agent {
            name,
            netns,
            ip,
            dir,
            child: Some(child),
            started,
            ready_in: None,
        };
        match self.agents.get_mut(i) {
            Some(slot) => {
                slot.stop();
                *slot = agent;
            }
            None => self.agents.push(agent),
        }
    }

    /// Waits until every agent's Node is Ready with a podCIDR, recording how long each took.
    pub fn wait_nodes_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.kubectl(&["get", "nodes", "-o", "json"]);
            let nodes: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
            let mut all = true;
            for agent in &mut self.agents {
                let node = nodes["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|n| n["metadata"]["name"] == agent.name.as_str());
                let ready = node.is_some_and(|n| {
                    n["spec"]["podCIDR"].is_string()
                        && n["status"]["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
                if ready {
                    agent
                        .ready_in
                        .get_or_insert_with(|| agent.started.elapsed());
                } else {
                    all = false;
                }
            }
            if all {
                return;
            }
            for agent in &mut self.agents {
                if let Some(child) = agent.child.as_mut()
                    && let Ok(Some(status)) = child.try_wait()
                {
                    panic!("agent {} exited ({status}):\n{}", agent.name, agent.log());
                }
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .agents
                    .iter()
                    .map(|a| format!("--- {} ---\n{}", a.name, tail(&a.log(), 60)))
                    .collect();
                panic!(
                    "nodes not Ready with podCIDRs in {timeout:?}:\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops agent `i` (SIGTERM): its containers keep running, as in k3s.
    pub fn stop_agent(&mut self, i: usize) {
        self.agents[i].stop();
    }

    /// Runs kubectl (on PATH) against the server.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_stdin(args, None)
    }

    pub fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let server = match self.kubectl_server {
            0 => &self.server,
            i => &self.extra_servers[i - 1],
        };
        server.kubectl_with(Path::new("kubectl"), args, stdin)
    }

    /// kubectl that must succeed; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn apply(&self, yaml: &str) {
        let out = self.kubectl_stdin(&["apply", "-f", "-"], Some(yaml));
        assert!(
            out.status.success(),
            "kubectl apply failed: {}\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits until pod `ns/name` is Running and returns its IP.
    pub fn wait_pod_running(&self, ns: &str, name: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.kubectl(&["get", "pod", "-n", ns, name, "-o", "json"]);
            let pod: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
            if pod["status"]["phase"] == "Running"
                && let Some(ip) = pod["status"]["podIP"].as_str()
            {
                return ip.to_string();
            }
            if Instant::now() > deadline {
                let events = self.kubectl(&["get", "events", "-n", ns]);
                panic!(
                    "pod {ns}/{name} not Running in {timeout:?}: {}\nevents:\n{}\n{}",
                    serde_json::to_string_pretty(&pod["status"]).unwrap_or_default(),
                    String::from_utf8_lossy(&events.stdout),
                    self.agent_logs(40)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The tails of every agent's log (for failure messages).
    pub fn agent_logs(&self, lines: usize) -> String {
        self.agents
            .iter()
            .map(|a| format!("--- {} ---\n{}", a.name, tail(&a.log(), lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `kubectl exec` in `ns/pod`; returns (success, stdout+stderr).
    pub fn exec(&self, ns: &str, pod: &str, command: &[&str]) -> (bool, String) {
        let mut args = vec!["exec", "-n", ns, pod, "--"];
        args.extend_from_slice(command);
        let out = self.kubectl(&args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// Retries `check` every 500 ms until it returns true or `timeout` passes.
    pub fn eventually(&self, timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !check() {
            assert!(
                Instant::now() < deadline,
                "{what}: not within {timeout:?}\n{}",
                self.agent_logs(40)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Every process whose command line mentions `marker`, and all their descendants.
fn processes_under(marker: &str) -> Vec<i32> {
    let mut parent_of = Vec::new();
    let mut roots = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(marker) {
                roots.push(pid);
            }
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The ppid follows the parenthesised command name.
            if let Some(ppid) = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok())
            {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut out = roots.clone();
    let mut frontier = roots;
    while let Some(p) = frontier.pop() {
        for &(child, parent) in &parent_of {
            if parent == p && !out.contains(&child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.upstream_stop.store(true, Ordering::Relaxed);
        for agent in &mut self.agents {
            agent.stop();
        }
        for server in &mut self.extra_servers {
            let _ = server.child.kill();
            let _ = server.child.wait();
        }
        let marker = self.base.to_string_lossy().into_owned();
        // Containers are children of the shims, whose command lines name the run dir.
        let pids = processes_under(&marker);
        let pod_netns: Vec<u64> = pids
            .iter()
            .filter_map(|p| std::fs::metadata(format!("/proc/{p}/ns/net")).ok())
            .map(|m| m.ino())
            .collect();
        for &p in &pids {
            // SAFETY: kill(2) on processes this cluster started.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        for agent in &self.agents {
            let out = Command::new("ip")
                .args(["netns", "pids", &agent.netns])
                .output();
            for p in out
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                // SAFETY: processes inside this cluster's own namespace.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        // The sandboxes' network namespaces are bind mounts in /run/netns (cni-…).
        if let Ok(entries) = std::fs::read_dir("/run/netns") {
            for e in entries.flatten() {
                let path = e.path();
                if !e.file_name().to_string_lossy().starts_with("cni-") {
                    continue;
                }
                if std::fs::metadata(&path).is_ok_and(|m| pod_netns.contains(&m.ino())) {
                    let _ = Command::new("umount").arg(&path).status();
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut mounts: Vec<String> = mountinfo
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&marker))
            .map(str::to_string)
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = Command::new("umount").args(["-l", &m]).status();
        }
        for agent in &self.agents {
            quiet("ip", &["netns", "del", &agent.netns]);
        }
        quiet("ip", &["link", "del", &self.bridge]);
        let _ = self.server.child.kill();
        let _ = self.server.child.wait();
        if std::env::var_os("K3RS_KEEP_CLUSTER_DIR").is_none() {
            let _ = std::fs::remove_dir_all(&self.base);
        } else {
            eprintln!("kept {}", self.base.display());
        }
    }
}
