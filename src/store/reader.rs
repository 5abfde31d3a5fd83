//! Read paths: a small pool of reader connections and the queries for get, range,
//! count and watch history. Each read runs in one SQLite read transaction, so the
//! revision it reports and the rows it returns belong to the same instant. Reads stop
//! at the durable revision the caller passes (the published one): the writer commits
//! a batch before its fsync completes (see `durability`), and a read must not show
//! what a power loss could still take back.

use std::path::PathBuf;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

use super::db::{classify, open_connection};
use super::error::{Result, StoreError};
use super::{Event, KeyValue, RangeRequest, RangeResult};

/// Reader connections, opened on demand and kept for reuse.
pub(crate) struct ReaderPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

/// At most this many idle connections are kept.
const MAX_IDLE_READERS: usize = 8;

impl ReaderPool {
    pub fn new(path: PathBuf) -> Self {
        ReaderPool {
            path,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Runs `f` on a reader connection inside a read transaction.
    pub fn with<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let conn = match conn {
            Some(c) => c,
            None => open_connection(&self.path, true)?,
        };
        conn.execute_batch("BEGIN")
            .map_err(|e| classify(&self.path, e, "starting a read"))?;
        let result = f(&conn).map_err(|e| self.name_path(e));
        let _ = conn.execute_batch("COMMIT");
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE_READERS
        {
            idle.push(conn);
        }
        result
    }

    /// Runs `f` on a reader connection outside any transaction (for statements such
    /// as `VACUUM INTO` that open their own).
    pub fn with_autocommit<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let conn = match conn {
            Some(c) => c,
            None => open_connection(&self.path, true)?,
        };
        let result = f(&conn).map_err(|e| self.name_path(e));
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE_READERS
        {
            idle.push(conn);
        }
        result
    }

    fn name_path(&self, e: StoreError) -> StoreError {
        match e {
            StoreError::Corrupt { detail, .. } => StoreError::Corrupt {
                path: self.path.clone(),
                detail,
            },
            other => other,
        }
    }
}

fn sql(e: rusqlite::Error) -> StoreError {
    classify(&PathBuf::new(), e, "reading the store")
}

/// Current (at most `durable`) and compact revisions as of this read transaction.
fn revisions(conn: &Connection, durable: i64) -> Result<(i64, i64)> {
    conn.prepare_cached("SELECT current_revision, compact_revision FROM state WHERE id = 0")
        .and_then(|mut s| s.query_row([], |r| Ok((r.get::<_, i64>(0)?, r.get(1)?))))
        .map(|(current, compact)| (current.min(durable), compact))
        .map_err(sql)
}

/// The exclusive upper bound of keys starting with `prefix` (`None`: unbounded).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The newest version of `key` at or below `durable`.
pub(crate) fn get(conn: &Connection, key: &[u8], durable: i64) -> Result<Option<KeyValue>> {
    conn.prepare_cached(
        // CAST: see `db::latest_row`.
        "SELECT revision, create_revision, version, deleted, value FROM kv
         WHERE key = CAST(?1 AS BLOB) AND revision <= ?2 ORDER BY revision DESC LIMIT 1",
    )
    .and_then(|mut s| {
        s.query_row(params![key, durable], |r| {
            let deleted: i64 = r.get(3)?;
            Ok((deleted == 0).then(|| -> rusqlite::Result<KeyValue> {
                Ok(KeyValue {
                    key: key.to_vec(),
                    mod_revision: r.get(0)?,
                    create_revision: r.get(1)?,
                    version: r.get(2)?,
                    value: r.get(4)?,
                })
            }))
        })
        .optional()
    })
    .map_err(sql)?
    .flatten()
    .transpose()
    .map_err(sql)
}

