//! Applying and deleting the objects of a manifest through kube's dynamic API: discovery maps
//! `apiVersion`/`kind` to a resource and its scope, each object is written with server-side
//! apply (`fieldManager=k3rs-deploy`, `force=true`). Namespaced objects without a namespace go
//! to `default` and cluster-scoped ones lose theirs, as k3s's apply (wrangler) does. API only.

use std::collections::HashMap;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use serde_json::Value;
use tokio::sync::Mutex;

use super::addon::FIELD_MANAGER;
use super::manifest::{self, ObjectRef};

/// Where objects without a namespace go (wrangler's default namespace, which k3s uses).
pub const DEFAULT_NAMESPACE: &str = "default";

/// Resolves kinds and writes objects; remembers the kinds it resolved (a kind the server does
/// not serve is asked again next time, since a CRD may have been created since).
pub struct Applier {
    client: kube::Client,
    kinds: Mutex<HashMap<(String, String), (ApiResource, bool)>>,
}

/// Splits `group/version` (or the core group's `version`).
fn gvk(api_version: &str, kind: &str) -> GroupVersionKind {
    match api_version.rsplit_once('/') {
        Some((group, version)) => GroupVersionKind::gvk(group, version, kind),
        None => GroupVersionKind::gvk("", api_version, kind),
    }
}

/// The text of an API error as kubectl shows it, else the error.
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}

impl Applier {
    pub fn new(client: kube::Client) -> Applier {
        Applier {
            client,
            kinds: Mutex::default(),
        }
    }

    /// The resource serving `kind` of `api_version` and whether it is namespaced.
    async fn resolve(&self, api_version: &str, kind: &str) -> Result<(ApiResource, bool), String> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(found) = self.kinds.lock().await.get(&key) {
            return Ok(found.clone());
        }
        let (resource, capabilities) =
            kube::discovery::pinned_kind(&self.client, &gvk(api_version, kind))
                .await
                .map_err(|e| match e {
                    kube::Error::Discovery(_) => {
                        format!("no kind {kind:?} is registered for version {api_version:?}")
                    }
                    kube::Error::Api(status) if status.code == 404 => {
                        format!("no kind {kind:?} is registered for version {api_version:?}")
                    }
                    other => format!("discovering {kind} {api_version}: {other}"),
                })?;
        let found = (resource, capabilities.scope == Scope::Namespaced);
        self.kinds.lock().await.insert(key, found.clone());
        Ok(found)
    }

    fn api(&self, resource: &ApiResource, namespaced: bool, namespace: &str) -> Api<DynamicObject> {
        if namespaced {
            Api::namespaced_with(self.client.clone(), namespace, resource)
        } else {
            Api::all_with(self.client.clone(), resource)
        }
    }

    /// The reference `object` will have once applied: its namespace defaulted or cleared by
    /// the kind's scope.
    pub async fn locate(
        &self,
        object_ref: &ObjectRef,
    ) -> Result<(ObjectRef, ApiResource, bool), String> {
        let (resource, namespaced) = self
            .resolve(&object_ref.api_version, &object_ref.kind)
            .await?;
        let mut located = object_ref.clone();
        if !namespaced {
            located.namespace.clear();
        } else if located.namespace.is_empty() {
            located.namespace = DEFAULT_NAMESPACE.into();
        }
        Ok((located, resource, namespaced))
    }

    /// Server-side applies `object`, returning where it went.
    pub async fn apply(&self, object: &Value) -> Result<ObjectRef, String> {
        let (located, resource, namespaced) = self.locate(&manifest::reference(object)).await?;
        let mut body = object.clone();
        if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
            if namespaced {
                metadata.insert("namespace".into(), Value::String(located.namespace.clone()));
            } else {
                metadata.remove("namespace");
            }
        }
        self.api(&resource, namespaced, &located.namespace)
            .patch(
                &located.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(|e| format!("{located}: {}", describe(&e)))?;
        Ok(located)
    }

    /// Deletes the object `object_ref` names (background propagation, as kubectl); an object
    /// or kind that is gone already is fine.
    pub async fn delete(&self, object_ref: &ObjectRef) -> Result<(), String> {
        let (located, resource, namespaced) = match self.locate(object_ref).await {
            Ok(found) => found,
            // The kind is no longer served (its CRD is gone): nothing of it is left.
            Err(e) if e.starts_with("no kind") => return Ok(()),
            Err(e) => return Err(e),
        };
        match self
            .api(&resource, namespaced, &located.namespace)
            .delete(&located.name, &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(format!("deleting {located}: {}", describe(&e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_api_versions() {
        assert_eq!(
            gvk("v1", "ConfigMap"),
            GroupVersionKind::gvk("", "v1", "ConfigMap")
        );
        assert_eq!(
            gvk("apps/v1", "Deployment"),
            GroupVersionKind::gvk("apps", "v1", "Deployment")
        );
    }
}
