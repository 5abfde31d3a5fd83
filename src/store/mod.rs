//! The store: a revisioned key-value store on SQLite, replicated with raft (raft-rs).
//!
//! Owns: the database files under its directory (`state.db` and its WAL), the raft
//! group that orders every write, the apply loop, watch fan-out, compaction, WAL
//! checkpoints and the snapshot primitive.
//!
//! May not touch: anything Kubernetes. Keys and values are bytes; revisions are
//! integers. Only `apiserver` may use this module (the design's one rule).
//!
//! Semantics follow etcd/kine: one global revision counter; each write gets the next
//! revision; each key carries `create_revision`, `mod_revision` and `version`.
//! Writes are raft proposals; a write is acknowledged only after the SQLite
//! transaction that persisted its raft entry *and* applied it has been fsynced.
//! Concurrent proposals share one raft `Ready`, one transaction and one fsync.
//!
//! Several servers form one raft group (see `docs/store.md`): a write on any member is
//! proposed there and raft forwards it to the leader; the proposer answers once it has
//! applied the entry itself, so the outcome and revision are the same everywhere.
//! Reads are linearizable: on a group of more than one member every read first waits
//! for a raft ReadIndex round ([`Store::read_barrier`]). Membership changes are raft
//! `ConfChangeV2` entries: a server joins as a learner and the leader promotes it once
//! it has caught up; names and peer addresses live in the replicated `members` table.

mod codec;
mod db;
mod durability;
mod error;
mod log_store;
mod node;
pub mod peer_wire;
pub mod peers;
mod reader;
mod snapshot;
pub mod snapshot_transfer;
pub mod transport;
mod watch;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{Semaphore, oneshot};

pub use db::ClusterId;
pub use error::{Result, StoreError};
pub use node::{RaftTiming, peer_address};
pub use snapshot::{SnapshotInfo, inspect_snapshot, restore_snapshot};
pub use transport::{NoPeers, Transport};
pub use watch::WatchStream;

use codec::{Applied, Command};

/// The file name of the database inside the store directory (as k3s: `server/db/state.db`).
pub const DB_FILE_NAME: &str = "state.db";

/// One version of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Revision of the write that created this incarnation of the key.
    pub create_revision: i64,
    /// Revision of the write that produced this version.
    pub mod_revision: i64,
    /// Number of writes since creation (1 after create).
    pub version: i64,
}

/// A change observed by a watcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The key was created or updated; `prev_kv` is the version before, if any.
    Put {
        kv: KeyValue,
        prev_kv: Option<KeyValue>,
    },
    /// The key was deleted at `revision`; `prev_kv` is the version that was deleted.
    Delete { prev_kv: KeyValue, revision: i64 },
}

impl Event {
    /// The revision at which this change happened.
    pub fn revision(&self) -> i64 {
        match self {
            Event::Put { kv, .. } => kv.mod_revision,
            Event::Delete { revision, .. } => *revision,
        }
    }

    /// The key that changed.
    pub fn key(&self) -> &[u8] {
        match self {
            Event::Put { kv, .. } => &kv.key,
            Event::Delete { prev_kv, .. } => &prev_kv.key,
        }
    }
}

/// What `range` returns: the items, the revision they were read at, and whether more
/// items follow the last one (for `limit`/`continue` paging).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeResult {
    pub kvs: Vec<KeyValue>,
    pub revision: i64,
    pub more: bool,
}

/// A range query over all keys starting with `prefix`.
#[derive(Clone, Debug, Default)]
pub struct RangeRequest {
    pub prefix: Vec<u8>,
    /// Read as of this revision (`None`: the current one).
    pub at_revision: Option<i64>,
    /// At most this many items (`0`: no limit).
    pub limit: usize,
    /// Only keys strictly after this one (the `continue` token of a previous page).
    pub start_after_key: Option<Vec<u8>>,
}

