//! The watch cache: every object under `/registry/` in memory, kept current by one
//! store watch (of every key, so its revision keeps up with the store's even when only
//! k3rs's own keys change), with a bounded history of recent events. Lists and watches are served
//! from here; the store is hit for writes and for filling the cache.
//!
//! Objects are kept as their JSON bytes with `metadata.resourceVersion` filled in, so
//! a GET or LIST copies bytes rather than re-encoding. May not write to the store.
//!
//! Events are not cached (kube-apiserver's default `--watch-cache-sizes` has `events#0`
//! too): they are written by every component for every pod and read rarely, so holding
//! them doubled what a pod cost in memory. Their reads and watches go to the store, and
//! [`EventFeed`] gives the watch handler one stream type for both sources.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use super::kv::KvStore as Store;
use crate::store::{Event, RangeRequest, StoreError};

/// How many recent events are kept for watches that resume from a revision...
const HISTORY_EVENTS: usize = 20_000;
/// ...and at most this many bytes of their objects. The history's old versions are the
/// only copies of objects the cache holds beyond the current state, so this bounds what a
/// burst of writes (pods created then updated by the scheduler, their events) costs in
/// memory; a watch resuming from before the window gets `410 Expired` and re-lists, as
/// with kube-apiserver's watch cache (which keeps a window of about 75 s per resource).
/// 8 MiB is a few thousand pod versions: watches that reconnect at once (kube's
/// watchers resume from their last bookmark within milliseconds) stay well inside it,
/// while 16 MiB was 1.6 KB of the server's RSS per pod after 10,000 pods were created.
const HISTORY_BYTES: usize = 8 << 20;
/// What the cache follows: every key, not only `/registry/`. A write elsewhere (a
/// server's master lease under `/k3rs/`, a snapshot record) moves the store's revision
/// too; were it unseen here, a consistent read would wait for a revision the cache only
/// reaches with the next `/registry/` write — up to its 3 s bound on a quiet cluster.
const FOLLOWED_PREFIX: &[u8] = b"";

/// Key prefixes the cache does not hold; see the module comment.
const UNCACHED_PREFIXES: [&str; 1] = ["/registry/events/"];

/// Whether objects under `key_or_prefix` are served from the cache (otherwise: the store).
pub fn is_cached(key_or_prefix: &str) -> bool {
    !UNCACHED_PREFIXES
        .iter()
        .any(|uncached| key_or_prefix.starts_with(uncached))
}

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
    /// The watch-stream line of this event as its own kind
    /// (`{"type":"ADDED","object":…}` and a newline), built once and shared by every
    /// watcher that sees it so; `bytes` is a slice of it.
    pub line: Bytes,
    pub revision: i64,
}

impl CacheEvent {
    /// A store event as watchers receive it; `prev` is the previous version's bytes when
    /// the caller already has them (the cache shares its copy).
    fn from_store(event: &Event, key: Arc<str>, prev: Option<Bytes>) -> CacheEvent {
        let (kind, bytes, line) = frame(event);
        CacheEvent {
            kind,
            key,
            bytes,
            prev: prev.or_else(|| previous_version(event)),
            line,
            revision: event.revision(),
        }
    }
}

/// A store event's type, its object with the resourceVersion set, and its watch line
/// (the object is a slice of the line).
fn frame(event: &Event) -> (EventType, Bytes, Bytes) {
    let (kind, value) = match event {
        Event::Put { kv, prev_kv: None } => (EventType::Added, &kv.value),
        Event::Put { kv, .. } => (EventType::Modified, &kv.value),
        Event::Delete { prev_kv, .. } => (EventType::Deleted, &prev_kv.value),
    };
    let (bytes, line) = watch_line_with_resource_version(kind.as_str(), value, event.revision());
    (kind, bytes, line)
}

/// The version a store event replaced, rebuilt from its `prev_kv`.
fn previous_version(event: &Event) -> Option<Bytes> {
    let prev = match event {
        Event::Put { prev_kv, .. } => prev_kv.as_ref()?,
        Event::Delete { prev_kv, .. } => prev_kv,
    };
    Some(with_resource_version(&prev.value, prev.mod_revision))
}

/// Why an [`EventFeed`] ended.
#[derive(Debug)]
pub enum FeedEnd {
    /// The watcher fell behind (or the store's history went away under it): re-list.
    Lagged,
    /// The source shut down.
    Closed,
}

/// The live events of one watch: from the cache, or from the store for uncached kinds.
pub enum EventFeed {
    Cache(CacheFeed),
    Store(super::kv::WatchStream),
}

