//! Deployment controller: rolls a Deployment's pod template out through ReplicaSets.
//!
//! Each distinct pod template gets a ReplicaSet `<deploy>-<pod-template-hash>` (the
//! hash is a stable digest of the template; the `pod-template-hash` label is added to
//! the ReplicaSet, its selector and its template). RollingUpdate follows kube's
//! algorithm (`maxSurge` rounds up, `maxUnavailable` rounds down, both may be
//! percentages; never fewer than `replicas - maxUnavailable` available pods, never more
//! than `replicas + maxSurge` pods); Recreate scales every old ReplicaSet to zero before
//! the new one comes up. The `deployment.kubernetes.io/revision` annotation on the
//! Deployment and its ReplicaSets increments with every rollout, so `kubectl rollout
//! history` and `kubectl rollout undo` (which copies an old ReplicaSet's template back)
//! work. `paused` stops rollouts; `revisionHistoryLimit` prunes old empty ReplicaSets.
//! Status (observedGeneration, replicas, updated/ready/available/unavailableReplicas,
//! the Available and Progressing conditions with kube's reasons, ProgressDeadlineExceeded)
//! is written through `/status` exactly as `kubectl rollout status` reads it.
//! `ScalingReplicaSet` events are recorded. Talks only to the API (kube-rs).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::json;

use super::RETRY;
use super::events::{EventType, Recorder, reference};
use super::workload::{
    Adopter, HASH_LABEL, ReconcileError, controller_of, controller_ref, now_secs, now_time,
    same_template, selector_matches, template_hash,
};

/// Annotation carrying the rollout revision on Deployments and ReplicaSets.
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
/// Annotations copied from the Deployment to new ReplicaSets (rollout history shows it).
const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";

struct Context {
    client: kube::Client,
    recorder: Recorder,
}

/// Runs the Deployment controller until the process ends.
pub async fn run(client: kube::Client) {
    let deployments: Api<Deployment> = Api::all(client.clone());
    let replicasets: Api<ReplicaSet> = Api::all(client.clone());
    let context = Arc::new(Context {
        recorder: Recorder::new(client.clone(), "deployment-controller"),
        client,
    });
    Controller::new(deployments, watcher::Config::default())
        .owns(replicasets, watcher::Config::default())
        .run(
            |d, ctx| super::workload::guarded("deployment", reconcile(d, ctx)),
            error_policy,
            context,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "deployment reconcile failed");
            }
        })
        .await;
}

fn error_policy(d: Arc<Deployment>, error: &ReconcileError, _: Arc<Context>) -> Action {
    tracing::warn!(deployment = %d.name_any(), namespace = ?d.namespace(), error = %error, "deployment sync failed; retrying");
    Action::requeue(RETRY)
}

// ---------------------------------------------------------------------------------
// Pure helpers: surge / unavailable resolution, revisions, conditions (the template
// hash is in `workload`, which the other workload controllers share).

/// Resolves an int-or-percent against `total`; percentages round up or down.
pub fn scaled_value(value: &IntOrString, total: i32, round_up: bool) -> anyhow::Result<i32> {
    match value {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let Some(percent) = s.strip_suffix('%') else {
                bail!("invalid value for IntOrString: {s:?} is not a percentage");
            };
            let percent: i64 = percent
                .trim()
                .parse()
                .with_context(|| format!("invalid percentage {s:?}"))?;
            let product = percent * i64::from(total);
            let scaled = if round_up {
                (product + 99).div_euclid(100)
            } else {
                product.div_euclid(100)
            };
            Ok(i32::try_from(scaled).unwrap_or(i32::MAX))
        }
    }
}

/// kube's `ResolveFenceposts`: (maxSurge, maxUnavailable) for `desired` replicas, with
/// the 25% defaults; surge rounds up, unavailable rounds down, and both zero means
/// unavailable 1.
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    desired: i32,
) -> anyhow::Result<(i32, i32)> {
    let default = IntOrString::String("25%".into());
    let surge =
        scaled_value(max_surge.unwrap_or(&default), desired, true).context("resolving maxSurge")?;
    let mut unavailable = scaled_value(max_unavailable.unwrap_or(&default), desired, false)
        .context("resolving maxUnavailable")?;
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok((surge.max(0), unavailable.max(0)))
}

