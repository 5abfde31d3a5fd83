//! Routes to the other nodes' pod CIDRs, as flannel's kube subnet manager does: a watch of
//! every Node; for each *other* node with a podCIDR and an InternalIP, host-gw adds
//! `<podCIDR> via <node ip>`, vxlan adds `<podCIDR> via <peer .0> dev flannel.1 onlink`
//! plus a permanent neighbour entry (peer .0 → peer VTEP MAC) and an FDB entry (peer VTEP MAC
//! → peer public IP). This node publishes its own VTEP MAC and public IP in the Node's
//! `flannel.alpha.coreos.com/*` annotations. It also masquerades pod traffic that leaves the
//! pod network (flannel's ipMasq) in the nftables table `inet k3rs-flannel`.
//!
//! Owns: `flannel.1`, IPv4 routes with protocol [`ROUTE_PROTO`] (so routes from a previous
//! run are found and stale ones removed at start), permanent neighbour/FDB entries on
//! `flannel.1`, the `inet k3rs-flannel` table, and those annotations on its own Node. Changes
//! go through iproute2 (`ip -batch -`, `bridge -batch -`) and `nft -f -`. Never touches other
//! routes, other devices or other nftables tables.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};

use super::cmd;
use super::{FlannelBackend, NetworkOptions};
use crate::cli::Cidr;
use crate::skip::warn_once;

/// The routing protocol number k3rs marks its routes with (`ip route … proto 76`): how this
/// controller tells its routes from everyone else's.
pub const ROUTE_PROTO: &str = "76";
/// The VXLAN device, named as flannel names it.
pub const VXLAN_DEVICE: &str = "flannel.1";
/// flannel's default VNI.
pub const VXLAN_VNI: u32 = 1;
/// flannel's (and the Linux kernel's IANA-predating) VXLAN UDP port.
pub const VXLAN_PORT: u16 = 8472;
/// Outer IPv4 + UDP + VXLAN + inner Ethernet headers.
pub const VXLAN_OVERHEAD: u32 = 50;
/// The nftables table for flannel's masquerading.
pub const MASQ_TABLE: &str = "k3rs-flannel";

pub const ANNOTATION_BACKEND_DATA: &str = "flannel.alpha.coreos.com/backend-data";
pub const ANNOTATION_BACKEND_TYPE: &str = "flannel.alpha.coreos.com/backend-type";
pub const ANNOTATION_PUBLIC_IP: &str = "flannel.alpha.coreos.com/public-ip";
pub const ANNOTATION_KUBE_SUBNET_MANAGER: &str = "flannel.alpha.coreos.com/kube-subnet-manager";

/// How often everything is re-applied even without a change (repairs hand edits).
const RESYNC: Duration = Duration::from_secs(60);
/// Node updates arriving within this window are handled in one pass.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// The interface that carries traffic between nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Underlay {
    pub name: String,
    pub ip: Ipv4Addr,
    pub mtu: u32,
    pub index: u32,
}

#[derive(Debug, serde::Deserialize)]
struct IpAddrJson {
    ifname: String,
    #[serde(default)]
    ifindex: u32,
    #[serde(default)]
    mtu: u32,
    #[serde(default)]
    addr_info: Vec<AddrInfoJson>,
}

#[derive(Debug, serde::Deserialize)]
struct AddrInfoJson {
    #[serde(default)]
    family: String,
    #[serde(default)]
    local: String,
    #[serde(default)]
    prefixlen: u8,
}

impl Underlay {
    /// `--flannel-iface` if given (its first IPv4 address, or the node IP when it holds it),
    /// else the interface that holds `node_ip`.
    pub fn find(node_ip: IpAddr, iface: Option<&str>) -> anyhow::Result<Underlay> {
        let output = std::process::Command::new("ip")
            .args(["-j", "-4", "addr", "show"])
            .output()
            .context("running ip -j addr show (install iproute2)")?;
        anyhow::ensure!(
            output.status.success(),
            "ip -j addr show failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
        let text = String::from_utf8_lossy(&output.stdout);
        Self::from_addr_json(&text, node_ip, iface)
    }

    fn from_addr_json(text: &str, node_ip: IpAddr, iface: Option<&str>) -> anyhow::Result<Self> {
        let links: Vec<IpAddrJson> =
            serde_json::from_str(text).context("parsing the output of ip -j addr show")?;
        let v4 = |link: &IpAddrJson| -> Vec<Ipv4Addr> {
            link.addr_info
                .iter()
                .filter(|a| a.family == "inet")
                .filter_map(|a| a.local.parse().ok())
                .collect()
        };
        let found = match iface {
            Some(name) => {
                let link = links
                    .iter()
                    .find(|l| l.ifname == name)
                    .with_context(|| format!("--flannel-iface {name}: no such interface"))?;
                let addrs = v4(link);
                let ip = match node_ip {
                    IpAddr::V4(ip) if addrs.contains(&ip) => Some(ip),
                    _ => addrs.first().copied(),
                }
                .with_context(|| format!("--flannel-iface {name} has no IPv4 address"))?;
                (link, ip)
            }
            None => {
                let IpAddr::V4(ip) = node_ip else {
                    anyhow::bail!("the node IP {node_ip} is not IPv4: give --flannel-iface");
                };
                let link = links
                    .iter()
                    .find(|l| v4(l).contains(&ip))
                    .with_context(|| {
                        format!(
                            "no interface holds the node IP {ip}: give --node-ip or --flannel-iface"
                        )
                    })?;
                (link, ip)
            }
        };
        let (link, ip) = found;
        Ok(Underlay {
            name: link.ifname.clone(),
            ip,
            mtu: if link.mtu == 0 { 1500 } else { link.mtu },
            index: link.ifindex,
        })
    }
}

/// Another node as the routes see it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Peer {
    pub name: String,
    /// Its IPv4 pod CIDR.
    pub pod_cidr: Cidr,
    /// Its InternalIP (host-gw's gateway), or the `public-ip` annotation for vxlan.
    pub ip: Ipv4Addr,
    /// Its VTEP MAC from `backend-data` (vxlan only).
    pub vtep_mac: Option<MacAddr>,
}

