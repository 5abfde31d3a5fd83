//! Probes and lifecycle handlers: exec (CRI `ExecSync`), httpGet (from the node to the pod IP,
//! HTTP/1.1 over a plain TCP connection; HTTPS is refused with a clear result), tcpSocket; and
//! the per-container state machine with initialDelay/period/timeout/success/failure thresholds.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, ExecAction, HTTPGetAction, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
}

impl<'a> Handler<'a> {
    pub fn of_probe(p: &'a Probe) -> Handler<'a> {
        Handler {
            exec: p.exec.as_ref(),
            http_get: p.http_get.as_ref(),
            tcp_socket: p.tcp_socket.as_ref(),
        }
    }

    pub fn of_hook(h: &'a k8s_openapi::api::core::v1::LifecycleHandler) -> Handler<'a> {
        Handler {
            exec: h.exec.as_ref(),
            http_get: h.http_get.as_ref(),
            tcp_socket: h.tcp_socket.as_ref(),
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
        if http.scheme.as_deref() == Some("HTTPS") {
            return Outcome::Failure("HTTPS probes are not supported by this kubelet".into());
        }
        let path = http.path.clone().unwrap_or_else(|| "/".into());
        let headers: Vec<(String, String)> = http
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        return match tokio::time::timeout(timeout, http_get(&host, port, &path, &headers)).await {
            Ok(Ok(code)) if (200..400).contains(&code) => Outcome::Success,
            Ok(Ok(code)) => Outcome::Failure(format!("HTTP probe failed with statuscode: {code}")),
            Ok(Err(e)) => Outcome::Failure(format!(
                "Get \"http://{}{path}\": {e}",
                join_host_port(&host, port)
            )),
            Err(_) => Outcome::Failure(format!(
                "Get \"http://{}{path}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                join_host_port(&host, port)
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
    Outcome::Failure("missing probe handler".into())
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// One HTTP/1.1 GET; returns the status code.
async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> std::io::Result<u16> {
    let mut stream = tokio::net::TcpStream::connect(join_host_port(host, port)).await?;
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        join_host_port(host, port)
    );
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("user-agent"))
    {
        request.push_str(&format!(
            "User-Agent: kube-probe/{}\r\n",
            crate::apiserver::KUBE_VERSION
                .1
                .parse::<u32>()
                .map(|m| format!("1.{m}"))
                .unwrap_or_default()
        ));
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
            http_get("127.0.0.1", port, "/healthz", &[]).await.unwrap(),
            200
        );
        assert_eq!(
            http_get("127.0.0.1", port, "/healthz", &[]).await.unwrap(),
            503
        );
    }
}
