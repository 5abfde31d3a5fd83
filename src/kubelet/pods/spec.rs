//! Pure translations from a Pod to CRI requests: QoS class, cgroup parent, DNS, hostname,
//! port mappings, namespaces, security contexts and cgroup resources. No I/O, so every rule is
//! unit-tested against what the upstream kubelet sends.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};

use crate::kubelet::args::{bytes, cpu_millis};
use crate::kubelet::labels;

/// CPU shares for 1 CPU, and the floor the kernel accepts.
const SHARES_PER_CPU: i64 = 1024;
const MIN_SHARES: i64 = 2;
const QUOTA_PERIOD: i64 = 100_000;
const MIN_QUOTA: i64 = 1000;
/// The kubelet's resolv.conf limits.
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

fn quantity<'a>(
    map: Option<&'a BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    key: &str,
) -> Option<&'a str> {
    map.and_then(|m| m.get(key)).map(|q| q.0.as_str())
}

/// Millicores of a resource list entry.
pub fn cpu(resources: Option<&ResourceRequirements>, limits: bool) -> Option<u64> {
    let r = resources?;
    quantity(
        if limits {
            r.limits.as_ref()
        } else {
            r.requests.as_ref()
        },
        "cpu",
    )
    .and_then(cpu_millis)
}

/// Bytes of a resource list entry (`memory`, `ephemeral-storage`).
pub fn amount(resources: Option<&ResourceRequirements>, limits: bool, key: &str) -> Option<u64> {
    let r = resources?;
    quantity(
        if limits {
            r.limits.as_ref()
        } else {
            r.requests.as_ref()
        },
        key,
    )
    .and_then(bytes)
}

pub fn all_containers(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
}

