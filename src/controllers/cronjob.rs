//! CronJob controller: creates a Job for every time the schedule fires.
//!
//! The schedule is parsed by `crate::cron` and read in `spec.timeZone` (an IANA
//! name from the system tz database; the server's local zone when unset). Each sync
//! finds the most recent unmet schedule time after `status.lastScheduleTime` (or the
//! creation time), no further back than `startingDeadlineSeconds`; more than 100
//! missed times give kube's TooManyMissedTimes warning and only the latest runs.
//! Jobs are named `<cronjob>-<scheduled time in minutes since the epoch>` and carry
//! the `batch.kubernetes.io/cronjob-scheduled-timestamp` annotation; the name makes
//! a second creation for the same time impossible. concurrencyPolicy Allow runs
//! jobs side by side, Forbid skips a time while one is active, Replace deletes the
//! active ones first. `suspend` stops new jobs. Status keeps `active`,
//! `lastScheduleTime` and `lastSuccessfulTime`; finished jobs beyond
//! successfulJobsHistoryLimit / failedJobsHistoryLimit are deleted (background
//! propagation). Events: SuccessfulCreate, SawCompletedJob, SuccessfulDelete,
//! JobAlreadyActive, MissingJob, UnexpectedJob, TooManyMissedTimes, MissSchedule,
//! UnparseableSchedule, UnknownTimeZone. Talks only to the API (kube-rs).
//!
//! Test clock: `K3RS_CRONJOB_TIME_SCALE=<n>` (tests only) makes this controller's
//! clock run `n` times faster than real time from the moment it starts, so a
//! `* * * * *` schedule fires every `60/n` real seconds.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::StreamExt;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::{CronJob, Job, JobStatus};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::json;

use super::RETRY;
use super::events::{EventType, Recorder, reference};
use super::workload::{ReconcileError, controller_of, controller_ref};
use crate::cron::Schedule;

/// Annotation with the time a Job was scheduled for (RFC 3339 in the CronJob's zone).
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// The environment variable that speeds up this controller's clock (tests only).
pub const TIME_SCALE_ENV: &str = "K3RS_CRONJOB_TIME_SCALE";
/// More missed start times than this earn a TooManyMissedTimes warning.
const MAX_MISSED: usize = 100;

/// The controller's clock: real time, or real time sped up for tests.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Timestamp,
    scale: f64,
}

impl Clock {
    /// Real time, or sped up by `K3RS_CRONJOB_TIME_SCALE` (a positive number).
    pub fn from_env() -> Clock {
        let scale = std::env::var(TIME_SCALE_ENV)
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .unwrap_or(1.0);
        if scale != 1.0 {
            tracing::warn!(
                scale,
                "cronjob controller clock sped up ({TIME_SCALE_ENV}); for tests only"
            );
        }
        Clock {
            origin: Timestamp::now(),
            scale,
        }
    }

    pub fn now(&self) -> Timestamp {
        if self.scale == 1.0 {
            return Timestamp::now();
        }
        let real = Timestamp::now().duration_since(self.origin).as_secs_f64();
        let warped = jiff::SignedDuration::try_from_secs_f64(real * self.scale).unwrap_or_default();
        self.origin.checked_add(warped).unwrap_or(self.origin)
    }

    /// The real time to wait for `clock` time `d` to pass.
    fn real(&self, d: Duration) -> Duration {
        d.div_f64(self.scale)
    }
}

struct Context {
    client: kube::Client,
    recorder: Recorder,
    clock: Clock,
}

/// Runs the CronJob controller until the process ends.
pub async fn run(client: kube::Client) {
    let cronjobs: Api<CronJob> = Api::all(client.clone());
    let context = Arc::new(Context {
        recorder: Recorder::new(client.clone(), "cronjob-controller"),
        client: client.clone(),
        clock: Clock::from_env(),
    });
    Controller::new(cronjobs, watcher::Config::default())
        .owns(Api::<Job>::all(client), watcher::Config::default())
        .run(
            |cj, ctx| super::workload::guarded("cronjob", reconcile(cj, ctx)),
            error_policy,
            context,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "cronjob reconcile failed");
            }
        })
        .await;
}

