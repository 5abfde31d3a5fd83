//! The kubelet's Node: registration (labels, taints, addresses), the status it reports every
//! `node-status-update-frequency` (capacity, allocatable, conditions, nodeInfo, images), and the
//! Lease in `kube-node-lease` renewed every 10 s, which is what the node lifecycle controller
//! watches for liveness.
//!
//! Writes only `nodes/<me>`, `nodes/<me>/status`, `leases/<me>` and node events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeSpec, NodeStatus, NodeSystemInfo, ObjectReference,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::Mutex;

use super::Kubelet;
use super::host::{self, HostFacts};
use crate::controllers::events::EventType;

/// How long the lease is valid; the controller marks the node Unknown after it expires.
const LEASE_DURATION_SECONDS: i32 = 40;
const LEASE_RENEW: Duration = Duration::from_secs(10);
/// The kubelet reports at most this many images, largest first.
const MAX_IMAGES: usize = 50;
/// Until the Node first reports Ready, the runtime's readiness is checked this often and the
/// status written as soon as it would turn Ready (the kubelet's `fastStatusUpdateOnce`): the
/// pod network usually comes up only after registration, once the node has its podCIDR, and
/// waiting for the next periodic update would leave the Node NotReady for up to 10 s.
const FAST_STATUS_POLL: Duration = Duration::from_millis(100);
/// How long the fast readiness check keeps polling before leaving it to the periodic updates.
const FAST_STATUS_FOR: Duration = Duration::from_secs(120);

/// The runtime's health as the Ready condition needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeHealth {
    /// `None` when ready; otherwise the kubelet's not-ready message.
    pub not_ready: Option<String>,
}

/// Builds the Ready condition's (status, reason, message) from the CRI Status answer, worded as
/// the kubelet words it.
pub fn runtime_health(status: Result<&k8s_cri::v1::RuntimeStatus, String>) -> RuntimeHealth {
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            return RuntimeHealth {
                not_ready: Some(format!("container runtime is down: {e}")),
            };
        }
    };
    let find = |kind: &str| status.conditions.iter().find(|c| c.r#type == kind);
    let mut problems = Vec::new();
    match find("RuntimeReady") {
        Some(c) if c.status => {}
        Some(c) => problems.push(format!(
            "container runtime not ready: RuntimeReady=false reason:{} message:{}",
            c.reason, c.message
        )),
        None => problems.push("container runtime not ready: RuntimeReady missing".to_string()),
    }
    match find("NetworkReady") {
        Some(c) if c.status => {}
        Some(c) => problems.push(format!(
            "container runtime network not ready: NetworkReady=false reason:{} message:{}",
            c.reason, c.message
        )),
        None => {
            problems.push("container runtime network not ready: NetworkReady missing".to_string())
        }
    }
    RuntimeHealth {
        not_ready: (!problems.is_empty()).then(|| problems.join(", ")),
    }
}

/// Memory and disk figures for the pressure conditions.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

fn condition(kind: &str, status: bool, reason: &str, message: &str) -> NodeCondition {
    NodeCondition {
        type_: kind.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: None,
        last_transition_time: None,
    }
}

/// The four conditions, reasons and messages as the kubelet reports them.
pub fn conditions(health: &RuntimeHealth, pressure: Pressure) -> Vec<NodeCondition> {
    vec![
        if pressure.memory {
            condition(
                "MemoryPressure",
                true,
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
            )
        } else {
            condition(
                "MemoryPressure",
                false,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            )
        },
        if pressure.disk {
            condition(
                "DiskPressure",
                true,
                "KubeletHasDiskPressure",
                "kubelet has disk pressure",
            )
        } else {
            condition(
                "DiskPressure",
                false,
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            )
        },
        if pressure.pid {
            condition(
                "PIDPressure",
                true,
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
            )
        } else {
            condition(
                "PIDPressure",
                false,
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            )
        },
        match &health.not_ready {
            None => condition(
                "Ready",
                true,
                "KubeletReady",
                "kubelet is posting ready status",
            ),
            Some(message) => condition("Ready", false, "KubeletNotReady", message),
        },
    ]
}

