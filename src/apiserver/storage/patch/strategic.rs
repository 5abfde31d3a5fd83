//! Strategic merge patch application (`application/strategic-merge-patch+json`),
//! following `k8s.io/apimachinery/pkg/util/strategicpatch` as kube-apiserver runs
//! it (`StrategicMergeMapPatch`: parallel lists merged, unmatched nulls ignored).
//!
//! * Maps merge recursively; a `null` value deletes the key.
//! * Lists follow the field's [`ListStrategy`]: merged by key (matched items are
//!   merged recursively, new ones added), merged as a set of scalars, or replaced.
//! * Directives: `$patch: replace | delete | merge` on maps and list items,
//!   `$retainKeys`, `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`.
//! * Fields the schema does not know are plain maps and atomic lists.
//!
//! The result never carries a directive key, nor the `null`s of newly added
//! values. Where apimachinery keeps directives or nulls in a value and relies on
//! the typed decode that follows to drop them, this module drops them itself;
//! where it rejects `$patch: merge` with an untyped error, this module takes it as
//! the default merge; a `$patch: replace` map added where the object has nothing
//! is kept rather than dropped.
//!
//! Pure functions over `serde_json::Value`: no I/O, no store, no HTTP.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::go_fmt::{go_s, go_type, go_v};
use super::{ListStrategy, PatchError, PatchSchema};

const DIRECTIVE_MARKER: &str = "$patch";
const DELETE_DIRECTIVE: &str = "delete";
const REPLACE_DIRECTIVE: &str = "replace";
const MERGE_DIRECTIVE: &str = "merge";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder";

type JsonMap = Map<String, Value>;

/// Applies a strategic merge patch to `doc` (both JSON objects; `null` counts as
/// `{}`) with the field strategies of `schema`.
pub fn apply_strategic_merge_patch(
    doc: &Value,
    patch: &Value,
    schema: &dyn PatchSchema,
) -> Result<Value, PatchError> {
    let original = as_document(doc)?;
    let patch = as_document(patch)?;
    let merger = Merger { schema };
    let mut path = Vec::new();
    merger
        .merge_map(original, patch, &mut path)
        .map(Value::Object)
}

fn as_document(v: &Value) -> Result<JsonMap, PatchError> {
    match v {
        Value::Object(map) => Ok(map.clone()),
        Value::Null => Ok(JsonMap::new()),
        _ => Err(PatchError::BadJsonDoc),
    }
}

fn smp_error(msg: String) -> PatchError {
    PatchError::StrategicMerge(msg)
}

fn no_merge_key(item: &Value, key: &str) -> PatchError {
    smp_error(format!(
        "map: {} does not contain declared merge key: {key}",
        go_v(item)
    ))
}

fn bad_arg_type(expected: &str, actual: &Value) -> PatchError {
    smp_error(format!(
        "expected a {expected}, but received a {}",
        go_type(actual)
    ))
}

fn bad_patch_type(directive: &Value, map: &JsonMap) -> PatchError {
    smp_error(format!(
        "unknown patch type: {} in map: {}",
        go_s(directive),
        go_v(&Value::Object(map.clone()))
    ))
}

/// The element kind of a list, for the type checks and the ordering rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ElemKind {
    Null,
    Bool,
    Int,
    Float,
    String,
    List,
    Map,
}

fn elem_kind(v: &Value) -> ElemKind {
    match v {
        Value::Null => ElemKind::Null,
        Value::Bool(_) => ElemKind::Bool,
        Value::Number(n) if n.is_f64() => ElemKind::Float,
        Value::Number(_) => ElemKind::Int,
        Value::String(_) => ElemKind::String,
        Value::Array(_) => ElemKind::List,
        Value::Object(_) => ElemKind::Map,
    }
}

/// The common element kind of `lists` (`None` when they are all empty); lists of
/// lists and mixed kinds are errors.
fn list_elem_kind(lists: &[&[Value]]) -> Result<Option<ElemKind>, PatchError> {
    let mut kind = None;
    for item in lists.iter().flat_map(|l| l.iter()) {
        let k = elem_kind(item);
        match kind {
            None if k == ElemKind::List => return Err(PatchError::NoListOfLists),
            None => kind = Some(k),
            Some(prev) if prev != k => {
                let all = Value::Array(lists.iter().map(|l| Value::Array(l.to_vec())).collect());
                return Err(smp_error(format!(
                    "list element types are not identical: {}",
                    go_v(&all)
                )));
            }
            Some(_) => {}
        }
    }
    Ok(kind)
}

/// Splits `$deleteFromPrimitiveList/<field>` or `$setElementOrder/<field>`.
fn extract_key<'k>(key: &'k str, prefix: &str) -> Result<&'k str, PatchError> {
    match key.split_once('/') {
        Some((head, field)) if head == prefix => Ok(field),
        _ if prefix == DELETE_FROM_PRIMITIVE_LIST_PREFIX => {
            Err(PatchError::BadPatchFormatForPrimitiveList)
        }
        _ => Err(PatchError::BadPatchFormatForSetElementOrderList),
    }
}

fn is_directive_key(key: &str) -> bool {
    key == DIRECTIVE_MARKER
        || key == RETAIN_KEYS_DIRECTIVE
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
        || key.starts_with(SET_ELEMENT_ORDER_PREFIX)
}

// ---------------------------------------------------------------------------
// Values that land in the result without merging: new fields, new list items,
// replaced lists. Directives are resolved or dropped, nulls in maps dropped.
// ---------------------------------------------------------------------------

/// A new value for a map field: `None` when it must not be set (a `$patch:
/// delete` map, or a `$patch` the server does not know).
fn sanitize_field(value: Value) -> Option<Value> {
    match value {
        Value::Object(map) => {
            match map.get(DIRECTIVE_MARKER).map(Value::as_str) {
                None | Some(Some(REPLACE_DIRECTIVE | MERGE_DIRECTIVE)) => {}
                Some(_) => return None,
            }
            Some(Value::Object(sanitize_map(map)))
        }
        Value::Array(items) => Some(Value::Array(sanitize_list(items))),
        other => Some(other),
    }
}

