//! Object mechanics shared by every handler: decoding request bodies, type checks
//! through k8s-openapi's typed structs (wrong types, unknown fields), name
//! validation, server-set metadata (uid, creationTimestamp, generation), defaulting
//! of built-in kinds as Kubernetes does, and the validation that answers 422.

use serde_json::{Map, Value, json};

use super::registry::ResourceInfo;
use crate::apiserver::http::status::{ApiError, StatusCause};

/// Current time as RFC 3339 (seconds precision, UTC), as metav1.Time serializes.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    format_rfc3339(secs)
}

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_rfc3339(secs: i64) -> String {
    crate::apiserver::http::table::duration::format_rfc3339(secs)
}

/// Random bytes from the kernel.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    // One getrandom(2) call; opening /dev/urandom for each uid was three syscalls per
    // create. The file is the fallback where getrandom is unavailable.
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut buf).is_err()
        && let Ok(mut f) = std::fs::File::open("/dev/urandom")
    {
        let _ = std::io::Read::read_exact(&mut f, &mut buf);
    }
    buf
}

/// A random (version 4) UUID, as Kubernetes uids are.
pub fn new_uid() -> String {
    let mut b = random_bytes::<16>();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The 5-character random suffix `generateName` gets (kube's alphabet, no vowels).
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    random_bytes::<5>()
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Decodes a request body (JSON, or YAML when the content type says so).
pub fn decode_body(body: &[u8], content_type: Option<&str>) -> Result<Value, ApiError> {
    let media = content_type
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim();
    let value: Value = match media {
        "application/yaml" | "application/apply-patch+yaml" => serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?,
        "application/json" | "" | "*/*" | "application/json-patch+json" | "application/merge-patch+json"
        | "application/strategic-merge-patch+json" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/apply-patch+yaml: {e}"))
        })?,
        other => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {other})"
            )));
        }
    };
    Ok(value)
}

fn dns1123_subdomain(name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    let ok = !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    (!ok).then(|| "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into())
}

fn dns1123_label(name: &str) -> Option<String> {
    if name.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    (!ok).then(|| "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into())
}

fn dns1035_label(name: &str) -> Option<String> {
    if name.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    let ok = name.bytes().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !name.ends_with('-');
    (!ok).then(|| "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".into())
}

/// Checks an object name as Kubernetes does for this resource; the message of the
/// first failure.
pub fn name_problem(info: &ResourceInfo, name: &str) -> Option<String> {
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "namespaces") => dns1123_label(name),
        ("", "services") => dns1035_label(name),
        ("rbac.authorization.k8s.io", _) => {
            crate::names::path_segment_name(name).into_iter().next()
        }
        _ if info.custom => dns1123_subdomain(name),
        _ => dns1123_subdomain(name),
    }
}

pub fn invalid_name(info: &ResourceInfo, name: &str, problem: String) -> ApiError {
    ApiError::invalid(
        &info.group,
        &info.kind,
        name,
        vec![StatusCause {
            reason: Some("FieldValueInvalid".into()),
            message: Some(format!("Invalid value: {name:?}: {problem}")),
            field: Some("metadata.name".into()),
        }],
    )
}

/// Runs `f` with the object deserialized as its k8s-openapi type (built-in kinds only).
macro_rules! typed_roundtrip {
    ($info:expr, $value:expr, { $( ($g:literal, $k:literal) => $t:ty ),* $(,)? }) => {
        match ($info.group.as_str(), $info.kind.as_str()) {
            // Deserializing from `&Value` borrows the tree instead of cloning it first.
            $( ($g, $k) => Some(<$t as serde::Deserialize>::deserialize($value).and_then(|typed| serde_json::to_value(typed))), )*
            _ => None,
        }
    };
}

