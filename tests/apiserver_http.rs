//! The API server over HTTPS with kube-rs: health and version, authentication,
//! CRUD and watch through typed clients, and bad input — each bad request gets the
//! right `metav1.Status` and leaves the store unchanged.

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use support::Server;

/// A client that trusts the server but presents no credentials.
async fn anonymous(server: &Server) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).expect("read kubeconfig");
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig");
    config.auth_info = Default::default();
    kube::Client::try_from(config).expect("client")
}

async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, Value, Vec<String>) {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(body)
        .expect("request");
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .expect("send");
    let status = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("body")
        .to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value, warnings)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn health_version_and_authentication() {
    let server = Server::start();
    eprintln!("server ready in {:?}", server.started_in);
    runtime().block_on(async {
        let anon = anonymous(&server).await;
        let (code, body, _) = send(&anon, "GET", "/version", "application/json", vec![]).await;
        assert_eq!(code, 200);
        assert_eq!(body["major"], "1");
        let (code, body, _) =
            send(&anon, "GET", "/readyz?verbose", "application/json", vec![]).await;
        assert_eq!(code, 200);
        assert!(body.as_str().unwrap().contains("readyz check passed"));
        let (code, body, _) = send(
            &anon,
            "GET",
            "/api/v1/namespaces",
            "application/json",
            vec![],
        )
        .await;
        assert_eq!(code, 401);
        assert_eq!(body["reason"], "Unauthorized");

        let admin = server.client().await;
        let (code, body, _) = send(
            &admin,
            "GET",
            "/api/v1/namespaces",
            "application/json",
            vec![],
        )
        .await;
        assert_eq!(code, 200);
        let names: Vec<&str> = body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["metadata"]["name"].as_str().unwrap())
            .collect();
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            assert!(names.contains(&ns), "{ns} missing from {names:?}");
        }
        // Attack: the join token is no API credential (k3s: it authenticates the join
        // endpoints only). Neither its secret nor the full K10 form, presented as a bearer
        // token, may read Secrets cluster-wide.
        let token = std::fs::read_to_string(server.dir.path().join("data/server/token")).unwrap();
        let token = token.trim().to_string();
        let secret = token.rsplit("::server:").next().unwrap().to_string();
        for presented in [secret, token] {
            let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).unwrap();
            let mut config =
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .unwrap();
            config.auth_info = kube::config::AuthInfo {
                token: Some(presented.into()),
                ..Default::default()
            };
            let bearer = kube::Client::try_from(config).unwrap();
            let (code, body, _) = send(
                &bearer,
                "GET",
                "/api/v1/secrets",
                "application/json",
                vec![],
            )
            .await;
            assert_eq!(code, 401, "the join token listed Secrets: {body}");
        }
        let mut bad = kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&server.kubeconfig).unwrap(),
            &KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        bad.auth_info = kube::config::AuthInfo {
            token: Some("wrong".to_string().into()),
            ..Default::default()
        };
        let (code, _, _) = send(
            &kube::Client::try_from(bad).unwrap(),
            "GET",
            "/api/v1/namespaces",
            "application/json",
            vec![],
        )
        .await;
        assert_eq!(code, 401);
    });
}