/// A new list: items carrying a `$patch` directive (list markers, deletions of
/// items that are not there) are dropped, the rest sanitized. `null` items stay.
fn sanitize_list(items: Vec<Value>) -> Vec<Value> {
    items
        .into_iter()
        .filter_map(|item| match item {
            Value::Object(map) if map.contains_key(DIRECTIVE_MARKER) => None,
            Value::Object(map) => Some(Value::Object(sanitize_map(map))),
            Value::Array(inner) => Some(Value::Array(sanitize_list(inner))),
            other => Some(other),
        })
        .collect()
}

fn sanitize_map(map: JsonMap) -> JsonMap {
    let mut out = JsonMap::new();
    let mut orders = Vec::new();
    for (key, value) in map {
        if key.starts_with(SET_ELEMENT_ORDER_PREFIX) {
            if let (Ok(field), Value::Array(order)) =
                (extract_key(&key, SET_ELEMENT_ORDER_PREFIX), value)
            {
                orders.push((field.to_string(), order));
            }
            continue;
        }
        if is_directive_key(&key) || value.is_null() {
            continue;
        }
        if let Some(value) = sanitize_field(value) {
            out.insert(key, value);
        }
    }
    for (field, order) in orders {
        if let Some(Value::Array(list)) = out.get_mut(&field) {
            // Listed items first, in the listed order; the others after them.
            let position = |item: &Value| order.iter().position(|o| order_entry_matches(o, item));
            list.sort_by_key(|item| position(item).unwrap_or(usize::MAX));
        }
    }
    out
}

/// Whether a `$setElementOrder` entry designates `item`: the entry of a map item
/// carries its merge key, so every member of the entry must match.
fn order_entry_matches(entry: &Value, item: &Value) -> bool {
    match (entry, item) {
        (Value::Object(e), Value::Object(i)) => {
            !e.is_empty() && e.iter().all(|(k, v)| i.get(k) == Some(v))
        }
        _ => entry == item,
    }
}

// ---------------------------------------------------------------------------
// Merging.
// ---------------------------------------------------------------------------

struct Merger<'s> {
    schema: &'s dyn PatchSchema,
}

