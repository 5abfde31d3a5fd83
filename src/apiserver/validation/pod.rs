//! Pod and PodSpec validation (kube's `ValidatePod`, `ValidatePodSpec`,
//! `ValidatePodUpdate`); `workloads` calls `validate_pod_spec` for every pod template.

use std::collections::HashSet;

use serde_json::Value;

use super::field::{self, ErrorList, Path};
use super::names;

pub fn validate_pod(new: &Value, _old: Option<&Value>, errs: &mut ErrorList) {
    validate_pod_spec(new.get("spec"), &Path::new("spec"), errs);
}

/// A PodSpec at `path` (`spec` of a Pod, `spec.template.spec` of a workload).
pub fn validate_pod_spec(spec: Option<&Value>, path: &Path, errs: &mut ErrorList) {
    let containers = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array);
    let containers_path = path.child("containers");
    match containers {
        None => errs.push(field::required(&containers_path, "")),
        Some(list) if list.is_empty() => errs.push(field::required(&containers_path, "")),
        Some(list) => {
            let mut seen = HashSet::new();
            for (i, c) in list.iter().enumerate() {
                let at = containers_path.index(i);
                let name = c.get("name").and_then(Value::as_str).unwrap_or("");
                if name.is_empty() {
                    errs.push(field::required(&at.child("name"), ""));
                } else if !names::dns1123_label(name).is_empty() {
                    errs.extend(field::invalid_each(
                        &at.child("name"),
                        name,
                        names::dns1123_label(name),
                    ));
                } else if !seen.insert(name) {
                    errs.push(field::duplicate(&at.child("name"), name));
                }
                if c.get("image")
                    .and_then(Value::as_str)
                    .is_none_or(|s| s.trim().is_empty())
                {
                    errs.push(field::required(&at.child("image"), ""));
                }
            }
        }
    }
}
