//! The `kube-system/kube-dns` Service and its EndpointSlice, kept by the server (as the
//! controller manager, through the API only).
//!
//! Placement: every agent runs the DNS server on its node address, port 53 (UDP and TCP).
//! The Service is selector-less at `--cluster-dns` (10.43.0.10) with k3s's CoreDNS ports
//! (`dns` 53/UDP, `dns-tcp` 53/TCP, `metrics` 9153/TCP); the slice `kube-dns-k3rs` lists
//! every Node's InternalIP (ready while the Node is Ready), so kube-proxy DNATs
//! 10.43.0.10:53 to the nodes' DNS servers like any other Service. Derived from Node
//! objects, it follows nodes as they join and leave with nothing to clean up per node.

use std::net::IpAddr;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

/// The slice's name and manager label value.
pub const SLICE_NAME: &str = "kube-dns-k3rs";
const MANAGED_BY: &str = "k3rs-dns";
const NAMESPACE: &str = "kube-system";

/// The kube-dns Service as k3s's CoreDNS manifest has it.
pub fn kube_dns_service(cluster_dns: IpAddr) -> Service {
    let family = if cluster_dns.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    };
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kube-dns",
            "namespace": NAMESPACE,
            "labels": {"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true",
                       "kubernetes.io/name": "CoreDNS"},
            "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}
        },
        "spec": {
            "clusterIP": cluster_dns.to_string(),
            "clusterIPs": [cluster_dns.to_string()],
            "ipFamilies": [family],
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}
            ]
        }
    }))
    .unwrap_or_default()
}

/// The slice for `nodes`: each node's InternalIP of the Service's family.
pub fn kube_dns_slice(cluster_dns: IpAddr, nodes: &[Node]) -> EndpointSlice {
    let mut endpoints = Vec::new();
    for node in nodes {
        let Some(name) = node.metadata.name.as_ref() else {
            continue;
        };
        let status = node.status.clone().unwrap_or_default();
        let ip = status
            .addresses
            .iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP")
            .filter_map(|a| a.address.parse::<IpAddr>().ok())
            .find(|ip| ip.is_ipv4() == cluster_dns.is_ipv4());
        let Some(ip) = ip else { continue };
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        endpoints.push(json!({
            "addresses": [ip.to_string()],
            "conditions": {"ready": ready, "serving": ready, "terminating": false},
            "nodeName": name
        }));
    }
    endpoints.sort_by_key(|e| e["nodeName"].as_str().unwrap_or_default().to_string());
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": SLICE_NAME,
            "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": "kube-dns",
                       "endpointslice.kubernetes.io/managed-by": MANAGED_BY}
        },
        "addressType": if cluster_dns.is_ipv4() { "IPv4" } else { "IPv6" },
        "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP"}
        ],
        "endpoints": endpoints
    }))
    .unwrap_or_default()
}

/// Creates the Service if it is missing, then keeps the slice in step with the Nodes until
/// the process ends.
pub async fn run(client: kube::Client, cluster_dns: IpAddr) {
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    loop {
        match services.get_opt("kube-dns").await {
            Ok(Some(_)) => break,
            Ok(None) => match services
                .create(&PostParams::default(), &kube_dns_service(cluster_dns))
                .await
            {
                Ok(_) => {
                    tracing::info!(%cluster_dns, "created the kube-dns Service");
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot create the kube-dns Service; retrying")
                }
            },
            Err(e) => tracing::debug!(error = %e, "cannot read the kube-dns Service; retrying"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let (store, writer) = reflector::store();
    let stream = watcher(Api::<Node>::all(client), watcher::Config::default())
        .default_backoff()
        // Every event, InitDone included, so an empty cluster still gets its slice.
        .reflect(writer);
    let mut stream = std::pin::pin!(stream);
    let mut last: Option<serde_json::Value> = None;
    while stream.next().await.is_some() {
        // Coalesce a burst of node updates.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let nodes: Vec<Node> = store.state().iter().map(|n| (**n).clone()).collect();
        let mut desired = kube_dns_slice(cluster_dns, &nodes);
        let wanted = serde_json::to_value((&desired.endpoints, &desired.ports)).ok();
        if wanted == last {
            continue;
        }
        let result = match slices.get_opt(SLICE_NAME).await {
            Ok(Some(current)) => {
                desired.metadata.resource_version = current.metadata.resource_version;
                slices
                    .replace(SLICE_NAME, &PostParams::default(), &desired)
                    .await
            }
            Ok(None) => slices.create(&PostParams::default(), &desired).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(_) => last = wanted,
            Err(e) => tracing::warn!(error = %e, "cannot write the kube-dns EndpointSlice"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_lists_ready_nodes_internal_ips() {
        let nodes: Vec<Node> = serde_json::from_value(json!([
            {"metadata": {"name": "b"}, "status": {
                "addresses": [{"type": "Hostname", "address": "b"},
                              {"type": "InternalIP", "address": "192.168.1.2"}],
                "conditions": [{"type": "Ready", "status": "False"}]}},
            {"metadata": {"name": "a"}, "status": {
                "addresses": [{"type": "InternalIP", "address": "192.168.1.1"}],
                "conditions": [{"type": "Ready", "status": "True"}]}},
            {"metadata": {"name": "c"}, "status": {}}
        ]))
        .expect("nodes");
        let slice = kube_dns_slice("10.43.0.10".parse().expect("ip"), &nodes);
        let endpoints: Vec<(String, bool)> = slice
            .endpoints
            .iter()
            .map(|e| {
                (
                    e.addresses[0].clone(),
                    e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false),
                )
            })
            .collect();
        assert_eq!(
            endpoints,
            [
                ("192.168.1.1".to_string(), true),
                ("192.168.1.2".to_string(), false)
            ]
        );
        let svc = kube_dns_service("10.43.0.10".parse().expect("ip"));
        let ports = svc.spec.expect("spec").ports.expect("ports");
        let names: Vec<_> = ports.iter().filter_map(|p| p.name.clone()).collect();
        assert_eq!(names, ["dns", "dns-tcp", "metrics"]);
    }
}
