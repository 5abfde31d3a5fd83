//! The node flags shared by `k3rs agent` and `k3rs server`'s embedded agent (`--node-ip`,
//! `--node-external-ip`, `--node-label`, `--node-taint`, `--container-runtime-endpoint`,
//! `--pause-image`, `--private-registry`, `--resolv-conf`, `--kubelet-arg`), validated into a
//! [`NodeConfig`].
//!
//! `--kubelet-arg key=value` is parsed straight into [`crate::kubelet::KubeletArgs`], which owns
//! the documented subset; any other key is refused (as `--kube-controller-manager-arg` is), so a
//! tuning a user relies on never goes silently missing. Owns parsing and validation only: no
//! files, no network.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Taint;

use crate::kubelet::KubeletArgs;

use super::args::NodeArgs;
use super::config::{ConfigError, Kind, Layer, Settings, parse_ip, parse_path, put_many, put_one};

use super::config::put_bool;
pub use crate::network::FlannelBackend;

/// Default `--pause-image`: built by the agent at start, so no registry is needed.
pub const DEFAULT_PAUSE_IMAGE: &str = "k3rs.local/pause:3.10";
/// Default `--private-registry`.
pub const DEFAULT_PRIVATE_REGISTRY: &str = "/etc/k3rs/registries.yaml";

/// The config-file keys of the node flags.
pub(super) const NODE_KEYS: &[(&str, Kind)] = &[
    ("node-ip", Kind::Many),
    ("node-external-ip", Kind::Many),
    ("node-label", Kind::Args),
    ("node-taint", Kind::Args),
    ("container-runtime-endpoint", Kind::One),
    ("pause-image", Kind::One),
    ("private-registry", Kind::One),
    ("resolv-conf", Kind::One),
    ("kubelet-arg", Kind::Args),
    ("flannel-backend", Kind::One),
    ("flannel-iface", Kind::One),
    ("disable-network-policy", Kind::Bool),
    ("disable-kube-proxy", Kind::Bool),
    ("lb-server-port", Kind::One),
];

/// The validated node settings.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// `--flannel-backend` (vxlan unless given).
    pub flannel_backend: FlannelBackend,
    /// `--flannel-iface`; `None` uses the interface holding the node IP.
    pub flannel_iface: Option<String>,
    /// `--disable-network-policy`.
    pub disable_network_policy: bool,
    /// `--disable-kube-proxy`.
    pub disable_kube_proxy: bool,
    /// `--node-ip`; empty means "the address that reaches the server".
    pub node_ips: Vec<IpAddr>,
    /// `--node-external-ip`.
    pub node_external_ips: Vec<IpAddr>,
    /// `--node-label`.
    pub labels: BTreeMap<String, String>,
    /// `--node-taint`.
    pub taints: Vec<Taint>,
    /// `--container-runtime-endpoint` as a socket path (`unix://` stripped); `None` runs the
    /// supervised containerd.
    pub container_runtime_endpoint: Option<PathBuf>,
    /// `--pause-image`.
    pub pause_image: String,
    /// `--private-registry`.
    pub private_registry: PathBuf,
    /// `--resolv-conf`; `None` lets the agent pick the host's.
    pub resolv_conf: Option<PathBuf>,
    /// `--kubelet-arg`, parsed straight into the kubelet's own type (`--pause-image` is its
    /// `pod-infra-container-image` default).
    pub kubelet: KubeletArgs,
    /// `--lb-server-port`: the agent's API server load balancer on 127.0.0.1.
    pub lb_server_port: u16,
}

