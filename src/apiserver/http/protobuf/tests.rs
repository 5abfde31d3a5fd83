//! Tests for the protobuf decoder: real kubectl bodies, bodies built from
//! `k8s-pb` structs, special types, omission rules and malformed input.

use super::*;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::json;
use std::collections::BTreeMap;

/// Wraps a message the way kube's protobuf serializer does.
fn envelope(api_version: &str, kind: &str, message: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(message.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = MAGIC.to_vec();
    body.extend(unknown.encode_to_vec());
    body
}

fn decode(api_version: &str, kind: &str, message: &impl Message) -> Value {
    match decode_object(&envelope(api_version, kind, message)) {
        Ok(value) => value,
        Err(e) => panic!("decoding {kind} failed: {e}"),
    }
}

fn s(v: &str) -> Option<String> {
    Some(v.to_owned())
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// ObjectMeta as Go's gogo marshalling writes it: every non-pointer field
/// present, zero or not, and a zero `creationTimestamp` as an empty message.
fn go_meta(name: &str, label_pairs: &[(&str, &str)]) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: s(name),
        generate_name: s(""),
        namespace: s(""),
        self_link: s(""),
        uid: s(""),
        resource_version: s(""),
        generation: Some(0),
        creation_timestamp: Some(meta::Time::default()),
        labels: labels(label_pairs),
        ..Default::default()
    }
}

fn int_or_string_int(v: i32) -> IntOrString {
    IntOrString {
        r#type: Some(0),
        int_val: Some(v),
        str_val: s(""),
    }
}

fn int_or_string_str(v: &str) -> IntOrString {
    IntOrString {
        r#type: Some(1),
        int_val: Some(0),
        str_val: s(v),
    }
}

#[test]
fn content_type_detection() {
    assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
    assert!(is_protobuf(
        "Application/VND.Kubernetes.Protobuf ; charset=utf-8"
    ));
    assert!(!is_protobuf("application/json"));
    assert!(!is_protobuf("application/vnd.kubernetes.protobuf+json"));
    assert!(!is_protobuf(""));
}

#[test]
fn every_kind_has_a_schema_and_decodes_an_empty_message() {
    let registry = registry();
    assert_eq!(registry.roots.len(), KINDS.len());
    for (entry, root) in KINDS.iter().zip(&registry.roots) {
        assert!(root.is_some(), "no schema for {}", entry.kind);
        let api_version = if entry.api_version.is_empty() {
            "v1"
        } else {
            entry.api_version
        };
        let body = envelope(api_version, entry.kind, &meta::Status::default());
        let value = decode_object(&body).unwrap_or_else(|e| panic!("{}: {e}", entry.kind));
        assert_eq!(value["kind"], entry.kind);
        assert_eq!(value["apiVersion"], api_version);
        assert!(is_registered(api_version, entry.kind));
    }
}

#[test]
fn kubectl_bodies_decode_to_kubectls_own_json() {
    for fixture in KUBECTL_BODIES {
        let body = hex::decode(fixture.body_hex).expect("fixture hex");
        let expected: Value = serde_json::from_str(fixture.json).expect("fixture json");
        let got = decode_object(&body).unwrap_or_else(|e| panic!("{}: {e}", fixture.command));
        assert_eq!(
            got, expected,
            "{} (expected JSON from {})",
            fixture.command, fixture.expected_from
        );
    }
}

#[test]
fn deployment_like_kubectl_create_deployment() {
    use k8s_pb::api::apps::v1 as apps;
    let pod_labels = [("app", "web")];
    let deployment = apps::Deployment {
        metadata: Some(go_meta("web", &pod_labels)),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(2),
            selector: Some(meta::LabelSelector {
                match_labels: labels(&pod_labels),
                match_expressions: vec![],
            }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(go_meta("", &pod_labels)),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: s("nginx"),
                        image: s("nginx:1.25"),
                        working_dir: s(""),
                        resources: Some(core::ResourceRequirements::default()),
                        termination_message_path: s(""),
                        termination_message_policy: s(""),
                        image_pull_policy: s(""),
                        stdin: Some(false),
                        stdin_once: Some(false),
                        tty: Some(false),
                        ..Default::default()
                    }],
                    restart_policy: s(""),
                    dns_policy: s(""),
                    service_account_name: s(""),
                    node_name: s(""),
                    host_network: Some(false),
                    host_pid: Some(false),
                    host_ipc: Some(false),
                    scheduler_name: s(""),
                    ..Default::default()
                }),
            }),
            strategy: Some(apps::DeploymentStrategy {
                r#type: s(""),
                rolling_update: None,
            }),
            min_ready_seconds: Some(0),
            paused: Some(false),
            ..Default::default()
        }),
        status: Some(apps::DeploymentStatus {
            observed_generation: Some(0),
            replicas: Some(0),
            updated_replicas: Some(0),
            ready_replicas: Some(0),
            available_replicas: Some(0),
            unavailable_replicas: Some(0),
            ..Default::default()
        }),
    };
    assert_eq!(
        decode("apps/v1", "Deployment", &deployment),
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [
                        {"name": "nginx", "image": "nginx:1.25", "resources": {}}
                    ]}
                },
                "strategy": {}
            },
            "status": {}
        })
    );
}

#[test]
fn secret_binary_data_is_base64() {
    let secret = core::Secret {
        metadata: Some(go_meta("creds", &[])),
        immutable: Some(false),
        data: [
            ("bin".to_owned(), vec![0u8, 1, 0xff, 0xfe, b'x']),
            ("empty".to_owned(), vec![]),
        ]
        .into_iter()
        .collect(),
        string_data: labels(&[("plain", "text")]),
        r#type: s("Opaque"),
    };
    assert_eq!(
        decode("v1", "Secret", &secret),
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "immutable": false,
            "data": {"bin": "AAH//ng=", "empty": ""},
            "stringData": {"plain": "text"},
            "type": "Opaque"
        })
    );
}

#[test]
fn configmap_data_and_binary_data() {
    let config_map = core::ConfigMap {
        metadata: Some(go_meta("cfg", &[("tier", "")])),
        immutable: Some(true),
        data: labels(&[("a", "1"), ("multi", "line1\nline2\n"), ("blank", "")]),
        binary_data: [("raw".to_owned(), b"\x89PNG".to_vec())]
            .into_iter()
            .collect(),
    };
    assert_eq!(
        decode("v1", "ConfigMap", &config_map),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cfg", "labels": {"tier": ""}},
            "immutable": true,
            "data": {"a": "1", "multi": "line1\nline2\n", "blank": ""},
            "binaryData": {"raw": "iVBORw=="}
        })
    );
}

#[test]
fn service_target_port_int_and_string() {
    let port = |name: &str, number: i32, target: IntOrString| core::ServicePort {
        name: s(name),
        protocol: s("TCP"),
        port: Some(number),
        target_port: Some(target),
        node_port: Some(0),
        ..Default::default()
    };
    let service = core::Service {
        metadata: Some(go_meta("svc", &[])),
        spec: Some(core::ServiceSpec {
            ports: vec![
                port("http", 80, int_or_string_int(8080)),
                port("https", 443, int_or_string_str("https")),
                port("same", 9000, int_or_string_int(0)),
            ],
            selector: labels(&[("app", "web")]),
            cluster_ip: s("10.43.0.10"),
            cluster_ips: vec!["10.43.0.10".into(), "fd00::a".into()],
            r#type: s("ClusterIP"),
            external_ips: vec!["192.0.2.1".into()],
            session_affinity: s(""),
            load_balancer_ip: s(""),
            external_name: s(""),
            external_traffic_policy: s(""),
            health_check_node_port: Some(0),
            publish_not_ready_addresses: Some(false),
            ip_families: vec!["IPv4".into(), "IPv6".into()],
            ip_family_policy: s("PreferDualStack"),
            allocate_load_balancer_node_ports: Some(false),
            ..Default::default()
        }),
        status: Some(core::ServiceStatus {
            load_balancer: Some(core::LoadBalancerStatus::default()),
            conditions: vec![],
        }),
    };
    assert_eq!(
        decode("v1", "Service", &service),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "svc"},
            "spec": {
                "ports": [
                    {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080},
                    {"name": "https", "protocol": "TCP", "port": 443, "targetPort": "https"},
                    {"name": "same", "protocol": "TCP", "port": 9000}
                ],
                "selector": {"app": "web"},
                "clusterIP": "10.43.0.10",
                "clusterIPs": ["10.43.0.10", "fd00::a"],
                "type": "ClusterIP",
                "externalIPs": ["192.0.2.1"],
                "ipFamilies": ["IPv4", "IPv6"],
                "ipFamilyPolicy": "PreferDualStack",
                "allocateLoadBalancerNodePorts": false
            },
            "status": {"loadBalancer": {}}
        })
    );
}

