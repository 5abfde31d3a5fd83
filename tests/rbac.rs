//! Authorization through the real binary and the real kubectl: users with client
//! certificates the test signs with the cluster's client CA are forbidden until RBAC grants
//! them something, with kube-apiserver's 403 wording; bindings to users, groups and
//! aggregated ClusterRoles take effect; `kubectl auth can-i` (and `--list`) and
//! `kubectl auth whoami` answer from the authorizer; node credentials get the Node rules,
//! narrowed by the Node authorizer and NodeRestriction to the objects of their own pods.

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
    // The Node authorizer: configmaps only one by one, and only those its pods use.
    let out = kubectl_as(&server, &node, &["get", "configmaps", "-A"]);
    assert!(
        text(&out).contains("User \"system:node:worker-1\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope: can only read namespaced object of this type"),
        "{}",
        text(&out)
    );
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

/// Runs kubectl as `kubeconfig` with `stdin` as the input of `-f -`.
fn kubectl_as_with_input(server: &Server, kubeconfig: &Path, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("KUBECACHEDIR", server.dir.path().join("kubecache-user"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kubectl (install kubectl)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("kubectl output")
}

fn assert_denied(out: &Output, message: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", text(out));
    // kubectl puts `error when creating "STDIN": ` between the two for `create -f`.
    assert!(
        text(out).contains("Error from server (Forbidden): ") && text(out).contains(message),
        "want {message:?}, got: {}",
        text(out)
    );
}

#[test]
fn node_authorizer_limits_a_node_to_the_objects_of_its_own_pods() {
    let server = Server::start();
    let node = kubeconfig_for(&server, "system:node:worker-1", &["system:nodes"]);
    // Two pods bound to two nodes (stored directly: no kubelet runs them), each using
    // its own secret and configmap.
    let objects = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Secret, metadata: {name: mine}, stringData: {k: v}}
- {apiVersion: v1, kind: Secret, metadata: {name: theirs}, stringData: {k: v}}
- {apiVersion: v1, kind: Secret, metadata: {name: pull-mine}, stringData: {k: v}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: env-mine}, data: {k: v}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: env-theirs}, data: {k: v}}
- apiVersion: v1
  kind: Pod
  metadata: {name: on-worker-1}
  spec:
    nodeName: worker-1
    imagePullSecrets: [{name: pull-mine}]
    containers:
    - name: c
      image: busybox
      envFrom: [{configMapRef: {name: env-mine}}]
    volumes: [{name: s, secret: {secretName: mine}}]
- apiVersion: v1
  kind: Pod
  metadata: {name: on-worker-2}
  spec:
    nodeName: worker-2
    containers:
    - name: c
      image: busybox
      env: [{name: X, valueFrom: {configMapKeyRef: {name: env-theirs, key: k}}}]
    volumes: [{name: s, secret: {secretName: theirs}}]
