//! Vectors for `workloads` validation (kube's `TestValidateDeployment`,
//! `TestValidateReplicaSet*`, `TestValidateDaemonSet*`, `TestValidateStatefulSet*`,
//! `TestValidateReplicationController*`, `TestValidateJob*`, `TestValidateCronJob*`).

use serde_json::{Value, json};

use super::{Case, bad, ok, run, update};

fn template(labels: Value, restart: &str) -> Value {
    json!({"metadata": {"labels": labels},
           "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "busybox"}]}})
}

fn workload(spec: Value) -> Value {
    json!({"metadata": {"name": "w", "namespace": "default"}, "spec": spec})
}

fn deployment(extra: Value) -> Value {
    let mut spec = json!({"selector": {"matchLabels": {"app": "web"}},
                          "template": template(json!({"app": "web"}), "Always")});
    merge(&mut spec, extra);
    workload(spec)
}

fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        for (k, v) in extra {
            into.insert(k, v);
        }
    }
}

fn deployment_cases() -> Vec<Case> {
    vec![
        ok("basic", deployment(json!({}))),
        ok(
            "selector with expressions",
            deployment(
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}}),
            ),
        ),
        ok(
            "Recreate",
            deployment(json!({"strategy": {"type": "Recreate"}})),
        ),
        bad(
            "no selector",
            workload(json!({"template": template(json!({"app": "web"}), "Always")})),
            vec![
                ("spec.selector", "Required value"),
                (
                    "spec.template.metadata.labels",
                    "Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
                ),
            ],
        ),
        bad(
            "empty selector",
            deployment(json!({"selector": {}})),
            vec![(
                "spec.selector",
                "Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment",
            )],
        ),
        bad(
            "selector does not match",
            deployment(json!({"selector": {"matchLabels": {"app": "db"}}})),
            vec![(
                "spec.template.metadata.labels",
                "Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
            )],
        ),
        bad(
            "restartPolicy Never",
            deployment(json!({"template": template(json!({"app": "web"}), "Never")})),
            vec![(
                "spec.template.spec.restartPolicy",
                "Unsupported value: \"Never\": supported values: \"Always\"",
            )],
        ),
        bad(
            "activeDeadlineSeconds in the template",
            deployment(json!({"template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"activeDeadlineSeconds": 10, "containers": [{"name": "c", "image": "x"}]}}})),
            vec![(
                "spec.template.spec.activeDeadlineSeconds",
                "Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported",
            )],
        ),
        bad(
            "negative replicas",
            deployment(json!({"replicas": -1})),
            vec![(
                "spec.replicas",
                "Invalid value: -1: must be greater than or equal to 0",
            )],
        ),
        bad(
            "bad container in the template",
            deployment(json!({"template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"name": "Web_1", "containerPort": 80}]}]}}})),
            vec![(
                "spec.template.spec.containers[0].ports[0].name",
                "Invalid value: \"Web_1\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
            )],
        ),
        bad(
            "bad template label",
            deployment(json!({"selector": {"matchLabels": {"app": "web"}},
                "template": template(json!({"app": "web", "bad key": "x"}), "Always")})),
            vec![(
                "spec.template.metadata.labels",
                "Invalid value: \"bad key\": name part must consist of",
            )],
        ),
        bad(
            "bad strategy type",
            deployment(json!({"strategy": {"type": "BlueGreen"}})),
            vec![("spec.strategy", "Unsupported value: ")],
        ),
        bad(
            "Recreate with rollingUpdate",
            deployment(json!({"strategy": {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}})),
            vec![(
                "spec.strategy.rollingUpdate",
                "Forbidden: may not be specified when strategy `type` is 'Recreate'",
            )],
        ),
        bad(
            "maxUnavailable and maxSurge zero",
            deployment(
                json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}}),
            ),
            vec![(
                "spec.strategy.rollingUpdate.maxUnavailable",
                "Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: may not be 0 when `maxSurge` is 0",
            )],
        ),
        bad(
            "maxUnavailable above 100%",
            deployment(
                json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "200%"}}}),
            ),
            vec![(
                "spec.strategy.rollingUpdate.maxUnavailable",
                "Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"200%\"}: must not be greater than 100%",
            )],
        ),
        bad(
            "maxSurge not a percent",
            deployment(
                json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "lots"}}}),
            ),
            vec![(
                "spec.strategy.rollingUpdate.maxSurge",
                "Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"lots\"}: a valid percent string must be",
            )],
        ),
        bad(
            "progress deadline not above minReadySeconds",
            deployment(json!({"minReadySeconds": 10, "progressDeadlineSeconds": 10})),
            vec![(
                "spec.progressDeadlineSeconds",
                "Invalid value: 10: must be greater than minReadySeconds",
            )],
        ),
        update(
            "scale and new image",
            deployment(json!({})),
            deployment(
                json!({"replicas": 3, "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}),
            ),
            vec![],
        ),
        update(
            "selector change",
            deployment(json!({})),
            deployment(
                json!({"selector": {"matchLabels": {"app": "web", "v": "2"}},
                "template": template(json!({"app": "web", "v": "2"}), "Always")}),
            ),
            vec![(
                "spec.selector",
                "Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"web\", \"v\":\"2\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable",
            )],
        ),
    ]
}

