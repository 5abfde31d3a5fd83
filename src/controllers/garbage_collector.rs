//! Garbage collector: enforces `metadata.ownerReferences` the way kube's garbage
//! collector does, on top of the API server's deletion side (DELETE with
//! `propagationPolicy=Foreground` adds the `foregroundDeletion` finalizer, `Orphan`
//! adds `orphan`, and the server removes an object once its last finalizer is gone).
//!
//! It is watch driven, like kube's GraphBuilder: one metadata-only watch per
//! resource that supports list, watch, delete and patch (found by discovery,
//! refreshed every 30 s so new custom resources are covered) feeds an in-memory
//! graph of the objects that matter — those with owners, those being deleted, and
//! the owners they point at. Objects that own nothing and are owned by nothing cost
//! nothing but the watch. Each change marks the objects it may affect as dirty, and
//! only dirty objects are examined:
//!
//! * **Background**: a dependent whose owners are all gone (an owner missing from
//!   the graph is verified with a live GET by name and uid, since the watches are not
//!   one snapshot) is deleted with a uid precondition; one that still has a living
//!   owner only loses the dangling references.
//! * **Foreground**: dependents of an owner that is being deleted with the
//!   `foregroundDeletion` finalizer are deleted (in Foreground when they have
//!   dependents of their own); once no dependent with `blockOwnerDeletion: true` is
//!   left the finalizer is removed from the owner.
//! * **Orphan**: the references to an owner carrying the `orphan` finalizer are
//!   removed from its dependents, then the finalizer.
//!
//! Reference and finalizer removals are JSON patches guarded by a `test` of the
//! resourceVersion, so a concurrent writer is never overwritten; a failed step is
//! retried after a short delay. Talks only to the API, never to the store. Not done:
//! cycle detection between foreground owners.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions};
use kube::core::{ApiResource, GroupVersion, PartialObjectMeta};
use kube::discovery::{Discovery, Scope, verbs};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// How often discovery is refreshed (new CRDs get watches).
const DISCOVERY_PERIOD: Duration = Duration::from_secs(30);
/// Earliest re-discovery after an owner of an unknown kind was seen.
const STALE_DISCOVERY_RETRY: Duration = Duration::from_secs(3);
/// Delay before a failed or undecidable object is examined again.
const RETRY: Duration = Duration::from_secs(2);
/// Every object in the graph is re-examined this often, as a safety net.
const RESYNC: Duration = Duration::from_secs(300);
/// Dirty objects examined before the collector goes back to reading watch events.
const BATCH: usize = 256;
/// Remembered uids of deleted owners (uids are never reused); the set is cleared
/// when it grows past this.
const GONE_LIMIT: usize = 100_000;
const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// A watched resource.
#[derive(Clone)]
struct Resource {
    api: Arc<ApiResource>,
    namespaced: bool,
}

impl Resource {
    fn key(&self) -> String {
        format!(
            "{}/{}/{}",
            self.api.group, self.api.version, self.api.plural
        )
    }
}

/// One object of the graph.
struct Node {
    resource: Arc<ApiResource>,
    namespace: Option<String>,
    name: String,
    uid: String,
    resource_version: String,
    owners: Vec<OwnerReference>,
    deleting: bool,
    finalizers: Vec<String>,
}

impl Node {
    fn from_meta(resource: &Resource, meta: ObjectMeta) -> Option<Node> {
        Some(Node {
            resource: resource.api.clone(),
            namespace: if resource.namespaced {
                meta.namespace
            } else {
                None
            },
            name: meta.name?,
            uid: meta.uid?,
            resource_version: meta.resource_version.unwrap_or_default(),
            owners: meta.owner_references.unwrap_or_default(),
            deleting: meta.deletion_timestamp.is_some(),
            finalizers: meta.finalizers.unwrap_or_default(),
        })
    }

    fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    fn deleting_dependents(&self) -> bool {
        self.deleting && self.has_finalizer(FOREGROUND)
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
    /// Could not be decided now (unknown kind, API error).
    Unknown,
}

/// What a watch task reports.
enum Change {
    Upsert(Resource, ObjectMeta),
    Delete(ObjectMeta),
    Synced(String),
}

/// The ownership graph and the work queue over it.
#[derive(Default)]
struct Graph {
    nodes: HashMap<String, Node>,
    /// Owner uid → uids of the dependents that reference it.
    dependents: HashMap<String, HashSet<String>>,
    dirty: HashSet<String>,
    retry: HashMap<String, Instant>,
    /// Uids known to be deleted.
    gone: HashSet<String>,
    /// An owner's kind was unknown to discovery: maybe a new CRD.
    discovery_stale: bool,
}

impl Graph {
    fn link(&mut self, uid: &str, owners: &[OwnerReference]) {
        for owner in owners {
            self.dependents
                .entry(owner.uid.clone())
                .or_default()
                .insert(uid.to_string());
        }
    }

    fn unlink(&mut self, uid: &str, owners: &[OwnerReference]) {
        for owner in owners {
            if let Some(set) = self.dependents.get_mut(&owner.uid) {
                set.remove(uid);
                if set.is_empty() {
                    self.dependents.remove(&owner.uid);
                }
            }
        }
    }

    /// Marks the owners in `owners` that wait for their dependents.
    fn dirty_waiting_owners(&mut self, owners: &[OwnerReference]) {
        for owner in owners {
            if self.nodes.get(&owner.uid).is_some_and(|o| o.deleting) {
                self.dirty.insert(owner.uid.clone());
            }
        }
    }

    fn dirty_dependents(&mut self, uid: &str) {
        if let Some(deps) = self.dependents.get(uid) {
            self.dirty.extend(deps.iter().cloned());
        }
    }

    fn upsert(&mut self, node: Node) {
        let uid = node.uid.clone();
        let interesting =
            !node.owners.is_empty() || node.deleting || self.dependents.contains_key(&uid);
        if !interesting {
            // It may have had owners before: forget it.
            if let Some(old) = self.nodes.remove(&uid) {
                self.unlink(&uid, &old.owners);
                self.dirty_waiting_owners(&old.owners);
            }
            return;
        }
        let deleting = node.deleting;
        let owners = node.owners.clone();
        if let Some(old) = self.nodes.insert(uid.clone(), node) {
            self.unlink(&uid, &old.owners);
            // An owner this object no longer references may be waiting for it.
            self.dirty_waiting_owners(&old.owners);
        }
        self.link(&uid, &owners);
        self.dirty.insert(uid.clone());
        if deleting {
            self.dirty_dependents(&uid);
            self.dirty_waiting_owners(&owners);
        }
    }

    fn delete(&mut self, uid: &str) {
        self.gone.insert(uid.to_string());
        if self.gone.len() > GONE_LIMIT {
            self.gone.clear();
        }
        self.dirty_dependents(uid);
        if let Some(old) = self.nodes.remove(uid) {
            self.unlink(uid, &old.owners);
            self.dirty_waiting_owners(&old.owners);
        }
        // Dependents that still reference the uid keep the index entry until they
        // are examined; drop it when nothing references it anymore.
        if self.dependents.get(uid).is_some_and(|d| d.is_empty()) {
            self.dependents.remove(uid);
        }
        self.dirty.remove(uid);
        self.retry.remove(uid);
    }

    fn retry_later(&mut self, uid: &str) {
        self.retry.insert(uid.to_string(), Instant::now() + RETRY);
    }

