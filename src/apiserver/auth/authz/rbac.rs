//! The RBAC evaluator: an index of Roles, ClusterRoles and their bindings built from the
//! watch cache, and the rule matching Kubernetes's RBAC authorizer does (verbs, API groups,
//! resources with `*` and `*/subresource`, resourceNames, nonResourceURLs with a trailing
//! `*`, ClusterRole aggregation). Reads the cache only; never writes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::policy::StaticRule;
use super::{Attributes, RequestKind};
use crate::apiserver::auth::authn::Identity;
use crate::apiserver::storage::watchcache::WatchCache;

/// Key prefixes of the four RBAC kinds in the store.
pub const PREFIX: &str = "/registry/rbac.authorization.k8s.io/";

/// One rule, owned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub groups: Vec<String>,
    pub resources: Vec<String>,
    pub names: Vec<String>,
    pub urls: Vec<String>,
}

impl From<&PolicyRule> for Rule {
    fn from(r: &PolicyRule) -> Self {
        Rule {
            verbs: r.verbs.clone(),
            groups: r.api_groups.clone().unwrap_or_default(),
            resources: r.resources.clone().unwrap_or_default(),
            names: r.resource_names.clone().unwrap_or_default(),
            urls: r.non_resource_urls.clone().unwrap_or_default(),
        }
    }
}

impl From<&StaticRule> for Rule {
    fn from(r: &StaticRule) -> Self {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Rule {
            verbs: own(r.verbs),
            groups: own(r.groups),
            resources: own(r.resources),
            names: Vec::new(),
            urls: own(r.urls),
        }
    }
}

fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|v| v == "*" || v == want)
}

impl Rule {
    /// Whether this rule allows the request.
    pub fn allows(&self, attrs: &Attributes<'_>) -> bool {
        if !has(&self.verbs, attrs.verb) {
            return false;
        }
        match &attrs.kind {
            RequestKind::NonResource { path } => self.urls.iter().any(|url| {
                url == "*"
                    || url == path
                    || url
                        .strip_suffix('*')
                        .is_some_and(|prefix| path.starts_with(prefix))
            }),
            RequestKind::Resource {
                group,
                resource,
                subresource,
                name,
                ..
            } => {
                if !has(&self.groups, group) {
                    return false;
                }
                let resource_ok = self.resources.iter().any(|r| match subresource {
                    None => r == "*" || r == resource,
                    Some(sub) => {
                        r == "*"
                            || r.split_once('/').is_some_and(|(res, s)| {
                                (res == *resource || res == "*") && s == *sub
                            })
                    }
                });
                if !resource_ok {
                    return false;
                }
                self.names.is_empty() || name.is_some_and(|n| self.names.iter().any(|x| x == n))
            }
        }
    }
}

#[derive(Debug, Clone)]
enum RoleRef {
    ClusterRole(String),
    Role(String),
}

#[derive(Debug, Clone)]
struct Binding {
    name: String,
    subjects: Vec<Subject>,
    role: RoleRef,
}

fn subject_matches(subject: &Subject, who: &Identity, binding_namespace: Option<&str>) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == who.user,
        "Group" => who.groups.contains(&subject.name),
        "ServiceAccount" => {
            let namespace = subject
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .or(binding_namespace)
                .unwrap_or_default();
            who.user == format!("system:serviceaccount:{namespace}:{}", subject.name)
        }
        _ => false,
    }
}

/// Everything RBAC knows, at one point in time.
#[derive(Debug, Default)]
pub struct Index {
    cluster_roles: HashMap<String, Arc<Vec<Rule>>>,
    roles: HashMap<(String, String), Arc<Vec<Rule>>>,
    cluster_bindings: Vec<Binding>,
    bindings: HashMap<String, Vec<Binding>>,
}

fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector
        .match_labels
        .as_ref()
        .is_none_or(|want| want.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let expressions_ok = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    match serde_json::from_slice(bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(error = %e, "skipping an RBAC object that does not decode");
            None
        }
    }
}

