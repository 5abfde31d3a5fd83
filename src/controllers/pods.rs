//! The controller manager's one pod watch: a cache of every pod, pruned to what the
//! controllers read, and a stream of changes each controller subscribes to — as
//! kube-controller-manager's shared pod informer. Before it, nine controllers (the
//! replica loops, DaemonSet, StatefulSet, Job, both endpoint controllers, pod GC and
//! taint eviction) each watched and decoded every pod event in full, and several kept
//! their own per-pod maps besides.
//!
//! Owns: the pod watch, its pruning and the mapping from a pod event to the owners it
//! concerns. An API client only; it never touches the store.

use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

/// The shared pod cache and change stream.
pub type PodInformer = crate::informer::Shared<Pod>;

/// Starts the controller manager's pod watch.
pub fn informer(client: &kube::Client) -> PodInformer {
    crate::informer::Shared::spawn(
        Api::all(client.clone()),
        watcher::Config::default(),
        "controller-manager-pods",
        prune,
    )
}

/// Keeps of a cached pod only what the controllers read: metadata without managed
/// fields, `spec.nodeName` and `spec.tolerations` (taint eviction), and the status. The
/// containers, volumes and managed fields of 10,000 cached pods were 250 MB of the
/// server's heap.
fn prune(pod: &mut Pod) {
    crate::informer::drop_managed_fields(pod);
    if let Some(spec) = pod.spec.as_mut() {
        *spec = PodSpec {
            node_name: spec.node_name.take(),
            tolerations: spec.tolerations.take(),
            ..Default::default()
        };
    }
}

/// Whether `pod` (as a change notification delivered it) is still in the cache under the
/// same uid; false once it was deleted (a deletion is delivered as the pod's last state).
pub fn is_current(pods: &PodInformer, pod: &Pod) -> bool {
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

fn owners_of_kind<K: Resource<DynamicType = ()>>(pod: &Arc<Pod>) -> Vec<ObjectRef<K>> {
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

    fn pod_owned_by(api_version: &str, kind: &str, name: &str) -> Arc<Pod> {
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
    fn pruning_keeps_what_controllers_read() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"},
                "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}],
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute"}]},
            "status": {"phase": "Running", "podIP": "10.42.0.5"}
        }))
        .expect("pod");
        prune(&mut pod);
        assert!(pod.metadata.managed_fields.is_none());
        assert_eq!(pod.metadata.labels.as_ref().map(|l| l.len()), Some(1));
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.tolerations.as_ref().map(Vec::len), Some(1));
        assert!(spec.containers.is_empty());
        assert_eq!(
            pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()),
            Some("10.42.0.5")
        );
    }
}
