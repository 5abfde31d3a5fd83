//! Validation of the snapshot, S3 and `--cluster-reset` settings into the API server's
//! [`SnapshotSettings`] and [`S3Config`], with k3s's defaults (`0 */12 * * *`, 5
//! snapshots, `<data-dir>/server/db/snapshots`, `s3.amazonaws.com`, `us-east-1`, `5m`).
//!
//! Owns parsing only: no files are read, nothing is contacted.

use std::path::Path;

use super::config::{ConfigError, Settings, parse_path};
use super::snapshot_args::S3Args;
use crate::apiserver::cluster::snapshots::SnapshotSettings;
use crate::apiserver::cluster::snapshots::s3::S3Config;
use crate::cron::Schedule;

/// Default `--etcd-snapshot-schedule-cron`: 00:00 and 12:00.
pub const DEFAULT_SCHEDULE: &str = "0 */12 * * *";
/// Default `--etcd-snapshot-retention` and `--etcd-s3-retention`.
pub const DEFAULT_RETENTION: usize = 5;
/// Default `--etcd-snapshot-name`.
pub const DEFAULT_SCHEDULED_NAME: &str = "etcd-snapshot";
/// Default `--etcd-s3-endpoint`.
pub const DEFAULT_S3_ENDPOINT: &str = "s3.amazonaws.com";
/// Default `--etcd-s3-region`.
pub const DEFAULT_S3_REGION: &str = "us-east-1";
/// Default `--etcd-s3-timeout`, seconds.
pub const DEFAULT_S3_TIMEOUT_SECONDS: u64 = 300;

/// The snapshot part of `ServerConfig`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotServerConfig {
    pub settings: SnapshotSettings,
    /// `--cluster-reset`.
    pub cluster_reset: bool,
    /// `--cluster-reset-restore-path`.
    pub cluster_reset_restore_path: Option<String>,
    /// `--cluster-reset-force`: reset even while other members answer.
    pub cluster_reset_force: bool,
}

/// The default snapshot directory for a data dir.
pub fn default_snapshot_dir(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("server").join("db").join("snapshots")
}

/// The store directory for a data dir (what the API server opens).
pub fn store_dir(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("server").join("db")
}

pub(super) fn resolve(
    s: &Settings,
    data_dir: &Path,
    node_name: &str,
) -> Result<SnapshotServerConfig, ConfigError> {
    let schedule_text = s
        .one("etcd-snapshot-schedule-cron", |v| {
            Schedule::parse(v)
                .map(|_| v.trim().to_string())
                .map_err(|e| e.to_string())
        })?
        .unwrap_or_else(|| DEFAULT_SCHEDULE.to_string());
    let retention = s
        .one("etcd-snapshot-retention", parse_retention)?
        .unwrap_or(DEFAULT_RETENTION);
    let dir = s
        .one("etcd-snapshot-dir", parse_path)?
        .unwrap_or_else(|| default_snapshot_dir(data_dir));
    let scheduled_name = s
        .one("etcd-snapshot-name", parse_base_name)?
        .unwrap_or_else(|| DEFAULT_SCHEDULED_NAME.to_string());
    let restore_path = s.one("cluster-reset-restore-path", |v| {
        if v.trim().is_empty() {
            Err("must not be empty".to_string())
        } else {
            Ok(v.trim().to_string())
        }
    })?;
    let cluster_reset = s.flag("cluster-reset");
    if restore_path.is_some() && !cluster_reset {
        let (value, _) = s
            .get("cluster-reset-restore-path")
            .unwrap_or(("", &super::config::Origin::CommandLine));
        return Err(s.invalid(
            "cluster-reset-restore-path",
            value,
            "only valid together with --cluster-reset".to_string(),
        ));
    }
    let get = |key: &str| s.get(key).map(|(v, _)| v.to_string());
    let s3 = build_s3(s.flag("etcd-s3"), &get, &|key| s.flag(key))
        .map_err(|(flag, value, reason)| s.invalid(flag, &value, reason))?;
    Ok(SnapshotServerConfig {
        settings: SnapshotSettings {
            dir,
            compress: s.flag("etcd-snapshot-compress"),
            retention,
            schedule: (!s.flag("etcd-disable-snapshots")).then_some(schedule_text),
            scheduled_name,
            node_name: node_name.to_string(),
            s3,
        },
        cluster_reset,
        cluster_reset_restore_path: restore_path,
        cluster_reset_force: s.flag("cluster-reset-force"),
    })
}

