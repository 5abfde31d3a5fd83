//! The scheduler: binds pending Pods to Nodes, as kube-scheduler's default profile does
//! (the subset listed in issue 4).
//!
//! Owns: the scheduling queue (with back-off), its cache of Nodes and of the Pods bound
//! to each node (plus pods it has just bound — "assumed" — until the watch confirms
//! them), the `kube-system/kube-scheduler` Lease, and the `Scheduled` /
//! `FailedScheduling` Events and `PodScheduled` condition of the pods it handles.
//!
//! May not touch: the store (it is an API client only, through kube-rs with the
//! `system:kube-scheduler` identity), pods of other schedulers, pods already bound.
//!
//! Layout: `quantity` parses resource quantities, `framework` is the pure algorithm
//! (filters, scores, FitError wording), `leader` the Lease election; this file wires
//! watches, the queue and the API writes.

pub mod framework;
pub mod leader;
pub mod quantity;

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{Notify, Semaphore, watch};

use crate::controllers::events::{EventType, Recorder, reference};
use framework::{Cache, FitError, PodInfo, pod_key};

/// The scheduler name pods opt into (`spec.schedulerName`).
pub const SCHEDULER_NAME: &str = "default-scheduler";

/// How long a pod we bound may stay unconfirmed by the watch before we forget it.
const ASSUME_TTL: Duration = Duration::from_secs(30);

/// Tunables; [`Config::default`] matches kube-scheduler.
#[derive(Clone, Debug)]
pub struct Config {
    pub leader: leader::LeaderConfig,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Bindings in flight at once.
    pub parallel_binds: usize,
}

impl Default for Config {
    fn default() -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "k3rs".into());
        Config {
            leader: leader::LeaderConfig {
                namespace: "kube-system".into(),
                name: "kube-scheduler".into(),
                identity: format!("{host}_{:016x}", random_u64()),
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
            },
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            parallel_binds: 32,
        }
    }
}

fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish()
}

/// A small xorshift generator for tie breaking.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

struct Backoff {
    attempts: u32,
    until: Instant,
}

#[derive(Default)]
struct State {
    cache: Cache,
    /// Pending pods (no nodeName, our scheduler name), by key.
    pending: HashMap<String, Arc<Pod>>,
    active: VecDeque<String>,
    in_active: HashSet<String>,
    backoff: HashMap<String, Backoff>,
    nodes_synced: bool,
    assigned_synced: bool,
    /// Keys seen during a watch re-list, to drop what vanished meanwhile.
    relist_pending: Option<HashSet<String>>,
    relist_assigned: Option<HashSet<String>>,
}

impl State {
    fn activate(&mut self, key: &str) {
        self.backoff.remove(key);
        if self.in_active.insert(key.to_string()) {
            self.active.push_back(key.to_string());
        }
    }

    /// A cluster change that may make unschedulable pods fit: retry them all now.
    fn flush_backoff(&mut self) {
        let keys: Vec<String> = self.backoff.keys().cloned().collect();
        for k in keys {
            self.activate(&k);
        }
    }

    fn next_ready(&mut self) -> Option<String> {
        let now = Instant::now();
        let due: Vec<String> = self
            .backoff
            .iter()
            .filter(|(_, b)| b.until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            self.activate(&k);
        }
        let key = self.active.pop_front()?;
        self.in_active.remove(&key);
        Some(key)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.backoff.values().map(|b| b.until).min()
    }

    fn back_off(&mut self, key: &str, initial: Duration, max: Duration) {
        let attempts = self.backoff.get(key).map(|b| b.attempts).unwrap_or(0) + 1;
        let delay = initial
            .saturating_mul(1u32 << (attempts - 1).min(16))
            .min(max);
        self.backoff.insert(
            key.to_string(),
            Backoff {
                attempts,
                until: Instant::now() + delay,
            },
        );
    }
}

struct Shared {
    state: Mutex<State>,
    wake: Notify,
    client: kube::Client,
    recorder: Recorder,
    config: Config,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent-enough data; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn is_pending_for_us(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.node_name.as_deref().unwrap_or("").is_empty()
        && spec.scheduler_name.as_deref().unwrap_or(SCHEDULER_NAME) == SCHEDULER_NAME
        && pod.metadata.deletion_timestamp.is_none()
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Runs the scheduler forever with kube-scheduler's defaults.
pub async fn run(client: kube::Client) {
    run_with(client, Config::default()).await
}

/// Runs the scheduler forever.
pub async fn run_with(client: kube::Client, config: Config) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        wake: Notify::new(),
        recorder: Recorder::new(client.clone(), SCHEDULER_NAME),
        client: client.clone(),
        config: config.clone(),
    });
    let (leader_tx, leader_rx) = watch::channel(false);
    // Owned here, so dropping (aborting) `run` stops the watches and the lease renewal.
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(leader::run(
        client.clone(),
        config.leader.clone(),
        leader_tx,
    ));
    tasks.spawn(watch_nodes(shared.clone()));
    tasks.spawn(watch_pending(shared.clone()));
    tasks.spawn(watch_assigned(shared.clone()));
    schedule_loop(shared, leader_rx).await;
    tasks.abort_all();
}

