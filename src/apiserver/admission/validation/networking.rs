//! Validation of the networking kinds: discovery.k8s.io EndpointSlice (kube's
//! `pkg/apis/discovery/validation`) and networking.k8s.io NetworkPolicy, Ingress and
//! IngressClass (`pkg/apis/networking/validation`).

use std::net::IpAddr;

use serde_json::Value;

use super::core::{check_endpoint_ip, is_server_endpoints};
use super::field::{self, Bad, ErrorList, Path};
use super::meta::{self, IMMUTABLE, array, str_of};
use super::names;

const ADDRESS_TYPES: [&str; 3] = ["FQDN", "IPv4", "IPv6"];
const MAX_ENDPOINTS: usize = 1000;
const MAX_ADDRESSES: usize = 100;
/// kube raised this from 100 in 1.21.
const MAX_PORTS: usize = 20000;
const MAX_TOPOLOGY_LABELS: usize = 16;
const MAX_ZONE_HINTS: usize = 8;
const SLICE_PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const POLICY_PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];
const PATH_TYPES: [&str; 3] = ["Exact", "ImplementationSpecific", "Prefix"];
const INVALID_PATH_SEQUENCES: [&str; 5] = ["//", "/./", "/../", "%2f", "%2F"];
const INVALID_PATH_SUFFIXES: [&str; 2] = ["/..", "/."];
const MAX_CONTROLLER_LEN: usize = 250;

pub fn validate(kind: &str, new: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    match kind {
        "EndpointSlice" => validate_endpoint_slice(new, old, errs),
        "NetworkPolicy" => validate_network_policy(new, old, errs),
        "Ingress" => validate_ingress(new, old, errs),
        "IngressClass" => validate_ingress_class(new, old, errs),
        _ => {}
    }
}

// ---------------------------------------------------------------- EndpointSlice

/// The slices k3rs writes from its own addresses (see `core::is_server_endpoints`): the
/// API server's and the cluster DNS's (node addresses).
fn is_own_slice(slice: &Value) -> bool {
    is_server_endpoints(slice)
        || (slice.pointer("/metadata/namespace").and_then(Value::as_str) == Some("kube-system")
            && slice.pointer("/metadata/name").and_then(Value::as_str)
                == Some(crate::dns::bootstrap::SLICE_NAME))
}

