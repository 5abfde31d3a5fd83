//! A certificate authority (server CA or client CA) and the certificates it issues.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType,
};

use super::files::{self, PRIVATE_MODE, PUBLIC_MODE};
use super::inspect;
use super::{IssuedCert, PkiError, ServingSans};

/// CA certificates are valid for 10 years (as k3s's).
pub(crate) const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Leaf certificates are valid for 1 year (as k3s's).
pub(crate) const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// Test hook: leaf certificates valid for this many days instead of [`LEAF_VALIDITY`], so a
/// test can watch renewal happen while a server runs (every leaf then falls inside the
/// 90-day renewal window). Unset in production.
pub const TEST_LEAF_DAYS_ENV: &str = "K3RS_TEST_LEAF_DAYS";

/// How long a new leaf certificate is valid: [`LEAF_VALIDITY`], or [`TEST_LEAF_DAYS_ENV`].
pub(crate) fn leaf_validity() -> Duration {
    let Some(value) = std::env::var_os(TEST_LEAF_DAYS_ENV) else {
        return LEAF_VALIDITY;
    };
    match value.to_str().and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(days) if (1..=3650).contains(&days) => Duration::from_secs(days * 24 * 3600),
        _ => {
            tracing::warn!(value = ?value, "{TEST_LEAF_DAYS_ENV} is not a number of days (1..=3650); ignored");
            LEAF_VALIDITY
        }
    }
}

/// Certificates start being valid a little in the past to tolerate clock skew between nodes.
const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// The O attribute type, used as a custom type for a second group (see [`PkiError::TooManyGroups`]).
const OID_ORGANIZATION: &[u64] = &[2, 5, 4, 10];

