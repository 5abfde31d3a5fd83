//! The server's certificate renewal while running: every hour (k3s renews only at start)
//! the TLS directory is checked again with the rules of the start ([`ServerPki::ensure`]:
//! leaves within 90 days of expiry, or no longer matching their names, are re-issued from
//! the same CAs and written atomically), then what changed is put to use: the API server's
//! serving certificate is swapped for the next handshakes and the admin kubeconfig is
//! rewritten with the renewed admin certificate. The embedded agent picks up its renewed
//! `client-kubelet` from disk itself (see `agent::renewal`).
//!
//! Owns the schedule only; issuing and writing is `pki`'s job. `K3RS_CERT_CHECK_INTERVAL`
//! (seconds) shortens the hour for tests.

use std::path::PathBuf;
use std::time::Duration;

use crate::pki::live::LiveCert;
use crate::pki::{self, ServerPki, ServerPkiOptions};

/// How often certificates are checked by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(3600);
/// Test hook: the check interval in seconds.
pub const INTERVAL_ENV: &str = "K3RS_CERT_CHECK_INTERVAL";

/// The check interval: [`DEFAULT_INTERVAL`] or [`INTERVAL_ENV`].
pub fn interval() -> Duration {
    let Some(value) = std::env::var_os(INTERVAL_ENV) else {
        return DEFAULT_INTERVAL;
    };
    match value.to_str().and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(secs) if secs > 0 => Duration::from_secs(secs),
        _ => {
            tracing::warn!(value = ?value, "{INTERVAL_ENV} is not a number of seconds; ignored");
            DEFAULT_INTERVAL
        }
    }
}

/// The admin kubeconfig to keep current.
#[derive(Debug, Clone)]
pub struct Kubeconfig {
    pub path: PathBuf,
    pub mode: u32,
    pub url: String,
}

/// What the renewal task works on.
#[derive(Debug)]
pub struct ServerRenewal {
    pub tls_dir: PathBuf,
    pub options: ServerPkiOptions,
    /// The API server's serving certificate.
    pub serving: LiveCert,
    pub kubeconfig: Kubeconfig,
    /// The admin certificate the kubeconfig holds now.
    pub admin: pki::IssuedCert,
}

impl ServerRenewal {
    /// One check: renews what is due and puts it to use.
    pub fn check(&mut self) -> anyhow::Result<()> {
        let pki = ServerPki::ensure(&self.tls_dir, &self.options)?;
        match self.serving.update(pki.serving()) {
            Ok(true) => tracing::info!("serving a renewed API server certificate"),
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, "the renewed serving certificate is unusable; keeping the old one")
            }
        }
        if pki.admin() != &self.admin {
            pki::write_kubeconfig(
                &self.kubeconfig.path,
                self.kubeconfig.mode,
                &self.kubeconfig.url,
                pki.server_ca().cert_pem(),
                pki.admin(),
            )?;
            tracing::info!(path = %self.kubeconfig.path.display(), "rewrote the admin kubeconfig with the renewed certificate");
            self.admin = pki.admin().clone();
        }
        Ok(())
    }

    /// Checks every [`interval`] until the task is dropped.
    pub async fn run(mut self) {
        let every = interval();
        loop {
            tokio::time::sleep(every).await;
            let result = tokio::task::spawn_blocking(move || {
                let result = self.check();
                (self, result)
            })
            .await;
            match result {
                Ok((renewal, result)) => {
                    self = renewal;
                    if let Err(e) = result {
                        tracing::error!(error = %format!("{e:#}"), "certificate renewal failed; retrying at the next check");
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "certificate renewal task failed; renewal stops");
                    return;
                }
            }
        }
    }
}
