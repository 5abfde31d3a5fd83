//! RFC 6902 JSON Patch (`application/json-patch+json`) as kube-apiserver applies it.
//!
//! kube-apiserver links `gopkg.in/evanphx/json-patch.v4`; this is a from-scratch
//! implementation of the same behaviour, including its error texts and its
//! departures from the RFC, because clients see both:
//!
//! * negative array indices count from the end (`/a/-1`), and `"01"`/`"+1"` are
//!   accepted as indices (Go's `strconv.Atoi`);
//! * `replace` of a missing object member adds it, and `copy`/`move` from a
//!   missing member copies `null` (`move` then fails on the removal);
//! * `test` against a missing member or `null` passes when the value is `null`
//!   or absent;
//! * a pointer without a leading `/` ignores its first segment;
//! * `copy` operations may grow the document by at most a byte budget
//!   (kube-apiserver's `--json-patch-max-copy-bytes`, 3 MiB by default).
//!
//! Pure functions over `serde_json::Value`: no I/O, no store, no HTTP.

use serde_json::{Map, Value};

use super::PatchError;
use super::go_fmt::json_kind;

/// kube-apiserver's cap on the number of operations in one JSON patch.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// kube-apiserver's default budget for the growth caused by `copy` operations.
pub const DEFAULT_COPY_SIZE_LIMIT: usize = 3 * 1024 * 1024;

/// Applies an RFC 6902 patch (`patch` is the decoded request body) to `doc`, with
/// kube-apiserver's default copy budget.
pub fn apply_json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    apply_json_patch_with_copy_limit(doc, patch, DEFAULT_COPY_SIZE_LIMIT)
}

/// [`apply_json_patch`] with an explicit budget (in bytes of compact JSON) for the
/// growth caused by `copy` operations; 0 means unlimited.
pub fn apply_json_patch_with_copy_limit(
    doc: &Value,
    patch: &Value,
    copy_limit: usize,
) -> Result<Value, PatchError> {
    let ops = decode_patch(patch)?;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooManyOperations {
            max: MAX_JSON_PATCH_OPERATIONS,
            got: ops.len(),
        });
    }
    if !(doc.is_object() || doc.is_array()) {
        return Err(PatchError::JsonPatchFailed(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.partialDoc",
            json_kind(doc)
        )));
    }
    let mut doc = doc.clone();
    let mut copied = 0usize;
    for op in &ops {
        apply_op(&mut doc, op, copy_limit, &mut copied).map_err(PatchError::JsonPatchFailed)?;
    }
    Ok(doc)
}

/// One operation: its members, or `None` for a `null` entry (which has no `op`).
#[derive(Clone, Copy)]
struct Op<'a>(Option<&'a Map<String, Value>>);

impl<'a> Op<'a> {
    fn member(&self, name: &str) -> Option<&'a Value> {
        self.0.and_then(|m| m.get(name))
    }

    fn kind(&self) -> &'a str {
        match self.member("op") {
            Some(Value::String(s)) => s,
            _ => "unknown",
        }
    }

    /// A string member; `Err` carries the Go decoding error text.
    fn string_member(&self, name: &str, missing: &str) -> Result<&'a str, String> {
        match self.member(name) {
            None | Some(Value::Null) => Err(format!("{missing}: missing value")),
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(format!(
                "json: cannot unmarshal {} into Go value of type string",
                json_kind(other)
            )),
        }
    }

    fn path(&self) -> Result<&'a str, String> {
        self.string_member("path", "operation missing path field")
    }

    fn from(&self) -> Result<&'a str, String> {
        self.string_member("from", "operation, missing from field")
    }

    /// `None` when the operation has no `value` member.
    fn value(&self) -> Option<&'a Value> {
        self.member("value")
    }
}

fn decode_patch(patch: &Value) -> Result<Vec<Op<'_>>, PatchError> {
    let items = match patch {
        Value::Array(items) => items,
        Value::Null => return Ok(Vec::new()),
        other => {
            return Err(PatchError::InvalidJsonPatch(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                json_kind(other)
            )));
        }
    };
    items
        .iter()
        .map(|item| match item {
            Value::Object(m) => Ok(Op(Some(m))),
            Value::Null => Ok(Op(None)),
            other => Err(PatchError::InvalidJsonPatch(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
                json_kind(other)
            ))),
        })
        .collect()
}

fn apply_op(
    doc: &mut Value,
    op: &Op<'_>,
    copy_limit: usize,
    copied: &mut usize,
) -> Result<(), String> {
    match op.kind() {
        "add" => op_add(doc, op),
        "remove" => op_remove(doc, op),
        "replace" => op_replace(doc, op),
        "move" => op_move(doc, op),
        "test" => op_test(doc, op),
        "copy" => op_copy(doc, op, copy_limit, copied),
        other => Err(format!("Unexpected kind: {other}")),
    }
}

fn op_add(doc: &mut Value, op: &Op<'_>) -> Result<(), String> {
    let path = op
        .path()
        .map_err(|_| "add operation failed to decode path: missing value".to_string())?;
    let Some((con, key)) = find_object(doc, path) else {
        return Err(format!(
            "add operation does not apply: doc is missing path: \"{path}\": missing value"
        ));
    };
    let value = op.value().cloned().unwrap_or(Value::Null);
    con_add(con, &key, value).map_err(|e| format!("error in add for path: '{path}': {e}"))
}

