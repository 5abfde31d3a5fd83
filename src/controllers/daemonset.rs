//! DaemonSet controller: one daemon Pod on every eligible Node.
//!
//! A node is eligible when it matches the template's `nodeSelector` and required
//! node affinity and every NoSchedule/NoExecute taint is tolerated by the pod's
//! tolerations, which get kube's daemon tolerations added (`not-ready` and
//! `unreachable` NoExecute; `disk-pressure`, `memory-pressure`, `pid-pressure`,
//! `unschedulable` NoSchedule; `network-unavailable` for hostNetwork pods). A pod on
//! a node that gained an untolerated NoExecute taint, or whose node is gone, is
//! deleted; an untolerated NoSchedule taint only stops new pods. Pods are not bound
//! here: each gets a required node affinity `matchFields metadata.name In [node]` and
//! the default scheduler binds it.
//!
//! Every template is recorded as a ControllerRevision `<ds>-<hash>` (data: a
//! strategic-merge patch replacing the template, so `kubectl rollout undo` works);
//! pods carry `controller-revision-hash` and `pod-template-generation`.
//! RollingUpdate replaces old pods within `maxUnavailable` (or surges a new pod next
//! to the old one within `maxSurge`); OnDelete only creates missing pods from the
//! newest template. Status (desired/current/updated NumberScheduled, numberReady,
//! numberAvailable, numberUnavailable, numberMisscheduled, observedGeneration) is what
//! `kubectl rollout status ds/x` reads. SuccessfulCreate / SuccessfulDelete /
//! FailedDaemonPod events. Pods are listed from the API on every sync (a
//! consistent read, so our own writes are visible). Talks only to the API (kube-rs).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodTemplateSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use serde_json::json;

use super::RETRY;
use super::deployment::scaled_value;
use super::events::{EventType, Recorder, reference};
use super::workload::{
    Adopter, REVISION_HASH_LABEL, ReconcileError, availability, controller_of, controller_ref,
    is_ready, phase, prune_revisions, revision_hash_of, selector_matches, sync_revisions,
    target_node,
};
use crate::scheduler::framework::{matches_node_affinity, tolerates};

/// Label with the DaemonSet generation a pod was created from (deprecated in kube,
/// still set).
pub const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";

struct Context {
    client: kube::Client,
    recorder: Recorder,
}

