//! The pure renderer: service ports + node addresses → the nftables objects of one
//! `ip k3rs` / `ip6 k3rs` table, laid out like kube-proxy's nftables mode, and the text
//! that `nft -f -` applies: a full replacement, or the difference between two rulesets.
//! It renders per owner — the table's fixed part ([`render_base`]) and each Service port
//! ([`render_port`]) — so that [`super::table`] can re-render only what changed.
//!
//! Layout (one table per family):
//! - base chains `filter-{input,forward,output}` (priority -110, before DNAT) jump to
//!   `service-endpoints-check` / `nodeport-endpoints-check`, which look the destination up
//!   in the `no-endpoint-services` / `no-endpoint-nodeports` verdict maps (reject or drop);
//! - `nat-{prerouting,output}` jump to `services`, which first decides masquerading by
//!   destination (`service-masquerade`: a ClusterIP → `jump masquerade-off-cluster`, which
//!   marks sources outside `cluster-cidrs`; an external address of a Cluster-policy
//!   Service → `jump mark-for-masquerade`; `nodeport-masquerade` likewise for NodePorts),
//!   then looks `daddr . l4proto . dport` up in `service-ips` and `l4proto . dport` (for
//!   `daddr` in `nodeport-ips`) in `service-nodeports`;
//! - per Service port a `service-…` chain (session affinity, the endpoint pick) that
//!   ClusterIP traffic and Cluster-policy external traffic go to, an `external-…` chain
//!   only for the Local external policy, a `local-…` chain over this node's endpoints for
//!   the Local policies;
//! - the pick is `numgen random mod N offset <base>` looked up in one of the 16 shared
//!   endpoint maps (`endpoints-0` … `endpoints-15`, `i : addr`), DNAT straight from it to
//!   that address and the rule's port: the chain owns the keys `base .. base + N` of one
//!   map (its [`Slot`], which [`super::table`] assigns from a hash of the chain's name). No
//!   chain per endpoint, no map per chain (a thousand maps made the kernel search them by
//!   name a thousand times each, and cost nft and the kernel ~30 % of a full load), no
//!   anonymous maps (the kernel walks the whole transaction once for each). A chain over
//!   endpoints on different ports (a named target port), or without a slot, has its own
//!   map instead (`service-<hash>-endpoints`, `i : addr . port`); with session affinity
//!   an `endpoint-…` chain per endpoint (the affinity set update, then DNAT), picked from
//!   `service-<hash>-endpoint-chains` (`i : goto endpoint-…`);
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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

/// The shared maps and sets: declared by the table's fixed part, filled by every Service
/// port ([`Fragment::shared`]).
pub const SERVICE_IPS: &str = "service-ips";
pub const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
pub const SERVICE_MASQUERADE: &str = "service-masquerade";
pub const SERVICE_NODEPORTS: &str = "service-nodeports";
pub const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
pub const NODEPORT_MASQUERADE: &str = "nodeport-masquerade";
pub const HAIRPIN_ENDPOINTS: &str = "hairpin-endpoints";
pub const CLUSTER_CIDRS: &str = "cluster-cidrs";
pub const NODEPORT_IPS: &str = "nodeport-ips";
/// Marks packets whose source is off the pod network (`service-masquerade`'s verdict for
/// ClusterIPs).
const MASQUERADE_OFF_CLUSTER: &str = "masquerade-off-cluster";
/// The shared endpoint maps (`i : addr`) the balancing chains pick from: each chain owns a
/// [`Slot`] of keys in one of them. Several maps, because the kernel checks every element
/// added to a map against every rule that looks it up (one map for 1,000 chains made
/// that 10,000 × 1,000 checks); a map each, because it finds a set by comparing its name
/// with every set's of the table, for each rule and element batch naming one.
pub const ENDPOINT_MAPS: [&str; 16] = [
    "endpoints-0",
    "endpoints-1",
    "endpoints-2",
    "endpoints-3",
    "endpoints-4",
    "endpoints-5",
    "endpoints-6",
    "endpoints-7",
    "endpoints-8",
    "endpoints-9",
    "endpoints-10",
    "endpoints-11",
    "endpoints-12",
    "endpoints-13",
    "endpoints-14",
    "endpoints-15",
];
/// The keys of one slot: a chain of a shared endpoint map balances over at most this many
/// endpoints (more take the chain's own map).
pub const SLOT_SIZE: usize = 1 << 16;

