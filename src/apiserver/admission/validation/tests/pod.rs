//! Vectors for `pod` validation (kube's `TestValidateContainers`, `TestValidateVolumes`,
//! `TestValidateVolumeMounts`, `TestValidateEnv`, `TestValidateResourceRequirements`,
//! `TestValidateProbe`, `TestValidateTolerations`, `TestValidateAffinity`,
//! `TestValidateTopologySpreadConstraints`, `TestValidatePodSpec`, `TestValidatePodUpdate`).

use serde_json::{Value, json};

use super::{Case, bad, ok, run, update};

/// A pod whose only container is `c` merged over a minimal valid one.
fn with_container(extra: Value) -> Value {
    let mut container = json!({"name": "c", "image": "busybox"});
    merge(&mut container, extra);
    json!({"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [container]}})
}

/// A pod with `extra` merged into its spec (one valid container).
fn with_spec(extra: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    merge(&mut spec, extra);
    json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})
}

fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        for (k, v) in extra {
            into.insert(k, v);
        }
    }
}

fn container_cases() -> Vec<Case> {
    vec![
        ok("minimal", with_container(json!({}))),
        bad(
            "no containers",
            json!({"metadata": {"name": "p"}, "spec": {"containers": []}}),
            vec![("spec.containers", "Required value")],
        ),
        bad(
            "no spec",
            json!({"metadata": {"name": "p"}}),
            vec![("spec.containers", "Required value")],
        ),
        bad(
            "duplicate container names",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [
                {"name": "c", "image": "a"}, {"name": "c", "image": "b"}]}}),
            vec![("spec.containers[1].name", "Duplicate value: \"c\"")],
        ),
        bad(
            "init container and container share a name",
            with_spec(json!({"initContainers": [{"name": "c", "image": "a"}]})),
            vec![("spec.containers[0].name", "Duplicate value: \"c\"")],
        ),
        bad(
            "container name not a label",
            with_container(json!({"name": "Web_1"})),
            vec![(
                "spec.containers[0].name",
                "Invalid value: \"Web_1\": a lowercase RFC 1123 label must consist of",
            )],
        ),
        bad(
            "empty container name",
            with_container(json!({"name": ""})),
            vec![("spec.containers[0].name", "Required value")],
        ),
        bad(
            "no image",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}),
            vec![("spec.containers[0].image", "Required value")],
        ),
        bad(
            "image with spaces around",
            with_container(json!({"image": " busybox "})),
            vec![(
                "spec.containers[0].image",
                "Invalid value: \" busybox \": must not have leading or trailing whitespace",
            )],
        ),
        bad(
            "bad pull policy",
            with_container(json!({"imagePullPolicy": "Sometimes"})),
            vec![(
                "spec.containers[0].imagePullPolicy",
                "Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
            )],
        ),
        bad(
            "bad termination message policy",
            with_container(json!({"terminationMessagePolicy": "Log"})),
            vec![(
                "spec.containers[0].terminationMessagePolicy",
                "Unsupported value: \"Log\": supported values: \"File\", \"FallbackToLogsOnError\"",
            )],
        ),
        bad(
            "restartPolicy on a regular container",
            with_container(json!({"restartPolicy": "Always"})),
            vec![(
                "spec.containers[0].restartPolicy",
                "Forbidden: may not be set for non-init containers",
            )],
        ),
        ok(
            "sidecar init container",
            with_spec(
                json!({"initContainers": [{"name": "side", "image": "a", "restartPolicy": "Always",
                "readinessProbe": {"exec": {"command": ["true"]}}}]}),
            ),
        ),
        bad(
            "init container restartPolicy Never",
            with_spec(
                json!({"initContainers": [{"name": "i", "image": "a", "restartPolicy": "Never"}]}),
            ),
            vec![(
                "spec.initContainers[0].restartPolicy",
                "Unsupported value: \"Never\": supported values: \"Always\"",
            )],
        ),
        bad(
            "probe on a plain init container",
            with_spec(json!({"initContainers": [{"name": "i", "image": "a",
                "livenessProbe": {"exec": {"command": ["true"]}}}]})),
            vec![(
                "spec.initContainers[0].livenessProbe",
                "Forbidden: may not be set for init containers without restartPolicy=Always",
            )],
        ),
    ]
}

