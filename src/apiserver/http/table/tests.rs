//! Tests for the table printers: realistic objects in, the cells kube-apiserver
//! would send out. Test-only; no store, no HTTP.

use serde_json::{Value, json};

use super::duration::{format_rfc3339, parse_rfc3339};
use super::*;

/// 2024-06-01T12:00:00Z.
const NOW: i64 = 1_717_243_200;

/// RFC 3339 for `secs` seconds before [`NOW`].
fn ago(secs: i64) -> String {
    format_rfc3339(NOW - secs)
}

fn cells(group: &str, resource: &str, obj: &Value) -> Vec<Value> {
    let cells = cells_for(group, resource, obj, NOW);
    assert_eq!(
        cells.len(),
        columns_for(group, resource).len(),
        "{group}/{resource}: one cell per column"
    );
    cells
}

fn names(cols: &[Column]) -> Vec<(&str, &str, i32)> {
    cols.iter()
        .map(|c| (c.name.as_str(), c.type_.as_str(), c.priority))
        .collect()
}

// ---------------------------------------------------------------------------
// Pods

fn pod(name: &str, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": ago(300)},
        "spec": spec,
        "status": status
    })
}

fn running(name: &str, restarts: i64) -> Value {
    json!({
        "name": name, "ready": true, "started": true, "restartCount": restarts,
        "image": "nginx:1.27", "imageID": "", "containerID": "containerd://abc",
        "state": {"running": {"startedAt": ago(200)}}
    })
}

#[test]
fn pod_columns_match_kube_apiserver() {
    let cols = columns_for("", "pods");
    assert_eq!(
        names(&cols),
        vec![
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
            ("Nominated Node", "string", 1),
            ("Readiness Gates", "string", 1),
        ]
    );
    assert_eq!(cols[0].format, "name");
    assert!(cols.iter().skip(1).all(|c| c.format.is_empty()));
    assert!(cols.iter().all(|c| !c.description.is_empty()));
}

#[test]
fn running_pod() {
    let p = pod(
        "web-7d4b9c5f8-x2x9q",
        json!({
            "nodeName": "node-a",
            "containers": [{"name": "web", "image": "nginx:1.27"}, {"name": "sidecar", "image": "busybox"}],
            "readinessGates": [{"conditionType": "example.com/lb-ready"}]
        }),
        json!({
            "phase": "Running",
            "podIP": "10.42.0.5",
            "podIPs": [{"ip": "10.42.0.5"}, {"ip": "fd00::5"}],
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "True"},
                {"type": "example.com/lb-ready", "status": "True"}
            ],
            "containerStatuses": [running("web", 0), running("sidecar", 0)]
        }),
    );
    assert_eq!(
        cells("", "pods", &p),
        vec![
            json!("web-7d4b9c5f8-x2x9q"),
            json!("2/2"),
            json!("Running"),
            json!("0"),
            json!("5m"),
            json!("10.42.0.5"),
            json!("node-a"),
            json!("<none>"),
            json!("1/1"),
        ]
    );
    assert!(row_conditions_for("", "pods", &p).is_empty());
}

#[test]
fn crash_loop_back_off_pod() {
    let p = pod(
        "crasher",
        json!({"nodeName": "node-b", "containers": [{"name": "app", "image": "app:1"}]}),
        json!({
            "phase": "Running",
            "podIP": "10.42.1.7",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{
                "name": "app", "ready": false, "started": false, "restartCount": 5,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 2m40s"}},
                "lastState": {"terminated": {
                    "exitCode": 1, "reason": "Error",
                    "startedAt": ago(200), "finishedAt": ago(190)
                }}
            }]
        }),
    );
    let c = cells("", "pods", &p);
    assert_eq!(c[1], json!("0/1"));
    assert_eq!(c[2], json!("CrashLoopBackOff"));
    assert_eq!(c[3], json!("5 (3m10s ago)"));
    // podIPs absent: falls back to podIP, as the v1 -> internal conversion does.
    assert_eq!(c[5], json!("10.42.1.7"));
    assert_eq!(c[8], json!("<none>"));
}

#[test]
fn init_container_pods() {
    let spec = json!({
        "initContainers": [{"name": "migrate", "image": "m"}, {"name": "warm", "image": "w"}],
        "containers": [{"name": "app", "image": "app"}]
    });
    let waiting_app = json!({
        "name": "app", "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": "PodInitializing"}}
    });
    let done = json!({
        "name": "migrate", "ready": true, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": ago(100)}}
    });

    // Second init container still running: Init:1/2.
    let p = pod(
        "init-running",
        spec.clone(),
        json!({
            "phase": "Pending",
            "conditions": [{"type": "Initialized", "status": "False"}],
            "initContainerStatuses": [done.clone(), {
                "name": "warm", "ready": false, "restartCount": 0,
                "state": {"running": {"startedAt": ago(50)}}
            }],
            "containerStatuses": [waiting_app.clone()]
        }),
    );
    let c = cells("", "pods", &p);
    assert_eq!(
        (&c[1], &c[2], &c[3]),
        (&json!("0/1"), &json!("Init:1/2"), &json!("0"))
    );
    assert_eq!(c[5], json!("<none>"));
    assert_eq!(c[6], json!("<none>"));

    // Crash-looping init container: Init:CrashLoopBackOff, its restarts count.
    let p = pod(
        "init-crash",
        spec.clone(),
        json!({
            "phase": "Pending",
            "initContainerStatuses": [{
                "name": "migrate", "ready": false, "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 2, "finishedAt": ago(45)}}
            }, {
                "name": "warm", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "PodInitializing"}}
            }],
            "containerStatuses": [waiting_app.clone()]
        }),
    );
    let c = cells("", "pods", &p);
    assert_eq!(
        (&c[2], &c[3]),
        (&json!("Init:CrashLoopBackOff"), &json!("3 (45s ago)"))
    );

    // Failed init container with and without a reason.
    let failed = |terminated: Value| {
        pod(
            "init-failed",
            spec.clone(),
            json!({
                "phase": "Pending",
                "initContainerStatuses": [{
                    "name": "migrate", "ready": false, "restartCount": 0,
                    "state": {"terminated": terminated}
                }],
                "containerStatuses": [waiting_app.clone()]
            }),
        )
    };
    let c = cells(
        "",
        "pods",
        &failed(json!({"exitCode": 1, "reason": "Error"})),
    );
    assert_eq!(c[2], json!("Init:Error"));
    let c = cells("", "pods", &failed(json!({"exitCode": 137})));
    assert_eq!(c[2], json!("Init:ExitCode:137"));
    let c = cells("", "pods", &failed(json!({"exitCode": 0, "signal": 9})));
    // Exit 0 counts as done and the next init container has no status yet, so
    // the (waiting) app container's reason shows.
    assert_eq!(c[2], json!("PodInitializing"));

    // First init container waiting without a reason: Init:0/2.
    let p = pod(
        "init-start",
        spec,
        json!({
            "phase": "Pending",
            "initContainerStatuses": [{
                "name": "migrate", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "PodInitializing"}}
            }]
        }),
    );
    assert_eq!(cells("", "pods", &p)[2], json!("Init:0/2"));
}

