//! A real cluster across network namespaces (root): `k3rs server --disable-agent` on a test
//! bridge and two `k3rs agent`s, each in its own network namespace with its own containerd
//! (`tests/support/cluster.rs`). Covers issue 5's second node (joins with the token, runs a
//! scheduled pod), pod → pod across nodes with host-gw and with vxlan, a deleted node's
//! routes disappearing from the other node, and NetworkPolicy (default deny, then allow by
//! podSelector, namespaceSelector and ipBlock), and (issue 24) agents that survive the loss of
//! the server they joined, through their API server load balancer.
//!
//! Prints `FIGURE multinode agent_start_to_ready_ms=…` per cluster (agent process start to its
//! Node Ready with a podCIDR).

mod support;

use std::time::{Duration, Instant};

use support::cluster::{Cluster, ClusterSpec};

const IMAGE: &str = "k3rs.test/busybox:1";

fn report_ready_times(cluster: &Cluster, backend: &str) {
    let times: Vec<String> = cluster
        .agents
        .iter()
        .map(|a| format!("{}", a.ready_in.map_or(0, |d| d.as_millis())))
        .collect();
    println!(
        "FIGURE multinode backend={backend} agent_start_to_ready_ms={}",
        times.join(",")
    );
}

/// A busybox httpd on `node` answering `hello from <pod name>` on :8080; `-v` logs each
/// client's address (`<ip>:<port>: response:200`), so tests can see what was masqueraded.
fn web_pod(ns: &str, name: &str, node: &str, labels: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
  labels: {{{labels}}}
spec:
  nodeSelector:
    kubernetes.io/hostname: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: {IMAGE}
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir -p /www && echo hello from {name} > /www/index.html && exec httpd -f -v -p 8080 -h /www"]
    ports:
    - name: http
      containerPort: 8080
"#
    )
}

/// A busybox that sleeps on `node`, for `kubectl exec … wget`.
fn client_pod(ns: &str, name: &str, node: &str, labels: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
  labels: {{{labels}}}
spec:
  nodeSelector:
    kubernetes.io/hostname: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - name: client
    image: {IMAGE}
    imagePullPolicy: Never
    command: ["sleep", "3600"]
"#
    )
}

/// An HTTP GET from `ns/client` to `ip:8080` (busybox `nc`: the static busybox's `wget`
/// segfaults, exit 139, in the bare test image): the body, or `None` when it cannot
/// connect within 3 s.
fn fetch(cluster: &Cluster, ns: &str, client: &str, ip: &str) -> Option<String> {
    let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {ip} 8080");
    let (ok, out) = cluster.exec(ns, client, &["sh", "-c", &script]);
    let body = out.split("\r\n\r\n").nth(1).map(str::to_string);
    if !ok || body.is_none() {
        eprintln!("{ns}/{client} → {ip}:8080: {}", out.trim());
        return None;
    }
    body
}

/// The node `i`'s routes with k3rs's protocol (76).
fn k3rs_routes(cluster: &Cluster, i: usize) -> String {
    cluster.agents[i].exec_ok("ip", &["-4", "route", "show", "proto", "76"])
}

fn pod_cidr(cluster: &Cluster, node: &str) -> String {
    cluster
        .kubectl_ok(&["get", "node", node, "-o", "jsonpath={.spec.podCIDR}"])
        .trim()
        .to_string()
}

