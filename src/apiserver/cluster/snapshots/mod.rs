//! Datastore snapshots (`k3rs etcd-snapshot`): on-demand and scheduled saves with
//! retention, optional gzip compression, a metadata file with a SHA-256 checksum per
//! snapshot, upload/list/delete/retention on S3, the admin-only HTTPS endpoints the
//! CLI calls, and the offline restore used by `k3rs server --cluster-reset`.
//!
//! Owns the snapshot directory (`<data-dir>/server/db/snapshots` by default) and the
//! snapshot objects in the S3 bucket. It reaches the store only through the store's
//! own snapshot primitives (`Store::save_snapshot`, `inspect_snapshot`,
//! `restore_snapshot`) — it lives under `apiserver` because only the API server may
//! use the store.
//!
//! Layout: `<dir>/<name>` (or `<name>.gz`) is the SQLite snapshot; `<dir>/.metadata/<file>.json`
//! is its [`SnapshotRecord`]. On S3 the same two files go to `<folder>/<file>` and
//! `<folder>/.metadata/<file>.json`.

pub mod restore;
pub mod s3;
pub mod sigv4;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::apiserver::auth::authn::Identity;
use crate::apiserver::http::status::ApiError;
use crate::cron::Schedule;
use crate::store::Store;
use s3::{S3Client, S3Config};

/// The URL prefix of the snapshot API.
pub const API_PREFIX: &str = "/k3rs/v1/etcd-snapshots";

/// Where each server publishes the records of its local snapshots, so that `ls` on any
/// server shows every server's (k3s keeps ETCDSnapshotFile objects for the same reason):
/// `<prefix><node>/<file>` → [`SnapshotRecord`] JSON, replicated through the datastore.
const RECORDS_PREFIX: &str = "/k3rs/etcd-snapshots/";
/// A request, made on any server, to delete another server's local snapshot; that
/// server deletes the file and the request: `<prefix><node>/<file>`.
const DELETIONS_PREFIX: &str = "/k3rs/etcd-snapshot-deletions/";
/// How often a server publishes its local snapshots and serves deletion requests.
const SYNC_PERIOD: Duration = Duration::from_secs(5);

/// Drops the snapshot records of `node` and the deletion requests addressed to it: called
/// once its datastore member is removed (its Node deleted), since nobody would ever
/// publish, refresh or serve them again. Its files stay where they are (on its disk, on
/// S3, where `ls` still finds them), as k3s's records go with their Node.
pub async fn forget_node(store: &Store, node: &str) -> Result<usize, crate::store::StoreError> {
    let mut dropped = 0;
    for prefix in [RECORDS_PREFIX, DELETIONS_PREFIX] {
        let listed = store
            .range(crate::store::RangeRequest {
                prefix: format!("{prefix}{node}/").into_bytes(),
                ..Default::default()
            })
            .await?;
        for kv in listed.kvs {
            match store.delete(&kv.key, Some(kv.mod_revision)).await {
                Ok(_) => dropped += 1,
                // Gone or rewritten meanwhile: skip it.
                Err(
                    crate::store::StoreError::NotFound { .. }
                    | crate::store::StoreError::Conflict { .. },
                ) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(dropped)
}

/// The environment variable that shortens a cron minute to N seconds (tests only), so a
/// scheduled snapshot fires within seconds while still following the cron schedule.
pub const TEST_MINUTE_SECONDS_ENV: &str = "K3RS_TEST_SNAPSHOT_MINUTE_SECONDS";

/// The server's snapshot settings (`--etcd-snapshot-*`, `--etcd-s3-*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotSettings {
    /// `--etcd-snapshot-dir`.
    pub dir: PathBuf,
    /// `--etcd-snapshot-compress`.
    pub compress: bool,
    /// `--etcd-snapshot-retention`: scheduled snapshots kept locally.
    pub retention: usize,
    /// `--etcd-snapshot-schedule-cron`; `None` with `--etcd-disable-snapshots`.
    pub schedule: Option<String>,
    /// `--etcd-snapshot-name`: base name of scheduled snapshots.
    pub scheduled_name: String,
    /// This node's name, part of every snapshot name.
    pub node_name: String,
    /// `--etcd-s3` and friends.
    pub s3: Option<S3Config>,
}

/// What `ls` shows and the metadata file holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRecord {
    /// The file name (with `.gz` when compressed).
    pub name: String,
    /// `file:///…` or `s3://bucket/key`.
    pub location: String,
    pub size: u64,
    /// RFC 3339.
    pub created_at: String,
    #[serde(default)]
    pub node: String,
    #[serde(default)]
    pub k3rs_version: String,
    #[serde(default)]
    pub revision: i64,
    #[serde(default)]
    pub compressed: bool,
    /// SHA-256 of the file as stored (compressed bytes when compressed).
    #[serde(default)]
    pub sha256: String,
}

/// Per-request overrides the CLI sends (its own `--dir`, `--snapshot-compress`, S3 flags).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotOptions {
    #[serde(default)]
    pub dir: Option<String>,
    #[serde(default)]
    pub compress: Option<bool>,
    #[serde(default)]
    pub s3: Option<S3Config>,
}

