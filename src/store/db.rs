//! The SQLite side of the store: file validation, schema, the writer connection's
//! statements (apply commands, persist raft state, physical compaction) and the
//! background WAL checkpointer.
//!
//! Only the raft driver thread holds the writer connection; readers use their own
//! connections (see `reader`). Every function here runs inside a transaction the
//! driver opened, so a crash leaves either all of a batch or none of it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState};
use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, params};

use super::KeyValue;
use super::SharedState;
use super::codec::{Applied, Command};
use super::error::{Result, StoreError, key_str};
use super::snapshot_transfer::{self, SnapshotFile};

/// `PRAGMA application_id` of a k3rs store ("k3rs" in ASCII).
pub(crate) const APPLICATION_ID: i32 = 0x6b33_7273;
/// `PRAGMA user_version`: the on-disk format this build writes and understands.
pub(crate) const FORMAT_VERSION: i32 = 1;
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
/// Page size of a newly created store (see `Database::initialize`).
pub(crate) const PAGE_SIZE: u32 = 2048;

const SCHEMA: &str = "
CREATE TABLE kv (
    revision        INTEGER PRIMARY KEY,
    key             BLOB    NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision   INTEGER NOT NULL,
    version         INTEGER NOT NULL,
    deleted         INTEGER NOT NULL,
    value           BLOB    NOT NULL
);
CREATE INDEX kv_key_revision ON kv (key, revision);
CREATE TABLE raft_log (
    idx   INTEGER PRIMARY KEY,
    entry BLOB NOT NULL
);
CREATE TABLE state (
    id               INTEGER PRIMARY KEY CHECK (id = 0),
    node_id          INTEGER NOT NULL,
    current_revision INTEGER NOT NULL,
    compact_revision INTEGER NOT NULL,
    compact_cursor   INTEGER NOT NULL,
    applied_index    INTEGER NOT NULL,
    applied_term     INTEGER NOT NULL,
    log_start_index  INTEGER NOT NULL,
    log_start_term   INTEGER NOT NULL,
    hard_state       BLOB NOT NULL,
    conf_state       BLOB NOT NULL
);
";

/// The names and peer URLs of the raft group's members (replicated: written by
/// `SetMember` commands and by removals, copied with snapshots), and the ids of members
/// removed from the group (never reused: a removed member that comes back with its old
/// data is told it was removed). Stores made before the tables existed get them when
/// opened.
const MEMBERS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS members (
    id       INTEGER PRIMARY KEY,
    name     TEXT NOT NULL,
    peer_url TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS removed_members (
    id   INTEGER PRIMARY KEY,
    name TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cluster (
    id         INTEGER PRIMARY KEY CHECK (id = 0),
    cluster_id BLOB NOT NULL
);
";

/// The id of the cluster a store belongs to: random, made when a cluster is created
/// (`--cluster-init`, a single server) and again when one is reset or restored from a
/// snapshot; a joining server takes the cluster's. Members of different clusters refuse
/// each other's raft traffic. Stores older than the id have none and refuse nobody.
pub type ClusterId = [u8; 16];

/// A new random cluster id.
pub(crate) fn new_cluster_id() -> ClusterId {
    let mut id = [0u8; 16];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        id = (nanos ^ u128::from(std::process::id())).to_le_bytes();
    }
    id
}

/// The store's cluster id, if it has one.
pub(crate) fn load_cluster_id(conn: &Connection) -> rusqlite::Result<Option<ClusterId>> {
    let blob: Option<Vec<u8>> = conn
        .query_row("SELECT cluster_id FROM cluster WHERE id = 0", [], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(blob.and_then(|b| ClusterId::try_from(b.as_slice()).ok()))
}

/// Sets the store's cluster id.
pub(crate) fn set_cluster_id(conn: &Connection, id: &ClusterId) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT OR REPLACE INTO cluster (id, cluster_id) VALUES (0, ?1)",
        [id.as_slice()],
    )?;
    Ok(())
}

/// The raft id of the member every group starts with (the first server; a joining
/// server never gets this id).
pub(crate) const GENESIS_MEMBER_ID: u64 = 1;

/// The persistent state row, mirrored in memory by the driver.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PersistentState {
    pub node_id: u64,
    pub current_revision: i64,
    pub compact_revision: i64,
    /// Physical compaction has removed everything it may up to this revision.
    pub compact_cursor: i64,
    pub applied_index: u64,
    pub applied_term: u64,
    /// Index and term of the last entry dropped from the raft log (snapshot point).
    pub log_start_index: u64,
    pub log_start_term: u64,
    pub hard_state: HardState,
    pub conf_state: ConfState,
}

/// The newest row of a key, as the apply path needs it.
struct LatestRow {
    revision: i64,
    create_revision: i64,
    version: i64,
    deleted: bool,
    value: Vec<u8>,
}

/// The writer connection.
pub(crate) struct Database {
    pub conn: Connection,
    pub path: PathBuf,
}

