//! Validation of `/status` updates (kube's `ValidatePodStatusUpdate`,
//! `ValidateServiceStatusUpdate`, the apps workloads' `Validate*StatusUpdate`): the fields
//! other components read back and turn into addresses or counts. A status update also
//! keeps ObjectMeta's update rules (`meta`), as kube's do.
//!
//! Deliberately narrower than kube for the workloads: only non-negative counters, not the
//! cross-field `cannot be greater than status.replicas` rules, which k3rs's controllers do
//! not promise between two of their own writes.

use serde_json::Value;

use super::field::{self, ErrorList, Path};
use super::meta::{NEGATIVE, str_of};
use super::names;
use crate::apiserver::storage::registry::ResourceInfo;

/// The causes of a 422 for a status update of `new` over `old`, empty when valid.
pub fn validate_status(info: &ResourceInfo, new: &Value, old: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    if info.custom {
        return errs;
    }
    super::meta::validate_object_meta(info, new, Some(old), &mut errs);
    let status = new.get("status").unwrap_or(&Value::Null);
    let path = Path::new("status");
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Pod") => validate_pod_status(status, &path, &mut errs),
        ("", "Service") => validate_load_balancer(status, &path, &mut errs),
        ("networking.k8s.io", "Ingress") => validate_load_balancer(status, &path, &mut errs),
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
        | ("", "ReplicationController") => {
            for (key, value) in status.as_object().into_iter().flatten() {
                if let Some(n) = value.as_i64()
                    && n < 0
                {
                    errs.push(field::invalid(&path.child(key), n, NEGATIVE));
                }
            }
        }
        _ => {}
    }
    errs
}

fn ips(status: &Value, key: &str) -> Vec<String> {
    status
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|entry| str_of(entry.get("ip")).to_string())
        .collect()
}

fn validate_pod_status(status: &Value, path: &Path, errs: &mut ErrorList) {
    for key in ["podIPs", "hostIPs"] {
        let list = ips(status, key);
        let mut families = Vec::new();
        for (i, ip) in list.iter().enumerate() {
            errs.extend(field::invalid_each(
                &path.child(key).index(i),
                ip,
                names::ip(ip),
            ));
            if let Some(parsed) = names::parse_ip_sloppy(ip) {
                families.push(parsed.is_ipv4());
            }
        }
        let dual_stack = families.len() == 2 && families[0] != families[1];
        if list.len() > 1 && !dual_stack {
            errs.push(field::invalid(
                &path.child(key),
                field::Bad::Raw(status.get(key).map(Value::to_string).unwrap_or_default()),
                "may specify no more than one IP for each IP family",
            ));
        }
    }
    for key in ["podIP", "hostIP"] {
        let ip = str_of(status.get(key));
        if !ip.is_empty() {
            errs.extend(field::invalid_each(&path.child(key), ip, names::ip(ip)));
        }
    }
    let nominated = str_of(status.get("nominatedNodeName"));
    if !nominated.is_empty() {
        errs.extend(field::invalid_each(
            &path.child("nominatedNodeName"),
            nominated,
            names::dns1123_subdomain(nominated),
        ));
    }
}

fn validate_load_balancer(status: &Value, path: &Path, errs: &mut ErrorList) {
    let ingress_path = path.child("loadBalancer").child("ingress");
    let ingress = status
        .pointer("/loadBalancer/ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    for (i, entry) in ingress.enumerate() {
        let at = ingress_path.index(i);
        let ip = str_of(entry.get("ip"));
        if !ip.is_empty() {
            errs.extend(field::invalid_each(&at.child("ip"), ip, names::ip(ip)));
        }
        let hostname = str_of(entry.get("hostname"));
        if !hostname.is_empty() {
            errs.extend(field::invalid_each(
                &at.child("hostname"),
                hostname,
                names::dns1123_subdomain(hostname),
            ));
            if names::parse_ip_sloppy(hostname).is_some() {
                errs.push(field::invalid(
                    &at.child("hostname"),
                    hostname,
                    "must be a DNS name, not an IP address",
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::storage::registry::Registry;
    use serde_json::json;

    fn causes(group: &str, plural: &str, status: Value) -> Vec<(String, String)> {
        let registry = Registry::new();
        let info = registry.find(group, "v1", plural).expect("resource");
        let old = json!({"metadata": {"name": "x", "namespace": "default", "uid": "u"}});
        let mut new = old.clone();
        new["status"] = status;
        validate_status(&info, &new, &old)
            .into_iter()
            .map(|c| (c.field.unwrap_or_default(), c.message.unwrap_or_default()))
            .collect()
    }

    #[test]
    fn pod_status_ips_must_parse() {
        assert!(
            causes(
                "",
                "pods",
                json!({"podIPs": [{"ip": "10.42.0.5"}, {"ip": "fd00::5"}]})
            )
            .is_empty()
        );
        let got = causes(
            "",
            "pods",
            json!({"podIP": "10.42.0.5\n}", "podIPs": [{"ip": "1.2.3.4; drop"}]}),
        );
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, "status.podIPs[0]");
        assert!(
            got[0]
                .1
                .starts_with("Invalid value: \"1.2.3.4; drop\": must be a valid IP address")
        );
        assert_eq!(got[1].0, "status.podIP");
        let got = causes(
            "",
            "pods",
            json!({"podIPs": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]}),
        );
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0]
                .1
                .ends_with("may specify no more than one IP for each IP family")
        );
    }

    #[test]
    fn service_load_balancer_status() {
        assert!(
            causes(
                "",
                "services",
                json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}})
            )
            .is_empty()
        );
        let got = causes(
            "",
            "services",
            json!({"loadBalancer": {"ingress": [{"ip": "x"}, {"hostname": "10.0.0.1"}]}}),
        );
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, "status.loadBalancer.ingress[0].ip");
        assert_eq!(
            got[1],
            (
                "status.loadBalancer.ingress[1].hostname".to_string(),
                "Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address".to_string()
            )
        );
    }

    #[test]
    fn workload_counters_are_not_negative() {
        let got = causes(
            "apps",
            "deployments",
            json!({"replicas": -1, "readyReplicas": 2}),
        );
        assert_eq!(
            got,
            vec![(
                "status.replicas".to_string(),
                "Invalid value: -1: must be greater than or equal to 0".to_string()
            )]
        );
    }
}