#[test]
fn sidecar_init_container_counts_towards_ready() {
    let p = pod(
        "with-sidecar",
        json!({
            "initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always"}],
            "containers": [{"name": "app", "image": "app"}]
        }),
        json!({
            "phase": "Running",
            "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
            "initContainerStatuses": [{
                "name": "proxy", "ready": true, "started": true, "restartCount": 2,
                "state": {"running": {"startedAt": ago(100)}},
                "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(130)}}
            }],
            "containerStatuses": [running("app", 1)]
        }),
    );
    let c = cells("", "pods", &p);
    assert_eq!(c[1], json!("2/2"));
    assert_eq!(c[2], json!("Running"));
    assert_eq!(c[3], json!("3 (2m10s ago)"));
}

#[test]
fn terminating_and_node_lost_pods() {
    let mut p = pod(
        "going-away",
        json!({"nodeName": "node-a", "containers": [{"name": "web", "image": "nginx"}]}),
        json!({"phase": "Running", "containerStatuses": [running("web", 0)]}),
    );
    p["metadata"]["deletionTimestamp"] = json!(ago(10));
    p["metadata"]["deletionGracePeriodSeconds"] = json!(30);
    assert_eq!(cells("", "pods", &p)[2], json!("Terminating"));

    p["status"]["reason"] = json!("NodeLost");
    assert_eq!(cells("", "pods", &p)[2], json!("Unknown"));

    // A finished pod being deleted keeps its terminal status.
    let mut done = completed_pod();
    done["metadata"]["deletionTimestamp"] = json!(ago(10));
    assert_eq!(cells("", "pods", &done)[2], json!("Completed"));

    // NodeLost without a deletion timestamp shows the reason as is.
    let lost = pod(
        "lost",
        json!({"containers": [{"name": "web", "image": "nginx"}]}),
        json!({"phase": "Unknown", "reason": "NodeLost"}),
    );
    assert_eq!(cells("", "pods", &lost)[2], json!("NodeLost"));
}

fn completed_pod() -> Value {
    pod(
        "pi-job-5x2kq",
        json!({"restartPolicy": "Never", "nodeName": "node-a", "containers": [{"name": "pi", "image": "perl"}]}),
        json!({
            "phase": "Succeeded",
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
            "containerStatuses": [{
                "name": "pi", "ready": false, "started": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": ago(60)}}
            }]
        }),
    )
}

#[test]
fn completed_job_pod() {
    let p = completed_pod();
    let c = cells("", "pods", &p);
    assert_eq!(
        (&c[1], &c[2], &c[3]),
        (&json!("0/1"), &json!("Completed"), &json!("0"))
    );
    assert_eq!(
        row_conditions_for("", "pods", &p),
        vec![json!({
            "type": "Completed", "status": "True", "reason": "Succeeded",
            "message": "The pod has completed successfully."
        })]
    );
}

#[test]
fn other_pod_statuses() {
    let containers =
        json!({"containers": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]});
    // One container completed, the other still running: Running / NotReady.
    let status = |ready: &str| {
        json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": ready}],
            "containerStatuses": [
                {"name": "a", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                running("b", 0)
            ]
        })
    };
    let p = pod("mixed", containers.clone(), status("True"));
    assert_eq!(cells("", "pods", &p)[2], json!("Running"));
    let p = pod("mixed", containers.clone(), status("False"));
    assert_eq!(cells("", "pods", &p)[2], json!("NotReady"));

    // Terminated by a signal without a reason.
    let p = pod(
        "killed",
        containers.clone(),
        json!({"phase": "Running", "containerStatuses": [
            {"name": "a", "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}}
        ]}),
    );
    assert_eq!(cells("", "pods", &p)[2], json!("Signal:9"));

    // Scheduling gates and plain pending pods.
    let p = pod(
        "gated",
        containers.clone(),
        json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
        ]}),
    );
    assert_eq!(cells("", "pods", &p)[2], json!("SchedulingGated"));
    let p = pod(
        "creating",
        containers,
        json!({"phase": "Pending", "nominatedNodeName": "node-c", "containerStatuses": [
            {"name": "a", "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}},
            {"name": "b", "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
        ]}),
    );
    let c = cells("", "pods", &p);
    assert_eq!(
        (&c[1], &c[2], &c[7]),
        (&json!("0/2"), &json!("ContainerCreating"), &json!("node-c"))
    );

    // Evicted pods show the status reason.
    let p = pod(
        "evicted",
        json!({"containers": [{"name": "a", "image": "a"}]}),
        json!({"phase": "Failed", "reason": "Evicted", "message": "low on memory"}),
    );
    assert_eq!(cells("", "pods", &p)[2], json!("Evicted"));
    assert_eq!(
        row_conditions_for("", "pods", &p)[0]["reason"],
        json!("Failed")
    );
}

// ---------------------------------------------------------------------------
// Nodes

fn node(name: &str, labels: Value, unschedulable: bool, ready: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "creationTimestamp": ago(3 * 86_400 + 5 * 3600)},
        "spec": {"podCIDR": "10.42.0.0/24", "unschedulable": unschedulable},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready, "reason": "KubeletReady"}
            ],
            "addresses": [
                {"type": "InternalIP", "address": "192.168.1.10"},
                {"type": "Hostname", "address": name}
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.30.2+k3rs1",
                "osImage": "Ubuntu 24.04 LTS",
                "kernelVersion": "6.8.0-31-generic",
                "containerRuntimeVersion": "containerd://1.7.17"
            }
        }
    })
}

#[test]
fn ready_control_plane_node() {
    let n = node(
        "server-0",
        json!({
            "kubernetes.io/hostname": "server-0",
            "node-role.kubernetes.io/control-plane": "true",
            "node-role.kubernetes.io/master": "true",
            "node-role.kubernetes.io/etcd": "true"
        }),
        false,
        "True",
    );
    assert_eq!(
        names(&columns_for("", "nodes")),
        vec![
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
            ("Internal-IP", "string", 1),
            ("External-IP", "string", 1),
            ("OS-Image", "string", 1),
            ("Kernel-Version", "string", 1),
            ("Container-Runtime", "string", 1),
        ]
    );
    assert_eq!(
        cells("", "nodes", &n),
        vec![
            json!("server-0"),
            json!("Ready"),
            json!("control-plane,etcd,master"),
            json!("3d5h"),
            json!("v1.30.2+k3rs1"),
            json!("192.168.1.10"),
            json!("<none>"),
            json!("Ubuntu 24.04 LTS"),
            json!("6.8.0-31-generic"),
            json!("containerd://1.7.17"),
        ]
    );
}

