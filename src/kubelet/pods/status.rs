//! The Pod status the kubelet reports, computed from what CRI says about the pod's containers
//! plus what only the kubelet knows (why a container is waiting, probe readiness): phase,
//! conditions, container statuses, IPs, start time and QoS class. Pure; the worker writes it.

use std::time::SystemTime;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::spec;
use crate::kubelet::{from_nanos, labels};

/// What the worker knows about one container of the spec.
#[derive(Clone, Debug, Default)]
pub struct ContainerView {
    pub name: String,
    pub image: String,
    /// The newest CRI instance and the one before it (for `lastState`).
    pub latest: Option<cri::ContainerStatus>,
    pub previous: Option<cri::ContainerStatus>,
    /// Why the container is waiting, when the kubelet knows (ErrImagePull, CrashLoopBackOff, …).
    pub waiting: Option<(String, String)>,
    pub ready: bool,
    pub started: bool,
    /// The termination message read from the container's termination-log file.
    pub termination_message: Option<String>,
    pub previous_termination_message: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct PodView {
    pub init: Vec<ContainerView>,
    pub containers: Vec<ContainerView>,
    pub pod_ips: Vec<String>,
    pub host_ips: Vec<String>,
    pub sandbox_ready: bool,
    /// Set once the pod reached Succeeded or Failed.
    pub terminal: Option<&'static str>,
    /// `containerd`, for `containerID: containerd://…`.
    pub runtime_name: String,
}

fn state_of(c: &cri::ContainerStatus) -> i32 {
    c.state
}

pub fn is_running(c: &cri::ContainerStatus) -> bool {
    state_of(c) == cri::ContainerState::ContainerRunning as i32
}

pub fn is_exited(c: &cri::ContainerStatus) -> bool {
    state_of(c) == cri::ContainerState::ContainerExited as i32
}

/// The restart count a CRI instance carries (our annotation, else its attempt).
pub fn restart_count(c: &cri::ContainerStatus) -> i32 {
    c.annotations
        .get(labels::RESTART_COUNT)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| c.metadata.as_ref().map(|m| m.attempt as i32).unwrap_or(0))
}

fn terminated(
    c: &cri::ContainerStatus,
    runtime: &str,
    message: Option<&String>,
) -> ContainerStateTerminated {
    let reason = if !c.reason.is_empty() {
        c.reason.clone()
    } else if c.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    };
    let mut text = c.message.clone();
    if let Some(m) = message.filter(|m| !m.is_empty()) {
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(m);
    }
    ContainerStateTerminated {
        exit_code: c.exit_code,
        reason: Some(reason),
        message: (!text.is_empty()).then_some(text),
        started_at: from_nanos(c.started_at),
        finished_at: from_nanos(c.finished_at),
        container_id: Some(format!("{runtime}://{}", c.id)),
        signal: None,
    }
}

fn waiting(reason: &str, message: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_string()),
            message: (!message.is_empty()).then(|| message.to_string()),
        }),
        ..Default::default()
    }
}

/// A container's status entry.
pub fn container_status(
    view: &ContainerView,
    runtime: &str,
    default_waiting: &str,
) -> ContainerStatus {
    let terminated_state = |c: &cri::ContainerStatus, m: Option<&String>| ContainerState {
        terminated: Some(terminated(c, runtime, m)),
        ..Default::default()
    };
    let (state, last_state) = match &view.latest {
        None => (
            view.waiting
                .as_ref()
                .map(|(r, m)| waiting(r, m))
                .unwrap_or_else(|| waiting(default_waiting, "")),
            None,
        ),
        Some(latest) => {
            let previous = view
                .previous
                .as_ref()
                .filter(|p| is_exited(p))
                .map(|p| terminated_state(p, view.previous_termination_message.as_ref()));
            if is_running(latest) {
                (
                    ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: from_nanos(latest.started_at),
                        }),
                        ..Default::default()
                    },
                    previous,
                )
            } else if is_exited(latest) {
                match &view.waiting {
                    Some((r, m)) => (
                        waiting(r, m),
                        Some(terminated_state(latest, view.termination_message.as_ref())),
                    ),
                    None => (
                        terminated_state(latest, view.termination_message.as_ref()),
                        previous,
                    ),
                }
            } else {
                let (r, m) = view
                    .waiting
                    .clone()
                    .unwrap_or_else(|| ("ContainerCreating".into(), String::new()));
                (waiting(&r, &m), previous)
            }
        }
    };
    let latest = view.latest.as_ref();
    ContainerStatus {
        name: view.name.clone(),
        image: view.image.clone(),
        image_id: latest.map(|c| c.image_ref.clone()).unwrap_or_default(),
        container_id: latest.map(|c| format!("{runtime}://{}", c.id)),
        ready: view.ready,
        started: Some(view.started),
        restart_count: latest.map(restart_count).unwrap_or(0),
        state: Some(state),
        last_state: Some(last_state.unwrap_or_default()),
        ..Default::default()
    }
}

