//! The controller manager's one pod watch: a cache of every pod, pruned to what the
//! controllers read, and a stream of changes each controller subscribes to — as
//! kube-controller-manager's shared pod informer. Before it, nine controllers (the
//! replica loops, DaemonSet, StatefulSet, Job, both endpoint controllers, pod GC and
//! taint eviction) each watched and decoded every pod event in full, and several kept
//! their own per-pod maps besides.
//!
//! Owns: the pod watch, its pruning and the mapping from a pod event to the owners it
//! concerns. An API client only; it never touches the store.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use futures_util::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use serde::{Deserialize, Deserializer};

/// The shared pod cache and change stream.
pub type PodInformer = crate::informer::Shared<CachedPod>;

/// A pod as the controller manager caches it: the metadata (without managed fields), of
/// the spec only what a controller reads of a cached pod (`nodeName`, and `tolerations`
/// for taint eviction), and the status. Decoded straight from the watch: a k8s-openapi
/// `Pod` is over 2 KB of struct before any of its fields is set, most of it the
/// `PodSpec` nobody here reads, and 10,000 of them were 20 MiB of the server's heap.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedPod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<CachedPodSpec>,
    pub status: Option<PodStatus>,
}

/// What [`CachedPod`] keeps of a pod's spec.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodSpec {
    pub node_name: Option<String>,
    /// Shared between pods with the same list (see [`shared_tolerations`]).
    #[serde(default, deserialize_with = "deserialize_tolerations")]
    pub tolerations: Option<Arc<[Toleration]>>,
}

/// How many distinct toleration lists [`shared_tolerations`] keeps for sharing.
const SHARED_TOLERATION_LISTS: usize = 32;

/// `tolerations` as one shared copy per distinct list. Nearly every pod carries the same
/// few lists (admission's `not-ready`/`unreachable` pair, a DaemonSet's set), and a
/// private copy of that pair was about 400 bytes of every cached pod. The first
/// [`SHARED_TOLERATION_LISTS`] distinct lists are kept for the life of the process;
/// rarer ones get their own copy.
pub fn shared_tolerations(tolerations: Vec<Toleration>) -> Arc<[Toleration]> {
    static LISTS: Mutex<Vec<Arc<[Toleration]>>> = Mutex::new(Vec::new());
    let mut lists = LISTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(known) = lists.iter().find(|l| l[..] == tolerations[..]) {
        return known.clone();
    }
    let list: Arc<[Toleration]> = tolerations.into();
    if lists.len() < SHARED_TOLERATION_LISTS {
        lists.push(list.clone());
    }
    list
}

fn deserialize_tolerations<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Arc<[Toleration]>>, D::Error> {
    Ok(Option::<Vec<Toleration>>::deserialize(deserializer)?.map(shared_tolerations))
}

impl Resource for CachedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Pod::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        Pod::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        Pod::version(&())
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        Pod::api_version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Pod::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<Pod> for CachedPod {
    /// What the cache would hold of `pod` (a pod a controller just wrote, for example).
    fn from(pod: Pod) -> CachedPod {
        let mut cached = CachedPod {
            metadata: pod.metadata,
            spec: pod.spec.map(|spec| CachedPodSpec {
                node_name: spec.node_name,
                tolerations: spec.tolerations.map(shared_tolerations),
            }),
            status: pod.status,
        };
        prune(&mut cached);
        cached
    }
}

/// Starts the controller manager's pod watch.
pub fn informer(client: &kube::Client) -> PodInformer {
    crate::informer::Shared::spawn(
        Api::all(client.clone()),
        watcher::Config::default(),
        "controller-manager-pods",
        prune,
    )
}

/// Drops the managed fields, which no controller reads (as `Value` trees they were most
/// of a cached pod's heap).
fn prune(pod: &mut CachedPod) {
    crate::informer::drop_managed_fields(pod);
}

/// Whether `pod` (as a change notification delivered it) is still in the cache under the
/// same uid; false once it was deleted (a deletion is delivered as the pod's last state).
pub fn is_current(pods: &PodInformer, pod: &CachedPod) -> bool {
    pods.store()
        .get(&ObjectRef::from_obj(pod))
        .is_some_and(|cached| cached.metadata.uid == pod.metadata.uid)
}

/// The owners of kind `K` named in the ownerReferences of each changed pod, as kube-rs'
/// `Controller::owns` would trigger them from a watch of its own.
pub fn owner_triggers<K>(pods: &PodInformer) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + 'static,
{
    pods.subscribe()
        .flat_map(|pod| futures_util::stream::iter(owners_of_kind::<K>(&pod)))
}

fn owners_of_kind<K: Resource<DynamicType = ()>>(pod: &Arc<CachedPod>) -> Vec<ObjectRef<K>> {
    let Some(namespace) = pod.metadata.namespace.as_deref() else {
        return Vec::new();
    };
    let api_version = K::api_version(&());
    let kind = K::kind(&());
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|owner| owner.kind == kind && owner.api_version == api_version)
        .map(|owner| ObjectRef::new(&owner.name).within(namespace))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};

    fn pod_owned_by(api_version: &str, kind: &str, name: &str) -> Arc<CachedPod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns", "ownerReferences": [
                    {"apiVersion": api_version, "kind": kind, "name": name, "uid": "u",
                     "controller": true}]},
            }))
            .expect("pod"),
        )
    }

    #[test]
    fn a_pod_triggers_only_owners_of_the_asked_kind_and_group() {
        let pod = pod_owned_by("apps/v1", "DaemonSet", "ds");
        let owners = owners_of_kind::<DaemonSet>(&pod);
        assert_eq!(owners, vec![ObjectRef::new("ds").within("ns")]);
        assert!(owners_of_kind::<StatefulSet>(&pod).is_empty());
        let foreign = pod_owned_by("example.com/v1", "DaemonSet", "ds");
        assert!(owners_of_kind::<DaemonSet>(&foreign).is_empty());
    }

    #[test]
    fn the_cache_keeps_what_controllers_read() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"},
                "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}],
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute"}]},
            "status": {"phase": "Running", "podIP": "10.42.0.5"}
        });
        let mut decoded: CachedPod = serde_json::from_value(json.clone()).expect("pod");
        prune(&mut decoded);
        let full: Pod = serde_json::from_value(json).expect("pod");
        // Decoded from the watch or converted from a pod a controller wrote: the same.
        assert_eq!(CachedPod::from(full), decoded);
        assert!(decoded.metadata.managed_fields.is_none());
        assert_eq!(decoded.metadata.labels.as_ref().map(|l| l.len()), Some(1));
        let spec = decoded.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.tolerations.as_ref().map(|t| t.len()), Some(1));
        assert_eq!(
            decoded.status.as_ref().and_then(|s| s.pod_ip.as_deref()),
            Some("10.42.0.5")
        );
        // Pods with the same tolerations share one copy.
        let twin: CachedPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "q", "namespace": "ns"},
            "spec": {"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute"}]}
        }))
        .expect("pod");
        let (ours, theirs) = (
            spec.tolerations.as_ref(),
            twin.spec.as_ref().and_then(|s| s.tolerations.as_ref()),
        );
        assert!(ours.zip(theirs).is_some_and(|(a, b)| Arc::ptr_eq(a, b)));
        assert!(
            std::mem::size_of::<CachedPod>() * 2 < std::mem::size_of::<Pod>(),
            "a cached pod is {} bytes of struct, a Pod {}",
            std::mem::size_of::<CachedPod>(),
            std::mem::size_of::<Pod>()
        );
    }
}