/// `POST /k3rs/v1/etcd-snapshots` (save).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SaveRequest {
    /// Base name; default `on-demand`.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(flatten)]
    pub options: SnapshotOptions,
}

/// `POST /k3rs/v1/etcd-snapshots/prune`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneRequest {
    #[serde(default)]
    pub name: Option<String>,
    pub retention: usize,
    #[serde(flatten)]
    pub options: SnapshotOptions,
}

/// `POST /k3rs/v1/etcd-snapshots/delete`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteRequest {
    pub names: Vec<String>,
    #[serde(flatten)]
    pub options: SnapshotOptions,
}

/// The answer to save, delete and prune.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotResult {
    /// Snapshots written (save) or removed (delete, prune), per location.
    pub items: Vec<SnapshotRecord>,
    /// S3 problems; the local part of the operation still happened.
    #[serde(default)]
    pub s3_errors: Vec<String>,
}

/// Why a snapshot operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Failed(String),
}

impl SnapshotError {
    fn into_api(self) -> ApiError {
        match self {
            SnapshotError::Invalid(m) => ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", m),
            SnapshotError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, "NotFound", m),
            SnapshotError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "AlreadyExists", m),
            SnapshotError::Failed(m) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", m)
            }
        }
    }
}

fn io_failed(what: String) -> impl FnOnce(std::io::Error) -> SnapshotError {
    move |e| SnapshotError::Failed(format!("{what}: {e}"))
}

/// Which kind of snapshot a save makes (decides the default name and retention).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    OnDemand,
    Scheduled,
}

/// Saves, lists, deletes and prunes snapshots; one operation at a time.
pub struct SnapshotManager {
    store: Store,
    settings: SnapshotSettings,
    busy: tokio::sync::Mutex<()>,
}

impl SnapshotManager {
    pub fn new(store: Store, settings: SnapshotSettings) -> Arc<SnapshotManager> {
        Arc::new(SnapshotManager {
            store,
            settings,
            busy: tokio::sync::Mutex::new(()),
        })
    }

    pub fn settings(&self) -> &SnapshotSettings {
        &self.settings
    }

    /// The snapshot directory a request works in: always the configured one. A request
    /// may name it (the CLI sends its `--dir`), but not another: an admin endpoint that
    /// wrote, listed or deleted in any directory a caller named would let one request
    /// remove any regular file of the host (k3s, too, uses the server's configuration).
    fn dir(&self, options: &SnapshotOptions) -> Result<PathBuf, SnapshotError> {
        let configured = &self.settings.dir;
        match options.dir.as_deref().filter(|d| !d.is_empty()) {
            None => Ok(configured.clone()),
            Some(asked) if same_dir(Path::new(asked), configured) => Ok(configured.clone()),
            Some(asked) => Err(SnapshotError::Invalid(format!(
                "snapshot directory {asked:?} is not this server's --etcd-snapshot-dir ({}): \
                 snapshots are saved, listed and deleted only there",
                configured.display()
            ))),
        }
    }

    /// The S3 location a request works with: the server's configured bucket, with the
    /// server's credentials. A request may repeat it (the CLI sends its `--s3-*` flags) but
    /// not name another endpoint, bucket or folder, nor turn S3 on when the server has none.
    fn s3(&self, options: &SnapshotOptions) -> Result<Option<S3Client>, SnapshotError> {
        let config = match (options.s3.as_ref(), self.settings.s3.as_ref()) {
            (None, configured) => configured,
            (Some(asked), Some(configured))
                if asked.endpoint == configured.endpoint
                    && asked.bucket == configured.bucket
                    && asked.folder.trim_matches('/') == configured.folder.trim_matches('/') =>
            {
                Some(configured)
            }
            (Some(asked), Some(configured)) => {
                return Err(SnapshotError::Invalid(format!(
                    "S3 bucket {:?} at {:?} (folder {:?}) is not this server's snapshot \
                     bucket ({:?} at {:?}, folder {:?}): configure --etcd-s3-* on the server",
                    asked.bucket,
                    asked.endpoint,
                    asked.folder,
                    configured.bucket,
                    configured.endpoint,
                    configured.folder
                )));
            }
            (Some(asked), None) => {
                return Err(SnapshotError::Invalid(format!(
                    "S3 bucket {:?} at {:?}: this server has no S3 snapshot storage; \
                     configure --etcd-s3-* on the server",
                    asked.bucket, asked.endpoint
                )));
            }
        };
        match config {
            Some(config) => S3Client::new(config)
                .map(Some)
                .map_err(|e| SnapshotError::Invalid(e.to_string())),
            None => Ok(None),
        }
    }

