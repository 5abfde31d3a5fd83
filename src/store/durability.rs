//! The durability thread: makes committed batches durable and only then lets anyone
//! see them.
//!
//! The raft thread commits each batch to SQLite without waiting for the disk (the
//! writer runs `synchronous = NORMAL`), hands the batch's outcome to this thread and
//! goes on with the next batch. This thread `fdatasync`s the WAL file (one call covers
//! every batch queued since the last one, and everything written before them), then,
//! in commit order, moves the published revisions forward, publishes the watch events
//! and answers the proposers. So the fsync of one batch overlaps the CPU work of the
//! next, as etcd overlaps its WAL sync with applying, and nothing is acknowledged,
//! watched or read (readers stop at the published revision, see `reader`) before it
//! is on disk. It owns no SQLite connection and never touches the tables.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};

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
}

/// Runs until `batches` is closed, then returns after finishing what was queued.
pub(crate) fn run(
    batches: mpsc::Receiver<Job>,
    wal_path: PathBuf,
    hub: Arc<WatchHub>,
    shared: Arc<SharedState>,
) {
    let mut wal: Option<File> = None;
    while let Ok(first) = batches.recv() {
        let mut queued = vec![first];
        queued.extend(batches.try_iter());
        sync_and_publish(queued, &mut wal, &wal_path, &hub, &shared);
    }
}

/// Syncs the WAL once for all of `queued`, then publishes them in order.
pub(crate) fn sync_and_publish(
    queued: Vec<Job>,
    wal: &mut Option<File>,
    wal_path: &Path,
    hub: &WatchHub,
    shared: &SharedState,
) {
    #[cfg(test)]
    while shared.hold_sync.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(1));
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
    for job in queued {
        match job {
            Job::Publish(batch) => publish(batch, hub, shared, synced.as_ref().err()),
            Job::Barrier(done) => {
                let _ = done.send(());
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
        hub.close_all();
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

/// The WAL file of the database at `db_path`.
pub(crate) fn wal_path(db_path: &Path) -> PathBuf {
    let mut name = db_path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}