/// Runs the DaemonSet controller until the process ends.
pub async fn run(client: kube::Client, pods: super::pods::PodInformer) {
    let daemonsets: Api<DaemonSet> = Api::all(client.clone());
    let controller = Controller::new(daemonsets, watcher::Config::default());
    let store = controller.store();
    let context = Arc::new(Context {
        recorder: Recorder::new(client.clone(), "daemonset-controller"),
        client: client.clone(),
    });
    controller
        .reconcile_on(super::pods::owner_triggers::<DaemonSet>(&pods))
        .watches(
            Api::<Node>::all(client),
            watcher::Config::default(),
            move |_node: Node| {
                store
                    .state()
                    .iter()
                    .map(|ds| ObjectRef::from_obj(ds.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .run(
            |ds, ctx| super::workload::guarded("daemonset", reconcile(ds, ctx)),
            error_policy,
            context,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "daemonset reconcile failed");
            }
        })
        .await;
}

fn error_policy(ds: Arc<DaemonSet>, error: &ReconcileError, _: Arc<Context>) -> Action {
    tracing::warn!(daemonset = %ds.name_any(), namespace = ?ds.namespace(), error = %error, "daemonset sync failed; retrying");
    Action::requeue(RETRY)
}

// ---------------------------------------------------------------------------------
// Pure helpers.

/// kube's `AddOrUpdateDaemonPodTolerations`: the tolerations every daemon pod gets.
pub fn daemon_tolerations(host_network: bool) -> Vec<Toleration> {
    let toleration = |key: &str, effect: &str| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Default::default()
    };
    let mut list = vec![
        toleration("node.kubernetes.io/not-ready", "NoExecute"),
        toleration("node.kubernetes.io/unreachable", "NoExecute"),
        toleration("node.kubernetes.io/disk-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/memory-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/pid-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if host_network {
        list.push(toleration(
            "node.kubernetes.io/network-unavailable",
            "NoSchedule",
        ));
    }
    list
}

/// The template's pod spec with the daemon tolerations added (a toleration with the
/// same key and effect that the user wrote wins).
fn with_daemon_tolerations(template: &PodTemplateSpec) -> PodTemplateSpec {
    let mut template = template.clone();
    let spec = template.spec.get_or_insert_with(Default::default);
    let host_network = spec.host_network.unwrap_or(false);
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for extra in daemon_tolerations(host_network) {
        if !tolerations
            .iter()
            .any(|t| t.key == extra.key && t.effect == extra.effect)
        {
            tolerations.push(extra);
        }
    }
    template
}

/// kube's `ReplaceDaemonSetPodNodeNameNodeAffinity`: pin the pod to `node` through a
/// required `matchFields metadata.name In [node]` term, keeping other expressions.
pub fn pin_to_node(affinity: Option<Affinity>, node: &str) -> Affinity {
    let requirement = NodeSelectorRequirement {
        key: "metadata.name".into(),
        operator: "In".into(),
        values: Some(vec![node.to_string()]),
    };
    let mut affinity = affinity.unwrap_or_default();
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    let required = node_affinity
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(NodeSelector::default);
    if required.node_selector_terms.is_empty() {
        required
            .node_selector_terms
            .push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_fields = Some(vec![requirement.clone()]);
    }
    affinity
}

/// (should run a new pod, may keep an existing pod) on `node` for a template that
/// already carries the daemon tolerations: kube's `NodeShouldRunDaemonPod`.
fn node_should_run(node: &Node, template: &PodTemplateSpec) -> (bool, bool) {
    if node.metadata.deletion_timestamp.is_some() {
        return (false, false);
    }
    let pod = Pod {
        metadata: template.metadata.clone().unwrap_or_default(),
        spec: template.spec.clone(),
        status: None,
    };
    if !matches_node_affinity(&pod, node) {
        return (false, false);
    }
    let tolerations = template
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[]);
    let mut should_run = true;
    let mut should_continue = true;
    for taint in node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
    {
        if tolerations.iter().any(|t| tolerates(t, taint)) {
            continue;
        }
        match taint.effect.as_str() {
            "NoExecute" => {
                should_run = false;
                should_continue = false;
            }
            "NoSchedule" => should_run = false,
            _ => {}
        }
    }
    (should_run, should_continue)
}

fn created_at(pod: &Pod) -> i64 {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or(0)
}

/// (maxSurge, maxUnavailable) for `desired` nodes; percentages round up, as the
/// DaemonSet controller does; both zero means one unavailable.
fn surge_and_unavailable(ds: &DaemonSet, desired: i32) -> anyhow::Result<(i32, i32)> {
    let rolling = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let surge = match rolling.and_then(|r| r.max_surge.as_ref()) {
        Some(v) => scaled_value(v, desired, true).context("resolving maxSurge")?,
        None => 0,
    };
    let unavailable = match rolling.and_then(|r| r.max_unavailable.as_ref()) {
        Some(v) => scaled_value(v, desired, true).context("resolving maxUnavailable")?,
        None => scaled_value(&IntOrString::Int(1), desired, true)?,
    };
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge.max(0), unavailable.max(0)))
}

/// What one sync decided to do.
#[derive(Debug, Default, PartialEq)]
struct Plan {
    /// Nodes that get a new pod.
    create: Vec<String>,
    /// Pods to delete, with the node they are on.
    delete: Vec<(String, String)>,
    /// Failed pods found (reported as FailedDaemonPod), with their node.
    failed: Vec<(String, String)>,
}

/// Per-node view used by the planner.
struct NodeState<'a> {
    name: String,
    should_run: bool,
    should_continue: bool,
    /// Active owned pods targeting the node, oldest first.
    pods: Vec<&'a Pod>,
}

