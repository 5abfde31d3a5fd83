//! Offline restore (`k3rs server --cluster-reset --cluster-reset-restore-path=…` and
//! `k3rs etcd-snapshot restore`): fetch the snapshot (local path, a name in the
//! snapshot directory, or a name on S3), verify its checksum and decompress it, check
//! it with the store's `inspect_snapshot`, and only then move the old database aside
//! (never deleted) and build the new one with `restore_snapshot`.
//!
//! Owns the order of those steps and the temporary files; refuses to run while a
//! server holds the store directory's lock (the same `lock` file the store takes).

use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::s3::{S3Client, S3Config};
use super::{SnapshotError, SnapshotRecord};
use crate::store::{self, DB_FILE_NAME, Store, StoreConfig};

/// What to restore and where.
#[derive(Clone, Debug)]
pub struct RestoreOptions {
    /// The store directory (`<data-dir>/server/db`).
    pub store_dir: PathBuf,
    /// Where named snapshots are looked up and downloads are staged.
    pub snapshot_dir: PathBuf,
    /// A file path, or a snapshot name (local directory first, then S3).
    pub source: Option<String>,
    pub s3: Option<S3Config>,
    /// Resetting a member of a cluster to its own data: refuse while another member
    /// answers on its peer port (it would go on as a second cluster).
    pub refuse_if_peers_reachable: bool,
    /// Put the snapshot's CA files (its bootstrap data, see `bootstrap_copy`) back into
    /// the server's TLS directory (`server --cluster-reset`).
    pub bootstrap: Option<BootstrapTarget>,
}

/// The token that unlocks a snapshot's bootstrap data and where its files go.
#[derive(Clone)]
pub struct BootstrapTarget {
    pub token_secret: String,
    pub tls_dir: PathBuf,
}

impl std::fmt::Debug for BootstrapTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapTarget")
            .field("token_secret", &"<redacted>")
            .field("tls_dir", &self.tls_dir)
            .finish()
    }
}

/// What a restore did.
#[derive(Clone, Debug)]
pub struct RestoreReport {
    /// Where the snapshot came from.
    pub source: String,
    pub revision: i64,
    /// Where the previous database files were moved.
    pub old_database: Option<PathBuf>,
}

