//! Subresources that are not plain object writes: `pods/binding` (the scheduler's
//! bind), `pods/eviction`, `serviceaccounts/token` (in `sa_token`), and `scale` for
//! workloads and custom resources.

use axum::http::{HeaderMap, StatusCode, header};
use serde_json::{Value, json};

use super::handlers::{ApiResult, Prepared, json_response, update_with};
use super::request::{Query, Target};
use super::status::{ApiError, success_status};
use crate::apiserver::AppState;
use crate::apiserver::storage::objects;
use crate::apiserver::storage::patch::{self, PatchType};

fn created_status() -> axum::response::Response {
    json_response(
        StatusCode::CREATED,
        serde_json::to_vec(&success_status(None)).unwrap_or_default(),
    )
}

pub async fn create(
    state: &AppState,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult {
    let payload = if headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(super::protobuf::is_protobuf)
    {
        super::protobuf::decode_object_with_defaults(body, "", "")
            .map_err(|e| ApiError::bad_request(e.to_string()))?
    } else {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        objects::decode_body(body, content_type)?
    };
    match (target.info.plural.as_str(), target.subresource.as_deref()) {
        ("pods", Some("binding")) => bind(state, target, query, &payload).await,
        ("pods", Some("eviction")) => evict(state, target, query, &payload).await,
        ("serviceaccounts", Some("token")) => {
            crate::apiserver::auth::sa_token::create(state, target, &payload).await
        }
        (_, Some(sub)) => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({sub})"
        ))),
        _ => Err(ApiError::method_not_allowed("unsupported subresource")),
    }
}

/// Binds a pod to a node: sets `spec.nodeName` once, and the PodScheduled condition.
async fn bind(state: &AppState, target: &Target, query: &Query, binding: &Value) -> ApiResult {
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let pod_name = target.name.clone().unwrap_or_default();
    if node.is_empty() {
        return Err(ApiError::invalid(
            "",
            "Binding",
            &pod_name,
            vec![super::status::StatusCause {
                reason: Some("FieldValueRequired".into()),
                message: Some("Required value".into()),
                field: Some("target.name".into()),
            }],
        ));
    }
    let mut pod_target = target.clone();
    pod_target.subresource = Some("binding".into());
    update_with(state, &pod_target, query, false, |old| {
        let current = old.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        if !current.is_empty() {
            return Err(ApiError::conflict("", "pods", &pod_name, &format!("pod {pod_name} is already assigned to node {current:?}")));
        }
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::conflict("", "pods", &pod_name, "pod is being deleted, cannot be assigned to a host"));
        }
        // A storage-level edit of the stored pod, as Kubernetes' BindingREST: the pod's
        // defaulting, validation, admission and field ownership do not run again (the
        // scheduler binds every pod; that work, and a copy of the pod, would be per pod).
        let node = node.clone();
        Ok(Prepared::Edit(Box::new(move |pod: &mut Value| {
            pod["spec"]["nodeName"] = json!(node);
            let now = objects::now_rfc3339();
            let conditions = match pod["status"]["conditions"].take() {
                Value::Array(conditions) => conditions,
                _ => Vec::new(),
            };
            let mut conditions: Vec<Value> = conditions.into_iter().filter(|c| c["type"] != "PodScheduled").collect();
            conditions.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}));
            pod["status"]["conditions"] = json!(conditions);
        })))
    })
    .await?;
    Ok(created_status())
}

/// Evicts a pod (deletes it; disruption budgets are checked once the controllers exist).
async fn evict(state: &AppState, target: &Target, query: &Query, eviction: &Value) -> ApiResult {
    let mut pod_target = target.clone();
    pod_target.subresource = None;
    let options = eviction
        .get("deleteOptions")
        .map(|o| o.to_string())
        .unwrap_or_default();
    super::handlers::delete(state, &pod_target, query, options.as_bytes()).await?;
    Ok(created_status())
}

