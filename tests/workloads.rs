//! The workload controllers against the real binary: ReplicationController,
//! DaemonSet, StatefulSet, Job and CronJob. The server runs the controller-manager
//! and the scheduler in-process; there is no kubelet, so the test plays it by
//! patching pod status (Running/Ready, Succeeded, Failed) and creates fake Node
//! objects for DaemonSets. `kubectl rollout status` proves the DaemonSet and
//! StatefulSet status fields are the ones kubectl reads. CronJob tests speed the
//! controller's clock up with `K3RS_CRONJOB_TIME_SCALE`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Event, Node, PersistentVolumeClaim, Pod, ReplicationController};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Server, wait_for};

const NS: &str = "default";
const TIMEOUT: Duration = Duration::from_secs(40);

async fn create<K>(client: &kube::Client, object: Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize,
{
    let api: Api<K> = Api::namespaced(client.clone(), NS);
    let typed: K = serde_json::from_value(object).expect("object");
    api.create(&PostParams::default(), &typed)
        .await
        .expect("create")
}

/// Pods (not terminating) with label `key=value`.
async fn pods_with(client: &kube::Client, selector: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut pods: Vec<Pod> = api
        .list(&ListParams::default().labels(selector))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    pods.sort_by_key(|p| p.name_any());
    pods
}

fn pod_names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(|p| p.name_any()).collect()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Plays the kubelet: the pod is Running and Ready.
async fn mark_ready(client: &kube::Client, name: &str) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    set_status(
        client,
        name,
        json!({"phase": "Running",
               "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}),
    )
    .await;
}

/// Plays the kubelet: the pod finished with `phase` (Succeeded or Failed).
async fn mark_finished(client: &kube::Client, name: &str, phase: &str) {
    set_status(
        client,
        name,
        json!({"phase": phase,
               "conditions": [{"type": "Ready", "status": "False"}]}),
    )
    .await;
}

async fn set_status(client: &kube::Client, name: &str, status: Value) {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    // The pod may have just been deleted by the controller; that is fine.
    let _ = api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await;
}

async fn mark_all_ready(client: &kube::Client, selector: &str) {
    for pod in pods_with(client, selector).await {
        if !is_ready(&pod) {
            mark_ready(client, &pod.name_any()).await;
        }
    }
}

async fn events(client: &kube::Client, kind: &str, name: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some(kind)
                && e.involved_object.name.as_deref() == Some(name)
        })
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// Waits for an event about `kind/name` with `reason` whose message contains `text`.
async fn wait_event(client: &kube::Client, kind: &str, name: &str, reason: &str, text: &str) {
    wait_for(
        &format!("{reason} event on {kind}/{name} ({text})"),
        TIMEOUT,
        || async {
            events(client, kind, name)
                .await
                .iter()
                .any(|(r, m)| r == reason && m.contains(text))
                .then_some(())
        },
    )
    .await
}

/// Creates a Ready fake node with labels and taints.
async fn fake_node(client: &kube::Client, name: &str, taints: Value) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
        "spec": {"taints": taints},
    }))
    .expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
    let status = json!({"status": {
        "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
        "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "fake node", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("node status");
}

fn owner_kind(pod: &Pod) -> Option<String> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.kind.clone())
}

fn label(pod: &Pod, key: &str) -> Option<String> {
    pod.metadata.labels.as_ref()?.get(key).cloned()
}

