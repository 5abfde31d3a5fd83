//! Vectors for `service` validation (kube's `TestValidateServiceCreate`,
//! `TestValidateServiceUpdate`, `TestValidateServiceExternalTrafficPolicy`,
//! `TestValidateServiceSessionAffinity*`, `TestValidateLoadBalancerClass*`).

use serde_json::{Value, json};

use super::{Case, bad, ok, run, update};

fn svc(spec: Value) -> Value {
    json!({"metadata": {"name": "s", "namespace": "default"}, "spec": spec})
}

fn with_meta(meta: Value, spec: Value) -> Value {
    let mut m = json!({"name": "s", "namespace": "default"});
    if let (Some(m), Some(extra)) = (m.as_object_mut(), meta.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    json!({"metadata": m, "spec": spec})
}

fn create_cases() -> Vec<Case> {
    vec![
        ok(
            "basic",
            svc(json!({"selector": {"app": "web"}, "ports": [{"port": 80}]})),
        ),
        ok("headless without ports", svc(json!({"clusterIP": "None"}))),
        ok(
            "ExternalName with a trailing dot",
            svc(json!({"type": "ExternalName", "externalName": "example.com."})),
        ),
        ok(
            "named ports",
            svc(
                json!({"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443, "targetPort": "https"}]}),
            ),
        ),
        ok(
            "dual-stack cluster IPs",
            svc(
                json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "2001:db8::1"],
                       "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack",
                       "ports": [{"port": 80}]}),
            ),
        ),
        ok(
            "a numeric port name is a DNS label",
            svc(json!({"ports": [{"name": "123", "port": 80}]})),
        ),
        ok(
            "SCTP",
            svc(json!({"ports": [{"port": 80, "protocol": "SCTP"}]})),
        ),
        ok(
            "targetPort name",
            svc(json!({"ports": [{"port": 80, "targetPort": "http"}]})),
        ),
        ok(
            "targetPort zero means the port",
            svc(json!({"ports": [{"port": 80, "targetPort": 0}]})),
        ),
        ok(
            "NodePort with a node port",
            svc(json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30001}]})),
        ),
        ok(
            "one node port for TCP and UDP",
            svc(json!({"type": "NodePort", "ports": [
                {"name": "a", "port": 53, "protocol": "TCP", "nodePort": 30053},
                {"name": "b", "port": 53, "protocol": "UDP", "nodePort": 30053}]})),
        ),
        ok(
            "kube-dns ports",
            svc(
                json!({"clusterIP": "10.43.0.10", "clusterIPs": ["10.43.0.10"], "ipFamilies": ["IPv4"],
                       "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                                 {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                                 {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}]}),
            ),
        ),
        ok(
            "external IP with the Local policy",
            svc(
                json!({"externalIPs": ["192.0.2.10"], "externalTrafficPolicy": "Local", "ports": [{"port": 80}]}),
            ),
        ),
        ok(
            "ClientIP affinity at the maximum",
            svc(
                json!({"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 86400}},
                       "ports": [{"port": 80}]}),
            ),
        ),
        ok(
            "ClientIP affinity defaulted",
            svc(json!({"sessionAffinity": "ClientIP", "ports": [{"port": 80}]})),
        ),
        ok(
            "LoadBalancer with the Local policy and a health check port",
            svc(
                json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 30000,
                       "ports": [{"port": 80}]}),
            ),
        ),
        ok(
            "space-padded source range",
            svc(
                json!({"type": "LoadBalancer", "loadBalancerSourceRanges": [" 10.0.0.0/8"], "ports": [{"port": 80}]}),
            ),
        ),
        bad(
            "no ports",
            svc(json!({"selector": {"a": "b"}})),
            vec![("spec.ports", "Required value")],
        ),
        bad(
            "port zero",
            svc(json!({"ports": [{"port": 0}]})),
            vec![
                (
                    "spec.ports[0].port",
                    "Invalid value: 0: must be between 1 and 65535, inclusive",
                ),
                (
                    "spec.ports[0].targetPort",
                    "Invalid value: 0: must be between 1 and 65535, inclusive",
                ),
            ],
        ),
        bad(
            "port above 65535",
            svc(json!({"ports": [{"port": 65536, "targetPort": 80}]})),
            vec![(
                "spec.ports[0].port",
                "Invalid value: 65536: must be between 1 and 65535, inclusive",
            )],
        ),
        bad(
            "two unnamed ports",
            svc(json!({"ports": [{"port": 80}, {"port": 81}]})),
            vec![
                ("spec.ports[0].name", "Required value"),
                ("spec.ports[1].name", "Required value"),
            ],
        ),
        bad(
            "port name with an underscore",
            svc(json!({"ports": [{"name": "Web_1", "port": 80}]})),
            vec![(
                "spec.ports[0].name",
                "Invalid value: \"Web_1\": a lowercase RFC 1123 label",
            )],
        ),
        bad(
            "port name too long",
            svc(json!({"ports": [{"name": "a".repeat(64), "port": 80}]})),
            vec![("spec.ports[0].name", "Invalid value: \"aaaa")],
        ),
        bad(
            "port name that would break a rule set",
            svc(json!({"ports": [{"name": "x\";}", "port": 80}]})),
            vec![(
                "spec.ports[0].name",
                "Invalid value: \"x\\\";}\": a lowercase RFC 1123 label",
            )],
        ),
        bad(
            "duplicate port names",
            svc(json!({"ports": [{"name": "http", "port": 80}, {"name": "http", "port": 81}]})),
            vec![("spec.ports[1].name", "Duplicate value: \"http\"")],
        ),
        bad(
            "unknown protocol",
            svc(json!({"ports": [{"port": 80, "protocol": "HTTP"}]})),
            vec![(
                "spec.ports[0].protocol",
                "Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            )],
        ),
        bad(
            "lowercase protocol",
            svc(json!({"ports": [{"port": 80, "protocol": "tcp"}]})),
            vec![("spec.ports[0].protocol", "Unsupported value: \"tcp\"")],
        ),
        bad(
            "targetPort name with an underscore",
            svc(json!({"ports": [{"port": 80, "targetPort": "Web_1"}]})),
            vec![(
                "spec.ports[0].targetPort",
                "Invalid value: \"Web_1\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
            )],
        ),
        bad(
            "targetPort number as a string",
            svc(json!({"ports": [{"port": 80, "targetPort": "8080"}]})),
            vec![(
                "spec.ports[0].targetPort",
                "Invalid value: \"8080\": must contain at least one letter (a-z)",
            )],
        ),
        bad(
            "targetPort above 65535",
            svc(json!({"ports": [{"port": 80, "targetPort": 70000}]})),
            vec![(
                "spec.ports[0].targetPort",
                "Invalid value: 70000: must be between 1 and 65535, inclusive",
            )],
        ),
        bad(
            "targetPort name too long",
            svc(json!({"ports": [{"port": 80, "targetPort": "a-very-long-port-name"}]})),
            vec![(
                "spec.ports[0].targetPort",
                "Invalid value: \"a-very-long-port-name\": must be no more than 15 characters",
            )],
        ),
        bad(
            "nodePort on a ClusterIP service",
            svc(json!({"ports": [{"port": 80, "nodePort": 30001}]})),
            vec![(
                "spec.ports[0].nodePort",
                "Forbidden: may not be used when `type` is 'ClusterIP'",
            )],
        ),
        bad(
            "duplicate node ports",
            svc(
                json!({"type": "NodePort", "ports": [{"name": "a", "port": 80, "nodePort": 30001},
                                                      {"name": "b", "port": 81, "nodePort": 30001}]}),
            ),
            vec![("spec.ports[1].nodePort", "Duplicate value: 30001")],
        ),
        bad(
            "duplicate port and protocol",
            svc(json!({"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 80}]})),
            vec![(
                "spec.ports[1]",
                "Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\"",
            )],
        ),
        bad(
            "unknown type",
            svc(json!({"type": "Foo", "ports": [{"port": 80}]})),
            vec![(
                "spec.type",
                "Unsupported value: \"Foo\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
            )],
        ),
        bad(
            "cluster IP that is not an IP",
            svc(json!({"clusterIP": "10.0.0.1; rm -rf /", "ports": [{"port": 80}]})),
            vec![(
                "spec.clusterIPs[0]",
                "Invalid value: \"10.0.0.1; rm -rf /\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            )],
        ),
        bad(
            "clusterIPs not starting with clusterIP",
            svc(
                json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.2"], "ports": [{"port": 80}]}),
            ),
            vec![(
                "spec.clusterIPs",
                "Invalid value: []string{\"10.0.0.2\"}: first value must match `clusterIP`",
            )],
        ),
        bad(
            "clusterIPs without clusterIP",
            svc(json!({"clusterIPs": ["10.0.0.2"], "ports": [{"port": 80}]})),
            vec![(
                "spec.clusterIPs",
                "Invalid value: []string{\"10.0.0.2\"}: must be empty when `clusterIP` is not specified",
            )],
        ),
        bad(
            "three cluster IPs",
            svc(
                json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "2001:db8::1", "10.0.0.2"],
                       "ports": [{"port": 80}]}),
            ),
            vec![(
                "spec.clusterIPs",
                "Invalid value: []string{\"10.0.0.1\", \"2001:db8::1\", \"10.0.0.2\"}: may only hold up to 2 values",
            )],
        ),
        bad(
            "two IPv4 cluster IPs",
            svc(
                json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "10.0.0.2"], "ports": [{"port": 80}]}),
            ),
            vec![(
                "spec.clusterIPs",
                "Invalid value: []string{\"10.0.0.1\", \"10.0.0.2\"}: may specify no more than one IP for each IP family",
            )],
        ),
        bad(
            "None then an IP",
            svc(
                json!({"clusterIP": "None", "clusterIPs": ["None", "10.0.0.1"], "ports": [{"port": 80}]}),
            ),
            vec![(
                "spec.clusterIPs",
                "Invalid value: []string{\"None\", \"10.0.0.1\"}: 'None' must be the first and only value",
            )],
        ),
        bad(
            "unknown IP family",
            svc(json!({"ipFamilies": ["IPv5"], "ports": [{"port": 80}]})),
            vec![(
                "spec.ipFamilies[0]",
                "Unsupported value: \"IPv5\": supported values: \"IPv4\", \"IPv6\"",
            )],
        ),
        bad(
            "duplicate IP family",
            svc(json!({"ipFamilies": ["IPv4", "IPv4"], "ports": [{"port": 80}]})),
            vec![("spec.ipFamilies[1]", "Duplicate value: \"IPv4\"")],
        ),
        bad(
            "unknown IP family policy",
            svc(json!({"ipFamilyPolicy": "Dual", "ports": [{"port": 80}]})),
            vec![(
                "spec.ipFamilyPolicy",
                "Unsupported value: \"Dual\": supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\"",
            )],
        ),
        bad(
            "IPv4 cluster IP for an IPv6 family",
            svc(json!({"clusterIP": "10.0.0.1", "ipFamilies": ["IPv6"], "ports": [{"port": 80}]})),
            vec![(
                "spec.clusterIPs[0]",
                "Invalid value: \"10.0.0.1\": expected an IPv6 value as indicated by `ipFamilies[0]`",
            )],
        ),
        bad(
            "headless LoadBalancer",
            svc(json!({"type": "LoadBalancer", "clusterIP": "None", "ports": [{"port": 80}]})),
            vec![(
                "spec.clusterIPs[0]",
                "Invalid value: \"None\": may not be set to 'None' for LoadBalancer services",
            )],
        ),
        bad(
            "headless NodePort",
            svc(json!({"type": "NodePort", "clusterIP": "None", "ports": [{"port": 80}]})),
            vec![(
                "spec.clusterIPs[0]",
                "Invalid value: \"None\": may not be set to 'None' for NodePort services",
            )],
        ),
        bad(
            "ExternalName with a cluster IP",
            svc(
                json!({"type": "ExternalName", "externalName": "example.com", "clusterIP": "10.0.0.1"}),
            ),
            vec![(
                "spec.clusterIPs",
                "Forbidden: may not be set for ExternalName services",
            )],
        ),
        bad(
            "ExternalName without a name",
            svc(json!({"type": "ExternalName"})),
            vec![("spec.externalName", "Required value")],
        ),
        bad(
            "ExternalName not a DNS name",
            svc(json!({"type": "ExternalName", "externalName": "-foo.com"})),
            vec![(
                "spec.externalName",
                "Invalid value: \"-foo.com\": a lowercase RFC 1123 subdomain",
            )],
        ),
        bad(
            "ExternalName with IP families",
            svc(
                json!({"type": "ExternalName", "externalName": "example.com", "ipFamilies": ["IPv4"],
                       "ipFamilyPolicy": "SingleStack"}),
            ),
            vec![
                (
                    "spec.ipFamilies",
                    "Forbidden: may not be set for ExternalName services",
                ),
                (
                    "spec.ipFamilyPolicy",
                    "Forbidden: may not be set for ExternalName services",
                ),
            ],
        ),
        bad(
            "external IP that is not an IP",
            svc(json!({"externalIPs": ["1.2.3.4; rm"], "ports": [{"port": 80}]})),
            vec![(
                "spec.externalIPs[0]",
                "Invalid value: \"1.2.3.4; rm\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            )],
        ),
        bad(
            "loopback external IP",
            svc(json!({"externalIPs": ["127.0.0.1"], "ports": [{"port": 80}]})),
            vec![(
                "spec.externalIPs[0]",
                "Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)",
            )],
        ),
        bad(
            "unspecified external IP",
            svc(json!({"externalIPs": ["0.0.0.0"], "ports": [{"port": 80}]})),
            vec![(
                "spec.externalIPs[0]",
                "Invalid value: \"0.0.0.0\": may not be unspecified (0.0.0.0)",
            )],
        ),
        bad(
            "link-local external IP",
            svc(json!({"externalIPs": ["169.254.1.1"], "ports": [{"port": 80}]})),
            vec![(
                "spec.externalIPs[0]",
                "Invalid value: \"169.254.1.1\": may not be in the link-local range (169.254.0.0/16, fe80::/10)",
            )],
        ),
        bad(
            "link-local multicast external IP",
            svc(json!({"externalIPs": ["224.0.0.10"], "ports": [{"port": 80}]})),
            vec![(
                "spec.externalIPs[0]",
                "Invalid value: \"224.0.0.10\": may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
            )],
        ),
        bad(
            "IPv6 link-local external IP",
            svc(json!({"externalIPs": ["fe80::1"], "ports": [{"port": 80}]})),
            vec![(
                "spec.externalIPs[0]",
                "Invalid value: \"fe80::1\": may not be in the link-local range",
            )],
        ),
        bad(
            "IPv4-mapped loopback external IP",
            svc(json!({"externalIPs": ["::ffff:127.0.0.1"], "ports": [{"port": 80}]})),
            vec![(
                "spec.externalIPs[0]",
                "Invalid value: \"::ffff:127.0.0.1\": may not be in the loopback range",
            )],
        ),
        bad(
            "unknown session affinity",
            svc(json!({"sessionAffinity": "Sticky", "ports": [{"port": 80}]})),
            vec![(
                "spec.sessionAffinity",
                "Unsupported value: \"Sticky\": supported values: \"ClientIP\", \"None\"",
            )],
        ),
        bad(
            "ClientIP timeout zero",
            svc(
                json!({"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 0}},
                       "ports": [{"port": 80}]}),
            ),
            vec![(
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                "Invalid value: 0: must be greater than 0 and less than 86400",
            )],
        ),
        bad(
            "ClientIP timeout above a day",
            svc(
                json!({"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 86401}},
                       "ports": [{"port": 80}]}),
            ),
            vec![(
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                "Invalid value: 86401: must be greater than 0 and less than 86400",
            )],
        ),
        bad(
            "affinity config without ClientIP",
            svc(
                json!({"sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}}, "ports": [{"port": 80}]}),
            ),
            vec![(
                "spec.sessionAffinityConfig",
                "Forbidden: must not be set when session affinity is None",
            )],
        ),
        bad(
            "unknown external traffic policy",
            svc(
                json!({"type": "NodePort", "externalTrafficPolicy": "Global", "ports": [{"port": 80}]}),
            ),
            vec![(
                "spec.externalTrafficPolicy",
                "Unsupported value: \"Global\": supported values: \"Cluster\", \"Local\"",
            )],
        ),
        bad(
            "external traffic policy on an internal service",
            svc(json!({"externalTrafficPolicy": "Local", "ports": [{"port": 80}]})),
            vec![(
                "spec.externalTrafficPolicy",
                "Invalid value: \"Local\": may only be set for externally-accessible services",
            )],
        ),
        bad(
            "unknown internal traffic policy",
            svc(json!({"internalTrafficPolicy": "Node", "ports": [{"port": 80}]})),
            vec![(
                "spec.internalTrafficPolicy",
                "Unsupported value: \"Node\": supported values: \"Cluster\", \"Local\"",
            )],
        ),
        bad(
            "health check port without the Local policy",
            svc(json!({"healthCheckNodePort": 30000, "ports": [{"port": 80}]})),
            vec![(
                "spec.healthCheckNodePort",
                "Invalid value: 30000: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            )],
        ),
        bad(
            "source ranges on a ClusterIP service",
            svc(json!({"loadBalancerSourceRanges": ["10.0.0.0/8"], "ports": [{"port": 80}]})),
            vec![(
                "spec.LoadBalancerSourceRanges",
                "Forbidden: may only be used when `type` is 'LoadBalancer'",
            )],
        ),
        bad(
            "source range that is not a CIDR",
            svc(
                json!({"type": "LoadBalancer", "loadBalancerSourceRanges": ["10.0.0.0/33"], "ports": [{"port": 80}]}),
            ),
            vec![(
                "spec.LoadBalancerSourceRanges[0]",
                "Invalid value: \"10.0.0.0/33\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            )],
        ),
        bad(
            "source ranges annotation with a bad CIDR",
            with_meta(
                json!({"annotations": {"service.beta.kubernetes.io/load-balancer-source-ranges": "1.2.3.4/40, 10.0.0.0/8"}}),
                json!({"type": "LoadBalancer", "ports": [{"port": 80}]}),
            ),
            vec![(
                "metadata.annotations[service.beta.kubernetes.io/load-balancer-source-ranges]",
                "Invalid value: \"1.2.3.4/40\": must be a valid CIDR value",
            )],
        ),
        bad(
            "allocateLoadBalancerNodePorts on a NodePort service",
            svc(
                json!({"type": "NodePort", "allocateLoadBalancerNodePorts": true, "ports": [{"port": 80}]}),
            ),
            vec![(
                "spec.allocateLoadBalancerNodePorts",
                "Forbidden: may only be used when `type` is 'LoadBalancer'",
            )],
        ),
        bad(
            "loadBalancerClass on a ClusterIP service",
            svc(json!({"loadBalancerClass": "example.com/lb", "ports": [{"port": 80}]})),
            vec![(
                "spec.loadBalancerClass",
                "Forbidden: may only be used when `type` is 'LoadBalancer'",
            )],
        ),
        bad(
            "malformed loadBalancerClass",
            svc(
                json!({"type": "LoadBalancer", "loadBalancerClass": "bad class", "ports": [{"port": 80}]}),
            ),
            vec![(
                "spec.loadBalancerClass",
                "Invalid value: \"bad class\": name part must consist",
            )],
        ),
        bad(
            "selector with a bad value",
            svc(json!({"selector": {"app": "-x"}, "ports": [{"port": 80}]})),
            vec![(
                "spec.selector",
                "Invalid value: \"-x\": a valid label must be an empty string",
            )],
        ),
        bad(
            "unknown traffic distribution",
            svc(json!({"trafficDistribution": "Nearest", "ports": [{"port": 80}]})),
            vec![(
                "spec.trafficDistribution",
                "Unsupported value: \"Nearest\": supported values: \"PreferClose\"",
            )],
        ),
        bad(
            "malformed appProtocol",
            svc(json!({"ports": [{"port": 80, "appProtocol": "bad proto"}]})),
            vec![(
                "spec.ports[0].appProtocol",
                "Invalid value: \"bad proto\": name part must consist",
            )],
        ),
        bad(
            "topology annotations that disagree",
            with_meta(
                json!({"annotations": {"service.kubernetes.io/topology-mode": "Auto",
                                       "service.kubernetes.io/topology-aware-hints": "auto"}}),
                json!({"ports": [{"port": 80}]}),
            ),
            vec![(
                "metadata.annotations[service.kubernetes.io/topology-mode]",
                "Invalid value: \"Auto\": must match annotations[service.kubernetes.io/topology-aware-hints] when both are specified",
            )],
        ),
    ]
}

#[test]
fn service_create() {
    let n = run("", "v1", "services", create_cases());
    assert!(n >= 60, "{n}");
}

fn stored(spec: Value) -> Value {
    json!({"metadata": {"name": "s", "namespace": "default", "uid": "u"}, "spec": spec})
}

#[test]
fn service_update() {
    let cluster = json!({"type": "ClusterIP", "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"],
                         "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "ports": [{"port": 80}]});
    let node_port = json!({"type": "NodePort", "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"],
                           "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                           "externalTrafficPolicy": "Cluster", "ports": [{"port": 80, "nodePort": 30080}]});
    let dual = json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "2001:db8::1"],
                      "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]});
    let lb = |class: &str| {
        json!({"type": "LoadBalancer", "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "loadBalancerClass": class,
               "externalTrafficPolicy": "Local", "healthCheckNodePort": 30000,
               "ports": [{"port": 80, "nodePort": 30080}]})
    };
    let edit = |base: &Value, f: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        f(&mut v);
        stored(v)
    };
    run(
        "",
        "v1",
        "services",
        vec![
            update(
                "changing the cluster IP",
                stored(cluster.clone()),
                edit(&cluster, &|s| s["clusterIP"] = json!("10.0.0.2")),
                vec![(
                    "spec.clusterIPs[0]",
                    "Invalid value: []string{\"10.0.0.2\"}: may not change once set",
                )],
            ),
            update(
                "a PUT without the allocated cluster IP keeps it",
                stored(cluster.clone()),
                stored(json!({"ports": [{"port": 80}]})),
                vec![],
            ),
            update(
                "ClusterIP to ExternalName drops the cluster IP",
                stored(cluster.clone()),
                edit(&cluster, &|s| {
                    s["type"] = json!("ExternalName");
                    s["externalName"] = json!("example.com");
                }),
                vec![],
            ),
            update(
                "NodePort to ClusterIP drops unchanged node ports",
                stored(node_port.clone()),
                edit(&node_port, &|s| s["type"] = json!("ClusterIP")),
                vec![],
            ),
            update(
                "NodePort to ClusterIP with a new node port",
                stored(node_port.clone()),
                edit(&node_port, &|s| {
                    s["type"] = json!("ClusterIP");
                    s["ports"][0]["nodePort"] = json!(30081);
                }),
                vec![(
                    "spec.ports[0].nodePort",
                    "Forbidden: may not be used when `type` is 'ClusterIP'",
                )],
            ),
            update(
                "releasing the secondary cluster IP needs SingleStack",
                stored(dual.clone()),
                edit(&dual, &|s| s["clusterIPs"] = json!(["10.0.0.1"])),
                vec![(
                    "spec.ipFamilyPolicy",
                    "Invalid value: \"PreferDualStack\": must be set to 'SingleStack' when releasing the secondary clusterIP",
                )],
            ),
            update(
                "adding a secondary cluster IP",
                stored(cluster.clone()),
                edit(&cluster, &|s| {
                    s["clusterIPs"] = json!(["10.0.0.1", "2001:db8::1"]);
                    s["ipFamilies"] = json!(["IPv4", "IPv6"]);
                    s["ipFamilyPolicy"] = json!("PreferDualStack");
                }),
                vec![],
            ),
            update(
                "changing the IP family",
                stored(cluster.clone()),
                edit(&cluster, &|s| s["ipFamilies"] = json!(["IPv6"])),
                vec![
                    (
                        "spec.ipFamilies[0]",
                        "Invalid value: []string{\"IPv6\"}: may not change once set",
                    ),
                    (
                        "spec.clusterIPs[0]",
                        "Invalid value: \"10.0.0.1\": expected an IPv6 value",
                    ),
                ],
            ),
            update(
                "changing the load balancer class",
                stored(lb("a.io/x")),
                stored(lb("b.io/y")),
                vec![(
                    "spec.loadBalancerClass",
                    "Invalid value: \"b.io/y\": may not change once set",
                )],
            ),
            update(
                "changing the health check node port",
                stored(lb("a.io/x")),
                edit(&lb("a.io/x"), &|s| s["healthCheckNodePort"] = json!(30001)),
                vec![("spec.healthCheckNodePort", "Forbidden: field is immutable")],
            ),
            update(
                "ports are validated on update",
                stored(cluster.clone()),
                edit(&cluster, &|s| s["ports"][0]["protocol"] = json!("ICMP")),
                vec![("spec.ports[0].protocol", "Unsupported value: \"ICMP\"")],
            ),
        ],
    );
}
