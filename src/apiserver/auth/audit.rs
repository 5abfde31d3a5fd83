//! The audit log, as kube-apiserver's (`--audit-policy-file`, `--audit-log-path`).
//!
//! Owns kube's `audit.k8s.io/v1` `Policy` (strictly parsed; rules in order, first match
//! decides the level; `omitStages`, `omitManagedFields`), the `Event` written for each
//! stage of an audited request (RequestReceived, ResponseStarted for long-running
//! requests, ResponseComplete, Panic) and the writer: one JSON line per event, on a
//! thread of its own fed by a bounded channel (a full channel blocks the request, as
//! kube's default `audit-log-mode=blocking` does), into stdout (`-`) or a file rotated as
//! kube's lumberjack rotates it (`<name>-<UTC time>.<ext>`, `maxsize` MB, `maxbackup`
//! files, `maxage` days). Without a policy file nothing is logged, as in kube. Every
//! response carries its request's `Audit-Id` (the client's `Audit-ID` header, else a new
//! UUID), audited or not.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::authn::Identity;

/// `audit-log-*` and `audit-policy-file` as `--kube-apiserver-arg` sets them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// `audit-log-path`: a file, or `-` for stdout; `None` logs nothing.
    pub path: Option<String>,
    /// `audit-policy-file`, parsed; `None` logs nothing.
    pub policy: Option<Arc<Policy>>,
    /// `audit-log-maxage`: days to keep rotated files (0: no limit).
    pub max_age_days: u32,
    /// `audit-log-maxbackup`: rotated files to keep (0: no limit).
    pub max_backups: u32,
    /// `audit-log-maxsize`: megabytes before rotation (0: lumberjack's 100).
    pub max_size_mb: u32,
}

/// How much of a request is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
pub enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

/// A point in a request's life at which an event is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

/// kube's `audit.k8s.io/v1` `Policy`.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Policy {
    api_version: String,
    kind: String,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<Value>,
    #[serde(default)]
    rules: Vec<Rule>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    #[serde(default)]
    omit_managed_fields: bool,
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Rule {
    level: Level,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    #[serde(default)]
    omit_managed_fields: Option<bool>,
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GroupResources {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

/// What the policy sees of a request: kube's authorizer attributes, with the
/// authenticated (not the impersonated) user.
pub struct Attributes<'a> {
    pub user: &'a Identity,
    pub verb: &'a str,
    /// `None` for a non-resource request.
    pub resource: Option<ResourceAttributes<'a>>,
    pub path: &'a str,
}

pub struct ResourceAttributes<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The kind a protobuf body without type information decodes as (empty for
    /// subresources, whose bodies are other kinds).
    pub kind: &'a str,
}

/// The level, stages left out and managed-fields omission that apply to one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub level: Level,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

impl Policy {
    /// Parses and validates a policy file's text (YAML or JSON); unknown fields are
    /// errors.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let policy: Policy = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        if policy.api_version != "audit.k8s.io/v1" || policy.kind != "Policy" {
            return Err(format!(
                "expected apiVersion audit.k8s.io/v1 and kind Policy, got {:?} {:?}",
                policy.api_version, policy.kind
            ));
        }
        if policy.rules.is_empty() {
            return Err("loaded illegal policy with 0 rules".into());
        }
        for (i, rule) in policy.rules.iter().enumerate() {
            let field = format!("rules[{i}]");
            if !rule.non_resource_urls.is_empty()
                && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
            {
                return Err(format!(
                    "{field}.nonResourceURLs: Invalid value: rules cannot apply to both \
                     regular resources and non-resource URLs"
                ));
            }
            for (j, url) in rule.non_resource_urls.iter().enumerate() {
                if url == "*" {
                    continue;
                }
                if !url.starts_with('/') {
                    return Err(format!(
                        "{field}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource \
                         URL rules must begin with a '/' character"
                    ));
                }
                if url.find('*').is_some_and(|at| at + 1 != url.len()) {
                    return Err(format!(
                        "{field}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource \
                         URL wildcards '*' must be the final character"
                    ));
                }
            }
            for (j, group) in rule.resources.iter().enumerate() {
                if !group.resource_names.is_empty() && group.resources.is_empty() {
                    return Err(format!(
                        "{field}.resources[{j}].resourceNames: Invalid value: using \
                         resourceNames requires at least one resource"
                    ));
                }
            }
        }
        Ok(policy)
    }

    /// The first rule matching `attrs` decides; no match is level None.
    pub fn decide(&self, attrs: &Attributes<'_>) -> Decision {
        let Some(rule) = self.rules.iter().find(|rule| rule.matches(attrs)) else {
            return Decision {
                level: Level::None,
                omit_stages: Vec::new(),
                omit_managed_fields: false,
            };
        };
        let mut omit_stages = self.omit_stages.clone();
        for stage in &rule.omit_stages {
            if !omit_stages.contains(stage) {
                omit_stages.push(*stage);
            }
        }
        Decision {
            level: rule.level,
            omit_stages,
            omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
        }
    }
}

