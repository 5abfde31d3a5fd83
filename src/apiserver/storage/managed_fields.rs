//! Server-side apply: field ownership (`metadata.managedFields`) and the apply merge.
//!
//! Owns: the FieldsV1 set format, computing which fields an applied configuration or
//! an update touches, the structured merge of an applied configuration into the live
//! object (maps merge, associative lists merge by key, atomic lists replace), pruning
//! of fields an applier stopped applying, conflict detection with kube-apiserver's
//! messages, and the managedFields bookkeeping of Apply and Update operations
//! (ordering, timestamps, the 10-updater cap, the client-side-apply upgrade path).
//!
//! Everything here is a pure function over `serde_json::Value`: this module may not
//! touch the store, HTTP, clocks or the per-kind schema (list merge keys arrive through
//! the [`ListKeys`] trait object; the current time arrives as a string).
//!
//! The algorithms follow sigs.k8s.io/structured-merge-diff (merge, compare,
//! ToFieldSet, RemoveItems, the prune/add-back steps of `merge.Updater`) and
//! k8s.io/apimachinery `pkg/util/managedfields/internal` (strip-meta, skip-non-applied
//! "before-first-apply", cap-managers "ancient-changes", last-applied upgrade, entry
//! sorting). Without a full OpenAPI schema, every JSON object is treated as a struct
//! (granular, its named fields tracked), unless [`ListKeys::is_atomic_map`] says so.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};

use crate::names::go_quote;

use serde_json::{Map, Value};

/// The annotation kubectl's client-side apply keeps the last applied configuration in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// kube's `FieldManagerMaxLength`.
const FIELD_MANAGER_MAX_LENGTH: usize = 128;
/// kube's `DefaultMaxUpdateManagers`.
const MAX_UPDATE_MANAGERS: usize = 10;
/// kube's `TotalAnnotationSizeLimitB`.
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;
const BEFORE_FIRST_APPLY: &str = "before-first-apply";
const ANCIENT_CHANGES: &str = "ancient-changes";
/// The manager kube's last-applied upgrade path is reserved for.
const KUBECTL_SSA_MANAGER: &str = "kubectl";

// ---------------------------------------------------------------------------------
// Schema lookup
// ---------------------------------------------------------------------------------

/// Per-kind list semantics, supplied by the module that owns the schemas.
///
/// `path` is the field names from the object root with list indices omitted, e.g.
/// `["spec","template","spec","containers"]`. Where an implementation answers
/// `None`/`false`, ObjectMeta's lists (at the root and under `template`) still follow
/// ObjectMeta's schema: `metadata.finalizers` is a set, `metadata.ownerReferences` is
/// keyed by `uid`.
pub trait ListKeys {
    /// `Some(key field names)` for associative lists (`["name"]`,
    /// `["containerPort","protocol"]`), `None` for atomic lists.
    fn list_keys(&self, path: &[&str]) -> Option<Vec<&'static str>>;
    /// True for set-like lists of scalars (`metadata.finalizers`).
    fn is_set(&self, path: &[&str]) -> bool;
    /// True for maps/structs that are atomic (`x-kubernetes-map-type: atomic`,
    /// `+structType=atomic`, e.g. a Deployment's `spec.selector`): they are owned and
    /// replaced as a whole. Default: every map is granular.
    fn is_atomic_map(&self, _path: &[&str]) -> bool {
        false
    }
    /// The schema default of a key field an associative list item omits. Default:
    /// `protocol` defaults to `"TCP"` (container, service and endpoint ports).
    fn key_default(&self, _path: &[&str], field: &str) -> Option<Value> {
        (field == "protocol").then(|| Value::from("TCP"))
    }
    /// True when `status` is a separate subresource, so writes to the main resource
    /// never own (or change) `status`. Default: true.
    fn status_subresource(&self) -> bool {
        true
    }
}

/// Every list is atomic, except ObjectMeta's own lists (`metadata.finalizers` is a
/// set, `metadata.ownerReferences` is keyed by `uid`), which kube types for custom
/// resources too. Used for custom resources without `x-kubernetes-list-type` info.
pub struct NoKeys;

impl ListKeys for NoKeys {
    fn list_keys(&self, _path: &[&str]) -> Option<Vec<&'static str>> {
        None
    }
    fn is_set(&self, _path: &[&str]) -> bool {
        false
    }
}

// ---------------------------------------------------------------------------------
// Path elements and field sets
// ---------------------------------------------------------------------------------

/// One step of a field path (structured-merge-diff's `PathElement`).
#[derive(Clone, Debug)]
enum Pe {
    /// `f:<name>`: a field of a map.
    Field(String),
    /// `k:{...}`: an associative list item, key fields sorted by name.
    Key(Vec<(String, Value)>),
    /// `v:<json>`: a set item.
    Value(Value),
    /// `i:<n>`: a list index (never produced here; kept when read).
    Index(i64),
}

impl Pe {
    fn rank(&self) -> u8 {
        match self {
            Pe::Field(_) => 0,
            Pe::Key(_) => 1,
            Pe::Value(_) => 2,
            Pe::Index(_) => 3,
        }
    }

    /// The FieldsV1 object key (`f:name`, `k:{"name":"x"}`, `v:"x"`, `i:0`).
    fn serialize(&self) -> String {
        let mut out = String::new();
        match self {
            Pe::Field(name) => {
                out.push_str("f:");
                out.push_str(name);
            }
            Pe::Key(fields) => {
                out.push_str("k:{");
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    go_json_string(name, &mut out);
                    out.push(':');
                    go_json(value, &mut out);
                }
                out.push('}');
            }
            Pe::Value(value) => {
                out.push_str("v:");
                go_json(value, &mut out);
            }
            Pe::Index(i) => {
                let _ = write!(out, "i:{i}");
            }
        }
        out
    }

    fn deserialize(s: &str) -> Result<Option<Pe>, String> {
        let b = s.as_bytes();
        if b.len() < 2 {
            return Err(format!("key must be 2 characters long: {s:?}"));
        }
        if b[1] != b':' {
            return Err(format!("missing colon: {s}"));
        }
        let rest = &s[2..];
        match b[0] {
            b'f' => Ok(Some(Pe::Field(rest.to_string()))),
            b'v' => serde_json::from_str::<Value>(rest)
                .map(|v| Some(Pe::Value(v)))
                .map_err(|e| format!("{s}: {e}")),
            b'k' => match serde_json::from_str::<Value>(rest) {
                Ok(Value::Object(m)) => {
                    let mut fields: Vec<(String, Value)> = m.into_iter().collect();
                    fields.sort_by(|a, b| a.0.cmp(&b.0));
                    Ok(Some(Pe::Key(fields)))
                }
                Ok(_) => Err(format!("{s}: key must be a JSON object")),
                Err(e) => Err(format!("{s}: {e}")),
            },
            b'i' => rest
                .parse::<i64>()
                .map(|i| Some(Pe::Index(i)))
                .map_err(|e| format!("{s}: {e}")),
            // Unknown element types are dropped, as structured-merge-diff does.
            _ => Ok(None),
        }
    }
}

impl Ord for Pe {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Pe::Field(a), Pe::Field(b)) => a.cmp(b),
            (Pe::Key(a), Pe::Key(b)) => cmp_field_lists(a, b),
            (Pe::Value(a), Pe::Value(b)) => cmp_values(a, b),
            (Pe::Index(a), Pe::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for Pe {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Pe {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Pe {}

/// kube's human-readable form (`.spec`, `[name="nginx"]`, `[="foo"]`, `[0]`).
impl fmt::Display for Pe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pe::Field(name) => write!(f, ".{name}"),
            Pe::Key(fields) => {
                f.write_str("[")?;
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{name}={}", value_to_string(value))?;
                }
                f.write_str("]")
            }
            Pe::Value(value) => write!(f, "[={}]", value_to_string(value)),
            Pe::Index(i) => write!(f, "[{i}]"),
        }
    }
}

fn path_string(path: &[Pe]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// Error reading a FieldsV1 value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid FieldsV1: {0}")]
pub struct FieldsV1Error(pub String);

/// A tree of owned field paths (structured-merge-diff's `fieldpath.Set`).
///
/// A path is in the set when its last element is a *member* of the node its prefix
/// leads to. Nodes are never empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<Pe>,
    children: BTreeMap<Pe, FieldSet>,
}

impl FieldSet {
    /// Reads the FieldsV1 format (`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}`).
    pub fn from_fields_v1(value: &Value) -> Result<FieldSet, FieldsV1Error> {
        match value {
            Value::Null => Ok(FieldSet::default()),
            Value::Object(m) => Ok(read_fields_v1(m)
                .map_err(FieldsV1Error)?
                .0
                .unwrap_or_default()),
            _ => Err(FieldsV1Error("expected a JSON object".into())),
        }
    }

    /// Writes the FieldsV1 format as a JSON value.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.emit_value(false))
    }

    /// Writes the FieldsV1 format as compact JSON, byte for byte as kube-apiserver
    /// writes it (structured-merge-diff's key order: `.` first, then fields, keys,
    /// values, indices).
    pub fn to_fields_v1_string(&self) -> String {
        let mut out = String::new();
        self.emit_string(false, &mut out);
        out
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(FieldSet::is_empty)
    }

    /// Paths in either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.union_with(other);
        out
    }

    /// Adds `other`'s paths to `self` in place: only what `self` lacks is copied
    /// (`union` once cloned every shared subtree again at each level).
    fn union_with(&mut self, other: &FieldSet) {
        for pe in &other.members {
            if !self.members.contains(pe) {
                self.members.insert(pe.clone());
            }
        }
        for (pe, child) in &other.children {
            match self.children.get_mut(pe) {
                Some(mine) => mine.union_with(child),
                None => {
                    self.children.insert(pe.clone(), child.clone());
                }
            }
        }
    }

    /// Paths in `self` and not in `other` (exact paths; children of a removed path stay).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            let diff = match other.children.get(pe) {
                Some(o) => child.difference(o),
                None => child.clone(),
            };
            if !diff.is_empty() {
                children.insert(pe.clone(), diff);
            }
        }
        FieldSet { members, children }
    }

    /// Like [`FieldSet::difference`], but a path in `other` also removes everything
    /// below it.
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if other.members.contains(pe) {
                continue;
            }
            let diff = match other.children.get(pe) {
                Some(o) => child.recursive_difference(o),
                None => child.clone(),
            };
            if !diff.is_empty() {
                children.insert(pe.clone(), diff);
            }
        }
        FieldSet { members, children }
    }

    /// Paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if let Some(o) = other.children.get(pe) {
                let both = child.intersection(o);
                if !both.is_empty() {
                    children.insert(pe.clone(), both);
                }
            }
        }
        FieldSet { members, children }
    }

    /// Every path, in kube's notation (`.spec.template.spec.containers[name="nginx"].image`),
    /// in structured-merge-diff's iteration order (a node's members, then its children).
    pub fn paths(&self) -> Vec<String> {
        self.raw_paths().iter().map(|p| path_string(p)).collect()
    }

    fn raw_paths(&self) -> Vec<Vec<Pe>> {
        let mut out = Vec::new();
        self.iterate(&mut Vec::new(), &mut |p| out.push(p.to_vec()));
        out
    }

    fn iterate(&self, prefix: &mut Vec<Pe>, f: &mut dyn FnMut(&[Pe])) {
        for m in &self.members {
            prefix.push(m.clone());
            f(prefix);
            prefix.pop();
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.iterate(prefix, f);
            prefix.pop();
        }
    }

    fn insert(&mut self, path: &[Pe]) {
        match path {
            [] => {} // the whole object: never tracked
            [last] => {
                if !self.members.contains(last) {
                    self.members.insert(last.clone());
                }
            }
            // Look up before inserting: `entry` would clone the key for every leaf.
            [first, rest @ ..] => match self.children.get_mut(first) {
                Some(child) => child.insert(rest),
                None => self.children.entry(first.clone()).or_default().insert(rest),
            },
        }
    }

    fn has(&self, path: &[Pe]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    fn single(path: &[Pe]) -> FieldSet {
        let mut s = FieldSet::default();
        s.insert(path);
        s
    }

    /// structured-merge-diff's `EnsureNamedFieldsAreMembers`: every struct field that
    /// has children becomes a member too. All maps are structs here.
    fn ensure_named(&self) -> FieldSet {
        let mut members = self.members.clone();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if matches!(pe, Pe::Field(_)) {
                members.insert(pe.clone());
            }
            children.insert(pe.clone(), child.ensure_named());
        }
        FieldSet { members, children }
    }

    fn ordered_keys(&self) -> BTreeSet<&Pe> {
        self.members.iter().chain(self.children.keys()).collect()
    }

    fn emit_value(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::new();
        if include_self && !self.is_empty() {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        for pe in self.ordered_keys() {
            let inner = match self.children.get(pe) {
                Some(child) => child.emit_value(self.members.contains(pe)),
                None => Map::new(),
            };
            out.insert(pe.serialize(), Value::Object(inner));
        }
        out
    }

    fn emit_string(&self, include_self: bool, out: &mut String) {
        out.push('{');
        let mut first = true;
        if include_self && !self.is_empty() {
            out.push_str("\".\":{}");
            first = false;
        }
        for pe in self.ordered_keys() {
            if !first {
                out.push(',');
            }
            first = false;
            go_json_string(&pe.serialize(), out);
            out.push(':');
            match self.children.get(pe) {
                Some(child) => child.emit_string(self.members.contains(pe), out),
                None => out.push_str("{}"),
            }
        }
        out.push('}');
    }
}

/// Returns (children, is-member) for one FieldsV1 object, as structured-merge-diff's
/// `readIterV1` does: `{}` (or only unknown keys) means "member".
fn read_fields_v1(m: &Map<String, Value>) -> Result<(Option<FieldSet>, bool), String> {
    let mut children: Option<FieldSet> = None;
    let mut is_member = false;
    for (key, value) in m {
        if key == "." {
            is_member = true;
            continue;
        }
        let Some(pe) = Pe::deserialize(key)? else {
            continue;
        };
        let (grandchildren, child_is_member) = match value {
            Value::Object(inner) => read_fields_v1(inner)?,
            Value::Null => (None, true),
            _ => return Err(format!("{key}: expected a JSON object")),
        };
        if child_is_member {
            children.get_or_insert_default().members.insert(pe.clone());
        }
        if let Some(g) = grandchildren {
            let node = children.get_or_insert_default();
            match node.children.get_mut(&pe) {
                Some(existing) => existing.union_with(&g),
                None => {
                    node.children.insert(pe, g);
                }
            }
        }
    }
    if children.is_none() {
        is_member = true;
    }
    Ok((children, is_member))
}

// ---------------------------------------------------------------------------------
// JSON value helpers (structured-merge-diff value semantics, Go encodings)
// ---------------------------------------------------------------------------------

fn type_rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

fn cmp_numbers(a: &serde_json::Number, b: &serde_json::Number) -> Ordering {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x.cmp(&y);
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x.cmp(&y);
    }
    let x = a.as_f64().unwrap_or(0.0);
    let y = b.as_f64().unwrap_or(0.0);
    x.partial_cmp(&y).unwrap_or(Ordering::Equal)
}

/// structured-merge-diff's total order on values (numbers < strings < bools < lists <
/// maps < null; ints and floats compare numerically).
fn cmp_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => cmp_numbers(x, y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (l, r) in x.iter().zip(y) {
                let c = cmp_values(l, r);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            if x.is_empty() && y.is_empty() {
                return Ordering::Equal;
            }
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for (i, k) in keys.into_iter().enumerate() {
                let c = if i == x.len() {
                    Ordering::Less
                } else if i == y.len() {
                    Ordering::Greater
                } else {
                    match (x.get(k), y.get(k)) {
                        (None, _) => Ordering::Greater,
                        (_, None) => Ordering::Less,
                        (Some(l), Some(r)) => cmp_values(l, r),
                    }
                };
                if c != Ordering::Equal {
                    return c;
                }
            }
            Ordering::Equal
        }
        (Value::Null, Value::Null) => Ordering::Equal,
        _ => type_rank(a).cmp(&type_rank(b)),
    }
}

