//! The clap definitions of k3rs's command line: flag names, short names, environment variables
//! and help text, matching k3s.
//!
//! Owns only the shape of the command line. Values stay raw strings here so that the same
//! validation (and the same error messages) applies whether a value came from a flag, an
//! environment variable or the config file; see [`super::config`]. No files, no network.

use std::ffi::OsString;

use clap::builder::BoolishValueParser;
use clap::{Args, Parser, Subcommand};

/// k3rs: a k3s-style Kubernetes distribution in one binary.
#[derive(Debug, Parser)]
#[command(
    name = "k3rs",
    about = "Kubernetes, in one binary (k3s-style)",
    disable_version_flag = true,
    subcommand_required = false
)]
pub struct Cli {
    /// Print the version and exit
    #[arg(short = 'v', long = "version")]
    pub version: bool,

    /// (logging) Turn on debug logs (also accepted after `server`)
    #[arg(
        long,
        env = "K3RS_DEBUG",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL"
    )]
    pub debug: Option<bool>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run management server
    Server(Box<ServerArgs>),
    /// Run node agent
    Agent(Box<AgentArgs>),
    /// Run kubectl against this cluster (KUBECONFIG defaults to /etc/k3rs/k3rs.yaml)
    #[command(disable_help_flag = true)]
    Kubectl(KubectlArgs),
    /// Manage datastore snapshots (save, ls, delete, prune, restore)
    EtcdSnapshot(Box<super::snapshot_args::EtcdSnapshotArgs>),
    /// Control encryption at rest of Secrets (status, enable, disable, prepare, rotate, reencrypt, rotate-keys)
    SecretsEncrypt(super::secrets_encrypt::SecretsEncryptArgs),
    /// Manage tokens: bootstrap tokens (create, list, delete), server token rotation
    Token(super::token::TokenArgs),
    /// Check or rotate certificates (check, rotate)
    Certificate(super::certificate::CertificateArgs),
    /// Check that this machine's kernel and packages can run k3rs
    CheckConfig,
    /// Print a systemd unit for k3rs (used by install.sh)
    #[command(hide = true)]
    SystemdUnit(super::units::UnitArgs),
}

/// Arguments of `k3rs kubectl`: everything after `kubectl`, passed through verbatim.
#[derive(Debug, Args)]
pub struct KubectlArgs {
    /// Arguments for kubectl
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        num_args = 0..,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

/// Flags of `k3rs server`, named as k3s names them. `None` means "not given on the command line
/// or in the environment"; the config file and then the defaults fill it in.
#[derive(Debug, Default, Args)]
pub struct ServerArgs {
    /// (config) Load configuration from FILE [default: /etc/k3rs/config.yaml]
    #[arg(short = 'c', long, env = "K3RS_CONFIG_FILE", value_name = "FILE")]
    pub config: Option<String>,

