//! The watch cache: every object under `/registry/` in memory, kept current by one
//! store watch, with a bounded history of recent events. Lists and watches are served
//! from here; the store is hit for writes and for filling the cache.
//!
//! Objects are kept as their JSON bytes with `metadata.resourceVersion` filled in, so
//! a GET or LIST copies bytes rather than re-encoding. May not write to the store.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{broadcast, watch};

use crate::store::{Event, RangeRequest, Store, StoreError};

/// How many recent events are kept for watches that resume from a revision.
const HISTORY_EVENTS: usize = 20_000;
/// Events buffered per live watcher before it is closed (the client re-lists).
const BROADCAST_CAPACITY: usize = 16_384;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One object as cached: its key, JSON bytes (with resourceVersion) and revision.
#[derive(Clone, Debug)]
pub struct CachedObject {
    pub key: Arc<str>,
    pub bytes: Bytes,
    pub revision: i64,
}

/// A change, as watchers receive it.
#[derive(Clone, Debug)]
pub struct CacheEvent {
    pub kind: EventType,
    pub key: Arc<str>,
    /// The object after the change (for deletions: its last state, at the deletion's revision).
    pub bytes: Bytes,
    /// The object before the change, if any (lets selector watches notice objects leaving).
    pub prev: Option<Bytes>,
    pub revision: i64,
}

struct State {
    objects: BTreeMap<Arc<str>, CachedObject>,
    history: VecDeque<Arc<CacheEvent>>,
    /// Watches may resume from any revision at or after this one.
    history_start: i64,
    revision: i64,
}

pub struct WatchCache {
    state: RwLock<State>,
    events: broadcast::Sender<Arc<CacheEvent>>,
    revision_tx: watch::Sender<i64>,
}

/// What `subscribe` returns: retained events, a live receiver, and the cache revision.
pub type Subscription = (
    Vec<Arc<CacheEvent>>,
    broadcast::Receiver<Arc<CacheEvent>>,
    i64,
);

/// Why a watch could not start.
#[derive(Debug)]
pub enum SubscribeError {
    TooOld { requested: i64, oldest: i64 },
}

/// Sets `metadata.resourceVersion` in a stored object's JSON.
pub fn with_resource_version(value: &[u8], revision: i64) -> Bytes {
    match serde_json::from_slice::<serde_json::Value>(value) {
        Ok(mut object) => {
            if let Some(meta) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.insert(
                    "resourceVersion".into(),
                    serde_json::Value::String(revision.to_string()),
                );
            }
            Bytes::from(serde_json::to_vec(&object).unwrap_or_default())
        }
        Err(_) => Bytes::copy_from_slice(value),
    }
}

impl WatchCache {
    /// Fills the cache from the store and starts following it.
    pub async fn start(store: Store) -> Result<Arc<WatchCache>, StoreError> {
        let (events, _) = broadcast::channel(BROADCAST_CAPACITY);
        let (revision_tx, _) = watch::channel(0);
        let cache = Arc::new(WatchCache {
            state: RwLock::new(State {
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                history_start: 0,
                revision: 0,
            }),
            events,
            revision_tx,
        });
        let revision = cache.fill(&store).await?;
        let stream = store.watch(b"/registry/", revision).await?;
        let follower = cache.clone();
        tokio::spawn(async move { follower.follow(store, stream).await });
        Ok(cache)
    }

    async fn fill(&self, store: &Store) -> Result<i64, StoreError> {
        let listed = store
            .range(RangeRequest {
                prefix: b"/registry/".to_vec(),
                ..Default::default()
            })
            .await?;
        let mut objects = BTreeMap::new();
        for kv in listed.kvs {
            let key: Arc<str> = String::from_utf8_lossy(&kv.key).into();
            let bytes = with_resource_version(&kv.value, kv.mod_revision);
            objects.insert(
                key.clone(),
                CachedObject {
                    key,
                    bytes,
                    revision: kv.mod_revision,
                },
            );
        }
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        state.objects = objects;
        state.history.clear();
        state.history_start = listed.revision;
        state.revision = listed.revision;
        drop(state);
        self.revision_tx.send_replace(listed.revision);
        Ok(listed.revision)
    }

