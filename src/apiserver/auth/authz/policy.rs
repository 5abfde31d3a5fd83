//! The default RBAC policy k3rs ships: the ClusterRoles and ClusterRoleBindings Kubernetes
//! users expect (`cluster-admin`, `admin`, `edit`, `view` with their aggregation labels,
//! `system:discovery`, `system:basic-user`, `system:public-info-viewer`, the component roles)
//! and the rules of the Node authorizer. Data only: [`super::rbac`] evaluates it and
//! `bootstrap` stores the roles at start.

use serde_json::{Value, json};

/// One rule of a role, as written in the tables below.
#[derive(Debug, Clone, Copy)]
pub struct StaticRule {
    pub verbs: &'static [&'static str],
    pub groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub urls: &'static [&'static str],
}

const fn rule(
    verbs: &'static [&'static str],
    groups: &'static [&'static str],
    resources: &'static [&'static str],
) -> StaticRule {
    StaticRule {
        verbs,
        groups,
        resources,
        urls: &[],
    }
}

const fn urls(verbs: &'static [&'static str], urls: &'static [&'static str]) -> StaticRule {
    StaticRule {
        verbs,
        groups: &[],
        resources: &[],
        urls,
    }
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const EVENTS: &[&str] = &["create", "patch", "update"];

/// `view`'s rules (Kubernetes's `system:aggregate-to-view`; secrets are left out on purpose).
const VIEW: &[StaticRule] = &[
    rule(
        READ,
        &[""],
        &[
            "configmaps",
            "endpoints",
            "persistentvolumeclaims",
            "persistentvolumeclaims/status",
            "pods",
            "pods/log",
            "pods/status",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "replicationcontrollers/status",
            "serviceaccounts",
            "services",
            "services/status",
            "bindings",
            "events",
            "limitranges",
            "namespaces",
            "namespaces/status",
            "resourcequotas",
            "resourcequotas/status",
        ],
    ),
    rule(
        READ,
        &["apps"],
        &[
            "controllerrevisions",
            "daemonsets",
            "daemonsets/status",
            "deployments",
            "deployments/scale",
            "deployments/status",
            "replicasets",
            "replicasets/scale",
            "replicasets/status",
            "statefulsets",
            "statefulsets/scale",
            "statefulsets/status",
        ],
    ),
    rule(
        READ,
        &["autoscaling"],
        &[
            "horizontalpodautoscalers",
            "horizontalpodautoscalers/status",
        ],
    ),
    rule(
        READ,
        &["batch"],
        &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
    ),
    rule(
        READ,
        &["policy"],
        &["poddisruptionbudgets", "poddisruptionbudgets/status"],
    ),
    rule(
        READ,
        &["networking.k8s.io"],
        &["ingresses", "ingresses/status", "networkpolicies"],
    ),
    rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
];

/// `edit`'s rules on top of `view` (Kubernetes's `system:aggregate-to-edit`).
const EDIT: &[StaticRule] = &[
    rule(
        READ,
        &[""],
        &[
            "pods/attach",
            "pods/exec",
            "pods/portforward",
            "pods/proxy",
            "secrets",
            "services/proxy",
        ],
    ),
    rule(&["impersonate"], &[""], &["serviceaccounts"]),
    rule(
        WRITE,
        &[""],
        &[
            "pods",
            "pods/attach",
            "pods/exec",
            "pods/portforward",
            "pods/proxy",
            "configmaps",
            "events",
            "persistentvolumeclaims",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "secrets",
            "serviceaccounts",
            "services",
            "services/proxy",
        ],
    ),
    rule(
        &["create"],
        &[""],
        &["pods/eviction", "serviceaccounts/token"],
    ),
    rule(
        WRITE,
        &["apps"],
        &[
            "daemonsets",
            "deployments",
            "deployments/rollback",
            "deployments/scale",
            "replicasets",
            "replicasets/scale",
            "statefulsets",
            "statefulsets/scale",
        ],
    ),
    rule(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
    rule(WRITE, &["batch"], &["cronjobs", "jobs"]),
    rule(WRITE, &["policy"], &["poddisruptionbudgets"]),
    rule(
        WRITE,
        &["networking.k8s.io"],
        &["ingresses", "networkpolicies"],
    ),
    rule(WRITE, &["discovery.k8s.io"], &["endpointslices"]),
    rule(
        &[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ],
        &["coordination.k8s.io"],
        &["leases"],
    ),
];

/// `admin`'s rules on top of `edit` (Kubernetes's `system:aggregate-to-admin`).
const ADMIN: &[StaticRule] = &[
    rule(
        &["create"],
        &["authorization.k8s.io"],
        &["localsubjectaccessreviews"],
    ),
    rule(
        &[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ],
        &["rbac.authorization.k8s.io"],
        &["rolebindings", "roles"],
    ),
];

const EVERYTHING: &[StaticRule] = &[rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])];