fn cmp_field_lists(a: &[(String, Value)], b: &[(String, Value)]) -> Ordering {
    for ((ln, lv), (rn, rv)) in a.iter().zip(b) {
        let c = ln.cmp(rn).then_with(|| cmp_values(lv, rv));
        if c != Ordering::Equal {
            return c;
        }
    }
    a.len().cmp(&b.len())
}

/// Deep equality with numbers compared numerically (`1 == 1.0`).
fn value_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => cmp_numbers(x, y) == Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(l, r)| value_eq(l, r))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, l)| y.get(k).is_some_and(|r| value_eq(l, r)))
        }
        _ => a == b,
    }
}

/// Go's `encoding/json` string escaping (HTML-safe).
fn go_json_string(s: &str, out: &mut String) {
    crate::apiserver::http::table::format::write_go_json_string(s, out);
}

/// Go's `encoding/json` float format.
fn go_json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        }
    } else {
        format!("{f}")
    }
}

fn go_json_number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        n.to_string()
    } else {
        go_json_float(n.as_f64().unwrap_or(0.0))
    }
}

/// Compact JSON as Go writes it: sorted keys, HTML-safe escaping, Go number format.
fn go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_json_number(n)),
        Value::String(s) => go_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_string(k, out);
                out.push(':');
                go_json(&m[k], out);
            }
            out.push('}');
        }
    }
}

/// An approximation of Go's `unicode.IsPrint`.
fn go_is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    let u = c as u32;
    !matches!(u,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
        | 0x202A..=0x202E | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB
        | 0xE000..=0xF8FF | 0xF0000..=0x10FFFF)
}

/// Go's `%v` of a float64 (`strconv` 'g', shortest).
fn go_fmt_float(f: f64) -> String {
    if f == 0.0 {
        return "0".into();
    }
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

/// structured-merge-diff's `value.ToString`, used in rendered paths.
fn value_to_string(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        Value::Number(n) => go_fmt_float(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => go_quote(s),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(value_to_string).collect();
            format!("[{}]", parts.join(","))
        }
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={}", value_to_string(v)))
            .collect(),
    }
}

// ---------------------------------------------------------------------------------
// Structured walkers: to-field-set, compare, merge, remove
// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Scalar,
    Map,
    List,
}

fn kind(v: &Value) -> Kind {
    match v {
        Value::Null => Kind::Null,
        Value::Object(_) => Kind::Map,
        Value::Array(_) => Kind::List,
        _ => Kind::Scalar,
    }
}

/// The kind a pair of values is walked as: the right-hand side's, unless it is null
/// (null takes whatever form the other operand has).
fn walk_kind(l: Option<&Value>, r: Option<&Value>) -> Kind {
    [r, l]
        .into_iter()
        .flatten()
        .map(kind)
        .find(|k| *k != Kind::Null)
        .unwrap_or(Kind::Null)
}

/// Both sides present, non-null and of different kinds.
fn mismatched(l: Option<&Value>, r: Option<&Value>) -> Option<Kind> {
    match (l.map(kind), r.map(kind)) {
        (Some(a), Some(b)) if a != Kind::Null && b != Kind::Null && a != b => Some(a),
        _ => None,
    }
}

fn union_keys<'a>(
    l: Option<&'a Map<String, Value>>,
    r: Option<&'a Map<String, Value>>,
) -> Vec<&'a str> {
    let mut keys: Vec<&'a str> = l
        .into_iter()
        .flat_map(|m| m.keys().map(String::as_str))
        .collect();
    if let Some(r) = r {
        keys.extend(
            r.keys()
                .map(String::as_str)
                .filter(|k| !l.is_some_and(|l| l.contains_key(*k))),
        );
    }
    keys
}

enum Declared {
    Atomic,
    Keyed(Vec<&'static str>),
    Set,
}

/// Added / modified / removed paths between two objects.
#[derive(Default)]
struct Comparison {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

impl Comparison {
    fn exclude(&mut self, ignored: &FieldSet) {
        if ignored.is_empty() {
            return;
        }
        self.added = self.added.recursive_difference(ignored);
        self.modified = self.modified.recursive_difference(ignored);
        self.removed = self.removed.recursive_difference(ignored);
    }
}

static NULL: Value = Value::Null;

struct Ctx<'k> {
    keys: &'k dyn ListKeys,
    /// Comparisons pass over `metadata.managedFields` as if it were absent (what
    /// ownership records never track), sparing a copy of each object without it.
    skip_managed_fields: bool,
}

impl Ctx<'_> {
    fn declared(&self, fpath: &[&str]) -> Declared {
        if let Some(k) = self.keys.list_keys(fpath) {
            return if k.is_empty() {
                Declared::Set
            } else {
                Declared::Keyed(k)
            };
        }
        if self.keys.is_set(fpath) {
            return Declared::Set;
        }
        // ObjectMeta's lists, at the root and in templates.
        let n = fpath.len();
        if n >= 2 && fpath[n - 2] == "metadata" && (n == 2 || fpath[n - 3] == "template") {
            match fpath[n - 1] {
                "finalizers" => return Declared::Set,
                "ownerReferences" => return Declared::Keyed(vec!["uid"]),
                _ => {}
            }
        }
        Declared::Atomic
    }

    fn atomic_map(&self, fpath: &[&str]) -> bool {
        !fpath.is_empty() && self.keys.is_atomic_map(fpath)
    }

    fn item_pe(&self, declared: &Declared, fpath: &[&str], item: &Value) -> Result<Pe, String> {
        match declared {
            Declared::Atomic => Err("atomic list".into()),
            Declared::Keyed(keys) => {
                let m = match item {
                    Value::Object(m) => m,
                    Value::Null => {
                        return Err("associative list with keys may not have a null element".into());
                    }
                    _ => {
                        return Err(
                            "associative list with keys may not have non-map elements".into()
                        );
                    }
                };
                let mut fields = Vec::with_capacity(keys.len());
                for key in keys {
                    let value = match m.get(*key) {
                        Some(v) => v.clone(),
                        None => self.keys.key_default(fpath, key).ok_or_else(|| {
                            format!(
                                "associative list with keys has an element that omits key field {} (and doesn't have default value)",
                                go_quote(key)
                            )
                        })?,
                    };
                    fields.push(((*key).to_string(), value));
                }
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(Pe::Key(fields))
            }
            Declared::Set => match item {
                Value::Object(_) => {
                    Err("associative list without keys has an element that's a map type".into())
                }
                Value::Array(_) => {
                    Err("associative list without keys has an element that's a list type".into())
                }
                v => Ok(Pe::Value(v.clone())),
            },
        }
    }

    /// The item path elements of a granular list; `None` when the list is atomic
    /// (declared so, or some item cannot be keyed).
    fn list_pes(&self, fpath: &[&str], items: &[Value]) -> Option<Vec<Pe>> {
        let declared = self.declared(fpath);
        if matches!(declared, Declared::Atomic) {
            return None;
        }
        items
            .iter()
            .map(|item| self.item_pe(&declared, fpath, item).ok())
            .collect()
    }

    // ---- ToFieldSet ----

    fn to_field_set(&self, v: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        self.tfs(v, &mut Vec::new(), &mut Vec::new(), &mut set);
        set
    }

