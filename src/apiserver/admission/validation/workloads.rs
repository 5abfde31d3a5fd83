//! Workload validation: Deployment, ReplicaSet, ReplicationController, DaemonSet,
//! StatefulSet, Job, CronJob and PodTemplate (kube's `pkg/apis/apps/validation`,
//! `pkg/apis/batch/validation` and the core ones for ReplicationController and
//! PodTemplate): selectors and their match with the template's labels, strategies,
//! counts, the restart policy each controller allows, CronJob schedules and time zones,
//! and on update the fields that may not change. Each pod template goes through
//! `pod::validate_pod_template`.
//!
//! One deliberate difference: kube validates a StatefulSet's template only for labels
//! and annotations (a TODO in its code); k3rs also checks the template's pod spec, with
//! the `volumeClaimTemplates` counted as volumes, so a StatefulSet that could never make
//! a pod is refused when it is written, not on every retry of its controller.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::field::{self, Bad, ErrorList, Path};
use super::meta::{self, IMMUTABLE, nonnegative, normalized, str_of};
use super::names;
use super::pod::{validate_pod_spec, validate_pod_template};
use crate::apiserver::storage::selectors::{LabelSelector, from_label_selector_json};
use crate::cron::Schedule;

const NO_MATCH: &str = "`selector` does not match template `labels`";

pub fn validate(kind: &str, new: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    let null = Value::Null;
    let spec = new.get("spec").unwrap_or(&null);
    let old_spec = old.map(|o| o.get("spec").unwrap_or(&Value::Null));
    let spec_path = Path::new("spec");
    match kind {
        "PodTemplate" => validate_pod_template(
            new.get("template"),
            &Path::new("template"),
            &HashSet::new(),
            errs,
        ),
        "ReplicationController" => validate_replication_controller(spec, &spec_path, errs),
        "Deployment" => {
            validate_deployment(spec, &spec_path, errs);
            immutable_selector(spec, old_spec, &spec_path, errs);
        }
        "ReplicaSet" => {
            nonnegative(spec.get("replicas"), &spec_path.child("replicas"), errs);
            nonnegative(
                spec.get("minReadySeconds"),
                &spec_path.child("minReadySeconds"),
                errs,
            );
            validate_replica_set_template(spec, &spec_path, "deployment", errs);
            immutable_selector(spec, old_spec, &spec_path, errs);
        }
        "DaemonSet" => {
            validate_daemon_set(spec, &spec_path, errs);
            immutable_selector(spec, old_spec, &spec_path, errs);
        }
        "StatefulSet" => {
            validate_stateful_set(spec, &spec_path, errs);
            if let Some(old_spec) = old_spec {
                validate_stateful_set_update(spec, old_spec, errs);
            }
        }
        "Job" => {
            validate_job_spec(spec, &spec_path, errs);
            validate_job_selector(spec, &spec_path, errs);
            if let Some(old_spec) = old_spec {
                validate_job_update(spec, old_spec, &spec_path, errs);
            }
        }
        "CronJob" => validate_cron_job(new, old, errs),
        _ => {}
    }
}

fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

// ---------------------------------------------------------------- selectors

/// kube's `LabelSelectorAsSelector` of a selector field (absent or null selects nothing,
/// `{}` everything); `None` when it does not convert.
fn as_selector(selector: Option<&Value>) -> Option<LabelSelector> {
    from_label_selector_json(selector.unwrap_or(&Value::Null)).ok()
}

/// kube's explicit emptiness check (`len(matchLabels)+len(matchExpressions) == 0`).
fn selector_is_empty(selector: &Value) -> bool {
    selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty)
        && selector
            .get("matchExpressions")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
}

/// Go's `%#v` of a `map[string]string` (keys sorted, as `fmt` prints maps).
pub(crate) fn go_string_map(map: Option<&Value>) -> String {
    let Some(map) = map.and_then(Value::as_object) else {
        return "map[string]string(nil)".into();
    };
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    let shown: Vec<String> = entries
        .iter()
        .map(|(k, v)| {
            format!(
                "{}:{}",
                names::go_quote(k),
                names::go_quote(v.as_str().unwrap_or(""))
            )
        })
        .collect();
    format!("map[string]string{{{}}}", shown.join(", "))
}