fn is_recreate(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        == Some("Recreate")
}

fn desired_replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1).max(0)
}

/// (maxSurge, maxUnavailable) of a Deployment: zero for Recreate; unavailable is
/// capped at the replica count.
fn surge_and_unavailable(d: &Deployment) -> anyhow::Result<(i32, i32)> {
    if is_recreate(d) {
        return Ok((0, 0));
    }
    let replicas = desired_replicas(d);
    let rolling = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let (surge, unavailable) = resolve_fenceposts(
        rolling.and_then(|r| r.max_surge.as_ref()),
        rolling.and_then(|r| r.max_unavailable.as_ref()),
        replicas,
    )?;
    Ok((
        surge,
        if replicas == 0 {
            0
        } else {
            unavailable.min(replicas)
        },
    ))
}

fn revision_of(meta: &ObjectMeta) -> i64 {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(REVISION_ANNOTATION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn status_of(rs: &ReplicaSet) -> (i32, i32, i32) {
    rs.status
        .as_ref()
        .map(|s| {
            (
                s.replicas,
                s.ready_replicas.unwrap_or(0),
                s.available_replicas.unwrap_or(0),
            )
        })
        .unwrap_or_default()
}

fn available_of(rs: &ReplicaSet) -> i32 {
    status_of(rs).2
}

fn created_at(rs: &ReplicaSet) -> i64 {
    rs.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or(0)
}

/// kube's `NewRSNewReplicas` for RollingUpdate: how far the new ReplicaSet may grow now.
pub fn new_rs_replicas(desired: i32, surge: i32, all_spec_total: i32, new_spec: i32) -> i32 {
    let max_total = desired + surge;
    if all_spec_total >= max_total {
        return new_spec;
    }
    let up = (max_total - all_spec_total).min(desired - new_spec).max(0);
    new_spec + up
}

/// Sets a condition; a condition with the same status keeps its lastTransitionTime.
/// When `touch` is false and status and reason are unchanged, nothing changes.
fn set_condition(
    conditions: &mut Vec<DeploymentCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    touch: bool,
) {
    let now = now_time();
    let mut condition = DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    };
    if let Some(current) = conditions.iter().find(|c| c.type_ == type_) {
        if current.status == status && current.reason.as_deref() == Some(reason) && !touch {
            return;
        }
        if current.status == status {
            condition.last_transition_time = current.last_transition_time.clone();
        }
    }
    conditions.retain(|c| c.type_ != type_);
    conditions.push(condition);
}

fn condition<'a>(
    conditions: &'a [DeploymentCondition],
    type_: &str,
) -> Option<&'a DeploymentCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

// ---------------------------------------------------------------------------------
// Reconcile.

/// One Deployment's ReplicaSets during a sync.
struct Sets {
    new: Option<ReplicaSet>,
    old: Vec<ReplicaSet>,
}

impl Sets {
    fn all(&self) -> impl Iterator<Item = &ReplicaSet> {
        self.new.iter().chain(self.old.iter())
    }
}

async fn reconcile(d: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    Ok(sync(&d, &ctx).await?)
}

