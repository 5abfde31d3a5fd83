//! Joining a cluster with the token, as k3s's agent does: fetch `/cacerts` without
//! verification, compare its SHA-256 with the `K10<hash>` part of the token (refusing on a
//! mismatch before writing anything), then — with that CA pinned — authenticate with the
//! token secret and obtain the kubelet's client and serving certificates from
//! `/v1-k3rs/client-kubelet.crt` and `/v1-k3rs/serving-kubelet.crt`, proving the node password.
//!
//! Everything lands under `<data-dir>/agent/` with k3s's names (`server-ca.crt`,
//! `client-ca.crt`, `client-kubelet.crt/.key`, `serving-kubelet.crt/.key`,
//! `kubelet.kubeconfig`; keys 0600) and is reused on the next start unless expired, issued by
//! another CA, or for another node name or address.
//!
//! Talks HTTPS to the server's join endpoints only; it never touches `store` or `apiserver`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::pki::{self, IssuedCert, node};

/// How long one request to the server may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Why joining failed.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The token is malformed.
    #[error("invalid --token: {0}")]
    Token(String),
    /// The server's CA is not the one the token pins.
    #[error(
        "the server's CA certificate does not match the hash in the token (K10{expected}…): \
         check --token / --server (the server's CA hashes to {actual})"
    )]
    CaMismatch { expected: String, actual: String },
    /// The server refused the token (401).
    #[error("the server at {server} rejected the token (401 Unauthorized): check --token")]
    Unauthorized { server: String },
    /// The server refused this node (403): another machine owns the node name.
    #[error("the server refused node {node:?} (403 Forbidden): {message}")]
    NodePasswordRejected { node: String, message: String },
    /// Any other answer.
    #[error("GET {url}: {status} {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
    },
    /// The server could not be reached.
    #[error("cannot reach the server at {server}: {reason}")]
    Unreachable { server: String, reason: String },
    /// A local file could not be read or written.
    #[error(transparent)]
    Pki(#[from] pki::PkiError),
}