/// Decodes `value` as its built-in type and re-encodes it. `None` for kinds without a
/// Rust type (custom resources).
fn roundtrip(info: &ResourceInfo, value: &Value) -> Option<Result<Value, serde_json::Error>> {
    use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core};
    use k8s_openapi::api::{coordination::v1 as coord, discovery::v1 as disc, rbac::v1 as rbac};
    typed_roundtrip!(info, value, {
        ("", "Namespace") => core::Namespace,
        ("", "Pod") => core::Pod,
        ("", "Service") => core::Service,
        ("", "Endpoints") => core::Endpoints,
        ("", "ConfigMap") => core::ConfigMap,
        ("", "Secret") => core::Secret,
        ("", "ServiceAccount") => core::ServiceAccount,
        ("", "Node") => core::Node,
        ("", "Event") => core::Event,
        ("", "ReplicationController") => core::ReplicationController,
        ("", "PersistentVolumeClaim") => core::PersistentVolumeClaim,
        ("", "PersistentVolume") => core::PersistentVolume,
        ("", "LimitRange") => core::LimitRange,
        ("", "ResourceQuota") => core::ResourceQuota,
        ("", "PodTemplate") => core::PodTemplate,
        ("apps", "Deployment") => apps::Deployment,
        ("apps", "ReplicaSet") => apps::ReplicaSet,
        ("apps", "StatefulSet") => apps::StatefulSet,
        ("apps", "DaemonSet") => apps::DaemonSet,
        ("apps", "ControllerRevision") => apps::ControllerRevision,
        ("batch", "Job") => batch::Job,
        ("batch", "CronJob") => batch::CronJob,
        ("autoscaling", "HorizontalPodAutoscaler") => k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler,
        ("discovery.k8s.io", "EndpointSlice") => disc::EndpointSlice,
        ("coordination.k8s.io", "Lease") => coord::Lease,
        ("events.k8s.io", "Event") => k8s_openapi::api::events::v1::Event,
        ("rbac.authorization.k8s.io", "Role") => rbac::Role,
        ("rbac.authorization.k8s.io", "RoleBinding") => rbac::RoleBinding,
        ("rbac.authorization.k8s.io", "ClusterRole") => rbac::ClusterRole,
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => rbac::ClusterRoleBinding,
        ("scheduling.k8s.io", "PriorityClass") => k8s_openapi::api::scheduling::v1::PriorityClass,
        ("policy", "PodDisruptionBudget") => k8s_openapi::api::policy::v1::PodDisruptionBudget,
        ("networking.k8s.io", "NetworkPolicy") => k8s_openapi::api::networking::v1::NetworkPolicy,
        ("networking.k8s.io", "Ingress") => k8s_openapi::api::networking::v1::Ingress,
        ("networking.k8s.io", "IngressClass") => k8s_openapi::api::networking::v1::IngressClass,
        ("storage.k8s.io", "StorageClass") => k8s_openapi::api::storage::v1::StorageClass,
        ("node.k8s.io", "RuntimeClass") => k8s_openapi::api::node::v1::RuntimeClass,
        ("certificates.k8s.io", "CertificateSigningRequest") => k8s_openapi::api::certificates::v1::CertificateSigningRequest,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        ("apiregistration.k8s.io", "APIService") => k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService,
    })
}

/// Field paths present in `original` but lost in `roundtrip` (unknown fields).
fn unknown_fields(original: &Value, roundtrip: &Value, path: &str, out: &mut Vec<String>) {
    match (original, roundtrip) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match b.get(k) {
                    Some(bv) => unknown_fields(v, bv, &p, out),
                    None if v.is_null() => {}
                    // Free-form maps (labels, data, ...) round-trip whole, so a missing
                    // key really is a field the type does not have.
                    None => out.push(p),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (av, bv)) in a.iter().zip(b).enumerate() {
                unknown_fields(av, bv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// How `fieldValidation` asks unknown fields to be handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other}. Valid values are \"Ignore\", \"Warn\", \"Strict\""
            ))),
        }
    }
}

/// Type-checks a built-in object, drops unknown fields (as the Go decoder does) and
/// reports them per `validation`: an error (Strict) or warnings (Warn).
pub fn type_check(
    info: &ResourceInfo,
    value: &mut Value,
    validation: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let Some(result) = roundtrip(info, value) else {
        return Ok(Vec::new());
    };
    let typed = result.map_err(|e| {
        ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            info.kind, info.version, info.kind
        ))
    })?;
    let mut unknown = Vec::new();
    unknown_fields(value, &typed, "", &mut unknown);
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    match validation {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
        FieldValidation::Warn | FieldValidation::Ignore => {
            prune(value, &typed);
            Ok(if validation == FieldValidation::Warn {
                unknown
                    .into_iter()
                    .map(|f| format!("unknown field \"{f}\""))
                    .collect()
            } else {
                Vec::new()
            })
        }
    }
}