/// Keeps `lastTransitionTime` from the previous status when a condition did not change, and
/// stamps every condition's heartbeat.
pub fn carry_transitions(new: &mut [NodeCondition], old: &[NodeCondition], now: &Time) {
    for c in new.iter_mut() {
        c.last_heartbeat_time = Some(now.clone());
        let previous = old.iter().find(|o| o.type_ == c.type_);
        c.last_transition_time = match previous {
            Some(o) if o.status == c.status && o.last_transition_time.is_some() => {
                o.last_transition_time.clone()
            }
            _ => Some(now.clone()),
        };
    }
}

/// The labels the kubelet owns on its Node plus the configured ones.
pub fn node_labels(node_name: &str, extra: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let arch = crate::cli::go_arch();
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), node_name.to_string()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), arch.to_string()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("beta.kubernetes.io/arch".to_string(), arch.to_string()),
        (
            "node.kubernetes.io/instance-type".to_string(),
            "k3rs".to_string(),
        ),
        (
            "beta.kubernetes.io/instance-type".to_string(),
            "k3rs".to_string(),
        ),
    ]);
    labels.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels
}

/// `labels` split into those a node may set on its own Node and those NodeRestriction
/// refuses it (`node-role.kubernetes.io/*`, `node-restriction.kubernetes.io/*`, other
/// `kubernetes.io` labels); a server sets the latter on its own Node with its own identity.
pub fn split_restricted(
    labels: BTreeMap<String, String>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    labels
        .into_iter()
        .partition(|(key, _)| crate::names::node_may_set_label(key))
}

/// Capacity and allocatable from the host facts and the reservations.
pub fn resources(
    facts: &HostFacts,
    args: &super::KubeletArgs,
) -> (BTreeMap<String, Quantity>, BTreeMap<String, Quantity>) {
    let q = |s: String| Quantity(s);
    let capacity = BTreeMap::from([
        ("cpu".to_string(), q(facts.cpus.to_string())),
        (
            "memory".to_string(),
            q(format!("{}Ki", facts.memory_bytes / 1024)),
        ),
        (
            "ephemeral-storage".to_string(),
            q(format!("{}Ki", facts.ephemeral_storage_bytes / 1024)),
        ),
        ("pods".to_string(), q(args.max_pods.to_string())),
        ("hugepages-1Gi".to_string(), q("0".into())),
        ("hugepages-2Mi".to_string(), q("0".into())),
    ]);
    let cpu_millis = (u64::from(facts.cpus) * 1000).saturating_sub(args.reserved_cpu_millis);
    let memory = facts
        .memory_bytes
        .saturating_sub(args.reserved_memory_bytes)
        .saturating_sub(args.eviction_memory_available_bytes);
    // The kubelet holds back the nodefs eviction threshold from allocatable storage.
    let storage = facts.ephemeral_storage_bytes
        - facts.ephemeral_storage_bytes / 100 * u64::from(args.eviction_nodefs_available_percent);
    let cpu = if cpu_millis % 1000 == 0 {
        (cpu_millis / 1000).to_string()
    } else {
        format!("{cpu_millis}m")
    };
    let allocatable = BTreeMap::from([
        ("cpu".to_string(), q(cpu)),
        ("memory".to_string(), q(format!("{}Ki", memory / 1024))),
        ("ephemeral-storage".to_string(), q(storage.to_string())),
        ("pods".to_string(), q(args.max_pods.to_string())),
        ("hugepages-1Gi".to_string(), q("0".into())),
        ("hugepages-2Mi".to_string(), q("0".into())),
    ]);
    (capacity, allocatable)
}

/// `status.images`: names are digests then tags, largest images first, at most 50.
pub fn images(list: &[k8s_cri::v1::Image]) -> Vec<ContainerImage> {
    let mut images: Vec<&k8s_cri::v1::Image> = list.iter().collect();
    images.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| a.id.cmp(&b.id)));
    images
        .into_iter()
        .filter(|i| !i.repo_digests.is_empty() || !i.repo_tags.is_empty())
        .take(MAX_IMAGES)
        .map(|i| ContainerImage {
            names: Some(i.repo_digests.iter().chain(&i.repo_tags).cloned().collect()),
            size_bytes: Some(i.size as i64),
        })
        .collect()
}

