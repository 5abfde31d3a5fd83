//! One worker per Pod: drives the pod from what the API says towards running containers in
//! CRI, and reports back. Each sync reads the pod's sandboxes and containers from CRI (found by
//! the kubelet's labels, so a restarted kubelet adopts what is running), prepares volumes,
//! ensures the sandbox, runs init containers in order and then the containers (image pulls,
//! restart back-off, probes, hooks), and writes `pods/<name>/status` when it changed. A pod with
//! a `deletionTimestamp` is stopped within its grace period and then deleted for good.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use tokio::sync::{Notify, Semaphore, watch};

use super::backoff::Backoff;
use super::env::{self, EnvContext, Sources};
use super::probes::{self, Handler, Kind, Outcome, ProbeState};
use super::spec;
use super::status::{self, ContainerView, PodView};
use super::subpath;
use super::volumes::{self, Prepared};
use crate::controllers::events::EventType;
use crate::kubelet::cri::Cri;
use crate::kubelet::host::HostFacts;
use crate::kubelet::{Kubelet, labels};

/// How often ConfigMap/Secret volumes are refreshed from the API.
const VOLUME_REFRESH: Duration = Duration::from_secs(10);
/// The longest a worker sleeps without being poked.
const RESYNC: Duration = Duration::from_secs(10);

/// The kubelet's per-container memory: why it waits, back-off, probes.
#[derive(Default)]
struct ContainerMemory {
    waiting: Option<(String, String)>,
    crash_backoff: Backoff,
    /// The instance whose crash the current back-off event was recorded for.
    backoff_event_for: Option<String>,
    pull_backoff: Backoff,
    last_pull_failure: Option<SystemTime>,
    /// Probe state belongs to one instance.
    instance: Option<String>,
    startup: Option<ProbeState>,
    liveness: Option<ProbeState>,
    readiness: Option<ProbeState>,
    ready: bool,
}

/// The pod's CRI objects as one sync sees them.
struct Observed {
    sandbox: Option<cri::PodSandbox>,
    stale_sandboxes: Vec<cri::PodSandbox>,
    /// Per container name: instances newest first.
    containers: HashMap<String, Vec<cri::ContainerStatus>>,
    /// The sandbox each container instance belongs to.
    sandbox_of: HashMap<String, String>,
}

impl Observed {
    fn in_sandbox(&self, container: &cri::ContainerStatus, sandbox_id: &str) -> bool {
        self.sandbox_of.get(&container.id).map(String::as_str) == Some(sandbox_id)
    }
}

pub struct Worker {
    kubelet: Arc<Kubelet>,
    uid: String,
    permits: Arc<Semaphore>,
    memory: HashMap<String, ContainerMemory>,
    volumes: BTreeMap<String, Prepared>,
    volumes_refreshed: Option<Instant>,
    volume_error: Option<String>,
    sandbox_backoff: Backoff,
    last_sandbox_failure: Option<SystemTime>,
    pod_ips: Vec<String>,
    host_ip: String,
    terminal: Option<&'static str>,
    runtime_name: String,
    facts: HostFacts,
    next_wake: Instant,
    /// Phase timings of the pod's first sync, the one that starts it (debug logs only).
    timings: Option<Timings>,
    events: PodEvents,
}

/// Events queued per pod (at most this many wait; more are dropped, as client-go drops events
/// when its queue is full).
const EVENT_QUEUE: usize = 64;

/// The pod's events, written in order by a task of their own, so that a sync never waits for
/// an Event write (four of them sat on the start path of every pod) while the events of one
/// pod still reach the API in the order they happened. The task ends, once it has written
/// what is queued, when the worker is dropped.
struct PodEvents {
    queue: tokio::sync::mpsc::Sender<(ObjectReference, EventType, String, String)>,
}

impl PodEvents {
    fn spawn(recorder: crate::controllers::events::Recorder) -> PodEvents {
        let (queue, mut pending) =
            tokio::sync::mpsc::channel::<(ObjectReference, EventType, String, String)>(EVENT_QUEUE);
        tokio::spawn(async move {
            while let Some((object, kind, reason, message)) = pending.recv().await {
                recorder.record(&object, kind, &reason, &message).await;
            }
        });
        PodEvents { queue }
    }

    fn emit(&self, object: ObjectReference, kind: EventType, reason: String, message: String) {
        if let Err(e) = self.queue.try_send((object, kind, reason, message)) {
            let (_, _, reason, _) = e.into_inner();
            tracing::debug!(%reason, "the pod's event queue is full; dropping an event");
        }
    }
}

/// Where the time of one pod start went: `(phase, elapsed since the previous mark)`.
struct Timings {
    last: Instant,
    phases: Vec<(&'static str, Duration)>,
}

impl Timings {
    fn new(since: Instant) -> Timings {
        Timings {
            last: since,
            phases: Vec::new(),
        }
    }

    fn mark(&mut self, phase: &'static str) {
        let now = Instant::now();
        self.phases.push((phase, now - self.last));
        self.last = now;
    }

    fn finish(mut self, phase: &'static str) -> String {
        self.mark(phase);
        let total: Duration = self.phases.iter().map(|(_, d)| *d).sum();
        let mut text = format!("total={}ms", total.as_millis());
        for (phase, d) in &self.phases {
            text.push_str(&format!(" {phase}={}ms", d.as_millis()));
        }
        text
    }
}

fn pod_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        ..Default::default()
    }
}

fn container_ref(pod: &Pod, container: &str, init: bool) -> ObjectReference {
    let mut r = pod_ref(pod);
    r.field_path = Some(if init {
        format!("spec.initContainers{{{container}}}")
    } else {
        format!("spec.containers{{{container}}}")
    });
    r
}

/// `name_namespace(uid)`, how the kubelet names a pod in messages.
fn pod_desc(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.uid.as_deref().unwrap_or("")
    )
}

fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 {
        format!("{}m{}s", secs / 60, secs % 60)
    } else if d.subsec_millis() == 0 && secs > 0 {
        format!("{secs}s")
    } else if secs > 0 {
        let text = format!("{:.3}", d.as_secs_f64());
        format!("{}s", text.trim_end_matches('0').trim_end_matches('.'))
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The hash of a container's spec that decides whether a running instance is still current.
pub fn container_hash(container: &Container) -> String {
    use sha2::{Digest, Sha256};
    let text = serde_json::to_string(container).unwrap_or_default();
    hex::encode(&Sha256::digest(text.as_bytes())[..8])
}

impl Worker {
    pub fn new(
        kubelet: Arc<Kubelet>,
        uid: String,
        permits: Arc<Semaphore>,
        runtime_name: String,
    ) -> Worker {
        let facts = HostFacts::read(&kubelet.config.root_dir);
        let events = PodEvents::spawn(kubelet.recorder.clone());
        let host_ip = kubelet.config.node_ip.to_string();
        Worker {
            kubelet,
            uid,
            permits,
            memory: HashMap::new(),
            volumes: BTreeMap::new(),
            volumes_refreshed: None,
            volume_error: None,
            sandbox_backoff: Backoff::default(),
            last_sandbox_failure: None,
            pod_ips: Vec::new(),
            host_ip,
            terminal: None,
            runtime_name,
            facts,
            next_wake: Instant::now(),
            timings: None,
            events,
        }
    }

    fn cri(&self) -> &Cri {
        &self.kubelet.cri
    }

    /// Queues an event about the pod; the sync goes on without waiting for the write.
    async fn event(&self, object: &ObjectReference, kind: EventType, reason: &str, message: &str) {
        self.events.emit(
            object.clone(),
            kind,
            reason.to_string(),
            message.to_string(),
        );
    }

    /// Ends a timed phase of the starting sync (a no-op on other syncs).
    fn mark(&mut self, phase: &'static str) {
        if let Some(t) = self.timings.as_mut() {
            t.mark(phase);
        }
    }

    fn wake_within(&mut self, d: Duration) {
        let at = Instant::now() + d;
        if at < self.next_wake {
            self.next_wake = at;
        }
    }

    /// Runs until the pod is gone: `pods` carries the latest object (`None` once deleted from
    /// the API), `poke` wakes the worker when CRI state changed.
    pub async fn run(mut self, mut pods: watch::Receiver<Option<Pod>>, poke: Arc<Notify>) {
        let mut first_sync = true;
        loop {
            let current = pods.borrow_and_update().clone();
            match current {
                None => {
                    self.teardown(None).await;
                    return;
                }
                Some(pod) if pod.metadata.deletion_timestamp.is_some() => {
                    self.teardown(Some(&pod)).await;
                    self.final_delete(&pod).await;
                    // Wait for the API to confirm the object is gone (or a newer pod).
                    if pods.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
                Some(pod) => {
                    self.next_wake = Instant::now() + RESYNC;
                    let woken = Instant::now();
                    let permit = self.permits.clone().acquire_owned().await;
                    if first_sync && tracing::enabled!(tracing::Level::DEBUG) {
                        let mut timings = Timings::new(woken);
                        timings.mark("permit");
                        self.timings = Some(timings);
                    }
                    first_sync = false;
                    // A panic in a sync fails that sync (retried like an error), not the
                    // pod's worker or the kubelet.
                    let synced = crate::panics::catch("kubelet-pod-worker", self.sync(&pod))
                        .await
                        .unwrap_or_else(|panic| {
                            Err(anyhow::anyhow!("the pod sync panicked: {panic}"))
                        });
                    if let Err(e) = synced {
                        tracing::warn!(pod = %pod_desc(&pod), error = %e, "pod sync failed");
                        self.wake_within(Duration::from_secs(2));
                    }
                    if let Some(timings) = self.timings.take() {
                        tracing::debug!(pod = %pod_desc(&pod), phases = %timings.finish("status"), "first pod sync");
                    }
                    drop(permit);
                }
            }
            let synced = pods.borrow().clone();
            let wake_at = tokio::time::Instant::from_std(self.next_wake);
            loop {
                tokio::select! {
                    changed = pods.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        // A status-only update (most often our own status write coming
                        // back) needs no sync, as the kubelet's pod config only reconciles
                        // status for those: it would cost CRI calls and a sync slot.
                        let relevant = match (&synced, &*pods.borrow()) {
                            (Some(old), Some(new)) => sync_relevant(old, new),
                            _ => true,
                        };
                        if relevant {
                            break;
                        }
                    }
                    _ = poke.notified() => break,
                    _ = tokio::time::sleep_until(wake_at) => break,
                }
            }
        }
    }

    async fn observe(&self) -> anyhow::Result<Observed> {
        let mut sandboxes = self
            .cri()
            .list_pod_sandboxes(&[(labels::POD_UID, &self.uid)])
            .await?;
        sandboxes.sort_by_key(|s| {
            std::cmp::Reverse((
                s.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
                s.created_at,
            ))
        });
        let ready = sandboxes
            .iter()
            .position(|s| s.state == cri::PodSandboxState::SandboxReady as i32);
        let sandbox = ready.map(|i| sandboxes.remove(i));
        let listed = self
            .cri()
            .list_containers(&[(labels::POD_UID, &self.uid)])
            .await?;
        let mut containers: HashMap<String, Vec<cri::ContainerStatus>> = HashMap::new();
        let sandbox_of = listed
            .iter()
            .map(|c| (c.id.clone(), c.pod_sandbox_id.clone()))
            .collect();
        for c in listed {
            match self.cri().container_status(&c.id).await {
                Ok(s) => {
                    let name = s
                        .metadata
                        .as_ref()
                        .map(|m| m.name.clone())
                        .unwrap_or_default();
                    containers.entry(name).or_default().push(s);
                }
                Err(e) if e.code() == tonic::Code::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        for list in containers.values_mut() {
            list.sort_by_key(|c| std::cmp::Reverse((status::restart_count(c), c.created_at)));
        }
        Ok(Observed {
            sandbox,
            stale_sandboxes: sandboxes,
            containers,
            sandbox_of,
        })
    }

    fn env_context<'a>(&'a self, pod: &'a Pod) -> EnvContext<'a> {
        EnvContext {
            pod,
            pod_ips: &self.pod_ips,
            host_ips: std::slice::from_ref(&self.host_ip),
            node_cpu_millis: u64::from(self.facts.cpus) * 1000,
            node_memory_bytes: self.facts.memory_bytes,
            node_storage_bytes: self.facts.ephemeral_storage_bytes,
        }
    }

    fn sandbox_config(&self, pod: &Pod, attempt: u32) -> cri::PodSandboxConfig {
        let config = &self.kubelet.config;
        let pod_spec = pod.spec.clone().unwrap_or_default();
        let (labels, annotations) = spec::sandbox_metadata(pod);
        let host_network = pod_spec.host_network.unwrap_or(false);
        // As the kubelet: host-network pods keep the node's UTS namespace, so no hostname.
        let hostname = if host_network {
            String::new()
        } else {
            spec::hostname_and_domain(pod, &config.cluster_domain).0
        };
        let resolv = std::fs::read_to_string(&config.resolv_conf)
            .map(|t| spec::parse_resolv_conf(&t))
            .unwrap_or_default();
        let qos = spec::qos_class(&pod_spec);
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: self.uid.clone(),
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                attempt,
            }),
            hostname,
            log_directory: spec::pod_log_directory(&config.pod_log_dir, pod)
                .to_string_lossy()
                .into_owned(),
            dns_config: Some(spec::dns_config(
                pod,
                &config.cluster_dns,
                &config.cluster_domain,
                &resolv,
            )),
            port_mappings: spec::port_mappings(&pod_spec),
            labels,
            annotations,
            linux: Some(spec::linux_sandbox(
                &pod_spec,
                spec::cgroup_parent(qos, &self.uid, false),
            )),
            windows: None,
        }
    }

    async fn sync(&mut self, pod: &Pod) -> anyhow::Result<()> {
        let pod_spec = pod.spec.clone().unwrap_or_default();
        let policy = pod_spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into());
        let observed = self.observe().await?;
        self.mark("observe");
        if self.terminal.is_none() {
            self.terminal = match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Succeeded") => Some("Succeeded"),
                Some("Failed") => Some("Failed"),
                _ => None,
            };
        }
        if self.terminal.is_some() {
            if let Some(sandbox) = &observed.sandbox {
                self.stop_running(pod, &observed, None).await;
                let _ = self.cri().stop_pod_sandbox(&sandbox.id).await;
            }
            return self.write_status(pod, &self.observe().await?).await;
        }

        // Volumes first: nothing may start before its volumes exist.
        let refresh_due = self
            .volumes_refreshed
            .is_none_or(|t| t.elapsed() >= VOLUME_REFRESH);
        if refresh_due {
            let mut sources = Sources::new(
                self.kubelet.client.clone(),
                pod.metadata.namespace.as_deref().unwrap_or("default"),
            );
            let ctx = self.env_context(pod);
            let result = volumes::setup(
                &self.kubelet.config.root_dir,
                pod,
                &ctx,
                &mut sources,
                &self.kubelet.tokens,
            )
            .await;
            match result {
                Ok(v) => {
                    self.volumes = v;
                    self.volume_error = None;
                    self.volumes_refreshed = Some(Instant::now());
                }
                Err((name, e)) => {
                    let message = format!("MountVolume.SetUp failed for volume \"{name}\" : {e}");
                    if self.volume_error.as_deref() != Some(message.as_str()) {
                        self.event(&pod_ref(pod), EventType::Warning, "FailedMount", &message)
                            .await;
                    }
                    self.volume_error = Some(message);
                    self.volumes_refreshed = Some(Instant::now());
                }
            }
            self.wake_within(VOLUME_REFRESH);
        }
        let volumes_ready = pod_spec
            .volumes
            .iter()
            .flatten()
            .all(|v| self.volumes.contains_key(&v.name));
        if !volumes_ready {
            self.wake_within(Duration::from_secs(2));
            return self.write_status(pod, &observed).await;
        }

        self.mark("volumes");
        // The sandbox.
        let (sandbox_id, attempt) = match &observed.sandbox {
            Some(s) => (
                s.id.clone(),
                s.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
            ),
            None => match self.create_sandbox(pod, &observed).await {
                Some(created) => created,
                None => return self.write_status(pod, &observed).await,
            },
        };
        if self.pod_ips.is_empty() || observed.sandbox.as_ref().map(|s| &s.id) != Some(&sandbox_id)
        {
            self.pod_ips = if pod_spec.host_network.unwrap_or(false) {
                vec![self.host_ip.clone()]
            } else {
                match self.cri().pod_sandbox_status(&sandbox_id).await {
                    Ok(s) => s
                        .network
                        .map(|n| {
                            std::iter::once(n.ip)
                                .chain(n.additional_ips.into_iter().map(|i| i.ip))
                                .filter(|ip| !ip.is_empty())
                                .collect()
                        })
                        .unwrap_or_default(),
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the sandbox's IP");
                        Vec::new()
                    }
                }
            };
        }
        let sandbox_config = self.sandbox_config(pod, attempt);

        self.mark("sandbox");
        // Init containers, one at a time, in order.
        let mut initialized = true;
        for c in pod_spec.init_containers.iter().flatten() {
            let latest = observed
                .containers
                .get(&c.name)
                .and_then(|l| l.first())
                .cloned();
            match latest {
                Some(l)
                    if status::is_exited(&l)
                        && l.exit_code == 0
                        && observed.in_sandbox(&l, &sandbox_id) =>
                {
                    continue;
                }
                Some(l) if status::is_running(&l) => {
                    initialized = false;
                    break;
                }
                Some(l) if status::is_exited(&l) && l.exit_code != 0 => {
                    initialized = false;
                    if policy == "Never" {
                        self.terminal = Some("Failed");
                    } else {
                        self.restart_after_exit(pod, c, true, &l, &sandbox_id, &sandbox_config)
                            .await;
                    }
                    break;
                }
                other => {
                    initialized = false;
                    if let Some(stale) = other.filter(|l| !status::is_exited(l)) {
                        let _ = self.cri().remove_container(&stale.id).await;
                    }
                    let attempt = observed
                        .containers
                        .get(&c.name)
                        .and_then(|l| l.first())
                        .map(|l| status::restart_count(l) + 1)
                        .unwrap_or(0);
                    self.start_container(pod, c, true, attempt, &sandbox_id, &sandbox_config)
                        .await;
                    break;
                }
            }
        }

        if initialized {
            for c in &pod_spec.containers {
                let latest = observed
                    .containers
                    .get(&c.name)
                    .and_then(|l| l.first())
                    .cloned();
                match latest {
                    None => {
                        self.start_container(pod, c, false, 0, &sandbox_id, &sandbox_config)
                            .await;
                    }
                    Some(l) if status::is_running(&l) => {
                        if !observed.in_sandbox(&l, &sandbox_id) {
                            self.kill(
                                pod,
                                c,
                                &l,
                                "Container is in a replaced sandbox, will be restarted",
                                None,
                            )
                            .await;
                            continue;
                        }
                        let hash = l
                            .annotations
                            .get(labels::CONTAINER_HASH)
                            .cloned()
                            .unwrap_or_default();
                        if !hash.is_empty() && hash != container_hash(c) {
                            let message = format!(
                                "Container {} definition changed, will be restarted",
                                c.name
                            );
                            self.kill(pod, c, &l, &message, None).await;
                            continue;
                        }
                        self.probe(pod, c, &l).await;
                    }
                    Some(l) if status::is_exited(&l) => {
                        let restart = match policy.as_str() {
                            "Never" => false,
                            "OnFailure" => l.exit_code != 0,
                            _ => true,
                        };
                        let mem = self.memory.entry(c.name.clone()).or_default();
                        mem.ready = false;
                        if restart {
                            self.restart_after_exit(
                                pod,
                                c,
                                false,
                                &l,
                                &sandbox_id,
                                &sandbox_config,
                            )
                            .await;
                        } else {
                            mem.waiting = None;
                        }
                    }
                    Some(l) => {
                        // Created but never started (a failed start): replace it.
                        let _ = self.cri().remove_container(&l.id).await;
                        let attempt = status::restart_count(&l);
                        self.start_container(pod, c, false, attempt, &sandbox_id, &sandbox_config)
                            .await;
                    }
                }
            }
        }

        self.mark("containers");
        let observed = self.observe().await?;
        if initialized && policy != "Always" {
            let done: Vec<&cri::ContainerStatus> = pod_spec
                .containers
                .iter()
                .filter_map(|c| observed.containers.get(&c.name).and_then(|l| l.first()))
                .filter(|l| status::is_exited(l))
                .collect();
            let all_exited = done.len() == pod_spec.containers.len();
            let all_ok = done.iter().all(|l| l.exit_code == 0);
            if all_exited && (policy == "Never" || all_ok) {
                self.terminal = Some(if all_ok { "Succeeded" } else { "Failed" });
            }
        }
        if self.terminal.is_some() {
            let _ = self.cri().stop_pod_sandbox(&sandbox_id).await;
        }
        self.write_status(pod, &observed).await
    }

    async fn create_sandbox(&mut self, pod: &Pod, observed: &Observed) -> Option<(String, u32)> {
        let now = SystemTime::now();
        if let Some(failed) = self.last_sandbox_failure
            && self.sandbox_backoff.in_backoff(failed, now)
        {
            let wait = self
                .sandbox_backoff
                .until(failed)
                .duration_since(now)
                .unwrap_or_default();
            self.wake_within(wait);
            return None;
        }
        let previous = observed.stale_sandboxes.first();
        if previous.is_some()
            && observed
                .containers
                .values()
                .flatten()
                .any(status::is_running)
        {
            self.event(
                &pod_ref(pod),
                EventType::Normal,
                "SandboxChanged",
                "Pod sandbox changed, it will be killed and re-created.",
            )
            .await;
            self.stop_running(pod, observed, None).await;
        }
        let attempt = previous
            .and_then(|s| s.metadata.as_ref())
            .map(|m| m.attempt + 1)
            .unwrap_or(0);
        let config = self.sandbox_config(pod, attempt);
        if let Err(e) = std::fs::create_dir_all(&config.log_directory) {
            tracing::warn!(dir = %config.log_directory, error = %e, "creating the pod log directory");
        }
        self.mark("before-sandbox");
        let created = self.cri().run_pod_sandbox(config).await;
        self.mark("run-sandbox");
        match created {
            Ok(id) => {
                self.sandbox_backoff.reset();
                self.last_sandbox_failure = None;
                self.pod_ips.clear();
                for stale in &observed.stale_sandboxes {
                    let _ = self.cri().stop_pod_sandbox(&stale.id).await;
                }
                Some((id, attempt))
            }
            Err(e) => {
                let message = format!("Failed to create pod sandbox: {}", e.message());
                self.event(
                    &pod_ref(pod),
                    EventType::Warning,
                    "FailedCreatePodSandBox",
                    &message,
                )
                .await;
                self.sandbox_backoff.next(now);
                self.last_sandbox_failure = Some(now);
                self.wake_within(self.sandbox_backoff.delay());
                None
            }
        }
    }

    /// Restarts an exited container unless it is in back-off (then: CrashLoopBackOff).
    async fn restart_after_exit(
        &mut self,
        pod: &Pod,
        c: &Container,
        init: bool,
        latest: &cri::ContainerStatus,
        sandbox_id: &str,
        sandbox_config: &cri::PodSandboxConfig,
    ) {
        let now = SystemTime::now();
        let finished = status::system_time(latest.finished_at).unwrap_or(now);
        let started = status::system_time(latest.started_at).unwrap_or(finished);
        let desc = pod_desc(pod);
        let mem = self.memory.entry(c.name.clone()).or_default();
        if finished.duration_since(started).unwrap_or_default()
            >= super::backoff::RESET_AFTER_RUNNING
        {
            mem.crash_backoff.reset();
        }
        if mem.crash_backoff.in_backoff(finished, now) {
            let delay = mem.crash_backoff.delay();
            mem.waiting = Some((
                "CrashLoopBackOff".into(),
                format!(
                    "back-off {} restarting failed container={} pod={desc}",
                    go_duration(delay),
                    c.name
                ),
            ));
            let first = mem.backoff_event_for.as_deref() != Some(latest.id.as_str());
            mem.backoff_event_for = Some(latest.id.clone());
            let wait = mem
                .crash_backoff
                .until(finished)
                .duration_since(now)
                .unwrap_or_default();
            self.wake_within(wait);
            if first {
                let message = format!(
                    "Back-off restarting failed container {} in pod {desc}",
                    c.name
                );
                self.event(
                    &container_ref(pod, &c.name, init),
                    EventType::Warning,
                    "BackOff",
                    &message,
                )
                .await;
            }
            return;
        }
        mem.crash_backoff.next(now);
        let attempt = status::restart_count(latest) + 1;
        self.start_container(pod, c, init, attempt, sandbox_id, sandbox_config)
            .await;
    }

    /// Makes sure the image is there per `imagePullPolicy`; `None` (with the waiting reason
    /// set) when the container cannot start yet.
    async fn ensure_image(
        &mut self,
        pod: &Pod,
        c: &Container,
        init: bool,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Option<String> {
        let image = c.image.clone().unwrap_or_default();
        let object = container_ref(pod, &c.name, init);
        let policy = spec::pull_policy(c).to_string();
        let present = match self.cri().image_status(&image).await {
            Ok(i) => i,
            Err(e) => {
                self.set_waiting(&c.name, "ErrImageInspect", &e.message());
                self.event(
                    &object,
                    EventType::Warning,
                    "InspectFailed",
                    &format!("Failed to inspect image \"{image}\": {}", e.message()),
                )
                .await;
                return None;
            }
        };
        match (&present, policy.as_str()) {
            (Some(i), "IfNotPresent") | (Some(i), "Never") => {
                self.event(
                    &object,
                    EventType::Normal,
                    "Pulled",
                    &format!("Container image \"{image}\" already present on machine"),
                )
                .await;
                return Some(i.id.clone());
            }
            (None, "Never") => {
                let message =
                    format!("Container image \"{image}\" is not present with pull policy of Never");
                self.set_waiting(&c.name, "ErrImageNeverPull", &message);
                self.event(&object, EventType::Warning, "ErrImageNeverPull", &message)
                    .await;
                self.event(
                    &object,
                    EventType::Warning,
                    "Failed",
                    "Error: ErrImageNeverPull",
                )
                .await;
                self.wake_within(Duration::from_secs(10));
                return None;
            }
            _ => {}
        }
        let now = SystemTime::now();
        let mem = self.memory.entry(c.name.clone()).or_default();
        if let Some(failed) = mem.last_pull_failure
            && mem.pull_backoff.in_backoff(failed, now)
        {
            let wait = mem
                .pull_backoff
                .until(failed)
                .duration_since(now)
                .unwrap_or_default();
            let first = mem
                .waiting
                .as_ref()
                .is_none_or(|(r, _)| r != "ImagePullBackOff");
            mem.waiting = Some((
                "ImagePullBackOff".into(),
                format!("Back-off pulling image \"{image}\""),
            ));
            self.wake_within(wait);
            if first {
                self.event(
                    &object,
                    EventType::Normal,
                    "BackOff",
                    &format!("Back-off pulling image \"{image}\""),
                )
                .await;
                self.event(
                    &object,
                    EventType::Warning,
                    "Failed",
                    "Error: ImagePullBackOff",
                )
                .await;
            }
            return None;
        }
        self.event(
            &object,
            EventType::Normal,
            "Pulling",
            &format!("Pulling image \"{image}\""),
        )
        .await;
        let started = Instant::now();
        let turn = self.kubelet.image_pulls.acquire().await;
        let pulling = Instant::now();
        let pulled = self
            .cri()
            .pull_image(&image, Some(sandbox_config.clone()))
            .await;
        drop(turn);
        match pulled {
            Ok(image_ref) => {
                let took = pulling.elapsed();
                let with_waiting = started.elapsed();
                let size = self
                    .cri()
                    .image_status(&image_ref)
                    .await
                    .ok()
                    .flatten()
                    .map(|i| i.size)
                    .unwrap_or(0);
                let mem = self.memory.entry(c.name.clone()).or_default();
                mem.pull_backoff.reset();
                mem.last_pull_failure = None;
                let took = format!("{:.3}s", took.as_secs_f64());
                let with_waiting = format!("{:.3}s", with_waiting.as_secs_f64());
                self.event(
                    &object,
                    EventType::Normal,
                    "Pulled",
                    &format!("Successfully pulled image \"{image}\" in {took} ({with_waiting} including waiting). Image size: {size} bytes."),
                )
                .await;
                Some(image_ref)
            }
            Err(e) => {
                let message = e.message();
                let mem = self.memory.entry(c.name.clone()).or_default();
                mem.pull_backoff.next(now);
                mem.last_pull_failure = Some(now);
                mem.waiting = Some(("ErrImagePull".into(), message.clone()));
                let delay = mem.pull_backoff.delay();
                self.wake_within(delay);
                self.event(
                    &object,
                    EventType::Warning,
                    "Failed",
                    &format!("Failed to pull image \"{image}\": {message}"),
                )
                .await;
                self.event(&object, EventType::Warning, "Failed", "Error: ErrImagePull")
                    .await;
                None
            }
        }
    }

    /// A container could not be created or started: Waiting with `reason`, a `Failed` event
    /// ("Error: <message>", as the kubelet words it), and another try after `retry`.
    async fn container_failed(
        &mut self,
        object: &ObjectReference,
        name: &str,
        reason: &str,
        message: &str,
        retry: Duration,
    ) {
        self.set_waiting(name, reason, message);
        self.event(
            object,
            EventType::Warning,
            "Failed",
            &format!("Error: {message}"),
        )
        .await;
        self.wake_within(retry);
    }

    fn set_waiting(&mut self, name: &str, reason: &str, message: &str) {
        self.memory.entry(name.to_string()).or_default().waiting =
            Some((reason.to_string(), message.to_string()));
    }

    /// Builds the container's mounts: its volumeMounts, the pod's /etc/hosts and its
    /// termination-log file.
    fn mounts(
        &self,
        pod: &Pod,
        c: &Container,
        vars: &BTreeMap<String, String>,
    ) -> Result<Vec<cri::Mount>, String> {
        let mut mounts = Vec::new();
        let pod_dir = volumes::pod_dir(&self.kubelet.config.root_dir, &self.uid);
        for (index, vm) in c.volume_mounts.iter().flatten().enumerate() {
            let prepared = self.volumes.get(&vm.name).ok_or_else(|| {
                format!(
                    "cannot find volume \"{}\" to mount into container \"{}\"",
                    vm.name, c.name
                )
            })?;
            let sub = vm
                .sub_path_expr
                .as_deref()
                .map(|e| env::expand(e, vars))
                .or_else(|| vm.sub_path.clone())
                .filter(|s| !s.is_empty());
            let host_path = match sub {
                Some(sub) => {
                    if std::path::Path::new(&sub)
                        .components()
                        .any(|c| !matches!(c, std::path::Component::Normal(_)))
                    {
                        return Err(format!("invalid subpath {sub:?}"));
                    }
                    // Opened without leaving the volume (a planted symlink may not lead
                    // out of it) and bind-mounted from the open descriptor, as the kubelet's
                    // safe subpath does; the details stay in the log, as the kubelet keeps
                    // host paths out of the pod's status.
                    let failed = |e: &dyn std::fmt::Display| {
                        tracing::warn!(pod = %self.uid, container = %c.name, volume = %vm.name, error = %e, "preparing a subPath mount");
                        format!(
                            "failed to prepare subPath for volumeMount \"{}\" of container \"{}\"",
                            vm.name, c.name
                        )
                    };
                    let mode = std::fs::metadata(&prepared.host_path)
                        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
                        .unwrap_or(0o755);
                    let fd =
                        subpath::open_beneath(&prepared.host_path, &sub, !prepared.read_only, mode)
                            .map_err(|e| failed(&e))?;
                    let target = subpath::target(&pod_dir, &vm.name, &c.name, index);
                    subpath::bind(&fd, &target).map_err(|e| failed(&e))?;
                    target
                }
                None => prepared.host_path.clone(),
            };
            let propagation = match vm.mount_propagation.as_deref() {
                Some("HostToContainer") => cri::MountPropagation::PropagationHostToContainer as i32,
                Some("Bidirectional") => cri::MountPropagation::PropagationBidirectional as i32,
                _ => cri::MountPropagation::PropagationPrivate as i32,
            };
            mounts.push(cri::Mount {
                container_path: vm.mount_path.clone(),
                host_path: host_path.to_string_lossy().into_owned(),
                readonly: vm.read_only.unwrap_or(false) || prepared.read_only,
                propagation,
                ..Default::default()
            });
        }
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        if !host_network && !mounts.iter().any(|m| m.container_path == "/etc/hosts") {
            let hosts = pod_dir.join("etc-hosts");
            let (hostname, domain) =
                spec::hostname_and_domain(pod, &self.kubelet.config.cluster_domain);
            let names = match domain {
                Some(d) => format!("{hostname}.{d}\t{hostname}"),
                None => hostname,
            };
            let mut text = String::from(
                "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
            );
            for ip in &self.pod_ips {
                text.push_str(&format!("{ip}\t{names}\n"));
            }
            for alias in pod
                .spec
                .iter()
                .flat_map(|s| s.host_aliases.iter().flatten())
            {
                text.push_str(&format!(
                    "\n# Entries added by HostAliases.\n{}\t{}\n",
                    alias.ip,
                    alias.hostnames.clone().unwrap_or_default().join("\t")
                ));
            }
            std::fs::create_dir_all(&pod_dir)
                .map_err(|e| format!("creating {}: {e}", pod_dir.display()))?;
            std::fs::write(&hosts, text)
                .map_err(|e| format!("writing {}: {e}", hosts.display()))?;
            mounts.push(cri::Mount {
                container_path: "/etc/hosts".into(),
                host_path: hosts.to_string_lossy().into_owned(),
                ..Default::default()
            });
        }
        let message_path = c
            .termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into());
        if !message_path.is_empty() {
            let dir = pod_dir.join("containers").join(&c.name);
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            let nanos = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos();
            let file = dir.join(format!("{:08x}", nanos ^ std::process::id()));
            std::fs::write(&file, b"").map_err(|e| format!("creating {}: {e}", file.display()))?;
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666));
            mounts.push(cri::Mount {
                container_path: message_path,
                host_path: file.to_string_lossy().into_owned(),
                ..Default::default()
            });
        }
        Ok(mounts)
    }

    async fn start_container(
        &mut self,
        pod: &Pod,
        c: &Container,
        init: bool,
        attempt: i32,
        sandbox_id: &str,
        sandbox_config: &cri::PodSandboxConfig,
    ) {
        let object = container_ref(pod, &c.name, init);
        self.mark("before-container");
        let Some(image_ref) = self.ensure_image(pod, c, init, sandbox_config).await else {
            return;
        };
        self.mark("image");
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let mut sources = Sources::new(self.kubelet.client.clone(), &namespace);
        let services = env::services(&self.kubelet.client, pod).await;
        let built = {
            let ctx = self.env_context(pod);
            env::build(&ctx, c, &services, &mut sources).await
        };
        let envs = match built {
            Ok(e) => e,
            Err(e) => {
                let message = e.to_string();
                self.container_failed(
                    &object,
                    &c.name,
                    "CreateContainerConfigError",
                    &message,
                    Duration::from_secs(5),
                )
                .await;
                return;
            }
        };
        self.mark("env");
        let vars: BTreeMap<String, String> = envs.iter().cloned().collect();
        let mounts = match self.mounts(pod, c, &vars) {
            Ok(m) => m,
            Err(message) => {
                self.container_failed(
                    &object,
                    &c.name,
                    "CreateContainerConfigError",
                    &message,
                    Duration::from_secs(5),
                )
                .await;
                return;
            }
        };
        let pod_spec = pod.spec.clone().unwrap_or_default();
        let qos = spec::qos_class(&pod_spec);
        let container_labels: HashMap<String, String> = [
            (
                labels::POD_NAME,
                pod.metadata.name.clone().unwrap_or_default(),
            ),
            (labels::POD_NAMESPACE, namespace.clone()),
            (labels::POD_UID, self.uid.clone()),
            (labels::CONTAINER_NAME, c.name.clone()),
            (labels::MANAGED_BY, "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(init.then(|| (labels::INIT_CONTAINER.to_string(), "true".to_string())))
        .collect();
        let annotations: HashMap<String, String> = [
            (labels::RESTART_COUNT, attempt.to_string()),
            (
                labels::TERMINATION_GRACE,
                spec::termination_grace_seconds(pod).to_string(),
            ),
            (labels::CONTAINER_HASH, container_hash(c)),
            (
                labels::TERMINATION_MESSAGE_PATH,
                c.termination_message_path
                    .clone()
                    .unwrap_or_else(|| "/dev/termination-log".into()),
            ),
            (
                "io.kubernetes.container.terminationMessagePolicy",
                c.termination_message_policy
                    .clone()
                    .unwrap_or_else(|| "File".into()),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: c.name.clone(),
                attempt: attempt as u32,
            }),
            image: Some(cri::ImageSpec {
                image: image_ref,
                user_specified_image: c.image.clone().unwrap_or_default(),
                ..Default::default()
            }),
            command: c
                .command
                .iter()
                .flatten()
                .map(|s| env::expand(s, &vars))
                .collect(),
            args: c
                .args
                .iter()
                .flatten()
                .map(|s| env::expand(s, &vars))
                .collect(),
            working_dir: c.working_dir.clone().unwrap_or_default(),
            envs: envs
                .into_iter()
                .map(|(key, value)| cri::KeyValue { key, value })
                .collect(),
            mounts,
            labels: container_labels,
            annotations,
            log_path: format!("{}/{attempt}.log", c.name),
            stdin: c.stdin.unwrap_or(false),
            stdin_once: c.stdin_once.unwrap_or(false),
            tty: c.tty.unwrap_or(false),
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(spec::container_resources(c, qos, self.facts.memory_bytes)),
                security_context: Some(spec::container_security(&pod_spec, c)),
            }),
            ..Default::default()
        };
        let log_dir = std::path::Path::new(&sandbox_config.log_directory).join(&c.name);
        if let Err(e) = std::fs::create_dir_all(&log_dir) {
            tracing::warn!(dir = %log_dir.display(), error = %e, "creating the container log directory");
        }
        let id = match self
            .cri()
            .create_container(sandbox_id, config, sandbox_config.clone())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                let message = e.message();
                self.container_failed(
                    &object,
                    &c.name,
                    "CreateContainerError",
                    &message,
                    Duration::from_secs(5),
                )
                .await;
                return;
            }
        };
        self.mark("create");
        self.event(
            &object,
            EventType::Normal,
            "Created",
            &format!("Created container: {}", c.name),
        )
        .await;
        self.mark("created-event");
        if let Err(e) = self.cri().start_container(&id).await {
            let message = e.message();
            self.container_failed(
                &object,
                &c.name,
                "RunContainerError",
                &message,
                Duration::from_secs(1),
            )
            .await;
            return;
        }
        self.mark("start");
        self.memory.entry(c.name.clone()).or_default().waiting = None;
        self.event(
            &object,
            EventType::Normal,
            "Started",
            &format!("Started container {}", c.name),
        )
        .await;
        self.mark("started-event");
        if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let ip = self.pod_ips.first().cloned().unwrap_or_default();
            let handler = Handler::of_hook(hook);
            let outcome = probes::run(
                self.cri(),
                &handler,
                c,
                &id,
                &ip,
                Duration::from_secs(spec::termination_grace_seconds(pod).max(1) as u64),
            )
            .await;
            if let Outcome::Failure(message) = outcome {
                tracing::info!(pod = %pod_desc(pod), container = %c.name, %message, "postStart hook failed");
                self.event(
                    &object,
                    EventType::Warning,
                    "FailedPostStartHook",
                    "PostStartHook failed",
                )
                .await;
                let grace = Duration::from_secs(spec::termination_grace_seconds(pod) as u64);
                let _ = self.cri().stop_container(&id, grace).await;
            }
        }
    }

    /// Runs the container's due probes and acts on their results.
    async fn probe(&mut self, pod: &Pod, c: &Container, latest: &cri::ContainerStatus) {
        let now = Instant::now();
        let since_start = status::system_time(latest.started_at)
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .unwrap_or_default();
        let started_at = now.checked_sub(since_start).unwrap_or(now);
        {
            let mem = self.memory.entry(c.name.clone()).or_default();
            mem.waiting = None;
            if mem.instance.as_deref() != Some(latest.id.as_str()) {
                mem.instance = Some(latest.id.clone());
                mem.startup = c
                    .startup_probe
                    .as_ref()
                    .map(|p| ProbeState::new(Kind::Startup, p, started_at));
                mem.liveness = c
                    .liveness_probe
                    .as_ref()
                    .map(|p| ProbeState::new(Kind::Liveness, p, started_at));
                mem.readiness = c
                    .readiness_probe
                    .as_ref()
                    .map(|p| ProbeState::new(Kind::Readiness, p, started_at));
                mem.ready = false;
            }
        }
        let ip = self.pod_ips.first().cloned().unwrap_or_default();
        let object = container_ref(pod, &c.name, false);
        let started_ok =
            |mem: &ContainerMemory| mem.startup.as_ref().is_none_or(|s| s.result == Some(true));
        for (kind, probe) in [
            (Kind::Startup, c.startup_probe.as_ref()),
            (Kind::Liveness, c.liveness_probe.as_ref()),
            (Kind::Readiness, c.readiness_probe.as_ref()),
        ] {
            let Some(probe) = probe else { continue };
            let mem = self.memory.entry(c.name.clone()).or_default();
            if kind != Kind::Startup && !started_ok(mem) {
                continue;
            }
            let state = match kind {
                Kind::Startup => mem.startup.as_mut(),
                Kind::Liveness => mem.liveness.as_mut(),
                Kind::Readiness => mem.readiness.as_mut(),
            };
            let Some(state) = state else { continue };
            if kind == Kind::Startup && state.result == Some(true) {
                continue;
            }
            if state.next_run > now {
                let due = state.next_run - now;
                self.wake_within(due);
                continue;
            }
            let outcome = probes::run(
                self.cri(),
                &Handler::of_probe(probe),
                c,
                &latest.id,
                &ip,
                probes::timeout(probe),
            )
            .await;
            let mem = self.memory.entry(c.name.clone()).or_default();
            let state = match kind {
                Kind::Startup => mem.startup.as_mut(),
                Kind::Liveness => mem.liveness.as_mut(),
                Kind::Readiness => mem.readiness.as_mut(),
            };
            let Some(state) = state else { continue };
            state.record(probe, &outcome, Instant::now());
            let failed_for_good = state.result == Some(false);
            let next = state.next_run.saturating_duration_since(Instant::now());
            self.wake_within(next);
            if let Outcome::Failure(message) = &outcome {
                self.event(
                    &object,
                    EventType::Warning,
                    "Unhealthy",
                    &format!("{} probe failed: {message}", kind.title()),
                )
                .await;
            }
            if failed_for_good && kind != Kind::Readiness {
                let what = if kind == Kind::Liveness {
                    "liveness"
                } else {
                    "startup"
                };
                let message = format!(
                    "Container {} failed {what} probe, will be restarted",
                    c.name
                );
                let grace = probe.termination_grace_period_seconds;
                self.kill(pod, c, latest, &message, grace).await;
                return;
            }
        }
        let mem = self.memory.entry(c.name.clone()).or_default();
        let ready_probe = mem
            .readiness
            .as_ref()
            .is_none_or(|r| r.result == Some(true));
        mem.ready = started_ok(mem) && ready_probe;
    }

    /// Stops one container with a Killing event (liveness, definition change).
    async fn kill(
        &mut self,
        pod: &Pod,
        c: &Container,
        latest: &cri::ContainerStatus,
        message: &str,
        grace: Option<i64>,
    ) {
        let object = container_ref(pod, &c.name, false);
        self.event(&object, EventType::Normal, "Killing", message)
            .await;
        let mem = self.memory.entry(c.name.clone()).or_default();
        mem.ready = false;
        mem.instance = None;
        let grace = Duration::from_secs(
            grace
                .unwrap_or_else(|| spec::termination_grace_seconds(pod))
                .max(0) as u64,
        );
        if let Err(e) = self.cri().stop_container(&latest.id, grace).await {
            tracing::warn!(container = %latest.id, error = %e, "stopping a container");
        }
        self.wake_within(Duration::ZERO);
    }

    /// Stops every running container of the pod concurrently: preStop hook, then a Killing
    /// event and StopContainer with what is left of the grace period.
    async fn stop_running(&self, pod: &Pod, observed: &Observed, grace: Option<Duration>) {
        let grace = grace
            .unwrap_or_else(|| Duration::from_secs(spec::termination_grace_seconds(pod) as u64));
        let deadline = Instant::now() + grace;
        let pod_spec = pod.spec.clone().unwrap_or_default();
        let ip = self.pod_ips.first().cloned().unwrap_or_default();
        let stops = observed
            .containers
            .values()
            .flatten()
            .filter(|c| status::is_running(c))
            .map(|running| {
                let name = running
                    .metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default();
                let spec_container = spec::all_containers(&pod_spec)
                    .find(|c| c.name == name)
                    .cloned();
                let init = pod_spec
                    .init_containers
                    .iter()
                    .flatten()
                    .any(|c| c.name == name);
                let ip = ip.clone();
                async move {
                    if let Some(c) = &spec_container
                        && let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref())
                    {
                        let handler = Handler::of_hook(hook);
                        let left = deadline.saturating_duration_since(Instant::now());
                        let outcome = tokio::time::timeout(
                            left,
                            probes::run(
                                self.cri(),
                                &handler,
                                c,
                                &running.id,
                                &ip,
                                left.max(Duration::from_secs(1)),
                            ),
                        )
                        .await;
                        if let Ok(Outcome::Failure(message)) = outcome {
                            self.event(
                                &container_ref(pod, &name, init),
                                EventType::Warning,
                                "FailedPreStopHook",
                                &format!("PreStopHook failed: {message}"),
                            )
                            .await;
                        }
                    }
                    self.event(
                        &container_ref(pod, &name, init),
                        EventType::Normal,
                        "Killing",
                        &format!("Stopping container {name}"),
                    )
                    .await;
                    let left = deadline.saturating_duration_since(Instant::now());
                    if let Err(e) = self.cri().stop_container(&running.id, left).await {
                        tracing::warn!(container = %running.id, error = %e, "stopping a container");
                    }
                }
            });
        futures_util::future::join_all(stops).await;
    }

    /// Stops and removes everything of the pod: containers, sandboxes, volumes, logs.
    async fn teardown(&mut self, pod: Option<&Pod>) {
        let observed = match self.observe().await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(uid = %self.uid, error = %e, "listing the pod's containers for teardown");
                return;
            }
        };
        let sandboxes: Vec<&cri::PodSandbox> = observed
            .sandbox
            .iter()
            .chain(&observed.stale_sandboxes)
            .collect();
        if let Some(pod) = pod {
            self.stop_running(pod, &observed, None).await;
        } else {
            // The object is gone: stop with the grace period recorded on the sandbox.
            let grace = sandboxes
                .iter()
                .find_map(|s| s.annotations.get(labels::TERMINATION_GRACE))
                .and_then(|g| g.parse::<u64>().ok())
                .unwrap_or(30);
            for c in observed
                .containers
                .values()
                .flatten()
                .filter(|c| status::is_running(c))
            {
                let _ = self
                    .cri()
                    .stop_container(&c.id, Duration::from_secs(grace))
                    .await;
            }
        }
        for c in observed.containers.values().flatten() {
            if let Err(e) = self.cri().remove_container(&c.id).await {
                tracing::debug!(container = %c.id, error = %e, "removing a container");
            }
        }
        for s in &sandboxes {
            let _ = self.cri().stop_pod_sandbox(&s.id).await;
            if let Err(e) = self.cri().remove_pod_sandbox(&s.id).await {
                tracing::warn!(sandbox = %s.id, error = %e, "removing a sandbox");
            }
        }
        let root = self.kubelet.config.root_dir.clone();
        let uid = self.uid.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || volumes::teardown(&root, &uid))
            .await
            .unwrap_or(Ok(()))
        {
            tracing::warn!(uid = %self.uid, error = %e, "removing the pod's volumes");
        }
        let log_dir = match pod {
            Some(p) => Some(spec::pod_log_directory(&self.kubelet.config.pod_log_dir, p)),
            None => sandboxes
                .first()
                .and_then(|s| s.metadata.as_ref())
                .map(|m| {
                    self.kubelet
                        .config
                        .pod_log_dir
                        .join(format!("{}_{}_{}", m.namespace, m.name, m.uid))
                }),
        };
        if let Some(dir) = log_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        self.kubelet.tokens.forget(&self.uid);
    }

    /// The final delete: grace 0 with the UID precondition, so a same-named successor is safe.
    async fn final_delete(&self, pod: &Pod) {
        let api: Api<Pod> = Api::namespaced(
            self.kubelet.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api
            .delete(pod.metadata.name.as_deref().unwrap_or(""), &params)
            .await
        {
            Ok(_) => tracing::info!(pod = %pod_desc(pod), "pod terminated and deleted"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => tracing::warn!(pod = %pod_desc(pod), error = %e, "final pod delete"),
        }
    }

    fn termination_message(&self, c: &cri::ContainerStatus) -> Option<String> {
        if !status::is_exited(c) {
            return None;
        }
        let path = c.annotations.get(labels::TERMINATION_MESSAGE_PATH)?;
        let mount = c.mounts.iter().find(|m| &m.container_path == path)?;
        let mut text = std::fs::read(&mount.host_path).ok()?;
        text.truncate(4096);
        let text = String::from_utf8_lossy(&text).into_owned();
        (!text.is_empty()).then_some(text)
    }

    fn view(&self, pod: &Pod, observed: &Observed) -> PodView {
        let pod_spec = pod.spec.clone().unwrap_or_default();
        let make = |c: &Container| {
            let instances = observed.containers.get(&c.name);
            let latest = instances.and_then(|l| l.first()).cloned();
            let previous = instances.and_then(|l| l.get(1)).cloned();
            let mem = self.memory.get(&c.name);
            let running = latest.as_ref().is_some_and(status::is_running);
            let started = running
                && mem.is_none_or(|m| m.startup.as_ref().is_none_or(|s| s.result == Some(true)));
            ContainerView {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                termination_message: latest.as_ref().and_then(|l| self.termination_message(l)),
                previous_termination_message: previous
                    .as_ref()
                    .and_then(|l| self.termination_message(l)),
                waiting: if running {
                    None
                } else {
                    mem.and_then(|m| m.waiting.clone())
                },
                ready: running && mem.is_some_and(|m| m.ready) && self.terminal.is_none(),
                started,
                latest,
                previous,
            }
        };
        PodView {
            init: pod_spec
                .init_containers
                .iter()
                .flatten()
                .map(make)
                .collect(),
            containers: pod_spec.containers.iter().map(make).collect(),
            pod_ips: self.pod_ips.clone(),
            host_ips: vec![self.host_ip.clone()],
            sandbox_ready: observed.sandbox.is_some() && self.terminal.is_none(),
            terminal: self.terminal,
            runtime_name: self.runtime_name.clone(),
        }
    }

    async fn write_status(&self, pod: &Pod, observed: &Observed) -> anyhow::Result<()> {
        let view = self.view(pod, observed);
        let now = Time(crate::kubelet::now());
        let mut new = status::compute(pod, &view, &now);
        if view.pod_ips.is_empty() {
            // Keep the IPs a stopped (terminal) pod had.
            if let Some(old) = pod.status.as_ref() {
                new.pod_ip = old.pod_ip.clone();
                new.pod_ips = old.pod_ips.clone();
            }
        }
        let new_value = serde_json::to_value(&new)?;
        let old_value = serde_json::to_value(pod.status.clone().unwrap_or_default())?;
        if !differs(&old_value, &new_value) {
            return Ok(());
        }
        let api: Api<Pod> = Api::namespaced(
            self.kubelet.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let patch = serde_json::json!({ "status": new_value });
        match api
            .patch_status(
                pod.metadata.name.as_deref().unwrap_or(""),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether `new` differs from `old` in anything a sync acts on (not just status and
/// bookkeeping metadata such as resourceVersion or managedFields).
fn sync_relevant(old: &Pod, new: &Pod) -> bool {
    old.metadata.uid != new.metadata.uid
        || old.spec != new.spec
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || old.metadata.deletion_grace_period_seconds != new.metadata.deletion_grace_period_seconds
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
}

/// Whether `new` sets any top-level field to something other than what `old` has.
fn differs(old: &serde_json::Value, new: &serde_json::Value) -> bool {
    match new.as_object() {
        Some(fields) => fields.iter().any(|(k, v)| old.get(k) != Some(v)),
        None => old != new,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_only_updates_need_no_sync() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u", "resourceVersion": "1"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        }))
        .unwrap();
        let mut written = pod.clone();
        written.metadata.resource_version = Some("2".into());
        written.status =
            Some(serde_json::from_value(serde_json::json!({"phase": "Running"})).unwrap());
        assert!(!sync_relevant(&pod, &written));
        let mut deleted = written.clone();
        deleted.metadata.deletion_timestamp = Some(Time(crate::kubelet::now()));
        assert!(sync_relevant(&written, &deleted));
        let mut changed = written.clone();
        changed.spec.as_mut().unwrap().containers[0].image = Some("busybox:2".into());
        assert!(sync_relevant(&written, &changed));
    }

    #[test]
    fn durations_read_like_go() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(40)), "40s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
    }

    #[test]
    fn status_diff_ignores_fields_we_do_not_set() {
        let old = serde_json::json!({"phase": "Running", "resize": "x"});
        assert!(!differs(&old, &serde_json::json!({"phase": "Running"})));
        assert!(differs(&old, &serde_json::json!({"phase": "Failed"})));
    }

    #[test]
    fn container_hash_is_stable_and_sensitive() {
        let a: Container =
            serde_json::from_value(serde_json::json!({"name": "c", "image": "busybox:1"})).unwrap();
        let b: Container =
            serde_json::from_value(serde_json::json!({"name": "c", "image": "busybox:2"})).unwrap();
        assert_eq!(container_hash(&a), container_hash(&a.clone()));
        assert_ne!(container_hash(&a), container_hash(&b));
    }
}