    /// (data) Folder to hold state [default: /var/lib/k3rs]
    #[arg(
        short = 'd',
        long,
        env = "K3RS_DATA_DIR",
        value_name = "DIR",
        help_heading = "Data"
    )]
    pub data_dir: Option<String>,

    /// (listener) IP address the API server listens on [default: 0.0.0.0]
    #[arg(long, value_name = "IP", help_heading = "Listener")]
    pub bind_address: Option<String>,

    /// (listener) HTTPS listen port [default: 6443]
    #[arg(long, value_name = "PORT", help_heading = "Listener")]
    pub https_listen_port: Option<String>,

    /// (listener) IP address the API server advertises to members of the cluster [default: node IP]
    #[arg(long, value_name = "IP", help_heading = "Listener")]
    pub advertise_address: Option<String>,

    /// (listener) Add an additional hostname or IPv4/IPv6 address as a Subject Alternative Name
    /// on the server TLS certificate (repeatable, or comma-separated)
    #[arg(
        long,
        value_name = "NAME_OR_IP",
        value_delimiter = ',',
        help_heading = "Listener"
    )]
    pub tls_san: Vec<String>,

    /// (client) Write the admin kubeconfig to FILE [default: /etc/k3rs/k3rs.yaml]
    #[arg(
        short = 'o',
        long,
        env = "K3RS_KUBECONFIG_OUTPUT",
        value_name = "FILE",
        help_heading = "Client"
    )]
    pub write_kubeconfig: Option<String>,

    /// (client) Write the kubeconfig with this octal mode, e.g. 0644 [default: 0600]
    #[arg(
        long,
        env = "K3RS_KUBECONFIG_MODE",
        value_name = "MODE",
        help_heading = "Client"
    )]
    pub write_kubeconfig_mode: Option<String>,

    /// (cluster) Shared secret used to join servers and agents to the cluster
    #[arg(
        short = 't',
        long,
        env = "K3RS_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        help_heading = "Cluster"
    )]
    pub token: Option<String>,

    /// (cluster) File containing the token
    #[arg(
        long,
        env = "K3RS_TOKEN_FILE",
        value_name = "FILE",
        help_heading = "Cluster"
    )]
    pub token_file: Option<String>,

    /// (cluster) Shared secret used to join agents to the cluster, but not servers
    #[arg(
        long,
        env = "K3RS_AGENT_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        help_heading = "Cluster"
    )]
    pub agent_token: Option<String>,

    /// (cluster) File containing the agent secret
    #[arg(
        long,
        env = "K3RS_AGENT_TOKEN_FILE",
        value_name = "FILE",
        help_heading = "Cluster"
    )]
    pub agent_token_file: Option<String>,

    /// (cluster) Initialize a new cluster that other servers can join (the raft peer port
    /// :2380 opens on the advertise address)
    #[arg(
        long,
        env = "K3RS_CLUSTER_INIT",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL",
        help_heading = "Cluster"
    )]
    pub cluster_init: Option<bool>,

    /// (cluster) Server to connect to, used to join a cluster, e.g. https://10.0.0.1:6443
    #[arg(
        short = 's',
        long,
        env = "K3RS_URL",
        value_name = "URL",
        help_heading = "Cluster"
    )]
    pub server: Option<String>,

    /// (db) Customized flag for the embedded datastore, as key=value (repeatable):
    /// heartbeat-interval=<ms>, election-timeout=<ms> (etcd's names), learner-max-stall=<ms>
    /// (a joining server that stops catching up is removed after it; default 5 minutes)
    #[arg(long, value_name = "KEY=VALUE", help_heading = "Database")]
    pub etcd_arg: Vec<String>,

    /// (agent/node) Node name [default: the hostname]
    #[arg(
        long,
        env = "K3RS_NODE_NAME",
        value_name = "NAME",
        help_heading = "Agent/node"
    )]
    pub node_name: Option<String>,

    /// (networking) IPv4/IPv6 network CIDR to use for pod IPs [default: 10.42.0.0/16]
    #[arg(long, value_name = "CIDR", help_heading = "Networking")]
    pub cluster_cidr: Option<String>,

    /// (networking) IPv4/IPv6 network CIDR to use for service IPs [default: 10.43.0.0/16]
    #[arg(long, value_name = "CIDR", help_heading = "Networking")]
    pub service_cidr: Option<String>,

    /// (networking) IPv4/IPv6 cluster IP for the DNS service; must be inside the service CIDR
    /// [default: 10.43.0.10]
    #[arg(long, value_name = "IP", help_heading = "Networking")]
    pub cluster_dns: Option<String>,

    /// (networking) Cluster domain [default: cluster.local]
    #[arg(long, value_name = "DOMAIN", help_heading = "Networking")]
    pub cluster_domain: Option<String>,

    /// (networking) Port range reserved for NodePort services [default: 30000-32767]
    #[arg(long, value_name = "RANGE", help_heading = "Networking")]
    pub service_node_port_range: Option<String>,

    /// (security) Enable secret encryption at rest (writes
    /// <data-dir>/server/cred/encryption-config.json with a random aesgcm key if missing)
    #[arg(
        long,
        env = "K3RS_SECRETS_ENCRYPTION",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL",
        help_heading = "Security"
    )]
    pub secrets_encryption: Option<bool>,

    /// (security) Pod Security admission configuration file: an AdmissionConfiguration
    /// whose PodSecurity plugin carries a PodSecurityConfiguration (defaults, exemptions)
    #[arg(long, value_name = "FILE", help_heading = "Security")]
    pub pod_security_admission_config_file: Option<String>,

    /// (flags) Customized flag for the kube-controller-manager loops, as key=value
    /// (repeatable), e.g. node-monitor-grace-period=20s
    /// (flags) Customized flag for the kube-apiserver, as key=value (repeatable):
    /// max-requests-inflight, max-mutating-requests-inflight, request-timeout,
    /// min-request-timeout; other kube-apiserver flags are ignored with a warning
    #[arg(long, value_name = "KEY=VALUE", help_heading = "Flags")]
    pub kube_apiserver_arg: Vec<String>,

    #[arg(long, value_name = "KEY=VALUE", help_heading = "Flags")]
    pub kube_controller_manager_arg: Vec<String>,

    /// (logging) Turn on debug logs
    #[arg(
        long,
        env = "K3RS_DEBUG",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL",
        help_heading = "Logging"
    )]
    pub debug: Option<bool>,

    /// (experimental) Do not run a local agent and register a local kubelet
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL",
        help_heading = "Experimental"
    )]
    pub disable_agent: Option<bool>,

    /// (components) Do not run the kube-controller-manager loops
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL",
        help_heading = "Components"
    )]
    pub disable_controller_manager: Option<bool>,

    /// (components) Do not run the kube-scheduler
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL",
        help_heading = "Components"
    )]
    pub disable_scheduler: Option<bool>,

    /// (components) Do not deploy packaged components and delete any deployed components
    /// (repeatable, or comma-separated): 'servicelb', 'rolebindings'; 'traefik', 'coredns',
    /// 'local-storage', 'metrics-server' and 'runtimes' are accepted for k3s compatibility
    /// (k3rs does not ship them; a manifest of that name in the manifests folder is removed)
    #[arg(
        long,
        value_name = "COMPONENT",
        value_delimiter = ',',
        help_heading = "Components"
    )]
    pub disable: Vec<String>,

    #[command(flatten)]
    pub snapshots: super::snapshot_args::ServerSnapshotArgs,

    #[command(flatten)]
    pub node: NodeArgs,
}

