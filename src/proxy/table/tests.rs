//! Unit tests of the per-owner table cache: partial updates reach exactly what a full render
//! gives, and one endpoint change touches only its Service (also against the kernel).

use std::net::IpAddr;

use super::*;
use crate::proxy::model::{Endpoint, Protocol};
use crate::proxy::render::{ENDPOINT_MAPS, Slot, slot_home, slot_requests};

fn ip(text: &str) -> IpAddr {
    text.parse().expect("ip")
}

fn endpoint(addr: &str, local: bool) -> Endpoint {
    Endpoint {
        ip: ip(addr),
        port: 8080,
        local,
        hairpin: local,
        ready: true,
        serving: true,
        terminating: false,
    }
}

fn port(name: &str, cluster_ip: &str, endpoints: Vec<Endpoint>) -> ServicePort {
    ServicePort {
        namespace: "default".into(),
        name: name.into(),
        port_name: "http".into(),
        protocol: Protocol::Tcp,
        cluster_ips: vec![ip(cluster_ip)],
        port: 80,
        node_port: None,
        load_balancer_ips: vec![],
        external_ips: vec![],
        affinity_timeout: None,
        external_local: false,
        internal_local: false,
        endpoints,
    }
}

fn options(table: &str) -> RenderOptions {
    RenderOptions {
        table: table.into(),
        node_ips: vec![ip("192.168.1.10"), ip("fd00::10")],
        cluster_cidrs: vec!["10.42.0.0/16".into(), "fd00:42::/56".into()],
    }
}

