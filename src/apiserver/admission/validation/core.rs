//! Validation of the core kinds other than Pod and Service (kube's
//! `pkg/apis/core/validation`): Endpoints, ConfigMap, Secret, Namespace, Node,
//! ServiceAccount, PersistentVolume and PersistentVolumeClaim. Also the endpoint-address
//! rule (`ValidateNonSpecialIP`) that Services' external IPs and EndpointSlices share.

use std::net::IpAddr;

use base64::Engine as _;
use serde_json::{Value, json};

use super::field::{self, Bad, ErrorList, Path};
use super::meta::{self, IMMUTABLE, array, same_map, str_of, string_list};
use super::names;
use super::service::validate_port_protocol;

/// kube's `MaxSecretSize`, also the ConfigMap limit.
const MAX_SECRET_SIZE: usize = 1024 * 1024;
const ACCESS_MODES: [&str; 4] = [
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
const VOLUME_MODES: [&str; 2] = ["Block", "Filesystem"];
const RECLAIM_POLICIES: [&str; 3] = ["Delete", "Recycle", "Retain"];
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
const STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

pub fn validate(kind: &str, new: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    match kind {
        "Endpoints" => validate_endpoints(new, errs),
        "ConfigMap" => validate_config_map(new, old, errs),
        "Secret" => validate_secret(new, old, errs),
        // kube ignores spec changes of a Namespace on update (only /finalize sets them).
        "Namespace" if old.is_none() => validate_namespace(new, errs),
        "Node" => validate_node(new, old, errs),
        "PersistentVolumeClaim" => validate_pvc(new, old, errs),
        "PersistentVolume" => validate_pv(new, old, errs),
        // kube validates a ServiceAccount's metadata only.
        _ => {}
    }
}

// ---------------------------------------------------------------- endpoint addresses

/// kube's `ValidateNonSpecialIP` (1.33's `ValidateEndpointIP`): an address traffic may be
/// sent to — not unspecified, loopback, link-local or link-local multicast.
pub(crate) fn validate_endpoint_ip(ip: &str, path: &Path, errs: &mut ErrorList) {
    check_endpoint_ip(ip, false, path, errs);
}

/// `allow_loopback` is for the objects the API server writes from its own addresses (see
/// `is_server_endpoints`).
pub(crate) fn check_endpoint_ip(ip: &str, allow_loopback: bool, path: &Path, errs: &mut ErrorList) {
    let Some(parsed) = names::parse_ip_sloppy(ip) else {
        errs.push(field::invalid(path, ip, "must be a valid IP address"));
        return;
    };
    // Go treats an IPv4-mapped IPv6 address as the IPv4 one.
    let parsed = match parsed {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(parsed),
        v4 => v4,
    };
    let (unspecified, loopback, link_local, link_local_multicast) = match parsed {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            (
                v4.is_unspecified(),
                v4.is_loopback(),
                o[0] == 169 && o[1] == 254,
                o[0] == 224 && o[1] == 0 && o[2] == 0,
            )
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            (
                v6.is_unspecified(),
                v6.is_loopback(),
                s[0] & 0xffc0 == 0xfe80,
                s[0] & 0xff0f == 0xff02,
            )
        }
    };
    if unspecified {
        errs.push(field::invalid(
            path,
            ip,
            &format!("may not be unspecified ({ip})"),
        ));
    }
    if loopback && !allow_loopback {
        errs.push(field::invalid(
            path,
            ip,
            "may not be in the loopback range (127.0.0.0/8, ::1/128)",
        ));
    }
    if link_local {
        errs.push(field::invalid(
            path,
            ip,
            "may not be in the link-local range (169.254.0.0/16, fe80::/10)",
        ));
    }
    if link_local_multicast {
        errs.push(field::invalid(
            path,
            ip,
            "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
        ));
    }
}

/// The API server's own `default/kubernetes` Endpoints and EndpointSlice list its
/// advertise address, which is the loopback one on a host without a default route; kube
/// would refuse that, k3rs keeps serving such a single-host cluster.
pub(crate) fn is_server_endpoints(object: &Value) -> bool {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        == Some("default")
        && object.pointer("/metadata/name").and_then(Value::as_str) == Some("kubernetes")
}

// ---------------------------------------------------------------- Endpoints

fn validate_endpoints(endpoints: &Value, errs: &mut ErrorList) {
    let allow_loopback = is_server_endpoints(endpoints);
    let subsets = endpoints.get("subsets").and_then(Value::as_array);
    for (i, subset) in subsets.into_iter().flatten().enumerate() {
        let at = Path::new("subsets").index(i);
        let addresses = array(subset.get("addresses"));
        let not_ready = array(subset.get("notReadyAddresses"));
        if addresses.is_empty() && not_ready.is_empty() {
            errs.push(field::required(
                &at,
                "must specify `addresses` or `notReadyAddresses`",
            ));
        }
        for (key, list) in [("addresses", addresses), ("notReadyAddresses", not_ready)] {
            for (j, address) in list.iter().enumerate() {
                validate_endpoint_address(address, allow_loopback, &at.child(key).index(j), errs);
            }
        }
        let ports = array(subset.get("ports"));
        for (j, port) in ports.iter().enumerate() {
            let path = at.child("ports").index(j);
            let name = str_of(port.get("name"));
            if ports.len() > 1 && name.is_empty() {
                errs.push(field::required(&path.child("name"), ""));
            } else if !name.is_empty() {
                errs.extend(field::invalid_each(
                    &path.child("name"),
                    name,
                    names::dns1123_label(name),
                ));
            }
            validate_port_protocol(port, &path, errs);
        }
    }
}