#[test]
fn typed_crud_and_watch_with_kube_rs() {
    let server = Server::start();
    runtime().block_on(async {
        let client = server.client().await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "crud"}})).unwrap(),
            )
            .await
            .unwrap();
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "crud");
        let list = cms.list(&ListParams::default()).await.unwrap();
        let start_rv = list.metadata.resource_version.clone().unwrap();
        let mut stream = cms
            .watch(&WatchParams::default().timeout(5), &start_rv)
            .await
            .unwrap()
            .boxed();

        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": "one", "labels": {"a": "b"}}, "data": {"k": "v"}}),
        )
        .unwrap();
        let created = cms.create(&PostParams::default(), &cm).await.unwrap();
        assert!(created.metadata.uid.is_some());
        assert!(created.metadata.creation_timestamp.is_some());
        let mut changed = created.clone();
        changed
            .data
            .as_mut()
            .unwrap()
            .insert("k".into(), "w".into());
        let replaced = cms
            .replace("one", &PostParams::default(), &changed)
            .await
            .unwrap();
        assert!(
            replaced
                .metadata
                .resource_version
                .unwrap()
                .parse::<u64>()
                .unwrap()
                > created
                    .metadata
                    .resource_version
                    .clone()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
        );
        // A stale resourceVersion is refused with 409.
        let stale = cms
            .replace("one", &PostParams::default(), &changed)
            .await
            .unwrap_err();
        match stale {
            kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (409, "Conflict")),
            other => panic!("expected conflict, got {other}"),
        }
        let selected = cms
            .list(&ListParams::default().labels("a=b"))
            .await
            .unwrap();
        assert_eq!(selected.items.len(), 1);
        let none = cms
            .list(&ListParams::default().labels("a!=b"))
            .await
            .unwrap();
        // Only the namespace's kube-root-ca.crt (which carries no labels) may match.
        assert!(
            none.items
                .iter()
                .all(|c| c.metadata.name.as_deref() == Some("kube-root-ca.crt")),
            "{:?}",
            none.items
                .iter()
                .map(|c| &c.metadata.name)
                .collect::<Vec<_>>()
        );
        cms.delete("one", &DeleteParams::default()).await.unwrap();

        let mut kinds = Vec::new();
        while let Some(event) = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("event in time")
        {
            // Only "one" counts: the namespace's kube-root-ca.crt may arrive too.
            let is_one = |c: &ConfigMap| c.metadata.name.as_deref() == Some("one");
            match event.unwrap() {
                WatchEvent::Added(c) if is_one(&c) => kinds.push("ADDED"),
                WatchEvent::Modified(c) if is_one(&c) => kinds.push("MODIFIED"),
                WatchEvent::Deleted(c) if is_one(&c) => kinds.push("DELETED"),
                WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_) => {}
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(e) => panic!("watch error {e:?}"),
            }
            if kinds.len() == 3 {
                break;
            }
        }
        assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
        // timeoutSeconds ends the stream.
        let started = std::time::Instant::now();
        while tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("stream ends")
            .is_some()
        {}
        assert!(started.elapsed() < Duration::from_secs(8));

        // A metadata-only watch (what metadata informers ask for) gets
        // PartialObjectMetadata objects without the data.
        let request = http::Request::get(format!(
            "/api/v1/namespaces/crud/configmaps?watch=1&timeoutSeconds=1&resourceVersion={start_rv}"
        ))
        .header(
            "accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
        )
        .body(Vec::new())
        .unwrap();
        let text = client.request_text(request).await.unwrap();
        let events: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["object"]["metadata"]["name"] != "kube-root-ca.crt")
            .collect();
        assert_eq!(events.len(), 3, "{text}");
        for event in &events {
            assert_eq!(event["object"]["kind"], "PartialObjectMetadata", "{event}");
            assert_eq!(event["object"]["apiVersion"], "meta.k8s.io/v1");
            assert_eq!(event["object"]["metadata"]["name"], "one");
            assert!(event["object"].get("data").is_none(), "{event}");
        }
    });
}

