//! Node IPAM, as kube-controller-manager's range allocator: every Node without
//! `spec.podCIDR` gets the next free subnet (`--node-cidr-mask-size`, /24 by default)
//! of `--cluster-cidr` in `spec.podCIDR` and `spec.podCIDRs`. The allocation map is
//! rebuilt from the Nodes' own CIDRs whenever the node watch (re)lists, so a restart
//! never hands out a subnet twice; a deleted Node's subnet is released. When the range
//! is exhausted the Node gets a `CIDRNotAvailable` event and waits until a subnet is
//! released. Allocation is round-robin (kube's `nextCandidate`): a released subnet is
//! reused once the ones after it are taken.
//!
//! Owns `spec.podCIDR(s)` of Nodes that have none; never changes a CIDR already set,
//! and never touches the store (it is an API client).

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::Config;
use super::events::{EventType, Recorder, reference};
use crate::cli::cidr::Cidr;

/// How often nodes still waiting for a CIDR are retried even without a release.
const RETRY_PENDING: Duration = Duration::from_secs(10);

/// Why a CIDR could not be recorded as used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IpamError {
    #[error("{cidr} is not inside the cluster CIDR {cluster}")]
    OutsideCluster { cidr: Cidr, cluster: Cidr },
    #[error("the cluster CIDR {0} has no free node CIDR left")]
    Exhausted(Cidr),
}

/// The subnets of a cluster CIDR and which are taken (kube's `cidrset`).
#[derive(Debug, Clone)]
pub struct CidrSet {
    cluster: Cidr,
    mask: u8,
    /// Number of subnets (at most 2^16, checked when the flags are parsed).
    size: u64,
    used: BTreeSet<u64>,
    next_candidate: u64,
}

fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl CidrSet {
    /// The subnets of `/mask` in `cluster`; `mask` must not be shorter than the
    /// cluster's prefix (checked when the flags are parsed; clamped here).
    pub fn new(cluster: Cidr, mask: u8) -> Self {
        let width: u8 = if cluster.is_ipv4() { 32 } else { 128 };
        let mask = mask.clamp(cluster.prefix_len(), width);
        let extra = u32::from(mask - cluster.prefix_len()).min(63);
        CidrSet {
            cluster,
            mask,
            size: 1u64 << extra,
            used: BTreeSet::new(),
            next_candidate: 0,
        }
    }

    fn host_bits(&self) -> u32 {
        let width: u32 = if self.cluster.is_ipv4() { 32 } else { 128 };
        width - u32::from(self.mask)
    }

    /// The `index`-th subnet.
    fn subnet(&self, index: u64) -> Option<Cidr> {
        let offset = u128::from(index).checked_shl(self.host_bits())?;
        let ip = self.cluster.nth(offset)?;
        Cidr::new(ip, self.mask).ok()
    }

    /// The subnet indexes `cidr` covers (a wider CIDR covers several, a narrower one
    /// the subnet it lies in).
    fn indexes(&self, cidr: Cidr) -> Result<(u64, u64), IpamError> {
        let outside = || IpamError::OutsideCluster {
            cidr,
            cluster: self.cluster,
        };
        if cidr.is_ipv4() != self.cluster.is_ipv4()
            || cidr.prefix_len() < self.cluster.prefix_len()
            || !self.cluster.contains(cidr.network())
        {
            return Err(outside());
        }
        let base = bits(self.cluster.network());
        let first = bits(cidr.network()) - base;
        let width: u32 = if cidr.is_ipv4() { 32 } else { 128 };
        let span = width - u32::from(cidr.prefix_len());
        let last = first
            | 1u128
                .checked_shl(span)
                .map_or(u128::MAX, |v| v.wrapping_sub(1));
        let shift = self.host_bits();
        let to_index = |offset: u128| u64::try_from(offset >> shift).map_err(|_| outside());
        Ok((to_index(first)?, to_index(last)?))
    }

    /// Marks `cidr` as used.
    pub fn occupy(&mut self, cidr: Cidr) -> Result<(), IpamError> {
        let (first, last) = self.indexes(cidr)?;
        self.used.extend(first..=last);
        Ok(())
    }

    /// Marks `cidr` as free again.
    pub fn release(&mut self, cidr: Cidr) -> Result<(), IpamError> {
        let (first, last) = self.indexes(cidr)?;
        for i in first..=last {
            self.used.remove(&i);
        }
        Ok(())
    }

    /// The next free subnet after the last one handed out, wrapping around.
    pub fn allocate_next(&mut self) -> Result<Cidr, IpamError> {
        for step in 0..self.size {
            let candidate = (self.next_candidate + step) % self.size;
            if !self.used.contains(&candidate) {
                let cidr = self
                    .subnet(candidate)
                    .ok_or(IpamError::Exhausted(self.cluster))?;
                self.used.insert(candidate);
                self.next_candidate = (candidate + 1) % self.size;
                return Ok(cidr);
            }
        }
        Err(IpamError::Exhausted(self.cluster))
    }

    /// How many subnets are taken.
    pub fn used_count(&self) -> usize {
        self.used.len()
    }
}

