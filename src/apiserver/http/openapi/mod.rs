//! OpenAPI documents built from the registry and k8s-openapi schemas: the OpenAPI v3
//! index (`/openapi/v3`), one OpenAPI 3.0 document per served group-version
//! (`/openapi/v3/apis/<group>/<version>`, `/openapi/v3/api/v1`) and the swagger 2.0
//! document (`/openapi/v2`) in JSON and in the protobuf form kubectl requests.
//!
//! Owns: the documents' content (paths and operations shaped like kube-apiserver's, the
//! schemas of built-in kinds (generated at build time, [`schemas`]), custom resources' schemas
//! from their CRDs, patch metadata) and a cache of the built documents. May not touch:
//! the store, HTTP (callers pick the document and the representation; see
//! [`V2_PROTOBUF_CONTENT_TYPE`]).
//!
//! What kubectl relies on:
//! - field validation (`kubectl apply/create --validate=true`, the default): kubectl
//!   fetches the group-version document and looks for a path whose PATCH operation
//!   carries `x-kubernetes-group-version-kind` equal to the object's kind and a
//!   `fieldValidation` operation parameter; if found it sends `fieldValidation=Strict`
//!   instead of validating client-side. Every PATCH operation here carries it.
//! - `kubectl explain`: takes the kind from an operation on the resource's paths, then
//!   the schema in `components.schemas` whose `x-kubernetes-group-version-kind` list
//!   contains that kind, and walks `properties` / `allOf` / `items` / `$ref`.
//! - client-side `kubectl apply`: the strategic merge patch is computed from
//!   `x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key` (v3 first when
//!   enabled, then the v2 protobuf document, then kubectl's compiled-in types).
//!
//! Serving (for the HTTP layer): `/openapi/v3` -> [`v3_index_with`];
//! `/openapi/v3/<gv>` (any `hash`) -> [`v3_group_version_document`]`.json`, `ETag` the
//! quoted `etag`; `/openapi/v2` -> [`v2_served`]: its `protobuf` with
//! [`V2_PROTOBUF_RESPONSE_CONTENT_TYPE`] when `Accept` mentions `protobuf` (kubectl
//! 1.27/1.28 fail every `explain`/`apply`/`create` unless this parses), else its JSON.
//!
//! Custom resources have no Rust type: callers pass a `&dyn Fn(&ResourceInfo) ->
//! Option<Value>` returning the CRD version's `openAPIV3Schema` (see
//! [`custom_resource_schema`]). Documents are cached per group-version and rebuilt when
//! the registry rows of that group-version change; call [`invalidate`] when a CRD's
//! schema changes without its rows changing.

mod kinds;
mod patch_meta;
mod proto;
pub(crate) mod schemas;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use crate::apiserver::storage::registry::{Registry, ResourceInfo};

/// The version reported in `info.version`.
pub const KUBERNETES_VERSION: &str = "v1.33.0";