/// host-gw: both nodes Ready with podCIDRs, the second node (joined with the token) runs a
/// scheduled pod, pods reach each other across nodes, and deleting a node removes its route
/// on the other one.
#[test]
fn host_gw_two_nodes_pod_to_pod_and_node_removal() {
    let mut cluster = Cluster::start(ClusterSpec::new(2).agent_arg("--flannel-backend=host-gw"));
    report_ready_times(&cluster, "host-gw");
    let (n0, n1) = (
        cluster.agents[0].name.clone(),
        cluster.agents[1].name.clone(),
    );
    let cidr0 = pod_cidr(&cluster, &n0);
    let cidr1 = pod_cidr(&cluster, &n1);
    assert_ne!(cidr0, cidr1, "each node has its own podCIDR");
    assert!(
        cidr1.starts_with(&format!("10.96.{}.", u32::from(cluster.slot) * 4))
            || cidr1.starts_with(&format!("10.96.{}.", u32::from(cluster.slot) * 4 + 1)),
        "{cidr1} from --cluster-cidr {}",
        cluster.cluster_cidr
    );
    let annotations = cluster.kubectl_ok(&[
        "get",
        "node",
        &n1,
        "-o",
        "jsonpath={.metadata.annotations.flannel\\.alpha\\.coreos\\.com/backend-type}",
    ]);
    assert_eq!(annotations.trim(), "host-gw");

    cluster.apply(&web_pod("default", "web", &n1, "app: web"));
    cluster.apply(&client_pod("default", "client", &n0, "role: client"));
    let web_ip = cluster.wait_pod_running("default", "web", Duration::from_secs(90));
    cluster.wait_pod_running("default", "client", Duration::from_secs(90));
    let scheduled = cluster.kubectl_ok(&["get", "pod", "web", "-o", "jsonpath={.spec.nodeName}"]);
    assert_eq!(
        scheduled, n1,
        "the scheduler placed the pod on the second node"
    );

    // node 0 routes node 1's podCIDR via node 1's address, and the reverse.
    cluster.eventually(Duration::from_secs(20), "host-gw routes", || {
        k3rs_routes(&cluster, 0).contains(&format!("{cidr1} via {}", cluster.agents[1].ip))
            && k3rs_routes(&cluster, 1).contains(&format!("{cidr0} via {}", cluster.agents[0].ip))
    });
    let body = fetch(&cluster, "default", "client", &web_ip).unwrap_or_else(|| {
        for agent in &cluster.agents {
            eprintln!(
                "{}: forwarding={} routes:\n{}",
                agent.name,
                agent
                    .exec_ok("cat", &["/proc/sys/net/ipv4/ip_forward"])
                    .trim(),
                agent.exec_ok("ip", &["route"])
            );
        }
        panic!("client on {n0} cannot reach {web_ip} on {n1}")
    });
    assert_eq!(body.trim(), "hello from web");

    // Reconciled at start: a route of ours left from an earlier run (a node that is gone)
    // is removed when the agent starts again; its pods keep running and reachable.
    cluster.stop_agent(0);
    let stale = format!("10.96.{}.0/24", u32::from(cluster.slot) * 4 + 3);
    let via = cluster.agents[1].ip.clone();
    cluster.agents[0].exec_ok("ip", &["route", "add", &stale, "via", &via, "proto", "76"]);
    cluster.add_agent(0);
    cluster.eventually(
        Duration::from_secs(30),
        "the stale route removed at start",
        || {
            let routes = k3rs_routes(&cluster, 0);
            !routes.contains(&stale) && routes.contains(&cidr1)
        },
    );
    assert_eq!(
        fetch(&cluster, "default", "client", &web_ip)
            .as_deref()
            .map(str::trim),
        Some("hello from web"),
        "pods keep working across an agent restart"
    );

    // The node goes away: stop its agent (so it does not register again), delete the Node.
    cluster.stop_agent(1);
    cluster.kubectl_ok(&["delete", "node", &n1, "--wait=false"]);
    cluster.eventually(
        Duration::from_secs(30),
        "the deleted node's route removed",
        || !k3rs_routes(&cluster, 0).contains(&cidr1),
    );
    assert!(
        fetch(&cluster, "default", "client", &web_ip).is_none(),
        "no route to a deleted node's pods"
    );
}

