//! `/exec`, `/attach`, `/portForward`: ask CRI for a streaming URL on the runtime's stream
//! server (containerd's is kubelet-compatible), then connect the client to it.
//!
//! * SPDY/3.1 (kubectl ≤ 1.29, and the fallback of newer ones): the upgraded connection is
//!   relayed byte for byte — no SPDY needs to be understood.
//! * WebSocket `v5.channel.k8s.io`/`v4.channel.k8s.io` (exec/attach, kubectl ≥ 1.30): the
//!   WebSocket is terminated here and translated to SPDY towards the stream server, because
//!   the runtime's WebSocket support predates v5 and cannot half-close stdin.
//! * WebSocket `SPDY/3.1+portforward.k8s.io` (port-forward, kubectl ≥ 1.31): binary messages
//!   carry SPDY frames; unwrapped into a byte stream towards the stream server's SPDY.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use k8s_cri::v1 as cri;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::cri::{self as lookup, Runtime};
use super::text;
use crate::streaming::upgrade::{self, Answer, Upgraded};
use crate::streaming::{self, channel, idle, spdy, websocket};

/// The connection to the runtime's stream server, stamped for idle detection.
type Backend = idle::Tracked<Upgraded>;

/// Which streaming endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Exec,
    Attach,
    PortForward,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Exec => "exec",
            Kind::Attach => "attach",
            Kind::PortForward => "portforward",
        }
    }
}

/// What the client asked for (path and query of the kubelet URL).
#[derive(Debug, Clone, Default)]
pub struct StreamTarget {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
    pub ports: Vec<i32>,
}