/// Flags of `k3rs agent`, named as k3s names them (see [`ServerArgs`] for `None`).
#[derive(Debug, Default, Args)]
pub struct AgentArgs {
    /// (config) Load configuration from FILE [default: /etc/k3rs/config.yaml]
    #[arg(short = 'c', long, env = "K3RS_CONFIG_FILE", value_name = "FILE")]
    pub config: Option<String>,

    /// (cluster) Server to connect to, e.g. https://10.0.0.1:6443
    #[arg(
        short = 's',
        long,
        env = "K3RS_URL",
        value_name = "URL",
        help_heading = "Cluster"
    )]
    pub server: Option<String>,

    /// (cluster) Token to use for authentication (the server's node-token)
    #[arg(
        short = 't',
        long,
        env = "K3RS_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        help_heading = "Cluster"
    )]
    pub token: Option<String>,

    /// (cluster) Token file to use for authentication
    #[arg(
        long,
        env = "K3RS_TOKEN_FILE",
        value_name = "FILE",
        help_heading = "Cluster"
    )]
    pub token_file: Option<String>,

    /// (agent/data) Folder to hold state [default: /var/lib/k3rs]
    #[arg(
        short = 'd',
        long,
        env = "K3RS_DATA_DIR",
        value_name = "DIR",
        help_heading = "Data"
    )]
    pub data_dir: Option<String>,

    /// (agent/node) Node name [default: the hostname]
    #[arg(
        long,
        env = "K3RS_NODE_NAME",
        value_name = "NAME",
        help_heading = "Agent/node"
    )]
    pub node_name: Option<String>,

    /// (logging) Turn on debug logs
    #[arg(
        long,
        env = "K3RS_DEBUG",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL",
        help_heading = "Logging"
    )]
    pub debug: Option<bool>,

    #[command(flatten)]
    pub node: NodeArgs,
}