/// The Node's registration and status writer.
#[derive(Clone)]
pub struct NodeAgent {
    kubelet: Arc<Kubelet>,
    runtime_version: String,
    /// Ready as last reported, to emit NodeReady / NodeNotReady on transitions.
    last_ready: Arc<Mutex<Option<bool>>>,
}

impl NodeAgent {
    pub fn new(kubelet: Arc<Kubelet>, version: k8s_cri::v1::VersionResponse) -> NodeAgent {
        NodeAgent {
            kubelet,
            runtime_version: format!("{}://{}", version.runtime_name, version.runtime_version),
            last_ready: Arc::default(),
        }
    }

    fn api(&self) -> Api<Node> {
        Api::all(self.kubelet.client.clone())
    }

    fn reference(&self) -> ObjectReference {
        // The kubelet uses the node name as the UID of its node events.
        ObjectReference {
            kind: Some("Node".into()),
            name: Some(self.kubelet.config.node_name.clone()),
            uid: Some(self.kubelet.config.node_name.clone()),
            ..Default::default()
        }
    }

    /// Creates the Node (or takes over an existing one: labels merged, taints kept), retrying
    /// until the API server answers, then writes the first status.
    pub async fn register(&self) {
        let mut delay = Duration::from_millis(200);
        loop {
            match self.try_register().await {
                Ok(()) => break,
                Err(e) => tracing::warn!(error = %e, "registering the node; will retry"),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(7));
        }
        self.kubelet
            .recorder
            .record(
                &self.reference(),
                EventType::Normal,
                "Starting",
                "Starting kubelet.",
            )
            .await;
        if let Err(e) = self.update_status().await {
            tracing::warn!(error = %e, "first node status update");
        }
    }

    async fn try_register(&self) -> anyhow::Result<()> {
        let config = &self.kubelet.config;
        let (labels, restricted) = split_restricted(node_labels(&config.node_name, &config.labels));
        if !restricted.is_empty() {
            let keys: Vec<&str> = restricted.keys().map(String::as_str).collect();
            tracing::warn!(
                labels = ?keys,
                "the kubelet does not set these labels: a node may not set them on itself (NodeRestriction); a server sets them on its own Node"
            );
        }
        match self.api().get_opt(&config.node_name).await? {
            None => {
                let node = Node {
                    metadata: ObjectMeta {
                        name: Some(config.node_name.clone()),
                        labels: Some(labels),
                        annotations: Some(BTreeMap::from([
                            ("node.alpha.kubernetes.io/ttl".to_string(), "0".to_string()),
                            (
                                "volumes.kubernetes.io/controller-managed-attach-detach"
                                    .to_string(),
                                "true".to_string(),
                            ),
                        ])),
                        ..Default::default()
                    },
                    spec: Some(NodeSpec {
                        taints: (!config.taints.is_empty()).then(|| config.taints.clone()),
                        ..Default::default()
                    }),
                    status: None,
                };
                self.api().create(&PostParams::default(), &node).await?;
                tracing::info!(node = %config.node_name, "registered the node");
                self.kubelet
                    .recorder
                    .record(
                        &self.reference(),
                        EventType::Normal,
                        "NodeRegistered",
                        &format!("Node {} registered", config.node_name),
                    )
                    .await;
            }
            Some(existing) => {
                // An existing Node keeps its taints (NodeRestriction forbids a node to change
                // them, as the kubelet's --register-with-taints applies at creation only) and
                // has its kubelet-owned labels refreshed.
                let taints = existing
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.clone())
                    .unwrap_or_default();
                for t in &config.taints {
                    if !taints
                        .iter()
                        .any(|x| x.key == t.key && x.effect == t.effect)
                    {
                        tracing::warn!(
                            taint = %t.key,
                            "the Node already exists without a configured taint; a node may not add taints to itself, so an administrator must add it"
                        );
                    }
                }
                let patch = serde_json::json!({"metadata": {"labels": labels}});
                self.api()
                    .patch(
                        &config.node_name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
                tracing::info!(node = %config.node_name, "node already registered; updated it");
            }
        }
        Ok(())
    }

