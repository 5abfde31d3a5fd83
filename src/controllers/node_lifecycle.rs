//! Node lifecycle, as kube-controller-manager's node lifecycle controller.
//!
//! Health: a node's heartbeat is its `kube-node-lease/<node>` Lease (`renewTime`) and
//! the `lastHeartbeatTime` of its Ready condition; the controller notes, on its own
//! monotonic clock, when either last changed (a node first seen counts as fresh). A
//! node silent for `--node-monitor-grace-period` (a node that never posted status:
//! `--node-startup-grace-period` from its creation) gets Ready, MemoryPressure,
//! DiskPressure and PIDPressure set to `Unknown` (`NodeStatusUnknown`, "Kubelet
//! stopped posting node status.", or `NodeStatusNeverUpdated`). On the Ready→not-Ready
//! transition it records `NodeNotReady` ("Node x status is now: NodeNotReady") and
//! marks the node's pods `Ready=False` (each with a `NodeNotReady` event).
//!
//! Taints: NoExecute `node.kubernetes.io/unreachable` (Ready Unknown) or `not-ready`
//! (Ready False), swapped at once when one becomes the other and removed when the
//! node is Ready again; adding them is rate limited per zone
//! (`--node-eviction-rate`, kube's zone states: a partially disrupted small zone
//! gets none, and when every zone is fully disrupted — say the control plane lost
//! the network — none at all and existing ones are lifted). NoSchedule taints follow
//! the conditions (not-ready, unreachable, memory/disk/pid-pressure,
//! network-unavailable) and `spec.unschedulable`. The eviction of pods that do not
//! tolerate the NoExecute taints is `taint_eviction.rs`'s job.
//!
//! Owns node conditions written on the kubelet's behalf, the controller's taints and
//! pod Ready=False for unreachable nodes; it is an API client only (no store).
//! `RegisteredNode`/`RemovingNode` events mark nodes it starts or stops tracking.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::sync::Notify;

use super::Config;
use super::events::{EventType, Recorder, reference};
use super::workload::now_time;

/// Taint key for a node whose Ready condition is False.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// Taint key for a node whose Ready condition is Unknown.
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";
/// Taint key for a cordoned node.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";
/// Namespace of the node heartbeat Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// The conditions the controller sets to Unknown for a silent node.
const MONITORED_CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// NoSchedule taints that mirror node conditions: (condition, status, taint key).
const CONDITION_TAINTS: [(&str, &str, &str); 6] = [
    ("Ready", "False", NOT_READY_TAINT),
    ("Ready", "Unknown", UNREACHABLE_TAINT),
    (
        "MemoryPressure",
        "True",
        "node.kubernetes.io/memory-pressure",
    ),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    (
        "NetworkUnavailable",
        "True",
        "node.kubernetes.io/network-unavailable",
    ),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
];

/// What the controller remembers of a node's heartbeats.
#[derive(Clone, Debug)]
pub struct NodeHealth {
    /// When a heartbeat last changed, on the controller's clock.
    pub probe: Instant,
    /// The Ready condition's (status, lastHeartbeatTime, lastTransitionTime) last seen.
    ready: Option<(String, Option<String>, Option<String>)>,
    /// The Lease's renewTime last seen.
    lease_renew: Option<String>,
}

fn time_text(t: Option<&Time>) -> Option<String> {
    t.map(|t| t.0.to_string())
}

fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The Ready condition's status ("Unknown" when the node has none).
pub fn ready_status(node: &Node) -> &str {
    condition(node, "Ready").map_or("Unknown", |c| c.status.as_str())
}

fn ready_snapshot(node: &Node) -> Option<(String, Option<String>, Option<String>)> {
    condition(node, "Ready").map(|c| {
        (
            c.status.clone(),
            time_text(c.last_heartbeat_time.as_ref()),
            time_text(c.last_transition_time.as_ref()),
        )
    })
}

fn creation_age(node: &Node) -> Duration {
    let created = node
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second());
    let age = super::workload::now_secs() - created;
    Duration::from_secs(u64::try_from(age).unwrap_or(0))
}