/// Removes from `value` the object keys `typed` does not have.
fn prune(value: &mut Value, typed: &Value) {
    match (value, typed) {
        (Value::Object(a), Value::Object(b)) => {
            a.retain(|k, v| v.is_null() || b.contains_key(k));
            for (k, v) in a.iter_mut() {
                if let Some(bv) = b.get(k) {
                    prune(v, bv);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (av, bv) in a.iter_mut().zip(b) {
                prune(av, bv);
            }
        }
        _ => {}
    }
}

fn obj<'a>(value: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let map = value.as_object_mut()?;
    if !map.get(key).is_some_and(Value::is_object) {
        map.insert(key.to_string(), json!({}));
    }
    map.get_mut(key)?.as_object_mut()
}

fn set_default(map: &mut Map<String, Value>, key: &str, default: Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_string(), default);
    }
}

fn default_probe(probe: Option<&mut Value>) {
    let Some(probe) = probe.and_then(Value::as_object_mut) else {
        return;
    };
    set_default(probe, "timeoutSeconds", json!(1));
    set_default(probe, "periodSeconds", json!(10));
    set_default(probe, "successThreshold", json!(1));
    set_default(probe, "failureThreshold", json!(3));
    if let Some(http) = probe.get_mut("httpGet").and_then(Value::as_object_mut) {
        set_default(http, "scheme", json!("HTTP"));
        set_default(http, "path", json!("/"));
    }
}

fn default_container(container: &mut Value) {
    let Some(c) = container.as_object_mut() else {
        return;
    };
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    set_default(c, "resources", json!({}));
    if c.get("imagePullPolicy").is_none_or(Value::is_null) {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let last = image.rsplit('/').next().unwrap_or("");
        let latest = !last.contains(':') || last.ends_with(":latest");
        let digest = image.contains('@');
        c.insert(
            "imagePullPolicy".into(),
            json!(if latest && !digest {
                "Always"
            } else {
                "IfNotPresent"
            }),
        );
    }
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(port, "protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        default_probe(c.get_mut(probe));
    }
}

/// Pod spec defaults (SetDefaults_PodSpec and friends).
/// kube's DefaultTolerationSeconds admission: a pod without a toleration covering
/// the NoExecute `not-ready` / `unreachable` taints (same key or an empty key, with
/// effect NoExecute or none) gets one for each, `tolerationSeconds: 300`, so its
/// controller replaces it five minutes after its node fails.
fn default_toleration_seconds(spec: &mut Map<String, Value>) {
    const DEFAULT_SECONDS: i64 = 300;
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = tolerations.as_array_mut() else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let covered = list.iter().any(|t| {
            let t_key = t.get("key").and_then(Value::as_str).unwrap_or("");
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (t_key == key || t_key.is_empty()) && (effect == "NoExecute" || effect.is_empty())
        });
        if !covered {
            list.push(
                json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": DEFAULT_SECONDS}),
            );
        }
    }
}

fn default_pod_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "enableServiceLinks", json!(true));
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            containers.iter_mut().for_each(default_container);
        }
    }
    if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for volume in volumes.iter_mut().filter_map(Value::as_object_mut) {
            for source in ["configMap", "secret"] {
                if let Some(s) = volume.get_mut(source).and_then(Value::as_object_mut) {
                    set_default(s, "defaultMode", json!(420));
                }
            }
            if let Some(host) = volume.get_mut("hostPath").and_then(Value::as_object_mut) {
                set_default(host, "type", json!(""));
            }
        }
    }
}

fn default_template(value: &mut Value, path: &[&str]) {
    let mut cur = value;
    for key in path {
        match cur.get_mut(*key) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(template) = cur.as_object_mut() {
        if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
            default_pod_spec(spec);
        }
        if let Some(meta) = template.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|_, v| !v.is_null());
        }
    }
}

