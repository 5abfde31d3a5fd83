//! Watched, cached views of one kind for API clients: [`reflect`], a kube-rs reflector that
//! pokes a `Notify` on every change (the node components: proxy, DNS), and [`Shared`], one
//! watch whose cache and change notifications several controllers share, as client-go's
//! shared informers do (one pod watch for the ReplicaSet and ReplicationController loops
//! instead of one each plus a LIST per reconcile). An API client only; it never touches
//! `store` or `apiserver`.

use std::sync::{Arc, Mutex};

use futures_util::{Stream, StreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;

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

/// Clears `metadata.managedFields`, which no controller reads: as `serde_json::Value` trees
/// (a B-tree node of several hundred bytes per map) they were most of a cached Pod's heap,
/// about 13 KB of the 25 KB each Pod cost the replica controllers' cache.
pub fn drop_managed_fields<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// One change as [`Shared::subscribe_changes`] delivers it.
pub struct Change<K> {
    /// The cached state before the change; `None` for an object seen for the first time.
    pub previous: Option<Arc<K>>,
    /// The state after the change; for a deletion, the object's last state.
    pub current: Arc<K>,
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        Change {
            previous: self.previous.clone(),
            current: self.current.clone(),
        }
    }
}

type Subscribers<K> = Arc<Mutex<Vec<mpsc::UnboundedSender<Change<K>>>>>;

/// One watch of `K` shared by several consumers: a cache ([`Shared::store`]) and, for each
/// [`Shared::subscribe`]r, every object that changed — added, updated, or deleted (the
/// last state) — sent only after the cache shows the change, so a consumer reading the
/// cache on a notification never sees an older state. After a re-list every object that
/// was or is cached is sent once, so deletions missed while the watch was down are seen.
///
/// Unlike kube-rs' shared reflector streams this reports deletions too, which an owner
/// that must replace deleted objects (a ReplicaSet) needs. Notifications are unbounded:
/// consumers are controller queues that deduplicate and never block.
pub struct Shared<K: kube::Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    subscribers: Subscribers<K>,
    /// True once the first list is in the cache. (kube-rs' `Store::wait_until_ready`
    /// wakes only one of several waiters, so readiness is tracked here.)
    ready: watch::Receiver<bool>,
}

impl<K: kube::Resource<DynamicType = ()> + 'static> Clone for Shared<K> {
    fn clone(&self) -> Self {
        Shared {
            store: self.store.clone(),
            subscribers: self.subscribers.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl<K> Shared<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    /// Starts the watch (retried with back-off; errors logged at debug level under
    /// `component`). The watch task lives as long as the runtime, like the controllers
    /// that use it. Every object passes through `prune` before it is cached or sent, so
    /// the cache holds only what its consumers read (see [`drop_managed_fields`]).
    pub fn spawn(
        api: kube::Api<K>,
        config: watcher::Config,
        component: &'static str,
        prune: fn(&mut K),
    ) -> Self {
        let (store, mut writer) = reflector::store();
        let subscribers: Subscribers<K> = Arc::default();
        let (ready_tx, ready) = watch::channel(false);
        let shared = Shared {
            store: store.clone(),
            subscribers: subscribers.clone(),
            ready,
        };
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, config).default_backoff());
            while let Some(event) = stream.next().await {
                let event = match event {
                    Ok(event) => event.modify(prune),
                    Err(e) => {
                        tracing::debug!(error = %e, component, "watch error (retrying)");
                        continue;
                    }
                };
                let before_relist =
                    matches!(event, watcher::Event::InitDone).then(|| store.state());
                let previous = match &event {
                    watcher::Event::Apply(obj) | watcher::Event::Delete(obj) => {
                        store.get(&ObjectRef::from_obj(obj))
                    }
                    _ => None,
                };
                writer.apply_watcher_event(&event);
                if before_relist.is_some() {
                    ready_tx.send_replace(true);
                }
                let changed: Vec<Change<K>> = match event {
                    watcher::Event::Apply(obj) => {
                        let cached = store.get(&ObjectRef::from_obj(&obj));
                        vec![Change {
                            previous,
                            current: cached.unwrap_or_else(|| Arc::new(obj)),
                        }]
                    }
                    watcher::Event::Delete(obj) => vec![Change {
                        previous,
                        current: Arc::new(obj),
                    }],
                    watcher::Event::InitDone => {
                        relist_changes(before_relist.unwrap_or_default(), store.state())
                    }
                    watcher::Event::Init | watcher::Event::InitApply(_) => Vec::new(),
                };
                if changed.is_empty() {
                    continue;
                }
                let mut subs = subscribers.lock().unwrap_or_else(|e| e.into_inner());
                subs.retain(|tx| changed.iter().all(|change| tx.send(change.clone()).is_ok()));
            }
        });
        shared
    }

    /// The cache (empty until the first list completes: see [`Shared::wait_until_ready`]).
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Waits for the first complete list.
    pub async fn wait_until_ready(&self) {
        // Fails only if the watch task is gone (the runtime is shutting down).
        let _ = self.ready.clone().wait_for(|ready| *ready).await;
    }

    /// Every object that changes from now on (see the type's documentation).
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        self.subscribe_changes().map(|change| change.current)
    }

    /// Every change from now on, with the state the cache held before it (so a consumer
    /// can tell what an object left, such as the label selectors it no longer matches).
    pub fn subscribe_changes(&self) -> impl Stream<Item = Change<K>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tx);
        UnboundedReceiverStream::new(rx)
    }
}

/// After a re-list: every object cached now (with its state before, if it was cached
/// then) and every object that was cached and is gone (as a deletion).
fn relist_changes<K>(before: Vec<Arc<K>>, now: Vec<Arc<K>>) -> Vec<Change<K>>
where
    K: kube::Resource<DynamicType = ()> + 'static,
{
    let mut before: std::collections::HashMap<ObjectRef<K>, Arc<K>> = before
        .into_iter()
        .map(|object| (ObjectRef::from_obj(object.as_ref()), object))
        .collect();
    let mut changes: Vec<Change<K>> = now
        .into_iter()
        .map(|current| Change {
            previous: before.remove(&ObjectRef::from_obj(current.as_ref())),
            current,
        })
        .collect();
    changes.extend(before.into_values().map(|gone| Change {
        previous: Some(gone.clone()),
        current: gone,
    }));
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn config_map(name: &str, version: &str) -> Arc<ConfigMap> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": version}
            }))
            .expect("config map"),
        )
    }

    fn version(object: &Option<Arc<ConfigMap>>) -> Option<&str> {
        object
            .as_ref()
            .and_then(|o| o.metadata.resource_version.as_deref())
    }

    #[test]
    fn a_relist_pairs_each_object_with_its_state_before_and_reports_the_vanished() {
        let before = vec![config_map("kept", "1"), config_map("gone", "2")];
        let now = vec![config_map("kept", "3"), config_map("new", "4")];
        let mut changes: Vec<(String, Option<&str>, String)> = Vec::new();
        let relisted = relist_changes(before, now);
        for change in &relisted {
            changes.push((
                change.current.metadata.name.clone().unwrap_or_default(),
                version(&change.previous),
                change
                    .current
                    .metadata
                    .resource_version
                    .clone()
                    .unwrap_or_default(),
            ));
        }
        changes.sort();
        assert_eq!(
            changes,
            vec![
                ("gone".to_string(), Some("2"), "2".to_string()),
                ("kept".to_string(), Some("1"), "3".to_string()),
                ("new".to_string(), None, "4".to_string()),
            ]
        );
    }
}