/// The phase by the kubelet's `getPhase` rules.
pub fn phase(pod: &Pod, view: &PodView) -> &'static str {
    if let Some(t) = view.terminal {
        return t;
    }
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    for init in &view.init {
        match &init.latest {
            Some(c) if is_exited(c) && c.exit_code == 0 => continue,
            Some(c) if is_exited(c) && policy == "Never" => return "Failed",
            _ => return "Pending",
        }
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &view.containers {
        match &c.latest {
            Some(s) if is_running(s) => running += 1,
            Some(s) if is_exited(s) => {
                if c.waiting.is_some() {
                    // Waiting to restart after a termination counts as stopped.
                    stopped += 1;
                } else {
                    stopped += 1;
                    if s.exit_code == 0 {
                        succeeded += 1;
                    }
                }
            }
            Some(_) => waiting += 1,
            None => {
                if c.previous.is_some() {
                    stopped += 1;
                } else {
                    waiting += 1;
                }
            }
        }
    }
    if waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped > 0 {
        return match policy {
            "Always" => "Running",
            _ if stopped == succeeded => "Succeeded",
            "Never" => "Failed",
            _ => "Running",
        };
    }
    "Pending"
}

fn condition(kind: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: kind.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: reason.map(str::to_string),
        message,
        ..Default::default()
    }
}