async fn sync(d: &Deployment, ctx: &Context) -> anyhow::Result<Action> {
    let namespace = d.namespace().context("deployment has no namespace")?;
    let name = d.name_any();
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let spec = d.spec.clone().unwrap_or_default();
    let uid = d.metadata.uid.clone().context("deployment has no uid")?;
    let rs_api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), &namespace);

    // Claim ReplicaSets: owned ones, plus orphans matching the selector.
    let listed = rs_api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing replicasets in {namespace} for deployment {name}"))?;
    let adopter = Adopter::new(ctx.client.clone(), d)?;
    let mut owned = Vec::new();
    for rs in listed.items {
        match controller_of(&rs.metadata) {
            Some(owner) if owner.uid == uid => owned.push(rs),
            Some(_) => {}
            None => {
                if rs.metadata.deletion_timestamp.is_none()
                    && selector_matches(&spec.selector, rs.metadata.labels.as_ref())
                {
                    match adopter.adopt(&rs_api, &rs.metadata).await {
                        Ok(adopted) => owned.push(adopted),
                        Err(e) => {
                            tracing::debug!(replicaset = %rs.name_any(), error = %e, "could not adopt replicaset")
                        }
                    }
                }
            }
        }
    }
    owned.sort_by_key(created_at);
    let new_index = owned.iter().position(|rs| {
        rs.spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .is_some_and(|t| same_template(t, &spec.template))
    });
    let mut sets = match new_index {
        Some(i) => {
            let new = owned.remove(i);
            Sets {
                new: Some(new),
                old: owned,
            }
        }
        None => Sets {
            new: None,
            old: owned,
        },
    };

    let mut status = d.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.take().unwrap_or_default();
    let paused = spec.paused.unwrap_or(false);
    let deadline = spec.progress_deadline_seconds.unwrap_or(600);

    if paused {
        set_condition(
            &mut conditions,
            "Progressing",
            "Unknown",
            "DeploymentPaused",
            "Deployment is paused".into(),
            false,
        );
        // Scaling still applies while paused, when there is no rollout in flight.
        if let Some(new) = sets.new.as_mut()
            && sets.old.iter().all(|rs| spec_replicas(rs) == 0)
            && spec_replicas(new) != desired_replicas(d)
        {
            scale(ctx, d, &rs_api, new, desired_replicas(d)).await?;
        }
        cleanup(d, &rs_api, &sets).await;
        write_status(ctx, d, &sets, conditions, deadline, true).await?;
        return Ok(Action::await_change());
    }
    if condition(&conditions, "Progressing").and_then(|c| c.reason.as_deref())
        == Some("DeploymentPaused")
    {
        set_condition(
            &mut conditions,
            "Progressing",
            "Unknown",
            "DeploymentResumed",
            "Deployment is resumed".into(),
            false,
        );
    }

    let max_old_revision = sets
        .old
        .iter()
        .map(|rs| revision_of(&rs.metadata))
        .max()
        .unwrap_or(0);
    let revision = max_old_revision + 1;

    // Keep the new ReplicaSet's revision the newest (a rollback makes an old one new).
    if let Some(new) = sets.new.as_mut() {
        if revision_of(&new.metadata) < revision {
            let patch =
                json!({"metadata": {"annotations": {REVISION_ANNOTATION: revision.to_string()}}});
            *new = rs_api
                .patch(
                    &new.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .with_context(|| format!("updating revision of replicaset {}", new.name_any()))?;
        }
        if condition(&conditions, "Progressing").is_none() {
            set_condition(
                &mut conditions,
                "Progressing",
                "True",
                "FoundNewReplicaSet",
                format!("Found new replica set {:?}", new.name_any()),
                false,
            );
        }
    }

    let (surge, _) = surge_and_unavailable(d)?;
    let desired = desired_replicas(d);
    if is_recreate(d) {
        let mut scaled = false;
        for rs in sets.old.iter_mut() {
            if spec_replicas(rs) > 0 {
                scale(ctx, d, &rs_api, rs, 0).await?;
                scaled = true;
            }
        }
        let old_running = sets.old.iter().any(|rs| status_of(rs).0 > 0);
        if !scaled && !old_running {
            match sets.new.as_mut() {
                None => {
                    let created = create_new(
                        ctx,
                        d,
                        &rs_api,
                        &mut status,
                        &mut conditions,
                        revision,
                        desired,
                    )
                    .await?;
                    sets.new = Some(created);
                }
                Some(new) if spec_replicas(new) != desired => {
                    scale(ctx, d, &rs_api, new, desired).await?;
                }
                Some(_) => {}
            }
        }
    } else {
        let all_total: i32 = sets.all().map(spec_replicas).sum();
        let mut scaled_up = false;
        match sets.new.as_mut() {
            None => {
                let replicas = new_rs_replicas(desired, surge, all_total, 0);
                let created = create_new(
                    ctx,
                    d,
                    &rs_api,
                    &mut status,
                    &mut conditions,
                    revision,
                    replicas,
                )
                .await?;
                sets.new = Some(created);
                scaled_up = replicas > 0;
            }
            Some(new) => {
                let current = spec_replicas(new);
                let target = if current > desired {
                    desired
                } else {
                    new_rs_replicas(desired, surge, all_total, current)
                };
                if target != current {
                    scale(ctx, d, &rs_api, new, target).await?;
                    scaled_up = target > current;
                }
            }
        }
        if !scaled_up {
            scale_down_old(ctx, d, &rs_api, &mut sets).await?;
        }
    }

    let (complete, recheck) = write_status(ctx, d, &sets, conditions, deadline, false).await?;
    if complete {
        cleanup(d, &rs_api, &sets).await;
        return Ok(Action::await_change());
    }
    // Wake up at the progress deadline, if nothing else happens before.
    Ok(recheck.map_or_else(Action::await_change, Action::requeue))
}

