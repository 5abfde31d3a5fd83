//! The pod network: the CNI conflist for containerd (bridge, host-local IPAM on the node's
//! podCIDR, portmap, loopback) and routes to the other nodes' podCIDRs.
//!
//! Writes files under the agent's data dir and routes/devices on the host; it may not touch
//! `store` or `apiserver` internals.

pub mod cni;