/// How much history automatic compaction keeps.
#[derive(Clone, Debug)]
pub struct CompactionPolicy {
    /// Never compact the newest this-many revisions.
    pub min_revisions: i64,
    /// Never compact revisions younger than this.
    pub min_age: Duration,
    /// How often automatic compaction considers moving the compact revision.
    pub interval: Duration,
    /// Rows removed per physical-compaction transaction (keeps each pass short).
    pub batch_rows: usize,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy {
            min_revisions: 1000,
            min_age: Duration::from_secs(300),
            interval: Duration::from_secs(10),
            batch_rows: 500,
        }
    }
}

/// Everything needed to open a store.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Directory holding `state.db` (created if missing).
    pub dir: PathBuf,
    /// This member's raft id (a fresh store is a one-member group with this id).
    pub node_id: u64,
    pub compaction: CompactionPolicy,
    /// Events a watcher may have queued before it is cut off with `ResyncRequired`.
    pub watch_buffer_events: usize,
    /// Most proposals taken into one raft Ready / transaction / fsync.
    pub max_batch: usize,
    /// Raft log entries kept behind the applied index for lagging members.
    pub raft_log_keep: u64,
    /// How often the background WAL checkpoint runs.
    pub checkpoint_interval: Duration,
    /// A fresh store starts as an empty member waiting for the leader of an existing group
    /// (a joining server) instead of a one-member group of its own.
    pub join: bool,
    /// The cluster a joining server joins (from the join answer); a new store of a new
    /// cluster makes its own.
    pub cluster_id: Option<ClusterId>,
    /// Raft heartbeat interval and election timeout.
    pub timing: RaftTiming,
    /// How long a write or a linearizable read may wait for the raft group (a leader to
    /// be elected, a forwarded proposal to commit) before it fails.
    pub request_timeout: Duration,
}

impl StoreConfig {
    /// Defaults for a store in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            dir: dir.into(),
            node_id: 1,
            compaction: CompactionPolicy::default(),
            watch_buffer_events: 10_000,
            max_batch: 4096,
            raft_log_keep: 1000,
            checkpoint_interval: Duration::from_millis(100),
            join: false,
            cluster_id: None,
            timing: RaftTiming::default(),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// Figures shared between the apply loop and readers.
#[derive(Debug, Default)]
pub(crate) struct SharedState {
    pub current_revision: AtomicI64,
    pub compact_revision: AtomicI64,
    pub is_leader: AtomicBool,
    pub stopping: AtomicBool,
    /// Write transactions committed.
    pub commits: AtomicU64,
    /// fdatasyncs of the WAL by the durability thread (each covers one or more
    /// committed batches).
    pub syncs: AtomicU64,
    /// Tests set this to hold the durability thread before its next fsync.
    #[cfg(test)]
    pub hold_sync: AtomicBool,
    /// Tests set this to make the next fsync take 200 ms longer.
    #[cfg(test)]
    pub slow_next_sync: AtomicBool,
    /// Commands applied (successful or refused).
    pub applied_commands: AtomicU64,
    /// The raft leader this member knows of (0: none).
    pub leader_id: AtomicU64,
    /// Leader changes this member has seen (etcd_server_leader_changes_seen_total).
    pub leader_changes: AtomicU64,
    /// Proposals that failed: timed out, refused, or lost (etcd_server_proposals_failed_total).
    pub proposals_failed: AtomicU64,
    /// Whether this member is the only voter and there are no learners: its own applied
    /// state is then linearizable without a ReadIndex round.
    pub single_member: AtomicBool,
    /// The group's members with their names and peer URLs, as last applied.
    pub members: Mutex<Vec<Member>>,
    /// This member's raft id.
    pub own_id: AtomicU64,
    /// Heartbeat round trips to each peer (leader only), etcd's buckets.
    pub peer_rtt: Mutex<std::collections::BTreeMap<u64, RttHistogram>>,
    /// Ids of members removed from the group (their messages are answered "removed").
    pub removed_ids: Mutex<Vec<u64>>,
    /// Set once this member learns it was removed from the group: it then refuses every
    /// request, and [`Store::stopped_for_good`] returns.
    pub removed: AtomicBool,
    /// Set when a committed entry is of a newer format than this build reads: the member
    /// stops applying (skipping it would make it diverge) until it is upgraded.
    pub incompatible: Mutex<Option<String>>,
    /// The cluster this member belongs to (once known).
    pub cluster_id: Mutex<Option<ClusterId>>,
    /// Woken when `removed` or `incompatible` is set.
    pub stopped_notify: tokio::sync::Notify,
}

/// Round-trip times of heartbeats to one peer, in etcd's buckets for
/// `etcd_network_peer_round_trip_time_seconds` (0.1 ms doubling 16 times).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RttHistogram {
    /// Observations at or below each bound of [`RttHistogram::BOUNDS`] (cumulative).
    pub buckets: [u64; 16],
    pub count: u64,
    pub sum_seconds: f64,
}

