//! The REST verbs for every resource: get, list, watch, create, update, patch,
//! delete and deletecollection, including status isolation, generation, dry runs,
//! preconditions, finalizers and namespace lifecycle. Objects are JSON throughout;
//! built-in kinds are type-checked, defaulted and validated via `objects`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::request::{Query, Target, Want};
use super::status::{ApiError, StatusCause, StatusDetails, success_status};
use super::table;
use crate::apiserver::AppState;
use crate::apiserver::storage::objects::{self, FieldValidation};
use crate::apiserver::storage::patch::{self, PatchType};
use crate::apiserver::storage::registry::ResourceInfo;
use crate::apiserver::storage::selectors::{FieldSelector, LabelSelector};
use crate::apiserver::storage::watchcache::{
    CacheEvent, CachedObject, EventFeed, EventType, FeedEnd, SubscribeError,
};
use crate::store::{KeyValue, RangeRequest, StoreError};

pub type ApiResult = Result<Response, ApiError>;

/// A JSON response with the given status.
pub fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response {
    let mut response = (status, Body::from(body.into())).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn value_response(status: StatusCode, value: &Value) -> Response {
    json_response(status, serde_json::to_vec(value).unwrap_or_default())
}

pub fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for w in warnings {
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{}\"", w.replace('"', "\\\""))) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn parse(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::internal(format!("stored object is not JSON: {e}")))
}

fn name_of(target: &Target) -> &str {
    target.name.as_deref().unwrap_or("")
}

fn key_of(target: &Target) -> String {
    target
        .info
        .key(target.namespace.as_deref(), name_of(target))
}

/// The revision a consistent read (no resourceVersion) must reflect: every write
/// acknowledged before the request, on any server (raft ReadIndex in a group of
/// servers; the local revision on a lone one).
pub(crate) async fn consistent_revision(state: &AppState) -> Result<i64, ApiError> {
    state
        .store
        .read_barrier()
        .await
        .map_err(|e| ApiError::from_store(e, "", "", ""))
}

fn store_err<'a>(info: &'a ResourceInfo, name: &'a str) -> impl Fn(StoreError) -> ApiError + 'a {
    move |e| ApiError::from_store(e, &info.group, &info.plural, name)
}

/// Kinds whose `metadata.generation` tracks spec changes.
fn tracks_generation(info: &ResourceInfo) -> bool {
    info.custom
        || matches!(
            info.group.as_str(),
            "apps"
                | "batch"
                | "apiextensions.k8s.io"
                | "networking.k8s.io"
                | "policy"
                | "autoscaling"
                | "scheduling.k8s.io"
        )
        || matches!(info.kind.as_str(), "ReplicationController")
}

// ---------------------------------------------------------------- decoding

/// Decodes a request body: JSON, YAML, or Kubernetes protobuf (what kubectl's typed
/// commands send). Missing apiVersion/kind in a protobuf envelope take the endpoint's.
pub fn decode_request(
    info: &ResourceInfo,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Value, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if content_type.is_some_and(super::protobuf::is_protobuf) {
        return super::protobuf::decode_object_with_defaults(body, &info.api_version(), &info.kind)
            .map_err(|e| {
                let code = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
                let reason = if code == StatusCode::UNSUPPORTED_MEDIA_TYPE {
                    "UnsupportedMediaType"
                } else {
                    "BadRequest"
                };
                ApiError::new(code, reason, e.to_string())
            });
    }
    objects::decode_body(body, content_type)
}

// ---------------------------------------------------------------- schemas

/// The structural schema of a custom resource version, if it has one.
fn custom_schema(state: &AppState, info: &ResourceInfo) -> Option<Value> {
    if !info.custom {
        return None;
    }
    let custom = state.custom.read().unwrap_or_else(|p| p.into_inner());
    custom
        .get(&(
            info.group.clone(),
            info.version.clone(),
            info.plural.clone(),
        ))
        .and_then(|v| v.schema.clone())
}

/// Type checks (built-in kinds) or prunes against the CRD schema (custom kinds);
/// unknown fields are an error under Strict and warnings under Warn.
pub fn type_check(
    state: &AppState,
    info: &ResourceInfo,
    value: &mut Value,
    validation: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let Some(schema) = custom_schema(state, info) else {
        return objects::type_check(info, value, validation);
    };
    let mut copy = value.clone();
    let unknown = crate::apiserver::storage::schema::prune(&mut copy, &schema);
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let messages: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    match validation {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            messages.join(", ")
        ))),
        FieldValidation::Warn => {
            *value = copy;
            Ok(messages)
        }
        FieldValidation::Ignore => {
            *value = copy;
            Ok(Vec::new())
        }
    }
}

/// Kind-specific validation, or the CRD schema's for custom kinds.
fn validate(
    state: &AppState,
    info: &ResourceInfo,
    value: &Value,
    old: Option<&Value>,
) -> Vec<StatusCause> {
    match custom_schema(state, info) {
        Some(schema) => crate::apiserver::storage::schema::validate(value, &schema),
        None => crate::apiserver::admission::validation::validate(info, value, old),
    }
}

// ---------------------------------------------------------------- selectors

struct Filter {
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
    resource: String,
}

impl Filter {
    fn from_query(info: &ResourceInfo, query: &Query) -> Result<Filter, ApiError> {
        let labels = match query.get("labelSelector") {
            Some(s) if !s.trim().is_empty() => {
                Some(LabelSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?)
            }
            _ => None,
        };
        let fields = match query.get("fieldSelector") {
            Some(s) if !s.trim().is_empty() => {
                let selector =
                    FieldSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?;
                crate::apiserver::storage::selectors::check_supported(&info.plural, &selector)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                Some(selector)
            }
            _ => None,
        };
        Ok(Filter {
            labels,
            fields,
            resource: info.plural.clone(),
        })
    }

    fn is_empty(&self) -> bool {
        self.labels.is_none() && self.fields.is_none()
    }

    fn matches_value(&self, object: &Value) -> bool {
        if let Some(labels) = &self.labels
            && !labels.matches_json(
                object
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object),
            )
        {
            return false;
        }
        if let Some(fields) = &self.fields
            && !fields.matches(|f| {
                crate::apiserver::storage::selectors::field_value(&self.resource, object, f)
            })
        {
            return false;
        }
        true
    }

    fn matches_bytes(&self, bytes: &[u8]) -> bool {
        if self.is_empty() {
            return true;
        }
        // Selectors read a few shallow fields: skip building the rest of the tree.
        crate::apiserver::storage::selectors::selectable_view(bytes)
            .is_ok_and(|v| self.matches_value(&v))
    }
}

// ---------------------------------------------------------------- GET

