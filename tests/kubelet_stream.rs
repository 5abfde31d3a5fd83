//! The kubelet's HTTPS API (`/containerLogs`, `/exec`, `/attach`, `/portForward`, `/pods`,
//! `/stats/summary`) against a real containerd (CRI) with busybox containers, and the API
//! server's `pods/log|exec|portforward` driven by real kubectl 1.27–1.33.
//!
//! Root only: runs its own containerd (own root, state, socket) and cleans up containers,
//! shims and mounts even when a test fails. Until the agent runs pods end to end, the pods
//! are created straight through CRI with the kubelet's labels, and the Node/Pod objects the
//! API server proxies by are written through the API.

mod support;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k3rs::kubelet::server::{ServerConfig, serve_on};
use k3rs::pki::{CertificateAuthority, IssuedCert, ServingSans};
use k3rs::streaming::{spdy, websocket};
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::Digest;
use support::slowloris::{self, Tls};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BUSYBOX: &str = "k3rs.test/stream-busybox:1";
const PAUSE: &str = "k3rs.test/stream-pause:1";

fn require_root_and_tools() {
    assert!(
        std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0")),
        "kubelet_stream tests need root (containerd, runc, mounts)"
    );
    for (tool, package) in [
        ("containerd", "containerd"),
        ("ctr", "containerd"),
        ("runc", "runc"),
    ] {
        assert!(
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success()),
            "{tool} not found: apt-get install {package}"
        );
    }
    assert!(
        Path::new("/bin/busybox").exists(),
        "/bin/busybox not found: apt-get install busybox-static"
    );
}

// ---------------------------------------------------------------------------------------------
// A tiny OCI image from the host's busybox-static.

fn tar_entry(out: &mut Vec<u8>, name: &str, kind: u8, mode: u32, link: &str, data: &[u8]) {
    let mut header = [0u8; 512];
    let put = |h: &mut [u8; 512], at: usize, len: usize, value: &[u8]| {
        h[at..at + value.len().min(len)].copy_from_slice(&value[..value.len().min(len)]);
    };
    let octal = |value: u64, width: usize| format!("{value:0w$o}\0", w = width - 1).into_bytes();
    put(&mut header, 0, 100, name.as_bytes());
    put(&mut header, 100, 8, &octal(u64::from(mode), 8));
    put(&mut header, 108, 8, &octal(0, 8));
    put(&mut header, 116, 8, &octal(0, 8));
    put(&mut header, 124, 12, &octal(data.len() as u64, 12));
    put(&mut header, 136, 12, &octal(0, 12));
    header[148..156].copy_from_slice(b"        ");
    header[156] = kind;
    put(&mut header, 157, 100, link.as_bytes());
    put(&mut header, 257, 6, b"ustar\0");
    put(&mut header, 263, 2, b"00");
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    put(&mut header, 148, 8, format!("{sum:06o}\0 ").as_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

fn digest(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(data)))
}

/// An OCI-layout tarball with two images over one busybox layer: a shell image and a pause
/// image whose process just waits.
fn busybox_images() -> Vec<u8> {
    let busybox = std::fs::read("/bin/busybox").expect("read /bin/busybox");
    let mut layer = Vec::new();
    for dir in ["bin/", "tmp/", "etc/", "www/"] {
        tar_entry(&mut layer, dir, b'5', 0o755, "", &[]);
    }
    tar_entry(&mut layer, "bin/busybox", b'0', 0o755, "", &busybox);
    for applet in [
        "sh", "sleep", "cat", "echo", "printf", "httpd", "mkdir", "env", "ls", "true", "false",
        "seq", "head", "yes", "wc",
    ] {
        tar_entry(
            &mut layer,
            &format!("bin/{applet}"),
            b'2',
            0o777,
            "busybox",
            &[],
        );
    }
    layer.extend_from_slice(&[0u8; 1024]);
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let mut blobs: Vec<(String, Vec<u8>)> = vec![(digest(&layer), layer.clone())];
    let mut manifests = Vec::new();
    for (name, cmd) in [
        (BUSYBOX, serde_json::json!(["sh"])),
        (
            PAUSE,
            serde_json::json!(["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]),
        ),
    ] {
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": arch, "os": "linux",
            "config": {"Env": ["PATH=/bin"], "Cmd": cmd, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [digest(&layer)]},
        }))
        .unwrap();
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(&config), "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(&layer), "size": layer.len()}],
        }))
        .unwrap();
        manifests.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest(&manifest), "size": manifest.len(),
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "1"},
        }));
        blobs.push((digest(&config), config));
        blobs.push((digest(&manifest), manifest));
    }
    let index =
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": manifests}))
            .unwrap();
    let mut tar = Vec::new();
    tar_entry(
        &mut tar,
        "oci-layout",
        b'0',
        0o644,
        "",
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    );
    tar_entry(&mut tar, "index.json", b'0', 0o644, "", &index);
    tar_entry(&mut tar, "blobs/", b'5', 0o755, "", &[]);
    tar_entry(&mut tar, "blobs/sha256/", b'5', 0o755, "", &[]);
    for (d, data) in &blobs {
        let hex = d.trim_start_matches("sha256:");
        tar_entry(
            &mut tar,
            &format!("blobs/sha256/{hex}"),
            b'0',
            0o644,
            "",
            data,
        );
    }
    tar.extend_from_slice(&[0u8; 1024]);
    tar
}