#[test]
fn pod_acronym_fields_times_and_inlined_structs() {
    let mut metadata = go_meta("p", &[]);
    metadata.namespace = s("default");
    metadata.uid = s("0f1e2d3c");
    metadata.generation = Some(3);
    metadata.creation_timestamp = Some(meta::Time {
        seconds: Some(1_767_323_045),
        nanos: Some(0),
    });
    metadata.owner_references = vec![meta::OwnerReference {
        api_version: s("apps/v1"),
        kind: s("ReplicaSet"),
        name: s("web-1"),
        uid: s("u-1"),
        controller: Some(true),
        block_owner_deletion: Some(false),
    }];
    let container = core::Container {
        name: s("app"),
        image: s("nginx"),
        ports: vec![core::ContainerPort {
            name: s("http"),
            host_port: Some(0),
            container_port: Some(80),
            protocol: s("TCP"),
            host_ip: s(""),
        }],
        env: vec![core::EnvVar {
            name: s("PASSWORD"),
            value: s(""),
            value_from: Some(core::EnvVarSource {
                secret_key_ref: Some(core::SecretKeySelector {
                    local_object_reference: Some(core::LocalObjectReference { name: s("creds") }),
                    key: s("password"),
                    optional: Some(false),
                }),
                ..Default::default()
            }),
        }],
        resources: Some(core::ResourceRequirements {
            limits: [("cpu".to_owned(), Quantity { string: s("500m") })]
                .into_iter()
                .collect(),
            requests: [("memory".to_owned(), Quantity { string: s("64Mi") })]
                .into_iter()
                .collect(),
            claims: vec![],
        }),
        readiness_probe: Some(core::Probe {
            handler: Some(core::ProbeHandler {
                http_get: Some(core::HttpGetAction {
                    path: s("/healthz"),
                    port: Some(int_or_string_str("http")),
                    host: s(""),
                    scheme: s("HTTP"),
                    http_headers: vec![],
                }),
                ..Default::default()
            }),
            initial_delay_seconds: Some(0),
            timeout_seconds: Some(1),
            period_seconds: Some(10),
            success_threshold: Some(1),
            failure_threshold: Some(3),
            termination_grace_period_seconds: Some(0),
        }),
        volume_mounts: vec![core::VolumeMount {
            name: s("cfg"),
            read_only: Some(false),
            mount_path: s("/etc/cfg"),
            sub_path: s(""),
            ..Default::default()
        }],
        security_context: Some(core::SecurityContext {
            run_as_user: Some(0),
            allow_privilege_escalation: Some(false),
            ..Default::default()
        }),
        stdin: Some(false),
        stdin_once: Some(false),
        tty: Some(false),
        ..Default::default()
    };
    let pod = core::Pod {
        metadata: Some(metadata),
        spec: Some(core::PodSpec {
            volumes: vec![core::Volume {
                name: s("cfg"),
                volume_source: Some(core::VolumeSource {
                    config_map: Some(core::ConfigMapVolumeSource {
                        local_object_reference: Some(core::LocalObjectReference {
                            name: s("app-config"),
                        }),
                        items: vec![],
                        default_mode: Some(0o644),
                        optional: None,
                    }),
                    ..Default::default()
                }),
            }],
            containers: vec![container],
            node_name: s("node-1"),
            host_network: Some(true),
            host_pid: Some(false),
            host_ipc: Some(true),
            automount_service_account_token: Some(false),
            termination_grace_period_seconds: Some(0),
            ..Default::default()
        }),
        status: Some(core::PodStatus {
            phase: s("Running"),
            host_ip: s("192.0.2.10"),
            host_ips: vec![core::HostIp {
                ip: s("192.0.2.10"),
            }],
            pod_ip: s("10.42.0.7"),
            pod_ips: vec![
                core::PodIp { ip: s("10.42.0.7") },
                core::PodIp { ip: s("fd00::7") },
            ],
            start_time: Some(meta::Time {
                seconds: Some(1_767_323_046),
                nanos: Some(0),
            }),
            container_statuses: vec![core::ContainerStatus {
                name: s("app"),
                ready: Some(false),
                restart_count: Some(0),
                image: s("nginx"),
                image_id: s("docker.io/library/nginx@sha256:abc"),
                container_id: s("containerd://123"),
                started: Some(true),
                ..Default::default()
            }],
            qos_class: s("Burstable"),
            ..Default::default()
        }),
    };
    assert_eq!(
        decode("v1", "Pod", &pod),
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "namespace": "default",
                "uid": "0f1e2d3c",
                "generation": 3,
                "creationTimestamp": "2026-01-02T03:04:05Z",
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                    "uid": "u-1", "controller": true, "blockOwnerDeletion": false
                }]
            },
            "spec": {
                "volumes": [{"name": "cfg", "configMap": {"name": "app-config", "defaultMode": 420}}],
                "containers": [{
                    "name": "app",
                    "image": "nginx",
                    "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                    "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {
                        "name": "creds", "key": "password", "optional": false
                    }}}],
                    "resources": {"limits": {"cpu": "500m"}, "requests": {"memory": "64Mi"}},
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
                        "timeoutSeconds": 1,
                        "periodSeconds": 10,
                        "successThreshold": 1,
                        "failureThreshold": 3,
                        "terminationGracePeriodSeconds": 0
                    },
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}],
                    "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": false}
                }],
                "nodeName": "node-1",
                "hostNetwork": true,
                "hostIPC": true,
                "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 0
            },
            "status": {
                "phase": "Running",
                "hostIP": "192.0.2.10",
                "hostIPs": [{"ip": "192.0.2.10"}],
                "podIP": "10.42.0.7",
                "podIPs": [{"ip": "10.42.0.7"}, {"ip": "fd00::7"}],
                "startTime": "2026-01-02T03:04:06Z",
                "containerStatuses": [{
                    "name": "app", "ready": false, "restartCount": 0, "image": "nginx",
                    "imageID": "docker.io/library/nginx@sha256:abc",
                    "containerID": "containerd://123", "started": true
                }],
                "qosClass": "Burstable"
            }
        })
    );
}

#[test]
fn node_pod_cidrs() {
    let node = core::Node {
        metadata: Some(go_meta("n1", &[])),
        spec: Some(core::NodeSpec {
            pod_cidr: s("10.42.0.0/24"),
            pod_cid_rs: vec!["10.42.0.0/24".into(), "fd00:42::/64".into()],
            provider_id: s("k3rs://n1"),
            unschedulable: Some(false),
            taints: vec![core::Taint {
                key: s("node-role"),
                value: s(""),
                effect: s("NoSchedule"),
                time_added: Some(meta::Time::default()),
            }],
            ..Default::default()
        }),
        status: None,
    };
    assert_eq!(
        decode("v1", "Node", &node),
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1"},
            "spec": {
                "podCIDR": "10.42.0.0/24",
                "podCIDRs": ["10.42.0.0/24", "fd00:42::/64"],
                "providerID": "k3rs://n1",
                "taints": [{"key": "node-role", "effect": "NoSchedule"}]
            }
        })
    );
}