/// A unicast Ethernet address, parsed from another node's `backend-data` annotation before it
/// reaches an `ip`/`bridge` batch: six bytes, so what is rendered is always `xx:xx:xx:xx:xx:xx`
/// whatever the annotation held (any node's agent, or anyone who may patch Nodes, writes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl std::str::FromStr for MacAddr {
    type Err = String;

    fn from_str(text: &str) -> Result<MacAddr, String> {
        let mut bytes = [0u8; 6];
        let mut parts = text.split(':');
        for byte in &mut bytes {
            let part = parts.next().ok_or("too few octets")?;
            if part.len() != 2 || !part.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(format!("octet {part:?} is not two hex digits"));
            }
            *byte = u8::from_str_radix(part, 16).map_err(|e| e.to_string())?;
        }
        if parts.next().is_some() {
            return Err("too many octets".into());
        }
        if bytes[0] & 1 == 1 {
            return Err("a multicast address cannot be a VTEP".into());
        }
        if bytes == [0; 6] {
            return Err("the zero address cannot be a VTEP".into());
        }
        Ok(MacAddr(bytes))
    }
}

impl std::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// The IPv4 pod CIDR of a Node (`spec.podCIDRs`, else `spec.podCIDR`).
pub fn node_pod_cidr(node: &Node) -> Option<Cidr> {
    let spec = node.spec.as_ref()?;
    spec.pod_cidrs
        .iter()
        .flatten()
        .chain(spec.pod_cidr.iter())
        .filter_map(|c| c.parse::<Cidr>().ok())
        .find(Cidr::is_ipv4)
}

fn internal_ipv4(node: &Node) -> Option<Ipv4Addr> {
    node.status
        .as_ref()?
        .addresses
        .iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .find_map(|a| a.address.parse().ok())
}

#[derive(Debug, serde::Deserialize, serde::Serialize, PartialEq)]
struct BackendData {
    #[serde(rename = "VNI", default)]
    vni: u32,
    #[serde(rename = "VtepMAC", default)]
    vtep_mac: String,
}

/// The peers this node routes to: every other Node with an IPv4 podCIDR and an address
/// (for vxlan also a VTEP MAC published by its agent).
pub fn peers(nodes: &[&Node], own_name: &str, backend: FlannelBackend) -> Vec<Peer> {
    let mut out: Vec<Peer> = nodes
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some(own_name))
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter_map(|node| {
            let name = node.metadata.name.clone()?;
            let pod_cidr = node_pod_cidr(node)?;
            let annotations = node.metadata.annotations.as_ref();
            let annotation = |key: &str| annotations.and_then(|a| a.get(key));
            match backend {
                FlannelBackend::HostGw => Some(Peer {
                    name,
                    pod_cidr,
                    ip: internal_ipv4(node)?,
                    vtep_mac: None,
                }),
                FlannelBackend::Vxlan => {
                    let raw = annotation(ANNOTATION_BACKEND_DATA)?;
                    let data: BackendData = match serde_json::from_str(raw) {
                        Ok(data) => data,
                        Err(e) => {
                            warn_once(&format!("backend-data/{name}/{raw}"), || {
                                tracing::warn!(node = %name, error = %e, "skipping a peer: its flannel backend-data is not the JSON flannel writes")
                            });
                            return None;
                        }
                    };
                    if data.vtep_mac.is_empty()
                        || annotation(ANNOTATION_BACKEND_TYPE).map(String::as_str) != Some("vxlan")
                    {
                        return None;
                    }
                    let vtep_mac = match data.vtep_mac.parse::<MacAddr>() {
                        Ok(mac) => mac,
                        Err(problem) => {
                            warn_once(
                                &format!("vtep/{name}/{}", data.vtep_mac),
                                || tracing::warn!(node = %name, problem, "skipping a peer: its flannel VtepMAC is not a usable MAC address"),
                            );
                            return None;
                        }
                    };
                    let ip = match annotation(ANNOTATION_PUBLIC_IP) {
                        None => internal_ipv4(node)?,
                        Some(raw) => match parse_public_ip(raw) {
                            Ok(ip) => ip,
                            Err(problem) => {
                                warn_once(&format!("public-ip/{name}/{raw}"), || {
                                    tracing::warn!(node = %name, problem, "skipping a peer: its flannel public-ip is not a usable IPv4 address")
                                });
                                return None;
                            }
                        },
                    };
                    Some(Peer {
                        name,
                        pod_cidr,
                        ip,
                        vtep_mac: Some(vtep_mac),
                    })
                }
                FlannelBackend::None => None,
            }
        })
        .collect();
    out.sort();
    out
}

