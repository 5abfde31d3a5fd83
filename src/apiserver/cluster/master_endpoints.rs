//! The `kubernetes` Service's endpoints, as kube-apiserver's lease endpoint reconciler
//! writes them: `default/kubernetes` Endpoints (label
//! `endpointslice.kubernetes.io/skip-mirror: "true"`, one subset with every live server's
//! advertise address, sorted, and this server's port, port name `https`) and the
//! EndpointSlice `default/kubernetes` (label `kubernetes.io/service-name: kubernetes`, no
//! managed-by label, so the EndpointSlice controller leaves it alone; endpoints
//! `ready: true`). Written at start and checked every [`TICK`], so an edit or deletion
//! is repaired.
//!
//! Which servers are live: in a clustered store each server renews a master lease, the
//! key `/k3rs/masterleases/<ip>` (kube: `/registry/masterleases/<ip>` with an etcd TTL),
//! every [`RENEW_EVERY`]. The store has no TTLs, so a server counts a lease as live while
//! it has seen the key change within [`LEASE_TTL`] on its own clock (a lease first seen
//! counts from then); a dead server's address drops out about 15 s after its last
//! renewal. Leases nobody renewed for [`FORGET_AFTER`] are deleted. A lone server lists
//! itself and writes no lease.
//!
//! Owns only those two objects and the master lease keys. The objects are written through
//! the registry's own create/update paths (validation, watch, managedFields); lease values
//! are untrusted on reading (an address that does not parse is skipped with a warning).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::apiserver::AppState;
use crate::apiserver::http::handlers::{self, Prepared};
use crate::apiserver::http::request::{Query, Target};

/// How often the endpoints are compared with the live servers (and repaired).
const TICK: Duration = Duration::from_secs(2);
/// How often a server renews its master lease.
const RENEW_EVERY: Duration = Duration::from_secs(5);
/// A lease not seen changing for this long is not live (kube's master lease TTL).
const LEASE_TTL: Duration = Duration::from_secs(15);
/// A lease not seen changing for this long is deleted.
const FORGET_AFTER: Duration = Duration::from_secs(300);
/// Where the master leases live (outside `/registry/`: no API serves them).
const LEASE_PREFIX: &str = "/k3rs/masterleases/";

/// The Endpoints object listing `addresses` (sorted, as kube lists them) on `port`.
pub fn desired_endpoints(addresses: &[IpAddr], port: u16) -> Value {
    let listed: Vec<Value> = addresses
        .iter()
        .map(|ip| json!({"ip": ip.to_string()}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{
            "addresses": listed,
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }],
    })
}

