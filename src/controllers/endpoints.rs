//! Endpoints controller: for every Service with a non-empty `spec.selector`, keeps an
//! `Endpoints` object of the same name listing the pods the selector picks — ready
//! pods under `addresses`, the others under `notReadyAddresses` (all under
//! `addresses` with `publishNotReadyAddresses`) — with ports resolved from each
//! service port's `targetPort` (a number, or a container port name looked up per
//! pod), grouped into subsets by port set as kube's `RepackSubsets` does. Pods
//! without an IP, terminating pods (unless `publishNotReadyAddresses`) and finished
//! pods are left out. Services without a selector (the `kubernetes` Service among
//! them) keep whatever Endpoints their owner writes; a deleted Service's Endpoints
//! are deleted.
//!
//! Also holds what the EndpointSlice controller shares: the work queue fed by
//! Service and Pod watchers (`run_service_queue`), pod-to-service routing, and the
//! pod helpers (`should_be_in_endpoints`, `find_port`, `pod_reference`).
//! Reconciles read and write through the API only; the watchers' in-memory maps
//! only decide which services to reconcile.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
    ServicePort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;

use super::RETRY;
use super::workload::is_ready;

/// A namespaced object's (namespace, name).
pub(crate) type Key = (String, String);

/// Label kube puts on the Endpoints / EndpointSlices of a headless Service.
pub(crate) const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// Runs the Endpoints controller until the process ends.
pub async fn run(client: kube::Client, pods: super::pods::PodInformer) {
    run_service_queue(
        client,
        pods,
        "endpoints-controller",
        |client, ns, name| async move { sync(&client, &ns, &name).await },
    )
    .await;
}

/// A de-duplicating queue of service keys.
#[derive(Clone)]
struct Queue {
    tx: mpsc::UnboundedSender<Key>,
    pending: Arc<Mutex<HashSet<Key>>>,
}

impl Queue {
    fn push(&self, key: Key) {
        let fresh = self
            .pending
            .lock()
            .map(|mut p| p.insert(key.clone()))
            .unwrap_or(true);
        if fresh {
            let _ = self.tx.send(key);
        }
    }

    fn take(&self, key: &Key) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(key);
        }
    }
}

/// What the watchers know, to route a pod event to the services it concerns.
#[derive(Default)]
struct Routing {
    /// Service key → its selector (empty when it has none).
    selectors: HashMap<Key, BTreeMap<String, String>>,
}

impl Routing {
    /// Services in `namespace` whose non-empty selector matches any of `label_sets`.
    fn services_for(&self, namespace: &str, label_sets: &[&BTreeMap<String, String>]) -> Vec<Key> {
        self.selectors
            .iter()
            .filter(|((ns, _), selector)| {
                ns == namespace && label_sets.iter().any(|l| selects(selector, Some(l)))
            })
            .map(|(key, _)| key.clone())
            .collect()
    }
}

/// Watches Services, follows the shared pod informer, and calls
/// `sync(client, namespace, service)` for every service an event concerns (a service
/// event; a pod whose labels match the service's selector after the change or matched it
/// before, as the shared cache held it), one at a time, retrying failures after `RETRY`.
pub(crate) async fn run_service_queue<F, Fut>(
    client: kube::Client,
    pods: super::pods::PodInformer,
    controller: &'static str,
    sync: F,
) where
    F: Fn(kube::Client, String, String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Key>();
    let queue = Queue {
        tx,
        pending: Arc::default(),
    };
    let routing: Arc<Mutex<Routing>> = Arc::default();

    let services: Api<Service> = Api::all(client.clone());
    let (q, r) = (queue.clone(), routing.clone());
    tokio::spawn(async move {
        let mut events = watcher(services, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let (svc, deleted) = match event {
                Ok(watcher::Event::Apply(s)) | Ok(watcher::Event::InitApply(s)) => (s, false),
                Ok(watcher::Event::Delete(s)) => (s, true),
                Ok(_) => continue,
                Err(e) => {
                    tracing::debug!(controller, error = %e, "service watch interrupted; it resumes by itself");
                    continue;
                }
            };
            let (Some(ns), Some(name)) = (svc.metadata.namespace, svc.metadata.name) else {
                continue;
            };
            let key = (ns, name);
            if let Ok(mut r) = r.lock() {
                if deleted {
                    r.selectors.remove(&key);
                } else {
                    let selector = svc.spec.and_then(|s| s.selector).unwrap_or_default();
                    r.selectors.insert(key.clone(), selector);
                }
            }
            q.push(key);
        }
    });

    let (q, r) = (queue.clone(), routing);
    tokio::spawn(async move {
        let mut changes = pods.subscribe_changes();
        while let Some(change) = changes.next().await {
            let pod = &change.current;
            let Some(ns) = pod.metadata.namespace.as_deref() else {
                continue;
            };
            let labels = [
                change
                    .previous
                    .as_ref()
                    .and_then(|p| p.metadata.labels.as_ref()),
                pod.metadata.labels.as_ref(),
            ];
            let label_sets: Vec<&BTreeMap<String, String>> = labels.into_iter().flatten().collect();
            let targets = match r.lock() {
                Ok(r) => r.services_for(ns, &label_sets),
                Err(_) => Vec::new(),
            };
            for target in targets {
                q.push(target);
            }
        }
    });

    while let Some(key) = rx.recv().await {
        queue.take(&key);
        let (ns, name) = key.clone();
        if let Err(e) = sync(client.clone(), ns.clone(), name.clone()).await {
            tracing::warn!(controller, namespace = %ns, service = %name, error = %format!("{e:#}"), "service sync failed; retrying");
            let q = queue.clone();
            tokio::spawn(async move {
                tokio::time::sleep(RETRY).await;
                q.push(key);
            });
        }
    }
}