/// What kubectl asks `/openapi/v2` for (and the only form it can parse).
pub const V2_PROTOBUF_CONTENT_TYPE: &str =
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The `Content-Type` to answer [`V2_PROTOBUF_CONTENT_TYPE`] requests with (what
/// kube-apiserver sends): kubectl parses the response's media type with Go's
/// `mime.ParseMediaType`, which rejects the `@` of the requested form ("mime: unexpected
/// content after media subtype").
pub const V2_PROTOBUF_RESPONSE_CONTENT_TYPE: &str =
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// Supplies the `openAPIV3Schema` of custom resources (`ResourceInfo::custom`), or
/// `None` when the CRD version has no schema.
pub type CustomSchemas<'a> = &'a dyn Fn(&ResourceInfo) -> Option<Value>;

/// A [`CustomSchemas`] that knows no schemas.
pub fn no_custom_schemas(_: &ResourceInfo) -> Option<Value> {
    None
}

/// A built document with its serialized form.
#[derive(Debug)]
pub struct Document {
    pub value: Value,
    /// `value` serialized as JSON.
    pub json: Vec<u8>,
    /// [`document_etag`] of `value`: the `hash` of the v3 index and the HTTP `ETag`
    /// (quote it).
    pub etag: String,
}

impl Document {
    fn new(value: Value) -> Self {
        let json = serde_json::to_vec(&value).unwrap_or_default();
        let etag = hex_sha512(&json);
        Document { value, json, etag }
    }
}

/// The swagger 2.0 document in JSON and protobuf.
#[derive(Debug)]
pub struct V2Document {
    pub document: Document,
    /// gnostic `openapi.v2.Document`, served as [`V2_PROTOBUF_CONTENT_TYPE`].
    pub protobuf: Vec<u8>,
    pub protobuf_etag: String,
}

// ---------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------

/// The v3 index: `{"paths": {"api/v1": {"serverRelativeURL":
/// "/openapi/v3/api/v1?hash=<HASH>"}, "apis/apps/v1": {...}, ...}}`, one entry per served
/// group-version; the hash is the [`document_etag`] of that group-version's document.
///
/// Group-versions holding custom resources whose document was not yet built with their
/// schemas get the hash of a document without them; prefer [`v3_index_with`].
pub fn v3_index(registry: &Registry) -> Value {
    index(registry, None)
}

/// [`v3_index`], building missing documents with the custom resources' schemas.
pub fn v3_index_with(registry: &Registry, custom: CustomSchemas<'_>) -> Value {
    index(registry, Some(custom))
}

/// The OpenAPI 3.0 document of one group-version (`group` empty for the core group), or
/// `None` if the registry serves nothing in it.
pub fn v3_group_version(
    registry: &Registry,
    group: &str,
    version: &str,
    custom: CustomSchemas<'_>,
) -> Option<Value> {
    v3_group_version_document(registry, group, version, custom).map(|d| d.value.clone())
}

/// [`v3_group_version`] with its serialized form and etag (cached; cheap to serve).
pub fn v3_group_version_document(
    registry: &Registry,
    group: &str,
    version: &str,
    custom: CustomSchemas<'_>,
) -> Option<Arc<Document>> {
    gv_document(registry, group, version, Some(custom))
}

/// The swagger 2.0 document (`#/definitions/<name>` refs) of everything the registry
/// serves. Custom resources get their schemas only if their group-version's v3 document
/// was built with them; prefer [`v2_document_with`].
pub fn v2_document(registry: &Registry) -> Value {
    v2(registry, None).document.value.clone()
}

/// [`v2_document`], building missing group-versions with the custom resources' schemas.
pub fn v2_document_with(registry: &Registry, custom: CustomSchemas<'_>) -> Value {
    v2(registry, Some(custom)).document.value.clone()
}

/// The swagger 2.0 document in JSON and protobuf (cached; cheap to serve). kubectl
/// requests `/openapi/v2` with `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`
/// and parses whatever comes back as protobuf: serve [`V2Document::protobuf`] then, and
/// the JSON form for `application/json`.
pub fn v2_served(registry: &Registry, custom: Option<CustomSchemas<'_>>) -> Arc<V2Document> {
    v2(registry, custom)
}

/// Encodes a swagger 2.0 JSON document as gnostic's `openapi.v2.Document` protobuf.
pub fn v2_protobuf(doc: &Value) -> Vec<u8> {
    proto::encode_document(doc)
}

/// Upper-case hex SHA-512 of the document's JSON serialization (what kube-apiserver
/// uses as the v3 `hash` and `ETag`).
pub fn document_etag(doc: &Value) -> String {
    hex_sha512(&serde_json::to_vec(doc).unwrap_or_default())
}

/// Drops the cached documents of a group (all its versions) and the v2 document: call
/// when a CustomResourceDefinition of the group is created, changed or deleted.
pub fn invalidate(group: &str) {
    lock(&cache().gv).retain(|(g, _), _| g != group);
    *lock(&cache().v2) = None;
}

/// The component schema of a custom resource kind: the CRD version's
/// `openAPIV3Schema` (or an object preserving unknown fields when it has none) with
/// `apiVersion`, `kind` and `metadata` (a `$ref` to `ObjectMeta`) added and tagged with
/// the kind's `x-kubernetes-group-version-kind`.
pub fn custom_resource_schema(info: &ResourceInfo, open_api_v3_schema: Option<&Value>) -> Value {
    let mut schema = match open_api_v3_schema {
        Some(Value::Object(o)) => Value::Object(o.clone()),
        _ => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    };
    let obj = schema.as_object_mut().expect("object");
    obj.entry("type").or_insert_with(|| json!("object"));
    let props = obj.entry("properties").or_insert_with(|| json!({}));
    if let Some(props) = props.as_object_mut() {
        props.insert("apiVersion".into(), api_version_property());
        props.insert("kind".into(), kind_property());
        props.insert(
            "metadata".into(),
            json!({
                "allOf": [{"$ref": schema_ref(OBJECT_META)}],
                "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            }),
        );
    }
    obj.insert(
        GVK.into(),
        json!([gvk(&info.group, &info.version, &info.kind)]),
    );
    schema
}

/// The definition name kube-apiserver gives a custom kind: the group's labels reversed,
/// then version and kind (`stable.example.com` v1 `CronTab` ->
/// `com.example.stable.v1.CronTab`).
pub fn custom_definition_name(info: &ResourceInfo) -> String {
    let mut labels: Vec<&str> = info.group.split('.').collect();
    labels.reverse();
    format!("{}.{}.{}", labels.join("."), info.version, info.kind)
}

// ---------------------------------------------------------------------------------------
// Cache
// ---------------------------------------------------------------------------------------

struct GvEntry {
    /// The registry rows the document was built from.
    rows: Vec<ResourceInfo>,
    /// Built with the custom resources' schemas (or there are no custom resources).
    complete: bool,
    doc: Arc<Document>,
}

struct V2Entry {
    rows: Vec<ResourceInfo>,
    complete: bool,
    doc: Arc<V2Document>,
}

#[derive(Default)]
struct Cache {
    gv: Mutex<HashMap<(String, String), GvEntry>>,
    v2: Mutex<Option<V2Entry>>,
}

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(Cache::default)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn rows_of(resources: &[Arc<ResourceInfo>]) -> Vec<ResourceInfo> {
    resources.iter().map(|r| (**r).clone()).collect()
}

/// The cached document of a group-version, built if missing or stale. With `custom`
/// `None`, a document built without custom schemas is acceptable.
fn gv_document(
    registry: &Registry,
    group: &str,
    version: &str,
    custom: Option<CustomSchemas<'_>>,
) -> Option<Arc<Document>> {
    let resources = registry.in_group_version(group, version);
    if resources.is_empty() {
        return None;
    }
    let rows = rows_of(&resources);
    let key = (group.to_string(), version.to_string());
    if let Some(entry) = lock(&cache().gv).get(&key)
        && entry.rows == rows
        && (entry.complete || custom.is_none())
    {
        return Some(entry.doc.clone());
    }
    let has_custom = rows.iter().any(|r| r.custom);
    let doc = Arc::new(Document::new(build_group_version(
        group,
        version,
        &rows,
        custom.unwrap_or(&no_custom_schemas),
    )));
    let complete = custom.is_some() || !has_custom;
    lock(&cache().gv).insert(
        key,
        GvEntry {
            rows,
            complete,
            doc: doc.clone(),
        },
    );
    Some(doc)
}

/// Served group-versions: the core group first, then in discovery order.
fn group_versions(registry: &Registry) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if !registry.in_group_version("", "v1").is_empty() {
        out.push((String::new(), "v1".to_string()));
    }
    for (group, versions) in registry.groups() {
        for version in versions {
            out.push((group.clone(), version));
        }
    }
    out
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn index(registry: &Registry, custom: Option<CustomSchemas<'_>>) -> Value {
    // Held so that building several documents decompresses the schemas once.
    let _schemas = schemas::definitions();
    let mut paths = Map::new();
    for (group, version) in group_versions(registry) {
        if let Some(doc) = gv_document(registry, &group, &version, custom) {
            let path = gv_path(&group, &version);
            paths.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", doc.etag)}),
            );
        }
    }
    json!({ "paths": paths })
}

fn v2(registry: &Registry, custom: Option<CustomSchemas<'_>>) -> Arc<V2Document> {
    let rows = rows_of(&registry.all());
    if let Some(entry) = lock(&cache().v2).as_ref()
        && entry.rows == rows
        && (entry.complete || custom.is_none())
    {
        return entry.doc.clone();
    }
    // Held so that building several documents decompresses the schemas once.
    let _schemas = schemas::definitions();
    let mut complete = true;
    let mut docs = Vec::new();
    for (group, version) in group_versions(registry) {
        if let Some(doc) = gv_document(registry, &group, &version, custom) {
            let has_custom = registry
                .in_group_version(&group, &version)
                .iter()
                .any(|r| r.custom);
            complete &= custom.is_some() || !has_custom;
            docs.push(doc);
        }
    }
    let value = build_v2(docs.iter().map(|d| &d.value));
    let protobuf = proto::encode_document(&value);
    let protobuf_etag = hex_sha512(&protobuf);
    let doc = Arc::new(V2Document {
        document: Document::new(value),
        protobuf,
        protobuf_etag,
    });
    *lock(&cache().v2) = Some(V2Entry {
        rows,
        complete,
        doc: doc.clone(),
    });
    doc
}

fn hex_sha512(data: &[u8]) -> String {
    use std::fmt::Write;
    Sha512::digest(data)
        .iter()
        .fold(String::with_capacity(128), |mut s, b| {
            let _ = write!(s, "{b:02X}");
            s
        })
}

// ---------------------------------------------------------------------------------------
// Schemas
// ---------------------------------------------------------------------------------------

const GVK: &str = "x-kubernetes-group-version-kind";
const SCHEMAS_PREFIX: &str = "#/components/schemas/";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

fn schema_ref(name: &str) -> String {
    format!("{SCHEMAS_PREFIX}{name}")
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "kind": kind, "version": version})
}

