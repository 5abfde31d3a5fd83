//! The documented `--kubelet-arg` subset: the upstream kubelet flags a k3s user reaches for,
//! given as `name=value` (with or without the leading `--`), as k3s passes them through.
//!
//! | flag | default | meaning |
//! | --- | --- | --- |
//! | `max-pods` | 110 | `pods` capacity |
//! | `node-status-update-frequency` | 10s | how often the Node status is written |
//! | `image-gc-high-threshold` | 85 | image disk use (%) that starts image GC |
//! | `image-gc-low-threshold` | 80 | image disk use (%) GC frees down to |
//! | `maximum-dead-containers-per-container` | 1 | exited instances kept per container |
//! | `kube-reserved`, `system-reserved` | none | `cpu=…,memory=…` taken from allocatable |
//! | `eviction-hard` | `memory.available<100Mi,nodefs.available<10%` | pressure thresholds |
//! | `pod-infra-container-image` | `--pause-image` | the sandbox image image GC never removes |
//! | `serialize-image-pulls` | true | pull one image at a time |
//! | `streaming-connection-idle-timeout` | 4h | exec/attach/port-forward streams with no bytes either way for this long are closed (0: never, which CIS 4.2.5 fails) |
//!
//! Anything else is refused with a message naming the flag, so a typo is not silently ignored.

use std::time::Duration;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KubeletArgError {
    #[error("--kubelet-arg {0:?}: expected name=value")]
    Shape(String),
    #[error("--kubelet-arg {name}: unsupported kubelet flag (supported: {supported})")]
    Unknown {
        name: String,
        value: String,
        supported: String,
    },
    #[error("--kubelet-arg {name}={value}: {reason}")]
    Value {
        name: String,
        value: String,
        reason: String,
    },
}

impl KubeletArgError {
    /// The `--kubelet-arg` value at fault, as the user wrote it (for "invalid value" errors).
    pub fn argument(&self) -> String {
        match self {
            KubeletArgError::Shape(arg) => arg.clone(),
            KubeletArgError::Unknown { name, value, .. }
            | KubeletArgError::Value { name, value, .. } => format!("{name}={value}"),
        }
    }

    /// What is wrong, without the argument.
    pub fn reason(&self) -> String {
        match self {
            KubeletArgError::Shape(_) => "expected name=value, e.g. max-pods=200".into(),
            KubeletArgError::Unknown { supported, .. } => {
                format!("unsupported kubelet flag (supported: {supported})")
            }
            KubeletArgError::Value { reason, .. } => reason.clone(),
        }
    }
}

const SUPPORTED: &[&str] = &[
    "max-pods",
    "node-status-update-frequency",
    "image-gc-high-threshold",
    "image-gc-low-threshold",
    "maximum-dead-containers-per-container",
    "kube-reserved",
    "system-reserved",
    "eviction-hard",
    "pod-infra-container-image",
    "serialize-image-pulls",
    "streaming-connection-idle-timeout",
];

/// The sandbox image the agent builds and configures containerd with (the agent contract).
pub const DEFAULT_PAUSE_IMAGE: &str = "k3rs.local/pause:3.10";

#[derive(Clone, Debug, PartialEq)]
pub struct KubeletArgs {
    pub max_pods: u32,
    pub node_status_update_frequency: Duration,
    pub image_gc_high_threshold: u8,
    pub image_gc_low_threshold: u8,
    pub maximum_dead_containers_per_container: u32,
    /// Millicores and bytes held back from allocatable (kube-reserved + system-reserved).
    pub reserved_cpu_millis: u64,
    pub reserved_memory_bytes: u64,
    /// `memory.available` below which MemoryPressure is True (and held back from allocatable).
    pub eviction_memory_available_bytes: u64,
    /// `nodefs.available` percentage below which DiskPressure is True.
    pub eviction_nodefs_available_percent: u8,
    /// The sandbox image, protected from image GC.
    pub pod_infra_container_image: Option<String>,
    /// Pull one image at a time (the kubelet's default).
    pub serialize_image_pulls: bool,
    /// Exec/attach/port-forward streams idle this long are closed; zero never closes them.
    pub streaming_connection_idle_timeout: Duration,
}

impl Default for KubeletArgs {
    fn default() -> Self {
        KubeletArgs {
            max_pods: 110,
            node_status_update_frequency: Duration::from_secs(10),
            image_gc_high_threshold: 85,
            image_gc_low_threshold: 80,
            maximum_dead_containers_per_container: 1,
            reserved_cpu_millis: 0,
            reserved_memory_bytes: 0,
            eviction_memory_available_bytes: 100 * 1024 * 1024,
            eviction_nodefs_available_percent: 10,
            pod_infra_container_image: Some(DEFAULT_PAUSE_IMAGE.to_string()),
            serialize_image_pulls: true,
            streaming_connection_idle_timeout: Duration::from_secs(4 * 3600),
        }
    }
}

