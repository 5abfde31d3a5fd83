//! Validation and pruning of custom resources against their CRD's structural
//! `openAPIV3Schema`, as kube-apiserver does: unknown fields are dropped (or
//! reported, under `fieldValidation=Strict`) unless the schema preserves them, and
//! values are checked for type, required fields, enums, bounds and lengths.

use serde_json::{Map, Value};

use crate::apiserver::http::status::StatusCause;

/// Checks `value` against `schema`; the causes of a 422 (empty when valid).
pub fn validate(value: &Value, schema: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    // apiVersion, kind and metadata are validated by the server itself.
    if let (Some(object), Some(properties)) = (
        value.as_object(),
        schema.get("properties").and_then(Value::as_object),
    ) {
        for (key, child) in object {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(child_schema) = properties.get(key) {
                check(child, child_schema, key, &mut causes);
            }
        }
        required(object, schema, "", &mut causes);
    }
    causes
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn invalid(path: &str, value: &Value, detail: String) -> StatusCause {
    StatusCause {
        reason: Some("FieldValueInvalid".into()),
        message: Some(format!("Invalid value: {}: {detail}", show(value))),
        field: Some(path.to_string()),
    }
}

fn required(
    object: &Map<String, Value>,
    schema: &Value,
    path: &str,
    causes: &mut Vec<StatusCause>,
) {
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !object.contains_key(name) {
            causes.push(StatusCause {
                reason: Some("FieldValueRequired".into()),
                message: Some("Required value".into()),
                field: Some(join(path, name)),
            });
        }
    }
}

fn check(value: &Value, schema: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    if value.is_null() {
        if !schema
            .get("nullable")
            .and_then(Value::as_bool)
            .unwrap_or(false)
        {
            let expected = schema.get("type").and_then(Value::as_str).unwrap_or("");
            if !expected.is_empty() {
                causes.push(invalid(
                    path,
                    value,
                    format!("{path} in body must be of type {expected}: \"null\""),
                ));
            }
        }
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if let Some(expected) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(value);
        let ok = actual == expected
            || (expected == "number" && actual == "integer")
            || (int_or_string && matches!(actual, "integer" | "string"));
        if !ok {
            causes.push(invalid(
                path,
                value,
                format!("{path} in body must be of type {expected}: \"{actual}\""),
            ));
            return;
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let list: Vec<String> = options.iter().map(show).collect();
        causes.push(StatusCause {
            reason: Some("FieldValueNotSupported".into()),
            message: Some(format!(
                "Unsupported value: {}: supported values: {}",
                show(value),
                list.join(", ")
            )),
            field: Some(path.to_string()),
        });
    }
    match value {
        Value::Number(n) => {
            let v = n.as_f64().unwrap_or(0.0);
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                && v < min
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{path} in body should be greater than or equal to {min}"),
                ));
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
                && v > max
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{path} in body should be less than or equal to {max}"),
                ));
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{path} in body should be at least {min} chars long"),
                ));
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                causes.push(StatusCause {
                    reason: Some("FieldValueTooLong".into()),
                    message: Some(format!("Too long: may not be more than {max} bytes")),
                    field: Some(path.to_string()),
                });
            }
        }
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && len < min
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{path} in body should have at least {min} items"),
                ));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && len > max
            {
                causes.push(StatusCause {
                    reason: Some("FieldValueTooMany".into()),
                    message: Some(format!("Too many: {len}: must have at most {max} items")),
                    field: Some(path.to_string()),
                });
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item, item_schema, &format!("{path}[{i}]"), causes);
                }
            }
        }
        Value::Object(object) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, child) in object {
                    if let Some(child_schema) = properties.get(key) {
                        check(child, child_schema, &join(path, key), causes);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for (key, child) in object {
                    check(child, additional, &join(path, key), causes);
                }
            }
            required(object, schema, path, causes);
        }
        _ => {}
    }
}

/// Drops fields the schema does not know (unless it preserves unknown fields) and
/// returns their paths (for Strict/Warn field validation).
pub fn prune(value: &mut Value, schema: &Value) -> Vec<String> {
    let mut pruned = Vec::new();
    if let Value::Object(object) = value {
        let properties = schema.get("properties").and_then(Value::as_object);
        let preserve = schema
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        object.retain(|key, _| {
            let keep = matches!(key.as_str(), "apiVersion" | "kind" | "metadata")
                || preserve
                || properties.is_some_and(|p| p.contains_key(key));
            if !keep {
                pruned.push(key.clone());
            }
            keep
        });
        if let Some(properties) = properties {
            for (key, child) in object.iter_mut() {
                if let Some(child_schema) = properties.get(key) {
                    prune_inner(child, child_schema, key, &mut pruned);
                }
            }
        }
    }
    pruned
}

fn prune_inner(value: &mut Value, schema: &Value, path: &str, pruned: &mut Vec<String>) {
    if schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
        && schema.get("properties").is_none()
    {
        return;
    }
    match value {
        Value::Object(object) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                let preserve = schema
                    .get("x-kubernetes-preserve-unknown-fields")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                object.retain(|key, _| {
                    let keep = preserve || properties.contains_key(key);
                    if !keep {
                        pruned.push(join(path, key));
                    }
                    keep
                });
                for (key, child) in object.iter_mut() {
                    if let Some(child_schema) = properties.get(key) {
                        prune_inner(child, child_schema, &join(path, key), pruned);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for (key, child) in object.iter_mut() {
                    prune_inner(child, additional, &join(path, key), pruned);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_inner(item, item_schema, &format!("{path}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }}
        }})
    }

    #[test]
    fn types_bounds_enums_and_required() {
        assert!(validate(&json!({"spec": {"size": 3, "mode": "a"}}), &schema()).is_empty());
        let causes = validate(&json!({"spec": {"size": "big"}}), &schema());
        assert_eq!(causes[0].field.as_deref(), Some("spec.size"));
        assert!(
            causes[0]
                .message
                .as_deref()
                .unwrap()
                .contains("must be of type integer")
        );
        assert_eq!(validate(&json!({"spec": {"size": 11}}), &schema()).len(), 1);
        assert_eq!(
            validate(&json!({"spec": {"size": 1, "mode": "z"}}), &schema())[0]
                .reason
                .as_deref(),
            Some("FieldValueNotSupported")
        );
        assert_eq!(
            validate(&json!({"spec": {}}), &schema())[0]
                .reason
                .as_deref(),
            Some("FieldValueRequired")
        );
        assert_eq!(
            validate(
                &json!({"spec": {"size": 1, "tags": ["a", "b", "c"]}}),
                &schema()
            )
            .len(),
            1
        );
    }

    #[test]
    fn pruning_respects_preserve_unknown_fields() {
        let mut v = json!({"apiVersion": "x/v1", "kind": "W", "metadata": {}, "spec": {"size": 1, "bogus": 2, "free": {"any": 1}}, "extra": true});
        let pruned = prune(&mut v, &schema());
        assert_eq!(pruned, vec!["extra".to_string(), "spec.bogus".to_string()]);
        assert_eq!(v["spec"]["free"]["any"], 1);
        assert!(v.get("extra").is_none());
    }
}