#[test]
fn unschedulable_not_ready_node() {
    let mut n = node(
        "agent-1",
        json!({"kubernetes.io/role": "worker"}),
        true,
        "Unknown",
    );
    n["status"]["nodeInfo"] = json!({"kubeletVersion": "v1.30.2+k3rs1"});
    n["status"]["addresses"] = json!([
        {"type": "InternalIP", "address": "192.168.1.11"},
        {"type": "ExternalIP", "address": "203.0.113.7"}
    ]);
    let c = cells("", "nodes", &n);
    assert_eq!(c[1], json!("NotReady,SchedulingDisabled"));
    assert_eq!(c[2], json!("worker"));
    assert_eq!(
        &c[5..],
        &[
            json!("192.168.1.11"),
            json!("203.0.113.7"),
            json!("<unknown>"),
            json!("<unknown>"),
            json!("<unknown>")
        ]
    );

    let mut bare = node("new", json!({}), false, "True");
    bare["status"]["conditions"] = json!([]);
    let c = cells("", "nodes", &bare);
    assert_eq!((&c[1], &c[2]), (&json!("Unknown"), &json!("<none>")));
}

// ---------------------------------------------------------------------------
// Services, endpoints

fn service(spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "creationTimestamp": ago(2 * 86_400)},
        "spec": spec,
        "status": status
    })
}

#[test]
fn services_of_each_type() {
    assert_eq!(
        columns_for("", "services")
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        vec![
            "Name",
            "Type",
            "Cluster-IP",
            "External-IP",
            "Port(s)",
            "Age",
            "Selector"
        ]
    );

    let cluster_ip = service(
        json!({
            "type": "ClusterIP", "clusterIP": "10.43.12.34", "clusterIPs": ["10.43.12.34"],
            "selector": {"app": "web", "tier": "frontend"},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
                      {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443}]
        }),
        json!({}),
    );
    assert_eq!(
        cells("", "services", &cluster_ip),
        vec![
            json!("web"),
            json!("ClusterIP"),
            json!("10.43.12.34"),
            json!("<none>"),
            json!("80/TCP,443/TCP"),
            json!("2d"),
            json!("app=web,tier=frontend"),
        ]
    );

    let node_port = service(
        json!({
            "type": "NodePort", "clusterIP": "10.43.0.20", "clusterIPs": ["10.43.0.20"],
            "externalIPs": ["198.51.100.1"],
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080},
                      {"port": 53, "protocol": "UDP", "nodePort": 30053}]
        }),
        json!({}),
    );
    let c = cells("", "services", &node_port);
    assert_eq!(
        (&c[3], &c[4], &c[6]),
        (
            &json!("198.51.100.1"),
            &json!("80:30080/TCP,53:30053/UDP"),
            &json!("<none>")
        )
    );

    let lb_spec = json!({
        "type": "LoadBalancer", "clusterIP": "10.43.0.30", "clusterIPs": ["10.43.0.30"],
        "ports": [{"port": 443, "protocol": "TCP", "nodePort": 31443}]
    });
    let pending = service(lb_spec.clone(), json!({"loadBalancer": {}}));
    assert_eq!(cells("", "services", &pending)[3], json!("<pending>"));

    let provisioned = service(
        lb_spec.clone(),
        json!({"loadBalancer": {"ingress": [
            {"ip": "203.0.113.20"}, {"hostname": "lb.example.com"}, {"ip": "203.0.113.10"}
        ]}}),
    );
    // Sorted, never clipped: the server prints wide.
    assert_eq!(
        cells("", "services", &provisioned)[3],
        json!("203.0.113.10,203.0.113.20,lb.example.com")
    );
    let mut with_external = lb_spec;
    with_external["externalIPs"] = json!(["198.51.100.9"]);
    let both = service(
        with_external,
        json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}),
    );
    assert_eq!(
        cells("", "services", &both)[3],
        json!("203.0.113.10,198.51.100.9")
    );

    let external_name = service(
        json!({"type": "ExternalName", "externalName": "db.example.com"}),
        json!({}),
    );
    let c = cells("", "services", &external_name);
    assert_eq!(
        (&c[2], &c[3], &c[4]),
        (&json!("<none>"), &json!("db.example.com"), &json!("<none>"))
    );

    let headless = service(
        json!({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"],
               "ports": [{"port": 5432}]}),
        json!({}),
    );
    let c = cells("", "services", &headless);
    assert_eq!((&c[2], &c[4]), (&json!("None"), &json!("5432/TCP")));
}

#[test]
fn endpoints_and_endpoint_slices() {
    let ep = json!({
        "metadata": {"name": "web", "creationTimestamp": ago(90)},
        "subsets": [{
            "addresses": [{"ip": "10.42.0.5"}, {"ip": "10.42.1.6"}],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                      {"name": "https", "port": 443, "protocol": "TCP"}]
        }]
    });
    assert_eq!(
        cells("", "endpoints", &ep),
        vec![
            json!("web"),
            json!("10.42.0.5:80,10.42.1.6:80,10.42.0.5:443 + 1 more..."),
            json!("90s")
        ]
    );
    let headless = json!({
        "metadata": {"name": "db"},
        "subsets": [{"addresses": [{"ip": "10.42.0.9"}, {"ip": "fd00::9"}]}]
    });
    assert_eq!(
        cells("", "endpoints", &headless)[1],
        json!("10.42.0.9,fd00::9")
    );
    let v6 = json!({"metadata": {"name": "v6"}, "subsets": [
        {"addresses": [{"ip": "fd00::9"}], "ports": [{"port": 80}]}
    ]});
    assert_eq!(cells("", "endpoints", &v6)[1], json!("[fd00::9]:80"));
    let empty = json!({"metadata": {"name": "none"}});
    assert_eq!(
        cells("", "endpoints", &empty),
        vec![json!("none"), json!("<none>"), json!("<unknown>")]
    );

    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-abc12", "creationTimestamp": ago(600)},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "metrics"}],
        "endpoints": [
            {"addresses": ["10.42.0.5"], "conditions": {"ready": true}},
            {"addresses": ["10.42.1.6"]}, {"addresses": ["10.42.2.7"]}, {"addresses": ["10.42.3.8"]}
        ]
    });
    assert_eq!(
        names(&columns_for("discovery.k8s.io", "endpointslices")),
        vec![
            ("Name", "string", 0),
            ("AddressType", "string", 0),
            ("Ports", "string", 0),
            ("Endpoints", "string", 0),
            ("Age", "string", 0)
        ]
    );
    assert_eq!(
        cells("discovery.k8s.io", "endpointslices", &slice),
        vec![
            json!("web-abc12"),
            json!("IPv4"),
            json!("80,metrics"),
            json!("10.42.0.5,10.42.1.6,10.42.2.7 + 1 more..."),
            json!("10m")
        ]
    );
    let empty = json!({"metadata": {"name": "e"}, "addressType": "IPv6"});
    assert_eq!(
        cells("discovery.k8s.io", "endpointslices", &empty)[2..4],
        [json!("<unset>"), json!("<unset>")]
    );
}

