//! k3rs: a k3s-style Kubernetes distribution in one binary.
//!
//! One module per component of the design's map; see ARCHITECTURE.md for the
//! boundaries. The rule that keeps this honest: only `apiserver` may use `store`
//! (`tests/architecture.rs` checks it and the other boundaries on the source text).

pub mod addons;
pub mod agent;
pub mod apiserver;
pub mod cli;
pub mod controllers;
pub mod cron;
pub mod dns;
#[doc(hidden)]
pub mod fuzzing;
pub mod informer;
pub mod kube_client;
pub mod kubelet;
pub mod leader_election;
pub mod names;
pub mod network;
pub mod panics;
pub mod pki;
pub mod proxy;
pub mod scheduler;
pub mod skip;
pub mod store;
pub mod streaming;