/// vxlan (the default): flannel.1 with the VTEP published in the Node annotations, routes
/// onlink through it, FDB entries to the peer, and pod → pod across nodes.
#[test]
fn vxlan_two_nodes_pod_to_pod() {
    let cluster = Cluster::start(ClusterSpec::new(2));
    report_ready_times(&cluster, "vxlan");
    let (n0, n1) = (
        cluster.agents[0].name.clone(),
        cluster.agents[1].name.clone(),
    );
    let cidr1 = pod_cidr(&cluster, &n1);
    let mut mac1 = String::new();
    cluster.eventually(Duration::from_secs(30), "n1's VTEP annotation", || {
        let data = cluster.kubectl_ok(&[
            "get",
            "node",
            &n1,
            "-o",
            "jsonpath={.metadata.annotations.flannel\\.alpha\\.coreos\\.com/backend-data}",
        ]);
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&data) else {
            return false;
        };
        mac1 = v["VtepMAC"].as_str().unwrap_or_default().to_string();
        v["VNI"] == 1 && !mac1.is_empty()
    });
    let public_ip = cluster.kubectl_ok(&[
        "get",
        "node",
        &n1,
        "-o",
        "jsonpath={.metadata.annotations.flannel\\.alpha\\.coreos\\.com/public-ip}",
    ]);
    assert_eq!(public_ip, cluster.agents[1].ip);
    let link = cluster.agents[1].exec_ok("ip", &["-d", "link", "show", "flannel.1"]);
    assert!(link.contains(&mac1), "{link}");
    assert!(
        link.contains("vxlan id 1") && link.contains("dstport 8472"),
        "{link}"
    );

    let gateway = cidr1.trim_end_matches("/24");
    cluster.eventually(
        Duration::from_secs(20),
        "vxlan route, neighbour and fdb",
        || {
            let routes = k3rs_routes(&cluster, 0);
            let fdb = cluster.agents[0].exec_ok("bridge", &["fdb", "show", "dev", "flannel.1"]);
            routes.contains(&format!("{cidr1} via {gateway} dev flannel.1"))
                && routes.contains("onlink")
                && fdb.contains(&format!("{mac1} dst {}", cluster.agents[1].ip))
        },
    );

    cluster.apply(&web_pod("default", "web", &n1, "app: web"));
    cluster.apply(&client_pod("default", "client", &n0, "role: client"));
    let web_ip = cluster.wait_pod_running("default", "web", Duration::from_secs(90));
    cluster.wait_pod_running("default", "client", Duration::from_secs(90));
    let started = Instant::now();
    let body = fetch(&cluster, "default", "client", &web_ip)
        .unwrap_or_else(|| panic!("client on {n0} cannot reach {web_ip} on {n1} over vxlan"));
    assert_eq!(body.trim(), "hello from web");
    println!("vxlan fetch took {:?}", started.elapsed());
}