fn validate_endpoint_slice(slice: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    let address_type = str_of(slice.get("addressType"));
    let type_path = Path::new("addressType");
    if address_type.is_empty() {
        errs.push(field::required(&type_path, ""));
    } else if !ADDRESS_TYPES.contains(&address_type) {
        errs.push(field::not_supported(
            &type_path,
            address_type,
            &ADDRESS_TYPES,
        ));
    }
    if let Some(old) = old
        && str_of(old.get("addressType")) != address_type
    {
        errs.push(field::invalid(&type_path, address_type, IMMUTABLE));
    }
    let allow_loopback = is_own_slice(slice);

    let endpoints = array(slice.get("endpoints"));
    let endpoints_path = Path::new("endpoints");
    if endpoints.len() > MAX_ENDPOINTS {
        errs.push(field::too_many(
            &endpoints_path,
            endpoints.len(),
            MAX_ENDPOINTS,
        ));
    } else {
        for (i, endpoint) in endpoints.iter().enumerate() {
            let at = endpoints_path.index(i);
            let addresses = array(endpoint.get("addresses"));
            let addresses_path = at.child("addresses");
            if addresses.is_empty() {
                errs.push(field::required(
                    &addresses_path,
                    "must contain at least 1 address",
                ));
            } else if addresses.len() > MAX_ADDRESSES {
                errs.push(field::too_many(
                    &addresses_path,
                    addresses.len(),
                    MAX_ADDRESSES,
                ));
            }
            for (j, address) in addresses.iter().enumerate() {
                let address = address.as_str().unwrap_or("");
                validate_slice_address(
                    address,
                    address_type,
                    allow_loopback,
                    &addresses_path.index(j),
                    errs,
                );
            }
            if let Some(node) = endpoint.get("nodeName").and_then(Value::as_str) {
                errs.extend(field::invalid_each(
                    &at.child("nodeName"),
                    node,
                    names::dns1123_subdomain(node),
                ));
            }
            if let Some(topology) = endpoint.get("deprecatedTopology").filter(|v| !v.is_null()) {
                let path = at.child("deprecatedTopology");
                let count = topology.as_object().map_or(0, |m| m.len());
                if count > MAX_TOPOLOGY_LABELS {
                    errs.push(field::too_many(&path, count, MAX_TOPOLOGY_LABELS));
                }
                meta::validate_labels(topology, &path, errs);
            }
            if let Some(hostname) = endpoint.get("hostname").and_then(Value::as_str) {
                errs.extend(field::invalid_each(
                    &at.child("hostname"),
                    hostname,
                    names::dns1123_label(hostname),
                ));
            }
            if let Some(zones) = endpoint
                .pointer("/hints/forZones")
                .and_then(Value::as_array)
            {
                let path = at.child("hints").child("forZones");
                if zones.len() > MAX_ZONE_HINTS {
                    errs.push(field::too_many(&path, zones.len(), MAX_ZONE_HINTS));
                } else {
                    let mut seen: Vec<&str> = Vec::new();
                    for (k, zone) in zones.iter().enumerate() {
                        let name = str_of(zone.get("name"));
                        let zone_path = path.index(k).child("name");
                        if seen.contains(&name) {
                            errs.push(field::duplicate(&zone_path, name));
                        } else {
                            seen.push(name);
                        }
                        errs.extend(field::invalid_each(
                            &zone_path,
                            name,
                            names::label_value(name),
                        ));
                    }
                }
            }
        }
    }

    let ports = array(slice.get("ports"));
    let ports_path = Path::new("ports");
    if ports.len() > MAX_PORTS {
        errs.push(field::too_many(&ports_path, ports.len(), MAX_PORTS));
        return;
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let at = ports_path.index(i);
        // kube defaults an unset name to "" and an unset protocol to TCP.
        let name = str_of(port.get("name"));
        if !name.is_empty() {
            errs.extend(field::invalid_each(
                &at.child("name"),
                name,
                names::dns1123_label(name),
            ));
        }
        if seen.contains(&name) {
            errs.push(field::duplicate(&at.child("name"), name));
        } else {
            seen.push(name);
        }
        match port.get("protocol").filter(|v| !v.is_null()) {
            None => {}
            Some(p) if p.as_str().is_some_and(|p| SLICE_PROTOCOLS.contains(&p)) => {}
            Some(p) => errs.push(field::not_supported(
                &at.child("protocol"),
                p,
                &SLICE_PROTOCOLS,
            )),
        }
        if let Some(app) = port.get("appProtocol").and_then(Value::as_str) {
            errs.extend(field::invalid_each(
                &at.child("appProtocol"),
                app,
                names::qualified_name(app),
            ));
        }
    }
}

fn validate_slice_address(
    address: &str,
    address_type: &str,
    allow_loopback: bool,
    path: &Path,
    errs: &mut ErrorList,
) {
    let family = names::parse_ip_sloppy(address).map(|ip| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_none(),
        IpAddr::V4(_) => false,
    });
    match address_type {
        "IPv4" => {
            if family != Some(false) {
                errs.push(field::invalid(
                    path,
                    address,
                    "must be a valid IPv4 address",
                ));
            }
            check_endpoint_ip(address, allow_loopback, path, errs);
        }
        "IPv6" => {
            if family != Some(true) {
                errs.push(field::invalid(
                    path,
                    address,
                    "must be a valid IPv6 address",
                ));
            }
            check_endpoint_ip(address, allow_loopback, path, errs);
        }
        "FQDN" => validate_fqdn(address, path, errs),
        _ => {}
    }
}

