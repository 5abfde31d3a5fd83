//! Pod volumes under `<root>/pods/<uid>/volumes/<plugin>/<name>`: emptyDir (a directory, or a
//! tmpfs for `medium: Memory` sized by `sizeLimit`), configMap, secret, downwardAPI and
//! projected (written with the kubelet's atomic `..data` symlink swap, so a running container
//! sees an update land all at once; `serviceAccountToken` sources from `kubelet::tokens`), and
//! hostPath with its type checks.
//!
//! Reads ConfigMaps and Secrets through the API; touches the filesystem only under the pod's
//! directory (and hostPath's `…OrCreate` paths, as the kubelet does).

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Pod, Volume};

use super::env::{self, EnvContext, Sources};
use crate::kubelet::tokens::TokenManager;

const DEFAULT_MODE: i32 = 0o644;

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("configmap \"{0}\" not found")]
    ConfigMapNotFound(String),
    #[error("secret \"{0}\" not found")]
    SecretNotFound(String),
    #[error("configmap references non-existent config key: {0}")]
    ConfigMapKey(String),
    #[error("references non-existent secret key: {0}")]
    SecretKey(String),
    #[error("hostPath type check failed: {path} is not a {kind}")]
    HostPathType { path: String, kind: &'static str },
    #[error("invalid path {0:?}: must be relative and may not contain '..'")]
    BadPath(String),
    #[error("volume type not supported by this kubelet")]
    Unsupported,
    #[error(transparent)]
    Token(#[from] crate::kubelet::tokens::TokenError),
    #[error(transparent)]
    Env(#[from] env::EnvError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> VolumeError {
    let what = what.into();
    move |source| VolumeError::Io { what, source }
}

/// A prepared volume: where it is on the host and whether containers must see it read-only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    pub host_path: PathBuf,
    pub read_only: bool,
}

pub fn pod_dir(root: &Path, uid: &str) -> PathBuf {
    root.join("pods").join(uid)
}

fn plugin_dir(root: &Path, uid: &str, plugin: &str, name: &str) -> PathBuf {
    pod_dir(root, uid).join("volumes").join(plugin).join(name)
}

/// Prepares (or refreshes) every volume of `pod`.
pub async fn setup(
    root: &Path,
    pod: &Pod,
    ctx: &EnvContext<'_>,
    sources: &mut Sources,
    tokens: &TokenManager,
) -> Result<BTreeMap<String, Prepared>, (String, VolumeError)> {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let mut out = BTreeMap::new();
    for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let prepared = setup_one(root, uid, pod, volume, ctx, sources, tokens)
            .await
            .map_err(|e| (volume.name.clone(), e))?;
        out.insert(volume.name.clone(), prepared);
    }
    Ok(out)
}

async fn setup_one(
    root: &Path,
    uid: &str,
    pod: &Pod,
    volume: &Volume,
    ctx: &EnvContext<'_>,
    sources: &mut Sources,
    tokens: &TokenManager,
) -> Result<Prepared, VolumeError> {
    let name = &volume.name;
    if let Some(empty) = &volume.empty_dir {
        let dir = plugin_dir(root, uid, "kubernetes.io~empty-dir", name);
        std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
            .map_err(io_err(format!("chmod {}", dir.display())))?;
        if empty.medium.as_deref() == Some("Memory") && !is_mount_point(&dir) {
            let size = empty
                .size_limit
                .as_ref()
                .and_then(|q| crate::kubelet::args::bytes(&q.0));
            mount_tmpfs(&dir, size)
                .map_err(io_err(format!("mounting tmpfs on {}", dir.display())))?;
        }
        return Ok(Prepared {
            host_path: dir,
            read_only: false,
        });
    }
    if let Some(host) = &volume.host_path {
        check_host_path(Path::new(&host.path), host.type_.as_deref().unwrap_or(""))?;
        return Ok(Prepared {
            host_path: PathBuf::from(&host.path),
            read_only: false,
        });
    }
    let (plugin, files) = if let Some(cm) = &volume.config_map {
        let files = config_map_files(
            sources,
            &cm.name,
            cm.items.as_deref(),
            cm.default_mode.unwrap_or(DEFAULT_MODE),
            cm.optional.unwrap_or(false),
        )
        .await?;
        ("kubernetes.io~configmap", files)
    } else if let Some(secret) = &volume.secret {
        let name = secret.secret_name.clone().unwrap_or_default();
        let files = secret_files(
            sources,
            &name,
            secret.items.as_deref(),
            secret.default_mode.unwrap_or(DEFAULT_MODE),
            secret.optional.unwrap_or(false),
        )
        .await?;
        ("kubernetes.io~secret", files)
    } else if let Some(downward) = &volume.downward_api {
        let files = downward_files(
            ctx,
            pod,
            downward.items.as_deref().unwrap_or(&[]),
            downward.default_mode.unwrap_or(DEFAULT_MODE),
        )?;
        ("kubernetes.io~downward-api", files)
    } else if let Some(projected) = &volume.projected {
        let mode = projected.default_mode.unwrap_or(DEFAULT_MODE);
        let mut files = BTreeMap::new();
        for source in projected.sources.iter().flatten() {
            if let Some(cm) = &source.config_map {
                files.extend(
                    config_map_files(
                        sources,
                        &cm.name,
                        cm.items.as_deref(),
                        mode,
                        cm.optional.unwrap_or(false),
                    )
                    .await?,
                );
            }
            if let Some(secret) = &source.secret {
                files.extend(
                    secret_files(
                        sources,
                        &secret.name,
                        secret.items.as_deref(),
                        mode,
                        secret.optional.unwrap_or(false),
                    )
                    .await?,
                );
            }
            if let Some(downward) = &source.downward_api {
                files.extend(downward_files(
                    ctx,
                    pod,
                    downward.items.as_deref().unwrap_or(&[]),
                    mode,
                )?);
            }
            if let Some(token) = &source.service_account_token {
                let path = checked_path(&token.path)?;
                let jwt = tokens
                    .token(
                        pod,
                        token.audience.as_deref().unwrap_or(""),
                        token.expiration_seconds.unwrap_or(3600),
                    )
                    .await?;
                files.insert(path, (jwt.into_bytes(), mode as u32));
            }
        }
        ("kubernetes.io~projected", files)
    } else {
        return Err(VolumeError::Unsupported);
    };
    let dir = plugin_dir(root, uid, plugin, name);
    write_atomic(&dir, &files).map_err(io_err(format!("writing volume {}", dir.display())))?;
    Ok(Prepared {
        host_path: dir,
        read_only: true,
    })
}