/// Another node's `public-ip` annotation as a VXLAN underlay address: an IPv4 unicast
/// address (an FDB entry pointing at a broadcast, multicast, loopback or unspecified address
/// would send the node's pod traffic somewhere it should not go).
fn parse_public_ip(text: &str) -> Result<Ipv4Addr, String> {
    let ip: Ipv4Addr = text
        .parse()
        .map_err(|_| format!("{text:?} is not an IPv4 address"))?;
    if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || ip.is_loopback() {
        return Err(format!("{ip} is not a unicast address"));
    }
    Ok(ip)
}

/// The gateway of a vxlan peer: its pod CIDR's network address, which is the address of its
/// `flannel.1`.
fn vtep_ip(cidr: &Cidr) -> Ipv4Addr {
    match cidr.network() {
        IpAddr::V4(ip) => ip,
        IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
    }
}

/// What the kernel should hold for the peers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Desired {
    /// dst CIDR → `ip route replace` arguments after the dst.
    pub routes: BTreeMap<String, String>,
    /// neighbour IP → MAC on `flannel.1`.
    pub neighbours: BTreeMap<String, String>,
    /// MAC → peer public IP on `flannel.1`.
    pub fdb: BTreeMap<String, String>,
}

/// Computes the routes, neighbours and FDB entries for `peers`.
pub fn desired(backend: FlannelBackend, peers: &[Peer], underlay: &Underlay) -> Desired {
    let mut out = Desired::default();
    for peer in peers {
        let dst = peer.pod_cidr.to_string();
        match backend {
            FlannelBackend::HostGw => {
                out.routes.insert(
                    dst,
                    format!("via {} dev {} proto {ROUTE_PROTO}", peer.ip, underlay.name),
                );
            }
            FlannelBackend::Vxlan => {
                let Some(mac) = &peer.vtep_mac else { continue };
                let gw = vtep_ip(&peer.pod_cidr);
                out.routes.insert(
                    dst,
                    format!("via {gw} dev {VXLAN_DEVICE} onlink proto {ROUTE_PROTO}"),
                );
                out.neighbours.insert(gw.to_string(), mac.to_string());
                out.fdb.insert(mac.to_string(), peer.ip.to_string());
            }
            FlannelBackend::None => {}
        }
    }
    out
}

#[derive(Debug, serde::Deserialize)]
struct RouteJson {
    dst: String,
    #[serde(default)]
    gateway: Option<String>,
    #[serde(default)]
    dev: Option<String>,
}

#[derive(Debug, serde::Deserialize)]
struct NeighJson {
    dst: String,
    #[serde(default)]
    lladdr: Option<String>,
    #[serde(default)]
    state: Vec<String>,
}

#[derive(Debug, serde::Deserialize)]
struct FdbJson {
    mac: String,
    #[serde(default)]
    dst: Option<String>,
}

/// The kernel's current state of what this controller owns.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Current {
    /// dst → (gateway, dev).
    pub routes: BTreeMap<String, (Option<String>, Option<String>)>,
    pub neighbours: BTreeMap<String, String>,
    pub fdb: BTreeMap<String, String>,
}

/// Reads the routes with our protocol and the permanent neighbour/FDB entries of
/// `flannel.1` (if it exists).
async fn current(vxlan_exists: bool) -> anyhow::Result<Current> {
    let mut out = Current::default();
    let text = cmd::run(
        "ip",
        &["-j", "-4", "route", "show", "proto", ROUTE_PROTO],
        None,
    )
    .await?;
    let routes: Vec<RouteJson> = parse_json_list(&text).context("parsing ip -j route show")?;
    for r in routes {
        out.routes.insert(normalise_dst(&r.dst), (r.gateway, r.dev));
    }
    if vxlan_exists {
        let text = cmd::run(
            "ip",
            &["-j", "-4", "neigh", "show", "dev", VXLAN_DEVICE],
            None,
        )
        .await?;
        let neighbours: Vec<NeighJson> = parse_json_list(&text).context("parsing ip -j neigh")?;
        for n in neighbours {
            if n.state.iter().any(|s| s == "PERMANENT")
                && let Some(mac) = n.lladdr
            {
                out.neighbours.insert(n.dst, mac.to_ascii_lowercase());
            }
        }
        let text = cmd::run("bridge", &["-j", "fdb", "show", "dev", VXLAN_DEVICE], None).await?;
        let entries: Vec<FdbJson> = parse_json_list(&text).context("parsing bridge -j fdb")?;
        for e in entries {
            if let Some(dst) = e.dst {
                out.fdb.insert(e.mac.to_ascii_lowercase(), dst);
            }
        }
    }
    Ok(out)
}

/// `ip -j` prints nothing at all (not `[]`) for an empty list on some versions.
fn parse_json_list<T: serde::de::DeserializeOwned>(text: &str) -> serde_json::Result<Vec<T>> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(text)
}

/// `ip route` prints a /32 without its prefix.
fn normalise_dst(dst: &str) -> String {
    if dst.contains('/') {
        dst.to_string()
    } else {
        format!("{dst}/32")
    }
}

