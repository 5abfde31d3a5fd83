//! TLS for the API server: rustls with the serving certificate, client certificates
//! verified against the client CA but optional (bearer tokens and anonymous health
//! checks arrive without one), ALPN for HTTP/2 and HTTP/1.1.
//!
//! The serving certificate is a [`LiveCert`]: the server's renewal task swaps in a renewed
//! one and the next handshake uses it, without a restart. Client certificates are checked
//! by webpki, expiry included: an expired one fails the handshake.

use std::sync::Arc;

use anyhow::Context;
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;

use crate::pki::live::LiveCert;

/// Builds the server-side TLS configuration serving `serving`'s current certificate.
pub fn server_config(
    serving: &LiveCert,
    client_ca_pem: &str,
) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
        roots
            .add(ca.context("parsing the client CA")?)
            .context("adding the client CA")?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .context("building the client certificate verifier")?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("choosing TLS versions")?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(serving.clone()));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
