//! Service-account tokens for projected `serviceAccountToken` volume sources, as the kubelet's
//! token manager keeps them: requested through `POST serviceaccounts/<name>/token` bound to the
//! pod, cached per (pod, account, audience, lifetime), and requested again once 80 % of their
//! lifetime has passed (or after 24 h), so the file the volume refresh writes is always fresh.
//!
//! Talks to the API only; the volume code writes what it returns atomically.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("requesting a token for service account {namespace}/{account}: {source}")]
    Request {
        namespace: String,
        account: String,
        #[source]
        source: kube::Error,
    },
    #[error("the TokenRequest for service account {namespace}/{account} came back without a token")]
    NoToken { namespace: String, account: String },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Key {
    namespace: String,
    account: String,
    pod_uid: String,
    audience: String,
    expiration_seconds: i64,
}

#[derive(Clone, Debug)]
struct Entry {
    token: String,
    refresh_at: SystemTime,
}

/// How long until a token issued now and expiring at `expires` should be replaced.
fn refresh_after(issued: SystemTime, expires: SystemTime) -> SystemTime {
    let lifetime = expires.duration_since(issued).unwrap_or_default();
    let refresh = (lifetime * 4 / 5).min(Duration::from_secs(24 * 3600));
    issued + refresh
}

/// The kubelet's cache of pod-bound service-account tokens.
pub struct TokenManager {
    client: kube::Client,
    cache: Mutex<HashMap<Key, Entry>>,
}

impl TokenManager {
    pub fn new(client: kube::Client) -> TokenManager {
        TokenManager {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// A valid token of `pod`'s service account for `audience` (empty: the API server's).
    pub async fn token(
        &self,
        pod: &Pod,
        audience: &str,
        expiration_seconds: i64,
    ) -> Result<String, TokenError> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "default".into());
        let key = Key {
            namespace: namespace.clone(),
            account: account.clone(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            audience: audience.to_string(),
            expiration_seconds,
        };
        let now = SystemTime::now();
        if let Some(entry) = self.lock().get(&key)
            && now < entry.refresh_at
        {
            return Ok(entry.token.clone());
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: if audience.is_empty() {
                    Vec::new()
                } else {
                    vec![audience.to_string()]
                },
                expiration_seconds: Some(expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &namespace);
        let fail = |source| TokenError::Request {
            namespace: namespace.clone(),
            account: account.clone(),
            source,
        };
        let issued = SystemTime::now();
        let answer: TokenRequest = api
            .create_subresource("token", &account, &PostParams::default(), &request)
            .await
            .map_err(fail)?;
        let Some(status) = answer.status else {
            return Err(TokenError::NoToken { namespace, account });
        };
        let expires = SystemTime::UNIX_EPOCH
            + Duration::from_secs(status.expiration_timestamp.0.as_second().max(0) as u64);
        let entry = Entry {
            token: status.token,
            refresh_at: refresh_after(issued, expires),
        };
        tracing::debug!(pod = ?pod.metadata.name, %account, "service-account token issued");
        self.lock().insert(key, entry.clone());
        Ok(entry.token)
    }

    /// Drops the tokens of a pod that is gone.
    pub fn forget(&self, pod_uid: &str) {
        self.lock().retain(|k, _| k.pod_uid != pod_uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        match self.cache.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refreshes_at_80_percent_of_the_lifetime_or_a_day() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            refresh_after(t0, t0 + Duration::from_secs(3600)),
            t0 + Duration::from_secs(2880)
        );
        assert_eq!(
            refresh_after(t0, t0 + Duration::from_secs(365 * 24 * 3600)),
            t0 + Duration::from_secs(24 * 3600)
        );
        // A token that is already expired (clock skew) is replaced at once.
        assert_eq!(refresh_after(t0, t0 - Duration::from_secs(5)), t0);
    }
}
