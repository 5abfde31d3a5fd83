//! Unit tests of the nftables renderer: balancing, reject, affinity, traffic policies and
//! masquerading; scripts are also validated by the kernel with `nft -c` (needs root).

use super::*;
use crate::proxy::model::{Endpoint, Protocol, ServicePort};
use crate::proxy::table::render;

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

fn port(name: &str, endpoints: Vec<Endpoint>) -> ServicePort {
    ServicePort {
        namespace: "default".into(),
        name: name.into(),
        port_name: "http".into(),
        protocol: Protocol::Tcp,
        cluster_ips: vec![ip("10.43.0.20")],
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

fn options() -> RenderOptions {
    RenderOptions {
        table: "k3rs".into(),
        node_ips: vec![ip("192.168.1.10")],
        cluster_cidrs: vec!["10.42.0.0/16".into()],
    }
}

/// Validates `script` against the kernel without applying it (`nft -c`, needs root).
fn nft_check(script: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("nft")
        .args(["-c", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("nft not found: install the nftables package (and run the tests as root)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("nft");
    assert!(
        out.status.success(),
        "nft -c rejected the ruleset: {}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn cluster_ip_balances_over_ready_endpoints_and_masquerades_off_cluster_sources() {
    let svc = port(
        "web",
        vec![endpoint("10.42.0.5", true), endpoint("10.42.1.6", false)],
    );
    let rs = render(Family::V4, std::slice::from_ref(&svc), &options());
    let service_chain = chain_name("service", &svc.id());
    let element = &rs.sets["service-ips"].elements["10.43.0.20 . tcp . 80"];
    assert_eq!(element, &format!("goto {service_chain}"));
    // Masquerading is decided by destination in `services`, for sources off the pod
    // network; the service chain only balances.
    assert_eq!(
        rs.sets["service-masquerade"].elements["10.43.0.20 . tcp . 80"],
        "jump masquerade-off-cluster"
    );
    assert_eq!(
        rs.chains["masquerade-off-cluster"].rules,
        ["ip saddr != @cluster-cidrs jump mark-for-masquerade"]
    );
    assert_eq!(
        rs.chains["services"].rules[..2],
        [
            "ip daddr . meta l4proto . th dport vmap @service-masquerade",
            "ip daddr . meta l4proto . th dport vmap @service-ips"
        ]
    );
    assert_eq!(
        rs.sets["cluster-cidrs"].elements.keys().collect::<Vec<_>>(),
        ["10.42.0.0/16"]
    );
    // The pick: keys `base + i` of the shared endpoint map of the chain's slot (alone in
    // its bucket, the chain has its preferred map); the port is the rule's.
    let rules = &rs.chains[&service_chain].rules;
    let (base, map) = slot_home(&service_chain);
    let map = ENDPOINT_MAPS[map];
    assert_eq!(
        rules[..],
        [format!(
            "meta l4proto tcp dnat ip to numgen random mod 2 offset {base} map @{map} : 8080"
        )]
    );
    assert_eq!(rs.sets[map].decl, "typeof numgen random mod 1 : ip daddr;");
    assert_eq!(
        rs.sets[map]
            .elements
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
        [
            (base.to_string().as_str(), "10.42.0.5"),
            ((base + 1).to_string().as_str(), "10.42.1.6")
        ]
    );
    // No map, and no chain, of its own.
    let own_map = format!("{}-endpoints", handle("service", &svc.id()));
    assert!(!rs.sets.contains_key(&own_map));
    assert!(!rs.chains.keys().any(|c| c.starts_with("endpoint-")));
    // Only this node's endpoint can be its own client.
    assert_eq!(
        rs.sets["hairpin-endpoints"]
            .elements
            .keys()
            .collect::<Vec<_>>(),
        ["10.42.0.5 . 10.42.0.5"]
    );
    assert!(rs.sets["no-endpoint-services"].elements.is_empty());
    assert_eq!(
        rs.sets["nodeport-ips"].elements.keys().collect::<Vec<_>>(),
        ["192.168.1.10"]
    );
}

#[test]
fn no_endpoints_means_reject_and_no_service_chain() {
    let svc = port("empty", vec![]);
    let rs = render(Family::V4, std::slice::from_ref(&svc), &options());
    assert_eq!(
        rs.sets["no-endpoint-services"].elements["10.43.0.20 . tcp . 80"],
        "goto reject-chain"
    );
    assert!(rs.sets["service-ips"].elements.is_empty());
    assert!(!rs.chains.contains_key(&chain_name("service", &svc.id())));
    assert_eq!(
        rs.chains["reject-chain"].rules,
        ["meta l4proto tcp reject with tcp reset", "reject"]
    );
}

#[test]
fn session_affinity_uses_one_timeout_set_per_endpoint() {
    let mut svc = port(
        "sticky",
        vec![endpoint("10.42.0.5", true), endpoint("10.42.0.6", true)],
    );
    svc.affinity_timeout = Some(600);
    let rs = render(Family::V4, std::slice::from_ref(&svc), &options());
    let set = affinity_set(&svc, &svc.endpoints[1], 600);
    assert_eq!(
        rs.sets[&set].decl,
        "type ipv4_addr; flags dynamic,timeout; timeout 600s;"
    );
    let service_rules = &rs.chains[&chain_name("service", &svc.id())].rules;
    assert!(service_rules.contains(&format!(
        "ip saddr @{set} goto {}",
        endpoint_chain(&svc, &svc.endpoints[1])
    )));
    let picks = format!("{}-endpoint-chains", handle("service", &svc.id()));
    assert_eq!(
        service_rules.last().expect("rules"),
        &format!("numgen random mod 2 vmap @{picks}")
    );
    assert_eq!(
        rs.sets[&picks].elements["1"],
        format!("goto {}", endpoint_chain(&svc, &svc.endpoints[1]))
    );
    let ep_rules = &rs.chains[&endpoint_chain(&svc, &svc.endpoints[1])].rules;
    assert_eq!(ep_rules[0], format!("update @{set} {{ ip saddr }}"));
    assert_eq!(ep_rules[1], "meta l4proto tcp dnat to 10.42.0.6:8080");
}

#[test]
fn node_port_with_local_policy_only_uses_local_endpoints_and_drops_without_them() {
    let mut svc = port(
        "np",
        vec![endpoint("10.42.0.5", true), endpoint("10.42.1.6", false)],
    );
    svc.node_port = Some(30080);
    svc.external_local = true;
    let rs = render(Family::V4, std::slice::from_ref(&svc), &options());
    let external = chain_name("external", &svc.id());
    assert_eq!(
        rs.sets["service-nodeports"].elements["tcp . 30080"],
        format!("goto {external}")
    );
    let local = chain_name("local", &format!("{}/external", svc.id()));
    assert_eq!(
        rs.chains[&local].rules,
        ["meta l4proto tcp dnat to 10.42.0.5:8080"]
    );
    // Without a local endpoint NodePort traffic is dropped, ClusterIP traffic still works.
    svc.endpoints[0].local = false;
    let rs = render(Family::V4, std::slice::from_ref(&svc), &options());
    assert_eq!(
        rs.sets["no-endpoint-nodeports"].elements["tcp . 30080"],
        "drop"
    );
    assert!(
        rs.sets["service-ips"]
            .elements
            .contains_key("10.43.0.20 . tcp . 80")
    );
}

#[test]
fn cluster_policy_node_port_and_load_balancer_masquerade() {
    let mut svc = port("lb", vec![endpoint("10.42.1.6", false)]);
    svc.node_port = Some(30081);
    svc.load_balancer_ips = vec![ip("192.168.1.10")];
    let rs = render(Family::V4, std::slice::from_ref(&svc), &options());
    // No chain of its own: the destination is masqueraded, the service chain balances.
    assert!(!rs.chains.contains_key(&chain_name("external", &svc.id())));
    let service = format!("goto {}", chain_name("service", &svc.id()));
    assert_eq!(
        rs.sets["service-ips"].elements["192.168.1.10 . tcp . 80"],
        service
    );
    assert_eq!(
        rs.sets["service-masquerade"].elements["192.168.1.10 . tcp . 80"],
        "jump mark-for-masquerade"
    );
    assert_eq!(
        rs.sets["service-nodeports"].elements["tcp . 30081"],
        service
    );
    assert!(
        rs.sets["nodeport-masquerade"]
            .elements
            .contains_key("tcp . 30081")
    );
    assert_eq!(
        rs.chains["services"].rules[2..],
        [
            "ip daddr @nodeport-ips meta l4proto . th dport @nodeport-masquerade jump mark-for-masquerade",
            "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"
        ]
    );
}

#[test]
fn internal_local_policy_without_local_endpoints_drops() {
    let mut svc = port("itp", vec![endpoint("10.42.1.6", false)]);
    svc.internal_local = true;
    let rs = render(Family::V4, &[svc], &options());
    assert_eq!(
        rs.sets["no-endpoint-services"].elements["10.43.0.20 . tcp . 80"],
        "drop"
    );
}

#[test]
fn diff_touches_only_what_changed() {
    let mut web = port("web", vec![endpoint("10.42.0.5", true)]);
    web.affinity_timeout = Some(60);
    let before = render(Family::V4, std::slice::from_ref(&web), &options());
    assert_eq!(before.diff_text(&before), "");
    web.endpoints = vec![endpoint("10.42.0.7", true)];
    let after = render(Family::V4, std::slice::from_ref(&web), &options());
    let diff = after.diff_text(&before);
    let lines: Vec<&str> = diff.lines().collect();
    assert!(
        lines[0].starts_with("add chain ip k3rs endpoint-"),
        "{diff}"
    );
    assert!(diff.contains("10.42.0.7:8080"));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("flush chain ip k3rs service-")),
        "{diff}"
    );
    // The old endpoint's set goes before its chain, which goes last (nothing refers to
    // it by then).
    let deleted_set = lines
        .iter()
        .position(|l| l.starts_with("delete set ip k3rs affinity-"))
        .expect(&diff);
    assert!(
        lines[deleted_set + 1..]
            .iter()
            .all(|l| l.starts_with("delete chain ip k3rs endpoint-")),
        "{diff}"
    );
    assert!(
        lines
            .last()
            .expect("lines")
            .starts_with("delete chain ip k3rs endpoint-"),
        "{diff}"
    );
    assert!(lines.iter().all(|l| !l.contains("service-ips")), "{diff}");
}

#[test]
fn one_endpoint_change_is_an_element_update_only() {
    let mut web = port(
        "web",
        vec![endpoint("10.42.0.5", true), endpoint("10.42.1.6", false)],
    );
    let before = render(Family::V4, std::slice::from_ref(&web), &options());
    web.endpoints[1] = endpoint("10.42.1.9", false);
    let after = render(Family::V4, std::slice::from_ref(&web), &options());
    let (base, map) = slot_home(&chain_name("service", &web.id()));
    let map = ENDPOINT_MAPS[map];
    assert_eq!(
        after.diff_text(&before).lines().collect::<Vec<_>>(),
        [
            format!("delete element ip k3rs {map} {{ {} }}", base + 1),
            format!("add element ip k3rs {map} {{ {} : 10.42.1.9 }}", base + 1),
        ]
    );
    // A local endpoint may also be its own client: its hairpin pair moves with it.
    web.endpoints[0] = endpoint("10.42.0.7", true);
    let moved = render(Family::V4, std::slice::from_ref(&web), &options());
    assert_eq!(
        moved.diff_text(&after).lines().collect::<Vec<_>>(),
        [
            format!("delete element ip k3rs {map} {{ {base} }}"),
            format!("add element ip k3rs {map} {{ {base} : 10.42.0.7 }}"),
            "delete element ip k3rs hairpin-endpoints { 10.42.0.5 . 10.42.0.5 }".to_string(),
            "add element ip k3rs hairpin-endpoints { 10.42.0.7 . 10.42.0.7 }".to_string(),
        ]
    );
    // A third endpoint changes the modulus: the chain is refilled, the map gains one.
    web.endpoints.push(endpoint("10.42.2.7", false));
    let grown = render(Family::V4, std::slice::from_ref(&web), &options());
    let diff = grown.diff_text(&moved);
    assert!(
        diff.contains(&format!(
            "numgen random mod 3 offset {base} map @{map} : 8080"
        )),
        "{diff}"
    );
    assert!(
        diff.contains(&format!(
            "add element ip k3rs {map} {{ {} : 10.42.2.7 }}",
            base + 2
        )),
        "{diff}"
    );
}

#[test]
fn endpoints_on_different_ports_take_a_map_of_their_own() {
    let mut web = port(
        "web",
        vec![endpoint("10.42.0.5", true), endpoint("10.42.1.6", false)],
    );
    // A named target port can resolve to another number on each pod.
    web.endpoints[1].port = 9090;
    let rs = render(Family::V4, std::slice::from_ref(&web), &options());
    let map = format!("{}-endpoints", handle("service", &web.id()));
    assert_eq!(
        rs.chains[&chain_name("service", &web.id())].rules,
        [format!(
            "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map @{map}"
        )]
    );
    assert_eq!(
        rs.sets[&map].decl,
        "typeof numgen random mod 1 : ip daddr . tcp dport;"
    );
    assert_eq!(
        rs.sets[&map]
            .elements
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
        [("0", "10.42.0.5 . 8080"), ("1", "10.42.1.6 . 9090")]
    );
    assert!(
        ENDPOINT_MAPS
            .iter()
            .all(|m| rs.sets[*m].elements.is_empty())
    );
    assert!(slot_requests(Family::V4, &web).is_empty());
    // Back on one port: the shared map again, the chain's own map goes.
    web.endpoints[1].port = 8080;
    let shared = render(Family::V4, std::slice::from_ref(&web), &options());
    let diff = shared.diff_text(&rs);
    assert!(
        diff.ends_with(&format!("delete map ip k3rs {map}\n")),
        "{diff}"
    );
}

#[test]
fn without_cluster_cidrs_all_cluster_ip_traffic_is_masqueraded() {
    let svc = port("web", vec![endpoint("10.42.0.5", true)]);
    let mut opts = options();
    opts.cluster_cidrs.clear();
    let rs = render(Family::V4, std::slice::from_ref(&svc), &opts);
    // `saddr != @cluster-cidrs` holds for every source while the set is empty.
    assert!(rs.sets["cluster-cidrs"].elements.is_empty());
    assert_eq!(
        rs.chains["masquerade-off-cluster"].rules,
        ["ip saddr != @cluster-cidrs jump mark-for-masquerade"]
    );
    // Learning them later is an element update, not a rewrite of every service chain.
    let learned = render(Family::V4, std::slice::from_ref(&svc), &options());
    assert_eq!(
        learned.diff_text(&rs),
        "add element ip k3rs cluster-cidrs { 10.42.0.0/16 }\n"
    );
}

#[test]
fn ipv6_table_brackets_dnat_addresses() {
    let mut svc = port("v6", vec![endpoint("fd00:42::5", true)]);
    svc.cluster_ips = vec![ip("fd00:43::20")];
    let rs = render(Family::V6, std::slice::from_ref(&svc), &options());
    let rules = &rs.chains[&chain_name("service", &svc.id())].rules;
    assert_eq!(rules[..], ["meta l4proto tcp dnat to [fd00:42::5]:8080"]);
    assert!(
        rs.sets["service-ips"]
            .elements
            .contains_key("fd00:43::20 . tcp . 80")
    );
    // The IPv4 table has nothing for it.
    assert!(
        render(Family::V4, &[svc], &options()).sets["service-ips"]
            .elements
            .is_empty()
    );
}

/// Every feature in one ruleset, checked by the kernel (root).
#[test]
fn generated_rulesets_are_accepted_by_nft() {
    let mut sticky = port(
        "sticky",
        vec![endpoint("10.42.0.5", true), endpoint("10.42.0.6", false)],
    );
    sticky.affinity_timeout = Some(10800);
    sticky.node_port = Some(30090);
    let mut local = port("local", vec![endpoint("10.42.0.8", true)]);
    local.cluster_ips = vec![ip("10.43.0.21")];
    local.node_port = Some(30091);
    local.external_local = true;
    local.internal_local = true;
    local.load_balancer_ips = vec![ip("192.168.1.10")];
    let mut udp = port("dns", vec![endpoint("10.42.0.9", true)]);
    udp.protocol = Protocol::Udp;
    udp.cluster_ips = vec![ip("10.43.0.10"), ip("fd00:43::10")];
    let mut empty = port("empty", vec![]);
    empty.cluster_ips = vec![ip("10.43.0.22")];
    empty.node_port = Some(30092);
    let mut v6 = port("v6", vec![endpoint("fd00:42::5", true)]);
    v6.cluster_ips = vec![ip("fd00:43::20")];
    v6.affinity_timeout = Some(60);
    let mut v6_many = port(
        "v6many",
        vec![endpoint("fd00:42::6", true), endpoint("fd00:42::7", true)],
    );
    v6_many.cluster_ips = vec![ip("fd00:43::21")];
    let mut many = port(
        "many",
        vec![endpoint("10.42.0.10", true), endpoint("10.42.0.11", true)],
    );
    many.cluster_ips = vec![ip("10.43.0.23")];
    let mut local_many = port(
        "localmany",
        vec![
            endpoint("10.42.0.13", true),
            endpoint("10.42.0.14", true),
            endpoint("10.42.1.15", false),
        ],
    );
    local_many.cluster_ips = vec![ip("10.43.0.24")];
    local_many.node_port = Some(30093);
    local_many.external_local = true;
    local_many.internal_local = true;
    let ports = [sticky, local, udp, empty, v6, v6_many, many, local_many];
    let mut opts = options();
    opts.table = format!("k3rs-unit-{}", std::process::id());
    opts.cluster_cidrs.push("fd00:42::/56".into());
    opts.node_ips.push(ip("fd00::10"));
    let v4 = render(Family::V4, &ports, &opts);
    let v6 = render(Family::V6, &ports, &opts);
    // Every balancing chain without affinity picks from the shared endpoint maps (the
    // service chain and both local ones of `localmany` too): none has a map of its own.
    for rs in [&v4, &v6] {
        let own: Vec<&String> = rs
            .sets
            .keys()
            .filter(|s| s.ends_with("-endpoints") && *s != "hairpin-endpoints")
            .collect();
        assert!(own.is_empty(), "{own:?}");
    }
    assert_eq!(slot_requests(Family::V4, &ports[7]).len(), 3);
    let picks = v4
        .chains
        .values()
        .flat_map(|c| &c.rules)
        .filter(|r| r.contains(" offset "))
        .count();
    assert_eq!(picks, 4, "{:#?}", v4.chains);
    nft_check(&format!("{}{}", v4.full_text(), v6.full_text()));
    // A diff applies on top of the full text in one transaction, too.
    let changed = render(Family::V4, &ports[1..], &opts);
    nft_check(&format!("{}{}", v4.full_text(), changed.diff_text(&v4)));
    // So does an endpoint change (an element update) and a sticky Service losing
    // affinity (its endpoint-chains map goes, an endpoints map comes).
    let mut edited = ports.clone();
    edited[6].endpoints[1] = endpoint("10.42.0.12", true);
    edited[0].affinity_timeout = None;
    let edited = render(Family::V4, &edited, &opts);
    nft_check(&format!("{}{}", v4.full_text(), edited.diff_text(&v4)));
}

/// Names are object fields: even ones that bypassed validation render into names nft
/// accepts, with none of their syntax, and one hostile port does not spoil the script for
/// the others (the kernel checks it).
#[test]
fn hostile_names_cannot_reach_the_script() {
    let hostile = [
        "web\n}\ntable ip evil {",
        "a;b",
        "quote\"d",
        "{}",
        "sp ace",
        "tab\tname",
        "#comment",
        "$var",
        "@set",
    ];
    let long_multibyte = "é".repeat(150);
    let long = "x".repeat(10_000);
    let mut ports = vec![port("good", vec![endpoint("10.42.0.5", true)])];
    for (i, name) in hostile
        .iter()
        .copied()
        .chain([long_multibyte.as_str(), long.as_str()])
        .enumerate()
    {
        let mut p = port(
            "bad",
            vec![endpoint("10.42.0.6", true), endpoint("10.42.0.7", true)],
        );
        p.port_name = name.to_string();
        p.namespace = name.to_string();
        p.port = 1000 + i as u16;
        p.affinity_timeout = (i % 2 == 0).then_some(30);
        ports.push(p);
    }
    let mut opts = options();
    opts.table = format!("k3rs-unit-hostile-{}", std::process::id());
    let v4 = render(Family::V4, &ports, &opts);
    let text = v4.full_text();
    for name in v4.chains.keys().chain(v4.sets.keys()) {
        assert!(name.len() <= 200, "{name}");
        assert!(
            name.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"/_.-".contains(&c)),
            "{name:?}"
        );
    }
    assert!(!text.contains("table ip evil") && !text.contains('é') && !text.contains('$'));
    nft_check(&text);
}
