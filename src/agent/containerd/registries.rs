//! `--private-registry` (`/etc/k3rs/registries.yaml`): k3s's format, `mirrors:` (per registry
//! host, a list of endpoints) and `configs:` (per registry host, `auth` and `tls`).
//!
//! Parsing only; [`super::config`] renders the result into containerd's CRI registry section.
//! A missing file means "no private registries"; a malformed one is an error naming the file.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum RegistriesError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "parsing {path} (expected k3s's registries.yaml format with `mirrors:` and `configs:`): {source}"
    )]
    Parse {
        path: String,
        source: serde_yaml::Error,
    },
    #[error("{path}: mirror {registry:?} has an endpoint that is not an http(s) URL: {endpoint:?}")]
    BadEndpoint {
        path: String,
        registry: String,
        endpoint: String,
    },
}

/// The whole file. Unknown keys are rejected so a typo (`mirror:`) does not silently do nothing.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registries {
    #[serde(default)]
    pub mirrors: BTreeMap<String, Mirror>,
    #[serde(default)]
    pub configs: BTreeMap<String, RegistryConfig>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mirror {
    #[serde(default)]
    pub endpoint: Vec<String>,
    /// k3s's containerd fork supports repository rewrites; stock containerd 1.6 does not, so
    /// these are accepted (the file stays valid for k3s) and reported as ignored.
    #[serde(default)]
    pub rewrite: BTreeMap<String, String>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    #[serde(default)]
    pub auth: Option<Auth>,
    #[serde(default)]
    pub tls: Option<Tls>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Auth {
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    #[serde(default)]
    pub auth: Option<String>,
    #[serde(default)]
    pub identitytoken: Option<String>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    #[serde(default)]
    pub cert_file: Option<String>,
    #[serde(default)]
    pub key_file: Option<String>,
    #[serde(default)]
    pub ca_file: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

impl Registries {
    /// Reads `path`; a file that does not exist yields the empty configuration.
    pub fn load(path: &Path) -> Result<Registries, RegistriesError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Registries::default()),
            Err(source) => {
                return Err(RegistriesError::Read {
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, path: &str) -> Result<Registries, RegistriesError> {
        // An empty (or all-comments) file is valid YAML `null`: no registries.
        if text.lines().all(|l| {
            let l = l.trim();
            l.is_empty() || l.starts_with('#')
        }) {
            return Ok(Registries::default());
        }
        let parsed: Registries =
            serde_yaml::from_str(text).map_err(|source| RegistriesError::Parse {
                path: path.to_string(),
                source,
            })?;
        for (registry, mirror) in &parsed.mirrors {
            for endpoint in &mirror.endpoint {
                if !(endpoint.starts_with("https://") || endpoint.starts_with("http://")) {
                    return Err(RegistriesError::BadEndpoint {
                        path: path.to_string(),
                        registry: registry.clone(),
                        endpoint: endpoint.clone(),
                    });
                }
            }
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_k3s_example() {
        let text = r#"
mirrors:
  docker.io:
    endpoint:
      - "https://mirror.example.com:5000"
    rewrite:
      "^rancher/(.*)": "mirror/rancher/$1"
  "*":
    endpoint: ["http://10.0.0.1:5000"]
configs:
  "mirror.example.com:5000":
    auth:
      username: alice
      password: "s3cr\"et"
    tls:
      ca_file: /etc/ssl/ca.pem
      insecure_skip_verify: true
"#;
        let r = Registries::parse(text, "registries.yaml").unwrap();
        assert_eq!(
            r.mirrors["docker.io"].endpoint,
            vec!["https://mirror.example.com:5000"]
        );
        assert_eq!(r.mirrors["docker.io"].rewrite.len(), 1);
        assert_eq!(r.mirrors["*"].endpoint, vec!["http://10.0.0.1:5000"]);
        let c = &r.configs["mirror.example.com:5000"];
        assert_eq!(c.auth.as_ref().unwrap().username.as_deref(), Some("alice"));
        assert_eq!(
            c.auth.as_ref().unwrap().password.as_deref(),
            Some("s3cr\"et")
        );
        assert!(c.tls.as_ref().unwrap().insecure_skip_verify);
    }

    #[test]
    fn missing_and_empty_files_mean_no_registries() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            Registries::load(&dir.path().join("absent.yaml")).unwrap(),
            Registries::default()
        );
        let empty = dir.path().join("empty.yaml");
        std::fs::write(&empty, "# nothing yet\n\n").unwrap();
        assert_eq!(Registries::load(&empty).unwrap(), Registries::default());
    }

    #[test]
    fn malformed_file_is_an_error_naming_it() {
        let err = Registries::parse("mirrors: [1, 2", "/etc/k3rs/registries.yaml").unwrap_err();
        assert!(
            err.to_string().contains("/etc/k3rs/registries.yaml"),
            "{err}"
        );
        let err = Registries::parse("mirror:\n  docker.io: {}\n", "r.yaml").unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let err = Registries::parse(
            "mirrors:\n  docker.io:\n    endpoint: [\"mirror.local:5000\"]\n",
            "r.yaml",
        )
        .unwrap_err();
        assert!(err.to_string().contains("mirror.local:5000"), "{err}");
    }
}