// ---------------------------------------------------------------------------------------------
// containerd for one test, torn down (containers, shims, mounts) on drop.

struct Containerd {
    child: std::process::Child,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Containerd {
    fn start() -> Containerd {
        require_root_and_tools();
        let dir = tempfile::Builder::new()
            .prefix("k3rs-stream-")
            .tempdir()
            .expect("temp dir");
        let root = dir.path();
        let socket = root.join("containerd.sock");
        std::fs::create_dir_all(root.join("net.d")).unwrap();
        let config = format!(
            r#"version = 2
root = "{root}/root"
state = "{root}/state"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE}"
  # Test machines (containers themselves) may not let runc lower oom_score_adj.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{root}/net.d"
"#,
            root = root.display(),
            sock = socket.display(),
        );
        std::fs::write(root.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(root.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(root.join("config.toml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start containerd");
        let containerd = Containerd { child, dir, socket };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !containerd.ctr(&["version"]).status.success() {
            assert!(
                Instant::now() < deadline,
                "containerd did not start:\n{}",
                containerd.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let images = containerd.dir.path().join("images.tar");
        std::fs::write(&images, busybox_images()).unwrap();
        let import = containerd.ctr(&["images", "import", &images.display().to_string()]);
        assert!(
            import.status.success(),
            "ctr images import: {}\n{}",
            String::from_utf8_lossy(&import.stderr),
            containerd.log()
        );
        containerd
    }

    fn ctr(&self, args: &[&str]) -> std::process::Output {
        Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .expect("run ctr")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    async fn cri(&self) -> RuntimeServiceClient<tonic::transport::Channel> {
        let path = self.socket.clone();
        let channel = tonic::transport::Endpoint::try_from("http://[::]:50051")
            .unwrap()
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await
            .expect("connect CRI");
        RuntimeServiceClient::new(channel)
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- containerd log (last 40 lines) ---");
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
        // Kill every task (the shims exit with them), remove the sandboxes, then containerd.
        let tasks = self.ctr(&["tasks", "ls", "-q"]);
        for id in String::from_utf8_lossy(&tasks.stdout).lines() {
            let _ = self.ctr(&["tasks", "kill", "-s", "SIGKILL", id]);
        }
        std::thread::sleep(Duration::from_millis(500));
        for id in String::from_utf8_lossy(&tasks.stdout).lines() {
            let _ = self.ctr(&["tasks", "delete", "-f", id]);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Shims that outlived their tasks: ours carry our socket in their command line.
        if let Ok(entries) = std::fs::read_dir("/proc") {
            let needle = self.socket.display().to_string();
            for entry in entries.flatten() {
                let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                    continue;
                };
                let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
                if String::from_utf8_lossy(&cmdline).contains(&needle) {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                }
            }
        }
        // Unmount what is left under our root (rootfs overlays, sandbox shm), deepest first.
        let root = self.dir.path().display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut ours: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|m| m.starts_with(&root))
            .collect();
        ours.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for mount in ours {
            let _ = Command::new("umount").args(["-l", mount]).status();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pods through CRI, with the kubelet's labels.

struct PodSpec<'a> {
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
    containers: &'a [(&'a str, &'a [&'a str])],
}

async fn run_pod(
    runtime: &mut RuntimeServiceClient<tonic::transport::Channel>,
    log_root: &Path,
    pod: &PodSpec<'_>,
) -> String {
    let labels = HashMap::from([
        ("io.kubernetes.pod.name".to_string(), pod.name.to_string()),
        (
            "io.kubernetes.pod.namespace".to_string(),
            pod.namespace.to_string(),
        ),
        ("io.kubernetes.pod.uid".to_string(), pod.uid.to_string()),
    ]);
    let log_directory = log_root.join(format!("{}_{}_{}", pod.namespace, pod.name, pod.uid));
    let sandbox_config = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: pod.name.into(),
            uid: pod.uid.into(),
            namespace: pod.namespace.into(),
            attempt: 0,
        }),
        log_directory: log_directory.display().to_string(),
        labels: labels.clone(),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Node as i32,
                    pid: cri::NamespaceMode::Container as i32,
                    ipc: cri::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sandbox_id = runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    for (container, command) in pod.containers {
        let mut container_labels = labels.clone();
        container_labels.insert("io.kubernetes.container.name".into(), container.to_string());
        let id = runtime
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.clone(),
                config: Some(cri::ContainerConfig {
                    metadata: Some(cri::ContainerMetadata {
                        name: container.to_string(),
                        attempt: 0,
                    }),
                    image: Some(cri::ImageSpec {
                        image: BUSYBOX.into(),
                        ..Default::default()
                    }),
                    command: command.iter().map(|s| s.to_string()).collect(),
                    log_path: format!("{container}/0.log"),
                    labels: container_labels,
                    annotations: HashMap::from([(
                        "io.kubernetes.container.restartCount".to_string(),
                        "0".to_string(),
                    )]),
                    stdin: true,
                    ..Default::default()
                }),
                sandbox_config: Some(sandbox_config.clone()),
            })
            .await
            .expect("CreateContainer")
            .into_inner()
            .container_id;
        runtime
            .start_container(cri::StartContainerRequest { container_id: id })
            .await
            .expect("StartContainer");
    }
    sandbox_id
}