    fn tfs<'a>(
        &self,
        v: &'a Value,
        path: &mut Vec<Pe>,
        fpath: &mut Vec<&'a str>,
        set: &mut FieldSet,
    ) {
        match v {
            Value::Object(m) => {
                if self.atomic_map(fpath) {
                    set.insert(path);
                    return;
                }
                for (k, child) in m {
                    path.push(Pe::Field(k.clone()));
                    fpath.push(k);
                    self.tfs(child, path, fpath, set);
                    if child.is_null() || child.as_object().is_some_and(Map::is_empty) {
                        set.insert(path);
                    }
                    path.pop();
                    fpath.pop();
                }
            }
            Value::Array(items) => match self.list_pes(fpath, items) {
                None => set.insert(path),
                Some(pes) => {
                    let mut counts: BTreeMap<&Pe, usize> = BTreeMap::new();
                    for pe in &pes {
                        *counts.entry(pe).or_default() += 1;
                    }
                    for (item, pe) in items.iter().zip(&pes) {
                        path.push(pe.clone());
                        if counts[pe] > 1 {
                            // Duplicates are owned as a whole.
                            set.insert(path);
                        } else {
                            self.tfs(item, path, fpath, set);
                            set.insert(path);
                        }
                        path.pop();
                    }
                }
            },
            _ => set.insert(path),
        }
    }

    // ---- Compare ----

    fn compare(&self, lhs: &Value, rhs: &Value) -> Comparison {
        let mut out = Comparison::default();
        self.cmp_node(
            Some(lhs),
            Some(rhs),
            &mut Vec::new(),
            &mut Vec::new(),
            &mut out,
        );
        out
    }

    fn cmp_node<'a>(
        &self,
        l: Option<&'a Value>,
        r: Option<&'a Value>,
        path: &mut Vec<Pe>,
        fpath: &mut Vec<&'a str>,
        out: &mut Comparison,
    ) {
        // Equal subtrees add, modify and remove nothing: skip walking them (an update
        // usually changes a few fields of a large object).
        if let (Some(a), Some(b)) = (l, r)
            && value_eq(a, b)
        {
            return;
        }
        let leafed = match mismatched(l, r) {
            Some(lk) => {
                self.cmp_as(lk, l, r, path, fpath, out);
                self.cmp_as(walk_kind(None, r), l, r, path, fpath, out)
            }
            None => self.cmp_as(walk_kind(l, r), l, r, path, fpath, out),
        };
        if !leafed {
            if l.is_none() {
                out.added.insert(path);
            } else if r.is_none() {
                out.removed.insert(path);
            }
        }
    }

    fn cmp_leaf(l: Option<&Value>, r: Option<&Value>, path: &[Pe], out: &mut Comparison) {
        match (l, r) {
            (None, _) => out.added.insert(path),
            (_, None) => out.removed.insert(path),
            (Some(a), Some(b)) => {
                if !value_eq(a, b) {
                    out.modified.insert(path);
                }
            }
        }
    }

    /// Returns true when the node was handled as a leaf.
    fn cmp_as<'a>(
        &self,
        k: Kind,
        l: Option<&'a Value>,
        r: Option<&'a Value>,
        path: &mut Vec<Pe>,
        fpath: &mut Vec<&'a str>,
        out: &mut Comparison,
    ) -> bool {
        match k {
            Kind::Null | Kind::Scalar => {
                Self::cmp_leaf(l, r, path, out);
                true
            }
            Kind::Map => {
                let lm = l.and_then(Value::as_object);
                let rm = r.and_then(Value::as_object);
                if (lm.is_none_or(Map::is_empty) && rm.is_none_or(Map::is_empty))
                    || self.atomic_map(fpath)
                {
                    Self::cmp_leaf(l, r, path, out);
                    return true;
                }
                for key in union_keys(lm, rm) {
                    if self.skip_managed_fields
                        && key == "managedFields"
                        && fpath.as_slice() == ["metadata"]
                    {
                        continue;
                    }
                    path.push(Pe::Field(key.to_string()));
                    fpath.push(key);
                    self.cmp_node(
                        lm.and_then(|m| m.get(key)),
                        rm.and_then(|m| m.get(key)),
                        path,
                        fpath,
                        out,
                    );
                    path.pop();
                    fpath.pop();
                }
                false
            }
            Kind::List => {
                let ll: &'a [Value] = l.and_then(Value::as_array).map_or(&[], Vec::as_slice);
                let rl: &'a [Value] = r.and_then(Value::as_array).map_or(&[], Vec::as_slice);
                let pes = match (self.list_pes(fpath, ll), self.list_pes(fpath, rl)) {
                    (Some(lp), Some(rp)) if !(ll.is_empty() && rl.is_empty()) => Some((lp, rp)),
                    _ => None,
                };
                let Some((lp, rp)) = pes else {
                    Self::cmp_leaf(l, r, path, out);
                    return true;
                };
                self.cmp_list_items(ll, rl, &lp, &rp, path, fpath, out);
                false
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn cmp_list_items<'a>(
        &self,
        ll: &'a [Value],
        rl: &'a [Value],
        lp: &[Pe],
        rp: &[Pe],
        path: &mut Vec<Pe>,
        fpath: &mut Vec<&'a str>,
        out: &mut Comparison,
    ) {
        let mut order: Vec<&Pe> = Vec::new();
        let mut lvals: BTreeMap<&Pe, Vec<&'a Value>> = BTreeMap::new();
        let mut rvals: BTreeMap<&Pe, Vec<&'a Value>> = BTreeMap::new();
        for (pe, item) in lp.iter().zip(ll) {
            let e = lvals.entry(pe).or_default();
            if e.is_empty() {
                order.push(pe);
            }
            e.push(item);
        }
        for (pe, item) in rp.iter().zip(rl) {
            let e = rvals.entry(pe).or_default();
            if e.is_empty() && !lvals.contains_key(pe) {
                order.push(pe);
            }
            e.push(item);
        }
        for pe in order {
            let lv = lvals.get(pe).map_or(&[][..], Vec::as_slice);
            let rv = rvals.get(pe).map_or(&[][..], Vec::as_slice);
            path.push(pe.clone());
            if lv.len() <= 1 && rv.len() <= 1 {
                self.cmp_node(lv.first().copied(), rv.first().copied(), path, fpath, out);
            } else if lv.len() >= 2 && rv.len() >= 2 {
                let same = lv.len() == rv.len() && lv.iter().zip(rv).all(|(a, b)| value_eq(a, b));
                if !same {
                    out.modified.insert(path);
                }
            } else if lv.len() >= 2 {
                if let Some(r) = rv.first() {
                    self.cmp_node(None, Some(r), path, fpath, out);
                }
                out.removed.insert(path);
            } else {
                if let Some(l) = lv.first() {
                    self.cmp_node(Some(l), None, path, fpath, out);
                }
                out.added.insert(path);
            }
            path.pop();
        }
    }

    // ---- Merge ----

    fn merge(&self, lhs: &Value, rhs: &Value) -> Value {
        self.merge_node(Some(lhs), Some(rhs), &mut Vec::new())
            .unwrap_or_else(|| Value::Object(Map::new()))
    }

    fn merge_node<'a>(
        &self,
        l: Option<&'a Value>,
        r: Option<&'a Value>,
        fpath: &mut Vec<&'a str>,
    ) -> Option<Value> {
        let k = match mismatched(l, r) {
            Some(_) => walk_kind(None, r),
            None => walk_kind(l, r),
        };
        let keep_rhs = || r.or(l).cloned();
        match k {
            Kind::Null | Kind::Scalar => keep_rhs(),
            Kind::Map => {
                let lm = l.and_then(Value::as_object);
                let rm = r.and_then(Value::as_object);
                if (lm.is_none_or(Map::is_empty) && rm.is_none_or(Map::is_empty))
                    || self.atomic_map(fpath)
                {
                    return keep_rhs();
                }
                let mut out = Map::new();
                for key in union_keys(lm, rm) {
                    fpath.push(key);
                    if let Some(v) = self.merge_node(
                        lm.and_then(|m| m.get(key)),
                        rm.and_then(|m| m.get(key)),
                        fpath,
                    ) {
                        out.insert(key.to_string(), v);
                    }
                    fpath.pop();
                }
                (!out.is_empty()).then_some(Value::Object(out))
            }
            Kind::List => {
                let ll: &'a [Value] = l.and_then(Value::as_array).map_or(&[], Vec::as_slice);
                let rl: &'a [Value] = r.and_then(Value::as_array).map_or(&[], Vec::as_slice);
                match (self.list_pes(fpath, ll), self.list_pes(fpath, rl)) {
                    (Some(lp), Some(rp)) if !(ll.is_empty() && rl.is_empty()) => {
                        self.merge_list_items(ll, rl, lp, rp, fpath)
                    }
                    _ => keep_rhs(),
                }
            }
        }
    }

    /// structured-merge-diff's associative list merge: items only in the live list
    /// keep their place, shared items follow the applied order, new items are
    /// interleaved in applied order.
    fn merge_list_items<'a>(
        &self,
        ll: &'a [Value],
        rl: &'a [Value],
        lhs_pes: Vec<Pe>,
        rp: Vec<Pe>,
        fpath: &mut Vec<&'a str>,
    ) -> Option<Value> {
        let mut observed_lhs: BTreeMap<&Pe, &'a Value> = BTreeMap::new();
        for (pe, item) in lhs_pes.iter().zip(ll) {
            if observed_lhs.contains_key(pe) {
                // Duplicated items are not merged with the new value.
                observed_lhs.insert(pe, &NULL);
            } else {
                observed_lhs.insert(pe, item);
            }
        }
        let mut rhs_pes: Vec<&Pe> = Vec::new();
        let mut observed_rhs: BTreeMap<&Pe, &'a Value> = BTreeMap::new();
        for (pe, item) in rp.iter().zip(rl) {
            if !observed_rhs.contains_key(pe) {
                observed_rhs.insert(pe, item);
                rhs_pes.push(pe);
            }
        }
        let shared: Vec<&Pe> = rhs_pes
            .iter()
            .copied()
            .filter(|pe| observed_lhs.contains_key(pe))
            .collect();
        let mut shared = shared.into_iter();
        let mut next_shared = shared.next();
        let mut merged_rhs: BTreeSet<&Pe> = BTreeSet::new();
        let mut out = Vec::with_capacity(ll.len().max(rl.len()));
        let (llen, rlen) = (lhs_pes.len(), rhs_pes.len());
        let (mut li, mut ri) = (0, 0);
        while li < llen || ri < rlen {
            if li < llen && ri < rlen {
                let pe = &lhs_pes[li];
                if pe == rhs_pes[ri] {
                    merged_rhs.insert(pe);
                    let lchild = observed_lhs.get(pe).copied();
                    let rchild = observed_rhs.get(pe).copied();
                    out.extend(self.merge_node(lchild, rchild, fpath));
                    li += 1;
                    ri += 1;
                    next_shared = shared.next();
                    continue;
                }
                if observed_rhs.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                    li += 1;
                    continue;
                }
            }
            if li < llen {
                let pe = &lhs_pes[li];
                if !observed_rhs.contains_key(pe) {
                    out.extend(self.merge_node(Some(&ll[li]), None, fpath));
                    li += 1;
                    continue;
                } else if merged_rhs.contains(pe) {
                    li += 1;
                }
            }
            if ri < rlen {
                let pe = rhs_pes[ri];
                merged_rhs.insert(pe);
                let lchild = observed_lhs.get(pe).copied();
                let rchild = observed_rhs.get(pe).copied();
                out.extend(self.merge_node(lchild, rchild, fpath));
                ri += 1;
                if next_shared == Some(pe) {
                    next_shared = shared.next();
                }
            }
        }
        (!out.is_empty()).then_some(Value::Array(out))
    }

    // ---- RemoveItems ----

    /// structured-merge-diff's `RemoveItems`: drops every member of `set` (with its
    /// subtree). A map or list left empty becomes `None` (null in its parent).
    fn remove_items<'a>(
        &self,
        v: &'a Value,
        set: &FieldSet,
        fpath: &mut Vec<&'a str>,
    ) -> Option<Value> {
        match v {
            Value::Object(m) => {
                if m.is_empty() || self.atomic_map(fpath) {
                    return None;
                }
                let mut out = Map::new();
                for (k, child) in m {
                    let pe = Pe::Field(k.clone());
                    if set.members.contains(&pe) {
                        continue;
                    }
                    let value = match set.children.get(&pe) {
                        Some(sub) => {
                            fpath.push(k);
                            let r = self.remove_items(child, sub, fpath).unwrap_or(Value::Null);
                            fpath.pop();
                            r
                        }
                        None => child.clone(),
                    };
                    out.insert(k.clone(), value);
                }
                (!out.is_empty()).then_some(Value::Object(out))
            }
            Value::Array(items) => {
                let pes = self.list_pes(fpath, items)?;
                if items.is_empty() {
                    return None;
                }
                let mut out = Vec::new();
                for (item, pe) in items.iter().zip(&pes) {
                    if set.members.contains(pe) {
                        continue;
                    }
                    match set.children.get(pe) {
                        Some(sub) => {
                            out.push(self.remove_items(item, sub, fpath).unwrap_or(Value::Null))
                        }
                        None => out.push(item.clone()),
                    }
                }
                (!out.is_empty()).then_some(Value::Array(out))
            }
            other => Some(other.clone()),
        }
    }

    fn remove_from(&self, v: &Value, set: &FieldSet) -> Value {
        self.remove_items(v, set, &mut Vec::new())
            .unwrap_or_else(|| Value::Object(Map::new()))
    }

    // ---- Validation of an applied configuration ----

    fn validate<'a>(
        &self,
        v: &'a Value,
        path: &mut Vec<Pe>,
        fpath: &mut Vec<&'a str>,
        errs: &mut Vec<String>,
    ) {
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    path.push(Pe::Field(k.clone()));
                    fpath.push(k);
                    self.validate(child, path, fpath, errs);
                    path.pop();
                    fpath.pop();
                }
            }
            Value::Array(items) => {
                let declared = self.declared(fpath);
                if matches!(declared, Declared::Atomic) {
                    return;
                }
                let mut seen = BTreeSet::new();
                for (i, item) in items.iter().enumerate() {
                    match self.item_pe(&declared, fpath, item) {
                        Err(e) => errs.push(format!("{}: element {i}: {e}", path_string(path))),
                        Ok(pe) => {
                            if seen.contains(&pe) {
                                errs.push(format!(
                                    "{}: duplicate entries for key {pe}",
                                    path_string(path)
                                ));
                                continue;
                            }
                            seen.insert(pe.clone());
                            path.push(pe);
                            self.validate(item, path, fpath, errs);
                            path.pop();
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------
// Managers
// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// kube's manager identifier: Apply managers are one per name; Update managers are
/// one per (name, apiVersion, subresource).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ManagerId {
    manager: String,
    operation: Operation,
    /// Empty for Apply.
    api_version: String,
    subresource: String,
}

impl ManagerId {
    fn apply(manager: &str, subresource: Option<&str>) -> ManagerId {
        ManagerId {
            manager: manager.to_string(),
            operation: Operation::Apply,
            api_version: String::new(),
            subresource: subresource.unwrap_or_default().to_string(),
        }
    }

    fn update(manager: &str, api_version: &str, subresource: Option<&str>) -> ManagerId {
        ManagerId {
            manager: manager.to_string(),
            operation: Operation::Update,
            api_version: api_version.to_string(),
            subresource: subresource.unwrap_or_default().to_string(),
        }
    }

    /// The JSON identifier kube sorts conflicting managers by.
    fn identifier(&self) -> String {
        identifier_json(
            &self.manager,
            self.operation.as_str(),
            &self.api_version,
            &self.subresource,
        )
    }
}

fn identifier_json(manager: &str, operation: &str, api_version: &str, subresource: &str) -> String {
    let mut out = String::from("{\"manager\":");
    go_json_string(manager, &mut out);
    out.push_str(",\"operation\":");
    go_json_string(operation, &mut out);
    if !api_version.is_empty() && operation != "Apply" {
        out.push_str(",\"apiVersion\":");
        go_json_string(api_version, &mut out);
    }
    if !subresource.is_empty() {
        out.push_str(",\"subresource\":");
        go_json_string(subresource, &mut out);
    }
    out.push('}');
    out
}

#[derive(Clone, Debug)]
struct VersionedSet {
    set: FieldSet,
    api_version: String,
}

#[derive(Clone, Debug, Default)]
struct Managed {
    fields: BTreeMap<ManagerId, VersionedSet>,
    /// kube keeps times apart from the sets: a manager's time survives the loss of its set.
    times: BTreeMap<ManagerId, String>,
}

fn managed_fields_of(obj: &Value) -> Option<&Value> {
    obj.get("metadata").and_then(|m| m.get("managedFields"))
}

fn without_managed_fields(obj: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    out
}

fn decode_managed(entries: Option<&Value>) -> Result<Managed, String> {
    let mut managed = Managed::default();
    let entries = match entries {
        None | Some(Value::Null) => return Ok(managed),
        Some(Value::Array(entries)) => entries,
        Some(_) => return Err("managedFields must be a list".into()),
    };
    for (i, entry) in entries.iter().enumerate() {
        let Some(e) = entry.as_object() else {
            return Err(format!("managed fields entry {i} is not an object"));
        };
        let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default();
        let operation = match text("operation") {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return Err("operation must be `Apply` or `Update`".into()),
        };
        let api_version = text("apiVersion");
        if api_version.is_empty() {
            return Err("apiVersion must not be empty".into());
        }
        match text("fieldsType") {
            "FieldsV1" => {}
            "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
            other => {
                return Err(format!(
                    "invalid fieldsType {} in managed fields entry {i}",
                    go_quote(other)
                ));
            }
        }
        let set = match e.get("fieldsV1") {
            None => FieldSet::default(),
            Some(v) => FieldSet::from_fields_v1(v)
                .map_err(|err| format!("error decoding versioned set: {err}"))?,
        };
        let id = ManagerId {
            manager: text("manager").to_string(),
            operation,
            api_version: if operation == Operation::Apply {
                String::new()
            } else {
                api_version.to_string()
            },
            subresource: text("subresource").to_string(),
        };
        match e.get("time").and_then(Value::as_str) {
            Some(t) => managed.times.insert(id.clone(), t.to_string()),
            None => managed.times.remove(&id),
        };
        managed.fields.insert(
            id,
            VersionedSet {
                set,
                api_version: api_version.to_string(),
            },
        );
    }
    Ok(managed)
}

fn encode_managed(managed: &Managed) -> Value {
    struct Row<'a> {
        id: &'a ManagerId,
        vs: &'a VersionedSet,
        time: Option<&'a String>,
        seconds: i64,
    }
    let mut rows: Vec<Row<'_>> = managed
        .fields
        .iter()
        .map(|(id, vs)| {
            let time = managed.times.get(id);
            Row {
                id,
                vs,
                time,
                seconds: time.and_then(|t| parse_rfc3339(t)).unwrap_or(0),
            }
        })
        .collect();
    // kube's sortEncodedManagedFields.
    rows.sort_by(|p, q| {
        p.id.operation
            .cmp(&q.id.operation)
            .then(p.seconds.cmp(&q.seconds))
            .then_with(|| p.id.manager.cmp(&q.id.manager))
            .then_with(|| p.vs.api_version.cmp(&q.vs.api_version))
            .then_with(|| p.id.subresource.cmp(&q.id.subresource))
    });
    let entries = rows
        .into_iter()
        .map(|row| {
            let mut e = Map::new();
            e.insert("manager".into(), Value::from(row.id.manager.clone()));
            e.insert("operation".into(), Value::from(row.id.operation.as_str()));
            e.insert("apiVersion".into(), Value::from(row.vs.api_version.clone()));
            if let Some(t) = row.time {
                e.insert("time".into(), Value::from(t.clone()));
            }
            e.insert("fieldsType".into(), Value::from("FieldsV1"));
            e.insert("fieldsV1".into(), row.vs.set.to_fields_v1());
            if !row.id.subresource.is_empty() {
                e.insert(
                    "subresource".into(),
                    Value::from(row.id.subresource.clone()),
                );
            }
            Value::Object(e)
        })
        .collect();
    Value::Array(entries)
}

/// kube's `capManagersManager`: at most 10 Update entries; the oldest are merged into
/// one "ancient-changes" entry per apiVersion.
fn cap_update_managers(managed: &mut Managed) {
    let mut updaters: Vec<ManagerId> = managed
        .fields
        .keys()
        .filter(|id| id.operation == Operation::Update)
        .cloned()
        .collect();
    if updaters.len() <= MAX_UPDATE_MANAGERS {
        return;
    }
    let seconds = |id: &ManagerId| {
        managed
            .times
            .get(id)
            .and_then(|t| parse_rfc3339(t))
            .unwrap_or(0)
    };
    updaters.sort_by(|a, b| {
        seconds(a)
            .cmp(&seconds(b))
            .then_with(|| a.identifier().cmp(&b.identifier()))
    });
    let mut first_by_version: BTreeMap<String, ManagerId> = BTreeMap::new();
    let mut length = updaters.len();
    for id in updaters {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let Some(vs) = managed.fields.get(&id).cloned() else {
            continue;
        };
        let time = managed.times.get(&id).cloned();
        let bucket = ManagerId::update(ANCIENT_CHANGES, &vs.api_version, None);
        match first_by_version.get(&vs.api_version) {
            Some(first) => {
                if !managed.fields.contains_key(&bucket)
                    && let Some(s) = managed.fields.remove(first)
                {
                    managed.fields.insert(bucket.clone(), s);
                }
                let existing = managed
                    .fields
                    .get(&bucket)
                    .map(|b| b.set.clone())
                    .unwrap_or_default();
                managed.fields.insert(
                    bucket.clone(),
                    VersionedSet {
                        set: vs.set.union(&existing),
                        api_version: vs.api_version.clone(),
                    },
                );
                managed.fields.remove(&id);
                length -= 1;
                match time {
                    Some(t) => managed.times.insert(bucket, t),
                    None => managed.times.remove(&bucket),
                };
            }
            None => {
                first_by_version.insert(vs.api_version.clone(), id);
            }
        }
    }
}

/// Paths no manager ever owns (kube's stripMetaManager; exact paths).
fn strip_meta(set: &FieldSet) -> FieldSet {
    let mut strip = FieldSet::default();
    let f = |s: &str| Pe::Field(s.to_string());
    strip.insert(&[f("apiVersion")]);
    strip.insert(&[f("kind")]);
    strip.insert(&[f("metadata")]);
    for name in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        strip.insert(&[f("metadata"), f(name)]);
    }
    set.difference(&strip)
}

/// Fields a write may not own (the strategy's reset fields): `status` for the main
/// resource when status is a subresource, `spec` for the status subresource.
fn ignored_fields(keys: &dyn ListKeys, subresource: Option<&str>) -> FieldSet {
    match subresource {
        Some("status") => FieldSet::single(&[Pe::Field("spec".into())]),
        _ if keys.status_subresource() => FieldSet::single(&[Pe::Field("status".into())]),
        _ => FieldSet::default(),
    }
}

/// The fixed parameters of one apply request.
struct ApplyCall<'a> {
    id: ManagerId,
    api_version: &'a str,
    subresource: Option<&'a str>,
    now: &'a str,
}

struct RawConflict {
    id: ManagerId,
    api_version: String,
    path: Vec<Pe>,
}