/// The S3 configuration from `etcd-s3-*` values, when `enabled`. Errors are
/// `(flag, value, reason)`.
pub fn build_s3(
    enabled: bool,
    get: &dyn Fn(&'static str) -> Option<String>,
    flag: &dyn Fn(&'static str) -> bool,
) -> Result<Option<S3Config>, (&'static str, String, String)> {
    if !enabled {
        return Ok(None);
    }
    let bucket = get("etcd-s3-bucket").unwrap_or_default();
    if bucket.trim().is_empty() {
        return Err((
            "etcd-s3-bucket",
            bucket,
            "a bucket is required with --etcd-s3".to_string(),
        ));
    }
    let timeout_seconds = match get("etcd-s3-timeout") {
        Some(v) => parse_go_duration(&v)
            .map(|d| d.as_secs().max(1))
            .map_err(|reason| ("etcd-s3-timeout", v, reason))?,
        None => DEFAULT_S3_TIMEOUT_SECONDS,
    };
    let retention = match get("etcd-s3-retention") {
        Some(v) => parse_retention(&v).map_err(|reason| ("etcd-s3-retention", v, reason))?,
        None => DEFAULT_RETENTION,
    };
    let bucket_lookup_type = get("etcd-s3-bucket-lookup-type").unwrap_or_else(|| "auto".into());
    if !matches!(bucket_lookup_type.as_str(), "auto" | "dns" | "path") {
        return Err((
            "etcd-s3-bucket-lookup-type",
            bucket_lookup_type,
            "must be auto, dns or path".to_string(),
        ));
    }
    let endpoint = get("etcd-s3-endpoint")
        .filter(|e| !e.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_S3_ENDPOINT.to_string());
    let config = S3Config {
        endpoint,
        endpoint_ca: get("etcd-s3-endpoint-ca").filter(|v| !v.is_empty()),
        skip_ssl_verify: flag("etcd-s3-skip-ssl-verify"),
        access_key: get("etcd-s3-access-key").unwrap_or_default(),
        secret_key: get("etcd-s3-secret-key").unwrap_or_default(),
        session_token: get("etcd-s3-session-token").filter(|v| !v.is_empty()),
        bucket,
        region: get("etcd-s3-region")
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| DEFAULT_S3_REGION.to_string()),
        folder: get("etcd-s3-folder").unwrap_or_default(),
        insecure: flag("etcd-s3-insecure"),
        timeout_seconds,
        retention,
        bucket_lookup_type,
    };
    config
        .validate()
        .map_err(|reason| ("etcd-s3-endpoint", config.endpoint.clone(), reason))?;
    Ok(Some(config))
}

/// The S3 configuration given on an `etcd-snapshot` command line.
pub fn s3_from_args(args: &S3Args) -> Result<Option<S3Config>, String> {
    let strings = args.strings();
    let get = |key: &'static str| {
        strings
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| (*v).clone())
    };
    let bools = args.bools();
    let flag = |key: &'static str| {
        bools
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| *v)
            .unwrap_or(false)
    };
    build_s3(args.enabled.unwrap_or(false), &get, &flag)
        .map_err(|(flag, value, reason)| format!("invalid value {value:?} for --{flag}: {reason}"))
}

fn parse_retention(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        Ok(_) => Err("must be at least 1".to_string()),
        Err(_) => Err("not a whole number".to_string()),
    }
}

fn parse_base_name(v: &str) -> Result<String, String> {
    let ok = !v.is_empty()
        && !v.starts_with('.')
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(v.to_string())
    } else {
        Err("use letters, digits, '-', '_' and '.', not starting with '.'".to_string())
    }
}

/// A Go duration (`5m0s`, `90s`, `1h30m`, `1.5h`, `300ms`), as k3s's flags take them.
pub fn parse_go_duration(text: &str) -> Result<std::time::Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration".to_string());
    }
    if s == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{text:?} lacks a unit (ns, us, ms, s, m, h)"))?;
        if number_len == 0 {
            return Err(format!("{text:?} is not a duration like 5m0s"));
        }
        let number: f64 = rest[..number_len]
            .parse()
            .map_err(|_| format!("{text:?} is not a duration like 5m0s"))?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => {
                return Err(format!(
                    "unknown unit {unit:?} in {text:?} (ns, us, ms, s, m, h)"
                ));
            }
        };
        total += number * factor;
        rest = &rest[unit_len..];
    }
    Ok(std::time::Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5m0s"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("300ms"), Ok(Duration::from_millis(300)));
        assert!(parse_go_duration("5").is_err());
        assert!(parse_go_duration("5x").is_err());
        assert!(parse_go_duration("").is_err());
        assert!(parse_go_duration("m").is_err());
    }

    #[test]
    fn s3_requires_a_bucket_and_checks_values() {
        let none = |_: &'static str| None;
        let no = |_: &'static str| false;
        assert_eq!(build_s3(false, &none, &no), Ok(None));
        let e = build_s3(true, &none, &no).expect_err("bucket");
        assert_eq!(e.0, "etcd-s3-bucket");
        let values = |key: &'static str| match key {
            "etcd-s3-bucket" => Some("b".to_string()),
            "etcd-s3-timeout" => Some("2m".to_string()),
            _ => None,
        };
        let c = build_s3(true, &values, &no).expect("valid").expect("some");
        assert_eq!(c.endpoint, DEFAULT_S3_ENDPOINT);
        assert_eq!(c.region, DEFAULT_S3_REGION);
        assert_eq!(c.timeout_seconds, 120);
        assert_eq!(c.retention, DEFAULT_RETENTION);
        assert_eq!(c.bucket_lookup_type, "auto");
        let bad = |key: &'static str| match key {
            "etcd-s3-bucket" => Some("b".to_string()),
            "etcd-s3-bucket-lookup-type" => Some("virtual".to_string()),
            _ => None,
        };
        assert_eq!(
            build_s3(true, &bad, &no).expect_err("lookup").0,
            "etcd-s3-bucket-lookup-type"
        );
        let bad = |key: &'static str| match key {
            "etcd-s3-bucket" => Some("b".to_string()),
            "etcd-s3-retention" => Some("0".to_string()),
            _ => None,
        };
        assert_eq!(
            build_s3(true, &bad, &no).expect_err("retention").0,
            "etcd-s3-retention"
        );
    }
}