    /// Takes a snapshot, writes its metadata, uploads both to S3 when configured, and
    /// (scheduled snapshots) applies retention locally and on S3.
    pub async fn save(
        &self,
        request: &SaveRequest,
        kind: Kind,
    ) -> Result<SnapshotResult, SnapshotError> {
        let _busy = self.busy.lock().await;
        let base = match (&request.name, kind) {
            (Some(name), _) if !name.is_empty() => name.clone(),
            (_, Kind::OnDemand) => "on-demand".to_string(),
            (_, Kind::Scheduled) => self.settings.scheduled_name.clone(),
        };
        check_base_name(&base)?;
        let options = &request.options;
        let s3 = self.s3(options)?;
        let compress = options.compress.unwrap_or(self.settings.compress);
        let dir = self.dir(options)?;
        create_private_dir(&dir)?;
        create_private_dir(&dir.join(".metadata"))?;
        let now = jiff::Timestamp::now();
        let stem = format!("{base}-{}-{}", self.settings.node_name, now.as_second());
        let file_name = if compress {
            format!("{stem}.gz")
        } else {
            stem.clone()
        };
        let final_path = dir.join(&file_name);
        if final_path.exists() || dir.join(&stem).exists() {
            return Err(SnapshotError::Conflict(format!(
                "snapshot {file_name} already exists in {}; wait a second or choose another --name",
                dir.display()
            )));
        }
        let raw_path = if compress {
            dir.join(format!(".{stem}.raw"))
        } else {
            final_path.clone()
        };
        let _ = std::fs::remove_file(&raw_path);
        let info = self.store.save_snapshot(&raw_path).await.map_err(|e| {
            SnapshotError::Failed(format!("saving snapshot {}: {e}", raw_path.display()))
        })?;
        if compress {
            let (from, to) = (raw_path.clone(), final_path.clone());
            let compressed = tokio::task::spawn_blocking(move || gzip_file(&from, &to))
                .await
                .map_err(|e| SnapshotError::Failed(format!("compression task: {e}")))?;
            let _ = std::fs::remove_file(&raw_path);
            compressed.map_err(|e| {
                let _ = std::fs::remove_file(&final_path);
                SnapshotError::Failed(format!("compressing {}: {e}", final_path.display()))
            })?;
        }
        let sha256 = s3::file_sha256(&final_path)
            .await
            .map_err(io_failed(format!("hashing {}", final_path.display())))?;
        let size = std::fs::metadata(&final_path)
            .map_err(io_failed(format!("reading {}", final_path.display())))?
            .len();
        let record = SnapshotRecord {
            name: file_name.clone(),
            location: file_location(&final_path),
            size,
            created_at: now.round(jiff::Unit::Second).unwrap_or(now).to_string(),
            node: self.settings.node_name.clone(),
            k3rs_version: format!("v{}", env!("CARGO_PKG_VERSION")),
            revision: info.revision,
            compressed: compress,
            sha256,
        };
        let metadata_path = metadata_path(&dir, &file_name);
        write_json(&metadata_path, &record)?;
        tracing::info!(
            name = %file_name,
            size,
            revision = info.revision,
            path = %final_path.display(),
            "snapshot saved"
        );
        let mut result = SnapshotResult {
            items: vec![record.clone()],
            s3_errors: Vec::new(),
        };
        if kind == Kind::Scheduled {
            let prefix = format!("{base}-{}-", self.settings.node_name);
            if let Err(e) = prune_local(&dir, &prefix, self.settings.retention) {
                tracing::warn!(error = %e, "applying local snapshot retention");
            }
        }
        if let Some(client) = s3 {
            match upload(&client, &final_path, &record).await {
                Ok(remote) => {
                    result.items.push(remote);
                    if kind == Kind::Scheduled {
                        let prefix = format!("{base}-{}-", self.settings.node_name);
                        let keep = client.config().retention;
                        if let Err(e) = prune_s3(&client, &prefix, keep).await {
                            tracing::warn!(error = %e, "applying S3 snapshot retention");
                            result.s3_errors.push(e.to_string());
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, name = %file_name, "S3 upload failed; the local snapshot is kept");
                    result.s3_errors.push(format!(
                        "{e} (the local snapshot {} is kept)",
                        final_path.display()
                    ));
                }
            }
        }
        Ok(result)
    }

    /// Every snapshot, oldest first: this server's local ones, the other servers' local
    /// ones (as they published them), and (when configured) those on S3.
    pub async fn list(&self, options: &SnapshotOptions) -> Result<SnapshotResult, SnapshotError> {
        let dir = self.dir(options)?;
        let mut result = SnapshotResult {
            items: list_local(&dir)?,
            s3_errors: Vec::new(),
        };
        match self.published_by_others().await {
            Ok(items) => result
                .items
                .extend(items.into_iter().map(|(_, record)| record)),
            Err(e) => result
                .s3_errors
                .push(format!("other servers' snapshots: {e}")),
        }
        if let Some(client) = self.s3(options)? {
            match list_s3(&client).await {
                Ok(items) => result.items.extend(items),
                Err(e) => result.s3_errors.push(e.to_string()),
            }
        }
        result
            .items
            .sort_by(|a, b| (&a.created_at, &a.name).cmp(&(&b.created_at, &b.name)));
        Ok(result)
    }

    /// Deletes snapshots by name, locally and on S3. A name found nowhere is an error.
    pub async fn delete(&self, request: &DeleteRequest) -> Result<SnapshotResult, SnapshotError> {
        let _busy = self.busy.lock().await;
        if request.names.is_empty() {
            return Err(SnapshotError::Invalid(
                "name the snapshots to delete (see `k3rs etcd-snapshot ls`)".into(),
            ));
        }
        for name in &request.names {
            check_file_name(name)?;
        }
        let dir = self.dir(&request.options)?;
        let s3 = self.s3(&request.options)?;
        let local = list_local(&dir)?;
        let remote = match &s3 {
            Some(client) => list_s3(client)
                .await
                .map_err(|e| SnapshotError::Failed(e.to_string()))?,
            None => Vec::new(),
        };
        let others = self
            .published_by_others()
            .await
            .map_err(SnapshotError::Failed)?;
        let mut result = SnapshotResult::default();
        let mut missing = Vec::new();
        for name in &request.names {
            let mut found = false;
            for record in local.iter().filter(|r| &r.name == name) {
                remove_local(&dir, &record.name)?;
                result.items.push(record.clone());
                found = true;
            }
            if let Some(client) = &s3 {
                for record in remote.iter().filter(|r| &r.name == name) {
                    match remove_s3(client, &record.name).await {
                        Ok(()) => result.items.push(record.clone()),
                        Err(e) => result.s3_errors.push(e.to_string()),
                    }
                    found = true;
                }
            }
            if !found {
                // Another server's local snapshot: that server deletes it.
                for (node, record) in others.iter().filter(|(_, r)| &r.name == name) {
                    self.request_deletion(node, &record.name).await?;
                    result.items.push(record.clone());
                    found = true;
                }
            }
            if !found {
                missing.push(name.clone());
            }
        }
        if !missing.is_empty() && result.items.is_empty() {
            return Err(SnapshotError::NotFound(format!(
                "snapshot(s) not found: {}",
                missing.join(", ")
            )));
        }
        for name in missing {
            result.s3_errors.push(format!("snapshot {name} not found"));
        }
        Ok(result)
    }

    /// Keeps the newest `retention` snapshots whose names start with `<name>-<node>-`
    /// (name default `on-demand`), locally and on S3.
    pub async fn prune(&self, request: &PruneRequest) -> Result<SnapshotResult, SnapshotError> {
        let _busy = self.busy.lock().await;
        if request.retention == 0 {
            return Err(SnapshotError::Invalid(
                "--snapshot-retention must be at least 1".into(),
            ));
        }
        let base = request
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "on-demand".to_string());
        check_base_name(&base)?;
        let prefix = format!("{base}-{}-", self.settings.node_name);
        let dir = self.dir(&request.options)?;
        let mut result = SnapshotResult {
            items: prune_local(&dir, &prefix, request.retention)?,
            s3_errors: Vec::new(),
        };
        if let Some(client) = self.s3(&request.options)? {
            match prune_s3(&client, &prefix, request.retention).await {
                Ok(items) => result.items.extend(items),
                Err(e) => result.s3_errors.push(e.to_string()),
            }
        }
        Ok(result)
    }