impl Ctx<'_> {
    /// structured-merge-diff's `Updater.update`: other managers lose what changed (or
    /// it is a conflict, without `force`) and everything removed.
    fn update_managers(
        &self,
        managed: &mut Managed,
        old: &Value,
        new: &Value,
        workflow: &ManagerId,
        force: bool,
        ignored: &FieldSet,
    ) -> Result<Comparison, Vec<RawConflict>> {
        let mut cmp = self.compare(old, new);
        cmp.exclude(ignored);
        let changed = cmp.modified.union(&cmp.added);
        let mut conflicts: BTreeMap<ManagerId, FieldSet> = BTreeMap::new();
        for (id, vs) in &managed.fields {
            if id == workflow {
                continue;
            }
            let c = vs.set.intersection(&changed);
            if !c.is_empty() {
                conflicts.insert(id.clone(), c);
            }
        }
        if !force && !conflicts.is_empty() {
            let mut ids: Vec<(String, &ManagerId)> =
                conflicts.keys().map(|id| (id.identifier(), id)).collect();
            ids.sort();
            let mut out = Vec::new();
            for (_, id) in ids {
                let api_version = managed.fields[id].api_version.clone();
                for path in conflicts[id].raw_paths() {
                    out.push(RawConflict {
                        id: id.clone(),
                        api_version: api_version.clone(),
                        path,
                    });
                }
            }
            return Err(out);
        }
        for (id, vs) in managed.fields.iter_mut() {
            if id == workflow {
                continue;
            }
            if let Some(c) = conflicts.get(id) {
                vs.set = vs.set.difference(c);
            }
            if !cmp.removed.is_empty() {
                vs.set = vs.set.difference(&cmp.removed);
            }
        }
        managed.fields.retain(|_, vs| !vs.set.is_empty());
        Ok(cmp)
    }

    /// An Update operation (`Updater.Update` + kube's managedFieldsUpdater/strip-meta):
    /// the manager gains what it changed; its time moves only if it gained something.
    fn record(
        &self,
        managed: &mut Managed,
        old: &Value,
        new: &Value,
        id: &ManagerId,
        ignored: &FieldSet,
        now: &str,
    ) {
        let current = ManagerId::update("current-operation", "", None);
        let Ok(cmp) = self.update_managers(managed, old, new, &current, true, ignored) else {
            return; // unreachable: force never conflicts
        };
        let mut changed = cmp.modified;
        changed.union_with(&cmp.added);
        let mut gained = strip_meta(&changed.recursive_difference(ignored));
        if !gained.is_empty() {
            if let Some(previous) = managed.fields.get(id) {
                gained.union_with(&previous.set);
            }
            let set = gained;
            managed.fields.insert(
                id.clone(),
                VersionedSet {
                    set,
                    api_version: id.api_version.clone(),
                },
            );
            managed.times.insert(id.clone(), now.to_string());
        }
        cap_update_managers(managed);
    }

    /// `Updater.prune` with its add-back steps: a field the applier applied last time
    /// and not this time is removed, unless some manager (or the new config) owns it.
    fn prune(&self, merged: &Value, managed: &Managed, last: &FieldSet) -> Value {
        if last.is_empty() {
            return merged.clone();
        }
        let last = last.ensure_named();
        let pruned = self.remove_from(merged, &last);
        let owned = managed
            .fields
            .values()
            .fold(FieldSet::default(), |acc, vs| acc.union(&vs.set))
            .ensure_named();
        let merged_set = self.to_field_set(merged).ensure_named();
        let pruned_set = self.to_field_set(&pruned).ensure_named();
        let pruned = self.remove_from(merged, &merged_set.difference(&pruned_set.union(&owned)));
        let pruned_set = self.to_field_set(&pruned).ensure_named();
        self.remove_from(
            merged,
            &merged_set.difference(&pruned_set).intersection(&last),
        )
    }

    /// One apply attempt (`Updater.Apply` wrapped in kube's skip-non-applied,
    /// strip-meta and managedFieldsUpdater). Returns the new object and managers.
    fn apply_once(
        &self,
        live: Option<&Value>,
        managed: &Managed,
        config: &Value,
        call: &ApplyCall<'_>,
        force: bool,
    ) -> Result<(Value, Managed), Vec<RawConflict>> {
        let (id, api_version, now) = (&call.id, call.api_version, call.now);
        let mut managed = managed.clone();
        let ignored = ignored_fields(self.keys, call.subresource);
        let base = live.cloned().unwrap_or_else(|| Value::Object(Map::new()));
        if managed.fields.is_empty()
            && let Some(live) = live
        {
            // Everything already there belongs to "before-first-apply".
            let bfa = ManagerId::update(BEFORE_FIRST_APPLY, api_version, call.subresource);
            self.record(
                &mut managed,
                &Value::Object(Map::new()),
                live,
                &bfa,
                &ignored,
                now,
            );
        }
        // The strategy resets these fields, so applying them has no effect.
        let mut config = config.clone();
        if let Some(m) = config.as_object_mut() {
            for pe in &ignored.members {
                if let Pe::Field(field) = pe {
                    m.remove(field);
                }
            }
        }
        let mut merged = self.merge(&base, &config);
        if let Some(live) = live {
            restore_server_metadata(&mut merged, live);
        }
        let last = managed
            .fields
            .get(id)
            .map(|vs| vs.set.clone())
            .unwrap_or_default();
        let set = self.to_field_set(&config).recursive_difference(&ignored);
        managed.fields.insert(
            id.clone(),
            VersionedSet {
                set,
                api_version: api_version.to_string(),
            },
        );
        let pruned = self.prune(&merged, &managed, &last);
        self.update_managers(&mut managed, &base, &pruned, id, force, &ignored)?;
        if let Some(vs) = managed.fields.get_mut(id) {
            vs.set = strip_meta(&vs.set);
            if vs.set.is_empty() {
                managed.fields.remove(id);
            }
        }
        let mut object = pruned;
        strip_new_nulls(&mut object, Some(&base));
        if value_eq(&object, &base) {
            object = base;
        } else {
            managed.times.insert(id.clone(), now.to_string());
        }
        Ok((object, managed))
    }

    /// kube's lastAppliedManager: fields the client-side-apply annotation still
    /// describes exactly may be taken over by `kubectl apply --server-side`.
    fn allowed_from_last_applied(&self, live: &Value, api_version: &str) -> Option<FieldSet> {
        let text = live
            .get("metadata")?
            .get("annotations")?
            .get(LAST_APPLIED_ANNOTATION)?
            .as_str()?;
        if text.is_empty() {
            return None;
        }
        let last: Value = serde_json::from_str(text).ok()?;
        if !last.is_object() || last.get("apiVersion").and_then(Value::as_str) != Some(api_version)
        {
            return None;
        }
        let set = self.to_field_set(&last);
        let cmp = self.compare(&last, live);
        Some(
            set.difference(&cmp.modified)
                .difference(&cmp.added)
                .difference(&cmp.removed),
        )
    }
}

/// ObjectMeta fields the server sets. An applied configuration cannot change them on
/// an existing object (kube's registry restores them in `BeforeUpdate`), so
/// `creationTimestamp: null` from a generated manifest leaves the live value alone.
const SERVER_METADATA: [&str; 7] = [
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

fn restore_server_metadata(merged: &mut Value, live: &Value) {
    let live_meta = live.get("metadata").and_then(Value::as_object);
    if let Some(meta) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in SERVER_METADATA {
            match live_meta.and_then(|m| m.get(field)) {
                Some(v) => {
                    meta.insert(field.to_string(), v.clone());
                }
                None => {
                    meta.remove(field);
                }
            }
        }
    }
}