fn error_policy(cj: Arc<CronJob>, error: &ReconcileError, _: Arc<Context>) -> Action {
    tracing::warn!(cronjob = %cj.name_any(), namespace = ?cj.namespace(), error = %error, "cronjob sync failed; retrying");
    Action::requeue(RETRY)
}

// ---------------------------------------------------------------------------------
// Pure helpers.

/// The Job name for a scheduled time: `<cronjob>-<minutes since the epoch>`.
pub fn job_name(cronjob: &str, scheduled: Timestamp) -> String {
    format!("{cronjob}-{}", scheduled.as_second().div_euclid(60))
}

/// The outcome of looking for a schedule time to run.
#[derive(Debug, PartialEq)]
pub struct Due {
    /// The most recent unmet schedule time, if one has passed.
    pub time: Option<Timestamp>,
    /// How many schedule times were missed (including `time`), capped at
    /// `MAX_MISSED + 1`.
    pub missed: usize,
    /// The next schedule time after `now`.
    pub next: Option<Timestamp>,
}

/// kube's `mostRecentScheduleTime`: the latest schedule time in `(earliest, now]`,
/// where `earliest` is the last schedule time (or creation), moved up to
/// `now - startingDeadlineSeconds` when that is later.
pub fn most_recent(
    schedule: &Schedule,
    tz: &TimeZone,
    earliest: Timestamp,
    now: Timestamp,
    starting_deadline: Option<i64>,
) -> Due {
    let mut earliest = earliest;
    if let Some(deadline) = starting_deadline {
        let limit = now
            .checked_sub(jiff::SignedDuration::from_secs(deadline.max(0)))
            .unwrap_or(now);
        if limit > earliest {
            earliest = limit;
        }
    }
    let next = schedule.next_after(now, tz);
    let Some(first) = schedule.next_after(earliest, tz).filter(|t| *t <= now) else {
        return Due {
            time: None,
            missed: 0,
            next,
        };
    };
    // Count forward a bounded number of times; past that, find the latest time by
    // searching windows ending at `now` (a missed year of `* * * * *` is 500k times).
    let mut missed = 1;
    let mut latest = first;
    while missed <= MAX_MISSED {
        match schedule.next_after(latest, tz).filter(|t| *t <= now) {
            Some(t) => {
                latest = t;
                missed += 1;
            }
            None => {
                return Due {
                    time: Some(latest),
                    missed,
                    next,
                };
            }
        }
    }
    for window in [
        3_600i64,
        86_400,
        32 * 86_400,
        367 * 86_400,
        10 * 367 * 86_400,
    ] {
        let start = now
            .checked_sub(jiff::SignedDuration::from_secs(window))
            .unwrap_or(earliest)
            .max(latest);
        let mut found = None;
        let mut cursor = start;
        while let Some(t) = schedule.next_after(cursor, tz).filter(|t| *t <= now) {
            found = Some(t);
            cursor = t;
        }
        if let Some(t) = found {
            latest = t;
            break;
        }
    }
    Due {
        time: Some(latest),
        missed,
        next,
    }
}

fn finished_condition(status: Option<&JobStatus>) -> Option<&'static str> {
    let conditions = status?.conditions.as_ref()?;
    ["Complete", "Failed"].into_iter().find(|t| {
        conditions
            .iter()
            .any(|c| c.type_ == *t && c.status == "True")
    })
}

fn to_timestamp(time: &Time) -> Timestamp {
    Timestamp::from_second(time.0.as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn to_time(t: Timestamp) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(t.as_second()).unwrap_or_default())
}

/// Time until `t` on the controller clock, at least one second.
fn until(clock: &Clock, now: Timestamp, t: Timestamp) -> Duration {
    let secs = t.duration_since(now).as_secs_f64().max(0.0);
    clock
        .real(Duration::from_secs_f64(secs))
        .max(Duration::from_millis(100))
}

