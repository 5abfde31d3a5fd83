//! The pure renderer: service ports + node addresses → the nftables objects of one
//! `ip k3rs` / `ip6 k3rs` table, laid out like kube-proxy's nftables mode, and the text
//! that `nft -f -` applies: a full replacement, or the difference between two rulesets.
//!
//! Layout (one table per family):
//! - base chains `filter-{input,forward,output}` (priority -110, before DNAT) jump to
//!   `service-endpoints-check` / `nodeport-endpoints-check`, which look the destination up
//!   in the `no-endpoint-services` / `no-endpoint-nodeports` verdict maps (reject or drop);
//! - `nat-{prerouting,output}` jump to `services`, which looks `daddr . l4proto . dport` up
//!   in `service-ips` and `l4proto . dport` (for `daddr` in `nodeport-ips`) in
//!   `service-nodeports`;
//! - per Service port a `service-…` chain (masquerade sources outside `cluster-cidrs`,
//!   session affinity, the endpoint pick), an `external-…` chain for NodePort /
//!   LoadBalancer / external IP traffic (masquerade when the policy is Cluster), a `local-…`
//!   chain over this node's endpoints for the Local policies;
//! - the pick is `numgen random mod N` looked up in the balancing chain's own named map
//!   (`<chain>-endpoints`, `i : addr . port`, DNAT straight from it: no chain per endpoint,
//!   and no anonymous maps, which make the kernel walk the whole transaction once each);
//!   with session affinity an `endpoint-…` chain per endpoint instead (the affinity set
//!   update, then DNAT), picked from `<chain>-endpoint-chains` (`i : goto endpoint-…`);
//! - `nat-postrouting` marks hairpin flows (`saddr . daddr` in `hairpin-endpoints`), then
//!   `masquerading` masquerades packets carrying the 0x4000 mark.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;

use sha2::{Digest, Sha256};

use super::model::{Endpoint, ServicePort};

/// The mark `mark-for-masquerade` sets (kube-proxy's value).
pub const MASQUERADE_MARK: &str = "0x4000";

/// An address family, one nftables table each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// nftables' table family.
    pub fn nft(self) -> &'static str {
        match self {
            Family::V4 => "ip",
            Family::V6 => "ip6",
        }
    }

    fn addr_type(self) -> &'static str {
        match self {
            Family::V4 => "ipv4_addr",
            Family::V6 => "ipv6_addr",
        }
    }

    fn matches(self, ip: &IpAddr) -> bool {
        matches!(
            (self, ip),
            (Family::V4, IpAddr::V4(_)) | (Family::V6, IpAddr::V6(_))
        )
    }

    fn parse_cidr(self, cidr: &str) -> bool {
        cidr.split('/')
            .next()
            .and_then(|ip| ip.parse::<IpAddr>().ok())
            .is_some_and(|ip| self.matches(&ip))
    }
}

/// What the renderer needs besides the service ports.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// The table name (`k3rs`).
    pub table: String,
    /// This node's addresses: NodePorts are served on them.
    pub node_ips: Vec<IpAddr>,
    /// The pod network (`--cluster-cidr`): traffic from elsewhere to a ClusterIP is
    /// masqueraded. Empty means masquerade all ClusterIP traffic.
    pub cluster_cidrs: Vec<String>,
}

/// A chain: its hook declaration (base chains only) and its rules.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chain {
    pub hook: Option<String>,
    pub rules: Vec<String>,
}

/// A named set or map: its declaration and its elements (key → value; value is empty for
/// sets).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Set {
    /// `set` or `map`.
    pub kind: &'static str,
    pub decl: String,
    /// Elements the proxy owns. Affinity sets are filled by the kernel (`update @set`) and
    /// have none here.
    pub elements: BTreeMap<String, String>,
}

/// Every object of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruleset {
    pub family: Family,
    pub table: String,
    pub chains: BTreeMap<String, Chain>,
    pub sets: BTreeMap<String, Set>,
}

/// A short stable hash that keeps chain names unique after truncation, as kube-proxy does.
fn hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    // Base32-ish uppercase from the first 5 bytes (8 characters).
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut bits: u64 = 0;
    for byte in &digest[..5] {
        bits = (bits << 8) | u64::from(*byte);
    }
    (0..8)
        .rev()
        .map(|i| ALPHABET[((bits >> (i * 5)) & 31) as usize] as char)
        .collect()
}

/// nft names may be at most 256 bytes; keep them readable but bounded.
fn chain_name(prefix: &str, id: &str) -> String {
    let mut name = format!("{prefix}-{}-{id}", hash(id));
    if name.len() > 200 {
        name.truncate(200);
    }
    name
}

