//! `k3rs certificate check` and `k3rs certificate rotate`, as k3s's:
//!
//! - `check [--output table|text] [--service …]`: every certificate under the data
//!   directory with its subject, usages, expiry, time left and status (`OK`, `WARNING`
//!   within 90 days, `EXPIRED`, `NOT YET VALID`);
//! - `rotate [--service …]`: with the server stopped, copies `server/tls/` to
//!   `server/tls-<unix time>/` and removes the services' leaf certificates (all of them
//!   without `--service`), so the next start issues new ones from the same CAs. k3rs adds
//!   the service `service-account`: a new token signing key, the old public key kept in
//!   `service.key` for verification (docs/operations.md has the whole procedure).
//!
//! Offline: reads and writes files under the data directory only, through [`crate::pki`].

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};

use crate::pki::rotation::{self, CertRow};

/// `k3rs certificate`.
#[derive(Debug, Args)]
pub struct CertificateArgs {
    #[command(subcommand)]
    pub command: CertificateCommand,
}

/// How `check` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Text,
}

#[derive(Debug, Subcommand)]
pub enum CertificateCommand {
    /// Check the certificates' expiry
    Check {
        /// Folder to hold state [default: /var/lib/k3rs]
        #[arg(long, short = 'd', value_name = "DIR", env = "K3RS_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Only these services' certificates (comma-separated or repeated)
        #[arg(long, short = 's', value_delimiter = ',')]
        service: Vec<String>,
        /// Format of the report
        #[arg(long, short = 'o', value_enum, default_value = "table")]
        output: Output,
    },
    /// Back up the certificates and remove them, so the next start issues new ones (run it
    /// with the server stopped)
    Rotate {
        /// Folder to hold state [default: /var/lib/k3rs]
        #[arg(long, short = 'd', value_name = "DIR", env = "K3RS_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Only these services (comma-separated or repeated); `service-account` rotates the
        /// token signing key
        #[arg(long, short = 's', value_delimiter = ',')]
        service: Vec<String>,
    },
}

/// The k3rs service for the token signing key (not among k3s's).
const SERVICE_ACCOUNT: &str = "service-account";

/// Runs the subcommand; the report goes to stdout.
pub fn run(args: CertificateArgs) -> anyhow::Result<()> {
    let default_dir = || PathBuf::from(super::config::DEFAULT_DATA_DIR);
    match args.command {
        CertificateCommand::Check {
            data_dir,
            service,
            output,
        } => {
            let data_dir = data_dir.unwrap_or_else(default_dir);
            print!("{}", check(&data_dir, &service, output, unix_now())?);
            Ok(())
        }
        CertificateCommand::Rotate { data_dir, service } => {
            let data_dir = data_dir.unwrap_or_else(default_dir);
            for line in rotate(&data_dir, &service, unix_now())? {
                println!("{line}");
            }
            Ok(())
        }
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The file stems `services` select, or every stem of every service when empty.
fn selected_stems(services: &[String]) -> anyhow::Result<Vec<&'static str>> {
    let mut stems = Vec::new();
    if services.is_empty() {
        for (_, list) in rotation::SERVICES {
            stems.extend_from_slice(list);
        }
    } else {
        for service in services {
            if service == SERVICE_ACCOUNT {
                continue;
            }
            stems.extend_from_slice(rotation::service_stems(service).map_err(anyhow::Error::msg)?);
        }
    }
    stems.sort_unstable();
    stems.dedup();
    Ok(stems)
}

fn stem_of(file: &str) -> &str {
    let file = file.strip_suffix(".crt").unwrap_or(file);
    for dir in ["server/tls/", "agent/"] {
        if let Some(stem) = file.strip_prefix(dir) {
            return stem;
        }
    }
    file
}

fn date(unix: i64) -> String {
    jiff::Timestamp::from_second(unix)
        .map(|t| t.strftime("%b %d, %Y %H:%M UTC").to_string())
        .unwrap_or_else(|_| unix.to_string())
}

/// The expiry report of the certificates under `data_dir` at unix time `now`.
pub fn check(
    data_dir: &Path,
    services: &[String],
    output: Output,
    now: i64,
) -> anyhow::Result<String> {
    let mut rows: Vec<CertRow> = rotation::scan(data_dir)
        .with_context(|| format!("reading the certificates under {}", data_dir.display()))?;
    if rows.is_empty() {
        anyhow::bail!(
            "no certificates under {} (is --data-dir right?)",
            data_dir.display()
        );
    }
    if !services.is_empty() {
        let stems = selected_stems(services)?;
        rows.retain(|r| stems.contains(&stem_of(&r.file)));
    }
    let mut out = String::new();
    match output {
        Output::Text => {
            for r in &rows {
                let left = r.not_after - now;
                let line = match r.status(now) {
                    rotation::Status::Expired => {
                        format!(
                            "{}: certificate {} EXPIRED on {}",
                            r.file,
                            r.subject,
                            date(r.not_after)
                        )
                    }
                    status => format!(
                        "{}: certificate {} will expire on {} ({} left, {})",
                        r.file,
                        r.subject,
                        date(r.not_after),
                        rotation::residual(left),
                        status.as_str()
                    ),
                };
                out.push_str(&line);
                out.push('\n');
            }
        }
        Output::Table => {
            let header = [
                "FILENAME",
                "SUBJECT",
                "USAGES",
                "EXPIRES",
                "RESIDUAL TIME",
                "STATUS",
            ];
            let table: Vec<[String; 6]> = rows
                .iter()
                .map(|r| {
                    [
                        r.file.clone(),
                        r.subject.clone(),
                        r.usages.clone(),
                        date(r.not_after),
                        rotation::residual(r.not_after - now),
                        r.status(now).as_str().to_string(),
                    ]
                })
                .collect();
            let mut widths = header.map(str::len);
            for row in &table {
                for (w, cell) in widths.iter_mut().zip(row) {
                    *w = (*w).max(cell.len());
                }
            }
            let mut line = |cells: [&str; 6]| {
                let mut text = String::new();
                for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                    if i + 1 == cells.len() {
                        text.push_str(cell);
                    } else {
                        text.push_str(&format!("{cell:<w$}  "));
                    }
                }
                out.push_str(text.trim_end());
                out.push('\n');
            };
            line(header);
            line(header.map(|h| if h.is_empty() { "" } else { "--------" }));
            for row in &table {
                line([&row[0], &row[1], &row[2], &row[3], &row[4], &row[5]]);
            }
        }
    }
    Ok(out)
}