/// Holds the store directory's lock for the duration of a restore.
struct DirLock(#[allow(dead_code)] std::fs::File);

fn lock_store_dir(dir: &Path) -> Result<DirLock, SnapshotError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| SnapshotError::Failed(format!("creating {}: {e}", dir.display())))?;
    let path = dir.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| SnapshotError::Failed(format!("opening {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(DirLock(file)),
        Err(std::fs::TryLockError::WouldBlock) => Err(SnapshotError::Conflict(format!(
            "{} is in use by a running k3rs server; stop it first (systemctl stop k3rs)",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(SnapshotError::Failed(format!(
            "locking {}: {e}",
            path.display()
        ))),
    }
}

/// Restores the store from a snapshot, or (no source) resets it to a one-member
/// cluster from its own current state.
pub async fn restore(options: &RestoreOptions) -> Result<RestoreReport, SnapshotError> {
    let staging = tempfile_in(&options.snapshot_dir)?;
    let result = restore_inner(options, staging.path()).await;
    drop(staging);
    result
}

async fn restore_inner(
    options: &RestoreOptions,
    staging: &Path,
) -> Result<RestoreReport, SnapshotError> {
    let (snapshot_file, source) = match &options.source {
        Some(source) => {
            let fetched = fetch(options, source, staging).await?;
            (prepare(&fetched, staging)?, source.clone())
        }
        None => (
            current_state(options, staging).await?,
            "the current database".to_string(),
        ),
    };
    // Everything below the lock: nothing in the store directory changes until the
    // snapshot has been verified.
    let _lock = lock_store_dir(&options.store_dir)?;
    let info = verify(&snapshot_file, &source)?;
    let old_database = move_aside(&options.store_dir)?;
    drop(_lock);
    let restored = store::restore_snapshot(&snapshot_file, &options.store_dir, 1)
        .map_err(|e| SnapshotError::Failed(format!("restoring {source}: {e}")))?;
    tracing::info!(
        %source,
        revision = restored.revision,
        old = ?old_database,
        "datastore restored"
    );
    if let Some(target) = &options.bootstrap {
        restore_bootstrap_files(&options.store_dir, target).await?;
    }
    Ok(RestoreReport {
        source,
        revision: info.revision,
        old_database,
    })
}

/// Writes the restored datastore's CA files into the TLS directory, so the next start
/// issues its certificates from the cluster's CAs instead of this machine's.
async fn restore_bootstrap_files(
    store_dir: &Path,
    target: &BootstrapTarget,
) -> Result<(), SnapshotError> {
    use crate::apiserver::cluster::bootstrap_copy::{self, Restored};
    let config = StoreConfig::new(store_dir);
    let store = tokio::task::spawn_blocking(move || Store::open(config))
        .await
        .map_err(|e| SnapshotError::Failed(format!("opening the restored store: {e}")))?
        .map_err(|e| SnapshotError::Failed(format!("opening the restored store: {e}")))?;
    let result = bootstrap_copy::restore_files(&store, &target.token_secret, &target.tls_dir).await;
    let _ = tokio::task::spawn_blocking(move || store.close()).await;
    match result {
        Ok(Restored::Replaced) => {
            tracing::info!(dir = %target.tls_dir.display(), "restored the cluster's certificate authorities from the snapshot's bootstrap data");
            Ok(())
        }
        Ok(Restored::Unchanged) => Ok(()),
        Ok(Restored::NoCopy) => {
            tracing::warn!(
                "the snapshot holds no bootstrap data for this token; the server keeps the CA files it has"
            );
            Ok(())
        }
        Err(e) => Err(SnapshotError::Failed(format!(
            "the datastore was restored, but its CA files were not: {e} \
             (start again with the cluster's --token)"
        ))),
    }
}

/// A snapshot of the current database (for `--cluster-reset` without a path).
/// Checks a snapshot file (one `source` names) before anything is restored from it: the
/// store's format and integrity checks. Also the snapshot-reader fuzz target's entry.
pub fn verify(snapshot_file: &Path, source: &str) -> Result<store::SnapshotInfo, SnapshotError> {
    store::inspect_snapshot(snapshot_file)
        .map_err(|e| SnapshotError::Invalid(format!("refusing to restore {source}: {e}")))
}

async fn current_state(options: &RestoreOptions, staging: &Path) -> Result<PathBuf, SnapshotError> {
    if !options.store_dir.join(DB_FILE_NAME).exists() {
        return Err(SnapshotError::NotFound(format!(
            "no database in {} to reset",
            options.store_dir.display()
        )));
    }
    let config = StoreConfig::new(&options.store_dir);
    let store = tokio::task::spawn_blocking(move || Store::open(config))
        .await
        .map_err(|e| SnapshotError::Failed(format!("opening the store: {e}")))?
        .map_err(|e| SnapshotError::Failed(format!("opening the store: {e}")))?;
    if options.refuse_if_peers_reachable {
        let me = store.member_id();
        let others: Vec<store::Member> =
            store.members().into_iter().filter(|m| m.id != me).collect();
        let reachable = tokio::task::spawn_blocking(move || {
            others
                .into_iter()
                .filter(|m| {
                    store::peer_address(&m.peer_url).is_some_and(|address| {
                        std::net::TcpStream::connect_timeout(
                            &address,
                            std::time::Duration::from_secs(1),
                        )
                        .is_ok()
                    })
                })
                .map(|m| format!("{} ({})", m.name, m.peer_url))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        if !reachable.is_empty() {
            tokio::task::spawn_blocking(move || store.close())
                .await
                .map_err(|e| SnapshotError::Failed(format!("closing the store: {e}")))?;
            return Err(SnapshotError::Failed(format!(
                "other members of the cluster are still running: {}; stop k3rs on them \
                 first (a reset member would go on as a second cluster), or pass \
                 --cluster-reset-force",
                reachable.join(", ")
            )));
        }
    }
    let dest = staging.join("current.db");
    let saved = store.save_snapshot(&dest).await;
    tokio::task::spawn_blocking(move || store.close())
        .await
        .map_err(|e| SnapshotError::Failed(format!("closing the store: {e}")))?;
    saved.map_err(|e| SnapshotError::Failed(format!("copying the current database: {e}")))?;
    Ok(dest)
}

/// A fetched snapshot file and the checksum its metadata promises, if any.
struct Fetched {
    path: PathBuf,
    expected_sha256: Option<String>,
    name: String,
}

async fn fetch(
    options: &RestoreOptions,
    source: &str,
    staging: &Path,
) -> Result<Fetched, SnapshotError> {
    let as_path = Path::new(source);
    let local = if as_path.is_file() {
        Some(as_path.to_path_buf())
    } else if !source.contains('/') && options.snapshot_dir.join(source).is_file() {
        Some(options.snapshot_dir.join(source))
    } else {
        None
    };
    if let Some(path) = local {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let metadata = path
            .parent()
            .map(|dir| dir.join(".metadata").join(format!("{name}.json")));
        let expected_sha256 = metadata
            .and_then(|m| std::fs::read(m).ok())
            .and_then(|d| serde_json::from_slice::<SnapshotRecord>(&d).ok())
            .map(|r| r.sha256)
            .filter(|s| !s.is_empty());
        return Ok(Fetched {
            path,
            expected_sha256,
            name,
        });
    }
    let Some(config) = &options.s3 else {
        return Err(SnapshotError::NotFound(format!(
            "snapshot {source:?} is neither a file nor a snapshot in {} (for a snapshot on S3, add the --etcd-s3 flags)",
            options.snapshot_dir.display()
        )));
    };
    let name = source.trim_start_matches('/').to_string();
    if name.contains('/') {
        return Err(SnapshotError::Invalid(format!(
            "S3 snapshot names are bare names (the folder comes from --etcd-s3-folder): {source:?}"
        )));
    }
    let client = S3Client::new(config).map_err(|e| SnapshotError::Invalid(e.to_string()))?;
    let dest = staging.join("download");
    client
        .get_file(&config.key(&name), &dest)
        .await
        .map_err(|e| match e.is_not_found() {
            true => SnapshotError::NotFound(format!("snapshot {name} not found on S3: {e}")),
            false => SnapshotError::Failed(e.to_string()),
        })?;
    let expected_sha256 = client
        .get_bytes(&config.key(&format!(".metadata/{name}.json")))
        .await
        .ok()
        .and_then(|d| serde_json::from_slice::<SnapshotRecord>(&d).ok())
        .map(|r| r.sha256)
        .filter(|s| !s.is_empty());
    tracing::info!(location = %config.location(&config.key(&name)), "snapshot downloaded from S3");
    Ok(Fetched {
        path: dest,
        expected_sha256,
        name,
    })
}

/// Verifies the checksum and decompresses; returns the plain SQLite file.
fn prepare(fetched: &Fetched, staging: &Path) -> Result<PathBuf, SnapshotError> {
    if let Some(expected) = &fetched.expected_sha256 {
        let actual = sha256_file(&fetched.path)?;
        if &actual != expected {
            return Err(SnapshotError::Invalid(format!(
                "refusing to restore {}: checksum mismatch (metadata says sha256 {expected}, the file has {actual}); the file is damaged or truncated",
                fetched.name
            )));
        }
    }
    let mut magic = [0u8; 2];
    let is_gzip = std::fs::File::open(&fetched.path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == [0x1f, 0x8b];
    if !is_gzip {
        return Ok(fetched.path.clone());
    }
    let out = staging.join("decompressed.db");
    let result = (|| -> std::io::Result<()> {
        let input = std::fs::File::open(&fetched.path)?;
        let mut decoder = flate2::read::GzDecoder::new(input);
        let mut output = std::fs::File::create(&out)?;
        std::io::copy(&mut decoder, &mut output)?;
        output.sync_all()
    })();
    result.map_err(|e| {
        SnapshotError::Invalid(format!(
            "refusing to restore {}: cannot decompress it ({e}); the file is damaged or truncated",
            fetched.name
        ))
    })?;
    Ok(out)
}

fn sha256_file(path: &Path) -> Result<String, SnapshotError> {
    use sha2::{Digest, Sha256};
    let mut file = std::fs::File::open(path)
        .map_err(|e| SnapshotError::Failed(format!("reading {}: {e}", path.display())))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1024 * 1024];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| SnapshotError::Failed(format!("reading {}: {e}", path.display())))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Moves `state.db` (and its WAL/SHM files) into `<store_dir>/old-<unix time>/`.
fn move_aside(store_dir: &Path) -> Result<Option<PathBuf>, SnapshotError> {
    let db = store_dir.join(DB_FILE_NAME);
    if !db.exists() {
        return Ok(None);
    }
    let mut target = store_dir.join(format!("old-{}", jiff::Timestamp::now().as_second()));
    let mut n = 1;
    while target.exists() {
        target = store_dir.join(format!("old-{}-{n}", jiff::Timestamp::now().as_second()));
        n += 1;
    }
    std::fs::create_dir_all(&target)
        .map_err(|e| SnapshotError::Failed(format!("creating {}: {e}", target.display())))?;
    for suffix in ["", "-wal", "-shm"] {
        let from = store_dir.join(format!("{DB_FILE_NAME}{suffix}"));
        if from.exists() {
            let to = target.join(format!("{DB_FILE_NAME}{suffix}"));
            std::fs::rename(&from, &to).map_err(|e| {
                SnapshotError::Failed(format!(
                    "moving {} to {}: {e}",
                    from.display(),
                    to.display()
                ))
            })?;
        }
    }
    Ok(Some(target))
}

/// A private staging directory next to the snapshots, removed on drop.
struct Staging(PathBuf);

impl Staging {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempfile_in(dir: &Path) -> Result<Staging, SnapshotError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| SnapshotError::Failed(format!("creating {}: {e}", dir.display())))?;
    let path = dir.join(format!(
        ".restore-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond()
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&path)
        .map_err(|e| SnapshotError::Failed(format!("creating {}: {e}", path.display())))?;
    Ok(Staging(path))
}