impl Database {
    /// Opens the store's database, creating it if absent. Refuses (without writing a
    /// byte) files that are not SQLite, belong to another program, come from a newer
    /// k3rs or are damaged.
    pub fn open(
        path: &Path,
        node_id: u64,
        join: bool,
        cluster_id: Option<ClusterId>,
    ) -> Result<Database> {
        check_file_header(path)?;
        let mut conn = open_connection(path, false)?;
        conn.busy_handler(Some(writer_waits_for_lock))
            .map_err(|e| classify(path, e, "configuring the database"))?;
        let db = Database {
            conn,
            path: path.to_path_buf(),
        };
        // Snapshot files of an earlier run (sent, received, half-received) are of no use.
        snapshot_transfer::remove_stale(db.dir(), None);
        let _ = std::fs::remove_file(db.incoming_path());
        let app_id: i32 = db.pragma_i32("application_id")?;
        let format: i32 = db.pragma_i32("user_version")?;
        let tables: i64 = db
            .conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(|e| db.classify(e, "reading the schema"))?;
        let created = app_id == 0 && format == 0 && tables == 0;
        if created {
            db.initialize(node_id, join)?;
        } else if app_id != APPLICATION_ID {
            return Err(StoreError::Incompatible {
                path: path.to_path_buf(),
                detail: format!(
                    "it is an SQLite database of another program (application_id {app_id:#x}); \
                     k3rs will not touch it. Point --data-dir elsewhere or move the file aside"
                ),
            });
        } else if format > FORMAT_VERSION {
            return Err(StoreError::Incompatible {
                path: path.to_path_buf(),
                detail: format!(
                    "it was written by a newer k3rs (format {format}, this binary understands up to \
                     {FORMAT_VERSION}); run the newer k3rs or restore a snapshot taken with this version"
                ),
            });
        }
        db.configure_writer()?;
        db.conn
            .execute_batch(MEMBERS_SCHEMA)
            .map_err(|e| db.classify(e, "creating the members table"))?;
        // A new cluster gets a new id; a joining server takes the cluster's (or, if it
        // was not given one, the leader's snapshot brings it).
        let initial_id = if join {
            cluster_id
        } else {
            Some(cluster_id.unwrap_or_else(new_cluster_id))
        };
        if created && let Some(id) = initial_id {
            set_cluster_id(&db.conn, &id)
                .map_err(|e| db.classify(e, "recording the cluster id"))?;
        }
        // Fail now, with the path in the message, if the schema or state row is damaged.
        db.load_state()?;
        Ok(db)
    }

    fn pragma_i32(&self, name: &str) -> Result<i32> {
        self.conn
            .query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
            .map_err(|e| self.classify(e, &format!("reading PRAGMA {name}")))
    }

