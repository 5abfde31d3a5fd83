//! Pod garbage collection, as kube-controller-manager's podgc controller:
//!
//! * terminated pods (phase Succeeded or Failed) beyond `--terminated-pod-gc-threshold`
//!   are deleted, evicted ones first and then oldest first (0 disables this);
//! * pods bound to a node that no longer exists are deleted once the node has been
//!   missing for a quarantine (kube hard-codes 40 s; here it is
//!   `--node-monitor-grace-period`, whose default that is) and a fresh read confirms
//!   it is gone — first marked Failed with a `DisruptionTarget` condition
//!   (`DeletionByPodGC`), terminating ones included;
//! * terminating pods on a not-ready node carrying the `node.kubernetes.io/out-of-service`
//!   taint, and terminating pods never bound to a node, are force deleted.
//!
//! Every deletion is a force deletion (grace period 0) with a UID precondition, so a
//! pod recreated under the same name is never hit. Sweeps run every 20 s and shortly
//! after a change that may need one. An API client only (no store).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::sync::Notify;

use super::Config;
use super::pods::{CachedPod, PodInformer};
use super::workload::now_time;

/// kube's `gcCheckPeriod`.
const SWEEP_PERIOD: Duration = Duration::from_secs(20);
/// How long after a relevant change a sweep runs (changes come in bursts).
const SWEEP_DEBOUNCE: Duration = Duration::from_millis(500);
/// Taint an administrator puts on a node that is down for good.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

type Key = (String, String);

/// What a sweep needs to know of a pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodFacts {
    pub uid: String,
    pub node: String,
    pub phase: String,
    pub terminating: bool,
    pub evicted: bool,
    /// creationTimestamp, seconds since the epoch.
    pub created: i64,
}

impl PodFacts {
    fn of(pod: &CachedPod) -> PodFacts {
        let status = pod.status.as_ref();
        PodFacts {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            node: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default(),
            phase: status
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Pending".into()),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            evicted: status.and_then(|s| s.reason.as_deref()) == Some("Evicted"),
            created: pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second()),
        }
    }

    fn terminated(&self) -> bool {
        self.phase == "Succeeded" || self.phase == "Failed"
    }
}

/// What a sweep needs to know of a node.
#[derive(Clone, Debug, Default, PartialEq)]
struct NodeFacts {
    ready: bool,
    out_of_service: bool,
}

/// The terminated pods to delete so that at most `threshold` remain: evicted ones
/// first, then the oldest (kube's `byEvictionAndCreationTimestamp`).
pub fn terminated_to_delete(pods: &[(Key, PodFacts)], threshold: u32) -> Vec<Key> {
    if threshold == 0 {
        return Vec::new();
    }
    let mut terminated: Vec<&(Key, PodFacts)> =
        pods.iter().filter(|(_, f)| f.terminated()).collect();
    let excess = terminated.len().saturating_sub(threshold as usize);
    if excess == 0 {
        return Vec::new();
    }
    terminated.sort_by(|(ka, a), (kb, b)| {
        b.evicted
            .cmp(&a.evicted)
            .then(a.created.cmp(&b.created))
            .then(ka.cmp(kb))
    });
    terminated
        .into_iter()
        .take(excess)
        .map(|(k, _)| k.clone())
        .collect()
}

#[derive(Default)]
struct Observed {
    nodes: HashMap<String, NodeFacts>,
    nodes_synced: bool,
}

