//! Atomic, permission-exact file writes for certificates, keys, tokens and kubeconfigs.
//!
//! A write goes to a temporary file in the destination's directory (created with the final
//! mode, regardless of umask), is fsynced, renamed over the destination, and the directory is
//! fsynced, so a crash leaves either the old or the new content, never a torn file.
//!
//! Owns file writing for the PKI only.

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::PkiError;

/// Mode of private keys and secrets.
pub const PRIVATE_MODE: u32 = 0o600;
/// Mode of certificates.
pub const PUBLIC_MODE: u32 = 0o644;

/// Writes `contents` to `path` atomically with exactly `mode`. The parent directory must exist.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), PkiError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| PkiError::Invalid {
            path: path.to_path_buf(),
            reason: "not a file path".to_string(),
        })?
        .to_string_lossy();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));

    let result = write_new(&tmp, contents, mode)
        .map_err(|e| PkiError::io("writing", &tmp, e))
        .and_then(|()| fs::rename(&tmp, path).map_err(|e| PkiError::io("replacing", path, e)));
    if result.is_err() {
        // Best effort: the temp file is garbage now.
        let _ = fs::remove_file(&tmp);
        return result;
    }
    // Persist the rename itself.
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| PkiError::io("syncing directory", &dir, e))
}

fn write_new(tmp: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(tmp)?;
    // `mode` above is filtered by the umask; set it exactly.
    file.set_permissions(Permissions::from_mode(mode))?;
    file.write_all(contents)?;
    file.sync_all()
}

/// Creates `path` and missing parents; directories created here get mode 0700.
pub fn create_private_dir(path: &Path) -> Result<(), PkiError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| PkiError::io("creating directory", path, e))
}

/// Reads a UTF-8 file, `None` if it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>, PkiError> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(PkiError::io("reading", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).expect("metadata").permissions().mode() & 0o7777
    }

    #[test]
    fn writes_replaces_and_sets_exact_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("secret.key");
        write_atomic(&path, b"one", PRIVATE_MODE).expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"one");
        assert_eq!(mode(&path), 0o600);
        write_atomic(&path, b"two", 0o640).expect("rewrite");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        assert_eq!(mode(&path), 0o640);
        // 0o666 is beyond a typical umask of 022: still exact.
        write_atomic(&path, b"three", 0o666).expect("rewrite");
        assert_eq!(mode(&path), 0o666);
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .expect("readdir")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn missing_parent_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nope").join("x");
        let e = write_atomic(&path, b"x", PRIVATE_MODE).expect_err("no parent");
        assert!(e.to_string().contains("nope"), "{e}");
    }

    #[test]
    fn private_dirs_and_optional_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tls = dir.path().join("server").join("tls");
        create_private_dir(&tls).expect("mkdir");
        assert_eq!(mode(&tls), 0o700);
        assert_eq!(mode(&dir.path().join("server")), 0o700);
        create_private_dir(&tls).expect("idempotent");
        assert_eq!(read_optional(&tls.join("missing")).expect("ok"), None);
        write_atomic(&tls.join("f"), b"x", PUBLIC_MODE).expect("write");
        assert_eq!(
            read_optional(&tls.join("f")).expect("ok").as_deref(),
            Some("x")
        );
    }
}
