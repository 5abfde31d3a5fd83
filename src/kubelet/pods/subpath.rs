//! Safe `subPath` mounts, as the kubelet's safe subpath does (the fix of CVE-2017-1002101):
//! a container can plant a symlink in a writable volume (`evil -> /etc`), and a later
//! container that mounts that volume with `subPath: evil` must not get the host's `/etc`.
//!
//! [`open_beneath`] walks the subpath one component at a time with
//! `openat(O_PATH | O_NOFOLLOW)` from a descriptor of the volume's root, following a
//! symlink only while its target stays beneath the root (relative targets, `..` never above
//! the root; an absolute target is refused, as the kubelet refuses a subpath whose resolved
//! host path leaves the volume). [`bind`] then bind-mounts the opened descriptor
//! (`/proc/self/fd/<n>`) onto `<pod-dir>/volume-subpaths/<volume>/<container>/<index>`, and
//! that mount point, not the user's path, goes to the runtime: nothing can be swapped in
//! between the check and the mount.
//!
//! Owns `<pod-dir>/volume-subpaths/`; opens nothing outside the volume it is given, and
//! mounts nothing but the bind mounts there (`volumes::teardown` unmounts them with the
//! pod's other mounts).

use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// How many symlinks one subpath may pass through (Linux's own limit).
const MAX_LINKS: usize = 40;

