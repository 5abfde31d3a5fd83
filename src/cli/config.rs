//! Turns `k3rs server`'s flags, `K3RS_*` environment variables and the YAML config file into one
//! validated, typed [`ServerConfig`].
//!
//! Precedence is command line > environment > config file > defaults (clap already merges the
//! first two). The config file uses the long flag names as keys (`data-dir: /srv/k3rs`,
//! `tls-san: [a, b]` or `tls-san: a`); an unknown key is an error naming it. A missing default
//! config file is fine; a missing file given with `--config`/`K3RS_CONFIG_FILE` is an error.
//! Every invalid value is reported as `invalid value "<value>" for --<flag>: <reason>`, with the
//! config file named when the value came from there. YAML scalars are read as the text a user
//! would type on the command line, so `write-kubeconfig-mode: 0644` and `644` both mean 0644
//! (but an unquoted YAML `0o644` is the number 420; quote it).
//!
//! Owns parsing and validation only: it reads the config file, the token file and the hostname,
//! and touches nothing else (no network, no writes).

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use super::args::ServerArgs;
use super::cidr::Cidr;

/// Default `--config`.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/k3rs/config.yaml";
/// Default `--data-dir`.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/k3rs";
/// Default `--write-kubeconfig`.
pub const DEFAULT_KUBECONFIG: &str = "/etc/k3rs/k3rs.yaml";
/// Default `--write-kubeconfig-mode`.
pub const DEFAULT_KUBECONFIG_MODE: u32 = 0o600;
/// Default `--https-listen-port`.
pub const DEFAULT_HTTPS_PORT: u16 = 6443;
/// Default `--cluster-cidr`.
pub const DEFAULT_CLUSTER_CIDR: &str = "10.42.0.0/16";
/// Default `--service-cidr`.
pub const DEFAULT_SERVICE_CIDR: &str = "10.43.0.0/16";
/// Default `--cluster-dns`.
pub const DEFAULT_CLUSTER_DNS: &str = "10.43.0.10";
/// Default `--cluster-domain`.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
/// Default `--service-node-port-range`.
pub const DEFAULT_NODE_PORT_RANGE: RangeInclusive<u16> = 30000..=32767;

/// The validated configuration of `k3rs server`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// The config file that was read, if any.
    pub config_file: Option<PathBuf>,
    /// `--data-dir`, absolute.
    pub data_dir: PathBuf,
    /// `--bind-address`.
    pub bind_address: IpAddr,
    /// `--https-listen-port`.
    pub https_listen_port: u16,
    /// `--advertise-address`; `None` means "use the node IP".
    pub advertise_address: Option<IpAddr>,
    /// `--tls-san`, each an IP address or a DNS name, in the order given, without duplicates.
    pub tls_san: Vec<String>,
    /// `--write-kubeconfig`, absolute.
    pub write_kubeconfig: PathBuf,
    /// `--write-kubeconfig-mode`, e.g. `0o600`.
    pub write_kubeconfig_mode: u32,
    /// The join token secret: `--token`, or else the content of `--token-file`.
    pub token: Option<Token>,
    /// `--token-file`, absolute, if given.
    pub token_file: Option<PathBuf>,
    /// `--agent-token`, or else the content of `--agent-token-file`: joins agents only.
    pub agent_token: Option<Token>,
    /// `--cluster-init`: this server starts a cluster other servers may join.
    pub cluster_init: bool,
    /// `--secrets-encryption`: encrypt Secrets at rest with the generated configuration.
    pub secrets_encryption: bool,
    /// `--kube-apiserver-arg encryption-provider-config=<file>`.
    pub encryption_provider_config: Option<PathBuf>,
    /// `--server`: the URL of a server of the cluster to join (`https://host:port`).
    pub join_url: Option<String>,
    /// `--etcd-arg heartbeat-interval=…,election-timeout=…`.
    pub raft_timing: crate::apiserver::RaftTiming,
    /// `--node-name`, defaulting to the lower-cased hostname.
    pub node_name: String,
    /// `--cluster-cidr`.
    pub cluster_cidr: Cidr,
    /// `--service-cidr`.
    pub service_cidr: Cidr,
    /// `--cluster-dns` (inside the service CIDR).
    pub cluster_dns: IpAddr,
    /// `--cluster-domain`.
    pub cluster_domain: String,
    /// `--service-node-port-range`.
    pub service_node_port_range: RangeInclusive<u16>,
    /// `--pod-security-admission-config-file`, read and parsed; kube's defaults (everything
    /// privileged, nothing exempt) without it.
    pub pod_security: crate::apiserver::admission::pod_security::Config,
    /// The controller-manager's tunables: `--cluster-cidr` and
    /// `--kube-controller-manager-arg`.
    pub controllers: crate::controllers::Config,
    /// The API server's limits: `--kube-apiserver-arg`.
    pub apiserver_limits: crate::apiserver::http::limits::ServingLimits,
    /// The audit log (`--kube-apiserver-arg audit-*`; the policy file read and parsed).
    pub audit: crate::apiserver::auth::audit::Settings,
    /// The `--kube-apiserver-arg` items k3rs does not implement (logged at start).
    pub ignored_apiserver_args: Vec<String>,
    /// Optional admission plugins and the TokenRequest cap (`--kube-apiserver-arg`).
    pub admission: crate::apiserver::admission::Settings,
    /// `--kube-apiserver-arg service-account-key-file=…`: further token verification keys.
    pub service_account_key_files: Vec<PathBuf>,
    /// `--disable-agent`.
    pub disable_agent: bool,
    /// `--disable-controller-manager`.
    pub disable_controller_manager: bool,
    /// `--disable-scheduler`.
    pub disable_scheduler: bool,
    /// `--disable`: the packaged components not to run, validated against
    /// [`DISABLE_COMPONENTS`].
    pub disable: Vec<String>,
    /// `--debug`.
    pub debug: bool,
    /// Snapshot, S3 and `--cluster-reset` settings.
    pub snapshots: super::snapshot_config::SnapshotServerConfig,
    /// The embedded agent's node settings (`--node-ip`, `--node-label`, …).
    pub node: super::node_config::NodeConfig,
}

/// What `--disable` accepts: k3s's list plus k3rs's packaged manifests
/// (`crate::addons::packaged`). `servicelb` is the ServiceLB controller; every name also
/// removes a manifest `<name>.yaml` (or folder `<name>/`) from `<data-dir>/server/manifests`
/// with the objects it deployed, as in k3s. `traefik`, `coredns`, `local-storage`,
/// `metrics-server` and `runtimes` name add-ons k3s ships and k3rs does not, accepted so k3s
/// configs keep working.
pub const DISABLE_COMPONENTS: &[&str] = &[
    "servicelb",
    "traefik",
    "coredns",
    "local-storage",
    "metrics-server",
    "runtimes",
    "rolebindings",
];

impl ServerConfig {
    /// Whether the ServiceLB controller runs (not `--disable=servicelb`).
    pub fn servicelb_enabled(&self) -> bool {
        !self.disable.iter().any(|c| c == "servicelb")
    }

    /// The first address of the service CIDR: the ClusterIP of the `kubernetes` Service
    /// (`10.43.0.1` by default).
    pub fn kubernetes_service_ip(&self) -> IpAddr {
        // A CIDR always has a first address after the network address unless it is a single
        // host; fall back to the network address then.
        self.service_cidr
            .nth(1)
            .unwrap_or_else(|| self.service_cidr.network())
    }
}