// ---------------------------------------------------------------------------------
// Reconcile.

async fn reconcile(cj: Arc<CronJob>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    // The cache may not show our last status write yet (status.active and
    // lastScheduleTime decide what runs next), so read the CronJob fresh.
    let namespace = cj.namespace().context("cronjob has no namespace")?;
    let api: Api<CronJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let fresh = api
        .get_opt(&cj.name_any())
        .await
        .with_context(|| format!("reading cronjob {namespace}/{}", cj.name_any()))?;
    match fresh {
        Some(cj) => Ok(sync(&cj, &ctx).await?),
        None => Ok(Action::await_change()),
    }
}

async fn sync(cj: &CronJob, ctx: &Context) -> anyhow::Result<Action> {
    let namespace = cj.namespace().context("cronjob has no namespace")?;
    let name = cj.name_any();
    let uid = cj.uid().context("cronjob has no uid")?;
    let jobs_api: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let cj_api: Api<CronJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let object = reference(cj);

    let jobs: Vec<Job> = jobs_api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing jobs in {namespace} for cronjob {name}"))?
        .items
        .into_iter()
        .filter(|j| controller_of(&j.metadata).is_some_and(|o| o.uid == uid))
        .collect();

    // Reconcile status.active with the jobs that exist.
    let status = cj.status.clone().unwrap_or_default();
    let mut active: Vec<ObjectReference> = status.active.clone().unwrap_or_default();
    let mut last_successful = status.last_successful_time.as_ref().map(to_timestamp);
    for job in &jobs {
        let job_uid = job.metadata.uid.clone();
        let listed = active.iter().any(|r| r.uid == job_uid);
        let done = finished_condition(job.status.as_ref());
        match (listed, done) {
            (false, None) if job.metadata.deletion_timestamp.is_none() => {
                ctx.recorder
                    .record(
                        &object,
                        EventType::Warning,
                        "UnexpectedJob",
                        &format!(
                            "Saw a job that the controller did not create or forgot: {}",
                            job.name_any()
                        ),
                    )
                    .await;
                active.push(job_reference(job));
            }
            (true, Some(condition)) => {
                active.retain(|r| r.uid != job_uid);
                ctx.recorder
                    .record(
                        &object,
                        EventType::Normal,
                        "SawCompletedJob",
                        &format!(
                            "Saw completed job: {}, condition: {condition}",
                            job.name_any()
                        ),
                    )
                    .await;
            }
            _ => {}
        }
        if done == Some("Complete")
            && let Some(done_at) = job.status.as_ref().and_then(|s| s.completion_time.as_ref())
        {
            let done_at = to_timestamp(done_at);
            if last_successful.is_none_or(|t| t < done_at) {
                last_successful = Some(done_at);
            }
        }
    }
    let missing: Vec<ObjectReference> = active
        .iter()
        .filter(|r| !jobs.iter().any(|j| j.metadata.uid == r.uid))
        .cloned()
        .collect();
    for gone in missing {
        ctx.recorder
            .record(
                &object,
                EventType::Normal,
                "MissingJob",
                &format!(
                    "Active job went missing: {}",
                    gone.name.clone().unwrap_or_default()
                ),
            )
            .await;
        active.retain(|r| r.uid != gone.uid);
    }

    let mut last_schedule = status.last_schedule_time.as_ref().map(to_timestamp);
    let result = schedule_step(ctx, cj, &jobs_api, &object, &mut active, &mut last_schedule).await;

    // Status, whatever the step decided.
    let changed_active = status
        .active
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|r| &r.uid)
        .collect::<Vec<_>>()
        != active.iter().map(|r| &r.uid).collect::<Vec<_>>();
    let changed = changed_active
        || status.last_schedule_time.as_ref().map(to_timestamp) != last_schedule
        || status.last_successful_time.as_ref().map(to_timestamp) != last_successful;
    if changed && cj.metadata.deletion_timestamp.is_none() {
        // Only what changed, under the resourceVersion we read: a concurrent writer
        // makes this a conflict instead of a lost update.
        let mut changes = serde_json::Map::new();
        if changed_active {
            changes.insert(
                "active".into(),
                if active.is_empty() {
                    json!(null)
                } else {
                    json!(active)
                },
            );
        }
        if status.last_schedule_time.as_ref().map(to_timestamp) != last_schedule {
            changes.insert("lastScheduleTime".into(), json!(last_schedule.map(to_time)));
        }
        if status.last_successful_time.as_ref().map(to_timestamp) != last_successful {
            changes.insert(
                "lastSuccessfulTime".into(),
                json!(last_successful.map(to_time)),
            );
        }
        let patch = json!({
            "metadata": {"resourceVersion": cj.metadata.resource_version},
            "status": changes,
        });
        match cj_api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Action::await_change()),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                return Ok(Action::requeue(Duration::from_millis(200)));
            }
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("writing status of cronjob {namespace}/{name}")));
            }
        }
    }

    cleanup_history(ctx, cj, &jobs_api, &object, &jobs, &active).await;
    result
}

