//! The kubectl scenario, run with every installed kubectl (1.27 ... 1.33) against the
//! real server: the commands a user types every day must work unmodified.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::Server;

struct Kubectl<'a> {
    server: &'a Server,
    bin: &'a Path,
    ns: String,
}

impl Kubectl<'_> {
    fn run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        let out = self.server.kubectl_with(self.bin, args, stdin);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs in the test namespace and requires success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        self.ok_in(args, None)
    }

    fn ok_in(&self, args: &[&str], stdin: Option<&str>) -> String {
        let mut full: Vec<&str> = vec!["-n", &self.ns];
        full.extend_from_slice(args);
        let (ok, out, err) = self.run(&full, stdin);
        assert!(
            ok,
            "{} {:?} failed:\nstdout: {out}\nstderr: {err}",
            self.bin.display(),
            full
        );
        out
    }

    fn fails(&self, args: &[&str], stdin: Option<&str>) -> String {
        let mut full: Vec<&str> = vec!["-n", &self.ns];
        full.extend_from_slice(args);
        let (ok, out, err) = self.run(&full, stdin);
        assert!(
            !ok,
            "{} {:?} should have failed:\n{out}",
            self.bin.display(),
            full
        );
        format!("{out}{err}")
    }
}

const MANIFESTS: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  labels: {app: app}
spec:
  replicas: 1
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
      - name: main
        image: busybox:1.36
        ports:
        - containerPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: app
spec:
  selector: {app: app}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: "one"
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
stringData:
  password: hunter2
"#;

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wg]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
"#;

