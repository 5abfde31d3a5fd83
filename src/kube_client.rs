//! API clients (`kube::Client`) that authenticate with a client certificate: the agent's
//! node client, the server's components that reach it over HTTPS, and the
//! `etcd-snapshot` command.
//!
//! Owns: the HTTPS stack under those clients (rustls with the server CA as the only
//! root and the client certificate, HTTP/1.1, connect and read timeouts as kube's
//! defaults) and reading k3rs's own kubeconfig files for it. Built here rather than
//! through `kube::Config`: that path also links kube's kubeconfig parser, its
//! exec-plugin and auth-provider support (a second YAML parser, a JSONPath engine and
//! regexes), about a megabyte of the release binary none of these clients use (issue
//! 22's size goal). May not touch: the store, the API server's internals.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::pki::{IssuedCert, Kubeconfig};

/// As kube's `Config` defaults: connecting may take 30 s; a response (a watch included)
/// may be silent for just under the 5-minute watch timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const READ_TIMEOUT: Duration = Duration::from_secs(295);

/// A client of the API server at `server_url` (`https://host:port`) that trusts only
/// `server_ca_pem` and presents `client`.
pub fn with_certificate(
    server_url: &str,
    server_ca_pem: &str,
    client: &IssuedCert,
) -> anyhow::Result<kube::Client> {
    let base: http::Uri = server_url
        .parse()
        .with_context(|| format!("the server URL {server_url:?}"))?;
    anyhow::ensure!(
        base.scheme_str() == Some("https") && base.host().is_some(),
        "the server URL {server_url:?} is not https://<host>[:<port>]"
    );
    let tls = mutual_tls_config(server_ca_pem, &client.cert_pem, &client.key_pem)?;
    client_over(base, tls)
}

/// A client like [`with_certificate`] whose certificate is read at every new connection
/// from `client`, so a renewed certificate is used without rebuilding the client.
pub fn with_live_certificate(
    server_url: &str,
    server_ca_pem: &str,
    client: &crate::pki::live::LiveCert,
) -> anyhow::Result<kube::Client> {
    let base: http::Uri = server_url
        .parse()
        .with_context(|| format!("the server URL {server_url:?}"))?;
    anyhow::ensure!(
        base.scheme_str() == Some("https") && base.host().is_some(),
        "the server URL {server_url:?} is not https://<host>[:<port>]"
    );
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots(server_ca_pem)?)
        .with_client_cert_resolver(Arc::new(client.clone()));
    client_over(base, tls)
}

fn client_over(base: http::Uri, tls: rustls::ClientConfig) -> anyhow::Result<kube::Client> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
    connector.set_read_timeout(Some(READ_TIMEOUT));
    let http_client = HttpClient::builder(TokioExecutor::new()).build(connector);
    let service = tower::ServiceBuilder::new()
        .layer(kube::client::middleware::BaseUriLayer::new(base))
        .service(http_client);
    Ok(kube::Client::new(service, "default"))
}

/// A client from a kubeconfig file k3rs wrote (one cluster, one user with an embedded
/// client certificate, as `/etc/rancher/k3rs/k3rs.yaml`), and its server URL.
pub fn from_kubeconfig_file(path: &std::path::Path) -> anyhow::Result<(kube::Client, String)> {
    let text = std::fs::read_to_string(path)?;
    let config: Kubeconfig = serde_yaml::from_str(&text)
        .context("not a kubeconfig with an embedded client certificate, as k3rs writes them")?;
    let cluster = &config
        .clusters
        .first()
        .context("the kubeconfig names no cluster")?
        .cluster;
    let user = &config
        .users
        .first()
        .context("the kubeconfig names no user")?
        .user;
    let decode = |what: &str, data: &str| -> anyhow::Result<String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .with_context(|| format!("{what} is not base64"))?;
        String::from_utf8(bytes).with_context(|| format!("{what} is not PEM text"))
    };
    let ca = decode(
        "certificate-authority-data",
        &cluster.certificate_authority_data,
    )?;
    let client = IssuedCert {
        cert_pem: decode("client-certificate-data", &user.client_certificate_data)?,
        key_pem: decode("client-key-data", &user.client_key_data)?,
    };
    let kube = with_certificate(&cluster.server, &ca, &client)?;
    Ok((kube, cluster.server.clone()))
}

/// A TLS client configuration that trusts only `ca_pem` and presents the certificate chain
/// `cert_pem` with `key_pem` (also the API server's towards kubelets).
pub fn mutual_tls_config(
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> anyhow::Result<rustls::ClientConfig> {
    let roots = roots(ca_pem)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .context("parsing the client certificate")?;
    let key =
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).context("parsing the client key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .context("the client certificate and key")?;
    Ok(config)
}

fn roots(ca_pem: &str) -> anyhow::Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.context("parsing the CA")?)
            .context("adding the CA")?;
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_an_https_url() {
        let client = IssuedCert {
            cert_pem: String::new(),
            key_pem: String::new(),
        };
        for url in [
            "http://127.0.0.1:6443",
            "127.0.0.1:6443",
            "https://",
            "not a url",
        ] {
            assert!(with_certificate(url, "", &client).is_err(), "{url}");
        }
    }

    #[test]
    fn kubeconfig_that_is_not_ours_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kc");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nusers: [{name: x, user: {token: abc}}]\n",
        )
        .unwrap();
        let err = from_kubeconfig_file(&path)
            .err()
            .expect("a token kubeconfig is refused");
        assert!(
            format!("{err:#}").contains("embedded client certificate"),
            "{err:#}"
        );
    }
}