    /// Creates the schema. A new store is a one-member group of its own (every group
    /// starts so: one voter, id [`GENESIS_MEMBER_ID`], at index 0). A server joining a
    /// cluster (`join`) starts from that same genesis configuration, without being in it
    /// (so it never campaigns): the leader then sends it either its log from index 1,
    /// which replayed from genesis gives the leader's state, or a snapshot, which
    /// replaces everything.
    fn initialize(&self, node_id: u64, join: bool) -> Result<()> {
        let conf_state = ConfState {
            voters: vec![if join { GENESIS_MEMBER_ID } else { node_id }],
            ..Default::default()
        };
        let state = PersistentState {
            node_id,
            conf_state,
            ..Default::default()
        };
        // Page size and auto_vacuum must be chosen before the first table exists.
        // 2 KiB pages: every write touches one leaf of the key index (keys arrive in
        // no order), and the WAL takes that leaf whole, so smaller pages cut what each
        // commit writes and its fdatasync must flush (16 writers creating 1 KiB
        // objects: ~15% shorter syncs and ~4% more creates/s than with 4 KiB). Stores
        // created with another page size keep it.
        self.conn
            .execute_batch(&format!(
                "PRAGMA page_size = {PAGE_SIZE}; PRAGMA auto_vacuum = INCREMENTAL;"
            ))
            .map_err(|e| self.classify(e, "initializing the database"))?;
        let tx = self
            .conn
            .unchecked_transaction()
            .map_err(|e| self.classify(e, "initializing the database"))?;
        tx.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {FORMAT_VERSION}; {SCHEMA}"
        ))
        .map_err(|e| self.classify(e, "creating the schema"))?;
        tx.execute(
            "INSERT INTO state (id, node_id, current_revision, compact_revision, compact_cursor,
                applied_index, applied_term, log_start_index, log_start_term, hard_state, conf_state)
             VALUES (0, ?1, 0, 0, 0, 0, 0, 0, 0, ?2, ?3)",
            params![
                state.node_id as i64,
                encode_pb(&state.hard_state),
                encode_pb(&state.conf_state)
            ],
        )
        .map_err(|e| self.classify(e, "writing the initial state"))?;
        tx.commit()
            .map_err(|e| self.classify(e, "initializing the database"))?;
        Ok(())
    }

    fn configure_writer(&self) -> Result<()> {
        // WAL with NORMAL sync: a commit does not wait for the disk; the durability
        // thread fsyncs the WAL before anything of the batch is acknowledged or
        // visible (see `durability`), and checkpoints still sync the WAL first. A
        // background connection checkpoints continuously so the writer rarely has to;
        // the writer's own autocheckpoint (every 64 MiB of WAL) only finishes
        // what the background left, which lets the WAL restart from the beginning even
        // under continuous writes. It costs the writer a database fsync, so it is kept
        // rare: at 16 MiB it came every half second under heavy load and set the
        // 16-writer p99. After a reset the WAL file keeps up to 80 MiB (more than the
        // 64 MiB a cycle writes): later commits overwrite blocks the file already has,
        // and an fdatasync of an overwrite need not journal a new file size (measured
        // under the 16-writer create load: 570 µs per fsync with a 16 MiB limit, 350 µs
        // with this one). The checkpointer truncates it to nothing once writes pause.
        // The page cache is 4 MiB: writes touch the right edges of the B-trees and the
        // key index, and every current value is already held by the API server's watch
        // cache, so a bigger cache mostly duplicated that in memory (16 MiB: up to 1.6 KiB
        // per object at 10,000 objects); misses are served by the OS page cache.
        let page_size = self.pragma_i32("page_size")?.max(512) as u64;
        let autocheckpoint_pages = WAL_AUTOCHECKPOINT_BYTES / page_size;
        self.conn
            .execute_batch(&format!(
                "PRAGMA journal_mode = WAL;
                 PRAGMA synchronous = NORMAL;
                 PRAGMA wal_autocheckpoint = {autocheckpoint_pages};
                 PRAGMA journal_size_limit = {WAL_SIZE_LIMIT};
                 PRAGMA cache_size = -4096;
                 PRAGMA temp_store = MEMORY;"
            ))
            .map_err(|e| self.classify(e, "configuring the database"))
    }

    /// Reads the state row.
    pub fn load_state(&self) -> Result<PersistentState> {
        load_state(&self.conn).map_err(|e| self.classify(e, "reading the store state"))
    }

    /// Loads the raft log entries after the snapshot point, in order.
    pub fn load_entries(&self) -> Result<Vec<Entry>> {
        let mut stmt = self
            .conn
            .prepare("SELECT entry FROM raft_log ORDER BY idx")
            .map_err(|e| self.classify(e, "reading the raft log"))?;
        let rows = stmt
            .query_map([], |r| r.get::<_, Vec<u8>>(0))
            .map_err(|e| self.classify(e, "reading the raft log"))?;
        let mut entries = Vec::new();
        for row in rows {
            let bytes = row.map_err(|e| self.classify(e, "reading the raft log"))?;
            let entry = Entry::parse_from_bytes(&bytes).map_err(|e| StoreError::Corrupt {
                path: self.path.clone(),
                detail: format!("undecodable raft log entry: {e}"),
            })?;
            entries.push(entry);
        }
        Ok(entries)
    }

    /// Maps an SQLite error to a store error naming this database.
    pub fn classify(&self, error: rusqlite::Error, context: &str) -> StoreError {
        classify(&self.path, error, context)
    }
}

/// Maps an SQLite error: damage becomes `Corrupt` (with the path), the rest `Io`.
pub(crate) fn classify(path: &Path, error: rusqlite::Error, context: &str) -> StoreError {
    use rusqlite::ErrorCode::*;
    match error.sqlite_error_code() {
        Some(DatabaseCorrupt) | Some(NotADatabase) => StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("{context}: {error}"),
        },
        _ => StoreError::io(format!("{context} ({})", path.display()), error),
    }
}

/// Refuses files that exist but are not SQLite databases, before SQLite opens them.
fn check_file_header(path: &Path) -> Result<()> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::io(format!("opening {}", path.display()), e)),
    };
    let mut header = [0u8; 16];
    let mut read = 0;
    while read < header.len() {
        match file.read(&mut header[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) => return Err(StoreError::io(format!("reading {}", path.display()), e)),
        }
    }
    if read == 0 {
        // An empty file is what a crash during the very first start leaves behind.
        return Ok(());
    }
    if read < header.len() || &header != SQLITE_MAGIC {
        return Err(StoreError::Incompatible {
            path: path.to_path_buf(),
            detail: "it is not an SQLite database, so not a k3rs store; k3rs will not touch it. \
                     Move it aside or point --data-dir elsewhere"
                .into(),
        });
    }
    Ok(())
}

/// How long the writer waits for another connection's lock (a checkpoint or an
/// incremental vacuum) before its transaction fails as busy.
const WRITER_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// The writer's polling interval while it waits: the first polls come quickly, then
/// at most every millisecond.
const WRITER_FIRST_POLLS: i32 = 100;
const WRITER_FIRST_POLL: Duration = Duration::from_micros(100);
const WRITER_POLL: Duration = Duration::from_millis(1);