impl Index {
    /// Builds the index from the cache's current RBAC objects.
    pub fn build(cache: &WatchCache) -> Index {
        let list = |plural: &str| cache.list(&format!("{PREFIX}{plural}/"), None).0;
        let mut index = Index::default();

        let cluster_roles: Vec<ClusterRole> = list("clusterroles")
            .iter()
            .filter_map(|o| decode(&o.bytes))
            .collect();
        // Aggregation: a role with an aggregationRule gets the rules of every role its
        // selectors match (one level, as the aggregation controller computes it, applied
        // until nothing changes so admin ⊇ edit ⊇ view).
        let mut rules: HashMap<String, Vec<Rule>> = cluster_roles
            .iter()
            .filter_map(|r| {
                let name = r.metadata.name.clone()?;
                Some((name, r.rules.iter().flatten().map(Rule::from).collect()))
            })
            .collect();
        for _ in 0..4 {
            let mut changed = false;
            for role in &cluster_roles {
                let (Some(name), Some(aggregation)) = (&role.metadata.name, &role.aggregation_rule)
                else {
                    continue;
                };
                let mut gathered: Vec<Rule> = rules.get(name).cloned().unwrap_or_default();
                for source in &cluster_roles {
                    let labels = source.metadata.labels.clone().unwrap_or_default();
                    let selected = aggregation
                        .cluster_role_selectors
                        .iter()
                        .flatten()
                        .any(|s| selector_matches(s, &labels));
                    let Some(source_name) = &source.metadata.name else {
                        continue;
                    };
                    if !selected || source_name == name {
                        continue;
                    }
                    for rule in rules.get(source_name).into_iter().flatten() {
                        if !gathered.contains(rule) {
                            gathered.push(rule.clone());
                            changed = true;
                        }
                    }
                }
                rules.insert(name.clone(), gathered);
            }
            if !changed {
                break;
            }
        }
        index.cluster_roles = rules.into_iter().map(|(k, v)| (k, Arc::new(v))).collect();

        for role in list("roles")
            .iter()
            .filter_map(|o| decode::<Role>(&o.bytes))
        {
            let (Some(ns), Some(name)) = (role.metadata.namespace, role.metadata.name) else {
                continue;
            };
            let rules = role.rules.iter().flatten().map(Rule::from).collect();
            index.roles.insert((ns, name), Arc::new(rules));
        }
        let role_ref = |kind: &str, name: &str| match kind {
            "ClusterRole" => Some(RoleRef::ClusterRole(name.to_string())),
            "Role" => Some(RoleRef::Role(name.to_string())),
            _ => None,
        };
        for binding in list("clusterrolebindings")
            .iter()
            .filter_map(|o| decode::<ClusterRoleBinding>(&o.bytes))
        {
            if binding.role_ref.kind != "ClusterRole" {
                continue;
            }
            index.cluster_bindings.push(Binding {
                name: binding.metadata.name.unwrap_or_default(),
                subjects: binding.subjects.unwrap_or_default(),
                role: RoleRef::ClusterRole(binding.role_ref.name),
            });
        }
        for binding in list("rolebindings")
            .iter()
            .filter_map(|o| decode::<RoleBinding>(&o.bytes))
        {
            let (Some(ns), Some(role)) = (
                binding.metadata.namespace.clone(),
                role_ref(&binding.role_ref.kind, &binding.role_ref.name),
            ) else {
                continue;
            };
            index.bindings.entry(ns).or_default().push(Binding {
                name: binding.metadata.name.unwrap_or_default(),
                subjects: binding.subjects.unwrap_or_default(),
                role,
            });
        }
        index
    }

    /// The effective rules of a ClusterRole (after aggregation).
    pub fn cluster_role(&self, name: &str) -> Vec<Rule> {
        self.cluster_roles
            .get(name)
            .map(|r| r.as_ref().clone())
            .unwrap_or_default()
    }

    fn rules_of(&self, role: &RoleRef, namespace: Option<&str>) -> Option<&Arc<Vec<Rule>>> {
        match role {
            RoleRef::ClusterRole(name) => self.cluster_roles.get(name),
            RoleRef::Role(name) => self.roles.get(&(namespace?.to_string(), name.clone())),
        }
    }