async fn watch_nodes(shared: Arc<Shared>) {
    let api: Api<Node> = Api::all(shared.client.clone());
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut relist: Option<HashSet<String>> = None;
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "node watch failed; retrying");
                continue;
            }
        };
        let mut st = shared.lock();
        let mut changed = false;
        match event {
            Event::Init => relist = Some(HashSet::new()),
            Event::InitApply(node) | Event::Apply(node) => {
                if let Some(seen) = relist.as_mut() {
                    seen.insert(node.metadata.name.clone().unwrap_or_default());
                }
                changed |= st.cache.set_node(node);
            }
            Event::Delete(node) => {
                st.cache
                    .remove_node(node.metadata.name.as_deref().unwrap_or_default());
            }
            Event::InitDone => {
                if let Some(seen) = relist.take() {
                    let gone: Vec<String> = st
                        .cache
                        .nodes
                        .keys()
                        .filter(|n| !seen.contains(*n))
                        .cloned()
                        .collect();
                    for n in gone {
                        st.cache.remove_node(&n);
                    }
                }
                st.nodes_synced = true;
                changed = true;
            }
        }
        if changed {
            st.flush_backoff();
            drop(st);
            shared.wake.notify_one();
        }
    }
}

fn apply_pending(st: &mut State, pod: Pod) {
    let key = pod_key(&pod);
    if !is_pending_for_us(&pod) {
        st.pending.remove(&key);
        st.backoff.remove(&key);
        return;
    }
    let pod = Arc::new(pod);
    let retry = match st.pending.insert(key.clone(), pod.clone()) {
        // A changed spec or a new incarnation is a new scheduling problem; a status
        // update (our own PodScheduled condition) is not.
        Some(old) => old.spec != pod.spec || old.metadata.uid != pod.metadata.uid,
        None => true,
    };
    if retry {
        st.activate(&key);
    }
}

async fn watch_pending(shared: Arc<Shared>) {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let cfg = watcher::Config::default().fields("spec.nodeName=");
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "pending pod watch failed; retrying");
                continue;
            }
        };
        let mut st = shared.lock();
        match event {
            Event::Init => st.relist_pending = Some(HashSet::new()),
            Event::InitApply(pod) => {
                let key = pod_key(&pod);
                if let Some(seen) = st.relist_pending.as_mut() {
                    seen.insert(key);
                }
                apply_pending(&mut st, pod);
            }
            Event::Apply(pod) => apply_pending(&mut st, pod),
            Event::Delete(pod) => {
                let key = pod_key(&pod);
                st.pending.remove(&key);
                st.backoff.remove(&key);
            }
            Event::InitDone => {
                if let Some(seen) = st.relist_pending.take() {
                    st.pending.retain(|k, _| seen.contains(k));
                    let State {
                        backoff, pending, ..
                    } = &mut *st;
                    backoff.retain(|k, _| pending.contains_key(k));
                }
            }
        }
        drop(st);
        shared.wake.notify_one();
    }
}

async fn watch_assigned(shared: Arc<Shared>) {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let cfg = watcher::Config::default()
        .fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed");
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "assigned pod watch failed; retrying");
                continue;
            }
        };
        let mut st = shared.lock();
        let mut freed = false;
        match event {
            Event::Init => st.relist_assigned = Some(HashSet::new()),
            Event::InitApply(pod) | Event::Apply(pod) => {
                let key = pod_key(&pod);
                if let Some(seen) = st.relist_assigned.as_mut() {
                    seen.insert(key.clone());
                }
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                if node.is_empty() || is_terminal(&pod) || pod.metadata.deletion_timestamp.is_some()
                {
                    freed |= st.cache.remove_pod(&key);
                } else {
                    st.cache.add_pod(&key, PodInfo::new(&pod, &node, true));
                }
            }
            Event::Delete(pod) => {
                freed |= st.cache.remove_pod(&pod_key(&pod));
            }
            Event::InitDone => {
                if let Some(seen) = st.relist_assigned.take() {
                    let gone: Vec<String> = st
                        .cache
                        .assigned_keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        // Keep pods we just bound that the watch has not shown yet.
                        if st.cache.assigned(&k).is_some_and(|p| p.confirmed) {
                            st.cache.remove_pod(&k);
                        }
                    }
                }
                st.assigned_synced = true;
                freed = true;
            }
        }
        if freed {
            st.flush_backoff();
            drop(st);
            shared.wake.notify_one();
        }
    }
}

