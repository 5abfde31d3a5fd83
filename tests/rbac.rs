//! Authorization through the real binary and the real kubectl: users with client
//! certificates the test signs with the cluster's client CA are forbidden until RBAC grants
//! them something, with kube-apiserver's 403 wording; bindings to users, groups and
//! aggregated ClusterRoles take effect; `kubectl auth can-i` (and `--list`) and
//! `kubectl auth whoami` answer from the authorizer; node credentials get the Node rules.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use support::Server;

/// Writes a kubeconfig for `user` in `groups`, signed by the server's client CA.
fn kubeconfig_for(server: &Server, user: &str, groups: &[&str]) -> PathBuf {
    let tls = server.dir.path().join("data/server/tls");
    let read = |name: &str| {
        std::fs::read_to_string(tls.join(name)).unwrap_or_else(|e| panic!("reading {name}: {e}"))
    };
    let client_ca = k3rs::pki::CertificateAuthority::from_pem(
        &read("client-ca.crt"),
        &read("client-ca.key"),
        &tls,
    )
    .expect("client CA");
    let issued = client_ca
        .issue_client_cert(user, groups)
        .expect("client certificate");
    let yaml = k3rs::pki::render_kubeconfig(&server.url(), &read("server-ca.crt"), &issued)
        .expect("kubeconfig");
    let path = server
        .dir
        .path()
        .join(format!("{}.kubeconfig", user.replace(':', "-")));
    std::fs::write(&path, yaml).expect("write kubeconfig");
    path
}