/// kube's `generateSelector` for a Job without `manualSelector: true`: the template
/// gets `batch.kubernetes.io/controller-uid`, `batch.kubernetes.io/job-name` and
/// the legacy `controller-uid` / `job-name` labels (a label the user set is kept),
/// and the selector matches on `batch.kubernetes.io/controller-uid`. Needs the uid,
/// so it only happens once the create path has assigned one.
fn generate_job_selector(value: &mut Value, name: &str) {
    let Some(uid) = value
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(String::from)
    else {
        return;
    };
    let Some(template) = value
        .pointer_mut("/spec/template")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let meta = template.entry("metadata").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if !labels.is_object() {
            *labels = json!({});
        }
        if let Some(labels) = labels.as_object_mut() {
            for key in ["job-name", "batch.kubernetes.io/job-name"] {
                labels.entry(key).or_insert_with(|| json!(name));
            }
            for key in ["controller-uid", "batch.kubernetes.io/controller-uid"] {
                labels.entry(key).or_insert_with(|| json!(uid));
            }
        }
    }
    if let Some(spec) = obj(value, "spec") {
        let selector = spec.entry("selector").or_insert_with(|| json!({}));
        if !selector.is_object() {
            *selector = json!({});
        }
        if let Some(selector) = selector.as_object_mut() {
            let match_labels = selector.entry("matchLabels").or_insert_with(|| json!({}));
            if !match_labels.is_object() {
                *match_labels = json!({});
            }
            if let Some(m) = match_labels.as_object_mut() {
                m.entry("batch.kubernetes.io/controller-uid")
                    .or_insert_with(|| json!(uid));
            }
        }
    }
}

/// SetDefaults_ReplicationController: an empty selector, and empty object labels,
/// default to the template's labels.
fn default_replication_controller_labels(value: &mut Value) {
    let Some(labels) = value
        .pointer("/spec/template/metadata/labels")
        .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        .cloned()
    else {
        return;
    };
    let empty = |v: Option<&Value>| v.is_none_or(|v| v.as_object().is_none_or(|m| m.is_empty()));
    if empty(value.pointer("/spec/selector"))
        && let Some(spec) = obj(value, "spec")
    {
        spec.insert("selector".into(), labels.clone());
    }
    if empty(value.pointer("/metadata/labels"))
        && let Some(meta) = obj(value, "metadata")
    {
        meta.insert("labels".into(), labels);
    }
}

/// What kube-apiserver's mutating admission plugins fill in, as opposed to the type's
/// defaulting: a pod's service account (ServiceAccount), `priority` and
/// `preemptionPolicy` (Priority) and the NoExecute tolerations
/// (DefaultTolerationSeconds). Kept apart from [`apply_defaults`] because a creator
/// owns defaulted fields in `managedFields` but not what admission adds.
pub fn admission_defaults(info: &ResourceInfo, value: &mut Value) {
    if info.custom || !info.group.is_empty() || info.kind != "Pod" {
        return;
    }
    // The ServiceAccount admission leaves mirror pods alone.
    let mirror = value
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some();
    let Some(spec) = obj(value, "spec") else {
        return;
    };
    if !mirror {
        set_default(spec, "serviceAccountName", json!("default"));
        let sa = spec
            .get("serviceAccountName")
            .cloned()
            .unwrap_or(json!("default"));
        set_default(spec, "serviceAccount", sa);
    }
    set_default(spec, "priority", json!(0));
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    default_toleration_seconds(spec);
}