    /// The local snapshots other servers published: (node, record).
    async fn published_by_others(&self) -> Result<Vec<(String, SnapshotRecord)>, String> {
        let own = format!("{RECORDS_PREFIX}{}/", self.settings.node_name);
        let range = self
            .store
            .range(crate::store::RangeRequest {
                prefix: RECORDS_PREFIX.as_bytes().to_vec(),
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for kv in range.kvs {
            let Ok(key) = std::str::from_utf8(&kv.key) else {
                continue;
            };
            if key.starts_with(&own) {
                continue;
            }
            let Some((node, _)) = key[RECORDS_PREFIX.len()..].split_once('/') else {
                continue;
            };
            match serde_json::from_slice::<SnapshotRecord>(&kv.value) {
                Ok(record) => out.push((node.to_string(), record)),
                Err(e) => crate::skip::warn_once(
                    &format!("snapshot-record/{key}"),
                    || tracing::warn!(key, error = %e, "skipping an unreadable snapshot record"),
                ),
            }
        }
        Ok(out)
    }

    async fn request_deletion(&self, node: &str, name: &str) -> Result<(), SnapshotError> {
        check_file_name(name)?;
        let key = format!("{DELETIONS_PREFIX}{node}/{name}");
        match self.store.create(key.as_bytes(), Vec::new()).await {
            Ok(_) | Err(crate::store::StoreError::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(SnapshotError::Failed(format!(
                "asking {node} to delete {name}: {e}"
            ))),
        }
    }

    /// Publishes this server's local snapshots (adds what is new, drops what is gone)
    /// and deletes those other servers asked to delete.
    pub async fn sync(&self) -> Result<(), String> {
        let node = &self.settings.node_name;
        let dir = &self.settings.dir;
        // Deletion requests first, so the records published below no longer show them.
        let requests = self
            .store
            .range(crate::store::RangeRequest {
                prefix: format!("{DELETIONS_PREFIX}{node}/").into_bytes(),
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        if !requests.kvs.is_empty() {
            let _busy = self.busy.lock().await;
            for kv in requests.kvs {
                let key = String::from_utf8_lossy(&kv.key).into_owned();
                let name = key.rsplit('/').next().unwrap_or_default();
                if check_file_name(name).is_ok() && dir.join(name).exists() {
                    match remove_local(dir, name) {
                        Ok(()) => tracing::info!(
                            snapshot = name,
                            "deleted a local snapshot at another server's request"
                        ),
                        Err(e) => {
                            tracing::warn!(snapshot = name, error = %e, "cannot delete a local snapshot another server asked to delete")
                        }
                    }
                }
                let _ = self.store.delete(&kv.key, Some(kv.mod_revision)).await;
            }
        }
        let local = if dir.exists() {
            list_local(dir).map_err(|e| e.to_string())?
        } else {
            Vec::new()
        };
        let own = format!("{RECORDS_PREFIX}{node}/");
        let published = self
            .store
            .range(crate::store::RangeRequest {
                prefix: own.as_bytes().to_vec(),
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        for record in &local {
            let key = format!("{own}{}", record.name);
            let value = serde_json::to_vec(record).map_err(|e| e.to_string())?;
            let written = match published.kvs.iter().find(|kv| kv.key == key.as_bytes()) {
                Some(kv) if kv.value == value => continue,
                Some(kv) => self
                    .store
                    .update(key.as_bytes(), value, kv.mod_revision)
                    .await
                    .map(|_| ()),
                None => self.store.create(key.as_bytes(), value).await.map(|_| ()),
            };
            written.map_err(|e| format!("publishing {}: {e}", record.name))?;
        }
        for kv in &published.kvs {
            let name = &kv.key[own.len()..];
            if !local.iter().any(|r| r.name.as_bytes() == name) {
                let _ = self.store.delete(&kv.key, Some(kv.mod_revision)).await;
            }
        }
        Ok(())
    }

    /// Runs [`SnapshotManager::sync`] every few seconds until the task is dropped.
    pub async fn run_sync(self: Arc<Self>) {
        loop {
            if let Err(e) = self.sync().await {
                tracing::debug!(error = %e, "publishing this server's snapshots (retrying)");
            }
            tokio::time::sleep(SYNC_PERIOD).await;
        }
    }

    /// Runs scheduled snapshots until the task is dropped.
    pub async fn run_schedule(self: Arc<Self>) {
        let Some(text) = self.settings.schedule.clone() else {
            return;
        };
        let schedule = match Schedule::parse(&text) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "scheduled snapshots disabled");
                return;
            }
        };
        let tz = jiff::tz::TimeZone::system();
        let clock = ScheduleClock::from_env();
        tracing::info!(schedule = %text, retention = self.settings.retention, "scheduled snapshots enabled");
        loop {
            let now = clock.now();
            let Some(next) = schedule.next_after(now, &tz) else {
                tracing::warn!(schedule = %text, "the snapshot schedule never fires");
                return;
            };
            tokio::time::sleep(clock.real_delay(now, next)).await;
            let request = SaveRequest::default();
            match self.save(&request, Kind::Scheduled).await {
                Ok(result) => {
                    for e in result.s3_errors {
                        tracing::warn!(error = %e, "scheduled snapshot: S3");
                    }
                }
                Err(e) => tracing::error!(error = %e, "scheduled snapshot failed"),
            }
        }
    }
}

/// Time as the scheduler sees it: real time, or (tests) a clock on which a cron minute
/// lasts `K3RS_TEST_SNAPSHOT_MINUTE_SECONDS` real seconds.
struct ScheduleClock {
    started: std::time::Instant,
    origin: jiff::Timestamp,
    /// Virtual seconds per real second.
    speed: f64,
}

impl ScheduleClock {
    fn from_env() -> ScheduleClock {
        let speed = std::env::var(TEST_MINUTE_SECONDS_ENV)
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|s| *s > 0.0)
            .map_or(1.0, |minute_seconds| 60.0 / minute_seconds);
        if speed != 1.0 {
            tracing::warn!(
                "{TEST_MINUTE_SECONDS_ENV} is set: the snapshot schedule runs {speed}x fast (tests only)"
            );
        }
        ScheduleClock {
            started: std::time::Instant::now(),
            origin: jiff::Timestamp::now(),
            speed,
        }
    }

    fn now(&self) -> jiff::Timestamp {
        let elapsed = self.started.elapsed().as_secs_f64() * self.speed;
        self.origin
            .checked_add(jiff::SignedDuration::from_secs_f64(elapsed))
            .unwrap_or(self.origin)
    }

    fn real_delay(&self, now: jiff::Timestamp, next: jiff::Timestamp) -> Duration {
        let virtual_secs = next.duration_since(now).as_secs_f64().max(0.0);
        Duration::from_secs_f64(virtual_secs / self.speed)
    }
}

/// What the snapshot endpoints tell a caller outside `system:masters` it may not do.
pub const ADMIN_ACTION: &str = "manage etcd snapshots";

/// Serves `/k3rs/v1/etcd-snapshots[...]`: admin (`system:masters`) only.
pub async fn serve(
    manager: Option<&Arc<SnapshotManager>>,
    identity: &Identity,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Response {
    match serve_inner(manager, identity, method, path, body).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn serve_inner(
    manager: Option<&Arc<SnapshotManager>>,
    identity: &Identity,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    crate::apiserver::auth::authz::require_masters(identity, ADMIN_ACTION)?;
    let Some(manager) = manager else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "snapshots are not available on this server",
        ));
    };
    let action = path
        .strip_prefix(API_PREFIX)
        .unwrap_or("")
        .trim_matches('/');
    fn parse<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(T::default());
        }
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid snapshot request: {e}")))
    }
    let result = match (method, action) {
        (&Method::GET, "") => manager.list(&SnapshotOptions::default()).await,
        (&Method::POST, "list") => manager.list(&parse::<SnapshotOptions>(body)?).await,
        (&Method::POST, "") => {
            manager
                .save(&parse::<SaveRequest>(body)?, Kind::OnDemand)
                .await
        }
        (&Method::POST, "prune") => manager.prune(&parse::<PruneRequest>(body)?).await,
        (&Method::POST, "delete") => manager.delete(&parse::<DeleteRequest>(body)?).await,
        (&Method::DELETE, name) if !name.is_empty() && !name.contains('/') => {
            manager
                .delete(&DeleteRequest {
                    names: vec![name.to_string()],
                    options: SnapshotOptions::default(),
                })
                .await
        }
        _ => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
            ));
        }
    };
    let result = result.map_err(SnapshotError::into_api)?;
    let body = serde_json::to_vec(&result).unwrap_or_default();
    Ok(crate::apiserver::http::handlers::json_response(
        StatusCode::OK,
        body,
    ))
}

