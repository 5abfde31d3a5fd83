//! InterPodAffinity, as kube-scheduler's plugin of that name: the filter for required
//! pod affinity / anti-affinity (the incoming pod's terms, and existing pods'
//! required anti-affinity against the incoming pod) and the score for preferred terms
//! (both directions, plus existing pods' required affinity terms at
//! `hardPodAffinityWeight` 1). Pure: it reads the [`Cache`] and nothing else.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm};

use super::framework::{Cache, NodeFailure};
use super::labels::Selector;

pub const REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
pub const REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub const REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";

/// kube-scheduler's `hardPodAffinityWeight` default.
const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

/// One affinity term, compiled against the pod that carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    selector: Selector,
    /// Explicit namespaces (or the pod's own when neither these nor a namespace
    /// selector are given).
    namespaces: Vec<String>,
    namespace_selector: Option<Selector>,
    pub topology_key: String,
    pub weight: i64,
}

impl Term {
    fn compile(
        term: &PodAffinityTerm,
        weight: i64,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Term {
        let mut selector = Selector::from_label_selector(term.label_selector.as_ref());
        for key in term.match_label_keys.iter().flatten() {
            if let Some(v) = labels.get(key) {
                selector.require_equal(key, v);
            }
        }
        for key in term.mismatch_label_keys.iter().flatten() {
            if let Some(v) = labels.get(key) {
                selector.require_not_equal(key, v);
            }
        }
        let namespace_selector = term
            .namespace_selector
            .as_ref()
            .map(|s| Selector::from_label_selector(Some(s)));
        let mut namespaces = term.namespaces.clone().unwrap_or_default();
        if namespaces.is_empty() && namespace_selector.is_none() {
            namespaces.push(namespace.to_string());
        }
        Term {
            selector,
            namespaces,
            namespace_selector,
            topology_key: term.topology_key.clone(),
            weight,
        }
    }

    /// Whether a pod in `namespace` with `labels` matches this term.
    pub fn matches(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        namespace_labels: &HashMap<String, BTreeMap<String, String>>,
    ) -> bool {
        let in_namespace = self.namespaces.iter().any(|n| n == namespace)
            || self.namespace_selector.as_ref().is_some_and(|s| {
                static EMPTY: BTreeMap<String, String> = BTreeMap::new();
                s.matches(namespace_labels.get(namespace).unwrap_or(&EMPTY))
            });
        in_namespace && self.selector.matches(labels)
    }
}

/// A pod's inter-pod affinity terms.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodAffinity {
    pub required_affinity: Vec<Term>,
    pub required_anti_affinity: Vec<Term>,
    pub preferred_affinity: Vec<Term>,
    pub preferred_anti_affinity: Vec<Term>,
}

