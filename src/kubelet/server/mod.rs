//! The kubelet's HTTPS API on :10250: `/healthz`, `/pods`, `/stats/summary`,
//! `/containerLogs/<ns>/<pod>/<container>`, `/exec/…`, `/attach/…`, `/portForward/<ns>/<pod>`.
//!
//! TLS with the kubelet's serving certificate; a client certificate signed by the client CA is
//! required (401 without one) and only the API server's identity is served (403 otherwise).
//! Everything about pods comes from CRI (containers found by the kubelet's labels) and the CRI
//! log files; it may not touch the API server, the store or containerd's native API.

pub mod cri;
pub mod logs;
pub mod stats;
pub mod stream;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The user the API server presents to kubelets (`client-kube-apiserver`, see `pki::server`).
pub const APISERVER_USER: &str = "system:apiserver";

/// Everything the kubelet server needs.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Usually `0.0.0.0:10250`.
    pub listen: SocketAddr,
    /// The serving certificate; the agent swaps in a renewed one without a restart.
    pub serving: crate::pki::live::LiveCert,
    /// Only client certificates from this CA are accepted.
    pub client_ca_pem: String,
    /// The CRI socket.
    pub cri_endpoint: PathBuf,
    /// Root of the pod log tree (`/var/log/pods`), used when CRI reports no log path.
    pub pod_log_dir: PathBuf,
    /// `--kubelet-arg streaming-connection-idle-timeout`: exec/attach/port-forward streams
    /// with no bytes either way for this long are closed (`None`: never).
    pub stream_idle_timeout: Option<Duration>,
}

struct State {
    runtime: cri::Runtime,
    pod_log_dir: PathBuf,
    node_name: String,
    cpu: stats::CpuSampler,
    stream_idle_timeout: Option<Duration>,
}

/// How long a client may take to send a request's headers (kube-apiserver's and the
/// kubelet's 32 s in Go's `ReadHeaderTimeout`); an anonymous client can open a TLS
/// connection before it is refused, so this bounds what it can hold.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);

/// Binds and serves until the task is dropped or the listener fails.
pub async fn serve(config: ServerConfig) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding the kubelet server to {}", config.listen))?;
    serve_on(listener, config).await
}

/// Serves on an already bound listener (tests bind port 0 first).
pub async fn serve_on(listener: TcpListener, config: ServerConfig) -> anyhow::Result<()> {
    let tls = tls_config(&config)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let state = Arc::new(State {
        runtime: cri::connect_lazy(&config.cri_endpoint),
        pod_log_dir: config.pod_log_dir.clone(),
        node_name: node_name_of(&config.serving.issued().cert_pem).unwrap_or_else(hostname),
        cpu: stats::CpuSampler::default(),
        stream_idle_timeout: config.stream_idle_timeout,
    });
    tracing::info!(address = %listener.local_addr().map_or(config.listen, |a| a), "kubelet server listening");
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: back off rather than spin.
                tracing::warn!(error = %e, "kubelet server accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let tls =
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "kubelet server TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
            let user = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(|cert| common_name(cert));
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let state = state.clone();
                let user = user.clone();
                async move { Ok::<_, Infallible>(dispatch(&state, user.as_deref(), req).await) }
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            // Slowloris: as on the API server, a client gets HEADER_READ_TIMEOUT to send a
            // request's headers, which also ends an idle HTTP/1.1 keep-alive connection.
            builder
                .http1()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "kubelet server connection ended with an error");
            }
        });
    }
}

fn tls_config(config: &ServerConfig) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(config.client_ca_pem.as_bytes()) {
        roots
            .add(ca.context("parsing the client CA")?)
            .context("adding the client CA")?;
    }
    // Unauthenticated handshakes are let through so they get a 401 they can read, as the
    // kubelet answers, instead of a TLS alert.
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .context("building the client certificate verifier")?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("choosing TLS versions")?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(config.serving.clone()));
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(tls))
}

fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?.as_str().ok()?;
    Some(cn.to_string())
}

