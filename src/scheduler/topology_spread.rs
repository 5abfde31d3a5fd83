//! PodTopologySpread, as kube-scheduler's plugin of that name: the filter for
//! `whenUnsatisfiable: DoNotSchedule` constraints (maxSkew, minDomains, matchLabelKeys,
//! nodeAffinityPolicy / nodeTaintsPolicy) and the score for `ScheduleAnyway` ones,
//! including the system default constraints kube applies to pods without their own.
//! Pure: it reads the [`Cache`] and nothing else.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Node, Pod, Toleration};

use super::framework::{Cache, NodeFailure, NodeInfo, NodeUsage, matches_node_affinity, tolerates};
use super::labels::Selector;

pub const REASON_SPREAD: &str = "node(s) didn't match pod topology spread constraints";
pub const REASON_SPREAD_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// Which existing pods a constraint counts.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Counted {
    /// Pods in the incoming pod's namespace matching the (merged) selector.
    Selector(Selector),
    /// Pods controlled by the same ReplicaSet / ReplicationController / StatefulSet
    /// (the system default constraints; kube derives the same set from that
    /// controller's selector).
    SameController(String),
}

/// One compiled constraint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constraint {
    pub max_skew: i64,
    pub topology_key: String,
    counted: Counted,
    min_domains: Option<i64>,
    honor_node_affinity: bool,
    honor_node_taints: bool,
    /// Whether the incoming pod itself matches the selector.
    self_match: bool,
}

impl Constraint {
    /// Whether `node` counts for this constraint (kube's `MatchNodeInclusionPolicies`).
    fn includes(&self, pod: &Pod, tolerations: &[Toleration], node: &Node) -> bool {
        if self.honor_node_affinity && !matches_node_affinity(pod, node) {
            return false;
        }
        if self.honor_node_taints {
            let taints = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or(&[]);
            let untolerated = taints.iter().any(|t| {
                (t.effect == "NoSchedule" || t.effect == "NoExecute")
                    && !tolerations.iter().any(|tol| tolerates(tol, t))
            });
            if untolerated {
                return false;
            }
        }
        true
    }

    /// Matching pods on one node.
    fn count_on(&self, usage: &NodeUsage, namespace: &str) -> i64 {
        match &self.counted {
            Counted::SameController(uid) => usage.controlled_by(uid),
            Counted::Selector(s) => usage
                .pods
                .values()
                .filter(|p| p.namespace == namespace && s.matches(&p.labels))
                .count() as i64,
        }
    }
}

/// A pod's constraints, split by `whenUnsatisfiable`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Constraints {
    pub hard: Vec<Constraint>,
    pub soft: Vec<Constraint>,
    /// The soft ones are kube's system defaults (nodes need not carry every key).
    pub system_default: bool,
}

impl Constraints {
    /// The constraints of `pod`; `controller_uid` is its controlling ReplicaSet,
    /// ReplicationController or StatefulSet, if any (for the system defaults).
    pub fn of(pod: &Pod, controller_uid: Option<&str>) -> Constraints {
        let empty = Default::default();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_deref())
            .unwrap_or(&[]);
        let mut out = Constraints::default();
        if own.is_empty() {
            if let Some(uid) = controller_uid {
                out.system_default = true;
                for (key, skew) in [(LABEL_HOSTNAME, 3), (LABEL_ZONE, 5)] {
                    out.soft.push(Constraint {
                        max_skew: skew,
                        topology_key: key.to_string(),
                        counted: Counted::SameController(uid.to_string()),
                        min_domains: None,
                        honor_node_affinity: true,
                        honor_node_taints: false,
                        self_match: true,
                    });
                }
            }
            return out;
        }
        for c in own {
            let mut selector = Selector::from_label_selector(c.label_selector.as_ref());
            for key in c.match_label_keys.iter().flatten() {
                if let Some(v) = labels.get(key) {
                    selector.require_equal(key, v);
                }
            }
            let self_match = selector.matches(labels);
            let hard = c.when_unsatisfiable != "ScheduleAnyway";
            let compiled = Constraint {
                max_skew: c.max_skew as i64,
                topology_key: c.topology_key.clone(),
                counted: Counted::Selector(selector),
                min_domains: c.min_domains.filter(|_| hard).map(i64::from),
                honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
                self_match,
            };
            if hard {
                out.hard.push(compiled);
            } else {
                out.soft.push(compiled);
            }
        }
        out
    }
}