fn endpoint_id(port: &ServicePort, endpoint: &Endpoint) -> String {
    let ip = endpoint.ip.to_string().replace(':', ".");
    format!("{}__{ip}/{}", port.id(), endpoint.port)
}

fn endpoint_chain(port: &ServicePort, endpoint: &Endpoint) -> String {
    chain_name("endpoint", &endpoint_id(port, endpoint))
}

fn affinity_set(port: &ServicePort, endpoint: &Endpoint) -> String {
    chain_name("affinity", &endpoint_id(port, endpoint))
}

fn addr(family: Family, ip: &IpAddr) -> String {
    match family {
        Family::V4 => ip.to_string(),
        Family::V6 => format!("[{ip}]"),
    }
}

impl Ruleset {
    fn chain(&mut self, name: &str) -> &mut Chain {
        self.chains.entry(name.to_string()).or_default()
    }

    fn rule(&mut self, chain: &str, rule: String) {
        self.chain(chain).rules.push(rule);
    }

    fn element(&mut self, set: &str, key: String, value: String) {
        if let Some(set) = self.sets.get_mut(set) {
            set.elements.insert(key, value);
        }
    }

    /// The full text that replaces the table atomically: create (so that delete cannot fail
    /// on a missing table), delete, then define everything.
    pub fn full_text(&self) -> String {
        let (family, table) = (self.family.nft(), &self.table);
        let mut out = String::with_capacity(self.chains.len() * 160);
        let _ = writeln!(out, "add table {family} {table}");
        let _ = writeln!(out, "delete table {family} {table}");
        let _ = writeln!(
            out,
            "add table {family} {table} {{ comment \"rules for Kubernetes Services, owned by k3rs\"; }}"
        );
        self.write_additions(&mut out, &Ruleset::empty(self.family, table));
        out
    }

    fn empty(family: Family, table: &str) -> Ruleset {
        Ruleset {
            family,
            table: table.to_string(),
            chains: BTreeMap::new(),
            sets: BTreeMap::new(),
        }
    }

    /// Chains and sets that are new or changed relative to `old`, then elements.
    fn write_additions(&self, out: &mut String, old: &Ruleset) {
        let (family, table) = (self.family.nft(), &self.table);
        for (name, chain) in &self.chains {
            if old.chains.contains_key(name) {
                continue;
            }
            match &chain.hook {
                Some(hook) => {
                    let _ = writeln!(out, "add chain {family} {table} {name} {{ {hook} }}");
                }
                None => {
                    let _ = writeln!(out, "add chain {family} {table} {name}");
                }
            }
        }
        for (name, set) in &self.sets {
            if !old.sets.contains_key(name) {
                let _ = writeln!(
                    out,
                    "add {} {family} {table} {name} {{ {} }}",
                    set.kind, set.decl
                );
            }
        }
        for (name, chain) in &self.chains {
            match old.chains.get(name) {
                Some(previous) if previous.rules == chain.rules => continue,
                Some(_) => {
                    let _ = writeln!(out, "flush chain {family} {table} {name}");
                }
                None => {}
            }
            for rule in &chain.rules {
                let _ = writeln!(out, "add rule {family} {table} {name} {rule}");
            }
        }
        for (name, set) in &self.sets {
            let previous = old.sets.get(name).map(|s| &s.elements);
            let mut removed = Vec::new();
            let mut added = Vec::new();
            if let Some(previous) = previous {
                for (key, value) in previous {
                    match set.elements.get(key) {
                        Some(v) if v == value => {}
                        _ => removed.push(key.as_str()),
                    }
                }
            }
            for (key, value) in &set.elements {
                if previous.and_then(|p| p.get(key)) != Some(value) {
                    added.push(if value.is_empty() {
                        key.clone()
                    } else {
                        format!("{key} : {value}")
                    });
                }
            }
            for chunk in removed.chunks(1000) {
                let _ = writeln!(
                    out,
                    "delete element {family} {table} {name} {{ {} }}",
                    chunk.join(", ")
                );
            }
            for chunk in added.chunks(1000) {
                let _ = writeln!(
                    out,
                    "add element {family} {table} {name} {{ {} }}",
                    chunk.join(", ")
                );
            }
        }
    }