    fn take_due_retries(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .retry
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for uid in due {
            self.retry.remove(&uid);
            self.dirty.insert(uid);
        }
    }
}

/// Runs the garbage collector until the process ends.
pub async fn run(client: kube::Client) {
    let (tx, mut rx) = mpsc::channel::<Change>(4096);
    let mut watches: HashMap<String, AbortHandle> = HashMap::new();
    let mut unsynced: HashSet<String> = HashSet::new();
    let mut discovery: Option<Discovery> = None;
    let mut graph = Graph::default();
    let mut next_discovery = Instant::now();
    let mut last_discovery = Instant::now();
    let mut next_resync = Instant::now() + RESYNC;
    loop {
        let soon = graph.discovery_stale && last_discovery.elapsed() >= STALE_DISCOVERY_RETRY;
        if Instant::now() >= next_discovery || soon {
            graph.discovery_stale = false;
            last_discovery = Instant::now();
            next_discovery = Instant::now() + DISCOVERY_PERIOD;
            match Discovery::new(client.clone()).run().await {
                Ok(d) => {
                    sync_watches(&client, &d, &tx, &mut watches, &mut unsynced);
                    discovery = Some(d);
                }
                Err(e) => tracing::warn!(error = %e, "garbage collector discovery failed"),
            }
        }
        if Instant::now() >= next_resync {
            next_resync = Instant::now() + RESYNC;
            let all: Vec<String> = graph.nodes.keys().cloned().collect();
            graph.dirty.extend(all);
        }
        graph.take_due_retries();
        // Work only once every watch has listed, so "not in the graph" means
        // something; otherwise read events.
        let ready = discovery.is_some() && unsynced.is_empty() && !graph.dirty.is_empty();
        if ready {
            // Drain what has arrived, then work a batch.
            while let Ok(change) = rx.try_recv() {
                apply(&mut graph, change, &mut unsynced);
            }
            let batch: Vec<String> = graph.dirty.iter().take(BATCH).cloned().collect();
            for uid in batch {
                graph.dirty.remove(&uid);
                if let Some(d) = &discovery {
                    examine(&client, d, &mut graph, &uid).await;
                }
            }
            continue;
        }
        tokio::select! {
            change = rx.recv() => match change {
                Some(change) => apply(&mut graph, change, &mut unsynced),
                None => return,
            },
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

fn apply(graph: &mut Graph, change: Change, unsynced: &mut HashSet<String>) {
    match change {
        Change::Upsert(resource, meta) => {
            if let Some(node) = Node::from_meta(&resource, meta) {
                graph.upsert(node);
            }
        }
        Change::Delete(meta) => {
            if let Some(uid) = meta.uid {
                graph.delete(&uid);
            }
        }
        Change::Synced(key) => {
            unsynced.remove(&key);
        }
    }
}

/// Resources the collector never watches, as kube's `DefaultIgnoredResources`: Events
/// (core and `events.k8s.io`) are the busiest kind and nothing owns them.
const IGNORED: [(&str, &str); 2] = [("", "events"), ("events.k8s.io", "events")];

/// The resources the collector watches: listable, watchable, deletable, patchable, and
/// not [`IGNORED`].
fn resources(discovery: &Discovery) -> Vec<Resource> {
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            let ignored = IGNORED.contains(&(resource.group.as_str(), resource.plural.as_str()));
            if !ignored
                && [verbs::LIST, verbs::WATCH, verbs::DELETE, verbs::PATCH]
                    .iter()
                    .all(|v| caps.supports_operation(v))
            {
                out.push(Resource {
                    api: Arc::new(resource),
                    namespaced: matches!(caps.scope, Scope::Namespaced),
                });
            }
        }
    }
    out
}

/// Starts a watch for each new resource and stops those discovery no longer lists.
fn sync_watches(
    client: &kube::Client,
    discovery: &Discovery,
    tx: &mpsc::Sender<Change>,
    watches: &mut HashMap<String, AbortHandle>,
    unsynced: &mut HashSet<String>,
) {
    let wanted = resources(discovery);
    let keys: HashSet<String> = wanted.iter().map(Resource::key).collect();
    watches.retain(|key, handle| {
        let keep = keys.contains(key);
        if !keep {
            handle.abort();
            unsynced.remove(key);
        }
        keep
    });
    let first = watches.is_empty();
    for resource in wanted {
        let key = resource.key();
        if watches.contains_key(&key) {
            continue;
        }
        // Only the first set gates the collector; a resource that appears later
        // (a new CRD) has no objects anyone could own yet.
        if first {
            unsynced.insert(key.clone());
        }
        let task = tokio::spawn(watch_resource(client.clone(), resource, tx.clone()));
        watches.insert(key, task.abort_handle());
    }
}

async fn watch_resource(client: kube::Client, resource: Resource, tx: mpsc::Sender<Change>) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &*resource.api);
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let key = resource.key();
    while let Some(event) = stream.next().await {
        let change = match event {
            Ok(Event::Apply(o) | Event::InitApply(o)) => {
                Change::Upsert(resource.clone(), o.metadata)
            }
            Ok(Event::Delete(o)) => Change::Delete(o.metadata),
            Ok(Event::InitDone) => Change::Synced(key.clone()),
            Ok(Event::Init) => continue,
            Err(e) => {
                tracing::debug!(resource = %key, error = %e, "garbage collector watch failed; retrying");
                continue;
            }
        };
        if tx.send(change).await.is_err() {
            return;
        }
    }
}

