//! What `k3rs certificate check` and `k3rs certificate rotate` work on: the certificates in a
//! data directory (the server's `server/tls/` with its `etcd/` peer certificates, and an
//! agent's `agent/`), their expiry, and k3s's service names mapped to the files that hold
//! each service's certificates.
//!
//! Rotation here is k3s's offline rotation: the whole TLS directory is copied to
//! `server/tls-<unix time>/` and the chosen leaf certificates are removed, so the next
//! start issues new ones from the same CAs. CAs are never removed.
//!
//! Owns reading and removing certificate files under a data directory; it serves nothing
//! and never touches `store`.

use std::fs;
use std::path::{Path, PathBuf};

use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use super::PkiError;
use super::files;

/// Leaf certificates this close to expiry are renewed (k3s: 90 days) and shown as WARNING.
pub const RENEW_BEFORE_SECS: i64 = 90 * 24 * 3600;

/// The services `--service` accepts (k3s's names plus k3rs's `supervisor`), each with the
/// file stems of its certificates relative to `server/tls/` (and, for `kubelet` and
/// `kube-proxy`, to `agent/`). Services k3rs has no certificate for map to nothing.
pub const SERVICES: &[(&str, &[&str])] = &[
    ("admin", &["client-admin"]),
    (
        "api-server",
        &["serving-kube-apiserver", "client-kube-apiserver"],
    ),
    ("controller-manager", &["client-controller"]),
    ("scheduler", &["client-scheduler"]),
    ("k3s-controller", &["client-supervisor"]),
    ("k3s-server", &["client-supervisor"]),
    ("supervisor", &["client-supervisor"]),
    ("cloud-controller", &[]),
    ("etcd", &["etcd/peer-server-client"]),
    ("auth-proxy", &[]),
    ("kubelet", &["client-kubelet", "serving-kubelet"]),
    ("kube-proxy", &["client-kube-proxy"]),
];

/// The file stems of `service`, or an error listing the known services.
pub fn service_stems(service: &str) -> Result<&'static [&'static str], String> {
    SERVICES
        .iter()
        .find(|(name, _)| *name == service)
        .map(|(_, stems)| *stems)
        .ok_or_else(|| {
            let names: Vec<&str> = SERVICES.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown service {service:?}; expected one of {}",
                names.join(", ")
            )
        })
}

/// One certificate file as `certificate check` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertRow {
    /// The path relative to the data directory, e.g. `server/tls/client-admin.crt`.
    pub file: String,
    /// The subject, e.g. `CN=system:admin, O=system:masters`.
    pub subject: String,
    /// `CertSign`, `ServerAuth`, `ClientAuth`, comma-separated.
    pub usages: String,
    /// Unix times.
    pub not_before: i64,
    pub not_after: i64,
    pub is_ca: bool,
}

/// How a certificate stands at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Within [`RENEW_BEFORE_SECS`] of expiry (renewed at the next check or start).
    Warning,
    Expired,
    NotYetValid,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warning => "WARNING",
            Status::Expired => "EXPIRED",
            Status::NotYetValid => "NOT YET VALID",
        }
    }
}

impl CertRow {
    /// The status at unix time `now`.
    pub fn status(&self, now: i64) -> Status {
        if now < self.not_before {
            Status::NotYetValid
        } else if now >= self.not_after {
            Status::Expired
        } else if self.not_after - now < RENEW_BEFORE_SECS {
            Status::Warning
        } else {
            Status::Ok
        }
    }
}

/// Reads one certificate file (its first certificate).
pub fn describe(path: &Path, shown: &str) -> Result<CertRow, PkiError> {
    let invalid = |reason: String| PkiError::Invalid {
        path: path.to_path_buf(),
        reason,
    };
    let pem = fs::read_to_string(path).map_err(|e| PkiError::io("reading", path, e))?;
    let der = super::inspect::pem_to_der(&pem).map_err(invalid)?;
    let (_, cert) = X509Certificate::from_der(&der)
        .map_err(|e| invalid(format!("not an X.509 certificate: {e}")))?;
    let mut usages = Vec::new();
    if cert.is_ca() {
        usages.push("CertSign");
    }
    if let Ok(Some(eku)) = cert.extended_key_usage() {
        if eku.value.server_auth {
            usages.push("ServerAuth");
        }
        if eku.value.client_auth {
            usages.push("ClientAuth");
        }
    }
    Ok(CertRow {
        file: shown.to_string(),
        subject: cert.subject().to_string(),
        usages: usages.join(","),
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        is_ca: cert.is_ca(),
    })
}

