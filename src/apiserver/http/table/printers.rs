//! Row cells for each built-in printer, ported from kube-apiserver's
//! `pkg/printers/internalversion/printers.go` (and kube-aggregator's APIService
//! convertor). The server always prints "wide", so every row carries the
//! priority-1 cells too; kubectl hides those columns unless `-o wide`.
//!
//! Objects arrive as their v1 JSON (as stored), so fields the API server would
//! have defaulted are defaulted here the same way (e.g. a Deployment without
//! `spec.replicas` has 1). Pure functions; no store, no HTTP.

use serde_json::{Value, json};

use super::columns::Printer;
use super::duration::{Timestamp, human_duration_nanos, parse_rfc3339, since};
use super::format::{
    arr_at, bool_at, bool_ptr_string, container_cells, format_label_selector, format_labels,
    int_at, int_or_string, label_selector_string, len_at, obj_at, opt_bool_at, opt_int_at, or_else,
    str_at,
};

const NONE: &str = "<none>";
const UNSET: &str = "<unset>";

/// A timestamp field (`metav1.Time` / `metav1.MicroTime`); `None` if unset or
/// unparseable.
fn ts(v: &Value, key: &str) -> Option<Timestamp> {
    v.get(key).and_then(Value::as_str).and_then(parse_rfc3339)
}

fn meta(obj: &Value) -> &Value {
    obj.get("metadata").unwrap_or(&Value::Null)
}

fn name(obj: &Value) -> String {
    str_at(meta(obj), "name").to_string()
}

/// The AGE cell: `translateTimestampSince(obj.CreationTimestamp)`.
fn age(obj: &Value, now: i64) -> String {
    since(ts(meta(obj), "creationTimestamp"), now)
}

