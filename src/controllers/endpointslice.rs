//! EndpointSlice controller: for every Service with a non-empty `spec.selector`,
//! keeps `discovery.k8s.io/v1` EndpointSlices (addressType IPv4, generateName
//! `<service>-`, labels `kubernetes.io/service-name` and
//! `endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io`, a
//! controlling ownerReference to the Service). Pods are grouped by the ports their
//! containers resolve the service's targetPorts to, one slice per group (at most 100
//! endpoints each); a service with no endpoints keeps one empty placeholder slice.
//! Each endpoint carries `conditions` as kube computes them — serving = pod Ready
//! (or publishNotReadyAddresses), terminating = deletionTimestamp set, ready =
//! serving and not terminating (or publishNotReadyAddresses) — plus nodeName,
//! hostname and targetRef. Terminating pods stay listed. Slices of a deleted
//! Service are deleted. Shares its watchers and pod helpers with `endpoints.rs`;
//! reads and writes through the API only.

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

use super::endpoints::{
    derived_labels, find_port, managed_selector, pod_hostname, pod_reference, run_service_queue,
    selected_pods, should_be_in_endpoints,
};
use super::workload::{controller_ref, is_ready};

/// Label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Label naming a slice's manager.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller's value of `MANAGED_BY_LABEL`.
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// Endpoints per slice (kube's default `--max-endpoints-per-slice`).
const MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// Runs the EndpointSlice controller until the process ends.
pub async fn run(client: kube::Client, pods: super::pods::PodInformer) {
    run_service_queue(
        client,
        pods,
        "endpointslice-controller",
        |client, ns, name| async move { sync(&client, &ns, &name).await },
    )
    .await;
}

type PortKey = (Option<String>, Option<i32>, Option<String>, Option<String>);

fn port_key(p: &EndpointPort) -> PortKey {
    (
        p.name.clone(),
        p.port,
        p.protocol.clone(),
        p.app_protocol.clone(),
    )
}

/// The endpoint for `pod`, or None when it has no IPv4 address.
fn endpoint(svc: &Service, pod: &Pod) -> Option<Endpoint> {
    let ip = pod.status.as_ref()?.pod_ip.clone()?;
    if ip.is_empty() || ip.contains(':') {
        return None;
    }
    let publish = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let serving = publish || is_ready(pod);
    let ready = publish || (serving && !terminating);
    let service_name = svc.metadata.name.as_deref().unwrap_or_default();
    Some(Endpoint {
        addresses: vec![ip],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        hostname: pod_hostname(pod, service_name),
        node_name: pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
        target_ref: Some(pod_reference(pod)),
        ..Endpoint::default()
    })
}

/// The desired slices' contents: (ports, endpoints) per slice.
pub(crate) fn desired_slices(
    svc: &Service,
    pods: &[Pod],
) -> Vec<(Vec<EndpointPort>, Vec<Endpoint>)> {
    let service_ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    let mut groups: BTreeMap<Vec<PortKey>, (Vec<EndpointPort>, Vec<Endpoint>)> = BTreeMap::new();
    for pod in pods {
        if !should_be_in_endpoints(pod, true) {
            continue;
        }
        let Some(endpoint) = endpoint(svc, pod) else {
            continue;
        };
        let mut ports: Vec<EndpointPort> = service_ports
            .iter()
            .filter_map(|sp| {
                Some(EndpointPort {
                    name: Some(sp.name.clone().unwrap_or_default()),
                    port: Some(find_port(pod, sp)?),
                    protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    app_protocol: sp.app_protocol.clone(),
                })
            })
            .collect();
        ports.sort_by_key(port_key);
        ports.dedup_by_key(|p| port_key(p));
        let key = ports.iter().map(port_key).collect();
        groups
            .entry(key)
            .or_insert_with(|| (ports, Vec::new()))
            .1
            .push(endpoint);
    }
    let mut slices = Vec::new();
    for (ports, mut endpoints) in groups.into_values() {
        endpoints.sort_by_key(|e| {
            (
                e.addresses.first().cloned(),
                e.target_ref.as_ref().and_then(|r| r.uid.clone()),
            )
        });
        for chunk in endpoints.chunks(MAX_ENDPOINTS_PER_SLICE) {
            slices.push((ports.clone(), chunk.to_vec()));
        }
    }
    if slices.is_empty() {
        // kube keeps one placeholder slice so consumers see the service exists.
        slices.push((Vec::new(), Vec::new()));
    }
    slices
}