/// The QoS class, by the rules of `GetPodQOS`.
pub fn qos_class(spec: &PodSpec) -> QosClass {
    let mut any = false;
    let mut guaranteed = true;
    for c in all_containers(spec) {
        let r = c.resources.as_ref();
        for key in ["cpu", "memory"] {
            let request =
                quantity(r.and_then(|r| r.requests.as_ref()), key).filter(|q| !is_zero(q));
            let limit = quantity(r.and_then(|r| r.limits.as_ref()), key).filter(|q| !is_zero(q));
            if request.is_some() || limit.is_some() {
                any = true;
            }
            match (request, limit) {
                (_, None) => guaranteed = false,
                (Some(req), Some(lim)) if !same_quantity(key, req, lim) => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        QosClass::BestEffort
    } else if guaranteed {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

fn is_zero(q: &str) -> bool {
    bytes(q) == Some(0)
}

fn same_quantity(key: &str, a: &str, b: &str) -> bool {
    if key == "cpu" {
        cpu_millis(a) == cpu_millis(b)
    } else {
        bytes(a) == bytes(b)
    }
}

/// The pod's cgroup parent for the cgroupfs driver (`/kubepods/burstable/pod<uid>`) or the
/// systemd driver (`kubepods-burstable-pod<uid>.slice`).
pub fn cgroup_parent(qos: QosClass, uid: &str, systemd: bool) -> String {
    if systemd {
        let uid = uid.replace('-', "_");
        match qos {
            QosClass::Guaranteed => format!("kubepods-pod{uid}.slice"),
            QosClass::Burstable => format!("kubepods-burstable-pod{uid}.slice"),
            QosClass::BestEffort => format!("kubepods-besteffort-pod{uid}.slice"),
        }
    } else {
        match qos {
            QosClass::Guaranteed => format!("/kubepods/pod{uid}"),
            QosClass::Burstable => format!("/kubepods/burstable/pod{uid}"),
            QosClass::BestEffort => format!("/kubepods/besteffort/pod{uid}"),
        }
    }
}

/// `LinuxContainerResources` for a container: shares from the CPU request, CFS quota from the
/// CPU limit, memory limit, and the OOM score the QoS class implies.
pub fn container_resources(
    container: &Container,
    qos: QosClass,
    node_memory_bytes: u64,
) -> cri::LinuxContainerResources {
    let r = container.resources.as_ref();
    let cpu_request = cpu(r, false).or_else(|| cpu(r, true));
    let cpu_limit = cpu(r, true);
    let cpu_shares = match cpu_request {
        Some(m) if m > 0 => (m as i64 * SHARES_PER_CPU / 1000).max(MIN_SHARES),
        _ => MIN_SHARES,
    };
    let (cpu_quota, cpu_period) = match cpu_limit {
        Some(m) if m > 0 => (
            (m as i64 * QUOTA_PERIOD / 1000).max(MIN_QUOTA),
            QUOTA_PERIOD,
        ),
        _ => (0, 0),
    };
    let memory_limit = amount(r, true, "memory").unwrap_or(0) as i64;
    let memory_request = amount(r, false, "memory").or_else(|| amount(r, true, "memory"));
    let oom_score_adj = match qos {
        QosClass::Guaranteed => -997,
        QosClass::BestEffort => 1000,
        QosClass::Burstable => {
            let request = memory_request.unwrap_or(0) as i128;
            let capacity = node_memory_bytes.max(1) as i128;
            (1000 - 1000 * request / capacity).clamp(2, 999) as i64
        }
    };
    cri::LinuxContainerResources {
        cpu_period,
        cpu_quota,
        cpu_shares,
        memory_limit_in_bytes: memory_limit,
        oom_score_adj,
        ..Default::default()
    }
}

/// The node's resolv.conf, as far as the kubelet reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvConf {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

pub fn parse_resolv_conf(text: &str) -> ResolvConf {
    let mut out = ResolvConf::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => out.nameservers.extend(words.next().map(str::to_string)),
            // The last search/domain line wins, as in the resolver.
            Some("search") | Some("domain") => out.searches = words.map(str::to_string).collect(),
            Some("options") => out.options.extend(words.map(str::to_string)),
            _ => {}
        }
    }
    out
}

/// The sandbox's DNS config per `dnsPolicy` and `dnsConfig`.
pub fn dns_config(
    pod: &Pod,
    cluster_dns: &[IpAddr],
    cluster_domain: &str,
    host: &ResolvConf,
) -> cri::DnsConfig {
    let spec = pod.spec.as_ref();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let cluster_first = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network,
        _ => false,
    } && !cluster_dns.is_empty();
    let mut config = match policy {
        "None" => cri::DnsConfig::default(),
        _ if cluster_first => {
            let mut searches = vec![
                format!("{namespace}.svc.{cluster_domain}"),
                format!("svc.{cluster_domain}"),
                cluster_domain.to_string(),
            ];
            searches.extend(host.searches.iter().cloned());
            cri::DnsConfig {
                servers: cluster_dns.iter().map(IpAddr::to_string).collect(),
                searches,
                options: vec!["ndots:5".to_string()],
            }
        }
        _ => cri::DnsConfig {
            servers: host.nameservers.clone(),
            searches: host.searches.clone(),
            options: host.options.clone(),
        },
    };
    if let Some(extra) = spec.and_then(|s| s.dns_config.as_ref()) {
        config
            .servers
            .extend(extra.nameservers.iter().flatten().cloned());
        config
            .searches
            .extend(extra.searches.iter().flatten().cloned());
        for option in extra.options.iter().flatten() {
            let name = option.name.clone().unwrap_or_default();
            let rendered = match &option.value {
                Some(v) => format!("{name}:{v}"),
                None => name.clone(),
            };
            config
                .options
                .retain(|o| o.split(':').next() != Some(name.as_str()));
            config.options.push(rendered);
        }
    }
    let mut seen = std::collections::HashSet::new();
    config.searches.retain(|s| seen.insert(s.clone()));
    config.servers.truncate(MAX_NAMESERVERS);
    config.searches.truncate(MAX_SEARCHES);
    config
}

/// The pod's hostname (`spec.hostname` or the name, at most 63 characters) and its domain
/// (`<subdomain>.<ns>.svc.<cluster-domain>` when a subdomain is set).
pub fn hostname_and_domain(pod: &Pod, cluster_domain: &str) -> (String, Option<String>) {
    let spec = pod.spec.as_ref();
    let name = pod.metadata.name.as_deref().unwrap_or("pod");
    let mut hostname = spec
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| name.to_string());
    if hostname.len() > 63 {
        hostname.truncate(63);
        while hostname.ends_with(['-', '.']) {
            hostname.pop();
        }
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let domain = spec
        .and_then(|s| s.subdomain.clone())
        .filter(|s| !s.is_empty())
        .map(|sub| format!("{sub}.{namespace}.svc.{cluster_domain}"));
    (hostname, domain)
}

pub fn protocol(name: Option<&str>) -> i32 {
    match name {
        Some("UDP") => cri::Protocol::Udp as i32,
        Some("SCTP") => cri::Protocol::Sctp as i32,
        _ => cri::Protocol::Tcp as i32,
    }
}

/// Host port mappings from every container port with a `hostPort`.
pub fn port_mappings(spec: &PodSpec) -> Vec<cri::PortMapping> {
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.unwrap_or(0) != 0)
        .map(|p| cri::PortMapping {
            protocol: protocol(p.protocol.as_deref()),
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect()
}

pub fn namespace_options(spec: &PodSpec) -> cri::NamespaceOption {
    let mode = |host: Option<bool>, otherwise: cri::NamespaceMode| {
        if host.unwrap_or(false) {
            cri::NamespaceMode::Node as i32
        } else {
            otherwise as i32
        }
    };
    cri::NamespaceOption {
        network: mode(spec.host_network, cri::NamespaceMode::Pod),
        pid: mode(
            spec.host_pid,
            if spec.share_process_namespace.unwrap_or(false) {
                cri::NamespaceMode::Pod
            } else {
                cri::NamespaceMode::Container
            },
        ),
        ipc: mode(spec.host_ipc, cri::NamespaceMode::Pod),
        ..Default::default()
    }
}

fn seccomp(
    profile: Option<&k8s_openapi::api::core::v1::SeccompProfile>,
) -> Option<cri::SecurityProfile> {
    let profile = profile?;
    Some(match profile.type_.as_str() {
        "RuntimeDefault" => cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
            ..Default::default()
        },
        "Localhost" => cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::Localhost as i32,
            localhost_ref: profile.localhost_profile.clone().unwrap_or_default(),
        },
        _ => cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::Unconfined as i32,
            ..Default::default()
        },
    })
}