const DISCOVERY: &[StaticRule] = &[urls(
    &["get"],
    &[
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/",
    ],
)];

const PUBLIC_INFO: &[StaticRule] = &[urls(
    &["get"],
    &["/healthz", "/livez", "/readyz", "/version", "/version/"],
)];

const BASIC_USER: &[StaticRule] = &[
    rule(
        &["create"],
        &["authorization.k8s.io"],
        &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
    ),
    rule(
        &["create"],
        &["authentication.k8s.io"],
        &["selfsubjectreviews"],
    ),
];

/// kube-scheduler's needs (Kubernetes's `system:kube-scheduler` plus the volume-scheduler
/// reads), for the in-process scheduler's identity.
const SCHEDULER: &[StaticRule] = &[
    rule(EVENTS, &["", "events.k8s.io"], &["events"]),
    rule(
        &["create", "get", "list", "watch", "update", "patch"],
        &["coordination.k8s.io"],
        &["leases"],
    ),
    rule(
        READ,
        &[""],
        &["nodes", "namespaces", "services", "replicationcontrollers"],
    ),
    rule(
        &["delete", "get", "list", "watch", "patch", "update"],
        &[""],
        &["pods"],
    ),
    rule(&["create"], &[""], &["bindings", "pods/binding"]),
    rule(&["patch", "update"], &[""], &["pods/status"]),
    rule(READ, &["apps"], &["replicasets", "statefulsets"]),
    rule(READ, &["policy"], &["poddisruptionbudgets"]),
    rule(
        READ,
        &[""],
        &["persistentvolumeclaims", "persistentvolumes"],
    ),
    rule(
        READ,
        &["storage.k8s.io"],
        &[
            "csinodes",
            "csidrivers",
            "csistoragecapacities",
            "storageclasses",
        ],
    ),
    rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
    rule(
        &["create"],
        &["authorization.k8s.io"],
        &["subjectaccessreviews"],
    ),
];

/// kube-proxy's needs (Kubernetes's `system:node-proxier`).
const NODE_PROXIER: &[StaticRule] = &[
    rule(READ, &[""], &["endpoints", "services", "nodes"]),
    rule(EVENTS, &["", "events.k8s.io"], &["events"]),
    rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
];

/// What a node's credentials (`system:node:<name>`, group `system:nodes`) may do: the
/// kubelet's rules (Kubernetes's `system:node`) plus what k3rs's other node components
/// (proxy, DNS, pod network, network policy), which share the node's identity, read.
/// Secrets, configmaps, claims, volumes, tokens, leases and writes to nodes and pods are
/// narrowed further to the node's own objects by [`super::node`] (Kubernetes's Node
/// authorizer and NodeRestriction) before these rules are consulted.
pub const NODE: &[StaticRule] = &[
    rule(
        &[
            "create", "get", "list", "watch", "delete", "patch", "update",
        ],
        &[""],
        &["nodes"],
    ),
    // The kubelet reads its Node through `nodes/status` before patching it.
    rule(
        &["get", "patch", "update"],
        &[""],
        &["nodes/status", "pods/status"],
    ),
    rule(EVENTS, &["", "events.k8s.io"], &["events"]),
    rule(
        &["get", "list", "watch", "create", "delete"],
        &[""],
        &["pods"],
    ),
    rule(
        &["create"],
        &[""],
        &["pods/eviction", "serviceaccounts/token"],
    ),
    rule(
        READ,
        &[""],
        &[
            "services",
            "endpoints",
            "configmaps",
            "secrets",
            "persistentvolumeclaims",
            "persistentvolumes",
            "namespaces",
            "serviceaccounts",
        ],
    ),
    rule(
        &[
            "create", "delete", "get", "patch", "update", "list", "watch",
        ],
        &["coordination.k8s.io"],
        &["leases"],
    ),
    rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
    rule(READ, &["networking.k8s.io"], &["networkpolicies"]),
    rule(
        READ,
        &["storage.k8s.io"],
        &[
            "csinodes",
            "csidrivers",
            "volumeattachments",
            "storageclasses",
        ],
    ),
    rule(READ, &["node.k8s.io"], &["runtimeclasses"]),
    rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
    rule(
        &["create"],
        &["authorization.k8s.io"],
        &["subjectaccessreviews", "localsubjectaccessreviews"],
    ),
];

/// One default ClusterRole: its name, rules, and the `aggregate-to-*` label it carries or
/// the labels whose roles it aggregates.
pub struct DefaultRole {
    pub name: &'static str,
    pub rules: &'static [StaticRule],
    pub aggregate_to: Option<&'static str>,
    pub aggregates: &'static [&'static str],
}

