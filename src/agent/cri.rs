//! Dialing a CRI (or containerd native API) endpoint: a tonic `Channel` over a Unix socket.
//!
//! Owns only the transport, and is the only place that dials a runtime socket. The kubelet builds `k8s_cri::v1::runtime_service_client::
//! RuntimeServiceClient` / `image_service_client::ImageServiceClient` on the returned channel;
//! the image importer builds `containerd_client` service clients on it. Nothing here knows about
//! pods, images or the API server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

/// How long one connection attempt may take before the caller sees an error.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts `unix:///run/containerd/containerd.sock`, `unix:/path` or a bare path, the forms
/// `--container-runtime-endpoint` takes in the kubelet and k3s.
pub fn socket_path(endpoint: &str) -> anyhow::Result<PathBuf> {
    let path = if let Some(rest) = endpoint.strip_prefix("unix://") {
        rest
    } else if let Some(rest) = endpoint.strip_prefix("unix:") {
        rest
    } else if endpoint.contains("://") {
        anyhow::bail!(
            "unsupported container runtime endpoint {endpoint:?}: only unix sockets \
             (unix:///path/to/socket or a bare path) are supported"
        );
    } else {
        endpoint
    };
    if path.is_empty() {
        anyhow::bail!("empty container runtime endpoint {endpoint:?}");
    }
    Ok(PathBuf::from(path))
}

/// A gRPC channel to the Unix socket `socket` that dials lazily: nothing is connected until the
/// first call, and after the runtime restarts the next call dials again through the same
/// connector. The one connector for CRI (the kubelet, the kubelet API, the agent's checks) and
/// containerd's native API (the image importer).
pub fn channel(socket: &Path) -> Channel {
    let path = socket.to_path_buf();
    // The URI is required by tonic but never used: the connector below ignores it.
    Endpoint::from_static("http://[::]:50051")
        .connect_timeout(CONNECT_TIMEOUT)
        .connect_with_connector_lazy(tower::service_fn(move |_: http::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(&path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
}

/// [`channel`], after checking that something accepts connections on the socket, so an absent
/// or dead socket is an error naming it here rather than on the first call.
pub async fn connect(socket: &Path) -> anyhow::Result<Channel> {
    tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::UnixStream::connect(socket))
        .await
        .map_err(|_| anyhow::anyhow!("timed out after {CONNECT_TIMEOUT:?}"))
        .and_then(|r| r.map_err(anyhow::Error::from))
        .with_context(|| format!("connecting to {}", socket.display()))?;
    Ok(channel(socket))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_forms() {
        assert_eq!(
            socket_path("unix:///run/containerd/containerd.sock").unwrap(),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(
            socket_path("/run/crio/crio.sock").unwrap(),
            PathBuf::from("/run/crio/crio.sock")
        );
        assert_eq!(
            socket_path("unix:/x.sock").unwrap(),
            PathBuf::from("/x.sock")
        );
        assert!(socket_path("tcp://127.0.0.1:1234").is_err());
        assert!(socket_path("unix://").is_err());
    }

    #[tokio::test]
    async fn connect_to_missing_socket_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("nope.sock");
        let err = connect(&sock).await.unwrap_err();
        assert!(format!("{err:#}").contains("nope.sock"), "{err:#}");
    }
}
