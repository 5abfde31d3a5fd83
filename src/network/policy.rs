//! NetworkPolicy enforcement on this node, as k3s's embedded policy controller does, with
//! nftables: the table `inet k3rs-netpol` is rendered whole from the watched NetworkPolicies,
//! Pods (this node's, plus every pod's IP and labels cluster-wide for the selectors) and
//! Namespaces, and applied atomically with `nft -f -`.
//!
//! Semantics (networking.k8s.io/v1): a pod selected by a policy of a type (Ingress/Egress) is
//! default-deny in that direction; traffic is allowed if any rule of any policy selecting it
//! allows it (a rule is `from`/`to` peers — podSelector, namespaceSelector, both, or ipBlock
//! with `except` — AND `ports`, with protocol, number or named port, and `endPort`). Replies
//! are always allowed (`ct state established,related`). Traffic between pods on one bridge is
//! filtered too: the controller turns on `br_netfilter` (`net.bridge.bridge-nf-call-iptables`)
//! so bridged packets reach the forward hook. Traffic from the node itself to its pods
//! (kubelet probes) is not filtered, as in kube-router.
//!
//! Every object field is untrusted, also after it is stored: the script is built only from
//! typed values (addresses as `IpAddr`, CIDRs parsed, ports as numbers, protocols from a
//! fixed list, chain names from an index), and the only free text in it, the namespace and
//! name of a pod or policy in comments, is rendered only for objects whose names pass the
//! API's own checks; any other pod or policy is skipped with one warning (`renderable`). An
//! `ipBlock` whose `except` does not parse is skipped whole (it fails closed: skipping just
//! the exception would allow what it was meant to block).
//!
//! Owns only the `inet k3rs-netpol` table (and those two sysctls); never touches other tables.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};

use super::cmd;

/// The nftables table of the policy controller.
pub const TABLE: &str = "k3rs-netpol";
const RESYNC: Duration = Duration::from_secs(60);
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Whether `labels` satisfy `selector` (apimachinery semantics: `{}` selects everything,
/// matchLabels and matchExpressions are ANDed, an unknown operator selects nothing).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if selector
        .match_labels
        .iter()
        .flatten()
        .any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    selector.match_expressions.iter().flatten().all(|req| {
        let value = labels.get(&req.key);
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    })
}

/// A pod as the policies see it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub ips: Vec<IpAddr>,
    pub labels: BTreeMap<String, String>,
    /// Named container ports: (name, protocol) → number.
    pub named_ports: BTreeMap<(String, String), i32>,
}

impl PodInfo {
    /// Pods that take part in pod networking: with an IP, not host-network, not finished.
    pub fn from_pod(pod: &Pod) -> Option<PodInfo> {
        let spec = pod.spec.as_ref()?;
        if spec.host_network == Some(true) {
            return None;
        }
        let status = pod.status.as_ref()?;
        if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return None;
        }
        let mut ips: Vec<IpAddr> = status
            .pod_ips
            .iter()
            .flatten()
            .filter_map(|p| p.ip.parse().ok())
            .collect();
        if ips.is_empty() {
            ips.extend(
                status
                    .pod_ip
                    .as_deref()
                    .and_then(|ip| ip.parse::<IpAddr>().ok()),
            );
        }
        if ips.is_empty() {
            return None;
        }
        let mut named_ports = BTreeMap::new();
        for c in &spec.containers {
            for p in c.ports.iter().flatten() {
                if let Some(name) = &p.name {
                    let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
                    named_ports.insert((name.clone(), protocol), p.container_port);
                }
            }
        }
        Some(PodInfo {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            node: spec.node_name.clone(),
            ips,
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            named_ports,
        })
    }
}

/// Everything the renderer reads.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    pub policies: Vec<NetworkPolicy>,
    pub pods: Vec<PodInfo>,
    /// Namespace name → labels.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Self::Ingress => "Ingress",
            Self::Egress => "Egress",
        }
    }
    /// The address of the other side of the connection (the peer's).
    fn peer_field(self) -> &'static str {
        match self {
            Self::Ingress => "saddr",
            Self::Egress => "daddr",
        }
    }
}