/// NetworkPolicy across nodes: a default-deny policy blocks, then allow rules re-open —
/// podSelector (same namespace only), namespaceSelector, ipBlock.
#[test]
fn network_policy_default_deny_then_allow_rules() {
    let cluster = Cluster::start(ClusterSpec::new(2));
    let (n0, n1) = (
        cluster.agents[0].name.clone(),
        cluster.agents[1].name.clone(),
    );
    cluster.apply(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: np\n  labels: {team: a}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata:\n  name: outside\n  labels: {team: b}\n",
    );
    cluster.apply(&web_pod("np", "web", &n0, "app: web"));
    cluster.apply(&client_pod("np", "friend", &n1, "role: client"));
    cluster.apply(&client_pod("outside", "stranger", &n1, "role: client"));
    // Also a client on the web pod's own node: its traffic crosses the bridge only.
    cluster.apply(&client_pod("np", "neighbour", &n0, "role: other"));
    let web_ip = cluster.wait_pod_running("np", "web", Duration::from_secs(90));
    cluster.wait_pod_running("np", "friend", Duration::from_secs(90));
    let stranger_ip = cluster.wait_pod_running("outside", "stranger", Duration::from_secs(90));
    cluster.wait_pod_running("np", "neighbour", Duration::from_secs(90));
    cluster.eventually(Duration::from_secs(30), "open before any policy", || {
        fetch(&cluster, "np", "friend", &web_ip).is_some()
            && fetch(&cluster, "outside", "stranger", &web_ip).is_some()
            && fetch(&cluster, "np", "neighbour", &web_ip).is_some()
    });

    cluster.apply(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: deny\n  \
         namespace: np\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n",
    );
    cluster.eventually(Duration::from_secs(20), "default deny blocks", || {
        fetch(&cluster, "np", "friend", &web_ip).is_none()
            && fetch(&cluster, "np", "neighbour", &web_ip).is_none()
    });
    let table = cluster.agents[0].exec_ok("nft", &["list", "table", "inet", "k3rs-netpol"]);
    assert!(
        table.contains(&format!("ip daddr {web_ip} jump")),
        "{table}"
    );

    // podSelector, on the named port: the friend (same namespace) gets in, the stranger in
    // another namespace with the same labels does not.
    cluster.apply(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: friends\n  \
         namespace: np\nspec:\n  podSelector:\n    matchLabels: {app: web}\n  ingress:\n  - from:\n    \
         - podSelector:\n        matchLabels: {role: client}\n    ports:\n    - port: http\n",
    );
    cluster.eventually(
        Duration::from_secs(20),
        "podSelector allows the friend",
        || fetch(&cluster, "np", "friend", &web_ip).is_some(),
    );
    assert!(fetch(&cluster, "outside", "stranger", &web_ip).is_none());
    assert!(fetch(&cluster, "np", "neighbour", &web_ip).is_none());

    // namespaceSelector: the whole `outside` namespace.
    cluster.apply(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: team-b\n  \
         namespace: np\nspec:\n  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector:\n        \
         matchLabels: {team: b}\n",
    );
    cluster.eventually(Duration::from_secs(20), "namespaceSelector allows", || {
        fetch(&cluster, "outside", "stranger", &web_ip).is_some()
    });
    cluster.kubectl_ok(&["delete", "networkpolicy", "-n", "np", "team-b"]);
    cluster.eventually(
        Duration::from_secs(20),
        "removing the rule closes again",
        || fetch(&cluster, "outside", "stranger", &web_ip).is_none(),
    );

    // ipBlock with except: the node-0 neighbour's /24 minus the neighbour's own address stays
    // closed; the stranger's /32 opens.
    cluster.apply(&format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: block\n  \
         namespace: np\nspec:\n  podSelector: {{}}\n  ingress:\n  - from:\n    - ipBlock:\n        \
         cidr: {stranger_ip}/24\n        except: [{stranger_ip}/32]\n",
    ));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        fetch(&cluster, "outside", "stranger", &web_ip).is_none(),
        "except keeps the stranger out"
    );
    cluster.apply(&format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: block\n  \
         namespace: np\nspec:\n  podSelector: {{}}\n  ingress:\n  - from:\n    - ipBlock:\n        \
         cidr: {stranger_ip}/32\n",
    ));
    cluster.eventually(Duration::from_secs(20), "ipBlock allows", || {
        fetch(&cluster, "outside", "stranger", &web_ip).is_some()
    });

    // Egress: a default-deny egress policy on the stranger's side stops it again, although
    // the web pod's ingress would let it in.
    cluster.apply(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: no-egress\n  \
         namespace: outside\nspec:\n  podSelector: {}\n  policyTypes: [Egress]\n",
    );
    cluster.eventually(Duration::from_secs(20), "egress default deny", || {
        fetch(&cluster, "outside", "stranger", &web_ip).is_none()
    });
}

/// A Service manifest: `kind` is ClusterIP, NodePort or LoadBalancer; port 80 → the pods'
/// `http` port; `extra` lines go under `spec` (indented two spaces).
fn service(name: &str, kind: &str, selector: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  \
         type: {kind}\n  selector: {{{selector}}}\n  ports:\n  - port: 80\n    targetPort: http\n{extra}"
    )
}

fn jsonpath(cluster: &Cluster, kind: &str, name: &str, path: &str) -> String {
    cluster
        .kubectl_ok(&["get", kind, name, "-o", &format!("jsonpath={path}")])
        .trim()
        .to_string()
}

/// An HTTP GET from the test (the host's network namespace) to `ip:port`: the body, or
/// `None` when it cannot connect or read within 3 s.
fn host_fetch(ip: &str, port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = format!("{ip}:{port}").parse().ok()?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).ok()?;
    out.split("\r\n\r\n").nth(1).map(|b| b.trim().to_string())
}

