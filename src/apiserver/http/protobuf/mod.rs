//! Decoding Kubernetes protobuf request bodies into the JSON the rest of the
//! API server works with.
//!
//! Real `kubectl` sends the bodies of its typed commands (`create deployment`,
//! `create secret`, `create token`, `auth can-i`, `certificate approve`,
//! `autoscale`, ...) as `application/vnd.kubernetes.protobuf`, with no JSON
//! fallback. This module turns such a body into the `serde_json::Value` that
//! kube-apiserver's own JSON encoding of the decoded Go object would be.
//!
//! Owns: the wire envelope (`k8s\0` + `runtime.Unknown`), the table of
//! registered kinds, and the protobuf → JSON conversion. It is pure: no I/O,
//! no store, no HTTP types; callers map [`ProtobufError`] to a `metav1.Status`
//! (see [`ProtobufError::http_status`]).
//!
//! # How it works
//!
//! 1. The envelope is decoded with `k8s-pb`'s `runtime::Unknown`; its
//!    `typeMeta` selects the message type from the `KINDS` table.
//! 2. The object bytes are decoded with `prost` into the `k8s-pb` struct. Those
//!    structs have no serde support, but prost derives `Debug` for every
//!    message, printing field names, nested message type names, `Option`s,
//!    lists and maps. That text is parsed back into a small tree (`Dbg`).
//! 3. The tree is walked alongside the JSON schema of the same kind from
//!    `k8s-openapi` (generated at build time, `openapi::schemas`), which supplies the exact
//!    JSON field names (`podIP`, `hostIPC`, `$ref`, `x-kubernetes-...`), which
//!    fields are `bytes` (base64 in JSON) and which fields are required.
//!    Well-known message types (`Time`, `MicroTime`, `Duration`, `Quantity`,
//!    `IntOrString`, `RawExtension`, `FieldsV1`, ...) get kube's JSON forms.
//!
//! Go's protobuf marshalling writes every non-pointer field, zero or not, while
//! its JSON marshalling omits zero `omitempty` fields. To give the JSON kube
//! would produce, empty strings are dropped (except for required fields and a
//! few pointer fields where `""` means something), empty lists and maps are
//! dropped, and zero numbers / `false` are dropped for the non-pointer
//! `omitempty` fields listed in `ZERO_OMITTED` and in `*Status` messages.
//! Everything else keeps its zero value, so an explicit `replicas: 0`,
//! `runAsUser: 0` or `automountServiceAccountToken: false` survives.
//! A zero `Time` (kube's `creationTimestamp: null`) is omitted.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

use base64::Engine as _;
use serde_json::{Map, Number, Value};

use super::openapi::schemas;

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Every Kubernetes protobuf body starts with these four bytes.
const MAGIC: &[u8; 4] = b"k8s\0";

/// Deepest nesting accepted in the printed message tree (prost itself stops
/// decoding at 100 nested messages; lists, maps and options add levels).
const MAX_DEPTH: usize = 512;

/// How many `RawExtension`s holding protobuf objects may nest in each other.
const MAX_EMBEDDED: usize = 8;

/// Why a protobuf body could not be turned into JSON.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtobufError {
    /// The body does not start with `k8s\0`.
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    NotProtobuf,
    /// The `runtime.Unknown` envelope is not valid protobuf.
    #[error("unable to decode protobuf envelope: {0}")]
    Envelope(String),
    /// The envelope names no kind.
    #[error("Object 'Kind' is missing in protobuf envelope")]
    MissingKind,
    /// The envelope declares a content encoding (such as gzip) we do not undo.
    #[error("unsupported content encoding {0:?} in protobuf envelope")]
    UnsupportedEncoding(String),
    /// The envelope declares a content type other than protobuf or JSON.
    #[error("unsupported content type {0:?} in protobuf envelope")]
    UnsupportedContentType(String),
    /// No message type is known for this apiVersion and kind.
    #[error("no kind {kind:?} is registered for version {api_version:?}")]
    UnknownKind {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
    },
    /// The object bytes are not a valid message of the kind.
    #[error("unable to decode {kind} from protobuf: {message}")]
    Decode {
        /// The envelope's kind.
        kind: String,
        /// What went wrong.
        message: String,
    },
    /// The message decoded but holds a value JSON cannot carry (a time out of
    /// range, a non-finite float, an embedded object that is not JSON, ...).
    #[error("unable to convert {kind} from protobuf to JSON: {message}")]
    Convert {
        /// The envelope's kind.
        kind: String,
        /// What went wrong.
        message: String,
    },
}

impl ProtobufError {
    /// The HTTP status kube-apiserver answers with: 415 for an envelope whose
    /// content encoding or content type it cannot handle, 400 otherwise.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::UnsupportedEncoding(_) | Self::UnsupportedContentType(_) => 415,
            _ => 400,
        }
    }
}

/// Whether a `Content-Type` header value denotes Kubernetes protobuf
/// (parameters such as `; charset=` are ignored).
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(MEDIA_TYPE))
}

/// Whether [`decode_object`] knows the message type of `apiVersion`/`kind`.
pub fn is_registered(api_version: &str, kind: &str) -> bool {
    find_kind(api_version, kind).is_some()
}

/// Decodes a Kubernetes protobuf body (`k8s\0` + `runtime.Unknown`) into the
/// object's JSON, with `apiVersion` and `kind` set from the envelope.
pub fn decode_object(body: &[u8]) -> Result<Value, ProtobufError> {
    decode_nested(body, ("", ""), 0)
}

/// Like [`decode_object`], but an envelope with an empty `apiVersion` or
/// `kind` takes the one the endpoint expects, as kube-apiserver does.
pub fn decode_object_with_defaults(
    body: &[u8],
    api_version: &str,
    kind: &str,
) -> Result<Value, ProtobufError> {
    decode_nested(body, (api_version, kind), 0)
}

