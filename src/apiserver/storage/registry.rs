//! The resource registry: every resource the API server serves, with the facts
//! discovery, routing, storage keys and kubectl need (group, version, kind, plural,
//! scope, verbs, short names, categories, subresources). Built-in kinds are a static
//! table; CustomResourceDefinitions add rows at run time.

use std::sync::{Arc, RwLock};

/// One served resource (one group/version/plural).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub verbs: Vec<&'static str>,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Subresources served under `<name>/<subresource>` (`status`, `scale`, `binding`, ...).
    pub subresources: Vec<String>,
    /// True for resources defined by a CustomResourceDefinition.
    pub custom: bool,
}

impl ResourceInfo {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Storage key prefix of all objects of this resource (ends with `/`).
    pub fn key_prefix(&self) -> String {
        if self.group.is_empty() {
            format!("/registry/{}/", self.plural)
        } else {
            format!("/registry/{}/{}/", self.group, self.plural)
        }
    }

    /// Key prefix of the objects in one namespace (or all, for cluster-scoped).
    pub fn namespace_prefix(&self, namespace: Option<&str>) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/", self.key_prefix()),
            _ => self.key_prefix(),
        }
    }

    /// Storage key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/{name}", self.key_prefix()),
            _ => format!("{}{name}", self.key_prefix()),
        }
    }

    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.iter().any(|s| s == name)
    }
}

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// (group, version, kind, plural, namespaced, short names, categories, subresources)
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

const BUILTIN: &[Row] = &[
    (
        "",
        "v1",
        "Namespace",
        "namespaces",
        false,
        &["ns"],
        &[],
        &["status", "finalize"],
    ),
    (
        "",
        "v1",
        "Pod",
        "pods",
        true,
        &["po"],
        &["all"],
        &[
            "status",
            "binding",
            "eviction",
            "log",
            "exec",
            "attach",
            "portforward",
            "ephemeralcontainers",
        ],
    ),
    (
        "",
        "v1",
        "Service",
        "services",
        true,
        &["svc"],
        &["all"],
        &["status", "proxy"],
    ),
    ("", "v1", "Endpoints", "endpoints", true, &["ep"], &[], &[]),
    ("", "v1", "ConfigMap", "configmaps", true, &["cm"], &[], &[]),
    ("", "v1", "Secret", "secrets", true, &[], &[], &[]),
    (
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        true,
        &["sa"],
        &[],
        &["token"],
    ),
    (
        "",
        "v1",
        "Node",
        "nodes",
        false,
        &["no"],
        &[],
        &["status", "proxy"],
    ),
    ("", "v1", "Event", "events", true, &["ev"], &[], &[]),
    (
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        true,
        &["rc"],
        &["all"],
        &["status", "scale"],
    ),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
        &["pvc"],
        &[],
        &["status"],
    ),
    (
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        false,
        &["pv"],
        &[],
        &["status"],
    ),
    (
        "",
        "v1",
        "LimitRange",
        "limitranges",
        true,
        &["limits"],
        &[],
        &[],
    ),
    (
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        true,
        &["quota"],
        &[],
        &["status"],
    ),
    ("", "v1", "PodTemplate", "podtemplates", true, &[], &[], &[]),
    (
        "apps",
        "v1",
        "Deployment",
        "deployments",
        true,
        &["deploy"],
        &["all"],
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        true,
        &["rs"],
        &["all"],
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        true,
        &["sts"],
        &["all"],
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        true,
        &["ds"],
        &["all"],
        &["status"],
    ),
    (
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        true,
        &[],
        &[],
        &[],
    ),
    (
        "batch",
        "v1",
        "Job",
        "jobs",
        true,
        &[],
        &["all"],
        &["status"],
    ),
    (
        "batch",
        "v1",
        "CronJob",
        "cronjobs",
        true,
        &["cj"],
        &["all"],
        &["status"],
    ),
    (
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true,
        &["hpa"],
        &["all"],
        &["status"],
    ),
    (
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        true,
        &[],
        &[],
        &[],
    ),
    (
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        true,
        &[],
        &[],
        &[],
    ),
    (
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        true,
        &["ev"],
        &[],
        &[],
    ),
    (
        "authentication.k8s.io",
        "v1",
        "SelfSubjectReview",
        "selfsubjectreviews",
        false,
        &[],
        &[],
        &[],
    ),
    (
        "authorization.k8s.io",
        "v1",
        "LocalSubjectAccessReview",
        "localsubjectaccessreviews",
        true,
        &[],
        &[],
        &[],
    ),
    (
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        false,
        &[],
        &[],
        &[],
    ),
    (
        "authorization.k8s.io",
        "v1",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        false,
        &[],
        &[],
        &[],
    ),
    (
        "authorization.k8s.io",
        "v1",
        "SubjectAccessReview",
        "subjectaccessreviews",
        false,
        &[],
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        true,
        &[],
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
        &[],
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
        &[],
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        &[],
        &[],
        &[],
    ),
    (
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        false,
        &["pc"],
        &[],
        &[],
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
        &["pdb"],
        &[],
        &["status"],
    ),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
        &["netpol"],
        &[],
        &[],
    ),
    (
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        true,
        &["ing"],
        &[],
        &["status"],
    ),
    (
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        false,
        &[],
        &[],
        &[],
    ),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
        &["sc"],
        &[],
        &[],
    ),
    (
        "node.k8s.io",
        "v1",
        "RuntimeClass",
        "runtimeclasses",
        false,
        &[],
        &[],
        &[],
    ),
    (
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        false,
        &["csr"],
        &[],
        &["status", "approval"],
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        &["crd", "crds"],
        &["api-extensions"],
        &["status"],
    ),
    (
        "apiregistration.k8s.io",
        "v1",
        "APIService",
        "apiservices",
        false,
        &[],
        &["api-extensions"],
        &["status"],
    ),
];

