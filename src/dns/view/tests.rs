//! Unit tests of the DNS view: the answers CoreDNS's `kubernetes` plugin gives for Services,
//! endpoints, pods and ExternalNames, NXDOMAIN vs NODATA, and hostile objects skipped.

use super::*;
use crate::dns::wire::{RCODE_NXDOMAIN, TYPE_CNAME, TYPE_PTR, TYPE_SRV, query};
use serde_json::json;

fn view() -> View {
    let services: Vec<Service> = serde_json::from_value(json!([
        {"metadata": {"namespace": "default", "name": "web"},
         "spec": {"clusterIP": "10.43.0.20", "clusterIPs": ["10.43.0.20"],
                  "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}},
        {"metadata": {"namespace": "default", "name": "db"},
         "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}},
        {"metadata": {"namespace": "default", "name": "ext"},
         "spec": {"type": "ExternalName", "externalName": "example.com."}}
    ]))
    .expect("services");
    let slices: Vec<EndpointSlice> = serde_json::from_value(json!([
        {"metadata": {"namespace": "default", "name": "db-1",
                      "labels": {"kubernetes.io/service-name": "db"}},
         "addressType": "IPv4",
         "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
         "endpoints": [
            {"addresses": ["10.42.0.7"], "hostname": "db-0", "conditions": {"ready": true}},
            {"addresses": ["10.42.0.8"], "conditions": {"ready": true}},
            {"addresses": ["10.42.0.9"], "hostname": "db-2", "conditions": {"ready": false}}
         ]}
    ]))
    .expect("slices");
    View::build("cluster.local", &services, &slices, 1)
}

fn ask(view: &View, name: &str, qtype: u16) -> Message {
    match view.answer(&query(1, name, qtype)) {
        Answer::Local(m) => m,
        Answer::Forward => panic!("{name} was forwarded"),
    }
}

#[test]
fn cluster_ip_service_has_an_a_record_and_nodata_for_aaaa() {
    let v = view();
    let m = ask(&v, "web.default.svc.cluster.local", TYPE_A);
    assert_eq!(m.rcode(), RCODE_NOERROR);
    assert_eq!(
        m.answers[0].data,
        RData::A("10.43.0.20".parse().expect("ip"))
    );
    assert_eq!(m.answers[0].ttl, TTL);
    let m = ask(&v, "web.default.svc.cluster.local", TYPE_AAAA);
    assert_eq!(m.rcode(), RCODE_NOERROR);
    assert!(m.answers.is_empty());
    assert_eq!(m.authority[0].data.rtype(), TYPE_SOA);
}

#[test]
fn headless_service_answers_ready_endpoints_and_hostnames() {
    let v = view();
    let m = ask(&v, "db.default.svc.cluster.local", TYPE_A);
    let ips: Vec<_> = m.answers.iter().map(|r| r.data.clone()).collect();
    assert_eq!(
        ips,
        [
            RData::A("10.42.0.7".parse().expect("ip")),
            RData::A("10.42.0.8".parse().expect("ip"))
        ]
    );
    let m = ask(&v, "db-0.db.default.svc.cluster.local", TYPE_A);
    assert_eq!(
        m.answers[0].data,
        RData::A("10.42.0.7".parse().expect("ip"))
    );
    let m = ask(&v, "10-42-0-8.db.default.svc.cluster.local", TYPE_A);
    assert_eq!(m.answers.len(), 1);
    // Not ready: no record.
    assert_eq!(
        ask(&v, "db-2.db.default.svc.cluster.local", TYPE_A).rcode(),
        RCODE_NXDOMAIN
    );
}

#[test]
fn srv_for_named_ports_with_additional_addresses() {
    let v = view();
    let m = ask(&v, "_http._tcp.web.default.svc.cluster.local", TYPE_SRV);
    assert_eq!(
        m.answers[0].data,
        RData::Srv {
            priority: 0,
            weight: 100,
            port: 80,
            target: "web.default.svc.cluster.local".into()
        }
    );
    assert_eq!(m.additional[0].name, "web.default.svc.cluster.local");
    let m = ask(&v, "_pg._tcp.db.default.svc.cluster.local", TYPE_SRV);
    assert_eq!(m.answers.len(), 2);
    assert!(m.answers.iter().any(|r| matches!(&r.data,
        RData::Srv { target, port: 5432, .. } if target == "db-0.db.default.svc.cluster.local")));
}

#[test]
fn ptr_for_service_and_endpoint_addresses_and_fallthrough_otherwise() {
    let v = view();
    let m = ask(&v, "20.0.43.10.in-addr.arpa", TYPE_PTR);
    assert_eq!(
        m.answers[0].data,
        RData::Ptr("web.default.svc.cluster.local".into())
    );
    let m = ask(&v, "7.0.42.10.in-addr.arpa", TYPE_PTR);
    assert_eq!(
        m.answers[0].data,
        RData::Ptr("db-0.db.default.svc.cluster.local".into())
    );
    assert_eq!(
        v.answer(&query(1, "1.1.168.192.in-addr.arpa", TYPE_PTR)),
        Answer::Forward
    );
    assert_eq!(
        reverse_name(&"fd00::1".parse().expect("ip")),
        "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa"
    );
}

#[test]
fn external_name_is_a_cname_for_any_type() {
    let v = view();
    for qtype in [TYPE_A, TYPE_AAAA, TYPE_CNAME] {
        let m = ask(&v, "ext.default.svc.cluster.local", qtype);
        assert_eq!(m.answers[0].data, RData::Cname("example.com".into()));
    }
}

#[test]
fn nxdomain_vs_nodata_and_forwarding() {
    let v = view();
    let m = ask(&v, "nope.default.svc.cluster.local", TYPE_A);
    assert_eq!(m.rcode(), RCODE_NXDOMAIN);
    assert_eq!(m.authority[0].data.rtype(), TYPE_SOA);
    // Existing interior names are NODATA.
    for name in [
        "default.svc.cluster.local",
        "svc.cluster.local",
        "cluster.local",
    ] {
        let m = ask(&v, name, TYPE_A);
        assert_eq!(m.rcode(), RCODE_NOERROR, "{name}");
        assert!(m.answers.is_empty());
    }
    assert_eq!(
        ask(&v, "other.svc.cluster.local", TYPE_A).rcode(),
        RCODE_NXDOMAIN
    );
    assert_eq!(v.answer(&query(1, "example.com", TYPE_A)), Answer::Forward);
    // A suffix that is not a label boundary is not ours.
    assert_eq!(
        v.answer(&query(1, "notcluster.local", TYPE_A)),
        Answer::Forward
    );
}

#[test]
fn pod_names_answer_their_address() {
    let v = view();
    let m = ask(&v, "10-42-0-99.default.pod.cluster.local", TYPE_A);
    assert_eq!(
        m.answers[0].data,
        RData::A("10.42.0.99".parse().expect("ip"))
    );
}

/// Objects written straight into the store with fields the API refuses: each is left out
/// (or its bad part is), the valid ones still answer, and no hostile text becomes a name.
#[test]
fn hostile_objects_are_skipped_and_the_rest_answers() {
    let long = "a".repeat(10_000);
    let services: Vec<Service> = serde_json::from_value(json!([
        {"metadata": {"namespace": "default", "name": "web.kube-system"},
         "spec": {"clusterIP": "10.43.0.66", "ports": [{"port": 80}]}},
        {"metadata": {"namespace": "default", "name": long},
         "spec": {"clusterIP": "10.43.0.67", "ports": [{"port": 80}]}},
        {"metadata": {"namespace": "evil\nns", "name": "x"},
         "spec": {"clusterIP": "10.43.0.68", "ports": [{"port": 80}]}},
        {"metadata": {"namespace": "default", "name": "ext"},
         "spec": {"type": "ExternalName", "externalName": "a b;\"c"}},
        {"metadata": {"namespace": "default", "name": "ok"},
         "spec": {"clusterIP": "10.43.0.20",
                  "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                            {"name": "Bad_Name", "port": 81, "protocol": "TCP"},
                            {"name": "big", "port": 70000, "protocol": "TCP"},
                            {"name": "icmp", "port": 82, "protocol": "ICMP"}]}},
        {"metadata": {"namespace": "default", "name": "db"},
         "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}}
    ]))
    .expect("services");
    let slices: Vec<EndpointSlice> = serde_json::from_value(json!([
        {"metadata": {"namespace": "default", "name": "db-1",
                      "labels": {"kubernetes.io/service-name": "db"}},
         "addressType": "IPv4",
         "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
         "endpoints": [
            {"addresses": ["10.42.0.7"], "hostname": "evil.web.default", "conditions": {"ready": true}}
         ]}
    ]))
    .expect("slices");
    let v = View::build("cluster.local", &services, &slices, 1);
    let m = ask(&v, "web.kube-system.svc.cluster.local", TYPE_A);
    assert!(m.answers.is_empty(), "{m:?}");
    let m = ask(&v, "web.kube-system.default.svc.cluster.local", TYPE_A);
    assert_eq!(m.rcode(), RCODE_NXDOMAIN);
    let m = ask(&v, "ext.default.svc.cluster.local", TYPE_CNAME);
    assert_eq!(m.rcode(), RCODE_NXDOMAIN);
    let m = ask(&v, "ok.default.svc.cluster.local", TYPE_A);
    assert_eq!(m.answers.len(), 1);
    let m = ask(&v, "_http._tcp.ok.default.svc.cluster.local", TYPE_SRV);
    assert_eq!(m.answers.len(), 1);
    for bad in ["_bad_name._tcp", "_big._tcp", "_icmp._icmp"] {
        let m = ask(&v, &format!("{bad}.ok.default.svc.cluster.local"), TYPE_SRV);
        assert!(m.answers.is_empty(), "{bad}: {m:?}");
    }
    // The bad hostname falls back to the dashed address.
    let m = ask(&v, "10-42-0-7.db.default.svc.cluster.local", TYPE_A);
    assert_eq!(m.answers.len(), 1);
    let m = ask(&v, "evil.web.default.db.default.svc.cluster.local", TYPE_A);
    assert!(m.answers.is_empty());
    // Every record still encodes.
    for name in v.records.keys() {
        assert!(
            !name.contains('\n') && !name.contains(' ') && name.len() < 300,
            "{name:?}"
        );
    }
}
