//! The scheduler against the real API server, with fake nodes: Node objects created
//! through the API by the test (no kubelet). The scheduler runs in-process with the
//! admin client; the tests create pods and watch where they land, which events are
//! written and which conditions are set.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Server, wait_for};

use k3rs::scheduler;

/// Starts a server and the scheduler in-process.
async fn setup() -> (Server, kube::Client) {
    let server = Server::start_with(&["--disable-scheduler"]);
    let client = server.client().await;
    tokio::spawn(scheduler::run(client.clone()));
    (server, client)
}

/// Creates a Ready fake node with allocatable resources, labels and taints.
async fn fake_node(
    client: &kube::Client,
    name: &str,
    cpu: &str,
    memory: &str,
    labels: Value,
    taints: Value,
) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut all_labels = json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"});
    if let (Some(all), Some(extra)) = (all_labels.as_object_mut(), labels.as_object()) {
        all.extend(extra.clone());
    }
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"taints": taints},
    }))
    .expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
    let status = json!({"status": {
        "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
        "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "fake node", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("node status");
}

async fn create_pod(client: &kube::Client, name: &str, cpu: &str, extra_spec: Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut spec = json!({"containers": [{"name": "c", "image": "pause",
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]});
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(extra.clone());
    }
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

async fn node_of(client: &kube::Client, pod: &str) -> Option<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.get(pod)
        .await
        .ok()?
        .spec?
        .node_name
        .filter(|n| !n.is_empty())
}

async fn wait_bound(client: &kube::Client, pod: &str) -> String {
    wait_for(
        &format!("{pod} to be bound"),
        Duration::from_secs(30),
        || node_of(client, pod),
    )
    .await
}

async fn events_for(client: &kube::Client, pod: &str, reason: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(pod) && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_bound_spread_and_get_scheduled_events() {
    let (_server, client) = setup().await;
    for n in ["node-a", "node-b", "node-c"] {
        fake_node(&client, n, "4", "8Gi", json!({}), json!([])).await;
    }
    for i in 0..6 {
        create_pod(&client, &format!("web-{i}"), "500m", json!({})).await;
    }
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..6 {
        *per_node
            .entry(wait_bound(&client, &format!("web-{i}")).await)
            .or_default() += 1;
    }
    assert_eq!(
        per_node,
        BTreeMap::from([
            ("node-a".into(), 2),
            ("node-b".into(), 2),
            ("node-c".into(), 2)
        ]),
        "least-allocated spreads equal pods evenly"
    );
    let node = node_of(&client, "web-0").await.expect("node");
    let events = wait_for("a Scheduled event", Duration::from_secs(10), || async {
        let e = events_for(&client, "web-0", "Scheduled").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(
        events[0].message.as_deref(),
        Some(format!("Successfully assigned default/web-0 to {node}").as_str())
    );
    assert_eq!(events[0].type_.as_deref(), Some("Normal"));
    assert_eq!(
        events[0]
            .source
            .as_ref()
            .and_then(|s| s.component.as_deref()),
        Some("default-scheduler")
    );
    // The scheduler holds the leader lease.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-system");
    let lease = leases.get("kube-scheduler").await.expect("lease");
    let spec = lease.spec.expect("lease spec");
    assert!(spec.holder_identity.is_some_and(|h| !h.is_empty()));
    assert_eq!(spec.lease_duration_seconds, Some(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_selector_affinity_and_taints_place_pods() {
    let (_server, client) = setup().await;
    fake_node(
        &client,
        "ssd",
        "4",
        "8Gi",
        json!({"disk": "ssd"}),
        json!([]),
    )
    .await;
    fake_node(
        &client,
        "gpu",
        "4",
        "8Gi",
        json!({"accelerator": "gpu"}),
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
    )
    .await;
    fake_node(&client, "plain", "4", "8Gi", json!({}), json!([])).await;

    create_pod(
        &client,
        "wants-ssd",
        "100m",
        json!({"nodeSelector": {"disk": "ssd"}}),
    )
    .await;
    create_pod(
        &client,
        "gpu-job",
        "100m",
        json!({
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "accelerator", "operator": "In", "values": ["gpu"]}]}]}}}
        }),
    )
    .await;
    create_pod(
        &client,
        "not-ssd",
        "100m",
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "disk", "operator": "DoesNotExist"}]}]}}}}),
    )
    .await;
    for i in 0..4 {
        create_pod(&client, &format!("any-{i}"), "100m", json!({})).await;
    }
    assert_eq!(wait_bound(&client, "wants-ssd").await, "ssd");
    assert_eq!(wait_bound(&client, "gpu-job").await, "gpu");
    // DoesNotExist excludes ssd, and the taint excludes gpu.
    assert_eq!(wait_bound(&client, "not-ssd").await, "plain");
    for i in 0..4 {
        let node = wait_bound(&client, &format!("any-{i}")).await;
        assert_ne!(node, "gpu", "any-{i} landed on the tainted node");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_big_pod_is_unschedulable_then_scheduled_when_a_node_fits() {
    let (_server, client) = setup().await;
    fake_node(
        &client,
        "server",
        "4",
        "8Gi",
        json!({"node-role.kubernetes.io/control-plane": "true"}),
        json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
    )
    .await;
    fake_node(&client, "agent-1", "2", "4Gi", json!({}), json!([])).await;
    fake_node(&client, "agent-2", "2", "4Gi", json!({}), json!([])).await;
    create_pod(&client, "huge", "3", json!({})).await;

    let expected = "0/3 nodes are available: 1 node(s) had untolerated taint \
        {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu. preemption: 0/3 nodes \
        are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims \
        found for incoming pod.";
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // The first attempt may run before the scheduler has seen the last node's status (it
    // is written after the node): wait for the verdict over all three nodes as they are.
    let condition = wait_for("PodScheduled=False", Duration::from_secs(30), || async {
        pods.get("huge")
            .await
            .ok()?
            .status?
            .conditions?
            .into_iter()
            .find(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.message.as_deref() == Some(expected)
            })
    })
    .await;
    assert_eq!(condition.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(condition.message.as_deref(), Some(expected));
    let events = wait_for(
        "a FailedScheduling event",
        Duration::from_secs(10),
        || async {
            let e: Vec<_> = events_for(&client, "huge", "FailedScheduling")
                .await
                .into_iter()
                .filter(|e| e.message.as_deref() == Some(expected))
                .collect();
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert_eq!(events[0].message.as_deref(), Some(expected));
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    assert!(node_of(&client, "huge").await.is_none());

    // A node big enough appears: the pod is retried at once and bound there.
    fake_node(&client, "big", "8", "16Gi", json!({}), json!([])).await;
    assert_eq!(wait_bound(&client, "huge").await, "big");
    // The binding replaced the condition: PodScheduled is now True.
    let conditions = pods
        .get("huge")
        .await
        .expect("pod")
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    let scheduled = conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .expect("PodScheduled condition");
    assert_eq!(scheduled.status, "True", "{conditions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_of_bound_pods_are_accounted() {
    let (_server, client) = setup().await;
    fake_node(&client, "small", "1", "2Gi", json!({}), json!([])).await;
    for i in 0..3 {
        create_pod(&client, &format!("half-{i}"), "500m", json!({})).await;
    }
    // Two fit, the third does not: 1 cpu allocatable.
    let mut bound = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        bound = 0;
        for i in 0..3 {
            if node_of(&client, &format!("half-{i}")).await.is_some() {
                bound += 1;
            }
        }
        if bound == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(bound, 2);
    let unbound = {
        let mut name = None;
        for i in 0..3 {
            let n = format!("half-{i}");
            if node_of(&client, &n).await.is_none() {
                name = Some(n);
            }
        }
        name.expect("one pod left pending")
    };
    let events = wait_for(
        "a FailedScheduling event",
        Duration::from_secs(10),
        || async {
            let e = events_for(&client, &unbound, "FailedScheduling").await;
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert_eq!(
        events[0].message.as_deref(),
        Some(
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: \
             1 No preemption victims found for incoming pod."
        )
    );
    // Deleting a bound pod frees room: the pending one is bound.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let victim = (0..3)
        .map(|i| format!("half-{i}"))
        .find(|n| *n != unbound)
        .expect("a bound pod");
    pods.delete(&victim, &kube::api::DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    assert_eq!(wait_bound(&client, &unbound).await, "small");
}

async fn lease_holder(client: &kube::Client) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-system");
    leases
        .get("kube-scheduler")
        .await
        .ok()?
        .spec?
        .holder_identity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_schedules_and_a_standby_takes_over() {
    let server = Server::start_with(&["--disable-scheduler"]);
    let client = server.client().await;
    let config = |identity: &str| {
        let mut c = scheduler::Config::default();
        let leader = c
            .leader
            .as_mut()
            .expect("the scheduler elects itself by default");
        leader.identity = identity.into();
        leader.lease_duration = Duration::from_secs(2);
        leader.renew_deadline = Duration::from_millis(1500);
        leader.retry_period = Duration::from_millis(200);
        c
    };
    let first = tokio::spawn(scheduler::run_with(client.clone(), config("first")));
    wait_for("first to lead", Duration::from_secs(10), || async {
        (lease_holder(&client).await.as_deref() == Some("first")).then_some(())
    })
    .await;
    let second = tokio::spawn(scheduler::run_with(client.clone(), config("second")));
    fake_node(&client, "n1", "4", "8Gi", json!({}), json!([])).await;
    create_pod(&client, "before", "100m", json!({})).await;
    wait_bound(&client, "before").await;
    // The standby did not steal the lease while the leader renews it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(lease_holder(&client).await.as_deref(), Some("first"));

    // The leader stops; the standby acquires the expired lease and schedules.
    first.abort();
    wait_for("second to lead", Duration::from_secs(15), || async {
        (lease_holder(&client).await.as_deref() == Some("second")).then_some(())
    })
    .await;
    create_pod(&client, "after", "100m", json!({})).await;
    assert_eq!(wait_bound(&client, "after").await, "n1");
    let events = events_for(&client, "before", "Scheduled").await;
    assert_eq!(events.len(), 1, "bound once: {events:?}");
    second.abort();
}

/// Creates a pod with labels in `default` (100m cpu, 64Mi).
async fn create_labeled_pod(client: &kube::Client, name: &str, labels: Value, extra_spec: Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut spec = json!({"containers": [{"name": "c", "image": "pause",
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]});
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(extra.clone());
    }
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": spec,
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

/// Waits for the pod's `PodScheduled=False` condition and its FailedScheduling event,
/// asserts both carry `expected`, and that the pod stays unbound.
async fn assert_unschedulable(client: &kube::Client, pod: &str, expected: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let condition = wait_for("PodScheduled=False", Duration::from_secs(20), || async {
        pods.get(pod)
            .await
            .ok()?
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    })
    .await;
    assert_eq!(condition.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(condition.message.as_deref(), Some(expected));
    let events = wait_for(
        "a FailedScheduling event",
        Duration::from_secs(10),
        || async {
            let e = events_for(client, pod, "FailedScheduling").await;
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert_eq!(events[0].message.as_deref(), Some(expected));
    assert!(node_of(client, pod).await.is_none(), "{pod} was bound");
}

fn zone_spread(max_skew: i32, app: &str) -> Value {
    json!({"topologySpreadConstraints": [{
        "maxSkew": max_skew, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_spread_max_skew_1_balances_zones() {
    let (_server, client) = setup().await;
    // Three nodes in zone a, one in zone b: resource scores alone would put most
    // pods in zone a.
    for (n, zone) in [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")] {
        fake_node(
            &client,
            n,
            "8",
            "16Gi",
            json!({"topology.kubernetes.io/zone": zone}),
            json!([]),
        )
        .await;
    }
    for i in 0..6 {
        create_labeled_pod(
            &client,
            &format!("web-{i}"),
            json!({"app": "web"}),
            zone_spread(1, "web"),
        )
        .await;
    }
    let mut per_zone: BTreeMap<char, usize> = BTreeMap::new();
    for i in 0..6 {
        let node = wait_bound(&client, &format!("web-{i}")).await;
        *per_zone
            .entry(node.chars().next().unwrap_or('?'))
            .or_default() += 1;
    }
    assert_eq!(per_zone, BTreeMap::from([('a', 3), ('b', 3)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn do_not_schedule_keeps_a_pod_pending_with_kubes_message() {
    let (_server, client) = setup().await;
    fake_node(
        &client,
        "za",
        "4",
        "8Gi",
        json!({"topology.kubernetes.io/zone": "a"}),
        json!([]),
    )
    .await;
    // Zone b exists (its node counts as a domain) but its node is cordoned.
    fake_node(
        &client,
        "zb",
        "4",
        "8Gi",
        json!({"topology.kubernetes.io/zone": "b"}),
        json!([]),
    )
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    let cordon = |on: bool| json!({"spec": {"unschedulable": on}});
    nodes
        .patch("zb", &PatchParams::default(), &Patch::Merge(&cordon(true)))
        .await
        .expect("cordon");
    // A node without the zone label at all.
    fake_node(&client, "nozone", "4", "8Gi", json!({}), json!([])).await;

    create_labeled_pod(&client, "db-0", json!({"app": "db"}), zone_spread(1, "db")).await;
    assert_eq!(wait_bound(&client, "db-0").await, "za");
    create_labeled_pod(&client, "db-1", json!({"app": "db"}), zone_spread(1, "db")).await;
    assert_unschedulable(
        &client,
        "db-1",
        "0/3 nodes are available: 1 node(s) didn't match pod topology spread constraints, \
         1 node(s) didn't match pod topology spread constraints (missing required label), \
         1 node(s) were unschedulable. preemption: 0/3 nodes are available: 1 No preemption \
         victims found for incoming pod, 2 Preemption is not helpful for scheduling.",
    )
    .await;
    // Uncordoning zone b's node lets it go there.
    nodes
        .patch("zb", &PatchParams::default(), &Patch::Merge(&cordon(false)))
        .await
        .expect("uncordon");
    assert_eq!(wait_bound(&client, "db-1").await, "zb");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_anti_affinity_puts_one_replica_per_node() {
    let (_server, client) = setup().await;
    for n in ["n1", "n2", "n3"] {
        fake_node(&client, n, "4", "8Gi", json!({}), json!([])).await;
    }
    let anti = json!({"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "cache"}},
            "topologyKey": "kubernetes.io/hostname"}]}}});
    for i in 0..3 {
        create_labeled_pod(
            &client,
            &format!("cache-{i}"),
            json!({"app": "cache"}),
            anti.clone(),
        )
        .await;
    }
    let mut nodes = std::collections::BTreeSet::new();
    for i in 0..3 {
        nodes.insert(wait_bound(&client, &format!("cache-{i}")).await);
    }
    assert_eq!(nodes.len(), 3, "one replica per node: {nodes:?}");
    create_labeled_pod(&client, "cache-3", json!({"app": "cache"}), anti.clone()).await;
    assert_unschedulable(
        &client,
        "cache-3",
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. preemption: \
         0/3 nodes are available: 3 No preemption victims found for incoming pod.",
    )
    .await;
    // A pod without terms of its own is kept off by the existing pods' anti-affinity.
    create_labeled_pod(&client, "intruder", json!({"app": "cache"}), json!({})).await;
    assert_unschedulable(
        &client,
        "intruder",
        "0/3 nodes are available: 3 node(s) didn't satisfy existing pods anti-affinity rules. \
         preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
    )
    .await;
    // Deleting one replica frees its node for the pending one (the intruder goes
    // first, so that it cannot take the freed node).
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let delete_now = kube::api::DeleteParams::default().grace_period(0);
    pods.delete("intruder", &delete_now).await.expect("delete");
    wait_for(
        "the intruder to be gone",
        Duration::from_secs(10),
        || async { pods.get_opt("intruder").await.ok()?.is_none().then_some(()) },
    )
    .await;
    let freed = node_of(&client, "cache-0").await.expect("bound");
    pods.delete("cache-0", &delete_now).await.expect("delete");
    assert_eq!(wait_bound(&client, "cache-3").await, freed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_affinity_co_locates_and_unmatched_affinity_waits() {
    let (_server, client) = setup().await;
    for n in ["n1", "n2", "n3"] {
        fake_node(&client, n, "4", "8Gi", json!({}), json!([])).await;
    }
    create_labeled_pod(
        &client,
        "db",
        json!({"app": "db"}),
        json!({"nodeSelector": {"kubernetes.io/hostname": "n2"}}),
    )
    .await;
    assert_eq!(wait_bound(&client, "db").await, "n2");
    let with_db = json!({"affinity": {"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "db"}},
            "topologyKey": "kubernetes.io/hostname"}]}}});
    for i in 0..3 {
        create_labeled_pod(
            &client,
            &format!("app-{i}"),
            json!({"app": "app"}),
            with_db.clone(),
        )
        .await;
    }
    for i in 0..3 {
        assert_eq!(wait_bound(&client, &format!("app-{i}")).await, "n2");
    }
    // Affinity to pods that do not exist (and the pod does not match itself).
    let with_queue = json!({"affinity": {"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "queue"}},
            "topologyKey": "kubernetes.io/hostname"}]}}});
    create_labeled_pod(&client, "worker", json!({"app": "worker"}), with_queue).await;
    assert_unschedulable(
        &client,
        "worker",
        "0/3 nodes are available: 3 node(s) didn't match pod affinity rules. preemption: 0/3 \
         nodes are available: 3 Preemption is not helpful for scheduling.",
    )
    .await;
    // The pod it wants appears (bound to n3): it follows at once.
    create_labeled_pod(
        &client,
        "queue",
        json!({"app": "queue"}),
        json!({"nodeSelector": {"kubernetes.io/hostname": "n3"}}),
    )
    .await;
    assert_eq!(wait_bound(&client, "worker").await, "n3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_affinity_and_image_locality_win_on_score() {
    let (_server, client) = setup().await;
    for n in ["n1", "n2", "n3", "n4"] {
        fake_node(&client, n, "8", "16Gi", json!({}), json!([])).await;
    }
    // n4 holds a large image.
    let nodes: Api<Node> = Api::all(client.clone());
    let images = json!({"status": {"images": [
        {"names": ["registry.example/big@sha256:0123", "registry.example/big:1.0"],
         "sizeBytes": 900u64 * 1024 * 1024}]}});
    nodes
        .patch_status("n4", &PatchParams::default(), &Patch::Merge(&images))
        .await
        .expect("node images");
    create_labeled_pod(
        &client,
        "cache",
        json!({"app": "cache"}),
        json!({"nodeSelector": {"kubernetes.io/hostname": "n3"}}),
    )
    .await;
    assert_eq!(wait_bound(&client, "cache").await, "n3");
    let near_cache = json!({"affinity": {"podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
            "labelSelector": {"matchLabels": {"app": "cache"}},
            "topologyKey": "kubernetes.io/hostname"}}]}}});
    for i in 0..3 {
        create_labeled_pod(
            &client,
            &format!("near-{i}"),
            json!({"app": "near"}),
            near_cache.clone(),
        )
        .await;
        assert_eq!(wait_bound(&client, &format!("near-{i}")).await, "n3");
    }
    for i in 0..2 {
        let name = format!("big-{i}");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "registry.example/big:1.0",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
        assert_eq!(wait_bound(&client, &name).await, "n4", "image locality");
    }
}

/// The server's own scheduler (an in-process client): its status writes carry the
/// `kube-scheduler` field manager, as kube-scheduler's do, and a pod it parked as
/// unschedulable (kept without its JSON) is read back and bound once a node fits.
#[tokio::test]
async fn the_servers_scheduler_writes_as_kube_scheduler_and_binds_parked_pods() {
    let server = Server::start_with(&[]);
    let client = server.client().await;
    create_pod(&client, "waiting", "1", json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let managers = wait_for("PodScheduled=False", Duration::from_secs(30), || async {
        let pod = pods.get("waiting").await.ok()?;
        pod.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
        pod.metadata.managed_fields
    })
    .await;
    let scheduler = managers
        .iter()
        .find(|m| m.subresource.as_deref() == Some("status"))
        .expect("a status entry");
    assert_eq!(
        scheduler.manager.as_deref(),
        Some("kube-scheduler"),
        "{managers:?}"
    );
    // Long enough for the pod to be parked and our own status update to arrive.
    tokio::time::sleep(Duration::from_secs(1)).await;
    fake_node(&client, "late", "4", "8Gi", json!({}), json!([])).await;
    assert_eq!(wait_bound(&client, "waiting").await, "late");
}