// ---------------------------------------------------------------------------
// Events

#[test]
fn core_event_with_count() {
    let ev = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "crasher.17d8c3a1b2", "namespace": "default", "creationTimestamp": ago(600)},
        "involvedObject": {"kind": "Pod", "name": "crasher", "namespace": "default",
                           "fieldPath": "spec.containers{app}"},
        "reason": "BackOff",
        "message": "Back-off restarting failed container app in pod crasher\n",
        "source": {"component": "kubelet", "host": "node-b"},
        "firstTimestamp": ago(600),
        "lastTimestamp": ago(125),
        "count": 7,
        "type": "Warning"
    });
    assert_eq!(
        names(&columns_for("", "events")),
        vec![
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Subobject", "string", 1),
            ("Source", "string", 1),
            ("Message", "string", 0),
            ("First Seen", "string", 1),
            ("Count", "string", 1),
            ("Name", "string", 1),
        ]
    );
    assert_eq!(columns_for("", "events")[9].format, "name");
    assert_eq!(
        cells("", "events", &ev),
        vec![
            json!("2m5s"),
            json!("Warning"),
            json!("BackOff"),
            json!("pod/crasher"),
            json!("spec.containers{app}"),
            json!("kubelet, node-b"),
            json!("Back-off restarting failed container app in pod crasher"),
            json!("10m"),
            json!(7),
            json!("crasher.17d8c3a1b2"),
        ]
    );
}

#[test]
fn new_style_events() {
    // events.k8s.io/v1 with a series: last seen and count come from the series.
    let ev = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "web.1", "namespace": "default"},
        "eventTime": "2024-06-01T11:00:00.000000Z",
        "series": {"count": 4, "lastObservedTime": "2024-06-01T11:58:00.123456Z"},
        "reportingController": "k3rs.io/scheduler",
        "reportingInstance": "server-0",
        "action": "Scheduling",
        "reason": "FailedScheduling",
        "regarding": {"kind": "Pod", "name": "web"},
        "note": "0/1 nodes are available",
        "type": "Warning"
    });
    assert_eq!(
        cells("events.k8s.io", "events", &ev),
        vec![
            json!("119s"),
            json!("Warning"),
            json!("FailedScheduling"),
            json!("pod/web"),
            json!(""),
            json!("k3rs.io/scheduler, server-0"),
            json!("0/1 nodes are available"),
            json!("60m"),
            json!(4),
            json!("web.1"),
        ]
    );

    // A core event with only eventTime: both ages from it, count 1.
    let ev = json!({
        "metadata": {"name": "n.1"},
        "eventTime": ago(30) .replace('Z', ".000000Z"),
        "reportingComponent": "k3rs-controller",
        "involvedObject": {"kind": "Node"},
        "reason": "RegisteredNode",
        "message": "Node registered",
        "type": "Normal"
    });
    let c = cells("", "events", &ev);
    assert_eq!(
        (&c[0], &c[3], &c[5], &c[7], &c[8]),
        (
            &json!("30s"),
            &json!("node"),
            &json!("k3rs-controller"),
            &json!("30s"),
            &json!(1)
        )
    );
}

// ---------------------------------------------------------------------------
// Workloads

fn template(containers: Value) -> Value {
    json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}})
}

#[test]
fn deployments_replicasets_statefulsets_daemonsets() {
    let containers =
        json!([{"name": "web", "image": "nginx:1.27"}, {"name": "log", "image": "fluent-bit:3"}]);
    let dep = json!({
        "metadata": {"name": "web", "creationTimestamp": ago(45 * 60)},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template(containers.clone())},
        "status": {"replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2}
    });
    assert_eq!(
        names(&columns_for("apps", "deployments")),
        vec![
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Up-to-date", "string", 0),
            ("Available", "string", 0),
            ("Age", "string", 0),
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1)
        ]
    );
    assert_eq!(
        cells("apps", "deployments", &dep),
        vec![
            json!("web"),
            json!("2/3"),
            json!(3),
            json!(2),
            json!("45m"),
            json!("web,log"),
            json!("nginx:1.27,fluent-bit:3"),
            json!("app=web")
        ]
    );
    // No replicas in spec: defaulted to 1. No status yet.
    let fresh = json!({"metadata": {"name": "new"}, "spec": {"template": template(json!([]))}});
    assert_eq!(
        cells("apps", "deployments", &fresh)[1..4],
        [json!("0/1"), json!(0), json!(0)]
    );

    let rs = json!({
        "metadata": {"name": "web-7d4b9c5f8", "creationTimestamp": ago(45 * 60)},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "7d4b9c5f8"}},
                 "template": template(containers.clone())},
        "status": {"replicas": 3, "readyReplicas": 2}
    });
    assert_eq!(
        cells("apps", "replicasets", &rs),
        vec![
            json!("web-7d4b9c5f8"),
            json!(3),
            json!(3),
            json!(2),
            json!("45m"),
            json!("web,log"),
            json!("nginx:1.27,fluent-bit:3"),
            json!("app=web,pod-template-hash=7d4b9c5f8")
        ]
    );
    assert_eq!(columns_for("apps", "replicasets")[1].type_, "integer");

    let sts = json!({
        "metadata": {"name": "db", "creationTimestamp": ago(8 * 86_400)},
        "spec": {"replicas": 3, "serviceName": "db", "template": template(json!([{"name": "pg", "image": "postgres:16"}]))},
        "status": {"replicas": 3, "readyReplicas": 3}
    });
    assert_eq!(
        cells("apps", "statefulsets", &sts),
        vec![
            json!("db"),
            json!("3/3"),
            json!("8d"),
            json!("pg"),
            json!("postgres:16")
        ]
    );

    let ds = json!({
        "metadata": {"name": "svclb-traefik", "creationTimestamp": ago(26 * 3600)},
        "spec": {
            "selector": {"matchLabels": {"app": "svclb-traefik"}},
            "template": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                                  "containers": [{"name": "lb-tcp-80", "image": "klipper-lb:v0.4"}]}}
        },
        "status": {"desiredNumberScheduled": 2, "currentNumberScheduled": 2, "numberReady": 1,
                   "updatedNumberScheduled": 2, "numberAvailable": 1}
    });
    assert_eq!(
        names(&columns_for("apps", "daemonsets")),
        vec![
            ("Name", "string", 0),
            ("Desired", "integer", 0),
            ("Current", "integer", 0),
            ("Ready", "integer", 0),
            ("Up-to-date", "integer", 0),
            ("Available", "integer", 0),
            ("Node Selector", "string", 0),
            ("Age", "string", 0),
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1)
        ]
    );
    assert_eq!(
        cells("apps", "daemonsets", &ds),
        vec![
            json!("svclb-traefik"),
            json!(2),
            json!(2),
            json!(1),
            json!(2),
            json!(1),
            json!("kubernetes.io/os=linux"),
            json!("26h"),
            json!("lb-tcp-80"),
            json!("klipper-lb:v0.4"),
            json!("app=svclb-traefik")
        ]
    );

    let rc = json!({
        "metadata": {"name": "legacy"},
        "spec": {"replicas": 2, "selector": {"app": "legacy"}},
        "status": {"replicas": 2, "readyReplicas": 1}
    });
    assert_eq!(
        cells("", "replicationcontrollers", &rc),
        vec![
            json!("legacy"),
            json!(2),
            json!(2),
            json!(1),
            json!("<unknown>"),
            json!(""),
            json!(""),
            json!("app=legacy")
        ]
    );
}

