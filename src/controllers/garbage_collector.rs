//! Garbage collector: enforces `metadata.ownerReferences` the way kube's garbage
//! collector does, on top of the API server's deletion side (DELETE with
//! `propagationPolicy=Foreground` adds the `foregroundDeletion` finalizer, `Orphan`
//! adds `orphan`, and the server removes an object once its last finalizer is gone).
//!
//! Every second it lists the metadata of every resource that supports list, delete
//! and patch (found by discovery, refreshed every 30 passes and whenever an owner's
//! kind is unknown), builds an owner uid → dependents graph and then:
//!
//! * **Background**: a dependent whose owners are all gone (verified with a live GET
//!   by name and uid, so a list that raced a creation never deletes anything) is
//!   deleted with a uid precondition; one that still has a living owner only loses
//!   the dangling references.
//! * **Foreground**: dependents of an owner that is being deleted with the
//!   `foregroundDeletion` finalizer are deleted (in Foreground when they have
//!   dependents of their own); once no dependent with `blockOwnerDeletion: true` is
//!   left the finalizer is removed from the owner.
//! * **Orphan**: the references to an owner carrying the `orphan` finalizer are
//!   removed from its dependents, then the finalizer.
//!
//! Reference and finalizer removals are JSON patches guarded by a `test` of the
//! resourceVersion, so a concurrent writer is never overwritten. Talks only to the
//! API, never to the store. Not done: cycle detection between foreground owners.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Preconditions};
use kube::core::{ApiResource, GroupVersion};
use kube::discovery::{ApiCapabilities, Discovery, Scope, verbs};
use serde_json::{Value, json};

const PERIOD: Duration = Duration::from_secs(1);
/// Discovery is refreshed every this many passes.
const DISCOVERY_EVERY: u32 = 30;
const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// One object of the graph.
struct Node {
    resource: ApiResource,
    namespace: Option<String>,
    name: String,
    uid: String,
    resource_version: String,
    owners: Vec<OwnerReference>,
    deleting: bool,
    finalizers: Vec<String>,
}

impl Node {
    fn deleting_dependents(&self) -> bool {
        self.deleting && self.finalizers.iter().any(|f| f == FOREGROUND)
    }

    fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{ns}/{}", self.resource.plural, self.name),
            None => format!("{}/{}", self.resource.plural, self.name),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum OwnerState {
    /// Exists and is not deleting its dependents.
    Solid,
    /// Exists, being deleted in the foreground.
    Waiting,
    /// Gone (or not a valid owner of this dependent).
    Dangling,
    /// Could not be decided in this pass (unknown kind, API error).
    Unknown,
}

/// Runs the garbage collector until the process ends.
pub async fn run(client: kube::Client) {
    let mut discovery: Option<Discovery> = None;
    let mut pass: u32 = 0;
    let mut scanned_at: Option<String> = None;
    loop {
        // Nothing changed anywhere since the last complete pass: nothing to collect.
        // (A list's resourceVersion is the cluster-wide revision.)
        let revision = cluster_revision(&client).await;
        if revision.is_some() && revision == scanned_at {
            tokio::time::sleep(PERIOD).await;
            continue;
        }
        if discovery.is_none() || pass.is_multiple_of(DISCOVERY_EVERY) {
            match Discovery::new(client.clone()).run().await {
                Ok(d) => discovery = Some(d),
                Err(e) => tracing::warn!(error = %e, "garbage collector discovery failed"),
            }
        }
        pass = pass.wrapping_add(1);
        if let Some(d) = &discovery {
            match scan(&client, d).await {
                Ok(true) => scanned_at = revision,
                // An owner kind discovery does not know: maybe a new CRD.
                Ok(false) => {
                    pass = 0;
                    scanned_at = None;
                }
                Err(e) => {
                    scanned_at = None;
                    tracing::warn!(error = %e, "garbage collection pass failed");
                }
            }
        }
        tokio::time::sleep(PERIOD).await;
    }
}

/// The cluster's current revision, from a one-item list.
async fn cluster_revision(client: &kube::Client) -> Option<String> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .list_metadata(&ListParams::default().limit(1))
        .await
        .ok()
        .and_then(|list| list.metadata.resource_version)
}

/// The resources the collector looks at: listable, deletable and patchable.
fn resources(discovery: &Discovery) -> Vec<(ApiResource, ApiCapabilities)> {
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if caps.supports_operation(verbs::LIST)
                && caps.supports_operation(verbs::DELETE)
                && caps.supports_operation(verbs::PATCH)
            {
                out.push((resource, caps));
            }
        }
    }
    out
}