/// A CA certificate with its signing key.
pub struct CertificateAuthority {
    cert_pem: String,
    cert_der: Vec<u8>,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Generates a new self-signed CA (ECDSA P-256, 10 years) named `common_name`.
    pub fn generate(common_name: &str) -> Result<Self, PkiError> {
        let what = || format!("CA {common_name:?}");
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        set_validity(&mut params, CA_VALIDITY);
        let key = KeyPair::generate().map_err(|e| PkiError::generate(what(), e))?;
        let cert = params
            .self_signed(&key)
            .map_err(|e| PkiError::generate(what(), e))?;
        Ok(Self {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads a CA from PEM text, checking that the key belongs to the certificate. `origin`
    /// names the certificate in errors.
    pub fn from_pem(cert_pem: &str, key_pem: &str, origin: &Path) -> Result<Self, PkiError> {
        let invalid = |reason: String| PkiError::Invalid {
            path: origin.to_path_buf(),
            reason,
        };
        let cert_der = inspect::pem_to_der(cert_pem).map_err(invalid)?;
        let info = inspect::inspect(&cert_der).map_err(invalid)?;
        if !info.is_ca {
            return Err(invalid("not a CA certificate".to_string()));
        }
        let key = KeyPair::from_pem(key_pem)
            .map_err(|e| invalid(format!("cannot read the CA's private key: {e}")))?;
        if key.subject_public_key_info() != info.spki {
            return Err(invalid(
                "the private key does not belong to this certificate".to_string(),
            ));
        }
        let issuer = Issuer::from_ca_cert_der(&cert_der.as_slice().into(), key)
            .map_err(|e| invalid(format!("cannot use as an issuer: {e}")))?;
        Ok(Self {
            cert_pem: cert_pem.to_string(),
            cert_der,
            issuer,
        })
    }

    /// Loads `<dir>/<stem>.crt` and `.key`, or, when neither exists, generates a CA named
    /// `<cn_prefix>@<unix time>` (k3s's naming) and writes it (key 0600, certificate 0644).
    /// Returns the CA and whether it was generated.
    pub fn load_or_generate(
        dir: &Path,
        stem: &str,
        cn_prefix: &str,
    ) -> Result<(Self, bool), PkiError> {
        let cert_path = dir.join(format!("{stem}.crt"));
        let key_path = dir.join(format!("{stem}.key"));
        match (
            files::read_optional(&cert_path)?,
            files::read_optional(&key_path)?,
        ) {
            (Some(cert), Some(key)) => Ok((Self::from_pem(&cert, &key, &cert_path)?, false)),
            (None, None) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let ca = Self::generate(&format!("{cn_prefix}@{now}"))?;
                // Key first: a crash in between leaves an orphan key, which the next start
                // reports instead of silently pairing it with a new certificate.
                files::write_atomic(&key_path, ca.key_pem().as_bytes(), PRIVATE_MODE)?;
                files::write_atomic(&cert_path, ca.cert_pem.as_bytes(), PUBLIC_MODE)?;
                Ok((ca, true))
            }
            (Some(_), None) => Err(PkiError::IncompleteCa {
                present: cert_path,
                missing: key_path,
            }),
            (None, Some(_)) => Err(PkiError::IncompleteCa {
                present: key_path,
                missing: cert_path,
            }),
        }
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The CA's private key, PKCS#8 PEM.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// Whether `cert_pem` was issued by this CA (issuer name and signature).
    pub fn issued(&self, cert_pem: &str) -> bool {
        inspect::pem_to_der(cert_pem).is_ok_and(|der| inspect::signed_by(&der, &self.cert_der))
    }

    /// Issues a client certificate (1 year) for user `common_name` in `groups` (the subject's
    /// O attributes, which Kubernetes reads as groups). At most two groups are supported.
    pub fn issue_client_cert(
        &self,
        common_name: &str,
        groups: &[&str],
    ) -> Result<IssuedCert, PkiError> {
        if groups.len() > 2 {
            return Err(PkiError::TooManyGroups(groups.len()));
        }
        let mut params = leaf_params(common_name);
        for (i, group) in groups.iter().enumerate() {
            let ty = if i == 0 {
                DnType::OrganizationName
            } else {
                // rcgen keeps one value per attribute type; a custom type with the same OID
                // gives a second O attribute.
                DnType::CustomDnType(OID_ORGANIZATION.to_vec())
            };
            params.distinguished_name.push(ty, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params, &format!("client certificate {common_name:?}"))
    }

    /// Issues a serving certificate (1 year) named `common_name` for `sans`.
    pub fn issue_serving_cert(
        &self,
        common_name: &str,
        sans: &ServingSans,
    ) -> Result<IssuedCert, PkiError> {
        let what = format!("serving certificate {common_name:?}");
        let mut params = leaf_params(common_name);
        params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        add_sans(&mut params, sans, &what)?;
        self.sign(params, &what)
    }

    /// Issues a raft peer certificate (1 year) named `common_name` for `sans`, valid both
    /// for serving the peer port and as a client of other members' (k3s's
    /// `peer-server-client.crt`).
    pub fn issue_peer_cert(
        &self,
        common_name: &str,
        sans: &ServingSans,
    ) -> Result<IssuedCert, PkiError> {
        let what = format!("peer certificate {common_name:?}");
        let mut params = leaf_params(common_name);
        params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        add_sans(&mut params, sans, &what)?;
        self.sign(params, &what)
    }

    fn sign(&self, params: CertificateParams, what: &str) -> Result<IssuedCert, PkiError> {
        let key = KeyPair::generate().map_err(|e| PkiError::generate(what, e))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| PkiError::generate(what, e))?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Puts `sans` into the subject alternative names of `params` (`what` names the
/// certificate in errors).
fn add_sans(
    params: &mut CertificateParams,
    sans: &ServingSans,
    what: &str,
) -> Result<(), PkiError> {
    for name in sans.dns_names() {
        let name = name
            .to_string()
            .try_into()
            .map_err(|e| PkiError::generate(format!("{what} (SAN {name:?})"), e))?;
        params.subject_alt_names.push(SanType::DnsName(name));
    }
    for ip in sans.ips() {
        params.subject_alt_names.push(SanType::IpAddress(ip));
    }
    Ok(())
}

fn leaf_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, leaf_validity());
    params
}

fn set_validity(params: &mut CertificateParams, validity: Duration) {
    let now = SystemTime::now();
    // rcgen's dates are `time::OffsetDateTime`, which converts from `SystemTime`.
    params.not_before = now.checked_sub(BACKDATE).unwrap_or(now).into();
    params.not_after = (now + validity).into();
}