/// Updates what is known of a node's heartbeats (kube's `tryUpdateNodeHealth`, the
/// bookkeeping half): the probe time moves to `now` when the Ready condition's
/// heartbeat or transition changed, or the Lease was renewed. A node first seen
/// without a Ready condition counts from its creation time (at most `grace` back:
/// enough to be judged, and never before the monotonic clock's start).
pub fn observe(
    previous: Option<&NodeHealth>,
    node: &Node,
    lease: Option<&Lease>,
    now: Instant,
    grace: Duration,
) -> NodeHealth {
    let ready = ready_snapshot(node);
    let lease_renew = lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0.to_string());
    let mut health = match previous {
        None => NodeHealth {
            probe: if ready.is_none() {
                let age = creation_age(node).min(grace + Duration::from_secs(1));
                now.checked_sub(age).unwrap_or(now)
            } else {
                now
            },
            ready: ready.clone(),
            // Filled in below, where a lease moves the probe time.
            lease_renew: None,
        },
        Some(prev) => {
            let mut h = prev.clone();
            if ready.is_some() && ready != prev.ready {
                h.probe = now;
            }
            h.ready = ready;
            h
        }
    };
    if let Some(renew) = lease_renew
        && health.lease_renew.as_ref() != Some(&renew)
    {
        health.probe = now;
        health.lease_renew = Some(renew);
    }
    health
}

/// The node's conditions with every monitored one set to Unknown (kube's wording),
/// or None when they already are.
pub fn unknown_conditions(node: &Node, now: &Time) -> Option<Vec<NodeCondition>> {
    let mut conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut changed = false;
    for type_ in MONITORED_CONDITIONS {
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            None => {
                conditions.push(NodeCondition {
                    type_: type_.to_string(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                    last_transition_time: Some(now.clone()),
                });
                changed = true;
            }
            Some(c) if c.status != "Unknown" => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(now.clone());
                changed = true;
            }
            Some(_) => {}
        }
    }
    changed.then_some(conditions)
}

/// A zone's health (kube's `ZoneState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneState {
    Normal,
    PartialDisruption,
    FullDisruption,
}

