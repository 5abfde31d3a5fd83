//! Typed errors of the store. Every variant says what failed and, for files, which
//! file and what the operator can do about it.

use std::path::PathBuf;

use super::KeyValue;

/// What a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The key does not exist (or its newest version is a deletion).
    #[error("key {key:?} not found")]
    NotFound { key: String },

    /// `create` found a live key.
    #[error("key {key:?} already exists")]
    AlreadyExists { key: String },

    /// A compare-and-swap lost: the key's current version is not the expected one.
    #[error("key {key:?} was modified: expected mod_revision {expected}, current is {}", current.mod_revision)]
    Conflict {
        key: String,
        expected: i64,
        current: Box<KeyValue>,
    },

    /// The requested revision has been compacted away.
    #[error("revision {requested} has been compacted (oldest available is {compact_revision})")]
    Compacted {
        requested: i64,
        compact_revision: i64,
    },

    /// The requested revision is newer than anything the store has seen.
    #[error("revision {requested} is in the future (current revision is {current})")]
    FutureRevision { requested: i64, current: i64 },

    /// A watcher did not keep up; the caller must re-list and watch again.
    #[error("watcher fell behind by more than {buffered} events and was stopped; resync required")]
    ResyncRequired { buffered: usize },

    /// The caller asked for something the store cannot represent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The store cannot accept the operation right now (not leader, shutting down,
    /// or recovering from a failed write). Retrying later may succeed.
    #[error("store unavailable: {0}")]
    Unavailable(String),

    /// The database file exists but is damaged. It is never overwritten.
    #[error(
        "database {path} is corrupt ({detail}); k3rs will not modify it. Move it aside and \
         restore a snapshot with `k3rs server --cluster-reset --cluster-reset-restore-path=<snapshot>`"
    )]
    Corrupt { path: PathBuf, detail: String },

    /// This member was removed from the raft group (its server's Node was deleted); its
    /// data is of no use to the group any more.
    #[error(
        "this server was removed from the cluster (its datastore member {id:x} was removed, \
         usually by `kubectl delete node`) and will not rejoin with its old data. To rejoin: \
         stop k3rs, delete {dir}, and start it again with --server https://<another server>:6443 \
         and the cluster token"
    )]
    Removed { id: u64, dir: PathBuf },

    /// The database file belongs to something else or to a newer k3rs.
    #[error("database {path} cannot be used: {detail}")]
    Incompatible { path: PathBuf, detail: String },

    /// A caller's transformation of a value on its way to or from the store failed
    /// (e.g. decryption); the store never returns it itself.
    #[error("{0}")]
    Transform(String),

    /// An I/O or SQLite failure (including a full disk); nothing partial was written.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    pub(crate) fn io(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        StoreError::Io {
            context: context.into(),
            source: source.into(),
        }
    }

    /// True when the underlying failure was a full disk.
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::Io { source, .. } => {
                let sqlite_full = source
                    .downcast_ref::<rusqlite::Error>()
                    .and_then(|e| e.sqlite_error_code())
                    .is_some_and(|code| code == rusqlite::ErrorCode::DiskFull);
                let io_full = source
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::StorageFull);
                sqlite_full || io_full
            }
            _ => false,
        }
    }
}

/// Shorthand used throughout the store.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Renders a key for messages: keys are bytes but in practice UTF-8 paths.
pub(crate) fn key_str(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}