fn has_deletion_timestamp(obj: &Value) -> bool {
    meta(obj)
        .get("deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn spec(obj: &Value) -> &Value {
    obj.get("spec").unwrap_or(&Value::Null)
}

fn status(obj: &Value) -> &Value {
    obj.get("status").unwrap_or(&Value::Null)
}

/// `obj.spec.template.spec.containers` (or `.spec.jobTemplate...` via `template`).
fn template_containers(template: &Value) -> &[Value] {
    arr_at(spec(template), "containers")
}

/// Cells for one object of a built-in printer.
pub(crate) fn cells(p: Printer, obj: &Value, now: i64) -> Vec<Value> {
    use Printer::*;
    match p {
        Pod => pod(obj, now),
        PodTemplate => {
            let t = obj.get("template").unwrap_or(&Value::Null);
            let (names, images) = container_cells(template_containers(t));
            vec![
                json!(name(obj)),
                json!(names),
                json!(images),
                json!(format_labels(obj_at(meta(t), "labels"))),
            ]
        }
        PodDisruptionBudget => {
            let sp = spec(obj);
            let or_na = |key: &str| match sp.get(key) {
                None | Some(Value::Null) => "N/A".to_string(),
                Some(v) => int_or_string(v),
            };
            vec![
                json!(name(obj)),
                json!(or_na("minAvailable")),
                json!(or_na("maxUnavailable")),
                json!(int_at(status(obj), "disruptionsAllowed")),
                json!(age(obj, now)),
            ]
        }
        ReplicationController => {
            let sp = spec(obj);
            let st = status(obj);
            let (names, images) =
                container_cells(template_containers(spec_template(obj, "template")));
            vec![
                json!(name(obj)),
                json!(opt_int_at(sp, "replicas").unwrap_or(1)),
                json!(int_at(st, "replicas")),
                json!(int_at(st, "readyReplicas")),
                json!(age(obj, now)),
                json!(names),
                json!(images),
                json!(format_labels(obj_at(sp, "selector"))),
            ]
        }
        ReplicaSet => {
            let sp = spec(obj);
            let st = status(obj);
            let (names, images) =
                container_cells(template_containers(spec_template(obj, "template")));
            vec![
                json!(name(obj)),
                json!(opt_int_at(sp, "replicas").unwrap_or(1)),
                json!(int_at(st, "replicas")),
                json!(int_at(st, "readyReplicas")),
                json!(age(obj, now)),
                json!(names),
                json!(images),
                json!(format_label_selector(sp.get("selector"))),
            ]
        }
        DaemonSet => {
            let st = status(obj);
            let t = spec_template(obj, "template");
            let (names, images) = container_cells(template_containers(t));
            vec![
                json!(name(obj)),
                json!(int_at(st, "desiredNumberScheduled")),
                json!(int_at(st, "currentNumberScheduled")),
                json!(int_at(st, "numberReady")),
                json!(int_at(st, "updatedNumberScheduled")),
                json!(int_at(st, "numberAvailable")),
                json!(format_labels(obj_at(spec(t), "nodeSelector"))),
                json!(age(obj, now)),
                json!(names),
                json!(images),
                json!(format_label_selector(spec(obj).get("selector"))),
            ]
        }
        Job => job(obj, now),
        CronJob => {
            let sp = spec(obj);
            let last_schedule = match ts(status(obj), "lastScheduleTime") {
                Some(t) => since(Some(t), now),
                None => NONE.to_string(),
            };
            let job_template = sp.get("jobTemplate").unwrap_or(&Value::Null);
            let (names, images) =
                container_cells(template_containers(spec_template(job_template, "template")));
            vec![
                json!(name(obj)),
                json!(str_at(sp, "schedule")),
                json!(ptr_str(sp, "timeZone", NONE)),
                json!(bool_ptr_string(opt_bool_at(sp, "suspend"))),
                json!(len_at(status(obj), "active")),
                json!(last_schedule),
                json!(age(obj, now)),
                json!(names),
                json!(images),
                json!(format_label_selector(spec(job_template).get("selector"))),
            ]
        }
        Service => service(obj, now),
        Ingress => {
            let sp = spec(obj);
            let ports = if arr_at(sp, "tls").is_empty() {
                "80"
            } else {
                "80, 443"
            };
            vec![
                json!(name(obj)),
                json!(
                    sp.get("ingressClassName")
                        .and_then(Value::as_str)
                        .unwrap_or(NONE)
                ),
                json!(ingress_hosts(arr_at(sp, "rules"))),
                json!(load_balancer_ingress(status(obj))),
                json!(ports),
                json!(age(obj, now)),
            ]
        }
        IngressClass => {
            let sp = spec(obj);
            let parameters = match sp.get("parameters") {
                Some(p) if p.is_object() => {
                    let mut s = str_at(p, "kind").to_string();
                    if let Some(g) = p.get("apiGroup").and_then(Value::as_str) {
                        s = format!("{s}.{g}");
                    }
                    format!("{s}/{}", str_at(p, "name"))
                }
                _ => NONE.to_string(),
            };
            vec![
                json!(name(obj)),
                json!(str_at(sp, "controller")),
                json!(parameters),
                json!(age(obj, now)),
            ]
        }
        StatefulSet => {
            let (names, images) =
                container_cells(template_containers(spec_template(obj, "template")));
            vec![
                json!(name(obj)),
                json!(format!(
                    "{}/{}",
                    int_at(status(obj), "readyReplicas"),
                    opt_int_at(spec(obj), "replicas").unwrap_or(1)
                )),
                json!(age(obj, now)),
                json!(names),
                json!(images),
            ]
        }
        Endpoints => vec![
            json!(name(obj)),
            json!(format_endpoints(arr_at(obj, "subsets"))),
            json!(age(obj, now)),
        ],
        Node => node(obj, now),
        Event => event(obj, now),
        Namespace => vec![
            json!(name(obj)),
            json!(str_at(status(obj), "phase")),
            json!(age(obj, now)),
        ],
        Secret => vec![
            json!(name(obj)),
            json!(str_at(obj, "type")),
            json!(len_at(obj, "data")),
            json!(age(obj, now)),
        ],
        ServiceAccount => vec![
            json!(name(obj)),
            json!(len_at(obj, "secrets")),
            json!(age(obj, now)),
        ],
        PersistentVolume => persistent_volume(obj, now),
        PersistentVolumeClaim => persistent_volume_claim(obj, now),
        ComponentStatus => {
            let mut st = ("Unknown", "", "");
            if let Some(c) = arr_at(obj, "conditions")
                .iter()
                .find(|c| str_at(c, "type") == "Healthy")
            {
                let health = if str_at(c, "status") == "True" {
                    "Healthy"
                } else {
                    "Unhealthy"
                };
                st = (health, str_at(c, "message"), str_at(c, "error"));
            }
            vec![json!(name(obj)), json!(st.0), json!(st.1), json!(st.2)]
        }
        Deployment => {
            let sp = spec(obj);
            let st = status(obj);
            let (names, images) =
                container_cells(template_containers(spec_template(obj, "template")));
            let selector = label_selector_string(sp.get("selector"))
                .unwrap_or_else(|()| "<invalid>".to_string());
            vec![
                json!(name(obj)),
                json!(format!(
                    "{}/{}",
                    int_at(st, "readyReplicas"),
                    opt_int_at(sp, "replicas").unwrap_or(1)
                )),
                json!(int_at(st, "updatedReplicas")),
                json!(int_at(st, "availableReplicas")),
                json!(age(obj, now)),
                json!(names),
                json!(images),
                json!(selector),
            ]
        }
        ConfigMap => vec![
            json!(name(obj)),
            json!(len_at(obj, "data") + len_at(obj, "binaryData")),
            json!(age(obj, now)),
        ],
        NetworkPolicy => vec![
            json!(name(obj)),
            json!(format_label_selector(Some(
                spec(obj).get("podSelector").unwrap_or(&json!({}))
            ))),
            json!(age(obj, now)),
        ],
        RoleBinding | ClusterRoleBinding => role_binding(obj, now),
        CertificateSigningRequest => csr(obj, now),
        Lease => vec![
            json!(name(obj)),
            json!(str_at(spec(obj), "holderIdentity")),
            json!(age(obj, now)),
        ],
        StorageClass => {
            let mut n = name(obj);
            let annotations = obj_at(meta(obj), "annotations");
            let is_default = annotations.is_some_and(|a| {
                [
                    "storageclass.kubernetes.io/is-default-class",
                    "storageclass.beta.kubernetes.io/is-default-class",
                ]
                .iter()
                .any(|k| a.get(*k).and_then(Value::as_str) == Some("true"))
            });
            if is_default {
                n.push_str(" (default)");
            }
            vec![
                json!(n),
                json!(str_at(obj, "provisioner")),
                json!(or_else(str_at(obj, "reclaimPolicy"), "Delete")),
                json!(or_else(str_at(obj, "volumeBindingMode"), "Immediate")),
                json!(bool_at(obj, "allowVolumeExpansion")),
                json!(age(obj, now)),
            ]
        }
        ControllerRevision => controller_revision(obj, now),
        ResourceQuota => resource_quota(obj, now),
        PriorityClass => vec![
            json!(name(obj)),
            json!(int_at(obj, "value")),
            json!(bool_at(obj, "globalDefault")),
            json!(age(obj, now)),
            json!(str_at(obj, "preemptionPolicy")),
        ],
        RuntimeClass => vec![
            json!(name(obj)),
            json!(str_at(obj, "handler")),
            json!(age(obj, now)),
        ],
        VolumeAttachment => {
            let sp = spec(obj);
            let pv = sp
                .get("source")
                .map(|s| str_at(s, "persistentVolumeName"))
                .unwrap_or("");
            vec![
                json!(name(obj)),
                json!(str_at(sp, "attacher")),
                json!(pv),
                json!(str_at(sp, "nodeName")),
                json!(bool_at(status(obj), "attached")),
                json!(age(obj, now)),
            ]
        }
        EndpointSlice => vec![
            json!(name(obj)),
            json!(str_at(obj, "addressType")),
            json!(discovery_ports(arr_at(obj, "ports"))),
            json!(discovery_endpoints(arr_at(obj, "endpoints"))),
            json!(age(obj, now)),
        ],
        CsiNode => vec![
            json!(name(obj)),
            json!(len_at(spec(obj), "drivers")),
            json!(age(obj, now)),
        ],
        CsiDriver => {
            let sp = spec(obj);
            let token_requests = match sp.get("tokenRequests").and_then(Value::as_array) {
                Some(list) => list
                    .iter()
                    .map(|t| str_at(t, "audience"))
                    .collect::<Vec<_>>()
                    .join(","),
                None => UNSET.to_string(),
            };
            let modes: Vec<&str> = arr_at(sp, "volumeLifecycleModes")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let modes = if modes.is_empty() {
                NONE.to_string()
            } else {
                modes.join(",")
            };
            vec![
                json!(name(obj)),
                json!(opt_bool_at(sp, "attachRequired").unwrap_or(true)),
                json!(bool_at(sp, "podInfoOnMount")),
                json!(bool_at(sp, "storageCapacity")),
                json!(token_requests),
                json!(bool_at(sp, "requiresRepublish")),
                json!(modes),
                json!(age(obj, now)),
            ]
        }
        CsiStorageCapacity => {
            let capacity = match obj.get("capacity") {
                None | Some(Value::Null) => UNSET.to_string(),
                Some(v) => int_or_string(v),
            };
            vec![
                json!(name(obj)),
                json!(str_at(obj, "storageClassName")),
                json!(capacity),
            ]
        }
        MutatingWebhookConfiguration | ValidatingWebhookConfiguration => vec![
            json!(name(obj)),
            json!(len_at(obj, "webhooks")),
            json!(age(obj, now)),
        ],
        ServiceCidr => {
            let cidrs: Vec<&str> = arr_at(spec(obj), "cidrs")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            vec![
                json!(name(obj)),
                json!(cidrs.join(",")),
                json!(age(obj, now)),
            ]
        }
        ApiService => api_service(obj, now),
    }
}

/// A Go `*string` field: its value when set (even if empty), else `unset`.
fn ptr_str<'a>(v: &'a Value, key: &str, unset: &'a str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or(unset)
}

