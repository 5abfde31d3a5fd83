//! Taint-based eviction, as kube's taint-eviction-controller (formerly the
//! NoExecute taint manager): a pod bound to a node with NoExecute taints it does not
//! all tolerate is deleted at once; one that tolerates them all, some with
//! `tolerationSeconds`, is deleted when the shortest of those runs out, counted from
//! when this controller first saw the pod under the taints; tolerations without
//! seconds keep it forever. Each deletion records `TaintManagerEviction` ("Marking for
//! deletion Pod ns/name") and a `DisruptionTarget` condition on the pod; a scheduled
//! deletion called off because the taints went away records "Cancelling deletion of
//! Pod ns/name". The node lifecycle controller decides the taints; this one only
//! reads them.
//!
//! Owns the deletion of pods for NoExecute taints; an API client only (no store).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Taint, Toleration};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::sync::mpsc;

use super::events::{EventType, Recorder};
use super::pods::PodInformer;
use super::workload::now_time;
use crate::scheduler::framework::tolerates;

/// What to do with a pod on a node with NoExecute taints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No NoExecute taint, or all tolerated forever: nothing (cancel any deletion).
    Keep,
    /// A taint is not tolerated: delete now.
    DeleteNow,
    /// All tolerated, the shortest for this long.
    DeleteAfter(Duration),
}

/// kube's `processPodOnNode` decision for `taints` (NoExecute ones are picked out)
/// and the pod's `tolerations`: each taint's first matching toleration is the one
/// used, and the shortest `tolerationSeconds` among them wins (0 or less: at once).
pub fn decide(taints: &[Taint], tolerations: &[Toleration]) -> Decision {
    let mut shortest: Option<i64> = None;
    let mut any = false;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        any = true;
        let Some(used) = tolerations.iter().find(|t| tolerates(t, taint)) else {
            return Decision::DeleteNow;
        };
        if let Some(seconds) = used.toleration_seconds {
            shortest = Some(shortest.map_or(seconds, |s| s.min(seconds)));
        }
    }
    match (any, shortest) {
        (false, _) | (true, None) => Decision::Keep,
        (true, Some(s)) if s <= 0 => Decision::DeleteNow,
        (true, Some(s)) => Decision::DeleteAfter(Duration::from_secs(s as u64)),
    }
}

type Key = (String, String);

/// What the pod watch keeps of a pod.
struct PodInfo {
    uid: String,
    node: String,
    tolerations: Vec<Toleration>,
}

/// A deletion waiting for its toleration to run out.
struct Scheduled {
    uid: String,
    /// When the pod was first seen under the taints.
    since: Instant,
    fire: Instant,
}

enum Work {
    Node(String),
    Pod(Key),
}

#[derive(Default)]
struct State {
    /// Node → its NoExecute taints (only nodes that have some).
    taints: HashMap<String, Vec<Taint>>,
    pods: HashMap<Key, PodInfo>,
    by_node: HashMap<String, HashSet<Key>>,
    scheduled: HashMap<Key, Scheduled>,
}

impl State {
    fn forget_pod(&mut self, key: &Key) {
        if let Some(old) = self.pods.remove(key)
            && let Some(set) = self.by_node.get_mut(&old.node)
        {
            set.remove(key);
            if set.is_empty() {
                self.by_node.remove(&old.node);
            }
        }
    }

    fn put_pod(&mut self, key: Key, info: PodInfo) {
        self.forget_pod(&key);
        self.by_node
            .entry(info.node.clone())
            .or_default()
            .insert(key.clone());
        self.pods.insert(key, info);
    }
}

/// Runs the taint eviction controller until the process ends.
pub async fn run(client: kube::Client, pods: PodInformer) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Work, Option<StateChange>)>();
    tokio::spawn(watch_nodes(client.clone(), tx.clone()));
    tokio::spawn(follow_pods(pods, tx));
    let recorder = Recorder::new(client.clone(), "taint-eviction-controller");
    let mut state = State::default();
    loop {
        let next_fire = state.scheduled.values().map(|s| s.fire).min();
        let received = match next_fire {
            Some(at) => tokio::select! {
                r = rx.recv() => r.map(Some),
                _ = tokio::time::sleep_until(at.into()) => Some(None),
            },
            None => rx.recv().await.map(Some),
        };
        let Some(received) = received else { return };
        if let Some((work, change)) = received {
            if let Some(change) = change {
                change.apply(&mut state);
            }
            let keys: Vec<Key> = match work {
                Work::Pod(key) => vec![key],
                Work::Node(node) => state
                    .by_node
                    .get(&node)
                    .map(|s| s.iter().cloned().collect())
                    .unwrap_or_default(),
            };
            for key in keys {
                process(&recorder, &mut state, &key).await;
            }
        }
        let now = Instant::now();
        let due: Vec<Key> = state
            .scheduled
            .iter()
            .filter(|(_, s)| s.fire <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if let Some(s) = state.scheduled.remove(&key) {
                evict(&client, &recorder, &key, &s.uid).await;
            }
        }
    }
}

