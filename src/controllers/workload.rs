//! Helpers shared by the workload controllers (ReplicaSet, ReplicationController,
//! Deployment, DaemonSet, StatefulSet, Job, CronJob): label selector matching,
//! controller ownerReferences, pod readiness and availability, the
//! [`ReplicatedPods`] view that lets ReplicaSets and ReplicationControllers share one
//! loop, ControllerRevision data, hashes and bookkeeping (DaemonSet, StatefulSet),
//! and the error type the `kube::runtime::Controller` loops need. Pure functions over
//! API objects, except `sync_revisions` / `prune_revisions`, which read and write
//! ControllerRevisions through the API (never the store).

use anyhow::Context as _;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Pod, PodStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::pods::CachedPod;
use sha2::{Digest, Sha256};

/// Label distinguishing the ReplicaSets (and pods) of each Deployment template.
pub const HASH_LABEL: &str = "pod-template-hash";

/// kube's `rand.SafeEncodeString` alphabet (no vowels, no confusable characters).
pub(crate) const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Writes a JSON value with object keys sorted, so the hash does not depend on map order.
fn canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical_json(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The template as JSON without the `pod-template-hash` label (what two templates are
/// compared and hashed on).
fn template_value(template: &PodTemplateSpec) -> Value {
    let mut template = template.clone();
    if let Some(labels) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(HASH_LABEL);
    }
    serde_json::to_value(&template).unwrap_or(Value::Null)
}

/// A stable hash of a pod template (and the Deployment's collisionCount), encoded like
/// kube's: the decimal form of a 32-bit digest, each digit mapped to a safe character.
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut text = String::new();
    canonical_json(&template_value(template), &mut text);
    if let Some(count) = collision_count {
        text.push_str(&count.to_string());
    }
    let digest = Sha256::digest(text.as_bytes());
    let value = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    value
        .to_string()
        .bytes()
        .map(|b| SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()] as char)
        .collect()
}

/// Whether two templates are equal apart from the `pod-template-hash` label.
pub fn same_template(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    template_value(a) == template_value(b)
}

/// Status counts of a replicated-pods owner, as last written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplicaCounts {
    pub replicas: i32,
    pub fully_labeled: i32,
    pub ready: i32,
    pub available: i32,
    pub observed_generation: Option<i64>,
}

/// A kind that keeps N interchangeable pods from one template (ReplicaSet,
/// ReplicationController): the accessors the shared replica loop needs.
pub trait ReplicatedPods:
    kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + serde::Serialize
    + Send
    + Sync
    + 'static
{
    /// The event source component (`replicaset-controller`, `replication-controller`).
    const COMPONENT: &'static str;
    /// The pod selector as a LabelSelector.
    fn pod_selector(&self) -> LabelSelector;
    /// `spec.replicas` (defaulted).
    fn desired_replicas(&self) -> i32;
    fn min_ready_seconds(&self) -> i32;
    fn pod_template(&self) -> Option<PodTemplateSpec>;
    /// The counts currently in status.
    fn counts(&self) -> ReplicaCounts;
}

/// Label carrying the ControllerRevision hash on DaemonSet / StatefulSet pods.
pub const REVISION_HASH_LABEL: &str = "controller-revision-hash";