/// Whether two paths name the same directory (both resolved when they exist, so a
/// symlink or `..` cannot smuggle in another one).
fn same_dir(asked: &Path, configured: &Path) -> bool {
    let resolve = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    asked.is_absolute() && resolve(asked) == resolve(configured)
}

fn check_base_name(name: &str) -> Result<(), SnapshotError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(SnapshotError::Invalid(format!(
            "invalid snapshot name {name:?}: use letters, digits, '-', '_' and '.', not starting with '.'"
        )))
    }
}

fn check_file_name(name: &str) -> Result<(), SnapshotError> {
    check_base_name(name)
}

fn create_private_dir(dir: &Path) -> Result<(), SnapshotError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_failed(format!("creating {}", dir.display())))
}

fn metadata_path(dir: &Path, file_name: &str) -> PathBuf {
    dir.join(".metadata").join(format!("{file_name}.json"))
}

fn file_location(path: &Path) -> String {
    format!("file://{}", path.display())
}

fn write_json(path: &Path, record: &SnapshotRecord) -> Result<(), SnapshotError> {
    let data = serde_json::to_vec_pretty(record).unwrap_or_default();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(io_failed(format!("writing {}", path.display())))
}

fn gzip_file(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut input = std::fs::File::open(from)?;
    let output = std::fs::File::create(to)?;
    let mut encoder = flate2::write::GzEncoder::new(output, flate2::Compression::default());
    std::io::copy(&mut input, &mut encoder)?;
    encoder.finish()?.sync_all()
}