/// Busy handler of the writer (the raft thread). SQLite's own busy timeout sleeps in
/// growing steps of up to 100 ms, so a writer that meets a checkpoint sleeps long after
/// the lock is free, and every proposal in the group waits with it; polling at most a
/// millisecond apart keeps that wait near the lock holder's own time.
fn writer_waits_for_lock(attempt: i32) -> bool {
    let polled_fast = attempt.min(WRITER_FIRST_POLLS);
    let waited = WRITER_FIRST_POLL * polled_fast as u32
        + WRITER_POLL * (attempt - polled_fast).max(0) as u32;
    if waited >= WRITER_BUSY_TIMEOUT {
        return false;
    }
    std::thread::sleep(if attempt < WRITER_FIRST_POLLS {
        WRITER_FIRST_POLL
    } else {
        WRITER_POLL
    });
    true
}

/// Makes `path` (created empty if missing) and its `-wal`/`-shm` companions readable
/// by the owner only (0600), whatever the umask: the database holds every value
/// written. SQLite gives the companions it creates the main file's mode.
pub(crate) fn make_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let private = std::fs::Permissions::from_mode(0o600);
    if !path.exists() {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|e| StoreError::io(format!("creating {}", path.display()), e))?;
    }
    std::fs::set_permissions(path, private.clone())
        .map_err(|e| StoreError::io(format!("setting the mode of {}", path.display()), e))?;
    for suffix in ["-wal", "-shm"] {
        let mut companion = path.as_os_str().to_owned();
        companion.push(suffix);
        let companion = std::path::PathBuf::from(companion);
        if companion.exists() {
            std::fs::set_permissions(&companion, private.clone()).map_err(|e| {
                StoreError::io(format!("setting the mode of {}", companion.display()), e)
            })?;
        }
    }
    Ok(())
}

/// Opens a connection with the settings every store connection shares.
pub(crate) fn open_connection(path: &Path, read_only: bool) -> Result<Connection> {
    if !read_only {
        make_private(path)?;
    }
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|e| classify(path, e, "opening the database"))?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(|e| classify(path, e, "configuring the database"))?;
    if read_only {
        conn.execute_batch("PRAGMA query_only = 1; PRAGMA cache_size = -8192;")
            .map_err(|e| classify(path, e, "configuring a reader"))?;
    }
    Ok(conn)
}

/// The members table: id, name, peer URL.
pub(crate) fn load_members(conn: &Connection) -> rusqlite::Result<Vec<(u64, String, String)>> {
    conn.prepare_cached("SELECT id, name, peer_url FROM members ORDER BY id")?
        .query_map([], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get(1)?, r.get(2)?))
        })?
        .collect()
}

/// Forgets the name and peer URL of a member removed from the group and remembers
/// that its id was removed.
pub(crate) fn delete_member(tx: &Transaction<'_>, id: u64) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT OR IGNORE INTO removed_members (id, name)
         VALUES (?1, coalesce((SELECT name FROM members WHERE id = ?1), ''))",
    )?
    .execute([id as i64])?;
    tx.prepare_cached("DELETE FROM members WHERE id = ?1")?
        .execute([id as i64])?;
    Ok(())
}

/// Records that this member (`id`) was told it was removed from the group.
pub(crate) fn record_own_removal(conn: &Connection, id: u64) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT OR IGNORE INTO removed_members (id, name) VALUES (?1, '')")?
        .execute([id as i64])?;
    Ok(())
}

/// The ids of members removed from the group.
pub(crate) fn load_removed_members(conn: &Connection) -> rusqlite::Result<Vec<u64>> {
    conn.prepare_cached("SELECT id FROM removed_members ORDER BY id")?
        .query_map([], |r| Ok(r.get::<_, i64>(0)? as u64))?
        .collect()
}

pub(crate) fn load_state(conn: &Connection) -> rusqlite::Result<PersistentState> {
    conn.query_row(
        "SELECT node_id, current_revision, compact_revision, compact_cursor, applied_index,
                applied_term, log_start_index, log_start_term, hard_state, conf_state
         FROM state WHERE id = 0",
        [],
        |r| {
            let hard_state: Vec<u8> = r.get(8)?;
            let conf_state: Vec<u8> = r.get(9)?;
            Ok(PersistentState {
                node_id: r.get::<_, i64>(0)? as u64,
                current_revision: r.get(1)?,
                compact_revision: r.get(2)?,
                compact_cursor: r.get(3)?,
                applied_index: r.get::<_, i64>(4)? as u64,
                applied_term: r.get::<_, i64>(5)? as u64,
                log_start_index: r.get::<_, i64>(6)? as u64,
                log_start_term: r.get::<_, i64>(7)? as u64,
                hard_state: HardState::parse_from_bytes(&hard_state).map_err(|e| pb_error(8, e))?,
                conf_state: ConfState::parse_from_bytes(&conf_state).map_err(|e| pb_error(9, e))?,
            })
        },
    )
}

fn pb_error(column: usize, e: protobuf::ProtobufError) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Blob, Box::new(e))
}

