//! Strategic merge patch metadata of the built-in kinds: the
//! `patchStrategy` / `patchMergeKey` struct tags of the `k8s.io/api` types
//! (Kubernetes 1.32 and 1.33, whose tags differ only by ServiceCIDR going GA; plus
//! metav1.ObjectMeta and apiregistration's APIService), mounted at the paths where
//! each kind embeds them.
//!
//! Lists without a tag are atomic for strategic merge patch even when the API
//! documents them as `+listType=map` — e.g. `spec.tolerations`, `status.containerStatuses`,
//! `spec.template.spec.containers[].envFrom`, Endpoints `subsets` (and their
//! `addresses`/`ports`), EndpointSlice `endpoints`, CertificateSigningRequest and
//! CustomResourceDefinition `status.conditions`, Node `spec.taints`.
//!
//! Static data and lookups only: no I/O, no store, no HTTP.

use super::{ListStrategy, PatchSchema};

/// One tagged field, relative to the place its struct is mounted.
#[derive(Debug, Clone, Copy)]
struct Rule {
    path: &'static [&'static str],
    strategy: ListStrategy,
    retain_keys: bool,
    replace_map: bool,
}

/// `patchStrategy:"merge" patchMergeKey:"<key>"`.
const fn by_key(path: &'static [&'static str], key: &'static str) -> Rule {
    Rule {
        path,
        strategy: ListStrategy::MergeByKey(key),
        retain_keys: false,
        replace_map: false,
    }
}

/// `patchStrategy:"merge,retainKeys" patchMergeKey:"<key>"`.
const fn by_key_retain(path: &'static [&'static str], key: &'static str) -> Rule {
    Rule {
        retain_keys: true,
        ..by_key(path, key)
    }
}

/// `patchStrategy:"merge"` on a list of scalars.
const fn primitives(path: &'static [&'static str]) -> Rule {
    Rule {
        path,
        strategy: ListStrategy::MergePrimitives,
        retain_keys: false,
        replace_map: false,
    }
}

/// `patchStrategy:"retainKeys"` on a struct.
const fn retain(path: &'static [&'static str]) -> Rule {
    Rule {
        path,
        strategy: ListStrategy::Atomic,
        retain_keys: true,
        replace_map: false,
    }
}

/// `patchStrategy:"replace"` on a struct.
const fn replace(path: &'static [&'static str]) -> Rule {
    Rule {
        path,
        strategy: ListStrategy::Atomic,
        retain_keys: false,
        replace_map: true,
    }
}

/// A set of rules mounted at a path of the object.
#[derive(Debug)]
struct Mount {
    at: &'static [&'static str],
    rules: &'static [Rule],
}

const fn mount(at: &'static [&'static str], rules: &'static [Rule]) -> Mount {
    Mount { at, rules }
}

/// metav1.ObjectMeta.
const OBJECT_META: &[Rule] = &[
    primitives(&["finalizers"]),
    by_key(&["ownerReferences"], "uid"),
];

/// core/v1 PodSpec (with Container and EphemeralContainer).
const POD_SPEC: &[Rule] = &[
    by_key(&["containers"], "name"),
    by_key(&["containers", "ports"], "containerPort"),
    by_key(&["containers", "env"], "name"),
    by_key(&["containers", "volumeMounts"], "mountPath"),
    by_key(&["containers", "volumeDevices"], "devicePath"),
    by_key(&["initContainers"], "name"),
    by_key(&["initContainers", "ports"], "containerPort"),
    by_key(&["initContainers", "env"], "name"),
    by_key(&["initContainers", "volumeMounts"], "mountPath"),
    by_key(&["initContainers", "volumeDevices"], "devicePath"),
    by_key(&["ephemeralContainers"], "name"),
    by_key(&["ephemeralContainers", "ports"], "containerPort"),
    by_key(&["ephemeralContainers", "env"], "name"),
    by_key(&["ephemeralContainers", "volumeMounts"], "mountPath"),
    by_key(&["ephemeralContainers", "volumeDevices"], "devicePath"),
    by_key_retain(&["volumes"], "name"),
    by_key(&["imagePullSecrets"], "name"),
    by_key(&["hostAliases"], "ip"),
    by_key(&["topologySpreadConstraints"], "topologyKey"),
    by_key(&["schedulingGates"], "name"),
    by_key_retain(&["resourceClaims"], "name"),
];

/// core/v1 PodStatus (with ContainerStatus).
const POD_STATUS: &[Rule] = &[
    by_key(&["conditions"], "type"),
    by_key(&["hostIPs"], "ip"),
    by_key(&["podIPs"], "ip"),
    by_key_retain(&["resourceClaimStatuses"], "name"),
    by_key(&["containerStatuses", "volumeMounts"], "mountPath"),
    by_key(&["containerStatuses", "allocatedResourcesStatus"], "name"),
    by_key(&["initContainerStatuses", "volumeMounts"], "mountPath"),
    by_key(
        &["initContainerStatuses", "allocatedResourcesStatus"],
        "name",
    ),
    by_key(&["ephemeralContainerStatuses", "volumeMounts"], "mountPath"),
    by_key(
        &["ephemeralContainerStatuses", "allocatedResourcesStatus"],
        "name",
    ),
];

