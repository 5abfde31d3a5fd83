//! High availability (issue 23): several real `k3rs server` processes form one raft group
//! by joining with the token, each on its own loopback address (127.0.N.x, default ports
//! 6443 and 2380), with `--disable-agent`. Writes and reads go through every server's API
//! with kube-rs; servers are killed with SIGKILL; partitions are nftables drops between
//! the loopback addresses (root only).

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::Value;

const TOKEN_SECRET: &str = "s3cret-ha-test";

/// One server of a test group.
struct Member {
    name: String,
    ip: String,
    dir: PathBuf,
    child: Option<Child>,
    extra: Vec<String>,
}

impl Member {
    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig.yaml")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    fn url(&self) -> String {
        format!("https://{}:6443", self.ip)
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .expect("log file");
        let child = Command::new(support::k3rs_bin())
            .arg("server")
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--bind-address", &self.ip, "--advertise-address", &self.ip])
            .args(["--node-name", &self.name])
            .arg("--write-kubeconfig")
            .arg(self.kubeconfig())
            .arg("--disable-agent")
            .args(&self.extra)
            .env_remove("K3RS_TOKEN")
            .env_remove("K3RS_URL")
            .env_remove("K3RS_DATA_DIR")
            .env("RUST_LOG", "info")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start k3rs server");
        self.child = Some(child);
    }

    /// Waits for `/readyz`; panics with the log if the process exits or time runs out.
    fn wait_ready(&mut self, timeout: Duration) {
        if let Err(e) = self.try_wait_ready(timeout) {
            panic!("{e}:\n{}", self.log());
        }
    }

    fn try_wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!("{} exited early ({status})", self.name));
            }
            if self.kubeconfig().exists() {
                let out = Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(self.kubeconfig())
                    .args(["get", "--raw", "/readyz", "--request-timeout=2s"])
                    .output()
                    .expect("run kubectl (install kubectl)");
                if out.status.success() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!("{} not ready in {timeout:?}", self.name));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A clean stop (SIGTERM, as `systemctl stop` sends); panics if it takes over 30 s.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{} did not stop within 30 s of SIGTERM", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    async fn client(&self) -> kube::Client {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(self.kubeconfig()).expect("read kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("kubeconfig");
        config.read_timeout = Some(Duration::from_secs(10));
        config.write_timeout = Some(Duration::from_secs(10));
        config.connect_timeout = Some(Duration::from_secs(2));
        kube::Client::try_from(config).expect("client")
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A group of servers on `127.0.<subnet>.1..=n`.
struct Group {
    members: Vec<Member>,
    _root: tempfile::TempDir,
    /// One group at a time: a failover measured while another test starts five servers
    /// on the same two cores measures the machine, not the failover. Dropped last, after
    /// the members are killed.
    _serial: std::sync::MutexGuard<'static, ()>,
}

static ONE_GROUP_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Group {
    /// Starts the first server with `--cluster-init`, then joins `n - 1` more with its
    /// full token, one after another, and waits until all are voters.
    fn start(subnet: u8, n: usize) -> Group {
        let serial = ONE_GROUP_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let root = tempfile::tempdir().expect("temp dir");
        let mut members = Vec::new();
        for i in 1..=n {
            let dir = root.path().join(format!("server-{i}"));
            std::fs::create_dir_all(&dir).expect("dir");
            members.push(Member {
                name: format!("server-{i}"),
                ip: format!("127.0.{subnet}.{i}"),
                dir,
                child: None,
                extra: Vec::new(),
            });
        }
        members[0].extra = vec![
            "--cluster-init".into(),
            "--token".into(),
            TOKEN_SECRET.into(),
        ];
        members[0].spawn();
        members[0].wait_ready(Duration::from_secs(60));
        let token = std::fs::read_to_string(members[0].dir.join("data/server/token"))
            .expect("the first server's token file")
            .trim()
            .to_string();
        assert!(token.starts_with("K10"), "full token: {token}");
        let first_url = members[0].url();
        for member in members.iter_mut().skip(1) {
            member.extra = vec![
                "--server".into(),
                first_url.clone(),
                "--token".into(),
                token.clone(),
            ];
            member.spawn();
            member.wait_ready(Duration::from_secs(60));
        }
        let group = Group {
            members,
            _root: root,
            _serial: serial,
        };
        group.wait_voters(n, Duration::from_secs(30));
        group
    }

    /// Restarts member `i` (same data dir and flags) and waits for it; panics with every
    /// member's log.
    fn restart(&mut self, i: usize) {
        self.members[i].spawn();
        if let Err(e) = self.members[i].try_wait_ready(Duration::from_secs(60)) {
            panic!("{e}:\n{}", self.logs());
        }
    }

    fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let log: String = m
                    .log()
                    .lines()
                    .filter(|l| !l.contains("reconciling object"))
                    .collect::<Vec<_>>()
                    .join("\n");
                format!("===== {} =====\n{}\n", m.name, tail(&log, 80))
            })
            .collect()
    }

    /// A kube client for every member, in order.
    fn clients(&self, rt: &tokio::runtime::Runtime) -> Vec<kube::Client> {
        self.members
            .iter()
            .map(|m| rt.block_on(m.client()))
            .collect()
    }

    /// The member list as one live server sees it.
    fn members_seen_by(&self, index: usize) -> Option<Vec<Value>> {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.members[index].kubeconfig())
            .args(["get", "--raw", "/v1-k3rs/members", "--request-timeout=3s"])
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let value: Value = serde_json::from_slice(&out.stdout).ok()?;
        value["members"].as_array().cloned()
    }

    fn wait_voters(&self, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let voters = self
                .members_seen_by(0)
                .map(|m| m.iter().filter(|m| m["role"] == "voter").count())
                .unwrap_or(0);
            if voters == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{voters} of {n} voters after {timeout:?}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The index of the member that leads, as the live ones agree.
    fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            for (i, member) in self.members.iter().enumerate() {
                if member.child.is_none() {
                    continue;
                }
                if let Some(list) = self.members_seen_by(i)
                    && let Some(leader) = list.iter().find(|m| m["isLeader"] == true)
                    && let Some(index) = self
                        .members
                        .iter()
                        .position(|m| leader["name"] == m.name.as_str())
                {
                    return index;
                }
            }
            assert!(Instant::now() < deadline, "no leader:\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn config_map(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"v": value},
    }))
    .expect("config map")
}