fn policy_types(policy: &NetworkPolicy) -> Vec<Direction> {
    let spec = policy.spec.as_ref();
    match spec.and_then(|s| s.policy_types.as_ref()) {
        Some(types) => types
            .iter()
            .filter_map(|t| match t.as_str() {
                "Ingress" => Some(Direction::Ingress),
                "Egress" => Some(Direction::Egress),
                _ => None,
            })
            .collect(),
        None => {
            let mut out = vec![Direction::Ingress];
            if spec.is_some_and(|s| s.egress.as_ref().is_some_and(|e| !e.is_empty())) {
                out.push(Direction::Egress);
            }
            out
        }
    }
}

fn policy_selects(policy: &NetworkPolicy, pod: &PodInfo) -> bool {
    policy.metadata.namespace.as_deref() == Some(pod.namespace.as_str())
        && policy.spec.as_ref().is_some_and(|s| {
            s.pod_selector
                .as_ref()
                .is_none_or(|selector| selector_matches(selector, &pod.labels))
        })
}

/// The pods a `podSelector`/`namespaceSelector` peer selects (ipBlock peers are handled
/// apart).
fn peer_pods<'a>(
    peer: &NetworkPolicyPeer,
    policy_namespace: &str,
    snapshot: &'a Snapshot,
) -> Vec<&'a PodInfo> {
    snapshot
        .pods
        .iter()
        .filter(|pod| {
            let in_namespace = match &peer.namespace_selector {
                Some(selector) => snapshot
                    .namespaces
                    .get(&pod.namespace)
                    .is_some_and(|labels| selector_matches(selector, labels)),
                None => pod.namespace == policy_namespace,
            };
            in_namespace
                && peer
                    .pod_selector
                    .as_ref()
                    .is_none_or(|selector| selector_matches(selector, &pod.labels))
        })
        .collect()
}

/// One port clause rendered for nftables (`tcp dport 80`, `udp dport 53-60`,
/// `meta l4proto sctp`). A named port resolves against `pod_for_names`; `None` when it
/// cannot be resolved there (it then matches nothing).
fn port_match(port: &NetworkPolicyPort, pod_for_names: Option<&PodInfo>) -> Option<String> {
    let protocol = port.protocol.clone().unwrap_or_else(|| "TCP".into());
    let proto = match protocol.as_str() {
        "TCP" => "tcp",
        "UDP" => "udp",
        "SCTP" => "sctp",
        _ => return None,
    };
    let number = match &port.port {
        None => return Some(format!("meta l4proto {proto}")),
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(name)) => match name.parse::<i32>() {
            Ok(n) => n,
            Err(_) => *pod_for_names?
                .named_ports
                .get(&(name.clone(), protocol.clone()))?,
        },
    };
    if !(1..=65535).contains(&number) {
        return None;
    }
    match port.end_port {
        Some(end) if end > number && end <= 65535 => Some(format!("{proto} dport {number}-{end}")),
        _ => Some(format!("{proto} dport {number}")),
    }
}

fn family_field(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "ip" } else { "ip6" }
}

fn set_of(ips: &BTreeSet<IpAddr>, v4: bool) -> Option<String> {
    let list: Vec<String> = ips
        .iter()
        .filter(|ip| ip.is_ipv4() == v4)
        .map(IpAddr::to_string)
        .collect();
    (!list.is_empty()).then(|| format!("{{ {} }}", list.join(", ")))
}

/// One rule of a policy: its peers (`from`/`to`) and its ports.
type RuleRef<'a> = (
    Option<&'a Vec<NetworkPolicyPeer>>,
    Option<&'a Vec<NetworkPolicyPort>>,
);

