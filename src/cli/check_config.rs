//! `k3rs check-config`: a readable report on whether this machine can run k3rs — kernel
//! features (namespaces, cgroup v1/v2 controllers, overlay, nf_tables, br_netfilter,
//! vxlan) and the binaries the agent runs (containerd, runc, CNI plugins, nft) — each
//! with OK or what is missing and what to do about it.
//!
//! Owns only reading: `/proc`, `/sys/fs/cgroup`, `/lib/modules/<release>`, the kernel
//! config (`/proc/config.gz`, `/boot/config-<release>`) and `PATH`. All of them are
//! read below a root directory so the checks can be tested against a fake machine. It
//! changes nothing (it never loads a module).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// How bad a failed check is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// k3rs cannot run pods without it: the command exits non-zero.
    Required,
    /// Only some setups need it (for example vxlan for multi-node VXLAN routing).
    Optional,
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub section: &'static str,
    pub name: String,
    pub ok: bool,
    pub severity: Severity,
    /// What was found (`loaded`, `/usr/bin/runc`) or what is missing.
    pub detail: String,
    /// What to do when not OK.
    pub fix: Option<String>,
}

/// The machine being checked: a root directory (normally `/`), the kernel release and
/// the directories searched for binaries.
#[derive(Clone, Debug)]
pub struct Host {
    pub root: PathBuf,
    pub kernel_release: String,
    pub path: Vec<PathBuf>,
}

impl Host {
    /// This machine.
    pub fn current() -> Host {
        let root = PathBuf::from("/");
        let kernel_release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let mut path: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        // Root's usual directories even when PATH is minimal (systemd, sudo).
        for extra in [
            "/usr/local/sbin",
            "/usr/local/bin",
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/bin",
        ] {
            let extra = PathBuf::from(extra);
            if !path.contains(&extra) {
                path.push(extra);
            }
        }
        Host {
            root,
            kernel_release,
            path,
        }
    }

    fn file(&self, absolute: &str) -> PathBuf {
        self.root.join(absolute.trim_start_matches('/'))
    }

    fn read(&self, absolute: &str) -> Option<String> {
        std::fs::read_to_string(self.file(absolute)).ok()
    }

    fn exists(&self, absolute: &str) -> bool {
        self.file(absolute).exists()
    }

    /// An executable named `name` in the search path (paths are read below the root).
    fn which(&self, name: &str) -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        self.path.iter().find_map(|dir| {
            let shown = dir.join(name);
            let real = self.root.join(shown.strip_prefix("/").unwrap_or(&shown));
            let meta = std::fs::metadata(&real).ok()?;
            (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(shown)
        })
    }
}

/// The package manager used in install hints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PackageManager {
    Apt,
    Dnf,
    Apk,
    Unknown,
}

impl PackageManager {
    fn detect(host: &Host) -> PackageManager {
        if host.which("apt-get").is_some() {
            PackageManager::Apt
        } else if host.which("dnf").is_some() || host.which("yum").is_some() {
            PackageManager::Dnf
        } else if host.which("apk").is_some() {
            PackageManager::Apk
        } else {
            PackageManager::Unknown
        }
    }

    /// The install command for a package known by its Debian name.
    fn install(self, debian_name: &str) -> String {
        let name = match (self, debian_name) {
            (PackageManager::Apk, "containernetworking-plugins") => "cni-plugins",
            (_, other) => other,
        };
        match self {
            PackageManager::Apt => format!("apt-get install -y {name}"),
            PackageManager::Dnf => format!("dnf install -y {name}"),
            PackageManager::Apk => format!("apk add {name}"),
            PackageManager::Unknown => format!("install the {name} package"),
        }
    }
}

/// Where a kernel feature was found.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Presence {
    Loaded,
    BuiltIn,
    /// Present as a loadable module; `modprobe <name>` (the unit does this at start).
    Module,
    Missing,
}

/// The kernel's build configuration, if readable: `CONFIG_X` → `y`/`m`.
struct KernelConfig(Vec<(String, String)>);

