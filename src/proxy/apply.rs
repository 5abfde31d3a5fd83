//! The applier: feeds rendered rulesets to `nft -f -` (one transaction per sync, both
//! families together), detects hand edits by comparing `nft list table` with what it left
//! behind, prepares the kernel (br_netfilter, forwarding sysctls) and removes stale UDP
//! conntrack entries. Runs `nft`, `sysctl`, `modprobe` and `conntrack` from PATH, inside
//! `ip netns exec <netns>` when a network namespace is configured.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::model::{Protocol, ServicePort};
use super::render::{Family, RenderOptions};
use super::table::{Changes, TableState, port_changes};

/// Why a sync failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("cannot run {program}: {source} (install nftables/conntrack/iproute2)")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    /// The sync panicked (a bug, or input no check caught); it is retried like a failure.
    #[error("the sync panicked: {0}")]
    Panicked(String),
}

/// Where the commands run: this network namespace or a named one.
#[derive(Debug, Clone, Default)]
pub struct Host {
    /// `ip netns exec <netns>` prefix (tests and multi-node harnesses run a node in one).
    pub netns: Option<String>,
}

impl Host {
    fn command(&self, program: &str) -> Command {
        let mut command = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            None => Command::new(program),
        };
        command.kill_on_drop(true);
        command
    }

    /// Runs `program args` with `stdin`, returning its stdout.
    async fn run(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, ApplyError> {
        let mut command = self.command(program);
        command
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let spawn_error = |source| ApplyError::Spawn {
            program: program.to_string(),
            source,
        };
        let mut child = command.spawn().map_err(spawn_error)?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A write error shows up as nft's failure below.
            let _ = pipe.write_all(text.as_bytes()).await;
            drop(pipe);
        }
        let output = child.wait_with_output().await.map_err(spawn_error)?;
        if !output.status.success() {
            return Err(ApplyError::Failed {
                command: format!("{program} {}", args.join(" ")),
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Applies `script` with `nft -f -` (one atomic transaction); `check` only validates it.
    pub async fn nft(&self, script: &str, check: bool) -> Result<(), ApplyError> {
        let args: &[&str] = if check {
            &["-c", "-f", "-"]
        } else {
            &["-f", "-"]
        };
        self.run("nft", args, Some(script)).await.map(drop)
    }

    /// `nft list table`, or None when the table does not exist.
    pub async fn list_table(
        &self,
        family: Family,
        table: &str,
    ) -> Result<Option<String>, ApplyError> {
        match self
            .run("nft", &["list", "table", family.nft(), table], None)
            .await
        {
            Ok(text) => Ok(Some(text)),
            Err(ApplyError::Failed { stderr, .. })
                if stderr.contains("No such file") || stderr.contains("does not exist") =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Makes bridged pod traffic traverse the hooks and lets the node route, as k3s does:
    /// `br_netfilter`, `net.bridge.bridge-nf-call-ip{,6}tables=1`, forwarding on.
    pub async fn prepare_kernel(&self) {
        if let Err(e) = self.run("modprobe", &["br_netfilter"], None).await {
            // Built in, or /proc/sys/net/bridge already there: only the sysctls matter.
            tracing::debug!(error = %e, "modprobe br_netfilter");
        }
        for setting in [
            "net.bridge.bridge-nf-call-iptables=1",
            "net.bridge.bridge-nf-call-ip6tables=1",
            "net.ipv4.ip_forward=1",
            "net.ipv6.conf.all.forwarding=1",
        ] {
            if let Err(e) = self.run("sysctl", &["-q", "-w", setting], None).await {
                tracing::warn!(error = %e, setting, "cannot set sysctl; Service traffic may bypass the proxy's rules");
            }
        }
    }

    /// `conntrack -D …`; "0 flow entries" is not an error.
    async fn conntrack_delete(&self, args: &[String]) {
        let mut full = vec!["-D".to_string()];
        full.extend_from_slice(args);
        let refs: Vec<&str> = full.iter().map(String::as_str).collect();
        match self.run("conntrack", &refs, None).await {
            Ok(_) => tracing::debug!(args = ?refs, "removed stale conntrack entries"),
            Err(ApplyError::Failed { stderr, .. }) if stderr.contains("0 flow entries") => {}
            Err(e) => tracing::debug!(error = %e, "conntrack -D"),
        }
    }
}

/// A UDP flow key whose conntrack entries must go when its endpoint goes:
/// (service-side address or None for a NodePort, service port, endpoint address).
type UdpFlow = (Option<IpAddr>, u16, IpAddr);
/// A UDP service address: (service-side address or None for a NodePort, service port).
type UdpAddress = (Option<IpAddr>, u16);

/// What one sync did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncKind {
    /// Nothing changed.
    Unchanged,
    /// The tables were replaced.
    Full,
    /// Only the differences were applied.
    Partial,
}

/// Keeps what was applied, so the next sync can be partial and cost what changed.
#[derive(Debug)]
pub struct Syncer {
    pub host: Host,
    pub options: RenderOptions,
    pub families: Vec<Family>,
    /// The model of the last successful sync, by port id.
    ports: BTreeMap<String, ServicePort>,
    /// What the kernel holds, one per family; `None` when unknown (never synced, or the
    /// last apply failed): the next sync replaces the tables.
    tables: Option<Vec<TableState>>,
    fingerprints: BTreeMap<Family, String>,
    udp: UdpTracker,
}

/// The UDP flows the applied model implies, counted per port so that a sync only looks at
/// the ports that changed.
#[derive(Debug, Default)]
struct UdpTracker {
    by_port: BTreeMap<String, (Vec<UdpFlow>, Vec<UdpAddress>)>,
    flows: BTreeMap<UdpFlow, u32>,
    with_endpoints: BTreeMap<UdpAddress, u32>,
}

impl UdpTracker {
    /// The flows and served addresses of one port (nothing unless UDP).
    fn contribution(port: &ServicePort) -> (Vec<UdpFlow>, Vec<UdpAddress>) {
        let (mut flows, mut with_endpoints) = (Vec::new(), Vec::new());
        if port.protocol != Protocol::Udp {
            return (flows, with_endpoints);
        }
        let endpoints = port.cluster_endpoints();
        if endpoints.is_empty() {
            return (flows, with_endpoints);
        }
        let addresses = port
            .cluster_ips
            .iter()
            .chain(&port.load_balancer_ips)
            .chain(&port.external_ips)
            .map(|ip| (Some(*ip), port.port))
            .chain(port.node_port.map(|p| (None, p)));
        for (address, service_port) in addresses {
            with_endpoints.push((address, service_port));
            for endpoint in &endpoints {
                flows.push((address, service_port, endpoint.ip));
            }
        }
        (flows, with_endpoints)
    }

    /// Applies `changes`; returns the flows no port implies any more (their conntrack
    /// entries point at removed endpoints) and the addresses that just got their first
    /// endpoint (their entries cached the reject).
    fn update(&mut self, changes: &Changes<'_>) -> (Vec<UdpFlow>, Vec<UdpAddress>) {
        let mut touched_flows = BTreeSet::new();
        let mut touched_addresses = BTreeMap::new();
        for (id, port) in changes {
            if let Some((flows, addresses)) = self.by_port.remove(id) {
                for flow in flows {
                    count_down(&mut self.flows, flow);
                    touched_flows.insert(flow);
                }
                for address in addresses {
                    touched_addresses
                        .entry(address)
                        .or_insert_with(|| self.with_endpoints.contains_key(&address));
                    count_down(&mut self.with_endpoints, address);
                }
            }
            let Some(port) = port else { continue };
            let (flows, addresses) = UdpTracker::contribution(port);
            if flows.is_empty() && addresses.is_empty() {
                continue;
            }
            for flow in &flows {
                *self.flows.entry(*flow).or_default() += 1;
            }
            for address in &addresses {
                touched_addresses
                    .entry(*address)
                    .or_insert_with(|| self.with_endpoints.contains_key(address));
                *self.with_endpoints.entry(*address).or_default() += 1;
            }
            self.by_port.insert(id.clone(), (flows, addresses));
        }
        let stale = touched_flows
            .into_iter()
            .filter(|flow| !self.flows.contains_key(flow))
            .collect();
        let fresh = touched_addresses
            .into_iter()
            .filter(|(address, before)| !before && self.with_endpoints.contains_key(address))
            .map(|(address, _)| address)
            .collect();
        (stale, fresh)
    }
}

fn count_down<K: Ord>(counts: &mut BTreeMap<K, u32>, key: K) {
    if let Some(count) = counts.get_mut(&key) {
        *count -= 1;
        if *count == 0 {
            counts.remove(&key);
        }
    }
}

/// Drops the parts of an `nft list table` listing that the kernel changes by itself (the
/// elements of the dynamic affinity sets), so a listing can be compared with a later one.
pub fn normalize_listing(listing: &str) -> String {
    let mut out = String::with_capacity(listing.len());
    let mut in_affinity = false;
    let mut skipping_elements = false;
    for line in listing.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("set affinity-") {
            in_affinity = true;
        } else if in_affinity && trimmed == "}" {
            in_affinity = false;
            skipping_elements = false;
        } else if in_affinity && trimmed.starts_with("elements = {") {
            skipping_elements = true;
        }
        if skipping_elements {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

impl Syncer {
    pub fn new(host: Host, options: RenderOptions, families: Vec<Family>) -> Syncer {
        Syncer {
            host,
            options,
            families,
            ports: BTreeMap::new(),
            tables: None,
            fingerprints: BTreeMap::new(),
            udp: UdpTracker::default(),
        }
    }

    /// Applies `ports`: the whole tables, rendered from scratch, when `full` or the
    /// kernel's state is unknown; else only what changed since the last sync (the changed
    /// ports re-rendered, their chains' and maps' differences and the shared elements
    /// they touch), in one `nft -f` transaction either way.
    pub async fn sync(
        &mut self,
        ports: &[ServicePort],
        full: bool,
    ) -> Result<SyncKind, ApplyError> {
        let started = Instant::now();
        let changes = port_changes(&self.ports, ports);
        let mut script = String::new();
        let kind = match self.tables.as_mut().filter(|_| !full) {
            Some(tables) => {
                for table in tables.iter_mut() {
                    script.push_str(&table.update(&self.options, &changes));
                }
                if script.is_empty() {
                    SyncKind::Unchanged
                } else {
                    SyncKind::Partial
                }
            }
            None => {
                let tables: Vec<TableState> = self
                    .families
                    .iter()
                    .map(|family| TableState::build(*family, &self.options, ports))
                    .collect();
                for table in &tables {
                    script.push_str(&table.full_text());
                }
                self.tables = Some(tables);
                SyncKind::Full
            }
        };
        if !script.is_empty()
            && let Err(e) = self.host.nft(&script, false).await
        {
            // The kernel state is unknown now; the next sync replaces it.
            self.tables = None;
            return Err(e);
        }
        if kind != SyncKind::Unchanged {
            tracing::debug!(?kind, elapsed = ?started.elapsed(), bytes = script.len(), changed_ports = changes.len(), "applied nftables rules");
            self.fingerprints.clear();
        }
        self.clear_stale_udp(&changes).await;
        for (id, port) in changes {
            match port {
                Some(port) => {
                    self.ports.insert(id, port.clone());
                }
                None => {
                    self.ports.remove(&id);
                }
            }
        }
        Ok(kind)
    }

    /// Records what the kernel holds now, for [`Syncer::drifted`]. Listing a big table
    /// costs `nft` about as much as loading it, so the caller does this once changes
    /// settle, not after every sync. `Ok(false)` when a table the last sync applied is
    /// gone already (flushed by hand): nothing is recorded, a full sync is due.
    pub async fn record_fingerprint(&mut self) -> Result<bool, ApplyError> {
        let mut listings = BTreeMap::new();
        for family in self.families.clone() {
            match self.host.list_table(family, &self.options.table).await? {
                Some(listing) => {
                    listings.insert(family, normalize_listing(&listing));
                }
                None => return Ok(false),
            }
        }
        self.fingerprints = listings;
        Ok(true)
    }

    /// Whether a reference listing was recorded since the last change.
    pub fn has_fingerprint(&self) -> bool {
        !self.fingerprints.is_empty()
    }

    /// Whether the tables differ from what the last sync left (a hand edit, a flush);
    /// true when no reference listing was recorded since the last change.
    pub async fn drifted(&self) -> bool {
        for family in &self.families {
            let Some(expected) = self.fingerprints.get(family) else {
                return true;
            };
            match self.host.list_table(*family, &self.options.table).await {
                Ok(Some(listing)) if normalize_listing(&listing) == *expected => {}
                _ => return true,
            }
        }
        false
    }

    /// Deletes UDP conntrack entries that point at endpoints no longer used, and entries
    /// of UDP services that just got their first endpoint (they cached the reject). Looks
    /// only at the changed ports.
    async fn clear_stale_udp(&mut self, changes: &Changes<'_>) {
        let (stale, fresh) = self.udp.update(changes);
        for (address, port, endpoint) in stale {
            self.host
                .conntrack_delete(&conntrack_args(address, port, Some(endpoint)))
                .await;
        }
        for (address, port) in fresh {
            self.host
                .conntrack_delete(&conntrack_args(address, port, None))
                .await;
        }
    }
}

/// `conntrack -D` filter arguments for UDP flows to `address:port` (any address for a
/// NodePort), optionally only those DNATed to `endpoint`.
pub fn conntrack_args(address: Option<IpAddr>, port: u16, endpoint: Option<IpAddr>) -> Vec<String> {
    let mut args = vec!["-p".to_string(), "udp".to_string()];
    if let Some(address) = address {
        if address.is_ipv6() {
            args.extend(["-f".to_string(), "ipv6".to_string()]);
        }
        args.extend(["--orig-dst".to_string(), address.to_string()]);
    }
    args.extend(["--orig-port-dst".to_string(), port.to_string()]);
    if let Some(endpoint) = endpoint {
        args.extend(["--dst-nat".to_string(), endpoint.to_string()]);
    }
    args
}

/// How long to wait before the next sync: at least `min_interval` after the last one.
pub fn next_sync_delay(last: Option<Instant>, min_interval: Duration, now: Instant) -> Duration {
    match last {
        Some(last) => (last + min_interval).saturating_duration_since(now),
        None => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::model::Endpoint;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    fn udp_port(name: &str, cluster_ip: &str, endpoints: &[&str]) -> ServicePort {
        ServicePort {
            namespace: "ns".into(),
            name: name.into(),
            port_name: String::new(),
            protocol: Protocol::Udp,
            cluster_ips: vec![ip(cluster_ip)],
            port: 53,
            node_port: None,
            load_balancer_ips: vec![],
            external_ips: vec![],
            affinity_timeout: None,
            external_local: false,
            internal_local: false,
            endpoints: endpoints
                .iter()
                .map(|e| Endpoint {
                    ip: ip(e),
                    port: 5353,
                    local: true,
                    hairpin: true,
                    ready: true,
                    serving: true,
                    terminating: false,
                })
                .collect(),
        }
    }

    /// Runs one sync's worth of UDP bookkeeping from `applied` to `ports`.
    fn step(
        tracker: &mut UdpTracker,
        applied: &mut BTreeMap<String, ServicePort>,
        ports: &[ServicePort],
    ) -> (Vec<UdpFlow>, Vec<UdpAddress>) {
        let changes = port_changes(applied, ports);
        let result = tracker.update(&changes);
        *applied = ports.iter().map(|p| (p.id(), p.clone())).collect();
        result
    }

    #[test]
    fn udp_clean_up_follows_only_the_changed_ports() {
        let (mut tracker, mut applied) = (UdpTracker::default(), BTreeMap::new());
        let vip = Some(ip("10.43.0.10"));
        // The first endpoint of a Service: its cached rejects go.
        let mut ports = vec![udp_port("dns", "10.43.0.10", &["10.42.0.5", "10.42.0.6"])];
        assert_eq!(
            step(&mut tracker, &mut applied, &ports),
            (vec![], vec![(vip, 53)])
        );
        // Unchanged: nothing to do. One endpoint removed: only its flows go.
        assert_eq!(step(&mut tracker, &mut applied, &ports), (vec![], vec![]));
        ports[0].endpoints.remove(0);
        assert_eq!(
            step(&mut tracker, &mut applied, &ports),
            (vec![(vip, 53, ip("10.42.0.5"))], vec![])
        );
        // A TCP port is not tracked; a Service losing all endpoints and getting one back
        // counts as a first endpoint again.
        let mut tcp = udp_port("web", "10.43.0.11", &["10.42.0.7"]);
        tcp.protocol = Protocol::Tcp;
        ports.push(tcp);
        assert_eq!(step(&mut tracker, &mut applied, &ports), (vec![], vec![]));
        ports[0].endpoints.clear();
        assert_eq!(
            step(&mut tracker, &mut applied, &ports),
            (vec![(vip, 53, ip("10.42.0.6"))], vec![])
        );
        ports[0] = udp_port("dns", "10.43.0.10", &["10.42.0.8"]);
        assert_eq!(
            step(&mut tracker, &mut applied, &ports),
            (vec![], vec![(vip, 53)])
        );
        ports.clear();
        assert_eq!(
            step(&mut tracker, &mut applied, &ports),
            (vec![(vip, 53, ip("10.42.0.8"))], vec![])
        );
        assert!(tracker.flows.is_empty() && tracker.with_endpoints.is_empty());
    }
}
