//! Validation of the rbac.authorization.k8s.io kinds (kube's `pkg/apis/rbac/validation`):
//! Role and ClusterRole rules (and a ClusterRole's aggregation selectors), RoleBinding
//! and ClusterRoleBinding role references and subjects; a binding's role reference may
//! not change.

use serde_json::Value;

use super::field::{self, Bad, ErrorList, Path};
use super::meta::{self, str_of, string_list};
use super::names;

const GROUP: &str = "rbac.authorization.k8s.io";

pub fn validate(kind: &str, new: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    match kind {
        "Role" => validate_rules(new, true, errs),
        "ClusterRole" => {
            validate_rules(new, false, errs);
            validate_aggregation(new, old, errs);
        }
        "RoleBinding" => validate_binding(new, old, true, errs),
        "ClusterRoleBinding" => validate_binding(new, old, false, errs),
        _ => {}
    }
}

fn validate_rules(role: &Value, namespaced: bool, errs: &mut ErrorList) {
    let rules = role.get("rules").and_then(Value::as_array);
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        let at = Path::new("rules").index(i);
        if string_list(rule.get("verbs")).is_empty() {
            errs.push(field::required(
                &at.child("verbs"),
                "verbs must contain at least one value",
            ));
        }
        let urls = string_list(rule.get("nonResourceURLs"));
        let groups = string_list(rule.get("apiGroups"));
        let resources = string_list(rule.get("resources"));
        let resource_names = string_list(rule.get("resourceNames"));
        if !urls.is_empty() {
            let shown = || Bad::Raw(meta::go_string_slice(&urls));
            if namespaced {
                errs.push(field::invalid(
                    &at.child("nonResourceURLs"),
                    shown(),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !groups.is_empty() || !resources.is_empty() || !resource_names.is_empty() {
                errs.push(field::invalid(
                    &at.child("nonResourceURLs"),
                    shown(),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        // An empty group ("") is the core group: only an absent list is missing.
        if rule
            .get("apiGroups")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            errs.push(field::required(
                &at.child("apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if resources.is_empty() {
            errs.push(field::required(
                &at.child("resources"),
                "resource rules must supply at least one resource",
            ));
        }
        if !resource_names.is_empty() && resources.len() > 1 {
            errs.push(field::required(
                &at.child("resourceNames"),
                "resource names cannot apply to multiple resources",
            ));
        }
    }
}

fn validate_aggregation(role: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    let Some(rule) = role.get("aggregationRule").filter(|v| !v.is_null()) else {
        return;
    };
    let path = Path::new("aggregationRule").child("clusterRoleSelectors");
    let selectors = rule.get("clusterRoleSelectors").and_then(Value::as_array);
    if selectors.is_none_or(Vec::is_empty) {
        errs.push(field::required(
            &path,
            "at least one clusterRoleSelector required if aggregationRule is non-nil",
        ));
    }
    let allow_invalid_values = old
        .and_then(|o| o.pointer("/aggregationRule/clusterRoleSelectors"))
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(meta::selector_has_invalid_values));
    for (i, selector) in selectors.into_iter().flatten().enumerate() {
        meta::validate_label_selector_with(selector, allow_invalid_values, &path.index(i), errs);
    }
}

fn validate_binding(binding: &Value, old: Option<&Value>, namespaced: bool, errs: &mut ErrorList) {
    let role_ref = binding.get("roleRef").cloned().unwrap_or(Value::Null);
    let ref_path = Path::new("roleRef");
    // kube's defaulting fills an empty apiGroup in.
    let group = str_of(role_ref.get("apiGroup"));
    if !group.is_empty() && group != GROUP {
        errs.push(field::not_supported(
            &ref_path.child("apiGroup"),
            group,
            &[GROUP],
        ));
    }
    let kind = str_of(role_ref.get("kind"));
    let kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !kinds.contains(&kind) {
        errs.push(field::not_supported(&ref_path.child("kind"), kind, kinds));
    }
    let name = str_of(role_ref.get("name"));
    if name.is_empty() {
        errs.push(field::required(&ref_path.child("name"), ""));
    } else {
        errs.extend(field::invalid_each(
            &ref_path.child("name"),
            name,
            names::path_segment_name(name),
        ));
    }
    let subjects = binding.get("subjects").and_then(Value::as_array);
    for (i, subject) in subjects.into_iter().flatten().enumerate() {
        validate_subject(subject, namespaced, &Path::new("subjects").index(i), errs);
    }
    if let Some(old) = old {
        let old_ref = old.get("roleRef").cloned().unwrap_or(Value::Null);
        let same = |key: &str| {
            let a = str_of(old_ref.get(key));
            let b = str_of(role_ref.get(key));
            a == b
                || (key == "apiGroup"
                    && a.replace(GROUP, "").is_empty()
                    && b.replace(GROUP, "").is_empty())
        };
        if !(same("apiGroup") && same("kind") && same("name")) {
            let shown = format!(
                "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
                names::go_quote(if group.is_empty() { GROUP } else { group }),
                names::go_quote(kind),
                names::go_quote(name)
            );
            errs.push(field::invalid(
                &ref_path,
                Bad::Raw(shown),
                "cannot change roleRef",
            ));
        }
    }
}

fn validate_subject(subject: &Value, namespaced: bool, path: &Path, errs: &mut ErrorList) {
    let name = str_of(subject.get("name"));
    let group = str_of(subject.get("apiGroup"));
    if name.is_empty() {
        errs.push(field::required(&path.child("name"), ""));
    }
    match str_of(subject.get("kind")) {
        "ServiceAccount" => {
            if !name.is_empty() {
                errs.extend(field::invalid_each(
                    &path.child("name"),
                    name,
                    names::dns1123_subdomain(name),
                ));
            }
            if !group.is_empty() {
                errs.push(field::not_supported(&path.child("apiGroup"), group, &[""]));
            }
            if !namespaced && str_of(subject.get("namespace")).is_empty() {
                errs.push(field::required(&path.child("namespace"), ""));
            }
        }
        kind @ ("User" | "Group") => {
            if name.is_empty() {
                let what = if kind == "User" { "user" } else { "group" };
                errs.push(field::invalid(
                    &path.child("name"),
                    name,
                    &format!("{what} name cannot be empty"),
                ));
            }
            // An empty apiGroup is defaulted to rbac's.
            if !group.is_empty() && group != GROUP {
                errs.push(field::not_supported(
                    &path.child("apiGroup"),
                    group,
                    &[GROUP],
                ));
            }
        }
        other => errs.push(field::not_supported(
            &path.child("kind"),
            other,
            &["ServiceAccount", "User", "Group"],
        )),
    }
}
