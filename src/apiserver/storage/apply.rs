//! Server-side apply and managedFields bookkeeping glue: maps a resource to its list
//! keys (from the strategic-merge schema), records field ownership on every write,
//! and answers `application/apply-patch+yaml` PATCH requests through
//! `managed_fields::apply`.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::managed_fields::{self, ApplyError, ListKeys, NoKeys};
use super::objects;
use super::patch::{self, ListStrategy, PatchSchema};
use super::registry::ResourceInfo;
use crate::apiserver::AppState;
use crate::apiserver::http::handlers::{self, ApiResult, Prepared};
use crate::apiserver::http::request::{Query, Target};
use crate::apiserver::http::status::ApiError;

/// List keys of a built-in kind, from its strategic-merge-patch schema.
struct SchemaKeys(&'static dyn PatchSchema);

impl ListKeys for SchemaKeys {
    fn list_keys(&self, path: &[&str]) -> Option<Vec<&'static str>> {
        match self.0.list_strategy(path) {
            // Server-side apply keys ports on the protocol too (listMapKeys), where
            // strategic merge uses the port alone.
            ListStrategy::MergeByKey("containerPort") => Some(vec!["containerPort", "protocol"]),
            ListStrategy::MergeByKey("port") if path.last() == Some(&"ports") => {
                Some(vec!["port", "protocol"])
            }
            ListStrategy::MergeByKey(key) => Some(vec![key]),
            _ => None,
        }
    }

    fn is_set(&self, path: &[&str]) -> bool {
        matches!(self.0.list_strategy(path), ListStrategy::MergePrimitives)
    }
}

pub fn keys_for(info: &ResourceInfo) -> Box<dyn ListKeys + Send + Sync> {
    match (!info.custom)
        .then(|| patch::builtin_schema(&info.group, &info.kind))
        .flatten()
    {
        Some(schema) => Box::new(SchemaKeys(schema)),
        None => Box::new(NoKeys),
    }
}

/// The field manager of a request: `fieldManager`, else derived from the user agent.
pub fn manager(query: &Query, user_agent: Option<&str>) -> Result<String, ApiError> {
    match query.get("fieldManager") {
        Some(m) if m.len() > 128 => Err(ApiError::bad_request(format!(
            "fieldManager: Too long: may not be more than 128 bytes (got {})",
            m.len()
        ))),
        Some(m) if !m.is_empty() => Ok(m.to_string()),
        _ => Ok(managed_fields::default_manager(user_agent)),
    }
}

/// Records ownership for a create or update (operation Update).
pub fn record(
    info: &ResourceInfo,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
) {
    let keys = keys_for(info);
    let managed = managed_fields::record_update(
        old,
        new,
        manager,
        &info.api_version(),
        keys.as_ref(),
        &objects::now_rfc3339(),
        subresource,
    );
    if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        if managed.as_array().is_some_and(|a| a.is_empty()) {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), managed);
        }
    }
}

/// `PATCH` with `application/apply-patch+yaml`.
pub async fn server_side_apply(
    state: &AppState,
    target: &Target,
    query: &Query,
    body: &[u8],
) -> ApiResult {
    let info = target.info.clone();
    let Some(manager) = query
        .get("fieldManager")
        .filter(|m| !m.is_empty())
        .map(str::to_string)
    else {
        return Err(ApiError::bad_request(
            "PATCH, application/apply-patch+yaml requires fieldManager to be set",
        ));
    };
    let force = query.flag("force");
    let mut applied = objects::decode_body(body, Some("application/apply-patch+yaml"))?;
    if !applied.is_object() {
        return Err(ApiError::bad_request("apply patch must be an object"));
    }
    let name = target.name.clone().unwrap_or_default();
    let applied_name = applied
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !applied_name.is_empty() && applied_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({applied_name}) does not match the name on the URL ({name})"
        )));
    }
    let validation =
        objects::FieldValidation::parse(query.get("fieldValidation").or(Some("Strict")))?;
    if applied.get("kind").is_some() {
        handlers::type_check(state, &info, &mut applied, validation)?;
    }
    let keys = keys_for(&info);
    let key = info.key(target.namespace.as_deref(), &name);
    let exists = state
        .store
        .get(key.as_bytes())
        .await
        .map_err(|e| ApiError::from_store(e, &info.group, &info.plural, &name))?
        .is_some();
    let status_only = target.subresource.as_deref() == Some("status");
    if !exists {
        if status_only {
            return Err(ApiError::not_found(&info.group, &info.plural, &name));
        }
        let result = managed_fields::apply(
            None,
            &applied,
            &manager,
            &info.api_version(),
            force,
            keys.as_ref(),
            &objects::now_rfc3339(),
        )
        .map_err(|e| apply_error(&info, &name, e))?;
        let mut object = result.object;
        object["metadata"]["name"] = json!(name);
        return handlers::create_object(state, target, query, object, Vec::new(), None).await;
    }
    let info_for_closure = info.clone();
    handlers::update_with(state, target, query, false, move |old| {
        let now = objects::now_rfc3339();
        let api_version = info_for_closure.api_version();
        let result = if status_only {
            managed_fields::apply_subresource(
                old,
                &applied,
                &manager,
                &api_version,
                force,
                keys.as_ref(),
                &now,
                "status",
            )
        } else {
            managed_fields::apply(
                Some(old),
                &applied,
                &manager,
                &api_version,
                force,
                keys.as_ref(),
                &now,
            )
        }
        .map_err(|e| apply_error(&info_for_closure, &name, e))?;
        let mut object = result.object;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        Ok(Prepared::Owned(object))
    })
    .await
}

fn apply_error(info: &ResourceInfo, name: &str, error: ApplyError) -> ApiError {
    match error {
        ApplyError::Conflicts(_) => {
            let mut e = ApiError::new(StatusCode::CONFLICT, "Conflict", error.to_string());
            e.details = Some(Box::new(crate::apiserver::http::status::StatusDetails {
                name: Some(name.to_string()),
                group: (!info.group.is_empty()).then(|| info.group.clone()),
                kind: Some(info.plural.clone()),
                ..Default::default()
            }));
            e
        }
        other => ApiError::bad_request(other.to_string()),
    }
}
