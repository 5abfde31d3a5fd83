//! Authentication: who is making a request. Client certificates (already verified
//! against the client CA by TLS) give the user from the subject CN and groups from
//! O; a service-account JWT (`sa_token`) is `system:serviceaccount:<ns>:<name>` in
//! `system:serviceaccounts`, `system:serviceaccounts:<ns>` and `system:authenticated`.
//! The join tokens (server, agent and bootstrap tokens, see `join_tokens`) are not API
//! credentials: presented as a bearer token they are anonymous like any unknown token.
//! Anything else (also an expired, tampered or foreign token) is anonymous, which only
//! health and version endpoints accept; everything else answers it 401.

use x509_parser::prelude::{FromDer, X509Certificate};

/// The authenticated user of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
}

impl Identity {
    pub fn anonymous() -> Self {
        Identity {
            user: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        }
    }

    pub fn is_anonymous(&self) -> bool {
        self.user == "system:anonymous"
    }
}

/// The identity in a verified client certificate (DER).
pub fn from_certificate(der: &[u8]) -> Option<Identity> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    let user = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let mut groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    groups.push("system:authenticated".into());
    Some(Identity { user, groups })
}

/// The user and password of an `Authorization: Basic …` header value.
pub fn basic_credentials(authorization: &str) -> Option<(String, String)> {
    use base64::Engine as _;
    let encoded = authorization.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// The identity of an `Authorization` header: a service-account token. The join tokens
/// (server, agent, bootstrap: `join_tokens`) are no API credential, as in k3s.
pub fn bearer_identity(
    state: &crate::apiserver::AppState,
    authorization: &str,
) -> Option<Identity> {
    let token = authorization.strip_prefix("Bearer ")?.trim();
    super::sa_token::authenticate(state, token)
}