/// kube's `reconcileOldReplicaSets`: scale old ReplicaSets down, first their
/// unavailable pods, then available ones down to `replicas - maxUnavailable`.
async fn scale_down_old(
    ctx: &Context,
    d: &Deployment,
    rs_api: &Api<ReplicaSet>,
    sets: &mut Sets,
) -> anyhow::Result<bool> {
    let old_total: i32 = sets.old.iter().map(spec_replicas).sum();
    if old_total == 0 {
        return Ok(false);
    }
    let all_total: i32 = sets.all().map(spec_replicas).sum();
    let (_, max_unavailable) = surge_and_unavailable(d)?;
    let min_available = desired_replicas(d) - max_unavailable;
    let new_unavailable = sets
        .new
        .as_ref()
        .map(|rs| (spec_replicas(rs) - available_of(rs)).max(0))
        .unwrap_or(0);
    let max_scaled_down = all_total - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Ok(false);
    }
    sets.old.sort_by_key(created_at);
    // Unhealthy replicas first.
    let mut total = 0;
    for rs in sets.old.iter_mut() {
        if total >= max_scaled_down {
            break;
        }
        let replicas = spec_replicas(rs);
        let unhealthy = replicas - available_of(rs);
        if replicas == 0 || unhealthy <= 0 {
            continue;
        }
        let down = (max_scaled_down - total).min(unhealthy);
        scale(ctx, d, rs_api, rs, replicas - down).await?;
        total += down;
    }
    // Then available ones, keeping the minimum available.
    let available: i32 = sets.all().map(available_of).sum();
    if available > min_available {
        let budget = available - min_available;
        let mut done = 0;
        for rs in sets.old.iter_mut() {
            if done >= budget {
                break;
            }
            let replicas = spec_replicas(rs);
            if replicas == 0 {
                continue;
            }
            let down = replicas.min(budget - done);
            scale(ctx, d, rs_api, rs, replicas - down).await?;
            done += down;
        }
        total += done;
    }
    Ok(total > 0)
}

