//! The ReplicaSet and Deployment controllers against the real binary: the server runs
//! the controller-manager in-process, there is no scheduler or kubelet, so pods stay
//! Pending and the test plays the kubelet by marking pods Running / Ready through
//! `/status`. Covers creation with ownerReferences and the hash label, scaling, self
//! healing, rolling updates that keep `replicas - maxUnavailable` pods ready, revisions
//! and `kubectl rollout undo`, Recreate, the progress deadline, events and conditions.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Server, wait_for};

const NS: &str = "default";
const TIMEOUT: Duration = Duration::from_secs(30);

fn deployment(name: &str, replicas: i32, image: &str, strategy: Value) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image}]}
            }
        }
    }))
    .expect("deployment")
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Active (not terminating) pods with `app=<app>`.
async fn pods(client: &kube::Client, app: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

async fn replicasets(client: &kube::Client, app: &str) -> Vec<ReplicaSet> {
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list replicasets")
        .items
}

/// Plays the kubelet: the pod is Running and Ready.
async fn mark_ready(client: &kube::Client, pod: &Pod) {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]
    }});
    let name = pod.metadata.name.clone().expect("pod name");
    // The pod may have just been deleted by a scale-down; that is fine.
    let _ = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
}

async fn mark_all_ready(client: &kube::Client, app: &str) {
    for pod in pods(client, app).await {
        if !is_ready(&pod) {
            mark_ready(client, &pod).await;
        }
    }
}