/// A token as given by the user. Its `Debug` output hides the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wraps a token value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The token value.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Where a value came from, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A flag or a `K3RS_*` environment variable.
    CommandLine,
    /// The config file at this path.
    ConfigFile(PathBuf),
    /// Derived from the machine's hostname.
    Hostname,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::CommandLine => Ok(()),
            Origin::ConfigFile(path) => write!(f, " (from config file {})", path.display()),
            Origin::Hostname => f.write_str(" (defaulted from the hostname)"),
        }
    }
}

/// Why the configuration was rejected. All of these are usage errors (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value failed validation.
    #[error("invalid value {value:?} for --{flag}{origin}: {reason}")]
    InvalidValue {
        flag: &'static str,
        value: String,
        origin: Origin,
        reason: String,
    },
    /// The config file has a key that is not a flag of the command (`k3rs server`, …).
    #[error("unknown key {key:?} in config file {}: {command} has no --{key} flag", path.display())]
    UnknownKey {
        key: String,
        path: PathBuf,
        command: &'static str,
    },
    /// A required flag was given nowhere.
    #[error("--{flag} is required: {hint}")]
    Missing { flag: &'static str, hint: String },
    /// The config file is missing (when given explicitly), unreadable or not valid YAML.
    #[error("config file {}: {reason}", path.display())]
    ConfigFile { path: PathBuf, reason: String },
}

/// The kind of value a config key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    One,
    Many,
    /// A list whose items are kept whole (no comma splitting): `key=value` arguments.
    Args,
    Bool,
}

/// Every key the config file may contain: the long flag names of `k3rs server` (and the global
/// `--debug`), without `config` itself.
const KEYS: &[(&str, Kind)] = &[
    ("data-dir", Kind::One),
    ("bind-address", Kind::One),
    ("https-listen-port", Kind::One),
    ("advertise-address", Kind::One),
    ("tls-san", Kind::Many),
    ("write-kubeconfig", Kind::One),
    ("write-kubeconfig-mode", Kind::One),
    ("token", Kind::One),
    ("token-file", Kind::One),
    ("agent-token", Kind::One),
    ("agent-token-file", Kind::One),
    ("cluster-init", Kind::Bool),
    ("secrets-encryption", Kind::Bool),
    ("server", Kind::One),
    ("etcd-arg", Kind::Args),
    ("node-name", Kind::One),
    ("cluster-cidr", Kind::One),
    ("service-cidr", Kind::One),
    ("cluster-dns", Kind::One),
    ("cluster-domain", Kind::One),
    ("service-node-port-range", Kind::One),
    ("kube-apiserver-arg", Kind::Args),
    ("pod-security-admission-config-file", Kind::One),
    ("kube-controller-manager-arg", Kind::Args),
    ("disable-agent", Kind::Bool),
    ("disable-controller-manager", Kind::Bool),
    ("disable-scheduler", Kind::Bool),
    ("disable", Kind::Many),
    ("debug", Kind::Bool),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Raw {
    One(String),
    Many(Vec<String>),
    Bool(bool),
}

#[derive(Debug, Clone)]
pub(super) struct Setting {
    pub(super) raw: Raw,
    pub(super) origin: Origin,
}

/// Settings from one source, keyed by long flag name.
pub(super) type Layer = BTreeMap<&'static str, Setting>;

/// Finds a config key: its flag name (static) and kind.
pub(super) type KeyLookup<'a> = &'a dyn Fn(&str) -> Option<(&'static str, Kind)>;

/// Loads and validates the configuration of `k3rs server` from its parsed flags (which include
/// the environment) and the config file. `debug` is the top-level `k3rs --debug` flag; the
/// server's own `--debug` wins over it.
pub fn load(args: &ServerArgs, debug: Option<bool>) -> Result<ServerConfig, ConfigError> {
    load_with(
        args,
        debug,
        Path::new(DEFAULT_CONFIG_FILE),
        &system_hostname,
    )
}

/// [`load`] with the default config file path and the hostname lookup supplied by the caller.
fn load_with(
    args: &ServerArgs,
    debug: Option<bool>,
    default_config: &Path,
    hostname: &dyn Fn() -> io::Result<String>,
) -> Result<ServerConfig, ConfigError> {
    let cli = cli_layer(args, debug);
    let (file, config_file) = read_config_file(
        args.config.as_deref(),
        default_config,
        &server_key,
        "k3rs server",
    )?;
    resolve(merge(cli, file), config_file, hostname)
}

/// A key of `k3rs server`'s config file.
fn server_key(key: &str) -> Option<(&'static str, Kind)> {
    KEYS.iter()
        .chain(super::node_config::NODE_KEYS)
        .copied()
        .find(|(name, _)| *name == key)
        .or_else(|| {
            super::snapshot_args::CONFIG_KEYS
                .iter()
                .find(|(name, _)| *name == key)
                .map(|&(name, boolean)| (name, if boolean { Kind::Bool } else { Kind::One }))
        })
}

/// Reads the config file: `explicit` (from `--config`, which must exist) or else
/// `default_config` (which may be missing). Returns its settings and the path read, if any.
pub(super) fn read_config_file(
    explicit: Option<&str>,
    default_config: &Path,
    lookup: KeyLookup<'_>,
    command: &'static str,
) -> Result<(Layer, Option<PathBuf>), ConfigError> {
    let (path, explicit) = match explicit.filter(|s| !s.is_empty()) {
        Some(p) => (PathBuf::from(p), true),
        None => (default_config.to_path_buf(), false),
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((file_layer(&text, &path, lookup, command)?, Some(path))),
        Err(e) if e.kind() == io::ErrorKind::NotFound && !explicit => Ok((Layer::new(), None)),
        Err(e) => Err(ConfigError::ConfigFile {
            path,
            reason: e.to_string(),
        }),
    }
}

/// Adds a command-line value to `layer` if it was given.
pub(super) fn put_one(layer: &mut Layer, key: &'static str, value: &Option<String>) {
    if let Some(v) = value {
        layer.insert(
            key,
            Setting {
                raw: Raw::One(v.clone()),
                origin: Origin::CommandLine,
            },
        );
    }
}

/// Adds a repeatable command-line value to `layer` if it was given at least once.
pub(super) fn put_many(layer: &mut Layer, key: &'static str, values: &[String]) {
    if !values.is_empty() {
        layer.insert(
            key,
            Setting {
                raw: Raw::Many(values.to_vec()),
                origin: Origin::CommandLine,
            },
        );
    }
}

/// Adds a boolean command-line value to `layer` if it was given.
pub(super) fn put_bool(layer: &mut Layer, key: &'static str, value: Option<bool>) {
    if let Some(b) = value {
        layer.insert(
            key,
            Setting {
                raw: Raw::Bool(b),
                origin: Origin::CommandLine,
            },
        );
    }
}

/// Reads the machine's hostname (from the kernel, falling back to `/etc/hostname`).
pub fn system_hostname() -> io::Result<String> {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string());
    match read("/proc/sys/kernel/hostname") {
        Ok(h) if !h.is_empty() => Ok(h),
        _ => match read("/etc/hostname") {
            Ok(h) if !h.is_empty() => Ok(h),
            Ok(_) => Err(io::Error::other("the hostname is empty")),
            Err(e) => Err(e),
        },
    }
}

fn cli_layer(args: &ServerArgs, debug: Option<bool>) -> Layer {
    let mut layer = Layer::new();
    let mut one = |key: &'static str, value: &Option<String>| {
        if let Some(v) = value {
            layer.insert(
                key,
                Setting {
                    raw: Raw::One(v.clone()),
                    origin: Origin::CommandLine,
                },
            );
        }
    };
    one("data-dir", &args.data_dir);
    one("bind-address", &args.bind_address);
    one("https-listen-port", &args.https_listen_port);
    one("advertise-address", &args.advertise_address);
    one("write-kubeconfig", &args.write_kubeconfig);
    one("write-kubeconfig-mode", &args.write_kubeconfig_mode);
    one("token", &args.token);
    one("token-file", &args.token_file);
    one("agent-token", &args.agent_token);
    one("agent-token-file", &args.agent_token_file);
    one("server", &args.server);
    one("node-name", &args.node_name);
    one("cluster-cidr", &args.cluster_cidr);
    one("service-cidr", &args.service_cidr);
    one("cluster-dns", &args.cluster_dns);
    one("cluster-domain", &args.cluster_domain);
    one("service-node-port-range", &args.service_node_port_range);
    one(
        "pod-security-admission-config-file",
        &args.pod_security_admission_config_file,
    );
    for (key, value) in args.snapshots.strings() {
        one(key, value);
    }
    put_many(&mut layer, "disable", &args.disable);
    if !args.etcd_arg.is_empty() {
        layer.insert(
            "etcd-arg",
            Setting {
                raw: Raw::Many(args.etcd_arg.clone()),
                origin: Origin::CommandLine,
            },
        );
    }
    if !args.kube_apiserver_arg.is_empty() {
        layer.insert(
            "kube-apiserver-arg",
            Setting {
                raw: Raw::Many(args.kube_apiserver_arg.clone()),
                origin: Origin::CommandLine,
            },
        );
    }
    if !args.kube_controller_manager_arg.is_empty() {
        layer.insert(
            "kube-controller-manager-arg",
            Setting {
                raw: Raw::Many(args.kube_controller_manager_arg.clone()),
                origin: Origin::CommandLine,
            },
        );
    }
    if !args.tls_san.is_empty() {
        layer.insert(
            "tls-san",
            Setting {
                raw: Raw::Many(args.tls_san.clone()),
                origin: Origin::CommandLine,
            },
        );
    }
    for (key, value) in args.snapshots.bools() {
        if let Some(b) = value {
            layer.insert(
                key,
                Setting {
                    raw: Raw::Bool(b),
                    origin: Origin::CommandLine,
                },
            );
        }
    }
    let debug = args.debug.or(debug);
    for (key, value) in [
        ("disable-agent", args.disable_agent),
        (
            "disable-controller-manager",
            args.disable_controller_manager,
        ),
        ("disable-scheduler", args.disable_scheduler),
        ("cluster-init", args.cluster_init),
        ("secrets-encryption", args.secrets_encryption),
        ("debug", debug),
    ] {
        if let Some(b) = value {
            layer.insert(
                key,
                Setting {
                    raw: Raw::Bool(b),
                    origin: Origin::CommandLine,
                },
            );
        }
    }
    super::node_config::cli_layer(&args.node, &mut layer);
    layer
}