    /// Computes and writes `nodes/<me>/status`.
    pub async fn update_status(&self) -> anyhow::Result<()> {
        let config = &self.kubelet.config;
        let root = config.root_dir.clone();
        let facts = tokio::task::spawn_blocking(move || HostFacts::read(&root)).await?;
        let runtime_status = self.kubelet.cri.status().await.map_err(|e| e.to_string());
        let health = runtime_health(runtime_status.as_ref().map_err(Clone::clone));
        let pressure = self.pressure();
        let image_list = self.kubelet.cri.list_images().await.unwrap_or_default();
        let existing = self.api().get_status(&config.node_name).await?;
        let old_conditions = existing
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let now = Time(super::now());
        let mut conds = conditions(&health, pressure);
        carry_transitions(&mut conds, &old_conditions, &now);
        let (capacity, allocatable) = resources(&facts, &config.extra);
        let mut addresses = vec![NodeAddress {
            type_: "InternalIP".into(),
            address: config.node_ip.to_string(),
        }];
        if let Some(ip) = config.node_external_ip {
            addresses.push(NodeAddress {
                type_: "ExternalIP".into(),
                address: ip.to_string(),
            });
        }
        addresses.push(NodeAddress {
            type_: "Hostname".into(),
            address: config.node_name.clone(),
        });
        let status = NodeStatus {
            capacity: Some(capacity),
            allocatable: Some(allocatable),
            conditions: Some(conds),
            addresses: Some(addresses),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: i32::from(config.kubelet_port),
                }),
            }),
            node_info: Some(NodeSystemInfo {
                architecture: crate::cli::go_arch().to_string(),
                boot_id: facts.boot_id.clone(),
                container_runtime_version: self.runtime_version.clone(),
                kernel_version: facts.kernel_version.clone(),
                kube_proxy_version: String::new(),
                kubelet_version: super::kubelet_version(),
                machine_id: facts.machine_id.clone(),
                operating_system: "linux".into(),
                os_image: facts.os_image.clone(),
                system_uuid: facts.system_uuid.clone(),
                swap: None,
            }),
            images: Some(images(&image_list)),
            ..Default::default()
        };
        let patch = serde_json::json!({ "status": status });
        self.api()
            .patch_status(
                &config.node_name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        let ready = health.not_ready.is_none();
        let mut last = self.last_ready.lock().await;
        if *last != Some(ready) {
            let (reason, message) = if ready {
                (
                    "NodeReady",
                    format!("Node {} status is now: NodeReady", config.node_name),
                )
            } else {
                (
                    "NodeNotReady",
                    format!("Node {} status is now: NodeNotReady", config.node_name),
                )
            };
            *last = Some(ready);
            drop(last);
            self.kubelet
                .recorder
                .record(&self.reference(), EventType::Normal, reason, &message)
                .await;
        }
        Ok(())
    }

    fn pressure(&self) -> Pressure {
        let args = &self.kubelet.config.extra;
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| host::meminfo_field(&t, "MemAvailable"))
            .is_some_and(|available| available < args.eviction_memory_available_bytes);
        let disk = host::filesystem_size(&self.kubelet.config.root_dir).is_some_and(|fs| {
            fs.total > 0
                && fs.available * 100 / fs.total < u64::from(args.eviction_nodefs_available_percent)
        });
        let pid = match (
            std::fs::read_to_string("/proc/sys/kernel/pid_max"),
            std::fs::read_dir("/proc"),
        ) {
            (Ok(max), Ok(entries)) => {
                let max: usize = max.trim().parse().unwrap_or(usize::MAX);
                let running = entries
                    .filter_map(Result::ok)
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .bytes()
                            .all(|b| b.is_ascii_digit())
                    })
                    .count();
                running * 10 > max * 9
            }
            _ => false,
        };
        Pressure { memory, disk, pid }
    }

    /// Whether the Node was last reported Ready.
    async fn reported_ready(&self) -> bool {
        *self.last_ready.lock().await == Some(true)
    }

    /// Polls the runtime until it (and its network) is ready, then writes the status at once;
    /// returns after that write, or after [`FAST_STATUS_FOR`], or right away when the Node is
    /// already reported Ready.
    async fn fast_status_update_once(&self) {
        let deadline = tokio::time::Instant::now() + FAST_STATUS_FOR;
        while tokio::time::Instant::now() < deadline && !self.reported_ready().await {
            let status = self.kubelet.cri.status().await.map_err(|e| e.to_string());
            if runtime_health(status.as_ref().map_err(Clone::clone))
                .not_ready
                .is_none()
            {
                match self.update_status().await {
                    Ok(()) => {
                        tracing::info!(node = %self.kubelet.config.node_name, "the runtime is ready; reported the node Ready");
                        return;
                    }
                    Err(e) => tracing::debug!(error = %e, "fast node status update"),
                }
            }
            tokio::time::sleep(FAST_STATUS_POLL).await;
        }
    }

    /// Writes the status every `node-status-update-frequency`, forever; until the Node is first
    /// Ready, also as soon as the runtime turns ready.
    pub async fn status_loop(self) {
        let periodic = async {
            let period = self.kubelet.config.extra.node_status_update_frequency;
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                if let Err(e) = self.update_status().await {
                    tracing::warn!(error = %e, "updating the node status");
                    if e.downcast_ref::<kube::Error>().is_some_and(is_not_found) {
                        // The Node was deleted under us: register again, as the kubelet does.
                        self.register().await;
                    }
                }
            }
        };
        // `periodic` never ends, so the join only ends with the loop.
        tokio::join!(self.fast_status_update_once(), periodic);
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Creates and renews `kube-node-lease/<node>` every 10 s.
pub async fn lease_loop(kubelet: Arc<Kubelet>) {
    let api: Api<Lease> = Api::namespaced(kubelet.client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(kubelet.client.clone());
    let name = kubelet.config.node_name.clone();
    let mut tick = tokio::time::interval(LEASE_RENEW);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = renew_lease(&api, &nodes, &name).await {
            tracing::warn!(error = %e, "renewing the node lease");
        }
    }
}