/// `conditions` merged by `type` (most status structs, metav1.Condition lists).
const CONDITIONS: &[Rule] = &[by_key(&["conditions"], "type")];

const DEPLOYMENT_SPEC: &[Rule] = &[retain(&["strategy"])];
const SERVICE_SPEC: &[Rule] = &[by_key(&["ports"], "port")];
const NODE_SPEC: &[Rule] = &[primitives(&["podCIDRs"])];
const NODE_STATUS: &[Rule] = &[
    by_key(&["conditions"], "type"),
    by_key(&["addresses"], "type"),
];
const SERVICE_ACCOUNT: &[Rule] = &[by_key(&["secrets"], "name")];
const PDB_SPEC: &[Rule] = &[replace(&["selector"])];
const WEBHOOK_CONFIGURATION: &[Rule] = &[
    by_key(&["webhooks"], "name"),
    by_key(&["webhooks", "matchConditions"], "name"),
];
const ADMISSION_POLICY_SPEC: &[Rule] = &[
    by_key(&["matchConditions"], "name"),
    by_key(&["variables"], "name"),
];
const CSI_NODE_SPEC: &[Rule] = &[by_key(&["drivers"], "name")];
const RESOURCE_CLAIM_STATUS: &[Rule] = &[by_key(&["reservedFor"], "uid")];

const META: Mount = mount(&["metadata"], OBJECT_META);
const STATUS_CONDITIONS: Mount = mount(&["status"], CONDITIONS);

/// Kinds with only ObjectMeta tags.
const PLAIN: &[Mount] = &[META];
/// Kinds with status conditions merged by type.
const WITH_CONDITIONS: &[Mount] = &[META, STATUS_CONDITIONS];
/// Controllers with a pod template at `spec.template`.
const TEMPLATED: &[Mount] = &[
    META,
    mount(&["spec", "template", "metadata"], OBJECT_META),
    mount(&["spec", "template", "spec"], POD_SPEC),
    STATUS_CONDITIONS,
];

/// The strategic merge patch metadata of one built-in kind.
#[derive(Debug)]
pub(crate) struct KindSchema {
    group: &'static str,
    kind: &'static str,
    mounts: &'static [Mount],
}

const fn kind(group: &'static str, kind: &'static str, mounts: &'static [Mount]) -> KindSchema {
    KindSchema {
        group,
        kind,
        mounts,
    }
}

impl KindSchema {
    fn rule(&self, path: &[&str]) -> Option<&'static Rule> {
        let mounts: &'static [Mount] = self.mounts;
        mounts.iter().find_map(|m| {
            let rest = path.strip_prefix(m.at)?;
            m.rules.iter().find(|r| r.path == rest)
        })
    }
}

impl PatchSchema for KindSchema {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        self.rule(path).map_or(ListStrategy::Atomic, |r| r.strategy)
    }

    fn retain_keys(&self, path: &[&str]) -> bool {
        self.rule(path).is_some_and(|r| r.retain_keys)
    }

    fn replace_map(&self, path: &[&str]) -> bool {
        self.rule(path).is_some_and(|r| r.replace_map)
    }
}