/// Applies Kubernetes's defaults for built-in kinds (visible in `kubectl get -o yaml`).
pub fn apply_defaults(info: &ResourceInfo, value: &mut Value) {
    if info.custom {
        return;
    }
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Namespace") => {
            if let Some(labels) = obj(
                value.get_mut("metadata").unwrap_or(&mut Value::Null),
                "labels",
            ) {
                labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            if let Some(spec) = obj(value, "spec") {
                set_default(spec, "finalizers", json!(["kubernetes"]));
            }
            if let Some(status) = obj(value, "status") {
                set_default(status, "phase", json!("Active"));
            }
        }
        ("", "Pod") => {
            if let Some(spec) = obj(value, "spec") {
                default_pod_spec(spec);
            }
            let qos = qos_class(value);
            if let Some(status) = obj(value, "status") {
                set_default(status, "phase", json!("Pending"));
                set_default(status, "qosClass", json!(qos));
            }
        }
        ("apps", "Deployment") => {
            if let Some(spec) = obj(value, "spec") {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(spec, "progressDeadlineSeconds", json!(600));
                let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
                if let Some(s) = strategy.as_object_mut() {
                    set_default(s, "type", json!("RollingUpdate"));
                    if s.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                        let ru = s.entry("rollingUpdate").or_insert_with(|| json!({}));
                        if let Some(ru) = ru.as_object_mut() {
                            set_default(ru, "maxUnavailable", json!("25%"));
                            set_default(ru, "maxSurge", json!("25%"));
                        }
                    }
                }
            }
            default_template(value, &["spec", "template"]);
        }
        ("apps", "ReplicaSet") | ("", "ReplicationController") => {
            if let Some(spec) = obj(value, "spec") {
                set_default(spec, "replicas", json!(1));
                if info.kind == "ReplicationController" {
                    set_default(spec, "minReadySeconds", json!(0));
                }
            }
            if info.kind == "ReplicationController" {
                default_replication_controller_labels(value);
            }
            default_template(value, &["spec", "template"]);
        }
        ("apps", "StatefulSet") => {
            if let Some(spec) = obj(value, "spec") {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "podManagementPolicy", json!("OrderedReady"));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(
                    spec,
                    "updateStrategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
                );
                set_default(
                    spec,
                    "persistentVolumeClaimRetentionPolicy",
                    json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                );
            }
            default_template(value, &["spec", "template"]);
        }
        ("apps", "DaemonSet") => {
            if let Some(spec) = obj(value, "spec") {
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(
                    spec,
                    "updateStrategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
                );
            }
            default_template(value, &["spec", "template"]);
        }
        ("batch", "Job") => {
            let manual = value
                .pointer("/spec/manualSelector")
                .and_then(Value::as_bool)
                == Some(true);
            if !manual {
                generate_job_selector(value, &name);
            }
            if let Some(spec) = obj(value, "spec") {
                // With neither set, completions and parallelism default to 1; a work
                // queue (parallelism only) keeps completions unset.
                if spec.get("completions").is_none_or(Value::is_null)
                    && spec.get("parallelism").is_none_or(Value::is_null)
                {
                    spec.insert("completions".into(), json!(1));
                }
                set_default(spec, "parallelism", json!(1));
                set_default(spec, "backoffLimit", json!(6));
                set_default(spec, "completionMode", json!("NonIndexed"));
                set_default(spec, "suspend", json!(false));
                set_default(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
            }
            default_template(value, &["spec", "template"]);
            // SetDefaults_Job: a Job without labels takes its template's.
            let template_labels = value.pointer("/spec/template/metadata/labels").cloned();
            if let Some(labels) =
                template_labels.filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
                && value
                    .pointer("/metadata/labels")
                    .is_none_or(|l| l.as_object().is_none_or(|m| m.is_empty()))
                && let Some(meta) = obj(value, "metadata")
            {
                meta.insert("labels".into(), labels);
            }
        }
        ("", "PodTemplate") => default_template(value, &["template"]),
        ("batch", "CronJob") => {
            if let Some(spec) = obj(value, "spec") {
                set_default(spec, "concurrencyPolicy", json!("Allow"));
                set_default(spec, "suspend", json!(false));
                set_default(spec, "successfulJobsHistoryLimit", json!(3));
                set_default(spec, "failedJobsHistoryLimit", json!(1));
            }
            default_template(value, &["spec", "jobTemplate", "spec", "template"]);
        }
        ("", "Service") => {
            if let Some(spec) = obj(value, "spec") {
                set_default(spec, "type", json!("ClusterIP"));
                set_default(spec, "sessionAffinity", json!("None"));
                set_default(spec, "internalTrafficPolicy", json!("Cluster"));
                let ty = spec
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("ClusterIP")
                    .to_string();
                if ty == "NodePort" || ty == "LoadBalancer" {
                    set_default(spec, "externalTrafficPolicy", json!("Cluster"));
                }
                if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                    for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                        set_default(port, "protocol", json!("TCP"));
                        if let Some(p) = port.get("port").cloned() {
                            set_default(port, "targetPort", p);
                        }
                    }
                }
            }
            if let Some(status) = obj(value, "status") {
                set_default(status, "loadBalancer", json!({}));
            }
        }
        ("", "Secret") => {
            if let Some(map) = value.as_object_mut() {
                set_default(map, "type", json!("Opaque"));
                merge_string_data(map);
            }
        }
        _ => {}
    }
}

