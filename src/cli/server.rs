//! The `k3rs server` flow: [`prepare`] puts the server's disk state in place (data dir, PKI,
//! join token, admin kubeconfig) through [`crate::pki`], then [`run`] starts the control plane.
//!
//! Owns the order of start-up steps and finding this host's names and addresses for the
//! serving certificate. It writes no files itself (that is `pki`'s job) and, until `run` is
//! wired to the API server, opens no listening sockets; the address lookup `connect`s a UDP
//! socket, which only queries the routing table (no packet is sent).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;

use anyhow::Context;

use super::config::{ServerConfig, system_hostname};
use super::notify::{self, Notifier};
use crate::panics::supervise;
use crate::pki::{self, ServerPki, ServerPkiOptions, ServerToken, ServingSans};

/// File stem of the API server's client certificate towards kubelets (`system:apiserver`).
const KUBE_APISERVER_KUBELET_CLIENT: &str = "client-kube-apiserver";

/// What [`prepare`] produced.
#[derive(Debug)]
pub struct Prepared {
    /// The server's certificate material.
    pub pki: ServerPki,
    /// The join token and its files.
    pub token: ServerToken,
    /// Where the admin kubeconfig was written.
    pub kubeconfig: PathBuf,
    /// The URL in the admin kubeconfig.
    pub api_url: String,
    /// `--agent-token`'s secret, written to `<data-dir>/server/agent-token`.
    pub agent_token_secret: Option<String>,
    /// `--server` on a first start: the cluster accepted the token and sent its bootstrap
    /// data; the server still has to be added as a member.
    pub joining: Option<(String, super::server_join::Fetched)>,
    /// What the certificates must cover, for renewing them while running.
    pub pki_options: ServerPkiOptions,
}

/// The raft peer port (etcd's, as k3s uses it).
pub const PEER_PORT: u16 = 2380;

/// Creates the data directory, certificates, join token and admin kubeconfig, logging what
/// was written.
pub fn prepare(config: &ServerConfig) -> anyhow::Result<Prepared> {
    let server_dir = config.data_dir.join("server");
    // Joining: everything is checked with the cluster before a byte is written here.
    let db_exists = crate::apiserver::datastore_exists(&server_dir.join("db"));
    let joining = match &config.join_url {
        Some(url) if !db_exists && !config.snapshots.cluster_reset => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let fetched = runtime
                .block_on(super::server_join::fetch_bootstrap(config, url))
                .with_context(|| format!("joining the cluster through {url}"))?;
            Some((url.clone(), fetched))
        }
        Some(_) => {
            tracing::info!(
                "the datastore already exists; --server is ignored (it only matters on the first start)"
            );
            None
        }
        None => None,
    };
    pki::files::create_private_dir(&server_dir).context("preparing the data directory")?;
    let tls_dir = server_dir.join("tls");
    if let Some((url, fetched)) = &joining {
        pki::files::create_private_dir(&tls_dir).context("preparing the data directory")?;
        fetched
            .bootstrap
            .write(&tls_dir)
            .context("writing the cluster's certificate authorities")?;
        tracing::info!(server = %url, "wrote the cluster's certificate authorities");
    }

    let hostname = system_hostname()
        .map(|h| h.to_ascii_lowercase())
        .unwrap_or_default();
    let mut host_names = vec![config.node_name.as_str()];
    if !hostname.is_empty() {
        host_names.push(hostname.as_str());
    }
    let node_ips = node_ips(config);
    let sans = ServingSans::for_apiserver(
        &host_names,
        &node_ips,
        &config.cluster_domain,
        config.kubernetes_service_ip(),
        &config.tls_san,
    );
    tracing::debug!(%sans, "serving certificate names");
    let mut peer_sans = ServingSans::new();
    peer_sans.add(&config.node_name);
    peer_sans.add("localhost");
    peer_sans.add("127.0.0.1");
    peer_sans.add(&advertise_ip(config).to_string());
    for ip in &node_ips {
        peer_sans.add(&ip.to_string());
    }
    let options = ServerPkiOptions {
        sans,
        kubelet_node: (!config.disable_agent).then(|| config.node_name.clone()),
        kubelet_ips: node_ips.clone(),
        peer: Some((config.node_name.clone(), peer_sans)),
    };
    let pki = ServerPki::ensure(&tls_dir, &options).context("preparing certificates")?;
    tracing::info!(dir = %tls_dir.display(), "certificates ready");

    let token = pki::ensure_server_token(
        &server_dir,
        &pki.server_ca_cert_path(),
        config.token.as_ref().map(|t| t.expose()),
    )
    .context("preparing the join token")?;
    tracing::info!(
        token = %token.token_path.display(),
        node_token = %token.node_token_path.display(),
        "wrote join token"
    );
    let agent_token_secret = match &config.agent_token {
        Some(agent_token) => {
            let server_secret = pki::parse_token(&token.token)
                .map(|t| t.secret)
                .context("reading the server token")?;
            let secret = pki::token::ensure_agent_token(
                &server_dir,
                &pki.server_ca_cert_path(),
                agent_token.expose(),
                &server_secret,
            )
            .context("preparing the agent token (--agent-token)")?;
            tracing::info!(
                path = %server_dir.join(pki::token::AGENT_TOKEN_FILE).display(),
                "wrote agent token"
            );
            Some(secret)
        }
        None => None,
    };

    let api_url = api_url(config.bind_address, config.https_listen_port);
    pki::write_kubeconfig(
        &config.write_kubeconfig,
        config.write_kubeconfig_mode,
        &api_url,
        pki.server_ca().cert_pem(),
        pki.admin(),
    )
    .context("writing the admin kubeconfig")?;
    tracing::info!(
        path = %config.write_kubeconfig.display(),
        mode = %format!("{:04o}", config.write_kubeconfig_mode),
        "wrote kubeconfig"
    );

    Ok(Prepared {
        pki_options: options,
        pki,
        token,
        agent_token_secret,
        kubeconfig: config.write_kubeconfig.clone(),
        api_url,
        joining,
    })
}

