//! ObjectMeta validation for every built-in kind (kube's `ValidateObjectMeta` and
//! `ValidateObjectMetaUpdate`): labels, annotations, generateName, finalizers,
//! ownerReferences, and on update the fields that may not change. Also the pieces other
//! validators share: label maps, annotation maps and label selectors (the pod and workload
//! validators use them for templates and selectors), and Go's rendering of string lists
//! in messages.
//!
//! `metadata.name` is not checked here: the create handler refuses a bad name (with
//! `objects::name_problem`) before validation runs, and an update cannot change it.

use serde_json::{Map, Value};

use super::field::{self, Bad, ErrorList, Path};
use super::names;
use crate::apiserver::storage::objects;
use crate::apiserver::storage::registry::ResourceInfo;

/// kube's `TotalAnnotationSizeLimitB`: keys and values together.
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// kube's `FieldImmutableErrorMsg`.
pub(crate) const IMMUTABLE: &str = "field is immutable";

/// Finalizers without a `/` that kube's built-in kinds accept.
const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

pub fn validate_object_meta(
    info: &ResourceInfo,
    new: &Value,
    old: Option<&Value>,
    errs: &mut ErrorList,
) {
    let empty = Value::Null;
    let meta = new.get("metadata").unwrap_or(&empty);
    let path = Path::new("metadata");

    let generate_name = str_of(meta.get("generateName"));
    if !generate_name.is_empty() {
        // The prefix must start a valid name of the kind (the server appends five
        // alphanumeric characters). kube masks a trailing '-' only, and so refuses a prefix
        // ending in '.', which k3rs's own event recorder uses (`<object>.`).
        let extended = format!("{generate_name}a");
        if let Some(problem) = objects::name_problem(info, &extended) {
            errs.push(field::invalid(
                &path.child("generateName"),
                generate_name,
                &problem,
            ));
        }
    }
    if let Some(labels) = meta.get("labels") {
        validate_labels(labels, &path.child("labels"), errs);
    }
    if let Some(annotations) = meta.get("annotations") {
        validate_annotations(annotations, &path.child("annotations"), errs);
    }
    if let Some(refs) = meta.get("ownerReferences").and_then(Value::as_array) {
        validate_owner_references(refs, &path.child("ownerReferences"), errs);
    }
    let finalizers = string_list(meta.get("finalizers"));
    validate_finalizers(&finalizers, &path.child("finalizers"), errs);
    if uses_kube_finalizer_rule(&info.group) {
        for (i, finalizer) in finalizers.iter().enumerate() {
            validate_kube_finalizer_name(finalizer, &path.child("finalizers").index(i), errs);
        }
    }

    if let Some(old) = old {
        let old_meta = old.get("metadata").unwrap_or(&empty);
        // Finalizers cannot be added once the object is being deleted.
        if old_meta
            .get("deletionTimestamp")
            .is_some_and(|t| !t.is_null())
        {
            let old_finalizers = string_list(old_meta.get("finalizers"));
            let mut extra: Vec<&str> = finalizers
                .iter()
                .filter(|f| !old_finalizers.contains(f))
                .map(String::as_str)
                .collect();
            extra.sort_unstable();
            extra.dedup();
            if !extra.is_empty() {
                errs.push(field::forbidden(
                    &path.child("finalizers"),
                    &format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers {}",
                        go_string_slice(&extra)
                    ),
                ));
            }
        }
        for key in ["name", "namespace", "uid", "creationTimestamp"] {
            let now = meta.get(key).filter(|v| !v.is_null());
            let before = old_meta.get(key).filter(|v| !v.is_null());
            if now != before {
                let shown: Bad = now
                    .map(Bad::from)
                    .unwrap_or_else(|| Bad::Str(String::new()));
                errs.push(field::invalid(&path.child(key), shown, IMMUTABLE));
            }
        }
    }
}

/// Kinds validated by kube's core `ValidateObjectMeta`, which also insists that a
/// finalizer without a `/` be one of the standard ones. CRDs and APIServices use
/// apimachinery's generic rule (their own finalizers have no `/`).
fn uses_kube_finalizer_rule(group: &str) -> bool {
    !matches!(group, "apiextensions.k8s.io" | "apiregistration.k8s.io")
}

/// A label map (`metadata.labels`, a selector's `matchLabels`, a template's labels):
/// keys are qualified names, values label values; every error is reported at `path`.
pub(crate) fn validate_labels(labels: &Value, path: &Path, errs: &mut ErrorList) {
    let Some(map) = labels.as_object() else {
        return;
    };
    for (key, value) in map {
        validate_label_name(key, path, errs);
        if let Some(value) = value.as_str() {
            errs.extend(field::invalid_each(path, value, names::label_value(value)));
        }
    }
}

