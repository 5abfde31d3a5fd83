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
//!
//! Members follow Nodes (k3s's etcd member controller): a member's Node also carries the
//! finalizer [`MEMBER_FINALIZER`], so `kubectl delete node <server>` leaves it terminating
//! until one server — the voter with the lowest id other than the one leaving, so exactly
//! one acts — has removed that member from the raft group; it then drops the finalizer
//! and the Node goes. A removal that would cost the group its quorum is refused by the
//! store and retried (the Node stays terminating meanwhile, as with k3s). The removed
//! server stops, and refuses to start again with its old data (see `StoreError::Removed`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::store::{Member, MemberRole, StoreError};

use crate::apiserver::AppState;
use crate::apiserver::http::handlers::{self, Prepared};
use crate::apiserver::http::request::{Query, Target};

const RECONCILE_PERIOD: Duration = Duration::from_secs(5);
/// How often deleted member Nodes are looked for.
const REMOVAL_PERIOD: Duration = Duration::from_secs(1);
pub const ETCD_ROLE_LABEL: &str = "node-role.kubernetes.io/etcd";
/// Holds a member's Node until its member has left the raft group (the name k3s's
/// managed etcd controller uses, so operators' runbooks apply).
pub const MEMBER_FINALIZER: &str = "wrangler.cattle.io/managed-etcd-controller";
const NODES_PREFIX: &str = "/registry/nodes/";

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

/// `node` with `labels`, `annotations` and the member finalizer merged in, or None when
/// it has them already or is being deleted.
fn reconciled(node: &Value, labels: &Value, annotations: &Value) -> Option<Value> {
    if is_terminating(node) {
        return None;
    }
    let mut next = node.clone();
    let mut changed = false;
    if !has_member_finalizer(node) {
        match next["metadata"]["finalizers"].as_array_mut() {
            Some(finalizers) => finalizers.push(json!(MEMBER_FINALIZER)),
            None => next["metadata"]["finalizers"] = json!([MEMBER_FINALIZER]),
        }
        changed = true;
    }
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

fn is_terminating(node: &Value) -> bool {
    node.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

fn has_member_finalizer(node: &Value) -> bool {
    node.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f.as_str() == Some(MEMBER_FINALIZER)))
}

/// What this server does about a terminating Node that carries the member finalizer.
#[derive(Debug, PartialEq, Eq)]
enum Removal {
    /// Remove member `id` from the group, then drop the finalizer.
    RemoveMember(u64),
    /// The member is gone already: drop the finalizer.
    DropFinalizer,
    /// Another server acts.
    NotMine,
}

/// Decides for the Node named `node` being deleted, seen by member `own` of `members`.
/// The member is found by name (a member's name is its node name, unique in the group);
/// the acting server is the voter with the lowest id that is not the one leaving.
fn removal_for(node: &str, members: &[Member], own: u64) -> Removal {
    let leaving = members.iter().find(|m| m.name == node).map(|m| m.id);
    let actor = members
        .iter()
        .filter(|m| m.role == MemberRole::Voter && Some(m.id) != leaving)
        .map(|m| m.id)
        .min();
    match (leaving, actor) {
        // The only voter's own Node: a group cannot remove its last voter, so the Node
        // just goes.
        (Some(id), None) if id == own => Removal::DropFinalizer,
        (_, None) => Removal::NotMine,
        (_, Some(actor)) if actor != own => Removal::NotMine,
        (Some(id), Some(_)) => Removal::RemoveMember(id),
        (None, Some(_)) => Removal::DropFinalizer,
    }
}

/// Removes the members of member Nodes being deleted, then lets the Nodes go.
pub async fn remove_members_of_deleted_nodes(state: &AppState) -> anyhow::Result<()> {
    if !state.store.is_clustered() || state.store.is_removed() {
        return Ok(());
    }
    let (nodes, _) = state.cache.list(NODES_PREFIX, None);
    for cached in nodes {
        // Cheap filter before parsing: only terminating Nodes matter.
        let bytes: &[u8] = &cached.bytes;
        if !bytes.windows(17).any(|w| w == b"deletionTimestamp") {
            continue;
        }
        let Ok(node) = serde_json::from_slice::<Value>(bytes) else {
            continue;
        };
        if !is_terminating(&node) || !has_member_finalizer(&node) {
            continue;
        }
        let Some(name) = node.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        match removal_for(name, &state.store.members(), state.store.member_id()) {
            Removal::NotMine => continue,
            Removal::RemoveMember(id) => match state.store.remove_member(id).await {
                Ok(()) | Err(StoreError::NotFound { .. }) => {
                    tracing::info!(node = name, member = %format!("{id:x}"), "removed the datastore member of a deleted Node");
                }
                Err(e) => {
                    tracing::warn!(node = name, member = %format!("{id:x}"), error = %e, "cannot remove the datastore member of a deleted Node yet");
                    continue;
                }
            },
            Removal::DropFinalizer => {}
        }
        // Its snapshot records would otherwise be listed for ever; the finalizer stays
        // (and this is retried) until they are gone.
        match super::snapshots::forget_node(&state.store, name).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(
                    node = name,
                    records = n,
                    "dropped the snapshot records of a removed server"
                )
            }
            Err(e) => {
                tracing::warn!(node = name, error = %e, "cannot drop the snapshot records of a removed server yet");
                continue;
            }
        }
        drop_finalizer(state, name).await?;
    }
    Ok(())
}