/// kube's `ComputeZoneState`: no ready node → full disruption; more than two
/// not-ready nodes making up at least `threshold` of the zone → partial.
pub fn zone_state(ready: &[bool], threshold: f64) -> ZoneState {
    let ready_count = ready.iter().filter(|r| **r).count();
    let not_ready = ready.len() - ready_count;
    if ready_count == 0 && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f64 / ready.len() as f64 >= threshold {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// The NoExecute tainting rate for a zone in `state` with `size` nodes.
fn zone_rate(config: &Config, state: ZoneState, size: usize) -> f64 {
    match state {
        ZoneState::Normal | ZoneState::FullDisruption => config.node_eviction_rate,
        ZoneState::PartialDisruption => {
            if size > config.large_cluster_size_threshold as usize {
                config.secondary_node_eviction_rate
            } else {
                0.0
            }
        }
    }
}

/// The zone a node belongs to (region and zone labels, as kube's `GetZoneKey`).
pub fn zone_key(node: &Node) -> String {
    let labels = node.metadata.labels.as_ref();
    let get = |keys: [&str; 2]| {
        keys.iter()
            .find_map(|k| labels.and_then(|l| l.get(*k)).cloned())
            .unwrap_or_default()
    };
    let region = get([
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/region",
    ]);
    let zone = get([
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
    ]);
    if region.is_empty() && zone.is_empty() {
        String::new()
    } else {
        format!("{region}:\x00:{zone}")
    }
}

/// A token bucket with a burst of one (kube's eviction limiter).
#[derive(Debug)]
struct TokenBucket {
    qps: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(qps: f64, now: Instant) -> Self {
        TokenBucket {
            qps,
            tokens: 1.0,
            last: now,
        }
    }

    fn set_rate(&mut self, qps: f64) {
        self.qps = qps;
    }

    fn try_take(&mut self, now: Instant) -> bool {
        if self.qps <= 0.0 {
            return false;
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(1.0);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The NoExecute taint a node should carry for its Ready status.
pub fn wanted_no_execute(ready: &str) -> Option<&'static str> {
    match ready {
        "False" => Some(NOT_READY_TAINT),
        "True" => None,
        _ => Some(UNREACHABLE_TAINT),
    }
}

fn has_taint(node: &Node, key: &str, effect: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key && t.effect == effect))
}

fn taints_of(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

/// The NoExecute not-ready/unreachable taints after making `wanted` the only one
/// (None removes both). Other taints are kept as they are.
pub fn with_no_execute(taints: &[Taint], wanted: Option<&str>, now: &Time) -> Vec<Taint> {
    let mut out: Vec<Taint> = taints
        .iter()
        .filter(|t| {
            !(t.effect == "NoExecute"
                && (t.key == NOT_READY_TAINT || t.key == UNREACHABLE_TAINT)
                && Some(t.key.as_str()) != wanted)
        })
        .cloned()
        .collect();
    if let Some(key) = wanted
        && !out.iter().any(|t| t.key == key && t.effect == "NoExecute")
    {
        out.push(Taint {
            key: key.to_string(),
            effect: "NoExecute".into(),
            time_added: Some(now.clone()),
            value: None,
        });
    }
    out
}

/// The node's taints with the controller's NoSchedule taints matching its conditions
/// and `spec.unschedulable` (kube's `doNoScheduleTaintingPass`), or None when they
/// already do.
pub fn with_no_schedule(node: &Node) -> Option<Vec<Taint>> {
    let mut wanted: Vec<&str> = CONDITION_TAINTS
        .iter()
        .filter(|(type_, status, _)| condition(node, type_).is_some_and(|c| c.status == *status))
        .map(|(_, _, key)| *key)
        .collect();
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        wanted.push(UNSCHEDULABLE_TAINT);
    }
    let managed = |key: &str| {
        key == UNSCHEDULABLE_TAINT || CONDITION_TAINTS.iter().any(|(_, _, k)| *k == key)
    };
    let taints = taints_of(node);
    let stale = taints
        .iter()
        .any(|t| t.effect == "NoSchedule" && managed(&t.key) && !wanted.contains(&t.key.as_str()));
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|k| !has_taint(node, k, "NoSchedule"))
        .collect();
    if !stale && missing.is_empty() {
        return None;
    }
    let mut out: Vec<Taint> = taints
        .into_iter()
        .filter(|t| {
            !(t.effect == "NoSchedule" && managed(&t.key) && !wanted.contains(&t.key.as_str()))
        })
        .collect();
    for key in missing {
        out.push(Taint {
            key: key.to_string(),
            effect: "NoSchedule".into(),
            time_added: None,
            value: None,
        });
    }
    Some(out)
}

/// What the watchers have seen.
#[derive(Default)]
struct Observed {
    nodes: BTreeMap<String, Node>,
    leases: HashMap<String, Lease>,
    /// Nodes changed since the last NoSchedule pass.
    dirty: HashSet<String>,
    nodes_synced: bool,
}

/// Runs the node lifecycle controller until the process ends.
pub async fn run(client: kube::Client, config: Config) {
    let observed: Arc<Mutex<Observed>> = Arc::default();
    let changed = Arc::new(Notify::new());
    tokio::spawn(watch_nodes(
        client.clone(),
        observed.clone(),
        changed.clone(),
    ));
    tokio::spawn(watch_leases(client.clone(), observed.clone()));
    let mut lifecycle = Lifecycle::new(client, config);
    let mut tick = tokio::time::interval(lifecycle.config.node_monitor_period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let synced = observed.lock().map(|o| o.nodes_synced).unwrap_or(false);
                if synced {
                    lifecycle.monitor(&observed).await;
                }
            }
            _ = changed.notified() => {
                let nodes: Vec<Node> = match observed.lock() {
                    Ok(mut o) => {
                        let dirty: Vec<String> = o.dirty.drain().collect();
                        dirty.iter().filter_map(|n| o.nodes.get(n).cloned()).collect()
                    }
                    Err(_) => Vec::new(),
                };
                for node in nodes {
                    lifecycle.no_schedule_pass(&node).await;
                }
            }
        }
    }
}