/// The node flags shared by `k3rs agent` and `k3rs server` (for its embedded agent).
#[derive(Debug, Default, Args)]
pub struct NodeArgs {
    /// (agent/networking) IPv4/IPv6 addresses to advertise for the node (repeatable, or
    /// comma-separated) [default: the address that reaches the server]
    #[arg(
        long,
        value_name = "IP",
        value_delimiter = ',',
        help_heading = "Agent/networking"
    )]
    pub node_ip: Vec<String>,

    /// (agent/networking) IPv4/IPv6 external addresses to advertise for the node
    #[arg(
        long,
        value_name = "IP",
        value_delimiter = ',',
        help_heading = "Agent/networking"
    )]
    pub node_external_ip: Vec<String>,

    /// (agent/node) Registering the kubelet with a set of labels, key=value (repeatable)
    #[arg(long, value_name = "KEY=VALUE", help_heading = "Agent/node")]
    pub node_label: Vec<String>,

    /// (agent/node) Registering the kubelet with a set of taints, key=value:Effect
    /// (repeatable)
    #[arg(long, value_name = "KEY=VALUE:EFFECT", help_heading = "Agent/node")]
    pub node_taint: Vec<String>,

    /// (agent/runtime) Use an existing container runtime's CRI socket instead of the
    /// supervised containerd, e.g. unix:///run/containerd/containerd.sock
    #[arg(long, value_name = "ENDPOINT", help_heading = "Agent/runtime")]
    pub container_runtime_endpoint: Option<String>,

    /// (agent/runtime) The pod sandbox (pause) image [default: k3rs.local/pause:3.10]
    #[arg(long, value_name = "IMAGE", help_heading = "Agent/runtime")]
    pub pause_image: Option<String>,

    /// (agent/runtime) Private registry configuration file
    /// [default: /etc/k3rs/registries.yaml]
    #[arg(long, value_name = "FILE", help_heading = "Agent/runtime")]
    pub private_registry: Option<String>,

    /// (agent/networking) Kubelet resolv.conf file [default: /etc/resolv.conf, or
    /// systemd-resolved's upstream file when /etc/resolv.conf points at 127.0.0.53]
    #[arg(
        long,
        env = "K3RS_RESOLV_CONF",
        value_name = "FILE",
        help_heading = "Agent/networking"
    )]
    pub resolv_conf: Option<String>,

    /// (agent/flags) Customized flag for the kubelet, as key=value (repeatable), e.g.
    /// max-pods=200
    #[arg(long, value_name = "KEY=VALUE", help_heading = "Agent/flags")]
    pub kubelet_arg: Vec<String>,

    /// (networking) Backend for the pod network across nodes: 'vxlan', 'host-gw' or 'none'
    /// [default: vxlan]
    #[arg(long, value_name = "BACKEND", help_heading = "Networking")]
    pub flannel_backend: Option<String>,

    /// (networking) Override the default flannel interface (else the one holding --node-ip)
    #[arg(long, value_name = "IFACE", help_heading = "Networking")]
    pub flannel_iface: Option<String>,

    /// (components) Disable the network policy controller
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL",
        help_heading = "Components"
    )]
    pub disable_network_policy: Option<bool>,

    /// (components) Do not run kube-proxy (the Service rules) on this node
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        value_name = "BOOL",
        help_heading = "Components"
    )]
    pub disable_kube_proxy: Option<bool>,

    /// (agent/node) Local port of the client-side load balancer in front of the API servers
    /// (127.0.0.1) [default: 6444]
    #[arg(long, value_name = "PORT", help_heading = "Agent/node")]
    pub lb_server_port: Option<String>,
}
