//! Kubeconfig files embedding a client certificate, in k3s's layout: one cluster, user and
//! context, all named `default`.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use super::files;
use super::{IssuedCert, PkiError};

/// A kubeconfig (the subset k3rs writes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kubeconfig {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub clusters: Vec<NamedCluster>,
    pub contexts: Vec<NamedContext>,
    #[serde(rename = "current-context")]
    pub current_context: String,
    pub kind: String,
    pub preferences: BTreeMap<String, String>,
    pub users: Vec<NamedUser>,
}

/// A named cluster entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedCluster {
    pub cluster: Cluster,
    pub name: String,
}

/// How to reach and trust the API server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    /// Base64 of the server CA certificate PEM.
    #[serde(rename = "certificate-authority-data")]
    pub certificate_authority_data: String,
    pub server: String,
}

/// A named context entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedContext {
    pub context: Context,
    pub name: String,
}

/// A cluster/user pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    pub cluster: String,
    pub user: String,
}

/// A named user entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedUser {
    pub name: String,
    pub user: User,
}

/// Client-certificate credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// Base64 of the client certificate PEM.
    #[serde(rename = "client-certificate-data")]
    pub client_certificate_data: String,
    /// Base64 of the client key PEM.
    #[serde(rename = "client-key-data")]
    pub client_key_data: String,
}

impl Kubeconfig {
    /// A kubeconfig for `server_url` (e.g. `https://127.0.0.1:6443`) trusting `server_ca_pem`
    /// and authenticating with `client`.
    pub fn new(server_url: &str, server_ca_pem: &str, client: &IssuedCert) -> Self {
        const NAME: &str = "default";
        Kubeconfig {
            api_version: "v1".to_string(),
            clusters: vec![NamedCluster {
                cluster: Cluster {
                    certificate_authority_data: STANDARD.encode(server_ca_pem),
                    server: server_url.to_string(),
                },
                name: NAME.to_string(),
            }],
            contexts: vec![NamedContext {
                context: Context {
                    cluster: NAME.to_string(),
                    user: NAME.to_string(),
                },
                name: NAME.to_string(),
            }],
            current_context: NAME.to_string(),
            kind: "Config".to_string(),
            preferences: BTreeMap::new(),
            users: vec![NamedUser {
                name: NAME.to_string(),
                user: User {
                    client_certificate_data: STANDARD.encode(&client.cert_pem),
                    client_key_data: STANDARD.encode(&client.key_pem),
                },
            }],
        }
    }
}

/// The YAML text of [`Kubeconfig::new`].
pub fn render_kubeconfig(
    server_url: &str,
    server_ca_pem: &str,
    client: &IssuedCert,
) -> Result<String, PkiError> {
    serde_yaml::to_string(&Kubeconfig::new(server_url, server_ca_pem, client))
        .map_err(PkiError::Kubeconfig)
}

/// Writes [`render_kubeconfig`] to `path` atomically with exactly `mode`, creating missing
/// parent directories.
pub fn write_kubeconfig(
    path: &Path,
    mode: u32,
    server_url: &str,
    server_ca_pem: &str,
    client: &IssuedCert,
) -> Result<(), PkiError> {
    let text = render_kubeconfig(server_url, server_ca_pem, client)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| PkiError::io("creating directory", parent, e))?;
    }
    files::write_atomic(path, text.as_bytes(), mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn b64(v: &serde_yaml::Value) -> String {
        let s = v.as_str().expect("string");
        String::from_utf8(STANDARD.decode(s).expect("base64")).expect("utf-8")
    }

    #[test]
    fn k3s_layout_and_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("etc").join("k3rs.yaml");
        let client = IssuedCert {
            cert_pem: "CLIENT CERT".to_string(),
            key_pem: "CLIENT KEY".to_string(),
        };
        write_kubeconfig(&path, 0o644, "https://127.0.0.1:6443", "CA PEM", &client).expect("write");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);

        let doc: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(&path).expect("read")).expect("yaml");
        assert_eq!(doc["apiVersion"], "v1");
        assert_eq!(doc["kind"], "Config");
        assert_eq!(doc["current-context"], "default");
        let cluster = &doc["clusters"][0];
        assert_eq!(cluster["name"], "default");
        assert_eq!(cluster["cluster"]["server"], "https://127.0.0.1:6443");
        assert_eq!(
            b64(&cluster["cluster"]["certificate-authority-data"]),
            "CA PEM"
        );
        let ctx = &doc["contexts"][0];
        assert_eq!(ctx["name"], "default");
        assert_eq!(ctx["context"]["cluster"], "default");
        assert_eq!(ctx["context"]["user"], "default");
        let user = &doc["users"][0];
        assert_eq!(user["name"], "default");
        assert_eq!(b64(&user["user"]["client-certificate-data"]), "CLIENT CERT");
        assert_eq!(b64(&user["user"]["client-key-data"]), "CLIENT KEY");

        // Rewriting applies a new mode; the file round-trips through the typed form.
        write_kubeconfig(&path, 0o600, "https://10.0.0.1:6443", "CA PEM", &client)
            .expect("rewrite");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let typed: Kubeconfig =
            serde_yaml::from_str(&std::fs::read_to_string(&path).expect("read")).expect("yaml");
        assert_eq!(
            typed,
            Kubeconfig::new("https://10.0.0.1:6443", "CA PEM", &client)
        );
    }
}
