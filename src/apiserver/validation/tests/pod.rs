//! Vectors for `pod` validation.

use serde_json::json;

use super::{bad, ok, run};

#[test]
fn pod_containers() {
    run(
        "",
        "v1",
        "pods",
        vec![
            ok(
                "minimal",
                json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
            ),
            bad(
                "no containers",
                json!({"metadata": {"name": "p"}, "spec": {"containers": []}}),
                vec![("spec.containers", "Required value")],
            ),
            bad(
                "duplicate container names",
                json!({"metadata": {"name": "p"}, "spec": {"containers": [
                    {"name": "c", "image": "a"}, {"name": "c", "image": "b"}]}}),
                vec![("spec.containers[1].name", "Duplicate value: \"c\"")],
            ),
        ],
    );
}