/// The commands that turn `current` into `desired`: `ip -batch` lines and `bridge -batch`
/// lines. Stale entries are removed, changed or missing ones replaced; equal ones untouched.
pub fn plan(desired: &Desired, current: &Current) -> (Vec<String>, Vec<String>) {
    let mut ip = Vec::new();
    let mut bridge = Vec::new();
    for (dst, (_, dev)) in &current.routes {
        if !desired.routes.contains_key(dst) {
            let mut line = format!("route del {dst} proto {ROUTE_PROTO}");
            if let Some(dev) = dev {
                line.push_str(&format!(" dev {dev}"));
            }
            ip.push(line);
        }
    }
    for (ip_addr, mac) in &current.neighbours {
        if desired.neighbours.get(ip_addr) != Some(mac) {
            ip.push(format!("neigh del {ip_addr} dev {VXLAN_DEVICE}"));
        }
    }
    for (mac, dst) in &current.fdb {
        if desired.fdb.get(mac) != Some(dst) {
            bridge.push(format!("fdb del {mac} dev {VXLAN_DEVICE} dst {dst} self"));
        }
    }
    // FDB and neighbour entries first, so a route never points at an unresolved peer.
    for (mac, dst) in &desired.fdb {
        if current.fdb.get(mac) != Some(dst) {
            bridge.push(format!(
                "fdb replace {mac} dev {VXLAN_DEVICE} dst {dst} self permanent"
            ));
        }
    }
    for (ip_addr, mac) in &desired.neighbours {
        if current.neighbours.get(ip_addr) != Some(mac) {
            ip.push(format!(
                "neigh replace {ip_addr} lladdr {mac} dev {VXLAN_DEVICE} nud permanent"
            ));
        }
    }
    for (dst, args) in &desired.routes {
        let same = current.routes.get(dst).is_some_and(|(gateway, dev)| {
            let want_gw = args.split_whitespace().nth(1);
            let want_dev = args.split_whitespace().nth(3);
            gateway.as_deref() == want_gw && dev.as_deref() == want_dev
        });
        if !same {
            ip.push(format!("route replace {dst} {args}"));
        }
    }
    (ip, bridge)
}

/// Renders the whole `inet k3rs-flannel` table: pod traffic to anything outside the pod
/// network (every node's podCIDR) is masqueraded, except multicast, as flannel's ipMasq does.
/// Applied atomically: the table is created, deleted and rebuilt in one transaction.
pub fn render_masquerade(own: &Cidr, pod_networks: &BTreeSet<Cidr>) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "table inet {MASQ_TABLE}\ndelete table inet {MASQ_TABLE}\n"
    ));
    s.push_str(&format!("table inet {MASQ_TABLE} {{\n"));
    s.push_str("\tset pod-networks {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\tauto-merge\n");
    let elements: Vec<String> = pod_networks
        .iter()
        .chain(std::iter::once(own))
        .filter(|c| c.is_ipv4())
        .map(Cidr::to_string)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    s.push_str(&format!("\t\telements = {{ {} }}\n", elements.join(", ")));
    s.push_str("\t}\n");
    s.push_str("\tchain postrouting {\n");
    s.push_str("\t\ttype nat hook postrouting priority srcnat; policy accept;\n");
    s.push_str("\t\tip saddr @pod-networks ip daddr @pod-networks return\n");
    s.push_str(&format!(
        "\t\tip saddr {own} ip daddr != 224.0.0.0/4 masquerade fully-random\n"
    ));
    s.push_str("\t}\n}\n");
    s
}

#[derive(Debug, serde::Deserialize)]
struct LinkJson {
    #[serde(default)]
    address: String,
    #[serde(default)]
    linkinfo: Option<LinkInfoJson>,
}

#[derive(Debug, serde::Deserialize)]
struct LinkInfoJson {
    #[serde(default)]
    info_kind: String,
    #[serde(default)]
    info_data: serde_json::Value,
}

async fn link_exists(name: &str) -> bool {
    cmd::run("ip", &["link", "show", "dev", name], None)
        .await
        .is_ok()
}

