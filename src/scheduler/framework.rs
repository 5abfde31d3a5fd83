//! The scheduling algorithm, free of I/O: the node cache with per-node accounting of the
//! pods bound (or assumed bound) to each node, the filters, the scores, node selection
//! and kube-scheduler's `FailedScheduling` wording. Everything here is pure and tested
//! beside the code; `mod.rs` feeds it from watches and acts on its answers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, ResourceRequirements, Taint,
    Toleration,
};

use super::image_locality::ImageTable;
use super::inter_pod_affinity::{self as interpod, Incoming, PodAffinity};
use super::quantity::amount;
use super::topology_spread::{self as spread, Constraints};

/// kube-scheduler's default for containers without a cpu request (for scoring only).
const DEFAULT_MILLI_CPU: i64 = 100;
/// kube-scheduler's default for containers without a memory request (for scoring only).
const DEFAULT_MEMORY: i64 = 200 * 1024 * 1024;

pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";
pub const REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub const REASON_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
pub const REASON_PORTS: &str = "node(s) didn't have free ports for the requested pod ports";
pub const REASON_TOO_MANY_PODS: &str = "Too many pods";
pub const PREEMPTION_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";
pub const NO_NODES: &str = "no nodes available to schedule pods";

/// `namespace/name`.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Requested amounts: cpu in millicores, memory and ephemeral storage in bytes, other
/// (extended) resources in their units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    fn get(&self, name: &str) -> i64 {
        match name {
            "cpu" => self.milli_cpu,
            "memory" => self.memory,
            "ephemeral-storage" => self.ephemeral_storage,
            other => self.scalar.get(other).copied().unwrap_or(0),
        }
    }

    fn set(&mut self, name: &str, v: i64) {
        match name {
            "cpu" => self.milli_cpu = v,
            "memory" => self.memory = v,
            "ephemeral-storage" => self.ephemeral_storage = v,
            "pods" => {}
            other => {
                self.scalar.insert(other.to_string(), v);
            }
        }
    }

    fn combine(&mut self, other: &Resources, f: impl Fn(i64, i64) -> i64) {
        self.milli_cpu = f(self.milli_cpu, other.milli_cpu);
        self.memory = f(self.memory, other.memory);
        self.ephemeral_storage = f(self.ephemeral_storage, other.ephemeral_storage);
        for (name, v) in self.scalar.iter_mut() {
            *v = f(*v, other.scalar.get(name).copied().unwrap_or(0));
        }
        for (name, v) in &other.scalar {
            if !self.scalar.contains_key(name) {
                self.scalar.insert(name.clone(), f(0, *v));
            }
        }
    }

    pub fn add(&mut self, other: &Resources) {
        self.combine(other, i64::saturating_add);
    }

    pub fn sub(&mut self, other: &Resources) {
        self.combine(other, i64::saturating_sub);
    }

    pub fn max(&mut self, other: &Resources) {
        self.combine(other, i64::max);
    }

    /// From a resource list (requests, allocatable, overhead).
    pub fn from_list(
        list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    ) -> Resources {
        let mut r = Resources::default();
        for (name, q) in list.into_iter().flatten() {
            r.set(name, amount(name, q));
        }
        r
    }
}

/// A container's requests; a resource with a limit but no request requests its limit
/// (what API defaulting does).
fn container_requests(c: &Container, non_zero: bool) -> Resources {
    let empty = ResourceRequirements::default();
    let res = c.resources.as_ref().unwrap_or(&empty);
    let mut r = Resources::from_list(res.limits.as_ref());
    let requests = Resources::from_list(res.requests.as_ref());
    if let Some(reqs) = res.requests.as_ref() {
        for name in reqs.keys() {
            r.set(name, requests.get(name));
        }
    }
    if non_zero {
        let has = |name: &str| {
            res.requests.as_ref().is_some_and(|m| m.contains_key(name))
                || res.limits.as_ref().is_some_and(|m| m.contains_key(name))
        };
        if !has("cpu") {
            r.milli_cpu = DEFAULT_MILLI_CPU;
        }
        if !has("memory") {
            r.memory = DEFAULT_MEMORY;
        }
    }
    r
}

/// A pod's effective request as Kubernetes computes it: the sum of the app containers
/// (plus restartable init containers, which run beside them), or the largest init
/// container step if that is bigger, plus the pod overhead. With `non_zero`, containers
/// without cpu/memory requests count kube-scheduler's defaults (for scoring).
pub fn pod_requests(pod: &Pod, non_zero: bool) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::default();
    };
    let mut reqs = Resources::default();
    for c in &spec.containers {
        reqs.add(&container_requests(c, non_zero));
    }
    let mut restartable = Resources::default();
    let mut init_max = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let mut step = container_requests(c, non_zero);
        if c.restart_policy.as_deref() == Some("Always") {
            reqs.add(&step);
            restartable.add(&step);
            step = restartable.clone();
        } else {
            step.add(&restartable);
        }
        init_max.max(&step);
    }
    reqs.max(&init_max);
    reqs.add(&Resources::from_list(spec.overhead.as_ref()));
    reqs
}

/// A host port a pod uses.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

impl HostPort {
    fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|p| *p > 0)?;
            Some(HostPort {
                ip: p
                    .host_ip
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".into()),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                port,
            })
        })
        .collect()
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// The controlling ReplicaSet, ReplicationController or StatefulSet of a pod: kube's
/// system default spread constraints apply to the pods such a controller selects.
pub fn spreading_controller(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| {
            o.controller == Some(true)
                && matches!(
                    o.kind.as_str(),
                    "ReplicaSet" | "ReplicationController" | "StatefulSet"
                )
        })
        .map(|o| o.uid.as_str())
}

/// What the cache keeps of a pod bound (or assumed bound) to a node: only what the
/// filters and scores read, never the whole Pod (thousands of pods are cached).
#[derive(Clone, Debug)]
pub struct PodInfo {
    pub uid: String,
    pub node: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    /// See [`spreading_controller`].
    pub controller_uid: Option<String>,
    pub requests: Resources,
    pub non_zero: Resources,
    pub ports: Vec<HostPort>,
    pub priority: i32,
    /// Its inter-pod (anti-)affinity terms, if it has any.
    pub affinity: Option<Arc<PodAffinity>>,
    /// False while only assumed by us (binding sent, not yet seen through the watch).
    pub confirmed: bool,
    /// When we assumed it (unconfirmed entries expire, as kube's assumed pods do).
    pub assumed_at: Option<std::time::Instant>,
}

