//! A panic fails one request or one reconcile, never the process: with the debug build's
//! test hooks on (`K3RS_TEST_PANIC_HOOKS=1`, see `src/panics.rs`), creating an object
//! named `k3rs-test-panic-create…` panics inside the create handler, and a ReplicaSet
//! named `k3rs-test-panic-reconcile…` panics inside the ReplicaSet controller's reconcile. The server must answer the
//! first with a 500 Status, keep serving every other request, keep reconciling every
//! other ReplicaSet, and count both panics in `/metrics`.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::Server;

fn replica_set(name: &str) -> ReplicaSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .expect("replicaset")
}

fn panics_of(metrics: &str, component: &str) -> u64 {
    let prefix = format!("k3rs_panics_total{{component=\"{component}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_or_reconcile_fails_alone() {
    let server = Server::start_with_env(&[], &[("K3RS_TEST_PANIC_HOOKS", "1")]);
    let client = server.client().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // The handler's panic is this request's 500, worded as kube-apiserver's recovery.
    let hostile: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "k3rs-test-panic-create-cm"}}))
            .expect("cm");
    match configmaps.create(&PostParams::default(), &hostile).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 500, "{status:?}");
            assert_eq!(status.reason, "InternalError", "{status:?}");
            assert!(
                status
                    .message
                    .contains("This request caused apiserver to panic"),
                "{status:?}"
            );
        }
        other => panic!("expected a 500, got {other:?}"),
    }
    // Nothing was stored, and the server goes on serving.
    assert!(
        configmaps
            .get_opt("k3rs-test-panic-create-cm")
            .await
            .expect("get")
            .is_none()
    );
    let fine: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "fine"}, "data": {"a": "b"}}))
            .expect("cm");
    configmaps
        .create(&PostParams::default(), &fine)
        .await
        .expect("another create after the panic");

    // A ReplicaSet whose reconcile panics (again at each retry), and one beside it that
    // must still get its pods.
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    sets.create(
        &PostParams::default(),
        &replica_set("k3rs-test-panic-reconcile-rs"),
    )
    .await
    .expect("create the panicking ReplicaSet");
    sets.create(&PostParams::default(), &replica_set("normal"))
        .await
        .expect("create normal");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = pods
            .list(&ListParams::default().labels("app=normal"))
            .await
            .expect("list pods");
        if listed.items.len() == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the ReplicaSet controller stopped reconciling:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Both panics are counted; the server logged where they happened.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = client
            .request_text(
                http::Request::get("/metrics")
                    .body(Vec::new())
                    .expect("request"),
            )
            .await
            .expect("GET /metrics");
        if panics_of(&metrics, "apiserver") >= 1
            && panics_of(&metrics, "replicaset-controller") >= 1
        {
            break;
        }
        assert!(Instant::now() < deadline, "panics not counted:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = server.log();
    assert!(log.contains("injected panic at create"), "{log}");
    assert!(log.contains("injected panic at reconcile"), "{log}");
    // Still serving.
    configmaps
        .get("fine")
        .await
        .expect("the server still serves");
}