/// The whole status, keeping transition times and start time from `pod.status`.
pub fn compute(pod: &Pod, view: &PodView, now: &Time) -> PodStatus {
    let old = pod.status.clone().unwrap_or_default();
    let runtime = if view.runtime_name.is_empty() {
        "containerd"
    } else {
        view.runtime_name.as_str()
    };
    let phase = phase(pod, view);
    let init_done: Vec<&ContainerView> = view
        .init
        .iter()
        .filter(|c| {
            !c.latest
                .as_ref()
                .is_some_and(|s| is_exited(s) && s.exit_code == 0)
        })
        .collect();
    let initialized = init_done.is_empty();
    let unready: Vec<&str> = view
        .containers
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    let completed = phase == "Succeeded" || phase == "Failed";
    let mut conditions = vec![
        condition("PodReadyToStartContainers", view.sandbox_ready, None, None),
        if initialized {
            condition(
                "Initialized",
                true,
                completed
                    .then_some("PodCompleted")
                    .filter(|_| phase == "Succeeded"),
                None,
            )
        } else {
            condition(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!(
                    "containers with incomplete status: [{}]",
                    init_done
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                )),
            )
        },
    ];
    let containers_ready = unready.is_empty() && !completed;
    let (reason, message) = if completed {
        (Some("PodCompleted"), None)
    } else if !unready.is_empty() {
        (
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    } else {
        (None, None)
    };
    conditions.push(condition(
        "ContainersReady",
        containers_ready,
        reason,
        message.clone(),
    ));
    // Readiness gates: every gate's condition must be True for the pod to be Ready.
    let old_conditions = old.conditions.clone().unwrap_or_default();
    let gates: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|g| g.condition_type)
        .collect();
    let missing_gates: Vec<&String> = gates
        .iter()
        .filter(|g| {
            !old_conditions
                .iter()
                .any(|c| &c.type_ == *g && c.status == "True")
        })
        .collect();
    let ready = if !containers_ready {
        condition("Ready", false, reason, message)
    } else if let Some(gate) = missing_gates.first() {
        condition(
            "Ready",
            false,
            Some("ReadinessGatesNotReady"),
            Some(format!(
                "corresponding condition of pod readiness gate \"{gate}\" does not exist."
            )),
        )
    } else {
        condition("Ready", true, None, None)
    };
    conditions.push(ready);
    conditions.push(condition("PodScheduled", true, None, None));
    // Conditions owned by others (readiness gates, DisruptionTarget) are kept as they are.
    let ours = [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodScheduled",
    ];
    for c in &mut conditions {
        let previous = old_conditions.iter().find(|o| o.type_ == c.type_);
        c.last_transition_time = match previous {
            Some(o) if o.status == c.status && o.last_transition_time.is_some() => {
                o.last_transition_time.clone()
            }
            _ => Some(now.clone()),
        };
        c.last_probe_time = None;
    }
    conditions.extend(
        old_conditions
            .iter()
            .filter(|c| !ours.contains(&c.type_.as_str()))
            .cloned(),
    );

    let init_statuses: Vec<ContainerStatus> = view
        .init
        .iter()
        .map(|c| container_status(c, runtime, "PodInitializing"))
        .collect();
    let app_default = if initialized {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let statuses: Vec<ContainerStatus> = view
        .containers
        .iter()
        .map(|c| container_status(c, runtime, app_default))
        .collect();
    let spec = pod.spec.as_ref();
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        host_ip: view.host_ips.first().cloned(),
        host_ips: (!view.host_ips.is_empty()).then(|| {
            view.host_ips
                .iter()
                .map(|ip| HostIP { ip: ip.clone() })
                .collect()
        }),
        pod_ip: view.pod_ips.first().cloned(),
        pod_ips: (!view.pod_ips.is_empty()).then(|| {
            view.pod_ips
                .iter()
                .map(|ip| PodIP { ip: ip.clone() })
                .collect()
        }),
        start_time: old.start_time.clone().or_else(|| Some(now.clone())),
        qos_class: Some(
            spec.map(spec::qos_class)
                .unwrap_or(spec::QosClass::BestEffort)
                .as_str()
                .to_string(),
        ),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        message: old.message.clone(),
        reason: old.reason.clone(),
        nominated_node_name: old.nominated_node_name.clone(),
        ..Default::default()
    }
}

