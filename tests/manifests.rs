//! Auto-deployed manifests (`src/addons`), against the real binary: files dropped into
//! `<data-dir>/server/manifests/` while the server runs are applied within 2 s and tracked by
//! Addons; edits are re-applied, unchanged files are not; `.skip` markers, broken files and
//! removed files behave as in k3s; packaged manifests are written at start and
//! `--disable=<name>` removes them with what they deployed.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use sha2::Digest;
use support::{Server, wait_for};

fn manifests_dir(server: &Server) -> PathBuf {
    server.dir.path().join("data/server/manifests")
}

fn addons(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("k3rs.io", "v1", "Addon"),
        "addons",
    );
    Api::namespaced_with(client.clone(), "kube-system", &resource)
}

/// Writes `content` to `dir/name` in one step (a rename), as a careful operator would; the
/// loop copes with slower writes too, but the test's timing should not depend on them.
fn put(dir: &Path, name: &str, content: &str) {
    let temporary = dir.join(format!(".{name}.tmp"));
    std::fs::write(&temporary, content).expect("write manifest");
    std::fs::rename(&temporary, dir.join(name)).expect("rename manifest");
}

fn sha256(content: &str) -> String {
    hex::encode(sha2::Sha256::digest(content.as_bytes()))
}

/// The Events about Addon `name` with `reason`: their total count.
async fn event_count(client: &kube::Client, name: &str, reason: &str) -> i32 {
    let events: Api<Event> = Api::namespaced(client.clone(), "kube-system");
    events
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Addon")
                && e.involved_object.name.as_deref() == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .map(|e| e.count.unwrap_or(1))
        .sum()
}