    /// The text that turns `old` (what the kernel holds) into `self` without replacing the
    /// table, so affinity sets keep their entries. Empty when nothing changed.
    pub fn diff_text(&self, old: &Ruleset) -> String {
        let (family, table) = (self.family.nft(), &self.table);
        let mut out = String::new();
        self.write_additions(&mut out, old);
        // Removed chains may still be referenced by each other; flush them all first.
        let removed_chains: Vec<&String> = old
            .chains
            .keys()
            .filter(|n| !self.chains.contains_key(*n))
            .collect();
        for name in &removed_chains {
            let _ = writeln!(out, "flush chain {family} {table} {name}");
        }
        // Sets before chains: a verdict map's `goto endpoint-…` elements hold its chains.
        for (name, set) in &old.sets {
            if !self.sets.contains_key(name) {
                let _ = writeln!(out, "delete {} {family} {table} {name}", set.kind);
            }
        }
        for name in &removed_chains {
            let _ = writeln!(out, "delete chain {family} {table} {name}");
        }
        out
    }
}

/// Renders the table for `family`.
pub fn render(family: Family, ports: &[ServicePort], options: &RenderOptions) -> Ruleset {
    let f = family.nft();
    let at = family.addr_type();
    let mut rs = Ruleset::empty(family, &options.table);
    let base = |hook: &str, kind: &str, priority: i32| {
        Some(format!(
            "type {kind} hook {hook} priority {priority}; policy accept;"
        ))
    };
    rs.chains.insert(
        "filter-input".into(),
        Chain {
            hook: base("input", "filter", -110),
            rules: vec![],
        },
    );
    rs.chains.insert(
        "filter-forward".into(),
        Chain {
            hook: base("forward", "filter", -110),
            rules: vec![],
        },
    );
    rs.chains.insert(
        "filter-output".into(),
        Chain {
            hook: base("output", "filter", -110),
            rules: vec![],
        },
    );
    rs.chains.insert(
        "nat-prerouting".into(),
        Chain {
            hook: base("prerouting", "nat", -100),
            rules: vec![],
        },
    );
    rs.chains.insert(
        "nat-output".into(),
        Chain {
            hook: base("output", "nat", -100),
            rules: vec![],
        },
    );
    rs.chains.insert(
        "nat-postrouting".into(),
        Chain {
            hook: base("postrouting", "nat", 100),
            rules: vec![],
        },
    );
    rs.rule(
        "filter-input",
        "ct state new jump nodeport-endpoints-check".into(),
    );
    rs.rule(
        "filter-input",
        "ct state new jump service-endpoints-check".into(),
    );
    rs.rule(
        "filter-forward",
        "ct state new jump service-endpoints-check".into(),
    );
    rs.rule(
        "filter-output",
        "ct state new jump service-endpoints-check".into(),
    );
    rs.rule(
        "filter-output",
        "ct state new jump nodeport-endpoints-check".into(),
    );
    rs.rule("nat-prerouting", "jump services".into());
    rs.rule("nat-output", "jump services".into());
    rs.rule(
        "nat-postrouting",
        format!("ct status dnat {f} saddr . {f} daddr @hairpin-endpoints jump mark-for-masquerade"),
    );
    rs.rule("nat-postrouting", "jump masquerading".into());
    rs.rule(
        "mark-for-masquerade",
        format!("meta mark set meta mark or {MASQUERADE_MARK}"),
    );
    rs.rule(
        "masquerading",
        format!("meta mark & {MASQUERADE_MARK} == 0 return"),
    );
    rs.rule(
        "masquerading",
        format!("meta mark set meta mark xor {MASQUERADE_MARK}"),
    );
    rs.rule("masquerading", "masquerade fully-random".into());
    rs.rule(
        "reject-chain",
        "meta l4proto tcp reject with tcp reset".into(),
    );
    rs.rule("reject-chain", "reject".into());
    let service_map = format!("type {at} . inet_proto . inet_service : verdict;");
    let nodeport_map = "type inet_proto . inet_service : verdict;".to_string();
    for (name, decl) in [
        ("service-ips", service_map.clone()),
        ("no-endpoint-services", service_map),
        ("service-nodeports", nodeport_map.clone()),
        ("no-endpoint-nodeports", nodeport_map),
    ] {
        rs.sets.insert(
            name.into(),
            Set {
                kind: "map",
                decl,
                elements: BTreeMap::new(),
            },
        );
    }
    rs.sets.insert(
        "hairpin-endpoints".into(),
        Set {
            kind: "set",
            decl: format!("type {at} . {at};"),
            elements: BTreeMap::new(),
        },
    );
    // The pod network: ClusterIP traffic from elsewhere is masqueraded (all of it while
    // the set is empty), pod traffic under an external Local policy keeps cluster-wide
    // balancing. A named set, so learning the CIDRs later is an element update.
    rs.sets.insert(
        "cluster-cidrs".into(),
        Set {
            kind: "set",
            decl: format!("type {at}; flags interval;"),
            elements: options
                .cluster_cidrs
                .iter()
                .filter(|c| family.parse_cidr(c))
                .map(|c| (c.clone(), String::new()))
                .collect(),
        },
    );
    rs.sets.insert(
        "nodeport-ips".into(),
        Set {
            kind: "set",
            decl: format!("type {at};"),
            elements: BTreeMap::new(),
        },
    );
    rs.rule(
        "services",
        format!("{f} daddr . meta l4proto . th dport vmap @service-ips"),
    );
    rs.rule(
        "services",
        format!("{f} daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"),
    );
    rs.rule(
        "service-endpoints-check",
        format!("{f} daddr . meta l4proto . th dport vmap @no-endpoint-services"),
    );
    rs.rule(
        "nodeport-endpoints-check",
        format!("{f} daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports"),
    );
    for ip in options.node_ips.iter().filter(|ip| family.matches(ip)) {
        rs.element("nodeport-ips", ip.to_string(), String::new());
    }
    for port in ports {
        render_port(&mut rs, family, port);
    }
    rs
}

