//! A certificate that can be replaced while connections are being made with it: the API
//! server's serving certificate (renewed while running) and a client certificate an agent
//! renews through the join endpoint. Each TLS handshake reads the current one; handshakes
//! already done keep theirs (TLS does not check expiry after the handshake).
//!
//! Owns only the in-memory swap (rustls `ResolvesServerCert` and `ResolvesClientCert`); it
//! reads and writes no files.

use std::sync::{Arc, RwLock};

use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::IssuedCert;

/// The current certificate and key; cheap to clone (all clones share it).
#[derive(Clone)]
pub struct LiveCert {
    current: Arc<RwLock<Arc<CertifiedKey>>>,
    /// The PEM the current key was made from, to tell whether an update changes anything.
    pem: Arc<RwLock<IssuedCert>>,
}

impl std::fmt::Debug for LiveCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCert").finish_non_exhaustive()
    }
}

/// Parses a certificate chain and key into what rustls signs handshakes with.
fn certified_key(issued: &IssuedCert) -> Result<Arc<CertifiedKey>, String> {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(issued.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("parsing the certificate: {e}"))?;
    if chain.is_empty() {
        return Err("no certificate in the PEM".to_string());
    }
    let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes())
        .map_err(|e| format!("parsing the private key: {e}"))?;
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("loading the private key: {e}"))?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|e| format!("the key does not belong to the certificate: {e}"))?;
    Ok(Arc::new(certified))
}

impl LiveCert {
    /// Starts with `issued`.
    pub fn new(issued: &IssuedCert) -> Result<Self, String> {
        Ok(Self {
            current: Arc::new(RwLock::new(certified_key(issued)?)),
            pem: Arc::new(RwLock::new(issued.clone())),
        })
    }

    /// Replaces the certificate for every later handshake. Returns whether it changed; a
    /// certificate that does not parse or match its key is refused and the old one kept.
    pub fn update(&self, issued: &IssuedCert) -> Result<bool, String> {
        if *self.pem.read().unwrap_or_else(|e| e.into_inner()) == *issued {
            return Ok(false);
        }
        let key = certified_key(issued)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = key;
        *self.pem.write().unwrap_or_else(|e| e.into_inner()) = issued.clone();
        Ok(true)
    }

    /// The certificate and key handed out now.
    pub fn issued(&self) -> IssuedCert {
        self.pem.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn get(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for LiveCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

impl ResolvesClientCert for LiveCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::CertificateAuthority;

    #[test]
    fn swaps_and_refuses_a_mismatched_pair() {
        let ca = CertificateAuthority::generate("test-ca").expect("ca");
        let one = ca.issue_client_cert("one", &[]).expect("one");
        let two = ca.issue_client_cert("two", &[]).expect("two");
        let live = LiveCert::new(&one).expect("live");
        let first = live.get();
        assert_eq!(live.update(&one), Ok(false), "same pair: no change");
        assert_eq!(live.update(&two), Ok(true));
        assert_ne!(live.get().cert, first.cert);
        assert_eq!(live.issued(), two);
        let mismatched = IssuedCert {
            cert_pem: one.cert_pem.clone(),
            key_pem: two.key_pem.clone(),
        };
        assert!(live.update(&mismatched).is_err());
        assert_eq!(live.issued(), two, "the old pair stays");
        assert!(
            LiveCert::new(&IssuedCert {
                cert_pem: "garbage".into(),
                key_pem: String::new()
            })
            .is_err()
        );
    }
}