impl KernelConfig {
    fn load(host: &Host) -> Option<(KernelConfig, String)> {
        let text = read_gzip_config(&host.file("/proc/config.gz"))
            .map(|t| (t, "/proc/config.gz".to_string()))
            .or_else(|| {
                let boot = format!("/boot/config-{}", host.kernel_release);
                host.read(&boot).map(|t| (t, boot))
            })?;
        let entries = text
            .0
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        Some((KernelConfig(entries), text.1))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// `/proc/config.gz` is gzip; reading it needs a decompressor.
fn read_gzip_config(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Runs every check.
pub fn check(host: &Host) -> Vec<Check> {
    let mut checks = Vec::new();
    let packages = PackageManager::detect(host);
    let config = KernelConfig::load(host);
    let loaded: BTreeSet<String> = host
        .read("/proc/modules")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    let builtin = host
        .read(&format!(
            "/lib/modules/{}/modules.builtin",
            host.kernel_release
        ))
        .unwrap_or_default();
    let module_index = host
        .read(&format!("/lib/modules/{}/modules.dep", host.kernel_release))
        .unwrap_or_default();
    let filesystems = host.read("/proc/filesystems").unwrap_or_default();

    // Namespaces: the kernel exposes one link per supported kind.
    for ns in ["mnt", "pid", "net", "ipc", "uts", "user", "cgroup"] {
        let ok = host.exists(&format!("/proc/self/ns/{ns}"));
        checks.push(Check {
            section: "Kernel: namespaces",
            name: format!("{ns} namespace"),
            ok,
            severity: Severity::Required,
            detail: if ok { "supported" } else { "not supported" }.to_string(),
            fix: (!ok).then(|| {
                "use a kernel built with CONFIG_NAMESPACES and this namespace".to_string()
            }),
        });
    }

    cgroup_checks(host, &mut checks);

    let presence = |module: &str,
                    sysfs_marker: Option<&str>,
                    config_key: &str|
     -> (Presence, String) {
        let file_name = format!("/{module}.ko");
        let as_module = |text: &str| {
            text.lines().any(|l| {
                let path = l.split(':').next().unwrap_or("");
                path.contains(&file_name)
                    || path.contains(&format!("/{}.ko", module.replace('_', "-")))
            })
        };
        if loaded.contains(module) || sysfs_marker.is_some_and(|m| host.exists(m)) {
            return (Presence::Loaded, "loaded".into());
        }
        if as_module(&builtin) {
            return (Presence::BuiltIn, "built into the kernel".into());
        }
        if as_module(&module_index) {
            return (
                Presence::Module,
                format!("available as a module (not loaded; `modprobe {module}`)"),
            );
        }
        match config
            .as_ref()
            .and_then(|(c, source)| c.get(config_key).map(|v| (v, source)))
        {
            Some(("y", source)) => (
                Presence::BuiltIn,
                format!("built in ({config_key}=y in {source})"),
            ),
            Some(("m", source)) => (
                Presence::Module,
                format!("available as a module ({config_key}=m in {source}; `modprobe {module}`)"),
            ),
            _ => (Presence::Missing, "missing".into()),
        }
    };

    // overlay: a registered filesystem is as good as loaded.
    let (overlay, overlay_detail) = if filesystems
        .lines()
        .any(|l| l.split_whitespace().last() == Some("overlay"))
    {
        (
            Presence::Loaded,
            "loaded (in /proc/filesystems)".to_string(),
        )
    } else {
        presence("overlay", None, "CONFIG_OVERLAY_FS")
    };
    let module_fix = |module: &str| {
        Some(format!(
            "load it with `modprobe {module}`, or install your distribution's extra kernel modules (Debian/Ubuntu: linux-modules-extra-{}); the kernel needs it built in or as a module",
            host.kernel_release
        ))
    };
    let mut feature = |name: &str,
                       module: &str,
                       presence: Presence,
                       detail: String,
                       severity: Severity,
                       why: &str| {
        let ok = presence != Presence::Missing;
        checks.push(Check {
            section: "Kernel: modules",
            name: name.to_string(),
            ok,
            severity,
            detail: if ok {
                detail
            } else {
                format!("not found ({why})")
            },
            fix: if ok { None } else { module_fix(module) },
        });
    };
    feature(
        "overlay",
        "overlay",
        overlay,
        overlay_detail,
        Severity::Required,
        "containerd's overlayfs snapshotter",
    );
    let (p, d) = presence(
        "nf_tables",
        Some("/sys/module/nf_tables"),
        "CONFIG_NF_TABLES",
    );
    feature(
        "nf_tables",
        "nf_tables",
        p,
        d,
        Severity::Required,
        "the service proxy's nftables rules",
    );
    let (p, d) = presence(
        "br_netfilter",
        Some("/proc/sys/net/bridge"),
        "CONFIG_BRIDGE_NETFILTER",
    );
    feature(
        "br_netfilter",
        "br_netfilter",
        p,
        d,
        Severity::Required,
        "Service traffic between pods on one bridge",
    );
    let (p, d) = presence("vxlan", Some("/sys/module/vxlan"), "CONFIG_VXLAN");
    feature(
        "vxlan",
        "vxlan",
        p,
        d,
        Severity::Optional,
        "only for VXLAN routing between nodes",
    );

    // Binaries.
    for (binary, package, why) in [
        (
            "containerd",
            "containerd",
            "the container runtime the agent supervises",
        ),
        (
            "runc",
            "runc",
            "the OCI runtime containerd starts containers with",
        ),
        (
            "nft",
            "nftables",
            "the service proxy applies its rules with `nft -f`",
        ),
    ] {
        let found = host.which(binary);
        checks.push(Check {
            section: "Binaries",
            name: binary.to_string(),
            ok: found.is_some(),
            severity: Severity::Required,
            detail: match &found {
                Some(path) => path.display().to_string(),
                None => format!("not found ({why})"),
            },
            fix: found.is_none().then(|| packages.install(package)),
        });
    }
    let cni_dirs = [
        "/opt/cni/bin",
        "/usr/lib/cni",
        "/usr/libexec/cni",
        "/usr/lib/cni-plugins",
    ];
    for plugin in ["bridge", "host-local", "loopback", "portmap"] {
        let found = cni_dirs
            .iter()
            .map(|d| format!("{d}/{plugin}"))
            .find(|p| host.file(p).is_file());
        checks.push(Check {
            section: "Binaries",
            name: format!("CNI plugin {plugin}"),
            ok: found.is_some(),
            severity: Severity::Required,
            detail: found
                .unwrap_or_else(|| format!("not found (looked in {})", cni_dirs.join(", "))),
            fix: None,
        });
        if let Some(last) = checks.last_mut()
            && !last.ok
        {
            last.fix = Some(packages.install("containernetworking-plugins"));
        }
    }
    checks
}

fn cgroup_checks(host: &Host, checks: &mut Vec<Check>) {
    const SECTION: &str = "Kernel: cgroups";
    let required = ["cpu", "memory", "pids"];
    let optional = ["cpuset", "io"];
    if let Some(controllers) = host.read("/sys/fs/cgroup/cgroup.controllers") {
        let available: BTreeSet<&str> = controllers.split_whitespace().collect();
        checks.push(Check {
            section: SECTION,
            name: "cgroup hierarchy".into(),
            ok: true,
            severity: Severity::Required,
            detail: "cgroup v2 (unified) at /sys/fs/cgroup".into(),
            fix: None,
        });
        for (names, severity) in [
            (&required[..], Severity::Required),
            (&optional[..], Severity::Optional),
        ] {
            for name in names {
                let ok = available.contains(name);
                checks.push(Check {
                    section: SECTION,
                    name: format!("{name} controller"),
                    ok,
                    severity,
                    detail: if ok { "enabled" } else { "not in cgroup.controllers" }.into(),
                    fix: (!ok).then(|| format!("enable the {name} controller (kernel command line, e.g. cgroup_enable={name}; on Raspberry Pi add `cgroup_memory=1 cgroup_enable=memory` to cmdline.txt)")),
                });
            }
        }
        return;
    }
    // cgroup v1: /proc/cgroups lists `subsys_name hierarchy num_cgroups enabled`.
    let Some(table) = host.read("/proc/cgroups") else {
        checks.push(Check {
            section: SECTION,
            name: "cgroup hierarchy".into(),
            ok: false,
            severity: Severity::Required,
            detail: "no cgroup v2 at /sys/fs/cgroup and no /proc/cgroups".into(),
            fix: Some("mount cgroup2 on /sys/fs/cgroup (systemd does this at boot)".into()),
        });
        return;
    };
    checks.push(Check {
        section: SECTION,
        name: "cgroup hierarchy".into(),
        ok: true,
        severity: Severity::Required,
        detail: "cgroup v1 (legacy)".into(),
        fix: None,
    });
    let enabled: BTreeSet<&str> = table
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && f[3] == "1").then(|| f[0])
        })
        .collect();
    fn v1_name(n: &str) -> &str {
        if n == "io" { "blkio" } else { n }
    }
    for (names, severity) in [
        (&required[..], Severity::Required),
        (&optional[..], Severity::Optional),
    ] {
        for name in names {
            let ok = enabled.contains(v1_name(name));
            checks.push(Check {
                section: SECTION,
                name: format!("{} controller", v1_name(name)),
                ok,
                severity,
                detail: if ok {
                    "enabled"
                } else {
                    "disabled or missing in /proc/cgroups"
                }
                .into(),
                fix: (!ok).then(|| {
                    format!(
                        "enable it on the kernel command line (cgroup_enable={})",
                        v1_name(name)
                    )
                }),
            });
        }
    }
}

