//! The Endpoints, EndpointSlice and ServiceAccount controllers against the real
//! binary. There is no kubelet: the test creates pods already bound to a (fake) node
//! and plays the kubelet by patching their `/status` (podIP, phase, Ready).

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Server, wait_for};

const NS: &str = "default";
const TIMEOUT: Duration = Duration::from_secs(30);

/// A pod bound to `node-a` whose container exposes `ports` ([(name, port)]).
async fn create_pod(client: &kube::Client, name: &str, ports: &[(&str, i32)]) -> Pod {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p)| json!({"name": n, "containerPort": p}))
        .collect();
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {
            "nodeName": "node-a",
            "containers": [{"name": "main", "image": "nginx", "ports": ports}]
        }
    }))
    .expect("pod");
    api.create(&PostParams::default(), &pod)
        .await
        .expect("create pod")
}

/// Plays the kubelet: the pod runs with `ip` and its Ready condition is `ready`.
async fn set_status(client: &kube::Client, name: &str, ip: &str, ready: bool) {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = if ready { "True" } else { "False" };
    let patch = json!({"status": {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": status, "lastTransitionTime": now}]
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch pod status");
}

async fn create_service(client: &kube::Client, name: &str, target_port: Value, publish: bool) {
    let api: Api<Service> = Api::namespaced(client.clone(), NS);
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": {"app": "web"},
            "publishNotReadyAddresses": publish,
            "ports": [{"name": "http", "port": 80, "targetPort": target_port}]
        }
    }))
    .expect("service");
    api.create(&PostParams::default(), &svc)
        .await
        .expect("create service");
}

/// The Endpoints of `name` as {(ip, port, ready)}.
async fn endpoints(client: &kube::Client, name: &str) -> Option<BTreeSet<(String, i32, bool)>> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), NS);
    let ep = api.get_opt(name).await.expect("get endpoints")?;
    let mut out = BTreeSet::new();
    for subset in ep.subsets.unwrap_or_default() {
        for port in subset.ports.unwrap_or_default() {
            for a in subset.addresses.iter().flatten() {
                out.insert((a.ip.clone(), port.port, true));
            }
            for a in subset.not_ready_addresses.iter().flatten() {
                out.insert((a.ip.clone(), port.port, false));
            }
        }
    }
    Some(out)
}

/// The managed slices of `name` as {(ip, port, ready, serving, terminating)}.
async fn slices(client: &kube::Client, name: &str) -> BTreeSet<(String, i32, bool, bool, bool)> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let list = api
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await
        .expect("list slices");
    let mut out = BTreeSet::new();
    for slice in list.items {
        // A pod none of whose ports the service targets sits in a port-less slice
        // (as in kube); it is reported with port 0.
        let ports = slice.ports.clone().unwrap_or_default();
        let ports: Vec<Option<i32>> = if ports.is_empty() {
            vec![Some(0)]
        } else {
            ports.into_iter().map(|p| p.port).collect()
        };
        for port in ports {
            for e in &slice.endpoints {
                let c = e.conditions.clone().unwrap_or_default();
                out.insert((
                    e.addresses[0].clone(),
                    port.unwrap_or_default(),
                    c.ready.unwrap_or_default(),
                    c.serving.unwrap_or_default(),
                    c.terminating.unwrap_or_default(),
                ));
            }
        }
    }
    out
}

fn set<const N: usize, T: Ord + Clone>(items: [T; N]) -> BTreeSet<T> {
    items.into_iter().collect()
}

fn ep(ip: &str, port: i32, ready: bool) -> (String, i32, bool) {
    (ip.into(), port, ready)
}

