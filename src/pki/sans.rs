//! The subject alternative names of the API server's serving certificate.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A set of DNS names (lower-cased) and IP addresses for a serving certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServingSans {
    dns: BTreeSet<String>,
    ips: BTreeSet<IpAddr>,
}

impl ServingSans {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The names the API server must answer to, as k3s puts them on its serving certificate:
    /// `host_names` (the hostname, the node name), `node_ips` (advertise address, node IPs),
    /// `127.0.0.1`, `::1`, `localhost`, `kubernetes`, `kubernetes.default`,
    /// `kubernetes.default.svc`, `kubernetes.default.svc.<cluster_domain>`, the `kubernetes`
    /// Service IP (first address of the service CIDR) and every `--tls-san` (IPs as IP SANs,
    /// names as DNS SANs).
    pub fn for_apiserver(
        host_names: &[&str],
        node_ips: &[IpAddr],
        cluster_domain: &str,
        kubernetes_service_ip: IpAddr,
        tls_sans: &[String],
    ) -> Self {
        let mut sans = Self::new();
        for name in [
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
        ] {
            sans.add(name);
        }
        sans.add(&format!("kubernetes.default.svc.{cluster_domain}"));
        sans.add_ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
        sans.add_ip(IpAddr::V6(Ipv6Addr::LOCALHOST));
        sans.add_ip(kubernetes_service_ip);
        for name in host_names {
            sans.add(name);
        }
        for ip in node_ips {
            sans.add_ip(*ip);
        }
        for san in tls_sans {
            sans.add(san);
        }
        sans
    }

    /// Adds an entry: an IP SAN if it parses as an IP address, else a DNS SAN. Empty strings
    /// are ignored.
    pub fn add(&mut self, name_or_ip: &str) {
        let s = name_or_ip.trim();
        if s.is_empty() {
            return;
        }
        match s.parse::<IpAddr>() {
            Ok(ip) => self.add_ip(ip),
            Err(_) => {
                self.dns.insert(s.to_ascii_lowercase());
            }
        }
    }

    /// Adds an IP SAN. Unspecified addresses (`0.0.0.0`, `::`) are ignored.
    pub fn add_ip(&mut self, ip: IpAddr) {
        if !ip.is_unspecified() {
            self.ips.insert(ip);
        }
    }

    /// The DNS names, sorted.
    pub fn dns_names(&self) -> impl Iterator<Item = &str> {
        self.dns.iter().map(String::as_str)
    }

    /// The IP addresses, sorted.
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.ips.iter().copied()
    }

    /// Entries of `self` that `present` lacks, for logging why a certificate is re-issued.
    pub fn missing_from(&self, present: &ServingSans) -> Vec<String> {
        self.dns
            .difference(&present.dns)
            .cloned()
            .chain(self.ips.difference(&present.ips).map(IpAddr::to_string))
            .collect()
    }

    pub(crate) fn from_parts(dns: &[String], ips: &[IpAddr]) -> Self {
        let mut sans = Self::new();
        for d in dns {
            sans.add(d);
        }
        for ip in ips {
            sans.add_ip(*ip);
        }
        sans
    }
}

impl fmt::Display for ServingSans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let all: Vec<String> = self
            .dns
            .iter()
            .cloned()
            .chain(self.ips.iter().map(IpAddr::to_string))
            .collect();
        f.write_str(&all.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apiserver_names() {
        let sans = ServingSans::for_apiserver(
            &["node-a", "node-a"],
            &["192.168.1.10".parse().expect("ip")],
            "cluster.local",
            "10.43.0.1".parse().expect("ip"),
            &["API.example.com".to_string(), "fd00::7".to_string()],
        );
        let dns: Vec<&str> = sans.dns_names().collect();
        assert_eq!(
            dns,
            [
                "api.example.com",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                "localhost",
                "node-a",
            ]
        );
        let ips: Vec<String> = sans.ips().map(|i| i.to_string()).collect();
        assert_eq!(
            ips,
            ["10.43.0.1", "127.0.0.1", "192.168.1.10", "::1", "fd00::7"]
        );
        let mut fewer = sans.clone();
        fewer.dns.remove("node-a");
        assert_eq!(sans.missing_from(&fewer), ["node-a"]);
        assert!(fewer.missing_from(&sans).is_empty());
        let mut s = ServingSans::new();
        s.add_ip("0.0.0.0".parse().expect("ip"));
        s.add(" ");
        assert_eq!(s, ServingSans::new());
    }
}