/// The address other servers and agents reach this one at: `--advertise-address`, else
/// the first node address, else loopback.
/// The encryption at rest in force: `encryption-provider-config` if given, else with
/// `--secrets-encryption` k3s's generated file (created, mode 0600, when missing).
fn encryption_config(
    config: &ServerConfig,
) -> anyhow::Result<Option<std::sync::Arc<crate::apiserver::storage::encryption::Transformer>>> {
    use crate::apiserver::storage::encryption;
    let path = match (
        &config.encryption_provider_config,
        config.secrets_encryption,
    ) {
        (Some(path), _) => path.clone(),
        (None, true) => {
            let path = encryption::default_config_path(&config.data_dir);
            encryption::ensure_default_config(&path).map_err(anyhow::Error::msg)?;
            path
        }
        (None, false) => return Ok(None),
    };
    let transformer = encryption::Transformer::load(&path)
        .map_err(anyhow::Error::msg)
        .context("loading the encryption configuration")?;
    tracing::info!(path = %path.display(), "encryption at rest enabled");
    Ok(Some(std::sync::Arc::new(transformer)))
}

fn advertise_ip(config: &ServerConfig) -> IpAddr {
    config
        .advertise_address
        .or_else(|| node_ips(config).into_iter().next())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// How this server takes part in a cluster: its peer port and certificate, and, on a
/// first start with `--server`, its membership (asked of the cluster now).
async fn cluster_config(
    config: &ServerConfig,
    prepared: &Prepared,
) -> anyhow::Result<crate::apiserver::ClusterConfig> {
    let advertise = advertise_ip(config);
    let peer_listen_ip = if config.bind_address.is_unspecified() {
        advertise
    } else {
        config.bind_address
    };
    let peer_url = format!("https://{}", SocketAddr::new(advertise, PEER_PORT));
    let peer = prepared
        .pki
        .peer()
        .context("no raft peer certificate was issued")?;
    let joined = match &prepared.joining {
        Some((url, fetched)) => Some(
            super::server_join::add_member(url, fetched, &config.node_name, &peer_url)
                .await
                .with_context(|| format!("joining the cluster through {url}"))?,
        ),
        None => None,
    };
    Ok(crate::apiserver::ClusterConfig {
        name: config.node_name.clone(),
        peer_listen: SocketAddr::new(peer_listen_ip, PEER_PORT),
        peer_url,
        peer_ca_pem: prepared.pki.peer_ca().cert_pem().to_string(),
        peer_cert_pem: peer.cert_pem.clone(),
        peer_key_pem: peer.key_pem.clone(),
        init: config.cluster_init,
        joined,
        tls_dir: prepared.pki.tls_dir().to_path_buf(),
        critical: super::server_join::critical_settings(config),
    })
}

/// Starts the control plane and runs until SIGTERM or SIGINT. Under systemd
/// (`Type=notify`) it reports progress with `STATUS=`, `READY=1` once the API answers
/// `/readyz`, watchdog pings when `WATCHDOG_USEC` is set, and `STOPPING=1` on shutdown.
pub fn run(config: ServerConfig, prepared: Prepared) -> anyhow::Result<()> {
    tracing::debug!(?config, "starting server");
    let notifier = Notifier::from_env().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "not notifying systemd");
        Notifier::disabled()
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("k3rs")
        .build()
        .context("starting the async runtime")?;
    if config.snapshots.cluster_reset {
        return runtime.block_on(cluster_reset(&config, &prepared));
    }
    runtime.block_on(serve(config, prepared, notifier))
}