/// The `data` of a ControllerRevision for a pod template, as kube writes it for
/// DaemonSets and StatefulSets: a strategic-merge patch that replaces the template
/// (so `kubectl rollout undo` can apply it).
pub fn revision_data(template: &PodTemplateSpec) -> Value {
    let mut template = serde_json::to_value(template).unwrap_or(Value::Null);
    if let Some(map) = template.as_object_mut() {
        map.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// The pod template stored in a ControllerRevision's data, if it has one.
pub fn revision_template(revision: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut template = revision.data.as_ref()?.0.pointer("/spec/template")?.clone();
    if let Some(map) = template.as_object_mut() {
        map.remove("$patch");
    }
    serde_json::from_value(template).ok()
}

/// Whether a ControllerRevision records exactly this template.
pub fn revision_matches(revision: &ControllerRevision, template: &PodTemplateSpec) -> bool {
    revision.data.as_ref().map(|d| &d.0) == Some(&revision_data(template))
}

/// The `controller-revision-hash` label of an object.
pub fn revision_hash_of(meta: &ObjectMeta) -> Option<&str> {
    meta.labels
        .as_ref()?
        .get(REVISION_HASH_LABEL)
        .map(String::as_str)
}

/// An owner's ControllerRevisions, oldest revision first, and the one recording the
/// current template.
pub struct Revisions {
    pub all: Vec<ControllerRevision>,
    pub update: ControllerRevision,
}

/// Finds or creates the ControllerRevision `<owner>-<hash>` of `template` for
/// `owner` (labels: the template's plus `controller-revision-hash`). An older
/// revision with the same template is renumbered as the newest (a rollback). On a
/// hash collision (the name exists with another template) the owner's
/// `status.collisionCount` is raised and an error returned, so the next sync uses a
/// new hash.
pub async fn sync_revisions<K>(
    client: &kube::Client,
    owner: &K,
    template: &PodTemplateSpec,
    collision_count: Option<i32>,
) -> anyhow::Result<Revisions>
where
    K: kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let kind = K::kind(&());
    let name = owner.name_any();
    let namespace = owner.namespace().context("owner has no namespace")?;
    let uid = owner.uid().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace);
    let mut all: Vec<ControllerRevision> = api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing controllerrevisions in {namespace}"))?
        .items
        .into_iter()
        .filter(|r| controller_of(&r.metadata).is_some_and(|o| o.uid == uid))
        .collect();
    all.sort_by_key(|r| r.revision);
    let newest = all.last().map(|r| r.revision).unwrap_or(0);
    if let Some(i) = all.iter().position(|r| revision_matches(r, template)) {
        if all[i].revision < newest {
            let renumbered = api
                .patch(
                    &all[i].name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"revision": newest + 1})),
                )
                .await
                .with_context(|| format!("renumbering revision {}", all[i].name_any()))?;
            all.remove(i);
            all.push(renumbered);
        }
        let update = all
            .iter()
            .find(|r| revision_matches(r, template))
            .cloned()
            .context("revision vanished")?;
        return Ok(Revisions { all, update });
    }
    let hash = template_hash(template, collision_count);
    let revision_name = format!("{name}-{hash}");
    let mut labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(REVISION_HASH_LABEL.into(), hash);
    let revision = ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name.clone()),
            namespace: Some(namespace.clone()),
            labels: Some(labels),
            owner_references: Some(vec![
                controller_ref(owner).context("owner without name or uid")?,
            ]),
            ..Default::default()
        },
        data: Some(RawExtension(revision_data(template))),
        revision: newest + 1,
    };
    match api.create(&PostParams::default(), &revision).await {
        Ok(created) => {
            all.push(created.clone());
            Ok(Revisions {
                all,
                update: created,
            })
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let owners: Api<K> = Api::namespaced(client.clone(), &namespace);
            let count = collision_count.unwrap_or(0) + 1;
            owners
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"collisionCount": count}})),
                )
                .await
                .with_context(|| format!("raising collisionCount of {kind} {name}"))?;
            anyhow::bail!("controllerrevision {revision_name} exists with another template")
        }
        Err(e) => {
            Err(anyhow::Error::new(e)
                .context(format!("creating controllerrevision {revision_name}")))
        }
    }
}

/// Deletes the oldest revisions beyond `limit` whose name is not in `live`.
pub async fn prune_revisions(
    client: &kube::Client,
    namespace: &str,
    revisions: &[ControllerRevision],
    live: &HashSet<String>,
    limit: i32,
) {
    let old: Vec<&ControllerRevision> = revisions
        .iter()
        .filter(|r| !live.contains(&r.name_any()))
        .collect();
    let limit = usize::try_from(limit.max(0)).unwrap_or(0);
    if old.len() <= limit {
        return;
    }
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    for revision in &old[..old.len() - limit] {
        if let Err(e) = api
            .delete(&revision.name_any(), &DeleteParams::default())
            .await
        {
            tracing::debug!(revision = %revision.name_any(), error = %e, "could not prune revision");
        }
    }
}

/// The node a pod is meant for: `spec.nodeName`, or (for a daemon pod not yet
/// bound) the `metadata.name` its required node affinity pins it to.
pub fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(node) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(node.clone());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|r| r.key == "metadata.name" && r.operator == "In")
        .and_then(|r| r.values.as_ref()?.first().cloned())
}

/// What the workload helpers read of a pod, so that they serve pods listed from the API
/// and the controller manager's cached ones ([`CachedPod`]) alike.
pub trait PodParts {
    fn pod_meta(&self) -> &ObjectMeta;
    fn pod_status(&self) -> Option<&PodStatus>;
}