fn validate_endpoint_address(
    address: &Value,
    allow_loopback: bool,
    path: &Path,
    errs: &mut ErrorList,
) {
    let ip = str_of(address.get("ip"));
    errs.extend(field::invalid_each(&path.child("ip"), ip, names::ip(ip)));
    let hostname = str_of(address.get("hostname"));
    if !hostname.is_empty() {
        errs.extend(field::invalid_each(
            &path.child("hostname"),
            hostname,
            names::dns1123_label(hostname),
        ));
    }
    if let Some(node) = address.get("nodeName").and_then(Value::as_str) {
        errs.extend(field::invalid_each(
            &path.child("nodeName"),
            node,
            names::dns1123_subdomain(node),
        ));
    }
    check_endpoint_ip(ip, allow_loopback, &path.child("ip"), errs);
}

// ---------------------------------------------------------------- ConfigMap and Secret

fn validate_config_map(cm: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    if let Some(old) = old
        && old.get("immutable").and_then(Value::as_bool) == Some(true)
    {
        let when = "field is immutable when `immutable` is set";
        if cm.get("immutable").and_then(Value::as_bool) != Some(true) {
            errs.push(field::forbidden(&Path::new("immutable"), when));
        }
        for key in ["data", "binaryData"] {
            if !same_map(cm.get(key), old.get(key)) {
                errs.push(field::forbidden(&Path::new(key), when));
            }
        }
    }
    let mut total = 0usize;
    let binary = cm.get("binaryData").and_then(Value::as_object);
    if let Some(data) = cm.get("data").and_then(Value::as_object) {
        for (key, value) in data {
            let path = Path::new("data").key(key);
            errs.extend(field::invalid_each(&path, key, names::config_map_key(key)));
            if binary.is_some_and(|b| b.contains_key(key)) {
                errs.push(field::invalid(
                    &path,
                    key.as_str(),
                    "duplicate of key present in binaryData",
                ));
            }
            total = total.saturating_add(value.as_str().map_or(0, str::len));
        }
    }
    for (key, value) in binary.into_iter().flatten() {
        let path = Path::new("binaryData").key(key);
        errs.extend(field::invalid_each(&path, key, names::config_map_key(key)));
        total = total.saturating_add(decoded_len(value));
    }
    if total > MAX_SECRET_SIZE {
        // kube reports the whole object (an empty path).
        errs.push(field::too_long(&Path::root(), MAX_SECRET_SIZE));
    }
}

/// The byte length of a base64 value (what kube counts).
fn decoded_len(value: &Value) -> usize {
    let text = value.as_str().unwrap_or("");
    let padding = text.bytes().rev().take_while(|b| *b == b'=').count();
    (text.len() / 4 * 3 + (text.len() % 4).saturating_sub(1)).saturating_sub(padding.min(2))
}

/// A Secret's data as kube validates it: `stringData` merged over `data` (kube's
/// conversion does that before validation). Values are the decoded bytes' lengths and,
/// for the keys whose content is checked, the bytes.
fn secret_data(secret: &Value) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    if let Some(data) = secret.get("data").and_then(Value::as_object) {
        for (k, v) in data {
            out.push((k.clone(), v.clone()));
        }
    }
    if let Some(strings) = secret.get("stringData").and_then(Value::as_object) {
        for (k, v) in strings {
            let encoded = json!(
                base64::engine::general_purpose::STANDARD
                    .encode(v.as_str().unwrap_or("").as_bytes())
            );
            match out.iter_mut().find(|(key, _)| key == k) {
                Some(entry) => entry.1 = encoded,
                None => out.push((k.clone(), encoded)),
            }
        }
    }
    out
}