pub async fn get(state: &AppState, target: &Target, query: &Query, want: Want) -> ApiResult {
    let info = &target.info;
    let name = name_of(target);
    let key = key_of(target);
    let rv = query.get("resourceVersion").unwrap_or("");
    let object = if !crate::apiserver::storage::watchcache::is_cached(&key) {
        state
            .store
            .get(key.as_bytes())
            .await
            .map_err(store_err(info, name))?
            .map(|kv| stored_to_response(&kv))
    } else if rv.is_empty() {
        // Consistent read: wait until the cache has everything the store has.
        let current = consistent_revision(state).await?;
        state.cache.wait_for(current, Duration::from_secs(3)).await;
        state.cache.get(&key).map(|o| o.bytes)
    } else {
        state.cache.get(&key).map(|o| o.bytes)
    };
    let Some(bytes) = object else {
        return Err(ApiError::not_found(&info.group, &info.plural, name));
    };
    if crate::apiserver::storage::kv::unreadable(&bytes) {
        return Err(ApiError::internal(format!(
            "Internal error occurred: {}",
            crate::apiserver::storage::kv::unreadable_message(&key)
        )));
    }
    if let Some(sub) = target.subresource.as_deref() {
        return match sub {
            "status" => Ok(json_response(StatusCode::OK, bytes)),
            "scale" => {
                let scale = super::subresources::get_scale(state, target, &parse(&bytes)?).await;
                Ok(value_response(StatusCode::OK, &scale))
            }
            other => Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({other})"
            ))),
        };
    }
    match want {
        Want::Json => Ok(json_response(StatusCode::OK, bytes)),
        Want::Table => {
            let value = parse(&bytes)?;
            let rv = value
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            Ok(value_response(
                StatusCode::OK,
                &render_table(state, info, vec![value], &rv, None, None, query),
            ))
        }
        Want::PartialMetadata => {
            let value = parse(&bytes)?;
            Ok(value_response(
                StatusCode::OK,
                &table::partial_object_metadata(&value),
            ))
        }
    }
}

fn render_table(
    state: &AppState,
    info: &ResourceInfo,
    objects: Vec<Value>,
    rv: &str,
    continue_token: Option<&str>,
    remaining: Option<i64>,
    query: &Query,
) -> Value {
    let now = now_unix();
    let printer_columns = info.custom.then(|| {
        let custom = state.custom.read().unwrap_or_else(|p| p.into_inner());
        custom
            .get(&(
                info.group.clone(),
                info.version.clone(),
                info.plural.clone(),
            ))
            .map(|v| v.printer_columns.clone())
            .unwrap_or_default()
    });
    let columns = match &printer_columns {
        Some(pc) => table::custom_columns(pc),
        None => table::columns_for(&info.group, &info.plural),
    };
    let include = query.get("includeObject").unwrap_or("Metadata");
    let rows = objects
        .into_iter()
        .map(|object| {
            let cells = match &printer_columns {
                Some(pc) => table::custom_cells(pc, &object, now),
                None => table::cells_for(&info.group, &info.plural, &object, now),
            };
            let row_object = match include {
                "None" => Value::Null,
                "Object" => object,
                _ => table::partial_object_metadata(&object),
            };
            (cells, row_object)
        })
        .collect();
    table::render_table(&columns, rows, rv, continue_token, remaining)
}

// ---------------------------------------------------------------- LIST

/// The `continue` token: which revision the list is pinned to and the last key sent.
fn encode_continue(revision: i64, last_key: &str) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": revision, "start": format!("{last_key}\u{0}")});
    base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE,
        token.to_string(),
    )
}

fn decode_continue(token: &str) -> Result<(i64, String), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let raw = base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE, token)
        .or_else(|_| base64::Engine::decode(&base64::engine::general_purpose::STANDARD, token))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v.get("rv").and_then(Value::as_i64).ok_or_else(bad)?;
    let start = v.get("start").and_then(Value::as_str).ok_or_else(bad)?;
    Ok((rv, start.trim_end_matches('\u{0}').to_string()))
}

pub async fn list(state: &AppState, target: &Target, query: &Query, want: Want) -> ApiResult {
    let info = &target.info;
    let filter = Filter::from_query(info, query)?;
    let prefix = info.namespace_prefix(target.namespace.as_deref());
    let limit = query.int("limit")?.filter(|l| *l > 0).map(|l| l as usize);
    let rv = query.get("resourceVersion").unwrap_or("");
    let rv_match = query.get("resourceVersionMatch").unwrap_or("");
    if !rv_match.is_empty() && rv.is_empty() {
        return Err(ApiError::bad_request(
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    let mut items: Vec<(String, Bytes)> = Vec::new();
    let mut more = false;
    let revision;
    if let Some(token) = query.get("continue").filter(|t| !t.is_empty()) {
        // Later pages: read the store at the first page's revision.
        let (pinned, start_after) = decode_continue(token)?;
        revision = pinned;
        let mut after = Some(start_after.into_bytes());
        loop {
            let page = state
                .store
                .range(RangeRequest {
                    prefix: prefix.clone().into_bytes(),
                    at_revision: Some(pinned),
                    limit: limit.unwrap_or(0).max(1) * 2,
                    start_after_key: after.clone(),
                })
                .await
                .map_err(|e| match e {
                    StoreError::Compacted { .. } => ApiError::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."),
                    other => ApiError::from_store(other, &info.group, &info.plural, ""),
                })?;
            for kv in &page.kvs {
                let bytes = crate::apiserver::storage::watchcache::with_resource_version(
                    &kv.value,
                    kv.mod_revision,
                );
                if filter.matches_bytes(&bytes) {
                    items.push((String::from_utf8_lossy(&kv.key).into_owned(), bytes));
                }
            }
            after = page.kvs.last().map(|kv| kv.key.clone());
            if let Some(l) = limit
                && items.len() > l
            {
                items.truncate(l);
                more = true;
                break;
            }
            if !page.more {
                break;
            }
        }
    } else if rv_match == "Exact" || !crate::apiserver::storage::watchcache::is_cached(&prefix) {
        // An exact revision, or a kind the watch cache does not hold: read the store.
        let at_revision =
            if rv_match == "Exact" {
                Some(rv.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version {rv:?}"))
                })?)
            } else {
                None
            };
        let page = read_store(state, info, &prefix, at_revision).await?;
        revision = page.revision;
        for kv in page.kvs {
            let bytes = crate::apiserver::storage::watchcache::with_resource_version(
                &kv.value,
                kv.mod_revision,
            );
            if filter.matches_bytes(&bytes) {
                items.push((String::from_utf8_lossy(&kv.key).into_owned(), bytes));
            }
        }
        apply_limit(&mut items, limit, &mut more);
    } else {
        let wanted = if rv.is_empty() {
            consistent_revision(state).await?
        } else {
            rv.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))?
        };
        if !state.cache.wait_for(wanted, Duration::from_secs(3)).await {
            return Err(ApiError::timeout(format!(
                "Too large resource version: {wanted}, current: {}",
                state.cache.revision()
            )));
        }
        let (objects, cache_revision) = state.cache.list(&prefix, None);
        revision = cache_revision;
        for CachedObject { key, bytes, .. } in objects {
            if crate::apiserver::storage::kv::unreadable(&bytes) {
                return Err(ApiError::internal(format!(
                    "Internal error occurred: {}",
                    crate::apiserver::storage::kv::unreadable_message(&key)
                )));
            }
            if filter.matches_bytes(&bytes) {
                items.push((key.to_string(), bytes));
            }
        }
        apply_limit(&mut items, limit, &mut more);
    }
    let continue_token = if more {
        items.last().map(|(k, _)| encode_continue(revision, k))
    } else {
        None
    };
    let rv_string = revision.to_string();
    match want {
        Want::Table => {
            let objects = items
                .iter()
                .map(|(_, b)| parse(b))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(value_response(
                StatusCode::OK,
                &render_table(
                    state,
                    info,
                    objects,
                    &rv_string,
                    continue_token.as_deref(),
                    None,
                    query,
                ),
            ))
        }
        Want::PartialMetadata => {
            let objects = items
                .iter()
                .map(|(_, b)| parse(b).map(|v| table::partial_object_metadata(&v)))
                .collect::<Result<Vec<_>, _>>()?;
            let mut metadata = json!({"resourceVersion": rv_string});
            if let Some(c) = &continue_token {
                metadata["continue"] = json!(c);
            }
            Ok(value_response(
                StatusCode::OK,
                &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "items": objects}),
            ))
        }
        Want::Json => {
            // Concatenate the cached bytes: no re-encoding of every object.
            let mut metadata = json!({"resourceVersion": rv_string});
            if let Some(c) = &continue_token {
                metadata["continue"] = json!(c);
            }
            let head = format!(
                "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
                info.kind,
                info.api_version(),
                metadata
            );
            let mut body = Vec::with_capacity(
                head.len() + items.iter().map(|(_, b)| b.len() + 1).sum::<usize>() + 2,
            );
            body.extend_from_slice(head.as_bytes());
            for (i, (_, bytes)) in items.iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(bytes);
            }
            body.extend_from_slice(b"]}");
            Ok(json_response(StatusCode::OK, body))
        }
    }
}

