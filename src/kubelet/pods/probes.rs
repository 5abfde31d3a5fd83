//! Probes and lifecycle handlers: exec (CRI `ExecSync`), httpGet (from the node to the pod IP,
//! HTTP/1.1 over TCP, or over TLS for `scheme: HTTPS` without verifying the certificate, as the
//! kubelet does), tcpSocket, grpc (`grpc.health.v1.Health/Check` over plaintext HTTP/2, as the
//! kubelet's gRPC probe); and the per-container state machine with
//! initialDelay/period/timeout/success/failure thresholds.
//!
//! Talks to the pod (its IP) and CRI only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Container, ExecAction, GRPCAction, HTTPGetAction, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::kubelet::cri::Cri;

/// The outcome of one probe run: success, or failure with the message the kubelet reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Liveness,
    Readiness,
    Startup,
}

impl Kind {
    pub fn title(self) -> &'static str {
        match self {
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
            Kind::Startup => "Startup",
        }
    }
}

/// The three things a handler can do (probe or lifecycle hook).
pub struct Handler<'a> {
    pub exec: Option<&'a ExecAction>,
    pub http_get: Option<&'a HTTPGetAction>,
    pub tcp_socket: Option<&'a TCPSocketAction>,
    /// Probes only: lifecycle hooks have no gRPC handler.
    pub grpc: Option<&'a GRPCAction>,
}

impl<'a> Handler<'a> {
    pub fn of_probe(p: &'a Probe) -> Handler<'a> {
        Handler {
            exec: p.exec.as_ref(),
            http_get: p.http_get.as_ref(),
            tcp_socket: p.tcp_socket.as_ref(),
            grpc: p.grpc.as_ref(),
        }
    }

    pub fn of_hook(h: &'a k8s_openapi::api::core::v1::LifecycleHandler) -> Handler<'a> {
        Handler {
            exec: h.exec.as_ref(),
            http_get: h.http_get.as_ref(),
            tcp_socket: h.tcp_socket.as_ref(),
            grpc: None,
        }
    }
}

/// Resolves a named or numbered port against the container's ports.
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port number: {n}")),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<u16>() {
                return Ok(n);
            }
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("couldn't find port: {name} in {}", container.name))
        }
    }
}

/// Runs a handler against a running container.
pub async fn run(
    cri: &Cri,
    handler: &Handler<'_>,
    container: &Container,
    container_id: &str,
    pod_ip: &str,
    timeout: Duration,
) -> Outcome {
    if let Some(exec) = handler.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        return match cri.exec_sync(container_id, cmd, timeout).await {
            Ok(r) if r.exit_code == 0 => Outcome::Success,
            Ok(r) => {
                let mut out = String::from_utf8_lossy(&r.stdout).into_owned();
                out.push_str(&String::from_utf8_lossy(&r.stderr));
                Outcome::Failure(if out.trim().is_empty() {
                    format!(
                        "command {:?} exited with {}",
                        exec.command.clone().unwrap_or_default(),
                        r.exit_code
                    )
                } else {
                    out
                })
            }
            Err(e) if e.code() == tonic::Code::DeadlineExceeded => Outcome::Failure(format!(
                "command timed out: \"{}\" timed out after {}s",
                exec.command.clone().unwrap_or_default().join(" "),
                timeout.as_secs()
            )),
            Err(e) => Outcome::Failure(e.message()),
        };
    }
    if let Some(http) = handler.http_get {
        let port = match resolve_port(&http.port, container) {
            Ok(p) => p,
            Err(e) => return Outcome::Failure(e),
        };
        let host = http
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_string());
        let tls = http.scheme.as_deref() == Some("HTTPS");
        let scheme = if tls { "https" } else { "http" };
        let path = http.path.clone().unwrap_or_else(|| "/".into());
        let headers: Vec<(String, String)> = http
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        let url = format!("{scheme}://{}{path}", join_host_port(&host, port));
        return match tokio::time::timeout(timeout, http_get(&host, port, &path, &headers, tls))
            .await
        {
            Ok(Ok(code)) if (200..400).contains(&code) => Outcome::Success,
            Ok(Ok(code)) => Outcome::Failure(format!("HTTP probe failed with statuscode: {code}")),
            Ok(Err(e)) => Outcome::Failure(format!("Get \"{url}\": {e}")),
            Err(_) => Outcome::Failure(format!(
                "Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            )),
        };
    }
    if let Some(tcp) = handler.tcp_socket {
        let port = match resolve_port(&tcp.port, container) {
            Ok(p) => p,
            Err(e) => return Outcome::Failure(e),
        };
        let host = tcp
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_string());
        let addr = join_host_port(&host, port);
        return match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
            Ok(Ok(_)) => Outcome::Success,
            Ok(Err(e)) => Outcome::Failure(format!("dial tcp {addr}: connect: {e}")),
            Err(_) => Outcome::Failure(format!("dial tcp {addr}: i/o timeout")),
        };
    }
    if let Some(grpc) = handler.grpc {
        let Ok(port) = u16::try_from(grpc.port) else {
            return Outcome::Failure(format!("invalid port number: {}", grpc.port));
        };
        return grpc_check(pod_ip, port, grpc.service.as_deref().unwrap_or(""), timeout).await;
    }
    Outcome::Failure("missing probe handler".into())
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// One HTTP/1.1 GET (over TLS when `tls`, accepting any certificate); returns the status code.
async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
    tls: bool,
) -> std::io::Result<u16> {
    let tcp = tokio::net::TcpStream::connect(join_host_port(host, port)).await?;
    if !tls {
        return http_exchange(tcp, host, port, path, headers).await;
    }
    let connector =
        tokio_rustls::TlsConnector::from(insecure_tls_config().map_err(std::io::Error::other)?);
    // The kubelet sends the host as SNI when it is a name; an IP gets no SNI (rustls sends
    // none for IP addresses either).
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let stream = connector.connect(name, tcp).await?;
    http_exchange(stream, host, port, path, headers).await
}