impl Merger<'_> {
    fn list_strategy(&self, path: &[String]) -> ListStrategy {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        self.schema.list_strategy(&path)
    }

    fn replace_map(&self, path: &[String]) -> bool {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        self.schema.replace_map(&path)
    }

    /// Merges `patch` into `original`, the maps found at `path`.
    fn merge_map(
        &self,
        mut original: JsonMap,
        mut patch: JsonMap,
        path: &mut Vec<String>,
    ) -> Result<JsonMap, PatchError> {
        if let Some(directive) = patch.get(DIRECTIVE_MARKER) {
            match directive.as_str() {
                Some(REPLACE_DIRECTIVE) => {
                    patch.remove(DIRECTIVE_MARKER);
                    return Ok(sanitize_map(patch));
                }
                Some(DELETE_DIRECTIVE) => return Ok(JsonMap::new()),
                Some(MERGE_DIRECTIVE) => {
                    patch.remove(DIRECTIVE_MARKER);
                }
                _ => return Err(bad_patch_type(directive, &patch)),
            }
        }

        apply_retain_keys(&mut original, &mut patch)?;
        self.apply_set_element_order(&mut original, &mut patch, path)?;

        for (key, patch_value) in patch {
            let (field, is_delete_list) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX) {
                (
                    extract_key(&key, DELETE_FROM_PRIMITIVE_LIST_PREFIX)?.to_string(),
                    true,
                )
            } else {
                (key, false)
            };

            if patch_value.is_null() {
                original.remove(&field);
                continue;
            }

            let Some(current) = original.get_mut(&field) else {
                if !is_delete_list && let Some(value) = sanitize_field(patch_value) {
                    original.insert(field, value);
                }
                continue;
            };

            path.push(field);
            let outcome = match (current, patch_value) {
                (Value::Object(cur), Value::Object(p)) => {
                    let merged = if self.replace_map(path) {
                        sanitize_map(p)
                    } else {
                        self.merge_map(std::mem::take(cur), p, path)?
                    };
                    Some(Value::Object(merged))
                }
                (Value::Array(cur), Value::Array(p)) => {
                    let strategy = self.list_strategy(path);
                    let merged =
                        self.merge_list(std::mem::take(cur), p, strategy, is_delete_list, path)?;
                    Some(Value::Array(merged))
                }
                (cur, p) if is_delete_list && elem_kind(cur) != elem_kind(&p) => {
                    // A deletion list against a field of another type: nothing to do.
                    Some(std::mem::take(cur))
                }
                (_, p) => sanitize_field(p),
            };
            let field = path.pop().unwrap_or_default();
            match outcome {
                Some(value) => {
                    original.insert(field, value);
                }
                None => {
                    original.remove(&field);
                }
            }
        }
        Ok(original)
    }

    /// `$setElementOrder/<list>`: merges the list now (if the patch has one) and
    /// orders the result by the directive.
    fn apply_set_element_order(
        &self,
        original: &mut JsonMap,
        patch: &mut JsonMap,
        path: &mut Vec<String>,
    ) -> Result<(), PatchError> {
        let keys: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ELEMENT_ORDER_PREFIX))
            .cloned()
            .collect();
        for key in keys {
            let order = match patch.remove(&key) {
                Some(Value::Array(order)) => order,
                Some(other) => return Err(bad_arg_type("[]interface {}", &other)),
                None => continue,
            };
            let field = extract_key(&key, SET_ELEMENT_ORDER_PREFIX)?.to_string();

            let original_list = match original.get(&field) {
                None | Some(Value::Null) => None,
                Some(Value::Array(items)) => Some(items.clone()),
                Some(other) => return Err(bad_arg_type("[]interface {}", other)),
            };
            let patch_list = match patch.get(&field) {
                None | Some(Value::Null) => None,
                Some(Value::Array(items)) => Some(items.clone()),
                Some(other) => return Err(bad_arg_type("[]interface {}", other)),
            };

            path.push(field);
            let strategy = self.list_strategy(path);
            let merge_key = strategy.merge_key();
            let result = (|| {
                validate_patch_with_set_order_list(
                    patch_list.as_deref().unwrap_or_default(),
                    &order,
                    merge_key,
                )?;
                let (merged, aliased) = match (&original_list, patch_list) {
                    (Some(cur), None) => (cur.clone(), None),
                    (None, Some(p)) => (sanitize_list(p), None),
                    (Some(cur), Some(p)) => {
                        self.merge_list_aliased(cur.clone(), p, strategy, false, path)?
                    }
                    (None, None) => return Ok(None),
                };
                let server_order = aliased.or(original_list).unwrap_or_default();
                order_by_set_element_order(merged, &order, &server_order, merge_key).map(Some)
            })();
            let field = path.pop().unwrap_or_default();
            if let Some(ordered) = result? {
                patch.remove(&field);
                original.insert(field, Value::Array(ordered));
            }
        }
        Ok(())
    }

    /// Combines the list at `path` with the patch's list.
    fn merge_list(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        strategy: ListStrategy,
        is_delete_list: bool,
        path: &mut Vec<String>,
    ) -> Result<Vec<Value>, PatchError> {
        self.merge_list_aliased(original, patch, strategy, is_delete_list, path)
            .map(|(merged, _)| merged)
    }

    /// [`Self::merge_list`], also returning, for lists merged by key, what
    /// apimachinery's view of the original list has become (see [`AliasedOriginal`]).
    fn merge_list_aliased(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        strategy: ListStrategy,
        is_delete_list: bool,
        path: &mut Vec<String>,
    ) -> Result<(Vec<Value>, Option<Vec<Value>>), PatchError> {
        let merging = !matches!(strategy, ListStrategy::Atomic);
        if !merging && !is_delete_list {
            return Ok((sanitize_list(patch), None));
        }
        if original.is_empty() && patch.is_empty() {
            return Ok((original, None));
        }
        let kind = list_elem_kind(&[&original, &patch])?;

        if kind != Some(ElemKind::Map) {
            if is_delete_list {
                let kept = original
                    .into_iter()
                    .filter(|v| !patch.contains(v))
                    .collect();
                return Ok((kept, None));
            }
            let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
            for v in original.iter().chain(patch.iter()) {
                if !merged.contains(v) {
                    merged.push(v.clone());
                }
            }
            let (patch_items, server_only): (Vec<Value>, Vec<Value>) =
                merged.into_iter().partition(|v| patch.contains(v));
            let ordered =
                normalize_element_order(patch_items, server_only, &patch, &original, None);
            return Ok((ordered, None));
        }

        let Some(key) = strategy.merge_key() else {
            return Err(smp_error(format!(
                "cannot merge lists without merge key for {}",
                path.join(".")
            )));
        };
        let mut aliased = AliasedOriginal::new(&original);
        let (original, patch, replaced) =
            merge_slice_with_special_elements(&mut aliased, patch, key)?;
        let mut merged = original.clone();
        for item in &patch {
            let Value::Object(item_map) = item else {
                continue;
            };
            let Some(wanted) = item_map.get(key) else {
                return Err(no_merge_key(item, key));
            };
            match find_by_key(&merged, key, wanted)? {
                Some(idx) => {
                    let cur = match std::mem::take(&mut merged[idx]) {
                        Value::Object(m) => m,
                        _ => JsonMap::new(),
                    };
                    merged[idx] = Value::Object(self.merge_map(cur, item_map.clone(), path)?);
                }
                None => {
                    if let Some(new_item) = sanitize_field(item.clone()) {
                        if !replaced {
                            aliased.append(&new_item);
                        }
                        merged.push(new_item);
                    }
                }
            }
        }
        let (patch_items, server_only) = partition_maps(merged, &patch, key)?;
        check_merge_keys(&patch_items, key)?;
        check_merge_keys(&patch, key)?;
        check_merge_keys(&server_only, key)?;
        check_merge_keys(&original, key)?;
        let ordered =
            normalize_element_order(patch_items, server_only, &patch, &original, Some(key));
        Ok((ordered, Some(aliased.slots)))
    }
}

/// apimachinery merges a list of maps in place: a `$patch: delete` shifts the
/// later items left inside the original list's backing array, and new items are
/// appended into it. The caller's view of the original list (its first `len`
/// slots) therefore ends up holding the surviving items followed by the first new
/// ones, and that view is the "server order" `$setElementOrder` later sorts
/// server-only items by. Upstream's expected results depend on it (e.g. a patch
/// that deletes one container and adds another, next to a server-only sidecar),
/// so it is reproduced here.
struct AliasedOriginal {
    slots: Vec<Value>,
    len: usize,
}

impl AliasedOriginal {
    fn new(original: &[Value]) -> Self {
        Self {
            slots: original.to_vec(),
            len: original.len(),
        }
    }

    /// Removes every item whose `key` is `wanted`, shifting in place.
    fn delete(&mut self, key: &str, wanted: &Value) {
        while let Some(idx) = self.slots[..self.len]
            .iter()
            .position(|v| v.get(key) == Some(wanted))
        {
            // Like Go's `append(s[:idx], s[idx+1:]...)`: the last slot keeps its value.
            for from in idx + 1..self.len {
                self.slots[from - 1] = self.slots[from].clone();
            }
            self.len -= 1;
        }
    }

    fn append(&mut self, item: &Value) {
        if self.len < self.slots.len() {
            self.slots[self.len] = item.clone();
        }
        self.len += 1;
    }

    fn live(&self) -> Vec<Value> {
        self.slots[..self.len.min(self.slots.len())].to_vec()
    }
}

