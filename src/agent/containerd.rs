//! containerd under the agent: writes its config (`<data-dir>/agent/etc/containerd/
//! config.toml`), runs `containerd` from PATH as a supervised child in its own process group
//! (restarted with back-off when it dies; never killed by the agent, so containers survive
//! agent restarts; a containerd left running by a previous agent is reused), waits until CRI
//! answers, builds/imports the pause image and the air-gap images, and keeps watching the
//! images directory. With `--container-runtime-endpoint` it only connects to that runtime.
//!
//! Owns the containerd process, its config, log and pid file. It may not touch the Kubernetes
//! API or the kubelet's state; the kubelet dials [`Runtime::cri_endpoint`].

pub mod config;
pub mod registries;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use super::cri;
use super::images::{self, DirImporter, Importer};
use super::pause;
use crate::network::cni;
use config::ContainerdConfig;
use registries::Registries;

/// How long containerd gets to answer CRI `Version` after it is spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const RESTART_BACKOFF_MIN: Duration = Duration::from_secs(1);
const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A containerd that ran this long before dying restarts at the minimum back-off again.
const STABLE_RUN: Duration = Duration::from_secs(60);
/// k3s's CRI streaming port; another one is picked when it is taken (several agents per host).
const DEFAULT_STREAM_PORT: u16 = 10010;
const PID_FILE: &str = "k3rs-containerd.pid";

pub struct RuntimeOptions {
    /// `<data-dir>`
    pub data_dir: PathBuf,
    /// Default `/run/k3rs`; containerd's state and socket live in `<run_dir>/containerd`.
    pub run_dir: PathBuf,
    /// `--pause-image`, default `k3rs.local/pause:3.10`.
    pub pause_image: String,
    /// `--private-registry`, default `/etc/k3rs/registries.yaml`.
    pub private_registry: PathBuf,
    /// `--container-runtime-endpoint` (`unix:///…` or a bare path): use that runtime as is.
    pub external_endpoint: Option<String>,
}

impl RuntimeOptions {
    /// The defaults for `data_dir` (k3s's layout with k3rs names).
    pub fn new(data_dir: impl Into<PathBuf>) -> RuntimeOptions {
        RuntimeOptions {
            data_dir: data_dir.into(),
            run_dir: PathBuf::from("/run/k3rs"),
            pause_image: pause::DEFAULT_PAUSE_IMAGE.to_string(),
            private_registry: PathBuf::from("/etc/k3rs/registries.yaml"),
            external_endpoint: None,
        }
    }
}

/// Every path the runtime uses, derived from the options.
#[derive(Debug, Clone)]
pub struct Paths {
    pub config: PathBuf,
    pub root: PathBuf,
    pub state: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub pid_file: PathBuf,
    pub cni_conf_dir: PathBuf,
    pub images_dir: PathBuf,
    pub scratch_dir: PathBuf,
}

impl Paths {
    pub fn new(opts: &RuntimeOptions) -> Paths {
        let agent = opts.data_dir.join("agent");
        let root = agent.join("containerd");
        let state = opts.run_dir.join("containerd");
        Paths {
            config: agent.join("etc/containerd/config.toml"),
            log: root.join("containerd.log"),
            socket: state.join("containerd.sock"),
            pid_file: state.join(PID_FILE),
            cni_conf_dir: agent.join("etc/cni/net.d"),
            images_dir: agent.join("images"),
            scratch_dir: agent.join("tmp"),
            root,
            state,
        }
    }
}

/// The running container runtime. Dropping it stops the agent's supervision and image
/// watching; containerd itself keeps running (and with it every container).
pub struct Runtime {
    endpoint: PathBuf,
    channel: Channel,
    pid: Arc<AtomicU32>,
    snapshotter: Option<String>,
    tasks: Vec<JoinHandle<()>>,
}

impl Runtime {
    /// The unix socket to dial for CRI.
    pub fn cri_endpoint(&self) -> &Path {
        &self.endpoint
    }

    /// A connected channel to the runtime (CRI and, for containerd, its native API).
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// The pid of the containerd the agent supervises (`None` with an external runtime).
    pub fn containerd_pid(&self) -> Option<u32> {
        match self.pid.load(Ordering::SeqCst) {
            0 => None,
            pid => Some(pid),
        }
    }

