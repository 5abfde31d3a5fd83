//! `meta.k8s.io/v1` Table responses, as kube-apiserver renders them for
//! `kubectl get` (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`).
//!
//! This module owns turning objects into table rows: the column definitions and
//! cells of every built-in printer (`pkg/printers/internalversion`), the default
//! convertor (Name, Created At) for everything else, CRD `additionalPrinterColumns`
//! (via a small JSONPath evaluator), the `PartialObjectMetadata` row objects of
//! `includeObject=Metadata`, and the Table envelope itself.
//!
//! Everything here is a pure function of its arguments (the caller passes "now"
//! as Unix seconds). It may not touch the store or HTTP: the API server fetches
//! objects, picks the columns, and writes the response.
//!
//! Like kube-apiserver, rows always carry the `-o wide` cells; kubectl hides
//! columns with `priority > 0` unless asked for them.

mod columns;
pub mod duration;
pub(crate) mod format;
pub mod jsonpath;
mod printers;

#[cfg(test)]
mod tests;

use serde_json::{Map, Value, json};

pub use duration::human_duration;

/// API version of the Table this module renders.
pub const TABLE_API_VERSION: &str = "meta.k8s.io/v1";

/// One `columnDefinitions` entry of a Table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// Title-case name as the server sends it ("Name", "Nominated Node"); kubectl
    /// upper-cases it.
    pub name: String,
    /// "string", "integer", "number", "boolean" or "date".
    pub type_: String,
    /// "name" for the object-name column, otherwise usually "".
    pub format: String,
    pub description: String,
    /// 0 for default columns, 1 (or more) for `-o wide` columns.
    pub priority: i32,
}

impl Column {
    /// The `columnDefinitions` JSON object for this column.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.type_,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

/// A CRD version's `additionalPrinterColumns` entry.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PrinterColumn {
    pub name: String,
    /// "integer", "number", "string", "boolean" or "date".
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i32,
    /// A simple JSONPath such as `.spec.replicas`.
    pub json_path: String,
}

impl PrinterColumn {
    /// Reads one `additionalPrinterColumns` item of a CRD version (v1 JSON).
    pub fn from_json(v: &Value) -> PrinterColumn {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        PrinterColumn {
            name: s("name"),
            type_: s("type"),
            format: s("format"),
            description: s("description"),
            priority: v
                .get("priority")
                .and_then(Value::as_i64)
                .and_then(|p| i32::try_from(p).ok())
                .unwrap_or(0),
            json_path: s("jsonPath"),
        }
    }
}

/// A table row: cells, optional row conditions, and the row's object (the
/// object itself, its `PartialObjectMetadata`, or null for `includeObject=None`).
#[derive(Clone, Debug, PartialEq)]
pub struct TableRow {
    pub cells: Vec<Value>,
    /// `metav1.TableRowCondition`s; kube-apiserver sets one ("Completed") for
    /// pods that succeeded or failed. Omitted from the JSON when empty.
    pub conditions: Vec<Value>,
    pub object: Value,
}

/// Column definitions for a resource (`group` "" for the core group, `resource`
/// the lower-case plural). Resources without a dedicated printer get the
/// default convertor's Name and Created At.
pub fn columns_for(group: &str, resource: &str) -> Vec<Column> {
    match columns::printer_for(group, resource) {
        Some(p) => columns::columns(p),
        None => columns::default_columns(),
    }
}

/// The cells of one object's row, matching [`columns_for`] one to one (wide
/// cells included). AGE-style cells are computed relative to `now_unix_secs`.
pub fn cells_for(group: &str, resource: &str, object: &Value, now_unix_secs: i64) -> Vec<Value> {
    match columns::printer_for(group, resource) {
        Some(p) => printers::cells(p, object, now_unix_secs),
        None => default_cells(object),
    }
}

/// Row conditions kube-apiserver attaches to this object's row: a `Completed`
/// condition for pods in phase Succeeded or Failed, nothing otherwise.
pub fn row_conditions_for(group: &str, resource: &str, object: &Value) -> Vec<Value> {
    match columns::printer_for(group, resource) {
        Some(p) => printers::row_conditions(p, object),
        None => Vec::new(),
    }
}

/// The default convertor's cells: name, and creationTimestamp as RFC 3339 UTC
/// (Go's zero time when unset).
fn default_cells(object: &Value) -> Vec<Value> {
    let meta = object.get("metadata").unwrap_or(&Value::Null);
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
    let created = meta
        .get("creationTimestamp")
        .and_then(Value::as_str)
        .and_then(duration::parse_rfc3339)
        .map(|t| duration::format_rfc3339(t.secs))
        .unwrap_or_else(duration::zero_time_rfc3339);
    vec![json!(name), json!(created)]
}

/// The column a CRD version without `additionalPrinterColumns` is served with.
pub fn default_printer_columns() -> Vec<PrinterColumn> {
    vec![PrinterColumn {
        name: "Age".to_string(),
        type_: "date".to_string(),
        format: String::new(),
        description: columns::CREATION_TIMESTAMP_DESCRIPTION.to_string(),
        priority: 0,
        json_path: ".metadata.creationTimestamp".to_string(),
    }]
}

