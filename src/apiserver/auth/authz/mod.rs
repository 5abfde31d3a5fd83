//! Authorization: may this user do this? Kubernetes's chain in k3rs's form: members of
//! `system:masters` may do everything; node credentials (`system:node:<name>` in
//! `system:nodes`) go through the Node authorizer ([`node`]: objects related to their pods,
//! their own Node and Lease) and otherwise get the static node rules ([`policy::NODE`]);
//! everyone else gets what RBAC grants ([`rbac`], indexed from the watch cache and rebuilt when an RBAC object
//! changes). Denials are `403 Forbidden` worded as kube-apiserver words them.
//!
//! Owns the default RBAC policy ([`bootstrap`] stores it at start) and the access-review
//! APIs ([`reviews`]). Reads the watch cache; writes only through the API's create path.

pub mod escalation;
pub mod node;
pub mod policy;
pub mod rbac;
pub mod reviews;

use std::sync::{Arc, RwLock};

use axum::http::Method;
use serde_json::Value;

use super::authn::Identity;
use crate::apiserver::http::request::{Query, Target};
use crate::apiserver::http::status::{ApiError, StatusDetails, qualified};
use crate::apiserver::storage::watchcache::WatchCache;

/// What a request asks to do (Kubernetes's authorizer attributes).
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`
    /// for resources; the lower-case HTTP method for other paths.
    pub verb: &'a str,
    pub kind: RequestKind<'a>,
}

#[derive(Debug, Clone)]
pub enum RequestKind<'a> {
    Resource {
        group: &'a str,
        resource: &'a str,
        subresource: Option<&'a str>,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    },
    NonResource {
        path: &'a str,
    },
}

/// The authorizer verb of a resource request.
pub fn resource_verb(method: &Method, target: &Target, query: &Query) -> &'static str {
    // Streams to a node are `create` whatever the method: kubectl >= 1.30 opens exec,
    // attach and port-forward WebSockets with GET, and Kubernetes checks `create` for them.
    if matches!(
        target.subresource.as_deref(),
        Some("exec" | "attach" | "portforward")
    ) {
        return "create";
    }
    match *method {
        Method::GET | Method::HEAD => {
            if target.legacy_watch || query.flag("watch") {
                "watch"
            } else if target.name.is_some() {
                "get"
            } else {
                "list"
            }
        }
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if target.name.is_none() => "deletecollection",
        Method::DELETE => "delete",
        _ => "unknown",
    }
}

/// The attributes of a resource request.
pub fn resource_attributes<'a>(verb: &'a str, target: &'a Target) -> Attributes<'a> {
    Attributes {
        verb,
        kind: RequestKind::Resource {
            group: &target.info.group,
            resource: &target.info.plural,
            subresource: target.subresource.as_deref(),
            namespace: target.namespace.as_deref(),
            name: target.name.as_deref(),
        },
    }
}

/// The attributes of a request for a path that is not a resource.
pub fn path_attributes<'a>(method: &Method, path: &'a str) -> Attributes<'a> {
    let verb = match *method {
        Method::GET => "get",
        Method::HEAD => "head",
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::OPTIONS => "options",
        _ => "unknown",
    };
    Attributes {
        verb,
        kind: RequestKind::NonResource { path },
    }
}

/// The authorizer the API server consults for every authenticated request.
pub struct Authorizer {
    index: RwLock<Arc<rbac::Index>>,
    node_rules: Vec<rbac::Rule>,
    /// Where the Node authorizer finds the pods bound to a node.
    cache: Arc<WatchCache>,
}

/// Why a request was denied, beyond "no rule allows it".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// No authorizer allowed it; the Node authorizer's reason, if it gave one, is appended
    /// to the 403 message as kube-apiserver appends it.
    NotAllowed(Option<String>),
    /// NodeRestriction rejected it: the complete message.
    Restricted(String),
}

impl Authorizer {
    /// An authorizer over the cache's current RBAC objects.
    pub fn new(cache: &Arc<WatchCache>) -> Authorizer {
        Authorizer {
            index: RwLock::new(Arc::new(rbac::Index::build(cache))),
            node_rules: policy::NODE.iter().map(rbac::Rule::from).collect(),
            cache: cache.clone(),
        }
    }

    fn index(&self) -> Arc<rbac::Index> {
        self.index.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Rebuilds the RBAC index from the cache.
    pub fn refresh(&self, cache: &WatchCache) {
        let index = Arc::new(rbac::Index::build(cache));
        *self.index.write().unwrap_or_else(|p| p.into_inner()) = index;
    }

    fn is_node(who: &Identity) -> bool {
        node::node_name(who).is_some()
    }

    /// Whether `who` may do what `attrs` describe.
    pub fn allows(&self, who: &Identity, attrs: &Attributes<'_>) -> bool {
        self.check(who, attrs).is_ok()
    }

    /// Whether `who` may do what `attrs` describe, and if not, why (Kubernetes's chain:
    /// the Node authorizer, then RBAC; NodeRestriction has the last word for nodes).
    pub fn check(&self, who: &Identity, attrs: &Attributes<'_>) -> Result<(), Denial> {
        if who.groups.iter().any(|g| g == "system:masters") {
            return Ok(());
        }
        let mut reason = None;
        if let Some(node) = node::node_name(who) {
            match node::authorize(&self.cache, node, attrs) {
                node::NodeDecision::Allow => return Ok(()),
                node::NodeDecision::Restricted(message) => {
                    return Err(Denial::Restricted(message));
                }
                node::NodeDecision::StaticRules => {
                    if self.node_rules.iter().any(|r| r.allows(attrs)) {
                        return Ok(());
                    }
                }
                node::NodeDecision::NoOpinion(why) => reason = Some(why),
            }
        }
        if self.index().allows(who, attrs) {
            Ok(())
        } else {
            Err(Denial::NotAllowed(reason))
        }
    }

    /// The effective rules of the ClusterRole `name`.
    pub fn cluster_role_rules(&self, name: &str) -> Vec<rbac::Rule> {
        self.index().cluster_role(name)
    }

    /// The rules that apply to `who` in `namespace` (for `SelfSubjectRulesReview`).
    pub fn rules_for(&self, who: &Identity, namespace: &str) -> Vec<rbac::Rule> {
        if who.groups.iter().any(|g| g == "system:masters") {
            return policy::ROLES
                .iter()
                .find(|r| r.name == "cluster-admin")
                .map(|r| r.rules.iter().map(rbac::Rule::from).collect())
                .unwrap_or_default();
        }
        let index = self.index();
        let mut rules: Vec<rbac::Rule> = index
            .rules_for(who, Some(namespace))
            .map(|(_, r)| r.clone())
            .collect();
        if Self::is_node(who) {
            rules.extend(self.node_rules.iter().cloned());
        }
        rules
    }

    /// Keeps the index current: rebuilds it after every burst of RBAC changes.
    pub fn spawn_refresher(self: &Arc<Self>, cache: Arc<WatchCache>) {
        let authorizer = Arc::downgrade(self);
        let (_, mut events, _) = cache.snapshot_and_subscribe(rbac::PREFIX);
        // The index may have been built before the subscription started.
        self.refresh(&cache);
        tokio::spawn(async move {
            use crate::apiserver::storage::watchcache::FeedEnd;
            loop {
                match events.recv().await {
                    Ok(_) => {}
                    // Fell behind: start over from now, and rebuild.
                    Err(FeedEnd::Lagged) => events = cache.snapshot_and_subscribe(rbac::PREFIX).1,
                    Err(FeedEnd::Closed) => return,
                }
                // Fold whatever else is already there into this rebuild.
                events.skip_ready();
                let Some(authorizer) = authorizer.upgrade() else {
                    return;
                };
                authorizer.refresh(&cache);
            }
        });
    }
}

/// The `403 Forbidden` for `denial` (see [`forbidden`]).
pub fn denied(who: &Identity, attrs: &Attributes<'_>, denial: Denial) -> ApiError {
    let mut error = forbidden(who, attrs);
    match denial {
        Denial::NotAllowed(None) => {}
        Denial::NotAllowed(Some(reason)) => {
            error.message = format!("{}: {reason}", error.message);
        }
        Denial::Restricted(message) => error.message = message,
    }
    error
}

/// The `403 Forbidden` Status kube-apiserver answers a denied request with.
pub fn forbidden(who: &Identity, attrs: &Attributes<'_>) -> ApiError {
    match &attrs.kind {
        RequestKind::NonResource { path } => {
            let mut error = ApiError::forbidden(format!(
                "forbidden: User \"{}\" cannot {} path \"{path}\"",
                who.user, attrs.verb
            ));
            error.details = Some(Box::default());
            error
        }
        RequestKind::Resource {
            group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let shown = match subresource {
                Some(sub) => format!("{resource}/{sub}"),
                None => resource.to_string(),
            };
            let scope = match namespace {
                Some(ns) => format!("in the namespace \"{ns}\""),
                None => "at the cluster scope".to_string(),
            };
            let reason = format!(
                "User \"{}\" cannot {} resource \"{shown}\" in API group \"{group}\" {scope}",
                who.user, attrs.verb
            );
            let what = qualified(group, resource);
            let message = match name {
                Some(n) if !n.is_empty() => format!("{what} \"{n}\" is forbidden: {reason}"),
                _ => format!("{what} is forbidden: {reason}"),
            };
            let mut error = ApiError::forbidden(message);
            error.details = Some(Box::new(StatusDetails {
                name: name.filter(|n| !n.is_empty()).map(str::to_string),
                group: (!group.is_empty()).then(|| group.to_string()),
                kind: Some(resource.to_string()),
                ..Default::default()
            }));
            error
        }
    }
}

/// Admits only members of `system:masters`, for the admin-only endpoints outside the REST
/// API (etcd snapshots, secrets encryption): `401` for an anonymous request, `403` naming
/// `what` (e.g. "manage etcd snapshots") for anyone else. The API server asks before it reads
/// a request's body, so an unauthenticated client cannot make it buffer one.
pub fn require_masters(identity: &Identity, what: &str) -> Result<(), ApiError> {
    if identity.is_anonymous() {
        return Err(ApiError::unauthorized());
    }
    if !identity.groups.iter().any(|g| g == "system:masters") {
        return Err(ApiError::forbidden(format!(
            "User \"{}\" cannot {what}: only members of system:masters may",
            identity.user
        )));
    }
    Ok(())
}

/// Applies `Impersonate-User` / `Impersonate-Group` (`kubectl --as`, `--as-group`): the
/// requester needs `impersonate` on `users`, `groups` or `serviceaccounts` for each, as in
/// Kubernetes; the request then runs as the impersonated identity.
pub fn impersonate(
    authorizer: &Authorizer,
    who: Identity,
    headers: &axum::http::HeaderMap,
) -> Result<Identity, ApiError> {
    let user = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let groups: Vec<String> = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    let Some(user) = user else {
        if groups.is_empty() {
            return Ok(who);
        }
        return Err(ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "Internal error occurred: requested [{Group} impersonation] without impersonating a user",
        ));
    };
    let check =
        |resource: &'static str, namespace: Option<&str>, name: &str| -> Result<(), ApiError> {
            let attrs = Attributes {
                verb: "impersonate",
                kind: RequestKind::Resource {
                    group: "",
                    resource,
                    subresource: None,
                    namespace,
                    name: Some(name),
                },
            };
            if authorizer.allows(&who, &attrs) {
                Ok(())
            } else {
                Err(forbidden(&who, &attrs))
            }
        };
    let service_account = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    match service_account {
        Some((namespace, name)) => check("serviceaccounts", Some(namespace), name)?,
        None => check("users", None, &user)?,
    }
    for group in &groups {
        check("groups", None, group)?;
    }
    let mut impersonated = groups;
    if let Some((namespace, _)) = service_account
        && impersonated.is_empty()
    {
        impersonated.push("system:serviceaccounts".into());
        impersonated.push(format!("system:serviceaccounts:{namespace}"));
    }
    if user != "system:anonymous" && !impersonated.iter().any(|g| g == "system:authenticated") {
        impersonated.push("system:authenticated".into());
    }
    Ok(Identity {
        user,
        groups: impersonated,
    })
}

/// The default ClusterRoles and ClusterRoleBindings that do not exist yet (by name).
pub fn missing_defaults(cache: &WatchCache) -> Vec<(&'static str, Value)> {
    let mut missing = Vec::new();
    for (plural, objects) in [
        ("clusterroles", policy::cluster_role_objects()),
        (
            "clusterrolebindings",
            policy::cluster_role_binding_objects(),
        ),
    ] {
        for object in objects {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let key = format!("{}{plural}/{name}", rbac::PREFIX);
            if cache.get(&key).is_none() {
                missing.push((plural, object));
            }
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> Identity {
        Identity {
            user: name.into(),
            groups: vec!["system:authenticated".into()],
        }
    }

    #[test]
    fn only_masters_pass_the_admin_endpoints_check() {
        let e = require_masters(&Identity::anonymous(), "manage etcd snapshots").unwrap_err();
        assert_eq!(e.code, axum::http::StatusCode::UNAUTHORIZED);
        let e = require_masters(&user("alice"), "manage etcd snapshots").unwrap_err();
        assert_eq!(e.code, axum::http::StatusCode::FORBIDDEN);
        assert_eq!(
            e.message,
            "User \"alice\" cannot manage etcd snapshots: only members of system:masters may"
        );
        let admin = Identity {
            user: "admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        };
        assert!(require_masters(&admin, "manage secrets encryption").is_ok());
    }

    #[test]
    fn forbidden_messages_are_worded_like_kube_apiserver() {
        let attrs = Attributes {
            verb: "list",
            kind: RequestKind::Resource {
                group: "",
                resource: "pods",
                subresource: None,
                namespace: Some("default"),
                name: None,
            },
        };
        let e = forbidden(&user("alice"), &attrs);
        assert_eq!(
            e.message,
            "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        let attrs = Attributes {
            verb: "get",
            kind: RequestKind::Resource {
                group: "apps",
                resource: "deployments",
                subresource: Some("scale"),
                namespace: None,
                name: Some("web"),
            },
        };
        assert_eq!(
            forbidden(&user("bob"), &attrs).message,
            "deployments.apps \"web\" is forbidden: User \"bob\" cannot get resource \"deployments/scale\" in API group \"apps\" at the cluster scope"
        );
        let attrs = Attributes {
            verb: "get",
            kind: RequestKind::NonResource { path: "/metrics" },
        };
        assert_eq!(
            forbidden(&user("carol"), &attrs).message,
            "forbidden: User \"carol\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn default_policy_objects_are_well_formed() {
        let roles = policy::cluster_role_objects();
        let bindings = policy::cluster_role_binding_objects();
        for object in roles.iter().chain(bindings.iter()) {
            let decoded: Result<k8s_openapi::api::rbac::v1::ClusterRole, _> =
                serde_json::from_value(object.clone());
            if object["kind"] == "ClusterRole" {
                assert!(decoded.is_ok(), "{object}");
            }
        }
        for binding in &bindings {
            let role = binding["roleRef"]["name"].as_str().unwrap_or_default();
            assert!(
                roles.iter().any(|r| r["metadata"]["name"] == role),
                "binding to a role that is not shipped: {role}"
            );
        }
    }
}