/// Looks at one dirty object: as an owner being deleted (orphan / foreground) and
/// as a dependent (are its owners still there?).
async fn examine(client: &kube::Client, discovery: &Discovery, graph: &mut Graph, uid: &str) {
    let Some(node) = graph.nodes.get(uid) else {
        return;
    };
    let ok = if node.deleting {
        examine_deleting_owner(client, graph, uid).await
    } else if !node.owners.is_empty() {
        examine_dependent(client, discovery, graph, uid).await
    } else {
        true
    };
    if !ok {
        graph.retry_later(uid);
    }
}

/// An object being deleted with the orphan or foregroundDeletion finalizer.
async fn examine_deleting_owner(client: &kube::Client, graph: &mut Graph, uid: &str) -> bool {
    let Some(owner) = graph.nodes.get(uid) else {
        return true;
    };
    let deps: Vec<&Node> = graph
        .dependents
        .get(uid)
        .into_iter()
        .flatten()
        .filter_map(|d| graph.nodes.get(d))
        .collect();
    if owner.has_finalizer(ORPHAN) {
        if !graph_knows_every_dependent(client, owner, &deps).await {
            return false;
        }
        let uids = HashSet::from([owner.uid.as_str()]);
        for dep in &deps {
            if let Err(e) = remove_references(client, dep, &uids).await {
                tracing::warn!(owner = %owner.describe(), dependent = %dep.describe(), error = %format!("{e:#}"), "orphaning a dependent failed");
                return false;
            }
        }
        if let Err(e) = remove_finalizer(client, owner, ORPHAN).await {
            tracing::debug!(owner = %owner.describe(), error = %format!("{e:#}"), "removing the orphan finalizer failed");
            return false;
        }
        tracing::info!(owner = %owner.describe(), dependents = deps.len(), "dependents orphaned");
        return true;
    }
    if owner.deleting_dependents() {
        let blocking = deps
            .iter()
            .filter(|d| {
                d.owners
                    .iter()
                    .any(|r| r.uid == owner.uid && r.block_owner_deletion == Some(true))
            })
            .count();
        if blocking > 0 {
            tracing::debug!(owner = %owner.describe(), blocking, "waiting for blocking dependents");
            return true;
        }
        return match remove_finalizer(client, owner, FOREGROUND).await {
            Ok(()) => {
                tracing::info!(owner = %owner.describe(), "dependents gone; foreground deletion finished");
                true
            }
            Err(e) => {
                tracing::debug!(owner = %owner.describe(), error = %format!("{e:#}"), "removing foregroundDeletion finalizer failed");
                false
            }
        };
    }
    true
}

/// Whether a live list of the kinds of `deps` finds no other dependent of `owner`.
/// The graph's watches are not one snapshot: a dependent whose watch lags would keep
/// its reference to an owner that then goes, and be collected instead of orphaned.
async fn graph_knows_every_dependent(client: &kube::Client, owner: &Node, deps: &[&Node]) -> bool {
    let known: HashSet<&str> = deps.iter().map(|d| d.uid.as_str()).collect();
    let mut listed: HashSet<(&str, Option<&str>)> = HashSet::new();
    for dep in deps {
        if !listed.insert((dep.resource.plural.as_str(), dep.namespace.as_deref())) {
            continue;
        }
        let list = match api_for(client, &dep.resource, dep.namespace.as_deref())
            .list_metadata(&kube::api::ListParams::default())
            .await
        {
            Ok(list) => list,
            Err(e) => {
                tracing::debug!(owner = %owner.describe(), error = %e, "listing dependents failed");
                return false;
            }
        };
        let unseen = list.items.iter().any(|item| {
            item.metadata
                .uid
                .as_deref()
                .is_some_and(|uid| !known.contains(uid))
                && item
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|r| r.uid == owner.uid)
        });
        if unseen {
            tracing::debug!(owner = %owner.describe(), "a dependent is not in the graph yet; orphaning later");
            return false;
        }
    }
    true
}