impl EventFeed {
    pub async fn recv(&mut self) -> Result<Arc<CacheEvent>, FeedEnd> {
        match self {
            EventFeed::Cache(feed) => feed.recv().await,
            EventFeed::Store(stream) => match stream.next().await {
                Some(Ok(event)) => {
                    let key: Arc<str> = String::from_utf8_lossy(event.key()).into();
                    Ok(Arc::new(CacheEvent::from_store(&event, key, None)))
                }
                Some(Err(_)) => Err(FeedEnd::Lagged),
                None => Err(FeedEnd::Closed),
            },
        }
    }

    /// The revision up to which every event of this watch has been returned, if
    /// known (a bookmark may carry it). Store feeds do not know it.
    pub fn caught_up(&mut self) -> Option<i64> {
        match self {
            EventFeed::Cache(feed) => feed.caught_up(),
            EventFeed::Store(_) => None,
        }
    }
}

/// One watched key prefix and the watchers waiting on it. The channel holds the
/// revision of the newest event under the prefix that has left the history (a
/// watcher that has not read up to it has lost events); every event under the prefix
/// notifies it, which wakes the watchers. Written under the cache's state lock.
struct Route {
    prefix: Arc<str>,
    dropped_upto: watch::Sender<i64>,
}

/// One watch's view of the cache: a cursor into the history, woken only by events
/// under its own prefix. (One broadcast to every watcher woke each of the ~70
/// watches of the controllers, the scheduler and the garbage collector for every
/// write, to throw all but a few away.)
pub struct CacheFeed {
    cache: Arc<WatchCache>,
    prefix: Arc<str>,
    /// The history has been read up to this revision.
    cursor: i64,
    /// Events read from the history but not yet returned.
    pending: VecDeque<Arc<CacheEvent>>,
    dropped_upto: watch::Receiver<i64>,
}

impl CacheFeed {
    /// The next event under the prefix, waiting for one if need be.
    pub async fn recv(&mut self) -> Result<Arc<CacheEvent>, FeedEnd> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(event);
            }
            // Marked seen before reading, so an event applied after the read still
            // wakes us.
            self.dropped_upto.borrow_and_update();
            self.read_history()?;
            if self.pending.is_empty() {
                self.dropped_upto
                    .changed()
                    .await
                    .map_err(|_| FeedEnd::Closed)?;
            }
        }
    }

    /// Reads what is already there without waiting; `Some(revision)` when nothing is
    /// left to return up to that revision.
    pub fn caught_up(&mut self) -> Option<i64> {
        if self.pending.is_empty() && self.read_history().is_err() {
            return None;
        }
        self.pending.is_empty().then_some(self.cursor)
    }

    /// Drops whatever is ready to be returned (a watcher that only wants to know
    /// that something changed).
    pub fn skip_ready(&mut self) {
        self.pending.clear();
        if self.read_history().is_ok() {
            self.pending.clear();
        }
    }

    /// Moves the events after the cursor under the prefix into `pending`.
    fn read_history(&mut self) -> Result<(), FeedEnd> {
        let state = self.cache.state.read().unwrap_or_else(|p| p.into_inner());
        if self.cursor < state.history_start && *self.dropped_upto.borrow() > self.cursor {
            return Err(FeedEnd::Lagged);
        }
        let start = state.history.partition_point(|e| e.revision <= self.cursor);
        self.pending.extend(
            state
                .history
                .range(start..)
                .filter(|e| e.key.starts_with(&*self.prefix))
                .cloned(),
        );
        self.cursor = self.cursor.max(state.revision);
        Ok(())
    }
}

struct State {
    objects: BTreeMap<Arc<str>, CachedObject>,
    history: VecDeque<Arc<CacheEvent>>,
    /// Sum of the `bytes` lengths of the events in `history`.
    history_bytes: usize,
    /// Watches may resume from any revision at or after this one.
    history_start: i64,
    revision: i64,
}

pub struct WatchCache {
    state: RwLock<State>,
    /// The prefixes being watched. Locked after `state`, never before.
    routes: Mutex<Vec<Route>>,
    revision_tx: watch::Sender<i64>,
}

/// Why a watch could not start.
#[derive(Debug)]
pub enum SubscribeError {
    TooOld { requested: i64, oldest: i64 },
}