/// `--cluster-reset [--cluster-reset-restore-path=…]`: restores (or resets) the datastore
/// offline, then exits telling the user to start the service normally.
async fn cluster_reset(config: &ServerConfig, prepared: &Prepared) -> anyhow::Result<()> {
    use crate::apiserver::cluster::snapshots::restore;
    let settings = &config.snapshots.settings;
    let token_secret = pki::parse_token(&prepared.token.token)
        .map(|t| t.secret)
        .context("reading the server token")?;
    let options = restore::RestoreOptions {
        store_dir: super::snapshot_config::store_dir(&config.data_dir),
        snapshot_dir: settings.dir.clone(),
        source: config.snapshots.cluster_reset_restore_path.clone(),
        s3: settings.s3.clone(),
        refuse_if_peers_reachable: !config.snapshots.cluster_reset_force,
        // A snapshot carries the cluster's CAs: restored on a fresh machine they
        // replace the ones this start generated (leaf certificates are reissued from
        // them on the next start).
        bootstrap: config
            .snapshots
            .cluster_reset_restore_path
            .as_ref()
            .map(|_| restore::BootstrapTarget {
                token_secret,
                tls_dir: config.data_dir.join("server").join("tls"),
            }),
    };
    let report = restore::restore(&options)
        .await
        .context("--cluster-reset")?;
    tracing::info!("{}", super::etcd_snapshot::restore_message(&report));
    Ok(())
}

