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
//! (filters, scores, FitError wording) and the Lease election is
//! [`crate::leader_election`]; this file wires
//! watches, the queue and the API writes.

pub mod framework;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod labels;
pub mod quantity;
pub mod topology_spread;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Namespace, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{Notify, Semaphore, watch};

use crate::controllers::events::{EventSink, EventType, Recorder, reference};
use framework::{Cache, FitError, PodInfo, pod_key};

/// The scheduler name pods opt into (`spec.schedulerName`).
pub const SCHEDULER_NAME: &str = "default-scheduler";

/// How long a pod we bound may stay unconfirmed by the watch before we forget it.
const ASSUME_TTL: Duration = Duration::from_secs(30);

/// Events waiting to be written (client-go's broadcaster queues 1,000).
const EVENT_QUEUE: usize = 1000;
/// Event writes in flight at once.
const EVENT_WRITERS: usize = 8;

/// Tunables; [`Config::default`] matches kube-scheduler.
#[derive(Clone, Debug)]
pub struct Config {
    /// The Lease this scheduler elects itself with; `None` when the caller already
    /// runs it only while leading ([`crate::leader_election::run_while_leading`]).
    pub leader: Option<crate::leader_election::LeaderConfig>,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Bindings in flight at once. Binding is one POST per pod, so with a few
    /// milliseconds of API latency per POST this, not the scheduling cycle, caps the
    /// rate: 32 allowed ~270 pods/s under load; kube-scheduler binds every pod in its
    /// own goroutine.
    pub parallel_binds: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            leader: Some(crate::leader_election::LeaderConfig::kube_defaults(
                "kube-scheduler",
            )),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            parallel_binds: 256,
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

/// How long an unschedulable pod waits for a cluster change before it is tried
/// again anyway (kube-scheduler's `podMaxInUnschedulablePodsDuration`).
const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(300);

/// How often parked pods are checked against [`MAX_IN_UNSCHEDULABLE`].
const UNSCHEDULABLE_SWEEP: Duration = Duration::from_secs(30);

/// Failed attempts of one pod, for its back-off.
struct Attempts {
    count: u32,
    last: Instant,
}

/// The scheduling queue, shaped like kube-scheduler's: an active FIFO, a back-off
/// queue (a pod waits there until its back-off expires) and an unschedulable pool
/// (a pod that fit no node waits there for a cluster change that may let it fit,
/// or at most [`MAX_IN_UNSCHEDULABLE`]). Parking unschedulable pods instead of
/// retrying them on a timer is what keeps thousands of pending pods from turning
/// into a storm of attempts, condition patches and events.
#[derive(Default)]
struct Queue {
    active: VecDeque<String>,
    in_active: HashSet<String>,
    /// Pod key → when its back-off ends; the heap orders them (stale heap entries
    /// are skipped when they no longer match the map).
    backoff: HashMap<String, Instant>,
    backoff_heap: BinaryHeap<Reverse<(Instant, String)>>,
    unschedulable: HashMap<String, Instant>,
    /// Parked pods that a newly bound pod may help (they failed on required pod
    /// affinity or topology spread); other parked pods only wake on node changes or
    /// pods going away.
    wake_on_pod_add: HashSet<String>,
    attempts: HashMap<String, Attempts>,
}

impl Queue {
    /// Queues a new or changed pod for an immediate attempt.
    fn activate(&mut self, key: &str) {
        self.enqueue(key, false);
    }

    /// Queues a pod for the very next attempt (one that was just read back).
    fn activate_front(&mut self, key: &str) {
        self.enqueue(key, true);
    }

    fn enqueue(&mut self, key: &str, front: bool) {
        self.backoff.remove(key);
        self.unschedulable.remove(key);
        self.wake_on_pod_add.remove(key);
        if self.in_active.insert(key.to_string()) {
            if front {
                self.active.push_front(key.to_string());
            } else {
                self.active.push_back(key.to_string());
            }
        }
    }

    /// Whether the pod waits in the unschedulable pool.
    fn is_parked(&self, key: &str) -> bool {
        self.unschedulable.contains_key(key)
    }

