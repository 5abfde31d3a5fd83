//! The kubelet end to end: a real API server (`k3rs server --disable-agent`), the kubelet
//! running in this test process with a `system:node:<name>` client certificate, and a real
//! containerd/runc/CNI. Root only. Covers: a Deployment reaching Running with the kubelet's
//! events, env and configMap/secret volumes, the memory limit in the cgroup, CrashLoopBackOff
//! with growing back-off, liveness restarts, the grace period on delete, ErrImagePull then
//! ImagePullBackOff, a kubelet restart that keeps the containers, and the projected
//! service-account token (kube-api-access-*) that authenticates while its pod exists.

mod support;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const IMAGE: &str = "k3rs.test/busybox:1";

fn require_root() {
    support::runtime::require_root("kubelet_e2e");
}

/// The container runtime for the test: a containerd of the test's own (started through the
/// agent's runtime, in a temp data dir and run dir) with the busybox test image and the pause
/// image imported and a CNI conflist on 10.99.0.0/24 — or, with `K3RS_TEST_CRI_ENDPOINT`, a
/// runtime already prepared that way.
struct Runtime {
    endpoint: PathBuf,
    /// Held for its Drop: the test's own containerd is torn down with it.
    _own: Option<OwnRuntime>,
    /// One runtime at a time: the tests of this file share the runtime's base directory
    /// (one per process), the CNI bridge and its subnet. Dropped last.
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

static ONE_RUNTIME_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Fields drop in order: supervision stops first, then the guard kills and unmounts.
struct OwnRuntime {
    _runtime: k3rs::agent::containerd::Runtime,
    _guard: support::runtime::RuntimeGuard,
}

async fn runtime() -> Runtime {
    require_root();
    let serial = ONE_RUNTIME_AT_A_TIME.lock().await;
    if let Some(endpoint) = std::env::var_os("K3RS_TEST_CRI_ENDPOINT").map(PathBuf::from) {
        return Runtime {
            endpoint,
            _own: None,
            _serial: serial,
        };
    }
    support::runtime::require_runtime_tools();
    let base = support::runtime::base_dir("kubelet");
    let guard = support::runtime::RuntimeGuard::new(&base).with_bridge_address("10.99.0.1/24");
    let mut options = k3rs::agent::containerd::RuntimeOptions::new(base.join("data"));
    options.run_dir = base.join("run");
    options.private_registry = base.join("registries.yaml");
    let paths = k3rs::agent::containerd::Paths::new(&options);
    support::images::TestImage::busybox().write_to(&base.join("data/agent/images"));
    k3rs::network::cni::write_conflist(&paths.cni_conf_dir, &["10.99.0.0/24".to_string()])
        .expect("CNI conflist");
    let runtime = k3rs::agent::containerd::start(options)
        .await
        .expect("containerd starts");
    if let Some(pid) = runtime.containerd_pid() {
        guard.add_pid(pid);
    }
    Runtime {
        endpoint: runtime.cri_endpoint().to_path_buf(),
        _own: Some(OwnRuntime {
            _runtime: runtime,
            _guard: guard,
        }),
        _serial: serial,
    }
}

struct Cluster {
    server: support::Server,
    admin: kube::Client,
    node_client: kube::Client,
    node_name: String,
    kubelet_dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Cluster {
        require_root();
        let server = support::Server::start();
        let admin = server.client().await;
        // SAFETY: set once, before the kubelet's threads read the environment.
        unsafe { std::env::set_var("E2E_KUBECONFIG", &server.kubeconfig) };
        let node_name = format!("e2e-{}", server.port);
        let tls = server.dir.path().join("data/server/tls");
        let read =
            |f: &str| std::fs::read_to_string(tls.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let client_ca = k3rs::pki::CertificateAuthority::from_pem(
            &read("client-ca.crt"),
            &read("client-ca.key"),
            &tls,
        )
        .expect("client CA");
        let cert = client_ca
            .issue_client_cert(&format!("system:node:{node_name}"), &["system:nodes"])
            .expect("node certificate");
        let yaml = k3rs::pki::render_kubeconfig(&server.url(), &read("server-ca.crt"), &cert)
            .expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::from_yaml(&yaml).expect("parse kubeconfig"),
            &Default::default(),
        )
        .await
        .expect("node kubeconfig");
        let node_client = kube::Client::try_from(config).expect("node client");
        Cluster {
            server,
            admin,
            node_client,
            node_name,
            kubelet_dir: tempfile::tempdir().expect("kubelet dir"),
        }
    }

