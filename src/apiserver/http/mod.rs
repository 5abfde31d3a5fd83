//! The API server's HTTP surface: what turns a request into a call on the cluster's
//! objects and the answer back into bytes.
//!
//! Owns: request decoding and content negotiation ([`request`]), the REST verbs
//! ([`handlers`]) and the subresources that are not plain writes ([`subresources`],
//! [`events_view`]), `metav1.Status` errors ([`status`]), the representations kubectl asks
//! for ([`table`], [`protobuf`], [`openapi`], [`discovery`]), TLS and the flood limits
//! ([`tls`], [`limits`]), the in-process transport ([`local_client`]), the relay to
//! kubelets ([`node_proxy`]) and the request metrics ([`metrics`]).
//!
//! May not touch: the raw store except through `storage::kv::KvStore` (and the store's
//! own metrics); who a caller is and what it may do are `auth`'s, what a write must pass
//! is `admission`'s.

pub mod discovery;
pub mod events_view;
pub mod handlers;
pub mod limits;
pub mod local_client;
pub mod metrics;
pub mod node_proxy;
pub mod openapi;
pub mod protobuf;
pub mod request;
pub mod status;
pub mod subresources;
pub mod table;
pub mod tls;