/// `obj.spec.<key>` (a pod template), or null.
fn spec_template<'a>(obj: &'a Value, key: &str) -> &'a Value {
    spec(obj).get(key).unwrap_or(&Value::Null)
}

/// Row conditions kube-apiserver attaches to a row (`metav1.TableRow.Conditions`):
/// only pods that finished get one, `Completed` with reason Succeeded/Failed.
pub(crate) fn row_conditions(p: Printer, obj: &Value) -> Vec<Value> {
    if p != Printer::Pod {
        return Vec::new();
    }
    let (reason, message) = match str_at(status(obj), "phase") {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return Vec::new(),
    };
    vec![json!({"type": "Completed", "status": "True", "reason": reason, "message": message})]
}

// ---------------------------------------------------------------------------
// Pods

fn is_restartable_init_container(init_containers: &[Value], name: &str) -> bool {
    init_containers
        .iter()
        .find(|c| str_at(c, "name") == name)
        .is_some_and(|c| str_at(c, "restartPolicy") == "Always")
}

/// `lastState.terminated.finishedAt` of a container status.
fn last_terminated_at(cs: &Value) -> Option<Timestamp> {
    cs.get("lastState")
        .and_then(|s| s.get("terminated"))
        .and_then(|t| ts(t, "finishedAt"))
        .filter(|t| !t.is_zero())
}

