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
