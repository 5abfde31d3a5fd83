//! Living under systemd: `Type=notify` (READY=1 only once /readyz answers, STATUS
//! lines, watchdog pings, STOPPING=1 and a clean exit on SIGTERM) with a socket of the
//! test's own as NOTIFY_SOCKET; journald-style logs; the unit files pass
//! `systemd-analyze verify`; `k3rs check-config`'s exit code matches its report.

mod support;

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[test]
fn notify_ready_only_after_readyz_then_watchdog_and_stopping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind notify socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let port = support::free_port();
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).expect("log");
    let mut child = Command::new(support::k3rs_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--bind-address", "127.0.0.1", "--https-listen-port"])
        .arg(port.to_string())
        .arg("--write-kubeconfig")
        .arg(&kubeconfig)
        .args(["--disable-agent", "--etcd-disable-snapshots"])
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "200000")
        .env("JOURNAL_STREAM", "8:12345")
        .env_remove("WATCHDOG_PID")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start k3rs server");

    // Each datagram, and whether /readyz answered 200 right when READY=1 arrived.
    let (tx, rx) = mpsc::channel::<(String, Option<bool>)>();
    let reader_kubeconfig = kubeconfig.clone();
    let reader = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut buf = [0u8; 4096];
        while Instant::now() < deadline {
            let Ok(n) = socket.recv(&mut buf) else {
                continue;
            };
            let message = String::from_utf8_lossy(&buf[..n]).into_owned();
            let ready_check = message.lines().any(|l| l == "READY=1").then(|| {
                Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(&reader_kubeconfig)
                    .args(["get", "--raw", "/readyz"])
                    .output()
                    .map(|o| o.status.success())
                    .unwrap_or(false)
            });
            let stop = message.contains("STOPPING=1");
            if tx.send((message, ready_check)).is_err() || stop {
                return;
            }
        }
    });

    let mut messages: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut ready_seen = false;
    while !ready_seen {
        assert!(Instant::now() < deadline, "no READY=1; got {messages:?}");
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "server exited ({status}): {}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        if let Ok((message, ready_check)) = rx.recv_timeout(Duration::from_millis(200)) {
            if let Some(ok) = ready_check {
                assert!(ok, "READY=1 arrived before /readyz answered 200");
                ready_seen = true;
            }
            messages.push(message);
        }
    }
    let ready_at = messages.len() - 1;
    assert!(
        messages[..ready_at]
            .iter()
            .any(|m| m.starts_with("STATUS=")),
        "STATUS lines while starting: {messages:?}"
    );
    assert!(
        !messages[..ready_at]
            .iter()
            .any(|m| m.contains("WATCHDOG=1"))
    );
    assert_eq!(messages[ready_at], "READY=1\nSTATUS=k3rs is running");

    // Watchdog pings every WATCHDOG_USEC/2.
    let mut pings = 0;
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        if let Ok((message, _)) = rx.recv_timeout(Duration::from_millis(100))
            && message == "WATCHDOG=1"
        {
            pings += 1;
        }
    }
    assert!(pings >= 5, "expected a ping every 100ms, got {pings} in 2s");

    // SIGTERM: STOPPING=1, then a clean exit.
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let mut stopping = false;
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until && !stopping {
        if let Ok((message, _)) = rx.recv_timeout(Duration::from_millis(100)) {
            stopping = message.starts_with("STOPPING=1");
        }
    }
    assert!(stopping, "no STOPPING=1 after SIGTERM");
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        assert!(Instant::now() < until, "server did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "clean exit on SIGTERM: {status}");
    let _ = reader.join();

    // Under journald: syslog priorities, no timestamps of our own.
    let log = std::fs::read_to_string(&log_path).expect("log");
    let lines: Vec<&str> = log.lines().collect();
    assert!(!lines.is_empty());
    for line in &lines {
        // `<6>INFO target: ...`: a priority, then the level, no timestamp first.
        let rest = line
            .strip_prefix('<')
            .and_then(|r| r.get(2..))
            .unwrap_or_else(|| panic!("journald line without priority: {line:?}"));
        assert!(
            ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"]
                .iter()
                .any(|l| rest.starts_with(l))
                || !rest.starts_with(|c: char| c.is_ascii_digit()),
            "timestamp or junk in {line:?}"
        );
    }
    assert!(
        log.contains("<6>INFO k3rs::cli::server: k3rs is up and running"),
        "{log}"
    );
}