/// An object with owners: deleted when none is left, references to gone owners
/// removed otherwise.
async fn examine_dependent(
    client: &kube::Client,
    discovery: &Discovery,
    graph: &mut Graph,
    uid: &str,
) -> bool {
    let Some(node) = graph.nodes.get(uid) else {
        return true;
    };
    let owners = node.owners.clone();
    let mut solid = false;
    let mut waiting = false;
    let mut unknown = false;
    let mut remove: HashSet<String> = HashSet::new();
    for reference in &owners {
        match owner_state(client, discovery, graph, uid, reference).await {
            OwnerState::Solid => solid = true,
            OwnerState::Waiting => {
                waiting = true;
                remove.insert(reference.uid.clone());
            }
            OwnerState::Dangling => {
                remove.insert(reference.uid.clone());
            }
            OwnerState::Unknown => unknown = true,
        }
    }
    let Some(node) = graph.nodes.get(uid) else {
        return true;
    };
    if solid {
        if remove.is_empty() {
            return true;
        }
        let uids: HashSet<&str> = remove.iter().map(String::as_str).collect();
        return match remove_references(client, node, &uids).await {
            Ok(()) => {
                tracing::info!(object = %node.describe(), removed = remove.len(), "removed references to owners that are gone");
                true
            }
            Err(e) => {
                tracing::debug!(object = %node.describe(), error = %format!("{e:#}"), "removing owner references failed");
                false
            }
        };
    }
    if unknown {
        return false;
    }
    let has_dependents = graph.dependents.get(uid).is_some_and(|d| !d.is_empty());
    let mut params = if waiting && has_dependents {
        DeleteParams::foreground()
    } else if node.has_finalizer(ORPHAN) {
        DeleteParams::orphan()
    } else if node.has_finalizer(FOREGROUND) {
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
            tracing::info!(object = %node.describe(), policy = ?params.propagation_policy, "garbage collected");
            true
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => true,
        Err(e) => {
            tracing::warn!(object = %node.describe(), error = %e, "garbage collecting failed");
            false
        }
    }
}

