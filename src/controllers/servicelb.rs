//! ServiceLB (k3s's klipper-lb behaviour, without a DaemonSet of pods): sets
//! `status.loadBalancer.ingress` of every `type: LoadBalancer` Service without a
//! `loadBalancerClass` to the addresses of the nodes that serve it. kube-proxy on each node
//! (`crate::proxy`) then answers `<node address>:<port>` for those Services, as the svclb pods'
//! host ports do under k3s.
//!
//! Which nodes: every Ready node, unless some node carries the label
//! `svccontroller.k3s.cattle.io/enablelb`, in which case only nodes labelled `enablelb=true`
//! (k3s's DaemonSet node selector). With `externalTrafficPolicy: Local` only nodes holding a
//! ready endpoint of the Service. Which addresses: the ExternalIPs of those nodes when any of
//! them has one, else their InternalIPs; sorted, in the order of the Service's `ipFamilies`.
//! Events as k3s's: `UpdatedLoadBalancer` (Normal) and `UnAvailableLoadBalancer` (Warning).
//! A Service that stops being a LoadBalancer has its ingress cleared (`DeletedLoadBalancer`).
//! k3s's `lbpool` node pools and the priority-class annotation are not implemented (they
//! only shape svclb pods, which k3rs does not run).
//!
//! Turned off by `--disable=servicelb`. An API client only (the controller-manager
//! identity); it may not touch `store`.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::sync::Notify;

use super::events::{EventType, Recorder, reference};

/// The node label that restricts ServiceLB to the nodes labelled `true` once any node has it.
pub const ENABLE_LB_LABEL: &str = "svccontroller.k3s.cattle.io/enablelb";
/// The component name on the Events (the cloud-provider service controller's, as in k3s).
pub const COMPONENT: &str = "service-lb-controller";
/// Minimum time between two passes, so bursts of node/slice updates are coalesced.
const MIN_INTERVAL: Duration = Duration::from_millis(200);

/// What a pass decides for one Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub namespace: String,
    pub name: String,
    /// The current `status.loadBalancer.ingress` addresses (ip, else hostname).
    pub current: Vec<String>,
    /// What they should be.
    pub desired: Vec<String>,
    /// The Service is (still) a ServiceLB LoadBalancer; `false` means clear a stale status.
    pub load_balancer: bool,
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The nodes ServiceLB may use: Ready, not being deleted, and labelled `enablelb=true`
/// when any node carries the label.
pub fn eligible_nodes(nodes: &[Node]) -> Vec<&Node> {
    let restricted = nodes.iter().any(|n| {
        n.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(ENABLE_LB_LABEL))
    });
    nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none() && is_ready(n))
        .filter(|n| {
            !restricted
                || n.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(ENABLE_LB_LABEL))
                    .is_some_and(|v| v == "true")
        })
        .collect()
}

/// Whether ServiceLB owns `svc`'s load balancer: type LoadBalancer, no loadBalancerClass.
pub fn wants_load_balancer(svc: &Service) -> bool {
    svc.spec.as_ref().is_some_and(|s| {
        s.type_.as_deref() == Some("LoadBalancer")
            && s.load_balancer_class
                .as_deref()
                .unwrap_or_default()
                .is_empty()
    })
}

fn current_ingress(svc: &Service) -> Vec<String> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|ingress| {
            ingress
                .iter()
                .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Nodes holding a ready endpoint of `svc` (for `externalTrafficPolicy: Local`).
fn nodes_with_ready_endpoints<'a>(svc: &Service, slices: &'a [EndpointSlice]) -> BTreeSet<&'a str> {
    let (namespace, name) = (
        svc.metadata.namespace.as_deref(),
        svc.metadata.name.as_deref(),
    );
    slices
        .iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == namespace
                && s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(crate::proxy::model::SERVICE_NAME_LABEL))
                    .map(String::as_str)
                    == name
        })
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| {
            e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true)
                && e.target_ref.as_ref().and_then(|t| t.kind.as_deref()) == Some("Pod")
        })
        .filter_map(|e| e.node_name.as_deref())
        .collect()
}

