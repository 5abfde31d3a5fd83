//! Service validation (kube's `ValidateService` and `ValidateServiceUpdate`): ports and
//! their names, protocols, target ports and node ports, the type and what each type
//! allows, cluster IPs and IP families (and how an update may change them), external
//! IPs, source ranges, session affinity and the traffic policies. Every field the proxy
//! turns into nftables rules is checked here first.
//!
//! kube's REST layer fills in some fields before it validates (defaults such as
//! `allocateLoadBalancerNodePorts` or the ClientIP timeout, the allocated cluster IPs and
//! node ports an update left out, the fields a type change drops); the validator first
//! derives that object (`effective`) so it answers as kube does for the same request.

use std::net::IpAddr;

use serde_json::{Value, json};

use super::core::validate_endpoint_ip;
use super::field::{self, Bad, ErrorList, Path};
use super::meta::{self, IMMUTABLE, str_of, string_list, string_slice_value};
use super::names;

const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const AFFINITIES: [&str; 2] = ["ClientIP", "None"];
const TRAFFIC_POLICIES: [&str; 2] = ["Cluster", "Local"];
const IP_FAMILIES: [&str; 2] = ["IPv4", "IPv6"];
const IP_FAMILY_POLICIES: [&str; 3] = ["PreferDualStack", "RequireDualStack", "SingleStack"];
/// kube's `MaxClientIPServiceAffinitySeconds`.
const MAX_AFFINITY_SECONDS: i64 = 86400;
const SOURCE_RANGES_ANNOTATION: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";
const TOPOLOGY_MODE_ANNOTATION: &str = "service.kubernetes.io/topology-mode";
const TOPOLOGY_HINTS_ANNOTATION: &str = "service.kubernetes.io/topology-aware-hints";

pub fn validate_service(new: &Value, old: Option<&Value>, errs: &mut ErrorList) {
    let svc = effective(new, old.is_none());
    if let Some(old) = old {
        let old = effective(old, true);
        validate_cluster_ips_update(&old, &svc, errs);
        validate_ip_families_update(&old, &svc, errs);
        validate_load_balancer_class(Some(&old), &svc, errs);
        if needs_health_check(&old)
            && needs_health_check(&svc)
            && spec_int(&svc, "healthCheckNodePort") != spec_int(&old, "healthCheckNodePort")
        {
            errs.push(field::forbidden(
                &Path::new("spec").child("healthCheckNodePort"),
                IMMUTABLE,
            ));
        }
    }
    validate(&svc, errs);
}

// ---------------------------------------------------------------- the object kube validates

/// `new` as kube's REST layer hands it to validation: defaults k3rs's defaulting does not
/// apply and the create-time `clusterIPs` sync. On update the caller has already applied
/// `prepare_update` (kube's `patchAllocatedValues`, `normalizeClusterIPs`,
/// `dropTypeDependentFields`) to the object it stores.
fn effective(new: &Value, creating: bool) -> Value {
    let mut svc = new.clone();
    // Every write below indexes `spec`: make it an object (a decoded Service's always is).
    if let Some(map) = svc.as_object_mut()
        && !map.get("spec").is_some_and(Value::is_object)
    {
        map.insert("spec".into(), json!({}));
    }
    if !svc.get("spec").is_some_and(Value::is_object) {
        return svc;
    }
    if creating {
        let ip = spec_str(&svc, "clusterIP").to_string();
        if !ip.is_empty() && spec_list(&svc, "clusterIPs").is_empty() {
            svc["spec"]["clusterIPs"] = json!([ip]);
        }
    }
    apply_missing_defaults(&mut svc);
    svc
}

/// What kube's REST layer does to a Service update before validating and storing it:
/// allocated values a client left out are kept (`patchAllocatedValues`), `clusterIP` and
/// `clusterIPs` are synced, and the fields a type change no longer needs are dropped
/// (node ports, health-check port, external traffic policy, …, when the client did not
/// change them). Applied to the object that is stored, so what is stored is what was
/// validated.
pub(crate) fn prepare_update(old: &Value, new: &mut Value) {
    if !new.get("spec").is_some_and(Value::is_object)
        || !old.get("spec").is_some_and(Value::is_object)
    {
        return;
    }
    patch_allocated_values(old, new);
    normalize_cluster_ips(old, new);
    drop_type_dependent_fields(old, new);
}