type Files = BTreeMap<String, (Vec<u8>, u32)>;

fn checked_path(path: &str) -> Result<String, VolumeError> {
    let p = Path::new(path);
    if path.is_empty()
        || p.is_absolute()
        || p.components().any(|c| !matches!(c, Component::Normal(_)))
        || path.starts_with("..")
    {
        return Err(VolumeError::BadPath(path.to_string()));
    }
    Ok(path.to_string())
}

fn project(
    entries: BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: i32,
    missing: impl Fn(String) -> VolumeError,
    optional: bool,
) -> Result<Files, VolumeError> {
    let mut files = Files::new();
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                match entries.get(&item.key) {
                    Some(v) => {
                        let mode = item.mode.unwrap_or(default_mode) as u32;
                        files.insert(checked_path(&item.path)?, (v.clone(), mode));
                    }
                    None if optional => {}
                    None => return Err(missing(item.key.clone())),
                }
            }
        }
        _ => {
            for (k, v) in entries {
                files.insert(checked_path(&k)?, (v, default_mode as u32));
            }
        }
    }
    Ok(files)
}

async fn config_map_files(
    sources: &mut Sources,
    name: &str,
    items: Option<&[KeyToPath]>,
    mode: i32,
    optional: bool,
) -> Result<Files, VolumeError> {
    match sources.config_map(name).await? {
        Some(cm) => project(
            env::config_map_entries(cm),
            items,
            mode,
            VolumeError::ConfigMapKey,
            optional,
        ),
        None if optional => Ok(Files::new()),
        None => Err(VolumeError::ConfigMapNotFound(name.to_string())),
    }
}

async fn secret_files(
    sources: &mut Sources,
    name: &str,
    items: Option<&[KeyToPath]>,
    mode: i32,
    optional: bool,
) -> Result<Files, VolumeError> {
    match sources.secret(name).await? {
        Some(s) => project(
            env::secret_entries(s),
            items,
            mode,
            VolumeError::SecretKey,
            optional,
        ),
        None if optional => Ok(Files::new()),
        None => Err(VolumeError::SecretNotFound(name.to_string())),
    }
}

fn downward_files(
    ctx: &EnvContext<'_>,
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: i32,
) -> Result<Files, VolumeError> {
    let mut files = Files::new();
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            env::field_value(ctx, &f.field_path)?
        } else if let Some(r) = &item.resource_field_ref {
            let container = pod
                .spec
                .as_ref()
                .and_then(|s| {
                    super::spec::all_containers(s)
                        .find(|c| Some(c.name.as_str()) == r.container_name.as_deref())
                })
                .cloned()
                .unwrap_or_default();
            env::resource_value(
                ctx,
                &container,
                &r.resource,
                r.divisor.as_ref().map(|d| d.0.as_str()),
            )?
        } else {
            continue;
        };
        let mode = item.mode.unwrap_or(default_mode) as u32;
        files.insert(checked_path(&item.path)?, (value.into_bytes(), mode));
    }
    Ok(files)
}