fn api_version_property() -> Value {
    json!({
        "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
        "type": "string",
    })
}

fn kind_property() -> Value {
    json!({
        "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
        "type": "string",
    })
}

/// Adds a group-version-kind to a schema's `x-kubernetes-group-version-kind` list.
fn tag(schema: &mut Value, group: &str, version: &str, kind: &str) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let list = obj.entry(GVK).or_insert_with(|| json!([]));
    let entry = gvk(group, version, kind);
    if let Some(items) = list.as_array_mut()
        && !items.contains(&entry)
    {
        items.push(entry);
    }
}

/// The `<Kind>List` schema of a kind.
fn list_schema(item_definition: &str, info: &ResourceInfo) -> Value {
    json!({
        "description": format!("{}List is a list of {} objects.", info.kind, info.kind),
        "properties": {
            "apiVersion": api_version_property(),
            "items": {
                "description": format!("List of {}.", info.plural),
                "items": {"$ref": schema_ref(item_definition)},
                "type": "array",
            },
            "kind": kind_property(),
            "metadata": {
                "allOf": [{"$ref": schema_ref(LIST_META)}],
                "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
            },
        },
        "required": ["items"],
        "type": "object",
        GVK: [gvk(&info.group, &info.version, &format!("{}List", info.kind))],
    })
}

/// Kinds of subresources that are not the parent's kind: (subresource, group, version, kind).
const SUBRESOURCE_KINDS: &[(&str, &str, &str, &str)] = &[
    ("scale", "autoscaling", "v1", "Scale"),
    ("binding", "", "v1", "Binding"),
    ("eviction", "policy", "v1", "Eviction"),
    ("token", "authentication.k8s.io", "v1", "TokenRequest"),
];

/// k8s-openapi makes `metadata` a required field of every kind (it is not optional in
/// Rust); kube-apiserver does not require it.
fn unrequire_metadata(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let is_meta = obj
        .get("properties")
        .and_then(|p| p.get("metadata"))
        .is_some_and(|m| {
            let text = m.to_string();
            text.contains(OBJECT_META) || text.contains(LIST_META)
        });
    if !is_meta {
        return;
    }
    if let Some(Value::Array(required)) = obj.get_mut("required") {
        required.retain(|r| r != "metadata");
        if required.is_empty() {
            obj.remove("required");
        }
    }
}

/// Adds kube-apiserver's patch and list metadata to the built-in definitions present.
fn apply_patch_meta(schemas: &mut Map<String, Value>) {
    for (definition, field, strategy, merge_key, list_type, map_keys) in patch_meta::ROWS {
        let Some(property) = schemas
            .get_mut(*definition)
            .and_then(|d| d.get_mut("properties"))
            .and_then(|p| p.get_mut(*field))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        if !strategy.is_empty() {
            property.insert("x-kubernetes-patch-strategy".into(), json!(strategy));
        }
        if !merge_key.is_empty() {
            property.insert("x-kubernetes-patch-merge-key".into(), json!(merge_key));
        }
        if !list_type.is_empty() {
            property.insert("x-kubernetes-list-type".into(), json!(list_type));
        }
        if !map_keys.is_empty() {
            property.insert("x-kubernetes-list-map-keys".into(), json!(map_keys));
        }
    }
}