/// Snapshots in a local directory (metadata files when present, else the file itself).
fn list_local(dir: &Path) -> Result<Vec<SnapshotRecord>, SnapshotError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(SnapshotError::Failed(format!(
                "reading {}: {e}",
                dir.display()
            )));
        }
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with('.') || !path.is_file() || name.ends_with(".partial") {
            continue;
        }
        let meta = std::fs::read(metadata_path(dir, &name))
            .ok()
            .and_then(|d| serde_json::from_slice::<SnapshotRecord>(&d).ok());
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        let record = match meta {
            Some(mut m) => {
                m.location = file_location(&path);
                m.size = size;
                m
            }
            None => SnapshotRecord {
                name: name.clone(),
                location: file_location(&path),
                size,
                created_at: entry
                    .metadata()
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| jiff::Timestamp::try_from(t).ok())
                    .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
                    .unwrap_or_default(),
                node: String::new(),
                k3rs_version: String::new(),
                revision: 0,
                compressed: name.ends_with(".gz"),
                sha256: String::new(),
            },
        };
        out.push(record);
    }
    Ok(out)
}

fn remove_local(dir: &Path, name: &str) -> Result<(), SnapshotError> {
    std::fs::remove_file(dir.join(name)).map_err(io_failed(format!("deleting {name}")))?;
    let _ = std::fs::remove_file(metadata_path(dir, name));
    tracing::info!(name, "snapshot deleted");
    Ok(())
}

