//! The pod manager: watches the Pods bound to this node (`spec.nodeName=<me>`), runs one
//! [`worker::Worker`] per Pod (syncs bounded by a semaphore), relists CRI every second to wake
//! the workers whose containers changed (the kubelet's PLEG), and tears down what CRI runs for
//! pods the API no longer has (after a kubelet restart, for example). A pod whose identity
//! fields would make unsafe host paths (`spec::untrusted_field_problem`) gets no worker.

pub mod backoff;
pub mod env;
pub mod probes;
pub mod spec;
pub mod status;
pub mod subpath;
pub mod volumes;
pub mod worker;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;

use super::{Kubelet, labels};

/// Pod syncs that may talk to CRI at once.
const CONCURRENT_SYNCS: usize = 32;
/// The relist period (the kubelet's PLEG relists every second).
const RELIST: Duration = Duration::from_secs(1);

struct Handle {
    pod: watch::Sender<Option<Pod>>,
    poke: Arc<Notify>,
}

/// Runs the pod manager until the watch stream ends.
pub async fn run(kubelet: Arc<Kubelet>) -> anyhow::Result<()> {
    let runtime_name = kubelet
        .cri
        .version()
        .await
        .map(|v| v.runtime_name)
        .unwrap_or_else(|_| "containerd".into());
    let permits = Arc::new(Semaphore::new(CONCURRENT_SYNCS));
    let api: Api<Pod> = Api::all(kubelet.client.clone());
    let selector = format!("spec.nodeName={}", kubelet.config.node_name);
    let mut events = watcher(api, watcher::Config::default().fields(&selector))
        .default_backoff()
        .boxed();
    let mut workers: HashMap<String, Handle> = HashMap::new();
    // Workers live in a JoinSet so they stop with the manager (a kubelet restart in-process).
    let mut tasks: JoinSet<String> = JoinSet::new();
    let mut relist = tokio::time::interval(RELIST);
    relist.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut fingerprints: HashMap<String, String> = HashMap::new();
    let mut listing: Option<HashSet<String>> = None;
    let mut synced_once = false;

    let spawn = |workers: &mut HashMap<String, Handle>,
                 tasks: &mut JoinSet<String>,
                 uid: String,
                 pod: Option<Pod>| {
        let (tx, rx) = watch::channel(pod);
        let poke = Arc::new(Notify::new());
        let worker = worker::Worker::new(
            kubelet.clone(),
            uid.clone(),
            permits.clone(),
            runtime_name.clone(),
        );
        let poke2 = poke.clone();
        let uid2 = uid.clone();
        tasks.spawn(async move {
            worker.run(rx, poke2).await;
            uid2
        });
        workers.insert(uid, Handle { pod: tx, poke });
    };

    loop {
        tokio::select! {
            event = events.next() => {
                let event = match event {
                    Some(Ok(e)) => e,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "pod watch failed; retrying");
                        continue;
                    }
                    None => anyhow::bail!("the pod watch ended"),
                };
                match event {
                    watcher::Event::Init => listing = Some(HashSet::new()),
                    watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => {
                        let Some(uid) = pod.metadata.uid.clone() else { continue };
                        if let Some(problem) = spec::untrusted_field_problem(&pod) {
                            let key = format!("kubelet/{uid}/{problem}");
                            crate::skip::warn_once(&key, || tracing::warn!(
                                namespace = %pod.metadata.namespace.as_deref().unwrap_or("").escape_debug(),
                                name = %pod.metadata.name.as_deref().unwrap_or("").escape_debug(),
                                uid = %uid.escape_debug(),
                                "not running a pod that the API would refuse: {problem}"
                            ));
                            continue;
                        }
                        if let Some(seen) = listing.as_mut() {
                            seen.insert(uid.clone());
                        }
                        match workers.get(&uid) {
                            Some(h) if !h.pod.is_closed() => { h.pod.send_replace(Some(pod)); }
                            _ => spawn(&mut workers, &mut tasks, uid, Some(pod)),
                        }
                    }
                    watcher::Event::Delete(pod) => {
                        if let Some(h) = pod.metadata.uid.as_ref().and_then(|u| workers.get(u)) {
                            h.pod.send_replace(None);
                        }
                    }
                    watcher::Event::InitDone => {
                        let seen = listing.take().unwrap_or_default();
                        // Pods that vanished while the watch was down.
                        for (uid, h) in &workers {
                            if !seen.contains(uid) {
                                h.pod.send_replace(None);
                            }
                        }
                        if !synced_once {
                            synced_once = true;
                            match orphans(&kubelet, &seen).await {
                                Ok(list) => for uid in list {
                                    if !workers.contains_key(&uid) {
                                        tracing::info!(%uid, "tearing down containers of a pod the API no longer has");
                                        spawn(&mut workers, &mut tasks, uid, None);
                                    }
                                },
                                Err(e) => tracing::warn!(error = %e, "listing sandboxes for orphans"),
                            }
                        }
                    }
                }
            }
            _ = relist.tick() => {
                match relist_fingerprints(&kubelet).await {
                    Ok(now) => {
                        for (uid, print) in &now {
                            if fingerprints.get(uid) != Some(print)
                                && let Some(h) = workers.get(uid)
                            {
                                h.poke.notify_one();
                            }
                        }
                        fingerprints = now;
                    }
                    Err(e) => tracing::debug!(error = %e, "CRI relist failed"),
                }
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                match done {
                    Ok(uid) => {
                        if workers.get(&uid).is_some_and(|h| h.pod.is_closed()) {
                            workers.remove(&uid);
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "a pod worker panicked"),
                }
            }
        }
    }
}

/// The UIDs of pods with kubelet sandboxes that are not in `known`.
async fn orphans(kubelet: &Kubelet, known: &HashSet<String>) -> anyhow::Result<Vec<String>> {
    let sandboxes = kubelet
        .cri
        .list_pod_sandboxes(&[(labels::MANAGED_BY, "true")])
        .await
        .context("listing sandboxes")?;
    let mut out: Vec<String> = sandboxes
        .into_iter()
        .filter_map(|s| s.labels.get(labels::POD_UID).cloned())
        .filter(|uid| !known.contains(uid))
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// A string per pod UID that changes whenever one of its containers or sandboxes changes state.
async fn relist_fingerprints(kubelet: &Kubelet) -> anyhow::Result<HashMap<String, String>> {
    let containers = kubelet
        .cri
        .list_containers(&[(labels::MANAGED_BY, "true")])
        .await?;
    let sandboxes = kubelet
        .cri
        .list_pod_sandboxes(&[(labels::MANAGED_BY, "true")])
        .await?;
    let mut parts: HashMap<String, BTreeMap<String, i32>> = HashMap::new();
    for c in containers {
        if let Some(uid) = c.labels.get(labels::POD_UID) {
            parts.entry(uid.clone()).or_default().insert(c.id, c.state);
        }
    }
    for s in sandboxes {
        if let Some(uid) = s.labels.get(labels::POD_UID) {
            parts
                .entry(uid.clone())
                .or_default()
                .insert(s.id, 100 + s.state);
        }
    }
    Ok(parts
        .into_iter()
        .map(|(uid, states)| {
            let print = states
                .iter()
                .map(|(id, st)| format!("{id}={st}"))
                .collect::<Vec<_>>()
                .join(",");
            (uid, print)
        })
        .collect())
}