/// Runs the pod GC controller until the process ends. Pods are read from the controller
/// manager's shared pod cache at each sweep; nodes from a watch of its own.
pub async fn run(client: kube::Client, config: Config, pods: PodInformer) {
    let observed: Arc<Mutex<Observed>> = Arc::default();
    let wake = Arc::new(Notify::new());
    tokio::spawn(follow_pods(pods.clone(), wake.clone()));
    tokio::spawn(watch_nodes(client.clone(), observed.clone(), wake.clone()));
    pods.wait_until_ready().await;
    let quarantine = config.node_monitor_grace_period;
    // Pod → when it was first seen bound to a missing node.
    let mut orphaned_since: HashMap<Key, Instant> = HashMap::new();
    loop {
        let next_release = orphaned_since.values().map(|t| *t + quarantine).min();
        let sleep = next_release
            .map(|t| t.saturating_duration_since(Instant::now()))
            .unwrap_or(SWEEP_PERIOD)
            .min(SWEEP_PERIOD);
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = wake.notified() => tokio::time::sleep(SWEEP_DEBOUNCE).await,
        }
        let nodes = match observed.lock() {
            Ok(o) if o.nodes_synced => o.nodes.clone(),
            _ => continue,
        };
        let pods: Vec<(Key, PodFacts)> = pods
            .store()
            .state()
            .iter()
            .filter_map(|pod| {
                let ns = pod.metadata.namespace.clone()?;
                let name = pod.metadata.name.clone()?;
                Some(((ns, name), PodFacts::of(pod)))
            })
            .collect();
        sweep(
            &client,
            &config,
            &pods,
            &nodes,
            &mut orphaned_since,
            quarantine,
        )
        .await;
    }
}

async fn sweep(
    client: &kube::Client,
    config: &Config,
    pods: &[(Key, PodFacts)],
    nodes: &HashMap<String, NodeFacts>,
    orphaned_since: &mut HashMap<Key, Instant>,
    quarantine: Duration,
) {
    let facts: HashMap<&Key, &PodFacts> = pods.iter().map(|(k, f)| (k, f)).collect();
    let mut deleted: HashSet<Key> = HashSet::new();

    // Terminating pods on out-of-service nodes, and never-bound ones.
    for (key, pod) in pods {
        if !pod.terminating {
            continue;
        }
        let stuck = match nodes.get(&pod.node) {
            _ if pod.node.is_empty() => true,
            Some(node) => node.out_of_service && !node.ready,
            None => false,
        };
        if stuck && force_delete(client, key, &pod.uid, false, "").await {
            deleted.insert(key.clone());
        }
    }

    // Pods of nodes that are gone.
    let now = Instant::now();
    orphaned_since.retain(|key, _| {
        facts
            .get(key)
            .is_some_and(|p| !p.node.is_empty() && !nodes.contains_key(&p.node))
    });
    let mut confirmed_gone: HashMap<String, bool> = HashMap::new();
    for (key, pod) in pods {
        if pod.node.is_empty() || nodes.contains_key(&pod.node) || deleted.contains(key) {
            continue;
        }
        let since = *orphaned_since.entry(key.clone()).or_insert(now);
        if now.saturating_duration_since(since) < quarantine {
            continue;
        }
        let gone = match confirmed_gone.get(&pod.node) {
            Some(g) => *g,
            None => {
                let api: Api<Node> = Api::all(client.clone());
                let g = matches!(api.get_opt(&pod.node).await, Ok(None));
                confirmed_gone.insert(pod.node.clone(), g);
                g
            }
        };
        if !gone {
            continue;
        }
        tracing::info!(pod = %format!("{}/{}", key.0, key.1), node = %pod.node, "deleting pod of a node that no longer exists");
        if force_delete(
            client,
            key,
            &pod.uid,
            !pod.terminated(),
            "PodGC: node no longer exists",
        )
        .await
        {
            deleted.insert(key.clone());
            orphaned_since.remove(key);
        }
    }

    // Terminated pods over the threshold.
    let remaining: Vec<(Key, PodFacts)> = pods
        .iter()
        .filter(|(k, _)| !deleted.contains(k))
        .cloned()
        .collect();
    let excess = terminated_to_delete(&remaining, config.terminated_pod_gc_threshold);
    if !excess.is_empty() {
        tracing::info!(
            count = excess.len(),
            threshold = config.terminated_pod_gc_threshold,
            "deleting terminated pods over the threshold"
        );
    }
    for key in excess {
        if let Some(pod) = facts.get(&key) {
            force_delete(client, &key, &pod.uid, false, "").await;
        }
    }
}