/// kube's `ValidateLabelName`: a qualified name.
pub(crate) fn validate_label_name(key: &str, path: &Path, errs: &mut ErrorList) {
    errs.extend(field::invalid_each(path, key, names::qualified_name(key)));
}

/// An annotation map: keys are qualified names once lowercased, and keys plus values
/// stay under 256 KiB.
pub(crate) fn validate_annotations(annotations: &Value, path: &Path, errs: &mut ErrorList) {
    let Some(map) = annotations.as_object() else {
        return;
    };
    let mut total = 0usize;
    for (key, value) in map {
        for message in names::qualified_name(&key.to_lowercase()) {
            errs.push(field::invalid(path, key.as_str(), &message));
        }
        total = total
            .saturating_add(key.len())
            .saturating_add(value.as_str().map_or(0, str::len));
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(field::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
}

/// kube's `ValidateLabelSelector` (label values in expressions checked).
pub(crate) fn validate_label_selector(selector: &Value, path: &Path, errs: &mut ErrorList) {
    validate_label_selector_with(selector, false, path, errs);
}

/// `ValidateLabelSelector` with `AllowInvalidLabelValueInSelector` (set on update when the
/// stored selector already had such values).
pub(crate) fn validate_label_selector_with(
    selector: &Value,
    allow_invalid_values: bool,
    path: &Path,
    errs: &mut ErrorList,
) {
    if selector.is_null() {
        return;
    }
    if let Some(labels) = selector.get("matchLabels") {
        validate_labels(labels, &path.child("matchLabels"), errs);
    }
    let expressions = selector.get("matchExpressions").and_then(Value::as_array);
    for (i, expression) in expressions.into_iter().flatten().enumerate() {
        let at = path.child("matchExpressions").index(i);
        let values = expression.get("values").and_then(Value::as_array);
        let count = values.map_or(0, Vec::len);
        let operator = str_of(expression.get("operator"));
        match operator {
            "In" | "NotIn" => {
                if count == 0 {
                    errs.push(field::required(
                        &at.child("values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if count > 0 {
                    errs.push(field::forbidden(
                        &at.child("values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            _ => errs.push(field::invalid(
                &at.child("operator"),
                operator,
                "not a valid selector operator",
            )),
        }
        validate_label_name(str_of(expression.get("key")), &at.child("key"), errs);
        if !allow_invalid_values {
            for (j, value) in values.into_iter().flatten().enumerate() {
                let value = value.as_str().unwrap_or("");
                errs.extend(field::invalid_each(
                    &at.child("values").index(j),
                    value,
                    names::label_value(value),
                ));
            }
        }
    }
}

/// Whether a selector has label values kube's selector validation refuses (an update
/// keeps accepting those it already stored).
pub(crate) fn selector_has_invalid_values(selector: &Value) -> bool {
    let mut errs = ErrorList::new();
    validate_label_selector(selector, &Path::root(), &mut errs);
    !errs.is_empty()
}

fn validate_owner_references(refs: &[Value], path: &Path, errs: &mut ErrorList) {
    let mut first_controller: Option<String> = None;
    for reference in refs {
        let api_version = str_of(reference.get("apiVersion"));
        let kind = str_of(reference.get("kind"));
        let name = str_of(reference.get("name"));
        let uid = str_of(reference.get("uid"));
        let (group, version) = parse_group_version(api_version);
        if version.is_empty() {
            errs.push(field::invalid(
                &path.child("apiVersion"),
                api_version,
                "version must not be empty",
            ));
        }
        if kind.is_empty() {
            errs.push(field::invalid(
                &path.child("kind"),
                kind,
                "must not be empty",
            ));
        }
        if name.is_empty() {
            errs.push(field::invalid(
                &path.child("name"),
                name,
                "must not be empty",
            ));
        }
        if uid.is_empty() {
            errs.push(field::invalid(&path.child("uid"), uid, "must not be empty"));
        }
        if group.is_empty() && version == "v1" && kind == "Event" {
            errs.push(field::invalid(
                path,
                Bad::Raw(reference.to_string()),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if reference.get("controller").and_then(Value::as_bool) == Some(true) {
            let current = format!("{kind}/{name}");
            match &first_controller {
                Some(first) => errs.push(field::invalid(
                    path,
                    Bad::Raw(Value::Array(refs.to_vec()).to_string()),
                    &format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => first_controller = Some(current),
            }
        }
    }
}

/// apimachinery's `ParseGroupVersion` as `FromAPIVersionAndKind` uses it: a malformed
/// value yields no group and no version.
fn parse_group_version(api_version: &str) -> (&str, &str) {
    if api_version.is_empty() || api_version == "/" {
        return ("", "");
    }
    match api_version.split('/').collect::<Vec<_>>().as_slice() {
        [version] => ("", version),
        [group, version] => (group, version),
        _ => ("", ""),
    }
}

/// apimachinery's `ValidateFinalizers`: qualified names, and not both `orphan` and
/// `foregroundDeletion`.
fn validate_finalizers(finalizers: &[String], path: &Path, errs: &mut ErrorList) {
    for finalizer in finalizers {
        errs.extend(field::invalid_each(
            path,
            finalizer,
            names::qualified_name(finalizer),
        ));
    }
    if finalizers.iter().any(|f| f == "orphan")
        && finalizers.iter().any(|f| f == "foregroundDeletion")
    {
        let all: Vec<&str> = finalizers.iter().map(String::as_str).collect();
        errs.push(field::invalid(
            path,
            Bad::Raw(go_string_slice(&all)),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
}

/// kube's `validateKubeFinalizerName`: a name without `/` must be a standard finalizer.
pub(crate) fn validate_kube_finalizer_name(name: &str, path: &Path, errs: &mut ErrorList) {
    if !name.contains('/') && !STANDARD_FINALIZERS.contains(&name) {
        errs.push(field::invalid(
            path,
            name,
            "name is neither a standard finalizer name nor is it fully qualified",
        ));
    }
}

/// One `Invalid` per message for an integer value.
pub(crate) fn invalid_int_each(path: &Path, value: i64, messages: Vec<String>) -> ErrorList {
    messages
        .into_iter()
        .map(|m| field::invalid(path, value, &m))
        .collect()
}

/// kube's `isNegativeErrorMsg`.
pub(crate) const NEGATIVE: &str = "must be greater than or equal to 0";

/// kube's `ValidateNonnegativeField` for an optional integer field.
pub(crate) fn nonnegative(value: Option<&Value>, path: &Path, errs: &mut ErrorList) {
    if let Some(v) = value.and_then(Value::as_i64)
        && v < 0
    {
        errs.push(field::invalid(path, v, NEGATIVE));
    }
}

/// The items of a JSON list, empty when absent or not a list.
pub(crate) fn array(value: Option<&Value>) -> &[Value] {
    value
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// `value` without nulls, empty lists and empty maps, at any depth: kube's semantic
/// equality treats a nil and an empty slice or map alike, so two objects compare equal
/// when their normalized forms do.
pub(crate) fn normalized(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| match v {
                    Value::Null => false,
                    Value::Array(a) => !a.is_empty(),
                    Value::Object(o) => !o.is_empty(),
                    _ => true,
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

/// A string field, `""` when absent or not a string.
pub(crate) fn str_of(value: Option<&Value>) -> &str {
    value.and_then(Value::as_str).unwrap_or("")
}

/// The strings of a JSON list (other items skipped), empty when absent.
pub(crate) fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Go's `%#v` of a `[]string`: `[]string{"a", "b"}`.
pub(crate) fn go_string_slice<S: AsRef<str>>(items: &[S]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| names::go_quote(s.as_ref())).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// The bad value of a `[]string` field as kube prints it.
pub(crate) fn string_slice_value(value: Option<&Value>) -> Bad {
    match value.and_then(Value::as_array) {
        Some(_) => Bad::Raw(go_string_slice(&string_list(value))),
        None => Bad::Raw("[]string(nil)".into()),
    }
}

/// Whether two optional JSON maps hold the same entries (absent, null and `{}` alike: a
/// stored empty map reads back as absent).
pub(crate) fn same_map(a: Option<&Value>, b: Option<&Value>) -> bool {
    let empty = Map::new();
    let a = a.and_then(Value::as_object).unwrap_or(&empty);
    let b = b.and_then(Value::as_object).unwrap_or(&empty);
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(parse_group_version("apps/v1"), ("apps", "v1"));
        assert_eq!(parse_group_version("v1"), ("", "v1"));
        assert_eq!(parse_group_version("a/b/c"), ("", ""));
        assert_eq!(go_string_slice(&["a", "b"]), r#"[]string{"a", "b"}"#);
        assert!(same_map(None, Some(&serde_json::json!({}))));
    }
}
