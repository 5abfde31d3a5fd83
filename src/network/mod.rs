//! The pod network: the CNI conflist for containerd (bridge, host-local IPAM on the node's
//! podCIDR, portmap), routes to the other nodes' podCIDRs (flannel's host-gw and vxlan
//! backends, [`flannel`]), masquerading of pod traffic that leaves the pod network, and
//! NetworkPolicy enforcement ([`policy`]).
//!
//! Owns, on the node: the conflist and host-local state under the agent's data dir, the
//! `flannel.1` device, routes with protocol [`flannel::ROUTE_PROTO`], and the nftables tables
//! `inet k3rs-flannel` and `inet k3rs-netpol`. It is an API client (Nodes, Pods, Namespaces,
//! NetworkPolicies through kube-rs): it may not touch `store` or `apiserver` internals, nor the
//! proxy's `inet k3rs` table.

pub mod cmd;
pub mod cni;
pub mod flannel;
pub mod policy;

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;

/// `--flannel-backend`: how a node reaches the other nodes' pod CIDRs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlannelBackend {
    /// A VXLAN overlay (`flannel.1`, VNI 1, UDP 8472), as flannel's default.
    #[default]
    Vxlan,
    /// Plain routes via the peers' node IPs (all nodes on one L2 segment).
    HostGw,
    /// Nothing: a CNI the user installs owns the pod network.
    None,
}

impl FromStr for FlannelBackend {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "vxlan" => Ok(Self::Vxlan),
            "host-gw" => Ok(Self::HostGw),
            "none" => Ok(Self::None),
            other => Err(format!(
                "unsupported flannel backend {other:?}: use vxlan, host-gw or none"
            )),
        }
    }
}

impl fmt::Display for FlannelBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Vxlan => "vxlan",
            Self::HostGw => "host-gw",
            Self::None => "none",
        })
    }
}

/// What the network components of one agent need.
#[derive(Debug, Clone)]
pub struct NetworkOptions {
    /// This node's name.
    pub node_name: String,
    /// This node's IP (`--node-ip`, else the address that reaches the server).
    pub node_ip: IpAddr,
    /// `--flannel-backend`.
    pub backend: FlannelBackend,
    /// `--flannel-iface`.
    pub iface: Option<String>,
    /// `false` with `--disable-network-policy`.
    pub network_policy: bool,
    /// `<data-dir>`.
    pub data_dir: PathBuf,
}

impl NetworkOptions {
    /// The conflist settings that go with this backend: flannel leaves masquerading to its own
    /// rules (so pod source addresses survive between nodes) and lowers the pods' MTU by the
    /// VXLAN overhead; `none` keeps the bridge plugin's own masquerading for a lone node.
    pub fn conflist(&self) -> cni::ConflistOptions {
        let ipam_data_dir = self.data_dir.join("agent").join("cni").join("networks");
        let mtu = match self.backend {
            FlannelBackend::Vxlan => flannel::Underlay::find(self.node_ip, self.iface.as_deref())
                .ok()
                .map(|u| u.mtu.saturating_sub(flannel::VXLAN_OVERHEAD)),
            _ => None,
        };
        cni::ConflistOptions {
            ip_masq: self.backend == FlannelBackend::None,
            mtu,
            ipam_data_dir: Some(ipam_data_dir),
        }
    }
}

/// Runs the node's network controllers (flannel unless `none`, NetworkPolicy unless
/// disabled) until one fails.
pub async fn run(client: kube::Client, options: NetworkOptions) -> anyhow::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    if options.backend != FlannelBackend::None {
        tasks.spawn(flannel::run(client.clone(), options.clone()));
    } else {
        tracing::info!(
            "flannel backend none: the pod network across nodes is left to the CNI you install"
        );
    }
    if options.network_policy {
        tasks.spawn(policy::run(client.clone(), options.node_name.clone()));
    } else {
        tracing::info!("network policy controller disabled (--disable-network-policy)");
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_parse_and_print_as_k3s_spells_them() {
        for name in ["vxlan", "host-gw", "none"] {
            let backend: FlannelBackend = name.parse().expect("known");
            assert_eq!(backend.to_string(), name);
        }
        assert_eq!(FlannelBackend::default(), FlannelBackend::Vxlan);
        let e = "wireguard-native"
            .parse::<FlannelBackend>()
            .expect_err("unknown");
        assert!(e.contains("vxlan, host-gw or none"), "{e}");
    }
}
