//! A hostile Service cannot take Service rules down (issue 22's scenario), as root:
//!
//! 1. A user with only the `edit` role in one namespace creates Services with hostile port
//!    names, protocols and external IPs: each is refused with a 422 naming the field, as
//!    kube-apiserver refuses it.
//! 2. Services that bypassed validation (written straight into the store while the server
//!    was stopped, as an older release or a damaged backup could have left them) are
//!    skipped by the proxy, which keeps programming every other Service: checked in the
//!    kernel's ruleset of a network namespace of the test's own.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use support::Server;

const SERVICE_CIDR: &str = "10.97.0.0/24";
const SERVER_ARGS: [&str; 4] = [
    "--service-cidr",
    SERVICE_CIDR,
    "--cluster-dns",
    "10.97.0.10",
];

/// A network namespace for the proxy's rules; removed on drop.
struct Netns(String);

impl Netns {
    fn create() -> Netns {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "tests/hostile_services.rs needs root (network namespaces, nftables)"
        );
        let name = format!("k3rsh{}", std::process::id());
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .expect("ip (install iproute2)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Netns(name)
    }

    fn ruleset(&self) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0, "nft", "list", "ruleset"])
            .output()
            .expect("nft (install nftables)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn service(name: &str, ports: Value, extra: Value) -> Service {
    let mut spec = json!({"ports": ports});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("service")
}

/// The hostile Services a namespace editor tries, and the field kube names for each.
fn hostile_creates() -> Vec<(Service, &'static str)> {
    let http = json!({"name": "http", "port": 80});
    vec![
        (
            service(
                "multibyte",
                json!([http, {"name": "é".repeat(150), "port": 81}]),
                json!({}),
            ),
            "spec.ports[1].name",
        ),
        (
            service(
                "underscore",
                json!([http, {"name": "Web_1", "port": 81}]),
                json!({}),
            ),
            "spec.ports[1].name",
        ),
        (
            service(
                "semicolon",
                json!([http, {"name": "a;b", "port": 81}]),
                json!({}),
            ),
            "spec.ports[1].name",
        ),
        (
            service(
                "newline",
                json!([http, {"name": "x\n}\ntable ip evil {", "port": 81}]),
                json!({}),
            ),
            "spec.ports[1].name",
        ),
        (
            service(
                "long",
                json!([http, {"name": "x".repeat(10_000), "port": 81}]),
                json!({}),
            ),
            "spec.ports[1].name",
        ),
        (
            service(
                "protocol",
                json!([{"name": "p", "port": 80, "protocol": "ICMP"}]),
                json!({}),
            ),
            "spec.ports[0].protocol",
        ),
        (
            service(
                "external",
                json!([http]),
                json!({"externalIPs": ["1.2.3.4; drop"]}),
            ),
            "spec.externalIPs[0]",
        ),
        (
            service(
                "target",
                json!([{"name": "t", "port": 80, "targetPort": "a}b"}]),
                json!({}),
            ),
            "spec.ports[0].targetPort",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_services_are_refused_and_stored_ones_are_skipped() {
    let netns = Netns::create();
    let server = Server::start_with(&SERVER_ARGS);
    let admin = server.client().await;

    // jane may edit namespace `team` and nothing else.
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).expect("ns"),
        )
        .await
        .expect("namespace");
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), "team");
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "jane-edit"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "jane"}]
            }))
            .expect("binding"),
        )
        .await
        .expect("role binding");
    let jane = support::client_as(&server, "jane").await;
    let team: Api<Service> = Api::namespaced(jane.clone(), "team");
    // The binding takes effect a moment after its write.
    let deadline = Instant::now() + Duration::from_secs(10);
    while team.list(&Default::default()).await.is_err() {
        assert!(Instant::now() < deadline, "jane never got the edit role");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    for (svc, field) in hostile_creates() {
        let name = svc.metadata.name.clone().unwrap_or_default();
        match team.create(&PostParams::default(), &svc).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{name}: {status:?}");
                assert_eq!(status.reason, "Invalid", "{name}: {status:?}");
                assert!(
                    status.message.contains(&format!("{field}: ")),
                    "{name}: expected a cause at {field}: {status:?}"
                );
            }
            other => panic!("{name}: expected a 422, got {other:?}"),
        }
    }
    assert!(
        team.list(&Default::default())
            .await
            .expect("list")
            .items
            .is_empty(),
        "nothing hostile was stored"
    );

    // Services that bypassed validation: written into the store of the stopped server.
    let hostile = [
        ("evil-multibyte", "10.97.0.50", "é".repeat(150)),
        (
            "evil-newline",
            "10.97.0.51",
            "x\n}\ntable ip evil {".to_string(),
        ),
        ("evil-semicolon", "10.97.0.52", "a;b".to_string()),
        ("evil-long", "10.97.0.53", "y".repeat(10_000)),
    ];
    let objects: Vec<(String, Value)> = hostile
        .into_iter()
        .map(|(name, ip, port_name)| {
            let object = json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}"),
                    "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
                    "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80},
                              {"name": port_name, "port": 81, "protocol": "TCP", "targetPort": 81}]}
            });
            (format!("/registry/services/team/{name}"), object)
        })
        .collect();
    let dir = support::stop_and_write_past_validation(server, &objects).await;
    let server = Server::start_in(dir, &SERVER_ARGS);
    let admin = server.client().await;

    let mut config = k3rs::proxy::Config::new(
        "node-1",
        vec!["10.97.64.2".parse().expect("node ip")],
        vec!["10.97.128.0/17".to_string()],
    );
    config.netns = Some(netns.0.clone());
    config.min_sync_interval = Duration::from_millis(200);
    let proxy = tokio::spawn(k3rs::proxy::run(admin.clone(), config));

    let team_admin: Api<Service> = Api::namespaced(admin.clone(), "team");
    let created = team_admin
        .create(
            &PostParams::default(),
            &service("good", json!([{"name": "http", "port": 80}]), json!({})),
        )
        .await
        .expect("a valid Service");
    let good_ip = created
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("clusterIP allocated");
    let wait_for = |what: &str, ip: String| {
        let what = what.to_string();
        let ns = &netns;
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let rules = ns.ruleset();
                if rules.contains(&ip) {
                    return rules;
                }
                assert!(
                    Instant::now() < deadline,
                    "{what} ({ip}) never reached the kernel:\n{rules}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let rules = wait_for("the valid Service", good_ip).await;
    // The hostile Services' valid ports are programmed, their hostile ports are not, and no
    // byte of their names reached the script.
    for ip in ["10.97.0.50", "10.97.0.51", "10.97.0.52", "10.97.0.53"] {
        assert!(
            rules.contains(&format!("{ip} . tcp . 80 ")),
            "{ip}:\n{rules}"
        );
        assert!(
            !rules.contains(&format!("{ip} . tcp . 81 ")),
            "{ip} port 81:\n{rules}"
        );
    }
    assert!(
        !rules.contains("table ip evil") && !rules.contains('é') && !rules.contains("a;b"),
        "{rules}"
    );
    // The proxy keeps syncing after them.
    let later = team_admin
        .create(
            &PostParams::default(),
            &service("later", json!([{"name": "http", "port": 8080}]), json!({})),
        )
        .await
        .expect("another valid Service");
    wait_for(
        "a Service created after the hostile ones",
        later.spec.and_then(|s| s.cluster_ip).expect("clusterIP"),
    )
    .await;
    assert!(!proxy.is_finished(), "the proxy must keep running");
    proxy.abort();
}