/// apimachinery's `IsFullyQualifiedDomainName`.
fn validate_fqdn(name: &str, path: &Path, errs: &mut ErrorList) {
    if name.is_empty() {
        errs.push(field::required(path, ""));
        return;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    let problems = names::dns1123_subdomain(name);
    if !problems.is_empty() {
        errs.push(field::invalid(path, name, &problems.join(",")));
        return;
    }
    if name.split('.').count() < 2 {
        errs.push(field::invalid(
            path,
            name,
            "should be a domain with at least two segments separated by dots",
        ));
        return;
    }
    for label in name.split('.') {
        let problems = names::dns1123_label(label);
        if !problems.is_empty() {
            errs.push(field::invalid(path, label, &problems.join(",")));
            return;
        }
    }
}

// ---------------------------------------------------------------- NetworkPolicy

fn validate_network_policy(policy: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    let spec_path = Path::new("spec");
    let allow_invalid_values = old
        .and_then(|o| o.pointer("/spec/podSelector"))
        .is_some_and(meta::selector_has_invalid_values);
    // CIDRs already stored keep being accepted (kube's AllowCIDRsEvenIfInvalid).
    let old_cidrs: Vec<String> = old.map(policy_cidrs).unwrap_or_default();
    let selector = policy
        .pointer("/spec/podSelector")
        .cloned()
        .unwrap_or(Value::Null);
    meta::validate_label_selector_with(
        &selector,
        allow_invalid_values,
        &spec_path.child("podSelector"),
        errs,
    );
    for (direction, peers_key) in [("ingress", "from"), ("egress", "to")] {
        let rules = array(policy.pointer(&format!("/spec/{direction}")));
        for (i, rule) in rules.iter().enumerate() {
            let at = spec_path.child(direction).index(i);
            for (j, port) in array(rule.get("ports")).iter().enumerate() {
                validate_policy_port(port, &at.child("ports").index(j), errs);
            }
            for (j, peer) in array(rule.get(peers_key)).iter().enumerate() {
                validate_peer(
                    peer,
                    allow_invalid_values,
                    &old_cidrs,
                    &at.child(peers_key).index(j),
                    errs,
                );
            }
        }
    }
    let types = array(policy.pointer("/spec/policyTypes"));
    let types_path = spec_path.child("policyTypes");
    if types.len() > 2 {
        let quoted: Vec<String> = types
            .iter()
            .map(|t| names::go_quote(t.as_str().unwrap_or("")))
            .collect();
        errs.push(field::invalid(
            &types_path,
            Bad::Raw(format!("[]networking.PolicyType{{{}}}", quoted.join(", "))),
            "may not specify more than two policyTypes",
        ));
        return;
    }
    for (i, ty) in types.iter().enumerate() {
        if !matches!(ty.as_str(), Some("Ingress" | "Egress")) {
            errs.push(field::not_supported(
                &types_path.index(i),
                ty,
                &["Ingress", "Egress"],
            ));
        }
    }
}

fn policy_cidrs(policy: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (direction, peers_key) in [("ingress", "from"), ("egress", "to")] {
        for rule in array(policy.pointer(&format!("/spec/{direction}"))) {
            for peer in array(rule.get(peers_key)) {
                if let Some(block) = peer.get("ipBlock") {
                    out.push(str_of(block.get("cidr")).to_string());
                    out.extend(meta::string_list(block.get("except")));
                }
            }
        }
    }
    out
}

fn validate_policy_port(port: &Value, path: &Path, errs: &mut ErrorList) {
    if let Some(protocol) = port.get("protocol").filter(|v| !v.is_null())
        && !protocol
            .as_str()
            .is_some_and(|p| POLICY_PROTOCOLS.contains(&p))
    {
        errs.push(field::not_supported(
            &path.child("protocol"),
            protocol,
            &POLICY_PROTOCOLS,
        ));
    }
    let end_port = port.get("endPort").filter(|v| !v.is_null());
    let end_path = path.child("endPort");
    match port.get("port").filter(|v| !v.is_null()) {
        Some(Value::String(name)) => {
            if let Some(end) = end_port {
                errs.push(field::invalid(
                    &end_path,
                    end,
                    "may not be specified when `port` is non-numeric",
                ));
            }
            errs.extend(field::invalid_each(
                &path.child("port"),
                name,
                names::port_name(name),
            ));
        }
        Some(number) => {
            let number = number.as_i64().unwrap_or(0);
            errs.extend(meta::invalid_int_each(
                &path.child("port"),
                number,
                names::port_number(number),
            ));
            if let Some(end) = end_port {
                let end = end.as_i64().unwrap_or(0);
                if end < number {
                    errs.push(field::invalid(
                        &end_path,
                        end,
                        "must be greater than or equal to `port`",
                    ));
                }
                errs.extend(meta::invalid_int_each(
                    &end_path,
                    end,
                    names::port_number(end),
                ));
            }
        }
        None => {
            if let Some(end) = end_port {
                errs.push(field::invalid(
                    &end_path,
                    end,
                    "may not be specified when `port` is not specified",
                ));
            }
        }
    }
}

fn validate_peer(
    peer: &Value,
    allow_invalid_values: bool,
    old_cidrs: &[String],
    path: &Path,
    errs: &mut ErrorList,
) {
    let mut count = 0;
    for key in ["podSelector", "namespaceSelector"] {
        if let Some(selector) = peer.get(key).filter(|v| !v.is_null()) {
            count += 1;
            meta::validate_label_selector_with(
                selector,
                allow_invalid_values,
                &path.child(key),
                errs,
            );
        }
    }
    let block = peer.get("ipBlock").filter(|v| !v.is_null());
    if let Some(block) = block {
        count += 1;
        validate_ip_block(block, old_cidrs, &path.child("ipBlock"), errs);
    }
    if count == 0 {
        errs.push(field::required(path, "must specify a peer"));
    } else if count > 1 && block.is_some() {
        errs.push(field::forbidden(
            path,
            "may not specify both ipBlock and another peer",
        ));
    }
}

fn validate_ip_block(block: &Value, old_cidrs: &[String], path: &Path, errs: &mut ErrorList) {
    let cidr = str_of(block.get("cidr"));
    if cidr.is_empty() {
        errs.push(field::required(&path.child("cidr"), ""));
        return;
    }
    let check = |value: &str, at: &Path, errs: &mut ErrorList| {
        if !old_cidrs.iter().any(|c| c == value) {
            errs.extend(field::invalid_each(at, value, names::cidr(value)));
        }
    };
    check(cidr, &path.child("cidr"), errs);
    let Some(outer) = names::parse_cidr_sloppy(cidr) else {
        return;
    };
    for (i, except) in meta::string_list(block.get("except")).iter().enumerate() {
        let at = path.child("except").index(i);
        check(except, &at, errs);
        let Some(inner) = names::parse_cidr_sloppy(except) else {
            continue;
        };
        if !cidr_contains(outer, inner.0) || outer.1 >= inner.1 {
            errs.push(field::invalid(
                &at,
                except.as_str(),
                "must be a strict subset of `cidr`",
            ));
        }
    }
}

/// Whether the network `(ip, len)` holds `ip` (same family only, as Go's `IPNet`).
fn cidr_contains(net: (IpAddr, u8), ip: IpAddr) -> bool {
    match (net.0, ip) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(net.1)).unwrap_or(0);
            u32::from(n) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(net.1)).unwrap_or(0);
            u128::from(n) & mask == u128::from(a) & mask
        }
        _ => false,
    }
}

