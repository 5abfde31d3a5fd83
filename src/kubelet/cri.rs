//! The kubelet's CRI client: the runtime and image services of one CRI endpoint (containerd's
//! socket, or CRI-O's), each call with a deadline and an error that says what was asked.
//!
//! Talks CRI only; knows nothing of Pods. The pod workers and the node status loop share one
//! `Cri` (tonic channels are cheap to clone and multiplex calls).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

/// A CRI call failed: which call, and the gRPC status.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("CRI {call}: {status}")]
    Call {
        call: &'static str,
        #[source]
        status: Box<tonic::Status>,
    },
}

impl CriError {
    /// The gRPC code of the failed call.
    pub fn code(&self) -> tonic::Code {
        match self {
            CriError::Call { status, .. } => status.code(),
        }
    }

    /// The runtime's message, without our prefix (what the kubelet puts in events).
    pub fn message(&self) -> String {
        match self {
            CriError::Call { status, .. } => status.message().to_string(),
        }
    }
}

pub type CriResult<T> = Result<T, CriError>;

/// The usual deadline of a CRI call; image pulls and stops get their own.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Image pulls can be slow on a Raspberry Pi; the kubelet's default is "no deadline".
const PULL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Large ListContainers answers (hundreds of pods) exceed tonic's 4 MiB default.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// The runtime and image services of one CRI endpoint.
#[derive(Clone)]
pub struct Cri {
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
}

macro_rules! call {
    ($self:ident . $svc:ident . $method:ident ($req:expr), $timeout:expr) => {{
        let mut request = tonic::Request::new($req);
        request.set_timeout($timeout);
        $self
            .$svc
            .clone()
            .$method(request)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| CriError::Call {
                call: stringify!($method),
                status: Box::new(status),
            })
    }};
}

