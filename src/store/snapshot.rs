//! The snapshot primitive: a consistent point-in-time copy of the store as a single
//! SQLite file that carries its raft metadata (applied index and term, membership,
//! revision), and the reverse — building a store directory from such a file.
//! The `etcd-snapshot` command saves these; raft ships them to lagging members.

use std::path::Path;

use rusqlite::Connection;

use super::DB_FILE_NAME;
use super::db::{self, APPLICATION_ID, FORMAT_VERSION, PersistentState, classify};
use super::error::{Result, StoreError};

/// What a snapshot contains, as recorded inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The store revision the snapshot was taken at.
    pub revision: i64,
    /// The compact revision at that time (history below it is absent).
    pub compact_revision: i64,
    /// Raft index and term of the last entry applied to the copied state.
    pub raft_index: u64,
    pub raft_term: u64,
    /// Voters of the raft group at that point.
    pub voters: Vec<u64>,
    /// Size of the snapshot file in bytes.
    pub size_bytes: u64,
}

/// Copies the state visible to `conn`'s read transaction into `dest` (which must not
/// exist). `VACUUM INTO` reads one consistent snapshot of the source, is not
/// restarted by concurrent writers, and writes a compact file; the raft log is not
/// part of a snapshot.
pub(crate) fn save(conn: &Connection, dest: &Path) -> Result<SnapshotInfo> {
    if dest.exists() {
        return Err(StoreError::InvalidArgument(format!(
            "snapshot file {} already exists",
            dest.display()
        )));
    }
    let tmp = dest.with_extension("partial");
    let _ = std::fs::remove_file(&tmp);
    // Created 0600 before SQLite writes into it (VACUUM INTO accepts an empty file).
    db::make_private(&tmp)?;
    let dest_str = tmp.to_str().ok_or_else(|| {
        StoreError::InvalidArgument(format!("snapshot path {} is not UTF-8", dest.display()))
    })?;
    // Reader connections are query-only; VACUUM INTO writes only the new file. The
    // setting is put back as it was: the raft driver saves snapshots for lagging members
    // on its writer connection, which must stay writable.
    let query_only: i64 = conn
        .query_row("PRAGMA query_only", [], |r| r.get(0))
        .unwrap_or(1);
    let vacuum = conn
        .execute_batch("PRAGMA query_only = 0")
        .and_then(|_| conn.execute("VACUUM INTO ?1", [dest_str]));
    let _ = conn.execute_batch(&format!("PRAGMA query_only = {}", query_only.clamp(0, 1)));
    vacuum.map_err(|e| StoreError::io(format!("writing snapshot {}", tmp.display()), e))?;
    let result = (|| {
        let copy =
            Connection::open(&tmp).map_err(|e| classify(&tmp, e, "opening the snapshot copy"))?;
        copy.execute_batch("PRAGMA journal_mode = DELETE; DELETE FROM raft_log;")
            .map_err(|e| StoreError::io(format!("finishing snapshot {}", tmp.display()), e))?;
        drop(copy);
        sync_file(&tmp)?;
        std::fs::rename(&tmp, dest)
            .map_err(|e| StoreError::io(format!("renaming snapshot into {}", dest.display()), e))?;
        if let Some(parent) = dest.parent() {
            sync_dir(parent);
        }
        inspect_snapshot(dest)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Validates a snapshot file (format, integrity) and reads its metadata without
/// changing it.
pub fn inspect_snapshot(path: &Path) -> Result<SnapshotInfo> {
    let size_bytes = std::fs::metadata(path)
        .map_err(|e| StoreError::io(format!("reading snapshot {}", path.display()), e))?
        .len();
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| classify(path, e, "opening the snapshot"))?;
    let not_snapshot = |detail: String| StoreError::Incompatible {
        path: path.to_path_buf(),
        detail,
    };
    let app_id: i32 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(|e| classify(path, e, "reading the snapshot header"))?;
    if app_id != APPLICATION_ID {
        return Err(not_snapshot("it is not a k3rs snapshot".into()));
    }
    let format: i32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| classify(path, e, "reading the snapshot header"))?;
    if format > FORMAT_VERSION {
        return Err(not_snapshot(format!(
            "it was written by a newer k3rs (format {format}, this binary understands up to {FORMAT_VERSION})"
        )));
    }
    let check: String = conn
        .query_row("PRAGMA integrity_check(1)", [], |r| r.get(0))
        .map_err(|e| classify(path, e, "checking the snapshot"))?;
    if check != "ok" {
        return Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: check,
        });
    }
    let state =
        db::load_state(&conn).map_err(|e| classify(path, e, "reading the snapshot state"))?;
    Ok(info(&state, size_bytes))
}

