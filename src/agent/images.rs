//! Air-gap images: every `*.tar` / `*.tar.gz` / `*.tgz` in `<data-dir>/agent/images/` (OCI
//! layout or docker-archive) is imported into containerd's `k8s.io` namespace at agent start
//! and again whenever a new or changed file appears (polled; a file is remembered by
//! name + size + mtime). One log line per image; a broken tarball is logged and skipped.
//!
//! Owns that directory's bookkeeping only; the tar/OCI parsing lives in [`archive`], the
//! containerd calls in [`import`].

pub mod archive;
pub mod import;
pub mod reference;
pub mod tar;

use std::collections::HashMap;
use std::io::Seek;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;

pub use archive::{ImageArchive, build_oci_layout};
pub use import::{ImageLabels, Importer};

/// How often the images directory is rescanned for new tarballs.
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);

fn is_image_tarball(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    !name.starts_with('.')
        && (name.ends_with(".tar") || name.ends_with(".tar.gz") || name.ends_with(".tgz"))
}

/// Opens a tarball from disk; gzip-compressed ones are inflated into an unlinked scratch file
/// under `scratch_dir` (layers can be large, so not into memory).
pub fn open_tarball(path: &Path, scratch_dir: &Path) -> anyhow::Result<ImageArchive> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut magic = [0u8; 2];
    let gz = std::io::Read::read(&mut file, &mut magic)? == 2 && magic == [0x1f, 0x8b];
    file.rewind()?;
    let source: Box<dyn archive::Source> = if gz {
        std::fs::create_dir_all(scratch_dir)
            .with_context(|| format!("creating {}", scratch_dir.display()))?;
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let scratch = scratch_dir.join(format!(".inflate-{}-{nanos}", std::process::id()));
        let mut out = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&scratch)
            .with_context(|| format!("creating {}", scratch.display()))?;
        // Unlinked at once: the open handle keeps the data until the import is done.
        let _ = std::fs::remove_file(&scratch);
        let mut decoder = flate2::read::GzDecoder::new(file);
        std::io::copy(&mut decoder, &mut out)
            .with_context(|| format!("decompressing {}", path.display()))?;
        out.rewind()?;
        Box::new(out)
    } else {
        Box::new(file)
    };
    ImageArchive::open(source).with_context(|| format!("reading image archive {}", path.display()))
}

/// Imports one tarball; returns the image names it held.
pub async fn import_file(
    importer: &Importer,
    path: &Path,
    scratch_dir: &Path,
) -> anyhow::Result<Vec<String>> {
    let (p, s) = (path.to_path_buf(), scratch_dir.to_path_buf());
    let mut archive = tokio::task::spawn_blocking(move || open_tarball(&p, &s))
        .await
        .context("image archive reader panicked")??;
    importer
        .import(&mut archive, &ImageLabels::new())
        .await
        .with_context(|| format!("importing {}", path.display()))
}

/// Remembers which files were imported (by name, size and mtime).
#[derive(Default)]
pub struct DirImporter {
    seen: HashMap<PathBuf, (u64, SystemTime)>,
}

impl DirImporter {
    /// Imports every new or changed tarball in `dir`; returns how many failed. A missing
    /// directory is simply empty.
    pub async fn scan(&mut self, importer: &Importer, dir: &Path, scratch_dir: &Path) -> usize {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot read the air-gap images directory");
                return 0;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_image_tarball(p))
            .collect();
        files.sort();
        let mut failures = 0;
        for path in files {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let stamp = (
                meta.len(),
                meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            );
            if self.seen.get(&path) == Some(&stamp) {
                continue;
            }
            let file_name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            match import_file(importer, &path, scratch_dir).await {
                Ok(names) => {
                    if names.is_empty() {
                        tracing::warn!(file = %file_name, "no named images in air-gap tarball");
                    }
                    for name in names {
                        tracing::info!("imported image {name} from {file_name}");
                    }
                }
                Err(e) => {
                    failures += 1;
                    tracing::error!(file = %file_name, "skipping air-gap image tarball: {e:#}");
                }
            }
            // A broken file is not retried until it changes (it is remembered either way).
            self.seen.insert(path, stamp);
        }
        failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tarball_names() {
        assert!(is_image_tarball(Path::new("/x/busybox.tar")));
        assert!(is_image_tarball(Path::new("/x/nginx.tar.gz")));
        assert!(is_image_tarball(Path::new("/x/nginx.tgz")));
        assert!(!is_image_tarball(Path::new("/x/.partial.tar")));
        assert!(!is_image_tarball(Path::new("/x/readme.txt")));
    }

    #[test]
    fn gzipped_tarball_opens() {
        let layer = {
            let mut w = tar::TarWriter::new();
            w.file("hello", b"world", 0o644);
            w.finish()
        };
        let tar = build_oci_layout("k3rs.test/gz:1", &[layer], serde_json::json!({})).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img.tar.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, &tar).unwrap();
        std::fs::write(&path, enc.finish().unwrap()).unwrap();
        let archive = open_tarball(&path, &dir.path().join("scratch")).unwrap();
        assert_eq!(archive.images()[0].name, "k3rs.test/gz:1");
        // the scratch file is already unlinked
        assert_eq!(
            std::fs::read_dir(dir.path().join("scratch"))
                .unwrap()
                .count(),
            0
        );
    }
}