fn apply_limit(items: &mut Vec<(String, Bytes)>, limit: Option<usize>, more: &mut bool) {
    if let Some(l) = limit
        && items.len() > l
    {
        items.truncate(l);
        *more = true;
    }
}

// ---------------------------------------------------------------- WATCH

fn watch_line(kind: &str, object: &[u8]) -> Bytes {
    let mut line = crate::apiserver::storage::watchcache::open_watch_line(kind, object.len());
    line.extend_from_slice(object);
    crate::apiserver::storage::watchcache::close_watch_line(&mut line);
    Bytes::from(line)
}

fn bookmark(info: &ResourceInfo, revision: i64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let object = json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": metadata});
    watch_line("BOOKMARK", object.to_string().as_bytes())
}

/// Decides how one cache event looks to a filtered watcher (ADDED when an object
/// enters the selection, DELETED when it leaves).
fn translate(
    event: &CacheEvent,
    prefix: &str,
    name: Option<&str>,
    filter: &Filter,
    metadata_only: bool,
) -> Option<Bytes> {
    if !event.key.starts_with(prefix) {
        return None;
    }
    if let Some(name) = name
        && event.key.rsplit('/').next() != Some(name)
    {
        return None;
    }
    let now = filter.matches_bytes(&event.bytes);
    let before = event.prev.as_ref().is_some_and(|p| filter.matches_bytes(p));
    let kind = match (event.kind, now, before) {
        (EventType::Deleted, _, true) | (EventType::Deleted, true, _) => "DELETED",
        (EventType::Deleted, false, false) => return None,
        (EventType::Added, true, _) => "ADDED",
        (EventType::Modified, true, true) => "MODIFIED",
        (EventType::Modified, true, false) => "ADDED",
        (EventType::Modified, false, true) => "DELETED",
        _ => return None,
    };
    if !metadata_only && kind == event.kind.as_str() {
        // The line the cache built once for every watcher: no copy per watch.
        return Some(event.line.clone());
    }
    Some(watch_object_line(kind, &event.bytes, metadata_only))
}

/// A watch line carrying the object, or only its `PartialObjectMetadata` when the
/// client asked for that (metadata informers: the garbage collector, …).
fn watch_object_line(kind: &str, object: &[u8], metadata_only: bool) -> Bytes {
    if metadata_only && let Some(partial) = partial_metadata_bytes(object) {
        return watch_line(kind, &partial);
    }
    if metadata_only && let Ok(value) = serde_json::from_slice::<Value>(object) {
        let partial = table::partial_object_metadata(&value);
        if let Ok(bytes) = serde_json::to_vec(&partial) {
            return watch_line(kind, &bytes);
        }
    }
    watch_line(kind, object)
}

/// A stored object's `PartialObjectMetadata`, cut from its bytes: stored objects are
/// compact JSON with sorted keys, so this is what decoding the object and encoding
/// [`table::partial_object_metadata`] gives, without decoding the rest of the object (a
/// metadata watch on pods — the garbage collector's — sees every pod write).
fn partial_metadata_bytes(object: &[u8]) -> Option<Vec<u8>> {
    const HEAD: &[u8] =
        br#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":"#;
    let metadata = crate::apiserver::storage::watchcache::metadata_bytes(object)?;
    let mut out = Vec::with_capacity(HEAD.len() + metadata.len() + 1);
    out.extend_from_slice(HEAD);
    out.extend_from_slice(metadata);
    out.push(b'}');
    Some(out)
}

/// Every object under `prefix` as of `at_revision` (`None`: now), read from the store
/// rather than the watch cache.
async fn read_store(
    state: &AppState,
    info: &ResourceInfo,
    prefix: &str,
    at_revision: Option<i64>,
) -> Result<crate::store::RangeResult, ApiError> {
    state
        .store
        .range(RangeRequest {
            prefix: prefix.as_bytes().to_vec(),
            at_revision,
            ..Default::default()
        })
        .await
        .map_err(store_err(info, ""))
}