/// Go's `%#v` of a `metav1.LabelSelector`, as kube prints a selector in a message.
pub(crate) fn go_label_selector(selector: &Value) -> String {
    let expressions = match selector.get("matchExpressions").and_then(Value::as_array) {
        None => "[]v1.LabelSelectorRequirement(nil)".to_string(),
        Some(list) => {
            let shown: Vec<String> = list
                .iter()
                .map(|e| {
                    let values = match e.get("values").and_then(Value::as_array) {
                        Some(_) => meta::go_string_slice(&meta::string_list(e.get("values"))),
                        None => "[]string(nil)".into(),
                    };
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{values}}}",
                        names::go_quote(str_of(e.get("key"))),
                        names::go_quote(str_of(e.get("operator")))
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", shown.join(", "))
        }
    };
    format!(
        "v1.LabelSelector{{MatchLabels:{}, MatchExpressions:{expressions}}}",
        go_string_map(selector.get("matchLabels"))
    )
}

/// Go's `%#v` of an `intstr.IntOrString`.
fn go_int_or_string(value: &Value) -> Bad {
    Bad::Raw(match value {
        Value::String(s) => format!(
            "intstr.IntOrString{{Type:1, IntVal:0, StrVal:{}}}",
            names::go_quote(s)
        ),
        other => format!(
            "intstr.IntOrString{{Type:0, IntVal:{}, StrVal:\"\"}}",
            other.as_i64().unwrap_or(0)
        ),
    })
}

/// `spec.selector` of an apps workload: required, valid, not empty. Returns kube's
/// `LabelSelectorAsSelector` of it (an absent one selects nothing), `None` when it does
/// not convert.
fn validate_selector(
    spec: &Value,
    path: &Path,
    workload: &str,
    required: bool,
    errs: &mut ErrorList,
) -> Option<LabelSelector> {
    let selector_path = path.child("selector");
    let selector = present(spec.get("selector"));
    match selector {
        None if required => errs.push(field::required(&selector_path, "")),
        None => {}
        Some(selector) => {
            meta::validate_label_selector(selector, &selector_path, errs);
            if selector_is_empty(selector) {
                errs.push(field::invalid(
                    &selector_path,
                    Bad::Raw(go_label_selector(selector)),
                    &format!("empty selector is invalid for {workload}"),
                ));
            }
        }
    }
    as_selector(selector)
}

/// The template's labels against the selector.
fn check_template_labels(
    selector: &LabelSelector,
    template: &Value,
    labels_path: &Path,
    errs: &mut ErrorList,
) {
    let labels = template.pointer("/metadata/labels");
    if !selector.matches_json(labels.and_then(Value::as_object)) {
        errs.push(field::invalid(
            labels_path,
            Bad::Raw(go_string_map(labels)),
            NO_MATCH,
        ));
    }
}

fn immutable_selector(spec: &Value, old_spec: Option<&Value>, path: &Path, errs: &mut ErrorList) {
    let Some(old_spec) = old_spec else {
        return;
    };
    let new = present(spec.get("selector"));
    let old = present(old_spec.get("selector"));
    if new.map(normalized) != old.map(normalized) {
        let shown = new.map_or(Bad::Null, |s| Bad::Raw(go_label_selector(s)));
        errs.push(field::invalid(&path.child("selector"), shown, IMMUTABLE));
    }
}

// ---------------------------------------------------------------- apps

/// kube's `ValidatePodTemplateSpecForReplicaSet` with the selector checks before it
/// (Deployment and ReplicaSet).
fn validate_replica_set_template(spec: &Value, path: &Path, workload: &str, errs: &mut ErrorList) {
    let template_path = path.child("template");
    let Some(selector) = validate_selector(spec, path, workload, true, errs) else {
        errs.push(field::invalid(
            &path.child("selector"),
            Bad::Raw(go_label_selector(&spec["selector"])),
            "invalid label selector",
        ));
        return;
    };
    let Some(template) = present(spec.get("template")) else {
        errs.push(field::required(&template_path, ""));
        return;
    };
    if !selector.is_empty() {
        check_template_labels(
            &selector,
            template,
            &template_path.child("metadata").child("labels"),
            errs,
        );
    }
    validate_pod_template(Some(template), &template_path, &HashSet::new(), errs);
    always_restart(template, &template_path, "ReplicaSet", errs);
}