fn replica_set_cases() -> Vec<Case> {
    vec![
        ok("basic", deployment(json!({"replicas": 2}))),
        bad(
            "empty selector",
            deployment(json!({"selector": {}})),
            vec![("spec.selector", "Invalid value: v1.LabelSelector{")],
        ),
        bad(
            "restartPolicy OnFailure",
            deployment(json!({"template": template(json!({"app": "web"}), "OnFailure")})),
            vec![(
                "spec.template.spec.restartPolicy",
                "Unsupported value: \"OnFailure\": supported values: \"Always\"",
            )],
        ),
        bad(
            "negative minReadySeconds",
            deployment(json!({"minReadySeconds": -5})),
            vec![(
                "spec.minReadySeconds",
                "Invalid value: -5: must be greater than or equal to 0",
            )],
        ),
        bad(
            "selector with a bad operator",
            deployment(
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}}),
            ),
            vec![
                (
                    "spec.selector.matchExpressions[0].operator",
                    "Invalid value: \"Near\": not a valid selector operator",
                ),
                ("spec.selector", "Invalid value: v1.LabelSelector{"),
            ],
        ),
        update(
            "selector change",
            deployment(json!({})),
            deployment(
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}),
            ),
            vec![("spec.selector", "Invalid value: v1.LabelSelector{")],
        ),
    ]
}

fn daemon_set_cases() -> Vec<Case> {
    vec![
        ok("basic", deployment(json!({}))),
        ok(
            "OnDelete",
            deployment(json!({"updateStrategy": {"type": "OnDelete"}})),
        ),
        bad(
            "no selector",
            workload(json!({"template": template(json!({"app": "web"}), "Always")})),
            vec![(
                "spec.template.metadata.labels",
                "Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
            )],
        ),
        bad(
            "empty selector",
            deployment(json!({"selector": {}})),
            vec![(
                "spec.selector",
                "Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for daemonset",
            )],
        ),
        bad(
            "restartPolicy Never",
            deployment(json!({"template": template(json!({"app": "web"}), "Never")})),
            vec![(
                "spec.template.spec.restartPolicy",
                "Unsupported value: \"Never\": supported values: \"Always\"",
            )],
        ),
        bad(
            "surge and unavailable both set",
            deployment(
                json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}}}),
            ),
            vec![(
                "spec.updateStrategy.rollingUpdate.maxSurge",
                "Invalid value: intstr.IntOrString{Type:0, IntVal:1, StrVal:\"\"}: may not be set when maxUnavailable is non-zero",
            )],
        ),
        bad(
            "surge and unavailable both zero",
            deployment(
                json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}}),
            ),
            vec![(
                "spec.updateStrategy.rollingUpdate.maxUnavailable",
                "Required value: cannot be 0 when maxSurge is 0",
            )],
        ),
        bad(
            "bad strategy type",
            deployment(json!({"updateStrategy": {"type": "Sometimes"}})),
            vec![("spec.updateStrategy", "Unsupported value: ")],
        ),
        update(
            "selector change",
            deployment(json!({})),
            deployment(
                json!({"selector": {"matchLabels": {"app": "web", "x": "y"}},
                "template": template(json!({"app": "web", "x": "y"}), "Always")}),
            ),
            vec![("spec.selector", "Invalid value: v1.LabelSelector{")],
        ),
    ]
}