/// Creates (or fixes) `flannel.1` on `underlay` with the address `<own podCIDR>.0/32`, and
/// returns its MAC.
async fn ensure_vxlan(underlay: &Underlay, own: &Cidr) -> anyhow::Result<String> {
    let wanted_local = underlay.ip.to_string();
    let mut recreate = false;
    if let Ok(text) = cmd::run(
        "ip",
        &["-j", "-d", "link", "show", "dev", VXLAN_DEVICE],
        None,
    )
    .await
    {
        let links: Vec<LinkJson> = parse_json_list(&text).context("parsing ip -j link")?;
        let ok = links
            .first()
            .and_then(|l| l.linkinfo.as_ref())
            .is_some_and(|info| {
                let data = &info.info_data;
                info.info_kind == "vxlan"
                    && data["id"].as_u64() == Some(u64::from(VXLAN_VNI))
                    && data["port"].as_u64() == Some(u64::from(VXLAN_PORT))
                    && data["local"].as_str() == Some(wanted_local.as_str())
                    && (underlay.index == 0
                        || data["link"].as_u64() == Some(u64::from(underlay.index)))
            });
        if !ok {
            tracing::info!(
                device = VXLAN_DEVICE,
                "recreating the VXLAN device (settings changed)"
            );
            cmd::run("ip", &["link", "del", VXLAN_DEVICE], None).await?;
            recreate = true;
        }
    } else {
        recreate = true;
    }
    if recreate {
        cmd::run(
            "ip",
            &[
                "link",
                "add",
                VXLAN_DEVICE,
                "type",
                "vxlan",
                "id",
                &VXLAN_VNI.to_string(),
                "local",
                &wanted_local,
                "dev",
                &underlay.name,
                "dstport",
                &VXLAN_PORT.to_string(),
                "nolearning",
            ],
            None,
        )
        .await
        .context("creating the VXLAN device (is the vxlan kernel module available?)")?;
        tracing::info!(device = VXLAN_DEVICE, underlay = %underlay.name, "created the VXLAN device");
    }
    let mtu = underlay.mtu.saturating_sub(VXLAN_OVERHEAD).to_string();
    cmd::run(
        "ip",
        &["link", "set", VXLAN_DEVICE, "mtu", &mtu, "up"],
        None,
    )
    .await?;
    let address = format!("{}/32", vtep_ip(own));
    let text = cmd::run(
        "ip",
        &["-j", "-4", "addr", "show", "dev", VXLAN_DEVICE],
        None,
    )
    .await?;
    let links: Vec<IpAddrJson> = parse_json_list(&text).context("parsing ip -j addr")?;
    for a in links.iter().flat_map(|l| &l.addr_info) {
        let have = format!("{}/{}", a.local, a.prefixlen);
        if a.family == "inet" && have != address {
            cmd::run("ip", &["addr", "del", &have, "dev", VXLAN_DEVICE], None).await?;
        }
    }
    cmd::run(
        "ip",
        &["addr", "replace", &address, "dev", VXLAN_DEVICE],
        None,
    )
    .await?;
    let text = cmd::run("ip", &["-j", "link", "show", "dev", VXLAN_DEVICE], None).await?;
    let links: Vec<LinkJson> = parse_json_list(&text).context("parsing ip -j link")?;
    links
        .first()
        .map(|l| l.address.to_ascii_lowercase())
        .filter(|m| !m.is_empty())
        .context("flannel.1 has no MAC address")
}

/// The annotations this node publishes, as flannel's kube subnet manager writes them.
pub fn own_annotations(
    backend: FlannelBackend,
    public_ip: Ipv4Addr,
    vtep_mac: Option<&str>,
) -> BTreeMap<String, String> {
    let data = match (backend, vtep_mac) {
        (FlannelBackend::Vxlan, Some(mac)) => serde_json::json!({"VNI": VXLAN_VNI, "VtepMAC": mac}),
        _ => serde_json::Value::Null,
    };
    BTreeMap::from([
        (ANNOTATION_BACKEND_DATA.to_string(), data.to_string()),
        (ANNOTATION_BACKEND_TYPE.to_string(), backend.to_string()),
        (ANNOTATION_PUBLIC_IP.to_string(), public_ip.to_string()),
        (
            ANNOTATION_KUBE_SUBNET_MANAGER.to_string(),
            "true".to_string(),
        ),
    ])
}

/// The state kept between passes.
#[derive(Default)]
struct Synced {
    desired: Option<Desired>,
    masquerade: Option<String>,
    annotated: Option<BTreeMap<String, String>>,
}