fn kubectl_as(server: &Server, kubeconfig: &Path, args: &[&str]) -> Output {
    std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("KUBECACHEDIR", server.dir.path().join("kubecache-user"))
        .output()
        .expect("run kubectl (install kubectl)")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Retries `check` for a few seconds: RBAC changes reach the authorizer through the watch
/// cache, a moment after the write returns (as with kube-apiserver's informers).
fn eventually(what: &str, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match check() {
            Ok(()) => return,
            Err(e) if Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn admin(server: &Server, args: &[&str]) -> String {
    let out = server.kubectl_with(Path::new("kubectl"), args, None);
    assert!(out.status.success(), "kubectl {args:?}: {}", text(&out));
    text(&out)
}

#[test]
fn rbac_denies_until_granted_and_kubectl_auth_agrees() {
    let server = Server::start();
    let jane = kubeconfig_for(&server, "jane", &["devs"]);

    // The defaults exist, as on any Kubernetes cluster.
    let roles = admin(&server, &["get", "clusterroles", "-o", "name"]);
    for role in ["cluster-admin", "admin", "edit", "view", "system:discovery"] {
        assert!(
            roles.contains(&format!("clusterrole.rbac.authorization.k8s.io/{role}\n")),
            "{role} missing from {roles}"
        );
    }

    // Nothing granted: discovery works, reading pods does not.
    let out = kubectl_as(&server, &jane, &["get", "pods"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(
            "Error from server (Forbidden): pods is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        ),
        "{}",
        text(&out)
    );
    let out = kubectl_as(&server, &jane, &["auth", "can-i", "list", "pods"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    assert_eq!(out.status.code(), Some(1));
    let out = kubectl_as(&server, &jane, &["get", "--raw", "/metrics"]);
    assert!(
        text(&out).contains("forbidden: User \\\"jane\\\" cannot get path \\\"/metrics\\\"")
            || text(&out).contains("forbidden: User \"jane\" cannot get path \"/metrics\""),
        "{}",
        text(&out)
    );

    // whoami reports the certificate's user and groups.
    let out = kubectl_as(&server, &jane, &["auth", "whoami", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let review: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(review["status"]["userInfo"]["username"], "jane");
    let groups = review["status"]["userInfo"]["groups"].to_string();
    assert!(
        groups.contains("devs") && groups.contains("system:authenticated"),
        "{groups}"
    );

    // A RoleBinding to `view` in default: pods readable there, secrets and other
    // namespaces still not.
    admin(
        &server,
        &[
            "create",
            "rolebinding",
            "jane-view",
            "--clusterrole=view",
            "--user=jane",
            "-n",
            "default",
        ],
    );
    eventually("view takes effect", || {
        let out = kubectl_as(&server, &jane, &["get", "pods", "-n", "default"]);
        out.status.success().then_some(()).ok_or_else(|| text(&out))
    });
    let out = kubectl_as(&server, &jane, &["get", "secrets", "-n", "default"]);
    assert!(
        text(&out).contains("cannot list resource \"secrets\""),
        "{}",
        text(&out)
    );
    let out = kubectl_as(&server, &jane, &["get", "pods", "-n", "kube-system"]);
    assert!(
        text(&out).contains("in the namespace \"kube-system\""),
        "{}",
        text(&out)
    );
    let out = kubectl_as(
        &server,
        &jane,
        &["auth", "can-i", "list", "pods", "-n", "default"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "yes",
        "{}",
        text(&out)
    );
    assert!(out.status.success());
    let out = kubectl_as(
        &server,
        &jane,
        &["auth", "can-i", "--list", "-n", "default"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("pods "), "{}", text(&out));

    // A ClusterRoleBinding to the group: edit everywhere.
    admin(
        &server,
        &[
            "create",
            "clusterrolebinding",
            "devs-edit",
            "--clusterrole=edit",
            "--group=devs",
        ],
    );
    eventually("edit for the group takes effect", || {
        let out = kubectl_as(
            &server,
            &jane,
            &[
                "create",
                "configmap",
                "from-jane",
                "-n",
                "kube-public",
                "--from-literal=a=b",
            ],
        );
        out.status.success().then_some(()).ok_or_else(|| text(&out))
    });
    let out = kubectl_as(&server, &jane, &["delete", "namespace", "kube-public"]);
    assert!(
        text(&out).contains("namespaces \"kube-public\" is forbidden: User \"jane\" cannot delete resource \"namespaces\" in API group \"\" at the cluster scope"),
        "{}",
        text(&out)
    );

    // Aggregation: a ClusterRole labelled aggregate-to-view extends view (and so edit).
    admin(
        &server,
        &[
            "create",
            "clusterrole",
            "widget-reader",
            "--verb=get,list",
            "--resource=nodes",
        ],
    );
    admin(
        &server,
        &[
            "label",
            "clusterrole",
            "widget-reader",
            "rbac.authorization.k8s.io/aggregate-to-view=true",
        ],
    );
    eventually("aggregated rule reaches edit", || {
        let out = kubectl_as(&server, &jane, &["auth", "can-i", "list", "nodes"]);
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (answer == "yes").then_some(()).ok_or_else(|| text(&out))
    });
}

#[test]
fn node_credentials_get_the_node_rules_only() {
    let server = Server::start();
    let node = kubeconfig_for(&server, "system:node:worker-1", &["system:nodes"]);
    let out = kubectl_as(&server, &node, &["get", "nodes"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl_as(&server, &node, &["get", "configmaps", "-A"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl_as(&server, &node, &["create", "namespace", "from-a-node"]);
    assert!(
        text(&out).contains("User \"system:node:worker-1\" cannot create resource \"namespaces\""),
        "{}",
        text(&out)
    );
    // A user in no useful group: not even nodes.
    let nobody = kubeconfig_for(&server, "nobody", &[]);
    let out = kubectl_as(&server, &nobody, &["get", "nodes"]);
    assert!(
        text(&out).contains("cannot list resource \"nodes\""),
        "{}",
        text(&out)
    );
    // SubjectAccessReview (what webhooks and proxies use) answers for someone else.
    let review = r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"system:kube-scheduler","resourceAttributes":{"verb":"create","resource":"pods","subresource":"binding","namespace":"default"}}}"#;
    let path = server.dir.path().join("sar.json");
    std::fs::write(&path, review).expect("write");
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["create", "-f", path.to_str().expect("path"), "-o", "json"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(answer["status"]["allowed"], true, "{answer}");
}

#[test]
fn impersonation_needs_the_impersonate_verb() {
    let server = Server::start();
    let kubectl = |args: &[&str]| server.kubectl_with(Path::new("kubectl"), args, None);
    // The admin may impersonate anyone; the impersonated user gets its own rights.
    let out = kubectl(&["get", "pods", "--as=bob"]);
    assert!(
        text(&out).contains("User \"bob\" cannot list resource \"pods\""),
        "{}",
        text(&out)
    );
    let out = kubectl(&["get", "pods", "--as=bob", "--as-group=system:masters"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl(&[
        "auth",
        "can-i",
        "list",
        "pods",
        "--as=system:serviceaccount:default:default",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "no",
        "{}",
        text(&out)
    );
    // A user without `impersonate` may not.
    let jane = kubeconfig_for(&server, "jane", &[]);
    let out = kubectl_as(
        &server,
        &jane,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods",
            "--as=admin",
        ],
    );
    assert!(
        text(&out).contains("users \"admin\" is forbidden: User \"jane\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"),
        "{}",
        text(&out)
    );
}

#[test]
fn rbac_writes_cannot_grant_more_than_the_writer_holds() {
    let server = Server::start();
    admin(&server, &["create", "namespace", "team"]);
    admin(
        &server,
        &[
            "create",
            "rolebinding",
            "lead-admin",
            "--clusterrole=admin",
            "--user=lead",
            "-n",
            "team",
        ],
    );
    let lead = kubeconfig_for(&server, "lead", &[]);
    eventually("admin in team takes effect", || {
        let out = kubectl_as(
            &server,
            &lead,
            &[
                "create",
                "role",
                "pod-reader",
                "--verb=get,list",
                "--resource=pods",
                "-n",
                "team",
            ],
        );
        out.status.success().then_some(()).ok_or_else(|| text(&out))
    });
    // Nodes are not the lead's to give.
    let out = kubectl_as(
        &server,
        &lead,
        &[
            "create",
            "role",
            "node-reader",
            "--verb=list",
            "--resource=nodes",
            "-n",
            "team",
        ],
    );
    assert!(
        text(&out).contains("roles.rbac.authorization.k8s.io \"node-reader\" is forbidden: user \"lead\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held"),
        "{}",
        text(&out)
    );
    // Binding what the lead holds works; binding cluster-admin does not.
    let out = kubectl_as(
        &server,
        &lead,
        &[
            "create",
            "rolebinding",
            "dev-view",
            "--clusterrole=view",
            "--user=dev",
            "-n",
            "team",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl_as(
        &server,
        &lead,
        &[
            "create",
            "rolebinding",
            "dev-root",
            "--clusterrole=cluster-admin",
            "--user=dev",
            "-n",
            "team",
        ],
    );
    assert!(
        text(&out).contains("rolebindings.rbac.authorization.k8s.io \"dev-root\" is forbidden"),
        "{}",
        text(&out)
    );
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["get", "rolebindings", "-n", "team", "-o", "name"],
        None,
    );
    assert!(!text(&out).contains("dev-root"), "{}", text(&out));
}