fn later(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn state<'a>(cs: &'a Value, which: &str) -> Option<&'a Value> {
    cs.get("state")
        .and_then(|s| s.get(which))
        .filter(|v| !v.is_null())
}

fn condition_true(conditions: &[Value], type_: &str) -> bool {
    conditions
        .iter()
        .find(|c| str_at(c, "type") == type_)
        .is_some_and(|c| str_at(c, "status") == "True")
}

/// `printPod`: NAME READY STATUS RESTARTS AGE | IP NODE NOMINATED NODE READINESS GATES.
fn pod(pod: &Value, now: i64) -> Vec<Value> {
    let sp = spec(pod);
    let st = status(pod);
    let init_containers = arr_at(sp, "initContainers");
    let conditions = arr_at(st, "conditions");

    let mut restarts: i64 = 0;
    let mut restartable_init_restarts: i64 = 0;
    let mut total = arr_at(sp, "containers").len();
    let mut ready = 0usize;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_restartable_init_restart: Option<Timestamp> = None;

    let phase = str_at(st, "phase");
    let mut reason = or_else(str_at(st, "reason"), phase).to_string();

    // A pod held by scheduling gates shows SchedulingGated.
    if conditions
        .iter()
        .any(|c| str_at(c, "type") == "PodScheduled" && str_at(c, "reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".to_string();
    }

    total += init_containers
        .iter()
        .filter(|c| str_at(c, "restartPolicy") == "Always")
        .count();

    let mut initializing = false;
    for (i, cs) in arr_at(st, "initContainerStatuses").iter().enumerate() {
        let restart_count = int_at(cs, "restartCount");
        restarts += restart_count;
        last_restart = later(last_restart, last_terminated_at(cs));
        let restartable = is_restartable_init_container(init_containers, str_at(cs, "name"));
        if restartable {
            restartable_init_restarts += restart_count;
            last_restartable_init_restart =
                later(last_restartable_init_restart, last_terminated_at(cs));
        }
        let terminated = state(cs, "terminated");
        let waiting = state(cs, "waiting");
        if terminated.is_some_and(|t| int_at(t, "exitCode") == 0) {
            continue;
        }
        if restartable && bool_at(cs, "started") {
            if bool_at(cs, "ready") {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = terminated {
            // Initialization failed.
            let r = str_at(t, "reason");
            reason = if !r.is_empty() {
                format!("Init:{r}")
            } else if int_at(t, "signal") != 0 {
                format!("Init:Signal:{}", int_at(t, "signal"))
            } else {
                format!("Init:ExitCode:{}", int_at(t, "exitCode"))
            };
        } else if let Some(w) = waiting.filter(|w| {
            let r = str_at(w, "reason");
            !r.is_empty() && r != "PodInitializing"
        }) {
            reason = format!("Init:{}", str_at(w, "reason"));
        } else {
            reason = format!("Init:{}/{}", i, init_containers.len());
        }
        initializing = true;
        break;
    }

    if !initializing || condition_true(conditions, "Initialized") {
        restarts = restartable_init_restarts;
        last_restart = last_restartable_init_restart;
        let mut has_running = false;
        for cs in arr_at(st, "containerStatuses").iter().rev() {
            restarts += int_at(cs, "restartCount");
            last_restart = later(last_restart, last_terminated_at(cs));
            let waiting_reason = state(cs, "waiting").map(|w| str_at(w, "reason"));
            let terminated = state(cs, "terminated");
            if let Some(r) = waiting_reason.filter(|r| !r.is_empty()) {
                reason = r.to_string();
            } else if let Some(t) = terminated {
                let r = str_at(t, "reason");
                reason = if !r.is_empty() {
                    r.to_string()
                } else if int_at(t, "signal") != 0 {
                    format!("Signal:{}", int_at(t, "signal"))
                } else {
                    format!("ExitCode:{}", int_at(t, "exitCode"))
                };
            } else if bool_at(cs, "ready") && state(cs, "running").is_some() {
                has_running = true;
                ready += 1;
            }
        }
        // Back to Running if at least one container still reports running.
        if reason == "Completed" && has_running {
            let pod_ready = conditions
                .iter()
                .any(|c| str_at(c, "type") == "Ready" && str_at(c, "status") == "True");
            reason = if pod_ready {
                "Running".to_string()
            } else {
                "NotReady".to_string()
            };
        }
    }

    if has_deletion_timestamp(pod) && str_at(st, "reason") == "NodeLost" {
        reason = "Unknown".to_string();
    } else if has_deletion_timestamp(pod) && phase != "Failed" && phase != "Succeeded" {
        reason = "Terminating".to_string();
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };

    let pod_ip = arr_at(st, "podIPs")
        .first()
        .map(|p| str_at(p, "ip"))
        .unwrap_or_else(|| str_at(st, "podIP"));
    let readiness_gates = arr_at(sp, "readinessGates");
    let gates = if readiness_gates.is_empty() {
        NONE.to_string()
    } else {
        let true_conditions = readiness_gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| str_at(c, "type") == str_at(g, "conditionType"))
                    .is_some_and(|c| str_at(c, "status") == "True")
            })
            .count();
        format!("{true_conditions}/{}", readiness_gates.len())
    };

    vec![
        json!(name(pod)),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        json!(age(pod, now)),
        json!(or_else(pod_ip, NONE)),
        json!(or_else(str_at(sp, "nodeName"), NONE)),
        json!(or_else(str_at(st, "nominatedNodeName"), NONE)),
        json!(gates),
    ]
}