pub(crate) fn range(
    conn: &Connection,
    request: &RangeRequest,
    durable: i64,
) -> Result<RangeResult> {
    let (current, compact) = revisions(conn, durable)?;
    let revision = request.at_revision.unwrap_or(current);
    if revision > current {
        return Err(StoreError::FutureRevision {
            requested: revision,
            current,
        });
    }
    if revision < compact {
        return Err(StoreError::Compacted {
            requested: revision,
            compact_revision: compact,
        });
    }
    let mut lower = request.prefix.clone();
    if let Some(after) = &request.start_after_key
        && after.as_slice() >= request.prefix.as_slice()
    {
        // The smallest key strictly greater than `after` is `after` + 0x00.
        lower = after.clone();
        lower.push(0);
    }
    let upper = prefix_end(&request.prefix);
    // Ask for one more than the limit to learn whether more remain.
    let fetch = if request.limit == 0 {
        -1
    } else {
        request.limit as i64 + 1
    };
    let mut stmt = conn
        .prepare_cached(
            // Newest version of each key at the read revision: walk the (key, revision)
            // index in key order and keep rows with no newer version at or below the
            // read revision. Streams in key order, so LIMIT stops early; no sort.
            "SELECT k.revision, k.key, k.create_revision, k.version, k.value FROM kv AS k
             WHERE k.key >= ?1 AND (?2 IS NULL OR k.key < ?2) AND k.revision <= ?3 AND k.deleted = 0
               AND NOT EXISTS (SELECT 1 FROM kv AS n
                               WHERE n.key = k.key AND n.revision > k.revision AND n.revision <= ?3)
             ORDER BY k.key
             LIMIT ?4",
        )
        .map_err(sql)?;
    let mut kvs = stmt
        .query_map(params![lower, upper, revision, fetch], |r| {
            Ok(KeyValue {
                mod_revision: r.get(0)?,
                key: r.get(1)?,
                create_revision: r.get(2)?,
                version: r.get(3)?,
                value: r.get(4)?,
            })
        })
        .map_err(sql)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sql)?;
    let more = request.limit != 0 && kvs.len() > request.limit;
    kvs.truncate(if request.limit == 0 {
        kvs.len()
    } else {
        request.limit
    });
    Ok(RangeResult {
        kvs,
        revision,
        more,
    })
}

pub(crate) fn count(conn: &Connection, prefix: &[u8], durable: i64) -> Result<u64> {
    let (current, _) = revisions(conn, durable)?;
    conn.prepare_cached(
        "SELECT count(*) FROM kv AS k
         WHERE k.key >= ?1 AND (?2 IS NULL OR k.key < ?2) AND k.revision <= ?3 AND k.deleted = 0
           AND NOT EXISTS (SELECT 1 FROM kv AS n
                           WHERE n.key = k.key AND n.revision > k.revision AND n.revision <= ?3)",
    )
    .and_then(|mut s| {
        s.query_row(params![prefix, prefix_end(prefix), current], |r| {
            r.get::<_, i64>(0)
        })
    })
    .map(|n| n as u64)
    .map_err(sql)
}

/// Events for keys under `prefix` with revisions in `(after, until]`, oldest first,
/// at most `limit` of them. Fails with `Compacted` if `after` is no longer covered.
pub(crate) fn history(
    conn: &Connection,
    prefix: &[u8],
    after: i64,
    until: i64,
    limit: usize,
) -> Result<Vec<Event>> {
    let (_, compact) = revisions(conn, until)?;
    if after < compact {
        return Err(StoreError::Compacted {
            requested: after,
            compact_revision: compact,
        });
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT k.revision, k.key, k.create_revision, k.version, k.deleted, k.value,
                    p.revision, p.create_revision, p.version, p.value
             FROM kv AS k LEFT JOIN kv AS p ON p.revision = k.prev_revision
             WHERE k.revision > ?1 AND k.revision <= ?2
               AND k.key >= ?3 AND (?4 IS NULL OR k.key < ?4)
             ORDER BY k.revision LIMIT ?5",
        )
        .map_err(sql)?;
    let rows = stmt
        .query_map(
            params![after, until, prefix, prefix_end(prefix), limit as i64],
            |r| {
                let key: Vec<u8> = r.get(1)?;
                let prev = match r.get::<_, Option<i64>>(6)? {
                    Some(prev_revision) => Some(KeyValue {
                        key: key.clone(),
                        mod_revision: prev_revision,
                        create_revision: r.get(7)?,
                        version: r.get(8)?,
                        value: r.get(9)?,
                    }),
                    None => None,
                };
                let revision: i64 = r.get(0)?;
                let deleted = r.get::<_, i64>(4)? != 0;
                Ok((
                    revision,
                    deleted,
                    prev,
                    KeyValue {
                        key,
                        mod_revision: revision,
                        create_revision: r.get(2)?,
                        version: r.get(3)?,
                        value: r.get(5)?,
                    },
                ))
            },
        )
        .map_err(sql)?;
    let mut events = Vec::new();
    for row in rows {
        let (revision, deleted, prev, kv) = row.map_err(sql)?;
        if deleted {
            // A deletion's previous version is always retained while the deletion is.
            let prev_kv = prev.unwrap_or_else(|| KeyValue {
                value: Vec::new(),
                ..kv.clone()
            });
            events.push(Event::Delete { prev_kv, revision });
        } else {
            // A create after a deletion has a tombstone as its previous row: no prev_kv.
            let prev_kv = prev.filter(|p| p.create_revision == kv.create_revision);
            events.push(Event::Put { kv, prev_kv });
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_increments_the_last_byte_that_can_be() {
        assert_eq!(prefix_end(b"/a/"), Some(b"/a0".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
        assert_eq!(prefix_end(b""), None);
    }
}