/// Seconds since the epoch of a CRI nanosecond time, as a `SystemTime`.
pub fn system_time(nanos: i64) -> Option<SystemTime> {
    (nanos > 0).then(|| SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(nanos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cri_container(
        id: &str,
        state: cri::ContainerState,
        exit: i32,
        attempt: u32,
    ) -> cri::ContainerStatus {
        cri::ContainerStatus {
            id: id.into(),
            metadata: Some(cri::ContainerMetadata {
                name: "c".into(),
                attempt,
            }),
            state: state as i32,
            started_at: 1_700_000_000_000_000_000,
            finished_at: if state == cri::ContainerState::ContainerExited {
                1_700_000_010_000_000_000
            } else {
                0
            },
            exit_code: exit,
            image_ref: "sha256:abc".into(),
            ..Default::default()
        }
    }

    fn pod(policy: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"restartPolicy": policy, "containers": [{"name": "c", "image": "busybox:1"}]}})).unwrap()
    }

    fn view(
        latest: Option<cri::ContainerStatus>,
        waiting: Option<(&str, &str)>,
        ready: bool,
    ) -> PodView {
        PodView {
            containers: vec![ContainerView {
                name: "c".into(),
                image: "busybox:1".into(),
                latest,
                waiting: waiting.map(|(a, b)| (a.to_string(), b.to_string())),
                ready,
                started: ready,
                ..Default::default()
            }],
            pod_ips: vec!["10.42.0.9".into()],
            host_ips: vec!["192.168.0.2".into()],
            sandbox_ready: true,
            runtime_name: "containerd".into(),
            ..Default::default()
        }
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_100).unwrap())
    }

    #[test]
    fn running_pod() {
        let p = pod("Always");
        let v = view(
            Some(cri_container(
                "abc",
                cri::ContainerState::ContainerRunning,
                0,
                0,
            )),
            None,
            true,
        );
        let s = compute(&p, &v, &now());
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.42.0.9"));
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.container_id.as_deref(), Some("containerd://abc"));
        assert!(cs.state.as_ref().unwrap().running.is_some());
        let ready = s
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
    }

    #[test]
    fn creating_and_crash_looping() {
        let p = pod("Always");
        let s = compute(&p, &view(None, None, false), &now());
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            cs.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("ContainerCreating")
        );
        let ready = s
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.reason.as_deref(), ready.message.as_deref()),
            (
                Some("ContainersNotReady"),
                Some("containers with unready status: [c]")
            )
        );

        let crashed = cri_container("x", cri::ContainerState::ContainerExited, 1, 3);
        let v = view(
            Some(crashed),
            Some((
                "CrashLoopBackOff",
                "back-off 40s restarting failed container=c pod=p_default(u)",
            )),
            false,
        );
        let s = compute(&p, &v, &now());
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.restart_count, 3);
        assert_eq!(
            cs.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("CrashLoopBackOff")
        );
        let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    }

    #[test]
    fn jobs_end_succeeded_or_failed() {
        let ok = view(
            Some(cri_container(
                "x",
                cri::ContainerState::ContainerExited,
                0,
                0,
            )),
            None,
            false,
        );
        assert_eq!(phase(&pod("Never"), &ok), "Succeeded");
        assert_eq!(phase(&pod("OnFailure"), &ok), "Succeeded");
        let bad = view(
            Some(cri_container(
                "x",
                cri::ContainerState::ContainerExited,
                2,
                0,
            )),
            None,
            false,
        );
        assert_eq!(phase(&pod("Never"), &bad), "Failed");
        assert_eq!(phase(&pod("OnFailure"), &bad), "Running");
        let s = compute(&pod("Never"), &ok, &now());
        let t = s.container_statuses.as_ref().unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .clone()
            .unwrap();
        assert_eq!(t.reason.as_deref(), Some("Completed"));
        let ready = s
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.reason.as_deref(), Some("PodCompleted"));
    }

    #[test]
    fn init_containers_gate_the_pod() {
        let mut p = pod("Always");
        p.spec.as_mut().unwrap().init_containers = Some(vec![
            serde_json::from_value(json!({"name": "init", "image": "busybox:1"})).unwrap(),
        ]);
        let mut v = view(None, None, false);
        v.init = vec![ContainerView {
            name: "init".into(),
            image: "busybox:1".into(),
            latest: Some(cri_container(
                "i",
                cri::ContainerState::ContainerRunning,
                0,
                0,
            )),
            ..Default::default()
        }];
        let s = compute(&p, &v, &now());
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let init = s
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Initialized")
            .unwrap();
        assert_eq!(
            (init.status.as_str(), init.message.as_deref()),
            ("False", Some("containers with incomplete status: [init]"))
        );
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            cs.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("PodInitializing")
        );
    }

    #[test]
    fn transition_times_are_kept() {
        let mut p = pod("Always");
        let v = view(
            Some(cri_container(
                "abc",
                cri::ContainerState::ContainerRunning,
                0,
                0,
            )),
            None,
            true,
        );
        let first = compute(&p, &v, &now());
        p.status = Some(first.clone());
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(1_700_009_999).unwrap());
        let second = compute(&p, &v, &later);
        assert_eq!(
            serde_json::to_value(&first).unwrap(),
            serde_json::to_value(&second).unwrap(),
            "unchanged status is identical"
        );
    }
}