/// Sets `metadata.resourceVersion` in a stored object's JSON.
///
/// Stored objects are compact JSON written by `serde_json` (keys sorted), so the
/// version is spliced in at its sorted place without parsing the object: the bytes
/// are the same as decoding, inserting and re-encoding would give, at a fraction of
/// the cost (this runs for every write and every cached event). Anything the splice
/// does not understand takes the decode/re-encode path.
pub fn with_resource_version(value: &[u8], revision: i64) -> Bytes {
    let mut spliced = Vec::new();
    if splice_resource_version(value, revision, &mut spliced).is_some() {
        return Bytes::from(spliced);
    }
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

/// The start of a watch-stream line, `{"type":"<kind>","object":`, with room for an
/// object of `object_len` bytes; [`close_watch_line`] ends it. The one place that frames
/// watch events, for the cache's shared lines and the handlers' per-watcher ones alike.
pub fn open_watch_line(kind: &str, object_len: usize) -> Vec<u8> {
    let mut line = Vec::with_capacity(object_len + kind.len() + 24);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line
}

/// Ends a line begun by [`open_watch_line`].
pub fn close_watch_line(line: &mut Vec<u8>) {
    line.extend_from_slice(b"}\n");
}

/// The watch line of an event of type `kind` carrying `value` with its resourceVersion
/// set (as [`with_resource_version`]), and the object's bytes as a slice of that line:
/// one allocation serves the cache, the history and every watcher's stream.
pub fn watch_line_with_resource_version(kind: &str, value: &[u8], revision: i64) -> (Bytes, Bytes) {
    let mut line = open_watch_line(kind, value.len() + 32);
    let start = line.len();
    if splice_resource_version(value, revision, &mut line).is_none() {
        line.extend_from_slice(&with_resource_version(value, revision));
    }
    let end = line.len();
    close_watch_line(&mut line);
    let line = Bytes::from(line);
    (line.slice(start..end), line)
}

/// A minimal scanner over compact JSON: just enough to find the top-level
/// `metadata` object's members. Every method returns `None` on anything unexpected.
struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Skips a string starting at `"`; returns its raw contents and whether it had escapes.
    fn string(&mut self) -> Option<(usize, usize, bool)> {
        self.eat(b'"')?;
        let start = self.at;
        let mut escaped = false;
        loop {
            match self.peek()? {
                b'"' => {
                    let end = self.at;
                    self.at += 1;
                    return Some((start, end, escaped));
                }
                b'\\' => {
                    escaped = true;
                    self.at += 2;
                }
                _ => self.at += 1,
            }
        }
    }

    /// From the start of an object, moves to its top-level `metadata` member's value (an
    /// object; `None` when there is none).
    fn enter_metadata(&mut self) -> Option<()> {
        self.eat(b'{')?;
        loop {
            let (start, end, escaped) = self.string()?;
            self.eat(b':')?;
            if !escaped && &self.bytes[start..end] == b"metadata" && self.peek()? == b'{' {
                return Some(());
            }
            self.value()?;
            match self.peek()? {
                b',' => self.at += 1,
                _ => return None,
            }
        }
    }

    /// Skips one value of any type.
    fn value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.at += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                let rest = &self.bytes[self.at..];
                let len = rest
                    .iter()
                    .position(|b| matches!(b, b',' | b'}' | b']'))
                    .unwrap_or(rest.len());
                if len == 0 {
                    return None;
                }
                self.at += len;
                Some(())
            }
        }
    }
}

/// The raw bytes of a stored object's top-level `metadata` object, found without parsing
/// the rest; `None` unless `value` is compact JSON with a `metadata` object.
pub fn metadata_bytes(value: &[u8]) -> Option<&[u8]> {
    let mut scan = Scanner {
        bytes: value,
        at: 0,
    };
    scan.enter_metadata()?;
    let from = scan.at;
    scan.value()?;
    Some(&value[from..scan.at])
}

/// Appends `value` with `metadata.resourceVersion` set to `revision` to `out`, by
/// splicing bytes; `None` (and nothing appended) unless `value` is a compact JSON object
/// with a `metadata` object.
fn splice_resource_version(value: &[u8], revision: i64, out: &mut Vec<u8>) -> Option<()> {
    const KEY: &[u8] = b"resourceVersion";
    let mut scan = Scanner {
        bytes: value,
        at: 0,
    };
    scan.enter_metadata()?;
    scan.eat(b'{')?;
    // Walk metadata's members (sorted) to the place of resourceVersion: either its
    // current value (replaced) or the first greater key (inserted before).
    let mut members = 0usize;
    let (cut_start, cut_end, leading_comma, trailing_comma) = loop {
        if scan.peek()? == b'}' {
            break (scan.at, scan.at, members > 0, false);
        }
        let key_at = scan.at;
        let (start, end, escaped) = scan.string()?;
        if escaped {
            return None;
        }
        scan.eat(b':')?;
        let key = &value[start..end];
        if key == KEY {
            scan.value()?;
            break (key_at, scan.at, false, false);
        }
        if key > KEY {
            break (key_at, key_at, false, true);
        }
        scan.value()?;
        members += 1;
        match scan.peek()? {
            b',' => scan.at += 1,
            b'}' => {}
            _ => return None,
        }
    };
    let digits = revision.to_string();
    out.reserve(value.len() + KEY.len() + digits.len() + 8);
    out.extend_from_slice(&value[..cut_start]);
    if leading_comma {
        out.push(b',');
    }
    out.extend_from_slice(b"\"resourceVersion\":\"");
    out.extend_from_slice(digits.as_bytes());
    out.push(b'"');
    if trailing_comma {
        out.push(b',');
    }
    out.extend_from_slice(&value[cut_end..]);
    Some(())
}