pub async fn watch(state: &Arc<AppState>, target: &Target, query: &Query, want: Want) -> ApiResult {
    let metadata_only = matches!(want, Want::PartialMetadata);
    let info = target.info.clone();
    let filter = Filter::from_query(&info, query)?;
    let prefix = info.namespace_prefix(target.namespace.as_deref());
    let name = target.name.clone().or_else(|| {
        filter
            .fields
            .as_ref()
            .and_then(|f| f.requires_exact_match("metadata.name").map(str::to_string))
    });
    let rv = query.get("resourceVersion").unwrap_or("").to_string();
    let bookmarks = query.flag("allowWatchBookmarks");
    let send_initial = query.get("sendInitialEvents").map(|v| v == "true");
    if send_initial.is_some() {
        if query.get("resourceVersionMatch") != Some("NotOlderThan") {
            return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", vec![StatusCause {
                reason: Some("FieldValueForbidden".into()),
                message: Some("Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".into()),
                field: Some("sendInitialEvents".into()),
            }]));
        }
        if !bookmarks {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "ListOptions",
                "",
                vec![StatusCause {
                    reason: Some("FieldValueForbidden".into()),
                    message: Some(
                        "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true"
                            .into(),
                    ),
                    field: Some("allowWatchBookmarks".into()),
                }],
            ));
        }
    }
    let timeout = match query.int("timeoutSeconds")? {
        Some(t) if t > 0 => Duration::from_secs(t as u64),
        // kube-apiserver draws one from [min-request-timeout, 2×min-request-timeout).
        _ => super::limits::watch_timeout(state.config.limits.min_request_timeout),
    };
    let initial_state = send_initial.unwrap_or(rv.is_empty() || rv == "0");
    let keep = |key: &str, bytes: &[u8]| {
        name.as_deref()
            .is_none_or(|n| key.rsplit('/').next() == Some(n))
            && filter.matches_bytes(bytes)
    };
    let too_old = |requested: i64, oldest: i64| -> ApiResult {
        // kube-apiserver answers a too-old watch with 200 and one ERROR event.
        let status = ApiError::gone(format!("too old resource version: {requested} ({oldest})"));
        Ok(stream_response(
            vec![watch_line("ERROR", &status.body())],
            None,
        ))
    };
    let (initial, feed, start_revision) =
        if !crate::apiserver::storage::watchcache::is_cached(&prefix) {
            // Not in the watch cache: list and follow the store, as kube-apiserver does
            // for kinds whose cache is disabled.
            let (lines, from) = if initial_state {
                let page = read_store(state, &info, &prefix, None).await?;
                let lines = page
                    .kvs
                    .iter()
                    .map(|kv| (String::from_utf8_lossy(&kv.key), stored_to_response(kv)))
                    .filter(|(key, bytes)| keep(key, bytes))
                    .map(|(_, bytes)| watch_object_line("ADDED", &bytes, metadata_only))
                    .collect();
                (lines, page.revision)
            } else {
                let from: i64 = rv.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version {rv:?}"))
                })?;
                (Vec::new(), from)
            };
            match state.store.watch(prefix.as_bytes(), from).await {
                Ok(stream) => (lines, EventFeed::Store(stream), from),
                Err(StoreError::Compacted {
                    requested,
                    compact_revision,
                }) => return too_old(requested, compact_revision),
                Err(e) => return Err(ApiError::from_store(e, &info.group, &info.plural, "")),
            }
        } else if initial_state {
            if rv.is_empty() {
                let current = consistent_revision(state).await?;
                state.cache.wait_for(current, Duration::from_secs(3)).await;
            }
            let (objects, receiver, revision) = state.cache.snapshot_and_subscribe(&prefix);
            let lines: Vec<Bytes> = objects
                .into_iter()
                .filter(|o| keep(&o.key, &o.bytes))
                .map(|o| watch_object_line("ADDED", &o.bytes, metadata_only))
                .collect();
            (lines, EventFeed::Cache(receiver), revision)
        } else {
            let from: i64 = rv
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))?;
            // The feed returns the retained events after `from` first.
            match state.cache.subscribe(&prefix, from) {
                Ok(feed) => (Vec::new(), EventFeed::Cache(feed), from),
                Err(SubscribeError::TooOld { requested, oldest }) => {
                    return too_old(requested, oldest);
                }
            }
        };
    let mut first = initial;
    if send_initial == Some(true) {
        first.push(bookmark(&info, start_revision, true));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(256);
    let prefix_for_task = prefix.clone();
    tokio::spawn(async move {
        let mut feed = feed;
        // One timer for the watch's life: a `sleep_until` built in the loop registered
        // and dropped a timer for every event every watcher saw (7% of the server's CPU
        // under a create load).
        let expiry = tokio::time::sleep(timeout);
        tokio::pin!(expiry);
        let mut last_revision = start_revision;
        let mut ticker = tokio::time::interval(Duration::from_secs(60));
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = &mut expiry => break,
                _ = ticker.tick(), if bookmarks => {
                    // A cache feed is woken only by its own kind: the bookmark carries
                    // how far it has read, so a quiet kind's watchers resume recent.
                    if let Some(read) = feed.caught_up() {
                        last_revision = last_revision.max(read);
                    }
                    if tx.send(bookmark(&info, last_revision, false)).await.is_err() { break; }
                }
                event = feed.recv() => match event {
                    Ok(event) => {
                        last_revision = event.revision;
                        if let Some(line) = translate(&event, &prefix_for_task, name.as_deref(), &filter, metadata_only)
                            && tx.send(line).await.is_err()
                        {
                            break;
                        }
                    }
                    Err(FeedEnd::Lagged) => {
                        let status = ApiError::gone("watch fell behind; the client must re-list".to_string());
                        let _ = tx.send(watch_line("ERROR", &status.body())).await;
                        break;
                    }
                    Err(FeedEnd::Closed) => break,
                },
                _ = tx.closed() => break,
            }
        }
    });
    Ok(stream_response(first, Some(rx)))
}

fn stream_response(
    first: Vec<Bytes>,
    rest: Option<tokio::sync::mpsc::Receiver<Bytes>>,
) -> Response {
    use futures_util::StreamExt;
    let head = futures_util::stream::iter(first.into_iter().map(Ok::<Bytes, std::io::Error>));
    let body = match rest {
        Some(rx) => {
            Body::from_stream(head.chain(tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok)))
        }
        None => Body::from_stream(head),
    };
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        header::TRANSFER_ENCODING,
        HeaderValue::from_static("chunked"),
    );
    response
}

// ---------------------------------------------------------------- writes

/// Checks `apiVersion`/`kind` of a body against the resource addressed.
fn check_type_meta(info: &ResourceInfo, object: &mut Value) -> Result<(), ApiError> {
    let Some(map) = object.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    // Like kube-apiserver's decoder, a missing apiVersion or kind defaults to the
    // endpoint's; a different one is an error.
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if !api_version.is_empty() && api_version != info.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            info.api_version()
        )));
    }
    if !kind.is_empty() && kind != info.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            info.kind
        )));
    }
    map.insert("kind".into(), json!(info.kind));
    map.insert("apiVersion".into(), json!(info.api_version()));
    Ok(())
}

fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

/// Fails unless `namespace` exists and is not terminating.
async fn check_namespace(
    state: &AppState,
    info: &ResourceInfo,
    namespace: &str,
) -> Result<(), ApiError> {
    let key = format!("/registry/namespaces/{namespace}");
    // Every namespace write this server made is in the cache once it reaches
    // `namespace_written`: "create the namespace, then create into it" and "delete
    // it, then be refused" hold without waiting for unrelated writes.
    let written = state.namespace_written.load(Ordering::Acquire);
    state.cache.wait_for(written, Duration::from_secs(3)).await;
    let mut cached = state.cache.get(&key);
    if cached.is_none() {
        // Made elsewhere (another server, a restore) and maybe not applied yet:
        // catch up with everything committed before answering NotFound.
        let current = consistent_revision(state).await?;
        state.cache.wait_for(current, Duration::from_secs(3)).await;
        cached = state.cache.get(&key);
    }
    let Some(ns) = cached else {
        return Err(ApiError::not_found("", "namespaces", namespace));
    };
    // Only the phase matters: skip building a whole Value for every create.
    #[derive(serde::Deserialize)]
    struct Phase {
        phase: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct NamespacePhase {
        status: Option<Phase>,
    }
    let ns: NamespacePhase = serde_json::from_slice(&ns.bytes)
        .map_err(|e| ApiError::internal(format!("stored object is not JSON: {e}")))?;
    if ns.status.and_then(|s| s.phase).as_deref() == Some("Terminating") {
        return Err(ApiError {
            code: StatusCode::FORBIDDEN,
            reason: "Forbidden",
            message: format!(
                "{} is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                info.plural
            ),
            details: Some(Box::new(StatusDetails {
                name: Some(namespace.into()),
                kind: Some(info.plural.clone()),
                ..Default::default()
            })),
        });
    }
    Ok(())
}

/// Serializes an object for storage (without resourceVersion, which the store keeps).
fn to_stored(object: &Value) -> Vec<u8> {
    let has_version = object
        .get("metadata")
        .and_then(Value::as_object)
        .is_some_and(|meta| meta.contains_key("resourceVersion"));
    if !has_version {
        // Creates have already dropped it: no need to copy the whole object.
        return serde_json::to_vec(object).unwrap_or_default();
    }
    let mut copy = object.clone();
    remove_resource_version(&mut copy);
    serde_json::to_vec(&copy).unwrap_or_default()
}

/// Removes `metadata.resourceVersion` (the store keeps it) from an object we own.
fn remove_resource_version(object: &mut Value) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
}