/// A path made of plain components only: not empty, not absolute, no `.`/`..`/empty
/// component, none starting with `..`, no NUL, at most 4096 bytes.
fn is_clean_relative(rel: &str) -> bool {
    !rel.is_empty()
        && rel.len() <= 4096
        && !rel.contains('\0')
        && rel
            .split('/')
            .all(|part| !part.is_empty() && part != "." && !part.starts_with(".."))
}

/// What `..data` currently holds.
fn current_files(data: &Path) -> Option<Files> {
    fn walk(base: &Path, dir: &Path, out: &mut Files) -> io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                walk(base, &path, out)?;
            } else {
                let rel = path
                    .strip_prefix(base)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                let mode = entry.metadata()?.permissions().mode() & 0o7777;
                out.insert(rel, (std::fs::read(&path)?, mode));
            }
        }
        Ok(())
    }
    let mut out = Files::new();
    walk(data, data, &mut out).ok()?;
    Some(out)
}

/// Writes `files` under `dir` the kubelet's way: a fresh `..<timestamp>` directory, then an
/// atomic rename of the `..data` symlink onto it, with each top-level name a symlink through
/// `..data`. Returns whether anything changed.
pub fn write_atomic(dir: &Path, files: &Files) -> io::Result<bool> {
    // Keys and item paths come from objects: refuse any that would leave `dir` (absolute,
    // `..`, empty or `.` components, NUL, names starting with `..` that would collide with
    // the `..data` machinery) before anything is written, as kube's validation would have.
    if let Some(bad) = files.keys().find(|rel| !is_clean_relative(rel)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "volume file path {} is not a relative path inside the volume",
                crate::names::go_quote(&bad.chars().take(128).collect::<String>())
            ),
        ));
    }
    std::fs::create_dir_all(dir)?;
    let data_link = dir.join("..data");
    if data_link.exists() && current_files(&data_link).as_ref() == Some(files) {
        return Ok(false);
    }
    let old_target = std::fs::read_link(&data_link).ok();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let stamp = format!("..{}_{:09}", now.as_secs(), now.subsec_nanos());
    let new_dir = dir.join(&stamp);
    std::fs::create_dir(&new_dir)?;
    for (rel, (content, mode)) in files {
        let path = new_dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, content)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode & 0o7777))?;
    }
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&stamp, &tmp_link)?;
    std::fs::rename(&tmp_link, &data_link)?;
    let top: std::collections::BTreeSet<String> = files
        .keys()
        .filter_map(|k| k.split('/').next().map(str::to_string))
        .collect();
    for name in &top {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !top.contains(&name) {
            std::fs::remove_file(entry.path())?;
        }
    }
    if let Some(old) = old_target {
        let old = dir.join(old);
        if old != new_dir {
            let _ = std::fs::remove_dir_all(old);
        }
    }
    Ok(true)
}

fn check_host_path(path: &Path, kind: &str) -> Result<(), VolumeError> {
    let display = path.display().to_string();
    let meta = std::fs::metadata(path).ok();
    // The `…OrCreate` types create what is missing (as the kubelet does); then every type
    // is a check of what is there.
    let (what, is): (&'static str, fn(&std::fs::Metadata) -> bool) = match kind {
        "" => return Ok(()),
        "DirectoryOrCreate" | "Directory" => ("directory", |m| m.is_dir()),
        "FileOrCreate" | "File" => ("file", |m| m.is_file()),
        "Socket" => ("socket", |m| m.file_type().is_socket()),
        "CharDevice" => ("character device", |m| m.file_type().is_char_device()),
        "BlockDevice" => ("block device", |m| m.file_type().is_block_device()),
        _ => ("known hostPath type", |_| false),
    };
    if meta.is_none() && kind == "DirectoryOrCreate" {
        std::fs::create_dir_all(path).map_err(io_err(format!("creating {display}")))?;
        return std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .map_err(io_err(format!("chmod {display}")));
    }
    if meta.is_none() && kind == "FileOrCreate" {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io_err(format!("creating {display}")))?;
        return Ok(());
    }
    if meta.as_ref().is_some_and(is) {
        Ok(())
    } else {
        Err(VolumeError::HostPathType {
            path: display,
            kind: what,
        })
    }
}

/// Mount points under `prefix`, deepest first (from `/proc/self/mountinfo`).
pub fn mounts_under(prefix: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mount_path)
        .filter(|p| p.starts_with(prefix))
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

fn unescape_mount_path(raw: &str) -> PathBuf {
    PathBuf::from(
        raw.replace("\\040", " ")
            .replace("\\011", "\t")
            .replace("\\134", "\\"),
    )
}