/// Parses the config file's YAML into a layer, rejecting keys `lookup` does not know.
fn file_layer(
    text: &str,
    path: &Path,
    lookup: KeyLookup<'_>,
    command: &'static str,
) -> Result<Layer, ConfigError> {
    use serde_yaml::Value;

    let file_err = |reason: String| ConfigError::ConfigFile {
        path: path.to_path_buf(),
        reason,
    };
    let doc: Value = serde_yaml::from_str(text).map_err(|e| file_err(e.to_string()))?;
    let map = match doc {
        Value::Null => return Ok(Layer::new()),
        Value::Mapping(map) => map,
        _ => {
            return Err(file_err(
                "expected a mapping of flag names to values, like `data-dir: /var/lib/k3rs`"
                    .to_string(),
            ));
        }
    };
    let origin = Origin::ConfigFile(path.to_path_buf());
    let mut layer = Layer::new();
    for (key, value) in map {
        let key = match key {
            Value::String(k) => k,
            other => return Err(file_err(format!("key {other:?} is not a string"))),
        };
        let Some((flag, kind)) = lookup(&key) else {
            return Err(ConfigError::UnknownKey {
                key,
                path: path.to_path_buf(),
                command,
            });
        };
        let invalid = |value: String, reason: &str| ConfigError::InvalidValue {
            flag,
            value,
            origin: origin.clone(),
            reason: reason.to_string(),
        };
        let raw = match (kind, value) {
            (Kind::Bool, Value::Bool(b)) => Raw::Bool(b),
            (Kind::Bool, other) => {
                let s = scalar(&other).unwrap_or_else(|| format!("{other:?}"));
                match s.as_str() {
                    "true" => Raw::Bool(true),
                    "false" => Raw::Bool(false),
                    _ => return Err(invalid(s, "expected true or false")),
                }
            }
            (Kind::Many, Value::Sequence(items)) => {
                let mut values = Vec::new();
                for item in items {
                    match scalar(&item) {
                        Some(s) => values.extend(split_list(&s)),
                        None => {
                            return Err(invalid(
                                format!("{item:?}"),
                                "list items must be plain values",
                            ));
                        }
                    }
                }
                Raw::Many(values)
            }
            (Kind::Args, Value::Sequence(items)) => {
                let mut values = Vec::new();
                for item in items {
                    match scalar(&item) {
                        Some(s) => values.push(s),
                        None => {
                            return Err(invalid(
                                format!("{item:?}"),
                                "list items must be plain values",
                            ));
                        }
                    }
                }
                Raw::Many(values)
            }
            (Kind::Args, other) => match scalar(&other) {
                Some(s) => Raw::Many(vec![s]),
                None => return Err(invalid(format!("{other:?}"), "expected a value or a list")),
            },
            (Kind::Many, other) => match scalar(&other) {
                Some(s) => Raw::Many(split_list(&s)),
                None => return Err(invalid(format!("{other:?}"), "expected a value or a list")),
            },
            (Kind::One, other) => match scalar(&other) {
                Some(s) => Raw::One(s),
                None => return Err(invalid(format!("{other:?}"), "expected a single value")),
            },
        };
        layer.insert(
            flag,
            Setting {
                raw,
                origin: origin.clone(),
            },
        );
    }
    Ok(layer)
}

