//! Leader election through a `coordination.k8s.io/v1` Lease (client-go's resource lock
//! semantics, simplified): acquire when the lease is free or its holder stopped renewing
//! for `lease_duration` (measured on our clock, from when we last saw the record change),
//! renew every `retry_period`, and step down when renewing fails for `renew_deadline`.
//! Writes are compare-and-swap on the Lease's resourceVersion.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

fn now() -> MicroTime {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    MicroTime(
        k8s_openapi::jiff::Timestamp::new(t.as_secs() as i64, t.subsec_nanos() as i32)
            .unwrap_or_default(),
    )
}

struct Observed {
    record: Option<(Option<String>, Option<MicroTime>)>,
    at: Instant,
}

/// Keeps `leader` up to date forever.
pub async fn run(client: kube::Client, cfg: LeaderConfig, leader: watch::Sender<bool>) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut observed = Observed {
        record: None,
        at: Instant::now(),
    };
    let mut last_renew: Option<Instant> = None;
    loop {
        match try_acquire_or_renew(&api, &cfg, &mut observed).await {
            Ok(true) => {
                last_renew = Some(Instant::now());
                if !*leader.borrow() {
                    tracing::info!(identity = %cfg.identity, lease = %cfg.name, "became leader");
                }
                leader.send_replace(true);
            }
            Ok(false) => {
                if *leader.borrow() {
                    tracing::warn!(lease = %cfg.name, "lost the lease to another holder");
                }
                last_renew = None;
                leader.send_replace(false);
            }
            Err(e) => {
                tracing::warn!(lease = %cfg.name, error = %format!("{e:#}"), "leader election");
                if last_renew.is_none_or(|t| t.elapsed() > cfg.renew_deadline) && *leader.borrow() {
                    tracing::warn!(lease = %cfg.name, "could not renew the lease in time; stepping down");
                    leader.send_replace(false);
                }
            }
        }
        tokio::time::sleep(cfg.retry_period).await;
    }
}

async fn try_acquire_or_renew(
    api: &Api<Lease>,
    cfg: &LeaderConfig,
    observed: &mut Observed,
) -> anyhow::Result<bool> {
    use anyhow::Context;
    let duration_secs = cfg.lease_duration.as_secs().max(1) as i32;
    let existing = api
        .get_opt(&cfg.name)
        .await
        .with_context(|| format!("reading lease {}/{}", cfg.namespace, cfg.name))?;
    let Some(mut lease) = existing else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                namespace: Some(cfg.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(cfg.identity.clone()),
                lease_duration_seconds: Some(duration_secs),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e).context("creating the lease"),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let record = (spec.holder_identity.clone(), spec.renew_time.clone());
    if observed.record.as_ref() != Some(&record) {
        observed.record = Some(record);
        observed.at = Instant::now();
    }
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let ours = holder == cfg.identity;
    let their_duration =
        Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
    if !ours && !holder.is_empty() && observed.at.elapsed() < their_duration {
        return Ok(false);
    }
    let mut new_spec = spec.clone();
    new_spec.holder_identity = Some(cfg.identity.clone());
    new_spec.lease_duration_seconds = Some(duration_secs);
    new_spec.renew_time = Some(now());
    if !ours {
        new_spec.acquire_time = Some(now());
        new_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    lease.spec = Some(new_spec);
    // resourceVersion from the read makes this a compare-and-swap.
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e).context("updating the lease"),
    }
}
