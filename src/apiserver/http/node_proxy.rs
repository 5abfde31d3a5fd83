//! `pods/log`, `pods/exec`, `pods/attach`, `pods/portforward`: find the pod's node and the
//! kubelet's address (InternalIP, else ExternalIP, else Hostname; the port from
//! `status.daemonEndpoints.kubeletEndpoint`), dial it over TLS — verifying its serving
//! certificate against the server CA and presenting the API server's kubelet-client
//! certificate — and relay: log bodies stream as they come (`follow` keeps them open);
//! upgrades (SPDY or WebSocket) are passed through byte for byte once the kubelet switches.
//!
//! Reads pods and nodes from the watch cache only; never writes.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, Request, StatusCode, header};
use hyper::body::Incoming;
use rustls::pki_types::ServerName;
use serde_json::Value;

use super::request::Target;
use super::status::ApiError;
use crate::apiserver::AppState;
use crate::streaming::upgrade::{self, Answer};

/// The API server's credentials towards kubelets.
#[derive(Clone, Debug)]
pub struct KubeletClientConfig {
    /// `client-kube-apiserver` (`system:apiserver`).
    pub cert_pem: String,
    pub key_pem: String,
    /// The CA that signs kubelet serving certificates (the server CA).
    pub ca_pem: String,
}

/// The kubelet's default port when a Node does not report one.
const DEFAULT_KUBELET_PORT: u16 = 10250;
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);
const SUBRESOURCES: [&str; 4] = ["log", "exec", "attach", "portforward"];

/// A TLS client configuration for dialling kubelets.
pub fn tls_config(config: &KubeletClientConfig) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut tls =
        crate::kube_client::mutual_tls_config(&config.ca_pem, &config.cert_pem, &config.key_pem)
            .context("the kubelet-client TLS configuration")?;
    // Upgrades are HTTP/1.1 only.
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(tls))
}

/// Whether this module serves the request.
pub fn handles(target: &Target) -> bool {
    target.info.group.is_empty()
        && target.info.plural == "pods"
        && target.name.is_some()
        && target
            .subresource
            .as_deref()
            .is_some_and(|s| SUBRESOURCES.contains(&s))
}

/// Serves `pods/{log,exec,attach,portforward}` for an authenticated caller.
pub async fn serve(state: &Arc<AppState>, target: &Target, req: Request<Incoming>) -> Response {
    match proxy(state, target, req).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn proxy(
    state: &Arc<AppState>,
    target: &Target,
    req: Request<Incoming>,
) -> Result<Response, ApiError> {
    let subresource = target.subresource.as_deref().unwrap_or_default();
    let name = target.name.as_deref().unwrap_or_default();
    let namespace = target.namespace.as_deref().unwrap_or("default");
    let allowed = match subresource {
        "log" => matches!(*req.method(), Method::GET | Method::HEAD),
        _ => matches!(*req.method(), Method::GET | Method::POST),
    };
    if !allowed {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(req.uri().query().unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?;
    let pod = cached(state, &target.info.key(Some(namespace), name))
        .ok_or_else(|| ApiError::not_found("", "pods", name))?;
    let requested = pairs
        .iter()
        .find(|(k, _)| k == "container")
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty());
    let container = if subresource == "portforward" {
        None
    } else {
        Some(choose_container(&pod, name, requested)?)
    };
    let node_name = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    let Some(node_name) = node_name else {
        if subresource == "log" {
            // kube-apiserver answers an unscheduled pod's log with an empty body.
            return Ok(plain(StatusCode::OK, Body::empty()));
        }
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    };
    if subresource == "log" {
        let previous = pairs.iter().any(|(k, v)| k == "previous" && v == "true");
        if let Some(container) = &container
            && let Some(message) = log_status_error(&pod, name, container, previous)
        {
            return Err(ApiError::bad_request(message));
        }
    }
    let nodes = state
        .registry
        .find("", "v1", "nodes")
        .ok_or_else(|| ApiError::internal("nodes are not registered"))?;
    let node = cached(state, &nodes.key(None, node_name))
        .ok_or_else(|| ApiError::not_found("", "nodes", node_name))?;
    let (host, port) = kubelet_address(&node)
        .ok_or_else(|| ApiError::internal(format!("node {node_name} has no usable address")))?;

    let forwarded: Vec<(String, String)> = pairs
        .into_iter()
        .filter(|(k, _)| k != "container")
        .collect();
    let query = serde_urlencoded::to_string(&forwarded).unwrap_or_default();
    let escape = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                other => format!("%{other:02X}"),
            })
            .collect()
    };
    let path = match (subresource, &container) {
        ("log", Some(c)) => format!(
            "/containerLogs/{}/{}/{}",
            escape(namespace),
            escape(name),
            escape(c)
        ),
        ("exec", Some(c)) => format!("/exec/{}/{}/{}", escape(namespace), escape(name), escape(c)),
        ("attach", Some(c)) => format!(
            "/attach/{}/{}/{}",
            escape(namespace),
            escape(name),
            escape(c)
        ),
        _ => format!("/portForward/{}/{}", escape(namespace), escape(name)),
    };
    let path_and_query = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    let authority = match host {
        Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        Host::Ip(ip) => format!("{ip}:{port}"),
        Host::Name(ref n) => format!("{n}:{port}"),
    };
    let url = format!("https://{authority}{path_and_query}");
    let Some(tls) = state.kubelet_tls.clone() else {
        return Err(ApiError::unavailable(
            "the API server has no kubelet client credentials configured",
        ));
    };
    let stream = match dial(&tls, &host, &authority).await {
        Ok(s) => s,
        Err(e) if subresource == "log" => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "",
                format!("Get {url:?}: {e}"),
            ));
        }
        Err(e) => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "",
                format!("error dialing backend: {e}"),
            ));
        }
    };
    if subresource == "log" {
        proxy_log(stream, &authority, &path_and_query, name).await
    } else {
        proxy_upgrade(stream, &authority, &path_and_query, req).await
    }
}