/// Renders the report; the boolean is true when every required check passed.
pub fn render(checks: &[Check]) -> (String, bool) {
    let mut out = String::new();
    let mut section = "";
    for c in checks {
        if c.section != section {
            if !section.is_empty() {
                out.push('\n');
            }
            section = c.section;
            let _ = writeln!(out, "{section}:");
        }
        let status = match (c.ok, c.severity) {
            (true, _) => "OK",
            (false, Severity::Required) => "MISSING",
            (false, Severity::Optional) => "missing (optional)",
        };
        let _ = writeln!(out, "- {}: {status} - {}", c.name, c.detail);
        if let Some(fix) = &c.fix {
            let _ = writeln!(out, "    fix: {fix}");
        }
    }
    let failed: Vec<&Check> = checks
        .iter()
        .filter(|c| !c.ok && c.severity == Severity::Required)
        .collect();
    let optional = checks
        .iter()
        .filter(|c| !c.ok && c.severity == Severity::Optional)
        .count();
    out.push('\n');
    if failed.is_empty() {
        let _ = writeln!(
            out,
            "STATUS: pass ({} checks OK{})",
            checks.iter().filter(|c| c.ok).count(),
            if optional > 0 {
                format!(", {optional} optional missing")
            } else {
                String::new()
            }
        );
    } else {
        let names: Vec<&str> = failed.iter().map(|c| c.name.as_str()).collect();
        let _ = writeln!(
            out,
            "STATUS: {} required item(s) missing: {}",
            failed.len(),
            names.join(", ")
        );
    }
    (out, failed.is_empty())
}

