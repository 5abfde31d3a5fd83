//! Unit tests of the OpenAPI documents: one per built-in group-version, references that
//! resolve, `fieldValidation` and GVK tags on PATCH operations, deterministic output.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;
use crate::apiserver::storage::registry::{Registry, ResourceInfo};

fn gv_doc(registry: &Registry, group: &str, version: &str) -> Value {
    v3_group_version(registry, group, version, &no_custom_schemas).expect("document")
}

/// Every `$ref` in `value`.
fn refs(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => {
                        out.insert(r.clone());
                    }
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

fn assert_refs_resolve(doc: &Value, prefix: &str, pointer: &str) {
    let mut all = BTreeSet::new();
    refs(doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let name = r
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("bad ref {r}"));
        assert!(
            doc.pointer(pointer).and_then(|s| s.get(name)).is_some(),
            "unresolved {r}"
        );
    }
}

fn gvk_of(op: &Value) -> (String, String, String) {
    let g = &op[GVK];
    (
        g["group"].as_str().unwrap().into(),
        g["version"].as_str().unwrap().into(),
        g["kind"].as_str().unwrap().into(),
    )
}

/// kubectl's `supportsQueryParamV3`: the first PATCH operation with the kind decides.
/// Whether the kind's PATCH (or, for create-only kinds such as the access reviews, its
/// POST) operation takes `fieldValidation`.
fn supports_field_validation(doc: &Value, group: &str, version: &str, kind: &str) -> bool {
    for item in doc["paths"].as_object().unwrap().values() {
        let Some(patch) = item.get("patch").or_else(|| item.get("post")) else {
            continue;
        };
        let g = &patch[GVK];
        if g["group"] == group && g["version"] == version && g["kind"] == kind {
            return patch["parameters"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["name"] == "fieldValidation"));
        }
    }
    false
}

#[test]
fn every_builtin_group_version_has_a_document() {
    let registry = Registry::new();
    let gvs = group_versions(&registry);
    assert!(gvs.len() > 10);
    for (group, version) in gvs {
        let doc = gv_doc(&registry, &group, &version);
        assert_eq!(doc["openapi"], "3.0.0");
        assert_eq!(doc["info"]["title"], "Kubernetes");
        for info in registry.in_group_version(&group, &version) {
            let kinds: Vec<_> = doc["components"]["schemas"]
                .as_object()
                .unwrap()
                .values()
                .filter(|s| {
                    s[GVK]
                        .as_array()
                        .is_some_and(|l| l.contains(&gvk(&group, &version, &info.kind)))
                })
                .collect();
            assert_eq!(kinds.len(), 1, "{group}/{version} {}", info.kind);
            assert!(
                kinds[0]["description"]
                    .as_str()
                    .is_some_and(|d| !d.is_empty()),
                "{}",
                info.kind
            );
        }
    }
    assert!(v3_group_version(&registry, "nope.example.com", "v1", &no_custom_schemas).is_none());
}

#[test]
fn deployment_patch_supports_field_validation() {
    let registry = Registry::new();
    let doc = gv_doc(&registry, "apps", "v1");
    let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert_eq!(
        gvk_of(patch),
        ("apps".into(), "v1".into(), "Deployment".into())
    );
    assert_eq!(patch["x-kubernetes-action"], "patch");
    let names: Vec<_> = patch["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for want in ["fieldValidation", "dryRun", "fieldManager", "force"] {
        assert!(names.contains(&want), "{want}");
    }
    let content = patch["requestBody"]["content"].as_object().unwrap();
    for ct in PATCH_CONTENT_TYPES {
        assert!(content.contains_key(*ct), "{ct}");
    }
    // The status and scale subresources carry their kinds too.
    let status =
        &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/status"]["patch"];
    assert_eq!(gvk_of(status).2, "Deployment");
    let scale =
        &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["patch"];
    assert_eq!(
        gvk_of(scale),
        ("autoscaling".into(), "v1".into(), "Scale".into())
    );
}

