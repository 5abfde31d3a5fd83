//! `/pods` (the node's pods as CRI sees them, as a v1 PodList) and `/stats/summary` (the
//! kubelet's Summary API shape: node CPU/memory from /proc, pod and container CPU/memory from
//! CRI `ListContainerStats`), which is what metrics-server and `kubectl top` read.

use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_cri::v1 as cri;
use serde_json::{Value, json};

use super::cri::{
    LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, Runtime,
    restart_count,
};

/// The previous node CPU sample, to turn cumulative usage into a rate.
#[derive(Default)]
pub struct CpuSampler {
    last: Mutex<Option<(std::time::Instant, u64)>>,
}

fn time_of(nanos: i64) -> String {
    jiff::Timestamp::from_second(nanos.div_euclid(1_000_000_000))
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

fn label<'a>(labels: &'a std::collections::HashMap<String, String>, key: &str) -> &'a str {
    labels.get(key).map_or("", String::as_str)
}

/// The node's pods: one item per pod sandbox (newest per pod), with its containers.
pub async fn pod_list(runtime: &mut Runtime) -> Result<Value, tonic::Status> {
    let runtime_name = runtime
        .version(cri::VersionRequest::default())
        .await
        .map(|v| v.into_inner().runtime_name)
        .unwrap_or_else(|_| "containerd".to_string());
    let sandboxes = runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest::default())
        .await?
        .into_inner()
        .items;
    let containers = runtime
        .list_containers(cri::ListContainersRequest::default())
        .await?
        .into_inner()
        .containers;
    // Newest sandbox per pod uid.
    let mut pods: BTreeMap<String, cri::PodSandbox> = BTreeMap::new();
    for sandbox in sandboxes {
        let uid = label(&sandbox.labels, LABEL_POD_UID).to_string();
        if uid.is_empty() {
            continue;
        }
        let newer = pods
            .get(&uid)
            .is_none_or(|s| s.created_at < sandbox.created_at);
        if newer {
            pods.insert(uid, sandbox);
        }
    }
    let mut items = Vec::new();
    for (uid, sandbox) in &pods {
        let mut mine: Vec<&cri::Container> = containers
            .iter()
            .filter(|c| c.pod_sandbox_id == sandbox.id)
            .collect();
        mine.sort_by_key(|c| {
            (
                label(&c.labels, LABEL_CONTAINER_NAME).to_string(),
                std::cmp::Reverse(c.created_at),
            )
        });
        mine.dedup_by_key(|c| label(&c.labels, LABEL_CONTAINER_NAME).to_string());
        let specs: Vec<Value> = mine
            .iter()
            .map(|c| {
                json!({
                    "name": label(&c.labels, LABEL_CONTAINER_NAME),
                    "image": c.image.as_ref().map_or("", |i| i.image.as_str()),
                })
            })
            .collect();
        let statuses: Vec<Value> = mine
            .iter()
            .map(|c| {
                let running = c.state == cri::ContainerState::ContainerRunning as i32;
                let state = if running {
                    json!({"running": {"startedAt": time_of(c.created_at)}})
                } else if c.state == cri::ContainerState::ContainerExited as i32 {
                    json!({"terminated": {"exitCode": 0, "reason": "Completed"}})
                } else {
                    json!({"waiting": {"reason": "ContainerCreating"}})
                };
                json!({
                    "name": label(&c.labels, LABEL_CONTAINER_NAME),
                    "containerID": format!("{runtime_name}://{}", c.id),
                    "image": c.image.as_ref().map_or("", |i| i.image.as_str()),
                    "imageID": c.image_ref,
                    "ready": running,
                    "started": running,
                    "restartCount": restart_count(c),
                    "state": state,
                })
            })
            .collect();
        let ready = sandbox.state == cri::PodSandboxState::SandboxReady as i32;
        items.push(json!({
            "metadata": {
                "name": label(&sandbox.labels, LABEL_POD_NAME),
                "namespace": label(&sandbox.labels, LABEL_POD_NAMESPACE),
                "uid": uid,
                "creationTimestamp": time_of(sandbox.created_at),
            },
            "spec": {"containers": specs},
            "status": {
                "phase": if ready { "Running" } else { "Succeeded" },
                "startTime": time_of(sandbox.created_at),
                "containerStatuses": statuses,
            },
        }));
    }
    Ok(json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}))
}

fn cpu_json(cpu: Option<&cri::CpuUsage>) -> Value {
    let Some(cpu) = cpu else { return json!({}) };
    let mut value = json!({"time": time_of(cpu.timestamp)});
    if let Some(v) = &cpu.usage_core_nano_seconds {
        value["usageCoreNanoSeconds"] = json!(v.value);
    }
    if let Some(v) = &cpu.usage_nano_cores {
        value["usageNanoCores"] = json!(v.value);
    }
    value
}