impl Rule {
    fn matches(&self, attrs: &Attributes<'_>) -> bool {
        let listed = |list: &[String], s: &str| list.iter().any(|x| x == s);
        if !self.users.is_empty() && !listed(&self.users, &attrs.user.user) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !attrs
                .user
                .groups
                .iter()
                .any(|g| listed(&self.user_groups, g))
        {
            return false;
        }
        if !self.verbs.is_empty() && !listed(&self.verbs, attrs.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            let Some(r) = &attrs.resource else {
                return false;
            };
            if !self.namespaces.is_empty() && !listed(&self.namespaces, r.namespace) {
                return false;
            }
            return self.resources.is_empty() || self.resources.iter().any(|g| g.matches(r));
        }
        if !self.non_resource_urls.is_empty() {
            if attrs.resource.is_some() {
                return false;
            }
            return self.non_resource_urls.iter().any(|url| {
                url == "*"
                    || url == attrs.path
                    || url
                        .strip_suffix('*')
                        .is_some_and(|prefix| attrs.path.starts_with(prefix))
            });
        }
        true
    }
}

impl GroupResources {
    fn matches(&self, r: &ResourceAttributes<'_>) -> bool {
        if self.group != r.group {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        if !self.resource_names.is_empty() && !self.resource_names.iter().any(|n| n == r.name) {
            return false;
        }
        self.resources.iter().any(|entry| {
            if entry == "*" {
                return true;
            }
            if let Some(sub) = entry.strip_prefix("*/") {
                return !r.subresource.is_empty() && sub == r.subresource;
            }
            if let Some(resource) = entry.strip_suffix("/*") {
                return resource == r.resource;
            }
            match entry.split_once('/') {
                Some((resource, sub)) => resource == r.resource && sub == r.subresource,
                None => entry == r.resource && r.subresource.is_empty(),
            }
        })
    }
}

/// `user` and `impersonatedUser` of an event.
#[derive(Clone, Debug, Serialize)]
pub struct UserInfo {
    pub username: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

impl From<&Identity> for UserInfo {
    fn from(who: &Identity) -> Self {
        UserInfo {
            username: who.user.clone(),
            groups: who.groups.clone(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(rename = "apiGroup", skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// `responseStatus`: the code, and for failures the Status's status, message, reason and
/// details.
#[derive(Clone, Debug, Serialize)]
pub struct ResponseStatus {
    pub metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    pub code: u16,
}

/// kube's `audit.k8s.io/v1` `Event`, fields in kube's order.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    pub user: UserInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<UserInfo>,
    #[serde(rename = "sourceIPs")]
    pub source_ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    pub request_received_timestamp: String,
    pub stage_timestamp: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// RFC 3339 with microseconds, as kube's `metav1.MicroTime`.
pub fn micro_time(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = crate::apiserver::storage::objects::format_rfc3339(since.as_secs() as i64);
    let base = secs.strip_suffix('Z').unwrap_or(&secs);
    format!("{base}.{:06}Z", since.subsec_micros())
}

/// The request's audit ID: the client's `Audit-ID` header if it sent a usable one, else a
/// new UUID.
pub fn audit_id(headers: &axum::http::HeaderMap) -> String {
    headers
        .get("audit-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_string)
        .unwrap_or_else(crate::apiserver::storage::objects::new_uid)
}

/// The running audit backend: the policy and the writer's channel.
pub struct Auditor {
    policy: Arc<Policy>,
    sender: SyncSender<Event>,
}

/// Events queued for the writer before a request blocks.
const QUEUE: usize = 10_000;

impl Auditor {
    /// Opens the log (creating it 0600, as kube does) and starts the writer; `None` when
    /// the settings log nothing (no path or no policy).
    pub fn start(settings: &Settings) -> anyhow::Result<Option<Arc<Auditor>>> {
        let (Some(path), Some(policy)) = (&settings.path, &settings.policy) else {
            return Ok(None);
        };
        let mut sink = if path == "-" {
            Sink::Stdout
        } else {
            let max_bytes = u64::from(if settings.max_size_mb == 0 {
                100
            } else {
                settings.max_size_mb
            }) * 1024
                * 1024;
            Sink::File(
                RotatingFile::open(
                    Path::new(path),
                    max_bytes,
                    settings.max_backups,
                    settings.max_age_days,
                )
                .map_err(|e| anyhow::anyhow!("opening the audit log {path}: {e}"))?,
            )
        };
        let (sender, receiver) = std::sync::mpsc::sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_events(receiver, &mut sink))
            .map_err(|e| anyhow::anyhow!("starting the audit log writer: {e}"))?;
        Ok(Some(Arc::new(Auditor {
            policy: policy.clone(),
            sender,
        })))
    }

    /// Starts auditing a request: `None` if the policy says level None. Writes the
    /// RequestReceived event unless omitted.
    pub fn begin(
        self: &Arc<Self>,
        attrs: &Attributes<'_>,
        request: RequestFacts,
    ) -> Option<Recorder> {
        let decision = self.policy.decide(attrs);
        if decision.level == Level::None {
            return None;
        }
        let object_ref = attrs.resource.as_ref().map(|r| ObjectRef {
            resource: r.resource.to_string(),
            namespace: r.namespace.to_string(),
            name: r.name.to_string(),
            api_group: r.group.to_string(),
            api_version: r.version.to_string(),
            subresource: r.subresource.to_string(),
        });
        let received = micro_time(request.received);
        let event = Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: decision.level,
            audit_id: request.audit_id,
            stage: Stage::RequestReceived,
            request_uri: request.uri,
            verb: attrs.verb.to_string(),
            user: attrs.user.into(),
            impersonated_user: None,
            source_ips: request.source_ips,
            user_agent: request.user_agent,
            object_ref,
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: received.clone(),
            stage_timestamp: received,
            annotations: BTreeMap::new(),
        };
        let body_type = attrs
            .resource
            .as_ref()
            .map(|r| {
                let api_version = if r.group.is_empty() {
                    r.version.to_string()
                } else {
                    format!("{}/{}", r.group, r.version)
                };
                (api_version, r.kind.to_string())
            })
            .unwrap_or_default();
        let recorder = Recorder {
            auditor: self.clone(),
            decision,
            event,
            request_body: Arc::new(Mutex::new(None)),
            handler_annotations: AnnotationSlot::default(),
            body_type,
        };
        recorder.emit(Stage::RequestReceived);
        Some(recorder)
    }
}

/// What the dispatcher knows of a request before serving it.
pub struct RequestFacts {
    pub audit_id: String,
    pub uri: String,
    pub source_ips: Vec<String>,
    pub user_agent: String,
    pub received: SystemTime,
}

/// Where a handler leaves the request body it read and its content type, for
/// `requestObject`.
pub type BodySlot = Arc<Mutex<Option<(bytes::Bytes, Option<String>)>>>;

/// Where the request's handler (its admission plugins) leaves audit annotations, such as
/// PodSecurity's `pod-security.kubernetes.io/audit-violations`.
pub type AnnotationSlot = Arc<Mutex<BTreeMap<String, String>>>;

tokio::task_local! {
    static HANDLER_ANNOTATIONS: AnnotationSlot;
}

/// Adds an annotation to the audit event of the request being served; nothing when the
/// request is not audited.
pub fn annotate(key: &str, value: String) {
    let _ = HANDLER_ANNOTATIONS.try_with(|slot| {
        if let Ok(mut annotations) = slot.lock() {
            annotations.insert(key.to_string(), value);
        }
    });
}

/// Runs `work` (a request's handler) with `slot` receiving its [`annotate`] calls.
pub async fn with_annotations<F: std::future::Future>(
    slot: Option<AnnotationSlot>,
    work: F,
) -> F::Output {
    match slot {
        Some(slot) => HANDLER_ANNOTATIONS.scope(slot, work).await,
        None => work.await,
    }
}

/// One audited request's event in the making.
pub struct Recorder {
    auditor: Arc<Auditor>,
    decision: Decision,
    event: Event,
    request_body: BodySlot,
    handler_annotations: AnnotationSlot,
    /// apiVersion and kind of a protobuf body without type information.
    body_type: (String, String),
}

impl Recorder {
    pub fn level(&self) -> Level {
        self.decision.level
    }

    /// The slot the handler fills with the request body.
    pub fn body_slot(&self) -> BodySlot {
        self.request_body.clone()
    }

    /// The slot the handler's [`annotate`] calls fill.
    pub fn annotation_slot(&self) -> AnnotationSlot {
        self.handler_annotations.clone()
    }

    pub fn impersonated(&mut self, who: &Identity) {
        self.event.impersonated_user = Some(who.into());
    }

    /// Records the authorizer's decision, as kube's annotations.
    pub fn decision(&mut self, allowed: bool, reason: &str) {
        self.event.annotations.insert(
            "authorization.k8s.io/decision".into(),
            if allowed { "allow" } else { "forbid" }.into(),
        );
        self.event
            .annotations
            .insert("authorization.k8s.io/reason".into(), reason.into());
    }

    fn emit(&self, stage: Stage) {
        if self.decision.omit_stages.contains(&stage) {
            return;
        }
        let mut event = self.event.clone();
        event.stage = stage;
        event.stage_timestamp = micro_time(SystemTime::now());
        if stage == Stage::RequestReceived {
            event.response_status = None;
            event.annotations.clear();
        } else if let Ok(annotations) = self.handler_annotations.lock() {
            event
                .annotations
                .extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        // Blocks when the writer is QUEUE events behind (kube's blocking mode); an error
        // means the writer is gone, and the event with it.
        let _ = self.auditor.sender.send(event);
    }

    /// Fills objectRef's missing name and namespace and `requestObject` from the body the
    /// handler read (kube's `LogRequestObject`).
    fn take_request_body(&mut self) {
        let body = self
            .request_body
            .lock()
            .ok()
            .and_then(|mut slot| slot.take());
        let Some((body, content_type)) = body.filter(|(b, _)| !b.is_empty()) else {
            return;
        };
        let needs_name = self
            .event
            .object_ref
            .as_ref()
            .is_some_and(|r| r.name.is_empty() || r.namespace.is_empty());
        if self.decision.level < Level::Request && !needs_name {
            return;
        }
        let content_type = content_type.as_deref();
        let decoded = if content_type.is_some_and(crate::apiserver::http::protobuf::is_protobuf) {
            let (api_version, kind) = &self.body_type;
            crate::apiserver::http::protobuf::decode_object_with_defaults(&body, api_version, kind)
                .ok()
        } else {
            crate::apiserver::storage::objects::decode_body(&body, content_type).ok()
        };
        let Some(mut object) = decoded else {
            return;
        };
        if let Some(object_ref) = &mut self.event.object_ref {
            let meta = object.get("metadata");
            let field = |name: &str| {
                meta.and_then(|m| m.get(name))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            if object_ref.name.is_empty() {
                object_ref.name = field("name");
            }
            if object_ref.namespace.is_empty() {
                object_ref.namespace = field("namespace");
            }
        }
        if self.decision.level >= Level::Request {
            if self.decision.omit_managed_fields {
                omit_managed_fields(&mut object);
            }
            self.event.request_object = Some(object);
        }
    }

    /// Records the response (code; for failures the Status; the object at
    /// RequestResponse) and writes ResponseComplete, or for a long-running request
    /// ResponseStarted now and ResponseComplete when its body ends. A body is buffered
    /// only when it is needed and is not a stream.
    pub async fn finish(
        mut self,
        response: axum::response::Response,
        long_running: bool,
    ) -> axum::response::Response {
        self.take_request_body();
        let code = response.status().as_u16();
        let wants_body = code >= 400
            || (self.decision.level == Level::RequestResponse && !long_running && code != 101);
        let is_json = response
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        let response = if wants_body && is_json {
            use http_body_util::BodyExt;
            let (parts, body) = response.into_parts();
            match body.collect().await {
                Ok(collected) => {
                    let bytes = collected.to_bytes();
                    if let Ok(object) = serde_json::from_slice::<Value>(&bytes) {
                        self.response_object(object);
                    }
                    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
                }
                Err(_) => axum::response::Response::from_parts(parts, axum::body::Body::empty()),
            }
        } else {
            response
        };
        self.set_code(code);
        if long_running {
            self.emit(Stage::ResponseStarted);
            return response
                .map(|body| crate::apiserver::body_with_guard(body, StreamEnd(Some(self))));
        }
        self.emit(Stage::ResponseComplete);
        response
    }

    fn response_object(&mut self, mut object: Value) {
        if object.get("kind").and_then(Value::as_str) == Some("Status")
            && object.get("status").and_then(Value::as_str) != Some("Success")
        {
            let text = |name: &str| object.get(name).and_then(Value::as_str).map(str::to_string);
            self.event.response_status = Some(ResponseStatus {
                metadata: BTreeMap::new(),
                status: text("status"),
                message: text("message"),
                reason: text("reason"),
                details: object.get("details").cloned(),
                code: 0,
            });
        }
        if self.decision.level == Level::RequestResponse {
            if self.decision.omit_managed_fields {
                omit_managed_fields(&mut object);
            }
            self.event.response_object = Some(object);
        }
    }

    fn set_code(&mut self, code: u16) {
        let status = self
            .event
            .response_status
            .get_or_insert_with(|| ResponseStatus {
                metadata: BTreeMap::new(),
                status: None,
                message: None,
                reason: None,
                details: None,
                code,
            });
        status.code = code;
    }

    /// The handler panicked: the Panic stage with kube's 500.
    pub fn panicked(mut self, panic: &str) {
        self.take_request_body();
        self.event.response_status = Some(ResponseStatus {
            metadata: BTreeMap::new(),
            status: Some("Failure".into()),
            message: Some(format!("APIServer panic'd: {panic}")),
            reason: None,
            details: None,
            code: 500,
        });
        self.emit(Stage::Panic);
    }
}

/// Writes its request's ResponseComplete when dropped: held by a streamed body until
/// the stream ends.
struct StreamEnd(Option<Recorder>);

impl Drop for StreamEnd {
    fn drop(&mut self) {
        if let Some(recorder) = self.0.take() {
            recorder.emit(Stage::ResponseComplete);
        }
    }
}

/// Drops `metadata.managedFields` from an object, or from each item of a list.
fn omit_managed_fields(object: &mut Value) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if let Some(items) = object.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
        }
    }
}

enum Sink {
    Stdout,
    File(RotatingFile),
}

fn write_events(receiver: Receiver<Event>, sink: &mut Sink) {
    let mut warned = false;
    while let Ok(event) = receiver.recv() {
        let Ok(mut line) = serde_json::to_vec(&event) else {
            continue;
        };
        line.push(b'\n');
        let result = match sink {
            Sink::Stdout => std::io::stdout().lock().write_all(&line),
            Sink::File(file) => file.write_line(&line),
        };
        if let Err(e) = result
            && !warned
        {
            warned = true;
            tracing::error!(error = %e, "cannot write the audit log; events are being lost");
        }
    }
}

/// An append-only file rotated as lumberjack rotates kube's audit log.
pub struct RotatingFile {
    path: PathBuf,
    file: File,
    size: u64,
    max_bytes: u64,
    max_backups: u32,
    max_age: Duration,
}

fn open_append(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl RotatingFile {
    pub fn open(
        path: &Path,
        max_bytes: u64,
        max_backups: u32,
        max_age_days: u32,
    ) -> std::io::Result<RotatingFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_path_buf(),
            file,
            size,
            max_bytes,
            max_backups,
            max_age: Duration::from_secs(u64::from(max_age_days) * 86_400),
        })
    }

    /// The name's stem and extension, split as lumberjack splits them.
    fn name_parts(&self) -> (String, String) {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match name.rfind('.') {
            Some(dot) if dot > 0 => (name[..dot].to_string(), name[dot..].to_string()),
            _ => (name, String::new()),
        }
    }

    fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let (stem, ext) = self.name_parts();
        let dir = self.dir();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut millis = now.as_millis();
        // Two rotations within a millisecond would share a name: take the next free one.
        let backup = loop {
            let secs = (millis / 1000) as i64;
            let stamp = crate::apiserver::storage::objects::format_rfc3339(secs).replace(':', "-");
            let stamp = stamp.strip_suffix('Z').unwrap_or(&stamp);
            let candidate = dir.join(format!("{stem}-{stamp}.{:03}{ext}", millis % 1000));
            if !candidate.exists() {
                break candidate;
            }
            millis += 1;
        };
        std::fs::rename(&self.path, &backup)?;
        self.file = open_append(&self.path)?;
        self.size = 0;
        self.remove_old(&stem, &ext, &dir);
        Ok(())
    }