/// Defaults kube's `SetDefaults_Service` applies that k3rs's defaulting leaves out.
fn apply_missing_defaults(svc: &mut Value) {
    let ty = service_type(svc).to_string();
    let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if ty == "LoadBalancer"
        && spec
            .get("allocateLoadBalancerNodePorts")
            .is_none_or(Value::is_null)
    {
        spec.insert("allocateLoadBalancerNodePorts".into(), json!(true));
    }
    if spec.get("sessionAffinity").and_then(Value::as_str) == Some("ClientIP")
        && spec
            .get("sessionAffinityConfig")
            .and_then(|c| c.pointer("/clientIP/timeoutSeconds"))
            .is_none_or(Value::is_null)
    {
        spec.insert(
            "sessionAffinityConfig".into(),
            json!({"clientIP": {"timeoutSeconds": 10800}}),
        );
    }
    // A zero or empty targetPort means "the port".
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            let unset = match port.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::String(s)) => s.is_empty(),
                Some(v) => v.as_i64() == Some(0),
            };
            if unset && let Some(p) = port.get("port").cloned() {
                port.insert("targetPort".into(), p);
            }
        }
    }
    let external_ips = spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty());
    let externally_accessible =
        ty == "LoadBalancer" || ty == "NodePort" || (ty == "ClusterIP" && external_ips);
    if externally_accessible
        && spec
            .get("externalTrafficPolicy")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        spec.insert("externalTrafficPolicy".into(), json!("Cluster"));
    }
}

fn patch_allocated_values(old: &Value, svc: &mut Value) {
    if service_type(old) != "ExternalName" && service_type(svc) != "ExternalName" {
        if spec_str(svc, "clusterIP").is_empty()
            && let Some(ip) = old.pointer("/spec/clusterIP").filter(|v| !v.is_null())
        {
            svc["spec"]["clusterIP"] = ip.clone();
        }
        if spec_list(svc, "clusterIPs").is_empty()
            && let Some(ips) = old
                .pointer("/spec/clusterIPs")
                .filter(|v| v.as_array().is_some_and(|l| !l.is_empty()))
        {
            svc["spec"]["clusterIPs"] = ips.clone();
        }
        // IP families are kept as allocated when an update leaves them out.
        for key in ["ipFamilies", "ipFamilyPolicy"] {
            let missing = svc
                .pointer(&format!("/spec/{key}"))
                .is_none_or(|v| v.is_null() || v.as_array().is_some_and(Vec::is_empty));
            if missing
                && let Some(v) = old
                    .pointer(&format!("/spec/{key}"))
                    .filter(|v| !v.is_null())
            {
                svc["spec"][key] = v.clone();
            }
        }
    }
    if needs_node_ports(old) && needs_node_ports(svc) {
        let old_ports: Vec<(String, i64)> = spec_array(old, "ports")
            .iter()
            .map(|p| (str_of(p.get("name")).to_string(), int_of(p.get("nodePort"))))
            .collect();
        let used: Vec<i64> = spec_array(svc, "ports")
            .iter()
            .map(|p| int_of(p.get("nodePort")))
            .filter(|n| *n != 0 && old_ports.iter().any(|(_, o)| o == n))
            .collect();
        if let Some(ports) = svc.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                if int_of(port.get("nodePort")) != 0 {
                    continue;
                }
                let name = str_of(port.get("name")).to_string();
                if let Some((_, n)) = old_ports.iter().find(|(o, _)| *o == name)
                    && *n != 0
                    && !used.contains(n)
                {
                    port.insert("nodePort".into(), json!(n));
                }
            }
        }
    }
    if needs_health_check(old)
        && needs_health_check(svc)
        && spec_int(svc, "healthCheckNodePort") == 0
    {
        let hc = spec_int(old, "healthCheckNodePort");
        if hc != 0 {
            svc["spec"]["healthCheckNodePort"] = json!(hc);
        }
    }
}

fn normalize_cluster_ips(old: &Value, svc: &mut Value) {
    let old_ip = spec_str(old, "clusterIP").to_string();
    let new_ip = spec_str(svc, "clusterIP").to_string();
    let old_ips = spec_list(old, "clusterIPs");
    if !old_ips.is_empty() && spec_list(svc, "clusterIPs").is_empty() && old_ip == new_ip {
        svc["spec"]["clusterIPs"] = json!(old_ips);
    }
    if old_ip != new_ip {
        let same_ips = spec_list(svc, "clusterIPs") == old_ips;
        if !old_ip.is_empty() && new_ip.is_empty() {
            if same_ips {
                remove_spec(svc, "clusterIPs");
            }
        } else if same_ips {
            svc["spec"]["clusterIPs"] = json!([new_ip]);
        }
    }
}