/// Deletes all but the newest `keep` local snapshots starting with `prefix`.
fn prune_local(
    dir: &Path,
    prefix: &str,
    keep: usize,
) -> Result<Vec<SnapshotRecord>, SnapshotError> {
    let mut matching: Vec<SnapshotRecord> = list_local(dir)?
        .into_iter()
        .filter(|r| r.name.starts_with(prefix))
        .collect();
    sort_newest_first(&mut matching);
    let mut removed = Vec::new();
    for record in matching.into_iter().skip(keep) {
        remove_local(dir, &record.name)?;
        removed.push(record);
    }
    Ok(removed)
}

/// Newest first: by the unix time in the name (`…-<ts>[.gz]`), then creation time.
fn sort_newest_first(records: &mut [SnapshotRecord]) {
    let ts = |r: &SnapshotRecord| {
        r.name
            .trim_end_matches(".gz")
            .rsplit('-')
            .next()
            .and_then(|t| t.parse::<i64>().ok())
            .unwrap_or(0)
    };
    records.sort_by(|a, b| (ts(b), &b.created_at, &b.name).cmp(&(ts(a), &a.created_at, &a.name)));
}

async fn upload(
    client: &S3Client,
    path: &Path,
    record: &SnapshotRecord,
) -> Result<SnapshotRecord, s3::S3Error> {
    let config = client.config();
    let key = config.key(&record.name);
    client.put_file(&key, path).await?;
    let mut remote = record.clone();
    remote.location = config.location(&key);
    let metadata = serde_json::to_vec_pretty(&remote).unwrap_or_default();
    client
        .put_bytes(
            &config.key(&format!(".metadata/{}.json", record.name)),
            metadata,
        )
        .await?;
    tracing::info!(location = %remote.location, size = record.size, "snapshot uploaded to S3");
    Ok(remote)
}