impl KubeletArgs {
    /// Parses `--kubelet-arg` values in order (later ones win, as with the kubelet's flags).
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<KubeletArgs, KubeletArgError> {
        Self::parse_onto(KubeletArgs::default(), args)
    }

    /// Parses `--kubelet-arg` values over `defaults` (the agent's own flags, such as
    /// `--pause-image`, set defaults that a `--kubelet-arg` may still override).
    pub fn parse_onto<S: AsRef<str>>(
        defaults: KubeletArgs,
        args: &[S],
    ) -> Result<KubeletArgs, KubeletArgError> {
        let mut out = defaults;
        for arg in args {
            let arg = arg.as_ref().trim_start_matches("--");
            let (name, value) = arg
                .split_once('=')
                .ok_or_else(|| KubeletArgError::Shape(arg.to_string()))?;
            let bad = |reason: &str| KubeletArgError::Value {
                name: name.to_string(),
                value: value.to_string(),
                reason: reason.to_string(),
            };
            match name {
                "max-pods" => {
                    out.max_pods = value.parse().map_err(|_| bad("not a whole number"))?
                }
                "node-status-update-frequency" => {
                    out.node_status_update_frequency =
                        parse_duration(value).ok_or_else(|| bad("not a duration like 10s"))?
                }
                "image-gc-high-threshold" => {
                    out.image_gc_high_threshold =
                        percent(value).ok_or_else(|| bad("not a percentage 0-100"))?
                }
                "image-gc-low-threshold" => {
                    out.image_gc_low_threshold =
                        percent(value).ok_or_else(|| bad("not a percentage 0-100"))?
                }
                "maximum-dead-containers-per-container" => {
                    out.maximum_dead_containers_per_container =
                        value.parse().map_err(|_| bad("not a whole number"))?
                }
                "kube-reserved" | "system-reserved" => {
                    for pair in value.split(',').filter(|p| !p.is_empty()) {
                        let (resource, amount) = pair
                            .split_once('=')
                            .ok_or_else(|| bad("expected cpu=…,memory=…"))?;
                        match resource {
                            "cpu" => {
                                out.reserved_cpu_millis +=
                                    cpu_millis(amount).ok_or_else(|| bad("bad cpu quantity"))?
                            }
                            "memory" => {
                                out.reserved_memory_bytes +=
                                    bytes(amount).ok_or_else(|| bad("bad memory quantity"))?
                            }
                            "ephemeral-storage" | "pid" => {}
                            _ => return Err(bad("only cpu, memory, ephemeral-storage and pid")),
                        }
                    }
                }
                "streaming-connection-idle-timeout" => {
                    out.streaming_connection_idle_timeout =
                        parse_duration(value).ok_or_else(|| bad("not a duration like 4h0m0s"))?
                }
                "serialize-image-pulls" => {
                    out.serialize_image_pulls = match value {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad("expected true or false")),
                    }
                }
                "pod-infra-container-image" => {
                    out.pod_infra_container_image =
                        Some(value.to_string()).filter(|v| !v.is_empty())
                }
                "eviction-hard" => {
                    for rule in value.split(',').filter(|p| !p.is_empty()) {
                        let (signal, threshold) = rule
                            .split_once('<')
                            .ok_or_else(|| bad("expected signal<threshold"))?;
                        match signal {
                            "memory.available" => {
                                out.eviction_memory_available_bytes = bytes(threshold)
                                    .ok_or_else(|| bad("bad memory.available quantity"))?
                            }
                            "nodefs.available" => {
                                out.eviction_nodefs_available_percent = threshold
                                    .strip_suffix('%')
                                    .and_then(percent)
                                    .ok_or_else(|| bad("nodefs.available must be a percentage"))?
                            }
                            "imagefs.available" | "nodefs.inodesFree" | "pid.available" => {}
                            _ => return Err(bad("unknown eviction signal")),
                        }
                    }
                }
                _ => {
                    return Err(KubeletArgError::Unknown {
                        name: name.to_string(),
                        value: value.to_string(),
                        supported: SUPPORTED.join(", "),
                    });
                }
            }
        }
        if out.image_gc_low_threshold > out.image_gc_high_threshold {
            return Err(KubeletArgError::Value {
                name: "image-gc-low-threshold".into(),
                value: out.image_gc_low_threshold.to_string(),
                reason: "must not exceed image-gc-high-threshold".into(),
            });
        }
        Ok(out)
    }
}