fn validate_secret(secret: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    let data = secret_data(secret);
    if let Some(old) = old {
        let ty = secret.get("type").filter(|v| !v.is_null());
        let old_ty = old.get("type").filter(|v| !v.is_null());
        if ty != old_ty {
            errs.push(field::invalid(
                &Path::new("type"),
                ty.map(Bad::from).unwrap_or(Bad::Str(String::new())),
                IMMUTABLE,
            ));
        }
        if old.get("immutable").and_then(Value::as_bool) == Some(true) {
            let when = "field is immutable when `immutable` is set";
            if secret.get("immutable").and_then(Value::as_bool) != Some(true) {
                errs.push(field::forbidden(&Path::new("immutable"), when));
            }
            let mut now = data.clone();
            let mut before = secret_data(old);
            now.sort_by(|a, b| a.0.cmp(&b.0));
            before.sort_by(|a, b| a.0.cmp(&b.0));
            if now != before {
                errs.push(field::forbidden(&Path::new("data"), when));
            }
        }
    }
    let data_path = Path::new("data");
    let mut total = 0usize;
    for (key, value) in &data {
        errs.extend(field::invalid_each(
            &data_path.key(key),
            key,
            names::config_map_key(key),
        ));
        total = total.saturating_add(decoded_len(value));
    }
    if total > MAX_SECRET_SIZE {
        errs.push(field::too_long(&data_path, MAX_SECRET_SIZE));
    }
    let get = |key: &str| data.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    match str_of(secret.get("type")) {
        "kubernetes.io/service-account-token" => {
            let name = secret
                .pointer("/metadata/annotations")
                .and_then(|a| a.get("kubernetes.io/service-account.name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            if name.is_empty() {
                errs.push(field::required(
                    &Path::new("metadata")
                        .child("annotations")
                        .key("kubernetes.io/service-account.name"),
                    "",
                ));
            }
        }
        "kubernetes.io/dockercfg" => {
            check_docker_config(get(".dockercfg"), &data_path.key(".dockercfg"), errs)
        }
        "kubernetes.io/dockerconfigjson" => check_docker_config(
            get(".dockerconfigjson"),
            &data_path.key(".dockerconfigjson"),
            errs,
        ),
        "kubernetes.io/basic-auth" if get("username").is_none() && get("password").is_none() => {
            errs.push(field::required(&data_path.key("username"), ""));
            errs.push(field::required(&data_path.key("password"), ""));
        }
        "kubernetes.io/ssh-auth" if get("ssh-privatekey").is_none_or(|v| decoded_len(v) == 0) => {
            errs.push(field::required(&data_path.key("ssh-privatekey"), ""));
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if get(key).is_none() {
                    errs.push(field::required(&data_path.key(key), ""));
                }
            }
        }
        _ => {}
    }
}

/// A docker config key must be present and hold a JSON object.
fn check_docker_config(value: Option<&Value>, path: &Path, errs: &mut ErrorList) {
    let Some(value) = value else {
        errs.push(field::required(path, ""));
        return;
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.as_str().unwrap_or(""))
        .unwrap_or_default();
    let problem = match serde_json::from_slice::<Value>(&bytes) {
        // Go's json.Unmarshal accepts `null` into a map.
        Ok(Value::Object(_) | Value::Null) => None,
        Ok(other) => Some(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            json_kind(&other)
        )),
        Err(e) if e.is_eof() => Some("unexpected end of JSON input".to_string()),
        Err(_) => Some("invalid character in JSON input".to_string()),
    };
    if let Some(problem) = problem {
        errs.push(field::invalid(path, "<secret contents redacted>", &problem));
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        _ => "null",
    }
}

// ---------------------------------------------------------------- Namespace

fn validate_namespace(ns: &Value, errs: &mut ErrorList) {
    // kube reports every spec finalizer at the list's path, without an index.
    let path = Path::new("spec").child("finalizers");
    for finalizer in string_list(ns.pointer("/spec/finalizers")) {
        errs.extend(field::invalid_each(
            &path,
            &finalizer,
            names::qualified_name(&finalizer),
        ));
        meta::validate_kube_finalizer_name(&finalizer, &path, errs);
    }
}

// ---------------------------------------------------------------- Node

