//! The audit log through real kubectl (issue 25 item 5): a server started with
//! `--kube-apiserver-arg audit-policy-file=…` (Metadata for secrets, RequestResponse for
//! configmaps, None for the rest) and `audit-log-path=…` writes kube's `audit.k8s.io/v1`
//! Events: levels, stages (ResponseStarted for a watch), verbs, users (impersonation
//! included), objectRefs, response codes, request/response objects only where the level
//! says, the authorization decision (a forbidden request with its 403), the in-process
//! controllers' own requests, and `Audit-Id` headers naming logged events. A bad policy
//! stops the server at start.

mod support;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::Server;

const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
  omitManagedFields: true
- level: None
"#;

fn kubectl(server: &Server, args: &[&str]) -> Output {
    server.kubectl_with(Path::new("kubectl"), args, None)
}

fn ok(server: &Server, args: &[&str]) -> String {
    let out = kubectl(server, args);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

fn field<'a>(event: &'a Value, pointer: &str) -> &'a str {
    event.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The events of requests matching `pred`, waiting for the writer to catch up.
fn wait_for(path: &Path, what: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let found: Vec<Value> = events(path).into_iter().filter(|e| pred(e)).collect();
        if !found.is_empty() {
            return found;
        }
        if Instant::now() > deadline {
            let all = events(path);
            let tail: Vec<String> = all.iter().rev().take(3).map(Value::to_string).collect();
            panic!(
                "no audit event for {what} in {} events; last: {tail:#?}",
                all.len()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn object_event(e: &Value, verb: &str, resource: &str, name: &str) -> bool {
    field(e, "/verb") == verb
        && field(e, "/objectRef/resource") == resource
        && field(e, "/objectRef/name") == name
}

#[test]
fn kubectl_requests_are_audited_as_the_policy_says() {
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("write policy");
    let log = dir.path().join("audit/audit.log");
    let server = Server::start_in(
        dir,
        &[
            "--kube-apiserver-arg",
            &format!("audit-policy-file={}", policy.display()),
            "--kube-apiserver-arg",
            &format!("audit-log-path={}", log.display()),
            "--kube-apiserver-arg",
            "audit-log-maxbackup=3",
        ],
    );

    // RequestResponse: a configmap's create logs the request and response objects, and
    // its name is taken from the body.
    ok(
        &server,
        &["create", "configmap", "cm1", "--from-literal=a=b"],
    );
    let done = wait_for(&log, "configmap create", |e| {
        object_event(e, "create", "configmaps", "cm1")
    });
    let id = field(&done[0], "/auditID").to_string();
    let creates: Vec<Value> = events(&log)
        .into_iter()
        .filter(|e| field(e, "/auditID") == id)
        .collect();
    let stages: Vec<&str> = creates.iter().map(|e| field(e, "/stage")).collect();
    assert_eq!(
        stages,
        ["RequestReceived", "ResponseComplete"],
        "{creates:?}"
    );
    let done = &creates[1];
    assert_eq!(field(done, "/kind"), "Event");
    assert_eq!(field(done, "/apiVersion"), "audit.k8s.io/v1");
    assert_eq!(field(done, "/level"), "RequestResponse");
    assert_eq!(field(&creates[0], "/auditID"), field(done, "/auditID"));
    assert_eq!(field(done, "/auditID").len(), 36);
    assert_eq!(field(done, "/objectRef/namespace"), "default");
    assert_eq!(field(done, "/objectRef/apiVersion"), "v1");
    assert!(done.pointer("/objectRef/apiGroup").is_none(), "{done}");
    assert_eq!(
        done.pointer("/responseStatus/code"),
        Some(&Value::from(201))
    );
    assert_eq!(field(done, "/requestObject/kind"), "ConfigMap");
    assert_eq!(field(done, "/requestObject/data/a"), "b");
    assert_eq!(field(done, "/responseObject/metadata/name"), "cm1");
    assert!(
        done.pointer("/responseObject/metadata/managedFields")
            .is_none(),
        "omitManagedFields: {done}"
    );
    assert!(field(done, "/user/username").len() > 1);
    assert!(field(done, "/userAgent").starts_with("kubectl"), "{done}");
    assert_eq!(field(done, "/sourceIPs/0"), "127.0.0.1");
    assert_eq!(
        field(done, "/annotations/authorization.k8s.io~1decision"),
        "allow"
    );
    assert!(creates[0].get("responseStatus").is_none());
    assert!(creates[0].get("requestObject").is_none());
    let admin = field(done, "/user/username").to_string();

    // Metadata: a secret's create has no objects.
    ok(
        &server,
        &["create", "secret", "generic", "s1", "--from-literal=k=v"],
    );
    let secret = wait_for(&log, "secret create", |e| {
        object_event(e, "create", "secrets", "s1") && field(e, "/stage") == "ResponseComplete"
    });
    let secret = &secret[0];
    assert_eq!(field(secret, "/level"), "Metadata");
    assert_eq!(
        secret.pointer("/responseStatus/code"),
        Some(&Value::from(201))
    );
    assert!(secret.get("requestObject").is_none(), "{secret}");
    assert!(secret.get("responseObject").is_none(), "{secret}");

    // The Audit-Id header kubectl received names the event of its request.
    let verbose = ok(&server, &["get", "configmap", "cm1", "-v=8"]);
    // Discovery comes first; the get is kubectl's last request.
    let header = verbose
        .lines()
        .rev()
        .find_map(|line| {
            let at = line.find("Audit-Id: ")?;
            let id: String = line[at + 10..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_hexdigit() || *c == '-')
                .collect();
            Some(id)
        })
        .unwrap_or_else(|| panic!("no Audit-Id header in kubectl's log: {verbose}"));
    let got = wait_for(
        &log,
        &format!("configmap get with auditID {header:?}"),
        |e| field(e, "/auditID") == header && field(e, "/stage") == "ResponseComplete",
    );
    assert!(
        object_event(&got[0], "get", "configmaps", "cm1"),
        "{}",
        got[0]
    );
    assert_eq!(
        got[0].pointer("/responseStatus/code"),
        Some(&Value::from(200))
    );
    assert!(got[0].get("responseObject").is_some());

    // Forbidden: impersonating a user without rights is logged with its 403 and the
    // decision.
    let out = kubectl(&server, &["get", "secrets", "--as", "jane"]);
    assert!(!out.status.success());
    let denied = wait_for(&log, "forbidden list", |e| {
        field(e, "/impersonatedUser/username") == "jane" && field(e, "/stage") == "ResponseComplete"
    });
    let denied = &denied[0];
    assert_eq!(field(denied, "/user/username"), admin);
    assert_eq!(field(denied, "/verb"), "list");
    assert_eq!(field(denied, "/objectRef/resource"), "secrets");
    assert_eq!(
        denied.pointer("/responseStatus/code"),
        Some(&Value::from(403))
    );
    assert_eq!(field(denied, "/responseStatus/reason"), "Forbidden");
    assert_eq!(field(denied, "/responseStatus/status"), "Failure");
    assert!(
        field(denied, "/responseStatus/message").contains("User \"jane\" cannot list"),
        "{denied}"
    );
    assert_eq!(
        field(denied, "/annotations/authorization.k8s.io~1decision"),
        "forbid"
    );

    // A watch is long-running: ResponseStarted, then ResponseComplete when it ends.
    ok(
        &server,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1",
        ],
    );
    let watch = wait_for(&log, "configmap watch end", |e| {
        field(e, "/verb") == "watch"
            && field(e, "/objectRef/resource") == "configmaps"
            && field(e, "/userAgent").starts_with("kubectl")
            && field(e, "/stage") == "ResponseComplete"
    });
    let id = field(&watch[0], "/auditID").to_string();
    let stages: Vec<String> = events(&log)
        .iter()
        .filter(|e| field(e, "/auditID") == id)
        .map(|e| field(e, "/stage").to_string())
        .collect();
    assert_eq!(
        stages,
        ["RequestReceived", "ResponseStarted", "ResponseComplete"]
    );
    assert!(watch[0].get("responseObject").is_none());

    // Level None: pods and namespaces are not logged.
    ok(&server, &["get", "pods"]);
    ok(&server, &["get", "namespaces"]);
    // The in-process controllers are audited like anyone (root-ca's configmaps).
    wait_for(&log, "the controller-manager's requests", |e| {
        field(e, "/user/username") == "system:kube-controller-manager"
    });
    for e in events(&log) {
        let resource = field(&e, "/objectRef/resource");
        assert!(
            resource == "configmaps" || resource == "secrets",
            "logged at level None: {e}"
        );
    }
}

#[test]
fn bad_policy_stops_the_server_at_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n",
    )
    .expect("write policy");
    let out = std::process::Command::new(support::k3rs_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--kube-apiserver-arg")
        .arg(format!("audit-policy-file={}", policy.display()))
        .output()
        .expect("run k3rs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("audit-policy-file") && err.contains("Loud"),
        "{err}"
    );
}

/// PodSecurity writes kube's audit annotations: the enforce level a pod was checked at
/// and, in a namespace labelled `audit: restricted`, the violations of that level — while
/// the pod is admitted (enforce is privileged) and kubectl sees no warning.
#[test]
fn pod_security_audit_mode_annotates_the_event() {
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  resources:\n  - group: \"\"\n    resources: [\"pods\"]\n- level: None\n",
    )
    .expect("write policy");
    let log = dir.path().join("audit/audit.log");
    let server = Server::start_in(
        dir,
        &[
            "--kube-apiserver-arg",
            &format!("audit-policy-file={}", policy.display()),
            "--kube-apiserver-arg",
            &format!("audit-log-path={}", log.display()),
        ],
    );
    ok(&server, &["create", "namespace", "audited"]);
    ok(
        &server,
        &[
            "label",
            "namespace",
            "audited",
            "pod-security.kubernetes.io/audit=restricted",
        ],
    );
    let stderr = ok(
        &server,
        &[
            "run",
            "root",
            "-n",
            "audited",
            "--image=busybox",
            "--overrides",
            r#"{"spec":{"containers":[{"name":"root","image":"busybox","securityContext":{"privileged":true}}]}}"#,
        ],
    );
    assert!(
        !stderr.contains("Warning"),
        "no warn label, no warning: {stderr}"
    );
    let found = wait_for(&log, "the pod's create", |e| {
        object_event(e, "create", "pods", "root") && field(e, "/stage") == "ResponseComplete"
    });
    let event = &found[0];
    assert_eq!(
        field(
            event,
            "/annotations/pod-security.kubernetes.io~1enforce-policy"
        ),
        "privileged:latest",
        "{event}"
    );
    let violations = field(
        event,
        "/annotations/pod-security.kubernetes.io~1audit-violations",
    );
    assert!(
        violations.starts_with("would violate PodSecurity \"restricted:latest\": ")
            && violations.contains(
                "privileged (container \"root\" must not set securityContext.privileged=true)"
            ),
        "{event}"
    );
    // A pod of an unlabelled namespace is checked at the default level, with nothing to report.
    ok(&server, &["run", "plain", "--image=busybox"]);
    let found = wait_for(&log, "the plain pod's create", |e| {
        object_event(e, "create", "pods", "plain") && field(e, "/stage") == "ResponseComplete"
    });
    assert!(
        found[0]
            .pointer("/annotations/pod-security.kubernetes.io~1audit-violations")
            .is_none(),
        "{}",
        found[0]
    );
}
