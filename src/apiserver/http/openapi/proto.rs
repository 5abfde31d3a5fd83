//! The protobuf form of the OpenAPI v2 document (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`),
//! which is the only form kubectl reads: client-go's `OpenAPISchema()` requests it and
//! hands the body to `proto.Unmarshal` into gnostic's `openapi_v2.Document`.
//!
//! This encodes the subset of gnostic's `openapiv2/OpenAPIv2.proto` our documents use
//! (document, info, paths, operations, parameters, responses, definitions, schemas and
//! vendor extensions) straight from the JSON document. Vendor extensions, defaults,
//! enums and examples are `Any { yaml }` values; JSON text is valid YAML, so they carry
//! the value's JSON serialization.

use serde_json::{Map, Value};

/// Protobuf wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire));
    }

    fn bytes(&mut self, field: u32, data: &[u8]) {
        self.key(field, LEN);
        self.varint(data.len() as u64);
        self.0.extend_from_slice(data);
    }

    /// A proto3 string: empty strings are the default and are not written.
    fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    fn bool(&mut self, field: u32, b: bool) {
        if b {
            self.key(field, VARINT);
            self.varint(1);
        }
    }

    fn int64(&mut self, field: u32, i: i64) {
        if i != 0 {
            self.key(field, VARINT);
            self.varint(i as u64);
        }
    }

    fn double(&mut self, field: u32, f: f64) {
        if f != 0.0 {
            self.key(field, FIXED64);
            self.0.extend_from_slice(&f.to_le_bytes());
        }
    }

    /// A sub-message (always written, even when empty: presence matters for oneofs).
    fn message(&mut self, field: u32, build: impl FnOnce(&mut Writer)) {
        let mut inner = Writer::default();
        build(&mut inner);
        self.bytes(field, &inner.0);
    }
}

fn str_of<'a>(obj: &'a Map<String, Value>, key: &str) -> &'a str {
    obj.get(key).and_then(Value::as_str).unwrap_or("")
}

fn strings(w: &mut Writer, field: u32, v: Option<&Value>) {
    match v {
        Some(Value::Array(items)) => {
            for s in items.iter().filter_map(Value::as_str) {
                w.bytes(field, s.as_bytes());
            }
        }
        Some(Value::String(s)) => w.bytes(field, s.as_bytes()),
        _ => {}
    }
}

/// `Any { yaml = 2 }` holding the value as JSON text.
fn any(w: &mut Writer, field: u32, value: &Value) {
    let text = value.to_string();
    w.message(field, |a| a.bytes(2, text.as_bytes()));
}

/// `repeated NamedAny vendor_extension` from the `x-` keys of an object.
fn vendor_extensions(w: &mut Writer, field: u32, obj: &Map<String, Value>) {
    for (name, value) in obj.iter().filter(|(k, _)| k.starts_with("x-")) {
        w.message(field, |n| {
            n.string(1, name);
            any(n, 2, value);
        });
    }
}

/// Encodes a swagger 2.0 JSON document as gnostic `openapi.v2.Document`.
pub(super) fn encode_document(doc: &Value) -> Vec<u8> {
    let empty = Map::new();
    let obj = doc.as_object().unwrap_or(&empty);
    let mut w = Writer::default();
    w.string(1, str_of(obj, "swagger"));
    if let Some(info) = obj.get("info").and_then(Value::as_object) {
        w.message(2, |i| {
            i.string(1, str_of(info, "title"));
            i.string(2, str_of(info, "version"));
            i.string(3, str_of(info, "description"));
            vendor_extensions(i, 7, info);
        });
    }
    strings(&mut w, 6, obj.get("consumes"));
    strings(&mut w, 7, obj.get("produces"));
    if let Some(paths) = obj.get("paths").and_then(Value::as_object) {
        w.message(8, |p| {
            vendor_extensions(p, 1, paths);
            for (name, item) in paths.iter().filter(|(k, _)| !k.starts_with("x-")) {
                let Some(item) = item.as_object() else {
                    continue;
                };
                p.message(2, |n| {
                    n.string(1, name);
                    n.message(2, |pi| path_item(pi, item));
                });
            }
        });
    }
    if let Some(defs) = obj.get("definitions").and_then(Value::as_object) {
        w.message(9, |d| {
            for (name, schema) in defs {
                d.message(1, |n| {
                    n.string(1, name);
                    n.message(2, |s| self::schema(s, schema));
                });
            }
        });
    }
    vendor_extensions(&mut w, 16, obj);
    w.0
}

fn path_item(w: &mut Writer, item: &Map<String, Value>) {
    w.string(1, str_of(item, "$ref"));
    for (field, method) in [
        (2, "get"),
        (3, "put"),
        (4, "post"),
        (5, "delete"),
        (6, "options"),
        (7, "head"),
        (8, "patch"),
    ] {
        if let Some(op) = item.get(method).and_then(Value::as_object) {
            w.message(field, |o| operation(o, op));
        }
    }
    for param in item
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        w.message(9, |p| parameters_item(p, param));
    }
    vendor_extensions(w, 10, item);
}