    /// Forgets a pod that is no longer pending.
    fn forget(&mut self, key: &str) {
        self.backoff.remove(key);
        self.unschedulable.remove(key);
        self.wake_on_pod_add.remove(key);
        self.attempts.remove(key);
        // `active` entries of forgotten pods are skipped when popped.
    }

    fn record_attempt(&mut self, key: &str) -> u32 {
        let now = Instant::now();
        let entry = self.attempts.entry(key.to_string()).or_insert(Attempts {
            count: 0,
            last: now,
        });
        entry.count += 1;
        entry.last = now;
        entry.count
    }

    fn backoff_delay(attempts: u32, initial: Duration, max: Duration) -> Duration {
        initial
            .saturating_mul(1u32 << attempts.saturating_sub(1).min(16))
            .min(max)
    }

    fn push_backoff(&mut self, key: &str, until: Instant) {
        self.backoff.insert(key.to_string(), until);
        self.backoff_heap.push(Reverse((until, key.to_string())));
    }

    /// A failed attempt that may succeed by itself (an API error): retry after back-off.
    fn back_off(&mut self, key: &str, initial: Duration, max: Duration) {
        let attempts = self.record_attempt(key);
        let until = Instant::now() + Self::backoff_delay(attempts, initial, max);
        self.unschedulable.remove(key);
        self.push_backoff(key, until);
    }

    /// No node fits: park the pod until the cluster changes. `wake_on_pod_add`: a
    /// pod being bound somewhere may make it fit.
    fn park_unschedulable(&mut self, key: &str, wake_on_pod_add: bool) {
        self.record_attempt(key);
        self.backoff.remove(key);
        self.unschedulable.insert(key.to_string(), Instant::now());
        if wake_on_pod_add {
            self.wake_on_pod_add.insert(key.to_string());
        }
    }

    /// A pod was bound: parked pods waiting for pods to appear get another try.
    fn move_on_pod_add(&mut self, initial: Duration, max: Duration) {
        if self.wake_on_pod_add.is_empty() {
            return;
        }
        let keys: Vec<String> = self.wake_on_pod_add.drain().collect();
        self.requeue(keys, initial, max);
    }

    /// A cluster change that may make parked pods fit: each goes to the back-off
    /// queue for what is left of its back-off, or straight to the active queue.
    fn move_unschedulable(&mut self, initial: Duration, max: Duration) {
        let keys: Vec<String> = self.unschedulable.keys().cloned().collect();
        self.requeue(keys, initial, max);
    }

    /// Pods parked longer than [`MAX_IN_UNSCHEDULABLE`] get another try.
    fn flush_stale_unschedulable(&mut self, initial: Duration, max: Duration) {
        let keys: Vec<String> = self
            .unschedulable
            .iter()
            .filter(|(_, since)| since.elapsed() >= MAX_IN_UNSCHEDULABLE)
            .map(|(k, _)| k.clone())
            .collect();
        self.requeue(keys, initial, max);
    }

    fn requeue(&mut self, keys: Vec<String>, initial: Duration, max: Duration) {
        let now = Instant::now();
        for key in keys {
            if self.unschedulable.remove(&key).is_none() {
                continue;
            }
            self.wake_on_pod_add.remove(&key);
            let until = self
                .attempts
                .get(&key)
                .map(|a| a.last + Self::backoff_delay(a.count, initial, max))
                .unwrap_or(now);
            if until <= now {
                self.activate(&key);
            } else {
                self.push_backoff(&key, until);
            }
        }
    }

    fn next_ready(&mut self) -> Option<String> {
        let now = Instant::now();
        while let Some(Reverse((until, key))) = self.backoff_heap.peek().cloned() {
            if until > now {
                break;
            }
            self.backoff_heap.pop();
            if self.backoff.get(&key) == Some(&until) {
                self.activate(&key);
            }
        }
        let key = self.active.pop_front()?;
        self.in_active.remove(&key);
        Some(key)
    }

    fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(Reverse((until, key))) = self.backoff_heap.peek() {
            if self.backoff.get(key) == Some(until) {
                return Some(*until);
            }
            self.backoff_heap.pop();
        }
        None
    }
}

#[derive(Default)]
struct State {
    cache: Cache,
    /// Pending pods (no nodeName, our scheduler name), by key.
    pending: HashMap<String, PendingPod>,
    queue: Queue,
    nodes_synced: bool,
    assigned_synced: bool,
    /// Keys seen during a watch re-list, to drop what vanished meanwhile.
    relist_pending: Option<HashSet<String>>,
    relist_assigned: Option<HashSet<String>>,
}

struct Shared {
    state: Mutex<State>,
    wake: Notify,
    client: kube::Client,
    /// Scheduled / FailedScheduling events, written in the background so an Event
    /// write never delays the next binding (dropped when the queue is full, as
    /// client-go's broadcaster does).
    events: EventSink,
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
        events: EventSink::spawn(
            Recorder::new(client.clone(), SCHEDULER_NAME),
            EVENT_QUEUE,
            EVENT_WRITERS,
        ),
        client: client.clone(),
        config: config.clone(),
    });
    let (leader_tx, leader_rx) = watch::channel(config.leader.is_none());
    // Owned here, so dropping (aborting) `run` stops the watches and the lease renewal.
    let mut tasks = tokio::task::JoinSet::new();
    // Kept until `run` ends: the schedule loop stops when the sender is gone.
    let mut _elected_by_caller = None;
    match config.leader.clone() {
        Some(leader) => {
            tasks.spawn(crate::leader_election::run(
                client.clone(),
                leader,
                leader_tx,
            ));
        }
        None => _elected_by_caller = Some(leader_tx),
    }
    tasks.spawn(watch_nodes(shared.clone()));
    tasks.spawn(watch_pending(shared.clone()));
    tasks.spawn(watch_assigned(shared.clone()));
    tasks.spawn(watch_namespaces(shared.clone()));
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
                        .nodes()
                        .filter(|n| !seen.contains(&n.name))
                        .map(|n| n.name.clone())
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
            let cfg = &shared.config;
            st.queue
                .move_unschedulable(cfg.initial_backoff, cfg.max_backoff);
            drop(st);
            shared.wake.notify_one();
        }
    }
}

/// A pending pod as the scheduler keeps it between attempts: the fields scheduling
/// reads (see [`slim_pending`]) serialized as JSON, parsed again when the pod is
/// popped. A parsed `Pod` costs several kilobytes of small allocations even when
/// slimmed; thousands of pods waiting (for nodes, or behind a burst of creations)
/// would otherwise be the scheduler's largest memory use.
///
/// A pod parked as unschedulable keeps no JSON at all, only what tells its changes
/// apart: it may wait there for hours (a cluster out of capacity), and its next
/// attempt reads it back from the API server ([`refresh_parked`]), which also sees
/// the pod as it is then.
struct PendingPod {
    uid: Option<String>,
    /// Hash of the slimmed spec: a change makes it a new scheduling problem.
    spec_digest: u64,
    json: Option<Box<[u8]>>,
}

impl PendingPod {
    fn new(pod: &Pod) -> Result<PendingPod, serde_json::Error> {
        let mut pending = PendingPod::parked(pod)?;
        pending.keep_json(pod)?;
        Ok(pending)
    }

    /// What a parked pod keeps: its uid and spec digest, no JSON.
    fn parked(pod: &Pod) -> Result<PendingPod, serde_json::Error> {
        let spec = serde_json::to_vec(&pod.spec)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        hasher.write(&spec);
        Ok(PendingPod {
            uid: pod.metadata.uid.clone(),
            spec_digest: hasher.finish(),
            json: None,
        })
    }

    fn keep_json(&mut self, pod: &Pod) -> Result<(), serde_json::Error> {
        self.json = Some(serde_json::to_vec(pod)?.into_boxed_slice());
        Ok(())
    }