fn api_for(client: &kube::Client, resource: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// Whether `reference` (on the dependent `uid`) points at a living owner.
async fn owner_state(
    client: &kube::Client,
    discovery: &Discovery,
    graph: &mut Graph,
    uid: &str,
    reference: &OwnerReference,
) -> OwnerState {
    let Some(dependent_ns) = graph.nodes.get(uid).map(|n| n.namespace.clone()) else {
        return OwnerState::Unknown;
    };
    if let Some(owner) = graph.nodes.get(&reference.uid) {
        // A namespaced owner must live in its dependent's namespace.
        if owner.namespace.is_some() && owner.namespace != dependent_ns {
            return OwnerState::Dangling;
        }
        return if owner.deleting_dependents() {
            OwnerState::Waiting
        } else {
            OwnerState::Solid
        };
    }
    if graph.gone.contains(&reference.uid) {
        return OwnerState::Dangling;
    }
    // Not in the graph: the owner's watch may simply not have shown it yet (or it
    // owns nothing else and was never interesting). Ask the API.
    let Ok(gv) = reference.api_version.parse::<GroupVersion>() else {
        tracing::debug!(api_version = %reference.api_version, "bad owner apiVersion");
        return OwnerState::Unknown;
    };
    let Some((resource, caps)) = discovery.resolve_gvk(&gv.with_kind(&reference.kind)) else {
        tracing::debug!(kind = %reference.kind, "owner kind unknown to discovery");
        graph.discovery_stale = true;
        return OwnerState::Unknown;
    };
    let namespaced = matches!(caps.scope, Scope::Namespaced);
    let api = match (namespaced, dependent_ns.as_deref()) {
        (false, _) => Api::<DynamicObject>::all_with(client.clone(), &resource),
        (true, Some(ns)) => api_for(client, &resource, Some(ns)),
        // A cluster-scoped dependent cannot have a namespaced owner.
        (true, None) => return OwnerState::Dangling,
    };
    match api.get_metadata_opt(&reference.name).await {
        Ok(Some(owner)) if owner.metadata.uid.as_deref() == Some(reference.uid.as_str()) => {
            let resource = Resource {
                api: Arc::new(resource),
                namespaced,
            };
            let Some(node) = Node::from_meta(&resource, owner.metadata) else {
                return OwnerState::Unknown;
            };
            let state = if node.deleting_dependents() {
                OwnerState::Waiting
            } else {
                OwnerState::Solid
            };
            // From now on its watch events keep it current (it is referenced).
            graph.nodes.insert(node.uid.clone(), node);
            state
        }
        Ok(_) => {
            graph.gone.insert(reference.uid.clone());
            OwnerState::Dangling
        }
        Err(e) => {
            tracing::debug!(error = %e, "looking up owner failed");
            OwnerState::Unknown
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn resource() -> Resource {
        Resource {
            api: Arc::new(ApiResource {
                group: "apps".into(),
                version: "v1".into(),
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                plural: "replicasets".into(),
            }),
            namespaced: true,
        }
    }

    fn meta(uid: &str, owners: &[&str], deleting: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some(format!("n-{uid}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            owner_references: (!owners.is_empty()).then(|| {
                owners
                    .iter()
                    .map(|o| OwnerReference {
                        api_version: "apps/v1".into(),
                        kind: "ReplicaSet".into(),
                        name: format!("n-{o}"),
                        uid: o.to_string(),
                        ..Default::default()
                    })
                    .collect()
            }),
            deletion_timestamp: deleting.then_some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            ),
            finalizers: deleting.then(|| vec![FOREGROUND.to_string()]),
            ..Default::default()
        }
    }

    fn upsert(g: &mut Graph, m: ObjectMeta) {
        let node = Node::from_meta(&resource(), m).expect("node");
        g.upsert(node);
    }

    #[test]
    fn unrelated_objects_are_not_kept() {
        let mut g = Graph::default();
        upsert(&mut g, meta("lonely", &[], false));
        assert!(g.nodes.is_empty());
        assert!(g.dirty.is_empty());
    }

    #[test]
    fn dependents_are_indexed_and_owners_kept_once_referenced() {
        let mut g = Graph::default();
        upsert(&mut g, meta("pod", &["rs"], false));
        assert!(g.dirty.contains("pod"));
        assert!(g.dependents["rs"].contains("pod"));
        // The owner's own event now keeps it in the graph.
        upsert(&mut g, meta("rs", &[], false));
        assert!(g.nodes.contains_key("rs"));
    }

    #[test]
    fn deleting_an_owner_dirties_its_dependents() {
        let mut g = Graph::default();
        upsert(&mut g, meta("pod", &["rs"], false));
        upsert(&mut g, meta("rs", &[], false));
        g.dirty.clear();
        g.delete("rs");
        assert!(g.dirty.contains("pod"));
        assert!(g.gone.contains("rs"));
        assert!(!g.nodes.contains_key("rs"));
    }

    #[test]
    fn foreground_owner_is_dirtied_when_a_dependent_goes() {
        let mut g = Graph::default();
        upsert(&mut g, meta("pod", &["rs"], false));
        upsert(&mut g, meta("rs", &[], true));
        assert!(
            g.dirty.contains("pod"),
            "dependents of a deleting owner are examined"
        );
        g.dirty.clear();
        g.delete("pod");
        assert!(g.dirty.contains("rs"), "the owner may now finish");
        assert!(!g.dependents.contains_key("rs"));
    }

    #[test]
    fn losing_all_owners_forgets_the_object() {
        let mut g = Graph::default();
        upsert(&mut g, meta("pod", &["rs"], false));
        upsert(&mut g, meta("pod", &[], false));
        assert!(!g.nodes.contains_key("pod"));
        assert!(!g.dependents.contains_key("rs"));
    }

    #[test]
    fn retries_come_back_after_their_delay() {
        let mut g = Graph::default();
        g.retry.insert("x".into(), Instant::now());
        g.take_due_retries();
        assert!(g.dirty.contains("x"));
        assert!(g.retry.is_empty());
    }
}