async fn serve(config: ServerConfig, prepared: Prepared, notifier: Notifier) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    notifier.status("Opening the datastore and starting the API server");
    let secret = pki::parse_token(&prepared.token.token)
        .map(|t| t.secret)
        .context("reading the server token")?;
    let listen = SocketAddr::new(config.bind_address, config.https_listen_port);
    let advertise_ip = advertise_ip(&config);
    let cluster = cluster_config(&config, &prepared).await?;
    let encryption = encryption_config(&config)?;
    let apiserver_config = crate::apiserver::ApiServerConfig {
        listen,
        serving_cert_pem: prepared.pki.serving().cert_pem.clone(),
        serving_key_pem: prepared.pki.serving().key_pem.clone(),
        client_ca_pem: prepared.pki.client_ca().cert_pem().to_string(),
        token_secret: Some(secret),
        agent_token_secret: prepared.agent_token_secret.clone(),
        store_dir: config.data_dir.join("server").join("db"),
        service_cidr: config.service_cidr,
        cluster_dns: config.cluster_dns,
        node_port_range: config.service_node_port_range.clone(),
        advertise: SocketAddr::new(advertise_ip, config.https_listen_port),
        snapshots: Some(config.snapshots.settings.clone()),
        kubelet_client: prepared
            .pki
            .client(KUBE_APISERVER_KUBELET_CLIENT)
            .map(
                |cert| crate::apiserver::http::node_proxy::KubeletClientConfig {
                    cert_pem: cert.cert_pem.clone(),
                    key_pem: cert.key_pem.clone(),
                    ca_pem: prepared.pki.server_ca().cert_pem().to_string(),
                },
            ),
        node_signer: Some(std::sync::Arc::new(
            pki::NodeSigner::from_pki(&prepared.pki).context("preparing the node signer")?,
        )),
        service_account_key_file: Some(config.data_dir.join("server/tls/service.key")),
        service_account_extra_key_files: config.service_account_key_files.clone(),
        raft_timing: config.raft_timing,
        cluster: Some(cluster),
        limits: config.apiserver_limits.clone(),
        pod_security: config.pod_security.clone(),
        encryption,
        audit: config.audit.clone(),
        admission: config.admission.clone(),
    };
    for arg in &config.ignored_apiserver_args {
        tracing::warn!("k3rs ignores kube-apiserver arg {arg:?}: not implemented");
    }
    let server = crate::apiserver::start(apiserver_config)
        .await
        .context("starting the API server")?;
    let local_url = api_url(config.bind_address, server.local_addr.port());
    tokio::spawn(
        super::cert_renewal::ServerRenewal {
            tls_dir: prepared.pki.tls_dir().to_path_buf(),
            options: prepared.pki_options.clone(),
            serving: server.serving_cert.clone(),
            kubeconfig: super::cert_renewal::Kubeconfig {
                path: config.write_kubeconfig.clone(),
                mode: config.write_kubeconfig_mode,
                url: prepared.api_url.clone(),
            },
            admin: prepared.pki.admin().clone(),
        }
        .run(),
    );
    notifier.status("Waiting for the API server to answer /readyz");
    let admin = issued_client(&prepared, prepared.pki.admin(), &local_url)
        .await
        .context("building the admin client")?;
    wait_until_ready(&admin).await;
    if !config.disable_controller_manager {
        let client = component_client(
            &prepared,
            &server,
            "client-controller",
            "kube-controller-manager",
        )
        .context("building the controller-manager's client")?;
        let cluster_dns = config.cluster_dns;
        let ca_pem = prepared.pki.server_ca().cert_pem().to_string();
        let servicelb = config.servicelb_enabled();
        if !servicelb {
            tracing::info!("ServiceLB disabled (--disable=servicelb)");
        }
        let controllers = config.controllers.clone();
        let lease = crate::leader_election::LeaderConfig::for_server(
            "kube-controller-manager",
            &config.node_name,
        );
        let component = client.clone();
        // With several servers exactly one runs the controllers (k3s runs
        // kube-controller-manager with --leader-elect); the others stand by without caches.
        tokio::spawn(crate::leader_election::run_while_leading(
            client,
            lease,
            "kube-controller-manager",
            "controllers",
            move || {
                let (client, ca_pem, controllers) =
                    (component.clone(), ca_pem.clone(), controllers.clone());
                async move {
                    // The cluster DNS Service and its slice of node DNS servers (see
                    // dns::bootstrap).
                    {
                        let client = client.clone();
                        supervise("dns-bootstrap", move || {
                            crate::dns::bootstrap::run(client.clone(), cluster_dns)
                        });
                    }
                    {
                        let client = client.clone();
                        supervise("root-ca", move || {
                            crate::controllers::root_ca::run(client.clone(), ca_pem.clone())
                        });
                    }
                    if servicelb {
                        let client = client.clone();
                        supervise("servicelb", move || {
                            crate::controllers::servicelb::run(client.clone())
                        });
                    }
                    crate::controllers::run(client, controllers).await;
                }
            },
        ));
    }
    for component in config.disable.iter().filter(|c| {
        *c != "servicelb" && !crate::addons::packaged::names().any(|name| name == c.as_str())
    }) {
        tracing::info!(
            component = %component,
            "--disable={component}: k3rs does not ship this k3s add-on (a manifest of that name is removed)"
        );
    }
    // Auto-deployed manifests: the packaged ones are written first, then the folder is
    // applied and watched (k3s's deploy controller, with the supervisor's identity).
    {
        let addons = crate::addons::Config::for_data_dir(&config.data_dir, config.disable.clone());
        if let Err(e) = crate::addons::stage(&addons) {
            tracing::error!(
                error = format!("{e:#}"),
                "cannot write the packaged manifests"
            );
        }
        let client = component_client(&prepared, &server, "client-supervisor", "deploy")
            .context("building the deploy loop's client")?;
        supervise("deploy", move || {
            crate::addons::run(client.clone(), addons.clone())
        });
    }
    if !config.disable_scheduler {
        let client = component_client(&prepared, &server, "client-scheduler", "kube-scheduler")
            .context("building the scheduler's client")?;
        let lease =
            crate::leader_election::LeaderConfig::for_server("kube-scheduler", &config.node_name);
        let component = client.clone();
        tokio::spawn(crate::leader_election::run_while_leading(
            client,
            lease,
            "default-scheduler",
            "scheduler",
            move || {
                let client = component.clone();
                async move {
                    let config = crate::scheduler::Config {
                        leader: None,
                        ..Default::default()
                    };
                    supervise("scheduler", move || {
                        crate::scheduler::run_with(client.clone(), config.clone())
                    });
                }
            },
        ));
    }
    tracing::info!(
        address = %server.local_addr,
        kubeconfig = %prepared.kubeconfig.display(),
        took_ms = started.elapsed().as_millis() as u64,
        "k3rs is up and running"
    );
    notifier.ready("k3rs is running");
    let notifier = std::sync::Arc::new(notifier);
    if let Some(interval) = notify::watchdog_interval() {
        let notifier = notifier.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            loop {
                ticks.tick().await;
                notifier.watchdog();
            }
        });
    }
    let agent = if config.disable_agent {
        None
    } else {
        let options = embedded_agent(&config, &prepared, &local_url)?;
        // The labels NodeRestriction keeps from the kubelet (the control-plane role) are
        // the server's to set.
        tokio::spawn(crate::agent::label_own_node(
            admin.clone(),
            options.node_name.clone(),
            options.node_labels(),
        ));
        // The server's node has a node password like any agent's (k3s: the server's own
        // node-passwd entry), so an agent cannot take over the server's node name.
        let password_path = crate::agent::join::node_password_path(&config.data_dir);
        let password = crate::agent::join::ensure_node_password(&password_path)
            .context("preparing this node's password")?;
        match crate::apiserver::cluster::node_join::register_own_node(
            &server.state,
            &config.node_name,
            &password,
        )
        .await
        {
            Ok(()) => {}
            Err((code, message)) if code == http::StatusCode::FORBIDDEN => {
                anyhow::bail!("node {:?}: {message}", config.node_name)
            }
            Err((_, message)) => {
                tracing::warn!(node = %config.node_name, %message, "could not record this node's password")
            }
        }
        Some(tokio::spawn(crate::agent::run(options, notifier.clone())))
    };
    let removed = server.stopped_for_good();
    tokio::pin!(removed);
    match agent {
        None => tokio::select! {
            () = super::wait_for_signal() => {}
            error = &mut removed => {
                notifier.stopping();
                server.shutdown().await;
                return Err(error);
            }
        },
        Some(mut agent) => {
            tokio::select! {
                () = super::wait_for_signal() => agent.abort(),
                error = &mut removed => {
                    agent.abort();
                    notifier.stopping();
                    server.shutdown().await;
                    return Err(error);
                }
                result = &mut agent => {
                    notifier.stopping();
                    server.shutdown().await;
                    return match result {
                        Ok(Ok(())) => Err(anyhow::anyhow!("the embedded agent stopped")),
                        Ok(Err(e)) => Err(e.context("the embedded agent failed")),
                        Err(e) => Err(anyhow::anyhow!("the embedded agent panicked: {e}")),
                    };
                }
            }
        }
    }
    notifier.stopping();
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