/// Drops nulls the merge introduced (kube's typed round trip drops them), keeping
/// nulls the live object already had at the same place.
fn strip_new_nulls(v: &mut Value, live: Option<&Value>) {
    match v {
        Value::Object(m) => {
            let lm = live.and_then(Value::as_object);
            m.retain(|k, child| {
                !child.is_null() || lm.and_then(|l| l.get(k)).is_some_and(Value::is_null)
            });
            for (k, child) in m.iter_mut() {
                strip_new_nulls(child, lm.and_then(|l| l.get(k)));
            }
        }
        Value::Array(items) => {
            let ll = live.and_then(Value::as_array);
            let mut i = 0;
            items.retain(|item| {
                let keep = !item.is_null() || ll.and_then(|l| l.get(i)).is_some_and(Value::is_null);
                i += 1;
                keep
            });
            for (i, item) in items.iter_mut().enumerate() {
                let same = ll.and_then(|l| l.get(i)).filter(|l| value_eq(l, item));
                if same.is_none() {
                    strip_new_nulls(item, None);
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------------

use crate::apiserver::http::table::duration::{civil_from_days, days_from_civil};

/// Seconds since the epoch of an RFC 3339 timestamp.
fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let o = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if *sign == b'+' { o } else { -o }
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

/// metav1.Time's encoding: RFC 3339 in UTC with whole seconds.
fn normalize_time(s: &str) -> String {
    match parse_rfc3339(s) {
        Some(t) => {
            let (y, m, d) = civil_from_days(t.div_euclid(86_400));
            let secs = t.rem_euclid(86_400);
            format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
                secs / 3600,
                secs / 60 % 60,
                secs % 60
            )
        }
        None => s.to_string(),
    }
}

// ---------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------

/// Every field an applied configuration sets, as the applier would own it: leaves,
/// list/set items (`.` entries), empty maps and nulls; without `apiVersion`, `kind`,
/// server-set metadata (name, namespace, uid, resourceVersion, generation,
/// creationTimestamp, selfLink, managedFields) and, when status is a subresource,
/// `status`.
pub fn fields_of(object: &Value, keys: &dyn ListKeys) -> FieldSet {
    let ctx = Ctx {
        keys,
        skip_managed_fields: false,
    };
    let set = ctx.to_field_set(&without_managed_fields(object));
    strip_meta(&set.recursive_difference(&ignored_fields(keys, None)))
}

/// What an Update from `old` to `new` changed (added or modified paths, including
/// added maps and list items), with the same exclusions as [`fields_of`].
pub fn changed_fields(old: &Value, new: &Value, keys: &dyn ListKeys) -> FieldSet {
    let ctx = Ctx {
        keys,
        skip_managed_fields: false,
    };
    let cmp = ctx.compare(&without_managed_fields(old), &without_managed_fields(new));
    strip_meta(
        &cmp.modified
            .union(&cmp.added)
            .recursive_difference(&ignored_fields(keys, None)),
    )
}

/// The outcome of a server-side apply.
#[derive(Debug, Clone, PartialEq)]
pub struct ApplyResult {
    /// The object to store, `metadata.managedFields` included (absent when empty).
    pub object: Value,
    /// The new `metadata.managedFields` array (empty: the field is to be omitted).
    pub managed_fields: Value,
}

/// One field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager's name.
    pub manager: String,
    /// Its operation: `"Apply"` or `"Update"`.
    pub operation: String,
    /// The apiVersion of its managedFields entry.
    pub api_version: String,
    /// Its subresource (`"status"`), if any.
    pub subresource: Option<String>,
    /// The field, in kube's notation: `.spec.replicas`,
    /// `.spec.template.spec.containers[name="nginx"].image`.
    pub path: String,
}

impl Conflict {
    /// kube's `printManager`: `"kubectl-client-side-apply" using apps/v1`,
    /// `"kube-controller-manager" with subresource "status" using apps/v1`, `"helm"`.
    pub fn describe_manager(&self) -> String {
        let mut out = go_quote(&self.manager);
        if let Some(sub) = self.subresource.as_deref().filter(|s| !s.is_empty()) {
            let _ = write!(out, " with subresource {}", go_quote(sub));
        }
        if self.operation == "Update" {
            let _ = write!(out, " using {}", self.api_version);
        }
        out
    }

    /// The `StatusCause` message: `conflict with "x" using apps/v1`.
    pub fn cause_message(&self) -> String {
        format!("conflict with {}", self.describe_manager())
    }

    fn identifier(&self) -> String {
        identifier_json(
            &self.manager,
            &self.operation,
            &self.api_version,
            self.subresource.as_deref().unwrap_or(""),
        )
    }
}

fn conflicts_message(conflicts: &[Conflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.describe_manager(),
            only.path
        );
    }
    let mut groups: BTreeMap<String, (String, Vec<&str>)> = BTreeMap::new();
    for c in conflicts {
        groups
            .entry(c.identifier())
            .or_insert_with(|| (c.describe_manager(), Vec::new()))
            .1
            .push(&c.path);
    }
    let mut lines = Vec::new();
    for (describe, paths) in groups.values() {
        lines.push(format!("conflicts with {describe}:"));
        lines.extend(paths.iter().map(|p| format!("- {p}")));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Why an apply was refused.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change (HTTP 409, reason Conflict).
    #[error("{}", conflicts_message(.0))]
    Conflicts(Vec<Conflict>),
    /// The request cannot be applied (HTTP 400 / 422).
    #[error("{0}")]
    Invalid(String),
}

fn validate_field_manager(manager: &str) -> Result<(), ApplyError> {
    if manager.is_empty() {
        return Err(ApplyError::Invalid(
            "fieldManager: Required value: is required for apply patch".into(),
        ));
    }
    if manager.len() > FIELD_MANAGER_MAX_LENGTH {
        return Err(ApplyError::Invalid(format!(
            "fieldManager: Too long: may not be more than {FIELD_MANAGER_MAX_LENGTH} bytes"
        )));
    }
    if let Some((i, c)) = manager.char_indices().find(|(_, c)| !go_is_print(*c)) {
        return Err(ApplyError::Invalid(format!(
            "fieldManager: Invalid value: {}: invalid character U+{:04X} (at position {i})",
            go_quote(manager),
            c as u32
        )));
    }
    Ok(())
}

fn gvk_string(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    format!("{group}/{version}, Kind={kind}")
}

/// kube's lastAppliedUpdater's annotation value: the applied object without the
/// annotation itself, as Go's JSON encoder writes it (trailing newline included).
fn build_last_applied(applied: &Value) -> String {
    let mut obj = applied.clone();
    if let Some(annotations) = obj
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
    let mut out = String::new();
    go_json(&obj, &mut out);
    out.push('\n');
    out
}

fn sync_last_applied(object: &mut Value, applied: &Value) {
    let Some(annotations) = object
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if annotations
        .get(LAST_APPLIED_ANNOTATION)
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return;
    }
    annotations.insert(
        LAST_APPLIED_ANNOTATION.into(),
        Value::from(build_last_applied(applied)),
    );
    let size: usize = annotations
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if size > TOTAL_ANNOTATION_SIZE_LIMIT {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

fn with_managed_fields(mut object: Value, managed_fields: &Value) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if managed_fields.as_array().is_some_and(|a| !a.is_empty()) {
            meta.insert("managedFields".into(), managed_fields.clone());
        } else {
            meta.remove("managedFields");
        }
    }
    object
}

/// Server-side apply of `applied` by `manager` (a PATCH with
/// `application/apply-patch+yaml`), against `live` (`None`: the object is created).
///
/// Applied values override live ones (maps merge, associative lists merge by key,
/// atomic lists replace); fields the applier owned before and no longer applies are
/// removed unless another manager owns them; a field owned by another manager whose
/// value would change is a conflict (with `force`, its ownership moves to the
/// applier). Re-applying the same configuration changes nothing, not even the time.
/// `status` in the configuration is ignored when it is a subresource.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    api_version: &str,
    force: bool,
    keys: &dyn ListKeys,
    now_rfc3339: &str,
) -> Result<ApplyResult, ApplyError> {
    apply_impl(
        live,
        applied,
        manager,
        api_version,
        force,
        keys,
        now_rfc3339,
        None,
    )
}

/// Server-side apply to a subresource of an existing object (`PATCH .../status` with
/// `application/apply-patch+yaml`): like [`apply`], but the managedFields entry carries
/// `"subresource"`, and `spec` in the configuration is ignored (for `status`) instead
/// of `status`.
#[allow(clippy::too_many_arguments)]
pub fn apply_subresource(
    live: &Value,
    applied: &Value,
    manager: &str,
    api_version: &str,
    force: bool,
    keys: &dyn ListKeys,
    now_rfc3339: &str,
    subresource: &str,
) -> Result<ApplyResult, ApplyError> {
    let subresource = (!subresource.is_empty()).then_some(subresource);
    apply_impl(
        Some(live),
        applied,
        manager,
        api_version,
        force,
        keys,
        now_rfc3339,
        subresource,
    )
}

#[allow(clippy::too_many_arguments)]
fn apply_impl(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    api_version: &str,
    force: bool,
    keys: &dyn ListKeys,
    now_rfc3339: &str,
    subresource: Option<&str>,
) -> Result<ApplyResult, ApplyError> {
    validate_field_manager(manager)?;
    let Some(config) = applied.as_object() else {
        return Err(ApplyError::Invalid(
            "error decoding patch: the apply configuration must be an object".into(),
        ));
    };
    let text = |v: Option<&Value>, k: &str| {
        v.and_then(|v| v.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (patch_version, patch_kind) = (
        text(Some(applied), "apiVersion"),
        text(Some(applied), "kind"),
    );
    let live_kind = text(live, "kind");
    if patch_version != api_version || (!live_kind.is_empty() && patch_kind != live_kind) {
        return Err(ApplyError::Invalid(format!(
            "invalid object type: {}",
            gvk_string(&patch_version, &patch_kind)
        )));
    }
    if config
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .is_some_and(|v| !v.is_null())
    {
        return Err(ApplyError::Invalid(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let ctx = Ctx {
        keys,
        skip_managed_fields: false,
    };
    let mut errs = Vec::new();
    ctx.validate(applied, &mut Vec::new(), &mut Vec::new(), &mut errs);
    if !errs.is_empty() {
        let meta = applied.get("metadata");
        return Err(ApplyError::Invalid(format!(
            "failed to create typed patch object ({}/{}; {}): {}",
            text(meta, "namespace"),
            text(meta, "name"),
            gvk_string(&patch_version, &patch_kind),
            errs.join("\n")
        )));
    }

    let now = normalize_time(now_rfc3339);
    let managed = match live {
        Some(l) => decode_managed(managed_fields_of(l))
            .map_err(|e| ApplyError::Invalid(format!("failed to decode managed fields: {e}")))?,
        None => Managed::default(),
    };
    let live_obj = live.map(without_managed_fields);
    let call = ApplyCall {
        id: ManagerId::apply(manager, subresource),
        api_version,
        subresource,
        now: &now,
    };
    let attempt = |force: bool| ctx.apply_once(live_obj.as_ref(), &managed, applied, &call, force);
    let (mut object, managed) = match attempt(force) {
        Ok(done) => done,
        Err(conflicts) => {
            // The client-side apply -> server-side apply upgrade path.
            let allowed = match live {
                Some(l) if manager == KUBECTL_SSA_MANAGER => {
                    ctx.allowed_from_last_applied(l, api_version)
                }
                _ => None,
            };
            let remaining: Vec<RawConflict> = match &allowed {
                Some(allowed) => conflicts
                    .into_iter()
                    .filter(|c| !allowed.has(&c.path))
                    .collect(),
                None => conflicts,
            };
            if !remaining.is_empty() {
                return Err(ApplyError::Conflicts(
                    remaining
                        .into_iter()
                        .map(|c| Conflict {
                            manager: c.id.manager,
                            operation: c.id.operation.as_str().to_string(),
                            api_version: c.api_version,
                            subresource: (!c.id.subresource.is_empty()).then_some(c.id.subresource),
                            path: path_string(&c.path),
                        })
                        .collect(),
                ));
            }
            attempt(true)
                .map_err(|_| ApplyError::Invalid("conflicts after a forced apply".into()))?
        }
    };
    if manager == KUBECTL_SSA_MANAGER {
        sync_last_applied(&mut object, applied);
    }
    let managed_fields = encode_managed(&managed);
    Ok(ApplyResult {
        object: with_managed_fields(object, &managed_fields),
        managed_fields,
    })
}

fn is_reset_managed_fields(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Array(entries)) => match entries.as_slice() {
            [] => true,
            [only] => only.as_object().is_some_and(|m| {
                m.values().all(|v| {
                    v.is_null()
                        || v.as_str() == Some("")
                        || v.as_object().is_some_and(Map::is_empty)
                })
            }),
            _ => false,
        },
        _ => false,
    }
}

/// The new `metadata.managedFields` after a create, update or (non-apply) patch by
/// `manager` (operation "Update", plus `"subresource"` for subresource writes).
///
/// The manager gains every field it changed (on a create: every field of the object
/// except `status` and server-set metadata); other managers lose those fields, and
/// everybody loses removed fields. Like kube, managedFields sent in `new` replace the
/// live ones (`[]` or `[{}]` clears them), and an existing object without
/// managedFields stays untracked (the result is `[]`: omit the field).
pub fn record_update(
    old: Option<&Value>,
    new: &Value,
    manager: &str,
    api_version: &str,
    keys: &dyn ListKeys,
    now_rfc3339: &str,
    subresource: Option<&str>,
) -> Value {
    let manager = if manager.is_empty() {
        "unknown"
    } else {
        manager
    };
    let subresource = subresource.filter(|s| !s.is_empty());
    let live_managed = || {
        old.and_then(|o| decode_managed(managed_fields_of(o)).ok())
            .unwrap_or_default()
    };
    let mut managed = if subresource.is_some() {
        live_managed()
    } else {
        let sent = managed_fields_of(new);
        if is_reset_managed_fields(sent) {
            Managed::default()
        } else {
            match decode_managed(sent) {
                Ok(m) if !m.fields.is_empty() => m,
                _ => live_managed(),
            }
        }
    };
    if managed.fields.is_empty() && old.is_some() {
        return Value::Array(Vec::new());
    }
    let ctx = Ctx {
        keys,
        skip_managed_fields: true,
    };
    let empty = Value::Object(Map::new());
    let id = ManagerId::update(manager, api_version, subresource);
    let ignored = ignored_fields(keys, subresource);
    ctx.record(
        &mut managed,
        old.unwrap_or(&empty),
        new,
        &id,
        &ignored,
        &normalize_time(now_rfc3339),
    );
    encode_managed(&managed)
}

/// kube's default field manager for non-apply requests without `fieldManager`: the
/// user agent up to the first `/`, non-printable characters dropped, at most 128
/// bytes ("kubectl" from "kubectl/v1.32.0 (linux/amd64) kubernetes/abc"); "unknown"
/// when that leaves nothing.
pub fn default_manager(user_agent: Option<&str>) -> String {
    let prefix = user_agent
        .unwrap_or_default()
        .split('/')
        .next()
        .unwrap_or_default();
    let mut out = String::new();
    for c in prefix.chars().filter(|c| go_is_print(*c)) {
        if out.len() + c.len_utf8() > FIELD_MANAGER_MAX_LENGTH {
            break;
        }
        out.push(c);
    }
    if out.is_empty() {
        "unknown".into()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T1: &str = "2024-05-01T10:00:00Z";
    const T2: &str = "2024-05-01T11:00:00Z";
    const T3: &str = "2024-05-01T12:00:00Z";

    /// Pod/Deployment list semantics, as the schema module would answer.
    struct TestKeys;

    impl ListKeys for TestKeys {
        fn list_keys(&self, path: &[&str]) -> Option<Vec<&'static str>> {
            match path {
                [.., "containers" | "initContainers", "ports"] => {
                    Some(vec!["containerPort", "protocol"])
                }
                [.., "containers" | "initContainers" | "env" | "volumes"] => Some(vec!["name"]),
                [.., "conditions"] => Some(vec!["type"]),
                _ => None,
            }
        }
        fn is_set(&self, path: &[&str]) -> bool {
            path == ["metadata", "finalizers"]
        }
        fn is_atomic_map(&self, path: &[&str]) -> bool {
            path == ["spec", "selector"]
        }
    }

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "nginx", "image": image}]}
                }
            }
        })
    }

    /// What the store would hold: server-set metadata plus managedFields.
    fn stored(mut object: Value, managed_fields: &Value) -> Value {
        let meta = object["metadata"].as_object_mut().unwrap();
        meta.insert("uid".into(), json!("0b5a3c9e-1111-2222-3333-444455556666"));
        meta.insert("resourceVersion".into(), json!("42"));
        meta.insert("creationTimestamp".into(), json!(T1));
        if managed_fields.as_array().is_some_and(|a| !a.is_empty()) {
            meta.insert("managedFields".into(), managed_fields.clone());
        } else {
            meta.remove("managedFields");
        }
        object
    }

    fn entry<'a>(mf: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
        mf.as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == manager && e["operation"] == operation)
    }

    fn owned(mf: &Value, manager: &str, operation: &str) -> Vec<String> {
        entry(mf, manager, operation)
            .map(|e| FieldSet::from_fields_v1(&e["fieldsV1"]).unwrap().paths())
            .unwrap_or_default()
    }

    fn apply_ok(live: Option<&Value>, applied: &Value, manager: &str, now: &str) -> ApplyResult {
        apply(live, applied, manager, "apps/v1", false, &TestKeys, now).unwrap()
    }

    fn conflicts(err: ApplyError) -> Vec<Conflict> {
        match err {
            ApplyError::Conflicts(c) => c,
            other => panic!("expected conflicts, got {other}"),
        }
    }

    /// A real kube-apiserver pod (`kubectl run ngx --image=nginx`, v1.26): the
    /// fieldsV1 strings exactly as the server returned them.
    const POD_RUN_FIELDS: &str = r#"{"f:metadata":{"f:labels":{".":{},"f:run":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"ngx\"}":{".":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}"#;
    const POD_KUBELET_FIELDS: &str = r#"{"f:status":{"f:conditions":{"k:{\"type\":\"ContainersReady\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Initialized\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},"f:containerStatuses":{},"f:hostIP":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},"k:{\"ip\":\"10.244.0.3\"}":{".":{},"f:ip":{}}},"f:startTime":{}}}"#;
    /// `kubectl create deployment nginx --image=nginx` and the deployment controller.
    const DEPLOYMENT_CREATE_FIELDS: &str = r#"{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:progressDeadlineSeconds":{},"f:replicas":{},"f:revisionHistoryLimit":{},"f:selector":{},"f:strategy":{"f:rollingUpdate":{".":{},"f:maxSurge":{},"f:maxUnavailable":{}},"f:type":{}},"f:template":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{".":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}}}"#;
    const DEPLOYMENT_KCM_FIELDS: &str = r#"{"f:metadata":{"f:annotations":{".":{},"f:deployment.kubernetes.io/revision":{}}},"f:status":{"f:availableReplicas":{},"f:conditions":{".":{},"k:{\"type\":\"Available\"}":{".":{},"f:lastTransitionTime":{},"f:lastUpdateTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Progressing\"}":{".":{},"f:lastTransitionTime":{},"f:lastUpdateTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:observedGeneration":{},"f:readyReplicas":{},"f:replicas":{},"f:updatedReplicas":{}}}"#;
    const PORTS_FIELDS: &str = r#"{"f:spec":{"f:containers":{"k:{\"name\":\"easyspark\"}":{".":{},"f:ports":{".":{},"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:protocol":{}}}}}},"f:metadata":{"f:finalizers":{".":{},"v:\"example.com/a\"":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"4d451b5a-c85c-4949-8154-cec202f4f09f\"}":{}}}}"#;

    #[test]
    fn fields_v1_round_trips_real_kube_samples() {
        for sample in [
            POD_RUN_FIELDS,
            POD_KUBELET_FIELDS,
            DEPLOYMENT_CREATE_FIELDS,
            DEPLOYMENT_KCM_FIELDS,
        ] {
            let value: Value = serde_json::from_str(sample).unwrap();
            let set = FieldSet::from_fields_v1(&value).unwrap();
            assert!(!set.is_empty());
            assert_eq!(set.to_fields_v1(), value);
            assert_eq!(set.to_fields_v1_string(), sample, "byte-exact re-encoding");
        }
        // kube writes fields before keys and values; reading normalizes order.
        let value: Value = serde_json::from_str(PORTS_FIELDS).unwrap();
        let set = FieldSet::from_fields_v1(&value).unwrap();
        assert_eq!(set.to_fields_v1(), value);
        assert_eq!(
            set.paths(),
            vec![
                ".metadata.finalizers",
                ".metadata.ownerReferences",
                ".metadata.finalizers[=\"example.com/a\"]",
                ".metadata.ownerReferences[uid=\"4d451b5a-c85c-4949-8154-cec202f4f09f\"]",
                ".spec.containers[name=\"easyspark\"]",
                ".spec.containers[name=\"easyspark\"].ports",
                ".spec.containers[name=\"easyspark\"].ports[containerPort=8080,protocol=\"TCP\"]",
                ".spec.containers[name=\"easyspark\"].ports[containerPort=8080,protocol=\"TCP\"].containerPort",
                ".spec.containers[name=\"easyspark\"].ports[containerPort=8080,protocol=\"TCP\"].protocol",
            ]
        );
    }

    #[test]
    fn fields_v1_reading_rules() {
        // A key with only unknown element types inside is a member; unknown keys are dropped.
        let set =
            FieldSet::from_fields_v1(&json!({"f:a": {"z:future": {}}, "z:other": {}})).unwrap();
        assert_eq!(set.to_fields_v1(), json!({"f:a": {}}));
        // Key fields are sorted whatever order they were written in.
        let set =
            FieldSet::from_fields_v1(&json!({"k:{\"protocol\":\"TCP\",\"port\":80}": {}})).unwrap();
        assert_eq!(
            set.to_fields_v1_string(),
            r#"{"k:{\"port\":80,\"protocol\":\"TCP\"}":{}}"#
        );
        assert_eq!(set.paths(), vec!["[port=80,protocol=\"TCP\"]"]);
        // Index elements and HTML-safe escaping as Go writes them.
        let set = FieldSet::from_fields_v1(&json!({"i:3": {}, "v:\"a<b\"": {}})).unwrap();
        assert_eq!(
            set.to_fields_v1_string(),
            r#"{"v:\"a\\u003cb\"":{},"i:3":{}}"#
        );
        assert_eq!(
            FieldSet::from_fields_v1(&json!({})).unwrap(),
            FieldSet::default()
        );
        assert!(FieldSet::from_fields_v1(&json!({"x": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"fa": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"k:[1]": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_err());
        assert!(FieldSet::from_fields_v1(&json!([])).is_err());
    }

    #[test]
    fn set_operations() {
        let a =
            FieldSet::from_fields_v1(&json!({"f:spec": {"f:a": {}, "f:b": {"f:c": {}}}})).unwrap();
        let b = FieldSet::from_fields_v1(&json!({"f:spec": {"f:b": {}, "f:d": {}}})).unwrap();
        assert_eq!(
            a.union(&b).to_fields_v1(),
            json!({"f:spec": {"f:a": {}, "f:b": {".": {}, "f:c": {}}, "f:d": {}}})
        );
        assert_eq!(
            a.difference(&b).to_fields_v1(),
            json!({"f:spec": {"f:a": {}, "f:b": {"f:c": {}}}})
        );
        assert_eq!(
            a.recursive_difference(&b).to_fields_v1(),
            json!({"f:spec": {"f:a": {}}})
        );
        assert!(a.intersection(&b).is_empty());
        assert_eq!(a.intersection(&a), a);
        assert!(a.difference(&a).is_empty());
    }

    #[test]
    fn fields_of_an_applied_pod() {
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "nginx", "namespace": "default", "uid": "x", "resourceVersion": "1",
                         "creationTimestamp": null, "labels": {"app": "nginx"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx"}]},
            "status": {"phase": "Running"}
        });
        let set = fields_of(&pod, &TestKeys);
        assert_eq!(
            set.to_fields_v1_string(),
            r#"{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{".":{},"f:image":{},"f:name":{}}}}}"#
        );
        // Empty maps and atomic lists are leaves; empty associative lists own nothing.
        let obj = json!({"spec": {"securityContext": {}, "args": ["a", "b"], "containers": [], "selector": {"matchLabels": {"a": "b"}}}});
        assert_eq!(
            fields_of(&obj, &TestKeys).to_fields_v1(),
            json!({"f:spec": {"f:args": {}, "f:securityContext": {}, "f:selector": {}}})
        );
        // Without status as a subresource, status is an ordinary field.
        struct StatusIsAField;
        impl ListKeys for StatusIsAField {
            fn list_keys(&self, _: &[&str]) -> Option<Vec<&'static str>> {
                None
            }
            fn is_set(&self, _: &[&str]) -> bool {
                false
            }
            fn status_subresource(&self) -> bool {
                false
            }
        }
        assert_eq!(
            fields_of(&json!({"status": {"phase": "x"}}), &StatusIsAField).paths(),
            vec![".status.phase"]
        );
    }

    #[test]
    fn changed_fields_reports_what_an_update_touched() {
        let old = deployment(1, "nginx:1.25");
        let mut new = deployment(2, "nginx:1.25");
        new["metadata"]["labels"]["tier"] = json!("web");
        new["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "sidecar", "image": "busybox"}));
        new["status"] = json!({"replicas": 2});
        let changed = changed_fields(&old, &new, &TestKeys);
        assert_eq!(
            changed.paths(),
            vec![
                ".metadata.labels.tier",
                ".spec.replicas",
                ".spec.template.spec.containers[name=\"sidecar\"]",
                ".spec.template.spec.containers[name=\"sidecar\"].image",
                ".spec.template.spec.containers[name=\"sidecar\"].name",
            ]
        );
        assert!(changed_fields(&old, &old, &TestKeys).is_empty());
    }

    #[test]
    fn first_apply_creates_the_object_and_its_ownership() {
        let config = deployment(3, "nginx:1.25");
        let result = apply_ok(None, &config, "kubectl", T1);
        let mut expected = config.clone();
        expected["metadata"]["managedFields"] = result.managed_fields.clone();
        assert_eq!(result.object, expected);
        assert_eq!(
            result.managed_fields,
            json!([{
                "manager": "kubectl",
                "operation": "Apply",
                "apiVersion": "apps/v1",
                "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:replicas": {},
                        "f:selector": {},
                        "f:template": {
                            "f:metadata": {"f:labels": {"f:app": {}}},
                            "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}}}
                        }
                    }
                }
            }])
        );
    }

    #[test]
    fn reapplying_the_same_configuration_is_a_noop() {
        let config = deployment(3, "nginx:1.25");
        let first = apply_ok(None, &config, "kubectl", T1);
        let live = stored(first.object.clone(), &first.managed_fields);
        let second = apply_ok(Some(&live), &config, "kubectl", T2);
        assert_eq!(second.object, live, "object unchanged");
        assert_eq!(
            second.managed_fields, first.managed_fields,
            "time unchanged"
        );
        let third = apply_ok(
            Some(&stored(second.object, &second.managed_fields)),
            &config,
            "kubectl",
            T3,
        );
        assert_eq!(third.object, live);
    }

    #[test]
    fn a_field_no_longer_applied_is_removed() {
        let mut config = deployment(3, "nginx:1.25");
        config["metadata"]["labels"]["tier"] = json!("frontend");
        config["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "sidecar", "image": "busybox", "args": ["sleep", "1d"]}));
        let first = apply_ok(None, &config, "ci", T1);
        let mut live = stored(first.object, &first.managed_fields);
        // A controller added a label of its own.
        let mut updated = live.clone();
        updated["metadata"]["labels"]["controller-added"] = json!("yes");
        let mf = record_update(
            Some(&live),
            &updated,
            "controller",
            "apps/v1",
            &TestKeys,
            T2,
            None,
        );
        live = stored(updated, &mf);

        let second = apply_ok(Some(&live), &deployment(3, "nginx:1.25"), "ci", T3);
        let labels = &second.object["metadata"]["labels"];
        assert_eq!(labels, &json!({"app": "web", "controller-added": "yes"}));
        let containers = &second.object["spec"]["template"]["spec"]["containers"];
        assert_eq!(
            containers,
            &json!([{"name": "nginx", "image": "nginx:1.25"}])
        );
        assert_eq!(
            second.object["metadata"]["uid"], live["metadata"]["uid"],
            "server fields kept"
        );
        assert!(
            !owned(&second.managed_fields, "ci", "Apply")
                .iter()
                .any(|p| p.contains("sidecar"))
        );
        assert_eq!(
            entry(&second.managed_fields, "ci", "Apply").unwrap()["time"],
            T3
        );
        // Dropping every label the applier owned removes the map it emptied.
        let mut no_labels = deployment(3, "nginx:1.25");
        no_labels["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("labels");
        let third = apply_ok(
            Some(&stored(first_only_ci(&second), &second.managed_fields)),
            &no_labels,
            "ci",
            T3,
        );
        assert!(
            third.object["metadata"].get("labels").is_none(),
            "{}",
            third.object
        );
    }

    /// The object of `r` with the controller's label removed (so "ci" owns every label).
    fn first_only_ci(r: &ApplyResult) -> Value {
        let mut o = r.object.clone();
        o["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("controller-added");
        o
    }

    #[test]
    fn two_appliers_share_a_field_with_the_same_value() {
        let first = apply_ok(None, &deployment(3, "nginx:1.25"), "team-a", T1);
        let live = stored(first.object, &first.managed_fields);
        let other = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": "web", "namespace": "default"},
                           "spec": {"replicas": 3}});
        let second = apply_ok(Some(&live), &other, "team-b", T2);
        assert_eq!(second.object["spec"], live["spec"], "no change");
        assert!(
            owned(&second.managed_fields, "team-a", "Apply")
                .contains(&".spec.replicas".to_string())
        );
        assert_eq!(
            owned(&second.managed_fields, "team-b", "Apply"),
            vec![".spec.replicas"]
        );
        // kube: a manager added by a no-op apply gets no timestamp.
        assert!(
            entry(&second.managed_fields, "team-b", "Apply")
                .unwrap()
                .get("time")
                .is_none()
        );
        // team-a stops applying replicas: team-b still owns it, so it stays.
        let live = stored(second.object, &second.managed_fields);
        let mut config = deployment(3, "nginx:1.25");
        config["spec"].as_object_mut().unwrap().remove("replicas");
        let third = apply_ok(Some(&live), &config, "team-a", T3);
        assert_eq!(third.object["spec"]["replicas"], 3);
        assert!(
            !owned(&third.managed_fields, "team-a", "Apply")
                .contains(&".spec.replicas".to_string())
        );
        // And team-b changing it is no conflict any more.
        let live = stored(third.object, &third.managed_fields);
        let other = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 5}});
        assert_eq!(
            apply_ok(Some(&live), &other, "team-b", T3).object["spec"]["replicas"],
            5
        );
    }

    /// `kubectl create` (or client-side `kubectl apply`): an Update by
    /// kubectl-client-side-apply carrying the last-applied annotation.
    fn client_side_applied(config: &Value) -> Value {
        let mut created = config.clone();
        let mut annotation = String::new();
        go_json(config, &mut annotation);
        annotation.push('\n');
        created["metadata"]["annotations"] = json!({LAST_APPLIED_ANNOTATION: annotation});
        let mf = record_update(
            None,
            &created,
            "kubectl-client-side-apply",
            "apps/v1",
            &TestKeys,
            T1,
            None,
        );
        stored(created, &mf)
    }

    #[test]
    fn applying_over_an_update_manager_conflicts() {
        let live = client_side_applied(&deployment(1, "nginx:1.25"));
        let err = apply(
            Some(&live),
            &deployment(3, "nginx:1.25"),
            "ssa-tool",
            "apps/v1",
            false,
            &TestKeys,
            T2,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.replicas"#
        );
        let c = conflicts(err);
        assert_eq!(
            c,
            vec![Conflict {
                manager: "kubectl-client-side-apply".into(),
                operation: "Update".into(),
                api_version: "apps/v1".into(),
                subresource: None,
                path: ".spec.replicas".into(),
            }]
        );
        assert_eq!(
            c[0].cause_message(),
            r#"conflict with "kubectl-client-side-apply" using apps/v1"#
        );
        // The same values are no conflict: shared ownership.
        let same = apply_ok(Some(&live), &deployment(1, "nginx:1.25"), "ssa-tool", T2);
        assert!(
            owned(&same.managed_fields, "kubectl-client-side-apply", "Update")
                .contains(&".spec.replicas".into())
        );
        assert!(
            owned(&same.managed_fields, "ssa-tool", "Apply").contains(&".spec.replicas".into())
        );
    }

    #[test]
    fn several_conflicts_are_grouped_by_manager() {
        let live = client_side_applied(&deployment(1, "nginx:1.25"));
        let mut scaled = live.clone();
        scaled["metadata"]["labels"]["scaled"] = json!("true");
        let mf = record_update(
            Some(&live),
            &scaled,
            "autoscaler",
            "apps/v1",
            &TestKeys,
            T2,
            None,
        );
        let live = stored(scaled, &mf);
        let mut config = deployment(3, "nginx:1.26");
        config["metadata"]["labels"]["scaled"] = json!("false");
        let err = apply(
            Some(&live),
            &config,
            "ssa-tool",
            "apps/v1",
            false,
            &TestKeys,
            T3,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 3 conflicts: conflicts with \"autoscaler\" using apps/v1:\n\
             - .metadata.labels.scaled\n\
             conflicts with \"kubectl-client-side-apply\" using apps/v1:\n\
             - .spec.replicas\n\
             - .spec.template.spec.containers[name=\"nginx\"].image"
        );
        assert_eq!(conflicts(err).len(), 3);
    }

    #[test]
    fn force_takes_ownership() {
        let live = client_side_applied(&deployment(1, "nginx:1.25"));
        let result = apply(
            Some(&live),
            &deployment(3, "nginx:1.25"),
            "ssa-tool",
            "apps/v1",
            true,
            &TestKeys,
            T2,
        )
        .unwrap();
        assert_eq!(result.object["spec"]["replicas"], 3);
        let csa = owned(
            &result.managed_fields,
            "kubectl-client-side-apply",
            "Update",
        );
        assert!(!csa.contains(&".spec.replicas".to_string()));
        assert!(csa.contains(&".spec.template.spec.containers[name=\"nginx\"].image".to_string()));
        assert!(
            owned(&result.managed_fields, "ssa-tool", "Apply")
                .contains(&".spec.replicas".to_string())
        );
        // The previous owner lost it: it can now be re-applied without force.
        let live = stored(result.object, &result.managed_fields);
        assert!(
            apply(
                Some(&live),
                &deployment(4, "nginx:1.25"),
                "ssa-tool",
                "apps/v1",
                false,
                &TestKeys,
                T3
            )
            .is_ok()
        );
    }

    #[test]
    fn kubectl_server_side_apply_upgrades_from_client_side_apply() {
        // kube's lastAppliedManager: for manager "kubectl", conflicts on fields the
        // last-applied annotation still describes exactly are taken over.
        let live = client_side_applied(&deployment(1, "nginx:1.25"));
        let config = deployment(3, "nginx:1.25");
        let result = apply(
            Some(&live),
            &config,
            "kubectl",
            "apps/v1",
            false,
            &TestKeys,
            T2,
        )
        .unwrap();
        assert_eq!(result.object["spec"]["replicas"], 3);
        assert!(
            owned(&result.managed_fields, "kubectl", "Apply")
                .contains(&".spec.replicas".to_string())
        );
        // The annotation now records the server-side applied configuration.
        let annotation = result.object["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
            .as_str()
            .unwrap();
        assert!(annotation.ends_with('\n'));
        assert_eq!(serde_json::from_str::<Value>(annotation).unwrap(), config);

        // Another field manager gets the conflict.
        let err = apply(
            Some(&live),
            &config,
            "not-kubectl",
            "apps/v1",
            false,
            &TestKeys,
            T2,
        )
        .unwrap_err();
        assert_eq!(conflicts(err).len(), 1);

        // A value somebody else changed since the client-side apply still conflicts.
        let mut scaled = live.clone();
        scaled["spec"]["replicas"] = json!(5);
        let mf = record_update(
            Some(&live),
            &scaled,
            "kubectl-scale",
            "apps/v1",
            &TestKeys,
            T2,
            None,
        );
        let live = stored(scaled, &mf);
        let err = apply(
            Some(&live),
            &config,
            "kubectl",
            "apps/v1",
            false,
            &TestKeys,
            T3,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "kubectl-scale" using apps/v1: .spec.replicas"#
        );
    }

    fn pod(containers: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
               "spec": {"containers": containers}})
    }

    #[test]
    fn associative_lists_merge_by_key_and_render_keys_in_conflicts() {
        let config = pod(
            json!([{"name": "nginx", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}]),
        );
        let first = apply(None, &config, "app", "v1", false, &TestKeys, T1).unwrap();
        assert_eq!(
            owned(&first.managed_fields, "app", "Apply"),
            vec![
                ".spec.containers[name=\"nginx\"]",
                ".spec.containers[name=\"nginx\"].image",
                ".spec.containers[name=\"nginx\"].name",
                ".spec.containers[name=\"nginx\"].ports[containerPort=80,protocol=\"TCP\"]",
                ".spec.containers[name=\"nginx\"].ports[containerPort=80,protocol=\"TCP\"].containerPort",
            ]
        );
        let mut live = stored(first.object, &first.managed_fields);
        // Defaulting adds protocol; an injector adds a sidecar in front and a port field.
        let mut updated = live.clone();
        updated["spec"]["containers"][0]["ports"][0]["protocol"] = json!("TCP");
        updated["spec"]["containers"][0]["ports"][0]["hostPort"] = json!(8080);
        let containers = updated["spec"]["containers"].as_array_mut().unwrap();
        containers.insert(0, json!({"name": "proxy", "image": "envoy"}));
        let mf = record_update(Some(&live), &updated, "injector", "v1", &TestKeys, T2, None);
        assert_eq!(
            owned(&mf, "injector", "Update"),
            vec![
                ".spec.containers[name=\"proxy\"]",
                ".spec.containers[name=\"nginx\"].ports[containerPort=80,protocol=\"TCP\"].hostPort",
                ".spec.containers[name=\"nginx\"].ports[containerPort=80,protocol=\"TCP\"].protocol",
                ".spec.containers[name=\"proxy\"].image",
                ".spec.containers[name=\"proxy\"].name",
            ]
        );
        live = stored(updated, &mf);

        // Re-applying a new image merges into the nginx item; the sidecar stays in place.
        let config = pod(
            json!([{"name": "nginx", "image": "nginx:1.26", "ports": [{"containerPort": 80}]}]),
        );
        let second = apply(Some(&live), &config, "app", "v1", false, &TestKeys, T3).unwrap();
        assert_eq!(
            second.object["spec"]["containers"],
            json!([
                {"name": "proxy", "image": "envoy"},
                {"name": "nginx", "image": "nginx:1.26",
                 "ports": [{"containerPort": 80, "protocol": "TCP", "hostPort": 8080}]}
            ])
        );
        // Changing a field of the sidecar conflicts, with the item key in the path.
        let config = pod(json!([
            {"name": "nginx", "image": "nginx:1.25", "ports": [{"containerPort": 80, "hostPort": 9090}]},
            {"name": "proxy", "image": "envoy:v2"}
        ]));
        let err = apply(Some(&live), &config, "app", "v1", false, &TestKeys, T3).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 2 conflicts: conflicts with \"injector\" using v1:\n\
             - .spec.containers[name=\"nginx\"].ports[containerPort=80,protocol=\"TCP\"].hostPort\n\
             - .spec.containers[name=\"proxy\"].image"
        );
    }

    #[test]
    fn atomic_lists_and_maps_are_replaced_whole() {
        let mut config = deployment(1, "nginx:1.25");
        config["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["a", "b"]);
        let first = apply_ok(None, &config, "app", T1);
        let live = stored(first.object, &first.managed_fields);
        config["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["c"]);
        config["spec"]["selector"] = json!({"matchExpressions": []});
        let second = apply_ok(Some(&live), &config, "app", T2);
        let spec = &second.object["spec"];
        assert_eq!(
            spec["template"]["spec"]["containers"][0]["args"],
            json!(["c"])
        );
        assert_eq!(spec["selector"], json!({"matchExpressions": []}));
    }

    #[test]
    fn set_lists_merge_item_by_item() {
        let base = |finalizers: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "namespace": "default", "finalizers": finalizers}})
        };
        let first = apply(
            None,
            &base(json!(["a.example.com/x"])),
            "one",
            "v1",
            false,
            &TestKeys,
            T1,
        )
        .unwrap();
        let live = stored(first.object, &first.managed_fields);
        let second = apply(
            Some(&live),
            &base(json!(["b.example.com/y"])),
            "two",
            "v1",
            false,
            &TestKeys,
            T2,
        )
        .unwrap();
        assert_eq!(
            second.object["metadata"]["finalizers"],
            json!(["a.example.com/x", "b.example.com/y"])
        );
        let two = entry(&second.managed_fields, "two", "Apply").unwrap();
        assert_eq!(
            two["fieldsV1"],
            json!({"f:metadata": {"f:finalizers": {"v:\"b.example.com/y\"": {}}}})
        );
        // "one" drops its finalizer: only that item goes.
        let live = stored(second.object, &second.managed_fields);
        let mut config = base(json!([]));
        config["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("finalizers");
        let third = apply(Some(&live), &config, "one", "v1", false, &TestKeys, T3).unwrap();
        assert_eq!(
            third.object["metadata"]["finalizers"],
            json!(["b.example.com/y"])
        );
        assert!(
            entry(&third.managed_fields, "one", "Apply").is_none(),
            "empty managers are dropped"
        );
        // NoKeys still treats ObjectMeta's finalizers as a set.
        let nk = apply(
            Some(&live),
            &base(json!(["c.example.com/z"])),
            "three",
            "v1",
            false,
            &NoKeys,
            T3,
        )
        .unwrap();
        assert_eq!(
            nk.object["metadata"]["finalizers"]
                .as_array()
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn record_update_on_create_owns_everything_but_status_and_server_metadata() {
        let mut created = deployment(1, "nginx:1.25");
        created["metadata"]["uid"] = json!("u");
        created["metadata"]["creationTimestamp"] = json!(null);
        created["spec"]["strategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}});
        created["spec"]["template"]["spec"]["securityContext"] = json!({});
        created["status"] = json!({});
        let mf = record_update(
            None,
            &created,
            "kubectl-create",
            "apps/v1",
            &TestKeys,
            T1,
            None,
        );
        assert_eq!(mf.as_array().unwrap().len(), 1);
        let e = &mf[0];
        assert_eq!(e["manager"], "kubectl-create");
        assert_eq!(e["operation"], "Update");
        assert_eq!(e["apiVersion"], "apps/v1");
        assert_eq!(e["time"], T1);
        assert_eq!(e["fieldsType"], "FieldsV1");
        assert!(e.get("subresource").is_none());
        assert_eq!(
            e["fieldsV1"],
            json!({
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {
                    ".": {},
                    "f:replicas": {},
                    "f:selector": {},
                    "f:strategy": {".": {}, "f:rollingUpdate": {".": {}, "f:maxSurge": {}}, "f:type": {}},
                    "f:template": {
                        ".": {},
                        "f:metadata": {".": {}, "f:labels": {".": {}, "f:app": {}}},
                        "f:spec": {
                            ".": {},
                            "f:containers": {".": {}, "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}},
                            "f:securityContext": {}
                        }
                    }
                }
            })
        );
    }

    #[test]
    fn record_update_moves_changed_fields_to_the_updater() {
        let live = client_side_applied(&deployment(1, "nginx:1.25"));
        let mut scaled = live.clone();
        scaled["spec"]["replicas"] = json!(4);
        let mf = record_update(Some(&live), &scaled, "hpa", "apps/v1", &TestKeys, T2, None);
        assert_eq!(owned(&mf, "hpa", "Update"), vec![".spec.replicas"]);
        assert_eq!(entry(&mf, "hpa", "Update").unwrap()["time"], T2);
        let csa = entry(&mf, "kubectl-client-side-apply", "Update").unwrap();
        assert_eq!(csa["time"], T1, "the loser keeps its time");
        assert!(
            !owned(&mf, "kubectl-client-side-apply", "Update")
                .contains(&".spec.replicas".to_string())
        );
        // Entries sort by time within an operation.
        assert_eq!(mf[0]["manager"], "kubectl-client-side-apply");
        assert_eq!(mf[1]["manager"], "hpa");

        // An update that changes nothing leaves everything as it was.
        let live = stored(scaled, &mf);
        let same = record_update(
            Some(&live),
            &live,
            "someone",
            "apps/v1",
            &TestKeys,
            T3,
            None,
        );
        assert_eq!(same, mf);
        // Removing a field takes it from its owners.
        let mut removed = live.clone();
        removed["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("labels");
        let mf = record_update(
            Some(&live),
            &removed,
            "editor",
            "apps/v1",
            &TestKeys,
            T3,
            None,
        );
        assert!(entry(&mf, "editor", "Update").is_none());
        assert!(
            !owned(&mf, "kubectl-client-side-apply", "Update")
                .iter()
                .any(|p| p.starts_with(".metadata.labels"))
        );
    }

    #[test]
    fn status_is_owned_separately_through_the_status_subresource() {
        let first = apply_ok(None, &deployment(1, "nginx:1.25"), "kubectl", T1);
        let live = stored(first.object, &first.managed_fields);
        let mut with_status = live.clone();
        with_status["status"] =
            json!({"replicas": 1, "conditions": [{"type": "Available", "status": "True"}]});
        with_status["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "1"});
        let mf = record_update(
            Some(&live),
            &with_status,
            "kube-controller-manager",
            "apps/v1",
            &TestKeys,
            T2,
            Some("status"),
        );
        let kcm = entry(&mf, "kube-controller-manager", "Update").unwrap();
        assert_eq!(kcm["subresource"], "status");
        assert_eq!(
            kcm["fieldsV1"],
            json!({
                "f:metadata": {"f:annotations": {".": {}, "f:deployment.kubernetes.io/revision": {}}},
                "f:status": {".": {}, "f:conditions": {".": {}, "k:{\"type\":\"Available\"}": {".": {}, "f:status": {}, "f:type": {}}}, "f:replicas": {}}
            })
        );
        // Status in an applied configuration is ignored for the main resource.
        let live = stored(with_status.clone(), &mf);
        let mut config = deployment(1, "nginx:1.25");
        config["status"] = json!({"replicas": 7});
        let result = apply_ok(Some(&live), &config, "kubectl", T3);
        assert_eq!(result.object["status"], with_status["status"]);
        assert!(
            owned(&result.managed_fields, "kubectl", "Apply")
                .iter()
                .all(|p| !p.starts_with(".status"))
        );
        // A conflict with a status-subresource manager names the subresource.
        let c = Conflict {
            manager: "kube-controller-manager".into(),
            operation: "Update".into(),
            api_version: "apps/v1".into(),
            subresource: Some("status".into()),
            path: ".metadata.annotations.x".into(),
        };
        assert_eq!(
            ApplyError::Conflicts(vec![c]).to_string(),
            r#"Apply failed with 1 conflict: conflict with "kube-controller-manager" with subresource "status" using apps/v1: .metadata.annotations.x"#
        );
    }

    #[test]
    fn managed_fields_are_sorted_like_kube() {
        let live = client_side_applied(&deployment(1, "nginx:1.25"));
        let mut config = deployment(1, "nginx:1.25");
        config["metadata"]["labels"]["b"] = json!("1");
        let r = apply_ok(Some(&live), &config, "zeta", T2);
        let live = stored(r.object, &r.managed_fields);
        config["metadata"]["labels"]["a"] = json!("1");
        let r = apply_ok(Some(&live), &config, "alpha", T3);
        let order: Vec<(&str, &str)> = r
            .managed_fields
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["manager"].as_str().unwrap(),
                    e["operation"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            order,
            vec![
                ("zeta", "Apply"),
                ("alpha", "Apply"),
                ("kubectl-client-side-apply", "Update")
            ]
        );
    }

    #[test]
    fn existing_fields_of_an_untracked_object_belong_to_before_first_apply() {
        let live = stored(deployment(1, "nginx:1.25"), &json!([]));
        let err = apply(
            Some(&live),
            &deployment(2, "nginx:1.25"),
            "app",
            "apps/v1",
            false,
            &TestKeys,
            T2,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "before-first-apply" using apps/v1: .spec.replicas"#
        );
        let ok = apply_ok(Some(&live), &deployment(1, "nginx:1.25"), "app", T2);
        assert!(entry(&ok.managed_fields, "before-first-apply", "Update").is_some());
        assert!(entry(&ok.managed_fields, "app", "Apply").is_some());
    }

    #[test]
    fn invalid_apply_requests() {
        let live = client_side_applied(&deployment(1, "nginx:1.25"));
        let invalid = |r: Result<ApplyResult, ApplyError>| match r {
            Err(ApplyError::Invalid(msg)) => msg,
            other => panic!("expected Invalid, got {other:?}"),
        };
        let mut with_mf = deployment(1, "nginx:1.25");
        with_mf["metadata"]["managedFields"] = json!([]);
        assert_eq!(
            invalid(apply(
                Some(&live),
                &with_mf,
                "app",
                "apps/v1",
                false,
                &TestKeys,
                T2
            )),
            "metadata.managedFields must be nil"
        );
        assert_eq!(
            invalid(apply(
                Some(&live),
                &deployment(1, "x"),
                "app",
                "apps/v1beta1",
                false,
                &TestKeys,
                T2
            )),
            "invalid object type: apps/v1, Kind=Deployment"
        );
        assert_eq!(
            invalid(apply(
                Some(&live),
                &deployment(1, "x"),
                "",
                "apps/v1",
                false,
                &TestKeys,
                T2
            )),
            "fieldManager: Required value: is required for apply patch"
        );
        assert!(
            invalid(apply(
                None,
                &deployment(1, "x"),
                "a\u{7}b",
                "apps/v1",
                false,
                &TestKeys,
                T2
            ))
            .contains("U+0007")
        );
        let dup = pod(json!([{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]));
        assert_eq!(
            invalid(apply(None, &dup, "app", "v1", false, &TestKeys, T1)),
            "failed to create typed patch object (default/p; /v1, Kind=Pod): .spec.containers: duplicate entries for key [name=\"a\"]"
        );
        let missing = pod(json!([{"image": "x"}]));
        assert!(
            invalid(apply(None, &missing, "app", "v1", false, &TestKeys, T1))
                .ends_with(".spec.containers: element 0: associative list with keys has an element that omits key field \"name\" (and doesn't have default value)")
        );
        let mut bad_live = live.clone();
        bad_live["metadata"]["managedFields"][0]["operation"] = json!("Delete");
        assert!(
            invalid(apply(
                Some(&bad_live),
                &deployment(1, "x"),
                "app",
                "apps/v1",
                false,
                &TestKeys,
                T2
            ))
            .starts_with("failed to decode managed fields")
        );
    }

    #[test]
    fn applying_null_removes_a_field_and_keeps_ownership() {
        let mut config = deployment(1, "nginx:1.25");
        config["spec"]["minReadySeconds"] = json!(5);
        let first = apply_ok(None, &config, "app", T1);
        let live = stored(first.object, &first.managed_fields);
        config["spec"]["minReadySeconds"] = Value::Null;
        let second = apply_ok(Some(&live), &config, "app", T2);
        assert!(second.object["spec"].get("minReadySeconds").is_none());
        assert!(
            owned(&second.managed_fields, "app", "Apply")
                .contains(&".spec.minReadySeconds".to_string())
        );
        let live = stored(second.object.clone(), &second.managed_fields);
        let third = apply_ok(Some(&live), &config, "app", T3);
        assert_eq!(third.object, live, "re-applying the null is a no-op");
    }

    #[test]
    fn update_managers_are_capped_at_ten() {
        let mut live = client_side_applied(&deployment(1, "nginx:1.25"));
        for i in 0..11 {
            let mut next = live.clone();
            next["metadata"]["labels"][format!("l{i}")] = json!("v");
            let now = format!("2024-05-02T10:00:{i:02}Z");
            let mf = record_update(
                Some(&live),
                &next,
                &format!("writer-{i:02}"),
                "apps/v1",
                &TestKeys,
                &now,
                None,
            );
            live = stored(next, &mf);
        }
        let mf = live["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 10);
        let ancient = entry(
            &live["metadata"]["managedFields"],
            "ancient-changes",
            "Update",
        )
        .unwrap();
        let paths = FieldSet::from_fields_v1(&ancient["fieldsV1"])
            .unwrap()
            .paths();
        assert!(
            paths.contains(&".spec.replicas".to_string()),
            "the client-side apply fields"
        );
        assert!(paths.contains(&".metadata.labels.l0".to_string()));
        assert!(paths.contains(&".metadata.labels.l1".to_string()));
        assert_eq!(ancient["time"], "2024-05-02T10:00:01Z");
        assert!(entry(&live["metadata"]["managedFields"], "writer-00", "Update").is_none());
        assert!(entry(&live["metadata"]["managedFields"], "writer-10", "Update").is_some());
    }

    #[test]
    fn managed_fields_sent_with_an_update_replace_or_reset_the_live_ones() {
        let live = client_side_applied(&deployment(1, "nginx:1.25"));
        let mut reset = live.clone();
        reset["metadata"]["managedFields"] = json!([{}]);
        assert_eq!(
            record_update(Some(&live), &reset, "x", "apps/v1", &TestKeys, T2, None),
            json!([])
        );
        reset["metadata"]["managedFields"] = json!([]);
        assert_eq!(
            record_update(Some(&live), &reset, "x", "apps/v1", &TestKeys, T2, None),
            json!([])
        );
        // An untracked object stays untracked on update...
        let untracked = stored(deployment(1, "nginx:1.25"), &json!([]));
        let changed = stored(deployment(2, "nginx:1.25"), &json!([]));
        assert_eq!(
            record_update(
                Some(&untracked),
                &changed,
                "x",
                "apps/v1",
                &TestKeys,
                T2,
                None
            ),
            json!([])
        );
        // ...but a subresource write ignores managedFields in the request.
        let mut status = live.clone();
        status["metadata"]["managedFields"] = json!([]);
        status["status"] = json!({"replicas": 1});
        let mf = record_update(
            Some(&live),
            &status,
            "kcm",
            "apps/v1",
            &TestKeys,
            T2,
            Some("status"),
        );
        assert_eq!(mf.as_array().unwrap().len(), 2);
        // An empty manager name is "unknown".
        let mut scaled = live.clone();
        scaled["spec"]["replicas"] = json!(2);
        let mf = record_update(Some(&live), &scaled, "", "apps/v1", &TestKeys, T2, None);
        assert!(entry(&mf, "unknown", "Update").is_some());
    }

    #[test]
    fn update_entries_are_per_api_version() {
        let live = client_side_applied(&deployment(1, "nginx:1.25"));
        let mut scaled = live.clone();
        scaled["spec"]["replicas"] = json!(2);
        let mf = record_update(
            Some(&live),
            &scaled,
            "kubectl-client-side-apply",
            "apps/v1beta2",
            &TestKeys,
            T2,
            None,
        );
        let entries: Vec<&str> = mf
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["apiVersion"].as_str().unwrap())
            .collect();
        assert_eq!(entries, vec!["apps/v1", "apps/v1beta2"]);
    }

    #[test]
    fn time_is_normalized_to_utc_seconds() {
        let r = apply(
            None,
            &deployment(1, "x"),
            "app",
            "apps/v1",
            false,
            &TestKeys,
            "2024-05-01T12:00:00.123456+02:00",
        )
        .unwrap();
        assert_eq!(r.managed_fields[0]["time"], "2024-05-01T10:00:00Z");
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2000-03-01T00:00:00Z"), Some(951_868_800));
        assert_eq!(
            normalize_time("2024-02-29T23:59:59-00:30"),
            "2024-03-01T00:29:59Z"
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn default_manager_follows_kube() {
        assert_eq!(
            default_manager(Some("kubectl/v1.32.0 (linux/amd64) kubernetes/abc")),
            "kubectl"
        );
        assert_eq!(
            default_manager(Some(
                "kube-controller-manager/v1.32.0 (linux/amd64) kubernetes/abc/system:serviceaccount:x"
            )),
            "kube-controller-manager"
        );
        assert_eq!(
            default_manager(Some("Go-http-client/1.1")),
            "Go-http-client"
        );
        assert_eq!(default_manager(Some("a\tb\u{0}c")), "abc");
        assert_eq!(default_manager(Some(&"x".repeat(200))), "x".repeat(128));
        assert_eq!(default_manager(Some(&"é".repeat(100))).len(), 128);
        assert_eq!(default_manager(None), "unknown");
        assert_eq!(default_manager(Some("/v1")), "unknown");
    }

    #[test]
    fn value_formatting_matches_go() {
        assert_eq!(go_json_float(80.0), "80");
        assert_eq!(go_json_float(1.5), "1.5");
        assert_eq!(go_json_float(1e21), "1e+21");
        assert_eq!(go_json_float(1e-7), "1e-7");
        assert_eq!(go_fmt_float(1e6), "1e+06");
        assert_eq!(go_fmt_float(0.5), "0.5");
        assert_eq!(go_fmt_float(1e-5), "1e-05");
        assert_eq!(go_quote("a\"b\n"), r#""a\"b\n""#);
        assert_eq!(value_to_string(&json!(true)), "true");
        assert!(value_eq(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
        assert_eq!(cmp_values(&json!(1), &json!("a")), Ordering::Less);
        assert_eq!(cmp_values(&json!(null), &json!({})), Ordering::Greater);
    }

    #[test]
    fn server_set_metadata_in_an_applied_config_is_ignored() {
        let first = apply_ok(None, &deployment(1, "nginx:1.25"), "app", T1);
        let live = stored(first.object, &first.managed_fields);
        let mut config = deployment(1, "nginx:1.25");
        config["metadata"]["creationTimestamp"] = Value::Null;
        config["metadata"]["uid"] = json!("someone-else");
        let again = apply_ok(Some(&live), &config, "app", T2);
        assert_eq!(
            again.object, live,
            "no-op: live uid and creationTimestamp kept"
        );
        // On create, a null creationTimestamp is simply dropped.
        let created = apply_ok(None, &config, "app", T1);
        assert!(
            created.object["metadata"]
                .get("creationTimestamp")
                .is_none()
        );
        assert!(
            !owned(&created.managed_fields, "app", "Apply")
                .iter()
                .any(|p| p.contains("creationTimestamp"))
        );
    }

    #[test]
    fn custom_resources_without_list_info_replace_lists() {
        let cr = |items: Value| {
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                   "metadata": {"name": "w", "namespace": "default"},
                   "spec": {"items": items, "size": {"cpu": 1}}})
        };
        let first = apply(
            None,
            &cr(json!([{"name": "a"}, {"name": "b"}])),
            "app",
            "example.com/v1",
            false,
            &NoKeys,
            T1,
        )
        .unwrap();
        assert_eq!(
            entry(&first.managed_fields, "app", "Apply").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:items": {}, "f:size": {"f:cpu": {}}}})
        );
        let live = stored(first.object, &first.managed_fields);
        let second = apply(
            Some(&live),
            &cr(json!([{"name": "c"}])),
            "app",
            "example.com/v1",
            false,
            &NoKeys,
            T2,
        )
        .unwrap();
        assert_eq!(second.object["spec"]["items"], json!([{"name": "c"}]));
        // Another applier touching the atomic list conflicts on the list as a whole.
        let live = stored(second.object, &second.managed_fields);
        let err = apply(
            Some(&live),
            &cr(json!([{"name": "d"}])),
            "other",
            "example.com/v1",
            false,
            &NoKeys,
            T3,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .ends_with(r#"conflict with "app": .spec.items"#),
            "{err}"
        );
    }

    // ---- Cases ported from structured-merge-diff's merge tests (expected results
    // ---- copied from its fixtures; all versions the same).

    /// `list` is a set of strings (merge/set_test.go).
    struct SetSchema;
    impl ListKeys for SetSchema {
        fn list_keys(&self, _: &[&str]) -> Option<Vec<&'static str>> {
            None
        }
        fn is_set(&self, path: &[&str]) -> bool {
            path == ["list"] || path == ["listOfLists", "value"]
        }
    }

    /// `list` and `listOfLists` are keyed by name; `listOfLists[].value` is a set.
    struct NameSchema;
    impl ListKeys for NameSchema {
        fn list_keys(&self, path: &[&str]) -> Option<Vec<&'static str>> {
            (path == ["list"] || path == ["listOfLists"]).then(|| vec!["name"])
        }
        fn is_set(&self, path: &[&str]) -> bool {
            path == ["listOfLists", "value"]
        }
    }

    enum Step {
        Apply(&'static str, Value),
        Update(&'static str, Value),
    }

    fn run(keys: &dyn ListKeys, steps: Vec<Step>) -> (Value, BTreeMap<String, Vec<String>>) {
        let ctx = Ctx {
            keys,
            skip_managed_fields: false,
        };
        let mut live: Option<Value> = None;
        let mut managed = Managed::default();
        for step in steps {
            match step {
                Step::Apply(m, config) => {
                    let (obj, next) = ctx
                        .apply_once(
                            live.as_ref(),
                            &managed,
                            &config,
                            &ApplyCall {
                                id: ManagerId::apply(m, None),
                                api_version: "v1",
                                subresource: None,
                                now: T1,
                            },
                            false,
                        )
                        .unwrap_or_else(|c| {
                            panic!(
                                "unexpected conflicts: {:?}",
                                c.iter().map(|c| path_string(&c.path)).collect::<Vec<_>>()
                            )
                        });
                    live = Some(obj);
                    managed = next;
                }
                Step::Update(m, obj) => {
                    let old = live.clone().unwrap_or_else(|| json!({}));
                    ctx.record(
                        &mut managed,
                        &old,
                        &obj,
                        &ManagerId::update(m, "v1", None),
                        &FieldSet::default(),
                        T1,
                    );
                    live = Some(obj);
                }
            }
        }
        let owners = managed
            .fields
            .iter()
            .map(|(id, vs)| {
                let mut paths = vs.set.paths();
                paths.sort();
                (id.manager.clone(), paths)
            })
            .collect();
        (live.unwrap(), owners)
    }

    fn owners(expected: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        expected
            .iter()
            .map(|(m, paths)| {
                let mut p: Vec<String> = paths.iter().map(|s| s.to_string()).collect();
                p.sort();
                (m.to_string(), p)
            })
            .collect()
    }

    #[test]
    fn smd_set_cases() {
        use Step::*;
        let list = |items: &[&str]| json!({ "list": items });
        let (obj, own) = run(
            &SetSchema,
            vec![
                Apply("default", list(&["a", "c"])),
                Apply("default", list(&["a", "b", "c", "d"])),
            ],
        );
        assert_eq!(obj, list(&["a", "b", "c", "d"]));
        assert_eq!(
            own,
            owners(&[(
                "default",
                &[
                    ".list[=\"a\"]",
                    ".list[=\"b\"]",
                    ".list[=\"c\"]",
                    ".list[=\"d\"]"
                ]
            )])
        );

        // apply_update_apply_no_overlap
        let (obj, own) = run(
            &SetSchema,
            vec![
                Apply("default", list(&["a", "c"])),
                Update("controller", list(&["a", "b", "c", "d"])),
                Apply("default", list(&["a", "aprime", "c", "cprime"])),
            ],
        );
        assert_eq!(obj, list(&["a", "b", "aprime", "c", "d", "cprime"]));
        assert_eq!(
            own,
            owners(&[
                (
                    "default",
                    &[
                        ".list[=\"a\"]",
                        ".list[=\"aprime\"]",
                        ".list[=\"c\"]",
                        ".list[=\"cprime\"]"
                    ]
                ),
                ("controller", &[".list[=\"b\"]", ".list[=\"d\"]"]),
            ])
        );

        // apply_update_apply_with_overlap
        let (obj, own) = run(
            &SetSchema,
            vec![
                Apply("default", list(&["a", "c"])),
                Update("controller", list(&["a", "b", "c", "d"])),
                Apply("default", list(&["a", "b", "c"])),
            ],
        );
        assert_eq!(obj, list(&["a", "b", "c", "d"]));
        assert_eq!(
            own,
            owners(&[
                (
                    "default",
                    &[".list[=\"a\"]", ".list[=\"b\"]", ".list[=\"c\"]"]
                ),
                ("controller", &[".list[=\"b\"]", ".list[=\"d\"]"]),
            ])
        );

        // apply_twice_reorder and apply_update_apply_reorder
        let (obj, _) = run(
            &SetSchema,
            vec![
                Apply("default", list(&["a", "b", "c", "d"])),
                Apply("default", list(&["a", "d", "c", "b"])),
            ],
        );
        assert_eq!(obj, list(&["a", "d", "c", "b"]));
        let (obj, own) = run(
            &SetSchema,
            vec![
                Apply("default", list(&["a", "b", "c", "d"])),
                Update("controller", list(&["a", "d", "c", "b"])),
                Apply("default", list(&["a", "b", "c", "d"])),
            ],
        );
        assert_eq!(obj, list(&["a", "b", "c", "d"]));
        assert_eq!(
            own,
            owners(&[(
                "default",
                &[
                    ".list[=\"a\"]",
                    ".list[=\"b\"]",
                    ".list[=\"c\"]",
                    ".list[=\"d\"]"
                ]
            )])
        );

        // apply_twice_remove
        let (obj, own) = run(
            &SetSchema,
            vec![
                Apply("default", list(&["a", "b", "c", "d"])),
                Apply("default", list(&["a", "c"])),
            ],
        );
        assert_eq!(obj, list(&["a", "c"]));
        assert_eq!(
            own,
            owners(&[("default", &[".list[=\"a\"]", ".list[=\"c\"]"])])
        );
    }

    #[test]
    fn smd_multiple_appliers_cases() {
        use Step::*;
        let named = |names: &[&str]| json!({ "list": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>() });
        let item = |n: &str| {
            vec![
                format!(".list[name=\"{n}\"]"),
                format!(".list[name=\"{n}\"].name"),
            ]
        };
        // remove_one_keep_one
        let (obj, own) = run(
            &NameSchema,
            vec![
                Apply("apply-one", named(&["a", "b", "c"])),
                Apply("apply-two", named(&["c", "d"])),
                Apply("apply-one", named(&["a"])),
            ],
        );
        assert_eq!(obj, named(&["a", "c", "d"]));
        let mut two = item("c");
        two.extend(item("d"));
        two.sort();
        assert_eq!(own["apply-one"], item("a"));
        assert_eq!(own["apply-two"], two);

        // unset_scalar_shared_with_updater
        let (obj, own) = run(
            &NameSchema,
            vec![
                Update(
                    "updater",
                    json!({"struct": {"name": "a", "scalarField": "a"}}),
                ),
                Apply(
                    "applier",
                    json!({"struct": {"name": "a", "scalarField": "a"}}),
                ),
                Apply("applier", json!({"struct": {"name": "a"}})),
            ],
        );
        assert_eq!(obj, json!({"struct": {"name": "a", "scalarField": "a"}}));
        assert_eq!(
            own,
            owners(&[
                (
                    "updater",
                    &[".struct", ".struct.name", ".struct.scalarField"]
                ),
                ("applier", &[".struct.name"]),
            ])
        );

        // updater_claims_field
        let (obj, own) = run(
            &NameSchema,
            vec![
                Apply(
                    "applier",
                    json!({"struct": {"name": "a", "scalarField": "a"}}),
                ),
                Update(
                    "updater",
                    json!({"struct": {"name": "a", "scalarField": "b"}}),
                ),
            ],
        );
        assert_eq!(obj["struct"]["scalarField"], "b");
        assert_eq!(
            own,
            owners(&[
                ("updater", &[".struct.scalarField"]),
                ("applier", &[".struct.name"])
            ])
        );

        // unset_complex_sole_owner / unset_complex_shared_with_applier
        let (obj, own) = run(
            &NameSchema,
            vec![
                Apply(
                    "apply-one",
                    json!({"struct": {"name": "a", "complexField": {"name": "b"}}}),
                ),
                Apply("apply-one", json!({"struct": {"name": "a"}})),
            ],
        );
        assert_eq!(obj, json!({"struct": {"name": "a"}}));
        assert_eq!(own, owners(&[("apply-one", &[".struct.name"])]));
        let (obj, own) = run(
            &NameSchema,
            vec![
                Apply(
                    "apply-one",
                    json!({"struct": {"name": "a", "complexField": {"name": "b"}}}),
                ),
                Apply(
                    "apply-two",
                    json!({"struct": {"complexField": {"name": "b"}}}),
                ),
                Apply("apply-one", json!({"struct": {"name": "a"}})),
            ],
        );
        assert_eq!(
            obj,
            json!({"struct": {"name": "a", "complexField": {"name": "b"}}})
        );
        assert_eq!(
            own,
            owners(&[
                ("apply-one", &[".struct.name"]),
                ("apply-two", &[".struct.complexField.name"])
            ])
        );
    }

    #[test]
    fn smd_nested_pruning_cases() {
        use Step::*;
        // remove_one_keep_one_with_dangling_subitem
        let (obj, own) = run(
            &NameSchema,
            vec![
                Apply(
                    "apply-one",
                    json!({"listOfLists": [{"name": "a"}, {"name": "b", "value": ["c"]}]}),
                ),
                Apply(
                    "apply-two",
                    json!({"listOfLists": [{"name": "b", "value": ["d"]}]}),
                ),
                Update(
                    "controller",
                    json!({"listOfLists": [{"name": "a"}, {"name": "b", "value": ["c", "d", "e"]}]}),
                ),
                Apply("apply-one", json!({"listOfLists": [{"name": "a"}]})),
            ],
        );
        assert_eq!(
            obj,
            json!({"listOfLists": [{"name": "a"}, {"name": "b", "value": ["d", "e"]}]})
        );
        assert_eq!(
            own,
            owners(&[
                (
                    "apply-one",
                    &[".listOfLists[name=\"a\"]", ".listOfLists[name=\"a\"].name"]
                ),
                (
                    "apply-two",
                    &[
                        ".listOfLists[name=\"b\"]",
                        ".listOfLists[name=\"b\"].name",
                        ".listOfLists[name=\"b\"].value[=\"d\"]"
                    ],
                ),
                ("controller", &[".listOfLists[name=\"b\"].value[=\"e\"]"]),
            ])
        );

        // remove_one_with_dangling_subitem_keep_one: the item goes, with the
        // controller's sub-item, and the controller's entry with it.
        let (obj, own) = run(
            &NameSchema,
            vec![
                Apply(
                    "apply-one",
                    json!({"listOfLists": [{"name": "a"}, {"name": "b", "value": ["c"]}]}),
                ),
                Apply(
                    "apply-two",
                    json!({"listOfLists": [{"name": "a", "value": ["b"]}]}),
                ),
                Update(
                    "controller",
                    json!({"listOfLists": [{"name": "a", "value": ["b"]}, {"name": "b", "value": ["c", "d"]}]}),
                ),
                Apply("apply-one", json!({"listOfLists": [{"name": "a"}]})),
            ],
        );
        assert_eq!(obj, json!({"listOfLists": [{"name": "a", "value": ["b"]}]}));
        assert_eq!(
            own,
            owners(&[
                (
                    "apply-one",
                    &[".listOfLists[name=\"a\"]", ".listOfLists[name=\"a\"].name"]
                ),
                (
                    "apply-two",
                    &[
                        ".listOfLists[name=\"a\"]",
                        ".listOfLists[name=\"a\"].name",
                        ".listOfLists[name=\"a\"].value[=\"b\"]"
                    ],
                ),
            ])
        );
    }

    #[test]
    fn apply_to_the_status_subresource() {
        let first = apply_ok(None, &deployment(1, "nginx:1.25"), "kubectl", T1);
        let live = stored(first.object, &first.managed_fields);
        let status = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "web", "namespace": "default"},
                            "spec": {"replicas": 9},
                            "status": {"replicas": 1, "conditions": [{"type": "Available", "status": "True"}]}});
        let r = apply_subresource(
            &live,
            &status,
            "my-operator",
            "apps/v1",
            false,
            &TestKeys,
            T2,
            "status",
        )
        .unwrap();
        assert_eq!(
            r.object["spec"]["replicas"], 1,
            "spec is reset for the status subresource"
        );
        assert_eq!(r.object["status"]["replicas"], 1);
        let e = entry(&r.managed_fields, "my-operator", "Apply").unwrap();
        assert_eq!(e["subresource"], "status");
        assert_eq!(
            e["fieldsV1"],
            json!({"f:status": {"f:conditions": {"k:{\"type\":\"Available\"}": {".": {}, "f:status": {}, "f:type": {}}}, "f:replicas": {}}})
        );
        // A second status applier conflicts, naming the subresource.
        let live = stored(r.object, &r.managed_fields);
        let mut other = status.clone();
        other["status"]["replicas"] = json!(2);
        let err = apply_subresource(
            &live, &other, "other", "apps/v1", false, &TestKeys, T3, "status",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Apply failed with 1 conflict: conflict with "my-operator" with subresource "status": .status.replicas"#
        );
        // And a main-resource apply leaves status alone.
        let again = apply_ok(Some(&live), &deployment(1, "nginx:1.25"), "kubectl", T3);
        assert_eq!(again.object["status"], live["status"]);
    }
}
