//! Admission: what a write must pass before it is stored, and the side effects of writes
//! that belong to the API server itself.
//!
//! This file: ClusterIP and NodePort allocation for Services, the ServiceAccount admission
//! of Pods (`sa_token::admit_pod`), and registering the resources of
//! CustomResourceDefinitions when they are written or deleted; and, after field validation
//! ([`validation`]) as kube's validating admission runs, the PodSecurity admission
//! ([`pod_security`]), reading namespaces and pods from the watch cache for it. With
//! `enable-admission-plugins=DenyServiceExternalIPs` it refuses Services that add
//! `spec.externalIPs` ([`Settings`]).
//!
//! May not touch: HTTP framing and authorization (`http`, `auth`); [`validation`] and the
//! level checks of [`pod_security`] are pure functions. The store only through
//! `storage::kv::KvStore` (removing a stale allocation).

pub mod pod_security;
pub mod validation;

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

use serde_json::{Value, json};

use super::AppState;
use super::http::status::{ApiError, StatusCause};
use super::storage::registry::ResourceInfo;

/// The admission settings `--kube-apiserver-arg` sets, and the TokenRequest cap that
/// rides with them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `enable-admission-plugins=DenyServiceExternalIPs`: no new `spec.externalIPs`.
    pub deny_service_external_ips: bool,
    /// `service-account-max-token-expiration`: longer TokenRequests are shortened to it
    /// (with a warning); `None` (kube's default `0`) caps nothing.
    pub max_token_expiration: Option<Duration>,
}

/// kube's DenyServiceExternalIPs message.
const EXTERNAL_IPS_DENIED: &str = "Use of external IPs is denied by admission control";