/// The named map a balancing chain picks its endpoint from: DNAT targets
/// (`…-endpoints`), or endpoint chains with session affinity (`…-endpoint-chains`); two
/// names because a map's type cannot change in place.
fn endpoint_map(chain: &str, affinity: bool) -> String {
    if affinity {
        format!("{chain}-endpoint-chains")
    } else {
        format!("{chain}-endpoints")
    }
}

/// The endpoint-selection rules of one balancing chain (`service-…` or `local-…`).
///
/// The pick is `numgen random mod N` looked up in a named map of the chain's own, filled
/// with elements: nft and the kernel load a table of named maps several times faster than
/// one with an anonymous map per chain (the kernel walks the whole transaction for every
/// anonymous set it binds), and an endpoint change is then an element update that leaves
/// the chain alone.
fn balance(
    rs: &mut Ruleset,
    family: Family,
    chain: &str,
    port: &ServicePort,
    endpoints: &[&Endpoint],
) {
    let f = family.nft();
    let proto = port.protocol.nft();
    if port.affinity_timeout.is_some() {
        // Affinity needs a chain per endpoint (each updates its own set).
        for endpoint in endpoints {
            rs.rule(
                chain,
                format!(
                    "{f} saddr @{} goto {}",
                    affinity_set(port, endpoint),
                    endpoint_chain(port, endpoint)
                ),
            );
        }
        let map = endpoint_map(chain, true);
        let elements = endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| (i.to_string(), format!("goto {}", endpoint_chain(port, e))))
            .collect();
        rs.sets.insert(
            map.clone(),
            Set {
                kind: "map",
                decl: "typeof numgen random mod 1 : verdict;".into(),
                elements,
            },
        );
        rs.rule(
            chain,
            format!("numgen random mod {} vmap @{map}", endpoints.len()),
        );
        return;
    }
    // Without affinity the DNAT target comes straight from the map: no chain per
    // endpoint, which keeps a 10,000-endpoint table cheap for the kernel to load.
    if let [only] = endpoints {
        rs.rule(
            chain,
            format!(
                "meta l4proto {proto} dnat to {}:{}",
                addr(family, &only.ip),
                only.port
            ),
        );
        return;
    }
    let map = endpoint_map(chain, false);
    let elements = endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| (i.to_string(), format!("{} . {}", e.ip, e.port)))
        .collect();
    rs.sets.insert(
        map.clone(),
        Set {
            kind: "map",
            // `th dport`, not `tcp dport`: the map's type is the same for every protocol.
            decl: format!("typeof numgen random mod 1 : {f} daddr . th dport;"),
            elements,
        },
    );
    rs.rule(
        chain,
        format!(
            "meta l4proto {proto} dnat {f} addr . port to numgen random mod {} map @{map}",
            endpoints.len()
        ),
    );
}