impl PodInfo {
    pub fn new(pod: &Pod, node: &str, confirmed: bool) -> PodInfo {
        PodInfo {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            node: node.to_string(),
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            controller_uid: spreading_controller(pod).map(str::to_string),
            requests: pod_requests(pod, false),
            non_zero: pod_requests(pod, true),
            ports: host_ports(pod),
            priority: priority(pod),
            affinity: PodAffinity::of(pod).map(Arc::new),
            confirmed,
            assumed_at: (!confirmed).then(std::time::Instant::now),
        }
    }
}

/// Per-node aggregate of the pods on it.
#[derive(Clone, Debug, Default)]
pub struct NodeUsage {
    pub requested: Resources,
    pub non_zero: Resources,
    pub pods: BTreeMap<String, Arc<PodInfo>>,
    /// Pods per spreading controller uid (the system default spread counts these
    /// for every node on every attempt, so they must not need a scan).
    controllers: HashMap<String, i64>,
}

impl NodeUsage {
    fn add(&mut self, key: &str, info: Arc<PodInfo>) {
        self.requested.add(&info.requests);
        self.non_zero.add(&info.non_zero);
        if let Some(uid) = &info.controller_uid {
            *self.controllers.entry(uid.clone()).or_default() += 1;
        }
        self.pods.insert(key.to_string(), info);
    }

    fn remove(&mut self, key: &str) {
        if let Some(info) = self.pods.remove(key) {
            self.requested.sub(&info.requests);
            self.non_zero.sub(&info.non_zero);
            if let Some(uid) = &info.controller_uid
                && let Some(n) = self.controllers.get_mut(uid)
            {
                *n -= 1;
                if *n <= 0 {
                    self.controllers.remove(uid);
                }
            }
        }
    }

    /// How many pods on this node the controller with `uid` controls.
    pub fn controlled_by(&self, uid: &str) -> i64 {
        self.controllers.get(uid).copied().unwrap_or(0)
    }
}

/// Why one node was filtered out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFailure {
    pub reasons: Vec<String>,
    /// Removing pods could not help (kube's `UnschedulableAndUnresolvable`).
    pub unresolvable: bool,
}

impl NodeFailure {
    /// A failure that removing pods from the node cannot fix.
    pub fn unresolvable(reason: impl Into<String>) -> NodeFailure {
        NodeFailure {
            reasons: vec![reason.into()],
            unresolvable: true,
        }
    }

    /// A failure that preemption might fix.
    pub fn resolvable(reason: impl Into<String>) -> NodeFailure {
        NodeFailure {
            reasons: vec![reason.into()],
            unresolvable: false,
        }
    }
}

/// A pod that fits no node: per-node reasons, rendered as kube-scheduler does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FitError {
    pub num_nodes: usize,
    /// Reasons per failed node.
    pub filter: Vec<Vec<String>>,
    /// Preemption post-filter reasons per node, or a whole message (not eligible).
    pub preemption: Result<Vec<Vec<String>>, String>,
}

/// `0/N nodes are available: <sorted histogram>.`, as `FitError.Error` builds it.
fn histogram_message(num_nodes: usize, per_node: &[Vec<String>]) -> String {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for reasons in per_node {
        for r in reasons {
            *counts.entry(r.as_str()).or_default() += 1;
        }
    }
    let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    // Go's sort.Strings: bytewise order of "count reason".
    parts.sort();
    let mut msg = format!("0/{num_nodes} nodes are available:");
    if !parts.is_empty() {
        msg.push_str(&format!(" {}.", parts.join(", ")));
    }
    msg
}

impl FitError {
    /// Whether a pod bound somewhere may make this pod fit: some node failed only on
    /// required pod affinity or topology spread, which more pods can satisfy.
    pub fn may_fit_after_pod_add(&self) -> bool {
        self.filter
            .iter()
            .flatten()
            .any(|r| r == interpod::REASON_AFFINITY || r == spread::REASON_SPREAD)
    }
}

impl std::fmt::Display for FitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.num_nodes == 0 {
            return f.write_str(NO_NODES);
        }
        let post = match &self.preemption {
            Ok(per_node) => histogram_message(self.num_nodes, per_node),
            Err(msg) => msg.clone(),
        };
        write!(
            f,
            "{} preemption: {post}",
            histogram_message(self.num_nodes, &self.filter)
        )
    }
}

// ---------------------------------------------------------------------------------
// Matching helpers.

/// Whether `toleration` tolerates `taint` (client-go's `ToleratesTaint`).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    if let Some(key) = toleration.key.as_deref().filter(|k| !k.is_empty())
        && key != taint.key
    {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// One `matchExpressions` requirement against node labels.
pub fn match_requirement(req: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = req.values.as_deref().unwrap_or(&[]);
    let value = labels.get(&req.key);
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(v), [bound]) = (value, values) else {
                return false;
            };
            let (Ok(v), Ok(bound)) = (v.parse::<i64>(), bound.parse::<i64>()) else {
                return false;
            };
            if op == "Gt" { v > bound } else { v < bound }
        }
        _ => false,
    }
}

/// One node selector term (requirements ANDed). A term with no requirement matches
/// nothing, as in Kubernetes.
pub fn match_term(term: &NodeSelectorTerm, node: &Node) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let mut name_labels = BTreeMap::new();
    name_labels.insert(
        "metadata.name".to_string(),
        node.metadata.name.clone().unwrap_or_default(),
    );
    exprs.iter().all(|r| match_requirement(r, labels))
        && fields.iter().all(|r| {
            r.key == "metadata.name"
                && matches!(r.operator.as_str(), "In" | "NotIn")
                && match_requirement(r, &name_labels)
        })
}

/// `nodeSelector` and required node affinity.
pub fn matches_node_affinity(pod: &Pod, node: &Node) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    if let Some(selector) = spec.node_selector.as_ref() {
        let empty = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        if selector.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return false;
        }
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        Some(sel) => sel
            .node_selector_terms
            .iter()
            .any(|term| match_term(term, node)),
        None => true,
    }
}

/// Sum of the weights of the preferred node-affinity terms the node matches.
pub fn preferred_affinity_score(pod: &Pod, node: &Node) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|terms| {
            terms
                .iter()
                .filter(|t| t.weight != 0 && match_term(&t.preference, node))
                .map(|t| t.weight as i64)
                .sum()
        })
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------
// The cache and the algorithm.