/// The pod CIDRs a node already has (`podCIDRs`, or the legacy `podCIDR`).
fn node_cidrs(node: &Node) -> Vec<String> {
    let Some(spec) = node.spec.as_ref() else {
        return Vec::new();
    };
    match spec.pod_cidrs.as_ref().filter(|c| !c.is_empty()) {
        Some(list) => list.clone(),
        None => spec
            .pod_cidr
            .iter()
            .filter(|c| !c.is_empty())
            .cloned()
            .collect(),
    }
}

/// The allocator's state, driven by the node watch.
struct Allocator {
    set: CidrSet,
    /// Node name → the CIDRs counted as used for it.
    by_node: HashMap<String, Vec<Cidr>>,
    /// Nodes waiting for a CIDR (none was free, or writing it failed).
    pending: BTreeSet<String>,
}

impl Allocator {
    fn new(config: &Config) -> Self {
        Allocator {
            set: CidrSet::new(config.cluster_cidr, config.node_cidr_mask_size),
            by_node: HashMap::new(),
            pending: BTreeSet::new(),
        }
    }

    /// Forgets everything (before a re-list rebuilds the map).
    fn reset(&mut self) {
        self.set = CidrSet::new(self.set.cluster, self.set.mask);
        self.by_node.clear();
        self.pending.clear();
    }

    /// Counts a node's existing CIDRs as used. Returns false when it has none.
    fn occupy_existing(&mut self, node: &Node) -> bool {
        let name = node.metadata.name.clone().unwrap_or_default();
        let cidrs = node_cidrs(node);
        if cidrs.is_empty() {
            return false;
        }
        let mut parsed = Vec::new();
        for text in cidrs {
            match text.parse::<Cidr>() {
                Ok(c) if c.is_ipv4() == self.set.cluster.is_ipv4() => parsed.push(c),
                Ok(_) => {} // the other family of a dual-stack node: not ours to track
                Err(e) => {
                    tracing::warn!(node = %name, cidr = %text, error = %e, "node has an unparsable pod CIDR")
                }
            }
        }
        if self.by_node.get(&name) == Some(&parsed) {
            return true;
        }
        if let Some(old) = self.by_node.remove(&name) {
            for c in old {
                let _ = self.set.release(c);
            }
        }
        for c in &parsed {
            if let Err(e) = self.set.occupy(*c) {
                tracing::warn!(node = %name, error = %e, "node pod CIDR not tracked");
            }
        }
        self.by_node.insert(name.clone(), parsed);
        self.pending.remove(&name);
        true
    }

    fn release_node(&mut self, name: &str) -> bool {
        self.pending.remove(name);
        match self.by_node.remove(name) {
            Some(cidrs) => {
                for c in cidrs {
                    let _ = self.set.release(c);
                }
                true
            }
            None => false,
        }
    }
}