fn info(state: &PersistentState, size_bytes: u64) -> SnapshotInfo {
    SnapshotInfo {
        revision: state.current_revision,
        compact_revision: state.compact_revision,
        raft_index: state.applied_index,
        raft_term: state.applied_term,
        voters: state.conf_state.voters.clone(),
        size_bytes,
    }
}

/// Builds a store in `dir` from `snapshot`, as a one-member raft group (`node_id`)
/// whose log starts right after the snapshot. Refuses if `dir` already holds a
/// database: the caller moves the old one aside first. Nothing is written to `dir`
/// unless the snapshot validates.
pub fn restore_snapshot(snapshot: &Path, dir: &Path, node_id: u64) -> Result<SnapshotInfo> {
    let info = inspect_snapshot(snapshot)?;
    let target = dir.join(DB_FILE_NAME);
    if target.exists() {
        return Err(StoreError::InvalidArgument(format!(
            "{} already exists; move it aside before restoring",
            target.display()
        )));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| StoreError::io(format!("creating {}", dir.display()), e))?;
    let tmp = dir.join(format!("{DB_FILE_NAME}.restoring"));
    let _ = std::fs::remove_file(&tmp);
    std::fs::copy(snapshot, &tmp).map_err(|e| {
        StoreError::io(
            format!("copying {} to {}", snapshot.display(), tmp.display()),
            e,
        )
    })?;
    let result = (|| {
        db::make_private(&tmp)?;
        let conn =
            Connection::open(&tmp).map_err(|e| classify(&tmp, e, "opening the restored copy"))?;
        let mut state =
            db::load_state(&conn).map_err(|e| classify(&tmp, e, "reading the restored state"))?;
        // A new one-member group that starts where the snapshot ends.
        let taken_by = state.node_id;
        state.node_id = node_id;
        state.conf_state = raft::eraftpb::ConfState {
            voters: vec![node_id],
            ..Default::default()
        };
        state.hard_state = raft::eraftpb::HardState {
            term: state.applied_term,
            commit: state.applied_index,
            vote: 0,
            ..Default::default()
        };
        state.log_start_index = state.applied_index;
        state.log_start_term = state.applied_term;
        let mut conn = conn;
        let tx = conn
            .transaction()
            .map_err(|e| classify(&tmp, e, "restoring"))?;
        tx.execute_batch("DELETE FROM raft_log;")
            .map_err(|e| classify(&tmp, e, "restoring"))?;
        // The member that took the snapshot becomes the new group's only member, under
        // the new id, keeping its name and peer URL (so a reset member of a cluster stays
        // joinable); the others are forgotten.
        let has_members: i64 = tx
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'members'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| classify(&tmp, e, "restoring"))?;
        if has_members > 0 {
            tx.execute("DELETE FROM members WHERE id != ?1", [taken_by as i64])
                .and_then(|_| {
                    tx.execute(
                        "UPDATE members SET id = ?1 WHERE id = ?2",
                        [node_id as i64, taken_by as i64],
                    )
                })
                .map_err(|e| classify(&tmp, e, "restoring"))?;
        }
        // A reset or restored cluster is a new cluster: servers still holding the old
        // one's data are refused by it (they must wipe and join again).
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS cluster (
                 id INTEGER PRIMARY KEY CHECK (id = 0), cluster_id BLOB NOT NULL);",
        )
        .and_then(|()| {
            tx.execute(
                "INSERT OR REPLACE INTO cluster (id, cluster_id) VALUES (0, ?1)",
                [db::new_cluster_id().as_slice()],
            )
        })
        .map_err(|e| classify(&tmp, e, "restoring"))?;
        tx.execute(
            "UPDATE state SET node_id = ?1 WHERE id = 0",
            [node_id as i64],
        )
        .map_err(|e| classify(&tmp, e, "restoring"))?;
        db::save_state(&tx, &state).map_err(|e| classify(&tmp, e, "restoring"))?;
        tx.commit().map_err(|e| classify(&tmp, e, "restoring"))?;
        drop(conn);
        sync_file(&tmp)?;
        std::fs::rename(&tmp, &target).map_err(|e| {
            StoreError::io(
                format!("moving the restored database to {}", target.display()),
                e,
            )
        })?;
        sync_dir(dir);
        Ok(SnapshotInfo {
            voters: vec![node_id],
            ..info.clone()
        })
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn sync_file(path: &Path) -> Result<()> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| StoreError::io(format!("syncing {}", path.display()), e))
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}