/// Every `*.crt` under `<data_dir>/server/tls` (and its `etcd/`) and `<data_dir>/agent`,
/// sorted by path. Files that do not parse are skipped with a warning.
pub fn scan(data_dir: &Path) -> Result<Vec<CertRow>, PkiError> {
    let mut rows = Vec::new();
    for rel in ["server/tls", "server/tls/etcd", "agent"] {
        let dir = data_dir.join(rel);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(PkiError::io("listing", &dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| PkiError::io("listing", &dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".crt") || name.starts_with('.') {
                continue;
            }
            let shown = format!("{rel}/{name}");
            match describe(&entry.path(), &shown) {
                Ok(row) => rows.push(row),
                Err(e) => tracing::warn!(error = %e, "skipping a certificate file"),
            }
        }
    }
    rows.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(rows)
}

/// Copies `tls_dir` (recursively, modes kept) to a sibling `tls-<unix time>` and returns
/// its path.
pub fn backup(tls_dir: &Path, now: i64) -> Result<PathBuf, PkiError> {
    let parent = tls_dir.parent().unwrap_or(Path::new("."));
    let mut target = parent.join(format!("tls-{now}"));
    let mut n = 1;
    while target.exists() {
        target = parent.join(format!("tls-{now}-{n}"));
        n += 1;
    }
    copy_dir(tls_dir, &target)?;
    Ok(target)
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), PkiError> {
    files::create_private_dir(to)?;
    let entries = fs::read_dir(from).map_err(|e| PkiError::io("listing", from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| PkiError::io("listing", from, e))?;
        let source = entry.path();
        let dest = to.join(entry.file_name());
        let kind = entry
            .file_type()
            .map_err(|e| PkiError::io("reading", &source, e))?;
        if kind.is_dir() {
            copy_dir(&source, &dest)?;
        } else if kind.is_file() {
            let mode = {
                use std::os::unix::fs::PermissionsExt;
                entry
                    .metadata()
                    .map_err(|e| PkiError::io("reading", &source, e))?
                    .permissions()
                    .mode()
                    & 0o777
            };
            let bytes = fs::read(&source).map_err(|e| PkiError::io("reading", &source, e))?;
            files::write_atomic(&dest, &bytes, mode)?;
        }
    }
    Ok(())
}

/// Removes `<dir>/<stem>.crt` and `.key` for each stem; returns the files removed.
pub fn remove_leaves(dir: &Path, stems: &[&str]) -> Result<Vec<PathBuf>, PkiError> {
    let mut removed = Vec::new();
    for stem in stems {
        for ext in ["crt", "key"] {
            let path = dir.join(format!("{stem}.{ext}"));
            match fs::remove_file(&path) {
                Ok(()) => removed.push(path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(PkiError::io("removing", &path, e)),
            }
        }
    }
    Ok(removed)
}

/// Formats a duration in seconds the way the expiry table shows it (`364d`, `5h`, `12m`).
pub fn residual(seconds: i64) -> String {
    if seconds <= 0 {
        return "0s".to_string();
    }
    if seconds >= 2 * 24 * 3600 {
        format!("{}d", seconds / (24 * 3600))
    } else if seconds >= 3600 {
        format!("{}h", seconds / 3600)
    } else if seconds >= 60 {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{ServerPki, ServerPkiOptions, ServingSans};

    fn pki(dir: &Path) -> ServerPki {
        let mut sans = ServingSans::new();
        sans.add("127.0.0.1");
        let options = ServerPkiOptions {
            sans: sans.clone(),
            kubelet_node: Some("node-a".into()),
            kubelet_ips: Vec::new(),
            peer: Some(("node-a".into(), sans)),
        };
        ServerPki::ensure(&dir.join("server/tls"), &options).expect("pki")
    }

    #[test]
    fn scans_every_certificate_with_usages_and_status() {
        let dir = tempfile::tempdir().expect("tempdir");
        pki(dir.path());
        let rows = scan(dir.path()).expect("scan");
        let files: Vec<&str> = rows.iter().map(|r| r.file.as_str()).collect();
        for want in [
            "server/tls/client-admin.crt",
            "server/tls/client-ca.crt",
            "server/tls/serving-kube-apiserver.crt",
            "server/tls/etcd/peer-ca.crt",
            "server/tls/etcd/peer-server-client.crt",
        ] {
            assert!(files.contains(&want), "{want} in {files:?}");
        }
        let admin = rows
            .iter()
            .find(|r| r.file.ends_with("client-admin.crt"))
            .expect("admin");
        assert!(
            admin.subject.contains("CN=system:admin"),
            "{}",
            admin.subject
        );
        assert_eq!(admin.usages, "ClientAuth");
        let ca = rows
            .iter()
            .find(|r| r.file.ends_with("/server-ca.crt"))
            .expect("ca");
        assert_eq!(ca.usages, "CertSign");
        let now = crate::pki::server::unix_now();
        assert_eq!(admin.status(now), Status::Ok);
        assert_eq!(admin.status(admin.not_after - 10), Status::Warning);
        assert_eq!(admin.status(admin.not_after), Status::Expired);
        assert_eq!(admin.status(admin.not_before - 1), Status::NotYetValid);
    }

    #[test]
    fn rotation_backs_up_and_removes_only_the_service() {
        let dir = tempfile::tempdir().expect("tempdir");
        pki(dir.path());
        let tls = dir.path().join("server/tls");
        let serving = fs::read(tls.join("serving-kube-apiserver.crt")).expect("read");
        let backup_dir = backup(&tls, 1234).expect("backup");
        assert_eq!(backup_dir, dir.path().join("server/tls-1234"));
        assert_eq!(
            fs::read(backup_dir.join("serving-kube-apiserver.crt")).expect("backup copy"),
            serving
        );
        assert!(backup_dir.join("etcd/peer-ca.key").exists());
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(backup_dir.join("server-ca.key"))
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_ne!(backup(&tls, 1234).expect("second"), backup_dir);
        let removed =
            remove_leaves(&tls, service_stems("api-server").expect("known")).expect("remove");
        assert_eq!(removed.len(), 4, "{removed:?}");
        assert!(!tls.join("serving-kube-apiserver.crt").exists());
        assert!(tls.join("client-admin.crt").exists());
        assert!(tls.join("server-ca.crt").exists());
        // The next start issues a new one from the same CA.
        let again = pki(dir.path());
        assert_ne!(again.serving().cert_pem.as_bytes(), serving.as_slice());
        assert!(again.server_ca().issued(&again.serving().cert_pem));
        assert!(service_stems("nope").is_err());
    }

    #[test]
    fn residual_times() {
        assert_eq!(residual(400 * 24 * 3600), "400d");
        assert_eq!(residual(30 * 3600), "30h");
        assert_eq!(residual(90), "1m");
        assert_eq!(residual(-5), "0s");
    }
}
