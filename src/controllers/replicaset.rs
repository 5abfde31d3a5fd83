//! ReplicaSet controller: keeps `spec.replicas` active Pods for every ReplicaSet.
//! The same loop, generic over [`ReplicatedPods`], runs ReplicationControllers
//! (`replicationcontroller.rs` only supplies the kind's accessors).
//!
//! Pods are created from `spec.template` with generateName `<rs>-` and a controlling
//! ownerReference (`controller: true`, `blockOwnerDeletion: true`); surplus pods are
//! deleted, not-ready / pending / newer ones first (kube's `ActivePods` ranking in a
//! simplified form). Orphan pods matching the selector are adopted, owned pods that
//! stopped matching are released. Status carries replicas, fullyLabeledReplicas,
//! readyReplicas, availableReplicas (minReadySeconds) and observedGeneration, written
//! through `/status`. `SuccessfulCreate` / `SuccessfulDelete` events are recorded.
//!
//! Pods are read from the controller manager's shared pod cache ([`super::pods`], one
//! watch for every controller that follows pods), never listed per reconcile: a
//! 5,000-pod ReplicaSet is reconciled on every pod event, and a LIST of 5,000 pods
//! each time was what made creating them slow. Creates and deletes are remembered as
//! "expectations" until the cache shows them, so a cache that lags behind our own
//! writes never makes us create or delete twice (kube's `ControllerExpectations`).
//! Talks only to the API (kube-rs), never to the store.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::Mutex;

use super::RETRY;
use super::events::{EventType, Recorder, reference};
use super::pods::CachedPod;
use super::workload::{
    Adopter, ReconcileError, ReplicaCounts, ReplicatedPods, availability, controller_of,
    controller_ref, is_active, is_ready, ready_since, selector_matches,
};

impl ReplicatedPods for ReplicaSet {
    const COMPONENT: &'static str = "replicaset-controller";

    fn pod_selector(&self) -> LabelSelector {
        self.spec
            .as_ref()
            .map(|s| s.selector.clone())
            .unwrap_or_default()
    }

    fn desired_replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }

    fn pod_template(&self) -> Option<PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.template.clone())
    }

    fn counts(&self) -> ReplicaCounts {
        let status = self.status.clone().unwrap_or_default();
        ReplicaCounts {
            replicas: status.replicas,
            fully_labeled: status.fully_labeled_replicas.unwrap_or(0),
            ready: status.ready_replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
            observed_generation: status.observed_generation,
        }
    }
}

/// At most this many pods are created or deleted in one reconcile (kube's burstReplicas).
const BURST: usize = 500;
/// Pending expectations older than this are forgotten (a lost watch event must not
/// stall the ReplicaSet forever).
const EXPECTATION_TTL: Duration = Duration::from_secs(30);

/// Creates and deletes issued for one ReplicaSet and not yet seen in a pod list.
#[derive(Default)]
struct Expectation {
    creates: HashSet<String>,
    deletes: HashSet<String>,
    since: Option<Instant>,
}

/// The shared pod cache the replica loops read.
pub type PodInformer = super::pods::PodInformer;

struct Context {
    client: kube::Client,
    recorder: Recorder,
    pods: PodInformer,
    /// Keyed by ReplicaSet uid.
    expectations: Mutex<HashMap<String, Expectation>>,
}

/// Runs the ReplicaSet controller until the process ends, reading pods from `pods`.
pub async fn run(client: kube::Client, pods: PodInformer) {
    run_for::<ReplicaSet>(client, pods).await;
}

/// Runs the replica loop for one kind (ReplicaSet or ReplicationController).
pub(crate) async fn run_for<K: ReplicatedPods>(client: kube::Client, pods: PodInformer) {
    let owners: Api<K> = Api::all(client.clone());
    // Reconciling before the cache holds every pod would create them all again.
    pods.wait_until_ready().await;
    let controller = Controller::new(owners, watcher::Config::default());
    let store = controller.store();
    let triggers = pods
        .subscribe()
        .flat_map(move |pod| futures_util::stream::iter(owners_for(&store, &pod)));
    let context = Arc::new(Context {
        recorder: Recorder::new(client.clone(), K::COMPONENT),
        client,
        pods,
        expectations: Mutex::default(),
    });
    controller
        .reconcile_on(triggers)
        .run(
            |owner, ctx| super::workload::guarded(K::COMPONENT, reconcile::<K>(owner, ctx)),
            error_policy::<K>,
            context,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, kind = K::COMPONENT, "reconcile failed");
            }
        })
        .await;
}