fn port_cases() -> Vec<Case> {
    vec![
        ok(
            "named ports",
            with_container(
                json!({"ports": [{"name": "http", "containerPort": 80}, {"name": "dns", "containerPort": 53, "protocol": "UDP"}]}),
            ),
        ),
        ok(
            "hostPort",
            with_container(json!({"ports": [{"containerPort": 80, "hostPort": 8080}]})),
        ),
        bad(
            "port name with underscore and capital",
            with_container(json!({"ports": [{"name": "Web_1", "containerPort": 80}]})),
            vec![(
                "spec.containers[0].ports[0].name",
                "Invalid value: \"Web_1\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
            )],
        ),
        bad(
            "port name too long",
            with_container(
                json!({"ports": [{"name": "a-very-long-port-name", "containerPort": 80}]}),
            ),
            vec![(
                "spec.containers[0].ports[0].name",
                "Invalid value: \"a-very-long-port-name\": must be no more than 15 characters",
            )],
        ),
        bad(
            "port name without a letter",
            with_container(json!({"ports": [{"name": "123", "containerPort": 80}]})),
            vec![(
                "spec.containers[0].ports[0].name",
                "Invalid value: \"123\": must contain at least one letter (a-z)",
            )],
        ),
        bad(
            "port name with double hyphen",
            with_container(json!({"ports": [{"name": "a--b", "containerPort": 80}]})),
            vec![(
                "spec.containers[0].ports[0].name",
                "Invalid value: \"a--b\": must not contain consecutive hyphens",
            )],
        ),
        bad(
            "multi-byte port name",
            with_container(json!({"ports": [{"name": "é".repeat(150), "containerPort": 80}]})),
            vec![
                ("spec.containers[0].ports[0].name", "Invalid value: \""),
                ("spec.containers[0].ports[0].name", "Invalid value: \""),
                ("spec.containers[0].ports[0].name", "Invalid value: \""),
            ],
        ),
        bad(
            "duplicate port names",
            with_container(
                json!({"ports": [{"name": "http", "containerPort": 80}, {"name": "http", "containerPort": 81}]}),
            ),
            vec![(
                "spec.containers[0].ports[1].name",
                "Duplicate value: \"http\"",
            )],
        ),
        bad(
            "containerPort zero",
            with_container(json!({"ports": [{"containerPort": 0}]})),
            vec![(
                "spec.containers[0].ports[0].containerPort",
                "Required value",
            )],
        ),
        bad(
            "containerPort too high",
            with_container(json!({"ports": [{"containerPort": 65536}]})),
            vec![(
                "spec.containers[0].ports[0].containerPort",
                "Invalid value: 65536: must be between 1 and 65535, inclusive",
            )],
        ),
        bad(
            "hostPort negative",
            with_container(json!({"ports": [{"containerPort": 80, "hostPort": -1}]})),
            vec![(
                "spec.containers[0].ports[0].hostPort",
                "Invalid value: -1: must be between 1 and 65535, inclusive",
            )],
        ),
        bad(
            "bad protocol",
            with_container(json!({"ports": [{"containerPort": 80, "protocol": "ICMP"}]})),
            vec![(
                "spec.containers[0].ports[0].protocol",
                "Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            )],
        ),
        bad(
            "lowercase protocol",
            with_container(json!({"ports": [{"containerPort": 80, "protocol": "tcp"}]})),
            vec![(
                "spec.containers[0].ports[0].protocol",
                "Unsupported value: \"tcp\"",
            )],
        ),
        bad(
            "bad hostIP",
            with_container(json!({"ports": [{"containerPort": 80, "hostIP": "1.2.3.4; drop"}]})),
            vec![(
                "spec.containers[0].ports[0].hostIP",
                "Invalid value: \"1.2.3.4; drop\": must be a valid IP address",
            )],
        ),
        bad(
            "same hostPort twice",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [
                {"name": "a", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}]},
                {"name": "b", "image": "x", "ports": [{"containerPort": 81, "hostPort": 8080}]}]}}),
            vec![(
                "spec.containers[1].ports[0].hostPort",
                "Duplicate value: \"/TCP/8080\"",
            )],
        ),
        bad(
            "hostNetwork with a different hostPort",
            with_spec(
                json!({"hostNetwork": true, "containers": [{"name": "c", "image": "x",
                "ports": [{"containerPort": 80, "hostPort": 8080}]}]}),
            ),
            vec![(
                "spec.containers[0].ports[0].hostPort",
                "Invalid value: 8080: must match `containerPort` when `hostNetwork` is true",
            )],
        ),
    ]
}