#[test]
fn bad_input_gets_a_status_and_changes_nothing() {
    let server = Server::start();
    runtime().block_on(async {
        let client = server.client().await;
        let path = "/api/v1/namespaces/default/configmaps";
        let revision = |c: kube::Client| async move {
            let (_, list, _) = send(&c, "GET", "/api/v1/namespaces/default/configmaps", "application/json", vec![]).await;
            // The objects and their versions (the list's own resourceVersion is the whole
            // store's revision, which the controllers' writes elsewhere move on).
            list["items"].as_array().unwrap().iter().filter(|o| o["metadata"]["name"] != "kube-root-ca.crt").map(|o| format!("{}@{}", o["metadata"]["name"], o["metadata"]["resourceVersion"])).collect::<Vec<_>>()
        };
        let before = revision(client.clone()).await;
        let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
            ("malformed JSON", "application/json", b"{\"apiVersion\": \"v1\", \"kind\": ".to_vec(), 400, "BadRequest"),
            ("malformed YAML", "application/yaml", b"apiVersion: v1\nkind: [ConfigMap\n".to_vec(), 400, "BadRequest"),
            ("wrong apiVersion", "application/json", br#"{"apiVersion":"v2","kind":"ConfigMap","metadata":{"name":"x"}}"#.to_vec(), 400, "BadRequest"),
            ("wrong kind", "application/json", br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}"#.to_vec(), 400, "BadRequest"),
            ("wrong type", "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a":1}}"#.to_vec(), 400, "BadRequest"),
            ("invalid name", "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Bad_Name"}}"#.to_vec(), 422, "Invalid"),
            ("no name", "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#.to_vec(), 422, "Invalid"),
        ];
        for (what, content_type, body, code, reason) in cases {
            let (got, status, _) = send(&client, "POST", path, content_type, body).await;
            assert_eq!((got, status["reason"].as_str().unwrap_or("")), (code, reason), "{what}: {status}");
            assert_eq!(status["kind"], "Status", "{what}");
            assert_eq!(status["code"], code, "{what}");
        }
        let long = "a".repeat(300);
        let (code, status, _) = send(&client, "POST", path, "application/json", json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name": long}}).to_string().into_bytes()).await;
        assert_eq!(code, 422);
        assert!(status["message"].as_str().unwrap().contains("must be no more than 253 characters"), "{status}");
        let huge = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"huge"},"data":{"a": "x".repeat(4 * 1024 * 1024)}});
        let (code, status, _) = send(&client, "POST", path, "application/json", huge.to_string().into_bytes()).await;
        assert_eq!((code, status["reason"].as_str().unwrap()), (413, "RequestEntityTooLarge"));
        let (code, status, _) = send(&client, "POST", "/api/v1/namespaces/nope/configmaps", "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#.to_vec()).await;
        assert_eq!(code, 404);
        assert_eq!(status["message"], "namespaces \"nope\" not found");
        let unknown = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"bogus":true}"#.to_vec();
        let (code, status, _) = send(&client, "POST", &format!("{path}?fieldValidation=Strict"), "application/json", unknown.clone()).await;
        assert_eq!(code, 400);
        assert_eq!(status["message"], "strict decoding error: unknown field \"bogus\"");
        assert_eq!(revision(client.clone()).await, before, "refused requests changed the store");

        // Not found is byte-compatible with kube-apiserver.
        let request = http::Request::get("/api/v1/namespaces/default/configmaps/missing").body(Vec::new()).unwrap();
        let response = client.send(request.map(kube::client::Body::from)).await.unwrap();
        let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"missing\" not found","reason":"NotFound","details":{"name":"missing","kind":"configmaps"},"code":404}"#
        );
        // Warn keeps the object and reports the field.
        let (code, _, warnings) = send(&client, "POST", &format!("{path}?fieldValidation=Warn"), "application/json", unknown).await;
        assert_eq!(code, 201);
        assert!(warnings.iter().any(|w| w.contains("unknown field \\\"bogus\\\"") || w.contains("unknown field \"bogus\"")), "{warnings:?}");
    });
}