/// Long-running controllers' templates: `restartPolicy: Always`, no deadline.
fn always_restart(template: &Value, template_path: &Path, controller: &str, errs: &mut ErrorList) {
    let policy = str_of(template.pointer("/spec/restartPolicy"));
    if policy != "Always" {
        errs.push(field::not_supported(
            &template_path.child("spec").child("restartPolicy"),
            policy,
            &["Always"],
        ));
    }
    if present(template.pointer("/spec/activeDeadlineSeconds")).is_some() {
        errs.push(field::forbidden(
            &template_path.child("spec").child("activeDeadlineSeconds"),
            &format!("activeDeadlineSeconds in {controller} is not Supported"),
        ));
    }
}

fn validate_deployment(spec: &Value, path: &Path, errs: &mut ErrorList) {
    nonnegative(spec.get("replicas"), &path.child("replicas"), errs);
    validate_replica_set_template(spec, path, "deployment", errs);
    let strategy_path = path.child("strategy");
    let strategy = spec.get("strategy").unwrap_or(&Value::Null);
    let rolling = present(strategy.get("rollingUpdate"));
    match str_of(strategy.get("type")) {
        "Recreate" => {
            if rolling.is_some() {
                errs.push(field::forbidden(
                    &strategy_path.child("rollingUpdate"),
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => match rolling {
            None => errs.push(field::required(
                &strategy_path.child("rollingUpdate"),
                "this should be defaulted and never be nil",
            )),
            Some(rolling) => {
                let at = strategy_path.child("rollingUpdate");
                let unavailable = rolling.get("maxUnavailable").unwrap_or(&Value::Null);
                let surge = rolling.get("maxSurge").unwrap_or(&Value::Null);
                positive_int_or_percent(unavailable, &at.child("maxUnavailable"), errs);
                positive_int_or_percent(surge, &at.child("maxSurge"), errs);
                if int_or_percent_value(unavailable) == 0 && int_or_percent_value(surge) == 0 {
                    errs.push(field::invalid(
                        &at.child("maxUnavailable"),
                        go_int_or_string(unavailable),
                        "may not be 0 when `maxSurge` is 0",
                    ));
                }
                not_more_than_100_percent(unavailable, &at.child("maxUnavailable"), errs);
            }
        },
        _ => errs.push(field::not_supported(
            &strategy_path,
            Bad::Raw(strategy.to_string()),
            &["Recreate", "RollingUpdate"],
        )),
    }
    nonnegative(
        spec.get("minReadySeconds"),
        &path.child("minReadySeconds"),
        errs,
    );
    nonnegative(
        spec.get("revisionHistoryLimit"),
        &path.child("revisionHistoryLimit"),
        errs,
    );
    if let Some(deadline) = spec.get("progressDeadlineSeconds").and_then(Value::as_i64) {
        nonnegative(
            spec.get("progressDeadlineSeconds"),
            &path.child("progressDeadlineSeconds"),
            errs,
        );
        let min_ready = spec
            .get("minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if deadline <= min_ready {
            errs.push(field::invalid(
                &path.child("progressDeadlineSeconds"),
                deadline,
                "must be greater than minReadySeconds",
            ));
        }
    }
}

/// The value of an int-or-percent (`5`, `"25%"`), 0 when neither.
fn int_or_percent_value(value: &Value) -> i64 {
    match value {
        Value::String(s) if names::percent(s).is_empty() => {
            s.trim_end_matches('%').parse().unwrap_or(0)
        }
        Value::String(s) => s.parse().unwrap_or(0),
        other => other.as_i64().unwrap_or(0),
    }
}

fn positive_int_or_percent(value: &Value, path: &Path, errs: &mut ErrorList) {
    match value {
        Value::String(s) => {
            for message in names::percent(s) {
                errs.push(field::invalid(path, go_int_or_string(value), &message));
            }
        }
        Value::Number(_) => nonnegative(Some(value), path, errs),
        Value::Null => {}
        _ => errs.push(field::invalid(
            path,
            Bad::Raw(value.to_string()),
            "must be an integer or percentage (e.g '5%%')",
        )),
    }
}

fn not_more_than_100_percent(value: &Value, path: &Path, errs: &mut ErrorList) {
    if let Value::String(s) = value
        && names::percent(s).is_empty()
        && int_or_percent_value(value) > 100
    {
        errs.push(field::invalid(
            path,
            go_int_or_string(value),
            "must not be greater than 100%",
        ));
    }
}

fn validate_daemon_set(spec: &Value, path: &Path, errs: &mut ErrorList) {
    let template_path = path.child("template");
    let template = spec.get("template").unwrap_or(&Value::Null);
    let selector = present(spec.get("selector"));
    if let Some(selector) = selector {
        meta::validate_label_selector(selector, &path.child("selector"), errs);
    }
    if let Some(converted) = as_selector(selector) {
        check_template_labels(
            &converted,
            template,
            &template_path.child("metadata").child("labels"),
            errs,
        );
    }
    if let Some(selector) = selector
        && selector_is_empty(selector)
    {
        errs.push(field::invalid(
            &path.child("selector"),
            Bad::Raw(go_label_selector(selector)),
            "empty selector is invalid for daemonset",
        ));
    }
    validate_pod_template(Some(template), &template_path, &HashSet::new(), errs);
    always_restart(template, &template_path, "DaemonSet", errs);
    nonnegative(
        spec.get("minReadySeconds"),
        &path.child("minReadySeconds"),
        errs,
    );
    nonnegative(
        spec.get("templateGeneration"),
        &path.child("templateGeneration"),
        errs,
    );
    let strategy_path = path.child("updateStrategy");
    let strategy = spec.get("updateStrategy").unwrap_or(&Value::Null);
    match str_of(strategy.get("type")) {
        "OnDelete" => {}
        "RollingUpdate" => match present(strategy.get("rollingUpdate")) {
            None => errs.push(field::required(&strategy_path.child("rollingUpdate"), "")),
            Some(rolling) => {
                let at = strategy_path.child("rollingUpdate");
                let unavailable = rolling.get("maxUnavailable").unwrap_or(&Value::Null);
                let surge = rolling.get("maxSurge").unwrap_or(&Value::Null);
                positive_int_or_percent(unavailable, &at.child("maxUnavailable"), errs);
                positive_int_or_percent(surge, &at.child("maxSurge"), errs);
                not_more_than_100_percent(unavailable, &at.child("maxUnavailable"), errs);
                not_more_than_100_percent(surge, &at.child("maxSurge"), errs);
                let has_unavailable = int_or_percent_value(unavailable) != 0;
                let has_surge = int_or_percent_value(surge) != 0;
                if has_unavailable && has_surge {
                    errs.push(field::invalid(
                        &at.child("maxSurge"),
                        go_int_or_string(surge),
                        "may not be set when maxUnavailable is non-zero",
                    ));
                } else if !has_unavailable && !has_surge {
                    errs.push(field::required(
                        &at.child("maxUnavailable"),
                        "cannot be 0 when maxSurge is 0",
                    ));
                }
            }
        },
        _ => errs.push(field::not_supported(
            &strategy_path,
            Bad::Raw(strategy.to_string()),
            &["RollingUpdate", "OnDelete"],
        )),
    }
    nonnegative(
        spec.get("revisionHistoryLimit"),
        &path.child("revisionHistoryLimit"),
        errs,
    );
}

fn validate_stateful_set(spec: &Value, path: &Path, errs: &mut ErrorList) {
    match str_of(spec.get("podManagementPolicy")) {
        "" => errs.push(field::required(&path.child("podManagementPolicy"), "")),
        "OrderedReady" | "Parallel" => {}
        other => errs.push(field::invalid(
            &path.child("podManagementPolicy"),
            other,
            "must be 'OrderedReady' or 'Parallel'",
        )),
    }
    let strategy_path = path.child("updateStrategy");
    let strategy = spec.get("updateStrategy").unwrap_or(&Value::Null);
    let rolling = present(strategy.get("rollingUpdate"));
    match str_of(strategy.get("type")) {
        "" => errs.push(field::required(&strategy_path, "")),
        "OnDelete" => {
            if let Some(rolling) = rolling {
                errs.push(field::invalid(
                    &strategy_path.child("rollingUpdate"),
                    Bad::Raw(rolling.to_string()),
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(rolling) = rolling {
                let at = strategy_path.child("rollingUpdate");
                nonnegative(rolling.get("partition"), &at.child("partition"), errs);
                if let Some(max) = present(rolling.get("maxUnavailable")) {
                    positive_int_or_percent(max, &at.child("maxUnavailable"), errs);
                    if int_or_percent_value(max) == 0 {
                        errs.push(field::invalid(
                            &at.child("maxUnavailable"),
                            go_int_or_string(max),
                            "cannot be 0",
                        ));
                    }
                    not_more_than_100_percent(max, &at.child("maxUnavailable"), errs);
                }
            }
        }
        _ => errs.push(field::invalid(
            &strategy_path,
            Bad::Raw(strategy.to_string()),
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
    if let Some(policy) = present(spec.get("persistentVolumeClaimRetentionPolicy")) {
        for key in ["whenDeleted", "whenScaled"] {
            let value = str_of(policy.get(key));
            if value != "Retain" && value != "Delete" {
                errs.push(field::not_supported(
                    &path
                        .child("persistentVolumeClaimRetentionPolicy")
                        .child(key),
                    value,
                    &["Retain", "Delete"],
                ));
            }
        }
    }
    nonnegative(spec.get("replicas"), &path.child("replicas"), errs);
    nonnegative(
        spec.get("minReadySeconds"),
        &path.child("minReadySeconds"),
        errs,
    );
    nonnegative(
        spec.pointer("/ordinals/start"),
        &path.child("ordinals.start"),
        errs,
    );
    let template_path = path.child("template");
    let template = spec.get("template").unwrap_or(&Value::Null);
    match validate_selector(spec, path, "statefulset", true, errs) {
        None => errs.push(field::invalid(
            &path.child("selector"),
            Bad::Raw(go_label_selector(&spec["selector"])),
            "",
        )),
        Some(selector) => {
            if !selector.is_empty() {
                check_template_labels(
                    &selector,
                    template,
                    &template_path.child("metadata").child("labels"),
                    errs,
                );
            }
            // kube's own paths for these two (`template.labels`, without `metadata`).
            if let Some(labels) = template.pointer("/metadata/labels") {
                meta::validate_labels(labels, &template_path.child("labels"), errs);
            }
            if let Some(annotations) = template.pointer("/metadata/annotations") {
                meta::validate_annotations(annotations, &template_path.child("annotations"), errs);
            }
        }
    }
    let claim_names: HashSet<String> = spec
        .get("volumeClaimTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|claim| str_of(claim.pointer("/metadata/name")).to_string())
        .filter(|name| !name.is_empty())
        .collect();
    validate_pod_spec(
        template.get("spec"),
        &template_path.child("spec"),
        &claim_names,
        errs,
    );
    always_restart(template, &template_path, "StatefulSet", errs);
}

fn validate_stateful_set_update(spec: &Value, old_spec: &Value, errs: &mut ErrorList) {
    const MUTABLE: [&str; 7] = [
        "replicas",
        "template",
        "updateStrategy",
        "minReadySeconds",
        "ordinals",
        "persistentVolumeClaimRetentionPolicy",
        "revisionHistoryLimit",
    ];
    let strip = |value: &Value| {
        let mut value = normalized(value);
        if let Some(map) = value.as_object_mut() {
            for key in MUTABLE {
                map.remove(key);
            }
        }
        value
    };
    if strip(spec) != strip(old_spec) {
        errs.push(field::forbidden(
            &Path::new("spec"),
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        ));
    }
}

fn validate_replication_controller(spec: &Value, path: &Path, errs: &mut ErrorList) {
    nonnegative(
        spec.get("minReadySeconds"),
        &path.child("minReadySeconds"),
        errs,
    );
    let selector = spec.get("selector").and_then(Value::as_object);
    let selector_path = path.child("selector");
    match selector {
        Some(map) if !map.is_empty() => {
            meta::validate_labels(&spec["selector"], &selector_path, errs)
        }
        _ => errs.push(field::required(&selector_path, "")),
    }
    nonnegative(spec.get("replicas"), &path.child("replicas"), errs);
    let template_path = path.child("template");
    let Some(template) = present(spec.get("template")) else {
        errs.push(field::required(&template_path, ""));
        return;
    };
    if let Some(selector) = selector.filter(|m| !m.is_empty()) {
        let labels = template
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        let matches = selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
        if !matches {
            errs.push(field::invalid(
                &template_path.child("metadata").child("labels"),
                Bad::Raw(go_string_map(template.pointer("/metadata/labels"))),
                NO_MATCH,
            ));
        }
    }
    validate_pod_template(Some(template), &template_path, &HashSet::new(), errs);
    always_restart(template, &template_path, "ReplicationController", errs);
}

// ---------------------------------------------------------------- batch

/// kube's `validateJobSpec` (shared by a Job and a CronJob's `jobTemplate.spec`).
fn validate_job_spec(spec: &Value, path: &Path, errs: &mut ErrorList) {
    for key in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ] {
        nonnegative(spec.get(key), &path.child(key), errs);
    }
    if let Some(mode) = present(spec.get("completionMode")) {
        let mode_text = mode.as_str().unwrap_or("");
        if mode_text != "NonIndexed" && mode_text != "Indexed" {
            errs.push(field::not_supported(
                &path.child("completionMode"),
                mode,
                &["NonIndexed", "Indexed"],
            ));
        }
        if mode_text == "Indexed" && present(spec.get("completions")).is_none() {
            errs.push(field::required(
                &path.child("completions"),
                "when completion mode is Indexed",
            ));
        }
    }
    let template_path = path.child("template");
    let template = spec.get("template").unwrap_or(&Value::Null);
    validate_pod_template(Some(template), &template_path, &HashSet::new(), errs);
    let policy = str_of(template.pointer("/spec/restartPolicy"));
    let restart_path = template_path.child("spec").child("restartPolicy");
    if policy != "OnFailure" && policy != "Never" {
        errs.push(field::not_supported(
            &restart_path,
            policy,
            &["OnFailure", "Never"],
        ));
    } else if policy == "OnFailure" && present(spec.get("podFailurePolicy")).is_some() {
        errs.push(field::invalid(
            &restart_path,
            policy,
            "only \"Never\" is supported when podFailurePolicy is specified",
        ));
    }
}

/// A Job's own selector: required, valid, and matching its template.
fn validate_job_selector(spec: &Value, path: &Path, errs: &mut ErrorList) {
    let selector = present(spec.get("selector"));
    match selector {
        None => errs.push(field::required(&path.child("selector"), "")),
        Some(selector) => meta::validate_label_selector(selector, &path.child("selector"), errs),
    }
    if let Some(converted) = as_selector(selector) {
        check_template_labels(
            &converted,
            spec.get("template").unwrap_or(&Value::Null),
            &path.child("template").child("metadata").child("labels"),
            errs,
        );
    }
}

fn validate_job_update(spec: &Value, old_spec: &Value, path: &Path, errs: &mut ErrorList) {
    let immutable = |key: &str, errs: &mut ErrorList| {
        let new = present(spec.get(key)).map(normalized);
        let old = present(old_spec.get(key)).map(normalized);
        if new != old {
            let shown = match (key, spec.get(key)) {
                ("selector", Some(s)) => Bad::Raw(go_label_selector(s)),
                (_, Some(v)) if v.is_object() => Bad::Raw(v.to_string()),
                (_, Some(v)) => Bad::from(v),
                (_, None) => Bad::Null,
            };
            errs.push(field::invalid(&path.child(key), shown, IMMUTABLE));
        }
    };
    immutable("selector", errs);
    immutable("completionMode", errs);
    let elastic = str_of(spec.get("completionMode")) == "Indexed"
        && spec.get("completions").and_then(Value::as_i64)
            == spec.get("parallelism").and_then(Value::as_i64);
    if !elastic {
        immutable("completions", errs);
    }
    // A suspended Job that never ran may change its pods' scheduling directives.
    let suspended = old_spec.get("suspend").and_then(Value::as_bool) == Some(true)
        && spec.get("suspend").and_then(Value::as_bool) == Some(true);
    let strip_scheduling = |template: Option<&Value>| {
        let mut t = template.map(normalized).unwrap_or(Value::Null);
        if suspended {
            if let Some(meta) = t.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("labels");
                meta.remove("annotations");
            }
            if let Some(pod) = t.get_mut("spec").and_then(Value::as_object_mut) {
                for key in ["nodeSelector", "tolerations", "affinity", "schedulingGates"] {
                    pod.remove(key);
                }
            }
        }
        t
    };
    if strip_scheduling(spec.get("template")) != strip_scheduling(old_spec.get("template")) {
        errs.push(field::invalid(
            &path.child("template"),
            Bad::Raw(
                spec.get("template")
                    .map(Value::to_string)
                    .unwrap_or_default(),
            ),
            IMMUTABLE,
        ));
    }
}

fn validate_cron_job(new: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    let name = str_of(new.pointer("/metadata/name"));
    if name.len() > 52 {
        errs.push(field::invalid(
            &Path::new("metadata").child("name"),
            name,
            "must be no more than 52 characters",
        ));
    }
    let path = Path::new("spec");
    let spec = new.get("spec").unwrap_or(&Value::Null);
    let old_spec = old.and_then(|o| o.get("spec"));
    let schedule = str_of(spec.get("schedule"));
    let schedule_path = path.child("schedule");
    let time_zone = present(spec.get("timeZone"));
    if schedule.is_empty() {
        errs.push(field::required(&schedule_path, ""));
    } else {
        let allow_tz = old_spec.is_some_and(|o| str_of(o.get("schedule")).contains("TZ"));
        if let Err(e) = Schedule::parse(schedule) {
            errs.push(field::invalid(&schedule_path, schedule, &e.to_string()));
        }
        if allow_tz && schedule.contains("TZ") && time_zone.is_some() {
            errs.push(field::invalid(
                &schedule_path,
                schedule,
                "cannot use both timeZone field and TZ or CRON_TZ in schedule",
            ));
        } else if !allow_tz && schedule.contains("TZ") {
            errs.push(field::invalid(
                &schedule_path,
                schedule,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ));
        }
    }
    nonnegative(
        spec.get("startingDeadlineSeconds"),
        &path.child("startingDeadlineSeconds"),
        errs,
    );
    let zone_changed = old_spec.is_none_or(|o| present(o.get("timeZone")) != time_zone);
    if zone_changed && let Some(zone) = time_zone {
        let zone_path = path.child("timeZone");
        let text = zone.as_str().unwrap_or("");
        if text.is_empty() {
            errs.push(field::invalid(
                &zone_path,
                text,
                "timeZone must be nil or non-empty string",
            ));
        } else if text.eq_ignore_ascii_case("local") {
            errs.push(field::invalid(
                &zone_path,
                text,
                "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
            ));
        } else if jiff::tz::TimeZone::get(text).is_err() {
            errs.push(field::invalid(
                &zone_path,
                text,
                &format!("unknown time zone {text}"),
            ));
        }
    }
    let policy_path = path.child("concurrencyPolicy");
    match str_of(spec.get("concurrencyPolicy")) {
        "" => errs.push(field::required(&policy_path, "")),
        "Allow" | "Forbid" | "Replace" => {}
        other => errs.push(field::not_supported(
            &policy_path,
            other,
            &["Allow", "Forbid", "Replace"],
        )),
    }
    let job_spec_path = path.child("jobTemplate").child("spec");
    let job_spec = spec.pointer("/jobTemplate/spec").unwrap_or(&Value::Null);
    validate_job_spec(job_spec, &job_spec_path, errs);
    if let Some(selector) = present(job_spec.get("selector")) {
        errs.push(field::invalid(
            &job_spec_path.child("selector"),
            Bad::Raw(go_label_selector(selector)),
            "`selector` will be auto-generated",
        ));
    }
    if job_spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        errs.push(field::not_supported(
            &job_spec_path.child("manualSelector"),
            true,
            &["nil", "false"],
        ));
    }
    for key in ["successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
        nonnegative(spec.get(key), &path.child(key), errs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_renderings() {
        assert_eq!(
            go_label_selector(&json!({"matchLabels": {"b": "2", "a": "1"}})),
            r#"v1.LabelSelector{MatchLabels:map[string]string{"a":"1", "b":"2"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}"#
        );
        assert_eq!(
            go_label_selector(
                &json!({"matchExpressions": [{"key": "k", "operator": "In", "values": ["x"]}]})
            ),
            r#"v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:"k", Operator:"In", Values:[]string{"x"}}}}"#
        );
        assert_eq!(go_string_map(None), "map[string]string(nil)");
        assert!(
            matches!(go_int_or_string(&json!("200%")), Bad::Raw(s) if s == r#"intstr.IntOrString{Type:1, IntVal:0, StrVal:"200%"}"#)
        );
    }
}
