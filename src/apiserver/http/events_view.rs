//! `events.k8s.io/v1` Events as a view of `core/v1` Events, as kube-apiserver serves
//! them: one storage (`/registry/events/…` in core form), two shapes. An event
//! written through either API is read through both, so `kubectl get events` and
//! `kubectl describe` show what a kube-rs or client-go `events/v1` recorder wrote.
//!
//! Requests to `events.k8s.io` are served by the core handlers on the core
//! resource: bodies are checked against the `events.k8s.io` schema and converted to
//! core form on the way in, responses (objects, lists, watch streams) converted back
//! on the way out; patches are applied to the `events.k8s.io` form of the stored
//! object. Owns only the field mapping and that translation; never touches the
//! store directly.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Map, Value, json};

use super::handlers;
use super::request::{Query, Target, Want};
use super::status::{ApiError, StatusCause};
use crate::apiserver::AppState;
use crate::apiserver::storage::objects::FieldValidation;
use crate::apiserver::storage::registry::ResourceInfo;

pub const GROUP: &str = "events.k8s.io";
const API_VERSION: &str = "events.k8s.io/v1";

/// core/v1 field ↔ events.k8s.io/v1 field, for the fields that are renamed.
const RENAMED: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];
/// Fields with the same name in both.
const SHARED: &[&str] = &[
    "metadata",
    "eventTime",
    "series",
    "reportingInstance",
    "action",
    "reason",
    "related",
    "type",
];

/// Whether `info` is the events.k8s.io view.
pub fn is_view(info: &ResourceInfo) -> bool {
    info.group == GROUP && info.plural == "events"
}

/// A stored core/v1 Event in events.k8s.io/v1 form.
pub fn from_core(core: &Value) -> Value {
    let Some(src) = core.as_object() else {
        return core.clone();
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(API_VERSION));
    out.insert("kind".into(), json!("Event"));
    for field in SHARED {
        if let Some(v) = src.get(*field) {
            out.insert((*field).into(), v.clone());
        }
    }
    for (core_name, view_name) in RENAMED {
        if let Some(v) = src.get(*core_name) {
            // core's empty strings and zero counts are "unset" in the view.
            if v.as_str() == Some("") || (*core_name == "count" && v.as_i64() == Some(0)) {
                continue;
            }
            out.insert((*view_name).into(), v.clone());
        }
    }
    Value::Object(out)
}

/// An events.k8s.io/v1 Event in core/v1 form, for storage.
pub fn to_core(view: &Value) -> Value {
    let Some(src) = view.as_object() else {
        return view.clone();
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    for field in SHARED {
        if let Some(v) = src.get(*field) {
            out.insert((*field).into(), v.clone());
        }
    }
    for (core_name, view_name) in RENAMED {
        if let Some(v) = src.get(*view_name) {
            out.insert((*core_name).into(), v.clone());
        }
    }
    // core requires involvedObject; an empty reference keeps core readers working.
    out.entry("involvedObject").or_insert_with(|| json!({}));
    Value::Object(out)
}

/// events.k8s.io/v1 creation rules (kube-apiserver's ValidateEventCreate for
/// requests in this version).
pub fn validate_create(view: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let mut required = |field: &str| {
        causes.push(StatusCause {
            reason: Some("FieldValueRequired".into()),
            message: Some("Required value".into()),
            field: Some(field.into()),
        })
    };
    let text = |field: &str| view.get(field).and_then(Value::as_str).unwrap_or("");
    if view.get("eventTime").is_none_or(Value::is_null) {
        required("eventTime");
    }
    for field in [
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ] {
        if text(field).is_empty() {
            required(field);
        }
    }
    let mut invalid = |field: &str, value: &str, detail: &str| {
        causes.push(StatusCause {
            reason: Some("FieldValueInvalid".into()),
            message: Some(format!("Invalid value: {value:?}: {detail}")),
            field: Some(field.into()),
        })
    };
    let kind = text("type");
    if kind != "Normal" && kind != "Warning" {
        invalid("type", kind, "has invalid value");
    }
    for field in ["reportingInstance", "action", "reason"] {
        let value = text(field);
        if value.len() > 128 {
            invalid(field, value, "can have at most 128 characters");
        }
    }
    let note = text("note");
    if note.len() > 1024 {
        invalid("note", note, "can have at most 1024 characters");
    }
    causes
}

/// The core/v1 events resource the view is served from.
fn core_target(state: &AppState, target: &Target) -> Result<Target, ApiError> {
    let info = state
        .registry
        .find("", "v1", "events")
        .ok_or_else(|| ApiError::internal("the core events resource is not registered"))?;
    Ok(Target {
        info,
        namespace: target.namespace.clone(),
        name: target.name.clone(),
        subresource: target.subresource.clone(),
        legacy_watch: target.legacy_watch,
    })
}

/// Serves one request to `events.k8s.io/v1` events.
pub async fn serve(
    state: &Arc<AppState>,
    method: &Method,
    headers: &HeaderMap,
    target: &Target,
    query: &Query,
    body: &[u8],
    want: Want,
) -> Result<Response, ApiError> {
    let core = core_target(state, target)?;
    let response = match *method {
        Method::GET => {
            if target.legacy_watch || query.flag("watch") {
                let response = handlers::watch(state, &core, query, want).await?;
                return Ok(convert_stream(response, want));
            } else if target.name.is_some() {
                handlers::get(state, &core, query, want).await?
            } else {
                handlers::list(state, &core, query, want).await?
            }
        }
        Method::POST if target.name.is_none() => {
            let (core_body, warnings) = incoming(state, target, headers, body, query, true)?;
            let response =
                handlers::create(state, &core, query, &json_headers(headers), &core_body).await?;
            handlers::with_warnings(response, &warnings)
        }
        Method::PUT if target.name.is_some() => {
            let (core_body, warnings) = incoming(state, target, headers, body, query, false)?;
            let response =
                handlers::update(state, &core, query, &json_headers(headers), &core_body).await?;
            handlers::with_warnings(response, &warnings)
        }
        Method::PATCH if target.name.is_some() => {
            let view = handlers::View {
                info: target.info.clone(),
                to_view: from_core,
                from_view: to_core,
            };
            handlers::patch(state, &core, query, headers, body, Some(&view)).await?
        }
        Method::DELETE if target.name.is_some() && target.subresource.is_none() => {
            handlers::delete(state, &core, query, body).await?
        }
        Method::DELETE if target.name.is_none() => {
            handlers::delete_collection(state, &core, query, body).await?
        }
        _ => {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
    };
    convert_response(response, want).await
}

/// Decodes, checks and converts a create/update body to core form.
fn incoming(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    body: &[u8],
    query: &Query,
    create: bool,
) -> Result<(Vec<u8>, Vec<String>), ApiError> {
    let info = &target.info;
    let mut object = handlers::decode_request(info, headers, body)?;
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !api_version.is_empty() && api_version != API_VERSION {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({API_VERSION})"
        )));
    }
    let validation = FieldValidation::parse(query.get("fieldValidation"))?;
    // Unknown fields are judged against the events.k8s.io schema, not core's.
    let warnings = handlers::type_check(state, info, &mut object, validation)?;
    if create {
        let causes = validate_create(&object);
        if !causes.is_empty() {
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            return Err(ApiError::invalid(GROUP, "Event", name, causes));
        }
    }
    let body = serde_json::to_vec(&to_core(&object))
        .map_err(|e| ApiError::internal(format!("encoding the event: {e}")))?;
    Ok((body, warnings))
}