/// The embedded agent's options: this server's own kubelet certificates instead of the join
/// protocol, and the control-plane role labels.
fn embedded_agent(
    config: &ServerConfig,
    prepared: &Prepared,
    url: &str,
) -> anyhow::Result<crate::agent::AgentOptions> {
    let cert = |stem: &str| {
        prepared
            .pki
            .client(stem)
            .cloned()
            .with_context(|| format!("no {stem} certificate for the embedded agent"))
    };
    let mut ips = config.node.node_ips.clone();
    if ips.is_empty() {
        ips = node_ips(config);
    }
    if ips.is_empty() {
        ips.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let credentials = crate::agent::NodeCredentials {
        server: url.to_string(),
        server_ca_pem: prepared.pki.server_ca().cert_pem().to_string(),
        client_ca_pem: prepared.pki.client_ca().cert_pem().to_string(),
        client: cert(pki::server_stems::CLIENT_KUBELET)?,
        serving: cert(pki::node::KUBELET_SERVING)?,
        node_ips: ips,
        kubeconfig: config.data_dir.join("agent").join("kubelet.kubeconfig"),
    };
    let env_dir = |name: &str, default: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from(default), PathBuf::from)
    };
    Ok(crate::agent::AgentOptions {
        node_name: config.node_name.clone(),
        data_dir: config.data_dir.clone(),
        run_dir: env_dir("K3RS_RUN_DIR", crate::agent::DEFAULT_RUN_DIR),
        pod_log_dir: env_dir("K3RS_POD_LOG_DIR", crate::agent::DEFAULT_POD_LOG_DIR),
        node: config.node.clone(),
        credentials: crate::agent::Credentials::Embedded(Box::new(credentials)),
        control_plane: true,
        cluster_dns: vec![config.cluster_dns],
        cluster_domain: config.cluster_domain.clone(),
        cluster_cidrs: vec![config.cluster_cidr.to_string()],
    })
}

