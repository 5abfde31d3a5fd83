//! Authentication: who is making a request. Client certificates (already verified
//! against the client CA by TLS) give the user from the subject CN and groups from
//! O; a bearer token equal to the server's join secret is a bootstrap credential; a
//! service-account JWT (`sa_token`) is `system:serviceaccount:<ns>:<name>` in
//! `system:serviceaccounts`, `system:serviceaccounts:<ns>` and `system:authenticated`.
//! Anything else (also an expired, tampered or foreign token) is anonymous, which only
//! health and version endpoints accept; everything else answers it 401.

use std::sync::Arc;

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

/// Checks bearer tokens against the server's secret.
#[derive(Clone, Default)]
pub struct TokenAuthenticator {
    secret: Option<Arc<str>>,
}

impl TokenAuthenticator {
    pub fn new(secret: Option<String>) -> Self {
        TokenAuthenticator {
            secret: secret.map(Into::into),
        }
    }

    /// The identity for an `Authorization` header value, if it carries a valid token.
    pub fn authenticate(&self, authorization: &str) -> Option<Identity> {
        let token = authorization.strip_prefix("Bearer ")?.trim();
        let secret = self.secret.as_deref()?;
        // Accept the bare secret or the full K10<hash>::server:<secret> form.
        let presented = token
            .rsplit_once("::server:")
            .map(|(_, s)| s)
            .unwrap_or(token);
        if constant_time_eq(presented.as_bytes(), secret.as_bytes()) {
            Some(Identity {
                user: "system:k3rs:server-token".into(),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            })
        } else {
            None
        }
    }
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

/// The identity of an `Authorization` header: the join secret, else a service-account token.
pub fn bearer_identity(state: &super::AppState, authorization: &str) -> Option<Identity> {
    state.tokens.authenticate(authorization).or_else(|| {
        let token = authorization.strip_prefix("Bearer ")?.trim();
        super::sa_token::authenticate(state, token)
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        let auth = TokenAuthenticator::new(Some("s3cret".into()));
        assert!(auth.authenticate("Bearer s3cret").is_some());
        assert!(auth.authenticate("Bearer K10abc::server:s3cret").is_some());
        assert!(auth.authenticate("Bearer wrong").is_none());
        assert!(auth.authenticate("Basic s3cret").is_none());
        assert!(
            TokenAuthenticator::new(None)
                .authenticate("Bearer s3cret")
                .is_none()
        );
    }
}
