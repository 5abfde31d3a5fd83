//! The PodSecurity admission through real kubectl (issue 25 item 2): namespace labels
//! enforce (403 in kube's words, kubectl exits 1), warn (`Warning:` lines from the HTTP
//! `Warning` headers, for pods and workload templates), raising a namespace's enforce level
//! over existing pods, bad labels (422), and cluster defaults and exemptions from
//! `--pod-security-admission-config-file`, including a bad file refused at start.

mod support;

use std::path::Path;
use std::process::Output;

use support::Server;

const ENFORCE: &str = "pod-security.kubernetes.io/enforce";
const WARN: &str = "pod-security.kubernetes.io/warn";

fn pod(name: &str, namespace: &str, privileged: bool) -> String {
    if privileged {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  containers:\n  - name: c\n    image: busybox\n    securityContext:\n      privileged: true\n"
        )
    } else {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  securityContext:\n    runAsNonRoot: true\n    runAsUser: 1000\n    seccompProfile:\n      type: RuntimeDefault\n  containers:\n  - name: c\n    image: busybox\n    securityContext:\n      allowPrivilegeEscalation: false\n      capabilities:\n        drop: [\"ALL\"]\n"
        )
    }
}

fn kubectl(server: &Server, args: &[&str], stdin: Option<&str>) -> Output {
    server.kubectl_with(Path::new("kubectl"), args, stdin)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(server: &Server, args: &[&str], stdin: Option<&str>) -> String {
    let out = kubectl(server, args, stdin);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        stderr(&out)
    );
    stderr(&out)
}

#[test]
fn namespace_labels_enforce_and_warn_through_kubectl() {
    let server = Server::start();
    let ns = "psa-test";
    ok(&server, &["create", "namespace", ns], None);
    server.wait_default_service_account(ns);
    ok(
        &server,
        &["label", "namespace", ns, &format!("{ENFORCE}=restricted")],
        None,
    );

    // Enforce: refused in kube's words; kubectl exits 1.
    let out = kubectl(
        &server,
        &["create", "-f", "-"],
        Some(&pod("priv", ns, true)),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let want = "Error from server (Forbidden): error when creating \"STDIN\": pods \"priv\" is forbidden: violates PodSecurity \"restricted:latest\": privileged (container \"c\" must not set securityContext.privileged=true), allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")";
    assert!(stderr(&out).contains(want), "got: {}", stderr(&out));
    let out = kubectl(&server, &["get", "pod", "-n", ns, "priv"], None);
    assert!(!out.status.success(), "a refused pod is not stored");

    // A compliant pod is created, with no warning.
    let err = ok(
        &server,
        &["create", "-f", "-"],
        Some(&pod("good", ns, false)),
    );
    assert!(!err.contains("Warning"), "{err}");

    // Warn: the pod is created, kubectl prints kube's warning.
    ok(
        &server,
        &[
            "label",
            "--overwrite",
            "namespace",
            ns,
            &format!("{ENFORCE}=privileged"),
            &format!("{WARN}=baseline"),
        ],
        None,
    );
    let err = ok(
        &server,
        &["create", "-f", "-"],
        Some(&pod("warned", ns, true)),
    );
    assert!(
        err.contains("Warning: would violate PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"),
        "{err}"
    );

    // Workload templates are warned about, never refused.
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      hostNetwork: true\n      containers:\n      - name: c\n        image: busybox\n"
    );
    let err = ok(&server, &["apply", "-f", "-"], Some(&deployment));
    assert!(
        err.contains("Warning: would violate PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true)"),
        "{err}"
    );

    // Raising enforce over a violating pod: allowed, with kube's summary warning.
    let err = ok(
        &server,
        &[
            "label",
            "--overwrite",
            "namespace",
            ns,
            &format!("{ENFORCE}=baseline"),
        ],
        None,
    );
    assert!(
        err.contains(&format!(
            "Warning: existing pods in namespace \"{ns}\" violate the new PodSecurity enforce level \"baseline:latest\""
        )),
        "{err}"
    );
    assert!(err.contains("Warning: warned: privileged"), "{err}");

    // A label value that is not a level is refused (422), as kube does.
    let out = kubectl(
        &server,
        &[
            "label",
            "--overwrite",
            "namespace",
            ns,
            &format!("{ENFORCE}=strict"),
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!(
            "metadata.labels[{ENFORCE}]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn config_file_sets_defaults_and_exemptions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("psa.yaml");
    std::fs::write(
        &file,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n    kind: PodSecurityConfiguration\n    defaults:\n      enforce: baseline\n      enforce-version: latest\n    exemptions:\n      namespaces: [kube-system]\n",
    )
    .expect("write config");
    let file = file.to_string_lossy().into_owned();
    let server = Server::start_in(dir, &["--pod-security-admission-config-file", &file]);
    ok(&server, &["create", "namespace", "plain"], None);
    server.wait_default_service_account("plain");
    let out = kubectl(
        &server,
        &["create", "-f", "-"],
        Some(&pod("priv", "plain", true)),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("pods \"priv\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"),
        "{}",
        stderr(&out)
    );
    // The namespace's own label overrides the default.
    ok(
        &server,
        &[
            "label",
            "namespace",
            "plain",
            &format!("{ENFORCE}=privileged"),
        ],
        None,
    );
    ok(
        &server,
        &["create", "-f", "-"],
        Some(&pod("priv", "plain", true)),
    );
    // The exempt namespace takes privileged pods.
    server.wait_default_service_account("kube-system");
    ok(
        &server,
        &["create", "-f", "-"],
        Some(&pod("priv", "kube-system", true)),
    );
}

#[test]
fn bad_config_file_stops_the_server_at_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("psa.yaml");
    std::fs::write(
        &file,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n    kind: PodSecurityConfiguration\n    defaults:\n      enforce: strict\n",
    )
    .expect("write config");
    let out = std::process::Command::new(support::k3rs_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--pod-security-admission-config-file")
        .arg(&file)
        .output()
        .expect("run k3rs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--pod-security-admission-config-file") && err.contains("defaults.enforce"),
        "{err}"
    );
}