fn decode_nested(
    body: &[u8],
    defaults: (&str, &str),
    embedded: usize,
) -> Result<Value, ProtobufError> {
    use prost::Message as _;

    let rest = body
        .strip_prefix(MAGIC.as_slice())
        .ok_or(ProtobufError::NotProtobuf)?;
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(rest)
        .map_err(|e| ProtobufError::Envelope(e.to_string()))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let or_default = |value: Option<String>, default: &str| match value {
        Some(v) if !v.is_empty() => v,
        _ => default.to_owned(),
    };
    let api_version = or_default(type_meta.api_version, defaults.0);
    let kind = or_default(type_meta.kind, defaults.1);
    if kind.is_empty() {
        return Err(ProtobufError::MissingKind);
    }
    if let Some(encoding) = unknown.content_encoding.filter(|e| !e.is_empty()) {
        return Err(ProtobufError::UnsupportedEncoding(encoding));
    }
    let raw = unknown.raw.unwrap_or_default();
    let content_type = unknown.content_type.unwrap_or_default();
    let media = content_type.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case("application/json") {
        return embedded_json(&raw, api_version, kind);
    }
    if !media.is_empty() && !media.eq_ignore_ascii_case(MEDIA_TYPE) {
        return Err(ProtobufError::UnsupportedContentType(content_type));
    }
    let Some(index) = find_kind(&api_version, &kind) else {
        return Err(ProtobufError::UnknownKind { api_version, kind });
    };
    let entry = &KINDS[index];
    let text = (entry.decode)(&raw).map_err(|e| ProtobufError::Decode {
        kind: kind.clone(),
        message: e.to_string(),
    })?;
    let convert_err = |message: String| ProtobufError::Convert {
        kind: kind.clone(),
        message,
    };
    let tree = DebugParser::new(&text).parse_all().map_err(convert_err)?;
    let Dbg::Struct(name, fields) = tree else {
        return Err(convert_err("message did not print as a struct".into()));
    };
    let registry = registry();
    let def = registry
        .roots
        .get(index)
        .copied()
        .flatten()
        .and_then(|i| registry.defs.get(i));
    let conv = Converter { registry, embedded };
    let mut object = Map::new();
    object.insert("apiVersion".into(), Value::String(api_version.clone()));
    object.insert("kind".into(), Value::String(kind.clone()));
    conv.fill_object(&name, &fields, def, &mut object, 0)
        .map_err(convert_err)?;
    Ok(Value::Object(object))
}

/// An envelope whose `contentType` says its `raw` bytes are JSON.
fn embedded_json(raw: &[u8], api_version: String, kind: String) -> Result<Value, ProtobufError> {
    let mut value: Value = serde_json::from_slice(raw).map_err(|e| ProtobufError::Decode {
        kind: kind.clone(),
        message: e.to_string(),
    })?;
    if let Value::Object(object) = &mut value {
        object
            .entry("apiVersion")
            .or_insert(Value::String(api_version));
        object.entry("kind").or_insert(Value::String(kind));
    }
    Ok(value)
}

// ---------------------------------------------------------------------------
// Registered kinds
// ---------------------------------------------------------------------------

/// One decodable kind: its envelope identity, how to decode and print its
/// `k8s-pb` message, and how to register its `k8s-openapi` schema.
struct KindEntry {
    /// `""` matches any apiVersion (`DeleteOptions` is sent under many).
    api_version: &'static str,
    kind: &'static str,
    decode: fn(&[u8]) -> Result<String, prost::DecodeError>,
    /// Its definition name in the OpenAPI schemas.
    schema: &'static str,
}

fn print_message<M: prost::Message + Default + std::fmt::Debug>(
    raw: &[u8],
) -> Result<String, prost::DecodeError> {
    M::decode(raw).map(|message| format!("{message:?}"))
}

/// An entry for a kind of `k8s.io/api`, which both crates mirror under
/// `api::<group>::<version>::<Kind>`.
macro_rules! api_kind {
    ($api_version:literal, $group:ident::$version:ident::$kind:ident) => {
        KindEntry {
            api_version: $api_version,
            kind: stringify!($kind),
            decode: print_message::<k8s_pb::api::$group::$version::$kind>,
            schema: concat!(
                "io.k8s.api.",
                stringify!($group),
                ".",
                stringify!($version),
                ".",
                stringify!($kind)
            ),
        }
    };
}