fn annotation(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<String> {
    meta.annotations.as_ref().and_then(|a| a.get(key).cloned())
}

fn condition(d: &Deployment, type_: &str) -> Option<(String, String)> {
    d.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

/// Waits until the rollout of `name` is complete as `kubectl rollout status` sees it.
async fn wait_complete(client: &kube::Client, name: &str, replicas: i32) -> Deployment {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    wait_for(
        &format!("rollout of {name} to complete"),
        TIMEOUT,
        || async {
            mark_all_ready(client, name).await;
            let d = api.get(name).await.ok()?;
            let status = d.status.clone()?;
            let done = status.observed_generation >= d.metadata.generation
                && status.updated_replicas == Some(replicas)
                && status.replicas == Some(replicas)
                && status.available_replicas == Some(replicas)
                && condition(&d, "Progressing").is_some_and(|(_, r)| r == "NewReplicaSetAvailable");
            done.then_some(d)
        },
    )
    .await
}

async fn events(client: &kube::Client, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

async fn set_replicas(client: &kube::Client, name: &str, replicas: i32) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .expect("scale deployment");
}

async fn set_image(client: &kube::Client, name: &str, image: &str) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("change image");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_creates_replicaset_and_owned_pods() {
    let server = Server::start();
    let client = server.client().await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    api.create(
        &PostParams::default(),
        &deployment("web", 3, "nginx:1", json!({})),
    )
    .await
    .expect("create deployment");

    let rs = wait_for("one replicaset", TIMEOUT, || async {
        let sets = replicasets(&client, "web").await;
        (sets.len() == 1).then(|| sets[0].clone())
    })
    .await;
    let rs_name = rs.metadata.name.clone().expect("rs name");
    let hash = rs
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash"))
        .cloned()
        .expect("hash label on the replicaset");
    assert_eq!(rs_name, format!("web-{hash}"));
    let spec = rs.spec.clone().expect("rs spec");
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(
        spec.selector
            .match_labels
            .as_ref()
            .and_then(|m| m.get("pod-template-hash")),
        Some(&hash)
    );
    assert_eq!(
        spec.template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.as_ref())
            .and_then(|l| l.get("pod-template-hash")),
        Some(&hash)
    );
    assert_eq!(
        annotation(&rs.metadata, "deployment.kubernetes.io/revision").as_deref(),
        Some("1")
    );
    let owner = &rs.metadata.owner_references.as_ref().expect("rs owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Deployment", "web", Some(true))
    );

    let created = wait_for("3 pods", TIMEOUT, || async {
        let p = pods(&client, "web").await;
        (p.len() == 3).then_some(p)
    })
    .await;
    for pod in &created {
        let name = pod.metadata.name.clone().expect("pod name");
        let suffix = name
            .strip_prefix(&format!("{rs_name}-"))
            .expect("name <rs>-<suffix>");
        assert_eq!(suffix.len(), 5, "{name}");
        let labels = pod.metadata.labels.clone().expect("labels");
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(labels.get("pod-template-hash"), Some(&hash));
        let refs = pod.metadata.owner_references.clone().expect("owner refs");
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].kind, "ReplicaSet");
        assert_eq!(refs[0].name, rs_name);
        assert_eq!(refs[0].uid, rs.metadata.uid.clone().expect("uid"));
        assert_eq!(refs[0].controller, Some(true));
        assert_eq!(refs[0].block_owner_deletion, Some(true));
    }

    // Nothing ready yet: Available is False.
    wait_for("Available=False", TIMEOUT, || async {
        let d = api.get("web").await.ok()?;
        (condition(&d, "Available") == Some(("False".into(), "MinimumReplicasUnavailable".into())))
            .then_some(())
    })
    .await;

    let d = wait_complete(&client, "web", 3).await;
    let status = d.status.clone().expect("status");
    assert_eq!(status.ready_replicas, Some(3));
    assert_eq!(status.unavailable_replicas.unwrap_or(0), 0);
    assert_eq!(
        condition(&d, "Available"),
        Some(("True".into(), "MinimumReplicasAvailable".into()))
    );
    assert_eq!(
        condition(&d, "Progressing"),
        Some(("True".into(), "NewReplicaSetAvailable".into()))
    );
    assert_eq!(
        annotation(&d.metadata, "deployment.kubernetes.io/revision").as_deref(),
        Some("1")
    );

    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    let rs = rs_api.get(&rs_name).await.expect("rs");
    let rs_status = rs.status.expect("rs status");
    assert_eq!(rs_status.replicas, 3);
    assert_eq!(rs_status.fully_labeled_replicas, Some(3));
    assert_eq!(rs_status.ready_replicas, Some(3));
    assert_eq!(rs_status.available_replicas, Some(3));
    assert_eq!(rs_status.observed_generation, rs.metadata.generation);

    let scaling = events(&client, "ScalingReplicaSet").await;
    assert!(
        scaling.iter().any(|e| e.message.as_deref()
            == Some(&format!("Scaled up replica set {rs_name} from 0 to 3"))),
        "{scaling:?}"
    );
    let creates = events(&client, "SuccessfulCreate").await;
    for pod in &created {
        let message = format!(
            "Created pod: {}",
            pod.metadata.name.clone().unwrap_or_default()
        );
        assert!(
            creates
                .iter()
                .any(|e| e.message.as_deref() == Some(&message)),
            "{message}"
        );
    }

    let out = server.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=20s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_and_replacing_deleted_pods() {
    let server = Server::start();
    let client = server.client().await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    api.create(
        &PostParams::default(),
        &deployment("app", 2, "nginx:1", json!({})),
    )
    .await
    .expect("create deployment");
    for replicas in [2usize, 5, 1] {
        set_replicas(&client, "app", replicas as i32).await;
        wait_for(&format!("{replicas} pods"), TIMEOUT, || async {
            (pods(&client, "app").await.len() == replicas).then_some(())
        })
        .await;
    }
    // Stays at 1 (no overshoot from lagging lists).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let remaining = pods(&client, "app").await;
    assert_eq!(remaining.len(), 1);
    assert!(!events(&client, "SuccessfulDelete").await.is_empty());
    assert_eq!(
        replicasets(&client, "app").await.len(),
        1,
        "scaling makes no new replicaset"
    );

    // Self healing: a deleted pod is replaced.
    let victim = remaining[0].metadata.name.clone().expect("name");
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    pod_api
        .delete(&victim, &DeleteParams::default())
        .await
        .expect("delete pod");
    let replacement = wait_for("a replacement pod", TIMEOUT, || async {
        let p = pods(&client, "app").await;
        (p.len() == 1 && p[0].metadata.name.as_deref() != Some(&victim)).then(|| p[0].clone())
    })
    .await;
    assert!(replacement.metadata.name.expect("name").starts_with("app-"));
    wait_complete(&client, "app", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicaset_adopts_and_releases_pods() {
    let server = Server::start();
    let client = server.client().await;
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "orphan", "labels": {"app": "solo"}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1"}]}
    }))
    .expect("pod");
    pod_api
        .create(&PostParams::default(), &orphan)
        .await
        .expect("create orphan");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "solo"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "solo"}},
            "template": {
                "metadata": {"labels": {"app": "solo"}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1"}]}
            }
        }
    }))
    .expect("replicaset");
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    rs_api
        .create(&PostParams::default(), &rs)
        .await
        .expect("create rs");
    // The orphan is adopted and only one more pod is created.
    wait_for("adoption and 2 pods", TIMEOUT, || async {
        let p = pods(&client, "solo").await;
        let adopted = p.iter().any(|p| {
            p.metadata.name.as_deref() == Some("orphan")
                && p.metadata.owner_references.as_ref().is_some_and(|r| {
                    r.iter()
                        .any(|r| r.name == "solo" && r.controller == Some(true))
                })
        });
        (p.len() == 2 && adopted).then_some(())
    })
    .await;
    // Relabeling an owned pod releases it; a replacement is created.
    pod_api
        .patch(
            "orphan",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
        )
        .await
        .expect("relabel");
    wait_for("release and replacement", TIMEOUT, || async {
        let released = pod_api.get("orphan").await.ok()?;
        let free = released
            .metadata
            .owner_references
            .as_ref()
            .is_none_or(|r| r.is_empty());
        (free && pods(&client, "solo").await.len() == 2).then_some(())
    })
    .await;
    // Status of a plain ReplicaSet.
    wait_for("rs status replicas 2", TIMEOUT, || async {
        let rs = rs_api.get("solo").await.ok()?;
        (rs.status?.replicas == 2).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_keeps_minimum_ready_and_undo_restores() {
    let server = Server::start();
    let client = server.client().await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let strategy =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"}});
    api.create(
        &PostParams::default(),
        &deployment("roll", 4, "nginx:1", strategy),
    )
    .await
    .expect("create deployment");
    wait_complete(&client, "roll", 4).await;
    let first_rs = replicasets(&client, "roll").await[0]
        .metadata
        .name
        .clone()
        .expect("rs name");

    // 25% of 4 rounds down to 1 unavailable: at least 3 ready pods at every step.
    let min_ready = 3;
    set_image(&client, "roll", "nginx:2").await;
    let deadline = Instant::now() + TIMEOUT;
    let mut steps = 0;
    loop {
        let current = pods(&client, "roll").await;
        let ready = current.iter().filter(|p| is_ready(p)).count();
        assert!(
            ready >= min_ready,
            "only {ready} ready pods during the rollout (step {steps})"
        );
        let d = api.get("roll").await.expect("deployment");
        let status = d.status.clone().unwrap_or_default();
        if status.observed_generation >= d.metadata.generation
            && status.updated_replicas == Some(4)
            && status.replicas == Some(4)
            && status.available_replicas == Some(4)
        {
            break;
        }
        // Play the kubelet slowly: one new pod becomes ready per step.
        if let Some(pod) = current.iter().find(|p| !is_ready(p)) {
            mark_ready(&client, pod).await;
        }
        steps += 1;
        assert!(Instant::now() < deadline, "rollout did not finish");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let d = wait_complete(&client, "roll", 4).await;
    assert_eq!(
        annotation(&d.metadata, "deployment.kubernetes.io/revision").as_deref(),
        Some("2")
    );
    let sets = replicasets(&client, "roll").await;
    assert_eq!(sets.len(), 2);
    for rs in &sets {
        let name = rs.metadata.name.clone().expect("name");
        let replicas = rs.spec.as_ref().and_then(|s| s.replicas);
        let revision = annotation(&rs.metadata, "deployment.kubernetes.io/revision");
        if name == first_rs {
            assert_eq!((replicas, revision.as_deref()), (Some(0), Some("1")));
        } else {
            assert_eq!((replicas, revision.as_deref()), (Some(4), Some("2")));
        }
    }
    for pod in pods(&client, "roll").await {
        let image = pod.spec.and_then(|s| s.containers[0].image.clone());
        assert_eq!(image.as_deref(), Some("nginx:2"));
    }
    let scaled_down = events(&client, "ScalingReplicaSet").await;
    assert!(
        scaled_down
            .iter()
            .any(|e| e.message.as_deref().is_some_and(
                |m| m.starts_with(&format!("Scaled down replica set {first_rs} from "))
            )),
        "{scaled_down:?}"
    );

    let history = server.kubectl_ok(&["rollout", "history", "deployment/roll"]);
    assert!(history.contains('1') && history.contains('2'), "{history}");

    // kubectl rollout undo copies revision 1's template back: the first ReplicaSet
    // becomes the new one again, with revision 3.
    server.kubectl_ok(&["rollout", "undo", "deployment/roll"]);
    let d = wait_complete(&client, "roll", 4).await;
    assert_eq!(
        annotation(&d.metadata, "deployment.kubernetes.io/revision").as_deref(),
        Some("3")
    );
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    let restored = rs_api.get(&first_rs).await.expect("first rs");
    assert_eq!(restored.spec.and_then(|s| s.replicas), Some(4));
    assert_eq!(
        annotation(&restored.metadata, "deployment.kubernetes.io/revision").as_deref(),
        Some("3")
    );
    for pod in pods(&client, "roll").await {
        let image = pod.spec.and_then(|s| s.containers[0].image.clone());
        assert_eq!(image.as_deref(), Some("nginx:1"));
    }
    assert_eq!(replicasets(&client, "roll").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_and_progress_deadline() {
    let server = Server::start();
    let client = server.client().await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let mut d = deployment("re", 2, "nginx:1", json!({"type": "Recreate"}));
    if let Some(spec) = d.spec.as_mut() {
        spec.progress_deadline_seconds = Some(2);
        spec.revision_history_limit = Some(1);
    }
    api.create(&PostParams::default(), &d)
        .await
        .expect("create deployment");
    // Nobody marks the pods ready: the rollout times out.
    let timed_out = wait_for("ProgressDeadlineExceeded", TIMEOUT, || async {
        let d = api.get("re").await.ok()?;
        (condition(&d, "Progressing") == Some(("False".into(), "ProgressDeadlineExceeded".into())))
            .then_some(d)
    })
    .await;
    assert_eq!(
        condition(&timed_out, "Available"),
        Some(("False".into(), "MinimumReplicasUnavailable".into()))
    );
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["rollout", "status", "deployment/re", "--timeout=10s"],
        None,
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exceeded its progress deadline"));

    // Recreate: the old ReplicaSet is at zero before the new one exists.
    set_image(&client, "re", "nginx:2").await;
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    wait_for("a second replicaset", TIMEOUT, || async {
        let sets = replicasets(&client, "re").await;
        if sets.len() < 2 {
            return None;
        }
        let old = sets
            .iter()
            .find(|rs| {
                annotation(&rs.metadata, "deployment.kubernetes.io/revision").as_deref()
                    == Some("1")
            })
            .expect("old rs");
        assert_eq!(old.spec.as_ref().and_then(|s| s.replicas), Some(0));
        Some(())
    })
    .await;
    let d = wait_complete(&client, "re", 2).await;
    assert_eq!(
        condition(&d, "Available"),
        Some(("True".into(), "MinimumReplicasAvailable".into()))
    );
    for pod in pods(&client, "re").await {
        assert_eq!(
            pod.spec
                .and_then(|s| s.containers[0].image.clone())
                .as_deref(),
            Some("nginx:2")
        );
    }
    // revisionHistoryLimit 1 keeps the one old (empty) ReplicaSet; a third template
    // prunes the oldest.
    set_image(&client, "re", "nginx:3").await;
    wait_complete(&client, "re", 2).await;
    wait_for("history pruned to one old replicaset", TIMEOUT, || async {
        let sets = rs_api
            .list(&ListParams::default().labels("app=re"))
            .await
            .ok()?
            .items;
        let live: Vec<_> = sets
            .iter()
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        (live.len() == 2).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_deployment_does_not_roll_out_until_resumed() {
    let server = Server::start();
    let client = server.client().await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let strategy =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 0}});
    api.create(
        &PostParams::default(),
        &deployment("pause", 2, "nginx:1", strategy),
    )
    .await
    .expect("create deployment");
    wait_complete(&client, "pause", 2).await;
    api.patch(
        "pause",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"paused": true}})),
    )
    .await
    .expect("pause");
    set_image(&client, "pause", "nginx:2").await;
    wait_for("Progressing=Unknown DeploymentPaused", TIMEOUT, || async {
        let d = api.get("pause").await.ok()?;
        (condition(&d, "Progressing") == Some(("Unknown".into(), "DeploymentPaused".into())))
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        replicasets(&client, "pause").await.len(),
        1,
        "no rollout while paused"
    );
    api.patch(
        "pause",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"paused": false}})),
    )
    .await
    .expect("resume");
    // maxUnavailable 0: the two ready pods stay until new ones are ready.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let current = pods(&client, "pause").await;
        let ready = current.iter().filter(|p| is_ready(p)).count();
        assert!(ready >= 2, "only {ready} ready pods with maxUnavailable 0");
        assert!(
            current.len() <= 3,
            "{} pods with maxSurge 50% of 2",
            current.len()
        );
        let d = api.get("pause").await.expect("deployment");
        if condition(&d, "Progressing").is_some_and(|(_, r)| r == "NewReplicaSetAvailable")
            && d.status.as_ref().and_then(|s| s.updated_replicas) == Some(2)
            && d.status.as_ref().and_then(|s| s.replicas) == Some(2)
        {
            break;
        }
        if let Some(pod) = current.iter().find(|p| !is_ready(p)) {
            mark_ready(&client, pod).await;
        }
        assert!(
            Instant::now() < deadline,
            "rollout after resume did not finish"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(replicasets(&client, "pause").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicaset_available_after_min_ready_seconds() {
    let server = Server::start();
    let client = server.client().await;
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "slow"},
        "spec": {
            "replicas": 2,
            "minReadySeconds": 2,
            "selector": {"matchLabels": {"app": "slow"}},
            "template": {
                "metadata": {"labels": {"app": "slow"}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1"}]}
            }
        }
    }))
    .expect("replicaset");
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    rs_api
        .create(&PostParams::default(), &rs)
        .await
        .expect("create rs");
    wait_for("2 pods", TIMEOUT, || async {
        (pods(&client, "slow").await.len() == 2).then_some(())
    })
    .await;
    let marked = Instant::now();
    mark_all_ready(&client, "slow").await;
    wait_for("2 ready", TIMEOUT, || async {
        let status = rs_api.get("slow").await.ok()?.status?;
        (status.ready_replicas == Some(2)).then_some(status)
    })
    .await;
    let status = rs_api
        .get("slow")
        .await
        .expect("rs")
        .status
        .expect("status");
    if marked.elapsed() < Duration::from_millis(1500) {
        assert_eq!(
            status.available_replicas.unwrap_or(0),
            0,
            "available before minReadySeconds"
        );
    }
    wait_for("2 available", TIMEOUT, || async {
        let status = rs_api.get("slow").await.ok()?.status?;
        (status.available_replicas == Some(2)).then_some(())
    })
    .await;
    assert!(
        marked.elapsed() >= Duration::from_secs(1),
        "available too early"
    );
}

