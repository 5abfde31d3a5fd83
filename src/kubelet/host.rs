//! Facts about the host the kubelet reports in the Node: CPUs, memory, the root dir's
//! filesystem, kernel and OS, machine and boot IDs. Reads `/proc`, `/sys`, `/etc` only.

use std::path::Path;

/// What the node has, read once per status update (memory and disk can change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostFacts {
    pub cpus: u32,
    pub memory_bytes: u64,
    pub ephemeral_storage_bytes: u64,
    pub kernel_version: String,
    pub os_image: String,
    pub machine_id: String,
    pub boot_id: String,
    pub system_uuid: String,
}

impl HostFacts {
    pub fn read(root_dir: &Path) -> HostFacts {
        HostFacts {
            cpus: online_cpus(),
            memory_bytes: std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|text| meminfo_field(&text, "MemTotal"))
                .unwrap_or(0),
            ephemeral_storage_bytes: filesystem_size(root_dir).map(|f| f.total).unwrap_or(0),
            kernel_version: read_trimmed("/proc/sys/kernel/osrelease"),
            os_image: std::fs::read_to_string("/etc/os-release")
                .ok()
                .and_then(|text| os_pretty_name(&text))
                .unwrap_or_else(|| "Linux".to_string()),
            machine_id: first_of(&["/etc/machine-id", "/var/lib/dbus/machine-id"]),
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            system_uuid: read_trimmed("/sys/class/dmi/id/product_uuid"),
        }
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn first_of(paths: &[&str]) -> String {
    paths
        .iter()
        .map(|p| read_trimmed(p))
        .find(|s| !s.is_empty())
        .unwrap_or_default()
}

/// CPUs this process may run on (cgroup/affinity aware), as the kubelet's cAdvisor counts
/// online CPUs.
fn online_cpus() -> u32 {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse_cpu_list(s.trim()))
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() as u32)
        })
        .unwrap_or(1)
}

/// `0-3,6,8-9` → 7.
pub fn parse_cpu_list(list: &str) -> Option<u32> {
    let mut count = 0;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                count += b.checked_sub(a)? + 1;
            }
            None => {
                part.trim().parse::<u32>().ok()?;
                count += 1;
            }
        }
    }
    (count > 0).then_some(count)
}

/// A `/proc/meminfo` field in bytes (`MemTotal:  16318436 kB`).
pub fn meminfo_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let mut parts = rest.split_whitespace();
        let value: u64 = parts.next()?.parse().ok()?;
        Some(match parts.next() {
            Some("kB") => value * 1024,
            _ => value,
        })
    })
}

/// `PRETTY_NAME` from os-release, unquoted.
pub fn os_pretty_name(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix("PRETTY_NAME=")?;
        Some(
            value
                .trim()
                .trim_matches('"')
                .trim_matches('\'')
                .to_string(),
        )
    })
}

/// Size and free space of the filesystem holding `path`.
#[derive(Clone, Copy, Debug)]
pub struct FsUsage {
    pub total: u64,
    pub available: u64,
    pub inodes_total: u64,
    pub inodes_free: u64,
}

pub fn filesystem_size(path: &Path) -> Option<FsUsage> {
    use std::os::unix::ffi::OsStrExt;
    // The root dir may not exist yet on first start: measure its nearest existing parent.
    let mut probe = path;
    while !probe.exists() {
        probe = probe.parent()?;
    }
    let c_path = std::ffi::CString::new(probe.as_os_str().as_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_path is a valid NUL-terminated string and stat is a properly sized out-param.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) };
    if rc != 0 {
        return None;
    }
    let fragment = stat.f_frsize as u64;
    Some(FsUsage {
        total: stat.f_blocks as u64 * fragment,
        available: stat.f_bavail as u64 * fragment,
        inodes_total: stat.f_files as u64,
        inodes_free: stat.f_ffree as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3"), Some(4));
        assert_eq!(parse_cpu_list("0-3,6,8-9"), Some(7));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list(""), None);
    }

    #[test]
    fn meminfo() {
        let text =
            "MemTotal:       16318436 kB\nMemFree:         1000 kB\nMemAvailable:  8000 kB\n";
        assert_eq!(meminfo_field(text, "MemTotal"), Some(16318436 * 1024));
        assert_eq!(meminfo_field(text, "MemAvailable"), Some(8000 * 1024));
        assert_eq!(meminfo_field(text, "Mem"), None);
    }

    #[test]
    fn os_release() {
        let text = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(
            os_pretty_name(text).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
    }

    #[test]
    fn reads_this_host() {
        let facts = HostFacts::read(Path::new("/tmp/does/not/exist/yet"));
        assert!(facts.cpus >= 1);
        assert!(facts.memory_bytes > 0);
        assert!(
            facts.ephemeral_storage_bytes > 0,
            "statvfs of the nearest parent"
        );
        assert!(!facts.kernel_version.is_empty());
    }
}