fn drop_type_dependent_fields(old: &Value, svc: &mut Value) {
    let same = |key: &str, svc: &Value| {
        old.pointer(&format!("/spec/{key}")) == svc.pointer(&format!("/spec/{key}"))
    };
    if service_type(old) != "ExternalName" && service_type(svc) == "ExternalName" {
        if same("clusterIP", svc) && same("clusterIPs", svc) {
            remove_spec(svc, "clusterIP");
            remove_spec(svc, "clusterIPs");
        }
        for key in ["ipFamilies", "ipFamilyPolicy"] {
            if same(key, svc) {
                remove_spec(svc, key);
            }
        }
    }
    if needs_node_ports(old) && !needs_node_ports(svc) {
        let node_ports = |s: &Value| -> Vec<i64> {
            spec_array(s, "ports")
                .iter()
                .map(|p| int_of(p.get("nodePort")))
                .collect()
        };
        if node_ports(old) == node_ports(svc)
            && let Some(ports) = svc.pointer_mut("/spec/ports").and_then(Value::as_array_mut)
        {
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                port.remove("nodePort");
            }
        }
    }
    if needs_health_check(old) && !needs_health_check(svc) && same("healthCheckNodePort", svc) {
        remove_spec(svc, "healthCheckNodePort");
    }
    if service_type(old) == "LoadBalancer" && service_type(svc) != "LoadBalancer" {
        if old.pointer("/spec/allocateLoadBalancerNodePorts").is_some()
            && same("allocateLoadBalancerNodePorts", svc)
        {
            remove_spec(svc, "allocateLoadBalancerNodePorts");
        }
        if same("loadBalancerClass", svc) {
            remove_spec(svc, "loadBalancerClass");
        }
    }
    if externally_accessible(old)
        && !externally_accessible(svc)
        && same("externalTrafficPolicy", svc)
    {
        remove_spec(svc, "externalTrafficPolicy");
    }
}

// ---------------------------------------------------------------- ValidateService