impl RttHistogram {
    /// Upper bounds in seconds.
    pub const BOUNDS: [f64; 16] = {
        let mut bounds = [0.0001; 16];
        let mut i = 1;
        while i < 16 {
            bounds[i] = bounds[i - 1] * 2.0;
            i += 1;
        }
        bounds
    };

    pub fn observe(&mut self, rtt: Duration) {
        let seconds = rtt.as_secs_f64();
        for (bucket, bound) in self.buckets.iter_mut().zip(Self::BOUNDS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
        self.count += 1;
        self.sum_seconds += seconds;
    }
}

/// Counters that show what the store did (group commit, compaction).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Write transactions committed.
    pub commits: u64,
    /// WAL fsyncs that made committed batches durable (at most one per commit).
    pub syncs: u64,
    /// Commands applied through raft.
    pub applied_commands: u64,
    pub current_revision: i64,
    pub compact_revision: i64,
}

/// One member of the raft group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The raft id (stable for the life of the member).
    pub id: u64,
    /// The server's node name.
    pub name: String,
    /// Where its raft peer port listens, e.g. `https://10.0.0.2:2380`.
    pub peer_url: String,
    pub role: MemberRole,
}

/// A member's part in the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberRole {
    /// Votes and counts for quorum.
    Voter,
    /// Receives the log but does not vote (a joining server that is catching up).
    Learner,
}

impl MemberRole {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberRole::Voter => "voter",
            MemberRole::Learner => "learner",
        }
    }
}

/// Inputs to the raft driver thread.
pub(crate) enum Input {
    Propose {
        command: Command,
        reply: Option<oneshot::Sender<Result<Applied>>>,
    },
    /// A membership change (answered once this member has applied it).
    ConfChange {
        change: raft::eraftpb::ConfChangeV2,
        reply: oneshot::Sender<Result<Applied>>,
    },
    /// A linearizable read: answered with a revision at least as new as every write
    /// acknowledged before the request, once that revision is readable here.
    ReadIndex {
        reply: oneshot::Sender<Result<i64>>,
    },
    Step(Box<raft::eraftpb::Message>),
    /// From the transport: nothing reached `peer` (and a snapshot failed, if `snapshot`).
    Unreachable {
        peer: u64,
        snapshot: bool,
    },
    /// From the transport: a snapshot was written out to `peer`.
    SnapshotSent {
        peer: u64,
    },
    /// A log entry of exactly these bytes (tests).
    #[cfg(test)]
    ProposeRaw {
        data: Vec<u8>,
        reply: oneshot::Sender<Result<Applied>>,
    },
    /// Before a clean stop: on a leader, hand leadership to another voter; answered with
    /// whether this member no longer leads.
    HandOverLeadership {
        reply: oneshot::Sender<bool>,
    },
    /// From the transport: member `told_by` belongs to another cluster (this member's
    /// data is of a cluster that was reset or restored without it).
    OtherCluster {
        told_by: u64,
    },
    /// From the transport: member `told_by` answered that this member was removed.
    RemovedFromGroup {
        told_by: u64,
    },
    Shutdown,
}

/// Most proposals that may be waiting for the driver at once; callers beyond that
/// wait (backpressure instead of unbounded queues).
const MAX_IN_FLIGHT: usize = 16_384;