/// `$retainKeys`: every key the patch sets must be listed; keys of the original
/// that are not listed are cleared.
fn apply_retain_keys(original: &mut JsonMap, patch: &mut JsonMap) -> Result<(), PatchError> {
    let Some(retain) = patch.remove(RETAIN_KEYS_DIRECTIVE) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(PatchError::BadPatchFormatForRetainKeys);
    };
    let retained = |k: &str| retain.iter().any(|r| r.as_str() == Some(k));
    for (key, value) in patch.iter() {
        if value.is_null()
            || key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
            || key.starts_with(SET_ELEMENT_ORDER_PREFIX)
        {
            continue;
        }
        if !retained(key) {
            return Err(PatchError::BadPatchFormatForRetainKeys);
        }
    }
    original.retain(|k, _| retained(k));
    Ok(())
}

/// Items with `$patch` in a merging list of maps: `delete` removes the matching
/// items from the original, `replace` makes the other patch items the whole list,
/// `merge` is the default. Returns the list to merge into, the patch items left to
/// merge, and whether the list was replaced.
fn merge_slice_with_special_elements(
    original: &mut AliasedOriginal,
    patch: Vec<Value>,
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>, bool), PatchError> {
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in patch {
        let Value::Object(mut map) = item else {
            plain.push(item);
            continue;
        };
        let Some(directive) = map.get(DIRECTIVE_MARKER) else {
            plain.push(Value::Object(map));
            continue;
        };
        match directive.as_str() {
            Some(DELETE_DIRECTIVE) => {
                let Some(wanted) = map.get(key) else {
                    return Err(no_merge_key(&Value::Object(map), key));
                };
                if let Some(idx) = original.live().iter().position(|c| !c.is_object()) {
                    return Err(smp_error(format!("value for key {idx} is not a map")));
                }
                original.delete(key, wanted);
            }
            Some(REPLACE_DIRECTIVE) => replace = true,
            Some(MERGE_DIRECTIVE) => {
                map.remove(DIRECTIVE_MARKER);
                if !map.is_empty() {
                    plain.push(Value::Object(map));
                }
            }
            _ => return Err(bad_patch_type(directive, &map)),
        }
    }
    if replace {
        return Ok((sanitize_list(plain), Vec::new(), true));
    }
    Ok((original.live(), plain, false))
}

/// Index of the map in `list` whose `key` equals `wanted`.
fn find_by_key(list: &[Value], key: &str, wanted: &Value) -> Result<Option<usize>, PatchError> {
    for (idx, item) in list.iter().enumerate() {
        let Value::Object(map) = item else {
            return Err(smp_error(format!("value for key {idx} is not a map")));
        };
        if map.get(key) == Some(wanted) {
            return Ok(Some(idx));
        }
    }
    Ok(None)
}

fn check_merge_keys(list: &[Value], key: &str) -> Result<(), PatchError> {
    for item in list {
        match item {
            Value::Object(map) if map.contains_key(key) => {}
            Value::Object(_) => return Err(no_merge_key(item, key)),
            other => return Err(bad_arg_type("map[string]interface {}", other)),
        }
    }
    Ok(())
}

/// Splits `merged` into the items designated by `by` (by merge key) and the rest.
fn partition_maps(
    merged: Vec<Value>,
    by: &[Value],
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut inside = Vec::with_capacity(merged.len());
    let mut outside = Vec::with_capacity(merged.len());
    for item in merged {
        let Value::Object(map) = &item else {
            return Err(bad_arg_type("map[string]interface {}", &item));
        };
        let Some(wanted) = map.get(key) else {
            return Err(no_merge_key(&item, key));
        };
        if find_by_key(by, key, wanted)?.is_some() {
            inside.push(item);
        } else {
            outside.push(item);
        }
    }
    Ok((inside, outside))
}

/// Orders a merged list by `$setElementOrder`: the listed items in the listed
/// order, the server-only items interleaved where the original list had them.
fn order_by_set_element_order(
    merged: Vec<Value>,
    order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>, PatchError> {
    let is_map_list = merged.iter().chain(server_order).any(Value::is_object);
    let (listed, server_only) = match key {
        Some(key) if is_map_list => {
            let (listed, server_only) = partition_maps(merged, order, key)?;
            check_merge_keys(order, key)?;
            check_merge_keys(server_order, key)?;
            (listed, server_only)
        }
        _ => merged.into_iter().partition(|v| order.contains(v)),
    };
    let key = key.filter(|_| is_map_list);
    Ok(normalize_element_order(
        listed,
        server_only,
        order,
        server_order,
        key,
    ))
}

/// Sorts `patch_items` by `patch_order` and `server_only` by `server_order`, then
/// interleaves them: a server-only item goes before a patch item when the original
/// list had it before that item; otherwise patch items come first.
fn normalize_element_order(
    mut patch_items: Vec<Value>,
    mut server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    sort_by_order(&mut patch_items, patch_order, key);
    sort_by_order(&mut server_only, server_order, key);
    merge_sorted(server_only, patch_items, server_order, key)
}

/// Position of `item` in `list`, by merge key for maps.
fn index_of(list: &[Value], item: &Value, key: Option<&str>) -> Option<usize> {
    match key {
        Some(key) => {
            let wanted = item.get(key);
            list.iter().position(|v| v.get(key) == wanted)
        }
        None => list.iter().position(|v| v == item),
    }
}

fn sort_by_order(items: &mut [Value], order: &[Value], key: Option<&str>) {
    // Stable; `$patch: delete` items (never in the result) would sort last.
    items.sort_by(|a, b| {
        let deleted =
            |v: &Value| v.get(DIRECTIVE_MARKER).and_then(Value::as_str) == Some(DELETE_DIRECTIVE);
        match (deleted(a), deleted(b)) {
            (false, true) => return Ordering::Less,
            (true, false) => return Ordering::Greater,
            _ => {}
        }
        match (index_of(order, a, key), index_of(order, b, key)) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        }
    });
}

fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (index_of(server_order, l, key), index_of(server_order, r, key)),
                (Some(li), Some(ri)) if li < ri
            ),
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