/// The owners a pod event concerns: its controller, or (for an orphan) every
/// owner of kind `K` in its namespace whose selector matches it.
fn owners_for<K: ReplicatedPods>(store: &Store<K>, pod: &CachedPod) -> Vec<ObjectRef<K>> {
    let Some(namespace) = pod.metadata.namespace.as_deref() else {
        return Vec::new();
    };
    if let Some(owner) = controller_of(&pod.metadata) {
        let group = owner.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        if owner.kind == K::kind(&()) && group == K::group(&()) {
            return vec![ObjectRef::new(&owner.name).within(namespace)];
        }
        return Vec::new();
    }
    store
        .state()
        .iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
        .filter(|o| selector_matches(&o.pod_selector(), pod.metadata.labels.as_ref()))
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

fn error_policy<K: ReplicatedPods>(
    owner: Arc<K>,
    error: &ReconcileError,
    _: Arc<Context>,
) -> Action {
    tracing::warn!(kind = %K::kind(&()), name = %owner.name_any(), namespace = ?owner.namespace(), error = %error, "replica sync failed; retrying");
    Action::requeue(RETRY)
}

/// Ordering of pods for deletion: the first ones are deleted first. Unassigned before
/// assigned, Pending before Unknown before Running, not ready before ready, ready for
/// less time before longer, more restarts first, newer before older.
type DeletionRank = (bool, u8, bool, i64, Reverse<i32>, Reverse<i64>);

fn deletion_rank(pod: &CachedPod) -> DeletionRank {
    let assigned = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let phase = match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => 0,
        Some("Running") => 2,
        _ => 1,
    };
    let ready_for = ready_since(pod);
    let restarts = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0))
        .unwrap_or(0);
    let created = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or(0);
    (
        assigned,
        phase,
        ready_for.is_some(),
        ready_for.unwrap_or(0),
        Reverse(restarts),
        Reverse(created),
    )
}