/// Runs the controller until the Node watch ends.
pub async fn run(client: kube::Client, options: NetworkOptions) -> anyhow::Result<()> {
    let underlay = loop {
        match Underlay::find(options.node_ip, options.iface.as_deref()) {
            Ok(u) => break u,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "waiting for the flannel interface");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    tracing::info!(backend = %options.backend, iface = %underlay.name, ip = %underlay.ip, "flannel starting");
    let nodes: Api<Node> = Api::all(client.clone());
    let (reader, writer) = reflector::store();
    let notify = std::sync::Arc::new(tokio::sync::Notify::new());
    let wake = notify.clone();
    let watch = tokio::spawn(async move {
        let mut stream = reflector(writer, watcher(nodes, watcher::Config::default()))
            .default_backoff()
            .touched_objects()
            .boxed();
        loop {
            match stream.next().await {
                Some(Ok(_)) => wake.notify_one(),
                Some(Err(e)) => tracing::debug!(error = %e, "node watch error (retrying)"),
                None => break,
            }
        }
    });
    reader
        .wait_until_ready()
        .await
        .context("the Node watch ended before its first list")?;
    let mut synced = Synced::default();
    let mut resync = tokio::time::interval(RESYNC);
    resync.tick().await;
    let mut force = true;
    loop {
        let state = reader.state();
        let refs: Vec<&Node> = state.iter().map(|n| n.as_ref()).collect();
        if let Err(e) = sync(&client, &options, &underlay, &refs, &mut synced, force).await {
            tracing::warn!(error = %format!("{e:#}"), "flannel sync failed (retrying)");
            synced = Synced::default();
            tokio::time::sleep(Duration::from_secs(1)).await;
            force = true;
            continue;
        }
        force = false;
        if watch.is_finished() {
            anyhow::bail!("the Node watch ended");
        }
        tokio::select! {
            _ = notify.notified() => tokio::time::sleep(DEBOUNCE).await,
            _ = resync.tick() => force = true,
        }
    }
}

/// One pass: the VXLAN device, the Node annotations, routes/neighbours/FDB, masquerading.
async fn sync(
    client: &kube::Client,
    options: &NetworkOptions,
    underlay: &Underlay,
    nodes: &[&Node],
    synced: &mut Synced,
    force: bool,
) -> anyhow::Result<()> {
    let Some(own) = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(options.node_name.as_str()))
    else {
        return Ok(()); // The kubelet has not registered the Node yet.
    };
    let Some(own_cidr) = node_pod_cidr(own) else {
        return Ok(()); // No podCIDR yet.
    };
    let vxlan = options.backend == FlannelBackend::Vxlan;
    let vtep_mac = if vxlan {
        if force || synced.annotated.is_none() {
            Some(ensure_vxlan(underlay, &own_cidr).await?)
        } else {
            synced
                .annotated
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_BACKEND_DATA))
                .and_then(|d| serde_json::from_str::<BackendData>(d).ok())
                .map(|d| d.vtep_mac)
        }
    } else {
        if link_exists(VXLAN_DEVICE).await {
            tracing::info!(
                "removing {VXLAN_DEVICE}: the backend is {}",
                options.backend
            );
            cmd::run("ip", &["link", "del", VXLAN_DEVICE], None).await?;
        }
        None
    };
    let annotations = own_annotations(options.backend, underlay.ip, vtep_mac.as_deref());
    let present = own.metadata.annotations.clone().unwrap_or_default();
    if annotations.iter().any(|(k, v)| present.get(k) != Some(v)) {
        let api: Api<Node> = Api::all(client.clone());
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        api.patch(
            &options.node_name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .context("publishing the flannel annotations on the Node")?;
        tracing::info!(node = %options.node_name, ?vtep_mac, "published the flannel annotations");
    }
    synced.annotated = Some(annotations);

    let peers = peers(nodes, &options.node_name, options.backend);
    let want = desired(options.backend, &peers, underlay);
    if force || synced.desired.as_ref() != Some(&want) {
        let have = current(vxlan).await?;
        let (ip_lines, bridge_lines) = plan(&want, &have);
        if !bridge_lines.is_empty() {
            cmd::run(
                "bridge",
                &["-batch", "-"],
                Some(&(bridge_lines.join("\n") + "\n")),
            )
            .await?;
        }
        if !ip_lines.is_empty() {
            cmd::run("ip", &["-batch", "-"], Some(&(ip_lines.join("\n") + "\n"))).await?;
        }
        if !ip_lines.is_empty() || !bridge_lines.is_empty() {
            let names: Vec<&str> = peers.iter().map(|p| p.name.as_str()).collect();
            tracing::info!(peers = ?names, changes = ip_lines.len() + bridge_lines.len(), "pod routes to the other nodes synced");
        }
        synced.desired = Some(want);
    }

    let pod_networks: BTreeSet<Cidr> = nodes.iter().filter_map(|n| node_pod_cidr(n)).collect();
    let masquerade = render_masquerade(&own_cidr, &pod_networks);
    if force || synced.masquerade.as_ref() != Some(&masquerade) {
        cmd::nft_apply(&masquerade)
            .await
            .context("applying the inet k3rs-flannel table")?;
        synced.masquerade = Some(masquerade);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeSpec, NodeStatus};
    use kube::api::ObjectMeta;

    fn node(name: &str, cidr: Option<&str>, ip: &str, annotations: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                pod_cidr: cidr.map(str::to_string),
                pod_cidrs: cidr.map(|c| vec![c.to_string()]),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.into(),
                }]),
                ..Default::default()
            }),
        }
    }

    fn underlay() -> Underlay {
        Underlay {
            name: "eth0".into(),
            ip: Ipv4Addr::new(10, 97, 1, 10),
            mtu: 1500,
            index: 2,
        }
    }

    #[test]
    fn underlay_is_the_interface_holding_the_node_ip_or_the_named_one() {
        let json = r#"[{"ifindex":1,"ifname":"lo","mtu":65536,"addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
            {"ifindex":7,"ifname":"eth1","mtu":9000,"addr_info":[{"family":"inet","local":"10.97.1.10","prefixlen":24}]},
            {"ifindex":8,"ifname":"eth2","mtu":1400,"addr_info":[{"family":"inet","local":"192.168.5.2","prefixlen":24}]}]"#;
        let ip: IpAddr = "10.97.1.10".parse().unwrap();
        let u = Underlay::from_addr_json(json, ip, None).unwrap();
        assert_eq!((u.name.as_str(), u.mtu, u.index), ("eth1", 9000, 7));
        let u = Underlay::from_addr_json(json, ip, Some("eth2")).unwrap();
        assert_eq!(
            (u.name.as_str(), u.ip.to_string()),
            ("eth2", "192.168.5.2".into())
        );
        let e = Underlay::from_addr_json(json, "10.1.1.1".parse().unwrap(), None).unwrap_err();
        assert!(e.to_string().contains("--flannel-iface"), "{e}");
        let e = Underlay::from_addr_json(json, ip, Some("wlan0")).unwrap_err();
        assert!(e.to_string().contains("no such interface"), "{e}");
    }

    #[test]
    fn host_gw_routes_every_other_node_with_a_cidr_and_an_ip() {
        let nodes = [
            node("me", Some("10.96.0.0/24"), "10.97.1.10", &[]),
            node("b", Some("10.96.1.0/24"), "10.97.1.11", &[]),
            node("no-cidr", None, "10.97.1.12", &[]),
        ];
        let refs: Vec<&Node> = nodes.iter().collect();
        let peers = peers(&refs, "me", FlannelBackend::HostGw);
        assert_eq!(peers.len(), 1);
        let want = desired(FlannelBackend::HostGw, &peers, &underlay());
        assert_eq!(
            want.routes.get("10.96.1.0/24").map(String::as_str),
            Some("via 10.97.1.11 dev eth0 proto 76")
        );
        assert!(want.neighbours.is_empty() && want.fdb.is_empty());
    }

    #[test]
    fn vxlan_needs_the_peers_vtep_and_routes_onlink_through_flannel_1() {
        let data = r#"{"VNI":1,"VtepMAC":"AA:BB:CC:00:11:22"}"#;
        let nodes = [
            node("me", Some("10.96.0.0/24"), "10.97.1.10", &[]),
            node(
                "b",
                Some("10.96.1.0/24"),
                "10.97.1.11",
                &[
                    (ANNOTATION_BACKEND_DATA, data),
                    (ANNOTATION_BACKEND_TYPE, "vxlan"),
                    (ANNOTATION_PUBLIC_IP, "10.97.1.21"),
                ],
            ),
            // Not yet announced by its agent: no route until it is.
            node("c", Some("10.96.2.0/24"), "10.97.1.12", &[]),
        ];
        let refs: Vec<&Node> = nodes.iter().collect();
        let peers = peers(&refs, "me", FlannelBackend::Vxlan);
        let want = desired(FlannelBackend::Vxlan, &peers, &underlay());
        assert_eq!(want.routes.len(), 1);
        assert_eq!(
            want.routes["10.96.1.0/24"],
            "via 10.96.1.0 dev flannel.1 onlink proto 76"
        );
        assert_eq!(want.neighbours["10.96.1.0"], "aa:bb:cc:00:11:22");
        assert_eq!(want.fdb["aa:bb:cc:00:11:22"], "10.97.1.21");
    }

    #[test]
    fn a_peer_whose_vtep_mac_does_not_parse_is_skipped() {
        let hostile = [
            "aa:bb:cc:dd:ee:ff\nroute del default",
            "aa:bb:cc:dd:ee:ff dev lo",
            "aa:bb:cc:dd:ee",
            "aa:bb:cc:dd:ee:ff:00",
            "ff:ff:ff:ff:ff:ff",
            "00:00:00:00:00:00",
            "éé:bb:cc:dd:ee:ff",
            "+a:bb:cc:dd:ee:ff",
        ];
        let long = "a".repeat(10_000);
        for mac in hostile.iter().copied().chain([long.as_str()]) {
            let data = serde_json::json!({"VNI": 1, "VtepMAC": mac}).to_string();
            let nodes = [
                node("me", Some("10.96.0.0/24"), "10.97.1.10", &[]),
                node(
                    "evil",
                    Some("10.96.1.0/24"),
                    "10.97.1.11",
                    &[
                        (ANNOTATION_BACKEND_DATA, data.as_str()),
                        (ANNOTATION_BACKEND_TYPE, "vxlan"),
                    ],
                ),
                node(
                    "good",
                    Some("10.96.2.0/24"),
                    "10.97.1.12",
                    &[
                        (
                            ANNOTATION_BACKEND_DATA,
                            r#"{"VNI":1,"VtepMAC":"02:00:00:00:00:01"}"#,
                        ),
                        (ANNOTATION_BACKEND_TYPE, "vxlan"),
                    ],
                ),
            ];
            let refs: Vec<&Node> = nodes.iter().collect();
            let peers = peers(&refs, "me", FlannelBackend::Vxlan);
            assert_eq!(peers.len(), 1, "{mac:?}");
            assert_eq!(peers[0].name, "good");
            let (ip, bridge) = plan(
                &desired(FlannelBackend::Vxlan, &peers, &underlay()),
                &Current::default(),
            );
            for line in ip.iter().chain(&bridge) {
                assert!(
                    line.bytes()
                        .all(|c| c.is_ascii_alphanumeric() || b" .:/-".contains(&c)),
                    "{line:?}"
                );
            }
        }
        assert_eq!(
            "AA:bb:0C:00:11:22"
                .parse::<MacAddr>()
                .map(|m| m.to_string()),
            Ok("aa:bb:0c:00:11:22".to_string())
        );
    }

    #[test]
    fn a_peer_whose_public_ip_or_backend_data_does_not_parse_is_skipped() {
        let good_data = r#"{"VNI":1,"VtepMAC":"02:00:00:00:00:01"}"#;
        let vxlan_node = |name: &str, cidr: &str, data: &str, public_ip: Option<&str>| {
            let mut annotations = vec![
                (ANNOTATION_BACKEND_DATA, data.to_string()),
                (ANNOTATION_BACKEND_TYPE, "vxlan".to_string()),
            ];
            if let Some(ip) = public_ip {
                annotations.push((ANNOTATION_PUBLIC_IP, ip.to_string()));
            }
            let refs: Vec<(&str, &str)> =
                annotations.iter().map(|(k, v)| (*k, v.as_str())).collect();
            node(name, Some(cidr), "10.97.1.11", &refs)
        };
        for (data, public_ip) in [
            (good_data, Some("10.97.1.99 dev lo")),
            (good_data, Some("10.97.1.99\nroute del default")),
            (good_data, Some("fd00::1")),
            (good_data, Some("255.255.255.255")),
            (good_data, Some("224.0.0.1")),
            (good_data, Some("127.0.0.1")),
            (good_data, Some("0.0.0.0")),
            (good_data, Some("")),
            ("not json", None),
            (r#"{"VNI":"one","VtepMAC":"02:00:00:00:00:01"}"#, None),
        ] {
            let nodes = [
                node("me", Some("10.96.0.0/24"), "10.97.1.10", &[]),
                vxlan_node("evil", "10.96.1.0/24", data, public_ip),
                vxlan_node("good", "10.96.2.0/24", good_data, Some("10.97.1.50")),
            ];
            let refs: Vec<&Node> = nodes.iter().collect();
            let peers = peers(&refs, "me", FlannelBackend::Vxlan);
            assert_eq!(peers.len(), 1, "{data:?} {public_ip:?}");
            assert_eq!(peers[0].name, "good");
            assert_eq!(peers[0].ip, Ipv4Addr::new(10, 97, 1, 50));
        }
        // Without the annotation the InternalIP is the underlay address.
        let nodes = [vxlan_node("plain", "10.96.3.0/24", good_data, None)];
        let refs: Vec<&Node> = nodes.iter().collect();
        let peers = peers(&refs, "me", FlannelBackend::Vxlan);
        assert_eq!(peers[0].ip, Ipv4Addr::new(10, 97, 1, 11));
    }

    #[test]
    fn plan_removes_stale_entries_and_leaves_equal_ones() {
        let mut want = Desired::default();
        want.routes.insert(
            "10.96.1.0/24".into(),
            "via 10.96.1.0 dev flannel.1 onlink proto 76".into(),
        );
        want.neighbours
            .insert("10.96.1.0".into(), "aa:aa:aa:aa:aa:aa".into());
        want.fdb
            .insert("aa:aa:aa:aa:aa:aa".into(), "10.97.1.11".into());
        let mut have = Current::default();
        have.routes.insert(
            "10.96.1.0/24".into(),
            (Some("10.96.1.0".into()), Some("flannel.1".into())),
        );
        have.routes.insert(
            "10.96.9.0/24".into(),
            (Some("10.96.9.0".into()), Some("flannel.1".into())),
        );
        have.neighbours
            .insert("10.96.9.0".into(), "bb:bb:bb:bb:bb:bb".into());
        have.fdb
            .insert("bb:bb:bb:bb:bb:bb".into(), "10.97.1.19".into());
        let (ip, bridge) = plan(&want, &have);
        assert_eq!(
            ip,
            [
                "route del 10.96.9.0/24 proto 76 dev flannel.1",
                "neigh del 10.96.9.0 dev flannel.1",
                "neigh replace 10.96.1.0 lladdr aa:aa:aa:aa:aa:aa dev flannel.1 nud permanent",
            ]
        );
        assert_eq!(
            bridge,
            [
                "fdb del bb:bb:bb:bb:bb:bb dev flannel.1 dst 10.97.1.19 self",
                "fdb replace aa:aa:aa:aa:aa:aa dev flannel.1 dst 10.97.1.11 self permanent",
            ]
        );
        let (ip, bridge) = plan(&Desired::default(), &Current::default());
        assert!(ip.is_empty() && bridge.is_empty());
    }

    #[test]
    fn annotations_match_flannels() {
        let a = own_annotations(
            FlannelBackend::Vxlan,
            Ipv4Addr::new(10, 97, 1, 10),
            Some("aa:bb:cc:dd:ee:ff"),
        );
        let data: serde_json::Value = serde_json::from_str(&a[ANNOTATION_BACKEND_DATA]).unwrap();
        assert_eq!(
            data,
            serde_json::json!({"VNI": 1, "VtepMAC": "aa:bb:cc:dd:ee:ff"})
        );
        assert_eq!(a[ANNOTATION_BACKEND_TYPE], "vxlan");
        assert_eq!(a[ANNOTATION_PUBLIC_IP], "10.97.1.10");
        assert_eq!(a[ANNOTATION_KUBE_SUBNET_MANAGER], "true");
        let a = own_annotations(FlannelBackend::HostGw, Ipv4Addr::new(10, 97, 1, 10), None);
        assert_eq!(a[ANNOTATION_BACKEND_DATA], "null");
        assert_eq!(a[ANNOTATION_BACKEND_TYPE], "host-gw");
    }

    #[test]
    fn masquerade_table_is_valid_nftables() {
        let own: Cidr = "10.96.0.0/24".parse().unwrap();
        let all: BTreeSet<Cidr> = ["10.96.0.0/24", "10.96.1.0/24"]
            .iter()
            .map(|c| c.parse().unwrap())
            .collect();
        let text = render_masquerade(&own, &all);
        assert!(
            text.contains("elements = { 10.96.0.0/24, 10.96.1.0/24 }"),
            "{text}"
        );
        assert!(text.contains("ip saddr 10.96.0.0/24 ip daddr != 224.0.0.0/4 masquerade"));
        crate::network::policy::tests::nft_check(&text);
    }
}