impl JoinError {
    /// Whether trying again later may help (the server is down or busy), as opposed to a
    /// refusal that needs the operator.
    pub fn is_transient(&self) -> bool {
        match self {
            JoinError::Unreachable { .. } => true,
            JoinError::Status { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

/// What joining needs.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// `--server`, `https://host:port`.
    pub server: String,
    /// The full `K10…` token or a bare secret.
    pub token: crate::cli::Token,
    /// `--node-name`.
    pub node_name: String,
    /// `--node-ip`; empty means "the local address that reaches the server".
    pub node_ips: Vec<IpAddr>,
    /// `<data-dir>`.
    pub data_dir: PathBuf,
    /// The URL the node's clients use once joined (the agent's load balancer); the
    /// joined server's own URL when `None`.
    pub client_url: Option<String>,
}

/// A node's credentials, on disk under `<data-dir>/agent/` and in memory.
#[derive(Debug, Clone)]
pub struct NodeCredentials {
    /// The API server URL.
    pub server: String,
    /// The server CA (what the kubelet trusts the API server with).
    pub server_ca_pem: String,
    /// The client CA (what the kubelet API trusts the API server's client certificate with).
    pub client_ca_pem: String,
    /// `system:node:<name>` client certificate.
    pub client: IssuedCert,
    /// The kubelet serving certificate.
    pub serving: IssuedCert,
    /// The node's addresses (the first is its InternalIP).
    pub node_ips: Vec<IpAddr>,
    /// `<data-dir>/agent/kubelet.kubeconfig`.
    pub kubeconfig: PathBuf,
}

/// The parts of `https://host[:port]`.
#[derive(Debug, Clone)]
pub(crate) struct ServerAddr {
    pub url: String,
    host: String,
    port: u16,
}

pub(crate) fn server_addr(url: &str) -> Result<ServerAddr, JoinError> {
    let unreachable = |reason: &str| JoinError::Unreachable {
        server: url.to_string(),
        reason: reason.to_string(),
    };
    let authority = url
        .strip_prefix("https://")
        .ok_or_else(|| unreachable("the URL must start with https://"))?
        .trim_end_matches('/');
    let (host, port) = split_host_port(authority).map_err(|e| unreachable(&e))?;
    let port = match port {
        Some(p) => p.parse().map_err(|_| unreachable("invalid port"))?,
        None => 443,
    };
    Ok(ServerAddr {
        url: url.trim_end_matches('/').to_string(),
        host: host.to_string(),
        port,
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

pub(crate) fn insecure_tls() -> Result<Arc<rustls::ClientConfig>, JoinError> {
    let provider = provider();
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(&e))?
        .dangerous()
        .with_custom_certificate_verifier(crate::pki::insecure::AcceptAnyServerCertificate::new(
            provider,
        ))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

pub(crate) fn pinned_tls(ca_pem: &str) -> Result<Arc<rustls::ClientConfig>, JoinError> {
    pinned_tls_with_client(ca_pem, None)
}

/// TLS pinned to `ca_pem`, presenting `client` (the node's own kubelet client certificate)
/// when given.
fn pinned_tls_with_client(
    ca_pem: &str,
    client: Option<&IssuedCert>,
) -> Result<Arc<rustls::ClientConfig>, JoinError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| tls_error(&e))?;
        roots.add(cert).map_err(|e| tls_error(&e))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(&e))?
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some(client) => {
            let chain = CertificateDer::pem_slice_iter(client.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| tls_error(&e))?;
            let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(client.key_pem.as_bytes())
                .map_err(|e| tls_error(&e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls_error(&e))?
        }
    };
    Ok(Arc::new(config))
}

fn tls_error(e: &dyn std::fmt::Display) -> JoinError {
    JoinError::Status {
        url: "(TLS setup)".to_string(),
        status: 0,
        message: e.to_string(),
    }
}

/// One answer of the server.
pub(crate) struct Reply {
    pub status: u16,
    pub body: String,
    /// The local address the connection came from: the node's address towards the server.
    pub local_ip: IpAddr,
}

async fn https_get(
    server: &ServerAddr,
    tls: Arc<rustls::ClientConfig>,
    path: &str,
    headers: &[(&str, String)],
) -> Result<Reply, JoinError> {
    https_request(server, tls, http::Method::GET, path, headers, Vec::new()).await
}

/// One HTTPS request on a connection of its own (the join protocol makes a handful).
pub(crate) async fn https_request(
    server: &ServerAddr,
    tls: Arc<rustls::ClientConfig>,
    method: http::Method,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<Reply, JoinError> {
    let unreachable = |reason: String| JoinError::Unreachable {
        server: server.url.clone(),
        reason,
    };
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect((server.host.as_str(), server.port))
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let local_ip = tcp
            .local_addr()
            .map_err(|e| unreachable(e.to_string()))?
            .ip();
        let name = ServerName::try_from(server.host.clone())
            .map_err(|e| unreachable(format!("invalid host name: {e}")))?;
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| unreachable(format!("TLS: {e}")))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut request = http::Request::builder().method(method).uri(path).header(
            http::header::HOST,
            format!("{}:{}", server.host, server.port),
        );
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let request = request
            .body(Full::new(bytes::Bytes::from(body)))
            .map_err(|e| unreachable(e.to_string()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        Ok(Reply {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
            local_ip,
        })
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| unreachable(format!("no answer within {REQUEST_TIMEOUT:?}")))?
}

/// The server's CA as `/cacerts` serves it, checked against a join token.
pub(crate) struct FetchedCa {
    /// The CA bundle (PEM) exactly as served: what the token's `K10<hash>` part hashes.
    pub pem: String,
    /// Its SHA-256 (hex), as in a `K10<hash>::…` token.
    pub hash: String,
    /// Whether the token pinned it; `false` when the token has no `K10<hash>` part and the
    /// CA is trusted on first use (the caller warns).
    pub pinned: bool,
    /// The local address the connection came from: the node's address towards the server.
    pub local_ip: IpAddr,
}

/// Fetches `/cacerts` without verifying the server (there is nothing to verify it with yet)
/// and checks its SHA-256 against `expected_hash`, a token's `K10<hash>` part: a mismatch is
/// refused before anything else is sent. The one place every `K10…` token user (agent join,
/// `k3rs server --server`, `k3rs token rotate`) pins the CA.
pub(crate) async fn fetch_ca(
    server: &ServerAddr,
    expected_hash: Option<&str>,
) -> Result<FetchedCa, JoinError> {
    let reply = https_get(server, insecure_tls()?, "/cacerts", &[]).await?;
    if reply.status != 200 {
        return Err(JoinError::Status {
            url: format!("{}/cacerts", server.url),
            status: reply.status,
            message: reply.body.trim().to_string(),
        });
    }
    let hash = pki::ca_hash(reply.body.as_bytes());
    let pinned = match expected_hash {
        Some(expected) if expected != hash => {
            return Err(JoinError::CaMismatch {
                expected: expected.to_string(),
                actual: hash,
            });
        }
        Some(_) => {
            tracing::info!(server = %server.url, "the server's CA matches the token");
            true
        }
        None => false,
    };
    Ok(FetchedCa {
        pem: reply.body,
        hash,
        pinned,
        local_ip: reply.local_ip,
    })
}

/// Where the node password lives: `/etc/k3rs/node/password` for an agent with the default
/// data dir (it survives wiping the data dir, as k3s's `/etc/rancher/node/password` does), and
/// `<data-dir>/agent/node-password` otherwise (several agents on one host in tests, or a
/// read-only `/etc`).
pub fn node_password_path(data_dir: &Path) -> PathBuf {
    let data_copy = data_dir.join("agent").join("node-password");
    if data_dir != Path::new(crate::cli::config::DEFAULT_DATA_DIR) {
        return data_copy;
    }
    let etc = PathBuf::from("/etc/k3rs/node/password");
    let writable = etc.exists()
        || std::fs::create_dir_all("/etc/k3rs/node")
            .and_then(|()| tempfile_probe(Path::new("/etc/k3rs/node")))
            .is_ok();
    if writable { etc } else { data_copy }
}

fn tempfile_probe(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(".k3rs-write-probe");
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(probe)
}

/// Reads the node password, creating a random one (mode 0600) on first start.
pub fn ensure_node_password(path: &Path) -> Result<String, JoinError> {
    if let Some(existing) = pki::files::read_optional(path)? {
        let existing = existing.trim().to_string();
        if !existing.is_empty() {
            return Ok(existing);
        }
    }
    let password = pki::token::random_secret()?;
    if let Some(parent) = path.parent() {
        pki::files::create_private_dir(parent)?;
    }
    pki::files::write_atomic(
        path,
        format!("{password}\n").as_bytes(),
        pki::files::PRIVATE_MODE,
    )?;
    tracing::info!(path = %path.display(), "created the node password");
    Ok(password)
}

/// Checks a reply's status, mapping the refusals a user must act on.
fn expect_ok(
    reply: Reply,
    server: &ServerAddr,
    path: &str,
    node: &str,
) -> Result<Reply, JoinError> {
    match reply.status {
        200 => Ok(reply),
        401 => Err(JoinError::Unauthorized {
            server: server.url.clone(),
        }),
        403 => Err(JoinError::NodePasswordRejected {
            node: node.to_string(),
            message: reply.body.trim().to_string(),
        }),
        status => Err(JoinError::Status {
            url: format!("{}{path}", server.url),
            status,
            message: reply.body.trim().to_string(),
        }),
    }
}

/// Joins (or re-joins) the cluster and returns the node's credentials, writing them under
/// `<data-dir>/agent/`. Nothing is written unless the server's CA matches the token.
pub async fn join(options: &JoinOptions) -> Result<NodeCredentials, JoinError> {
    let token =
        pki::parse_token(options.token.expose()).map_err(|e| JoinError::Token(e.to_string()))?;
    let server = server_addr(&options.server)?;

    // 1. The CA, unverified, then checked against the token.
    let ca = fetch_ca(&server, token.ca_hash.as_deref()).await?;
    if !ca.pinned {
        tracing::warn!(
            server = %server.url,
            "the token has no K10<CA hash> part: the server's CA is NOT pinned, so this first \
             connection trusts whatever CA the server sends; use the full K10… token (the \
             server's node-token or agent-token file, or `k3rs token create`)"
        );
    }
    let server_ca_pem = ca.pem;
    let node_ips = if options.node_ips.is_empty() {
        vec![ca.local_ip]
    } else {
        options.node_ips.clone()
    };

    // 2. Authenticated, with the CA pinned: the node's own client certificate when it has a
    // valid one (so a restarted agent keeps working after its token was rotated, deleted or
    // expired), and the token (a bootstrap token as a bearer token, as k3s sends it; any
    // other as Basic node:<secret>).
    let agent_dir = options.data_dir.join("agent");
    let own_cert = existing_client_cert(&agent_dir, &options.node_name)?;
    if own_cert.is_some() {
        tracing::info!("authenticating with the node's existing client certificate");
    }
    let tls = pinned_tls_with_client(&server_ca_pem, own_cert.as_ref())?;
    let auth = if token.username.is_empty() {
        ("Authorization", format!("Bearer {}", token.secret))
    } else {
        let basic =
            base64::engine::general_purpose::STANDARD.encode(format!("node:{}", token.secret));
        ("Authorization", format!("Basic {basic}"))
    };
    let name_header = ("K3rs-Node-Name", options.node_name.clone());
    let reply = https_get(
        &server,
        tls.clone(),
        "/v1-k3rs/client-ca.crt",
        &[auth.clone(), name_header],
    )
    .await?;
    let client_ca_pem =
        expect_ok(reply, &server, "/v1-k3rs/client-ca.crt", &options.node_name)?.body;

    pki::files::create_private_dir(&agent_dir)?;
    let password = ensure_node_password(&node_password_path(&options.data_dir))?;
    let ips_header = node_ips
        .iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let headers = [
        auth,
        ("K3rs-Node-Name", options.node_name.clone()),
        ("K3rs-Node-Password", password),
        ("K3rs-Node-IP", ips_header),
    ];

    let stored = |stem: &str| -> Result<Option<IssuedCert>, JoinError> {
        let cert = pki::files::read_optional(&agent_dir.join(format!("{stem}.crt")))?;
        let key = pki::files::read_optional(&agent_dir.join(format!("{stem}.key")))?;
        Ok(cert
            .zip(key)
            .map(|(cert_pem, key_pem)| IssuedCert { cert_pem, key_pem }))
    };
    let mut obtained = Vec::new();
    for (stem, path) in [
        ("client-kubelet", "/v1-k3rs/client-kubelet.crt"),
        (node::KUBELET_SERVING, "/v1-k3rs/serving-kubelet.crt"),
    ] {
        let reusable = stored(stem)?.and_then(|cert| {
            let problem = if stem == "client-kubelet" {
                node::client_problem(&cert, &client_ca_pem, &options.node_name)
            } else {
                node::serving_problem(&cert, &server_ca_pem, &options.node_name, &node_ips)
            };
            match problem {
                None => Some(cert),
                Some(reason) => {
                    tracing::info!(certificate = stem, %reason, "requesting a new certificate");
                    None
                }
            }
        });
        // The password is checked on every start, even when the certificates are reused, so
        // a node whose name was taken over learns it at once.
        let reply = https_get(&server, tls.clone(), path, &headers).await?;
        let reply = expect_ok(reply, &server, path, &options.node_name)?;
        let cert = match reusable {
            Some(cert) => {
                tracing::debug!(certificate = stem, "reusing the stored certificate");
                cert
            }
            None => {
                let cert = node::split_cert_and_key(&reply.body, Path::new(path))?;
                pki::files::write_atomic(
                    &agent_dir.join(format!("{stem}.key")),
                    cert.key_pem.as_bytes(),
                    pki::files::PRIVATE_MODE,
                )?;
                pki::files::write_atomic(
                    &agent_dir.join(format!("{stem}.crt")),
                    cert.cert_pem.as_bytes(),
                    pki::files::PUBLIC_MODE,
                )?;
                tracing::info!(certificate = stem, dir = %agent_dir.display(), "stored a new certificate");
                cert
            }
        };
        obtained.push(cert);
    }
    let serving = obtained
        .pop()
        .ok_or_else(|| tls_error(&"no serving certificate"))?;
    let client = obtained
        .pop()
        .ok_or_else(|| tls_error(&"no client certificate"))?;
    store_credentials(NodeCredentials {
        server: options.client_url.clone().unwrap_or(server.url),
        server_ca_pem,
        client_ca_pem,
        client,
        serving,
        node_ips,
        kubeconfig: agent_dir.join("kubelet.kubeconfig"),
    })
}

/// The stored kubelet client certificate, if it is valid for `node_name` under the stored
/// client CA (what the server checks it against).
fn existing_client_cert(
    agent_dir: &Path,
    node_name: &str,
) -> Result<Option<IssuedCert>, JoinError> {
    let cert = pki::files::read_optional(&agent_dir.join("client-kubelet.crt"))?;
    let key = pki::files::read_optional(&agent_dir.join("client-kubelet.key"))?;
    let ca = pki::files::read_optional(&agent_dir.join("client-ca.crt"))?;
    let (Some(cert_pem), Some(key_pem), Some(ca)) = (cert, key, ca) else {
        return Ok(None);
    };
    let cert = IssuedCert { cert_pem, key_pem };
    Ok(match node::client_problem(&cert, &ca, node_name) {
        None => Some(cert),
        Some(reason) => {
            tracing::info!(%reason, "not presenting the stored client certificate");
            None
        }
    })
}

/// Writes the CA files and `kubelet.kubeconfig` next to the certificates (only when they
/// change, so a restart leaves them untouched).
pub fn store_credentials(credentials: NodeCredentials) -> Result<NodeCredentials, JoinError> {
    let dir = credentials
        .kubeconfig
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    pki::files::create_private_dir(&dir)?;
    let kubeconfig = pki::render_kubeconfig(
        &credentials.server,
        &credentials.server_ca_pem,
        &credentials.client,
    )?;
    for (path, contents, mode) in [
        (
            dir.join("server-ca.crt"),
            credentials.server_ca_pem.as_str(),
            pki::files::PUBLIC_MODE,
        ),
        (
            dir.join("client-ca.crt"),
            credentials.client_ca_pem.as_str(),
            pki::files::PUBLIC_MODE,
        ),
        (
            credentials.kubeconfig.clone(),
            kubeconfig.as_str(),
            pki::files::PRIVATE_MODE,
        ),
    ] {
        if pki::files::read_optional(&path)?.as_deref() != Some(contents) {
            pki::files::write_atomic(&path, contents.as_bytes(), mode)?;
        }
    }
    Ok(credentials)
}

/// Splits `host[:port]` or `[v6][:port]`.
pub fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "unterminated [ in the server URL".to_string())?;
        return match after {
            "" => Ok((host, None)),
            _ => after
                .strip_prefix(':')
                .map(|p| (host, Some(p)))
                .ok_or_else(|| "expected :port after ]".to_string()),
        };
    }
    Ok(match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses() {
        let a = server_addr("https://10.0.0.1:6443/").expect("valid");
        assert_eq!(
            (a.host.as_str(), a.port, a.url.as_str()),
            ("10.0.0.1", 6443, "https://10.0.0.1:6443")
        );
        let a = server_addr("https://[fd00::1]:7443").expect("valid");
        assert_eq!((a.host.as_str(), a.port), ("fd00::1", 7443));
        assert_eq!(
            server_addr("https://k3rs.example").expect("valid").port,
            443
        );
        assert!(server_addr("http://x:1").is_err());
    }

    #[test]
    fn node_password_is_created_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = node_password_path(dir.path());
        assert_eq!(path, dir.path().join("agent/node-password"));
        let first = ensure_node_password(&path).expect("create");
        assert_eq!(first.len(), 32);
        assert_eq!(ensure_node_password(&path).expect("reuse"), first);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn refusals_are_not_transient() {
        assert!(!JoinError::Unauthorized { server: "s".into() }.is_transient());
        assert!(
            !JoinError::CaMismatch {
                expected: "a".into(),
                actual: "b".into()
            }
            .is_transient()
        );
        assert!(
            JoinError::Unreachable {
                server: "s".into(),
                reason: "r".into()
            }
            .is_transient()
        );
    }
}