// ---------------------------------------------------------------------------------------------
// TLS material and clients.

struct Pki {
    server_ca: CertificateAuthority,
    client_ca_pem: String,
    serving: IssuedCert,
    apiserver: IssuedCert,
    node: IssuedCert,
}

fn pki_from(server_ca: CertificateAuthority, client_ca: &CertificateAuthority) -> Pki {
    let mut sans = ServingSans::new();
    sans.add("127.0.0.1");
    sans.add("localhost");
    Pki {
        serving: server_ca
            .issue_serving_cert("system:node:stream-node", &sans)
            .expect("serving cert"),
        apiserver: client_ca
            .issue_client_cert("system:apiserver", &["system:masters"])
            .expect("apiserver cert"),
        node: client_ca
            .issue_client_cert("system:node:other", &["system:nodes"])
            .expect("node cert"),
        client_ca_pem: client_ca.cert_pem().to_string(),
        server_ca,
    }
}

fn client_tls(pki: &Pki, identity: Option<&IssuedCert>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki.server_ca.cert_pem().as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(cert) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
                    .collect::<Result<_, _>>()
                    .unwrap(),
                PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

async fn connect(port: u16, tls: &Arc<rustls::ClientConfig>) -> Tls {
    slowloris::connect(port, tls).await
}

/// Sends a request with `headers`, returns (status, headers text, stream positioned after the head).
async fn request_head(
    port: u16,
    tls: &Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, Tls) {
    let mut stream = connect(port, tls).await;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let mut byte = [0u8; 1];
    while !response.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.expect("read response head");
        assert!(
            n == 1,
            "connection closed in the response head: {:?}",
            String::from_utf8_lossy(&response)
        );
        response.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&response).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    (status, text, stream)
}

/// A simple GET; returns status and the whole body (read until the connection closes).
async fn get(port: u16, tls: &Arc<rustls::ClientConfig>, path: &str) -> (u16, String) {
    let (status, head, mut stream) =
        request_head(port, tls, "GET", path, &[("Connection", "close")]).await;
    let mut body = Vec::new();
    let _ = stream.read_to_end(&mut body).await;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&body)
    } else {
        body
    };
    (status, String::from_utf8_lossy(&body).to_string())
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(pos) = raw.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..pos]).unwrap_or("0").trim(), 16)
                .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = pos + 2;
        out.extend_from_slice(&raw[start..start + size]);
        raw = &raw[start + size + 2..];
    }
    out
}

fn command_query(args: &[&str], extra: &str) -> String {
    let mut pairs: Vec<(&str, &str)> = args.iter().map(|a| ("command", *a)).collect();
    pairs.push(("stdout", "1"));
    pairs.push(("stderr", "1"));
    format!("{}&{extra}", serde_urlencoded::to_string(&pairs).unwrap())
}

/// Output of a remote command: stdout, stderr, the status JSON.
#[derive(Debug, Default)]
struct Outcome {
    stdout: String,
    stderr: String,
    status: serde_json::Value,
}

impl Outcome {
    fn exit_code(&self) -> i64 {
        if self.status["status"] == "Success" {
            return 0;
        }
        assert_eq!(
            self.status["reason"], "NonZeroExitCode",
            "{:?}",
            self.status
        );
        self.status["details"]["causes"][0]["message"]
            .as_str()
            .and_then(|m| m.parse().ok())
            .expect("exit code cause")
    }
}

/// Exec over WebSocket v5, writing `stdin` (then closing it) when given.
async fn exec_websocket(
    port: u16,
    tls: &Arc<rustls::ClientConfig>,
    path: &str,
    stdin: Option<&[u8]>,
) -> Outcome {
    let (status, head, stream) = request_head(
        port,
        tls,
        "GET",
        path,
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Protocol", "v5.channel.k8s.io"),
        ],
    )
    .await;
    assert_eq!(status, 101, "{head}");
    assert!(head.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("sec-websocket-protocol: v5.channel.k8s.io"),
        "{head}"
    );
    let (mut rx, tx) = websocket::client(stream, [0x11, 0x22, 0x33, 0x44]);
    if let Some(input) = stdin {
        let mut message = vec![0u8];
        message.extend_from_slice(input);
        tx.binary(&message).await.unwrap();
        tx.binary(&[255, 0]).await.unwrap();
    }
    let mut outcome = Outcome::default();
    let mut status_bytes = Vec::new();
    while let Some(message) = tokio::time::timeout(Duration::from_secs(30), rx.next())
        .await
        .expect("exec finished in time")
        .expect("websocket frames")
    {
        let websocket::Message::Binary(data) = message else {
            continue;
        };
        let Some((channel, payload)) = data.split_first() else {
            continue;
        };
        match channel {
            1 => outcome.stdout.push_str(&String::from_utf8_lossy(payload)),
            2 => outcome.stderr.push_str(&String::from_utf8_lossy(payload)),
            3 => status_bytes.extend_from_slice(payload),
            _ => {}
        }
    }
    outcome.status = serde_json::from_slice(&status_bytes).expect("status JSON on channel 3");
    outcome
}