async fn renew_lease(api: &Api<Lease>, nodes: &Api<Node>, name: &str) -> kube::Result<()> {
    let renew_time = MicroTime(super::now());
    match api.get_opt(name).await? {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(name.to_string());
            spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS);
            spec.renew_time = Some(renew_time);
            api.replace(name, &PostParams::default(), &lease).await?;
        }
        None => {
            let owner = nodes.get_opt(name).await?.and_then(|node| {
                Some(OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: name.to_string(),
                    uid: node.metadata.uid?,
                    ..Default::default()
                })
            });
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some("kube-node-lease".into()),
                    owner_references: owner.map(|o| vec![o]),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name.to_string()),
                    lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
                    renew_time: Some(renew_time),
                    ..Default::default()
                }),
            };
            api.create(&PostParams::default(), &lease).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_cri::v1::{RuntimeCondition, RuntimeStatus};

    fn status(runtime: bool, network: bool) -> RuntimeStatus {
        RuntimeStatus {
            conditions: vec![
                RuntimeCondition {
                    r#type: "RuntimeReady".into(),
                    status: runtime,
                    ..Default::default()
                },
                RuntimeCondition {
                    r#type: "NetworkReady".into(),
                    status: network,
                    reason: "NetworkPluginNotReady".into(),
                    message: "Network plugin returns error: cni plugin not initialized".into(),
                },
            ],
        }
    }

    #[test]
    fn ready_follows_the_runtime_and_network() {
        let ready = runtime_health(Ok(&status(true, true)));
        assert_eq!(ready.not_ready, None);
        let conds = conditions(&ready, Pressure::default());
        let r = conds.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            (r.status.as_str(), r.reason.as_deref()),
            ("True", Some("KubeletReady"))
        );

        let no_net = runtime_health(Ok(&status(true, false)));
        let message = no_net.not_ready.clone().unwrap();
        assert!(message.starts_with("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady"), "{message}");
        let conds = conditions(&no_net, Pressure::default());
        let r = conds.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            (r.status.as_str(), r.reason.as_deref()),
            ("False", Some("KubeletNotReady"))
        );
        assert!(
            runtime_health(Err("connection refused".into()))
                .not_ready
                .unwrap()
                .contains("container runtime is down")
        );
    }

    #[test]
    fn transitions_are_kept_when_unchanged() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1000).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2000).unwrap());
        let mut old = conditions(&RuntimeHealth { not_ready: None }, Pressure::default());
        carry_transitions(&mut old, &[], &t0);
        let mut new = conditions(
            &RuntimeHealth {
                not_ready: Some("x".into()),
            },
            Pressure::default(),
        );
        carry_transitions(&mut new, &old, &t1);
        let ready = new.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.last_transition_time, Some(t1.clone()));
        let memory = new.iter().find(|c| c.type_ == "MemoryPressure").unwrap();
        assert_eq!(memory.last_transition_time, Some(t0));
        assert_eq!(memory.last_heartbeat_time, Some(t1));
    }

    #[test]
    fn capacity_and_allocatable() {
        let facts = HostFacts {
            cpus: 4,
            memory_bytes: 8 * 1024 * 1024 * 1024,
            ephemeral_storage_bytes: 100_000_000_000,
            kernel_version: String::new(),
            os_image: String::new(),
            machine_id: String::new(),
            boot_id: String::new(),
            system_uuid: String::new(),
        };
        let args = crate::kubelet::KubeletArgs::parse(&[
            "kube-reserved=cpu=500m,memory=1Gi",
            "max-pods=50",
        ])
        .unwrap();
        let (cap, alloc) = resources(&facts, &args);
        assert_eq!(cap["cpu"].0, "4");
        assert_eq!(cap["memory"].0, "8388608Ki");
        assert_eq!(cap["pods"].0, "50");
        assert_eq!(alloc["cpu"].0, "3500m");
        assert_eq!(
            alloc["memory"].0,
            format!(
                "{}Ki",
                (7u64 * 1024 * 1024 * 1024 - 100 * 1024 * 1024) / 1024
            )
        );
        assert_eq!(alloc["ephemeral-storage"].0, "90000000000");
    }

    #[test]
    fn labels_include_the_well_known_ones() {
        let extra = BTreeMap::from([(
            "node-role.kubernetes.io/control-plane".to_string(),
            "true".to_string(),
        )]);
        let labels = node_labels("n1", &extra);
        assert_eq!(labels["kubernetes.io/hostname"], "n1");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["beta.kubernetes.io/arch"], crate::cli::go_arch());
        assert_eq!(labels["node-role.kubernetes.io/control-plane"], "true");
        let (own, restricted) = split_restricted(labels);
        assert_eq!(own["kubernetes.io/hostname"], "n1");
        assert_eq!(own["node.kubernetes.io/instance-type"], "k3rs");
        assert!(!own.contains_key("node-role.kubernetes.io/control-plane"));
        assert_eq!(
            restricted.keys().collect::<Vec<_>>(),
            ["node-role.kubernetes.io/control-plane"]
        );
    }

    #[test]
    fn images_are_largest_first() {
        let img = |id: &str, size: u64, tag: &str| k8s_cri::v1::Image {
            id: id.into(),
            size,
            repo_tags: vec![tag.into()],
            repo_digests: vec![format!("{tag}@sha256:{id}")],
            ..Default::default()
        };
        let list = images(&[img("a", 10, "small:1"), img("b", 100, "big:1")]);
        assert_eq!(list[0].names.as_ref().unwrap()[1], "big:1");
        assert_eq!(list[0].size_bytes, Some(100));
    }
}