/// Whether a Service selector (matchLabels semantics) picks `labels`. An empty
/// selector picks nothing.
pub(crate) fn selects(
    selector: &BTreeMap<String, String>,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    !selector.is_empty()
        && selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// kube's `ShouldPodBeInEndpoints`: the pod has an IP, is not terminating (unless
/// `include_terminating`), and has not finished for good.
pub(crate) fn should_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    let status = pod.status.as_ref();
    if status
        .and_then(|s| s.pod_ip.as_deref())
        .is_none_or(str::is_empty)
    {
        return false;
    }
    if !include_terminating && pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let phase = status.and_then(|s| s.phase.as_deref());
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => !matches!(phase, Some("Failed") | Some("Succeeded")),
        Some("OnFailure") => phase != Some("Succeeded"),
        _ => true,
    }
}

/// The pod port a service port targets (kube's `FindPort`): a number as is, a name
/// looked up among the pod's container ports with the same protocol; an absent
/// targetPort means the service port.
pub(crate) fn find_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            pod.spec
                .as_ref()?
                .containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                })
                .map(|p| p.container_port)
        }
    }
}

/// The `targetRef` of an address for `pod`.
pub(crate) fn pod_reference(pod: &Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

/// The pod's DNS hostname under the service, when it asks for one (`hostname` set
/// and `subdomain` naming the service).
pub(crate) fn pod_hostname(pod: &Pod, service: &str) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let hostname = spec.hostname.as_deref().filter(|h| !h.is_empty())?;
    (spec.subdomain.as_deref() == Some(service)).then(|| hostname.to_string())
}

/// Whether the Service is headless (`clusterIP: None`).
pub(crate) fn is_headless(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

/// The pods in `namespace` the Service's selector picks (read through the API).
pub(crate) async fn selected_pods(
    client: &kube::Client,
    namespace: &str,
    selector: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing pods in {namespace}"))?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| selects(selector, p.metadata.labels.as_ref()))
        .collect())
}

/// The selector of a Service whose endpoints are managed, or None when it is left
/// alone (no selector, ExternalName).
pub(crate) fn managed_selector(svc: &Service) -> Option<BTreeMap<String, String>> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    spec.selector.clone().filter(|s| !s.is_empty())
}

type PortKey = (Option<String>, i32, Option<String>, Option<String>);

fn port_key(p: &EndpointPort) -> PortKey {
    (
        p.name.clone(),
        p.port,
        p.protocol.clone(),
        p.app_protocol.clone(),
    )
}

