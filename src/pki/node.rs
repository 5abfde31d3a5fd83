//! A node's kubelet certificates, as k3s issues them to joining agents: the client certificate
//! (`system:node:<name>` in `system:nodes`, signed by the client CA) the kubelet uses towards
//! the API server, and the serving certificate (node name, node IPs, `localhost`, `127.0.0.1`,
//! signed by the server CA) of the kubelet API on :10250.
//!
//! The server side ([`NodeSigner`]) signs; the agent side ([`client_problem`],
//! [`serving_problem`]) decides whether certificates stored by an earlier start can be reused.
//! Nothing here reads or writes files.

use std::net::IpAddr;
use std::path::Path;

use super::inspect;
use super::server::{kubelet_identity, leaf_problem, unix_now};
use super::{CertificateAuthority, IssuedCert, PkiError, ServerPki, ServingSans};

pub use super::server::{KUBELET_SERVING, kubelet_serving_sans};

/// Signs kubelet certificates for joining nodes with the server's two CAs.
pub struct NodeSigner {
    server_ca: CertificateAuthority,
    client_ca: CertificateAuthority,
}

impl std::fmt::Debug for NodeSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSigner").finish_non_exhaustive()
    }
}

impl NodeSigner {
    /// A signer holding copies of the server's CAs.
    pub fn from_pki(pki: &ServerPki) -> Result<Self, PkiError> {
        let copy = |ca: &CertificateAuthority, stem: &str| {
            CertificateAuthority::from_pem(
                ca.cert_pem(),
                &ca.key_pem(),
                &pki.tls_dir().join(format!("{stem}.crt")),
            )
        };
        Ok(Self {
            server_ca: copy(pki.server_ca(), super::server::SERVER_CA)?,
            client_ca: copy(pki.client_ca(), super::server::CLIENT_CA)?,
        })
    }

    /// `server-ca.crt` exactly as on disk: what `/cacerts` serves and the token hashes.
    pub fn server_ca_pem(&self) -> &str {
        self.server_ca.cert_pem()
    }

    /// `client-ca.crt`: the CA of every client certificate, including the API server's
    /// identity towards kubelets.
    pub fn client_ca_pem(&self) -> &str {
        self.client_ca.cert_pem()
    }

    /// The kubelet's client certificate for `node_name`.
    pub fn issue_kubelet_client(&self, node_name: &str) -> Result<IssuedCert, PkiError> {
        let (cn, groups) = kubelet_identity(node_name);
        self.client_ca.issue_client_cert(&cn, groups)
    }

    /// The kubelet's serving certificate for `node_name` reachable at `node_ips`.
    pub fn issue_kubelet_serving(
        &self,
        node_name: &str,
        node_ips: &[IpAddr],
    ) -> Result<IssuedCert, PkiError> {
        let (cn, _) = kubelet_identity(node_name);
        self.server_ca
            .issue_serving_cert(&cn, &kubelet_serving_sans(node_name, node_ips))
    }
}

/// Why a stored kubelet client certificate cannot be reused for `node_name` (not a pair, not
/// signed by `client_ca_pem`, expiring within 90 days, another node's), or `None`.
pub fn client_problem(cert: &IssuedCert, client_ca_pem: &str, node_name: &str) -> Option<String> {
    let ca_der = match inspect::pem_to_der(client_ca_pem) {
        Ok(der) => der,
        Err(e) => return Some(format!("client CA: {e}")),
    };
    let (cn, groups) = kubelet_identity(node_name);
    leaf_problem(
        &cert.cert_pem,
        &cert.key_pem,
        &ca_der,
        unix_now(),
        &|info| {
            let mut orgs = info.organizations.clone();
            orgs.sort();
            (info.common_name.as_deref() != Some(cn.as_str()) || orgs != groups)
                .then(|| format!("issued to {:?}, not {cn:?}", info.common_name))
        },
    )
}

