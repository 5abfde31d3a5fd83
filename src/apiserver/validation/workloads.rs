//! Workload validation: Deployment, ReplicaSet, ReplicationController, DaemonSet,
//! StatefulSet, Job, CronJob and PodTemplate (kube's `apps`, `batch` and core
//! validation), each pod template through `pod::validate_pod_spec`.

use serde_json::{Map, Value};

use super::field::{self, ErrorList, Path};
use super::pod::validate_pod_spec;

fn selector_matches_labels(selector: &Value, labels: Option<&Map<String, Value>>) -> bool {
    let Some(match_labels) = selector.get("matchLabels").and_then(Value::as_object) else {
        return true;
    };
    match_labels
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

pub fn validate(kind: &str, new: &Value, _old: Option<&Value>, errs: &mut ErrorList) {
    let template_spec = Path::new("spec").child("template").child("spec");
    match kind {
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" => {
            let labels = new
                .pointer("/spec/template/metadata/labels")
                .and_then(Value::as_object);
            match new.pointer("/spec/selector") {
                None | Some(Value::Null) => {
                    errs.push(field::required(&Path::new("spec.selector"), ""))
                }
                Some(sel) => {
                    if !selector_matches_labels(sel, labels) {
                        errs.push(field::invalid(
                            &Path::new("spec.template.metadata.labels"),
                            field::Bad::Raw(
                                serde_json::to_string(&labels.cloned().unwrap_or_default())
                                    .unwrap_or_default(),
                            ),
                            "`selector` does not match template `labels`",
                        ));
                    }
                }
            }
            validate_pod_spec(new.pointer("/spec/template/spec"), &template_spec, errs);
            if let Some(r) = new.pointer("/spec/replicas").and_then(Value::as_i64)
                && r < 0
            {
                errs.push(field::invalid(
                    &Path::new("spec.replicas"),
                    r,
                    "must be greater than or equal to 0",
                ));
            }
        }
        "Job" => {
            validate_pod_spec(new.pointer("/spec/template/spec"), &template_spec, errs);
            if let Some(p) = new
                .pointer("/spec/template/spec/restartPolicy")
                .and_then(Value::as_str)
                && p != "Never"
                && p != "OnFailure"
            {
                errs.push(field::not_supported(
                    &template_spec.child("restartPolicy"),
                    p,
                    &["OnFailure", "Never"],
                ));
            }
        }
        _ => {}
    }
}
