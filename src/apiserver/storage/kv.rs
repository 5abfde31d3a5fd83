//! The API server's view of the store: [`KvStore`] is the store with the encryption
//! at rest of `encryption.rs` applied on every write and read of a value.
//!
//! Every path that turns stored bytes into an API object (handlers' direct reads, the
//! watch cache's fill and follow, the store watches of uncached kinds) goes through it,
//! so the rest of the API server sees plaintext JSON. Other store methods pass through
//! `Deref`. A value that cannot be decrypted fails a direct read with
//! [`StoreError::Transform`]; in a watch it is passed on as stored (it starts with
//! `k8s:enc:`, which no JSON object does) and logged, and the handlers answer an object
//! with those bytes with kube's internal error ([`unreadable`]).
//!
//! The configuration can be swapped while the server runs ([`KvStore::replace_transformer`],
//! for `k3rs secrets-encrypt`); each read or write uses the one in force when it starts.

use std::ops::Deref;
use std::sync::{Arc, RwLock};

use super::encryption::{ENVELOPE_PREFIX, Transformer};
use crate::store::{Event, KeyValue, RangeRequest, RangeResult, Store, StoreError};

type Result<T> = std::result::Result<T, StoreError>;

/// The store with encryption at rest.
#[derive(Clone)]
pub struct KvStore {
    store: Store,
    /// `None`: encryption at rest was not configured at start (it cannot be enabled
    /// later, as in k3s).
    transformer: Option<Arc<RwLock<Arc<Transformer>>>>,
}

impl Deref for KvStore {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

/// Whether cached or streamed object bytes are an undecryptable stored value.
pub fn unreadable(bytes: &[u8]) -> bool {
    bytes.starts_with(ENVELOPE_PREFIX)
}

/// Kube's wording for an object whose stored value could not be read.
pub fn unreadable_message(key: &str) -> String {
    format!(
        "unable to transform key {key:?}: the stored value cannot be decrypted with the configured keys"
    )
}

impl KvStore {
    pub fn new(store: Store, transformer: Option<Arc<Transformer>>) -> KvStore {
        KvStore {
            store,
            transformer: transformer.map(|t| Arc::new(RwLock::new(t))),
        }
    }

    /// The encryption configuration in force, if any.
    pub fn transformer(&self) -> Option<Arc<Transformer>> {
        let lock = self.transformer.as_ref()?;
        let current = match lock.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        Some(current)
    }

    /// Puts `next` in force for every later read and write. Returns `false` (and changes
    /// nothing) when the server started without encryption at rest.
    pub fn replace_transformer(&self, next: Transformer) -> bool {
        let Some(lock) = &self.transformer else {
            return false;
        };
        let mut guard = match lock.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        *guard = Arc::new(next);
        true
    }

    fn encrypt(&self, key: &[u8], value: Vec<u8>) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
        match &self.transformer() {
            Some(t) if t.covers(key) => {
                let plain = value.clone();
                let sealed = t
                    .encrypt(key, value)
                    .map_err(|e| StoreError::Transform(e.to_string()))?;
                Ok((sealed, Some(plain)))
            }
            _ => Ok((value, None)),
        }
    }

    fn decrypt(&self, kv: &mut KeyValue) -> Result<()> {
        let Some(t) = self.transformer() else {
            return Ok(());
        };
        if !t.covers(&kv.key) && !kv.value.starts_with(ENVELOPE_PREFIX) {
            return Ok(());
        }
        kv.value = t.decrypt(&kv.key, &kv.value).map_err(|e| {
            StoreError::Transform(format!(
                "unable to transform key {:?}: {e}",
                String::from_utf8_lossy(&kv.key)
            ))
        })?;
        Ok(())
    }

    /// Decrypts in place; on failure logs and leaves the stored bytes.
    fn decrypt_lenient(&self, kv: &mut KeyValue) {
        if let Err(e) = self.decrypt(kv) {
            tracing::error!(error = %e, "cannot decrypt a stored object");
        }
    }

