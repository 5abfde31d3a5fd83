//! StatefulSet controller: pods with stable identities `<sts>-<ordinal>`.
//!
//! Each pod gets the labels `statefulset.kubernetes.io/pod-name`,
//! `apps.kubernetes.io/pod-index` and `controller-revision-hash` (the revision's
//! name), `hostname` = its name and `subdomain` = `serviceName`, and a
//! PersistentVolumeClaim `<template>-<sts>-<ordinal>` per `volumeClaimTemplates`
//! entry (created before the pod, never deleted here unless the retention policy's
//! `whenDeleted: Delete` made the StatefulSet their owner).
//!
//! OrderedReady (kube's "monotonic" mode) creates ordinals in order, each waiting for
//! the previous pod to be Running and Ready, and removes surplus ordinals from the
//! highest down, one at a time; Parallel creates and deletes without waiting.
//! Templates are recorded as ControllerRevisions; status.currentRevision and
//! updateRevision name them. RollingUpdate deletes, from the highest ordinal down to
//! `partition`, one pod at a time that is not at the update revision (waiting for the
//! recreated pod to be healthy); ordinals below the partition are (re)created at the
//! current revision. OnDelete recreates deleted pods at the update revision. Status
//! (replicas, ready/available/current/updatedReplicas, revisions, observedGeneration)
//! is what `kubectl rollout status sts/x` reads. Events are worded as kube's
//! ("create Pod web-0 in StatefulSet web successful"). Talks only to the API.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::json;

use super::RETRY;
use super::events::{EventType, Recorder, reference};
use super::workload::{
    Adopter, REVISION_HASH_LABEL, ReconcileError, availability, controller_of, controller_ref,
    is_ready, is_running_and_ready, phase, prune_revisions, revision_template, selector_matches,
    sync_revisions,
};

/// Label with the pod's own name (a per-pod Service selector).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// Label with the pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

struct Context {
    client: kube::Client,
    recorder: Recorder,
}

/// Runs the StatefulSet controller until the process ends.
pub async fn run(client: kube::Client, pods: super::pods::PodInformer) {
    let sets: Api<StatefulSet> = Api::all(client.clone());
    let context = Arc::new(Context {
        recorder: Recorder::new(client.clone(), "statefulset-controller"),
        client: client.clone(),
    });
    Controller::new(sets, watcher::Config::default())
        .reconcile_on(super::pods::owner_triggers::<StatefulSet>(&pods))
        .run(
            |set, ctx| super::workload::guarded("statefulset", reconcile(set, ctx)),
            error_policy,
            context,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "statefulset reconcile failed");
            }
        })
        .await;
}

fn error_policy(set: Arc<StatefulSet>, error: &ReconcileError, _: Arc<Context>) -> Action {
    tracing::warn!(statefulset = %set.name_any(), namespace = ?set.namespace(), error = %error, "statefulset sync failed; retrying");
    Action::requeue(RETRY)
}

// ---------------------------------------------------------------------------------
// Pure helpers.

/// The ordinal of a pod of `set_name` (`<set>-<n>`), if its name has that shape.
pub fn ordinal_of(set_name: &str, pod_name: &str) -> Option<i32> {
    let rest = pod_name.strip_prefix(set_name)?.strip_prefix('-')?;
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if rest.len() > 1 && rest.starts_with('0') {
        return None;
    }
    rest.parse().ok()
}

/// The claim name for volume claim template `template` of pod `<set>-<ordinal>`.
pub fn claim_name(template: &str, set_name: &str, ordinal: i32) -> String {
    format!("{template}-{set_name}-{ordinal}")
}

fn revision_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(REVISION_HASH_LABEL)
        .map(String::as_str)
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn is_finished(pod: &Pod) -> bool {
    matches!(phase(pod), "Failed" | "Succeeded")
}

/// Healthy for the rolling update: Running, Ready and not terminating.
fn is_healthy(pod: &Pod) -> bool {
    is_running_and_ready(pod) && !is_terminating(pod)
}