/// Adds the node flags given on the command line (or in the environment) to `layer`.
pub(super) fn cli_layer(args: &NodeArgs, layer: &mut Layer) {
    put_many(layer, "node-ip", &args.node_ip);
    put_many(layer, "node-external-ip", &args.node_external_ip);
    put_many(layer, "node-label", &args.node_label);
    put_many(layer, "node-taint", &args.node_taint);
    put_one(
        layer,
        "container-runtime-endpoint",
        &args.container_runtime_endpoint,
    );
    put_one(layer, "pause-image", &args.pause_image);
    put_one(layer, "private-registry", &args.private_registry);
    put_one(layer, "resolv-conf", &args.resolv_conf);
    put_many(layer, "kubelet-arg", &args.kubelet_arg);
    put_one(layer, "flannel-backend", &args.flannel_backend);
    put_one(layer, "flannel-iface", &args.flannel_iface);
    put_bool(layer, "disable-network-policy", args.disable_network_policy);
    put_bool(layer, "disable-kube-proxy", args.disable_kube_proxy);
    put_one(layer, "lb-server-port", &args.lb_server_port);
}

/// Validates the node settings and applies defaults.
pub(super) fn resolve(s: &Settings) -> Result<NodeConfig, ConfigError> {
    let node_ips = s.many("node-ip", parse_ip)?;
    let node_external_ips = s.many("node-external-ip", parse_ip)?;
    let mut labels = BTreeMap::new();
    for (key, value) in s.many("node-label", parse_label)? {
        labels.insert(key, value);
    }
    let taints = s.many("node-taint", parse_taint)?;
    let flannel_backend = s
        .one("flannel-backend", |v| v.trim().parse::<FlannelBackend>())?
        .unwrap_or_default();
    let flannel_iface = s.one("flannel-iface", parse_iface)?;
    let disable_network_policy = s.flag("disable-network-policy");
    let disable_kube_proxy = s.flag("disable-kube-proxy");
    let container_runtime_endpoint = s.one("container-runtime-endpoint", parse_endpoint)?;
    let pause_image = s
        .one("pause-image", parse_image)?
        .unwrap_or_else(|| DEFAULT_PAUSE_IMAGE.to_string());
    let private_registry = s
        .one("private-registry", parse_path)?
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PRIVATE_REGISTRY));
    let resolv_conf = s.one("resolv-conf", parse_path)?;
    let raw_args = s.many("kubelet-arg", |v| Ok(v.to_string()))?;
    let defaults = KubeletArgs {
        pod_infra_container_image: Some(pause_image.clone()),
        ..KubeletArgs::default()
    };
    let kubelet = KubeletArgs::parse_onto(defaults, &raw_args)
        .map_err(|e| s.invalid("kubelet-arg", &e.argument(), e.reason()))?;
    let lb_server_port = s
        .one("lb-server-port", super::config::parse_port)?
        .unwrap_or(crate::agent::loadbalancer::DEFAULT_PORT);
    Ok(NodeConfig {
        lb_server_port,
        flannel_backend,
        flannel_iface,
        disable_network_policy,
        disable_kube_proxy,
        node_ips,
        node_external_ips,
        labels,
        taints,
        container_runtime_endpoint,
        pause_image,
        private_registry,
        resolv_conf,
        kubelet,
    })
}

/// A Linux interface name: 1–15 bytes, no `/`, whitespace or `:`.
fn parse_iface(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() || s.len() > 15 || s.contains(['/', ':']) || s.contains(char::is_whitespace) {
        return Err(
            "expected a network interface name such as eth0 (at most 15 characters)".into(),
        );
    }
    Ok(s.to_string())
}

/// A label name: an optional DNS-subdomain prefix and `/`, then 1–63 characters of
/// `[A-Za-z0-9_.-]` starting and ending alphanumeric.
fn check_label_name(name: &str) -> Result<(), String> {
    let (prefix, name) = match name.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, name),
    };
    if let Some(prefix) = prefix {
        super::config::check_dns_name(prefix)
            .map_err(|e| format!("the prefix {prefix:?} must be a DNS subdomain: {e}"))?;
    }
    check_label_value(name)?;
    if name.is_empty() {
        return Err("the name part must not be empty".to_string());
    }
    Ok(())
}

