//! Auto-deployed manifests (k3s's deploy controller, "AddOns"): every `*.yaml`, `*.yml` and
//! `*.json` under `<data-dir>/server/manifests/` is applied at start and again whenever it
//! changes, tracked by an `addons.k3rs.io` Addon in `kube-system` named after the file (up
//! to its first dot).
//!
//! Owns that folder's packaged files (`packaged.rs`, from `embedded/manifests/`), the Addon
//! CRD and Addon objects (`addon.rs`), and the objects manifests apply (`apply.rs`: server-side
//! apply with the field manager `k3rs-deploy`). `manifest.rs` is the pure part: which files
//! count, parsing, checksums.
//!
//! Behaviour, as k3s: the folder is polled every second (mtime and size, then the SHA-256
//! against the Addon's `spec.checksum`), so a new or edited file is applied within about a
//! second and an unchanged one is not applied again; every file is applied once at start.
//! `foo.yaml.skip` next to `foo.yaml` skips it; dotfiles and other extensions are ignored.
//! Removing a file leaves its objects in the cluster. An object removed from a file is
//! deleted when the file is next applied (the Addon's `status.appliedObjects` is the list
//! of what the file owns). `--disable=<name>` deletes a file named `<name>.yaml` (or a folder
//! `<name>/`), the objects its Addon recorded, and the Addon. A file that cannot be read,
//! parsed or applied gets a Warning Event on its Addon (`ReadManifestFailed`,
//! `ParseManifestFailed`, `ApplyManifestFailed`; success is `ApplyingManifest` then
//! `AppliedManifest`, removal `DeletingManifest`; source component `deploy`) and a warning
//! in the log; it is retried when it changes or 15 s later, and never stops the server or
//! the other files.
//!
//! Runs on every server with the supervisor's identity (`system:masters`), through the API
//! only: it may not touch `store` or API server internals.

pub mod addon;
pub mod apply;
pub mod manifest;
pub mod packaged;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::controllers::events::{EventType, Recorder};
use manifest::ObjectRef;

/// The source component of the Events (k3s's controller name).
pub const COMPONENT: &str = "deploy";
/// How often the folder is looked at.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How soon a file that failed is tried again when it has not changed (k3s's interval).
const RETRY_FAILED: Duration = Duration::from_secs(15);
/// How deep folders under the manifests folder are followed (symlink loops end here).
const MAX_DEPTH: usize = 8;

/// The deploy loop's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// `<data-dir>/server/manifests`.
    pub manifests_dir: PathBuf,
    /// `--disable`: file (or folder) names whose objects are deleted.
    pub disables: Vec<String>,
}

impl Config {
    /// The manifests folder of `data_dir`.
    pub fn for_data_dir(data_dir: &Path, disables: Vec<String>) -> Config {
        Config {
            manifests_dir: data_dir.join("server").join("manifests"),
            disables,
        }
    }
}

/// Writes the packaged manifests (see [`packaged::stage`]).
pub fn stage(config: &Config) -> anyhow::Result<()> {
    packaged::stage(&config.manifests_dir, &config.disables)
}