/// Groups in the order discovery lists them (kube-apiserver's priority order).
const GROUP_ORDER: &[&str] = &[
    "",
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
];

fn builtin(row: &Row) -> ResourceInfo {
    let (group, version, kind, plural, namespaced, short, categories, subresources) = *row;
    ResourceInfo {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_ascii_lowercase(),
        namespaced,
        // The review APIs answer a POST and keep nothing.
        verbs: if matches!(group, "authentication.k8s.io" | "authorization.k8s.io") {
            vec!["create"]
        } else {
            ALL_VERBS.to_vec()
        },
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: categories.iter().map(|s| s.to_string()).collect(),
        subresources: subresources.iter().map(|s| s.to_string()).collect(),
        custom: false,
    }
}

/// All served resources.
pub struct Registry {
    resources: RwLock<Vec<Arc<ResourceInfo>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// The built-in resources.
    pub fn new() -> Self {
        Registry {
            resources: RwLock::new(BUILTIN.iter().map(|r| Arc::new(builtin(r))).collect()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<ResourceInfo>>> {
        self.resources.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.read()
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned()
    }

    /// The resource for a kind in a group/version (used when decoding bodies).
    pub fn find_kind(&self, group: &str, version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        self.read()
            .iter()
            .find(|r| r.group == group && r.version == version && r.kind == kind)
            .cloned()
    }

    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        self.read().clone()
    }

    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceInfo>> {
        self.read()
            .iter()
            .filter(|r| r.group == group && r.version == version)
            .cloned()
            .collect()
    }

    /// Groups (excluding the legacy core group) with their versions, in discovery order.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let resources = self.read();
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for r in resources.iter().filter(|r| !r.group.is_empty()) {
            match groups.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, versions)) => {
                    if !versions.contains(&r.version) {
                        versions.push(r.version.clone());
                    }
                }
                None => groups.push((r.group.clone(), vec![r.version.clone()])),
            }
        }
        let rank = |g: &str| {
            GROUP_ORDER
                .iter()
                .position(|o| *o == g)
                .unwrap_or(usize::MAX)
        };
        groups.sort_by(|a, b| rank(&a.0).cmp(&rank(&b.0)).then(a.0.cmp(&b.0)));
        groups
    }

    /// Adds or replaces the resources of a CustomResourceDefinition.
    pub fn upsert_custom(&self, infos: Vec<ResourceInfo>) {
        let mut resources = self.resources.write().unwrap_or_else(|p| p.into_inner());
        for info in infos {
            let same = |r: &Arc<ResourceInfo>| {
                r.group == info.group && r.version == info.version && r.plural == info.plural
            };
            // A CRD never shadows a built-in resource: the built-in keeps being served, as
            // kube-apiserver's handlers come before the CRD handler.
            if resources.iter().any(|r| !r.custom && same(r)) {
                tracing::warn!(group = %info.group, version = %info.version, resource = %info.plural,
                    "a CustomResourceDefinition names a built-in resource; the built-in is served");
                continue;
            }
            resources.retain(|r| !same(r));
            resources.push(Arc::new(info));
        }
    }

    /// Removes every version of a custom resource.
    pub fn remove_custom(&self, group: &str, plural: &str) {
        let mut resources = self.resources.write().unwrap_or_else(|p| p.into_inner());
        resources.retain(|r| !(r.custom && r.group == group && r.plural == plural));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_lookups() {
        let registry = Registry::new();
        let pods = registry.find("", "v1", "pods").unwrap();
        assert_eq!(
            pods.key(Some("default"), "web"),
            "/registry/pods/default/web"
        );
        assert_eq!(pods.namespace_prefix(None), "/registry/pods/");
        let deploy = registry.find_kind("apps", "v1", "Deployment").unwrap();
        assert_eq!(deploy.key(Some("a"), "b"), "/registry/apps/deployments/a/b");
        let ns = registry.find("", "v1", "namespaces").unwrap();
        assert_eq!(ns.key(None, "default"), "/registry/namespaces/default");
        assert_eq!(registry.groups()[0].0, "apiregistration.k8s.io");
    }
}