/// `k3rs check-config`: prints the report; `Ok(false)` when something required is missing.
pub fn run() -> bool {
    let host = Host::current();
    let (text, ok) = render(&check(&host));
    print!("{text}");
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn write(root: &Path, path: &str, content: &str) {
        let p = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, content).expect("write");
    }

    fn executable(root: &Path, path: &str) {
        write(root, path, "#!/bin/sh\n");
        let p = root.join(path.trim_start_matches('/'));
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    fn host(root: &Path) -> Host {
        Host {
            root: root.to_path_buf(),
            kernel_release: "6.1.0-test".into(),
            path: vec![PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")],
        }
    }

    fn find<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no check {name}: {checks:#?}"))
    }

    /// A machine with everything: cgroup v2, modules loaded or built in, binaries.
    fn complete_machine(root: &Path) {
        for ns in ["mnt", "pid", "net", "ipc", "uts", "user", "cgroup"] {
            write(root, &format!("/proc/self/ns/{ns}"), "");
        }
        write(
            root,
            "/sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        );
        write(root, "/proc/filesystems", "nodev\tsysfs\nnodev\toverlay\n");
        write(
            root,
            "/proc/modules",
            "nf_tables 286720 0 - Live 0x0\nbr_netfilter 32768 0 - Live 0x0\n",
        );
        write(
            root,
            "/lib/modules/6.1.0-test/modules.dep",
            "kernel/drivers/net/vxlan/vxlan.ko: kernel/net/ipv4/udp_tunnel.ko\n",
        );
        for b in [
            "/usr/bin/containerd",
            "/usr/sbin/runc",
            "/usr/sbin/nft",
            "/usr/bin/apt-get",
        ] {
            executable(root, b);
        }
        for p in ["bridge", "host-local", "loopback", "portmap"] {
            executable(root, &format!("/usr/lib/cni/{p}"));
        }
    }

    #[test]
    fn everything_present_passes() {
        let dir = tempfile::tempdir().expect("tempdir");
        complete_machine(dir.path());
        let checks = check(&host(dir.path()));
        let (text, ok) = render(&checks);
        assert!(ok, "{text}");
        assert!(
            text.contains("- overlay: OK - loaded (in /proc/filesystems)"),
            "{text}"
        );
        assert!(text.contains("- nf_tables: OK - loaded"), "{text}");
        assert!(
            text.contains("- vxlan: OK - available as a module"),
            "{text}"
        );
        assert!(text.contains("- runc: OK - /usr/sbin/runc"), "{text}");
        assert!(
            text.contains("- CNI plugin portmap: OK - /usr/lib/cni/portmap"),
            "{text}"
        );
        assert!(text.contains("cgroup v2"), "{text}");
        assert!(text.contains("STATUS: pass"), "{text}");
    }

    #[test]
    fn missing_pieces_are_named_with_a_fix() {
        let dir = tempfile::tempdir().expect("tempdir");
        complete_machine(dir.path());
        let root = dir.path();
        std::fs::remove_file(root.join("usr/sbin/runc")).expect("rm");
        std::fs::remove_file(root.join("usr/lib/cni/bridge")).expect("rm");
        write(root, "/proc/modules", "");
        write(root, "/lib/modules/6.1.0-test/modules.dep", "");
        write(root, "/sys/fs/cgroup/cgroup.controllers", "cpu io pids\n");
        // nf_tables known only from the kernel config, as a module.
        write(
            root,
            "/boot/config-6.1.0-test",
            "CONFIG_NF_TABLES=m\n# CONFIG_VXLAN is not set\n",
        );
        let checks = check(&host(root));
        let (text, ok) = render(&checks);
        assert!(!ok, "{text}");
        let runc = find(&checks, "runc");
        assert!(!runc.ok);
        assert_eq!(runc.fix.as_deref(), Some("apt-get install -y runc"));
        let bridge = find(&checks, "CNI plugin bridge");
        assert_eq!(
            bridge.fix.as_deref(),
            Some("apt-get install -y containernetworking-plugins")
        );
        assert!(!find(&checks, "memory controller").ok);
        assert!(find(&checks, "nf_tables").ok, "config says module");
        assert!(
            find(&checks, "nf_tables")
                .detail
                .contains("CONFIG_NF_TABLES=m")
        );
        let br = find(&checks, "br_netfilter");
        assert!(!br.ok);
        assert!(
            br.fix
                .as_deref()
                .unwrap_or("")
                .contains("modprobe br_netfilter")
        );
        let vxlan = find(&checks, "vxlan");
        assert!(!vxlan.ok && vxlan.severity == Severity::Optional);
        assert!(text.contains("- vxlan: missing (optional)"), "{text}");
        assert!(text.contains("- runc: MISSING"), "{text}");
        assert!(
            text.contains("STATUS: 4 required item(s) missing: memory controller, br_netfilter, runc, CNI plugin bridge"),
            "{text}"
        );
    }

    #[test]
    fn cgroup_v1_and_gzip_config() {
        let dir = tempfile::tempdir().expect("tempdir");
        complete_machine(dir.path());
        let root = dir.path();
        std::fs::remove_file(root.join("sys/fs/cgroup/cgroup.controllers")).expect("rm");
        write(
            root,
            "/proc/cgroups",
            "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpuset\t1\t1\t1\ncpu\t2\t1\t1\nblkio\t3\t1\t1\nmemory\t0\t1\t0\npids\t4\t1\t1\n",
        );
        write(root, "/proc/modules", "");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, b"CONFIG_BRIDGE_NETFILTER=y\nCONFIG_NF_TABLES=y\n")
            .expect("gz");
        let bytes = gz.finish().expect("gz");
        std::fs::write(root.join("proc/config.gz"), bytes).expect("write");
        let checks = check(&host(root));
        assert!(find(&checks, "cgroup hierarchy").detail.contains("v1"));
        assert!(find(&checks, "cpu controller").ok);
        assert!(find(&checks, "blkio controller").ok);
        assert!(!find(&checks, "memory controller").ok);
        let br = find(&checks, "br_netfilter");
        assert!(br.ok && br.detail.contains("/proc/config.gz"), "{br:?}");
    }
}