fn has_all_keys(node: &Node, constraints: &[Constraint]) -> bool {
    let labels = node.metadata.labels.as_ref();
    constraints
        .iter()
        .all(|c| labels.is_some_and(|l| l.contains_key(&c.topology_key)))
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a String> {
    node.metadata.labels.as_ref()?.get(key)
}

/// Matching pods per domain of each hard constraint (kube's PreFilter).
pub struct FilterState {
    counts: Vec<HashMap<String, i64>>,
}

impl FilterState {
    pub fn new(
        cache: &Cache,
        pod: &Pod,
        tolerations: &[Toleration],
        constraints: &[Constraint],
    ) -> FilterState {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut counts = vec![HashMap::new(); constraints.len()];
        if constraints.is_empty() {
            return FilterState { counts };
        }
        for info in cache.nodes() {
            let node = info.node.as_ref();
            if !has_all_keys(node, constraints) {
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if !c.includes(pod, tolerations, node) {
                    continue;
                }
                let Some(value) = label(node, &c.topology_key) else {
                    continue;
                };
                *counts[i].entry(value.clone()).or_default() += c.count_on(&info.usage, namespace);
            }
        }
        FilterState { counts }
    }

    /// The lowest count over the domains, or 0 when fewer domains than `minDomains`
    /// exist (so the skew is measured against the empty domains still to come).
    fn min_count(&self, i: usize, c: &Constraint) -> i64 {
        let domains = &self.counts[i];
        if c.min_domains.is_some_and(|m| (domains.len() as i64) < m) {
            return 0;
        }
        domains.values().copied().min().unwrap_or(0)
    }

    pub fn filter(&self, constraints: &[Constraint], node: &Node) -> Result<(), NodeFailure> {
        for (i, c) in constraints.iter().enumerate() {
            let Some(value) = label(node, &c.topology_key) else {
                return Err(NodeFailure::unresolvable(REASON_SPREAD_LABEL));
            };
            let here = self.counts[i].get(value).copied().unwrap_or(0);
            let skew = here + i64::from(c.self_match) - self.min_count(i, c);
            if skew > c.max_skew {
                return Err(NodeFailure::resolvable(REASON_SPREAD));
            }
        }
        Ok(())
    }
}

/// Soft-constraint scoring (kube's PreScore): per constraint, the weight
/// `ln(domains + 2)` and the matching pods of each domain some feasible node is in.
pub struct ScoreState<'c> {
    constraints: &'c [Constraint],
    require_all_keys: bool,
    weights: Vec<f64>,
    pair_counts: Vec<HashMap<String, i64>>,
}