/// One node as the filters and scores read it: the object, its parsed allocatable, and
/// the pods accounted on it, together, so that a search visiting hundreds of nodes per
/// pod reads each by position instead of hashing its name into several maps.
pub struct NodeInfo {
    pub name: String,
    pub node: Arc<Node>,
    /// Parsed `status.allocatable`.
    allocatable: Resources,
    /// Its pod capacity (`status.allocatable.pods`).
    allowed_pods: i64,
    pub usage: NodeUsage,
}

/// Nodes and the pods bound to them.
#[derive(Default)]
pub struct Cache {
    /// Every node, sorted by name (the order partial searches go round).
    nodes: Vec<NodeInfo>,
    /// Node name → position in `nodes`.
    node_index: HashMap<String, usize>,
    /// Pods accounted on nodes the cache does not know (bound before their node was
    /// seen, or after it was deleted); moved onto the node when it appears.
    orphan_usage: HashMap<String, NodeUsage>,
    /// pod key → where it is accounted.
    assigned: HashMap<String, Arc<PodInfo>>,
    /// Keys of accounted pods that carry inter-pod (anti-)affinity terms: the only
    /// ones a pod without terms of its own must be checked against.
    with_affinity: HashSet<String>,
    /// Namespace labels, for affinity terms' `namespaceSelector`.
    pub namespace_labels: HashMap<String, BTreeMap<String, String>>,
    images: ImageTable,
    /// Where the next search starts (kube's `nextStartNodeIndex`), so that partial
    /// searches visit every node in turn.
    next_start: usize,
}

/// A precomputed view of the pod being scheduled.
struct Candidate<'a> {
    pod: &'a Pod,
    requests: Resources,
    non_zero: Resources,
    ports: Vec<HostPort>,
    tolerations: &'a [Toleration],
    priority: i32,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    affinity: Option<PodAffinity>,
    spread: Constraints,
}

impl Candidate<'_> {
    fn incoming(&self) -> Incoming<'_> {
        Incoming {
            namespace: self.namespace,
            labels: self.labels,
            affinity: self.affinity.as_ref(),
        }
    }
}

/// kube-scheduler's minimum number of feasible nodes to look for.
const MIN_FEASIBLE_NODES: usize = 100;
/// kube-scheduler's floor for the adaptive percentage.
const MIN_FEASIBLE_PERCENTAGE: usize = 5;

/// How many feasible nodes to find before scoring, as kube-scheduler's adaptive
/// `percentageOfNodesToScore`: all of up to 100 nodes, else 50% minus 1% per 125
/// nodes (at least 5%), and never fewer than 100.
pub fn feasible_nodes_to_find(all: usize) -> usize {
    if all < MIN_FEASIBLE_NODES {
        return all;
    }
    let percentage = 50usize
        .saturating_sub(all / 125)
        .max(MIN_FEASIBLE_PERCENTAGE);
    (all * percentage / 100).max(MIN_FEASIBLE_NODES)
}

impl Cache {
    /// Records a node (new, or a new state of a known one); true when what scheduling
    /// reads of it changed.
    pub fn set_node(&mut self, node: Node) -> bool {
        let name = node.metadata.name.clone().unwrap_or_default();
        let list = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let allowed_pods = list
            .and_then(|m| m.get("pods"))
            .map(|q| amount("pods", q))
            .unwrap_or(0);
        let allocatable = Resources::from_list(list);
        self.images.set_node(&node);
        let node = Arc::new(node);
        if let Some(&i) = self.node_index.get(&name) {
            let info = &mut self.nodes[i];
            let old = &info.node;
            let changed = old.metadata.labels != node.metadata.labels
                || old.spec != node.spec
                || old.status.as_ref().and_then(|s| s.allocatable.as_ref())
                    != node.status.as_ref().and_then(|s| s.allocatable.as_ref());
            info.node = node;
            info.allocatable = allocatable;
            info.allowed_pods = allowed_pods;
            return changed;
        }
        let usage = self.orphan_usage.remove(&name).unwrap_or_default();
        let at = self.nodes.partition_point(|n| n.name < name);
        self.nodes.insert(
            at,
            NodeInfo {
                name,
                node,
                allocatable,
                allowed_pods,
                usage,
            },
        );
        self.reindex_from(at);
        true
    }

    /// Points the index at the nodes from position `from` on, after an insert or removal.
    fn reindex_from(&mut self, from: usize) {
        for (i, info) in self.nodes.iter().enumerate().skip(from) {
            match self.node_index.get_mut(&info.name) {
                Some(slot) => *slot = i,
                None => {
                    self.node_index.insert(info.name.clone(), i);
                }
            }
        }
    }

