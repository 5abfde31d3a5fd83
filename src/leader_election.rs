//! Leader election through a `coordination.k8s.io/v1` Lease (client-go's resource lock
//! semantics, simplified): acquire when the lease is free or its holder stopped renewing
//! for `lease_duration` (measured on our clock, from when we last saw the record change),
//! renew every `retry_period`, and step down when renewing fails for `renew_deadline`.
//! Writes are compare-and-swap on the Lease's resourceVersion.
//!
//! [`run_while_leading`] runs a component (the controller-manager, the scheduler) only on
//! the server that holds its Lease, in a tokio runtime of its own: on losing the lease
//! that runtime is dropped, and every task, watch and cache of the component with it, so
//! a server that stepped down stops acting at once and a standby holds no caches. Each
//! change is logged and recorded as a `LeaderElection` Event on the Lease, as kube's
//! components do ("<identity> became leader", "<identity> stopped leading").
//!
//! Reaches the cluster only through the API (the client it is given).

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

impl LeaderConfig {
    /// Lease `kube-system/<name>` with kube's defaults (lease 15 s, renew deadline 10 s,
    /// retry 2 s) and a fresh identity `<hostname>_<random>`, as kube components use.
    pub fn kube_defaults(name: &str) -> LeaderConfig {
        LeaderConfig {
            namespace: "kube-system".into(),
            name: name.into(),
            identity: identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// [`LeaderConfig::kube_defaults`] with a server's stable identity
    /// ([`server_identity`] of `node_name`).
    pub fn for_server(name: &str, node_name: &str) -> LeaderConfig {
        LeaderConfig {
            identity: server_identity(node_name),
            ..LeaderConfig::kube_defaults(name)
        }
    }
}

/// `<hostname>_<16 hex digits>`: unique per process, readable in `kubectl get lease`.
pub fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "k3rs".into());
    let mut bytes = [0u8; 8];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        bytes = (nanos ^ u64::from(std::process::id())).to_le_bytes();
    }
    format!("{host}_{}", hex::encode(bytes))
}

/// The identity of a server's components: its node name, the same across restarts (node
/// names are unique in a cluster, and one data dir runs one process). A server restarted
/// after a crash so finds its own lease and leads again at once, instead of waiting out
/// the lease its previous run held.
pub fn server_identity(node_name: &str) -> String {
    format!("{node_name}_k3rs")
}

/// How long ago (by this machine's clock) `renewed` was; zero if it is in the future.
fn renewal_age(renewed: &MicroTime, now: std::time::SystemTime) -> Duration {
    let nanos = renewed.0.as_nanosecond();
    let Ok(nanos) = u64::try_from(nanos) else {
        return Duration::ZERO;
    };
    let renewed = std::time::UNIX_EPOCH + Duration::from_nanos(nanos);
    now.duration_since(renewed).unwrap_or_default()
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
        let leading = *leader.borrow();
        tokio::time::sleep(pause(&cfg, &observed, leading, Instant::now())).await;
    }
}

/// How long to wait before the next try: the retry period, except that a standby tries
/// again just as the holder's lease (as observed here) runs out rather than up to a retry
/// period later — a dead holder is replaced 15 s after its last renewal, not 17.
fn pause(cfg: &LeaderConfig, observed: &Observed, leading: bool, now: Instant) -> Duration {
    if leading || observed.record.is_none() {
        return cfg.retry_period;
    }
    let expires = observed.at + cfg.lease_duration;
    if expires > now {
        cfg.retry_period
            .min(expires - now + Duration::from_millis(5))
    } else {
        cfg.retry_period
    }
}

