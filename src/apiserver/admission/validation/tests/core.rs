//! Vectors for `core` validation (kube's `TestValidateEndpoints*`, `TestValidateConfigMap*`,
//! `TestValidateSecret*`, `TestValidateNamespace*`, `TestValidateNode*`,
//! `TestValidatePersistentVolume*`, `TestValidatePersistentVolumeClaim*`).

use serde_json::{Value, json};

use super::{bad, ok, run, update};

fn endpoints(subsets: Value) -> Value {
    json!({"metadata": {"name": "web", "namespace": "default"}, "subsets": subsets})
}

#[test]
fn endpoints_vectors() {
    run(
        "",
        "v1",
        "endpoints",
        vec![
            ok(
                "one subset",
                endpoints(
                    json!([{"addresses": [{"ip": "10.42.0.1", "hostname": "web-0", "nodeName": "node-a"}],
                                  "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]),
                ),
            ),
            ok(
                "headless without ports",
                endpoints(json!([{"notReadyAddresses": [{"ip": "2001:db8::5"}]}])),
            ),
            ok(
                "the API server's own endpoints on loopback",
                json!({"metadata": {"name": "kubernetes", "namespace": "default"},
                       "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]}),
            ),
            bad(
                "subset without addresses",
                endpoints(json!([{"ports": [{"port": 80, "protocol": "TCP"}]}])),
                vec![(
                    "subsets[0]",
                    "Required value: must specify `addresses` or `notReadyAddresses`",
                )],
            ),
            bad(
                "address that is not an IP",
                endpoints(json!([{"addresses": [{"ip": "web.local"}]}])),
                vec![
                    (
                        "subsets[0].addresses[0].ip",
                        "Invalid value: \"web.local\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    ),
                    (
                        "subsets[0].addresses[0].ip",
                        "Invalid value: \"web.local\": must be a valid IP address",
                    ),
                ],
            ),
            bad(
                "loopback address",
                endpoints(json!([{"addresses": [{"ip": "127.0.0.1"}]}])),
                vec![(
                    "subsets[0].addresses[0].ip",
                    "Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)",
                )],
            ),
            bad(
                "link-local not-ready address",
                endpoints(json!([{"notReadyAddresses": [{"ip": "169.254.169.254"}]}])),
                vec![(
                    "subsets[0].notReadyAddresses[0].ip",
                    "Invalid value: \"169.254.169.254\": may not be in the link-local range",
                )],
            ),
            bad(
                "IPv6 loopback and multicast",
                endpoints(json!([{"addresses": [{"ip": "::1"}, {"ip": "ff02::1"}]}])),
                vec![
                    (
                        "subsets[0].addresses[0].ip",
                        "Invalid value: \"::1\": may not be in the loopback range",
                    ),
                    (
                        "subsets[0].addresses[1].ip",
                        "Invalid value: \"ff02::1\": may not be in the link-local multicast range",
                    ),
                ],
            ),
            bad(
                "bad hostname and node name",
                endpoints(
                    json!([{"addresses": [{"ip": "10.42.0.1", "hostname": "Web_0", "nodeName": "Node A"}]}]),
                ),
                vec![
                    (
                        "subsets[0].addresses[0].hostname",
                        "Invalid value: \"Web_0\": a lowercase RFC 1123 label",
                    ),
                    (
                        "subsets[0].addresses[0].nodeName",
                        "Invalid value: \"Node A\": a lowercase RFC 1123 subdomain",
                    ),
                ],
            ),
            bad(
                "two unnamed ports",
                endpoints(json!([{"addresses": [{"ip": "10.42.0.1"}],
                                  "ports": [{"port": 80, "protocol": "TCP"}, {"port": 81, "protocol": "TCP"}]}])),
                vec![
                    ("subsets[0].ports[0].name", "Required value"),
                    ("subsets[0].ports[1].name", "Required value"),
                ],
            ),
            bad(
                "bad port, protocol and name",
                endpoints(json!([{"addresses": [{"ip": "10.42.0.1"}],
                                  "ports": [{"name": "Web", "port": 0, "protocol": "ICMP"}]}])),
                vec![
                    (
                        "subsets[0].ports[0].name",
                        "Invalid value: \"Web\": a lowercase RFC 1123 label",
                    ),
                    (
                        "subsets[0].ports[0].port",
                        "Invalid value: 0: must be between 1 and 65535, inclusive",
                    ),
                    (
                        "subsets[0].ports[0].protocol",
                        "Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                    ),
                ],
            ),
            bad(
                "port without a protocol",
                endpoints(json!([{"addresses": [{"ip": "10.42.0.1"}], "ports": [{"port": 80}]}])),
                vec![("subsets[0].ports[0].protocol", "Required value")],
            ),
        ],
    );
}

fn cm(data: Value) -> Value {
    let mut v = json!({"metadata": {"name": "cm", "namespace": "default"}});
    if let (Some(m), Some(extra)) = (v.as_object_mut(), data.as_object()) {
        for (k, val) in extra {
            m.insert(k.clone(), val.clone());
        }
    }
    v
}

fn secret(ty: &str, body: Value) -> Value {
    let mut v = json!({"metadata": {"name": "s", "namespace": "default"}, "type": ty});
    if let (Some(m), Some(extra)) = (v.as_object_mut(), body.as_object()) {
        for (k, val) in extra {
            m.insert(k.clone(), val.clone());
        }
    }
    v
}

#[test]
fn config_maps_and_secrets() {
    let big = "x".repeat(1024 * 1024 / 2 + 1);
    run(
        "",
        "v1",
        "configmaps",
        vec![
            ok(
                "valid keys",
                cm(
                    json!({"data": {"key.name": "a", "KEY_NAME": "b", "key-name": "c"}, "binaryData": {"bin": "AAE="}}),
                ),
            ),
            bad(
                "key with a slash",
                cm(json!({"data": {"a/b": "x"}})),
                vec![(
                    "data[a/b]",
                    "Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters",
                )],
            ),
            bad(
                "key '..'",
                cm(json!({"data": {"..": "x"}})),
                vec![("data[..]", "Invalid value: \"..\": must not be '..'")],
            ),
            bad(
                "key starting with '..'",
                cm(json!({"data": {"..a": "x"}})),
                vec![(
                    "data[..a]",
                    "Invalid value: \"..a\": must not start with '..'",
                )],
            ),
            bad(
                "binary key with a space",
                cm(json!({"binaryData": {"a b": "AAE="}})),
                vec![(
                    "binaryData[a b]",
                    "Invalid value: \"a b\": a valid config key",
                )],
            ),
            bad(
                "same key in data and binaryData",
                cm(json!({"data": {"k": "x"}, "binaryData": {"k": "AAE="}})),
                vec![(
                    "data[k]",
                    "Invalid value: \"k\": duplicate of key present in binaryData",
                )],
            ),
            bad(
                "over 1 MiB",
                cm(json!({"data": {"a": big.clone(), "b": big.clone()}})),
                vec![("", "Too long: may not be more than 1048576 bytes")],
            ),
            update(
                "immutable data may not change",
                cm(json!({"immutable": true, "data": {"a": "1"}})),
                cm(json!({"immutable": true, "data": {"a": "2"}})),
                vec![(
                    "data",
                    "Forbidden: field is immutable when `immutable` is set",
                )],
            ),
            update(
                "immutable may not be unset",
                cm(json!({"immutable": true, "data": {"a": "1"}})),
                cm(json!({"immutable": false, "data": {"a": "1"}})),
                vec![(
                    "immutable",
                    "Forbidden: field is immutable when `immutable` is set",
                )],
            ),
            update(
                "immutable binaryData may not change",
                cm(json!({"immutable": true, "binaryData": {"a": "AAE="}})),
                cm(json!({"immutable": true, "binaryData": {"a": "AAI="}})),
                vec![(
                    "binaryData",
                    "Forbidden: field is immutable when `immutable` is set",
                )],
            ),
            update(
                "mutable data may change",
                cm(json!({"data": {"a": "1"}})),
                cm(json!({"data": {"a": "2"}})),
                vec![],
            ),
        ],
    );
    let tls = json!({"data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}});
    run(
        "",
        "v1",
        "secrets",
        vec![
            ok(
                "opaque",
                secret(
                    "Opaque",
                    json!({"data": {"a": "eA=="}, "stringData": {"b": "y"}}),
                ),
            ),
            ok("tls", secret("kubernetes.io/tls", tls.clone())),
            ok(
                "tls from stringData",
                secret(
                    "kubernetes.io/tls",
                    json!({"stringData": {"tls.crt": "c", "tls.key": "k"}}),
                ),
            ),
            bad(
                "tls without a key",
                secret(
                    "kubernetes.io/tls",
                    json!({"data": {"tls.crt": "Y2VydA=="}}),
                ),
                vec![("data[tls.key]", "Required value")],
            ),
            bad(
                "dockerconfigjson without its key",
                secret("kubernetes.io/dockerconfigjson", json!({"data": {}})),
                vec![("data[.dockerconfigjson]", "Required value")],
            ),
            bad(
                "dockerconfigjson that is not JSON",
                secret(
                    "kubernetes.io/dockerconfigjson",
                    json!({"data": {".dockerconfigjson": "bm90IGpzb24="}}),
                ),
                vec![(
                    "data[.dockerconfigjson]",
                    "Invalid value: \"<secret contents redacted>\"",
                )],
            ),
            ok(
                "dockerconfigjson",
                secret(
                    "kubernetes.io/dockerconfigjson",
                    json!({"stringData": {".dockerconfigjson": "{\"auths\":{}}"}}),
                ),
            ),
            bad(
                "service-account-token without its annotation",
                secret("kubernetes.io/service-account-token", json!({})),
                vec![(
                    "metadata.annotations[kubernetes.io/service-account.name]",
                    "Required value",
                )],
            ),
            bad(
                "basic-auth without username and password",
                secret("kubernetes.io/basic-auth", json!({"data": {}})),
                vec![
                    ("data[username]", "Required value"),
                    ("data[password]", "Required value"),
                ],
            ),
            ok(
                "basic-auth with a username only",
                secret(
                    "kubernetes.io/basic-auth",
                    json!({"data": {"username": ""}}),
                ),
            ),
            bad(
                "ssh-auth with an empty key",
                secret(
                    "kubernetes.io/ssh-auth",
                    json!({"data": {"ssh-privatekey": ""}}),
                ),
                vec![("data[ssh-privatekey]", "Required value")],
            ),
            bad(
                "bad data key",
                secret("Opaque", json!({"data": {"a b": "eA=="}})),
                vec![("data[a b]", "Invalid value: \"a b\": a valid config key")],
            ),
            bad(
                "bad stringData key is reported under data",
                secret("Opaque", json!({"stringData": {"a/b": "x"}})),
                vec![("data[a/b]", "Invalid value: \"a/b\": a valid config key")],
            ),
            update(
                "type is immutable",
                secret("Opaque", json!({"data": {}})),
                secret(
                    "kubernetes.io/basic-auth",
                    json!({"data": {"username": "dQ=="}}),
                ),
                vec![(
                    "type",
                    "Invalid value: \"kubernetes.io/basic-auth\": field is immutable",
                )],
            ),
            update(
                "immutable secret data",
                secret("Opaque", json!({"immutable": true, "data": {"a": "eA=="}})),
                secret("Opaque", json!({"immutable": true, "data": {"a": "eQ=="}})),
                vec![(
                    "data",
                    "Forbidden: field is immutable when `immutable` is set",
                )],
            ),
        ],
    );
}

#[test]
fn namespaces() {
    run(
        "",
        "v1",
        "namespaces",
        vec![
            ok("default finalizer", json!({"metadata": {"name": "team-a"}})),
            ok(
                "qualified finalizer",
                json!({"metadata": {"name": "team-a"}, "spec": {"finalizers": ["example.com/x"]}}),
            ),
            bad(
                "unqualified finalizer",
                json!({"metadata": {"name": "team-a"}, "spec": {"finalizers": ["custom"]}}),
                vec![(
                    "spec.finalizers",
                    "Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified",
                )],
            ),
            bad(
                "malformed finalizer",
                json!({"metadata": {"name": "team-a"}, "spec": {"finalizers": ["example.com/a b"]}}),
                vec![(
                    "spec.finalizers",
                    "Invalid value: \"example.com/a b\": name part must consist",
                )],
            ),
        ],
    );
}

fn node(spec: Value) -> Value {
    json!({"metadata": {"name": "node-a"}, "spec": spec})
}

#[test]
fn nodes() {
    run(
        "",
        "v1",
        "nodes",
        vec![
            ok(
                "kubelet registration",
                node(
                    json!({"podCIDR": "10.42.0.0/24", "podCIDRs": ["10.42.0.0/24"],
                            "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                                       {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"}]}),
                ),
            ),
            ok(
                "dual-stack pod CIDRs",
                node(json!({"podCIDRs": ["10.42.0.0/24", "fd00:42::/64"]})),
            ),
            bad(
                "pod CIDR that is not a CIDR",
                node(json!({"podCIDR": "10.42.0.0"})),
                vec![(
                    "spec.podCIDRs[0]",
                    "Invalid value: \"10.42.0.0\": must be a valid CIDR value",
                )],
            ),
            bad(
                "two IPv4 pod CIDRs",
                node(json!({"podCIDRs": ["10.42.0.0/24", "10.42.1.0/24"]})),
                vec![(
                    "spec.podCIDRs",
                    "Invalid value: []string{\"10.42.0.0/24\", \"10.42.1.0/24\"}: may specify no more than one CIDR for each IP family",
                )],
            ),
            bad(
                "duplicate pod CIDRs",
                node(json!({"podCIDRs": ["10.42.0.0/24", "10.42.0.0/24"]})),
                vec![
                    (
                        "spec.podCIDRs",
                        "Invalid value: []string{\"10.42.0.0/24\", \"10.42.0.0/24\"}: may specify no more than one CIDR",
                    ),
                    ("spec.podCIDRs[1]", "Duplicate value: \"10.42.0.0/24\""),
                ],
            ),
            bad(
                "taint with a bad key, value and effect",
                node(json!({"taints": [{"key": "bad key", "value": "-v", "effect": "NoRun"}]})),
                vec![
                    (
                        "metadata.taints[0].key",
                        "Invalid value: \"bad key\": name part must consist",
                    ),
                    (
                        "metadata.taints[0].value",
                        "Invalid value: \"-v\": a valid label must be",
                    ),
                    (
                        "metadata.taints[0].effect",
                        "Unsupported value: \"NoRun\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                    ),
                ],
            ),
            bad(
                "taint without an effect",
                node(json!({"taints": [{"key": "a"}]})),
                vec![("metadata.taints[0].effect", "Required value")],
            ),
            bad(
                "duplicate taint",
                node(
                    json!({"taints": [{"key": "a", "value": "1", "effect": "NoSchedule"}, {"key": "a", "value": "2", "effect": "NoSchedule"}]}),
                ),
                vec![(
                    "metadata.taints[1]",
                    "Duplicate value: core.Taint{Key:\"a\", Value:\"2\", Effect:\"NoSchedule\"",
                )],
            ),
            ok(
                "same key with two effects",
                node(
                    json!({"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]}),
                ),
            ),
            update(
                "pod CIDR may be set once",
                node(json!({})),
                node(json!({"podCIDR": "10.42.0.0/24", "podCIDRs": ["10.42.0.0/24"]})),
                vec![],
            ),
            update(
                "pod CIDR may not change",
                node(json!({"podCIDR": "10.42.0.0/24", "podCIDRs": ["10.42.0.0/24"]})),
                node(json!({"podCIDR": "10.42.1.0/24", "podCIDRs": ["10.42.1.0/24"]})),
                vec![(
                    "spec.podCIDRs",
                    "Forbidden: node updates may not change podCIDR except from \"\" to valid",
                )],
            ),
            update(
                "provider ID may not change",
                node(json!({"providerID": "k3s://a"})),
                node(json!({"providerID": "k3s://b"})),
                vec![(
                    "spec.providerID",
                    "Forbidden: node updates may not change providerID except from \"\" to valid",
                )],
            ),
            update(
                "taints may change",
                node(json!({"podCIDRs": ["10.42.0.0/24"]})),
                node(json!({"podCIDRs": ["10.42.0.0/24"], "unschedulable": true,
                            "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]})),
                vec![],
            ),
        ],
    );
}

fn pvc(spec: Value) -> Value {
    json!({"metadata": {"name": "data", "namespace": "default"}, "spec": spec})
}

#[test]
fn persistent_volume_claims() {
    let base =
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        f(&mut v);
        pvc(v)
    };
    let bound = |storage: &str, capacity: &str| {
        json!({"metadata": {"name": "data", "namespace": "default"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}, "volumeName": "pv-1"},
               "status": {"phase": "Bound", "capacity": {"storage": capacity}}})
    };
    run(
        "",
        "v1",
        "persistentvolumeclaims",
        vec![
            ok("basic", pvc(base.clone())),
            ok(
                "with a class and mode",
                with(&|s| {
                    s["storageClassName"] = json!("local-path");
                    s["volumeMode"] = json!("Block");
                }),
            ),
            bad(
                "no access modes",
                with(&|s| s["accessModes"] = json!([])),
                vec![(
                    "spec.accessModes",
                    "Required value: at least 1 access mode is required",
                )],
            ),
            bad(
                "unknown access mode",
                with(&|s| s["accessModes"] = json!(["ReadWriteSometimes"])),
                vec![(
                    "spec.accessModes",
                    "Unsupported value: \"ReadWriteSometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\"",
                )],
            ),
            bad(
                "ReadWriteOncePod with another mode",
                with(&|s| s["accessModes"] = json!(["ReadWriteOncePod", "ReadWriteOnce"])),
                vec![(
                    "spec.accessModes",
                    "Forbidden: may not use ReadWriteOncePod with other access modes",
                )],
            ),
            bad(
                "no storage request",
                with(&|s| s["resources"] = json!({"requests": {}})),
                vec![("spec.resources[storage]", "Required value")],
            ),
            bad(
                "zero storage",
                with(&|s| s["resources"]["requests"]["storage"] = json!("0Gi")),
                vec![(
                    "spec.resources[storage]",
                    "Invalid value: \"0\": must be greater than zero",
                )],
            ),
            bad(
                "unknown volume mode",
                with(&|s| s["volumeMode"] = json!("Raw")),
                vec![(
                    "spec.volumeMode",
                    "Unsupported value: \"Raw\": supported values: \"Block\", \"Filesystem\"",
                )],
            ),
            bad(
                "bad storage class name",
                with(&|s| s["storageClassName"] = json!("Fast_SSD")),
                vec![(
                    "spec.storageClassName",
                    "Invalid value: \"Fast_SSD\": a lowercase RFC 1123 subdomain",
                )],
            ),
            bad(
                "bad selector",
                with(&|s| {
                    s["selector"] = json!({"matchExpressions": [{"key": "a", "operator": "In"}]})
                }),
                vec![(
                    "spec.selector.matchExpressions[0].values",
                    "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                )],
            ),
            bad(
                "data source of another kind in the core group",
                with(&|s| s["dataSource"] = json!({"kind": "Pod", "name": "p"})),
                vec![(
                    "spec.dataSource",
                    "Invalid value: \"Pod\": must be 'PersistentVolumeClaim' when referencing the default apiGroup",
                )],
            ),
            update(
                "binding sets the volume name",
                pvc(base.clone()),
                with(&|s| s["volumeName"] = json!("pv-1")),
                vec![],
            ),
            update(
                "the spec is immutable",
                pvc(base.clone()),
                with(&|s| s["accessModes"] = json!(["ReadWriteMany"])),
                vec![(
                    "spec",
                    "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
                )],
            ),
            update(
                "a bound claim may grow",
                bound("1Gi", "1Gi"),
                bound("2Gi", "1Gi"),
                vec![],
            ),
            update(
                "a bound claim may not shrink below its capacity",
                bound("2Gi", "2Gi"),
                bound("1Gi", "2Gi"),
                vec![(
                    "spec.resources.requests.storage",
                    "Forbidden: field can not be less than status.capacity",
                )],
            ),
            update(
                "the volume mode is immutable",
                pvc(base.clone()),
                with(&|s| s["volumeMode"] = json!("Block")),
                vec![
                    ("spec", "Forbidden: spec is immutable after creation"),
                    ("volumeMode", "Invalid value: \"Block\": field is immutable"),
                ],
            ),
            update(
                "a class may be set where there was none",
                pvc(base.clone()),
                with(&|s| s["storageClassName"] = json!("local-path")),
                vec![],
            ),
        ],
    );
}

fn pv(spec: Value) -> Value {
    json!({"metadata": {"name": "pv-1"}, "spec": spec})
}

#[test]
fn persistent_volumes() {
    let base = json!({"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "10Gi"},
                      "hostPath": {"path": "/data/pv-1"}, "persistentVolumeReclaimPolicy": "Retain"});
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        f(&mut v);
        pv(v)
    };
    let affinity = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}]}});
    run(
        "",
        "v1",
        "persistentvolumes",
        vec![
            ok("hostPath", pv(base.clone())),
            ok(
                "local with node affinity",
                with(&|s| {
                    s.as_object_mut().map(|m| m.remove("hostPath"));
                    s["local"] = json!({"path": "/mnt/disk"});
                    s["nodeAffinity"] = affinity.clone();
                }),
            ),
            ok(
                "csi",
                with(&|s| {
                    s.as_object_mut().map(|m| m.remove("hostPath"));
                    s["csi"] = json!({"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"});
                }),
            ),
            bad(
                "no access modes",
                with(&|s| s["accessModes"] = json!([])),
                vec![("spec.accessModes", "Required value")],
            ),
            bad(
                "no capacity",
                with(&|s| {
                    s.as_object_mut()
                        .map(|m| m.remove("capacity"))
                        .map(|_| ())
                        .unwrap_or(())
                }),
                vec![
                    ("spec.capacity", "Required value"),
                    (
                        "spec.capacity",
                        "Unsupported value: null: supported values: \"storage\"",
                    ),
                ],
            ),
            bad(
                "zero capacity",
                with(&|s| s["capacity"]["storage"] = json!("0")),
                vec![(
                    "spec.capacity[storage]",
                    "Invalid value: \"0\": must be greater than zero",
                )],
            ),
            bad(
                "unknown reclaim policy",
                with(&|s| s["persistentVolumeReclaimPolicy"] = json!("Keep")),
                vec![(
                    "spec.persistentVolumeReclaimPolicy",
                    "Unsupported value: \"Keep\": supported values: \"Delete\", \"Recycle\", \"Retain\"",
                )],
            ),
            bad(
                "no source",
                with(&|s| {
                    s.as_object_mut()
                        .map(|m| m.remove("hostPath"))
                        .map(|_| ())
                        .unwrap_or(())
                }),
                vec![("spec", "Required value: must specify a volume type")],
            ),
            bad(
                "two sources",
                with(&|s| s["nfs"] = json!({"server": "nfs.local", "path": "/export"})),
                vec![(
                    "spec.nfs",
                    "Forbidden: may not specify more than 1 volume type",
                )],
            ),
            bad(
                "hostPath with a backstep",
                with(&|s| s["hostPath"]["path"] = json!("/data/../etc")),
                vec![(
                    "spec.hostPath.path",
                    "Invalid value: \"/data/../etc\": must not contain '..'",
                )],
            ),
            bad(
                "recycling the root",
                with(&|s| {
                    s["hostPath"]["path"] = json!("/");
                    s["persistentVolumeReclaimPolicy"] = json!("Recycle");
                }),
                vec![(
                    "spec.persistentVolumeReclaimPolicy",
                    "Forbidden: may not be 'recycle' for a hostPath mount of '/'",
                )],
            ),
            bad(
                "local without node affinity",
                with(&|s| {
                    s.as_object_mut().map(|m| m.remove("hostPath"));
                    s["local"] = json!({"path": "/mnt/disk"});
                }),
                vec![(
                    "spec.nodeAffinity",
                    "Required value: Local volume requires node affinity",
                )],
            ),
            bad(
                "node affinity without terms",
                with(&|s| s["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": []}})),
                vec![(
                    "spec.nodeAffinity.required.nodeSelectorTerms",
                    "Required value: must have at least one node selector term",
                )],
            ),
            bad(
                "nfs with a relative path",
                with(&|s| {
                    s.as_object_mut().map(|m| m.remove("hostPath"));
                    s["nfs"] = json!({"server": "nfs.local", "path": "export"});
                }),
                vec![(
                    "spec.nfs.path",
                    "Invalid value: \"export\": must be an absolute path",
                )],
            ),
            update(
                "the source is immutable",
                pv(base.clone()),
                with(&|s| s["hostPath"]["path"] = json!("/data/other")),
                vec![(
                    "spec.persistentvolumesource",
                    "Forbidden: spec.persistentvolumesource is immutable after creation",
                )],
            ),
            update(
                "capacity and reclaim policy may change",
                pv(base.clone()),
                with(&|s| {
                    s["capacity"]["storage"] = json!("20Gi");
                    s["persistentVolumeReclaimPolicy"] = json!("Delete");
                }),
                vec![],
            ),
        ],
    );
}