/// Exec over SPDY/3.1 (what kubectl ≤ 1.29 speaks), passed through to containerd.
async fn exec_spdy(port: u16, tls: &Arc<rustls::ClientConfig>, path: &str) -> Outcome {
    let (status, head, stream) = request_head(
        port,
        tls,
        "POST",
        path,
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "SPDY/3.1"),
            ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
            ("Content-Length", "0"),
        ],
    )
    .await;
    assert_eq!(status, 101, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("x-stream-protocol-version: v4.channel.k8s.io"),
        "{head}"
    );
    let (mut rx, mut tx) = tokio::io::split(stream);
    let mut encoder = spdy::Encoder::new();
    let mut open = Vec::new();
    for (id, kind) in [(1, "error"), (3, "stdout"), (5, "stderr")] {
        open.extend(
            encoder
                .syn_stream(id, &[("streamtype", kind)], false)
                .unwrap(),
        );
    }
    tx.write_all(&open).await.unwrap();
    let mut outcome = Outcome::default();
    let mut status_bytes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let frame = tokio::time::timeout(deadline - Instant::now(), spdy::read_frame(&mut rx))
            .await
            .expect("exec finished in time");
        let Ok(Some(frame)) = frame else { break };
        match frame {
            spdy::Frame::Data {
                stream_id,
                data,
                flags,
            } => {
                match stream_id {
                    1 => status_bytes.extend_from_slice(&data),
                    3 => outcome.stdout.push_str(&String::from_utf8_lossy(&data)),
                    5 => outcome.stderr.push_str(&String::from_utf8_lossy(&data)),
                    _ => {}
                }
                if stream_id == 1 && flags & spdy::FLAG_FIN != 0 {
                    break;
                }
            }
            spdy::Frame::Control {
                kind: spdy::TYPE_GOAWAY,
                ..
            } => break,
            spdy::Frame::Control { .. } => {}
        }
    }
    outcome.status =
        serde_json::from_slice(&status_bytes).expect("status JSON on the error stream");
    outcome
}

/// One HTTP GET through port-forward streams written as raw SPDY on `io`.
async fn http_over_port_forward<S>(io: S, port: u16) -> String
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut rx, mut tx) = tokio::io::split(io);
    let mut encoder = spdy::Encoder::new();
    let port = port.to_string();
    let mut open = encoder
        .syn_stream(
            1,
            &[("streamtype", "error"), ("port", &port), ("requestid", "0")],
            false,
        )
        .unwrap();
    open.extend(
        encoder
            .syn_stream(
                3,
                &[("streamtype", "data"), ("port", &port), ("requestid", "0")],
                false,
            )
            .unwrap(),
    );
    open.extend(spdy::data_frames(
        3,
        b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n",
        false,
    ));
    tx.write_all(&open).await.unwrap();
    let mut body = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let frame = tokio::time::timeout(deadline - Instant::now(), spdy::read_frame(&mut rx))
            .await
            .expect("port-forward answered in time");
        let Ok(Some(frame)) = frame else { break };
        if let spdy::Frame::Data {
            stream_id,
            data,
            flags,
        } = frame
        {
            if stream_id == 1 && !data.is_empty() {
                panic!("port-forward error: {}", String::from_utf8_lossy(&data));
            }
            if stream_id == 3 {
                body.extend_from_slice(&data);
                if flags & spdy::FLAG_FIN != 0 {
                    break;
                }
            }
        }
    }
    String::from_utf8_lossy(&body).to_string()
}

/// Adapts a WebSocket (client side) to a byte stream of binary messages, as kubectl's
/// port-forward tunnel does.
async fn websocket_tunnel(stream: Tls) -> tokio::io::DuplexStream {
    let (mine, theirs) = tokio::io::duplex(1 << 20);
    let (mut ws_rx, ws_tx) = websocket::client(stream, [7, 7, 7, 7]);
    let (mut pipe_rx, mut pipe_tx) = tokio::io::split(mine);
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 32 * 1024];
        loop {
            match pipe_rx.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if ws_tx.binary(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    tokio::spawn(async move {
        while let Ok(Some(websocket::Message::Binary(data))) = ws_rx.next().await {
            if pipe_tx.write_all(&data).await.is_err() {
                break;
            }
        }
    });
    theirs
}

async fn start_kubelet_server(containerd: &Containerd, pki: &Pki, log_root: &Path) -> u16 {
    start_kubelet_server_with(containerd, pki, log_root, None).await
}

async fn start_kubelet_server_with(
    containerd: &Containerd,
    pki: &Pki,
    log_root: &Path,
    stream_idle_timeout: Option<Duration>,
) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = ServerConfig {
        listen: listener.local_addr().unwrap(),
        serving: k3rs::pki::live::LiveCert::new(&pki.serving).unwrap(),
        client_ca_pem: pki.client_ca_pem.clone(),
        cri_endpoint: containerd.socket.clone(),
        pod_log_dir: log_root.to_path_buf(),
        stream_idle_timeout,
    };
    tokio::spawn(async move {
        if let Err(e) = serve_on(listener, config).await {
            panic!("kubelet server: {e:#}");
        }
    });
    port
}