#[test]
fn hpa_v1_target_cpu_utilization_percentage() {
    use k8s_pb::api::autoscaling::v1 as autoscaling;
    let hpa = autoscaling::HorizontalPodAutoscaler {
        metadata: Some(go_meta("web", &[])),
        spec: Some(autoscaling::HorizontalPodAutoscalerSpec {
            scale_target_ref: Some(autoscaling::CrossVersionObjectReference {
                kind: s("Deployment"),
                name: s("web"),
                api_version: s("apps/v1"),
            }),
            min_replicas: Some(1),
            max_replicas: Some(5),
            target_cpu_utilization_percentage: Some(80),
        }),
        status: None,
    };
    assert_eq!(
        decode("autoscaling/v1", "HorizontalPodAutoscaler", &hpa),
        json!({
            "apiVersion": "autoscaling/v1",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {
                "scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
                "minReplicas": 1,
                "maxReplicas": 5,
                "targetCPUUtilizationPercentage": 80
            }
        })
    );
}

#[test]
fn eviction_with_delete_options() {
    use k8s_pb::api::policy::v1 as policy;
    let mut metadata = go_meta("web-1", &[]);
    metadata.namespace = s("default");
    let eviction = policy::Eviction {
        metadata: Some(metadata),
        delete_options: Some(meta::DeleteOptions {
            grace_period_seconds: Some(0),
            preconditions: Some(meta::Preconditions {
                uid: s("u-1"),
                resource_version: None,
            }),
            orphan_dependents: None,
            propagation_policy: s("Foreground"),
            dry_run: vec!["All".into()],
            ignore_store_read_error_with_cluster_breaking_potential: Some(false),
        }),
    };
    assert_eq!(
        decode("policy/v1", "Eviction", &eviction),
        json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "web-1", "namespace": "default"},
            "deleteOptions": {
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": "u-1"},
                "propagationPolicy": "Foreground",
                "dryRun": ["All"],
                "ignoreStoreReadErrorWithClusterBreakingPotential": false
            }
        })
    );
}

#[test]
fn delete_options_under_any_api_version() {
    let options = meta::DeleteOptions {
        grace_period_seconds: Some(30),
        orphan_dependents: Some(false),
        ..Default::default()
    };
    for api_version in ["v1", "meta.k8s.io/v1", "apps/v1"] {
        assert_eq!(
            decode(api_version, "DeleteOptions", &options),
            json!({
                "apiVersion": api_version,
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 30,
                "orphanDependents": false
            })
        );
    }
}

#[test]
fn lease_micro_time() {
    use k8s_pb::api::coordination::v1 as coordination;
    let lease = coordination::Lease {
        metadata: Some(go_meta("node-1", &[])),
        spec: Some(coordination::LeaseSpec {
            holder_identity: s("node-1"),
            lease_duration_seconds: Some(40),
            acquire_time: Some(meta::MicroTime {
                seconds: Some(1_767_323_045),
                nanos: Some(123_456_789),
            }),
            renew_time: Some(meta::MicroTime {
                seconds: Some(0),
                nanos: Some(0),
            }),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    };
    assert_eq!(
        decode("coordination.k8s.io/v1", "Lease", &lease),
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "node-1"},
            "spec": {
                "holderIdentity": "node-1",
                "leaseDurationSeconds": 40,
                "acquireTime": "2026-01-02T03:04:05.123456Z",
                "renewTime": "1970-01-01T00:00:00.000000Z",
                "leaseTransitions": 0
            }
        })
    );
}

#[test]
fn events_v1_event() {
    use k8s_pb::api::events::v1 as events;
    let event = events::Event {
        metadata: Some(go_meta("e1", &[])),
        event_time: Some(meta::MicroTime {
            seconds: Some(1_767_323_045),
            nanos: Some(500_000),
        }),
        series: Some(events::EventSeries {
            count: Some(0),
            last_observed_time: Some(meta::MicroTime {
                seconds: Some(1_767_323_046),
                nanos: Some(0),
            }),
        }),
        reporting_controller: s("k3rs"),
        reporting_instance: s("k3rs-1"),
        action: s("Scheduled"),
        reason: s("Scheduled"),
        regarding: Some(core::ObjectReference {
            kind: s("Pod"),
            name: s("p"),
            namespace: s("default"),
            uid: s(""),
            api_version: s("v1"),
            resource_version: s(""),
            field_path: s(""),
        }),
        note: s("assigned"),
        r#type: s("Normal"),
        deprecated_source: Some(core::EventSource::default()),
        deprecated_first_timestamp: Some(meta::Time::default()),
        deprecated_last_timestamp: Some(meta::Time::default()),
        deprecated_count: Some(0),
        ..Default::default()
    };
    assert_eq!(
        decode("events.k8s.io/v1", "Event", &event),
        json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "e1"},
            "eventTime": "2026-01-02T03:04:05.000500Z",
            "series": {"count": 0, "lastObservedTime": "2026-01-02T03:04:06.000000Z"},
            "reportingController": "k3rs",
            "reportingInstance": "k3rs-1",
            "action": "Scheduled",
            "reason": "Scheduled",
            "regarding": {"kind": "Pod", "name": "p", "namespace": "default", "apiVersion": "v1"},
            "note": "assigned",
            "type": "Normal",
            "deprecatedSource": {}
        })
    );
}

#[test]
fn controller_revision_raw_extension_json_and_embedded_protobuf() {
    use k8s_pb::api::apps::v1 as apps;
    let revision = |raw: Vec<u8>| apps::ControllerRevision {
        metadata: Some(go_meta("web-1", &[])),
        data: Some(RawExtension { raw: Some(raw) }),
        revision: Some(0),
    };
    let json_data = br#"{"spec":{"template":{"spec":{"containers":[{"name":"a"}]}}}}"#.to_vec();
    assert_eq!(
        decode("apps/v1", "ControllerRevision", &revision(json_data)),
        json!({
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {"name": "web-1"},
            "data": {"spec": {"template": {"spec": {"containers": [{"name": "a"}]}}}},
            "revision": 0
        })
    );
    let embedded = envelope(
        "v1",
        "ConfigMap",
        &core::ConfigMap {
            data: labels(&[("k", "v")]),
            ..Default::default()
        },
    );
    assert_eq!(
        decode("apps/v1", "ControllerRevision", &revision(embedded))["data"],
        json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}})
    );
    let empty = decode("apps/v1", "ControllerRevision", &revision(Vec::new()));
    assert!(empty.get("data").is_none());
    let err = decode_object(&envelope(
        "apps/v1",
        "ControllerRevision",
        &revision(b"not json".to_vec()),
    ));
    assert!(matches!(err, Err(ProtobufError::Convert { .. })), "{err:?}");
}