// ---------------------------------------------------------------------------
// Workloads

/// `printJob`: NAME STATUS COMPLETIONS DURATION AGE | CONTAINERS IMAGES SELECTOR.
fn job(obj: &Value, now: i64) -> Vec<Value> {
    let sp = spec(obj);
    let st = status(obj);
    let succeeded = int_at(st, "succeeded");
    let completions = match opt_int_at(sp, "completions") {
        Some(c) => format!("{succeeded}/{c}"),
        None => {
            let parallelism = opt_int_at(sp, "parallelism").unwrap_or(0);
            if parallelism > 1 {
                format!("{succeeded}/1 of {parallelism}")
            } else {
                format!("{succeeded}/1")
            }
        }
    };
    let duration = match (ts(st, "startTime"), ts(st, "completionTime")) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration_nanos(start.nanos_until(now)),
        (Some(start), Some(end)) => {
            let d = i128::from(end.secs - start.secs) * 1_000_000_000 + i128::from(end.nanos)
                - i128::from(start.nanos);
            human_duration_nanos(d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
        }
    };
    let conditions = arr_at(st, "conditions");
    // hasJobCondition looks only at the first condition of a type.
    let has = |t: &str| condition_true(conditions, t);
    let status = if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if has_deletion_timestamp(obj) {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = container_cells(template_containers(spec_template(obj, "template")));
    vec![
        json!(name(obj)),
        json!(status),
        json!(completions),
        json!(duration),
        json!(age(obj, now)),
        json!(names),
        json!(images),
        json!(format_label_selector(sp.get("selector"))),
    ]
}

/// `printControllerRevision`: NAME CONTROLLER REVISION AGE.
fn controller_revision(obj: &Value, now: i64) -> Vec<Value> {
    let controller = arr_at(meta(obj), "ownerReferences")
        .iter()
        .find(|r| bool_at(r, "controller"));
    let controller_name = match controller {
        None => NONE.to_string(),
        Some(r) => {
            let api_version = str_at(r, "apiVersion");
            let group = match api_version.split_once('/') {
                Some((g, _)) => g,
                None => "",
            };
            let kind = str_at(r, "kind");
            let name = str_at(r, "name");
            if kind.is_empty() && group.is_empty() {
                name.to_string()
            } else if group.is_empty() {
                format!("{}/{name}", kind.to_lowercase())
            } else {
                format!("{}/{name}", format!("{kind}.{group}").to_lowercase())
            }
        }
    };
    vec![
        json!(name(obj)),
        json!(controller_name),
        json!(int_at(obj, "revision")),
        json!(age(obj, now)),
    ]
}

// ---------------------------------------------------------------------------
// Networking

/// The sorted, de-duplicated IPs (or hostnames) of `status.loadBalancer.ingress`,
/// unclipped since the server prints wide.
fn load_balancer_ingress(status: &Value) -> String {
    let mut set: Vec<&str> = status
        .get("loadBalancer")
        .map(|lb| arr_at(lb, "ingress"))
        .unwrap_or(&[])
        .iter()
        .filter_map(|i| {
            let ip = str_at(i, "ip");
            let host = str_at(i, "hostname");
            if !ip.is_empty() {
                Some(ip)
            } else if !host.is_empty() {
                Some(host)
            } else {
                None
            }
        })
        .collect();
    set.sort_unstable();
    set.dedup();
    set.join(",")
}

/// `printService`: NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE | SELECTOR.
fn service(obj: &Value, now: i64) -> Vec<Value> {
    let sp = spec(obj);
    let svc_type = or_else(str_at(sp, "type"), "ClusterIP");
    let cluster_ip = arr_at(sp, "clusterIPs")
        .first()
        .and_then(Value::as_str)
        .unwrap_or_else(|| str_at(sp, "clusterIP"));
    let external_ips: Vec<&str> = arr_at(sp, "externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let external_ip = match svc_type {
        "ClusterIP" | "NodePort" => {
            if external_ips.is_empty() {
                NONE.to_string()
            } else {
                external_ips.join(",")
            }
        }
        "LoadBalancer" => {
            let lb = load_balancer_ingress(status(obj));
            if !external_ips.is_empty() {
                let mut all: Vec<&str> = if lb.is_empty() {
                    Vec::new()
                } else {
                    lb.split(',').collect()
                };
                all.extend(external_ips);
                all.join(",")
            } else if !lb.is_empty() {
                lb
            } else {
                "<pending>".to_string()
            }
        }
        "ExternalName" => str_at(sp, "externalName").to_string(),
        _ => "<unknown>".to_string(),
    };
    let ports: Vec<String> = arr_at(sp, "ports")
        .iter()
        .map(|p| {
            let port = int_at(p, "port");
            let proto = or_else(str_at(p, "protocol"), "TCP");
            let node_port = int_at(p, "nodePort");
            if node_port > 0 {
                format!("{port}:{node_port}/{proto}")
            } else {
                format!("{port}/{proto}")
            }
        })
        .collect();
    let ports = if ports.is_empty() {
        NONE.to_string()
    } else {
        ports.join(",")
    };
    vec![
        json!(name(obj)),
        json!(svc_type),
        json!(or_else(cluster_ip, NONE)),
        json!(external_ip),
        json!(ports),
        json!(age(obj, now)),
        json!(format_labels(obj_at(sp, "selector"))),
    ]
}

/// `formatEndpoints(endpoints, nil)`: up to three "ip:port" then "+ N more...".
fn format_endpoints(subsets: &[Value]) -> String {
    if subsets.is_empty() {
        return NONE.to_string();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0usize;
    for ss in subsets {
        let addresses = arr_at(ss, "addresses");
        let ports = arr_at(ss, "ports");
        if ports.is_empty() {
            // Headless services may have no ports.
            count += addresses.len();
            for a in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(str_at(a, "ip").to_string());
            }
            continue;
        }
        for port in ports {
            count += addresses.len();
            for a in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(join_host_port(str_at(a, "ip"), int_at(port, "port")));
            }
        }
    }
    let ret = list.join(",");
    if more {
        format!("{ret} + {} more...", count - MAX)
    } else {
        ret
    }
}