/// Kinds (resource kinds and subresource kinds) of a group-version with their
/// definition names, and `components.schemas`.
fn build_schemas(
    group: &str,
    version: &str,
    rows: &[ResourceInfo],
    custom: CustomSchemas<'_>,
) -> (Vec<String>, Map<String, Value>) {
    let mut roots: Vec<&str> = kinds::META.to_vec();
    let mut definitions = Vec::new();
    let mut custom_defs = Map::new();
    let mut sub_kinds: BTreeSet<(&str, &str, &str, &str)> = BTreeSet::new();
    for info in rows {
        let builtin = (!info.custom).then(|| kinds::find(&info.group, &info.version, &info.kind));
        let name = match builtin.flatten() {
            Some(entry) => {
                roots.push(entry.definition);
                entry.definition.to_string()
            }
            None => {
                let name = custom_definition_name(info);
                let schema = custom_resource_schema(info, custom(info).as_ref());
                custom_defs.insert(name.clone(), schema);
                name
            }
        };
        definitions.push(name);
        for sub in &info.subresources {
            if let Some((_, g, v, k)) = SUBRESOURCE_KINDS.iter().find(|(s, ..)| s == sub)
                && let Some(entry) = kinds::find(g, v, k)
            {
                roots.push(entry.definition);
                sub_kinds.insert((g, v, k, entry.definition));
            }
        }
    }
    let mut schemas = schemas::closure(&schemas::definitions(), roots);
    for schema in schemas.values_mut() {
        unrequire_metadata(schema);
    }
    schemas.extend(custom_defs);
    for (info, name) in rows.iter().zip(&definitions) {
        if let Some(schema) = schemas.get_mut(name) {
            tag(schema, &info.group, &info.version, &info.kind);
        }
        schemas.insert(format!("{name}List"), list_schema(name, info));
    }
    for (g, v, k, name) in &sub_kinds {
        if let Some(schema) = schemas.get_mut(*name) {
            tag(schema, g, v, k);
        }
    }
    for meta in ["DeleteOptions", "Status"] {
        if let Some(schema) =
            schemas.get_mut(&format!("io.k8s.apimachinery.pkg.apis.meta.v1.{meta}"))
        {
            tag(schema, group, version, meta);
        }
    }
    apply_patch_meta(&mut schemas);
    (definitions, schemas)
}

fn build_group_version(
    group: &str,
    version: &str,
    rows: &[ResourceInfo],
    custom: CustomSchemas<'_>,
) -> Value {
    let (definitions, schemas) = build_schemas(group, version, rows, custom);
    let mut paths = BTreeMap::new();
    for (info, definition) in rows.iter().zip(&definitions) {
        resource_paths(&mut paths, info, definition);
    }
    let paths: Map<String, Value> = paths
        .into_iter()
        .map(|(path, item)| (path, item.to_v3()))
        .collect();
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

// ---------------------------------------------------------------------------------------
// Paths and operations
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Param {
    name: &'static str,
    location: &'static str,
    ty: &'static str,
    description: &'static str,
}

impl Param {
    const fn query(name: &'static str, ty: &'static str, description: &'static str) -> Param {
        Param {
            name,
            location: "query",
            ty,
            description,
        }
    }

    fn to_v3(self) -> Value {
        let mut p = json!({
            "description": self.description,
            "in": self.location,
            "name": self.name,
            "schema": {"type": self.ty, "uniqueItems": true},
        });
        if self.location == "path" {
            p["required"] = json!(true);
        }
        p
    }
}

const PATH_NAME: Param = Param {
    name: "name",
    location: "path",
    ty: "string",
    description: "name of the object",
};
const PATH_NAMESPACE: Param = Param {
    name: "namespace",
    location: "path",
    ty: "string",
    description: "object name and auth scope, such as for teams and projects",
};
const PATH_PATH: Param = Param {
    name: "path",
    location: "path",
    ty: "string",
    description: "path to the resource",
};
const PRETTY: Param = Param::query(
    "pretty",
    "string",
    "If 'true', then the output is pretty printed.",
);
const DRY_RUN: Param = Param::query(
    "dryRun",
    "string",
    "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
);
const FIELD_MANAGER: Param = Param::query(
    "fieldManager",
    "string",
    "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters. It is required for apply requests (application/apply-patch) and optional otherwise.",
);
const FIELD_VALIDATION: Param = Param::query(
    "fieldValidation",
    "string",
    "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: unknown fields are silently dropped and all but the last duplicate field are ignored. - Warn: a warning is sent for each unknown or duplicate field; the request still succeeds. This is the default. - Strict: the request fails with a BadRequest error listing all unknown and duplicate fields.",
);
const FORCE: Param = Param::query(
    "force",
    "boolean",
    "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
);
const GRACE_PERIOD: Param = Param::query(
    "gracePeriodSeconds",
    "integer",
    "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used.",
);
const IGNORE_STORE_READ_ERROR: Param = Param::query(
    "ignoreStoreReadErrorWithClusterBreakingPotential",
    "boolean",
    "if set to true, it will trigger an unsafe deletion of the resource in case the normal deletion flow fails with a corrupt object error.",
);
const ORPHAN_DEPENDENTS: Param = Param::query(
    "orphanDependents",
    "boolean",
    "Deprecated: please use the PropagationPolicy. Should the dependent objects be orphaned.",
);
const PROPAGATION_POLICY: Param = Param::query(
    "propagationPolicy",
    "string",
    "Whether and how garbage collection will be performed. Acceptable values are: 'Orphan', 'Background' and 'Foreground'.",
);
const ALLOW_WATCH_BOOKMARKS: Param = Param::query(
    "allowWatchBookmarks",
    "boolean",
    "allowWatchBookmarks requests watch events with type \"BOOKMARK\". If this is not a watch, this field is ignored.",
);
const CONTINUE: Param = Param::query(
    "continue",
    "string",
    "The continue option should be set when retrieving more results from the server, with the value of the continue field of the previous list result.",
);
const FIELD_SELECTOR: Param = Param::query(
    "fieldSelector",
    "string",
    "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
);
const LABEL_SELECTOR: Param = Param::query(
    "labelSelector",
    "string",
    "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
);
const LIMIT: Param = Param::query(
    "limit",
    "integer",
    "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata.",
);
const RESOURCE_VERSION: Param = Param::query(
    "resourceVersion",
    "string",
    "resourceVersion sets a constraint on what resource versions a request may be served from. Defaults to unset.",
);
const RESOURCE_VERSION_MATCH: Param = Param::query(
    "resourceVersionMatch",
    "string",
    "resourceVersionMatch determines how resourceVersion is applied to list calls. Defaults to unset.",
);
const SEND_INITIAL_EVENTS: Param = Param::query(
    "sendInitialEvents",
    "boolean",
    "`sendInitialEvents=true` may be set together with `watch=true`; the watch stream then begins with synthetic events of all objects.",
);
const TIMEOUT_SECONDS: Param = Param::query(
    "timeoutSeconds",
    "integer",
    "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
);
const WATCH: Param = Param::query(
    "watch",
    "boolean",
    "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
);

const LIST_PARAMS: &[Param] = &[
    ALLOW_WATCH_BOOKMARKS,
    CONTINUE,
    FIELD_SELECTOR,
    LABEL_SELECTOR,
    LIMIT,
    RESOURCE_VERSION,
    RESOURCE_VERSION_MATCH,
    SEND_INITIAL_EVENTS,
    TIMEOUT_SECONDS,
    WATCH,
];
const WRITE_PARAMS: &[Param] = &[DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
const PATCH_PARAMS: &[Param] = &[DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION, FORCE];
const DELETE_PARAMS: &[Param] = &[
    DRY_RUN,
    GRACE_PERIOD,
    IGNORE_STORE_READ_ERROR,
    ORPHAN_DEPENDENTS,
    PROPAGATION_POLICY,
];
const DELETE_COLLECTION_PARAMS: &[Param] = &[
    CONTINUE,
    DRY_RUN,
    FIELD_SELECTOR,
    GRACE_PERIOD,
    IGNORE_STORE_READ_ERROR,
    LABEL_SELECTOR,
    LIMIT,
    ORPHAN_DEPENDENTS,
    PROPAGATION_POLICY,
    RESOURCE_VERSION,
    RESOURCE_VERSION_MATCH,
    SEND_INITIAL_EVENTS,
    TIMEOUT_SECONDS,
];
const LOG_PARAMS: &[Param] = &[
    Param::query(
        "container",
        "string",
        "The container for which to stream logs.",
    ),
    Param::query("follow", "boolean", "Follow the log stream of the pod."),
    Param::query(
        "insecureSkipTLSVerifyBackend",
        "boolean",
        "insecureSkipTLSVerifyBackend indicates that the apiserver should not confirm the validity of the serving certificate of the backend it is connecting to.",
    ),
    Param::query(
        "limitBytes",
        "integer",
        "If set, the number of bytes to read from the server before terminating the log output.",
    ),
    Param::query(
        "previous",
        "boolean",
        "Return previous terminated container logs.",
    ),
    Param::query(
        "sinceSeconds",
        "integer",
        "A relative time in seconds before the current time from which to show logs.",
    ),
    Param::query(
        "stream",
        "string",
        "Specify which container log stream to return to the client: All, Stdout or Stderr.",
    ),
    Param::query(
        "tailLines",
        "integer",
        "If set, the number of lines from the end of the logs to show.",
    ),
    Param::query(
        "timestamps",
        "boolean",
        "If true, add an RFC3339 timestamp at the beginning of every line of log output.",
    ),
];
const EXEC_PARAMS: &[Param] = &[
    Param::query(
        "command",
        "string",
        "Command is the remote command to execute. argv array.",
    ),
    Param::query(
        "container",
        "string",
        "Container in which to execute the command.",
    ),
    Param::query(
        "stderr",
        "boolean",
        "Redirect the standard error stream of the pod for this call.",
    ),
    Param::query(
        "stdin",
        "boolean",
        "Redirect the standard input stream of the pod for this call.",
    ),
    Param::query(
        "stdout",
        "boolean",
        "Redirect the standard output stream of the pod for this call.",
    ),
    Param::query(
        "tty",
        "boolean",
        "TTY if true indicates that a tty will be allocated for the exec call.",
    ),
];
const ATTACH_PARAMS: &[Param] = &[
    Param::query(
        "container",
        "string",
        "The container in which to execute the command.",
    ),
    Param::query(
        "stderr",
        "boolean",
        "Stderr if true indicates that stderr is to be redirected for the attach call.",
    ),
    Param::query(
        "stdin",
        "boolean",
        "Stdin if true, redirects the standard input stream of the pod for this call.",
    ),
    Param::query(
        "stdout",
        "boolean",
        "Stdout if true indicates that stdout is to be redirected for the attach call.",
    ),
    Param::query(
        "tty",
        "boolean",
        "TTY if true indicates that a tty will be allocated for the attach call.",
    ),
];
const PORTFORWARD_PARAMS: &[Param] = &[Param::query(
    "ports",
    "integer",
    "List of ports to forward.",
)];
const PROXY_PARAMS: &[Param] = &[Param::query(
    "path",
    "string",
    "Path is the URL path to use for the current proxy request.",
)];

const PATCH_CONTENT_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];
/// Custom resources do not take strategic merge patches.
const CUSTOM_PATCH_CONTENT_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
];
const RESPONSE_TYPES: &[&str] = &[
    "application/json",
    "application/vnd.kubernetes.protobuf",
    "application/yaml",
];
const LIST_RESPONSE_TYPES: &[&str] = &[
    "application/json",
    "application/json;stream=watch",
    "application/vnd.kubernetes.protobuf",
    "application/vnd.kubernetes.protobuf;stream=watch",
    "application/yaml",
];