#[test]
fn every_resource_supports_field_validation_and_explain() {
    let registry = Registry::new();
    for info in registry.all() {
        let doc = gv_doc(&registry, &info.group, &info.version);
        assert!(
            supports_field_validation(&doc, &info.group, &info.version, &info.kind),
            "{}/{} {}",
            info.group,
            info.version,
            info.kind
        );
        // explain: the kind comes from an operation on the resource's own paths.
        let prefix = if info.group.is_empty() {
            "/api".to_string()
        } else {
            format!("/apis/{}", info.group)
        };
        let candidates = [
            format!("{prefix}/{}/{}", info.version, info.plural),
            format!(
                "{prefix}/{}/namespaces/{{namespace}}/{}",
                info.version, info.plural
            ),
        ];
        let op_gvk = candidates
            .iter()
            .filter_map(|p| doc["paths"].get(p))
            .find_map(|item| {
                ["get", "post"]
                    .iter()
                    .find_map(|m| item.get(*m))
                    .map(|op| op[GVK].clone())
            })
            .unwrap_or_else(|| panic!("no operation for {}", info.plural));
        assert!(
            doc["components"]["schemas"]
                .as_object()
                .unwrap()
                .values()
                .any(|s| s[GVK].as_array().is_some_and(|l| l.contains(&op_gvk))),
            "{op_gvk}"
        );
    }
}

#[test]
fn refs_resolve_in_every_document() {
    let registry = Registry::new();
    for (group, version) in group_versions(&registry) {
        let doc = gv_doc(&registry, &group, &version);
        assert_refs_resolve(&doc, SCHEMAS_PREFIX, "/components/schemas");
    }
    let v2 = v2_document(&registry);
    assert_refs_resolve(&v2, "#/definitions/", "/definitions");
}