fn env_cases() -> Vec<Case> {
    vec![
        ok(
            "env values and refs",
            with_container(json!({"env": [
                {"name": "A", "value": "1"},
                {"name": "my.var-1", "value": "relaxed names are allowed"},
                {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "C", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]})),
        ),
        bad(
            "env without a name",
            with_container(json!({"env": [{"value": "x"}]})),
            vec![("spec.containers[0].env[0].name", "Required value")],
        ),
        bad(
            "env name with =",
            with_container(json!({"env": [{"name": "A=B", "value": "x"}]})),
            vec![(
                "spec.containers[0].env[0].name",
                "Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
            )],
        ),
        bad(
            "env name with a newline",
            with_container(json!({"env": [{"name": "A\nB", "value": "x"}]})),
            vec![("spec.containers[0].env[0].name", "Invalid value: \"A\\nB\"")],
        ),
        bad(
            "value and valueFrom",
            with_container(json!({"env": [{"name": "A", "value": "x",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]})),
            vec![(
                "spec.containers[0].env[0].valueFrom",
                "Invalid value: \"\": may not be specified when `value` is not empty",
            )],
        ),
        bad(
            "valueFrom with two sources",
            with_container(json!({"env": [{"name": "A", "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.name"},
                "secretKeyRef": {"name": "s", "key": "k"}}}]})),
            vec![(
                "spec.containers[0].env[0].valueFrom",
                "Invalid value: \"\": may not have more than one field specified at a time",
            )],
        ),
        bad(
            "valueFrom with no source",
            with_container(json!({"env": [{"name": "A", "valueFrom": {}}]})),
            vec![(
                "spec.containers[0].env[0].valueFrom",
                "Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            )],
        ),
        bad(
            "configMapKeyRef with a bad key",
            with_container(json!({"env": [{"name": "A", "valueFrom": {
                "configMapKeyRef": {"name": "cm", "key": "a/b"}}}]})),
            vec![(
                "spec.containers[0].env[0].valueFrom.configMapKeyRef.key",
                "Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters",
            )],
        ),
        bad(
            "envFrom with both refs",
            with_container(
                json!({"envFrom": [{"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}}]}),
            ),
            vec![(
                "spec.containers[0].envFrom[0]",
                "Invalid value: \"\": may not have more than one field specified at a time",
            )],
        ),
    ]
}

fn resource_cases() -> Vec<Case> {
    vec![
        ok(
            "requests below limits",
            with_container(
                json!({"resources": {"requests": {"cpu": "500m", "memory": "64Mi"},
                "limits": {"cpu": 1, "memory": "128Mi"}}}),
            ),
        ),
        ok(
            "extended resource with equal request and limit",
            with_container(json!({"resources": {"requests": {"example.com/gpu": "2"},
                "limits": {"example.com/gpu": "2"}}})),
        ),
        bad(
            "cpu request above limit",
            with_container(
                json!({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}),
            ),
            vec![(
                "spec.containers[0].resources.requests",
                "Invalid value: \"2\": must be less than or equal to cpu limit of 1",
            )],
        ),
        bad(
            "memory request above limit",
            with_container(
                json!({"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}}),
            ),
            vec![(
                "spec.containers[0].resources.requests",
                "Invalid value: \"2Gi\": must be less than or equal to memory limit of 1Gi",
            )],
        ),
        bad(
            "negative limit",
            with_container(json!({"resources": {"limits": {"memory": "-1"}}})),
            vec![(
                "spec.containers[0].resources.limits[memory]",
                "Invalid value: \"-1\": must be greater than or equal to 0",
            )],
        ),
        bad(
            "quantity that does not parse",
            with_container(json!({"resources": {"limits": {"cpu": "lots"}}})),
            vec![(
                "spec.containers[0].resources.limits[cpu]",
                "Invalid value: \"lots\": must be a valid resource quantity",
            )],
        ),
        bad(
            "unknown resource without a domain",
            with_container(json!({"resources": {"limits": {"disk": "1"}}})),
            vec![
                (
                    "spec.containers[0].resources.limits[disk]",
                    "Invalid value: \"disk\": must be a standard resource type or fully qualified",
                ),
                (
                    "spec.containers[0].resources.limits[disk]",
                    "Invalid value: \"disk\": must be a standard resource for containers",
                ),
            ],
        ),
        bad(
            "quota resource on a container",
            with_container(json!({"resources": {"limits": {"pods": "1"}}})),
            vec![(
                "spec.containers[0].resources.limits[pods]",
                "Invalid value: \"pods\": must be a standard resource for containers",
            )],
        ),
        bad(
            "extended resource request differs from limit",
            with_container(json!({"resources": {"requests": {"example.com/gpu": "1"},
                "limits": {"example.com/gpu": "2"}}})),
            vec![(
                "spec.containers[0].resources.requests",
                "Invalid value: \"1\": must be equal to example.com/gpu limit of 2",
            )],
        ),
        bad(
            "extended resource request without a limit",
            with_container(json!({"resources": {"requests": {"example.com/gpu": "1"}}})),
            vec![(
                "spec.containers[0].resources.limits",
                "Required value: Limit must be set for non overcommitable resources",
            )],
        ),
        bad(
            "fractional extended resource",
            with_container(json!({"resources": {"limits": {"example.com/gpu": "500m"}}})),
            vec![(
                "spec.containers[0].resources.limits[example.com/gpu]",
                "Invalid value: \"500m\": must be an integer",
            )],
        ),
    ]
}

fn probe_cases() -> Vec<Case> {
    vec![
        ok(
            "http, tcp, exec and grpc probes",
            with_container(json!({
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
                "readinessProbe": {"tcpSocket": {"port": "http"}},
                "startupProbe": {"exec": {"command": ["true"]}},
                "ports": [{"name": "http", "containerPort": 80}]})),
        ),
        ok(
            "grpc probe",
            with_container(json!({"livenessProbe": {"grpc": {"port": 9000}}})),
        ),
        bad(
            "probe without a handler",
            with_container(json!({"livenessProbe": {"periodSeconds": 5}})),
            vec![(
                "spec.containers[0].livenessProbe",
                "Required value: must specify a handler type",
            )],
        ),
        bad(
            "probe with two handlers",
            with_container(json!({"readinessProbe": {"exec": {"command": ["true"]},
                "httpGet": {"port": 80}}})),
            vec![(
                "spec.containers[0].readinessProbe.httpGet",
                "Forbidden: may not specify more than 1 handler type",
            )],
        ),
        bad(
            "exec without a command",
            with_container(json!({"livenessProbe": {"exec": {"command": []}}})),
            vec![(
                "spec.containers[0].livenessProbe.exec.command",
                "Required value",
            )],
        ),
        bad(
            "httpGet with a bad port name",
            with_container(json!({"livenessProbe": {"httpGet": {"port": "Web_1"}}})),
            vec![(
                "spec.containers[0].livenessProbe.httpGet.port",
                "Invalid value: \"Web_1\": must contain only alpha-numeric characters",
            )],
        ),
        bad(
            "httpGet with port 0",
            with_container(json!({"livenessProbe": {"httpGet": {"port": 0}}})),
            vec![(
                "spec.containers[0].livenessProbe.httpGet.port",
                "Invalid value: 0: must be between 1 and 65535, inclusive",
            )],
        ),
        bad(
            "httpGet with a bad scheme",
            with_container(json!({"livenessProbe": {"httpGet": {"port": 80, "scheme": "FTP"}}})),
            vec![(
                "spec.containers[0].livenessProbe.httpGet.scheme",
                "Unsupported value: \"FTP\": supported values: \"HTTP\", \"HTTPS\"",
            )],
        ),
        bad(
            "negative period",
            with_container(
                json!({"livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": -1}}),
            ),
            vec![(
                "spec.containers[0].livenessProbe.periodSeconds",
                "Invalid value: -1: must be greater than or equal to 0",
            )],
        ),
        bad(
            "liveness successThreshold above 1",
            with_container(
                json!({"livenessProbe": {"exec": {"command": ["true"]}, "successThreshold": 2}}),
            ),
            vec![(
                "spec.containers[0].livenessProbe.successThreshold",
                "Invalid value: 2: must be 1",
            )],
        ),
        bad(
            "lifecycle hook without a handler",
            with_container(json!({"lifecycle": {"preStop": {}}})),
            vec![(
                "spec.containers[0].lifecycle.preStop",
                "Required value: must specify a handler type",
            )],
        ),
        ok(
            "lifecycle sleep",
            with_container(json!({"lifecycle": {"preStop": {"sleep": {"seconds": 5}}}})),
        ),
    ]
}

fn volume_cases() -> Vec<Case> {
    vec![
        ok(
            "every common volume type",
            with_spec(json!({"volumes": [
                {"name": "a", "emptyDir": {}},
                {"name": "b", "hostPath": {"path": "/var/lib/x", "type": "DirectoryOrCreate"}},
                {"name": "c", "configMap": {"name": "cm", "items": [{"key": "k", "path": "dir/file"}]}},
                {"name": "d", "secret": {"secretName": "s", "defaultMode": 0o400}},
                {"name": "e", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "f", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                {"name": "g", "projected": {"sources": [{"configMap": {"name": "cm"}}]}}]})),
        ),
        bad(
            "volume without a type",
            with_spec(json!({"volumes": [{"name": "data"}]})),
            vec![(
                "spec.volumes[0]",
                "Required value: must specify a volume type",
            )],
        ),
        bad(
            "volume with two types",
            with_spec(
                json!({"volumes": [{"name": "data", "emptyDir": {}, "hostPath": {"path": "/x"}}]}),
            ),
            vec![(
                "spec.volumes[0].emptyDir",
                "Forbidden: may not specify more than 1 volume type",
            )],
        ),
        bad(
            "volume name not a label",
            with_spec(json!({"volumes": [{"name": "Data_1", "emptyDir": {}}]})),
            vec![(
                "spec.volumes[0].name",
                "Invalid value: \"Data_1\": a lowercase RFC 1123 label",
            )],
        ),
        bad(
            "volume without a name",
            with_spec(json!({"volumes": [{"emptyDir": {}}]})),
            vec![("spec.volumes[0].name", "Required value")],
        ),
        bad(
            "duplicate volume names",
            with_spec(
                json!({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}]}),
            ),
            vec![("spec.volumes[1].name", "Duplicate value: \"a\"")],
        ),
        bad(
            "hostPath with ..",
            with_spec(json!({"volumes": [{"name": "a", "hostPath": {"path": "/var/../etc"}}]})),
            vec![(
                "spec.volumes[0].hostPath.path",
                "Invalid value: \"/var/../etc\": must not contain '..'",
            )],
        ),
        bad(
            "hostPath with a bad type",
            with_spec(
                json!({"volumes": [{"name": "a", "hostPath": {"path": "/x", "type": "Folder"}}]}),
            ),
            vec![(
                "spec.volumes[0].hostPath.type",
                "Unsupported value: \"Folder\"",
            )],
        ),
        bad(
            "configMap without a name",
            with_spec(json!({"volumes": [{"name": "a", "configMap": {}}]})),
            vec![("spec.volumes[0].configMap.name", "Required value")],
        ),
        bad(
            "secret without a name",
            with_spec(json!({"volumes": [{"name": "a", "secret": {}}]})),
            vec![("spec.volumes[0].secret.secretName", "Required value")],
        ),
        bad(
            "item path absolute",
            with_spec(json!({"volumes": [{"name": "a", "configMap": {"name": "cm",
                "items": [{"key": "k", "path": "/etc/passwd"}]}}]})),
            vec![(
                "spec.volumes[0].configMap.items[0].path",
                "Invalid value: \"/etc/passwd\": must be a relative path",
            )],
        ),
        bad(
            "item path climbing out",
            with_spec(
                json!({"volumes": [{"name": "a", "secret": {"secretName": "s",
                "items": [{"key": "k", "path": "../../x"}]}}]}),
            ),
            vec![(
                "spec.volumes[0].secret.items[0].path",
                "Invalid value: \"../../x\": must not contain '..'",
            )],
        ),
        bad(
            "item path starting with ..",
            with_spec(json!({"volumes": [{"name": "a", "configMap": {"name": "cm",
                "items": [{"key": "k", "path": "..data"}]}}]})),
            vec![(
                "spec.volumes[0].configMap.items[0].path",
                "Invalid value: \"..data\": must not start with '..'",
            )],
        ),
        bad(
            "file mode too large",
            with_spec(
                json!({"volumes": [{"name": "a", "secret": {"secretName": "s", "defaultMode": 0o1000}}]}),
            ),
            vec![(
                "spec.volumes[0].secret.defaultMode",
                "Invalid value: 512: must be a number between 0 and 0777 (octal), both inclusive",
            )],
        ),
        bad(
            "pvc without a claim name",
            with_spec(json!({"volumes": [{"name": "a", "persistentVolumeClaim": {}}]})),
            vec![(
                "spec.volumes[0].persistentVolumeClaim.claimName",
                "Required value",
            )],
        ),
        bad(
            "nfs with a relative path",
            with_spec(
                json!({"volumes": [{"name": "a", "nfs": {"server": "nas", "path": "export"}}]}),
            ),
            vec![(
                "spec.volumes[0].nfs.path",
                "Invalid value: \"export\": must be an absolute path",
            )],
        ),
    ]
}

fn mount_cases() -> Vec<Case> {
    let volumes = json!([{"name": "data", "emptyDir": {}}]);
    vec![
        ok(
            "mount with a subPath",
            with_spec(
                json!({"volumes": volumes, "containers": [{"name": "c", "image": "x",
                "volumeMounts": [{"name": "data", "mountPath": "/data", "subPath": "a/b"}]}]}),
            ),
        ),
        bad(
            "mount of an undeclared volume",
            with_container(json!({"volumeMounts": [{"name": "data", "mountPath": "/data"}]})),
            vec![(
                "spec.containers[0].volumeMounts[0].name",
                "Not found: \"data\"",
            )],
        ),
        bad(
            "mount of an invalid volume",
            with_spec(
                json!({"volumes": [{"name": "data"}], "containers": [{"name": "c", "image": "x",
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}),
            ),
            vec![
                (
                    "spec.volumes[0]",
                    "Required value: must specify a volume type",
                ),
                (
                    "spec.containers[0].volumeMounts[0].name",
                    "Not found: \"data\"",
                ),
            ],
        ),
        bad(
            "mount without a path",
            with_spec(
                json!({"volumes": volumes, "containers": [{"name": "c", "image": "x",
                "volumeMounts": [{"name": "data"}]}]}),
            ),
            vec![(
                "spec.containers[0].volumeMounts[0].mountPath",
                "Required value",
            )],
        ),
        bad(
            "two mounts on one path",
            with_spec(
                json!({"volumes": volumes, "containers": [{"name": "c", "image": "x",
                "volumeMounts": [{"name": "data", "mountPath": "/d"}, {"name": "data", "mountPath": "/d"}]}]}),
            ),
            vec![(
                "spec.containers[0].volumeMounts[1].mountPath",
                "Invalid value: \"/d\": must be unique",
            )],
        ),
        bad(
            "subPath with ..",
            with_spec(
                json!({"volumes": volumes, "containers": [{"name": "c", "image": "x",
                "volumeMounts": [{"name": "data", "mountPath": "/d", "subPath": "../../etc"}]}]}),
            ),
            vec![(
                "spec.containers[0].volumeMounts.subPath",
                "Invalid value: \"../../etc\": must not contain '..'",
            )],
        ),
        bad(
            "absolute subPath",
            with_spec(
                json!({"volumes": volumes, "containers": [{"name": "c", "image": "x",
                "volumeMounts": [{"name": "data", "mountPath": "/d", "subPath": "/etc"}]}]}),
            ),
            vec![(
                "spec.containers[0].volumeMounts.subPath",
                "Invalid value: \"/etc\": must be a relative path",
            )],
        ),
        bad(
            "subPath and subPathExpr",
            with_spec(
                json!({"volumes": volumes, "containers": [{"name": "c", "image": "x",
                "volumeMounts": [{"name": "data", "mountPath": "/d", "subPath": "a", "subPathExpr": "$(X)"}]}]}),
            ),
            vec![(
                "spec.containers[0].volumeMounts[0].subPathExpr",
                "Invalid value: \"$(X)\": subPathExpr and subPath are mutually exclusive",
            )],
        ),
        bad(
            "bad mount propagation",
            with_spec(
                json!({"volumes": volumes, "containers": [{"name": "c", "image": "x",
                "volumeMounts": [{"name": "data", "mountPath": "/d", "mountPropagation": "Shared"}]}]}),
            ),
            vec![(
                "spec.containers[0].volumeMounts[0].mountPropagation",
                "Unsupported value: \"Shared\"",
            )],
        ),
    ]
}

fn spec_cases() -> Vec<Case> {
    vec![
        bad(
            "bad restartPolicy",
            with_spec(json!({"restartPolicy": "Sometimes"})),
            vec![(
                "spec.restartPolicy",
                "Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            )],
        ),
        bad(
            "bad dnsPolicy",
            with_spec(json!({"dnsPolicy": "Cluster"})),
            vec![(
                "spec.dnsPolicy",
                "Unsupported value: \"Cluster\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"",
            )],
        ),
        bad(
            "dnsPolicy None without dnsConfig",
            with_spec(json!({"dnsPolicy": "None"})),
            vec![(
                "spec.dnsConfig",
                "Required value: must provide `dnsConfig` when `dnsPolicy` is None",
            )],
        ),
        ok(
            "dnsPolicy None with a nameserver",
            with_spec(
                json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["1.1.1.1"], "searches": ["example.com."]}}),
            ),
        ),
        bad(
            "dnsConfig with a bad nameserver",
            with_spec(json!({"dnsConfig": {"nameservers": ["dns.example"]}})),
            vec![(
                "spec.dnsConfig.nameservers[0]",
                "Invalid value: \"dns.example\": must be a valid IP address",
            )],
        ),
        bad(
            "dnsConfig with four nameservers",
            with_spec(
                json!({"dnsConfig": {"nameservers": ["1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4"]}}),
            ),
            vec![(
                "spec.dnsConfig.nameservers",
                "Invalid value: []string{\"1.1.1.1\", \"1.1.1.2\", \"1.1.1.3\", \"1.1.1.4\"}: must not have more than 3 nameservers",
            )],
        ),
        bad(
            "host alias with a bad IP",
            with_spec(json!({"hostAliases": [{"ip": "not-an-ip", "hostnames": ["a.example"]}]})),
            vec![(
                "spec.hostAliases[0].ip",
                "Invalid value: \"not-an-ip\": must be a valid IP address",
            )],
        ),
        bad(
            "host alias with a bad hostname",
            with_spec(json!({"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a b"]}]})),
            vec![(
                "spec.hostAliases[0].hostnames[0]",
                "Invalid value: \"a b\": a lowercase RFC 1123 subdomain",
            )],
        ),
        ok(
            "readiness gate with a qualified condition type",
            with_spec(json!({"readinessGates": [{"conditionType": "example.com/feature-1"}]})),
        ),
        bad(
            "readiness gate condition type not a qualified name",
            with_spec(json!({"readinessGates": [{"conditionType": "bad type!"}]})),
            vec![(
                "spec.readinessGates[0].conditionType",
                "Invalid value: \"bad type!\": name part must consist of alphanumeric characters",
            )],
        ),
        ok(
            "overhead with standard resources",
            with_spec(json!({"overhead": {"cpu": "250m", "memory": "120Mi"}})),
        ),
        bad(
            "overhead with a negative quantity",
            with_spec(json!({"overhead": {"cpu": "-1"}})),
            vec![(
                "spec.overhead.limits[cpu]",
                "Invalid value: \"-1\": must be greater than or equal to 0",
            )],
        ),
        bad(
            "overhead with a resource that is not a container resource",
            with_spec(json!({"overhead": {"pods": "1"}})),
            vec![(
                "spec.overhead.limits[pods]",
                "Invalid value: \"pods\": must be a standard resource for containers",
            )],
        ),
        bad(
            "ephemeral containers on create",
            with_spec(json!({"ephemeralContainers": [{"name": "debug", "image": "busybox"}]})),
            vec![(
                "spec.ephemeralContainers",
                "Forbidden: cannot be set on create",
            )],
        ),
        bad(
            "nodeName with scheduling gates on create",
            with_spec(
                json!({"nodeName": "node-1", "schedulingGates": [{"name": "example.com/wait"}]}),
            ),
            vec![(
                "spec.nodeName",
                "Forbidden: cannot be set until all schedulingGates have been cleared",
            )],
        ),
        bad(
            "activeDeadlineSeconds zero",
            with_spec(json!({"activeDeadlineSeconds": 0})),
            vec![(
                "spec.activeDeadlineSeconds",
                "Invalid value: 0: must be between 1 and 2147483647, inclusive",
            )],
        ),
        bad(
            "bad nodeSelector key",
            with_spec(json!({"nodeSelector": {"bad key": "x"}})),
            vec![(
                "spec.nodeSelector",
                "Invalid value: \"bad key\": name part must consist of",
            )],
        ),
        bad(
            "bad serviceAccountName",
            with_spec(json!({"serviceAccountName": "Not_Valid"})),
            vec![(
                "spec.serviceAccountName",
                "Invalid value: \"Not_Valid\": a lowercase RFC 1123 subdomain",
            )],
        ),
        bad(
            "bad hostname",
            with_spec(json!({"hostname": "a.b"})),
            vec![(
                "spec.hostname",
                "Invalid value: \"a.b\": must not contain dots",
            )],
        ),
        bad(
            "runAsUser negative",
            with_spec(json!({"securityContext": {"runAsUser": -1}})),
            vec![(
                "spec.securityContext.runAsUser",
                "Invalid value: -1: must be between 0 and 2147483647, inclusive",
            )],
        ),
        bad(
            "bad fsGroupChangePolicy",
            with_spec(json!({"securityContext": {"fsGroupChangePolicy": "Sometimes"}})),
            vec![(
                "spec.securityContext.fsGroupChangePolicy",
                "Unsupported value: \"Sometimes\": supported values: \"OnRootMismatch\", \"Always\"",
            )],
        ),
        bad(
            "Localhost seccomp without a profile",
            with_spec(json!({"securityContext": {"seccompProfile": {"type": "Localhost"}}})),
            vec![(
                "spec.securityContext.seccompProfile.localhostProfile",
                "Required value: must be set when seccomp type is Localhost",
            )],
        ),
        bad(
            "bad sysctl name",
            with_spec(
                json!({"securityContext": {"sysctls": [{"name": "Net.Core", "value": "1"}]}}),
            ),
            vec![(
                "spec.securityContext.sysctls[0].name",
                "Invalid value: \"Net.Core\": must have at most 253 characters",
            )],
        ),
        bad(
            "privileged without escalation",
            with_container(
                json!({"securityContext": {"privileged": true, "allowPrivilegeEscalation": false}}),
            ),
            vec![("spec.containers[0].securityContext", "Invalid value: ")],
        ),
        bad(
            "bad procMount",
            with_container(json!({"securityContext": {"procMount": "Masked"}})),
            vec![(
                "spec.containers[0].securityContext.procMount",
                "Unsupported value: \"Masked\": supported values: \"Default\", \"Unmasked\"",
            )],
        ),
    ]
}

fn scheduling_cases() -> Vec<Case> {
    vec![
        ok(
            "tolerations",
            with_spec(json!({"tolerations": [
                {"key": "a", "operator": "Equal", "value": "b", "effect": "NoSchedule"},
                {"key": "c", "operator": "Exists"},
                {"operator": "Exists"},
                {"key": "d", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]})),
        ),
        bad(
            "toleration with an empty key and Equal",
            with_spec(json!({"tolerations": [{"operator": "Equal", "value": "b"}]})),
            vec![(
                "spec.tolerations[0].operator",
                "Invalid value: \"Equal\": operator must be Exists when `key` is empty",
            )],
        ),
        bad(
            "toleration Exists with a value",
            with_spec(json!({"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]})),
            vec![("spec.tolerations[0].operator", "Invalid value: ")],
        ),
        bad(
            "toleration with a bad operator",
            with_spec(json!({"tolerations": [{"key": "a", "operator": "In"}]})),
            vec![(
                "spec.tolerations[0].operator",
                "Unsupported value: \"In\": supported values: \"Equal\", \"Exists\"",
            )],
        ),
        bad(
            "toleration with a bad effect",
            with_spec(
                json!({"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoRun"}]}),
            ),
            vec![(
                "spec.tolerations[0].effect",
                "Unsupported value: \"NoRun\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
            )],
        ),
        bad(
            "tolerationSeconds without NoExecute",
            with_spec(
                json!({"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]}),
            ),
            vec![(
                "spec.tolerations[0].effect",
                "Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set",
            )],
        ),
        bad(
            "toleration with a bad key",
            with_spec(json!({"tolerations": [{"key": "a b", "operator": "Exists"}]})),
            vec![("spec.tolerations[0].key", "Invalid value: \"a b\"")],
        ),
        ok(
            "node and pod affinity",
            with_spec(json!({"affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10,
                        "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}}]},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}})),
        ),
        bad(
            "node affinity without terms",
            with_spec(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}}),
            ),
            vec![(
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
                "Required value: must have at least one node selector term",
            )],
        ),
        bad(
            "node selector requirement with a bad operator",
            with_spec(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]}}}}),
            ),
            vec![(
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator",
                "Invalid value: \"Near\": not a valid selector operator",
            )],
        ),
        bad(
            "Gt with two values",
            with_spec(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["1", "2"]}]}]}}}}),
            ),
            vec![(
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values",
                "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'",
            )],
        ),
        bad(
            "preferred weight out of range",
            with_spec(
                json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 101, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}]}}}),
            ),
            vec![(
                "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
                "Invalid value: 101: must be in the range 1-100",
            )],
        ),
        bad(
            "pod affinity without a topologyKey",
            with_spec(
                json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}}]}}}),
            ),
            vec![(
                "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
                "Required value: can not be empty",
            )],
        ),
        ok(
            "topology spread",
            with_spec(
                json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]}),
            ),
        ),
        bad(
            "topology spread maxSkew 0",
            with_spec(
                json!({"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule"}]}),
            ),
            vec![(
                "spec.topologySpreadConstraints[0].maxSkew",
                "Invalid value: 0: must be greater than zero",
            )],
        ),
        bad(
            "topology spread bad action",
            with_spec(
                json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                "whenUnsatisfiable": "Wait"}]}),
            ),
            vec![(
                "spec.topologySpreadConstraints[0].whenUnsatisfiable",
                "Unsupported value: \"Wait\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
            )],
        ),
        bad(
            "topology spread repeated",
            with_spec(json!({"topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]})),
            vec![(
                "spec.topologySpreadConstraints[0].{topologyKey, whenUnsatisfiable}",
                "Duplicate value: \"{zone, DoNotSchedule}\"",
            )],
        ),
        bad(
            "topology spread without a key",
            with_spec(
                json!({"topologySpreadConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "ScheduleAnyway"}]}),
            ),
            vec![(
                "spec.topologySpreadConstraints[0].topologyKey",
                "Required value: can not be empty",
            )],
        ),
    ]
}

fn pod_with_image(image: &str) -> Value {
    json!({"metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": image, "imagePullPolicy": "IfNotPresent"}],
                    "tolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule"}]}})
}

