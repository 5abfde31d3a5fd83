//! Build script: generates the OpenAPI schemas of the built-in kinds at build time.
//!
//! The API server serves these schemas (`/openapi/v2`, `/openapi/v3`) and reads field
//! names from them to decode protobuf bodies. k8s-openapi's `schemars` support builds
//! them in code, one function per type; linking that code made the release binary about
//! 3 MB larger than the schemas themselves compressed (issue 22's size goal, see
//! `docs/panic-strategy.md`). So they are generated here, once, and the binary embeds
//! them gzip-compressed:
//!
//! - `$OUT_DIR/k8s_schemas.json.gz`: every definition reachable from the kinds in
//!   `src/apiserver/http/openapi/schema_roots.rs` and the meta types, as OpenAPI 3 schemas
//!   (name → schema, `$ref`s to `#/components/schemas/<name>`);
//! - `$OUT_DIR/builtin_kinds.rs`: the table of those kinds (group, version, kind,
//!   definition name), included by `openapi::kinds`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use k8s_openapi::schemars::generate::SchemaSettings;
use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};
use k8s_openapi::{api, apiextensions_apiserver, kube_aggregator};

fn add<T: k8s_openapi::Resource + JsonSchema>(generator: &mut SchemaGenerator, table: &mut String) {
    generator.subschema_for::<T>();
    let _ = writeln!(
        table,
        "    KindEntry {{ group: {:?}, version: {:?}, kind: {:?}, definition: {:?} }},",
        T::GROUP,
        T::VERSION,
        T::KIND,
        T::schema_name()
    );
}

macro_rules! schema_roots {
    ($($ty:ty),* $(,)?) => {
        fn add_roots(generator: &mut SchemaGenerator, table: &mut String) {
            $(add::<$ty>(generator, table);)*
        }
    };
}

include!("src/apiserver/http/openapi/schema_roots.rs");

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/apiserver/http/openapi/schema_roots.rs");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    let mut generator = SchemaSettings::openapi3().into_generator();
    {
        // Meta types every group-version document carries (request and response bodies
        // of delete and patch); DeleteOptions is also a protobuf request kind.
        use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
        generator.subschema_for::<meta::DeleteOptions>();
        generator.subschema_for::<meta::Status>();
        generator.subschema_for::<meta::Patch>();
        generator.subschema_for::<meta::ObjectMeta>();
        generator.subschema_for::<meta::ListMeta>();
    }
    let mut table = String::from("&[\n");
    add_roots(&mut generator, &mut table);
    table.push_str("]\n");
    let definitions = generator.take_definitions(true);

    let json = serde_json::to_vec(&definitions).expect("schemas serialize");
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(json.len() / 6),
        flate2::Compression::best(),
    );
    encoder.write_all(&json).expect("compressing in memory");
    let compressed = encoder.finish().expect("compressing in memory");
    std::fs::write(out_dir.join("k8s_schemas.json.gz"), compressed).expect("writing OUT_DIR");
    std::fs::write(out_dir.join("builtin_kinds.rs"), table).expect("writing OUT_DIR");
}