/// Decides whether a Job is due now and creates it; returns when to look again.
async fn schedule_step(
    ctx: &Context,
    cj: &CronJob,
    jobs_api: &Api<Job>,
    object: &ObjectReference,
    active: &mut Vec<ObjectReference>,
    last_schedule: &mut Option<Timestamp>,
) -> anyhow::Result<Action> {
    if cj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = cj.name_any();
    let spec = cj.spec.clone().unwrap_or_default();
    let tz = match spec.time_zone.as_deref() {
        Some(zone) => match TimeZone::get(zone) {
            Ok(tz) => tz,
            Err(e) => {
                ctx.recorder
                    .record(
                        object,
                        EventType::Warning,
                        "UnknownTimeZone",
                        &format!("invalid timeZone: {zone:?}: {e}"),
                    )
                    .await;
                return Ok(Action::await_change());
            }
        },
        None => TimeZone::system(),
    };
    let schedule = match Schedule::parse(&spec.schedule) {
        Ok(s) => s,
        Err(e) => {
            ctx.recorder
                .record(
                    object,
                    EventType::Warning,
                    "UnparseableSchedule",
                    &format!("unparseable schedule: {:?} : {e}", spec.schedule),
                )
                .await;
            return Ok(Action::await_change());
        }
    };
    if spec.suspend.unwrap_or(false) {
        return Ok(Action::await_change());
    }
    let now = ctx.clock.now();
    let created = cj
        .metadata
        .creation_timestamp
        .as_ref()
        .map(to_timestamp)
        .unwrap_or(now);
    let earliest = last_schedule.unwrap_or(created);
    let due = most_recent(
        &schedule,
        &tz,
        earliest,
        now,
        spec.starting_deadline_seconds,
    );
    let again = |next: Option<Timestamp>| match next {
        Some(t) => Action::requeue(until(&ctx.clock, now, t)),
        None => Action::await_change(),
    };
    let Some(scheduled) = due.time else {
        return Ok(again(due.next));
    };
    if due.missed > MAX_MISSED {
        ctx.recorder
            .record(
                object,
                EventType::Warning,
                "TooManyMissedTimes",
                &format!(
                    "too many missed start times: {}. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
                    due.missed
                ),
            )
            .await;
    }
    if let Some(deadline) = spec.starting_deadline_seconds
        && scheduled.as_second() + deadline < now.as_second()
    {
        ctx.recorder
            .record(
                object,
                EventType::Warning,
                "MissSchedule",
                &format!(
                    "Missed scheduled time to start a job: {}",
                    scheduled.strftime("%a, %d %b %Y %H:%M:%S %z")
                ),
            )
            .await;
        return Ok(again(due.next));
    }
    let job_name = job_name(&name, scheduled);
    if active
        .iter()
        .any(|r| r.name.as_deref() == Some(job_name.as_str()))
    {
        return Ok(again(due.next));
    }
    match spec.concurrency_policy.as_deref() {
        Some("Forbid") if !active.is_empty() => {
            ctx.recorder
                .record(
                    object,
                    EventType::Normal,
                    "JobAlreadyActive",
                    "Not starting job because prior execution is running and concurrency policy is Forbid",
                )
                .await;
            return Ok(again(due.next));
        }
        Some("Replace") => {
            for job in active.clone() {
                let job_ref_name = job.name.clone().unwrap_or_default();
                match jobs_api
                    .delete(&job_ref_name, &DeleteParams::background())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => {
                        return Err(anyhow::Error::new(e)
                            .context(format!("deleting job {job_ref_name} to replace it")));
                    }
                }
                ctx.recorder
                    .record(
                        object,
                        EventType::Normal,
                        "SuccessfulDelete",
                        &format!("Deleted job {job_ref_name}"),
                    )
                    .await;
                active.retain(|r| r.uid != job.uid);
            }
        }
        _ => {}
    }
    let job = job_from_template(cj, &job_name, scheduled, &tz)?;
    match jobs_api.create(&PostParams::default(), &job).await {
        Ok(created) => {
            ctx.recorder
                .record(
                    object,
                    EventType::Normal,
                    "SuccessfulCreate",
                    &format!("Created job {job_name}"),
                )
                .await;
            active.push(job_reference(&created));
            *last_schedule = Some(scheduled);
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            // Already created for this time (a lagging status): just record the time.
            *last_schedule = Some(scheduled);
        }
        Err(e) => {
            ctx.recorder
                .record(
                    object,
                    EventType::Warning,
                    "FailedCreate",
                    &format!("Error creating job: {e}"),
                )
                .await;
            return Err(anyhow::Error::new(e).context(format!("creating job {job_name}")));
        }
    }
    Ok(again(due.next))
}

