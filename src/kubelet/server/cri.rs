//! Finding a pod's sandbox and containers through CRI by the labels the kubelet puts on them
//! (`io.kubernetes.pod.{name,namespace,uid}`, `io.kubernetes.container.name`), and asking for
//! streaming URLs.

use std::collections::HashMap;
use std::path::Path;

use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
pub const ANNOTATION_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";

/// A CRI client.
pub type Runtime = RuntimeServiceClient<Channel>;

/// Errors of CRI lookups, worded for the user of `kubectl logs/exec`.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("pod \"{namespace}/{pod}\" not found on this node")]
    PodNotFound { namespace: String, pod: String },
    #[error("container \"{container}\" in pod \"{pod}\" is not available")]
    ContainerNotFound { pod: String, container: String },
    #[error("previous terminated container \"{container}\" in pod \"{pod}\" not found")]
    NoPrevious { pod: String, container: String },
    #[error("container runtime: {0}")]
    Runtime(#[from] tonic::Status),
}

/// A lazily connecting CRI client for the unix socket `socket`: the server starts even while
/// the runtime is still coming up, and each call reconnects as needed.
pub fn connect_lazy(socket: &Path) -> Runtime {
    RuntimeServiceClient::new(crate::agent::cri::channel(socket))
}

fn pod_labels(namespace: &str, pod: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_POD_NAMESPACE.to_string(), namespace.to_string()),
        (LABEL_POD_NAME.to_string(), pod.to_string()),
    ])
}

/// The pod's newest sandbox (a restarted sandbox leaves the old one behind until GC).
pub async fn find_sandbox(
    runtime: &mut Runtime,
    namespace: &str,
    pod: &str,
) -> Result<cri::PodSandbox, LookupError> {
    let response = runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                label_selector: pod_labels(namespace, pod),
                ..Default::default()
            }),
        })
        .await?
        .into_inner();
    response
        .items
        .into_iter()
        .max_by_key(|s| {
            (
                s.state == cri::PodSandboxState::SandboxReady as i32,
                s.created_at,
            )
        })
        .ok_or_else(|| LookupError::PodNotFound {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
        })
}

/// The container's instances, newest first (index 0 is current, 1 the previous).
pub async fn find_containers(
    runtime: &mut Runtime,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Result<Vec<cri::Container>, LookupError> {
    let mut labels = pod_labels(namespace, pod);
    labels.insert(LABEL_CONTAINER_NAME.to_string(), container.to_string());
    let mut items = runtime
        .list_containers(cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                label_selector: labels,
                ..Default::default()
            }),
        })
        .await?
        .into_inner()
        .containers;
    if items.is_empty() {
        return Err(LookupError::ContainerNotFound {
            pod: pod.to_string(),
            container: container.to_string(),
        });
    }
    items.sort_by_key(|c| std::cmp::Reverse((restart_count(c), c.created_at)));
    Ok(items)
}

/// The restart count the kubelet recorded on the container (0 when absent).
pub fn restart_count(container: &cri::Container) -> u32 {
    container
        .annotations
        .get(ANNOTATION_RESTART_COUNT)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The running (or newest) instance of a container, for exec and attach.
pub async fn current_container(
    runtime: &mut Runtime,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Result<cri::Container, LookupError> {
    let items = find_containers(runtime, namespace, pod, container).await?;
    let running = items
        .iter()
        .position(|c| c.state == cri::ContainerState::ContainerRunning as i32)
        .unwrap_or(0);
    items
        .into_iter()
        .nth(running)
        .ok_or_else(|| LookupError::ContainerNotFound {
            pod: pod.to_string(),
            container: container.to_string(),
        })
}

/// A container's status (log path, state).
pub async fn container_status(
    runtime: &mut Runtime,
    id: &str,
) -> Result<Option<cri::ContainerStatus>, tonic::Status> {
    Ok(runtime
        .container_status(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await?
        .into_inner()
        .status)
}

/// Whether the container is still running (a log follower stops once it is not).
pub async fn is_running(runtime: &mut Runtime, id: &str) -> bool {
    match container_status(runtime, id).await {
        Ok(Some(status)) => status.state == cri::ContainerState::ContainerRunning as i32,
        Ok(None) => false,
        // The runtime being briefly unreachable should not cut a follower off.
        Err(e) => e.code() == tonic::Code::Unavailable,
    }
}
