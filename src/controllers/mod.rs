//! The controller-manager: reconcile loops that turn desired state into actual
//! state. Every controller is an API client (kube-rs) with the
//! `system:kube-controller-manager` identity; none may touch `store`.
//!
//! Running today: the namespace controller (empties a deleted namespace, then
//! releases it). The workload controllers follow in their own files.

pub mod events;
pub mod namespace;

use std::time::Duration;

/// Runs every controller until the process ends.
pub async fn run(client: kube::Client) {
    let namespaces = tokio::spawn(namespace::run(client.clone()));
    if let Err(e) = namespaces.await {
        tracing::error!(error = %e, "namespace controller stopped");
    }
}

/// Back-off between retries of a failed reconcile.
pub(crate) const RETRY: Duration = Duration::from_secs(2);