/// A YAML scalar as the string a user would have typed on the command line.
fn scalar(value: &serde_yaml::Value) -> Option<String> {
    use serde_yaml::Value;
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// Command line (and environment) over config file, key by key.
pub(super) fn merge(cli: Layer, mut file: Layer) -> Layer {
    file.extend(cli);
    file
}

/// Validates the merged settings and applies defaults.
fn resolve(
    layer: Layer,
    config_file: Option<PathBuf>,
    hostname: &dyn Fn() -> io::Result<String>,
) -> Result<ServerConfig, ConfigError> {
    let s = Settings(layer);

    let data_dir = s
        .one("data-dir", parse_path)?
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let bind_address = s
        .one("bind-address", parse_ip)?
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let https_listen_port = s
        .one("https-listen-port", parse_port)?
        .unwrap_or(DEFAULT_HTTPS_PORT);
    let advertise_address = s.one("advertise-address", parse_ip)?;
    let tls_san = s.many("tls-san", parse_san)?;
    let write_kubeconfig = s
        .one("write-kubeconfig", parse_path)?
        .unwrap_or_else(|| PathBuf::from(DEFAULT_KUBECONFIG));
    let write_kubeconfig_mode = s
        .one("write-kubeconfig-mode", parse_mode)?
        .unwrap_or(DEFAULT_KUBECONFIG_MODE);
    let token_file = s.one("token-file", parse_path)?;
    let token =
        match s.one("token", |v| Ok(v.to_string()))? {
            Some(t) if !t.is_empty() => Some(Token::new(t)),
            _ => match (&token_file, s.get("token-file")) {
                (Some(path), Some((raw, origin))) => Some(read_token_file(path).map_err(
                    |reason| ConfigError::InvalidValue {
                        flag: "token-file",
                        value: raw.to_string(),
                        origin: origin.clone(),
                        reason,
                    },
                )?),
                _ => None,
            },
        };
    let agent_token = match s.one("agent-token", |v| Ok(v.trim().to_string()))? {
        Some(t) if !t.is_empty() => Some(Token::new(t)),
        _ => match (
            s.one("agent-token-file", parse_path)?,
            s.get("agent-token-file"),
        ) {
            (Some(path), Some((raw, origin))) => Some(read_token_file(&path).map_err(
                |reason| ConfigError::InvalidValue {
                    flag: "agent-token-file",
                    value: raw.to_string(),
                    origin: origin.clone(),
                    reason,
                },
            )?),
            _ => None,
        },
    };
    let node_name = match s.one("node-name", parse_node_name)? {
        Some(name) => name,
        None => {
            let host = hostname().map_err(|e| ConfigError::InvalidValue {
                flag: "node-name",
                value: String::new(),
                origin: Origin::Hostname,
                reason: format!("cannot read the hostname ({e}); set --node-name"),
            })?;
            let lower = host.to_ascii_lowercase();
            parse_node_name(&lower).map_err(|reason| ConfigError::InvalidValue {
                flag: "node-name",
                value: lower.clone(),
                origin: Origin::Hostname,
                reason: format!("{reason}; set --node-name"),
            })?
        }
    };
    let cluster_cidr = s
        .one("cluster-cidr", parse_cidr)?
        .unwrap_or_else(|| builtin(DEFAULT_CLUSTER_CIDR));
    let service_cidr = s
        .one("service-cidr", parse_cidr)?
        .unwrap_or_else(|| builtin(DEFAULT_SERVICE_CIDR));
    let cluster_dns = s
        .one("cluster-dns", parse_ip)?
        .unwrap_or_else(|| builtin(DEFAULT_CLUSTER_DNS));
    let cluster_domain = s
        .one("cluster-domain", parse_domain)?
        .unwrap_or_else(|| DEFAULT_CLUSTER_DOMAIN.to_string());
    let service_node_port_range = s
        .one("service-node-port-range", parse_port_range)?
        .unwrap_or(DEFAULT_NODE_PORT_RANGE);
    let pod_security = match s.one("pod-security-admission-config-file", parse_path)? {
        Some(path) => std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
            .and_then(|text| crate::apiserver::admission::pod_security::Config::parse(&text))
            .map_err(|reason| {
                let raw = s
                    .get("pod-security-admission-config-file")
                    .map(|(raw, _)| raw.to_string())
                    .unwrap_or_default();
                s.invalid("pod-security-admission-config-file", &raw, reason)
            })?,
        None => crate::apiserver::admission::pod_security::Config::default(),
    };
    let kcm_args = s.many("kube-controller-manager-arg", |v| Ok(v.to_string()))?;
    let controllers = super::controller_manager::parse_args(&kcm_args, cluster_cidr)
        .map_err(|(arg, reason)| s.invalid("kube-controller-manager-arg", &arg, reason))?;
    let apiserver_args = s.many("kube-apiserver-arg", |v| Ok(v.to_string()))?;
    let (apiserver_limits, encryption_provider_config, audit, ignored_apiserver_args, admission) =
        super::apiserver_args::parse_args(&apiserver_args)
            .map_err(|(arg, reason)| s.invalid("kube-apiserver-arg", &arg, reason))?;
    let service_account_key_files =
        super::apiserver_args::service_account_key_files(&apiserver_args).map_err(|reason| {
            s.invalid("kube-apiserver-arg", "service-account-key-file", reason)
        })?;
    let cluster_init = s.flag("cluster-init");
    let secrets_encryption = s.flag("secrets-encryption");
    let join_url = s.one("server", parse_server_url)?;
    let etcd_args = s.many("etcd-arg", |v| Ok(v.to_string()))?;
    let raft_timing =
        parse_etcd_args(&etcd_args).map_err(|(arg, reason)| s.invalid("etcd-arg", &arg, reason))?;
    if cluster_init && join_url.is_some() {
        return Err(s.invalid(
            "cluster-init",
            "true",
            "--cluster-init starts a new cluster; --server joins an existing one: give one of them"
                .into(),
        ));
    }
    let disable_agent = s.flag("disable-agent");
    let disable_controller_manager = s.flag("disable-controller-manager");
    let disable_scheduler = s.flag("disable-scheduler");
    let disable = s.many("disable", parse_component)?;
    let debug = s.flag("debug");

    // Cross-field checks, reported against the flag most likely to be wrong.
    if cluster_cidr.overlaps(&service_cidr) {
        return Err(s.invalid(
            "service-cidr",
            &service_cidr.to_string(),
            format!("overlaps --cluster-cidr {cluster_cidr}"),
        ));
    }
    if !service_cidr.contains(cluster_dns) {
        return Err(s.invalid(
            "cluster-dns",
            &cluster_dns.to_string(),
            format!("not inside --service-cidr {service_cidr}"),
        ));
    }

    let snapshots = super::snapshot_config::resolve(&s, &data_dir, &node_name)?;
    let node = super::node_config::resolve(&s)?;

    Ok(ServerConfig {
        node,
        snapshots,
        config_file,
        data_dir,
        bind_address,
        https_listen_port,
        advertise_address,
        tls_san,
        write_kubeconfig,
        write_kubeconfig_mode,
        token,
        token_file,
        agent_token,
        cluster_init,
        secrets_encryption,
        encryption_provider_config,
        join_url,
        raft_timing,
        node_name,
        cluster_cidr,
        service_cidr,
        cluster_dns,
        cluster_domain,
        service_node_port_range,
        pod_security,
        controllers,
        apiserver_limits,
        ignored_apiserver_args,
        admission,
        service_account_key_files,
        audit,
        disable_agent,
        disable_controller_manager,
        disable_scheduler,
        disable,
        debug,
    })
}

/// `--server`: an `https://` URL with a host (the port defaults to 6443).
fn parse_server_url(value: &str) -> Result<String, String> {
    let value = value.trim().trim_end_matches('/');
    let Some(rest) = value.strip_prefix("https://") else {
        return Err("must be an https:// URL, e.g. https://10.0.0.1:6443".into());
    };
    if rest.is_empty() || rest.contains('/') || rest.contains('@') {
        return Err("must be https://<host>[:<port>] with no path".into());
    }
    let uri: http::Uri = value.parse().map_err(|e| format!("not a valid URL: {e}"))?;
    if uri.host().is_none_or(str::is_empty) {
        return Err("names no host".into());
    }
    Ok(value.to_string())
}

/// `--etcd-arg` items k3rs understands: the raft timing, in milliseconds as etcd takes
/// them. Anything else is refused by name (k3s passes unknown ones to etcd; k3rs has no
/// etcd to pass them to).
fn parse_etcd_args(args: &[String]) -> Result<crate::apiserver::RaftTiming, (String, String)> {
    let mut timing = crate::apiserver::RaftTiming::default();
    for arg in args {
        let arg = arg.trim().trim_start_matches("--");
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| (arg.to_string(), "expected key=value".to_string()))?;
        let key = key.trim();
        // Raft timing is in the range etcd takes; a learner's stall limit may be longer.
        let range = if key == "learner-max-stall" {
            1_000..=86_400_000
        } else {
            1..=60_000
        };
        let millis: u64 = value
            .trim()
            .parse()
            .ok()
            .filter(|ms| range.contains(ms))
            .ok_or_else(|| {
                (
                    arg.to_string(),
                    format!(
                        "expected milliseconds between {} and {}",
                        range.start(),
                        range.end()
                    ),
                )
            })?;
        let duration = std::time::Duration::from_millis(millis);
        match key {
            "heartbeat-interval" => timing.heartbeat_interval = duration,
            "election-timeout" => timing.election_timeout = duration,
            "learner-max-stall" => timing.learner_max_stall = duration,
            other => {
                return Err((
                    arg.to_string(),
                    format!(
                        "unknown datastore setting {other:?}; k3rs understands heartbeat-interval, election-timeout and learner-max-stall"
                    ),
                ));
            }
        }
    }
    if timing.election_timeout < timing.heartbeat_interval * 2 {
        return Err((
            format!("election-timeout={}", timing.election_timeout.as_millis()),
            "must be at least twice heartbeat-interval (etcd recommends 10×)".to_string(),
        ));
    }
    Ok(timing)
}

