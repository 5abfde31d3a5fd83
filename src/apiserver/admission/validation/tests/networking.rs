//! Vectors for `networking` validation (kube's `TestValidateEndpointSlice*`,
//! `TestValidateNetworkPolicy*`, `TestValidateIngress*`, `TestValidateIngressClass*`).

use serde_json::{Value, json};

use super::{bad, ok, run, update};

fn slice(address_type: &str, endpoints: Value, ports: Value) -> Value {
    json!({"metadata": {"name": "web-abc", "namespace": "default",
                        "labels": {"kubernetes.io/service-name": "web"}},
           "addressType": address_type, "endpoints": endpoints, "ports": ports})
}

#[test]
fn endpoint_slices() {
    let one = |address: &str| json!([{"addresses": [address]}]);
    let many: Vec<Value> = (0..1001)
        .map(|i| json!({"addresses": [format!("10.42.{}.{}", i / 250, i % 250 + 1)]}))
        .collect();
    run(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        vec![
            ok(
                "controller slice",
                slice(
                    "IPv4",
                    json!([{"addresses": ["10.42.0.1"], "conditions": {"ready": true, "serving": true, "terminating": false},
                                      "nodeName": "node-a", "zone": "z1", "hints": {"forZones": [{"name": "z1"}]},
                                      "targetRef": {"kind": "Pod", "name": "web-0", "namespace": "default"}}]),
                    json!([{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "", "port": 0}]),
                ),
            ),
            ok(
                "the API server's slice on loopback",
                json!({"metadata": {"name": "kubernetes", "namespace": "default"}, "addressType": "IPv4",
                       "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
                       "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}),
            ),
            ok(
                "the cluster DNS slice on loopback",
                json!({"metadata": {"name": "kube-dns-k3rs", "namespace": "kube-system"}, "addressType": "IPv4",
                       "endpoints": [{"addresses": ["127.0.0.1"], "nodeName": "node-a"}],
                       "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}),
            ),
            ok("IPv6", slice("IPv6", one("2001:db8::1"), json!([]))),
            ok("FQDN", slice("FQDN", one("web.example.com"), json!([]))),
            ok("no endpoints", slice("IPv4", json!([]), json!([]))),
            bad(
                "no address type",
                slice("", json!([]), json!([])),
                vec![("addressType", "Required value")],
            ),
            bad(
                "unknown address type",
                slice("IP", json!([]), json!([])),
                vec![(
                    "addressType",
                    "Unsupported value: \"IP\": supported values: \"FQDN\", \"IPv4\", \"IPv6\"",
                )],
            ),
            bad(
                "IPv6 address in an IPv4 slice",
                slice("IPv4", one("2001:db8::1"), json!([])),
                vec![(
                    "endpoints[0].addresses[0]",
                    "Invalid value: \"2001:db8::1\": must be a valid IPv4 address",
                )],
            ),
            bad(
                "IPv4 address in an IPv6 slice",
                slice("IPv6", one("10.42.0.1"), json!([])),
                vec![(
                    "endpoints[0].addresses[0]",
                    "Invalid value: \"10.42.0.1\": must be a valid IPv6 address",
                )],
            ),
            bad(
                "address that is not an IP",
                slice("IPv4", one("web"), json!([])),
                vec![
                    (
                        "endpoints[0].addresses[0]",
                        "Invalid value: \"web\": must be a valid IPv4 address",
                    ),
                    (
                        "endpoints[0].addresses[0]",
                        "Invalid value: \"web\": must be a valid IP address",
                    ),
                ],
            ),
            bad(
                "loopback address",
                slice("IPv4", one("127.0.0.1"), json!([])),
                vec![(
                    "endpoints[0].addresses[0]",
                    "Invalid value: \"127.0.0.1\": may not be in the loopback range",
                )],
            ),
            bad(
                "unspecified IPv6 address",
                slice("IPv6", one("::"), json!([])),
                vec![(
                    "endpoints[0].addresses[0]",
                    "Invalid value: \"::\": may not be unspecified (::)",
                )],
            ),
            bad(
                "FQDN with one segment",
                slice("FQDN", one("web"), json!([])),
                vec![(
                    "endpoints[0].addresses[0]",
                    "Invalid value: \"web\": should be a domain with at least two segments separated by dots",
                )],
            ),
            bad(
                "FQDN with an underscore",
                slice("FQDN", one("we_b.example.com"), json!([])),
                vec![(
                    "endpoints[0].addresses[0]",
                    "Invalid value: \"we_b.example.com\": a lowercase RFC 1123 subdomain",
                )],
            ),
            bad(
                "endpoint without addresses",
                slice("IPv4", json!([{"addresses": []}]), json!([])),
                vec![(
                    "endpoints[0].addresses",
                    "Required value: must contain at least 1 address",
                )],
            ),
            bad(
                "too many endpoints",
                slice("IPv4", Value::Array(many), json!([])),
                vec![("endpoints", "Too many: 1001: must have at most 1000 items")],
            ),
            bad(
                "bad node name and hostname",
                slice(
                    "IPv4",
                    json!([{"addresses": ["10.42.0.1"], "nodeName": "Node_A", "hostname": "a.b"}]),
                    json!([]),
                ),
                vec![
                    (
                        "endpoints[0].nodeName",
                        "Invalid value: \"Node_A\": a lowercase RFC 1123 subdomain",
                    ),
                    (
                        "endpoints[0].hostname",
                        "Invalid value: \"a.b\": must not contain dots",
                    ),
                ],
            ),
            bad(
                "duplicate zone hints",
                slice(
                    "IPv4",
                    json!([{"addresses": ["10.42.0.1"], "hints": {"forZones": [{"name": "a"}, {"name": "a"}]}}]),
                    json!([]),
                ),
                vec![(
                    "endpoints[0].hints.forZones[1].name",
                    "Duplicate value: \"a\"",
                )],
            ),
            bad(
                "bad port name",
                slice(
                    "IPv4",
                    json!([]),
                    json!([{"name": "Http", "port": 80, "protocol": "TCP"}]),
                ),
                vec![(
                    "ports[0].name",
                    "Invalid value: \"Http\": a lowercase RFC 1123 label",
                )],
            ),
            bad(
                "duplicate port names",
                slice(
                    "IPv4",
                    json!([]),
                    json!([{"name": "a", "port": 80}, {"name": "a", "port": 81}]),
                ),
                vec![("ports[1].name", "Duplicate value: \"a\"")],
            ),
            bad(
                "two unnamed ports",
                slice("IPv4", json!([]), json!([{"port": 80}, {"port": 81}])),
                vec![("ports[1].name", "Duplicate value: \"\"")],
            ),
            bad(
                "unknown port protocol",
                slice(
                    "IPv4",
                    json!([]),
                    json!([{"name": "a", "port": 80, "protocol": "ICMP"}]),
                ),
                vec![(
                    "ports[0].protocol",
                    "Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                )],
            ),
            update(
                "address type is immutable",
                slice("IPv4", json!([]), json!([])),
                slice("IPv6", json!([]), json!([])),
                vec![("addressType", "Invalid value: \"IPv6\": field is immutable")],
            ),
        ],
    );
}

fn policy(spec: Value) -> Value {
    json!({"metadata": {"name": "np", "namespace": "default"}, "spec": spec})
}

#[test]
fn network_policies() {
    run(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        vec![
            ok(
                "full policy",
                policy(json!({"podSelector": {"matchLabels": {"app": "db"}},
                    "ingress": [{"from": [{"podSelector": {"matchExpressions": [{"key": "role", "operator": "In", "values": ["api"]}]},
                                           "namespaceSelector": {}},
                                          {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
                                 "ports": [{"protocol": "TCP", "port": 5432}, {"port": "metrics"}, {"port": 8000, "endPort": 9000}]}],
                    "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}]}],
                    "policyTypes": ["Ingress", "Egress"]})),
            ),
            ok(
                "empty selector denies all",
                policy(json!({"podSelector": {}, "policyTypes": ["Ingress"]})),
            ),
            bad(
                "bad selector operator",
                policy(
                    json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]}}),
                ),
                vec![(
                    "spec.podSelector.matchExpressions[0].operator",
                    "Invalid value: \"Equals\": not a valid selector operator",
                )],
            ),
            bad(
                "Exists with values",
                policy(
                    json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b"]}]}}),
                ),
                vec![(
                    "spec.podSelector.matchExpressions[0].values",
                    "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )],
            ),
            bad(
                "bad selector key and value",
                policy(
                    json!({"podSelector": {"matchExpressions": [{"key": "a b", "operator": "In", "values": ["-x"]}]}}),
                ),
                vec![
                    (
                        "spec.podSelector.matchExpressions[0].key",
                        "Invalid value: \"a b\": name part must consist",
                    ),
                    (
                        "spec.podSelector.matchExpressions[0].values[0]",
                        "Invalid value: \"-x\": a valid label must be",
                    ),
                ],
            ),
            bad(
                "bad matchLabels",
                policy(json!({"podSelector": {"matchLabels": {"a": "b c"}}})),
                vec![(
                    "spec.podSelector.matchLabels",
                    "Invalid value: \"b c\": a valid label must be",
                )],
            ),
            bad(
                "unknown protocol",
                policy(json!({"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]})),
                vec![(
                    "spec.ingress[0].ports[0].protocol",
                    "Unsupported value: \"ICMP\": supported values: \"TCP\", \"UDP\", \"SCTP\"",
                )],
            ),
            bad(
                "port out of range",
                policy(json!({"podSelector": {}, "ingress": [{"ports": [{"port": 70000}]}]})),
                vec![(
                    "spec.ingress[0].ports[0].port",
                    "Invalid value: 70000: must be between 1 and 65535, inclusive",
                )],
            ),
            bad(
                "endPort below port",
                policy(
                    json!({"podSelector": {}, "egress": [{"ports": [{"port": 9000, "endPort": 8000}]}]}),
                ),
                vec![(
                    "spec.egress[0].ports[0].endPort",
                    "Invalid value: 8000: must be greater than or equal to `port`",
                )],
            ),
            bad(
                "endPort with a named port",
                policy(
                    json!({"podSelector": {}, "ingress": [{"ports": [{"port": "http", "endPort": 9000}]}]}),
                ),
                vec![(
                    "spec.ingress[0].ports[0].endPort",
                    "Invalid value: 9000: may not be specified when `port` is non-numeric",
                )],
            ),
            bad(
                "endPort without a port",
                policy(json!({"podSelector": {}, "ingress": [{"ports": [{"endPort": 9000}]}]})),
                vec![(
                    "spec.ingress[0].ports[0].endPort",
                    "Invalid value: 9000: may not be specified when `port` is not specified",
                )],
            ),
            bad(
                "bad port name",
                policy(json!({"podSelector": {}, "ingress": [{"ports": [{"port": "Web_1"}]}]})),
                vec![(
                    "spec.ingress[0].ports[0].port",
                    "Invalid value: \"Web_1\": must contain only alpha-numeric characters",
                )],
            ),
            bad(
                "empty peer",
                policy(json!({"podSelector": {}, "ingress": [{"from": [{}]}]})),
                vec![(
                    "spec.ingress[0].from[0]",
                    "Required value: must specify a peer",
                )],
            ),
            bad(
                "ipBlock with another peer",
                policy(
                    json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]}),
                ),
                vec![(
                    "spec.ingress[0].from[0]",
                    "Forbidden: may not specify both ipBlock and another peer",
                )],
            ),
            bad(
                "ipBlock without a CIDR",
                policy(json!({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": ""}}]}]})),
                vec![("spec.egress[0].to[0].ipBlock.cidr", "Required value")],
            ),
            bad(
                "ipBlock with a bad CIDR",
                policy(
                    json!({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/40"}}]}]}),
                ),
                vec![(
                    "spec.egress[0].to[0].ipBlock.cidr",
                    "Invalid value: \"10.0.0.0/40\": must be a valid CIDR value",
                )],
            ),
            bad(
                "except outside the CIDR",
                policy(
                    json!({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24", "10.0.0.0/16"]}}]}]}),
                ),
                vec![
                    (
                        "spec.egress[0].to[0].ipBlock.except[0]",
                        "Invalid value: \"10.1.0.0/24\": must be a strict subset of `cidr`",
                    ),
                    (
                        "spec.egress[0].to[0].ipBlock.except[1]",
                        "Invalid value: \"10.0.0.0/16\": must be a strict subset of `cidr`",
                    ),
                ],
            ),
            bad(
                "unknown policy type",
                policy(json!({"podSelector": {}, "policyTypes": ["Both"]})),
                vec![(
                    "spec.policyTypes[0]",
                    "Unsupported value: \"Both\": supported values: \"Ingress\", \"Egress\"",
                )],
            ),
            bad(
                "three policy types",
                policy(json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress", "Ingress"]})),
                vec![(
                    "spec.policyTypes",
                    "Invalid value: []networking.PolicyType{\"Ingress\", \"Egress\", \"Ingress\"}: may not specify more than two policyTypes",
                )],
            ),
            update(
                "a stored invalid CIDR stays accepted",
                policy(
                    json!({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.1/33"}}]}]}),
                ),
                policy(
                    json!({"podSelector": {"matchLabels": {"a": "b"}}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.1/33"}}]}]}),
                ),
                vec![],
            ),
        ],
    );
}

fn ingress(spec: Value) -> Value {
    json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})
}

fn rule(host: &str, path_type: Value, path: &str) -> Value {
    json!({"host": host, "http": {"paths": [{"path": path, "pathType": path_type,
        "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}})
}

#[test]
fn ingresses() {
    run(
        "networking.k8s.io",
        "v1",
        "ingresses",
        vec![
            ok(
                "rules and TLS",
                ingress(
                    json!({"ingressClassName": "traefik", "rules": [rule("web.example.com", json!("Prefix"), "/"), rule("*.example.com", json!("Exact"), "/api")],
                               "tls": [{"hosts": ["web.example.com", "*.example.com"], "secretName": "web-tls"}]}),
                ),
            ),
            ok(
                "default backend only",
                ingress(
                    json!({"defaultBackend": {"service": {"name": "web", "port": {"name": "http"}}}}),
                ),
            ),
            ok(
                "resource backend",
                ingress(
                    json!({"defaultBackend": {"resource": {"apiGroup": "k8s.example.com", "kind": "StorageBucket", "name": "static"}}}),
                ),
            ),
            ok(
                "ImplementationSpecific with an empty path",
                ingress(json!({"rules": [rule("", json!("ImplementationSpecific"), "")]})),
            ),
            bad(
                "neither rules nor default backend",
                ingress(json!({})),
                vec![(
                    "spec",
                    "Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified",
                )],
            ),
            bad(
                "host that is an IP",
                ingress(json!({"rules": [rule("10.0.0.1", json!("Prefix"), "/")]})),
                vec![(
                    "spec.rules[0].host",
                    "Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address",
                )],
            ),
            bad(
                "host with an uppercase letter",
                ingress(json!({"rules": [rule("Web.example.com", json!("Prefix"), "/")]})),
                vec![(
                    "spec.rules[0].host",
                    "Invalid value: \"Web.example.com\": a lowercase RFC 1123 subdomain",
                )],
            ),
            bad(
                "bad wildcard host",
                ingress(json!({"rules": [rule("*.*.example.com", json!("Prefix"), "/")]})),
                vec![(
                    "spec.rules[0].host",
                    "Invalid value: \"*.*.example.com\": a wildcard DNS-1123 subdomain",
                )],
            ),
            bad(
                "missing path type",
                ingress(json!({"rules": [rule("a.com", Value::Null, "/")]})),
                vec![(
                    "spec.rules[0].http.paths[0].pathType",
                    "Required value: pathType must be specified",
                )],
            ),
            bad(
                "unknown path type",
                ingress(json!({"rules": [rule("a.com", json!("Regex"), "/")]})),
                vec![(
                    "spec.rules[0].http.paths[0].pathType",
                    "Unsupported value: \"Regex\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\"",
                )],
            ),
            bad(
                "relative Prefix path",
                ingress(json!({"rules": [rule("a.com", json!("Prefix"), "api")]})),
                vec![(
                    "spec.rules[0].http.paths[0].path",
                    "Invalid value: \"api\": must be an absolute path",
                )],
            ),
            bad(
                "Exact path with a double slash and a dot suffix",
                ingress(json!({"rules": [rule("a.com", json!("Exact"), "/a//b/.")]})),
                vec![
                    (
                        "spec.rules[0].http.paths[0].path",
                        "Invalid value: \"/a//b/.\": must not contain '//'",
                    ),
                    (
                        "spec.rules[0].http.paths[0].path",
                        "Invalid value: \"/a//b/.\": cannot end with '/.'",
                    ),
                ],
            ),
            bad(
                "no paths",
                ingress(json!({"rules": [{"host": "a.com", "http": {"paths": []}}]})),
                vec![("spec.rules[0].http.paths", "Required value")],
            ),
            bad(
                "backend service name not a DNS-1035 label",
                ingress(
                    json!({"defaultBackend": {"service": {"name": "1web", "port": {"number": 80}}}}),
                ),
                vec![(
                    "spec.defaultBackend.service.name",
                    "Invalid value: \"1web\": a DNS-1035 label",
                )],
            ),
            bad(
                "backend with both port name and number",
                ingress(
                    json!({"defaultBackend": {"service": {"name": "web", "port": {"name": "http", "number": 80}}}}),
                ),
                vec![(
                    "spec.defaultBackend",
                    "Invalid value: \"\": cannot set both port name & port number",
                )],
            ),
            bad(
                "backend without a port",
                ingress(json!({"defaultBackend": {"service": {"name": "web", "port": {}}}})),
                vec![(
                    "spec.defaultBackend",
                    "Required value: port name or number is required",
                )],
            ),
            bad(
                "backend port out of range",
                ingress(
                    json!({"defaultBackend": {"service": {"name": "web", "port": {"number": 65536}}}}),
                ),
                vec![(
                    "spec.defaultBackend.service.port.number",
                    "Invalid value: 65536: must be between 1 and 65535, inclusive",
                )],
            ),
            bad(
                "backend with both service and resource",
                ingress(
                    json!({"defaultBackend": {"service": {"name": "web", "port": {"number": 80}},
                                                  "resource": {"kind": "Bucket", "name": "b"}}}),
                ),
                vec![(
                    "spec.defaultBackend",
                    "Invalid value: \"\": cannot set both resource and service backends",
                )],
            ),
            bad(
                "backend with neither",
                ingress(json!({"defaultBackend": {}})),
                vec![(
                    "spec.defaultBackend",
                    "Invalid value: \"\": resource or service backend is required",
                )],
            ),
            bad(
                "bad TLS host and secret",
                ingress(
                    json!({"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
                               "tls": [{"hosts": ["bad_host"], "secretName": "Bad_Secret"}]}),
                ),
                vec![
                    (
                        "spec.tls[0].hosts[0]",
                        "Invalid value: \"bad_host\": a lowercase RFC 1123 subdomain",
                    ),
                    (
                        "spec.tls[0].secretName",
                        "Invalid value: \"Bad_Secret\": a lowercase RFC 1123 subdomain",
                    ),
                ],
            ),
            bad(
                "class annotation and field disagree",
                json!({"metadata": {"name": "web", "namespace": "default", "annotations": {"kubernetes.io/ingress.class": "nginx"}},
                       "spec": {"ingressClassName": "traefik", "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}),
                vec![(
                    "annotations.kubernetes.io/ingress.class",
                    "Invalid value: \"nginx\": must match `ingressClassName` when both are specified",
                )],
            ),
        ],
    );
}

#[test]
fn ingress_classes() {
    let class = |controller: &str| json!({"metadata": {"name": "traefik"}, "spec": {"controller": controller}});
    run(
        "networking.k8s.io",
        "v1",
        "ingressclasses",
        vec![
            ok(
                "domain-prefixed controller",
                class("traefik.io/ingress-controller"),
            ),
            ok(
                "cluster-scoped parameters",
                json!({"metadata": {"name": "traefik"}, "spec": {"controller": "traefik.io/c",
                       "parameters": {"apiGroup": "k8s.example.com", "kind": "Params", "name": "p", "scope": "Cluster"}}}),
            ),
            bad(
                "no controller",
                class(""),
                vec![("spec.controller", "Required value")],
            ),
            bad(
                "controller without a domain",
                class("traefik"),
                vec![(
                    "spec.controller",
                    "Invalid value: \"traefik\": must be a domain-prefixed path (such as \"acme.io/foo\")",
                )],
            ),
            bad(
                "controller with a bad domain",
                class("Traefik.io/c"),
                vec![(
                    "spec.controller",
                    "Invalid value: \"Traefik.io\": a lowercase RFC 1123 subdomain",
                )],
            ),
            bad(
                "controller too long",
                class(&format!("example.com/{}", "a".repeat(250))),
                vec![(
                    "spec.controller",
                    "Too long: may not be more than 250 bytes",
                )],
            ),
            bad(
                "namespace parameters without a namespace",
                json!({"metadata": {"name": "traefik"}, "spec": {"controller": "traefik.io/c",
                       "parameters": {"kind": "Params", "name": "p", "scope": "Namespace"}}}),
                vec![(
                    "spec.parameters.namespace",
                    "Required value: `parameters.scope` is set to 'Namespace'",
                )],
            ),
            update(
                "controller is immutable",
                class("traefik.io/a"),
                class("traefik.io/b"),
                vec![(
                    "spec.controller",
                    "Invalid value: \"traefik.io/b\": field is immutable",
                )],
            ),
        ],
    );
}
