//! `k3rs kubectl …`: runs the `kubectl` found on `PATH` with the remaining arguments passed
//! through verbatim, replacing this process (so kubectl's exit code is ours).
//!
//! Like `k3s kubectl`, when neither `KUBECONFIG` nor a `--kubeconfig` argument is given and the
//! admin kubeconfig `/etc/k3rs/k3rs.yaml` exists, `KUBECONFIG` points at it; if that file is not
//! readable a hint about `--write-kubeconfig-mode` is printed.
//!
//! Owns locating and starting kubectl only; it does not embed or reimplement kubectl.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::config::DEFAULT_KUBECONFIG;

/// Execs `kubectl` with `args`. Returns only if kubectl could not be started.
pub fn exec(args: &[OsString]) -> anyhow::Result<()> {
    let own = std::env::current_exe()
        .ok()
        .and_then(|p| std::fs::canonicalize(p).ok());
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kubectl = find_kubectl(&path, own.as_deref()).context(
        "kubectl not found on PATH: k3rs does not embed kubectl; install it \
         (https://kubernetes.io/docs/tasks/tools/) and retry",
    )?;

    let mut cmd = std::process::Command::new(&kubectl);
    cmd.args(args);
    let default = Path::new(DEFAULT_KUBECONFIG);
    if let Some(kubeconfig) =
        default_kubeconfig(std::env::var_os("KUBECONFIG").as_deref(), args, default)
    {
        if let Err(e) = std::fs::File::open(&kubeconfig) {
            eprintln!(
                "Warning: unable to read {} ({e}); start the server with \
                 --write-kubeconfig-mode to change its permissions",
                kubeconfig.display()
            );
        }
        cmd.env("KUBECONFIG", kubeconfig);
    }
    let err = cmd.exec();
    Err(err).with_context(|| format!("cannot run {}", kubectl.display()))
}

/// The first executable `kubectl` on `path` that is not this binary itself (a `kubectl`
/// symlink to k3rs would otherwise exec itself forever).
pub fn find_kubectl(path: &OsStr, own_exe: Option<&Path>) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join("kubectl"))
        .find(|candidate| {
            let executable = std::fs::metadata(candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false);
            let is_self = own_exe
                .is_some_and(|own| std::fs::canonicalize(candidate).is_ok_and(|real| real == own));
            executable && !is_self
        })
}

/// The `KUBECONFIG` to set, if any: `default` when `KUBECONFIG` is unset or empty, no
/// `--kubeconfig` argument is present and `default` exists.
pub fn default_kubeconfig(
    env_kubeconfig: Option<&OsStr>,
    args: &[OsString],
    default: &Path,
) -> Option<PathBuf> {
    if env_kubeconfig.is_some_and(|v| !v.is_empty()) {
        return None;
    }
    let has_flag = args.iter().any(|a| {
        let a = a.to_string_lossy();
        a == "--kubeconfig" || a.starts_with("--kubeconfig=")
    });
    if has_flag || !default.exists() {
        return None;
    }
    Some(default.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn kubeconfig_defaulting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kc = dir.path().join("k3rs.yaml");
        std::fs::write(&kc, "apiVersion: v1\n").expect("write");
        let get = args(&["get", "pods"]);
        assert_eq!(default_kubeconfig(None, &get, &kc), Some(kc.clone()));
        assert_eq!(
            default_kubeconfig(Some(OsStr::new("")), &get, &kc),
            Some(kc.clone())
        );
        assert_eq!(
            default_kubeconfig(Some(OsStr::new("/home/me/.kube/config")), &get, &kc),
            None
        );
        assert_eq!(
            default_kubeconfig(None, &args(&["--kubeconfig", "/x", "get", "pods"]), &kc),
            None
        );
        assert_eq!(
            default_kubeconfig(None, &args(&["get", "--kubeconfig=/x"]), &kc),
            None
        );
        assert_eq!(
            default_kubeconfig(None, &get, &dir.path().join("missing.yaml")),
            None
        );
    }

    #[test]
    fn finds_executable_kubectl_but_not_itself() {
        let dir = tempfile::tempdir().expect("tempdir");
        let not_exec = dir.path().join("a");
        let real = dir.path().join("b");
        let selfdir = dir.path().join("c");
        for d in [&not_exec, &real, &selfdir] {
            std::fs::create_dir(d).expect("mkdir");
        }
        let write = |p: &Path, mode: u32| {
            std::fs::write(p, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        };
        write(&not_exec.join("kubectl"), 0o644);
        write(&real.join("kubectl"), 0o755);
        let own = dir.path().join("k3rs");
        write(&own, 0o755);
        std::os::unix::fs::symlink(&own, selfdir.join("kubectl")).expect("symlink");
        let own = std::fs::canonicalize(&own).expect("canonical");

        let path = std::env::join_paths([&not_exec, &selfdir, &real]).expect("join");
        assert_eq!(find_kubectl(&path, Some(&own)), Some(real.join("kubectl")));
        let path = std::env::join_paths([&not_exec, &selfdir]).expect("join");
        assert_eq!(find_kubectl(&path, Some(&own)), None);
        assert_eq!(find_kubectl(OsStr::new(""), None), None);
    }
}