fn stored_to_response(kv: &KeyValue) -> Bytes {
    crate::apiserver::storage::watchcache::with_resource_version(&kv.value, kv.mod_revision)
}

fn check_body_size(body: &[u8]) -> Result<(), ApiError> {
    if body.len() > crate::apiserver::MAX_BODY_BYTES {
        return Err(crate::apiserver::body_too_large());
    }
    Ok(())
}

pub async fn create(
    state: &AppState,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult {
    let info = &target.info;
    check_body_size(body)?;
    if target.subresource.is_some() {
        return super::subresources::create(state, target, query, headers, body).await;
    }
    let mut object = decode_request(info, headers, body)?;
    check_type_meta(info, &mut object)?;
    let validation = FieldValidation::parse(query.get("fieldValidation"))?;
    let warnings = type_check(state, info, &mut object, validation)?;
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let manager = crate::apiserver::storage::apply::manager(query, user_agent)?;
    create_object(state, target, query, object, warnings, Some(&manager)).await
}

/// Stores a new object (decoded and type-checked): names, server metadata,
/// defaults, admission, validation, field ownership (`manager`, unless already set).
pub async fn create_object(
    state: &AppState,
    target: &Target,
    query: &Query,
    mut object: Value,
    warnings: Vec<String>,
    manager: Option<&str>,
) -> ApiResult {
    let info = &target.info;
    check_type_meta(info, &mut object)?;
    let dry_run = query.dry_run()?;
    let namespace = target.namespace.clone();
    if info.namespaced && namespace.is_none() {
        return Err(ApiError::not_found(&info.group, &info.plural, ""));
    }
    {
        let meta = metadata_mut(&mut object);
        if let Some(ns) = meta.get("namespace").and_then(Value::as_str)
            && !ns.is_empty()
            && Some(ns) != namespace.as_deref()
            && info.namespaced
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if info.namespaced {
            meta.insert("namespace".into(), json!(namespace));
        } else {
            meta.remove("namespace");
        }
    }
    let meta = metadata_mut(&mut object);
    let mut name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let generate = meta
        .get("generateName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if name.is_empty() {
        if generate.is_empty() {
            return Err(ApiError::invalid(
                &info.group,
                &info.kind,
                "",
                vec![StatusCause {
                    reason: Some("FieldValueRequired".into()),
                    message: Some("Required value: name or generateName is required".into()),
                    field: Some("metadata.name".into()),
                }],
            ));
        }
        name = format!("{generate}{}", objects::name_suffix());
        meta.insert("name".into(), json!(name));
    }
    if let Some(problem) = objects::name_problem(info, &name) {
        return Err(objects::invalid_name(info, &name, problem));
    }
    crate::panics::test_hook("create", &name);
    meta.insert("uid".into(), json!(objects::new_uid()));
    meta.insert("creationTimestamp".into(), json!(objects::now_rfc3339()));
    meta.remove("resourceVersion");
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    meta.remove("selfLink");
    if tracks_generation(info) {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    if let Some(ns) = &namespace {
        check_namespace(state, info, ns).await?;
    }
    objects::apply_defaults(info, &mut object);
    // NodeRestriction: what a node creates must be its own (Node, Lease, mirror pods).
    if let Ok(Err(denied)) = crate::apiserver::auth::authz::escalation::REQUESTER.try_with(|who| {
        crate::apiserver::auth::authz::node::admit_create(who, &info.group, &info.plural, &object)
    }) {
        return Err(denied);
    }
    // The requester owns what it sent and what defaulting filled in, not what admission
    // adds after (the service-account volume, default tolerations, the priority), as
    // kube-apiserver updates managed fields before mutating admission.
    if let Some(manager) = manager {
        crate::apiserver::storage::apply::record(info, None, &mut object, manager, None);
    }
    objects::admission_defaults(info, &mut object);
    crate::apiserver::admission::on_create(state, info, &mut object, dry_run).await?;
    let causes = validate(state, info, &object, None);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&info.group, &info.kind, &name, causes));
    }
    let mut warnings = warnings;
    warnings.extend(crate::apiserver::admission::validate(
        state,
        info,
        target.subresource.as_deref(),
        None,
        &object,
    )?);
    if dry_run {
        return Ok(with_warnings(
            value_response(StatusCode::CREATED, &object),
            &warnings,
        ));
    }
    let key = info.key(namespace.as_deref(), &name);
    let kv = state
        .store
        .create(key.as_bytes(), to_stored(&object))
        .await
        .map_err(store_err(info, &name))?;
    crate::apiserver::admission::after_write(state, info, &object, kv.mod_revision).await;
    Ok(with_warnings(
        json_response(StatusCode::CREATED, stored_to_response(&kv)),
        &warnings,
    ))
}

/// Fields of `new` that an update of the main resource may not change, copied from
/// `old`; and for `/status`, everything but status.
fn merge_for_update(info: &ResourceInfo, old: &Value, new: &mut Value, status_only: bool) {
    if status_only {
        let status = new.get("status").cloned();
        let mut merged = old.clone();
        match status {
            Some(s) => merged["status"] = s,
            None => {
                if let Some(m) = merged.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        *new = merged;
        return;
    }
    if info.has_subresource("status") {
        match old.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Some(m) = new.as_object_mut() {
                    m.remove("status");
                }
            }
        }
    }
    let old_meta = old.get("metadata").cloned().unwrap_or_default();
    let meta = metadata_mut(new);
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "name",
    ] {
        match old_meta.get(field) {
            Some(v) => {
                meta.insert(field.into(), v.clone());
            }
            None => {
                meta.remove(field);
            }
        }
    }
}

fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut c = v.clone();
        if let Some(m) = c.as_object_mut() {
            m.remove("metadata");
            m.remove("status");
        }
        c
    };
    strip(old) != strip(new)
}

/// Outcome of preparing an update from the current object.
pub enum Prepared {
    /// The new object; ownership is recorded for the request's field manager.
    Write(Value, Vec<String>),
    /// The new object with managedFields already decided (server-side apply).
    Owned(Value),
    /// A storage-level edit of the current object, made in place (no copy of the old
    /// state is kept): the object's defaulting, validation, admission and field ownership
    /// do not run again. Kubernetes' `BindingREST` writes this way.
    Edit(Box<dyn FnOnce(&mut Value) + Send>),
    Unchanged(Bytes),
}