/// Where a balancing chain's endpoints sit in the shared endpoint maps: keys `base ..
/// base + N` of `ENDPOINT_MAPS[map]` (the pick is `numgen random mod N offset base`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Slot {
    pub map: usize,
    pub base: u32,
}

/// The slot of every balancing chain that picks from the shared endpoint maps, by chain
/// name ([`super::table`] assigns them; a chain without one takes its own map).
pub type Slots = BTreeMap<String, Slot>;

/// One element of a shared set or map: (set, key, value; empty for sets).
pub type SharedElement = (&'static str, String, String);

/// What one owner puts in a table — the fixed part ([`render_base`]) or one Service port
/// ([`render_port`]): the chains and sets it alone owns (their names derive from the
/// port's id), and its elements of the shared sets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fragment {
    pub chains: BTreeMap<String, Chain>,
    pub sets: BTreeMap<String, Set>,
    pub shared: Vec<SharedElement>,
}

impl Fragment {
    fn rule(&mut self, chain: &str, rule: String) {
        self.chains
            .entry(chain.to_string())
            .or_default()
            .rules
            .push(rule);
    }

    fn shared(&mut self, set: &'static str, key: String, value: String) {
        self.shared.push((set, key, value));
    }
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

/// A chain's preferred slot: its bucket (the slot's `base`, 16 bits of the chain name's
/// hash) and the map it tries first (4 more bits). Chains sharing a bucket take the first
/// free map from their preferred one, in name order ([`super::table`]), so one chain's slot
/// depends only on the chains of its bucket.
pub fn slot_home(chain: &str) -> (u32, usize) {
    let digest = Sha256::digest(chain.as_bytes());
    let bits = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    (
        (bits >> 16) << 16,
        (bits & 0xffff) as usize % ENDPOINT_MAPS.len(),
    )
}

/// Whether a balancing chain over `endpoints` picks from a shared endpoint map (when it
/// has a slot): two endpoints or more, all on one port (the map holds only addresses; the
/// port is the rule's), no session affinity (its picks are chains).
fn picks_from_shared_map(port: &ServicePort, endpoints: &[&Endpoint]) -> bool {
    port.affinity_timeout.is_none()
        && (2..=SLOT_SIZE).contains(&endpoints.len())
        && endpoints.iter().all(|e| e.port == endpoints[0].port)
}

/// The longest chain name we write (nft allows 256 bytes).
const MAX_CHAIN_NAME: usize = 200;

/// A chain's name: its unique handle (`service-<hash of id>`), then the id for people
/// reading `nft list ruleset`. The readable part is reduced to what nft's identifier
/// grammar takes unquoted (ASCII letters, digits, `/`, `_`, `.`, `-`), so no byte of an
/// object's fields can end the name, open a block or start a statement, and it is cut
/// at a byte count on ASCII only; the handle keeps names unique whatever is cut or
/// replaced.
fn chain_name(prefix: &str, id: &str) -> String {
    let mut name = handle(prefix, id);
    name.push('-');
    for c in id.chars() {
        if name.len() >= MAX_CHAIN_NAME {
            break;
        }
        name.push(
            if c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '.' | '-') {
                c
            } else {
                '_'
            },
        );
    }
    name
}

/// The short, unique part of a chain's name (`service-<hash>`), which also names the
/// chain's maps.
fn handle(prefix: &str, id: &str) -> String {
    format!("{prefix}-{}", hash(id))
}

fn endpoint_id(port: &ServicePort, endpoint: &Endpoint) -> String {
    let ip = endpoint.ip.to_string().replace(':', ".");
    format!("{}__{ip}/{}", port.id(), endpoint.port)
}

fn endpoint_chain(port: &ServicePort, endpoint: &Endpoint) -> String {
    chain_name("endpoint", &endpoint_id(port, endpoint))
}