async fn watch_nodes(client: kube::Client, observed: Arc<Mutex<Observed>>, changed: Arc<Notify>) {
    let api: Api<Node> = Api::all(client);
    let mut events = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listing = BTreeMap::new();
    while let Some(event) = events.next().await {
        let Ok(mut o) = observed.lock() else { return };
        match event {
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(node)) => {
                if let Some(name) = node.metadata.name.clone() {
                    listing.insert(name, node);
                }
            }
            Ok(Event::InitDone) => {
                o.nodes = std::mem::take(&mut listing);
                o.dirty = o.nodes.keys().cloned().collect();
                o.nodes_synced = true;
            }
            Ok(Event::Apply(node)) => {
                if let Some(name) = node.metadata.name.clone() {
                    o.dirty.insert(name.clone());
                    o.nodes.insert(name, node);
                }
            }
            Ok(Event::Delete(node)) => {
                if let Some(name) = node.metadata.name.as_ref() {
                    o.nodes.remove(name);
                    o.dirty.remove(name);
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "node watch interrupted; it resumes by itself");
                continue;
            }
        }
        drop(o);
        changed.notify_one();
    }
}

async fn watch_leases(client: kube::Client, observed: Arc<Mutex<Observed>>) {
    let api: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    let mut events = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listing = HashMap::new();
    while let Some(event) = events.next().await {
        let Ok(mut o) = observed.lock() else { return };
        match event {
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(lease)) => {
                if let Some(name) = lease.metadata.name.clone() {
                    listing.insert(name, lease);
                }
            }
            Ok(Event::InitDone) => o.leases = std::mem::take(&mut listing),
            Ok(Event::Apply(lease)) => {
                if let Some(name) = lease.metadata.name.clone() {
                    o.leases.insert(name, lease);
                }
            }
            Ok(Event::Delete(lease)) => {
                if let Some(name) = lease.metadata.name.as_ref() {
                    o.leases.remove(name);
                }
            }
            Err(e) => tracing::debug!(error = %e, "lease watch interrupted; it resumes by itself"),
        }
    }
}

/// A node's NoExecute taint change waiting for its zone's limiter.
struct PendingTaint {
    node: Node,
    zone: String,
    wanted: &'static str,
}

struct Lifecycle {
    client: kube::Client,
    config: Config,
    recorder: Recorder,
    health: HashMap<String, NodeHealth>,
    limiters: HashMap<String, TokenBucket>,
    zone_states: HashMap<String, ZoneState>,
    /// Nodes whose pods could not all be marked not ready.
    retry_mark: HashSet<String>,
}