static KINDS: &[KindSchema] = &[
    // core/v1
    kind(
        "",
        "Pod",
        &[
            META,
            mount(&["spec"], POD_SPEC),
            mount(&["status"], POD_STATUS),
        ],
    ),
    kind(
        "",
        "PodTemplate",
        &[
            META,
            mount(&["template", "metadata"], OBJECT_META),
            mount(&["template", "spec"], POD_SPEC),
        ],
    ),
    kind("", "ReplicationController", TEMPLATED),
    kind(
        "",
        "Service",
        &[META, mount(&["spec"], SERVICE_SPEC), STATUS_CONDITIONS],
    ),
    kind(
        "",
        "Node",
        &[
            META,
            mount(&["spec"], NODE_SPEC),
            mount(&["status"], NODE_STATUS),
        ],
    ),
    kind("", "Namespace", WITH_CONDITIONS),
    kind("", "PersistentVolumeClaim", WITH_CONDITIONS),
    kind("", "ServiceAccount", &[META, mount(&[], SERVICE_ACCOUNT)]),
    kind("", "ComponentStatus", &[META, mount(&[], CONDITIONS)]),
    kind("", "ConfigMap", PLAIN),
    kind("", "Secret", PLAIN),
    kind("", "Endpoints", PLAIN),
    kind("", "Event", PLAIN),
    kind("", "LimitRange", PLAIN),
    kind("", "ResourceQuota", PLAIN),
    kind("", "PersistentVolume", PLAIN),
    // apps/v1
    kind(
        "apps",
        "Deployment",
        &[
            META,
            mount(&["spec"], DEPLOYMENT_SPEC),
            mount(&["spec", "template", "metadata"], OBJECT_META),
            mount(&["spec", "template", "spec"], POD_SPEC),
            STATUS_CONDITIONS,
        ],
    ),
    kind("apps", "ReplicaSet", TEMPLATED),
    kind("apps", "StatefulSet", TEMPLATED),
    kind("apps", "DaemonSet", TEMPLATED),
    kind("apps", "ControllerRevision", PLAIN),
    // batch/v1
    kind("batch", "Job", TEMPLATED),
    kind(
        "batch",
        "CronJob",
        &[
            META,
            mount(&["spec", "jobTemplate", "metadata"], OBJECT_META),
            mount(
                &["spec", "jobTemplate", "spec", "template", "metadata"],
                OBJECT_META,
            ),
            mount(
                &["spec", "jobTemplate", "spec", "template", "spec"],
                POD_SPEC,
            ),
        ],
    ),
    // autoscaling
    kind("autoscaling", "HorizontalPodAutoscaler", WITH_CONDITIONS),
    kind("autoscaling", "Scale", PLAIN),
    // policy/v1
    kind(
        "policy",
        "PodDisruptionBudget",
        &[META, mount(&["spec"], PDB_SPEC), STATUS_CONDITIONS],
    ),
    // networking.k8s.io
    kind("networking.k8s.io", "Ingress", PLAIN),
    kind("networking.k8s.io", "IngressClass", PLAIN),
    kind("networking.k8s.io", "NetworkPolicy", PLAIN),
    kind("networking.k8s.io", "ServiceCIDR", WITH_CONDITIONS),
    kind("networking.k8s.io", "IPAddress", PLAIN),
    // discovery.k8s.io
    kind("discovery.k8s.io", "EndpointSlice", PLAIN),
    // rbac.authorization.k8s.io
    kind("rbac.authorization.k8s.io", "Role", PLAIN),
    kind("rbac.authorization.k8s.io", "ClusterRole", PLAIN),
    kind("rbac.authorization.k8s.io", "RoleBinding", PLAIN),
    kind("rbac.authorization.k8s.io", "ClusterRoleBinding", PLAIN),
    // storage.k8s.io
    kind("storage.k8s.io", "StorageClass", PLAIN),
    kind("storage.k8s.io", "CSIDriver", PLAIN),
    kind(
        "storage.k8s.io",
        "CSINode",
        &[META, mount(&["spec"], CSI_NODE_SPEC)],
    ),
    kind("storage.k8s.io", "CSIStorageCapacity", PLAIN),
    kind("storage.k8s.io", "VolumeAttachment", PLAIN),
    // admissionregistration.k8s.io
    kind(
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
        &[META, mount(&[], WEBHOOK_CONFIGURATION)],
    ),
    kind(
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
        &[META, mount(&[], WEBHOOK_CONFIGURATION)],
    ),
    kind(
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicy",
        &[META, mount(&["spec"], ADMISSION_POLICY_SPEC)],
    ),
    kind(
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
        PLAIN,
    ),
    // coordination.k8s.io, certificates.k8s.io, events.k8s.io, node.k8s.io, scheduling.k8s.io
    kind("coordination.k8s.io", "Lease", PLAIN),
    kind("certificates.k8s.io", "CertificateSigningRequest", PLAIN),
    kind("events.k8s.io", "Event", PLAIN),
    kind("node.k8s.io", "RuntimeClass", PLAIN),
    kind("scheduling.k8s.io", "PriorityClass", PLAIN),
    // flowcontrol.apiserver.k8s.io
    kind(
        "flowcontrol.apiserver.k8s.io",
        "FlowSchema",
        WITH_CONDITIONS,
    ),
    kind(
        "flowcontrol.apiserver.k8s.io",
        "PriorityLevelConfiguration",
        WITH_CONDITIONS,
    ),
    // resource.k8s.io
    kind(
        "resource.k8s.io",
        "ResourceClaim",
        &[META, mount(&["status"], RESOURCE_CLAIM_STATUS)],
    ),
    kind(
        "resource.k8s.io",
        "ResourceClaimTemplate",
        &[META, mount(&["spec", "metadata"], OBJECT_META)],
    ),
    kind("resource.k8s.io", "ResourceSlice", PLAIN),
    kind("resource.k8s.io", "DeviceClass", PLAIN),
    // apiextensions.k8s.io, apiregistration.k8s.io
    kind("apiextensions.k8s.io", "CustomResourceDefinition", PLAIN),
    kind("apiregistration.k8s.io", "APIService", WITH_CONDITIONS),
];

/// The strategic merge patch schema of a built-in kind (`group` is `""` or
/// `"core"` for the core group), or `None` for kinds that do not support
/// strategic merge patch (custom resources: the server answers 415).
pub fn builtin_schema(group: &str, kind: &str) -> Option<&'static dyn PatchSchema> {
    let group = if group == "core" { "" } else { group };
    KINDS
        .iter()
        .find(|k| k.group == group && k.kind == kind)
        .map(|k| k as &'static dyn PatchSchema)
}

#[cfg(test)]
mod tests {
    use super::super::{PatchError, apply_strategic_merge_patch};
    use super::*;
    use serde_json::{Value, json};