#[test]
fn custom_resource_definition_schema() {
    use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    let string_prop = ext::JsonSchemaProps {
        r#type: s("string"),
        r#enum: vec![
            ext::Json {
                raw: Some(br#""a""#.to_vec()),
            },
            ext::Json {
                raw: Some(br#""b""#.to_vec()),
            },
        ],
        default: Some(ext::Json {
            raw: Some(br#""a""#.to_vec()),
        }),
        nullable: Some(false),
        ..Default::default()
    };
    let spec_schema = ext::JsonSchemaProps {
        r#type: s("object"),
        properties: [
            ("mode".to_owned(), string_prop),
            (
                "replicas".to_owned(),
                ext::JsonSchemaProps {
                    r#type: s("integer"),
                    minimum: Some(0.0),
                    maximum: Some(10.5),
                    ..Default::default()
                },
            ),
            (
                "tags".to_owned(),
                ext::JsonSchemaProps {
                    r#type: s("array"),
                    items: Some(Box::new(ext::JsonSchemaPropsOrArray {
                        schema: Some(Box::new(ext::JsonSchemaProps {
                            r#type: s("string"),
                            ..Default::default()
                        })),
                        j_son_schemas: vec![],
                    })),
                    x_kubernetes_list_type: s("set"),
                    ..Default::default()
                },
            ),
            (
                "labels".to_owned(),
                ext::JsonSchemaProps {
                    r#type: s("object"),
                    additional_properties: Some(Box::new(ext::JsonSchemaPropsOrBool {
                        allows: Some(true),
                        schema: Some(Box::new(ext::JsonSchemaProps {
                            r#type: s("string"),
                            ..Default::default()
                        })),
                    })),
                    ..Default::default()
                },
            ),
            (
                "closed".to_owned(),
                ext::JsonSchemaProps {
                    r#type: s("object"),
                    additional_properties: Some(Box::new(ext::JsonSchemaPropsOrBool {
                        allows: Some(false),
                        schema: None,
                    })),
                    x_kubernetes_preserve_unknown_fields: Some(true),
                    ..Default::default()
                },
            ),
        ]
        .into_iter()
        .collect(),
        required: vec!["mode".into()],
        ..Default::default()
    };
    let crd = ext::CustomResourceDefinition {
        metadata: Some(go_meta("widgets.example.com", &[])),
        spec: Some(ext::CustomResourceDefinitionSpec {
            group: s("example.com"),
            names: Some(ext::CustomResourceDefinitionNames {
                plural: s("widgets"),
                singular: s("widget"),
                short_names: vec![],
                kind: s("Widget"),
                list_kind: s("WidgetList"),
                categories: vec![],
            }),
            scope: s("Namespaced"),
            versions: vec![ext::CustomResourceDefinitionVersion {
                name: s("v1"),
                served: Some(true),
                storage: Some(true),
                deprecated: Some(false),
                schema: Some(ext::CustomResourceValidation {
                    open_apiv3_schema: Some(ext::JsonSchemaProps {
                        r#type: s("object"),
                        properties: [("spec".to_owned(), spec_schema)].into_iter().collect(),
                        ..Default::default()
                    }),
                }),
                subresources: Some(ext::CustomResourceSubresources {
                    status: Some(ext::CustomResourceSubresourceStatus {}),
                    scale: None,
                }),
                ..Default::default()
            }],
            preserve_unknown_fields: Some(false),
            ..Default::default()
        }),
        status: None,
    };
    assert_eq!(
        decode("apiextensions.k8s.io/v1", "CustomResourceDefinition", &crd),
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1",
                    "served": true,
                    "storage": true,
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "properties": {"spec": {
                            "type": "object",
                            "required": ["mode"],
                            "properties": {
                                "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                                "replicas": {"type": "integer", "minimum": 0, "maximum": 10.5},
                                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                "closed": {
                                    "type": "object",
                                    "additionalProperties": false,
                                    "x-kubernetes-preserve-unknown-fields": true
                                }
                            }
                        }}
                    }},
                    "subresources": {"status": {}}
                }]
            }
        })
    );
}

#[test]
fn json_schema_ref_and_schema_keywords() {
    use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    let props = ext::JsonSchemaProps {
        id: s("x"),
        schema: s("http://json-schema.org/draft-04/schema#"),
        r#ref: s("#/definitions/a"),
        ..Default::default()
    };
    let conv = Converter {
        registry: registry(),
        embedded: 0,
    };
    let tree = DebugParser::new(&format!("{props:?}"))
        .parse_all()
        .expect("parse");
    let value = conv.convert(&tree, None, 0).expect("convert");
    assert_eq!(
        value,
        Some(json!({
            "id": "x",
            "$schema": "http://json-schema.org/draft-04/schema#",
            "$ref": "#/definitions/a"
        }))
    );
}

#[test]
fn api_service_ca_bundle_and_required_zero() {
    use k8s_pb::kube_aggregator::pkg::apis::apiregistration::v1 as agg;
    let service = agg::APIService {
        metadata: Some(go_meta("v1beta1.metrics.k8s.io", &[])),
        spec: Some(agg::APIServiceSpec {
            service: Some(agg::ServiceReference {
                namespace: s("kube-system"),
                name: s("metrics-server"),
                port: Some(443),
            }),
            group: s("metrics.k8s.io"),
            version: s("v1beta1"),
            insecure_skip_tls_verify: Some(false),
            ca_bundle: Some(b"-----BEGIN CERTIFICATE-----\n".to_vec()),
            group_priority_minimum: Some(0),
            version_priority: Some(15),
        }),
        status: Some(agg::APIServiceStatus::default()),
    };
    assert_eq!(
        decode("apiregistration.k8s.io/v1", "APIService", &service),
        json!({
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {
                "service": {"namespace": "kube-system", "name": "metrics-server", "port": 443},
                "group": "metrics.k8s.io",
                "version": "v1beta1",
                "caBundle": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==",
                "groupPriorityMinimum": 0,
                "versionPriority": 15
            },
            "status": {}
        })
    );
    let mut insecure = service.clone();
    if let Some(spec) = insecure.spec.as_mut() {
        spec.insecure_skip_tls_verify = Some(true);
        spec.ca_bundle = None;
    }
    let value = decode("apiregistration.k8s.io/v1", "APIService", &insecure);
    assert_eq!(value["spec"]["insecureSkipTLSVerify"], true);
    assert!(value["spec"].get("caBundle").is_none());
}

#[test]
fn pvc_keeps_empty_storage_class_name() {
    let pvc = core::PersistentVolumeClaim {
        metadata: Some(go_meta("data", &[])),
        spec: Some(core::PersistentVolumeClaimSpec {
            access_modes: vec!["ReadWriteOnce".into()],
            storage_class_name: s(""),
            volume_mode: s(""),
            volume_name: s(""),
            resources: Some(core::VolumeResourceRequirements {
                requests: [("storage".to_owned(), Quantity { string: s("1Gi") })]
                    .into_iter()
                    .collect(),
                limits: BTreeMap::new(),
            }),
            ..Default::default()
        }),
        status: None,
    };
    assert_eq!(
        decode("v1", "PersistentVolumeClaim", &pvc)["spec"],
        json!({
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}}
        })
    );
}

#[test]
fn strings_with_escapes_survive_the_debug_round_trip() {
    let tricky = [
        "quote \" backslash \\ newline \n tab \t cr \r nul \0 apostrophe '",
        "unicode é ü ß 中文 🚀",
        "control \u{1b}[31m bell \u{7}",
        "\u{301}combining at start, and a\u{301} later",
        "{ } [ ] : , Some(None) Foo { a: 1 }",
        "\u{ad}soft hyphen \u{200b} zero width \u{feff}",
    ];
    let mut metadata = go_meta("tricky", &[]);
    metadata.annotations = tricky
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("k{i}"), (*v).to_owned()))
        .collect();
    let config_map = core::ConfigMap {
        metadata: Some(metadata),
        data: labels(&[("\"quoted key\"", "v")]),
        ..Default::default()
    };
    let value = decode("v1", "ConfigMap", &config_map);
    for (i, expected) in tricky.iter().enumerate() {
        assert_eq!(value["metadata"]["annotations"][format!("k{i}")], *expected);
    }
    assert_eq!(value["data"]["\"quoted key\""], "v");
}

