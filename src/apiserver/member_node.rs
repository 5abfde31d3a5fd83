//! The datastore member on this server's Node, as k3s's etcd node controller shows it:
//! label `node-role.kubernetes.io/etcd=true` and annotations naming the member
//! (`etcd.k3s.cattle.io/node-name`, `etcd.k3s.cattle.io/node-address`, as k3s writes
//! them, plus `etcd.k3rs.io/member-id` and `etcd.k3rs.io/peer-url`). Only a server whose
//! store is a raft group (`--cluster-init`, joined, or clustered on disk) is a member.
//!
//! Checked every few seconds: the Node appears once the embedded agent registers it,
//! and an edit or a re-registration is repaired. Owns only those keys of its own Node,
//! written through the registry's update path (validation, watch, managedFields); a
//! missing Node (no agent, `--disable-agent`) is not an error.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::AppState;
use super::handlers::{self, Prepared};
use super::request::{Query, Target};

const RECONCILE_PERIOD: Duration = Duration::from_secs(5);
pub const ETCD_ROLE_LABEL: &str = "node-role.kubernetes.io/etcd";

/// The labels and annotations this server's Node should carry for member `id`.
pub fn desired(name: &str, address: &str, id: u64, peer_url: &str) -> (Value, Value) {
    (
        json!({ ETCD_ROLE_LABEL: "true" }),
        json!({
            "etcd.k3s.cattle.io/node-name": name,
            "etcd.k3s.cattle.io/node-address": address,
            "etcd.k3rs.io/member-id": format!("{id:x}"),
            "etcd.k3rs.io/peer-url": peer_url,
        }),
    )
}

/// `node` with `labels` and `annotations` merged in, or None when it has them already.
fn reconciled(node: &Value, labels: &Value, annotations: &Value) -> Option<Value> {
    let mut next = node.clone();
    let mut changed = false;
    for (field, wanted) in [("labels", labels), ("annotations", annotations)] {
        let Some(wanted) = wanted.as_object() else {
            continue;
        };
        for (key, value) in wanted {
            if node.pointer(&format!("/metadata/{field}/{}", escape(key))) != Some(value) {
                if !next["metadata"][field].is_object() {
                    next["metadata"][field] = json!({});
                }
                next["metadata"][field][key] = value.clone();
                changed = true;
            }
        }
    }
    changed.then_some(next)
}

/// A key as one JSON-pointer token.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Adds the member's label and annotations to this server's Node if it exists.
pub async fn reconcile(state: &AppState) -> anyhow::Result<()> {
    let Some(cluster) = &state.config.cluster else {
        return Ok(());
    };
    if !(cluster.init || state.store.is_clustered()) {
        return Ok(());
    }
    let info = state
        .registry
        .find("", "v1", "nodes")
        .ok_or_else(|| anyhow::anyhow!("no nodes resource in the registry"))?;
    let target = Target {
        info,
        namespace: None,
        name: Some(cluster.name.clone()),
        subresource: None,
        legacy_watch: false,
    };
    let address = state.config.advertise.ip().to_string();
    let (labels, annotations) = desired(
        &cluster.name,
        &address,
        state.store.member_id(),
        &cluster.peer_url,
    );
    let updated = handlers::update_with(state, &target, &Query::default(), false, |node| {
        Ok(match reconciled(node, &labels, &annotations) {
            Some(next) => Prepared::Write(next, Vec::new()),
            None => Prepared::Unchanged(bytes::Bytes::new()),
        })
    })
    .await;
    match updated {
        Ok(_) => Ok(()),
        Err(e) if e.code == http::StatusCode::NOT_FOUND => Ok(()),
        Err(e) => Err(anyhow::anyhow!("updating nodes/{}: {e}", cluster.name)),
    }
}

/// Reconciles every [`RECONCILE_PERIOD`] until `state` is dropped.
pub fn spawn(state: &Arc<AppState>) {
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        loop {
            let Some(state) = weak.upgrade() else { return };
            if let Err(e) = reconcile(&state).await {
                tracing::warn!(error = %format!("{e:#}"), "could not mark this server's Node as a datastore member");
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
    fn missing_keys_are_added_and_others_kept() {
        let (labels, annotations) = desired("s1", "10.0.0.1", 0x1f, "https://10.0.0.1:2380");
        let node = json!({"metadata": {"name": "s1", "labels": {"kubernetes.io/hostname": "s1"}}});
        let next = reconciled(&node, &labels, &annotations).expect("changed");
        assert_eq!(next["metadata"]["labels"][ETCD_ROLE_LABEL], "true");
        assert_eq!(next["metadata"]["labels"]["kubernetes.io/hostname"], "s1");
        assert_eq!(
            next["metadata"]["annotations"]["etcd.k3rs.io/member-id"],
            "1f"
        );
        assert_eq!(
            next["metadata"]["annotations"]["etcd.k3s.cattle.io/node-address"],
            "10.0.0.1"
        );
        assert!(
            reconciled(&next, &labels, &annotations).is_none(),
            "nothing to do once present"
        );
        let mut edited = next.clone();
        edited["metadata"]["annotations"]["etcd.k3rs.io/peer-url"] = json!("https://x:1");
        assert!(reconciled(&edited, &labels, &annotations).is_some());
    }
}