/// `nc` from the client pod to `ip:80`: (body or error text, how long it took).
fn pod_fetch_80(cluster: &Cluster, ip: &str) -> (Option<String>, String, Duration) {
    let started = Instant::now();
    let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {ip} 80");
    let (ok, out) = cluster.exec("default", "client", &["sh", "-c", &script]);
    let body = out
        .split("\r\n\r\n")
        .nth(1)
        .filter(|_| ok)
        .map(|b| b.trim().to_string());
    (body, out, started.elapsed())
}

/// `nslookup <name>` in the client pod (its resolv.conf: the cluster DNS at 10.43.0.10).
fn pod_nslookup(cluster: &Cluster, name: &str) -> String {
    cluster.exec("default", "client", &["nslookup", name]).1
}

/// Services across nodes (host-gw): pod → ClusterIP reaching endpoints on both nodes,
/// NodePort from the host, a LoadBalancer Service (ServiceLB status + events) answered on
/// each node's address, cluster DNS from a pod (Service, headless Service, ExternalName,
/// a forwarded external name), a Service without endpoints refused at once, endpoints
/// removed → traffic stops, sessionAffinity, and the rules repaired after
/// `nft flush ruleset`.
#[test]
fn services_across_nodes() {
    let cluster = Cluster::start(
        ClusterSpec::new(2)
            .agent_arg("--flannel-backend=host-gw")
            .upstream_dns(),
    );
    let (n0, n1) = (
        cluster.agents[0].name.clone(),
        cluster.agents[1].name.clone(),
    );
    let (ip0, ip1) = (cluster.agents[0].ip.clone(), cluster.agents[1].ip.clone());
    cluster.apply(&web_pod("default", "web0", &n0, "app: web"));
    cluster.apply(&web_pod("default", "web1", &n1, "app: web"));
    cluster.apply(&web_pod("default", "solo", &n1, "app: solo"));
    cluster.apply(&client_pod("default", "client", &n0, "role: client"));
    cluster.apply(&service("web", "NodePort", "app: web", ""));
    cluster.apply(&service(
        "sticky",
        "ClusterIP",
        "app: web",
        "  sessionAffinity: ClientIP\n",
    ));
    cluster.apply(&service("lb", "LoadBalancer", "app: web", ""));
    cluster.apply(&service("solo", "ClusterIP", "app: solo", ""));
    cluster.apply(&service("empty", "ClusterIP", "app: nothing", ""));
    cluster.apply(&service(
        "headless",
        "ClusterIP",
        "app: web",
        "  clusterIP: None\n",
    ));
    cluster.apply(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: ext\n  namespace: default\nspec:\n  \
         type: ExternalName\n  externalName: www.example.test\n",
    );
    let web0_ip = cluster.wait_pod_running("default", "web0", Duration::from_secs(90));
    let web1_ip = cluster.wait_pod_running("default", "web1", Duration::from_secs(90));
    cluster.wait_pod_running("default", "solo", Duration::from_secs(90));
    let client_ip = cluster.wait_pod_running("default", "client", Duration::from_secs(90));

    // Hand edits are repaired: wipe node 1's whole ruleset now, check it is back at the end
    // (the proxy compares the kernel's table with what it applied every 30 s).
    cluster.eventually(Duration::from_secs(20), "node 1's proxy table", || {
        cluster.agents[1]
            .exec("nft", &["list", "table", "ip", "k3rs"])
            .status
            .success()
    });
    cluster.agents[1].exec_ok("nft", &["flush", "ruleset"]);
    let flushed_at = Instant::now();
    assert!(
        !cluster.agents[1]
            .exec("nft", &["list", "table", "ip", "k3rs"])
            .status
            .success(),
        "the flush removed the table"
    );

    // pod → ClusterIP: random balancing reaches the endpoint on this node and the one on the
    // other node.
    let web_ip = jsonpath(&cluster, "svc", "web", "{.spec.clusterIP}");
    let mut seen = std::collections::BTreeSet::new();
    cluster.eventually(
        Duration::from_secs(30),
        "ClusterIP reaches both nodes' pods",
        || {
            if let (Some(body), _, _) = pod_fetch_80(&cluster, &web_ip) {
                seen.insert(body);
            }
            seen.len() == 2
        },
    );
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["hello from web0", "hello from web1"]
    );
    // Only traffic from outside the pod network is masqueraded (the agent learnt its
    // podCIDR from its Node): the endpoint on the other node sees the client pod's address.
    let cidr0 = pod_cidr(&cluster, &n0);
    let table = cluster.agents[0].exec_ok("nft", &["list", "table", "ip", "k3rs"]);
    // (The service chains masquerade sources outside the `cluster-cidrs` set, which holds
    // the learnt podCIDR.)
    let cidrs_set = table
        .split("set cluster-cidrs {")
        .nth(1)
        .and_then(|rest| rest.split('}').next())
        .unwrap_or_default();
    assert!(
        cidrs_set.contains(&cidr0)
            && table
                .lines()
                .any(|l| l.trim() == "ip saddr != @cluster-cidrs jump mark-for-masquerade"),
        "{table}"
    );
    let log = cluster.kubectl_ok(&["logs", "web1"]);
    // busybox logs `[::ffff:<ip>]:<port>` on its dual-stack socket.
    assert!(
        log.lines()
            .any(|l| l.starts_with(&format!("[::ffff:{client_ip}]:"))
                || l.starts_with(&format!("{client_ip}:"))),
        "web1 saw: {log} (client {client_ip})"
    );

    // sessionAffinity: ClientIP keeps the client on one endpoint.
    let sticky_ip = jsonpath(&cluster, "svc", "sticky", "{.spec.clusterIP}");
    let bodies: Vec<String> = (0..6)
        .filter_map(|_| pod_fetch_80(&cluster, &sticky_ip).0)
        .collect();
    assert_eq!(bodies.len(), 6, "every request answered: {bodies:?}");
    assert!(
        bodies.iter().all(|b| *b == bodies[0]),
        "one endpoint for one client: {bodies:?}"
    );

    // NodePort from the host, on node 0 (node 1's rules are still being repaired).
    let node_port: u16 = jsonpath(&cluster, "svc", "web", "{.spec.ports[0].nodePort}")
        .parse()
        .expect("nodePort");
    cluster.eventually(Duration::from_secs(20), "NodePort from the host", || {
        host_fetch(&ip0, node_port).is_some_and(|b| b.starts_with("hello from web"))
    });

    // LoadBalancer: ServiceLB publishes both nodes' InternalIPs, with k3s's event, and the
    // Service answers on the node address at the Service port.
    cluster.eventually(Duration::from_secs(30), "LoadBalancer ingress", || {
        jsonpath(
            &cluster,
            "svc",
            "lb",
            "{.status.loadBalancer.ingress[*].ip}",
        ) == format!("{ip0} {ip1}")
    });
    let events = cluster.kubectl_ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=lb,reason=UpdatedLoadBalancer",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains(&format!(
            "Updated LoadBalancer with new IPs: [] -> [{ip0} {ip1}]"
        )),
        "{events}"
    );
    let columns = cluster.kubectl_ok(&["get", "svc", "lb"]);
    assert!(columns.contains(&format!("{ip0},{ip1}")), "{columns}");
    cluster.eventually(
        Duration::from_secs(20),
        "LoadBalancer on node 0's address",
        || host_fetch(&ip0, 80).is_some_and(|b| b.starts_with("hello from web")),
    );

    // Cluster DNS from a pod: a Service, a headless Service (its pods' IPs), an ExternalName
    // (a CNAME) and a name only the upstream knows.
    let answer = pod_nslookup(&cluster, "web.default.svc.cluster.local");
    assert!(answer.contains(&format!("Address: {web_ip}")), "{answer}");
    let answer = pod_nslookup(&cluster, "headless.default.svc.cluster.local");
    assert!(
        answer.contains(&web0_ip) && answer.contains(&web1_ip),
        "{answer}"
    );
    let answer = pod_nslookup(&cluster, "ext.default.svc.cluster.local");
    assert!(answer.contains(support::cluster::UPSTREAM_NAME), "{answer}");
    let answer = pod_nslookup(&cluster, support::cluster::UPSTREAM_NAME);
    assert!(
        answer.contains(&format!("Address: {}", support::cluster::UPSTREAM_ADDRESS)),
        "{answer}"
    );

    // No endpoints: refused at once, not a 3 s timeout.
    let empty_ip = jsonpath(&cluster, "svc", "empty", "{.spec.clusterIP}");
    let (body, out, took) = pod_fetch_80(&cluster, &empty_ip);
    assert!(body.is_none() && out.contains("refused"), "{out}");
    assert!(took < Duration::from_millis(2500), "refused after {took:?}");

    // Endpoints removed → traffic stops (and is refused once the Service has none).
    let solo_ip = jsonpath(&cluster, "svc", "solo", "{.spec.clusterIP}");
    assert_eq!(
        pod_fetch_80(&cluster, &solo_ip).0.as_deref(),
        Some("hello from solo")
    );
    cluster.kubectl_ok(&["delete", "pod", "solo", "--wait=false"]);
    cluster.eventually(Duration::from_secs(30), "traffic to solo stops", || {
        let (body, out, _) = pod_fetch_80(&cluster, &solo_ip);
        body.is_none() && out.contains("refused")
    });

    // Node 1's table is back (at the next resync), and so are its NodePort and
    // LoadBalancer addresses.
    cluster.eventually(Duration::from_secs(45), "node 1's rules repaired", || {
        cluster.agents[1]
            .exec("nft", &["list", "table", "ip", "k3rs"])
            .status
            .success()
    });
    println!(
        "FIGURE multinode nft_repair_ms={}",
        flushed_at.elapsed().as_millis()
    );
    cluster.eventually(
        Duration::from_secs(20),
        "NodePort and LoadBalancer on node 1",
        || host_fetch(&ip1, node_port).is_some() && host_fetch(&ip1, 80).is_some(),
    );
}