#[test]
fn json_content_type_envelope() {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: s("v1"),
            kind: s("ConfigMap"),
        }),
        raw: Some(br#"{"metadata":{"name":"x"}}"#.to_vec()),
        content_encoding: None,
        content_type: s("application/json"),
    };
    let mut body = MAGIC.to_vec();
    body.extend(unknown.encode_to_vec());
    assert_eq!(
        decode_object(&body).expect("json envelope"),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    );
}

#[test]
fn errors() {
    let config_map = core::ConfigMap {
        metadata: Some(go_meta("cfg", &[])),
        data: labels(&[("a", "1")]),
        ..Default::default()
    };
    let good = envelope("v1", "ConfigMap", &config_map);

    // Not protobuf at all (a JSON body sent with the protobuf content type).
    let err = decode_object(br#"{"kind":"ConfigMap"}"#).expect_err("json body");
    assert!(matches!(err, ProtobufError::NotProtobuf));
    assert_eq!(
        err.to_string(),
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    );
    assert_eq!(err.http_status(), 400);
    assert!(matches!(
        decode_object(b""),
        Err(ProtobufError::NotProtobuf)
    ));
    assert!(matches!(
        decode_object(b"k8s"),
        Err(ProtobufError::NotProtobuf)
    ));

    // Truncated anywhere: never a panic (a cut between two envelope fields
    // still is valid protobuf), and an error when the cut splits a field.
    for len in 4..good.len() {
        let _ = decode_object(&good[..len]);
    }
    // The envelope ends with the raw object and two empty strings (4 bytes).
    for len in [5, 8, good.len() - 5, good.len() - 1] {
        let result = decode_object(&good[..len]);
        assert!(
            result.is_err(),
            "truncated to {len} bytes decoded: {result:?}"
        );
    }

    // A broken envelope.
    let mut broken = MAGIC.to_vec();
    broken.extend([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(matches!(
        decode_object(&broken),
        Err(ProtobufError::Envelope(_))
    ));

    // A valid envelope around invalid object bytes.
    let unknown = |type_meta: Option<TypeMeta>, raw: &[u8], encoding: &str, content_type: &str| {
        let mut body = MAGIC.to_vec();
        body.extend(
            Unknown {
                type_meta,
                raw: Some(raw.to_vec()),
                content_encoding: s(encoding),
                content_type: s(content_type),
            }
            .encode_to_vec(),
        );
        body
    };
    let type_meta = |api_version: &str, kind: &str| {
        Some(TypeMeta {
            api_version: s(api_version),
            kind: s(kind),
        })
    };
    let err = decode_object(&unknown(
        type_meta("v1", "ConfigMap"),
        &[0x0a, 0x05, 0x01],
        "",
        "",
    ))
    .expect_err("bad raw");
    assert!(matches!(err, ProtobufError::Decode { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("unable to decode ConfigMap from protobuf")
    );

    // Unknown and missing kinds.
    let err = decode_object(&envelope("v1", "Foo", &config_map)).expect_err("unknown kind");
    assert_eq!(
        err.to_string(),
        r#"no kind "Foo" is registered for version "v1""#
    );
    assert_eq!(err.http_status(), 400);
    let err = decode_object(&envelope("apps/v2", "Deployment", &config_map)).expect_err("version");
    assert_eq!(
        err.to_string(),
        r#"no kind "Deployment" is registered for version "apps/v2""#
    );
    let err = decode_object(&unknown(None, &[], "", "")).expect_err("no kind");
    assert!(matches!(err, ProtobufError::MissingKind));
    // The endpoint's kind fills an empty envelope, as in kube-apiserver.
    let raw = config_map.encode_to_vec();
    let defaulted = decode_object_with_defaults(&unknown(None, &raw, "", ""), "v1", "ConfigMap")
        .expect("defaults");
    assert_eq!(defaulted["kind"], "ConfigMap");
    assert_eq!(defaulted["data"], json!({"a": "1"}));
    let explicit = decode_object_with_defaults(&good, "apps/v1", "Deployment").expect("explicit");
    assert_eq!(explicit["kind"], "ConfigMap");

    // Encodings and content types we do not handle.
    let err =
        decode_object(&unknown(type_meta("v1", "ConfigMap"), &[], "gzip", "")).expect_err("gzip");
    assert!(matches!(err, ProtobufError::UnsupportedEncoding(_)));
    assert_eq!(err.http_status(), 415);
    let err = decode_object(&unknown(
        type_meta("v1", "ConfigMap"),
        &[],
        "",
        "application/yaml",
    ))
    .expect_err("yaml");
    assert!(matches!(err, ProtobufError::UnsupportedContentType(_)));
    assert_eq!(err.http_status(), 415);

    // Values JSON cannot carry.
    let lease = k8s_pb::api::coordination::v1::Lease {
        spec: Some(k8s_pb::api::coordination::v1::LeaseSpec {
            renew_time: Some(meta::MicroTime {
                seconds: Some(i64::MAX),
                nanos: Some(0),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = decode_object(&envelope("coordination.k8s.io/v1", "Lease", &lease))
        .expect_err("year out of range");
    assert!(matches!(err, ProtobufError::Convert { .. }), "{err:?}");
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    let mut props = ext::JsonSchemaProps::default();
    for _ in 0..200 {
        props = ext::JsonSchemaProps {
            not: Some(Box::new(props)),
            ..Default::default()
        };
    }
    let crd = ext::CustomResourceDefinition {
        spec: Some(ext::CustomResourceDefinitionSpec {
            versions: vec![ext::CustomResourceDefinitionVersion {
                schema: Some(ext::CustomResourceValidation {
                    open_apiv3_schema: Some(props),
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = decode_object(&envelope(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        &crd,
    ))
    .expect_err("too deep");
    assert!(matches!(err, ProtobufError::Decode { .. }), "{err:?}");

    // Embedded protobuf objects nest only so deep.
    use k8s_pb::api::apps::v1 as apps;
    let mut body = envelope("v1", "ConfigMap", &core::ConfigMap::default());
    for _ in 0..20 {
        body = envelope(
            "apps/v1",
            "ControllerRevision",
            &apps::ControllerRevision {
                data: Some(RawExtension { raw: Some(body) }),
                ..Default::default()
            },
        );
    }
    assert!(matches!(
        decode_object(&body),
        Err(ProtobufError::Convert { .. })
    ));
}

#[test]
fn corrupted_bodies_never_panic() {
    // A small deterministic generator (xorshift) flips bytes of real bodies.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for fixture in KUBECTL_BODIES {
        let body = hex::decode(fixture.body_hex).expect("fixture hex");
        for _ in 0..40 {
            let mut corrupted = body.clone();
            for _ in 0..1 + next() % 3 {
                let at = 4 + (next() as usize) % (corrupted.len() - 4);
                corrupted[at] = next() as u8;
            }
            let _ = decode_object(&corrupted);
        }
    }
}

#[test]
fn debug_parser_shapes() {
    let tree = DebugParser::new(
        r#"Outer { a: Some(-12), b: None, c: [1, 2], d: {"k": Inner { x: "y" }}, e: Empty, f: Some(1.5e-7), r#type: Some(true) }"#,
    )
    .parse_all()
    .expect("parse");
    let Dbg::Struct(name, fields) = tree else {
        panic!("not a struct")
    };
    assert_eq!(name, "Outer");
    assert_eq!(fields[0], ("a".into(), Dbg::Num("-12".into())));
    assert_eq!(fields[1], ("b".into(), Dbg::Null));
    assert_eq!(
        fields[2],
        (
            "c".into(),
            Dbg::List(vec![Dbg::Num("1".into()), Dbg::Num("2".into())])
        )
    );
    assert_eq!(fields[4], ("e".into(), Dbg::Struct("Empty".into(), vec![])));
    assert_eq!(fields[5], ("f".into(), Dbg::Num("1.5e-7".into())));
    assert_eq!(fields[6], ("r#type".into(), Dbg::Bool(true)));
    for bad in [
        "",
        "Foo {",
        "Foo { a: }",
        "[1, 2",
        "\"open",
        "Foo { a: 1 } trailing",
        "\"\\q\"",
    ] {
        assert!(DebugParser::new(bad).parse_all().is_err(), "{bad:?} parsed");
    }
    assert_eq!(number("NaN"), Err("unsupported number NaN".into()));
    assert_eq!(number("-inf"), Err("unsupported number -inf".into()));
    assert_eq!(number("3.0"), Ok(json!(3)));
    assert_eq!(number("18446744073709551615"), Ok(json!(u64::MAX)));
}

#[test]
fn go_duration_strings() {
    let cases = [
        (0, "0s"),
        (1, "1ns"),
        (1_500, "1.5µs"),
        (2_000_000, "2ms"),
        (1_500_000_000, "1.5s"),
        (60_000_000_000, "1m0s"),
        (3_600_000_000_000, "1h0m0s"),
        (3_723_500_000_000, "1h2m3.5s"),
        (-90_000_000_000, "-1m30s"),
        (i64::MIN, "-2562047h47m16.854775808s"),
    ];
    for (nanos, expected) in cases {
        assert_eq!(go_duration(nanos), expected, "{nanos}");
    }
}

#[test]
fn times() {
    let secs = |v: i64| Dbg::Num(v.to_string());
    let t = |v: i64| time(Some(&secs(v)), None);
    assert_eq!(t(0), Ok(Some(json!("1970-01-01T00:00:00Z"))));
    assert_eq!(t(951_782_400), Ok(Some(json!("2000-02-29T00:00:00Z"))));
    assert_eq!(t(-1), Ok(Some(json!("1969-12-31T23:59:59Z"))));
    assert_eq!(t(-62_135_596_800), Ok(Some(json!("0001-01-01T00:00:00Z"))));
    assert_eq!(t(253_402_300_799), Ok(Some(json!("9999-12-31T23:59:59Z"))));
    assert!(t(253_402_300_800).is_err());
    assert_eq!(time(None, None), Ok(None));
    let nanos = Dbg::Num("999999999".into());
    assert_eq!(
        time(Some(&secs(1)), Some(Some(&nanos))),
        Ok(Some(json!("1970-01-01T00:00:01.999999Z")))
    );
    assert!(time(Some(&secs(1)), Some(Some(&Dbg::Num("-1".into())))).is_err());
}

#[test]
fn names_come_from_the_schemas() {
    let registry = registry();
    for (snake, json) in [
        ("pod_ip", "podIP"),
        ("host_ipc", "hostIPC"),
        ("cluster_ips", "clusterIPs"),
        ("external_ips", "externalIPs"),
        ("pod_cid_rs", "podCIDRs"),
        (
            "target_cpu_utilization_percentage",
            "targetCPUUtilizationPercentage",
        ),
        ("insecure_skip_tls_verify", "insecureSkipTLSVerify"),
        ("open_apiv3_schema", "openAPIV3Schema"),
    ] {
        assert_eq!(
            registry.names.get(&normalize(snake)).map(String::as_str),
            Some(json)
        );
    }
    assert_eq!(snake_to_camel("some_new_field"), "someNewField");
    assert_eq!(snake_to_camel("r#type"), "type");
}

/// A kubectl request body and the JSON it must decode to.
struct Fixture {
    command: &'static str,
    expected_from: &'static str,
    body_hex: &'static str,
    json: &'static str,
}

/// Bodies captured from kubectl v1.33.1 (the command in each entry) by a
/// loopback HTTP endpoint, and the JSON kubectl itself prints for the same
/// object with `--dry-run=client -o json` (nulls removed), or, for commands
/// without a client-side dry run, JSON checked by hand against the Go types.
const KUBECTL_BODIES: &[Fixture] = &[
    Fixture {
        command: "kubectl auth can-i list pods",
        expected_from: "checked by hand against the Go types",
        body_hex: "6b3873000a320a17617574686f72697a6174696f6e2e6b38732e696f2f7631121753656c665375626a656374416363657373526576696577123d0a100a0012001a0022002a00320038004200121f0a1d0a0764656661756c7412046c6973741a0022002a04706f647332003a001a08080012001a0020001a002200",
        json: r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","metadata":{},"spec":{"resourceAttributes":{"namespace":"default","resource":"pods","verb":"list"}},"status":{"allowed":false}}"#,
    },
    Fixture {
        command: "kubectl auth whoami",
        expected_from: "checked by hand against the Go types",
        body_hex: "6b3873000a2d0a1861757468656e7469636174696f6e2e6b38732e696f2f7631121153656c665375626a656374526576696577121a0a100a0012001a0022002a0032003800420012060a040a0012001a002200",
        json: r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview","metadata":{},"status":{"userInfo":{}}}"#,
    },
    Fixture {
        command: "kubectl autoscale deployment web --min=1 --max=5 --cpu-percent=80",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a290a0e6175746f7363616c696e672f76321217486f72697a6f6e74616c506f644175746f7363616c657212610a130a0377656212001a0022002a0032003800420012440a1a0a0a4465706c6f796d656e7412037765621a07617070732f76311001180522220a085265736f7572636522160a03637075120f0a0b5574696c697a6174696f6e20501a04180020001a002200",
        json: r#"{"kind":"HorizontalPodAutoscaler","apiVersion":"autoscaling/v2","metadata":{"name":"web"},"spec":{"scaleTargetRef":{"kind":"Deployment","name":"web","apiVersion":"apps/v1"},"minReplicas":1,"maxReplicas":5,"metrics":[{"type":"Resource","resource":{"name":"cpu","target":{"type":"Utilization","averageUtilization":80}}}]},"status":{"desiredReplicas":0}}"#,
    },
    Fixture {
        command: "kubectl certificate approve csr1",
        expected_from: "checked by hand against the Go types",
        body_hex: "6b3873000a330a166365727469666963617465732e6b38732e696f2f7631121943657274696669636174655369676e696e675265717565737412ba020a1f0a046373723112001a0022002a0278313201373800420808a5ebdcca06100012af010a4a2d2d2d2d2d424547494e20434552544946494341544520524551554553542d2d2d2d2d0a6162630a2d2d2d2d2d454e4420434552544946494341544520524551554553542d2d2d2d2d0a1205616c6963651a00221473797374656d3a61757468656e746963617465642a0b636c69656e742061757468320d0a016b12080a0276310a0276323a236b756265726e657465732e696f2f6b7562652d6170697365727665722d636c69656e7440901c1a650a630a08417070726f766564120e4b75626563746c417070726f76651a3554686973204353522077617320617070726f766564206279206b75626563746c20636572746966696361746520617070726f76652e2208089daab2d80610002a003204547275651a002200",
        json: r#"{"apiVersion":"certificates.k8s.io/v1","kind":"CertificateSigningRequest","metadata":{"creationTimestamp":"2026-01-02T03:04:05Z","name":"csr1","resourceVersion":"7","uid":"x1"},"spec":{"expirationSeconds":3600,"extra":{"k":["v1","v2"]},"groups":["system:authenticated"],"request":"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KYWJjCi0tLS0tRU5EIENFUlRJRklDQVRFIFJFUVVFU1QtLS0tLQo=","signerName":"kubernetes.io/kube-apiserver-client","usages":["client auth"],"username":"alice"},"status":{"conditions":[{"lastUpdateTime":"2026-11-29T21:11:57Z","message":"This CSR was approved by kubectl certificate approve.","reason":"KubectlApprove","status":"True","type":"Approved"}]}}"#,
    },
    Fixture {
        command: "kubectl create clusterrolebinding crb1 --clusterrole=view --user=alice --serviceaccount=default:sa1",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a320a1c726261632e617574686f72697a6174696f6e2e6b38732e696f2f76311212436c7573746572526f6c6542696e64696e671294010a140a046372623112001a0022002a00320038004200122a0a04557365721219726261632e617574686f72697a6174696f6e2e6b38732e696f1a05616c696365220012200a0e536572766963654163636f756e7412001a03736131220764656661756c741a2e0a19726261632e617574686f72697a6174696f6e2e6b38732e696f120b436c7573746572526f6c651a04766965771a002200",
        json: r#"{"kind":"ClusterRoleBinding","apiVersion":"rbac.authorization.k8s.io/v1","metadata":{"name":"crb1"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"alice"},{"kind":"ServiceAccount","name":"sa1","namespace":"default"}],"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"}}"#,
    },
    Fixture {
        command: "kubectl create configmap bin --from-file=data.bin=<00 01 ff fe \"bin\"> --from-file=text.txt",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a0f0a0276311209436f6e6669674d617012440a130a0362696e12001a0022002a0032003800420012180a08746578742e747874120c6c696e65310a6c696e65320a1a130a08646174612e62696e12070001fffe62696e1a002200",
        json: r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"bin"},"data":{"text.txt":"line1\nline2\n"},"binaryData":{"data.bin":"AAH//mJpbg=="}}"#,
    },
    Fixture {
        command: "kubectl create configmap cfg --from-literal=a=1 --from-literal=b=two",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a0f0a0276311209436f6e6669674d617012270a130a0363666712001a0022002a0032003800420012060a016112013112080a0162120374776f1a002200",
        json: r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cfg"},"data":{"a":"1","b":"two"}}"#,
    },
    Fixture {
        command: "kubectl create cronjob cj1 --image=busybox --schedule=\"*/5 * * * *\" -- date",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a130a0862617463682f7631120743726f6e4a6f6212a7010a130a03636a3112001a0022002a00320038004200128d010a0b2a2f35202a202a202a202a1a002a7c0a130a03636a3112001a0022002a00320038004200126532630a100a0012001a0022002a00320038004200124f12280a03636a31120762757379626f781a04646174652a0042006a007200800100880100900100a201001a094f6e4661696c757265320042004a0052005800600068008201008a01009a0100c201001a001a002200",
        json: r#"{"kind":"CronJob","apiVersion":"batch/v1","metadata":{"name":"cj1"},"spec":{"schedule":"*/5 * * * *","jobTemplate":{"metadata":{"name":"cj1"},"spec":{"template":{"metadata":{},"spec":{"containers":[{"name":"cj1","image":"busybox","command":["date"],"resources":{}}],"restartPolicy":"OnFailure"}}}}},"status":{}}"#,
    },
    Fixture {
        command: "kubectl create deployment web2 --image=nginx --port=80",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a150a07617070732f7631120a4465706c6f796d656e7412bc010a210a047765623212001a0022002a003200380042005a0b0a036170701204776562321288010801120d0a0b0a036170701204776562321a6d0a1d0a0012001a0022002a003200380042005a0b0a03617070120477656232124c122e0a056e67696e7812056e67696e782a00320a0a001000185022002a0042006a007200800100880100900100a201001a00320042004a0052005800600068008201008a01009a0100c2010022020a00280038001a0c0800100018002000280038001a002200",
        json: r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"web2","labels":{"app":"web2"}},"spec":{"replicas":1,"selector":{"matchLabels":{"app":"web2"}},"template":{"metadata":{"labels":{"app":"web2"}},"spec":{"containers":[{"name":"nginx","image":"nginx","ports":[{"containerPort":80}],"resources":{}}]}},"strategy":{}},"status":{}}"#,
    },
    Fixture {
        command: "kubectl create deployment web --image=nginx:1.25 --replicas=2",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a150a07617070732f7631120a4465706c6f796d656e7412b0010a1f0a0377656212001a0022002a003200380042005a0a0a036170701203776562127f0802120c0a0a0a0361707012037765621a650a1c0a0012001a0022002a003200380042005a0a0a036170701203776562124512270a056e67696e78120a6e67696e783a312e32352a0042006a007200800100880100900100a201001a00320042004a0052005800600068008201008a01009a0100c2010022020a00280038001a0c0800100018002000280038001a002200",
        json: r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"web","labels":{"app":"web"}},"spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"nginx","image":"nginx:1.25","resources":{}}]}},"strategy":{}},"status":{}}"#,
    },
    Fixture {
        command: "kubectl create ingress ing2 --default-backend=svc1:http --rule=\"a.com/=svc2:80\" --class=nginx --annotation=a=b",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a1f0a146e6574776f726b696e672e6b38732e696f2f76311207496e677265737312680a1c0a04696e673212001a0022002a0032003800420062060a016112016212440a1222100a047376633112080a046874747010001a270a05612e636f6d121e0a1c0a1a0a012f120e220c0a047376633212040a0010501a05457861637422056e67696e781a020a001a002200",
        json: r#"{"kind":"Ingress","apiVersion":"networking.k8s.io/v1","metadata":{"name":"ing2","annotations":{"a":"b"}},"spec":{"ingressClassName":"nginx","defaultBackend":{"service":{"name":"svc1","port":{"name":"http"}}},"rules":[{"host":"a.com","http":{"paths":[{"path":"/","pathType":"Exact","backend":{"service":{"name":"svc2","port":{"number":80}}}}]}}]},"status":{"loadBalancer":{}}}"#,
    },
    Fixture {
        command: "kubectl create ingress ing1 --rule=\"foo.com/bar*=svc1:8080,tls=my-cert\"",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a1f0a146e6574776f726b696e672e6b38732e696f2f76311207496e677265737312600a140a04696e673112001a0022002a00320038004200124412120a07666f6f2e636f6d12076d792d636572741a2e0a07666f6f2e636f6d12230a210a1f0a042f626172120f220d0a047376633112050a0010903f1a065072656669781a020a001a002200",
        json: r#"{"kind":"Ingress","apiVersion":"networking.k8s.io/v1","metadata":{"name":"ing1"},"spec":{"tls":[{"hosts":["foo.com"],"secretName":"my-cert"}],"rules":[{"host":"foo.com","http":{"paths":[{"path":"/bar","pathType":"Prefix","backend":{"service":{"name":"svc1","port":{"number":8080}}}}]}}]},"status":{"loadBalancer":{}}}"#,
    },
    Fixture {
        command: "kubectl create job j2 --from=cronjob/cj1 (a CronJob with explicit zero/false pointer fields)",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a0f0a0862617463682f763112034a6f62128a020a5f0a026a3212001a0022002a00320038004200622b0a2163726f6e6a6f622e6b756265726e657465732e696f2f696e7374616e746961746512066d616e75616c6a1e0a0743726f6e4a6f621a03636a31220263312a0862617463682f76313001129c013297010a100a0012001a0022002a0032003800420012820112540a0163120762757379626f782a00320a0a001000185022002a0042220a0d0a0363707512060a043530306d0a110a066d656d6f727912070a053132384d696a0072007a0410003800800100880100900100a201001a054e657665722000320042004a0052005800600068007204100018008201008a01009a0100a80100c2010038001a082000280030003a001a002200",
        json: r#"{"kind":"Job","apiVersion":"batch/v1","metadata":{"name":"j2","annotations":{"cronjob.kubernetes.io/instantiate":"manual"},"ownerReferences":[{"apiVersion":"batch/v1","kind":"CronJob","name":"cj1","uid":"c1","controller":true}]},"spec":{"backoffLimit":0,"template":{"metadata":{},"spec":{"containers":[{"name":"c","image":"busybox","ports":[{"containerPort":80}],"resources":{"limits":{"cpu":"500m","memory":"128Mi"}},"securityContext":{"privileged":false,"allowPrivilegeEscalation":false}}],"restartPolicy":"Never","terminationGracePeriodSeconds":0,"automountServiceAccountToken":false,"securityContext":{"runAsUser":0,"runAsNonRoot":false}}}},"status":{}}"#,
    },
    Fixture {
        command: "kubectl create job j1 --image=busybox -- echo hi",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a0f0a0862617463682f763112034a6f621284010a120a026a3112001a0022002a00320038004200126432620a100a0012001a0022002a00320038004200124e122b0a026a31120762757379626f781a046563686f1a0268692a0042006a007200800100880100900100a201001a054e65766572320042004a0052005800600068008201008a01009a0100c201001a082000280030003a001a002200",
        json: r#"{"kind":"Job","apiVersion":"batch/v1","metadata":{"name":"j1"},"spec":{"template":{"metadata":{},"spec":{"containers":[{"name":"j1","image":"busybox","command":["echo","hi"],"resources":{}}],"restartPolicy":"Never"}}},"status":{}}"#,
    },
    Fixture {
        command: "kubectl create namespace ns1",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a0f0a02763112094e616d657370616365121b0a130a036e733112001a0022002a0032003800420012001a020a001a002200",
        json: r#"{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"ns1"},"spec":{},"status":{}}"#,
    },
    Fixture {
        command: "kubectl create pdb pdb1 --selector=app=web --min-available=0",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a200a09706f6c6963792f76311213506f6444697372757074696f6e427564676574123a0a140a047064623112001a0022002a0032003800420012160a06080010001a00120c0a0a0a0361707012037765621a0a080018002000280030001a002200",
        json: r#"{"kind":"PodDisruptionBudget","apiVersion":"policy/v1","metadata":{"name":"pdb1"},"spec":{"minAvailable":0,"selector":{"matchLabels":{"app":"web"}}},"status":{"disruptionsAllowed":0,"currentHealthy":0,"desiredHealthy":0,"expectedPods":0}}"#,
    },
    Fixture {
        command: "kubectl create priorityclass high --value=1000 --description=\"high prio\" --preemption-policy=Never",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a250a147363686564756c696e672e6b38732e696f2f7631120d5072696f72697479436c617373122d0a140a046869676812001a0022002a0032003800420010e8071800220968696768207072696f2a054e657665721a002200",
        json: r#"{"kind":"PriorityClass","apiVersion":"scheduling.k8s.io/v1","metadata":{"name":"high"},"value":1000,"description":"high prio","preemptionPolicy":"Never"}"#,
    },
    Fixture {
        command: "kubectl create quota q1 --hard=cpu=1,memory=1G,pods=2",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a130a027631120d5265736f7572636551756f746112410a120a02713112001a0022002a0032003800420012290a0a0a0363707512030a01310a0e0a066d656d6f727912040a0231470a0b0a04706f647312030a01321a001a002200",
        json: r#"{"kind":"ResourceQuota","apiVersion":"v1","metadata":{"name":"q1"},"spec":{"hard":{"cpu":"1","memory":"1G","pods":"2"}},"status":{}}"#,
    },
    Fixture {
        command: "kubectl create role r1 --verb=get,list --resource=pods,deployments.apps",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a240a1c726261632e617574686f72697a6174696f6e2e6b38732e696f2f76311204526f6c6512490a120a02723112001a0022002a0032003800420012130a036765740a046c69737412001a04706f6473121e0a036765740a046c6973741204617070731a0b6465706c6f796d656e74731a002200",
        json: r#"{"kind":"Role","apiVersion":"rbac.authorization.k8s.io/v1","metadata":{"name":"r1"},"rules":[{"verbs":["get","list"],"apiGroups":[""],"resources":["pods"]},{"verbs":["get","list"],"apiGroups":["apps"],"resources":["deployments"]}]}"#,
    },
    Fixture {
        command: "kubectl create secret docker-registry reg --docker-server=r.example --docker-username=u --docker-password=p",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a0c0a02763112065365637265741291010a130a0372656712001a0022002a00320038004200125a0a112e646f636b6572636f6e6669676a736f6e12457b226175746873223a7b22722e6578616d706c65223a7b22757365726e616d65223a2275222c2270617373776f7264223a2270222c2261757468223a2264547077227d7d7d1a1e6b756265726e657465732e696f2f646f636b6572636f6e6669676a736f6e1a002200",
        json: r#"{"kind":"Secret","apiVersion":"v1","metadata":{"name":"reg"},"data":{".dockerconfigjson":"eyJhdXRocyI6eyJyLmV4YW1wbGUiOnsidXNlcm5hbWUiOiJ1IiwicGFzc3dvcmQiOiJwIiwiYXV0aCI6ImRUcHcifX19"},"type":"kubernetes.io/dockerconfigjson"}"#,
    },
    Fixture {
        command: "kubectl create secret generic sec --from-literal=user=admin --from-file=blob=<00 01 ff fe \"bin\">",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a0c0a027631120653656372657412370a130a0373656312001a0022002a00320038004200120f0a04626c6f6212070001fffe62696e120d0a0475736572120561646d696e1a001a002200",
        json: r#"{"kind":"Secret","apiVersion":"v1","metadata":{"name":"sec"},"data":{"blob":"AAH//mJpbg==","user":"YWRtaW4="}}"#,
    },
    Fixture {
        command: "kubectl create service clusterip svc1 --tcp=80:8080 --tcp=443:https",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a0d0a0276311207536572766963651290010a210a047376633112001a0022002a003200380042005a0b0a0361707012047376633112670a1b0a0738302d38303830120354435018502207080010903f1a0028000a220a093434332d6874747073120354435018bb03220b080110001a0568747470732800120b0a036170701204737663311a002209436c757374657249503a00420052005a00600068001a020a001a002200",
        json: r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"svc1","labels":{"app":"svc1"}},"spec":{"ports":[{"name":"80-8080","protocol":"TCP","port":80,"targetPort":8080},{"name":"443-https","protocol":"TCP","port":443,"targetPort":"https"}],"selector":{"app":"svc1"},"type":"ClusterIP"},"status":{"loadBalancer":{}}}"#,
    },
    Fixture {
        command: "kubectl create service nodeport np1 --tcp=80:8080 --node-port=30080",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a0d0a027631120753657276696365126a0a1f0a036e703112001a0022002a003200380042005a0a0a0361707012036e703112430a1d0a0738302d38303830120354435018502207080010903f1a002880eb01120a0a0361707012036e70311a0022084e6f6465506f72743a00420052005a00600068001a020a001a002200",
        json: r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"np1","labels":{"app":"np1"}},"spec":{"ports":[{"name":"80-8080","protocol":"TCP","port":80,"targetPort":8080,"nodePort":30080}],"selector":{"app":"np1"},"type":"NodePort"},"status":{"loadBalancer":{}}}"#,
    },
    Fixture {
        command: "kubectl create serviceaccount sa1",
        expected_from: "kubectl --dry-run=client -o json, without nulls",
        body_hex: "6b3873000a140a027631120e536572766963654163636f756e7412150a130a0373613112001a0022002a003200380042001a002200",
        json: r#"{"kind":"ServiceAccount","apiVersion":"v1","metadata":{"name":"sa1"}}"#,
    },
    Fixture {
        command: "kubectl create token sa1 --duration=10m",
        expected_from: "checked by hand against the Go types",
        body_hex: "6b3873000a280a1861757468656e7469636174696f6e2e6b38732e696f2f7631120c546f6b656e52657175657374121d0a100a0012001a0022002a00320038004200120320d8041a040a0012001a002200",
        json: r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","metadata":{},"spec":{"expirationSeconds":600},"status":{"token":""}}"#,
    },
];