/// One `--disable` item.
fn parse_component(value: &str) -> Result<String, String> {
    let value = value.trim().to_ascii_lowercase();
    if DISABLE_COMPONENTS.contains(&value.as_str()) {
        Ok(value)
    } else {
        Err(format!("expected one of {}", DISABLE_COMPONENTS.join(", ")))
    }
}

/// The merged settings, with typed accessors that produce flag-naming errors.
pub(super) struct Settings(pub(super) Layer);

impl Settings {
    pub(super) fn get(&self, key: &str) -> Option<(&str, &Origin)> {
        match self.0.get(key) {
            Some(Setting {
                raw: Raw::One(v),
                origin,
            }) => Some((v.as_str(), origin)),
            _ => None,
        }
    }

    fn origin(&self, key: &str) -> Origin {
        self.0
            .get(key)
            .map_or(Origin::CommandLine, |s| s.origin.clone())
    }

    pub(super) fn invalid(&self, flag: &'static str, value: &str, reason: String) -> ConfigError {
        ConfigError::InvalidValue {
            flag,
            value: value.to_string(),
            origin: self.origin(flag),
            reason,
        }
    }

    pub(super) fn one<T>(
        &self,
        flag: &'static str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        match self.get(flag) {
            None => Ok(None),
            Some((value, origin)) => {
                parse(value)
                    .map(Some)
                    .map_err(|reason| ConfigError::InvalidValue {
                        flag,
                        value: value.to_string(),
                        origin: origin.clone(),
                        reason,
                    })
            }
        }
    }

    pub(super) fn many<T: PartialEq>(
        &self,
        flag: &'static str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Vec<T>, ConfigError> {
        let Some(Setting {
            raw: Raw::Many(values),
            origin,
        }) = self.0.get(flag)
        else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for value in values.iter().map(|v| v.trim()).filter(|v| !v.is_empty()) {
            let parsed = parse(value).map_err(|reason| ConfigError::InvalidValue {
                flag,
                value: value.to_string(),
                origin: origin.clone(),
                reason,
            })?;
            if !out.contains(&parsed) {
                out.push(parsed);
            }
        }
        Ok(out)
    }

    pub(super) fn flag(&self, flag: &str) -> bool {
        matches!(
            self.0.get(flag),
            Some(Setting {
                raw: Raw::Bool(true),
                ..
            })
        )
    }
}

/// Parses one of the built-in default constants above (covered by `defaults_match_k3s`).
fn builtin<T: std::str::FromStr>(value: &'static str) -> T
where
    T::Err: fmt::Debug,
{
    value.parse().expect("built-in defaults are valid")
}

pub(super) fn parse_path(s: &str) -> Result<PathBuf, String> {
    if s.trim().is_empty() {
        return Err("must not be empty".to_string());
    }
    std::path::absolute(s).map_err(|e| format!("cannot make the path absolute: {e}"))
}

pub(super) fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.trim()
        .parse()
        .map_err(|_| "not an IPv4 or IPv6 address".to_string())
}

pub(super) fn parse_port(s: &str) -> Result<u16, String> {
    match s.trim().parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => u16::try_from(p).map_err(|e| e.to_string()),
        Ok(_) => Err("port out of range (1-65535)".to_string()),
        Err(_) => Err("not a port number (1-65535)".to_string()),
    }
}

fn parse_cidr(s: &str) -> Result<Cidr, String> {
    s.parse::<Cidr>().map_err(|e| e.to_string())
}

/// `30000-32767`, or Kubernetes' `30000+2768` (base and size).
fn parse_port_range(s: &str) -> Result<RangeInclusive<u16>, String> {
    let s = s.trim();
    let port = |p: &str| parse_port(p).map_err(|e| format!("{p:?}: {e}"));
    let (first, last) = if let Some((a, b)) = s.split_once('-') {
        (port(a)?, port(b)?)
    } else if let Some((a, n)) = s.split_once('+') {
        let first = port(a)?;
        let size: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("{n:?} is not a range size"))?;
        if size == 0 {
            return Err("range size must be at least 1".to_string());
        }
        let last = u32::from(first) + size - 1;
        let last =
            u16::try_from(last).map_err(|_| format!("range ends at {last}, past port 65535"))?;
        (first, last)
    } else {
        return Err("expected <first>-<last>, e.g. 30000-32767".to_string());
    };
    if first > last {
        return Err(format!(
            "first port {first} is greater than last port {last}"
        ));
    }
    Ok(first..=last)
}

/// An octal file mode like `0644`, `644` or `0o644`.
fn parse_mode(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let digits = s.strip_prefix("0o").unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err("expected an octal file mode like 0644".to_string());
    }
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o7777 => Ok(mode),
        _ => Err("file mode must be at most 07777".to_string()),
    }
}

/// An IP address, or a DNS name (optionally a `*.` wildcard), as a `--tls-san` entry.
fn parse_san(s: &str) -> Result<String, String> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    let name = s.strip_prefix("*.").unwrap_or(s);
    check_dns_name(&name.to_ascii_lowercase())
        .map_err(|e| format!("not an IP address or DNS name: {e}"))?;
    Ok(s.to_string())
}

pub(super) fn parse_node_name(s: &str) -> Result<String, String> {
    check_dns_name(s).map_err(|e| {
        format!("node names must be lower-case DNS names (RFC 1123 subdomains): {e}")
    })?;
    Ok(s.to_string())
}