/// Runs the node IPAM controller until the process ends.
pub async fn run(client: kube::Client, config: Config) {
    let nodes: Api<Node> = Api::all(client.clone());
    let recorder = Recorder::new(client.clone(), "cidrAllocator");
    let mut allocator = Allocator::new(&config);
    let mut listing: Vec<Node> = Vec::new();
    let mut known: HashMap<String, Node> = HashMap::new();
    let mut events = watcher::watcher(nodes.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut retry = tokio::time::interval(RETRY_PENDING);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tracing::info!(cluster_cidr = %config.cluster_cidr, mask = config.node_cidr_mask_size, "node IPAM started");
    loop {
        let event = tokio::select! {
            event = events.next() => match event {
                Some(e) => e,
                None => return,
            },
            _ = retry.tick() => {
                let waiting: Vec<String> = allocator.pending.iter().cloned().collect();
                for name in waiting {
                    if let Some(node) = known.get(&name).cloned() {
                        assign(&nodes, &recorder, &mut allocator, &node).await;
                    }
                }
                continue;
            }
        };
        match event {
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(node)) => listing.push(node),
            Ok(Event::InitDone) => {
                // Rebuild from the complete list: existing CIDRs first, so nothing
                // handed out below can collide with one a node already has.
                allocator.reset();
                known.clear();
                let all = std::mem::take(&mut listing);
                let mut without = Vec::new();
                for node in all {
                    if !allocator.occupy_existing(&node) {
                        without.push(node.clone());
                    }
                    if let Some(name) = node.metadata.name.clone() {
                        known.insert(name, node);
                    }
                }
                tracing::debug!(used = allocator.set.used_count(), "node CIDR map rebuilt");
                for node in without {
                    assign(&nodes, &recorder, &mut allocator, &node).await;
                }
            }
            Ok(Event::Apply(node)) => {
                if let Some(name) = node.metadata.name.clone() {
                    known.insert(name, node.clone());
                }
                if !allocator.occupy_existing(&node) {
                    assign(&nodes, &recorder, &mut allocator, &node).await;
                }
            }
            Ok(Event::Delete(node)) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                known.remove(&name);
                if allocator.release_node(&name) {
                    tracing::info!(node = %name, "released the pod CIDR of a deleted node");
                    // A subnet came free: nodes waiting for one get it now.
                    let waiting: Vec<String> = allocator.pending.iter().cloned().collect();
                    for waiting_name in waiting {
                        if let Some(n) = known.get(&waiting_name).cloned() {
                            assign(&nodes, &recorder, &mut allocator, &n).await;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "node watch interrupted; it resumes by itself");
            }
        }
    }
}

/// Gives `node` (which has no pod CIDR) the next free subnet and writes it.
async fn assign(nodes: &Api<Node>, recorder: &Recorder, allocator: &mut Allocator, node: &Node) {
    let Some(name) = node.metadata.name.clone() else {
        return;
    };
    if node.metadata.deletion_timestamp.is_some() || allocator.by_node.contains_key(&name) {
        return;
    }
    let cidr = match allocator.set.allocate_next() {
        Ok(c) => c,
        Err(e) => {
            if allocator.pending.insert(name.clone()) {
                tracing::warn!(node = %name, error = %e, "no pod CIDR available");
            }
            recorder
                .record(
                    &reference(node),
                    EventType::Normal,
                    "CIDRNotAvailable",
                    &format!("Node {name} status is now: CIDRNotAvailable"),
                )
                .await;
            return;
        }
    };
    let patch =
        serde_json::json!({"spec": {"podCIDR": cidr.to_string(), "podCIDRs": [cidr.to_string()]}});
    match nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            allocator.by_node.insert(name.clone(), vec![cidr]);
            allocator.pending.remove(&name);
            tracing::info!(node = %name, %cidr, "assigned pod CIDR");
        }
        Err(e) => {
            let _ = allocator.set.release(cidr);
            if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                allocator.pending.remove(&name);
                return;
            }
            allocator.pending.insert(name.clone());
            tracing::warn!(node = %name, error = %e, "could not write the pod CIDR; will retry");
            recorder
                .record(
                    &reference(node),
                    EventType::Normal,
                    "CIDRAssignmentFailed",
                    &format!("Node {name} status is now: CIDRAssignmentFailed"),
                )
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> Cidr {
        s.parse().expect("cidr")
    }

    #[test]
    fn allocates_distinct_subnets_round_robin() {
        let mut set = CidrSet::new(cidr("10.42.0.0/16"), 24);
        assert_eq!(set.allocate_next(), Ok(cidr("10.42.0.0/24")));
        assert_eq!(set.allocate_next(), Ok(cidr("10.42.1.0/24")));
        assert_eq!(set.allocate_next(), Ok(cidr("10.42.2.0/24")));
        set.release(cidr("10.42.1.0/24")).expect("release");
        // Round-robin: the released subnet comes back only after the rest.
        assert_eq!(set.allocate_next(), Ok(cidr("10.42.3.0/24")));
        assert_eq!(set.used_count(), 3);
    }

    #[test]
    fn occupied_subnets_are_skipped_and_exhaustion_is_reported() {
        let mut set = CidrSet::new(cidr("10.42.0.0/22"), 24);
        set.occupy(cidr("10.42.0.0/24")).expect("occupy");
        set.occupy(cidr("10.42.2.0/24")).expect("occupy");
        assert_eq!(set.allocate_next(), Ok(cidr("10.42.1.0/24")));
        assert_eq!(set.allocate_next(), Ok(cidr("10.42.3.0/24")));
        assert_eq!(
            set.allocate_next(),
            Err(IpamError::Exhausted(cidr("10.42.0.0/22")))
        );
        set.release(cidr("10.42.2.0/24")).expect("release");
        assert_eq!(set.allocate_next(), Ok(cidr("10.42.2.0/24")));
    }

    #[test]
    fn wider_and_narrower_cidrs_occupy_what_they_cover() {
        let mut set = CidrSet::new(cidr("10.42.0.0/22"), 24);
        set.occupy(cidr("10.42.0.0/23")).expect("wider");
        set.occupy(cidr("10.42.2.128/25")).expect("narrower");
        assert_eq!(set.allocate_next(), Ok(cidr("10.42.3.0/24")));
        assert!(set.allocate_next().is_err());
    }

    #[test]
    fn outside_cidrs_are_refused() {
        let mut set = CidrSet::new(cidr("10.42.0.0/16"), 24);
        assert!(matches!(
            set.occupy(cidr("10.43.0.0/24")),
            Err(IpamError::OutsideCluster { .. })
        ));
        assert!(set.occupy(cidr("10.0.0.0/8")).is_err());
        assert!(set.occupy(cidr("fd00::/64")).is_err());
        assert_eq!(set.used_count(), 0);
    }

    #[test]
    fn ipv6_subnets() {
        let mut set = CidrSet::new(cidr("fd00:42::/56"), 64);
        assert_eq!(set.allocate_next(), Ok(cidr("fd00:42::/64")));
        assert_eq!(set.allocate_next(), Ok(cidr("fd00:42:0:1::/64")));
    }

    #[test]
    fn allocator_rebuilds_from_nodes() {
        let config = Config::for_cluster_cidr(cidr("10.42.0.0/23"));
        let mut allocator = Allocator::new(&config);
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a"}, "spec": {"podCIDR": "10.42.0.0/24", "podCIDRs": ["10.42.0.0/24"]}
        }))
        .expect("node");
        assert!(allocator.occupy_existing(&node));
        assert_eq!(allocator.set.allocate_next(), Ok(cidr("10.42.1.0/24")));
        assert!(allocator.set.allocate_next().is_err());
        assert!(allocator.release_node("a"));
        assert_eq!(allocator.set.allocate_next(), Ok(cidr("10.42.0.0/24")));
        let bare: Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "b"}})).expect("node");
        assert!(!allocator.occupy_existing(&bare));
    }
}