// ---------------------------------------------------------------------------------
// ReplicationController.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_controller_scales_and_replaces_pods() {
    let server = Server::start();
    let client = server.client().await;
    // No selector: it defaults to the template's labels.
    let rc: ReplicationController = create(
        &client,
        json!({"apiVersion": "v1", "kind": "ReplicationController",
               "metadata": {"name": "legacy"},
               "spec": {"replicas": 3, "template": {
                   "metadata": {"labels": {"app": "legacy"}},
                   "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}}}),
    )
    .await;
    assert_eq!(
        rc.spec.as_ref().and_then(|s| s.selector.clone()),
        Some(BTreeMap::from([("app".to_string(), "legacy".to_string())]))
    );
    let first = wait_for("3 pods of the replication controller", TIMEOUT, || async {
        let pods = pods_with(&client, "app=legacy").await;
        (pods.len() == 3).then_some(pods)
    })
    .await;
    for pod in &first {
        assert_eq!(owner_kind(pod).as_deref(), Some("ReplicationController"));
        assert!(pod.name_any().starts_with("legacy-"));
    }

    // A deleted pod is replaced.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let victim = first[0].name_any();
    pods_api
        .delete(&victim, &DeleteParams::default())
        .await
        .expect("delete pod");
    wait_for("the deleted pod to be replaced", TIMEOUT, || async {
        let pods = pods_with(&client, "app=legacy").await;
        (pods.len() == 3 && !pod_names(&pods).contains(&victim)).then_some(())
    })
    .await;

    // Scale down through the scale subresource, as kubectl does.
    server.kubectl_ok(&["scale", "rc/legacy", "--replicas=1"]);
    let last = wait_for("scale down to one pod", TIMEOUT, || async {
        let pods = pods_with(&client, "app=legacy").await;
        (pods.len() == 1).then_some(pods)
    })
    .await;
    mark_ready(&client, &last[0].name_any()).await;
    let api: Api<ReplicationController> = Api::namespaced(client.clone(), NS);
    wait_for("replication controller status", TIMEOUT, || async {
        let rc = api.get("legacy").await.ok()?;
        let s = rc.status?;
        (s.replicas == 1
            && s.ready_replicas == Some(1)
            && s.available_replicas == Some(1)
            && s.fully_labeled_replicas == Some(1)
            && s.observed_generation == rc.metadata.generation)
            .then_some(())
    })
    .await;
    let seen = events(&client, "ReplicationController", "legacy").await;
    assert!(
        seen.iter()
            .any(|(r, m)| r == "SuccessfulCreate" && m.starts_with("Created pod: legacy-"))
    );
    assert!(
        seen.iter()
            .any(|(r, m)| r == "SuccessfulDelete" && m.starts_with("Deleted pod: legacy-"))
    );
    // kubectl shows it with its columns.
    let table = server.kubectl_ok(&["get", "rc", "legacy"]);
    assert!(table.contains("legacy"), "{table}");
}

// ---------------------------------------------------------------------------------
// DaemonSet.

fn daemonset(name: &str, image: &str, extra_spec: Value) -> Value {
    let mut ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": image}]}}}});
    if let (Some(spec), Some(extra)) = (ds["spec"].as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    ds
}

/// Active daemon pods by target node (bound node, or the node affinity pin).
async fn daemon_pods_by_node(client: &kube::Client, app: &str) -> BTreeMap<String, Vec<Pod>> {
    let mut by_node: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for pod in pods_with(client, &format!("app={app}")).await {
        let pinned = pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .and_then(|r| r.node_selector_terms.first())
            .and_then(|t| t.match_fields.as_ref())
            .and_then(|f| f.first())
            .and_then(|f| f.values.as_ref())
            .and_then(|v| v.first().cloned())
            .expect("daemon pod pinned through matchFields");
        by_node.entry(pinned).or_default().push(pod);
    }
    by_node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_runs_one_pod_per_eligible_node() {
    let server = Server::start();
    let client = server.client().await;
    fake_node(&client, "n1", json!([])).await;
    fake_node(&client, "n2", json!([])).await;
    fake_node(
        &client,
        "tainted",
        json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
    )
    .await;
    let _: DaemonSet = create(&client, daemonset("agent", "agent:1", json!({}))).await;

    let by_node = wait_for("daemon pods on n1 and n2, bound there", TIMEOUT, || async {
        let by_node = daemon_pods_by_node(&client, "agent").await;
        let bound = by_node.iter().all(|(node, pods)| {
            pods.len() == 1
                && pods[0].spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
        });
        (by_node.keys().cloned().collect::<Vec<_>>() == ["n1", "n2"] && bound).then_some(by_node)
    })
    .await;
    let pod = &by_node["n1"][0];
    assert_eq!(owner_kind(pod).as_deref(), Some("DaemonSet"));
    assert!(label(pod, "controller-revision-hash").is_some());
    assert_eq!(label(pod, "pod-template-generation").as_deref(), Some("1"));
    let tolerations: BTreeSet<(String, String)> = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.effect.unwrap_or_default()))
        .collect();
    for (key, effect) in [
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ] {
        assert!(
            tolerations.contains(&(key.to_string(), effect.to_string())),
            "missing toleration {key}:{effect} in {tolerations:?}"
        );
    }

    // A new node gets a pod; a deleted node's pod goes.
    fake_node(&client, "n3", json!([])).await;
    wait_for("a daemon pod on the new node", TIMEOUT, || async {
        let by_node = daemon_pods_by_node(&client, "agent").await;
        by_node.contains_key("n3").then_some(())
    })
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .delete("n1", &DeleteParams::default())
        .await
        .expect("delete node");
    wait_for("the deleted node's pod to go", TIMEOUT, || async {
        let by_node = daemon_pods_by_node(&client, "agent").await;
        (by_node.keys().cloned().collect::<Vec<_>>() == ["n2", "n3"]).then_some(())
    })
    .await;

    // Ready pods: the rollout is complete as kubectl reads it.
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    wait_for(
        "daemonset status: 2 desired, available",
        TIMEOUT,
        || async {
            mark_all_ready(&client, "app=agent").await;
            let s = api.get("agent").await.ok()?.status?;
            (s.desired_number_scheduled == 2
                && s.current_number_scheduled == 2
                && s.number_ready == 2
                && s.number_available == Some(2)
                && s.updated_number_scheduled == Some(2)
                && s.number_misscheduled == 0)
                .then_some(())
        },
    )
    .await;
    let out = server.kubectl_ok(&["rollout", "status", "ds/agent", "--timeout=20s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    wait_event(
        &client,
        "DaemonSet",
        "agent",
        "SuccessfulCreate",
        "Created pod: agent-",
    )
    .await;
    wait_event(
        &client,
        "DaemonSet",
        "agent",
        "SuccessfulDelete",
        "Deleted pod: agent-",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_rolling_update_and_undo() {
    let server = Server::start();
    let client = server.client().await;
    for node in ["a", "b", "c"] {
        fake_node(&client, node, json!([])).await;
    }
    let _: DaemonSet = create(
        &client,
        daemonset(
            "roll",
            "img:1",
            json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}}),
        ),
    )
    .await;
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    let available = |want: i32| {
        let client = client.clone();
        let api = api.clone();
        async move {
            mark_all_ready(&client, "app=roll").await;
            let ds = api.get("roll").await.ok()?;
            let s = ds.status?;
            (s.observed_generation == ds.metadata.generation
                && s.desired_number_scheduled == 3
                && s.updated_number_scheduled == Some(want)
                && s.number_available == Some(3))
            .then_some(())
        }
    };
    wait_for("first rollout", TIMEOUT, || available(3)).await;
    server.kubectl_ok(&["rollout", "status", "ds/roll", "--timeout=20s"]);

    // New image: pods are replaced one node at a time.
    api.patch(
        "roll",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "img:2"}]}}}})),
    )
    .await
    .expect("update image");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let by_node = daemon_pods_by_node(&client, "roll").await;
        let ready_nodes = by_node
            .values()
            .filter(|pods| pods.iter().any(is_ready))
            .count();
        assert!(
            ready_nodes >= 2,
            "more than maxUnavailable=1 nodes down: {by_node:?}"
        );
        let images: BTreeSet<String> = by_node
            .values()
            .flatten()
            .filter_map(|p| {
                p.spec
                    .as_ref()
                    .map(|s| s.containers[0].image.clone().unwrap_or_default())
            })
            .collect();
        if available(3).await.is_some() && images == BTreeSet::from(["img:2".to_string()]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rolling update did not finish: {by_node:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = server.kubectl_ok(&["rollout", "status", "ds/roll", "--timeout=20s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), NS);
    let owned = revisions
        .list(&ListParams::default().labels("app=roll"))
        .await
        .expect("revisions")
        .items;
    assert_eq!(owned.len(), 2, "one ControllerRevision per template");

    // kubectl rollout undo applies the previous revision's data.
    server.kubectl_ok(&["rollout", "undo", "ds/roll"]);
    wait_for("undo to bring back img:1 everywhere", TIMEOUT, || async {
        let ds = api.get("roll").await.ok()?;
        let image = ds.spec.as_ref()?.template.spec.as_ref()?.containers[0]
            .image
            .clone()?;
        let pods = pods_with(&client, "app=roll").await;
        let done = image == "img:1"
            && available(3).await.is_some()
            && pods.iter().all(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.containers[0].image.as_deref())
                    == Some("img:1")
            });
        done.then_some(())
    })
    .await;
}

// ---------------------------------------------------------------------------------
// StatefulSet.

fn statefulset(name: &str, replicas: i32, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "serviceName": name,
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": image}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "www"},
                     "spec": {"accessModes": ["ReadWriteOnce"],
                              "resources": {"requests": {"storage": "1Gi"}}}}]}})
}

