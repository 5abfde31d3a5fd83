//! The proxy's view of the cluster: Services and EndpointSlices flattened into one
//! [`ServicePort`] per (Service, port), with the endpoints each kind of traffic may use.
//! Pure functions of the API objects; no I/O.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Kubernetes' default `sessionAffinityConfig.clientIP.timeoutSeconds` (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10800;

/// A transport protocol a Service port can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// Parses the API's spelling (`TCP` when unset, as the API server defaults it).
    pub fn parse(value: Option<&str>) -> Option<Protocol> {
        match value.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// nftables' name for it.
    pub fn nft(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// One backend of a Service port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    pub ip: IpAddr,
    pub port: u16,
    /// On this proxy's node (`nodeName`).
    pub local: bool,
    /// May be a pod of this node: on it, or with no `nodeName` saying where. Only such an
    /// endpoint can be its own client (hairpin traffic, masqueraded), since a client's
    /// packets pass through its own node's rules; listing every endpoint of the cluster
    /// made the hairpin set the largest part of each node's table.
    pub hairpin: bool,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

/// One port of one Service, with everything the renderer needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    pub namespace: String,
    pub name: String,
    /// The Service port's name ("" for a single unnamed port).
    pub port_name: String,
    pub protocol: Protocol,
    pub cluster_ips: Vec<IpAddr>,
    pub port: u16,
    pub node_port: Option<u16>,
    /// `status.loadBalancer.ingress[].ip`, served like NodePort traffic.
    pub load_balancer_ips: Vec<IpAddr>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// `sessionAffinity: ClientIP` timeout in seconds.
    pub affinity_timeout: Option<u32>,
    /// `externalTrafficPolicy: Local`.
    pub external_local: bool,
    /// `internalTrafficPolicy: Local`.
    pub internal_local: bool,
    /// Sorted, deduplicated.
    pub endpoints: Vec<Endpoint>,
}

impl ServicePort {
    /// `ns/name/proto/port-name`, used in chain names and logs.
    pub fn id(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.namespace,
            self.name,
            self.protocol.nft(),
            self.port_name
        )
    }

    /// Endpoints for traffic that may go anywhere in the cluster: the ready ones, or when
    /// none is ready the serving-terminating ones (as kube-proxy falls back).
    pub fn cluster_endpoints(&self) -> Vec<&Endpoint> {
        usable(self.endpoints.iter())
    }

    /// Endpoints on this node, chosen the same way.
    pub fn local_endpoints(&self) -> Vec<&Endpoint> {
        usable(self.endpoints.iter().filter(|e| e.local))
    }

    /// Whether NodePort / LoadBalancer / external IP traffic is handled at all.
    pub fn has_external(&self) -> bool {
        self.node_port.is_some()
            || !self.load_balancer_ips.is_empty()
            || !self.external_ips.is_empty()
    }
}

fn usable<'a>(endpoints: impl Iterator<Item = &'a Endpoint> + Clone) -> Vec<&'a Endpoint> {
    let ready: Vec<&Endpoint> = endpoints.clone().filter(|e| e.ready).collect();
    if !ready.is_empty() {
        return ready;
    }
    endpoints.filter(|e| e.serving && e.terminating).collect()
}

fn parse_ips<'a>(values: impl IntoIterator<Item = &'a String>) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = values.into_iter().filter_map(|v| v.parse().ok()).collect();
    ips.sort();
    ips.dedup();
    ips
}

/// Logs (once per Service port and reason) that a port is left out of the rules.
fn skip_warning(namespace: &str, name: &str, port_name: &str, problem: &str) {
    crate::skip::warn_once(
        &format!("proxy/{namespace}/{name}/{port_name}/{problem}"),
        || {
            tracing::warn!(
                service = %format!("{namespace}/{name}"),
                port = %crate::names::go_quote(&port_name.chars().take(64).collect::<String>()),
                problem,
                "skipping a Service port that kube's validation would refuse"
            )
        },
    );
}

