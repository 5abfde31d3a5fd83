//! The agent's container runtime against a real containerd/runc/CNI (root only): start a
//! containerd of its own in temp dirs, import the busybox test image (OCI layout), a
//! docker-archive and the built-in pause image, run a pod sandbox on a 10.99.0.0/24 bridge and
//! a busybox container through CRI, read its log, kill containerd and watch the supervisor
//! restart it, restart the runtime and see the sandbox survive, and skip a corrupt tarball.

mod support;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k3rs::agent::containerd::{self, RuntimeOptions};
use k3rs::agent::images::tar::TarWriter;
use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use support::images::TestImage;
use support::runtime::RuntimeGuard;
use support::wait_for_every;

/// How often a `wait_for_every` here polls.
const POLL: Duration = Duration::from_millis(200);

const POD_CIDR: &str = "10.99.0.0/24";

fn require_tools() {
    support::runtime::require_root("agent_runtime");
    support::runtime::require_runtime_tools();
}

/// Captures log lines so the test can check what the runtime reported.
#[derive(Clone, Default)]
struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(buf);
        std::io::stderr().write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log lock")).into_owned()
    }
}

fn options(base: &Path) -> RuntimeOptions {
    let mut opts = RuntimeOptions::new(base.join("data"));
    opts.run_dir = base.join("run");
    opts.private_registry = base.join("registries.yaml");
    opts
}

