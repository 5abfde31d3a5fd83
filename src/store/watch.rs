//! Watch fan-out. The apply loop publishes each committed batch of events, in
//! revision order, to every subscriber whose prefix matches; nothing polls.
//! Each subscriber has a bounded queue: when it is full the subscriber is cut off
//! and its stream ends with `ResyncRequired`, so a slow watcher never blocks the
//! writers nor grows memory without bound. History before a watch started is read
//! from the database in chunks.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::Event;
use super::error::{Result, StoreError};
use super::reader::{self, ReaderPool};

/// Events read from the database per history chunk.
const HISTORY_CHUNK: usize = 1000;

struct Queue {
    events: VecDeque<Arc<Event>>,
    /// The hub dropped this subscriber because its queue overflowed.
    lagged: bool,
    /// No more events will come (store closed, or lagged).
    closed: bool,
    /// The stream was dropped; the hub should forget this subscriber.
    abandoned: bool,
}

pub(crate) struct Subscriber {
    prefix: Vec<u8>,
    queue: Mutex<Queue>,
    notify: Notify,
}

struct HubState {
    /// Revision of the newest batch published.
    last_revision: i64,
    subscribers: Vec<Arc<Subscriber>>,
}

pub(crate) struct WatchHub {
    state: Mutex<HubState>,
    limit: usize,
}

impl WatchHub {
    pub fn new(limit: usize) -> Self {
        WatchHub {
            state: Mutex::new(HubState {
                last_revision: 0,
                subscribers: Vec::new(),
            }),
            limit: limit.max(1),
        }
    }

    /// Sets the revision the hub starts from (after the store loaded its state).
    pub fn set_revision(&self, revision: i64) {
        if let Ok(mut state) = self.state.lock() {
            state.last_revision = revision;
        }
    }

    /// Registers a subscriber; returns it and the newest published revision. Every
    /// event after that revision will reach the subscriber's queue.
    fn subscribe(&self, prefix: Vec<u8>) -> (Arc<Subscriber>, i64) {
        let subscriber = Arc::new(Subscriber {
            prefix,
            queue: Mutex::new(Queue {
                events: VecDeque::new(),
                lagged: false,
                closed: false,
                abandoned: false,
            }),
            notify: Notify::new(),
        });
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.subscribers.push(subscriber.clone());
        (subscriber, state.last_revision)
    }

    /// Delivers a committed batch. `revision` is the store's revision after it.
    pub fn publish(&self, revision: i64, events: &[Arc<Event>]) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.last_revision = revision;
        if events.is_empty() {
            return;
        }
        let limit = self.limit;
        state.subscribers.retain(|subscriber| {
            let mut queue = subscriber.queue.lock().unwrap_or_else(|p| p.into_inner());
            if queue.abandoned || queue.closed {
                return false;
            }
            let before = queue.events.len();
            for event in events {
                if event.key().starts_with(&subscriber.prefix) {
                    queue.events.push_back(event.clone());
                }
            }
            if queue.events.len() > limit {
                queue.events.truncate(limit);
                queue.lagged = true;
                queue.closed = true;
                drop(queue);
                subscriber.notify.notify_one();
                return false;
            }
            let added = queue.events.len() > before;
            drop(queue);
            if added {
                subscriber.notify.notify_one();
            }
            true
        });
    }

    /// Ends every stream with `ResyncRequired` after what it has queued: the state was
    /// replaced wholesale (a raft snapshot from the leader), so watchers must re-list.
    pub fn resync_all(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for subscriber in state.subscribers.drain(..) {
            let mut queue = subscriber.queue.lock().unwrap_or_else(|p| p.into_inner());
            queue.lagged = true;
            queue.closed = true;
            drop(queue);
            subscriber.notify.notify_one();
        }
    }

    /// Ends every stream (the store is shutting down).
    pub fn close_all(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for subscriber in state.subscribers.drain(..) {
            subscriber
                .queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .closed = true;
            subscriber.notify.notify_one();
        }
    }

    pub fn subscriber_count(&self) -> usize {
        self.state.lock().map(|s| s.subscribers.len()).unwrap_or(0)
    }
}

