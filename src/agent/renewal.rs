//! The agent's certificate renewal while running: every hour (see
//! `cli::cert_renewal::interval`) the kubelet's client and serving certificates are checked,
//! and one within 90 days of expiry (or no longer valid for this node) is replaced:
//!
//! - a joined agent asks the join endpoints (`/v1-k3rs/client-kubelet.crt`,
//!   `/v1-k3rs/serving-kubelet.crt`) for new ones, authenticated by its current client
//!   certificate (and the node password, as at join); only if that certificate is refused
//!   (already expired, say) does it fall back to the join token;
//! - a server's embedded agent takes the ones the server's own renewal wrote to
//!   `server/tls/`.
//!
//! New certificates are written to `<data-dir>/agent/` (and `kubelet.kubeconfig`), then
//! swapped into the [`LiveCert`]s the node client and the kubelet server read at every
//! handshake, so the kubelet, kube-proxy and the network controllers keep working without
//! a restart.
//!
//! Talks HTTPS to the join endpoints only; never touches `store` or `apiserver`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;

use super::join::{self, NodeCredentials, https_request, server_addr};
use crate::pki::live::LiveCert;
use crate::pki::{self, IssuedCert, node};

/// Where renewed certificates come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The join endpoints at the credentials' server; the token is the fallback.
    Join { token: Option<crate::cli::Token> },
    /// The server's TLS directory (`<data-dir>/server/tls`).
    Embedded { tls_dir: PathBuf },
}

/// What the renewal task works on.
#[derive(Debug)]
pub struct AgentRenewal {
    pub node_name: String,
    pub data_dir: PathBuf,
    pub credentials: NodeCredentials,
    pub client: LiveCert,
    pub serving: LiveCert,
    pub source: Source,
}

const CLIENT: &str = "client-kubelet";

impl AgentRenewal {
    /// Checks every interval until dropped.
    pub async fn run(mut self) {
        let every = crate::cli::cert_renewal::interval();
        loop {
            tokio::time::sleep(every).await;
            if let Err(e) = self.check().await {
                tracing::error!(error = %format!("{e:#}"), "kubelet certificate renewal failed; retrying at the next check");
            }
        }
    }

    /// One check: renews what is due and puts it to use.
    pub async fn check(&mut self) -> anyhow::Result<()> {
        let node = self.node_name.clone();
        let client_due = node::client_problem(
            &self.client.issued(),
            &self.credentials.client_ca_pem,
            &node,
        );
        let serving_due = node::serving_problem(
            &self.serving.issued(),
            &self.credentials.server_ca_pem,
            &node,
            &self.credentials.node_ips,
        );
        if client_due.is_none() && serving_due.is_none() {
            return Ok(());
        }
        let (client, serving) = match &self.source {
            Source::Embedded { tls_dir } => (
                read_pair(tls_dir, CLIENT)?,
                read_pair(tls_dir, node::KUBELET_SERVING)?,
            ),
            Source::Join { token } => {
                let token = token.clone();
                let client = match &client_due {
                    Some(reason) => {
                        tracing::info!(%reason, "renewing the kubelet client certificate");
                        Some(
                            self.fetch("/v1-k3rs/client-kubelet.crt", token.as_ref())
                                .await?,
                        )
                    }
                    None => None,
                };
                let serving = match &serving_due {
                    Some(reason) => {
                        tracing::info!(%reason, "renewing the kubelet serving certificate");
                        Some(
                            self.fetch("/v1-k3rs/serving-kubelet.crt", token.as_ref())
                                .await?,
                        )
                    }
                    None => None,
                };
                (client, serving)
            }
        };
        let agent_dir = self.data_dir.join("agent");
        if let Some(client) = client
            && client_due.is_some()
            && client != self.client.issued()
        {
            if matches!(self.source, Source::Join { .. }) {
                write_pair(&agent_dir, CLIENT, &client)?;
            }
            self.client
                .update(&client)
                .map_err(|e| anyhow::anyhow!("the renewed client certificate: {e}"))?;
            self.credentials.client = client;
            join::store_credentials(self.credentials.clone())?;
            tracing::info!("using a renewed kubelet client certificate");
        }
        if let Some(serving) = serving
            && serving_due.is_some()
            && serving != self.serving.issued()
        {
            if matches!(self.source, Source::Join { .. }) {
                write_pair(&agent_dir, node::KUBELET_SERVING, &serving)?;
            }
            self.serving
                .update(&serving)
                .map_err(|e| anyhow::anyhow!("the renewed serving certificate: {e}"))?;
            self.credentials.serving = serving;
            tracing::info!("serving a renewed kubelet certificate");
        }
        Ok(())
    }

