//! A watched, cached view of one kind for the node components (proxy, DNS): a kube-rs
//! reflector that pokes a `Notify` on every change so its owner can re-render. An API
//! client only; it never touches `store` or `apiserver`.

use std::sync::Arc;

use futures_util::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;

/// Keeps a reflector for `K` running, poking `changed` on every event; `component` names
/// the owner in the (debug) log of watch errors, which the watcher retries with back-off.
pub fn reflect<K>(api: kube::Api<K>, changed: Arc<Notify>, component: &'static str) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer);
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changed.notify_one(),
                Err(e) => tracing::debug!(error = %e, component, "watch error (retrying)"),
            }
        }
    });
    store
}