/// DenyServiceExternalIPs: a Service may keep the external IPs it has, drop some, but not
/// gain any (on create, any at all is refused), as kube's plugin does.
fn deny_external_ips(old: Option<&Value>, service: &Value) -> Result<(), ApiError> {
    let ips = |v: Option<&Value>| -> Vec<String> {
        v.and_then(|v| v.pointer("/spec/externalIPs"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|ip| ip.as_str().map_or_else(|| ip.to_string(), str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = ips(old);
    let added = ips(Some(service))
        .into_iter()
        .any(|ip| !before.contains(&ip));
    if !added {
        return Ok(());
    }
    let name = service
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut error = ApiError::forbidden(format!(
        "services \"{name}\" is forbidden: {EXTERNAL_IPS_DENIED}"
    ));
    error.details = Some(Box::new(super::http::status::StatusDetails {
        name: (!name.is_empty()).then(|| name.to_string()),
        kind: Some("services".into()),
        ..Default::default()
    }));
    Err(error)
}

fn service_ips_in_use(state: &AppState) -> (HashSet<IpAddr>, HashSet<i64>) {
    let (services, _) = state.cache.list("/registry/services/", None);
    let mut ips = HashSet::new();
    let mut ports = HashSet::new();
    for svc in services {
        let Ok(v) = serde_json::from_slice::<Value>(&svc.bytes) else {
            continue;
        };
        if let Some(list) = v.pointer("/spec/clusterIPs").and_then(Value::as_array) {
            ips.extend(
                list.iter()
                    .filter_map(Value::as_str)
                    .filter_map(|s| s.parse::<IpAddr>().ok()),
            );
        }
        if let Some(ip) = v
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
        {
            ips.insert(ip);
        }
        for p in v
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(n) = p.get("nodePort").and_then(Value::as_i64) {
                ports.insert(n);
            }
        }
    }
    (ips, ports)
}

fn field_error(field: &str, value: &str, message: &str) -> StatusCause {
    StatusCause {
        reason: Some("FieldValueInvalid".into()),
        message: Some(format!("Invalid value: {value:?}: {message}")),
        field: Some(field.into()),
    }
}

/// Allocates the ClusterIP and NodePorts of a new Service.
async fn allocate_service(
    state: &AppState,
    info: &ResourceInfo,
    service: &mut Value,
) -> Result<(), ApiError> {
    let _guard = state.allocation.lock().await;
    let (used_ips, used_ports) = service_ips_in_use(state);
    let name = service
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let ty = service
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    if ty != "ExternalName" {
        let requested = service
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let ip = if requested == "None" {
            None
        } else if !requested.is_empty() {
            let ip: IpAddr = requested.parse().map_err(|_| {
                ApiError::invalid(
                    &info.group,
                    &info.kind,
                    &name,
                    vec![field_error(
                        "spec.clusterIPs[0]",
                        &requested,
                        "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    )],
                )
            })?;
            if !state.config.service_cidr.contains(ip) {
                return Err(ApiError::invalid(
                    &info.group,
                    &info.kind,
                    &name,
                    vec![field_error(
                        "spec.clusterIPs",
                        &requested,
                        &format!(
                            "failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is {}",
                            state.config.service_cidr
                        ),
                    )],
                ));
            }
            if used_ips.contains(&ip) {
                return Err(ApiError::invalid(
                    &info.group,
                    &info.kind,
                    &name,
                    vec![field_error(
                        "spec.clusterIPs",
                        &requested,
                        &format!(
                            "failed to allocate IP {requested}: provided IP is already allocated"
                        ),
                    )],
                ));
            }
            Some(ip)
        } else {
            // First free address; .10 is kept for cluster DNS unless asked for.
            let mut found = None;
            for n in 1u128..(1u128 << 16) {
                let Some(candidate) = state.config.service_cidr.nth(n) else {
                    break;
                };
                if candidate == state.config.cluster_dns || used_ips.contains(&candidate) {
                    continue;
                }
                found = Some(candidate);
                break;
            }
            Some(found.ok_or_else(|| {
                ApiError::internal("failed to allocate a service IP: range is full")
            })?)
        };
        if let Some(spec) = service.get_mut("spec").and_then(Value::as_object_mut) {
            match ip {
                Some(ip) => {
                    spec.insert("clusterIP".into(), json!(ip.to_string()));
                    spec.insert("clusterIPs".into(), json!([ip.to_string()]));
                }
                None => {
                    spec.insert("clusterIP".into(), json!("None"));
                    spec.insert("clusterIPs".into(), json!(["None"]));
                }
            }
            spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
            spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
        }
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        let range = state.config.node_port_range.clone();
        let mut taken: HashSet<i64> = used_ports;
        if let Some(ports) = service
            .pointer_mut("/spec/ports")
            .and_then(Value::as_array_mut)
        {
            for (i, port) in ports.iter_mut().enumerate() {
                match port.get("nodePort").and_then(Value::as_i64) {
                    Some(n) => {
                        if n < *range.start() as i64 || n > *range.end() as i64 {
                            return Err(ApiError::invalid(
                                &info.group,
                                &info.kind,
                                &name,
                                vec![field_error(
                                    &format!("spec.ports[{i}].nodePort"),
                                    &n.to_string(),
                                    &format!(
                                        "provided port is not in the valid range. The range of valid ports is {}-{}",
                                        range.start(),
                                        range.end()
                                    ),
                                )],
                            ));
                        }
                        if !taken.insert(n) {
                            return Err(ApiError::invalid(
                                &info.group,
                                &info.kind,
                                &name,
                                vec![field_error(
                                    &format!("spec.ports[{i}].nodePort"),
                                    &n.to_string(),
                                    "provided port is already allocated",
                                )],
                            ));
                        }
                    }
                    None => port["nodePort"] = json!(pick_node_port(&range, &mut taken)?),
                }
            }
        }
    }
    Ok(())
}

/// A free node port from `range`, searched from a random offset, marked taken.
fn pick_node_port(
    range: &std::ops::RangeInclusive<u16>,
    taken: &mut HashSet<i64>,
) -> Result<i64, ApiError> {
    let start = i64::from(*range.start());
    let size = (i64::from(*range.end()) - start + 1).max(1);
    let seed = i64::from(u16::from_le_bytes(
        super::storage::objects::random_bytes::<2>(),
    ));
    let pick = (0..size)
        .map(|k| start + (seed + k) % size)
        .find(|p| !taken.contains(p))
        .ok_or_else(|| ApiError::internal("failed to allocate a node port: range is full"))?;
    taken.insert(pick);
    Ok(pick)
}

/// Node ports for the ports of an updated NodePort or LoadBalancer Service that have none
/// (a ClusterIP Service that became NodePort): picked as on create, from the range minus
/// the ports other Services hold; the Service's own old ports count as free.
async fn allocate_update_node_ports(
    state: &AppState,
    old: &Value,
    service: &mut Value,
) -> Result<(), ApiError> {
    let missing = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .is_some_and(|ports| {
            ports
                .iter()
                .any(|p| p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) == 0)
        });
    if !missing {
        return Ok(());
    }
    let _guard = state.allocation.lock().await;
    let (_, mut taken) = service_ips_in_use(state);
    for port in old
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(n) = port.get("nodePort").and_then(Value::as_i64) {
            taken.remove(&n);
        }
    }
    let range = state.config.node_port_range.clone();
    let Some(ports) = service
        .pointer_mut("/spec/ports")
        .and_then(Value::as_array_mut)
    else {
        return Ok(());
    };
    for port in ports
        .iter()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
    {
        taken.insert(port);
    }
    for port in ports.iter_mut() {
        if port.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
            continue;
        }
        port["nodePort"] = json!(pick_node_port(&range, &mut taken)?);
    }
    Ok(())
}

/// Refuses RBAC writes that would grant the requester rights it does not hold.
fn check_rbac_escalation(
    state: &AppState,
    info: &ResourceInfo,
    object: &Value,
) -> Result<(), ApiError> {
    let lookup = |plural: &str, namespace: Option<&str>, name: &str| -> Option<Value> {
        let key = match namespace {
            Some(ns) => format!("{}{plural}/{ns}/{name}", super::auth::authz::rbac::PREFIX),
            None => format!("{}{plural}/{name}", super::auth::authz::rbac::PREFIX),
        };
        let cached = state.cache.get(&key)?;
        serde_json::from_slice(&cached.bytes).ok()
    };
    super::auth::authz::escalation::check(&state.authz, info, object, &lookup)
}

/// Runs before a new object is stored.
pub async fn on_create(
    state: &AppState,
    info: &ResourceInfo,
    object: &mut Value,
    _dry_run: bool,
) -> Result<(), ApiError> {
    check_rbac_escalation(state, info, object)?;
    if info.group.is_empty() && info.plural == "services" {
        if state.config.admission.deny_service_external_ips {
            deny_external_ips(None, object)?;
        }
        allocate_service(state, info, object).await?;
    }
    if info.group.is_empty() && info.plural == "pods" {
        super::auth::sa_token::admit_pod(state, object).await?;
    }
    if info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions" {
        super::storage::crd::validate_group(object)?;
        super::storage::crd::accept(object, &super::storage::objects::now_rfc3339());
    }
    Ok(())
}

/// Runs before an update is stored: immutable fields stay as they were.
pub async fn on_update(
    state: &AppState,
    info: &ResourceInfo,
    old: &Value,
    new: &mut Value,
) -> Result<(), ApiError> {
    check_rbac_escalation(state, info, new)?;
    if info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions" {
        super::storage::crd::validate_group(new)?;
        let since = old
            .pointer("/status/conditions/0/lastTransitionTime")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(super::storage::objects::now_rfc3339);
        super::storage::crd::accept(new, &since);
    }
    if info.group.is_empty() && info.plural == "services" {
        if state.config.admission.deny_service_external_ips {
            deny_external_ips(Some(old), new)?;
        }
        let new_type = new
            .pointer("/spec/type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_string();
        // An ExternalName Service has no cluster IP to keep (the update dropped it).
        let keeps_cluster_ip = new_type != "ExternalName";
        for field in ["clusterIP", "clusterIPs", "ipFamilies"]
            .into_iter()
            .filter(|_| keeps_cluster_ip)
        {
            if let Some(v) = old.pointer(&format!("/spec/{field}")) {
                let current = new.pointer(&format!("/spec/{field}"));
                if current.is_none() || current == Some(&json!("")) {
                    new["spec"][field] = v.clone();
                } else if current != Some(v) && field != "ipFamilies" {
                    let name = new
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    return Err(ApiError::invalid(
                        &info.group,
                        &info.kind,
                        name,
                        vec![StatusCause {
                            reason: Some("FieldValueInvalid".into()),
                            message: Some(format!(
                                "Invalid value: {}: field is immutable",
                                current.map(|c| c.to_string()).unwrap_or_default()
                            )),
                            field: Some(format!("spec.{field}")),
                        }],
                    ));
                }
            }
        }
        // Keep allocated node ports when a client re-sends ports without them (only for
        // types that have node ports: a change to ClusterIP drops them).
        let has_node_ports = matches!(new_type.as_str(), "NodePort" | "LoadBalancer");
        if let (true, Some(old_ports), Some(new_ports)) = (
            has_node_ports,
            old.pointer("/spec/ports")
                .and_then(Value::as_array)
                .cloned(),
            new.pointer_mut("/spec/ports").and_then(Value::as_array_mut),
        ) {
            for p in new_ports.iter_mut() {
                if p.get("nodePort").is_none()
                    && let Some(old_p) = old_ports.iter().find(|o| o.get("port") == p.get("port"))
                    && let Some(n) = old_p.get("nodePort")
                {
                    p["nodePort"] = n.clone();
                }
            }
        }
        if has_node_ports {
            allocate_update_node_ports(state, old, new).await?;
        }
    }
    Ok(())
}

/// The validating admissions, run after field validation as kube-apiserver runs them:
/// today the PodSecurity admission of pods, workload templates and namespaces. Returns the
/// warnings for the client; `old` is set on updates.
pub fn validate(
    state: &AppState,
    info: &ResourceInfo,
    subresource: Option<&str>,
    old: Option<&Value>,
    object: &Value,
) -> Result<Vec<String>, ApiError> {
    if info.custom || !pod_security::applies_to(&info.group, &info.plural) {
        return Ok(Vec::new());
    }
    let str_at = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
    let name = str_at("/metadata/name");
    let namespace = if info.plural == "namespaces" {
        name
    } else {
        str_at("/metadata/namespace")
    };
    let user = super::auth::authz::escalation::REQUESTER
        .try_with(|who| who.user.clone())
        .unwrap_or_default();
    let labels = state
        .cache
        .get(&format!("/registry/namespaces/{namespace}"))
        .and_then(|ns| serde_json::from_slice::<Value>(&ns.bytes).ok())
        .map(|ns| pod_security::labels_of(&ns));
    let pods = |ns: &str| -> Vec<Value> {
        let (pods, _) = state.cache.list(&format!("/registry/pods/{ns}/"), None);
        pods.iter()
            .filter_map(|p| serde_json::from_slice(&p.bytes).ok())
            .collect()
    };
    let request = pod_security::Request {
        group: &info.group,
        plural: &info.plural,
        subresource,
        namespace,
        name,
        user: &user,
        object,
        old,
    };
    pod_security::admit(&state.config.pod_security, &request, labels.as_ref(), &pods)
}

/// Runs after an object was stored (CRDs change what the server serves).
pub async fn after_write(state: &AppState, info: &ResourceInfo, object: &Value, revision: i64) {
    note_namespace_write(state, info, revision);
    if info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions" {
        super::storage::crd::register(state, object);
    }
}