/// The kinds [`decode_object`] understands: every built-in kind the API server
/// serves plus the request-only kinds kubectl sends (reviews, token requests,
/// evictions, delete options).
static KINDS: &[KindEntry] = &[
    api_kind!("v1", core::v1::Namespace),
    api_kind!("v1", core::v1::Pod),
    api_kind!("v1", core::v1::Service),
    api_kind!("v1", core::v1::Endpoints),
    api_kind!("v1", core::v1::ConfigMap),
    api_kind!("v1", core::v1::Secret),
    api_kind!("v1", core::v1::ServiceAccount),
    api_kind!("v1", core::v1::Node),
    api_kind!("v1", core::v1::Event),
    api_kind!("v1", core::v1::ReplicationController),
    api_kind!("v1", core::v1::PersistentVolumeClaim),
    api_kind!("v1", core::v1::PersistentVolume),
    api_kind!("v1", core::v1::LimitRange),
    api_kind!("v1", core::v1::ResourceQuota),
    api_kind!("v1", core::v1::PodTemplate),
    api_kind!("v1", core::v1::Binding),
    api_kind!("apps/v1", apps::v1::Deployment),
    api_kind!("apps/v1", apps::v1::ReplicaSet),
    api_kind!("apps/v1", apps::v1::StatefulSet),
    api_kind!("apps/v1", apps::v1::DaemonSet),
    api_kind!("apps/v1", apps::v1::ControllerRevision),
    api_kind!("batch/v1", batch::v1::Job),
    api_kind!("batch/v1", batch::v1::CronJob),
    api_kind!("autoscaling/v1", autoscaling::v1::Scale),
    api_kind!("autoscaling/v1", autoscaling::v1::HorizontalPodAutoscaler),
    api_kind!("autoscaling/v2", autoscaling::v2::HorizontalPodAutoscaler),
    api_kind!("discovery.k8s.io/v1", discovery::v1::EndpointSlice),
    api_kind!("coordination.k8s.io/v1", coordination::v1::Lease),
    api_kind!("events.k8s.io/v1", events::v1::Event),
    api_kind!("rbac.authorization.k8s.io/v1", rbac::v1::Role),
    api_kind!("rbac.authorization.k8s.io/v1", rbac::v1::RoleBinding),
    api_kind!("rbac.authorization.k8s.io/v1", rbac::v1::ClusterRole),
    api_kind!("rbac.authorization.k8s.io/v1", rbac::v1::ClusterRoleBinding),
    api_kind!("scheduling.k8s.io/v1", scheduling::v1::PriorityClass),
    api_kind!("policy/v1", policy::v1::PodDisruptionBudget),
    api_kind!("policy/v1", policy::v1::Eviction),
    api_kind!("networking.k8s.io/v1", networking::v1::NetworkPolicy),
    api_kind!("networking.k8s.io/v1", networking::v1::Ingress),
    api_kind!("networking.k8s.io/v1", networking::v1::IngressClass),
    api_kind!("networking.k8s.io/v1", networking::v1::IPAddress),
    api_kind!("networking.k8s.io/v1", networking::v1::ServiceCIDR),
    api_kind!("storage.k8s.io/v1", storage::v1::StorageClass),
    api_kind!("storage.k8s.io/v1", storage::v1::CSIDriver),
    api_kind!("storage.k8s.io/v1", storage::v1::CSINode),
    api_kind!("storage.k8s.io/v1", storage::v1::CSIStorageCapacity),
    api_kind!("storage.k8s.io/v1", storage::v1::VolumeAttachment),
    api_kind!("node.k8s.io/v1", node::v1::RuntimeClass),
    api_kind!(
        "certificates.k8s.io/v1",
        certificates::v1::CertificateSigningRequest
    ),
    api_kind!("authentication.k8s.io/v1", authentication::v1::TokenRequest),
    api_kind!("authentication.k8s.io/v1", authentication::v1::TokenReview),
    api_kind!(
        "authentication.k8s.io/v1",
        authentication::v1::SelfSubjectReview
    ),
    api_kind!(
        "authorization.k8s.io/v1",
        authorization::v1::SubjectAccessReview
    ),
    api_kind!(
        "authorization.k8s.io/v1",
        authorization::v1::SelfSubjectAccessReview
    ),
    api_kind!(
        "authorization.k8s.io/v1",
        authorization::v1::LocalSubjectAccessReview
    ),
    api_kind!(
        "authorization.k8s.io/v1",
        authorization::v1::SelfSubjectRulesReview
    ),
    api_kind!(
        "admissionregistration.k8s.io/v1",
        admissionregistration::v1::MutatingWebhookConfiguration
    ),
    api_kind!(
        "admissionregistration.k8s.io/v1",
        admissionregistration::v1::ValidatingWebhookConfiguration
    ),
    api_kind!(
        "admissionregistration.k8s.io/v1",
        admissionregistration::v1::ValidatingAdmissionPolicy
    ),
    api_kind!(
        "admissionregistration.k8s.io/v1",
        admissionregistration::v1::ValidatingAdmissionPolicyBinding
    ),
    api_kind!(
        "flowcontrol.apiserver.k8s.io/v1",
        flowcontrol::v1::FlowSchema
    ),
    api_kind!(
        "flowcontrol.apiserver.k8s.io/v1",
        flowcontrol::v1::PriorityLevelConfiguration
    ),
    KindEntry {
        api_version: "apiextensions.k8s.io/v1",
        kind: "CustomResourceDefinition",
        decode: print_message::<
            k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >,
        schema: "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
    },
    KindEntry {
        api_version: "apiregistration.k8s.io/v1",
        kind: "APIService",
        decode: print_message::<k8s_pb::kube_aggregator::pkg::apis::apiregistration::v1::APIService>,
        schema: "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService",
    },
    // Sent under the apiVersion of whichever group the request is for.
    KindEntry {
        api_version: "",
        kind: "DeleteOptions",
        decode: print_message::<k8s_pb::apimachinery::pkg::apis::meta::v1::DeleteOptions>,
        schema: "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    },
];

fn find_kind(api_version: &str, kind: &str) -> Option<usize> {
    KINDS.iter().position(|entry| {
        entry.kind == kind && (entry.api_version.is_empty() || entry.api_version == api_version)
    })
}

// ---------------------------------------------------------------------------
// Go JSON omission rules
// ---------------------------------------------------------------------------

/// Non-pointer Go scalar fields tagged `omitempty` outside `*Status` messages,
/// keyed by Go type name and JSON field name. Go always writes them
/// to protobuf, zero or not, and leaves a zero out of JSON, so a zero here is
/// the same Go value as an absent field. (Pointer fields are not listed: their
/// explicit zero, such as `replicas: 0`, is meaningful and kept.)
const ZERO_OMITTED: &[(&str, &str)] = &[
    ("ObjectMeta", "generation"),
    ("Condition", "observedGeneration"),
    ("PodCondition", "observedGeneration"),
    ("DeploymentSpec", "minReadySeconds"),
    ("DeploymentSpec", "paused"),
    ("ReplicaSetSpec", "minReadySeconds"),
    ("StatefulSetSpec", "minReadySeconds"),
    ("DaemonSetSpec", "minReadySeconds"),
    ("ReplicationControllerSpec", "minReadySeconds"),
    ("PodSpec", "hostNetwork"),
    ("PodSpec", "hostPID"),
    ("PodSpec", "hostIPC"),
    ("Container", "stdin"),
    ("Container", "stdinOnce"),
    ("Container", "tty"),
    ("EphemeralContainerCommon", "stdin"),
    ("EphemeralContainerCommon", "stdinOnce"),
    ("EphemeralContainerCommon", "tty"),
    ("ContainerPort", "hostPort"),
    ("ContainerImage", "sizeBytes"),
    ("ContainerStateTerminated", "signal"),
    ("Probe", "initialDelaySeconds"),
    ("Probe", "timeoutSeconds"),
    ("Probe", "periodSeconds"),
    ("Probe", "successThreshold"),
    ("Probe", "failureThreshold"),
    ("VolumeMount", "readOnly"),
    ("ServicePort", "nodePort"),
    ("ServicePort", "targetPort"),
    ("ServiceSpec", "healthCheckNodePort"),
    ("ServiceSpec", "publishNotReadyAddresses"),
    ("NodeSpec", "unschedulable"),
    ("Event", "count"),
    ("Event", "deprecatedCount"),
    ("EventSeries", "count"),
    ("ServiceBackendPort", "number"),
    ("PriorityClass", "globalDefault"),
    ("ResourcePolicyRule", "clusterScope"),
    ("ExactDeviceRequest", "count"),
    ("DeviceSubRequest", "count"),
    ("AWSElasticBlockStoreVolumeSource", "partition"),
    ("AWSElasticBlockStoreVolumeSource", "readOnly"),
    ("AzureFilePersistentVolumeSource", "readOnly"),
    ("AzureFileVolumeSource", "readOnly"),
    ("CSIPersistentVolumeSource", "readOnly"),
    ("CephFSPersistentVolumeSource", "readOnly"),
    ("CephFSVolumeSource", "readOnly"),
    ("CinderPersistentVolumeSource", "readOnly"),
    ("CinderVolumeSource", "readOnly"),
    ("FCVolumeSource", "readOnly"),
    ("FlexPersistentVolumeSource", "readOnly"),
    ("FlexVolumeSource", "readOnly"),
    ("GCEPersistentDiskVolumeSource", "partition"),
    ("GCEPersistentDiskVolumeSource", "readOnly"),
    ("GlusterfsPersistentVolumeSource", "readOnly"),
    ("GlusterfsVolumeSource", "readOnly"),
    ("ISCSIPersistentVolumeSource", "chapAuthDiscovery"),
    ("ISCSIPersistentVolumeSource", "chapAuthSession"),
    ("ISCSIPersistentVolumeSource", "readOnly"),
    ("ISCSIVolumeSource", "chapAuthDiscovery"),
    ("ISCSIVolumeSource", "chapAuthSession"),
    ("ISCSIVolumeSource", "readOnly"),
    ("NFSVolumeSource", "readOnly"),
    ("PersistentVolumeClaimVolumeSource", "readOnly"),
    ("PortworxVolumeSource", "readOnly"),
    ("QuobyteVolumeSource", "readOnly"),
    ("RBDPersistentVolumeSource", "readOnly"),
    ("RBDVolumeSource", "readOnly"),
    ("ScaleIOPersistentVolumeSource", "readOnly"),
    ("ScaleIOPersistentVolumeSource", "sslEnabled"),
    ("ScaleIOVolumeSource", "readOnly"),
    ("ScaleIOVolumeSource", "sslEnabled"),
    ("StorageOSPersistentVolumeSource", "readOnly"),
    ("StorageOSVolumeSource", "readOnly"),
    ("APIServiceSpec", "insecureSkipTLSVerify"),
    ("CustomResourceDefinitionSpec", "preserveUnknownFields"),
    ("CustomResourceDefinitionVersion", "deprecated"),
    ("CustomResourceColumnDefinition", "priority"),
    ("CustomResourceDefinitionCondition", "observedGeneration"),
    ("JSONSchemaProps", "exclusiveMaximum"),
    ("JSONSchemaProps", "exclusiveMinimum"),
    ("JSONSchemaProps", "uniqueItems"),
    ("JSONSchemaProps", "nullable"),
    ("JSONSchemaProps", "x-kubernetes-embedded-resource"),
    ("JSONSchemaProps", "x-kubernetes-int-or-string"),
];

/// Pointer string fields whose explicit `""` differs from unset (all other
/// optional empty strings are dropped, as Go's `omitempty` does).
const EMPTY_STRING_KEPT: &[(&str, &str)] = &[
    // "" disables dynamic provisioning; unset asks for the default class.
    ("PersistentVolumeClaimSpec", "storageClassName"),
    ("PersistentVolumeClaimSpec", "volumeAttributesClassName"),
    // EndpointSlice ports are usually unnamed: `name: ""`.
    ("EndpointPort", "name"),
    ("PodDNSConfigOption", "value"),
    ("DeviceAttribute", "string"),
];

/// Whether a protobuf field holds an embedded Go struct whose fields JSON
/// inlines into the parent (`json:",inline"` / `json:""`).
fn is_inlined(message: &str, field: &str) -> bool {
    matches!(
        field,
        "volume_source"
            | "persistent_volume_source"
            | "local_object_reference"
            | "ephemeral_container_common"
            | "ingress_rule_value"
            | "device_configuration"
            | "rule_with_operations"
    ) || (message.eq_ignore_ascii_case("Probe") && field == "handler")
        || (message.eq_ignore_ascii_case("NamedRuleWithOperations") && field == "rule")
}

/// Whether a converted field value is left out of the JSON object.
fn omitted(message: &str, json_name: &str, required: bool, source: &Dbg, value: &Value) -> bool {
    match value {
        Value::String(s) if s.is_empty() => {
            !required && !listed(EMPTY_STRING_KEPT, message, json_name)
        }
        Value::Bool(false) => !required && zero_omitted(message, json_name),
        Value::Number(n) if n.as_f64() == Some(0.0) => {
            !required && zero_omitted(message, json_name)
        }
        Value::Array(items) => items.is_empty(),
        Value::Object(entries) => entries.is_empty() && matches!(source, Dbg::Map(_)),
        _ => false,
    }
}

fn zero_omitted(message: &str, json_name: &str) -> bool {
    message.to_ascii_lowercase().ends_with("status") || listed(ZERO_OMITTED, message, json_name)
}

/// Whether `(message, json_name)` is in `list`; message names compare
/// case-insensitively (prost turns `NFSVolumeSource` into `NfsVolumeSource`).
fn listed(list: &[(&str, &str)], message: &str, json_name: &str) -> bool {
    list.iter()
        .any(|(m, f)| *f == json_name && m.eq_ignore_ascii_case(message))
}

// ---------------------------------------------------------------------------
// Schemas from k8s-openapi
// ---------------------------------------------------------------------------

/// The JSON shape of a schema property, as far as conversion cares.
#[derive(Debug)]
enum Ty {
    /// A named schema (index into [`Registry::defs`]).
    Ref(usize),
    /// `type: string, format: byte`: protobuf `bytes`, base64 in JSON.
    Bytes,
    List(Box<Ty>),
    Map(Box<Ty>),
    Other,
}

#[derive(Debug)]
struct Prop {
    json: String,
    ty: Ty,
    required: bool,
}

/// A named schema's properties keyed by [`normalize`]d name.
#[derive(Debug, Default)]
struct Def {
    props: HashMap<String, Prop>,
}

#[derive(Debug)]
struct Registry {
    defs: Vec<Def>,
    /// The root schema of each entry of [`KINDS`].
    roots: Vec<Option<usize>>,
    /// Lower-cased short schema name (`podspec`) → def, for messages reached
    /// where the walked schema has no information; ambiguous names map to
    /// `None`.
    by_short_name: HashMap<String, Option<usize>>,
    /// Normalized property name → JSON name across all schemas (fallback).
    names: HashMap<String, String>,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(build_registry)
}

fn build_registry() -> Registry {
    let root_names: Vec<&str> = KINDS.iter().map(|entry| entry.schema).collect();
    let definitions = schemas::closure(&schemas::definitions(), root_names.iter().copied());
    let index: HashMap<&str, usize> = definitions
        .keys()
        .enumerate()
        .map(|(i, name)| (name.as_str(), i))
        .collect();

    let mut by_short_name: HashMap<String, Option<usize>> = HashMap::new();
    let mut names = HashMap::new();
    let mut defs = Vec::with_capacity(definitions.len());
    for (i, (name, schema)) in definitions.iter().enumerate() {
        let short = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
        by_short_name
            .entry(short)
            .and_modify(|slot| *slot = None)
            .or_insert(Some(i));
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut def = Def::default();
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (json, prop_schema) in props {
                let key = normalize(json);
                names.entry(key.clone()).or_insert_with(|| json.clone());
                def.props.insert(
                    key,
                    Prop {
                        json: json.clone(),
                        ty: schema_ty(prop_schema, &index),
                        required: required.contains(&json.as_str()),
                    },
                );
            }
        }
        defs.push(def);
    }
    let roots = root_names
        .iter()
        .map(|name| index.get(name).copied())
        .collect();
    Registry {
        defs,
        roots,
        by_short_name,
        names,
    }
}