/// Marks ordinals ready one by one until `want` pods exist and are ready.
async fn bring_up(client: &kube::Client, app: &str, want: usize) {
    wait_for(&format!("{want} ready pods of {app}"), TIMEOUT, || async {
        mark_all_ready(client, &format!("app={app}")).await;
        let pods = pods_with(client, &format!("app={app}")).await;
        (pods.len() == want && pods.iter().all(is_ready)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statefulset_ordered_creation_scale_down_and_partitioned_update() {
    let server = Server::start();
    let client = server.client().await;
    let _: StatefulSet = create(&client, statefulset("web", 3, "web:1")).await;

    // web-0 first; web-1 only after web-0 is Running and Ready.
    wait_for("web-0", TIMEOUT, || async {
        let pods = pods_with(&client, "app=web").await;
        (pod_names(&pods) == ["web-0"]).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        pod_names(&pods_with(&client, "app=web").await),
        ["web-0"],
        "web-1 must wait for web-0 to be ready"
    );
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let web0 = pods_api.get("web-0").await.expect("web-0");
    let spec = web0.spec.clone().expect("spec");
    assert_eq!(spec.hostname.as_deref(), Some("web-0"));
    assert_eq!(spec.subdomain.as_deref(), Some("web"));
    assert_eq!(
        label(&web0, "statefulset.kubernetes.io/pod-name").as_deref(),
        Some("web-0")
    );
    assert_eq!(
        label(&web0, "apps.kubernetes.io/pod-index").as_deref(),
        Some("0")
    );
    let claim = spec
        .volumes
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name == "www")
        .and_then(|v| v.persistent_volume_claim)
        .expect("www volume from the claim template");
    assert_eq!(claim.claim_name, "www-web-0");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let pvc = claims.get("www-web-0").await.expect("PVC www-web-0");
    assert_eq!(
        pvc.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("web")
    );

    mark_ready(&client, "web-0").await;
    wait_for("web-1 after web-0 is ready", TIMEOUT, || async {
        let pods = pods_with(&client, "app=web").await;
        (pod_names(&pods) == ["web-0", "web-1"]).then_some(())
    })
    .await;
    bring_up(&client, "web", 3).await;
    for i in 0..3 {
        claims
            .get(&format!("www-web-{i}"))
            .await
            .expect("a PVC per ordinal");
    }
    let out = server.kubectl_ok(&["rollout", "status", "sts/web", "--timeout=20s"]);
    assert!(out.contains("roll out complete"), "{out}");
    wait_event(
        &client,
        "StatefulSet",
        "web",
        "SuccessfulCreate",
        "create Pod web-0 in StatefulSet web successful",
    )
    .await;
    wait_event(
        &client,
        "StatefulSet",
        "web",
        "SuccessfulCreate",
        "create Claim www-web-0 Pod web-0 in StatefulSet web success",
    )
    .await;

    // Scale down: web-2 goes before web-1.
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .expect("scale down");
    let mut seen: Vec<Vec<String>> = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let names = pod_names(&pods_with(&client, "app=web").await);
        if seen.last() != Some(&names) {
            seen.push(names.clone());
        }
        if names == ["web-0"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "scale down did not finish: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(
        !seen
            .iter()
            .any(|s| s.contains(&"web-2".to_string()) && !s.contains(&"web-1".to_string())),
        "web-1 went before web-2: {seen:?}"
    );
    wait_event(
        &client,
        "StatefulSet",
        "web",
        "SuccessfulDelete",
        "delete Pod web-2 in StatefulSet web successful",
    )
    .await;
    // PVCs are retained (whenScaled: Retain).
    claims
        .get("www-web-2")
        .await
        .expect("PVC kept after scale down");

    // Back to 3, then a partitioned rolling update: only ordinals >= 2 change.
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .expect("scale up");
    bring_up(&client, "web", 3).await;
    let before = wait_for("status after scale up", TIMEOUT, || async {
        let s = api.get("web").await.ok()?.status?;
        (s.ready_replicas == Some(3) && s.current_revision == s.update_revision)
            .then_some(s.current_revision?)
    })
    .await;
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
            "template": {"spec": {"containers": [{"name": "c", "image": "web:2"}]}}}})),
    )
    .await
    .expect("partitioned update");
    let update = wait_for("web-2 at the update revision", TIMEOUT, || async {
        mark_all_ready(&client, "app=web").await;
        let s = api.get("web").await.ok()?.status?;
        let update = s.update_revision.clone()?;
        let web2 = pods_api.get("web-2").await.ok()?;
        (update != before
            && label(&web2, "controller-revision-hash").as_deref() == Some(update.as_str())
            && s.updated_replicas == Some(1)
            && s.ready_replicas == Some(3))
        .then_some(update)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for name in ["web-0", "web-1"] {
        let pod = pods_api.get(name).await.expect("pod");
        assert_eq!(
            label(&pod, "controller-revision-hash").as_deref(),
            Some(before.as_str()),
            "{name} is below the partition and must stay at the current revision"
        );
    }
    let s = api.get("web").await.expect("sts").status.expect("status");
    assert_eq!(s.current_revision.as_deref(), Some(before.as_str()));
    let out = server.kubectl_ok(&["rollout", "status", "sts/web", "--timeout=20s"]);
    assert!(out.contains("partitioned roll out complete"), "{out}");

    // Partition 0: the rest follow, highest first, and the update becomes current.
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}})),
    )
    .await
    .expect("release partition");
    wait_for("every pod at the update revision", TIMEOUT, || async {
        mark_all_ready(&client, "app=web").await;
        let s = api.get("web").await.ok()?.status?;
        (s.updated_replicas == Some(3)
            && s.ready_replicas == Some(3)
            && s.current_revision.as_deref() == Some(update.as_str()))
        .then_some(())
    })
    .await;
    server.kubectl_ok(&["rollout", "status", "sts/web", "--timeout=20s"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statefulset_parallel_creates_all_at_once() {
    let server = Server::start();
    let client = server.client().await;
    let mut sts = statefulset("par", 3, "par:1");
    sts["spec"]["podManagementPolicy"] = json!("Parallel");
    let _: StatefulSet = create(&client, sts).await;
    wait_for(
        "three pods without waiting for readiness",
        TIMEOUT,
        || async {
            let pods = pods_with(&client, "app=par").await;
            (pod_names(&pods) == ["par-0", "par-1", "par-2"]).then_some(())
        },
    )
    .await;
}

// ---------------------------------------------------------------------------------
// Job.

fn job(name: &str, extra_spec: Value) -> Value {
    let mut job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox"}]}}}});
    if let (Some(spec), Some(extra)) = (job["spec"].as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    job
}

async fn job_pods(client: &kube::Client, name: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut pods = api
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}")))
        .await
        .expect("list pods")
        .items;
    pods.sort_by_key(|p| p.name_any());
    pods
}

async fn active_job_pods(client: &kube::Client, name: &str) -> Vec<Pod> {
    job_pods(client, name)
        .await
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && !matches!(phase(p).as_str(), "Succeeded" | "Failed")
        })
        .collect()
}