fn op_remove(doc: &mut Value, op: &Op<'_>) -> Result<(), String> {
    let path = op
        .path()
        .map_err(|_| "remove operation failed to decode path: missing value".to_string())?;
    let Some((con, key)) = find_object(doc, path) else {
        return Err(format!(
            "remove operation does not apply: doc is missing path: \"{path}\": missing value"
        ));
    };
    con_remove(con, &key).map_err(|e| format!("error in remove for path: '{path}': {e}"))
}

fn op_replace(doc: &mut Value, op: &Op<'_>) -> Result<(), String> {
    let path = op
        .path()
        .map_err(|e| format!("replace operation failed to decode path: {e}"))?;
    if path.is_empty() {
        return match op.value() {
            Some(v @ (Value::Object(_) | Value::Array(_))) => {
                *doc = v.clone();
                Ok(())
            }
            // Go wraps a nil error here, hence the odd suffix.
            _ => Err("replace operation value must be object or array: %!w(<nil>)".to_string()),
        };
    }
    let Some((con, key)) = find_object(doc, path) else {
        return Err(format!(
            "replace operation does not apply: doc is missing path: {path}: missing value"
        ));
    };
    if con_get(con, &key).is_err() {
        return Err(format!(
            "replace operation does not apply: doc is missing key: {path}: missing value"
        ));
    }
    let value = op.value().cloned().unwrap_or(Value::Null);
    con_set(con, &key, value).map_err(|e| format!("error in remove for path: '{path}': {e}"))
}

fn op_move(doc: &mut Value, op: &Op<'_>) -> Result<(), String> {
    let from = op
        .from()
        .map_err(|e| format!("move operation failed to decode from: {e}"))?;
    let Some((con, key)) = find_object(doc, from) else {
        return Err(format!(
            "move operation does not apply: doc is missing from path: {from}: missing value"
        ));
    };
    let value = con_get(con, &key)
        .map_err(|e| format!("error in move for path: '{key}': {e}"))?
        .cloned()
        .unwrap_or(Value::Null);
    con_remove(con, &key).map_err(|e| format!("error in move for path: '{key}': {e}"))?;
    let path = op
        .path()
        .map_err(|e| format!("move operation failed to decode path: {e}"))?;
    let Some((con, key)) = find_object(doc, path) else {
        return Err(format!(
            "move operation does not apply: doc is missing destination path: {path}: missing value"
        ));
    };
    con_add(con, &key, value).map_err(|e| format!("error in move for path: '{path}': {e}"))
}

fn op_test(doc: &mut Value, op: &Op<'_>) -> Result<(), String> {
    let path = op
        .path()
        .map_err(|e| format!("test operation failed to decode path: {e}"))?;
    let failed = || format!("testing value {path} failed: test failed");
    if path.is_empty() {
        return match op.value() {
            Some(v) if v == doc => Ok(()),
            _ => Err(failed()),
        };
    }
    let Some((con, key)) = find_object(doc, path) else {
        return Err(format!(
            "test operation does not apply: is missing path: {path}: missing value"
        ));
    };
    let current =
        con_get(con, &key).map_err(|e| format!("error in test for path: '{path}': {e}"))?;
    match (current, op.value()) {
        (None, None | Some(Value::Null)) => Ok(()),
        (Some(cur), Some(want)) if cur == want => Ok(()),
        _ => Err(failed()),
    }
}

fn op_copy(
    doc: &mut Value,
    op: &Op<'_>,
    copy_limit: usize,
    copied: &mut usize,
) -> Result<(), String> {
    let from = op
        .from()
        .map_err(|e| format!("copy operation failed to decode from: {e}"))?;
    let Some((con, key)) = find_object(doc, from) else {
        return Err(format!(
            "copy operation does not apply: doc is missing from path: {from}: missing value"
        ));
    };
    let value = con_get(con, &key)
        .map_err(|e| format!("error in copy for from: '{from}': {e}"))?
        .cloned();
    let path = op
        .path()
        .map_err(|_| "copy operation failed to decode path: missing value".to_string())?;
    let Some((con, key)) = find_object(doc, path) else {
        return Err(format!(
            "copy operation does not apply: doc is missing destination path: {path}: missing value"
        ));
    };
    *copied += value.as_ref().map_or(0, go_marshal_len);
    if copy_limit > 0 && *copied > copy_limit {
        return Err(format!(
            "Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {copy_limit}"
        ));
    }
    con_add(con, &key, value.unwrap_or(Value::Null))
        .map_err(|e| format!("error while adding value during copy: {e}"))
}

/// Resolves all but the last token of `path`; returns the container (an object or
/// an array) and the decoded last token. `None` when a token does not resolve to
/// an object or array, or when the pointer has fewer than two segments ("" and
/// "foo" do not resolve).
fn find_object<'d>(doc: &'d mut Value, path: &str) -> Option<(&'d mut Value, String)> {
    let tokens: Vec<&str> = path.split('/').collect();
    if tokens.len() < 2 {
        return None;
    }
    let key = decode_token(tokens[tokens.len() - 1]);
    let mut cur = doc;
    for token in &tokens[1..tokens.len() - 1] {
        let token = decode_token(token);
        let next = match cur {
            Value::Object(map) => map.get_mut(&token)?,
            Value::Array(items) => {
                let idx = existing_index(items.len(), &token).ok()?;
                &mut items[idx]
            }
            _ => return None,
        };
        if !(next.is_object() || next.is_array()) {
            return None;
        }
        cur = next;
    }
    Some((cur, key))
}