    /// The pod, or `None` if it was parked and must be read back first.
    fn pod(&self) -> Option<Result<Pod, serde_json::Error>> {
        self.json.as_deref().map(serde_json::from_slice)
    }
}

fn apply_pending(st: &mut State, pod: Pod) {
    let key = pod_key(&pod);
    if !is_pending_for_us(&pod) {
        st.pending.remove(&key);
        st.queue.forget(&key);
        return;
    }
    let pod = slim_pending(pod);
    let mut pending = match PendingPod::parked(&pod) {
        Ok(p) => p,
        Err(e) => {
            // Cannot happen for a Pod that was just deserialized; never lose it silently.
            tracing::error!(pod = %key, error = %e, "could not keep a pending pod");
            return;
        }
    };
    let retry = match st.pending.get(&key) {
        // A changed spec or a new incarnation is a new scheduling problem; a status
        // update (our own PodScheduled condition) is not.
        Some(old) => old.spec_digest != pending.spec_digest || old.uid != pending.uid,
        None => true,
    };
    // A pod still parked keeps no JSON: it is read back when it comes out.
    if (retry || !st.queue.is_parked(&key))
        && let Err(e) = pending.keep_json(&pod)
    {
        tracing::error!(pod = %key, error = %e, "could not keep a pending pod");
        return;
    }
    st.pending.insert(key.clone(), pending);
    if retry {
        st.queue.activate(&key);
    }
}

/// Drops what scheduling a pending pod never reads (managed fields, annotations,
/// container commands, env, probes, volumes, status other than PodScheduled), so that
/// thousands of pending pods cost the scheduler little memory.
fn slim_pending(mut pod: Pod) -> Pod {
    pod.metadata.managed_fields = None;
    pod.metadata.annotations = None;
    if let Some(spec) = pod.spec.as_mut() {
        spec.volumes = None;
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            c.command = None;
            c.args = None;
            c.env = None;
            c.env_from = None;
            c.volume_mounts = None;
            c.volume_devices = None;
            c.liveness_probe = None;
            c.readiness_probe = None;
            c.startup_probe = None;
            c.lifecycle = None;
            c.security_context = None;
        }
        spec.ephemeral_containers = None;
    }
    if let Some(status) = pod.status.take() {
        let scheduled: Vec<_> = status
            .conditions
            .into_iter()
            .flatten()
            .filter(|c| c.type_ == "PodScheduled")
            .collect();
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: status.phase,
            conditions: (!scheduled.is_empty()).then_some(scheduled),
            ..Default::default()
        });
    }
    pod
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
                st.queue.forget(&key);
            }
            Event::InitDone => {
                if let Some(seen) = st.relist_pending.take() {
                    let gone: Vec<String> = st
                        .pending
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for key in gone {
                        st.pending.remove(&key);
                        st.queue.forget(&key);
                    }
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
        let mut woke = false;
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
                    let newly_bound = st.cache.assigned(&key).is_none_or(|p| !p.confirmed);
                    st.cache.add_pod(&key, PodInfo::new(&pod, &node, true));
                    if newly_bound {
                        let cfg = &shared.config;
                        st.queue
                            .move_on_pod_add(cfg.initial_backoff, cfg.max_backoff);
                        woke = true;
                    }
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
            let cfg = &shared.config;
            st.queue
                .move_unschedulable(cfg.initial_backoff, cfg.max_backoff);
            woke = true;
        }
        drop(st);
        if woke {
            shared.wake.notify_one();
        }
    }
}