pub(crate) fn encode_pb(message: &impl protobuf::Message) -> Vec<u8> {
    // Encoding an in-memory raft message cannot fail (no required fields in eraftpb).
    message.write_to_bytes().unwrap_or_default()
}

/// Starts a write transaction holding the write lock from its first moment (`BEGIN
/// IMMEDIATE`). A deferred one that reads first holds a read snapshot while it waits to
/// upgrade, and a `wal_checkpoint(TRUNCATE)` that took the write lock meanwhile waits for
/// that very snapshot to end: both sit out the busy timeout and the write fails with
/// "database is locked".
pub(crate) fn write_transaction(conn: &Connection) -> rusqlite::Result<Transaction<'_>> {
    Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)
}

/// Writes the state row.
pub(crate) fn save_state(tx: &Transaction<'_>, state: &PersistentState) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "UPDATE state SET current_revision = ?1, compact_revision = ?2, compact_cursor = ?3,
            applied_index = ?4, applied_term = ?5, log_start_index = ?6, log_start_term = ?7,
            hard_state = ?8, conf_state = ?9 WHERE id = 0",
    )?
    .execute(params![
        state.current_revision,
        state.compact_revision,
        state.compact_cursor,
        state.applied_index as i64,
        state.applied_term as i64,
        state.log_start_index as i64,
        state.log_start_term as i64,
        encode_pb(&state.hard_state),
        encode_pb(&state.conf_state),
    ])?;
    Ok(())
}

/// Appends raft entries, replacing any conflicting suffix (raft may overwrite
/// uncommitted entries after a leader change).
pub(crate) fn append_entries(tx: &Transaction<'_>, entries: &[Entry]) -> rusqlite::Result<()> {
    let Some(first) = entries.first() else {
        return Ok(());
    };
    tx.prepare_cached("DELETE FROM raft_log WHERE idx >= ?1")?
        .execute([first.index as i64])?;
    let mut insert = tx.prepare_cached("INSERT INTO raft_log (idx, entry) VALUES (?1, ?2)")?;
    for entry in entries {
        insert.execute(params![entry.index as i64, encode_pb(entry)])?;
    }
    Ok(())
}

/// Drops raft log entries up to and including `index`.
pub(crate) fn truncate_log(tx: &Transaction<'_>, index: u64) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM raft_log WHERE idx <= ?1")?
        .execute([index as i64])?;
    Ok(())
}

/// The newest row of `key`. The key is compared as `key = CAST(?1 AS BLOB)` (the same
/// comparison and index plan as `key = ?1`) because with the plain parameter SQLite
/// re-parses and re-plans the cached statement each time rusqlite returns it to its
/// cache (clearing its bindings marks it expired): a fifth of the raft thread's CPU
/// under a create load.
fn latest_row(tx: &Transaction<'_>, key: &[u8]) -> rusqlite::Result<Option<LatestRow>> {
    tx.prepare_cached(
        "SELECT revision, create_revision, version, deleted, value FROM kv
         WHERE key = CAST(?1 AS BLOB) ORDER BY revision DESC LIMIT 1",
    )?
    .query_row([key], |r| {
        Ok(LatestRow {
            revision: r.get(0)?,
            create_revision: r.get(1)?,
            version: r.get(2)?,
            deleted: r.get::<_, i64>(3)? != 0,
            value: r.get(4)?,
        })
    })
    .optional()
}

fn insert_row(
    tx: &Transaction<'_>,
    kv: &KeyValue,
    prev_revision: i64,
    deleted: bool,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO kv (revision, key, create_revision, prev_revision, version, deleted, value)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        kv.mod_revision,
        kv.key,
        kv.create_revision,
        prev_revision,
        kv.version,
        deleted as i64,
        if deleted { &[][..] } else { &kv.value[..] },
    ])?;
    Ok(())
}

fn to_kv(key: &[u8], row: LatestRow) -> KeyValue {
    KeyValue {
        key: key.to_vec(),
        value: row.value,
        create_revision: row.create_revision,
        mod_revision: row.revision,
        version: row.version,
    }
}

/// What applying one command did: the caller's answer and, for mutations, the event.
pub(crate) struct ApplyResult {
    pub outcome: Result<Applied>,
    pub event: Option<super::Event>,
}