/// Records a namespace write for the namespace check of later creates
/// (`AppState::namespace_written`).
fn note_namespace_write(state: &AppState, info: &ResourceInfo, revision: i64) {
    if info.group.is_empty() && info.plural == "namespaces" {
        state
            .namespace_written
            .fetch_max(revision, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Runs after an object was removed.
pub async fn after_delete(state: &AppState, info: &ResourceInfo, object: &Value, revision: i64) {
    note_namespace_write(state, info, revision);
    if info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions" {
        super::storage::crd::unregister(state, object);
        // Custom resources go with their definition (kube's customresourcecleanup).
        let group = object
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or("");
        let plural = object
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !group.is_empty() && !plural.is_empty() {
            let prefix = format!("/registry/{group}/{plural}/");
            let (objects, _) = state.cache.list(&prefix, None);
            for cached in objects {
                if let Err(e) = state.store.delete(cached.key.as_bytes(), None).await {
                    tracing::warn!(key = %cached.key, error = %e, "removing a custom resource of a deleted definition failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_service_external_ips_refuses_only_new_addresses() {
        let svc = |ips: Value| json!({"metadata": {"name": "s"}, "spec": {"externalIPs": ips}});
        let denied =
            |old: Option<&Value>, new: &Value| deny_external_ips(old, new).err().map(|e| e.message);
        let message = Some(format!(
            "services \"s\" is forbidden: {EXTERNAL_IPS_DENIED}"
        ));
        assert_eq!(denied(None, &svc(json!(["192.0.2.1"]))), message);
        assert_eq!(denied(None, &svc(json!([]))), None);
        assert_eq!(
            denied(None, &json!({"metadata": {"name": "s"}, "spec": {}})),
            None
        );
        let old = svc(json!(["192.0.2.1", "192.0.2.2"]));
        assert_eq!(denied(Some(&old), &svc(json!(["192.0.2.2"]))), None);
        assert_eq!(denied(Some(&old), &old.clone()), None);
        assert_eq!(
            denied(Some(&old), &svc(json!(["192.0.2.1", "192.0.2.3"]))),
            message
        );
    }
}