/// Chooses which `count` pods to delete.
fn pods_to_delete(pods: &[&CachedPod], count: usize) -> Vec<String> {
    let mut ranked: Vec<&&CachedPod> = pods.iter().collect();
    ranked.sort_by_key(|p| deletion_rank(p));
    ranked
        .into_iter()
        .take(count)
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// Whether pod labels include every label of the template (fullyLabeledReplicas).
fn fully_labeled(template: Option<&PodTemplateSpec>, pod: &CachedPod) -> bool {
    let template_labels = template
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref());
    let Some(template_labels) = template_labels else {
        return true;
    };
    let labels = pod.metadata.labels.as_ref();
    template_labels
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

async fn reconcile<K: ReplicatedPods>(
    rs: Arc<K>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let kind = K::kind(&());
    let namespace = rs.namespace().context("object has no namespace")?;
    let name = rs.name_any();
    crate::panics::test_hook("reconcile", &name);
    let uid = rs.uid().context("object has no uid")?;
    let selector = rs.pod_selector();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let listed: Vec<Arc<CachedPod>> = ctx
        .pods
        .store()
        .state()
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .collect();
    let terminating = rs.meta().deletion_timestamp.is_some();

    // Claim: keep matching owned pods, release non-matching ones, adopt orphans.
    let adopter = Adopter::new(ctx.client.clone(), rs.as_ref())?;
    let mut owned: Vec<Arc<CachedPod>> = Vec::new();
    for pod in listed {
        let matches = selector_matches(&selector, pod.metadata.labels.as_ref());
        match controller_of(&pod.metadata) {
            Some(owner) if owner.uid == uid => {
                if matches {
                    owned.push(pod);
                } else if let Err(e) = release(&pods_api, &pod, &uid).await {
                    tracing::warn!(pod = %pod.name_any(), error = %e, "could not release pod");
                }
            }
            Some(_) => {}
            None => {
                if matches && !terminating && pod.metadata.deletion_timestamp.is_none() {
                    match adopter.adopt::<Pod>(&pods_api, &pod.metadata).await {
                        Ok(adopted) => owned.push(Arc::new(CachedPod::from(adopted))),
                        Err(e) => {
                            tracing::debug!(pod = %pod.name_any(), error = %e, "could not adopt pod")
                        }
                    }
                }
            }
        }
    }
    let active: Vec<&CachedPod> = owned.iter().map(|p| p.as_ref()).filter(is_active).collect();

    // Expectations: wait until our own earlier writes are visible.
    let satisfied = {
        let mut expectations = ctx.expectations.lock().await;
        let entry = expectations.entry(uid.clone()).or_default();
        let present: HashSet<&str> = owned
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        let live: HashSet<&str> = active
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        entry.creates.retain(|n| !present.contains(n.as_str()));
        entry.deletes.retain(|n| live.contains(n.as_str()));
        let expired = entry.since.is_some_and(|t| t.elapsed() > EXPECTATION_TTL);
        if expired || (entry.creates.is_empty() && entry.deletes.is_empty()) {
            expectations.remove(&uid);
            true
        } else {
            false
        }
    };

    let desired = usize::try_from(rs.desired_replicas().max(0)).unwrap_or(0);
    if satisfied && !terminating {
        if active.len() < desired {
            let count = (desired - active.len()).min(BURST);
            create_pods(&ctx, rs.as_ref(), &pods_api, count).await?;
        } else if active.len() > desired {
            let count = (active.len() - desired).min(BURST);
            let victims = pods_to_delete(&active, count);
            delete_pods(&ctx, rs.as_ref(), &pods_api, victims).await?;
        }
    }

    // Status, from the pods as listed.
    let min_ready = rs.min_ready_seconds();
    let mut ready = 0;
    let mut available = 0;
    let mut next_check: Option<Duration> = None;
    for pod in &active {
        if is_ready(pod) {
            ready += 1;
        }
        match availability(pod, min_ready) {
            Ok(()) => available += 1,
            Err(Some(wait)) => {
                next_check = Some(next_check.map_or(wait, |n| n.min(wait)));
            }
            Err(None) => {}
        }
    }
    let template = rs.pod_template();
    let fully = active
        .iter()
        .filter(|p| fully_labeled(template.as_ref(), p))
        .count();
    let current = rs.counts();
    let status = json!({
        "replicas": active.len(),
        "fullyLabeledReplicas": fully,
        "readyReplicas": ready,
        "availableReplicas": available,
        "observedGeneration": rs.meta().generation.unwrap_or(0),
    });
    let unchanged = current.replicas as usize == active.len()
        && current.fully_labeled as usize == fully
        && current.ready == ready
        && current.available == available
        && current.observed_generation == rs.meta().generation;
    if !unchanged {
        let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
        match api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Action::await_change()),
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("writing status of {kind} {namespace}/{name}"))
                    .into());
            }
        }
    }
    if !satisfied {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    Ok(match next_check {
        Some(wait) => Action::requeue(wait + Duration::from_millis(100)),
        None => Action::await_change(),
    })
}

/// Records an event in the background: with thousands of pods, waiting for each
/// Event write would throttle pod creation.
fn emit(
    ctx: &Context,
    object: &ObjectReference,
    kind: EventType,
    reason: &'static str,
    message: String,
) {
    let recorder = ctx.recorder.clone();
    let object = object.clone();
    tokio::spawn(async move { recorder.record(&object, kind, reason, &message).await });
}

/// Creates `count` pods from the template, in doubling batches (1, 2, 4, ...) so a
/// failing create (quota, admission) fails fast instead of `count` times.
async fn create_pods<K: ReplicatedPods>(
    ctx: &Context,
    rs: &K,
    pods_api: &Api<Pod>,
    count: usize,
) -> anyhow::Result<()> {
    let name = rs.name_any();
    let uid = rs.uid().unwrap_or_default();
    let owner = controller_ref(rs).context("owner without name or uid")?;
    let template = rs
        .pod_template()
        .with_context(|| format!("{} {name} has no pod template", K::kind(&())))?;
    let template_meta = template.metadata.unwrap_or_default();
    let pod = Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: rs.namespace(),
            labels: template_meta.labels,
            annotations: template_meta.annotations,
            finalizers: template_meta.finalizers,
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    };
    let object = reference(rs);
    let mut remaining = count;
    let mut batch = 1usize;
    while remaining > 0 {
        let size = batch.min(remaining);
        let params = PostParams::default();
        let results: Vec<kube::Result<Pod>> = futures_util::stream::iter(0..size)
            .map(|_| pods_api.create(&params, &pod))
            .buffer_unordered(32)
            .collect()
            .await;
        let mut failure = None;
        for result in results {
            match result {
                Ok(created) => {
                    let pod_name = created.name_any();
                    {
                        let mut expectations = ctx.expectations.lock().await;
                        let entry = expectations.entry(uid.clone()).or_default();
                        entry.creates.insert(pod_name.clone());
                        entry.since = Some(Instant::now());
                    }
                    emit(
                        ctx,
                        &object,
                        EventType::Normal,
                        "SuccessfulCreate",
                        format!("Created pod: {pod_name}"),
                    );
                }
                Err(e) => failure = Some(e),
            }
        }
        if let Some(e) = failure {
            emit(
                ctx,
                &object,
                EventType::Warning,
                "FailedCreate",
                format!("Error creating: {e}"),
            );
            return Err(
                anyhow::Error::new(e).context(format!("creating pods for {} {name}", K::kind(&())))
            );
        }
        remaining -= size;
        batch *= 2;
    }
    tracing::debug!(owner = %name, count, "created pods");
    Ok(())
}