fn cached(state: &AppState, key: &str) -> Option<Value> {
    let object = state.cache.get(key)?;
    serde_json::from_slice(&object.bytes).ok()
}

fn plain(status: StatusCode, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

fn names(pod: &Value, list: &str) -> Vec<String> {
    pod.pointer(&format!("/spec/{list}"))
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// kube-apiserver's container choice: the only container, or the named one (which must exist).
fn choose_container(
    pod: &Value,
    pod_name: &str,
    requested: Option<&str>,
) -> Result<String, ApiError> {
    let containers = names(pod, "containers");
    let all: Vec<String> = [
        names(pod, "initContainers"),
        containers.clone(),
        names(pod, "ephemeralContainers"),
    ]
    .concat();
    match requested {
        Some(name) if all.iter().any(|c| c == name) => Ok(name.to_string()),
        Some(name) => Err(ApiError::bad_request(format!(
            "container {name} is not valid for pod {pod_name}"
        ))),
        None if containers.len() == 1 => Ok(containers[0].clone()),
        None if containers.is_empty() => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {pod_name}"
        ))),
        None => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {pod_name}, choose one of: [{}]",
            all.join(" ")
        ))),
    }
}

/// The kubelet's refusal for a container that has no logs to show, from the pod's status.
fn log_status_error(
    pod: &Value,
    pod_name: &str,
    container: &str,
    previous: bool,
) -> Option<String> {
    let status = pod.get("status")?;
    let find = |list: &str| {
        status.get(list).and_then(Value::as_array).and_then(|l| {
            l.iter()
                .find(|c| c.get("name").and_then(Value::as_str) == Some(container))
        })
    };
    let Some(found) = find("containerStatuses")
        .or_else(|| find("initContainerStatuses"))
        .or_else(|| find("ephemeralContainerStatuses"))
    else {
        // No status yet: the kubelet has not started on the pod (still being created).
        return (!previous).then(|| {
            format!(
                "container {container:?} in pod {pod_name:?} is waiting to start: ContainerCreating"
            )
        });
    };
    let terminated_id = |state: Option<&Value>| {
        state
            .and_then(|s| s.get("terminated"))
            .and_then(|t| t.get("containerID"))
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .is_some()
    };
    let last = found.get("lastState");
    let state = found.get("state");
    if previous {
        return (!terminated_id(last)).then(|| {
            format!("previous terminated container {container:?} in pod {pod_name:?} not found")
        });
    }
    let waiting = state.and_then(|s| s.get("waiting"));
    let running = state.and_then(|s| s.get("running")).is_some();
    let terminated = state.and_then(|s| s.get("terminated")).is_some();
    if running || terminated || terminated_id(last) {
        return None;
    }
    if let Some(waiting) = waiting {
        let reason = waiting.get("reason").and_then(Value::as_str).unwrap_or("");
        let why = match reason {
            "ErrImagePull" => "image can't be pulled".to_string(),
            "ImagePullBackOff" => "trying and failing to pull image".to_string(),
            other => other.to_string(),
        };
        return Some(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: {why}"
        ));
    }
    Some(format!(
        "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
    ))
}

