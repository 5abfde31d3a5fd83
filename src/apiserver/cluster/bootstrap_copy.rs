//! The cluster's bootstrap data (its CA certificates and keys, the service-account key,
//! the peer CA: [`crate::pki::bootstrap::BootstrapData`]) kept in the datastore itself,
//! encrypted with a key derived from the server token (PBKDF2 + AES-256-GCM, see
//! `pki::bootstrap`) under `/bootstrap/<hash of the token>`, as k3s keeps it. A snapshot
//! therefore carries its CAs: `--cluster-reset --cluster-reset-restore-path` on a fresh
//! machine with the same token puts them back before the server issues its certificates,
//! so service-account tokens, kubeconfigs and agents stay valid.
//!
//! Written once by the first server that finds the key missing (a later server, or a
//! restart, only sees that it is there); the key lives outside `/registry/`, so no API lists it.
//! Owns that one key; reads the TLS directory, writes it only on a restore.

use std::path::Path;

use crate::pki::PkiError;
use crate::pki::bootstrap::{self, BootstrapData};
use crate::store::{Store, StoreError};

/// What [`restore_files`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Restored {
    /// The files on disk were replaced by the datastore's copy.
    Replaced,
    /// The files on disk are the datastore's copy already.
    Unchanged,
    /// The datastore holds no copy for this token (an older snapshot, or another token).
    NoCopy,
}

#[derive(Debug, thiserror::Error)]
pub enum BootstrapCopyError {
    #[error("the datastore: {0}")]
    Store(#[from] StoreError),
    #[error("the bootstrap data: {0}")]
    Pki(#[from] PkiError),
    #[error("the datastore's bootstrap data is not valid UTF-8")]
    NotText,
}

/// Stores the bootstrap data of `tls_dir` under the token's key unless a copy is there
/// (a later start only looks the key up: no key derivation on the start-up path).
pub async fn ensure(store: &Store, secret: &str, tls_dir: &Path) -> Result<(), BootstrapCopyError> {
    let key = bootstrap::storage_key(secret);
    if store.get(key.as_bytes()).await?.is_some() {
        return Ok(());
    }
    let sealed = seal(secret, &BootstrapData::collect(tls_dir)?).await?;
    match store.create(key.as_bytes(), sealed.into_bytes()).await {
        Ok(_) => {
            tracing::info!(key = %key, "stored the cluster's bootstrap data in the datastore (encrypted with the token)");
            Ok(())
        }
        // Another server stored it meanwhile.
        Err(StoreError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Writes the datastore's copy into `tls_dir` (after a restore), when it has one for
/// this token. A copy under this token's key that does not decrypt is an error: the
/// token is not the cluster's.
pub async fn restore_files(
    store: &Store,
    secret: &str,
    tls_dir: &Path,
) -> Result<Restored, BootstrapCopyError> {
    let key = bootstrap::storage_key(secret);
    let Some(stored) = store.get(key.as_bytes()).await? else {
        return Ok(Restored::NoCopy);
    };
    let stored = String::from_utf8(stored.value).map_err(|_| BootstrapCopyError::NotText)?;
    let secret = secret.to_string();
    let plain = tokio::task::spawn_blocking(move || bootstrap::decrypt(&secret, &stored))
        .await
        .map_err(|e| PkiError::InvalidBootstrap(format!("decrypting: {e}")))??;
    let copy = BootstrapData::from_json(&plain)?;
    if BootstrapData::collect(tls_dir).is_ok_and(|local| same_files(&copy, &local)) {
        return Ok(Restored::Unchanged);
    }
    copy.write(tls_dir)?;
    Ok(Restored::Replaced)
}

/// `k3rs token rotate`: stores the bootstrap data (this server's files, which are the
/// cluster's) under the new token's key, then deletes the old token's copy, as k3s
/// re-encrypts its bootstrap data with the new token. Snapshots taken before keep the old
/// copy, so restoring one needs the old token (as in k3s).
pub async fn rotate(
    store: &Store,
    old: &str,
    new: &str,
    tls_dir: &Path,
) -> Result<(), BootstrapCopyError> {
    let sealed = seal(new, &BootstrapData::collect(tls_dir)?).await?;
    let new_key = bootstrap::storage_key(new);
    match store.get(new_key.as_bytes()).await? {
        Some(kv) => {
            store
                .update(new_key.as_bytes(), sealed.into_bytes(), kv.mod_revision)
                .await?;
        }
        None => {
            store
                .create(new_key.as_bytes(), sealed.into_bytes())
                .await?;
        }
    }
    let old_key = bootstrap::storage_key(old);
    if old_key != new_key {
        match store.delete(old_key.as_bytes(), None).await {
            Ok(_) | Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    tracing::info!(key = %new_key, "re-encrypted the cluster's bootstrap data with the new token");
    Ok(())
}

async fn seal(secret: &str, data: &BootstrapData) -> Result<String, BootstrapCopyError> {
    let (secret, json) = (secret.to_string(), data.to_json());
    Ok(
        tokio::task::spawn_blocking(move || bootstrap::encrypt(&secret, &json))
            .await
            .map_err(|e| PkiError::InvalidBootstrap(format!("encrypting: {e}")))??,
    )
}

/// Whether both hold the same files with the same contents (timestamps aside).
fn same_files(a: &BootstrapData, b: &BootstrapData) -> bool {
    a.files.len() == b.files.len()
        && a.files.iter().all(|(name, entry)| {
            b.files
                .get(name)
                .is_some_and(|other| other.content == entry.content)
        })
}
