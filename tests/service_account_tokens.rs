//! Service-account tokens against the real server (`k3rs server --disable-agent`, no root):
//! the ServiceAccount admission adds `kube-api-access-*` to pods, every namespace gets
//! `kube-root-ca.crt` with the server CA, TokenRequest issues ES256 JWTs with Kubernetes'
//! claims, and such tokens authenticate until tampered with or their pod is gone (401).

mod support;

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use support::wait_for;

async fn list_status(server: &support::Server, token: &str) -> Result<(), u16> {
    let client = support::client_with_token(server, token).await;
    match Api::<Pod>::namespaced(client, "default")
        .list(&ListParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) => Err(e.code),
        Err(e) => panic!("listing pods: {e}"),
    }
}

fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("JWT payload");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64url")).expect("JSON")
}

#[tokio::test]
async fn service_account_tokens() {
    let server = support::Server::start();
    let admin = server.client().await;
    // The tokens' pods list pods below: RBAC lets the default account read its namespace.
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(admin.clone(), "default");
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "default-view"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]
            }))
            .expect("binding"),
        )
        .await
        .expect("bind view to default/default");

    // Every namespace gets kube-root-ca.crt with the server CA.
    let ca = std::fs::read_to_string(server.dir.path().join("data/server/tls/server-ca.crt"))
        .expect("server CA");
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).expect("ns"),
        )
        .await
        .expect("namespace");
    for ns in ["default", "kube-system", "team"] {
        let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
        let cm = wait_for(
            &format!("kube-root-ca.crt in {ns}"),
            Duration::from_secs(20),
            || async { cms.get_opt("kube-root-ca.crt").await.ok().flatten() },
        )
        .await;
        assert_eq!(
            cm.data.as_ref().and_then(|d| d.get("ca.crt")),
            Some(&ca),
            "{ns}"
        );
    }
    // ... and gets it back when someone deletes it.
    let team_cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "team");
    team_cms
        .delete("kube-root-ca.crt", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for(
        "kube-root-ca.crt restored",
        Duration::from_secs(20),
        || async { team_cms.get_opt("kube-root-ca.crt").await.ok().flatten() },
    )
    .await;

    // The ServiceAccount admission adds the kube-api-access volume and mounts it everywhere.
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    let account = wait_for(
        "the default service account",
        Duration::from_secs(20),
        || async { accounts.get_opt("default").await.ok().flatten() },
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pod = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "app"}, "spec": {
                "initContainers": [{"name": "init", "image": "busybox"}],
                "containers": [{"name": "main", "image": "busybox"}]}}))
            .expect("pod"),
        )
        .await
        .expect("create pod");
    let spec = pod.spec.clone().expect("spec");
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    let volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name.starts_with("kube-api-access-"))
        .expect("kube-api-access volume");
    assert_eq!(volume.name.len(), "kube-api-access-".len() + 5);
    let sources = volume
        .projected
        .as_ref()
        .and_then(|p| p.sources.clone())
        .expect("projected sources");
    assert_eq!(
        sources[0]
            .service_account_token
            .as_ref()
            .map(|t| (t.path.as_str(), t.expiration_seconds)),
        Some(("token", Some(3607)))
    );
    assert_eq!(
        sources[1].config_map.as_ref().map(|c| c.name.as_str()),
        Some("kube-root-ca.crt")
    );
    assert!(sources[2].downward_api.is_some());
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == volume.name)
            .unwrap_or_else(|| panic!("{} has no kube-api-access mount", c.name));
        assert_eq!(
            mount.mount_path,
            "/var/run/secrets/kubernetes.io/serviceaccount"
        );
        assert_eq!(mount.read_only, Some(true));
    }
    // Managed fields are recorded before mutating admission, as kube-apiserver does: the
    // creator owns what it sent and what defaulting filled in, not the volume, mounts,
    // service account and tolerations admission added.
    let managed = pod.metadata.managed_fields.clone().expect("managedFields");
    assert_eq!(managed.len(), 1, "{managed:?}");
    let owned = serde_json::to_string(&managed[0].fields_v1).expect("fieldsV1");
    for defaulted in [
        "f:image",
        "f:imagePullPolicy",
        "f:restartPolicy",
        "f:dnsPolicy",
    ] {
        assert!(owned.contains(defaulted), "{defaulted} not owned: {owned}");
    }
    for admitted in [
        "f:volumes",
        "f:volumeMounts",
        "f:serviceAccountName",
        "f:tolerations",
        "f:priority",
    ] {
        assert!(!owned.contains(admitted), "{admitted} owned: {owned}");
    }
    // Opting out leaves the pod alone.
    let bare = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "bare"}, "spec": {
                "automountServiceAccountToken": false,
                "containers": [{"name": "main", "image": "busybox"}]}}))
            .expect("pod"),
        )
        .await
        .expect("create pod");
    assert!(
        bare.spec
            .and_then(|s| s.volumes)
            .unwrap_or_default()
            .is_empty()
    );

    // TokenRequest bound to the pod: an ES256 JWT with Kubernetes' claims.
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..Default::default()
    };
    let issued: TokenRequest = accounts
        .create_subresource("token", "default", &PostParams::default(), &request)
        .await
        .expect("TokenRequest");
    let token = issued.status.expect("status").token;
    let header: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(token.split('.').next().expect("header"))
            .expect("base64url"),
    )
    .expect("header JSON");
    assert_eq!(header["alg"], "ES256");
    let c = claims(&token);
    assert_eq!(c["iss"], "https://kubernetes.default.svc.cluster.local");
    assert_eq!(
        c["aud"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    assert_eq!(c["sub"], "system:serviceaccount:default:default");
    assert_eq!(
        c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(),
        3600
    );
    assert_eq!(c["nbf"], c["iat"]);
    assert_eq!(c["kubernetes.io"]["namespace"], "default");
    assert_eq!(
        c["kubernetes.io"]["serviceaccount"]["uid"].as_str(),
        account.metadata.uid.as_deref()
    );
    assert_eq!(c["kubernetes.io"]["pod"]["name"], "app");
    assert_eq!(
        c["kubernetes.io"]["pod"]["uid"].as_str(),
        pod.metadata.uid.as_deref()
    );

    // It authenticates; a tampered one, a foreign audience or garbage is 401.
    assert_eq!(list_status(&server, &token).await, Ok(()));
    let parts: Vec<&str> = token.split('.').collect();
    let mut forged = claims(&token);
    forged["kubernetes.io"]["namespace"] = json!("kube-system");
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(forged.to_string()),
        parts[2]
    );
    assert_eq!(list_status(&server, &forged).await, Err(401));
    assert_eq!(list_status(&server, "not.a.jwt").await, Err(401));
    let vault: TokenRequest = accounts
        .create_subresource(
            "token",
            "default",
            &PostParams::default(),
            &TokenRequest {
                spec: TokenRequestSpec {
                    audiences: vec!["vault".into()],
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("TokenRequest for another audience");
    assert_eq!(
        list_status(&server, &vault.status.expect("status").token).await,
        Err(401)
    );

    // Refusals: an unknown account is 404, a too short lifetime 422, a wrong pod uid 409.
    let short = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(60),
            ..Default::default()
        },
        ..Default::default()
    };
    let code = |r: Result<TokenRequest, kube::Error>| match r {
        Err(kube::Error::Api(e)) => e.code,
        other => panic!("expected an API error, got {other:?}"),
    };
    assert_eq!(
        code(
            accounts
                .create_subresource("token", "nobody", &PostParams::default(), &request)
                .await
        ),
        404
    );
    assert_eq!(
        code(
            accounts
                .create_subresource("token", "default", &PostParams::default(), &short)
                .await
        ),
        422
    );
    let mut wrong_uid = request.clone();
    if let Some(r) = wrong_uid.spec.bound_object_ref.as_mut() {
        r.uid = Some("00000000-0000-0000-0000-000000000000".into());
    }
    assert_eq!(
        code(
            accounts
                .create_subresource("token", "default", &PostParams::default(), &wrong_uid)
                .await
        ),
        409
    );

    // Bound to its pod: once the pod is gone the token is refused.
    pods.delete("app", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    wait_for("the pod to be gone", Duration::from_secs(20), || async {
        pods.get_opt("app").await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(list_status(&server, &token).await, Err(401));

    // The signing key lives under the data dir, readable by root only.
    let key = server.dir.path().join("data/server/tls/service.key");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key)
            .expect("service.key")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
}

/// The ServiceAccount admission refuses a pod whose account does not exist, worded as
/// kube-apiserver words it, but not a pod created in a namespace whose `default` account the
/// serviceaccount controller has not written yet (admission looks it up again, as upstream).
#[tokio::test]
async fn pods_need_an_existing_service_account() {
    let server = support::Server::start();
    let admin = server.client().await;
    let pod = |name: &str, account: Option<&str>| -> Pod {
        let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
        if let Some(account) = account {
            spec["serviceAccountName"] = json!(account);
        }
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("pod")
    };
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    match pods
        .create(&PostParams::default(), &pod("orphan", Some("missing")))
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert_eq!(status.reason, "Forbidden", "{status:?}");
            assert_eq!(
                status.message,
                "pods \"orphan\" is forbidden: error looking up service account default/missing: serviceaccount \"missing\" not found"
            );
        }
        other => panic!("a pod with a missing service account was admitted: {other:?}"),
    }

    // Once the account exists the same pod is admitted.
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "missing"}})).expect("sa"),
        )
        .await
        .expect("create the service account");
    pods.create(&PostParams::default(), &pod("orphan", Some("missing")))
        .await
        .expect("the pod is admitted once its account exists");

    // A namespace and a pod in it right away: `default` is created by the controller moments
    // later, and the pod must not lose that race.
    for round in 0..3 {
        let name = format!("fresh-{round}");
        let namespaces: Api<Namespace> = Api::all(admin.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns"),
            )
            .await
            .expect("namespace");
        let fresh: Api<Pod> = Api::namespaced(admin.clone(), &name);
        let created = fresh
            .create(&PostParams::default(), &pod("first", None))
            .await
            .expect("a pod in a brand-new namespace is admitted");
        assert_eq!(
            created
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.as_deref()),
            Some("default")
        );
    }
}
