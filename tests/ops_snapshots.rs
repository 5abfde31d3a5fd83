//! `k3rs etcd-snapshot` end to end against the real binary: save → ls → delete →
//! prune; admin-only access; restore brings back exactly the snapshotted objects;
//! damaged snapshots are refused before anything changes; scheduled snapshots fire
//! and keep their retention; the S3 round trip against moto (`pip install
//! 'moto[server]'`) including S3 retention and a failed upload.

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A k3rs server started by this test with its own environment.
struct Node {
    child: Option<Child>,
    data: PathBuf,
    kubeconfig: PathBuf,
    log: PathBuf,
    port: u16,
}

impl Node {
    fn start(root: &Path, extra: &[&str], env: &[(&str, &str)]) -> Node {
        let port = support::free_port();
        let data = root.join("data");
        let kubeconfig = root.join("kubeconfig.yaml");
        let log = root.join(format!("server-{port}.log"));
        let mut node = Node {
            child: None,
            data,
            kubeconfig,
            log,
            port,
        };
        node.spawn(extra, env);
        node
    }

    fn spawn(&mut self, extra: &[&str], env: &[(&str, &str)]) {
        let log = std::fs::File::create(&self.log).expect("log");
        let mut cmd = Command::new(support::k3rs_bin());
        cmd.arg("server")
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--bind-address", "127.0.0.1", "--https-listen-port"])
            .arg(self.port.to_string())
            .arg("--write-kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--disable-agent", "--node-name", "node-a"])
            .args(extra)
            .env_remove("K3RS_TOKEN")
            .env_remove("K3RS_DATA_DIR")
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("start k3rs server"));
        support::wait_readyz(
            self.child.as_mut().expect("just spawned"),
            &self.kubeconfig,
            Duration::from_secs(30),
            Duration::from_millis(50),
            &self.log,
        );
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        support::kubectl_at(&self.kubeconfig, args)
    }

    /// `k3rs etcd-snapshot <args> --kubeconfig … --data-dir …`.
    fn snapshot(&self, args: &[&str]) -> Output {
        let mut full: Vec<String> = vec!["etcd-snapshot".into()];
        full.extend(args.iter().map(|s| s.to_string()));
        full.push("--kubeconfig".into());
        full.push(self.kubeconfig.display().to_string());
        full.push("--data-dir".into());
        full.push(self.data.display().to_string());
        Command::new(support::k3rs_bin())
            .args(&full)
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .output()
            .expect("run k3rs etcd-snapshot")
    }

    fn snapshot_ok(&self, args: &[&str]) -> String {
        let out = self.snapshot(args);
        assert!(
            out.status.success(),
            "etcd-snapshot {args:?} failed: {}{}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log_text()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn list_json(&self, extra: &[&str]) -> Vec<serde_json::Value> {
        let mut args = vec!["ls", "-o", "json"];
        args.extend_from_slice(extra);
        let out = self.snapshot_ok(&args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("ls json: {e}: {out}"))
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn snapshot_dir(&self) -> PathBuf {
        self.data.join("server/db/snapshots")
    }

    fn configmaps(&self) -> Vec<String> {
        let out = self.kubectl(&[
            "get",
            "configmaps",
            "-n",
            "default",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter(|n| n.starts_with("cm-"))
            .map(str::to_string)
            .collect();
        names.sort();
        names
    }

    fn create_configmap(&self, name: &str) {
        let out = self.kubectl(&[
            "create",
            "configmap",
            name,
            "-n",
            "default",
            "--from-literal=k=v",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn names(items: &[serde_json::Value]) -> Vec<String> {
    items
        .iter()
        .map(|i| i["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn save_ls_delete_prune_and_admin_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), &["--etcd-disable-snapshots"], &[]);

    let out = node.snapshot_ok(&["save"]);
    assert!(out.contains("Snapshot on-demand-node-a-"), "{out}");
    let items = node.list_json(&[]);
    assert_eq!(items.len(), 1, "{items:?}");
    let first = &items[0];
    let name = first["name"].as_str().expect("name").to_string();
    assert!(name.starts_with("on-demand-node-a-"), "{name}");
    assert!(
        first["location"]
            .as_str()
            .expect("loc")
            .starts_with("file:///")
    );
    assert!(first["size"].as_u64().expect("size") > 0);
    assert!(first["revision"].as_i64().expect("rev") > 0);
    assert_eq!(first["node"], "node-a");
    assert_eq!(first["sha256"].as_str().expect("sha").len(), 64);
    assert!(node.snapshot_dir().join(&name).is_file());

    // The table has k3s's columns first.
    let table = node.snapshot_ok(&["ls"]);
    let header = table.lines().next().unwrap_or_default();
    assert!(header.starts_with("Name"), "{table}");
    for col in ["Location", "Size", "Created", "Node", "Revision", "Version"] {
        assert!(header.contains(col), "{table}");
    }
    assert!(table.contains(&name), "{table}");
    // `list` and yaml work too.
    assert!(
        node.snapshot_ok(&["list", "-o", "yaml"])
            .contains(&format!("name: {name}"))
    );

    // Compressed snapshots end in .gz and are gzip files.
    std::thread::sleep(Duration::from_millis(1100));
    let out = node.snapshot_ok(&["save", "--snapshot-compress", "--name", "pre-upgrade"]);
    assert!(out.contains(".gz"), "{out}");
    let gz: Vec<String> = names(&node.list_json(&[]))
        .into_iter()
        .filter(|n| n.starts_with("pre-upgrade-node-a-") && n.ends_with(".gz"))
        .collect();
    assert_eq!(gz.len(), 1);
    let bytes = std::fs::read(node.snapshot_dir().join(&gz[0])).expect("read");
    assert_eq!(&bytes[..2], &[0x1f, 0x8b]);

    // delete removes the file and its metadata; unknown names are an error.
    node.snapshot_ok(&["delete", &gz[0]]);
    assert!(!node.snapshot_dir().join(&gz[0]).exists());
    assert!(
        !node
            .snapshot_dir()
            .join(".metadata")
            .join(format!("{}.json", gz[0]))
            .exists()
    );
    let out = node.snapshot(&["delete", "no-such-snapshot"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found: no-such-snapshot"));
    let out = node.snapshot(&["save", "--name", "../escape"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid snapshot name"));

    // The endpoint works only in the configured directory: a request naming another one
    // is refused, and nothing there is touched (a delete once removed any file it named).
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let victim = elsewhere.join("victim");
    std::fs::write(&victim, b"keep me").expect("write");
    let elsewhere_arg = elsewhere.display().to_string();
    for args in [
        vec!["delete", "--dir", elsewhere_arg.as_str(), "victim"],
        vec!["save", "--dir", elsewhere_arg.as_str()],
        vec!["ls", "--dir", elsewhere_arg.as_str()],
        vec![
            "prune",
            "--dir",
            elsewhere_arg.as_str(),
            "--snapshot-retention",
            "1",
        ],
    ] {
        let out = node.snapshot(&args);
        assert!(!out.status.success(), "{args:?} must be refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("is not this server's --etcd-snapshot-dir"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(std::fs::read(&victim).expect("victim kept"), b"keep me");
    assert_eq!(std::fs::read_dir(&elsewhere).expect("ls").count(), 1);
    // Naming the configured directory itself is fine (the CLI may send its --dir).
    let own_dir = node.snapshot_dir().display().to_string();
    node.snapshot_ok(&["ls", "--dir", &own_dir]);
    // A per-request S3 location is refused when the server has none.
    let out = node.snapshot(&[
        "save",
        "--s3",
        "--s3-endpoint=127.0.0.1:9",
        "--s3-bucket=b",
        "--s3-insecure",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("this server has no S3 snapshot storage"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // prune keeps the newest N of on-demand-<node>-*.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(1100));
        node.snapshot_ok(&["save"]);
    }
    let before: Vec<String> = names(&node.list_json(&[]));
    assert_eq!(before.len(), 4, "{before:?}");
    let out = node.snapshot_ok(&["prune", "--snapshot-retention", "2"]);
    assert_eq!(out.matches("pruned").count(), 2, "{out}");
    let after = names(&node.list_json(&[]));
    assert_eq!(after, before[2..].to_vec(), "the two newest remain");
    let out = node.snapshot(&["prune", "--snapshot-retention", "0"]);
    assert!(!out.status.success());

    // Only system:masters may use the endpoint: the scheduler's certificate is refused.
    let tls = node.data.join("server/tls");
    let out = Command::new("kubectl")
        .args(["--kubeconfig", "/dev/null", "--server"])
        .arg(format!("https://127.0.0.1:{}", node.port))
        .arg("--certificate-authority")
        .arg(tls.join("server-ca.crt"))
        .arg("--client-certificate")
        .arg(tls.join("client-scheduler.crt"))
        .arg("--client-key")
        .arg(tls.join("client-scheduler.key"))
        .args(["get", "--raw", "/k3rs/v1/etcd-snapshots"])
        .output()
        .expect("kubectl");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Forbidden") || err.contains("forbidden"),
        "{err}"
    );
    let ok = node.kubectl(&["get", "--raw", "/k3rs/v1/etcd-snapshots"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

#[test]
fn restore_brings_back_exactly_the_snapshot_and_refuses_damage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut node = Node::start(dir.path(), &["--etcd-disable-snapshots"], &[]);
    node.create_configmap("cm-before-1");
    node.create_configmap("cm-before-2");
    node.snapshot_ok(&["save", "--name", "good"]);
    let name = names(&node.list_json(&[]))
        .into_iter()
        .find(|n| n.starts_with("good-"))
        .expect("snapshot");
    node.create_configmap("cm-after-1");
    node.kubectl(&["delete", "configmap", "cm-before-2", "-n", "default"]);
    assert_eq!(node.configmaps(), ["cm-after-1", "cm-before-1"]);

    // Restoring while the server runs is refused.
    let out = node.snapshot(&["restore", &name]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stop it first"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.stop();

    let db = node.data.join("server/db/state.db");
    let db_before = std::fs::read(&db).expect("db");
    // A truncated copy and a copy whose checksum no longer matches its metadata.
    let snaps = node.snapshot_dir();
    let full = std::fs::read(snaps.join(&name)).expect("snapshot");
    let truncated = dir.path().join("truncated.db");
    std::fs::write(&truncated, &full[..full.len() / 2]).expect("write");
    let out = node.snapshot(&["restore", truncated.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing to restore"), "{err}");
    let tampered_name = "good-node-a-1";
    std::fs::write(snaps.join(tampered_name), &full[..full.len() - 4096]).expect("write");
    std::fs::copy(
        snaps.join(".metadata").join(format!("{name}.json")),
        snaps
            .join(".metadata")
            .join(format!("{tampered_name}.json")),
    )
    .expect("copy metadata");
    let out = node.snapshot(&["restore", tampered_name]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("checksum mismatch"), "{err}");
    let out = node.snapshot(&["restore", "no-such-snapshot"]);
    assert!(!out.status.success());
    // Nothing was touched.
    assert_eq!(std::fs::read(&db).expect("db"), db_before);
    let old_dirs = std::fs::read_dir(node.data.join("server/db"))
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("old-"))
        .count();
    assert_eq!(old_dirs, 0);

    // The real restore: by name, through `server --cluster-reset`.
    let mut cmd = Command::new(support::k3rs_bin());
    let out = cmd
        .arg("server")
        .arg("--data-dir")
        .arg(&node.data)
        .arg("--write-kubeconfig")
        .arg(&node.kubeconfig)
        .args([
            "--disable-agent",
            "--node-name",
            "node-a",
            "--cluster-reset",
        ])
        .arg(format!("--cluster-reset-restore-path={name}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("cluster reset");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Start k3rs again without --cluster-reset"),
        "{text}"
    );
    let old: Vec<PathBuf> = std::fs::read_dir(node.data.join("server/db"))
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("old-"))
        })
        .collect();
    assert_eq!(old.len(), 1, "the old database is moved aside");
    assert!(old[0].join("state.db").is_file());

    node.spawn(&["--etcd-disable-snapshots"], &[]);
    assert_eq!(node.configmaps(), ["cm-before-1", "cm-before-2"]);
    // Writes continue after the restored revision.
    node.create_configmap("cm-after-restore");
    assert_eq!(
        node.configmaps(),
        ["cm-after-restore", "cm-before-1", "cm-before-2"]
    );
}

/// `server --cluster-reset --cluster-reset-restore-path` on a fresh machine with the
/// cluster's token brings back the cluster's CAs from the snapshot (the datastore keeps
/// them encrypted with the token), so the old admin kubeconfig still works; another
/// token finds no copy and says so.
#[test]
fn a_snapshot_restored_on_a_fresh_machine_brings_back_its_certificate_authorities() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_args = ["--etcd-disable-snapshots", "--token", "restore-s3cret"];
    for root in ["old", "other", "fresh"] {
        std::fs::create_dir_all(dir.path().join(root)).expect("mkdir");
    }
    let mut node = Node::start(&dir.path().join("old"), &token_args, &[]);
    node.create_configmap("cm-carried");
    node.snapshot_ok(&["save", "--name", "carry"]);
    let name = names(&node.list_json(&[]))
        .into_iter()
        .find(|n| n.starts_with("carry-"))
        .expect("snapshot");
    let snapshot = node.snapshot_dir().join(&name);
    let old_ca = std::fs::read(node.data.join("server/tls/server-ca.crt")).expect("ca");
    node.stop();

    let reset = |root: &Path, token: &str| {
        Command::new(support::k3rs_bin())
            .arg("server")
            .arg("--data-dir")
            .arg(root.join("data"))
            .arg("--write-kubeconfig")
            .arg(root.join("kubeconfig.yaml"))
            .args(["--disable-agent", "--node-name", "node-a", "--token", token])
            .arg("--cluster-reset")
            .arg(format!(
                "--cluster-reset-restore-path={}",
                snapshot.display()
            ))
            .env_remove("K3RS_TOKEN")
            .env_remove("K3RS_DATA_DIR")
            .output()
            .expect("cluster reset")
    };
    // Another token: restored, but it cannot unlock the CAs, and says so.
    let out = reset(&dir.path().join("other"), "another-token");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("no bootstrap data for this token"), "{text}");

    let fresh = dir.path().join("fresh");
    let out = reset(&fresh, "restore-s3cret");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("restored the cluster's certificate authorities"),
        "{text}"
    );
    assert_eq!(
        std::fs::read(fresh.join("data/server/tls/server-ca.crt")).expect("ca"),
        old_ca
    );
    let restored = Node::start(&fresh, &token_args, &[]);
    assert_eq!(restored.configmaps(), ["cm-carried"]);
    // The old cluster's admin credentials and CA are this server's.
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&node.kubeconfig)
        .arg(format!("--server=https://127.0.0.1:{}", restored.port))
        .args(["get", "configmap", "cm-carried", "-n", "default"])
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "the old kubeconfig against the restored server: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        restored.log_text()
    );
}

#[test]
fn scheduled_snapshots_fire_and_keep_retention() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A cron minute lasts one second: `* * * * *` fires every second.
    let node = Node::start(
        dir.path(),
        &[
            "--etcd-snapshot-schedule-cron",
            "* * * * *",
            "--etcd-snapshot-retention",
            "2",
            "--etcd-snapshot-compress",
        ],
        &[("K3RS_TEST_SNAPSHOT_MINUTE_SECONDS", "1")],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let scheduled: Vec<String> = names(&node.list_json(&[]))
            .into_iter()
            .filter(|n| n.starts_with("etcd-snapshot-node-a-"))
            .collect();
        let log = node.log_text();
        if log.matches("snapshot saved").count() >= 4 {
            assert!(scheduled.len() <= 2, "retention 2: {scheduled:?}");
            assert!(
                scheduled.iter().all(|n| n.ends_with(".gz")),
                "{scheduled:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "scheduled snapshots did not fire:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// moto's S3 server on a free port; fails with an install hint when missing.
struct Moto {
    child: Child,
    port: u16,
}

impl Moto {
    fn start() -> Moto {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port");
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start moto_server ({e}): install it with pip install 'moto[server]'")
            });
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Moto { child, port }
    }

    fn create_bucket(&self, bucket: &str) {
        let script = format!(
            "import urllib.request as u; u.urlopen(u.Request('http://127.0.0.1:{}/{bucket}', method='PUT'))",
            self.port
        );
        let status = Command::new("python3")
            .args(["-c", &script])
            .status()
            .expect("python3");
        assert!(status.success(), "creating bucket {bucket}");
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn s3_round_trip_with_retention_and_a_failed_upload() {
    let moto = Moto::start();
    moto.create_bucket("k3rs-snaps");
    let endpoint = format!("127.0.0.1:{}", moto.port);
    let s3_flags: Vec<String> = vec![
        "--etcd-s3".into(),
        format!("--etcd-s3-endpoint={endpoint}"),
        "--etcd-s3-bucket=k3rs-snaps".into(),
        "--etcd-s3-folder=cluster-a".into(),
        "--etcd-s3-insecure".into(),
        "--etcd-s3-access-key=test".into(),
        "--etcd-s3-secret-key=test".into(),
        "--etcd-s3-bucket-lookup-type=path".into(),
        "--etcd-s3-retention=2".into(),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server_args: Vec<&str> = s3_flags.iter().map(String::as_str).collect();
    server_args.extend([
        "--etcd-snapshot-schedule-cron",
        "* * * * *",
        "--etcd-snapshot-retention",
        "3",
    ]);
    let mut node = Node::start(
        dir.path(),
        &server_args,
        &[("K3RS_TEST_SNAPSHOT_MINUTE_SECONDS", "1")],
    );

    // Scheduled snapshots go to S3; S3 keeps 2, the local directory 3.
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let log = node.log_text();
        if log.matches("snapshot uploaded to S3").count() >= 4 {
            break;
        }
        assert!(Instant::now() < deadline, "no scheduled uploads:\n{log}");
        std::thread::sleep(Duration::from_millis(300));
    }
    // Each scheduled run uploads, then prunes; with a run every second a listing can
    // fall between the two, so look for a listing taken after a prune.
    let settled = Instant::now() + Duration::from_secs(10);
    let (items, remote_count, local) = loop {
        let items = node.list_json(&[]);
        let count = |prefix: &str| {
            items
                .iter()
                .filter(|i| i["location"].as_str().unwrap_or("").starts_with(prefix))
                .count()
        };
        let remote_count = count("s3://k3rs-snaps/cluster-a/etcd-snapshot-node-a-");
        let local = count("file://");
        if (1..=2).contains(&remote_count) && (2..=3).contains(&local) || Instant::now() > settled {
            break (items, remote_count, local);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        (1..=2).contains(&remote_count),
        "S3 retention 2: {items:#?}"
    );
    assert!((2..=3).contains(&local), "local retention 3: {items:#?}");
    let remote: Vec<&serde_json::Value> = items
        .iter()
        .filter(|i| {
            i["location"]
                .as_str()
                .unwrap_or("")
                .starts_with("s3://k3rs-snaps/cluster-a/etcd-snapshot-node-a-")
        })
        .collect();
    assert!(
        remote
            .iter()
            .all(|r| r["revision"].as_i64().unwrap_or(0) > 0),
        "metadata travels: {remote:?}"
    );

    // Stop the schedule for the rest: restart without it.
    node.stop();
    let mut quiet: Vec<&str> = s3_flags.iter().map(String::as_str).collect();
    quiet.push("--etcd-disable-snapshots");
    node.spawn(&quiet, &[]);

    // On-demand save with the CLI's own S3 flags: both locations.
    node.create_configmap("cm-in-s3");
    let cli_s3: Vec<String> = s3_flags
        .iter()
        .filter(|f| !f.starts_with("--etcd-s3-retention"))
        .map(|f| f.replacen("--etcd-s3", "--s3", 1))
        .collect();
    let mut args: Vec<&str> = vec!["save", "--name", "ondemand"];
    args.extend(cli_s3.iter().map(String::as_str));
    let out = node.snapshot_ok(&args);
    assert!(
        out.contains("s3://k3rs-snaps/cluster-a/ondemand-node-a-"),
        "{out}"
    );
    let name = names(&node.list_json(&[]))
        .into_iter()
        .find(|n| n.starts_with("ondemand-"))
        .expect("on-demand snapshot");

    // Another bucket than the server's is refused before anything is written.
    let mut other: Vec<String> = cli_s3.clone();
    for f in other.iter_mut() {
        if f.starts_with("--s3-bucket=") {
            *f = "--s3-bucket=no-such-bucket".into();
        }
    }
    std::thread::sleep(Duration::from_millis(1100));
    let mut args: Vec<&str> = vec!["save", "--name", "elsewhere"];
    args.extend(other.iter().map(String::as_str));
    let out = node.snapshot(&args);
    assert!(!out.status.success(), "another bucket is refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not this server's snapshot bucket"),
        "{err}"
    );
    assert!(
        !names(&node.list_json(&[]))
            .iter()
            .any(|n| n.starts_with("elsewhere-")),
        "nothing saved for a refused request"
    );

    // A failed upload (the server's bucket is missing) reports the error and keeps the
    // local file.
    node.stop();
    let mut missing: Vec<String> = s3_flags.clone();
    for f in missing.iter_mut() {
        if f.starts_with("--etcd-s3-bucket=") {
            *f = "--etcd-s3-bucket=no-such-bucket".into();
        }
    }
    let mut missing_args: Vec<&str> = missing.iter().map(String::as_str).collect();
    missing_args.push("--etcd-disable-snapshots");
    node.spawn(&missing_args, &[]);
    let out = node.snapshot(&["save", "--name", "failing"]);
    assert!(!out.status.success(), "a failed upload is an error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NoSuchBucket") && err.contains("is kept"),
        "{err}"
    );
    assert!(
        names(&node.list_json(&[]))
            .iter()
            .any(|n| n.starts_with("failing-node-a-")),
        "the local snapshot survives the failed upload"
    );
    node.stop();
    node.spawn(&quiet, &[]);

    // Restore from S3 by name after the local copy is gone.
    node.create_configmap("cm-after-s3");
    node.stop();
    std::fs::remove_file(node.snapshot_dir().join(&name)).expect("remove local copy");
    let mut args: Vec<&str> = vec!["restore", &name];
    args.extend(cli_s3.iter().map(String::as_str));
    let out = node.snapshot(&args);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    node.spawn(&quiet, &[]);
    assert_eq!(node.configmaps(), ["cm-in-s3"]);

    // Delete removes it from S3 as well.
    let mut args: Vec<&str> = vec!["delete", &name];
    args.extend(cli_s3.iter().map(String::as_str));
    let out = node.snapshot_ok(&args);
    assert!(out.contains("s3://"), "{out}");
    assert!(!names(&node.list_json(&[])).contains(&name));
}