    /// One join endpoint's certificate: first with the current client certificate as the
    /// credential, then, if that is refused, with the token.
    async fn fetch(
        &self,
        path: &str,
        token: Option<&crate::cli::Token>,
    ) -> anyhow::Result<IssuedCert> {
        let server = server_addr(&self.credentials.server)?;
        let password_path = join::node_password_path(&self.data_dir);
        let password = pki::files::read_optional(&password_path)?
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .ok_or_else(|| anyhow::anyhow!("no node password in {}", password_path.display()))?;
        let ips = self
            .credentials
            .node_ips
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let mut headers = vec![
            ("K3rs-Node-Name", self.node_name.clone()),
            ("K3rs-Node-Password", password),
            ("K3rs-Node-IP", ips),
        ];
        let with_cert = Arc::new(self.tls_with_client_cert()?);
        let first = https_request(
            &server,
            with_cert,
            http::Method::GET,
            path,
            &headers,
            Vec::new(),
        )
        .await;
        let reply = match (first, token) {
            (Ok(reply), _) if reply.status == 200 => reply,
            (first, Some(token)) => {
                match &first {
                    Ok(reply) => tracing::warn!(
                        status = reply.status,
                        "renewal with the client certificate refused; using the token"
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, "renewal with the client certificate failed; using the token")
                    }
                }
                let secret = pki::parse_token(token.expose())
                    .map_err(|e| anyhow::anyhow!("the join token: {e}"))?
                    .secret;
                let basic =
                    base64::engine::general_purpose::STANDARD.encode(format!("node:{secret}"));
                headers.push(("Authorization", format!("Basic {basic}")));
                let tls = join::pinned_tls(&self.credentials.server_ca_pem)?;
                https_request(&server, tls, http::Method::GET, path, &headers, Vec::new()).await?
            }
            (Ok(reply), None) => reply,
            (Err(e), None) => return Err(e.into()),
        };
        anyhow::ensure!(
            reply.status == 200,
            "GET {path}: {} {}",
            reply.status,
            reply.body.trim()
        );
        Ok(node::split_cert_and_key(&reply.body, Path::new(path))?)
    }

    fn tls_with_client_cert(&self) -> anyhow::Result<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        for cert in CertificateDer::pem_slice_iter(self.credentials.server_ca_pem.as_bytes()) {
            roots.add(cert?)?;
        }
        Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_cert_resolver(Arc::new(self.client.clone())))
    }
}

fn read_pair(dir: &Path, stem: &str) -> anyhow::Result<Option<IssuedCert>> {
    let cert = pki::files::read_optional(&dir.join(format!("{stem}.crt")))?;
    let key = pki::files::read_optional(&dir.join(format!("{stem}.key")))?;
    Ok(cert
        .zip(key)
        .map(|(cert_pem, key_pem)| IssuedCert { cert_pem, key_pem }))
}

fn write_pair(dir: &Path, stem: &str, cert: &IssuedCert) -> anyhow::Result<()> {
    pki::files::create_private_dir(dir)?;
    pki::files::write_atomic(
        &dir.join(format!("{stem}.key")),
        cert.key_pem.as_bytes(),
        pki::files::PRIVATE_MODE,
    )?;
    pki::files::write_atomic(
        &dir.join(format!("{stem}.crt")),
        cert.cert_pem.as_bytes(),
        pki::files::PUBLIC_MODE,
    )?;
    Ok(())
}