/// The printer columns actually served, with their parsed paths: the default Age
/// column when none are declared, and (as kube-apiserver does) only the columns
/// before the first whose JSONPath does not parse.
fn served_columns(printer_columns: &[PrinterColumn]) -> Vec<(PrinterColumn, jsonpath::JsonPath)> {
    let declared = if printer_columns.is_empty() {
        default_printer_columns()
    } else {
        printer_columns.to_vec()
    };
    declared
        .into_iter()
        .map_while(|c| jsonpath::parse(&c.json_path).ok().map(|p| (c, p)))
        .collect()
}

/// Column definitions for a custom resource: Name, then the CRD's printer
/// columns (a description defaults to the column's JSONPath).
pub fn custom_columns(printer_columns: &[PrinterColumn]) -> Vec<Column> {
    let mut out = vec![columns::name_column()];
    for (c, _) in served_columns(printer_columns) {
        let description = if c.description.is_empty() {
            format!(
                "Custom resource definition column (in JSONPath format): {}",
                c.json_path
            )
        } else {
            c.description
        };
        out.push(Column {
            name: c.name,
            type_: c.type_,
            format: c.format,
            description,
            priority: c.priority,
        });
    }
    out
}

/// Cells for a custom resource, as the apiextensions table convertor makes them:
/// the name, then per column the first JSONPath match; null when nothing
/// matches or the value does not fit the column type. Strings render maps and
/// arrays as JSON; integer/number/boolean keep JSON types; date renders as an
/// age ("<invalid>" if it is not RFC 3339).
pub fn custom_cells(
    printer_columns: &[PrinterColumn],
    object: &Value,
    now_unix_secs: i64,
) -> Vec<Value> {
    let name = object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut cells = vec![json!(name)];
    for (c, path) in served_columns(printer_columns) {
        let value = match path.find(object) {
            Ok(found) => found.into_iter().next(),
            Err(_) => None,
        };
        cells.push(match value {
            None => Value::Null,
            Some(v) => custom_cell(&c.type_, v, now_unix_secs),
        });
    }
    cells
}

/// `cellForJSONValue`, plus the string case (printed the way client-go's
/// JSONPath prints a result).
fn custom_cell(type_: &str, v: &Value, now_unix_secs: i64) -> Value {
    if v.is_null() {
        // A JSON null that was found prints as Go's template "<no value>" in a
        // string column and is a null cell otherwise.
        return if type_ == "string" {
            json!("<no value>")
        } else {
            Value::Null
        };
    }
    match type_ {
        "string" => json!(format::go_print_value(v)),
        "integer" => match v {
            Value::Number(n) => n
                .as_i64()
                .map(Value::from)
                .or_else(|| n.as_f64().map(|f| Value::from(f as i64)))
                .unwrap_or(Value::Null),
            _ => Value::Null,
        },
        "number" => match v.as_f64() {
            // Go's encoding/json prints an integral float64 without a fraction.
            Some(f) if f.fract() == 0.0 && f.abs() < 1e18 => json!(f as i64),
            Some(f) => json!(f),
            None => Value::Null,
        },
        "boolean" => match v {
            Value::Bool(_) => v.clone(),
            _ => Value::Null,
        },
        "date" => match v {
            Value::String(s) if s.is_empty() || s == "null" => json!("<unknown>"),
            Value::String(s) => match duration::parse_rfc3339(s) {
                Some(t) => json!(duration::since(Some(t), now_unix_secs)),
                None => json!("<invalid>"),
            },
            _ => Value::Null,
        },
        _ => Value::Null,
    }
}

/// The full Table JSON for `rows` of `(cells, object)`.
pub fn render_table(
    columns: &[Column],
    rows: Vec<(Vec<Value>, Value)>,
    resource_version: &str,
    continue_token: Option<&str>,
    remaining: Option<i64>,
) -> Value {
    let rows = rows
        .into_iter()
        .map(|(cells, object)| TableRow {
            cells,
            conditions: Vec::new(),
            object,
        })
        .collect();
    render_table_rows(columns, rows, resource_version, continue_token, remaining)
}

/// Like [`render_table`], for rows that may carry row conditions.
pub fn render_table_rows(
    columns: &[Column],
    rows: Vec<TableRow>,
    resource_version: &str,
    continue_token: Option<&str>,
    remaining: Option<i64>,
) -> Value {
    let mut metadata = Map::new();
    if !resource_version.is_empty() {
        metadata.insert("resourceVersion".into(), json!(resource_version));
    }
    if let Some(c) = continue_token.filter(|c| !c.is_empty()) {
        metadata.insert("continue".into(), json!(c));
    }
    if let Some(n) = remaining {
        metadata.insert("remainingItemCount".into(), json!(n));
    }
    let rows: Vec<Value> = rows
        .into_iter()
        .map(|r| {
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(r.cells));
            if !r.conditions.is_empty() {
                row.insert("conditions".into(), Value::Array(r.conditions));
            }
            row.insert("object".into(), r.object);
            Value::Object(row)
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": TABLE_API_VERSION,
        "metadata": metadata,
        "columnDefinitions": columns.iter().map(Column::to_json).collect::<Vec<_>>(),
        "rows": rows,
    })
}

/// The row object for `includeObject=Metadata` (kubectl's default): the
/// object's full `metadata` wrapped as a `meta.k8s.io/v1` PartialObjectMetadata.
pub fn partial_object_metadata(object: &Value) -> Value {
    let metadata = match object.get("metadata") {
        Some(m @ Value::Object(_)) => m.clone(),
        _ => json!({}),
    };
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
    })
}