    /// Every rule that applies to `who` in `namespace` (cluster-wide rules included), with
    /// the binding that grants it: what `SelfSubjectRulesReview` reports and what
    /// [`Index::allows`] checks.
    pub fn rules_for<'a>(
        &'a self,
        who: &'a Identity,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a str, &'a Rule)> + 'a {
        let cluster = self
            .cluster_bindings
            .iter()
            .filter(move |b| b.subjects.iter().any(|s| subject_matches(s, who, None)))
            .flat_map(move |b| {
                self.rules_of(&b.role, None)
                    .into_iter()
                    .flat_map(|rules| rules.iter())
                    .map(move |r| (b.name.as_str(), r))
            });
        let local = namespace
            .and_then(|ns| self.bindings.get(ns).map(|b| (ns, b)))
            .into_iter()
            .flat_map(move |(ns, bindings)| {
                bindings
                    .iter()
                    .filter(move |b| b.subjects.iter().any(|s| subject_matches(s, who, Some(ns))))
                    .flat_map(move |b| {
                        self.rules_of(&b.role, Some(ns))
                            .into_iter()
                            .flat_map(|rules| rules.iter())
                            .map(move |r| (b.name.as_str(), r))
                    })
            });
        cluster.chain(local)
    }

    /// Whether some binding of `who` allows the request.
    pub fn allows(&self, who: &Identity, attrs: &Attributes<'_>) -> bool {
        let namespace = match &attrs.kind {
            RequestKind::Resource { namespace, .. } => *namespace,
            RequestKind::NonResource { .. } => None,
        };
        self.rules_for(who, namespace)
            .any(|(_, rule)| rule.allows(attrs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource<'a>(
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        sub: Option<&'a str>,
        name: Option<&'a str>,
    ) -> Attributes<'a> {
        Attributes {
            verb,
            kind: RequestKind::Resource {
                group,
                resource,
                subresource: sub,
                namespace: Some("default"),
                name,
            },
        }
    }

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> Rule {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Rule {
            verbs: own(verbs),
            groups: own(groups),
            resources: own(resources),
            names: own(names),
            urls: Vec::new(),
        }
    }

    #[test]
    fn rules_match_verbs_groups_resources_and_names() {
        let r = rule(&["get", "list"], &[""], &["pods", "pods/log"], &[]);
        assert!(r.allows(&resource("get", "", "pods", None, Some("a"))));
        assert!(r.allows(&resource("get", "", "pods", Some("log"), Some("a"))));
        assert!(!r.allows(&resource("get", "", "pods", Some("exec"), Some("a"))));
        assert!(!r.allows(&resource("delete", "", "pods", None, Some("a"))));
        assert!(!r.allows(&resource("get", "apps", "pods", None, Some("a"))));
        let star = rule(&["*"], &["*"], &["*/scale"], &[]);
        assert!(star.allows(&resource(
            "update",
            "apps",
            "deployments",
            Some("scale"),
            Some("d")
        )));
        assert!(!star.allows(&resource("update", "apps", "deployments", None, Some("d"))));
        let named = rule(&["get"], &[""], &["configmaps"], &["allowed"]);
        assert!(named.allows(&resource("get", "", "configmaps", None, Some("allowed"))));
        assert!(!named.allows(&resource("get", "", "configmaps", None, Some("other"))));
        assert!(!named.allows(&resource("get", "", "configmaps", None, None)));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let r = Rule {
            verbs: vec!["get".into()],
            urls: vec!["/healthz".into(), "/apis/*".into()],
            ..Rule::default()
        };
        let path = |p| Attributes {
            verb: "get",
            kind: RequestKind::NonResource { path: p },
        };
        assert!(r.allows(&path("/healthz")));
        assert!(r.allows(&path("/apis/apps/v1")));
        assert!(!r.allows(&path("/metrics")));
        assert!(!r.allows(&path("/healthz/etcd")));
    }

    #[test]
    fn service_account_subjects_default_to_the_binding_namespace() {
        let who = Identity {
            user: "system:serviceaccount:team:robot".into(),
            groups: vec![],
        };
        let subject = Subject {
            kind: "ServiceAccount".into(),
            name: "robot".into(),
            ..Subject::default()
        };
        assert!(subject_matches(&subject, &who, Some("team")));
        assert!(!subject_matches(&subject, &who, Some("other")));
    }
}