/// Why a stored kubelet serving certificate cannot be reused for `node_name` at `node_ips`
/// (see [`client_problem`]; also when it no longer covers every name), or `None`.
pub fn serving_problem(
    cert: &IssuedCert,
    server_ca_pem: &str,
    node_name: &str,
    node_ips: &[IpAddr],
) -> Option<String> {
    let ca_der = match inspect::pem_to_der(server_ca_pem) {
        Ok(der) => der,
        Err(e) => return Some(format!("server CA: {e}")),
    };
    let want = kubelet_serving_sans(node_name, node_ips);
    leaf_problem(
        &cert.cert_pem,
        &cert.key_pem,
        &ca_der,
        unix_now(),
        &|info| {
            let present = ServingSans::from_parts(&info.dns_names, &info.ips);
            let missing = want.missing_from(&present);
            (!missing.is_empty()).then(|| format!("SANs do not cover {}", missing.join(",")))
        },
    )
}

/// Splits a response of the join endpoints (certificate PEM, then private key PEM) into its
/// parts. `origin` names the response in errors.
pub fn split_cert_and_key(body: &str, origin: &Path) -> Result<IssuedCert, PkiError> {
    const KEY_BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
    let invalid = |reason: &str| PkiError::Invalid {
        path: origin.to_path_buf(),
        reason: reason.to_string(),
    };
    let at = body
        .find(KEY_BEGIN)
        .ok_or_else(|| invalid("no PRIVATE KEY block after the certificate"))?;
    let (cert_pem, key_pem) = body.split_at(at);
    inspect::pem_to_der(cert_pem).map_err(|e| invalid(&e))?;
    Ok(IssuedCert {
        cert_pem: cert_pem.trim_end().to_string() + "\n",
        key_pem: key_pem.trim_end().to_string() + "\n",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> (tempfile::TempDir, NodeSigner) {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = ServerPki::ensure(dir.path(), &Default::default()).expect("pki");
        let signer = NodeSigner::from_pki(&pki).expect("signer");
        (dir, signer)
    }

    #[test]
    fn client_certificates_name_the_node() {
        let (_dir, signer) = signer();
        let cert = signer.issue_kubelet_client("worker-1").expect("issue");
        let info =
            inspect::inspect(&inspect::pem_to_der(&cert.cert_pem).expect("pem")).expect("x509");
        assert_eq!(info.common_name.as_deref(), Some("system:node:worker-1"));
        assert_eq!(info.organizations, ["system:nodes"]);
        assert_eq!(
            client_problem(&cert, signer.client_ca_pem(), "worker-1"),
            None
        );
        let other = client_problem(&cert, signer.client_ca_pem(), "worker-2").expect("mismatch");
        assert!(other.contains("system:node:worker-2"), "{other}");
        let wrong_ca = client_problem(&cert, signer.server_ca_pem(), "worker-1");
        assert_eq!(wrong_ca.as_deref(), Some("not signed by the current CA"));
    }

    #[test]
    fn serving_certificates_cover_name_and_addresses() {
        let (_dir, signer) = signer();
        let ip: IpAddr = "192.0.2.7".parse().expect("ip");
        let cert = signer
            .issue_kubelet_serving("worker-1", &[ip])
            .expect("issue");
        let info =
            inspect::inspect(&inspect::pem_to_der(&cert.cert_pem).expect("pem")).expect("x509");
        let mut dns = info.dns_names.clone();
        dns.sort();
        assert_eq!(dns, ["localhost", "worker-1"]);
        for want in ["192.0.2.7", "127.0.0.1", "::1"] {
            assert!(info.ips.contains(&want.parse().expect("ip")), "{want}");
        }
        assert_eq!(
            serving_problem(&cert, signer.server_ca_pem(), "worker-1", &[ip]),
            None
        );
        let moved: IpAddr = "192.0.2.8".parse().expect("ip");
        let problem = serving_problem(&cert, signer.server_ca_pem(), "worker-1", &[moved]);
        assert_eq!(problem.as_deref(), Some("SANs do not cover 192.0.2.8"));
    }

    #[test]
    fn responses_split_into_certificate_and_key() {
        let (_dir, signer) = signer();
        let cert = signer.issue_kubelet_client("n").expect("issue");
        let body = format!("{}{}", cert.cert_pem, cert.key_pem);
        let split = split_cert_and_key(&body, Path::new("response")).expect("split");
        assert_eq!(split, cert);
        assert!(split_cert_and_key(&cert.cert_pem, Path::new("r")).is_err());
        assert!(split_cert_and_key(&cert.key_pem, Path::new("r")).is_err());
    }
}