"#;
    let out = server.kubectl_with(Path::new("kubectl"), &["apply", "-f", "-"], Some(objects));
    assert!(out.status.success(), "{}", text(&out));

    // Reads: what its pod references, by get or by a single-name list; nothing else.
    for (kind, name) in [
        ("secret", "mine"),
        ("secret", "pull-mine"),
        ("configmap", "env-mine"),
    ] {
        let out = kubectl_as(&server, &node, &["get", kind, name, "-o", "name"]);
        assert!(out.status.success(), "get {kind} {name}: {}", text(&out));
    }
    let out = kubectl_as(
        &server,
        &node,
        &[
            "get",
            "secrets",
            "--field-selector",
            "metadata.name=mine",
            "-o",
            "name",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "secret/mine");
    let out = kubectl_as(&server, &node, &["get", "secret", "theirs"]);
    assert_denied(
        &out,
        "secrets \"theirs\" is forbidden: User \"system:node:worker-1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\": no relationship found between node 'worker-1' and this object",
    );
    let out = kubectl_as(&server, &node, &["get", "configmap", "env-theirs"]);
    assert_denied(
        &out,
        "configmaps \"env-theirs\" is forbidden: User \"system:node:worker-1\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\": no relationship found between node 'worker-1' and this object",
    );
    let out = kubectl_as(&server, &node, &["get", "secrets"]);
    assert_denied(
        &out,
        "secrets is forbidden: User \"system:node:worker-1\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\": No Object name found",
    );
    // Writes to secrets are never a node's.
    let out = kubectl_as(&server, &node, &["delete", "secret", "mine"]);
    assert_denied(
        &out,
        "secrets \"mine\" is forbidden: User \"system:node:worker-1\" cannot delete resource \"secrets\" in API group \"\" in the namespace \"default\": can only read resources of this type",
    );

    // When the other pod moves to this node (a new pod, as pods do not move), its
    // objects become readable.
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &[
            "delete",
            "pod",
            "on-worker-2",
            "--grace-period=0",
            "--force",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    let moved = r#"
apiVersion: v1
kind: Pod
metadata: {name: moved-to-worker-1}
spec:
  nodeName: worker-1
  containers:
  - name: c
    image: busybox
    env: [{name: X, valueFrom: {configMapKeyRef: {name: env-theirs, key: k}}}]
  volumes: [{name: s, secret: {secretName: theirs}}]
"#;
    let out = server.kubectl_with(Path::new("kubectl"), &["apply", "-f", "-"], Some(moved));
    assert!(out.status.success(), "{}", text(&out));
    eventually(
        "the moved pod's secret and configmap become readable",
        || {
            for (kind, name) in [("secret", "theirs"), ("configmap", "env-theirs")] {
                let out = kubectl_as(&server, &node, &["get", kind, name, "-o", "name"]);
                if !out.status.success() {
                    return Err(text(&out));
                }
            }
            Ok(())
        },
    );

    // Its own Node: create and patch; another node's: neither.
    let node_object = |name: &str| {
        format!("{{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{{\"name\":\"{name}\"}}}}")
    };
    let out = kubectl_as_with_input(
        &server,
        &node,
        &["create", "-f", "-"],
        &node_object("worker-1"),
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl_as_with_input(
        &server,
        &node,
        &["create", "-f", "-"],
        &node_object("worker-2"),
    );
    assert_denied(
        &out,
        "nodes \"worker-2\" is forbidden: node \"worker-1\" is not allowed to modify node \"worker-2\"",
    );
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["create", "-f", "-"],
        Some(&node_object("worker-2")),
    );
    assert!(out.status.success(), "{}", text(&out));
    let label = r#"{"metadata":{"labels":{"team":"a"}}}"#;
    let out = kubectl_as(&server, &node, &["patch", "node", "worker-1", "-p", label]);
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl_as(&server, &node, &["patch", "node", "worker-2", "-p", label]);
    assert_denied(
        &out,
        "nodes \"worker-2\" is forbidden: node \"worker-1\" is not allowed to modify node \"worker-2\"",
    );
    let out = kubectl_as(
        &server,
        &node,
        &[
            "patch",
            "node",
            "worker-2",
            "--subresource=status",
            "-p",
            r#"{"status":{"phase":"Running"}}"#,
        ],
    );
    assert_denied(
        &out,
        "nodes \"worker-2\" is forbidden: node \"worker-1\" is not allowed to modify node \"worker-2\"",
    );
    // Reading nodes stays cluster-wide (kube-proxy, DNS and the pod network need it).
    let out = kubectl_as(&server, &node, &["get", "nodes", "-o", "name"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("node/worker-2"));

    // Pod status only of its own pods; no pods of its own making but mirror pods.
    let status = r#"{"status":{"message":"from worker-1"}}"#;
    let out = kubectl_as(
        &server,
        &node,
        &[
            "patch",
            "pod",
            "on-worker-1",
            "--subresource=status",
            "-p",
            status,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let other = r#"
apiVersion: v1
kind: Pod
metadata: {name: elsewhere}
spec: {nodeName: worker-2, containers: [{name: c, image: busybox}]}
"#;
    let out = server.kubectl_with(Path::new("kubectl"), &["apply", "-f", "-"], Some(other));
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl_as(
        &server,
        &node,
        &[
            "patch",
            "pod",
            "elsewhere",
            "--subresource=status",
            "-p",
            status,
        ],
    );
    assert_denied(
        &out,
        "pods \"elsewhere\" is forbidden: node \"worker-1\" can only update pod status for pods with spec.nodeName set to itself",
    );
    let out = kubectl_as(&server, &node, &["delete", "pod", "elsewhere"]);
    assert_denied(
        &out,
        "pods \"elsewhere\" is forbidden: node \"worker-1\" can only delete pods with spec.nodeName set to itself",
    );
    let own = other
        .replace("elsewhere", "made-by-node")
        .replace("worker-2", "worker-1");
    let out = kubectl_as_with_input(&server, &node, &["create", "-f", "-"], &own);
    assert_denied(
        &out,
        "pods \"made-by-node\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" annotation, node \"worker-1\" can only create mirror pods",
    );

    // Leases: its own, in kube-node-lease.
    let lease = |name: &str| {
        format!(
            "{{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{{\"name\":\"{name}\",\"namespace\":\"kube-node-lease\"}},\"spec\":{{\"holderIdentity\":\"{name}\"}}}}"
        )
    };
    let out = kubectl_as_with_input(&server, &node, &["create", "-f", "-"], &lease("worker-1"));
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl_as_with_input(&server, &node, &["create", "-f", "-"], &lease("worker-2"));
    assert_denied(
        &out,
        "leases.coordination.k8s.io \"worker-2\" is forbidden: can only access node lease with the same name as the requesting node",
    );
}

/// The scheduler runs inside the server on an in-process transport, but it is still an API
/// client under RBAC: without its ClusterRoleBinding its bindings are forbidden and pods stay
/// pending; with the binding back, they get scheduled.
#[test]
fn the_in_process_scheduler_is_authorized_as_its_own_user() {
    let server = Server::start();
    let node = r#"{"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "fake-1", "labels": {"kubernetes.io/hostname": "fake-1"}}}"#;
    let out = server.kubectl_with(Path::new("kubectl"), &["create", "-f", "-"], Some(node));
    assert!(out.status.success(), "create node: {}", text(&out));
    let status = r#"{"status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "fake", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}"#;
    admin(
        &server,
        &[
            "patch",
            "node",
            "fake-1",
            "--subresource=status",
            "--type=merge",
            "-p",
            status,
        ],
    );
    admin(
        &server,
        &["delete", "clusterrolebinding", "system:kube-scheduler"],
    );
    // Give the authorizer a moment to see the deletion (it follows the watch cache).
    eventually("the scheduler loses its rights", || {
        let out = server.kubectl_with(
            Path::new("kubectl"),
            &[
                "auth",
                "can-i",
                "create",
                "pods/binding",
                "--as",
                "system:kube-scheduler",
            ],
            None,
        );
        match String::from_utf8_lossy(&out.stdout).trim() {
            "no" => Ok(()),
            _ => Err(text(&out)),
        }
    });
    let pod = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waits"},
        "spec": {"containers": [{"name": "c", "image": "pause"}]}}"#;
    let out = server.kubectl_with(Path::new("kubectl"), &["create", "-f", "-"], Some(pod));
    assert!(out.status.success(), "create pod: {}", text(&out));
    let node_of = || {
        let out = server.kubectl_with(
            Path::new("kubectl"),
            &["get", "pod", "waits", "-o", "jsonpath={.spec.nodeName}"],
            None,
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(node_of(), "", "bound without the right to bind");
    admin(
        &server,
        &[
            "create",
            "clusterrolebinding",
            "system:kube-scheduler",
            "--clusterrole=system:kube-scheduler",
            "--user=system:kube-scheduler",
        ],
    );
    // The failed bind backs off (at most 10 s) and the Lease may need renewing first.
    let deadline = Instant::now() + Duration::from_secs(60);
    while node_of() != "fake-1" {
        assert!(
            Instant::now() < deadline,
            "the pod was not bound once the scheduler was allowed to bind"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The JSON a kubectl command printed (stdout).
fn json_out(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(out)))
}

#[test]
fn node_restriction_keeps_a_node_from_relabelling_or_untainting_itself() {
    // No node IPAM: the test gives the node its podCIDR itself.
    let server = Server::start_with(&["--disable-controller-manager"]);
    let node = kubeconfig_for(&server, "system:node:worker-1", &["system:nodes"]);
    // Registering: only labels a kubelet may set; taints at creation are the kubelet's own
    // (--register-with-taints).
    let register = |labels: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: worker-1\n  labels: {labels}\n\
             spec:\n  taints: [{{key: dedicated, value: gpu, effect: NoSchedule}}]\n"
        )
    };
    let out = kubectl_as_with_input(
        &server,
        &node,
        &["create", "-f", "-"],
        &register(
            "{kubernetes.io/hostname: worker-1, node-restriction.kubernetes.io/pool: a, node-role.kubernetes.io/worker: \"true\"}",
        ),
    );
    assert_denied(
        &out,
        "nodes \"worker-1\" is forbidden: node \"worker-1\" is not allowed to set the following labels: node-restriction.kubernetes.io/pool, node-role.kubernetes.io/worker",
    );
    let out = kubectl_as_with_input(
        &server,
        &node,
        &["create", "-f", "-"],
        &register(
            "{kubernetes.io/hostname: worker-1, topology.kubernetes.io/zone: z1, node.kubernetes.io/instance-type: k3rs, disk: ssd}",
        ),
    );
    assert!(out.status.success(), "{}", text(&out));
    // An administrator pins the node to a pool and gives it a podCIDR and providerID.
    admin(
        &server,
        &[
            "label",
            "node",
            "worker-1",
            "node-restriction.kubernetes.io/pool=a",
        ],
    );
    admin(
        &server,
        &[
            "patch",
            "node",
            "worker-1",
            "-p",
            r#"{"spec":{"podCIDR":"10.42.7.0/24","podCIDRs":["10.42.7.0/24"],"providerID":"k3rs://worker-1"}}"#,
        ],
    );

    // The node may change its own ordinary and kubelet labels...
    for label in [
        "disk=nvme",
        "topology.kubernetes.io/zone=z2",
        "kubelet.kubernetes.io/x=y",
    ] {
        let out = kubectl_as(
            &server,
            &node,
            &["label", "--overwrite", "node", "worker-1", label],
        );
        assert!(out.status.success(), "{label}: {}", text(&out));
    }
    // ...but not add, change or remove node-restriction labels, nor other kubernetes.io ones.
    for (label, key) in [
        (
            "node-restriction.kubernetes.io/pool=b",
            "node-restriction.kubernetes.io/pool",
        ),
        (
            "node-restriction.kubernetes.io/pool-",
            "node-restriction.kubernetes.io/pool",
        ),
        (
            "node-restriction.kubernetes.io/gpu=yes",
            "node-restriction.kubernetes.io/gpu",
        ),
        (
            "node-role.kubernetes.io/control-plane=true",
            "node-role.kubernetes.io/control-plane",
        ),
    ] {
        let out = kubectl_as(
            &server,
            &node,
            &["label", "--overwrite", "node", "worker-1", label],
        );
        assert_denied(
            &out,
            &format!("nodes \"worker-1\" is forbidden: is not allowed to modify labels: {key}"),
        );
    }
    // Its taints are not its own to drop, change or add to.
    for args in [
        &["taint", "node", "worker-1", "dedicated-"][..],
        &[
            "taint",
            "node",
            "worker-1",
            "dedicated=cpu:NoSchedule",
            "--overwrite",
        ],
        &["taint", "node", "worker-1", "extra=1:NoExecute"],
    ] {
        let out = kubectl_as(&server, &node, args);
        assert_denied(
            &out,
            "nodes \"worker-1\" is forbidden: node \"worker-1\" is not allowed to modify taints",
        );
    }
    // A merge patch straight to the API is refused the same way.
    let out = kubectl_as(
        &server,
        &node,
        &[
            "patch",
            "node",
            "worker-1",
            "-p",
            r#"{"spec":{"taints":null}}"#,
        ],
    );
    assert_denied(
        &out,
        "nodes \"worker-1\" is forbidden: node \"worker-1\" is not allowed to modify taints",
    );
    // podCIDR and providerID are fixed once set.
    let out = kubectl_as(
        &server,
        &node,
        &[
            "patch",
            "node",
            "worker-1",
            "-p",
            r#"{"spec":{"podCIDR":"10.42.9.0/24","podCIDRs":["10.42.9.0/24"]}}"#,
        ],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).contains("node updates may not change podCIDR except from \"\" to valid"),
        "{}",
        text(&out)
    );
    let out = kubectl_as(
        &server,
        &node,
        &[
            "patch",
            "node",
            "worker-1",
            "-p",
            r#"{"spec":{"providerID":"k3rs://elsewhere"}}"#,
        ],
    );
    assert!(
        text(&out).contains("node updates may not change providerID except from \"\" to valid"),
        "{}",
        text(&out)
    );
    // Another node's anything is off limits.
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["create", "-f", "-"],
        Some("apiVersion: v1\nkind: Node\nmetadata: {name: worker-2}\n"),
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl_as(&server, &node, &["label", "node", "worker-2", "disk=ssd"]);
    assert_denied(
        &out,
        "nodes \"worker-2\" is forbidden: node \"worker-1\" is not allowed to modify node \"worker-2\"",
    );
    // Nothing the node was refused landed.
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["get", "node", "worker-1", "-o", "json"],
        None,
    );
    let stored = json_out(&out);
    let labels = &stored["metadata"]["labels"];
    assert_eq!(labels["node-restriction.kubernetes.io/pool"], "a");
    assert_eq!(labels["disk"], "nvme");
    assert!(
        labels
            .get("node-role.kubernetes.io/control-plane")
            .is_none()
    );
    assert_eq!(
        stored["spec"]["taints"],
        serde_json::json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    );
    assert_eq!(stored["spec"]["podCIDR"], "10.42.7.0/24");
    assert_eq!(stored["spec"]["providerID"], "k3rs://worker-1");
    // The administrator still may.
    admin(&server, &["taint", "node", "worker-1", "dedicated-"]);
    admin(
        &server,
        &[
            "label",
            "node",
            "worker-1",
            "node-restriction.kubernetes.io/pool-",
        ],
    );
}

/// A TokenRequest body for `pod` (name, uid) bound as given, or unbound.
fn token_request(bound: Option<(&str, &str)>, seconds: i64) -> String {
    let mut spec = serde_json::json!({"audiences": [], "expirationSeconds": seconds});
    if let Some((name, uid)) = bound {
        spec["boundObjectRef"] =
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid});
    }
    serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        .to_string()
}