fn app_manifest(greeting: &str) -> String {
    format!(
        "# a ConfigMap and a Deployment, the first without a namespace (so `default`)\n\
---\n\
apiVersion: v1\n\
kind: ConfigMap\n\
metadata:\n  name: app-config\n\
data:\n  greeting: {greeting}\n\
---\n\
---\n\
apiVersion: apps/v1\n\
kind: Deployment\n\
metadata:\n  name: app\n  namespace: default\n\
spec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: app}}\n  template:\n    metadata:\n      labels: {{app: app}}\n    spec:\n      containers:\n      - name: app\n        image: registry.k8s.io/pause:3.10\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_are_applied_reapplied_skipped_and_reported() {
    let mut server = Server::start();
    let client = server.client().await;
    let dir = manifests_dir(&server);
    // The loop runs once the packaged manifest is applied.
    wait_for("the packaged Addon", Duration::from_secs(20), || {
        let addons = addons(&client);
        async move { addons.get_opt("rolebindings").await.ok().flatten() }
    })
    .await;

    // A broken file (sorted first) and a file of a kind nobody serves: Events on their Addons,
    // while the good file next to them is applied within 2 s.
    put(
        &dir,
        "a-broken.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [unclosed\n",
    );
    put(
        &dir,
        "unknown.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n",
    );
    let first = app_manifest("hello");
    put(&dir, "app.yaml", &first);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let cm = wait_for("app-config applied", Duration::from_secs(2), || {
        let configmaps = configmaps.clone();
        async move { configmaps.get_opt("app-config").await.ok().flatten() }
    })
    .await;
    assert_eq!(
        cm.data
            .unwrap_or_default()
            .get("greeting")
            .map(String::as_str),
        Some("hello")
    );
    // Objects are applied one after the other: the Deployment may come a moment later.
    let deployment = wait_for("the Deployment applied", Duration::from_secs(2), || {
        let deployments = deployments.clone();
        async move { deployments.get_opt("app").await.ok().flatten() }
    })
    .await;
    let managers: Vec<_> = deployment
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(managers.iter().any(|m| m == "k3rs-deploy"), "{managers:?}");
    let addon = wait_for("the app Addon's checksum", Duration::from_secs(2), || {
        let addons = addons(&client);
        let want = sha256(&first);
        async move {
            addons
                .get_opt("app")
                .await
                .ok()
                .flatten()
                .filter(|a| a.data["spec"]["checksum"] == want)
        }
    })
    .await;
    assert!(
        addon.data["spec"]["source"]
            .as_str()
            .is_some_and(|s| s.ends_with("server/manifests/app.yaml")),
        "{:?}",
        addon.data
    );
    let applied = addon.data["status"]["appliedObjects"].clone();
    assert_eq!(
        applied,
        json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "app-config"},
            {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "app"}
        ])
    );
    wait_for(
        "ParseManifestFailed on a-broken",
        Duration::from_secs(5),
        || {
            let client = client.clone();
            async move {
                (event_count(&client, "a-broken", "ParseManifestFailed").await > 0).then_some(())
            }
        },
    )
    .await;
    wait_for(
        "ApplyManifestFailed on unknown",
        Duration::from_secs(5),
        || {
            let client = client.clone();
            async move {
                (event_count(&client, "unknown", "ApplyManifestFailed").await > 0).then_some(())
            }
        },
    )
    .await;
    assert_eq!(event_count(&client, "app", "AppliedManifest").await, 1);

    // An edit is applied again; a touch without a change is not.
    let second = app_manifest("bonjour");
    put(&dir, "app.yaml", &second);
    wait_for("the edit applied", Duration::from_secs(2), || {
        let configmaps = configmaps.clone();
        async move {
            let cm = configmaps.get_opt("app-config").await.ok().flatten()?;
            (cm.data?.get("greeting")? == "bonjour").then_some(())
        }
    })
    .await;
    wait_for("the new checksum", Duration::from_secs(2), || {
        let addons = addons(&client);
        let want = sha256(&second);
        async move {
            let addon = addons.get_opt("app").await.ok().flatten()?;
            (addon.data["spec"]["checksum"] == want).then_some(())
        }
    })
    .await;
    let file = std::fs::File::options()
        .append(true)
        .open(dir.join("app.yaml"))
        .expect("open");
    file.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .expect("touch");
    drop(file);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        event_count(&client, "app", "AppliedManifest").await,
        2,
        "applied at first, after the edit, and not again"
    );

    // `x.yaml.skip` skips `x.yaml`.
    put(&dir, "x.yaml.skip", "");
    put(
        &dir,
        "x.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: skipped\n",
    );
    // Removing a file leaves its objects.
    std::fs::remove_file(dir.join("app.yaml")).expect("remove app.yaml");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(configmaps.get_opt("skipped").await.expect("get").is_none());
    assert!(addons(&client).get_opt("x").await.expect("get").is_none());
    assert!(
        configmaps
            .get_opt("app-config")
            .await
            .expect("get")
            .is_some()
    );
    assert!(deployments.get_opt("app").await.expect("get").is_some());

    // The broken files never stopped the server; fixing one applies it.
    assert!(
        server.child.try_wait().expect("wait").is_none(),
        "{}",
        server.log()
    );
    put(
        &dir,
        "a-broken.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fixed\n",
    );
    wait_for("the fixed file applied", Duration::from_secs(2), || {
        let configmaps = configmaps.clone();
        async move { configmaps.get_opt("fixed").await.ok().flatten() }
    })
    .await;
    let log = server.log();
    assert!(log.contains("ParseManifestFailed"), "{log}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packaged_manifest_is_written_and_disable_removes_it() {
    let mut server = Server::start();
    let client = server.client().await;
    let file = manifests_dir(&server).join("rolebindings.yaml");
    let content = std::fs::read_to_string(&file).expect("packaged manifest written at start");
    assert!(content.contains("k3rs:addons-view"), "{content}");
    let roles: Api<ClusterRole> = Api::all(client.clone());
    wait_for("the packaged ClusterRole", Duration::from_secs(20), || {
        let roles = roles.clone();
        async move { roles.get_opt("k3rs:addons-view").await.ok().flatten() }
    })
    .await;
    let addon = wait_for("the packaged Addon", Duration::from_secs(5), || {
        let addons = addons(&client);
        async move {
            addons
                .get_opt("rolebindings")
                .await
                .ok()
                .flatten()
                .filter(|a| a.data["status"]["appliedObjects"].is_array())
        }
    })
    .await;
    assert_eq!(
        addon.data["status"]["appliedObjects"],
        json!([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "k3rs:addons-view"}])
    );

    // What it is for: a user who may view may read Addons (the role aggregates into `view`).
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "alice-view"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]
            }))
            .expect("binding"),
        )
        .await
        .expect("bind alice to view");
    let alice = support::client_as(&server, "alice").await;
    wait_for("alice lists Addons", Duration::from_secs(10), || {
        let addons = addons(&alice);
        async move { addons.list(&ListParams::default()).await.ok() }
    })
    .await;

    // A restart with --disable=rolebindings deletes the role, the file and the Addon.
    let dir = std::mem::replace(&mut server.dir, tempfile::tempdir().expect("tempdir"));
    server.stop();
    drop(server);
    let server = Server::start_in(dir, &["--disable=rolebindings"]);
    let client = server.client().await;
    let roles: Api<ClusterRole> = Api::all(client.clone());
    wait_for(
        "the packaged ClusterRole deleted",
        Duration::from_secs(20),
        || {
            let roles = roles.clone();
            async move {
                roles
                    .get_opt("k3rs:addons-view")
                    .await
                    .ok()?
                    .is_none()
                    .then_some(())
            }
        },
    )
    .await;
    wait_for("the packaged Addon deleted", Duration::from_secs(5), || {
        let addons = addons(&client);
        async move {
            addons
                .get_opt("rolebindings")
                .await
                .ok()?
                .is_none()
                .then_some(())
        }
    })
    .await;
    assert!(!manifests_dir(&server).join("rolebindings.yaml").exists());
}