async fn list_s3(client: &S3Client) -> Result<Vec<SnapshotRecord>, s3::S3Error> {
    let config = client.config();
    let folder_prefix = config.key("");
    let prefix = if folder_prefix.is_empty() {
        String::new()
    } else {
        format!("{}/", folder_prefix.trim_end_matches('/'))
    };
    let objects = client.list(&prefix).await?;
    let mut out = Vec::new();
    for object in &objects {
        let Some(name) = object.key.strip_prefix(&prefix) else {
            continue;
        };
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            continue;
        }
        let metadata_key = config.key(&format!(".metadata/{name}.json"));
        let mut record = match objects.iter().any(|o| o.key == metadata_key) {
            true => client
                .get_bytes(&metadata_key)
                .await
                .ok()
                .and_then(|d| serde_json::from_slice::<SnapshotRecord>(&d).ok()),
            false => None,
        }
        .unwrap_or_else(|| SnapshotRecord {
            name: name.to_string(),
            location: String::new(),
            size: object.size,
            created_at: object
                .last_modified
                .parse::<jiff::Timestamp>()
                .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
                .unwrap_or_default(),
            node: String::new(),
            k3rs_version: String::new(),
            revision: 0,
            compressed: name.ends_with(".gz"),
            sha256: String::new(),
        });
        record.name = name.to_string();
        record.location = config.location(&object.key);
        record.size = object.size;
        out.push(record);
    }
    Ok(out)
}

async fn remove_s3(client: &S3Client, name: &str) -> Result<(), s3::S3Error> {
    let config = client.config();
    client.delete(&config.key(name)).await?;
    match client
        .delete(&config.key(&format!(".metadata/{name}.json")))
        .await
    {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e),
    }
    tracing::info!(location = %config.location(&config.key(name)), "snapshot deleted from S3");
    Ok(())
}

async fn prune_s3(
    client: &S3Client,
    prefix: &str,
    keep: usize,
) -> Result<Vec<SnapshotRecord>, s3::S3Error> {
    let mut matching: Vec<SnapshotRecord> = list_s3(client)
        .await?
        .into_iter()
        .filter(|r| r.name.starts_with(prefix))
        .collect();
    sort_newest_first(&mut matching);
    let mut removed = Vec::new();
    for record in matching.into_iter().skip(keep) {
        remove_s3(client, &record.name).await?;
        removed.push(record);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, created: &str) -> SnapshotRecord {
        SnapshotRecord {
            name: name.into(),
            location: String::new(),
            size: 0,
            created_at: created.into(),
            node: String::new(),
            k3rs_version: String::new(),
            revision: 0,
            compressed: false,
            sha256: String::new(),
        }
    }

    #[test]
    fn newest_first_by_name_timestamp() {
        let mut r = vec![
            record("on-demand-n-100", "b"),
            record("on-demand-n-300.gz", "a"),
            record("on-demand-n-200", "c"),
        ];
        sort_newest_first(&mut r);
        let names: Vec<&str> = r.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["on-demand-n-300.gz", "on-demand-n-200", "on-demand-n-100"]
        );
    }

    #[test]
    fn names_are_checked() {
        assert!(check_base_name("on-demand").is_ok());
        assert!(check_base_name("pre_upgrade.1").is_ok());
        for bad in ["", "../x", "a/b", ".hidden", "a b", "x\n"] {
            assert!(check_base_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn local_listing_uses_metadata_and_skips_hidden_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join(".metadata")).expect("mkdir");
        std::fs::write(dir.path().join("on-demand-n-1"), b"data").expect("write");
        std::fs::write(dir.path().join(".on-demand-n-2.raw"), b"tmp").expect("write");
        std::fs::write(dir.path().join("x.partial"), b"tmp").expect("write");
        let mut meta = record("on-demand-n-1", "2024-01-01T00:00:00Z");
        meta.revision = 42;
        write_json(&metadata_path(dir.path(), "on-demand-n-1"), &meta).expect("json");
        let list = list_local(dir.path()).expect("list");
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].revision, 42);
        assert_eq!(list[0].size, 4);
        assert!(list[0].location.starts_with("file:///"));
        let removed = prune_local(dir.path(), "on-demand-n-", 1).expect("prune");
        assert!(removed.is_empty());
    }
}