    fn config(&self, rt: &Runtime) -> k3rs::kubelet::Config {
        let mut config = k3rs::kubelet::Config::new(
            &self.node_name,
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            rt.endpoint.clone(),
            self.kubelet_dir.path().to_path_buf(),
        );
        config.pod_log_dir = self.kubelet_dir.path().join("pods-logs");
        config.labels = BTreeMap::from([("e2e".to_string(), "yes".to_string())]);
        // CI machines run with full disks: keep DiskPressure (and its taint) and image GC out
        // of this test, which is about pods.
        config.extra = k3rs::kubelet::KubeletArgs::parse(&[
            "eviction-hard=memory.available<1Mi,nodefs.available<1%",
            "image-gc-high-threshold=100",
            "image-gc-low-threshold=99",
        ])
        .expect("kubelet args");
        config
    }

    fn start_kubelet(
        &self,
        rt: &Runtime,
    ) -> (
        tokio::task::JoinHandle<anyhow::Result<()>>,
        tokio::sync::watch::Receiver<bool>,
    ) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(k3rs::kubelet::run(
            self.node_client.clone(),
            self.config(rt),
            tx,
        ));
        (task, rx)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), "default")
    }
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            let _ = std::process::Command::new("kubectl")
                .args([
                    "--kubeconfig",
                    &std::env::var("E2E_KUBECONFIG").unwrap_or_default(),
                    "get",
                    "pods,events",
                    "-A",
                    "-o",
                    "wide",
                ])
                .status();
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn assert_unauthorized(server: &support::Server, token: &str) {
    let client = support::client_with_token(server, token).await;
    match Api::<Pod>::namespaced(client, "default")
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 401, "{e:?}"),
        other => panic!("expected 401 for a bad token, got {other:?}"),
    }
}

async fn pod_events(admin: &kube::Client, pod: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(admin.clone(), "default");
    let mut list: Vec<Event> = api
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .collect();
    // Events of one second are told apart by the store revision that created them.
    list.sort_by_key(|e| {
        (
            e.first_timestamp.clone().map(|t| t.0),
            e.metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok()),
        )
    });
    list
}

fn container_state(pod: &Pod, name: &str) -> Option<k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
        .cloned()
}

fn waiting_reason(pod: &Pod, name: &str) -> Option<String> {
    container_state(pod, name)?.state?.waiting?.reason
}

async fn create_pod(cluster: &Cluster, spec: serde_json::Value) -> Pod {
    let pod: Pod = serde_json::from_value(spec).expect("pod json");
    cluster
        .pods()
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod")
}

