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
use super::render::{Family, RenderOptions, Ruleset, render};

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

/// Keeps what was applied, so the next sync can be partial.
#[derive(Debug)]
pub struct Syncer {
    pub host: Host,
    pub options: RenderOptions,
    pub families: Vec<Family>,
    applied: BTreeMap<Family, Ruleset>,
    fingerprints: BTreeMap<Family, String>,
    udp_flows: BTreeSet<UdpFlow>,
    udp_services_with_endpoints: BTreeSet<(Option<IpAddr>, u16)>,
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
            applied: BTreeMap::new(),
            fingerprints: BTreeMap::new(),
            udp_flows: BTreeSet::new(),
            udp_services_with_endpoints: BTreeSet::new(),
        }
    }

    /// Renders `ports` and applies them: the whole tables when `full` or nothing is known
    /// to be applied, else only the differences.
    pub async fn sync(
        &mut self,
        ports: &[ServicePort],
        full: bool,
    ) -> Result<SyncKind, ApplyError> {
        let started = Instant::now();
        let rendered: Vec<Ruleset> = self
            .families
            .iter()
            .map(|family| render(*family, ports, &self.options))
            .collect();
        let full = full
            || rendered
                .iter()
                .any(|rs| !self.applied.contains_key(&rs.family));
        let mut script = String::new();
        for rs in &rendered {
            if full {
                script.push_str(&rs.full_text());
            } else if let Some(old) = self.applied.get(&rs.family) {
                script.push_str(&rs.diff_text(old));
            }
        }
        let kind = if full {
            SyncKind::Full
        } else if script.is_empty() {
            SyncKind::Unchanged
        } else {
            SyncKind::Partial
        };
        if !script.is_empty()
            && let Err(e) = self.host.nft(&script, false).await
        {
            // The kernel state is unknown now; the next sync replaces it.
            self.applied.clear();
            return Err(e);
        }
        for rs in rendered {
            self.applied.insert(rs.family, rs);
        }
        if kind != SyncKind::Unchanged {
            tracing::debug!(?kind, elapsed = ?started.elapsed(), bytes = script.len(), "applied nftables rules");
            self.fingerprints.clear();
        }
        self.clear_stale_udp(ports).await;
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
    /// of UDP services that just got their first endpoint (they cached the reject).
    async fn clear_stale_udp(&mut self, ports: &[ServicePort]) {
        let mut flows = BTreeSet::new();
        let mut with_endpoints = BTreeSet::new();
        for port in ports.iter().filter(|p| p.protocol == Protocol::Udp) {
            let endpoints = port.cluster_endpoints();
            let addresses = port
                .cluster_ips
                .iter()
                .chain(&port.load_balancer_ips)
                .chain(&port.external_ips)
                .map(|ip| (Some(*ip), port.port))
                .chain(port.node_port.map(|p| (None, p)));
            for (address, service_port) in addresses {
                if !endpoints.is_empty() {
                    with_endpoints.insert((address, service_port));
                }
                for endpoint in &endpoints {
                    flows.insert((address, service_port, endpoint.ip));
                }
            }
        }
        let stale: Vec<UdpFlow> = self.udp_flows.difference(&flows).copied().collect();
        let fresh: Vec<(Option<IpAddr>, u16)> = with_endpoints
            .difference(&self.udp_services_with_endpoints)
            .copied()
            .collect();
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
        self.udp_flows = flows;
        self.udp_services_with_endpoints = with_endpoints;
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