    /// The snapshotter images are unpacked into (`None` when the runtime is not containerd).
    pub fn snapshotter(&self) -> Option<&str> {
        self.snapshotter.as_deref()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts (or adopts, or connects to) the runtime; returns once CRI answers `Version` and the
/// pause image and the air-gap images present at start are imported.
pub async fn start(opts: RuntimeOptions) -> anyhow::Result<Runtime> {
    let paths = Paths::new(&opts);
    if let Some(endpoint) = &opts.external_endpoint {
        return start_external(&opts, &paths, endpoint).await;
    }
    for dir in [
        &paths.root,
        &paths.state,
        &paths.cni_conf_dir,
        &paths.images_dir,
    ] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let registries = Registries::load(&opts.private_registry)?;
    for (registry, mirror) in &registries.mirrors {
        if !mirror.rewrite.is_empty() {
            tracing::warn!(%registry, "registries.yaml `rewrite` needs k3s's containerd fork; ignored by containerd");
        }
    }
    let snapshotter = choose_snapshotter(&paths.root);
    let rendered = ContainerdConfig {
        root: paths.root.clone(),
        state: paths.state.clone(),
        socket: paths.socket.clone(),
        sandbox_image: opts.pause_image.clone(),
        cni_bin_dir: cni::default_plugin_dir(),
        cni_conf_dir: paths.cni_conf_dir.clone(),
        snapshotter: snapshotter.clone(),
        systemd_cgroup: host_uses_systemd_cgroups(),
        stream_port: choose_stream_port(&paths.config),
        restrict_oom_score_adj: !can_lower_oom_score_adj(),
        registries,
    }
    .render();
    let changed = write_if_changed(&paths.config, &rendered)?;

    let pid = Arc::new(AtomicU32::new(0));
    let current = if let Some(channel) = cri_ready(&paths.socket).await {
        let adopted = read_pid_file(&paths.pid_file).filter(|p| is_containerd(*p));
        tracing::info!(
            socket = %paths.socket.display(),
            pid = ?adopted,
            "reusing the containerd a previous agent started (its containers keep running)"
        );
        if changed {
            tracing::warn!(config = %paths.config.display(), "containerd config changed; it applies when containerd next restarts");
        }
        drop(channel);
        match adopted {
            Some(p) => {
                pid.store(p, Ordering::SeqCst);
                Process::Adopted(p)
            }
            None => Process::Unknown,
        }
    } else {
        let binary = find_containerd()?;
        let child = spawn_containerd(&binary, &paths)?;
        pid.store(child.id().unwrap_or(0), Ordering::SeqCst);
        let mut child = child;
        wait_ready(&paths, Some(&mut child)).await?;
        tracing::info!(pid = ?child.id(), socket = %paths.socket.display(), "containerd is running");
        Process::Child(child)
    };
    let channel = cri::connect(&paths.socket).await?;
    let mut tasks = vec![tokio::spawn(supervise(paths.clone(), current, pid.clone()))];

    let importer = Importer::new(channel.clone(), snapshotter.clone());
    ensure_pause_image(&importer, &opts.pause_image).await?;
    tasks.push(watch_images(importer, &paths).await);
    Ok(Runtime {
        endpoint: paths.socket,
        channel,
        pid,
        snapshotter: Some(snapshotter),
        tasks,
    })
}

async fn start_external(
    opts: &RuntimeOptions,
    paths: &Paths,
    endpoint: &str,
) -> anyhow::Result<Runtime> {
    let socket = cri::socket_path(endpoint)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let version = loop {
        match cri_version(&socket).await {
            Ok(v) => break v,
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!(
                    "the container runtime at {endpoint} (--container-runtime-endpoint) does not answer CRI"
                )));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    };
    tracing::info!(%endpoint, runtime = %version.runtime_name, version = %version.runtime_version, "using an external container runtime");
    let channel = cri::connect(&socket).await?;
    let mut tasks = Vec::new();
    let mut snapshotter = None;
    // The pause and air-gap images go through containerd's native API; another runtime
    // (CRI-O) is left to pull them itself.
    if version.runtime_name == "containerd" {
        let importer = Importer::new(channel.clone(), "overlayfs");
        ensure_pause_image(&importer, &opts.pause_image).await?;
        tasks.push(watch_images(importer, paths).await);
        snapshotter = Some("overlayfs".to_string());
    } else {
        tracing::info!(runtime = %version.runtime_name, "not containerd: air-gap images are not imported");
    }
    Ok(Runtime {
        endpoint: socket,
        channel,
        pid: Arc::new(AtomicU32::new(0)),
        snapshotter,
        tasks,
    })
}

/// Imports the initial contents of the images dir now, then polls it in a task.
async fn watch_images(importer: Importer, paths: &Paths) -> JoinHandle<()> {
    let mut dir = DirImporter::default();
    let (images_dir, scratch) = (paths.images_dir.clone(), paths.scratch_dir.clone());
    dir.scan(&importer, &images_dir, &scratch).await;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(images::POLL_INTERVAL).await;
            dir.scan(&importer, &images_dir, &scratch).await;
        }
    })
}

