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

use super::quantity::amount;

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

/// What the cache keeps of a pod bound (or assumed bound) to a node.
#[derive(Clone, Debug)]
pub struct PodInfo {
    pub uid: String,
    pub node: String,
    pub requests: Resources,
    pub non_zero: Resources,
    pub ports: Vec<HostPort>,
    pub priority: i32,
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
            requests: pod_requests(pod, false),
            non_zero: pod_requests(pod, true),
            ports: host_ports(pod),
            priority: priority(pod),
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
}

impl NodeUsage {
    fn add(&mut self, key: &str, info: Arc<PodInfo>) {
        self.requested.add(&info.requests);
        self.non_zero.add(&info.non_zero);
        self.pods.insert(key.to_string(), info);
    }

    fn remove(&mut self, key: &str) {
        if let Some(info) = self.pods.remove(key) {
            self.requested.sub(&info.requests);
            self.non_zero.sub(&info.non_zero);
        }
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
    fn unresolvable(reason: impl Into<String>) -> NodeFailure {
        NodeFailure {
            reasons: vec![reason.into()],
            unresolvable: true,
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

/// Nodes and the pods bound to them.
#[derive(Default)]
pub struct Cache {
    pub nodes: BTreeMap<String, Arc<Node>>,
    /// Parsed `status.allocatable` of each node, and its pod capacity.
    allocatable: HashMap<String, (Resources, i64)>,
    usage: HashMap<String, NodeUsage>,
    /// pod key → where it is accounted.
    assigned: HashMap<String, Arc<PodInfo>>,
}

/// A precomputed view of the pod being scheduled.
struct Candidate<'a> {
    pod: &'a Pod,
    requests: Resources,
    non_zero: Resources,
    ports: Vec<HostPort>,
    tolerations: &'a [Toleration],
    priority: i32,
}

impl Cache {
    pub fn set_node(&mut self, node: Node) -> bool {
        let name = node.metadata.name.clone().unwrap_or_default();
        let changed = match self.nodes.get(&name) {
            Some(old) => {
                old.metadata.labels != node.metadata.labels
                    || old.spec != node.spec
                    || old.status.as_ref().and_then(|s| s.allocatable.as_ref())
                        != node.status.as_ref().and_then(|s| s.allocatable.as_ref())
            }
            None => true,
        };
        let list = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let pods = list
            .and_then(|m| m.get("pods"))
            .map(|q| amount("pods", q))
            .unwrap_or(0);
        self.allocatable
            .insert(name.clone(), (Resources::from_list(list), pods));
        self.nodes.insert(name, Arc::new(node));
        changed
    }

    fn allocatable_of(&self, node: &Node) -> (&Resources, i64) {
        static NONE: std::sync::OnceLock<Resources> = std::sync::OnceLock::new();
        match self
            .allocatable
            .get(node.metadata.name.as_deref().unwrap_or_default())
        {
            Some((r, pods)) => (r, *pods),
            None => (NONE.get_or_init(Resources::default), 0),
        }
    }

    pub fn remove_node(&mut self, name: &str) {
        self.nodes.remove(name);
        self.allocatable.remove(name);
    }

    /// Accounts `pod` on `info.node`, replacing what was accounted for it before.
    pub fn add_pod(&mut self, key: &str, info: PodInfo) {
        self.remove_pod(key);
        let info = Arc::new(info);
        self.usage
            .entry(info.node.clone())
            .or_default()
            .add(key, info.clone());
        self.assigned.insert(key.to_string(), info);
    }

    pub fn remove_pod(&mut self, key: &str) -> bool {
        let Some(info) = self.assigned.remove(key) else {
            return false;
        };
        if let Some(usage) = self.usage.get_mut(&info.node) {
            usage.remove(key);
            if usage.pods.is_empty() {
                self.usage.remove(&info.node);
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

    pub fn usage(&self, node: &str) -> Option<&NodeUsage> {
        self.usage.get(node)
    }

    /// Runs the filters in kube-scheduler's plugin order, stopping at the first that
    /// fails: NodeUnschedulable, TaintToleration, NodeAffinity, NodePorts,
    /// NodeResourcesFit.
    fn filter(
        &self,
        c: &Candidate,
        node: &Node,
        usage: Option<&NodeUsage>,
    ) -> Result<(), NodeFailure> {
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
            let used = usage
                .into_iter()
                .flat_map(|u| u.pods.values())
                .flat_map(|p| &p.ports);
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
        let (allocatable, allowed_pods) = self.allocatable_of(node);
        let empty = NodeUsage::default();
        let usage = usage.unwrap_or(&empty);
        if usage.pods.len() as i64 + 1 > allowed_pods {
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
    fn resource_score(&self, c: &Candidate, node: &Node, usage: Option<&NodeUsage>) -> i64 {
        let (allocatable, _) = self.allocatable_of(node);
        let mut requested = usage.map(|u| u.non_zero.clone()).unwrap_or_default();
        requested.add(&c.non_zero);
        let pairs = [
            (requested.milli_cpu, allocatable.milli_cpu),
            (requested.memory, allocatable.memory),
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
    pub fn find_node(
        &self,
        pod: &Pod,
        random: &mut impl FnMut() -> u64,
    ) -> Result<String, FitError> {
        let spec = pod.spec.as_ref();
        let c = Candidate {
            pod,
            requests: pod_requests(pod, false),
            non_zero: pod_requests(pod, true),
            ports: host_ports(pod),
            tolerations: spec.and_then(|s| s.tolerations.as_deref()).unwrap_or(&[]),
            priority: priority(pod),
        };
        let mut feasible: Vec<(&String, &Node, Option<&NodeUsage>)> = Vec::new();
        let mut failures: Vec<(&String, NodeFailure)> = Vec::new();
        for (name, node) in &self.nodes {
            let usage = self.usage.get(name);
            match self.filter(&c, node, usage) {
                Ok(()) => feasible.push((name, node, usage)),
                Err(f) => failures.push((name, f)),
            }
        }
        if feasible.is_empty() {
            return Err(self.fit_error(&c, failures));
        }
        // Raw scores, then kube's normalization for affinity and taint scores.
        let affinity: Vec<i64> = feasible
            .iter()
            .map(|(_, n, _)| preferred_affinity_score(pod, n))
            .collect();
        let max_affinity = affinity.iter().copied().max().unwrap_or(0);
        let intolerable: Vec<i64> = feasible
            .iter()
            .map(|(_, n, _)| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_deref())
                    .unwrap_or(&[])
                    .iter()
                    .filter(|t| t.effect == "PreferNoSchedule" && !tolerated(c.tolerations, t))
                    .count() as i64
            })
            .collect();
        let max_intolerable = intolerable.iter().copied().max().unwrap_or(0);
        let mut best: Option<(&String, i64)> = None;
        let mut ties = 0u64;
        for (i, (name, node, usage)) in feasible.iter().enumerate() {
            let mut score = self.resource_score(&c, node, *usage);
            if max_affinity > 0 {
                score += 2 * (affinity[i] * 100 / max_affinity);
            }
            score += 3 * if max_intolerable > 0 {
                100 - intolerable[i] * 100 / max_intolerable
            } else {
                100
            };
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
        match best {
            Some((name, _)) => Ok(name.clone()),
            None => Err(self.fit_error(&c, failures)),
        }
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
                        .usage
                        .get(*name)
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
}
