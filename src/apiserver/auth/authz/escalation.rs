//! RBAC escalation prevention, as Kubernetes does it: a user may only write a Role or
//! ClusterRole whose rules it already holds (or with the `escalate` verb), and only bind a
//! role whose rules it holds (or with the `bind` verb). The requester reaches the write
//! path through [`REQUESTER`]; writes made by k3rs itself (bootstrap) carry none and pass.

use serde_json::Value;

use super::rbac::Rule;
use super::{Attributes, Authorizer, RequestKind};
use crate::apiserver::auth::authn::Identity;
use crate::apiserver::http::status::{ApiError, StatusDetails, qualified};
use crate::apiserver::storage::registry::ResourceInfo;

tokio::task_local! {
    /// Who is making the current API request (set around each request's handling).
    pub static REQUESTER: Identity;
}

fn rules_of(object: &Value) -> Vec<Rule> {
    let list = |rule: &Value, key: &str| -> Vec<String> {
        rule[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    object["rules"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .map(|r| Rule {
                    verbs: list(r, "verbs"),
                    groups: list(r, "apiGroups"),
                    resources: list(r, "resources"),
                    names: list(r, "resourceNames"),
                    urls: list(r, "nonResourceURLs"),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The parts of `rules` that `who` does not hold in `namespace` (each rule broken into
/// single verb/group/resource/name combinations, as Kubernetes compares them).
fn not_held(
    authorizer: &Authorizer,
    who: &Identity,
    namespace: Option<&str>,
    rules: &[Rule],
) -> Vec<String> {
    let mut missing = Vec::new();
    for rule in rules {
        for verb in &rule.verbs {
            for url in &rule.urls {
                let attrs = Attributes {
                    verb,
                    kind: RequestKind::NonResource { path: url },
                };
                if !authorizer.allows(who, &attrs) {
                    missing.push(format!(
                        "{{NonResourceURLs:[\"{url}\"], Verbs:[\"{verb}\"]}}"
                    ));
                }
            }
            for group in &rule.groups {
                for resource in &rule.resources {
                    let (resource_name, subresource) = match resource.split_once('/') {
                        Some((r, s)) => (r, Some(s)),
                        None => (resource.as_str(), None),
                    };
                    let names: Vec<Option<&str>> = if rule.names.is_empty() {
                        vec![None]
                    } else {
                        rule.names.iter().map(|n| Some(n.as_str())).collect()
                    };
                    for name in names {
                        let attrs = Attributes {
                            verb,
                            kind: RequestKind::Resource {
                                group,
                                resource: resource_name,
                                subresource,
                                namespace,
                                name,
                            },
                        };
                        if !authorizer.allows(who, &attrs) {
                            let names = name
                                .map(|n| format!(", ResourceNames:[\"{n}\"]"))
                                .unwrap_or_default();
                            missing.push(format!(
                                "{{APIGroups:[\"{group}\"], Resources:[\"{resource}\"]{names}, Verbs:[\"{verb}\"]}}"
                            ));
                        }
                    }
                }
            }
        }
    }
    missing
}

fn has_verb(
    authorizer: &Authorizer,
    who: &Identity,
    verb: &str,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> bool {
    let attrs = Attributes {
        verb,
        kind: RequestKind::Resource {
            group: "rbac.authorization.k8s.io",
            resource: plural,
            subresource: None,
            namespace,
            name: Some(name),
        },
    };
    authorizer.allows(who, &attrs)
}

fn refuse(info: &ResourceInfo, name: &str, why: String) -> ApiError {
    let mut error = ApiError::forbidden(format!(
        "{} \"{name}\" is forbidden: {why}",
        qualified(&info.group, &info.plural)
    ));
    error.details = Some(Box::new(StatusDetails {
        name: Some(name.to_string()),
        group: Some(info.group.clone()),
        kind: Some(info.plural.clone()),
        ..Default::default()
    }));
    error
}

fn describe(who: &Identity) -> String {
    let groups: Vec<String> = who.groups.iter().map(|g| format!("\"{g}\"")).collect();
    format!("user \"{}\" (groups=[{}])", who.user, groups.join(" "))
}

/// `Ok` when nothing is missing, else the refusal listing what the writer does not hold.
fn held_or_refused(
    info: &ResourceInfo,
    name: &str,
    who: &Identity,
    missing: Vec<String>,
) -> Result<(), ApiError> {
    if missing.is_empty() {
        return Ok(());
    }
    Err(refuse(
        info,
        name,
        format!(
            "{} is attempting to grant RBAC permissions not currently held:\n{}",
            describe(who),
            missing.join("\n")
        ),
    ))
}

/// Finds a stored role by (plural, namespace, name).
pub type RoleLookup<'a> = dyn Fn(&str, Option<&str>, &str) -> Option<Value> + 'a;

/// Checks a Role, ClusterRole, RoleBinding or ClusterRoleBinding about to be stored.
pub fn check(
    authorizer: &Authorizer,
    info: &ResourceInfo,
    object: &Value,
    role_lookup: &RoleLookup,
) -> Result<(), ApiError> {
    if info.group != "rbac.authorization.k8s.io" {
        return Ok(());
    }
    let Ok(who) = REQUESTER.try_with(Identity::clone) else {
        return Ok(());
    };
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .filter(|n| !n.is_empty());
    match info.plural.as_str() {
        "roles" | "clusterroles" => {
            if has_verb(authorizer, &who, "escalate", &info.plural, namespace, name) {
                return Ok(());
            }
            if info.plural == "clusterroles"
                && object.get("aggregationRule").is_some_and(|a| !a.is_null())
            {
                return Err(refuse(
                    info,
                    name,
                    format!(
                        "{} must have cluster-admin privileges to use the aggregationRule",
                        describe(&who)
                    ),
                ));
            }
            let missing = not_held(authorizer, &who, namespace, &rules_of(object));
            held_or_refused(info, name, &who, missing)
        }
        "rolebindings" | "clusterrolebindings" => {
            let kind = object["roleRef"]["kind"].as_str().unwrap_or_default();
            let role = object["roleRef"]["name"].as_str().unwrap_or_default();
            let (role_plural, role_namespace) = match kind {
                "Role" => ("roles", namespace),
                _ => ("clusterroles", None),
            };
            if has_verb(
                authorizer,
                &who,
                "bind",
                role_plural,
                namespace.or(role_namespace),
                role,
            ) {
                return Ok(());
            }
            let Some(role_object) = role_lookup(role_plural, role_namespace, role) else {
                return Err(refuse(
                    info,
                    name,
                    format!(
                        "{} cannot bind {kind} \"{role}\": it does not exist and the user may not bind it",
                        describe(&who)
                    ),
                ));
            };
            let mut rules = rules_of(&role_object);
            if role_object
                .get("aggregationRule")
                .is_some_and(|a| !a.is_null())
            {
                // The effective rules of an aggregated role are what the index computed.
                rules = authorizer.cluster_role_rules(role);
            }
            let missing = not_held(authorizer, &who, namespace, &rules);
            held_or_refused(info, name, &who, missing)
        }
        _ => Ok(()),
    }
}