const fn role(name: &'static str, rules: &'static [StaticRule]) -> DefaultRole {
    DefaultRole {
        name,
        rules,
        aggregate_to: None,
        aggregates: &[],
    }
}

/// The default ClusterRoles. `admin`, `edit` and `view` aggregate, as in Kubernetes, so a
/// CRD's `rbac.authorization.k8s.io/aggregate-to-view: "true"` role extends them.
pub const ROLES: &[DefaultRole] = &[
    role("cluster-admin", EVERYTHING),
    DefaultRole {
        name: "admin",
        rules: &[],
        aggregate_to: None,
        aggregates: &["rbac.authorization.k8s.io/aggregate-to-admin"],
    },
    DefaultRole {
        name: "edit",
        rules: &[],
        aggregate_to: Some("admin"),
        aggregates: &["rbac.authorization.k8s.io/aggregate-to-edit"],
    },
    DefaultRole {
        name: "view",
        rules: &[],
        aggregate_to: Some("edit"),
        aggregates: &["rbac.authorization.k8s.io/aggregate-to-view"],
    },
    DefaultRole {
        name: "system:aggregate-to-admin",
        rules: ADMIN,
        aggregate_to: Some("admin"),
        aggregates: &[],
    },
    DefaultRole {
        name: "system:aggregate-to-edit",
        rules: EDIT,
        aggregate_to: Some("edit"),
        aggregates: &[],
    },
    DefaultRole {
        name: "system:aggregate-to-view",
        rules: VIEW,
        aggregate_to: Some("view"),
        aggregates: &[],
    },
    role("system:discovery", DISCOVERY),
    role("system:basic-user", BASIC_USER),
    role("system:public-info-viewer", PUBLIC_INFO),
    role("system:kube-scheduler", SCHEDULER),
    // k3rs's controllers run in-process under one identity (kube-controller-manager without
    // --use-service-account-credentials), so that identity needs every controller's rights.
    role("system:kube-controller-manager", EVERYTHING),
    role("system:node-proxier", NODE_PROXIER),
    role("system:node", NODE),
];

/// The default ClusterRoleBindings: (name = role, subjects as (kind, name)).
pub const BINDINGS: &[(&str, &[(&str, &str)])] = &[
    ("cluster-admin", &[("Group", "system:masters")]),
    ("system:discovery", &[("Group", "system:authenticated")]),
    ("system:basic-user", &[("Group", "system:authenticated")]),
    (
        "system:public-info-viewer",
        &[
            ("Group", "system:authenticated"),
            ("Group", "system:unauthenticated"),
        ],
    ),
    (
        "system:kube-scheduler",
        &[("User", "system:kube-scheduler")],
    ),
    (
        "system:kube-controller-manager",
        &[("User", "system:kube-controller-manager")],
    ),
    ("system:node-proxier", &[("User", "system:kube-proxy")]),
];

fn rules_json(rules: &[StaticRule]) -> Vec<Value> {
    rules
        .iter()
        .map(|r| {
            if r.urls.is_empty() {
                json!({"apiGroups": r.groups, "resources": r.resources, "verbs": r.verbs})
            } else {
                json!({"nonResourceURLs": r.urls, "verbs": r.verbs})
            }
        })
        .collect()
}

fn bootstrap_metadata(name: &str, extra_labels: &[(&str, &str)]) -> Value {
    let mut labels = serde_json::Map::new();
    labels.insert("kubernetes.io/bootstrapping".into(), "rbac-defaults".into());
    for (k, v) in extra_labels {
        labels.insert((*k).into(), (*v).into());
    }
    json!({
        "name": name,
        "labels": labels,
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

/// The default ClusterRoles as API objects.
pub fn cluster_role_objects() -> Vec<Value> {
    ROLES
        .iter()
        .map(|role| {
            let label = role
                .aggregate_to
                .map(|to| format!("rbac.authorization.k8s.io/aggregate-to-{to}"));
            let extra: Vec<(&str, &str)> =
                label.as_deref().map(|l| (l, "true")).into_iter().collect();
            let mut object = json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": bootstrap_metadata(role.name, &extra),
                "rules": rules_json(role.rules),
            });
            if !role.aggregates.is_empty() {
                let selectors: Vec<Value> = role
                    .aggregates
                    .iter()
                    .map(|l| json!({"matchLabels": {*l: "true"}}))
                    .collect();
                object["aggregationRule"] = json!({"clusterRoleSelectors": selectors});
            }
            object
        })
        .collect()
}

/// The default ClusterRoleBindings as API objects.
pub fn cluster_role_binding_objects() -> Vec<Value> {
    BINDINGS
        .iter()
        .map(|(name, subjects)| {
            let subjects: Vec<Value> = subjects
                .iter()
                .map(|(kind, subject)| {
                    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject})
                })
                .collect();
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": bootstrap_metadata(name, &[]),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": subjects,
            })
        })
        .collect()
}
