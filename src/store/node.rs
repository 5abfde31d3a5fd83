//! The raft driver: one thread that owns the raft node and the writer connection.
//!
//! Each turn it takes every queued proposal (group commit), lets raft turn them into
//! one `Ready`, and handles that Ready in ONE SQLite transaction: append the new log
//! entries, record the hard state, apply every committed entry to the key-value
//! tables, record the applied index — then a single commit. A group of one applies
//! what it appends in that same transaction, so it writes no log rows at all (see
//! `process_ready`). The commit does not wait for the disk: the batch goes to the
//! durability threads ([`super::durability`]), which fsync the WAL and only then
//! answers proposers and publishes watch events, so nothing is acknowledged or
//! observed before it is durable, while this thread already builds the next batch.
//! A member of a bigger group waits for the sync of what it appended before it sends
//! its acknowledgements (raft needs its log durable first), but publishes and answers
//! committed entries at once: a commit there means a majority's disks hold the entry
//! already. If a transaction fails (a full disk, an I/O
//! error), it is rolled back, every waiting proposer gets the error, and raft is
//! rebuilt from what is on disk, so memory never runs ahead of disk.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, ConfChangeV2, Entry, EntryType, Snapshot};
use raft::{ProgressState, RawNode, StateRole};
use tokio::sync::oneshot;

use super::codec::{Applied, Command};
use super::db::{self, ApplyResult, Database, PersistentState};
use super::durability::{self, CommittedBatch, Job};
use super::error::{Result, StoreError};
use super::log_store::LogStore;
use super::transport::Transport;
use super::watch::WatchHub;
use super::{Input, Member, MemberRole, SharedState, StoreConfig};

/// Raft's clock: the heartbeat interval and the election timeout (randomized by raft-rs
/// in `[timeout, 2 × timeout)`). etcd's defaults, 100 ms and 1000 ms, so a dead leader is
/// replaced within 1–2 s; k3s runs etcd at 500/5000 ms. Settable with
/// `--etcd-arg heartbeat-interval=<ms>` and `election-timeout=<ms>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaftTiming {
    pub heartbeat_interval: Duration,
    pub election_timeout: Duration,
    /// A learner whose replication has not moved for this long is removed from the group
    /// by the leader (k3s's `learnerMaxStallTime`, 5 minutes): a half-joined server must
    /// not block the next join for ever.
    pub learner_max_stall: Duration,
}

impl Default for RaftTiming {
    fn default() -> Self {
        RaftTiming {
            heartbeat_interval: Duration::from_millis(100),
            election_timeout: Duration::from_millis(1000),
            learner_max_stall: Duration::from_secs(300),
        }
    }
}

impl RaftTiming {
    /// The tick length and the election timeout in ticks (one heartbeat per tick).
    fn ticks(&self) -> (Duration, usize) {
        let tick = self.heartbeat_interval.max(Duration::from_millis(10));
        let election = (self.election_timeout.as_millis() / tick.as_millis().max(1)) as usize;
        (tick, election.max(2))
    }
}

/// How often a leader looks for learners ready to be promoted, and a member re-asks for
/// an unanswered ReadIndex (raft-rs drops one silently when there is no leader, or when
/// a new leader has not committed an entry of its term yet).
const HOUSEKEEPING_EVERY: Duration = Duration::from_millis(200);
/// A stopping leader waits at most this long for another voter to take over.
const LEADERSHIP_HANDOVER_WAIT: Duration = Duration::from_secs(2);
/// A learner is promoted once it is this close to the leader's log and replicating.
const PROMOTION_LAG_ENTRIES: u64 = 100;
/// Physical compaction runs at least this often while there is a backlog, even under
/// continuous write load.
const COMPACTION_PACE: Duration = Duration::from_millis(10);

type Reply = oneshot::Sender<Result<Applied>>;
type ReadReply = oneshot::Sender<Result<i64>>;

/// What a caller asked raft to replicate.
enum Proposal {
    Command(Command),
    ConfChange(ConfChangeV2),
    /// Entry bytes as given (tests: entries of another format).
    #[cfg(test)]
    Raw(Vec<u8>),
}

/// A proposal in raft's hands, waiting to be applied here.
struct Pending {
    reply: Reply,
    since: Instant,
}

/// A proposal waiting for a leader to be known.
struct Waiting {
    proposal: Proposal,
    reply: Option<Reply>,
    since: Instant,
}

/// Linearizable reads sharing one ReadIndex request.
struct PendingRead {
    replies: Vec<ReadReply>,
    since: Instant,
    asked: Instant,
}

pub(crate) struct Driver {
    config: StoreConfig,
    db: Database,
    raw: Option<RawNode<LogStore>>,
    state: PersistentState,
    inputs: mpsc::Receiver<Input>,
    transport: Box<dyn Transport>,
    hub: Arc<WatchHub>,
    shared: Arc<SharedState>,
    pending: HashMap<u64, Pending>,
    /// Proposals made while no leader was known: proposed once one is, or failed after
    /// the request timeout.
    waiting_for_leader: Vec<Waiting>,
    /// Read requests that arrived in the current turn (one ReadIndex for all of them).
    new_reads: Vec<ReadReply>,
    /// ReadIndex requests raft has not answered yet, by context.
    reads: HashMap<u64, PendingRead>,
    next_read: u64,
    /// Reads raft answered: released once the read index is applied and published.
    answered_reads: Vec<(u64, Vec<ReadReply>)>,
    /// The leader known at the end of the last turn.
    last_leader: u64,
    last_housekeeping: Instant,
    /// Stopping as leader: leadership is being handed to another voter; the caller is
    /// answered once it has moved (true) or at the deadline (false).
    handing_over: Option<(Instant, oneshot::Sender<bool>)>,
    /// A conf change or a member's name/URL was applied: refresh the member list.
    membership_changed: bool,
    /// Raft's tick (see `RaftTiming`).
    tick: Duration,
    /// When the oldest unanswered heartbeat to each peer left (for the round-trip time).
    heartbeats_out: HashMap<u64, Instant>,
    /// Distinguishes this process's proposals from entries proposed before a restart.
    epoch: u64,
    /// Whether the raft_log table mirrors the in-memory log. A group of one leaves it
    /// empty while every entry is applied in the transaction that appends it (see
    /// `process_ready`); the persisted log then starts at the applied entry.
    log_rows_on_disk: bool,
    next_seq: u64,
    logger: slog::Logger,
    revision_samples: VecDeque<(Instant, i64)>,
    last_tick: Instant,
    last_sample: Instant,
    last_compaction_check: Instant,
    last_compaction_batch: Instant,
    /// Committed batches on their way to the durability thread (None before `run`
    /// starts it and after it is stopped).
    durable: Option<mpsc::Sender<Job>>,
    /// Jobs were handed to the durability threads since the last barrier: anything
    /// this thread publishes itself must wait for them, to keep publishing in order.
    handed_over: bool,
    /// The WAL, for a member that syncs in this thread (see `process_ready`).
    wal: Option<std::fs::File>,
    /// On the leader: each learner's matched index and when it last moved, to remove a
    /// learner that stopped catching up (see `RaftTiming::learner_max_stall`).
    learner_progress: HashMap<u64, (u64, Instant)>,
}

