//! Label selectors compiled for the scheduler's hot path: the `labelSelector` of
//! topology spread constraints and of pod (anti-)affinity terms, and affinity terms'
//! `namespaceSelector`. Pure data and matching; no I/O, no API types beyond parsing.
//!
//! Semantics follow apimachinery's `LabelSelectorAsSelector`: a missing selector
//! selects nothing, an empty one (`{}`) selects everything, `matchLabels` and
//! `matchExpressions` are ANDed.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A compiled label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    /// A missing selector (or one with an unknown operator) matches nothing.
    nothing: bool,
    requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector that matches every label set.
    pub fn everything() -> Selector {
        Selector {
            nothing: false,
            requirements: Vec::new(),
        }
    }

    /// The selector that matches no label set.
    pub fn nothing() -> Selector {
        Selector {
            nothing: true,
            requirements: Vec::new(),
        }
    }

    /// Compiles a `metav1.LabelSelector`; `None` selects nothing.
    pub fn from_label_selector(selector: Option<&LabelSelector>) -> Selector {
        let Some(selector) = selector else {
            return Selector::nothing();
        };
        let mut out = Selector::everything();
        for (k, v) in selector.match_labels.iter().flatten() {
            out.requirements
                .push(Requirement::In(k.clone(), vec![v.clone()]));
        }
        for e in selector.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            let req = match e.operator.as_str() {
                "In" => Requirement::In(e.key.clone(), values),
                "NotIn" => Requirement::NotIn(e.key.clone(), values),
                "Exists" => Requirement::Exists(e.key.clone()),
                "DoesNotExist" => Requirement::DoesNotExist(e.key.clone()),
                // Validation rejects other operators; be safe and select nothing.
                _ => return Selector::nothing(),
            };
            out.requirements.push(req);
        }
        out
    }

    /// Adds `key In (value)` (matchLabelKeys) to a selector that selects something.
    pub fn require_equal(&mut self, key: &str, value: &str) {
        if !self.nothing {
            self.requirements
                .push(Requirement::In(key.to_string(), vec![value.to_string()]));
        }
    }

    /// Adds `key NotIn (value)` (mismatchLabelKeys).
    pub fn require_not_equal(&mut self, key: &str, value: &str) {
        if !self.nothing {
            self.requirements
                .push(Requirement::NotIn(key.to_string(), vec![value.to_string()]));
        }
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    pub fn selects_nothing(&self) -> bool {
        self.nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sel(v: serde_json::Value) -> Selector {
        let s: LabelSelector = serde_json::from_value(v).expect("selector");
        Selector::from_label_selector(Some(&s))
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn missing_selects_nothing_and_empty_selects_everything() {
        assert!(!Selector::from_label_selector(None).matches(&labels(&[])));
        assert!(sel(json!({})).matches(&labels(&[])));
        assert!(sel(json!({})).matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let s = sel(json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]},
                                 {"key": "env", "operator": "Exists"}]}));
        assert!(s.matches(&labels(&[("app", "web"), ("env", "prod")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("env", "p"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "api"), ("env", "prod")])));
        let bad = sel(json!({"matchExpressions": [{"key": "a", "operator": "Bogus"}]}));
        assert!(!bad.matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn match_and_mismatch_label_keys() {
        let mut s = sel(json!({"matchLabels": {"app": "web"}}));
        s.require_equal("pod-template-hash", "abc");
        assert!(s.matches(&labels(&[("app", "web"), ("pod-template-hash", "abc")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("pod-template-hash", "def")])));
        let mut m = sel(json!({}));
        m.require_not_equal("tenant", "a");
        assert!(m.matches(&labels(&[("tenant", "b")])));
        assert!(!m.matches(&labels(&[("tenant", "a")])));
        let mut none = Selector::nothing();
        none.require_equal("a", "b");
        assert!(none.selects_nothing());
    }
}