impl PodAffinity {
    /// The terms of `pod`, or `None` when it has none.
    pub fn of(pod: &Pod) -> Option<PodAffinity> {
        let spec = pod.spec.as_ref()?;
        let affinity = spec.affinity.as_ref()?;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let empty = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let compile_required = |terms: Option<&Vec<PodAffinityTerm>>| -> Vec<Term> {
            terms
                .into_iter()
                .flatten()
                .map(|t| Term::compile(t, 0, namespace, labels))
                .collect()
        };
        let compile_preferred = |terms: Option<
            &Vec<k8s_openapi::api::core::v1::WeightedPodAffinityTerm>,
        >| {
            terms
                .into_iter()
                .flatten()
                .filter(|t| t.weight != 0)
                .map(|t| Term::compile(&t.pod_affinity_term, t.weight as i64, namespace, labels))
                .collect::<Vec<Term>>()
        };
        let aff = affinity.pod_affinity.as_ref();
        let anti = affinity.pod_anti_affinity.as_ref();
        let out = PodAffinity {
            required_affinity: compile_required(aff.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            required_anti_affinity: compile_required(anti.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_affinity: compile_preferred(aff.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_anti_affinity: compile_preferred(anti.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
        };
        let any = !(out.required_affinity.is_empty()
            && out.required_anti_affinity.is_empty()
            && out.preferred_affinity.is_empty()
            && out.preferred_anti_affinity.is_empty());
        any.then_some(out)
    }

    fn has_preferred(&self) -> bool {
        !self.preferred_affinity.is_empty() || !self.preferred_anti_affinity.is_empty()
    }
}

/// A (topology key, value) pair.
type Pair = (String, String);

/// What the filter needs, computed once per scheduling attempt (kube's PreFilter).
#[derive(Default)]
pub struct FilterState {
    /// Domains where an existing pod's required anti-affinity term matches the
    /// incoming pod.
    existing_anti_affinity: HashMap<Pair, i64>,
    /// Domains holding pods that match all of the incoming pod's required affinity terms.
    affinity: HashMap<Pair, i64>,
    /// Domains holding pods that match one of its required anti-affinity terms.
    anti_affinity: HashMap<Pair, i64>,
    /// Whether the incoming pod matches all its own required affinity terms.
    matches_own_affinity: bool,
    active: bool,
}

/// The incoming pod, as the plugin sees it.
pub struct Incoming<'a> {
    pub namespace: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub affinity: Option<&'a PodAffinity>,
}

impl FilterState {
    pub fn new(cache: &Cache, pod: &Incoming) -> FilterState {
        let mut state = FilterState::default();
        let ns_labels = &cache.namespace_labels;
        // Existing pods' required anti-affinity against the incoming pod: only pods
        // with affinity terms need a look.
        for info in cache.pods_with_affinity() {
            let Some(terms) = info.affinity.as_deref() else {
                continue;
            };
            let Some(node) = cache.node(&info.node) else {
                continue;
            };
            for t in &terms.required_anti_affinity {
                if t.matches(pod.namespace, pod.labels, ns_labels)
                    && let Some(v) = node_label(node, &t.topology_key)
                {
                    *state
                        .existing_anti_affinity
                        .entry((t.topology_key.clone(), v.clone()))
                        .or_default() += 1;
                }
            }
        }
        let own = pod.affinity;
        let required_affinity = own.map(|a| a.required_affinity.as_slice()).unwrap_or(&[]);
        let required_anti = own
            .map(|a| a.required_anti_affinity.as_slice())
            .unwrap_or(&[]);
        if !required_affinity.is_empty() || !required_anti.is_empty() {
            for info in cache.all_pods() {
                let Some(node) = cache.node(&info.node) else {
                    continue;
                };
                if !required_affinity.is_empty()
                    && required_affinity
                        .iter()
                        .all(|t| t.matches(&info.namespace, &info.labels, ns_labels))
                {
                    for t in required_affinity {
                        if let Some(v) = node_label(node, &t.topology_key) {
                            *state
                                .affinity
                                .entry((t.topology_key.clone(), v.clone()))
                                .or_default() += 1;
                        }
                    }
                }
                for t in required_anti {
                    if t.matches(&info.namespace, &info.labels, ns_labels)
                        && let Some(v) = node_label(node, &t.topology_key)
                    {
                        *state
                            .anti_affinity
                            .entry((t.topology_key.clone(), v.clone()))
                            .or_default() += 1;
                    }
                }
            }
            state.matches_own_affinity = required_affinity
                .iter()
                .all(|t| t.matches(pod.namespace, pod.labels, ns_labels));
        }
        state.active = !state.existing_anti_affinity.is_empty()
            || !required_affinity.is_empty()
            || !required_anti.is_empty();
        state
    }

    /// The filter for one node, in kube's order: the pod's affinity (unresolvable:
    /// evicting pods cannot create a match), its anti-affinity, then existing pods'
    /// anti-affinity against it.
    pub fn filter(
        &self,
        pod: &Incoming,
        node: &k8s_openapi::api::core::v1::Node,
    ) -> Result<(), NodeFailure> {
        if !self.active {
            return Ok(());
        }
        let no_terms = PodAffinity::default();
        let own = pod.affinity.unwrap_or(&no_terms);
        if !own.required_affinity.is_empty() {
            let mut pods_exist = true;
            for t in &own.required_affinity {
                match node_label(node, &t.topology_key) {
                    Some(v) => {
                        if self
                            .affinity
                            .get(&(t.topology_key.clone(), v.clone()))
                            .copied()
                            .unwrap_or(0)
                            <= 0
                        {
                            pods_exist = false;
                        }
                    }
                    None => return Err(NodeFailure::unresolvable(REASON_AFFINITY)),
                }
            }
            // The first pod of a group with affinity to itself may go anywhere the
            // topology labels exist, or it would wait forever.
            let first_of_group = self.affinity.is_empty() && self.matches_own_affinity;
            if !(pods_exist || first_of_group) {
                return Err(NodeFailure::unresolvable(REASON_AFFINITY));
            }
        }
        for t in &own.required_anti_affinity {
            if let Some(v) = node_label(node, &t.topology_key)
                && self
                    .anti_affinity
                    .get(&(t.topology_key.clone(), v.clone()))
                    .copied()
                    .unwrap_or(0)
                    > 0
            {
                return Err(NodeFailure::resolvable(REASON_ANTI_AFFINITY));
            }
        }
        if self
            .existing_anti_affinity
            .iter()
            .any(|((key, value), n)| *n > 0 && node_label(node, key) == Some(value))
        {
            return Err(NodeFailure::resolvable(REASON_EXISTING_ANTI_AFFINITY));
        }
        Ok(())
    }
}

fn node_label<'a>(node: &'a k8s_openapi::api::core::v1::Node, key: &str) -> Option<&'a String> {
    node.metadata.labels.as_ref()?.get(key)
}

/// Preferred inter-pod affinity scores (kube's PreScore + Score): topology key →
/// value → summed weight.
pub struct ScoreState {
    scores: HashMap<String, HashMap<String, i64>>,
}

impl ScoreState {
    /// `None` when nothing can score (kube's Skip): the pod has no preferred terms and
    /// no existing pod has affinity terms.
    pub fn new(cache: &Cache, pod: &Incoming) -> Option<ScoreState> {
        let own = pod.affinity.filter(|a| a.has_preferred());
        let ns_labels = &cache.namespace_labels;
        let mut scores: HashMap<String, HashMap<String, i64>> = HashMap::new();
        let mut add = |key: &str, node: &k8s_openapi::api::core::v1::Node, weight: i64| {
            if let Some(v) = node_label(node, key) {
                *scores
                    .entry(key.to_string())
                    .or_default()
                    .entry(v.clone())
                    .or_default() += weight;
            }
        };
        let mut seen_any = false;
        let candidates: Box<dyn Iterator<Item = &super::framework::PodInfo>> = if own.is_some() {
            Box::new(cache.all_pods())
        } else {
            Box::new(cache.pods_with_affinity())
        };
        for info in candidates {
            let Some(node) = cache.node(&info.node) else {
                continue;
            };
            seen_any = true;
            if let Some(own) = own {
                for t in &own.preferred_affinity {
                    if t.matches(&info.namespace, &info.labels, ns_labels) {
                        add(&t.topology_key, node, t.weight);
                    }
                }
                for t in &own.preferred_anti_affinity {
                    if t.matches(&info.namespace, &info.labels, ns_labels) {
                        add(&t.topology_key, node, -t.weight);
                    }
                }
            }
            if let Some(theirs) = info.affinity.as_deref() {
                for t in &theirs.required_affinity {
                    if t.matches(pod.namespace, pod.labels, ns_labels) {
                        add(&t.topology_key, node, HARD_POD_AFFINITY_WEIGHT);
                    }
                }
                for t in &theirs.preferred_affinity {
                    if t.matches(pod.namespace, pod.labels, ns_labels) {
                        add(&t.topology_key, node, t.weight);
                    }
                }
                for t in &theirs.preferred_anti_affinity {
                    if t.matches(pod.namespace, pod.labels, ns_labels) {
                        add(&t.topology_key, node, -t.weight);
                    }
                }
            }
        }
        (own.is_some() || seen_any).then_some(ScoreState { scores })
    }