impl Driver {
    pub fn start(
        config: StoreConfig,
        db: Database,
        inputs: mpsc::Receiver<Input>,
        transport: Box<dyn Transport>,
        hub: Arc<WatchHub>,
        shared: Arc<SharedState>,
    ) -> Driver {
        let now = Instant::now();
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ ((std::process::id() as u64) << 32);
        let (tick, _) = config.timing.ticks();
        Driver {
            config,
            db,
            raw: None,
            state: PersistentState::default(),
            inputs,
            transport,
            hub,
            shared,
            pending: HashMap::new(),
            waiting_for_leader: Vec::new(),
            new_reads: Vec::new(),
            reads: HashMap::new(),
            next_read: 1,
            answered_reads: Vec::new(),
            last_leader: 0,
            last_housekeeping: now,
            handing_over: None,
            membership_changed: true,
            tick,
            heartbeats_out: HashMap::new(),
            epoch,
            log_rows_on_disk: true,
            next_seq: 1,
            logger: slog::Logger::root(TracingDrain, slog::o!()),
            revision_samples: VecDeque::new(),
            last_tick: now,
            last_sample: now,
            last_compaction_check: now,
            last_compaction_batch: now,
            durable: None,
            handed_over: false,
            wal: None,
            learner_progress: HashMap::new(),
        }
    }

    /// Runs until shutdown. Reports on `started` once raft is loaded and, for a
    /// one-member group, leading.
    pub fn run(mut self, started: mpsc::Sender<Result<()>>) {
        let (durable, batches) = mpsc::channel();
        let lanes = Arc::new(durability::Lanes::new(batches));
        let mut sync_threads = Vec::new();
        for n in 0..durability::WORKERS {
            let (lanes, wal, hub, shared) = (
                lanes.clone(),
                db::wal_path(&self.db.path),
                self.hub.clone(),
                self.shared.clone(),
            );
            let spawned = std::thread::Builder::new()
                .name(format!("store-sync-{n}"))
                .spawn(move || durability::run(lanes, wal, hub, shared));
            match spawned {
                Ok(thread) => sync_threads.push(thread),
                Err(e) => {
                    let _ = started.send(Err(StoreError::io("starting the store sync threads", e)));
                    self.shared.stopping.store(true, Ordering::SeqCst);
                    return;
                }
            }
        }
        self.durable = Some(durable);
        match self.boot() {
            Ok(()) => {
                let _ = started.send(Ok(()));
                self.main_loop();
            }
            Err(e) => {
                let _ = started.send(Err(e));
            }
        }
        // Closing the channel lets the threads finish (sync and answer) what is queued.
        self.durable = None;
        for thread in sync_threads {
            let _ = thread.join();
        }
        self.fail_everything_waiting("the store is shutting down");
        self.shared.is_leader.store(false, Ordering::SeqCst);
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.hub.close_all();
    }

