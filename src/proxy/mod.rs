//! kube-proxy in nftables mode: renders the whole `k3rs` nftables table from Services and
//! EndpointSlices watched through the API and applies it atomically with `nft -f -`.
//!
//! An API client only: it may not touch `store` or `apiserver` internals.