fn stateful_set(extra: Value) -> Value {
    let mut spec = json!({"serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                          "template": template(json!({"app": "db"}), "Always")});
    merge(&mut spec, extra);
    workload(spec)
}

fn stateful_set_cases() -> Vec<Case> {
    vec![
        ok("basic", stateful_set(json!({}))),
        ok(
            "mount of a volume claim template",
            stateful_set(json!({
                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}],
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [
                    {"name": "c", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}})),
        ),
        bad(
            "bad podManagementPolicy",
            stateful_set(json!({"podManagementPolicy": "Random"})),
            vec![(
                "spec.podManagementPolicy",
                "Invalid value: \"Random\": must be 'OrderedReady' or 'Parallel'",
            )],
        ),
        bad(
            "OnDelete with rollingUpdate",
            stateful_set(
                json!({"updateStrategy": {"type": "OnDelete", "rollingUpdate": {"partition": 1}}}),
            ),
            vec![("spec.updateStrategy.rollingUpdate", "Invalid value: ")],
        ),
        bad(
            "bad updateStrategy",
            stateful_set(json!({"updateStrategy": {"type": "Blue"}})),
            vec![("spec.updateStrategy", "Invalid value: ")],
        ),
        bad(
            "negative partition",
            stateful_set(
                json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": -1}}}),
            ),
            vec![(
                "spec.updateStrategy.rollingUpdate.partition",
                "Invalid value: -1: must be greater than or equal to 0",
            )],
        ),
        bad(
            "maxUnavailable zero",
            stateful_set(
                json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}}}),
            ),
            vec![(
                "spec.updateStrategy.rollingUpdate.maxUnavailable",
                "Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: cannot be 0",
            )],
        ),
        bad(
            "bad retention policy",
            stateful_set(
                json!({"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Keep", "whenScaled": "Retain"}}),
            ),
            vec![(
                "spec.persistentVolumeClaimRetentionPolicy.whenDeleted",
                "Unsupported value: \"Keep\": supported values: \"Retain\", \"Delete\"",
            )],
        ),
        bad(
            "empty selector",
            stateful_set(json!({"selector": {}})),
            vec![(
                "spec.selector",
                "Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for statefulset",
            )],
        ),
        bad(
            "selector does not match",
            stateful_set(json!({"selector": {"matchLabels": {"app": "web"}}})),
            vec![(
                "spec.template.metadata.labels",
                "Invalid value: map[string]string{\"app\":\"db\"}: `selector` does not match template `labels`",
            )],
        ),
        bad(
            "restartPolicy OnFailure",
            stateful_set(json!({"template": template(json!({"app": "db"}), "OnFailure")})),
            vec![(
                "spec.template.spec.restartPolicy",
                "Unsupported value: \"OnFailure\": supported values: \"Always\"",
            )],
        ),
        bad(
            "mount of an unknown volume",
            stateful_set(
                json!({"template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [
                {"name": "c", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}),
            ),
            vec![(
                "spec.template.spec.containers[0].volumeMounts[0].name",
                "Not found: \"data\"",
            )],
        ),
        update(
            "scale and new template",
            stateful_set(json!({})),
            stateful_set(
                json!({"replicas": 5, "template": template(json!({"app": "db", "v": "2"}), "Always")}),
            ),
            vec![],
        ),
        update(
            "serviceName change",
            stateful_set(json!({})),
            stateful_set(json!({"serviceName": "other"})),
            vec![(
                "spec",
                "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            )],
        ),
        update(
            "volumeClaimTemplates change",
            stateful_set(json!({})),
            stateful_set(
                json!({"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}),
            ),
            vec![("spec", "Forbidden: updates to statefulset spec")],
        ),
    ]
}

fn replication_controller_cases() -> Vec<Case> {
    let rc = |selector: Value, labels: Value, restart: &str| {
        workload(json!({"selector": selector, "template": template(labels, restart)}))
    };
    vec![
        ok(
            "basic",
            rc(json!({"app": "web"}), json!({"app": "web"}), "Always"),
        ),
        bad(
            "selector does not match",
            rc(json!({"app": "db"}), json!({"app": "web"}), "Always"),
            vec![(
                "spec.template.metadata.labels",
                "Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
            )],
        ),
        bad(
            "restartPolicy Never",
            rc(json!({"app": "web"}), json!({"app": "web"}), "Never"),
            vec![(
                "spec.template.spec.restartPolicy",
                "Unsupported value: \"Never\": supported values: \"Always\"",
            )],
        ),
        bad(
            "no template",
            workload(json!({"selector": {"app": "web"}})),
            vec![("spec.template", "Required value")],
        ),
    ]
}

fn job(extra: Value) -> Value {
    let mut spec = json!({"template": {"spec": {"restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox"}]}}});
    merge(&mut spec, extra);
    json!({"metadata": {"name": "j", "namespace": "default", "uid": "0b8a3f4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"},
           "spec": spec})
}

fn job_cases() -> Vec<Case> {
    vec![
        ok("basic", job(json!({}))),
        ok(
            "Indexed",
            job(json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3})),
        ),
        bad(
            "restartPolicy Always",
            job(json!({"template": {"spec": {"restartPolicy": "Always",
                "containers": [{"name": "c", "image": "busybox"}]}}})),
            vec![(
                "spec.template.spec.restartPolicy",
                "Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"",
            )],
        ),
        bad(
            "restartPolicy defaulted to Always",
            job(json!({"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}})),
            vec![(
                "spec.template.spec.restartPolicy",
                "Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"",
            )],
        ),
        bad(
            "negative backoffLimit",
            job(json!({"backoffLimit": -1})),
            vec![(
                "spec.backoffLimit",
                "Invalid value: -1: must be greater than or equal to 0",
            )],
        ),
        bad(
            "negative parallelism",
            job(json!({"parallelism": -2})),
            vec![(
                "spec.parallelism",
                "Invalid value: -2: must be greater than or equal to 0",
            )],
        ),
        bad(
            "bad completionMode",
            job(json!({"completionMode": "Sometimes"})),
            vec![(
                "spec.completionMode",
                "Unsupported value: \"Sometimes\": supported values: \"NonIndexed\", \"Indexed\"",
            )],
        ),
        bad(
            "manual selector that does not match",
            job(json!({"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}})),
            vec![(
                "spec.template.metadata.labels",
                "Invalid value: map[string]string(nil): `selector` does not match template `labels`",
            )],
        ),
        bad(
            "bad container",
            job(json!({"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox", "env": [{"name": "A=B"}]}]}}})),
            vec![(
                "spec.template.spec.containers[0].env[0].name",
                "Invalid value: \"A=B\"",
            )],
        ),
        update(
            "parallelism change",
            job(json!({})),
            job(json!({"parallelism": 4, "completions": 1})),
            vec![],
        ),
        update(
            "template change",
            job(json!({})),
            job(json!({"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox:2"}]}}})),
            vec![("spec.template", "Invalid value: ")],
        ),
        update(
            "completions change",
            job(json!({})),
            job(json!({"completions": 5})),
            vec![("spec.completions", "Invalid value: 5: field is immutable")],
        ),
    ]
}