/// RFC 6901 unescaping: `~1` is `/`, `~0` is `~`, anything else is literal.
fn decode_token(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.peek() {
                Some('1') => {
                    chars.next();
                    out.push('/');
                    continue;
                }
                Some('0') => {
                    chars.next();
                    out.push('~');
                    continue;
                }
                _ => {}
            }
        }
        out.push(c);
    }
    out
}

/// Go's `strconv.Atoi`, with its error texts.
fn go_atoi(s: &str) -> Result<i64, String> {
    let quoted = serde_json::to_string(s).unwrap_or_default();
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("strconv.Atoi: parsing {quoted}: invalid syntax"));
    }
    s.strip_prefix('+')
        .unwrap_or(s)
        .parse::<i64>()
        .map_err(|_| format!("strconv.Atoi: parsing {quoted}: value out of range"))
}

fn invalid_index(idx: i64) -> String {
    format!("Unable to access invalid index: {idx}: invalid index referenced")
}

/// Index of an existing element (`get`, `remove`, `replace`), negative indices
/// counting from the end.
fn existing_index(len: usize, token: &str) -> Result<usize, String> {
    let idx = go_atoi(token)?;
    let len = len as i64;
    let resolved = if idx < 0 { idx + len } else { idx };
    if resolved < 0 || resolved >= len {
        return Err(invalid_index(idx));
    }
    Ok(resolved as usize)
}

/// Value at `key`; `Ok(None)` for a missing or `null` object member.
fn con_get<'a>(con: &'a Value, key: &str) -> Result<Option<&'a Value>, String> {
    match con {
        Value::Object(map) => Ok(map.get(key).filter(|v| !v.is_null())),
        Value::Array(items) => {
            let idx = existing_index(items.len(), key)?;
            Ok(Some(&items[idx]).filter(|v| !v.is_null()))
        }
        _ => Ok(None),
    }
}

fn con_add(con: &mut Value, key: &str, value: Value) -> Result<(), String> {
    match con {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
            Ok(())
        }
        Value::Array(items) => {
            if key == "-" {
                items.push(value);
                return Ok(());
            }
            let idx = go_atoi(key)
                .map_err(|e| format!("value was not a proper array index: '{key}': {e}"))?;
            let new_len = items.len() as i64 + 1;
            if idx >= new_len || idx < -new_len {
                return Err(invalid_index(idx));
            }
            let at = if idx < 0 { idx + new_len } else { idx };
            items.insert(at as usize, value);
            Ok(())
        }
        _ => Err(invalid_index(0)),
    }
}

fn con_remove(con: &mut Value, key: &str) -> Result<(), String> {
    match con {
        Value::Object(map) => match map.remove(key) {
            Some(_) => Ok(()),
            None => Err(format!(
                "Unable to remove nonexistent key: {key}: missing value"
            )),
        },
        Value::Array(items) => {
            let idx = existing_index(items.len(), key)?;
            items.remove(idx);
            Ok(())
        }
        _ => Err(format!(
            "Unable to remove nonexistent key: {key}: missing value"
        )),
    }
}

fn con_set(con: &mut Value, key: &str, value: Value) -> Result<(), String> {
    match con {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
            Ok(())
        }
        Value::Array(items) => {
            let idx = existing_index(items.len(), key)?;
            items[idx] = value;
            Ok(())
        }
        _ => Err(invalid_index(0)),
    }
}