/// One pass over the whole graph. Returns false when an owner's kind was unknown
/// to discovery (so the caller refreshes it).
async fn scan(client: &kube::Client, discovery: &Discovery) -> anyhow::Result<bool> {
    let mut nodes: Vec<Node> = Vec::new();
    for (resource, caps) in resources(discovery) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let list = match api.list_metadata(&ListParams::default()).await {
            Ok(list) => list,
            Err(e) => {
                tracing::debug!(resource = %resource.plural, error = %e, "garbage collector list failed");
                continue;
            }
        };
        for item in list.items {
            let meta = item.metadata;
            let (Some(name), Some(uid)) = (meta.name, meta.uid) else {
                continue;
            };
            nodes.push(Node {
                resource: resource.clone(),
                namespace: match caps.scope {
                    Scope::Namespaced => meta.namespace,
                    Scope::Cluster => None,
                },
                name,
                uid,
                resource_version: meta.resource_version.unwrap_or_default(),
                owners: meta.owner_references.unwrap_or_default(),
                deleting: meta.deletion_timestamp.is_some(),
                finalizers: meta.finalizers.unwrap_or_default(),
            });
        }
    }
    let by_uid: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.uid.as_str(), i))
        .collect();
    let mut dependents: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        for owner in &node.owners {
            dependents.entry(owner.uid.as_str()).or_default().push(i);
        }
    }
    let mut complete = true;

    // Owners being deleted with the orphan or foregroundDeletion finalizer.
    for owner in nodes.iter().filter(|n| n.deleting) {
        let deps = dependents
            .get(owner.uid.as_str())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if owner.finalizers.iter().any(|f| f == ORPHAN) {
            if let Err(e) = orphan(client, owner, deps, &nodes).await {
                tracing::warn!(owner = %owner.describe(), error = %e, "orphaning dependents failed");
            }
        } else if owner.deleting_dependents() {
            let blocking = deps
                .iter()
                .filter(|&&d| {
                    nodes[d]
                        .owners
                        .iter()
                        .any(|r| r.uid == owner.uid && r.block_owner_deletion == Some(true))
                })
                .count();
            if blocking == 0 {
                match remove_finalizer(client, owner, FOREGROUND).await {
                    Ok(()) => {
                        tracing::info!(owner = %owner.describe(), "dependents gone; foreground deletion finished")
                    }
                    Err(e) => {
                        tracing::debug!(owner = %owner.describe(), error = %e, "removing foregroundDeletion finalizer failed")
                    }
                }
            } else {
                tracing::debug!(owner = %owner.describe(), blocking, "waiting for blocking dependents");
            }
        }
    }

    // Dependents: delete when no owner is left, drop dangling references otherwise.
    let mut verified: HashMap<(String, Option<String>), OwnerState> = HashMap::new();
    for node in nodes.iter().filter(|n| !n.owners.is_empty() && !n.deleting) {
        let mut solid = false;
        let mut waiting = false;
        let mut unknown = false;
        let mut remove: HashSet<&str> = HashSet::new();
        for reference in &node.owners {
            let state = owner_state(
                client,
                discovery,
                &nodes,
                &by_uid,
                &mut verified,
                node,
                reference,
            )
            .await;
            match state {
                OwnerState::Solid => solid = true,
                OwnerState::Waiting => {
                    waiting = true;
                    remove.insert(reference.uid.as_str());
                }
                OwnerState::Dangling => {
                    remove.insert(reference.uid.as_str());
                }
                OwnerState::Unknown => unknown = true,
            }
        }
        if solid {
            if !remove.is_empty() {
                match remove_references(client, node, &remove).await {
                    Ok(()) => {
                        tracing::info!(object = %node.describe(), removed = remove.len(), "removed references to owners that are gone")
                    }
                    Err(e) => {
                        tracing::debug!(object = %node.describe(), error = %e, "removing owner references failed")
                    }
                }
            }
            continue;
        }
        if unknown {
            complete = false;
            continue;
        }
        let has_dependents = dependents.contains_key(node.uid.as_str());
        let mut params = if waiting && has_dependents {
            DeleteParams::foreground()
        } else if node.finalizers.iter().any(|f| f == ORPHAN) {
            DeleteParams::orphan()
        } else if node.finalizers.iter().any(|f| f == FOREGROUND) {
            DeleteParams::foreground()
        } else {
            DeleteParams::background()
        };
        params.preconditions = Some(Preconditions {
            uid: Some(node.uid.clone()),
            resource_version: None,
        });
        match api_for(client, &node.resource, node.namespace.as_deref())
            .delete(&node.name, &params)
            .await
        {
            Ok(_) => {
                tracing::info!(object = %node.describe(), policy = ?params.propagation_policy, "garbage collected")
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                tracing::warn!(object = %node.describe(), error = %e, "garbage collecting failed")
            }
        }
    }
    Ok(complete)
}