fn cron_job(extra: Value) -> Value {
    let mut spec = json!({"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {
        "restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}}});
    merge(&mut spec, extra);
    json!({"metadata": {"name": "cj", "namespace": "default"}, "spec": spec})
}

fn cron_job_cases() -> Vec<Case> {
    let mut long_name = cron_job(json!({}));
    long_name["metadata"]["name"] = json!("a".repeat(53));
    vec![
        ok("basic", cron_job(json!({}))),
        ok(
            "time zone",
            cron_job(json!({"timeZone": "Europe/Berlin", "schedule": "@daily"})),
        ),
        bad(
            "no schedule",
            cron_job(json!({"schedule": ""})),
            vec![("spec.schedule", "Required value")],
        ),
        bad(
            "schedule that does not parse",
            cron_job(json!({"schedule": "every minute"})),
            vec![("spec.schedule", "Invalid value: \"every minute\": ")],
        ),
        bad(
            "schedule with a bad field",
            cron_job(json!({"schedule": "61 * * * *"})),
            vec![("spec.schedule", "Invalid value: \"61 * * * *\": ")],
        ),
        bad(
            "TZ in the schedule",
            cron_job(json!({"schedule": "CRON_TZ=UTC 0 * * * *"})),
            vec![(
                "spec.schedule",
                "Invalid value: \"CRON_TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            )],
        ),
        bad(
            "unknown time zone",
            cron_job(json!({"timeZone": "Mars/Olympus"})),
            vec![(
                "spec.timeZone",
                "Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus",
            )],
        ),
        bad(
            "Local time zone",
            cron_job(json!({"timeZone": "Local"})),
            vec![(
                "spec.timeZone",
                "Invalid value: \"Local\": timeZone must be an explicit time zone",
            )],
        ),
        bad(
            "bad concurrencyPolicy",
            cron_job(json!({"concurrencyPolicy": "Queue"})),
            vec![(
                "spec.concurrencyPolicy",
                "Unsupported value: \"Queue\": supported values: \"Allow\", \"Forbid\", \"Replace\"",
            )],
        ),
        bad(
            "job template with restartPolicy Always",
            cron_job(json!({"jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Always", "containers": [{"name": "c", "image": "busybox"}]}}}}})),
            vec![(
                "spec.jobTemplate.spec.template.spec.restartPolicy",
                "Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"",
            )],
        ),
        bad(
            "job template with a selector",
            cron_job(
                json!({"jobTemplate": {"spec": {"selector": {"matchLabels": {"a": "b"}},
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}),
            ),
            vec![(
                "spec.jobTemplate.spec.selector",
                "Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"a\":\"b\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: `selector` will be auto-generated",
            )],
        ),
        bad(
            "negative history limit",
            cron_job(json!({"successfulJobsHistoryLimit": -1})),
            vec![(
                "spec.successfulJobsHistoryLimit",
                "Invalid value: -1: must be greater than or equal to 0",
            )],
        ),
        bad(
            "name longer than 52",
            long_name,
            vec![("metadata.name", "Invalid value: \"aaaa")],
        ),
    ]
}

fn pod_template_cases() -> Vec<Case> {
    vec![
        ok(
            "basic",
            json!({"metadata": {"name": "t", "namespace": "default"},
                   "template": template(json!({"app": "web"}), "Always")}),
        ),
        bad(
            "bad container",
            json!({"metadata": {"name": "t", "namespace": "default"},
                   "template": {"spec": {"containers": [{"name": "c"}]}}}),
            vec![("template.spec.containers[0].image", "Required value")],
        ),
        bad(
            "ephemeral containers",
            json!({"metadata": {"name": "t", "namespace": "default"},
                   "template": {"spec": {"containers": [{"name": "c", "image": "x"}],
                       "ephemeralContainers": [{"name": "e", "image": "x"}]}}}),
            vec![(
                "template.spec.ephemeralContainers",
                "Forbidden: ephemeral containers not allowed in pod template",
            )],
        ),
    ]
}

#[test]
fn workload_vectors() {
    let mut total = 0;
    total += run("apps", "v1", "deployments", deployment_cases());
    total += run("apps", "v1", "replicasets", replica_set_cases());
    total += run("apps", "v1", "daemonsets", daemon_set_cases());
    total += run("apps", "v1", "statefulsets", stateful_set_cases());
    total += run(
        "",
        "v1",
        "replicationcontrollers",
        replication_controller_cases(),
    );
    total += run("batch", "v1", "jobs", job_cases());
    total += run("batch", "v1", "cronjobs", cron_job_cases());
    total += run("", "v1", "podtemplates", pod_template_cases());
    assert!(total >= 75, "only {total} workload vectors");
}