/// A change the watchers saw, applied by the main loop (which owns the state).
enum StateChange {
    NodeTaints(String, Vec<Taint>),
    PodApplied(Key, PodInfo),
    PodGone(Key),
}

impl StateChange {
    fn apply(self, state: &mut State) {
        match self {
            StateChange::NodeTaints(node, taints) => {
                if taints.is_empty() {
                    state.taints.remove(&node);
                } else {
                    state.taints.insert(node, taints);
                }
            }
            StateChange::PodApplied(key, info) => state.put_pod(key, info),
            StateChange::PodGone(key) => {
                state.forget_pod(&key);
                // Deleted or terminating: nothing left to do, and no event.
                state.scheduled.remove(&key);
            }
        }
    }
}

fn reference(key: &Key) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(key.0.clone()),
        name: Some(key.1.clone()),
        ..Default::default()
    }
}

async fn cancel_with_event(recorder: &Recorder, state: &mut State, key: &Key) {
    if state.scheduled.remove(key).is_some() {
        recorder
            .record(
                &reference(key),
                EventType::Normal,
                "TaintManagerEviction",
                &format!("Cancelling deletion of Pod {}/{}", key.0, key.1),
            )
            .await;
    }
}

async fn process(recorder: &Recorder, state: &mut State, key: &Key) {
    let Some(pod) = state.pods.get(key) else {
        state.scheduled.remove(key);
        return;
    };
    let taints = state.taints.get(&pod.node).cloned().unwrap_or_default();
    let uid = pod.uid.clone();
    let now = Instant::now();
    match decide(&taints, &pod.tolerations) {
        Decision::Keep => cancel_with_event(recorder, state, key).await,
        Decision::DeleteNow => {
            state.scheduled.insert(
                key.clone(),
                Scheduled {
                    uid,
                    since: now,
                    fire: now,
                },
            );
        }
        Decision::DeleteAfter(wait) => {
            let since = match state.scheduled.get(key) {
                Some(s) if s.uid == uid => s.since,
                _ => now,
            };
            state.scheduled.insert(
                key.clone(),
                Scheduled {
                    uid,
                    since,
                    fire: since + wait,
                },
            );
        }
    }
}

/// Deletes the pod (if it is still the same one), recording why.
async fn evict(client: &kube::Client, recorder: &Recorder, key: &Key, uid: &str) {
    let (ns, name) = key;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    recorder
        .record(
            &reference(key),
            EventType::Normal,
            "TaintManagerEviction",
            &format!("Marking for deletion Pod {ns}/{name}"),
        )
        .await;
    let condition = json!({
        "status": {"conditions": [{
            "type": "DisruptionTarget", "status": "True",
            "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint",
            "lastTransitionTime": now_time(),
        }]}
    });
    // Best effort, as in kube: the deletion matters, the condition explains it.
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&condition))
        .await
    {
        tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "could not add the DisruptionTarget condition");
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => tracing::info!(pod = %format!("{ns}/{name}"), "evicted for a NoExecute taint"),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "could not evict pod"),
    }
}

