//! The controller-manager: reconcile loops that turn desired state into actual
//! state. Every controller is an API client (kube-rs) with the
//! `system:kube-controller-manager` identity; none may touch `store`.
//!
//! Running today: the namespace controller (empties a deleted namespace, then
//! releases it), the ReplicaSet and ReplicationController controllers (one shared
//! loop: pods to match replicas, adoption, status), the Deployment controller
//! (template-hash ReplicaSets, rolling updates and Recreate, revisions,
//! conditions), the DaemonSet controller (a pod per eligible node, pinned through
//! node affinity for the scheduler, ControllerRevisions, rolling updates), the
//! StatefulSet controller (ordinal pods, PVCs from claim templates, ordered or
//! parallel, partitioned rolling updates), the Job controller (completions,
//! parallelism, Indexed mode, back-off, deadlines, suspend, TTL after finish), the
//! CronJob controller (schedules from `crate::cron` in a time zone, concurrency
//! policies, history), the garbage collector (ownerReferences: background,
//! foreground, orphan), Endpoints and EndpointSlices for Services with selectors,
//! a `default` ServiceAccount per namespace, node lifecycle (Lease and Ready
//! heartbeats, Unknown conditions, not-ready/unreachable taints, NodeNotReady),
//! taint-based eviction (NoExecute taints vs tolerations and tolerationSeconds),
//! node IPAM (a pod CIDR per node from `--cluster-cidr`) and pod GC (terminated pods
//! over a threshold, pods of nodes that are gone), and the PersistentVolume binder with
//! pvc/pv-protection (`persistentvolume.rs`). ServiceLB (`servicelb.rs`, LoadBalancer
//! status from node addresses) is started by the server unless `--disable=servicelb`.
//! `workload.rs` holds what the
//! workload controllers share; `events.rs` the event recorder. [`Config`] carries the
//! tunables (`--cluster-cidr` and `--kube-controller-manager-arg`).

pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod endpoints;
pub mod endpointslice;
pub mod events;
pub mod garbage_collector;
pub mod job;
pub mod namespace;
pub mod node_ipam;
pub mod node_lifecycle;
pub mod persistentvolume;
pub mod pod_gc;
pub mod pods;
pub mod replicaset;
pub mod replicationcontroller;
pub mod root_ca;
pub mod serviceaccount;
pub mod servicelb;
pub mod statefulset;
pub mod taint_eviction;
pub mod workload;

use std::time::Duration;

use crate::cli::cidr::Cidr;

/// The controller-manager's tunables. [`Config::for_cluster_cidr`] gives
/// kube-controller-manager's defaults (k3s passes `--allocate-node-cidrs`).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `--cluster-cidr`: where node pod CIDRs come from.
    pub cluster_cidr: Cidr,
    /// `--allocate-node-cidrs`.
    pub allocate_node_cidrs: bool,
    /// `--node-cidr-mask-size`: prefix length of each node's pod CIDR.
    pub node_cidr_mask_size: u8,
    /// `--node-monitor-period`: how often node health is evaluated.
    pub node_monitor_period: Duration,
    /// `--node-monitor-grace-period`: silence after which a node is Unknown. Also the
    /// pod GC quarantine for pods of deleted nodes (kube hard-codes 40 s, this flag's
    /// default, there).
    pub node_monitor_grace_period: Duration,
    /// `--node-startup-grace-period`: silence allowed before a node's first status.
    pub node_startup_grace_period: Duration,
    /// `--node-eviction-rate`: nodes per second given NoExecute taints per zone.
    pub node_eviction_rate: f64,
    /// `--secondary-node-eviction-rate`: the same in an unhealthy large zone.
    pub secondary_node_eviction_rate: f64,
    /// `--large-cluster-size-threshold`.
    pub large_cluster_size_threshold: u32,
    /// `--unhealthy-zone-threshold`.
    pub unhealthy_zone_threshold: f64,
    /// `--terminated-pod-gc-threshold` (0 disables).
    pub terminated_pod_gc_threshold: u32,
}

impl Config {
    /// kube-controller-manager's defaults with `cluster_cidr`.
    pub fn for_cluster_cidr(cluster_cidr: Cidr) -> Self {
        Config {
            cluster_cidr,
            allocate_node_cidrs: true,
            node_cidr_mask_size: if cluster_cidr.is_ipv4() { 24 } else { 64 },
            node_monitor_period: Duration::from_secs(5),
            node_monitor_grace_period: Duration::from_secs(40),
            node_startup_grace_period: Duration::from_secs(60),
            node_eviction_rate: 0.1,
            secondary_node_eviction_rate: 0.01,
            large_cluster_size_threshold: 50,
            unhealthy_zone_threshold: 0.55,
            terminated_pod_gc_threshold: 12500,
        }
    }
}

/// Runs every controller until the process ends.
pub async fn run(client: kube::Client, config: Config) {
    use crate::panics::supervise;
    // Each controller is its own supervised task: a panic that escapes a reconcile guard
    // restarts that controller alone, after a backoff, and the others go on.
    let namespaces = supervise("namespace", {
        let client = client.clone();
        move || namespace::run(client.clone())
    });
    // One pod watch and cache for every controller that follows pods.
    let pods = pods::informer(&client);
    macro_rules! with_pods {
        ($name:literal, $run:path) => {{
            let (client, pods) = (client.clone(), pods.clone());
            supervise($name, move || $run(client.clone(), pods.clone()));
        }};
    }
    macro_rules! with_client {
        ($name:literal, $run:path) => {{
            let client = client.clone();
            supervise($name, move || $run(client.clone()));
        }};
    }
    macro_rules! with_config {
        ($name:literal, $run:path) => {{
            let (client, config) = (client.clone(), config.clone());
            supervise($name, move || $run(client.clone(), config.clone()));
        }};
    }
    with_pods!("replicaset", replicaset::run);
    with_pods!("replicationcontroller", replicationcontroller::run);
    with_client!("deployment", deployment::run);
    with_pods!("daemonset", daemonset::run);
    with_pods!("statefulset", statefulset::run);
    with_pods!("job", job::run);
    with_client!("cronjob", cronjob::run);
    with_pods!("endpoints", endpoints::run);
    with_pods!("endpointslice", endpointslice::run);
    with_client!("serviceaccount", serviceaccount::run);
    with_client!("garbage-collector", garbage_collector::run);
    with_client!("persistentvolume", persistentvolume::run);
    with_config!("node-lifecycle", node_lifecycle::run);
    with_pods!("taint-eviction", taint_eviction::run);
    {
        let (client, config, pods) = (client.clone(), config.clone(), pods.clone());
        supervise("pod-gc", move || {
            pod_gc::run(client.clone(), config.clone(), pods.clone())
        });
    }
    if config.allocate_node_cidrs {
        with_config!("node-ipam", node_ipam::run);
    }
    if let Err(e) = namespaces.await {
        tracing::error!(error = %e, "namespace controller stopped");
    }
}

/// Back-off between retries of a failed reconcile.
pub(crate) const RETRY: Duration = Duration::from_secs(2);