impl PodParts for Pod {
    fn pod_meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn pod_status(&self) -> Option<&PodStatus> {
        self.status.as_ref()
    }
}

/// Callers hold pods behind references of every depth (`&&Pod` from filters).
impl<P: PodParts + ?Sized> PodParts for &P {
    fn pod_meta(&self) -> &ObjectMeta {
        (**self).pod_meta()
    }
    fn pod_status(&self) -> Option<&PodStatus> {
        (**self).pod_status()
    }
}

impl PodParts for CachedPod {
    fn pod_meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn pod_status(&self) -> Option<&PodStatus> {
        self.status.as_ref()
    }
}

/// The phase of a pod ("Pending" when unset).
pub fn phase<P: PodParts + ?Sized>(pod: &P) -> &str {
    pod.pod_status()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Running and Ready (what OrderedReady StatefulSets wait for).
pub fn is_running_and_ready<P: PodParts + ?Sized>(pod: &P) -> bool {
    phase(pod) == "Running" && is_ready(pod)
}

/// A reconcile failure, with its context chain (the Controller runtime needs a
/// `std::error::Error`, which `anyhow::Error` is not).
#[derive(Debug, thiserror::Error)]
#[error("{0:#}")]
pub struct ReconcileError(#[from] pub anyhow::Error);

/// Runs one reconcile. A panic inside it fails that reconcile only: it is logged (by the
/// panic hook) and counted, and the controller's error policy retries the object with its
/// backoff while every other object goes on being reconciled.
pub async fn guarded(
    component: &'static str,
    reconcile: impl std::future::Future<
        Output = Result<kube::runtime::controller::Action, ReconcileError>,
    >,
) -> Result<kube::runtime::controller::Action, ReconcileError> {
    match crate::panics::catch(component, reconcile).await {
        Ok(result) => result,
        Err(panic) => Err(ReconcileError(anyhow::anyhow!(
            "the {component} reconcile panicked: {panic}"
        ))),
    }
}

/// Whether `labels` satisfy `selector` (matchLabels and matchExpressions). An empty
/// selector matches nothing here, as workload controllers require a selector.
pub fn selector_matches(
    selector: &LabelSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let match_labels = selector.match_labels.as_ref();
    let expressions = selector.match_expressions.as_ref();
    if match_labels.is_none_or(|m| m.is_empty()) && expressions.is_none_or(|e| e.is_empty()) {
        return false;
    }
    if let Some(m) = match_labels
        && m.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    for req in expressions.into_iter().flatten() {
        let value = labels.get(&req.key);
        let values = req.values.as_deref().unwrap_or_default();
        let ok = match req.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// The ownerReference that marks an object as controlled by `owner`.
pub fn controller_ref<K>(owner: &K) -> Option<OwnerReference>
where
    K: kube::Resource<DynamicType = ()>,
{
    let meta = owner.meta();
    Some(OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The controlling ownerReference of an object, if any.
pub fn controller_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// Adopts orphans for one owner during one reconcile, the way kube's
/// `ControllerRefManager` does: before the first adoption it re-reads the owner from
/// the API, and adopts nothing if the owner is gone, was replaced (another uid) or is
/// being deleted. The controller's cached copy of its own object comes from a
/// different watch than the dependents' and can lag behind them: an owner deleted
/// with `propagationPolicy=Orphan` would otherwise take back the dependents the
/// garbage collector had just released, and they would be collected with it.
pub struct Adopter<K> {
    owners: Api<K>,
    namespace: String,
    reference: OwnerReference,
    /// The re-read's verdict, made once per reconcile (kube's `sync.Once`).
    verdict: tokio::sync::OnceCell<Result<(), String>>,
}

impl<K> Adopter<K>
where
    K: kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    /// An adopter for `owner`, which must have a namespace, a name and a uid.
    pub fn new(client: kube::Client, owner: &K) -> anyhow::Result<Adopter<K>> {
        let kind = K::kind(&());
        let namespace = owner
            .meta()
            .namespace
            .clone()
            .with_context(|| format!("{kind} has no namespace"))?;
        let reference =
            controller_ref(owner).with_context(|| format!("{kind} without name or uid"))?;
        Ok(Adopter {
            owners: Api::namespaced(client, &namespace),
            namespace,
            reference,
            verdict: tokio::sync::OnceCell::new(),
        })
    }

    /// Makes the owner the controller of the orphan `dependent` (a pod or a
    /// ReplicaSet), unless the fresh read of the owner forbids it.
    pub async fn adopt<D>(&self, dependents: &Api<D>, dependent: &ObjectMeta) -> anyhow::Result<D>
    where
        D: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    {
        let verdict = self.verdict.get_or_init(|| self.recheck()).await;
        verdict.clone().map_err(anyhow::Error::msg)?;
        let kind = D::kind(&()).to_lowercase();
        let name = dependent.name.clone().unwrap_or_default();
        let mut refs = dependent.owner_references.clone().unwrap_or_default();
        refs.push(self.reference.clone());
        let patch = json!({"metadata": {"ownerReferences": refs, "uid": dependent.uid}});
        let adopted = dependents
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("adopting {kind} {name}"))?;
        tracing::info!(%kind, %name, owner = %self.reference.name, "adopted orphan {kind}");
        Ok(adopted)
    }

    /// Re-reads the owner: adoption may go ahead only if it is still the same object
    /// and not being deleted. The messages are kube's.
    async fn recheck(&self) -> Result<(), String> {
        let kind = &self.reference.kind;
        let name = &self.reference.name;
        let namespace = &self.namespace;
        let fresh = match self.owners.get_opt(name).await {
            Ok(Some(fresh)) => fresh,
            Ok(None) => return Err(format!("original {kind} {namespace}/{name} is gone")),
            Err(e) => {
                return Err(format!(
                    "can't recheck DeletionTimestamp of {kind} {namespace}/{name}: {e}"
                ));
            }
        };
        let meta = fresh.meta();
        if meta.uid.as_deref() != Some(self.reference.uid.as_str()) {
            return Err(format!(
                "original {kind} {namespace}/{name} is gone: got uid {}, wanted {}",
                meta.uid.as_deref().unwrap_or_default(),
                self.reference.uid
            ));
        }
        if let Some(deleted) = &meta.deletion_timestamp {
            return Err(format!(
                "{kind} {namespace}/{name} has just been deleted at {}",
                deleted.0
            ));
        }
        Ok(())
    }
}

/// Seconds since the Unix epoch, now.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// The current time as a k8s `Time`.
pub fn now_time() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(now_secs()).unwrap_or_default(),
    )
}

/// A pod that counts toward a controller's replicas: not terminating, not finished.
pub fn is_active<P: PodParts + ?Sized>(pod: &P) -> bool {
    if pod.pod_meta().deletion_timestamp.is_some() {
        return false;
    }
    let phase = pod.pod_status().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded") | Some("Failed"))
}

/// Seconds since the pod's Ready condition turned True, or None when not ready.
pub fn ready_since<P: PodParts + ?Sized>(pod: &P) -> Option<i64> {
    let condition = pod
        .pod_status()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    if condition.status != "True" {
        return None;
    }
    let since = condition
        .last_transition_time
        .as_ref()
        .map(|t| now_secs() - t.0.as_second())
        .unwrap_or(i64::MAX / 2);
    Some(since.max(0))
}

/// Whether the pod is Ready.
pub fn is_ready<P: PodParts + ?Sized>(pod: &P) -> bool {
    ready_since(pod).is_some()
}

/// Availability of a pod given `minReadySeconds`: `Ok(())` when available,
/// `Err(Some(wait))` when ready but not yet for long enough, `Err(None)` when not ready.
pub fn availability<P: PodParts + ?Sized>(
    pod: &P,
    min_ready_seconds: i32,
) -> Result<(), Option<Duration>> {
    let Some(since) = ready_since(pod) else {
        return Err(None);
    };
    let min = i64::from(min_ready_seconds.max(0));
    if min == 0 || since >= min {
        Ok(())
    } else {
        Err(Some(Duration::from_secs((min - since) as u64)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_match_labels_and_expressions() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["front".into(), "edge".into()]),
            }]),
        };
        assert!(selector_matches(
            &selector,
            Some(&labels(&[("app", "web"), ("tier", "edge")]))
        ));
        assert!(!selector_matches(
            &selector,
            Some(&labels(&[("app", "web")]))
        ));
        assert!(!selector_matches(
            &selector,
            Some(&labels(&[("app", "db"), ("tier", "edge")]))
        ));
        assert!(!selector_matches(
            &LabelSelector::default(),
            Some(&labels(&[("a", "b")]))
        ));
    }

    /// A client whose API answers GET of the owner with `owner` (404 when `None`) and
    /// echoes every PATCH body back as the patched pod; it records each request.
    fn api_with_owner(
        owner: Option<Value>,
    ) -> (kube::Client, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let owner = owner.clone();
            let log = log.clone();
            async move {
                let method = req.method().to_string();
                let path = req.uri().path().to_string();
                let body = req.into_body().collect_bytes().await.unwrap_or_default();
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                log.lock().unwrap().push(format!("{method} {path}"));
                let (status, answer) = match (method.as_str(), owner) {
                    ("GET", Some(owner)) => (200, owner),
                    ("GET", None) => (
                        404,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "NotFound", "code": 404, "message": "not found"}),
                    ),
                    _ => {
                        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
                                             "metadata": {"name": "orphan", "namespace": "ns"}});
                        pod["metadata"]["ownerReferences"] =
                            body["metadata"]["ownerReferences"].clone();
                        (200, pod)
                    }
                };
                http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(answer.to_string().into_bytes()))
            }
        });
        (kube::Client::new(service, "ns"), seen)
    }

    fn replica_set(uid: &str, deleting: bool) -> Value {
        let mut rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                            "metadata": {"name": "web", "namespace": "ns", "uid": uid}});
        if deleting {
            rs["metadata"]["deletionTimestamp"] = json!("2026-12-02T10:00:00Z");
        }
        rs
    }

    fn orphan(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("pod-{name}")),
            ..ObjectMeta::default()
        }
    }

    async fn adopt_two(fresh_owner: Option<Value>) -> (Vec<anyhow::Result<Pod>>, Vec<String>) {
        let (client, seen) = api_with_owner(fresh_owner);
        // The cached copy the reconcile started from: alive, uid "rs-1".
        let cached: k8s_openapi::api::apps::v1::ReplicaSet =
            serde_json::from_value(replica_set("rs-1", false)).unwrap();
        let adopter = Adopter::new(client.clone(), &cached).unwrap();
        let pods: Api<Pod> = Api::namespaced(client, "ns");
        let results = vec![
            adopter.adopt(&pods, &orphan("a")).await,
            adopter.adopt(&pods, &orphan("b")).await,
        ];
        let requests = seen.lock().unwrap().clone();
        (results, requests)
    }

    #[tokio::test]
    async fn adoption_rechecks_the_owner_once_and_then_patches() {
        let (results, requests) = adopt_two(Some(replica_set("rs-1", false))).await;
        assert_eq!(
            requests,
            [
                "GET /apis/apps/v1/namespaces/ns/replicasets/web",
                "PATCH /api/v1/namespaces/ns/pods/a",
                "PATCH /api/v1/namespaces/ns/pods/b",
            ]
        );
        for adopted in results {
            let refs = adopted.unwrap().metadata.owner_references.unwrap();
            assert_eq!(refs.len(), 1);
            assert_eq!(refs[0].uid, "rs-1");
            assert_eq!(refs[0].controller, Some(true));
        }
    }

    #[tokio::test]
    async fn an_owner_being_deleted_adopts_nothing_even_if_the_cache_says_otherwise() {
        let (results, requests) = adopt_two(Some(replica_set("rs-1", true))).await;
        assert_eq!(
            requests,
            ["GET /apis/apps/v1/namespaces/ns/replicasets/web"]
        );
        for result in results {
            let error = result.unwrap_err().to_string();
            assert!(
                error.contains("ReplicaSet ns/web has just been deleted at 2026-12-02T10:00:00Z"),
                "{error}"
            );
        }
    }

    #[tokio::test]
    async fn a_replaced_or_missing_owner_adopts_nothing() {
        let (results, requests) = adopt_two(Some(replica_set("rs-2", false))).await;
        assert_eq!(requests.len(), 1, "{requests:?}");
        let error = results[0].as_ref().unwrap_err().to_string();
        assert!(error.contains("got uid rs-2, wanted rs-1"), "{error}");

        let (results, requests) = adopt_two(None).await;
        assert_eq!(requests.len(), 1, "{requests:?}");
        let error = results[1].as_ref().unwrap_err().to_string();
        assert!(
            error.contains("original ReplicaSet ns/web is gone"),
            "{error}"
        );
    }
}