impl WatchCache {
    /// Fills the cache from the store and starts following it.
    pub async fn start(store: Store) -> Result<Arc<WatchCache>, StoreError> {
        let cache = Arc::new(WatchCache::empty());
        let revision = cache.fill(&store).await?;
        let stream = store.watch(FOLLOWED_PREFIX, revision).await?;
        let follower = cache.clone();
        tokio::spawn(async move { follower.follow(store, stream).await });
        Ok(cache)
    }

    /// A cache holding `objects` (key, JSON), for other modules' unit tests.
    #[cfg(test)]
    pub(crate) fn holding(objects: &[(&str, serde_json::Value)]) -> WatchCache {
        let cache = WatchCache::empty();
        for (revision, (key, value)) in (2..).zip(objects) {
            cache.apply(&Event::Put {
                kv: crate::store::KeyValue {
                    key: key.as_bytes().to_vec(),
                    value: serde_json::to_vec(value).unwrap_or_default(),
                    create_revision: revision,
                    mod_revision: revision,
                    version: 1,
                },
                prev_kv: None,
            });
        }
        cache
    }

    fn empty() -> WatchCache {
        let (revision_tx, _) = watch::channel(0);
        WatchCache {
            state: RwLock::new(State {
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                history_bytes: 0,
                history_start: 0,
                revision: 0,
            }),
            routes: Mutex::new(Vec::new()),
            revision_tx,
        }
    }

    async fn fill(&self, store: &Store) -> Result<i64, StoreError> {
        let listed = store
            .range_lenient(RangeRequest {
                prefix: b"/registry/".to_vec(),
                ..Default::default()
            })
            .await?;
        let mut objects = BTreeMap::new();
        for kv in listed.kvs {
            let key: Arc<str> = String::from_utf8_lossy(&kv.key).into();
            if !is_cached(&key) {
                continue;
            }
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
        state.history_bytes = 0;
        state.history_start = listed.revision;
        state.revision = listed.revision;
        // A refill after the store watch was lost leaves a gap: every watcher must
        // re-list.
        for route in self.routes.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            route.dropped_upto.send_replace(listed.revision);
        }
        drop(state);
        self.revision_tx.send_replace(listed.revision);
        Ok(listed.revision)
    }