struct Inner {
    inputs: mpsc::Sender<Input>,
    admission: Semaphore,
    readers: Arc<reader::ReaderPool>,
    hub: Arc<watch::WatchHub>,
    shared: Arc<SharedState>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    db_path: PathBuf,
    _lock: std::fs::File,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let _ = self.inputs.send(Input::Shutdown);
        if let Ok(mut threads) = self.threads.lock() {
            for handle in threads.drain(..) {
                let _ = handle.join();
            }
        }
    }
}

/// A handle to the store; cheap to clone. The store shuts down when the last handle
/// is dropped (or `close` is called on any of them... the last drop joins threads).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("db", &self.inner.db_path)
            .field("revision", &self.current_revision())
            .finish()
    }
}

impl Store {
    /// Opens (or creates) the store in `config.dir` with no raft peers.
    pub fn open(config: StoreConfig) -> Result<Store> {
        Self::open_with_transport(config, Box::new(NoPeers))
    }

    /// Opens the store, sending raft messages for other members through `transport`.
    /// Returns once this member has replayed its log and, for a one-member group,
    /// become leader.
    pub fn open_with_transport(
        config: StoreConfig,
        mut transport: Box<dyn Transport>,
    ) -> Result<Store> {
        std::fs::create_dir_all(&config.dir).map_err(|e| {
            StoreError::io(
                format!("creating store directory {}", config.dir.display()),
                e,
            )
        })?;
        // Owner only, whatever the umask or an older k3rs left (etcd keeps its data
        // directory 0700; CIS 1.1.11).
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&config.dir, std::fs::Permissions::from_mode(0o700)).map_err(
                |e| StoreError::io(format!("making {} private (0700)", config.dir.display()), e),
            )?;
        }
        let lock = lock_directory(&config.dir)?;
        let db_path = config.dir.join(DB_FILE_NAME);
        let database =
            db::Database::open(&db_path, config.node_id, config.join, config.cluster_id)?;
        let shared = Arc::new(SharedState::default());
        let hub = Arc::new(watch::WatchHub::new(config.watch_buffer_events));
        let readers = Arc::new(reader::ReaderPool::new(db_path.clone()));
        let (inputs, input_rx) = mpsc::channel();
        transport.attach(transport::PeerFeedback::new(inputs.clone()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let driver = node::Driver::start(
            config.clone(),
            database,
            input_rx,
            transport,
            hub.clone(),
            shared.clone(),
        );
        let driver_thread = std::thread::Builder::new()
            .name("store-raft".into())
            .spawn(move || driver.run(ready_tx))
            .map_err(|e| StoreError::io("starting the store thread", e))?;
        let checkpointer = {
            let shared = shared.clone();
            let path = db_path.clone();
            let interval = config.checkpoint_interval;
            std::thread::Builder::new()
                .name("store-checkpoint".into())
                .spawn(move || db::checkpoint_loop(&path, interval, &shared))
                .map_err(|e| StoreError::io("starting the checkpoint thread", e))?
        };
        let inner = Arc::new(Inner {
            inputs,
            admission: Semaphore::new(MAX_IN_FLIGHT),
            readers,
            hub,
            shared,
            threads: Mutex::new(vec![driver_thread, checkpointer]),
            db_path,
            _lock: lock,
        });
        // The driver reports once it has loaded the log and (single member) won its election.
        match ready_rx.recv() {
            Ok(Ok(())) => {
                let store = Store { inner };
                if store.is_removed() {
                    return Err(store.removed_error());
                }
                Ok(store)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(StoreError::Unavailable(
                "the store thread stopped while starting".into(),
            )),
        }
    }

    /// Path of the database file.
    pub fn db_path(&self) -> &Path {
        &self.inner.db_path
    }

    /// The newest revision (0 for an empty store).
    pub fn current_revision(&self) -> i64 {
        self.inner.shared.current_revision.load(Ordering::SeqCst)
    }

    /// Revisions at or below this one are no longer readable.
    pub fn compact_revision(&self) -> i64 {
        self.inner.shared.compact_revision.load(Ordering::SeqCst)
    }

    /// Counters for benchmarks and diagnostics.
    pub fn stats(&self) -> StoreStats {
        let shared = &self.inner.shared;
        StoreStats {
            commits: shared.commits.load(Ordering::Relaxed),
            syncs: shared.syncs.load(Ordering::Relaxed),
            applied_commands: shared.applied_commands.load(Ordering::Relaxed),
            current_revision: shared.current_revision.load(Ordering::SeqCst),
            compact_revision: shared.compact_revision.load(Ordering::SeqCst),
        }
    }

    /// Number of open watch streams (for metrics).
    pub fn watcher_count(&self) -> usize {
        self.inner.hub.subscriber_count()
    }

    /// Total bytes of the database files (`state.db`, its WAL and shared-memory file).
    pub fn disk_usage(&self) -> u64 {
        ["", "-wal", "-shm"]
            .iter()
            .filter_map(|suffix| {
                let mut name = self.inner.db_path.as_os_str().to_owned();
                name.push(suffix);
                std::fs::metadata(PathBuf::from(name)).ok()
            })
            .map(|m| m.len())
            .sum()
    }

    /// Whether this member currently leads its raft group (and so accepts writes).
    pub fn is_leader(&self) -> bool {
        self.inner.shared.is_leader.load(Ordering::SeqCst)
    }

    /// This member's raft id.
    pub fn member_id(&self) -> u64 {
        self.inner.shared.own_id.load(Ordering::SeqCst)
    }

    /// The raft id of the leader this member knows of.
    pub fn leader_id(&self) -> Option<u64> {
        Some(self.inner.shared.leader_id.load(Ordering::SeqCst)).filter(|id| *id != 0)
    }

    /// Whether this member was removed from the group (it then refuses every request).
    pub fn is_removed(&self) -> bool {
        self.inner.shared.removed.load(Ordering::SeqCst)
    }

    /// Returns, with the reason, once this member can no longer take part in its group:
    /// it learned it was removed (by applying its own removal, or from a member it sends
    /// to), or a committed entry is of a format this build cannot read. The server then
    /// stops.
    pub async fn stopped_for_good(&self) -> StoreError {
        let shared = &self.inner.shared;
        loop {
            let notified = shared.stopped_notify.notified();
            if shared.removed.load(Ordering::SeqCst) {
                return self.removed_error();
            }
            if let Some(detail) = self.incompatible() {
                return StoreError::Incompatible {
                    path: self.inner.db_path.clone(),
                    detail,
                };
            }
            notified.await;
        }
    }

    /// Before a clean stop: a leader hands raft leadership to its most caught-up voter
    /// (as etcd does), so the group goes on without waiting an election timeout. Returns
    /// whether this member no longer leads (at once for a follower; within 2 s).
    pub async fn hand_over_leadership(&self) -> bool {
        let (reply, response) = oneshot::channel();
        if self
            .inner
            .inputs
            .send(Input::HandOverLeadership { reply })
            .is_err()
        {
            return true;
        }
        response.await.unwrap_or(true)
    }

    /// Proposes an entry of exactly `data` (tests: entries a newer build would write).
    #[cfg(test)]
    pub(crate) async fn propose_raw(&self, data: Vec<u8>) -> Result<Applied> {
        let (reply, response) = oneshot::channel();
        self.inner
            .inputs
            .send(Input::ProposeRaw { data, reply })
            .map_err(|_| StoreError::Unavailable("the store is shut down".into()))?;
        response
            .await
            .map_err(|_| StoreError::Unavailable("the store stopped before answering".into()))?
    }

    fn incompatible(&self) -> Option<String> {
        self.inner
            .shared
            .incompatible
            .lock()
            .ok()
            .and_then(|i| i.clone())
    }

    /// The id of the cluster this member belongs to, once known.
    pub fn cluster_id(&self) -> Option<ClusterId> {
        self.inner.shared.cluster_id.lock().ok().and_then(|id| *id)
    }

    /// Whether `id` names a member removed from the group.
    pub fn is_removed_member(&self, id: u64) -> bool {
        self.inner
            .shared
            .removed_ids
            .lock()
            .map(|ids| ids.contains(&id))
            .unwrap_or(false)
    }

    fn removed_error(&self) -> StoreError {
        StoreError::Removed {
            id: self.member_id(),
            dir: self
                .inner
                .db_path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        }
    }

    /// Whether this member knows a leader (etcd's `etcd_server_has_leader`).
    pub fn has_leader(&self) -> bool {
        self.leader_id().is_some()
    }

    /// Leader changes this member has seen since it started.
    pub fn leader_changes(&self) -> u64 {
        self.inner.shared.leader_changes.load(Ordering::Relaxed)
    }

    /// Proposals that failed (timed out, refused or lost) since it started.
    pub fn proposals_failed(&self) -> u64 {
        self.inner.shared.proposals_failed.load(Ordering::Relaxed)
    }

    /// Heartbeat round trips to each peer, by member id (measured while leading).
    pub fn peer_round_trips(&self) -> Vec<(u64, RttHistogram)> {
        self.inner
            .shared
            .peer_rtt
            .lock()
            .map(|m| m.iter().map(|(id, h)| (*id, h.clone())).collect())
            .unwrap_or_default()
    }

    /// The group's members, voters first, each with its name and peer URL (a member
    /// whose name is not known yet has an empty one).
    pub fn members(&self) -> Vec<Member> {
        self.inner
            .shared
            .members
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// Whether this store is one of several members (or has recorded its own name and
    /// peer URL for others to join): it then needs its peer port.
    pub fn is_clustered(&self) -> bool {
        let members = self.members();
        members.len() > 1 || members.iter().any(|m| !m.peer_url.is_empty())
    }

    /// A revision at least as new as every write acknowledged anywhere in the group
    /// before this call, once it is readable on this member (raft ReadIndex, as etcd's
    /// linearizable reads). A lone member answers at once: everything it acknowledged
    /// is already readable.
    pub async fn read_barrier(&self) -> Result<i64> {
        let shared = &self.inner.shared;
        if shared.removed.load(Ordering::SeqCst) || self.incompatible().is_some() {
            return Err(self.stopped_for_good().await);
        }
        if shared.single_member.load(Ordering::SeqCst) && shared.is_leader.load(Ordering::SeqCst) {
            return Ok(self.current_revision());
        }
        let (reply, response) = oneshot::channel();
        self.inner
            .inputs
            .send(Input::ReadIndex { reply })
            .map_err(|_| StoreError::Unavailable("the store is shut down".into()))?;
        response
            .await
            .map_err(|_| StoreError::Unavailable("the store stopped before answering".into()))?
    }

    /// The current version of `key`, or `None` (a linearizable read).
    pub async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let key = key.to_vec();
        let durable = self.read_barrier().await?;
        self.read(move |conn| reader::get(conn, &key, durable))
            .await
    }

    /// Items whose keys start with `request.prefix`, in key order (linearizable when
    /// `at_revision` is `None`).
    pub async fn range(&self, request: RangeRequest) -> Result<RangeResult> {
        let mut current = self.current_revision();
        match request.at_revision {
            None => current = self.read_barrier().await?,
            Some(at) if at > current => {
                // Maybe written through another member and not applied here yet.
                current = self.read_barrier().await?;
                if at > current {
                    return Err(StoreError::FutureRevision {
                        requested: at,
                        current,
                    });
                }
            }
            Some(_) => {}
        }
        self.read(move |conn| reader::range(conn, &request, current))
            .await
    }

    /// Number of live keys starting with `prefix`.
    pub async fn count(&self, prefix: &[u8]) -> Result<u64> {
        let prefix = prefix.to_vec();
        let durable = self.read_barrier().await?;
        self.read(move |conn| reader::count(conn, &prefix, durable))
            .await
    }

    /// Records (or updates) the name and peer URL of member `id`.
    pub async fn set_member(&self, id: u64, name: &str, peer_url: &str) -> Result<()> {
        match self
            .propose(Command::SetMember {
                id,
                name: name.to_string(),
                peer_url: peer_url.to_string(),
            })
            .await?
        {
            Applied::MemberSet => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Adds a server to the group as a learner; the leader promotes it to voter once it
    /// has caught up. The same name with the same peer URL again returns the member
    /// already added (a retried join). Refused while another server is still joining
    /// (one membership change at a time) and, on the leader, while fewer than a quorum
    /// of voters are reachable.
    pub async fn add_learner(&self, name: &str, peer_url: &str) -> Result<Member> {
        let members = self.members();
        if let Some(existing) = members.iter().find(|m| m.name == name) {
            if existing.peer_url == peer_url {
                return Ok(existing.clone());
            }
            return Err(StoreError::AlreadyExists {
                key: format!(
                    "member {name:?} (id {:x}, peer URL {}); remove it first or use another node name",
                    existing.id, existing.peer_url
                ),
            });
        }
        if let Some(joining) = members.iter().find(|m| m.role == MemberRole::Learner) {
            return Err(StoreError::Unavailable(format!(
                "server {:?} is still joining the cluster; servers join one at a time, retry once it is a voter",
                joining.name
            )));
        }
        let id = new_member_id(name, &members);
        self.set_member(id, name, peer_url).await?;
        let mut change = raft::eraftpb::ConfChangeSingle::default();
        change.set_change_type(raft::eraftpb::ConfChangeType::AddLearnerNode);
        change.node_id = id;
        self.conf_change(vec![change]).await?;
        Ok(Member {
            id,
            name: name.to_string(),
            peer_url: peer_url.to_string(),
            role: MemberRole::Learner,
        })
    }

    /// Removes member `id` from the group. Refused, on the leader, when the voters left
    /// would not have a reachable quorum.
    pub async fn remove_member(&self, id: u64) -> Result<()> {
        if !self.members().iter().any(|m| m.id == id) {
            return Err(StoreError::NotFound {
                key: format!("member {id:x}"),
            });
        }
        let mut change = raft::eraftpb::ConfChangeSingle::default();
        change.set_change_type(raft::eraftpb::ConfChangeType::RemoveNode);
        change.node_id = id;
        self.conf_change(vec![change]).await
    }

    async fn conf_change(&self, changes: Vec<raft::eraftpb::ConfChangeSingle>) -> Result<()> {
        let mut change = raft::eraftpb::ConfChangeV2::default();
        change.set_changes(changes.into());
        let (reply, response) = oneshot::channel();
        self.inner
            .inputs
            .send(Input::ConfChange { change, reply })
            .map_err(|_| StoreError::Unavailable("the store is shut down".into()))?;
        match response
            .await
            .map_err(|_| StoreError::Unavailable("the store stopped before answering".into()))??
        {
            Applied::ConfChanged => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Creates `key`; fails with `AlreadyExists` if it is live.
    pub async fn create(&self, key: &[u8], value: Vec<u8>) -> Result<KeyValue> {
        check_key(key)?;
        match self
            .propose(Command::Create {
                key: key.to_vec(),
                value,
            })
            .await?
        {
            Applied::Put(kv) => Ok(kv),
            other => Err(unexpected(other)),
        }
    }

    /// Replaces `key`'s value if its `mod_revision` is still `expected_mod_revision`.
    pub async fn update(
        &self,
        key: &[u8],
        value: Vec<u8>,
        expected_mod_revision: i64,
    ) -> Result<KeyValue> {
        check_key(key)?;
        match self
            .propose(Command::Update {
                key: key.to_vec(),
                value,
                expected_mod_revision,
            })
            .await?
        {
            Applied::Put(kv) => Ok(kv),
            other => Err(unexpected(other)),
        }
    }

    /// Deletes `key` (if `expected_mod_revision` is given, only if it still matches).
    /// Returns the deleted version and the revision of the deletion.
    pub async fn delete(
        &self,
        key: &[u8],
        expected_mod_revision: Option<i64>,
    ) -> Result<(KeyValue, i64)> {
        check_key(key)?;
        match self
            .propose(Command::Delete {
                key: key.to_vec(),
                expected_mod_revision,
            })
            .await?
        {
            Applied::Deleted { prev, revision } => Ok((prev, revision)),
            other => Err(unexpected(other)),
        }
    }

    /// Forgets history at and below `revision` (reads and watches from there fail with
    /// `Compacted`). Physical removal happens in the background in small batches.
    pub async fn compact(&self, revision: i64) -> Result<()> {
        match self.propose(Command::Compact { revision }).await? {
            Applied::Compacted => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// A stream of every change to keys starting with `prefix` strictly after
    /// `from_revision`, in revision order.
    pub async fn watch(&self, prefix: &[u8], from_revision: i64) -> Result<WatchStream> {
        let compact = self.compact_revision();
        if from_revision < compact {
            return Err(StoreError::Compacted {
                requested: from_revision,
                compact_revision: compact,
            });
        }
        watch::WatchStream::start(
            self.inner.hub.clone(),
            self.inner.readers.clone(),
            prefix.to_vec(),
            from_revision,
        )
        .await
    }

    /// Writes a consistent point-in-time copy of the store to `dest` (an SQLite file
    /// carrying its raft metadata). `dest` must not exist.
    pub async fn save_snapshot(&self, dest: &Path) -> Result<SnapshotInfo> {
        let dest = dest.to_path_buf();
        let readers = self.inner.readers.clone();
        tokio::task::spawn_blocking(move || {
            readers.with_autocommit(|conn| snapshot::save(conn, &dest))
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("snapshot task failed: {e}")))?
    }

    /// Hands a raft message from another member to this one.
    pub fn receive_raft_message(&self, message: raft::eraftpb::Message) -> Result<()> {
        self.inner
            .inputs
            .send(Input::Step(Box::new(message)))
            .map_err(|_| StoreError::Unavailable("the store is shut down".into()))
    }

    /// Stops accepting writes and waits for background threads (also done when the
    /// last handle is dropped).
    pub fn close(self) {
        drop(self)
    }

    async fn propose(&self, command: Command) -> Result<Applied> {
        if self.inner.shared.stopping.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("the store is shutting down".into()));
        }
        if self.is_removed() || self.incompatible().is_some() {
            return Err(self.stopped_for_good().await);
        }
        let _permit = self
            .inner
            .admission
            .acquire()
            .await
            .map_err(|_| StoreError::Unavailable("the store is shutting down".into()))?;
        let (reply, response) = oneshot::channel();
        self.inner
            .inputs
            .send(Input::Propose {
                command,
                reply: Some(reply),
            })
            .map_err(|_| StoreError::Unavailable("the store is shut down".into()))?;
        response
            .await
            .map_err(|_| StoreError::Unavailable("the store stopped before answering".into()))?
    }

    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> Result<T> + Send + 'static,
    {
        let readers = self.inner.readers.clone();
        tokio::task::spawn_blocking(move || readers.with(f))
            .await
            .map_err(|e| StoreError::Unavailable(format!("read task failed: {e}")))?
    }
}

/// A fresh member id: random, unused, never 0 or the genesis member's.
fn new_member_id(name: &str, members: &[Member]) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    loop {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write(name.as_bytes());
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        let id = hasher.finish();
        if id > db::GENESIS_MEMBER_ID && !members.iter().any(|m| m.id == id) {
            return id;
        }
    }
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(StoreError::InvalidArgument("empty key".into()));
    }
    Ok(())
}

fn unexpected(applied: Applied) -> StoreError {
    StoreError::Unavailable(format!(
        "internal error: unexpected apply result {applied:?}"
    ))
}

/// Takes an exclusive lock on the store directory so two processes never share it.
///
/// A held lock is retried for a moment before it counts as another process's: the lock
/// belongs to an open file description, and a child process forked by another thread
/// shares it between its fork and its exec (the descriptor is close-on-exec), so a store
/// reopened in the same process right after it closed can find it briefly held.
fn lock_directory(dir: &Path) -> Result<std::fs::File> {
    const PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);
    let path = dir.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| StoreError::io(format!("opening {}", path.display()), e))?;
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < PATIENCE => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Unavailable(format!(
                    "{} is in use by another k3rs process; stop it first",
                    dir.display()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(StoreError::io(format!("locking {}", path.display()), e));
            }
        }
    }
}