/// The EndpointSlice listing `addresses` (of one family: the first address's).
pub fn desired_slice(addresses: &[IpAddr], port: u16) -> Value {
    let v4 = addresses.first().is_none_or(|ip| ip.is_ipv4());
    let endpoints: Vec<Value> = addresses
        .iter()
        .filter(|ip| ip.is_ipv4() == v4)
        .map(|ip| json!({"addresses": [ip.to_string()], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": if v4 { "IPv4" } else { "IPv6" },
        "endpoints": endpoints,
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    })
}

/// What one server knows of the master leases: each key's last seen mod_revision and
/// when it was first seen at that revision.
#[derive(Default)]
pub struct LeaseObserver {
    seen: HashMap<Vec<u8>, (i64, Instant)>,
}

impl LeaseObserver {
    /// Records the leases of one listing; returns the live addresses (sorted, with
    /// `own`) and the keys to forget (with the revision to delete them at). A lease seen
    /// for the first time is dated by the renewal time it carries (`wall_now_ms` is the
    /// wall clock now), so a server that starts does not list a long-dead one; from then
    /// on only this server's clock counts.
    fn observe(
        &mut self,
        leases: &[crate::store::KeyValue],
        own: IpAddr,
        now: Instant,
        wall_now_ms: u64,
    ) -> (Vec<IpAddr>, Vec<(Vec<u8>, i64)>) {
        let mut live = vec![own];
        let mut forget = Vec::new();
        self.seen
            .retain(|key, _| leases.iter().any(|lease| &lease.key == key));
        for lease in leases {
            let entry = self.seen.entry(lease.key.clone()).or_insert_with(|| {
                let age = lease_renewed_ms(&lease.value)
                    .map(|renewed| Duration::from_millis(wall_now_ms.saturating_sub(renewed)))
                    .unwrap_or_default()
                    .min(FORGET_AFTER);
                (lease.mod_revision, now.checked_sub(age).unwrap_or(now))
            });
            if entry.0 != lease.mod_revision {
                *entry = (lease.mod_revision, now);
            }
            let age = now.duration_since(entry.1);
            let Some(ip) = lease_address(&lease.value) else {
                let key = String::from_utf8_lossy(&lease.key).into_owned();
                crate::skip::warn_once(&format!("masterlease {key}"), || {
                    tracing::warn!(lease = %key, "a master lease does not name an IP address; skipped");
                });
                continue;
            };
            if age < LEASE_TTL {
                if !live.contains(&ip) {
                    live.push(ip);
                }
            } else if age >= FORGET_AFTER && ip != own {
                forget.push((lease.key.clone(), lease.mod_revision));
            }
        }
        live.sort();
        (live, forget)
    }
}

/// When a master lease says it was renewed (Unix milliseconds).
fn lease_renewed_ms(value: &[u8]) -> Option<u64> {
    let value: Value = serde_json::from_slice(value).ok()?;
    value.get("renewedUnixMs")?.as_u64()
}

fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// The address a master lease's value names.
fn lease_address(value: &[u8]) -> Option<IpAddr> {
    let value: Value = serde_json::from_slice(value).ok()?;
    value.get("ip")?.as_str()?.parse().ok()
}

fn lease_key(ip: IpAddr) -> String {
    format!("{LEASE_PREFIX}{ip}")
}

/// Writes (or refreshes) this server's master lease.
async fn renew(store: &crate::store::Store, advertise: SocketAddr) -> anyhow::Result<()> {
    let key = lease_key(advertise.ip());
    let renewed = wall_clock_ms();
    let value = serde_json::to_vec(&json!({
        "ip": advertise.ip().to_string(),
        "port": advertise.port(),
        "renewedUnixMs": renewed,
    }))?;
    match store.get(key.as_bytes()).await? {
        Some(current) => {
            store
                .update(key.as_bytes(), value, current.mod_revision)
                .await?;
        }
        None => {
            store.create(key.as_bytes(), value).await?;
        }
    }
    Ok(())
}

/// The master leases in the store.
async fn leases(store: &crate::store::Store) -> anyhow::Result<Vec<crate::store::KeyValue>> {
    let listed = store
        .range(crate::store::RangeRequest {
            prefix: LEASE_PREFIX.as_bytes().to_vec(),
            limit: 64,
            ..Default::default()
        })
        .await?;
    Ok(listed.kvs)
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

/// Writes both objects if they differ from `addresses` on this server's port.
pub async fn reconcile(state: &AppState, addresses: &[IpAddr]) -> anyhow::Result<()> {
    let port = state.config.advertise.port();
    ensure(state, "", "endpoints", desired_endpoints(addresses, port)).await?;
    ensure(
        state,
        "discovery.k8s.io",
        "endpointslices",
        desired_slice(addresses, port),
    )
    .await
}

/// One round: renew this server's lease when due (clustered stores only), read the
/// leases, and write the endpoints of the live servers.
async fn round(
    state: &AppState,
    observer: &mut LeaseObserver,
    last_renew: &mut Option<Instant>,
) -> anyhow::Result<()> {
    let advertise = state.config.advertise;
    if !state.store.is_clustered() {
        return reconcile(state, &[advertise.ip()]).await;
    }
    if last_renew.is_none_or(|t| t.elapsed() >= RENEW_EVERY) {
        renew(&state.store, advertise).await?;
        *last_renew = Some(Instant::now());
    }
    let leases = leases(&state.store).await?;
    let (live, forget) = observer.observe(&leases, advertise.ip(), Instant::now(), wall_clock_ms());
    for (key, revision) in forget {
        tracing::info!(lease = %String::from_utf8_lossy(&key), "forgetting a master lease nobody renewed");
        let _ = state.store.delete(&key, Some(revision)).await;
    }
    reconcile(state, &live).await
}

/// Reconciles now and then every [`TICK`] until `state` is dropped.
pub fn spawn(state: &Arc<AppState>) {
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut observer = LeaseObserver::default();
        let mut last_renew = None;
        let mut last_error: Option<Instant> = None;
        loop {
            let Some(state) = weak.upgrade() else { return };
            if let Err(e) = round(&state, &mut observer, &mut last_renew).await
                && last_error.is_none_or(|t| t.elapsed() >= Duration::from_secs(30))
            {
                last_error = Some(Instant::now());
                tracing::warn!(error = %format!("{e:#}"), "could not reconcile the kubernetes Service's endpoints");
            }
            drop(state);
            tokio::time::sleep(TICK).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn desired_objects_list_the_addresses() {
        let ep = desired_endpoints(&[ip("10.0.0.5"), ip("10.0.0.6")], 6443);
        assert_eq!(ep["subsets"][0]["addresses"][0]["ip"], "10.0.0.5");
        assert_eq!(ep["subsets"][0]["addresses"][1]["ip"], "10.0.0.6");
        assert_eq!(
            ep["subsets"][0]["ports"][0],
            json!({"name": "https", "port": 6443, "protocol": "TCP"})
        );
        let slice = desired_slice(&[ip("10.0.0.5"), ip("10.0.0.6")], 6443);
        assert_eq!(slice["addressType"], "IPv4");
        assert_eq!(slice["endpoints"][1]["addresses"][0], "10.0.0.6");
        assert_eq!(
            slice["metadata"]["labels"],
            json!({"kubernetes.io/service-name": "kubernetes"})
        );
        let v6 = desired_slice(&[ip("fd00::5")], 6443);
        assert_eq!(v6["addressType"], "IPv6");
    }

    fn lease(key: &str, value: &[u8], mod_revision: i64) -> crate::store::KeyValue {
        crate::store::KeyValue {
            key: key.as_bytes().to_vec(),
            value: value.to_vec(),
            create_revision: 1,
            mod_revision,
            version: 1,
        }
    }

    #[test]
    fn leases_count_while_they_change_and_garbage_is_skipped() {
        let own = ip("10.0.0.1");
        let mut observer = LeaseObserver::default();
        let t0 = Instant::now();
        let wall = 1_000_000_000u64;
        let listing = |other_revision: i64| {
            vec![
                lease("/k3rs/masterleases/10.0.0.1", br#"{"ip":"10.0.0.1"}"#, 5),
                lease(
                    "/k3rs/masterleases/10.0.0.3",
                    br#"{"ip":"10.0.0.3"}"#,
                    other_revision,
                ),
                lease("/k3rs/masterleases/junk", br#"{"ip":"not an ip"}"#, 2),
                lease("/k3rs/masterleases/bin", &[0, 159, 255], 2),
            ]
        };
        let (live, forget) = observer.observe(&listing(7), own, t0, wall);
        assert_eq!(live, vec![ip("10.0.0.1"), ip("10.0.0.3")]);
        assert!(forget.is_empty());
        // Renewed: still live longer than the TTL after it was first seen.
        let t1 = t0 + Duration::from_secs(10);
        observer.observe(&listing(9), own, t1, wall);
        let (live, _) = observer.observe(&listing(9), own, t1 + Duration::from_secs(10), wall);
        assert_eq!(live.len(), 2);
        // Not renewed for the TTL: gone; the own address always stays.
        let (live, forget) = observer.observe(&listing(9), own, t1 + LEASE_TTL, wall);
        assert_eq!(live, vec![own]);
        assert!(forget.is_empty());
        let (_, forget) = observer.observe(&listing(9), own, t1 + FORGET_AFTER, wall);
        assert_eq!(forget, vec![(b"/k3rs/masterleases/10.0.0.3".to_vec(), 9)]);

        // A lease first seen by a server that just started counts from its renewal time.
        let mut fresh = LeaseObserver::default();
        let now = Instant::now();
        let renewed_at = |ms: u64| {
            vec![lease(
                "/k3rs/masterleases/10.0.0.4",
                format!(r#"{{"ip":"10.0.0.4","renewedUnixMs":{ms}}}"#).as_bytes(),
                3,
            )]
        };
        let (live, _) = fresh.observe(&renewed_at(wall - 60_000), own, now, wall);
        assert_eq!(live, vec![own], "renewed a minute ago: dead");
        let mut fresh = LeaseObserver::default();
        let (live, _) = fresh.observe(&renewed_at(wall - 3_000), own, now, wall);
        assert_eq!(live.len(), 2, "renewed 3 s ago: live");
    }

    #[test]
    fn only_differences_are_written() {
        let desired = desired_endpoints(&[ip("10.0.0.5")], 6443);
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
