//! `--kube-apiserver-arg key=value`: the k3s way of tuning the API server, parsed into
//! [`ServingLimits`], the audit log's [`audit::Settings`] and the optional admission
//! plugins and token cap ([`admission::Settings`]).
//!
//! Owns the names and value syntax of the kube-apiserver flags k3rs honours (whole
//! numbers, seconds, Go durations like `60s` or `1m30s`). Unlike the controller-manager's,
//! an argument naming a flag k3rs does not implement is only warned about: k3s
//! configurations commonly carry kube-apiserver flags (audit logs, admission plugins) that
//! have no meaning here, and refusing them would stop such a server from starting. A bad
//! value for a flag k3rs does honour is an error, and so is an `audit-policy-file` that
//! cannot be read or is not a valid `audit.k8s.io/v1` Policy (the one file read here). No
//! network.

use std::time::Duration;

use super::controller_manager::parse_go_duration;
use crate::apiserver::admission;
use crate::apiserver::auth::audit;
use crate::apiserver::http::limits::ServingLimits;

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
    (
        "service-account-key-file",
        "files of further public keys accepted for service-account tokens (comma-separated or \
         repeated), e.g. the previous key during a rotation; tokens are signed with \
         server/tls/service.key only",
    ),
    (
        "audit-log-path",
        "file the audit log is written to, `-` for stdout (nothing is logged without a policy)",
    ),
    (
        "audit-policy-file",
        "audit.k8s.io/v1 Policy deciding what is logged (nothing is logged without it)",
    ),
    (
        "audit-log-maxage",
        "days to keep rotated audit log files; 0 is no limit (default 0)",
    ),
    (
        "audit-log-maxbackup",
        "rotated audit log files to keep; 0 is no limit (default 0)",
    ),
    (
        "audit-log-maxsize",
        "megabytes the audit log grows to before it is rotated; 0 is 100 (default 0)",
    ),
    (
        "enable-admission-plugins",
        "comma-separated; DenyServiceExternalIPs refuses Services that add externalIPs \
         (NodeRestriction, PodSecurity, ServiceAccount and the defaults always run)",
    ),
    (
        "service-account-max-token-expiration",
        "longest TokenRequest issued, 1h to 2^32s; longer requests are shortened \
         (default 0: no cap)",
    ),
];

/// The admission plugins k3rs always runs (kube's defaults and the ones k3s enables):
/// naming them in `enable-admission-plugins` changes nothing.
const ALWAYS_ON_PLUGINS: &[&str] = &[
    "NodeRestriction",
    "PodSecurity",
    "ServiceAccount",
    "NamespaceLifecycle",
    "LimitRanger",
    "DefaultStorageClass",
    "DefaultTolerationSeconds",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
    "Priority",
    "TaintNodesByCondition",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "StorageObjectInUseProtection",
];

/// What `--kube-apiserver-arg` sets: the serving limits, the
/// `encryption-provider-config` file, the audit log, the arguments k3rs ignores, and the
/// admission settings.
pub type Parsed = (
    ServingLimits,
    Option<std::path::PathBuf>,
    audit::Settings,
    Vec<String>,
    admission::Settings,
);

/// Applies `--kube-apiserver-arg` values (each `key=value`, an optional leading `--`
/// ignored as k3s does) over kube-apiserver's defaults. Returns [`Parsed`] (the ignored
/// arguments are to be logged); errors name the argument and say what is wrong.
pub fn parse_args(args: &[String]) -> Result<Parsed, (String, String)> {
    let mut limits = ServingLimits::default();
    let mut encryption = None;
    let mut audit = audit::Settings::default();
    let mut ignored = Vec::new();
    let mut admission = admission::Settings::default();
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
            "audit-log-path" => {
                if value.is_empty() {
                    return Err(fail("expected a file name, or - for stdout".into()));
                }
                audit.path = Some(value.to_string());
            }
            "audit-policy-file" => {
                let text = std::fs::read_to_string(value)
                    .map_err(|e| fail(format!("cannot read {value}: {e}")))?;
                let policy = audit::Policy::parse(&text)
                    .map_err(|e| fail(format!("invalid audit policy in {value}: {e}")))?;
                audit.policy = Some(std::sync::Arc::new(policy));
            }
            "audit-log-maxage" => audit.max_age_days = whole(value, "days").map_err(fail)?,
            "audit-log-maxbackup" => {
                audit.max_backups = whole(value, "files").map_err(fail)?;
            }
            "audit-log-maxsize" => audit.max_size_mb = whole(value, "megabytes").map_err(fail)?,
            "enable-admission-plugins" => {
                let mut unknown = Vec::new();
                for plugin in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    match plugin {
                        "DenyServiceExternalIPs" => admission.deny_service_external_ips = true,
                        p if ALWAYS_ON_PLUGINS.contains(&p) => {}
                        p => unknown.push(p),
                    }
                }
                if !unknown.is_empty() {
                    ignored.push(format!("enable-admission-plugins={}", unknown.join(",")));
                }
            }
            "service-account-max-token-expiration" => {
                let d = parse_go_duration(value).map_err(fail)?;
                let (low, high) = (Duration::from_secs(3600), Duration::from_secs(1 << 32));
                if !d.is_zero() && (d < low || d > high) {
                    return Err(fail(
                        "the service-account-max-token-expiration must be between 1 hour and \
                         2^32 seconds"
                            .into(),
                    ));
                }
                admission.max_token_expiration = (!d.is_zero()).then_some(d);
            }
            "service-account-key-file" => {
                service_account_key_files(std::slice::from_ref(arg)).map_err(fail)?;
            }
            _ => ignored.push(arg.clone()),
        }
    }
    Ok((limits, encryption, audit, ignored, admission))
}