    async fn follow(self: Arc<Self>, store: Store, mut stream: crate::store::WatchStream) {
        loop {
            match stream.next().await {
                Some(Ok(event)) => self.apply(&event),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "watch cache lost its store watch; refilling");
                    loop {
                        match self.refill(&store).await {
                            Ok(s) => {
                                stream = s;
                                break;
                            }
                            Err(e) => {
                                tracing::error!(error = %e, "refilling the watch cache failed; retrying");
                                tokio::time::sleep(Duration::from_secs(1)).await;
                            }
                        }
                    }
                }
                None => return,
            }
        }
    }

    async fn refill(&self, store: &Store) -> Result<crate::store::WatchStream, StoreError> {
        let revision = self.fill(store).await?;
        store.watch(b"/registry/", revision).await
    }

    fn apply(&self, event: &Event) {
        let (kind, key, bytes, prev, revision) = match event {
            Event::Put { kv, prev_kv } => {
                let bytes = with_resource_version(&kv.value, kv.mod_revision);
                let prev = prev_kv
                    .as_ref()
                    .map(|p| with_resource_version(&p.value, p.mod_revision));
                let kind = if prev_kv.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                (
                    kind,
                    String::from_utf8_lossy(&kv.key).into_owned(),
                    bytes,
                    prev,
                    kv.mod_revision,
                )
            }
            Event::Delete { prev_kv, revision } => {
                let bytes = with_resource_version(&prev_kv.value, *revision);
                let prev = Some(with_resource_version(&prev_kv.value, prev_kv.mod_revision));
                (
                    EventType::Deleted,
                    String::from_utf8_lossy(&prev_kv.key).into_owned(),
                    bytes,
                    prev,
                    *revision,
                )
            }
        };
        let key: Arc<str> = key.into();
        let event = Arc::new(CacheEvent {
            kind,
            key: key.clone(),
            bytes: bytes.clone(),
            prev,
            revision,
        });
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        match kind {
            EventType::Deleted => {
                state.objects.remove(&key);
            }
            _ => {
                state.objects.insert(
                    key.clone(),
                    CachedObject {
                        key,
                        bytes,
                        revision,
                    },
                );
            }
        }
        state.revision = revision;
        state.history.push_back(event.clone());
        if state.history.len() > HISTORY_EVENTS
            && let Some(dropped) = state.history.pop_front()
        {
            state.history_start = dropped.revision;
        }
        // Sent under the lock so subscribers never see a gap or a repeat.
        let _ = self.events.send(event);
        drop(state);
        self.revision_tx.send_replace(revision);
    }

    /// The newest revision the cache has applied.
    pub fn revision(&self) -> i64 {
        self.state.read().map(|s| s.revision).unwrap_or(0)
    }

    /// Waits until the cache has applied `revision` (for consistent reads).
    pub async fn wait_for(&self, revision: i64, timeout: Duration) -> bool {
        let mut rx = self.revision_tx.subscribe();
        let wait = rx.wait_for(|r| *r >= revision);
        matches!(tokio::time::timeout(timeout, wait).await, Ok(Ok(_)))
    }

    pub fn get(&self, key: &str) -> Option<CachedObject> {
        self.state.read().ok()?.objects.get(key).cloned()
    }

    /// Objects whose keys start with `prefix` (after `start_after`, if given), in key
    /// order, and the cache revision they are consistent with.
    pub fn list(&self, prefix: &str, start_after: Option<&str>) -> (Vec<CachedObject>, i64) {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        let start: Arc<str> = match start_after {
            Some(after) if after >= prefix => format!("{after}\0").into(),
            _ => prefix.into(),
        };
        let objects = state
            .objects
            .range(start..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect();
        (objects, state.revision)
    }

    /// Number of cached objects under `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        let start: Arc<str> = prefix.into();
        state
            .objects
            .range(start..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .count()
    }

    /// Starts a watch after `from_revision`: the retained events since then (all
    /// prefixes; the caller filters) and a receiver for everything later.
    pub fn subscribe(&self, from_revision: i64) -> Result<Subscription, SubscribeError> {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        if from_revision < state.history_start {
            return Err(SubscribeError::TooOld {
                requested: from_revision,
                oldest: state.history_start,
            });
        }
        let backlog = state
            .history
            .iter()
            .filter(|e| e.revision > from_revision)
            .cloned()
            .collect();
        Ok((backlog, self.events.subscribe(), state.revision))
    }

    /// Current objects under `prefix` plus a receiver for later events, atomically
    /// (for watches that start with the current state).
    pub fn snapshot_and_subscribe(
        &self,
        prefix: &str,
    ) -> (Vec<CachedObject>, broadcast::Receiver<Arc<CacheEvent>>, i64) {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        let start: Arc<str> = prefix.into();
        let objects = state
            .objects
            .range(start..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect();
        (objects, self.events.subscribe(), state.revision)
    }

    pub fn watcher_count(&self) -> usize {
        self.events.receiver_count()
    }
}