/// Renders the allow rules of one direction of one local pod into `chain` lines: each rule
/// ends in `return` (allowed: the packet goes on to the other direction's check); the
/// chain's last rule drops.
fn render_rules(direction: Direction, pod: &PodInfo, snapshot: &Snapshot, out: &mut Vec<String>) {
    let field = direction.peer_field();
    for policy in snapshot
        .policies
        .iter()
        .filter(|p| policy_types(p).contains(&direction) && policy_selects(p, pod))
    {
        let namespace = policy.metadata.namespace.clone().unwrap_or_default();
        let name = policy.metadata.name.clone().unwrap_or_default();
        out.push(format!("# {namespace}/{name}"));
        let spec = policy.spec.as_ref();
        let rules: Vec<RuleRef<'_>> = match direction {
            Direction::Ingress => spec
                .and_then(|s| s.ingress.as_ref())
                .into_iter()
                .flatten()
                .map(|r| (r.from.as_ref(), r.ports.as_ref()))
                .collect(),
            Direction::Egress => spec
                .and_then(|s| s.egress.as_ref())
                .into_iter()
                .flatten()
                .map(|r| (r.to.as_ref(), r.ports.as_ref()))
                .collect(),
        };
        for (peers, ports) in rules {
            let peers: &[NetworkPolicyPeer] = peers.map(Vec::as_slice).unwrap_or_default();
            let ports: &[NetworkPolicyPort] = ports.map(Vec::as_slice).unwrap_or_default();
            // Peer address matches: (family, match text, the pods behind it for egress named
            // ports). An empty `from`/`to` means every address.
            let mut addr_matches: Vec<(Option<String>, Vec<&PodInfo>)> = Vec::new();
            if peers.is_empty() {
                addr_matches.push((None, snapshot.pods.iter().collect()));
            }
            for peer in peers {
                if let Some(block) = &peer.ip_block {
                    let Ok(cidr) = block.cidr.parse::<crate::cli::Cidr>() else {
                        warn_skipped("an ipBlock.cidr", &namespace, &name);
                        continue;
                    };
                    let fam = family_field(&cidr.network());
                    let mut text = format!("{fam} {field} {cidr}");
                    let parsed: Vec<Option<crate::cli::Cidr>> = block
                        .except
                        .iter()
                        .flatten()
                        .map(|e| e.parse::<crate::cli::Cidr>().ok())
                        .collect();
                    if parsed.iter().any(Option::is_none) {
                        warn_skipped("an ipBlock.except entry", &namespace, &name);
                        continue;
                    }
                    let except: Vec<String> = parsed
                        .into_iter()
                        .flatten()
                        .filter(|e| e.is_ipv4() == cidr.is_ipv4())
                        .map(|e| e.to_string())
                        .collect();
                    if !except.is_empty() {
                        let _ = write!(text, " {fam} {field} != {{ {} }}", except.join(", "));
                    }
                    addr_matches.push((Some(text), Vec::new()));
                    continue;
                }
                let pods = peer_pods(peer, &namespace, snapshot);
                let ips: BTreeSet<IpAddr> =
                    pods.iter().flat_map(|p| p.ips.iter().copied()).collect();
                for v4 in [true, false] {
                    if let Some(set) = set_of(&ips, v4) {
                        let fam = if v4 { "ip" } else { "ip6" };
                        let fam_pods = pods
                            .iter()
                            .copied()
                            .filter(|p| p.ips.iter().any(|ip| ip.is_ipv4() == v4))
                            .collect();
                        addr_matches.push((Some(format!("{fam} {field} {set}")), fam_pods));
                    }
                }
            }
            for (addr, peer_pods) in &addr_matches {
                let prefix = addr.as_ref().map(|a| format!("{a} ")).unwrap_or_default();
                if ports.is_empty() {
                    out.push(format!("{prefix}return"));
                    continue;
                }
                for port in ports {
                    let named = matches!(&port.port, Some(IntOrString::String(s)) if s.parse::<i32>().is_err());
                    if named && direction == Direction::Egress {
                        // The name resolves on each destination pod.
                        for peer_pod in peer_pods {
                            if let Some(m) = port_match(port, Some(peer_pod)) {
                                for ip in &peer_pod.ips {
                                    out.push(format!(
                                        "{prefix}{} daddr {ip} {m} return",
                                        family_field(ip)
                                    ));
                                }
                            }
                        }
                    } else if let Some(m) = port_match(port, Some(pod)) {
                        out.push(format!("{prefix}{m} return"));
                    }
                }
            }
        }
    }
}

/// Whether a namespace and name could have passed the API's validation (a DNS label and a
/// DNS subdomain): only such names are written into the script's comments.
fn is_valid_object_name(namespace: &str, name: &str) -> bool {
    crate::names::dns1123_label(namespace).is_empty()
        && crate::names::dns1123_subdomain(name).is_empty()
}

fn warn_skipped(what: &str, namespace: &str, name: &str) {
    crate::skip::warn_once(&format!("netpol/{what}/{namespace}/{name}"), || {
        tracing::warn!(
            namespace = %namespace.escape_debug(),
            name = %name.escape_debug(),
            "NetworkPolicy: skipping {what} that does not parse"
        );
    });
}