// ---------------------------------------------------------------- Ingress

#[derive(Default)]
struct IngressOptions {
    allow_invalid_secret_name: bool,
    allow_invalid_wildcard_host_rule: bool,
}

fn validate_ingress(ingress: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    let opts = match old {
        Some(old) => IngressOptions {
            allow_invalid_secret_name: array(old.pointer("/spec/tls")).iter().any(|tls| {
                let name = str_of(tls.get("secretName"));
                !name.is_empty() && !names::dns1123_subdomain(name).is_empty()
            }),
            allow_invalid_wildcard_host_rule: array(old.pointer("/spec/rules")).iter().any(
                |rule| {
                    let mut found = ErrorList::new();
                    if str_of(rule.get("host")).contains('*') {
                        validate_rule_value(rule, &Path::root(), &mut found);
                    }
                    !found.is_empty()
                },
            ),
        },
        None => IngressOptions::default(),
    };
    let spec_path = Path::new("spec");
    let rules = ingress.pointer("/spec/rules");
    let rule_list = array(rules);
    let default_backend = ingress
        .pointer("/spec/defaultBackend")
        .filter(|v| !v.is_null());
    if rule_list.is_empty() && default_backend.is_none() {
        let shown = if rules.is_some_and(Value::is_array) {
            "[]networking.IngressRule{}"
        } else {
            "[]networking.IngressRule(nil)"
        };
        errs.push(field::invalid(
            &spec_path,
            Bad::Raw(shown.into()),
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(backend) = default_backend {
        validate_backend(backend, &spec_path.child("defaultBackend"), errs);
    }
    for (i, rule) in rule_list.iter().enumerate() {
        let at = spec_path.child("rules").index(i);
        let host = str_of(rule.get("host"));
        let mut wildcard = false;
        if !host.is_empty() {
            if names::parse_ip_sloppy(host).is_some() {
                errs.push(field::invalid(
                    &at.child("host"),
                    host,
                    "must be a DNS name, not an IP address",
                ));
            }
            if host.contains('*') {
                errs.extend(field::invalid_each(
                    &at.child("host"),
                    host,
                    names::wildcard_dns1123_subdomain(host),
                ));
                wildcard = true;
            } else {
                errs.extend(field::invalid_each(
                    &at.child("host"),
                    host,
                    names::dns1123_subdomain(host),
                ));
            }
        }
        if !wildcard || !opts.allow_invalid_wildcard_host_rule {
            validate_rule_value(rule, &at, errs);
        }
    }
    for (i, tls) in array(ingress.pointer("/spec/tls")).iter().enumerate() {
        let at = spec_path.child("tls").index(i);
        for (j, host) in meta::string_list(tls.get("hosts")).iter().enumerate() {
            let problems = if host.contains('*') {
                names::wildcard_dns1123_subdomain(host)
            } else {
                names::dns1123_subdomain(host)
            };
            errs.extend(field::invalid_each(
                &at.child("hosts").index(j),
                host,
                problems,
            ));
        }
        let secret = str_of(tls.get("secretName"));
        if !opts.allow_invalid_secret_name && !secret.is_empty() {
            errs.extend(field::invalid_each(
                &at.child("secretName"),
                secret,
                names::dns1123_subdomain(secret),
            ));
        }
    }
    let class = ingress
        .pointer("/spec/ingressClassName")
        .and_then(Value::as_str);
    if let Some(class) = class {
        errs.extend(field::invalid_each(
            &spec_path.child("ingressClassName"),
            class,
            names::dns1123_subdomain(class),
        ));
    }
    if old.is_none()
        && let Some(annotation) = ingress
            .pointer("/metadata/annotations")
            .and_then(|a| a.get("kubernetes.io/ingress.class"))
            .and_then(Value::as_str)
        && let Some(class) = class
        && annotation != class
    {
        errs.push(field::invalid(
            &Path::new("annotations").child("kubernetes.io/ingress.class"),
            annotation,
            "must match `ingressClassName` when both are specified",
        ));
    }
}

fn validate_rule_value(rule: &Value, path: &Path, errs: &mut ErrorList) {
    let Some(http) = rule.get("http").filter(|v| !v.is_null()) else {
        return;
    };
    let http_path = path.child("http");
    let paths = array(http.get("paths"));
    if paths.is_empty() {
        errs.push(field::required(&http_path.child("paths"), ""));
    }
    for (i, entry) in paths.iter().enumerate() {
        let at = http_path.child("paths").index(i);
        let Some(path_type) = entry.get("pathType").filter(|v| !v.is_null()) else {
            errs.push(field::required(
                &at.child("pathType"),
                "pathType must be specified",
            ));
            continue;
        };
        let p = str_of(entry.get("path"));
        let p_path = at.child("path");
        match path_type.as_str() {
            Some("Exact" | "Prefix") => {
                if !p.starts_with('/') {
                    errs.push(field::invalid(&p_path, p, "must be an absolute path"));
                }
                if !p.is_empty() {
                    for seq in INVALID_PATH_SEQUENCES {
                        if p.contains(seq) {
                            errs.push(field::invalid(
                                &p_path,
                                p,
                                &format!("must not contain '{seq}'"),
                            ));
                        }
                    }
                    for suffix in INVALID_PATH_SUFFIXES {
                        if p.ends_with(suffix) {
                            errs.push(field::invalid(
                                &p_path,
                                p,
                                &format!("cannot end with '{suffix}'"),
                            ));
                        }
                    }
                }
            }
            Some("ImplementationSpecific") => {
                if !p.is_empty() && !p.starts_with('/') {
                    errs.push(field::invalid(&p_path, p, "must be an absolute path"));
                }
            }
            _ => errs.push(field::not_supported(
                &at.child("pathType"),
                path_type,
                &PATH_TYPES,
            )),
        }
        let backend = entry.get("backend").cloned().unwrap_or(Value::Null);
        validate_backend(&backend, &at.child("backend"), errs);
    }
}

fn validate_backend(backend: &Value, path: &Path, errs: &mut ErrorList) {
    let resource = backend.get("resource").filter(|v| !v.is_null());
    let service = backend.get("service").filter(|v| !v.is_null());
    match (resource, service) {
        (Some(_), Some(_)) => {
            errs.push(field::invalid(
                path,
                "",
                "cannot set both resource and service backends",
            ));
        }
        (Some(resource), None) => validate_local_reference(resource, &path.child("resource"), errs),
        (None, Some(service)) => {
            let service_path = path.child("service");
            let name = str_of(service.get("name"));
            if name.is_empty() {
                errs.push(field::required(&service_path.child("name"), ""));
            } else {
                errs.extend(field::invalid_each(
                    &service_path.child("name"),
                    name,
                    names::dns1035_label(name),
                ));
            }
            let port_name = str_of(service.pointer("/port/name"));
            let number = service
                .pointer("/port/number")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let port_path = service_path.child("port");
            if !port_name.is_empty() && number != 0 {
                errs.push(field::invalid(
                    path,
                    "",
                    "cannot set both port name & port number",
                ));
            } else if !port_name.is_empty() {
                errs.extend(field::invalid_each(
                    &port_path.child("name"),
                    port_name,
                    names::port_name(port_name),
                ));
            } else if number != 0 {
                errs.extend(meta::invalid_int_each(
                    &port_path.child("number"),
                    number,
                    names::port_number(number),
                ));
            } else {
                errs.push(field::required(path, "port name or number is required"));
            }
        }
        (None, None) => errs.push(field::invalid(
            path,
            "",
            "resource or service backend is required",
        )),
    }
}

/// A `TypedLocalObjectReference` (an Ingress resource backend).
fn validate_local_reference(reference: &Value, path: &Path, errs: &mut ErrorList) {
    if let Some(group) = reference.get("apiGroup").and_then(Value::as_str) {
        errs.extend(field::invalid_each(
            &path.child("apiGroup"),
            group,
            names::dns1123_subdomain(group),
        ));
    }
    for key in ["kind", "name"] {
        let value = str_of(reference.get(key));
        if value.is_empty() {
            errs.push(field::required(&path.child(key), ""));
        } else {
            errs.extend(field::invalid_each(
                &path.child(key),
                value,
                names::path_segment_name(value),
            ));
        }
    }
}

// ---------------------------------------------------------------- IngressClass

fn validate_ingress_class(class: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    let spec_path = Path::new("spec");
    let controller = str_of(class.pointer("/spec/controller"));
    let controller_path = spec_path.child("controller");
    if let Some(old) = old {
        let before = str_of(old.pointer("/spec/controller"));
        if before != controller {
            errs.push(field::invalid(&controller_path, controller, IMMUTABLE));
        }
    }
    if controller.is_empty() {
        errs.push(field::required(&controller_path, ""));
    } else {
        if controller.len() > MAX_CONTROLLER_LEN {
            errs.push(field::too_long(&controller_path, MAX_CONTROLLER_LEN));
        }
        validate_domain_prefixed_path(controller, &controller_path, errs);
    }
    let Some(params) = class.pointer("/spec/parameters").filter(|v| !v.is_null()) else {
        return;
    };
    let path = spec_path.child("parameters");
    validate_local_reference(params, &path, errs);
    let Some(scope) = params.get("scope").filter(|v| !v.is_null()) else {
        errs.push(field::required(&path.child("scope"), ""));
        return;
    };
    let namespace = params.get("namespace").filter(|v| !v.is_null());
    match scope.as_str() {
        Some("Namespace") => match namespace {
            None => errs.push(field::required(
                &path.child("namespace"),
                "`parameters.scope` is set to 'Namespace'",
            )),
            Some(ns) => {
                let ns = ns.as_str().unwrap_or("");
                errs.extend(field::invalid_each(
                    &path.child("namespace"),
                    ns,
                    names::dns1123_label(ns),
                ));
            }
        },
        Some("Cluster") => {
            if namespace.is_some() {
                errs.push(field::forbidden(
                    &path.child("namespace"),
                    "`parameters.scope` is set to 'Cluster'",
                ));
            }
        }
        _ => errs.push(field::not_supported(
            &path.child("scope"),
            scope,
            &["Cluster", "Namespace"],
        )),
    }
}

/// apimachinery's `IsDomainPrefixedPath`: `example.com/some/path`.
fn validate_domain_prefixed_path(value: &str, path: &Path, errs: &mut ErrorList) {
    let Some((host, rest)) = value
        .split_once('/')
        .filter(|(h, r)| !h.is_empty() && !r.is_empty())
    else {
        errs.push(field::invalid(
            path,
            value,
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        ));
        return;
    };
    errs.extend(field::invalid_each(
        path,
        host,
        names::dns1123_subdomain(host),
    ));
    let valid = rest
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"/-._~%!$&'()*+,;=:".contains(&c));
    if !valid {
        errs.push(field::invalid(
            path,
            rest,
            "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')",
        ));
    }
}
