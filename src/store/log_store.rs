//! The raft log as raft-rs sees it: an in-memory mirror of the durable raft state
//! (hard state, conf state, the untruncated log tail) that the driver keeps in step
//! with what it writes to SQLite in the same transaction (a group of one keeps the
//! entries it has already applied only here: see `node::Driver::process_ready`). After any failed
//! transaction the driver rebuilds it from disk, so memory never runs ahead of disk.

use std::cell::{Cell, RefCell};

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

/// Raft's view of the persisted log.
pub(crate) struct LogStore {
    pub hard_state: HardState,
    pub conf_state: ConfState,
    /// Index and term of the entry just before `entries[0]` (the snapshot point).
    pub start_index: u64,
    pub start_term: u64,
    pub entries: Vec<Entry>,
    /// Set when raft asked for a snapshot we have not built yet.
    pub snapshot_requested: Cell<bool>,
    /// A snapshot the driver prepared for a lagging member.
    pub prepared_snapshot: RefCell<Option<Snapshot>>,
}

impl LogStore {
    pub fn new(
        hard_state: HardState,
        conf_state: ConfState,
        start_index: u64,
        start_term: u64,
        entries: Vec<Entry>,
    ) -> Self {
        LogStore {
            hard_state,
            conf_state,
            start_index,
            start_term,
            entries,
            snapshot_requested: Cell::new(false),
            prepared_snapshot: RefCell::new(None),
        }
    }

    fn first(&self) -> u64 {
        self.start_index + 1
    }

    fn last(&self) -> u64 {
        self.start_index + self.entries.len() as u64
    }

    /// Mirrors an append (after any conflicting suffix is dropped).
    pub fn append(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first() else { return };
        let keep = first.index.saturating_sub(self.first()) as usize;
        self.entries.truncate(keep);
        self.entries.extend_from_slice(entries);
    }

    /// Mirrors dropping entries up to and including `index`.
    pub fn truncate_to(&mut self, index: u64) {
        if index < self.first() || index > self.last() {
            return;
        }
        let term = self.entries[(index - self.first()) as usize].term;
        let drop = (index - self.start_index) as usize;
        self.entries.drain(..drop);
        self.start_index = index;
        self.start_term = term;
    }

    /// Mirrors installing a snapshot: the log restarts after it.
    pub fn install_snapshot(&mut self, index: u64, term: u64, conf_state: ConfState) {
        self.entries.clear();
        self.start_index = index;
        self.start_term = term;
        self.conf_state = conf_state;
        if self.hard_state.commit < index {
            self.hard_state.commit = index;
        }
        if self.hard_state.term < term {
            self.hard_state.term = term;
        }
    }
}

impl raft::Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let lo = (low - self.first()) as usize;
        let hi = (high - self.first()) as usize;
        let max_size = max_size.into().unwrap_or(u64::MAX);
        let mut size = 0u64;
        let mut out = Vec::with_capacity(hi - lo);
        for entry in &self.entries[lo..hi] {
            size += protobuf::Message::compute_size(entry) as u64;
            if !out.is_empty() && size > max_size {
                break;
            }
            out.push(entry.clone());
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.start_index {
            return Ok(self.start_term);
        }
        if idx < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        // Building a snapshot needs the database, which only the driver touches: ask it
        // to prepare one and report "not yet"; raft asks again later. A prepared one is
        // reused only if the log still goes on from it (one older than the log's start
        // leaves the receiver needing a snapshot again, and the leader would send the same
        // one for ever) and its configuration has the receiver (one made before the
        // receiver was added is refused by it, "not in the ConfState", for ever).
        if let Some(snapshot) = self.prepared_snapshot.borrow().as_ref()
            && snapshot.get_metadata().index >= request_index
            && snapshot.get_metadata().index >= self.start_index
            && conf_has(snapshot.get_metadata().get_conf_state(), to)
        {
            return Ok(snapshot.clone());
        }
        self.snapshot_requested.set(true);
        Err(raft::Error::Store(
            StorageError::SnapshotTemporarilyUnavailable,
        ))
    }
}

/// Whether `id` is a voter or learner of `conf` (either side of a joint configuration).
fn conf_has(conf: &ConfState, id: u64) -> bool {
    conf.voters
        .iter()
        .chain(&conf.learners)
        .chain(&conf.voters_outgoing)
        .chain(&conf.learners_next)
        .any(|member| *member == id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Default::default()
        }
    }

    #[test]
    fn a_prepared_snapshot_is_reused_only_for_members_of_its_configuration_and_its_log() {
        let log = LogStore::new(HardState::default(), ConfState::default(), 0, 0, vec![]);
        let mut snapshot = Snapshot::default();
        snapshot.mut_metadata().index = 86;
        snapshot.mut_metadata().mut_conf_state().voters = vec![1];
        snapshot.mut_metadata().mut_conf_state().learners = vec![2];
        *log.prepared_snapshot.borrow_mut() = Some(snapshot);
        assert_eq!(
            log.snapshot(80, 2)
                .expect("learner 2 is in it")
                .get_metadata()
                .index,
            86
        );
        assert!(!log.snapshot_requested.get());
        // Member 3 joined after it was made: a new one is asked for.
        assert!(log.snapshot(80, 3).is_err());
        assert!(log.snapshot_requested.get());
        // The log was truncated past it: after it, 2 would need a snapshot again.
        let mut log = log;
        log.snapshot_requested.set(false);
        log.start_index = 90;
        assert!(log.snapshot(0, 2).is_err());
        assert!(log.snapshot_requested.get());
    }

    #[test]
    fn append_replaces_conflicting_suffix_and_truncate_moves_start() {
        let mut log = LogStore::new(HardState::default(), ConfState::default(), 0, 0, vec![]);
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        log.append(&[entry(3, 2), entry(4, 2)]);
        assert_eq!(log.last_index().unwrap(), 4);
        assert_eq!(log.term(3).unwrap(), 2);
        log.truncate_to(2);
        assert_eq!(log.first_index().unwrap(), 3);
        assert_eq!(log.term(2).unwrap(), 1);
        assert!(log.term(1).is_err());
        let got = log
            .entries(3, 5, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(got.iter().map(|e| e.index).collect::<Vec<_>>(), vec![3, 4]);
        assert!(
            log.entries(2, 4, None, GetEntriesContext::empty(false))
                .is_err()
        );
    }
}