/// The affinity set of one endpoint: the timeout is part of the name because a set's
/// declaration cannot change in place (a new timeout is a new set).
fn affinity_set(port: &ServicePort, endpoint: &Endpoint, timeout: u32) -> String {
    format!("affinity-{}-{timeout}s", hash(&endpoint_id(port, endpoint)))
}

fn addr(family: Family, ip: &IpAddr) -> String {
    match family {
        Family::V4 => ip.to_string(),
        Family::V6 => format!("[{ip}]"),
    }
}

impl Ruleset {
    /// The full text that replaces the table atomically: create (so that delete cannot fail
    /// on a missing table), delete, then define everything.
    pub fn full_text(&self) -> String {
        let mut out = String::with_capacity(self.chains.len() * 160);
        write_replace_header(&mut out, self.family, &self.table);
        self.write_additions(&mut out, &Ruleset::empty(self.family, &self.table));
        out
    }

    pub fn empty(family: Family, table: &str) -> Ruleset {
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
            if !old.chains.contains_key(name) {
                write_chain_decl(out, self.family, table, name, chain);
            }
        }
        for (name, set) in &self.sets {
            if !old.sets.contains_key(name) {
                write_set_decl(out, self.family, table, name, set);
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
            write_rules(out, self.family, table, name, chain);
        }
        for (name, set) in &self.sets {
            let previous = old.sets.get(name).map(|s| &s.elements);
            let removed = previous
                .into_iter()
                .flatten()
                .filter(|(key, value)| set.elements.get(*key) != Some(*value));
            write_elements(
                out,
                "delete",
                self.family,
                table,
                name,
                removed.map(|(key, _)| (key.as_str(), "")),
            );
            let added = set
                .elements
                .iter()
                .filter(|(key, value)| previous.and_then(|p| p.get(*key)) != Some(*value));
            write_elements(
                out,
                "add",
                self.family,
                table,
                name,
                added.map(|(key, value)| (key.as_str(), value.as_str())),
            );
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

/// The start of a full replacement: create (so that delete cannot fail on a missing
/// table), delete, create again.
pub(super) fn write_replace_header(out: &mut String, family: Family, table: &str) {
    let family = family.nft();
    let _ = writeln!(out, "add table {family} {table}");
    let _ = writeln!(out, "delete table {family} {table}");
    let _ = writeln!(
        out,
        "add table {family} {table} {{ comment \"rules for Kubernetes Services, owned by k3rs\"; }}"
    );
}

pub(super) fn write_chain_decl(
    out: &mut String,
    family: Family,
    table: &str,
    name: &str,
    chain: &Chain,
) {
    let family = family.nft();
    let _ = match &chain.hook {
        Some(hook) => writeln!(out, "add chain {family} {table} {name} {{ {hook} }}"),
        None => writeln!(out, "add chain {family} {table} {name}"),
    };
}

pub(super) fn write_set_decl(out: &mut String, family: Family, table: &str, name: &str, set: &Set) {
    let _ = writeln!(
        out,
        "add {} {} {table} {name} {{ {} }}",
        set.kind,
        family.nft(),
        set.decl
    );
}

pub(super) fn write_rules(
    out: &mut String,
    family: Family,
    table: &str,
    name: &str,
    chain: &Chain,
) {
    let family = family.nft();
    for rule in &chain.rules {
        let _ = writeln!(out, "add rule {family} {table} {name} {rule}");
    }
}

/// `add element` / `delete element` lines for (key, value) pairs (value empty for sets
/// and deletions), 1,000 elements a line.
pub(super) fn write_elements<'a>(
    out: &mut String,
    verb: &str,
    family: Family,
    table: &str,
    name: &str,
    elements: impl Iterator<Item = (&'a str, &'a str)>,
) {
    let family = family.nft();
    let mut in_line = 0;
    for (key, value) in elements {
        if in_line == 0 {
            let _ = write!(out, "{verb} element {family} {table} {name} {{ ");
        } else {
            out.push_str(", ");
        }
        out.push_str(key);
        if !value.is_empty() {
            out.push_str(" : ");
            out.push_str(value);
        }
        in_line += 1;
        if in_line == 1000 {
            out.push_str(" }\n");
            in_line = 0;
        }
    }
    if in_line > 0 {
        out.push_str(" }\n");
    }
}

/// The table's fixed part: base chains, the shared sets and maps (declared empty; their
/// elements come from [`Fragment::shared`]) and the node's own elements of them.
pub fn render_base(family: Family, options: &RenderOptions) -> Fragment {
    let f = family.nft();
    let at = family.addr_type();
    let mut base = Fragment::default();
    let hook = |hook: &str, kind: &str, priority: i32| Chain {
        hook: Some(format!(
            "type {kind} hook {hook} priority {priority}; policy accept;"
        )),
        rules: vec![],
    };
    for (name, chain) in [
        ("filter-input", hook("input", "filter", -110)),
        ("filter-forward", hook("forward", "filter", -110)),
        ("filter-output", hook("output", "filter", -110)),
        ("nat-prerouting", hook("prerouting", "nat", -100)),
        ("nat-output", hook("output", "nat", -100)),
        ("nat-postrouting", hook("postrouting", "nat", 100)),
    ] {
        base.chains.insert(name.into(), chain);
    }
    base.rule(
        "filter-input",
        "ct state new jump nodeport-endpoints-check".into(),
    );
    base.rule(
        "filter-input",
        "ct state new jump service-endpoints-check".into(),
    );
    base.rule(
        "filter-forward",
        "ct state new jump service-endpoints-check".into(),
    );
    base.rule(
        "filter-output",
        "ct state new jump service-endpoints-check".into(),
    );
    base.rule(
        "filter-output",
        "ct state new jump nodeport-endpoints-check".into(),
    );
    base.rule("nat-prerouting", "jump services".into());
    base.rule("nat-output", "jump services".into());
    base.rule(
        "nat-postrouting",
        format!(
            "ct status dnat {f} saddr . {f} daddr @{HAIRPIN_ENDPOINTS} jump mark-for-masquerade"
        ),
    );
    base.rule("nat-postrouting", "jump masquerading".into());
    base.rule(
        "mark-for-masquerade",
        format!("meta mark set meta mark or {MASQUERADE_MARK}"),
    );
    base.rule(
        MASQUERADE_OFF_CLUSTER,
        format!("{f} saddr != @{CLUSTER_CIDRS} jump mark-for-masquerade"),
    );
    base.rule(
        "masquerading",
        format!("meta mark & {MASQUERADE_MARK} == 0 return"),
    );
    base.rule(
        "masquerading",
        format!("meta mark set meta mark xor {MASQUERADE_MARK}"),
    );
    base.rule("masquerading", "masquerade fully-random".into());
    base.rule(
        "reject-chain",
        "meta l4proto tcp reject with tcp reset".into(),
    );
    base.rule("reject-chain", "reject".into());
    let service_map = format!("type {at} . inet_proto . inet_service : verdict;");
    let nodeport_map = "type inet_proto . inet_service : verdict;".to_string();
    let shared = [
        (SERVICE_IPS, "map", service_map.clone()),
        (NO_ENDPOINT_SERVICES, "map", service_map.clone()),
        (SERVICE_MASQUERADE, "map", service_map),
        (SERVICE_NODEPORTS, "map", nodeport_map.clone()),
        (NO_ENDPOINT_NODEPORTS, "map", nodeport_map),
        (
            NODEPORT_MASQUERADE,
            "set",
            "type inet_proto . inet_service;".to_string(),
        ),
        (HAIRPIN_ENDPOINTS, "set", format!("type {at} . {at};")),
        // The pod network: ClusterIP traffic from elsewhere is masqueraded (all of it
        // while the set is empty), pod traffic under an external Local policy keeps
        // cluster-wide balancing. A named set, so learning the CIDRs later is an
        // element update.
        (CLUSTER_CIDRS, "set", format!("type {at}; flags interval;")),
        (NODEPORT_IPS, "set", format!("type {at};")),
    ];
    let endpoint_map = format!("typeof numgen random mod 1 : {f} daddr;");
    let endpoint_maps = ENDPOINT_MAPS
        .iter()
        .map(|name| (*name, "map", endpoint_map.clone()));
    for (name, kind, decl) in shared.into_iter().chain(endpoint_maps) {
        base.sets.insert(
            name.into(),
            Set {
                kind,
                decl,
                elements: BTreeMap::new(),
            },
        );
    }
    // Masquerading is decided here, once, by destination (`service-masquerade`:
    // ClusterIPs for sources off the pod network, external addresses of Cluster-policy
    // Services always; `nodeport-masquerade` likewise for NodePorts), so a Service
    // port needs no chain or rule of its own for it.
    base.rule(
        "services",
        format!("{f} daddr . meta l4proto . th dport vmap @{SERVICE_MASQUERADE}"),
    );
    base.rule(
        "services",
        format!("{f} daddr . meta l4proto . th dport vmap @{SERVICE_IPS}"),
    );
    base.rule(
        "services",
        format!(
            "{f} daddr @{NODEPORT_IPS} meta l4proto . th dport @{NODEPORT_MASQUERADE} jump mark-for-masquerade"
        ),
    );
    base.rule(
        "services",
        format!("{f} daddr @{NODEPORT_IPS} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}"),
    );
    base.rule(
        "service-endpoints-check",
        format!("{f} daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}"),
    );
    base.rule(
        "nodeport-endpoints-check",
        format!("{f} daddr @{NODEPORT_IPS} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}"),
    );
    for cidr in options
        .cluster_cidrs
        .iter()
        .filter(|c| family.parse_cidr(c))
    {
        base.shared(CLUSTER_CIDRS, cidr.clone(), String::new());
    }
    for ip in options.node_ips.iter().filter(|ip| family.matches(ip)) {
        base.shared(NODEPORT_IPS, ip.to_string(), String::new());
    }
    base
}

/// The endpoint-selection rules of one balancing chain (`service-…` or `local-…`);
/// `handle` is the chain's short name (`service-<hash>`), which names its own maps.
///
/// The pick is `numgen random mod N offset <base>` looked up in the shared endpoint map of
/// the chain's slot (`i : addr`, the port is the rule's), filled with elements: no map per
/// chain (a thousand maps cost the kernel a name search each time one is declared, filled
/// or bound), no anonymous map (the kernel walks the whole transaction for every anonymous
/// set it binds), and an endpoint change is an element update that leaves the chain alone.
/// Without a slot, or with endpoints on different ports, the chain has its own named map
/// (`<handle>-endpoints`, `i : addr . port`).
fn balance(
    out: &mut Fragment,
    family: Family,
    chain: &str,
    handle: &str,
    port: &ServicePort,
    endpoints: &[&Endpoint],
    slots: &Slots,
) {
    let f = family.nft();
    let proto = port.protocol.nft();
    if let Some(timeout) = port.affinity_timeout {
        // Affinity needs a chain per endpoint (each updates its own set).
        for endpoint in endpoints {
            out.rule(
                chain,
                format!(
                    "{f} saddr @{} goto {}",
                    affinity_set(port, endpoint, timeout),
                    endpoint_chain(port, endpoint)
                ),
            );
        }
        let map = format!("{handle}-endpoint-chains");
        let elements = endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| (i.to_string(), format!("goto {}", endpoint_chain(port, e))))
            .collect();
        out.sets.insert(
            map.clone(),
            Set {
                kind: "map",
                decl: "typeof numgen random mod 1 : verdict;".into(),
                elements,
            },
        );
        out.rule(
            chain,
            format!("numgen random mod {} vmap @{map}", endpoints.len()),
        );
        return;
    }
    // Without affinity the DNAT target comes straight from the map: no chain per
    // endpoint, which keeps a 10,000-endpoint table cheap for the kernel to load.
    if let [only] = endpoints {
        out.rule(
            chain,
            format!(
                "meta l4proto {proto} dnat to {}:{}",
                addr(family, &only.ip),
                only.port
            ),
        );
        return;
    }
    if let Some(slot) = slots
        .get(chain)
        .filter(|_| picks_from_shared_map(port, endpoints))
    {
        let map = ENDPOINT_MAPS[slot.map];
        for (key, endpoint) in (slot.base..).zip(endpoints) {
            out.shared(map, key.to_string(), endpoint.ip.to_string());
        }
        out.rule(
            chain,
            format!(
                "meta l4proto {proto} dnat {f} to numgen random mod {} offset {} map @{map} : {}",
                endpoints.len(),
                slot.base,
                endpoints[0].port
            ),
        );
        return;
    }
    let map = format!("{handle}-endpoints");
    let elements = endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| (i.to_string(), format!("{} . {}", e.ip, e.port)))
        .collect();
    out.sets.insert(
        map.clone(),
        Set {
            kind: "map",
            // The port's own protocol (`tcp dport`, not `th dport`): when nft later reads
            // the map back from the kernel for a rule of a partial update, a `th` type
            // conflicts with the rule's `meta l4proto tcp`.
            decl: format!("typeof numgen random mod 1 : {f} daddr . {proto} dport;"),
            elements,
        },
    );
    out.rule(
        chain,
        format!(
            "meta l4proto {proto} dnat {f} addr . port to numgen random mod {} map @{map}",
            endpoints.len()
        ),
    );
}