/// The patch list's items (deletions aside) must appear in the same relative
/// order in the `$setElementOrder` list.
fn validate_patch_with_set_order_list(
    patch_list: &[Value],
    order: &[Value],
    key: Option<&str>,
) -> Result<(), PatchError> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = match key {
        Some(_) => {
            let mut kept = Vec::with_capacity(patch_list.len());
            for item in patch_list {
                let Value::Object(map) = item else {
                    return Err(bad_arg_type("map[string]interface {}", item));
                };
                if map.get(DIRECTIVE_MARKER).and_then(Value::as_str) != Some(DELETE_DIRECTIVE) {
                    kept.push(item);
                }
            }
            kept
        }
        None => patch_list.iter().collect(),
    };
    let (mut pi, mut oi) = (0, 0);
    while pi < non_delete.len() && oi < order.len() {
        let item = non_delete[pi];
        if item.get(DIRECTIVE_MARKER).is_some() {
            pi += 1;
            continue;
        }
        let equal = match key {
            None => item == &order[oi],
            Some(key) => {
                let theirs = match &order[oi] {
                    Value::Object(m) => m.get(key).ok_or_else(|| no_merge_key(&order[oi], key))?,
                    other => return Err(bad_arg_type("map[string]interface {}", other)),
                };
                let ours = item.get(key).ok_or_else(|| no_merge_key(item, key))?;
                ours == theirs
            }
        };
        if equal {
            pi += 1;
        }
        oi += 1;
    }
    if pi < non_delete.len() && oi >= order.len() {
        return Err(smp_error(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER_PREFIX} list:\n{}\n",
            go_v(&Value::Array(patch_list.to_vec())),
            go_v(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The schema of apimachinery's own tests (`MergeItem`), by field name.
    struct MergeItemSchema;

    impl PatchSchema for MergeItemSchema {
        fn list_strategy(&self, path: &[&str]) -> ListStrategy {
            match path.last().copied() {
                Some("mergingList" | "retainKeysMergingList" | "mergeItemPtr") => {
                    ListStrategy::MergeByKey("name")
                }
                Some("mergingIntList") => ListStrategy::MergePrimitives,
                _ => ListStrategy::Atomic,
            }
        }
        fn retain_keys(&self, path: &[&str]) -> bool {
            matches!(
                path.last().copied(),
                Some("retainKeysMap" | "retainKeysMergingList")
            )
        }
        fn replace_map(&self, path: &[&str]) -> bool {
            path.last() == Some(&"replacingItem")
        }
    }

    /// No strategies at all: every list atomic, every map merged.
    struct PlainSchema;

    impl PatchSchema for PlainSchema {
        fn list_strategy(&self, _: &[&str]) -> ListStrategy {
            ListStrategy::Atomic
        }
        fn retain_keys(&self, _: &[&str]) -> bool {
            false
        }
    }

    fn smp(doc: Value, patch: Value) -> Result<Value, PatchError> {
        apply_strategic_merge_patch(&doc, &patch, &MergeItemSchema)
    }

    fn ok(doc: Value, patch: Value) -> Value {
        smp(doc, patch).expect("patch should apply")
    }

    #[test]
    fn maps_merge_and_null_deletes() {
        assert_eq!(
            ok(
                json!({"a": {"b": 1, "c": 2}, "d": 3}),
                json!({"a": {"c": null, "e": 4}, "d": null})
            ),
            json!({"a": {"b": 1, "e": 4}})
        );
        assert_eq!(
            ok(json!({"a": 1}), json!({"missing": null})),
            json!({"a": 1})
        );
        assert_eq!(ok(json!({"a": 1}), json!({})), json!({"a": 1}));
        assert_eq!(ok(json!({"a": 1}), Value::Null), json!({"a": 1}));
    }

    #[test]
    fn new_values_drop_nulls_but_keep_null_list_items() {
        assert_eq!(
            apply_strategic_merge_patch(
                &json!({}),
                &json!({"c": {"k": null, "j": "v"}, "l": [{"i": {"x": "foo", "y": null}}], "s": ["a", null]}),
                &PlainSchema
            )
            .unwrap(),
            json!({"c": {"j": "v"}, "l": [{"i": {"x": "foo"}}], "s": ["a", null]})
        );
        // Nulls already in the object stay.
        assert_eq!(
            apply_strategic_merge_patch(
                &json!({"thing": null}),
                &json!({"n": {"v": 5}}),
                &PlainSchema
            )
            .unwrap(),
            json!({"n": {"v": 5}, "thing": null})
        );
    }

    #[test]
    fn type_changes_replace() {
        assert_eq!(
            ok(json!({"a": "x"}), json!({"a": {"b": 1}})),
            json!({"a": {"b": 1}})
        );
        assert_eq!(
            ok(json!({"a": {"b": 1}}), json!({"a": [1]})),
            json!({"a": [1]})
        );
        assert_eq!(
            ok(json!({"a": null}), json!({"a": {"b": null, "c": 1}})),
            json!({"a": {"c": 1}})
        );
        assert_eq!(ok(json!({"a": 1}), json!({"a": 1.5})), json!({"a": 1.5}));
    }

    #[test]
    fn atomic_lists_replace() {
        assert_eq!(
            ok(
                json!({"nonMergingList": [{"name": "a"}, {"name": "b"}]}),
                json!({"nonMergingList": [{"name": "c"}]})
            ),
            json!({"nonMergingList": [{"name": "c"}]})
        );
        assert_eq!(
            ok(
                json!({"nonMergingIntList": [1, 2]}),
                json!({"nonMergingIntList": [3]})
            ),
            json!({"nonMergingIntList": [3]})
        );
        assert_eq!(
            ok(
                json!({"nonMergingIntList": [1, 2]}),
                json!({"nonMergingIntList": []})
            ),
            json!({"nonMergingIntList": []})
        );
    }

    #[test]
    fn merging_list_by_key() {
        let doc =
            json!({"mergingList": [{"name": "1", "value": "a"}, {"name": "2", "value": "b"}]});
        assert_eq!(
            ok(
                doc.clone(),
                json!({"mergingList": [{"name": "2", "value": "c", "other": "x"}]})
            ),
            json!({"mergingList": [{"name": "1", "value": "a"}, {"name": "2", "value": "c", "other": "x"}]})
        );
        // New items come before the untouched ones unless an order is given.
        assert_eq!(
            ok(doc.clone(), json!({"mergingList": [{"name": "3"}]})),
            json!({"mergingList": [{"name": "3"}, {"name": "1", "value": "a"}, {"name": "2", "value": "b"}]})
        );
        // Fields of matched items can be deleted with null.
        assert_eq!(
            ok(doc, json!({"mergingList": [{"name": "1", "value": null}]})),
            json!({"mergingList": [{"name": "1"}, {"name": "2", "value": "b"}]})
        );
    }

    #[test]
    fn merging_list_delete_and_replace_directives() {
        let doc =
            json!({"mergingList": [{"name": "1"}, {"name": "2"}, {"name": "1", "dup": true}]});
        assert_eq!(
            ok(
                doc.clone(),
                json!({"mergingList": [{"$patch": "delete", "name": "1"}]})
            ),
            json!({"mergingList": [{"name": "2"}]})
        );
        // Deleting an item that is not there is a no-op.
        assert_eq!(
            ok(
                json!({"mergingList": [{"name": "2"}]}),
                json!({"mergingList": [{"$patch": "delete", "name": "9"}]})
            ),
            json!({"mergingList": [{"name": "2"}]})
        );
        assert_eq!(
            ok(
                doc,
                json!({"mergingList": [{"$patch": "replace"}, {"name": "3", "x": null}]})
            ),
            json!({"mergingList": [{"name": "3"}]})
        );
        assert_eq!(
            ok(
                json!({"mergingList": [{"name": "1"}]}),
                json!({"mergingList": [{"$patch": "replace"}]})
            ),
            json!({"mergingList": []})
        );
        // `$patch: merge` is the default behaviour.
        assert_eq!(
            ok(
                json!({"mergingList": [{"name": "1", "a": 1}]}),
                json!({"mergingList": [{"$patch": "merge", "name": "1", "b": 2}, {"$patch": "merge"}]})
            ),
            json!({"mergingList": [{"name": "1", "a": 1, "b": 2}]})
        );
    }

    #[test]
    fn map_directives() {
        let doc = json!({"m": {"a": 1, "b": {"c": 2}}, "k": 1});
        assert_eq!(
            ok(
                doc.clone(),
                json!({"m": {"$patch": "replace", "z": 9, "n": null}})
            ),
            json!({"m": {"z": 9}, "k": 1})
        );
        assert_eq!(
            ok(doc.clone(), json!({"m": {"$patch": "delete"}})),
            json!({"m": {}, "k": 1})
        );
        assert_eq!(
            ok(doc.clone(), json!({"m": {"$patch": "merge", "a": 2}})),
            json!({"m": {"a": 2, "b": {"c": 2}}, "k": 1})
        );
        // On a field the object does not have: delete adds nothing, replace sets.
        assert_eq!(ok(doc.clone(), json!({"x": {"$patch": "delete"}})), doc);
        assert_eq!(
            ok(json!({}), json!({"x": {"$patch": "replace", "a": 1}})),
            json!({"x": {"a": 1}})
        );
        // At the top level.
        assert_eq!(
            ok(doc.clone(), json!({"$patch": "replace", "q": 1})),
            json!({"q": 1})
        );
        assert_eq!(ok(doc.clone(), json!({"$patch": "delete"})), json!({}));
        let e = smp(doc, json!({"m": {"$patch": "frob"}})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown patch type: frob in map: map[$patch:frob]"
        );
        assert_eq!(e.status_code(), 500);
        let e = smp(
            json!({"mergingList": [{"name": "1"}]}),
            json!({"mergingList": [{"$patch": "frob", "name": "1"}]}),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown patch type: frob in map: map[$patch:frob name:1]"
        );
    }

    #[test]
    fn replace_strategy_map() {
        assert_eq!(
            ok(
                json!({"replacingItem": {"a": 1, "b": 2}}),
                json!({"replacingItem": {"c": 3}})
            ),
            json!({"replacingItem": {"c": 3}})
        );
    }

    #[test]
    fn primitive_lists() {
        assert_eq!(
            ok(
                json!({"mergingIntList": [1, 2]}),
                json!({"mergingIntList": [2, 3]})
            ),
            json!({"mergingIntList": [1, 2, 3]})
        );
        assert_eq!(
            ok(
                json!({"mergingIntList": [1, 2, 2]}),
                json!({"mergingIntList": [3]})
            ),
            json!({"mergingIntList": [3, 1, 2]})
        );
        assert_eq!(
            ok(
                json!({"mergingIntList": [1, 2, 3]}),
                json!({"$deleteFromPrimitiveList/mergingIntList": [2, 9]})
            ),
            json!({"mergingIntList": [1, 3]})
        );
        // Deletion lists work on atomic lists too, and never add anything.
        assert_eq!(
            ok(
                json!({"nonMergingIntList": [1, 2, 3]}),
                json!({"$deleteFromPrimitiveList/nonMergingIntList": [2]})
            ),
            json!({"nonMergingIntList": [1, 3]})
        );
        assert_eq!(
            ok(
                json!({"foo": ["bar"]}),
                json!({"$deleteFromPrimitiveList/mergingIntList": [3]})
            ),
            json!({"foo": ["bar"]})
        );
        assert_eq!(
            ok(
                json!({"mergingIntList": null}),
                json!({"$deleteFromPrimitiveList/mergingIntList": [3]})
            ),
            json!({"mergingIntList": null})
        );
    }

    #[test]
    fn set_element_order_on_lists_of_maps() {
        let doc = json!({"mergingList": [{"name": "1", "other": "a"}, {"name": "2", "value": "2", "other": "b"}]});
        assert_eq!(
            ok(
                doc.clone(),
                json!({
                    "$setElementOrder/mergingList": [{"name": "3"}, {"name": "1"}, {"name": "2"}],
                    "mergingList": [{"name": "3", "value": "3"}]
                })
            ),
            json!({"mergingList": [
                {"name": "3", "value": "3"},
                {"name": "1", "other": "a"},
                {"name": "2", "value": "2", "other": "b"}
            ]})
        );
        // Reorder without changes.
        assert_eq!(
            ok(
                doc,
                json!({"$setElementOrder/mergingList": [{"name": "2"}, {"name": "1"}]})
            ),
            json!({"mergingList": [{"name": "2", "value": "2", "other": "b"}, {"name": "1", "other": "a"}]})
        );
    }

    #[test]
    fn set_element_order_with_server_only_items() {
        let doc = json!({"mergingList": [{"name": "1"}, {"name": "4"}, {"name": "2"}]});
        assert_eq!(
            ok(
                doc,
                json!({"$setElementOrder/mergingList": [{"name": "2"}, {"name": "1"}], "mergingList": [{"name": "2", "v": 2}]})
            ),
            json!({"mergingList": [{"name": "4"}, {"name": "2", "v": 2}, {"name": "1"}]})
        );
        // Primitive list: 4 is server-only and stays after 1.
        assert_eq!(
            ok(
                json!({"mergingIntList": [1, 4, 2]}),
                json!({"$setElementOrder/mergingIntList": [3, 1, 2], "mergingIntList": [3]})
            ),
            json!({"mergingIntList": [3, 1, 4, 2]})
        );
    }

    #[test]
    fn set_element_order_for_new_list() {
        assert_eq!(
            ok(
                json!({}),
                json!({
                    "$setElementOrder/mergingList": [{"name": "b"}, {"name": "c"}, {"name": "a"}],
                    "mergingList": [{"name": "b", "x": null}, {"name": "z", "$patch": "delete"}, {"name": "a"}]
                })
            ),
            json!({"mergingList": [{"name": "b"}, {"name": "a"}]})
        );
        // Only an order: nothing to create.
        assert_eq!(
            ok(
                json!({"x": 1}),
                json!({"$setElementOrder/mergingList": [{"name": "b"}]})
            ),
            json!({"x": 1})
        );
    }

    #[test]
    fn set_element_order_errors() {
        let e = smp(
            json!({"mergingList": [{"name": "1"}, {"name": "3"}, {"name": "2"}]}),
            json!({
                "$setElementOrder/mergingList": [{"name": "1"}, {"name": "2"}, {"name": "3"}],
                "mergingList": [{"name": "3", "value": "3"}, {"name": "1", "value": "1"}]
            }),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("doesn't match $setElementOrder list"),
            "{e}"
        );
        assert_eq!(
            smp(json!({}), json!({"$setElementOrderx/mergingList": []})).unwrap_err(),
            PatchError::BadPatchFormatForSetElementOrderList
        );
        assert_eq!(
            smp(json!({}), json!({"$setElementOrder/mergingList": "x"}))
                .unwrap_err()
                .to_string(),
            "expected a []interface {}, but received a string"
        );
    }

    #[test]
    fn retain_keys_directive() {
        let doc = json!({"retainKeysMap": {"name": "foo", "value": "a", "other": "b"}});
        assert_eq!(
            ok(
                doc.clone(),
                json!({"retainKeysMap": {"$retainKeys": ["name", "value"], "value": "c"}})
            ),
            json!({"retainKeysMap": {"name": "foo", "value": "c"}})
        );
        // Null values need not be listed.
        assert_eq!(
            ok(
                doc.clone(),
                json!({"retainKeysMap": {"$retainKeys": ["name"], "other": null}})
            ),
            json!({"retainKeysMap": {"name": "foo"}})
        );
        assert_eq!(
            smp(
                doc.clone(),
                json!({"retainKeysMap": {"$retainKeys": ["name"], "value": "x"}})
            )
            .unwrap_err(),
            PatchError::BadPatchFormatForRetainKeys
        );
        assert_eq!(
            smp(doc, json!({"retainKeysMap": {"$retainKeys": "name"}})).unwrap_err(),
            PatchError::BadPatchFormatForRetainKeys
        );
        // In list items.
        assert_eq!(
            ok(
                json!({"retainKeysMergingList": [{"name": "a", "value": 1, "other": 2}, {"name": "b", "value": 3}]}),
                json!({"retainKeysMergingList": [{"$retainKeys": ["name", "other"], "name": "a", "other": 5}]})
            ),
            json!({"retainKeysMergingList": [{"name": "a", "other": 5}, {"name": "b", "value": 3}]})
        );
        // On a field the object lacks, the directive is just dropped.
        assert_eq!(
            ok(
                json!({}),
                json!({"retainKeysMap": {"$retainKeys": ["name"], "name": "x"}})
            ),
            json!({"retainKeysMap": {"name": "x"}})
        );
    }

    #[test]
    fn merge_key_errors() {
        let e = smp(
            json!({"mergingList": [{"name": 1, "value": "a"}]}),
            json!({"mergingList": [{"value": "b"}]}),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "map: map[value:b] does not contain declared merge key: name"
        );
        assert_eq!(e.status_code(), 500);
        let e = smp(
            json!({"mergingList": [{"name": 1}]}),
            json!({"mergingList": [{"$patch": "delete"}]}),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "map: map[$patch:delete] does not contain declared merge key: name"
        );
    }

    #[test]
    fn list_type_errors() {
        assert_eq!(
            smp(
                json!({"mergingIntList": [[1]]}),
                json!({"mergingIntList": [[2]]})
            )
            .unwrap_err(),
            PatchError::NoListOfLists
        );
        let e = smp(
            json!({"mergingIntList": [1]}),
            json!({"mergingIntList": ["a"]}),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "list element types are not identical: [[1] [a]]"
        );
        let e = smp(
            json!({"x": [{"a": 1}]}),
            json!({"$deleteFromPrimitiveList/x": [{"a": 1}]}),
        );
        assert!(e.is_err());
    }

    #[test]
    fn directive_key_errors() {
        assert_eq!(
            smp(json!({}), json!({"$deleteFromPrimitiveList": [1]})).unwrap_err(),
            PatchError::BadPatchFormatForPrimitiveList
        );
        assert_eq!(
            smp(json!({}), json!({"$deleteFromPrimitiveListx/a": [1]})).unwrap_err(),
            PatchError::BadPatchFormatForPrimitiveList
        );
        assert_eq!(
            smp(json!("x"), json!({})).unwrap_err(),
            PatchError::BadJsonDoc
        );
        assert_eq!(
            smp(json!({}), json!([1])).unwrap_err(),
            PatchError::BadJsonDoc
        );
    }

    #[test]
    fn no_directive_leaks_into_new_values() {
        let out = ok(
            json!({}),
            json!({"a": {
                "$retainKeys": ["mergingList"],
                "$setElementOrder/mergingList": [{"name": "y"}, {"name": "x"}],
                "$deleteFromPrimitiveList/mergingIntList": [1],
                "mergingList": [{"name": "x"}, {"name": "y", "$patch": "delete"}, {"name": "y"}],
                "nested": [{"deep": {"$patch": "replace", "k": 1}}]
            }}),
        );
        assert_eq!(
            out,
            json!({"a": {"mergingList": [{"name": "y"}, {"name": "x"}], "nested": [{"deep": {"k": 1}}]}})
        );
        fn has_directive(v: &Value) -> bool {
            match v {
                Value::Object(m) => m
                    .iter()
                    .any(|(k, v)| k.starts_with('$') || has_directive(v)),
                Value::Array(items) => items.iter().any(has_directive),
                _ => false,
            }
        }
        assert!(!has_directive(&out));
    }

    #[test]
    fn unknown_fields_with_plain_schema() {
        let doc = json!({"array": [1, 2, 3], "complex": {"nested": true}, "name": "foo"});
        assert_eq!(
            apply_strategic_merge_patch(
                &doc,
                &json!({"array": [4], "complex": {"more": 1}}),
                &PlainSchema
            )
            .unwrap(),
            json!({"array": [4], "complex": {"nested": true, "more": 1}, "name": "foo"})
        );
        assert_eq!(
            apply_strategic_merge_patch(
                &doc,
                &json!({"complex": null, "scalar": null}),
                &PlainSchema
            )
            .unwrap(),
            json!({"array": [1, 2, 3], "name": "foo"})
        );
        // Merging lists of maps needs a merge key.
        let e = apply_strategic_merge_patch(
            &json!({"l": [{"a": 1}]}),
            &json!({"$deleteFromPrimitiveList/l": [{"a": 1}]}),
            &PlainSchema,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "cannot merge lists without merge key for l");
    }

    #[test]
    fn input_is_not_mutated() {
        let doc = json!({"mergingList": [{"name": "1", "v": 1}]});
        let patch = json!({"mergingList": [{"name": "1", "v": 2}]});
        let out = apply_strategic_merge_patch(&doc, &patch, &MergeItemSchema).unwrap();
        assert_eq!(out, json!({"mergingList": [{"name": "1", "v": 2}]}));
        assert_eq!(doc, json!({"mergingList": [{"name": "1", "v": 1}]}));
    }

    #[test]
    fn set_element_order_sees_the_list_as_apimachinery_left_it() {
        // Deleting "1" and adding "3" while "4" is server-only: apimachinery's view
        // of the original list becomes [2, 4, 3], so "4" lands before "3".
        assert_eq!(
            ok(
                json!({"mergingList": [{"name": 1}, {"name": 2, "other": "b"}, {"name": 4, "other": "c"}]}),
                json!({
                    "$setElementOrder/mergingList": [{"name": 2}, {"name": 3}],
                    "mergingList": [{"name": 3}, {"$patch": "delete", "name": 1}]
                })
            ),
            json!({"mergingList": [{"name": 2, "other": "b"}, {"name": 4, "other": "c"}, {"name": 3}]})
        );
        assert_eq!(
            ok(
                json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 4, "other": "c"}]}),
                json!({
                    "$setElementOrder/mergingList": [{"name": 2}, {"name": 3}],
                    "mergingList": [{"name": 2}, {"name": 3}, {"$patch": "delete", "name": 1}]
                })
            ),
            json!({"mergingList": [{"name": 4, "other": "c"}, {"name": 2}, {"name": 3}]})
        );
        let mut aliased =
            AliasedOriginal::new(&[json!({"k": 1}), json!({"k": 2}), json!({"k": 3})]);
        aliased.delete("k", &json!(3));
        assert_eq!(aliased.live(), [json!({"k": 1}), json!({"k": 2})]);
        aliased.delete("k", &json!(1));
        assert_eq!(
            aliased.slots,
            [json!({"k": 2}), json!({"k": 2}), json!({"k": 3})]
        );
        aliased.append(&json!({"k": 9}));
        aliased.append(&json!({"k": 8}));
        aliased.append(&json!({"k": 7}));
        assert_eq!(
            aliased.slots,
            [json!({"k": 2}), json!({"k": 9}), json!({"k": 8})]
        );
    }

    #[test]
    fn nested_merging_lists() {
        let doc = json!({"mergingList": [
            {"name": "1", "mergingList": [{"name": "a", "value": 1}, {"name": "b", "value": 2}]},
            {"name": "2"}
        ]});
        assert_eq!(
            ok(
                doc,
                json!({"mergingList": [{"name": "1", "mergingList": [{"name": "b", "value": 3}, {"name": "a", "$patch": "delete"}]}]})
            ),
            json!({"mergingList": [
                {"name": "1", "mergingList": [{"name": "b", "value": 3}]},
                {"name": "2"}
            ]})
        );
    }
}