/// kube's conversion of a written Secret: `stringData` is write-only, each of its entries
/// replaces `data`'s entry of the same key (base64-encoded), and it is never stored, so
/// every consumer of the Secret finds its keys in `data`.
fn merge_string_data(secret: &mut Map<String, Value>) {
    use base64::Engine as _;
    let Some(strings) = secret.remove("stringData") else {
        return;
    };
    let Some(strings) = strings.as_object() else {
        return;
    };
    if strings.is_empty() {
        return;
    }
    let data = secret.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (key, text) in strings {
            let encoded =
                base64::engine::general_purpose::STANDARD.encode(text.as_str().unwrap_or(""));
            data.insert(key.clone(), json!(encoded));
        }
    }
}

/// The QoS class of a pod (BestEffort, Burstable, Guaranteed).
fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let requests = c.pointer("/resources/requests").and_then(Value::as_object);
        let limits = c.pointer("/resources/limits").and_then(Value::as_object);
        if requests.is_some_and(|r| !r.is_empty()) || limits.is_some_and(|l| !l.is_empty()) {
            any = true;
        }
        for resource in ["cpu", "memory"] {
            let limit = limits.and_then(|l| l.get(resource));
            let request = requests.and_then(|r| r.get(resource)).or(limit);
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::storage::registry::Registry;

    #[test]
    fn time_and_ids() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        assert_eq!(name_suffix().len(), 5);
    }

    #[test]
    fn secret_string_data_is_merged_into_data_and_never_stored() {
        let r = Registry::new();
        let secrets = r.find("", "v1", "secrets").unwrap();
        let mut secret = serde_json::json!({"metadata": {"name": "s"},
            "data": {"a": "b2xk", "keep": "eA=="},
            "stringData": {"a": "new", "plain": "text"}});
        apply_defaults(&secrets, &mut secret);
        assert_eq!(
            secret,
            serde_json::json!({"metadata": {"name": "s"}, "type": "Opaque",
                "data": {"a": "bmV3", "keep": "eA==", "plain": "dGV4dA=="}})
        );
    }

    #[test]
    fn names() {
        let r = Registry::new();
        let cm = r.find("", "v1", "configmaps").unwrap();
        assert!(name_problem(&cm, "good.name-1").is_none());
        assert!(name_problem(&cm, "Bad_Name").is_some());
        assert!(name_problem(&cm, &"a".repeat(254)).unwrap().contains("253"));
        let svc = r.find("", "v1", "services").unwrap();
        assert!(name_problem(&svc, "1abc").is_some());
        let ns = r.find("", "v1", "namespaces").unwrap();
        assert!(name_problem(&ns, "a.b").is_some());
    }

    #[test]
    fn strict_and_warn_unknown_fields() {
        let r = Registry::new();
        let cm = r.find("", "v1", "configmaps").unwrap();
        let mut v = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a":"b"},"bogus":1});
        let err = type_check(&cm, &mut v.clone(), FieldValidation::Strict).unwrap_err();
        assert_eq!(
            err.message,
            "strict decoding error: unknown field \"bogus\""
        );
        let warnings = type_check(&cm, &mut v, FieldValidation::Warn).unwrap();
        assert_eq!(warnings, vec!["unknown field \"bogus\"".to_string()]);
        assert!(v.get("bogus").is_none());
        let mut wrong =
            json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a":1}});
        assert_eq!(
            type_check(&cm, &mut wrong, FieldValidation::Strict)
                .unwrap_err()
                .code
                .as_u16(),
            400
        );
    }

    #[test]
    fn job_selector_and_labels_are_generated_unless_manual() {
        let r = Registry::new();
        let jobs = r.find("batch", "v1", "jobs").unwrap();
        let mut job = json!({"metadata": {"name": "pi", "uid": "u-1"},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "perl"}]}}}});
        apply_defaults(&jobs, &mut job);
        let labels = &job["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["batch.kubernetes.io/controller-uid"], "u-1");
        assert_eq!(labels["controller-uid"], "u-1");
        assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
        assert_eq!(labels["job-name"], "pi");
        assert_eq!(
            job["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        assert_eq!(job["metadata"]["labels"], *labels);
        assert_eq!(job["spec"]["completions"], 1);
        // A work queue (parallelism only) keeps completions unset.
        let mut queue = json!({"metadata": {"name": "q", "uid": "u-2"},
            "spec": {"parallelism": 3, "template": {"spec": {"containers": []}}}});
        apply_defaults(&jobs, &mut queue);
        assert!(queue["spec"].get("completions").is_none());
        // manualSelector: nothing generated, the user's selector kept.
        let mut manual = json!({"metadata": {"name": "m", "uid": "u-3"},
            "spec": {"manualSelector": true, "selector": {"matchLabels": {"x": "y"}},
                     "template": {"metadata": {"labels": {"x": "y"}}, "spec": {"containers": []}}}});
        apply_defaults(&jobs, &mut manual);
        assert_eq!(
            manual["spec"]["selector"],
            json!({"matchLabels": {"x": "y"}})
        );
        assert_eq!(
            manual["spec"]["template"]["metadata"]["labels"],
            json!({"x": "y"})
        );
        assert_eq!(manual["spec"]["manualSelector"], true);
    }

    #[test]
    fn replication_controller_selector_defaults_to_template_labels() {
        let r = Registry::new();
        let rcs = r.find("", "v1", "replicationcontrollers").unwrap();
        let mut rc = json!({"metadata": {"name": "rc"},
            "spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}}});
        apply_defaults(&rcs, &mut rc);
        assert_eq!(rc["spec"]["selector"], json!({"app": "web"}));
        assert_eq!(rc["metadata"]["labels"], json!({"app": "web"}));
        let mut own = json!({"metadata": {"name": "rc", "labels": {"team": "a"}},
            "spec": {"selector": {"app": "web"},
                     "template": {"metadata": {"labels": {"app": "web", "v": "1"}}, "spec": {"containers": []}}}});
        apply_defaults(&rcs, &mut own);
        assert_eq!(own["spec"]["selector"], json!({"app": "web"}));
        assert_eq!(own["metadata"]["labels"], json!({"team": "a"}));
    }

    #[test]
    fn pod_defaults() {
        let r = Registry::new();
        let pods = r.find("", "v1", "pods").unwrap();
        let mut pod =
            json!({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"nginx"}]}});
        apply_defaults(&pods, &mut pod);
        assert_eq!(pod["spec"].get("tolerations"), None, "admission adds them");
        admission_defaults(&pods, &mut pod);
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["status"]["qosClass"], "BestEffort");
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
        assert!(crate::apiserver::admission::validation::validate(&pods, &pod, None).is_empty());
        // A pod's own toleration for a key wins; a NoSchedule one does not count.
        let mut own = json!({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"nginx"}],
            "tolerations":[{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":5},
                           {"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoSchedule"}]}});
        apply_defaults(&pods, &mut own);
        admission_defaults(&pods, &mut own);
        let tolerations = own["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(tolerations.len(), 3);
        assert_eq!(tolerations[2]["key"], "node.kubernetes.io/not-ready");
        assert_eq!(tolerations[2]["tolerationSeconds"], 300);
        // Tolerating everything (empty key, no effect) needs no defaults.
        let mut all = json!({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"nginx"}],
            "tolerations":[{"operator":"Exists"}]}});
        apply_defaults(&pods, &mut all);
        admission_defaults(&pods, &mut all);
        assert_eq!(all["spec"]["tolerations"].as_array().unwrap().len(), 1);
        let bad = json!({"metadata":{"name":"p"},"spec":{"containers":[]}});
        assert_eq!(
            crate::apiserver::admission::validation::validate(&pods, &bad, None)[0]
                .field
                .as_deref(),
            Some("spec.containers")
        );
    }
}