fn validate(svc: &Value, errs: &mut ErrorList) {
    let spec_path = Path::new("spec");
    let ty = service_type(svc);
    let headless = is_headless(svc);
    let ports = spec_array(svc, "ports");
    let cluster_ips = spec_list(svc, "clusterIPs");

    let annotations = svc.pointer("/metadata/annotations");
    let mode = annotations
        .and_then(|a| a.get(TOPOLOGY_MODE_ANNOTATION))
        .and_then(Value::as_str);
    let hints = annotations
        .and_then(|a| a.get(TOPOLOGY_HINTS_ANNOTATION))
        .and_then(Value::as_str);
    if let (Some(mode), Some(hints)) = (mode, hints)
        && mode != hints
    {
        errs.push(field::invalid(
            &Path::new("metadata")
                .child("annotations")
                .key(TOPOLOGY_MODE_ANNOTATION),
            mode,
            &format!("must match annotations[{TOPOLOGY_HINTS_ANNOTATION}] when both are specified"),
        ));
    }

    if ports.is_empty() && !headless && ty != "ExternalName" {
        errs.push(field::required(&spec_path.child("ports"), ""));
    }
    match ty {
        "LoadBalancer" | "NodePort" if headless => errs.push(field::invalid(
            &spec_path.child("clusterIPs").index(0),
            "None",
            &format!("may not be set to 'None' for {ty} services"),
        )),
        "ExternalName" => {
            if !cluster_ips.is_empty() {
                errs.push(field::forbidden(
                    &spec_path.child("clusterIPs"),
                    "may not be set for ExternalName services",
                ));
            }
            if !spec_list(svc, "ipFamilies").is_empty() {
                errs.push(field::forbidden(
                    &spec_path.child("ipFamilies"),
                    "may not be set for ExternalName services",
                ));
            }
            if svc
                .pointer("/spec/ipFamilyPolicy")
                .is_some_and(|v| !v.is_null())
            {
                errs.push(field::forbidden(
                    &spec_path.child("ipFamilyPolicy"),
                    "may not be set for ExternalName services",
                ));
            }
            // A CNAME may end in a dot (fully qualified).
            let external_name = spec_str(svc, "externalName");
            let cname = external_name.strip_suffix('.').unwrap_or(external_name);
            if cname.is_empty() {
                errs.push(field::required(&spec_path.child("externalName"), ""));
            } else {
                errs.extend(field::invalid_each(
                    &spec_path.child("externalName"),
                    cname,
                    names::dns1123_subdomain(cname),
                ));
            }
        }
        _ => {}
    }

    let mut port_names: Vec<&str> = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        validate_port(
            port,
            ports.len() > 1,
            &mut port_names,
            &spec_path.child("ports").index(i),
            errs,
        );
    }

    if let Some(selector) = svc.pointer("/spec/selector") {
        meta::validate_labels(selector, &spec_path.child("selector"), errs);
    }

    let affinity = spec_str(svc, "sessionAffinity");
    let affinity_config = svc
        .pointer("/spec/sessionAffinityConfig")
        .filter(|v| !v.is_null());
    if affinity.is_empty() {
        errs.push(field::required(&spec_path.child("sessionAffinity"), ""));
    } else if !AFFINITIES.contains(&affinity) {
        errs.push(field::not_supported(
            &spec_path.child("sessionAffinity"),
            affinity,
            &AFFINITIES,
        ));
    }
    if affinity == "ClientIP" {
        validate_client_ip_affinity(
            affinity_config,
            &spec_path.child("sessionAffinityConfig"),
            errs,
        );
    } else if affinity == "None" && affinity_config.is_some() {
        errs.push(field::forbidden(
            &spec_path.child("sessionAffinityConfig"),
            "must not be set when session affinity is None",
        ));
    }

    validate_cluster_ips(svc, errs);

    for (i, ip) in spec_array(svc, "externalIPs").iter().enumerate() {
        let ip = ip.as_str().unwrap_or("");
        let at = spec_path.child("externalIPs").index(i);
        let problems = names::ip(ip);
        if problems.is_empty() {
            validate_endpoint_ip(ip, &at, errs);
        } else {
            errs.extend(field::invalid_each(&at, ip, problems));
        }
    }

    if ty.is_empty() {
        errs.push(field::required(&spec_path.child("type"), ""));
    } else if !TYPES.contains(&ty) {
        errs.push(field::not_supported(&spec_path.child("type"), ty, &TYPES));
    }

    if ty == "ClusterIP" {
        for (i, port) in ports.iter().enumerate() {
            if int_of(port.get("nodePort")) != 0 {
                errs.push(field::forbidden(
                    &spec_path.child("ports").index(i).child("nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }

    // Node ports and ports are unique per protocol.
    let mut node_ports: Vec<(&str, i64)> = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let node_port = int_of(port.get("nodePort"));
        if node_port == 0 {
            continue;
        }
        let key = (str_of(port.get("protocol")), node_port);
        if node_ports.contains(&key) {
            errs.push(field::duplicate(
                &spec_path.child("ports").index(i).child("nodePort"),
                node_port,
            ));
        }
        node_ports.push(key);
    }
    let mut seen_ports: Vec<(&str, i64)> = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let key = (str_of(port.get("protocol")), int_of(port.get("port")));
        if seen_ports.contains(&key) {
            errs.push(field::duplicate(
                &spec_path.child("ports").index(i),
                Bad::Raw(format!(
                    "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), Port:{}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}",
                    names::go_quote(key.0),
                    key.1
                )),
            ));
        }
        seen_ports.push(key);
    }

    validate_source_ranges(svc, errs);

    if svc
        .pointer("/spec/allocateLoadBalancerNodePorts")
        .is_some_and(|v| !v.is_null())
        && ty != "LoadBalancer"
    {
        errs.push(field::forbidden(
            &spec_path.child("allocateLoadBalancerNodePorts"),
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }

    validate_load_balancer_class(None, svc, errs);
    validate_external_traffic_policy(svc, errs);

    let internal = svc
        .pointer("/spec/internalTrafficPolicy")
        .filter(|v| !v.is_null());
    match internal {
        None if matches!(ty, "NodePort" | "LoadBalancer" | "ClusterIP") => {
            errs.push(field::required(
                &spec_path.child("internalTrafficPolicy"),
                "",
            ));
        }
        Some(policy)
            if !policy
                .as_str()
                .is_some_and(|p| TRAFFIC_POLICIES.contains(&p)) =>
        {
            errs.push(field::not_supported(
                &spec_path.child("internalTrafficPolicy"),
                policy,
                &TRAFFIC_POLICIES,
            ));
        }
        _ => {}
    }

    if let Some(distribution) = svc
        .pointer("/spec/trafficDistribution")
        .filter(|v| !v.is_null())
        && distribution.as_str() != Some("PreferClose")
    {
        errs.push(field::not_supported(
            &spec_path.child("trafficDistribution"),
            distribution,
            &["PreferClose"],
        ));
    }
}

/// kube's `validateServicePort`.
fn validate_port<'a>(
    port: &'a Value,
    require_name: bool,
    names_seen: &mut Vec<&'a str>,
    path: &Path,
    errs: &mut ErrorList,
) {
    let name = str_of(port.get("name"));
    if require_name && name.is_empty() {
        errs.push(field::required(&path.child("name"), ""));
    } else if !name.is_empty() {
        errs.extend(field::invalid_each(
            &path.child("name"),
            name,
            names::dns1123_label(name),
        ));
        if names_seen.contains(&name) {
            errs.push(field::duplicate(&path.child("name"), name));
        } else {
            names_seen.push(name);
        }
    }
    validate_port_protocol(port, path, errs);
    validate_port_num_or_name(port.get("targetPort"), &path.child("targetPort"), errs);
}

/// `port` (1–65535), `protocol` and `appProtocol` (a qualified name) of a Service or an
/// Endpoints port.
pub(crate) fn validate_port_protocol(port: &Value, path: &Path, errs: &mut ErrorList) {
    let number = int_of(port.get("port"));
    errs.extend(meta::invalid_int_each(
        &path.child("port"),
        number,
        names::port_number(number),
    ));
    validate_protocol(port.get("protocol"), &path.child("protocol"), errs);
    if let Some(app_protocol) = port.get("appProtocol").and_then(Value::as_str) {
        errs.extend(field::invalid_each(
            &path.child("appProtocol"),
            app_protocol,
            names::qualified_name(app_protocol),
        ));
    }
}

/// A port protocol: required, TCP/UDP/SCTP.
pub(crate) fn validate_protocol(protocol: Option<&Value>, path: &Path, errs: &mut ErrorList) {
    match protocol.filter(|v| !v.is_null()) {
        None => errs.push(field::required(path, "")),
        Some(Value::String(p)) if p.is_empty() => errs.push(field::required(path, "")),
        Some(Value::String(p)) if PROTOCOLS.contains(&p.as_str()) => {}
        Some(other) => errs.push(field::not_supported(path, other, &PROTOCOLS)),
    }
}

/// kube's `ValidatePortNumOrName`: a number 1–65535 or an IANA service name.
pub(crate) fn validate_port_num_or_name(value: Option<&Value>, path: &Path, errs: &mut ErrorList) {
    match value {
        Some(Value::String(name)) => {
            errs.extend(field::invalid_each(path, name, names::port_name(name)));
        }
        Some(Value::Number(_)) | None | Some(Value::Null) => {
            let number = int_of(value);
            errs.extend(meta::invalid_int_each(
                path,
                number,
                names::port_number(number),
            ));
        }
        Some(other) => errs.push(field::invalid(path, other, "must be a number or a name")),
    }
}

fn validate_client_ip_affinity(config: Option<&Value>, path: &Path, errs: &mut ErrorList) {
    let when = "when session affinity type is ClientIP";
    let Some(config) = config else {
        errs.push(field::required(path, when));
        return;
    };
    let Some(client_ip) = config.get("clientIP").filter(|v| !v.is_null()) else {
        errs.push(field::required(&path.child("clientIP"), when));
        return;
    };
    let timeout_path = path.child("clientIP").child("timeoutSeconds");
    match client_ip.get("timeoutSeconds").filter(|v| !v.is_null()) {
        None => errs.push(field::required(&timeout_path, when)),
        Some(timeout) => {
            let seconds = timeout.as_i64().unwrap_or(0);
            if seconds <= 0 || seconds > MAX_AFFINITY_SECONDS {
                errs.push(field::invalid(
                    &timeout_path,
                    timeout,
                    &format!("must be greater than 0 and less than {MAX_AFFINITY_SECONDS}"),
                ));
            }
        }
    }
}

/// kube's `ValidateServiceClusterIPsRelatedFields`.
fn validate_cluster_ips(svc: &Value, errs: &mut ErrorList) {
    if service_type(svc) == "ExternalName" {
        return;
    }
    let spec_path = Path::new("spec");
    let ips_path = spec_path.child("clusterIPs");
    let cluster_ip = spec_str(svc, "clusterIP");
    let cluster_ips = spec_list(svc, "clusterIPs");
    let ips_value = || string_slice_value(svc.pointer("/spec/clusterIPs"));
    if !cluster_ip.is_empty() {
        if cluster_ips.is_empty() {
            errs.push(field::required(&ips_path, ""));
        } else if cluster_ips[0] != cluster_ip {
            errs.push(field::invalid(
                &ips_path,
                ips_value(),
                "first value must match `clusterIP`",
            ));
        }
    } else if !cluster_ips.is_empty() {
        errs.push(field::invalid(
            &ips_path,
            ips_value(),
            "must be empty when `clusterIP` is not specified",
        ));
    }

    let families = spec_list(svc, "ipFamilies");
    for (i, family) in families.iter().enumerate() {
        let at = spec_path.child("ipFamilies").index(i);
        if !IP_FAMILIES.contains(&family.as_str()) {
            errs.push(field::not_supported(&at, family.as_str(), &IP_FAMILIES));
        }
        if families[..i].contains(family) {
            errs.push(field::duplicate(&at, family.as_str()));
        }
    }
    if let Some(policy) = svc.pointer("/spec/ipFamilyPolicy").filter(|v| !v.is_null())
        && !policy
            .as_str()
            .is_some_and(|p| IP_FAMILY_POLICIES.contains(&p))
    {
        errs.push(field::not_supported(
            &spec_path.child("ipFamilyPolicy"),
            policy,
            &IP_FAMILY_POLICIES,
        ));
    }

    let mut invalid = false;
    for (i, ip) in cluster_ips.iter().enumerate() {
        if i == 0 && ip == "None" {
            if cluster_ips.len() > 1 {
                invalid = true;
                errs.push(field::invalid(
                    &ips_path,
                    ips_value(),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        let problems = names::ip(ip);
        invalid |= !problems.is_empty();
        errs.extend(field::invalid_each(&ips_path.index(i), ip, problems));
    }
    if cluster_ips.len() > 2 {
        errs.push(field::invalid(
            &ips_path,
            ips_value(),
            "may only hold up to 2 values",
        ));
    }
    if invalid {
        return;
    }
    if cluster_ips.len() > 1 {
        let parsed: Vec<bool> = cluster_ips.iter().map(|ip| is_ipv6(ip)).collect();
        let dual = parsed.iter().any(|v6| *v6) && parsed.iter().any(|v6| !*v6);
        if !dual {
            errs.push(field::invalid(
                &ips_path,
                ips_value(),
                "may specify no more than one IP for each IP family",
            ));
        }
    }
    if !is_headless(svc) {
        for (i, (ip, family)) in cluster_ips.iter().zip(&families).enumerate() {
            if family == "IPv4" && is_ipv6(ip) {
                errs.push(field::invalid(
                    &ips_path.index(i),
                    ip.as_str(),
                    &format!("expected an IPv4 value as indicated by `ipFamilies[{i}]`"),
                ));
            }
            if family == "IPv6" && !is_ipv6(ip) {
                errs.push(field::invalid(
                    &ips_path.index(i),
                    ip.as_str(),
                    &format!("expected an IPv6 value as indicated by `ipFamilies[{i}]`"),
                ));
            }
        }
    }
}

fn validate_source_ranges(svc: &Value, errs: &mut ErrorList) {
    let is_lb = service_type(svc) == "LoadBalancer";
    let ranges = spec_array(svc, "loadBalancerSourceRanges");
    let only_lb = "may only be used when `type` is 'LoadBalancer'";
    if !ranges.is_empty() {
        // kube's path has the field's Go name here.
        let path = Path::new("spec").child("LoadBalancerSourceRanges");
        if !is_lb {
            errs.push(field::forbidden(&path, only_lb));
        }
        for (i, range) in ranges.iter().enumerate() {
            // Historically space-padded values are accepted.
            let value = range.as_str().unwrap_or("").trim();
            errs.extend(field::invalid_each(
                &path.index(i),
                value,
                names::cidr(value),
            ));
        }
    } else if let Some(value) = svc
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(SOURCE_RANGES_ANNOTATION))
        .and_then(Value::as_str)
    {
        let path = Path::new("metadata")
            .child("annotations")
            .key(SOURCE_RANGES_ANNOTATION);
        if !is_lb {
            errs.push(field::forbidden(&path, only_lb));
        }
        let value = value.trim();
        if !value.is_empty() {
            for cidr in value.split(',') {
                let cidr = cidr.trim();
                errs.extend(field::invalid_each(&path, cidr, names::cidr(cidr)));
            }
        }
    }
}

fn validate_load_balancer_class(old: Option<&Value>, svc: &Value, errs: &mut ErrorList) {
    let path = Path::new("spec").child("loadBalancerClass");
    let class = svc
        .pointer("/spec/loadBalancerClass")
        .filter(|v| !v.is_null());
    if let Some(old) = old
        && service_type(old) == "LoadBalancer"
        && service_type(svc) == "LoadBalancer"
        && old
            .pointer("/spec/loadBalancerClass")
            .filter(|v| !v.is_null())
            != class
    {
        errs.push(field::invalid(
            &path,
            class.map(Bad::from).unwrap_or(Bad::Null),
            "may not change once set",
        ));
    }
    if service_type(svc) == "LoadBalancer" {
        if let Some(class) = class {
            let class = class.as_str().unwrap_or("");
            errs.extend(field::invalid_each(
                &path,
                class,
                names::qualified_name(class),
            ));
        }
    } else if class.is_some() {
        errs.push(field::forbidden(
            &path,
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
}

fn validate_external_traffic_policy(svc: &Value, errs: &mut ErrorList) {
    let spec_path = Path::new("spec");
    let policy = spec_str(svc, "externalTrafficPolicy");
    if !externally_accessible(svc) {
        if !policy.is_empty() {
            errs.push(field::invalid(
                &spec_path.child("externalTrafficPolicy"),
                policy,
                "may only be set for externally-accessible services",
            ));
        }
    } else if policy.is_empty() {
        errs.push(field::required(
            &spec_path.child("externalTrafficPolicy"),
            "",
        ));
    } else if !TRAFFIC_POLICIES.contains(&policy) {
        errs.push(field::not_supported(
            &spec_path.child("externalTrafficPolicy"),
            policy,
            &TRAFFIC_POLICIES,
        ));
    }
    let health_check = spec_int(svc, "healthCheckNodePort");
    let path = spec_path.child("healthCheckNodePort");
    if !needs_health_check(svc) {
        if health_check != 0 {
            errs.push(field::invalid(
                &path,
                health_check,
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            ));
        }
    } else if health_check != 0 {
        // Zero is allocated by kube's REST layer; k3rs allocates none, so an absent value
        // is left alone here.
        errs.extend(meta::invalid_int_each(
            &path,
            health_check,
            names::port_number(health_check),
        ));
    }
}

// ---------------------------------------------------------------- ValidateServiceUpdate

/// kube's `validateUpgradeDowngradeClusterIPs`.
fn validate_cluster_ips_update(old: &Value, svc: &Value, errs: &mut ErrorList) {
    if service_type(old) == "ExternalName" || service_type(svc) == "ExternalName" {
        return;
    }
    if is_headless(old) && is_headless(svc) {
        return;
    }
    let path = Path::new("spec").child("clusterIPs");
    let old_ips = spec_list(old, "clusterIPs");
    let new_ips = spec_list(svc, "clusterIPs");
    let value = || string_slice_value(svc.pointer("/spec/clusterIPs"));
    let changed = "may not change once set";
    if old_ips.len() == new_ips.len() {
        for (i, (a, b)) in old_ips.iter().zip(&new_ips).enumerate() {
            if a != b {
                errs.push(field::invalid(&path.index(i), value(), changed));
            }
        }
    } else if old_ips.len() > new_ips.len() {
        if new_ips.is_empty() {
            errs.push(field::invalid(
                &path.index(0),
                value(),
                "primary clusterIP can not be unset",
            ));
        }
        if !old_ips.is_empty() && !new_ips.is_empty() && new_ips[0] != old_ips[0] {
            errs.push(field::invalid(&path.index(0), value(), changed));
        }
        if new_ips.len() == 1 && spec_str(svc, "ipFamilyPolicy") != "SingleStack" {
            errs.push(field::invalid(
                &Path::new("spec").child("ipFamilyPolicy"),
                policy_value(svc),
                "must be set to 'SingleStack' when releasing the secondary clusterIP",
            ));
        }
    } else if !old_ips.is_empty() && new_ips[0] != old_ips[0] {
        errs.push(field::invalid(&path.index(0), value(), changed));
    }
}

/// kube's `validateUpgradeDowngradeIPFamilies`.
fn validate_ip_families_update(old: &Value, svc: &Value, errs: &mut ErrorList) {
    if service_type(old) == "ExternalName" || service_type(svc) == "ExternalName" {
        return;
    }
    if is_headless(old) || is_headless(svc) {
        return;
    }
    let path = Path::new("spec").child("ipFamilies");
    let old_families = spec_list(old, "ipFamilies");
    let new_families = spec_list(svc, "ipFamilies");
    let families = || string_slice_value(svc.pointer("/spec/ipFamilies"));
    let ips = || string_slice_value(svc.pointer("/spec/clusterIPs"));
    let changed = "may not change once set";
    if old_families.len() == new_families.len() {
        for (a, b) in old_families.iter().zip(&new_families) {
            if a != b {
                errs.push(field::invalid(&path.index(0), families(), changed));
            }
        }
    } else if old_families.len() > new_families.len() {
        if spec_list(svc, "clusterIPs").is_empty() {
            errs.push(field::invalid(
                &path.index(0),
                families(),
                "primary ipFamily can not be unset",
            ));
        }
        if !new_families.is_empty() && new_families[0] != old_families[0] {
            errs.push(field::invalid(&path.index(0), ips(), changed));
        }
        if new_families.len() == 1 && spec_str(svc, "ipFamilyPolicy") != "SingleStack" {
            errs.push(field::invalid(
                &Path::new("spec").child("ipFamilyPolicy"),
                policy_value(svc),
                "must be set to 'SingleStack' when releasing the secondary ipFamily",
            ));
        }
    } else if !old_families.is_empty()
        && !new_families.is_empty()
        && new_families[0] != old_families[0]
    {
        errs.push(field::invalid(&path.index(0), ips(), changed));
    }
}

fn policy_value(svc: &Value) -> Bad {
    svc.pointer("/spec/ipFamilyPolicy")
        .filter(|v| !v.is_null())
        .map(Bad::from)
        .unwrap_or(Bad::Null)
}

// ---------------------------------------------------------------- helpers

fn service_type(svc: &Value) -> &str {
    spec_str(svc, "type")
}

fn is_headless(svc: &Value) -> bool {
    let ips = spec_list(svc, "clusterIPs");
    ips.len() == 1 && ips[0] == "None"
}

fn needs_node_ports(svc: &Value) -> bool {
    matches!(service_type(svc), "NodePort" | "LoadBalancer")
}

/// kube's `ExternallyAccessible`.
fn externally_accessible(svc: &Value) -> bool {
    match service_type(svc) {
        "LoadBalancer" | "NodePort" => true,
        "ClusterIP" => !spec_array(svc, "externalIPs").is_empty(),
        _ => false,
    }
}

/// kube's `NeedsHealthCheck`.
fn needs_health_check(svc: &Value) -> bool {
    service_type(svc) == "LoadBalancer" && spec_str(svc, "externalTrafficPolicy") == "Local"
}

/// Whether an address is IPv6 as Go's `IsIPv6String` answers (IPv4-mapped is IPv4).
fn is_ipv6(ip: &str) -> bool {
    match names::parse_ip_sloppy(ip) {
        Some(IpAddr::V6(v6)) => v6.to_ipv4_mapped().is_none(),
        _ => false,
    }
}

fn spec_str<'a>(svc: &'a Value, key: &str) -> &'a str {
    super::str_at(svc, &format!("/spec/{key}"))
}

fn spec_int(svc: &Value, key: &str) -> i64 {
    int_of(svc.get("spec").and_then(|s| s.get(key)))
}

fn spec_list(svc: &Value, key: &str) -> Vec<String> {
    string_list(svc.get("spec").and_then(|s| s.get(key)))
}

fn spec_array<'a>(svc: &'a Value, key: &str) -> &'a [Value] {
    svc.get("spec")
        .and_then(|s| s.get(key))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn remove_spec(svc: &mut Value, key: &str) {
    if let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove(key);
    }
}

/// An integer field, 0 when absent or not an integer.
pub(crate) fn int_of(value: Option<&Value>) -> i64 {
    value.and_then(Value::as_i64).unwrap_or(0)
}