/// The object an update starts from: its JSON with `metadata.resourceVersion` set, and
/// the revision a compare-and-swap must find.
struct Current {
    bytes: Bytes,
    mod_revision: i64,
}

/// Reads the current object, lets `change` produce the new one, then stores it with
/// compare-and-swap (retrying on races when the caller did not pin a version).
pub async fn update_with<F>(
    state: &AppState,
    target: &Target,
    query: &Query,
    pinned_by_client: bool,
    change: F,
) -> ApiResult
where
    F: FnMut(&Value) -> Result<Prepared, ApiError>,
{
    update_with_agent(state, target, query, pinned_by_client, None, change).await
}

/// `update_with`, naming the client's user agent for field ownership.
pub async fn update_with_agent<F>(
    state: &AppState,
    target: &Target,
    query: &Query,
    pinned_by_client: bool,
    user_agent: Option<&str>,
    mut change: F,
) -> ApiResult
where
    F: FnMut(&Value) -> Result<Prepared, ApiError>,
{
    let info = &target.info;
    let name = name_of(target).to_string();
    let key = key_of(target);
    let dry_run = query.dry_run()?;
    let status_only = target.subresource.as_deref() == Some("status");
    for attempt in 0..16 {
        // The first try of an update the client did not pin reads the watch cache instead
        // of SQLite: a copy that lags the store only makes the compare-and-swap below fail,
        // and the retry reads the store. A pinned update always reads the store, so a lagging
        // cache never answers a current resourceVersion with a Conflict.
        let cached = if attempt == 0 && !pinned_by_client {
            state.cache.get(&key)
        } else {
            None
        };
        // As kube's GuaranteedUpdate: a copy from the cache may be stale, so a change
        // that fails on it, or that would leave it unchanged, is tried again on the
        // store's current copy before it answers (a patch's `test` or a no-op verdict
        // against an old version would not be linearizable).
        let from_cache = cached.is_some();
        let current = match cached {
            Some(object) => Current {
                bytes: object.bytes,
                mod_revision: object.revision,
            },
            None => match state
                .store
                .get(key.as_bytes())
                .await
                .map_err(store_err(info, &name))?
            {
                Some(kv) => Current {
                    bytes: stored_to_response(&kv),
                    mod_revision: kv.mod_revision,
                },
                None => return Err(ApiError::not_found(&info.group, &info.plural, &name)),
            },
        };
        let mut old = parse(&current.bytes)?;
        metadata_mut(&mut old).insert(
            "resourceVersion".into(),
            json!(current.mod_revision.to_string()),
        );
        let prepared = match change(&old) {
            Ok(prepared) => prepared,
            Err(_) if from_cache => continue,
            Err(e) => return Err(e),
        };
        let (mut new, warnings, owned, old) = match prepared {
            Prepared::Unchanged(_) if from_cache => continue,
            Prepared::Unchanged(bytes) => return Ok(json_response(StatusCode::OK, bytes)),
            Prepared::Write(new, warnings) => (new, warnings, false, Some(old)),
            Prepared::Owned(new) => (new, Vec::new(), true, Some(old)),
            Prepared::Edit(edit) => {
                let mut new = old;
                edit(&mut new);
                (new, Vec::new(), true, None)
            }
        };
        // A storage-level edit reads nothing of the old state below.
        let direct = old.is_none();
        let mut old = old.unwrap_or(Value::Null);
        if let Some(rv) = new
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            && !rv.is_empty()
            && rv != current.mod_revision.to_string()
        {
            return Err(ApiError::conflict(
                &info.group,
                &info.plural,
                &name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let new_name = new
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !new_name.is_empty() && new_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({new_name}) does not match the name on the URL ({name})"
            )));
        }
        if direct {
            metadata_mut(&mut new);
        } else {
            merge_for_update(info, &old, &mut new, status_only);
        }
        if !status_only && !direct {
            objects::apply_defaults(info, &mut new);
            objects::admission_defaults(info, &mut new);
            if !info.custom && info.group.is_empty() && info.kind == "Service" {
                crate::apiserver::admission::validation::prepare_service_update(&old, &mut new);
            }
            if tracks_generation(info) && spec_changed(&old, &new) {
                let generation = old
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
                    + 1;
                metadata_mut(&mut new).insert("generation".into(), json!(generation));
            }
            let causes = validate(state, info, &new, Some(&old));
            if !causes.is_empty() {
                return Err(ApiError::invalid(&info.group, &info.kind, &name, causes));
            }
        }
        if status_only && !direct {
            let causes = crate::apiserver::admission::validation::validate_status(info, &new, &old);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&info.group, &info.kind, &name, causes));
            }
        }
        // Managed fields before mutating admission, as in kube-apiserver (see create).
        if !owned {
            let manager = crate::apiserver::storage::apply::manager(query, user_agent)?;
            crate::apiserver::storage::apply::record(
                info,
                Some(&old),
                &mut new,
                &manager,
                target.subresource.as_deref(),
            );
        }
        let mut warnings = warnings;
        if !direct {
            // NodeRestriction: a node may not relabel or untaint its own Node.
            if !status_only
                && let Ok(Err(denied)) = crate::apiserver::auth::authz::escalation::REQUESTER
                    .try_with(|who| {
                        crate::apiserver::auth::authz::node::admit_update(
                            who,
                            &info.group,
                            &info.plural,
                            &old,
                            &new,
                        )
                    })
            {
                return Err(denied);
            }
            crate::apiserver::admission::on_update(state, info, &old, &mut new).await?;
            warnings.extend(crate::apiserver::admission::validate(
                state,
                info,
                target.subresource.as_deref(),
                Some(&old),
                &new,
            )?);
        }
        // Finalization complete: the last finalizer of a deleting object is gone.
        let deleting = new.pointer("/metadata/deletionTimestamp").is_some();
        let finalizers_left = new
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if dry_run {
            return Ok(with_warnings(
                value_response(StatusCode::OK, &new),
                &warnings,
            ));
        }
        if deleting && !finalizers_left && !is_namespace_pending(info, &new) {
            return match state
                .store
                .delete(key.as_bytes(), Some(current.mod_revision))
                .await
            {
                Ok((_, revision)) => {
                    crate::apiserver::admission::after_delete(state, info, &new, revision).await;
                    Ok(json_response(
                        StatusCode::OK,
                        crate::apiserver::storage::watchcache::with_resource_version(
                            &to_stored(&new),
                            revision,
                        ),
                    ))
                }
                Err(StoreError::Conflict { .. }) if !pinned_by_client => continue,
                Err(e) => Err(ApiError::from_store(e, &info.group, &info.plural, &name)),
            };
        }
        // Both trees are ours now: drop resourceVersion in place and compare them,
        // rather than cloning and encoding each just to compare the bytes.
        remove_resource_version(&mut new);
        remove_resource_version(&mut old);
        if new == old {
            // No-op updates keep the resourceVersion (as kube-apiserver does).
            return Ok(json_response(StatusCode::OK, current.bytes));
        }
        let stored = serde_json::to_vec(&new).unwrap_or_default();
        match state
            .store
            .update(key.as_bytes(), stored, current.mod_revision)
            .await
        {
            Ok(kv) => {
                crate::apiserver::admission::after_write(state, info, &new, kv.mod_revision).await;
                return Ok(with_warnings(
                    json_response(StatusCode::OK, stored_to_response(&kv)),
                    &warnings,
                ));
            }
            Err(StoreError::Conflict { .. }) if !pinned_by_client => continue,
            Err(e) => return Err(ApiError::from_store(e, &info.group, &info.plural, &name)),
        }
    }
    Err(ApiError::conflict(
        &info.group,
        &info.plural,
        &name,
        "too many concurrent writers; try again",
    ))
}