/// The pod for `ordinal` from `template` at `revision`.
fn new_pod(
    set: &StatefulSet,
    template: &PodTemplateSpec,
    revision: &str,
    ordinal: i32,
) -> anyhow::Result<Pod> {
    let set_name = set.name_any();
    let pod_name = format!("{set_name}-{ordinal}");
    let spec_of_set = set.spec.clone().unwrap_or_default();
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(REVISION_HASH_LABEL.into(), revision.to_string());
    labels.insert(POD_NAME_LABEL.into(), pod_name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(pod_name.clone());
    if !spec_of_set.service_name.as_deref().unwrap_or("").is_empty() {
        spec.subdomain = spec_of_set.service_name.clone();
    }
    for claim in spec_of_set.volume_claim_templates.iter().flatten() {
        let volume_name = claim.metadata.name.clone().unwrap_or_default();
        let volume = Volume {
            name: volume_name.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(&volume_name, &set_name, ordinal),
                read_only: None,
            }),
            ..Default::default()
        };
        let volumes = spec.volumes.get_or_insert_with(Vec::new);
        volumes.retain(|v| v.name != volume_name);
        volumes.push(volume);
    }
    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(pod_name),
            namespace: set.namespace(),
            labels: Some(labels),
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![
                controller_ref(set).context("statefulset without name or uid")?,
            ]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// The claims pod `ordinal` needs: template labels plus the set's matchLabels.
fn claims_for(set: &StatefulSet, ordinal: i32) -> Vec<PersistentVolumeClaim> {
    let set_name = set.name_any();
    let spec = set.spec.clone().unwrap_or_default();
    let delete_with_set = spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .and_then(|p| p.when_deleted.as_deref())
        == Some("Delete");
    let owner = controller_ref(set).map(|r| OwnerReference {
        controller: None,
        ..r
    });
    spec.volume_claim_templates
        .iter()
        .flatten()
        .map(|template| {
            let mut claim = template.clone();
            let template_name = template.metadata.name.clone().unwrap_or_default();
            let mut labels = template.metadata.labels.clone().unwrap_or_default();
            labels.extend(spec.selector.match_labels.clone().unwrap_or_default());
            claim.metadata = ObjectMeta {
                name: Some(claim_name(&template_name, &set_name, ordinal)),
                namespace: set.namespace(),
                labels: Some(labels),
                annotations: template.metadata.annotations.clone(),
                owner_references: if delete_with_set {
                    owner.clone().map(|o| vec![o])
                } else {
                    None
                },
                ..Default::default()
            };
            claim.status = None;
            claim
        })
        .collect()
}

/// What one sync decided to do (kube's `updateStatefulSet`, one step at a time in
/// OrderedReady mode).
#[derive(Debug, Default, PartialEq)]
struct Plan {
    /// Ordinals to create, each with "at update revision" (else current).
    create: Vec<(i32, bool)>,
    /// Pod names to delete.
    delete: Vec<String>,
}

struct Inputs<'a> {
    replicas: i32,
    start: i32,
    ordered: bool,
    rolling_partition: Option<i32>,
    update_revision: &'a str,
    /// Pods by ordinal.
    pods: &'a BTreeMap<i32, &'a Pod>,
}

fn plan(input: &Inputs<'_>) -> Plan {
    let mut plan = Plan::default();
    let end = input.start + input.replicas;
    let in_range = |o: i32| o >= input.start && o < end;
    // 1. Replicas: replace finished pods, create missing ones.
    for ordinal in input.start..end {
        match input.pods.get(&ordinal) {
            Some(pod) if is_finished(pod) && !is_terminating(pod) => {
                plan.delete.push(pod.name_any());
                if input.ordered {
                    return plan;
                }
            }
            Some(pod) => {
                if input.ordered && (is_terminating(pod) || !is_running_and_ready(pod)) {
                    return plan;
                }
            }
            None => {
                let at_update = input
                    .rolling_partition
                    .is_none_or(|partition| ordinal >= input.start + partition);
                plan.create.push((ordinal, at_update));
                if input.ordered {
                    return plan;
                }
            }
        }
    }
    // 2. Condemned pods, highest ordinal first.
    let condemned: Vec<&&Pod> = input
        .pods
        .iter()
        .rev()
        .filter(|(o, _)| !in_range(**o))
        .map(|(_, p)| p)
        .collect();
    for pod in condemned {
        if is_terminating(pod) {
            if input.ordered {
                return plan;
            }
            continue;
        }
        plan.delete.push(pod.name_any());
        if input.ordered {
            return plan;
        }
    }
    // 3. Rolling update, highest ordinal down to the partition.
    if let Some(partition) = input.rolling_partition {
        if (input.start..end).any(|o| input.pods.get(&o).is_none_or(|p| !is_healthy(p))) {
            return plan;
        }
        let floor = input.start + partition.max(0);
        for ordinal in (floor..end).rev() {
            let Some(pod) = input.pods.get(&ordinal) else {
                return plan;
            };
            if revision_of(pod) != Some(input.update_revision) {
                plan.delete.push(pod.name_any());
                return plan;
            }
        }
    }
    plan
}