/// The snapshot without the pods and policies whose names the API would refuse (written
/// straight into the store, or by an older version): they are skipped with a warning and
/// every other object is rendered as usual.
fn renderable(snapshot: &Snapshot) -> Cow<'_, Snapshot> {
    let pod_ok = |p: &PodInfo| is_valid_object_name(&p.namespace, &p.name);
    let policy_ok = |p: &NetworkPolicy| {
        is_valid_object_name(
            p.metadata.namespace.as_deref().unwrap_or(""),
            p.metadata.name.as_deref().unwrap_or(""),
        )
    };
    // The common case, every name valid, renders the snapshot as it is (no copy per sync).
    if snapshot.pods.iter().all(pod_ok) && snapshot.policies.iter().all(policy_ok) {
        return Cow::Borrowed(snapshot);
    }
    let pods = snapshot
        .pods
        .iter()
        .filter(|p| {
            let ok = pod_ok(p);
            if !ok {
                warn_skipped("a pod whose name", &p.namespace, &p.name);
            }
            ok
        })
        .cloned()
        .collect();
    let policies = snapshot
        .policies
        .iter()
        .filter(|p| {
            let ok = policy_ok(p);
            if !ok {
                warn_skipped(
                    "a policy whose name",
                    p.metadata.namespace.as_deref().unwrap_or(""),
                    p.metadata.name.as_deref().unwrap_or(""),
                );
            }
            ok
        })
        .cloned()
        .collect();
    Cow::Owned(Snapshot {
        policies,
        pods,
        namespaces: snapshot.namespaces.clone(),
    })
}

/// Renders the whole `inet k3rs-netpol` table for the pods on `node`. The text replaces the
/// table atomically (create, delete, rebuild in one `nft -f` transaction).
pub fn render(snapshot: &Snapshot, node: &str) -> String {
    let snapshot = &*renderable(snapshot);
    let mut s = String::new();
    let _ = writeln!(s, "table inet {TABLE}\ndelete table inet {TABLE}");
    let _ = writeln!(s, "table inet {TABLE} {{");
    let mut dispatch_forward = Vec::new();
    let mut dispatch_input = Vec::new();
    let mut chains = String::new();
    let local: Vec<&PodInfo> = snapshot
        .pods
        .iter()
        .filter(|p| p.node.as_deref() == Some(node))
        .collect();
    for (index, pod) in local.iter().enumerate() {
        for direction in [Direction::Egress, Direction::Ingress] {
            let selected = snapshot
                .policies
                .iter()
                .any(|p| policy_types(p).contains(&direction) && policy_selects(p, pod));
            if !selected {
                continue;
            }
            let chain = format!("pod-{index}-{}", direction.name().to_ascii_lowercase());
            let mut rules = Vec::new();
            render_rules(direction, pod, snapshot, &mut rules);
            let _ = writeln!(
                chains,
                "\tchain {chain} {{\n\t\tcomment \"{} {}/{}\"",
                direction.name(),
                pod.namespace,
                pod.name
            );
            for rule in rules {
                if let Some(comment) = rule.strip_prefix("# ") {
                    let _ = writeln!(chains, "\t\t# {comment}");
                } else {
                    let _ = writeln!(chains, "\t\t{rule}");
                }
            }
            let _ = writeln!(chains, "\t\tcounter drop\n\t}}");
            // Egress is checked before ingress: an allowed packet returns to the hook chain
            // to meet the other pod's ingress check (both pods may be on this node).
            for ip in &pod.ips {
                let fam = family_field(ip);
                match direction {
                    Direction::Egress => {
                        dispatch_forward.push(format!("{fam} saddr {ip} jump {chain}"));
                        dispatch_input.push(format!("{fam} saddr {ip} jump {chain}"));
                    }
                    Direction::Ingress => {
                        dispatch_forward.push(format!("{fam} daddr {ip} jump {chain}"))
                    }
                }
            }
        }
    }
    dispatch_forward.sort_by_key(|r| !r.contains(" saddr "));
    s.push_str(&chains);
    for (hook, rules) in [("forward", &dispatch_forward), ("input", &dispatch_input)] {
        let _ = writeln!(
            s,
            "\tchain {hook} {{\n\t\ttype filter hook {hook} priority filter; policy accept;"
        );
        if !rules.is_empty() {
            s.push_str("\t\tct state established,related accept\n");
        }
        for rule in rules.iter() {
            let _ = writeln!(s, "\t\t{rule}");
        }
        s.push_str("\t}\n");
    }
    s.push_str("}\n");
    s
}