/// Creates the ReplicaSet for the Deployment's current template.
async fn create_new(
    ctx: &Context,
    d: &Deployment,
    rs_api: &Api<ReplicaSet>,
    status: &mut DeploymentStatus,
    conditions: &mut Vec<DeploymentCondition>,
    revision: i64,
    replicas: i32,
) -> anyhow::Result<ReplicaSet> {
    let spec = d.spec.clone().unwrap_or_default();
    let name = d.name_any();
    let hash = template_hash(&spec.template, status.collision_count);
    let mut template = spec.template.clone();
    let template_meta = template.metadata.get_or_insert_with(Default::default);
    template_meta
        .labels
        .get_or_insert_with(Default::default)
        .insert(HASH_LABEL.into(), hash.clone());
    let labels = template_meta.labels.clone();
    let mut selector = spec.selector.clone();
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(HASH_LABEL.into(), hash.clone());
    let mut annotations = BTreeMap::new();
    annotations.insert(REVISION_ANNOTATION.to_string(), revision.to_string());
    if let Some(cause) = d.annotations().get(CHANGE_CAUSE) {
        annotations.insert(CHANGE_CAUSE.to_string(), cause.clone());
    }
    let rs_name = format!("{name}-{hash}");
    let rs = ReplicaSet {
        metadata: ObjectMeta {
            name: Some(rs_name.clone()),
            namespace: d.namespace(),
            labels,
            annotations: Some(annotations),
            owner_references: Some(vec![
                controller_ref(d).context("deployment without name or uid")?,
            ]),
            ..Default::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(replicas),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        }),
        status: None,
    };
    let created = match rs_api.create(&PostParams::default(), &rs).await {
        Ok(created) => created,
        Err(kube::Error::Api(e)) if e.code == 409 => {
            // Ours already (a lagging list)? Otherwise a hash collision: bump the count.
            let existing = rs_api
                .get(&rs_name)
                .await
                .with_context(|| format!("reading existing replicaset {rs_name}"))?;
            let ours = controller_of(&existing.metadata).map(|o| o.uid.clone()) == d.metadata.uid;
            let same = existing
                .spec
                .as_ref()
                .and_then(|s| s.template.as_ref())
                .is_some_and(|t| same_template(t, &spec.template));
            if ours && same {
                return Ok(existing);
            }
            let count = status.collision_count.unwrap_or(0) + 1;
            let api: Api<Deployment> =
                Api::namespaced(ctx.client.clone(), &d.namespace().unwrap_or_default());
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"collisionCount": count}})),
            )
            .await
            .with_context(|| format!("recording hash collision of deployment {name}"))?;
            bail!(
                "replicaset name {rs_name} collides with an existing one; retrying with collisionCount {count}"
            );
        }
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("creating replicaset {rs_name}")));
        }
    };
    tracing::info!(deployment = %name, replicaset = %rs_name, revision, "created new replicaset");
    if replicas > 0 {
        ctx.recorder
            .record(
                &reference(d),
                EventType::Normal,
                "ScalingReplicaSet",
                &format!("Scaled up replica set {rs_name} from 0 to {replicas}"),
            )
            .await;
    }
    set_condition(
        conditions,
        "Progressing",
        "True",
        "NewReplicaSetCreated",
        format!("Created new replica set {rs_name:?}"),
        true,
    );
    Ok(created)
}

/// Sets a ReplicaSet's `spec.replicas` and records `ScalingReplicaSet`.
async fn scale(
    ctx: &Context,
    d: &Deployment,
    rs_api: &Api<ReplicaSet>,
    rs: &mut ReplicaSet,
    replicas: i32,
) -> anyhow::Result<()> {
    let from = spec_replicas(rs);
    if from == replicas {
        return Ok(());
    }
    let rs_name = rs.name_any();
    let patch = json!({"spec": {"replicas": replicas}});
    *rs = rs_api
        .patch(&rs_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("scaling replicaset {rs_name} to {replicas}"))?;
    let direction = if replicas > from { "up" } else { "down" };
    ctx.recorder
        .record(
            &reference(d),
            EventType::Normal,
            "ScalingReplicaSet",
            &format!("Scaled {direction} replica set {rs_name} from {from} to {replicas}"),
        )
        .await;
    Ok(())
}