/// Applies one command at the next revision. Command-level failures (conflicts,
/// missing keys) are outcomes; only database failures are `Err`.
pub(crate) fn apply_command(
    tx: &Transaction<'_>,
    state: &mut PersistentState,
    command: Command,
) -> rusqlite::Result<ApplyResult> {
    use super::Event;
    let next = state.current_revision + 1;
    let refused = |e: StoreError| ApplyResult {
        outcome: Err(e),
        event: None,
    };
    Ok(match command {
        Command::Create { key, value } => {
            let latest = latest_row(tx, &key)?;
            if let Some(row) = &latest
                && !row.deleted
            {
                return Ok(refused(StoreError::AlreadyExists { key: key_str(&key) }));
            }
            let kv = KeyValue {
                key,
                value,
                create_revision: next,
                mod_revision: next,
                version: 1,
            };
            insert_row(tx, &kv, latest.map_or(0, |r| r.revision), false)?;
            state.current_revision = next;
            ApplyResult {
                outcome: Ok(Applied::Put(kv.clone())),
                event: Some(Event::Put { kv, prev_kv: None }),
            }
        }
        Command::Update {
            key,
            value,
            expected_mod_revision,
        } => {
            let row = match latest_row(tx, &key)? {
                Some(row) if !row.deleted => row,
                _ => return Ok(refused(StoreError::NotFound { key: key_str(&key) })),
            };
            if row.revision != expected_mod_revision {
                let current = Box::new(to_kv(&key, row));
                return Ok(refused(StoreError::Conflict {
                    key: key_str(&key),
                    expected: expected_mod_revision,
                    current,
                }));
            }
            let kv = KeyValue {
                key: key.clone(),
                value,
                create_revision: row.create_revision,
                mod_revision: next,
                version: row.version + 1,
            };
            insert_row(tx, &kv, row.revision, false)?;
            state.current_revision = next;
            let prev_kv = to_kv(&key, row);
            ApplyResult {
                outcome: Ok(Applied::Put(kv.clone())),
                event: Some(Event::Put {
                    kv,
                    prev_kv: Some(prev_kv),
                }),
            }
        }
        Command::Delete {
            key,
            expected_mod_revision,
        } => {
            let row = match latest_row(tx, &key)? {
                Some(row) if !row.deleted => row,
                _ => return Ok(refused(StoreError::NotFound { key: key_str(&key) })),
            };
            if let Some(expected) = expected_mod_revision
                && row.revision != expected
            {
                let current = Box::new(to_kv(&key, row));
                return Ok(refused(StoreError::Conflict {
                    key: key_str(&key),
                    expected,
                    current,
                }));
            }
            let tombstone = KeyValue {
                key: key.clone(),
                value: Vec::new(),
                create_revision: row.create_revision,
                mod_revision: next,
                version: 0,
            };
            insert_row(tx, &tombstone, row.revision, true)?;
            state.current_revision = next;
            let prev = to_kv(&key, row);
            ApplyResult {
                outcome: Ok(Applied::Deleted {
                    prev: prev.clone(),
                    revision: next,
                }),
                event: Some(Event::Delete {
                    prev_kv: prev,
                    revision: next,
                }),
            }
        }
        Command::SetMember { id, name, peer_url } => {
            tx.prepare_cached(
                "INSERT INTO members (id, name, peer_url) VALUES (?1, ?2, ?3)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, peer_url = excluded.peer_url",
            )?
            .execute(params![id as i64, name, peer_url])?;
            ApplyResult {
                outcome: Ok(Applied::MemberSet),
                event: None,
            }
        }
        Command::Compact { revision } => {
            if revision > state.current_revision {
                refused(StoreError::FutureRevision {
                    requested: revision,
                    current: state.current_revision,
                })
            } else {
                if revision > state.compact_revision {
                    state.compact_revision = revision;
                }
                ApplyResult {
                    outcome: Ok(Applied::Compacted),
                    event: None,
                }
            }
        }
    })
}

/// Physically removes history the compact revision made unreachable, at most
/// `batch_rows` revisions per call. Walking revisions in order, each row's previous
/// version is superseded, and a deletion's tombstone is no longer needed.
/// Returns the number of revisions examined (0 when there is nothing to do).
pub(crate) fn compact_batch(
    tx: &Transaction<'_>,
    state: &mut PersistentState,
    batch_rows: usize,
) -> rusqlite::Result<usize> {
    if state.compact_cursor >= state.compact_revision {
        return Ok(0);
    }
    let rows: Vec<(i64, i64, bool)> = tx
        .prepare_cached(
            "SELECT revision, prev_revision, deleted FROM kv
             WHERE revision > ?1 AND revision <= ?2 ORDER BY revision LIMIT ?3",
        )?
        .query_map(
            params![
                state.compact_cursor,
                state.compact_revision,
                batch_rows as i64
            ],
            |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? != 0)),
        )?
        .collect::<rusqlite::Result<_>>()?;
    let mut delete = tx.prepare_cached("DELETE FROM kv WHERE revision = ?1")?;
    for (revision, prev_revision, deleted) in &rows {
        if *prev_revision > 0 {
            delete.execute([prev_revision])?;
        }
        if *deleted {
            delete.execute([revision])?;
        }
    }
    state.compact_cursor = match rows.last() {
        Some((revision, _, _)) if rows.len() == batch_rows => *revision,
        // Fewer rows than asked: everything up to the compact revision is done.
        _ => state.compact_revision,
    };
    Ok(rows.len().max(1))
}

/// Bytes the WAL file keeps after a reset (see `Database::configure_writer`).
const WAL_SIZE_LIMIT: u64 = 80 << 20;
/// WAL bytes after which the writer checkpoints itself (see `Database::configure_writer`).
const WAL_AUTOCHECKPOINT_BYTES: u64 = 64 << 20;