async fn ensure_pause_image(importer: &Importer, name: &str) -> anyhow::Result<()> {
    let name = images::reference::normalise(name).context("--pause-image")?;
    if name != pause::DEFAULT_PAUSE_IMAGE && importer.image_exists(&name).await? {
        tracing::info!(image = %name, "sandbox image already present");
        return Ok(());
    }
    let Some(tarball) = pause::image_tarball(&name) else {
        tracing::warn!(arch = std::env::consts::ARCH, image = %name, "no built-in pause binary for this architecture; containerd will pull the sandbox image");
        return Ok(());
    };
    let tarball = tarball.context("building the pause image")?;
    let mut archive = images::ImageArchive::open(Box::new(std::io::Cursor::new(tarball)))
        .context("reading the pause image")?;
    importer
        .import(&mut archive, &pause::image_labels())
        .await
        .context("importing the pause image")?;
    tracing::info!(image = %name, "sandbox image ready");
    Ok(())
}

enum Process {
    Child(tokio::process::Child),
    Adopted(u32),
    /// Answering on the socket, but not started by a k3rs agent we know of.
    Unknown,
    /// Could not be started; the next attempt follows the back-off.
    Dead,
}

fn find_containerd() -> anyhow::Result<PathBuf> {
    find_containerd_in(&std::env::var_os("PATH").unwrap_or_default())
}

fn find_containerd_in(path: &std::ffi::OsStr) -> anyhow::Result<PathBuf> {
    for dir in std::env::split_paths(path) {
        let candidate = dir.join("containerd");
        if let Ok(meta) = std::fs::metadata(&candidate) {
            use std::os::unix::fs::PermissionsExt;
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return Ok(candidate);
            }
        }
    }
    anyhow::bail!(
        "containerd not found in PATH: install the containerd package (apt-get install containerd runc)"
    )
}

fn spawn_containerd(binary: &Path, paths: &Paths) -> anyhow::Result<tokio::process::Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&paths.log)
        .with_context(|| format!("opening {}", paths.log.display()))?;
    let child = tokio::process::Command::new(binary)
        .arg("--config")
        .arg(&paths.config)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().context("duplicating the log handle")?)
        .stderr(log)
        // Its own process group: a Ctrl-C or a signal to the agent's group spares containerd.
        .process_group(0)
        // containerd speaks sd_notify too: inheriting our socket it would tell systemd
        // READY=1 (and feed our watchdog) before the agent has registered its Node.
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .kill_on_drop(false)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    if let Some(pid) = child.id()
        && let Err(e) = std::fs::write(&paths.pid_file, format!("{pid}\n"))
    {
        tracing::warn!(file = %paths.pid_file.display(), error = %e, "cannot write containerd's pid file");
    }
    Ok(child)
}

/// The last lines of containerd's log, for error messages.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read(log).unwrap_or_default();
    let start = text.len().saturating_sub(4096);
    let text = String::from_utf8_lossy(&text[start..]);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