fn percent(value: &str) -> Option<u8> {
    value.parse::<u8>().ok().filter(|p| *p <= 100)
}

/// `10s`, `1m30s`, `500ms`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.')?;
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += Duration::from_secs_f64(number * unit);
        rest = &rest[unit_len..];
    }
    Some(total)
}

/// A CPU quantity (`500m`, `2`, `0.5`) in millicores.
pub fn cpu_millis(text: &str) -> Option<u64> {
    if let Some(m) = text.strip_suffix('m') {
        return m.parse().ok();
    }
    let cores: f64 = text.parse().ok()?;
    (cores >= 0.0).then(|| (cores * 1000.0).ceil() as u64)
}

/// A memory quantity (`128Mi`, `1G`, `1e3`, `512`) in bytes.
pub fn bytes(text: &str) -> Option<u64> {
    const SUFFIXES: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
        ("m", 1e-3),
    ];
    for (suffix, factor) in SUFFIXES {
        if let Some(number) = text.strip_suffix(suffix) {
            let n: f64 = number.parse().ok()?;
            return (n >= 0.0).then(|| (n * factor).ceil() as u64);
        }
    }
    let n: f64 = text.parse().ok()?;
    (n >= 0.0).then(|| n.ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let none: [&str; 0] = [];
        assert_eq!(KubeletArgs::parse(&none).unwrap(), KubeletArgs::default());
        let args = KubeletArgs::parse(&[
            "max-pods=250",
            "--node-status-update-frequency=1m",
            "kube-reserved=cpu=100m,memory=256Mi",
            "system-reserved=cpu=0.5",
            "eviction-hard=memory.available<200Mi,nodefs.available<5%",
        ])
        .unwrap();
        assert_eq!(args.max_pods, 250);
        assert_eq!(args.node_status_update_frequency, Duration::from_secs(60));
        assert_eq!(args.reserved_cpu_millis, 600);
        assert_eq!(args.reserved_memory_bytes, 256 * 1024 * 1024);
        assert_eq!(args.eviction_memory_available_bytes, 200 * 1024 * 1024);
        assert_eq!(args.eviction_nodefs_available_percent, 5);
        assert_eq!(
            args.streaming_connection_idle_timeout,
            Duration::from_secs(4 * 3600),
            "the kubelet's 4h default"
        );
        let args = KubeletArgs::parse(&["streaming-connection-idle-timeout=5m30s"]).unwrap();
        assert_eq!(
            args.streaming_connection_idle_timeout,
            Duration::from_secs(330)
        );
        assert!(KubeletArgs::parse(&["streaming-connection-idle-timeout=forever"]).is_err());
        let defaults = KubeletArgs {
            pod_infra_container_image: Some("registry.local/pause:9".into()),
            ..KubeletArgs::default()
        };
        let args =
            KubeletArgs::parse_onto(defaults.clone(), &["serialize-image-pulls=false"]).unwrap();
        assert!(!args.serialize_image_pulls);
        assert_eq!(
            args.pod_infra_container_image.as_deref(),
            Some("registry.local/pause:9")
        );
        let args = KubeletArgs::parse_onto(defaults, &["pod-infra-container-image=other/pause:1"])
            .unwrap();
        assert_eq!(
            args.pod_infra_container_image.as_deref(),
            Some("other/pause:1")
        );
    }

    #[test]
    fn refuses_unknown_and_bad_values() {
        let err = KubeletArgs::parse(&["fail-swap-on=false"]).unwrap_err();
        assert!(
            err.to_string().contains("unsupported kubelet flag"),
            "{err}"
        );
        assert!(
            err.to_string().contains("max-pods"),
            "lists what is supported: {err}"
        );
        assert!(matches!(
            KubeletArgs::parse(&["max-pods"]).unwrap_err(),
            KubeletArgError::Shape(_)
        ));
        assert!(KubeletArgs::parse(&["max-pods=lots"]).is_err());
        let err = KubeletArgs::parse(&["image-gc-low-threshold=90"]).unwrap_err();
        assert_eq!(err.argument(), "image-gc-low-threshold=90");
        assert!(err.reason().contains("must not exceed"), "{err}");
        assert!(KubeletArgs::parse(&["serialize-image-pulls=maybe"]).is_err());
    }

    #[test]
    fn quantities() {
        assert_eq!(bytes("128Mi"), Some(134217728));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("512"), Some(512));
        assert_eq!(bytes("1e3"), Some(1000));
        assert_eq!(cpu_millis("250m"), Some(250));
        assert_eq!(cpu_millis("1.5"), Some(1500));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("10"), None);
    }
}
