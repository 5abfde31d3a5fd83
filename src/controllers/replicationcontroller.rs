//! ReplicationController controller: the ReplicaSet loop (`replicaset::run_for`)
//! applied to the legacy core/v1 kind. Only the accessors live here: the map
//! selector becomes a `matchLabels` selector (an empty one falls back to the
//! template's labels, as kube's defaulting does), and events come from
//! `replication-controller`. Talks only to the API (kube-rs), never to the store.

use k8s_openapi::api::core::v1::{PodTemplateSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::replicaset;
use super::workload::{ReplicaCounts, ReplicatedPods};

impl ReplicatedPods for ReplicationController {
    const COMPONENT: &'static str = "replication-controller";

    fn pod_selector(&self) -> LabelSelector {
        let spec = self.spec.as_ref();
        let selector = spec
            .and_then(|s| s.selector.clone())
            .filter(|s| !s.is_empty())
            .or_else(|| {
                spec.and_then(|s| s.template.as_ref())
                    .and_then(|t| t.metadata.as_ref())
                    .and_then(|m| m.labels.clone())
            });
        LabelSelector {
            match_labels: selector,
            match_expressions: None,
        }
    }

    fn desired_replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }

    fn pod_template(&self) -> Option<PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.template.clone())
    }

    fn counts(&self) -> ReplicaCounts {
        let status = self.status.clone().unwrap_or_default();
        ReplicaCounts {
            replicas: status.replicas,
            fully_labeled: status.fully_labeled_replicas.unwrap_or(0),
            ready: status.ready_replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
            observed_generation: status.observed_generation,
        }
    }
}

/// Runs the ReplicationController controller until the process ends.
pub async fn run(client: kube::Client, pods: replicaset::PodInformer) {
    replicaset::run_for::<ReplicationController>(client, pods).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_selector_falls_back_to_template_labels() {
        let rc: ReplicationController = serde_json::from_value(json!({
            "metadata": {"name": "rc"},
            "spec": {"template": {"metadata": {"labels": {"app": "x"}}}}
        }))
        .expect("rc");
        let selector = rc.pod_selector();
        assert_eq!(
            selector.match_labels.as_ref().and_then(|m| m.get("app")),
            Some(&"x".to_string())
        );
        let explicit: ReplicationController = serde_json::from_value(json!({
            "metadata": {"name": "rc"},
            "spec": {"selector": {"tier": "db"},
                     "template": {"metadata": {"labels": {"app": "x", "tier": "db"}}}}
        }))
        .expect("rc");
        let selector = explicit.pod_selector();
        assert_eq!(selector.match_labels.map(|m| m.len()), Some(1));
    }
}