#[derive(Debug, thiserror::Error)]
pub enum SubPathError {
    #[error("subpath {sub:?} leads outside of the volume {root}")]
    Outside { sub: String, root: String },
    #[error("subpath {sub:?}: too many levels of symbolic links")]
    TooManyLinks { sub: String },
    #[error("subpath {sub:?}: {what}: {source}")]
    Io {
        sub: String,
        what: String,
        #[source]
        source: io::Error,
    },
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC)`: the entry itself, a symlink
/// included, never what a symlink points at.
fn open_entry(dir: RawFd, name: &OsStr) -> io::Result<OwnedFd> {
    let name = cstring(name)?;
    // SAFETY: `name` is a valid NUL-terminated string; the result is checked before use.
    let fd = check(unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn file_type(fd: &OwnedFd) -> io::Result<libc::mode_t> {
    // SAFETY: an all-zero `stat` is a valid value; `fstat` fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is a valid out-pointer.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st.st_mode & libc::S_IFMT)
}

fn read_link(dir: RawFd, name: &OsStr) -> io::Result<OsString> {
    let name = cstring(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: `name` is NUL-terminated and `buf` has `buf.len()` writable bytes.
    let n = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(OsString::from_vec(buf))
}

fn make_dir(dir: RawFd, name: &OsStr, mode: libc::mode_t) -> io::Result<()> {
    let name = cstring(name)?;
    // SAFETY: `name` is a valid NUL-terminated string.
    match check(unsafe { libc::mkdirat(dir, name.as_ptr(), mode) }) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Opens `sub` beneath the directory `root` without leaving it: every component is opened
/// with `O_NOFOLLOW` relative to its parent's descriptor, symlinks are resolved here, and
/// only while they stay beneath `root`. With `create`, missing directories are made (mode
/// `dir_mode`), as the kubelet creates a missing subpath. Returns an `O_PATH` descriptor
/// of the target (a directory or a file).
pub fn open_beneath(
    root: &Path,
    sub: &str,
    create: bool,
    dir_mode: u32,
) -> Result<OwnedFd, SubPathError> {
    let io_err = |what: String| {
        let sub = sub.to_string();
        move |source| SubPathError::Io { sub, what, source }
    };
    let outside = || SubPathError::Outside {
        sub: sub.to_string(),
        root: root.display().to_string(),
    };
    let root_name = cstring(root.as_os_str()).map_err(io_err(format!("{}", root.display())))?;
    // SAFETY: `root_name` is NUL-terminated; the result is checked before use.
    let root_fd = check(unsafe {
        libc::open(
            root_name.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })
    .map_err(io_err(format!("opening the volume {}", root.display())))?;
    // SAFETY: `root_fd` was just opened and is owned by nobody else.
    let root_fd = unsafe { OwnedFd::from_raw_fd(root_fd) };

    let mut pending: VecDeque<OsString> = VecDeque::new();
    for c in Path::new(sub).components() {
        match c {
            Component::Normal(name) => pending.push_back(name.to_os_string()),
            Component::CurDir => {}
            _ => return Err(outside()),
        }
    }
    // The directories opened so far below the root; `..` pops one.
    let mut opened: Vec<OwnedFd> = Vec::new();
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        if name == "." || name.is_empty() {
            continue;
        }
        if name == ".." {
            opened.pop().ok_or_else(outside)?;
            continue;
        }
        let parent = opened.last().unwrap_or(&root_fd).as_raw_fd();
        let what = || format!("opening {name:?}");
        let fd = match open_entry(parent, &name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                make_dir(parent, &name, dir_mode).map_err(io_err(format!("creating {name:?}")))?;
                open_entry(parent, &name).map_err(io_err(what()))?
            }
            other => other.map_err(io_err(what()))?,
        };
        let kind = file_type(&fd).map_err(io_err(what()))?;
        if kind == libc::S_IFLNK {
            links += 1;
            if links > MAX_LINKS {
                return Err(SubPathError::TooManyLinks {
                    sub: sub.to_string(),
                });
            }
            let target = read_link(parent, &name).map_err(io_err(format!("reading {name:?}")))?;
            let target = PathBuf::from(target);
            if target.is_absolute() {
                return Err(outside());
            }
            for c in target.components().rev() {
                match c {
                    Component::Normal(n) => pending.push_front(n.to_os_string()),
                    Component::ParentDir => pending.push_front(OsString::from("..")),
                    Component::CurDir => {}
                    Component::RootDir | Component::Prefix(_) => return Err(outside()),
                }
            }
            continue;
        }
        if !pending.is_empty() && kind != libc::S_IFDIR {
            return Err(SubPathError::Io {
                sub: sub.to_string(),
                what: format!("{name:?}"),
                source: io::Error::from_raw_os_error(libc::ENOTDIR),
            });
        }
        opened.push(fd);
    }
    Ok(opened.pop().unwrap_or(root_fd))
}

/// Whether `path` is a mount point (in this process's mount table).
fn is_mount_point(path: &Path) -> bool {
    super::volumes::mounts_under(path).iter().any(|p| p == path)
}

/// Bind-mounts the descriptor `fd` (from [`open_beneath`]) onto `target`, making `target`
/// (a directory, or an empty file for a file) first; a mount left there by an earlier
/// container is replaced. The runtime is then given `target`.
pub fn bind(fd: &OwnedFd, target: &Path) -> io::Result<()> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    if is_mount_point(target) {
        let name = cstring(target.as_os_str())?;
        // SAFETY: `name` is a valid NUL-terminated string.
        check(unsafe { libc::umount2(name.as_ptr(), libc::MNT_DETACH) })?;
    }
    if file_type(fd)? == libc::S_IFDIR {
        match std::fs::create_dir(target) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(target)?;
    }
    let source = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let target = cstring(target.as_os_str())?;
    // SAFETY: both strings are valid and NUL-terminated; a bind mount takes no fstype or
    // data.
    check(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    })?;
    Ok(())
}

/// Where the subpath mount of a container's `index`th volume mount lives:
/// `<pod-dir>/volume-subpaths/<volume>/<container>/<index>`, as the kubelet lays it out.
pub fn target(pod_dir: &Path, volume: &str, container: &str, index: usize) -> PathBuf {
    pod_dir
        .join("volume-subpaths")
        .join(volume)
        .join(container)
        .join(index.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// The path a descriptor names (its `/proc/self/fd` link).
    fn path_of(fd: &OwnedFd) -> PathBuf {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("fd path")
    }

    #[test]
    fn a_planted_symlink_out_of_the_volume_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let volume = tmp.path().join("volume");
        let secret = tmp.path().join("host-secret");
        std::fs::create_dir_all(&volume).expect("volume");
        std::fs::create_dir_all(&secret).expect("host dir");
        // What a container would plant: absolute and relative escapes.
        symlink("/etc", volume.join("evil")).expect("symlink");
        symlink("../host-secret", volume.join("up")).expect("symlink");
        std::fs::create_dir_all(volume.join("d")).expect("dir");
        symlink("../../host-secret", volume.join("d/deep")).expect("symlink");
        symlink(&secret, volume.join("abs-sibling")).expect("symlink");
        for sub in [
            "evil",
            "evil/passwd",
            "up",
            "d/deep",
            "abs-sibling",
            "../host-secret",
        ] {
            match open_beneath(&volume, sub, false, 0o755) {
                Err(SubPathError::Outside { .. }) => {}
                other => panic!("{sub}: want Outside, got {other:?}"),
            }
        }
        // With creation on, nothing is made outside either.
        assert!(matches!(
            open_beneath(&volume, "up/new", true, 0o755),
            Err(SubPathError::Outside { .. })
        ));
        assert!(!secret.join("new").exists());
    }

    #[test]
    fn paths_and_links_inside_the_volume_open() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let volume = tmp.path().join("volume");
        std::fs::create_dir_all(volume.join("a/b")).expect("dirs");
        std::fs::write(volume.join("a/b/file"), "x").expect("file");
        // The atomic writer's layout: key -> ..data/key, ..data -> ..2024_x.
        std::fs::create_dir_all(volume.join("..2024_x")).expect("dir");
        std::fs::write(volume.join("..2024_x/key"), "v").expect("file");
        symlink("..2024_x", volume.join("..data")).expect("symlink");
        symlink("..data/key", volume.join("key")).expect("symlink");
        symlink("a/../a/b", volume.join("inside")).expect("symlink");
        let real = volume.canonicalize().expect("canonical");
        let fd = open_beneath(&volume, "a/b/file", false, 0o755).expect("plain path");
        assert_eq!(path_of(&fd), real.join("a/b/file"));
        let fd = open_beneath(&volume, "key", false, 0o755).expect("atomic-writer key");
        assert_eq!(path_of(&fd), real.join("..2024_x/key"));
        let fd = open_beneath(&volume, "inside/file", false, 0o755).expect("relative link");
        assert_eq!(path_of(&fd), real.join("a/b/file"));
        let fd = open_beneath(&volume, "new/dir", true, 0o755).expect("created");
        assert_eq!(path_of(&fd), real.join("new/dir"));
        assert!(volume.join("new/dir").is_dir());
        assert!(matches!(
            open_beneath(&volume, "missing", false, 0o755),
            Err(SubPathError::Io { .. })
        ));
    }

    #[test]
    fn symlink_loops_end() {
        let tmp = tempfile::tempdir().expect("tempdir");
        symlink("b", tmp.path().join("a")).expect("symlink");
        symlink("a", tmp.path().join("b")).expect("symlink");
        assert!(matches!(
            open_beneath(tmp.path(), "a", false, 0o755),
            Err(SubPathError::TooManyLinks { .. })
        ));
    }
}
