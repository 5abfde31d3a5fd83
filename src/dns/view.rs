//! The answers: an in-memory view built from Services and EndpointSlices, and the lookup
//! rules of CoreDNS's `kubernetes` plugin as k3s configures it (`pods insecure`, fallthrough
//! for reverse zones): A/AAAA for Services (ClusterIP, or ready endpoints when headless),
//! endpoint hostnames, SRV for named ports, PTR, ExternalName as CNAME, `a-b-c-d.<ns>.pod`,
//! NXDOMAIN for names that do not exist in the cluster domain and NODATA (NOERROR, no
//! answers, the SOA) for names that exist without records of the asked type. Pure.
//!
//! Objects are untrusted, also after they are stored: a Service whose name, namespace or
//! ExternalName the API would refuse is left out of the view, and so are an endpoint
//! hostname that is not a DNS label and a port whose name, protocol or number is not
//! valid; each with one warning. No such field becomes part of a record name.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::wire::{
    CLASS_IN, Message, RCODE_NOERROR, RCODE_NXDOMAIN, RData, Record, TYPE_A, TYPE_AAAA, TYPE_ANY,
    TYPE_SOA,
};

/// CoreDNS's default TTL for cluster records.
pub const TTL: u32 = 5;
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What to do with a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Answer with this message.
    Local(Message),
    /// Not ours: ask the upstream resolvers.
    Forward,
}

/// Every cluster name and its records.
#[derive(Debug, Clone, Default)]
pub struct View {
    domain: String,
    records: HashMap<String, Vec<RData>>,
    /// Names that exist (with or without records): every owner and its ancestors up to the
    /// domain, so `svc.<domain>` is NODATA rather than NXDOMAIN.
    existing: HashSet<String>,
    serial: u32,
}

/// `10.1.2.3` → `10-1-2-3`, `fd00::1` → `fd00--1` (CoreDNS's endpoint names).
fn warn_skipped(what: &str, namespace: &str, name: &str) {
    crate::skip::warn_once(&format!("dns/{what}/{namespace}/{name}"), || {
        tracing::warn!(
            namespace = %namespace.escape_debug(),
            name = %name.escape_debug(),
            "DNS: skipping {what} that does not parse"
        );
    });
}

fn dashed(ip: &IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

/// The reverse-lookup name of an address.
pub fn reverse_name(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            format!("{}.{}.{}.{}.in-addr.arpa", o[3], o[2], o[1], o[0])
        }
        IpAddr::V6(v6) => {
            let mut labels: Vec<String> = Vec::with_capacity(34);
            for byte in v6.octets().iter().rev() {
                labels.push(format!("{:x}", byte & 0xf));
                labels.push(format!("{:x}", byte >> 4));
            }
            format!("{}.ip6.arpa", labels.join("."))
        }
    }
}

fn address(ip: IpAddr) -> RData {
    match ip {
        IpAddr::V4(v4) => RData::A(v4),
        IpAddr::V6(v6) => RData::Aaaa(v6),
    }
}