fn api_for(client: &kube::Client, resource: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// Whether `reference` (on `node`) points at a living owner.
async fn owner_state(
    client: &kube::Client,
    discovery: &Discovery,
    nodes: &[Node],
    by_uid: &HashMap<&str, usize>,
    verified: &mut HashMap<(String, Option<String>), OwnerState>,
    node: &Node,
    reference: &OwnerReference,
) -> OwnerState {
    if let Some(&i) = by_uid.get(reference.uid.as_str()) {
        let owner = &nodes[i];
        // A namespaced owner must live in its dependent's namespace.
        let valid = owner.namespace.is_none() || owner.namespace == node.namespace;
        if valid {
            return if owner.deleting_dependents() {
                OwnerState::Waiting
            } else {
                OwnerState::Solid
            };
        }
        return OwnerState::Dangling;
    }
    let key = (reference.uid.clone(), node.namespace.clone());
    if let Some(state) = verified.get(&key) {
        return *state;
    }
    let state = verify_absent(client, discovery, node, reference).await;
    verified.insert(key, state);
    state
}

/// The owner was not in the lists: look it up by name and compare the uid, since
/// the lists are not one snapshot.
async fn verify_absent(
    client: &kube::Client,
    discovery: &Discovery,
    node: &Node,
    reference: &OwnerReference,
) -> OwnerState {
    let Ok(gv) = reference.api_version.parse::<GroupVersion>() else {
        tracing::debug!(object = %node.describe(), api_version = %reference.api_version, "bad owner apiVersion");
        return OwnerState::Unknown;
    };
    let Some((resource, caps)) = discovery.resolve_gvk(&gv.with_kind(&reference.kind)) else {
        tracing::debug!(object = %node.describe(), kind = %reference.kind, "owner kind unknown to discovery");
        return OwnerState::Unknown;
    };
    let api = match (caps.scope, node.namespace.as_deref()) {
        (Scope::Cluster, _) => Api::<DynamicObject>::all_with(client.clone(), &resource),
        (Scope::Namespaced, Some(ns)) => api_for(client, &resource, Some(ns)),
        // A cluster-scoped dependent cannot have a namespaced owner.
        (Scope::Namespaced, None) => return OwnerState::Dangling,
    };
    match api.get_metadata_opt(&reference.name).await {
        Ok(None) => OwnerState::Dangling,
        Ok(Some(owner)) if owner.metadata.uid.as_deref() != Some(reference.uid.as_str()) => {
            OwnerState::Dangling
        }
        Ok(Some(owner)) => {
            let deleting = owner.metadata.deletion_timestamp.is_some()
                && owner
                    .metadata
                    .finalizers
                    .unwrap_or_default()
                    .iter()
                    .any(|f| f == FOREGROUND);
            if deleting {
                OwnerState::Waiting
            } else {
                OwnerState::Solid
            }
        }
        Err(e) => {
            tracing::debug!(object = %node.describe(), error = %e, "looking up owner failed");
            OwnerState::Unknown
        }
    }
}

/// Removes every reference to `owner` from its dependents, then the orphan finalizer.
async fn orphan(
    client: &kube::Client,
    owner: &Node,
    deps: &[usize],
    nodes: &[Node],
) -> anyhow::Result<()> {
    let uid: HashSet<&str> = HashSet::from([owner.uid.as_str()]);
    for &d in deps {
        remove_references(client, &nodes[d], &uid).await?;
    }
    remove_finalizer(client, owner, ORPHAN).await?;
    tracing::info!(owner = %owner.describe(), dependents = deps.len(), "dependents orphaned");
    Ok(())
}

/// Removes the owner references whose uid is in `uids` from `node`.
async fn remove_references(
    client: &kube::Client,
    node: &Node,
    uids: &HashSet<&str>,
) -> anyhow::Result<()> {
    let kept: Vec<&OwnerReference> = node
        .owners
        .iter()
        .filter(|r| !uids.contains(r.uid.as_str()))
        .collect();
    let op = if kept.is_empty() {
        json!({"op": "remove", "path": "/metadata/ownerReferences"})
    } else {
        json!({"op": "replace", "path": "/metadata/ownerReferences", "value": kept})
    };
    json_patch(client, node, vec![op]).await
}

/// Removes `finalizer` from `node`'s finalizers.
async fn remove_finalizer(
    client: &kube::Client,
    node: &Node,
    finalizer: &str,
) -> anyhow::Result<()> {
    let kept: Vec<&String> = node.finalizers.iter().filter(|f| *f != finalizer).collect();
    let op = if kept.is_empty() {
        json!({"op": "remove", "path": "/metadata/finalizers"})
    } else {
        json!({"op": "replace", "path": "/metadata/finalizers", "value": kept})
    };
    json_patch(client, node, vec![op]).await
}

/// An RFC 6902 patch of `node`, preceded by a test of the resourceVersion we read.
async fn json_patch(client: &kube::Client, node: &Node, mut ops: Vec<Value>) -> anyhow::Result<()> {
    ops.insert(
        0,
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": node.resource_version}),
    );
    let resource = &node.resource;
    let mut url = if resource.group.is_empty() {
        format!("/api/{}", resource.version)
    } else {
        format!("/apis/{}/{}", resource.group, resource.version)
    };
    if let Some(ns) = &node.namespace {
        url.push_str(&format!("/namespaces/{ns}"));
    }
    url.push_str(&format!("/{}/{}", resource.plural, node.name));
    let request = http::Request::patch(url)
        .header("content-type", "application/json-patch+json")
        .body(serde_json::to_vec(&Value::Array(ops))?)?;
    match client.request::<Value>(request).await {
        Ok(_) => Ok(()),
        // Gone already: nothing to patch.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