impl Lifecycle {
    fn new(client: kube::Client, config: Config) -> Self {
        let recorder = Recorder::new(client.clone(), "node-controller");
        Lifecycle {
            client,
            config,
            recorder,
            health: HashMap::new(),
            limiters: HashMap::new(),
            zone_states: HashMap::new(),
            retry_mark: HashSet::new(),
        }
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    async fn node_event(&self, node: &Node, reason: &str, message: String) {
        let mut object = reference(node);
        // kube's node events name the node as their UID.
        object.uid = node.metadata.name.clone();
        self.recorder
            .record(&object, EventType::Normal, reason, &message)
            .await;
    }

    /// One pass over every node (kube's `monitorNodeHealth`).
    async fn monitor(&mut self, observed: &Arc<Mutex<Observed>>) {
        let (nodes, leases) = match observed.lock() {
            Ok(o) => (o.nodes.clone(), o.leases.clone()),
            Err(_) => return,
        };
        let now = Instant::now();

        for (name, node) in &nodes {
            if !self.health.contains_key(name) {
                self.node_event(
                    node,
                    "RegisteredNode",
                    format!("Node {name} event: Registered Node {name} in Controller"),
                )
                .await;
            }
        }
        let gone: Vec<String> = self
            .health
            .keys()
            .filter(|n| !nodes.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            self.health.remove(&name);
            self.retry_mark.remove(&name);
            tracing::info!(node = %name, "node deleted; no longer monitored");
        }

        let mut zone_ready: HashMap<String, Vec<bool>> = HashMap::new();
        let mut pending = Vec::new();
        let mut current_nodes = Vec::new();
        for (name, node) in nodes {
            let grace = if condition(&node, "Ready").is_some() {
                self.config.node_monitor_grace_period
            } else {
                self.config.node_startup_grace_period
            };
            let health = observe(self.health.get(&name), &node, leases.get(&name), now, grace);
            let silent = now.saturating_duration_since(health.probe) > grace;
            self.health.insert(name.clone(), health);
            let observed_ready = ready_status(&node).to_string();
            let mut current = node.clone();
            if silent && let Some(conditions) = unknown_conditions(&node, &now_time()) {
                match self.write_conditions(&node, conditions).await {
                    Ok(updated) => {
                        tracing::info!(node = %name, "node stopped posting status; conditions are now Unknown");
                        if let Some(h) = self.health.get_mut(&name) {
                            h.ready = ready_snapshot(&updated);
                        }
                        current = updated;
                    }
                    Err(e) => {
                        tracing::warn!(node = %name, error = %format!("{e:#}"), "could not set node conditions to Unknown; retrying next pass");
                        continue;
                    }
                }
            }
            let current_ready = ready_status(&current).to_string();
            zone_ready
                .entry(zone_key(&current))
                .or_default()
                .push(current_ready == "True");

            // NoExecute taints follow the status as read at the start of the pass.
            match wanted_no_execute(&observed_ready) {
                None => {
                    if has_taint(&current, NOT_READY_TAINT, "NoExecute")
                        || has_taint(&current, UNREACHABLE_TAINT, "NoExecute")
                    {
                        self.set_no_execute(&current, None).await;
                        if let Some(n) = self.refetch(&name).await {
                            current = n;
                        }
                    }
                }
                Some(wanted) => {
                    let other = if wanted == NOT_READY_TAINT {
                        UNREACHABLE_TAINT
                    } else {
                        NOT_READY_TAINT
                    };
                    if has_taint(&current, other, "NoExecute") {
                        // Swapping one for the other is not an eviction decision: at once.
                        self.set_no_execute(&current, Some(wanted)).await;
                        if let Some(n) = self.refetch(&name).await {
                            current = n;
                        }
                    } else if !has_taint(&current, wanted, "NoExecute") {
                        pending.push(PendingTaint {
                            node: current.clone(),
                            zone: zone_key(&current),
                            wanted,
                        });
                    }
                }
            }

            let became_not_ready = observed_ready == "True" && current_ready != "True";
            if became_not_ready {
                self.node_event(
                    &current,
                    "NodeNotReady",
                    format!("Node {name} status is now: NodeNotReady"),
                )
                .await;
            }
            if became_not_ready || (self.retry_mark.contains(&name) && observed_ready != "True") {
                match self.mark_pods_not_ready(&name).await {
                    Ok(()) => {
                        self.retry_mark.remove(&name);
                    }
                    Err(e) => {
                        tracing::warn!(node = %name, error = %format!("{e:#}"), "could not mark all pods not ready; retrying");
                        self.retry_mark.insert(name.clone());
                    }
                }
            } else if observed_ready == "True" {
                self.retry_mark.remove(&name);
            }
            current_nodes.push(current);
        }

        if self
            .handle_disruption(&zone_ready, &current_nodes, now)
            .await
        {
            for p in pending {
                let limiter = self
                    .limiters
                    .entry(p.zone.clone())
                    .or_insert_with(|| TokenBucket::new(self.config.node_eviction_rate, now));
                if limiter.try_take(now) {
                    tracing::info!(node = ?p.node.metadata.name, taint = p.wanted, "tainting node for eviction");
                    self.set_no_execute(&p.node, Some(p.wanted)).await;
                }
            }
        }
        for node in &current_nodes {
            if let Some(latest) = observed.lock().ok().and_then(|o| {
                o.nodes
                    .get(node.metadata.name.as_deref().unwrap_or_default())
                    .cloned()
            }) {
                self.no_schedule_pass(&latest).await;
            }
        }
    }

    /// Zone states and the all-zones-down safety (kube's `handleDisruption`). Returns
    /// whether NoExecute taints may be added in this pass.
    async fn handle_disruption(
        &mut self,
        zone_ready: &HashMap<String, Vec<bool>>,
        nodes: &[Node],
        now: Instant,
    ) -> bool {
        let new_states: HashMap<String, ZoneState> = zone_ready
            .iter()
            .map(|(zone, ready)| {
                (
                    zone.clone(),
                    zone_state(ready, self.config.unhealthy_zone_threshold),
                )
            })
            .collect();
        let all_now =
            !new_states.is_empty() && new_states.values().all(|s| *s == ZoneState::FullDisruption);
        self.zone_states.retain(|z, _| new_states.contains_key(z));
        let all_before = !self.zone_states.is_empty()
            && self
                .zone_states
                .values()
                .all(|s| *s == ZoneState::FullDisruption);
        if all_now {
            if !all_before {
                tracing::warn!("every node is not ready: entering disruption mode (no evictions)");
                for node in nodes {
                    if has_taint(node, NOT_READY_TAINT, "NoExecute")
                        || has_taint(node, UNREACHABLE_TAINT, "NoExecute")
                    {
                        self.set_no_execute(node, None).await;
                    }
                }
            }
            self.zone_states = new_states;
            return false;
        }
        if all_before {
            tracing::info!("some nodes are ready again: leaving disruption mode");
            // Every node gets a fresh grace period, as after a controller restart.
            for health in self.health.values_mut() {
                health.probe = now;
            }
        }
        for (zone, state) in &new_states {
            let size = zone_ready.get(zone).map_or(0, Vec::len);
            let rate = zone_rate(&self.config, *state, size);
            let limiter = self
                .limiters
                .entry(zone.clone())
                .or_insert_with(|| TokenBucket::new(rate, now));
            limiter.set_rate(rate);
            if self.zone_states.get(zone) != Some(state) {
                tracing::info!(zone = %zone, ?state, "zone state changed");
            }
        }
        self.limiters.retain(|z, _| new_states.contains_key(z));
        self.zone_states = new_states;
        true
    }

    async fn refetch(&self, name: &str) -> Option<Node> {
        self.nodes().get_opt(name).await.ok().flatten()
    }

    async fn write_conditions(
        &self,
        node: &Node,
        conditions: Vec<NodeCondition>,
    ) -> anyhow::Result<Node> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let patch = json!({
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "status": {"conditions": conditions},
        });
        Ok(self
            .nodes()
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?)
    }

