//! The kubelet: registers the Node, renews its Lease, and runs the Pods bound to it through
//! CRI (containerd over its gRPC socket), reporting their status through the API server.
//!
//! Talks CRI and the Kubernetes API, nothing else: it may not touch `store`, `apiserver`
//! internals or containerd's native API.

pub mod server;