/// Flattens Services and their EndpointSlices into service ports. Headless and
/// ExternalName Services are skipped (the proxy has nothing to do for them).
/// `node_name` decides which endpoints are local. Takes the objects or the informer
/// stores' `Arc`s as they are (no copy of every object per sync).
pub fn service_ports<S: Borrow<Service>, E: Borrow<EndpointSlice>>(
    services: &[S],
    slices: &[E],
    node_name: &str,
) -> Vec<ServicePort> {
    let mut slices_by_service: BTreeMap<(String, String), Vec<&EndpointSlice>> = BTreeMap::new();
    for slice in slices {
        let slice: &EndpointSlice = slice.borrow();
        let (Some(ns), Some(service)) = (
            slice.metadata.namespace.as_ref(),
            slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL)),
        ) else {
            continue;
        };
        slices_by_service
            .entry((ns.clone(), service.clone()))
            .or_default()
            .push(slice);
    }
    let mut out = Vec::new();
    for svc in services {
        let svc: &Service = svc.borrow();
        let (Some(ns), Some(name), Some(spec)) = (
            svc.metadata.namespace.as_ref(),
            svc.metadata.name.as_ref(),
            svc.spec.as_ref(),
        ) else {
            continue;
        };
        if spec.type_.as_deref() == Some("ExternalName") {
            continue;
        }
        // Names end up in chain names and logs: a Service that kube's validation would
        // have refused (written past it, or stored before k3rs validated) is skipped.
        if let Some(problem) = crate::names::dns1123_label(ns)
            .into_iter()
            .chain(crate::names::dns1035_label(name))
            .next()
        {
            skip_warning(ns, name, "", &problem);
            continue;
        }
        let mut cluster_ips = parse_ips(spec.cluster_ips.iter().flatten());
        if cluster_ips.is_empty() {
            cluster_ips = parse_ips(spec.cluster_ip.iter());
        }
        if cluster_ips.is_empty() {
            // Headless ("None") or not yet allocated.
            continue;
        }
        let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
            spec.session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .and_then(|t| u32::try_from(t).ok())
                .filter(|t| *t > 0)
                .unwrap_or(DEFAULT_AFFINITY_TIMEOUT)
        });
        let load_balancer_ips = parse_ips(
            svc.status
                .iter()
                .filter_map(|s| s.load_balancer.as_ref())
                .filter_map(|lb| lb.ingress.as_ref())
                .flatten()
                .filter_map(|i| i.ip.as_ref()),
        );
        let is_lb = spec.type_.as_deref() == Some("LoadBalancer");
        let external_ips = parse_ips(spec.external_ips.iter().flatten());
        let service_slices = slices_by_service
            .get(&(ns.clone(), name.clone()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        for port in spec.ports.iter().flatten() {
            let port_name = port.name.clone().unwrap_or_default();
            if let Some(problem) = (!port_name.is_empty())
                // kube validates Service port names as DNS-1123 labels.
                .then(|| crate::names::dns1123_label(&port_name))
                .into_iter()
                .flatten()
                .next()
            {
                skip_warning(ns, name, &port_name, &format!("port name: {problem}"));
                continue;
            }
            let Some(protocol) = Protocol::parse(port.protocol.as_deref()) else {
                skip_warning(ns, name, &port_name, "protocol is not TCP, UDP or SCTP");
                continue;
            };
            let Some(service_port) = u16::try_from(port.port).ok().filter(|p| *p > 0) else {
                skip_warning(ns, name, &port_name, "port is not in 1-65535");
                continue;
            };
            let node_port = port
                .node_port
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p > 0);
            let mut endpoints = Vec::new();
            for slice in service_slices {
                let Some(slice_port) = slice.ports.iter().flatten().find(|p| {
                    p.name.as_deref().unwrap_or_default() == port_name
                        && Protocol::parse(p.protocol.as_deref()) == Some(protocol)
                }) else {
                    continue;
                };
                let Some(target) = slice_port.port.and_then(|p| u16::try_from(p).ok()) else {
                    continue;
                };
                for endpoint in &slice.endpoints {
                    let conditions = endpoint.conditions.clone().unwrap_or_default();
                    // Unset conditions mean "unknown", which kube treats as true for ready
                    // and serving, false for terminating.
                    let ready = conditions.ready.unwrap_or(true);
                    let serving = conditions.serving.unwrap_or(ready);
                    let terminating = conditions.terminating.unwrap_or(false);
                    let local = endpoint.node_name.as_deref() == Some(node_name);
                    // One address per endpoint is what kube-proxy uses.
                    if let Some(ip) = endpoint.addresses.first().and_then(|a| a.parse().ok()) {
                        endpoints.push(Endpoint {
                            ip,
                            port: target,
                            local,
                            hairpin: local || endpoint.node_name.is_none(),
                            ready,
                            serving,
                            terminating,
                        });
                    }
                }
            }
            endpoints.sort();
            endpoints.dedup_by(|a, b| a.ip == b.ip && a.port == b.port);
            out.push(ServicePort {
                namespace: ns.clone(),
                name: name.clone(),
                port_name,
                protocol,
                cluster_ips: cluster_ips.clone(),
                port: service_port,
                node_port,
                load_balancer_ips: if is_lb {
                    load_balancer_ips.clone()
                } else {
                    Vec::new()
                },
                external_ips: external_ips.clone(),
                affinity_timeout,
                external_local: spec.external_traffic_policy.as_deref() == Some("Local"),
                internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
                endpoints,
            });
        }
    }
    out.sort_by_key(ServicePort::id);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(value: serde_json::Value) -> Service {
        serde_json::from_value(value).expect("service")
    }

    fn slice(value: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(value).expect("slice")
    }

    #[test]
    fn flattens_ports_and_matches_slice_ports_by_name_and_protocol() {
        let svc = service(json!({
            "metadata": {"namespace": "ns", "name": "web"},
            "spec": {"clusterIP": "10.43.0.5", "clusterIPs": ["10.43.0.5"],
                     "sessionAffinity": "ClientIP",
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080},
                               {"name": "dns", "port": 53, "protocol": "UDP"}]}
        }));
        let es = slice(json!({
            "metadata": {"namespace": "ns", "name": "web-1",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                      {"name": "dns", "port": 5353, "protocol": "UDP"}],
            "endpoints": [
                {"addresses": ["10.42.0.2"], "conditions": {"ready": true}, "nodeName": "me"},
                {"addresses": ["10.42.1.2"], "conditions": {"ready": false, "serving": true,
                 "terminating": true}, "nodeName": "other"}
            ]
        }));
        let ports = service_ports(&[svc], &[es], "me");
        assert_eq!(ports.len(), 2);
        let dns = &ports[1];
        assert_eq!(dns.id(), "ns/web/udp/dns");
        assert_eq!(dns.endpoints[0].port, 5353);
        let http = &ports[0];
        assert_eq!(http.node_port, Some(30080));
        assert_eq!(http.affinity_timeout, Some(DEFAULT_AFFINITY_TIMEOUT));
        assert_eq!(http.endpoints.len(), 2);
        let cluster: Vec<_> = http
            .cluster_endpoints()
            .iter()
            .map(|e| e.ip.to_string())
            .collect();
        assert_eq!(cluster, ["10.42.0.2"]);
        assert!(http.local_endpoints()[0].local);
    }

    #[test]
    fn only_endpoints_that_may_be_on_this_node_can_hairpin() {
        let svc = service(json!({
            "metadata": {"namespace": "ns", "name": "web"},
            "spec": {"clusterIP": "10.43.0.5", "ports": [{"port": 80}]}
        }));
        let es = slice(json!({
            "metadata": {"namespace": "ns", "name": "web-1",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"port": 8080}],
            "endpoints": [
                {"addresses": ["10.42.0.2"], "nodeName": "me"},
                {"addresses": ["10.42.1.2"], "nodeName": "other"},
                {"addresses": ["192.0.2.7"]}
            ]
        }));
        let ports = service_ports(&[svc], &[es], "me");
        let hairpin: Vec<(String, bool, bool)> = ports[0]
            .endpoints
            .iter()
            .map(|e| (e.ip.to_string(), e.local, e.hairpin))
            .collect();
        assert_eq!(
            hairpin,
            [
                ("10.42.0.2".to_string(), true, true),
                ("10.42.1.2".to_string(), false, false),
                // No nodeName: it may be this node's pod.
                ("192.0.2.7".to_string(), false, true),
            ]
        );
    }

    #[test]
    fn terminating_serving_endpoints_are_the_fallback_when_none_is_ready() {
        let endpoint = |ip: &str, ready, serving, terminating| Endpoint {
            ip: ip.parse().expect("ip"),
            port: 80,
            local: false,
            hairpin: false,
            ready,
            serving,
            terminating,
        };
        let mut port = ServicePort {
            namespace: "ns".into(),
            name: "s".into(),
            port_name: String::new(),
            protocol: Protocol::Tcp,
            cluster_ips: vec!["10.43.0.1".parse().expect("ip")],
            port: 80,
            node_port: None,
            load_balancer_ips: vec![],
            external_ips: vec![],
            affinity_timeout: None,
            external_local: false,
            internal_local: false,
            endpoints: vec![
                endpoint("10.0.0.1", false, true, true),
                endpoint("10.0.0.2", false, false, true),
                endpoint("10.0.0.3", false, false, false),
            ],
        };
        let ips: Vec<_> = port
            .cluster_endpoints()
            .iter()
            .map(|e| e.ip.to_string())
            .collect();
        assert_eq!(ips, ["10.0.0.1"]);
        port.endpoints.push(endpoint("10.0.0.4", true, true, false));
        let ips: Vec<_> = port
            .cluster_endpoints()
            .iter()
            .map(|e| e.ip.to_string())
            .collect();
        assert_eq!(ips, ["10.0.0.4"]);
    }

    #[test]
    fn headless_and_external_name_services_are_skipped() {
        let headless = service(json!({
            "metadata": {"namespace": "ns", "name": "h"},
            "spec": {"clusterIP": "None", "ports": [{"port": 80}]}
        }));
        let external = service(json!({
            "metadata": {"namespace": "ns", "name": "e"},
            "spec": {"type": "ExternalName", "externalName": "example.com"}
        }));
        let no_slices: &[EndpointSlice] = &[];
        assert!(service_ports(&[headless, external], no_slices, "me").is_empty());
    }

    #[test]
    fn ports_and_services_kube_would_refuse_are_skipped_and_the_rest_kept() {
        let long = "é".repeat(150);
        let svc = service(json!({
            "metadata": {"namespace": "ns", "name": "web"},
            "spec": {"clusterIP": "10.43.0.9", "ports": [
                {"name": "http", "port": 80},
                {"name": long, "port": 81},
                {"name": "a;b", "port": 82},
                {"name": "Web_1", "port": 83},
                {"name": "ok", "port": 84, "protocol": "ICMP"},
                {"name": "zero", "port": 0},
                {"name": "a-port-name-longer-than-15", "port": 85},
            ]}
        }));
        let bad_name = service(json!({
            "metadata": {"namespace": "ns", "name": "Bad}Name"},
            "spec": {"clusterIP": "10.43.0.10", "ports": [{"port": 80}]}
        }));
        let bad_namespace = service(json!({
            "metadata": {"namespace": "n s", "name": "x"},
            "spec": {"clusterIP": "10.43.0.11", "ports": [{"port": 80}]}
        }));
        let no_slices: &[EndpointSlice] = &[];
        let ports = service_ports(&[svc, bad_name, bad_namespace], no_slices, "me");
        let names: Vec<&str> = ports.iter().map(|p| p.port_name.as_str()).collect();
        assert_eq!(names, vec!["a-port-name-longer-than-15", "http"]);
    }
}