#[test]
fn custom_resources_are_served_and_validated_against_their_schema() {
    let server = Server::start();
    runtime().block_on(async {
        let client = server.client().await;
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "required": ["replicas"], "properties": {
                            "replicas": {"type": "integer", "minimum": 0},
                            "color": {"type": "string", "enum": ["red", "blue"]}}},
                        "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}}}]}
        });
        let (code, created, _) = send(&client, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/json", crd.to_string().into_bytes()).await;
        assert_eq!(code, 201, "{created}");
        assert_eq!(created["status"]["conditions"][1]["type"], "Established");
        let path = "/apis/example.com/v1/namespaces/default/gadgets";
        let good = json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g1"}, "spec": {"replicas": 2, "color": "red"}});
        let (code, body, _) = send(&client, "POST", path, "application/json", good.to_string().into_bytes()).await;
        assert_eq!(code, 201, "{body}");
        let wrong_type = json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g2"}, "spec": {"replicas": "two"}});
        let (code, body, _) = send(&client, "POST", path, "application/json", wrong_type.to_string().into_bytes()).await;
        assert_eq!((code, body["reason"].as_str().unwrap()), (422, "Invalid"), "{body}");
        assert!(body["message"].as_str().unwrap().contains("spec.replicas"), "{body}");
        let unknown = json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g3"}, "spec": {"replicas": 1, "bogus": 1}});
        let (code, body, _) = send(&client, "POST", &format!("{path}?fieldValidation=Strict"), "application/json", unknown.to_string().into_bytes()).await;
        assert_eq!(code, 400, "{body}");
        assert_eq!(body["message"], "strict decoding error: unknown field \"spec.bogus\"");
        // Strategic merge patch is refused for custom resources (415); merge patch works.
        let (code, _, _) = send(&client, "PATCH", &format!("{path}/g1"), "application/strategic-merge-patch+json", br#"{"spec":{"replicas":3}}"#.to_vec()).await;
        assert_eq!(code, 415);
        let (code, body, _) = send(&client, "PATCH", &format!("{path}/g1"), "application/merge-patch+json", br#"{"spec":{"replicas":3},"status":{"replicas":9}}"#.to_vec()).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["spec"]["replicas"], 3);
        assert!(body.get("status").is_none(), "status changes only through /status: {body}");
        let (code, scale, _) = send(&client, "GET", &format!("{path}/g1/scale"), "application/json", vec![]).await;
        assert_eq!((code, scale["spec"]["replicas"].as_i64()), (200, Some(3)), "{scale}");
        let (code, body, _) = send(&client, "PATCH", &format!("{path}/g1/status"), "application/merge-patch+json", br#"{"status":{"replicas":3}}"#.to_vec()).await;
        assert_eq!((code, body["status"]["replicas"].as_i64()), (200, Some(3)), "{body}");
        // Deleting the CRD stops serving the resource.
        let (code, _, _) = send(&client, "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.com", "application/json", vec![]).await;
        assert_eq!(code, 200);
        let (code, _, _) = send(&client, "GET", path, "application/json", vec![]).await;
        assert_eq!(code, 404);
    });
}

/// Creates see the namespace writes made just before them, while writes elsewhere keep
/// the store moving: they land in a namespace as soon as it was created, and are refused
/// (403 Forbidden, nothing stored) as soon as it is terminating.
#[test]
fn creates_follow_the_namespace_lifecycle_under_load() {
    let server = Server::start();
    runtime().block_on(async {
        let client = server.client().await;
        let configmap = |name: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
                .to_string()
                .into_bytes()
        };
        // Unrelated writes in the background, so the store's revision runs ahead of
        // any one namespace write.
        let busy = client.clone();
        let background = tokio::spawn(async move {
            for i in 0..400 {
                let path = "/api/v1/namespaces/default/configmaps";
                let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("noise-{i}")}});
                send(&busy, "POST", path, "application/json", body.to_string().into_bytes()).await;
            }
        });
        for round in 0..20 {
            let ns = format!("life-{round}");
            // A finalizer of our own keeps the namespace Terminating after the
            // namespace controller has emptied it.
            let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "finalizers": ["example.com/hold"]}});
            let (code, body, _) = send(&client, "POST", "/api/v1/namespaces", "application/json", namespace.to_string().into_bytes()).await;
            assert_eq!(code, 201, "{body}");
            let path = format!("/api/v1/namespaces/{ns}/configmaps");
            let (code, body, _) = send(&client, "POST", &path, "application/json", configmap("first")).await;
            assert_eq!(code, 201, "create right after the namespace: {body}");

            let (code, body, _) = send(&client, "DELETE", &format!("/api/v1/namespaces/{ns}"), "application/json", vec![]).await;
            assert!(code == 200 || code == 202, "delete namespace: {code} {body}");
            let (code, body, _) = send(&client, "POST", &path, "application/json", configmap("late")).await;
            assert_eq!(code, 403, "create right after the delete: {body}");
            assert_eq!(body["reason"], "Forbidden");
            assert_eq!(
                body["message"],
                format!("configmaps is forbidden: unable to create new content in namespace {ns} because it is being terminated")
            );
            let (code, _, _) = send(&client, "GET", &format!("{path}/late"), "application/json", vec![]).await;
            assert_eq!(code, 404, "a refused create stored its object");
        }
        background.await.expect("background writes");
        // Let the namespaces go: drop our finalizer; the controller finishes the rest.
        for round in 0..20 {
            let patch = json!({"metadata": {"finalizers": null}}).to_string().into_bytes();
            let (code, body, _) = send(&client, "PATCH", &format!("/api/v1/namespaces/life-{round}"), "application/merge-patch+json", patch).await;
            assert!(code == 200 || code == 404, "release life-{round}: {code} {body}");
        }
    });
}