/// The request headers with the body now being JSON.
fn json_headers(headers: &HeaderMap) -> HeaderMap {
    let mut headers = headers.clone();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers
}

/// Converts an Event or EventList body; anything else (Status, Table,
/// PartialObjectMetadata) is left alone.
fn convert_value(value: &mut Value) {
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    match kind {
        "Event" => *value = from_core(value),
        "EventList" => {
            value["apiVersion"] = json!(API_VERSION);
            if let Some(items) = value.get_mut("items").and_then(Value::as_array_mut) {
                for item in items {
                    *item = from_core(item);
                }
            }
        }
        _ => {}
    }
}

async fn convert_response(response: Response, want: Want) -> Result<Response, ApiError> {
    if want != Want::Json {
        return Ok(response);
    }
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|e| ApiError::internal(format!("reading the response: {e}")))?;
    let bytes = match serde_json::from_slice::<Value>(&bytes) {
        Ok(mut value) => {
            convert_value(&mut value);
            Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
        }
        Err(_) => bytes,
    };
    let mut response = Response::from_parts(parts, Body::from(bytes));
    response.headers_mut().remove(header::CONTENT_LENGTH);
    Ok(response)
}

/// Converts each watch event line of a stream.
fn convert_stream(response: Response, want: Want) -> Response {
    if want != Want::Json || response.status() != StatusCode::OK {
        return response;
    }
    let (parts, body) = response.into_parts();
    let stream = body.into_data_stream().map(|chunk| {
        chunk.map(|bytes| {
            let Ok(mut event) = serde_json::from_slice::<Value>(&bytes) else {
                return bytes;
            };
            if let Some(object) = event.get_mut("object") {
                convert_value(object);
            }
            let mut line = serde_json::to_vec(&event).unwrap_or_default();
            line.push(b'\n');
            Bytes::from(line)
        })
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_and_view_round_trip() {
        let core = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "Started", "message": "Started container", "type": "Normal",
            "source": {"component": "kubelet"}, "count": 3,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
            "reportingComponent": "kubelet", "reportingInstance": "node-1",
            "eventTime": null
        });
        let view = from_core(&core);
        assert_eq!(view["apiVersion"], "events.k8s.io/v1");
        assert_eq!(view["regarding"]["name"], "p");
        assert_eq!(view["note"], "Started container");
        assert_eq!(view["deprecatedCount"], 3);
        assert_eq!(view["deprecatedSource"]["component"], "kubelet");
        assert_eq!(view["reportingController"], "kubelet");
        assert!(view.get("message").is_none());
        let back = to_core(&view);
        assert_eq!(back, core);
    }

    #[test]
    fn empty_core_fields_are_unset_in_the_view() {
        let view = from_core(&json!({"kind": "Event", "reportingComponent": "", "count": 0}));
        assert!(view.get("reportingController").is_none());
        assert!(view.get("deprecatedCount").is_none());
    }

    #[test]
    fn creation_rules() {
        let good = json!({
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "x.io/c",
            "reportingInstance": "c-1", "action": "Sync", "reason": "Synced", "type": "Normal",
            "note": "ok"
        });
        assert!(validate_create(&good).is_empty());
        let mut bad = good.clone();
        bad["type"] = json!("Info");
        bad.as_object_mut().expect("object").remove("action");
        bad["note"] = json!("x".repeat(1025));
        let fields: Vec<String> = validate_create(&bad)
            .into_iter()
            .filter_map(|c| c.field)
            .collect();
        assert_eq!(fields, ["action", "type", "note"]);
    }
}