fn schema_ty(schema: &Value, index: &HashMap<&str, usize>) -> Ty {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.rsplit('/').next().unwrap_or(reference);
        return index.get(name).map_or(Ty::Other, |&i| Ty::Ref(i));
    }
    if let Some([only]) = schema
        .get("allOf")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
    {
        return schema_ty(only, index);
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") if schema.get("format").and_then(Value::as_str) == Some("byte") => Ty::Bytes,
        Some("array") => Ty::List(Box::new(
            schema
                .get("items")
                .map_or(Ty::Other, |items| schema_ty(items, index)),
        )),
        Some("object") => match schema.get("additionalProperties") {
            Some(values @ Value::Object(_)) => Ty::Map(Box::new(schema_ty(values, index))),
            _ => Ty::Other,
        },
        _ => Ty::Other,
    }
}

/// The key protobuf and JSON field names share: ASCII letters and digits,
/// lower-cased (`pod_ip` and `podIP` → `podip`; `r#ref` and `$ref` → `ref`;
/// `x_kubernetes_list_type` and `x-kubernetes-list-type` alike).
fn normalize(name: &str) -> String {
    let name = name.strip_prefix("r#").unwrap_or(name);
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// `pod_ip` → `podIp`: for fields no schema knows.
fn snake_to_camel(name: &str) -> String {
    let name = name.strip_prefix("r#").unwrap_or(name);
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = !out.is_empty();
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The printed message tree
// ---------------------------------------------------------------------------

/// A value as prost's derived `Debug` prints it.
#[derive(Debug, Clone, PartialEq)]
enum Dbg {
    /// `Name { field: value, .. }`, or a bare `Name` for a message without
    /// fields.
    Struct(String, Vec<(String, Dbg)>),
    List(Vec<Dbg>),
    Map(Vec<(Dbg, Dbg)>),
    Str(String),
    /// A number token as printed (`-3`, `1.5`, `1e-7`, `NaN`, `inf`).
    Num(String),
    Bool(bool),
    /// `None`.
    Null,
}

struct DebugParser<'a> {
    text: &'a [u8],
    pos: usize,
    depth: usize,
}

impl<'a> DebugParser<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text: text.as_bytes(),
            pos: 0,
            depth: 0,
        }
    }

    fn parse_all(mut self) -> Result<Dbg, String> {
        let value = self.value()?;
        self.skip_ws();
        if self.pos != self.text.len() {
            return Err(self.error("trailing text"));
        }
        Ok(value)
    }

    fn error(&self, what: &str) -> String {
        format!("unexpected message text at {}: {what}", self.pos)
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        self.skip_ws();
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected {:?}", char::from(byte))))
        }
    }

    /// After an element: `,` (then maybe the closing byte) or the closing
    /// byte. Returns whether the sequence ended.
    fn separator(&mut self, close: u8) -> Result<bool, String> {
        self.skip_ws();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                self.skip_ws();
                if self.peek() == Some(close) {
                    self.pos += 1;
                    return Ok(true);
                }
                Ok(false)
            }
            Some(b) if b == close => {
                self.pos += 1;
                Ok(true)
            }
            _ => Err(self.error("expected ',' or a closing bracket")),
        }
    }

    /// Whether the sequence closes right away (`[]`, `{}`).
    fn closes(&mut self, close: u8) -> bool {
        self.skip_ws();
        if self.peek() == Some(close) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Dbg, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        let value = self.value_inner();
        self.depth -= 1;
        value
    }

    fn value_inner(&mut self) -> Result<Dbg, String> {
        self.skip_ws();
        match self.peek() {
            Some(b'"') => self.string().map(Dbg::Str),
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                if self.closes(b']') {
                    return Ok(Dbg::List(items));
                }
                loop {
                    items.push(self.value()?);
                    if self.separator(b']')? {
                        return Ok(Dbg::List(items));
                    }
                }
            }
            Some(b'{') => {
                self.pos += 1;
                let mut entries = Vec::new();
                if self.closes(b'}') {
                    return Ok(Dbg::Map(entries));
                }
                loop {
                    let key = self.value()?;
                    self.expect(b':')?;
                    let value = self.value()?;
                    entries.push((key, value));
                    if self.separator(b'}')? {
                        return Ok(Dbg::Map(entries));
                    }
                }
            }
            Some(b) if b == b'-' || b.is_ascii_digit() => Ok(Dbg::Num(self.token())),
            Some(b) if b.is_ascii_alphabetic() || b == b'_' => self.word(),
            _ => Err(self.error("expected a value")),
        }
    }

    /// A run of identifier / number characters.
    fn token(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'_' | b'#' | b'.' | b'-' | b'+')
        }) {
            self.pos += 1;
        }
        String::from_utf8_lossy(&self.text[start..self.pos]).into_owned()
    }

    fn identifier(&mut self) -> String {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'#'))
        {
            self.pos += 1;
        }
        String::from_utf8_lossy(&self.text[start..self.pos]).into_owned()
    }

    fn word(&mut self) -> Result<Dbg, String> {
        let word = self.identifier();
        match word.as_str() {
            "None" => return Ok(Dbg::Null),
            "true" => return Ok(Dbg::Bool(true)),
            "false" => return Ok(Dbg::Bool(false)),
            "NaN" | "inf" => return Ok(Dbg::Num(word)),
            "Some" => {
                self.expect(b'(')?;
                let inner = self.value()?;
                self.expect(b')')?;
                return Ok(inner);
            }
            _ => {}
        }
        self.skip_ws();
        if self.peek() != Some(b'{') {
            // A message without fields prints as its bare name.
            return Ok(Dbg::Struct(word, Vec::new()));
        }
        self.pos += 1;
        let mut fields = Vec::new();
        if self.closes(b'}') {
            return Ok(Dbg::Struct(word, fields));
        }
        loop {
            self.skip_ws();
            let name = self.identifier();
            if name.is_empty() {
                return Err(self.error("expected a field name"));
            }
            self.expect(b':')?;
            let value = self.value()?;
            fields.push((name, value));
            if self.separator(b'}')? {
                return Ok(Dbg::Struct(word, fields));
            }
        }
    }

    /// A string literal with Rust's `Debug` escapes.
    fn string(&mut self) -> Result<String, String> {
        self.pos += 1; // opening quote
        let mut out = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err(self.error("unterminated string"));
            };
            self.pos += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let Some(escape) = self.peek() else {
                        return Err(self.error("unterminated escape"));
                    };
                    self.pos += 1;
                    let c = match escape {
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'0' => '\0',
                        b'\\' => '\\',
                        b'"' => '"',
                        b'\'' => '\'',
                        b'u' => self.unicode_escape()?,
                        _ => return Err(self.error("unknown escape")),
                    };
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                _ => out.push(b),
            }
        }
        String::from_utf8(out).map_err(|_| self.error("string is not UTF-8"))
    }

    /// The `{XXXX}` after `\u`.
    fn unicode_escape(&mut self) -> Result<char, String> {
        if self.peek() != Some(b'{') {
            return Err(self.error("expected '{' in unicode escape"));
        }
        self.pos += 1;
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_hexdigit()) {
            self.pos += 1;
        }
        let hex = std::str::from_utf8(&self.text[start..self.pos]).unwrap_or("");
        if self.peek() != Some(b'}') {
            return Err(self.error("expected '}' in unicode escape"));
        }
        self.pos += 1;
        u32::from_str_radix(hex, 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| self.error("invalid unicode escape"))
    }
}