/// Go's `net.JoinHostPort`: brackets around hosts containing a colon (IPv6).
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn list_with_more(list: Vec<String>, more: bool, count: usize, max: usize) -> String {
    let ret = list.join(",");
    if more {
        return format!("{ret} + {} more...", count - max);
    }
    if ret.is_empty() {
        return UNSET.to_string();
    }
    ret
}

/// `formatDiscoveryPorts`.
fn discovery_ports(ports: &[Value]) -> String {
    const MAX: usize = 3;
    let mut list = Vec::new();
    let mut more = false;
    for p in ports {
        if list.len() < MAX {
            let port = match (p.get("port").and_then(Value::as_i64), p.get("name")) {
                (Some(n), _) => n.to_string(),
                (None, Some(Value::String(n))) => n.clone(),
                _ => "*".to_string(),
            };
            list.push(port);
        } else if list.len() == MAX {
            more = true;
        }
    }
    list_with_more(list, more, ports.len(), MAX)
}

/// `formatDiscoveryEndpoints`.
fn discovery_endpoints(endpoints: &[Value]) -> String {
    const MAX: usize = 3;
    let mut list = Vec::new();
    let mut more = false;
    let mut count = 0;
    for e in endpoints {
        for a in arr_at(e, "addresses").iter().filter_map(Value::as_str) {
            if list.len() < MAX {
                list.push(a.to_string());
            } else if list.len() == MAX {
                more = true;
            }
            count += 1;
        }
    }
    list_with_more(list, more, count, MAX)
}

/// `formatHosts` of an Ingress.
fn ingress_hosts(rules: &[Value]) -> String {
    const MAX: usize = 3;
    let mut list: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if list.len() == MAX {
            more = true;
        }
        let host = str_at(rule, "host");
        if !more && !host.is_empty() {
            list.push(host);
        }
    }
    if list.is_empty() {
        return "*".to_string();
    }
    let ret = list.join(",");
    if more {
        format!("{ret} + {} more...", rules.len() - MAX)
    } else {
        ret
    }
}

// ---------------------------------------------------------------------------
// Cluster

