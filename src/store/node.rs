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
//! A member of a bigger group waits for that before it sends its acknowledgements
//! (raft needs its log durable first). If a transaction fails (a full disk, an I/O
//! error), it is rolled back, every waiting proposer gets the error, and raft is
//! rebuilt from what is on disk, so memory never runs ahead of disk.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Snapshot};
use raft::{RawNode, StateRole};
use tokio::sync::oneshot;

use super::codec::{Applied, Command};
use super::db::{self, ApplyResult, Database, PersistentState};
use super::durability::{self, CommittedBatch, Job};
use super::error::{Result, StoreError};
use super::log_store::LogStore;
use super::transport::Transport;
use super::watch::WatchHub;
use super::{Input, SharedState, StoreConfig};

const TICK: Duration = Duration::from_millis(100);
/// Physical compaction runs at least this often while there is a backlog, even under
/// continuous write load.
const COMPACTION_PACE: Duration = Duration::from_millis(10);

type Reply = oneshot::Sender<Result<Applied>>;

pub(crate) struct Driver {
    config: StoreConfig,
    db: Database,
    raw: Option<RawNode<LogStore>>,
    state: PersistentState,
    inputs: mpsc::Receiver<Input>,
    transport: Box<dyn Transport>,
    hub: Arc<WatchHub>,
    shared: Arc<SharedState>,
    pending: HashMap<u64, Reply>,
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
        for (_, reply) in self.pending.drain() {
            let _ = reply.send(Err(StoreError::Unavailable(
                "the store is shutting down".into(),
            )));
        }
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
        let config = raft::Config {
            id: state.node_id,
            election_tick: 10,
            heartbeat_tick: 3,
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
        self.state = state;
        self.raw = Some(raw);
        // Freshly loaded, memory holds exactly the rows on disk.
        self.log_rows_on_disk = true;
        Ok(())
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
            if self.last_tick.elapsed() >= TICK {
                self.last_tick = Instant::now();
                if let Some(raw) = self.raw.as_mut() {
                    raw.tick();
                }
            }
            if let Err(e) = self.process_ready() {
                self.recover(e);
            }
            if let Err(e) = self.background() {
                self.recover(e);
            }
            self.shared
                .is_leader
                .store(self.is_leader(), Ordering::SeqCst);
            if shutdown {
                break;
            }
        }
    }

    fn next_wakeup(&self) -> Duration {
        let tick = TICK.saturating_sub(self.last_tick.elapsed());
        if self.state.compact_cursor < self.state.compact_revision {
            tick.min(COMPACTION_PACE)
        } else {
            tick
        }
    }

    /// Handles one input; returns true on shutdown.
    fn handle(&mut self, input: Input) -> bool {
        match input {
            Input::Propose { command, reply } => self.propose(command, reply),
            Input::Step(message) => {
                if let Some(raw) = self.raw.as_mut()
                    && let Err(e) = raw.step(*message)
                {
                    tracing::debug!(error = %e, "raft message ignored");
                }
            }
            Input::Shutdown => return true,
        }
        false
    }

    fn propose(&mut self, command: Command, reply: Option<Reply>) {
        let leader = self.is_leader();
        let Some(raw) = self.raw.as_mut().filter(|_| leader) else {
            if let Some(reply) = reply {
                let _ = reply.send(Err(StoreError::Unavailable(
                    "this member is not the raft leader (or is recovering from a failed write)"
                        .into(),
                )));
            }
            return;
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut context = Vec::with_capacity(16);
        context.extend_from_slice(&self.epoch.to_le_bytes());
        context.extend_from_slice(&seq.to_le_bytes());
        match raw.propose(context, command.encode()) {
            Ok(()) => {
                if let Some(reply) = reply {
                    self.pending.insert(seq, reply);
                }
            }
            Err(e) => {
                if let Some(reply) = reply {
                    let _ = reply.send(Err(StoreError::Unavailable(format!(
                        "raft refused the proposal: {e}"
                    ))));
                }
            }
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
            ..
        } = self;
        let Some(raw) = raw.as_mut() else {
            return Ok(());
        };
        if !raw.has_ready() {
            return Ok(());
        }
        let mut ready = raw.ready();
        // A leader may send appends before persisting them (raft thesis 10.2.1).
        transport.send(ready.take_messages());

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
            db::install_incoming_snapshot(&tx, state).map_err(sql)?;
            let meta = snapshot.get_metadata();
            raw.mut_store()
                .install_snapshot(meta.index, meta.term, meta.get_conf_state().clone());
        }
        apply_entries(
            &tx,
            raw,
            state,
            ready.take_committed_entries(),
            *epoch,
            &path,
            &mut results,
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
            &mut results,
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

        // Committed, not yet durable: the durability thread syncs, then publishes and
        // answers. A member of a bigger group (or one that just took a snapshot) waits
        // for that: its acknowledgements promise a durable log.
        let mut events = Vec::new();
        let mut replies = Vec::with_capacity(results.len());
        for (seq, result) in results {
            if let Some(event) = result.event {
                events.push(Arc::new(event));
            }
            if let Some(reply) = seq.and_then(|seq| pending.remove(&seq)) {
                replies.push((reply, result.outcome));
            }
        }
        let batch = CommittedBatch {
            current_revision: state.current_revision,
            compact_revision: state.compact_revision,
            events,
            replies,
            close_watchers: replaced,
        };
        hand_over(durable, &db.path, hub, shared, Job::Publish(batch));
        if replaced || !log_is_private(&raw.store().conf_state, state.node_id) {
            wait_until_durable(durable, &db.path, hub, shared);
        }
        transport.send(persisted_messages);
        transport.send(light.take_messages());
        Ok(())
    }

    /// After a failed transaction: roll back, fail every waiting proposer (none of
    /// their writes is on disk), and rebuild raft from disk.
    fn recover(&mut self, error: StoreError) {
        tracing::error!(error = %error, "store write failed; nothing from this batch was stored, reloading from disk");
        if !self.db.conn.is_autocommit() {
            let _ = self.db.conn.execute_batch("ROLLBACK");
        }
        // Earlier batches are committed: let them be published before the reload
        // resets the published revisions to what is on disk.
        wait_until_durable(&self.durable, &self.db.path, &self.hub, &self.shared);
        self.db.detach_incoming_snapshot();
        let disk_full = error.is_disk_full();
        let message = error.to_string();
        for (_, reply) in self.pending.drain() {
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
            self.propose(Command::Compact { revision: target }, None);
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
        let data = self.db.snapshot_bytes()?;
        let mut snapshot = Snapshot {
            data: data.into(),
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

/// Whether no other member (voter or learner) could ever ask this one for log entries.
fn log_is_private(conf_state: &raft::eraftpb::ConfState, node_id: u64) -> bool {
    conf_state.voters == [node_id]
        && conf_state.learners.is_empty()
        && conf_state.voters_outgoing.is_empty()
        && conf_state.learners_next.is_empty()
}

/// Applies committed entries in order, skipping any already applied.
fn apply_entries(
    tx: &rusqlite::Transaction<'_>,
    raw: &mut RawNode<LogStore>,
    state: &mut PersistentState,
    entries: Vec<Entry>,
    epoch: u64,
    path: &std::path::Path,
    results: &mut Vec<(Option<u64>, ApplyResult)>,
) -> Result<()> {
    for entry in entries {
        if entry.index <= state.applied_index {
            continue;
        }
        match entry.get_entry_type() {
            EntryType::EntryNormal => {
                if !entry.data.is_empty() {
                    let seq = local_seq(&entry.context, epoch);
                    let result = match Command::decode(&entry.data) {
                        Ok(command) => db::apply_command(tx, state, command)
                            .map_err(|e| db::classify(path, e, "applying a write"))?,
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
            EntryType::EntryConfChange => {
                let change = ConfChange::parse_from_bytes(&entry.data).map_err(|e| {
                    StoreError::Unavailable(format!("undecodable membership change: {e}"))
                })?;
                let conf_state = raw.apply_conf_change(&change).map_err(|e| {
                    StoreError::Unavailable(format!("applying a membership change: {e}"))
                })?;
                raw.mut_store().conf_state = conf_state;
            }
            EntryType::EntryConfChangeV2 => {
                let change = ConfChangeV2::parse_from_bytes(&entry.data).map_err(|e| {
                    StoreError::Unavailable(format!("undecodable membership change: {e}"))
                })?;
                let conf_state = raw.apply_conf_change(&change).map_err(|e| {
                    StoreError::Unavailable(format!("applying a membership change: {e}"))
                })?;
                raw.mut_store().conf_state = conf_state;
            }
        }
        state.applied_index = entry.index;
        state.applied_term = entry.term;
    }
    Ok(())
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