/// Namespace labels, for pod affinity terms with a `namespaceSelector`.
async fn watch_namespaces(shared: Arc<Shared>) {
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(shared.client.clone());
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut relist: Option<HashSet<String>> = None;
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "namespace watch failed; retrying");
                continue;
            }
        };
        let mut st = shared.lock();
        let mut changed = false;
        match event {
            Event::Init => relist = Some(HashSet::new()),
            Event::InitApply(ns) | Event::Apply(ns) => {
                let name = ns.metadata.name.clone().unwrap_or_default();
                if let Some(seen) = relist.as_mut() {
                    seen.insert(name.clone());
                }
                changed |= st
                    .cache
                    .set_namespace(&name, ns.metadata.labels.clone().unwrap_or_default());
            }
            Event::Delete(ns) => {
                st.cache
                    .remove_namespace(ns.metadata.name.as_deref().unwrap_or_default());
            }
            Event::InitDone => {
                if let Some(seen) = relist.take() {
                    let gone: Vec<String> = st
                        .cache
                        .namespace_labels
                        .keys()
                        .filter(|n| !seen.contains(*n))
                        .cloned()
                        .collect();
                    for n in gone {
                        st.cache.remove_namespace(&n);
                    }
                }
                changed = true;
            }
        }
        if changed {
            let cfg = &shared.config;
            st.queue
                .move_unschedulable(cfg.initial_backoff, cfg.max_backoff);
            drop(st);
            shared.wake.notify_one();
        }
    }
}

async fn schedule_loop(shared: Arc<Shared>, mut leader: watch::Receiver<bool>) {
    let binds = Arc::new(Semaphore::new(shared.config.parallel_binds.max(1)));
    let mut rng = Rng(random_u64() | 1);
    let mut last_sweep = Instant::now();
    let mut last_unschedulable_sweep = Instant::now();
    loop {
        if last_unschedulable_sweep.elapsed() > UNSCHEDULABLE_SWEEP {
            last_unschedulable_sweep = Instant::now();
            let cfg = &shared.config;
            shared
                .lock()
                .queue
                .flush_stale_unschedulable(cfg.initial_backoff, cfg.max_backoff);
        }
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
                st.queue.next_ready()
            } else {
                None
            }
        };
        let Some(key) = next else {
            let deadline = shared.lock().queue.next_deadline();
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
    // `None`: the pod was parked and must be read back before its attempt.
    let attempt = 'locked: {
        let mut st = shared.lock();
        let Some(pending) = st.pending.get(key) else {
            return;
        };
        // Already bound by us, waiting for the watch to catch up.
        if let Some(info) = st.cache.assigned(key)
            && Some(&info.uid) == pending.uid.as_ref()
        {
            return;
        }
        let pod = match pending.pod() {
            Some(Ok(pod)) => Arc::new(pod),
            Some(Err(e)) => {
                tracing::error!(pod = %key, error = %e, "could not read back a pending pod");
                return;
            }
            None => break 'locked None,
        };
        let result = st.cache.find_node(&pod, &mut || rng.next());
        match &result {
            Ok(node) => st.cache.add_pod(key, PodInfo::new(&pod, node, false)),
            Err(fit) => {
                st.queue
                    .park_unschedulable(key, fit.may_fit_after_pod_add());
                if let Some(parked) = st.pending.get_mut(key) {
                    parked.json = None;
                }
            }
        }
        Some((pod, result))
    };
    let Some((pod, result)) = attempt else {
        refresh_parked(shared, key).await;
        return;
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
            // Reports share the bind limit: thousands of pods failing at once must
            // slow the loop down rather than pile up as waiting tasks.
            let Ok(permit) = binds.clone().acquire_owned().await else {
                return;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                report_unschedulable(&shared, &pod, &fit).await;
                drop(permit);
            });
        }
    }
}