/// A request or response body.
#[derive(Clone)]
enum Body {
    /// `$ref` to a component schema.
    Ref(String),
    /// A plain string (logs, connect responses).
    Text,
}

impl Body {
    fn schema(&self) -> Value {
        match self {
            Body::Ref(name) => json!({"$ref": schema_ref(name)}),
            Body::Text => json!({"type": "string"}),
        }
    }
}

struct Op {
    action: &'static str,
    operation_id: String,
    description: String,
    gvk: (String, String, String),
    params: Vec<Param>,
    /// Request body and its content types.
    request: Option<(Body, &'static [&'static str])>,
    /// Response body, content types and success codes.
    response: (Body, &'static [&'static str], &'static [&'static str]),
    tag: String,
}

impl Op {
    fn to_v3(&self) -> Value {
        let content = |body: &Body, types: &[&str]| -> Value {
            types
                .iter()
                .map(|t| (t.to_string(), json!({"schema": body.schema()})))
                .collect::<Map<_, _>>()
                .into()
        };
        let mut responses = Map::new();
        let (body, types, codes) = &self.response;
        for code in *codes {
            let description = match *code {
                "201" => "Created",
                "202" => "Accepted",
                _ => "OK",
            };
            responses.insert(
                code.to_string(),
                json!({"content": content(body, types), "description": description}),
            );
        }
        responses.insert("401".into(), json!({"description": "Unauthorized"}));
        let mut op = json!({
            "description": self.description,
            "operationId": self.operation_id,
            "responses": responses,
            "tags": [self.tag],
            "x-kubernetes-action": self.action,
            GVK: gvk(&self.gvk.0, &self.gvk.1, &self.gvk.2),
        });
        if !self.params.is_empty() {
            op["parameters"] = self.params.iter().map(|p| p.to_v3()).collect();
        }
        if let Some((body, types)) = &self.request {
            let mut request = json!({"content": content(body, types)});
            if self.action != "delete" && self.action != "deletecollection" {
                request["required"] = json!(true);
            }
            op["requestBody"] = request;
        }
        op
    }
}

