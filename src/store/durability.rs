//! The durability threads: make committed batches durable and only then let anyone
//! see them.
//!
//! The raft thread commits each batch to SQLite without waiting for the disk (the
//! writer runs `synchronous = NORMAL`), hands the batch's outcome to these threads and
//! goes on with the next batch. A worker takes every queued batch, `fdatasync`s the WAL
//! file (one call covers them and everything written before them), then, in commit
//! order (a ticket per take), moves the published revisions forward, publishes the
//! watch events and answers the proposers. So the fsync of one batch overlaps the CPU work of the
//! next, as etcd overlaps its WAL sync with applying, and nothing is acknowledged,
//! watched or read (readers stop at the published revision, see `reader`) before it
//! is on disk. It owns no SQLite connection and never touches the tables. (A member of
//! a raft group whose commits need another member's acknowledgement publishes in the
//! raft thread instead, see `publish_now`: its commits are on a majority's disks.)

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, mpsc};

use tokio::sync::oneshot;

use super::codec::Applied;
use super::error::{Result, StoreError};
use super::watch::WatchHub;
use super::{Event, SharedState};

/// One committed batch, waiting for the disk.
pub(crate) struct CommittedBatch {
    pub current_revision: i64,
    pub compact_revision: i64,
    pub events: Vec<Arc<Event>>,
    pub replies: Vec<(oneshot::Sender<Result<Applied>>, Result<Applied>)>,
    /// The batch replaced the whole state (a raft snapshot): watchers must resync.
    pub close_watchers: bool,
}

/// Work for the durability thread, done in the order it was sent.
pub(crate) enum Job {
    Publish(CommittedBatch),
    /// Answered once every batch sent before it is durable and published, for callers
    /// that must wait (a raft member may only send its acknowledgements after that).
    Barrier(mpsc::Sender<()>),
    /// Linearizable reads whose read index is applied: answered with the published
    /// revision once every batch sent before is durable and published.
    Release(Vec<oneshot::Sender<Result<i64>>>),
}

/// What the sync workers share: the queue of committed batches (with the ticket the
/// next taker gets) and the ticket whose turn it is to publish.
pub(crate) struct Lanes {
    queue: Mutex<(mpsc::Receiver<Job>, u64)>,
    published: Mutex<u64>,
    turn: Condvar,
}

impl Lanes {
    pub fn new(batches: mpsc::Receiver<Job>) -> Lanes {
        Lanes {
            queue: Mutex::new((batches, 0)),
            published: Mutex::new(0),
            turn: Condvar::new(),
        }
    }
}

/// Sync workers the store runs. Two let a batch committed while an fsync is in flight
/// start its own at once instead of queueing behind it (on this class of disk two
/// overlapping fdatasyncs complete ~40% more syncs per second than one at a time);
/// they still publish strictly in commit order.
pub(crate) const WORKERS: usize = 2;

/// One sync worker: takes everything queued, syncs, waits for its turn, publishes.
/// Returns once the queue is closed and drained.
pub(crate) fn run(
    lanes: Arc<Lanes>,
    wal_path: PathBuf,
    hub: Arc<WatchHub>,
    shared: Arc<SharedState>,
) {
    let mut wal: Option<File> = None;
    loop {
        let (queued, ticket) = {
            let mut queue = lanes.queue.lock().unwrap_or_else(|e| e.into_inner());
            let (batches, next_ticket) = &mut *queue;
            let Ok(first) = batches.recv() else { return };
            let mut queued = vec![first];
            queued.extend(batches.try_iter());
            *next_ticket += 1;
            (queued, *next_ticket - 1)
        };
        // Committed before they were queued, so this fsync covers them (and every
        // batch an earlier ticket holds).
        let synced = sync_step(&mut wal, &wal_path, &shared);
        let mut published = lanes.published.lock().unwrap_or_else(|e| e.into_inner());
        while *published != ticket {
            published = lanes
                .turn
                .wait(published)
                .unwrap_or_else(|e| e.into_inner());
        }
        publish_all(queued, &hub, &shared, synced.as_ref().err());
        *published += 1;
        lanes.turn.notify_all();
    }
}

/// Syncs the WAL once for all of `queued`, then publishes them in order (for when no
/// worker is running).
pub(crate) fn sync_and_publish(
    queued: Vec<Job>,
    wal_path: &Path,
    hub: &WatchHub,
    shared: &SharedState,
) {
    let synced = sync_step(&mut None, wal_path, shared);
    publish_all(queued, hub, shared, synced.as_ref().err());
}

/// Publishes jobs without syncing first, for a member whose committed entries are on
/// another member's disk already (see `node::process_ready`). The caller makes sure
/// nothing handed to the workers is still unpublished.
pub(crate) fn publish_now(queued: Vec<Job>, hub: &WatchHub, shared: &SharedState) {
    publish_all(queued, hub, shared, None);
}

/// Syncs the WAL in the caller's thread (errors are logged and returned).
pub(crate) fn sync_in_place(
    wal: &mut Option<File>,
    wal_path: &Path,
    shared: &SharedState,
) -> std::io::Result<()> {
    sync_step(wal, wal_path, shared)
}

fn sync_step(wal: &mut Option<File>, wal_path: &Path, shared: &SharedState) -> std::io::Result<()> {
    #[cfg(test)]
    while shared.hold_sync.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    #[cfg(test)]
    if shared.slow_next_sync.swap(false, Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let synced = sync_file(wal, wal_path);
    shared.syncs.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = &synced {
        // The rows are committed (every later write builds on them) but may not
        // survive a power loss: publish them like any other, so watchers and
        // readers agree with the store, and tell the writers we cannot promise it.
        tracing::error!(error = %e, wal = %wal_path.display(), "syncing the store's WAL failed; writes of this batch may not survive a power loss");
        *wal = None;
    }
    synced
}

fn publish_all(
    queued: Vec<Job>,
    hub: &WatchHub,
    shared: &SharedState,
    sync_error: Option<&std::io::Error>,
) {
    for job in queued {
        match job {
            Job::Publish(batch) => publish(batch, hub, shared, sync_error),
            Job::Barrier(done) => {
                let _ = done.send(());
            }
            Job::Release(replies) => {
                let revision = shared.current_revision.load(Ordering::SeqCst);
                for reply in replies {
                    let _ = reply.send(Ok(revision));
                }
            }
        }
    }
}

fn publish(
    batch: CommittedBatch,
    hub: &WatchHub,
    shared: &SharedState,
    sync_error: Option<&std::io::Error>,
) {
    shared
        .current_revision
        .store(batch.current_revision, Ordering::SeqCst);
    shared
        .compact_revision
        .store(batch.compact_revision, Ordering::SeqCst);
    if batch.close_watchers {
        hub.resync_all();
    }
    hub.publish(batch.current_revision, &batch.events);
    for (reply, outcome) in batch.replies {
        let outcome = match sync_error {
            None => outcome,
            Some(e) => Err(StoreError::Io {
                context: "write committed but not confirmed on disk (fdatasync of the WAL failed)"
                    .into(),
                source: Box::new(std::io::Error::new(e.kind(), e.to_string())),
            }),
        };
        let _ = reply.send(outcome);
    }
}

/// `fdatasync` of the WAL file, opened on first use (it exists once anything was
/// committed; a checkpoint may truncate it but never replaces it while the database
/// is open).
fn sync_file(file: &mut Option<File>, path: &Path) -> std::io::Result<()> {
    if file.is_none() {
        *file = Some(File::open(path)?);
    }
    match file {
        Some(f) => f.sync_data(),
        None => Ok(()),
    }
}