fn supplemental_groups(spec: &PodSpec) -> Vec<i64> {
    let psc = spec.security_context.as_ref();
    let mut groups: Vec<i64> = psc.and_then(|p| p.fs_group).into_iter().collect();
    groups.extend(
        psc.and_then(|p| p.supplemental_groups.clone())
            .into_iter()
            .flatten(),
    );
    groups
}

/// The sandbox's Linux config: cgroup parent, namespaces, pod-level identity, sysctls.
pub fn linux_sandbox(spec: &PodSpec, cgroup_parent: String) -> cri::LinuxPodSandboxConfig {
    let psc = spec.security_context.as_ref();
    let privileged = all_containers(spec).any(|c| {
        c.security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false)
    });
    cri::LinuxPodSandboxConfig {
        cgroup_parent,
        security_context: Some(cri::LinuxSandboxSecurityContext {
            namespace_options: Some(namespace_options(spec)),
            run_as_user: psc
                .and_then(|p| p.run_as_user)
                .map(|value| cri::Int64Value { value }),
            run_as_group: psc
                .and_then(|p| p.run_as_group)
                .map(|value| cri::Int64Value { value }),
            supplemental_groups: supplemental_groups(spec),
            privileged,
            seccomp: seccomp(psc.and_then(|p| p.seccomp_profile.as_ref())),
            ..Default::default()
        }),
        sysctls: psc
            .and_then(|p| p.sysctls.clone())
            .into_iter()
            .flatten()
            .map(|s| (s.name, s.value))
            .collect(),
        ..Default::default()
    }
}

/// A container's security context, the container's settings over the pod's.
pub fn container_security(
    spec: &PodSpec,
    container: &Container,
) -> cri::LinuxContainerSecurityContext {
    let psc = spec.security_context.as_ref();
    let csc = container.security_context.as_ref();
    let privileged = csc.and_then(|c| c.privileged).unwrap_or(false);
    let capabilities = csc
        .and_then(|c| c.capabilities.as_ref())
        .map(|caps| cri::Capability {
            add_capabilities: caps.add.clone().unwrap_or_default(),
            drop_capabilities: caps.drop.clone().unwrap_or_default(),
            ..Default::default()
        });
    cri::LinuxContainerSecurityContext {
        capabilities,
        privileged,
        namespace_options: Some(namespace_options(spec)),
        run_as_user: csc
            .and_then(|c| c.run_as_user)
            .or_else(|| psc.and_then(|p| p.run_as_user))
            .map(|value| cri::Int64Value { value }),
        run_as_group: csc
            .and_then(|c| c.run_as_group)
            .or_else(|| psc.and_then(|p| p.run_as_group))
            .map(|value| cri::Int64Value { value }),
        readonly_rootfs: csc
            .and_then(|c| c.read_only_root_filesystem)
            .unwrap_or(false),
        supplemental_groups: supplemental_groups(spec),
        no_new_privs: csc.and_then(|c| c.allow_privilege_escalation) == Some(false),
        seccomp: seccomp(
            csc.and_then(|c| c.seccomp_profile.as_ref())
                .or_else(|| psc.and_then(|p| p.seccomp_profile.as_ref())),
        ),
        ..Default::default()
    }
}