fn scenario(server: &Server, bin: &Path, minor: &str) {
    let k = Kubectl {
        server,
        bin,
        ns: format!("k{minor}"),
    };
    let ns = k.ns.clone();
    let (ok, out, err) = k.run(&["create", "namespace", &ns], None);
    assert!(ok, "create namespace: {out}{err}");
    assert!(k.ok(&["get", "ns"]).contains(&ns));
    k.ok(&["get", "all"]);

    assert!(
        k.ok(&["create", "deployment", "web", "--image=nginx:1.25"])
            .contains("deployment.apps/web created")
    );
    let applied = k.ok_in(&["apply", "-f", "-"], Some(MANIFESTS));
    for line in [
        "deployment.apps/app created",
        "service/app created",
        "configmap/settings created",
        "secret/creds created",
    ] {
        assert!(
            applied.contains(line),
            "apply output lacks {line:?}: {applied}"
        );
    }
    let again = k.ok_in(&["apply", "-f", "-"], Some(MANIFESTS));
    assert_eq!(again.matches("unchanged").count(), 3, "re-apply: {again}");
    // As against kube-apiserver (kubernetes/kubernetes#87736): `stringData` is write-only,
    // merged into `data` and never stored, so kubectl's three-way patch re-sends it and
    // reports the Secret configured on every apply.
    assert!(
        again.contains("secret/creds configured"),
        "re-apply: {again}"
    );

    // Server-side apply over a field another manager changed since: conflict, then force.
    k.ok(&[
        "patch",
        "cm",
        "settings",
        "-p",
        r#"{"data":{"mode":"patched"}}"#,
    ]);
    let ssa = MANIFESTS
        .split("---")
        .find(|d| d.contains("kind: ConfigMap"))
        .unwrap()
        .replace("\"one\"", "\"two\"");
    let conflict = k.fails(&["apply", "--server-side", "-f", "-"], Some(&ssa));
    assert!(
        conflict.to_lowercase().contains("conflict"),
        "expected a conflict: {conflict}"
    );
    assert!(
        k.ok_in(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&ssa)
        )
        .contains("serverside-applied")
    );
    assert_eq!(
        k.ok(&["get", "cm", "settings", "-o", "jsonpath={.data.mode}"]),
        "two"
    );

    // diff shows a change and exits 1.
    let changed = ssa.replace("\"two\"", "\"three\"");
    let mut full: Vec<&str> = vec!["-n", &ns, "diff", "-f", "-"];
    let out = server.kubectl_with(bin, &full, Some(&changed));
    assert_eq!(
        out.status.code(),
        Some(1),
        "diff: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("three"));
    full.clear();

    k.ok(&[
        "patch",
        "deployment",
        "app",
        "-p",
        r#"{"spec":{"replicas":2}}"#,
    ]);
    k.ok(&[
        "patch",
        "deployment",
        "app",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"labels":{"patched":"merge"}}}"#,
    ]);
    k.ok(&[
        "patch",
        "deployment",
        "app",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/replicas","value":3}]"#,
    ]);
    assert_eq!(
        k.ok(&["get", "deploy", "app", "-o", "jsonpath={.spec.replicas}"]),
        "3"
    );
    // Strategic merge keeps the other containers' fields (merge by name).
    k.ok(&[
        "patch",
        "deployment",
        "app",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"main","image":"busybox:1.37"}]}}}}"#,
    ]);
    assert_eq!(
        k.ok(&[
            "get",
            "deploy",
            "app",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].ports[0].containerPort}"
        ]),
        "8080"
    );

    k.ok(&["label", "cm", "settings", "tier=db"]);
    k.ok(&["annotate", "cm", "settings", "note=hi"]);
    assert!(
        k.ok(&["scale", "deployment", "app", "--replicas=4"])
            .contains("scaled")
    );
    assert_eq!(
        k.ok(&["get", "deploy", "app", "-o", "jsonpath={.spec.replicas}"]),
        "4"
    );

    let yaml = k.ok(&["get", "deploy", "app", "-o", "yaml"]);
    assert!(
        yaml.contains("revisionHistoryLimit: 10") && yaml.contains("maxSurge: 25%"),
        "defaults missing: {yaml}"
    );
    let json = k.ok(&["get", "cm", "settings", "-o", "json"]);
    assert!(json.contains("\"tier\": \"db\""));
    let wide = k.ok(&["get", "deploy", "-o", "wide"]);
    assert!(
        wide.contains("CONTAINERS") && wide.contains("IMAGES") && wide.contains("SELECTOR"),
        "{wide}"
    );
    let cols = k.ok(&[
        "get",
        "deploy",
        "-o",
        "custom-columns=NAME:.metadata.name,REPLICAS:.spec.replicas",
    ]);
    assert!(cols.contains("app") && cols.contains("4"), "{cols}");
    assert!(k.ok(&["get", "cm", "--show-labels"]).contains("tier=db"));
    assert!(k.ok(&["get", "cm", "-A"]).contains(&ns));
    let sorted = k.ok(&["get", "cm", "--sort-by=.metadata.name", "-o", "name"]);
    let names: Vec<&str> = sorted.lines().collect();
    let mut expect = names.clone();
    expect.sort();
    assert_eq!(names, expect);
    let pods_header = k.ok(&["get", "svc"]);
    assert!(
        pods_header.contains("CLUSTER-IP") && pods_header.contains("80/TCP"),
        "{pods_header}"
    );

    // get -w: an event arrives for a change made while watching.
    let mut watch = Command::new(bin)
        .arg("--kubeconfig")
        .arg(&server.kubeconfig)
        .args(["-n", &ns, "get", "cm", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    k.ok(&["create", "configmap", "watched", "--from-literal=a=b"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = false;
    while Instant::now() < deadline && !seen {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            seen = line.contains("watched") && line.contains("ADDED");
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(seen, "kubectl get -w did not show the new configmap");

    let described = k.ok(&["describe", "deployment", "app"]);
    assert!(
        described.contains("Replicas:") && described.contains("busybox:1.37"),
        "{described}"
    );
    assert!(
        k.ok(&["describe", "cm", "settings"]).contains("note: hi")
            || k.ok(&["describe", "cm", "settings"]).contains("note")
    );
    let explained = k.ok(&["explain", "deployment.spec.replicas"]);
    assert!(explained.to_lowercase().contains("replicas"), "{explained}");
    let resources = k.ok(&["api-resources"]);
    assert!(
        resources.contains("deployments")
            && resources.contains("deploy")
            && resources.contains("apps/v1"),
        "{resources}"
    );

    // A CRD, then a custom resource served with its printer columns.
    let crd_out = k.ok_in(&["apply", "-f", "-"], Some(CRD));
    assert!(
        crd_out.contains("created")
            || crd_out.contains("unchanged")
            || crd_out.contains("configured"),
        "{crd_out}"
    );
    let widget =
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n";
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut args: Vec<&str> = vec!["-n", &ns, "apply", "-f", "-"];
        let out = server.kubectl_with(bin, &args, Some(widget));
        if out.status.success() {
            break;
        }
        args.clear();
        assert!(
            Instant::now() < deadline,
            "custom resource never accepted: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let widgets = k.ok(&["get", "widgets"]);
    assert!(
        widgets.contains("w1") && widgets.contains("SIZE") && widgets.contains('3'),
        "{widgets}"
    );
    assert!(
        k.ok(&["get", "wg", "w1", "-o", "jsonpath={.spec.size}"])
            .contains('3')
    );

    assert!(k.ok(&["delete", "cm", "settings"]).contains("deleted"));
    let gone = k.fails(&["get", "cm", "settings"], None);
    assert!(
        gone.contains("NotFound") || gone.contains("not found"),
        "{gone}"
    );
    assert!(
        k.ok(&["delete", "deployment", "app", "web"])
            .contains("deleted")
    );
}

#[test]
fn kubectl_scenario_with_every_installed_version() {
    let kubectls = support::kubectls();
    let server = Server::start();
    for bin in &kubectls {
        let minor = bin
            .file_name()
            .unwrap()
            .to_string_lossy()
            .rsplit('.')
            .next()
            .unwrap()
            .to_string();
        eprintln!("scenario with {}", bin.display());
        scenario(&server, bin, &minor);
    }
    // The widgets CRD is cluster-wide: created by the first version, reused later.
    let _ = &server;
}
