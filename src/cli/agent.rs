//! `k3rs agent`'s configuration: its flags, `K3RS_*` environment variables and the config
//! file (the same machinery and precedence as the server's, see [`super::config`]), validated
//! into an [`AgentConfig`]. `--server` and a token are required.
//!
//! Owns parsing and validation (it reads the config file, the token file and the hostname)
//! plus the thin [`run`] glue: async runtime, systemd notifier, signals. What the agent does
//! is [`crate::agent`]'s job.

use std::io;
use std::path::{Path, PathBuf};

use super::args::AgentArgs;
use super::config::{
    ConfigError, DEFAULT_CONFIG_FILE, DEFAULT_DATA_DIR, Kind, Layer, Origin, Settings, Token,
    merge, parse_node_name, parse_path, put_bool, put_one, read_config_file, read_token_file,
    system_hostname,
};
use super::node_config::{NODE_KEYS, NodeConfig};

/// The config-file keys of `k3rs agent` besides the node flags.
const AGENT_KEYS: &[(&str, Kind)] = &[
    ("server", Kind::One),
    ("token", Kind::One),
    ("token-file", Kind::One),
    ("data-dir", Kind::One),
    ("node-name", Kind::One),
    ("debug", Kind::Bool),
];

/// The validated configuration of `k3rs agent`.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// The config file that was read, if any.
    pub config_file: Option<PathBuf>,
    /// `--server`, e.g. `https://10.0.0.1:6443` (no trailing slash).
    pub server: String,
    /// `--token`, or else the content of `--token-file`.
    pub token: Token,
    /// `--data-dir`, absolute.
    pub data_dir: PathBuf,
    /// `--node-name`, defaulting to the lower-cased hostname.
    pub node_name: String,
    /// The node flags.
    pub node: NodeConfig,
    /// `--debug`.
    pub debug: bool,
}

/// Loads and validates `k3rs agent`'s configuration. `debug` is the top-level `--debug`.
pub fn load(args: &AgentArgs, debug: Option<bool>) -> Result<AgentConfig, ConfigError> {
    load_with(
        args,
        debug,
        Path::new(DEFAULT_CONFIG_FILE),
        &system_hostname,
    )
}

fn agent_key(key: &str) -> Option<(&'static str, Kind)> {
    AGENT_KEYS
        .iter()
        .chain(NODE_KEYS)
        .copied()
        .find(|(name, _)| *name == key)
}

fn load_with(
    args: &AgentArgs,
    debug: Option<bool>,
    default_config: &Path,
    hostname: &dyn Fn() -> io::Result<String>,
) -> Result<AgentConfig, ConfigError> {
    let mut cli = Layer::new();
    put_one(&mut cli, "server", &args.server);
    put_one(&mut cli, "token", &args.token);
    put_one(&mut cli, "token-file", &args.token_file);
    put_one(&mut cli, "data-dir", &args.data_dir);
    put_one(&mut cli, "node-name", &args.node_name);
    put_bool(&mut cli, "debug", args.debug.or(debug));
    super::node_config::cli_layer(&args.node, &mut cli);
    let (file, config_file) = read_config_file(
        args.config.as_deref(),
        default_config,
        &agent_key,
        "k3rs agent",
    )?;
    let s = Settings(merge(cli, file));

    let server = s
        .one("server", parse_server_url)?
        .ok_or(ConfigError::Missing {
            flag: "server",
            hint: "give the URL of a k3rs server, e.g. --server https://10.0.0.1:6443 (or \
               K3RS_URL, or `server:` in the config file)"
                .to_string(),
        })?;
    let token = match s.one("token", |v| Ok(v.trim().to_string()))? {
        Some(t) if !t.is_empty() => Token::new(t),
        _ => match (s.one("token-file", parse_path)?, s.get("token-file")) {
            (Some(path), Some((raw, origin))) => {
                read_token_file(&path).map_err(|reason| ConfigError::InvalidValue {
                    flag: "token-file",
                    value: raw.to_string(),
                    origin: origin.clone(),
                    reason,
                })?
            }
            _ => {
                return Err(ConfigError::Missing {
                    flag: "token",
                    hint: "give the server's join token (--token, K3RS_TOKEN or \
                           --token-file; it is in /var/lib/k3rs/server/node-token on the \
                           server)"
                        .to_string(),
                });
            }
        },
    };
    let data_dir = s
        .one("data-dir", parse_path)?
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
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
    let node = super::node_config::resolve(&s)?;
    Ok(AgentConfig {
        config_file,
        server,
        token,
        data_dir,
        node_name,
        node,
        debug: s.flag("debug"),
    })
}

