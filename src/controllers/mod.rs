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
//! and a `default` ServiceAccount per namespace. `workload.rs` holds what the
//! workload controllers share; `events.rs` the event recorder.

pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod endpoints;
pub mod endpointslice;
pub mod events;
pub mod garbage_collector;
pub mod job;
pub mod namespace;
pub mod replicaset;
pub mod replicationcontroller;
pub mod serviceaccount;
pub mod statefulset;
pub mod workload;

use std::time::Duration;

/// Runs every controller until the process ends.
pub async fn run(client: kube::Client) {
    let namespaces = tokio::spawn(namespace::run(client.clone()));
    tokio::spawn(replicaset::run(client.clone()));
    tokio::spawn(replicationcontroller::run(client.clone()));
    tokio::spawn(deployment::run(client.clone()));
    tokio::spawn(daemonset::run(client.clone()));
    tokio::spawn(statefulset::run(client.clone()));
    tokio::spawn(job::run(client.clone()));
    tokio::spawn(cronjob::run(client.clone()));
    tokio::spawn(endpoints::run(client.clone()));
    tokio::spawn(endpointslice::run(client.clone()));
    tokio::spawn(serviceaccount::run(client.clone()));
    tokio::spawn(garbage_collector::run(client.clone()));
    if let Err(e) = namespaces.await {
        tracing::error!(error = %e, "namespace controller stopped");
    }
}

/// Back-off between retries of a failed reconcile.
pub(crate) const RETRY: Duration = Duration::from_secs(2);
