//! `k3rs secrets-encrypt status`: k3s's report of encryption at rest, read from this
//! server's `<data-dir>/server/cred/encryption-config.json` (offline: unlike k3s it does
//! not ask the servers, so the hash is this server's only). Rotation and re-encryption
//! are not implemented (docs/operations.md says how to do them by hand).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::apiserver::encryption;

/// `k3rs secrets-encrypt`.
#[derive(Debug, Args)]
pub struct SecretsEncryptArgs {
    #[command(subcommand)]
    pub command: SecretsEncryptCommand,
}

#[derive(Debug, Subcommand)]
pub enum SecretsEncryptCommand {
    /// Print the encryption status of this server
    Status {
        /// Folder to hold state [default: /var/lib/k3rs]
        #[arg(long, short = 'd', value_name = "DIR", env = "K3RS_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
}

/// Runs the subcommand; the report goes to stdout.
pub fn run(args: SecretsEncryptArgs) -> anyhow::Result<()> {
    let SecretsEncryptCommand::Status { data_dir } = args.command;
    let data_dir = data_dir.unwrap_or_else(|| PathBuf::from(super::config::DEFAULT_DATA_DIR));
    print!("{}", status(&encryption::default_config_path(&data_dir))?);
    Ok(())
}

fn status(path: &std::path::Path) -> anyhow::Result<String> {
    if !path.exists() {
        return Ok("Encryption Status: Disabled, no configuration file found\n".into());
    }
    let text = std::fs::read(path)?;
    let transformer = encryption::Transformer::parse(&String::from_utf8_lossy(&text))
        .map_err(anyhow::Error::msg)?;
    let mut out = String::from("Encryption Status: Enabled\nCurrent Rotation Stage: start\n");
    out.push_str(&format!(
        "Server Encryption Hashes: {}\n\nActive  Key Type  Name\n------  --------  ----\n",
        encryption::config_hash(&text)
    ));
    for rule in &transformer.config.resources {
        if !rule.resources.iter().any(|r| r == "secrets") {
            continue;
        }
        let mut first = true;
        for provider in &rule.providers {
            if let Some(keys) = &provider.aesgcm {
                for key in &keys.keys {
                    let active = if first { " *" } else { "  " };
                    out.push_str(&format!("{active}      AES-GCM   {}\n", key.name));
                    first = false;
                }
            } else {
                first = false;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn status_of_a_generated_config() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = crate::apiserver::encryption::default_config_path(dir.path());
        assert!(super::status(&path).expect("status").contains("Disabled"));
        crate::apiserver::encryption::ensure_default_config(&path).expect("generate");
        let out = super::status(&path).expect("status");
        assert!(
            out.starts_with("Encryption Status: Enabled\nCurrent Rotation Stage: start\n"),
            "{out}"
        );
        assert!(out.contains(" *      AES-GCM   aesgcmkey\n"), "{out}");
    }
}