#[test]
fn unit_files_pass_systemd_analyze_verify() {
    let analyze = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or_else(|| panic!("systemd-analyze is missing: apt-get install -y systemd"));
    let dir = tempfile::tempdir().expect("tempdir");
    let bin_dir = std::path::Path::new(support::k3rs_bin())
        .parent()
        .expect("bin dir")
        .to_str()
        .expect("utf-8")
        .to_string();
    let mut units = Vec::new();
    for kind in ["server", "agent"] {
        let out = Command::new(support::k3rs_bin())
            .args(["systemd-unit", kind, "--bin-dir", &bin_dir, "--", "--debug"])
            .output()
            .expect("systemd-unit");
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).expect("utf-8");
        assert!(
            text.contains(&format!("ExecStart={bin_dir}/k3rs {kind} --debug\n")),
            "{text}"
        );
        let name = if kind == "server" {
            "k3rs.service"
        } else {
            "k3rs-agent.service"
        };
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write unit");
        units.push(path);
    }
    let out = Command::new(analyze)
        .arg("verify")
        .args(&units)
        .env("SYSTEMD_LOG_LEVEL", "notice")
        .output()
        .expect("systemd-analyze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{stderr}"
    );
    assert!(
        !stderr.contains("k3rs"),
        "warnings about our units:\n{stderr}"
    );

    // The files in systemd/ are what the binary embeds.
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new(support::k3rs_bin())
        .args(["systemd-unit", "server"])
        .output()
        .expect("systemd-unit");
    let embedded = String::from_utf8(out.stdout).expect("utf-8");
    let file = std::fs::read_to_string(format!("{root}/systemd/k3rs.service")).expect("unit");
    assert_eq!(embedded, file);
}

#[test]
fn check_config_exit_code_matches_its_report() {
    let out = Command::new(support::k3rs_bin())
        .arg("check-config")
        .output()
        .expect("check-config");
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    assert!(last.starts_with("STATUS: "), "{text}");
    for section in [
        "Kernel: namespaces:",
        "Kernel: cgroups:",
        "Kernel: modules:",
        "Binaries:",
    ] {
        assert!(text.contains(section), "{text}");
    }
    for item in [
        "overlay",
        "nf_tables",
        "br_netfilter",
        "vxlan",
        "containerd",
        "runc",
        "nft",
        "CNI plugin bridge",
    ] {
        assert!(
            text.contains(&format!("- {item}: ")),
            "{item} missing from:\n{text}"
        );
    }
    assert_eq!(
        out.status.success(),
        last.starts_with("STATUS: pass"),
        "{text}"
    );
    if !out.status.success() {
        assert!(
            text.contains("fix: "),
            "every missing item says what to do:\n{text}"
        );
    }
}

/// The agent under `Type=notify`: `STATUS=` lines while it joins and starts its runtime,
/// `READY=1` only once its Node object exists in the API, `STOPPING=1` and a clean exit on
/// SIGTERM. Root: the agent runs its own containerd in a network namespace of the test's.
#[test]
fn agent_notifies_ready_once_its_node_is_registered() {
    use support::cluster::{Cluster, ClusterSpec};
    let dir = tempfile::tempdir().expect("tempdir");
    let socket_path = dir.path().join("agent-notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind notify socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let socket_env = socket_path.to_string_lossy().into_owned();
    let mut cluster = Cluster::start(ClusterSpec::new(0).agent_env("NOTIFY_SOCKET", &socket_env));
    let node = format!("node-{}-0", cluster.slot);

    // Each datagram, and (for READY=1) whether the Node existed when it arrived.
    let (tx, rx) = mpsc::channel::<(String, Option<bool>)>();
    let kubeconfig = cluster.server.kubeconfig.clone();
    let reader_node = node.clone();
    let reader = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(150);
        let mut buf = [0u8; 4096];
        while Instant::now() < deadline {
            let Ok(n) = socket.recv(&mut buf) else {
                continue;
            };
            let message = String::from_utf8_lossy(&buf[..n]).into_owned();
            let node_check = message.lines().any(|l| l == "READY=1").then(|| {
                Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["get", "node", &reader_node, "-o", "name"])
                    .output()
                    .map(|o| o.status.success())
                    .unwrap_or(false)
            });
            let stop = message.contains("STOPPING=1");
            if tx.send((message, node_check)).is_err() || stop {
                return;
            }
        }
    });
    cluster.add_agent(0);

    let mut messages: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            Instant::now() < deadline,
            "no READY=1 from the agent; got {messages:?}\n{}",
            cluster.agent_logs(40)
        );
        if let Ok((message, node_check)) = rx.recv_timeout(Duration::from_millis(200)) {
            messages.push(message);
            if let Some(registered) = node_check {
                assert!(registered, "READY=1 arrived before Node {node} existed");
                break;
            }
        }
    }
    let ready_at = messages.len() - 1;
    assert_eq!(messages[ready_at], "READY=1\nSTATUS=k3rs agent is running");
    for expected in ["Joining the cluster", "Starting the container runtime"] {
        assert!(
            messages[..ready_at]
                .iter()
                .any(|m| m.starts_with("STATUS=") && m.contains(expected)),
            "a STATUS line saying {expected:?} before READY=1: {messages:?}"
        );
    }
    cluster.wait_nodes_ready(Duration::from_secs(60));

    let agent = cluster.agents[0].child.as_mut().expect("agent process");
    // SAFETY: kill(2) on the agent this test started.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    let until = Instant::now() + Duration::from_secs(15);
    let mut stopping = false;
    while Instant::now() < until && !stopping {
        if let Ok((message, _)) = rx.recv_timeout(Duration::from_millis(100)) {
            stopping = message.starts_with("STOPPING=1");
        }
    }
    assert!(stopping, "no STOPPING=1 from the agent after SIGTERM");
    let status = loop {
        if let Ok(Some(status)) = agent.try_wait() {
            break status;
        }
        assert!(Instant::now() < until, "agent did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "clean agent exit on SIGTERM: {status}");
    let _ = reader.join();
}
