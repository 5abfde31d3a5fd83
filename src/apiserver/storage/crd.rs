//! CustomResourceDefinitions: turning a stored CRD into served resources (registry
//! rows, printer columns, schema) and back out when it is deleted; the CRD status
//! conditions (`NamesAccepted`, `Established`) set when it is accepted.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::registry::ResourceInfo;
use crate::apiserver::AppState;
use crate::apiserver::http::status::{ApiError, StatusCause};
use crate::apiserver::http::table::PrinterColumn;

/// What the server keeps per served custom resource version.
#[derive(Clone, Debug, Default)]
pub struct CustomVersion {
    pub printer_columns: Vec<PrinterColumn>,
    pub schema: Option<Value>,
    /// `.spec.replicas`-style paths of the scale subresource, if any.
    pub scale: Option<(String, String)>,
}

/// Custom versions by (group, version, plural).
pub type CustomVersions = HashMap<(String, String, String), CustomVersion>;

fn infos(crd: &Value) -> Vec<(ResourceInfo, CustomVersion)> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or("").to_string();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or("").to_string();
    let kind = names["kind"].as_str().unwrap_or("").to_string();
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Vec::new();
    }
    let singular = names["singular"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_ascii_lowercase());
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"].as_bool().unwrap_or(true))
        .filter_map(|v| {
            let version = v["name"].as_str()?.to_string();
            let mut subresources = Vec::new();
            if v.pointer("/subresources/status").is_some() {
                subresources.push("status".to_string());
            }
            let scale = v.pointer("/subresources/scale").map(|s| {
                subresources.push("scale".to_string());
                (
                    s["specReplicasPath"]
                        .as_str()
                        .unwrap_or(".spec.replicas")
                        .to_string(),
                    s["statusReplicasPath"]
                        .as_str()
                        .unwrap_or(".status.replicas")
                        .to_string(),
                )
            });
            let printer_columns = v["additionalPrinterColumns"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| PrinterColumn {
                    name: c["name"].as_str().unwrap_or("").to_string(),
                    type_: c["type"].as_str().unwrap_or("string").to_string(),
                    format: c["format"].as_str().unwrap_or("").to_string(),
                    description: c["description"].as_str().unwrap_or("").to_string(),
                    priority: c["priority"].as_i64().unwrap_or(0) as i32,
                    json_path: c["jsonPath"].as_str().unwrap_or("").to_string(),
                })
                .collect();
            let info = ResourceInfo {
                group: group.clone(),
                version: version.clone(),
                kind: kind.clone(),
                plural: plural.clone(),
                singular: singular.clone(),
                namespaced,
                verbs: vec![
                    "delete",
                    "deletecollection",
                    "get",
                    "list",
                    "patch",
                    "create",
                    "update",
                    "watch",
                ],
                short_names: strings(&names["shortNames"]),
                categories: strings(&names["categories"]),
                subresources,
                custom: true,
            };
            let schema = v.pointer("/schema/openAPIV3Schema").cloned();
            Some((
                info,
                CustomVersion {
                    printer_columns,
                    schema,
                    scale,
                },
            ))
        })
        .collect()
}

/// Serves the resources a CRD defines (called after it is stored, and at start).
pub fn register(state: &AppState, crd: &Value) {
    let entries = infos(crd);
    if entries.is_empty() {
        return;
    }
    let group = entries[0].0.group.clone();
    let plural = entries[0].0.plural.clone();
    // Versions no longer served go away.
    state.registry.remove_custom(&group, &plural);
    let mut custom = state.custom.write().unwrap_or_else(|p| p.into_inner());
    custom.retain(|(g, _, p), _| !(*g == group && *p == plural));
    let mut rows = Vec::new();
    for (info, version) in entries {
        custom.insert(
            (
                info.group.clone(),
                info.version.clone(),
                info.plural.clone(),
            ),
            version,
        );
        rows.push(info);
    }
    state.registry.upsert_custom(rows);
    crate::apiserver::http::openapi::invalidate(&group);
    tracing::info!(group = %group, resource = %plural, "serving custom resource");
}

pub fn unregister(state: &AppState, crd: &Value) {
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let plural = crd
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    state.registry.remove_custom(group, plural);
    let mut custom = state.custom.write().unwrap_or_else(|p| p.into_inner());
    custom.retain(|(g, _, p), _| !(g == group && p == plural));
    crate::apiserver::http::openapi::invalidate(group);
}

/// Whether kube protects an API group: `k8s.io`, `kubernetes.io` and their subdomains
/// belong to the Kubernetes project, and a CRD in one needs the
/// `api-approved.kubernetes.io` annotation.
fn is_protected_group(group: &str) -> bool {
    group == "k8s.io"
        || group == "kubernetes.io"
        || group.ends_with(".k8s.io")
        || group.ends_with(".kubernetes.io")
}

/// The annotation a CRD in a protected group must carry (kube's API review policy).
pub const API_APPROVED: &str = "api-approved.kubernetes.io";

/// kube's checks of a CRD's group that keep custom resources out of the built-in API:
/// the group is a domain with at least one dot (so never `""`, `apps`, `batch`, …), and a
/// `*.k8s.io` or `*.kubernetes.io` group needs the `api-approved.kubernetes.io`
/// annotation. 422 `Invalid` with kube's causes.
pub fn validate_group(crd: &Value) -> Result<(), ApiError> {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut causes = Vec::new();
    if !group.is_empty() && !group.contains('.') {
        causes.push(StatusCause {
            reason: Some("FieldValueInvalid".into()),
            message: Some(format!(
                "Invalid value: {}: should be a domain with at least one dot",
                crate::names::go_quote(group)
            )),
            field: Some("spec.group".into()),
        });
    }
    let approved = crd
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(API_APPROVED))
        .and_then(Value::as_str)
        .is_some_and(|v| !v.is_empty());
    if is_protected_group(group) && !approved {
        causes.push(StatusCause {
            reason: Some("FieldValueRequired".into()),
            message: Some(format!(
                "Required value: protected groups must have approval annotation \"{API_APPROVED}\", \
                 see https://github.com/kubernetes/enhancements/pull/1111"
            )),
            field: Some(format!("metadata.annotations[{API_APPROVED}]")),
        });
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        name,
        causes,
    ))
}

/// Sets the status a CRD has once accepted: names accepted, established, stored versions.
pub fn accept(crd: &mut Value, now: &str) {
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut accepted = names.clone();
    if accepted.get("singular").is_none()
        && let Some(kind) = names["kind"].as_str()
    {
        accepted["singular"] = json!(kind.to_ascii_lowercase());
    }
    if accepted.get("listKind").is_none()
        && let Some(kind) = names["kind"].as_str()
    {
        accepted["listKind"] = json!(format!("{kind}List"));
    }
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .filter_map(|v| v.get("name").cloned())
        .collect();
    crd["status"] = json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
        ],
        "storedVersions": stored,
    });
}

/// Registers every stored CRD (at start).
pub fn register_all(state: &AppState) {
    let (crds, _) = state.cache.list(
        "/registry/apiextensions.k8s.io/customresourcedefinitions/",
        None,
    );
    for crd in crds {
        if let Ok(value) = serde_json::from_slice::<Value>(&crd.bytes) {
            register(state, &value);
        }
    }
}