/// `printNode`: NAME STATUS ROLES AGE VERSION | INTERNAL-IP EXTERNAL-IP OS-IMAGE
/// KERNEL-VERSION CONTAINER-RUNTIME.
fn node(obj: &Value, now: i64) -> Vec<Value> {
    let st = status(obj);
    // The last Ready condition wins, as with the printer's condition map.
    let ready = arr_at(st, "conditions")
        .iter()
        .rev()
        .find(|c| str_at(c, "type") == "Ready");
    let mut status = vec![match ready {
        Some(c) if str_at(c, "status") == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if bool_at(spec(obj), "unschedulable") {
        status.push("SchedulingDisabled");
    }

    let mut roles: Vec<String> = obj_at(meta(obj), "labels")
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                (!role.is_empty()).then(|| role.to_string())
            } else if k == "kubernetes.io/role" {
                v.as_str().filter(|v| !v.is_empty()).map(str::to_string)
            } else {
                None
            }
        })
        .collect();
    roles.sort();
    roles.dedup();
    let roles = if roles.is_empty() {
        NONE.to_string()
    } else {
        roles.join(",")
    };

    let address = |t: &str| {
        arr_at(st, "addresses")
            .iter()
            .find(|a| str_at(a, "type") == t)
            .map(|a| str_at(a, "address"))
            .unwrap_or(NONE)
            .to_string()
    };
    let info = st.get("nodeInfo").unwrap_or(&Value::Null);
    let unknown = |k: &str| or_else(str_at(info, k), "<unknown>").to_string();
    vec![
        json!(name(obj)),
        json!(status.join(",")),
        json!(roles),
        json!(age(obj, now)),
        json!(str_at(info, "kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(unknown("osImage")),
        json!(unknown("kernelVersion")),
        json!(unknown("containerRuntimeVersion")),
    ]
}

/// `printEvent` for core/v1 and events.k8s.io/v1 events (same internal type):
/// LAST SEEN TYPE REASON OBJECT | SUBOBJECT SOURCE | MESSAGE | FIRST SEEN COUNT NAME.
fn event(obj: &Value, now: i64) -> Vec<Value> {
    // events.k8s.io/v1 renames most fields; accept either shape.
    let field = |core: &str, events: &str| obj.get(core).or_else(|| obj.get(events));
    let time = |core: &str, events: &str| {
        field(core, events)
            .and_then(Value::as_str)
            .and_then(parse_rfc3339)
            .filter(|t| !t.is_zero())
    };

    let event_time = time("eventTime", "eventTime");
    let first = match time("firstTimestamp", "deprecatedFirstTimestamp") {
        Some(t) => since(Some(t), now),
        None => since(event_time, now),
    };
    let mut last = match time("lastTimestamp", "deprecatedLastTimestamp") {
        Some(t) => since(Some(t), now),
        None => first.clone(),
    };
    let mut count = field("count", "deprecatedCount")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    match obj.get("series").filter(|s| s.is_object()) {
        Some(series) => {
            last = since(ts(series, "lastObservedTime"), now);
            count = int_at(series, "count");
        }
        // Singleton events don't have a count set in the new API.
        None if count == 0 => count = 1,
        None => {}
    }

    let involved = field("involvedObject", "regarding").unwrap_or(&Value::Null);
    let kind = str_at(involved, "kind").to_lowercase();
    let involved_name = str_at(involved, "name");
    let target = if involved_name.is_empty() {
        kind
    } else {
        format!("{kind}/{involved_name}")
    };

    let source = field("source", "deprecatedSource").unwrap_or(&Value::Null);
    let component = or_else(
        str_at(source, "component"),
        field("reportingComponent", "reportingController")
            .and_then(Value::as_str)
            .unwrap_or(""),
    );
    let host = or_else(str_at(source, "host"), str_at(obj, "reportingInstance"));
    let source = if host.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {host}")
    };
    let message = field("message", "note")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim();

    vec![
        json!(last),
        json!(str_at(obj, "type")),
        json!(str_at(obj, "reason")),
        json!(target),
        json!(str_at(involved, "fieldPath")),
        json!(source),
        json!(message),
        json!(first),
        json!(count),
        json!(name(obj)),
    ]
}

/// `helper.GetAccessModesAsString`: RWO, ROX, RWX, RWOP in that order.
fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|v| v.as_str() == Some(m));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(m, _)| has(m))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// A `resource.Quantity` as printed; Go's zero Quantity prints "0".
fn quantity(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "0".to_string(),
        Some(v) => int_or_string(v),
    }
}

const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

fn storage_class_annotation(obj: &Value) -> Option<&str> {
    obj_at(meta(obj), "annotations")
        .and_then(|a| a.get(BETA_STORAGE_CLASS_ANNOTATION))
        .and_then(Value::as_str)
}

/// `printPersistentVolume`.
fn persistent_volume(obj: &Value, now: i64) -> Vec<Value> {
    let sp = spec(obj);
    let claim = match sp.get("claimRef").filter(|c| c.is_object()) {
        Some(c) => format!("{}/{}", str_at(c, "namespace"), str_at(c, "name")),
        None => String::new(),
    };
    let phase = if has_deletion_timestamp(obj) {
        "Terminating"
    } else {
        str_at(status(obj), "phase")
    };
    let class = storage_class_annotation(obj).unwrap_or_else(|| str_at(sp, "storageClassName"));
    vec![
        json!(name(obj)),
        json!(quantity(sp.get("capacity").and_then(|c| c.get("storage")))),
        json!(access_modes(arr_at(sp, "accessModes"))),
        json!(str_at(sp, "persistentVolumeReclaimPolicy")),
        json!(phase),
        json!(claim),
        json!(class),
        json!(ptr_str(sp, "volumeAttributesClassName", UNSET)),
        json!(str_at(status(obj), "reason")),
        json!(age(obj, now)),
        json!(ptr_str(sp, "volumeMode", UNSET)),
    ]
}