enum Host {
    Ip(IpAddr),
    Name(String),
}

fn kubelet_address(node: &Value) -> Option<(Host, u16)> {
    let addresses = node.pointer("/status/addresses")?.as_array()?;
    let of_type = |kind: &str| {
        addresses
            .iter()
            .find(|a| a.get("type").and_then(Value::as_str) == Some(kind))
            .and_then(|a| a.get("address").and_then(Value::as_str))
    };
    let address = of_type("InternalIP")
        .or_else(|| of_type("ExternalIP"))
        .or_else(|| of_type("Hostname"))?;
    let host = match address.parse::<IpAddr>() {
        Ok(ip) => Host::Ip(ip),
        Err(_) => Host::Name(address.to_string()),
    };
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
        .unwrap_or(DEFAULT_KUBELET_PORT);
    Some((host, port))
}

/// Dial errors worded the way Go's net package words them (what kubectl users expect).
async fn dial(
    tls: &Arc<rustls::ClientConfig>,
    host: &Host,
    authority: &str,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let tcp = match tokio::time::timeout(DIAL_TIMEOUT, tokio::net::TcpStream::connect(authority))
        .await
    {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => {
            let why = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => "connect: connection refused".to_string(),
                std::io::ErrorKind::HostUnreachable => "connect: no route to host".to_string(),
                std::io::ErrorKind::NetworkUnreachable => {
                    "connect: network is unreachable".to_string()
                }
                _ => e.to_string(),
            };
            return Err(format!("dial tcp {authority}: {why}"));
        }
        Err(_) => return Err(format!("dial tcp {authority}: i/o timeout")),
    };
    let _ = tcp.set_nodelay(true);
    let server_name = match host {
        Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
        Host::Name(name) => ServerName::try_from(name.clone())
            .map_err(|e| format!("invalid kubelet host name {name:?}: {e}"))?,
    };
    tokio_rustls::TlsConnector::from(tls.clone())
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("remote error: tls: {e}"))
}

async fn proxy_log(
    stream: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    authority: &str,
    path_and_query: &str,
    pod_name: &str,
) -> Result<Response, ApiError> {
    let request = Request::builder()
        .method(Method::GET)
        .uri(path_and_query)
        .header(header::HOST, authority)
        .body(http_body_util::Empty::new())
        .map_err(|e| ApiError::internal(format!("building the kubelet request: {e}")))?;
    let answer = upgrade::send(stream, request).await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "",
            format!("Get \"https://{authority}{path_and_query}\": {e}"),
        )
    })?;
    let Answer::Response(response) = answer else {
        return Err(ApiError::internal(
            "the kubelet switched protocols on a log request",
        ));
    };
    let status = response.status();
    if status.is_success() {
        let (_, body) = response.into_parts();
        return Ok(plain(StatusCode::OK, Body::new(body)));
    }
    // As kube-apiserver's response checker: the kubelet's words, under a Status of its code.
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let message = String::from_utf8_lossy(&body[..body.len().min(4096)])
        .trim()
        .to_string();
    Err(match status {
        StatusCode::BAD_REQUEST => ApiError::bad_request(message),
        StatusCode::NOT_FOUND => ApiError::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            if message.is_empty() {
                format!("pods/log {pod_name:?} not found")
            } else {
                message
            },
        ),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ApiError::new(
            status,
            if status == StatusCode::FORBIDDEN {
                "Forbidden"
            } else {
                "Unauthorized"
            },
            message,
        ),
        _ => ApiError::new(status, "InternalError", message),
    })
}

/// Headers of an upgrade request that the kubelet needs.
const UPGRADE_REQUEST_HEADERS: [&str; 6] = [
    "connection",
    "upgrade",
    "x-stream-protocol-version",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
];
/// Headers of the kubelet's 101 that the client needs.
const UPGRADE_RESPONSE_HEADERS: [&str; 5] = [
    "connection",
    "upgrade",
    "x-stream-protocol-version",
    "sec-websocket-accept",
    "sec-websocket-protocol",
];

