//! The `kubernetes` Service's endpoints, as kube-apiserver's master endpoint
//! reconciler writes them: `default/kubernetes` Endpoints (label
//! `endpointslice.kubernetes.io/skip-mirror: "true"`, one subset with this server's
//! advertise address and port, port name `https`) and the EndpointSlice
//! `default/kubernetes` (label `kubernetes.io/service-name: kubernetes`, no
//! managed-by label, so the EndpointSlice controller leaves it alone; endpoints
//! `ready: true`). Written at start and checked every 10 s, so an edit or deletion is
//! repaired.
//!
//! Owns only those two objects, written through the registry's own create/update
//! paths (validation, watch, managedFields). With one server the list is this
//! server; several servers will need a lease per server (kube's lease reconciler).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::AppState;
use super::handlers::{self, Prepared};
use super::request::{Query, Target};

/// kube-apiserver's `--endpoint-reconciler` interval.
const RECONCILE_PERIOD: Duration = Duration::from_secs(10);

/// The Endpoints object listing `advertise`.
pub fn desired_endpoints(advertise: SocketAddr) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{
            "addresses": [{"ip": advertise.ip().to_string()}],
            "ports": [{"name": "https", "port": advertise.port(), "protocol": "TCP"}],
        }],
    })
}

/// The EndpointSlice listing `advertise`.
pub fn desired_slice(advertise: SocketAddr) -> Value {
    let address_type = if advertise.is_ipv4() { "IPv4" } else { "IPv6" };
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": address_type,
        "endpoints": [{"addresses": [advertise.ip().to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": advertise.port(), "protocol": "TCP"}],
    })
}

/// The fields the reconciler owns: labels plus the body (`subsets`, or the slice's
/// address type, endpoints and ports).
const OWNED_FIELDS: [&str; 4] = ["subsets", "addressType", "endpoints", "ports"];

/// `current` with the owned fields of `desired`, or None when it already has them.
fn reconciled(current: &Value, desired: &Value) -> Option<Value> {
    let mut next = current.clone();
    let mut changed = false;
    for field in OWNED_FIELDS {
        if let Some(want) = desired.get(field)
            && current.get(field) != Some(want)
        {
            next[field] = want.clone();
            changed = true;
        }
    }
    let want_labels = desired
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or(json!({}));
    if current.pointer("/metadata/labels") != Some(&want_labels) {
        next["metadata"]["labels"] = want_labels;
        changed = true;
    }
    changed.then_some(next)
}

async fn ensure(state: &AppState, group: &str, plural: &str, desired: Value) -> anyhow::Result<()> {
    let info = state
        .registry
        .find(group, "v1", plural)
        .ok_or_else(|| anyhow::anyhow!("no {plural} resource in the registry"))?;
    let target = Target {
        info,
        namespace: Some("default".into()),
        name: Some("kubernetes".into()),
        subresource: None,
        legacy_watch: false,
    };
    let updated = handlers::update_with(state, &target, &Query::default(), false, |current| {
        Ok(match reconciled(current, &desired) {
            Some(next) => Prepared::Write(next, Vec::new()),
            None => Prepared::Unchanged(bytes::Bytes::new()),
        })
    })
    .await;
    match updated {
        Ok(_) => Ok(()),
        Err(e) if e.code == http::StatusCode::NOT_FOUND => {
            let create_target = Target {
                name: None,
                ..target
            };
            match handlers::create_object(
                state,
                &create_target,
                &Query::default(),
                desired,
                Vec::new(),
                Some("k3rs"),
            )
            .await
            {
                Ok(_) => Ok(()),
                // Created meanwhile (another round): the next round compares it.
                Err(e) if e.code == http::StatusCode::CONFLICT => Ok(()),
                Err(e) => Err(anyhow::anyhow!("creating {plural}/kubernetes: {e}")),
            }
        }
        Err(e) => Err(anyhow::anyhow!("updating {plural}/kubernetes: {e}")),
    }
}

/// Writes both objects if they differ from what this server advertises.
pub async fn reconcile(state: &AppState) -> anyhow::Result<()> {
    let advertise = state.config.advertise;
    ensure(state, "", "endpoints", desired_endpoints(advertise)).await?;
    ensure(
        state,
        "discovery.k8s.io",
        "endpointslices",
        desired_slice(advertise),
    )
    .await
}

/// Reconciles now and then every [`RECONCILE_PERIOD`] until `state` is dropped.
pub fn spawn(state: &Arc<AppState>) {
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        loop {
            let Some(state) = weak.upgrade() else { return };
            if let Err(e) = reconcile(&state).await {
                tracing::warn!(error = %format!("{e:#}"), "could not reconcile the kubernetes Service's endpoints");
            }
            drop(state);
            tokio::time::sleep(RECONCILE_PERIOD).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn desired_objects_list_the_advertise_address() {
        let addr: SocketAddr = "10.0.0.5:6443".parse().expect("addr");
        let ep = desired_endpoints(addr);
        assert_eq!(ep["subsets"][0]["addresses"][0]["ip"], "10.0.0.5");
        assert_eq!(
            ep["subsets"][0]["ports"][0],
            json!({"name": "https", "port": 6443, "protocol": "TCP"})
        );
        let slice = desired_slice(addr);
        assert_eq!(slice["addressType"], "IPv4");
        assert_eq!(
            slice["metadata"]["labels"],
            json!({"kubernetes.io/service-name": "kubernetes"})
        );
        let v6 = desired_slice("[fd00::5]:6443".parse().expect("addr"));
        assert_eq!(v6["addressType"], "IPv6");
    }

    #[test]
    fn only_differences_are_written() {
        let addr: SocketAddr = "10.0.0.5:6443".parse().expect("addr");
        let desired = desired_endpoints(addr);
        let mut current = desired.clone();
        current["metadata"]["resourceVersion"] = json!("7");
        assert!(reconciled(&current, &desired).is_none());
        current["subsets"][0]["addresses"][0]["ip"] = json!("10.9.9.9");
        current["metadata"]["labels"]["extra"] = json!("x");
        let fixed = reconciled(&current, &desired).expect("changed");
        assert_eq!(fixed["subsets"], desired["subsets"]);
        assert_eq!(fixed["metadata"]["labels"], desired["metadata"]["labels"]);
        assert_eq!(
            fixed["metadata"]["resourceVersion"], "7",
            "other metadata is kept"
        );
    }
}