async fn drop_finalizer(state: &AppState, name: &str) -> anyhow::Result<()> {
    let target = node_target(state, name)?;
    let updated = handlers::update_with(state, &target, &Query::default(), false, |node| {
        if !has_member_finalizer(node) {
            return Ok(Prepared::Unchanged(bytes::Bytes::new()));
        }
        let mut next = node.clone();
        if let Some(finalizers) = next["metadata"]["finalizers"].as_array_mut() {
            finalizers.retain(|f| f.as_str() != Some(MEMBER_FINALIZER));
        }
        Ok(Prepared::Write(next, Vec::new()))
    })
    .await;
    match updated {
        Ok(_) => Ok(()),
        Err(e) if e.code == http::StatusCode::NOT_FOUND => Ok(()),
        Err(e) => Err(anyhow::anyhow!(
            "dropping the member finalizer of nodes/{name}: {e}"
        )),
    }
}

fn node_target(state: &AppState, name: &str) -> anyhow::Result<Target> {
    let info = state
        .registry
        .find("", "v1", "nodes")
        .ok_or_else(|| anyhow::anyhow!("no nodes resource in the registry"))?;
    Ok(Target {
        info,
        namespace: None,
        name: Some(name.to_string()),
        subresource: None,
        legacy_watch: false,
    })
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
    if state.store.is_removed() {
        return Ok(());
    }
    let target = node_target(state, &cluster.name)?;
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

/// Reconciles this server's Node every [`RECONCILE_PERIOD`] and looks for deleted member
/// Nodes every [`REMOVAL_PERIOD`], until `state` is dropped.
pub fn spawn(state: &Arc<AppState>) {
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut last_reconcile: Option<tokio::time::Instant> = None;
        loop {
            let Some(state) = weak.upgrade() else { return };
            if last_reconcile.is_none_or(|t| t.elapsed() >= RECONCILE_PERIOD) {
                last_reconcile = Some(tokio::time::Instant::now());
                if let Err(e) = reconcile(&state).await {
                    tracing::warn!(error = %format!("{e:#}"), "could not mark this server's Node as a datastore member");
                }
            }
            if let Err(e) = remove_members_of_deleted_nodes(&state).await {
                tracing::warn!(error = %format!("{e:#}"), "could not remove the member of a deleted Node");
            }
            drop(state);
            tokio::time::sleep(REMOVAL_PERIOD).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, name: &str, role: MemberRole) -> Member {
        Member {
            id,
            name: name.to_string(),
            peer_url: format!("https://10.0.0.{id}:2380"),
            role,
        }
    }

    #[test]
    fn exactly_one_server_removes_a_deleted_member() {
        let members = [
            member(1, "s1", MemberRole::Voter),
            member(7, "s2", MemberRole::Voter),
            member(3, "s3", MemberRole::Voter),
        ];
        // s1 leaves: the lowest other voter (3) acts.
        assert_eq!(removal_for("s1", &members, 3), Removal::RemoveMember(1));
        assert_eq!(removal_for("s1", &members, 7), Removal::NotMine);
        assert_eq!(removal_for("s1", &members, 1), Removal::NotMine);
        // s2 leaves: 1 acts.
        assert_eq!(removal_for("s2", &members, 1), Removal::RemoveMember(7));
        assert_eq!(removal_for("s2", &members, 3), Removal::NotMine);
        // Already removed: the lowest voter lets the Node go.
        assert_eq!(removal_for("gone", &members, 1), Removal::DropFinalizer);
        assert_eq!(removal_for("gone", &members, 3), Removal::NotMine);
        // A learner leaving is removed by the lowest voter; a learner never acts.
        let with_learner = [
            member(1, "s1", MemberRole::Voter),
            member(2, "s2", MemberRole::Learner),
        ];
        assert_eq!(
            removal_for("s2", &with_learner, 1),
            Removal::RemoveMember(2)
        );
        assert_eq!(removal_for("s1", &with_learner, 2), Removal::NotMine);
        assert_eq!(removal_for("s1", &with_learner, 1), Removal::DropFinalizer);
    }

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
        assert_eq!(next["metadata"]["finalizers"], json!([MEMBER_FINALIZER]));
        let mut terminating = next.clone();
        terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        terminating["metadata"]["finalizers"] = json!([]);
        assert!(
            reconciled(&terminating, &labels, &annotations).is_none(),
            "a Node being deleted gets no finalizer back"
        );
        let mut edited = next.clone();
        edited["metadata"]["annotations"]["etcd.k3rs.io/peer-url"] = json!("https://x:1");
        assert!(reconciled(&edited, &labels, &annotations).is_some());
    }
}