/// The slices this controller manages for service `name`.
async fn managed_slices(
    api: &Api<EndpointSlice>,
    name: &str,
) -> anyhow::Result<Vec<EndpointSlice>> {
    let selector = format!("{SERVICE_NAME_LABEL}={name},{MANAGED_BY_LABEL}={MANAGED_BY}");
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .context("listing endpointslices")?;
    Ok(list
        .items
        .into_iter()
        .filter(|s| {
            let labels = s.metadata.labels.as_ref();
            labels
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
                .map(String::as_str)
                == Some(name)
                && labels
                    .and_then(|l| l.get(MANAGED_BY_LABEL))
                    .map(String::as_str)
                    == Some(MANAGED_BY)
        })
        .collect())
}

async fn delete_slice(api: &Api<EndpointSlice>, slice: &EndpointSlice) -> anyhow::Result<()> {
    let Some(name) = slice.metadata.name.as_deref() else {
        return Ok(());
    };
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting endpointslice {name}")),
    }
}

/// One reconcile of the EndpointSlices of Service `namespace/name`.
async fn sync(client: &kube::Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let Some(svc) = services
        .get_opt(name)
        .await
        .with_context(|| format!("reading service {namespace}/{name}"))?
    else {
        for slice in managed_slices(&slices, name).await? {
            delete_slice(&slices, &slice).await?;
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
    let desired = desired_slices(&svc, &pods);
    let mut labels = derived_labels(&svc);
    labels.insert(SERVICE_NAME_LABEL.into(), name.into());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    let owner = controller_ref(&svc).context("service has no uid")?;

    let existing = managed_slices(&slices, name).await?;
    let mut used = vec![false; existing.len()];
    let ports_of = |s: &EndpointSlice| s.ports.clone().unwrap_or_default();
    let up_to_date = |s: &EndpointSlice, ports: &Vec<EndpointPort>, endpoints: &Vec<Endpoint>| {
        &ports_of(s) == ports
            && &s.endpoints == endpoints
            && s.address_type == "IPv4"
            && s.metadata.labels.as_ref() == Some(&labels)
            && s.metadata
                .owner_references
                .as_ref()
                .is_some_and(|refs| refs.contains(&owner))
    };
    // First keep slices that are already right, then rewrite or create the rest.
    let mut todo = Vec::new();
    for (ports, endpoints) in &desired {
        match (0..existing.len()).find(|&i| !used[i] && up_to_date(&existing[i], ports, endpoints))
        {
            Some(i) => used[i] = true,
            None => todo.push((ports, endpoints)),
        }
    }
    for (ports, endpoints) in todo {
        let reuse = (0..existing.len())
            .find(|&i| !used[i] && &ports_of(&existing[i]) == ports)
            .or_else(|| (0..existing.len()).find(|&i| !used[i]));
        let ports_field = (!ports.is_empty()).then(|| ports.clone());
        match reuse {
            Some(i) => {
                used[i] = true;
                let mut slice = existing[i].clone();
                let slice_name = slice.metadata.name.clone().unwrap_or_default();
                slice.address_type = "IPv4".into();
                slice.ports = ports_field;
                slice.endpoints = endpoints.clone();
                slice.metadata.labels = Some(labels.clone());
                let mut refs = slice.metadata.owner_references.take().unwrap_or_default();
                refs.retain(|r| r.controller != Some(true));
                refs.push(owner.clone());
                slice.metadata.owner_references = Some(refs);
                slices
                    .replace(&slice_name, &PostParams::default(), &slice)
                    .await
                    .with_context(|| format!("updating endpointslice {namespace}/{slice_name}"))?;
                tracing::debug!(namespace, service = name, slice = %slice_name, "updated endpointslice");
            }
            None => {
                let slice = EndpointSlice {
                    metadata: ObjectMeta {
                        generate_name: Some(format!("{name}-")),
                        namespace: Some(namespace.into()),
                        labels: Some(labels.clone()),
                        owner_references: Some(vec![owner.clone()]),
                        ..ObjectMeta::default()
                    },
                    address_type: "IPv4".into(),
                    endpoints: endpoints.clone(),
                    ports: ports_field,
                };
                let created = slices
                    .create(&PostParams::default(), &slice)
                    .await
                    .with_context(|| format!("creating endpointslice for {namespace}/{name}"))?;
                tracing::debug!(namespace, service = name, slice = ?created.metadata.name, "created endpointslice");
            }
        }
    }
    for (i, slice) in existing.iter().enumerate() {
        if !used[i] {
            delete_slice(&slices, slice).await?;
        }
    }
    Ok(())
}
