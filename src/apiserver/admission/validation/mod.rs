//! Field validation of the built-in kinds, as kube-apiserver's `pkg/apis/*/validation`:
//! what a create, update, patch or apply must satisfy before it is stored, answered as a
//! 422 `Invalid` whose `details.causes[]` carry kube's field paths, reasons and messages.
//!
//! Owns: the rules and their wording. May not touch: the store, the watch cache, anything
//! with side effects — every function here is pure over the new object and, on update,
//! the old one. Defaulting runs before (`objects::apply_defaults`), so a validator sees
//! what kube's validators see after defaulting. Custom resources are validated against
//! their CRD's schema (`schema.rs`), not here.
//!
//! Layout: `field` (paths, error constructors), `names` (shared string formats), `meta`
//! (ObjectMeta, every kind), then one file per API area. Test vectors ported from kube's
//! validation tests live in `tests/` as data (input, expected field path and message).

pub mod field;
pub use crate::names;

mod core;
mod meta;
mod networking;
mod pod;
mod rbac;
mod service;
mod status;
mod workloads;

pub use status::validate_status;

/// A Service update as kube's REST layer prepares it (see `service::prepare_update`).
pub fn prepare_service_update(old: &Value, new: &mut Value) {
    service::prepare_update(old, new);
}

#[cfg(test)]
mod tests;

use serde_json::Value;

use crate::apiserver::storage::registry::ResourceInfo;
use field::ErrorList;

/// Validates `new` (after defaulting); `old` is the stored object on update, `None` on
/// create. The causes of a 422, empty when valid.
pub fn validate(info: &ResourceInfo, new: &Value, old: Option<&Value>) -> ErrorList {
    let mut errs = ErrorList::new();
    if info.custom {
        return errs;
    }
    meta::validate_object_meta(info, new, old, &mut errs);
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Pod") => pod::validate_pod(new, old, &mut errs),
        ("", "PodTemplate")
        | ("", "ReplicationController")
        | ("apps", "Deployment")
        | ("apps", "ReplicaSet")
        | ("apps", "DaemonSet")
        | ("apps", "StatefulSet")
        | ("batch", "Job")
        | ("batch", "CronJob") => workloads::validate(&info.kind, new, old, &mut errs),
        ("", "Service") => service::validate_service(new, old, &mut errs),
        ("", "Endpoints")
        | ("", "ConfigMap")
        | ("", "Secret")
        | ("", "Namespace")
        | ("", "Node")
        | ("", "ServiceAccount")
        | ("", "PersistentVolume")
        | ("", "PersistentVolumeClaim") => core::validate(&info.kind, new, old, &mut errs),
        ("discovery.k8s.io", "EndpointSlice")
        | ("networking.k8s.io", "NetworkPolicy")
        | ("networking.k8s.io", "Ingress")
        | ("networking.k8s.io", "IngressClass") => {
            networking::validate(&info.kind, new, old, &mut errs)
        }
        ("rbac.authorization.k8s.io", _) => rbac::validate(&info.kind, new, old, &mut errs),
        _ => {}
    }
    errs
}

/// A string field, `""` when absent or not a string.
pub(crate) fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}