fn es(
    ip: &str,
    port: i32,
    ready: bool,
    serving: bool,
    term: bool,
) -> (String, i32, bool, bool, bool) {
    (ip.into(), port, ready, serving, term)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_get_endpoints_and_slices_of_their_pods() {
    let server = Server::start();
    let client = server.client().await;

    let a = create_pod(&client, "web-a", &[("http", 8080)]).await;
    create_pod(&client, "web-b", &[("http", 9090)]).await;
    create_pod(&client, "web-c", &[("metrics", 8080)]).await;
    create_pod(&client, "web-d", &[("http", 8080)]).await; // never gets an IP
    set_status(&client, "web-a", "10.42.0.1", true).await;
    set_status(&client, "web-b", "10.42.0.2", false).await;
    set_status(&client, "web-c", "10.42.0.3", true).await;

    // Named targetPort: resolved per pod; web-c lacks the name, web-d has no IP.
    create_service(&client, "web", json!("http"), false).await;
    // Numeric targetPort with publishNotReadyAddresses.
    create_service(&client, "web-all", json!(8080), true).await;

    let want = set([ep("10.42.0.1", 8080, true), ep("10.42.0.2", 9090, false)]);
    wait_for("endpoints of web", TIMEOUT, || async {
        (endpoints(&client, "web").await? == want).then_some(())
    })
    .await;
    let want_all = set([
        ep("10.42.0.1", 8080, true),
        ep("10.42.0.2", 8080, true),
        ep("10.42.0.3", 8080, true),
    ]);
    wait_for("endpoints of web-all", TIMEOUT, || async {
        (endpoints(&client, "web-all").await? == want_all).then_some(())
    })
    .await;

    // Address details: targetRef and nodeName; ports keep their name and protocol.
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), NS);
    let web = eps.get("web").await.expect("endpoints web");
    let subsets = web.subsets.expect("subsets");
    assert_eq!(subsets.len(), 2, "one subset per port set: {subsets:?}");
    let ready = subsets
        .iter()
        .find_map(|s| s.addresses.clone())
        .expect("ready addresses");
    assert_eq!(ready.len(), 1);
    assert_eq!(ready[0].node_name.as_deref(), Some("node-a"));
    let target = ready[0].target_ref.clone().expect("targetRef");
    assert_eq!(target.kind.as_deref(), Some("Pod"));
    assert_eq!(target.name.as_deref(), Some("web-a"));
    assert_eq!(target.namespace.as_deref(), Some(NS));
    assert_eq!(target.uid, a.metadata.uid);
    let port = subsets[0].ports.clone().expect("ports")[0].clone();
    assert_eq!(port.name.as_deref(), Some("http"));
    assert_eq!(port.protocol.as_deref(), Some("TCP"));

    // EndpointSlices: conditions, labels, owner, generateName, named ports.
    let want_slices = set([
        es("10.42.0.1", 8080, true, true, false),
        es("10.42.0.2", 9090, false, false, false),
        es("10.42.0.3", 0, true, true, false),
    ]);
    wait_for("endpointslices of web", TIMEOUT, || async {
        (slices(&client, "web").await == want_slices).then_some(())
    })
    .await;
    let slice_api: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let list = slice_api
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await
        .expect("list slices");
    let svc_uid = Api::<Service>::namespaced(client.clone(), NS)
        .get("web")
        .await
        .expect("service")
        .metadata
        .uid;
    for slice in &list.items {
        assert_eq!(slice.address_type, "IPv4");
        let labels = slice.metadata.labels.clone().expect("labels");
        assert_eq!(
            labels
                .get("endpointslice.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("endpointslice-controller.k8s.io")
        );
        assert!(
            slice
                .metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("web-"))
        );
        let owner = &slice.metadata.owner_references.clone().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Service", "web")
        );
        assert_eq!(Some(owner.uid.clone()), svc_uid);
        assert_eq!(owner.controller, Some(true));
        if let Some(ports) = &slice.ports {
            assert_eq!(ports[0].name.as_deref(), Some("http"));
            assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
        }
        for e in &slice.endpoints {
            assert_eq!(e.node_name.as_deref(), Some("node-a"));
            assert_eq!(
                e.target_ref.as_ref().and_then(|r| r.kind.as_deref()),
                Some("Pod")
            );
        }
    }
    let want_all_slices = set([
        es("10.42.0.1", 8080, true, true, false),
        es("10.42.0.2", 8080, true, true, false),
        es("10.42.0.3", 8080, true, true, false),
    ]);
    wait_for("endpointslices of web-all", TIMEOUT, || async {
        (slices(&client, "web-all").await == want_all_slices).then_some(())
    })
    .await;

    // web-b becomes ready: it moves to addresses / ready=true.
    set_status(&client, "web-b", "10.42.0.2", true).await;
    let want = set([ep("10.42.0.1", 8080, true), ep("10.42.0.2", 9090, true)]);
    wait_for("web-b ready in endpoints", TIMEOUT, || async {
        (endpoints(&client, "web").await? == want).then_some(())
    })
    .await;
    let want_slices = set([
        es("10.42.0.1", 8080, true, true, false),
        es("10.42.0.2", 9090, true, true, false),
        es("10.42.0.3", 0, true, true, false),
    ]);
    wait_for("web-b ready in slices", TIMEOUT, || async {
        (slices(&client, "web").await == want_slices).then_some(())
    })
    .await;

    // Relabelling web-a out of the selectors removes it from the Services it left (the
    // controllers must remember which those were: its new labels match none); labelling
    // it back brings it back.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for (app, want) in [
        ("elsewhere", set([ep("10.42.0.2", 9090, true)])),
        (
            "web",
            set([ep("10.42.0.1", 8080, true), ep("10.42.0.2", 9090, true)]),
        ),
    ] {
        let relabel = json!({"metadata": {"labels": {"app": app}}});
        pods.patch("web-a", &PatchParams::default(), &Patch::Merge(&relabel))
            .await
            .expect("relabel web-a");
        wait_for(
            &format!("web-a labelled app={app} in endpoints"),
            TIMEOUT,
            || async { (endpoints(&client, "web").await? == want).then_some(()) },
        )
        .await;
        wait_for(
            &format!("web-a labelled app={app} in slices"),
            TIMEOUT,
            || async {
                let now = slices(&client, "web")
                    .await
                    .iter()
                    .any(|(ip, ..)| ip == "10.42.0.1");
                (now == (app == "web")).then_some(())
            },
        )
        .await;
    }

    // Deleting web-a (at once) removes it everywhere.
    pods.delete("web-a", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete web-a");
    let want = set([ep("10.42.0.2", 9090, true)]);
    wait_for("web-a gone from endpoints", TIMEOUT, || async {
        (endpoints(&client, "web").await? == want).then_some(())
    })
    .await;
    let want_slices = set([
        es("10.42.0.2", 9090, true, true, false),
        es("10.42.0.3", 0, true, true, false),
    ]);
    wait_for("web-a gone from slices", TIMEOUT, || async {
        (slices(&client, "web").await == want_slices).then_some(())
    })
    .await;

    // A graceful delete of web-b leaves it terminating: out of Endpoints, kept in the
    // slice with ready=false, serving=true, terminating=true.
    pods.delete("web-b", &DeleteParams::default().grace_period(60))
        .await
        .expect("delete web-b");
    wait_for("web-b terminating out of endpoints", TIMEOUT, || async {
        endpoints(&client, "web").await?.is_empty().then_some(())
    })
    .await;
    let want_slices = set([
        es("10.42.0.2", 9090, false, true, true),
        es("10.42.0.3", 0, true, true, false),
    ]);
    wait_for("web-b terminating in slices", TIMEOUT, || async {
        (slices(&client, "web").await == want_slices).then_some(())
    })
    .await;

    // Deleting the service deletes its Endpoints and slices.
    Api::<Service>::namespaced(client.clone(), NS)
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete service");
    wait_for("endpoints of web deleted", TIMEOUT, || async {
        endpoints(&client, "web").await.is_none().then_some(())
    })
    .await;
    wait_for("slices of web deleted", TIMEOUT, || async {
        let list = slice_api
            .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
            .await
            .ok()?;
        list.items.is_empty().then_some(())
    })
    .await;

    // The selector-less `kubernetes` Service's endpoints are the API server's (one
    // slice named after the Service, without the controller's managed-by label), not
    // the EndpointSlice controller's.
    let kubernetes: Vec<EndpointSlice> = slice_api
        .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await
        .expect("list slices")
        .items;
    assert_eq!(kubernetes.len(), 1, "{kubernetes:?}");
    assert_eq!(kubernetes[0].metadata.name.as_deref(), Some("kubernetes"));
    assert!(
        !kubernetes[0]
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("endpointslice.kubernetes.io/managed-by")),
        "the EndpointSlice controller does not manage the kubernetes service"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_namespace_gets_a_default_serviceaccount() {
    let server = Server::start();
    let client = server.client().await;
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        wait_for(
            &format!("default serviceaccount in {ns}"),
            TIMEOUT,
            || async { api.get_opt("default").await.ok()?.map(|_| ()) },
        )
        .await;
    }

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "team-a"}})).expect("namespace");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), "team-a");
    wait_for("default serviceaccount in team-a", TIMEOUT, || async {
        api.get_opt("default").await.ok()?.map(|_| ())
    })
    .await;

    // Deleted, it comes back.
    let first_uid = api.get("default").await.expect("get sa").metadata.uid;
    api.delete("default", &DeleteParams::default())
        .await
        .expect("delete serviceaccount");
    wait_for("default serviceaccount re-created", TIMEOUT, || async {
        let sa = api.get_opt("default").await.ok()??;
        (sa.metadata.uid != first_uid).then_some(())
    })
    .await;
}
