//! The OpenAPI 3 schemas of the built-in kinds, generated at build time (`build.rs`) and
//! embedded gzip-compressed: decompressed on demand, shared while in use, dropped when no
//! caller holds them (the built documents and the protobuf field table keep only what
//! they need).
//!
//! Owns: the embedded schemas and the `$ref` closure over them. May not touch: the
//! store, HTTP.

use std::io::Read as _;
use std::sync::{Arc, Mutex, Weak};

use serde_json::{Map, Value};

/// Definition name → schema, as `schemars` generated them with the OpenAPI 3 settings.
pub type Definitions = Map<String, Value>;

static COMPRESSED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/k8s_schemas.json.gz"));

/// The prefix of a `$ref` to another definition.
const REF_PREFIX: &str = "#/components/schemas/";

/// Every embedded definition. Decompressed and parsed when no other caller holds them;
/// hold the returned `Arc` across a batch of work to parse only once.
pub fn definitions() -> Arc<Definitions> {
    static SHARED: Mutex<Weak<Definitions>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(defs) = shared.upgrade() {
        return defs;
    }
    let defs = Arc::new(decode());
    *shared = Arc::downgrade(&defs);
    defs
}

fn decode() -> Definitions {
    let mut json = Vec::new();
    // The data was produced and checked by the build script; a failure here is a
    // corrupted binary, and the documents simply go without built-in schemas.
    if let Err(e) = flate2::read::GzDecoder::new(COMPRESSED).read_to_end(&mut json) {
        tracing::error!(error = %e, "the embedded OpenAPI schemas do not decompress");
        return Map::new();
    }
    match serde_json::from_slice(&json) {
        Ok(defs) => defs,
        Err(e) => {
            tracing::error!(error = %e, "the embedded OpenAPI schemas do not parse");
            Map::new()
        }
    }
}

/// The definitions named by `roots` and every definition they reach through `$ref`,
/// as `schemars` would have collected them for those types.
pub fn closure<'a>(all: &Definitions, roots: impl IntoIterator<Item = &'a str>) -> Definitions {
    let mut out = Map::new();
    let mut pending: Vec<String> = roots.into_iter().map(str::to_string).collect();
    while let Some(name) = pending.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let Some(schema) = all.get(&name) else {
            continue;
        };
        collect_refs(schema, &mut pending);
        out.insert(name, schema.clone());
    }
    out
}

fn collect_refs(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("$ref", Value::String(target)) => {
                        if let Some(name) = target.strip_prefix(REF_PREFIX) {
                            out.push(name.to_string());
                        }
                    }
                    _ => collect_refs(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_refs(item, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::schemars::generate::SchemaSettings;
    use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};
    use k8s_openapi::{api, apiextensions_apiserver, kube_aggregator};

    type Add = fn(&mut SchemaGenerator) -> String;

    fn add<T: JsonSchema>(generator: &mut SchemaGenerator) -> String {
        generator.subschema_for::<T>();
        T::schema_name().into_owned()
    }

    macro_rules! schema_roots {
        ($($ty:ty),* $(,)?) => {
            fn roots() -> Vec<Add> {
                vec![$(add::<$ty> as Add),*]
            }
        };
    }

    include!("schema_roots.rs");

    /// For every built-in kind alone, the closure over the embedded schemas equals what
    /// `schemars` collects for that type: same names, same schemas.
    #[test]
    fn embedded_closures_match_schemars_per_kind() {
        let all = definitions();
        assert!(all.len() > 300, "only {} embedded definitions", all.len());
        let roots = roots();
        assert_eq!(roots.len(), super::super::kinds::TABLE.len());
        for (add, entry) in roots.iter().zip(super::super::kinds::TABLE) {
            let mut generator = SchemaSettings::openapi3().into_generator();
            let name = add(&mut generator);
            assert_eq!(name, entry.definition);
            let expected = generator.take_definitions(true);
            let got = closure(&all, [entry.definition]);
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                expected.keys().collect::<Vec<_>>(),
                "definitions reached from {name}"
            );
            assert_eq!(got, expected, "schemas reached from {name}");
        }
    }

    #[test]
    fn meta_types_are_embedded() {
        let all = definitions();
        for name in super::super::kinds::META {
            assert!(all.contains_key(*name), "{name} missing");
        }
    }

    #[test]
    fn holders_share_one_parse() {
        let a = definitions();
        let b = definitions();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