/// Runs `k3rs agent` until SIGTERM/SIGINT or a fatal error.
pub fn run(config: AgentConfig) -> anyhow::Result<()> {
    use anyhow::Context;
    let notifier = super::notify::Notifier::from_env().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "not notifying systemd");
        super::notify::Notifier::disabled()
    });
    let notifier = std::sync::Arc::new(notifier);
    let env_dir = |name: &str, default: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from(default), PathBuf::from)
    };
    let options = crate::agent::AgentOptions {
        node_name: config.node_name.clone(),
        data_dir: config.data_dir.clone(),
        run_dir: env_dir("K3RS_RUN_DIR", crate::agent::DEFAULT_RUN_DIR),
        pod_log_dir: env_dir("K3RS_POD_LOG_DIR", crate::agent::DEFAULT_POD_LOG_DIR),
        node: config.node.clone(),
        credentials: crate::agent::Credentials::Join {
            server: config.server.clone(),
            token: config.token.clone(),
        },
        control_plane: false,
        cluster_dns: vec![super::config::DEFAULT_CLUSTER_DNS.parse()?],
        cluster_domain: super::config::DEFAULT_CLUSTER_DOMAIN.to_string(),
        // Not known to a joining agent: kube-proxy takes its Node's podCIDRs instead.
        cluster_cidrs: Vec::new(),
    };
    crate::agent::memory::limit_arenas();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("k3rs-agent")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        tokio::spawn(crate::agent::memory::trim_loop());
        tokio::select! {
            result = crate::agent::run(options, notifier.clone()) => result,
            () = super::wait_for_signal() => {
                notifier.stopping();
                tracing::info!("shutting down");
                Ok(())
            }
        }
    })
}

