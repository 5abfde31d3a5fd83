//! The Node authorizer and the NodeRestriction checks for node credentials
//! (`system:node:<name>` in `system:nodes`), as Kubernetes narrows a kubelet to its own
//! objects (`plugin/pkg/auth/authorizer/node` and `plugin/pkg/admission/noderestriction`):
//!
//! * secrets, configmaps, persistentvolumeclaims, persistentvolumes and service-account
//!   tokens only when a pod bound to the node references them (pod → secret/configmap/pvc/
//!   serviceaccount, pvc → pv), read from the watch cache at request time, so the answer is
//!   never staler than the cache the kubelet's own pod watch is served from;
//! * writes to `nodes` and `nodes/status` only for its own Node; `leases` only its own, in
//!   `kube-node-lease`;
//! * pod status updates, deletions and evictions only of pods bound to it; pod creation only
//!   of mirror pods of itself ([`admit_create`]);
//! * its own Node only with labels a node may set (never `node-restriction.kubernetes.io/*`,
//!   of `kubernetes.io`/`k8s.io` only the kubelet's), no `configSource`, and on update no
//!   change to its taints ([`admit_create`], [`admit_update`]);
//! * service-account tokens only bound to a pod (name and uid) scheduled on itself
//!   ([`admit_token_request`]).
//!
//! Everything else a node may do stays with the static node rules ([`super::policy::NODE`]):
//! the node components (proxy, DNS, pod network) read Services, EndpointSlices, Nodes and
//! Pods cluster-wide. Reads the watch cache only.

use serde::Deserialize;
use serde_json::Value;

use super::super::authn::Identity;
use super::{Attributes, RequestKind};
use crate::apiserver::http::request::Query;
use crate::apiserver::http::status::{ApiError, StatusDetails, qualified};
use crate::apiserver::storage::watchcache::WatchCache;

/// Where node leases live (Kubernetes's `kube-node-lease`).
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// The annotation that marks a mirror pod (a static pod's API object).
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What the Node authorizer says about one request of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeDecision {
    /// Not subdivided: the static node rules decide.
    StaticRules,
    Allow,
    /// No relationship (or a verb the authorizer never grants for this type): the node
    /// rules do not apply; RBAC may still allow. The reason is appended to the 403.
    NoOpinion(String),
    /// Rejected whatever RBAC says (NodeRestriction): the complete 403 message.
    Restricted(String),
}

/// The node name of a node credential (`system:node:<name>` in group `system:nodes`).
pub fn node_name(who: &Identity) -> Option<&str> {
    let name = who.user.strip_prefix("system:node:")?;
    (!name.is_empty() && who.groups.iter().any(|g| g == "system:nodes")).then_some(name)
}

/// The object name a list or watch is narrowed to by a `metadata.name=<name>` field
/// selector (Kubernetes's request info does the same, so the kubelet's single-object
/// watches of its secrets and configmaps are authorized by name).
pub fn field_selected_name(query: &Query) -> Option<&str> {
    let selector = query.get("fieldSelector")?;
    selector.split(',').find_map(|term| {
        let (field, value) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .filter(|(field, _)| !field.ends_with('!'))?;
        (field.trim() == "metadata.name" && !value.trim().is_empty()).then(|| value.trim())
    })
}

/// The Node authorizer's decision for `node` asking for `attrs`.
pub fn authorize(cache: &WatchCache, node: &str, attrs: &Attributes<'_>) -> NodeDecision {
    let RequestKind::Resource {
        group,
        resource,
        subresource,
        namespace,
        name,
    } = &attrs.kind
    else {
        return NodeDecision::StaticRules;
    };
    let request = Request {
        node,
        verb: attrs.verb,
        group,
        resource,
        subresource: *subresource,
        namespace: namespace.unwrap_or(""),
        name: name.unwrap_or(""),
    };
    match (*group, *resource) {
        ("", "secrets") => request.read_namespaced(cache, Kind::Secret),
        ("", "configmaps") => request.read_namespaced(cache, Kind::ConfigMap),
        ("", "persistentvolumeclaims") if request.subresource == Some("status") => {
            match request.verb {
                "update" | "patch" => request.related(cache, Kind::Claim),
                _ => no_opinion("can only get/update/patch this type"),
            }
        }
        ("", "persistentvolumeclaims") => request.get_only(cache, Kind::Claim),
        ("", "persistentvolumes") => request.get_only(cache, Kind::Volume),
        ("", "serviceaccounts") => request.create_token(cache),
        ("coordination.k8s.io", "leases") => request.lease(),
        ("", "nodes") => request.node_object(),
        ("", "pods") => request.pod(cache),
        _ => NodeDecision::StaticRules,
    }
}

/// What a node asked for, with absent namespace and name as empty strings.
struct Request<'a> {
    node: &'a str,
    verb: &'a str,
    group: &'a str,
    resource: &'a str,
    subresource: Option<&'a str>,
    namespace: &'a str,
    name: &'a str,
}

/// The kinds of objects a node reaches through its pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Secret,
    ConfigMap,
    Claim,
    Volume,
    ServiceAccount,
}

fn no_opinion(reason: impl Into<String>) -> NodeDecision {
    NodeDecision::NoOpinion(reason.into())
}