/// Finds a file named `leaf` in the container's cgroup (v2 or v1 memory controller).
fn cgroup_file(uid: &str, container_id: &str, leaf: &str) -> Option<PathBuf> {
    let roots = ["/sys/fs/cgroup", "/sys/fs/cgroup/memory"];
    for root in roots {
        for qos in ["", "burstable/", "besteffort/"] {
            let p = Path::new(root).join(format!("kubepods/{qos}pod{uid}/{container_id}/{leaf}"));
            if p.exists() {
                return Some(p);
            }
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubelet_runs_pods_through_cri() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let rt = runtime().await;
    let cluster = Cluster::start().await;
    let (kubelet, mut registered) = cluster.start_kubelet(&rt);
    tokio::time::timeout(Duration::from_secs(60), registered.wait_for(|r| *r))
        .await
        .expect("kubelet registers the node in time")
        .expect("registered");

    // The Node: labels, capacity, nodeInfo, Ready.
    let nodes: Api<Node> = Api::all(cluster.admin.clone());
    let node = wait_for("the node to be Ready", Duration::from_secs(60), || async {
        let n = nodes.get(&cluster.node_name).await.ok()?;
        let ready = n
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(n)
    })
    .await;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["kubernetes.io/hostname"], cluster.node_name);
    assert_eq!(labels["e2e"], "yes");
    let status = node.status.clone().unwrap();
    let info = status.node_info.unwrap();
    assert!(
        info.container_runtime_version.starts_with("containerd://"),
        "{}",
        info.container_runtime_version
    );
    assert!(
        info.kubelet_version.starts_with("v1.33."),
        "{}",
        info.kubelet_version
    );
    assert_eq!(status.capacity.unwrap()["pods"].0, "110");
    assert_eq!(
        status
            .daemon_endpoints
            .unwrap()
            .kubelet_endpoint
            .unwrap()
            .port,
        10250
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(cluster.admin.clone(), "kube-node-lease");
    wait_for("the node lease", Duration::from_secs(20), || async {
        leases.get_opt(&cluster.node_name).await.ok().flatten()
    })
    .await;

    // A Deployment with env from a ConfigMap and Secret, both also mounted, and a memory limit.
    let cms: Api<ConfigMap> = Api::namespaced(cluster.admin.clone(), "default");
    cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "demo-config"}, "data": {"greeting": "hello from a configmap"}})).unwrap())
        .await
        .expect("configmap");
    let secrets: Api<Secret> = Api::namespaced(cluster.admin.clone(), "default");
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "demo-secret"}, "stringData": {"token": "s3cr3t"}}),
            )
            .unwrap(),
        )
        .await
        .expect("secret");
    let deployments: Api<Deployment> = Api::namespaced(cluster.admin.clone(), "default");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "demo"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "demo"}},
            "template": {"metadata": {"labels": {"app": "demo"}}, "spec": {
                "containers": [{"name": "main", "image": IMAGE,
                    "command": ["sh", "-c", "echo GREETING=$GREETING TOKEN=$token POD=$POD_NAME; cat /cfg/greeting; echo; cat /sec/token; echo; sa=/var/run/secrets/kubernetes.io/serviceaccount; echo SA-NS=$(cat $sa/namespace) SA-TOKEN=$(cat $sa/token); grep -q 'BEGIN CERTIFICATE' $sa/ca.crt && echo SA-CA-OK; exec sleep 3600"],
                    "env": [
                        {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "demo-config", "key": "greeting"}}},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "envFrom": [{"secretRef": {"name": "demo-secret"}, "prefix": ""}],
                    "resources": {"limits": {"memory": "64Mi"}, "requests": {"memory": "32Mi"}},
                    "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}, {"name": "sec", "mountPath": "/sec"}]}],
                "volumes": [{"name": "cfg", "configMap": {"name": "demo-config"}}, {"name": "sec", "secret": {"secretName": "demo-secret"}}],
                "terminationGracePeriodSeconds": 2}}}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("deployment");
    let pod = wait_for("the demo pod to run", Duration::from_secs(90), || async {
        let list = cluster
            .pods()
            .list(&ListParams::default().labels("app=demo"))
            .await
            .ok()?;
        list.items.into_iter().find(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && container_state(p, "main").is_some_and(|c| c.ready)
        })
    })
    .await;
    let pod_name = pod.metadata.name.clone().unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    let st = pod.status.clone().unwrap();
    assert!(
        st.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty()),
        "pod IP: {st:?}"
    );
    assert_eq!(st.host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(st.qos_class.as_deref(), Some("Burstable"));
    for cond in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert!(
            st.conditions
                .as_ref()
                .unwrap()
                .iter()
                .any(|c| c.type_ == cond && c.status == "True"),
            "{cond}: {st:?}"
        );
    }
    let main = container_state(&pod, "main").unwrap();
    let container_id = main.container_id.clone().unwrap();
    assert!(container_id.starts_with("containerd://"), "{container_id}");

    // The kubelet's events, in the order a user sees them.
    let reasons = wait_for(
        "Scheduled, Pulled, Created, Started",
        Duration::from_secs(20),
        || async {
            let reasons: Vec<String> = pod_events(&cluster.admin, &pod_name)
                .await
                .into_iter()
                .filter_map(|e| e.reason)
                .collect();
            let want = ["Scheduled", "Pulled", "Created", "Started"];
            let positions: Vec<Option<usize>> = want
                .iter()
                .map(|w| reasons.iter().position(|r| r == w))
                .collect();
            (positions.iter().all(Option::is_some) && positions.windows(2).all(|w| w[0] < w[1]))
                .then_some(reasons)
        },
    )
    .await;
    let events = pod_events(&cluster.admin, &pod_name).await;
    let pulled = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("Pulled"))
        .unwrap();
    assert_eq!(
        pulled.message.as_deref(),
        Some(format!("Container image \"{IMAGE}\" already present on machine").as_str()),
        "{reasons:?}"
    );
    let created = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("Created"))
        .unwrap();
    assert_eq!(created.message.as_deref(), Some("Created container: main"));
    assert_eq!(
        created.source.as_ref().and_then(|s| s.host.as_deref()),
        Some(cluster.node_name.as_str())
    );

    // env and volume contents, read through the container's CRI log.
    let log_path = cluster
        .kubelet_dir
        .path()
        .join(format!("pods-logs/default_{pod_name}_{uid}/main/0.log"));
    let log = wait_for("the container log", Duration::from_secs(20), || async {
        let text = std::fs::read_to_string(&log_path).ok()?;
        text.contains("s3cr3t").then_some(text)
    })
    .await;
    assert!(
        log.contains(&format!(
            "GREETING=hello from a configmap TOKEN=s3cr3t POD={pod_name}"
        )),
        "{log}"
    );
    assert!(
        log.contains("stdout F hello from a configmap"),
        "CRI log format: {log}"
    );

    // The ServiceAccount admission mounted kube-api-access-*: the kubelet wrote a bound token,
    // the cluster CA and the namespace, and the token authenticates against the API server.
    let log = wait_for(
        "the service-account token in the log",
        Duration::from_secs(30),
        || async {
            let text = std::fs::read_to_string(&log_path).ok()?;
            text.contains("SA-CA-OK").then_some(text)
        },
    )
    .await;
    let sa_token = log
        .lines()
        .find_map(|l| l.split_once("SA-TOKEN=").map(|(_, t)| t.trim().to_string()))
        .filter(|t| t.split('.').count() == 3)
        .unwrap_or_else(|| panic!("no JWT in the container log: {log}"));
    assert!(log.contains("SA-NS=default "), "{log}");
    let as_pod = support::client_with_token(&cluster.server, &sa_token).await;
    // The token authenticates as the pod's service account (whoami)...
    let review = as_pod
        .request_text(
            http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
                .header("content-type", "application/json")
                .body(
                    br#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#
                        .to_vec(),
                )
                .expect("request"),
        )
        .await
        .expect("the pod's service-account token is accepted");
    assert!(
        review.contains("\"username\":\"system:serviceaccount:default:default\""),
        "{review}"
    );
    // ...which RBAC gives nothing beyond discovery, as in Kubernetes.
    match Api::<Pod>::namespaced(as_pod, "default")
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("the default service account listed pods: {other:?}"),
    }
    let mut tampered = sa_token.clone();
    let last = tampered.pop().expect("non-empty token");
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    assert_unauthorized(&cluster.server, &tampered).await;

    // The memory limit is in the container's cgroup.
    let cid = container_id.trim_start_matches("containerd://");
    let limit_file = cgroup_file(&uid, cid, "memory.max")
        .or_else(|| cgroup_file(&uid, cid, "memory.limit_in_bytes"))
        .unwrap_or_else(|| panic!("no memory cgroup for container {cid} of pod {uid}"));
    assert_eq!(
        std::fs::read_to_string(&limit_file).unwrap().trim(),
        "67108864",
        "{}",
        limit_file.display()
    );

    // A crashing container: CrashLoopBackOff with a growing back-off.
    create_pod(&cluster, json!({"metadata": {"name": "crasher"}, "spec": {"nodeName": cluster.node_name,
        "containers": [{"name": "c", "image": IMAGE, "command": ["sh", "-c", "echo bye; exit 3"]}]}}))
    .await;
    let first = wait_for("CrashLoopBackOff", Duration::from_secs(60), || async {
        let p = cluster.pods().get("crasher").await.ok()?;
        (waiting_reason(&p, "c").as_deref() == Some("CrashLoopBackOff")).then_some(p)
    })
    .await;
    let cs = container_state(&first, "c").unwrap();
    let message = cs.state.unwrap().waiting.unwrap().message.unwrap();
    assert!(
        message.starts_with("back-off 10s restarting failed container=c pod=crasher_default("),
        "{message}"
    );
    assert_eq!(cs.last_state.unwrap().terminated.unwrap().exit_code, 3);
    let grown = wait_for(
        "the back-off to double",
        Duration::from_secs(60),
        || async {
            let p = cluster.pods().get("crasher").await.ok()?;
            let cs = container_state(&p, "c")?;
            let m = cs.state?.waiting?.message?;
            m.starts_with("back-off 20s").then_some(cs.restart_count)
        },
    )
    .await;
    assert!(grown >= 2, "restarts: {grown}");
    assert!(
        pod_events(&cluster.admin, "crasher")
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("BackOff")
                && e.message.as_deref().is_some_and(|m| m.starts_with(
                    "Back-off restarting failed container c in pod crasher_default("
                )))
    );

    // Liveness failure restarts the container.
    create_pod(&cluster, json!({"metadata": {"name": "unhealthy"}, "spec": {"nodeName": cluster.node_name, "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": IMAGE, "command": ["sh", "-c", "touch /tmp/ok; sleep 3; rm /tmp/ok; exec sleep 3600"],
            "livenessProbe": {"exec": {"command": ["cat", "/tmp/ok"]}, "periodSeconds": 1, "failureThreshold": 2}}]}}))
    .await;
    wait_for("a liveness restart", Duration::from_secs(60), || async {
        let p = cluster.pods().get("unhealthy").await.ok()?;
        (container_state(&p, "c")?.restart_count >= 1).then_some(())
    })
    .await;
    let events = pod_events(&cluster.admin, "unhealthy").await;
    assert!(events.iter().any(|e| {
        e.reason.as_deref() == Some("Unhealthy")
            && e.message
                .as_deref()
                .is_some_and(|m| m.starts_with("Liveness probe failed"))
    }));
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("Killing")
        && e.message.as_deref() == Some("Container c failed liveness probe, will be restarted")));

    // A missing image: ErrImagePull, then ImagePullBackOff.
    create_pod(
        &cluster,
        json!({"metadata": {"name": "noimage"}, "spec": {"nodeName": cluster.node_name,
        "containers": [{"name": "c", "image": "k3rs.invalid/missing:1"}]}}),
    )
    .await;
    let seen_err = std::sync::atomic::AtomicBool::new(false);
    wait_for(
        "ErrImagePull then ImagePullBackOff",
        Duration::from_secs(120),
        || async {
            let p = cluster.pods().get("noimage").await.ok()?;
            match waiting_reason(&p, "c").as_deref() {
                Some("ErrImagePull") => {
                    seen_err.store(true, std::sync::atomic::Ordering::Relaxed);
                    None
                }
                Some("ImagePullBackOff") => Some(()),
                _ => None,
            }
        },
    )
    .await;
    let events = pod_events(&cluster.admin, "noimage").await;
    assert!(
        seen_err.load(std::sync::atomic::Ordering::Relaxed)
            || events
                .iter()
                .any(|e| e.message.as_deref() == Some("Error: ErrImagePull")),
        "ErrImagePull first: {events:?}"
    );
    assert!(events.iter().any(|e| {
        e.message
            .as_deref()
            .is_some_and(|m| m.starts_with("Failed to pull image \"k3rs.invalid/missing:1\""))
    }));

    // A kubelet restart keeps the running containers.
    kubelet.abort();
    let _ = kubelet.await;
    let (kubelet, mut registered) = cluster.start_kubelet(&rt);
    tokio::time::timeout(Duration::from_secs(60), registered.wait_for(|r| *r))
        .await
        .expect("re-registers")
        .expect("registered");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = cluster.pods().get(&pod_name).await.expect("demo pod");
    let main_after = container_state(&after, "main").unwrap();
    assert_eq!(
        main_after.container_id.as_deref(),
        Some(container_id.as_str()),
        "the same container after a kubelet restart"
    );
    assert_eq!(main_after.restart_count, 0);
    assert!(main_after.ready);

    // Deleting honours the grace period (sleep as PID 1 ignores SIGTERM: SIGKILL after 2 s),
    // then the kubelet deletes the object for good.
    let started = Instant::now();
    cluster
        .pods()
        .delete(&pod_name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for(
        "the pod object to go away",
        Duration::from_secs(30),
        || async {
            cluster
                .pods()
                .get_opt(&pod_name)
                .await
                .ok()
                .and_then(|p| p.is_none().then_some(()))
        },
    )
    .await;
    let took = started.elapsed();
    // The token was bound to that pod: it stops working with the pod.
    assert_unauthorized(&cluster.server, &sa_token).await;
    assert!(
        // The kubelet sees the delete after it happened, so the full 2 s must pass before the
        // SIGKILL; the margin only covers clock granularity. (A truncated CRI stop timeout
        // once made this ~1.3 s.)
        took >= Duration::from_millis(1900),
        "grace period honoured: {took:?}"
    );
    assert!(
        took < Duration::from_secs(20),
        "SIGKILL after the grace period: {took:?}"
    );
    assert!(
        pod_events(&cluster.admin, &pod_name)
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("Killing")
                && e.message.as_deref() == Some("Stopping container main"))
    );

    // Clean up every pod so the runtime keeps nothing of this test.
    deployments
        .delete("demo", &DeleteParams::default())
        .await
        .expect("delete deployment");
    for name in ["crasher", "unhealthy", "noimage"] {
        let _ = cluster.pods().delete(name, &DeleteParams::default()).await;
    }
    wait_for("all pods gone", Duration::from_secs(60), || async {
        let list = cluster.pods().list(&ListParams::default()).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await;
    kubelet.abort();
    drop(cluster.server);
}

/// The mount points of this process (where the kubelet under test runs) under `prefix`,
/// with the host path each one shows (`/proc/self/mountinfo`'s root and mount point).
fn mounts_under(prefix: &Path) -> Vec<(String, PathBuf)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            Some((fields.get(3)?.to_string(), PathBuf::from(fields.get(4)?)))
        })
        .filter(|(_, point)| point.starts_with(prefix))
        .collect()
}