/// The labels and annotations of the sandbox (the pod's plus the kubelet's own).
pub fn sandbox_metadata(pod: &Pod) -> (HashMap<String, String>, HashMap<String, String>) {
    let meta = &pod.metadata;
    let mut labels: HashMap<String, String> = meta
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert(
        labels::POD_NAME.into(),
        meta.name.clone().unwrap_or_default(),
    );
    labels.insert(
        labels::POD_NAMESPACE.into(),
        meta.namespace.clone().unwrap_or_default(),
    );
    labels.insert(labels::POD_UID.into(), meta.uid.clone().unwrap_or_default());
    labels.insert(labels::MANAGED_BY.into(), "true".into());
    let mut annotations: HashMap<String, String> = meta
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    annotations.insert(
        labels::TERMINATION_GRACE.into(),
        termination_grace_seconds(pod).to_string(),
    );
    (labels, annotations)
}

/// `deletionGracePeriodSeconds`, else `terminationGracePeriodSeconds`, else 30.
pub fn termination_grace_seconds(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30)
        .max(0)
}

/// Why this kubelet must not run `pod`, if a field it turns into host paths, file names or
/// file contents could not have passed the API's validation (an object written straight
/// into the store, or by an older version): the namespace, name and uid (they name the
/// pod's directories and log directory), the container and volume names (directories under
/// them) and the host aliases (lines of the pod's `/etc/hosts`). Such a pod is skipped
/// with a warning; every other pod runs.
pub fn untrusted_field_problem(pod: &Pod) -> Option<String> {
    use crate::names;
    let meta = &pod.metadata;
    let namespace = meta.namespace.as_deref().unwrap_or("");
    let name = meta.name.as_deref().unwrap_or("");
    let uid = meta.uid.as_deref().unwrap_or("");
    if !names::dns1123_label(namespace).is_empty() {
        return Some("metadata.namespace is not a DNS label".into());
    }
    if !names::dns1123_subdomain(name).is_empty() {
        return Some("metadata.name is not a DNS subdomain".into());
    }
    if uid.is_empty()
        || uid.len() > 64
        || !uid.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
    {
        return Some("metadata.uid is not a UID".into());
    }
    let spec = pod.spec.as_ref()?;
    let container_names = spec
        .containers
        .iter()
        .map(|c| &c.name)
        .chain(spec.init_containers.iter().flatten().map(|c| &c.name))
        .chain(spec.ephemeral_containers.iter().flatten().map(|c| &c.name));
    for container in container_names {
        if !names::dns1123_label(container).is_empty() {
            return Some("a container name is not a DNS label".into());
        }
    }
    for volume in spec.volumes.iter().flatten() {
        if !names::dns1123_label(&volume.name).is_empty() {
            return Some("a volume name is not a DNS label".into());
        }
    }
    for alias in spec.host_aliases.iter().flatten() {
        if names::parse_ip_sloppy(&alias.ip).is_none() {
            return Some("a hostAliases ip is not an IP address".into());
        }
        if alias
            .hostnames
            .iter()
            .flatten()
            .any(|h| !names::dns1123_subdomain(h).is_empty())
        {
            return Some("a hostAliases hostname is not a DNS subdomain".into());
        }
    }
    None
}

/// `<pod-log-dir>/<namespace>_<name>_<uid>`.
pub fn pod_log_directory(root: &Path, pod: &Pod) -> std::path::PathBuf {
    root.join(format!(
        "{}_{}_{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.uid.as_deref().unwrap_or("")
    ))
}