impl Request<'_> {
    /// `resource "name" is forbidden: <reason>` (NodeRestriction's wording).
    fn restricted(&self, reason: String) -> NodeDecision {
        let what = qualified(self.group, self.resource);
        NodeDecision::Restricted(if self.name.is_empty() {
            format!("{what} is forbidden: {reason}")
        } else {
            format!("{what} \"{}\" is forbidden: {reason}", self.name)
        })
    }

    /// get/list/watch of one namespaced object related to the node.
    fn read_namespaced(&self, cache: &WatchCache, kind: Kind) -> NodeDecision {
        if !matches!(self.verb, "get" | "list" | "watch") {
            return no_opinion("can only read resources of this type");
        }
        if self.subresource.is_some() {
            return no_opinion("cannot read subresource");
        }
        if self.namespace.is_empty() {
            return no_opinion("can only read namespaced object of this type");
        }
        self.related(cache, kind)
    }

    fn get_only(&self, cache: &WatchCache, kind: Kind) -> NodeDecision {
        if self.verb != "get" {
            return no_opinion("can only get individual resources of this type");
        }
        if self.subresource.is_some() {
            return no_opinion("cannot get subresource");
        }
        self.related(cache, kind)
    }

    fn create_token(&self, cache: &WatchCache) -> NodeDecision {
        if self.verb != "create" || self.name.is_empty() {
            return no_opinion("can only create tokens for individual service accounts");
        }
        if self.subresource != Some("token") {
            return no_opinion("can only create token subresource of serviceaccount");
        }
        self.related(cache, Kind::ServiceAccount)
    }

    fn related(&self, cache: &WatchCache, kind: Kind) -> NodeDecision {
        if self.name.is_empty() {
            return no_opinion("No Object name found");
        }
        if is_related(cache, self.node, kind, self.namespace, self.name) {
            NodeDecision::Allow
        } else {
            no_opinion(format!(
                "no relationship found between node '{}' and this object",
                self.node
            ))
        }
    }

    fn lease(&self) -> NodeDecision {
        if !matches!(self.verb, "get" | "create" | "update" | "patch" | "delete") {
            return no_opinion("can only get, create, update, patch, or delete a node lease");
        }
        if self.namespace != NODE_LEASE_NAMESPACE {
            return no_opinion(format!(
                "can only access leases in the \"{NODE_LEASE_NAMESPACE}\" system namespace"
            ));
        }
        // A create's name is in the body: [`admit_create`] checks it.
        if self.verb != "create" && self.name != self.node {
            return no_opinion(
                "can only access node lease with the same name as the requesting node",
            );
        }
        NodeDecision::Allow
    }

    /// Nodes are read cluster-wide (the static rules); writes only to its own Node.
    fn node_object(&self) -> NodeDecision {
        let writes = match self.subresource {
            None => matches!(self.verb, "update" | "patch" | "delete"),
            Some("status") => matches!(self.verb, "update" | "patch"),
            Some(_) => false,
        };
        if writes && self.name != self.node {
            return self.restricted(format!(
                "node \"{}\" is not allowed to modify node \"{}\"",
                self.node, self.name
            ));
        }
        NodeDecision::StaticRules
    }

    /// Pods are read cluster-wide (the static rules); status, deletion and eviction only
    /// of pods bound to the node; creation is checked on the object ([`admit_create`]).
    fn pod(&self, cache: &WatchCache) -> NodeDecision {
        let action = match (self.subresource, self.verb) {
            (Some("status"), "update" | "patch") => "update pod status for",
            (None, "delete") => "delete",
            (Some("eviction"), "create") => "evict",
            _ => return NodeDecision::StaticRules,
        };
        let key = format!("/registry/pods/{}/{}", self.namespace, self.name);
        // A pod that does not exist gets the handler's 404, as in Kubernetes.
        let Some(pod) = cache.get(&key) else {
            return NodeDecision::StaticRules;
        };
        let bound = serde_json::from_slice::<PodRefs>(&pod.bytes)
            .ok()
            .and_then(|p| p.spec.node_name);
        if bound.as_deref() == Some(self.node) {
            return NodeDecision::StaticRules;
        }
        self.restricted(format!(
            "node \"{}\" can only {action} pods with spec.nodeName set to itself",
            self.node
        ))
    }
}

/// The 403 of NodeRestriction: `<resource> "<name>" is forbidden: <reason>`, with kube's
/// details.
fn restriction(group: &str, resource: &str, name: &str, reason: String) -> ApiError {
    let what = qualified(group, resource);
    let mut error = ApiError::forbidden(if name.is_empty() {
        format!("{what} is forbidden: {reason}")
    } else {
        format!("{what} \"{name}\" is forbidden: {reason}")
    });
    error.details = Some(Box::new(StatusDetails {
        name: (!name.is_empty()).then(|| name.to_string()),
        group: (!group.is_empty()).then(|| group.to_string()),
        kind: Some(resource.to_string()),
        ..Default::default()
    }));
    error
}