/// Writes the GET request on `stream` and reads the status line of the answer.
async fn http_exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> std::io::Result<u16> {
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        join_host_port(host, port)
    );
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("user-agent"))
    {
        request.push_str(&format!("User-Agent: {}\r\n", user_agent()));
    }
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("accept"))
    {
        request.push_str("Accept: */*\r\n");
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 4096 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&buf);
    line.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed HTTP response")
        })
}

/// `kube-probe/1.<minor>`, the User-Agent of the kubelet's HTTP and gRPC probes.
fn user_agent() -> String {
    let minor = crate::apiserver::KUBE_VERSION
        .1
        .parse::<u32>()
        .map(|m| format!("1.{m}"))
        .unwrap_or_default();
    format!("kube-probe/{minor}")
}

/// The TLS client of HTTPS probes, built once.
fn insecure_tls_config() -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    if let Some(config) = CONFIG.get() {
        return Ok(config.clone());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(crate::pki::insecure::AcceptAnyServerCertificate::new(
            provider,
        ))
        .with_no_client_auth();
    Ok(CONFIG.get_or_init(|| Arc::new(config)).clone())
}

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(enumeration = "ServingStatus", tag = "1")]
    status: i32,
}

/// `grpc.health.v1.HealthCheckResponse.ServingStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
enum ServingStatus {
    Unknown = 0,
    Serving = 1,
    NotServing = 2,
    ServiceUnknown = 3,
}

impl ServingStatus {
    /// The proto enum name, as the kubelet quotes it.
    fn proto_name(status: i32) -> String {
        match ServingStatus::try_from(status) {
            Ok(ServingStatus::Unknown) => "UNKNOWN".into(),
            Ok(ServingStatus::Serving) => "SERVING".into(),
            Ok(ServingStatus::NotServing) => "NOT_SERVING".into(),
            Ok(ServingStatus::ServiceUnknown) => "SERVICE_UNKNOWN".into(),
            Err(_) => status.to_string(),
        }
    }
}

/// One `grpc.health.v1.Health/Check` call to `host:port` for `service`, worded as the
/// kubelet's gRPC prober words its results.
async fn grpc_check(host: &str, port: u16, service: &str, timeout: Duration) -> Outcome {
    let addr = join_host_port(host, port);
    let endpoint = match tonic::transport::Endpoint::from_shared(format!("http://{addr}")) {
        Ok(e) => e.user_agent(user_agent()).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let endpoint = match endpoint {
        Ok(e) => e.connect_timeout(timeout).timeout(timeout),
        Err(e) => {
            return Outcome::Failure(format!("error: failed to connect service at {addr:?}: {e}"));
        }
    };
    let channel = match tokio::time::timeout(timeout, endpoint.connect()).await {
        Ok(Ok(channel)) => channel,
        Ok(Err(e)) => {
            return Outcome::Failure(format!(
                "error: failed to connect service at {addr:?}: {}",
                error_chain(&e)
            ));
        }
        Err(_) => {
            return Outcome::Failure(format!(
                "timeout: failed to connect service {addr:?} within {}s: context deadline exceeded",
                timeout.as_secs()
            ));
        }
    };
    let mut client = tonic::client::Grpc::new(channel);
    let call = async {
        client
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(error_chain(&e)))?;
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: service.to_string(),
        });
        request.set_timeout(timeout);
        client
            .unary(
                request,
                http::uri::PathAndQuery::from_static("/grpc.health.v1.Health/Check"),
                tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default(),
            )
            .await
    };
    let response = match tokio::time::timeout(timeout, call).await {
        Ok(Ok(r)) => r.into_inner(),
        Ok(Err(status)) => {
            return Outcome::Failure(match status.code() {
                tonic::Code::Unimplemented => format!(
                    "this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                    status.message()
                ),
                tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => format!(
                    "timeout: health rpc did not complete within {}s",
                    timeout.as_secs()
                ),
                _ => format!(
                    "error: health rpc probe failed: rpc error: code = {:?} desc = {}",
                    status.code(),
                    status.message()
                ),
            });
        }
        Err(_) => {
            return Outcome::Failure(format!(
                "timeout: health rpc did not complete within {}s",
                timeout.as_secs()
            ));
        }
    };
    if response.status == ServingStatus::Serving as i32 {
        Outcome::Success
    } else {
        Outcome::Failure(format!(
            "service unhealthy (responded with {:?})",
            ServingStatus::proto_name(response.status)
        ))
    }
}