/// The subsets for `svc` over `pods` (already filtered by selector).
pub(crate) fn build_subsets(svc: &Service, pods: &[Pod]) -> Vec<EndpointSubset> {
    let service_name = svc.metadata.name.clone().unwrap_or_default();
    let spec = svc.spec.clone().unwrap_or_default();
    let tolerate_unready = spec.publish_not_ready_addresses.unwrap_or(false);
    let service_ports = spec.ports.unwrap_or_default();
    // Port set → (ready addresses, not-ready addresses).
    type Group = (Vec<EndpointAddress>, Vec<EndpointAddress>);
    let mut groups: BTreeMap<Vec<PortKey>, (Vec<EndpointPort>, Group)> = BTreeMap::new();
    for pod in pods {
        if !should_be_in_endpoints(pod, tolerate_unready) {
            continue;
        }
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            continue;
        };
        let address = EndpointAddress {
            ip,
            hostname: pod_hostname(pod, &service_name),
            node_name: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            target_ref: Some(pod_reference(pod)),
        };
        let mut ports: Vec<EndpointPort> = Vec::new();
        if service_ports.is_empty() {
            if !is_headless(svc) {
                continue;
            }
        } else {
            for sp in &service_ports {
                let Some(port) = find_port(pod, sp) else {
                    tracing::debug!(pod = ?pod.metadata.name, service = %service_name, port = ?sp.name, "pod lacks the service's target port");
                    continue;
                };
                ports.push(EndpointPort {
                    name: sp.name.clone().filter(|n| !n.is_empty()),
                    port,
                    protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    app_protocol: sp.app_protocol.clone(),
                });
            }
            if ports.is_empty() {
                continue;
            }
        }
        ports.sort_by_key(port_key);
        ports.dedup_by_key(|p| port_key(p));
        let key: Vec<PortKey> = ports.iter().map(port_key).collect();
        let entry = groups
            .entry(key)
            .or_insert_with(|| (ports, Group::default()));
        if tolerate_unready || is_ready(pod) {
            entry.1.0.push(address);
        } else {
            entry.1.1.push(address);
        }
    }
    let order = |a: &EndpointAddress| {
        (
            a.ip.clone(),
            a.target_ref.as_ref().and_then(|r| r.uid.clone()),
        )
    };
    groups
        .into_values()
        .map(|(ports, (mut ready, mut not_ready))| {
            ready.sort_by_key(order);
            not_ready.sort_by_key(order);
            EndpointSubset {
                addresses: (!ready.is_empty()).then_some(ready),
                not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect()
}

/// The labels of the Endpoints (or slices) of `svc`: the service's, plus the
/// headless marker.
pub(crate) fn derived_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    if is_headless(svc) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    } else {
        labels.remove(HEADLESS_LABEL);
    }
    labels
}

/// One reconcile of the Endpoints of Service `namespace/name`.
async fn sync(client: &kube::Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), namespace);
    let Some(svc) = services
        .get_opt(name)
        .await
        .with_context(|| format!("reading service {namespace}/{name}"))?
    else {
        if endpoints.get_opt(name).await?.is_some() {
            match endpoints.delete(name, &DeleteParams::default()).await {
                Ok(_) => tracing::info!(
                    namespace,
                    service = name,
                    "deleted endpoints of a deleted service"
                ),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e).context("deleting endpoints"),
            }
        }
        return Ok(());
    };
    if svc.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let Some(selector) = managed_selector(&svc) else {
        return Ok(());
    };
    let pods = selected_pods(client, namespace, &selector).await?;
    let subsets = build_subsets(&svc, &pods);
    let labels = derived_labels(&svc);
    match endpoints.get_opt(name).await? {
        None => {
            let object = Endpoints {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some(namespace.into()),
                    labels: (!labels.is_empty()).then_some(labels),
                    ..ObjectMeta::default()
                },
                subsets: Some(subsets),
            };
            match endpoints.create(&PostParams::default(), &object).await {
                Ok(_) => tracing::debug!(namespace, service = name, "created endpoints"),
                // Someone (or a retry) created it meanwhile: the next event reconciles.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    anyhow::bail!("endpoints {namespace}/{name} appeared meanwhile")
                }
                Err(e) => return Err(e).context("creating endpoints"),
            }
        }
        Some(mut existing) => {
            let current_labels = existing.metadata.labels.clone().unwrap_or_default();
            if existing.subsets.clone().unwrap_or_default() == subsets && current_labels == labels {
                return Ok(());
            }
            existing.subsets = Some(subsets);
            existing.metadata.labels = (!labels.is_empty()).then_some(labels);
            endpoints
                .replace(name, &PostParams::default(), &existing)
                .await
                .with_context(|| format!("updating endpoints {namespace}/{name}"))?;
            tracing::debug!(namespace, service = name, "updated endpoints");
        }
    }
    Ok(())
}