    /// Every node, in name order.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.iter()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn node(&self, name: &str) -> Option<&Arc<Node>> {
        self.node_index.get(name).map(|&i| &self.nodes[i].node)
    }

    /// Records a namespace's labels; true when they changed.
    pub fn set_namespace(&mut self, name: &str, labels: BTreeMap<String, String>) -> bool {
        self.namespace_labels
            .insert(name.to_string(), labels.clone())
            != Some(labels)
    }

    pub fn remove_namespace(&mut self, name: &str) {
        self.namespace_labels.remove(name);
    }

    /// Every accounted pod.
    pub fn all_pods(&self) -> impl Iterator<Item = &PodInfo> {
        self.assigned.values().map(|p| p.as_ref())
    }

    /// Accounted pods with inter-pod (anti-)affinity terms.
    pub fn pods_with_affinity(&self) -> impl Iterator<Item = &PodInfo> {
        self.with_affinity
            .iter()
            .filter_map(|k| self.assigned.get(k))
            .map(|p| p.as_ref())
    }

    pub fn remove_node(&mut self, name: &str) {
        self.images.remove_node(name);
        let Some(at) = self.node_index.remove(name) else {
            return;
        };
        let info = self.nodes.remove(at);
        if !info.usage.pods.is_empty() {
            self.orphan_usage.insert(info.name, info.usage);
        }
        self.reindex_from(at);
    }

    fn usage_mut(&mut self, node: &str) -> &mut NodeUsage {
        match self.node_index.get(node) {
            Some(&i) => &mut self.nodes[i].usage,
            None => self.orphan_usage.entry(node.to_string()).or_default(),
        }
    }

    /// Accounts `pod` on `info.node`, replacing what was accounted for it before.
    pub fn add_pod(&mut self, key: &str, info: PodInfo) {
        self.remove_pod(key);
        let info = Arc::new(info);
        if info.affinity.is_some() {
            self.with_affinity.insert(key.to_string());
        }
        self.usage_mut(&info.node).add(key, info.clone());
        self.assigned.insert(key.to_string(), info);
    }

    pub fn remove_pod(&mut self, key: &str) -> bool {
        let Some(info) = self.assigned.remove(key) else {
            return false;
        };
        self.with_affinity.remove(key);
        match self.node_index.get(&info.node) {
            Some(&i) => self.nodes[i].usage.remove(key),
            None => {
                if let Some(usage) = self.orphan_usage.get_mut(&info.node) {
                    usage.remove(key);
                    if usage.pods.is_empty() {
                        self.orphan_usage.remove(&info.node);
                    }
                }
            }
        }
        true
    }

    pub fn assigned(&self, key: &str) -> Option<&Arc<PodInfo>> {
        self.assigned.get(key)
    }

    /// Keys of every accounted pod.
    pub fn assigned_keys(&self) -> impl Iterator<Item = &String> {
        self.assigned.keys()
    }

    /// Forgets assumed pods the watch never confirmed within `ttl` (bound then deleted
    /// before we saw them, or a lost binding); returns how many.
    pub fn expire_assumed(&mut self, ttl: std::time::Duration) -> usize {
        let stale: Vec<String> = self
            .assigned
            .iter()
            .filter(|(_, p)| !p.confirmed && p.assumed_at.is_some_and(|t| t.elapsed() > ttl))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &stale {
            self.remove_pod(k);
        }
        stale.len()
    }

    /// The pods accounted on `node`.
    pub fn usage(&self, node: &str) -> Option<&NodeUsage> {
        match self.node_index.get(node) {
            Some(&i) => Some(&self.nodes[i].usage),
            None => self.orphan_usage.get(node),
        }
    }

    /// Runs the filters in kube-scheduler's plugin order, stopping at the first that
    /// fails: NodeUnschedulable, TaintToleration, NodeAffinity, NodePorts,
    /// NodeResourcesFit.
    fn filter(&self, c: &Candidate, info: &NodeInfo) -> Result<(), NodeFailure> {
        let (node, usage) = (info.node.as_ref(), &info.usage);
        let spec = node.spec.as_ref();
        if spec.and_then(|s| s.unschedulable).unwrap_or(false) {
            let taint = Taint {
                key: UNSCHEDULABLE_TAINT.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            };
            if !tolerated(c.tolerations, &taint) {
                return Err(NodeFailure::unresolvable(REASON_UNSCHEDULABLE));
            }
        }
        for taint in spec.and_then(|s| s.taints.as_deref()).unwrap_or(&[]) {
            if (taint.effect == "NoSchedule" || taint.effect == "NoExecute")
                && !tolerated(c.tolerations, taint)
            {
                return Err(NodeFailure::unresolvable(format!(
                    "node(s) had untolerated taint {{{}: {}}}",
                    taint.key,
                    taint.value.as_deref().unwrap_or("")
                )));
            }
        }
        if !matches_node_affinity(c.pod, node) {
            return Err(NodeFailure::unresolvable(REASON_AFFINITY));
        }
        if !c.ports.is_empty() {
            let used = usage.pods.values().flat_map(|p| &p.ports);
            let mut conflict = false;
            for u in used {
                if c.ports.iter().any(|p| p.conflicts(u)) {
                    conflict = true;
                    break;
                }
            }
            if conflict {
                return Err(NodeFailure {
                    reasons: vec![REASON_PORTS.into()],
                    unresolvable: false,
                });
            }
        }
        let mut reasons = Vec::new();
        let allocatable = &info.allocatable;
        if usage.pods.len() as i64 + 1 > info.allowed_pods {
            reasons.push(REASON_TOO_MANY_PODS.to_string());
        }
        let fixed = ["cpu", "memory", "ephemeral-storage"].into_iter();
        for name in fixed.chain(c.requests.scalar.keys().map(String::as_str)) {
            let want = c.requests.get(name);
            if want > 0
                && want
                    > allocatable
                        .get(name)
                        .saturating_sub(usage.requested.get(name))
            {
                reasons.push(format!("Insufficient {name}"));
            }
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(NodeFailure {
                reasons,
                unresolvable: false,
            })
        }
    }

    /// Scores a feasible node: least-allocated + balanced allocation (cpu, memory,
    /// weight 1 each, 0–100), before the normalized scores are added.
    fn resource_score(c: &Candidate, info: &NodeInfo) -> i64 {
        let allocatable = &info.allocatable;
        let used = &info.usage.non_zero;
        let pairs = [
            (
                used.milli_cpu.saturating_add(c.non_zero.milli_cpu),
                allocatable.milli_cpu,
            ),
            (
                used.memory.saturating_add(c.non_zero.memory),
                allocatable.memory,
            ),
        ];
        // LeastAllocated.
        let least: i64 = pairs
            .iter()
            .map(|&(req, cap)| {
                if cap <= 0 || req > cap {
                    0
                } else {
                    ((cap - req) as i128 * 100 / cap as i128) as i64
                }
            })
            .sum::<i64>()
            / 2;
        // BalancedAllocation: 1 - standard deviation of the utilization fractions.
        let fractions: Vec<f64> = pairs
            .iter()
            .map(|&(req, cap)| {
                if cap <= 0 {
                    1.0
                } else {
                    (req as f64 / cap as f64).min(1.0)
                }
            })
            .collect();
        let std = (fractions[0] - fractions[1]).abs() / 2.0;
        let balanced = ((1.0 - std) * 100.0) as i64;
        least + balanced
    }

    /// Picks a node for `pod`, or says why none fits. `random` breaks ties.
    ///
    /// As kube-scheduler: the filters run from where the last search stopped and
    /// stop once [`feasible_nodes_to_find`] nodes fit; the feasible nodes are scored
    /// by each plugin, normalized, weighted as in the default profile
    /// (NodeResourcesFit 1, NodeResourcesBalancedAllocation 1, ImageLocality 1,
    /// InterPodAffinity 2, NodeAffinity 2, PodTopologySpread 2, TaintToleration 3)
    /// and summed; the best wins, ties at random.
    pub fn find_node(
        &mut self,
        pod: &Pod,
        random: &mut impl FnMut() -> u64,
    ) -> Result<String, FitError> {
        let spec = pod.spec.as_ref();
        static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
        let c = Candidate {
            pod,
            requests: pod_requests(pod, false),
            non_zero: pod_requests(pod, true),
            ports: host_ports(pod),
            tolerations: spec.and_then(|s| s.tolerations.as_deref()).unwrap_or(&[]),
            priority: priority(pod),
            namespace: pod.metadata.namespace.as_deref().unwrap_or("default"),
            labels: pod.metadata.labels.as_ref().unwrap_or(&NO_LABELS),
            affinity: PodAffinity::of(pod),
            spread: Constraints::of(pod, spreading_controller(pod)),
        };
        let total = self.nodes.len();
        if total == 0 {
            return Err(self.fit_error(&c, Vec::new()));
        }
        let spread_filter = spread::FilterState::new(self, pod, c.tolerations, &c.spread.hard);
        let incoming = c.incoming();
        let interpod_filter = interpod::FilterState::new(self, &incoming);
        let want = feasible_nodes_to_find(total);
        let start = self.next_start % total;
        let mut feasible: Vec<&NodeInfo> = Vec::with_capacity(want);
        let mut failures: Vec<(&String, NodeFailure)> = Vec::new();
        let mut processed = 0;
        for i in 0..total {
            let info = &self.nodes[(start + i) % total];
            processed += 1;
            let verdict = self
                .filter(&c, info)
                .and_then(|()| spread_filter.filter(&c.spread.hard, &info.node))
                .and_then(|()| interpod_filter.filter(&incoming, &info.node));
            match verdict {
                Ok(()) => {
                    feasible.push(info);
                    if feasible.len() >= want {
                        break;
                    }
                }
                Err(f) => failures.push((&info.name, f)),
            }
        }
        let next_start = (start + processed) % total;
        if feasible.is_empty() {
            let err = self.fit_error(&c, failures);
            self.next_start = next_start;
            return Err(err);
        }
        if feasible.len() == 1 {
            let name = feasible[0].name.clone();
            self.next_start = next_start;
            return Ok(name);
        }
        let scores = self.scores(&c, &incoming, &feasible);
        let mut best: Option<(&String, i64)> = None;
        let mut ties = 0u64;
        for (i, info) in feasible.iter().enumerate() {
            let (name, score) = (&info.name, scores[i]);
            match best {
                Some((_, s)) if s > score => {}
                Some((_, s)) if s == score => {
                    ties += 1;
                    // Reservoir sampling: each tied node wins with equal probability.
                    if random().is_multiple_of(ties) {
                        best = Some((name, score));
                    }
                }
                _ => {
                    best = Some((name, score));
                    ties = 1;
                }
            }
        }
        let chosen = best.map(|(name, _)| name.clone());
        self.next_start = next_start;
        match chosen {
            Some(name) => Ok(name),
            None => Err(self.fit_error(&c, Vec::new())),
        }
    }

    /// The weighted total score of each feasible node.
    fn scores(&self, c: &Candidate, incoming: &Incoming, feasible: &[&NodeInfo]) -> Vec<i64> {
        let mut total: Vec<i64> = feasible
            .iter()
            .map(|info| Self::resource_score(c, info))
            .collect();
        let mut add = |weight: i64, normalized: Vec<i64>| {
            for (t, s) in total.iter_mut().zip(normalized) {
                *t += weight * s;
            }
        };
        // NodeAffinity (preferred terms), normalized to the best node.
        let affinity: Vec<i64> = feasible
            .iter()
            .map(|info| preferred_affinity_score(c.pod, &info.node))
            .collect();
        let max_affinity = affinity.iter().copied().max().unwrap_or(0);
        if max_affinity > 0 {
            add(2, affinity.iter().map(|a| a * 100 / max_affinity).collect());
        }
        // TaintToleration: fewer untolerated PreferNoSchedule taints is better.
        let intolerable: Vec<i64> = feasible
            .iter()
            .map(|info| {
                info.node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_deref())
                    .unwrap_or(&[])
                    .iter()
                    .filter(|t| t.effect == "PreferNoSchedule" && !tolerated(c.tolerations, t))
                    .count() as i64
            })
            .collect();
        let max_intolerable = intolerable.iter().copied().max().unwrap_or(0);
        add(
            3,
            intolerable
                .iter()
                .map(|i| {
                    if max_intolerable > 0 {
                        100 - i * 100 / max_intolerable
                    } else {
                        100
                    }
                })
                .collect(),
        );
        // ImageLocality.
        if !self.images.is_empty() {
            let all = self.nodes.len();
            add(
                1,
                feasible
                    .iter()
                    .map(|info| self.images.score(c.pod, &info.name, all))
                    .collect(),
            );
        }
        // InterPodAffinity (preferred terms, both directions).
        if let Some(state) = interpod::ScoreState::new(self, incoming) {
            let raw: Vec<i64> = feasible
                .iter()
                .map(|info| state.score(&info.node))
                .collect();
            add(2, interpod::normalize(&raw));
        }
        // PodTopologySpread (ScheduleAnyway and the system defaults).
        let nodes: Vec<&Node> = feasible.iter().map(|info| info.node.as_ref()).collect();
        if let Some(state) = spread::ScoreState::new(self, c.pod, c.tolerations, &c.spread, &nodes)
        {
            let raw: Vec<Option<i64>> = feasible
                .iter()
                .map(|info| state.score(c.namespace, info))
                .collect();
            add(2, spread::normalize(&raw));
        }
        total
    }

    fn fit_error(&self, c: &Candidate, failures: Vec<(&String, NodeFailure)>) -> FitError {
        let never = c
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.preemption_policy.as_deref())
            == Some("Never");
        let preemption = if never {
            Err("not eligible due to preemptionPolicy=Never.".to_string())
        } else {
            Ok(failures
                .iter()
                .map(|(name, f)| {
                    if f.unresolvable {
                        return vec![PREEMPTION_NOT_HELPFUL.to_string()];
                    }
                    let victims = self
                        .usage(name)
                        .is_some_and(|u| u.pods.values().any(|p| p.priority < c.priority));
                    if victims {
                        f.reasons.clone()
                    } else {
                        vec![NO_VICTIMS.to_string()]
                    }
                })
                .collect())
        };
        FitError {
            num_nodes: self.nodes.len(),
            filter: failures.into_iter().map(|(_, f)| f.reasons).collect(),
            preemption,
        }
    }
}