/// (spec path, status path) of the replica counts for a resource with `scale`.
fn scale_paths(state: &AppState, target: &Target) -> (String, String) {
    if target.info.custom {
        let custom = state.custom.read().unwrap_or_else(|p| p.into_inner());
        let key = (
            target.info.group.clone(),
            target.info.version.clone(),
            target.info.plural.clone(),
        );
        if let Some((spec, status)) = custom.get(&key).and_then(|v| v.scale.clone()) {
            return (spec, status);
        }
    }
    (".spec.replicas".into(), ".status.replicas".into())
}

fn pointer(path: &str) -> String {
    path.trim_start_matches('.')
        .split('.')
        .fold(String::new(), |acc, p| format!("{acc}/{p}"))
}

fn scale_object(object: &Value, spec_path: &str, status_path: &str) -> Value {
    let meta = &object["metadata"];
    let selector = object
        .pointer("/spec/selector/matchLabels")
        .or_else(|| object.pointer("/spec/selector"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"], "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"]},
        "spec": {"replicas": object.pointer(&pointer(spec_path)).cloned().unwrap_or(json!(0))},
        "status": {"replicas": object.pointer(&pointer(status_path)).cloned().unwrap_or(json!(0)), "selector": selector},
    })
}

async fn scale_to(
    state: &AppState,
    target: &Target,
    query: &Query,
    replicas: i64,
    pinned_rv: Option<String>,
) -> ApiResult {
    if replicas < 0 {
        return Err(ApiError::invalid(
            "autoscaling",
            "Scale",
            target.name.as_deref().unwrap_or(""),
            vec![super::status::StatusCause {
                reason: Some("FieldValueInvalid".into()),
                message: Some(format!(
                    "Invalid value: {replicas}: must be greater than or equal to 0"
                )),
                field: Some("spec.replicas".into()),
            }],
        ));
    }
    let (spec_path, status_path) = scale_paths(state, target);
    let mut object_target = target.clone();
    object_target.subresource = None;
    let spec_pointer = pointer(&spec_path);
    let response = update_with(state, &object_target, query, pinned_rv.is_some(), |old| {
        let mut new = old.clone();
        if let Some(rv) = &pinned_rv {
            new["metadata"]["resourceVersion"] = json!(rv);
        } else if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        let mut cursor = &mut new;
        let parts: Vec<&str> = spec_pointer.trim_start_matches('/').split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            if i + 1 == parts.len() {
                cursor[*part] = json!(replicas);
            } else {
                if !cursor.get(*part).is_some_and(Value::is_object) {
                    cursor[*part] = json!({});
                }
                cursor = &mut cursor[*part];
            }
        }
        Ok(Prepared::Write(new, Vec::new()))
    })
    .await?;
    let bytes = axum::body::to_bytes(response.into_body(), crate::apiserver::MAX_BODY_BYTES * 4)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let object: Value =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(json_response(
        StatusCode::OK,
        serde_json::to_vec(&scale_object(&object, &spec_path, &status_path)).unwrap_or_default(),
    ))
}

pub async fn get_scale(state: &AppState, target: &Target, object: &Value) -> Value {
    let (spec_path, status_path) = scale_paths(state, target);
    scale_object(object, &spec_path, &status_path)
}

pub async fn update_scale(
    state: &AppState,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let scale = objects::decode_body(body, content_type)?;
    let replicas = scale
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let rv = scale
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    scale_to(state, target, query, replicas, rv).await
}

pub async fn patch_scale(
    state: &AppState,
    target: &Target,
    query: &Query,
    patch_type: PatchType,
    patch_doc: &Value,
) -> ApiResult {
    let key = target.info.key(
        target.namespace.as_deref(),
        target.name.as_deref().unwrap_or(""),
    );
    let current = state.cache.get(&key).ok_or_else(|| {
        ApiError::not_found(
            &target.info.group,
            &target.info.plural,
            target.name.as_deref().unwrap_or(""),
        )
    })?;
    let object: Value =
        serde_json::from_slice(&current.bytes).map_err(|e| ApiError::internal(e.to_string()))?;
    let scale = get_scale(state, target, &object).await;
    let patched = match patch_type {
        PatchType::Json => patch::apply_json_patch(&scale, patch_doc)
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        _ => patch::apply_merge_patch(&scale, patch_doc),
    };
    let replicas = patched
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    scale_to(state, target, query, replicas, None).await
}