/// The ingress addresses `svc` should have, given the eligible `nodes` and the slices.
pub fn desired_ingress(svc: &Service, nodes: &[&Node], slices: &[EndpointSlice]) -> Vec<String> {
    let spec = svc.spec.clone().unwrap_or_default();
    let local_only = spec.external_traffic_policy.as_deref() == Some("Local");
    let ready_nodes = local_only.then(|| nodes_with_ready_endpoints(svc, slices));
    let mut external: BTreeSet<IpAddr> = BTreeSet::new();
    let mut internal: BTreeSet<IpAddr> = BTreeSet::new();
    for node in nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if ready_nodes.as_ref().is_some_and(|r| !r.contains(name)) {
            continue;
        }
        let addresses = node.status.as_ref().and_then(|s| s.addresses.as_ref());
        for address in addresses.into_iter().flatten() {
            let Ok(ip) = address.address.parse::<IpAddr>() else {
                continue;
            };
            match address.type_.as_str() {
                "ExternalIP" => {
                    external.insert(ip);
                }
                "InternalIP" => {
                    internal.insert(ip);
                }
                _ => {}
            }
        }
    }
    let chosen = if external.is_empty() {
        internal
    } else {
        external
    };
    // The Service's families in its order; IPv4 when unset (the API server defaults it).
    let families = spec
        .ip_families
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| vec!["IPv4".to_string()]);
    let mut out = Vec::new();
    for family in families {
        let v4 = family == "IPv4";
        // BTreeSet<IpAddr> orders numerically, which is what a reader expects.
        out.extend(
            chosen
                .iter()
                .filter(|ip| ip.is_ipv4() == v4)
                .map(IpAddr::to_string),
        );
    }
    out
}

/// One pass: what every Service's status should become. Only Services whose status must
/// change are returned.
pub fn decide(services: &[Service], nodes: &[Node], slices: &[EndpointSlice]) -> Vec<Decision> {
    let eligible = eligible_nodes(nodes);
    let mut out = Vec::new();
    for svc in services {
        let (Some(namespace), Some(name)) =
            (svc.metadata.namespace.clone(), svc.metadata.name.clone())
        else {
            continue;
        };
        let current = current_ingress(svc);
        let load_balancer = wants_load_balancer(svc);
        let desired = if load_balancer {
            desired_ingress(svc, &eligible, slices)
        } else if spec_type(svc) != Some("LoadBalancer") && !current.is_empty() {
            // No longer a LoadBalancer: the service controller clears what it published.
            Vec::new()
        } else {
            // Another implementation's (loadBalancerClass) or nothing to do.
            continue;
        };
        if desired != current {
            out.push(Decision {
                namespace,
                name,
                current,
                desired,
                load_balancer,
            });
        }
    }
    out
}

fn spec_type(svc: &Service) -> Option<&str> {
    svc.spec.as_ref().and_then(|s| s.type_.as_deref())
}