fn validate_node(node: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    // kube puts the taints under `metadata` in these paths.
    let taints_path = Path::new("metadata").child("taints");
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (i, taint) in array(node.pointer("/spec/taints")).iter().enumerate() {
        let at = taints_path.index(i);
        let key = str_of(taint.get("key"));
        let value = str_of(taint.get("value"));
        let effect = str_of(taint.get("effect"));
        meta::validate_label_name(key, &at.child("key"), errs);
        let problems = names::label_value(value);
        if !problems.is_empty() {
            errs.push(field::invalid(
                &at.child("value"),
                value,
                &problems.join(";"),
            ));
        }
        if effect.is_empty() {
            errs.push(field::required(&at.child("effect"), ""));
        } else if !TAINT_EFFECTS.contains(&effect) {
            errs.push(field::not_supported(
                &at.child("effect"),
                effect,
                &TAINT_EFFECTS,
            ));
        }
        if seen.contains(&(key, effect)) {
            let mut cause = field::duplicate(
                &at,
                Bad::Raw(format!(
                    "core.Taint{{Key:{}, Value:{}, Effect:{}, TimeAdded:(*v1.Time)(nil)}}",
                    names::go_quote(key),
                    names::go_quote(value),
                    names::go_quote(effect)
                )),
            );
            cause.message = cause
                .message
                .map(|m| format!("{m}: taints must be unique by key and effect pair"));
            errs.push(cause);
            continue;
        }
        seen.push((key, effect));
    }

    let cidrs = pod_cidrs(node);
    let cidrs_path = Path::new("spec").child("podCIDRs");
    for (i, cidr) in cidrs.iter().enumerate() {
        errs.extend(field::invalid_each(
            &cidrs_path.index(i),
            cidr,
            names::cidr(cidr),
        ));
    }
    if cidrs.len() > 1 {
        let families: Vec<Option<bool>> = cidrs
            .iter()
            .map(|c| names::parse_cidr_sloppy(c).map(|(ip, _)| is_v6(ip)))
            .collect();
        let dual = families.contains(&Some(true)) && families.contains(&Some(false));
        if !dual || cidrs.len() > 2 {
            errs.push(field::invalid(
                &cidrs_path,
                Bad::Raw(meta::go_string_slice(&cidrs)),
                "may specify no more than one CIDR for each IP family",
            ));
        }
        for (i, cidr) in cidrs.iter().enumerate() {
            if cidrs[..i].contains(cidr) {
                errs.push(field::duplicate(&cidrs_path.index(i), cidr.as_str()));
            }
        }
    }

    let Some(old) = old else {
        return;
    };
    let old_cidrs = pod_cidrs(old);
    if !old_cidrs.is_empty() {
        let message = "node updates may not change podCIDR except from \"\" to valid";
        if old_cidrs.len() != cidrs.len() {
            errs.push(field::forbidden(&cidrs_path, message));
        } else {
            for (a, b) in old_cidrs.iter().zip(&cidrs) {
                if a != b {
                    errs.push(field::forbidden(&cidrs_path, message));
                }
            }
        }
    }
    let provider = str_of(node.pointer("/spec/providerID"));
    let old_provider = str_of(old.pointer("/spec/providerID"));
    if !old_provider.is_empty() && old_provider != provider {
        errs.push(field::forbidden(
            &Path::new("spec").child("providerID"),
            "node updates may not change providerID except from \"\" to valid",
        ));
    }
    if str_of(node.pointer("/spec/externalID")) != str_of(old.pointer("/spec/externalID")) {
        errs.push(field::forbidden(
            &Path::new("spec").child("externalID"),
            "may not be updated",
        ));
    }
}

/// A Node's pod CIDRs: `podCIDRs`, or the legacy `podCIDR` (kube's conversion fills one
/// from the other).
fn pod_cidrs(node: &Value) -> Vec<String> {
    let list = string_list(node.pointer("/spec/podCIDRs"));
    if !list.is_empty() {
        return list;
    }
    let single = str_of(node.pointer("/spec/podCIDR"));
    if single.is_empty() {
        Vec::new()
    } else {
        vec![single.to_string()]
    }
}

fn is_v6(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_none(),
        IpAddr::V4(_) => false,
    }
}

// ---------------------------------------------------------------- PersistentVolumeClaim

fn validate_pvc(pvc: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    let spec = pvc.get("spec").unwrap_or(&Value::Null);
    let spec_path = Path::new("spec");
    let modes = string_list(spec.get("accessModes"));
    if modes.is_empty() {
        errs.push(field::required(
            &spec_path.child("accessModes"),
            "at least 1 access mode is required",
        ));
    }
    if let Some(selector) = spec.get("selector").filter(|v| !v.is_null()) {
        let allow = old
            .and_then(|o| o.pointer("/spec/selector"))
            .is_some_and(meta::selector_has_invalid_values);
        meta::validate_label_selector_with(selector, allow, &spec_path.child("selector"), errs);
    }
    validate_access_modes(&modes, &spec_path.child("accessModes"), errs);
    let storage_path = spec_path.child("resources").key("storage");
    match spec
        .pointer("/resources/requests/storage")
        .and_then(Value::as_str)
    {
        None => errs.push(field::required(&storage_path, "")),
        Some(q) => {
            if quantity(q).is_some_and(|v| v <= 0.0) {
                errs.push(field::invalid(
                    &storage_path,
                    quantity_string(q),
                    "must be greater than zero",
                ));
            }
        }
    }
    validate_class_and_volume_mode(spec, &spec_path, errs);
    for key in ["dataSource", "dataSourceRef"] {
        if let Some(source) = spec.get(key).filter(|v| v.is_object()) {
            validate_data_source(source, key == "dataSourceRef", &spec_path.child(key), errs);
        }
    }
    let source = spec.get("dataSource").filter(|v| v.is_object());
    let source_ref = spec.get("dataSourceRef").filter(|v| v.is_object());
    if source_ref.is_some_and(|r| !str_of(r.get("namespace")).is_empty()) {
        if source.is_some() {
            errs.push(field::invalid(
                &spec_path,
                Bad::Raw("spec.dataSource".into()),
                "may not be specified when dataSourceRef.namespace is specified",
            ));
        }
    } else if let (Some(a), Some(b)) = (source, source_ref)
        && (a.get("apiGroup") != b.get("apiGroup")
            || str_of(a.get("kind")) != str_of(b.get("kind"))
            || str_of(a.get("name")) != str_of(b.get("name")))
    {
        errs.push(field::invalid(
            &spec_path,
            Bad::Raw("spec.dataSource".into()),
            "must match dataSourceRef",
        ));
    }

    let Some(old) = old else {
        return;
    };
    validate_pvc_update(pvc, old, errs);
}

