//! Namespace controller: when a namespace is deleted (it gets a deletionTimestamp
//! and phase Terminating while its `kubernetes` finalizer holds it), delete every
//! namespaced object in it, wait until they are gone, then remove the finalizer
//! through `namespaces/<name>/finalize` so the API server removes the namespace.
//! Talks only to the API.

use std::collections::HashSet;
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::discovery::{Discovery, Scope, verbs};
use kube::runtime::watcher;
use tokio::sync::Mutex;

use super::RETRY;

/// Watches namespaces and finalizes the terminating ones.
pub async fn run(client: kube::Client) {
    let api: Api<Namespace> = Api::all(client.clone());
    let in_progress: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut events = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        let namespaces = match event {
            Ok(watcher::Event::Apply(ns)) | Ok(watcher::Event::InitApply(ns)) => vec![ns],
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "namespace watch interrupted; it resumes by itself");
                continue;
            }
        };
        for ns in namespaces {
            if ns.metadata.deletion_timestamp.is_none() {
                continue;
            }
            let Some(name) = ns.metadata.name.clone() else {
                continue;
            };
            let mut busy = in_progress.lock().await;
            if !busy.insert(name.clone()) {
                continue;
            }
            drop(busy);
            let client = client.clone();
            let in_progress = in_progress.clone();
            tokio::spawn(async move {
                loop {
                    match finalize(&client, &name).await {
                        Ok(true) => break,
                        Ok(false) => tokio::time::sleep(RETRY / 4).await,
                        Err(e) => {
                            tracing::warn!(namespace = %name, error = %e, "emptying namespace failed; retrying");
                            tokio::time::sleep(RETRY).await;
                        }
                    }
                }
                in_progress.lock().await.remove(&name);
            });
        }
    }
}

/// One pass: delete what is left; when nothing is, release the namespace.
/// Returns true when the namespace has been released (or is gone).
async fn finalize(client: &kube::Client, name: &str) -> anyhow::Result<bool> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let Some(ns) = namespaces.get_opt(name).await? else {
        return Ok(true);
    };
    let finalizers = ns
        .spec
        .as_ref()
        .and_then(|s| s.finalizers.clone())
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == "kubernetes") {
        return Ok(true);
    }
    let discovery = Discovery::new(client.clone()).run().await?;
    let mut remaining = 0usize;
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if caps.scope != Scope::Namespaced || !caps.supports_operation(verbs::LIST) {
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), name, &resource);
            let objects = api.list_metadata(&ListParams::default()).await?;
            if objects.items.is_empty() {
                continue;
            }
            remaining += objects.items.len();
            if caps.supports_operation(verbs::DELETE_COLLECTION) {
                api.delete_collection(&DeleteParams::background(), &ListParams::default())
                    .await?;
            } else if caps.supports_operation(verbs::DELETE) {
                for object in objects.items {
                    if let Some(object_name) = object.metadata.name {
                        let _ = api.delete(&object_name, &DeleteParams::background()).await;
                    }
                }
            }
        }
    }
    if remaining > 0 {
        tracing::debug!(namespace = %name, remaining, "waiting for namespace contents to go");
        return Ok(false);
    }
    let mut released = ns.clone();
    if let Some(spec) = released.spec.as_mut() {
        spec.finalizers = Some(
            finalizers
                .into_iter()
                .filter(|f| f != "kubernetes")
                .collect(),
        );
    }
    let body = serde_json::to_vec(&released)?;
    let request = http::Request::put(format!("/api/v1/namespaces/{name}/finalize"))
        .header("content-type", "application/json")
        .body(body)?;
    let _: Namespace = client.request(request).await?;
    tracing::info!(namespace = %name, "namespace emptied and released");
    Ok(true)
}