    async fn write_taints(&self, node: &Node, taints: Vec<Taint>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let taints = if taints.is_empty() {
            serde_json::Value::Null
        } else {
            json!(taints)
        };
        let patch = json!({
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "spec": {"taints": taints},
        });
        match self
            .nodes()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            // Changed meanwhile: the next pass works from the newer node.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                tracing::debug!(node = %name, code = e.code, "node changed while tainting; retrying next pass")
            }
            Err(e) => tracing::warn!(node = %name, error = %e, "could not update node taints"),
        }
    }

    async fn set_no_execute(&self, node: &Node, wanted: Option<&str>) {
        let taints = with_no_execute(&taints_of(node), wanted, &now_time());
        if taints != taints_of(node) {
            self.write_taints(node, taints).await;
        }
    }

    async fn no_schedule_pass(&self, node: &Node) {
        if let Some(taints) = with_no_schedule(node) {
            self.write_taints(node, taints).await;
        }
    }

    /// Sets Ready=False on every pod bound to `node` (kube's `MarkPodsNotReady`).
    async fn mark_pods_not_ready(&self, node: &str) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let list = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await?;
        let mut failures = 0;
        for pod in list.items {
            let (Some(ns), Some(name)) =
                (pod.metadata.namespace.clone(), pod.metadata.name.clone())
            else {
                continue;
            };
            let mut conditions = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            let Some(ready) = conditions.iter_mut().find(|c| c.type_ == "Ready") else {
                continue;
            };
            if ready.status == "False" {
                continue;
            }
            ready.status = "False".into();
            ready.last_transition_time = Some(now_time());
            let patch = json!({
                "metadata": {"resourceVersion": pod.metadata.resource_version},
                "status": {"conditions": conditions},
            });
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(updated) => {
                    self.recorder
                        .record(
                            &reference(&updated),
                            EventType::Warning,
                            "NodeNotReady",
                            "Node is not ready",
                        )
                        .await;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => {
                    tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "could not mark pod not ready");
                    failures += 1;
                }
            }
        }
        if failures > 0 {
            anyhow::bail!("{failures} pod(s) on node {node} could not be marked not ready");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(value: serde_json::Value) -> Node {
        serde_json::from_value(value).expect("node")
    }

    fn ready_node(status: &str, heartbeat: &str) -> Node {
        node(json!({
            "metadata": {"name": "n", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"conditions": [
                {"type": "Ready", "status": status, "lastHeartbeatTime": heartbeat,
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "MemoryPressure", "status": "False"},
            ]}
        }))
    }

    fn lease(renew: &str) -> Lease {
        serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": {"renewTime": renew}}))
            .expect("lease")
    }

    const GRACE: Duration = Duration::from_secs(40);

    #[test]
    fn heartbeats_move_the_probe_time() {
        let t0 = Instant::now();
        let first = observe(
            None,
            &ready_node("True", "2026-01-01T00:00:00Z"),
            None,
            t0,
            GRACE,
        );
        assert_eq!(first.probe, t0, "a node first seen counts as fresh");
        let t1 = t0 + Duration::from_secs(10);
        let same = observe(
            Some(&first),
            &ready_node("True", "2026-01-01T00:00:00Z"),
            None,
            t1,
            GRACE,
        );
        assert_eq!(same.probe, t0, "nothing changed");
        let beat = observe(
            Some(&same),
            &ready_node("True", "2026-01-01T00:00:10Z"),
            None,
            t1,
            GRACE,
        );
        assert_eq!(beat.probe, t1, "a new condition heartbeat counts");
        let t2 = t1 + Duration::from_secs(10);
        let leased = observe(
            Some(&beat),
            &ready_node("True", "2026-01-01T00:00:10Z"),
            Some(&lease("2026-01-01T00:00:20.000000Z")),
            t2,
            GRACE,
        );
        assert_eq!(leased.probe, t2, "a lease renewal counts");
        let t3 = t2 + Duration::from_secs(10);
        let again = observe(
            Some(&leased),
            &ready_node("True", "2026-01-01T00:00:10Z"),
            Some(&lease("2026-01-01T00:00:20.000000Z")),
            t3,
            GRACE,
        );
        assert_eq!(again.probe, t2, "the same renewTime does not");
    }

    #[test]
    fn never_posted_nodes_count_from_creation() {
        let bare =
            node(json!({"metadata": {"name": "n", "creationTimestamp": "2000-01-01T00:00:00Z"}}));
        let now = Instant::now();
        let h = observe(None, &bare, None, now, GRACE);
        // The machine has been up longer than the grace period in any real test run.
        assert!(now.saturating_duration_since(h.probe) > GRACE);
        let leased = observe(
            None,
            &bare,
            Some(&lease("2026-01-01T00:00:00Z")),
            now,
            GRACE,
        );
        assert_eq!(
            leased.probe, now,
            "a lease is a heartbeat even before any status"
        );
    }

    #[test]
    fn silent_nodes_get_unknown_conditions() {
        let now = now_time();
        let conditions =
            unknown_conditions(&ready_node("True", "2026-01-01T00:00:00Z"), &now).expect("changed");
        let ready = conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("ready");
        assert_eq!(ready.status, "Unknown");
        assert_eq!(ready.reason.as_deref(), Some("NodeStatusUnknown"));
        assert_eq!(
            ready.message.as_deref(),
            Some("Kubelet stopped posting node status.")
        );
        assert_eq!(
            time_text(ready.last_heartbeat_time.as_ref()).as_deref(),
            Some("2026-01-01T00:00:00Z"),
            "the last heartbeat is kept"
        );
        let disk = conditions
            .iter()
            .find(|c| c.type_ == "DiskPressure")
            .expect("added");
        assert_eq!(disk.reason.as_deref(), Some("NodeStatusNeverUpdated"));
        assert_eq!(conditions.len(), 4);
        let mut unknown = ready_node("True", "2026-01-01T00:00:00Z");
        unknown.status.as_mut().expect("status").conditions = Some(conditions);
        assert!(
            unknown_conditions(&unknown, &now).is_none(),
            "already Unknown"
        );
    }

    #[test]
    fn zone_states_as_kube_computes_them() {
        assert_eq!(zone_state(&[true, false], 0.55), ZoneState::Normal);
        assert_eq!(zone_state(&[false], 0.55), ZoneState::FullDisruption);
        assert_eq!(zone_state(&[false, false], 0.55), ZoneState::FullDisruption);
        assert_eq!(zone_state(&[true, false, false], 0.55), ZoneState::Normal);
        assert_eq!(
            zone_state(&[true, false, false, false], 0.55),
            ZoneState::PartialDisruption
        );
        assert_eq!(
            zone_state(&[true, true, true, false, false, false], 0.55),
            ZoneState::Normal
        );
        assert_eq!(zone_state(&[], 0.55), ZoneState::Normal);
        let config = Config::for_cluster_cidr("10.42.0.0/16".parse().expect("cidr"));
        assert_eq!(zone_rate(&config, ZoneState::PartialDisruption, 10), 0.0);
        assert_eq!(zone_rate(&config, ZoneState::PartialDisruption, 51), 0.01);
        assert_eq!(zone_rate(&config, ZoneState::FullDisruption, 3), 0.1);
    }

    #[test]
    fn token_bucket_has_a_burst_of_one() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(0.5, t0);
        assert!(bucket.try_take(t0));
        assert!(!bucket.try_take(t0 + Duration::from_secs(1)));
        assert!(bucket.try_take(t0 + Duration::from_secs(3)));
        bucket.set_rate(0.0);
        assert!(!bucket.try_take(t0 + Duration::from_secs(100)));
    }

    #[test]
    fn no_execute_taints_swap_and_keep_others() {
        let now = now_time();
        let user = Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoExecute".into(),
            time_added: None,
        };
        let unreachable =
            with_no_execute(std::slice::from_ref(&user), Some(UNREACHABLE_TAINT), &now);
        assert_eq!(unreachable.len(), 2);
        assert!(
            unreachable
                .iter()
                .any(|t| t.key == UNREACHABLE_TAINT && t.time_added.is_some())
        );
        let swapped = with_no_execute(&unreachable, Some(NOT_READY_TAINT), &now);
        assert_eq!(
            swapped.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            ["dedicated", NOT_READY_TAINT]
        );
        assert_eq!(with_no_execute(&swapped, None, &now), vec![user]);
        assert_eq!(wanted_no_execute("True"), None);
        assert_eq!(wanted_no_execute("False"), Some(NOT_READY_TAINT));
        assert_eq!(wanted_no_execute("Unknown"), Some(UNREACHABLE_TAINT));
    }

    #[test]
    fn no_schedule_taints_follow_conditions_and_cordon() {
        let mut n = ready_node("Unknown", "2026-01-01T00:00:00Z");
        let taints = with_no_schedule(&n).expect("adds");
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0].key, UNREACHABLE_TAINT);
        assert_eq!(taints[0].effect, "NoSchedule");
        n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(vec![
                taints[0].clone(),
                Taint {
                    key: "user".into(),
                    effect: "NoSchedule".into(),
                    value: None,
                    time_added: None,
                },
            ]),
            unschedulable: Some(true),
            ..Default::default()
        });
        let cordoned = with_no_schedule(&n).expect("adds unschedulable");
        assert!(cordoned.iter().any(|t| t.key == UNSCHEDULABLE_TAINT));
        n.spec.as_mut().expect("spec").taints = Some(cordoned);
        assert!(with_no_schedule(&n).is_none(), "stable");
        // Ready again and uncordoned: only the user's taint stays.
        let mut back = ready_node("True", "2026-01-01T00:00:30Z");
        back.spec = n.spec.clone();
        back.spec.as_mut().expect("spec").unschedulable = None;
        let cleaned = with_no_schedule(&back).expect("removes");
        assert_eq!(
            cleaned.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            ["user"]
        );
    }

    #[test]
    fn zone_keys() {
        let plain = ready_node("True", "2026-01-01T00:00:00Z");
        assert_eq!(zone_key(&plain), "");
        let zoned = node(json!({"metadata": {"name": "n", "labels": {
            "topology.kubernetes.io/region": "eu", "topology.kubernetes.io/zone": "eu-1"}}}));
        assert_eq!(zone_key(&zoned), "eu:\x00:eu-1");
    }
}