/// Backs up and removes the certificates of `services` (all leaves when empty); returns
/// what was done, one line each.
pub fn rotate(data_dir: &Path, services: &[String], now: i64) -> anyhow::Result<Vec<String>> {
    let mut report = Vec::new();
    let stems = selected_stems(services)?;
    let mut dirs = Vec::new();
    for rel in ["server/tls", "agent"] {
        let dir = data_dir.join(rel);
        if dir.is_dir() {
            dirs.push(dir);
        }
    }
    if dirs.is_empty() {
        anyhow::bail!(
            "no certificates under {} (is --data-dir right?)",
            data_dir.display()
        );
    }
    let sa_key = data_dir.join("server/tls/service.key");
    let rotate_sa = services.iter().any(|s| s == SERVICE_ACCOUNT);
    if rotate_sa && !sa_key.is_file() {
        anyhow::bail!("{} does not exist: nothing to rotate", sa_key.display());
    }
    for dir in dirs {
        let present: Vec<&str> = stems
            .iter()
            .copied()
            .filter(|s| {
                dir.join(format!("{s}.crt")).exists() || dir.join(format!("{s}.key")).exists()
            })
            .collect();
        let touches_sa = rotate_sa && dir.ends_with("server/tls");
        if present.is_empty() && !touches_sa {
            continue;
        }
        let backup =
            rotation::backup(&dir, now).with_context(|| format!("backing up {}", dir.display()))?;
        report.push(format!(
            "Backed up {} to {}",
            dir.display(),
            backup.display()
        ));
        for path in rotation::remove_leaves(&dir, &present)? {
            report.push(format!("Removed {}", path.display()));
        }
        if touches_sa {
            let kept = crate::apiserver::auth::sa_token::rotate_key_file(&sa_key)
                .context("rotating the service-account key")?;
            report.push(format!(
                "Wrote a new service-account signing key to {} ({kept} previous public key(s) \
                 kept for verification; remove them once old tokens are gone)",
                sa_key.display()
            ));
        }
    }
    if report.is_empty() {
        report.push("No certificates of those services found; nothing to rotate".to_string());
    } else {
        report.push(
            "Certificates rotated: start k3rs to issue new ones (restart agents that use them)"
                .to_string(),
        );
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{ServerPki, ServerPkiOptions, ServingSans};

    fn server(dir: &Path) {
        let mut sans = ServingSans::new();
        sans.add("127.0.0.1");
        let options = ServerPkiOptions {
            sans,
            kubelet_node: Some("node-a".into()),
            kubelet_ips: Vec::new(),
            peer: None,
        };
        ServerPki::ensure(&dir.join("server/tls"), &options).expect("pki");
    }

    #[test]
    fn table_and_text_reports() {
        let dir = tempfile::tempdir().expect("tempdir");
        server(dir.path());
        let now = unix_now();
        let table = check(dir.path(), &[], Output::Table, now).expect("check");
        let mut lines = table.lines();
        let head = lines.next().expect("header");
        for col in [
            "FILENAME",
            "SUBJECT",
            "USAGES",
            "EXPIRES",
            "RESIDUAL TIME",
            "STATUS",
        ] {
            assert!(head.contains(col), "{head}");
        }
        assert!(table.contains("server/tls/client-admin.crt"), "{table}");
        assert!(table.contains("ClientAuth"), "{table}");
        assert!(table.contains("OK"), "{table}");
        let later = check(dir.path(), &[], Output::Table, now + 300 * 24 * 3600).expect("check");
        assert!(later.contains("WARNING"), "{later}");
        let scheduler = check(
            dir.path(),
            &["scheduler".to_string()],
            Output::Text,
            now + 400 * 24 * 3600,
        )
        .expect("check");
        assert_eq!(scheduler.lines().count(), 1, "{scheduler}");
        assert!(scheduler.contains("client-scheduler.crt"), "{scheduler}");
        assert!(scheduler.contains("EXPIRED"), "{scheduler}");
        assert!(check(dir.path(), &["bogus".into()], Output::Text, now).is_err());
        let empty = tempfile::tempdir().expect("tempdir");
        assert!(check(empty.path(), &[], Output::Table, now).is_err());
    }

    #[test]
    fn rotate_everything_keeps_the_cas() {
        let dir = tempfile::tempdir().expect("tempdir");
        server(dir.path());
        let report = rotate(dir.path(), &[], 77).expect("rotate");
        assert!(report[0].contains("tls-77"), "{report:?}");
        let tls = dir.path().join("server/tls");
        for stem in ["client-admin", "serving-kube-apiserver", "client-kubelet"] {
            assert!(!tls.join(format!("{stem}.crt")).exists(), "{stem}");
        }
        for ca in ["server-ca", "client-ca", "etcd/peer-ca"] {
            assert!(tls.join(format!("{ca}.key")).exists(), "{ca}");
        }
    }
}
