//! The garbage collector against the real binary (controller-manager in-process, no
//! nodes, so pods stay Pending and unbound pods go at once when deleted): background,
//! foreground and orphan propagation through ownerReferences, an object with two
//! owners, and `kubectl delete deployment`.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::{Server, wait_for};

const NS: &str = "default";
const TIMEOUT: Duration = Duration::from_secs(45);

fn template(app: &str) -> serde_json::Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
    })
}

async fn create_deployment(client: &kube::Client, name: &str, replicas: i32) {
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template(name)
        }
    }))
    .expect("deployment");
    Api::<Deployment>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &d)
        .await
        .expect("create deployment");
}

/// All pods with `app=<app>`, terminating ones included.
async fn pods(client: &kube::Client, app: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list pods")
        .items
}

async fn replicasets(client: &kube::Client, app: &str) -> Vec<ReplicaSet> {
    Api::<ReplicaSet>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list replicasets")
        .items
}

async fn wait_pods(client: &kube::Client, app: &str, n: usize) -> Vec<Pod> {
    wait_for(&format!("{n} pods of {app}"), TIMEOUT, || async {
        let pods = pods(client, app).await;
        (pods.len() == n).then_some(pods)
    })
    .await
}

async fn wait_all_gone(client: &kube::Client, app: &str) {
    wait_for(
        &format!("replicasets and pods of {app} gone"),
        TIMEOUT,
        || async {
            (replicasets(client, app).await.is_empty() && pods(client, app).await.is_empty())
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_delete_of_deployment_removes_replicaset_and_pods() {
    let server = Server::start();
    let client = server.client().await;
    create_deployment(&client, "bg", 3).await;
    wait_pods(&client, "bg", 3).await;
    assert_eq!(replicasets(&client, "bg").await.len(), 1);

    Api::<Deployment>::namespaced(client.clone(), NS)
        .delete("bg", &DeleteParams::default())
        .await
        .expect("delete deployment");
    wait_all_gone(&client, "bg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_delete_waits_for_dependents() {
    let server = Server::start();
    let client = server.client().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    create_deployment(&client, "fg", 2).await;
    wait_pods(&client, "fg", 2).await;

    deployments
        .delete("fg", &DeleteParams::foreground())
        .await
        .expect("delete deployment");
    let d = deployments
        .get_opt("fg")
        .await
        .expect("get")
        .expect("deployment still there during foreground deletion");
    assert!(d.metadata.deletion_timestamp.is_some());
    assert!(
        d.metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == "foregroundDeletion")
    );

    // The deployment must outlive every ReplicaSet and pod, then disappear.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let present = deployments.get_opt("fg").await.expect("get").is_some();
        let rs = replicasets(&client, "fg").await.len();
        let pods = pods(&client, "fg").await.len();
        if !present {
            assert_eq!(
                (rs, pods),
                (0, 0),
                "deployment gone before its ReplicaSets and pods"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "foreground deletion did not finish"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_delete_of_replicaset_keeps_pods_without_owner() {
    let server = Server::start();
    let client = server.client().await;
    let rs: ReplicaSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "orph"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "orph"}},
            "template": template("orph")
        }
    }))
    .expect("replicaset");
    let replicasets_api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    replicasets_api
        .create(&PostParams::default(), &rs)
        .await
        .expect("create replicaset");
    let before = wait_pods(&client, "orph", 2).await;
    assert!(before.iter().all(|p| p.metadata.owner_references.is_some()));

    replicasets_api
        .delete("orph", &DeleteParams::orphan())
        .await
        .expect("delete replicaset");
    wait_for("replicaset gone", TIMEOUT, || async {
        replicasets_api
            .get_opt("orph")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    // Give the collector a few passes: the pods must stay, with no owner.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = pods(&client, "orph").await;
    assert_eq!(after.len(), 2, "orphaned pods were deleted");
    for pod in &after {
        assert!(pod.metadata.deletion_timestamp.is_none());
        assert!(
            pod.metadata
                .owner_references
                .as_ref()
                .is_none_or(|r| r.is_empty()),
            "pod still has owners: {:?}",
            pod.metadata.owner_references
        );
    }
    let mut names: Vec<_> = before.iter().map(|p| p.metadata.name.clone()).collect();
    let mut kept: Vec<_> = after.iter().map(|p| p.metadata.name.clone()).collect();
    names.sort();
    kept.sort();
    assert_eq!(names, kept);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependent_with_two_owners_survives_one() {
    let server = Server::start();
    let client = server.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let mut uids = Vec::new();
    for name in ["owner-a", "owner-b"] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("configmap");
        let created = api
            .create(&PostParams::default(), &cm)
            .await
            .expect("create owner");
        uids.push(created.metadata.uid.expect("uid"));
    }
    let child: ConfigMap = serde_json::from_value(json!({"metadata": {
        "name": "child",
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner-a", "uid": uids[0]},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner-b", "uid": uids[1]}
        ]
    }}))
    .expect("child");
    api.create(&PostParams::default(), &child)
        .await
        .expect("create child");

    api.delete("owner-a", &DeleteParams::default())
        .await
        .expect("delete owner-a");
    let refs = wait_for("dangling reference removed", TIMEOUT, || async {
        let child = api.get_opt("child").await.expect("get")?;
        let refs = child.metadata.owner_references.unwrap_or_default();
        (refs.len() == 1).then_some(refs)
    })
    .await;
    assert_eq!(refs[0].uid, uids[1]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(api.get_opt("child").await.expect("get").is_some());

    // With its last owner gone, the child goes too.
    api.delete("owner-b", &DeleteParams::default())
        .await
        .expect("delete owner-b");
    wait_for("child collected", TIMEOUT, || async {
        api.get_opt("child")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_deployment_leaves_no_pods() {
    let server = Server::start();
    let client = server.client().await;
    create_deployment(&client, "kc", 2).await;
    wait_pods(&client, "kc", 2).await;
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["delete", "deployment", "kc", "-n", NS],
        None,
    );
    assert!(
        out.status.success(),
        "kubectl delete failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    wait_all_gone(&client, "kc").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_owned_by_a_new_custom_resource_are_collected() {
    let server = Server::start();
    let client = server.client().await;
    // A CRD created after the collector started: its kind is unknown to the
    // collector's first discovery and its resource has no watch yet.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    });
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["apply", "-f", "-"],
        Some(&crd.to_string()),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resource = kube::core::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), NS, &resource);
    let widget: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}
    }))
    .expect("widget");
    let widget = wait_for("custom resource served", TIMEOUT, || async {
        widgets.create(&PostParams::default(), &widget).await.ok()
    })
    .await;
    let uid = widget.metadata.uid.expect("uid");
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {
        "name": "widget-config",
        "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Widget", "name": "w1", "uid": uid}]
    }}))
    .expect("configmap");
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .expect("create owned configmap");
    // Still owned: not collected.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        configmaps
            .get_opt("widget-config")
            .await
            .expect("get")
            .is_some()
    );

    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .expect("delete widget");
    wait_for(
        "configmap owned by the widget collected",
        TIMEOUT,
        || async {
            configmaps
                .get_opt("widget-config")
                .await
                .expect("get")
                .is_none()
                .then_some(())
        },
    )
    .await;
}