async fn wait_for_log(
    port: u16,
    tls: &Arc<rustls::ClientConfig>,
    path: &str,
    needle: &str,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = get(port, tls, path).await;
        if status == 200 && body.contains(needle) {
            return body;
        }
        assert!(Instant::now() < deadline, "{path}: {status} {body:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

const LOGGER: &[&str] = &[
    "sh",
    "-c",
    "echo one; sleep 0.1; echo two >&2; sleep 0.1; printf 'par'; sleep 0.2; echo tial; echo four; i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.3; done",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_server_serves_logs_exec_and_port_forward_from_containerd() {
    let containerd = Containerd::start();
    let logs = tempfile::tempdir().unwrap();
    let server_ca = CertificateAuthority::generate("test-server-ca").unwrap();
    let client_ca = CertificateAuthority::generate("test-client-ca").unwrap();
    let pki = pki_from(server_ca, &client_ca);
    let port = start_kubelet_server(&containerd, &pki, logs.path()).await;
    let apiserver = client_tls(&pki, Some(&pki.apiserver));

    // Only the API server's client certificate is served.
    let (status, _) = get(port, &client_tls(&pki, None), "/healthz").await;
    assert_eq!(status, 401);
    let (status, body) = get(port, &client_tls(&pki, Some(&pki.node)), "/healthz").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("user=system:node:other"), "{body}");
    let (status, body) = get(port, &apiserver, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok"));

    let http_port = support::free_port();
    let httpd = format!(
        "mkdir -p /www && echo hello-from-pod > /www/index.html && exec httpd -f -p 127.0.0.1:{http_port} -h /www"
    );
    let mut runtime = containerd.cri().await;
    run_pod(
        &mut runtime,
        logs.path(),
        &PodSpec {
            namespace: "default",
            name: "web",
            uid: "uid-web",
            containers: &[("logger", LOGGER), ("httpd", &["sh", "-c", &httpd])],
        },
    )
    .await;

    // Logs: whole, partial lines joined, tail, timestamps, limit.
    let all = wait_for_log(
        port,
        &apiserver,
        "/containerLogs/default/web/logger",
        "tick 2",
    )
    .await;
    assert!(
        all.starts_with("one\ntwo\npartial\nfour\ntick 1\n"),
        "{all:?}"
    );
    let (_, tail) = get(
        port,
        &apiserver,
        "/containerLogs/default/web/logger?tailLines=1",
    )
    .await;
    assert_eq!(tail.lines().count(), 1, "{tail:?}");
    assert!(tail.starts_with("tick "), "{tail:?}");
    let (_, stamped) = get(
        port,
        &apiserver,
        "/containerLogs/default/web/logger?timestamps=true&limitBytes=200",
    )
    .await;
    let first = stamped.lines().next().unwrap();
    let (stamp, text) = first.split_once(' ').unwrap();
    assert!(stamp.parse::<jiff::Timestamp>().is_ok(), "{first:?}");
    assert_eq!(text, "one");
    let (_, limited) = get(
        port,
        &apiserver,
        "/containerLogs/default/web/logger?limitBytes=6",
    )
    .await;
    assert_eq!(limited, "one\ntw");
    let (status, body) = get(port, &apiserver, "/containerLogs/default/web/nope").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = get(
        port,
        &apiserver,
        "/containerLogs/default/web/logger?previous=true",
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("previous terminated container \"logger\""),
        "{body}"
    );

    // Follow: new ticks keep arriving on one open response.
    let (status, _, mut follow) = request_head(
        port,
        &apiserver,
        "GET",
        "/containerLogs/default/web/logger?follow=true&tailLines=1",
        &[],
    )
    .await;
    assert_eq!(status, 200);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while String::from_utf8_lossy(&seen).matches("tick").count() < 3 {
        let mut buffer = [0u8; 1024];
        let n = tokio::time::timeout(deadline - Instant::now(), follow.read(&mut buffer))
            .await
            .expect("followed log lines arrive")
            .unwrap();
        assert!(n > 0, "follow stream ended early");
        seen.extend_from_slice(&buffer[..n]);
    }

    // Exec over WebSocket v5: output, stderr and exit codes; stdin with close.
    let path = format!(
        "/exec/default/web/logger?{}",
        command_query(&["sh", "-c", "echo out; echo err >&2; exit 3"], "")
    );
    let outcome = exec_websocket(port, &apiserver, &path, None).await;
    assert_eq!(
        (outcome.stdout.as_str(), outcome.stderr.as_str()),
        ("out\n", "err\n")
    );
    assert_eq!(outcome.exit_code(), 3, "{:?}", outcome.status);
    let path = format!(
        "/exec/default/web/logger?{}",
        command_query(&["cat"], "stdin=1")
    );
    let outcome = exec_websocket(port, &apiserver, &path, Some(b"piped input\n")).await;
    assert_eq!(outcome.stdout, "piped input\n");
    assert_eq!(outcome.exit_code(), 0);

    // Exec over SPDY, passed through.
    let path = format!(
        "/exec/default/web/logger?{}",
        command_query(&["sh", "-c", "echo spdy; exit 7"], "")
    );
    let outcome = exec_spdy(port, &apiserver, &path).await;
    assert_eq!(outcome.stdout, "spdy\n");
    assert_eq!(outcome.exit_code(), 7);
    let path = format!("/exec/default/web/logger?{}", command_query(&["true"], ""));
    assert_eq!(exec_spdy(port, &apiserver, &path).await.exit_code(), 0);

    // Port-forward to busybox httpd: SPDY directly, and tunnelled in WebSocket.
    let (status, head, stream) = request_head(
        port,
        &apiserver,
        "POST",
        "/portForward/default/web",
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "SPDY/3.1"),
            ("X-Stream-Protocol-Version", "portforward.k8s.io"),
            ("Content-Length", "0"),
        ],
    )
    .await;
    assert_eq!(status, 101, "{head}");
    let page = http_over_port_forward(stream, http_port).await;
    assert!(page.contains("hello-from-pod"), "{page:?}");
    let (status, head, stream) = request_head(
        port,
        &apiserver,
        "GET",
        "/portForward/default/web",
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Protocol", "SPDY/3.1+portforward.k8s.io"),
        ],
    )
    .await;
    assert_eq!(status, 101, "{head}");
    let page = http_over_port_forward(websocket_tunnel(stream).await, http_port).await;
    assert!(page.contains("hello-from-pod"), "{page:?}");

    // /pods and /stats/summary.
    let (status, body) = get(port, &apiserver, "/pods").await;
    assert_eq!(status, 200, "{body}");
    let pods: serde_json::Value = serde_json::from_str(&body).unwrap();
    let web = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["metadata"]["name"] == "web")
        .expect("web in /pods");
    assert_eq!(web["metadata"]["uid"], "uid-web");
    assert_eq!(
        web["status"]["containerStatuses"].as_array().unwrap().len(),
        2
    );
    let (status, body) = get(port, &apiserver, "/stats/summary").await;
    assert_eq!(status, 200, "{body}");
    let summary: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(summary["node"]["nodeName"], "stream-node");
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    let pod = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "web")
        .expect("web in the summary");
    assert_eq!(pod["containers"].as_array().unwrap().len(), 2);
    assert!(
        pod["memory"]["workingSetBytes"].as_u64().unwrap() > 0,
        "{pod}"
    );

    // streaming-connection-idle-timeout: a kubelet server with a 2 s timeout closes an exec
    // that moves no bytes (cat waiting on an open stdin), over WebSocket and SPDY, but not
    // one that keeps printing for longer than the timeout.
    let idle_port =
        start_kubelet_server_with(&containerd, &pki, logs.path(), Some(Duration::from_secs(2)))
            .await;
    let path = format!(
        "/exec/default/web/logger?{}",
        command_query(
            &[
                "sh",
                "-c",
                "for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; sleep 0.5; done"
            ],
            ""
        )
    );
    let started = Instant::now();
    let outcome = exec_websocket(idle_port, &apiserver, &path, None).await;
    assert_eq!(outcome.exit_code(), 0, "a busy stream runs to its end");
    assert!(outcome.stdout.ends_with("10\n"), "{:?}", outcome.stdout);
    assert!(started.elapsed() >= Duration::from_secs(4));
    let idle_path = format!(
        "/exec/default/web/logger?{}",
        command_query(&["cat"], "stdin=1")
    );
    for spdy_mode in [false, true] {
        let headers: &[(&str, &str)] = if spdy_mode {
            &[
                ("Connection", "Upgrade"),
                ("Upgrade", "SPDY/3.1"),
                ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
                ("Content-Length", "0"),
            ]
        } else {
            &[
                ("Connection", "Upgrade"),
                ("Upgrade", "websocket"),
                ("Sec-WebSocket-Version", "13"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("Sec-WebSocket-Protocol", "v5.channel.k8s.io"),
            ]
        };
        let method = if spdy_mode { "POST" } else { "GET" };
        let (status, head, mut stream) =
            request_head(idle_port, &apiserver, method, &idle_path, headers).await;
        assert_eq!(status, 101, "{head}");
        if spdy_mode {
            let mut encoder = spdy::Encoder::new();
            let mut open = Vec::new();
            for (id, kind) in [(1, "error"), (3, "stdin"), (5, "stdout"), (7, "stderr")] {
                open.extend(
                    encoder
                        .syn_stream(id, &[("streamtype", kind)], false)
                        .unwrap(),
                );
            }
            stream.write_all(&open).await.unwrap();
        }
        // Read until the server closes; the stream must end between 2 and 10 s.
        let started = Instant::now();
        let mut buffer = [0u8; 4096];
        loop {
            let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
                .await
                .expect("the idle stream is closed within 10 s");
            if matches!(read, Ok(0) | Err(_)) {
                break;
            }
        }
        let idle_for = started.elapsed();
        assert!(
            idle_for >= Duration::from_millis(1500),
            "closed after {idle_for:?}, before the timeout (spdy: {spdy_mode})"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Through the API server with real kubectl.

fn kubectl(
    server: &support::Server,
    kubectl: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> std::process::Output {
    server.kubectl_with(kubectl, args, stdin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_exec_and_port_forward_through_the_api_server() {
    let containerd = Containerd::start();
    let logs = tempfile::tempdir().unwrap();
    let server = support::Server::start();
    let tls_dir = server.dir.path().join("data/server/tls");
    let read = |name: &str| std::fs::read_to_string(tls_dir.join(name)).expect("server TLS file");
    let server_ca =
        CertificateAuthority::from_pem(&read("server-ca.crt"), &read("server-ca.key"), &tls_dir)
            .unwrap();
    let client_ca =
        CertificateAuthority::from_pem(&read("client-ca.crt"), &read("client-ca.key"), &tls_dir)
            .unwrap();
    let pki = pki_from(server_ca, &client_ca);
    let kubelet_port = start_kubelet_server(&containerd, &pki, logs.path()).await;

    // The Node the API server dials, and the Pod bound to it, as the kubelet would report them.
    let client = server.client().await;
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "stream-node"},
    }))
    .unwrap();
    nodes
        .create(&Default::default(), &node)
        .await
        .expect("create node");
    let now = jiff::Timestamp::now().to_string();
    nodes
        .patch_status(
            "stream-node",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": "stream-node"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now, "lastTransitionTime": now}],
            }})),
        )
        .await
        .expect("node status");
    let http_port = support::free_port();
    let httpd = format!(
        "mkdir -p /www && echo hello-through-kubectl > /www/index.html && exec httpd -f -p 127.0.0.1:{http_port} -h /www"
    );
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), "default");
    for (name, containers) in [
        (
            "single",
            serde_json::json!([{"name": "main", "image": BUSYBOX}]),
        ),
        (
            "double",
            serde_json::json!([{"name": "a", "image": BUSYBOX}, {"name": "b", "image": BUSYBOX}]),
        ),
        (
            "pending",
            serde_json::json!([{"name": "main", "image": BUSYBOX}]),
        ),
    ] {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"nodeName": "stream-node", "containers": containers},
        }))
        .unwrap();
        pods.create(&Default::default(), &pod)
            .await
            .expect("create pod");
    }
    for (name, container_names) in [("single", vec!["main"]), ("double", vec!["a", "b"])] {
        let statuses: Vec<serde_json::Value> = container_names
            .iter()
            .map(|c| serde_json::json!({"name": c, "image": BUSYBOX, "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": now}}}))
            .collect();
        pods.patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                serde_json::json!({"status": {"phase": "Running", "containerStatuses": statuses}}),
            ),
        )
        .await
        .expect("pod status");
    }
    pods.patch_status(
        "pending",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"status": {"phase": "Pending", "containerStatuses": [
            {"name": "main", "image": BUSYBOX, "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}})),
    )
    .await
    .expect("pod status");
    let mut runtime = containerd.cri().await;
    let single_uid = pods.get("single").await.unwrap().metadata.uid.unwrap();
    run_pod(
        &mut runtime,
        logs.path(),
        &PodSpec {
            namespace: "default",
            name: "single",
            uid: &single_uid,
            containers: &[(
                "main",
                &[
                    "sh",
                    "-c",
                    &format!("{}; {httpd}", "echo first; echo second"),
                ],
            )],
        },
    )
    .await;
    let double_uid = pods.get("double").await.unwrap().metadata.uid.unwrap();
    run_pod(
        &mut runtime,
        logs.path(),
        &PodSpec {
            namespace: "default",
            name: "double",
            uid: &double_uid,
            containers: &[("a", LOGGER), ("b", &["sleep", "3600"])],
        },
    )
    .await;

    let kubectls = support::kubectls();
    let newest = kubectls.last().unwrap().clone();

    // Logs and kube-apiserver's refusals.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = kubectl(&server, &newest, &["logs", "single"], None);
        if String::from_utf8_lossy(&out.stdout) == "first\nsecond\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl logs single: {:?} {}",
            out,
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = kubectl(&server, &newest, &["logs", "single", "--tail=1"], None);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "second\n");
    // kubectl itself defaults to the first container; the API's own answer is a refusal.
    let out = kubectl(
        &server,
        &newest,
        &["get", "--raw", "/api/v1/namespaces/default/pods/double/log"],
        None,
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("a container name must be specified for pod double, choose one of: [a b]"),
        "{out:?}"
    );
    let out = kubectl(&server, &newest, &["logs", "pending"], None);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "container \"main\" in pod \"pending\" is waiting to start: ContainerCreating"
        ),
        "{out:?}"
    );
    let out = kubectl(&server, &newest, &["logs", "missing"], None);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pods \"missing\" not found"),
        "{out:?}"
    );

    // kubectl logs -f keeps streaming.
    let mut follow = Command::new(&newest)
        .arg("--kubeconfig")
        .arg(&server.kubeconfig)
        .args(["logs", "-f", "double", "-c", "a"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl logs -f");
    let mut stdout = follow.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buffer = [0u8; 256];
        while String::from_utf8_lossy(&seen).matches("tick").count() < 4 {
            match std::io::Read::read(&mut stdout, &mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buffer[..n]),
            }
        }
        String::from_utf8_lossy(&seen).to_string()
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    while !reader.is_finished() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = follow.kill();
    let _ = follow.wait();
    let followed = reader.join().unwrap();
    assert!(
        followed.matches("tick").count() >= 4,
        "kubectl logs -f: {followed:?}"
    );

    // Exit codes with every kubectl (1.27–1.29 SPDY, ≥ 1.30 WebSocket v5).
    for kubectl_bin in &kubectls {
        let out = kubectl(
            &server,
            kubectl_bin,
            &["exec", "single", "--", "sh", "-c", "echo hi; exit 3"],
            None,
        );
        assert_eq!(
            out.status.code(),
            Some(3),
            "{}: {:?}\n{}",
            kubectl_bin.display(),
            out,
            server.log()
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hi\n",
            "{}",
            kubectl_bin.display()
        );
        // kubectl ≥ 1.30 must not have fallen back to SPDY (client-go logs that at -v=4).
        let out = kubectl(
            &server,
            kubectl_bin,
            &["exec", "-v=4", "single", "--", "true"],
            None,
        );
        assert!(out.status.success(), "{}: {out:?}", kubectl_bin.display());
        assert!(
            !String::from_utf8_lossy(&out.stderr)
                .to_lowercase()
                .contains("fallback"),
            "{} fell back from WebSocket: {}",
            kubectl_bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let out = kubectl(
            &server,
            kubectl_bin,
            &["exec", "-i", "single", "--", "cat"],
            Some("through stdin\n"),
        );
        assert!(out.status.success(), "{}: {out:?}", kubectl_bin.display());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "through stdin\n",
            "{}",
            kubectl_bin.display()
        );
    }

    // Port-forward, then HTTP through it (the oldest kubectl speaks SPDY, the newest tunnels).
    for kubectl_bin in [kubectls.first().unwrap(), &newest] {
        let local = support::free_port();
        let mut forward = Command::new(kubectl_bin)
            .arg("--kubeconfig")
            .arg(&server.kubeconfig)
            .args([
                "port-forward",
                "-v=4",
                "pod/single",
                &format!("{local}:{http_port}"),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl port-forward");
        let deadline = Instant::now() + Duration::from_secs(20);
        let page = loop {
            let attempt = async {
                let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", local))
                    .await
                    .ok()?;
                tcp.write_all(b"GET /index.html HTTP/1.0\r\n\r\n")
                    .await
                    .ok()?;
                let mut page = Vec::new();
                tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut page))
                    .await
                    .ok()?
                    .ok()?;
                Some(String::from_utf8_lossy(&page).to_string())
            };
            if let Some(page) = attempt.await
                && page.contains("hello-through-kubectl")
            {
                break page;
            }
            assert!(
                Instant::now() < deadline,
                "port-forward with {} never answered",
                kubectl_bin.display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert!(page.contains("200 OK"), "{page}");
        let _ = forward.kill();
        let output = forward
            .wait_with_output()
            .expect("kubectl port-forward output");
        assert!(
            !String::from_utf8_lossy(&output.stderr)
                .to_lowercase()
                .contains("fallback"),
            "{}: {}",
            kubectl_bin.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let _ = std::io::stderr().flush();
}

/// Slowloris against :10250 (issue 25 item 7): 300 anonymous TLS connections whose request
/// headers never end do not keep the API server's requests from being answered at once,
/// and each is closed after the header read timeout. `/healthz` needs no runtime, so no
/// containerd here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_server_survives_a_slowloris() {
    let server_ca = CertificateAuthority::generate("test-server-ca").unwrap();
    let client_ca = CertificateAuthority::generate("test-client-ca").unwrap();
    let pki = pki_from(server_ca, &client_ca);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let runtime_dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        listen: listener.local_addr().unwrap(),
        serving: k3rs::pki::live::LiveCert::new(&pki.serving).unwrap(),
        client_ca_pem: pki.client_ca_pem.clone(),
        cri_endpoint: runtime_dir.path().join("no-runtime.sock"),
        pod_log_dir: runtime_dir.path().to_path_buf(),
        stream_idle_timeout: None,
    };
    tokio::spawn(async move {
        if let Err(e) = serve_on(listener, config).await {
            panic!("kubelet server: {e:#}");
        }
    });
    let anonymous = client_tls(&pki, None);
    let mut held = slowloris::hold_unfinished_requests(port, &anonymous, "/pods", 300).await;
    let opened = Instant::now();
    let apiserver = client_tls(&pki, Some(&pki.apiserver));
    for _ in 0..3 {
        let started = Instant::now();
        let (status, body) = get(port, &apiserver, "/healthz").await;
        assert_eq!((status, body.as_str()), (200, "ok"));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "/healthz took {:?} under a slowloris",
            started.elapsed()
        );
    }
    slowloris::assert_closed_by_header_timeout(&mut held, opened).await;
}