fn job_reference(job: &Job) -> ObjectReference {
    let mut r = reference(job);
    r.api_version = Some("batch/v1".into());
    r.kind = Some("Job".into());
    r
}

/// The Job for `scheduled` from the CronJob's jobTemplate.
fn job_from_template(
    cj: &CronJob,
    job_name: &str,
    scheduled: Timestamp,
    tz: &TimeZone,
) -> anyhow::Result<Job> {
    let template = cj
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(
        SCHEDULED_TIMESTAMP.into(),
        scheduled
            .to_zoned(tz.clone())
            .strftime("%Y-%m-%dT%H:%M:%S%:z")
            .to_string()
            .replace("+00:00", "Z"),
    );
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(job_name.to_string()),
            namespace: cj.namespace(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![
                controller_ref(cj).context("cronjob without name or uid")?,
            ]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    })
}

/// Deletes the oldest finished jobs beyond the history limits.
async fn cleanup_history(
    ctx: &Context,
    cj: &CronJob,
    jobs_api: &Api<Job>,
    object: &ObjectReference,
    jobs: &[Job],
    active: &[ObjectReference],
) {
    let spec = cj.spec.clone().unwrap_or_default();
    for (condition, limit) in [
        ("Complete", spec.successful_jobs_history_limit),
        ("Failed", spec.failed_jobs_history_limit),
    ] {
        let Some(limit) = limit else { continue };
        let mut finished: Vec<&Job> = jobs
            .iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .filter(|j| !active.iter().any(|r| r.uid == j.metadata.uid))
            .filter(|j| finished_condition(j.status.as_ref()) == Some(condition))
            .collect();
        let limit = usize::try_from(limit.max(0)).unwrap_or(0);
        if finished.len() <= limit {
            continue;
        }
        finished.sort_by_key(|j| {
            j.status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .or(j.metadata.creation_timestamp.as_ref())
                .map(|t| t.0.as_second())
        });
        for job in &finished[..finished.len() - limit] {
            let job_name = job.name_any();
            match jobs_api
                .delete(&job_name, &DeleteParams::background())
                .await
            {
                Ok(_) => {
                    ctx.recorder
                        .record(
                            object,
                            EventType::Normal,
                            "SuccessfulDelete",
                            &format!("Deleted job {job_name}"),
                        )
                        .await
                }
                Err(e) => tracing::debug!(job = %job_name, error = %e, "could not delete old job"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn job_names_are_minutes_since_the_epoch() {
        assert_eq!(
            job_name("hello", ts("2024-01-01T00:01:00Z")),
            "hello-28401121"
        );
    }

    #[test]
    fn most_recent_time_and_missed_count() {
        let every_minute = Schedule::parse("* * * * *").expect("schedule");
        let utc = TimeZone::UTC;
        // Nothing due yet.
        let due = most_recent(
            &every_minute,
            &utc,
            ts("2024-01-01T00:00:10Z"),
            ts("2024-01-01T00:00:50Z"),
            None,
        );
        assert_eq!(due.time, None);
        assert_eq!(due.next, Some(ts("2024-01-01T00:01:00Z")));
        // Three missed; the latest runs.
        let due = most_recent(
            &every_minute,
            &utc,
            ts("2024-01-01T00:00:00Z"),
            ts("2024-01-01T00:03:30Z"),
            None,
        );
        assert_eq!(due.time, Some(ts("2024-01-01T00:03:00Z")));
        assert_eq!(due.missed, 3);
        // A day missed: too many, but the latest is still found quickly.
        let due = most_recent(
            &every_minute,
            &utc,
            ts("2024-01-01T00:00:00Z"),
            ts("2024-01-02T00:00:30Z"),
            None,
        );
        assert_eq!(due.time, Some(ts("2024-01-02T00:00:00Z")));
        assert!(due.missed > MAX_MISSED);
        // startingDeadlineSeconds bounds how far back we look.
        let due = most_recent(
            &every_minute,
            &utc,
            ts("2024-01-01T00:00:00Z"),
            ts("2024-01-02T00:00:30Z"),
            Some(200),
        );
        assert_eq!(due.time, Some(ts("2024-01-02T00:00:00Z")));
        assert_eq!(due.missed, 3);
    }

    #[test]
    fn time_zones_shift_the_schedule() {
        let nine = Schedule::parse("0 9 * * *").expect("schedule");
        let berlin = TimeZone::get("Europe/Berlin").expect("tz database (install tzdata)");
        let due = most_recent(
            &nine,
            &berlin,
            ts("2024-06-01T00:00:00Z"),
            ts("2024-06-01T07:30:00Z"),
            None,
        );
        assert_eq!(due.time, Some(ts("2024-06-01T07:00:00Z")));
    }

    #[test]
    fn scheduled_timestamp_annotation_uses_the_zone() {
        let cj: CronJob = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "default", "uid": "u"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"metadata": {"labels": {"a": "b"}},
                "spec": {"template": {"spec": {"containers": []}}}}}
        }))
        .expect("cronjob");
        let utc =
            job_from_template(&cj, "c-1", ts("2024-01-01T00:01:00Z"), &TimeZone::UTC).expect("job");
        let annotations = utc.metadata.annotations.expect("annotations");
        assert_eq!(annotations[SCHEDULED_TIMESTAMP], "2024-01-01T00:01:00Z");
        let tokyo = TimeZone::get("Asia/Tokyo").expect("tz database (install tzdata)");
        let job = job_from_template(&cj, "c-1", ts("2024-01-01T00:01:00Z"), &tokyo).expect("job");
        assert_eq!(
            job.metadata.annotations.expect("a")[SCHEDULED_TIMESTAMP],
            "2024-01-01T09:01:00+09:00"
        );
        assert_eq!(job.metadata.labels.expect("labels")["a"], "b");
    }
}