/// An ordered stream of changes under a prefix. Ends with `None` when the store
/// closes, or with `Some(Err(ResyncRequired))` if this watcher fell too far behind.
pub struct WatchStream {
    subscriber: Arc<Subscriber>,
    readers: Arc<ReaderPool>,
    /// History still to read from the database: `(after, until]`.
    pending_history: Option<(i64, i64)>,
    backlog: VecDeque<Arc<Event>>,
    /// Events at or below this revision are skipped (already covered or not wanted).
    min_revision: i64,
    limit: usize,
    finished: bool,
}

impl WatchStream {
    pub(crate) async fn start(
        hub: Arc<WatchHub>,
        readers: Arc<ReaderPool>,
        prefix: Vec<u8>,
        from_revision: i64,
    ) -> Result<WatchStream> {
        let (subscriber, published) = hub.subscribe(prefix);
        let mut stream = WatchStream {
            subscriber,
            readers,
            pending_history: (from_revision < published).then_some((from_revision, published)),
            backlog: VecDeque::new(),
            min_revision: from_revision,
            limit: hub.limit,
            finished: false,
        };
        // Check compaction (and load the first chunk) now, so a too-old revision
        // fails the watch call itself rather than its first event.
        stream.fill_from_history().await?;
        Ok(stream)
    }

    async fn fill_from_history(&mut self) -> Result<()> {
        let Some((after, until)) = self.pending_history else {
            return Ok(());
        };
        let readers = self.readers.clone();
        let prefix = self.subscriber.prefix.clone();
        let events = tokio::task::spawn_blocking(move || {
            readers.with(|conn| reader::history(conn, &prefix, after, until, HISTORY_CHUNK))
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("watch history task failed: {e}")))??;
        self.pending_history = match events.last() {
            Some(last) if events.len() == HISTORY_CHUNK && last.revision() < until => {
                Some((last.revision(), until))
            }
            _ => None,
        };
        if let Some(last) = events.last() {
            self.min_revision = self.min_revision.max(last.revision());
        }
        if self.pending_history.is_none() {
            // Everything up to `until` now comes from history; the queue holds later events.
            self.min_revision = self.min_revision.max(until);
        }
        self.backlog.extend(events.into_iter().map(Arc::new));
        Ok(())
    }

    /// The next event, `Some(Err(..))` once if the watcher lagged or history was
    /// compacted while being read, and `None` after the end.
    pub async fn next(&mut self) -> Option<Result<Arc<Event>>> {
        if self.finished {
            return None;
        }
        loop {
            if let Some(event) = self.backlog.pop_front() {
                return Some(Ok(event));
            }
            if self.pending_history.is_some() {
                if let Err(e) = self.fill_from_history().await {
                    self.finished = true;
                    return Some(Err(e));
                }
                continue;
            }
            {
                let mut queue = self
                    .subscriber
                    .queue
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                while let Some(event) = queue.events.pop_front() {
                    if event.revision() > self.min_revision {
                        return Some(Ok(event));
                    }
                }
                if queue.lagged {
                    self.finished = true;
                    return Some(Err(StoreError::ResyncRequired {
                        buffered: self.limit,
                    }));
                }
                if queue.closed {
                    self.finished = true;
                    return None;
                }
            }
            self.subscriber.notify.notified().await;
        }
    }

    /// Like `next`, but returns `None` at once when nothing is queued.
    pub fn try_next(&mut self) -> Option<Result<Arc<Event>>> {
        if let Some(event) = self.backlog.pop_front() {
            return Some(Ok(event));
        }
        let mut queue = self
            .subscriber
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        while let Some(event) = queue.events.pop_front() {
            if event.revision() > self.min_revision {
                return Some(Ok(event));
            }
        }
        None
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        self.subscriber
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abandoned = true;
    }
}