/// Creates the Addon CRD, then applies the folder's manifests every [`POLL_INTERVAL`] until
/// dropped.
pub async fn run(client: kube::Client, config: Config) {
    addon::ensure_definition(&client).await;
    tracing::info!(dir = %config.manifests_dir.display(), "deploying manifests");
    let mut deployer = Deployer::new(client, config);
    let mut force = true;
    loop {
        deployer.pass(force).await;
        force = false;
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// What the loop remembers of a file between passes.
struct Tracked {
    /// mtime and size when last read.
    stat: (SystemTime, u64),
    checksum: String,
    /// When the last attempt failed (`None`: applied).
    failed_at: Option<Instant>,
}

/// A file found in the folder.
struct Found {
    path: PathBuf,
    relative: PathBuf,
    file_name: String,
    stat: (SystemTime, u64),
}

struct Deployer {
    client: kube::Client,
    config: Config,
    applier: apply::Applier,
    recorder: Recorder,
    tracked: HashMap<PathBuf, Tracked>,
    /// Disabled files whose removal failed, and when.
    removal_failed: HashMap<PathBuf, Instant>,
}

impl Deployer {
    fn new(client: kube::Client, config: Config) -> Deployer {
        Deployer {
            applier: apply::Applier::new(client.clone()),
            recorder: Recorder::new(client.clone(), COMPONENT),
            client,
            config,
            tracked: HashMap::new(),
            removal_failed: HashMap::new(),
        }
    }

    /// One look at the folder: removes disabled files, applies new and changed ones.
    async fn pass(&mut self, force: bool) {
        let files = match walk(&self.config.manifests_dir) {
            Ok(files) => files,
            Err(e) => {
                tracing::debug!(dir = %self.config.manifests_dir.display(), error = %e, "cannot list the manifests folder");
                return;
            }
        };
        let skips = manifest::skip_markers(files.iter().map(|f| f.file_name.as_str()));
        let mut present = HashSet::new();
        for file in files {
            if manifest::is_disabled(&file.relative, &self.config.disables) {
                let due = self
                    .removal_failed
                    .get(&file.path)
                    .is_none_or(|at| at.elapsed() >= RETRY_FAILED);
                if force || due {
                    self.remove(&file).await;
                }
                continue;
            }
            if manifest::should_skip(&file.file_name, &skips) {
                continue;
            }
            present.insert(file.path.clone());
            self.consider(&file, force).await;
        }
        // Files that went away: forgotten, their objects stay (as k3s).
        self.tracked.retain(|path, _| present.contains(path));
    }

    /// Applies `file` if it is new, changed, or failed long enough ago.
    async fn consider(&mut self, file: &Found, force: bool) {
        let previous = self.tracked.get(&file.path);
        if !force && let Some(previous) = previous {
            // Files pinned to the epoch (immutable stores) are always read, as in k3s.
            let unchanged = previous.stat == file.stat && file.stat.0 != SystemTime::UNIX_EPOCH;
            let retry_due = previous
                .failed_at
                .is_some_and(|at| at.elapsed() >= RETRY_FAILED);
            if unchanged && !retry_due {
                return;
            }
        }
        let content = match std::fs::read(&file.path) {
            Ok(content) => content,
            Err(e) => {
                let message = format!("Read manifest at {:?} failed: {e}", file.path);
                self.warn(file, "ReadManifestFailed", &message).await;
                self.tracked.insert(
                    file.path.clone(),
                    Tracked {
                        stat: file.stat,
                        checksum: String::new(),
                        failed_at: Some(Instant::now()),
                    },
                );
                return;
            }
        };
        let checksum = manifest::checksum(&content);
        let previous = self.tracked.get(&file.path);
        if !force
            && let Some(previous) = previous
            && previous.checksum == checksum
            && previous.failed_at.is_none()
        {
            // Touched, not changed.
            self.tracked.insert(
                file.path.clone(),
                Tracked {
                    stat: file.stat,
                    checksum,
                    failed_at: None,
                },
            );
            return;
        }
        // Compare with the Addon only for a file this loop has not applied or failed yet
        // (one applied by an earlier run of the server, say).
        let compare = !force && previous.is_none();
        let outcome = self.deploy(file, &content, &checksum, compare).await;
        self.tracked.insert(
            file.path.clone(),
            Tracked {
                stat: file.stat,
                checksum,
                failed_at: outcome.is_err().then(Instant::now),
            },
        );
    }

    /// Records a Warning Event on the file's Addon (created if needed) and logs it.
    async fn warn(&self, file: &Found, reason: &str, message: &str) {
        tracing::warn!(path = %file.path.display(), reason, "{message}");
        let name = manifest::addon_name(&file.file_name);
        match addon::get_or_create(&self.client, name, &file.path.to_string_lossy()).await {
            Ok(addon) => {
                self.recorder
                    .record(&addon.reference(), EventType::Warning, reason, message)
                    .await;
            }
            Err(e) => {
                tracing::warn!(addon = name, error = %apply::describe(&e), "cannot record the failure on the Addon")
            }
        }
    }

    /// Applies one file's objects and records them on its Addon.
    async fn deploy(
        &self,
        file: &Found,
        content: &[u8],
        checksum: &str,
        compare: bool,
    ) -> Result<(), ()> {
        let name = manifest::addon_name(&file.file_name);
        let source = file.path.to_string_lossy().into_owned();
        let addon = match addon::get_or_create(&self.client, name, &source).await {
            Ok(addon) => addon,
            Err(e) => {
                tracing::warn!(path = %file.path.display(), addon = name, error = %apply::describe(&e), "cannot create the Addon of a manifest; it is not applied");
                return Err(());
            }
        };
        if compare && addon.checksum == checksum {
            tracing::debug!(path = %file.path.display(), "manifest unchanged since it was applied");
            return Ok(());
        }
        let json = file.file_name.to_ascii_lowercase().ends_with(".json");
        let mut objects = match manifest::parse(content, json) {
            Ok(objects) => objects,
            Err(e) => {
                let message = format!("Parse manifest at {source:?} failed: {e}");
                tracing::warn!(path = %file.path.display(), reason = "ParseManifestFailed", "{message}");
                self.event(&addon, EventType::Warning, "ParseManifestFailed", &message)
                    .await;
                return Err(());
            }
        };
        manifest::apply_order(&mut objects);
        self.event(
            &addon,
            EventType::Normal,
            "ApplyingManifest",
            &format!("Applying manifest at {source:?}"),
        )
        .await;
        let mut applied: Vec<ObjectRef> = Vec::new();
        let mut errors = Vec::new();
        for object in &objects {
            match self.applier.apply(object).await {
                Ok(located) => {
                    if !applied.contains(&located) {
                        applied.push(located);
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            let message = format!(
                "Applying manifest at {source:?} failed: {}",
                errors.join("; ")
            );
            tracing::warn!(path = %file.path.display(), reason = "ApplyManifestFailed", "{message}");
            self.event(&addon, EventType::Warning, "ApplyManifestFailed", &message)
                .await;
            // What did apply is owned by the file too (so --disable finds it); the checksum
            // stays the last good one, so the file is applied again.
            let mut owned = addon.applied.clone();
            for located in applied {
                if !owned.iter().any(|o| o.same_object(&located)) {
                    owned.push(located);
                }
            }
            if let Err(e) =
                addon::record_applied(&self.client, name, &source, &addon.checksum, &owned).await
            {
                tracing::warn!(addon = name, error = %apply::describe(&e), "cannot record the applied objects on the Addon");
            }
            return Err(());
        }
        // Objects the file no longer has are deleted (k3s prunes them too); one that cannot
        // be deleted stays on the list for next time.
        let stale: Vec<ObjectRef> = addon
            .applied
            .iter()
            .filter(|old| !applied.iter().any(|new| new.same_object(old)))
            .cloned()
            .collect();
        for stale in stale {
            if let Err(e) = self.applier.delete(&stale).await {
                tracing::warn!(path = %file.path.display(), error = %e, "cannot delete an object the manifest no longer has");
                applied.push(stale);
            }
        }
        if let Err(e) = addon::record_applied(&self.client, name, &source, checksum, &applied).await
        {
            tracing::warn!(addon = name, error = %apply::describe(&e), "cannot record the applied manifest on its Addon; it will be applied again");
            return Err(());
        }
        self.event(
            &addon,
            EventType::Normal,
            "AppliedManifest",
            &format!("Applied manifest at {source:?}"),
        )
        .await;
        tracing::info!(path = %file.path.display(), objects = applied.len(), "applied manifest");
        Ok(())
    }

    /// `--disable`: deletes what the file's Addon recorded and what the file names, then
    /// the file and the Addon.
    async fn remove(&mut self, file: &Found) {
        let name = manifest::addon_name(&file.file_name);
        let addon = match addon::get(&self.client, name).await {
            Ok(addon) => addon,
            Err(e) => {
                tracing::warn!(addon = name, error = %apply::describe(&e), "cannot read the Addon of a disabled manifest");
                self.removal_failed
                    .insert(file.path.clone(), Instant::now());
                return;
            }
        };
        let mut targets: Vec<ObjectRef> = addon
            .as_ref()
            .map(|a| a.applied.clone())
            .unwrap_or_default();
        let json = file.file_name.to_ascii_lowercase().ends_with(".json");
        if let Ok(objects) = std::fs::read(&file.path)
            .map_err(drop)
            .and_then(|content| manifest::parse(&content, json).map_err(drop))
        {
            targets.extend(objects.iter().map(manifest::reference));
        }
        let mut errors = Vec::new();
        for target in &targets {
            if let Err(e) = self.applier.delete(target).await {
                errors.push(e);
            }
        }
        if !errors.is_empty() {
            tracing::warn!(path = %file.path.display(), errors = %errors.join("; "), "cannot delete the objects of a disabled manifest; retrying");
            self.removal_failed
                .insert(file.path.clone(), Instant::now());
            return;
        }
        if let Err(e) = std::fs::remove_file(&file.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %file.path.display(), error = %e, "cannot remove a disabled manifest");
            self.removal_failed
                .insert(file.path.clone(), Instant::now());
            return;
        }
        if let Some(addon) = &addon {
            let message = format!("Deleting manifest at {:?}", file.path);
            self.event(addon, EventType::Normal, "DeletingManifest", &message)
                .await;
        }
        if let Err(e) = addon::delete(&self.client, name).await {
            tracing::warn!(addon = name, error = %apply::describe(&e), "cannot delete the Addon of a disabled manifest");
        }
        self.removal_failed.remove(&file.path);
        self.tracked.remove(&file.path);
        tracing::info!(path = %file.path.display(), objects = targets.len(), "disabled: removed the manifest and deleted its objects");
    }

    async fn event(&self, addon: &addon::Addon, kind: EventType, reason: &str, message: &str) {
        self.recorder
            .record(&addon.reference(), kind, reason, message)
            .await;
    }
}

/// Every file under `base` (following symlinks), sorted by path.
fn walk(base: &Path) -> std::io::Result<Vec<Found>> {
    let mut found = Vec::new();
    walk_into(base, base, 0, &mut found)?;
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

fn walk_into(base: &Path, dir: &Path, depth: usize, found: &mut Vec<Found>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let path = entry.path();
        // A file that vanished between listing and stat is simply not there.
        let Ok(metadata) = std::fs::metadata(&path) else {
            continue;
        };
        if metadata.is_dir() {
            if depth < MAX_DEPTH {
                // An unreadable subfolder does not hide the rest.
                if let Err(e) = walk_into(base, &path, depth + 1, found) {
                    tracing::debug!(dir = %path.display(), error = %e, "cannot list a manifests subfolder");
                }
            }
            continue;
        }
        let Some(file_name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        let relative = path.strip_prefix(base).unwrap_or(&path).to_path_buf();
        found.push(Found {
            stat: (
                metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                metadata.len(),
            ),
            path,
            relative,
            file_name,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_lists_files_in_subfolders_sorted() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("b.yaml"), "x").expect("write");
        std::fs::write(dir.path().join("a.yaml.skip"), "").expect("write");
        std::fs::write(dir.path().join("sub/c.json"), "{}").expect("write");
        let files = walk(dir.path()).expect("walk");
        let relative: Vec<_> = files
            .iter()
            .map(|f| f.relative.to_string_lossy().into_owned())
            .collect();
        assert_eq!(relative, ["a.yaml.skip", "b.yaml", "sub/c.json"]);
        assert_eq!(files[1].stat.1, 1);
        assert!(walk(&dir.path().join("missing")).is_err());
    }
}
