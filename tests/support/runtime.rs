//! Real-runtime test helpers shared by the tests (and the kubelet bench) that run containerd,
//! runc and CNI: the tool checks that fail with what to install, and [`RuntimeGuard`], which
//! tears down everything such a test created — even when it panics half-way.
//!
//! The guard works by a *marker*: the test's base directory. containerd, its shims and the
//! agent started for the test all carry that directory in their command lines (socket, state
//! and data paths), and every mount they make (rootfs, netns, tmpfs volumes) lies below it. So
//! on drop the guard kills every process whose command line contains the marker, unmounts
//! everything below it, removes the netns files and runc containers it was told about, takes
//! the test's gateway address off `cni0` (the bridge itself only when nothing else uses it),
//! and removes the directory. Keep the base path short: containerd's socket path below it must
//! stay under 108 bytes.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// Panics unless the test runs as root (`what` names the test in the message).
pub fn require_root(what: &str) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("{what} needs root (it runs containerd, runc and CNI)");
    }
}

/// Panics, saying which Debian package to install, unless containerd, its runc shim, runc and
/// the CNI plugins the agent's conflist uses are installed.
pub fn require_runtime_tools() {
    for (bin, package) in [
        ("containerd", "containerd"),
        ("containerd-shim-runc-v2", "containerd"),
        ("runc", "runc"),
    ] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
            .any(|d| d.join(bin).exists());
        assert!(found, "{bin} missing: apt-get install {package}");
    }
    let cni = k3rs::network::cni::default_plugin_dir();
    for plugin in ["bridge", "host-local", "portmap", "loopback"] {
        assert!(
            cni.join(plugin).exists(),
            "CNI plugin {plugin} missing in {}: apt-get install containernetworking-plugins",
            cni.display()
        );
    }
}

/// A fresh, short base directory for one runtime test: `/tmp/k3rs-<tag>-<pid>`.
pub fn base_dir(tag: &str) -> PathBuf {
    let base = PathBuf::from(format!("/tmp/k3rs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).expect("runtime test base dir");
    base
}

/// Tears down a runtime test's processes, mounts, network bits and directory on drop.
pub struct RuntimeGuard {
    base: PathBuf,
    bridge_address: Option<String>,
    pids: Mutex<Vec<u32>>,
    netns: Mutex<Vec<PathBuf>>,
    runc_ids: Mutex<Vec<String>>,
}

impl RuntimeGuard {
    /// Guards everything below `base` (which it removes at the end).
    pub fn new(base: &Path) -> RuntimeGuard {
        RuntimeGuard {
            base: base.to_path_buf(),
            bridge_address: None,
            pids: Mutex::new(Vec::new()),
            netns: Mutex::new(Vec::new()),
            runc_ids: Mutex::new(Vec::new()),
        }
    }

    /// Also removes `address` (the pod CIDR's gateway, e.g. `10.99.0.1/24`) from `cni0`.
    pub fn with_bridge_address(mut self, address: &str) -> RuntimeGuard {
        self.bridge_address = Some(address.to_string());
        self
    }

    pub fn base(&self) -> &Path {
        &self.base
    }

    /// A process to kill even if its command line does not carry the marker.
    pub fn add_pid(&self, pid: u32) {
        self.pids.lock().expect("guard lock").push(pid);
    }

    /// A network namespace file to unmount and remove.
    pub fn add_netns(&self, path: impl Into<PathBuf>) {
        self.netns.lock().expect("guard lock").push(path.into());
    }

    /// A runc container (in containerd's `k8s.io` runc root) to delete by force.
    pub fn add_runc_container(&self, id: &str) {
        self.runc_ids
            .lock()
            .expect("guard lock")
            .push(id.to_string());
    }
}

/// A copy of what the test registered (a poisoned lock still gives its contents).
fn take<T: Clone>(list: &Mutex<Vec<T>>) -> Vec<T> {
    match list.lock() {
        Ok(v) => v.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

fn quietly(args: &[&str]) {
    let _ = Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Processes whose command line contains `marker`.
fn processes_marked(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(marker)
        })
        .collect()
}

impl Drop for RuntimeGuard {
    fn drop(&mut self) {
        for id in take(&self.runc_ids) {
            quietly(&[
                "runc",
                "--root",
                "/run/containerd/runc/k8s.io",
                "delete",
                "--force",
                &id,
            ]);
        }
        let marker = self.base.to_string_lossy().into_owned();
        let mut pids: Vec<u32> = take(&self.pids);
        pids.extend(processes_marked(&marker));
        let me = std::process::id();
        for pid in pids.into_iter().filter(|p| *p != me) {
            // SAFETY: kill(2) on processes this test started (they carry its directory).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(300));
        for ns in take(&self.netns) {
            let ns = ns.to_string_lossy().into_owned();
            quietly(&["umount", "-l", &ns]);
            let _ = std::fs::remove_file(&ns);
        }
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut mounts: Vec<&str> = mountinfo
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&marker))
            .collect();
        // Deepest first, so a parent is never busy with a child mount.
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            quietly(&["umount", "-l", m]);
        }
        if let Some(address) = &self.bridge_address {
            quietly(&["ip", "addr", "del", address, "dev", "cni0"]);
            let ports = std::fs::read_dir("/sys/class/net/cni0/brif")
                .map(|d| d.count())
                .unwrap_or(1);
            let addresses = Command::new("ip")
                .args(["-o", "addr", "show", "dev", "cni0"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("inet "))
                .unwrap_or(true);
            if ports == 0 && !addresses {
                quietly(&["ip", "link", "del", "cni0"]);
            }
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}