    /// Removes backups past `maxbackup` (oldest first) and older than `maxage`.
    fn remove_old(&self, stem: &str, ext: &str, dir: &Path) {
        if self.max_backups == 0 && self.max_age.is_zero() {
            return;
        }
        let prefix = format!("{stem}-");
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut backups: Vec<(String, PathBuf, SystemTime)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let stamp = name.strip_prefix(&prefix)?.strip_suffix(ext)?;
                // 2006-01-02T15-04-05.000
                if stamp.len() != 23 || stamp.as_bytes().get(10) != Some(&b'T') {
                    return None;
                }
                let modified = e.metadata().and_then(|m| m.modified()).ok()?;
                Some((name, e.path(), modified))
            })
            .collect();
        // Newest first: the timestamps sort as text.
        backups.sort_by(|a, b| b.0.cmp(&a.0));
        let now = SystemTime::now();
        for (i, (_, path, modified)) in backups.iter().enumerate() {
            let too_many = self.max_backups > 0 && i >= self.max_backups as usize;
            let too_old = !self.max_age.is_zero()
                && now.duration_since(*modified).unwrap_or_default() > self.max_age;
            if too_many || too_old {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["system:kube-proxy"]
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["special"]
  omitManagedFields: true
- level: Request
  verbs: ["create"]
  resources:
  - group: ""
    resources: ["pods/log", "*/scale"]
  - group: "apps"
    resources: ["deployments/*"]
  namespaces: ["prod"]
  omitStages: ["ResponseComplete"]
- level: Metadata
  nonResourceURLs: ["/healthz*", "/version"]
"#;

    fn who(user: &str, groups: &[&str]) -> Identity {
        Identity {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn level(
        policy: &Policy,
        user: &Identity,
        verb: &str,
        r: Option<[&str; 5]>,
        path: &str,
    ) -> Level {
        let attrs = Attributes {
            user,
            verb,
            resource: r.map(
                |[group, resource, subresource, namespace, name]| ResourceAttributes {
                    group,
                    version: "v1",
                    resource,
                    subresource,
                    namespace,
                    name,
                    kind: "",
                },
            ),
            path,
        };
        policy.decide(&attrs).level
    }

    #[test]
    fn first_matching_rule_decides() {
        let p = Policy::parse(POLICY).expect("policy");
        let jane = who("jane", &["dev"]);
        let proxy = who("system:kube-proxy", &[]);
        let secret = Some(["", "secrets", "", "default", "s"]);
        assert_eq!(level(&p, &jane, "get", secret, "/api"), Level::Metadata);
        assert_eq!(level(&p, &proxy, "get", secret, "/api"), Level::None);
        // resourceNames narrow the rule.
        let special = Some(["", "configmaps", "", "default", "special"]);
        let other = Some(["", "configmaps", "", "default", "other"]);
        assert_eq!(
            level(&p, &jane, "get", special, "/"),
            Level::RequestResponse
        );
        assert_eq!(level(&p, &jane, "get", other, "/"), Level::None);
        // Subresource forms, namespaces and verbs.
        let log = Some(["", "pods", "log", "prod", "p"]);
        assert_eq!(level(&p, &jane, "create", log, "/"), Level::Request);
        assert_eq!(level(&p, &jane, "get", log, "/"), Level::None);
        let log_dev = Some(["", "pods", "log", "dev", "p"]);
        assert_eq!(level(&p, &jane, "create", log_dev, "/"), Level::None);
        let pod = Some(["", "pods", "", "prod", "p"]);
        assert_eq!(level(&p, &jane, "create", pod, "/"), Level::None);
        let scale = Some(["", "replicationcontrollers", "scale", "prod", "r"]);
        assert_eq!(level(&p, &jane, "create", scale, "/"), Level::Request);
        let deploy = Some(["apps", "deployments", "", "prod", "d"]);
        assert_eq!(level(&p, &jane, "create", deploy, "/"), Level::Request);
        let deploy_status = Some(["apps", "deployments", "status", "prod", "d"]);
        assert_eq!(
            level(&p, &jane, "create", deploy_status, "/"),
            Level::Request
        );
        // Non-resource URLs, with the `*` suffix.
        assert_eq!(
            level(&p, &jane, "get", None, "/healthz/etcd"),
            Level::Metadata
        );
        assert_eq!(level(&p, &jane, "get", None, "/version"), Level::Metadata);
        assert_eq!(level(&p, &jane, "get", None, "/version/x"), Level::None);
        // A resource rule never matches a non-resource request.
        assert_eq!(
            level(&p, &jane, "get", None, "/api/v1/secrets"),
            Level::None
        );
    }

    #[test]
    fn groups_and_stages_and_managed_fields() {
        let p = Policy::parse(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitManagedFields: true\nomitStages: [RequestReceived]\nrules:\n- level: Request\n  userGroups: [admins]\n  omitStages: [ResponseStarted]\n  omitManagedFields: false\n- level: Metadata\n",
        )
        .expect("policy");
        let admin = who("a", &["admins"]);
        let attrs = Attributes {
            user: &admin,
            verb: "list",
            resource: None,
            path: "/api",
        };
        let d = p.decide(&attrs);
        assert_eq!(d.level, Level::Request);
        assert_eq!(
            d.omit_stages,
            vec![Stage::RequestReceived, Stage::ResponseStarted]
        );
        assert!(!d.omit_managed_fields);
        let other = who("b", &[]);
        let d = p.decide(&Attributes {
            user: &other,
            ..attrs
        });
        assert_eq!(d.level, Level::Metadata);
        assert!(d.omit_managed_fields);
    }

    #[test]
    fn bad_policies_are_refused() {
        for bad in [
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  user: [x]\n",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nfoo: 1\nrules:\n- level: None\n",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  omitStages: [Sometimes]\n",
            "apiVersion: v1\nkind: Policy\nrules:\n- level: None\n",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: [/a]\n  namespaces: [x]\n",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: [healthz]\n",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: ['/a*/b']\n",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  resources:\n  - resourceNames: [x]\n",
            "not: [yaml",
        ] {
            assert!(Policy::parse(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn event_serializes_as_kube() {
        let event = Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::Metadata,
            audit_id: "6a2e7c4b-1a1b-4c1d-8e2f-0a1b2c3d4e5f".into(),
            stage: Stage::ResponseComplete,
            request_uri: "/api/v1/namespaces/default/secrets/s".into(),
            verb: "get".into(),
            user: UserInfo::from(&who("jane", &["system:authenticated"])),
            impersonated_user: None,
            source_ips: vec!["10.0.0.1".into()],
            user_agent: "kubectl/v1.32.0".into(),
            object_ref: Some(ObjectRef {
                resource: "secrets".into(),
                namespace: "default".into(),
                name: "s".into(),
                api_version: "v1".into(),
                ..ObjectRef::default()
            }),
            response_status: Some(ResponseStatus {
                metadata: BTreeMap::new(),
                status: None,
                message: None,
                reason: None,
                details: None,
                code: 200,
            }),
            request_object: None,
            response_object: None,
            request_received_timestamp: micro_time(UNIX_EPOCH + Duration::from_micros(1_500_000)),
            stage_timestamp: "1970-01-01T00:00:02.000000Z".into(),
            annotations: BTreeMap::from([(
                "authorization.k8s.io/decision".to_string(),
                "allow".to_string(),
            )]),
        };
        let line = serde_json::to_string(&event).expect("json");
        assert_eq!(
            line,
            concat!(
                r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","#,
                r#""auditID":"6a2e7c4b-1a1b-4c1d-8e2f-0a1b2c3d4e5f","stage":"ResponseComplete","#,
                r#""requestURI":"/api/v1/namespaces/default/secrets/s","verb":"get","#,
                r#""user":{"username":"jane","groups":["system:authenticated"]},"#,
                r#""sourceIPs":["10.0.0.1"],"userAgent":"kubectl/v1.32.0","#,
                r#""objectRef":{"resource":"secrets","namespace":"default","name":"s","apiVersion":"v1"},"#,
                r#""responseStatus":{"metadata":{},"code":200},"#,
                r#""requestReceivedTimestamp":"1970-01-01T00:00:01.500000Z","#,
                r#""stageTimestamp":"1970-01-01T00:00:02.000000Z","#,
                r#""annotations":{"authorization.k8s.io/decision":"allow"}}"#
            )
        );
    }

    #[test]
    fn managed_fields_are_omitted_from_objects_and_list_items() {
        let mut list = serde_json::json!({"metadata": {"managedFields": [1]},
            "items": [{"metadata": {"name": "a", "managedFields": [1]}}]});
        omit_managed_fields(&mut list);
        assert_eq!(
            list,
            serde_json::json!({"metadata": {}, "items": [{"metadata": {"name": "a"}}]})
        );
    }

    #[test]
    fn file_rotates_at_max_size_and_keeps_max_backups() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("audit.log");
        let mut file = RotatingFile::open(&path, 100, 2, 0).expect("open");
        let line = [b'x'; 39];
        for _ in 0..10 {
            file.write_line(&line).expect("write");
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        // 2 lines a file: 5 files made, the current one and 2 backups kept.
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names.contains(&"audit.log".to_string()));
        for backup in names.iter().filter(|n| *n != "audit.log") {
            // audit-2006-01-02T15-04-05.000.log
            let stamp = backup
                .strip_prefix("audit-")
                .and_then(|s| s.strip_suffix(".log"))
                .expect("lumberjack's name");
            assert_eq!(stamp.len(), 23, "{backup}");
            assert_eq!(&stamp[10..11], "T");
            assert!(!stamp.contains(':'));
        }
        let current = std::fs::metadata(&path).expect("current");
        assert_eq!(current.len(), 78);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(current.permissions().mode() & 0o777, 0o600);
    }
}