/// The endpoints of `port` in `family`: all those cluster-wide balancing uses, and this
/// node's (for the Local policies).
fn family_endpoints(family: Family, port: &ServicePort) -> (Vec<&Endpoint>, Vec<&Endpoint>) {
    (
        of_family(family, port.cluster_endpoints()),
        of_family(family, port.local_endpoints()),
    )
}

fn of_family(family: Family, endpoints: Vec<&Endpoint>) -> Vec<&Endpoint> {
    endpoints
        .into_iter()
        .filter(|e| family.matches(&e.ip))
        .collect()
}

/// The balancing chains of `port` in the `family` table that pick from the shared endpoint
/// maps, given a slot: what [`render_port`] looks up in its `slots`. (A chain missing here
/// would only take its own map.)
pub fn slot_requests(family: Family, port: &ServicePort) -> Vec<String> {
    let mut chains = Vec::new();
    if !port.cluster_ips.iter().any(|ip| family.matches(ip)) {
        return chains;
    }
    let (all, local) = family_endpoints(family, port);
    let id = port.id();
    if picks_from_shared_map(port, &all) {
        chains.push(chain_name("service", &id));
    }
    if port.internal_local && picks_from_shared_map(port, &local) {
        chains.push(chain_name("local", &format!("{id}/internal")));
    }
    if port.has_external()
        && port.external_local
        && !all.is_empty()
        && picks_from_shared_map(port, &local)
    {
        chains.push(chain_name("local", &format!("{id}/external")));
    }
    chains
}