/// CVE-2017-1002101: an init container plants `evil -> /etc` in an emptyDir; a container
/// mounting that emptyDir with `subPath: evil` must not start (the kubelet refuses the
/// subpath, CreateContainerConfigError with kube's message), and the host's /etc is mounted
/// nowhere; a sibling container with an ordinary subPath of the same volume runs and sees
/// what the init container wrote there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subpath_symlink_out_of_the_volume_is_not_mounted() {
    let rt = runtime().await;
    let cluster = Cluster::start().await;
    let (kubelet, _ready) = cluster.start_kubelet(&rt);
    let pod = create_pod(
        &cluster,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "subpath-escape"},
            "spec": {
                "nodeName": cluster.node_name,
                "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "data", "emptyDir": {}}],
                "initContainers": [{
                    "name": "plant", "image": IMAGE,
                    "command": ["sh", "-c", "ln -s /etc /data/evil && mkdir /data/ok && echo planted > /data/ok/note"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }],
                "containers": [
                    {
                        "name": "victim", "image": IMAGE,
                        "command": ["sh", "-c", "cat /host-etc/hostname; exec sleep 3600"],
                        "volumeMounts": [{"name": "data", "mountPath": "/host-etc", "subPath": "evil"}],
                    },
                    {
                        "name": "fine", "image": IMAGE,
                        "command": ["sh", "-c", "cat /ok/note; exec sleep 3600"],
                        "volumeMounts": [{"name": "data", "mountPath": "/ok", "subPath": "ok"}],
                    },
                ],
            }
        }),
    )
    .await;
    let uid = pod.metadata.uid.clone().expect("uid");
    let refused = wait_for(
        "the victim to be refused its subPath",
        Duration::from_secs(120),
        || async {
            let p = cluster.pods().get("subpath-escape").await.ok()?;
            let fine_running = container_state(&p, "fine")?.state?.running.is_some();
            let waiting = container_state(&p, "victim")?.state?.waiting?;
            (fine_running && waiting.reason.as_deref() == Some("CreateContainerConfigError"))
                .then_some(waiting)
        },
    )
    .await;
    assert_eq!(
        refused.message.as_deref(),
        Some("failed to prepare subPath for volumeMount \"data\" of container \"victim\"")
    );
    let p = cluster.pods().get("subpath-escape").await.expect("pod");
    let victim = container_state(&p, "victim").expect("victim status");
    assert!(
        victim.container_id.is_none(),
        "the victim was created: {victim:?}"
    );
    assert_eq!(victim.restart_count, 0);
    // The ordinary subPath works: the sibling read the planted note through it (its CRI
    // log; this harness runs no kubelet server for `kubectl logs`).
    let log_path = cluster
        .kubelet_dir
        .path()
        .join(format!("pods-logs/default_subpath-escape_{uid}/fine/0.log"));
    let logs = wait_for(
        "the fine container's output",
        Duration::from_secs(30),
        || async {
            let text = std::fs::read_to_string(&log_path).ok()?;
            text.contains("planted").then_some(text)
        },
    )
    .await;
    assert!(logs.contains("planted"), "{logs}");
    // No mount of the host's /etc anywhere under the pod; the one subpath mount is the ok dir.
    let pod_dir = cluster.kubelet_dir.path().join("pods").join(&uid);
    let mounts = mounts_under(&pod_dir);
    assert!(
        mounts.iter().all(|(root, _)| !root.starts_with("/etc")),
        "{mounts:?}"
    );
    let subpaths: Vec<&PathBuf> = mounts
        .iter()
        .map(|(_, point)| point)
        .filter(|point| point.starts_with(pod_dir.join("volume-subpaths")))
        .collect();
    // Only the sibling's subpath may be mounted (the host-side bind is not always visible
    // in this process's mountinfo by the time the container runs; what matters is that no
    // mount exists for the victim and none reaches /etc).
    assert!(
        subpaths
            .iter()
            .all(|point| point.starts_with(pod_dir.join("volume-subpaths/data/fine"))),
        "{mounts:?}"
    );
    assert!(
        std::fs::read_dir(pod_dir.join("volume-subpaths/data/victim"))
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "nothing is made for the refused mount"
    );

    cluster
        .pods()
        .delete("subpath-escape", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("the pod to go", Duration::from_secs(60), || async {
        cluster
            .pods()
            .get_opt("subpath-escape")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    wait_for(
        "the subpath mount to be unmounted",
        Duration::from_secs(30),
        || async { mounts_under(&pod_dir).is_empty().then_some(()) },
    )
    .await;
    kubelet.abort();
}