/// A parked pod left the unschedulable pool without its JSON: reads it back from the
/// API server and queues it again at the front, or forgets it if it is gone, bound
/// or replaced meanwhile (the watch then brings what replaced it).
async fn refresh_parked(shared: &Arc<Shared>, key: &str) {
    let Some((namespace, name)) = key.split_once('/') else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), namespace);
    let fetched = api.get_opt(name).await;
    let mut st = shared.lock();
    let Some(pending) = st.pending.get(key) else {
        return;
    };
    if pending.json.is_some() {
        // The watch brought a newer state meanwhile.
        st.queue.activate_front(key);
        return;
    }
    match fetched {
        Ok(Some(pod)) if pod.metadata.uid == pending.uid && is_pending_for_us(&pod) => {
            match PendingPod::new(&slim_pending(pod)) {
                Ok(mut fresh) => {
                    // Keep the digest the watch saw: only the watch decides when a
                    // spec change makes a new scheduling problem.
                    fresh.spec_digest = pending.spec_digest;
                    st.pending.insert(key.to_string(), fresh);
                    st.queue.activate_front(key);
                }
                Err(e) => tracing::error!(pod = %key, error = %e, "could not keep a pending pod"),
            }
        }
        // Gone, bound, or another pod of the same name: the watch says what follows.
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(pod = %key, error = %e, "could not read a parked pod back; backing off");
            let cfg = &shared.config;
            st.queue.back_off(key, cfg.initial_backoff, cfg.max_backoff);
        }
    }
    drop(st);
    shared.wake.notify_one();
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
                .events
                .emit(reference(pod), EventType::Normal, "Scheduled", message);
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
                st.queue.back_off(key, cfg.initial_backoff, cfg.max_backoff);
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
    shared.events.emit(
        reference(pod),
        EventType::Warning,
        "FailedScheduling",
        message,
    );
}

fn now_time() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::new(t.as_secs() as i64, 0).unwrap_or_default(),
    )
}

#[cfg(test)]
mod queue_tests {
    use super::*;

    const INITIAL: Duration = Duration::from_millis(40);
    const MAX: Duration = Duration::from_millis(200);

    #[test]
    fn unschedulable_pods_wait_for_a_cluster_change() {
        let mut q = Queue::default();
        q.activate("a");
        assert_eq!(q.next_ready().as_deref(), Some("a"));
        q.park_unschedulable("a", false);
        std::thread::sleep(MAX * 2);
        // No timer brings it back: only a cluster change (or the 5-minute sweep).
        assert_eq!(q.next_ready(), None);
        assert_eq!(q.next_deadline(), None);
        q.move_unschedulable(INITIAL, MAX);
        assert_eq!(q.next_ready().as_deref(), Some("a"));
    }

    #[test]
    fn a_cluster_change_right_after_a_failure_waits_out_the_back_off() {
        let mut q = Queue::default();
        q.activate("a");
        q.next_ready();
        q.park_unschedulable("a", false);
        q.park_unschedulable("a", false); // second failure: back-off 80 ms
        q.move_unschedulable(INITIAL, MAX);
        assert_eq!(q.next_ready(), None, "still backing off");
        assert!(q.next_deadline().is_some());
        std::thread::sleep(INITIAL * 3);
        assert_eq!(q.next_ready().as_deref(), Some("a"));
    }

    #[test]
    fn back_off_doubles_and_is_capped() {
        assert_eq!(Queue::backoff_delay(1, INITIAL, MAX), INITIAL);
        assert_eq!(Queue::backoff_delay(2, INITIAL, MAX), INITIAL * 2);
        assert_eq!(Queue::backoff_delay(3, INITIAL, MAX), INITIAL * 4);
        assert_eq!(Queue::backoff_delay(30, INITIAL, MAX), MAX);
    }

    #[test]
    fn forgotten_and_reactivated_pods_leave_no_stale_timers() {
        let mut q = Queue::default();
        q.back_off("a", INITIAL, MAX);
        q.forget("a");
        std::thread::sleep(INITIAL * 2);
        assert_eq!(q.next_ready(), None);
        q.back_off("b", INITIAL, MAX);
        q.activate("b"); // spec changed: try now
        assert_eq!(q.next_ready().as_deref(), Some("b"));
        std::thread::sleep(INITIAL * 2);
        assert_eq!(q.next_ready(), None, "the old back-off entry is stale");
    }

    #[test]
    fn a_pod_is_queued_once() {
        let mut q = Queue::default();
        q.activate("a");
        q.activate("a");
        assert_eq!(q.next_ready().as_deref(), Some("a"));
        assert_eq!(q.next_ready(), None);
    }
}

