//! Helpers shared by the workload controllers (ReplicaSet, Deployment): label
//! selector matching, controller ownerReferences, pod readiness and availability,
//! and the error type the `kube::runtime::Controller` loops need. Pure functions
//! over API objects; no I/O.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use std::collections::BTreeMap;
use std::time::Duration;

/// A reconcile failure, with its context chain (the Controller runtime needs a
/// `std::error::Error`, which `anyhow::Error` is not).
#[derive(Debug, thiserror::Error)]
#[error("{0:#}")]
pub struct ReconcileError(#[from] pub anyhow::Error);

/// Whether `labels` satisfy `selector` (matchLabels and matchExpressions). An empty
/// selector matches nothing here, as workload controllers require a selector.
pub fn selector_matches(
    selector: &LabelSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let match_labels = selector.match_labels.as_ref();
    let expressions = selector.match_expressions.as_ref();
    if match_labels.is_none_or(|m| m.is_empty()) && expressions.is_none_or(|e| e.is_empty()) {
        return false;
    }
    if let Some(m) = match_labels
        && m.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    for req in expressions.into_iter().flatten() {
        let value = labels.get(&req.key);
        let values = req.values.as_deref().unwrap_or_default();
        let ok = match req.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// The ownerReference that marks an object as controlled by `owner`.
pub fn controller_ref<K>(owner: &K) -> Option<OwnerReference>
where
    K: kube::Resource<DynamicType = ()>,
{
    let meta = owner.meta();
    Some(OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The controlling ownerReference of an object, if any.
pub fn controller_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// Seconds since the Unix epoch, now.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// The current time as a k8s `Time`.
pub fn now_time() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(now_secs()).unwrap_or_default(),
    )
}

/// A pod that counts toward a controller's replicas: not terminating, not finished.
pub fn is_active(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded") | Some("Failed"))
}

/// Seconds since the pod's Ready condition turned True, or None when not ready.
pub fn ready_since(pod: &Pod) -> Option<i64> {
    let condition = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    if condition.status != "True" {
        return None;
    }
    let since = condition
        .last_transition_time
        .as_ref()
        .map(|t| now_secs() - t.0.as_second())
        .unwrap_or(i64::MAX / 2);
    Some(since.max(0))
}

/// Whether the pod is Ready.
pub fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Availability of a pod given `minReadySeconds`: `Ok(())` when available,
/// `Err(Some(wait))` when ready but not yet for long enough, `Err(None)` when not ready.
pub fn availability(pod: &Pod, min_ready_seconds: i32) -> Result<(), Option<Duration>> {
    let Some(since) = ready_since(pod) else {
        return Err(None);
    };
    let min = i64::from(min_ready_seconds.max(0));
    if min == 0 || since >= min {
        Ok(())
    } else {
        Err(Some(Duration::from_secs((min - since) as u64)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_match_labels_and_expressions() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["front".into(), "edge".into()]),
            }]),
        };
        assert!(selector_matches(
            &selector,
            Some(&labels(&[("app", "web"), ("tier", "edge")]))
        ));
        assert!(!selector_matches(
            &selector,
            Some(&labels(&[("app", "web")]))
        ));
        assert!(!selector_matches(
            &selector,
            Some(&labels(&[("app", "db"), ("tier", "edge")]))
        ));
        assert!(!selector_matches(
            &LabelSelector::default(),
            Some(&labels(&[("a", "b")]))
        ));
    }
}