    async fn follow(self: Arc<Self>, store: Store, mut stream: super::kv::WatchStream) {
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

    async fn refill(&self, store: &Store) -> Result<super::kv::WatchStream, StoreError> {
        let revision = self.fill(store).await?;
        store.watch(FOLLOWED_PREFIX, revision).await
    }

    fn apply(&self, event: &Event) {
        let key_text = String::from_utf8_lossy(event.key());
        let revision = event.revision();
        // Only API objects are held; other keys just move the revision on.
        if !key_text.starts_with("/registry/") || !is_cached(&key_text) {
            // Not held, but the cache is still current up to here.
            self.state
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .revision = revision;
            self.revision_tx.send_replace(revision);
            return;
        }
        let prev_revision = match event {
            Event::Put { prev_kv, .. } => prev_kv.as_ref().map(|p| p.mod_revision),
            Event::Delete { prev_kv, .. } => Some(prev_kv.mod_revision),
        };
        // Framed before taking the lock: readers wait on it.
        let (kind, bytes, line) = frame(event);
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        let cached = state.objects.get_key_value(key_text.as_ref());
        let key: Arc<str> = match cached {
            Some((key, _)) => key.clone(),
            None => key_text.as_ref().into(),
        };
        // The previous state is usually the cached object itself: share its bytes (one
        // copy of each version between the map and the history) rather than rebuilding
        // them from the store's `prev_kv`.
        let prev = match (cached, prev_revision) {
            (Some((_, object)), Some(p)) if object.revision == p => Some(object.bytes.clone()),
            _ => previous_version(event),
        };
        let event = Arc::new(CacheEvent {
            kind,
            key: key.clone(),
            bytes: bytes.clone(),
            prev,
            line,
            revision,
        });
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
        state.history_bytes += event.bytes.len();
        state.history.push_back(event.clone());
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        while state.history.len() > HISTORY_EVENTS || state.history_bytes > HISTORY_BYTES {
            let Some(dropped) = state.history.pop_front() else {
                break;
            };
            state.history_bytes -= dropped.bytes.len();
            state.history_start = dropped.revision;
            for route in routes.iter() {
                if dropped.key.starts_with(&*route.prefix) {
                    // No wake-up: a watcher learns of it at its next read.
                    route.dropped_upto.send_if_modified(|upto| {
                        *upto = dropped.revision;
                        false
                    });
                }
            }
        }
        // Woken under the lock so watchers never see a gap or a repeat; routes
        // nobody watches any more go.
        routes.retain(|route| {
            if route.dropped_upto.receiver_count() == 0 {
                return false;
            }
            if event.key.starts_with(&*route.prefix) {
                // Notifies even though the value stays.
                route.dropped_upto.send_modify(|_| {});
            }
            true
        });
        drop(routes);
        drop(state);
        self.revision_tx.send_replace(revision);
    }

    /// The newest revision the cache has applied.
    pub fn revision(&self) -> i64 {
        self.state.read().map(|s| s.revision).unwrap_or(0)
    }

    /// Waits until the cache has applied `revision` (for consistent reads).
    pub async fn wait_for(&self, revision: i64, timeout: Duration) -> bool {
        // Usually already there: skip the subscription and the timer.
        if *self.revision_tx.borrow() >= revision {
            return true;
        }
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

    /// Starts a watch of `prefix` after `from_revision`: the feed returns the
    /// retained events since then, then everything later.
    pub fn subscribe(
        self: &Arc<Self>,
        prefix: &str,
        from_revision: i64,
    ) -> Result<CacheFeed, SubscribeError> {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        if from_revision < state.history_start {
            return Err(SubscribeError::TooOld {
                requested: from_revision,
                oldest: state.history_start,
            });
        }
        Ok(self.feed(prefix, from_revision))
    }

    /// Current objects under `prefix`, a feed of later events and the revision of the
    /// objects, atomically (for watches that start with the current state).
    pub fn snapshot_and_subscribe(
        self: &Arc<Self>,
        prefix: &str,
    ) -> (Vec<CachedObject>, CacheFeed, i64) {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        let start: Arc<str> = prefix.into();
        let objects = state
            .objects
            .range(start..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect();
        (objects, self.feed(prefix, state.revision), state.revision)
    }

    /// A feed reading after `cursor`; called under the state lock, so no event can
    /// slip between the caller's view and the feed's route.
    fn feed(self: &Arc<Self>, prefix: &str, cursor: i64) -> CacheFeed {
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let route = match routes.iter().position(|r| &*r.prefix == prefix) {
            Some(at) => &routes[at],
            None => {
                routes.push(Route {
                    prefix: prefix.into(),
                    dropped_upto: watch::channel(0).0,
                });
                &routes[routes.len() - 1]
            }
        };
        CacheFeed {
            cache: self.clone(),
            prefix: route.prefix.clone(),
            cursor,
            pending: VecDeque::new(),
            dropped_upto: route.dropped_upto.subscribe(),
        }
    }

    pub fn watcher_count(&self) -> usize {
        self.routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|r| r.dropped_upto.receiver_count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// The decode/insert/re-encode result the splice must reproduce byte for byte.
    fn reencoded(value: &[u8], revision: i64) -> Vec<u8> {
        let mut object: Value = serde_json::from_slice(value).expect("test input is JSON");
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(revision.to_string()));
        }
        serde_json::to_vec(&object).expect("encodes")
    }

    #[test]
    fn splice_matches_reencoding_for_stored_objects() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default", "uid": "u"}, "data": {"metadata": "{\"x\":1}"}}),
            json!({"metadata": {}}),
            json!({"a": [1, {"b": "}"}], "metadata": {"annotations": {"resourceVersion": "9"}, "name": "x"}, "z": null}),
            json!({"metadata": {"resourceVersion": "5", "uid": "u"}}),
            json!({"metadata": {"name": "n", "resourceVersion": "5"}}),
            json!({"metadata": {"zzz": true}, "spec": {"replicas": 3, "ratio": -1.5e3}}),
            json!({"kind": "Pod", "metadata": {"labels": {"a\"b": "c\\d"}, "name": "p"}}),
            json!({"metadata": {"name": "ünïcode", "selfLink": "/x"}, "status": {"phase": "Running"}}),
        ];
        for object in objects {
            let bytes = serde_json::to_vec(&object).expect("encodes");
            for revision in [1, 42, 1_000_000_007] {
                let mut spliced = Vec::new();
                splice_resource_version(&bytes, revision, &mut spliced)
                    .unwrap_or_else(|| panic!("splice understood {object}"));
                assert_eq!(
                    String::from_utf8_lossy(&spliced),
                    String::from_utf8_lossy(&reencoded(&bytes, revision)),
                    "for {object}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_write_outside_the_api_keys_does_not_hold_up_consistent_reads() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = crate::store::StoreConfig::new(dir.path());
        let store = tokio::task::spawn_blocking(move || crate::store::Store::open(config))
            .await
            .expect("join")
            .expect("open the store");
        let store = Store::new(store, None);
        let cache = WatchCache::start(store.clone()).await.expect("cache");
        store
            .create(b"/registry/configmaps/default/a", b"{}".to_vec())
            .await
            .expect("create an API object");
        // A server's master lease, as master_endpoints writes it: not an API object.
        store
            .create(b"/k3rs/masterleases/127.0.0.1", b"{}".to_vec())
            .await
            .expect("create a k3rs key");
        let current = store.read_barrier().await.expect("read barrier");
        assert!(
            cache.wait_for(current, Duration::from_secs(2)).await,
            "the cache never reached revision {current} (it has {})",
            cache.revision()
        );
        assert!(
            cache.get("/k3rs/masterleases/127.0.0.1").is_none(),
            "only API objects are held"
        );
        assert!(cache.get("/registry/configmaps/default/a").is_some());
        let _ = tokio::task::spawn_blocking(move || drop(store)).await;
    }

    /// The events a feed has ready, without waiting.
    fn ready(feed: &mut CacheFeed) -> Vec<Arc<CacheEvent>> {
        feed.read_history().expect("not lagged");
        feed.pending.drain(..).collect()
    }

    fn put(cache: &WatchCache, key: &str, revision: i64, payload: &str) {
        let name = key.rsplit('/').next().unwrap_or_default();
        cache.apply(&Event::Put {
            kv: kv(
                key,
                json!({"metadata": {"name": name}, "data": {"k": payload}}),
                revision,
            ),
            prev_kv: None,
        });
    }

    #[tokio::test]
    async fn a_watcher_is_woken_only_by_its_own_prefix() {
        let cache = Arc::new(WatchCache::empty());
        let mut secrets = cache.subscribe("/registry/secrets/", 0).expect("subscribe");
        let mut everything = cache.subscribe("/registry/", 0).expect("subscribe");
        let mut default_secrets = cache
            .subscribe("/registry/secrets/default/", 0)
            .expect("subscribe");
        assert_eq!(cache.watcher_count(), 3);
        put(&cache, "/registry/configmaps/default/c", 2, "v");
        put(&cache, "/registry/secrets/other/s", 3, "v");
        assert!(!default_secrets.dropped_upto.has_changed().unwrap());
        assert!(secrets.dropped_upto.has_changed().unwrap());
        assert!(everything.dropped_upto.has_changed().unwrap());
        let only = secrets.recv().await.expect("the secret");
        assert_eq!(only.revision, 3);
        assert_eq!(secrets.caught_up(), Some(3));
        assert_eq!(everything.recv().await.expect("configmap").revision, 2);
        assert_eq!(everything.recv().await.expect("secret").revision, 3);
        // A quiet watcher still knows how far the cache has gone (for bookmarks).
        assert_eq!(default_secrets.caught_up(), Some(3));
        let woken = tokio::spawn(async move { default_secrets.recv().await.map(|e| e.revision) });
        tokio::task::yield_now().await;
        put(&cache, "/registry/configmaps/default/d", 4, "v");
        put(&cache, "/registry/secrets/default/s", 5, "v");
        assert_eq!(woken.await.unwrap().expect("its event"), 5);
        // Routes without watchers are forgotten at the next event.
        drop((secrets, everything));
        put(&cache, "/registry/configmaps/default/e", 6, "v");
        assert_eq!(cache.routes.lock().unwrap().len(), 0);
        assert_eq!(cache.watcher_count(), 0);
    }

    #[test]
    fn only_a_watcher_whose_own_events_left_the_history_has_lagged() {
        let cache = Arc::new(WatchCache::empty());
        let mut read_secrets = cache.subscribe("/registry/secrets/", 0).expect("subscribe");
        let mut unread_secrets = cache.subscribe("/registry/secrets/", 0).expect("subscribe");
        let mut pods = cache.subscribe("/registry/pods/", 0).expect("subscribe");
        put(&cache, "/registry/secrets/default/s", 2, "v");
        assert_eq!(ready(&mut read_secrets).len(), 1);
        // 1 MiB configmaps push the secret's event out of the history.
        let payload = "x".repeat(1 << 20);
        let count = HISTORY_BYTES / payload.len() + 4;
        for i in 0..count {
            put(
                &cache,
                &format!("/registry/configmaps/default/c{i}"),
                3 + i as i64,
                &payload,
            );
        }
        assert!(cache.state.read().unwrap().history_start > 2);
        // Read up to the secret before it went: nothing lost, nothing to return.
        assert_eq!(read_secrets.caught_up(), Some(2 + count as i64));
        // Never read the secret: its event is gone, the watcher must re-list.
        assert!(matches!(
            unread_secrets.read_history(),
            Err(FeedEnd::Lagged)
        ));
        assert_eq!(unread_secrets.caught_up(), None);
        // Nothing under its prefix ever went: not lagged.
        assert!(ready(&mut pods).is_empty());
        put(&cache, "/registry/pods/default/p", 3 + count as i64, "v");
        assert_eq!(ready(&mut pods).len(), 1);
    }

    fn kv(key: &str, value: Value, revision: i64) -> crate::store::KeyValue {
        crate::store::KeyValue {
            key: key.as_bytes().to_vec(),
            value: serde_json::to_vec(&value).expect("encodes"),
            create_revision: 1,
            mod_revision: revision,
            version: 1,
        }
    }

    #[test]
    fn events_are_not_held_but_advance_the_revision() {
        let cache = Arc::new(WatchCache::empty());
        let mut feed = cache.subscribe("/registry/", 0).expect("subscribe");
        cache.apply(&Event::Put {
            kv: kv(
                "/registry/events/default/pod.1",
                json!({"metadata": {"name": "pod.1"}, "reason": "Scheduled"}),
                2,
            ),
            prev_kv: None,
        });
        cache.apply(&Event::Put {
            kv: kv(
                "/registry/configmaps/default/c",
                json!({"metadata": {"name": "c"}}),
                3,
            ),
            prev_kv: None,
        });
        assert!(cache.get("/registry/events/default/pod.1").is_none());
        assert_eq!(cache.count("/registry/events/"), 0);
        assert_eq!(cache.revision(), 3);
        // Watchers of the cache only see the cached kind.
        let events = ready(&mut feed);
        assert_eq!(events.len(), 1, "only the configmap's event");
        assert_eq!(&*events[0].key, "/registry/configmaps/default/c");
        let state = cache.state.read().expect("lock");
        assert_eq!(state.history.len(), 1);
        assert!(is_cached("/registry/pods/default/p"));
        assert!(!is_cached("/registry/events/"));
    }

    #[test]
    fn events_share_the_cached_bytes_of_the_previous_version() {
        let cache = Arc::new(WatchCache::empty());
        let key = "/registry/configmaps/default/a";
        let v1 = kv(
            key,
            json!({"metadata": {"name": "a"}, "data": {"k": "1"}}),
            2,
        );
        let v2 = kv(
            key,
            json!({"metadata": {"name": "a"}, "data": {"k": "2"}}),
            3,
        );
        cache.apply(&Event::Put {
            kv: v1.clone(),
            prev_kv: None,
        });
        let cached_v1 = cache.get(key).expect("cached after ADDED");
        assert_eq!(
            &cached_v1.bytes[..],
            br#"{"data":{"k":"1"},"metadata":{"name":"a","resourceVersion":"2"}}"#
        );
        cache.apply(&Event::Put {
            kv: v2.clone(),
            prev_kv: Some(v1),
        });
        cache.apply(&Event::Delete {
            prev_kv: v2,
            revision: 4,
        });
        let mut feed = cache
            .subscribe("/registry/configmaps/", 1)
            .expect("history covers revision 1");
        let events = ready(&mut feed);
        assert_eq!(feed.caught_up(), Some(4));
        let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [EventType::Added, EventType::Modified, EventType::Deleted]
        );
        // One copy of each version: MODIFIED's prev is ADDED's object, DELETED's prev
        // is MODIFIED's object.
        let modified_prev = events[1].prev.as_ref().expect("MODIFIED has prev");
        assert_eq!(modified_prev.as_ptr(), events[0].bytes.as_ptr());
        let deleted_prev = events[2].prev.as_ref().expect("DELETED has prev");
        assert_eq!(deleted_prev.as_ptr(), events[1].bytes.as_ptr());
        // The deletion carries the last state at the deletion's revision.
        assert_eq!(
            &events[2].bytes[..],
            br#"{"data":{"k":"2"},"metadata":{"name":"a","resourceVersion":"4"}}"#
        );
        assert!(cache.get(key).is_none());
        // All keys of the history and the map are one allocation.
        assert!(Arc::ptr_eq(&events[0].key, &events[1].key));
    }

    #[test]
    fn history_is_bounded_by_the_bytes_of_its_objects() {
        let cache = Arc::new(WatchCache::empty());
        // 1 MiB objects: the byte bound, not the event count, limits the history.
        let payload = "x".repeat(1 << 20);
        let events = HISTORY_BYTES / payload.len() + 8;
        for i in 0..events {
            let key = format!("/registry/configmaps/default/c{i}");
            cache.apply(&Event::Put {
                kv: kv(
                    &key,
                    json!({"metadata": {"name": format!("c{i}")}, "data": {"k": payload}}),
                    i as i64 + 2,
                ),
                prev_kv: None,
            });
        }
        let state = cache.state.read().expect("lock");
        assert!(
            state.history_bytes <= HISTORY_BYTES,
            "{}",
            state.history_bytes
        );
        assert!(state.history.len() < events && !state.history.is_empty());
        let oldest = state.history_start;
        drop(state);
        // Resuming inside the window works; from before it is 410 material.
        let mut feed = cache
            .subscribe("/registry/configmaps/", oldest)
            .expect("inside the window");
        let backlog = ready(&mut feed);
        assert_eq!(backlog.last().map(|e| e.revision), Some(events as i64 + 1));
        assert!(matches!(
            cache.subscribe("/registry/configmaps/", oldest - 1),
            Err(SubscribeError::TooOld { .. })
        ));
        // Every object is still in the current state.
        assert_eq!(cache.count("/registry/configmaps/"), events);
    }

    #[test]
    fn objects_the_splice_does_not_understand_take_the_slow_path() {
        // No metadata object, an escaped metadata key, truncated JSON, not an object.
        for input in [
            &br#"{"kind":"X"}"#[..],
            br#"{"metadata":"x"}"#,
            br#"{"metadata":{"na\u006de":"x"}}"#,
            br#"{"metadata":{"name":"x""#,
            br#"[1,2]"#,
            b"",
        ] {
            let mut out = Vec::new();
            assert_eq!(
                splice_resource_version(input, 7, &mut out),
                None,
                "{input:?}"
            );
            assert!(out.is_empty(), "nothing appended for {input:?}");
        }
        // The public function still gives the same answer as before for them.
        assert_eq!(
            &with_resource_version(br#"{"kind":"X"}"#, 7)[..],
            br#"{"kind":"X"}"#
        );
        assert_eq!(
            &with_resource_version(br#"{"metadata":{"na\u006de":"x"}}"#, 7)[..],
            br#"{"metadata":{"name":"x","resourceVersion":"7"}}"#
        );
        assert_eq!(&with_resource_version(b"not json", 7)[..], b"not json");
    }

    #[test]
    fn events_carry_their_watch_line_around_the_cached_bytes() {
        let cache = Arc::new(WatchCache::empty());
        let key = "/registry/configmaps/default/a";
        let mut feed = cache
            .subscribe("/registry/configmaps/", 0)
            .expect("subscribe");
        let v1 = kv(
            key,
            json!({"metadata": {"name": "a"}, "data": {"k": "v"}}),
            2,
        );
        cache.apply(&Event::Put {
            kv: v1.clone(),
            prev_kv: None,
        });
        cache.apply(&Event::Delete {
            prev_kv: v1,
            revision: 3,
        });
        let mut events = ready(&mut feed).into_iter();
        for (kind, revision) in [("ADDED", 2), ("DELETED", 3)] {
            let event = events.next().expect("an event per change");
            let object =
                with_resource_version(br#"{"data":{"k":"v"},"metadata":{"name":"a"}}"#, revision);
            assert_eq!(&event.bytes[..], &object[..]);
            let mut line = format!("{{\"type\":\"{kind}\",\"object\":").into_bytes();
            line.extend_from_slice(&object);
            line.extend_from_slice(b"}\n");
            assert_eq!(
                String::from_utf8_lossy(&event.line),
                String::from_utf8_lossy(&line)
            );
        }
        // Objects the splice does not understand are framed the same way.
        let (object, line) = watch_line_with_resource_version("MODIFIED", b"not json", 4);
        assert_eq!(&object[..], b"not json");
        assert_eq!(&line[..], b"{\"type\":\"MODIFIED\",\"object\":not json}\n");
    }
}