    pub async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let mut found = self.store.get(key).await?;
        if let Some(kv) = found.as_mut() {
            self.decrypt(kv)?;
        }
        Ok(found)
    }

    pub async fn range(&self, request: RangeRequest) -> Result<RangeResult> {
        let mut result = self.store.range(request).await?;
        for kv in &mut result.kvs {
            self.decrypt(kv)?;
        }
        Ok(result)
    }

    /// Like `range`, but keeps (and logs) values that cannot be decrypted: for the
    /// watch cache, which must hold every key.
    pub async fn range_lenient(&self, request: RangeRequest) -> Result<RangeResult> {
        let mut result = self.store.range(request).await?;
        for kv in &mut result.kvs {
            self.decrypt_lenient(kv);
        }
        Ok(result)
    }

    pub async fn create(&self, key: &[u8], value: Vec<u8>) -> Result<KeyValue> {
        let (value, plain) = self.encrypt(key, value)?;
        let mut kv = self.store.create(key, value).await?;
        if let Some(plain) = plain {
            kv.value = plain;
        }
        Ok(kv)
    }

    pub async fn update(
        &self,
        key: &[u8],
        value: Vec<u8>,
        expected_mod_revision: i64,
    ) -> Result<KeyValue> {
        let (value, plain) = self.encrypt(key, value)?;
        let result = self.store.update(key, value, expected_mod_revision).await;
        let mut kv = match result {
            Err(StoreError::Conflict {
                key,
                expected,
                mut current,
            }) => {
                self.decrypt_lenient(current.as_mut());
                return Err(StoreError::Conflict {
                    key,
                    expected,
                    current,
                });
            }
            other => other?,
        };
        if let Some(plain) = plain {
            kv.value = plain;
        }
        Ok(kv)
    }

    pub async fn delete(
        &self,
        key: &[u8],
        expected_mod_revision: Option<i64>,
    ) -> Result<(KeyValue, i64)> {
        let (mut prev, revision) = self.store.delete(key, expected_mod_revision).await?;
        self.decrypt_lenient(&mut prev);
        Ok((prev, revision))
    }

    pub async fn watch(&self, prefix: &[u8], from_revision: i64) -> Result<WatchStream> {
        Ok(WatchStream {
            inner: self.store.watch(prefix, from_revision).await?,
            store: self.clone(),
        })
    }

    fn decrypt_event(&self, event: Arc<Event>) -> Arc<Event> {
        let Some(t) = self.transformer() else {
            return event;
        };
        let needs = |kv: &KeyValue| t.covers(&kv.key) || kv.value.starts_with(ENVELOPE_PREFIX);
        let touched = match event.as_ref() {
            Event::Put { kv, prev_kv } => needs(kv) || prev_kv.as_ref().is_some_and(needs),
            Event::Delete { prev_kv, .. } => needs(prev_kv),
        };
        if !touched {
            return event;
        }
        let mut event = Arc::unwrap_or_clone(event);
        match &mut event {
            Event::Put { kv, prev_kv } => {
                self.decrypt_lenient(kv);
                if let Some(prev) = prev_kv {
                    self.decrypt_lenient(prev);
                }
            }
            Event::Delete { prev_kv, .. } => self.decrypt_lenient(prev_kv),
        }
        Arc::new(event)
    }
}

/// A store watch whose events carry plaintext values.
pub struct WatchStream {
    inner: crate::store::WatchStream,
    store: KvStore,
}

impl WatchStream {
    pub async fn next(&mut self) -> Option<Result<Arc<Event>>> {
        let next = self.inner.next().await?;
        Some(next.map(|e| self.store.decrypt_event(e)))
    }

    pub fn try_next(&mut self) -> Option<Result<Arc<Event>>> {
        let next = self.inner.try_next()?;
        Some(next.map(|e| self.store.decrypt_event(e)))
    }
}