// ---------------------------------------------------------------------------
// Tree → JSON
// ---------------------------------------------------------------------------

struct Converter<'r> {
    registry: &'r Registry,
    /// How many protobuf envelopes enclose this one (`RawExtension`s).
    embedded: usize,
}

impl Converter<'_> {
    /// The def to use for a message: the walked schema's, else a unique
    /// schema whose short name is the message's name.
    fn def_for(&self, message: &str, ty: Option<&Ty>) -> Option<usize> {
        match ty {
            Some(Ty::Ref(i)) => Some(*i),
            _ => self
                .registry
                .by_short_name
                .get(&message.to_ascii_lowercase())
                .copied()
                .flatten(),
        }
    }

    /// Converts one value; `None` means the value is absent (unset, or kube
    /// writes no JSON for it, like a zero `Time`).
    fn convert(&self, value: &Dbg, ty: Option<&Ty>, depth: usize) -> Result<Option<Value>, String> {
        if depth > MAX_DEPTH {
            return Err("message nested too deeply".into());
        }
        Ok(Some(match value {
            Dbg::Null => return Ok(None),
            Dbg::Str(s) => Value::String(s.clone()),
            Dbg::Bool(b) => Value::Bool(*b),
            Dbg::Num(token) => number(token)?,
            Dbg::List(items) => {
                if matches!(ty, Some(Ty::Bytes)) {
                    return bytes_of(value).map(|b| Some(Value::String(base64(&b))));
                }
                let item_ty = match ty {
                    Some(Ty::List(inner)) => Some(inner.as_ref()),
                    _ => None,
                };
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(
                        self.convert(item, item_ty, depth + 1)?
                            .unwrap_or(Value::Null),
                    );
                }
                Value::Array(out)
            }
            Dbg::Map(entries) => {
                let value_ty = match ty {
                    Some(Ty::Map(inner)) => Some(inner.as_ref()),
                    _ => None,
                };
                let mut out = Map::new();
                for (key, entry) in entries {
                    let key = match key {
                        Dbg::Str(s) | Dbg::Num(s) => s.clone(),
                        Dbg::Bool(b) => b.to_string(),
                        _ => return Err("map key is not a scalar".into()),
                    };
                    let entry = self
                        .convert(entry, value_ty, depth + 1)?
                        .unwrap_or(Value::Null);
                    out.insert(key, entry);
                }
                Value::Object(out)
            }
            Dbg::Struct(name, fields) => return self.convert_message(name, fields, ty, depth),
        }))
    }

    fn convert_message(
        &self,
        name: &str,
        fields: &[(String, Dbg)],
        ty: Option<&Ty>,
        depth: usize,
    ) -> Result<Option<Value>, String> {
        // Field names compared in normalized form (`int_val` → `intval`).
        let field = |wanted: &str| {
            fields
                .iter()
                .find(|(n, _)| normalize(n) == wanted)
                .map(|(_, v)| v)
                .filter(|v| **v != Dbg::Null)
        };
        // prost may or may not keep Go's acronyms in message names (`JSON`
        // became `Json`, `CSIDriver` stayed), so names compare lower-cased.
        match name.to_ascii_lowercase().as_str() {
            "time" => return time(field("seconds"), None),
            "microtime" => return time(field("seconds"), Some(field("nanos"))),
            "duration" => {
                return match field("duration") {
                    Some(Dbg::Num(n)) => n
                        .parse::<i64>()
                        .map(|n| Some(Value::String(go_duration(n))))
                        .map_err(|_| format!("invalid duration {n}")),
                    _ => Ok(Some(Value::String("0s".into()))),
                };
            }
            "quantity" => {
                return Ok(match field("string") {
                    Some(Dbg::Str(s)) => Some(Value::String(s.clone())),
                    _ => None,
                });
            }
            "intorstring" => {
                let is_string = matches!(field("type"), Some(Dbg::Num(t)) if t == "1");
                return Ok(Some(if is_string {
                    match field("strval") {
                        Some(Dbg::Str(s)) => Value::String(s.clone()),
                        _ => Value::String(String::new()),
                    }
                } else {
                    match field("intval") {
                        Some(Dbg::Num(n)) => number(n)?,
                        _ => Value::from(0),
                    }
                }));
            }
            "rawextension" | "fieldsv1" | "json" => {
                return match field("raw") {
                    Some(raw) => self.raw_json(&bytes_of(raw)?),
                    None => Ok(None),
                };
            }
            "verbs" | "extravalue" => {
                return match field("items") {
                    Some(items) => self.convert(items, None, depth + 1),
                    None => Ok(Some(Value::Array(Vec::new()))),
                };
            }
            // These three marshal as one of their fields, in Go's order.
            "jsonschemapropsorarray" => {
                return match (field("jsonschemas"), field("schema")) {
                    (Some(list @ Dbg::List(items)), _) if !items.is_empty() => {
                        self.convert(list, None, depth + 1)
                    }
                    (_, Some(schema)) => self.convert(schema, None, depth + 1),
                    _ => Ok(None),
                };
            }
            "jsonschemapropsorbool" => {
                return match field("schema") {
                    Some(schema) => self.convert(schema, None, depth + 1),
                    None => Ok(Some(Value::Bool(matches!(
                        field("allows"),
                        Some(Dbg::Bool(true))
                    )))),
                };
            }
            "jsonschemapropsorstringarray" => {
                return match (field("property"), field("schema")) {
                    (Some(list @ Dbg::List(items)), _) if !items.is_empty() => {
                        self.convert(list, None, depth + 1)
                    }
                    (_, Some(schema)) => self.convert(schema, None, depth + 1),
                    _ => Ok(Some(Value::Array(Vec::new()))),
                };
            }
            _ => {}
        }
        let mut object = Map::new();
        let def = self
            .def_for(name, ty)
            .and_then(|i| self.registry.defs.get(i));
        self.fill_object(name, fields, def, &mut object, depth)?;
        Ok(Some(Value::Object(object)))
    }

    /// Adds a message's fields to `object` (which inlined fields share).
    fn fill_object(
        &self,
        message: &str,
        fields: &[(String, Dbg)],
        def: Option<&Def>,
        object: &mut Map<String, Value>,
        depth: usize,
    ) -> Result<(), String> {
        for (raw_name, value) in fields {
            let name = raw_name.strip_prefix("r#").unwrap_or(raw_name);
            let key = normalize(name);
            let prop = def.and_then(|d| d.props.get(&key));
            if prop.is_none() && is_inlined(message, name) {
                match value {
                    Dbg::Struct(inner, inner_fields) => {
                        // The parent's schema lists the inlined fields.
                        self.fill_object(inner, inner_fields, def, object, depth + 1)?;
                        continue;
                    }
                    Dbg::Null => continue,
                    _ => {}
                }
            }
            let json_name = match prop {
                Some(p) => p.json.clone(),
                None => self
                    .registry
                    .names
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| snake_to_camel(name)),
            };
            let Some(converted) = self.convert(value, prop.map(|p| &p.ty), depth + 1)? else {
                continue;
            };
            let required = prop.is_some_and(|p| p.required);
            if omitted(message, &json_name, required, value, &converted) {
                continue;
            }
            object.insert(json_name, converted);
        }
        Ok(())
    }

    /// The JSON a `RawExtension`/`FieldsV1`/`JSON` carries: JSON text, or an
    /// embedded protobuf object.
    fn raw_json(&self, raw: &[u8]) -> Result<Option<Value>, String> {
        if raw.is_empty() {
            return Ok(None);
        }
        if raw.starts_with(MAGIC) {
            if self.embedded >= MAX_EMBEDDED {
                return Err("embedded objects nested too deeply".into());
            }
            return decode_nested(raw, ("", ""), self.embedded + 1)
                .map(Some)
                .map_err(|e| format!("embedded object: {e}"));
        }
        serde_json::from_slice(raw)
            .map(Some)
            .map_err(|e| format!("embedded JSON is invalid: {e}"))
    }
}