// ---------------------------------------------------------------------------------
// Reconcile.

async fn reconcile(set: Arc<StatefulSet>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    Ok(sync(&set, &ctx).await?)
}

async fn sync(set: &StatefulSet, ctx: &Context) -> anyhow::Result<Action> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = set.namespace().context("statefulset has no namespace")?;
    let name = set.name_any();
    let uid = set.uid().context("statefulset has no uid")?;
    let spec = set.spec.clone().unwrap_or_default();
    let status = set.status.clone().unwrap_or_default();

    let revisions =
        sync_revisions(&ctx.client, set, &spec.template, status.collision_count).await?;
    let update_revision = revisions.update.name_any();
    let current = status
        .current_revision
        .as_ref()
        .and_then(|c| revisions.all.iter().find(|r| &r.name_any() == c))
        .unwrap_or(&revisions.update);
    let current_revision = current.name_any();
    let current_template = revision_template(current).unwrap_or_else(|| spec.template.clone());

    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let listed = pods_api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing pods in {namespace} for statefulset {name}"))?
        .items;
    let adopter = Adopter::new(ctx.client.clone(), set)?;
    let mut owned: Vec<Pod> = Vec::new();
    for pod in listed {
        let ours = ordinal_of(&name, &pod.name_any()).is_some();
        match controller_of(&pod.metadata) {
            Some(owner) if owner.uid == uid => owned.push(pod),
            Some(_) => {}
            None if ours
                && !is_terminating(&pod)
                && selector_matches(&spec.selector, pod.metadata.labels.as_ref()) =>
            {
                match adopter.adopt(&pods_api, &pod.metadata).await {
                    Ok(adopted) => owned.push(adopted),
                    Err(e) => {
                        tracing::debug!(pod = %pod.name_any(), error = %e, "could not adopt pod")
                    }
                }
            }
            None => {}
        }
    }
    let by_ordinal: BTreeMap<i32, &Pod> = owned
        .iter()
        .filter_map(|p| Some((ordinal_of(&name, &p.name_any())?, p)))
        .collect();

    let live: HashSet<String> = owned
        .iter()
        .filter_map(|p| revision_of(p).map(String::from))
        .chain([current_revision.clone(), update_revision.clone()])
        .collect();
    prune_revisions(
        &ctx.client,
        &namespace,
        &revisions.all,
        &live,
        spec.revision_history_limit.unwrap_or(10),
    )
    .await;

    let replicas = spec.replicas.unwrap_or(1).max(0);
    let start = spec
        .ordinals
        .as_ref()
        .and_then(|o| o.start)
        .unwrap_or(0)
        .max(0);
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let rolling_partition = match strategy.type_.as_deref() {
        Some("OnDelete") => None,
        _ => Some(
            strategy
                .rolling_update
                .as_ref()
                .and_then(|r| r.partition)
                .unwrap_or(0),
        ),
    };
    let decided = plan(&Inputs {
        replicas,
        start,
        ordered: spec.pod_management_policy.as_deref() != Some("Parallel"),
        rolling_partition,
        update_revision: &update_revision,
        pods: &by_ordinal,
    });

    // Status from the pods as listed.
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let (mut count, mut ready, mut available, mut at_current, mut at_update) = (0, 0, 0, 0, 0);
    for pod in owned.iter().filter(|p| !is_finished(p)) {
        count += 1;
        if is_ready(pod) {
            ready += 1;
            if availability(pod, min_ready).is_ok() {
                available += 1;
            }
        }
        if !is_terminating(pod) {
            if revision_of(pod) == Some(current_revision.as_str()) {
                at_current += 1;
            }
            if revision_of(pod) == Some(update_revision.as_str()) {
                at_update += 1;
            }
        }
    }
    let (mut new_current, mut new_current_count) = (current_revision.clone(), at_current);
    // kube's completeRollingUpdate: every pod updated and ready.
    if rolling_partition.is_some() && at_update == count && ready == count {
        new_current = update_revision.clone();
        new_current_count = at_update;
    }
    let new_status = json!({
        "observedGeneration": set.metadata.generation.unwrap_or(0),
        "replicas": count,
        "readyReplicas": ready,
        "availableReplicas": available,
        "currentReplicas": new_current_count,
        "updatedReplicas": at_update,
        "currentRevision": new_current,
        "updateRevision": update_revision,
        "collisionCount": status.collision_count.unwrap_or(0),
    });
    let unchanged = status.observed_generation == set.metadata.generation
        && status.replicas == count
        && status.ready_replicas.unwrap_or(0) == ready
        && status.available_replicas.unwrap_or(0) == available
        && status.current_replicas.unwrap_or(0) == new_current_count
        && status.updated_replicas.unwrap_or(0) == at_update
        && status.current_revision.as_deref() == Some(new_current.as_str())
        && status.update_revision.as_deref() == Some(update_revision.as_str());
    if !unchanged {
        let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &namespace);
        match api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": new_status})),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Action::await_change()),
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("writing status of statefulset {namespace}/{name}")));
            }
        }
    }

    let object = reference(set);
    let acted = !decided.create.is_empty() || !decided.delete.is_empty();
    for pod in decided.delete {
        match pods_api.delete(&pod, &DeleteParams::default()).await {
            Ok(_) => {
                ctx.recorder
                    .record(
                        &object,
                        EventType::Normal,
                        "SuccessfulDelete",
                        &format!("delete Pod {pod} in StatefulSet {name} successful"),
                    )
                    .await
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                ctx.recorder
                    .record(
                        &object,
                        EventType::Warning,
                        "FailedDelete",
                        &format!("delete Pod {pod} in StatefulSet {name} failed error: {e}"),
                    )
                    .await;
                return Err(anyhow::Error::new(e)
                    .context(format!("deleting pod {pod} of statefulset {name}")));
            }
        }
    }
    for (ordinal, at_update) in decided.create {
        let (template, revision) = if at_update {
            (&spec.template, &update_revision)
        } else {
            (&current_template, &current_revision)
        };
        let pod = new_pod(set, template, revision, ordinal)?;
        let pod_name = pod.name_any();
        create_claims(ctx, set, &namespace, ordinal, &pod_name).await?;
        match pods_api.create(&PostParams::default(), &pod).await {
            Ok(_) => {
                ctx.recorder
                    .record(
                        &object,
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("create Pod {pod_name} in StatefulSet {name} successful"),
                    )
                    .await
            }
            // The old pod of this ordinal is still terminating: wait for it.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                ctx.recorder
                    .record(
                        &object,
                        EventType::Warning,
                        "FailedCreate",
                        &format!("create Pod {pod_name} in StatefulSet {name} failed error: {e}"),
                    )
                    .await;
                return Err(anyhow::Error::new(e)
                    .context(format!("creating pod {pod_name} of statefulset {name}")));
            }
        }
    }
    if acted {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let wait = owned
        .iter()
        .filter_map(|p| availability(p, min_ready).err().flatten())
        .min();
    Ok(match wait {
        Some(wait) => Action::requeue(wait + Duration::from_millis(100)),
        None => Action::await_change(),
    })
}

