//! `--kube-controller-manager-arg key=value`: the k3s way of tuning the
//! controller-manager, parsed into [`crate::controllers::Config`].
//!
//! Owns the names, value syntax (Go durations like `5s` or `1m30s`, numbers, booleans) and
//! validation of the kube-controller-manager flags k3rs implements. An argument naming a
//! flag k3rs does not implement is an error rather than silently ignored, so a tuning a
//! user relies on never goes missing. No files, no network.

use std::time::Duration;

use super::cidr::Cidr;
use crate::controllers::Config;

/// The kube-controller-manager flags k3rs implements, with a one-line description each
/// (listed in the error for an unknown one).
pub const SUPPORTED: &[(&str, &str)] = &[
    (
        "node-monitor-period",
        "how often node health is checked (default 5s)",
    ),
    (
        "node-monitor-grace-period",
        "how long a node may go without a heartbeat before it is Unknown (default 40s); \
         also the quarantine before pods of a deleted node are removed",
    ),
    (
        "node-startup-grace-period",
        "how long a new node may take to post its first status (default 1m0s)",
    ),
    (
        "node-eviction-rate",
        "nodes per second tainted for eviction in a healthy zone (default 0.1)",
    ),
    (
        "secondary-node-eviction-rate",
        "the same in an unhealthy zone of a large cluster (default 0.01)",
    ),
    (
        "large-cluster-size-threshold",
        "nodes in a zone above which the secondary rate applies (default 50)",
    ),
    (
        "unhealthy-zone-threshold",
        "share of not-ready nodes (at least 3) that makes a zone unhealthy (default 0.55)",
    ),
    (
        "terminated-pod-gc-threshold",
        "terminated pods kept before the oldest are deleted; 0 disables (default 12500)",
    ),
    (
        "allocate-node-cidrs",
        "give each node a spec.podCIDR from --cluster-cidr (default true)",
    ),
    (
        "node-cidr-mask-size",
        "prefix length of each node's pod CIDR (default 24 for IPv4, 64 for IPv6)",
    ),
];

/// Applies `--kube-controller-manager-arg` values (each `key=value`, an optional leading
/// `--` ignored as k3s does) over the defaults, then checks the node CIDR size against the
/// cluster CIDR. Errors name the argument and say what is wrong.
pub fn parse_args(args: &[String], cluster_cidr: Cidr) -> Result<Config, (String, String)> {
    let mut config = Config::for_cluster_cidr(cluster_cidr);
    for arg in args {
        let fail = |reason: String| (arg.clone(), reason);
        let trimmed = arg.trim().trim_start_matches("--");
        let (key, value) = trimmed.split_once('=').ok_or_else(|| {
            fail("expected <flag>=<value>, e.g. node-monitor-grace-period=20s".into())
        })?;
        let (key, value) = (key.trim(), value.trim());
        match key {
            "node-monitor-period" => {
                config.node_monitor_period = positive_duration(value).map_err(fail)?
            }
            "node-monitor-grace-period" => {
                config.node_monitor_grace_period = positive_duration(value).map_err(fail)?
            }
            "node-startup-grace-period" => {
                config.node_startup_grace_period = positive_duration(value).map_err(fail)?
            }
            "node-eviction-rate" => config.node_eviction_rate = rate(value).map_err(fail)?,
            "secondary-node-eviction-rate" => {
                config.secondary_node_eviction_rate = rate(value).map_err(fail)?
            }
            "large-cluster-size-threshold" => {
                config.large_cluster_size_threshold = value
                    .parse::<u32>()
                    .map_err(|_| fail("expected a whole number of nodes".into()))?
            }
            "unhealthy-zone-threshold" => {
                let v: f64 = value
                    .parse()
                    .map_err(|_| fail("expected a fraction between 0 and 1".into()))?;
                if !(0.0..=1.0).contains(&v) {
                    return Err(fail("expected a fraction between 0 and 1".into()));
                }
                config.unhealthy_zone_threshold = v;
            }
            "terminated-pod-gc-threshold" => {
                config.terminated_pod_gc_threshold = value
                    .parse::<u32>()
                    .map_err(|_| fail("expected a whole number of pods (0 disables)".into()))?
            }
            "allocate-node-cidrs" => {
                config.allocate_node_cidrs = match value {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(fail("expected true or false".into())),
                }
            }
            "node-cidr-mask-size" | "node-cidr-mask-size-ipv4" | "node-cidr-mask-size-ipv6" => {
                let wrong_family = (key.ends_with("ipv4") && !cluster_cidr.is_ipv4())
                    || (key.ends_with("ipv6") && cluster_cidr.is_ipv4());
                if wrong_family {
                    // Dual-stack flags for the family the cluster does not use: kube ignores
                    // them too.
                    continue;
                }
                config.node_cidr_mask_size = value
                    .parse::<u8>()
                    .map_err(|_| fail("expected a prefix length".into()))?;
            }
            _ => {
                let names: Vec<&str> = SUPPORTED.iter().map(|(n, _)| *n).collect();
                return Err(fail(format!(
                    "k3rs does not implement the kube-controller-manager flag --{key}; supported: {}",
                    names.join(", ")
                )));
            }
        }
    }
    check_mask(cluster_cidr, config.node_cidr_mask_size).map_err(|reason| {
        (
            format!("node-cidr-mask-size={}", config.node_cidr_mask_size),
            reason,
        )
    })?;
    Ok(config)
}