/// The files of every `service-account-key-file=a[,b…]` argument (the flag may repeat, as
/// kube-apiserver's): public keys accepted for service-account tokens besides the signing
/// key's, e.g. the previous key during a rotation. Each must exist.
pub fn service_account_key_files(args: &[String]) -> Result<Vec<std::path::PathBuf>, String> {
    let mut files = Vec::new();
    for arg in args {
        let trimmed = arg.trim().trim_start_matches("--");
        let Some(("service-account-key-file", value)) =
            trimmed.split_once('=').map(|(k, v)| (k.trim(), v.trim()))
        else {
            continue;
        };
        for part in value.split(',').map(str::trim) {
            if part.is_empty() {
                return Err("expected key file paths, comma-separated".into());
            }
            let path = std::path::PathBuf::from(part);
            if !path.is_file() {
                return Err(format!("{part} is not a readable file"));
            }
            files.push(path);
        }
    }
    Ok(files)
}

fn whole(value: &str, unit: &str) -> Result<u32, String> {
    value
        .parse::<u32>()
        .map_err(|_| format!("expected a whole number of {unit} (0 is no limit)"))
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
        let (limits, _, audit, ignored, admission) = parse_args(&[]).expect("no args");
        assert!(audit.path.is_none() && audit.policy.is_none());
        assert_eq!(admission, admission::Settings::default());
        assert_eq!(limits.max_requests_inflight, 400);
        assert_eq!(limits.max_mutating_requests_inflight, 200);
        assert_eq!(limits.request_timeout, Duration::from_secs(60));
        assert_eq!(limits.min_request_timeout, Duration::from_secs(1800));
        assert!(ignored.is_empty());
    }

    #[test]
    fn flags_apply() {
        let dir = tempfile::tempdir().expect("temp dir");
        let policy = dir.path().join("policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
        )
        .expect("write policy");
        let policy_arg = format!("audit-policy-file={}", policy.display());
        let (limits, _, audit, ignored, admission) = parse_args(&args(&[
            "max-requests-inflight=10",
            "--max-mutating-requests-inflight=0",
            "request-timeout=1m30s",
            " min-request-timeout = 60 ",
            "audit-log-path=/var/log/audit.log",
            &policy_arg,
            "audit-log-maxage=30",
            "audit-log-maxbackup=10",
            "audit-log-maxsize=100",
            "audit-log-mode=batch",
            "enable-admission-plugins=NodeRestriction,PodSecurity,DenyServiceExternalIPs,EventRateLimit",
            "service-account-max-token-expiration=2h",
        ]))
        .expect("valid args");
        assert!(admission.deny_service_external_ips);
        assert_eq!(
            admission.max_token_expiration,
            Some(Duration::from_secs(7200))
        );
        assert_eq!(audit.path.as_deref(), Some("/var/log/audit.log"));
        assert!(audit.policy.is_some());
        assert_eq!(
            (audit.max_age_days, audit.max_backups, audit.max_size_mb),
            (30, 10, 100)
        );
        assert_eq!(limits.max_requests_inflight, 10);
        assert_eq!(limits.max_mutating_requests_inflight, 0);
        assert_eq!(limits.request_timeout, Duration::from_secs(90));
        assert_eq!(limits.min_request_timeout, Duration::from_secs(60));
        assert_eq!(
            ignored,
            args(&[
                "audit-log-mode=batch",
                "enable-admission-plugins=EventRateLimit"
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
            "audit-log-maxsize=1.5",
            "audit-log-maxage=-1",
            "audit-log-maxbackup=ten",
            "audit-log-path=",
            "audit-policy-file=/nonexistent/policy.yaml",
            "service-account-max-token-expiration=30m",
            "service-account-max-token-expiration=1h-",
        ] {
            let (arg, reason) = parse_args(&args(&[bad])).expect_err(bad);
            assert_eq!(arg, bad);
            assert!(!reason.is_empty());
        }
    }
}