/// `storageClassName` (a DNS subdomain when set) and `volumeMode`, as PVs and PVCs share them.
fn validate_class_and_volume_mode(spec: &Value, spec_path: &Path, errs: &mut ErrorList) {
    let class = str_of(spec.get("storageClassName"));
    if !class.is_empty() {
        errs.extend(field::invalid_each(
            &spec_path.child("storageClassName"),
            class,
            names::dns1123_subdomain(class),
        ));
    }
    if let Some(mode) = spec.get("volumeMode").filter(|v| !v.is_null())
        && !mode.as_str().is_some_and(|m| VOLUME_MODES.contains(&m))
    {
        errs.push(field::not_supported(
            &spec_path.child("volumeMode"),
            mode,
            &VOLUME_MODES,
        ));
    }
}

fn validate_pvc_update(pvc: &Value, old: &Value, errs: &mut ErrorList) {
    let mut new_spec = pvc.get("spec").cloned().unwrap_or(json!({}));
    let mut old_spec = old.get("spec").cloned().unwrap_or(json!({}));
    for spec in [&mut new_spec, &mut old_spec] {
        if let Some(map) = spec.as_object_mut() {
            // kube defaults the mode; the attributes class is dropped while its feature
            // gate is off (1.33's default).
            if map.get("volumeMode").is_none_or(Value::is_null) {
                map.insert("volumeMode".into(), json!("Filesystem"));
            }
            map.remove("volumeAttributesClassName");
        }
    }
    // The volume name may be set once (binding).
    if str_of(old_spec.get("volumeName")).is_empty()
        && let Some(m) = old_spec.as_object_mut()
    {
        match new_spec.get("volumeName").filter(|v| !v.is_null()) {
            Some(name) => m.insert("volumeName".into(), name.clone()),
            None => m.remove("volumeName"),
        };
    }
    // A class may be set where there was none, when it matches the beta annotation.
    let annotation = |o: &Value| {
        o.pointer("/metadata/annotations")
            .and_then(|a| a.get(STORAGE_CLASS_ANNOTATION))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let old_annotation = annotation(old);
    let new_annotation = annotation(pvc);
    let old_class = old_spec
        .get("storageClassName")
        .filter(|v| !v.is_null())
        .cloned();
    let new_class = new_spec
        .get("storageClassName")
        .filter(|v| !v.is_null())
        .cloned();
    let new_class_str = new_class.as_ref().and_then(Value::as_str);
    let upgrade_from_annotation = old_annotation.is_some()
        && old_class.is_none()
        && new_class_str.is_some_and(|c| Some(c) == old_annotation.as_deref())
        && (new_annotation.is_none() || new_annotation == old_annotation);
    let upgrade_from_nil = new_class.is_some()
        && old_class.is_none()
        && (old_annotation.is_none() || new_class_str == old_annotation.as_deref());
    if (upgrade_from_annotation || upgrade_from_nil)
        && let Some(m) = new_spec.as_object_mut()
    {
        m.remove("storageClassName");
    }
    if !upgrade_from_annotation && new_annotation != old_annotation {
        errs.push(field::invalid(
            &Path::new("metadata")
                .child("annotations")
                .child(STORAGE_CLASS_ANNOTATION),
            new_annotation.unwrap_or_default(),
            IMMUTABLE,
        ));
    }
    let bound = pvc.pointer("/status/phase").and_then(Value::as_str) == Some("Bound");
    if bound
        && new_spec
            .pointer("/resources/requests")
            .is_some_and(Value::is_object)
    {
        let old_storage = old_spec.pointer("/resources/requests/storage").cloned();
        if let Some(requests) = new_spec
            .pointer_mut("/resources/requests")
            .and_then(Value::as_object_mut)
        {
            match old_storage {
                Some(v) => {
                    requests.insert("storage".into(), v);
                }
                None => {
                    requests.remove("storage");
                }
            }
        }
    }
    if new_spec != old_spec {
        errs.push(field::forbidden(
            &Path::new("spec"),
            &format!(
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n{}",
                spec_diff(&old_spec, &new_spec)
            ),
        ));
    }
    let size = |o: &Value, p: &str| {
        o.pointer(p)
            .and_then(Value::as_str)
            .and_then(quantity)
            .unwrap_or(0.0)
    };
    let new_size = size(pvc, "/spec/resources/requests/storage");
    let old_size = size(old, "/spec/resources/requests/storage");
    let status_size = size(old, "/status/capacity/storage");
    // RecoverVolumeExpansionFailure (on in 1.33): a claim may shrink back down to what
    // its volume has.
    if new_size < old_size && new_size <= status_size {
        errs.push(field::forbidden(
            &Path::new("spec")
                .child("resources")
                .child("requests")
                .child("storage"),
            "field can not be less than status.capacity",
        ));
    }
    let mode = |o: &Value| {
        o.pointer("/spec/volumeMode")
            .and_then(Value::as_str)
            .unwrap_or("Filesystem")
            .to_string()
    };
    if mode(pvc) != mode(old) {
        errs.push(field::invalid(
            &Path::new("volumeMode"),
            mode(pvc),
            IMMUTABLE,
        ));
    }
}

/// The top-level spec fields that differ (kube prints a full `cmp.Diff`).
fn spec_diff(old: &Value, new: &Value) -> String {
    let empty = serde_json::Map::new();
    let a = old.as_object().unwrap_or(&empty);
    let b = new.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| {
            format!(
                "  {k}: {} -> {}",
                a.get(k).map_or("<unset>".to_string(), Value::to_string),
                b.get(k).map_or("<unset>".to_string(), Value::to_string)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn validate_data_source(source: &Value, is_ref: bool, path: &Path, errs: &mut ErrorList) {
    let name = str_of(source.get("name"));
    let kind = str_of(source.get("kind"));
    if name.is_empty() {
        errs.push(field::required(&path.child("name"), ""));
    }
    if kind.is_empty() {
        errs.push(field::required(&path.child("kind"), ""));
    }
    let group = str_of(source.get("apiGroup"));
    if group.is_empty() && kind != "PersistentVolumeClaim" {
        errs.push(field::invalid(
            path,
            kind,
            "must be 'PersistentVolumeClaim' when referencing the default apiGroup",
        ));
    }
    if !group.is_empty() {
        errs.extend(field::invalid_each(
            &path.child("apiGroup"),
            group,
            names::dns1123_subdomain(group),
        ));
    }
    let namespace = str_of(source.get("namespace"));
    if is_ref && !namespace.is_empty() {
        errs.extend(field::invalid_each(
            &path.child("namespace"),
            namespace,
            names::dns1123_label(namespace),
        ));
    }
}

fn validate_access_modes(modes: &[String], path: &Path, errs: &mut ErrorList) {
    let mut once_pod = false;
    let mut others = false;
    for mode in modes {
        if !ACCESS_MODES.contains(&mode.as_str()) {
            errs.push(field::not_supported(path, mode.as_str(), &ACCESS_MODES));
        } else if mode == "ReadWriteOncePod" {
            once_pod = true;
        } else {
            others = true;
        }
    }
    if once_pod && others {
        errs.push(field::forbidden(
            path,
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

// ---------------------------------------------------------------- PersistentVolume

/// The volume sources of a PersistentVolume, in kube's order.
const PV_SOURCES: [&str; 22] = [
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "flocker",
    "nfs",
    "rbd",
    "quobyte",
    "cephfs",
    "iscsi",
    "cinder",
    "fc",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "scaleIO",
    "local",
    "storageos",
    "csi",
];

fn validate_pv(pv: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    let spec = pv.get("spec").unwrap_or(&Value::Null);
    let spec_path = Path::new("spec");
    let modes = string_list(spec.get("accessModes"));
    if modes.is_empty() {
        errs.push(field::required(&spec_path.child("accessModes"), ""));
    }
    validate_access_modes(&modes, &spec_path.child("accessModes"), errs);

    let capacity = spec.get("capacity").and_then(Value::as_object);
    let capacity_path = spec_path.child("capacity");
    if capacity.is_none_or(|c| c.is_empty()) {
        errs.push(field::required(&capacity_path, ""));
    }
    if capacity.is_none_or(|c| !c.contains_key("storage") || c.len() > 1) {
        errs.push(field::not_supported(
            &capacity_path,
            Bad::Raw(spec.get("capacity").map_or("null".into(), Value::to_string)),
            &["storage"],
        ));
    }
    for (resource, q) in capacity.into_iter().flatten() {
        let text = q.as_str().unwrap_or("");
        if let Some(value) = quantity(text) {
            if value < 0.0 {
                errs.push(field::invalid(
                    &capacity_path.key(resource),
                    value as i64,
                    "must be a valid resource quantity",
                ));
            }
            if value <= 0.0 {
                errs.push(field::invalid(
                    &capacity_path.key(resource),
                    quantity_string(text),
                    "must be greater than zero",
                ));
            }
        }
    }

    let policy = str_of(spec.get("persistentVolumeReclaimPolicy"));
    if !policy.is_empty() && !RECLAIM_POLICIES.contains(&policy) {
        errs.push(field::not_supported(
            &spec_path.child("persistentVolumeReclaimPolicy"),
            policy,
            &RECLAIM_POLICIES,
        ));
    }

    let mut has_node_affinity = false;
    if let Some(affinity) = spec.get("nodeAffinity").filter(|v| !v.is_null()) {
        has_node_affinity = true;
        let path = spec_path.child("nodeAffinity");
        match affinity.get("required").filter(|v| !v.is_null()) {
            Some(required) => validate_node_selector(required, true, &path.child("required"), errs),
            None => errs.push(field::required(
                &path.child("required"),
                "must specify required node constraints",
            )),
        }
    }

    let mut count = 0;
    for source in PV_SOURCES {
        let Some(value) = spec.get(source).filter(|v| !v.is_null()) else {
            continue;
        };
        let path = spec_path.child(source);
        // kube counts flexVolume without refusing it as a second source.
        if count > 0 && source != "flexVolume" {
            errs.push(field::forbidden(
                &path,
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        count += 1;
        match source {
            "hostPath" => {
                validate_local_path(value, &path, errs);
                let ty = str_of(value.get("type"));
                const TYPES: [&str; 8] = [
                    "",
                    "BlockDevice",
                    "CharDevice",
                    "Directory",
                    "DirectoryOrCreate",
                    "File",
                    "FileOrCreate",
                    "Socket",
                ];
                if value.get("type").is_some_and(|t| !t.is_null()) && !TYPES.contains(&ty) {
                    errs.push(field::not_supported(&path.child("type"), ty, &TYPES));
                }
            }
            "local" => {
                validate_local_path(value, &path, errs);
                if !has_node_affinity {
                    errs.push(field::required(
                        &spec_path.child("nodeAffinity"),
                        "Local volume requires node affinity",
                    ));
                }
            }
            "nfs" => {
                if str_of(value.get("server")).is_empty() {
                    errs.push(field::required(&path.child("server"), ""));
                }
                let p = str_of(value.get("path"));
                if p.is_empty() {
                    errs.push(field::required(&path.child("path"), ""));
                }
                if !p.starts_with('/') {
                    errs.push(field::invalid(
                        &path.child("path"),
                        p,
                        "must be an absolute path",
                    ));
                }
            }
            "csi" => {
                let driver = str_of(value.get("driver"));
                let driver_path = path.child("driver");
                if driver.is_empty() {
                    errs.push(field::required(&driver_path, ""));
                }
                if driver.len() > 63 {
                    errs.push(field::too_long(&driver_path, 63));
                }
                for message in names::dns1123_subdomain(&driver.to_lowercase()) {
                    errs.push(field::invalid(&driver_path, driver, &message));
                }
                if str_of(value.get("volumeHandle")).is_empty() {
                    errs.push(field::required(&path.child("volumeHandle"), ""));
                }
            }
            _ => {}
        }
    }
    if count == 0 {
        errs.push(field::required(&spec_path, "must specify a volume type"));
    }
    if let Some(p) = spec.pointer("/hostPath/path").and_then(Value::as_str)
        && clean_is_root(p)
        && policy == "Recycle"
    {
        errs.push(field::forbidden(
            &spec_path.child("persistentVolumeReclaimPolicy"),
            "may not be 'recycle' for a hostPath mount of '/'",
        ));
    }
    validate_class_and_volume_mode(spec, &spec_path, errs);

    let Some(old) = old else {
        return;
    };
    let sources = |o: &Value| -> Vec<(&'static str, Value)> {
        PV_SOURCES
            .iter()
            .filter_map(|s| {
                let mut v = o
                    .pointer(&format!("/spec/{s}"))
                    .filter(|v| !v.is_null())?
                    .clone();
                if *s == "csi"
                    && let Some(m) = v.as_object_mut()
                {
                    // A controllerExpandSecretRef may be added later.
                    m.remove("controllerExpandSecretRef");
                }
                Some((*s, v))
            })
            .collect()
    };
    let old_expand = old
        .pointer("/spec/csi/controllerExpandSecretRef")
        .filter(|v| !v.is_null());
    let new_expand = pv
        .pointer("/spec/csi/controllerExpandSecretRef")
        .filter(|v| !v.is_null());
    if sources(pv) != sources(old) || (old_expand.is_some() && old_expand != new_expand) {
        errs.push(field::forbidden(
            &Path::new("spec").child("persistentvolumesource"),
            "spec.persistentvolumesource is immutable after creation",
        ));
    }
    let mode = |o: &Value| {
        o.pointer("/spec/volumeMode")
            .and_then(Value::as_str)
            .unwrap_or("Filesystem")
            .to_string()
    };
    if mode(pv) != mode(old) {
        errs.push(field::invalid(
            &Path::new("volumeMode"),
            mode(pv),
            IMMUTABLE,
        ));
    }
    if let Some(old_affinity) = old.pointer("/spec/nodeAffinity").filter(|v| !v.is_null()) {
        let new_affinity = pv.pointer("/spec/nodeAffinity").filter(|v| !v.is_null());
        if new_affinity.map(ga_labels) != Some(ga_labels(old_affinity)) {
            errs.push(field::invalid(
                &Path::new("nodeAffinity"),
                new_affinity.map_or(Bad::Null, |v| Bad::Raw(v.to_string())),
                "field is immutable, except for updating from beta label to GA",
            ));
        }
    }
}

/// A node affinity with its beta topology keys renamed to the GA ones (that change is
/// allowed on update).
fn ga_labels(affinity: &Value) -> Value {
    const BETA_TO_GA: [(&str, &str); 5] = [
        (
            "failure-domain.beta.kubernetes.io/zone",
            "topology.kubernetes.io/zone",
        ),
        (
            "failure-domain.beta.kubernetes.io/region",
            "topology.kubernetes.io/region",
        ),
        ("beta.kubernetes.io/os", "kubernetes.io/os"),
        ("beta.kubernetes.io/arch", "kubernetes.io/arch"),
        (
            "beta.kubernetes.io/instance-type",
            "node.kubernetes.io/instance-type",
        ),
    ];
    let mut out = affinity.clone();
    if let Some(terms) = out
        .pointer_mut("/required/nodeSelectorTerms")
        .and_then(Value::as_array_mut)
    {
        for term in terms {
            if let Some(exprs) = term
                .get_mut("matchExpressions")
                .and_then(Value::as_array_mut)
            {
                for expr in exprs.iter_mut().filter_map(Value::as_object_mut) {
                    let key = str_of(expr.get("key")).to_string();
                    if let Some((_, ga)) = BETA_TO_GA.iter().find(|(beta, _)| *beta == key) {
                        expr.insert("key".into(), json!(ga));
                    }
                }
            }
        }
    }
    out
}

fn validate_local_path(source: &Value, path: &Path, errs: &mut ErrorList) {
    let p = str_of(source.get("path"));
    if p.is_empty() {
        errs.push(field::required(&path.child("path"), ""));
        return;
    }
    if p.split('/').any(|part| part == "..") {
        errs.push(field::invalid(
            &path.child("path"),
            p,
            "must not contain '..'",
        ));
    }
}

/// Whether Go's `path.Clean(p)` is `/`.
fn clean_is_root(p: &str) -> bool {
    if !p.starts_with('/') {
        return false;
    }
    let mut depth: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth.pop();
            }
            other => depth.push(other),
        }
    }
    depth.is_empty()
}

/// kube's `ValidateNodeSelector` (a volume's required node affinity, a pod's required
/// node affinity): at least one term, each term's requirements valid. `check_values`
/// also checks each value as a label value (the volume's rule).
pub(crate) fn validate_node_selector(
    selector: &Value,
    check_values: bool,
    path: &Path,
    errs: &mut ErrorList,
) {
    let terms = array(selector.get("nodeSelectorTerms"));
    let terms_path = path.child("nodeSelectorTerms");
    if terms.is_empty() {
        errs.push(field::required(
            &terms_path,
            "must have at least one node selector term",
        ));
    }
    for (i, term) in terms.iter().enumerate() {
        validate_node_selector_requirements(term, check_values, &terms_path.index(i), errs);
    }
}

/// kube's `ValidateNodeSelectorRequirement` for each of a term's `matchExpressions`.
pub(crate) fn validate_node_selector_requirements(
    term: &Value,
    check_values: bool,
    path: &Path,
    errs: &mut ErrorList,
) {
    for (j, req) in array(term.get("matchExpressions")).iter().enumerate() {
        let at = path.child("matchExpressions").index(j);
        let values = array(req.get("values"));
        match str_of(req.get("operator")) {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errs.push(field::required(
                        &at.child("values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errs.push(field::forbidden(
                        &at.child("values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            "Gt" | "Lt" => {
                if values.len() != 1 {
                    errs.push(field::required(
                        &at.child("values"),
                        "must be specified single value when `operator` is 'Lt' or 'Gt'",
                    ));
                }
            }
            other => errs.push(field::invalid(
                &at.child("operator"),
                other,
                "not a valid selector operator",
            )),
        }
        meta::validate_label_name(str_of(req.get("key")), &at.child("key"), errs);
        if check_values {
            for (k, value) in values.iter().enumerate() {
                let value = value.as_str().unwrap_or("");
                errs.extend(field::invalid_each(
                    &at.child("values").index(k),
                    value,
                    names::label_value(value),
                ));
            }
        }
    }
}

// ---------------------------------------------------------------- helpers

/// The value of a resource quantity (`1Gi`, `500m`, `1e3`), None when it does not parse.
pub(crate) fn quantity(text: &str) -> Option<f64> {
    let text = text.trim();
    let number_end = text
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || *c == '.' || ((*c == '-' || *c == '+') && *i == 0)))
        .map_or(text.len(), |(i, _)| i);
    let (number, suffix) = text.split_at(number_end);
    let base: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    Some(base * scale)
}

/// A quantity as kube prints it in these messages (a zero is `0`).
fn quantity_string(text: &str) -> String {
    if quantity(text) == Some(0.0) {
        "0".into()
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_lengths() {
        assert_eq!(quantity("1Gi"), Some(1073741824.0));
        assert_eq!(quantity("500m"), Some(0.5));
        assert_eq!(quantity("-1"), Some(-1.0));
        assert_eq!(quantity("1e3"), Some(1000.0));
        assert_eq!(quantity("abc"), None);
        assert_eq!(decoded_len(&json!("YWJj")), 3);
        assert_eq!(decoded_len(&json!("YWI=")), 2);
        assert_eq!(decoded_len(&json!("YQ==")), 1);
        assert!(clean_is_root("/"));
        assert!(clean_is_root("/a/.."));
        assert!(!clean_is_root("/a"));
    }
}
