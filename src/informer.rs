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

type Subscribers<K> = Arc<Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>>;

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
                writer.apply_watcher_event(&event);
                if before_relist.is_some() {
                    ready_tx.send_replace(true);
                }
                let changed: Vec<Arc<K>> = match event {
                    watcher::Event::Apply(obj) => {
                        let cached = store.get(&ObjectRef::from_obj(&obj));
                        vec![cached.unwrap_or_else(|| Arc::new(obj))]
                    }
                    watcher::Event::Delete(obj) => vec![Arc::new(obj)],
                    watcher::Event::InitDone => {
                        let now = store.state();
                        let mut all = before_relist.unwrap_or_default();
                        all.extend(now);
                        all
                    }
                    watcher::Event::Init | watcher::Event::InitApply(_) => Vec::new(),
                };
                if changed.is_empty() {
                    continue;
                }
                let mut subs = subscribers.lock().unwrap_or_else(|e| e.into_inner());
                subs.retain(|tx| changed.iter().all(|obj| tx.send(obj.clone()).is_ok()));
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
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tx);
        UnboundedReceiverStream::new(rx)
    }
}