/// Everything one Service port puts in the `family` table: its chains and maps, and its
/// elements of the shared ones. Empty when the port has no address of this family.
/// `slots` places its balancing chains in the shared endpoint maps ([`slot_requests`]).
pub fn render_port(family: Family, port: &ServicePort, slots: &Slots) -> Fragment {
    let mut out = Fragment::default();
    let f = family.nft();
    let proto = port.protocol.nft();
    let id = port.id();
    let cluster_ips: Vec<&IpAddr> = port
        .cluster_ips
        .iter()
        .filter(|ip| family.matches(ip))
        .collect();
    if cluster_ips.is_empty() {
        return out;
    }
    let (all, local) = family_endpoints(family, port);
    // Every endpoint some path may use: hairpin traffic (an endpoint of this node reaching
    // itself through the Service) is masqueraded in postrouting; with affinity each gets a
    // chain.
    let mut used: BTreeSet<&Endpoint> = all.iter().copied().collect();
    used.extend(local.iter().copied());
    for endpoint in &used {
        if endpoint.hairpin {
            out.shared(
                HAIRPIN_ENDPOINTS,
                format!("{} . {}", endpoint.ip, endpoint.ip),
                String::new(),
            );
        }
        let Some(timeout) = port.affinity_timeout else {
            continue;
        };
        let chain = endpoint_chain(port, endpoint);
        let set = affinity_set(port, endpoint, timeout);
        out.sets.insert(
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
        out.rule(&chain, format!("update @{set} {{ {f} saddr }}"));
        out.rule(
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
    // The service chain balances ClusterIP traffic (and pod traffic under external Local,
    // and all external traffic under external Cluster).
    if !all.is_empty() {
        balance(
            &mut out,
            family,
            &service_chain,
            &handle("service", &id),
            port,
            &all,
            slots,
        );
    }
    let internal_chain = if port.internal_local && !local.is_empty() {
        let local_id = format!("{id}/internal");
        let chain = chain_name("local", &local_id);
        balance(
            &mut out,
            family,
            &chain,
            &handle("local", &local_id),
            port,
            &local,
            slots,
        );
        chain
    } else {
        service_chain.clone()
    };
    for ip in &cluster_ips {
        let key = format!("{ip} . {proto} . {}", port.port);
        match no_endpoints_verdict(internal) {
            "" => {
                if internal_chain == service_chain {
                    // Sources off the pod network (the node, other hosts) are
                    // masqueraded so that replies come back through this node.
                    out.shared(
                        SERVICE_MASQUERADE,
                        key.clone(),
                        format!("jump {MASQUERADE_OFF_CLUSTER}"),
                    );
                }
                out.shared(SERVICE_IPS, key, format!("goto {internal_chain}"));
            }
            verdict => out.shared(NO_ENDPOINT_SERVICES, key, verdict.to_string()),
        }
    }
    if !port.has_external() {
        return out;
    }
    let external: &[&Endpoint] = if port.external_local { &local } else { &all };
    let external_verdict = no_endpoints_verdict(external);
    // Cluster policy: external traffic is masqueraded (by destination, in `services`)
    // and balanced by the service chain itself. Local policy: its own chain.
    let external_chain = if port.external_local {
        chain_name("external", &id)
    } else {
        service_chain.clone()
    };
    if external_verdict.is_empty() && port.external_local {
        // Pods keep cluster-wide balancing; the node itself is masqueraded; everything
        // else keeps its source address and only reaches endpoints on this node.
        out.rule(
            &external_chain,
            format!("{f} saddr @{CLUSTER_CIDRS} goto {service_chain}"),
        );
        out.rule(
            &external_chain,
            "fib saddr type local jump mark-for-masquerade".into(),
        );
        out.rule(
            &external_chain,
            format!("fib saddr type local goto {service_chain}"),
        );
        let local_id = format!("{id}/external");
        let local_chain = chain_name("local", &local_id);
        balance(
            &mut out,
            family,
            &local_chain,
            &handle("local", &local_id),
            port,
            &local,
            slots,
        );
        out.rule(&external_chain, format!("goto {local_chain}"));
    }
    let external_ips = port
        .load_balancer_ips
        .iter()
        .chain(&port.external_ips)
        .filter(|ip| family.matches(ip));
    for ip in external_ips {
        let key = format!("{ip} . {proto} . {}", port.port);
        match external_verdict {
            "" => {
                if !port.external_local {
                    out.shared(
                        SERVICE_MASQUERADE,
                        key.clone(),
                        "jump mark-for-masquerade".into(),
                    );
                }
                out.shared(SERVICE_IPS, key, format!("goto {external_chain}"));
            }
            verdict => out.shared(NO_ENDPOINT_SERVICES, key, verdict.to_string()),
        }
    }
    if let Some(node_port) = port.node_port {
        let key = format!("{proto} . {node_port}");
        match external_verdict {
            "" => {
                if !port.external_local {
                    out.shared(NODEPORT_MASQUERADE, key.clone(), String::new());
                }
                out.shared(SERVICE_NODEPORTS, key, format!("goto {external_chain}"));
            }
            verdict => out.shared(NO_ENDPOINT_NODEPORTS, key, verdict.to_string()),
        }
    }
    out
}

#[cfg(test)]
mod tests;
