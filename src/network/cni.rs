//! The CNI conflist containerd's CRI plugin reads (`<data-dir>/agent/etc/cni/net.d/
//! 10-k3rs.conflist`): a `cni0` bridge that is the pods' gateway, masquerades their traffic
//! off the node and allows hairpin, host-local IPAM on the node's podCIDR(s) (one range per
//! address family), then `portmap` for `hostPort`s. The loopback interface is brought up by
//! containerd itself. Plugins come from the OS package (`containernetworking-plugins`).
//!
//! Writes that one file (atomically: temp file + rename) and nothing else.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

pub const CONFLIST_NAME: &str = "10-k3rs.conflist";
pub const BRIDGE_NAME: &str = "cni0";
pub const NETWORK_NAME: &str = "cbr0";

/// Where the CNI plugins are: Debian's package puts them in `/usr/lib/cni`; upstream tarballs
/// (and k3s users) use `/opt/cni/bin`.
pub fn default_plugin_dir() -> PathBuf {
    let debian = Path::new("/usr/lib/cni");
    let upstream = Path::new("/opt/cni/bin");
    if debian.join("bridge").exists() || !upstream.join("bridge").exists() {
        debian.to_path_buf()
    } else {
        upstream.to_path_buf()
    }
}

/// Renders the conflist for `pod_cidrs` (the Node's `spec.podCIDRs`).
pub fn render_conflist(pod_cidrs: &[String]) -> anyhow::Result<String> {
    if pod_cidrs.is_empty() {
        anyhow::bail!("no pod CIDR: the node has no spec.podCIDRs yet");
    }
    let mut ranges = Vec::new();
    let mut routes = Vec::new();
    for cidr in pod_cidrs {
        let (addr, len) = cidr
            .split_once('/')
            .with_context(|| format!("pod CIDR {cidr:?} is not address/prefix"))?;
        let ip: std::net::IpAddr = addr
            .parse()
            .with_context(|| format!("pod CIDR {cidr:?} has a bad address"))?;
        let len: u8 = len
            .parse()
            .with_context(|| format!("pod CIDR {cidr:?} has a bad prefix length"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        if len > max || len + 2 > max {
            anyhow::bail!("pod CIDR {cidr:?} is too small for pods");
        }
        ranges.push(serde_json::json!([{ "subnet": cidr }]));
        routes.push(serde_json::json!({
            "dst": if ip.is_ipv4() { "0.0.0.0/0" } else { "::/0" }
        }));
    }
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE_NAME,
                "isGateway": true,
                "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": ranges,
                    "routes": routes,
                },
            },
            {
                "type": "portmap",
                "capabilities": { "portMappings": true },
            },
        ],
    });
    let mut text = serde_json::to_string_pretty(&conf).context("encoding the CNI conflist")?;
    text.push('\n');
    Ok(text)
}

/// Writes `10-k3rs.conflist` into `conf_dir` if its content differs; `Ok(true)` when it changed.
pub fn write_conflist(conf_dir: &Path, pod_cidrs: &[String]) -> anyhow::Result<bool> {
    let text = render_conflist(pod_cidrs)?;
    let path = conf_dir.join(CONFLIST_NAME);
    if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
        return Ok(false);
    }
    write_atomic(&path, text.as_bytes())?;
    tracing::info!(path = %path.display(), cidrs = ?pod_cidrs, "wrote the CNI network config");
    Ok(true)
}

/// Temp file in the same directory, fsync, rename: readers see the old or the new file, never
/// half of one. (containerd watches the directory and would load a partial file.)
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .with_context(|| format!("{} has no parent directory", path.display()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A dot-name without the .conflist suffix, so containerd never picks the temp file up.
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dual_stack_conflist() {
        let text =
            render_conflist(&["10.42.0.0/24".to_string(), "fd00:42::/64".to_string()]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        let bridge = &v["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["bridge"], "cni0");
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["ipMasq"], true);
        assert_eq!(bridge["hairpinMode"], true);
        assert_eq!(bridge["ipam"]["type"], "host-local");
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.42.0.0/24");
        assert_eq!(bridge["ipam"]["ranges"][1][0]["subnet"], "fd00:42::/64");
        assert_eq!(bridge["ipam"]["routes"][0]["dst"], "0.0.0.0/0");
        assert_eq!(bridge["ipam"]["routes"][1]["dst"], "::/0");
        assert_eq!(v["plugins"][1]["type"], "portmap");
        assert_eq!(v["plugins"][1]["capabilities"]["portMappings"], true);
    }

    #[test]
    fn bad_cidrs_are_rejected() {
        assert!(render_conflist(&[]).is_err());
        assert!(render_conflist(&["10.42.0.0".into()]).is_err());
        assert!(render_conflist(&["10.42.0.0/33".into()]).is_err());
        assert!(render_conflist(&["nonsense/24".into()]).is_err());
    }

    #[test]
    fn write_reports_changes_only() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("net.d");
        assert!(write_conflist(&conf, &["10.42.1.0/24".into()]).unwrap());
        assert!(!write_conflist(&conf, &["10.42.1.0/24".into()]).unwrap());
        assert!(write_conflist(&conf, &["10.42.2.0/24".into()]).unwrap());
        let names: Vec<_> = std::fs::read_dir(&conf)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, [CONFLIST_NAME]);
        assert!(
            std::fs::read_to_string(conf.join(CONFLIST_NAME))
                .unwrap()
                .contains("10.42.2.0/24")
        );
    }
}