/// A model with every feature, and the steps a cluster goes through from it: each step
/// edits the model (and maybe the options) in place.
fn scenario() -> (Vec<ServicePort>, Vec<(&'static str, StepFn)>) {
    let mut web = port(
        "web",
        "10.43.0.20",
        vec![endpoint("10.42.0.5", true), endpoint("10.42.1.6", false)],
    );
    web.node_port = Some(30080);
    let mut dns = port("dns", "10.43.0.10", vec![endpoint("10.42.0.9", true)]);
    dns.protocol = Protocol::Udp;
    dns.cluster_ips.push(ip("fd00:43::10"));
    dns.endpoints.push(endpoint("fd00:42::9", true));
    let empty = port("empty", "10.43.0.22", vec![]);
    let mut lb = port("lb", "10.43.0.23", vec![endpoint("10.42.1.7", false)]);
    lb.node_port = Some(30081);
    lb.load_balancer_ips = vec![ip("192.168.1.10")];
    let (first, second) = rivals();
    let steps: Vec<(&'static str, StepFn)> = vec![
        ("unchanged", Box::new(|_, _| {})),
        (
            "endpoint replaced",
            Box::new(|ports, _| ports[0].endpoints[1] = endpoint("10.42.1.9", false)),
        ),
        (
            "endpoint added",
            Box::new(|ports, _| ports[0].endpoints.push(endpoint("10.42.2.3", false))),
        ),
        (
            "affinity on",
            Box::new(|ports, _| ports[0].affinity_timeout = Some(600)),
        ),
        (
            "affinity timeout changed",
            Box::new(|ports, _| ports[0].affinity_timeout = Some(60)),
        ),
        (
            "endpoint removed under affinity",
            Box::new(|ports, _| {
                ports[0].endpoints.remove(0);
            }),
        ),
        (
            "affinity off",
            Box::new(|ports, _| ports[0].affinity_timeout = None),
        ),
        (
            "external policy Local",
            Box::new(|ports, _| {
                ports[0].external_local = true;
                ports[3].external_local = true;
            }),
        ),
        (
            "local endpoint appears",
            Box::new(|ports, _| ports[3].endpoints.push(endpoint("10.42.0.30", true))),
        ),
        (
            "internal policy Local",
            Box::new(|ports, _| ports[0].internal_local = true),
        ),
        (
            "back to Cluster",
            Box::new(|ports, _| {
                ports[0].external_local = false;
                ports[0].internal_local = false;
                ports[3].external_local = false;
            }),
        ),
        (
            "empty Service gets an endpoint, another loses all",
            Box::new(|ports, _| {
                ports[2].endpoints.push(endpoint("10.42.0.40", true));
                ports[1].endpoints.clear();
            }),
        ),
        (
            "Service added sharing an endpoint",
            Box::new(|ports, _| {
                ports.push(port(
                    "twin",
                    "10.43.0.24",
                    vec![endpoint("10.42.0.40", true)],
                ))
            }),
        ),
        (
            "shared endpoint's first owner removed",
            Box::new(|ports, _| {
                ports.remove(2);
            }),
        ),
        (
            "NodePort and LoadBalancer dropped",
            Box::new(|ports, _| {
                let lb = ports.iter_mut().find(|p| p.name == "lb").expect("lb");
                lb.node_port = None;
                lb.load_balancer_ips.clear();
            }),
        ),
        (
            "pod network forgotten, node address changed",
            Box::new(|_, options| {
                options.cluster_cidrs.clear();
                options.node_ips = vec![ip("192.168.1.11")];
            }),
        ),
        (
            "pod network learned",
            Box::new(|_, options| options.cluster_cidrs = vec!["10.42.0.0/16".into()]),
        ),
        (
            "Service added alone in its slot's bucket",
            Box::new(move |ports, _| ports.push(balanced(&second))),
        ),
        (
            "Service added that takes the other's slot",
            Box::new(move |ports, _| ports.push(balanced(&first))),
        ),
        (
            "it goes again",
            Box::new(|ports, _| {
                ports.pop();
            }),
        ),
        ("all removed", Box::new(|ports, _| ports.clear())),
    ];
    (vec![web, dns, empty, lb], steps)
}

type StepFn = Box<dyn Fn(&mut Vec<ServicePort>, &mut RenderOptions)>;

/// A Service with two endpoints: its service chain picks from a shared endpoint map.
fn balanced(name: &str) -> ServicePort {
    port(
        name,
        "10.43.0.30",
        vec![endpoint("10.42.0.50", true), endpoint("10.42.1.51", false)],
    )
}

/// Two Service names whose service chains share a bucket and a preferred map, the first's
/// chain sorting first: it takes that map whenever it is there, and the second's chain
/// moves to the next.
fn rivals() -> (String, String) {
    let mut seen: BTreeMap<(u32, usize), (String, String)> = BTreeMap::new();
    for i in 0.. {
        let name = format!("svc-{i}");
        let chain = slot_requests(Family::V4, &balanced(&name)).remove(0);
        let home = slot_home(&chain);
        if let Some((other, other_chain)) = seen.insert(home, (name.clone(), chain.clone())) {
            return if other_chain < chain {
                (other, name)
            } else {
                (name, other)
            };
        }
    }
    unreachable!()
}

/// Runs the scenario through the incremental path, checking after every step that the
/// state equals a fresh render of the model and that the text it emitted is exactly the
/// difference between the two full renders. Returns (first full text, the update texts).
fn run_scenario(family: Family, table: &str) -> (String, Vec<(String, String)>) {
    let (mut ports, steps) = scenario();
    let mut opts = options(table);
    let mut applied: BTreeMap<String, ServicePort> = BTreeMap::new();
    let mut state = TableState::build(family, &opts, &ports);
    for port in &ports {
        applied.insert(port.id(), port.clone());
    }
    // The state writes its full text owner by owner: the same lines as a render's, in
    // another order (the kernel test below loads it).
    let first = state.full_text();
    let sorted = |text: &str| {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    assert_eq!(
        sorted(&first),
        sorted(&render(family, &ports, &opts).full_text())
    );
    let mut texts = Vec::new();
    for (step, edit) in steps {
        let before = render(family, &ports, &opts);
        edit(&mut ports, &mut opts);
        let changes = port_changes(&applied, &ports);
        let text = state.update(&opts, &changes);
        for (id, port) in &changes {
            match port {
                Some(port) => applied.insert(id.clone(), (*port).clone()),
                None => applied.remove(id),
            };
        }
        let after = render(family, &ports, &opts);
        assert_eq!(
            state.to_ruleset(),
            after,
            "{family:?} {step}: state drifted"
        );
        assert_eq!(
            text,
            after.diff_text(&before),
            "{family:?} {step}: the update differs from the full diff"
        );
        if step == "unchanged" {
            assert!(changes.is_empty() && text.is_empty(), "{text}");
        }
        texts.push((step.to_string(), text));
    }
    (first, texts)
}

#[test]
fn incremental_updates_reach_exactly_what_a_full_render_gives() {
    for family in [Family::V4, Family::V6] {
        let (_, texts) = run_scenario(family, "k3rs");
        assert!(texts.iter().any(|(_, t)| !t.is_empty()));
    }
}

#[test]
fn one_endpoint_change_among_many_services_touches_only_that_service() {
    let ports: Vec<ServicePort> = (0..200)
        .map(|s| {
            let mut p = port(
                &format!("web-{s}"),
                &format!("10.43.{}.{}", s / 200, s % 200 + 1),
                (0..3)
                    .map(|e| endpoint(&format!("10.42.{s}.{}", e + 1), e == 0))
                    .collect(),
            );
            p.node_port = Some(30000 + s as u16);
            p
        })
        .collect();
    let opts = options("k3rs");
    let mut state = TableState::build(Family::V4, &opts, &ports);
    let applied: BTreeMap<String, ServicePort> =
        ports.iter().map(|p| (p.id(), p.clone())).collect();
    let mut edited = ports.clone();
    edited[117].endpoints[2] = endpoint("10.42.250.9", false);
    let changes = port_changes(&applied, &edited);
    assert_eq!(
        changes.keys().collect::<Vec<_>>(),
        ["default/web-117/tcp/http"]
    );
    let text = state.update(&opts, &changes);
    // The map element out and in; a remote endpoint has no hairpin pair to move.
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.contains(" : 10.42.250.9 }"), "{text}");
    assert!(
        !text.contains("web-116") && !text.contains("service-ips"),
        "{text}"
    );
    assert_eq!(state.to_ruleset(), render(Family::V4, &edited, &opts));
}

/// Removes the network namespace on drop (also when an assertion fails).
struct Netns(String);

impl Netns {
    fn new(name: String) -> Netns {
        let status = std::process::Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .expect("ip not found: install iproute2 (and run the tests as root)");
        assert!(status.success(), "ip netns add {name} failed (needs root)");
        Netns(name)
    }

    fn nft(&self, args: &[&str], stdin: &str) -> String {
        use std::io::Write;
        let mut child = std::process::Command::new("ip")
            .args(["netns", "exec", &self.0, "nft"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("nft not found: install the nftables package");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write");
        let out = child.wait_with_output().expect("nft");
        assert!(
            out.status.success(),
            "nft {args:?} failed: {}\n{stdin}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

/// An `nft list table` listing with its sets, maps and chains sorted by name and each
/// set's elements sorted: the kernel lists objects in creation order and elements in hash
/// order, which differ between a table built step by step and one loaded at once.
fn canonical(listing: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut block: Vec<String> = Vec::new();
    let mut elements: Option<String> = None;
    for line in listing.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || !line.starts_with('\t') || line.starts_with("\tcomment ") {
            // The table's own lines; blank lines between objects.
            continue;
        }
        if let Some(pending) = elements.as_mut() {
            pending.push(' ');
            pending.push_str(trimmed);
        } else if trimmed.starts_with("elements = {") {
            elements = Some(trimmed.to_string());
        } else {
            block.push(trimmed.to_string());
        }
        if let Some(text) = elements.take_if(|text| text.ends_with('}')) {
            let inner = text
                .trim_start_matches("elements = {")
                .trim_end_matches('}')
                .to_string();
            let mut items: Vec<&str> = inner.split(',').map(str::trim).collect();
            items.sort_unstable();
            block.push(format!("elements = {}", items.join(", ")));
        }
        if line == "\t}" {
            blocks.push(block.join("\n"));
            block.clear();
        }
    }
    blocks.sort();
    blocks
}

/// The kernel's view (root): the update texts applied one by one leave the same table a
/// fresh full load of the final model does.
#[test]
fn incremental_texts_leave_the_kernel_where_a_full_load_does() {
    let pid = std::process::id();
    let stepped = Netns::new(format!("k3rs-unit-inc-{pid}"));
    let fresh = Netns::new(format!("k3rs-unit-full-{pid}"));
    for family in [Family::V4, Family::V6] {
        let (first, texts) = run_scenario(family, "k3rs");
        stepped.nft(&["-f", "-"], &first);
        let (mut ports, steps) = scenario();
        let mut opts = options("k3rs");
        for ((step, text), (_, edit)) in texts.iter().zip(steps) {
            edit(&mut ports, &mut opts);
            if !text.is_empty() {
                stepped.nft(&["-f", "-"], text);
            }
            fresh.nft(&["-f", "-"], &render(family, &ports, &opts).full_text());
            let list = ["list", "table", family.nft(), "k3rs"];
            let (reached, wanted) = (
                canonical(&stepped.nft(&list, "")),
                canonical(&fresh.nft(&list, "")),
            );
            let only_reached: Vec<_> = reached.iter().filter(|b| !wanted.contains(b)).collect();
            let only_wanted: Vec<_> = wanted.iter().filter(|b| !reached.contains(b)).collect();
            assert!(
                only_reached.is_empty() && only_wanted.is_empty(),
                "{family:?} after {step}: the stepped table has {only_reached:#?}\nwhere a full load has {only_wanted:#?}"
            );
        }
    }
}

#[test]
fn a_chain_taking_the_slot_of_another_re_renders_both_ports() {
    let (first, second) = rivals();
    let opts = options("k3rs");
    let slot_of = |state: &TableState, name: &str| {
        let chain = slot_requests(Family::V4, &balanced(name)).remove(0);
        state.slots[&chain]
    };
    let alone = vec![balanced(&second)];
    let mut state = TableState::build(Family::V4, &opts, &alone);
    let (bucket, preferred) = slot_home(&slot_requests(Family::V4, &alone[0])[0]);
    assert_eq!(
        slot_of(&state, &second),
        Slot {
            map: preferred,
            base: bucket
        }
    );
    // The first Service comes: its chain takes the map, the other's moves to the next one
    // (its port re-rendered although its model did not change).
    let both = vec![balanced(&second), balanced(&first)];
    let applied = alone.iter().map(|p| (p.id(), p.clone())).collect();
    let text = state.update(&opts, &port_changes(&applied, &both));
    assert_eq!(
        slot_of(&state, &first),
        Slot {
            map: preferred,
            base: bucket
        }
    );
    let moved = Slot {
        map: (preferred + 1) % ENDPOINT_MAPS.len(),
        base: bucket,
    };
    assert_eq!(slot_of(&state, &second), moved);
    let after = render(Family::V4, &both, &opts);
    assert_eq!(state.to_ruleset(), after);
    assert_eq!(
        text,
        after.diff_text(&render(Family::V4, &alone, &opts)),
        "{text}"
    );
    assert!(
        text.contains(&format!("map @{} : 8080", ENDPOINT_MAPS[moved.map])),
        "{text}"
    );
}

#[test]
fn a_full_bucket_leaves_its_last_chains_without_a_slot() {
    let wanted = std::iter::repeat_n(5, ENDPOINT_MAPS.len() + 1).chain([5, 0]);
    let maps = pick_maps(wanted);
    let expected: Vec<Option<usize>> = (5..ENDPOINT_MAPS.len())
        .chain(0..5)
        .map(Some)
        .chain([None, None, None])
        .collect();
    assert_eq!(maps, expected);
    assert_eq!(
        pick_maps([3, 3, 4, 0].into_iter()),
        [Some(3), Some(4), Some(5), Some(0)]
    );
}
