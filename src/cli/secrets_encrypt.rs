//! `k3rs secrets-encrypt status|enable|disable|prepare|rotate|reencrypt|rotate-keys|reload`:
//! k3s's key management for encryption at rest. Every command asks the running server
//! over HTTPS (`/k3rs/v1/secrets-encrypt/...`, admin credentials from the kubeconfig
//! k3rs wrote), which rewrites its configuration file and puts it in force at once.
//! `status` falls back to reading `<data-dir>/server/cred/encryption-config.json` when the
//! server cannot be reached. Owns argument handling and output; the logic lives in
//! `apiserver::encryption_admin`.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use crate::apiserver::cluster::encryption_admin::{self, Status};
use crate::apiserver::storage::encryption;

/// `k3rs secrets-encrypt`.
#[derive(Debug, Args)]
pub struct SecretsEncryptArgs {
    #[command(subcommand)]
    pub command: SecretsEncryptCommand,
}

/// Where the server is.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Folder to hold state [default: /var/lib/k3rs]
    #[arg(long, short = 'd', value_name = "DIR", env = "K3RS_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The admin kubeconfig used to reach the running server [default: /etc/k3rs/k3rs.yaml]
    #[arg(long, env = "K3RS_KUBECONFIG_OUTPUT", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum SecretsEncryptCommand {
    /// Print the encryption status of this server
    Status {
        #[command(flatten)]
        server: ServerArgs,
        /// Output format: json or text
        #[arg(long, short = 'o', default_value = "text")]
        output: String,
    },
    /// Enable secrets encryption (the keyed provider first)
    Enable {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Disable secrets encryption (identity first; existing keys still read)
    Disable {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Add a new key that reads but does not yet write
    Prepare {
        #[command(flatten)]
        server: ServerArgs,
        /// Accepted for k3s compatibility (the stage is always checked)
        #[arg(long, short = 'f')]
        force: bool,
    },
    /// Make the prepared key the one new writes use
    Rotate {
        #[command(flatten)]
        server: ServerArgs,
        /// Accepted for k3s compatibility (the stage is always checked)
        #[arg(long, short = 'f')]
        force: bool,
    },
    /// Rewrite every Secret with the active key, then remove the old keys
    Reencrypt {
        #[command(flatten)]
        server: ServerArgs,
        /// Reencrypt even when the stage is not rotate
        #[arg(long, short = 'f')]
        force: bool,
        /// Keep the old keys
        #[arg(long, short = 's')]
        skip: bool,
    },
    /// Prepare, rotate and reencrypt in one step, removing the old keys
    RotateKeys {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// (k3rs) Reread the configuration file, e.g. after copying it from another server
    Reload {
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// Runs the subcommand; the report goes to stdout.
pub fn run(args: SecretsEncryptArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: SecretsEncryptArgs) -> anyhow::Result<()> {
    use SecretsEncryptCommand as C;
    let (server, action, body) = match args.command {
        C::Status { server, output } => {
            let status = match call(&server, &http::Method::GET, "status", None).await {
                Ok(status) => status,
                Err(e) => {
                    eprintln!("warning: {e:#}; reading the configuration file instead");
                    let data_dir = server
                        .data_dir
                        .unwrap_or_else(|| PathBuf::from(super::config::DEFAULT_DATA_DIR));
                    print!("{}", status(&encryption::default_config_path(&data_dir))?);
                    return Ok(());
                }
            };
            if output == "json" {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print!("{}", format_status(&status));
            }
            return Ok(());
        }
        C::Enable { server } => (server, "enable", None),
        C::Disable { server } => (server, "disable", None),
        C::Prepare { server, .. } => (server, "prepare", None),
        C::Rotate { server, .. } => (server, "rotate", None),
        C::Reencrypt {
            server,
            force,
            skip,
        } => (
            server,
            "reencrypt",
            Some(serde_json::json!({"force": force, "skip": skip})),
        ),
        C::RotateKeys { server } => (server, "rotate-keys", None),
        C::Reload { server } => (server, "reload", None),
    };
    let status = call(&server, &http::Method::POST, action, body).await?;
    println!("{}", status.message);
    Ok(())
}

/// Calls the running server's secrets-encrypt API.
async fn call(
    server: &ServerArgs,
    method: &http::Method,
    action: &str,
    body: Option<serde_json::Value>,
) -> anyhow::Result<Status> {
    let kubeconfig = server
        .kubeconfig
        .clone()
        .unwrap_or_else(|| PathBuf::from(super::config::DEFAULT_KUBECONFIG));
    let (client, url) =
        crate::kube_client::from_kubeconfig_file(&kubeconfig).with_context(|| {
            format!(
                "reading the admin kubeconfig {} (is k3rs server installed here? use --kubeconfig)",
                kubeconfig.display()
            )
        })?;
    let body = match body {
        Some(b) => serde_json::to_vec(&b)?,
        None => Vec::new(),
    };
    let request = http::Request::builder()
        .method(method)
        .uri(format!("{}/{action}", encryption_admin::API_PREFIX))
        .header("content-type", "application/json")
        .body(body)
        .context("building the request")?;
    let text = client.request_text(request).await.map_err(|e| match e {
        kube::Error::Api(status) => anyhow::anyhow!("{}", status.message),
        other => anyhow::anyhow!("cannot reach the k3rs server at {url}: {other}"),
    })?;
    serde_json::from_str(&text).context("decoding the server's answer")
}

/// k3s's layout of `secrets-encrypt status`.
fn format_status(status: &Status) -> String {
    let mut out = format!(
        "Encryption Status: {}\nCurrent Rotation Stage: {}\nServer Encryption Hashes: {}\n\n",
        if status.enabled {
            "Enabled"
        } else {
            "Disabled"
        },
        status.stage,
        status.hash
    );
    out.push_str("Active  Key Type           Name\n------  --------           ----\n");
    for key in &status.keys {
        let active = if key.active { " *" } else { "  " };
        out.push_str(&format!("{active}      {:<18} {}\n", key.kind, key.name));
    }
    out
}

/// The status from the configuration file alone (the server is not running).
fn status(path: &std::path::Path) -> anyhow::Result<String> {
    if !path.exists() {
        return Ok("Encryption Status: Disabled, no configuration file found\n".into());
    }
    let transformer = encryption::Transformer::load(path).map_err(anyhow::Error::msg)?;
    let stage = encryption_admin::stage_of(path);
    Ok(format_status(&encryption_admin::status_of(
        &transformer,
        stage,
        String::new(),
    )))
}

#[cfg(test)]
mod tests {
    #[test]
    fn status_of_a_generated_config() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = crate::apiserver::storage::encryption::default_config_path(dir.path());
        assert!(super::status(&path).expect("status").contains("Disabled"));
        crate::apiserver::storage::encryption::ensure_default_config(&path).expect("generate");
        let out = super::status(&path).expect("status");
        assert!(
            out.starts_with("Encryption Status: Enabled\nCurrent Rotation Stage: start\n"),
            "{out}"
        );
        assert!(
            out.contains(" *      AES-GCM            aesgcmkey\n"),
            "{out}"
        );
        assert!(out.contains("   Identity           identity\n"), "{out}");
    }
}