#[test]
fn jobs_and_cronjobs() {
    assert_eq!(
        names(&columns_for("batch", "jobs")),
        vec![
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Completions", "string", 0),
            ("Duration", "string", 0),
            ("Age", "string", 0),
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1)
        ]
    );
    let job = json!({
        "metadata": {"name": "pi", "creationTimestamp": ago(600)},
        "spec": {
            "completions": 1, "parallelism": 1,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "0b3c"}},
            "template": template(json!([{"name": "pi", "image": "perl:5.34"}]))
        },
        "status": {
            "startTime": ago(590), "completionTime": ago(553), "succeeded": 1,
            "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]
        }
    });
    assert_eq!(
        cells("batch", "jobs", &job),
        vec![
            json!("pi"),
            json!("Complete"),
            json!("1/1"),
            json!("37s"),
            json!("10m"),
            json!("pi"),
            json!("perl:5.34"),
            json!("batch.kubernetes.io/controller-uid=0b3c")
        ]
    );

    let work_queue = json!({
        "metadata": {"name": "queue", "creationTimestamp": ago(200)},
        "spec": {"parallelism": 3, "template": template(json!([]))},
        "status": {"startTime": ago(190), "active": 3, "succeeded": 0}
    });
    let c = cells("batch", "jobs", &work_queue);
    assert_eq!(
        c[1..4],
        [json!("Running"), json!("0/1 of 3"), json!("3m10s")]
    );

    let failed = json!({
        "metadata": {"name": "bad"},
        "spec": {"completions": 3, "template": template(json!([]))},
        "status": {"succeeded": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    });
    let c = cells("batch", "jobs", &failed);
    assert_eq!(c[1..4], [json!("Failed"), json!("1/3"), json!("")]);
    let suspended = json!({
        "metadata": {"name": "later"},
        "spec": {"suspend": true, "template": template(json!([]))},
        "status": {"conditions": [{"type": "Suspended", "status": "True"}]}
    });
    assert_eq!(
        cells("batch", "jobs", &suspended)[1..3],
        [json!("Suspended"), json!("0/1")]
    );
    let mut terminating = failed.clone();
    terminating["status"]["conditions"] = json!([]);
    terminating["metadata"]["deletionTimestamp"] = json!(ago(1));
    assert_eq!(
        cells("batch", "jobs", &terminating)[1],
        json!("Terminating")
    );

    assert_eq!(
        names(&columns_for("batch", "cronjobs")),
        vec![
            ("Name", "string", 0),
            ("Schedule", "string", 0),
            ("Timezone", "string", 0),
            ("Suspend", "boolean", 0),
            ("Active", "integer", 0),
            ("Last Schedule", "string", 0),
            ("Age", "string", 0),
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1)
        ]
    );
    let cron = json!({
        "metadata": {"name": "backup", "creationTimestamp": ago(30 * 86_400)},
        "spec": {
            "schedule": "*/5 * * * *", "suspend": false, "timeZone": "Etc/UTC",
            "jobTemplate": {"spec": {"template": template(json!([{"name": "backup", "image": "restic:0.16"}]))}}
        },
        "status": {"active": [{"name": "backup-28620000"}], "lastScheduleTime": ago(240)}
    });
    assert_eq!(
        cells("batch", "cronjobs", &cron),
        vec![
            json!("backup"),
            json!("*/5 * * * *"),
            json!("Etc/UTC"),
            json!("False"),
            json!(1),
            json!("4m"),
            json!("30d"),
            json!("backup"),
            json!("restic:0.16"),
            json!("<none>")
        ]
    );
    let never = json!({"metadata": {"name": "n"}, "spec": {"schedule": "@daily", "jobTemplate": {"spec": {}}}});
    assert_eq!(
        cells("batch", "cronjobs", &never)[2..6],
        [json!("<none>"), json!("<unset>"), json!(0), json!("<none>")]
    );
}

#[test]
fn controller_revisions() {
    let cr = json!({
        "metadata": {"name": "svclb-traefik-6f7d8b9c4", "creationTimestamp": ago(3600),
                     "ownerReferences": [
                         {"apiVersion": "v1", "kind": "Other", "name": "x"},
                         {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "svclb-traefik", "controller": true}
                     ]},
        "revision": 2
    });
    assert_eq!(
        cells("apps", "controllerrevisions", &cr),
        vec![
            json!("svclb-traefik-6f7d8b9c4"),
            json!("daemonset.apps/svclb-traefik"),
            json!(2),
            json!("60m")
        ]
    );
    let orphan = json!({"metadata": {"name": "o"}, "revision": 1});
    assert_eq!(
        cells("apps", "controllerrevisions", &orphan)[1],
        json!("<none>")
    );
    let core_owner = json!({"metadata": {"name": "c", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "controller": true}
    ]}});
    assert_eq!(
        cells("apps", "controllerrevisions", &core_owner)[1],
        json!("pod/p")
    );
}

// ---------------------------------------------------------------------------
// Config, RBAC, cluster objects

#[test]
fn simple_namespaced_objects() {
    let ns = json!({"metadata": {"name": "kube-system", "creationTimestamp": ago(400 * 86_400)},
                    "status": {"phase": "Active"}});
    assert_eq!(
        cells("", "namespaces", &ns),
        vec![json!("kube-system"), json!("Active"), json!("400d")]
    );

    let cm = json!({"metadata": {"name": "coredns", "creationTimestamp": ago(59)},
                    "data": {"Corefile": ".:53 {}", "NodeHosts": ""}, "binaryData": {"blob": "AA=="}});
    assert_eq!(
        cells("", "configmaps", &cm),
        vec![json!("coredns"), json!(3), json!("59s")]
    );

    let secret = json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls",
                        "data": {"tls.crt": "", "tls.key": ""}});
    assert_eq!(
        names(&columns_for("", "secrets")),
        vec![
            ("Name", "string", 0),
            ("Type", "string", 0),
            ("Data", "string", 0),
            ("Age", "string", 0)
        ]
    );
    assert_eq!(
        cells("", "secrets", &secret),
        vec![
            json!("tls"),
            json!("kubernetes.io/tls"),
            json!(2),
            json!("<unknown>")
        ]
    );

    let sa = json!({"metadata": {"name": "default", "creationTimestamp": ago(7200)}});
    assert_eq!(
        cells("", "serviceaccounts", &sa),
        vec![json!("default"), json!(0), json!("120m")]
    );

    let lease = json!({"metadata": {"name": "kube-scheduler", "creationTimestamp": ago(3 * 3600 + 4 * 60)},
                       "spec": {"holderIdentity": "server-0_1b2c", "leaseDurationSeconds": 15}});
    assert_eq!(
        cells("coordination.k8s.io", "leases", &lease),
        vec![
            json!("kube-scheduler"),
            json!("server-0_1b2c"),
            json!("3h4m")
        ]
    );
}