#[test]
fn deployment_schema_has_description_kind_and_patch_metadata() {
    let registry = Registry::new();
    let doc = gv_doc(&registry, "apps", "v1");
    let schemas = &doc["components"]["schemas"];
    let deployment = &schemas["io.k8s.api.apps.v1.Deployment"];
    assert!(
        deployment["description"]
            .as_str()
            .unwrap()
            .contains("Deployment")
    );
    assert_eq!(
        deployment[GVK],
        json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
    );
    assert!(
        deployment.get("required").is_none(),
        "metadata is not required"
    );
    assert_eq!(
        schemas["io.k8s.api.apps.v1.DeploymentList"][GVK],
        json!([{"group": "apps", "kind": "DeploymentList", "version": "v1"}])
    );
    let replicas = &schemas["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["replicas"];
    assert_eq!(replicas["type"], "integer");
    assert!(replicas["description"].is_string());
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    let owners = &schemas[OBJECT_META]["properties"]["ownerReferences"];
    assert_eq!(owners["x-kubernetes-patch-merge-key"], "uid");
    // Fields referencing other definitions are wrapped in allOf with their description.
    let metadata = &deployment["properties"]["metadata"];
    assert_eq!(
        metadata["allOf"][0]["$ref"],
        format!("{SCHEMAS_PREFIX}{OBJECT_META}")
    );
    assert!(metadata["description"].is_string());
}

#[test]
fn index_lists_group_versions_with_document_hashes() {
    let registry = Registry::new();
    let index = v3_index(&registry);
    let paths = index["paths"].as_object().unwrap();
    assert!(paths.contains_key("api/v1"));
    let url = paths["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap();
    let doc = v3_group_version_document(&registry, "apps", "v1", &no_custom_schemas).unwrap();
    assert_eq!(url, format!("/openapi/v3/apis/apps/v1?hash={}", doc.etag));
    assert_eq!(doc.etag, document_etag(&doc.value));
    assert_eq!(doc.etag.len(), 128);
    assert_eq!(paths.len(), group_versions(&registry).len());
}

#[test]
fn documents_are_deterministic() {
    let registry = Registry::new();
    let rows = rows_of(&registry.in_group_version("batch", "v1"));
    let a = build_group_version("batch", "v1", &rows, &no_custom_schemas);
    let b = build_group_version("batch", "v1", &rows, &no_custom_schemas);
    assert_eq!(document_etag(&a), document_etag(&b));
}

#[test]
fn v2_document_has_definitions_paths_and_protobuf() {
    let registry = Registry::new();
    let v2 = v2_served(&registry, None);
    let doc = &v2.document.value;
    assert_eq!(doc["swagger"], "2.0");
    let defs = doc["definitions"].as_object().unwrap();
    assert_eq!(
        defs["io.k8s.api.core.v1.Pod"][GVK],
        json!([{"group": "", "kind": "Pod", "version": "v1"}])
    );
    assert_eq!(
        defs["io.k8s.api.apps.v1.Deployment"][GVK][0]["kind"],
        "Deployment"
    );
    // v2 style: a `$ref` with its description, no allOf.
    let spec = &defs["io.k8s.api.apps.v1.Deployment"]["properties"]["spec"];
    assert_eq!(
        spec["$ref"],
        "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"
    );
    assert!(spec.get("allOf").is_none());
    assert_eq!(
        defs["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]["x-kubernetes-patch-merge-key"],
        "name"
    );
    // DeleteOptions is tagged for every group-version.
    assert!(defs[DELETE_OPTIONS][GVK].as_array().unwrap().len() >= group_versions(&registry).len());
    let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert!(
        patch["consumes"]
            .as_array()
            .unwrap()
            .contains(&json!("application/strategic-merge-patch+json"))
    );
    assert!(
        patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["type"] == "string")
    );
    // gnostic Document: field 1 (swagger) = "2.0" first.
    assert_eq!(&v2.protobuf[..5], &[0x0a, 0x03, b'2', b'.', b'0']);
    assert_eq!(v2.protobuf, v2_protobuf(doc));
    assert_eq!(v2.protobuf_etag.len(), 128);
}

/// A minimal protobuf reader for checking the encoding.
fn read_varint(data: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = data[*pos];
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

/// (field, bytes) of the length-delimited fields of a message (skipping scalars).
fn fields(data: &[u8]) -> Vec<(u64, &[u8])> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let key = read_varint(data, &mut pos);
        match key & 7 {
            0 => {
                read_varint(data, &mut pos);
            }
            1 => pos += 8,
            2 => {
                let len = read_varint(data, &mut pos) as usize;
                out.push((key >> 3, &data[pos..pos + len]));
                pos += len;
            }
            other => panic!("wire type {other}"),
        }
    }
    out
}

#[test]
fn v2_protobuf_decodes_to_the_definitions() {
    let registry = Registry::new();
    let v2 = v2_served(&registry, None);
    let top = fields(&v2.protobuf);
    let definitions = top.iter().find(|(f, _)| *f == 9).expect("definitions").1;
    let named: Vec<_> = fields(definitions)
        .into_iter()
        .filter(|(f, _)| *f == 1)
        .collect();
    assert_eq!(
        named.len(),
        v2.document.value["definitions"].as_object().unwrap().len()
    );
    // Find Deployment and its vendor extension (Schema field 31: NamedAny).
    let deployment = named
        .iter()
        .map(|(_, d)| fields(d))
        .find(|f| {
            f.iter()
                .any(|(n, v)| *n == 1 && *v == b"io.k8s.api.apps.v1.Deployment")
        })
        .expect("Deployment");
    let schema = deployment.iter().find(|(n, _)| *n == 2).unwrap().1;
    let ext = fields(schema)
        .into_iter()
        .filter(|(n, _)| *n == 31)
        .map(|(_, v)| fields(v))
        .find(|nf| nf.iter().any(|(n, v)| *n == 1 && *v == GVK.as_bytes()));
    let ext = ext.expect("gvk extension");
    let any = fields(ext.iter().find(|(n, _)| *n == 2).unwrap().1);
    let yaml: Value = serde_json::from_slice(any.iter().find(|(n, _)| *n == 2).unwrap().1).unwrap();
    assert_eq!(
        yaml,
        json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
    );
}

/// A custom resource row (built from a built-in row so new `ResourceInfo` fields need no
/// change here).
fn crontab() -> ResourceInfo {
    let mut info = (*Registry::new().find("apps", "v1", "deployments").unwrap()).clone();
    info.group = "stable.example.com".into();
    info.version = "v1".into();
    info.kind = "CronTab".into();
    info.plural = "crontabs".into();
    info.singular = "crontab".into();
    info.namespaced = true;
    info.short_names = vec!["ct".into()];
    info.categories = vec![];
    info.subresources = vec!["status".into(), "scale".into()];
    info.custom = true;
    info
}

#[test]
fn custom_resources_use_their_crd_schema() {
    let registry = Registry::new();
    registry.upsert_custom(vec![crontab()]);
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"cronSpec": {"type": "string", "description": "schedule"}}}},
    });
    let custom = |info: &ResourceInfo| (info.kind == "CronTab").then(|| schema.clone());

    // Built without the schema (the index without a provider), then with it.
    let index = v3_index(&registry);
    let first = index["paths"]["apis/stable.example.com/v1"]["serverRelativeURL"].clone();
    let doc = v3_group_version(&registry, "stable.example.com", "v1", &custom).unwrap();
    let index = v3_index_with(&registry, &custom);
    assert_ne!(
        index["paths"]["apis/stable.example.com/v1"]["serverRelativeURL"],
        first
    );

    let name = "com.example.stable.v1.CronTab";
    let ct = &doc["components"]["schemas"][name];
    assert_eq!(
        ct["properties"]["spec"]["properties"]["cronSpec"]["description"],
        "schedule"
    );
    assert_eq!(
        ct["properties"]["metadata"]["allOf"][0]["$ref"],
        format!("{SCHEMAS_PREFIX}{OBJECT_META}")
    );
    assert_eq!(
        ct[GVK],
        json!([{"group": "stable.example.com", "kind": "CronTab", "version": "v1"}])
    );
    assert!(
        doc["components"]["schemas"]
            .get(format!("{name}List"))
            .is_some()
    );
    assert_refs_resolve(&doc, SCHEMAS_PREFIX, "/components/schemas");
    assert!(supports_field_validation(
        &doc,
        "stable.example.com",
        "v1",
        "CronTab"
    ));
    let patch = &doc["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"]
        ["patch"];
    let content = patch["requestBody"]["content"].as_object().unwrap();
    assert!(!content.contains_key("application/strategic-merge-patch+json"));
    assert!(content.contains_key("application/merge-patch+json"));
    let scale = &doc["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}/scale"]
        ["get"];
    assert_eq!(gvk_of(scale).2, "Scale");

    // A custom resource without a schema preserves unknown fields.
    let bare = custom_resource_schema(&crontab(), None);
    assert_eq!(bare["x-kubernetes-preserve-unknown-fields"], true);

    // The v2 document carries the custom kind.
    let v2 = v2_document_with(&registry, &custom);
    assert!(v2["definitions"][name]["properties"]["spec"].is_object());
    assert_refs_resolve(&v2, "#/definitions/", "/definitions");
}