/// kube's cidrset limits: the node CIDR lies inside the cluster CIDR and there are at most
/// 2^16 of them.
fn check_mask(cluster: Cidr, mask: u8) -> Result<(), String> {
    let max = if cluster.is_ipv4() { 32 } else { 128 };
    if mask > max {
        return Err(format!("larger than {max}"));
    }
    if mask < cluster.prefix_len() {
        return Err(format!(
            "a node CIDR /{mask} does not fit in --cluster-cidr {cluster}"
        ));
    }
    if mask - cluster.prefix_len() > 16 {
        return Err(format!(
            "--cluster-cidr {cluster} would hold more than 65536 node CIDRs of /{mask}; \
             use a longer cluster prefix or a shorter node mask"
        ));
    }
    Ok(())
}

fn positive_duration(value: &str) -> Result<Duration, String> {
    let d = parse_go_duration(value)?;
    if d.is_zero() {
        return Err("must be greater than 0".into());
    }
    Ok(d)
}

fn rate(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err("expected a number of nodes per second (0 or more)".into()),
    }
}

/// A Go `time.ParseDuration` string: a sequence of decimal numbers, each with a unit
/// (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), e.g. `300ms`, `1.5h`, `2h45m`; a bare `0` is zero.
/// Negative durations are refused.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let invalid = || format!("{s:?} is not a duration (like 40s, 500ms or 1m30s)");
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        if number_len == 0 {
            return Err(invalid());
        }
        let number: f64 = rest[..number_len].parse().map_err(|_| invalid())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += number * seconds_per_unit;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> Cidr {
        s.parse().expect("cidr")
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn go_durations() {
        let d = |s| parse_go_duration(s).expect(s);
        assert_eq!(d("40s"), Duration::from_secs(40));
        assert_eq!(d("500ms"), Duration::from_millis(500));
        assert_eq!(d("1m30s"), Duration::from_secs(90));
        assert_eq!(d("1.5h"), Duration::from_secs(5400));
        assert_eq!(d("2h45m"), Duration::from_secs(9900));
        assert_eq!(d("0"), Duration::ZERO);
        assert_eq!(d("10us"), Duration::from_micros(10));
        for bad in ["", "5", "s", "-5s", "5x", "1m30", "five seconds", ".s"] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn defaults_are_kubes() {
        let c = parse_args(&[], cidr("10.42.0.0/16")).expect("defaults");
        assert_eq!(c.node_monitor_period, Duration::from_secs(5));
        assert_eq!(c.node_monitor_grace_period, Duration::from_secs(40));
        assert_eq!(c.node_startup_grace_period, Duration::from_secs(60));
        assert_eq!(c.node_eviction_rate, 0.1);
        assert_eq!(c.terminated_pod_gc_threshold, 12500);
        assert_eq!(c.node_cidr_mask_size, 24);
        assert!(c.allocate_node_cidrs);
        let v6 = parse_args(&[], cidr("fd00:42::/56")).expect("v6");
        assert_eq!(v6.node_cidr_mask_size, 64);
    }

    #[test]
    fn flags_apply() {
        let c = parse_args(
            &args(&[
                "node-monitor-grace-period=5s",
                "--node-monitor-period=1s",
                "terminated-pod-gc-threshold=3",
                "node-cidr-mask-size=26",
                "node-cidr-mask-size-ipv6=80",
                "allocate-node-cidrs=false",
                "unhealthy-zone-threshold=0.6",
            ]),
            cidr("10.42.0.0/16"),
        )
        .expect("valid");
        assert_eq!(c.node_monitor_grace_period, Duration::from_secs(5));
        assert_eq!(c.node_monitor_period, Duration::from_secs(1));
        assert_eq!(c.terminated_pod_gc_threshold, 3);
        assert_eq!(c.node_cidr_mask_size, 26);
        assert!(!c.allocate_node_cidrs);
        assert_eq!(c.unhealthy_zone_threshold, 0.6);
    }

    #[test]
    fn bad_arguments_are_named() {
        let err = |list: &[&str], cluster: &str| {
            parse_args(&args(list), cidr(cluster)).expect_err("should fail")
        };
        let (arg, reason) = err(&["node-monitor-grace-period"], "10.42.0.0/16");
        assert_eq!(arg, "node-monitor-grace-period");
        assert!(reason.contains("<flag>=<value>"), "{reason}");
        let (_, reason) = err(&["node-monitor-grace-period=soon"], "10.42.0.0/16");
        assert!(reason.contains("not a duration"), "{reason}");
        let (_, reason) = err(&["node-monitor-period=0s"], "10.42.0.0/16");
        assert!(reason.contains("greater than 0"), "{reason}");
        let (_, reason) = err(&["bind-address=0.0.0.0"], "10.42.0.0/16");
        assert!(
            reason.contains("does not implement") && reason.contains("node-monitor-grace-period"),
            "{reason}"
        );
        let (_, reason) = err(&["terminated-pod-gc-threshold=-1"], "10.42.0.0/16");
        assert!(reason.contains("whole number"), "{reason}");
        let (_, reason) = err(&["node-eviction-rate=fast"], "10.42.0.0/16");
        assert!(reason.contains("per second"), "{reason}");
        let (_, reason) = err(&["unhealthy-zone-threshold=2"], "10.42.0.0/16");
        assert!(reason.contains("between 0 and 1"), "{reason}");
        let (arg, reason) = err(&["node-cidr-mask-size=12"], "10.42.0.0/16");
        assert_eq!(arg, "node-cidr-mask-size=12");
        assert!(reason.contains("does not fit"), "{reason}");
        let (_, reason) = err(&[], "10.0.0.0/7");
        assert!(reason.contains("65536"), "{reason}");
        let (_, reason) = err(&["node-cidr-mask-size=33"], "10.42.0.0/16");
        assert!(reason.contains("larger than 32"), "{reason}");
    }
}