/// Force-deletes a pod (grace 0, UID precondition); with `mark_failed`, first sets
/// phase Failed and a DisruptionTarget condition saying why. True when it is gone.
async fn force_delete(
    client: &kube::Client,
    key: &Key,
    uid: &str,
    mark_failed: bool,
    message: &str,
) -> bool {
    let (ns, name) = key;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    if mark_failed {
        let patch = json!({"status": {
            "phase": "Failed",
            "conditions": [{"type": "DisruptionTarget", "status": "True",
                "reason": "DeletionByPodGC", "message": message,
                "lastTransitionTime": now_time()}],
        }});
        if let Err(e) = api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "could not mark pod Failed before deleting it");
        }
    }
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 404 => true,
        Err(kube::Error::Api(e)) if e.code == 409 => false,
        Err(e) => {
            tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "pod GC could not delete pod");
            false
        }
    }
}

/// Wakes the sweep when a pod changes in a way a sweep acts on (it became terminated,
/// or terminating); sweeps are debounced, so a burst of such changes costs one. Other
/// writes to an already terminated pod (its status, its labels) do not wake it: a
/// sweep would find nothing new.
async fn follow_pods(pods: PodInformer, wake: Arc<Notify>) {
    let mut changes = pods.subscribe_changes();
    while let Some(change) = changes.next().await {
        let facts = PodFacts::of(&change.current);
        if !(facts.terminated() || facts.terminating) {
            continue;
        }
        let before = change.previous.as_deref().map(PodFacts::of);
        if before.as_ref() != Some(&facts) {
            wake.notify_one();
        }
    }
}

fn node_facts(node: &Node) -> NodeFacts {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let out_of_service = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT));
    NodeFacts {
        ready,
        out_of_service,
    }
}

async fn watch_nodes(client: kube::Client, observed: Arc<Mutex<Observed>>, wake: Arc<Notify>) {
    let api: Api<Node> = Api::all(client);
    let mut events = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listing = HashMap::new();
    while let Some(event) = events.next().await {
        let Ok(mut o) = observed.lock() else { return };
        let relevant = match event {
            Ok(Event::Init) => {
                listing.clear();
                false
            }
            Ok(Event::InitApply(node)) => {
                if let Some(name) = node.metadata.name.clone() {
                    listing.insert(name, node_facts(&node));
                }
                false
            }
            Ok(Event::InitDone) => {
                o.nodes = std::mem::take(&mut listing);
                o.nodes_synced = true;
                true
            }
            Ok(Event::Apply(node)) => {
                let Some(name) = node.metadata.name.clone() else {
                    continue;
                };
                let facts = node_facts(&node);
                let relevant = facts.out_of_service;
                o.nodes.insert(name, facts);
                relevant
            }
            Ok(Event::Delete(node)) => {
                if let Some(name) = node.metadata.name.as_ref() {
                    o.nodes.remove(name);
                }
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "node watch interrupted; it resumes by itself");
                false
            }
        };
        drop(o);
        if relevant {
            wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(phase: &str, created: i64, evicted: bool) -> PodFacts {
        PodFacts {
            uid: format!("uid-{created}"),
            node: "n".into(),
            phase: phase.into(),
            terminating: false,
            evicted,
            created,
        }
    }

    fn key(name: &str) -> Key {
        ("default".into(), name.into())
    }

    #[test]
    fn oldest_terminated_pods_over_the_threshold_go_first() {
        let pods = vec![
            (key("new-done"), facts("Succeeded", 30, false)),
            (key("old-done"), facts("Succeeded", 10, false)),
            (key("running"), facts("Running", 1, false)),
            (key("mid-failed"), facts("Failed", 20, false)),
        ];
        assert_eq!(terminated_to_delete(&pods, 2), vec![key("old-done")]);
        assert_eq!(
            terminated_to_delete(&pods, 1),
            vec![key("old-done"), key("mid-failed")]
        );
        assert!(terminated_to_delete(&pods, 3).is_empty());
        assert!(terminated_to_delete(&pods, 0).is_empty(), "0 disables");
    }

    #[test]
    fn evicted_pods_go_before_older_ones() {
        let pods = vec![
            (key("old"), facts("Failed", 1, false)),
            (key("evicted"), facts("Failed", 50, true)),
            (key("newest"), facts("Failed", 60, false)),
        ];
        assert_eq!(
            terminated_to_delete(&pods, 1),
            vec![key("evicted"), key("old")]
        );
    }
}
