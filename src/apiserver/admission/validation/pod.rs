//! Pod and PodSpec validation (kube's `ValidatePodCreate`, `ValidatePodSpec`,
//! `ValidatePodTemplateSpec`, `ValidatePodUpdate` in `pkg/apis/core/validation`):
//! containers and init containers (names, images, ports, env, resources, probes,
//! lifecycle, volume mounts, security context), volumes (exactly one source, names,
//! item paths), the spec's enums, tolerations, affinity, topology spread, host aliases,
//! DNS config, and on update the fields a Pod may not change. `workloads` validates every
//! pod template through `validate_pod_template`.
//!
//! Wording and field paths are kube's, quirks included (a mount's `subPath` error is
//! reported at `volumeMounts.subPath`, without the index, as kube does).

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::core::{quantity, validate_node_selector, validate_node_selector_requirements};
use super::field::{self, Bad, ErrorList, Path};
use super::meta::{self, NEGATIVE, array, nonnegative, normalized, str_of, string_list};
use super::names;
use super::service::{int_of, validate_port_num_or_name};

const MAX_INT32: i64 = i32::MAX as i64;
const NOT_POSITIVE: &str = "must be greater than zero";
const FILE_MODE: &str = "must be a number between 0 and 0777 (octal), both inclusive";
const RESTART_POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];
const DNS_POLICIES: [&str; 4] = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const PULL_POLICIES: [&str; 3] = ["Always", "IfNotPresent", "Never"];
const PORT_PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
/// kube's `ValidatePodUpdate` message; the changed fields follow on the next lines.
const POD_UPDATE_FORBIDDEN: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// Every volume source kube knows, in `validateVolumeSource`'s order.
const VOLUME_SOURCES: [&str; 30] = [
    "hostPath",
    "emptyDir",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "quobyte",
    "cinder",
    "cephfs",
    "flexVolume",
    "downwardAPI",
    "fc",
    "azureFile",
    "vsphereVolume",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "projected",
    "scaleIO",
    "configMap",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

pub fn validate_pod(new: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    let spec_path = Path::new("spec");
    validate_pod_spec(new.get("spec"), &spec_path, &HashSet::new(), errs);
    match old {
        Some(old) => validate_pod_update(new, old, errs),
        None => {
            // What only a create refuses (kube's ValidatePodCreate).
            if !array(new.pointer("/spec/ephemeralContainers")).is_empty() {
                errs.push(field::forbidden(
                    &spec_path.child("ephemeralContainers"),
                    "cannot be set on create",
                ));
            }
            if !str_of(new.pointer("/spec/nodeName")).is_empty()
                && !array(new.pointer("/spec/schedulingGates")).is_empty()
            {
                errs.push(field::forbidden(
                    &spec_path.child("nodeName"),
                    "cannot be set until all schedulingGates have been cleared",
                ));
            }
        }
    }
}

/// A pod template at `path` (`spec.template`, `template`, `spec.jobTemplate.spec.template`):
/// its labels and annotations, then its spec. `extra_volumes` are names a container may
/// mount besides the spec's volumes (a StatefulSet's `volumeClaimTemplates`).
pub fn validate_pod_template(
    template: Option<&Value>,
    path: &Path,
    extra_volumes: &HashSet<String>,
    errs: &mut ErrorList,
) {
    let Some(template) = template.filter(|t| !t.is_null()) else {
        errs.push(field::required(path, ""));
        return;
    };
    let meta_path = path.child("metadata");
    if let Some(labels) = template.pointer("/metadata/labels") {
        meta::validate_labels(labels, &meta_path.child("labels"), errs);
    }
    if let Some(annotations) = template.pointer("/metadata/annotations") {
        meta::validate_annotations(annotations, &meta_path.child("annotations"), errs);
    }
    let spec_path = path.child("spec");
    validate_pod_spec(template.get("spec"), &spec_path, extra_volumes, errs);
    if template
        .pointer("/spec/ephemeralContainers")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty())
    {
        errs.push(field::forbidden(
            &spec_path.child("ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
}

/// A PodSpec at `path` (`spec` of a Pod, `spec.template.spec` of a workload).
pub fn validate_pod_spec(
    spec: Option<&Value>,
    path: &Path,
    extra_volumes: &HashSet<String>,
    errs: &mut ErrorList,
) {
    let null = Value::Null;
    let spec = spec.unwrap_or(&null);
    let mut volumes = validate_volumes(array(spec.get("volumes")), &path.child("volumes"), errs);
    volumes.extend(extra_volumes.iter().cloned());
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool) == Some(true);

    let mut names_seen = HashSet::new();
    let init = array(spec.get("initContainers"));
    for (i, container) in init.iter().enumerate() {
        let at = path.child("initContainers").index(i);
        validate_container(container, &at, &volumes, ContainerKind::Init, errs);
        check_unique_name(container, &at, &mut names_seen, errs);
    }
    let containers_path = path.child("containers");
    let containers = array(spec.get("containers"));
    if containers.is_empty() {
        errs.push(field::required(&containers_path, ""));
    }
    for (i, container) in containers.iter().enumerate() {
        let at = containers_path.index(i);
        validate_container(container, &at, &volumes, ContainerKind::Regular, errs);
        check_unique_name(container, &at, &mut names_seen, errs);
        if host_network {
            for (j, port) in array(container.get("ports")).iter().enumerate() {
                let host_port = int_of(port.get("hostPort"));
                if host_port != 0 && host_port != int_of(port.get("containerPort")) {
                    errs.push(field::invalid(
                        &at.child("ports").index(j).child("hostPort"),
                        host_port,
                        "must match `containerPort` when `hostNetwork` is true",
                    ));
                }
            }
        }
    }
    check_unique_host_ports(init, &path.child("initContainers"), errs);
    check_unique_host_ports(containers, &containers_path, errs);

    validate_restart_policy(
        spec.get("restartPolicy"),
        &path.child("restartPolicy"),
        errs,
    );
    let dns_policy = str_of(spec.get("dnsPolicy"));
    match dns_policy {
        "" => errs.push(field::required(&path.child("dnsPolicy"), "")),
        p if DNS_POLICIES.contains(&p) => {}
        p => errs.push(field::not_supported(
            &path.child("dnsPolicy"),
            p,
            &DNS_POLICIES,
        )),
    }
    validate_dns_config(
        spec.get("dnsConfig").filter(|v| !v.is_null()),
        dns_policy,
        &path.child("dnsConfig"),
        errs,
    );
    if let Some(selector) = spec.get("nodeSelector") {
        meta::validate_labels(selector, &path.child("nodeSelector"), errs);
    }
    for key in ["serviceAccountName", "nodeName", "priorityClassName"] {
        let value = str_of(spec.get(key));
        if !value.is_empty() {
            errs.extend(field::invalid_each(
                &path.child(key),
                value,
                names::dns1123_subdomain(value),
            ));
        }
    }
    for key in ["hostname", "subdomain"] {
        let value = str_of(spec.get(key));
        if !value.is_empty() {
            errs.extend(field::invalid_each(
                &path.child(key),
                value,
                names::dns1123_label(value),
            ));
        }
    }
    if let Some(deadline) = spec.get("activeDeadlineSeconds").filter(|v| !v.is_null()) {
        let value = deadline.as_i64().unwrap_or(0);
        if !(1..=MAX_INT32).contains(&value) {
            errs.push(field::invalid(
                &path.child("activeDeadlineSeconds"),
                value,
                &names::inclusive_range_error(1, MAX_INT32),
            ));
        }
    }
    validate_tolerations(
        array(spec.get("tolerations")),
        &path.child("tolerations"),
        errs,
    );
    if let Some(affinity) = spec.get("affinity").filter(|v| !v.is_null()) {
        validate_affinity(affinity, &path.child("affinity"), errs);
    }
    validate_topology_spread(
        array(spec.get("topologySpreadConstraints")),
        &path.child("topologySpreadConstraints"),
        errs,
    );
    for (i, alias) in array(spec.get("hostAliases")).iter().enumerate() {
        let at = path.child("hostAliases").index(i);
        let ip = str_of(alias.get("ip"));
        errs.extend(field::invalid_each(&at.child("ip"), ip, names::ip(ip)));
        for (j, hostname) in string_list(alias.get("hostnames")).iter().enumerate() {
            errs.extend(field::invalid_each(
                &at.child("hostnames").index(j),
                hostname,
                names::dns1123_subdomain(hostname),
            ));
        }
    }
    if let Some(context) = spec.get("securityContext").filter(|v| !v.is_null()) {
        validate_pod_security_context(context, &path.child("securityContext"), errs);
    }
    for (i, gate) in array(spec.get("readinessGates")).iter().enumerate() {
        let condition = str_of(gate.get("conditionType"));
        errs.extend(field::invalid_each(
            &path.child("readinessGates").index(i).child("conditionType"),
            condition,
            names::qualified_name(condition),
        ));
    }
    if let Some(overhead) = spec.get("overhead").filter(|v| !v.is_null()) {
        // As kube: the resource-requirements check on `{limits: overhead}`, so its
        // paths read `spec.overhead.limits[...]`.
        let as_limits = serde_json::json!({ "limits": overhead });
        validate_resources(&as_limits, &path.child("overhead"), errs);
    }
}

fn check_unique_name(
    container: &Value,
    at: &Path,
    seen: &mut HashSet<String>,
    errs: &mut ErrorList,
) {
    let name = str_of(container.get("name"));
    if !name.is_empty() && names::dns1123_label(name).is_empty() && !seen.insert(name.to_string()) {
        errs.push(field::duplicate(&at.child("name"), name));
    }
}

/// kube's `AccumulateUniqueHostPorts`: one `hostIP/protocol/hostPort` per pod.
fn check_unique_host_ports(containers: &[Value], path: &Path, errs: &mut ErrorList) {
    let mut seen = HashSet::new();
    for (i, container) in containers.iter().enumerate() {
        for (j, port) in array(container.get("ports")).iter().enumerate() {
            let host_port = int_of(port.get("hostPort"));
            if host_port == 0 {
                continue;
            }
            let key = format!(
                "{}/{}/{host_port}",
                str_of(port.get("hostIP")),
                str_of(port.get("protocol"))
            );
            if !seen.insert(key.clone()) {
                errs.push(field::duplicate(
                    &path.index(i).child("ports").index(j).child("hostPort"),
                    key,
                ));
            }
        }
    }
}

fn validate_restart_policy(policy: Option<&Value>, path: &Path, errs: &mut ErrorList) {
    match str_of(policy) {
        "" => errs.push(field::required(path, "")),
        p if RESTART_POLICIES.contains(&p) => {}
        p => errs.push(field::not_supported(path, p, &RESTART_POLICIES)),
    }
}

fn validate_dns_config(config: Option<&Value>, policy: &str, path: &Path, errs: &mut ErrorList) {
    if policy == "None" && config.is_none() {
        errs.push(field::required(
            path,
            "must provide `dnsConfig` when `dnsPolicy` is None",
        ));
        return;
    }
    let Some(config) = config else {
        return;
    };
    let nameservers = string_list(config.get("nameservers"));
    if policy == "None" && nameservers.is_empty() {
        errs.push(field::required(
            &path.child("nameservers"),
            "must provide at least one DNS nameserver when `dnsPolicy` is None",
        ));
    }
    if nameservers.len() > 3 {
        errs.push(field::invalid(
            &path.child("nameservers"),
            meta::string_slice_value(config.get("nameservers")),
            "must not have more than 3 nameservers",
        ));
    }
    for (i, ns) in nameservers.iter().enumerate() {
        errs.extend(field::invalid_each(
            &path.child("nameservers").index(i),
            ns,
            names::ip(ns),
        ));
    }
    let searches = string_list(config.get("searches"));
    if searches.len() > 32 {
        errs.push(field::invalid(
            &path.child("searches"),
            meta::string_slice_value(config.get("searches")),
            "must not have more than 32 search paths",
        ));
    }
    for (i, search) in searches.iter().enumerate() {
        let trimmed = search.strip_suffix('.').unwrap_or(search);
        errs.extend(field::invalid_each(
            &path.child("searches").index(i),
            search,
            names::dns1123_subdomain(trimmed),
        ));
    }
    for (i, option) in array(config.get("options")).iter().enumerate() {
        if str_of(option.get("name")).is_empty() {
            errs.push(field::required(
                &path.child("options").index(i),
                "Option.Name must not be empty",
            ));
        }
    }
}

// ---------------------------------------------------------------- volumes

/// The spec's volumes; returns the names a container may mount (a volume with errors is
/// left out, so its mounts are also reported, as kube does).
fn validate_volumes(volumes: &[Value], path: &Path, errs: &mut ErrorList) -> HashSet<String> {
    let mut valid = HashSet::new();
    let mut all = HashSet::new();
    for (i, volume) in volumes.iter().enumerate() {
        let at = path.index(i);
        let mut own = ErrorList::new();
        validate_volume_source(volume, &at, &mut own);
        let name = str_of(volume.get("name"));
        let name_path = at.child("name");
        if name.is_empty() {
            own.push(field::required(&name_path, ""));
        } else {
            own.extend(field::invalid_each(
                &name_path,
                name,
                names::dns1123_label(name),
            ));
        }
        if all.contains(name) {
            own.push(field::duplicate(&name_path, name));
        }
        all.insert(name.to_string());
        if own.is_empty() {
            valid.insert(name.to_string());
        } else {
            errs.extend(own);
        }
    }
    valid
}

fn validate_volume_source(volume: &Value, path: &Path, errs: &mut ErrorList) {
    let mut count = 0;
    for source in VOLUME_SOURCES {
        let Some(value) = volume.get(source).filter(|v| !v.is_null()) else {
            continue;
        };
        if count > 0 {
            errs.push(field::forbidden(
                &path.child(source),
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        count += 1;
        let at = path.child(source);
        match source {
            "hostPath" => validate_host_path(value, &at, errs),
            "emptyDir" => {
                if let Some(limit) = value.get("sizeLimit")
                    && quantity_of(limit).is_some_and(|q| q < 0.0)
                {
                    errs.push(field::forbidden(
                        &at.child("sizeLimit"),
                        "SizeLimit field must be a valid resource quantity",
                    ));
                }
            }
            "secret" => {
                require(value, "secretName", &at, errs);
                validate_projection(value, &at, errs);
            }
            "configMap" => {
                require(value, "name", &at, errs);
                validate_projection(value, &at, errs);
            }
            "persistentVolumeClaim" => {
                require(value, "claimName", &at, errs);
            }
            "nfs" => {
                require(value, "server", &at, errs);
                let nfs_path = str_of(value.get("path"));
                if nfs_path.is_empty() {
                    errs.push(field::required(&at.child("path"), ""));
                } else if !nfs_path.starts_with('/') {
                    errs.push(field::invalid(
                        &at.child("path"),
                        nfs_path,
                        "must be an absolute path",
                    ));
                }
            }
            "downwardAPI" => {
                mode_in_range(value.get("defaultMode"), &at.child("defaultMode"), errs);
                for (i, item) in array(value.get("items")).iter().enumerate() {
                    let item_path = at.child("items").index(i);
                    let p = str_of(item.get("path"));
                    if p.is_empty() {
                        errs.push(field::required(&item_path.child("path"), ""));
                    }
                    validate_local_non_reserved_path(p, &item_path.child("path"), errs);
                    mode_in_range(item.get("mode"), &item_path.child("mode"), errs);
                }
            }
            "projected" => {
                mode_in_range(value.get("defaultMode"), &at.child("defaultMode"), errs);
                for (i, projection) in array(value.get("sources")).iter().enumerate() {
                    let source_path = at.child("sources").index(i);
                    for kind in ["secret", "configMap", "downwardAPI"] {
                        if let Some(inner) = projection.get(kind).filter(|v| !v.is_null()) {
                            validate_items(inner, &source_path.child(kind), errs);
                        }
                    }
                }
            }
            "csi" => {
                require(value, "driver", &at, errs);
            }
            _ => {}
        }
    }
    if count == 0 {
        errs.push(field::required(path, "must specify a volume type"));
    }
}

fn validate_host_path(source: &Value, path: &Path, errs: &mut ErrorList) {
    const TYPES: [&str; 8] = [
        "",
        "DirectoryOrCreate",
        "Directory",
        "FileOrCreate",
        "File",
        "Socket",
        "CharDevice",
        "BlockDevice",
    ];
    let host_path = str_of(source.get("path"));
    if host_path.is_empty() {
        errs.push(field::required(&path.child("path"), ""));
        return;
    }
    validate_no_backsteps(host_path, &path.child("path"), errs);
    let kind = str_of(source.get("type"));
    if !TYPES.contains(&kind) {
        errs.push(field::not_supported(&path.child("type"), kind, &TYPES));
    }
}

/// A secret or configMap source: `defaultMode` and `items`.
fn validate_projection(source: &Value, path: &Path, errs: &mut ErrorList) {
    mode_in_range(source.get("defaultMode"), &path.child("defaultMode"), errs);
    validate_items(source, path, errs);
}

/// kube's `validateKeyToPath` for each of `items` (downward API items have no key).
fn validate_items(source: &Value, path: &Path, errs: &mut ErrorList) {
    for (i, item) in array(source.get("items")).iter().enumerate() {
        let at = path.child("items").index(i);
        if item.get("fieldRef").is_none() && item.get("resourceFieldRef").is_none() {
            require(item, "key", &at, errs);
        }
        let p = str_of(item.get("path"));
        if p.is_empty() {
            errs.push(field::required(&at.child("path"), ""));
        }
        validate_local_non_reserved_path(p, &at.child("path"), errs);
        mode_in_range(item.get("mode"), &at.child("mode"), errs);
    }
}

/// `Required value` at `path` when `value` is empty, else one `Invalid` per message of
/// the format check `valid` (kube's `if len(x) == 0 { Required } else { IsX(x) }`).
fn required_and_valid(
    value: &str,
    path: &Path,
    valid: fn(&str) -> Vec<String>,
    errs: &mut ErrorList,
) {
    if value.is_empty() {
        required_at(path, errs);
    } else {
        errs.extend(field::invalid_each(path, value, valid(value)));
    }
}

/// `Required value` at `path.key` when that string field is empty or absent.
fn require(object: &Value, key: &str, path: &Path, errs: &mut ErrorList) {
    if str_of(object.get(key)).is_empty() {
        required_at(&path.child(key), errs);
    }
}

fn required_at(path: &Path, errs: &mut ErrorList) {
    errs.push(field::required(path, ""));
}

fn mode_in_range(mode: Option<&Value>, path: &Path, errs: &mut ErrorList) {
    if let Some(mode) = mode.filter(|v| !v.is_null()) {
        let value = mode.as_i64().unwrap_or(-1);
        if !(0..=0o777).contains(&value) {
            errs.push(field::invalid(path, mode, FILE_MODE));
        }
    }
}

fn validate_no_backsteps(target: &str, path: &Path, errs: &mut ErrorList) {
    if target.split('/').any(|part| part == "..") {
        errs.push(field::invalid(path, target, "must not contain '..'"));
    }
}

fn validate_local_descending_path(target: &str, path: &Path, errs: &mut ErrorList) {
    if target.starts_with('/') {
        errs.push(field::invalid(path, target, "must be a relative path"));
    }
    validate_no_backsteps(target, path, errs);
}

fn validate_local_non_reserved_path(target: &str, path: &Path, errs: &mut ErrorList) {
    validate_local_descending_path(target, path, errs);
    if target.starts_with("..") && !target.starts_with("../") {
        errs.push(field::invalid(path, target, "must not start with '..'"));
    }
}

// ---------------------------------------------------------------- containers

#[derive(Clone, Copy, PartialEq, Eq)]
enum ContainerKind {
    Regular,
    Init,
}

fn validate_container(
    container: &Value,
    at: &Path,
    volumes: &HashSet<String>,
    kind: ContainerKind,
    errs: &mut ErrorList,
) {
    let name = str_of(container.get("name"));
    required_and_valid(name, &at.child("name"), names::dns1123_label, errs);
    let image = str_of(container.get("image"));
    if image.is_empty() {
        errs.push(field::required(&at.child("image"), ""));
    } else if image != image.trim() {
        errs.push(field::invalid(
            &at.child("image"),
            image,
            "must not have leading or trailing whitespace",
        ));
    }
    match str_of(container.get("imagePullPolicy")) {
        "" => errs.push(field::required(&at.child("imagePullPolicy"), "")),
        p if PULL_POLICIES.contains(&p) => {}
        p => errs.push(field::not_supported(
            &at.child("imagePullPolicy"),
            p,
            &PULL_POLICIES,
        )),
    }
    match str_of(container.get("terminationMessagePolicy")) {
        "" => errs.push(field::required(&at.child("terminationMessagePolicy"), "")),
        "File" | "FallbackToLogsOnError" => {}
        p => errs.push(field::not_supported(
            &at.child("terminationMessagePolicy"),
            p,
            &["File", "FallbackToLogsOnError"],
        )),
    }
    let restart = container.get("restartPolicy").filter(|v| !v.is_null());
    let sidecar = str_of(restart) == "Always";
    match (kind, restart) {
        (_, None) => {}
        (ContainerKind::Regular, Some(_)) => errs.push(field::forbidden(
            &at.child("restartPolicy"),
            "may not be set for non-init containers",
        )),
        (ContainerKind::Init, Some(policy)) if !sidecar => errs.push(field::not_supported(
            &at.child("restartPolicy"),
            policy,
            &["Always"],
        )),
        _ => {}
    }
    validate_container_ports(array(container.get("ports")), &at.child("ports"), errs);
    validate_env(array(container.get("env")), &at.child("env"), errs);
    validate_env_from(array(container.get("envFrom")), &at.child("envFrom"), errs);
    if let Some(resources) = container.get("resources").filter(|v| !v.is_null()) {
        validate_resources(resources, &at.child("resources"), errs);
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(value) = container.get(probe).filter(|v| !v.is_null()) else {
            continue;
        };
        let probe_path = at.child(probe);
        if kind == ContainerKind::Init && !sidecar {
            errs.push(field::forbidden(
                &probe_path,
                "may not be set for init containers without restartPolicy=Always",
            ));
            continue;
        }
        validate_probe(value, &probe_path, errs);
        if probe != "readinessProbe" {
            if let Some(threshold) = value.get("successThreshold").and_then(Value::as_i64)
                && threshold != 1
            {
                errs.push(field::invalid(
                    &probe_path.child("successThreshold"),
                    threshold,
                    "must be 1",
                ));
            }
        } else if value
            .get("terminationGracePeriodSeconds")
            .is_some_and(|v| !v.is_null())
        {
            errs.push(field::invalid(
                &probe_path.child("terminationGracePeriodSeconds"),
                value
                    .get("terminationGracePeriodSeconds")
                    .map(Bad::from)
                    .unwrap_or(Bad::Null),
                "must not be set for readinessProbes",
            ));
        }
    }
    if let Some(lifecycle) = container.get("lifecycle").filter(|v| !v.is_null()) {
        for hook in ["postStart", "preStop"] {
            if let Some(handler) = lifecycle.get(hook).filter(|v| !v.is_null()) {
                validate_handler(
                    handler,
                    &["exec", "httpGet", "tcpSocket", "sleep"],
                    &at.child("lifecycle").child(hook),
                    errs,
                );
            }
        }
    }
    validate_volume_mounts(
        array(container.get("volumeMounts")),
        volumes,
        &at.child("volumeMounts"),
        errs,
    );
    if let Some(context) = container.get("securityContext").filter(|v| !v.is_null()) {
        validate_security_context(context, &at.child("securityContext"), errs);
    }
}

fn validate_container_ports(ports: &[Value], path: &Path, errs: &mut ErrorList) {
    let mut names_seen = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let at = path.index(i);
        let name = str_of(port.get("name"));
        if !name.is_empty() {
            let problems = names::port_name(name);
            if !problems.is_empty() {
                errs.extend(field::invalid_each(&at.child("name"), name, problems));
            } else if !names_seen.insert(name) {
                errs.push(field::duplicate(&at.child("name"), name));
            }
        }
        let container_port = int_of(port.get("containerPort"));
        if container_port == 0 {
            errs.push(field::required(&at.child("containerPort"), ""));
        } else {
            errs.extend(meta::invalid_int_each(
                &at.child("containerPort"),
                container_port,
                names::port_number(container_port),
            ));
        }
        let host_port = int_of(port.get("hostPort"));
        if host_port != 0 {
            errs.extend(meta::invalid_int_each(
                &at.child("hostPort"),
                host_port,
                names::port_number(host_port),
            ));
        }
        match str_of(port.get("protocol")) {
            "" => errs.push(field::required(&at.child("protocol"), "")),
            p if PORT_PROTOCOLS.contains(&p) => {}
            p => errs.push(field::not_supported(
                &at.child("protocol"),
                p,
                &PORT_PROTOCOLS,
            )),
        }
        let host_ip = str_of(port.get("hostIP"));
        if !host_ip.is_empty() {
            errs.extend(field::invalid_each(
                &at.child("hostIP"),
                host_ip,
                names::ip(host_ip),
            ));
        }
    }
}

fn validate_env(vars: &[Value], path: &Path, errs: &mut ErrorList) {
    for (i, var) in vars.iter().enumerate() {
        let at = path.index(i);
        let name = str_of(var.get("name"));
        required_and_valid(name, &at.child("name"), names::env_var_name, errs);
        let Some(from) = var.get("valueFrom").filter(|v| !v.is_null()) else {
            continue;
        };
        let from_path = at.child("valueFrom");
        let sources: Vec<&str> = [
            "fieldRef",
            "resourceFieldRef",
            "configMapKeyRef",
            "secretKeyRef",
            "fileKeyRef",
        ]
        .into_iter()
        .filter(|k| from.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
        if !str_of(var.get("value")).is_empty() {
            errs.push(field::invalid(
                &from_path,
                "",
                "may not be specified when `value` is not empty",
            ));
        }
        match sources.len() {
            0 => errs.push(field::invalid(
                &from_path,
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            )),
            1 => {
                let source = sources[0];
                let inner = from.get(source).unwrap_or(&Value::Null);
                let inner_path = from_path.child(source);
                match source {
                    "configMapKeyRef" | "secretKeyRef" => {
                        let key = str_of(inner.get("key"));
                        required_and_valid(key, &inner_path.child("key"), names::config_map_key, errs);
                        let name = str_of(inner.get("name"));
                        if name.is_empty() {
                            errs.push(field::required(&inner_path.child("name"), ""));
                        }
                    }
                    "fieldRef" => {
                        require(inner, "fieldPath", &inner_path, errs);
                    }
                    "resourceFieldRef" => {
                        require(inner, "resource", &inner_path, errs);
                    }
                    _ => {}
                }
            }
            _ => errs.push(field::invalid(
                &from_path,
                "",
                "may not have more than one field specified at a time",
            )),
        }
    }
}

fn validate_env_from(sources: &[Value], path: &Path, errs: &mut ErrorList) {
    for (i, source) in sources.iter().enumerate() {
        let at = path.index(i);
        let prefix = str_of(source.get("prefix"));
        if !prefix.is_empty() {
            errs.extend(field::invalid_each(
                &at.child("prefix"),
                prefix,
                names::env_var_name(prefix),
            ));
        }
        let refs: Vec<&str> = ["configMapRef", "secretRef"]
            .into_iter()
            .filter(|k| source.get(*k).is_some_and(|v| !v.is_null()))
            .collect();
        match refs.len() {
            0 => errs.push(field::invalid(
                &at,
                "",
                "must specify one of: `configMapRef` or `secretRef`",
            )),
            1 => {
                let name = str_of(source.get(refs[0]).and_then(|r| r.get("name")));
                if name.is_empty() {
                    errs.push(field::required(&at.child(refs[0]).child("name"), ""));
                }
            }
            _ => errs.push(field::invalid(
                &at,
                "",
                "may not have more than one field specified at a time",
            )),
        }
    }
}

/// A quantity given as a string or a bare JSON number.
fn quantity_of(value: &Value) -> Option<f64> {
    match value {
        Value::String(s) => quantity(s),
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

fn quantity_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Resource names a container may use without a domain (`IsStandardContainerResourceName`).
fn is_standard_container_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-")
}

/// Names kube knows without a domain (`IsStandardResourceName`), container or quota ones.
fn is_standard_resource(name: &str) -> bool {
    is_standard_container_resource(name)
        || matches!(
            name,
            "pods"
                | "services"
                | "replicationcontrollers"
                | "resourcequotas"
                | "secrets"
                | "configmaps"
                | "persistentvolumeclaims"
                | "storage"
                | "services.nodeports"
                | "services.loadbalancers"
        )
        || name.starts_with("requests.")
        || name.starts_with("limits.")
}

/// A resource in the `kubernetes.io` namespace or without one (`IsNativeResource`).
fn is_native_resource(name: &str) -> bool {
    match name.split_once('/') {
        None => true,
        Some((domain, _)) => domain == "kubernetes.io" || domain.ends_with(".kubernetes.io"),
    }
}

/// Requests may be below limits only for native resources other than huge pages.
fn overcommit_allowed(name: &str) -> bool {
    is_native_resource(name) && !name.starts_with("hugepages-")
}

fn validate_resource_name(name: &str, path: &Path, errs: &mut ErrorList) {
    let problems = names::qualified_name(name);
    let qualified = problems.is_empty();
    errs.extend(field::invalid_each(path, name, problems));
    if !name.contains('/') {
        if qualified && !is_standard_resource(name) {
            errs.push(field::invalid(
                path,
                name,
                "must be a standard resource type or fully qualified",
            ));
        }
        if !is_standard_container_resource(name) {
            errs.push(field::invalid(
                path,
                name,
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native_resource(name) && name.starts_with("requests.") {
        errs.push(field::invalid(
            path,
            name,
            "doesn't follow extended resource name standard",
        ));
    }
}

fn validate_quantity(name: &str, value: &Value, path: &Path, errs: &mut ErrorList) {
    match quantity_of(value) {
        None => errs.push(field::invalid(
            path,
            quantity_text(value),
            "must be a valid resource quantity",
        )),
        Some(q) if q < 0.0 => errs.push(field::invalid(path, quantity_text(value), NEGATIVE)),
        Some(q) if !is_native_resource(name) && q.fract() != 0.0 => {
            errs.push(field::invalid(
                path,
                quantity_text(value),
                "must be an integer",
            ));
        }
        Some(_) => {}
    }
}

fn validate_resources(resources: &Value, path: &Path, errs: &mut ErrorList) {
    let empty = Map::new();
    let limits = resources
        .get("limits")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let requests = resources
        .get("requests")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let limits_path = path.child("limits");
    let requests_path = path.child("requests");
    for (name, value) in sorted(limits) {
        let at = limits_path.key(name);
        validate_resource_name(name, &at, errs);
        validate_quantity(name, value, &at, errs);
    }
    for (name, value) in sorted(requests) {
        let at = requests_path.key(name);
        validate_resource_name(name, &at, errs);
        validate_quantity(name, value, &at, errs);
        let Some(request) = quantity_of(value) else {
            continue;
        };
        match limits.get(name) {
            Some(limit_value) => {
                let Some(limit) = quantity_of(limit_value) else {
                    continue;
                };
                let limit_text = quantity_text(limit_value);
                if !overcommit_allowed(name) && request != limit {
                    errs.push(field::invalid(
                        &requests_path,
                        quantity_text(value),
                        &format!("must be equal to {name} limit of {limit_text}"),
                    ));
                } else if request > limit {
                    errs.push(field::invalid(
                        &requests_path,
                        quantity_text(value),
                        &format!("must be less than or equal to {name} limit of {limit_text}"),
                    ));
                }
            }
            None if !overcommit_allowed(name) => errs.push(field::required(
                &limits_path,
                "Limit must be set for non overcommitable resources",
            )),
            None => {}
        }
    }
}

fn sorted(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}

fn validate_probe(probe: &Value, path: &Path, errs: &mut ErrorList) {
    validate_handler(probe, &["exec", "httpGet", "tcpSocket", "grpc"], path, errs);
    for key in [
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ] {
        nonnegative(probe.get(key), &path.child(key), errs);
    }
    if let Some(grace) = probe
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64)
        && grace <= 0
    {
        errs.push(field::invalid(
            &path.child("terminationGracePeriodSeconds"),
            grace,
            NOT_POSITIVE,
        ));
    }
}

/// Exactly one handler of `kinds` (a probe's or a lifecycle hook's).
fn validate_handler(handler: &Value, kinds: &[&str], path: &Path, errs: &mut ErrorList) {
    let mut count = 0;
    for kind in kinds {
        let Some(action) = handler.get(*kind).filter(|v| !v.is_null()) else {
            continue;
        };
        let at = path.child(kind);
        if count > 0 {
            errs.push(field::forbidden(
                &at,
                "may not specify more than 1 handler type",
            ));
            continue;
        }
        count += 1;
        match *kind {
            "exec" if array(action.get("command")).is_empty() => {
                required_at(&at.child("command"), errs)
            }
            "httpGet" => {
                require(action, "path", &at, errs);
                validate_port_num_or_name(action.get("port"), &at.child("port"), errs);
                let scheme = str_of(action.get("scheme"));
                if !["HTTP", "HTTPS"].contains(&scheme) {
                    errs.push(field::not_supported(
                        &at.child("scheme"),
                        scheme,
                        &["HTTP", "HTTPS"],
                    ));
                }
                for (i, header) in array(action.get("httpHeaders")).iter().enumerate() {
                    let name = str_of(header.get("name"));
                    errs.extend(field::invalid_each(
                        &at.child("httpHeaders").index(i).child("name"),
                        name,
                        names::http_header_name(name),
                    ));
                }
            }
            "tcpSocket" => validate_port_num_or_name(action.get("port"), &at.child("port"), errs),
            "grpc" => {
                let port = int_of(action.get("port"));
                errs.extend(meta::invalid_int_each(
                    &at.child("port"),
                    port,
                    names::port_number(port),
                ));
            }
            "sleep" => {
                let seconds = int_of(action.get("seconds"));
                if seconds <= 0 {
                    errs.push(field::invalid(&at.child("seconds"), seconds, NOT_POSITIVE));
                }
            }
            _ => {}
        }
    }
    if count == 0 {
        errs.push(field::required(path, "must specify a handler type"));
    }
}

fn validate_volume_mounts(
    mounts: &[Value],
    volumes: &HashSet<String>,
    path: &Path,
    errs: &mut ErrorList,
) {
    let mut mount_points = HashSet::new();
    for (i, mount) in mounts.iter().enumerate() {
        let at = path.index(i);
        let name = str_of(mount.get("name"));
        if name.is_empty() {
            errs.push(field::required(&at.child("name"), ""));
        }
        if !volumes.contains(name) {
            errs.push(field::not_found(&at.child("name"), name));
        }
        let mount_path = str_of(mount.get("mountPath"));
        if mount_path.is_empty() {
            errs.push(field::required(&at.child("mountPath"), ""));
        }
        if !mount_points.insert(mount_path) {
            errs.push(field::invalid(
                &at.child("mountPath"),
                mount_path,
                "must be unique",
            ));
        }
        let sub_path = str_of(mount.get("subPath"));
        if !sub_path.is_empty() {
            // kube reports both at `volumeMounts.subPath`, without the index.
            validate_local_descending_path(sub_path, &path.child("subPath"), errs);
        }
        let sub_path_expr = str_of(mount.get("subPathExpr"));
        if !sub_path_expr.is_empty() {
            if !sub_path.is_empty() {
                errs.push(field::invalid(
                    &at.child("subPathExpr"),
                    sub_path_expr,
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            validate_local_descending_path(sub_path_expr, &path.child("subPathExpr"), errs);
        }
        if let Some(propagation) = mount.get("mountPropagation").filter(|v| !v.is_null()) {
            const MODES: [&str; 3] = ["Bidirectional", "HostToContainer", "None"];
            if !MODES.contains(&propagation.as_str().unwrap_or("")) {
                errs.push(field::not_supported(
                    &at.child("mountPropagation"),
                    propagation,
                    &MODES,
                ));
            }
        }
    }
}

// ---------------------------------------------------------------- security

fn id_in_range(value: Option<&Value>, path: &Path, errs: &mut ErrorList) {
    if let Some(id) = value.filter(|v| !v.is_null()) {
        let n = id.as_i64().unwrap_or(-1);
        if !(0..=MAX_INT32).contains(&n) {
            errs.push(field::invalid(
                path,
                id,
                &names::inclusive_range_error(0, MAX_INT32),
            ));
        }
    }
}

fn validate_seccomp(profile: Option<&Value>, path: &Path, errs: &mut ErrorList) {
    let Some(profile) = profile.filter(|v| !v.is_null()) else {
        return;
    };
    let kind = str_of(profile.get("type"));
    let localhost = str_of(profile.get("localhostProfile"));
    match kind {
        "Localhost" => {
            if localhost.is_empty() {
                errs.push(field::required(
                    &path.child("localhostProfile"),
                    "must be set when seccomp type is Localhost",
                ));
            }
        }
        "RuntimeDefault" | "Unconfined" => {
            if !localhost.is_empty() {
                errs.push(field::invalid(
                    &path.child("localhostProfile"),
                    localhost,
                    "can only be set when seccomp type is Localhost",
                ));
            }
        }
        other => errs.push(field::not_supported(
            &path.child("type"),
            other,
            &["Localhost", "RuntimeDefault", "Unconfined"],
        )),
    }
}

fn validate_pod_security_context(context: &Value, path: &Path, errs: &mut ErrorList) {
    for key in ["runAsUser", "runAsGroup", "fsGroup"] {
        id_in_range(context.get(key), &path.child(key), errs);
    }
    for (i, group) in array(context.get("supplementalGroups")).iter().enumerate() {
        id_in_range(
            Some(group),
            &path.child("supplementalGroups").index(i),
            errs,
        );
    }
    if let Some(policy) = context.get("fsGroupChangePolicy").filter(|v| !v.is_null()) {
        const POLICIES: [&str; 2] = ["OnRootMismatch", "Always"];
        if !POLICIES.contains(&policy.as_str().unwrap_or("")) {
            errs.push(field::not_supported(
                &path.child("fsGroupChangePolicy"),
                policy,
                &POLICIES,
            ));
        }
    }
    validate_seccomp(
        context.get("seccompProfile"),
        &path.child("seccompProfile"),
        errs,
    );
    for (i, sysctl) in array(context.get("sysctls")).iter().enumerate() {
        let at = path.child("sysctls").index(i);
        let name = str_of(sysctl.get("name"));
        if name.is_empty() {
            errs.push(field::required(&at.child("name"), ""));
        } else if !is_sysctl_name(name) {
            errs.push(field::invalid(
                &at.child("name"),
                name,
                "must have at most 253 characters and match regex ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$",
            ));
        }
    }
}

/// kube's `IsValidSysctlName`: dot- or slash-separated lowercase segments.
fn is_sysctl_name(name: &str) -> bool {
    name.len() <= 253
        && name.split(['.', '/']).all(|segment| {
            let b = segment.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|&c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'_'
                })
        })
}

fn validate_security_context(context: &Value, path: &Path, errs: &mut ErrorList) {
    for key in ["runAsUser", "runAsGroup"] {
        id_in_range(context.get(key), &path.child(key), errs);
    }
    let privileged = context.get("privileged").and_then(Value::as_bool) == Some(true);
    let no_escalation = context
        .get("allowPrivilegeEscalation")
        .and_then(Value::as_bool)
        == Some(false);
    if privileged && no_escalation {
        errs.push(field::invalid(
            path,
            Bad::Raw(context.to_string()),
            "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
        ));
    }
    let adds_sys_admin = string_list(context.pointer("/capabilities/add"))
        .iter()
        .any(|c| c == "CAP_SYS_ADMIN" || c == "SYS_ADMIN");
    if adds_sys_admin && no_escalation {
        errs.push(field::invalid(
            path,
            Bad::Raw(context.to_string()),
            "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
        ));
    }
    if let Some(proc_mount) = context.get("procMount").filter(|v| !v.is_null()) {
        const MOUNTS: [&str; 2] = ["Default", "Unmasked"];
        if !MOUNTS.contains(&proc_mount.as_str().unwrap_or("")) {
            errs.push(field::not_supported(
                &path.child("procMount"),
                proc_mount,
                &MOUNTS,
            ));
        }
    }
    validate_seccomp(
        context.get("seccompProfile"),
        &path.child("seccompProfile"),
        errs,
    );
}

// ---------------------------------------------------------------- scheduling

fn validate_tolerations(tolerations: &[Value], path: &Path, errs: &mut ErrorList) {
    for (i, toleration) in tolerations.iter().enumerate() {
        let at = path.index(i);
        let key = str_of(toleration.get("key"));
        let operator = str_of(toleration.get("operator"));
        let value = str_of(toleration.get("value"));
        let effect = str_of(toleration.get("effect"));
        if !key.is_empty() {
            meta::validate_label_name(key, &at.child("key"), errs);
        }
        if key.is_empty() && operator != "Exists" {
            errs.push(field::invalid(
                &at.child("operator"),
                operator,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if toleration
            .get("tolerationSeconds")
            .is_some_and(|v| !v.is_null())
            && effect != "NoExecute"
        {
            errs.push(field::invalid(
                &at.child("effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "Equal" | "" => {
                let problems = names::label_value(value);
                if !problems.is_empty() {
                    errs.push(field::invalid(
                        &at.child("operator"),
                        value,
                        &problems.join(";"),
                    ));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errs.push(field::invalid(
                        &at.child("operator"),
                        Bad::Raw(toleration.to_string()),
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(field::not_supported(
                &at.child("operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() && !TAINT_EFFECTS.contains(&effect) {
            errs.push(field::not_supported(
                &at.child("effect"),
                effect,
                &TAINT_EFFECTS,
            ));
        }
    }
}

/// A node selector term of a pod's affinity: kube's requirement rules (values are not
/// checked as label values here, unlike a volume's) and `matchFields` on `metadata.name`.
fn validate_node_selector_term(term: &Value, path: &Path, errs: &mut ErrorList) {
    validate_node_selector_requirements(term, false, path, errs);
    validate_match_fields(term, path, errs);
}

/// A term's `matchFields`: only `metadata.name` is a node field selector key.
fn validate_match_fields(term: &Value, path: &Path, errs: &mut ErrorList) {
    for (i, requirement) in array(term.get("matchFields")).iter().enumerate() {
        let at = path.child("matchFields").index(i);
        if str_of(requirement.get("key")) != "metadata.name" {
            errs.push(field::invalid(
                &at.child("key"),
                str_of(requirement.get("key")),
                "not a valid field selector key",
            ));
        }
    }
}

fn validate_weight(term: &Value, path: &Path, errs: &mut ErrorList) {
    let weight = int_of(term.get("weight"));
    if !(1..=100).contains(&weight) {
        errs.push(field::invalid(
            &path.child("weight"),
            weight,
            "must be in the range 1-100",
        ));
    }
}

fn validate_pod_affinity_term(term: &Value, path: &Path, errs: &mut ErrorList) {
    if let Some(selector) = term.get("labelSelector") {
        meta::validate_label_selector(selector, &path.child("labelSelector"), errs);
    }
    if let Some(selector) = term.get("namespaceSelector") {
        meta::validate_label_selector(selector, &path.child("namespaceSelector"), errs);
    }
    for (i, namespace) in string_list(term.get("namespaces")).iter().enumerate() {
        errs.extend(field::invalid_each(
            &path.child("namespaces").index(i),
            namespace,
            names::dns1123_label(namespace),
        ));
    }
    let topology_key = str_of(term.get("topologyKey"));
    if topology_key.is_empty() {
        errs.push(field::required(
            &path.child("topologyKey"),
            "can not be empty",
        ));
    } else {
        meta::validate_label_name(topology_key, &path.child("topologyKey"), errs);
    }
}

fn validate_affinity(affinity: &Value, path: &Path, errs: &mut ErrorList) {
    const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
    const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";
    if let Some(node) = affinity.get("nodeAffinity").filter(|v| !v.is_null()) {
        let at = path.child("nodeAffinity");
        if let Some(required) = node.get(REQUIRED).filter(|v| !v.is_null()) {
            validate_node_selector(required, false, &at.child(REQUIRED), errs);
            let terms_path = at.child(REQUIRED).child("nodeSelectorTerms");
            for (i, term) in array(required.get("nodeSelectorTerms")).iter().enumerate() {
                validate_match_fields(term, &terms_path.index(i), errs);
            }
        }
        for (i, term) in array(node.get(PREFERRED)).iter().enumerate() {
            let term_path = at.child(PREFERRED).index(i);
            validate_weight(term, &term_path, errs);
            if let Some(preference) = term.get("preference") {
                validate_node_selector_term(preference, &term_path.child("preference"), errs);
            }
        }
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        let Some(pod) = affinity.get(kind).filter(|v| !v.is_null()) else {
            continue;
        };
        let at = path.child(kind);
        for (i, term) in array(pod.get(REQUIRED)).iter().enumerate() {
            validate_pod_affinity_term(term, &at.child(REQUIRED).index(i), errs);
        }
        for (i, term) in array(pod.get(PREFERRED)).iter().enumerate() {
            let term_path = at.child(PREFERRED).index(i);
            validate_weight(term, &term_path, errs);
            validate_pod_affinity_term(
                term.get("podAffinityTerm").unwrap_or(&Value::Null),
                &term_path.child("podAffinityTerm"),
                errs,
            );
        }
    }
}

fn validate_topology_spread(constraints: &[Value], path: &Path, errs: &mut ErrorList) {
    const ACTIONS: [&str; 2] = ["DoNotSchedule", "ScheduleAnyway"];
    const POLICIES: [&str; 2] = ["Honor", "Ignore"];
    for (i, constraint) in constraints.iter().enumerate() {
        let at = path.index(i);
        let max_skew = int_of(constraint.get("maxSkew"));
        if max_skew <= 0 {
            errs.push(field::invalid(&at.child("maxSkew"), max_skew, NOT_POSITIVE));
        }
        let key = str_of(constraint.get("topologyKey"));
        if key.is_empty() {
            errs.push(field::required(
                &at.child("topologyKey"),
                "can not be empty",
            ));
        } else {
            meta::validate_label_name(key, &at.child("topologyKey"), errs);
        }
        let action = str_of(constraint.get("whenUnsatisfiable"));
        if !ACTIONS.contains(&action) {
            errs.push(field::not_supported(
                &at.child("whenUnsatisfiable"),
                action,
                &ACTIONS,
            ));
        }
        let repeated = constraints[i + 1..].iter().any(|other| {
            str_of(other.get("topologyKey")) == key
                && str_of(other.get("whenUnsatisfiable")) == action
        });
        if repeated {
            errs.push(field::duplicate(
                &at.child("{topologyKey, whenUnsatisfiable}"),
                format!("{{{key}, {action}}}"),
            ));
        }
        if let Some(min_domains) = constraint.get("minDomains").and_then(Value::as_i64) {
            if min_domains <= 0 {
                errs.push(field::invalid(
                    &at.child("minDomains"),
                    min_domains,
                    NOT_POSITIVE,
                ));
            }
            if action != "DoNotSchedule" {
                errs.push(field::invalid(
                    &at.child("minDomains"),
                    min_domains,
                    &format!(
                        "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {action}"
                    ),
                ));
            }
        }
        for key in ["nodeAffinityPolicy", "nodeTaintsPolicy"] {
            if let Some(policy) = constraint.get(key).filter(|v| !v.is_null())
                && !POLICIES.contains(&policy.as_str().unwrap_or(""))
            {
                errs.push(field::not_supported(&at.child(key), policy, &POLICIES));
            }
        }
        if let Some(selector) = constraint.get("labelSelector") {
            meta::validate_label_selector(selector, &at.child("labelSelector"), errs);
        }
    }
}

// ---------------------------------------------------------------- update

/// kube's `ValidatePodUpdate`: only images, `activeDeadlineSeconds` (set or lowered),
/// added tolerations and a negative `terminationGracePeriodSeconds` turned into 1 may
/// change.
fn validate_pod_update(new: &Value, old: &Value, errs: &mut ErrorList) {
    let spec_path = Path::new("spec");
    let null = Value::Null;
    let new_spec = new.get("spec").unwrap_or(&null);
    let old_spec = old.get("spec").unwrap_or(&null);

    let deadline_path = spec_path.child("activeDeadlineSeconds");
    let new_deadline = new_spec
        .get("activeDeadlineSeconds")
        .filter(|v| !v.is_null());
    let old_deadline = old_spec
        .get("activeDeadlineSeconds")
        .and_then(Value::as_i64);
    match (new_deadline, old_deadline) {
        (Some(value), old_value) => {
            let value = value.as_i64().unwrap_or(-1);
            if !(0..=MAX_INT32).contains(&value) {
                errs.push(field::invalid(
                    &deadline_path,
                    value,
                    &names::inclusive_range_error(0, MAX_INT32),
                ));
                return;
            }
            if old_value.is_some_and(|old_value| old_value < value) {
                errs.push(field::invalid(
                    &deadline_path,
                    value,
                    "must be less than or equal to previous value",
                ));
                return;
            }
        }
        (None, Some(_)) => errs.push(field::invalid(
            &deadline_path,
            Bad::Null,
            "must not update from a positive integer to nil value",
        )),
        (None, None) => {}
    }

    let new_tolerations = array(new_spec.get("tolerations"));
    for old_toleration in array(old_spec.get("tolerations")) {
        let found = new_tolerations
            .iter()
            .any(|t| same_toleration(t, old_toleration));
        if !found {
            errs.push(field::forbidden(
                &spec_path.child("tolerations"),
                "existing toleration can not be modified except its tolerationSeconds",
            ));
            return;
        }
    }

    // The new spec with every field that may change taken from the old one.
    let mut munged = new_spec.clone();
    for list in ["containers", "initContainers"] {
        let old_list = array(old_spec.get(list));
        if let Some(new_list) = munged.get_mut(list).and_then(Value::as_array_mut)
            && new_list.len() == old_list.len()
        {
            for (container, before) in new_list.iter_mut().zip(old_list) {
                if let (Some(c), Some(image)) = (container.as_object_mut(), before.get("image")) {
                    c.insert("image".into(), image.clone());
                }
            }
        }
    }
    if let Some(m) = munged.as_object_mut() {
        for key in ["activeDeadlineSeconds", "tolerations"] {
            match old_spec.get(key) {
                Some(v) => m.insert(key.into(), v.clone()),
                None => m.remove(key),
            };
        }
        let old_grace = old_spec
            .get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64);
        let new_grace = m
            .get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64);
        if old_grace.is_some_and(|g| g < 0) && new_grace == Some(1) {
            m.insert(
                "terminationGracePeriodSeconds".into(),
                old_spec["terminationGracePeriodSeconds"].clone(),
            );
        }
    }
    let mut changes = Vec::new();
    diff(
        &normalized(old_spec),
        &normalized(&munged),
        "spec",
        &mut changes,
    );
    if !changes.is_empty() {
        changes.truncate(20);
        errs.push(field::forbidden(
            &spec_path,
            &format!("{POD_UPDATE_FORBIDDEN}\n{}", changes.join("\n")),
        ));
    }
}

/// Tolerations equal but for `tolerationSeconds` (kube lets that one change).
fn same_toleration(a: &Value, b: &Value) -> bool {
    ["key", "operator", "value", "effect"]
        .iter()
        .all(|k| str_of(a.get(*k)) == str_of(b.get(*k)))
}

/// The paths where `old` and `new` differ, as `- path: old` / `+ path: new` lines.
fn diff(old: &Value, new: &Value, path: &str, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let child = format!("{path}.{key}");
                diff(
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                    &child,
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(x, y, &format!("{path}[{i}]"), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => {
            if !a.is_null() {
                out.push(format!("- {path}: {a}"));
            }
            if !b.is_null() {
                out.push(format!("+ {path}: {b}"));
            }
        }
    }
}