/// An error and its sources, `: `-separated (tonic's transport errors hide the cause).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A probe's running state for one container instance.
#[derive(Clone, Debug)]
pub struct ProbeState {
    pub kind: Kind,
    pub next_run: Instant,
    pub successes: i32,
    pub failures: i32,
    /// The result the thresholds settled on (`None` until the first settlement).
    pub result: Option<bool>,
}

impl ProbeState {
    pub fn new(kind: Kind, probe: &Probe, started: Instant) -> ProbeState {
        ProbeState {
            kind,
            next_run: started
                + Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0) as u64),
            successes: 0,
            failures: 0,
            result: None,
        }
    }

    /// Records an outcome; returns true when the settled result changed.
    pub fn record(&mut self, probe: &Probe, outcome: &Outcome, now: Instant) -> bool {
        let period = Duration::from_secs(probe.period_seconds.unwrap_or(10).max(1) as u64);
        self.next_run = now + period;
        let success_threshold = probe.success_threshold.unwrap_or(1).max(1);
        let failure_threshold = probe.failure_threshold.unwrap_or(3).max(1);
        let before = self.result;
        match outcome {
            Outcome::Success => {
                self.failures = 0;
                self.successes += 1;
                if self.successes >= success_threshold {
                    self.result = Some(true);
                }
            }
            Outcome::Failure(_) => {
                self.successes = 0;
                self.failures += 1;
                if self.failures >= failure_threshold {
                    self.result = Some(false);
                }
            }
        }
        before != self.result
    }
}