async fn cri_version(socket: &Path) -> anyhow::Result<k8s_cri::v1::VersionResponse> {
    let channel = cri::connect(socket).await?;
    let mut client = k8s_cri::v1::runtime_service_client::RuntimeServiceClient::new(channel);
    let resp = client
        .version(k8s_cri::v1::VersionRequest {
            version: "v1".into(),
        })
        .await
        .context("CRI Version")?;
    Ok(resp.into_inner())
}

async fn cri_ready(socket: &Path) -> Option<Channel> {
    if !socket.exists() {
        return None;
    }
    match tokio::time::timeout(Duration::from_secs(5), cri_version(socket)).await {
        Ok(Ok(_)) => cri::connect(socket).await.ok(),
        _ => None,
    }
}

/// Waits for CRI to answer; fails early (with the log's tail) if the child exits.
async fn wait_ready(
    paths: &Paths,
    mut child: Option<&mut tokio::process::Child>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(c) = child.as_deref_mut()
            && let Some(status) = c.try_wait().context("checking on containerd")?
        {
            anyhow::bail!(
                "containerd exited ({status}) before it was ready; the end of {}:\n{}",
                paths.log.display(),
                log_tail(&paths.log)
            );
        }
        if paths.socket.exists() && cri_version(&paths.socket).await.is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "containerd did not answer CRI on {} within {:?}; the end of {}:\n{}",
                paths.socket.display(),
                READY_TIMEOUT,
                paths.log.display(),
                log_tail(&paths.log)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn read_pid_file(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether `pid` is a live (non-zombie) containerd, not a recycled pid.
fn is_containerd(pid: u32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim() != "containerd" {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesised command name.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z') | Some('X') | None)
}

/// Waits until the current containerd is gone.
async fn wait_exit(process: &mut Process, socket: &Path) -> String {
    match process {
        Process::Child(child) => match child.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => format!("unknown status ({e})"),
        },
        Process::Adopted(pid) => {
            while is_containerd(*pid) {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            "exited".to_string()
        }
        Process::Dead => "not running".to_string(),
        Process::Unknown => {
            let mut failures = 0;
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                match tokio::time::timeout(Duration::from_secs(5), cri_version(socket)).await {
                    Ok(Ok(_)) => failures = 0,
                    _ => failures += 1,
                }
                if failures >= 3 {
                    return "stopped answering CRI".to_string();
                }
            }
        }
    }
}

/// Restarts containerd whenever it dies, with exponential back-off.
async fn supervise(paths: Paths, mut process: Process, pid: Arc<AtomicU32>) {
    let mut backoff = RESTART_BACKOFF_MIN;
    let mut started = Instant::now();
    loop {
        let status = wait_exit(&mut process, &paths.socket).await;
        pid.store(0, Ordering::SeqCst);
        if started.elapsed() >= STABLE_RUN {
            backoff = RESTART_BACKOFF_MIN;
        }
        tracing::warn!(%status, restart_in = ?backoff, "containerd exited; restarting it");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(RESTART_BACKOFF_MAX);
        started = Instant::now();
        let binary = match find_containerd() {
            Ok(b) => b,
            Err(e) => {
                tracing::error!("{e:#}");
                process = Process::Dead;
                continue;
            }
        };
        match spawn_containerd(&binary, &paths) {
            Ok(mut child) => {
                pid.store(child.id().unwrap_or(0), Ordering::SeqCst);
                match wait_ready(&paths, Some(&mut child)).await {
                    Ok(()) => tracing::info!(pid = ?child.id(), "containerd restarted"),
                    Err(e) => tracing::error!("containerd restart: {e:#}"),
                }
                process = Process::Child(child);
            }
            Err(e) => {
                tracing::error!("restarting containerd: {e:#}");
                process = Process::Dead;
            }
        }
    }
}

fn write_if_changed(path: &Path, text: &str) -> anyhow::Result<bool> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(text) {
        return Ok(false);
    }
    cni::write_atomic(path, text.as_bytes())?;
    Ok(true)
}

/// The streaming port already in the config (stable across restarts), else k3s's 10010 when
/// free, else any free port.
fn choose_stream_port(config: &Path) -> u16 {
    if let Ok(text) = std::fs::read_to_string(config) {
        for line in text.lines() {
            if let Some(v) = line.trim().strip_prefix("stream_server_port = ")
                && let Ok(port) = v.trim_matches('"').parse::<u16>()
                && port != 0
            {
                return port;
            }
        }
    }
    if std::net::TcpListener::bind(("127.0.0.1", DEFAULT_STREAM_PORT)).is_ok() {
        return DEFAULT_STREAM_PORT;
    }
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(DEFAULT_STREAM_PORT)
}

/// Whether this process may lower its `oom_score_adj` (CAP_SYS_RESOURCE honoured). Tried
/// by lowering it by one and putting it back (raising is always allowed).
fn can_lower_oom_score_adj() -> bool {
    let path = "/proc/self/oom_score_adj";
    let Some(current) = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    else {
        return false;
    };
    if current <= -1000 {
        return true;
    }
    let lowered = std::fs::write(path, format!("{}", current - 1)).is_ok();
    if lowered {
        let _ = std::fs::write(path, format!("{current}"));
    }
    lowered
}

/// systemd as init with a pure cgroup v2 hierarchy: use the systemd cgroup driver; otherwise
/// cgroupfs, as k3s does without systemd.
fn host_uses_systemd_cgroups() -> bool {
    Path::new("/run/systemd/system").is_dir()
        && Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
        && std::fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd")
}

/// `overlayfs` if an overlay mount works under containerd's root, else `native`.
fn choose_snapshotter(root: &Path) -> String {
    match overlay_mount_works(root) {
        Ok(()) => "overlayfs".to_string(),
        Err(e) => {
            tracing::warn!(root = %root.display(), "overlay cannot be mounted here ({e}); using the native snapshotter");
            "native".to_string()
        }
    }
}

fn overlay_mount_works(root: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let base = root.join(format!(".overlay-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dirs = ["lower", "upper", "work", "merged"].map(|d| base.join(d));
    for d in &dirs {
        std::fs::create_dir_all(d)?;
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        dirs[0].display(),
        dirs[1].display(),
        dirs[2].display()
    );
    let to_c = |b: &[u8]| CString::new(b).map_err(|e| std::io::Error::other(e.to_string()));
    let target = to_c(dirs[3].as_os_str().as_bytes())?;
    let fstype = to_c(b"overlay")?;
    let data = to_c(opts.as_bytes())?;
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    let result = if rc == 0 {
        // SAFETY: as above.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    };
    let _ = std::fs::remove_dir_all(&base);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_paths() {
        let mut opts = RuntimeOptions::new("/var/lib/k3rs");
        let p = Paths::new(&opts);
        assert_eq!(
            p.config,
            Path::new("/var/lib/k3rs/agent/etc/containerd/config.toml")
        );
        assert_eq!(p.root, Path::new("/var/lib/k3rs/agent/containerd"));
        assert_eq!(p.state, Path::new("/run/k3rs/containerd"));
        assert_eq!(p.socket, Path::new("/run/k3rs/containerd/containerd.sock"));
        assert_eq!(
            p.log,
            Path::new("/var/lib/k3rs/agent/containerd/containerd.log")
        );
        assert_eq!(
            p.cni_conf_dir,
            Path::new("/var/lib/k3rs/agent/etc/cni/net.d")
        );
        assert_eq!(p.images_dir, Path::new("/var/lib/k3rs/agent/images"));
        opts.run_dir = "/tmp/x".into();
        assert_eq!(
            Paths::new(&opts).socket,
            Path::new("/tmp/x/containerd/containerd.sock")
        );
    }

    #[test]
    fn stream_port_is_kept_from_the_existing_config() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        std::fs::write(&config, "[x]\n  stream_server_port = \"43210\"\n").unwrap();
        assert_eq!(choose_stream_port(&config), 43210);
        assert_ne!(choose_stream_port(&dir.path().join("absent")), 0);
    }

    #[test]
    fn missing_containerd_names_the_package() {
        let err = find_containerd_in("/nonexistent-k3rs-test:/also-not".as_ref()).unwrap_err();
        assert!(
            err.to_string().contains("apt-get install containerd runc"),
            "{err}"
        );
    }
}