fn is_namespace_pending(info: &ResourceInfo, object: &Value) -> bool {
    info.group.is_empty()
        && info.plural == "namespaces"
        && object
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty())
}

pub async fn update(
    state: &AppState,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult {
    let info = target.info.clone();
    check_body_size(body)?;
    if target.subresource.as_deref() == Some("scale") {
        return super::subresources::update_scale(state, target, query, headers, body).await;
    }
    if let Some(sub) = target.subresource.as_deref()
        && sub != "status"
        && sub != "finalize"
    {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({sub})"
        )));
    }
    let mut object = decode_request(&info, headers, body)?;
    check_type_meta(&info, &mut object)?;
    let validation = FieldValidation::parse(query.get("fieldValidation"))?;
    let warnings = type_check(state, &info, &mut object, validation)?;
    let pinned = object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty());
    let finalize = target.subresource.as_deref() == Some("finalize");
    let mut target = target.clone();
    if finalize {
        target.subresource = None;
    }
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    update_with_agent(state, &target, query, pinned, user_agent, |old| {
        let mut new = object.clone();
        if finalize {
            // The finalize subresource only changes spec.finalizers.
            let finalizers = new
                .pointer("/spec/finalizers")
                .cloned()
                .unwrap_or(json!([]));
            new = old.clone();
            new["spec"]["finalizers"] = finalizers;
        }
        Ok(Prepared::Write(new, warnings.clone()))
    })
    .await
}

/// Another version's shape of a stored resource (events.k8s.io Events over core
/// Events): a patch is applied to the object in that shape.
pub struct View {
    pub info: Arc<ResourceInfo>,
    pub to_view: fn(&Value) -> Value,
    pub from_view: fn(&Value) -> Value,
}

pub async fn patch(
    state: &AppState,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
    view: Option<&View>,
) -> ApiResult {
    // The resource as the client sees it: the view's when there is one.
    let info = view.map_or_else(|| target.info.clone(), |v| v.info.clone());
    check_body_size(body)?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = content_type.split(';').next().unwrap_or("").trim();
    let Some(patch_type) = patch::patch_type_from_content_type(media) else {
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {media})"
        )));
    };
    if patch_type == PatchType::StrategicMerge
        && (info.custom || patch::builtin_schema(&info.group, &info.kind).is_none())
    {
        return Err(ApiError::unsupported_media_type(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    if patch_type == PatchType::Apply {
        if view.is_some() {
            return Err(ApiError::unsupported_media_type(format!(
                "server-side apply is not supported for {}/{}; apply to the core/v1 resource instead",
                info.api_version(),
                info.plural
            )));
        }
        return crate::apiserver::storage::apply::server_side_apply(state, target, query, body)
            .await;
    }
    let patch_doc: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let validation = FieldValidation::parse(query.get("fieldValidation"))?;
    let pinned = patch_doc
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty());
    if target.subresource.as_deref() == Some("scale") {
        return super::subresources::patch_scale(state, target, query, patch_type, &patch_doc)
            .await;
    }
    let info_for_patch = info.clone();
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let to_view = view.map(|v| v.to_view);
    let from_view = view.map(|v| v.from_view);
    update_with_agent(state, target, query, pinned, user_agent, move |stored| {
        let viewed = to_view.map(|f| f(stored));
        let old = viewed.as_ref().unwrap_or(stored);
        let mut new = match patch_type {
            PatchType::Json => patch::apply_json_patch(old, &patch_doc).map_err(patch_error)?,
            PatchType::Merge => patch::apply_merge_patch(old, &patch_doc),
            PatchType::StrategicMerge => {
                let schema = patch::builtin_schema(&info_for_patch.group, &info_for_patch.kind)
                    .ok_or_else(|| {
                        ApiError::unsupported_media_type(
                            "strategic merge patch is not supported for this kind",
                        )
                    })?;
                patch::apply_strategic_merge_patch(old, &patch_doc, schema).map_err(patch_error)?
            }
            PatchType::Apply => unreachable!("handled above"),
        };
        // A patch never changes the resource version semantics unless it sets it.
        if !pinned && let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        check_type_meta(&info_for_patch, &mut new)?;
        let warnings = type_check(state, &info_for_patch, &mut new, validation)?;
        if let Some(from_view) = from_view {
            new = from_view(&new);
        }
        Ok(Prepared::Write(new, warnings))
    })
    .await
}

/// A patch failure as kube-apiserver reports it (status, reason and message).
fn patch_error(e: patch::PatchError) -> ApiError {
    let code = StatusCode::from_u16(e.status_code()).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
    ApiError::new(code, e.reason(), e.status_message())
}

/// DeleteOptions from the body and query.
struct DeleteOptions {
    grace_period: Option<i64>,
    propagation: Option<String>,
    precondition_uid: Option<String>,
    precondition_rv: Option<String>,
    dry_run: bool,
}

fn delete_options(query: &Query, body: &[u8]) -> Result<DeleteOptions, ApiError> {
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else if body.starts_with(b"k8s\0") {
        super::protobuf::decode_object_with_defaults(body, "meta.k8s.io/v1", "DeleteOptions")
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let dry_run = query.dry_run()?
        || body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == "All"));
    Ok(DeleteOptions {
        grace_period: query
            .int("gracePeriodSeconds")?
            .or_else(|| body.get("gracePeriodSeconds").and_then(Value::as_i64)),
        propagation: query
            .get("propagationPolicy")
            .map(str::to_string)
            .or_else(|| {
                body.get("propagationPolicy")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .or_else(
                || match body.get("orphanDependents").and_then(Value::as_bool) {
                    Some(true) => Some("Orphan".into()),
                    Some(false) => Some("Background".into()),
                    None => None,
                },
            ),
        precondition_uid: body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        precondition_rv: body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
        dry_run,
    })
}

pub async fn delete(state: &AppState, target: &Target, query: &Query, body: &[u8]) -> ApiResult {
    let info = target.info.clone();
    let name = name_of(target).to_string();
    let key = key_of(target);
    let options = delete_options(query, body)?;
    if let Some(p) = &options.propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "DeleteOptions",
            "",
            vec![StatusCause {
                reason: Some("FieldValueNotSupported".into()),
                message: Some(format!(
                    "Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
                )),
                field: Some("propagationPolicy".into()),
            }],
        ));
    }
    for _attempt in 0..16 {
        let Some(current) = state
            .store
            .get(key.as_bytes())
            .await
            .map_err(store_err(&info, &name))?
        else {
            return Err(ApiError::not_found(&info.group, &info.plural, &name));
        };
        let mut object = parse(&current.value)?;
        let uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if let Some(want) = &options.precondition_uid
            && *want != uid
        {
            return Err(ApiError::conflict(
                &info.group,
                &info.plural,
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                ),
            ));
        }
        if let Some(want) = &options.precondition_rv
            && *want != current.mod_revision.to_string()
        {
            return Err(ApiError::conflict(
                &info.group,
                &info.plural,
                &name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {}",
                    current.mod_revision
                ),
            ));
        }
        let already_deleting = object.pointer("/metadata/deletionTimestamp").is_some();
        // Finalizers that the propagation policy asks for.
        let mut finalizers: Vec<Value> = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let policy = options
            .propagation
            .clone()
            .unwrap_or_else(|| "Background".to_string());
        let mut changed = false;
        let wanted_finalizer = match policy.as_str() {
            "Foreground" => Some("foregroundDeletion"),
            "Orphan" => Some("orphan"),
            _ => None,
        };
        if let Some(f) = wanted_finalizer
            && !finalizers.iter().any(|x| x == f)
            && !already_deleting
        {
            finalizers.push(json!(f));
            changed = true;
        }
        let namespace_pending = info.group.is_empty() && info.plural == "namespaces";
        let graceful_pod = info.group.is_empty()
            && info.plural == "pods"
            && object
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty())
            && options.grace_period.unwrap_or(1) > 0
            && object
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .is_none_or(|p| p != "Succeeded" && p != "Failed");
        if finalizers.is_empty() && !namespace_pending && !graceful_pod {
            if options.dry_run {
                return Ok(json_response(StatusCode::OK, stored_to_response(&current)));
            }
            return match state
                .store
                .delete(key.as_bytes(), Some(current.mod_revision))
                .await
            {
                Ok((_, revision)) => {
                    crate::apiserver::admission::after_delete(state, &info, &object, revision)
                        .await;
                    Ok(json_response(
                        StatusCode::OK,
                        crate::apiserver::storage::watchcache::with_resource_version(
                            &current.value,
                            revision,
                        ),
                    ))
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::NotFound { .. }) => {
                    Err(ApiError::not_found(&info.group, &info.plural, &name))
                }
                Err(e) => Err(ApiError::from_store(e, &info.group, &info.plural, &name)),
            };
        }
        if already_deleting && !changed {
            return Ok(json_response(
                StatusCode::ACCEPTED,
                stored_to_response(&current),
            ));
        }
        // Graceful: mark for deletion; finalizers (or the kubelet) finish it.
        let grace = if graceful_pod {
            options
                .grace_period
                .or_else(|| {
                    object
                        .pointer("/spec/terminationGracePeriodSeconds")
                        .and_then(Value::as_i64)
                })
                .unwrap_or(30)
        } else {
            0
        };
        {
            let meta = metadata_mut(&mut object);
            if !already_deleting {
                meta.insert(
                    "deletionTimestamp".into(),
                    json!(objects::format_rfc3339(now_unix() + grace)),
                );
                meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            if !finalizers.is_empty() {
                meta.insert("finalizers".into(), json!(finalizers));
            }
        }
        if namespace_pending {
            object["status"]["phase"] = json!("Terminating");
        }
        if options.dry_run {
            return Ok(value_response(StatusCode::ACCEPTED, &object));
        }
        match state
            .store
            .update(key.as_bytes(), to_stored(&object), current.mod_revision)
            .await
        {
            Ok(kv) => {
                crate::apiserver::admission::after_write(state, &info, &object, kv.mod_revision)
                    .await;
                return Ok(json_response(StatusCode::ACCEPTED, stored_to_response(&kv)));
            }
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(ApiError::from_store(e, &info.group, &info.plural, &name)),
        }
    }
    Err(ApiError::conflict(
        &info.group,
        &info.plural,
        &name,
        "too many concurrent writers; try again",
    ))
}

