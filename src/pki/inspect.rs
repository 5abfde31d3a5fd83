//! Reading back certificates written earlier (with x509-parser), to decide whether they can be
//! reused: subject, SANs, expiry, public key, and whether a CA signed them.

use std::net::IpAddr;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

/// The parts of a certificate the PKI cares about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CertInfo {
    pub common_name: Option<String>,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    /// Unix time.
    pub not_after: i64,
    pub is_ca: bool,
    /// DER SubjectPublicKeyInfo.
    pub spki: Vec<u8>,
}

/// Decodes the first `CERTIFICATE` block of a PEM string into DER.
pub(crate) fn pem_to_der(pem: &str) -> Result<Vec<u8>, String> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|e| format!("not a PEM certificate: {e}"))?;
    if block.label != "CERTIFICATE" {
        return Err(format!(
            "expected a CERTIFICATE PEM block, found {:?}",
            block.label
        ));
    }
    Ok(block.contents)
}

fn parse(der: &[u8]) -> Result<X509Certificate<'_>, String> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| format!("not an X.509 certificate: {e}"))?;
    Ok(cert)
}

/// Extracts [`CertInfo`] from a DER certificate.
pub(crate) fn inspect(der: &[u8]) -> Result<CertInfo, String> {
    let cert = parse(der)?;
    let subject = cert.subject();
    let text = |attr: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        attr.as_str().map(str::to_string).map_err(|e| e.to_string())
    };
    let common_name = subject.iter_common_name().next().map(text).transpose()?;
    let organizations = subject
        .iter_organization()
        .map(text)
        .collect::<Result<Vec<_>, _>>()?;
    let mut dns_names = Vec::new();
    let mut ips = Vec::new();
    if let Some(san) = cert.subject_alternative_name().map_err(|e| e.to_string())? {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(n) => dns_names.push(n.to_ascii_lowercase()),
                GeneralName::IPAddress(bytes) => {
                    if let Ok(b) = <[u8; 4]>::try_from(*bytes) {
                        ips.push(IpAddr::from(b));
                    } else if let Ok(b) = <[u8; 16]>::try_from(*bytes) {
                        ips.push(IpAddr::from(b));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(CertInfo {
        common_name,
        organizations,
        dns_names,
        ips,
        not_after: cert.validity().not_after.timestamp(),
        is_ca: cert.is_ca(),
        spki: cert.public_key().raw.to_vec(),
    })
}

/// Whether `leaf_der` carries a valid signature by the key of `ca_der`, and names it as issuer.
pub(crate) fn signed_by(leaf_der: &[u8], ca_der: &[u8]) -> bool {
    let (Ok(leaf), Ok(ca)) = (parse(leaf_der), parse(ca_der)) else {
        return false;
    };
    leaf.issuer().as_raw() == ca.subject().as_raw()
        && leaf.verify_signature(Some(ca.public_key())).is_ok()
}