/// Creates the claims of pod `ordinal` that do not exist yet.
async fn create_claims(
    ctx: &Context,
    set: &StatefulSet,
    namespace: &str,
    ordinal: i32,
    pod_name: &str,
) -> anyhow::Result<()> {
    let claims = claims_for(set, ordinal);
    if claims.is_empty() {
        return Ok(());
    }
    let name = set.name_any();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), namespace);
    let object = reference(set);
    for claim in claims {
        let claim_name = claim.name_any();
        match api.get_opt(&claim_name).await {
            Ok(Some(_)) => continue,
            Ok(None) => {}
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!("reading claim {claim_name}")));
            }
        }
        let created = match api.create(&PostParams::default(), &claim).await {
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            other => other.map(|_| ()),
        };
        match created {
            Ok(()) => {
                ctx.recorder
                    .record(
                        &object,
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!(
                            "create Claim {claim_name} Pod {pod_name} in StatefulSet {name} success"
                        ),
                    )
                    .await
            }
            Err(e) => {
                ctx.recorder
                    .record(
                        &object,
                        EventType::Warning,
                        "FailedCreate",
                        &format!(
                            "create Claim {claim_name} for Pod {pod_name} in StatefulSet {name} failed error: {e}"
                        ),
                    )
                    .await;
                return Err(anyhow::Error::new(e).context(format!("creating claim {claim_name}")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, revision: &str, running_ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {REVISION_HASH_LABEL: revision}},
            "spec": {"containers": []},
            "status": {"phase": if running_ready {"Running"} else {"Pending"},
                       "conditions": [{"type": "Ready", "status": if running_ready {"True"} else {"False"}}]}
        }))
        .expect("pod")
    }

    fn inputs<'a>(
        replicas: i32,
        ordered: bool,
        partition: Option<i32>,
        pods: &'a BTreeMap<i32, &'a Pod>,
    ) -> Inputs<'a> {
        Inputs {
            replicas,
            start: 0,
            ordered,
            rolling_partition: partition,
            update_revision: "web-new",
            pods,
        }
    }

    #[test]
    fn ordinals_parse_only_exact_names() {
        assert_eq!(ordinal_of("web", "web-0"), Some(0));
        assert_eq!(ordinal_of("web", "web-12"), Some(12));
        assert_eq!(ordinal_of("web", "web-01"), None);
        assert_eq!(ordinal_of("web", "web-x"), None);
        assert_eq!(ordinal_of("web", "webby-1"), None);
        assert_eq!(ordinal_of("web", "web-"), None);
        assert_eq!(claim_name("www", "web", 2), "www-web-2");
    }

    #[test]
    fn ordered_ready_creates_one_at_a_time_and_waits() {
        let none = BTreeMap::new();
        assert_eq!(
            plan(&inputs(3, true, Some(0), &none)).create,
            vec![(0, true)]
        );
        let p0 = pod("web-0", "web-new", false);
        let pods = BTreeMap::from([(0, &p0)]);
        assert_eq!(plan(&inputs(3, true, Some(0), &pods)), Plan::default());
        let p0 = pod("web-0", "web-new", true);
        let pods = BTreeMap::from([(0, &p0)]);
        assert_eq!(
            plan(&inputs(3, true, Some(0), &pods)).create,
            vec![(1, true)]
        );
        // Parallel creates all at once.
        assert_eq!(plan(&inputs(3, false, Some(0), &none)).create.len(), 3);
    }

    #[test]
    fn scale_down_goes_from_the_highest_ordinal() {
        let pods_owned: Vec<Pod> = (0..4)
            .map(|i| pod(&format!("web-{i}"), "web-new", true))
            .collect();
        let pods: BTreeMap<i32, &Pod> = pods_owned.iter().zip(0..).map(|(p, i)| (i, p)).collect();
        assert_eq!(plan(&inputs(2, true, Some(0), &pods)).delete, vec!["web-3"]);
        assert_eq!(
            plan(&inputs(2, false, Some(0), &pods)).delete,
            vec!["web-3", "web-2"]
        );
    }

    #[test]
    fn rolling_update_respects_partition_from_the_top() {
        let pods_owned: Vec<Pod> = (0..3)
            .map(|i| pod(&format!("web-{i}"), "web-old", true))
            .collect();
        let pods: BTreeMap<i32, &Pod> = pods_owned.iter().zip(0..).map(|(p, i)| (i, p)).collect();
        assert_eq!(plan(&inputs(3, true, Some(0), &pods)).delete, vec!["web-2"]);
        assert_eq!(plan(&inputs(3, true, Some(2), &pods)).delete, vec!["web-2"]);
        assert_eq!(plan(&inputs(3, true, Some(3), &pods)), Plan::default());
        // OnDelete never deletes for an update.
        assert_eq!(plan(&inputs(3, true, None, &pods)), Plan::default());
        // web-2 updated: web-1 is next, unless partition 2 stops it.
        let updated = pod("web-2", "web-new", true);
        let mut pods = pods.clone();
        pods.insert(2, &updated);
        assert_eq!(plan(&inputs(3, true, Some(0), &pods)).delete, vec!["web-1"]);
        assert_eq!(plan(&inputs(3, true, Some(2), &pods)), Plan::default());
        // Below the partition a missing pod is recreated at the current revision.
        pods.remove(&0);
        assert_eq!(
            plan(&inputs(3, true, Some(2), &pods)).create,
            vec![(0, false)]
        );
    }
}