/// The WAL file of the database at `db_path`.
pub(crate) fn wal_path(db_path: &Path) -> PathBuf {
    let mut name = db_path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// Background WAL checkpoints on a connection of their own, so the writer never
/// waits for them. PASSIVE never blocks writers or readers.
///
/// The same connection gives free pages back to the file system (`release_free_pages`):
/// a little at a time while writes flow, and all that is beyond the slack once writes
/// pause, so the files shrink to near the live data as soon as compaction has freed
/// the history (issue 23: releasing 200 ms' worth every 5 s left a 1,000,000-update
/// churn at 135 MiB for minutes after compaction had caught up).
pub(crate) fn checkpoint_loop(path: &Path, interval: Duration, shared: &SharedState) {
    let conn = match open_connection(path, false) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "WAL checkpointer could not open the database; the WAL will grow");
            return;
        }
    };
    // NORMAL: this connection's own commits only move pages (incremental vacuum); the
    // writer's durability thread fsyncs the WAL for the next batch anyway, and a power
    // loss that takes a vacuum step back loses no data. Checkpoints still sync the WAL
    // before copying it into the database.
    let _ = conn.execute_batch(&format!(
        "PRAGMA synchronous = NORMAL; PRAGMA journal_size_limit = {WAL_SIZE_LIMIT};"
    ));
    let mut last = Instant::now();
    let mut last_vacuum = Instant::now();
    let mut last_commits = shared.commits.load(Ordering::SeqCst);
    let wal_path = wal_path(path);
    while !shared.stopping.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
        if last.elapsed() < interval {
            continue;
        }
        last = Instant::now();
        let commits = shared.commits.load(Ordering::SeqCst);
        let idle = commits == last_commits;
        last_commits = commits;
        if idle {
            // Nobody writes: give back every free page beyond the slack now (the steps
            // stop as soon as a write commits), then TRUNCATE shrinks the WAL file to
            // nothing (it waits for no one: nobody is writing).
            release_free_pages(&conn, FreePages::WhileIdle(shared, commits));
        } else if last_vacuum.elapsed() >= BUSY_VACUUM_EVERY {
            last_vacuum = Instant::now();
            release_free_pages(&conn, FreePages::Budget(BUSY_VACUUM_BUDGET));
        }
        let wal_len = std::fs::metadata(&wal_path).map(|m| m.len()).unwrap_or(0);
        let mode = if idle && wal_len > 0 {
            "TRUNCATE"
        } else {
            "PASSIVE"
        };
        if let Err(e) = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |_| Ok(())) {
            tracing::warn!(error = %e, "WAL checkpoint failed");
        }
    }
    let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
}

/// While writes flow, free pages are released at most this often ...
const BUSY_VACUUM_EVERY: Duration = Duration::from_secs(5);
/// ... for at most this long (writes reuse free pages anyway).
const BUSY_VACUUM_BUDGET: Duration = Duration::from_millis(200);
/// Free pages kept for reuse (2 MiB at 2 KiB pages); beyond that, and once they are a
/// quarter of the file, they are released.
const FREE_PAGE_SLACK: i64 = 1024;
/// Pages released per transaction: a writer that arrives meanwhile waits for one step.
const VACUUM_STEP_PAGES: i64 = 512;

/// How long `release_free_pages` may go on.
enum FreePages<'a> {
    /// Until this much time has passed.
    Budget(Duration),
    /// Until a write commits (the commit counter moves from the value given).
    WhileIdle(&'a SharedState, u64),
}

/// Gives free pages back to the file system once they are a large share of the file,
/// a few hundred per transaction so no writer waits long.
fn release_free_pages(conn: &Connection, limit: FreePages<'_>) {
    let started = Instant::now();
    let count = |pragma: &str| -> i64 {
        conn.query_row(&format!("PRAGMA {pragma}"), [], |r| r.get(0))
            .unwrap_or(0)
    };
    loop {
        let free = count("freelist_count");
        let total = count("page_count");
        if free <= FREE_PAGE_SLACK || free * 4 <= total {
            return;
        }
        let go_on = match limit {
            FreePages::Budget(budget) => started.elapsed() < budget,
            FreePages::WhileIdle(shared, commits) => {
                shared.commits.load(Ordering::SeqCst) == commits
                    && !shared.stopping.load(Ordering::SeqCst)
            }
        };
        if !go_on {
            return;
        }
        let step = (free - FREE_PAGE_SLACK).min(VACUUM_STEP_PAGES);
        // Each step of this statement frees one page: run it to completion.
        let freed = conn
            .prepare(&format!("PRAGMA incremental_vacuum({step})"))
            .and_then(|mut stmt| {
                let mut rows = stmt.query([])?;
                while rows.next()?.is_some() {}
                Ok(())
            });
        if let Err(e) = freed {
            tracing::debug!(error = %e, "incremental vacuum deferred");
            return;
        }
    }
}

/// Name under which a snapshot received from the leader is attached.
const INCOMING: &str = "incoming";