/// The image pull policy, defaulted as the API server does (Always for `:latest` or no tag).
pub fn pull_policy(container: &Container) -> &str {
    if let Some(p) = container.image_pull_policy.as_deref() {
        return p;
    }
    let image = container.image.as_deref().unwrap_or("");
    let name = image.split('@').next().unwrap_or(image);
    let has_digest = image.contains('@');
    let tag = name
        .rsplit_once(':')
        .filter(|(_, t)| !t.contains('/'))
        .map(|(_, t)| t);
    if !has_digest && tag.is_none_or(|t| t == "latest") {
        "Always"
    } else {
        "IfNotPresent"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    fn with_resources(requests: serde_json::Value, limits: serde_json::Value) -> Pod {
        pod(
            json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1", "resources": {"requests": requests, "limits": limits}}]}}),
        )
    }

    #[test]
    fn qos_classes() {
        let be = with_resources(json!({}), json!({}));
        assert_eq!(qos_class(be.spec.as_ref().unwrap()), QosClass::BestEffort);
        let g = with_resources(
            json!({"cpu": "500m", "memory": "64Mi"}),
            json!({"cpu": "0.5", "memory": "64Mi"}),
        );
        assert_eq!(qos_class(g.spec.as_ref().unwrap()), QosClass::Guaranteed);
        let b = with_resources(json!({"memory": "32Mi"}), json!({"memory": "64Mi"}));
        assert_eq!(qos_class(b.spec.as_ref().unwrap()), QosClass::Burstable);
        assert_eq!(
            cgroup_parent(QosClass::Burstable, "a-b", false),
            "/kubepods/burstable/poda-b"
        );
        assert_eq!(
            cgroup_parent(QosClass::Guaranteed, "a-b", true),
            "kubepods-poda_b.slice"
        );
    }

    #[test]
    fn resources_become_cgroup_settings() {
        let p = with_resources(
            json!({"cpu": "250m", "memory": "32Mi"}),
            json!({"cpu": "500m", "memory": "64Mi"}),
        );
        let c = &p.spec.as_ref().unwrap().containers[0];
        let r = container_resources(c, QosClass::Burstable, 1024 * 1024 * 1024);
        assert_eq!(r.cpu_shares, 256);
        assert_eq!((r.cpu_quota, r.cpu_period), (50_000, 100_000));
        assert_eq!(r.memory_limit_in_bytes, 64 * 1024 * 1024);
        assert_eq!(r.oom_score_adj, 1000 - 1000 * 32 / 1024);
        let none = with_resources(json!({}), json!({}));
        let r = container_resources(
            &none.spec.as_ref().unwrap().containers[0],
            QosClass::BestEffort,
            1,
        );
        assert_eq!(
            (
                r.cpu_shares,
                r.cpu_quota,
                r.memory_limit_in_bytes,
                r.oom_score_adj
            ),
            (2, 0, 0, 1000)
        );
        let _ = Quantity("1".into());
    }

    #[test]
    fn dns_policies() {
        let host = parse_resolv_conf(
            "# comment\nnameserver 1.1.1.1\nnameserver 8.8.8.8\nsearch example.com\noptions edns0\n",
        );
        assert_eq!(host.nameservers, ["1.1.1.1", "8.8.8.8"]);
        let dns: Vec<IpAddr> = vec!["10.43.0.10".parse().unwrap()];
        let p = pod(
            json!({"metadata": {"name": "p", "namespace": "team"}, "spec": {"containers": []}}),
        );
        let c = dns_config(&p, &dns, "cluster.local", &host);
        assert_eq!(c.servers, ["10.43.0.10"]);
        assert_eq!(
            c.searches,
            [
                "team.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "example.com"
            ]
        );
        assert_eq!(c.options, ["ndots:5"]);

        let p = pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [], "dnsPolicy": "Default"}}),
        );
        assert_eq!(
            dns_config(&p, &dns, "cluster.local", &host).servers,
            ["1.1.1.1", "8.8.8.8"]
        );

        // hostNetwork with ClusterFirst falls back to the node's resolver.
        let p = pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [], "hostNetwork": true}}),
        );
        assert_eq!(
            dns_config(&p, &dns, "cluster.local", &host).servers,
            ["1.1.1.1", "8.8.8.8"]
        );

        let p = pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [], "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["9.9.9.9"], "searches": ["a.b"], "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}}}),
        );
        let c = dns_config(&p, &dns, "cluster.local", &host);
        assert_eq!(
            (c.servers, c.searches, c.options),
            (
                vec!["9.9.9.9".to_string()],
                vec!["a.b".to_string()],
                vec!["ndots:2".to_string(), "edns0".to_string()]
            )
        );
    }

    #[test]
    fn hostnames_ports_and_namespaces() {
        let p = pod(
            json!({"metadata": {"name": "web-0", "namespace": "ns"}, "spec": {"hostname": "web", "subdomain": "svc",
            "hostPID": true,
            "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 53, "protocol": "UDP"}]}]}}),
        );
        assert_eq!(
            hostname_and_domain(&p, "cluster.local"),
            (
                "web".to_string(),
                Some("svc.ns.svc.cluster.local".to_string())
            )
        );
        let ports = port_mappings(p.spec.as_ref().unwrap());
        assert_eq!(ports.len(), 1);
        assert_eq!((ports[0].container_port, ports[0].host_port), (80, 8080));
        let ns = namespace_options(p.spec.as_ref().unwrap());
        assert_eq!(ns.pid, cri::NamespaceMode::Node as i32);
        assert_eq!(ns.network, cri::NamespaceMode::Pod as i32);
    }

    #[test]
    fn security_context_container_over_pod() {
        let p = pod(
            json!({"metadata": {"name": "p"}, "spec": {"securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000},
            "containers": [{"name": "c", "securityContext": {"runAsUser": 1001, "readOnlyRootFilesystem": true,
                "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}}]}}),
        );
        let spec = p.spec.as_ref().unwrap();
        let sc = container_security(spec, &spec.containers[0]);
        assert_eq!(sc.run_as_user.map(|v| v.value), Some(1001));
        assert_eq!(sc.run_as_group.map(|v| v.value), Some(3000));
        assert!(sc.readonly_rootfs);
        assert_eq!(sc.supplemental_groups, [2000]);
        let caps = sc.capabilities.unwrap();
        assert_eq!(
            (caps.add_capabilities, caps.drop_capabilities),
            (vec!["NET_ADMIN".to_string()], vec!["ALL".to_string()])
        );
    }

    #[test]
    fn pull_policy_defaults() {
        let c = |image: &str| Container {
            name: "c".into(),
            image: Some(image.into()),
            ..Default::default()
        };
        assert_eq!(pull_policy(&c("busybox")), "Always");
        assert_eq!(pull_policy(&c("busybox:latest")), "Always");
        assert_eq!(pull_policy(&c("localhost:5000/busybox")), "Always");
        assert_eq!(pull_policy(&c("localhost:5000/busybox:1")), "IfNotPresent");
        assert_eq!(pull_policy(&c("busybox@sha256:abc")), "IfNotPresent");
    }

    #[test]
    fn pods_with_hostile_identity_fields_are_not_run() {
        let good: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "default", "name": "web-1", "uid": "0b8a3f4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"},
            "spec": {"containers": [{"name": "c", "image": "x"}],
                     "volumes": [{"name": "data", "emptyDir": {}}],
                     "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["db.local"]}]}
        }))
        .expect("pod");
        assert_eq!(untrusted_field_problem(&good), None);
        let hostile: [(&str, serde_json::Value); 8] = [
            ("/metadata/uid", serde_json::json!("../../../etc")),
            ("/metadata/uid", serde_json::json!("/etc")),
            ("/metadata/namespace", serde_json::json!("a/b")),
            ("/metadata/name", serde_json::json!("x\ny")),
            ("/spec/containers/0/name", serde_json::json!("..")),
            ("/spec/volumes/0/name", serde_json::json!("a/../../b")),
            (
                "/spec/hostAliases/0/ip",
                serde_json::json!("10.0.0.1\n1.2.3.4 evil"),
            ),
            ("/spec/hostAliases/0/hostnames/0", serde_json::json!("a\tb")),
        ];
        for (pointer, value) in hostile {
            let mut raw = serde_json::to_value(&good).expect("json");
            *raw.pointer_mut(pointer).expect(pointer) = value.clone();
            let pod: Pod = serde_json::from_value(raw).expect("pod");
            assert!(
                untrusted_field_problem(&pod).is_some(),
                "{pointer} = {value} was accepted"
            );
        }
    }
}