/// Not a correctness test: how long a large ReplicaSet takes to get all its pods
/// (`cargo test --test controllers large -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn large_deployment_creates_all_pods() {
    let server = Server::start();
    let client = server.client().await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let replicas = 2000;
    let started = Instant::now();
    api.create(
        &PostParams::default(),
        &deployment("big", replicas, "nginx:1", json!({})),
    )
    .await
    .expect("create deployment");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let d = api.get("big").await.expect("deployment");
        if d.status.and_then(|s| s.replicas) == Some(replicas) {
            break;
        }
        assert!(Instant::now() < deadline, "not all pods created");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "{replicas} pods created and counted in {:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(pods(&client, "big").await.len(), replicas as usize);
}

/// The PersistentVolume binder against the real server: a claim binds to the smallest
/// volume that fits (both Bound, `kubectl get pv,pvc` shows it), the protection
/// finalizers, a deleted claim kept while a pod uses it and released after, the volume
/// then `Released` (Retain), a claim without a class given the default class, and a
/// `WaitForFirstConsumer` claim left waiting with its event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_volume_binder_binds_protects_and_releases() {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let server = Server::start();
    let client = server.client().await;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    for (name, size) in [("pv-small", "1Gi"), ("pv-big", "5Gi")] {
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": "manual", "hostPath": {"path": format!("/tmp/{name}")}}
        }))
        .expect("pv");
        volumes
            .create(&PostParams::default(), &pv)
            .await
            .expect("create pv");
    }
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
                 "resources": {"requests": {"storage": "512Mi"}}}
    }))
    .expect("pvc");
    claims
        .create(&PostParams::default(), &pvc)
        .await
        .expect("create pvc");
    let bound = wait_for("the claim to be Bound", TIMEOUT, || async {
        let c = claims.get("data").await.ok()?;
        (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
    })
    .await;
    assert_eq!(
        bound.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some("pv-small")
    );
    assert_eq!(
        bound
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .map(|q| q.0.as_str()),
        Some("1Gi")
    );
    assert!(
        bound
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "kubernetes.io/pvc-protection")
    );
    let pv = wait_for("the volume to be Bound", TIMEOUT, || async {
        let v = volumes.get("pv-small").await.ok()?;
        (v.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(v)
    })
    .await;
    assert_eq!(
        pv.spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|r| r.uid.clone()),
        bound.metadata.uid
    );
    assert!(
        pv.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "kubernetes.io/pv-protection")
    );
    let big = volumes.get("pv-big").await.expect("pv-big");
    assert_eq!(
        big.status.and_then(|s| s.phase).as_deref(),
        Some("Available")
    );
    let table = server.kubectl_ok(&["get", "pvc", "data"]);
    assert!(
        table.contains("Bound") && table.contains("pv-small"),
        "{table}"
    );

    // pvc-protection: a pod uses the claim, so deleting it leaves it Terminating.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "user"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    claims
        .delete("data", &DeleteParams::default())
        .await
        .expect("delete pvc");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = claims.get("data").await.expect("the claim is still there");
    assert!(held.metadata.deletion_timestamp.is_some());
    pods.delete(
        "user",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .expect("delete pod");
    wait_for("the claim to go once no pod uses it", TIMEOUT, || async {
        claims.get_opt("data").await.ok()?.is_none().then_some(())
    })
    .await;
    wait_for("the volume to be Released", TIMEOUT, || async {
        let v = volumes.get("pv-small").await.ok()?;
        (v.status.as_ref()?.phase.as_deref() == Some("Released")).then_some(())
    })
    .await;

    // A default class is given to a claim without one; WaitForFirstConsumer waits.
    let sc: k8s_openapi::api::storage::v1::StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "later", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"
    }))
    .expect("class");
    Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
        .expect("create class");
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "waits"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .expect("pvc");
    claims
        .create(&PostParams::default(), &pvc)
        .await
        .expect("create pvc");
    wait_for("the default class on the claim", TIMEOUT, || async {
        let c = claims.get("waits").await.ok()?;
        (c.spec?.storage_class_name.as_deref() == Some("later")).then_some(())
    })
    .await;
    wait_for("the WaitForFirstConsumer event", TIMEOUT, || async {
        let events = events(&client, "WaitForFirstConsumer").await;
        events
            .iter()
            .any(|e| e.involved_object.name.as_deref() == Some("waits"))
            .then_some(())
    })
    .await;
    let waiting = claims.get("waits").await.expect("claim");
    assert_eq!(
        waiting.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
}