    fn boot(&mut self) -> Result<()> {
        self.load_raft()?;
        self.hub.set_revision(self.state.current_revision);
        self.record_sample(Instant::now());
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.is_single_member() && !self.is_leader() {
            if Instant::now() > deadline {
                return Err(StoreError::Unavailable(
                    "this member did not become leader of its one-member group".into(),
                ));
            }
            self.process_ready()?;
            if !self.is_leader() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    }

    /// Builds the raft node from what is on disk.
    fn load_raft(&mut self) -> Result<()> {
        self.raw = None;
        let state = self.db.load_state()?;
        let entries = self.db.load_entries()?;
        let log = LogStore::new(
            state.hard_state.clone(),
            state.conf_state.clone(),
            state.log_start_index,
            state.log_start_term,
            entries,
        );
        let (_, election_tick) = self.config.timing.ticks();
        let config = raft::Config {
            id: state.node_id,
            election_tick,
            heartbeat_tick: 1,
            applied: state.applied_index,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        let mut raw = RawNode::new(&config, log, &self.logger)
            .map_err(|e| StoreError::Unavailable(format!("starting raft: {e}")))?;
        if log_is_private(&state.conf_state, state.node_id) {
            // Nobody else can win: skip the election timeout.
            raw.campaign()
                .map_err(|e| StoreError::Unavailable(format!("starting raft election: {e}")))?;
        }
        self.shared
            .current_revision
            .store(state.current_revision, Ordering::SeqCst);
        self.shared
            .compact_revision
            .store(state.compact_revision, Ordering::SeqCst);
        self.shared.own_id.store(state.node_id, Ordering::SeqCst);
        self.state = state;
        self.raw = Some(raw);
        // Freshly loaded, memory holds exactly the rows on disk.
        self.log_rows_on_disk = true;
        self.membership_changed = true;
        self.refresh_members();
        Ok(())
    }

    /// Publishes the member list (conf state plus the names and peer URLs of the members
    /// table) and hands the peers' addresses to the transport.
    fn refresh_members(&mut self) {
        if !std::mem::take(&mut self.membership_changed) {
            return;
        }
        let rows = match db::load_members(&self.db.conn) {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "reading the members table");
                self.membership_changed = true;
                return;
            }
        };
        match db::load_cluster_id(&self.db.conn) {
            Ok(id) => {
                *self
                    .shared
                    .cluster_id
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = id;
                self.transport.set_cluster_id(id);
            }
            Err(e) => tracing::warn!(error = %e, "reading the cluster id"),
        }
        match db::load_removed_members(&self.db.conn) {
            Ok(removed) => {
                if removed.contains(&self.state.node_id) {
                    self.mark_removed("its removal from the group was applied here");
                }
                *self
                    .shared
                    .removed_ids
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = removed;
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the removed members");
                self.membership_changed = true;
            }
        }
        let conf = &self.state.conf_state;
        let mut ids: Vec<(u64, MemberRole)> = Vec::new();
        for id in conf.voters.iter().chain(&conf.voters_outgoing) {
            if !ids.iter().any(|(known, _)| known == id) {
                ids.push((*id, MemberRole::Voter));
            }
        }
        for id in conf.learners.iter().chain(&conf.learners_next) {
            if !ids.iter().any(|(known, _)| known == id) {
                ids.push((*id, MemberRole::Learner));
            }
        }
        let members: Vec<Member> = ids
            .into_iter()
            .map(|(id, role)| {
                let (name, peer_url) = rows
                    .iter()
                    .find(|(row, _, _)| *row == id)
                    .map(|(_, name, url)| (name.clone(), url.clone()))
                    .unwrap_or_default();
                Member {
                    id,
                    name,
                    peer_url,
                    role,
                }
            })
            .collect();
        let peers: Vec<(u64, std::net::SocketAddr)> = members
            .iter()
            .filter(|m| m.id != self.state.node_id && !m.peer_url.is_empty())
            .filter_map(|m| match peer_address(&m.peer_url) {
                Some(address) => Some((m.id, address)),
                None => {
                    tracing::warn!(member = %format!("{:x}", m.id), url = %m.peer_url, "skipping a member whose peer URL is not https://<ip>:<port>");
                    None
                }
            })
            .collect();
        // A joining member knows nobody until the leader's snapshot arrives: keep the
        // peers it was started with until then.
        if !peers.is_empty() {
            self.transport.set_peers(&peers);
        }
        self.shared.single_member.store(
            log_is_private(&self.state.conf_state, self.state.node_id),
            Ordering::SeqCst,
        );
        let mut published = self
            .shared
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if *published != members {
            let describe = |role: MemberRole| {
                members
                    .iter()
                    .filter(|m| m.role == role)
                    .map(|m| format!("{}({:x})", m.name, m.id))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            tracing::info!(
                voters = %describe(MemberRole::Voter),
                learners = %describe(MemberRole::Learner),
                "raft membership"
            );
            *published = members;
        }
    }

    /// Records that this member is no longer part of the group: every request is then
    /// refused and the server stops (it must not serve reads that no longer advance).
    fn mark_removed(&self, why: &str) {
        // Remembered on disk too (a local fact, not a replicated write): a restart with
        // this data is refused at once instead of after asking the others again.
        if let Err(e) = db::record_own_removal(&self.db.conn, self.state.node_id) {
            tracing::warn!(error = %e, "recording this member's removal");
        }
        if !self.shared.removed.swap(true, Ordering::SeqCst) {
            tracing::error!(
                member = %format!("{:x}", self.state.node_id),
                why,
                "this member was removed from the raft group"
            );
            self.shared.stopped_notify.notify_waiters();
        }
    }

    /// Records that the group writes a format this build cannot read; the server stops
    /// (after the reload below, which meets the same entry again and again).
    fn halt_incompatible(&self, detail: &str) {
        let mut incompatible = self
            .shared
            .incompatible
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if incompatible.is_none() {
            tracing::error!(
                detail,
                "the cluster wrote an entry this k3rs cannot read; stopping this member"
            );
            *incompatible = Some(detail.to_string());
            self.shared.stopped_notify.notify_waiters();
        }
    }

    fn is_single_member(&self) -> bool {
        self.state.conf_state.voters == [self.state.node_id]
    }

    fn is_leader(&self) -> bool {
        self.raw
            .as_ref()
            .is_some_and(|raw| raw.raft.state == StateRole::Leader)
    }

    fn main_loop(&mut self) {
        loop {
            let wait = self.next_wakeup();
            let mut shutdown = false;
            match self.inputs.recv_timeout(wait) {
                Ok(input) => {
                    shutdown |= self.handle(input);
                    // Group commit: everything already queued joins this Ready.
                    let mut taken = 1;
                    while taken < self.config.max_batch && !shutdown {
                        match self.inputs.try_recv() {
                            Ok(input) => {
                                shutdown |= self.handle(input);
                                taken += 1;
                            }
                            Err(_) => break,
                        }
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => shutdown = true,
            }
            if self.raw.is_none() {
                self.retry_load();
            }
            self.follow_leader();
            self.ask_read_index();
            if self.last_tick.elapsed() >= self.tick {
                self.last_tick = Instant::now();
                if let Some(raw) = self.raw.as_mut() {
                    raw.tick();
                }
            }
            if let Err(e) = self.process_ready() {
                self.recover(e);
            }
            self.release_reads();
            self.follow_leader();
            if self.last_housekeeping.elapsed() >= HOUSEKEEPING_EVERY {
                self.last_housekeeping = Instant::now();
                self.housekeeping();
            }
            self.refresh_members();
            if let Err(e) = self.background() {
                self.recover(e);
            }
            self.shared
                .is_leader
                .store(self.is_leader(), Ordering::SeqCst);
            if let Some((until, _)) = &self.handing_over
                && (!self.is_leader() || Instant::now() >= *until)
                && let Some((_, reply)) = self.handing_over.take()
            {
                let moved = !self.is_leader();
                if !moved {
                    tracing::warn!("no other member took raft leadership over in time");
                }
                let _ = reply.send(moved);
            }
            if shutdown {
                break;
            }
        }
    }

    /// On a leader that is stopping, asks the most caught-up other voter to take over
    /// (raft's TimeoutNow, as etcd does on a clean stop): the group then goes on at
    /// once instead of after an election timeout. Says whether a handover started.
    fn hand_over_leadership(&mut self) -> bool {
        let Some(raw) = self.raw.as_mut() else {
            return false;
        };
        if raw.raft.state != StateRole::Leader {
            return false;
        }
        let me = self.state.node_id;
        let target = self
            .state
            .conf_state
            .voters
            .iter()
            .copied()
            .filter(|id| *id != me)
            .max_by_key(|id| raw.raft.prs().get(*id).map_or(0, |p| p.matched));
        let Some(target) = target else {
            return false;
        };
        tracing::info!(to = %format!("{target:x}"), "stopping: handing raft leadership over");
        raw.transfer_leader(target);
        true
    }

    fn next_wakeup(&self) -> Duration {
        if self.handing_over.is_some() {
            return Duration::from_millis(5);
        }
        let tick = self.tick.saturating_sub(self.last_tick.elapsed());
        if self.state.compact_cursor < self.state.compact_revision {
            tick.min(COMPACTION_PACE)
        } else {
            tick
        }
    }

    /// Handles one input; returns true on shutdown.
    fn handle(&mut self, input: Input) -> bool {
        match input {
            Input::Propose { command, reply } => {
                self.propose(Proposal::Command(command), reply, Instant::now())
            }
            #[cfg(test)]
            Input::ProposeRaw { data, reply } => {
                self.propose(Proposal::Raw(data), Some(reply), Instant::now())
            }
            Input::ConfChange { change, reply } => {
                self.propose(Proposal::ConfChange(change), Some(reply), Instant::now())
            }
            Input::ReadIndex { reply } => self.new_reads.push(reply),
            Input::Step(message) => {
                if message.get_msg_type() == raft::eraftpb::MessageType::MsgHeartbeatResponse
                    && let Some(sent) = self.heartbeats_out.remove(&message.from)
                    && let Ok(mut rtt) = self.shared.peer_rtt.lock()
                {
                    rtt.entry(message.from).or_default().observe(sent.elapsed());
                }
                if let Some(raw) = self.raw.as_mut() {
                    // A membership change a follower forwarded gets the leader's safety
                    // check too (raft-rs would take it unchecked).
                    if message.get_msg_type() == raft::eraftpb::MessageType::MsgPropose
                        && raw.raft.state == StateRole::Leader
                        && let Some(refusal) = forwarded_conf_change_refusal(raw, &message)
                    {
                        tracing::warn!(from = %format!("{:x}", message.from), reason = %refusal, "refused a membership change forwarded by a member");
                        return false;
                    }
                    if let Err(e) = raw.step(*message) {
                        tracing::debug!(error = %e, "raft message ignored");
                    }
                }
            }
            Input::Unreachable { peer, snapshot } => {
                if let Some(raw) = self.raw.as_mut() {
                    raw.report_unreachable(peer);
                    if snapshot {
                        raw.report_snapshot(peer, raft::SnapshotStatus::Failure);
                    }
                }
            }
            Input::SnapshotSent { peer } => {
                if let Some(raw) = self.raw.as_mut() {
                    raw.report_snapshot(peer, raft::SnapshotStatus::Finish);
                }
            }
            Input::OtherCluster { told_by } => {
                let dir = self
                    .db
                    .path
                    .parent()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default();
                self.halt_incompatible(&format!(
                    "it holds the data of a cluster that member {told_by:x} no longer belongs \
                     to: the cluster was reset or restored from a snapshot without this server \
                     (a restored cluster has a new cluster id). To rejoin: stop k3rs, delete \
                     {dir}, and start it again with --server https://<a server>:6443 and the \
                     cluster token"
                ));
            }
            Input::RemovedFromGroup { told_by } => {
                self.mark_removed(&format!("member {told_by:x} answered that it was removed"));
            }
            Input::HandOverLeadership { reply } => {
                if self.handing_over.is_none() && self.hand_over_leadership() {
                    self.handing_over = Some((Instant::now() + LEADERSHIP_HANDOVER_WAIT, reply));
                } else {
                    let _ = reply.send(!self.is_leader());
                }
            }
            Input::Shutdown => return true,
        }
        false
    }

    /// Hands a proposal to raft: on the leader it is appended, on a follower raft
    /// forwards it to the leader; either way this member answers once it has applied
    /// the entry itself (its context names this process and the proposal). Without a
    /// known leader the proposal waits for one, up to the request timeout.
    fn propose(&mut self, proposal: Proposal, reply: Option<Reply>, since: Instant) {
        let Some(raw) = self.raw.as_mut() else {
            fail(
                &self.shared,
                reply,
                "this member is recovering from a failed write; retry".into(),
            );
            return;
        };
        if raw.raft.leader_id == raft::INVALID_ID {
            self.waiting_for_leader.push(Waiting {
                proposal,
                reply,
                since,
            });
            return;
        }
        let leader = raw.raft.state == StateRole::Leader;
        if let Proposal::ConfChange(change) = &proposal
            && leader
            && let Err(refusal) = check_conf_change(raw, change)
        {
            fail(&self.shared, reply, refusal);
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut context = Vec::with_capacity(16);
        context.extend_from_slice(&self.epoch.to_le_bytes());
        context.extend_from_slice(&seq.to_le_bytes());
        let proposed = match &proposal {
            Proposal::Command(command) => raw.propose(context, command.encode()),
            #[cfg(test)]
            Proposal::Raw(data) => raw.propose(context, data.clone()),
            Proposal::ConfChange(change) => {
                let proposed = raw.propose_conf_change(context, change.clone());
                // raft-rs turns a conf change it will not take into an empty entry and
                // still says Ok: the change is ours only if it is the pending one now.
                if proposed.is_ok()
                    && leader
                    && raw.raft.pending_conf_index != raw.raft.raft_log.last_index()
                {
                    fail(
                        &self.shared,
                        reply,
                        "raft refused the membership change (another change is still in progress); retry".into(),
                    );
                    return;
                }
                if proposed.is_ok() {
                    tracing::info!(change = ?change.get_changes(), "proposed a raft membership change");
                }
                proposed
            }
        };
        match proposed {
            Ok(()) => {
                if let Some(reply) = reply {
                    self.pending.insert(seq, Pending { reply, since });
                }
            }
            // A follower that lost its leader meanwhile (an election started): wait for
            // the next one.
            Err(raft::Error::ProposalDropped) if !leader => {
                self.waiting_for_leader.push(Waiting {
                    proposal,
                    reply,
                    since,
                });
            }
            Err(e) => fail(
                &self.shared,
                reply,
                format!("raft refused the proposal: {e}"),
            ),
        }
    }

    /// Starts one ReadIndex request for the reads that arrived this turn.
    fn ask_read_index(&mut self) {
        if self.new_reads.is_empty() {
            return;
        }
        let replies = std::mem::take(&mut self.new_reads);
        let Some(raw) = self.raw.as_mut() else {
            for reply in replies {
                let _ = reply.send(Err(StoreError::Unavailable(
                    "this member is recovering from a failed write; retry".into(),
                )));
            }
            return;
        };
        let context = self.next_read;
        self.next_read += 1;
        raw.read_index(context.to_le_bytes().to_vec());
        let now = Instant::now();
        self.reads.insert(
            context,
            PendingRead {
                replies,
                since: now,
                asked: now,
            },
        );
    }

    /// Answers the reads whose read index is applied: through the durability thread, so
    /// each answer comes after the batch holding that index is published.
    fn release_reads(&mut self) {
        if self.answered_reads.is_empty() {
            return;
        }
        let applied = self.state.applied_index;
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.answered_reads)
            .into_iter()
            .partition(|(index, _)| *index <= applied);
        self.answered_reads = waiting;
        let replies: Vec<ReadReply> = ready.into_iter().flat_map(|(_, r)| r).collect();
        if replies.is_empty() {
            return;
        }
        let job = Job::Release(replies);
        let conf_state = self.raw.as_ref().map(|raw| &raw.store().conf_state);
        if conf_state.is_some_and(|conf| commits_need_another_member(conf, self.state.node_id))
            && !self.handed_over
        {
            // What these reads wait for is published already (see `process_ready`).
            durability::publish_now(vec![job], &self.hub, &self.shared);
        } else {
            hand_over(&self.durable, &self.db.path, &self.hub, &self.shared, job);
            self.handed_over = true;
        }
    }

    /// Notices leader changes (logged, counted, published) and proposes what waited for
    /// a leader once one is known.
    fn follow_leader(&mut self) {
        let Some(raw) = self.raw.as_ref() else {
            return;
        };
        let leader = raw.raft.leader_id;
        if leader != self.last_leader {
            let term = raw.raft.term;
            self.last_leader = leader;
            self.shared.leader_id.store(leader, Ordering::SeqCst);
            if leader == raft::INVALID_ID {
                tracing::info!(term, "raft leader lost; waiting for an election");
            } else {
                self.shared.leader_changes.fetch_add(1, Ordering::Relaxed);
                self.fail_lost_proposals();
                let name = self
                    .shared
                    .members
                    .lock()
                    .ok()
                    .and_then(|m| m.iter().find(|m| m.id == leader).map(|m| m.name.clone()))
                    .unwrap_or_default();
                tracing::info!(
                    term,
                    leader = %format!("{leader:x}"),
                    leader_name = %name,
                    this_member = leader == self.state.node_id,
                    "raft leader elected"
                );
            }
        }
        if leader != raft::INVALID_ID && !self.waiting_for_leader.is_empty() {
            for waiting in std::mem::take(&mut self.waiting_for_leader) {
                self.propose(waiting.proposal, waiting.reply, waiting.since);
            }
        }
    }

    /// After a leader change: a proposal this member forwarded that is not in its own
    /// log went to a leader that is gone, and nothing will ever apply it here. Fail it
    /// now ("may or may not have been applied", as etcd's "leader changed") so its
    /// caller can retry at once instead of waiting out the request timeout. Proposals
    /// in the log stay: the new leader commits or replaces them.
    fn fail_lost_proposals(&mut self) {
        let Some(raw) = self.raw.as_ref() else {
            return;
        };
        if self.pending.is_empty() {
            return;
        }
        let log = &raw.raft.raft_log;
        let mut in_log = std::collections::HashSet::new();
        if log.last_index() > log.applied {
            match log.entries(
                log.applied + 1,
                raft::NO_LIMIT,
                raft::GetEntriesContext::empty(false),
            ) {
                Ok(entries) => {
                    for entry in entries {
                        if let Some(seq) = local_seq(&entry.context, self.epoch) {
                            in_log.insert(seq);
                        }
                    }
                }
                // The log cannot be read here: keep waiting rather than guess.
                Err(_) => return,
            }
        }
        let lost: Vec<u64> = self
            .pending
            .keys()
            .filter(|seq| !in_log.contains(seq))
            .copied()
            .collect();
        for seq in lost {
            if let Some(pending) = self.pending.remove(&seq) {
                fail(
                    &self.shared,
                    Some(pending.reply),
                    "the raft leader changed while the write was in flight; it may or may not \
                     have been applied"
                        .into(),
                );
            }
        }
    }

    /// Every `HOUSEKEEPING_EVERY`: fail what waited longer than the request timeout,
    /// re-ask unanswered ReadIndex requests, promote caught-up learners.
    fn housekeeping(&mut self) {
        let timeout = self.config.request_timeout;
        let now = Instant::now();
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| now.duration_since(p.since) >= timeout)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in expired {
            if let Some(pending) = self.pending.remove(&seq) {
                fail(
                    &self.shared,
                    Some(pending.reply),
                    format!(
                        "request timed out after {timeout:?} waiting for the raft group to commit it \
                         (leader changed or quorum lost); it may or may not have been applied"
                    ),
                );
            }
        }
        let (expired, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting_for_leader)
            .into_iter()
            .partition(|w| now.duration_since(w.since) >= timeout);
        self.waiting_for_leader = waiting;
        for waiting in expired {
            fail(&self.shared, waiting.reply, no_quorum(timeout));
        }
        let expired: Vec<u64> = self
            .reads
            .iter()
            .filter(|(_, r)| now.duration_since(r.since) >= timeout)
            .map(|(context, _)| *context)
            .collect();
        for context in expired {
            if let Some(read) = self.reads.remove(&context) {
                self.shared.proposals_failed.fetch_add(1, Ordering::Relaxed);
                for reply in read.replies {
                    let _ = reply.send(Err(StoreError::Unavailable(no_quorum(timeout))));
                }
            }
        }
        if let Some(raw) = self.raw.as_mut() {
            let reask = HOUSEKEEPING_EVERY.max(self.tick * 2);
            for (context, read) in self.reads.iter_mut() {
                if now.duration_since(read.asked) >= reask {
                    read.asked = now;
                    raw.read_index(context.to_le_bytes().to_vec());
                }
            }
        }
        self.promote_learners();
    }

    /// On the leader: proposes a caught-up learner's promotion to voter, or the removal
    /// of a learner that stalled (one change at a time; a refused or lost proposal is
    /// simply made again on a later turn).
    fn promote_learners(&mut self) {
        let Some(raw) = self.raw.as_mut() else {
            return;
        };
        if raw.raft.state != StateRole::Leader {
            // A new leader starts its own clock for every learner.
            self.learner_progress.clear();
            return;
        }
        let now = Instant::now();
        let learners = &self.state.conf_state.learners;
        self.learner_progress.retain(|id, _| learners.contains(id));
        for id in learners {
            let matched = raw.raft.prs().get(*id).map_or(0, |pr| pr.matched);
            let progress = self.learner_progress.entry(*id).or_insert((matched, now));
            if matched > progress.0 {
                *progress = (matched, now);
            }
        }
        if raw.raft.pending_conf_index > raw.raft.raft_log.applied {
            return;
        }
        let last = raw.raft.raft_log.last_index();
        let caught_up = |id: u64| {
            raw.raft.prs().get(id).is_some_and(|pr| {
                pr.state == ProgressState::Replicate
                    && pr.recent_active
                    && pr.matched + PROMOTION_LAG_ENTRIES >= last
            })
        };
        let ready = self
            .state
            .conf_state
            .learners
            .iter()
            .copied()
            .find(|id| caught_up(*id));
        let Some(id) = ready else {
            // No learner is ready, so every one is behind or unreachable.
            self.remove_stalled_learner(now);
            return;
        };
        let mut single = raft::eraftpb::ConfChangeSingle::default();
        single.set_change_type(ConfChangeType::AddNode);
        single.node_id = id;
        let mut change = ConfChangeV2::default();
        change.set_changes(vec![single].into());
        tracing::info!(member = %format!("{id:x}"), "learner caught up; promoting it to voter");
        self.propose(Proposal::ConfChange(change), None, Instant::now());
    }

    /// Proposes removing a learner whose replication has not moved for
    /// `learner_max_stall` (called when none is ready for promotion: a down or stuck
    /// joiner).
    fn remove_stalled_learner(&mut self, now: Instant) {
        let Some(raw) = self.raw.as_ref() else {
            return;
        };
        let last = raw.raft.raft_log.last_index();
        let stall = self.config.timing.learner_max_stall;
        let stalled = self
            .learner_progress
            .iter()
            .find(|(_, (_, since))| now.duration_since(*since) >= stall);
        let Some((&id, &(matched, since))) = stalled else {
            return;
        };
        let mut single = raft::eraftpb::ConfChangeSingle::default();
        single.set_change_type(ConfChangeType::RemoveNode);
        single.node_id = id;
        let mut change = ConfChangeV2::default();
        change.set_changes(vec![single].into());
        tracing::warn!(
            member = %format!("{id:x}"),
            matched,
            last,
            stalled_s = now.duration_since(since).as_secs(),
            "learner made no progress; removing it from the group (it may join again)"
        );
        // Measured from now again, should the removal be refused or lost.
        self.learner_progress.insert(id, (matched, now));
        self.propose(Proposal::ConfChange(change), None, now);
    }

    /// Fails every proposal and read still waiting (shutdown).
    fn fail_everything_waiting(&mut self, why: &str) {
        for (_, pending) in self.pending.drain() {
            let _ = pending
                .reply
                .send(Err(StoreError::Unavailable(why.to_string())));
        }
        for waiting in self.waiting_for_leader.drain(..) {
            if let Some(reply) = waiting.reply {
                let _ = reply.send(Err(StoreError::Unavailable(why.to_string())));
            }
        }
        let reads = self
            .new_reads
            .drain(..)
            .chain(self.reads.drain().flat_map(|(_, r)| r.replies))
            .chain(self.answered_reads.drain(..).flat_map(|(_, r)| r));
        for reply in reads.collect::<Vec<_>>() {
            let _ = reply.send(Err(StoreError::Unavailable(why.to_string())));
        }
    }

    /// Handles one raft Ready in one transaction; see the module comment.
    fn process_ready(&mut self) -> Result<()> {
        let Driver {
            db,
            raw,
            state,
            transport,
            hub,
            shared,
            pending,
            epoch,
            config,
            log_rows_on_disk,
            durable,
            reads,
            answered_reads,
            membership_changed,
            heartbeats_out,
            handed_over,
            wal,
            ..
        } = self;
        let Some(raw) = raw.as_mut() else {
            return Ok(());
        };
        if !raw.has_ready() {
            return Ok(());
        }
        let mut ready = raw.ready();
        // Term and vote must be on disk before any message that depends on them goes
        // out; a new commit index need not be.
        let previous_hard_state = raw.store().hard_state.clone();
        let term_or_vote_changed = ready.hs().is_some_and(|hs| {
            hs.term != previous_hard_state.term || hs.vote != previous_hard_state.vote
        });
        // A leader may send appends before persisting them (raft thesis 10.2.1).
        let messages = ready.take_messages();
        let now = Instant::now();
        for message in &messages {
            if message.get_msg_type() == raft::eraftpb::MessageType::MsgHeartbeat {
                // The oldest unanswered one, unless it was lost (a peer that was down).
                let sent = heartbeats_out.entry(message.to).or_insert(now);
                if now.duration_since(*sent) > Duration::from_secs(5) {
                    *sent = now;
                }
            }
        }
        transport.send(messages);
        for read in ready.take_read_states() {
            let Ok(context) = <[u8; 8]>::try_from(read.request_ctx.as_slice()) else {
                continue;
            };
            if let Some(pending) = reads.remove(&u64::from_le_bytes(context)) {
                answered_reads.push((read.index, pending.replies));
            }
        }

        let snapshot = ready.snapshot().clone();
        let incoming = if snapshot.get_metadata().index > 0 {
            Some(db.attach_incoming_snapshot(&snapshot)?)
        } else {
            None
        };

        let path = db.path.clone();
        let sql = |e: rusqlite::Error| db::classify(&path, e, "writing to the store");
        let tx = db::write_transaction(&db.conn).map_err(sql)?;
        let mut results: Vec<(Option<u64>, ApplyResult)> = Vec::new();
        if incoming.is_some() {
            let meta = snapshot.get_metadata();
            tracing::info!(
                index = meta.index,
                term = meta.term,
                "installing a raft snapshot from the leader"
            );
            db::install_incoming_snapshot(&tx, state).map_err(sql)?;
            raw.mut_store()
                .install_snapshot(meta.index, meta.term, meta.get_conf_state().clone());
            *membership_changed = true;
        }
        apply_entries(
            &tx,
            raw,
            state,
            ready.take_committed_entries(),
            *epoch,
            &path,
            &mut ApplyOutput {
                results: &mut results,
                membership_changed,
            },
        )?;
        // Written to the raft_log table after the applies below, once it is known whether
        // anyone could ever read them from there.
        let appended = ready.take_entries();
        raw.mut_store().append(&appended);
        if let Some(hard_state) = ready.hs() {
            raw.mut_store().hard_state = hard_state.clone();
        }
        let persisted_messages = ready.take_persisted_messages();
        let mut light = raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            raw.mut_store().hard_state.commit = commit;
        }
        apply_entries(
            &tx,
            raw,
            state,
            light.take_committed_entries(),
            *epoch,
            &path,
            &mut ApplyOutput {
                results: &mut results,
                membership_changed,
            },
        )?;

        // A group of one commits what it appends in the same Ready, so the entries are
        // applied in this very transaction: their log rows could only ever be deleted
        // unread (no follower needs them, and a restart resumes from the applied state).
        // Skipping them halves what a write puts in the WAL. The in-memory log keeps
        // them regardless, for a member that joins later.
        let alone = log_is_private(&raw.store().conf_state, state.node_id);
        let skip_rows = alone
            && appended
                .last()
                .is_some_and(|last| state.applied_index >= last.index);
        if skip_rows {
            if *log_rows_on_disk {
                db::truncate_log(&tx, state.applied_index).map_err(sql)?;
                *log_rows_on_disk = false;
            }
        } else if *log_rows_on_disk {
            db::append_entries(&tx, &appended).map_err(sql)?;
        } else if !appended.is_empty() || !alone {
            // Rows are needed again (a member joined): the table mirrors the whole
            // in-memory log from here on.
            db::append_entries(&tx, &raw.store().entries).map_err(sql)?;
            *log_rows_on_disk = true;
        }

        // Keep the log short: entries well behind the applied index are only needed
        // by members that lag a lot, and those get a snapshot instead.
        let keep = config.raft_log_keep;
        let log = raw.mut_store();
        if state.applied_index > log.start_index + keep + keep / 4 + 1 {
            let upto = state.applied_index - keep;
            if *log_rows_on_disk {
                db::truncate_log(&tx, upto).map_err(sql)?;
            }
            log.truncate_to(upto);
        }
        state.hard_state = log.hard_state.clone();
        state.conf_state = log.conf_state.clone();
        // Where the log on disk starts: after a restart raft resumes from there.
        (state.log_start_index, state.log_start_term) = if *log_rows_on_disk {
            (log.start_index, log.start_term)
        } else {
            (state.applied_index, state.applied_term)
        };
        db::save_state(&tx, state).map_err(sql)?;
        tx.commit().map_err(sql)?;
        shared.commits.fetch_add(1, Ordering::Relaxed);
        shared
            .applied_commands
            .fetch_add(results.len() as u64, Ordering::Relaxed);
        let replaced = incoming.is_some();
        if replaced {
            db.detach_incoming_snapshot();
        }
        raw.advance_apply();

        // Committed, not yet durable locally. Alone (or as the only voter) this member's
        // disk is the only copy, so the durability thread syncs before it publishes and
        // answers. When a commit needs another member's acknowledgement, each entry
        // applied here is on a majority's disk already: it is published and answered at
        // once (etcd applies without a sync too); a crash before the local sync replays
        // it from the raft log or gets it from the leader again. What must wait for the
        // local sync is what this Ready appended (entries, term, vote, a snapshot): the
        // acknowledgements sent below promise it is on disk.
        let mut events = Vec::new();
        let mut replies = Vec::with_capacity(results.len());
        for (seq, result) in results {
            if let Some(event) = result.event {
                events.push(Arc::new(event));
            }
            if let Some(pending) = seq.and_then(|seq| pending.remove(&seq)) {
                replies.push((pending.reply, result.outcome));
            }
        }
        let batch = Job::Publish(CommittedBatch {
            current_revision: state.current_revision,
            compact_revision: state.compact_revision,
            events,
            replies,
            close_watchers: replaced,
        });
        let conf_state = &raw.store().conf_state;
        let must_sync = replaced || term_or_vote_changed || !appended.is_empty();
        if commits_need_another_member(conf_state, state.node_id) {
            if *handed_over {
                wait_until_durable(durable, &db.path, hub, shared);
                *handed_over = false;
            }
            durability::publish_now(vec![batch], hub, shared);
            if must_sync {
                // In this thread: nothing is queued for the workers, and a hand-off to
                // one costs two wake-ups on a busy machine.
                let _ = durability::sync_in_place(wal, &db::wal_path(&db.path), shared);
            }
        } else {
            hand_over(durable, &db.path, hub, shared, batch);
            *handed_over = true;
            if replaced || !log_is_private(conf_state, state.node_id) {
                wait_until_durable(durable, &db.path, hub, shared);
                *handed_over = false;
            }
        }
        transport.send(persisted_messages);
        transport.send(light.take_messages());
        Ok(())
    }

    /// After a failed transaction: roll back, fail every waiting proposer (none of
    /// their writes is on disk), and rebuild raft from disk.
    fn recover(&mut self, error: StoreError) {
        if let StoreError::Incompatible { detail, .. } = &error {
            self.halt_incompatible(detail);
        }
        tracing::error!(error = %error, "store write failed; nothing from this batch was stored, reloading from disk");
        if !self.db.conn.is_autocommit() {
            let _ = self.db.conn.execute_batch("ROLLBACK");
        }
        // Earlier batches are committed: let them be published before the reload
        // resets the published revisions to what is on disk.
        wait_until_durable(&self.durable, &self.db.path, &self.hub, &self.shared);
        self.handed_over = false;
        self.wal = None;
        self.db.detach_incoming_snapshot();
        let disk_full = error.is_disk_full();
        let message = error.to_string();
        for (_, Pending { reply, .. }) in self.pending.drain() {
            let source: Box<dyn std::error::Error + Send + Sync> = if disk_full {
                Box::new(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    message.clone(),
                ))
            } else {
                message.clone().into()
            };
            let _ = reply.send(Err(StoreError::Io {
                context: format!("write not stored ({})", self.db.path.display()),
                source,
            }));
        }
        self.raw = None;
        self.retry_load();
    }

