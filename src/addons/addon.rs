//! The `addons.k3rs.io` CustomResourceDefinition (k3s's `addons.k3s.cattle.io` under k3rs's
//! group) and reading and writing the `kube-system` Addon objects that track manifest files:
//! `spec.source` (the file), `spec.checksum` (its SHA-256 when last applied) and
//! `status.appliedObjects` (what it applied, so disabling it can delete them). API only.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::manifest::ObjectRef;

pub const GROUP: &str = "k3rs.io";
pub const VERSION: &str = "v1";
pub const KIND: &str = "Addon";
pub const PLURAL: &str = "addons";
/// Where Addons live, as in k3s.
pub const NAMESPACE: &str = "kube-system";
/// The field manager of everything this module writes (server-side apply).
pub const FIELD_MANAGER: &str = "k3rs-deploy";

/// The served resource of Addons.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

fn api(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NAMESPACE, &resource())
}

/// The CRD, with a structural schema and k3s's printer columns (SOURCE, CHECKSUM).
pub fn definition() -> Value {
    let string = json!({"type": "string"});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": format!("{KIND}List"),
                "plural": PLURAL,
                "singular": "addon",
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "additionalPrinterColumns": [
                    {"name": "Source", "type": "string", "jsonPath": ".spec.source"},
                    {"name": "Checksum", "type": "string", "jsonPath": ".spec.checksum"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A manifest file of <data-dir>/server/manifests, applied by k3rs.",
                    "properties": {
                        "apiVersion": string,
                        "kind": string,
                        "metadata": {"type": "object"},
                        "spec": {
                            "type": "object",
                            "properties": {
                                "source": {"type": "string", "description": "The manifest file."},
                                "checksum": {"type": "string", "description": "SHA-256 of the file as last applied."},
                            },
                        },
                        "status": {
                            "type": "object",
                            "properties": {
                                "appliedObjects": {
                                    "type": "array",
                                    "description": "The objects the file applied.",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "apiVersion": string,
                                            "kind": string,
                                            "namespace": string,
                                            "name": string,
                                        },
                                    },
                                },
                            },
                        },
                    },
                }},
            }],
        },
    })
}

/// Creates or updates the CRD, then waits until discovery serves Addons (retrying with a
/// growing pause: the API may still be starting).
pub async fn ensure_definition(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = format!("{PLURAL}.{GROUP}");
    let mut pause = Duration::from_millis(100);
    loop {
        let applied = crds
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(definition()),
            )
            .await;
        match applied {
            Ok(_) => {
                let gvk = GroupVersionKind::gvk(GROUP, VERSION, KIND);
                match kube::discovery::pinned_kind(client, &gvk).await {
                    Ok(_) => return,
                    Err(e) => tracing::debug!(error = %e, "Addons not served yet"),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, crd = %name, "could not create the Addon CRD; retrying")
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(10));
    }
}

/// One Addon as read from the API.
#[derive(Clone, Debug, Default)]
pub struct Addon {
    pub name: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub checksum: String,
    pub applied: Vec<ObjectRef>,
}

impl Addon {
    fn from_object(object: &DynamicObject) -> Addon {
        let applied = object
            .data
            .pointer("/status/appliedObjects")
            .and_then(Value::as_array)
            .map(|entries| entries.iter().filter_map(ObjectRef::from_json).collect())
            .unwrap_or_default();
        Addon {
            name: object.metadata.name.clone().unwrap_or_default(),
            uid: object.metadata.uid.clone(),
            resource_version: object.metadata.resource_version.clone(),
            checksum: object
                .data
                .pointer("/spec/checksum")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            applied,
        }
    }

    /// The Addon as the subject of an Event.
    pub fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(format!("{GROUP}/{VERSION}")),
            kind: Some(KIND.into()),
            namespace: Some(NAMESPACE.into()),
            name: Some(self.name.clone()),
            uid: self.uid.clone(),
            resource_version: self.resource_version.clone(),
            ..Default::default()
        }
    }
}

/// The Addon `name`, if it exists.
pub async fn get(client: &kube::Client, name: &str) -> kube::Result<Option<Addon>> {
    Ok(api(client)
        .get_opt(name)
        .await?
        .map(|o| Addon::from_object(&o)))
}

/// The Addon `name`, created (with `spec.source` and no checksum) when missing, so Events
/// about its file have a subject before anything is applied (as k3s).
pub async fn get_or_create(client: &kube::Client, name: &str, source: &str) -> kube::Result<Addon> {
    if let Some(addon) = get(client, name).await? {
        return Ok(addon);
    }
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"source": source, "checksum": ""},
    }))
    .map_err(kube::Error::SerdeError)?;
    match api(client).create(&PostParams::default(), &object).await {
        Ok(created) => Ok(Addon::from_object(&created)),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            get(client, name).await?.ok_or(kube::Error::Api(e))
        }
        Err(e) => Err(e),
    }
}

/// Records a successful apply: the file, its checksum and the objects it applied.
pub async fn record_applied(
    client: &kube::Client,
    name: &str,
    source: &str,
    checksum: &str,
    applied: &[ObjectRef],
) -> kube::Result<()> {
    let patch = json!({
        "spec": {"source": source, "checksum": checksum},
        "status": {"appliedObjects": applied.iter().map(ObjectRef::to_json).collect::<Vec<_>>()},
    });
    api(client)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(drop)
}

/// Deletes the Addon `name` (gone already is fine).
pub async fn delete(client: &kube::Client, name: &str) -> kube::Result<()> {
    match api(client).delete(name, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definition_names_the_resource() {
        let crd = definition();
        assert_eq!(crd["metadata"]["name"], "addons.k3rs.io");
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert_eq!(
            schema["properties"]["spec"]["properties"]["checksum"]["type"],
            "string"
        );
        assert_eq!(
            schema["properties"]["status"]["properties"]["appliedObjects"]["type"],
            "array"
        );
        assert_eq!(resource().api_version, "k3rs.io/v1");
        assert_eq!(resource().plural, "addons");
    }

    #[test]
    fn reads_status() {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "k3rs.io/v1", "kind": "Addon",
            "metadata": {"name": "x", "namespace": "kube-system", "uid": "u"},
            "spec": {"source": "/m/x.yaml", "checksum": "abc"},
            "status": {"appliedObjects": [
                {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "c"},
                {"kind": "broken"}
            ]}
        }))
        .expect("object");
        let addon = Addon::from_object(&object);
        assert_eq!(addon.checksum, "abc");
        assert_eq!(addon.applied.len(), 1);
        assert_eq!(addon.reference().uid.as_deref(), Some("u"));
    }
}