impl<'c> ScoreState<'c> {
    /// `None` when there is nothing to score (kube's Skip).
    pub fn new(
        cache: &Cache,
        pod: &Pod,
        tolerations: &[Toleration],
        constraints: &'c Constraints,
        feasible: &[&Node],
    ) -> Option<ScoreState<'c>> {
        let soft = constraints.soft.as_slice();
        if soft.is_empty() || feasible.is_empty() {
            return None;
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let require_all_keys = !constraints.system_default;
        let mut pair_counts = vec![HashMap::new(); soft.len()];
        let mut scored_nodes = 0usize;
        for node in feasible {
            if require_all_keys && !has_all_keys(node, soft) {
                continue;
            }
            scored_nodes += 1;
            for (i, c) in soft.iter().enumerate() {
                if c.topology_key == LABEL_HOSTNAME {
                    continue;
                }
                if let Some(v) = label(node, &c.topology_key) {
                    pair_counts[i].entry(v.clone()).or_insert(0);
                }
            }
        }
        let weights = soft
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let size = if c.topology_key == LABEL_HOSTNAME {
                    scored_nodes
                } else {
                    pair_counts[i].len()
                };
                ((size + 2) as f64).ln()
            })
            .collect();
        let any_domain_key = soft.iter().any(|c| c.topology_key != LABEL_HOSTNAME);
        if any_domain_key {
            for info in cache.nodes() {
                let node = info.node.as_ref();
                if require_all_keys && !has_all_keys(node, soft) {
                    continue;
                }
                for (i, c) in soft.iter().enumerate() {
                    if c.topology_key == LABEL_HOSTNAME || !c.includes(pod, tolerations, node) {
                        continue;
                    }
                    let Some(v) = label(node, &c.topology_key) else {
                        continue;
                    };
                    if let Some(n) = pair_counts[i].get_mut(v) {
                        *n += c.count_on(&info.usage, namespace);
                    }
                }
            }
        }
        Some(ScoreState {
            constraints: soft,
            require_all_keys,
            weights,
            pair_counts,
        })
    }

    /// The raw score of a feasible node; `None` for a node kube ignores (missing a
    /// topology key the pod's own constraints need).
    pub fn score(&self, namespace: &str, info: &NodeInfo) -> Option<i64> {
        let node = info.node.as_ref();
        if self.require_all_keys && !has_all_keys(node, self.constraints) {
            return None;
        }
        let mut score = 0.0;
        for (i, c) in self.constraints.iter().enumerate() {
            let Some(v) = label(node, &c.topology_key) else {
                continue;
            };
            let count = if c.topology_key == LABEL_HOSTNAME {
                c.count_on(&info.usage, namespace)
            } else {
                self.pair_counts[i].get(v).copied().unwrap_or(0)
            };
            score += count as f64 * self.weights[i] + (c.max_skew - 1) as f64;
        }
        Some(score.round() as i64)
    }
}

/// kube's PodTopologySpread NormalizeScore: fewer matching pods score higher;
/// ignored nodes (`None`) score 0.
pub fn normalize(raw: &[Option<i64>]) -> Vec<i64> {
    let scored = raw.iter().flatten();
    let min = scored.clone().copied().min().unwrap_or(0);
    let max = scored.copied().max().unwrap_or(0);
    raw.iter()
        .map(|s| match s {
            None => 0,
            Some(_) if max == 0 => 100,
            Some(s) => 100 * (max + min - s) / max,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn constraints_split_and_default() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {"app": "web", "pod-template-hash": "h1"}},
            "spec": {"containers": [], "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash"],
                 "minDomains": 3, "nodeTaintsPolicy": "Honor"},
                {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                 "labelSelector": {"matchLabels": {"app": "other"}}, "minDomains": 3}
            ]}}))
        .expect("pod");
        let c = Constraints::of(&p, Some("rs-uid"));
        assert_eq!(
            (c.hard.len(), c.soft.len(), c.system_default),
            (1, 1, false)
        );
        assert!(c.hard[0].self_match && c.hard[0].honor_node_taints);
        assert_eq!(c.hard[0].min_domains, Some(3));
        assert!(!c.soft[0].self_match);
        assert_eq!(
            c.soft[0].min_domains, None,
            "minDomains is for DoNotSchedule only"
        );

        let bare: Pod =
            serde_json::from_value(json!({"metadata": {"name": "b"}, "spec": {"containers": []}}))
                .expect("pod");
        assert_eq!(Constraints::of(&bare, None), Constraints::default());
        let owned = Constraints::of(&bare, Some("rs-uid"));
        assert!(owned.system_default && owned.hard.is_empty());
        let keys: Vec<(&str, i64)> = owned
            .soft
            .iter()
            .map(|c| (c.topology_key.as_str(), c.max_skew))
            .collect();
        assert_eq!(keys, vec![(LABEL_HOSTNAME, 3), (LABEL_ZONE, 5)]);
    }

    #[test]
    fn normalization_prefers_emptier_nodes() {
        assert_eq!(normalize(&[Some(0), Some(2), None]), vec![100, 0, 0]);
        assert_eq!(normalize(&[Some(0), Some(0)]), vec![100, 100]);
        assert_eq!(normalize(&[Some(1), Some(3)]), vec![100, 33]);
    }
}