#[test]
fn node_restriction_binds_a_nodes_tokens_to_its_own_pods_and_tokens_are_capped() {
    let server = Server::start_with(&[
        "--kube-apiserver-arg",
        "service-account-max-token-expiration=2h",
    ]);
    server.wait_default_service_account("default");
    let node = kubeconfig_for(&server, "system:node:worker-1", &["system:nodes"]);
    let pods = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Pod, metadata: {name: mine}, spec: {nodeName: worker-1, containers: [{name: c, image: busybox}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: theirs}, spec: {nodeName: worker-2, containers: [{name: c, image: busybox}]}}
"#;
    let out = server.kubectl_with(Path::new("kubectl"), &["apply", "-f", "-"], Some(pods));
    assert!(out.status.success(), "{}", text(&out));
    let uid = |pod: &str| {
        admin(
            &server,
            &["get", "pod", pod, "-o", "jsonpath={.metadata.uid}"],
        )
        .trim()
        .to_string()
    };
    let (mine, theirs) = (uid("mine"), uid("theirs"));
    let path = "/api/v1/namespaces/default/serviceaccounts/default/token";
    let request = |who: &Path, body: String| {
        let file = server.dir.path().join("token-request.json");
        std::fs::write(&file, body).expect("write request");
        kubectl_as(
            &server,
            who,
            &["create", "--raw", path, "-f", &file.to_string_lossy()],
        )
    };
    for (bound, message) in [
        (None, "node requested token not bound to a pod"),
        (
            Some(("mine", "")),
            "node requested token with a pod binding without a uid",
        ),
        (
            Some(("theirs", theirs.as_str())),
            "node requested token bound to a pod scheduled on a different node",
        ),
    ] {
        let out = request(&node, token_request(bound, 3600));
        assert_denied(
            &out,
            &format!("serviceaccounts \"default\" is forbidden: {message}"),
        );
    }
    let wrong_uid = "00000000-0000-0000-0000-000000000000";
    let out = request(&node, token_request(Some(("mine", wrong_uid)), 3600));
    assert_denied(
        &out,
        &format!(
            "serviceaccounts \"default\" is forbidden: the UID in the bound object reference ({wrong_uid}) does not match the UID in record. The object might have been deleted and then recreated"
        ),
    );
    // Bound to its own pod: issued, shortened to the cap with kube's warning.
    let out = request(
        &node,
        token_request(Some(("mine", mine.as_str())), 3 * 3600),
    );
    assert!(out.status.success(), "{}", text(&out));
    let issued = json_out(&out);
    assert_eq!(issued["spec"]["expirationSeconds"], 7200);
    assert!(
        issued["status"]["token"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    assert!(
        text(&out).contains("requested expiration of 10800 seconds shortened to 7200 seconds"),
        "{}",
        text(&out)
    );
    // Below the cap it is as asked; beyond 2^32 seconds is invalid.
    let out = request(&node, token_request(Some(("mine", mine.as_str())), 3600));
    assert_eq!(json_out(&out)["spec"]["expirationSeconds"], 3600);
    let out = request(
        &node,
        token_request(Some(("mine", mine.as_str())), (1 << 32) + 1),
    );
    assert!(
        text(&out).contains("may not specify a duration larger than 2^32 seconds"),
        "{}",
        text(&out)
    );
    // An administrator's unbound token is not a node's business (and is capped too).
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["create", "token", "default", "--duration=3h", "-o", "json"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(json_out(&out)["spec"]["expirationSeconds"], 7200);
}

#[test]
fn deny_service_external_ips_is_an_admission_plugin_behind_a_flag() {
    let service = |name: &str, ips: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec: {{ports: [{{port: 80}}], externalIPs: {ips}}}\n"
        )
    };
    // Off by default, as in kube: external IPs are accepted.
    let server = Server::start();
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["create", "-f", "-"],
        Some(&service("open", "[192.0.2.10]")),
    );
    assert!(out.status.success(), "{}", text(&out));
    drop(server);

    let server = Server::start_with(&[
        "--kube-apiserver-arg",
        "enable-admission-plugins=NodeRestriction,DenyServiceExternalIPs",
    ]);
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["create", "-f", "-"],
        Some(&service("ext", "[192.0.2.10]")),
    );
    assert_denied(
        &out,
        "services \"ext\" is forbidden: Use of external IPs is denied by admission control",
    );
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &["create", "-f", "-"],
        Some(&service("plain", "[]")),
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = server.kubectl_with(
        Path::new("kubectl"),
        &[
            "patch",
            "service",
            "plain",
            "-p",
            r#"{"spec":{"externalIPs":["192.0.2.11"]}}"#,
        ],
        None,
    );
    assert_denied(
        &out,
        "services \"plain\" is forbidden: Use of external IPs is denied by admission control",
    );
    // Other updates of the Service go through.
    admin(&server, &["label", "service", "plain", "x=y"]);
}