impl View {
    /// Builds the view for `domain` (e.g. `cluster.local`). `serial` goes in the SOA.
    pub fn build(
        domain: &str,
        services: &[Service],
        slices: &[EndpointSlice],
        serial: u32,
    ) -> View {
        let domain = domain.trim_matches('.').to_ascii_lowercase();
        let mut view = View {
            domain: domain.clone(),
            serial,
            ..View::default()
        };
        view.existing.insert(domain.clone());
        let mut slices_by_service: BTreeMap<(String, String), Vec<&EndpointSlice>> =
            BTreeMap::new();
        for slice in slices {
            if let (Some(ns), Some(svc)) = (
                slice.metadata.namespace.as_ref(),
                slice
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SERVICE_NAME_LABEL)),
            ) {
                slices_by_service
                    .entry((ns.clone(), svc.clone()))
                    .or_default()
                    .push(slice);
            }
        }
        for svc in services {
            let (Some(ns), Some(name), Some(spec)) = (
                svc.metadata.namespace.as_ref(),
                svc.metadata.name.as_ref(),
                svc.spec.as_ref(),
            ) else {
                continue;
            };
            if !crate::names::dns1123_label(name).is_empty()
                || !crate::names::dns1123_label(ns).is_empty()
            {
                warn_skipped("a Service whose name", ns, name);
                continue;
            }
            let fqdn = format!("{name}.{ns}.svc.{domain}").to_ascii_lowercase();
            if spec.type_.as_deref() == Some("ExternalName") {
                if let Some(target) = &spec.external_name {
                    if !crate::names::dns1123_subdomain(
                        &target.trim_end_matches('.').to_ascii_lowercase(),
                    )
                    .is_empty()
                    {
                        warn_skipped("a Service whose externalName", ns, name);
                        continue;
                    }
                    view.add(
                        &fqdn,
                        RData::Cname(target.trim_end_matches('.').to_ascii_lowercase()),
                    );
                }
                continue;
            }
            let cluster_ips: Vec<IpAddr> = spec
                .cluster_ips
                .iter()
                .flatten()
                .chain(spec.cluster_ip.iter())
                .filter_map(|ip| ip.parse().ok())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let headless = spec.cluster_ip.as_deref() == Some("None");
            let ports = spec.ports.clone().unwrap_or_default();
            let svc_slices = slices_by_service
                .get(&(ns.clone(), name.clone()))
                .cloned()
                .unwrap_or_default();
            // (endpoint name, ip, ready) and the slice's ports for each endpoint.
            let mut endpoints = Vec::new();
            for slice in &svc_slices {
                for endpoint in &slice.endpoints {
                    let ready = endpoint
                        .conditions
                        .as_ref()
                        .and_then(|c| c.ready)
                        .unwrap_or(true);
                    for ip in endpoint
                        .addresses
                        .iter()
                        .filter_map(|a| a.parse::<IpAddr>().ok())
                    {
                        let hostname = endpoint.hostname.as_deref().filter(|h| {
                            let valid = crate::names::dns1123_label(h).is_empty();
                            if !valid {
                                warn_skipped("an endpoint hostname of Service", ns, name);
                            }
                            valid
                        });
                        let label = hostname
                            .map(str::to_string)
                            .unwrap_or_else(|| dashed(&ip))
                            .to_ascii_lowercase();
                        endpoints.push((
                            format!("{label}.{fqdn}"),
                            ip,
                            ready,
                            slice.ports.clone().unwrap_or_default(),
                        ));
                    }
                }
            }
            view.existing.insert(fqdn.clone());
            if !headless {
                for ip in &cluster_ips {
                    view.add(&fqdn, address(*ip));
                    view.add(&reverse_name(ip), RData::Ptr(fqdn.clone()));
                }
            }
            for (endpoint_name, ip, ready, _) in &endpoints {
                if !ready {
                    continue;
                }
                if headless {
                    view.add(&fqdn, address(*ip));
                    view.add(endpoint_name, address(*ip));
                }
                view.add(&reverse_name(ip), RData::Ptr(endpoint_name.clone()));
            }
            for port in &ports {
                let Some(port_name) = port.name.as_deref().filter(|n| !n.is_empty()) else {
                    continue;
                };
                let proto = port
                    .protocol
                    .as_deref()
                    .unwrap_or("TCP")
                    .to_ascii_lowercase();
                let Ok(service_port) = u16::try_from(port.port) else {
                    warn_skipped("a port number of Service", ns, name);
                    continue;
                };
                if !crate::names::dns1123_label(port_name).is_empty()
                    || !matches!(proto.as_str(), "tcp" | "udp" | "sctp")
                    || service_port == 0
                {
                    warn_skipped("a port name or protocol of Service", ns, name);
                    continue;
                }
                let srv_name = format!("_{}._{proto}.{fqdn}", port_name.to_ascii_lowercase());
                if !headless {
                    view.add(
                        &srv_name,
                        RData::Srv {
                            priority: 0,
                            weight: 100,
                            port: service_port,
                            target: fqdn.clone(),
                        },
                    );
                    continue;
                }
                for (endpoint_name, _, ready, slice_ports) in &endpoints {
                    let target_port = slice_ports
                        .iter()
                        .find(|p| p.name.as_deref() == Some(port_name))
                        .and_then(|p| p.port)
                        .and_then(|p| u16::try_from(p).ok())
                        .filter(|p| *p != 0);
                    if let (true, Some(target_port)) = (*ready, target_port) {
                        view.add(
                            &srv_name,
                            RData::Srv {
                                priority: 0,
                                weight: 100,
                                port: target_port,
                                target: endpoint_name.clone(),
                            },
                        );
                    }
                }
            }
        }
        // Reverse names are not part of the cluster domain's tree.
        let owners: Vec<String> = view.records.keys().cloned().collect();
        for owner in owners {
            let mut name = owner.as_str();
            while let Some((_, parent)) = name.split_once('.') {
                if !parent.ends_with(&domain) {
                    break;
                }
                view.existing.insert(parent.to_string());
                name = parent;
            }
        }
        view
    }

    fn add(&mut self, name: &str, data: RData) {
        let entry = self.records.entry(name.to_string()).or_default();
        if !entry.contains(&data) {
            entry.push(data);
        }
        if name.ends_with(&self.domain) {
            self.existing.insert(name.to_string());
        }
    }

    fn in_domain(&self, name: &str) -> bool {
        name == self.domain
            || (name.len() > self.domain.len()
                && name.ends_with(&self.domain)
                && name.as_bytes()[name.len() - self.domain.len() - 1] == b'.')
    }

    fn soa(&self) -> Record {
        Record {
            name: self.domain.clone(),
            class: CLASS_IN,
            ttl: TTL,
            data: RData::Soa {
                mname: format!("ns.dns.{}", self.domain),
                rname: format!("hostmaster.{}", self.domain),
                serial: self.serial,
                refresh: 7200,
                retry: 1800,
                expire: 86400,
                minimum: TTL,
            },
        }
    }

    fn record(name: &str, data: RData) -> Record {
        Record {
            name: name.to_string(),
            class: CLASS_IN,
            ttl: TTL,
            data,
        }
    }

    /// `a-b-c-d.<ns>.pod.<domain>` → the address in its first label.
    fn pod_address(&self, name: &str) -> Option<IpAddr> {
        let rest = name.strip_suffix(&self.domain)?.strip_suffix('.')?;
        let mut labels = rest.split('.');
        let (first, _ns, pod, end) = (
            labels.next()?,
            labels.next()?,
            labels.next()?,
            labels.next(),
        );
        if pod != "pod" || end.is_some() {
            return None;
        }
        first
            .replace('-', ".")
            .parse::<std::net::Ipv4Addr>()
            .map(IpAddr::V4)
            .ok()
            .or_else(|| {
                first
                    .replace('-', ":")
                    .parse::<std::net::Ipv6Addr>()
                    .ok()
                    .map(IpAddr::V6)
            })
    }

    /// Answers `query`'s first question.
    pub fn answer(&self, query: &Message) -> Answer {
        let Some(question) = query.questions.first() else {
            return Answer::Local(query.response(super::wire::RCODE_FORMERR));
        };
        let name = question.name.as_str();
        let qtype = question.qtype;
        let is_reverse = name.ends_with(".in-addr.arpa") || name.ends_with(".ip6.arpa");
        if !self.in_domain(name) && !is_reverse {
            return Answer::Forward;
        }
        let mut response = query.response(RCODE_NOERROR);
        let mut records: Vec<RData> = self.records.get(name).cloned().unwrap_or_default();
        if records.is_empty()
            && let Some(ip) = self.pod_address(name)
        {
            records.push(address(ip));
        }
        if records.is_empty() {
            if is_reverse {
                // Not a cluster address: fall through to the upstreams, as k3s's Corefile does.
                return Answer::Forward;
            }
            if name == self.domain && qtype == TYPE_SOA {
                response.answers.push(self.soa());
                return Answer::Local(response);
            }
            if !self.existing.contains(name) {
                response = query.response(RCODE_NXDOMAIN);
            }
            response.authority.push(self.soa());
            return Answer::Local(response);
        }
        let cname = records
            .iter()
            .find(|r| matches!(r, RData::Cname(_)))
            .cloned();
        let matching: Vec<RData> = match cname {
            Some(c) => vec![c],
            None => records
                .into_iter()
                .filter(|r| qtype == TYPE_ANY || r.rtype() == qtype)
                .collect(),
        };
        if matching.is_empty() {
            response.authority.push(self.soa());
            return Answer::Local(response);
        }
        for data in matching {
            if let RData::Srv { target, .. } = &data {
                for extra in self.records.get(target).into_iter().flatten() {
                    if matches!(extra.rtype(), TYPE_A | TYPE_AAAA) {
                        response
                            .additional
                            .push(Self::record(target, extra.clone()));
                    }
                }
            }
            response.answers.push(Self::record(name, data));
        }
        Answer::Local(response)
    }
}

#[cfg(test)]
mod tests;