#[test]
fn invalidate_and_registry_changes_rebuild() {
    let registry = Registry::new();
    let mut info = crontab();
    info.group = "cache.example.com".into();
    registry.upsert_custom(vec![info.clone()]);
    let schema = std::sync::Mutex::new(json!({"type": "object", "description": "one"}));
    let custom = |_: &ResourceInfo| Some(schema.lock().unwrap().clone());
    let name = "com.example.cache.v1.CronTab";
    let doc = v3_group_version(&registry, "cache.example.com", "v1", &custom).unwrap();
    assert_eq!(doc["components"]["schemas"][name]["description"], "one");

    // A schema change is picked up after invalidate.
    *schema.lock().unwrap() = json!({"type": "object", "description": "two"});
    let doc = v3_group_version(&registry, "cache.example.com", "v1", &custom).unwrap();
    assert_eq!(doc["components"]["schemas"][name]["description"], "one");
    invalidate("cache.example.com");
    let doc = v3_group_version(&registry, "cache.example.com", "v1", &custom).unwrap();
    assert_eq!(doc["components"]["schemas"][name]["description"], "two");

    // A registry change (new resource in the group-version) is picked up by itself.
    let mut other = info.clone();
    other.kind = "Other".into();
    other.plural = "others".into();
    other.singular = "other".into();
    registry.upsert_custom(vec![other]);
    let doc = v3_group_version(&registry, "cache.example.com", "v1", &custom).unwrap();
    assert!(
        doc["paths"]
            .get("/apis/cache.example.com/v1/namespaces/{namespace}/others")
            .is_some()
    );
}

#[test]
fn group_names_follow_kube_operation_ids() {
    assert_eq!(group_camel(""), "Core");
    assert_eq!(
        group_camel("rbac.authorization.k8s.io"),
        "RbacAuthorization"
    );
    assert_eq!(group_camel("cert-manager.io"), "CertManagerIo");
    let registry = Registry::new();
    let doc = gv_doc(&registry, "", "v1");
    let pods = &doc["paths"]["/api/v1/namespaces/{namespace}/pods"];
    assert_eq!(pods["get"]["operationId"], "listCoreV1NamespacedPod");
    assert_eq!(pods["get"]["tags"], json!(["core_v1"]));
    let exec = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/exec"]["post"];
    assert_eq!(exec["x-kubernetes-action"], "connect");
    assert_eq!(gvk_of(exec).2, "PodExecOptions");
    let eviction = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/eviction"]["post"];
    assert_eq!(
        gvk_of(eviction),
        ("policy".into(), "v1".into(), "Eviction".into())
    );
}
