//! RFC 7386 JSON Merge Patch (`application/merge-patch+json`).
//!
//! Objects merge recursively, `null` deletes a member, anything else (lists
//! included) replaces. Like evanphx/json-patch (what kube-apiserver uses), `null`
//! members are also dropped from objects nested inside newly set values, lists
//! included; `null` list elements are kept. kube-apiserver refuses a body that is
//! neither an object nor a list with 400 "Invalid JSON Patch": see
//! [`validate_merge_patch`].
//!
//! Pure functions over `serde_json::Value`: no I/O, no store, no HTTP.

use serde_json::{Map, Value};

use super::PatchError;

/// Applies an RFC 7386 merge patch to `doc` and returns the result.
pub fn apply_merge_patch(doc: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(patch) => {
            let mut target = match doc {
                Value::Object(map) => map.clone(),
                _ => Map::new(),
            };
            merge_into(&mut target, patch);
            Value::Object(target)
        }
        other => pruned(other),
    }
}

/// kube-apiserver's check of a merge patch body: an object or a list, else 400
/// "Invalid JSON Patch".
pub fn validate_merge_patch(patch: &Value) -> Result<(), PatchError> {
    match patch {
        Value::Object(_) | Value::Array(_) => Ok(()),
        _ => Err(PatchError::InvalidMergePatch),
    }
}

fn merge_into(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (key, value) in patch {
        match value {
            Value::Null => {
                target.remove(key);
            }
            Value::Object(sub) => match target.get_mut(key) {
                Some(Value::Object(existing)) => merge_into(existing, sub),
                _ => {
                    target.insert(key.clone(), pruned(value));
                }
            },
            _ => {
                target.insert(key.clone(), pruned(value));
            }
        }
    }
}

/// `value` without the `null` members of any object in it.
fn pruned(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), pruned(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(pruned).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn merge(doc: Value, patch: Value) -> Value {
        apply_merge_patch(&doc, &patch)
    }

    #[test]
    fn rfc7386_appendix_a() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (doc, patch, want) in cases {
            assert_eq!(
                merge(doc.clone(), patch.clone()),
                want,
                "doc {doc} patch {patch}"
            );
        }
    }

    #[test]
    fn rfc7386_section3_example() {
        let doc = json!({
            "title": "Goodbye!",
            "author": {"givenName": "John", "familyName": "Doe"},
            "tags": ["example", "sample"],
            "content": "This will be unchanged"
        });
        let patch = json!({
            "title": "Hello!",
            "phoneNumber": "+01-123-456-7890",
            "author": {"familyName": null},
            "tags": ["example"]
        });
        assert_eq!(
            merge(doc, patch),
            json!({
                "title": "Hello!",
                "author": {"givenName": "John"},
                "tags": ["example"],
                "content": "This will be unchanged",
                "phoneNumber": "+01-123-456-7890"
            })
        );
    }

    #[test]
    fn kubernetes_shapes() {
        let doc = json!({
            "metadata": {"name": "web", "labels": {"app": "web", "tier": "fe"}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}
            ]}}}
        });
        let out = merge(
            doc,
            json!({
                "metadata": {"labels": {"tier": null, "env": "prod"}},
                "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "a", "image": "a:2"}]}}}
            }),
        );
        // Lists are replaced wholesale by a merge patch.
        assert_eq!(
            out,
            json!({
                "metadata": {"name": "web", "labels": {"app": "web", "env": "prod"}},
                "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "a", "image": "a:2"}]}}}
            })
        );
    }

    #[test]
    fn nulls_inside_new_values_are_dropped() {
        assert_eq!(
            merge(json!({}), json!({"a": [{"b": null, "c": 1}, null]})),
            json!({"a": [{"c": 1}, null]})
        );
        assert_eq!(
            merge(
                json!({"a": "scalar"}),
                json!({"a": {"x": null, "y": {"z": null}}})
            ),
            json!({"a": {"y": {}}})
        );
        assert_eq!(
            merge(json!({"a": 1}), json!({"missing": null})),
            json!({"a": 1})
        );
    }

    #[test]
    fn empty_patch_is_identity() {
        let doc = json!({"a": {"b": [1, 2, {"c": null}]}});
        assert_eq!(merge(doc.clone(), json!({})), doc);
    }

    #[test]
    fn validation() {
        assert!(validate_merge_patch(&json!({})).is_ok());
        assert!(validate_merge_patch(&json!([])).is_ok());
        for bad in [json!(null), json!("x"), json!(1), json!(true)] {
            let e = validate_merge_patch(&bad).unwrap_err();
            assert_eq!(e.to_string(), "Invalid JSON Patch");
            assert_eq!(e.status_code(), 400);
        }
    }
}