/// Runs the component `start` makes while this process holds the lease `cfg`, in a
/// runtime of its own named `thread_name` that is dropped (with everything the component
/// spawned) when the lease is lost; then waits to lead again. `event_source` is the
/// component name on the `LeaderElection` Events. Runs until its task is dropped.
pub async fn run_while_leading<S, F>(
    client: kube::Client,
    cfg: LeaderConfig,
    event_source: &'static str,
    thread_name: &'static str,
    start: S,
) where
    S: Fn() -> F + Send + 'static,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (leader_tx, mut leader) = watch::channel(false);
    // Aborted when this future is dropped, so the lease is no longer renewed.
    let mut election = tokio::task::JoinSet::new();
    election.spawn(run(client.clone(), cfg.clone(), leader_tx));
    let recorder = crate::controllers::events::Recorder::new(client, event_source);
    loop {
        while !*leader.borrow_and_update() {
            if leader.changed().await.is_err() {
                return;
            }
        }
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(thread_name)
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                // Without a runtime the component cannot run here: give the lease up by
                // not acting; the election keeps renewing, so log loudly and retry.
                tracing::error!(lease = %cfg.name, error = %e, "cannot start a runtime for the component; retrying");
                tokio::time::sleep(cfg.retry_period).await;
                continue;
            }
        };
        tracing::info!(lease = %cfg.name, identity = %cfg.identity, "leading: starting {event_source}");
        let started = Instant::now();
        runtime.spawn(start());
        record(&recorder, &cfg, "became leader").await;
        while *leader.borrow_and_update() {
            if leader.changed().await.is_err() {
                break;
            }
        }
        // Every task of the component ends here, before anything else happens.
        runtime.shutdown_background();
        tracing::warn!(
            lease = %cfg.name,
            led_s = started.elapsed().as_secs(),
            "stopped leading: {event_source} stopped"
        );
        record(&recorder, &cfg, "stopped leading").await;
    }
}

/// A `LeaderElection` Event on the Lease, as client-go's resource lock records it.
async fn record(recorder: &crate::controllers::events::Recorder, cfg: &LeaderConfig, what: &str) {
    let subject = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("coordination.k8s.io/v1".into()),
        kind: Some("Lease".into()),
        name: Some(cfg.name.clone()),
        namespace: Some(cfg.namespace.clone()),
        ..Default::default()
    };
    let message = format!("{} {what}", cfg.identity);
    // Bounded: a server that lost its lease because the API is unreachable must not wait
    // here before it can lead again.
    let _ = tokio::time::timeout(
        cfg.retry_period,
        recorder.record(
            &subject,
            crate::controllers::events::EventType::Normal,
            "LeaderElection",
            &message,
        ),
    )
    .await;
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
        // Seen now, but renewed up to a retry period earlier (this server reads every
        // 2 s): count from the renewal as the record's renewTime dates it, trusting that
        // clock only back to one retry period (a holder whose clock is behind cannot
        // make us count more than 2 s early, well inside the 5 s between its renew
        // deadline and the lease's end, so it has stepped down first).
        let lag = spec
            .renew_time
            .as_ref()
            .map(|t| renewal_age(t, std::time::SystemTime::now()))
            .unwrap_or_default()
            .min(cfg.retry_period);
        observed.record = Some(record);
        let now = Instant::now();
        observed.at = now.checked_sub(lag).unwrap_or(now);
    }
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let ours = holder == cfg.identity;
    let their_duration =
        Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
    if !ours && !holder.is_empty() && observed.at.elapsed() < their_duration {
        tracing::debug!(lease = %cfg.name, %holder, held_for = ?observed.at.elapsed(), "the lease is held");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_tries_again_as_the_observed_lease_runs_out() {
        let cfg = LeaderConfig::kube_defaults("test");
        let now = Instant::now();
        let seen = |ago: Duration| Observed {
            record: Some((Some("other".into()), None)),
            at: now - ago,
        };
        // Far from expiry: the retry period.
        assert_eq!(
            pause(&cfg, &seen(Duration::from_secs(1)), false, now),
            cfg.retry_period
        );
        // 0.5 s before expiry: just after it, not 2 s later.
        let wait = pause(&cfg, &seen(Duration::from_millis(14_500)), false, now);
        assert!(
            wait >= Duration::from_millis(500) && wait < Duration::from_millis(600),
            "{wait:?}"
        );
        // Expired (acquiring failed): back to the retry period, no busy loop.
        assert_eq!(
            pause(&cfg, &seen(Duration::from_secs(20)), false, now),
            cfg.retry_period
        );
        // A renewal's age comes from its timestamp; one from the future counts as now.
        let wall = std::time::SystemTime::now();
        let at = |secs_ago: i64| {
            MicroTime(
                k8s_openapi::jiff::Timestamp::from_second(
                    wall.duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_secs() as i64
                        - secs_ago,
                )
                .unwrap(),
            )
        };
        let age = renewal_age(&at(1), wall);
        assert!(
            age >= Duration::from_secs(1) && age < Duration::from_secs(2),
            "{age:?}"
        );
        assert_eq!(renewal_age(&at(-5), wall), Duration::ZERO);
        // The holder renews at its own pace.
        assert_eq!(
            pause(&cfg, &seen(Duration::from_millis(14_500)), true, now),
            cfg.retry_period
        );
    }
}