fn number(token: &str) -> Result<Value, String> {
    if let Ok(i) = token.parse::<i64>() {
        return Ok(Value::from(i));
    }
    if let Ok(u) = token.parse::<u64>() {
        return Ok(Value::from(u));
    }
    let float = token
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .ok_or_else(|| format!("unsupported number {token}"))?;
    // Go writes integral floats without a fraction (`5`, not `5.0`).
    if float.fract() == 0.0 && float.abs() < 9_007_199_254_740_992.0 {
        return Ok(Value::from(float as i64));
    }
    Number::from_f64(float)
        .map(Value::Number)
        .ok_or_else(|| format!("unsupported number {token}"))
}

/// A printed `Vec<u8>` (`[1, 2, 3]`) back to bytes.
fn bytes_of(value: &Dbg) -> Result<Vec<u8>, String> {
    let Dbg::List(items) = value else {
        return Err("bytes field is not a list".into());
    };
    items
        .iter()
        .map(|item| match item {
            Dbg::Num(n) => n.parse::<u8>().map_err(|_| format!("invalid byte {n}")),
            _ => Err("bytes field holds a non-number".into()),
        })
        .collect()
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `Time` (`nanos` = `None`): RFC 3339 in seconds, as Go's protobuf
/// unmarshalling drops the nanoseconds. `MicroTime` (`nanos` =
/// `Some(..)`): six fractional digits. A message without `seconds` is Go's
/// zero time, which has no JSON (kube writes `null`); it is omitted.
fn time(seconds: Option<&Dbg>, nanos: Option<Option<&Dbg>>) -> Result<Option<Value>, String> {
    let Some(Dbg::Num(seconds)) = seconds else {
        return Ok(None);
    };
    let seconds: i64 = seconds
        .parse()
        .map_err(|_| format!("invalid time seconds {seconds}"))?;
    let (year, month, day, hour, minute, second) = civil(seconds);
    if !(0..=9999).contains(&year) {
        return Err(format!("time year {year} outside of range [0,9999]"));
    }
    let mut out = format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}");
    if let Some(nanos) = nanos {
        let nanos: i64 = match nanos {
            Some(Dbg::Num(n)) => n.parse().map_err(|_| format!("invalid time nanos {n}"))?,
            _ => 0,
        };
        if !(0..1_000_000_000).contains(&nanos) {
            return Err(format!("time nanos {nanos} out of range"));
        }
        let _ = write!(out, ".{:06}", nanos / 1000);
    }
    out.push('Z');
    Ok(Some(Value::String(out)))
}