/// NodeRestriction for objects a node creates (their names and contents are in the
/// body): its own Node (only with labels a node may set, no `configSource`), its own
/// Lease, and mirror pods bound to itself that reference no other objects. `Ok` for
/// everyone else.
pub fn admit_create(
    who: &Identity,
    group: &str,
    resource: &str,
    object: &Value,
) -> Result<(), ApiError> {
    let Some(node) = node_name(who) else {
        return Ok(());
    };
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let reject = |reason: String| Err(restriction(group, resource, name, reason));
    match (group, resource) {
        ("", "nodes") if name != node => reject(format!(
            "node \"{node}\" is not allowed to modify node \"{name}\""
        )),
        ("", "nodes") => {
            if !is_unset(&object["spec"]["configSource"]) {
                return reject(format!(
                    "node \"{node}\" is not allowed to create pods with a non-nil configSource"
                ));
            }
            let forbidden = forbidden_labels(&object["metadata"]["labels"], &Value::Null);
            if !forbidden.is_empty() {
                return reject(format!(
                    "node \"{node}\" is not allowed to set the following labels: {}",
                    forbidden.join(", ")
                ));
            }
            Ok(())
        }
        ("coordination.k8s.io", "leases") if name != node => reject(
            "can only access node lease with the same name as the requesting node".to_string(),
        ),
        ("", "pods") => match mirror_pod_problem(node, object) {
            Some(reason) => reject(reason),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// NodeRestriction for a node's update of its own Node (the authorizer already refused
/// other nodes'): no new `configSource`, no change to its taints (a node that could drop
/// a taint would steer workloads to itself), and no change to labels a node may not set
/// ([`crate::names::node_may_set_label`]). Status updates never reach here: they keep the
/// stored metadata and spec. `Ok` for everyone else and every other resource.
pub fn admit_update(
    who: &Identity,
    group: &str,
    resource: &str,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    let Some(node) = node_name(who) else {
        return Ok(());
    };
    if (group, resource) != ("", "nodes") {
        return Ok(());
    }
    let name = new["metadata"]["name"].as_str().unwrap_or_default();
    let reject = |reason: String| Err(restriction(group, resource, name, reason));
    let config_source = &new["spec"]["configSource"];
    if !is_unset(config_source) && *config_source != old["spec"]["configSource"] {
        return reject(format!(
            "node \"{node}\" is not allowed to update configSource to a new non-nil configSource"
        ));
    }
    if !same_list(&new["spec"]["taints"], &old["spec"]["taints"]) {
        return reject(format!("node \"{node}\" is not allowed to modify taints"));
    }
    let forbidden = forbidden_labels(&new["metadata"]["labels"], &old["metadata"]["labels"]);
    if !forbidden.is_empty() {
        // kube's wording names no node here.
        return reject(format!(
            "is not allowed to modify labels: {}",
            forbidden.join(", ")
        ));
    }
    Ok(())
}

/// NodeRestriction for `serviceaccounts/<name>/token` requested by a node: the token must
/// be bound to a pod (by name and uid) that is scheduled on that node. `Ok` for everyone
/// else.
pub fn admit_token_request(
    cache: &WatchCache,
    who: &Identity,
    namespace: &str,
    account: &str,
    request: &Value,
) -> Result<(), ApiError> {
    let Some(node) = node_name(who) else {
        return Ok(());
    };
    let reject = |reason: &str| Err(restriction("", "serviceaccounts", account, reason.into()));
    let bound = &request["spec"]["boundObjectRef"];
    let field = |key: &str| bound[key].as_str().unwrap_or_default();
    if field("apiVersion") != "v1" || field("kind") != "Pod" || field("name").is_empty() {
        return reject("node requested token not bound to a pod");
    }
    if field("uid").is_empty() {
        return reject("node requested token with a pod binding without a uid");
    }
    let pod_name = field("name");
    let Some(pod) = cache.get(&format!("/registry/pods/{namespace}/{pod_name}")) else {
        return Err(ApiError::not_found("", "pods", pod_name));
    };
    let pod: Value = serde_json::from_slice(&pod.bytes).unwrap_or_default();
    if pod["metadata"]["uid"].as_str() != Some(field("uid")) {
        return reject(&format!(
            "the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated",
            field("uid")
        ));
    }
    if pod["spec"]["nodeName"].as_str() != Some(node) {
        return reject("node requested token bound to a pod scheduled on a different node");
    }
    Ok(())
}

/// Absent or `null` (kube's nil pointer).
fn is_unset(value: &Value) -> bool {
    value.is_null()
}

/// Two lists equal as kube's semantic equality sees them: absent, `null` and `[]` alike.
fn same_list(a: &Value, b: &Value) -> bool {
    let items = |v: &Value| v.as_array().cloned().unwrap_or_default();
    items(a) == items(b)
}

/// The keys whose values differ between the label maps `new` and `old` (added, removed or
/// changed) that a node may not touch, sorted.
fn forbidden_labels(new: &Value, old: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let new = new.as_object().unwrap_or(&empty);
    let old = old.as_object().unwrap_or(&empty);
    let mut keys: Vec<String> = new
        .iter()
        .filter(|(k, v)| old.get(*k) != Some(*v))
        .chain(old.iter().filter(|(k, v)| new.get(*k) != Some(*v)))
        .map(|(k, _)| k.clone())
        .filter(|k| !crate::names::node_may_set_label(k))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Why `node` may not create `pod` (Kubernetes's NodeRestriction for mirror pods).
fn mirror_pod_problem(node: &str, pod: &Value) -> Option<String> {
    let meta = &pod["metadata"];
    if meta["annotations"].get(MIRROR_POD_ANNOTATION).is_none() {
        return Some(format!(
            "pod does not have \"{MIRROR_POD_ANNOTATION}\" annotation, node \"{node}\" can only create mirror pods"
        ));
    }
    if pod["spec"]["nodeName"].as_str() != Some(node) {
        return Some(format!(
            "node \"{node}\" can only create pods with spec.nodeName set to itself"
        ));
    }
    let owners = meta["ownerReferences"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    match owners {
        [] => {
            return Some(format!(
                "node \"{node}\" can only create pods with an owner reference set to itself"
            ));
        }
        [owner] => {
            if owner["apiVersion"] != "v1" || owner["kind"] != "Node" || owner["name"] != node {
                return Some(format!(
                    "node \"{node}\" can only create pods with an owner reference set to itself"
                ));
            }
            if owner["controller"] != true {
                return Some(format!(
                    "node \"{node}\" can only create pods with a controller owner reference set to itself"
                ));
            }
            if owner["blockOwnerDeletion"] == true {
                return Some(format!(
                    "node \"{node}\" must not set blockOwnerDeletion on an owner reference"
                ));
            }
        }
        _ => {
            return Some(format!(
                "node \"{node}\" can only create pods with a single owner reference set to itself"
            ));
        }
    }
    let refs: PodRefs = serde_json::from_value(pod.clone()).ok()?;
    let spec = &refs.spec;
    if spec
        .service_account_name
        .as_deref()
        .or(spec.service_account.as_deref())
        .is_some_and(|sa| !sa.is_empty())
    {
        return Some(format!(
            "node \"{node}\" can not create pods that reference a service account"
        ));
    }
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    for (kind, what) in [
        (Kind::Secret, "secrets"),
        (Kind::ConfigMap, "configmaps"),
        (Kind::Claim, "persistentvolumeclaims"),
    ] {
        if !spec.references(name, kind).is_empty() {
            return Some(format!(
                "node \"{node}\" can not create pods that reference {what}"
            ));
        }
    }
    None
}

/// Whether a pod bound to `node` references the `kind` object `namespace/name` (for
/// persistent volumes: a claim such a pod uses is bound to it).
fn is_related(cache: &WatchCache, node: &str, kind: Kind, namespace: &str, name: &str) -> bool {
    match kind {
        Kind::Volume => {
            // Claims are namespaced, volumes are not: look at the node's pods everywhere.
            pods_on(cache, node, "/registry/pods/").any(|(pod_ns, pod_name, spec)| {
                spec.references(&pod_name, Kind::Claim)
                    .iter()
                    .any(|claim| claim_volume(cache, &pod_ns, claim).as_deref() == Some(name))
            })
        }
        _ => pods_on(cache, node, &format!("/registry/pods/{namespace}/"))
            .any(|(_, pod_name, spec)| spec.references(&pod_name, kind).iter().any(|n| n == name)),
    }
}

/// The volume a claim is bound to.
fn claim_volume(cache: &WatchCache, namespace: &str, claim: &str) -> Option<String> {
    let object = cache.get(&format!(
        "/registry/persistentvolumeclaims/{namespace}/{claim}"
    ))?;
    let value: Value = serde_json::from_slice(&object.bytes).ok()?;
    value["spec"]["volumeName"]
        .as_str()
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// The pods under `prefix` bound to `node`: (namespace, name, spec). Pods of other nodes
/// are skipped by a byte search before anything is decoded, so the cost of a check is one
/// scan of the namespace's cached pod bytes plus decoding this node's pods.
fn pods_on<'a>(
    cache: &WatchCache,
    node: &'a str,
    prefix: &str,
) -> impl Iterator<Item = (String, String, PodSpecRefs)> + 'a {
    let needle = format!("\"nodeName\":{}", Value::String(node.to_string()));
    let (pods, _) = cache.list(prefix, None);
    pods.into_iter().filter_map(move |pod| {
        let text = std::str::from_utf8(&pod.bytes).ok()?;
        if !text.contains(&needle) {
            return None;
        }
        let refs: PodRefs = serde_json::from_slice(&pod.bytes).ok()?;
        if refs.spec.node_name.as_deref() != Some(node) {
            return None;
        }
        Some((
            refs.metadata.namespace.unwrap_or_default(),
            refs.metadata.name.unwrap_or_default(),
            refs.spec,
        ))
    })
}

/// The parts of a pod that reference other objects.
#[derive(Deserialize, Default)]
#[serde(default)]
struct PodRefs {
    metadata: PodMeta,
    spec: PodSpecRefs,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PodMeta {
    name: Option<String>,
    namespace: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PodSpecRefs {
    node_name: Option<String>,
    service_account_name: Option<String>,
    service_account: Option<String>,
    image_pull_secrets: Vec<NameRef>,
    containers: Vec<ContainerRefs>,
    init_containers: Vec<ContainerRefs>,
    ephemeral_containers: Vec<ContainerRefs>,
    /// Kept as JSON: the many volume sources each name their secret differently.
    volumes: Vec<Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NameRef {
    name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ContainerRefs {
    env: Vec<EnvRefs>,
    env_from: Vec<EnvFromRefs>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct EnvRefs {
    value_from: Option<EnvSourceRefs>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct EnvSourceRefs {
    secret_key_ref: Option<NameRef>,
    config_map_key_ref: Option<NameRef>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct EnvFromRefs {
    secret_ref: Option<NameRef>,
    config_map_ref: Option<NameRef>,
}

/// Volume sources whose secret is named by `secretRef.name` (Kubernetes's
/// `VisitPodSecretNames` covers these too).
const SECRET_REF_SOURCES: &[&str] = &[
    "cephfs",
    "cinder",
    "flexVolume",
    "rbd",
    "scaleIO",
    "iscsi",
    "storageos",
];

impl PodSpecRefs {
    /// The names of the `kind` objects this pod (named `pod_name`) references.
    fn references(&self, pod_name: &str, kind: Kind) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let push = |names: &mut Vec<String>, name: Option<&str>| {
            if let Some(name) = name.filter(|n| !n.is_empty()) {
                names.push(name.to_string());
            }
        };
        let containers = || {
            self.containers
                .iter()
                .chain(&self.init_containers)
                .chain(&self.ephemeral_containers)
        };
        match kind {
            Kind::Secret => {
                for secret in &self.image_pull_secrets {
                    push(&mut names, secret.name.as_deref());
                }
                for container in containers() {
                    for env in &container.env {
                        let source = env.value_from.as_ref();
                        push(
                            &mut names,
                            source.and_then(|s| s.secret_key_ref.as_ref()?.name.as_deref()),
                        );
                    }
                    for from in &container.env_from {
                        push(
                            &mut names,
                            from.secret_ref.as_ref().and_then(|r| r.name.as_deref()),
                        );
                    }
                }
                for volume in &self.volumes {
                    push(
                        &mut names,
                        volume.get("secret").and_then(|s| name_of(s, "secretName")),
                    );
                    push(
                        &mut names,
                        volume
                            .get("azureFile")
                            .and_then(|s| name_of(s, "secretName")),
                    );
                    push(
                        &mut names,
                        volume
                            .pointer("/csi/nodePublishSecretRef/name")
                            .and_then(Value::as_str),
                    );
                    for source in SECRET_REF_SOURCES {
                        push(
                            &mut names,
                            volume
                                .get(*source)
                                .and_then(|s| s.pointer("/secretRef/name")?.as_str()),
                        );
                    }
                    for projected in projected_sources(volume) {
                        push(
                            &mut names,
                            projected.get("secret").and_then(|s| name_of(s, "name")),
                        );
                    }
                }
            }
            Kind::ConfigMap => {
                for container in containers() {
                    for env in &container.env {
                        let source = env.value_from.as_ref();
                        push(
                            &mut names,
                            source.and_then(|s| s.config_map_key_ref.as_ref()?.name.as_deref()),
                        );
                    }
                    for from in &container.env_from {
                        push(
                            &mut names,
                            from.config_map_ref.as_ref().and_then(|r| r.name.as_deref()),
                        );
                    }
                }
                for volume in &self.volumes {
                    push(
                        &mut names,
                        volume.get("configMap").and_then(|s| name_of(s, "name")),
                    );
                    for projected in projected_sources(volume) {
                        push(
                            &mut names,
                            projected.get("configMap").and_then(|s| name_of(s, "name")),
                        );
                    }
                }
            }
            Kind::Claim => {
                for volume in &self.volumes {
                    push(
                        &mut names,
                        volume
                            .pointer("/persistentVolumeClaim/claimName")
                            .and_then(Value::as_str),
                    );
                }
                // Generic ephemeral volumes: the claim is named `<pod>-<volume>`.
                for volume in self.volumes.iter().filter(|v| v.get("ephemeral").is_some()) {
                    if let Some(volume_name) = name_of(volume, "name") {
                        names.push(format!("{pod_name}-{volume_name}"));
                    }
                }
            }
            Kind::ServiceAccount => {
                push(
                    &mut names,
                    self.service_account_name
                        .as_deref()
                        .filter(|n| !n.is_empty())
                        .or(self.service_account.as_deref()),
                );
            }
            Kind::Volume => {}
        }
        names
    }
}

fn name_of<'v>(value: &'v Value, key: &str) -> Option<&'v str> {
    value.get(key)?.as_str()
}

fn projected_sources(volume: &Value) -> impl Iterator<Item = &Value> {
    volume
        .pointer("/projected/sources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node_identity(name: &str) -> Identity {
        Identity {
            user: format!("system:node:{name}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
        }
    }

    fn attrs<'a>(
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        subresource: Option<&'a str>,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    ) -> Attributes<'a> {
        Attributes {
            verb,
            kind: RequestKind::Resource {
                group,
                resource,
                subresource,
                namespace,
                name,
            },
        }
    }

    fn cluster() -> WatchCache {
        WatchCache::holding(&[
            (
                "/registry/pods/apps/web",
                json!({"metadata": {"name": "web", "namespace": "apps"}, "spec": {
                    "nodeName": "n1",
                    "serviceAccountName": "web-sa",
                    "imagePullSecrets": [{"name": "pull"}],
                    "initContainers": [{"name": "i", "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "init-env", "key": "k"}}}]}],
                    "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cm-env"}}, {"secretRef": {"name": "secret-env"}}]}],
                    "volumes": [
                        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                        {"name": "api", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}, {"secret": {"name": "projected"}}]}},
                        {"name": "csi", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi-secret"}}},
                        {"name": "ceph", "cephfs": {"monitors": ["m"], "secretRef": {"name": "ceph-secret"}}}
                    ]
                }}),
            ),
            (
                "/registry/pods/apps/other",
                json!({"metadata": {"name": "other", "namespace": "apps"}, "spec": {
                    "nodeName": "n2",
                    "volumes": [{"name": "s", "secret": {"secretName": "other-secret"}}, {"name": "d", "persistentVolumeClaim": {"claimName": "other-data"}}]
                }}),
            ),
            (
                "/registry/persistentvolumeclaims/apps/data",
                json!({"metadata": {"name": "data", "namespace": "apps"}, "spec": {"volumeName": "pv-1"}}),
            ),
            (
                "/registry/persistentvolumeclaims/apps/other-data",
                json!({"metadata": {"name": "other-data", "namespace": "apps"}, "spec": {"volumeName": "pv-2"}}),
            ),
        ])
    }

    #[test]
    fn only_node_credentials_are_nodes() {
        assert_eq!(node_name(&node_identity("n1")), Some("n1"));
        let mut not_in_group = node_identity("n1");
        not_in_group.groups = vec!["system:authenticated".into()];
        assert_eq!(node_name(&not_in_group), None);
        assert_eq!(node_name(&node_identity("")), None);
    }

    #[test]
    fn a_node_reads_exactly_what_its_pods_reference() {
        let cache = cluster();
        let get = |resource: &'static str, name: &'static str| {
            authorize(
                &cache,
                "n1",
                &attrs("get", "", resource, None, Some("apps"), Some(name)),
            )
        };
        for secret in [
            "pull",
            "init-env",
            "secret-env",
            "projected",
            "csi-secret",
            "ceph-secret",
        ] {
            assert_eq!(get("secrets", secret), NodeDecision::Allow, "{secret}");
        }
        for config_map in ["cm-env", "kube-root-ca.crt"] {
            assert_eq!(
                get("configmaps", config_map),
                NodeDecision::Allow,
                "{config_map}"
            );
        }
        for claim in ["data", "web-scratch"] {
            assert_eq!(
                get("persistentvolumeclaims", claim),
                NodeDecision::Allow,
                "{claim}"
            );
        }
        let unrelated = NodeDecision::NoOpinion(
            "no relationship found between node 'n1' and this object".into(),
        );
        assert_eq!(get("secrets", "other-secret"), unrelated);
        assert_eq!(get("persistentvolumeclaims", "other-data"), unrelated);
        assert_eq!(get("secrets", "missing"), unrelated);
        // The other node sees its own pod's objects only.
        assert_eq!(
            authorize(
                &cache,
                "n2",
                &attrs("get", "", "secrets", None, Some("apps"), Some("pull"))
            ),
            unrelated.clone().replace_node("n2")
        );
        // Volumes through the claims of the node's pods.
        let pv = |name: &'static str| {
            authorize(
                &cache,
                "n1",
                &attrs("get", "", "persistentvolumes", None, None, Some(name)),
            )
        };
        assert_eq!(pv("pv-1"), NodeDecision::Allow);
        assert_eq!(pv("pv-2"), unrelated);
        // Tokens for the pods' service account only.
        let token = |name: &'static str| {
            authorize(
                &cache,
                "n1",
                &attrs(
                    "create",
                    "",
                    "serviceaccounts",
                    Some("token"),
                    Some("apps"),
                    Some(name),
                ),
            )
        };
        assert_eq!(token("web-sa"), NodeDecision::Allow);
        assert_eq!(token("default"), unrelated);
        assert_eq!(
            authorize(
                &cache,
                "n1",
                &attrs(
                    "get",
                    "",
                    "serviceaccounts",
                    None,
                    Some("apps"),
                    Some("web-sa")
                )
            ),
            NodeDecision::NoOpinion(
                "can only create tokens for individual service accounts".into()
            )
        );
    }

    #[test]
    fn reads_must_name_one_namespaced_object() {
        let cache = cluster();
        assert_eq!(
            authorize(
                &cache,
                "n1",
                &attrs("list", "", "secrets", None, Some("apps"), None)
            ),
            NodeDecision::NoOpinion("No Object name found".into())
        );
        assert_eq!(
            authorize(
                &cache,
                "n1",
                &attrs("watch", "", "secrets", None, Some("apps"), Some("pull"))
            ),
            NodeDecision::Allow
        );
        assert_eq!(
            authorize(
                &cache,
                "n1",
                &attrs("list", "", "configmaps", None, None, None)
            ),
            NodeDecision::NoOpinion("can only read namespaced object of this type".into())
        );
        assert_eq!(
            authorize(
                &cache,
                "n1",
                &attrs("update", "", "secrets", None, Some("apps"), Some("pull"))
            ),
            NodeDecision::NoOpinion("can only read resources of this type".into())
        );
        let query = |text: &str| Query::parse(Some(text)).expect("query");
        assert_eq!(
            field_selected_name(&query("fieldSelector=metadata.name%3Dpull")),
            Some("pull")
        );
        assert_eq!(
            field_selected_name(&query("fieldSelector=type%3Dx,metadata.name%3D%3Dpull")),
            Some("pull")
        );
        assert_eq!(
            field_selected_name(&query("fieldSelector=metadata.name!%3Dpull")),
            None
        );
        assert_eq!(field_selected_name(&query("labelSelector=a%3Db")), None);
    }

    #[test]
    fn writes_are_limited_to_the_nodes_own_objects() {
        let cache = cluster();
        let decide = |verb, group, resource, sub, ns, name| {
            authorize(&cache, "n1", &attrs(verb, group, resource, sub, ns, name))
        };
        assert_eq!(
            decide("patch", "", "nodes", None, None, Some("n1")),
            NodeDecision::StaticRules
        );
        assert_eq!(
            decide("patch", "", "nodes", Some("status"), None, Some("n2")),
            NodeDecision::Restricted(
                "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
                    .into()
            )
        );
        assert_eq!(
            decide("list", "", "nodes", None, None, None),
            NodeDecision::StaticRules
        );
        assert_eq!(
            decide(
                "patch",
                "",
                "pods",
                Some("status"),
                Some("apps"),
                Some("web")
            ),
            NodeDecision::StaticRules
        );
        assert_eq!(
            decide("patch", "", "pods", Some("status"), Some("apps"), Some("other")),
            NodeDecision::Restricted("pods \"other\" is forbidden: node \"n1\" can only update pod status for pods with spec.nodeName set to itself".into())
        );
        assert_eq!(
            decide("create", "", "pods", Some("eviction"), Some("apps"), Some("other")),
            NodeDecision::Restricted("pods \"other\" is forbidden: node \"n1\" can only evict pods with spec.nodeName set to itself".into())
        );
        assert_eq!(
            decide(
                "update",
                "coordination.k8s.io",
                "leases",
                None,
                Some("kube-node-lease"),
                Some("n2")
            ),
            NodeDecision::NoOpinion(
                "can only access node lease with the same name as the requesting node".into()
            )
        );
        assert_eq!(
            decide(
                "get",
                "coordination.k8s.io",
                "leases",
                None,
                Some("default"),
                Some("n1")
            ),
            NodeDecision::NoOpinion(
                "can only access leases in the \"kube-node-lease\" system namespace".into()
            )
        );
        assert_eq!(
            decide(
                "update",
                "coordination.k8s.io",
                "leases",
                None,
                Some("kube-node-lease"),
                Some("n1")
            ),
            NodeDecision::Allow
        );
    }

    #[test]
    fn nodes_create_only_their_own_node_lease_and_mirror_pods() {
        let n1 = node_identity("n1");
        let admin = Identity {
            user: "system:admin".into(),
            groups: vec!["system:masters".into()],
        };
        let other_node = json!({"metadata": {"name": "n2"}});
        assert!(admit_create(&admin, "", "nodes", &other_node).is_ok());
        let denied = admit_create(&n1, "", "nodes", &other_node).expect_err("not its node");
        assert_eq!(
            denied.message,
            "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
        );
        assert!(admit_create(&n1, "", "nodes", &json!({"metadata": {"name": "n1"}})).is_ok());
        assert!(
            admit_create(
                &n1,
                "coordination.k8s.io",
                "leases",
                &json!({"metadata": {"name": "n2"}})
            )
            .is_err()
        );
        let mirror = json!({
            "metadata": {"name": "static-web-n1", "annotations": {MIRROR_POD_ANNOTATION: "hash"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u", "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}
        });
        assert_eq!(mirror_pod_problem("n1", &mirror), None);
        assert!(admit_create(&n1, "", "pods", &mirror).is_ok());
        let mut plain = mirror.clone();
        plain["metadata"]["annotations"] = json!({});
        assert_eq!(
            admit_create(&n1, "", "pods", &plain)
                .expect_err("not a mirror pod")
                .message,
            "pods \"static-web-n1\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods"
        );
        let mut elsewhere = mirror.clone();
        elsewhere["spec"]["nodeName"] = json!("n2");
        assert!(
            mirror_pod_problem("n1", &elsewhere)
                .is_some_and(|p| p.contains("spec.nodeName set to itself"))
        );
        let mut with_secret = mirror.clone();
        with_secret["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "x"}}]);
        assert_eq!(
            mirror_pod_problem("n1", &with_secret).as_deref(),
            Some("node \"n1\" can not create pods that reference secrets")
        );
        let mut with_account = mirror;
        with_account["spec"]["serviceAccountName"] = json!("default");
        assert_eq!(
            mirror_pod_problem("n1", &with_account).as_deref(),
            Some("node \"n1\" can not create pods that reference a service account")
        );
    }

    impl NodeDecision {
        fn replace_node(self, node: &str) -> NodeDecision {
            match self {
                NodeDecision::NoOpinion(reason) => {
                    NodeDecision::NoOpinion(reason.replace("'n1'", &format!("'{node}'")))
                }
                other => other,
            }
        }
    }

    #[test]
    fn a_node_may_not_relabel_or_untaint_itself() {
        let me = node_identity("n1");
        let node = |labels: Value, taints: Value| json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints}});
        let taint = json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
        let old = node(
            json!({"kubernetes.io/hostname": "n1", "node-restriction.kubernetes.io/pool": "a", "disk": "ssd"}),
            taint.clone(),
        );
        let message = |new: &Value| {
            admit_update(&me, "", "nodes", &old, new)
                .err()
                .map(|e| e.message)
        };
        // Ordinary and kubelet labels change freely; the taints stay.
        let fine = node(
            json!({"kubernetes.io/hostname": "n1", "node-restriction.kubernetes.io/pool": "a", "disk": "nvme", "topology.kubernetes.io/zone": "z"}),
            taint.clone(),
        );
        assert_eq!(message(&fine), None);
        for labels in [
            json!({"kubernetes.io/hostname": "n1", "node-restriction.kubernetes.io/pool": "b", "disk": "ssd"}),
            json!({"kubernetes.io/hostname": "n1", "disk": "ssd"}),
        ] {
            assert_eq!(
                message(&node(labels, taint.clone())).as_deref(),
                Some(
                    "nodes \"n1\" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/pool"
                )
            );
        }
        for taints in [
            Value::Null,
            json!([]),
            json!([{"key": "dedicated", "value": "cpu", "effect": "NoSchedule"}]),
        ] {
            assert_eq!(
                message(&node(old["metadata"]["labels"].clone(), taints)).as_deref(),
                Some("nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints")
            );
        }
        // Absent, null and empty taint lists are the same list.
        let bare = node(json!({}), Value::Null);
        assert!(admit_update(&me, "", "nodes", &bare, &node(json!({}), json!([]))).is_ok());
        let mut with_source = bare.clone();
        with_source["spec"]["configSource"] = json!({"configMap": {"name": "x"}});
        assert!(admit_update(&me, "", "nodes", &bare, &with_source).is_err());
        // Only node credentials are restricted.
        let admin = Identity {
            user: "admin".into(),
            groups: vec!["system:masters".into()],
        };
        assert!(admit_update(&admin, "", "nodes", &old, &bare).is_ok());
        // On create: no restricted labels; taints are the kubelet's own.
        let created = node(
            json!({"node-role.kubernetes.io/worker": "", "disk": "x"}),
            taint,
        );
        assert_eq!(
            admit_create(&me, "", "nodes", &created)
                .err()
                .map(|e| e.message)
                .as_deref(),
            Some(
                "nodes \"n1\" is forbidden: node \"n1\" is not allowed to set the following labels: node-role.kubernetes.io/worker"
            )
        );
        assert!(admit_create(&me, "", "nodes", &node(json!({"disk": "x"}), json!([]))).is_ok());
    }

    #[test]
    fn node_tokens_are_bound_to_pods_on_the_node() {
        let cache = WatchCache::holding(&[
            (
                "/registry/pods/apps/web",
                json!({"metadata": {"name": "web", "namespace": "apps", "uid": "u1"}, "spec": {"nodeName": "n1"}}),
            ),
            (
                "/registry/pods/apps/other",
                json!({"metadata": {"name": "other", "namespace": "apps", "uid": "u2"}, "spec": {"nodeName": "n2"}}),
            ),
        ]);
        let me = node_identity("n1");
        let request = |bound: Value| json!({"spec": {"boundObjectRef": bound}});
        let check = |bound: Value| {
            admit_token_request(&cache, &me, "apps", "web-sa", &request(bound))
                .err()
                .map(|e| e.message)
        };
        let prefix = "serviceaccounts \"web-sa\" is forbidden: ";
        assert_eq!(
            check(json!({"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u1"})),
            None
        );
        for (bound, reason) in [
            (Value::Null, "node requested token not bound to a pod"),
            (
                json!({"apiVersion": "v1", "kind": "Secret", "name": "web", "uid": "u1"}),
                "node requested token not bound to a pod",
            ),
            (
                json!({"kind": "Pod", "name": "web", "uid": "u1"}),
                "node requested token not bound to a pod",
            ),
            (
                json!({"apiVersion": "v1", "kind": "Pod", "name": "web"}),
                "node requested token with a pod binding without a uid",
            ),
            (
                json!({"apiVersion": "v1", "kind": "Pod", "name": "other", "uid": "u2"}),
                "node requested token bound to a pod scheduled on a different node",
            ),
            (
                json!({"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u9"}),
                "the UID in the bound object reference (u9) does not match the UID in record. The object might have been deleted and then recreated",
            ),
        ] {
            assert_eq!(
                check(bound.clone()),
                Some(format!("{prefix}{reason}")),
                "{bound}"
            );
        }
        let missing = admit_token_request(
            &cache,
            &me,
            "apps",
            "web-sa",
            &request(json!({"apiVersion": "v1", "kind": "Pod", "name": "gone", "uid": "u3"})),
        );
        assert_eq!(missing.err().map(|e| e.code.as_u16()), Some(404));
    }
}