/// Length of Go's `json.Marshal` output for `v`: compact JSON, with `<`, `>`, `&`,
/// U+2028 and U+2029 escaped as `\uXXXX`, and backspace/form feed as `\u0008`/`\u000c`.
fn go_marshal_len(v: &Value) -> usize {
    fn extra(s: &str) -> usize {
        s.chars()
            .map(|c| match c {
                '<' | '>' | '&' => 5,
                '\u{2028}' | '\u{2029}' => 3,
                '\u{8}' | '\u{c}' => 4,
                _ => 0,
            })
            .sum()
    }
    fn walk(v: &Value) -> usize {
        match v {
            Value::String(s) => extra(s),
            Value::Array(items) => items.iter().map(walk).sum(),
            Value::Object(map) => map.iter().map(|(k, v)| extra(k) + walk(v)).sum(),
            _ => 0,
        }
    }
    serde_json::to_string(v).map_or(0, |s| s.len()) + walk(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn apply(doc: Value, patch: Value) -> Result<Value, PatchError> {
        apply_json_patch(&doc, &patch)
    }

    fn ok(doc: Value, patch: Value) -> Value {
        apply(doc, patch).expect("patch should apply")
    }

    fn err(doc: Value, patch: Value) -> String {
        match apply(doc, patch) {
            Err(PatchError::JsonPatchFailed(msg)) => msg,
            other => panic!("expected an apply failure, got {other:?}"),
        }
    }

    // RFC 6902 appendix A.

    #[test]
    fn rfc_a1_add_object_member() {
        assert_eq!(
            ok(
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/baz", "value": "qux"}])
            ),
            json!({"baz": "qux", "foo": "bar"})
        );
    }

    #[test]
    fn rfc_a2_add_array_element() {
        assert_eq!(
            ok(
                json!({"foo": ["bar", "baz"]}),
                json!([{"op": "add", "path": "/foo/1", "value": "qux"}])
            ),
            json!({"foo": ["bar", "qux", "baz"]})
        );
    }

    #[test]
    fn rfc_a3_remove_object_member() {
        assert_eq!(
            ok(
                json!({"baz": "qux", "foo": "bar"}),
                json!([{"op": "remove", "path": "/baz"}])
            ),
            json!({"foo": "bar"})
        );
    }

    #[test]
    fn rfc_a4_remove_array_element() {
        assert_eq!(
            ok(
                json!({"foo": ["bar", "qux", "baz"]}),
                json!([{"op": "remove", "path": "/foo/1"}])
            ),
            json!({"foo": ["bar", "baz"]})
        );
    }

    #[test]
    fn rfc_a5_replace_value() {
        assert_eq!(
            ok(
                json!({"baz": "qux", "foo": "bar"}),
                json!([{"op": "replace", "path": "/baz", "value": "boo"}])
            ),
            json!({"baz": "boo", "foo": "bar"})
        );
    }

    #[test]
    fn rfc_a6_move_value() {
        assert_eq!(
            ok(
                json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
                json!([{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}])
            ),
            json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}})
        );
    }

    #[test]
    fn rfc_a7_move_array_element() {
        assert_eq!(
            ok(
                json!({"foo": ["all", "grass", "cows", "eat"]}),
                json!([{"op": "move", "from": "/foo/1", "path": "/foo/3"}])
            ),
            json!({"foo": ["all", "cows", "eat", "grass"]})
        );
        assert_eq!(
            ok(
                json!({"foo": ["all", "grass", "cows", "eat"]}),
                json!([{"op": "move", "from": "/foo/1", "path": "/foo/2"}])
            ),
            json!({"foo": ["all", "cows", "grass", "eat"]})
        );
    }

    #[test]
    fn rfc_a8_test_success() {
        let doc = json!({"baz": "qux", "foo": ["a", 2, "c"]});
        assert_eq!(
            ok(
                doc.clone(),
                json!([
                    {"op": "test", "path": "/baz", "value": "qux"},
                    {"op": "test", "path": "/foo/1", "value": 2}
                ])
            ),
            doc
        );
    }

    #[test]
    fn rfc_a9_test_failure() {
        assert_eq!(
            err(
                json!({"baz": "qux"}),
                json!([{"op": "test", "path": "/baz", "value": "bar"}])
            ),
            "testing value /baz failed: test failed"
        );
    }

    #[test]
    fn rfc_a10_add_nested_member() {
        assert_eq!(
            ok(
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/child", "value": {"grandchild": {}}}])
            ),
            json!({"foo": "bar", "child": {"grandchild": {}}})
        );
    }

    #[test]
    fn rfc_a11_ignore_unrecognized_members() {
        assert_eq!(
            ok(
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}])
            ),
            json!({"foo": "bar", "baz": "qux"})
        );
    }

    #[test]
    fn rfc_a12_add_to_nonexistent_target() {
        assert_eq!(
            err(
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/baz/bat", "value": "qux"}])
            ),
            "add operation does not apply: doc is missing path: \"/baz/bat\": missing value"
        );
    }

    #[test]
    fn rfc_a14_escape_ordering() {
        let doc = json!({"/": 9, "~1": 10});
        assert_eq!(
            ok(
                doc.clone(),
                json!([{"op": "test", "path": "/~01", "value": 10}])
            ),
            doc
        );
        assert_eq!(
            ok(doc, json!([{"op": "add", "path": "/~1", "value": 11}])),
            json!({"/": 11, "~1": 10})
        );
    }

    #[test]
    fn rfc_a15_comparing_strings_and_numbers() {
        assert_eq!(
            err(
                json!({"/": 9, "~1": 10}),
                json!([{"op": "test", "path": "/~01", "value": "10"}])
            ),
            "testing value /~01 failed: test failed"
        );
    }

    #[test]
    fn rfc_a16_add_array_value() {
        assert_eq!(
            ok(
                json!({"foo": ["bar"]}),
                json!([{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}])
            ),
            json!({"foo": ["bar", ["abc", "def"]]})
        );
    }

    #[test]
    fn pointer_escapes() {
        assert_eq!(
            ok(
                json!({"a/b": {"c~d": 1}}),
                json!([{"op": "replace", "path": "/a~1b/c~0d", "value": 2}])
            ),
            json!({"a/b": {"c~d": 2}})
        );
        assert_eq!(
            ok(
                json!({}),
                json!([{"op": "add", "path": "/metadata~1x", "value": 1}])
            ),
            json!({"metadata/x": 1})
        );
        // An empty token names the "" member.
        assert_eq!(
            ok(json!({}), json!([{"op": "add", "path": "/", "value": 1}])),
            json!({"": 1})
        );
        assert_eq!(decode_token("~01"), "~1");
        assert_eq!(decode_token("~2~"), "~2~");
    }

    #[test]
    fn kubernetes_label_annotation_patches() {
        let doc = json!({"metadata": {"name": "x", "labels": {"app": "web"}}});
        let out = ok(
            doc,
            json!([
                {"op": "add", "path": "/metadata/labels/tier", "value": "frontend"},
                {"op": "add", "path": "/metadata/annotations", "value": {"example.com~1a": "1"}},
                {"op": "add", "path": "/metadata/annotations/example.com~1b", "value": "2"},
                {"op": "remove", "path": "/metadata/labels/app"}
            ]),
        );
        assert_eq!(
            out,
            json!({"metadata": {"name": "x", "labels": {"tier": "frontend"},
                   "annotations": {"example.com~1a": "1", "example.com/b": "2"}}})
        );
    }

    #[test]
    fn containers_by_index() {
        let doc = json!({"spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}});
        let out = ok(
            doc,
            json!([
                {"op": "test", "path": "/spec/containers/1/name", "value": "b"},
                {"op": "replace", "path": "/spec/containers/1/image", "value": "b:2"},
                {"op": "add", "path": "/spec/containers/-", "value": {"name": "c", "image": "c:1"}},
                {"op": "remove", "path": "/spec/containers/0"}
            ]),
        );
        assert_eq!(
            out,
            json!({"spec": {"containers": [{"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}]}})
        );
    }

    #[test]
    fn negative_indices_as_evanphx_v4() {
        assert_eq!(
            ok(
                json!({"foo": ["bar", "baz"]}),
                json!([{"op": "add", "path": "/foo/-1", "value": "qux"}])
            ),
            json!({"foo": ["bar", "baz", "qux"]})
        );
        assert_eq!(
            ok(
                json!({"foo": []}),
                json!([{"op": "add", "path": "/foo/-1", "value": "qux"}])
            ),
            json!({"foo": ["qux"]})
        );
        assert_eq!(
            ok(
                json!({"foo": ["bar", "qux", "baz"]}),
                json!([{"op": "remove", "path": "/foo/-2"}])
            ),
            json!({"foo": ["bar", "baz"]})
        );
        assert_eq!(
            ok(
                json!({"foo": ["a", "b"]}),
                json!([{"op": "replace", "path": "/foo/-1", "value": "c"}])
            ),
            json!({"foo": ["a", "c"]})
        );
        assert_eq!(
            ok(
                json!({"foo": [{"x": 1}]}),
                json!([{"op": "add", "path": "/foo/-1/y", "value": 2}])
            ),
            json!({"foo": [{"x": 1, "y": 2}]})
        );
        assert_eq!(
            err(
                json!({"foo": ["bar", "baz"]}),
                json!([{"op": "add", "path": "/foo/-4", "value": "bum"}])
            ),
            "error in add for path: '/foo/-4': Unable to access invalid index: -4: invalid index referenced"
        );
        assert_eq!(
            err(
                json!({"foo": ["bar"]}),
                json!([{"op": "remove", "path": "/foo/-2"}])
            ),
            "error in remove for path: '/foo/-2': Unable to access invalid index: -2: invalid index referenced"
        );
    }

    #[test]
    fn array_index_errors() {
        assert_eq!(
            err(
                json!({"foo": ["bar"]}),
                json!([{"op": "add", "path": "/foo/2", "value": "bum"}])
            ),
            "error in add for path: '/foo/2': Unable to access invalid index: 2: invalid index referenced"
        );
        assert_eq!(
            err(
                json!({"foo": ["bar"]}),
                json!([{"op": "add", "path": "/foo/x", "value": 1}])
            ),
            "error in add for path: '/foo/x': value was not a proper array index: 'x': strconv.Atoi: parsing \"x\": invalid syntax"
        );
        assert_eq!(
            err(
                json!({"a": {"b": [1]}}),
                json!([{"op": "remove", "path": "/a/b/1"}])
            ),
            "error in remove for path: '/a/b/1': Unable to access invalid index: 1: invalid index referenced"
        );
        assert_eq!(
            err(
                json!({"foo": []}),
                json!([{"op": "remove", "path": "/foo/-"}])
            ),
            "error in remove for path: '/foo/-': strconv.Atoi: parsing \"-\": invalid syntax"
        );
        assert_eq!(
            err(
                json!({"foo": []}),
                json!([{"op": "remove", "path": "/foo/-1"}])
            ),
            "error in remove for path: '/foo/-1': Unable to access invalid index: -1: invalid index referenced"
        );
        assert_eq!(
            err(
                json!({"foo": ["bar", "baz"]}),
                json!([{"op": "replace", "path": "/foo/2", "value": "bum"}])
            ),
            "replace operation does not apply: doc is missing key: /foo/2: missing value"
        );
        assert_eq!(
            err(
                json!({"foo": ["bar"]}),
                json!([{"op": "add", "path": "/foo/99999999999999999999", "value": 1}])
            ),
            "error in add for path: '/foo/99999999999999999999': value was not a proper array index: '99999999999999999999': strconv.Atoi: parsing \"99999999999999999999\": value out of range"
        );
        // Leading zeros and "+" are accepted, as by Go's Atoi.
        assert_eq!(
            ok(
                json!({"foo": ["a", "b"]}),
                json!([{"op": "remove", "path": "/foo/01"}])
            ),
            json!({"foo": ["a"]})
        );
        assert_eq!(
            ok(
                json!({"foo": ["a", "b"]}),
                json!([{"op": "remove", "path": "/foo/+0"}])
            ),
            json!({"foo": ["b"]})
        );
    }

    #[test]
    fn missing_paths() {
        assert_eq!(
            err(
                json!({"a": {"b": {"d": 1}}}),
                json!([{"op": "remove", "path": "/a/b/c"}])
            ),
            "error in remove for path: '/a/b/c': Unable to remove nonexistent key: c: missing value"
        );
        assert_eq!(
            err(json!({"a": 1}), json!([{"op": "remove", "path": "/x/y"}])),
            "remove operation does not apply: doc is missing path: \"/x/y\": missing value"
        );
        assert_eq!(
            err(
                json!({"name": {"foo": "bat"}}),
                json!([{"op": "replace", "path": "/foo/bar", "value": "baz"}])
            ),
            "replace operation does not apply: doc is missing path: /foo/bar: missing value"
        );
        assert_eq!(
            err(
                json!({"a": "scalar"}),
                json!([{"op": "add", "path": "/a/b", "value": 1}])
            ),
            "add operation does not apply: doc is missing path: \"/a/b\": missing value"
        );
        // A null intermediate does not resolve either.
        assert_eq!(
            err(
                json!({"a": null}),
                json!([{"op": "add", "path": "/a/b", "value": 1}])
            ),
            "add operation does not apply: doc is missing path: \"/a/b\": missing value"
        );
        assert_eq!(
            err(
                json!({"a": {"b": {"d": 1}}}),
                json!([{"op": "move", "from": "/a/b/c", "path": "/a/b/e"}])
            ),
            "error in move for path: 'c': Unable to remove nonexistent key: c: missing value"
        );
        assert_eq!(
            err(
                json!({"a": {"b": [1]}}),
                json!([{"op": "move", "from": "/a/b/1", "path": "/a/b/2"}])
            ),
            "error in move for path: '1': Unable to access invalid index: 1: invalid index referenced"
        );
        assert_eq!(
            err(
                json!({"foo": ["all", "grass", "cows", "eat"]}),
                json!([{"op": "move", "from": "/foo/1", "path": "/foo/4"}])
            ),
            "error in move for path: '/foo/4': Unable to access invalid index: 4: invalid index referenced"
        );
        assert_eq!(
            err(
                json!({"a": {"b": 1}}),
                json!([{"op": "move", "from": "/a", "path": "/a/c"}])
            ),
            "move operation does not apply: doc is missing destination path: /a/c: missing value"
        );
        assert_eq!(
            err(
                json!({"a": 1}),
                json!([{"op": "test", "path": "/x/y", "value": 1}])
            ),
            "test operation does not apply: is missing path: /x/y: missing value"
        );
        assert_eq!(
            err(
                json!({"a": 1}),
                json!([{"op": "copy", "from": "/x/y", "path": "/b"}])
            ),
            "copy operation does not apply: doc is missing from path: /x/y: missing value"
        );
        assert_eq!(
            err(
                json!({"a": 1}),
                json!([{"op": "copy", "from": "/a", "path": "/x/y"}])
            ),
            "copy operation does not apply: doc is missing destination path: /x/y: missing value"
        );
        assert_eq!(
            err(
                json!({"foo": ["bar"]}),
                json!([{"op": "copy", "path": "/foo/2", "from": "/foo/0"}])
            ),
            "error while adding value during copy: Unable to access invalid index: 2: invalid index referenced"
        );
        assert_eq!(
            err(
                json!({"foo": ["bar"]}),
                json!([{"op": "copy", "path": "/b", "from": "/foo/3"}])
            ),
            "error in copy for from: '/foo/3': Unable to access invalid index: 3: invalid index referenced"
        );
    }

    #[test]
    fn bad_pointers_and_members() {
        assert_eq!(
            err(
                json!({"foo": "bar"}),
                json!([{"op": "add", "pathz": "/baz", "value": "qux"}])
            ),
            "add operation failed to decode path: missing value"
        );
        assert_eq!(
            err(
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "", "value": "qux"}])
            ),
            "add operation does not apply: doc is missing path: \"\": missing value"
        );
        assert_eq!(
            err(json!({}), json!([{"op": "add", "path": null}])),
            "add operation failed to decode path: missing value"
        );
        assert_eq!(
            err(json!({}), json!([{"op": "remove"}])),
            "remove operation failed to decode path: missing value"
        );
        assert_eq!(
            err(json!({}), json!([{"op": "replace", "path": 5, "value": 1}])),
            "replace operation failed to decode path: json: cannot unmarshal number into Go value of type string"
        );
        assert_eq!(
            err(json!({}), json!([{"op": "copy", "from": null}])),
            "copy operation failed to decode from: operation, missing from field: missing value"
        );
        assert_eq!(
            err(json!({"a": 1}), json!([{"op": "copy", "from": "/a"}])),
            "copy operation failed to decode path: missing value"
        );
        assert_eq!(
            err(json!({"a": 1}), json!([{"op": "move", "path": "/b"}])),
            "move operation failed to decode from: operation, missing from field: missing value"
        );
        assert_eq!(
            err(json!({"a": 1}), json!([{"op": "move", "from": "/a"}])),
            "move operation failed to decode path: operation missing path field: missing value"
        );
        assert_eq!(
            err(json!({}), json!([{"op": "test"}])),
            "test operation failed to decode path: operation missing path field: missing value"
        );
        assert_eq!(
            err(json!({}), json!([{"op": null, "path": ""}])),
            "Unexpected kind: unknown"
        );
        assert_eq!(
            err(json!({}), json!([{"op": "frobnicate", "path": "/a"}])),
            "Unexpected kind: frobnicate"
        );
        assert_eq!(
            err(json!({}), json!([{"op": 1, "path": "/a"}])),
            "Unexpected kind: unknown"
        );
        assert_eq!(err(json!({}), json!([null])), "Unexpected kind: unknown");
        assert_eq!(
            err(json!({}), json!([{"path": "/a"}])),
            "Unexpected kind: unknown"
        );
        // A pointer without a leading slash ignores its first segment.
        assert_eq!(
            ok(json!({}), json!([{"op": "add", "path": "x/y", "value": 1}])),
            json!({"y": 1})
        );
    }

    #[test]
    fn undecodable_patches_are_bad_requests() {
        let e = apply(json!({}), json!({"op": "add"})).unwrap_err();
        assert_eq!(
            e,
            PatchError::InvalidJsonPatch(
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch".into()
            )
        );
        assert_eq!(e.status_code(), 400);
        assert_eq!(
            apply(json!({}), json!(["add"])).unwrap_err().to_string(),
            "json: cannot unmarshal string into Go value of type jsonpatch.Operation"
        );
        assert_eq!(
            apply(json!({}), json!("x")).unwrap_err().to_string(),
            "json: cannot unmarshal string into Go value of type jsonpatch.Patch"
        );
        // `null` decodes to an empty patch.
        assert_eq!(ok(json!({"a": 1}), Value::Null), json!({"a": 1}));
        assert_eq!(ok(json!({"a": 1}), json!([])), json!({"a": 1}));
        let e = apply(json!(5), json!([])).unwrap_err();
        assert_eq!(e.status_code(), 422);
    }

    #[test]
    fn too_many_operations() {
        let ops: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "/a", "value": 1}))
            .collect();
        let e = apply(json!({"a": 1}), Value::Array(ops)).unwrap_err();
        assert_eq!(
            e,
            PatchError::TooManyOperations {
                max: 10_000,
                got: 10_001
            }
        );
        assert_eq!(e.status_code(), 413);
        let ops: Vec<Value> = (0..MAX_JSON_PATCH_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "/a", "value": 1}))
            .collect();
        assert!(apply(json!({"a": 1}), Value::Array(ops)).is_ok());
    }

    #[test]
    fn errors_abort_whole_patch() {
        let doc = json!({"a": 1});
        assert!(
            apply(
                doc,
                json!([
                    {"op": "add", "path": "/b", "value": 2},
                    {"op": "test", "path": "/a", "value": 2}
                ])
            )
            .is_err()
        );
    }

    #[test]
    fn test_op_semantics() {
        let doc = json!({"baz": "qux", "foo": null, "e": {}, "arr": [], "n": [null]});
        let pass = |p: Value| assert!(apply(doc.clone(), json!([p])).is_ok());
        let fail = |p: Value, path: &str| {
            assert_eq!(
                err(doc.clone(), json!([p])),
                format!("testing value {path} failed: test failed")
            )
        };
        pass(json!({"op": "test", "path": "/missing", "value": null}));
        pass(json!({"op": "test", "path": "/missing"}));
        pass(json!({"op": "test", "path": "/foo", "value": null}));
        pass(json!({"op": "test", "path": "/n/0", "value": null}));
        pass(json!({"op": "test", "path": "/baz~1foo", "value": null}));
        fail(
            json!({"op": "test", "path": "/missing", "value": 42}),
            "/missing",
        );
        fail(json!({"op": "test", "path": "/e", "value": null}), "/e");
        fail(json!({"op": "test", "path": "/arr", "value": null}), "/arr");
        fail(json!({"op": "test", "path": "/arr"}), "/arr");
        pass(json!({"op": "test", "path": "/e", "value": {}}));
        pass(json!({"op": "test", "path": "", "value": doc.clone()}));
        fail(json!({"op": "test", "path": "", "value": {}}), "");
        // Numbers compare by type as well as value (Go compares the raw JSON text).
        assert!(
            apply(
                json!({"a": 1}),
                json!([{"op": "test", "path": "/a", "value": 1.0}])
            )
            .is_err()
        );
        assert_eq!(
            err(
                json!({"a": [1]}),
                json!([{"op": "test", "path": "/a/5", "value": 1}])
            ),
            "error in test for path: '/a/5': Unable to access invalid index: 5: invalid index referenced"
        );
    }

    #[test]
    fn replace_quirks() {
        // Replacing a missing member adds it (evanphx/json-patch v4 behaviour).
        assert_eq!(
            ok(
                json!({"a": 1}),
                json!([{"op": "replace", "path": "/b", "value": 2}])
            ),
            json!({"a": 1, "b": 2})
        );
        assert_eq!(
            ok(
                json!({"bar": [{"baz": 1}]}),
                json!([{"op": "replace", "path": "/bar/0/baz", "value": null}])
            ),
            json!({"bar": [{"baz": null}]})
        );
        assert_eq!(
            ok(
                json!({"bar": [null]}),
                json!([{"op": "replace", "path": "/bar/0", "value": 1}])
            ),
            json!({"bar": [1]})
        );
        // Whole-document replace needs an object or array.
        assert_eq!(
            ok(
                json!({"a": 1}),
                json!([{"op": "replace", "path": "", "value": {"b": 2}}])
            ),
            json!({"b": 2})
        );
        assert_eq!(
            err(
                json!({"a": 1}),
                json!([{"op": "replace", "path": "", "value": 3}])
            ),
            "replace operation value must be object or array: %!w(<nil>)"
        );
        // A missing value replaces with null.
        assert_eq!(
            ok(json!({"a": 1}), json!([{"op": "replace", "path": "/a"}])),
            json!({"a": null})
        );
    }

    #[test]
    fn add_and_remove_null_members() {
        assert_eq!(
            ok(
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/baz", "value": null}])
            ),
            json!({"baz": null, "foo": "bar"})
        );
        assert_eq!(
            ok(
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/baz"}])
            ),
            json!({"baz": null, "foo": "bar"})
        );
        assert_eq!(
            ok(
                json!({"foo": "bar", "qux": {"baz": 1, "bar": null}}),
                json!([{"op": "remove", "path": "/qux/bar"}])
            ),
            json!({"foo": "bar", "qux": {"baz": 1}})
        );
        // Adding over an existing member replaces it.
        assert_eq!(
            ok(
                json!({"a": {"x": 1}}),
                json!([{"op": "add", "path": "/a", "value": [1]}])
            ),
            json!({"a": [1]})
        );
    }

    #[test]
    fn copy_operations() {
        assert_eq!(
            ok(
                json!([{"foo": ["bar", "qux", "baz"], "bar": ["qux", "baz"]}]),
                json!([{"op": "copy", "from": "/0/foo/0", "path": "/0/bar/0"}])
            ),
            json!([{"foo": ["bar", "qux", "baz"], "bar": ["bar", "qux", "baz"]}])
        );
        assert_eq!(
            ok(
                json!({"foo": ["bar"]}),
                json!([{"op": "copy", "path": "/foo/0", "from": "/foo"}])
            ),
            json!({"foo": [["bar"], "bar"]})
        );
        // The copy is deep: changing it leaves the source alone.
        assert_eq!(
            ok(
                json!({"a": {"x": 1}}),
                json!([
                    {"op": "copy", "from": "/a", "path": "/b"},
                    {"op": "replace", "path": "/b/x", "value": 2}
                ])
            ),
            json!({"a": {"x": 1}, "b": {"x": 2}})
        );
        // Copying a missing member copies null.
        assert_eq!(
            ok(
                json!({"a": 1}),
                json!([{"op": "copy", "from": "/nope", "path": "/b"}])
            ),
            json!({"a": 1, "b": null})
        );
    }

    #[test]
    fn copy_size_budget() {
        let a48 = "A".repeat(48);
        let doc = json!({"foo": ["A", a48.clone()]});
        let patch = json!([
            {"op": "copy", "path": "/foo/-", "from": "/foo/1"},
            {"op": "copy", "path": "/foo/-", "from": "/foo/1"}
        ]);
        // Each copy adds 50 bytes (the quotes count).
        assert_eq!(
            apply_json_patch_with_copy_limit(&doc, &patch, 100).unwrap(),
            json!({"foo": ["A", a48.clone(), a48.clone(), a48]})
        );
        let doc = json!({"foo": ["A", "A".repeat(49)]});
        assert_eq!(
            apply_json_patch_with_copy_limit(&doc, &patch, 100).unwrap_err(),
            PatchError::JsonPatchFailed(
                "Unable to complete the copy, the accumulated size increase of copy is 102, exceeding the limit 100"
                    .into()
            )
        );
        assert!(apply_json_patch_with_copy_limit(&doc, &patch, 0).is_ok());
        // `{"a":"\u003c\u0026\u003e"}`, as Go marshals it.
        assert_eq!(go_marshal_len(&json!({"a": "<&>"})), 26);
    }

    #[test]
    fn whole_document_test_then_replace() {
        let doc = json!({"id": "0", "parentID": "0"});
        assert_eq!(
            ok(
                doc,
                json!([
                    {"op": "test", "path": "", "value": {"id": "0", "parentID": "0"}},
                    {"op": "replace", "path": "", "value": {"id": "1", "originalID": "bar", "parentID": "0"}}
                ])
            ),
            json!({"id": "1", "originalID": "bar", "parentID": "0"})
        );
    }

    #[test]
    fn input_is_not_mutated() {
        let doc = json!({"a": [1, 2]});
        let patch = json!([{"op": "remove", "path": "/a/0"}]);
        let out = apply_json_patch(&doc, &patch).unwrap();
        assert_eq!(out, json!({"a": [2]}));
        assert_eq!(doc, json!({"a": [1, 2]}));
    }
}
