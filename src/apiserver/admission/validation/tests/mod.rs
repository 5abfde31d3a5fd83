//! Data-driven validation tests: kube's vectors (from `pkg/apis/*/validation/*_test.go`),
//! each an object (and on update the old one) and the causes kube answers with: field path
//! and message. A message given here matches a cause whose message starts with it (kube's
//! long regex explanations need not be spelled out in every case); the number of causes
//! must match exactly, so a check that fires twice, or not at all, fails.

use serde_json::Value;

use crate::apiserver::storage::objects;
use crate::apiserver::storage::registry::Registry;

mod core;
mod meta;
mod networking;
mod pod;
mod rbac;
mod service;
mod workloads;

/// One vector: what is written, what was stored (updates), what kube says.
pub struct Case {
    pub name: &'static str,
    pub object: Value,
    pub old: Option<Value>,
    /// `(field path, message or its beginning)`; empty for a valid object.
    pub want: Vec<(&'static str, &'static str)>,
}

/// A create that kube accepts.
pub fn ok(name: &'static str, object: Value) -> Case {
    Case {
        name,
        object,
        old: None,
        want: Vec::new(),
    }
}

/// A create that kube refuses with these causes.
pub fn bad(name: &'static str, object: Value, want: Vec<(&'static str, &'static str)>) -> Case {
    Case {
        name,
        object,
        old: None,
        want,
    }
}

/// An update of `old` to `object`, refused with `want` (empty: accepted).
pub fn update(
    name: &'static str,
    old: Value,
    object: Value,
    want: Vec<(&'static str, &'static str)>,
) -> Case {
    Case {
        name,
        object,
        old: Some(old),
        want,
    }
}

/// Runs every case against the resource `group/version/plural`, after the defaulting a
/// request gets, and reports every mismatch at once. Returns how many cases ran.
pub fn run(group: &str, version: &str, plural: &str, cases: Vec<Case>) -> usize {
    let registry = Registry::new();
    let info = registry
        .find(group, version, plural)
        .unwrap_or_else(|| panic!("no resource {group}/{version}/{plural}"));
    let mut failures = Vec::new();
    let count = cases.len();
    for case in cases {
        let mut object = case.object;
        objects::apply_defaults(&info, &mut object);
        let old = case.old.map(|mut o| {
            objects::apply_defaults(&info, &mut o);
            o
        });
        // As the update handler does before validating.
        if let Some(old) = &old
            && info.group.is_empty()
            && info.kind == "Service"
        {
            super::prepare_service_update(old, &mut object);
        }
        let got: Vec<(String, String)> = super::validate(&info, &object, old.as_ref())
            .into_iter()
            .map(|c| (c.field.unwrap_or_default(), c.message.unwrap_or_default()))
            .collect();
        let mut unmatched: Vec<&(String, String)> = got.iter().collect();
        let mut missing = Vec::new();
        for (field, message) in &case.want {
            match unmatched
                .iter()
                .position(|(f, m)| f == field && m.starts_with(message))
            {
                Some(i) => {
                    unmatched.remove(i);
                }
                None => missing.push(format!("{field}: {message}")),
            }
        }
        if !missing.is_empty() || !unmatched.is_empty() {
            failures.push(format!(
                "{plural} case {:?}:\n    missing: {missing:?}\n    unexpected: {unmatched:?}",
                case.name
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    count
}