pub async fn delete_collection(
    state: &AppState,
    target: &Target,
    query: &Query,
    body: &[u8],
) -> ApiResult {
    let info = &target.info;
    let filter = Filter::from_query(info, query)?;
    let prefix = info.namespace_prefix(target.namespace.as_deref());
    let (objects, revision) = if crate::apiserver::storage::watchcache::is_cached(&prefix) {
        let current = consistent_revision(state).await?;
        state.cache.wait_for(current, Duration::from_secs(3)).await;
        state.cache.list(&prefix, None)
    } else {
        let page = read_store(state, info, &prefix, None).await?;
        let objects = page
            .kvs
            .iter()
            .map(|kv| CachedObject {
                key: String::from_utf8_lossy(&kv.key).into(),
                bytes: stored_to_response(kv),
                revision: kv.mod_revision,
            })
            .collect();
        (objects, page.revision)
    };
    let mut deleted = Vec::new();
    for object in objects {
        if !filter.matches_bytes(&object.bytes) {
            continue;
        }
        let value = parse(&object.bytes)?;
        let name = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut one = target.clone();
        one.name = Some(name);
        match delete(state, &one, query, body).await {
            Ok(_) => deleted.push(value),
            Err(e) if e.code == StatusCode::NOT_FOUND => {}
            Err(e) => return Err(e),
        }
    }
    let body = json!({
        "kind": format!("{}List", info.kind),
        "apiVersion": info.api_version(),
        "metadata": {"resourceVersion": revision.to_string()},
        "items": deleted,
    });
    Ok(value_response(StatusCode::OK, &body))
}

/// A success Status for endpoints that answer with one.
pub fn ok_status() -> Response {
    value_response(StatusCode::OK, &success_status(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_metadata_cut_from_bytes_is_what_decoding_gives() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "n", "resourceVersion": "7",
                    "labels": {"app": "a\"}{[", "é": "ü"},
                    "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                    "ownerReferences": [{"kind": "ReplicaSet", "name": "r", "uid": "u"}]},
                "spec": {"containers": [{"name": "c", "image": "x", "args": ["{", "}"]}]},
                "status": {"phase": "Pending"}}),
            // A nested "metadata" key before the real one is skipped.
            json!({"apiVersion": "v1", "data": {"metadata": "{}"}, "kind": "ConfigMap",
                "metadata": {"name": "c"}}),
            json!({"metadata": {}}),
        ];
        for object in objects {
            let stored = serde_json::to_vec(&object).expect("encode");
            let cut = partial_metadata_bytes(&stored).expect("compact JSON with metadata");
            let decoded =
                serde_json::to_vec(&super::super::table::partial_object_metadata(&object))
                    .expect("encode");
            assert_eq!(
                String::from_utf8_lossy(&cut),
                String::from_utf8_lossy(&decoded)
            );
        }
        // Anything else takes the decoding path.
        assert!(partial_metadata_bytes(br#"{"kind":"X"}"#).is_none());
        assert!(partial_metadata_bytes(br#"{"metadata":null}"#).is_none());
        assert!(partial_metadata_bytes(b"[1]").is_none());
    }
}