fn parse_domain(s: &str) -> Result<String, String> {
    let s = s.trim().trim_end_matches('.');
    check_dns_name(s).map_err(|e| format!("not a lower-case DNS domain: {e}"))?;
    Ok(s.to_string())
}

/// Checks an RFC 1123 subdomain: lower-case labels of letters, digits and inner hyphens.
pub(super) fn check_dns_name(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".to_string());
    }
    if s.len() > 253 {
        return Err("longer than 253 characters".to_string());
    }
    for label in s.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("label {label:?} must have 1 to 63 characters"));
        }
        let ok_chars = label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok_chars {
            return Err(format!("label {label:?} may only contain a-z, 0-9 and '-'"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label {label:?} must not start or end with '-'"));
        }
    }
    Ok(())
}

pub(super) fn read_token_file(path: &Path) -> Result<Token, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    let token = text.trim();
    if token.is_empty() {
        return Err("the file is empty".to_string());
    }
    Ok(Token::new(token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{Cli, Command};
    use clap::Parser;

    fn host() -> io::Result<String> {
        Ok("Test-Node".to_string())
    }

    /// Parses a `k3rs server …` command line and loads it against `default_config`.
    fn load_args(argv: &[&str], default_config: &Path) -> Result<ServerConfig, ConfigError> {
        let mut full = vec!["k3rs", "server"];
        full.extend_from_slice(argv);
        let cli = Cli::try_parse_from(full).expect("command line parses");
        let Some(Command::Server(args)) = cli.command else {
            panic!("not a server command");
        };
        load_with(&args, cli.debug, default_config, &host)
    }

    fn no_file() -> PathBuf {
        PathBuf::from("/nonexistent/k3rs-test/config.yaml")
    }

    fn err(argv: &[&str]) -> String {
        match load_args(argv, &no_file()) {
            Ok(c) => panic!("expected an error for {argv:?}, got {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn write_config(dir: &tempfile::TempDir, text: &str) -> PathBuf {
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, text).expect("write config");
        path
    }

    #[test]
    fn defaults_match_k3s() {
        let c = load_args(&[], &no_file()).expect("defaults are valid");
        assert_eq!(c.config_file, None);
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/k3rs"));
        assert_eq!(c.bind_address.to_string(), "0.0.0.0");
        assert_eq!(c.https_listen_port, 6443);
        assert_eq!(c.advertise_address, None);
        assert!(c.tls_san.is_empty());
        assert_eq!(c.write_kubeconfig, PathBuf::from("/etc/k3rs/k3rs.yaml"));
        assert_eq!(c.write_kubeconfig_mode, 0o600);
        assert_eq!(c.token, None);
        assert_eq!(c.node_name, "test-node");
        assert_eq!(c.cluster_cidr.to_string(), "10.42.0.0/16");
        assert_eq!(c.service_cidr.to_string(), "10.43.0.0/16");
        assert_eq!(c.cluster_dns.to_string(), "10.43.0.10");
        assert_eq!(c.cluster_domain, "cluster.local");
        assert_eq!(c.service_node_port_range, 30000..=32767);
        assert!(!c.disable_agent && !c.debug);
        assert_eq!(c.kubernetes_service_ip().to_string(), "10.43.0.1");
    }

    #[test]
    fn disable_takes_k3s_component_names_repeated_or_comma_separated() {
        let c = load_args(&[], &no_file()).expect("defaults");
        assert!(c.servicelb_enabled() && c.disable.is_empty());
        let c = load_args(
            &["--disable=traefik,servicelb", "--disable", "metrics-server"],
            &no_file(),
        )
        .expect("valid");
        assert!(!c.servicelb_enabled());
        assert_eq!(c.disable, ["traefik", "servicelb", "metrics-server"]);
        let c = load_args(&["--disable=coredns,local-storage"], &no_file()).expect("valid");
        assert!(c.servicelb_enabled());
        let e = err(&["--disable=servicelbb"]);
        assert!(
            e.contains("--disable") && e.contains("servicelbb") && e.contains("servicelb, traefik"),
            "{e}"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_config(&dir, "disable:\n  - servicelb\ndisable-kube-proxy: true\n");
        let c = load_args(&[], &path).expect("config file");
        assert!(!c.servicelb_enabled() && c.node.disable_kube_proxy);
        let c = load_args(&["--disable-kube-proxy"], &no_file()).expect("valid");
        assert!(c.node.disable_kube_proxy);
    }

    #[test]
    fn disable_accepts_every_packaged_manifest() {
        for name in crate::addons::packaged::names() {
            assert!(DISABLE_COMPONENTS.contains(&name), "{name}");
            let c = load_args(&[&format!("--disable={name}")], &no_file()).expect("valid");
            assert_eq!(c.disable, [name]);
        }
    }

    #[test]
    fn all_flags_parse() {
        let c = load_args(
            &[
                "-d",
                "/srv/k3rs",
                "--bind-address",
                "10.0.0.5",
                "--https-listen-port",
                "7443",
                "--advertise-address",
                "fd00::5",
                "--tls-san",
                "api.example.com",
                "--tls-san=1.2.3.4,*.example.org",
                "-o",
                "/tmp/kc.yaml",
                "--write-kubeconfig-mode",
                "0644",
                "-t",
                "sekret",
                "--node-name",
                "node-1",
                "--cluster-cidr",
                "10.52.0.0/16",
                "--service-cidr",
                "10.53.0.0/16",
                "--cluster-dns",
                "10.53.0.53",
                "--cluster-domain",
                "k3rs.internal.",
                "--service-node-port-range",
                "20000+100",
                "--disable-agent",
                "--debug",
            ],
            &no_file(),
        )
        .expect("valid");
        assert_eq!(c.data_dir, PathBuf::from("/srv/k3rs"));
        assert_eq!(c.bind_address.to_string(), "10.0.0.5");
        assert_eq!(c.https_listen_port, 7443);
        assert_eq!(
            c.advertise_address.map(|a| a.to_string()),
            Some("fd00::5".into())
        );
        assert_eq!(c.tls_san, ["api.example.com", "1.2.3.4", "*.example.org"]);
        assert_eq!(c.write_kubeconfig, PathBuf::from("/tmp/kc.yaml"));
        assert_eq!(c.write_kubeconfig_mode, 0o644);
        assert_eq!(c.token.as_ref().map(Token::expose), Some("sekret"));
        assert_eq!(c.node_name, "node-1");
        assert_eq!(c.cluster_dns.to_string(), "10.53.0.53");
        assert_eq!(c.cluster_domain, "k3rs.internal");
        assert_eq!(c.service_node_port_range, 20000..=20099);
        assert!(c.disable_agent && c.debug);
        assert_eq!(c.kubernetes_service_ip().to_string(), "10.53.0.1");
        assert!(
            !format!("{c:?}").contains("sekret"),
            "Debug hides the token"
        );
    }

    #[test]
    fn config_file_beats_defaults_and_cli_beats_config_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_config(
            &dir,
            "data-dir: /from/file\nhttps-listen-port: 7443\ntls-san: [a.example, 10.9.9.9]\n\
             write-kubeconfig-mode: 0644\ndebug: true\ndisable-agent: \"true\"\n",
        );
        let c = load_args(&[], &path).expect("valid");
        assert_eq!(c.config_file.as_deref(), Some(path.as_path()));
        assert_eq!(c.data_dir, PathBuf::from("/from/file"));
        assert_eq!(c.https_listen_port, 7443);
        assert_eq!(c.tls_san, ["a.example", "10.9.9.9"]);
        assert_eq!(c.write_kubeconfig_mode, 0o644);
        assert!(c.debug && c.disable_agent);

        let c = load_args(
            &[
                "--data-dir",
                "/from/cli",
                "--tls-san",
                "b.example",
                "--debug=false",
            ],
            &path,
        )
        .expect("valid");
        assert_eq!(c.data_dir, PathBuf::from("/from/cli"));
        assert_eq!(
            c.https_listen_port, 7443,
            "untouched keys still come from the file"
        );
        assert_eq!(
            c.tls_san,
            ["b.example"],
            "the command line replaces the file's list"
        );
        assert!(!c.debug, "--debug=false overrides the file");
    }

    #[test]
    fn explicit_config_file_and_single_string_list() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_config(&dir, "tls-san: one.example\nwrite-kubeconfig-mode: 644\n");
        let path_str = path.to_str().expect("utf-8 path");
        let c = load_args(&["--config", path_str], &no_file()).expect("valid");
        assert_eq!(c.tls_san, ["one.example"]);
        assert_eq!(
            c.write_kubeconfig_mode, 0o644,
            "a YAML number is read as octal digits"
        );
        let empty = write_config(&dir, "# nothing yet\n");
        let c = load_args(&["-c", empty.to_str().expect("utf-8")], &no_file()).expect("valid");
        assert_eq!(c.https_listen_port, 6443);
    }

    #[test]
    fn missing_default_config_is_fine_missing_explicit_one_is_not() {
        assert!(load_args(&[], &no_file()).is_ok());
        let e = err(&["--config", "/nonexistent/k3rs-test/explicit.yaml"]);
        assert!(
            e.starts_with("config file /nonexistent/k3rs-test/explicit.yaml:"),
            "{e}"
        );
    }

    #[test]
    fn unknown_config_key_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_config(&dir, "data-dir: /x\nflannel-conf: /etc/flannel.json\n");
        let e = load_args(&[], &path).expect_err("unknown key").to_string();
        assert!(e.contains("unknown key \"flannel-conf\""), "{e}");
        assert!(e.contains("--flannel-conf"), "{e}");
        let path = write_config(&dir, "config: /etc/other.yaml\n");
        assert!(matches!(
            load_args(&[], &path),
            Err(ConfigError::UnknownKey { .. })
        ));
    }

    #[test]
    fn malformed_config_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_config(&dir, "- just\n- a list\n");
        assert!(matches!(
            load_args(&[], &path),
            Err(ConfigError::ConfigFile { .. })
        ));
        let path = write_config(&dir, "data-dir: [a, b]\n");
        let e = load_args(&[], &path)
            .expect_err("list for scalar")
            .to_string();
        assert!(e.contains("for --data-dir"), "{e}");
        let path = write_config(&dir, "debug: maybe\n");
        let e = load_args(&[], &path).expect_err("bad bool").to_string();
        assert!(e.starts_with("invalid value \"maybe\" for --debug"), "{e}");
        let path = write_config(&dir, "data-dir: [unclosed\n");
        assert!(matches!(
            load_args(&[], &path),
            Err(ConfigError::ConfigFile { .. })
        ));
    }

    #[test]
    fn invalid_value_in_config_file_names_flag_and_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_config(&dir, "cluster-cidr: 10.42.0.0/33\n");
        let e = load_args(&[], &path).expect_err("bad cidr").to_string();
        assert!(
            e.starts_with(&format!(
                "invalid value \"10.42.0.0/33\" for --cluster-cidr (from config file {})",
                path.display()
            )),
            "{e}"
        );
    }

    #[test]
    fn invalid_cidrs() {
        let e = err(&["--cluster-cidr", "10.42.0.0/33"]);
        assert!(
            e.starts_with("invalid value \"10.42.0.0/33\" for --cluster-cidr: prefix length 33"),
            "{e}"
        );
        assert!(err(&["--service-cidr", "banana"]).contains("for --service-cidr: "));
        assert!(err(&["--service-cidr", "10.43.0.0"]).contains("for --service-cidr: "));
        let e = err(&["--service-cidr", "10.42.0.0/24"]);
        assert!(
            e.contains("for --service-cidr: overlaps --cluster-cidr 10.42.0.0/16"),
            "{e}"
        );
    }

    #[test]
    fn invalid_ports_and_ranges() {
        for bad in ["0", "65536", "70000", "https", "-1"] {
            let argv = [format!("--https-listen-port={bad}")];
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let e = err(&argv);
            assert!(
                e.starts_with(&format!(
                    "invalid value \"{bad}\" for --https-listen-port: "
                )),
                "{e}"
            );
        }
        let e = err(&["--service-node-port-range", "40000-30000"]);
        assert!(
            e.starts_with("invalid value \"40000-30000\" for --service-node-port-range: first port 40000 is greater than last port 30000"),
            "{e}"
        );
        for bad in ["30000", "30000-70000", "a-b", "65000+1000", "30000+0"] {
            let e = err(&["--service-node-port-range", bad]);
            assert!(e.contains("for --service-node-port-range: "), "{e}");
        }
    }

    #[test]
    fn invalid_modes() {
        for bad in ["0999", "rw-r--r--", "", "17777", "0o8"] {
            let argv = [format!("--write-kubeconfig-mode={bad}")];
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let e = err(&argv);
            assert!(e.contains("for --write-kubeconfig-mode: "), "{bad}: {e}");
        }
        let ok = load_args(&["--write-kubeconfig-mode", "644"], &no_file()).expect("valid");
        assert_eq!(ok.write_kubeconfig_mode, 0o644);
    }

    #[test]
    fn invalid_addresses_names_and_domains() {
        assert!(err(&["--bind-address", "localhost"]).contains("for --bind-address: "));
        assert!(err(&["--advertise-address", "1.2.3"]).contains("for --advertise-address: "));
        let e = err(&["--cluster-dns", "10.44.0.10"]);
        assert!(
            e.contains("for --cluster-dns: not inside --service-cidr 10.43.0.0/16"),
            "{e}"
        );
        assert!(err(&["--cluster-dns", "ten"]).contains("for --cluster-dns: "));
        assert!(
            err(&["--tls-san", "bad_name"])
                .starts_with("invalid value \"bad_name\" for --tls-san: ")
        );
        assert!(err(&["--node-name", "Node_1"]).contains("for --node-name: "));
        assert!(err(&["--cluster-domain=-bad.local"]).contains("for --cluster-domain: "));
        assert!(err(&["--data-dir", ""]).contains("for --data-dir: "));
    }

    #[test]
    fn hostname_defaults_node_name_and_is_validated() {
        let bad_host = || -> io::Result<String> { Ok("bad_host".to_string()) };
        let cli = Cli::try_parse_from(["k3rs", "server"]).expect("parses");
        let Some(Command::Server(args)) = cli.command else {
            panic!("not server");
        };
        let e = load_with(&args, None, &no_file(), &bad_host)
            .expect_err("invalid hostname")
            .to_string();
        assert!(
            e.contains("for --node-name (defaulted from the hostname)"),
            "{e}"
        );
        let no_host = || -> io::Result<String> { Err(io::Error::other("nope")) };
        assert!(load_with(&args, None, &no_file(), &no_host).is_err());
    }

    #[test]
    fn cluster_flags() {
        let c = load_args(&[], &no_file()).expect("valid");
        assert!(!c.cluster_init && c.join_url.is_none());
        assert_eq!(c.raft_timing, crate::apiserver::RaftTiming::default());
        let c = load_args(
            &[
                "--cluster-init",
                "--etcd-arg",
                "heartbeat-interval=500",
                "--etcd-arg=election-timeout=5000",
            ],
            &no_file(),
        )
        .expect("valid");
        assert!(c.cluster_init);
        assert_eq!(
            c.raft_timing.heartbeat_interval,
            std::time::Duration::from_millis(500)
        );
        assert_eq!(
            c.raft_timing.election_timeout,
            std::time::Duration::from_millis(5000)
        );
        let c = load_args(&["--etcd-arg", "learner-max-stall=900000"], &no_file()).expect("valid");
        assert_eq!(
            c.raft_timing.learner_max_stall,
            std::time::Duration::from_secs(900)
        );
        let c = load_args(&["--server", "https://10.0.0.1:6443/"], &no_file()).expect("valid");
        assert_eq!(c.join_url.as_deref(), Some("https://10.0.0.1:6443"));
        for (argv, words) in [
            (&["--server", "http://10.0.0.1:6443"][..], "https://"),
            (&["--server", "https://10.0.0.1:6443/v1"][..], "no path"),
            (
                &["--etcd-arg", "quota-backend-bytes=1"][..],
                "heartbeat-interval",
            ),
            (&["--etcd-arg", "election-timeout=abc"][..], "milliseconds"),
            (
                &["--etcd-arg", "learner-max-stall=10"][..],
                "between 1000 and",
            ),
            (
                &[
                    "--etcd-arg",
                    "heartbeat-interval=600",
                    "--etcd-arg",
                    "election-timeout=1000",
                ][..],
                "twice",
            ),
            (
                &["--cluster-init", "--server", "https://10.0.0.1:6443"][..],
                "give one of them",
            ),
        ] {
            let e = load_args(argv, &no_file())
                .expect_err("refused")
                .to_string();
            assert!(e.contains(words), "{argv:?}: {e}");
        }
    }

    #[test]
    fn token_and_token_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        std::fs::write(&file, "from-file\n").expect("write");
        let f = file.to_str().expect("utf-8");
        let c = load_args(&["--token-file", f], &no_file()).expect("valid");
        assert_eq!(c.token.as_ref().map(Token::expose), Some("from-file"));
        assert_eq!(c.token_file.as_deref(), Some(file.as_path()));
        let c = load_args(&["--token-file", f, "--token", "direct"], &no_file()).expect("valid");
        assert_eq!(
            c.token.as_ref().map(Token::expose),
            Some("direct"),
            "--token wins"
        );
        let e = err(&["--token-file", "/nonexistent/k3rs-test/token"]);
        assert!(e.contains("for --token-file: cannot read it"), "{e}");
        std::fs::write(&file, "\n").expect("write");
        assert!(err(&["--token-file", f]).contains("the file is empty"));
    }

    #[test]
    fn controller_manager_args_from_flags_and_config_file() {
        let c = load_args(
            &[
                "--kube-controller-manager-arg",
                "node-monitor-grace-period=5s",
                "--kube-controller-manager-arg=terminated-pod-gc-threshold=7",
            ],
            &no_file(),
        )
        .expect("valid");
        assert_eq!(
            c.controllers.node_monitor_grace_period,
            std::time::Duration::from_secs(5)
        );
        assert_eq!(c.controllers.terminated_pod_gc_threshold, 7);
        assert_eq!(c.controllers.cluster_cidr.to_string(), "10.42.0.0/16");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_config(
            &dir,
            "cluster-cidr: 10.52.0.0/16\nkube-controller-manager-arg:\n  - node-monitor-period=2s\n  - node-cidr-mask-size=26\n",
        );
        let c = load_args(&[], &path).expect("valid");
        assert_eq!(
            c.controllers.node_monitor_period,
            std::time::Duration::from_secs(2)
        );
        assert_eq!(c.controllers.node_cidr_mask_size, 26);
        assert_eq!(c.controllers.cluster_cidr.to_string(), "10.52.0.0/16");
        let e = err(&["--kube-controller-manager-arg", "node-monitor-period=fast"]);
        assert!(
            e.starts_with(
                "invalid value \"node-monitor-period=fast\" for --kube-controller-manager-arg:"
            ),
            "{e}"
        );
        let bad = write_config(&dir, "kube-controller-manager-arg: bogus=1\n");
        let e = load_args(&[], &bad).expect_err("unknown flag").to_string();
        assert!(
            e.contains("does not implement") && e.contains("from config file"),
            "{e}"
        );
    }

    #[test]
    fn config_keys_are_exactly_the_long_flags() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        let server = cmd
            .get_subcommands()
            .find(|c| c.get_name() == "server")
            .expect("server subcommand");
        let mut flags: Vec<&str> = server
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| !matches!(*l, "config" | "help"))
            .collect();
        flags.sort_unstable();
        let mut keys: Vec<&str> = KEYS
            .iter()
            .map(|(k, _)| *k)
            .chain(
                super::super::snapshot_args::CONFIG_KEYS
                    .iter()
                    .map(|(k, _)| *k),
            )
            .chain(super::super::node_config::NODE_KEYS.iter().map(|(k, _)| *k))
            .collect();
        keys.sort_unstable();
        assert_eq!(flags, keys);
    }

    /// Environment variables sit between the command line and the config file. Setting them
    /// in this process would race with other tests, so the checks run in a child process
    /// (this same test binary) with its own environment.
    #[test]
    fn environment_is_between_cli_and_config_file() {
        const CHILD: &str = "K3RS_TEST_ENV_CHILD";
        if let Ok(config) = std::env::var(CHILD) {
            let config = PathBuf::from(config);
            let c = load_args(&[], &config).expect("valid");
            assert_eq!(c.data_dir, PathBuf::from("/from/env"), "env beats file");
            assert_eq!(c.node_name, "env-node");
            assert_eq!(c.write_kubeconfig_mode, 0o640);
            assert_eq!(c.token.as_ref().map(Token::expose), Some("env-token"));
            assert_eq!(c.https_listen_port, 7443, "file still beats defaults");
            assert!(c.debug, "K3RS_DEBUG");
            let c = load_args(
                &["--data-dir", "/from/cli", "--node-name", "cli-node"],
                &config,
            )
            .expect("valid");
            assert_eq!(c.data_dir, PathBuf::from("/from/cli"), "cli beats env");
            assert_eq!(c.node_name, "cli-node");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(
            &dir,
            "data-dir: /from/file\nnode-name: file-node\nhttps-listen-port: 7443\n",
        );
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = std::process::Command::new(exe);
        cmd.args([
            "--exact",
            "cli::config::tests::environment_is_between_cli_and_config_file",
            "--test-threads=1",
        ]);
        for (key, _) in std::env::vars() {
            if key.starts_with("K3RS_") {
                cmd.env_remove(key);
            }
        }
        let out = cmd
            .env(CHILD, &config)
            .env("K3RS_DATA_DIR", "/from/env")
            .env("K3RS_NODE_NAME", "env-node")
            .env("K3RS_KUBECONFIG_MODE", "0640")
            .env("K3RS_TOKEN", "env-token")
            .env("K3RS_DEBUG", "1")
            .output()
            .expect("run child test");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