#[test]
fn rbac_bindings_and_default_roles() {
    let rb = json!({
        "metadata": {"name": "read-pods", "creationTimestamp": ago(100)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [
            {"kind": "User", "name": "jane"},
            {"kind": "User", "name": "joe"},
            {"kind": "Group", "name": "devs"},
            {"kind": "ServiceAccount", "name": "builder", "namespace": "ci"}
        ]
    });
    assert_eq!(
        names(&columns_for("rbac.authorization.k8s.io", "rolebindings")),
        vec![
            ("Name", "string", 0),
            ("Role", "string", 0),
            ("Age", "string", 0),
            ("Users", "string", 1),
            ("Groups", "string", 1),
            ("ServiceAccounts", "string", 1)
        ]
    );
    assert_eq!(
        cells("rbac.authorization.k8s.io", "rolebindings", &rb),
        vec![
            json!("read-pods"),
            json!("Role/pod-reader"),
            json!("100s"),
            json!("jane, joe"),
            json!("devs"),
            json!("ci/builder")
        ]
    );
    let crb = json!({"metadata": {"name": "cluster-admin"},
                     "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
                     "subjects": [{"kind": "Group", "name": "system:masters"}]});
    assert_eq!(
        cells("rbac.authorization.k8s.io", "clusterrolebindings", &crb)[1..],
        [
            json!("ClusterRole/cluster-admin"),
            json!("<unknown>"),
            json!(""),
            json!("system:masters"),
            json!("")
        ]
    );

    // Roles, cluster roles and CRDs use the default convertor.
    for resource in ["roles", "clusterroles"] {
        assert_eq!(
            names(&columns_for("rbac.authorization.k8s.io", resource)),
            vec![("Name", "string", 0), ("Created At", "date", 0)]
        );
    }
    let role =
        json!({"metadata": {"name": "pod-reader", "creationTimestamp": "2024-05-30T08:15:00Z"}});
    assert_eq!(
        cells("rbac.authorization.k8s.io", "roles", &role),
        vec![json!("pod-reader"), json!("2024-05-30T08:15:00Z")]
    );
    let crd = json!({"metadata": {"name": "widgets.example.com"}});
    assert_eq!(
        cells("apiextensions.k8s.io", "customresourcedefinitions", &crd),
        vec![json!("widgets.example.com"), json!("0001-01-01T00:00:00Z")]
    );
    let offset =
        json!({"metadata": {"name": "x", "creationTimestamp": "2024-05-30T10:15:00.5+02:00"}});
    assert_eq!(
        cells("", "limitranges", &offset)[1],
        json!("2024-05-30T08:15:00Z")
    );
}

#[test]
fn priority_classes_and_api_services() {
    assert_eq!(
        names(&columns_for("scheduling.k8s.io", "priorityclasses")),
        vec![
            ("Name", "string", 0),
            ("Value", "integer", 0),
            ("Global-Default", "boolean", 0),
            ("Age", "string", 0),
            ("PreemptionPolicy", "string", 0)
        ]
    );
    let pc = json!({"metadata": {"name": "system-node-critical", "creationTimestamp": ago(86_400)},
                    "value": 2_000_001_000, "preemptionPolicy": "PreemptLowerPriority"});
    assert_eq!(
        cells("scheduling.k8s.io", "priorityclasses", &pc),
        vec![
            json!("system-node-critical"),
            json!(2_000_001_000),
            json!(false),
            json!("24h"),
            json!("PreemptLowerPriority")
        ]
    );

    let local = json!({
        "metadata": {"name": "v1.apps", "creationTimestamp": ago(600)},
        "spec": {"group": "apps", "version": "v1", "groupPriorityMinimum": 17800},
        "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local"}]}
    });
    assert_eq!(
        cells("apiregistration.k8s.io", "apiservices", &local),
        vec![
            json!("v1.apps"),
            json!("Local"),
            json!("True"),
            json!("10m")
        ]
    );
    let remote = json!({
        "metadata": {"name": "v1beta1.metrics.k8s.io"},
        "spec": {"service": {"namespace": "kube-system", "name": "metrics-server"}},
        "status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]}
    });
    assert_eq!(
        cells("apiregistration.k8s.io", "apiservices", &remote)[1..3],
        [
            json!("kube-system/metrics-server"),
            json!("False (MissingEndpoints)")
        ]
    );
    let unknown = json!({"metadata": {"name": "v1.x"}, "spec": {}});
    assert_eq!(
        cells("apiregistration.k8s.io", "apiservices", &unknown)[2],
        json!("Unknown")
    );
}

#[test]
fn persistent_volumes_and_claims() {
    let pv = json!({
        "metadata": {"name": "pvc-1f2e", "creationTimestamp": ago(5 * 86_400)},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": "local-path",
            "claimRef": {"namespace": "default", "name": "data"},
            "volumeMode": "Filesystem"
        },
        "status": {"phase": "Bound"}
    });
    assert_eq!(
        cells("", "persistentvolumes", &pv),
        vec![
            json!("pvc-1f2e"),
            json!("10Gi"),
            json!("RWO,RWX"),
            json!("Delete"),
            json!("Bound"),
            json!("default/data"),
            json!("local-path"),
            json!("<unset>"),
            json!(""),
            json!("5d"),
            json!("Filesystem")
        ]
    );
    let pvc = json!({
        "metadata": {"name": "data", "creationTimestamp": ago(5 * 86_400)},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "8Gi"}},
                 "storageClassName": "local-path", "volumeName": "pvc-1f2e", "volumeMode": "Filesystem"},
        "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "10Gi"}}
    });
    assert_eq!(
        cells("", "persistentvolumeclaims", &pvc),
        vec![
            json!("data"),
            json!("Bound"),
            json!("pvc-1f2e"),
            json!("10Gi"),
            json!("RWO"),
            json!("local-path"),
            json!("<unset>"),
            json!("5d"),
            json!("Filesystem")
        ]
    );
    let pending = json!({
        "metadata": {"name": "wait", "annotations": {"volume.beta.kubernetes.io/storage-class": "slow"}},
        "spec": {"storageClassName": "fast"},
        "status": {"phase": "Pending"}
    });
    assert_eq!(
        cells("", "persistentvolumeclaims", &pending)[1..7],
        [
            json!("Pending"),
            json!(""),
            json!(""),
            json!(""),
            json!("slow"),
            json!("<unset>")
        ]
    );
}