async fn schedule_loop(shared: Arc<Shared>, mut leader: watch::Receiver<bool>) {
    let binds = Arc::new(Semaphore::new(shared.config.parallel_binds.max(1)));
    let mut rng = Rng(random_u64() | 1);
    let mut last_sweep = Instant::now();
    loop {
        if last_sweep.elapsed() > ASSUME_TTL {
            last_sweep = Instant::now();
            let expired = shared.lock().cache.expire_assumed(ASSUME_TTL);
            if expired > 0 {
                tracing::info!(expired, "forgot assumed pods the watch never confirmed");
            }
        }
        if !*leader.borrow_and_update() {
            tracing::debug!("not the leader; waiting");
            if leader.changed().await.is_err() {
                return;
            }
            continue;
        }
        let next = {
            let mut st = shared.lock();
            if st.nodes_synced && st.assigned_synced {
                st.next_ready().map(|k| (k, st.next_deadline()))
            } else {
                None
            }
        };
        let Some((key, _)) = next else {
            let deadline = shared.lock().next_deadline();
            let wait = deadline
                .map(|d| d.saturating_duration_since(Instant::now()))
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            tokio::select! {
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = leader.changed() => {}
            }
            continue;
        };
        schedule_one(&shared, &binds, &key, &mut rng).await;
    }
}

async fn schedule_one(shared: &Arc<Shared>, binds: &Arc<Semaphore>, key: &str, rng: &mut Rng) {
    let (pod, result) = {
        let mut st = shared.lock();
        let Some(pod) = st.pending.get(key).cloned() else {
            return;
        };
        // Already bound by us, waiting for the watch to catch up.
        if let Some(info) = st.cache.assigned(key)
            && Some(&info.uid) == pod.metadata.uid.as_ref()
        {
            return;
        }
        let result = st.cache.find_node(&pod, &mut || rng.next());
        match &result {
            Ok(node) => st.cache.add_pod(key, PodInfo::new(&pod, node, false)),
            Err(_) => {
                let cfg = &shared.config;
                st.back_off(key, cfg.initial_backoff, cfg.max_backoff);
            }
        }
        (pod, result)
    };
    match result {
        Ok(node) => {
            let Ok(permit) = binds.clone().acquire_owned().await else {
                return;
            };
            let shared = shared.clone();
            let key = key.to_string();
            tokio::spawn(async move {
                bind(&shared, &key, &pod, &node).await;
                drop(permit);
            });
        }
        Err(fit) => {
            tracing::info!(pod = %key, reason = %fit, "unschedulable");
            let shared = shared.clone();
            tokio::spawn(async move { report_unschedulable(&shared, &pod, &fit).await });
        }
    }
}

async fn bind(shared: &Arc<Shared>, key: &str, pod: &Pod, node: &str) {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), namespace);
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    };
    let result = api
        .create_subresource::<Binding, serde_json::Value>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        )
        .await
        .with_context(|| format!("binding {key} to {node}"));
    match result {
        Ok(_) => {
            tracing::debug!(pod = %key, node, "bound");
            let message = format!("Successfully assigned {namespace}/{name} to {node}");
            shared
                .recorder
                .record(&reference(pod), EventType::Normal, "Scheduled", &message)
                .await;
        }
        Err(e) => {
            let gone_or_bound = e.downcast_ref::<kube::Error>().is_some_and(
                |e| matches!(e, kube::Error::Api(s) if s.code == 404 || s.code == 409),
            );
            tracing::warn!(pod = %key, node, error = %format!("{e:#}"), "binding failed");
            let mut st = shared.lock();
            if st.cache.assigned(key).is_some_and(|p| !p.confirmed) {
                st.cache.remove_pod(key);
            }
            if !gone_or_bound && st.pending.contains_key(key) {
                let cfg = &shared.config;
                st.back_off(key, cfg.initial_backoff, cfg.max_backoff);
            }
            drop(st);
            shared.wake.notify_one();
        }
    }
}

async fn report_unschedulable(shared: &Arc<Shared>, pod: &Pod, fit: &FitError) {
    let message = fit.to_string();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    let up_to_date = current.is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
            && c.message.as_deref() == Some(message.as_str())
    });
    if !up_to_date {
        let api: Api<Pod> = Api::namespaced(shared.client.clone(), namespace);
        let transition = match current {
            Some(c) if c.status == "False" => c.last_transition_time.clone(),
            _ => None,
        }
        .map(|t| serde_json::to_value(t).unwrap_or_default())
        .unwrap_or_else(|| serde_json::to_value(now_time()).unwrap_or_default());
        let patch = serde_json::json!({
            "status": {"conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": null,
                "lastTransitionTime": transition,
            }]}
        });
        if let Err(e) = api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "could not set PodScheduled=False");
        }
    }
    shared
        .recorder
        .record(
            &reference(pod),
            EventType::Warning,
            "FailedScheduling",
            &message,
        )
        .await;
}

fn now_time() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::new(t.as_secs() as i64, 0).unwrap_or_default(),
    )
}