/// A label value: empty, or up to 63 characters of `[A-Za-z0-9_.-]` starting and ending
/// alphanumeric.
fn check_label_value(value: &str) -> Result<(), String> {
    if value.len() > 63 {
        return Err(format!("{value:?} is longer than 63 characters"));
    }
    let ok_chars = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ok_ends = value.is_empty()
        || (value
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
            && value
                .bytes()
                .last()
                .is_some_and(|b| b.is_ascii_alphanumeric()));
    if !ok_chars || !ok_ends {
        return Err(format!(
            "{value:?} must consist of alphanumerics, '-', '_' or '.', and start and end \
             with an alphanumeric"
        ));
    }
    Ok(())
}

/// `key=value` (the value may be empty).
fn parse_label(s: &str) -> Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| "expected key=value, e.g. disk=ssd".to_string())?;
    check_label_name(key)?;
    check_label_value(value)?;
    Ok((key.to_string(), value.to_string()))
}

/// `key=value:Effect` or `key:Effect`, Effect one of NoSchedule, PreferNoSchedule, NoExecute.
fn parse_taint(s: &str) -> Result<Taint, String> {
    let (kv, effect) = s
        .rsplit_once(':')
        .ok_or_else(|| "expected key=value:Effect, e.g. dedicated=gpu:NoSchedule".to_string())?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!(
            "unknown effect {effect:?}: use NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (kv, None),
    };
    check_label_name(key)?;
    if let Some(v) = value {
        check_label_value(v)?;
    }
    Ok(Taint {
        key: key.to_string(),
        value: value.filter(|v| !v.is_empty()).map(str::to_string),
        effect: effect.to_string(),
        time_added: None,
    })
}

/// `unix:///path` or `/path` (a CRI socket); other transports are not supported.
fn parse_endpoint(s: &str) -> Result<PathBuf, String> {
    let s = s.trim();
    let path = match s.split_once("://") {
        Some(("unix", path)) => path,
        Some((scheme, _)) => {
            return Err(format!(
                "unsupported scheme {scheme:?}: use unix:///path/to/cri.sock"
            ));
        }
        None => s,
    };
    if !path.starts_with('/') {
        return Err(
            "expected an absolute socket path, e.g. unix:///run/containerd/containerd.sock"
                .to_string(),
        );
    }
    Ok(PathBuf::from(path))
}

fn parse_image(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() || s.chars().any(char::is_whitespace) {
        return Err("expected an image reference like registry/name:tag".to_string());
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(
            parse_label("node.kubernetes.io/pool=blue").expect("valid"),
            ("node.kubernetes.io/pool".to_string(), "blue".to_string())
        );
        assert_eq!(parse_label("empty=").expect("valid").1, "");
        for bad in [
            "novalue",
            "-bad=x",
            "a=-x",
            "Bad_Prefix/x=y",
            "/x=y",
            "k=with space",
        ] {
            assert!(parse_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn taints() {
        let t = parse_taint("dedicated=gpu:NoSchedule").expect("valid");
        assert_eq!(
            (t.key.as_str(), t.value.as_deref(), t.effect.as_str()),
            ("dedicated", Some("gpu"), "NoSchedule")
        );
        let t = parse_taint("node-role.kubernetes.io/control-plane:NoExecute").expect("valid");
        assert_eq!(t.value, None);
        let e = parse_taint("a=b:Sometimes").expect_err("bad effect");
        assert!(
            e.contains("NoSchedule, PreferNoSchedule or NoExecute"),
            "{e}"
        );
        assert!(parse_taint("a=b").is_err());
        assert!(parse_taint("=b:NoSchedule").is_err());
    }

    #[test]
    fn endpoints() {
        assert_eq!(
            parse_endpoint("unix:///run/containerd/containerd.sock").expect("valid"),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(
            parse_endpoint("/run/crio/crio.sock").expect("valid"),
            PathBuf::from("/run/crio/crio.sock")
        );
        assert!(parse_endpoint("tcp://1.2.3.4:1").is_err());
        assert!(parse_endpoint("relative.sock").is_err());
    }
}