impl Database {
    fn incoming_path(&self) -> PathBuf {
        self.path.with_file_name("incoming-snapshot.db")
    }

    /// Puts a snapshot received from the leader next to the database, checks it and
    /// attaches it (ATTACH cannot run inside the transaction that installs it). A snapshot
    /// that travelled as a file (its data a [`SnapshotFile`] descriptor) was already
    /// written, checked and synced by the transport; one whose data is the database
    /// itself is written out here.
    pub fn attach_incoming_snapshot(&self, snapshot: &raft::eraftpb::Snapshot) -> Result<()> {
        let path = self.incoming_path();
        if let Some(file) = SnapshotFile::decode(&snapshot.data) {
            let received = file.received_path(self.dir());
            std::fs::rename(&received, &path).map_err(|e| {
                StoreError::io(
                    format!("taking the received snapshot {}", received.display()),
                    e,
                )
            })?;
            // Older received or outgoing snapshot files are of no use any more.
            snapshot_transfer::remove_stale(self.dir(), None);
        } else {
            std::fs::write(&path, &snapshot.data).map_err(|e| {
                StoreError::io(
                    format!("writing the received snapshot {}", path.display()),
                    e,
                )
            })?;
        }
        super::snapshot::inspect_snapshot(&path)?;
        let name = path.to_str().ok_or_else(|| {
            StoreError::InvalidArgument(format!("{} is not UTF-8", path.display()))
        })?;
        self.conn
            .execute(&format!("ATTACH DATABASE ?1 AS {INCOMING}"), [name])
            .map_err(|e| self.classify(e, "attaching the received snapshot"))?;
        Ok(())
    }

    /// Detaches and removes a received snapshot (no-op if none is attached).
    pub fn detach_incoming_snapshot(&self) {
        let _ = self
            .conn
            .execute_batch(&format!("DETACH DATABASE {INCOMING}"));
        let _ = std::fs::remove_file(self.incoming_path());
    }

    /// The directory of the database (and of the snapshot files beside it).
    fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// Writes the whole state as one SQLite file beside the database, for raft to ship to
    /// lagging members, and describes it; older outgoing snapshots are removed (a stream
    /// still sending one keeps its open file).
    pub fn prepare_outgoing_snapshot(&self) -> Result<SnapshotFile> {
        let staging = self.path.with_file_name("outgoing-snapshot.db");
        let _ = std::fs::remove_file(&staging);
        super::snapshot::save(&self.conn, &staging)?;
        let described = SnapshotFile::of_file(&staging).and_then(|file| {
            std::fs::rename(&staging, file.outgoing_path(self.dir())).map(|()| file)
        });
        let file = described.map_err(|e| {
            let _ = std::fs::remove_file(&staging);
            StoreError::io(format!("preparing the snapshot {}", staging.display()), e)
        })?;
        snapshot_transfer::remove_stale(self.dir(), Some(&file.outgoing_path(self.dir())));
        Ok(file)
    }
}

/// Replaces the key-value state with the attached snapshot's, inside the caller's
/// transaction. Raft metadata comes from the snapshot; this member keeps its id.
pub(crate) fn install_incoming_snapshot(
    tx: &Transaction<'_>,
    state: &mut PersistentState,
) -> rusqlite::Result<()> {
    tx.execute_batch(&format!(
        "DELETE FROM main.kv; INSERT INTO main.kv SELECT * FROM {INCOMING}.kv; DELETE FROM main.raft_log;"
    ))?;
    // Tables a snapshot of an older store may lack: copied only when present.
    let has_table = |name: &str| -> rusqlite::Result<bool> {
        tx.query_row(
            &format!("SELECT count(*) FROM {INCOMING}.sqlite_master WHERE name = ?1"),
            [name],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)
    };
    if has_table("members")? {
        tx.execute_batch(&format!(
            "DELETE FROM main.members; INSERT INTO main.members (id, name, peer_url)
             SELECT id, name, peer_url FROM {INCOMING}.members;"
        ))?;
    }
    if has_table("cluster")? {
        // A member that joined without the id learns it; one that has it keeps it.
        tx.execute_batch(&format!(
            "INSERT OR IGNORE INTO main.cluster (id, cluster_id)
             SELECT id, cluster_id FROM {INCOMING}.cluster;"
        ))?;
    }
    if has_table("removed_members")? {
        tx.execute_batch(&format!(
            "INSERT OR IGNORE INTO main.removed_members (id, name)
             SELECT id, name FROM {INCOMING}.removed_members;"
        ))?;
    }
    let incoming = tx.query_row(
        &format!(
            "SELECT current_revision, compact_revision, applied_index, applied_term FROM {INCOMING}.state WHERE id = 0"
        ),
        [],
        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?)),
    )?;
    state.current_revision = incoming.0;
    state.compact_revision = incoming.1;
    state.compact_cursor = incoming.1;
    state.applied_index = incoming.2 as u64;
    state.applied_term = incoming.3 as u64;
    Ok(())
}