/// Deletes the oldest zero-replica ReplicaSets beyond `revisionHistoryLimit`.
async fn cleanup(d: &Deployment, rs_api: &Api<ReplicaSet>, sets: &Sets) {
    let limit = d
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10)
        .max(0) as usize;
    let mut candidates: Vec<&ReplicaSet> = sets
        .old
        .iter()
        .filter(|rs| rs.metadata.deletion_timestamp.is_none())
        .filter(|rs| spec_replicas(rs) == 0 && status_of(rs).0 == 0)
        .collect();
    if candidates.len() <= limit {
        return;
    }
    candidates.sort_by_key(|rs| (revision_of(&rs.metadata), created_at(rs)));
    let excess = candidates.len() - limit;
    for rs in candidates.into_iter().take(excess) {
        let rs_name = rs.name_any();
        match rs_api.delete(&rs_name, &DeleteParams::background()).await {
            Ok(_) => {
                tracing::info!(deployment = %d.name_any(), replicaset = %rs_name, "deleted old replicaset beyond revisionHistoryLimit")
            }
            Err(e) => {
                tracing::debug!(replicaset = %rs_name, error = %e, "could not delete old replicaset")
            }
        }
    }
}

/// Computes and writes the Deployment's status. Returns whether the rollout is complete
/// and, for a rollout in flight, when its progress deadline expires.
async fn write_status(
    ctx: &Context,
    d: &Deployment,
    sets: &Sets,
    mut conditions: Vec<DeploymentCondition>,
    deadline: i32,
    paused: bool,
) -> anyhow::Result<(bool, Option<Duration>)> {
    let desired = desired_replicas(d);
    let (_, max_unavailable) = surge_and_unavailable(d)?;
    let (mut replicas, mut ready, mut available) = (0, 0, 0);
    for rs in sets.all() {
        let (r, re, a) = status_of(rs);
        replicas += r;
        ready += re;
        available += a;
    }
    let updated = sets.new.as_ref().map(|rs| status_of(rs).0).unwrap_or(0);
    let unavailable = (desired - available).max(0);
    let generation = d.metadata.generation.unwrap_or(0);

    if available >= desired - max_unavailable {
        set_condition(
            &mut conditions,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
            false,
        );
    } else {
        set_condition(
            &mut conditions,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            false,
        );
    }

    let old = d.status.clone().unwrap_or_default();
    let complete = updated == desired && replicas == desired && available == desired;
    let new_name = sets
        .new
        .as_ref()
        .map(|rs| rs.name_any())
        .unwrap_or_default();
    if !paused {
        let already_complete = replicas == updated
            && condition(&conditions, "Progressing").and_then(|c| c.reason.as_deref())
                == Some("NewReplicaSetAvailable");
        if !already_complete {
            let progressing = updated > old.updated_replicas.unwrap_or(0)
                || (replicas - updated)
                    < (old.replicas.unwrap_or(0) - old.updated_replicas.unwrap_or(0))
                || ready > old.ready_replicas.unwrap_or(0)
                || available > old.available_replicas.unwrap_or(0);
            if complete {
                set_condition(
                    &mut conditions,
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    format!("ReplicaSet {new_name:?} has successfully progressed."),
                    false,
                );
            } else if progressing {
                set_condition(
                    &mut conditions,
                    "Progressing",
                    "True",
                    "ReplicaSetUpdated",
                    format!("ReplicaSet {new_name:?} is progressing."),
                    true,
                );
            } else if let Some(current) = condition(&conditions, "Progressing") {
                let timed_out = current.reason.as_deref() == Some("ProgressDeadlineExceeded")
                    || current
                        .last_update_time
                        .as_ref()
                        .is_some_and(|t| t.0.as_second() + i64::from(deadline) < now_secs());
                if timed_out {
                    set_condition(
                        &mut conditions,
                        "Progressing",
                        "False",
                        "ProgressDeadlineExceeded",
                        format!("ReplicaSet {new_name:?} has timed out progressing."),
                        false,
                    );
                }
            }
        }
    }

    let recheck = match condition(&conditions, "Progressing") {
        Some(c)
            if !complete
                && !paused
                && c.status == "True"
                && c.reason.as_deref() != Some("NewReplicaSetAvailable") =>
        {
            let updated_at = c
                .last_update_time
                .as_ref()
                .map_or(now_secs(), |t| t.0.as_second());
            let left = (updated_at + i64::from(deadline) - now_secs()).max(0) as u64;
            Some(Duration::from_secs(left + 1))
        }
        _ => None,
    };
    let new_status = DeploymentStatus {
        observed_generation: Some(generation),
        replicas: Some(replicas),
        updated_replicas: Some(updated),
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        unavailable_replicas: Some(unavailable),
        conditions: Some(conditions),
        collision_count: old.collision_count,
        terminating_replicas: old.terminating_replicas,
    };
    let namespace = d.namespace().unwrap_or_default();
    let name = d.name_any();
    if d.status.as_ref() != Some(&new_status) {
        let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
        let body = json!({"status": {
            "observedGeneration": generation,
            "replicas": replicas,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": available,
            "unavailableReplicas": unavailable,
            "conditions": new_status.conditions,
        }});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .with_context(|| format!("writing status of deployment {namespace}/{name}"))?;
    }

    // The Deployment carries its new ReplicaSet's revision.
    if let Some(new) = sets.new.as_ref() {
        let revision = revision_of(&new.metadata);
        if revision > 0 && revision_of(&d.metadata) != revision {
            let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
            let patch =
                json!({"metadata": {"annotations": {REVISION_ANNOTATION: revision.to_string()}}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("annotating revision of deployment {namespace}/{name}"))?;
        }
    }
    Ok((complete && !paused, recheck))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        assert_eq!(resolve_fenceposts(None, None, 10).unwrap(), (3, 2));
        assert_eq!(resolve_fenceposts(None, None, 4).unwrap(), (1, 1));
        assert_eq!(resolve_fenceposts(None, None, 1).unwrap(), (1, 0));
        assert_eq!(
            resolve_fenceposts(Some(&pct("0%")), Some(&pct("0%")), 10).unwrap(),
            (0, 1)
        );
        assert_eq!(
            resolve_fenceposts(Some(&IntOrString::Int(2)), Some(&IntOrString::Int(0)), 3).unwrap(),
            (2, 0)
        );
        assert_eq!(
            resolve_fenceposts(Some(&pct("50%")), Some(&pct("50%")), 5).unwrap(),
            (3, 2)
        );
        assert!(resolve_fenceposts(Some(&pct("abc")), None, 3).is_err());
        assert!(resolve_fenceposts(Some(&IntOrString::String("3".into())), None, 3).is_err());
    }

    #[test]
    fn new_replicaset_grows_within_surge() {
        // 3 replicas, surge 1: old RS at 3 → new may take 1.
        assert_eq!(new_rs_replicas(3, 1, 3, 0), 1);
        // At the ceiling already: unchanged.
        assert_eq!(new_rs_replicas(3, 1, 4, 1), 1);
        // Plain scale-up with a single RS.
        assert_eq!(new_rs_replicas(5, 2, 3, 3), 5);
    }

    fn template(image: &str) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".to_string(), "web".to_string())].into()),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "web".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }
    }

    #[test]
    fn template_hash_is_stable_and_ignores_its_own_label() {
        let a = template("nginx:1");
        let h = template_hash(&a, None);
        assert_eq!(h, template_hash(&template("nginx:1"), None));
        assert!(!h.is_empty() && h.len() <= 10);
        assert!(
            h.bytes()
                .all(|b| super::super::workload::SAFE_ALPHABET.contains(&b))
        );
        assert_ne!(h, template_hash(&template("nginx:2"), None));
        assert_ne!(h, template_hash(&a, Some(1)));
        let mut labeled = a.clone();
        labeled
            .metadata
            .as_mut()
            .and_then(|m| m.labels.as_mut())
            .map(|l| l.insert(HASH_LABEL.into(), h.clone()));
        assert_eq!(template_hash(&labeled, None), h);
        assert!(same_template(&labeled, &a));
    }
}