impl Cri {
    /// A client for the CRI socket at `socket` (a path, or `unix://` + path). It dials lazily,
    /// so the kubelet can start while the runtime is still coming up.
    pub fn new(socket: &Path) -> Cri {
        let text = socket.to_string_lossy();
        let path = PathBuf::from(text.strip_prefix("unix://").unwrap_or(&text));
        let channel = crate::agent::cri::channel(&path);
        Cri {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE),
            image: ImageServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE),
        }
    }

    pub async fn version(&self) -> CriResult<cri::VersionResponse> {
        call!(
            self.runtime.version(cri::VersionRequest {
                version: "v1".into()
            }),
            CALL_TIMEOUT
        )
    }

    pub async fn status(&self) -> CriResult<cri::RuntimeStatus> {
        call!(
            self.runtime.status(cri::StatusRequest { verbose: false }),
            CALL_TIMEOUT
        )
        .map(|r| r.status.unwrap_or_default())
    }

    /// The runtime's verbose status info (containerd puts its CRI config under `config`).
    pub async fn status_info(&self) -> CriResult<std::collections::HashMap<String, String>> {
        call!(
            self.runtime.status(cri::StatusRequest { verbose: true }),
            CALL_TIMEOUT
        )
        .map(|r| r.info)
    }

    pub async fn run_pod_sandbox(&self, config: cri::PodSandboxConfig) -> CriResult<String> {
        call!(
            self.runtime.run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            }),
            CALL_TIMEOUT
        )
        .map(|r| r.pod_sandbox_id)
    }

    pub async fn stop_pod_sandbox(&self, id: &str) -> CriResult<()> {
        call!(
            self.runtime.stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.into()
            }),
            CALL_TIMEOUT
        )
        .map(drop)
    }

    pub async fn remove_pod_sandbox(&self, id: &str) -> CriResult<()> {
        call!(
            self.runtime
                .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                    pod_sandbox_id: id.into()
                }),
            CALL_TIMEOUT
        )
        .map(drop)
    }

    pub async fn pod_sandbox_status(&self, id: &str) -> CriResult<cri::PodSandboxStatus> {
        call!(
            self.runtime
                .pod_sandbox_status(cri::PodSandboxStatusRequest {
                    pod_sandbox_id: id.into(),
                    verbose: false,
                }),
            CALL_TIMEOUT
        )
        .map(|r| r.status.unwrap_or_default())
    }

    /// Sandboxes carrying every label in `labels` (all when empty).
    pub async fn list_pod_sandboxes(
        &self,
        labels: &[(&str, &str)],
    ) -> CriResult<Vec<cri::PodSandbox>> {
        let filter = cri::PodSandboxFilter {
            label_selector: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        call!(
            self.runtime.list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: Some(filter)
            }),
            CALL_TIMEOUT
        )
        .map(|r| r.items)
    }

    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> CriResult<String> {
        call!(
            self.runtime.create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.into(),
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            }),
            CALL_TIMEOUT
        )
        .map(|r| r.container_id)
    }

    pub async fn start_container(&self, id: &str) -> CriResult<()> {
        call!(
            self.runtime.start_container(cri::StartContainerRequest {
                container_id: id.into()
            }),
            CALL_TIMEOUT
        )
        .map(drop)
    }

    /// Stops a container: SIGTERM (or the image's stop signal), SIGKILL after `grace`.
    /// Stops a container: the runtime sends the stop signal, waits `grace`, then SIGKILLs.
    pub async fn stop_container(&self, id: &str, grace: Duration) -> CriResult<()> {
        call!(
            self.runtime.stop_container(cri::StopContainerRequest {
                container_id: id.into(),
                timeout: stop_timeout_seconds(grace),
            }),
            grace + CALL_TIMEOUT
        )
        .map(drop)
    }

    pub async fn remove_container(&self, id: &str) -> CriResult<()> {
        call!(
            self.runtime.remove_container(cri::RemoveContainerRequest {
                container_id: id.into()
            }),
            CALL_TIMEOUT
        )
        .map(drop)
    }

    /// Containers carrying every label in `labels` (all when empty).
    pub async fn list_containers(&self, labels: &[(&str, &str)]) -> CriResult<Vec<cri::Container>> {
        let filter = cri::ContainerFilter {
            label_selector: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        call!(
            self.runtime.list_containers(cri::ListContainersRequest {
                filter: Some(filter)
            }),
            CALL_TIMEOUT
        )
        .map(|r| r.containers)
    }

    pub async fn container_status(&self, id: &str) -> CriResult<cri::ContainerStatus> {
        call!(
            self.runtime.container_status(cri::ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            }),
            CALL_TIMEOUT
        )
        .map(|r| r.status.unwrap_or_default())
    }

    /// Runs `cmd` in a container and waits for it (probes and hooks).
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> CriResult<cri::ExecSyncResponse> {
        call!(
            self.runtime.exec_sync(cri::ExecSyncRequest {
                container_id: id.into(),
                cmd,
                timeout: timeout.as_secs().max(1) as i64,
            }),
            timeout + Duration::from_secs(5)
        )
    }

    pub async fn list_images(&self) -> CriResult<Vec<cri::Image>> {
        call!(
            self.image
                .list_images(cri::ListImagesRequest { filter: None }),
            CALL_TIMEOUT
        )
        .map(|r| r.images)
    }

    /// The image if the runtime has it.
    pub async fn image_status(&self, image: &str) -> CriResult<Option<cri::Image>> {
        call!(
            self.image.image_status(cri::ImageStatusRequest {
                image: Some(image_spec(image)),
                verbose: false,
            }),
            CALL_TIMEOUT
        )
        .map(|r| r.image)
    }

    /// Pulls an image; returns its reference (the image ID).
    pub async fn pull_image(
        &self,
        image: &str,
        sandbox_config: Option<cri::PodSandboxConfig>,
    ) -> CriResult<String> {
        call!(
            self.image.pull_image(cri::PullImageRequest {
                image: Some(image_spec(image)),
                auth: None,
                sandbox_config,
            }),
            PULL_TIMEOUT
        )
        .map(|r| r.image_ref)
    }

    pub async fn remove_image(&self, image: &str) -> CriResult<()> {
        call!(
            self.image.remove_image(cri::RemoveImageRequest {
                image: Some(image_spec(image))
            }),
            CALL_TIMEOUT
        )
        .map(drop)
    }

    pub async fn image_fs_info(&self) -> CriResult<cri::ImageFsInfoResponse> {
        call!(
            self.image.image_fs_info(cri::ImageFsInfoRequest {}),
            CALL_TIMEOUT
        )
    }
}

/// CRI's StopContainer timeout is whole seconds. What is left of a grace period is rarely a
/// whole number (the Killing event and preStop hook take some of it), and truncating it would
/// SIGKILL up to a second early — a 2 s grace became 1 s. So a started second counts.
fn stop_timeout_seconds(grace: Duration) -> i64 {
    let whole = grace.as_secs();
    let rounded = if grace.subsec_nanos() > 0 {
        whole + 1
    } else {
        whole
    };
    i64::try_from(rounded).unwrap_or(i64::MAX)
}

pub fn image_spec(image: &str) -> cri::ImageSpec {
    cri::ImageSpec {
        image: image.to_string(),
        user_specified_image: image.to_string(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_timeout_rounds_a_started_second_up() {
        assert_eq!(stop_timeout_seconds(Duration::ZERO), 0);
        assert_eq!(stop_timeout_seconds(Duration::from_secs(2)), 2);
        assert_eq!(stop_timeout_seconds(Duration::from_millis(1_990)), 2);
        assert_eq!(stop_timeout_seconds(Duration::from_millis(1)), 1);
        assert_eq!(stop_timeout_seconds(Duration::from_millis(30_001)), 31);
    }
}