    fn retry_load(&mut self) {
        if let Err(e) = self.load_raft() {
            tracing::error!(error = %e, "reloading the store from disk failed; retrying");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Periodic work between Readies: revision samples for time-based retention,
    /// automatic compaction, physical compaction in small batches, snapshot requests.
    fn background(&mut self) -> Result<()> {
        let now = Instant::now();
        if now.duration_since(self.last_sample) >= Duration::from_secs(1) {
            self.record_sample(now);
        }
        if now.duration_since(self.last_compaction_check) >= self.config.compaction.interval {
            self.last_compaction_check = now;
            self.auto_compact(now);
        }
        if self.state.compact_cursor < self.state.compact_revision
            && now.duration_since(self.last_compaction_batch) >= COMPACTION_PACE
        {
            self.last_compaction_batch = now;
            self.compaction_step()?;
        }
        if self
            .raw
            .as_ref()
            .is_some_and(|raw| raw.store().snapshot_requested.get())
        {
            let snapshot = self.build_raft_snapshot()?;
            if let Some(raw) = self.raw.as_ref() {
                let log = raw.store();
                log.snapshot_requested.set(false);
                *log.prepared_snapshot.borrow_mut() = Some(snapshot);
            }
        }
        Ok(())
    }

    fn record_sample(&mut self, now: Instant) {
        self.last_sample = now;
        self.revision_samples
            .push_back((now, self.state.current_revision));
        // Keep one sample older than the retention window; drop the rest of the old ones.
        let min_age = self.config.compaction.min_age;
        while self.revision_samples.len() > 1
            && self
                .revision_samples
                .get(1)
                .is_some_and(|(t, _)| now.duration_since(*t) >= min_age)
        {
            self.revision_samples.pop_front();
        }
    }

    /// Moves the compact revision forward, keeping at least `min_revisions` revisions
    /// and everything younger than `min_age`.
    fn auto_compact(&mut self, now: Instant) {
        if !self.is_leader() {
            return;
        }
        let policy = &self.config.compaction;
        let by_count = self.state.current_revision - policy.min_revisions;
        let by_age = self
            .revision_samples
            .iter()
            .rev()
            .find(|(t, _)| now.duration_since(*t) >= policy.min_age)
            .map(|(_, revision)| *revision);
        let Some(by_age) = by_age else { return };
        let target = by_count.min(by_age);
        if target > self.state.compact_revision {
            tracing::debug!(revision = target, "automatic compaction");
            self.propose(
                Proposal::Command(Command::Compact { revision: target }),
                None,
                Instant::now(),
            );
        }
    }

    /// One short transaction of physical compaction.
    fn compaction_step(&mut self) -> Result<()> {
        let started = Instant::now();
        let path = self.db.path.clone();
        let sql = |e: rusqlite::Error| db::classify(&path, e, "compacting the store");
        let tx = db::write_transaction(&self.db.conn).map_err(sql)?;
        db::compact_batch(&tx, &mut self.state, self.config.compaction.batch_rows).map_err(sql)?;
        db::save_state(&tx, &self.state).map_err(sql)?;
        tx.commit().map_err(sql)?;
        self.shared.commits.fetch_add(1, Ordering::Relaxed);
        let took = started.elapsed();
        if took > Duration::from_millis(50) {
            tracing::warn!(?took, "compaction batch was slow");
        }
        Ok(())
    }

    fn build_raft_snapshot(&self) -> Result<Snapshot> {
        let file = self.db.prepare_outgoing_snapshot()?;
        tracing::info!(
            index = self.state.applied_index,
            bytes = file.size,
            "prepared a raft snapshot for a lagging member"
        );
        let mut snapshot = Snapshot {
            data: file.encode().into(),
            ..Default::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = self.state.applied_index;
        meta.term = self.state.applied_term;
        meta.set_conf_state(self.state.conf_state.clone());
        Ok(snapshot)
    }
}

/// Sends `job` to the durability thread, or does its work here if that thread is gone.
fn hand_over(
    durable: &Option<mpsc::Sender<Job>>,
    db_path: &std::path::Path,
    hub: &WatchHub,
    shared: &SharedState,
    job: Job,
) {
    let unsent = match durable {
        Some(durable) => durable.send(job).err().map(|e| e.0),
        None => Some(job),
    };
    if let Some(job) = unsent {
        let wal = db::wal_path(db_path);
        durability::sync_and_publish(vec![job], &wal, hub, shared);
    }
}

/// Returns once every batch handed over so far is durable and published.
fn wait_until_durable(
    durable: &Option<mpsc::Sender<Job>>,
    db_path: &std::path::Path,
    hub: &WatchHub,
    shared: &SharedState,
) {
    let (done, durable_now) = mpsc::channel();
    hand_over(durable, db_path, hub, shared, Job::Barrier(done));
    // An error means the thread is gone, and with it everything it had queued.
    let _ = durable_now.recv();
}

/// Whether committing an entry needs another member's acknowledgement (some voter
/// configuration, the incoming or the outgoing one, is not just this member), so a
/// committed entry is on another member's disk whatever this one's holds.
fn commits_need_another_member(conf_state: &raft::eraftpb::ConfState, node_id: u64) -> bool {
    let needs_another = |voters: &[u64]| !voters.is_empty() && voters != [node_id];
    needs_another(&conf_state.voters) || needs_another(&conf_state.voters_outgoing)
}

/// Whether no other member (voter or learner) could ever ask this one for log entries.
fn log_is_private(conf_state: &raft::eraftpb::ConfState, node_id: u64) -> bool {
    conf_state.voters == [node_id]
        && conf_state.learners.is_empty()
        && conf_state.voters_outgoing.is_empty()
        && conf_state.learners_next.is_empty()
}

/// Where `apply_entries` reports: each entry's outcome (with the local proposal it
/// answers, if any), and whether the member list changed.
struct ApplyOutput<'a> {
    results: &'a mut Vec<(Option<u64>, ApplyResult)>,
    membership_changed: &'a mut bool,
}

/// Applies committed entries in order, skipping any already applied.
fn apply_entries(
    tx: &rusqlite::Transaction<'_>,
    raw: &mut RawNode<LogStore>,
    state: &mut PersistentState,
    entries: Vec<Entry>,
    epoch: u64,
    path: &std::path::Path,
    out: &mut ApplyOutput<'_>,
) -> Result<()> {
    let ApplyOutput {
        results,
        membership_changed,
    } = out;
    let membership_changed: &mut bool = membership_changed;
    let results: &mut Vec<(Option<u64>, ApplyResult)> = results;
    for entry in entries {
        if entry.index <= state.applied_index {
            continue;
        }
        match entry.get_entry_type() {
            EntryType::EntryNormal => {
                if !entry.data.is_empty() {
                    let seq = local_seq(&entry.context, epoch);
                    let result = match Command::decode(&entry.data) {
                        Ok(command) => {
                            *membership_changed |= matches!(command, Command::SetMember { .. });
                            db::apply_command(tx, state, command)
                                .map_err(|e| db::classify(path, e, "applying a write"))?
                        }
                        // Written by a newer build: every member must apply it, so this
                        // one stops here instead of skipping it and diverging.
                        Err(e @ StoreError::Incompatible { .. }) => {
                            return Err(e);
                        }
                        Err(e) => {
                            tracing::error!(index = entry.index, error = %e, "skipping an undecodable raft entry");
                            ApplyResult {
                                outcome: Err(e),
                                event: None,
                            }
                        }
                    };
                    results.push((seq, result));
                }
            }
            EntryType::EntryConfChange | EntryType::EntryConfChangeV2 => {
                let change = if entry.get_entry_type() == EntryType::EntryConfChange {
                    ConfChange::parse_from_bytes(&entry.data).map(|c| {
                        let mut single = raft::eraftpb::ConfChangeSingle::default();
                        single.set_change_type(c.get_change_type());
                        single.node_id = c.node_id;
                        let mut v2 = ConfChangeV2::default();
                        v2.set_changes(vec![single].into());
                        v2
                    })
                } else {
                    ConfChangeV2::parse_from_bytes(&entry.data)
                }
                .map_err(|e| {
                    StoreError::Unavailable(format!("undecodable membership change: {e}"))
                })?;
                let conf_state = raw.apply_conf_change(&change).map_err(|e| {
                    StoreError::Unavailable(format!("applying a membership change: {e}"))
                })?;
                for single in change.get_changes() {
                    if single.get_change_type() == ConfChangeType::RemoveNode {
                        db::delete_member(tx, single.node_id)
                            .map_err(|e| db::classify(path, e, "removing a member"))?;
                    }
                }
                tracing::info!(
                    index = entry.index,
                    voters = ?conf_state.voters,
                    learners = ?conf_state.learners,
                    "raft membership change applied"
                );
                raw.mut_store().conf_state = conf_state;
                state.conf_state = raw.store().conf_state.clone();
                *membership_changed = true;
                if let Some(seq) = local_seq(&entry.context, epoch) {
                    results.push((
                        Some(seq),
                        ApplyResult {
                            outcome: Ok(Applied::ConfChanged),
                            event: None,
                        },
                    ));
                }
            }
        }
        state.applied_index = entry.index;
        state.applied_term = entry.term;
    }
    Ok(())
}

/// Answers `reply` (if any) with an `Unavailable` error and counts the failure.
fn fail(shared: &SharedState, reply: Option<Reply>, why: String) {
    shared.proposals_failed.fetch_add(1, Ordering::Relaxed);
    if let Some(reply) = reply {
        let _ = reply.send(Err(StoreError::Unavailable(why)));
    }
}

fn no_quorum(timeout: Duration) -> String {
    format!(
        "the datastore has no quorum: no raft leader within {timeout:?} \
         (a majority of the servers must be up and reachable)"
    )
}

/// A member's peer URL, `https://<ip>:<port>`, as a socket address.
pub fn peer_address(url: &str) -> Option<std::net::SocketAddr> {
    url.strip_prefix("https://")?
        .trim_end_matches('/')
        .parse()
        .ok()
}

/// On the leader, refuses a membership change that would leave the group without a
/// reachable quorum (etcd's strict reconfiguration check), and a second server joining
/// while one is still a learner.
fn check_conf_change(
    raw: &RawNode<LogStore>,
    change: &ConfChangeV2,
) -> std::result::Result<(), String> {
    if raw.raft.pending_conf_index > raw.raft.raft_log.applied {
        return Err("another membership change is still being applied; retry".into());
    }
    let conf = &raw.store().conf_state;
    let mut voters: Vec<u64> = conf.voters.clone();
    for single in change.get_changes() {
        let id = single.node_id;
        match single.get_change_type() {
            ConfChangeType::AddNode => {
                if !voters.contains(&id) {
                    voters.push(id);
                }
            }
            ConfChangeType::RemoveNode => voters.retain(|v| *v != id),
            ConfChangeType::AddLearnerNode => {
                if conf.learners.iter().any(|l| *l != id) {
                    return Err(
                        "another server is still joining the cluster; servers join one at a time"
                            .into(),
                    );
                }
                voters.retain(|v| *v != id);
            }
        }
    }
    if voters.is_empty() {
        return Err("refusing to remove the last voting member".into());
    }
    let me = raw.raft.id;
    let active = voters
        .iter()
        .filter(|id| **id == me || raw.raft.prs().get(**id).is_some_and(|pr| pr.recent_active))
        .count();
    let quorum = voters.len() / 2 + 1;
    if active < quorum {
        return Err(format!(
            "refusing the membership change: only {active} of the {} voting members it \
             would leave are reachable, fewer than a quorum of {quorum}",
            voters.len()
        ));
    }
    Ok(())
}

/// Why the leader refuses a proposal message carrying a membership change (see
/// `check_conf_change`), if it does.
fn forwarded_conf_change_refusal(
    raw: &RawNode<LogStore>,
    message: &raft::eraftpb::Message,
) -> Option<String> {
    for entry in message.get_entries() {
        if entry.get_entry_type() != EntryType::EntryConfChangeV2 {
            continue;
        }
        let Ok(change) = ConfChangeV2::parse_from_bytes(&entry.data) else {
            return Some("undecodable membership change".into());
        };
        if let Err(refusal) = check_conf_change(raw, &change) {
            return Some(refusal);
        }
    }
    None
}

/// The sequence number of a proposal made by this process, if `context` is one.
fn local_seq(context: &[u8], epoch: u64) -> Option<u64> {
    if context.len() != 16 {
        return None;
    }
    let (e, s) = context.split_at(8);
    let e = u64::from_le_bytes(e.try_into().ok()?);
    (e == epoch).then(|| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
}

/// Sends raft-rs's slog output to `tracing` (its info level is chatty: debug here).
struct TracingDrain;

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(
        &self,
        record: &slog::Record<'_>,
        _: &slog::OwnedKVList,
    ) -> std::result::Result<(), slog::Never> {
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{}", record.msg())
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{}", record.msg()),
            slog::Level::Info => tracing::debug!(target: "raft", "{}", record.msg()),
            _ => tracing::trace!(target: "raft", "{}", record.msg()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_urls_are_ip_and_port_only() {
        assert_eq!(
            peer_address("https://10.0.0.2:2380"),
            Some("10.0.0.2:2380".parse().expect("addr"))
        );
        assert_eq!(
            peer_address("https://[fd00::2]:2380/"),
            Some("[fd00::2]:2380".parse().expect("addr"))
        );
        for bad in [
            "http://10.0.0.2:2380",
            "https://server-1:2380",
            "https://10.0.0.2",
            "https://10.0.0.2:2380/x",
            "",
        ] {
            assert_eq!(peer_address(bad), None, "{bad}");
        }
    }

    #[test]
    fn raft_timing_in_ticks() {
        assert_eq!(
            RaftTiming::default().ticks(),
            (Duration::from_millis(100), 10)
        );
        let k3s = RaftTiming {
            heartbeat_interval: Duration::from_millis(500),
            election_timeout: Duration::from_millis(5000),
            ..RaftTiming::default()
        };
        assert_eq!(k3s.ticks(), (Duration::from_millis(500), 10));
        let tight = RaftTiming {
            heartbeat_interval: Duration::from_millis(1),
            election_timeout: Duration::from_millis(15),
            ..RaftTiming::default()
        };
        // The tick has a floor; the election still spans at least two ticks.
        assert_eq!(tight.ticks(), (Duration::from_millis(10), 2));
    }
}