/// Decides creates and deletes for one sync (kube's `manage` + `rollingUpdate`).
fn plan(nodes: &[NodeState<'_>], hash: &str, rolling: Option<(i32, i32)>, min_ready: i32) -> Plan {
    let mut plan = Plan::default();
    let updated = |p: &Pod| revision_hash_of(&p.metadata) == Some(hash);
    let available = |p: &Pod| availability(p, min_ready).is_ok();
    let surge_mode = rolling.is_some_and(|(surge, _)| surge > 0);
    // manage: missing, surplus and misplaced pods.
    let mut healthy: Vec<(&NodeState<'_>, Vec<&Pod>)> = Vec::new();
    for node in nodes {
        let (failed, live): (Vec<&Pod>, Vec<&Pod>) =
            node.pods.iter().partition(|p| phase(p) == "Failed");
        for pod in failed {
            let pod_name = pod.name_any();
            plan.failed.push((pod_name.clone(), node.name.clone()));
            plan.delete.push((pod_name, node.name.clone()));
        }
        if !node.should_continue {
            for pod in live {
                plan.delete.push((pod.name_any(), node.name.clone()));
            }
            continue;
        }
        if !node.should_run {
            continue;
        }
        if live.is_empty() {
            plan.create.push(node.name.clone());
            continue;
        }
        // Keep one pod per node (two during a surge: the oldest old and newest new).
        let keep: Vec<&Pod> = if surge_mode && live.len() > 1 {
            let old = live.iter().find(|p| !updated(p)).copied();
            let new = live.iter().rev().find(|p| updated(p)).copied();
            old.into_iter().chain(new).collect()
        } else {
            let current = live.iter().find(|p| updated(p)).copied();
            vec![current.unwrap_or(live[0])]
        };
        for pod in &live {
            if !keep.iter().any(|k| k.metadata.name == pod.metadata.name) {
                plan.delete.push((pod.name_any(), node.name.clone()));
            }
        }
        healthy.push((node, keep));
    }
    let Some((max_surge, max_unavailable)) = rolling else {
        return plan;
    };
    // rollingUpdate over the nodes that run a pod.
    if max_surge == 0 {
        let desired_nodes = nodes.iter().filter(|n| n.should_run).count() as i32;
        let available_nodes = healthy
            .iter()
            .filter(|(_, pods)| pods.iter().any(|p| available(p)))
            .count() as i32;
        let mut unavailable = desired_nodes - available_nodes;
        let mut candidates = Vec::new();
        for (node, pods) in &healthy {
            for pod in pods.iter().filter(|p| !updated(p)) {
                if available(pod) {
                    candidates.push((pod.name_any(), node.name.clone()));
                } else {
                    // An old pod that is not available anyway goes at once.
                    plan.delete.push((pod.name_any(), node.name.clone()));
                }
            }
        }
        for candidate in candidates {
            if unavailable >= max_unavailable {
                break;
            }
            unavailable += 1;
            plan.delete.push(candidate);
        }
    } else {
        let mut surging = healthy
            .iter()
            .filter(|(_, pods)| pods.len() > 1 && pods.iter().any(|p| !available(p)))
            .count() as i32;
        for (node, pods) in &healthy {
            let old = pods.iter().find(|p| !updated(p));
            let new = pods.iter().find(|p| updated(p));
            match (old, new) {
                (Some(old), Some(new)) if available(new) => {
                    plan.delete.push((old.name_any(), node.name.clone()));
                }
                (Some(old), None) => {
                    if !available(old) {
                        plan.delete.push((old.name_any(), node.name.clone()));
                    } else if surging < max_surge {
                        surging += 1;
                        plan.create.push(node.name.clone());
                    }
                }
                _ => {}
            }
        }
    }
    plan
}

// ---------------------------------------------------------------------------------
// Reconcile.

async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    Ok(sync(&ds, &ctx).await?)
}

async fn sync(ds: &DaemonSet, ctx: &Context) -> anyhow::Result<Action> {
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = ds.namespace().context("daemonset has no namespace")?;
    let name = ds.name_any();
    let uid = ds.uid().context("daemonset has no uid")?;
    let spec = ds.spec.clone().unwrap_or_default();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);

    let collision_count = ds.status.as_ref().and_then(|s| s.collision_count);
    let revisions = sync_revisions(&ctx.client, ds, &spec.template, collision_count).await?;
    let hash = revision_hash_of(&revisions.update.metadata)
        .context("controllerrevision without a hash label")?
        .to_string();

    let nodes = Api::<Node>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
        .context("listing nodes")?
        .items;
    let listed = pods_api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing pods in {namespace} for daemonset {name}"))?
        .items;
    let adopter = Adopter::new(ctx.client.clone(), ds)?;
    let mut owned = Vec::new();
    for pod in listed {
        let matches = selector_matches(&spec.selector, pod.metadata.labels.as_ref());
        match controller_of(&pod.metadata) {
            Some(owner) if owner.uid == uid => owned.push(pod),
            Some(_) => {}
            None if matches && pod.metadata.deletion_timestamp.is_none() => {
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
    owned.sort_by_key(created_at);
    // Revisions in use by a pod (or current) are kept; older ones beyond the limit go.
    let used: HashSet<&str> = owned
        .iter()
        .filter_map(|p| revision_hash_of(&p.metadata))
        .chain([hash.as_str()])
        .collect();
    let live: HashSet<String> = revisions
        .all
        .iter()
        .filter(|r| revision_hash_of(&r.metadata).is_some_and(|h| used.contains(h)))
        .map(|r| r.name_any())
        .collect();
    prune_revisions(
        &ctx.client,
        &namespace,
        &revisions.all,
        &live,
        spec.revision_history_limit.unwrap_or(10),
    )
    .await;
    let active: Vec<&Pod> = owned
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && phase(p) != "Succeeded")
        .collect();

    let template = with_daemon_tolerations(&spec.template);
    let mut by_node: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for pod in &active {
        if let Some(node) = target_node(pod) {
            by_node.entry(node).or_default().push(pod);
        }
    }
    let mut states = Vec::new();
    for node in &nodes {
        let node_name = node.name_any();
        let (should_run, should_continue) = node_should_run(node, &template);
        states.push(NodeState {
            pods: by_node.remove(&node_name).unwrap_or_default(),
            name: node_name,
            should_run,
            should_continue,
        });
    }
    // Pods whose node is gone (or that name no node) are deleted.
    let mut orphaned: Vec<(String, String)> = by_node
        .into_iter()
        .flat_map(|(node, pods)| pods.into_iter().map(move |p| (p.name_any(), node.clone())))
        .collect();
    orphaned.extend(
        active
            .iter()
            .filter(|p| target_node(p).is_none())
            .map(|p| (p.name_any(), String::new())),
    );

    let desired = states.iter().filter(|n| n.should_run).count() as i32;
    let rolling_update = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .is_none_or(|t| t == "RollingUpdate");
    let rolling = if rolling_update {
        Some(surge_and_unavailable(ds, desired)?)
    } else {
        None
    };
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let mut decided = plan(&states, &hash, rolling, min_ready);
    decided.delete.extend(orphaned);

    // Status from what was listed (the watch brings us back after our own writes).
    let status = status_of(ds, &states, &hash, min_ready);
    write_status(ctx, ds, &namespace, status).await?;

    let object = reference(ds);
    for (pod, node) in &decided.failed {
        ctx.recorder
            .record(
                &object,
                EventType::Warning,
                "FailedDaemonPod",
                &format!(
                    "Found failed daemon pod {namespace}/{pod} on node {node}, will try to kill it"
                ),
            )
            .await;
    }
    let acted = !decided.create.is_empty() || !decided.delete.is_empty();
    for (pod, _) in decided.delete {
        match pods_api.delete(&pod, &DeleteParams::default()).await {
            Ok(_) => {
                ctx.recorder
                    .record(
                        &object,
                        EventType::Normal,
                        "SuccessfulDelete",
                        &format!("Deleted pod: {pod}"),
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
                        &format!("Error deleting: {e}"),
                    )
                    .await;
                return Err(anyhow::Error::new(e)
                    .context(format!("deleting pod {pod} of daemonset {name}")));
            }
        }
    }
    let generation = ds.metadata.generation.unwrap_or(0);
    for node in decided.create {
        let pod = daemon_pod(ds, &template, &hash, generation, &node)?;
        match pods_api.create(&PostParams::default(), &pod).await {
            Ok(created) => {
                ctx.recorder
                    .record(
                        &object,
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("Created pod: {}", created.name_any()),
                    )
                    .await
            }
            Err(e) => {
                ctx.recorder
                    .record(
                        &object,
                        EventType::Warning,
                        "FailedCreate",
                        &format!("Error creating: {e}"),
                    )
                    .await;
                return Err(anyhow::Error::new(e).context(format!(
                    "creating a pod of daemonset {name} for node {node}"
                )));
            }
        }
    }
    if acted {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    // Pods ready but not yet for minReadySeconds: look again when they may be.
    let wait = active
        .iter()
        .filter_map(|p| availability(p, min_ready).err().flatten())
        .min();
    Ok(match wait {
        Some(wait) => Action::requeue(wait + Duration::from_millis(100)),
        None => Action::await_change(),
    })
}

/// The pod for `node`: the template with the daemon tolerations, the revision labels,
/// a controller reference and the node pin.
fn daemon_pod(
    ds: &DaemonSet,
    template: &PodTemplateSpec,
    hash: &str,
    generation: i64,
    node: &str,
) -> anyhow::Result<Pod> {
    let owner = controller_ref(ds).context("daemonset without name or uid")?;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(REVISION_HASH_LABEL.into(), hash.to_string());
    labels.insert(TEMPLATE_GENERATION_LABEL.into(), generation.to_string());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.affinity = Some(pin_to_node(spec.affinity.take(), node));
    Ok(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", ds.name_any())),
            namespace: ds.namespace(),
            labels: Some(labels),
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// kube's `updateDaemonSetStatus` counts, judged on the oldest pod of each node.
fn status_of(
    ds: &DaemonSet,
    nodes: &[NodeState<'_>],
    hash: &str,
    min_ready: i32,
) -> serde_json::Value {
    let (mut desired, mut current, mut misscheduled) = (0, 0, 0);
    let (mut ready, mut available, mut updated) = (0, 0, 0);
    for node in nodes {
        let live: Vec<&&Pod> = node.pods.iter().filter(|p| phase(p) != "Failed").collect();
        if node.should_run {
            desired += 1;
            if let Some(pod) = live.first() {
                current += 1;
                if is_ready(pod) {
                    ready += 1;
                    if availability(pod, min_ready).is_ok() {
                        available += 1;
                    }
                }
                if revision_hash_of(&pod.metadata) == Some(hash) {
                    updated += 1;
                }
            }
        } else if !live.is_empty() {
            misscheduled += 1;
        }
    }
    let mut status = json!({
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": current,
        "numberMisscheduled": misscheduled,
        "numberReady": ready,
        "numberAvailable": available,
        "updatedNumberScheduled": updated,
        "observedGeneration": ds.metadata.generation.unwrap_or(0),
    });
    // kube omits zero optional counts; numberUnavailable is set only when positive.
    if desired - available > 0 {
        status["numberUnavailable"] = json!(desired - available);
    } else {
        status["numberUnavailable"] = serde_json::Value::Null;
    }
    status
}

async fn write_status(
    ctx: &Context,
    ds: &DaemonSet,
    namespace: &str,
    status: serde_json::Value,
) -> anyhow::Result<()> {
    let current = serde_json::to_value(ds.status.clone().unwrap_or_default())?;
    let changed = status.as_object().into_iter().flatten().any(|(k, v)| {
        let old = current.get(k).cloned().unwrap_or(serde_json::Value::Null);
        // Zero and absent are the same count.
        let zeroish = |v: &serde_json::Value| v.is_null() || v == &json!(0);
        !(old == *v || (zeroish(&old) && zeroish(v)))
    });
    if !changed {
        return Ok(());
    }
    let api: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), namespace);
    match api
        .patch_status(
            &ds.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "writing status of daemonset {namespace}/{}",
            ds.name_any()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).expect("node")
    }

    fn template(v: serde_json::Value) -> PodTemplateSpec {
        with_daemon_tolerations(&serde_json::from_value(v).expect("template"))
    }

    fn pod(name: &str, node: &str, hash: &str, created: i64, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {REVISION_HASH_LABEL: hash},
                         "creationTimestamp": k8s_openapi::jiff::Timestamp::from_second(created).expect("ts").to_string()},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .expect("pod")
    }

    #[test]
    fn daemon_tolerations_let_pods_onto_cordoned_and_pressured_nodes() {
        let t = template(json!({"spec": {"containers": []}}));
        let cordoned = node(
            json!({"metadata": {"name": "a"}, "spec": {"unschedulable": true,
            "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                       {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
                       {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}]}}),
        );
        assert_eq!(node_should_run(&cordoned, &t), (true, true));
        let dedicated = node(json!({"metadata": {"name": "b"}, "spec": {"taints": [
            {"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}}));
        assert_eq!(node_should_run(&dedicated, &t), (false, true));
        let evicting = node(json!({"metadata": {"name": "c"}, "spec": {"taints": [
            {"key": "dedicated", "value": "db", "effect": "NoExecute"}]}}));
        assert_eq!(node_should_run(&evicting, &t), (false, false));
        let tolerant = template(json!({"spec": {"containers": [], "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "db"}]}}));
        assert_eq!(node_should_run(&evicting, &tolerant), (true, true));
        let selective =
            template(json!({"spec": {"containers": [], "nodeSelector": {"disk": "ssd"}}}));
        assert_eq!(node_should_run(&dedicated, &selective), (false, false));
        // A user's toleration with the same key/effect is kept, not duplicated.
        let own = template(json!({"spec": {"containers": [], "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]}}));
        let list = own.spec.and_then(|s| s.tolerations).expect("tolerations");
        assert_eq!(list.len(), 6);
        assert_eq!(list[0].toleration_seconds, Some(5));
    }

    #[test]
    fn pinning_replaces_match_fields_and_keeps_expressions() {
        let affinity: Affinity = serde_json::from_value(json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                 "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other"]}]}]}}}))
        .expect("affinity");
        let pinned = serde_json::to_value(pin_to_node(Some(affinity), "n1")).expect("json");
        let term = &pinned["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0];
        assert_eq!(term["matchExpressions"][0]["key"], "zone");
        assert_eq!(
            term["matchFields"],
            json!([{"key": "metadata.name", "operator": "In", "values": ["n1"]}])
        );
        let fresh = pin_to_node(None, "n2");
        let p = Pod {
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                affinity: Some(fresh),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(target_node(&p).as_deref(), Some("n2"));
    }

    fn state<'a>(name: &str, pods: Vec<&'a Pod>) -> NodeState<'a> {
        NodeState {
            name: name.into(),
            should_run: true,
            should_continue: true,
            pods,
        }
    }

    #[test]
    fn plans_creates_surplus_and_rolling_deletes_within_max_unavailable() {
        let a_old = pod("a-old", "a", "h1", 1, true);
        let b_old = pod("b-old", "b", "h1", 1, true);
        let c_old = pod("c-old", "c", "h1", 1, true);
        let c_dup = pod("c-dup", "c", "h1", 2, true);
        let nodes = vec![
            state("a", vec![&a_old]),
            state("b", vec![&b_old]),
            state("c", vec![&c_old, &c_dup]),
            state("d", vec![]),
        ];
        // OnDelete: only the missing pod and the duplicate.
        let p = plan(&nodes, "h2", None, 0);
        assert_eq!(p.create, vec!["d"]);
        assert_eq!(p.delete, vec![("c-dup".to_string(), "c".to_string())]);
        // RollingUpdate maxUnavailable 2: node d is already unavailable, so one more.
        let p = plan(&nodes, "h2", Some((0, 2)), 0);
        assert_eq!(p.create, vec!["d"]);
        assert_eq!(p.delete.len(), 2);
        assert_eq!(p.delete[1], ("a-old".to_string(), "a".to_string()));
        // Surge 1: a new pod next to one old pod; none deleted until it is available.
        let nodes = vec![state("a", vec![&a_old]), state("b", vec![&b_old])];
        let p = plan(&nodes, "h2", Some((1, 0)), 0);
        assert_eq!(p.create, vec!["a"]);
        assert!(p.delete.is_empty());
        let a_new = pod("a-new", "a", "h2", 3, true);
        let nodes = vec![state("a", vec![&a_old, &a_new]), state("b", vec![&b_old])];
        let p = plan(&nodes, "h2", Some((1, 0)), 0);
        assert_eq!(p.delete, vec![("a-old".to_string(), "a".to_string())]);
        assert_eq!(p.create, vec!["b"]);
    }
}
