//! `--kube-apiserver-arg key=value`: the k3s way of tuning the API server, parsed into
//! [`ServingLimits`].
//!
//! Owns the names and value syntax of the kube-apiserver flags k3rs honours (whole
//! numbers, seconds, Go durations like `60s` or `1m30s`). Unlike the controller-manager's,
//! an argument naming a flag k3rs does not implement is only warned about: k3s
//! configurations commonly carry kube-apiserver flags (audit logs, admission plugins) that
//! have no meaning here, and refusing them would stop such a server from starting. A bad
//! value for a flag k3rs does honour is an error. No files, no network.

use std::time::Duration;

use super::controller_manager::parse_go_duration;
use crate::apiserver::limits::ServingLimits;

/// The kube-apiserver flags k3rs honours, with a one-line description each.
pub const SUPPORTED: &[(&str, &str)] = &[
    (
        "max-requests-inflight",
        "non-mutating requests served at once before 429s; 0 is no limit (default 400)",
    ),
    (
        "max-mutating-requests-inflight",
        "mutating requests served at once before 429s; 0 is no limit (default 200)",
    ),
    (
        "request-timeout",
        "how long a request that is not a watch or stream may take (default 1m0s)",
    ),
    (
        "min-request-timeout",
        "seconds; a watch without timeoutSeconds ends after between this and twice this \
         (default 1800)",
    ),
    (
        "encryption-provider-config",
        "an EncryptionConfiguration file (apiserver.config.k8s.io/v1): resources encrypted \
         at rest (aesgcm and identity providers)",
    ),
];

/// What [`parse_args`] returns.
pub type Parsed = (ServingLimits, Option<std::path::PathBuf>, Vec<String>);

/// Applies `--kube-apiserver-arg` values (each `key=value`, an optional leading `--`
/// ignored as k3s does) over kube-apiserver's defaults. Returns the limits and the
/// `encryption-provider-config` file and the arguments k3rs ignores (to be logged); errors
/// name the argument and say what is wrong.
pub fn parse_args(args: &[String]) -> Result<Parsed, (String, String)> {
    let mut limits = ServingLimits::default();
    let mut encryption = None;
    let mut ignored = Vec::new();
    for arg in args {
        let fail = |reason: String| (arg.clone(), reason);
        let trimmed = arg.trim().trim_start_matches("--");
        let (key, value) = trimmed
            .split_once('=')
            .ok_or_else(|| fail("expected <flag>=<value>, e.g. request-timeout=30s".into()))?;
        let (key, value) = (key.trim(), value.trim());
        match key {
            "max-requests-inflight" => {
                limits.max_requests_inflight = count(value).map_err(fail)?;
            }
            "max-mutating-requests-inflight" => {
                limits.max_mutating_requests_inflight = count(value).map_err(fail)?;
            }
            "request-timeout" => {
                let d = parse_go_duration(value).map_err(fail)?;
                if d.is_zero() {
                    return Err(fail("must be greater than 0".into()));
                }
                limits.request_timeout = d;
            }
            "min-request-timeout" => {
                let seconds: u32 = value
                    .parse()
                    .map_err(|_| fail("expected a whole number of seconds, e.g. 1800".into()))?;
                limits.min_request_timeout = Duration::from_secs(seconds.into());
            }
            "encryption-provider-config" => {
                if value.is_empty() {
                    return Err(fail(
                        "expected the path of an EncryptionConfiguration file".into(),
                    ));
                }
                encryption = Some(std::path::PathBuf::from(value));
            }
            _ => ignored.push(arg.clone()),
        }
    }
    Ok((limits, encryption, ignored))
}

fn count(value: &str) -> Result<u32, String> {
    value
        .parse::<u32>()
        .map_err(|_| "expected a whole number of requests (0 is no limit)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_are_kubes() {
        let (limits, _, ignored) = parse_args(&[]).expect("no args");
        assert_eq!(limits.max_requests_inflight, 400);
        assert_eq!(limits.max_mutating_requests_inflight, 200);
        assert_eq!(limits.request_timeout, Duration::from_secs(60));
        assert_eq!(limits.min_request_timeout, Duration::from_secs(1800));
        assert!(ignored.is_empty());
    }

    #[test]
    fn flags_apply() {
        let (limits, _, ignored) = parse_args(&args(&[
            "max-requests-inflight=10",
            "--max-mutating-requests-inflight=0",
            "request-timeout=1m30s",
            " min-request-timeout = 60 ",
            "audit-log-path=/var/log/audit.log",
            "enable-admission-plugins=NodeRestriction,PodSecurity",
        ]))
        .expect("valid args");
        assert_eq!(limits.max_requests_inflight, 10);
        assert_eq!(limits.max_mutating_requests_inflight, 0);
        assert_eq!(limits.request_timeout, Duration::from_secs(90));
        assert_eq!(limits.min_request_timeout, Duration::from_secs(60));
        assert_eq!(
            ignored,
            args(&[
                "audit-log-path=/var/log/audit.log",
                "enable-admission-plugins=NodeRestriction,PodSecurity"
            ])
        );
    }

    #[test]
    fn bad_values_are_named() {
        for bad in [
            "max-requests-inflight=many",
            "max-requests-inflight=-1",
            "max-mutating-requests-inflight=1.5",
            "request-timeout=60",
            "request-timeout=0s",
            "min-request-timeout=30m",
            "request-timeout",
        ] {
            let (arg, reason) = parse_args(&args(&[bad])).expect_err(bad);
            assert_eq!(arg, bad);
            assert!(!reason.is_empty());
        }
    }
}