#[cfg(test)]
mod pending_tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("valid pod")
    }

    fn sample(image: &str, condition: &str) -> Pod {
        pod(serde_json::json!({
            "metadata": {
                "name": "web", "namespace": "default", "uid": "u1",
                "labels": {"app": "web"},
                "annotations": {"big": "x".repeat(4096)},
                "managedFields": [{"manager": "kubectl", "operation": "Update"}],
            },
            "spec": {
                "schedulerName": SCHEDULER_NAME,
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "containers": [{
                    "name": "c", "image": image,
                    "env": [{"name": "A", "value": "b"}],
                    "resources": {"requests": {"cpu": "100m"}},
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                }],
            },
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": condition},
                {"type": "Other", "status": "True"},
            ]},
        }))
    }

    #[test]
    fn pending_pods_keep_what_scheduling_reads() {
        let full = sample("nginx", "0/1 nodes are available");
        let kept = PendingPod::new(&slim_pending(full.clone())).expect("serializes");
        let json = kept
            .json
            .as_deref()
            .expect("a new pending pod keeps its JSON");
        assert!(json.len() < 1024, "kept {} bytes", json.len());
        let back = kept.pod().expect("kept").expect("parses");
        assert_eq!(back.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(back.metadata.labels, full.metadata.labels);
        assert_eq!(back.metadata.annotations, None);
        assert_eq!(back.metadata.managed_fields, None);
        let spec = back.spec.as_ref().expect("spec");
        assert_eq!(
            spec.tolerations,
            full.spec.as_ref().expect("spec").tolerations
        );
        assert_eq!(
            spec.containers[0].resources,
            full.spec.as_ref().expect("spec").containers[0].resources
        );
        assert_eq!(
            spec.containers[0].ports,
            full.spec.as_ref().expect("spec").containers[0].ports
        );
        assert_eq!(spec.containers[0].env, None);
        let conditions = back.status.and_then(|s| s.conditions).expect("conditions");
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].type_, "PodScheduled");
    }

    #[test]
    fn only_spec_or_uid_changes_requeue_a_pending_pod() {
        let mut st = State::default();
        apply_pending(&mut st, sample("nginx", "a"));
        assert_eq!(st.queue.next_ready().as_deref(), Some("default/web"));
        // Our own condition update: not a new scheduling problem.
        apply_pending(&mut st, sample("nginx", "b"));
        assert_eq!(st.queue.next_ready(), None);
        // A changed spec is.
        apply_pending(&mut st, sample("nginx:2", "b"));
        assert_eq!(st.queue.next_ready().as_deref(), Some("default/web"));
        // So is a new incarnation under the same name.
        let mut again = sample("nginx:2", "b");
        again.metadata.uid = Some("u2".into());
        apply_pending(&mut st, again);
        assert_eq!(st.queue.next_ready().as_deref(), Some("default/web"));
        assert_eq!(st.pending.len(), 1);
    }

    #[test]
    fn parked_pods_keep_no_json_until_a_change_needs_it() {
        let mut st = State::default();
        apply_pending(&mut st, sample("nginx", "a"));
        assert_eq!(st.queue.next_ready().as_deref(), Some("default/web"));
        st.queue.park_unschedulable("default/web", false);
        // Our own PodScheduled update arrives while the pod is parked: nothing to keep.
        apply_pending(&mut st, sample("nginx", "0/0 nodes are available"));
        assert!(st.pending["default/web"].json.is_none());
        assert!(st.pending["default/web"].pod().is_none());
        assert_eq!(st.queue.next_ready(), None);
        // A spec change is a new problem: kept in full and queued at once.
        apply_pending(&mut st, sample("nginx:2", "b"));
        assert!(st.pending["default/web"].pod().is_some_and(|p| p.is_ok()));
        assert_eq!(st.queue.next_ready().as_deref(), Some("default/web"));
        // A read-back pod goes to the front of the queue.
        st.queue.activate("default/other");
        st.queue.activate_front("default/web");
        assert_eq!(st.queue.next_ready().as_deref(), Some("default/web"));
        assert_eq!(st.queue.next_ready().as_deref(), Some("default/other"));
    }
}
