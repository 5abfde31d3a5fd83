//! The node agent (`k3rs agent`, and the agent embedded in `k3rs server`): joining a cluster
//! (CA pinning from the `K10…` token, node certificates), supervising containerd, importing
//! air-gap images, and starting the node components (kubelet, proxy, network, dns).
//!
//! Owns `<data-dir>/agent/` except what the kubelet keeps there. It is an API client only:
//! it may not touch `store` or `apiserver` internals.

pub mod containerd;
pub mod cri;
pub mod images;
pub mod pause;