/// Polls `GET /readyz` over HTTPS until it answers 200: the same check a user or a load
/// balancer makes, so READY=1 means clients can really connect.
async fn wait_until_ready(client: &kube::Client) {
    let mut delay = std::time::Duration::from_millis(10);
    loop {
        let request = http::Request::get("/readyz").body(Vec::new());
        match request {
            Ok(request) => match client.request_text(request).await {
                Ok(_) => return,
                Err(e) => tracing::debug!(error = %e, "API server not ready yet"),
            },
            Err(e) => tracing::warn!(error = %e, "building the /readyz request"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(std::time::Duration::from_millis(500));
    }
}

/// A kube client for an in-process component, authenticated as the identity its own
/// client certificate carries. Its requests go straight into the API server's dispatch
/// (authentication, RBAC, admission and all), without TLS on a loopback socket.
fn component_client(
    prepared: &Prepared,
    server: &crate::apiserver::ApiServer,
    stem: &str,
    component: &str,
) -> anyhow::Result<kube::Client> {
    let issued = prepared
        .pki
        .client(stem)
        .with_context(|| format!("no client certificate {stem}"))?;
    let der = pki::inspect::pem_to_der(&issued.cert_pem)
        .map_err(|e| anyhow::anyhow!("reading the {stem} certificate: {e}"))?;
    let identity = crate::apiserver::auth::authn::from_certificate(&der)
        .with_context(|| format!("the {stem} certificate names no user"))?;
    Ok(server.local_client(identity, component))
}

/// A kube client that presents `issued` as its client certificate.
async fn issued_client(
    prepared: &Prepared,
    issued: &pki::IssuedCert,
    url: &str,
) -> anyhow::Result<kube::Client> {
    crate::kube_client::with_certificate(url, prepared.pki.server_ca().cert_pem(), issued)
        .context("building the component client")
}

/// The URL local clients use: `https://127.0.0.1:<port>`, or the bind address when the server
/// listens on one specific address.
pub fn api_url(bind_address: IpAddr, port: u16) -> String {
    let host = if bind_address.is_unspecified() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        bind_address
    };
    format!("https://{}", SocketAddr::new(host, port))
}

/// This node's addresses for the serving certificate: the advertise address (or, without one,
/// the source addresses of the default IPv4/IPv6 routes) and a specific bind address.
pub fn node_ips(config: &ServerConfig) -> Vec<IpAddr> {
    let mut ips = Vec::new();
    match config.advertise_address {
        Some(ip) => ips.push(ip),
        None => ips.extend(default_route_addresses()),
    }
    if !config.bind_address.is_unspecified() && !ips.contains(&config.bind_address) {
        ips.push(config.bind_address);
    }
    ips
}

/// The local addresses the kernel would use to reach the Internet over IPv4 and IPv6, found
/// by "connecting" a UDP socket (no packet is sent). Hosts without a default route give none.
fn default_route_addresses() -> Vec<IpAddr> {
    let probes: [(IpAddr, IpAddr); 2] = [
        (
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        ),
        (
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
        ),
    ];
    probes
        .iter()
        .filter_map(|(local, remote)| {
            let socket = UdpSocket::bind(SocketAddr::new(*local, 0)).ok()?;
            socket.connect(SocketAddr::new(*remote, 9)).ok()?;
            let ip = socket.local_addr().ok()?.ip();
            (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{Cli, Command};
    use clap::Parser;

    fn config(argv: &[&str]) -> ServerConfig {
        let mut full = vec!["k3rs", "server", "--node-name", "node-a"];
        full.extend_from_slice(argv);
        let cli = Cli::try_parse_from(full).expect("parses");
        let Some(Command::Server(mut args)) = cli.command else {
            panic!("not server");
        };
        // Never pick up a config file from the machine running the tests.
        args.config = Some("/dev/null".to_string());
        crate::cli::config::load(&args, cli.debug).expect("valid")
    }

    #[test]
    fn api_urls() {
        assert_eq!(
            api_url("0.0.0.0".parse().expect("ip"), 6443),
            "https://127.0.0.1:6443"
        );
        assert_eq!(
            api_url("::".parse().expect("ip"), 6443),
            "https://127.0.0.1:6443"
        );
        assert_eq!(
            api_url("10.0.0.5".parse().expect("ip"), 7443),
            "https://10.0.0.5:7443"
        );
        assert_eq!(
            api_url("fd00::5".parse().expect("ip"), 6443),
            "https://[fd00::5]:6443"
        );
    }

    #[test]
    fn node_ips_prefer_advertise_address() {
        let c = config(&[
            "--advertise-address",
            "10.1.2.3",
            "--bind-address",
            "10.1.2.4",
        ]);
        let ips: Vec<String> = node_ips(&c).iter().map(IpAddr::to_string).collect();
        assert_eq!(ips, ["10.1.2.3", "10.1.2.4"]);
        for ip in node_ips(&config(&[])) {
            assert!(!ip.is_loopback() && !ip.is_unspecified(), "{ip}");
        }
    }

    #[test]
    fn prepare_writes_everything_and_is_repeatable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let kc = dir.path().join("etc").join("k3rs.yaml");
        let data_s = data.to_str().expect("utf-8");
        let kc_s = kc.to_str().expect("utf-8");
        let c = config(&[
            "-d",
            data_s,
            "-o",
            kc_s,
            "--write-kubeconfig-mode",
            "0640",
            "--advertise-address",
            "10.1.2.3",
            "--tls-san",
            "k3rs.example.com",
        ]);
        let first = prepare(&c).expect("prepare");
        assert_eq!(first.api_url, "https://127.0.0.1:6443");
        assert!(data.join("server/tls/server-ca.crt").is_file());
        assert!(data.join("server/token").is_file());
        assert!(data.join("server/node-token").is_file());
        assert!(kc.is_file());
        let second = prepare(&c).expect("prepare again");
        assert_eq!(second.token.token, first.token.token);
        assert_eq!(
            second.pki.server_ca().cert_pem(),
            first.pki.server_ca().cert_pem()
        );
        assert_eq!(second.pki.serving(), first.pki.serving());
    }
}