fn update_cases() -> Vec<Case> {
    let base = pod_with_image("busybox:1");
    let mut changed_command = base.clone();
    changed_command["spec"]["containers"][0]["command"] = json!(["sleep", "1"]);
    let mut changed_ports = base.clone();
    changed_ports["spec"]["containers"][0]["ports"] = json!([{"containerPort": 81}]);
    let mut added_toleration = base.clone();
    added_toleration["spec"]["tolerations"]
        .as_array_mut()
        .expect("list")
        .push(json!({"key": "b", "operator": "Exists"}));
    let mut removed_toleration = base.clone();
    removed_toleration["spec"]["tolerations"] = json!([]);
    let mut with_deadline = base.clone();
    with_deadline["spec"]["activeDeadlineSeconds"] = json!(100);
    let mut longer_deadline = base.clone();
    longer_deadline["spec"]["activeDeadlineSeconds"] = json!(200);
    let mut added_container = base.clone();
    added_container["spec"]["containers"]
        .as_array_mut()
        .expect("list")
        .push(json!({"name": "d", "image": "x"}));
    let mut labels_only = base.clone();
    labels_only["metadata"]["labels"] = json!({"new": "label"});
    vec![
        update(
            "image change",
            base.clone(),
            pod_with_image("busybox:2"),
            vec![],
        ),
        update("labels change", base.clone(), labels_only, vec![]),
        update("added toleration", base.clone(), added_toleration, vec![]),
        update("deadline set", base.clone(), with_deadline.clone(), vec![]),
        update(
            "command change",
            base.clone(),
            changed_command,
            vec![(
                "spec",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n",
            )],
        ),
        update(
            "ports change",
            base.clone(),
            changed_ports,
            vec![(
                "spec",
                "Forbidden: pod updates may not change fields other than",
            )],
        ),
        update(
            "container added",
            base.clone(),
            added_container,
            vec![(
                "spec",
                "Forbidden: pod updates may not change fields other than",
            )],
        ),
        update(
            "removed toleration",
            base.clone(),
            removed_toleration,
            vec![(
                "spec.tolerations",
                "Forbidden: existing toleration can not be modified except its tolerationSeconds",
            )],
        ),
        update(
            "deadline raised",
            with_deadline.clone(),
            longer_deadline,
            vec![(
                "spec.activeDeadlineSeconds",
                "Invalid value: 200: must be less than or equal to previous value",
            )],
        ),
        update(
            "deadline removed",
            with_deadline,
            base,
            vec![(
                "spec.activeDeadlineSeconds",
                "Invalid value: \"null\": must not update from a positive integer to nil value",
            )],
        ),
    ]
}

#[test]
fn pod_vectors() {
    let mut cases = container_cases();
    cases.extend(port_cases());
    cases.extend(env_cases());
    cases.extend(resource_cases());
    cases.extend(probe_cases());
    cases.extend(volume_cases());
    cases.extend(mount_cases());
    cases.extend(spec_cases());
    cases.extend(scheduling_cases());
    cases.extend(update_cases());
    let count = run("", "v1", "pods", cases);
    assert!(count >= 130, "only {count} pod vectors");
}