async fn proxy_upgrade(
    stream: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    authority: &str,
    path_and_query: &str,
    mut req: Request<Incoming>,
) -> Result<Response, ApiError> {
    let mut builder = Request::builder()
        .method(req.method().clone())
        .uri(path_and_query)
        .header(header::HOST, authority);
    for name in UPGRADE_REQUEST_HEADERS {
        for value in req.headers().get_all(name) {
            builder = builder.header(name, value.clone());
        }
    }
    let request = builder
        .body(http_body_util::Empty::new())
        .map_err(|e| ApiError::internal(format!("building the kubelet request: {e}")))?;
    let on_client_upgrade = hyper::upgrade::on(&mut req);
    let answer = upgrade::send(stream, request).await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "",
            format!("error dialing backend: {e}"),
        )
    })?;
    match answer {
        Answer::Switched(parts, mut kubelet) => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            for name in UPGRADE_RESPONSE_HEADERS {
                for value in parts.headers.get_all(name) {
                    response.headers_mut().append(name, value.clone());
                }
            }
            tokio::spawn(async move {
                let Ok(client) = on_client_upgrade.await else {
                    return;
                };
                let mut client = hyper_util::rt::TokioIo::new(client);
                if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut kubelet).await {
                    tracing::debug!(error = %e, "node stream ended with an error");
                }
            });
            Ok(response)
        }
        Answer::Response(response) => {
            // The kubelet's refusal as it gave it (kubectl shows "unable to upgrade connection: …").
            let (parts, body) = response.into_parts();
            let mut out = Response::new(Body::new(body));
            *out.status_mut() = parts.status;
            if let Some(v) = parts.headers.get(header::CONTENT_TYPE) {
                out.headers_mut().insert(header::CONTENT_TYPE, v.clone());
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn container_choice_matches_kube_apiserver() {
        let pod = json!({"spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(
            choose_container(&pod, "web", None).unwrap_err().message,
            "a container name must be specified for pod web, choose one of: [init a b]"
        );
        assert_eq!(choose_container(&pod, "web", Some("init")).unwrap(), "init");
        assert_eq!(
            choose_container(&pod, "web", Some("zz"))
                .unwrap_err()
                .message,
            "container zz is not valid for pod web"
        );
        let single = json!({"spec": {"containers": [{"name": "only"}]}});
        assert_eq!(choose_container(&single, "p", None).unwrap(), "only");
    }

    #[test]
    fn log_status_messages() {
        let waiting = json!({"status": {"containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}]}});
        assert_eq!(
            log_status_error(&waiting, "p", "c", false).unwrap(),
            "container \"c\" in pod \"p\" is waiting to start: ContainerCreating"
        );
        assert_eq!(
            log_status_error(&waiting, "p", "c", true).unwrap(),
            "previous terminated container \"c\" in pod \"p\" not found"
        );
        let pull = json!({"status": {"containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}});
        assert!(
            log_status_error(&pull, "p", "c", false)
                .unwrap()
                .ends_with("trying and failing to pull image")
        );
        let running =
            json!({"status": {"containerStatuses": [{"name": "c", "state": {"running": {}}}]}});
        assert!(log_status_error(&running, "p", "c", false).is_none());
        let crashed = json!({"status": {"containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"containerID": "containerd://x"}}}]}});
        assert!(log_status_error(&crashed, "p", "c", false).is_none());
        assert!(log_status_error(&crashed, "p", "c", true).is_none());
        let fresh = json!({"status": {"phase": "Pending"}});
        assert!(
            log_status_error(&fresh, "p", "c", false)
                .unwrap()
                .contains("ContainerCreating")
        );
    }

    #[test]
    fn kubelet_address_preference_and_port() {
        let node = json!({"status": {
            "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.5"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 12345}}}});
        let (host, port) = kubelet_address(&node).unwrap();
        assert!(matches!(host, Host::Ip(ip) if ip.to_string() == "10.0.0.5"));
        assert_eq!(port, 12345);
        let bare = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}});
        let (host, port) = kubelet_address(&bare).unwrap();
        assert!(matches!(host, Host::Name(ref n) if n == "n1"));
        assert_eq!(port, 10250);
    }
}
