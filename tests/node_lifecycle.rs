//! Node lifecycle, taint eviction, node IPAM, pod GC and the `kubernetes` Service's
//! endpoints against the real server, with fake nodes: Node objects and
//! `kube-node-lease` Leases created and renewed by the test (it plays the kubelet),
//! and short timeouts passed the k3s way (`--kube-controller-manager-arg`).

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Endpoints, Event, Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{Server, wait_for_every};

/// How often a `wait_for_every` here polls.
const POLL: Duration = Duration::from_millis(200);

fn micro_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock");
    let ts = k8s_openapi::jiff::Timestamp::new(now.as_secs() as i64, now.subsec_nanos() as i32)
        .expect("timestamp");
    ts.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn seconds_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock");
    k8s_openapi::jiff::Timestamp::from_second(now.as_secs() as i64)
        .expect("timestamp")
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Creates a Ready fake node and its Lease, as a kubelet registering would.
async fn fake_node(client: &kube::Client, name: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
    }))
    .expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
    post_ready(client, name, "True").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro_now()},
    }))
    .expect("lease");
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create lease");
}

/// Posts node status as a kubelet does: capacity and a Ready condition with a fresh
/// heartbeat.
async fn post_ready(client: &kube::Client, name: &str, ready: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let now = seconds_now();
    let status = json!({"status": {
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady",
                        "message": "fake kubelet", "lastHeartbeatTime": now,
                        "lastTransitionTime": now}]
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("node status");
}

async fn renew(client: &kube::Client, name: &str) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let patch = json!({"spec": {"renewTime": micro_now()}});
    let _ = leases
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
}