fn job_condition(job: &Job, type_: &str) -> Option<(String, String)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_completes_with_completions_and_parallelism() {
    let server = Server::start();
    let client = server.client().await;
    let created: Job = create(
        &client,
        job("calc", json!({"completions": 3, "parallelism": 2})),
    )
    .await;
    let uid = created.uid().expect("uid");
    let selector = created
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| s.match_labels.clone())
        .expect("generated selector");
    assert_eq!(
        selector.get("batch.kubernetes.io/controller-uid"),
        Some(&uid)
    );

    let pods = wait_for("two active pods (parallelism 2)", TIMEOUT, || async {
        let pods = active_job_pods(&client, "calc").await;
        (pods.len() == 2).then_some(pods)
    })
    .await;
    for pod in &pods {
        assert_eq!(owner_kind(pod).as_deref(), Some("Job"));
        assert_eq!(label(pod, "job-name").as_deref(), Some("calc"));
        assert_eq!(label(pod, "controller-uid").as_deref(), Some(uid.as_str()));
        assert_eq!(
            label(pod, "batch.kubernetes.io/controller-uid").as_deref(),
            Some(uid.as_str())
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        active_job_pods(&client, "calc").await.len(),
        2,
        "never more than parallelism"
    );

    // One succeeds: one more (the third completion) starts; never more than needed.
    mark_finished(&client, &pods[0].name_any(), "Succeeded").await;
    let api: Api<Job> = Api::namespaced(client.clone(), NS);
    wait_for("a replacement pod and succeeded=1", TIMEOUT, || async {
        let active = active_job_pods(&client, "calc").await;
        let job = api.get("calc").await.ok()?;
        let s = job.status?;
        (active.len() == 2
            && s.succeeded == Some(1)
            && s.active == Some(2)
            && s.start_time.is_some())
        .then_some(())
    })
    .await;
    for pod in active_job_pods(&client, "calc").await {
        mark_finished(&client, &pod.name_any(), "Succeeded").await;
    }
    let done = wait_for("the job to complete", TIMEOUT, || async {
        let job = api.get("calc").await.ok()?;
        job_condition(&job, "Complete").map(|_| job)
    })
    .await;
    let s = done.status.clone().expect("status");
    assert_eq!(s.succeeded, Some(3));
    assert!(s.completion_time.is_some());
    assert_eq!(s.active, None);
    assert!(job_condition(&done, "SuccessCriteriaMet").is_some());
    assert_eq!(
        job_pods(&client, "calc").await.len(),
        3,
        "exactly completions pods ran"
    );
    wait_event(&client, "Job", "calc", "Completed", "Job completed").await;
    wait_event(
        &client,
        "Job",
        "calc",
        "SuccessfulCreate",
        "Created pod: calc-",
    )
    .await;
    server.kubectl_ok(&[
        "wait",
        "--for=condition=complete",
        "job/calc",
        "--timeout=10s",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_fails_past_backoff_limit_and_deadline() {
    let server = Server::start();
    let client = server.client().await;
    let _: Job = create(
        &client,
        job(
            "flaky",
            json!({"completions": 2, "parallelism": 2, "backoffLimit": 1}),
        ),
    )
    .await;
    let pods = wait_for("two pods", TIMEOUT, || async {
        let pods = active_job_pods(&client, "flaky").await;
        (pods.len() == 2).then_some(pods)
    })
    .await;
    for pod in &pods {
        mark_finished(&client, &pod.name_any(), "Failed").await;
    }
    let api: Api<Job> = Api::namespaced(client.clone(), NS);
    let failed = wait_for("the job to fail", TIMEOUT, || async {
        let job = api.get("flaky").await.ok()?;
        job_condition(&job, "Failed").map(|c| (job, c))
    })
    .await;
    assert_eq!(
        failed.1,
        (
            "BackoffLimitExceeded".to_string(),
            "Job has reached the specified backoff limit".to_string()
        )
    );
    assert!(job_condition(&failed.0, "FailureTarget").is_some());
    assert_eq!(failed.0.status.as_ref().and_then(|s| s.failed), Some(2));
    assert!(active_job_pods(&client, "flaky").await.is_empty());
    wait_event(
        &client,
        "Job",
        "flaky",
        "BackoffLimitExceeded",
        "backoff limit",
    )
    .await;

    // activeDeadlineSeconds: the pod never finishes; the deadline fails the job.
    let _: Job = create(&client, job("slow", json!({"activeDeadlineSeconds": 2}))).await;
    let failed = wait_for("the deadline to fail the job", TIMEOUT, || async {
        let job = api.get("slow").await.ok()?;
        job_condition(&job, "Failed")
    })
    .await;
    assert_eq!(failed.0, "DeadlineExceeded");
    wait_for("its pod to be deleted", TIMEOUT, || async {
        active_job_pods(&client, "slow")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    wait_event(
        &client,
        "Job",
        "slow",
        "DeadlineExceeded",
        "active longer than specified deadline",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexed_job_and_ttl_after_finished() {
    let server = Server::start();
    let client = server.client().await;
    let _: Job = create(
        &client,
        job(
            "idx",
            json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
                   "ttlSecondsAfterFinished": 2}),
        ),
    )
    .await;
    let pods = wait_for("three indexed pods", TIMEOUT, || async {
        let pods = active_job_pods(&client, "idx").await;
        (pods.len() == 3).then_some(pods)
    })
    .await;
    let mut by_index = BTreeMap::new();
    for pod in &pods {
        let index = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("batch.kubernetes.io/job-completion-index").cloned())
            .expect("index annotation");
        assert_eq!(
            label(pod, "batch.kubernetes.io/job-completion-index"),
            Some(index.clone())
        );
        assert_eq!(
            pod.spec.as_ref().and_then(|s| s.hostname.clone()),
            Some(format!("idx-{index}"))
        );
        by_index.insert(index, pod.name_any());
    }
    assert_eq!(
        by_index.keys().cloned().collect::<Vec<_>>(),
        ["0", "1", "2"]
    );

    let api: Api<Job> = Api::namespaced(client.clone(), NS);
    mark_finished(&client, &by_index["1"], "Succeeded").await;
    wait_for("completedIndexes 1", TIMEOUT, || async {
        let s = api.get("idx").await.ok()?.status?;
        (s.completed_indexes.as_deref() == Some("1") && s.succeeded == Some(1)).then_some(())
    })
    .await;
    // A failed index is retried with the same index (after the back-off).
    mark_finished(&client, &by_index["0"], "Failed").await;
    mark_finished(&client, &by_index["2"], "Succeeded").await;
    let retry = wait_for("index 0 to be retried", TIMEOUT, || async {
        let pods = active_job_pods(&client, "idx").await;
        (pods.len() == 1).then(|| pods[0].clone())
    })
    .await;
    assert_eq!(
        label(&retry, "batch.kubernetes.io/job-completion-index").as_deref(),
        Some("0")
    );
    mark_finished(&client, &retry.name_any(), "Succeeded").await;
    wait_for("the indexed job to complete", TIMEOUT, || async {
        let job = api.get("idx").await.ok()?;
        let s = job.status.clone()?;
        (job_condition(&job, "Complete").is_some() && s.completed_indexes.as_deref() == Some("0-2"))
            .then_some(())
    })
    .await;
    // ttlSecondsAfterFinished: the job (and, through the garbage collector, its pods) go.
    wait_for(
        "the finished job to be deleted after its TTL",
        TIMEOUT,
        || async { api.get_opt("idx").await.ok()?.is_none().then_some(()) },
    )
    .await;
    wait_for("its pods to be collected", TIMEOUT, || async {
        job_pods(&client, "idx").await.is_empty().then_some(())
    })
    .await;
}

// ---------------------------------------------------------------------------------
// CronJob (controller clock sped up 30x: `* * * * *` fires every 2 s).

fn cronjob(name: &str, extra_spec: Value) -> Value {
    let mut cj = json!({"apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {"schedule": "* * * * *",
                 "jobTemplate": {"metadata": {"labels": {"cron": name}},
                     "spec": {"template": {"spec": {"restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "busybox"}]}}}}}});
    if let (Some(spec), Some(extra)) = (cj["spec"].as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    cj
}

async fn cron_jobs(client: &kube::Client, name: &str) -> Vec<Job> {
    let api: Api<Job> = Api::namespaced(client.clone(), NS);
    let mut jobs: Vec<Job> = api
        .list(&ListParams::default().labels(&format!("cron={name}")))
        .await
        .expect("list jobs")
        .items
        .into_iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .collect();
    jobs.sort_by_key(|j| j.name_any());
    jobs
}

fn fast_cron_server() -> Server {
    Server::start_with_env(&[], &[("K3RS_CRONJOB_TIME_SCALE", "30")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cronjob_creates_jobs_and_forbid_skips_while_active() {
    let server = fast_cron_server();
    let client = server.client().await;
    let _: CronJob = create(
        &client,
        cronjob("tick", json!({"concurrencyPolicy": "Forbid"})),
    )
    .await;
    let first = wait_for("a job from the schedule", TIMEOUT, || async {
        let jobs = cron_jobs(&client, "tick").await;
        jobs.into_iter().next()
    })
    .await;
    let name = first.name_any();
    let minutes: i64 = name
        .strip_prefix("tick-")
        .and_then(|m| m.parse().ok())
        .expect("job name is <cronjob>-<minutes since epoch>");
    let scheduled = first
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| {
            a.get("batch.kubernetes.io/cronjob-scheduled-timestamp")
                .cloned()
        })
        .expect("scheduled-timestamp annotation");
    let scheduled_at: k8s_openapi::jiff::Zoned = scheduled
        .parse::<k8s_openapi::jiff::Timestamp>()
        .expect("RFC 3339 annotation")
        .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
    assert_eq!(scheduled_at.timestamp().as_second() / 60, minutes);
    assert_eq!(owner_kind_of(&first.metadata).as_deref(), Some("CronJob"));

    let api: Api<CronJob> = Api::namespaced(client.clone(), NS);
    wait_for("status.active and lastScheduleTime", TIMEOUT, || async {
        let s = api.get("tick").await.ok()?.status?;
        let active: Vec<String> = s.active?.into_iter().filter_map(|r| r.name).collect();
        (active == [name.clone()] && s.last_schedule_time.is_some()).then_some(())
    })
    .await;
    // Forbid: the job never finishes (no kubelet), so no second job is started.
    wait_event(
        &client,
        "CronJob",
        "tick",
        "JobAlreadyActive",
        "concurrency policy is Forbid",
    )
    .await;
    assert_eq!(
        pod_job_names(&cron_jobs(&client, "tick").await),
        std::slice::from_ref(&name)
    );
    wait_event(
        &client,
        "CronJob",
        "tick",
        "SuccessfulCreate",
        &format!("Created job {name}"),
    )
    .await;

    // Once it completes, the next schedule time starts another one.
    let pods = wait_for("the job's pod", TIMEOUT, || async {
        let pods = active_job_pods(&client, &name).await;
        pods.into_iter().next()
    })
    .await;
    mark_finished(&client, &pods.name_any(), "Succeeded").await;
    wait_for(
        "a second job after the first completed",
        TIMEOUT,
        || async { (cron_jobs(&client, "tick").await.len() >= 2).then_some(()) },
    )
    .await;
    wait_event(
        &client,
        "CronJob",
        "tick",
        "SawCompletedJob",
        &format!("Saw completed job: {name}"),
    )
    .await;
    wait_for("lastSuccessfulTime", TIMEOUT, || async {
        api.get("tick")
            .await
            .ok()?
            .status?
            .last_successful_time
            .map(|_| ())
    })
    .await;
}

fn owner_kind_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<String> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.kind.clone())
}

fn pod_job_names(jobs: &[Job]) -> Vec<String> {
    jobs.iter().map(|j| j.name_any()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cronjob_replace_and_history_limits() {
    let server = fast_cron_server();
    let client = server.client().await;
    // Replace: each schedule time deletes the running job and starts a new one.
    let _: CronJob = create(
        &client,
        cronjob("swap", json!({"concurrencyPolicy": "Replace"})),
    )
    .await;
    let first = wait_for("the first job", TIMEOUT, || async {
        cron_jobs(&client, "swap")
            .await
            .into_iter()
            .next()
            .map(|j| j.name_any())
    })
    .await;
    let mut seen = BTreeSet::from([first.clone()]);
    let deadline = Instant::now() + TIMEOUT;
    while !seen.iter().any(|n| n != &first) || seen.len() < 3 {
        let jobs = pod_job_names(&cron_jobs(&client, "swap").await);
        assert!(jobs.len() <= 1, "Replace keeps one job at a time: {jobs:?}");
        seen.extend(jobs);
        assert!(
            Instant::now() < deadline,
            "Replace did not start new jobs: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_event(
        &client,
        "CronJob",
        "swap",
        "SuccessfulDelete",
        &format!("Deleted job {first}"),
    )
    .await;
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), NS);
    cronjobs
        .delete("swap", &DeleteParams::default())
        .await
        .expect("delete cronjob");

    // History limits: completed jobs beyond successfulJobsHistoryLimit=1 and failed
    // jobs beyond failedJobsHistoryLimit=1 are deleted.
    let mut hist = cronjob(
        "hist",
        json!({"successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1}),
    );
    // One failed pod fails the job at once.
    hist["spec"]["jobTemplate"]["spec"]["backoffLimit"] = json!(0);
    let _: CronJob = create(&client, hist).await;
    let mut finished = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for job in cron_jobs(&client, "hist").await {
            let name = job.name_any();
            if finished.contains_key(&name) {
                continue;
            }
            if let Some(pod) = active_job_pods(&client, &name).await.into_iter().next() {
                // Alternate success and failure.
                let outcome = if finished.len() % 2 == 0 {
                    "Succeeded"
                } else {
                    "Failed"
                };
                mark_finished(&client, &pod.name_any(), outcome).await;
                finished.insert(name, outcome);
            }
        }
        let jobs = cron_jobs(&client, "hist").await;
        let complete = jobs
            .iter()
            .filter(|j| job_condition(j, "Complete").is_some())
            .count();
        let failed = jobs
            .iter()
            .filter(|j| job_condition(j, "Failed").is_some())
            .count();
        if finished.len() >= 6 && complete == 1 && failed == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "history not trimmed to 1+1: {:?} finished {finished:?}",
            pod_job_names(&jobs)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_event(
        &client,
        "CronJob",
        "hist",
        "SuccessfulDelete",
        "Deleted job hist-",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cronjob_bad_schedule_or_time_zone_is_refused_and_a_stored_one_runs_nothing() {
    let server = fast_cron_server();
    let client = server.client().await;
    // The API refuses both, as kube-apiserver does, naming the field.
    let api: Api<CronJob> = Api::namespaced(client.clone(), NS);
    for (name, extra, field, message) in [
        (
            "garbled",
            json!({"schedule": "61 * * * *"}),
            "spec.schedule",
            "Invalid value: \"61 * * * *\"",
        ),
        (
            "martian",
            json!({"timeZone": "Mars/Olympus_Mons"}),
            "spec.timeZone",
            "Invalid value: \"Mars/Olympus_Mons\": unknown time zone Mars/Olympus_Mons",
        ),
    ] {
        let typed: CronJob = serde_json::from_value(cronjob(name, extra)).expect("object");
        match api.create(&PostParams::default(), &typed).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{status:?}");
                assert!(
                    status.message.contains(&format!("{field}: {message}")),
                    "{status:?}"
                );
            }
            other => panic!("{name}: expected a 422, got {other:?}"),
        }
    }
    assert!(
        api.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );

    // Written past validation (an older version, a restore): the controller reports them
    // with Events and runs nothing.
    let objects: Vec<(String, Value)> = [
        ("garbled", json!({"schedule": "61 * * * *"})),
        ("martian", json!({"timeZone": "Mars/Olympus_Mons"})),
    ]
    .into_iter()
    .map(|(name, extra)| {
        let mut object = cronjob(name, extra);
        object["metadata"] = json!({"name": name, "namespace": NS,
            "uid": format!("uid-{name}"), "creationTimestamp": "2026-01-01T00:00:00Z"});
        object["spec"]["concurrencyPolicy"] = json!("Allow");
        (format!("/registry/batch/cronjobs/{NS}/{name}"), object)
    })
    .collect();
    let dir = support::stop_and_write_past_validation(server, &objects).await;
    let server = Server::start_in_with_env(dir, &[], &[("K3RS_CRONJOB_TIME_SCALE", "30")]);
    let client = server.client().await;
    wait_event(
        &client,
        "CronJob",
        "garbled",
        "UnparseableSchedule",
        "unparseable schedule: \"61 * * * *\"",
    )
    .await;
    wait_event(
        &client,
        "CronJob",
        "martian",
        "UnknownTimeZone",
        "invalid timeZone: \"Mars/Olympus_Mons\"",
    )
    .await;
    // Several schedule periods later, neither has run anything; both objects are intact.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(cron_jobs(&client, "garbled").await.is_empty());
    assert!(cron_jobs(&client, "martian").await.is_empty());
    let api: Api<CronJob> = Api::namespaced(client.clone(), NS);
    let kept = api.get("garbled").await.expect("cronjob kept");
    assert_eq!(kept.spec.map(|s| s.schedule).as_deref(), Some("61 * * * *"));
}