fn memory_json(memory: Option<&cri::MemoryUsage>) -> Value {
    let Some(memory) = memory else {
        return json!({});
    };
    let mut value = json!({"time": time_of(memory.timestamp)});
    for (key, field) in [
        ("workingSetBytes", &memory.working_set_bytes),
        ("availableBytes", &memory.available_bytes),
        ("usageBytes", &memory.usage_bytes),
        ("rssBytes", &memory.rss_bytes),
        ("pageFaults", &memory.page_faults),
        ("majorPageFaults", &memory.major_page_faults),
    ] {
        if let Some(v) = field {
            value[key] = json!(v.value);
        }
    }
    value
}

/// Node CPU time in use (all cores), in nanoseconds, from /proc/stat.
fn node_cpu_nanos() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let busy: u64 = fields
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    // USER_HZ is 100 on every Linux architecture we build for.
    Some(busy * 10_000_000)
}

fn node_memory() -> Value {
    let Ok(info) = std::fs::read_to_string("/proc/meminfo") else {
        return json!({});
    };
    let field = |name: &str| -> Option<u64> {
        info.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(':'))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kib| kib * 1024)
    };
    let (Some(total), Some(free), Some(available)) =
        (field("MemTotal"), field("MemFree"), field("MemAvailable"))
    else {
        return json!({});
    };
    json!({
        "time": now(),
        "availableBytes": available,
        "usageBytes": total.saturating_sub(free),
        "workingSetBytes": total.saturating_sub(available),
    })
}

/// The Summary API document.
pub async fn summary(
    runtime: &mut Runtime,
    node_name: &str,
    sampler: &CpuSampler,
) -> Result<Value, tonic::Status> {
    let stats = runtime
        .list_container_stats(cri::ListContainerStatsRequest::default())
        .await?
        .into_inner()
        .stats;
    let containers = runtime
        .list_containers(cri::ListContainersRequest::default())
        .await?
        .into_inner()
        .containers;
    let started: BTreeMap<&str, i64> = containers
        .iter()
        .map(|c| (c.id.as_str(), c.created_at))
        .collect();

    let mut node_cpu = json!({"time": now()});
    if let Some(total) = node_cpu_nanos() {
        node_cpu["usageCoreNanoSeconds"] = json!(total);
        let instant = std::time::Instant::now();
        if let Ok(mut last) = sampler.last.lock() {
            if let Some((then, before)) = *last {
                let elapsed = instant.duration_since(then).as_nanos() as u64;
                if elapsed > 0 && total >= before {
                    node_cpu["usageNanoCores"] =
                        json!(((total - before) as u128 * 1_000_000_000 / elapsed as u128) as u64);
                }
            }
            *last = Some((instant, total));
        }
    }

    // Group container stats by pod.
    let mut pods: BTreeMap<(String, String, String), Vec<&cri::ContainerStats>> = BTreeMap::new();
    for stat in &stats {
        let Some(attributes) = &stat.attributes else {
            continue;
        };
        let key = (
            label(&attributes.labels, LABEL_POD_NAMESPACE).to_string(),
            label(&attributes.labels, LABEL_POD_NAME).to_string(),
            label(&attributes.labels, LABEL_POD_UID).to_string(),
        );
        pods.entry(key).or_default().push(stat);
    }
    let pod_stats: Vec<Value> = pods
        .iter()
        .map(|((namespace, name, uid), stats)| {
            let mut cpu_total = 0u64;
            let mut cores_total = 0u64;
            let mut working_set = 0u64;
            let mut usage = 0u64;
            let mut start = i64::MAX;
            let containers: Vec<Value> = stats
                .iter()
                .map(|s| {
                    let attributes = s.attributes.as_ref();
                    let id = attributes.map_or("", |a| a.id.as_str());
                    let created = started.get(id).copied().unwrap_or(0);
                    start = start.min(created);
                    if let Some(cpu) = &s.cpu {
                        cpu_total += cpu.usage_core_nano_seconds.as_ref().map_or(0, |v| v.value);
                        cores_total += cpu.usage_nano_cores.as_ref().map_or(0, |v| v.value);
                    }
                    if let Some(memory) = &s.memory {
                        working_set += memory.working_set_bytes.as_ref().map_or(0, |v| v.value);
                        usage += memory.usage_bytes.as_ref().map_or(0, |v| v.value);
                    }
                    json!({
                        "name": attributes.and_then(|a| a.metadata.as_ref()).map_or("", |m| m.name.as_str()),
                        "startTime": time_of(created),
                        "cpu": cpu_json(s.cpu.as_ref()),
                        "memory": memory_json(s.memory.as_ref()),
                    })
                })
                .collect();
            json!({
                "podRef": {"name": name, "namespace": namespace, "uid": uid},
                "startTime": time_of(if start == i64::MAX { 0 } else { start }),
                "containers": containers,
                "cpu": {"time": now(), "usageCoreNanoSeconds": cpu_total, "usageNanoCores": cores_total},
                "memory": {"time": now(), "workingSetBytes": working_set, "usageBytes": usage},
            })
        })
        .collect();
    Ok(json!({
        "node": {
            "nodeName": node_name,
            "cpu": node_cpu,
            "memory": node_memory(),
        },
        "pods": pod_stats,
    }))
}
