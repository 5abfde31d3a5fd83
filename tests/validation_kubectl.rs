//! `kubectl apply` / `kubectl create` of invalid manifests print kube-apiserver's error
//! text, field path, reason and message included (issue 22): a table of manifests, each
//! with the lines kubectl must print. Nothing of a refused manifest is stored.

mod support;

use std::path::Path;

use support::Server;

struct Case {
    name: &'static str,
    manifest: &'static str,
    /// Substrings of kubectl's stderr, in kube's words.
    expect: &'static [&'static str],
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "service port name",
            manifest: "apiVersion: v1\nkind: Service\nmetadata:\n  name: bad-port-name\nspec:\n  ports:\n  - name: Web_1\n    port: 80\n",
            expect: &[
                "The Service \"bad-port-name\" is invalid: spec.ports[0].name: Invalid value: \"Web_1\": a lowercase RFC 1123 label must consist of",
            ],
        },
        Case {
            name: "service protocol",
            manifest: "apiVersion: v1\nkind: Service\nmetadata:\n  name: bad-protocol\nspec:\n  ports:\n  - port: 80\n    protocol: ICMP\n",
            expect: &[
                "spec.ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            ],
        },
        Case {
            name: "service port range",
            manifest: "apiVersion: v1\nkind: Service\nmetadata:\n  name: bad-port\nspec:\n  ports:\n  - port: 70000\n",
            expect: &[
                "spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
            ],
        },
        Case {
            name: "service duplicate port names",
            manifest: "apiVersion: v1\nkind: Service\nmetadata:\n  name: dup-ports\nspec:\n  ports:\n  - name: http\n    port: 80\n  - name: http\n    port: 81\n",
            expect: &["spec.ports[1].name: Duplicate value: \"http\""],
        },
        Case {
            name: "service external IP",
            manifest: "apiVersion: v1\nkind: Service\nmetadata:\n  name: bad-external\nspec:\n  externalIPs: [\"1.2.3.4; drop\"]\n  ports:\n  - port: 80\n",
            expect: &[
                "spec.externalIPs[0]: Invalid value: \"1.2.3.4; drop\": must be a valid IP address",
            ],
        },
        Case {
            name: "service session affinity timeout",
            manifest: "apiVersion: v1\nkind: Service\nmetadata:\n  name: bad-affinity\nspec:\n  sessionAffinity: ClientIP\n  sessionAffinityConfig:\n    clientIP:\n      timeoutSeconds: 100000\n  ports:\n  - port: 80\n",
            expect: &[
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 100000: must be greater than 0 and less than 86400",
            ],
        },
        Case {
            name: "pod container name",
            manifest: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad-container-name\nspec:\n  containers:\n  - name: Web_1\n    image: busybox\n",
            expect: &[
                "spec.containers[0].name: Invalid value: \"Web_1\": a lowercase RFC 1123 label must consist of",
            ],
        },
        Case {
            name: "pod port name",
            manifest: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad-port-name\nspec:\n  containers:\n  - name: c\n    image: busybox\n    ports:\n    - name: Web_1\n      containerPort: 80\n",
            expect: &[
                "The Pod \"bad-port-name\" is invalid: spec.containers[0].ports[0].name: Invalid value: \"Web_1\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
            ],
        },
        Case {
            name: "pod restart policy",
            manifest: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad-restart\nspec:\n  restartPolicy: Sometimes\n  containers:\n  - name: c\n    image: busybox\n",
            expect: &[
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            ],
        },
        Case {
            name: "pod mount of an undeclared volume",
            manifest: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad-mount\nspec:\n  containers:\n  - name: c\n    image: busybox\n    volumeMounts:\n    - name: data\n      mountPath: /data\n",
            expect: &["spec.containers[0].volumeMounts[0].name: Not found: \"data\""],
        },
        Case {
            name: "pod request above limit",
            manifest: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad-resources\nspec:\n  containers:\n  - name: c\n    image: busybox\n    resources:\n      requests: {cpu: \"2\"}\n      limits: {cpu: \"1\"}\n",
            expect: &[
                "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
            ],
        },
        Case {
            name: "pod volume without a type",
            manifest: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad-volume\nspec:\n  volumes:\n  - name: data\n  containers:\n  - name: c\n    image: busybox\n",
            expect: &["spec.volumes[0]: Required value: must specify a volume type"],
        },
        Case {
            name: "pod host alias",
            manifest: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad-alias\nspec:\n  hostAliases:\n  - ip: not-an-ip\n    hostnames: [a.example]\n  containers:\n  - name: c\n    image: busybox\n",
            expect: &[
                "spec.hostAliases[0].ip: Invalid value: \"not-an-ip\": must be a valid IP address",
            ],
        },
        Case {
            name: "pod subPath escaping its volume",
            manifest: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad-subpath\nspec:\n  volumes:\n  - name: data\n    emptyDir: {}\n  containers:\n  - name: c\n    image: busybox\n    volumeMounts:\n    - name: data\n      mountPath: /data\n      subPath: ../../etc\n",
            expect: &[
                "spec.containers[0].volumeMounts.subPath: Invalid value: \"../../etc\": must not contain '..'",
            ],
        },
        Case {
            name: "deployment restart policy",
            manifest: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: bad-restart\nspec:\n  selector:\n    matchLabels: {app: x}\n  template:\n    metadata:\n      labels: {app: x}\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: c\n        image: busybox\n",
            expect: &[
                "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
            ],
        },
        Case {
            name: "job without a restart policy",
            manifest: "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: bad-job\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n        image: busybox\n",
            expect: &[
                "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"",
            ],
        },
        Case {
            name: "cronjob schedule",
            manifest: "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: bad-cron\nspec:\n  schedule: \"61 * * * *\"\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers:\n          - name: c\n            image: busybox\n",
            expect: &["spec.schedule: Invalid value: \"61 * * * *\""],
        },
        Case {
            name: "deployment negative replicas",
            manifest: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: bad-replicas\nspec:\n  replicas: -1\n  selector:\n    matchLabels: {app: x}\n  template:\n    metadata:\n      labels: {app: x}\n    spec:\n      containers:\n      - name: c\n        image: busybox\n",
            expect: &["spec.replicas: Invalid value: -1: must be greater than or equal to 0"],
        },
        Case {
            name: "configmap key",
            manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad-key\ndata:\n  \"a/b\": x\n",
            expect: &[
                "The ConfigMap \"bad-key\" is invalid: data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            ],
        },
        Case {
            name: "label value",
            manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad-label\n  labels:\n    app: \"-x\"\n",
            expect: &[
                "metadata.labels: Invalid value: \"-x\": a valid label must be an empty string or consist of alphanumeric characters",
            ],
        },
        Case {
            name: "annotation key",
            manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad-annotation\n  annotations:\n    \"a/b/c\": x\n",
            expect: &[
                "metadata.annotations: Invalid value: \"a/b/c\": a qualified name must consist of",
            ],
        },
        Case {
            name: "node pod CIDR",
            manifest: "apiVersion: v1\nkind: Node\nmetadata:\n  name: bad-node\nspec:\n  podCIDR: 10.0.0.0/33\n",
            expect: &["spec.podCIDR"],
        },
        Case {
            name: "role binding roleRef kind",
            manifest: "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: bad-binding\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: x\nsubjects:\n- kind: User\n  name: jane\n  apiGroup: rbac.authorization.k8s.io\n",
            expect: &[
                "roleRef.kind: Unsupported value: \"Group\": supported values: \"Role\", \"ClusterRole\"",
            ],
        },
        Case {
            name: "endpoint slice address",
            manifest: "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: bad-slice\naddressType: IPv4\nendpoints:\n- addresses: [\"10.0.0.1\\n}\"]\nports:\n- name: http\n  port: 80\n",
            expect: &[
                "endpoints[0].addresses[0]: Invalid value: \"10.0.0.1\\n}\": must be a valid IPv4 address",
            ],
        },
    ]
}

#[test]
fn invalid_manifests_print_kubes_errors() {
    let server = Server::start();
    server.wait_default_service_account("default");
    let kubectl = Path::new("kubectl");
    let mut failures = Vec::new();
    for case in cases() {
        for verb in ["apply", "create"] {
            let out = server.kubectl_with(kubectl, &[verb, "-f", "-"], Some(case.manifest));
            let stderr = String::from_utf8_lossy(&out.stderr);
            if out.status.success() {
                failures.push(format!("{} ({verb}): accepted", case.name));
                // Leave nothing behind for the other verb.
                server.kubectl_with(kubectl, &["delete", "-f", "-"], Some(case.manifest));
                continue;
            }
            for want in case.expect {
                if !stderr.contains(want) {
                    failures.push(format!(
                        "{} ({verb}): missing {want:?}\n  got: {stderr}",
                        case.name
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// An applied change to a Pod's spec beyond its images is refused with kube's text, and the
/// stored pod keeps its spec.
#[test]
fn pod_spec_changes_are_refused_on_apply() {
    let server = Server::start();
    server.wait_default_service_account("default");
    let kubectl = Path::new("kubectl");
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fixed\nspec:\n  containers:\n  - name: c\n    image: busybox\n    command: [sleep, \"3600\"]\n";
    let out = server.kubectl_with(kubectl, &["apply", "-f", "-"], Some(pod));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let changed = pod.replace("\"3600\"", "\"60\"");
    let out = server.kubectl_with(kubectl, &["apply", "-f", "-"], Some(&changed));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a command change was accepted");
    assert!(
        stderr.contains("The Pod \"fixed\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"),
        "{stderr}"
    );
    let image_only = pod.replace("image: busybox", "image: busybox:1.36");
    let out = server.kubectl_with(kubectl, &["apply", "-f", "-"], Some(&image_only));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = server.kubectl_with(
        kubectl,
        &[
            "get",
            "pod",
            "fixed",
            "-o",
            "jsonpath={.spec.containers[0].command[1]} {.spec.containers[0].image}",
        ],
        None,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "3600 busybox:1.36");
}

/// A type change stores what kube stores: the node ports and external traffic policy a
/// NodePort Service had are dropped when it becomes ClusterIP (the client did not change
/// them), and a ClusterIP Service that becomes NodePort gets node ports.
#[test]
fn service_type_changes_drop_what_the_new_type_does_not_use() {
    let server = Server::start();
    let kubectl = Path::new("kubectl");
    let run = |args: &[&str]| {
        let out = server.kubectl_with(kubectl, args, None);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&["create", "service", "nodeport", "np", "--tcp=80:80"]);
    let shape = "jsonpath={.spec.type}/{.spec.ports[0].nodePort}/{.spec.externalTrafficPolicy}";
    let before = run(&["get", "service", "np", "-o", shape]);
    assert!(
        before.starts_with("NodePort/3") && before.ends_with("/Cluster"),
        "{before}"
    );
    run(&[
        "patch",
        "service",
        "np",
        "-p",
        r#"{"spec":{"type":"ClusterIP"}}"#,
    ]);
    assert_eq!(run(&["get", "service", "np", "-o", shape]), "ClusterIP//");
    run(&[
        "patch",
        "service",
        "np",
        "-p",
        r#"{"spec":{"type":"NodePort"}}"#,
    ]);
    let after = run(&["get", "service", "np", "-o", shape]);
    assert!(
        after.starts_with("NodePort/3") && after.ends_with("/Cluster"),
        "{after}"
    );
}