async fn delete_pods<K: ReplicatedPods>(
    ctx: &Context,
    rs: &K,
    pods_api: &Api<Pod>,
    victims: Vec<String>,
) -> anyhow::Result<()> {
    let name = rs.name_any();
    let uid = rs.uid().unwrap_or_default();
    let object = reference(rs);
    {
        let mut expectations = ctx.expectations.lock().await;
        let entry = expectations.entry(uid.clone()).or_default();
        entry.deletes.extend(victims.iter().cloned());
        entry.since = Some(Instant::now());
    }
    let results: Vec<(String, kube::Result<()>)> = futures_util::stream::iter(victims)
        .map(|pod| async move {
            let params = DeleteParams::default();
            let result = pods_api.delete(&pod, &params).await.map(|_| ());
            (pod, result)
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let mut failure = None;
    for (pod, result) in results {
        match result {
            Ok(_) => {
                emit(
                    ctx,
                    &object,
                    EventType::Normal,
                    "SuccessfulDelete",
                    format!("Deleted pod: {pod}"),
                );
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                emit(
                    ctx,
                    &object,
                    EventType::Warning,
                    "FailedDelete",
                    format!("Error deleting: {e}"),
                );
                failure = Some(
                    anyhow::Error::new(e)
                        .context(format!("deleting pod {pod} of {} {name}", K::kind(&()))),
                );
            }
        }
    }
    match failure {
        Some(e) => {
            ctx.expectations.lock().await.remove(&uid);
            Err(e)
        }
        None => Ok(()),
    }
}

/// Drops the ownerReference of `uid` from a pod that no longer matches.
async fn release(pods_api: &Api<Pod>, pod: &CachedPod, uid: &str) -> anyhow::Result<()> {
    let refs: Vec<_> = pod
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.uid != uid)
        .collect();
    let patch = json!({"metadata": {"ownerReferences": refs, "uid": pod.metadata.uid}});
    pods_api
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .with_context(|| format!("releasing pod {}", pod.name_any()))?;
    tracing::info!(pod = %pod.name_any(), "released pod that no longer matches its owner's selector");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::pods::CachedPodSpec;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(name: &str, created: i64, node: Option<&str>, phase: &str, ready: bool) -> CachedPod {
        CachedPod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(
                    k8s_openapi::jiff::Timestamp::from_second(created).unwrap_or_default(),
                )),
                ..Default::default()
            },
            spec: Some(CachedPodSpec {
                node_name: node.map(String::from),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn deletes_unassigned_pending_notready_newer_first() {
        let running_ready_old = pod("a", 100, Some("n1"), "Running", true);
        let running_notready = pod("b", 100, Some("n1"), "Running", false);
        let pending_assigned = pod("c", 100, Some("n1"), "Pending", false);
        let unassigned_old = pod("d", 100, None, "Pending", false);
        let unassigned_new = pod("e", 200, None, "Pending", false);
        let all = vec![
            &running_ready_old,
            &running_notready,
            &pending_assigned,
            &unassigned_old,
            &unassigned_new,
        ];
        assert_eq!(pods_to_delete(&all, 5), vec!["e", "d", "c", "b", "a"]);
        assert_eq!(pods_to_delete(&all, 1), vec!["e"]);
    }
}