fn operation(w: &mut Writer, op: &Map<String, Value>) {
    strings(w, 1, op.get("tags"));
    w.string(2, str_of(op, "summary"));
    w.string(3, str_of(op, "description"));
    w.string(5, str_of(op, "operationId"));
    strings(w, 6, op.get("produces"));
    strings(w, 7, op.get("consumes"));
    for param in op
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        w.message(8, |p| parameters_item(p, param));
    }
    if let Some(responses) = op.get("responses").and_then(Value::as_object) {
        w.message(9, |r| {
            for (code, response) in responses.iter().filter(|(k, _)| !k.starts_with("x-")) {
                let Some(response) = response.as_object() else {
                    continue;
                };
                r.message(1, |n| {
                    n.string(1, code);
                    // ResponseValue { response = 1 }
                    n.message(2, |rv| {
                        rv.message(1, |resp| {
                            resp.string(1, str_of(response, "description"));
                            if let Some(schema) = response.get("schema") {
                                // SchemaItem { schema = 1 }
                                resp.message(2, |si| si.message(1, |s| self::schema(s, schema)));
                            }
                            vendor_extensions(resp, 5, response);
                        });
                    });
                });
            }
            vendor_extensions(r, 2, responses);
        });
    }
    strings(w, 10, op.get("schemes"));
    w.bool(
        11,
        op.get("deprecated")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    );
    vendor_extensions(w, 13, op);
}

/// `ParametersItem { Parameter parameter = 1 | JsonReference json_reference = 2 }`.
fn parameters_item(w: &mut Writer, param: &Value) {
    let Some(p) = param.as_object() else { return };
    if let Some(reference) = p.get("$ref").and_then(Value::as_str) {
        w.message(2, |j| j.string(1, reference));
        return;
    }
    let required = p.get("required").and_then(Value::as_bool).unwrap_or(false);
    let unique = p
        .get("uniqueItems")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    w.message(1, |out| match str_of(p, "in") {
        "body" => out.message(1, |b| {
            b.string(1, str_of(p, "description"));
            b.string(2, str_of(p, "name"));
            b.string(3, "body");
            b.bool(4, required);
            if let Some(schema) = p.get("schema") {
                b.message(5, |s| self::schema(s, schema));
            }
            vendor_extensions(b, 6, p);
        }),
        location => out.message(2, |nb| {
            // NonBodyParameter { header = 1, form_data = 2, query = 3, path = 4 }; the
            // query and form-data sub-schemas carry allow_empty_value (5), shifting the rest.
            let (field, shifted) = match location {
                "header" => (1, false),
                "formData" => (2, true),
                "path" => (4, false),
                _ => (3, true),
            };
            nb.message(field, |s| {
                let o = u32::from(shifted);
                s.bool(1, required);
                s.string(2, location);
                s.string(3, str_of(p, "description"));
                s.string(4, str_of(p, "name"));
                s.string(5 + o, str_of(p, "type"));
                s.string(6 + o, str_of(p, "format"));
                s.bool(19 + o, unique);
                vendor_extensions(s, 22 + o, p);
            });
        }),
    });
}

/// gnostic `Schema`.
fn schema(w: &mut Writer, schema: &Value) {
    let Some(s) = schema.as_object() else { return };
    let int = |key: &str| s.get(key).and_then(Value::as_i64).unwrap_or(0);
    let float = |key: &str| s.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    let boolean = |key: &str| s.get(key).and_then(Value::as_bool).unwrap_or(false);
    w.string(1, str_of(s, "$ref"));
    w.string(2, str_of(s, "format"));
    w.string(3, str_of(s, "title"));
    w.string(4, str_of(s, "description"));
    if let Some(default) = s.get("default") {
        any(w, 5, default);
    }
    w.double(6, float("multipleOf"));
    w.double(7, float("maximum"));
    w.bool(8, boolean("exclusiveMaximum"));
    w.double(9, float("minimum"));
    w.bool(10, boolean("exclusiveMinimum"));
    w.int64(11, int("maxLength"));
    w.int64(12, int("minLength"));
    w.string(13, str_of(s, "pattern"));
    w.int64(14, int("maxItems"));
    w.int64(15, int("minItems"));
    w.bool(16, boolean("uniqueItems"));
    w.int64(17, int("maxProperties"));
    w.int64(18, int("minProperties"));
    strings(w, 19, s.get("required"));
    for value in s
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        any(w, 20, value);
    }
    match s.get("additionalProperties") {
        // AdditionalPropertiesItem { Schema schema = 1 | bool boolean = 2 }
        Some(Value::Bool(b)) => w.message(21, |a| {
            a.key(2, VARINT);
            a.varint(u64::from(*b));
        }),
        Some(inner @ Value::Object(_)) => {
            w.message(21, |a| a.message(1, |x| self::schema(x, inner)))
        }
        _ => {}
    }
    if s.contains_key("type") {
        w.message(22, |t| strings(t, 1, s.get("type")));
    }
    match s.get("items") {
        Some(inner @ Value::Object(_)) => {
            w.message(23, |i| i.message(1, |x| self::schema(x, inner)))
        }
        Some(Value::Array(all)) => w.message(23, |i| {
            for inner in all {
                i.message(1, |x| self::schema(x, inner));
            }
        }),
        _ => {}
    }
    for inner in s
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        w.message(24, |x| self::schema(x, inner));
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        w.message(25, |p| {
            for (name, inner) in props {
                p.message(1, |n| {
                    n.string(1, name);
                    n.message(2, |x| self::schema(x, inner));
                });
            }
        });
    }
    w.string(26, str_of(s, "discriminator"));
    w.bool(27, boolean("readOnly"));
    if let Some(example) = s.get("example") {
        any(w, 30, example);
    }
    vendor_extensions(w, 31, s);
}