impl StreamTarget {
    /// Reads `command`, `stdin`, `stdout`, `stderr`, `tty` (`input`/`output`/`error` are the
    /// kubelet's older aliases) and `port` from the query.
    pub fn apply_query(&mut self, pairs: &[(String, String)]) -> Result<(), String> {
        for (key, value) in pairs {
            let on = matches!(value.as_str(), "" | "1" | "true" | "True" | "TRUE");
            match key.as_str() {
                "command" => self.command.push(value.clone()),
                "stdin" | "input" => self.stdin = on,
                "stdout" | "output" => self.stdout = on,
                "stderr" | "error" => self.stderr = on,
                "tty" => self.tty = on,
                "port" | "ports" => {
                    for port in value.split(',').filter(|p| !p.is_empty()) {
                        self.ports.push(
                            port.trim()
                                .parse()
                                .map_err(|_| format!("invalid port {port:?}"))?,
                        );
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

enum Mode {
    Spdy,
    WebSocket { key: String, protocol: &'static str },
}

fn mode(headers: &http::HeaderMap, kind: Kind) -> Result<Mode, Box<Response<Body>>> {
    if websocket::is_upgrade_request(headers) {
        let offered = websocket::offered_protocols(headers);
        let supported: &[&'static str] = match kind {
            Kind::PortForward => &[streaming::PORT_FORWARD_TUNNEL],
            _ => &[streaming::CHANNEL_V5, streaming::CHANNEL_V4],
        };
        let Some(protocol) = supported
            .iter()
            .find(|p| offered.iter().any(|o| o == *p))
            .copied()
        else {
            return Err(Box::new(text(
                StatusCode::BAD_REQUEST,
                format!(
                    "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports {supported:?}"
                ),
            )));
        };
        let Some(key) = headers
            .get("sec-websocket-key")
            .and_then(|v| v.to_str().ok())
        else {
            return Err(Box::new(text(
                StatusCode::BAD_REQUEST,
                "websocket upgrade without Sec-WebSocket-Key",
            )));
        };
        return Ok(Mode::WebSocket {
            key: key.to_string(),
            protocol,
        });
    }
    if websocket::header_has_token(headers, header::UPGRADE, "SPDY/3.1") {
        return Ok(Mode::Spdy);
    }
    Err(Box::new(text(
        StatusCode::BAD_REQUEST,
        "Upgrade request required",
    )))
}

/// Serves one exec/attach/port-forward request; the relay is dropped (both connections
/// closed) once no bytes have moved either way for `idle_timeout`.
pub async fn serve(
    mut req: Request<Incoming>,
    mut runtime: Runtime,
    target: StreamTarget,
    kind: Kind,
    idle_timeout: Option<Duration>,
) -> Response<Body> {
    let mode = match mode(req.headers(), kind) {
        Ok(m) => m,
        Err(response) => return *response,
    };
    if kind == Kind::Exec && target.command.is_empty() {
        return text(
            StatusCode::BAD_REQUEST,
            "you must specify at least one command for the container",
        );
    }
    let url = match streaming_url(&mut runtime, &target, kind).await {
        Ok(url) => url,
        Err(response) => return response,
    };
    let on_client_upgrade = hyper::upgrade::on(&mut req);
    let offered_spdy: Vec<String> = req
        .headers()
        .get_all(streaming::STREAM_PROTOCOL_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .collect();
    let backend_protocols = match (&mode, kind) {
        (Mode::Spdy, _) => offered_spdy,
        (Mode::WebSocket { .. }, Kind::PortForward) => vec![streaming::PORT_FORWARD.to_string()],
        (Mode::WebSocket { .. }, _) => vec![streaming::CHANNEL_V4.to_string()],
    };
    let (parts, backend) = match dial_stream_server(&url, &backend_protocols).await {
        Ok(Answer::Switched(parts, io)) => (parts, io),
        Ok(Answer::Response(response)) => {
            let (parts, body) = response.into_parts();
            tracing::debug!(status = %parts.status, kind = kind.name(), "stream server refused the upgrade");
            return Response::from_parts(parts, Body::new(body));
        }
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error connecting to the container runtime's stream server: {e}"),
            );
        }
    };
    // Every byte either way crosses the backend connection, so stamping it is enough.
    let activity = Arc::new(idle::Activity::default());
    let backend = idle::Tracked::new(backend, activity.clone());
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    match mode {
        Mode::Spdy => {
            headers.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
            if let Some(v) = parts.headers.get(streaming::STREAM_PROTOCOL_HEADER) {
                headers.insert(streaming::STREAM_PROTOCOL_HEADER, v.clone());
            }
            tokio::spawn(async move {
                let Ok(client) = on_client_upgrade.await else {
                    return;
                };
                let mut client = hyper_util::rt::TokioIo::new(client);
                let mut backend = backend;
                let relay = async {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
                    Ok(())
                };
                let _ = until_idle(relay, &activity, idle_timeout, kind).await;
            });
        }
        Mode::WebSocket { key, protocol } => {
            headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
            if let Ok(v) = HeaderValue::from_str(&websocket::accept_key(&key)) {
                headers.insert("sec-websocket-accept", v);
            }
            headers.insert("sec-websocket-protocol", HeaderValue::from_static(protocol));
            tokio::spawn(async move {
                let Ok(client) = on_client_upgrade.await else {
                    return;
                };
                let client = hyper_util::rt::TokioIo::new(client);
                let relay = async {
                    if kind == Kind::PortForward {
                        tunnel_port_forward(client, backend).await
                    } else {
                        bridge_remote_command(client, backend, &target).await
                    }
                };
                if let Err(e) = until_idle(relay, &activity, idle_timeout, kind).await {
                    tracing::debug!(error = %e, kind = kind.name(), "stream ended with an error");
                }
            });
        }
    }
    response
}

/// Runs `relay` to its end, or until no bytes have moved for `idle_timeout`: then the
/// relay is dropped, which closes both connections.
async fn until_idle(
    relay: impl std::future::Future<Output = Result<(), BridgeError>>,
    activity: &idle::Activity,
    idle_timeout: Option<Duration>,
    kind: Kind,
) -> Result<(), BridgeError> {
    let Some(timeout) = idle_timeout.filter(|t| !t.is_zero()) else {
        return relay.await;
    };
    tokio::select! {
        result = relay => result,
        () = activity.idle_for(timeout) => {
            tracing::info!(kind = kind.name(), ?timeout, "closing an idle stream (streaming-connection-idle-timeout)");
            Ok(())
        }
    }
}

async fn streaming_url(
    runtime: &mut Runtime,
    target: &StreamTarget,
    kind: Kind,
) -> Result<String, Response<Body>> {
    let not_found = |e: lookup::LookupError| match e {
        lookup::LookupError::Runtime(status) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("container runtime: {}", status.message()),
        ),
        other => text(StatusCode::NOT_FOUND, other.to_string()),
    };
    let runtime_error = |status: tonic::Status| {
        text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("container runtime: {}", status.message()),
        )
    };
    match kind {
        Kind::PortForward => {
            let sandbox = lookup::find_sandbox(runtime, &target.namespace, &target.pod)
                .await
                .map_err(not_found)?;
            Ok(runtime
                .port_forward(cri::PortForwardRequest {
                    pod_sandbox_id: sandbox.id,
                    port: target.ports.clone(),
                })
                .await
                .map_err(runtime_error)?
                .into_inner()
                .url)
        }
        Kind::Exec | Kind::Attach => {
            let container = lookup::current_container(
                runtime,
                &target.namespace,
                &target.pod,
                &target.container,
            )
            .await
            .map_err(not_found)?;
            if container.state != cri::ContainerState::ContainerRunning as i32 {
                return Err(text(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "container {} is not running (state={})",
                        container.id,
                        cri::ContainerState::try_from(container.state)
                            .map_or("UNKNOWN", |s| s.as_str_name())
                    ),
                ));
            }
            // A TTY merges stderr into stdout; the runtime refuses both at once.
            let stderr = target.stderr && !target.tty;
            let url = if kind == Kind::Exec {
                runtime
                    .exec(cri::ExecRequest {
                        container_id: container.id,
                        cmd: target.command.clone(),
                        tty: target.tty,
                        stdin: target.stdin,
                        stdout: target.stdout,
                        stderr,
                    })
                    .await
                    .map_err(runtime_error)?
                    .into_inner()
                    .url
            } else {
                runtime
                    .attach(cri::AttachRequest {
                        container_id: container.id,
                        stdin: target.stdin,
                        tty: target.tty,
                        stdout: target.stdout,
                        stderr,
                    })
                    .await
                    .map_err(runtime_error)?
                    .into_inner()
                    .url
            };
            Ok(url)
        }
    }
}

/// Errors while reaching the stream server.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("invalid streaming URL {url:?}")]
    Url { url: String },
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Upgrade(#[from] upgrade::UpgradeError),
    #[error("building the request: {0}")]
    Request(#[from] http::Error),
}

/// Asks the stream server at `url` to switch to SPDY/3.1 with one of `protocols`.
async fn dial_stream_server(url: &str, protocols: &[String]) -> Result<Answer, DialError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| DialError::Url { url: url.into() })?;
    let (Some(authority), Some(path)) = (uri.authority(), uri.path_and_query()) else {
        return Err(DialError::Url { url: url.into() });
    };
    if uri.scheme_str() != Some("http") {
        // containerd serves streams over TLS only with enable_tls_streaming, which we never set.
        return Err(DialError::Url { url: url.into() });
    }
    let addr = authority.as_str().to_string();
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|source| DialError::Connect {
            addr: addr.clone(),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    let mut builder = Request::builder()
        .method(Method::POST)
        .uri(path.as_str())
        .header(header::HOST, addr.as_str())
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "SPDY/3.1");
    for protocol in protocols {
        builder = builder.header(streaming::STREAM_PROTOCOL_HEADER, protocol.as_str());
    }
    let request = builder.body(http_body_util::Empty::new())?;
    Ok(upgrade::send(tcp, request).await?)
}

/// Errors of a bridged stream.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    WebSocket(#[from] websocket::WsError),
    #[error(transparent)]
    Spdy(#[from] spdy::SpdyError),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// WebSocket v4/v5 remote command ⇄ SPDY v4 remote command.
async fn bridge_remote_command(
    client: Upgraded,
    backend: Backend,
    target: &StreamTarget,
) -> Result<(), BridgeError> {
    let (mut ws_rx, ws_tx) = websocket::server(client);
    let (mut spdy_rx, spdy_tx) = tokio::io::split(backend);
    let spdy_tx = std::sync::Arc::new(tokio::sync::Mutex::new(spdy_tx));

    // Open the streams in client-go's order: error first, then stdin, stdout, stderr, resize.
    let mut encoder = spdy::Encoder::new();
    let mut next_id = 1u32;
    let mut open = |wanted: bool| -> Option<u32> {
        wanted.then(|| {
            let id = next_id;
            next_id += 2;
            id
        })
    };
    let error_id = open(true);
    let stdin_id = open(target.stdin);
    let stdout_id = open(target.stdout);
    let stderr_id = open(target.stderr && !target.tty);
    let resize_id = open(target.tty);
    let mut opening = Vec::new();
    for (kind, id) in [
        ("error", error_id),
        ("stdin", stdin_id),
        ("stdout", stdout_id),
        ("stderr", stderr_id),
        ("resize", resize_id),
    ] {
        if let Some(id) = id {
            opening.extend(encoder.syn_stream(id, &[("streamtype", kind)], false)?);
        }
    }
    spdy_tx.lock().await.write_all(&opening).await?;

    // As the kubelet does: an empty message on the lowest writable channel says "connected".
    let hello = if stdout_id.is_some() {
        channel::STDOUT
    } else if stderr_id.is_some() {
        channel::STDERR
    } else {
        channel::ERROR
    };
    ws_tx.binary(&[hello]).await?;

    let to_backend = {
        let spdy_tx = spdy_tx.clone();
        async move {
            let mut stdin_closed = false;
            while let Some(message) = ws_rx.next().await? {
                let websocket::Message::Binary(data) = message else {
                    continue;
                };
                let Some((&chan, payload)) = data.split_first() else {
                    continue;
                };
                let frames = match chan {
                    channel::STDIN if !stdin_closed => {
                        stdin_id.map(|id| spdy::data_frames(id, payload, false))
                    }
                    channel::RESIZE => resize_id.map(|id| spdy::data_frames(id, payload, false)),
                    channel::CLOSE if payload.first() == Some(&channel::STDIN) && !stdin_closed => {
                        stdin_closed = true;
                        stdin_id.map(|id| spdy::data_frames(id, &[], true))
                    }
                    _ => None,
                };
                if let Some(frames) = frames {
                    spdy_tx.lock().await.write_all(&frames).await?;
                }
            }
            Ok::<_, BridgeError>(())
        }
    };
    let from_backend = {
        let ws_tx = ws_tx.clone();
        let spdy_tx = spdy_tx.clone();
        async move {
            while let Some(frame) = spdy::read_frame(&mut spdy_rx).await? {
                match frame {
                    spdy::Frame::Data {
                        stream_id, data, ..
                    } => {
                        let chan = if Some(stream_id) == stdout_id {
                            channel::STDOUT
                        } else if Some(stream_id) == stderr_id {
                            channel::STDERR
                        } else if Some(stream_id) == error_id {
                            channel::ERROR
                        } else {
                            continue;
                        };
                        if data.is_empty() {
                            continue;
                        }
                        let mut message = Vec::with_capacity(data.len() + 1);
                        message.push(chan);
                        message.extend_from_slice(&data);
                        ws_tx.binary(&message).await?;
                    }
                    spdy::Frame::Control {
                        kind: spdy::TYPE_PING,
                        data,
                        ..
                    } if data.len() == 4 => {
                        let id = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                        spdy_tx.lock().await.write_all(&spdy::ping(id)).await?;
                    }
                    spdy::Frame::Control {
                        kind: spdy::TYPE_GOAWAY,
                        ..
                    } => break,
                    spdy::Frame::Control { .. } => {}
                }
            }
            Ok::<_, BridgeError>(())
        }
    };
    // The command is over when the runtime closes its side (after writing the status);
    // the client going away ends it too.
    let result = tokio::select! {
        r = from_backend => r,
        r = to_backend => r,
    };
    ws_tx.close(1000, "").await;
    {
        let mut tx = spdy_tx.lock().await;
        let _ = tx.write_all(&spdy::goaway(0)).await;
        let _ = tx.shutdown().await;
    }
    result
}

/// WebSocket-tunnelled SPDY (port-forward) ⇄ the stream server's SPDY.
async fn tunnel_port_forward(client: Upgraded, backend: Backend) -> Result<(), BridgeError> {
    let (mut ws_rx, ws_tx) = websocket::server(client);
    let (mut backend_rx, mut backend_tx) = tokio::io::split(backend);
    let up = async move {
        while let Some(message) = ws_rx.next().await? {
            if let websocket::Message::Binary(data) = message {
                backend_tx.write_all(&data).await?;
            }
        }
        let _ = backend_tx.shutdown().await;
        Ok::<_, BridgeError>(())
    };
    let down = {
        let ws_tx = ws_tx.clone();
        async move {
            let mut buffer = vec![0u8; 32 * 1024];
            loop {
                let n = backend_rx.read(&mut buffer).await?;
                if n == 0 {
                    return Ok::<_, BridgeError>(());
                }
                ws_tx.binary(&buffer[..n]).await?;
            }
        }
    };
    let result = tokio::select! {
        r = up => r,
        r = down => r,
    };
    ws_tx.close(1000, "").await;
    result
}