/// `https://host[:port]` (a trailing `/` is dropped; paths are refused).
fn parse_server_url(s: &str) -> Result<String, String> {
    let s = s.trim().trim_end_matches('/');
    let rest = s.strip_prefix("https://").ok_or_else(|| {
        "the server URL must start with https://, e.g. https://10.0.0.1:6443".to_string()
    })?;
    if rest.is_empty() {
        return Err("the server URL has no host".to_string());
    }
    if rest.contains(['/', '?', '#', '@']) {
        return Err("expected https://host:port without a path, query or user".to_string());
    }
    let (host, port) = crate::agent::join::split_host_port(rest)?;
    if host.is_empty() {
        return Err("the server URL has no host".to_string());
    }
    if let Some(port) = port {
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(format!("{port:?} is not a port number (1-65535)")),
        }
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{Cli, Command};
    use clap::Parser;

    fn host() -> io::Result<String> {
        Ok("Worker-1".to_string())
    }

    fn load_args(argv: &[&str], default_config: &Path) -> Result<AgentConfig, ConfigError> {
        let mut full = vec!["k3rs", "agent"];
        full.extend_from_slice(argv);
        let cli = Cli::try_parse_from(full).expect("command line parses");
        let Some(Command::Agent(args)) = cli.command else {
            panic!("not an agent command");
        };
        load_with(&args, cli.debug, default_config, &host)
    }

    fn no_file() -> PathBuf {
        PathBuf::from("/nonexistent/k3rs-test/config.yaml")
    }

    const MINIMAL: &[&str] = &["-s", "https://10.0.0.1:6443", "-t", "K10abc::server:x"];

    #[test]
    fn defaults() {
        let c = load_args(MINIMAL, &no_file()).expect("valid");
        assert_eq!(c.server, "https://10.0.0.1:6443");
        assert_eq!(c.token.expose(), "K10abc::server:x");
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/k3rs"));
        assert_eq!(c.node_name, "worker-1");
        assert_eq!(c.node.pause_image, "k3rs.local/pause:3.10");
        assert_eq!(
            c.node.private_registry,
            PathBuf::from("/etc/k3rs/registries.yaml")
        );
        assert_eq!(c.node.container_runtime_endpoint, None);
        assert_eq!(c.node.kubelet.max_pods, 110);
        assert!(!c.debug);
    }

    #[test]
    fn flannel_flags_default_parse_and_refuse_unknown_backends() {
        let base = ["-s", "https://a:6443", "-t", "x"];
        let c = load_args(&base, &no_file()).expect("valid");
        assert_eq!(
            c.node.flannel_backend,
            crate::network::FlannelBackend::Vxlan
        );
        assert_eq!(c.node.flannel_iface, None);
        assert!(!c.node.disable_network_policy);
        let args = [
            &base[..],
            &[
                "--flannel-backend=host-gw",
                "--flannel-iface",
                "eth1",
                "--disable-network-policy",
            ],
        ]
        .concat();
        let c = load_args(&args, &no_file()).expect("valid");
        assert_eq!(
            c.node.flannel_backend,
            crate::network::FlannelBackend::HostGw
        );
        assert_eq!(c.node.flannel_iface.as_deref(), Some("eth1"));
        assert!(c.node.disable_network_policy);
        let e = load_args(
            &[&base[..], &["--flannel-backend", "wireguard"]].concat(),
            &no_file(),
        )
        .expect_err("unknown backend")
        .to_string();
        assert!(
            e.contains("--flannel-backend") && e.contains("vxlan, host-gw or none"),
            "{e}"
        );
        let e = load_args(
            &[&base[..], &["--flannel-iface", "a/b"]].concat(),
            &no_file(),
        )
        .expect_err("bad iface")
        .to_string();
        assert!(e.contains("--flannel-iface"), "{e}");
    }

    #[test]
    fn server_and_token_are_required_and_named() {
        let e = load_args(&["-t", "x"], &no_file())
            .expect_err("no server")
            .to_string();
        assert!(e.starts_with("--server is required"), "{e}");
        let e = load_args(&["-s", "https://a:6443"], &no_file())
            .expect_err("no token")
            .to_string();
        assert!(e.starts_with("--token is required"), "{e}");
        for bad in [
            "http://a:6443",
            "a:6443",
            "https://",
            "https://a:0",
            "https://a/x",
        ] {
            let e = load_args(&["-s", bad, "-t", "x"], &no_file())
                .expect_err("bad url")
                .to_string();
            assert!(e.contains("for --server: "), "{bad}: {e}");
        }
        assert_eq!(
            load_args(&["-s", "https://[fd00::1]:6443/", "-t", "x"], &no_file())
                .expect("v6")
                .server,
            "https://[fd00::1]:6443"
        );
    }

    #[test]
    fn node_flags_and_config_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, "from-file\n").expect("write");
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "server: https://file.example:6443\ntoken-file: {}\nnode-name: file-node\n\
                 node-label: [disk=ssd, zone=a]\nnode-taint: dedicated=gpu:NoSchedule\n\
                 kubelet-arg: [max-pods=50]\nnode-ip: 10.0.0.7\n",
                token_file.display()
            ),
        )
        .expect("write");
        let c = load_args(&[], &config).expect("valid");
        assert_eq!(c.server, "https://file.example:6443");
        assert_eq!(c.token.expose(), "from-file");
        assert_eq!(c.node_name, "file-node");
        assert_eq!(c.node.labels.get("disk").map(String::as_str), Some("ssd"));
        assert_eq!(c.node.labels.len(), 2);
        assert_eq!(c.node.taints[0].key, "dedicated");
        assert_eq!(c.node.kubelet.max_pods, 50);
        assert_eq!(
            c.node.node_ips,
            ["10.0.0.7".parse::<std::net::IpAddr>().expect("ip")]
        );
        let c = load_args(
            &[
                "--node-name",
                "cli-node",
                "--node-label",
                "only=me",
                "--node-ip",
                "10.0.0.8,10.0.0.9",
            ],
            &config,
        )
        .expect("valid");
        assert_eq!(c.node_name, "cli-node", "the command line beats the file");
        assert_eq!(c.node.labels.len(), 1);
        assert_eq!(c.node.node_ips.len(), 2);

        std::fs::write(
            &config,
            "server: https://a:1\ntoken: x\ncluster-cidr: 10.0.0.0/8\n",
        )
        .expect("write");
        let e = load_args(&[], &config)
            .expect_err("server-only key")
            .to_string();
        assert!(e.contains("k3rs agent has no --cluster-cidr flag"), "{e}");
        let e = load_args(
            &[MINIMAL, &["--node-taint", "a=b:Never"]].concat(),
            &no_file(),
        )
        .expect_err("bad taint")
        .to_string();
        assert!(
            e.starts_with("invalid value \"a=b:Never\" for --node-taint"),
            "{e}"
        );
        let e = load_args(
            &[MINIMAL, &["--kubelet-arg", "nope=1"]].concat(),
            &no_file(),
        )
        .expect_err("unknown kubelet arg")
        .to_string();
        assert!(
            e.starts_with("invalid value \"nope=1\" for --kubelet-arg: unsupported kubelet flag"),
            "{e}"
        );
        // --kubelet-arg lands in the kubelet's own type; --pause-image is its sandbox default.
        let c = load_args(
            &[
                MINIMAL,
                &[
                    "--pause-image",
                    "registry.local/pause:9",
                    "--kubelet-arg",
                    "serialize-image-pulls=false",
                    "--kubelet-arg",
                    "eviction-hard=memory.available<200Mi",
                ],
            ]
            .concat(),
            &no_file(),
        )
        .expect("valid kubelet args");
        assert!(!c.node.kubelet.serialize_image_pulls);
        assert_eq!(c.node.kubelet.eviction_memory_available_bytes, 200 << 20);
        assert_eq!(
            c.node.kubelet.pod_infra_container_image.as_deref(),
            Some("registry.local/pause:9")
        );
    }

    #[test]
    fn config_keys_are_exactly_the_long_flags() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        let agent = cmd
            .get_subcommands()
            .find(|c| c.get_name() == "agent")
            .expect("agent subcommand");
        let mut flags: Vec<&str> = agent
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| !matches!(*l, "config" | "help"))
            .collect();
        flags.sort_unstable();
        let mut keys: Vec<&str> = AGENT_KEYS
            .iter()
            .chain(NODE_KEYS)
            .map(|(k, _)| *k)
            .collect();
        keys.sort_unstable();
        assert_eq!(flags, keys);
    }
}