fn no_execute_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| {
            t.iter()
                .filter(|t| t.effect == "NoExecute")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

async fn watch_nodes(client: kube::Client, tx: mpsc::UnboundedSender<(Work, Option<StateChange>)>) {
    let api: Api<Node> = Api::all(client);
    let mut events = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    // Node → NoExecute taints last sent, so only changes reach the main loop.
    let mut sent: HashMap<String, Vec<Taint>> = HashMap::new();
    let mut listed: HashSet<String> = HashSet::new();
    while let Some(event) = events.next().await {
        let (node, gone) = match event {
            Ok(Event::Init) => {
                listed.clear();
                continue;
            }
            Ok(Event::InitDone) => {
                // Nodes deleted while the watch was down.
                let stale: Vec<String> = sent
                    .keys()
                    .filter(|n| !listed.contains(*n))
                    .cloned()
                    .collect();
                for name in stale {
                    sent.remove(&name);
                    let _ = tx.send((
                        Work::Node(name.clone()),
                        Some(StateChange::NodeTaints(name, Vec::new())),
                    ));
                }
                continue;
            }
            Ok(Event::InitApply(n)) | Ok(Event::Apply(n)) => (n, false),
            Ok(Event::Delete(n)) => (n, true),
            Err(e) => {
                tracing::debug!(error = %e, "node watch interrupted; it resumes by itself");
                continue;
            }
        };
        let Some(name) = node.metadata.name.clone() else {
            continue;
        };
        listed.insert(name.clone());
        let taints = if gone {
            Vec::new()
        } else {
            no_execute_taints(&node)
        };
        let before = sent.get(&name).cloned().unwrap_or_default();
        if before == taints {
            continue;
        }
        if taints.is_empty() {
            sent.remove(&name);
        } else {
            sent.insert(name.clone(), taints.clone());
        }
        if tx
            .send((
                Work::Node(name.clone()),
                Some(StateChange::NodeTaints(name, taints)),
            ))
            .is_err()
        {
            return;
        }
    }
}

/// Follows the controller manager's shared pod informer: bound pods that are not
/// terminating are tracked with their tolerations; the rest are forgotten.
async fn follow_pods(pods: PodInformer, tx: mpsc::UnboundedSender<(Work, Option<StateChange>)>) {
    let mut changes = pods.subscribe();
    let mut known: HashSet<Key> = HashSet::new();
    while let Some(pod) = changes.next().await {
        let (Some(ns), Some(name)) = (pod.metadata.namespace.clone(), pod.metadata.name.clone())
        else {
            continue;
        };
        let key = (ns, name);
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let gone = !super::pods::is_current(&pods, &pod);
        let change = if gone || pod.metadata.deletion_timestamp.is_some() || node.is_empty() {
            if !known.remove(&key) {
                continue;
            }
            StateChange::PodGone(key.clone())
        } else {
            known.insert(key.clone());
            StateChange::PodApplied(
                key.clone(),
                PodInfo {
                    uid: pod.metadata.uid.clone().unwrap_or_default(),
                    node,
                    tolerations: pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.tolerations.as_deref())
                        .map(<[Toleration]>::to_vec)
                        .unwrap_or_default(),
                },
            )
        };
        if tx.send((Work::Pod(key), Some(change))).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            value: None,
            time_added: None,
        }
    }

    fn toleration(key: &str, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: seconds,
            value: None,
        }
    }

    const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
    const NOT_READY: &str = "node.kubernetes.io/not-ready";

    #[test]
    fn untolerated_taints_evict_at_once() {
        assert_eq!(
            decide(&[taint(UNREACHABLE, "NoExecute")], &[]),
            Decision::DeleteNow
        );
        assert_eq!(
            decide(
                &[taint(UNREACHABLE, "NoExecute"), taint("other", "NoExecute")],
                &[toleration(UNREACHABLE, None)]
            ),
            Decision::DeleteNow
        );
    }

    #[test]
    fn no_execute_taints_only() {
        assert_eq!(
            decide(&[taint(UNREACHABLE, "NoSchedule")], &[]),
            Decision::Keep
        );
        assert_eq!(decide(&[], &[]), Decision::Keep);
    }

    #[test]
    fn toleration_seconds_pick_the_shortest() {
        let taints = [
            taint(UNREACHABLE, "NoExecute"),
            taint(NOT_READY, "NoExecute"),
        ];
        assert_eq!(
            decide(
                &taints,
                &[
                    toleration(UNREACHABLE, Some(300)),
                    toleration(NOT_READY, Some(5))
                ]
            ),
            Decision::DeleteAfter(Duration::from_secs(5))
        );
        assert_eq!(
            decide(
                &taints,
                &[
                    toleration(UNREACHABLE, None),
                    toleration(NOT_READY, Some(60))
                ]
            ),
            Decision::DeleteAfter(Duration::from_secs(60))
        );
        assert_eq!(
            decide(
                &taints,
                &[toleration(UNREACHABLE, None), toleration(NOT_READY, None)]
            ),
            Decision::Keep,
            "tolerating without seconds means forever"
        );
        assert_eq!(
            decide(&taints[..1], &[toleration(UNREACHABLE, Some(0))]),
            Decision::DeleteNow
        );
        assert_eq!(
            decide(&taints[..1], &[toleration(UNREACHABLE, Some(-5))]),
            Decision::DeleteNow
        );
    }

    #[test]
    fn the_first_matching_toleration_is_used() {
        // An empty key with Exists tolerates everything; it comes first, so its
        // (absent) seconds apply even though a later toleration has some.
        let wildcard = Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        };
        assert_eq!(
            decide(
                &[taint(UNREACHABLE, "NoExecute")],
                &[wildcard, toleration(UNREACHABLE, Some(5))]
            ),
            Decision::Keep
        );
    }
}
