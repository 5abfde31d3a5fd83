//! Prometheus metrics of the API server: requests by verb, resource and code,
//! request latency histograms, and the number of open watches.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

#[derive(Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latency: Mutex<BTreeMap<(String, String), Histogram>>,
}

impl Metrics {
    pub fn observe(&self, verb: &str, resource: &str, code: u16, took: Duration) {
        if let Ok(mut r) = self.requests.lock() {
            *r.entry((verb.to_string(), resource.to_string(), code))
                .or_default() += 1;
        }
        if verb == "WATCH" {
            return;
        }
        if let Ok(mut l) = self.latency.lock() {
            let h = l
                .entry((verb.to_string(), resource.to_string()))
                .or_default();
            if h.counts.is_empty() {
                h.counts = vec![0; BUCKETS.len()];
            }
            let secs = took.as_secs_f64();
            for (i, b) in BUCKETS.iter().enumerate() {
                if secs <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += secs;
            h.count += 1;
        }
    }

    pub fn render(&self, watchers: usize) -> String {
        let mut out = String::new();
        crate::panics::render_metrics(&mut out);
        out.push_str("# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, resource and HTTP response code.\n# TYPE apiserver_request_total counter\n");
        if let Ok(r) = self.requests.lock() {
            for ((verb, resource, code), n) in r.iter() {
                let _ = writeln!(
                    out,
                    "apiserver_request_total{{code=\"{code}\",resource=\"{resource}\",verb=\"{verb}\"}} {n}"
                );
            }
        }
        out.push_str("# HELP apiserver_request_duration_seconds Response latency distribution in seconds for each verb and resource.\n# TYPE apiserver_request_duration_seconds histogram\n");
        if let Ok(l) = self.latency.lock() {
            for ((verb, resource), h) in l.iter() {
                for (i, b) in BUCKETS.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "apiserver_request_duration_seconds_bucket{{resource=\"{resource}\",verb=\"{verb}\",le=\"{b}\"}} {}",
                        h.counts[i]
                    );
                }
                let _ = writeln!(
                    out,
                    "apiserver_request_duration_seconds_bucket{{resource=\"{resource}\",verb=\"{verb}\",le=\"+Inf\"}} {}",
                    h.count
                );
                let _ = writeln!(
                    out,
                    "apiserver_request_duration_seconds_sum{{resource=\"{resource}\",verb=\"{verb}\"}} {}",
                    h.sum
                );
                let _ = writeln!(
                    out,
                    "apiserver_request_duration_seconds_count{{resource=\"{resource}\",verb=\"{verb}\"}} {}",
                    h.count
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP apiserver_registered_watchers Number of currently registered watchers.\n# TYPE apiserver_registered_watchers gauge\napiserver_registered_watchers {watchers}"
        );
        out
    }
}

/// The store's raft figures under etcd's metric names, so dashboards and alerts written
/// for k3s's embedded etcd read them unchanged.
pub fn render_store(store: &crate::store::Store) -> String {
    let mut out = String::new();
    let gauge = |out: &mut String, name: &str, help: &str, kind: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    gauge(
        &mut out,
        "etcd_server_has_leader",
        "Whether or not a leader exists. 1 is existence, 0 is not.",
        "gauge",
        u64::from(store.has_leader()),
    );
    gauge(
        &mut out,
        "etcd_server_is_leader",
        "Whether or not this member is a leader. 1 if is, 0 otherwise.",
        "gauge",
        u64::from(store.is_leader()),
    );
    gauge(
        &mut out,
        "etcd_server_leader_changes_seen_total",
        "The number of leader changes seen.",
        "counter",
        store.leader_changes(),
    );
    gauge(
        &mut out,
        "etcd_server_proposals_failed_total",
        "The total number of failed proposals seen.",
        "counter",
        store.proposals_failed(),
    );
    let round_trips = store.peer_round_trips();
    let name = "etcd_network_peer_round_trip_time_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Round-Trip-Time histogram between peers\n# TYPE {name} histogram"
    );
    for (peer, histogram) in round_trips {
        let to = format!("{peer:x}");
        for (count, bound) in histogram
            .buckets
            .iter()
            .zip(crate::store::RttHistogram::BOUNDS)
        {
            let _ = writeln!(out, "{name}_bucket{{To=\"{to}\",le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{To=\"{to}\",le=\"+Inf\"}} {}",
            histogram.count
        );
        let _ = writeln!(out, "{name}_sum{{To=\"{to}\"}} {}", histogram.sum_seconds);
        let _ = writeln!(out, "{name}_count{{To=\"{to}\"}} {}", histogram.count);
    }
    out
}
