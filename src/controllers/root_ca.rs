//! Root CA publisher (kube-controller-manager's `root-ca-cert-publisher`): every namespace
//! that is not being deleted has the ConfigMap `kube-root-ca.crt` whose `ca.crt` is the
//! cluster's server CA, so in-cluster clients (the `kube-api-access-*` volume) can verify the
//! API server. Created when a namespace appears, restored when deleted or changed. Talks only
//! to the API.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use super::RETRY;
use super::workload::ReconcileError;

/// The ConfigMap every namespace gets.
pub const NAME: &str = "kube-root-ca.crt";
const KEY: &str = "ca.crt";

struct Context {
    client: kube::Client,
    ca_pem: String,
}

/// Runs the publisher until the process ends; `ca_pem` is the server CA certificate.
pub async fn run(client: kube::Client, ca_pem: String) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let config_maps: Api<ConfigMap> = Api::all(client.clone());
    Controller::new(namespaces, watcher::Config::default())
        .watches(
            config_maps,
            watcher::Config::default().fields(&format!("metadata.name={NAME}")),
            |cm: ConfigMap| {
                let namespace = cm.metadata.namespace.clone()?;
                Some(ObjectRef::<Namespace>::new(&namespace))
            },
        )
        .run(
            |ns, ctx| super::workload::guarded("root-ca", reconcile(ns, ctx)),
            error_policy,
            Arc::new(Context { client, ca_pem }),
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "root CA reconcile failed");
            }
        })
        .await;
}

fn error_policy(ns: Arc<Namespace>, error: &ReconcileError, _: Arc<Context>) -> Action {
    tracing::warn!(namespace = %ns.name_any(), error = %error, "publishing kube-root-ca.crt failed; retrying");
    Action::requeue(RETRY)
}

fn wanted(namespace: &str, ca_pem: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(KEY.to_string(), ca_pem.to_string())])),
        ..ConfigMap::default()
    }
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let terminating = ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating");
    let Some(name) = ns.metadata.name.clone() else {
        return Ok(Action::await_change());
    };
    if terminating {
        return Ok(Action::await_change());
    }
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &name);
    let result = match api.get_opt(NAME).await.map_err(anyhow::Error::from)? {
        Some(current)
            if current
                .data
                .as_ref()
                .and_then(|d| d.get(KEY))
                .map(String::as_str)
                == Some(ctx.ca_pem.as_str()) =>
        {
            return Ok(Action::await_change());
        }
        Some(current) => {
            let mut fixed = wanted(&name, &ctx.ca_pem);
            fixed.metadata.resource_version = current.metadata.resource_version.clone();
            fixed.metadata.labels = current.metadata.labels.clone();
            api.replace(NAME, &PostParams::default(), &fixed).await
        }
        None => {
            api.create(&PostParams::default(), &wanted(&name, &ctx.ca_pem))
                .await
        }
    };
    match result {
        Ok(_) => tracing::info!(namespace = %name, "published kube-root-ca.crt"),
        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(Action::requeue(RETRY)),
        // The namespace began terminating meanwhile: nothing to do.
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("terminat") => {}
        Err(e) => return Err(anyhow::Error::from(e).into()),
    }
    Ok(Action::await_change())
}