/// Renews the Leases of `nodes` every 500 ms while their flag is set.
fn keep_renewing(client: kube::Client, nodes: Vec<(String, Arc<AtomicBool>)>) {
    tokio::spawn(async move {
        loop {
            for (name, alive) in &nodes {
                if alive.load(Ordering::SeqCst) {
                    renew(&client, name).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
}

fn taints(node: &Node) -> Vec<(String, String)> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.effect))
        .collect()
}

fn ready_condition(node: &Node) -> Option<k8s_openapi::api::core::v1::NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .cloned()
}

fn pod_ready(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

fn node_name(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// Plays the kubelet for a bound pod: Running and Ready.
async fn mark_running(client: &kube::Client, pod: &Pod, ip: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let status = json!({"status": {"phase": "Running", "podIP": ip,
        "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(
        pod.metadata.name.as_deref().expect("name"),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .expect("pod status");
}

async fn events_with(client: &kube::Client, reason: &str) -> Vec<Event> {
    let events: Api<Event> = Api::all(client.clone());
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

const TUNING: [&str; 5] = [
    "--kube-controller-manager-arg",
    "node-monitor-grace-period=3s",
    "--kube-controller-manager-arg",
    "node-monitor-period=500ms",
    "--kube-controller-manager-arg=node-eviction-rate=10",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_node_is_tainted_its_pods_move_and_taints_go_when_it_returns() {
    let server = Server::start_with(&TUNING);
    let client = server.client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    let a_alive = Arc::new(AtomicBool::new(true));
    let b_alive = Arc::new(AtomicBool::new(true));
    fake_node(&client, "node-a").await;
    keep_renewing(
        client.clone(),
        vec![
            ("node-a".into(), a_alive.clone()),
            ("node-b".into(), b_alive.clone()),
        ],
    );

    // Two Deployment pods that tolerate the unreachable taint for 2 s, and a bare pod
    // that tolerates it forever, all on node-a (the only node so far).
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "default");
    let deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "pause"}],
                    "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 2}]}}}
    }))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create deployment");
    let forever: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "forever"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "pause"}],
            "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                             "effect": "NoExecute"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &forever)
        .await
        .expect("create pod");
    // Admission added the not-ready default next to the pod's own toleration.
    let created = pods.get("forever").await.expect("pod");
    let tolerations = created
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    assert!(
        tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some("node.kubernetes.io/not-ready")
                && t.toleration_seconds == Some(300)),
        "{tolerations:?}"
    );

    let on_a = wait_for_every(
        "deployment pods bound to node-a",
        Duration::from_secs(30),
        POLL,
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            let bound: Vec<Pod> = list
                .items
                .into_iter()
                .filter(|p| node_name(p) == "node-a")
                .collect();
            (bound.len() == 2).then_some(bound)
        },
    )
    .await;
    for (i, pod) in on_a.iter().enumerate() {
        mark_running(&client, pod, &format!("10.42.0.{}", i + 10)).await;
    }
    mark_running(&client, &created, "10.42.0.9").await;
    let first_pods: BTreeSet<String> = on_a
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();

    // A second, healthy node; then node-a goes silent.
    fake_node(&client, "node-b").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    a_alive.store(false, Ordering::SeqCst);

    let unknown = wait_for_every(
        "node-a Ready=Unknown",
        Duration::from_secs(20),
        POLL,
        || async {
            let node = nodes.get("node-a").await.ok()?;
            let ready = ready_condition(&node)?;
            (ready.status == "Unknown").then_some(ready)
        },
    )
    .await;
    assert_eq!(unknown.reason.as_deref(), Some("NodeStatusUnknown"));
    assert_eq!(
        unknown.message.as_deref(),
        Some("Kubelet stopped posting node status.")
    );
    let tainted = wait_for_every(
        "node-a unreachable taints",
        Duration::from_secs(20),
        POLL,
        || async {
            let node = nodes.get("node-a").await.ok()?;
            let t = taints(&node);
            (t.contains(&("node.kubernetes.io/unreachable".into(), "NoExecute".into()))
                && t.contains(&("node.kubernetes.io/unreachable".into(), "NoSchedule".into())))
            .then_some(node)
        },
    )
    .await;
    assert!(
        ready_condition(&nodes.get("node-b").await.expect("node-b"))
            .is_some_and(|c| c.status == "True"),
        "node-b stays Ready"
    );
    assert!(taints(&nodes.get("node-b").await.expect("node-b")).is_empty());
    let no_execute = tainted
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .find(|t| t.effect == "NoExecute")
        .expect("NoExecute taint");
    assert!(
        no_execute.time_added.is_some(),
        "NoExecute taints carry timeAdded"
    );

    // NodeNotReady on the node; its pods marked Ready=False.
    let not_ready = wait_for_every(
        "NodeNotReady event",
        Duration::from_secs(10),
        POLL,
        || async {
            events_with(&client, "NodeNotReady")
                .await
                .into_iter()
                .find(|e| e.involved_object.kind.as_deref() == Some("Node"))
        },
    )
    .await;
    assert_eq!(
        not_ready.message.as_deref(),
        Some("Node node-a status is now: NodeNotReady")
    );
    wait_for_every(
        "forever pod marked not ready",
        Duration::from_secs(10),
        POLL,
        || async {
            let pod = pods.get("forever").await.ok()?;
            (pod_ready(&pod).as_deref() == Some("False")).then_some(())
        },
    )
    .await;

    // The Deployment's pods are evicted after their 2 s and replaced on node-b.
    wait_for_every(
        "pods evicted from node-a and replaced on node-b",
        Duration::from_secs(30),
        POLL,
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            let evicted = list
                .items
                .iter()
                .filter(|p| first_pods.contains(p.metadata.name.as_deref().unwrap_or_default()))
                .all(|p| p.metadata.deletion_timestamp.is_some());
            let on_b = list
                .items
                .iter()
                .filter(|p| node_name(p) == "node-b" && p.metadata.deletion_timestamp.is_none())
                .count();
            (evicted && on_b == 2).then_some(())
        },
    )
    .await;
    let evictions = events_with(&client, "TaintManagerEviction").await;
    for name in &first_pods {
        let message = format!("Marking for deletion Pod default/{name}");
        assert!(
            evictions
                .iter()
                .any(|e| e.message.as_deref() == Some(message.as_str())),
            "no {message:?} in {evictions:?}"
        );
    }
    // The pod tolerating the taint without seconds stays.
    let kept = pods.get("forever").await.expect("forever");
    assert!(
        kept.metadata.deletion_timestamp.is_none(),
        "tolerating forever keeps the pod"
    );

    // node-a comes back: heartbeats and Ready=True again; the taints go.
    a_alive.store(true, Ordering::SeqCst);
    post_ready(&client, "node-a", "True").await;
    wait_for_every(
        "node-a taints removed",
        Duration::from_secs(20),
        POLL,
        || async {
            let node = nodes.get("node-a").await.ok()?;
            taints(&node).is_empty().then_some(())
        },
    )
    .await;
    assert!(
        pods.get("forever")
            .await
            .expect("forever")
            .metadata
            .deletion_timestamp
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_nodes_down_means_no_evictions() {
    // One node only: when it goes silent every zone is fully disrupted, which kube
    // reads as the control plane being cut off — conditions go Unknown, but no
    // NoExecute taint (so nothing is evicted).
    let server = Server::start_with(&TUNING);
    let client = server.client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    fake_node(&client, "lonely").await;
    wait_for_every(
        "lonely Ready=Unknown",
        Duration::from_secs(20),
        POLL,
        || async {
            let node = nodes.get("lonely").await.ok()?;
            (ready_condition(&node)?.status == "Unknown").then_some(())
        },
    )
    .await;
    let node = wait_for_every(
        "unreachable NoSchedule taint",
        Duration::from_secs(10),
        POLL,
        || async {
            let node = nodes.get("lonely").await.ok()?;
            taints(&node)
                .contains(&("node.kubernetes.io/unreachable".into(), "NoSchedule".into()))
                .then_some(node)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let node = nodes.get("lonely").await.unwrap_or(node);
    assert!(
        !taints(&node)
            .iter()
            .any(|(_, effect)| effect == "NoExecute"),
        "{:?}",
        taints(&node)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipam_gives_distinct_cidrs_reports_exhaustion_and_reuses_released_ones() {
    // A /22 holds four /24s.
    let server = Server::start_with(&["--cluster-cidr", "10.42.0.0/22"]);
    let client = server.client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let cidr_of = |nodes: Api<Node>, name: &'static str| async move {
        let node = nodes.get(name).await.ok()?;
        let spec = node.spec?;
        let cidr = spec.pod_cidr.filter(|c| !c.is_empty())?;
        assert_eq!(
            spec.pod_cidrs,
            Some(vec![cidr.clone()]),
            "podCIDRs matches podCIDR"
        );
        Some(cidr)
    };
    // A node that already has a CIDR keeps it and that CIDR is never handed out.
    let preset: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "preset"},
        "spec": {"podCIDR": "10.42.1.0/24", "podCIDRs": ["10.42.1.0/24"]},
    }))
    .expect("node");
    nodes
        .create(&PostParams::default(), &preset)
        .await
        .expect("create preset");
    let mut seen = BTreeSet::new();
    for name in ["n1", "n2"] {
        fake_node(&client, name).await;
        let cidr = wait_for_every("a pod CIDR", Duration::from_secs(15), POLL, || {
            cidr_of(nodes.clone(), name)
        })
        .await;
        assert!(
            cidr.starts_with("10.42.") && cidr.ends_with(".0/24"),
            "{cidr}"
        );
        assert_ne!(cidr, "10.42.1.0/24", "the preset CIDR is taken");
        assert!(seen.insert(cidr), "distinct CIDRs");
    }
    assert_eq!(
        cidr_of(nodes.clone(), "preset").await.as_deref(),
        Some("10.42.1.0/24")
    );

    // Restart: the allocation map is rebuilt from the nodes, so the last free /24 is
    // the only one a new node can get.
    let server = server.restart(&["--cluster-cidr", "10.42.0.0/22"]);
    let client = server.client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    fake_node(&client, "n3").await;
    let n3 = wait_for_every("n3 CIDR", Duration::from_secs(15), POLL, || {
        cidr_of(nodes.clone(), "n3")
    })
    .await;
    assert!(!seen.contains(&n3) && n3 != "10.42.1.0/24", "{n3} collides");
    seen.insert(n3);

    // The range is exhausted: n4 waits with a CIDRNotAvailable event.
    fake_node(&client, "n4").await;
    let event = wait_for_every(
        "CIDRNotAvailable",
        Duration::from_secs(15),
        POLL,
        || async {
            events_with(&client, "CIDRNotAvailable")
                .await
                .into_iter()
                .find(|e| e.involved_object.name.as_deref() == Some("n4"))
        },
    )
    .await;
    assert_eq!(
        event.message.as_deref(),
        Some("Node n4 status is now: CIDRNotAvailable")
    );
    assert_eq!(cidr_of(nodes.clone(), "n4").await, None);

    // Deleting n1 releases its CIDR, which n4 then gets.
    let n1 = cidr_of(nodes.clone(), "n1").await.expect("n1 cidr");
    nodes
        .delete("n1", &DeleteParams::default())
        .await
        .expect("delete n1");
    let n4 = wait_for_every(
        "n4 gets the released CIDR",
        Duration::from_secs(15),
        POLL,
        || cidr_of(nodes.clone(), "n4"),
    )
    .await;
    assert_eq!(n4, n1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_gc_deletes_pods_of_deleted_nodes_and_trims_terminated_pods() {
    let server = Server::start_with(&[
        "--disable-scheduler",
        "--kube-controller-manager-arg",
        "node-monitor-grace-period=2s",
        "--kube-controller-manager-arg",
        "terminated-pod-gc-threshold=2",
    ]);
    let client = server.client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    fake_node(&client, "doomed").await;
    for name in ["orphan-running", "orphan-terminating"] {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "doomed", "containers": [{"name": "c", "image": "pause"}]}
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
    // Bound to a node, so deleting it only marks it terminating (no kubelet confirms).
    pods.delete("orphan-terminating", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(
        pods.get("orphan-terminating")
            .await
            .expect("still there")
            .metadata
            .deletion_timestamp
            .is_some()
    );
    // Four finished pods (never bound: the scheduler is off), oldest first.
    for (i, phase) in ["Succeeded", "Failed", "Succeeded", "Failed"]
        .iter()
        .enumerate()
    {
        let name = format!("done-{i}");
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "pause"}]}
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
        pods.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"phase": phase}})),
        )
        .await
        .expect("phase");
        // Distinct creation timestamps (they have second precision).
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let left = wait_for_every(
        "terminated pods trimmed to 2",
        Duration::from_secs(30),
        POLL,
        || async {
            let names: BTreeSet<String> = pods
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .filter(|n| n.starts_with("done-"))
                .collect();
            (names.len() == 2).then_some(names)
        },
    )
    .await;
    assert_eq!(
        left,
        BTreeSet::from(["done-2".to_string(), "done-3".to_string()]),
        "the oldest go first"
    );

    // The node goes away: after the quarantine both of its pods are force deleted.
    nodes
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete node");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        pods.get_opt("orphan-running").await.expect("get").is_some(),
        "not before the quarantine"
    );
    wait_for_every(
        "orphaned pods deleted",
        Duration::from_secs(30),
        POLL,
        || async {
            let running = pods.get_opt("orphan-running").await.ok()?;
            let terminating = pods.get_opt("orphan-terminating").await.ok()?;
            (running.is_none() && terminating.is_none()).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_service_endpoints_list_the_server() {
    let server = Server::start_with(&["--advertise-address", "127.0.0.1"]);
    let client = server.client().await;
    let port = server.port;
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = endpoints.get("kubernetes").await.expect("endpoints");
    assert_eq!(
        ep.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("endpointslice.kubernetes.io/skip-mirror"))
            .map(String::as_str),
        Some("true")
    );
    let subsets = ep.subsets.expect("subsets");
    assert_eq!(subsets.len(), 1);
    let addresses = subsets[0].addresses.clone().expect("addresses");
    assert_eq!(addresses[0].ip, "127.0.0.1");
    let ports = subsets[0].ports.clone().expect("ports");
    assert_eq!(ports[0].name.as_deref(), Some("https"));
    assert_eq!(ports[0].port, i32::from(port));

    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let slice = slices.get("kubernetes").await.expect("slice");
    let labels = slice.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("kubernetes.io/service-name").map(String::as_str),
        Some("kubernetes")
    );
    assert!(
        !labels.contains_key("endpointslice.kubernetes.io/managed-by"),
        "not the EndpointSlice controller's"
    );
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(slice.endpoints[0].addresses, ["127.0.0.1"]);
    assert_eq!(
        slice.endpoints[0].conditions.as_ref().and_then(|c| c.ready),
        Some(true)
    );

    // What kubectl users see.
    let out = server.kubectl_with(
        std::path::Path::new("kubectl"),
        &["get", "endpoints", "kubernetes"],
        None,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("127.0.0.1:{port}")), "{stdout}");

    // The endpoint controllers leave it alone, and the API server repairs edits.
    let broken = json!({"subsets": [{"addresses": [{"ip": "10.9.9.9"}], "ports": [{"name": "https", "port": 1, "protocol": "TCP"}]}]});
    endpoints
        .patch(
            "kubernetes",
            &PatchParams::default(),
            &Patch::Merge(&broken),
        )
        .await
        .expect("patch");
    wait_for_every(
        "endpoints repaired",
        Duration::from_secs(20),
        POLL,
        || async {
            let ep = endpoints.get("kubernetes").await.ok()?;
            let subset = ep.subsets?.into_iter().next()?;
            (subset.addresses?.first()?.ip == "127.0.0.1").then_some(())
        },
    )
    .await;
}

#[test]
fn bad_controller_manager_args_are_refused() {
    for (arg, expected) in [
        ("node-monitor-grace-period=soon", "is not a duration"),
        (
            "bind-address=0.0.0.0",
            "does not implement the kube-controller-manager flag --bind-address",
        ),
        ("node-monitor-grace-period", "expected <flag>=<value>"),
        ("terminated-pod-gc-threshold=-3", "whole number"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = std::process::Command::new(support::k3rs_bin())
            .args(["server", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--write-kubeconfig")
            .arg(dir.path().join("kc.yaml"))
            .args([
                "--config",
                "/dev/null",
                "--kube-controller-manager-arg",
                arg,
            ])
            .output()
            .expect("run k3rs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{arg}: {stderr}");
        assert!(
            stderr.contains("--kube-controller-manager-arg") && stderr.contains(expected),
            "{arg}: {stderr}"
        );
        assert!(
            !dir.path().join("data").exists(),
            "nothing written for {arg}"
        );
    }
}
