//! ServiceAccount controller: every namespace that is not being deleted has a
//! `default` ServiceAccount; it is created when a namespace appears and re-created
//! when someone deletes it. Talks only to the API.

use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use super::RETRY;
use super::workload::ReconcileError;

/// The account every namespace gets.
pub const DEFAULT_ACCOUNT: &str = "default";

/// Runs the ServiceAccount controller until the process ends.
pub async fn run(client: kube::Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let accounts: Api<ServiceAccount> = Api::all(client.clone());
    Controller::new(namespaces, watcher::Config::default())
        .watches(
            accounts,
            watcher::Config::default(),
            |sa: ServiceAccount| {
                let namespace = sa.metadata.namespace.clone()?;
                (sa.metadata.name.as_deref() == Some(DEFAULT_ACCOUNT))
                    .then(|| ObjectRef::<Namespace>::new(&namespace))
            },
        )
        .run(
            |ns, client| super::workload::guarded("serviceaccount", reconcile(ns, client)),
            error_policy,
            Arc::new(client),
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "serviceaccount reconcile failed");
            }
        })
        .await;
}

fn error_policy(ns: Arc<Namespace>, error: &ReconcileError, _: Arc<kube::Client>) -> Action {
    tracing::warn!(namespace = %ns.name_any(), error = %error, "ensuring the default serviceaccount failed; retrying");
    Action::requeue(RETRY)
}

async fn reconcile(
    ns: Arc<Namespace>,
    client: Arc<kube::Client>,
) -> Result<Action, ReconcileError> {
    let terminating = ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating");
    let Some(name) = ns.metadata.name.clone() else {
        return Ok(Action::await_change());
    };
    if terminating {
        return Ok(Action::await_change());
    }
    let accounts: Api<ServiceAccount> = Api::namespaced((*client).clone(), &name);
    if accounts
        .get_opt(DEFAULT_ACCOUNT)
        .await
        .map_err(anyhow::Error::from)?
        .is_some()
    {
        return Ok(Action::await_change());
    }
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(DEFAULT_ACCOUNT.into()),
            namespace: Some(name.clone()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    match accounts.create(&PostParams::default(), &account).await {
        Ok(_) => tracing::info!(namespace = %name, "created the default serviceaccount"),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        // The namespace began terminating meanwhile: nothing to do.
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("terminat") => {}
        Err(e) => return Err(anyhow::Error::from(e).into()),
    }
    Ok(Action::await_change())
}