async fn image_present(channel: tonic::transport::Channel, image: &str) -> bool {
    let resp = ImageServiceClient::new(channel)
        .image_status(cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .expect("ImageStatus");
    resp.into_inner().image.is_some()
}

/// A docker-archive (`docker save` layout) with one uncompressed layer.
fn docker_archive(name: &str) -> Vec<u8> {
    use sha2::Digest;
    let mut layer = TarWriter::new();
    layer.file("hello.txt", b"from a docker archive\n", 0o644);
    let layer = layer.finish();
    let diff = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&layer)));
    let arch = k3rs::agent::images::archive::host_platform().architecture;
    let config = serde_json::json!({
        "architecture": arch, "os": "linux",
        "config": {"Cmd": ["/hello.txt"]},
        "rootfs": {"type": "layers", "diff_ids": [diff]},
    });
    let mut w = TarWriter::new();
    w.file(
        "manifest.json",
        serde_json::json!([{"Config": "cfg.json", "RepoTags": [name], "Layers": ["l0/layer.tar"]}])
            .to_string()
            .as_bytes(),
        0o644,
    );
    w.file("cfg.json", config.to_string().as_bytes(), 0o644);
    w.file("l0/layer.tar", &layer, 0o644);
    w.finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_images_sandbox_container_restart() {
    require_tools();
    let logs = LogCapture::default();
    let writer = logs.clone();
    let _ = tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .try_init();

    // Short path: the containerd socket path must stay under 108 bytes.
    let base = support::runtime::base_dir("rt");
    let cleanup = RuntimeGuard::new(&base).with_bridge_address("10.99.0.1/24");
    let opts = options(&base);
    let paths = containerd::Paths::new(&opts);
    TestImage::busybox().write_to(&paths.images_dir);
    std::fs::write(
        paths.images_dir.join("docker-archive.tar"),
        docker_archive("k3rs.test/docker-archive:1"),
    )
    .expect("write docker archive");
    std::fs::write(
        paths.images_dir.join("broken.tar"),
        b"this is not a tarball at all",
    )
    .expect("broken");
    assert!(
        k3rs::network::cni::write_conflist(&paths.cni_conf_dir, &[POD_CIDR.to_string()])
            .expect("conflist")
    );

    let runtime = containerd::start(options(&base))
        .await
        .expect("runtime starts");
    let first_pid = runtime.containerd_pid().expect("supervised containerd pid");
    cleanup.add_pid(first_pid);
    assert_eq!(runtime.cri_endpoint(), paths.socket);
    let config = std::fs::read_to_string(&paths.config).expect("config written");
    assert!(
        config.contains("sandbox_image = \"k3rs.local/pause:3.10\""),
        "{config}"
    );

    let log_text = logs.text();
    assert!(
        log_text.contains("imported image k3rs.test/busybox:1 from k3rs.test_busybox_1.tar"),
        "{log_text}"
    );
    assert!(
        log_text.contains("imported image k3rs.test/docker-archive:1 from docker-archive.tar"),
        "{log_text}"
    );
    assert!(
        log_text.contains("broken.tar") && log_text.contains("skipping air-gap image tarball"),
        "{log_text}"
    );

    let channel = k3rs::agent::cri::connect(runtime.cri_endpoint())
        .await
        .expect("CRI connect");
    for image in [
        "k3rs.local/pause:3.10",
        "k3rs.test/busybox:1",
        "k3rs.test/docker-archive:1",
    ] {
        assert!(
            image_present(channel.clone(), image).await,
            "ImageStatus does not find {image}"
        );
    }
    // Unpacked ahead of time (not lazily by CRI): the chain's snapshot exists.
    let snapshots = containerd_snapshot_names(
        runtime.channel(),
        runtime.snapshotter().expect("snapshotter"),
    )
    .await;
    assert!(
        snapshots.len() >= 3,
        "expected unpacked snapshots, got {snapshots:?}"
    );

    // A new tarball dropped in later is picked up by the poller.
    TestImage::busybox()
        .name("k3rs.test/late:2")
        .write_to(&paths.images_dir);
    wait_for_every("the late image", Duration::from_secs(30), POLL, || {
        let ch = channel.clone();
        async move { image_present(ch, "k3rs.test/late:2").await.then_some(()) }
    })
    .await;

    // Sandbox on the bridge.
    let mut rt = RuntimeServiceClient::new(channel.clone());
    let pod_logs = base.join("pods/default_rt-test_uid-1");
    std::fs::create_dir_all(&pod_logs).expect("pod log dir");
    let sandbox_config = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: "rt-test".into(),
            uid: "uid-1".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: "rt-test".into(),
        log_directory: pod_logs.to_string_lossy().into_owned(),
        labels: HashMap::from([
            ("io.kubernetes.pod.name".to_string(), "rt-test".to_string()),
            (
                "io.kubernetes.pod.namespace".to_string(),
                "default".to_string(),
            ),
            ("io.kubernetes.pod.uid".to_string(), "uid-1".to_string()),
        ]),
        linux: Some(cri::LinuxPodSandboxConfig::default()),
        ..Default::default()
    };
    let sandbox_id = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    cleanup.add_runc_container(&sandbox_id);
    let status = rt
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: sandbox_id.clone(),
            verbose: true,
        })
        .await
        .expect("PodSandboxStatus")
        .into_inner();
    if let Some(info) = status.info.get("info")
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(info)
        && let Some(nss) = v["runtimeSpec"]["linux"]["namespaces"].as_array()
    {
        for ns in nss {
            if ns["type"] == "network"
                && let Some(p) = ns["path"].as_str()
            {
                cleanup.add_netns(p);
            }
        }
    }
    let ip = status
        .status
        .and_then(|s| s.network)
        .map(|n| n.ip)
        .unwrap_or_default();
    let ip: std::net::Ipv4Addr = ip
        .parse()
        .unwrap_or_else(|_| panic!("pod IP {ip:?} is not IPv4"));
    assert_eq!(
        ip.octets()[..3],
        [10, 99, 0],
        "pod IP {ip} not in {POD_CIDR}"
    );

    // A busybox container writing to its log.
    let container_id = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.clone(),
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: "main".into(),
                    attempt: 0,
                }),
                image: Some(cri::ImageSpec {
                    image: "k3rs.test/busybox:1".into(),
                    ..Default::default()
                }),
                command: vec!["sh".into(), "-c".into()],
                args: vec!["echo hello-from-k3rs; cat /etc/hostname; exec sleep 3600".into()],
                log_path: "main/0.log".into(),
                labels: HashMap::from([(
                    "io.kubernetes.container.name".to_string(),
                    "main".to_string(),
                )]),
                ..Default::default()
            }),
            sandbox_config: Some(sandbox_config),
        })
        .await
        .expect("CreateContainer")
        .into_inner()
        .container_id;
    cleanup.add_runc_container(&container_id);
    rt.start_container(cri::StartContainerRequest {
        container_id: container_id.clone(),
    })
    .await
    .expect("StartContainer");
    let log_file = pod_logs.join("main/0.log");
    let log = wait_for_every(
        "the container's log line",
        Duration::from_secs(30),
        POLL,
        || {
            let f = log_file.clone();
            async move {
                let t = std::fs::read_to_string(&f).unwrap_or_default();
                t.contains("hello-from-k3rs").then_some(t)
            }
        },
    )
    .await;
    // CRI log format: <RFC3339Nano> stdout F <line>
    let line = log
        .lines()
        .find(|l| l.contains("hello-from-k3rs"))
        .expect("line");
    let fields: Vec<&str> = line.splitn(4, ' ').collect();
    assert_eq!(&fields[1..], ["stdout", "F", "hello-from-k3rs"], "{line}");

    // Kill containerd: the supervisor restarts it, the container keeps running.
    // SAFETY: kill(2) on the containerd this test started.
    assert_eq!(unsafe { libc::kill(first_pid as i32, libc::SIGKILL) }, 0);
    let second_pid = wait_for_every(
        "containerd to be restarted",
        Duration::from_secs(30),
        POLL,
        || {
            let pid = runtime.containerd_pid();
            async move { pid.filter(|p| *p != first_pid) }
        },
    )
    .await;
    cleanup.add_pid(second_pid);
    let log_text = logs.text();
    assert!(
        log_text.contains("containerd exited; restarting it"),
        "{log_text}"
    );
    let running = wait_for_every(
        "CRI after the restart",
        Duration::from_secs(30),
        POLL,
        || {
            let ch = channel.clone();
            let id = container_id.clone();
            async move {
                let mut c = RuntimeServiceClient::new(ch);
                let s = c
                    .container_status(cri::ContainerStatusRequest {
                        container_id: id,
                        verbose: false,
                    })
                    .await
                    .ok()?;
                s.into_inner().status.map(|s| s.state)
            }
        },
    )
    .await;
    assert_eq!(running, cri::ContainerState::ContainerRunning as i32);

    // Restart the runtime (the agent restarting): containerd is adopted, not replaced.
    drop(runtime);
    let runtime = containerd::start(options(&base))
        .await
        .expect("runtime restarts");
    assert_eq!(
        runtime.containerd_pid(),
        Some(second_pid),
        "containerd was replaced"
    );
    assert!(
        logs.text()
            .contains("reusing the containerd a previous agent started")
    );
    let mut rt = RuntimeServiceClient::new(
        k3rs::agent::cri::connect(runtime.cri_endpoint())
            .await
            .expect("connect"),
    );
    let sandboxes = rt
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items;
    let ours = sandboxes
        .iter()
        .find(|s| s.id == sandbox_id)
        .expect("sandbox survived");
    assert_eq!(ours.state, cri::PodSandboxState::SandboxReady as i32);

    // Stop and remove everything through CRI.
    rt.stop_container(cri::StopContainerRequest {
        container_id: container_id.clone(),
        timeout: 2,
    })
    .await
    .expect("StopContainer");
    rt.remove_container(cri::RemoveContainerRequest { container_id })
        .await
        .expect("RemoveContainer");
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
        pod_sandbox_id: sandbox_id.clone(),
    })
    .await
    .expect("StopPodSandbox");
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
        pod_sandbox_id: sandbox_id,
    })
    .await
    .expect("RemovePodSandbox");
    drop(runtime);
    drop(cleanup);
}

async fn containerd_snapshot_names(
    channel: tonic::transport::Channel,
    snapshotter: &str,
) -> Vec<String> {
    use containerd_client::services::v1::snapshots::{
        ListSnapshotsRequest, snapshots_client::SnapshotsClient,
    };
    let mut req = tonic::Request::new(ListSnapshotsRequest {
        snapshotter: snapshotter.to_string(),
        filters: Vec::new(),
    });
    req.metadata_mut()
        .insert("containerd-namespace", "k8s.io".parse().expect("header"));
    let mut stream = SnapshotsClient::new(channel)
        .list(req)
        .await
        .expect("snapshots list")
        .into_inner();
    let mut names = Vec::new();
    while let Some(msg) = stream.message().await.expect("snapshots list") {
        names.extend(msg.info.into_iter().map(|i| i.name));
    }
    names
}