    fn schema(group: &str, kind: &str) -> &'static dyn PatchSchema {
        builtin_schema(group, kind).expect("built-in kind")
    }

    fn smp(group: &str, kind: &str, doc: &Value, patch: Value) -> Value {
        apply_strategic_merge_patch(doc, &patch, schema(group, kind)).expect("patch should apply")
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "default",
                "labels": {"app": "web", "tier": "frontend"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}\n"},
                "finalizers": ["example.com/a", "example.com/b"]
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "nginx",
                                "image": "nginx:1.25",
                                "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443, "protocol": "TCP"}],
                                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
                            },
                            {"name": "sidecar", "image": "busybox:1.36", "args": ["sleep", "infinity"]}
                        ],
                        "volumes": [
                            {"name": "data", "emptyDir": {}},
                            {"name": "cache", "emptyDir": {"medium": "Memory"}}
                        ],
                        "tolerations": [{"key": "a", "operator": "Exists"}],
                        "restartPolicy": "Always"
                    }
                }
            },
            "status": {
                "replicas": 2,
                "conditions": [
                    {"type": "Available", "status": "True"},
                    {"type": "Progressing", "status": "True"}
                ]
            }
        })
    }

    fn containers(v: &Value) -> &Value {
        &v["spec"]["template"]["spec"]["containers"]
    }

    // --- table coverage ---

    #[test]
    fn pod_spec_merge_keys() {
        let s = schema("apps", "Deployment");
        let ps = ["spec", "template", "spec"];
        let at = |rest: &[&'static str]| -> Vec<&str> { ps.iter().chain(rest).copied().collect() };
        assert_eq!(
            s.list_strategy(&at(&["containers"])),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            s.list_strategy(&at(&["initContainers"])),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            s.list_strategy(&at(&["ephemeralContainers"])),
            ListStrategy::MergeByKey("name")
        );
        for c in ["containers", "initContainers", "ephemeralContainers"] {
            assert_eq!(
                s.list_strategy(&at(&[c, "ports"])),
                ListStrategy::MergeByKey("containerPort")
            );
            assert_eq!(
                s.list_strategy(&at(&[c, "env"])),
                ListStrategy::MergeByKey("name")
            );
            assert_eq!(
                s.list_strategy(&at(&[c, "volumeMounts"])),
                ListStrategy::MergeByKey("mountPath")
            );
            assert_eq!(
                s.list_strategy(&at(&[c, "volumeDevices"])),
                ListStrategy::MergeByKey("devicePath")
            );
            assert_eq!(s.list_strategy(&at(&[c, "envFrom"])), ListStrategy::Atomic);
            assert_eq!(s.list_strategy(&at(&[c, "args"])), ListStrategy::Atomic);
        }
        assert_eq!(
            s.list_strategy(&at(&["volumes"])),
            ListStrategy::MergeByKey("name")
        );
        assert!(s.retain_keys(&at(&["volumes"])));
        assert_eq!(
            s.list_strategy(&at(&["imagePullSecrets"])),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            s.list_strategy(&at(&["hostAliases"])),
            ListStrategy::MergeByKey("ip")
        );
        assert_eq!(
            s.list_strategy(&at(&["topologySpreadConstraints"])),
            ListStrategy::MergeByKey("topologyKey")
        );
        assert_eq!(
            s.list_strategy(&at(&["schedulingGates"])),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            s.list_strategy(&at(&["resourceClaims"])),
            ListStrategy::MergeByKey("name")
        );
        assert!(s.retain_keys(&at(&["resourceClaims"])));
        assert_eq!(s.list_strategy(&at(&["tolerations"])), ListStrategy::Atomic);
        assert_eq!(
            s.list_strategy(&at(&["readinessGates"])),
            ListStrategy::Atomic
        );
        assert!(s.retain_keys(&["spec", "strategy"]));
        assert!(!s.retain_keys(&["spec", "template"]));
        assert_eq!(
            s.list_strategy(&["status", "conditions"]),
            ListStrategy::MergeByKey("type")
        );
        assert_eq!(
            s.list_strategy(&["metadata", "finalizers"]),
            ListStrategy::MergePrimitives
        );
        assert_eq!(
            s.list_strategy(&["metadata", "ownerReferences"]),
            ListStrategy::MergeByKey("uid")
        );
        assert_eq!(
            s.list_strategy(&["spec", "template", "metadata", "finalizers"]),
            ListStrategy::MergePrimitives
        );
        // The pod spec is not at the Deployment's root.
        assert_eq!(
            s.list_strategy(&["spec", "containers"]),
            ListStrategy::Atomic
        );
    }

    #[test]
    fn pod_spec_mount_points() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("", "Pod", &["spec"]),
            ("", "PodTemplate", &["template", "spec"]),
            ("", "ReplicationController", &["spec", "template", "spec"]),
            ("apps", "Deployment", &["spec", "template", "spec"]),
            ("apps", "ReplicaSet", &["spec", "template", "spec"]),
            ("apps", "StatefulSet", &["spec", "template", "spec"]),
            ("apps", "DaemonSet", &["spec", "template", "spec"]),
            ("batch", "Job", &["spec", "template", "spec"]),
            (
                "batch",
                "CronJob",
                &["spec", "jobTemplate", "spec", "template", "spec"],
            ),
        ];
        for (group, kind, at) in cases {
            let mut path: Vec<&str> = at.to_vec();
            path.push("containers");
            assert_eq!(
                schema(group, kind).list_strategy(&path),
                ListStrategy::MergeByKey("name"),
                "{group}/{kind}"
            );
            path.push("env");
            assert_eq!(
                schema(group, kind).list_strategy(&path),
                ListStrategy::MergeByKey("name")
            );
        }
    }

    #[test]
    fn other_kinds_merge_keys() {
        assert_eq!(
            schema("", "Service").list_strategy(&["spec", "ports"]),
            ListStrategy::MergeByKey("port")
        );
        assert_eq!(
            schema("", "Service").list_strategy(&["status", "conditions"]),
            ListStrategy::MergeByKey("type")
        );
        assert_eq!(
            schema("", "Node").list_strategy(&["status", "addresses"]),
            ListStrategy::MergeByKey("type")
        );
        assert_eq!(
            schema("", "Node").list_strategy(&["status", "conditions"]),
            ListStrategy::MergeByKey("type")
        );
        assert_eq!(
            schema("", "Node").list_strategy(&["spec", "podCIDRs"]),
            ListStrategy::MergePrimitives
        );
        assert_eq!(
            schema("", "Node").list_strategy(&["spec", "taints"]),
            ListStrategy::Atomic
        );
        let pod = schema("core", "Pod");
        assert_eq!(
            pod.list_strategy(&["status", "conditions"]),
            ListStrategy::MergeByKey("type")
        );
        assert_eq!(
            pod.list_strategy(&["status", "podIPs"]),
            ListStrategy::MergeByKey("ip")
        );
        assert_eq!(
            pod.list_strategy(&["status", "hostIPs"]),
            ListStrategy::MergeByKey("ip")
        );
        assert_eq!(
            pod.list_strategy(&["status", "containerStatuses"]),
            ListStrategy::Atomic
        );
        assert_eq!(
            pod.list_strategy(&["status", "containerStatuses", "volumeMounts"]),
            ListStrategy::MergeByKey("mountPath")
        );
        assert_eq!(
            pod.list_strategy(&["spec", "tolerations"]),
            ListStrategy::Atomic
        );
        assert_eq!(
            schema("", "Endpoints").list_strategy(&["subsets"]),
            ListStrategy::Atomic
        );
        assert_eq!(
            schema("", "Endpoints").list_strategy(&["subsets", "addresses"]),
            ListStrategy::Atomic
        );
        assert_eq!(
            schema("", "Endpoints").list_strategy(&["subsets", "ports"]),
            ListStrategy::Atomic
        );
        assert_eq!(
            schema("", "ServiceAccount").list_strategy(&["secrets"]),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            schema("", "ServiceAccount").list_strategy(&["imagePullSecrets"]),
            ListStrategy::Atomic
        );
        for (group, kind) in [
            ("", "Namespace"),
            ("", "PersistentVolumeClaim"),
            ("", "ReplicationController"),
            ("apps", "Deployment"),
            ("apps", "ReplicaSet"),
            ("apps", "StatefulSet"),
            ("apps", "DaemonSet"),
            ("batch", "Job"),
            ("autoscaling", "HorizontalPodAutoscaler"),
            ("policy", "PodDisruptionBudget"),
            ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
            ("apiregistration.k8s.io", "APIService"),
        ] {
            assert_eq!(
                schema(group, kind).list_strategy(&["status", "conditions"]),
                ListStrategy::MergeByKey("type"),
                "{group}/{kind}"
            );
        }
        for (group, kind) in [
            ("batch", "CronJob"),
            ("certificates.k8s.io", "CertificateSigningRequest"),
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ] {
            assert_eq!(
                schema(group, kind).list_strategy(&["status", "conditions"]),
                ListStrategy::Atomic
            );
        }
        assert_eq!(
            schema("", "ComponentStatus").list_strategy(&["conditions"]),
            ListStrategy::MergeByKey("type")
        );
        assert!(schema("policy", "PodDisruptionBudget").replace_map(&["spec", "selector"]));
        assert!(!schema("apps", "Deployment").replace_map(&["spec", "selector"]));
        let vwc = schema(
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
        );
        assert_eq!(
            vwc.list_strategy(&["webhooks"]),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            vwc.list_strategy(&["webhooks", "matchConditions"]),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            vwc.list_strategy(&["webhooks", "rules"]),
            ListStrategy::Atomic
        );
        assert_eq!(
            schema("storage.k8s.io", "CSINode").list_strategy(&["spec", "drivers"]),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            schema("resource.k8s.io", "ResourceClaim").list_strategy(&["status", "reservedFor"]),
            ListStrategy::MergeByKey("uid")
        );
        for (group, kind) in [
            ("", "ConfigMap"),
            ("rbac.authorization.k8s.io", "ClusterRole"),
            ("coordination.k8s.io", "Lease"),
        ] {
            let s = schema(group, kind);
            assert_eq!(
                s.list_strategy(&["metadata", "finalizers"]),
                ListStrategy::MergePrimitives
            );
            assert_eq!(s.list_strategy(&["rules"]), ListStrategy::Atomic);
        }
    }

    #[test]
    fn unknown_kinds_have_no_schema() {
        assert!(builtin_schema("example.com", "Widget").is_none());
        assert!(builtin_schema("apps", "Pod").is_none());
        assert!(builtin_schema("", "Deployment").is_none());
        assert!(builtin_schema("", "pod").is_none());
        assert!(builtin_schema("core", "Pod").is_some());
        assert!(builtin_schema("", "Pod").is_some());
        // Every table entry is reachable and unique.
        for (i, k) in KINDS.iter().enumerate() {
            assert!(
                KINDS[..i]
                    .iter()
                    .all(|o| (o.group, o.kind) != (k.group, k.kind)),
                "duplicate {}/{}",
                k.group,
                k.kind
            );
            assert!(builtin_schema(k.group, k.kind).is_some());
        }
    }

    // --- patches on built-in kinds ---

    #[test]
    fn containers_merge_by_name() {
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "busybox:1.37"}]}}}}),
        );
        let c = containers(&out);
        assert_eq!(c.as_array().unwrap().len(), 2);
        assert_eq!(c[0]["name"], "nginx");
        assert_eq!(c[0]["image"], "nginx:1.25");
        assert_eq!(
            c[0]["env"],
            deployment()["spec"]["template"]["spec"]["containers"][0]["env"]
        );
        assert_eq!(
            c[1],
            json!({"name": "sidecar", "image": "busybox:1.37", "args": ["sleep", "infinity"]})
        );
        // Everything else untouched.
        let mut expected = deployment();
        expected["spec"]["template"]["spec"]["containers"][1]["image"] = json!("busybox:1.37");
        assert_eq!(out, expected);
    }

    #[test]
    fn delete_a_container() {
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"spec": {"template": {"spec": {"containers": [{"$patch": "delete", "name": "sidecar"}]}}}}),
        );
        assert_eq!(
            containers(&out),
            &json!([deployment()["spec"]["template"]["spec"]["containers"][0]])
        );
    }

    #[test]
    fn replace_the_container_list() {
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"spec": {"template": {"spec": {"containers": [
                {"$patch": "replace"},
                {"name": "only", "image": "only:1"}
            ]}}}}),
        );
        assert_eq!(
            containers(&out),
            &json!([{"name": "only", "image": "only:1"}])
        );
    }

    #[test]
    fn env_merges_by_name() {
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "env": [
                {"name": "B", "value": "20"},
                {"name": "C", "value": "3"},
                {"name": "A", "$patch": "delete"}
            ]}]}}}}),
        );
        assert_eq!(
            containers(&out)[0]["env"],
            json!([{"name": "B", "value": "20"}, {"name": "C", "value": "3"}])
        );
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "env": [{"name": "A", "value": null, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]}}}}),
        );
        assert_eq!(
            containers(&out)[0]["env"],
            json!([{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, {"name": "B", "value": "2"}])
        );
    }

    #[test]
    fn ports_merge_by_container_port() {
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "ports": [
                {"containerPort": 443, "name": "https"},
                {"containerPort": 8080}
            ]}]}}}}),
        );
        assert_eq!(
            containers(&out)[0]["ports"],
            json!([
                {"containerPort": 80, "protocol": "TCP"},
                {"containerPort": 443, "protocol": "TCP", "name": "https"},
                {"containerPort": 8080}
            ])
        );
    }

    #[test]
    fn tolerations_are_atomic() {
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"spec": {"template": {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}}}),
        );
        assert_eq!(
            out["spec"]["template"]["spec"]["tolerations"],
            json!([{"key": "b", "operator": "Exists"}])
        );
    }

    #[test]
    fn finalizers_set_merge_and_delete() {
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"metadata": {"finalizers": ["example.com/b", "example.com/c"]}}),
        );
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["example.com/a", "example.com/b", "example.com/c"])
        );
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["example.com/b"]));
        // Clearing all finalizers the usual way (merge patch semantics on null).
        let out = smp(
            "",
            "Pod",
            &json!({"metadata": {"finalizers": ["x"]}}),
            json!({"metadata": {"finalizers": null}}),
        );
        assert_eq!(out, json!({"metadata": {}}));
    }

    #[test]
    fn owner_references_merge_by_uid() {
        let doc = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1"}
        ]}});
        let out = smp(
            "",
            "Pod",
            &doc,
            json!({"metadata": {"ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1", "controller": true},
                {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "2"}
            ]}}),
        );
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1", "controller": true},
                {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "2"}
            ])
        );
    }

    #[test]
    fn set_element_order_orders_containers() {
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "init"}, {"name": "sidecar"}, {"name": "nginx"}],
                "containers": [{"name": "init", "image": "init:1"}]
            }}}}),
        );
        let names: Vec<&str> = containers(&out)
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["init", "sidecar", "nginx"]);
        assert_eq!(
            containers(&out)[2],
            deployment()["spec"]["template"]["spec"]["containers"][0]
        );
    }

    #[test]
    fn retain_keys_strategy_switch_to_recreate() {
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        );
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        // What kubectl sends when rollingUpdate was in the last-applied configuration.
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": null, "type": "Recreate"}}}),
        );
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        // Without the directive the old key stays (and validation would reject it).
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"spec": {"strategy": {"type": "Recreate"}}}),
        );
        assert_eq!(out["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        // Setting a key that is not retained is rejected.
        let e = apply_strategic_merge_patch(
            &deployment(),
            &json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": {}}}}),
            schema("apps", "Deployment"),
        )
        .unwrap_err();
        assert_eq!(e, PatchError::BadPatchFormatForRetainKeys);
        assert_eq!(e.status_code(), 400);
    }

    #[test]
    fn service_ports_merge_by_port() {
        let svc = json!({
            "metadata": {"name": "web"},
            "spec": {"type": "ClusterIP", "ports": [
                {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80},
                {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 443}
            ]}
        });
        let out = smp(
            "",
            "Service",
            &svc,
            json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}]}}),
        );
        assert_eq!(
            out["spec"]["ports"],
            json!([
                {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
                {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 443}
            ])
        );
        let out = smp(
            "",
            "Service",
            &svc,
            json!({"spec": {"ports": [{"port": 8443, "name": "alt"}]}}),
        );
        assert_eq!(out["spec"]["ports"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn null_removes_map_keys() {
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"metadata": {"labels": {"tier": null, "env": "prod"}, "annotations": null}}),
        );
        assert_eq!(
            out["metadata"]["labels"],
            json!({"app": "web", "env": "prod"})
        );
        assert!(out["metadata"].get("annotations").is_none());
    }

    #[test]
    fn pod_status_conditions_merge_by_type() {
        let pod = json!({"status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False"}
        ], "podIPs": [{"ip": "10.0.0.5"}]}});
        let out = smp(
            "",
            "Pod",
            &pod,
            json!({"status": {"$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}],
                   "conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}}),
        );
        assert_eq!(
            out,
            json!({"status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"}
            ], "podIPs": [{"ip": "10.0.0.5"}]}})
        );
    }

    #[test]
    fn node_status_addresses_merge_by_type() {
        let node = json!({"status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n1"}],
            "conditions": [{"type": "Ready", "status": "False"}]
        }});
        let out = smp(
            "",
            "Node",
            &node,
            json!({"status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}],
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"}]
            }}),
        );
        assert_eq!(
            out["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n1"}])
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"}])
        );
    }

    #[test]
    fn cron_job_pod_spec_is_deep() {
        let cj = json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]
        }}}}}});
        let out = smp(
            "batch",
            "CronJob",
            &cj,
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "b:2"}]}}}}}}),
        );
        assert_eq!(
            out["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}])
        );
    }

    #[test]
    fn pdb_selector_is_replaced() {
        let pdb = json!({"spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "a", "tier": "x"}}}});
        let out = smp(
            "policy",
            "PodDisruptionBudget",
            &pdb,
            json!({"spec": {"selector": {"matchLabels": {"app": "b"}}}}),
        );
        assert_eq!(
            out["spec"]["selector"],
            json!({"matchLabels": {"app": "b"}})
        );
    }

    #[test]
    fn endpoints_subsets_are_atomic() {
        let ep = json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]});
        let out = smp(
            "",
            "Endpoints",
            &ep,
            json!({"subsets": [{"addresses": [{"ip": "10.0.0.2"}]}]}),
        );
        assert_eq!(out["subsets"], json!([{"addresses": [{"ip": "10.0.0.2"}]}]));
    }

    #[test]
    fn webhooks_merge_by_name() {
        let vwc = json!({"webhooks": [
            {"name": "a.example.com", "failurePolicy": "Fail", "rules": [{"operations": ["CREATE"]}]},
            {"name": "b.example.com", "failurePolicy": "Fail"}
        ]});
        let out = smp(
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
            &vwc,
            json!({"webhooks": [{"name": "a.example.com", "failurePolicy": "Ignore"}]}),
        );
        assert_eq!(out["webhooks"][0]["failurePolicy"], "Ignore");
        assert_eq!(
            out["webhooks"][0]["rules"],
            json!([{"operations": ["CREATE"]}])
        );
        assert_eq!(out["webhooks"][1]["name"], "b.example.com");
    }

    #[test]
    fn missing_merge_key_error_text() {
        let e = apply_strategic_merge_patch(
            &json!({"spec": {"template": {"spec": {"volumes": [{"name": "a", "emptyDir": {}}]}}}}),
            &json!({"spec": {"template": {"spec": {"volumes": [{"hostPath": {"path": "/var/lib/kubelet/pods"}}]}}}}),
            schema("apps", "DaemonSet"),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "map: map[hostPath:map[path:/var/lib/kubelet/pods]] does not contain declared merge key: name"
        );
    }

    // --- what `kubectl apply` (1.32, client-side) sends on re-apply ---

    #[test]
    fn kubectl_apply_image_change() {
        let last_applied = "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"annotations\":{},\"name\":\"web\",\"namespace\":\"default\"},\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"image\":\"nginx:1.27\",\"name\":\"nginx\"}]}}}}\n";
        let patch = json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": last_applied}},
            "spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "nginx"}, {"name": "sidecar"}],
                "containers": [{"image": "nginx:1.27", "name": "nginx"}]
            }}}
        });
        let out = smp("apps", "Deployment", &deployment(), patch);
        let mut expected = deployment();
        expected["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
            json!(last_applied);
        expected["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
        assert_eq!(out, expected);
    }

    #[test]
    fn kubectl_apply_env_and_port_changes() {
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "nginx"}, {"name": "sidecar"}],
            "containers": [{
                "$setElementOrder/env": [{"name": "A"}, {"name": "C"}],
                "$setElementOrder/ports": [{"containerPort": 80}],
                "env": [{"$patch": "delete", "name": "B"}, {"name": "C", "value": "3"}],
                "name": "nginx",
                "ports": [{"$patch": "delete", "containerPort": 443}]
            }]
        }}}});
        let out = smp("apps", "Deployment", &deployment(), patch);
        let c = &containers(&out)[0];
        assert_eq!(
            c["env"],
            json!([{"name": "A", "value": "1"}, {"name": "C", "value": "3"}])
        );
        assert_eq!(
            c["ports"],
            json!([{"containerPort": 80, "protocol": "TCP"}])
        );
        assert_eq!(
            c["volumeMounts"],
            json!([{"name": "data", "mountPath": "/data"}])
        );
        assert_eq!(containers(&out)[1]["name"], "sidecar");
    }

    #[test]
    fn kubectl_apply_remove_container_volume_and_label() {
        let patch = json!({
            "metadata": {"labels": {"tier": null}},
            "spec": {
                "replicas": 3,
                "template": {"spec": {
                    "$setElementOrder/containers": [{"name": "nginx"}],
                    "$setElementOrder/volumes": [{"name": "data"}],
                    "containers": [{"$patch": "delete", "name": "sidecar"}],
                    "volumes": [{"$patch": "delete", "name": "cache"}]
                }}
            }
        });
        let out = smp("apps", "Deployment", &deployment(), patch);
        assert_eq!(out["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(out["spec"]["replicas"], 3);
        let names: Vec<&Value> = containers(&out)
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["name"])
            .collect();
        assert_eq!(names, [&json!("nginx")]);
        assert_eq!(
            out["spec"]["template"]["spec"]["volumes"],
            json!([{"name": "data", "emptyDir": {}}])
        );
    }

    #[test]
    fn kubectl_apply_volume_source_switch() {
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/volumes": [{"name": "data"}, {"name": "cache"}],
            "volumes": [{"$retainKeys": ["configMap", "name"], "configMap": {"name": "cfg"}, "emptyDir": null, "name": "data"}]
        }}}});
        let out = smp("apps", "Deployment", &deployment(), patch);
        assert_eq!(
            out["spec"]["template"]["spec"]["volumes"],
            json!([{"name": "data", "configMap": {"name": "cfg"}}, {"name": "cache", "emptyDir": {"medium": "Memory"}}])
        );
    }

    #[test]
    fn kubectl_apply_add_sidecar_first_and_strategy() {
        let patch = json!({"spec": {
            "strategy": {"$retainKeys": ["type"], "rollingUpdate": null, "type": "Recreate"},
            "template": {"spec": {
                "$setElementOrder/containers": [{"name": "proxy"}, {"name": "nginx"}, {"name": "sidecar"}],
                "containers": [{"image": "envoy:1.30", "name": "proxy", "ports": [{"containerPort": 15001}]}]
            }}
        }});
        let out = smp("apps", "Deployment", &deployment(), patch);
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        let names: Vec<&str> = containers(&out)
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["proxy", "nginx", "sidecar"]);
        assert_eq!(
            containers(&out)[0],
            json!({"image": "envoy:1.30", "name": "proxy", "ports": [{"containerPort": 15001}]})
        );
    }

    #[test]
    fn kubectl_apply_finalizers_primitive_list() {
        let patch = json!({"metadata": {
            "$deleteFromPrimitiveList/finalizers": ["example.com/a"],
            "$setElementOrder/finalizers": ["example.com/c", "example.com/b"],
            "finalizers": ["example.com/c"]
        }});
        let out = smp("apps", "Deployment", &deployment(), patch);
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["example.com/c", "example.com/b"])
        );
    }

    #[test]
    fn kubectl_apply_swap_container_next_to_injected_sidecar() {
        // The live pod template has an injected sidecar that the config never had.
        let doc = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "app:1"},
            {"name": "istio-proxy", "image": "proxyv2:1.22"}
        ]}}}});
        let out = smp(
            "apps",
            "Deployment",
            &doc,
            json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "app2"}],
                "containers": [{"image": "app2:1", "name": "app2"}, {"$patch": "delete", "name": "app"}]
            }}}}),
        );
        assert_eq!(
            containers(&out),
            &json!([{"name": "istio-proxy", "image": "proxyv2:1.22"}, {"image": "app2:1", "name": "app2"}])
        );
    }

    #[test]
    fn kubectl_patch_add_container_without_order() {
        // `kubectl patch --type strategic` with a new container: added in front.
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "new", "image": "new:1"}]}}}}),
        );
        let names: Vec<&str> = containers(&out)
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["new", "nginx", "sidecar"]);
    }

    #[test]
    fn status_conditions_on_workloads() {
        let out = smp(
            "apps",
            "Deployment",
            &deployment(),
            json!({"status": {"conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}}),
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([
                {"type": "Available", "status": "True"},
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
            ])
        );
    }
}