/// Unix seconds → proleptic Gregorian UTC date and time.
fn civil(unix: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (year, month, day) = crate::apiserver::http::table::duration::civil_from_days(days);
    // All of these are small and non-negative by construction.
    let small = |v: i64| u32::try_from(v).unwrap_or(0);
    (
        year,
        small(month),
        small(day),
        small(secs / 3600),
        small(secs % 3600 / 60),
        small(secs % 60),
    )
}

/// Go's `time.Duration.String()`: `1h2m3.5s`, `1.5ms`, `0s`.
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    if nanos < 0 {
        out.push('-');
    }
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (scale, unit) = match n {
            0..1_000 => (1, "ns"),
            1_000..1_000_000 => (1_000, "µs"),
            _ => (1_000_000, "ms"),
        };
        out.push_str(&fraction(n, scale));
        out.push_str(unit);
        return out;
    }
    let hours = n / 3_600_000_000_000;
    let minutes = n % 3_600_000_000_000 / 60_000_000_000;
    let seconds = n % 60_000_000_000;
    if hours > 0 {
        let _ = write!(out, "{hours}h");
    }
    if hours > 0 || minutes > 0 {
        let _ = write!(out, "{minutes}m");
    }
    out.push_str(&fraction(seconds, 1_000_000_000));
    out.push('s');
    out
}

/// `value / scale` with the remainder as trimmed decimal fraction digits.
fn fraction(value: u64, scale: u64) -> String {
    let whole = value / scale;
    let rest = value % scale;
    if rest == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{rest:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests;
