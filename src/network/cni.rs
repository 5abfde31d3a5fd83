//! The CNI conflist containerd's CRI plugin reads (`<data-dir>/agent/etc/cni/net.d/
//! 10-k3rs.conflist`): a `cni0` bridge that is the pods' gateway and allows hairpin (and
//! masquerades their traffic off the node unless flannel's own rules do, see
//! [`ConflistOptions`]), host-local IPAM on the node's podCIDR(s) (one range per address
//! family, its state in the agent's data dir so agents sharing a host never collide), then
//! `portmap` for `hostPort`s. The loopback interface is brought up by
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

/// The knobs of the conflist that depend on the pod network backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflistOptions {
    /// The bridge plugin's `ipMasq` (masquerade everything leaving the pod subnet). Off when
    /// flannel masquerades only traffic leaving the whole pod network.
    pub ip_masq: bool,
    /// The bridge (and so the pods') MTU; `None` lets the plugin use the default.
    pub mtu: Option<u32>,
    /// host-local's `dataDir`; `None` is the plugin's `/var/lib/cni/networks`.
    pub ipam_data_dir: Option<PathBuf>,
}

impl Default for ConflistOptions {
    fn default() -> Self {
        Self {
            ip_masq: true,
            mtu: None,
            ipam_data_dir: None,
        }
    }
}

/// Renders the conflist for `pod_cidrs` (the Node's `spec.podCIDRs`) with the defaults.
pub fn render_conflist(pod_cidrs: &[String]) -> anyhow::Result<String> {
    render_conflist_with(pod_cidrs, &ConflistOptions::default())
}

/// Renders the conflist for `pod_cidrs` with `options`.
pub fn render_conflist_with(
    pod_cidrs: &[String],
    options: &ConflistOptions,
) -> anyhow::Result<String> {
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
    let mut ipam = serde_json::json!({
        "type": "host-local",
        "ranges": ranges,
        "routes": routes,
    });
    if let Some(dir) = &options.ipam_data_dir {
        ipam["dataDir"] = serde_json::json!(dir.display().to_string());
    }
    let mut bridge = serde_json::json!({
        "type": "bridge",
        "bridge": BRIDGE_NAME,
        "isGateway": true,
        "ipMasq": options.ip_masq,
        "hairpinMode": true,
        "ipam": ipam,
    });
    if let Some(mtu) = options.mtu {
        bridge["mtu"] = serde_json::json!(mtu);
    }
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": NETWORK_NAME,
        "plugins": [
            bridge,
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
    write_conflist_with(conf_dir, pod_cidrs, &ConflistOptions::default())
}

/// [`write_conflist`] with `options`.
pub fn write_conflist_with(
    conf_dir: &Path,
    pod_cidrs: &[String],
    options: &ConflistOptions,
) -> anyhow::Result<bool> {
    let text = render_conflist_with(pod_cidrs, options)?;
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
    fn flannel_options_turn_masquerade_off_and_set_mtu_and_ipam_dir() {
        let options = ConflistOptions {
            ip_masq: false,
            mtu: Some(1450),
            ipam_data_dir: Some(PathBuf::from("/var/lib/k3rs/agent/cni/networks")),
        };
        let text = render_conflist_with(&["10.42.3.0/24".to_string()], &options).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let bridge = &v["plugins"][0];
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["mtu"], 1450);
        assert_eq!(
            bridge["ipam"]["dataDir"],
            "/var/lib/k3rs/agent/cni/networks"
        );
        let default = render_conflist(&["10.42.3.0/24".to_string()]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&default).unwrap();
        assert!(v["plugins"][0].get("mtu").is_none());
        assert!(v["plugins"][0]["ipam"].get("dataDir").is_none());
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