#[test]
fn networking_and_storage_extras() {
    let ing = json!({
        "metadata": {"name": "web", "creationTimestamp": ago(60)},
        "spec": {"ingressClassName": "traefik", "tls": [{"hosts": ["a.example.com"]}],
                 "rules": [{"host": "a.example.com"}, {"host": "b.example.com"}, {}, {"host": "c.example.com"},
                           {"host": "d.example.com"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.168.1.10"}]}}
    });
    assert_eq!(
        cells("networking.k8s.io", "ingresses", &ing),
        vec![
            json!("web"),
            json!("traefik"),
            json!("a.example.com,b.example.com,c.example.com + 2 more..."),
            json!("192.168.1.10"),
            json!("80, 443"),
            json!("60s")
        ]
    );
    let catch_all = json!({"metadata": {"name": "all"}, "spec": {"defaultBackend": {}}});
    assert_eq!(
        cells("networking.k8s.io", "ingresses", &catch_all)[1..5],
        [json!("<none>"), json!("*"), json!(""), json!("80")]
    );

    let np = json!({"metadata": {"name": "deny"}, "spec": {"podSelector": {}}});
    assert_eq!(
        cells("networking.k8s.io", "networkpolicies", &np)[1],
        json!("<none>")
    );

    let sc = json!({
        "metadata": {"name": "local-path",
                     "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"
    });
    assert_eq!(
        cells("storage.k8s.io", "storageclasses", &sc),
        vec![
            json!("local-path (default)"),
            json!("rancher.io/local-path"),
            json!("Delete"),
            json!("WaitForFirstConsumer"),
            json!(false),
            json!("<unknown>")
        ]
    );

    let pdb = json!({"metadata": {"name": "web"}, "spec": {"minAvailable": "50%"},
                     "status": {"disruptionsAllowed": 1}});
    assert_eq!(
        cells("policy", "poddisruptionbudgets", &pdb)[1..4],
        [json!("50%"), json!("N/A"), json!(1)]
    );

    let csr = json!({
        "metadata": {"name": "node-csr-abc", "creationTimestamp": ago(30)},
        "spec": {"signerName": "kubernetes.io/kube-apiserver-client-kubelet", "username": "system:node:agent-1",
                 "expirationSeconds": 86_400},
        "status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "LS0t"}
    });
    assert_eq!(
        cells("certificates.k8s.io", "certificatesigningrequests", &csr),
        vec![
            json!("node-csr-abc"),
            json!("30s"),
            json!("kubernetes.io/kube-apiserver-client-kubelet"),
            json!("system:node:agent-1"),
            json!("24h"),
            json!("Approved,Issued")
        ]
    );

    let rq = json!({"metadata": {"name": "quota"}, "status": {
        "hard": {"pods": "10", "limits.memory": "2Gi", "requests.cpu": "1"},
        "used": {"pods": "3", "requests.cpu": "250m"}
    }});
    assert_eq!(
        cells("", "resourcequotas", &rq)[1..3],
        [
            json!("pods: 3/10, requests.cpu: 250m/1"),
            json!("limits.memory: 0/2Gi")
        ]
    );
}

// ---------------------------------------------------------------------------
// Every printer: one cell per column, even for an empty object.

#[test]
fn every_printer_has_one_cell_per_column() {
    let resources = [
        ("", "pods"),
        ("", "podtemplates"),
        ("", "replicationcontrollers"),
        ("", "services"),
        ("", "endpoints"),
        ("", "nodes"),
        ("", "events"),
        ("events.k8s.io", "events"),
        ("", "namespaces"),
        ("", "secrets"),
        ("", "serviceaccounts"),
        ("", "persistentvolumes"),
        ("", "persistentvolumeclaims"),
        ("", "componentstatuses"),
        ("", "configmaps"),
        ("", "resourcequotas"),
        ("", "limitranges"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "daemonsets"),
        ("apps", "statefulsets"),
        ("apps", "controllerrevisions"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("policy", "poddisruptionbudgets"),
        ("networking.k8s.io", "ingresses"),
        ("networking.k8s.io", "ingressclasses"),
        ("networking.k8s.io", "networkpolicies"),
        ("networking.k8s.io", "servicecidrs"),
        ("discovery.k8s.io", "endpointslices"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
        ("certificates.k8s.io", "certificatesigningrequests"),
        ("coordination.k8s.io", "leases"),
        ("storage.k8s.io", "storageclasses"),
        ("storage.k8s.io", "volumeattachments"),
        ("storage.k8s.io", "csinodes"),
        ("storage.k8s.io", "csidrivers"),
        ("storage.k8s.io", "csistoragecapacities"),
        ("scheduling.k8s.io", "priorityclasses"),
        ("node.k8s.io", "runtimeclasses"),
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
        ),
        (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
        ),
        ("apiregistration.k8s.io", "apiservices"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("example.com", "widgets"),
    ];
    for (group, resource) in resources {
        let cols = columns_for(group, resource);
        assert!(
            cols.iter().any(|c| c.name == "Name" && c.format == "name"),
            "{group}/{resource}"
        );
        assert!(
            cols.iter().all(|c| !c.description.is_empty()),
            "{group}/{resource}"
        );
        for obj in [
            json!({}),
            json!({"metadata": {"name": "x"}, "spec": {}, "status": {}}),
            json!(null),
        ] {
            cells(group, resource, &obj);
        }
    }
}

// ---------------------------------------------------------------------------
// Custom resources

fn widget_columns() -> Vec<PrinterColumn> {
    let crd_version = json!({"additionalPrinterColumns": [
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status",
         "description": "Whether the widget is ready"},
        {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio", "priority": 1},
        {"name": "Paused", "type": "boolean", "jsonPath": ".spec.paused"},
        {"name": "Labels", "type": "string", "jsonPath": ".metadata.labels"},
        {"name": "First", "type": "string", "jsonPath": ".spec.items[0].name"},
        {"name": "Missing", "type": "string", "jsonPath": ".spec.nothing"},
        {"name": "Started", "type": "date", "jsonPath": ".status.startedAt"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    ]});
    crd_version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(PrinterColumn::from_json)
        .collect()
}

#[test]
fn custom_resource_columns_and_cells() {
    let pcs = widget_columns();
    let cols = custom_columns(&pcs);
    assert_eq!(
        names(&cols),
        vec![
            ("Name", "string", 0),
            ("Replicas", "integer", 0),
            ("Ready", "string", 0),
            ("Ratio", "number", 1),
            ("Paused", "boolean", 0),
            ("Labels", "string", 0),
            ("First", "string", 0),
            ("Missing", "string", 0),
            ("Started", "date", 0),
            ("Age", "date", 0)
        ]
    );
    assert_eq!(cols[0].format, "name");
    assert_eq!(cols[2].description, "Whether the widget is ready");
    assert_eq!(
        cols[1].description,
        "Custom resource definition column (in JSONPath format): .spec.replicas"
    );

    let w = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1", "creationTimestamp": ago(3600), "labels": {"b": "2", "a": "1"}},
        "spec": {"replicas": 3, "ratio": 0.25, "paused": true, "items": [{"name": "first"}, {"name": "second"}]},
        "status": {"conditions": [{"type": "Synced", "status": "True"}, {"type": "Ready", "status": "False"}],
                   "startedAt": "not a time"}
    });
    let cells = custom_cells(&pcs, &w, NOW);
    assert_eq!(
        cells,
        vec![
            json!("w1"),
            json!(3),
            json!("False"),
            json!(0.25),
            json!(true),
            json!(r#"{"a":"1","b":"2"}"#),
            json!("first"),
            Value::Null,
            json!("<invalid>"),
            json!("60m")
        ]
    );
    assert_eq!(cells.len(), cols.len());

    // Type mismatches and missing fields become null cells.
    let odd = json!({
        "metadata": {"name": "w2"},
        "spec": {"replicas": "three", "ratio": 2, "paused": "yes", "items": []},
        "status": {"startedAt": ago(90)}
    });
    assert_eq!(
        custom_cells(&pcs, &odd, NOW),
        vec![
            json!("w2"),
            Value::Null,
            Value::Null,
            json!(2),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            json!("90s"),
            Value::Null
        ]
    );

    // Integer columns truncate floats; string columns print numbers.
    let pcs2 = vec![
        PrinterColumn {
            name: "N".into(),
            type_: "integer".into(),
            json_path: ".n".into(),
            ..Default::default()
        },
        PrinterColumn {
            name: "S".into(),
            type_: "string".into(),
            json_path: ".n".into(),
            ..Default::default()
        },
    ];
    assert_eq!(
        custom_cells(&pcs2, &json!({"n": 2.75}), NOW)[1..],
        [json!(2), json!("2.75")]
    );
    // An explicit null is found (unlike a missing key) and prints as Go's "<no value>".
    assert_eq!(
        custom_cells(&pcs2, &json!({"n": null}), NOW)[1..],
        [Value::Null, json!("<no value>")]
    );
    assert_eq!(
        custom_cells(&pcs2, &json!({}), NOW)[1..],
        [Value::Null, Value::Null]
    );
}

#[test]
fn custom_resource_without_printer_columns_gets_age() {
    let cols = custom_columns(&[]);
    assert_eq!(
        names(&cols),
        vec![("Name", "string", 0), ("Age", "date", 0)]
    );
    let obj = json!({"metadata": {"name": "w", "creationTimestamp": ago(86_400 * 2 + 3600)}});
    assert_eq!(
        custom_cells(&[], &obj, NOW),
        vec![json!("w"), json!("2d1h")]
    );
}

#[test]
fn custom_columns_stop_at_an_unparseable_path() {
    let pcs = vec![
        PrinterColumn {
            name: "A".into(),
            type_: "string".into(),
            json_path: ".a".into(),
            ..Default::default()
        },
        PrinterColumn {
            name: "B".into(),
            type_: "string".into(),
            json_path: ".b[".into(),
            ..Default::default()
        },
        PrinterColumn {
            name: "C".into(),
            type_: "string".into(),
            json_path: ".c".into(),
            ..Default::default()
        },
    ];
    assert_eq!(custom_columns(&pcs).len(), 2);
    assert_eq!(
        custom_cells(&pcs, &json!({"a": "x", "c": "y"}), NOW),
        vec![json!(""), json!("x")]
    );
}

// ---------------------------------------------------------------------------
// The Table envelope

#[test]
fn render_table_shape() {
    let p = completed_pod();
    let cols = columns_for("", "pods");
    let row_cells = cells_for("", "pods", &p, NOW);
    let table = render_table(
        &cols,
        vec![(row_cells.clone(), partial_object_metadata(&p))],
        "12345",
        Some("eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"),
        Some(7),
    );
    assert_eq!(table["kind"], json!("Table"));
    assert_eq!(table["apiVersion"], json!("meta.k8s.io/v1"));
    assert_eq!(
        table["metadata"],
        json!({"resourceVersion": "12345", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ", "remainingItemCount": 7})
    );
    let defs = table["columnDefinitions"].as_array().unwrap();
    assert_eq!(defs.len(), 9);
    assert_eq!(
        defs[0],
        json!({"name": "Name", "type": "string", "format": "name",
               "description": columns_for("", "pods")[0].description, "priority": 0})
    );
    assert_eq!(defs[7]["name"], json!("Nominated Node"));
    assert_eq!(defs[7]["priority"], json!(1));
    assert_eq!(defs[7]["format"], json!(""));
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["cells"], Value::Array(row_cells));
    assert!(rows[0].get("conditions").is_none());
    assert_eq!(
        rows[0]["object"],
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": p["metadata"]})
    );

    // Empty list, no continue: only the resourceVersion; rows is [].
    let empty = render_table(&columns_for("", "configmaps"), Vec::new(), "9", None, None);
    assert_eq!(empty["metadata"], json!({"resourceVersion": "9"}));
    assert_eq!(empty["rows"], json!([]));
    let bare = render_table(
        &columns_for("", "configmaps"),
        Vec::new(),
        "",
        Some(""),
        None,
    );
    assert_eq!(bare["metadata"], json!({}));
}

#[test]
fn render_table_rows_with_conditions() {
    let p = completed_pod();
    let table = render_table_rows(
        &columns_for("", "pods"),
        vec![TableRow {
            cells: cells_for("", "pods", &p, NOW),
            conditions: row_conditions_for("", "pods", &p),
            object: Value::Null,
        }],
        "1",
        None,
        None,
    );
    let row = &table["rows"][0];
    assert_eq!(row["conditions"][0]["type"], json!("Completed"));
    assert_eq!(row["object"], Value::Null);
}

#[test]
fn partial_object_metadata_shape() {
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "c", "namespace": "d", "resourceVersion": "5", "uid": "u",
                                  "labels": {"a": "b"}, "creationTimestamp": "2024-01-01T00:00:00Z"},
                     "data": {"k": "v"}});
    assert_eq!(
        partial_object_metadata(&obj),
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
    );
    assert_eq!(partial_object_metadata(&json!({}))["metadata"], json!({}));
}

#[test]
fn timestamps_round_trip_through_helpers() {
    let t = parse_rfc3339(&ago(0)).unwrap();
    assert_eq!(t.secs, NOW);
}