/// As kube's collector (`DefaultIgnoredResources`), Events are never watched nor collected,
/// even with ownerReferences: a ConfigMap owned by the same deleted owner goes, the Event stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_never_collected() {
    use k8s_openapi::api::core::v1::Event;
    let server = Server::start();
    let client = server.client().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let owner: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "event-owner"}})).expect("configmap");
    let uid = configmaps
        .create(&PostParams::default(), &owner)
        .await
        .expect("create owner")
        .metadata
        .uid
        .expect("uid");
    let owned =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "event-owner", "uid": uid}]);
    let child: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "owned-configmap", "ownerReferences": owned}}),
    )
    .expect("child");
    configmaps
        .create(&PostParams::default(), &child)
        .await
        .expect("create child");
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "owned-event", "ownerReferences": owned},
        "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "event-owner", "namespace": NS},
        "reason": "Test", "message": "owned by a ConfigMap", "type": "Normal"
    }))
    .expect("event");
    events
        .create(&PostParams::default(), &event)
        .await
        .expect("create event");

    configmaps
        .delete("event-owner", &DeleteParams::default())
        .await
        .expect("delete owner");
    wait_for("the owned ConfigMap collected", TIMEOUT, || async {
        configmaps
            .get_opt("owned-configmap")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        events.get_opt("owned-event").await.expect("get").is_some(),
        "the garbage collector deleted an Event"
    );
}