/// The set of keys, for callers that need to diff.
pub fn key_set<'a>(keys: impl Iterator<Item = &'a String>) -> HashSet<String> {
    keys.cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).expect("node")
    }

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    fn plain_node(name: &str, cpu: &str, memory: &str) -> Node {
        node(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}
        }))
    }

    fn toleration(v: serde_json::Value) -> Toleration {
        serde_json::from_value(v).expect("toleration")
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()).filter(|v: &String| !v.is_empty()),
            effect: effect.into(),
            ..Default::default()
        }
    }

    #[test]
    fn toleration_matching() {
        let t = taint("dedicated", "gpu", "NoSchedule");
        assert!(tolerates(
            &toleration(
                json!({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
            ),
            &t
        ));
        assert!(tolerates(
            &toleration(json!({"key": "dedicated", "value": "gpu"})),
            &t
        ));
        assert!(!tolerates(
            &toleration(json!({"key": "dedicated", "value": "cpu"})),
            &t
        ));
        assert!(tolerates(
            &toleration(json!({"key": "dedicated", "operator": "Exists"})),
            &t
        ));
        assert!(!tolerates(
            &toleration(json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"})),
            &t
        ));
        assert!(!tolerates(
            &toleration(json!({"key": "other", "operator": "Exists"})),
            &t
        ));
        // Empty key with Exists tolerates everything.
        assert!(tolerates(&toleration(json!({"operator": "Exists"})), &t));
        assert!(tolerates(
            &toleration(json!({"operator": "Exists"})),
            &taint("x", "", "NoExecute")
        ));
        // Equal with an empty key only matches an empty-keyed taint... which has key "".
        assert!(!tolerates(
            &toleration(json!({"operator": "Equal", "value": "v"})),
            &t
        ));
        assert!(!tolerates(
            &toleration(json!({"key": "dedicated", "operator": "Bogus"})),
            &t
        ));
    }

    #[test]
    fn affinity_matching() {
        let n = node(json!({"metadata": {"name": "n1", "labels": {"zone": "a", "cores": "8"}}}));
        let req = |key: &str, op: &str, values: &[&str]| NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| s.to_string()).collect()),
        };
        let labels = n.metadata.labels.clone().unwrap_or_default();
        assert!(match_requirement(&req("zone", "In", &["a", "b"]), &labels));
        assert!(!match_requirement(&req("zone", "In", &["b"]), &labels));
        assert!(match_requirement(&req("zone", "NotIn", &["b"]), &labels));
        assert!(match_requirement(&req("missing", "NotIn", &["b"]), &labels));
        assert!(match_requirement(&req("zone", "Exists", &[]), &labels));
        assert!(match_requirement(
            &req("missing", "DoesNotExist", &[]),
            &labels
        ));
        assert!(!match_requirement(
            &req("zone", "DoesNotExist", &[]),
            &labels
        ));
        assert!(match_requirement(&req("cores", "Gt", &["4"]), &labels));
        assert!(!match_requirement(&req("cores", "Lt", &["4"]), &labels));
        assert!(match_requirement(&req("cores", "Lt", &["16"]), &labels));
        assert!(!match_requirement(&req("zone", "Gt", &["1"]), &labels)); // not a number
        assert!(!match_requirement(&req("missing", "Gt", &["1"]), &labels));

        let p = pod(
            json!({"spec": {"containers": [], "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                    {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["2"]},
                                          {"key": "zone", "operator": "Exists"}]}
                ]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
                    {"weight": 7, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}},
                    {"weight": 9, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]}}
                ]
            }}}}),
        );
        assert!(matches_node_affinity(&p, &n));
        assert_eq!(preferred_affinity_score(&p, &n), 12);
        let sel = pod(json!({"spec": {"containers": [], "nodeSelector": {"zone": "b"}}}));
        assert!(!matches_node_affinity(&sel, &n));
        let empty_term = pod(
            json!({"spec": {"containers": [], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}}}),
        );
        assert!(!matches_node_affinity(&empty_term, &n));
    }

    #[test]
    fn requests_with_init_containers_and_overhead() {
        let p = pod(json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "200m"}, "limits": {"memory": "50Mi"}}}
            ],
            "initContainers": [
                {"name": "i1", "resources": {"requests": {"cpu": "1", "memory": "10Mi"}}},
                {"name": "i2", "resources": {"requests": {"memory": "500Mi"}}}
            ],
            "overhead": {"cpu": "10m"}
        }}));
        let r = pod_requests(&p, false);
        assert_eq!(r.milli_cpu, 1010); // max(300, 1000) + 10
        assert_eq!(r.memory, 500 * 1024 * 1024);
        let nz = pod_requests(&pod(json!({"spec": {"containers": [{"name": "a"}]}})), true);
        assert_eq!(
            (nz.milli_cpu, nz.memory),
            (DEFAULT_MILLI_CPU, DEFAULT_MEMORY)
        );
        // A restartable (sidecar) init container adds to the app containers.
        let side = pod(json!({"spec": {
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}],
            "initContainers": [{"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}}]
        }}));
        assert_eq!(pod_requests(&side, false).milli_cpu, 150);
    }

    #[test]
    fn message_format() {
        let fit = FitError {
            num_nodes: 3,
            filter: vec![
                vec![
                    "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }"
                        .into(),
                ],
                vec!["Insufficient cpu".into()],
                vec!["Insufficient cpu".into()],
            ],
            preemption: Ok(vec![
                vec![PREEMPTION_NOT_HELPFUL.into()],
                vec![NO_VICTIMS.into()],
                vec![NO_VICTIMS.into()],
            ]),
        };
        assert_eq!(
            fit.to_string(),
            "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
        );
        let never = FitError {
            num_nodes: 1,
            filter: vec![vec![
                "Insufficient cpu".into(),
                "Insufficient memory".into(),
            ]],
            preemption: Err("not eligible due to preemptionPolicy=Never.".into()),
        };
        assert_eq!(
            never.to_string(),
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. preemption: not eligible due to preemptionPolicy=Never."
        );
        let none = FitError {
            num_nodes: 0,
            filter: vec![],
            preemption: Ok(vec![]),
        };
        assert_eq!(none.to_string(), NO_NODES);
    }

    fn rng() -> impl FnMut() -> u64 {
        let mut x = 0x9e3779b97f4a7c15u64;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn filters_and_fit_error() {
        let mut cache = Cache::default();
        let mut cp = plain_node("cp", "4", "8Gi");
        cp.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(vec![taint(
                "node-role.kubernetes.io/control-plane",
                "",
                "NoSchedule",
            )]),
            ..Default::default()
        });
        cache.set_node(cp);
        cache.set_node(plain_node("w1", "2", "4Gi"));
        cache.set_node(plain_node("w2", "2", "4Gi"));
        let mut cordoned = plain_node("w3", "8", "8Gi");
        cordoned.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            unschedulable: Some(true),
            ..Default::default()
        });
        cache.set_node(cordoned);
        let big = pod(
            json!({"metadata": {"name": "big", "namespace": "default"}, "spec": {
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "3"}}}]}}),
        );
        let err = cache.find_node(&big, &mut rng()).expect_err("too big");
        assert_eq!(
            err.to_string(),
            "0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 1 node(s) were unschedulable, 2 Insufficient cpu. preemption: 0/4 nodes are available: 2 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
        );
        // A 1-cpu pod fits w1/w2; after two are accounted on each, the next doesn't.
        let small = |n: &str| {
            pod(
                json!({"metadata": {"name": n, "namespace": "default", "uid": n}, "spec": {
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}},
                            "ports": [{"containerPort": 80, "hostPort": 8080}]}]}}),
            )
        };
        let mut placed = BTreeMap::new();
        for i in 0..2 {
            let p = small(&format!("p{i}"));
            let node = cache.find_node(&p, &mut rng()).expect("fits");
            assert!(node == "w1" || node == "w2", "{node}");
            cache.add_pod(&pod_key(&p), PodInfo::new(&p, &node, false));
            *placed.entry(node).or_insert(0) += 1;
        }
        // Host port 8080 is taken on both workers now.
        assert_eq!(placed.len(), 2, "spread: {placed:?}");
        let err = cache
            .find_node(&small("p9"), &mut rng())
            .expect_err("ports");
        assert!(
            err.to_string()
                .contains("2 node(s) didn't have free ports for the requested pod ports"),
            "{err}"
        );
        // Removing one frees its node.
        cache.remove_pod("default/p0");
        assert!(cache.find_node(&small("p9"), &mut rng()).is_ok());
        // Tolerating the control-plane taint and selecting it works.
        let cp_pod = pod(json!({"metadata": {"name": "c"}, "spec": {
            "containers": [{"name": "a"}],
            "nodeSelector": {"kubernetes.io/hostname": "cp"},
            "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]}}));
        assert_eq!(cache.find_node(&cp_pod, &mut rng()).expect("cp"), "cp");
    }

    #[test]
    fn too_many_pods_and_memory() {
        let mut cache = Cache::default();
        cache.set_node(node(json!({"metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "1"}}})));
        let p = pod(json!({"metadata": {"name": "a"}, "spec": {"containers": [
            {"name": "a", "resources": {"requests": {"memory": "2Gi"}}}]}}));
        assert_eq!(
            cache.find_node(&p, &mut rng()).expect_err("no").filter,
            vec![vec!["Insufficient memory".to_string()]]
        );
        let q = pod(json!({"metadata": {"name": "b"}, "spec": {"containers": [{"name": "a"}]}}));
        cache.add_pod("default/x", PodInfo::new(&q, "n", true));
        assert_eq!(
            cache.find_node(&q, &mut rng()).expect_err("full").filter,
            vec![vec![REASON_TOO_MANY_PODS.to_string()]]
        );
    }

    #[test]
    fn pods_stay_accounted_while_their_node_comes_and_goes() {
        let mut cache = Cache::default();
        let small = |name: &str| plain_node(name, "1", "1Gi");
        for name in ["c", "a", "d"] {
            cache.set_node(small(name));
        }
        let p = pod(
            json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "600m"}}}]}}),
        );
        // Bound to a node the cache has not seen yet.
        cache.add_pod("ns/p", PodInfo::new(&p, "b", true));
        assert_eq!(cache.usage("b").map(|u| u.requested.milli_cpu), Some(600));
        cache.set_node(small("b"));
        let names: Vec<&str> = cache.nodes().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        for name in names {
            assert_eq!(
                cache.node(name).and_then(|n| n.metadata.name.as_deref()),
                Some(name)
            );
        }
        assert_eq!(cache.usage("b").map(|u| u.requested.milli_cpu), Some(600));
        // A second 600m pod fits anywhere but on b.
        let q = pod(
            json!({"metadata": {"name": "q", "namespace": "ns"}, "spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "600m"}}}]}}),
        );
        for _ in 0..8 {
            assert_ne!(cache.find_node(&q, &mut rng()).expect("fits"), "b");
        }
        // The node goes away and comes back: the pod is still accounted on it.
        cache.remove_node("a");
        cache.remove_node("b");
        assert!(cache.node("b").is_none());
        assert_eq!(cache.node_count(), 2);
        assert_eq!(cache.usage("b").map(|u| u.pods.len()), Some(1));
        assert_eq!(
            cache.node("d").and_then(|n| n.metadata.name.as_deref()),
            Some("d")
        );
        cache.set_node(small("b"));
        assert_eq!(cache.usage("b").map(|u| u.requested.milli_cpu), Some(600));
        assert!(cache.remove_pod("ns/p"));
        assert_eq!(cache.usage("b").map(|u| u.pods.len()), Some(0));
        // Removing a pod on an unknown node forgets that node's usage entirely.
        cache.add_pod("ns/p", PodInfo::new(&p, "gone", true));
        assert!(cache.remove_pod("ns/p"));
        assert!(cache.usage("gone").is_none());
    }

    fn zoned(name: &str, zone: Option<&str>) -> Node {
        let mut labels = json!({"kubernetes.io/hostname": name});
        if let Some(z) = zone {
            labels["topology.kubernetes.io/zone"] = json!(z);
        }
        node(json!({"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}))
    }

    fn labeled(name: &str, ns: &str, labels: serde_json::Value, extra: serde_json::Value) -> Pod {
        let mut spec = json!({"containers": [{"name": "c", "image": "pause"}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        pod(
            json!({"metadata": {"name": name, "namespace": ns, "uid": name, "labels": labels},
            "spec": spec}),
        )
    }

    fn place(cache: &mut Cache, p: &Pod) -> Result<String, FitError> {
        let node = cache.find_node(p, &mut rng())?;
        cache.add_pod(&pod_key(p), PodInfo::new(p, &node, true));
        Ok(node)
    }

    #[test]
    fn topology_spread_filter_honours_skew_min_domains_and_policies() {
        let mut cache = Cache::default();
        for (n, z) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
            cache.set_node(zoned(n, Some(z)));
        }
        let spread = |min_domains: Option<i32>| {
            let mut c = json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "w"}}});
            if let Some(m) = min_domains {
                c["minDomains"] = json!(m);
            }
            json!({"topologySpreadConstraints": [c]})
        };
        let mut zones = BTreeMap::new();
        for i in 0..4 {
            let p = labeled(
                &format!("w{i}"),
                "default",
                json!({"app": "w"}),
                spread(None),
            );
            let node = place(&mut cache, &p).expect("fits");
            *zones.entry(node.starts_with('a')).or_insert(0) += 1;
        }
        assert_eq!(zones, BTreeMap::from([(false, 2), (true, 2)]));
        // Pods of another namespace or selector do not count.
        let other = labeled(
            "x",
            "other",
            json!({"app": "w"}),
            json!({"nodeSelector": {"kubernetes.io/hostname": "b1"}}),
        );
        place(&mut cache, &other).expect("fits");
        // minDomains 3 with 2 zones: the global minimum is 0, so skew = 2 + 1 > 1.
        let p = labeled("m", "default", json!({"app": "w"}), spread(Some(3)));
        let err = cache.find_node(&p, &mut rng()).expect_err("minDomains");
        assert_eq!(err.filter, vec![vec![spread::REASON_SPREAD.to_string()]; 3]);
        // A node without the key is unresolvable.
        cache.set_node(zoned("nz", None));
        let err = cache.find_node(&p, &mut rng()).expect_err("still");
        assert!(
            err.to_string().contains(
                "1 node(s) didn't match pod topology spread constraints (missing required label)"
            ),
            "{err}"
        );
        // nodeAffinityPolicy Honor (default): a zone the pod cannot go to is no domain.
        let pinned = labeled(
            "p",
            "default",
            json!({"app": "w"}),
            json!({
            "nodeSelector": {"topology.kubernetes.io/zone": "a"},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "w"}}}]}),
        );
        assert!(cache.find_node(&pinned, &mut rng()).is_ok());
        let ignoring = labeled(
            "q",
            "default",
            json!({"app": "w"}),
            json!({
            "nodeSelector": {"topology.kubernetes.io/zone": "a"},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "nodeAffinityPolicy": "Ignore",
                "labelSelector": {"matchLabels": {"app": "w"}}}]}),
        );
        // Zones a=2, b=2: a would become 3 - 2 = 1 ≤ 1, so it still fits...
        assert!(cache.find_node(&ignoring, &mut rng()).is_ok());
        // ...but not once zone a leads.
        let extra = labeled(
            "w9",
            "default",
            json!({"app": "w"}),
            json!({"nodeSelector": {"kubernetes.io/hostname": "a1"}}),
        );
        place(&mut cache, &extra).expect("fits");
        assert!(cache.find_node(&ignoring, &mut rng()).is_err());
        assert!(
            cache.find_node(&pinned, &mut rng()).is_ok(),
            "only zone a counts"
        );
    }

    #[test]
    fn inter_pod_affinity_filters_in_kubes_order() {
        let mut cache = Cache::default();
        for n in ["n1", "n2"] {
            cache.set_node(zoned(n, Some("z")));
        }
        cache.set_namespace(
            "prod",
            BTreeMap::from([("env".to_string(), "prod".to_string())]),
        );
        let anti_ns = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname",
            "namespaceSelector": {"matchLabels": {"env": "prod"}}}]}}});
        // A guard pod on n1 that repels app=db pods of prod namespaces.
        let guard = labeled(
            "guard",
            "default",
            json!({"app": "guard"}),
            json!({"nodeSelector": {"kubernetes.io/hostname": "n1"}, "affinity": anti_ns["affinity"].clone()}),
        );
        place(&mut cache, &guard).expect("fits");
        for i in 0..3 {
            let db = labeled(&format!("db{i}"), "prod", json!({"app": "db"}), json!({}));
            assert_eq!(
                place(&mut cache, &db).expect("fits"),
                "n2",
                "repelled by guard"
            );
        }
        // In a namespace the selector does not match, n1 is fine.
        let dev = labeled(
            "dev",
            "dev",
            json!({"app": "db"}),
            json!({"nodeSelector": {"kubernetes.io/hostname": "n1"}}),
        );
        assert_eq!(place(&mut cache, &dev).expect("fits"), "n1");
        let pinned = labeled(
            "db9",
            "prod",
            json!({"app": "db"}),
            json!({"nodeSelector": {"kubernetes.io/hostname": "n1"}}),
        );
        let err = cache.find_node(&pinned, &mut rng()).expect_err("guarded");
        assert!(
            err.to_string()
                .contains("1 node(s) didn't satisfy existing pods anti-affinity rules"),
            "{err}"
        );
        // Zone-level affinity to app=guard: both nodes share zone z.
        let follow = labeled(
            "f",
            "default",
            json!({}),
            json!({"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": "guard"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}}),
        );
        assert!(cache.find_node(&follow, &mut rng()).is_ok());
        // A self-affine first pod may go anywhere.
        let first = labeled(
            "s",
            "default",
            json!({"app": "self"}),
            json!({"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": "self"}}, "topologyKey": "kubernetes.io/hostname"}]}}}),
        );
        assert!(cache.find_node(&first, &mut rng()).is_ok());
    }

    #[test]
    fn preferred_anti_affinity_and_system_default_spread_score() {
        let mut cache = Cache::default();
        for n in ["n1", "n2", "n3"] {
            cache.set_node(zoned(n, Some("z")));
        }
        let web = labeled(
            "web",
            "default",
            json!({"app": "web"}),
            json!({"nodeSelector": {"kubernetes.io/hostname": "n1"}}),
        );
        place(&mut cache, &web).expect("fits");
        let avoid = labeled(
            "a",
            "default",
            json!({}),
            json!({"affinity": {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
                "labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}}]}}}),
        );
        for _ in 0..20 {
            assert_ne!(cache.find_node(&avoid, &mut rng()).expect("fits"), "n1");
        }
        // Pods of one ReplicaSet spread over hostnames by the system defaults even
        // when a node has much more room.
        let owned = |i: usize| {
            let mut p = labeled(
                &format!("rs-{i}"),
                "default",
                json!({"app": "rs"}),
                json!({}),
            );
            p.metadata.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: "rs".into(),
                    uid: "rs-uid".into(),
                    controller: Some(true),
                    ..Default::default()
                },
            ]);
            p
        };
        let mut per_node = BTreeMap::new();
        for i in 0..6 {
            *per_node
                .entry(place(&mut cache, &owned(i)).expect("fits"))
                .or_insert(0) += 1;
        }
        assert_eq!(per_node.values().copied().max(), Some(2), "{per_node:?}");
    }

    #[test]
    fn partial_search_sizes_match_kube() {
        assert_eq!(feasible_nodes_to_find(50), 50);
        assert_eq!(feasible_nodes_to_find(100), 100);
        assert_eq!(feasible_nodes_to_find(1000), 420);
        assert_eq!(feasible_nodes_to_find(5000), 500);
        assert_eq!(feasible_nodes_to_find(200), 100);
    }
}