/// `printPersistentVolumeClaim`.
fn persistent_volume_claim(obj: &Value, now: i64) -> Vec<Value> {
    let sp = spec(obj);
    let st = status(obj);
    let phase = if has_deletion_timestamp(obj) {
        "Terminating"
    } else {
        str_at(st, "phase")
    };
    let volume = str_at(sp, "volumeName");
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            quantity(st.get("capacity").and_then(|c| c.get("storage"))),
            access_modes(arr_at(st, "accessModes")),
        )
    };
    let class = storage_class_annotation(obj).unwrap_or_else(|| str_at(sp, "storageClassName"));
    vec![
        json!(name(obj)),
        json!(phase),
        json!(volume),
        json!(capacity),
        json!(modes),
        json!(class),
        json!(ptr_str(sp, "volumeAttributesClassName", UNSET)),
        json!(age(obj, now)),
        json!(ptr_str(sp, "volumeMode", UNSET)),
    ]
}

/// `printResourceQuota`: "resource: used/hard" pairs, limits.* in LIMIT.
fn resource_quota(obj: &Value, now: i64) -> Vec<Value> {
    let st = status(obj);
    let hard = obj_at(st, "hard");
    let used = st.get("used").unwrap_or(&Value::Null);
    let mut names: Vec<&String> = hard.map(|h| h.keys().collect()).unwrap_or_default();
    names.sort();
    let mut request = Vec::new();
    let mut limit = Vec::new();
    for resource in names {
        let text = format!(
            "{resource}: {}/{}",
            quantity(used.get(resource.as_str())),
            quantity(hard.and_then(|h| h.get(resource.as_str())))
        );
        let pieces: Vec<&str> = resource.split('.').collect();
        if pieces.len() > 1 && pieces[0] == "limits" {
            limit.push(text);
        } else {
            request.push(text);
        }
    }
    vec![
        json!(name(obj)),
        json!(request.join(", ")),
        json!(limit.join(", ")),
        json!(age(obj, now)),
    ]
}

/// `printRoleBinding` / `printClusterRoleBinding`: NAME ROLE AGE | USERS GROUPS
/// SERVICEACCOUNTS.
fn role_binding(obj: &Value, now: i64) -> Vec<Value> {
    let role_ref = obj.get("roleRef").unwrap_or(&Value::Null);
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for s in arr_at(obj, "subjects") {
        match str_at(s, "kind") {
            "ServiceAccount" => {
                sas.push(format!("{}/{}", str_at(s, "namespace"), str_at(s, "name")))
            }
            "User" => users.push(str_at(s, "name").to_string()),
            "Group" => groups.push(str_at(s, "name").to_string()),
            _ => {}
        }
    }
    vec![
        json!(name(obj)),
        json!(format!(
            "{}/{}",
            str_at(role_ref, "kind"),
            str_at(role_ref, "name")
        )),
        json!(age(obj, now)),
        json!(users.join(", ")),
        json!(groups.join(", ")),
        json!(sas.join(", ")),
    ]
}

/// `printCertificateSigningRequest`: NAME AGE SIGNERNAME REQUESTOR
/// REQUESTEDDURATION CONDITION.
fn csr(obj: &Value, now: i64) -> Vec<Value> {
    let sp = spec(obj);
    let st = status(obj);
    let conditions = arr_at(st, "conditions");
    let has = |t: &str| conditions.iter().any(|c| str_at(c, "type") == t);
    let mut condition = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_string();
    if has("Failed") {
        condition.push_str(",Failed");
    }
    if !str_at(st, "certificate").is_empty() {
        condition.push_str(",Issued");
    }
    let requested = match opt_int_at(sp, "expirationSeconds") {
        Some(secs) => super::duration::human_duration(secs),
        None => NONE.to_string(),
    };
    vec![
        json!(name(obj)),
        json!(age(obj, now)),
        json!(or_else(str_at(sp, "signerName"), NONE)),
        json!(str_at(sp, "username")),
        json!(requested),
        json!(condition),
    ]
}

/// kube-aggregator's APIService convertor: NAME SERVICE AVAILABLE AGE.
fn api_service(obj: &Value, now: i64) -> Vec<Value> {
    let service = match spec(obj).get("service").filter(|s| s.is_object()) {
        Some(s) => format!("{}/{}", str_at(s, "namespace"), str_at(s, "name")),
        None => "Local".to_string(),
    };
    let available = match arr_at(status(obj), "conditions")
        .iter()
        .find(|c| str_at(c, "type") == "Available")
    {
        None => "Unknown".to_string(),
        Some(c) => {
            let st = str_at(c, "status");
            let reason = str_at(c, "reason");
            if st == "True" || reason.is_empty() {
                st.to_string()
            } else {
                format!("{st} ({reason})")
            }
        }
    };
    vec![
        json!(name(obj)),
        json!(service),
        json!(available),
        json!(age(obj, now)),
    ]
}