    /// The raw score of one node.
    pub fn score(&self, node: &k8s_openapi::api::core::v1::Node) -> i64 {
        let Some(labels) = node.metadata.labels.as_ref() else {
            return 0;
        };
        self.scores
            .iter()
            .filter_map(|(key, values)| labels.get(key).and_then(|v| values.get(v)))
            .sum()
    }
}

/// kube's InterPodAffinity NormalizeScore: min-max scaled to 0–100 (all 0 when equal).
pub fn normalize(raw: &[i64]) -> Vec<i64> {
    let (Some(&min), Some(&max)) = (raw.iter().min(), raw.iter().max()) else {
        return Vec::new();
    };
    let diff = max - min;
    raw.iter()
        .map(|&s| {
            if diff > 0 {
                (100.0 * ((s - min) as f64 / diff as f64)) as i64
            } else {
                0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn terms_default_to_the_pods_namespace_and_honour_selectors() {
        let p = pod(
            json!({"metadata": {"name": "p", "namespace": "team-a", "labels": {"app": "web"}},
            "spec": {"containers": [], "affinity": {"podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"},
                    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone",
                     "namespaceSelector": {"matchLabels": {"env": "prod"}}},
                    {"labelSelector": {}, "topologyKey": "zone", "namespaceSelector": {},
                     "matchLabelKeys": ["app"]}
                ]}}}}),
        );
        let a = PodAffinity::of(&p).expect("terms");
        let mut ns = HashMap::new();
        ns.insert(
            "prod-1".to_string(),
            [("env".to_string(), "prod".to_string())].into(),
        );
        let db: BTreeMap<String, String> = [("app".to_string(), "db".to_string())].into();
        let web: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let [own, by_selector, everywhere] = &a.required_affinity[..] else {
            panic!("three terms");
        };
        assert!(own.matches("team-a", &db, &ns));
        assert!(!own.matches("prod-1", &db, &ns));
        assert!(by_selector.matches("prod-1", &db, &ns));
        assert!(!by_selector.matches("team-a", &db, &ns));
        // Empty namespaceSelector: all namespaces; matchLabelKeys pins app=web.
        assert!(everywhere.matches("anything", &web, &ns));
        assert!(!everywhere.matches("anything", &db, &ns));
    }

    #[test]
    fn normalization_is_min_max() {
        assert_eq!(normalize(&[-5, 0, 5]), vec![0, 50, 100]);
        assert_eq!(normalize(&[3, 3]), vec![0, 0]);
        assert!(normalize(&[]).is_empty());
    }
}