pub fn timeout(probe: &Probe) -> Duration {
    Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(success: i32, failure: i32) -> Probe {
        Probe {
            success_threshold: Some(success),
            failure_threshold: Some(failure),
            period_seconds: Some(1),
            initial_delay_seconds: Some(5),
            ..Default::default()
        }
    }

    #[test]
    fn thresholds() {
        let p = probe(2, 3);
        let t0 = Instant::now();
        let mut s = ProbeState::new(Kind::Readiness, &p, t0);
        assert_eq!(s.next_run, t0 + Duration::from_secs(5));
        assert!(!s.record(&p, &Outcome::Success, t0));
        assert!(
            s.record(&p, &Outcome::Success, t0),
            "second success settles"
        );
        assert_eq!(s.result, Some(true));
        let fail = Outcome::Failure("x".into());
        assert!(!s.record(&p, &fail, t0));
        assert!(!s.record(&p, &fail, t0));
        assert!(s.record(&p, &fail, t0), "third failure flips");
        assert_eq!(s.result, Some(false));
        assert_eq!(s.next_run, t0 + Duration::from_secs(1));
    }

    #[test]
    fn named_ports() {
        let c: Container = serde_json::from_value(
            serde_json::json!({"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}),
        )
        .unwrap();
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &c),
            Ok(8080)
        );
        assert_eq!(resolve_port(&IntOrString::Int(81), &c), Ok(81));
        assert!(resolve_port(&IntOrString::String("nope".into()), &c).is_err());
    }

    #[tokio::test]
    async fn http_and_tcp_against_a_local_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            for code in [200u16, 503] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).await.unwrap();
                assert!(
                    String::from_utf8_lossy(&buf[..n]).starts_with("GET /healthz HTTP/1.1\r\n")
                );
                s.write_all(format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await
                    .unwrap();
            }
        });
        assert_eq!(
            http_get("127.0.0.1", port, "/healthz", &[], false)
                .await
                .unwrap(),
            200
        );
        assert_eq!(
            http_get("127.0.0.1", port, "/healthz", &[], false)
                .await
                .unwrap(),
            503
        );
    }

    /// A self-signed TLS server (a name the client was never told about, so only a client
    /// that skips verification gets through) answering one GET with `code`.
    async fn https_server(code: u16) -> u16 {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["pod.invalid".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut s = acceptor.accept(tcp).await.unwrap();
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).await.unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("GET /ready HTTP/1.1\r\n"));
            s.write_all(format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let _ = s.shutdown().await;
        });
        port
    }

    fn https_probe(port: u16) -> Probe {
        serde_json::from_value(serde_json::json!({
            "httpGet": {"scheme": "HTTPS", "port": port, "path": "/ready"}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn https_probes_skip_certificate_verification() {
        let c: Container = serde_json::from_value(serde_json::json!({"name": "c"})).unwrap();
        let port = https_server(200).await;
        let probe = https_probe(port);
        let handler = Handler::of_probe(&probe);
        let http = handler.http_get.unwrap();
        assert_eq!(
            http_get(
                "127.0.0.1",
                resolve_port(&http.port, &c).unwrap(),
                "/ready",
                &[],
                true
            )
            .await
            .unwrap(),
            200
        );
        let port = https_server(500).await;
        assert_eq!(
            http_get("127.0.0.1", port, "/ready", &[], true)
                .await
                .unwrap(),
            500
        );
        // Plain HTTP against the TLS server is not a success.
        let port = https_server(200).await;
        assert!(
            http_get("127.0.0.1", port, "/ready", &[], false)
                .await
                .is_err_and(|e| e.kind() == std::io::ErrorKind::InvalidData)
        );
    }

    /// A `grpc.health.v1.Health` server on tonic answering `Check` from a fixed table
    /// (service name → status); unknown services get NOT_FOUND as grpc-go's health server.
    #[derive(Clone)]
    struct HealthServer(Arc<std::collections::HashMap<String, ServingStatus>>);

    impl tonic::server::NamedService for HealthServer {
        const NAME: &'static str = "grpc.health.v1.Health";
    }

    impl tonic::server::UnaryService<HealthCheckRequest> for HealthServer {
        type Response = HealthCheckResponse;
        type Future =
            std::future::Ready<Result<tonic::Response<HealthCheckResponse>, tonic::Status>>;

        fn call(&mut self, request: tonic::Request<HealthCheckRequest>) -> Self::Future {
            let service = request.into_inner().service;
            std::future::ready(match self.0.get(&service) {
                Some(status) => Ok(tonic::Response::new(HealthCheckResponse {
                    status: *status as i32,
                })),
                None => Err(tonic::Status::not_found("unknown service")),
            })
        }
    }

    impl tower::Service<http::Request<tonic::body::Body>> for HealthServer {
        type Response = http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
        >;

        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
            let this = self.clone();
            Box::pin(async move {
                if request.uri().path() != "/grpc.health.v1.Health/Check" {
                    return Ok(tonic::Status::unimplemented("unknown method").into_http());
                }
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<
                    HealthCheckResponse,
                    HealthCheckRequest,
                >::default());
                Ok(grpc.unary(this, request).await)
            })
        }
    }

    #[tokio::test]
    async fn grpc_probes_call_the_health_service() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let table = std::collections::HashMap::from([
            (String::new(), ServingStatus::Serving),
            ("db".to_string(), ServingStatus::NotServing),
        ]);
        let server = tonic::transport::Server::builder()
            .add_service(HealthServer(Arc::new(table)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
        let server = tokio::spawn(server);
        let timeout = Duration::from_secs(5);
        assert_eq!(
            grpc_check("127.0.0.1", port, "", timeout).await,
            Outcome::Success
        );
        assert_eq!(
            grpc_check("127.0.0.1", port, "db", timeout).await,
            Outcome::Failure("service unhealthy (responded with \"NOT_SERVING\")".into())
        );
        let Outcome::Failure(message) = grpc_check("127.0.0.1", port, "other", timeout).await
        else {
            panic!("an unknown service is not healthy");
        };
        assert!(
            message.starts_with("error: health rpc probe failed: rpc error: code = NotFound"),
            "{message}"
        );
        server.abort();
        // Nothing listening any more.
        let Outcome::Failure(message) = grpc_check("127.0.0.1", port, "", timeout).await else {
            panic!("a closed port is not healthy");
        };
        assert!(
            message.starts_with("error: failed to connect service at \"127.0.0.1:"),
            "{message}"
        );
    }
}