/// Go's `%v` of a string slice, as k3s's event messages print it: `[a b]`.
fn go_list(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

async fn apply(
    client: &kube::Client,
    recorder: &Recorder,
    decision: &Decision,
) -> kube::Result<()> {
    let api: Api<Service> = Api::namespaced(client.clone(), &decision.namespace);
    let ingress: Vec<serde_json::Value> = decision
        .desired
        .iter()
        .map(|ip| json!({"ip": ip, "ipMode": "VIP"}))
        .collect();
    let patch = json!({"status": {"loadBalancer": {"ingress": ingress}}});
    let svc = api
        .patch_status(
            &decision.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    let object = reference(&svc);
    if !decision.load_balancer {
        recorder
            .record(
                &object,
                EventType::Normal,
                "DeletedLoadBalancer",
                "Deleted load balancer",
            )
            .await;
    } else if decision.desired.is_empty() {
        recorder
            .record(
                &object,
                EventType::Warning,
                "UnAvailableLoadBalancer",
                "There are no available nodes for LoadBalancer",
            )
            .await;
    } else {
        let message = format!(
            "Updated LoadBalancer with new IPs: {} -> {}",
            go_list(&decision.current),
            go_list(&decision.desired)
        );
        recorder
            .record(&object, EventType::Normal, "UpdatedLoadBalancer", &message)
            .await;
    }
    tracing::info!(
        service = %format!("{}/{}", decision.namespace, decision.name),
        ingress = ?decision.desired,
        "updated the LoadBalancer status"
    );
    Ok(())
}

/// Runs ServiceLB until the process ends.
pub async fn run(client: kube::Client) {
    let changed = Arc::new(Notify::new());
    let services = crate::informer::reflect(
        Api::<Service>::all(client.clone()),
        changed.clone(),
        COMPONENT,
    );
    let nodes =
        crate::informer::reflect(Api::<Node>::all(client.clone()), changed.clone(), COMPONENT);
    let slices = crate::informer::reflect(
        Api::<EndpointSlice>::all(client.clone()),
        changed.clone(),
        COMPONENT,
    );
    for (what, ready) in [
        ("Services", services.wait_until_ready().await),
        ("Nodes", nodes.wait_until_ready().await),
        ("EndpointSlices", slices.wait_until_ready().await),
    ] {
        if let Err(e) = ready {
            tracing::error!(error = %e, what, "ServiceLB cannot list; stopping");
            return;
        }
    }
    let recorder = Recorder::new(client.clone(), COMPONENT);
    tracing::info!("ServiceLB controller started");
    // Failed patches are retried on the next pass; remember when one is due.
    let mut retry_due = false;
    loop {
        if retry_due {
            tokio::select! {
                () = changed.notified() => {}
                () = tokio::time::sleep(super::RETRY) => {}
            }
        } else {
            changed.notified().await;
        }
        tokio::time::sleep(MIN_INTERVAL).await;
        let services: Vec<Service> = services.state().iter().map(|s| (**s).clone()).collect();
        let nodes: Vec<Node> = nodes.state().iter().map(|n| (**n).clone()).collect();
        let slices: Vec<EndpointSlice> = slices.state().iter().map(|s| (**s).clone()).collect();
        retry_due = false;
        for decision in decide(&services, &nodes, &slices) {
            if let Err(e) = apply(&client, &recorder, &decision).await {
                // A conflict or a vanished Service is settled by the next watch event.
                tracing::warn!(
                    service = %format!("{}/{}", decision.namespace, decision.name),
                    error = %e,
                    "cannot update the LoadBalancer status; retrying"
                );
                retry_due = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, ready: bool, labels: serde_json::Value, addrs: &[(&str, &str)]) -> Node {
        let addresses: Vec<_> = addrs
            .iter()
            .map(|(t, a)| json!({"type": t, "address": a}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "status": {
                "addresses": addresses,
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
            }
        }))
        .expect("node")
    }

    fn lb(name: &str, extra: serde_json::Value) -> Service {
        let mut spec = json!({"type": "LoadBalancer", "clusterIP": "10.43.0.20",
                              "ports": [{"port": 80}]});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                spec.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": name},
            "spec": spec
        }))
        .expect("service")
    }

    #[test]
    fn ready_nodes_internal_ips_unless_some_node_has_an_external_ip() {
        let nodes = vec![
            node("a", true, json!({}), &[("InternalIP", "10.0.0.2")]),
            node("b", true, json!({}), &[("InternalIP", "10.0.0.10")]),
            node("c", false, json!({}), &[("InternalIP", "10.0.0.3")]),
        ];
        let decisions = decide(&[lb("web", json!({}))], &nodes, &[]);
        assert_eq!(decisions.len(), 1);
        // Numeric order, the not-Ready node left out.
        assert_eq!(decisions[0].desired, ["10.0.0.2", "10.0.0.10"]);
        assert!(decisions[0].load_balancer);

        let nodes = vec![
            node("a", true, json!({}), &[("InternalIP", "10.0.0.2")]),
            node(
                "b",
                true,
                json!({}),
                &[("InternalIP", "10.0.0.10"), ("ExternalIP", "203.0.113.7")],
            ),
        ];
        let decisions = decide(&[lb("web", json!({}))], &nodes, &[]);
        assert_eq!(decisions[0].desired, ["203.0.113.7"]);
    }

    #[test]
    fn the_enablelb_label_restricts_the_nodes_once_any_node_carries_it() {
        let nodes = vec![
            node(
                "a",
                true,
                json!({ENABLE_LB_LABEL: "true"}),
                &[("InternalIP", "10.0.0.2")],
            ),
            node(
                "b",
                true,
                json!({ENABLE_LB_LABEL: "false"}),
                &[("InternalIP", "10.0.0.3")],
            ),
            node("c", true, json!({}), &[("InternalIP", "10.0.0.4")]),
        ];
        let decisions = decide(&[lb("web", json!({}))], &nodes, &[]);
        assert_eq!(decisions[0].desired, ["10.0.0.2"]);
    }

    #[test]
    fn load_balancer_class_and_other_types_are_left_alone_and_stale_status_cleared() {
        let nodes = vec![node("a", true, json!({}), &[("InternalIP", "10.0.0.2")])];
        let classed = lb("other", json!({"loadBalancerClass": "example.com/lb"}));
        let cluster_ip: Service = serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": "plain"},
            "spec": {"type": "ClusterIP", "ports": [{"port": 80}]}
        }))
        .expect("service");
        let mut was_lb = cluster_ip.clone();
        was_lb.metadata.name = Some("was-lb".into());
        was_lb.status =
            serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.2"}]}}))
                .expect("status");
        let decisions = decide(&[classed, cluster_ip, was_lb], &nodes, &[]);
        assert_eq!(decisions.len(), 1);
        assert_eq!(decisions[0].name, "was-lb");
        assert!(decisions[0].desired.is_empty() && !decisions[0].load_balancer);
    }

    #[test]
    fn up_to_date_status_needs_no_write_and_local_policy_follows_ready_endpoints() {
        let nodes = vec![
            node("a", true, json!({}), &[("InternalIP", "10.0.0.2")]),
            node("b", true, json!({}), &[("InternalIP", "10.0.0.3")]),
        ];
        let mut done = lb("web", json!({}));
        done.status = serde_json::from_value(json!({"loadBalancer": {"ingress": [
            {"ip": "10.0.0.2"}, {"ip": "10.0.0.3"}]}}))
        .expect("status");
        assert!(decide(&[done], &nodes, &[]).is_empty());

        let local = lb("local", json!({"externalTrafficPolicy": "Local"}));
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": "local-x",
                         "labels": {"kubernetes.io/service-name": "local"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.42.1.5"], "conditions": {"ready": true}, "nodeName": "b",
                 "targetRef": {"kind": "Pod", "name": "p"}},
                {"addresses": ["10.42.0.5"], "conditions": {"ready": false}, "nodeName": "a",
                 "targetRef": {"kind": "Pod", "name": "q"}}
            ]
        }))
        .expect("slice");
        let decisions = decide(std::slice::from_ref(&local), &nodes, &[slice]);
        assert_eq!(decisions[0].desired, ["10.0.0.3"]);
        // No ready endpoint anywhere: no node may take the traffic (and an empty status
        // needs no write).
        let eligible = eligible_nodes(&nodes);
        assert!(desired_ingress(&local, &eligible, &[]).is_empty());
        assert!(decide(&[local], &nodes, &[]).is_empty());
    }

    #[test]
    fn addresses_follow_the_service_ip_families() {
        let nodes = vec![node(
            "a",
            true,
            json!({}),
            &[("InternalIP", "10.0.0.2"), ("InternalIP", "fd00::2")],
        )];
        let dual = lb("d", json!({"ipFamilies": ["IPv6", "IPv4"]}));
        assert_eq!(
            decide(&[dual], &nodes, &[])[0].desired,
            ["fd00::2", "10.0.0.2"]
        );
        let v4 = lb("v4", json!({}));
        assert_eq!(decide(&[v4], &nodes, &[])[0].desired, ["10.0.0.2"]);
        assert_eq!(go_list(&["a".into(), "b".into()]), "[a b]");
    }
}
