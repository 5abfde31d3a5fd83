//! Vectors for `meta` validation (kube's `TestValidateObjectMeta*`, `TestValidateLabels`,
//! `TestValidateAnnotations`, `TestValidateFinalizers`, `TestValidateOwnerReferences`).

use serde_json::{Value, json};

use super::{bad, ok, run, update};

fn cm(meta: Value) -> Value {
    let mut m = json!({"name": "cm", "namespace": "default"});
    if let (Some(m), Some(extra)) = (m.as_object_mut(), meta.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    json!({"metadata": m, "data": {"k": "v"}})
}

#[test]
fn labels_and_annotations() {
    let long = "a".repeat(64);
    let label_too_long = format!("{}/{long}", "example.com");
    let n = run(
        "",
        "v1",
        "configmaps",
        vec![
            ok(
                "valid labels",
                cm(
                    json!({"labels": {"app": "web", "example.com/tier": "front_end.1", "empty": ""}}),
                ),
            ),
            bad(
                "label key with a space",
                cm(json!({"labels": {"bad key": "x"}})),
                vec![(
                    "metadata.labels",
                    "Invalid value: \"bad key\": name part must consist",
                )],
            ),
            bad(
                "label key with two slashes",
                cm(json!({"labels": {"a/b/c": "x"}})),
                vec![(
                    "metadata.labels",
                    "Invalid value: \"a/b/c\": a qualified name must consist",
                )],
            ),
            bad(
                "label key with an uppercase prefix",
                cm(json!({"labels": {"Example.com/x": "y"}})),
                vec![(
                    "metadata.labels",
                    "Invalid value: \"Example.com/x\": prefix part a lowercase RFC 1123 subdomain",
                )],
            ),
            bad(
                "label key with an empty prefix",
                cm(json!({"labels": {"/a": "y"}})),
                vec![(
                    "metadata.labels",
                    "Invalid value: \"/a\": prefix part must be non-empty",
                )],
            ),
            bad(
                "label key name part too long",
                cm(json!({"labels": {label_too_long.clone(): "y"}})),
                vec![("metadata.labels", "Invalid value: \"example.com/aaaa")],
            ),
            bad(
                "label value starting with a dash",
                cm(json!({"labels": {"a": "-bad"}})),
                vec![(
                    "metadata.labels",
                    "Invalid value: \"-bad\": a valid label must be an empty string",
                )],
            ),
            bad(
                "label value too long",
                cm(json!({"labels": {"a": long.clone()}})),
                vec![("metadata.labels", "Invalid value: \"aaaa")],
            ),
            bad(
                "label value too long and malformed",
                cm(json!({"labels": {"a": format!("{long} ")}})),
                vec![
                    ("metadata.labels", "Invalid value: \"aaaa"),
                    ("metadata.labels", "Invalid value: \"aaaa"),
                ],
            ),
            ok(
                "annotation keys are checked lowercased",
                cm(
                    json!({"annotations": {"Example.COM/Key": "x", "kubectl.kubernetes.io/last-applied-configuration": "{}"}}),
                ),
            ),
            bad(
                "annotation key with a space",
                cm(json!({"annotations": {"a b": "x"}})),
                vec![(
                    "metadata.annotations",
                    "Invalid value: \"a b\": name part must consist",
                )],
            ),
            bad(
                "annotation key with an empty name",
                cm(json!({"annotations": {"example.com/": "x"}})),
                vec![(
                    "metadata.annotations",
                    "Invalid value: \"example.com/\": name part must be non-empty",
                )],
            ),
            bad(
                "annotations over 256 KiB",
                cm(json!({"annotations": {"a": "x".repeat(256 * 1024)}})),
                vec![(
                    "metadata.annotations",
                    "Too long: may not be more than 262144 bytes",
                )],
            ),
            ok(
                "annotations at 256 KiB",
                cm(json!({"annotations": {"a": "x".repeat(256 * 1024 - 1)}})),
            ),
        ],
    );
    assert_eq!(n, 14);
}

#[test]
fn finalizers_owner_references_and_generate_name() {
    let reference = |controller: bool, name: &str| json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": format!("uid-{name}"), "controller": controller});
    run(
        "",
        "v1",
        "configmaps",
        vec![
            ok(
                "qualified and standard finalizers",
                cm(json!({"finalizers": ["example.com/cleanup", "kubernetes", "orphan"]})),
            ),
            bad(
                "unqualified custom finalizer",
                cm(json!({"finalizers": ["cleanup"]})),
                vec![(
                    "metadata.finalizers[0]",
                    "Invalid value: \"cleanup\": name is neither a standard finalizer name nor is it fully qualified",
                )],
            ),
            bad(
                "finalizer with an empty name part",
                cm(json!({"finalizers": ["example.com/"]})),
                vec![(
                    "metadata.finalizers",
                    "Invalid value: \"example.com/\": name part must be non-empty",
                )],
            ),
            bad(
                "malformed unqualified finalizer",
                cm(json!({"finalizers": ["a b"]})),
                vec![
                    (
                        "metadata.finalizers",
                        "Invalid value: \"a b\": name part must consist",
                    ),
                    (
                        "metadata.finalizers[0]",
                        "Invalid value: \"a b\": name is neither a standard finalizer",
                    ),
                ],
            ),
            bad(
                "orphan and foregroundDeletion",
                cm(json!({"finalizers": ["orphan", "foregroundDeletion"]})),
                vec![(
                    "metadata.finalizers",
                    "Invalid value: []string{\"orphan\", \"foregroundDeletion\"}: finalizer orphan and foregroundDeletion cannot be both set",
                )],
            ),
            ok(
                "one controller reference",
                cm(json!({"ownerReferences": [reference(true, "a"), reference(false, "b")]})),
            ),
            bad(
                "empty owner reference",
                cm(json!({"ownerReferences": [{}]})),
                vec![
                    (
                        "metadata.ownerReferences.apiVersion",
                        "Invalid value: \"\": version must not be empty",
                    ),
                    (
                        "metadata.ownerReferences.kind",
                        "Invalid value: \"\": must not be empty",
                    ),
                    (
                        "metadata.ownerReferences.name",
                        "Invalid value: \"\": must not be empty",
                    ),
                    (
                        "metadata.ownerReferences.uid",
                        "Invalid value: \"\": must not be empty",
                    ),
                ],
            ),
            bad(
                "owner apiVersion without a version",
                cm(
                    json!({"ownerReferences": [{"apiVersion": "apps/", "kind": "ReplicaSet", "name": "a", "uid": "1"}]}),
                ),
                vec![(
                    "metadata.ownerReferences.apiVersion",
                    "Invalid value: \"apps/\": version must not be empty",
                )],
            ),
            bad(
                "two controllers",
                cm(json!({"ownerReferences": [reference(true, "a"), reference(true, "b")]})),
                vec![("metadata.ownerReferences", "Invalid value: ")],
            ),
            bad(
                "an Event as owner",
                cm(
                    json!({"ownerReferences": [{"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "1"}]}),
                ),
                vec![("metadata.ownerReferences", "Invalid value: ")],
            ),
            ok("valid generateName", cm(json!({"generateName": "web-"}))),
            ok(
                "generateName ending in a dot (k3rs's event recorder)",
                cm(json!({"generateName": "web-7d9f."})),
            ),
            bad(
                "invalid generateName",
                cm(json!({"generateName": "Web_"})),
                vec![(
                    "metadata.generateName",
                    "Invalid value: \"Web_\": a lowercase RFC 1123 subdomain",
                )],
            ),
        ],
    );
}

#[test]
fn names_of_other_kinds() {
    run(
        "",
        "v1",
        "services",
        vec![bad(
            "service generateName must be a DNS-1035 prefix",
            json!({"metadata": {"name": "s", "namespace": "default", "generateName": "1web-"},
                   "spec": {"ports": [{"port": 80}]}}),
            vec![(
                "metadata.generateName",
                "Invalid value: \"1web-\": a DNS-1035 label",
            )],
        )],
    );
    run(
        "",
        "v1",
        "namespaces",
        vec![bad(
            "namespace generateName must be a DNS label prefix",
            json!({"metadata": {"name": "ns", "generateName": "a.b-"}}),
            vec![(
                "metadata.generateName",
                "Invalid value: \"a.b-\": a lowercase RFC 1123 label",
            )],
        )],
    );
    run(
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        vec![bad(
            "role generateName is a path segment",
            json!({"metadata": {"name": "r", "namespace": "default", "generateName": "a/b"}}),
            vec![(
                "metadata.generateName",
                "Invalid value: \"a/b\": may not contain '/'",
            )],
        )],
    );
    run(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        vec![ok(
            "a CRD's own finalizer has no slash",
            json!({"metadata": {"name": "foos.example.com", "finalizers": ["customresourcecleanup.apiextensions.k8s.io"]}}),
        )],
    );
}

#[test]
fn updates() {
    let stored = json!({"metadata": {"name": "cm", "namespace": "default", "uid": "1",
        "creationTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["example.com/a"]}});
    let deleting = json!({"metadata": {"name": "cm", "namespace": "default", "uid": "1",
        "creationTimestamp": "2024-01-01T00:00:00Z", "deletionTimestamp": "2024-01-02T00:00:00Z",
        "finalizers": ["example.com/a"]}});
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = stored.clone();
        f(&mut v);
        v
    };
    run(
        "",
        "v1",
        "configmaps",
        vec![
            update(
                "labels may change",
                stored.clone(),
                with(&|v| v["metadata"]["labels"] = json!({"a": "b"})),
                vec![],
            ),
            update(
                "no finalizer may be added while deleting",
                deleting.clone(),
                {
                    let mut v = deleting.clone();
                    v["metadata"]["finalizers"] = json!(["example.com/a", "example.com/b"]);
                    v
                },
                vec![(
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/b\"}",
                )],
            ),
            update(
                "finalizers may be removed while deleting",
                deleting.clone(),
                {
                    let mut v = deleting.clone();
                    v["metadata"]["finalizers"] = json!([]);
                    v
                },
                vec![],
            ),
            update(
                "finalizers may be added before deletion",
                stored.clone(),
                with(&|v| v["metadata"]["finalizers"] = json!(["example.com/a", "example.com/b"])),
                vec![],
            ),
            update(
                "uid is immutable",
                stored.clone(),
                with(&|v| v["metadata"]["uid"] = json!("2")),
                vec![("metadata.uid", "Invalid value: \"2\": field is immutable")],
            ),
            update(
                "name is immutable",
                stored.clone(),
                with(&|v| v["metadata"]["name"] = json!("other")),
                vec![(
                    "metadata.name",
                    "Invalid value: \"other\": field is immutable",
                )],
            ),
            update(
                "namespace is immutable",
                stored.clone(),
                with(&|v| v["metadata"]["namespace"] = json!("other")),
                vec![(
                    "metadata.namespace",
                    "Invalid value: \"other\": field is immutable",
                )],
            ),
            update(
                "creationTimestamp is immutable",
                stored.clone(),
                with(&|v| v["metadata"]["creationTimestamp"] = json!("2025-01-01T00:00:00Z")),
                vec![(
                    "metadata.creationTimestamp",
                    "Invalid value: \"2025-01-01T00:00:00Z\": field is immutable",
                )],
            ),
            update(
                "labels are validated on update",
                stored.clone(),
                with(&|v| v["metadata"]["labels"] = json!({"a": "-b"})),
                vec![("metadata.labels", "Invalid value: \"-b\"")],
            ),
        ],
    );
}
