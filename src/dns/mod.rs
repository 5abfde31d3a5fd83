//! Cluster DNS served by the binary itself: answers `<svc>.<ns>.svc.<domain>` and friends
//! from Services, EndpointSlices and Pods watched through the API; forwards the rest upstream.
//!
//! An API client only: it may not touch `store` or `apiserver` internals.
