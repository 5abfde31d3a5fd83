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