fn is_mount_point(path: &Path) -> bool {
    mounts_under(path).iter().any(|p| p == path)
}

fn mount_tmpfs(dir: &Path, size: Option<u64>) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let target = CString::new(dir.as_os_str().as_bytes())?;
    let options = CString::new(match size {
        Some(bytes) if bytes > 0 => format!("mode=0777,size={bytes}"),
        _ => "mode=0777".to_string(),
    })?;
    let fstype = CString::new("tmpfs")?;
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn unmount(path: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let target = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: target is a valid NUL-terminated string.
    let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Unmounts everything under the pod's directory and removes it.
pub fn teardown(root: &Path, uid: &str) -> io::Result<()> {
    let dir = pod_dir(root, uid);
    if !dir.exists() {
        return Ok(());
    }
    for mount in mounts_under(&dir) {
        unmount(&mount)?;
    }
    std::fs::remove_dir_all(&dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, &str, u32)]) -> Files {
        entries
            .iter()
            .map(|(k, v, m)| (k.to_string(), (v.as_bytes().to_vec(), *m)))
            .collect()
    }

    #[test]
    fn atomic_writer_swaps_data_and_links_names() {
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("vol");
        assert!(write_atomic(&vol, &files(&[("a", "1", 0o644), ("sub/b", "2", 0o600)])).unwrap());
        assert_eq!(std::fs::read_to_string(vol.join("a")).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(vol.join("sub/b")).unwrap(), "2");
        assert!(
            std::fs::symlink_metadata(vol.join("a"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let mode = std::fs::metadata(vol.join("sub/b"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let first = std::fs::read_link(vol.join("..data")).unwrap();
        assert!(
            !write_atomic(&vol, &files(&[("a", "1", 0o644), ("sub/b", "2", 0o600)])).unwrap(),
            "unchanged"
        );
        assert!(write_atomic(&vol, &files(&[("a", "changed", 0o644)])).unwrap());
        // Paths that would leave the volume are refused before anything is written.
        for bad in [
            "/etc/evil",
            "../evil",
            "a/../../evil",
            "..data",
            "a//b",
            "./a",
            "",
        ] {
            let err = write_atomic(&vol, &files(&[(bad, "x", 0o644)])).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
        assert_eq!(std::fs::read_to_string(vol.join("a")).unwrap(), "changed");
        assert_eq!(std::fs::read_to_string(vol.join("a")).unwrap(), "changed");
        assert!(!vol.join("sub").exists(), "removed keys disappear");
        assert!(!vol.join(&first).exists(), "old timestamp dir removed");
    }

    #[test]
    fn items_modes_and_bad_paths() {
        let entries = BTreeMap::from([
            ("k".to_string(), b"v".to_vec()),
            ("other".to_string(), b"x".to_vec()),
        ]);
        let items = vec![KeyToPath {
            key: "k".into(),
            path: "dir/file".into(),
            mode: Some(0o400),
        }];
        let f = project(
            entries.clone(),
            Some(&items),
            0o644,
            VolumeError::ConfigMapKey,
            false,
        )
        .unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(f["dir/file"], (b"v".to_vec(), 0o400));
        let missing = vec![KeyToPath {
            key: "nope".into(),
            path: "p".into(),
            mode: None,
        }];
        assert!(matches!(
            project(
                entries.clone(),
                Some(&missing),
                0o644,
                VolumeError::ConfigMapKey,
                false
            ),
            Err(VolumeError::ConfigMapKey(_))
        ));
        assert!(
            project(
                entries.clone(),
                Some(&missing),
                0o644,
                VolumeError::ConfigMapKey,
                true
            )
            .unwrap()
            .is_empty()
        );
        let escape = vec![KeyToPath {
            key: "k".into(),
            path: "../etc/passwd".into(),
            mode: None,
        }];
        assert!(matches!(
            project(
                entries,
                Some(&escape),
                0o644,
                VolumeError::ConfigMapKey,
                false
            ),
            Err(VolumeError::BadPath(_))
        ));
    }

    #[test]
    fn host_path_types() {
        let dir = tempfile::tempdir().unwrap();
        let created = dir.path().join("new/dir");
        check_host_path(&created, "DirectoryOrCreate").unwrap();
        assert!(created.is_dir());
        let file = dir.path().join("f");
        check_host_path(&file, "FileOrCreate").unwrap();
        assert!(file.is_file());
        assert!(check_host_path(&file, "Directory").is_err());
        let err = check_host_path(&dir.path().join("missing"), "File").unwrap_err();
        assert!(err.to_string().contains("is not a file"), "{err}");
        check_host_path(&dir.path().join("missing"), "").unwrap();
    }
}