#[derive(Default)]
struct PathItem {
    params: Vec<Param>,
    ops: BTreeMap<&'static str, Op>,
}

impl PathItem {
    fn to_v3(&self) -> Value {
        let mut item = Map::new();
        for (method, op) in &self.ops {
            item.insert(method.to_string(), op.to_v3());
        }
        if !self.params.is_empty() {
            item.insert(
                "parameters".into(),
                self.params.iter().map(|p| p.to_v3()).collect(),
            );
        }
        item.into()
    }
}

/// `rbac.authorization.k8s.io` -> `RbacAuthorization`, `""` -> `Core` (kube's operation
/// id prefix).
fn group_camel(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    group
        .trim_end_matches(".k8s.io")
        .split(['.', '-'])
        .map(capitalize)
        .collect()
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

fn lower_first(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map(|c| c.to_ascii_lowercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// Adds the paths of one resource: collection, item, all-namespaces list and
/// subresources, with the operations its verbs allow.
fn resource_paths(paths: &mut BTreeMap<String, PathItem>, info: &ResourceInfo, definition: &str) {
    let prefix = if info.group.is_empty() {
        format!("/api/{}", info.version)
    } else {
        format!("/apis/{}/{}", info.group, info.version)
    };
    let g = group_camel(&info.group);
    let gv = format!("{g}{}", capitalize(&info.version));
    let tag = format!("{}_{}", lower_first(&g), info.version);
    let kind = info.kind.as_str();
    let scope = if info.namespaced { "Namespaced" } else { "" };
    let own_gvk = (info.group.clone(), info.version.clone(), info.kind.clone());
    let obj = Body::Ref(definition.to_string());
    let list = Body::Ref(format!("{definition}List"));
    let patch_types = if info.custom {
        CUSTOM_PATCH_CONTENT_TYPES
    } else {
        PATCH_CONTENT_TYPES
    };
    let has = |verb: &str| info.verbs.contains(&verb);
    let collection = if info.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", info.plural)
    } else {
        format!("{prefix}/{}", info.plural)
    };
    let item = format!("{collection}/{{name}}");
    let scope_params = |named: bool| -> Vec<Param> {
        let mut p = Vec::new();
        if named {
            p.push(PATH_NAME);
        }
        if info.namespaced {
            p.push(PATH_NAMESPACE);
        }
        p.push(PRETTY);
        p
    };
    let op = |action: &'static str, id: String, description: String, params: &[Param]| Op {
        action,
        operation_id: id,
        description,
        gvk: own_gvk.clone(),
        params: params.to_vec(),
        request: None,
        response: (obj.clone(), RESPONSE_TYPES, &["200"]),
        tag: tag.clone(),
    };

    // Collection.
    let mut entry = PathItem {
        params: scope_params(false),
        ops: BTreeMap::new(),
    };
    if has("list") {
        let mut o = op(
            "list",
            format!("list{gv}{scope}{kind}"),
            format!("list or watch objects of kind {kind}"),
            LIST_PARAMS,
        );
        o.response = (list.clone(), LIST_RESPONSE_TYPES, &["200"]);
        entry.ops.insert("get", o);
    }
    if has("create") {
        let mut o = op(
            "post",
            format!("create{gv}{scope}{kind}"),
            format!("create a {kind}"),
            WRITE_PARAMS,
        );
        o.request = Some((obj.clone(), &["*/*"]));
        o.response = (obj.clone(), RESPONSE_TYPES, &["200", "201", "202"]);
        entry.ops.insert("post", o);
    }
    if has("deletecollection") {
        let mut o = op(
            "deletecollection",
            format!("delete{gv}Collection{scope}{kind}"),
            format!("delete collection of {kind}"),
            DELETE_COLLECTION_PARAMS,
        );
        o.request = Some((Body::Ref(DELETE_OPTIONS.into()), &["*/*"]));
        o.response = (Body::Ref(STATUS.into()), RESPONSE_TYPES, &["200"]);
        entry.ops.insert("delete", o);
    }
    if !entry.ops.is_empty() {
        paths.insert(collection.clone(), entry);
    }

    // All namespaces.
    if info.namespaced && has("list") {
        let mut o = op(
            "list",
            format!("list{gv}{kind}ForAllNamespaces"),
            format!("list or watch objects of kind {kind}"),
            LIST_PARAMS,
        );
        o.response = (list.clone(), LIST_RESPONSE_TYPES, &["200"]);
        let mut all = PathItem {
            params: vec![PRETTY],
            ops: BTreeMap::new(),
        };
        all.ops.insert("get", o);
        paths.insert(format!("{prefix}/{}", info.plural), all);
    }

    // Item.
    let mut entry = PathItem {
        params: scope_params(true),
        ops: BTreeMap::new(),
    };
    if has("get") {
        entry.ops.insert(
            "get",
            op(
                "get",
                format!("read{gv}{scope}{kind}"),
                format!("read the specified {kind}"),
                &[],
            ),
        );
    }
    if has("update") {
        let mut o = op(
            "put",
            format!("replace{gv}{scope}{kind}"),
            format!("replace the specified {kind}"),
            WRITE_PARAMS,
        );
        o.request = Some((obj.clone(), &["*/*"]));
        o.response = (obj.clone(), RESPONSE_TYPES, &["200", "201"]);
        entry.ops.insert("put", o);
    }
    if has("patch") {
        let mut o = op(
            "patch",
            format!("patch{gv}{scope}{kind}"),
            format!("partially update the specified {kind}"),
            PATCH_PARAMS,
        );
        o.request = Some((Body::Ref(PATCH.into()), patch_types));
        o.response = (obj.clone(), RESPONSE_TYPES, &["200", "201"]);
        entry.ops.insert("patch", o);
    }
    if has("delete") {
        let mut o = op(
            "delete",
            format!("delete{gv}{scope}{kind}"),
            format!("delete a {kind}"),
            DELETE_PARAMS,
        );
        o.request = Some((Body::Ref(DELETE_OPTIONS.into()), &["*/*"]));
        o.response = (obj.clone(), RESPONSE_TYPES, &["200", "202"]);
        entry.ops.insert("delete", o);
    }
    if !entry.ops.is_empty() {
        paths.insert(item.clone(), entry);
    }

    // Subresources.
    for sub in &info.subresources {
        let path = format!("{item}/{sub}");
        let suffix = capitalize(sub);
        let id = |verb: &str| format!("{verb}{gv}{scope}{kind}{suffix}");
        let mut entry = PathItem {
            params: scope_params(true),
            ops: BTreeMap::new(),
        };
        match sub.as_str() {
            "status" | "scale" | "ephemeralcontainers" | "approval" => {
                let (body, sub_gvk) = match SUBRESOURCE_KINDS.iter().find(|(s, ..)| s == sub) {
                    Some((_, g, v, k)) => match kinds::find(g, v, k) {
                        Some(e) => (
                            Body::Ref(e.definition.to_string()),
                            (g.to_string(), v.to_string(), k.to_string()),
                        ),
                        None => continue,
                    },
                    None => (obj.clone(), own_gvk.clone()),
                };
                let with = |mut o: Op,
                            request: Option<(Body, &'static [&'static str])>,
                            codes: &'static [&'static str]| {
                    o.gvk = sub_gvk.clone();
                    o.request = request;
                    o.response = (body.clone(), RESPONSE_TYPES, codes);
                    o
                };
                entry.ops.insert(
                    "get",
                    with(
                        op(
                            "get",
                            id("read"),
                            format!("read {sub} of the specified {kind}"),
                            &[],
                        ),
                        None,
                        &["200"],
                    ),
                );
                entry.ops.insert(
                    "put",
                    with(
                        op(
                            "put",
                            id("replace"),
                            format!("replace {sub} of the specified {kind}"),
                            WRITE_PARAMS,
                        ),
                        Some((body.clone(), &["*/*"])),
                        &["200", "201"],
                    ),
                );
                entry.ops.insert(
                    "patch",
                    with(
                        op(
                            "patch",
                            id("patch"),
                            format!("partially update {sub} of the specified {kind}"),
                            PATCH_PARAMS,
                        ),
                        Some((Body::Ref(PATCH.into()), patch_types)),
                        &["200", "201"],
                    ),
                );
            }
            "finalize" => {
                let mut o = op(
                    "put",
                    id("replace"),
                    format!("replace finalize of the specified {kind}"),
                    WRITE_PARAMS,
                );
                o.request = Some((obj.clone(), &["*/*"]));
                o.response = (obj.clone(), RESPONSE_TYPES, &["200", "201"]);
                entry.ops.insert("put", o);
            }
            "binding" | "eviction" | "token" => {
                let Some((_, g, v, k)) = SUBRESOURCE_KINDS.iter().find(|(s, ..)| s == sub) else {
                    continue;
                };
                let Some(e) = kinds::find(g, v, k) else {
                    continue;
                };
                let body = Body::Ref(e.definition.to_string());
                let mut o = op(
                    "post",
                    id("create"),
                    format!("create {sub} of a {kind}"),
                    WRITE_PARAMS,
                );
                o.gvk = (g.to_string(), v.to_string(), k.to_string());
                o.request = Some((body.clone(), &["*/*"]));
                o.response = (body, RESPONSE_TYPES, &["200", "201", "202"]);
                entry.ops.insert("post", o);
            }
            "log" => {
                let mut o = op(
                    "get",
                    id("read"),
                    format!("read log of the specified {kind}"),
                    LOG_PARAMS,
                );
                o.response = (
                    Body::Text,
                    &[
                        "text/plain",
                        "application/json",
                        "application/yaml",
                        "application/vnd.kubernetes.protobuf",
                    ],
                    &["200"],
                );
                entry.ops.insert("get", o);
            }
            "exec" | "attach" | "portforward" | "proxy" => {
                let (options, params, methods): (&str, &[Param], &[&'static str]) = match sub
                    .as_str()
                {
                    "exec" => ("ExecOptions", EXEC_PARAMS, &["get", "post"]),
                    "attach" => ("AttachOptions", ATTACH_PARAMS, &["get", "post"]),
                    "portforward" => ("PortForwardOptions", PORTFORWARD_PARAMS, &["get", "post"]),
                    _ => (
                        "ProxyOptions",
                        PROXY_PARAMS,
                        &["delete", "get", "head", "options", "patch", "post", "put"],
                    ),
                };
                let connect_gvk = (
                    info.group.clone(),
                    info.version.clone(),
                    format!("{kind}{options}"),
                );
                let connect = |method: &str, params: &[Param]| {
                    let mut o = op(
                        "connect",
                        format!("connect{gv}{}{scope}{kind}{suffix}", capitalize(method)),
                        format!(
                            "connect {} requests to {sub} of {kind}",
                            method.to_ascii_uppercase()
                        ),
                        params,
                    );
                    o.gvk = connect_gvk.clone();
                    o.response = (Body::Text, &["*/*"], &["200"]);
                    o
                };
                entry.params = scope_params(true)
                    .into_iter()
                    .filter(|p| p.name != "pretty")
                    .collect();
                for method in methods {
                    entry.ops.insert(method, connect(method, params));
                }
                if sub == "proxy" {
                    let mut with_path = PathItem {
                        params: [PATH_NAME]
                            .into_iter()
                            .chain(info.namespaced.then_some(PATH_NAMESPACE))
                            .chain([PATH_PATH])
                            .collect(),
                        ops: BTreeMap::new(),
                    };
                    for method in methods {
                        let mut o = connect(method, params);
                        o.operation_id = format!(
                            "connect{gv}{}{scope}{kind}ProxyWithPath",
                            capitalize(method)
                        );
                        with_path.ops.insert(method, o);
                    }
                    paths.insert(format!("{path}/{{path}}"), with_path);
                }
            }
            _ => continue,
        }
        paths.insert(path, entry);
    }
}

// ---------------------------------------------------------------------------------------
// Swagger 2.0
// ---------------------------------------------------------------------------------------

/// Converts a v3 schema to swagger 2.0: `#/definitions/` refs, a lone `allOf` `$ref`
/// inlined as `$ref` with its siblings (as kube-apiserver's v2 does), and the keywords
/// swagger 2.0 lacks (`anyOf`, `oneOf`, `not`, `nullable`) dropped.
fn schema_to_v2(schema: &Value) -> Value {
    let Some(obj) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in obj {
        match key.as_str() {
            "$ref" => {
                let name = value
                    .as_str()
                    .unwrap_or("")
                    .trim_start_matches(SCHEMAS_PREFIX);
                out.insert(key.clone(), json!(format!("#/definitions/{name}")));
            }
            "anyOf" | "oneOf" | "not" | "nullable" => {}
            "allOf" => match value.as_array().map(Vec::as_slice) {
                Some([only])
                    if only.get("$ref").is_some()
                        && only.as_object().is_some_and(|o| o.len() == 1) =>
                {
                    out.extend(schema_to_v2(only).as_object().cloned().unwrap_or_default());
                }
                _ => {
                    out.insert(
                        key.clone(),
                        value
                            .as_array()
                            .map(|a| a.iter().map(schema_to_v2).collect())
                            .unwrap_or_default(),
                    );
                }
            },
            "properties" => {
                let props: Map<String, Value> = value
                    .as_object()
                    .map(|p| {
                        p.iter()
                            .map(|(k, v)| (k.clone(), schema_to_v2(v)))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert(key.clone(), props.into());
            }
            "items" | "additionalProperties" if value.is_object() => {
                out.insert(key.clone(), schema_to_v2(value));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    out.into()
}

fn param_to_v2(param: &Value) -> Value {
    let mut p = param.as_object().cloned().unwrap_or_default();
    if let Some(Value::Object(schema)) = p.remove("schema") {
        p.extend(schema);
    }
    p.into()
}

/// The first schema of a v3 `content` map, converted to v2.
fn content_schema(content: Option<&Value>) -> Option<Value> {
    content?
        .as_object()?
        .values()
        .next()?
        .get("schema")
        .map(schema_to_v2)
}

fn content_types(content: Option<&Value>) -> Vec<Value> {
    content
        .and_then(Value::as_object)
        .map(|c| c.keys().map(|k| json!(k)).collect())
        .unwrap_or_default()
}

fn operation_to_v2(op: &Value) -> Value {
    let mut out = Map::new();
    let mut params: Vec<Value> = op
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(param_to_v2)
        .collect();
    if let Some(request) = op.get("requestBody") {
        let content = request.get("content");
        out.insert("consumes".into(), content_types(content).into());
        let mut body = json!({"in": "body", "name": "body"});
        if request.get("required").and_then(Value::as_bool) == Some(true) {
            body["required"] = json!(true);
        }
        if let Some(schema) = content_schema(content) {
            body["schema"] = schema;
        }
        params.insert(0, body);
    } else {
        out.insert("consumes".into(), json!(["*/*"]));
    }
    if !params.is_empty() {
        out.insert("parameters".into(), params.into());
    }
    let mut produces = BTreeSet::new();
    let mut responses = Map::new();
    for (code, response) in op
        .get("responses")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let content = response.get("content");
        produces.extend(
            content_types(content)
                .into_iter()
                .filter_map(|v| v.as_str().map(str::to_string)),
        );
        let mut r =
            json!({"description": response.get("description").cloned().unwrap_or(json!(""))});
        if let Some(schema) = content_schema(content) {
            r["schema"] = schema;
        }
        responses.insert(code.clone(), r);
    }
    out.insert("produces".into(), produces.into_iter().collect());
    out.insert("responses".into(), responses.into());
    out.insert("schemes".into(), json!(["https"]));
    for (key, value) in op.as_object().into_iter().flatten() {
        if matches!(key.as_str(), "description" | "operationId" | "tags") || key.starts_with("x-") {
            out.insert(key.clone(), value.clone());
        }
    }
    out.into()
}

/// Merges group-version documents into one swagger 2.0 document.
fn build_v2<'a>(docs: impl Iterator<Item = &'a Value>) -> Value {
    let mut definitions = Map::new();
    let mut paths = Map::new();
    for doc in docs {
        for (name, schema) in doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let converted = schema_to_v2(schema);
            match definitions.get_mut(name) {
                Some(existing) => {
                    // Same definition from another group-version: merge the kind lists.
                    for entry in converted
                        .get(GVK)
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let (Some(g), Some(v), Some(k)) = (
                            entry["group"].as_str(),
                            entry["version"].as_str(),
                            entry["kind"].as_str(),
                        ) {
                            tag(existing, g, v, k);
                        }
                    }
                }
                None => {
                    definitions.insert(name.clone(), converted);
                }
            }
        }
        for (path, item) in doc
            .get("paths")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let mut out = Map::new();
            for (key, value) in item.as_object().into_iter().flatten() {
                if key == "parameters" {
                    let params: Vec<Value> = value
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(param_to_v2)
                        .collect();
                    out.insert(key.clone(), params.into());
                } else {
                    out.insert(key.clone(), operation_to_v2(value));
                }
            }
            paths.insert(path.clone(), out.into());
        }
    }
    // kube-apiserver's v2 types for the int-or-string scalars.
    if let Some(Value::Object(d)) =
        definitions.get_mut("io.k8s.apimachinery.pkg.util.intstr.IntOrString")
    {
        d.insert("type".into(), json!("string"));
        d.insert("format".into(), json!("int-or-string"));
    }
    if let Some(Value::Object(d)) =
        definitions.get_mut("io.k8s.apimachinery.pkg.api.resource.Quantity")
    {
        d.insert("type".into(), json!("string"));
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "definitions": definitions,
    })
}

#[cfg(test)]
mod tests;