/// The node name from the serving certificate (`system:node:<name>` or a bare name).
fn node_name_of(cert_pem: &str) -> Option<String> {
    let der = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .next()?
        .ok()?;
    let cn = common_name(&der)?;
    let name = cn.strip_prefix("system:node:").unwrap_or(&cn).to_string();
    (!name.is_empty()).then_some(name)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

fn text(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut response = Response::new(Body::from(message.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn json(value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::from(serde_json::to_vec(value).unwrap_or_default()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn dispatch(state: &State, user: Option<&str>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let Some(user) = user else {
        return text(StatusCode::UNAUTHORIZED, "Unauthorized");
    };
    if user != APISERVER_USER {
        let resource = segments.first().map_or("", String::as_str);
        let subresource = match resource {
            "stats" => "stats",
            "healthz" => "healthz",
            "pods" => "pods",
            _ => "proxy",
        };
        return text(
            StatusCode::FORBIDDEN,
            format!(
                "Forbidden (user={user}, verb={}, resource=nodes, subresource(s)=[{subresource}])",
                if req.method() == Method::GET {
                    "get"
                } else {
                    "create"
                }
            ),
        );
    }
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(req.uri().query().unwrap_or("")).unwrap_or_default();
    let parts: Vec<&str> = segments.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let response = match (req.method().clone(), parts.as_slice()) {
        (Method::GET | Method::HEAD, ["healthz"]) => text(StatusCode::OK, "ok"),
        (Method::GET, ["pods"]) => match stats::pod_list(&mut state.runtime.clone()).await {
            Ok(list) => json(&list),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        },
        (Method::GET, ["stats", "summary"]) => {
            match stats::summary(&mut state.runtime.clone(), &state.node_name, &state.cpu).await {
                Ok(summary) => json(&summary),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            }
        }
        (Method::GET, ["containerLogs", namespace, pod, container]) => {
            container_logs(state, namespace, pod, container, &pairs).await
        }
        (Method::GET | Method::POST, [kind @ ("exec" | "attach"), namespace, pod, rest @ ..])
            if matches!(rest.len(), 1 | 2) =>
        {
            // `/exec/<ns>/<pod>/<container>` or `/exec/<ns>/<pod>/<uid>/<container>`.
            let container = rest[rest.len() - 1];
            let mut target = stream::StreamTarget {
                namespace: namespace.to_string(),
                pod: pod.to_string(),
                container: container.to_string(),
                ..Default::default()
            };
            let kind = if *kind == "exec" {
                stream::Kind::Exec
            } else {
                stream::Kind::Attach
            };
            match target.apply_query(&pairs) {
                Ok(()) => {
                    stream::serve(
                        req,
                        state.runtime.clone(),
                        target,
                        kind,
                        state.stream_idle_timeout,
                    )
                    .await
                }
                Err(e) => text(StatusCode::BAD_REQUEST, e),
            }
        }
        (Method::GET | Method::POST, ["portForward", namespace, pod, ..]) => {
            let mut target = stream::StreamTarget {
                namespace: namespace.to_string(),
                pod: pod.to_string(),
                ..Default::default()
            };
            match target.apply_query(&pairs) {
                Ok(()) => {
                    stream::serve(
                        req,
                        state.runtime.clone(),
                        target,
                        stream::Kind::PortForward,
                        state.stream_idle_timeout,
                    )
                    .await
                }
                Err(e) => text(StatusCode::BAD_REQUEST, e),
            }
        }
        (
            _,
            [
                "healthz" | "pods" | "containerLogs" | "exec" | "attach" | "portForward",
                ..,
            ],
        )
        | (_, ["stats", "summary"]) => {
            text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed")
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found"),
    };
    tracing::debug!(%path, code = response.status().as_u16(), took_ms = started.elapsed().as_millis() as u64, "kubelet request");
    response
}

fn percent_decode(segment: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(hi << 4 | lo);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn container_logs(
    state: &State,
    namespace: &str,
    pod: &str,
    container: &str,
    pairs: &[(String, String)],
) -> Response<Body> {
    let options = match logs::LogOptions::from_query(pairs, jiff::Timestamp::now()) {
        Ok(o) => o,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let mut runtime = state.runtime.clone();
    let instances = match cri::find_containers(&mut runtime, namespace, pod, container).await {
        Ok(items) => items,
        Err(cri::LookupError::Runtime(status)) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("container runtime: {}", status.message()),
            );
        }
        Err(e) => return text(StatusCode::NOT_FOUND, e.to_string()),
    };
    let chosen = if options.previous {
        match instances.get(1) {
            Some(c) => c.clone(),
            None => {
                return text(
                    StatusCode::BAD_REQUEST,
                    cri::LookupError::NoPrevious {
                        pod: pod.to_string(),
                        container: container.to_string(),
                    }
                    .to_string(),
                );
            }
        }
    } else {
        instances[0].clone()
    };
    let log_path = match cri::container_status(&mut runtime, &chosen.id).await {
        Ok(Some(status)) if !status.log_path.is_empty() => PathBuf::from(status.log_path),
        Ok(_) => {
            let uid = chosen
                .labels
                .get(cri::LABEL_POD_UID)
                .cloned()
                .unwrap_or_default();
            state
                .pod_log_dir
                .join(format!("{namespace}_{pod}_{uid}"))
                .join(container)
                .join(format!("{}.log", cri::restart_count(&chosen)))
        }
        Err(status) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("container runtime: {}", status.message()),
            );
        }
    };
    if let Err(e) = tokio::fs::metadata(&log_path).await {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "failed to open log file {:?}: {e}",
                log_path.display().to_string()
            ),
        );
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(16);
    let id = chosen.id.clone();
    tokio::spawn(async move {
        let still_running = move || {
            let mut runtime = runtime.clone();
            let id = id.clone();
            async move { cri::is_running(&mut runtime, &id).await }
        };
        if let Err(e) = logs::stream_file(&log_path, &options, still_running, tx).await {
            tracing::debug!(path = %log_path.display(), error = %e, "reading a container log");
        }
    });
    let stream =
        tokio_stream::StreamExt::map(tokio_stream::wrappers::ReceiverStream::new(rx), |b| {
            Ok::<_, Infallible>(b)
        });
    let mut response = Response::new(Body::from_stream(stream));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Fb"), "a/b");
        assert_eq!(percent_decode("plain"), "plain");
        assert_eq!(percent_decode("bad%zz"), "bad%zz");
        assert_eq!(percent_decode("end%2"), "end%2");
    }
}