/// A Deployment of busybox pods that print `started` and sleep.
fn sleeper_deployment(name: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: default
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: {IMAGE}
        imagePullPolicy: Never
        command: ["sh", "-c", "echo started; exec sleep 3600"]
"#
    )
}

/// The names of the Running pods labelled `app=<app>` that sit on an agent.
fn running_pods(cluster: &Cluster, app: &str) -> Vec<String> {
    let out = cluster.kubectl(&[
        "get",
        "pods",
        "-l",
        &format!("app={app}"),
        "-o",
        "json",
        "--request-timeout=5s",
    ]);
    let list: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    let agents: Vec<&str> = cluster.agents.iter().map(|a| a.name.as_str()).collect();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["status"]["phase"] == "Running")
        .filter(|p| agents.iter().any(|a| p["spec"]["nodeName"] == *a))
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

fn wait_running(cluster: &Cluster, app: &str, n: usize, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let pods = running_pods(cluster, app);
        if pods.len() >= n {
            return pods;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} {app} pods Running after {timeout:?}:\n{}\n{}",
            pods.len(),
            String::from_utf8_lossy(&cluster.kubectl(&["get", "pods", "-o", "wide"]).stdout),
            cluster
                .agents
                .iter()
                .map(|a| format!("--- {} ---\n{}", a.name, tail_lines(&a.log(), 40)))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Whether `node` is Ready as server `kubectl_server` sees it.
fn node_ready(cluster: &Cluster, node: &str) -> bool {
    let out = cluster.kubectl(&[
        "get",
        "node",
        node,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        "--request-timeout=5s",
    ]);
    String::from_utf8_lossy(&out.stdout).trim() == "True"
}

/// Issue 24: three servers, two agents joined against the first. The agents' load balancers
/// learn every server from the `default/kubernetes` Endpoints (and persist the list); after
/// SIGKILL of the first server the agents' Nodes stay Ready, their leases are renewed through
/// another server, a Deployment scaled on a surviving server gets its new pods started on the
/// agents (the kubelets' watches moved), and `kubectl logs` / `exec` work through it.
#[test]
fn agents_survive_the_loss_of_the_server_they_joined() {
    let mut cluster = Cluster::start(
        ClusterSpec::new(2)
            .servers(3)
            .agent_arg("--flannel-backend=host-gw"),
    );
    let server_addresses: Vec<String> = (1..=3)
        .map(|k| format!("10.97.{}.{k}:{}", cluster.slot, cluster.server.port))
        .collect();
    // Every agent's load balancer knows all three servers, on disk too.
    let deadline = Instant::now() + Duration::from_secs(60);
    for agent in &cluster.agents {
        let state = agent
            .dir
            .join("data/agent/etc/k3rs-agent-load-balancer.json");
        loop {
            let text = std::fs::read_to_string(&state).unwrap_or_default();
            if server_addresses.iter().all(|a| text.contains(a.as_str())) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} does not list every server ({server_addresses:?}):\n{text}\n{}",
                state.display(),
                tail_lines(&agent.log(), 40)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    cluster.apply(&sleeper_deployment("web", 6));
    wait_running(&cluster, "web", 6, Duration::from_secs(120));

    let leases_before: Vec<String> = cluster
        .agents
        .iter()
        .map(|a| {
            cluster
                .kubectl_ok(&[
                    "get",
                    "lease",
                    "-n",
                    "kube-node-lease",
                    &a.name,
                    "-o",
                    "jsonpath={.spec.renewTime}",
                ])
                .trim()
                .to_string()
        })
        .collect();

    // SIGKILL the server the agents were installed against.
    let _ = cluster.server.child.kill();
    let _ = cluster.server.child.wait();
    let killed = Instant::now();
    cluster.kubectl_server = 1;

    // Every agent renews its Node lease through a surviving server.
    let nodes: Vec<String> = cluster.agents.iter().map(|a| a.name.clone()).collect();
    for (node, before) in nodes.iter().zip(&leases_before) {
        let deadline = killed + Duration::from_secs(30);
        loop {
            let out = cluster.kubectl(&[
                "get",
                "lease",
                "-n",
                "kube-node-lease",
                node,
                "-o",
                "jsonpath={.spec.renewTime}",
                "--request-timeout=5s",
            ]);
            let now = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if out.status.success() && !now.is_empty() && now != *before {
                println!(
                    "FIGURE multinode agent_lease_renewed_after_server_kill_ms={}",
                    killed.elapsed().as_millis()
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{node}'s lease not renewed within 30 s of the server's death"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    // 10 s after the kill the agents' Nodes are Ready as a surviving server sees them.
    std::thread::sleep(
        (killed + Duration::from_secs(10)).saturating_duration_since(Instant::now()),
    );
    for node in &nodes {
        assert!(
            node_ready(&cluster, node),
            "{node} not Ready after the server's death"
        );
    }
    for agent in &cluster.agents {
        let log = agent.log();
        assert!(
            log.lines()
                .any(|l| l.contains("load balancer now uses this server")
                    && server_addresses[1..].iter().any(|a| l.contains(a.as_str()))),
            "{} did not move to another server:\n{}",
            agent.name,
            tail_lines(&log, 40)
        );
    }

    // Scale through a surviving server: the new pods start on the agents.
    cluster.kubectl_ok(&["scale", "deployment", "web", "--replicas=8"]);
    let pods = wait_running(&cluster, "web", 8, Duration::from_secs(120));
    for node in &nodes {
        assert!(
            node_ready(&cluster, node),
            "{node} not Ready after the scale-up"
        );
    }

    // Logs and exec through the surviving server.
    let pod = &pods[0];
    let logs = cluster.kubectl_ok(&["logs", pod]);
    assert!(logs.contains("started"), "kubectl logs {pod}: {logs:?}");
    let (ok, out) = cluster.exec("default", pod, &["echo", "exec-ok"]);
    assert!(ok && out.contains("exec-ok"), "kubectl exec {pod}: {out}");
}