/// Makes bridged pod-to-pod packets traverse the inet hooks (best effort: a kernel without
/// `br_netfilter` still filters traffic between nodes).
async fn enable_bridge_netfilter() {
    let _ = cmd::run("modprobe", &["br_netfilter"], None).await;
    for key in ["bridge-nf-call-iptables", "bridge-nf-call-ip6tables"] {
        let path = format!("/proc/sys/net/bridge/{key}");
        if let Err(e) = std::fs::write(&path, "1") {
            tracing::warn!(
                path,
                error = %e,
                "cannot enable br_netfilter: NetworkPolicy will not filter traffic between pods on this node (modprobe br_netfilter)"
            );
        }
    }
}

/// Runs the policy controller for `node` until a watch ends.
pub async fn run(client: kube::Client, node: String) -> anyhow::Result<()> {
    enable_bridge_netfilter().await;
    let notify = std::sync::Arc::new(tokio::sync::Notify::new());
    let (policies, policies_w) = reflector::store::<NetworkPolicy>();
    let (pods, pods_w) = reflector::store::<Pod>();
    let (namespaces, namespaces_w) = reflector::store::<Namespace>();
    let mut watches = tokio::task::JoinSet::new();
    macro_rules! watch {
        ($writer:expr, $api:expr) => {{
            let wake = notify.clone();
            let stream = reflector($writer, watcher($api, watcher::Config::default()))
                .default_backoff()
                .touched_objects();
            watches.spawn(async move {
                let mut stream = stream.boxed();
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(_) => wake.notify_one(),
                        Err(e) => tracing::debug!(error = %e, "policy watch error (retrying)"),
                    }
                }
            });
        }};
    }
    watch!(policies_w, Api::<NetworkPolicy>::all(client.clone()));
    watch!(pods_w, Api::<Pod>::all(client.clone()));
    watch!(namespaces_w, Api::<Namespace>::all(client.clone()));
    policies
        .wait_until_ready()
        .await
        .context("the NetworkPolicy watch")?;
    pods.wait_until_ready().await.context("the Pod watch")?;
    namespaces
        .wait_until_ready()
        .await
        .context("the Namespace watch")?;
    tracing::info!(node, "network policy controller started");
    let mut last: Option<String> = None;
    let mut resync = tokio::time::interval(RESYNC);
    resync.tick().await;
    loop {
        let snapshot = Snapshot {
            policies: policies.state().iter().map(|p| (**p).clone()).collect(),
            pods: pods
                .state()
                .iter()
                .filter_map(|p| PodInfo::from_pod(p))
                .collect(),
            namespaces: namespaces
                .state()
                .iter()
                .map(|n| {
                    (
                        n.metadata.name.clone().unwrap_or_default(),
                        n.metadata.labels.clone().unwrap_or_default(),
                    )
                })
                .collect(),
        };
        let text = render(&snapshot, &node);
        if last.as_ref() != Some(&text) {
            match cmd::nft_apply(&text).await {
                Ok(()) => {
                    tracing::debug!(
                        policies = snapshot.policies.len(),
                        "network policies applied"
                    );
                    last = Some(text);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "applying the inet k3rs-netpol table failed (retrying)");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            }
        }
        if let Some(done) = watches.try_join_next() {
            done.context("a policy watch task")?;
            anyhow::bail!("a policy watch ended");
        }
        tokio::select! {
            _ = notify.notified() => tokio::time::sleep(DEBOUNCE).await,
            // A periodic re-apply repairs hand edits (`nft flush ruleset`).
            _ = resync.tick() => last = None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::networking::v1::{
        IPBlock, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicySpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use kube::api::ObjectMeta;

    /// Validates `text` with `nft -c -f -` when running as root (CI); elsewhere only the
    /// rendering assertions run.
    pub(crate) fn nft_check(text: &str) {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: skipping nft -c validation");
            return;
        }
        let mut child = std::process::Command::new("nft")
            .args(["-c", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("nft (apt-get install nftables)");
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write");
        let out = child.wait_with_output().expect("nft");
        assert!(
            out.status.success(),
            "nft -c rejected:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pod(ns: &str, name: &str, node: &str, ip: &str, l: &[(&str, &str)]) -> PodInfo {
        PodInfo {
            namespace: ns.into(),
            name: name.into(),
            node: Some(node.into()),
            ips: vec![ip.parse().unwrap()],
            labels: labels(l),
            named_ports: BTreeMap::from([(("http".to_string(), "TCP".to_string()), 8080)]),
        }
    }

    fn selector(l: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels(l)),
            match_expressions: None,
        }
    }

    fn policy(ns: &str, name: &str, spec: NetworkPolicySpec) -> NetworkPolicy {
        NetworkPolicy {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(spec),
        }
    }

    fn snapshot(policies: Vec<NetworkPolicy>) -> Snapshot {
        Snapshot {
            policies,
            pods: vec![
                pod("web", "server", "n1", "10.96.0.5", &[("app", "web")]),
                pod("web", "client", "n2", "10.96.1.7", &[("role", "client")]),
                pod(
                    "other",
                    "intruder",
                    "n2",
                    "10.96.1.9",
                    &[("role", "client")],
                ),
                pod("web", "local-db", "n1", "10.96.0.6", &[("app", "db")]),
            ],
            namespaces: BTreeMap::from([
                ("web".to_string(), labels(&[("team", "a")])),
                ("other".to_string(), labels(&[("team", "b")])),
            ]),
        }
    }

    #[test]
    fn selectors_follow_apimachinery() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        assert!(selector_matches(&LabelSelector::default(), &l));
        assert!(selector_matches(&selector(&[("app", "web")]), &l));
        assert!(!selector_matches(&selector(&[("app", "db")]), &l));
        let expr = |op: &str, values: &[&str]| LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
        };
        assert!(selector_matches(&expr("In", &["front", "x"]), &l));
        assert!(!selector_matches(&expr("NotIn", &["front"]), &l));
        assert!(selector_matches(&expr("Exists", &[]), &l));
        assert!(!selector_matches(&expr("DoesNotExist", &[]), &l));
        assert!(!selector_matches(&expr("Bogus", &[]), &l));
    }

    #[test]
    fn no_policy_renders_an_empty_valid_table() {
        let text = render(&snapshot(vec![]), "n1");
        assert!(!text.contains("jump"), "{text}");
        nft_check(&text);
    }

    #[test]
    fn default_deny_ingress_drops_everything_new_to_selected_pods_only() {
        let deny = policy(
            "web",
            "deny",
            NetworkPolicySpec {
                pod_selector: Some(selector(&[("app", "web")])),
                ..Default::default()
            },
        );
        let text = render(&snapshot(vec![deny]), "n1");
        assert!(
            text.contains("ip daddr 10.96.0.5 jump pod-0-ingress"),
            "{text}"
        );
        assert!(!text.contains("10.96.0.6 jump"), "{text}");
        assert!(text.contains("ct state established,related accept"));
        let chain = text.split("chain pod-0-ingress").nth(1).unwrap();
        let chain = chain.split("\t}").next().unwrap();
        assert!(!chain.contains("return"), "{chain}");
        assert!(chain.contains("counter drop"));
        nft_check(&text);
    }

    #[test]
    fn pod_and_namespace_selectors_resolve_to_pod_ips_with_ports() {
        let allow = policy(
            "web",
            "allow",
            NetworkPolicySpec {
                pod_selector: Some(selector(&[("app", "web")])),
                ingress: Some(vec![
                    NetworkPolicyIngressRule {
                        from: Some(vec![NetworkPolicyPeer {
                            pod_selector: Some(selector(&[("role", "client")])),
                            ..Default::default()
                        }]),
                        ports: Some(vec![NetworkPolicyPort {
                            port: Some(IntOrString::String("http".into())),
                            ..Default::default()
                        }]),
                    },
                    NetworkPolicyIngressRule {
                        from: Some(vec![NetworkPolicyPeer {
                            namespace_selector: Some(selector(&[("team", "b")])),
                            ..Default::default()
                        }]),
                        ports: Some(vec![NetworkPolicyPort {
                            protocol: Some("UDP".into()),
                            port: Some(IntOrString::Int(5000)),
                            end_port: Some(5010),
                        }]),
                    },
                ]),
                policy_types: Some(vec!["Ingress".into()]),
                ..Default::default()
            },
        );
        let text = render(&snapshot(vec![allow]), "n1");
        // Same-namespace client only (the intruder lives in "other"), named port resolved.
        assert!(
            text.contains("ip saddr { 10.96.1.7 } tcp dport 8080 return"),
            "{text}"
        );
        assert!(
            text.contains("ip saddr { 10.96.1.9 } udp dport 5000-5010 return"),
            "{text}"
        );
        nft_check(&text);
    }

    #[test]
    fn ip_blocks_with_except_and_egress_named_ports_on_the_destination() {
        let egress = policy(
            "web",
            "egress",
            NetworkPolicySpec {
                pod_selector: Some(selector(&[("app", "db")])),
                egress: Some(vec![
                    NetworkPolicyEgressRule {
                        to: Some(vec![NetworkPolicyPeer {
                            ip_block: Some(IPBlock {
                                cidr: "10.0.0.0/8".into(),
                                except: Some(vec!["10.96.1.0/24".into()]),
                            }),
                            ..Default::default()
                        }]),
                        ports: None,
                    },
                    NetworkPolicyEgressRule {
                        to: Some(vec![NetworkPolicyPeer {
                            pod_selector: Some(selector(&[("app", "web")])),
                            ..Default::default()
                        }]),
                        ports: Some(vec![NetworkPolicyPort {
                            port: Some(IntOrString::String("http".into())),
                            ..Default::default()
                        }]),
                    },
                ]),
                ..Default::default()
            },
        );
        let text = render(&snapshot(vec![egress]), "n1");
        assert!(
            text.contains("ip daddr 10.0.0.0/8 ip daddr != { 10.96.1.0/24 } return"),
            "{text}"
        );
        assert!(
            text.contains("ip daddr { 10.96.0.5 } ip daddr 10.96.0.5 tcp dport 8080 return"),
            "{text}"
        );
        // Egress is enforced on forward and on input (pod → node), dispatched by source.
        assert_eq!(
            text.matches("ip saddr 10.96.0.6 jump pod-1-egress").count(),
            2
        );
        nft_check(&text);
    }

    /// Hostile names, labels, CIDRs, ports and protocols, as a store bypass could hold
    /// them: the objects with names the API refuses are skipped, the rest is rendered, and
    /// the script stays one valid transaction (checked by the real `nft -c` as root).
    #[test]
    fn hostile_fields_never_reach_the_script() {
        let hostile = [
            "a\n}\ntable inet evil { chain c { type filter hook input priority 0; policy drop; } }",
            "web\"; flush ruleset; #",
            "x;y",
            "}",
            "quote\"",
            &"é".repeat(150),
            &"a".repeat(10_000),
        ];
        let mut snap = snapshot(Vec::new());
        let deny_all = NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    ip_block: Some(IPBlock {
                        cidr: "10.0.0.0/8".into(),
                        except: Some(vec!["10.1.0.0/16; drop".into()]),
                    }),
                    ..Default::default()
                }]),
                ports: None,
            }]),
            egress: Some(vec![NetworkPolicyEgressRule {
                to: Some(vec![NetworkPolicyPeer {
                    ip_block: Some(IPBlock {
                        cidr: "1.2.3.4/32 } drop".into(),
                        except: None,
                    }),
                    ..Default::default()
                }]),
                ports: Some(vec![
                    NetworkPolicyPort {
                        port: Some(IntOrString::String("a}b".into())),
                        protocol: Some("tcp; drop".into()),
                        end_port: None,
                    },
                    NetworkPolicyPort {
                        port: Some(IntOrString::Int(70000)),
                        protocol: None,
                        end_port: Some(-1),
                    },
                ]),
            }]),
        };
        for text in hostile {
            snap.pods
                .push(pod(text, "p", "n1", "10.96.0.50", &[("app", "web")]));
            snap.pods
                .push(pod("web", text, "n1", "10.96.0.51", &[("app", text)]));
            snap.policies.push(policy(text, "np", deny_all.clone()));
            snap.policies.push(policy("web", text, deny_all.clone()));
        }
        snap.policies.push(policy("web", "deny-all", deny_all));
        let text = render(&snap, "n1");
        for bad in [
            "evil",
            "flush",
            "x;y",
            "é",
            "quote",
            "aaaaaaaaaa",
            "1.2.3.4",
            "drop;",
        ] {
            assert!(!text.contains(bad), "{bad:?} reached the script:\n{text}");
        }
        // The valid pods are still enforced by the valid policy.
        assert!(text.contains("comment \"Ingress web/server\""), "{text}");
        assert!(text.contains("ip daddr 10.96.0.5 jump"), "{text}");
        assert!(
            !text.contains("10.96.0.50") && !text.contains("10.96.0.51"),
            "{text}"
        );
        nft_check(&text);
    }
}