fn render_port(rs: &mut Ruleset, family: Family, port: &ServicePort) {
    let f = family.nft();
    let proto = port.protocol.nft();
    let id = port.id();
    let cluster_ips: Vec<&IpAddr> = port
        .cluster_ips
        .iter()
        .filter(|ip| family.matches(ip))
        .collect();
    if cluster_ips.is_empty() {
        return;
    }
    let all: Vec<&Endpoint> = port
        .cluster_endpoints()
        .into_iter()
        .filter(|e| family.matches(&e.ip))
        .collect();
    let local: Vec<&Endpoint> = port
        .local_endpoints()
        .into_iter()
        .filter(|e| family.matches(&e.ip))
        .collect();
    // Every endpoint some path may use: hairpin traffic (an endpoint reaching itself through
    // the Service) is masqueraded in postrouting; with affinity each gets a chain.
    let mut used: BTreeSet<&Endpoint> = all.iter().copied().collect();
    used.extend(local.iter().copied());
    for endpoint in &used {
        rs.element(
            "hairpin-endpoints",
            format!("{} . {}", endpoint.ip, endpoint.ip),
            String::new(),
        );
        let Some(timeout) = port.affinity_timeout else {
            continue;
        };
        let chain = endpoint_chain(port, endpoint);
        let set = affinity_set(port, endpoint);
        rs.sets.insert(
            set.clone(),
            Set {
                kind: "set",
                decl: format!(
                    "type {}; flags dynamic,timeout; timeout {timeout}s;",
                    family.addr_type()
                ),
                elements: BTreeMap::new(),
            },
        );
        rs.rule(&chain, format!("update @{set} {{ {f} saddr }}"));
        rs.rule(
            &chain,
            format!(
                "meta l4proto {proto} dnat to {}:{}",
                addr(family, &endpoint.ip),
                endpoint.port
            ),
        );
    }
    let service_chain = chain_name("service", &id);
    let internal: &[&Endpoint] = if port.internal_local { &local } else { &all };
    let no_endpoints_verdict = |usable: &[&Endpoint]| {
        if all.is_empty() {
            // Nothing anywhere: refuse at once rather than letting clients time out.
            "goto reject-chain"
        } else if usable.is_empty() {
            // A Local policy with no endpoint here: drop, as kube-proxy does.
            "drop"
        } else {
            ""
        }
    };
    // The service chain serves ClusterIP traffic (and pod traffic under external Local).
    if !all.is_empty() {
        rs.rule(
            &service_chain,
            format!("{f} saddr != @cluster-cidrs jump mark-for-masquerade"),
        );
        balance(rs, family, &service_chain, port, &all);
    }
    let internal_chain = if port.internal_local && !local.is_empty() {
        let chain = chain_name("local", &format!("{id}/internal"));
        balance(rs, family, &chain, port, &local);
        chain
    } else {
        service_chain.clone()
    };
    for ip in &cluster_ips {
        let key = format!("{ip} . {proto} . {}", port.port);
        match no_endpoints_verdict(internal) {
            "" => rs.element("service-ips", key, format!("goto {internal_chain}")),
            verdict => rs.element("no-endpoint-services", key, verdict.to_string()),
        }
    }
    if !port.has_external() {
        return;
    }
    let external: &[&Endpoint] = if port.external_local { &local } else { &all };
    let external_verdict = no_endpoints_verdict(external);
    let external_chain = chain_name("external", &id);
    if external_verdict.is_empty() {
        if port.external_local {
            // Pods keep cluster-wide balancing; the node itself is masqueraded; everything
            // else keeps its source address and only reaches endpoints on this node.
            rs.rule(
                &external_chain,
                format!("{f} saddr @cluster-cidrs goto {service_chain}"),
            );
            rs.rule(
                &external_chain,
                "fib saddr type local jump mark-for-masquerade".into(),
            );
            rs.rule(
                &external_chain,
                format!("fib saddr type local goto {service_chain}"),
            );
            let local_chain = chain_name("local", &format!("{id}/external"));
            balance(rs, family, &local_chain, port, &local);
            rs.rule(&external_chain, format!("goto {local_chain}"));
        } else {
            rs.rule(&external_chain, "jump mark-for-masquerade".into());
            rs.rule(&external_chain, format!("goto {service_chain}"));
        }
    }
    let external_ips = port
        .load_balancer_ips
        .iter()
        .chain(&port.external_ips)
        .filter(|ip| family.matches(ip));
    for ip in external_ips {
        let key = format!("{ip} . {proto} . {}", port.port);
        match external_verdict {
            "" => rs.element("service-ips", key, format!("goto {external_chain}")),
            verdict => rs.element("no-endpoint-services", key, verdict.to_string()),
        }
    }
    if let Some(node_port) = port.node_port {
        let key = format!("{proto} . {node_port}");
        match external_verdict {
            "" => rs.element("service-nodeports", key, format!("goto {external_chain}")),
            verdict => rs.element("no-endpoint-nodeports", key, verdict.to_string()),
        }
    }
}

#[cfg(test)]
mod tests;