/// Every ConfigMap of `default` whose name starts with `prefix`, name → resourceVersion.
async fn config_maps(client: &kube::Client, prefix: &str) -> BTreeMap<String, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let list = api
        .list(&ListParams::default())
        .await
        .expect("list config maps");
    list.items
        .into_iter()
        .filter_map(|cm| {
            let name = cm.metadata.name?;
            name.starts_with(prefix)
                .then(|| (name, cm.metadata.resource_version.unwrap_or_default()))
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn three_servers_join_and_every_server_reads_every_write() {
    let group = Group::start(31, 3);
    let rt = runtime();
    rt.block_on(async {
        let clients = [
            group.members[0].client().await,
            group.members[1].client().await,
            group.members[2].client().await,
        ];
        // Written through one server, read at once through the others: same object,
        // same resourceVersion.
        for round in 0..9 {
            let writer = round % 3;
            let name = format!("ryw-{round}");
            let api: Api<ConfigMap> = Api::namespaced(clients[writer].clone(), "default");
            let created = api
                .create(
                    &PostParams::default(),
                    &config_map(&name, &round.to_string()),
                )
                .await
                .unwrap_or_else(|e| {
                    panic!("create through server {writer}: {e}\n{}", group.logs())
                });
            let rv = created.metadata.resource_version.clone().expect("rv");
            for (reader, client) in clients.iter().enumerate() {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
                let got = api.get(&name).await.unwrap_or_else(|e| {
                    panic!(
                        "{name} written through {writer} not readable through {reader}: {e}\n{}",
                        group.logs()
                    )
                });
                assert_eq!(
                    got.metadata.resource_version.as_deref(),
                    Some(rv.as_str()),
                    "same revision on every server"
                );
            }
        }
        // A watch on a follower from a revision written through the leader sees the
        // next write made through the third server.
        let lists: Vec<BTreeMap<String, String>> = futures_lists(&clients, "ryw-").await;
        assert_eq!(lists[0], lists[1]);
        assert_eq!(lists[1], lists[2]);
        assert_eq!(lists[0].len(), 9);

        // A server's Node (registered here by hand: these servers run no agent) gets
        // the etcd role label and the member annotations from that server, as k3s does.
        let nodes: Api<Node> = Api::all(clients[0].clone());
        let node: Node = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": group.members[1].name},
        }))
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let node = nodes.get(&group.members[1].name).await.expect("get node");
            let labels = node.metadata.labels.unwrap_or_default();
            let annotations = node.metadata.annotations.unwrap_or_default();
            if labels
                .get("node-role.kubernetes.io/etcd")
                .map(String::as_str)
                == Some("true")
            {
                assert_eq!(
                    annotations.get("etcd.k3rs.io/peer-url"),
                    Some(&format!("https://{}:2380", group.members[1].ip))
                );
                assert_eq!(
                    annotations.get("etcd.k3s.cattle.io/node-name"),
                    Some(&group.members[1].name)
                );
                assert!(annotations.contains_key("etcd.k3rs.io/member-id"));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the etcd role label never appeared: {labels:?}\n{}",
                group.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    // The member list shows three voters with their names and peer URLs.
    let members = group.members_seen_by(2).expect("members");
    for member in &group.members {
        let seen = members
            .iter()
            .find(|m| m["name"] == member.name.as_str())
            .unwrap_or_else(|| panic!("{} not in {members:?}", member.name));
        assert_eq!(seen["peerURL"], format!("https://{}:2380", member.ip));
        assert_eq!(seen["role"], "voter");
    }
    // Joins and leader elections are logged at info.
    assert!(
        group.members[0]
            .log()
            .contains("raft membership change applied")
    );
    // etcd's metric names, on every server; the leader measures peer round trips.
    let leader = group.leader();
    for (i, member) in group.members.iter().enumerate() {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(member.kubeconfig())
            .args(["get", "--raw", "/metrics"])
            .output()
            .expect("kubectl");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("etcd_server_has_leader 1"), "{text}");
        assert!(text.contains("etcd_server_leader_changes_seen_total"));
        assert!(text.contains("etcd_server_proposals_failed_total"));
        assert_eq!(
            text.contains("etcd_server_is_leader 1"),
            i == leader,
            "only the leader says it leads"
        );
        if i == leader {
            assert!(
                text.contains("etcd_network_peer_round_trip_time_seconds_count{To="),
                "{text}"
            );
        }
    }
}

#[test]
fn five_servers_form_one_group() {
    let group = Group::start(36, 5);
    let rt = runtime();
    rt.block_on(async {
        let mut clients = Vec::new();
        for member in &group.members {
            clients.push(member.client().await);
        }
        for (i, client) in clients.iter().enumerate() {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
            api.create(
                &PostParams::default(),
                &config_map(&format!("five-{i}"), "x"),
            )
            .await
            .unwrap_or_else(|e| panic!("create through server {i}: {e}"));
        }
        let lists = futures_lists(&clients, "five-").await;
        for list in &lists {
            assert_eq!(list.len(), 5);
            assert_eq!(list, &lists[0]);
        }
    });
}

/// With two of three servers gone the survivor has no quorum: writes fail within the
/// request timeout with a Status that says so (no hang, no crash), and reads with
/// resourceVersion=0 still answer from the cache.
#[test]
fn without_quorum_writes_fail_clearly_and_cached_reads_answer() {
    let mut group = Group::start(37, 3);
    let rt = runtime();
    let client = rt.block_on(group.members[0].client());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    rt.block_on(api.create(&PostParams::default(), &config_map("quorum-before", "x")))
        .expect("create");
    group.members[1].kill();
    group.members[2].kill();
    // kubectl, as a user would (kube-rs retries 503s by itself).
    let started = Instant::now();
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(group.members[0].kubeconfig())
        .args([
            "create",
            "configmap",
            "quorum-after",
            "--request-timeout=30s",
        ])
        .output()
        .expect("kubectl");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a write without quorum must fail");
    assert!(
        stderr.contains("quorum"),
        "the error says the datastore lost its quorum: {stderr}\n{}",
        group.logs()
    );
    assert!(took < Duration::from_secs(12), "failed only after {took:?}");
    let listed = rt
        .block_on(api.list(&ListParams::default().match_any()))
        .map(|l| l.items.len());
    assert!(
        listed.as_ref().is_ok_and(|n| *n >= 1),
        "a resourceVersion=0 list answers from the cache: {listed:?}"
    );
    // /readyz says why.
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(group.members[0].kubeconfig())
        .args(["get", "--raw", "/readyz?verbose"])
        .output()
        .expect("kubectl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "readyz fails without quorum: {text}");
    // The process is still up.
    assert!(
        group.members[0]
            .child
            .as_mut()
            .is_some_and(|c| c.try_wait().is_ok_and(|s| s.is_none())),
        "the survivor keeps running"
    );
}

async fn futures_lists(clients: &[kube::Client], prefix: &str) -> Vec<BTreeMap<String, String>> {
    let mut lists = Vec::new();
    for client in clients {
        lists.push(config_maps(client, prefix).await);
    }
    lists
}

/// What the writers of a load run saw.
#[derive(Default)]
struct LoadRecord {
    /// name → resourceVersion of every acknowledged create.
    acknowledged: std::sync::Mutex<BTreeMap<String, String>>,
    /// When the first write that started after the kill succeeded.
    first_success_after_kill: std::sync::Mutex<Option<Instant>>,
}

#[test]
fn leader_killed_under_load_loses_no_acknowledged_write_and_returns_by_snapshot() {
    let mut group = Group::start(32, 3);
    let rt = runtime();
    let leader = group.leader();
    let mut clients = Vec::new();
    for member in &group.members {
        clients.push(rt.block_on(member.client()));
    }
    let record = Arc::new(LoadRecord::default());
    let stop = Arc::new(AtomicBool::new(false));
    let dead = Arc::new(AtomicUsize::new(usize::MAX));
    let killed_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let mut writers = Vec::new();
    for writer in 0..16usize {
        let (clients, record, stop, dead, killed_at) = (
            clients.clone(),
            record.clone(),
            stop.clone(),
            dead.clone(),
            killed_at.clone(),
        );
        writers.push(rt.spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                // Through every server in turn, skipping the one that was killed.
                let mut target = (writer + i as usize) % clients.len();
                if target == dead.load(Ordering::SeqCst) {
                    target = (target + 1) % clients.len();
                }
                let name = format!("load-{writer}-{i}");
                i += 1;
                let api: Api<ConfigMap> = Api::namespaced(clients[target].clone(), "default");
                let started = Instant::now();
                let result = tokio::time::timeout(
                    Duration::from_secs(12),
                    api.create(&PostParams::default(), &config_map(&name, "x")),
                )
                .await;
                if let Ok(Ok(created)) = result {
                    let rv = created.metadata.resource_version.unwrap_or_default();
                    record.acknowledged.lock().expect("lock").insert(name, rv);
                    let killed = *killed_at.lock().expect("lock");
                    if let Some(killed) = killed
                        && started > killed
                    {
                        let mut first = record.first_success_after_kill.lock().expect("lock");
                        if first.is_none() {
                            *first = Some(Instant::now());
                        }
                    }
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    std::thread::sleep(Duration::from_secs(3));
    let before_kill = record.acknowledged.lock().expect("lock").len();
    assert!(
        before_kill > 50,
        "the load runs: {before_kill} writes in 3 s"
    );
    dead.store(leader, Ordering::SeqCst);
    *killed_at.lock().expect("lock") = Some(Instant::now());
    let kill_time = Instant::now();
    group.members[leader].kill();
    // Writes go on through the survivors; keep them going long enough that the log is
    // truncated past the dead member (raft_log_keep is 1000 entries).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let after = record.acknowledged.lock().expect("lock").len() - before_kill;
        if after > 1600 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {after} writes after the kill in 60 s:\n{}",
            group.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let first = record
        .first_success_after_kill
        .lock()
        .expect("lock")
        .expect("a write succeeded after the kill");
    let failover = first.duration_since(kill_time);
    eprintln!("failover: first write after the leader's SIGKILL succeeded after {failover:?}");
    assert!(
        failover < Duration::from_secs(4),
        "writes resumed only after {failover:?}:\n{}",
        group.logs()
    );
    stop.store(true, Ordering::SeqCst);
    for writer in writers {
        rt.block_on(writer).expect("writer");
    }
    let acknowledged = record.acknowledged.lock().expect("lock").clone();
    // Every acknowledged write is on every survivor, with the same revision.
    for (i, client) in clients.iter().enumerate() {
        if i == leader {
            continue;
        }
        let seen = rt.block_on(config_maps(client, "load-"));
        for (name, rv) in &acknowledged {
            assert_eq!(
                seen.get(name),
                Some(rv),
                "acknowledged {name}@{rv} missing or different on server {i}"
            );
        }
    }
    // The killed server restarts (same data dir, same flags) and converges: it was
    // away for more than the kept log, so it needs a snapshot.
    group.restart(leader);
    let survivor = (leader + 1) % 3;
    let reference = rt.block_on(config_maps(&clients[survivor], "load-"));
    let client = rt.block_on(group.members[leader].client());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = rt.block_on(config_maps(&client, "load-"));
        if seen == reference {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted server did not converge ({} vs {} objects):\n{}",
            seen.len(),
            reference.len(),
            group.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        group.members[leader]
            .log()
            .contains("installing a raft snapshot"),
        "the returning member caught up by snapshot:\n{}",
        tail(&group.members[leader].log(), 100)
    );
    // It came as a file streamed in chunks, not inside a raft message.
    assert!(
        group.logs().contains("sent a raft snapshot"),
        "a survivor streamed the snapshot:\n{}",
        group.logs()
    );
    group.wait_voters(3, Duration::from_secs(10));
}

/// A join that cannot work fails with a clear message, a non-zero exit, and nothing
/// written to the data dir.
#[test]
fn joins_that_cannot_work_are_refused_and_write_nothing() {
    let group = Group::start(33, 1);
    let token = std::fs::read_to_string(group.members[0].dir.join("data/server/token"))
        .expect("token")
        .trim()
        .to_string();
    let url = group.members[0].url();
    let wrong_hash = format!("K10{}::server:{TOKEN_SECRET}", "0".repeat(64));
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "wrong token",
            vec![
                "--server".into(),
                url.clone(),
                "--token".into(),
                "nope".into(),
            ],
            "rejected the token",
        ),
        (
            "wrong CA hash",
            vec!["--server".into(), url.clone(), "--token".into(), wrong_hash],
            "does not match the hash in the token",
        ),
        (
            "other cluster CIDR",
            vec![
                "--server".into(),
                url.clone(),
                "--token".into(),
                token.clone(),
                "--cluster-cidr".into(),
                "10.99.0.0/16".into(),
            ],
            "critical configuration value mismatch",
        ),
        (
            "unreachable server",
            vec![
                "--server".into(),
                "https://127.0.33.250:6443".into(),
                "--token".into(),
                token.clone(),
            ],
            "cannot reach the server",
        ),
    ];
    for (i, (case, args, expected)) in cases.into_iter().enumerate() {
        let dir = tempfile::tempdir().expect("dir");
        let data = dir.path().join("data");
        let out = Command::new(support::k3rs_bin())
            .arg("server")
            .arg("--data-dir")
            .arg(&data)
            .args(["--bind-address", &format!("127.0.33.{}", 10 + i)])
            .args(["--node-name", &format!("joiner-{i}")])
            .arg("--write-kubeconfig")
            .arg(dir.path().join("kubeconfig.yaml"))
            .arg("--disable-agent")
            .args(&args)
            .env_remove("K3RS_TOKEN")
            .env_remove("K3RS_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("run k3rs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{case}: must fail:\n{text}");
        assert!(
            text.contains(expected),
            "{case}: message should say {expected:?}:\n{text}"
        );
        let written: Vec<_> = std::fs::read_dir(&data)
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(written.is_empty(), "{case}: wrote {written:?}");
        assert!(
            !dir.path().join("kubeconfig.yaml").exists(),
            "{case}: wrote a kubeconfig"
        );
    }
}

/// nftables rules that cut one loopback address off the others' raft peer port (both
/// directions; the API port stays open). Removed on drop.
struct Partition {
    table: String,
}

impl Partition {
    fn isolate(ip: &str, subnet: u8) -> Partition {
        let table = format!("k3rs-ha-test-{subnet}");
        let script = format!(
            "table inet {table} {{\n  chain output {{\n    type filter hook output priority 0; policy accept;\n    \
             ip saddr {ip} tcp dport 2380 drop\n    ip daddr {ip} tcp dport 2380 drop\n  }}\n}}\n"
        );
        let mut child = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("run nft (apt-get install nftables; the partition test runs as root)");
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(script.as_bytes())
            .expect("write the nft script");
        assert!(
            child.wait().expect("nft").success(),
            "nft refused:\n{script}"
        );
        Partition { table }
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", &self.table])
            .status();
    }
}

fn require_root_and_nft() {
    let uid = Command::new("id").arg("-u").output().expect("id");
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "the partition test needs root (it programs nftables), as CI runs it"
    );
    assert!(
        Command::new("nft")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "the partition test needs nft: apt-get install nftables"
    );
}

async fn create(client: &kube::Client, name: &str) -> Result<String, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    match tokio::time::timeout(
        Duration::from_secs(12),
        api.create(&PostParams::default(), &config_map(name, "x")),
    )
    .await
    {
        Ok(Ok(created)) => Ok(created.metadata.resource_version.unwrap_or_default()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in 12 s".into()),
    }
}

#[test]
fn an_isolated_leader_stops_taking_writes_and_the_majority_goes_on() {
    require_root_and_nft();
    let subnet = 34;
    let group = Group::start(subnet, 3);
    let rt = runtime();
    let leader = group.leader();
    let majority: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let mut clients = Vec::new();
    for member in &group.members {
        clients.push(rt.block_on(member.client()));
    }
    let mut acknowledged = BTreeMap::new();
    for i in 0..20 {
        let name = format!("part-before-{i}");
        let rv = rt
            .block_on(create(&clients[i % 3], &name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        acknowledged.insert(name, rv);
    }
    let partition = Partition::isolate(&group.members[leader].ip, subnet);
    let cut = Instant::now();
    // The majority elects a leader of its own and takes writes again.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut n = 0;
    let resumed = loop {
        let name = format!("part-majority-{n}");
        n += 1;
        if let Ok(rv) = rt.block_on(create(&clients[majority[n % 2]], &name)) {
            acknowledged.insert(name, rv);
            break cut.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "the majority took no write within 15 s of the partition:\n{}",
            group.logs()
        );
    };
    eprintln!("partition: the majority took writes again after {resumed:?}");
    // The cut-off leader steps down (check_quorum) and takes no write: each attempt fails.
    for i in 0..2 {
        let name = format!("part-minority-{i}");
        let outcome = rt.block_on(create(&clients[leader], &name));
        assert!(
            outcome.is_err(),
            "the isolated server acknowledged {name}: {outcome:?}"
        );
    }
    for i in 0..20 {
        let name = format!("part-during-{i}");
        let rv = rt
            .block_on(create(&clients[majority[i % 2]], &name))
            .unwrap_or_else(|e| panic!("{name} through the majority: {e}\n{}", group.logs()));
        acknowledged.insert(name, rv);
    }
    drop(partition);
    // Healed: every member holds the same objects, and nothing acknowledged is lost.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lists: Vec<BTreeMap<String, String>> = rt.block_on(futures_lists(&clients, "part-"));
        let complete = acknowledged
            .iter()
            .all(|(name, rv)| lists.iter().all(|l| l.get(name) == Some(rv)));
        if complete && lists[0] == lists[1] && lists[1] == lists[2] {
            // Writes the minority refused may or may not exist (a timed-out proposal can
            // still commit); the majority's view decides, and everyone agrees on it.
            break;
        }
        assert!(
            Instant::now() < deadline,
            "members differ 30 s after healing:\n{}",
            group.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A history of get / put / compare-and-set on a few ConfigMaps through random servers,
/// with a server killed and restarted mid-run, checked for linearizability (etcd's
/// robustness tests, with our own checker). `K3RS_HA_TRIALS` sets the number of trials.
#[test]
fn histories_with_a_killed_server_are_linearizable() {
    use support_linearizability::{Input, Operation, Output, check};
    let trials: usize = std::env::var("K3RS_HA_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let mut group = Group::start(35, 3);
    let rt = runtime();
    let epoch = Instant::now();
    for trial in 0..trials {
        let mut clients = Vec::new();
        for member in &group.members {
            clients.push(rt.block_on(member.client()));
        }
        let keys: Vec<String> = (0..3).map(|k| format!("lin-{trial}-{k}")).collect();
        for key in &keys {
            let api: Api<ConfigMap> = Api::namespaced(clients[0].clone(), "default");
            if let Err(e) =
                rt.block_on(api.create(&PostParams::default(), &config_map(key, "init")))
            {
                panic!("trial {trial}: creating {key}: {e}\n{}", group.logs());
            }
        }
        let history = Arc::new(std::sync::Mutex::new(Vec::<Operation>::new()));
        // Seed the model: the keys start with "init" (a put that finished before anything).
        for key in &keys {
            history.lock().expect("lock").push(Operation {
                client: usize::MAX,
                key: key.clone(),
                input: Input::Put("init".into()),
                output: Output::Ok,
                call: 0,
                ret: 1,
            });
        }
        let stop = Arc::new(AtomicBool::new(false));
        let down = Arc::new(AtomicUsize::new(usize::MAX));
        let mut tasks = Vec::new();
        for client_id in 0..6usize {
            let (clients, keys, history, stop, down) = (
                clients.clone(),
                keys.clone(),
                history.clone(),
                stop.clone(),
                down.clone(),
            );
            tasks.push(rt.spawn(async move {
                let mut n = 0usize;
                let mut last_seen: BTreeMap<String, String> = BTreeMap::new();
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let mut server = (client_id * 7 + n * 13) % clients.len();
                    if server == down.load(Ordering::SeqCst) {
                        server = (server + 1) % clients.len();
                    }
                    let key = keys[(client_id + n * 5) % keys.len()].clone();
                    let api: Api<ConfigMap> = Api::namespaced(clients[server].clone(), "default");
                    let value = format!("c{client_id}-{n}");
                    let kind = (client_id + n) % 3;
                    let call = epoch.elapsed().as_nanos() as u64 + 2;
                    let (input, output) = match kind {
                        0 => {
                            let got =
                                tokio::time::timeout(Duration::from_secs(8), api.get(&key)).await;
                            let output = match got {
                                Ok(Ok(cm)) => {
                                    let v = cm.data.and_then(|d| d.get("v").cloned());
                                    if let Some(v) = &v {
                                        last_seen.insert(key.clone(), v.clone());
                                    }
                                    Output::Value(v)
                                }
                                _ => Output::Unknown,
                            };
                            (Input::Get, output)
                        }
                        1 => {
                            let patch = serde_json::json!({"data": {"v": value}});
                            let done = tokio::time::timeout(
                                Duration::from_secs(8),
                                api.patch(
                                    &key,
                                    &kube::api::PatchParams::default(),
                                    &kube::api::Patch::Merge(&patch),
                                ),
                            )
                            .await;
                            let output = match done {
                                Ok(Ok(_)) => Output::Ok,
                                _ => Output::Unknown,
                            };
                            (Input::Put(value.clone()), output)
                        }
                        _ => {
                            let expected = last_seen
                                .get(&key)
                                .cloned()
                                .unwrap_or_else(|| "init".into());
                            let patch = serde_json::json!([
                                {"op": "test", "path": "/data/v", "value": expected},
                                {"op": "replace", "path": "/data/v", "value": value},
                            ]);
                            let request = http::Request::patch(format!(
                                "/api/v1/namespaces/default/configmaps/{key}"
                            ))
                            .header("Content-Type", "application/json-patch+json")
                            .body(serde_json::to_vec(&patch).expect("patch"))
                            .expect("request");
                            let done = tokio::time::timeout(
                                Duration::from_secs(8),
                                clients[server].request_text(request),
                            )
                            .await;
                            let output = match done {
                                Ok(Ok(_)) => Output::Ok,
                                Ok(Err(kube::Error::Api(status))) if status.code == 422 => {
                                    Output::CasFailed
                                }
                                _ => Output::Unknown,
                            };
                            (
                                Input::Cas {
                                    expected: Some(expected),
                                    new: value.clone(),
                                },
                                output,
                            )
                        }
                    };
                    let ret = epoch.elapsed().as_nanos() as u64 + 2;
                    history.lock().expect("lock").push(Operation {
                        client: client_id,
                        key,
                        input,
                        output,
                        call,
                        ret,
                    });
                }
            }));
        }
        std::thread::sleep(Duration::from_secs(2));
        let victim = if trial % 2 == 0 {
            group.leader()
        } else {
            (group.leader() + 1) % 3
        };
        down.store(victim, Ordering::SeqCst);
        group.members[victim].kill();
        std::thread::sleep(Duration::from_secs(3));
        group.restart(victim);
        down.store(usize::MAX, Ordering::SeqCst);
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, Ordering::SeqCst);
        for task in tasks {
            rt.block_on(task).expect("client");
        }
        let history = history.lock().expect("lock").clone();
        let completed = history
            .iter()
            .filter(|op| op.output != Output::Unknown)
            .count();
        eprintln!(
            "trial {trial}: {} operations ({completed} with an answer), server {victim} killed",
            history.len()
        );
        assert!(completed > 100, "too few operations completed: {completed}");
        if let Err(violation) = check(&history) {
            panic!("trial {trial}: {violation}\n{}", group.logs());
        }
    }
}

#[path = "support/linearizability.rs"]
mod support_linearizability;

fn kubectl_raw(member: &Member, verb: &str, path: &str) -> (bool, String) {
    kubectl(
        member,
        &[verb, "--raw", path, "--request-timeout=20s"],
        None,
    )
}

/// A joined server restarted (it no longer has `--server`'s member list, only its data)
/// must still reach every member, the first server included: once the third server is
/// down, it and the first are a bare majority and can only write together. (A restarted
/// member once took itself for member 1 and dropped everything addressed to the first
/// server, so two healthy servers stalled for good.)
#[test]
fn a_restarted_joined_server_and_the_first_server_form_a_majority() {
    let mut group = Group::start(40, 3);
    group.members[2].kill();
    group.restart(2);
    group.members[1].kill();
    let rt = runtime();
    for (index, name) in [(0, "majority-via-first"), (2, "majority-via-third")] {
        let client = rt.block_on(group.members[index].client());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match rt.block_on(create(&client, name)) {
                Ok(_) => break,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "writing through {} with servers 1 and 3 up: {e}\n{}",
                    group.members[index].name,
                    group.logs()
                ),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// `DELETE /v1-k3rs/members/<name>` removes a member (the surface node deletion will
/// use); a removal that would leave the voters without a reachable quorum is refused.
#[test]
fn members_are_removed_through_the_api_unless_quorum_would_be_lost() {
    let mut group = Group::start(38, 3);
    let leader = group.leader();
    let dead = (leader + 1) % 3;
    let live = (leader + 2) % 3;
    group.members[dead].kill();
    // check_quorum notices the dead member within an election timeout or two.
    std::thread::sleep(Duration::from_secs(3));
    let live_name = group.members[live].name.clone();
    let (ok, text) = kubectl_raw(
        &group.members[leader],
        "delete",
        &format!("/v1-k3rs/members/{live_name}"),
    );
    assert!(
        !ok,
        "removing a live voter while another is down must be refused: {text}"
    );
    assert!(text.contains("quorum"), "the refusal says why: {text}");
    // Removing the dead one leaves two live voters: done.
    let dead_name = group.members[dead].name.clone();
    let (ok, text) = kubectl_raw(
        &group.members[leader],
        "delete",
        &format!("/v1-k3rs/members/{dead_name}"),
    );
    assert!(ok, "removing {dead_name}: {text}\n{}", group.logs());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut names: Vec<String> = group
            .members_seen_by(live)
            .unwrap_or_default()
            .iter()
            .filter_map(|m| m["name"].as_str().map(str::to_string))
            .collect();
        names.sort();
        let mut want = vec![group.members[leader].name.clone(), live_name.clone()];
        want.sort();
        if names == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "members after removal: {names:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let rt = runtime();
    let client = rt.block_on(group.members[live].client());
    rt.block_on(create(&client, "after-removal"))
        .unwrap_or_else(|e| panic!("write with two voters: {e}\n{}", group.logs()));
    let (ok, text) = kubectl_raw(&group.members[leader], "delete", "/v1-k3rs/members/nobody");
    assert!(!ok && text.contains("no member named"), "{text}");
}

/// k3s's recovery after losing quorum: `--cluster-reset` on the survivor makes it a
/// one-member cluster with its data; refused while another member still runs.
#[test]
fn cluster_reset_makes_the_survivor_a_one_member_cluster_with_its_data() {
    let mut group = Group::start(39, 3);
    let rt = runtime();
    let client = rt.block_on(group.members[0].client());
    for i in 0..5 {
        rt.block_on(create(&client, &format!("reset-{i}")))
            .unwrap_or_else(|e| panic!("reset-{i}: {e}"));
    }
    let reset = |member: &Member, extra: &[&str]| {
        Command::new(support::k3rs_bin())
            .arg("server")
            .arg("--data-dir")
            .arg(member.dir.join("data"))
            .args([
                "--bind-address",
                &member.ip,
                "--advertise-address",
                &member.ip,
            ])
            .args(["--node-name", &member.name])
            .arg("--write-kubeconfig")
            .arg(member.kubeconfig())
            .arg("--disable-agent")
            .arg("--cluster-reset")
            .args(extra)
            .env_remove("K3RS_TOKEN")
            .output()
            .expect("run k3rs")
    };
    // server-1 stops; server-2 still runs: refused.
    group.members[0].kill();
    let out = reset(&group.members[0], &[]);
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "reset while others run: {text}");
    assert!(text.contains("still running"), "{text}");
    // Both others gone: the reset goes through, and the server comes back alone.
    group.members[1].kill();
    group.members[2].kill();
    let out = reset(&group.members[0], &[]);
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "reset: {text}");
    group.restart(0);
    let members = group.members_seen_by(0).expect("members");
    assert_eq!(members.len(), 1, "{members:?}");
    assert_eq!(members[0]["name"], "server-1");
    assert_eq!(members[0]["role"], "voter");
    let client = rt.block_on(group.members[0].client());
    let kept = rt.block_on(config_maps(&client, "reset-"));
    assert_eq!(kept.len(), 5, "the data survived the reset: {kept:?}");
    rt.block_on(create(&client, "after-reset"))
        .unwrap_or_else(|e| panic!("a write after the reset: {e}\n{}", group.logs()));
}

/// A server added to the group that never catches up (it died while joining) is removed
/// by the leader after `learner-max-stall` (k3s removes a learner stalled for 5 minutes),
/// so a half-joined server cannot block the group's next change for ever.
#[test]
fn a_learner_that_never_catches_up_is_removed() {
    let mut group = Group::start(41, 1);
    group.members[0].kill();
    group.members[0]
        .extra
        .extend(["--etcd-arg".into(), "learner-max-stall=3000".into()]);
    group.restart(0);
    let rt = runtime();
    // Add a member the way a joining server does (with the server token), and never
    // start it.
    let client = rt.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(group.members[0].kubeconfig())
            .expect("read kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("kubeconfig");
        config.auth_info = kube::config::AuthInfo {
            token: Some(TOKEN_SECRET.to_string().into()),
            ..Default::default()
        };
        kube::Client::try_from(config).expect("client")
    });
    let body = serde_json::json!({"name": "ghost", "peerURL": "https://127.0.41.9:2380"});
    let request = http::Request::post("/v1-k3rs/members")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).expect("json"))
        .expect("request");
    let added = rt.block_on(client.request_text(request));
    assert!(added.is_ok(), "adding a learner: {added:?}");
    let role_of_ghost = |group: &Group| {
        group.members_seen_by(0).and_then(|members| {
            members
                .iter()
                .find(|m| m["name"] == "ghost")
                .map(|m| m["role"].as_str().unwrap_or_default().to_string())
        })
    };
    assert_eq!(role_of_ghost(&group).as_deref(), Some("learner"));
    let added_at = Instant::now();
    let deadline = added_at + Duration::from_secs(20);
    while role_of_ghost(&group).is_some() {
        assert!(
            Instant::now() < deadline,
            "the stalled learner is still a member after 20 s:\n{}",
            group.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        added_at.elapsed() >= Duration::from_millis(2500),
        "removed only once it stalled for learner-max-stall, not at once"
    );
    assert!(
        group.members[0].log().contains("learner made no progress"),
        "the removal is logged:\n{}",
        group.logs()
    );
    // The group goes on and takes the next member.
    let created = rt.block_on(async {
        let client = group.members[0].client().await;
        create(&client, "after-stalled-learner").await
    });
    assert!(created.is_ok(), "write after the removal: {created:?}");
}

/// The holder of a `kube-system` Lease and the server it belongs to.
async fn lease_holder(client: &kube::Client, name: &str) -> Option<String> {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-system");
    let lease = api.get_opt(name).await.ok()??;
    lease.spec?.holder_identity
}

/// Pods of `app=<app>` in `default`: (name, node) pairs.
async fn pods_of(client: &kube::Client, app: &str) -> Vec<(String, Option<String>)> {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    let mut pods: Vec<_> = api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .map(|list| {
            list.items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| {
                    (
                        p.metadata.name.unwrap_or_default(),
                        p.spec.and_then(|s| s.node_name),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    pods.sort();
    pods
}

/// With three servers exactly one runs the controllers and one the scheduler (their
/// Leases in kube-system say which); when that server dies another takes over after the
/// lease lapses, and nothing is done twice.
#[test]
fn one_controller_manager_and_scheduler_lead_and_another_takes_over() {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    let mut group = Group::start(42, 3);
    let rt = runtime();
    let clients = group.clients(&rt);
    // Both leases are held, by a server, and only that server started the component.
    let holder_of = |rt: &tokio::runtime::Runtime, client: &kube::Client, lease: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(holder) = rt.block_on(lease_holder(client, lease)) {
                return holder;
            }
            assert!(Instant::now() < deadline, "nobody holds {lease}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let controller_holder = holder_of(&rt, &clients[1], "kube-controller-manager");
    let scheduler_holder = holder_of(&rt, &clients[2], "kube-scheduler");
    let index_of = |holder: &str| {
        group
            .members
            .iter()
            .position(|m| holder.starts_with(&format!("{}_", m.name)))
            .unwrap_or_else(|| panic!("{holder} is none of the servers"))
    };
    let leader = index_of(&controller_holder);
    let scheduler_on_killed = index_of(&scheduler_holder) == leader;
    for (i, member) in group.members.iter().enumerate() {
        let started = member
            .log()
            .contains("leading: starting kube-controller-manager");
        assert_eq!(
            started,
            i == leader,
            "{} started the controllers: {started}\n{}",
            member.name,
            group.logs()
        );
    }
    // A node the scheduler can bind to (no kubelet: the test writes its status).
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "fake-node"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"}
        }
    }))
    .expect("node");
    rt.block_on(Api::<Node>::all(clients[0].clone()).create(&PostParams::default(), &node))
        .expect("create the node");
    let replica_set = |replicas: i32| -> ReplicaSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]}
                }
            }
        }))
        .expect("replicaset")
    };
    let sets: Api<ReplicaSet> = Api::namespaced(clients[0].clone(), "default");
    rt.block_on(sets.create(&PostParams::default(), &replica_set(2)))
        .expect("create the replicaset");
    let wait_bound = |group: &Group, client: &kube::Client, n: usize, within: Duration| {
        let deadline = Instant::now() + within;
        loop {
            let pods = rt.block_on(pods_of(client, "web"));
            if pods.len() == n && pods.iter().all(|(_, node)| node.is_some()) {
                return;
            }
            assert!(
                pods.len() <= n,
                "more pods than replicas (two controllers acted?): {pods:?}"
            );
            assert!(
                Instant::now() < deadline,
                "{n} bound pods expected, have {pods:?}:\n{}",
                group.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_bound(&group, &clients[1], 2, Duration::from_secs(30));

    // The controller-manager's server dies; a survivor takes its lease and acts.
    group.members[leader].kill();
    let killed = Instant::now();
    let survivor = (leader + 1) % 3;
    let survivor_client = clients[survivor].clone();
    let deadline = Instant::now() + Duration::from_secs(40);
    let new_holder = loop {
        if let Some(holder) = rt.block_on(lease_holder(&survivor_client, "kube-controller-manager"))
            && holder != controller_holder
        {
            break holder;
        }
        assert!(
            Instant::now() < deadline,
            "no other server took the controller-manager lease:\n{}",
            group.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let took_over = killed.elapsed();
    eprintln!("controller-manager lease taken over by {new_holder} after {took_over:?}");
    assert!(
        took_over < Duration::from_secs(25),
        "takeover took {took_over:?} (lease 15 s)"
    );
    let sets: Api<ReplicaSet> = Api::namespaced(survivor_client.clone(), "default");
    let mut scaled = rt.block_on(sets.get("web")).expect("get the replicaset");
    scaled.spec.as_mut().expect("spec").replicas = Some(4);
    rt.block_on(sets.replace("web", &PostParams::default(), &scaled))
        .expect("scale the replicaset");
    wait_bound(&group, &survivor_client, 4, Duration::from_secs(40));
    // The bound: new pods scheduled within 20 s of the holder's death.
    let bound_after = killed.elapsed();
    eprintln!(
        "FIGURE ha new_pods_bound_after_holder_kill_ms={} (scheduler lease on the killed server: {})",
        bound_after.as_millis(),
        scheduler_on_killed
    );
    assert!(
        bound_after < Duration::from_secs(20),
        "the new pods were bound {bound_after:?} after the kill"
    );
    // Hold on a little: no late duplicate from a second controller.
    std::thread::sleep(Duration::from_secs(2));
    let pods = rt.block_on(pods_of(&survivor_client, "web"));
    assert_eq!(pods.len(), 4, "exactly the replicas: {pods:?}");
    // Each pod was bound once.
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(survivor_client.clone(), "default");
    let scheduled = rt
        .block_on(events.list(&ListParams::default()))
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Scheduled"))
        .map(|e| e.count.unwrap_or(1))
        .sum::<i32>();
    assert_eq!(scheduled, 4, "one Scheduled event per pod");
    // The changes of leadership are Events on the Lease, as kube records them.
    let system: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(survivor_client.clone(), "kube-system");
    let messages: Vec<String> = rt
        .block_on(system.list(&ListParams::default()))
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("LeaderElection"))
        .filter_map(|e| e.message)
        .collect();
    assert!(
        messages.contains(&format!("{new_holder} became leader")),
        "LeaderElection events: {messages:?}"
    );
}

/// The addresses `default/kubernetes` Endpoints and its EndpointSlice list.
async fn kubernetes_endpoints(client: &kube::Client) -> (Vec<String>, Vec<String>) {
    use k8s_openapi::api::core::v1::Endpoints;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let endpoints = Api::<Endpoints>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .ok()
        .flatten()
        .and_then(|e| e.subsets)
        .and_then(|s| s.into_iter().next())
        .and_then(|s| s.addresses)
        .map(|a| a.into_iter().map(|a| a.ip).collect())
        .unwrap_or_default();
    let slice = Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .ok()
        .flatten()
        .map(|s| s.endpoints.into_iter().flat_map(|e| e.addresses).collect())
        .unwrap_or_default();
    (endpoints, slice)
}

/// `default/kubernetes` lists every live server (kube's lease endpoint reconciler); a
/// dead server's address drops out within about 15 s, and comes back with it.
#[test]
fn the_kubernetes_service_lists_every_live_server() {
    let mut group = Group::start(43, 3);
    let rt = runtime();
    let client = rt.block_on(group.members[0].client());
    let all: Vec<String> = group.members.iter().map(|m| m.ip.clone()).collect();
    let wait_for = |group: &Group, want: &[String], within: Duration| -> Duration {
        let started = Instant::now();
        loop {
            let (endpoints, slice) = rt.block_on(kubernetes_endpoints(&client));
            if endpoints == want && slice == want {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < within,
                "want {want:?}, Endpoints {endpoints:?}, EndpointSlice {slice:?}:\n{}",
                group.logs()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    };
    wait_for(&group, &all, Duration::from_secs(20));
    group.members[2].kill();
    let gone = wait_for(&group, &all[..2], Duration::from_secs(30));
    eprintln!("a dead server left the kubernetes endpoints after {gone:?}");
    assert!(
        gone >= Duration::from_secs(5),
        "left after {gone:?}: not before its lease could lapse"
    );
    group.restart(2);
    wait_for(&group, &all, Duration::from_secs(20));
}

/// Runs kubectl against `member` with `args`; (success, stdout and stderr).
fn kubectl(member: &Member, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(member.kubeconfig())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    if let (Some(mut input), Some(text)) = (child.stdin.take(), stdin) {
        input.write_all(text.as_bytes()).expect("kubectl stdin");
    }
    outcome(&child.wait_with_output().expect("kubectl"))
}

/// Whether a command succeeded, and its stdout and stderr together.
fn outcome(out: &std::process::Output) -> (bool, String) {
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Members follow Nodes (k3s's etcd member controller): `kubectl delete node` of a server
/// — here the raft leader, the hardest case — removes its member; the removed server
/// stops, refuses to start again with its old data and says how to rejoin; after wiping
/// `server/db` it joins again as a new member. (The servers run without agents, so the
/// Nodes are registered by hand; each server's member controller marks its own.)
#[test]
fn deleting_a_server_node_removes_its_member_and_old_data_cannot_rejoin() {
    let mut group = Group::start(44, 3);
    for member in &group.members {
        let node = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{{\"name\":\"{}\"}}}}",
            member.name
        );
        let (ok, text) = kubectl(&group.members[0], &["create", "-f", "-"], Some(&node));
        assert!(ok, "creating node {}: {text}", member.name);
    }
    let leaving = group.leader();
    let other = (leaving + 1) % 3;
    let leaving_name = group.members[leaving].name.clone();
    // Its own server marks the Node as a member's (label, annotations, finalizer).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, finalizers) = kubectl(
            &group.members[other],
            &[
                "get",
                "node",
                &leaving_name,
                "-o",
                "jsonpath={.metadata.finalizers}",
            ],
            None,
        );
        if finalizers.contains("managed-etcd-controller") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no member finalizer on {leaving_name}: {finalizers}\n{}",
            group.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A snapshot of the leaving server, listed by the others through its record.
    let (ok, text) = etcd_snapshot(&group.members[leaving], &["save", "--name", "gone"]);
    assert!(ok, "save on {leaving_name}: {text}");
    let records_of_leaving = |group: &Group| -> usize {
        let (ok, text) = etcd_snapshot(&group.members[other], &["ls", "-o", "json"]);
        assert!(ok, "ls: {text}");
        let items: Vec<Value> =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("ls json: {e}: {text}"));
        items
            .iter()
            .filter(|s| s["node"] == leaving_name.as_str())
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while records_of_leaving(&group) == 0 {
        assert!(
            Instant::now() < deadline,
            "the others never listed {leaving_name}'s snapshot\n{}",
            group.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let (ok, text) = kubectl(
        &group.members[other],
        &["delete", "node", &leaving_name, "--timeout=60s"],
        None,
    );
    assert!(
        ok,
        "kubectl delete node {leaving_name}: {text}\n{}",
        group.logs()
    );
    // The group is the two others, and it takes writes.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let voters: Vec<String> = group
            .members_seen_by(other)
            .unwrap_or_default()
            .iter()
            .filter(|m| m["role"] == "voter")
            .filter_map(|m| m["name"].as_str().map(str::to_string))
            .collect();
        if voters.len() == 2 && !voters.contains(&leaving_name) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "voters after deleting {leaving_name}: {voters:?}\n{}",
            group.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Its snapshot records went with its member: nobody would ever refresh them.
    assert_eq!(
        records_of_leaving(&group),
        0,
        "{leaving_name}'s snapshot is still listed after its removal\n{}",
        group.logs()
    );
    let rt = runtime();
    let client = rt.block_on(group.members[other].client());
    rt.block_on(create(&client, "after-node-delete"))
        .unwrap_or_else(|e| panic!("write with two voters: {e}\n{}", group.logs()));
    // The removed server stops by itself, saying why.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let child = group.members[leaving].child.as_mut().expect("running");
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the removed server is still running:\n{}",
            group.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    group.members[leaving].child = None;
    assert!(!status.success(), "a removed server exits with an error");
    assert!(
        group.members[leaving]
            .log()
            .contains("this server was removed from the cluster"),
        "{}",
        group.logs()
    );
    // Started again with its old data: refused, with the way back.
    std::fs::write(group.members[leaving].dir.join("server.log"), "").expect("clear log");
    group.members[leaving].spawn();
    let refused = group.members[leaving].try_wait_ready(Duration::from_secs(30));
    assert!(
        refused.is_err(),
        "a removed server came back with its old data"
    );
    let log = group.members[leaving].log();
    assert!(
        log.contains("this server was removed from the cluster") && log.contains("server/db"),
        "the refusal says how to rejoin:\n{log}"
    );
    group.members[leaving].kill();
    // Wiped, it joins again (a new member) through a live server.
    std::fs::remove_dir_all(group.members[leaving].dir.join("data/server/db")).expect("wipe db");
    let token = std::fs::read_to_string(group.members[other].dir.join("data/server/token"))
        .expect("token")
        .trim()
        .to_string();
    let other_url = group.members[other].url();
    group.members[leaving].extra = vec!["--server".into(), other_url, "--token".into(), token];
    group.restart(leaving);
    group.wait_voters(3, Duration::from_secs(60));
}

/// A rolling restart (issue 24): each server in turn is stopped cleanly (SIGTERM, as
/// `systemctl restart` does; a leader hands its leadership over first) and started again,
/// under a light write load from a client that tries the servers in turn. No acknowledged
/// write is lost, and the client never goes more than 2 s without a successful write.
#[test]
fn a_rolling_restart_loses_no_write_and_keeps_writes_going() {
    let mut group = Group::start(45, 3);
    let rt = runtime();
    let clients = group.clients(&rt);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (clients, stop) = (clients.clone(), stop.clone());
        rt.spawn(async move {
            let mut acknowledged = Vec::new();
            let mut longest_gap = Duration::ZERO;
            let mut last_success = Instant::now();
            let mut server = 0;
            while !stop.load(Ordering::SeqCst) {
                let name = format!("roll-{}", acknowledged.len());
                let mut written = false;
                for attempt in 0..clients.len() {
                    let i = (server + attempt) % clients.len();
                    let api: Api<ConfigMap> = Api::namespaced(clients[i].clone(), "default");
                    let created = tokio::time::timeout(
                        Duration::from_millis(1500),
                        api.create(&PostParams::default(), &config_map(&name, "x")),
                    )
                    .await;
                    match created {
                        Ok(Ok(_)) => written = true,
                        // An earlier attempt whose answer was lost did land.
                        Ok(Err(kube::Error::Api(e))) if e.code == 409 => written = true,
                        _ => continue,
                    }
                    server = i;
                    break;
                }
                if written {
                    acknowledged.push(name);
                    longest_gap = longest_gap.max(last_success.elapsed());
                    last_success = Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (acknowledged, longest_gap)
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    for i in 0..group.members.len() {
        let leader = group.leader();
        group.members[i].stop();
        if i == leader {
            // A stopping leader hands over instead of leaving the others to time out.
            let handed_over = group.members[i]
                .log()
                .lines()
                .any(|l| l.contains("raft leadership handed over") && l.contains("moved=true"));
            assert!(handed_over, "{}", group.logs());
        }
        group.restart(i);
        group.wait_voters(3, Duration::from_secs(30));
        std::thread::sleep(Duration::from_secs(1));
    }
    stop.store(true, Ordering::SeqCst);
    let (acknowledged, longest_gap) = rt.block_on(writer).expect("writer");
    eprintln!(
        "FIGURE ha rolling_restart_writes={} longest_write_gap_ms={}",
        acknowledged.len(),
        longest_gap.as_millis()
    );
    let stored = rt.block_on(config_maps(&clients[0], "roll-"));
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|name| !stored.contains_key(*name))
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert!(
        longest_gap <= Duration::from_secs(2),
        "writes stopped for {longest_gap:?} during the rolling restart:\n{}",
        group.logs()
    );
}

/// `k3rs etcd-snapshot <args> --kubeconfig … --data-dir …` against `member`.
fn etcd_snapshot(member: &Member, args: &[&str]) -> (bool, String) {
    let out = Command::new(support::k3rs_bin())
        .arg("etcd-snapshot")
        .args(args)
        .arg("--kubeconfig")
        .arg(member.kubeconfig())
        .arg("--data-dir")
        .arg(member.dir.join("data"))
        .output()
        .expect("k3rs etcd-snapshot");
    outcome(&out)
}

/// Snapshots with several servers (issue 24): a snapshot saved on one server is listed,
/// with its node, by `ls` on every server; `delete` on another server removes the file
/// from the server that holds it.
#[test]
fn every_server_lists_every_servers_snapshots_and_deletes_them() {
    let group = Group::start(46, 3);
    let (ok, text) = etcd_snapshot(&group.members[1], &["save", "--name", "multi"]);
    assert!(ok, "save on server 2: {text}");
    let dir = group.members[1].dir.join("data/server/db/snapshots");
    let file = std::fs::read_dir(&dir)
        .expect("snapshot dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("multi-server-2-"))
        .unwrap_or_else(|| panic!("no snapshot file in {}", dir.display()));
    let listed_by = |i: usize| -> Vec<Value> {
        let (ok, text) = etcd_snapshot(&group.members[i], &["ls", "-o", "json"]);
        assert!(ok, "ls on {}: {text}", group.members[i].name);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("ls json: {e}: {text}"))
    };
    for i in [0, 2] {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let items = listed_by(i);
            if let Some(item) = items.iter().find(|s| s["name"] == file.as_str()) {
                assert_eq!(item["node"], "server-2", "{item}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} does not list {file}: {items:?}\n{}",
                group.members[i].name,
                group.logs()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let (ok, text) = etcd_snapshot(&group.members[2], &["delete", &file]);
    assert!(ok, "delete on server 3: {text}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while dir.join(&file).exists() || listed_by(0).iter().any(|s| s["name"] == file.as_str()) {
        assert!(
            Instant::now() < deadline,
            "{file} still there after its delete:\n{}",
            group.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let (ok, text) = etcd_snapshot(&group.members[0], &["delete", &file]);
    assert!(!ok && text.contains("not found"), "{text}");
}

/// k3s's restore procedure, made safe (issue 24): a snapshot saved on server 2 is restored
/// on server 1 with `--cluster-reset --cluster-reset-restore-path`; server 2 started again
/// with its old data is refused (a restored cluster has a new cluster id) until its
/// `server/db` is removed; then servers 2 and 3 join, and the objects are the snapshot's.
#[test]
fn a_restored_cluster_refuses_old_members_until_they_wipe_and_rejoin() {
    let mut group = Group::start(47, 3);
    let rt = runtime();
    let clients = group.clients(&rt);
    for i in 0..3 {
        rt.block_on(create(&clients[0], &format!("before-{i}")))
            .unwrap_or_else(|e| panic!("before-{i}: {e}"));
    }
    let (ok, text) = etcd_snapshot(&group.members[1], &["save", "--name", "restore-me"]);
    assert!(ok, "save on server 2: {text}");
    let dir = group.members[1].dir.join("data/server/db/snapshots");
    let snapshot = std::fs::read_dir(&dir)
        .expect("snapshot dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains("restore-me-server-2-"))
        .expect("the saved snapshot");
    let kept = group.members[0].dir.join("restore-me.db");
    std::fs::copy(&snapshot, &kept).expect("copy the snapshot");
    rt.block_on(create(&clients[0], "after-0"))
        .unwrap_or_else(|e| panic!("after-0: {e}"));
    for member in group.members.iter_mut() {
        member.kill();
    }
    let first = &group.members[0];
    let out = Command::new(support::k3rs_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(first.dir.join("data"))
        .args([
            "--bind-address",
            &first.ip,
            "--advertise-address",
            &first.ip,
        ])
        .args(["--node-name", &first.name, "--token", TOKEN_SECRET])
        .arg("--write-kubeconfig")
        .arg(first.kubeconfig())
        .arg("--disable-agent")
        .arg("--cluster-reset")
        .arg(format!("--cluster-reset-restore-path={}", kept.display()))
        .env_remove("K3RS_TOKEN")
        .output()
        .expect("run k3rs");
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "restore: {text}");
    group.restart(0);
    // Server 2 with the old cluster's data: refused, with the way back.
    std::fs::write(group.members[1].dir.join("server.log"), "").expect("clear log");
    group.members[1].spawn();
    let refused = group.members[1].try_wait_ready(Duration::from_secs(30));
    assert!(
        refused.is_err(),
        "an old member joined the restored cluster"
    );
    let log = group.members[1].log();
    assert!(
        log.contains("restored from a snapshot") && log.contains("server/db"),
        "the refusal says why and how to rejoin:\n{log}\n{}",
        group.logs()
    );
    group.members[1].kill();
    // Wiped, servers 2 and 3 join the restored cluster.
    let token = std::fs::read_to_string(group.members[0].dir.join("data/server/token"))
        .expect("token")
        .trim()
        .to_string();
    let first_url = group.members[0].url();
    for i in [1, 2] {
        std::fs::remove_dir_all(group.members[i].dir.join("data/server/db")).expect("wipe db");
        group.members[i].extra = vec![
            "--server".into(),
            first_url.clone(),
            "--token".into(),
            token.clone(),
        ];
        group.restart(i);
    }
    group.wait_voters(3, Duration::from_secs(60));
    for i in 0..3 {
        let client = rt.block_on(group.members[i].client());
        let before = rt.block_on(config_maps(&client, "before-"));
        let after = rt.block_on(config_maps(&client, "after-"));
        assert_eq!(before.len(), 3, "{}: {before:?}", group.members[i].name);
        assert!(after.is_empty(), "{}: {after:?}", group.members[i].name);
    }
}
