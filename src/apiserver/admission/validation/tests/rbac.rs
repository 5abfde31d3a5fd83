//! Vectors for `rbac` validation (kube's `TestValidateRole*`, `TestValidateClusterRole*`,
//! `TestValidateRoleBinding*`, `TestValidateClusterRoleBinding*`).

use serde_json::{Value, json};

use super::{bad, ok, run, update};

fn role(rules: Value) -> Value {
    json!({"metadata": {"name": "r", "namespace": "default"}, "rules": rules})
}

fn cluster_role(rules: Value) -> Value {
    json!({"metadata": {"name": "r"}, "rules": rules})
}

const GROUP: &str = "rbac.authorization.k8s.io";

#[test]
fn roles() {
    run(
        GROUP,
        "v1",
        "roles",
        vec![
            ok(
                "core resources",
                role(json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}])),
            ),
            ok(
                "one named resource",
                role(
                    json!([{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get"]}]),
                ),
            ),
            bad(
                "no verbs",
                role(json!([{"apiGroups": [""], "resources": ["pods"]}])),
                vec![(
                    "rules[0].verbs",
                    "Required value: verbs must contain at least one value",
                )],
            ),
            bad(
                "no api groups",
                role(json!([{"resources": ["pods"], "verbs": ["get"]}])),
                vec![(
                    "rules[0].apiGroups",
                    "Required value: resource rules must supply at least one api group",
                )],
            ),
            bad(
                "no resources",
                role(json!([{"apiGroups": [""], "verbs": ["get"]}])),
                vec![(
                    "rules[0].resources",
                    "Required value: resource rules must supply at least one resource",
                )],
            ),
            bad(
                "resource names over two resources",
                role(
                    json!([{"apiGroups": [""], "resources": ["pods", "secrets"], "resourceNames": ["a"], "verbs": ["get"]}]),
                ),
                vec![(
                    "rules[0].resourceNames",
                    "Required value: resource names cannot apply to multiple resources",
                )],
            ),
            bad(
                "non-resource URLs in a Role",
                role(json!([{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}])),
                vec![(
                    "rules[0].nonResourceURLs",
                    "Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs",
                )],
            ),
        ],
    );
    run(
        GROUP,
        "v1",
        "clusterroles",
        vec![
            ok(
                "non-resource URLs",
                cluster_role(
                    json!([{"nonResourceURLs": ["/healthz", "/version"], "verbs": ["get"]}]),
                ),
            ),
            ok(
                "aggregated",
                json!({"metadata": {"name": "r"}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.example.com/aggregate-to-r": "true"}}]}}),
            ),
            bad(
                "URLs and resources together",
                cluster_role(
                    json!([{"nonResourceURLs": ["/healthz"], "resources": ["pods"], "verbs": ["get"]}]),
                ),
                vec![(
                    "rules[0].nonResourceURLs",
                    "Invalid value: []string{\"/healthz\"}: rules cannot apply to both regular resources and non-resource URLs",
                )],
            ),
            bad(
                "aggregation without selectors",
                json!({"metadata": {"name": "r"}, "aggregationRule": {"clusterRoleSelectors": []}}),
                vec![(
                    "aggregationRule.clusterRoleSelectors",
                    "Required value: at least one clusterRoleSelector required if aggregationRule is non-nil",
                )],
            ),
            bad(
                "aggregation with a bad selector",
                json!({"metadata": {"name": "r"}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a b": "c"}}]}}),
                vec![(
                    "aggregationRule.clusterRoleSelectors[0].matchLabels",
                    "Invalid value: \"a b\": name part must consist",
                )],
            ),
        ],
    );
}

fn binding(role_ref: Value, subjects: Value) -> Value {
    json!({"metadata": {"name": "b", "namespace": "default"}, "roleRef": role_ref, "subjects": subjects})
}

fn cluster_binding(role_ref: Value, subjects: Value) -> Value {
    json!({"metadata": {"name": "b"}, "roleRef": role_ref, "subjects": subjects})
}

#[test]
fn bindings() {
    let to_role = json!({"apiGroup": GROUP, "kind": "Role", "name": "r"});
    let to_cluster_role = json!({"apiGroup": GROUP, "kind": "ClusterRole", "name": "view"});
    let user = json!([{"kind": "User", "name": "jane", "apiGroup": GROUP}]);
    run(
        GROUP,
        "v1",
        "rolebindings",
        vec![
            ok(
                "every subject kind",
                binding(
                    to_role.clone(),
                    json!([{"kind": "User", "name": "jane"}, {"kind": "Group", "name": "devs", "apiGroup": GROUP},
                                                 {"kind": "ServiceAccount", "name": "default", "namespace": "default"}]),
                ),
            ),
            ok(
                "a ClusterRole",
                binding(to_cluster_role.clone(), user.clone()),
            ),
            bad(
                "unknown role kind",
                binding(
                    json!({"apiGroup": GROUP, "kind": "Policy", "name": "r"}),
                    user.clone(),
                ),
                vec![(
                    "roleRef.kind",
                    "Unsupported value: \"Policy\": supported values: \"Role\", \"ClusterRole\"",
                )],
            ),
            bad(
                "other api group",
                binding(
                    json!({"apiGroup": "example.com", "kind": "Role", "name": "r"}),
                    user.clone(),
                ),
                vec![(
                    "roleRef.apiGroup",
                    "Unsupported value: \"example.com\": supported values: \"rbac.authorization.k8s.io\"",
                )],
            ),
            bad(
                "no role name",
                binding(json!({"apiGroup": GROUP, "kind": "Role"}), user.clone()),
                vec![("roleRef.name", "Required value")],
            ),
            bad(
                "role name with a slash",
                binding(
                    json!({"apiGroup": GROUP, "kind": "Role", "name": "a/b"}),
                    user.clone(),
                ),
                vec![(
                    "roleRef.name",
                    "Invalid value: \"a/b\": may not contain '/'",
                )],
            ),
            bad(
                "unknown subject kind",
                binding(to_role.clone(), json!([{"kind": "Robot", "name": "r2"}])),
                vec![(
                    "subjects[0].kind",
                    "Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
                )],
            ),
            bad(
                "user without a name",
                binding(to_role.clone(), json!([{"kind": "User", "name": ""}])),
                vec![
                    ("subjects[0].name", "Required value"),
                    (
                        "subjects[0].name",
                        "Invalid value: \"\": user name cannot be empty",
                    ),
                ],
            ),
            bad(
                "group in another api group",
                binding(
                    to_role.clone(),
                    json!([{"kind": "Group", "name": "devs", "apiGroup": "example.com"}]),
                ),
                vec![(
                    "subjects[0].apiGroup",
                    "Unsupported value: \"example.com\": supported values: \"rbac.authorization.k8s.io\"",
                )],
            ),
            bad(
                "service account with an api group and a bad name",
                binding(
                    to_role.clone(),
                    json!([{"kind": "ServiceAccount", "name": "Bad_SA", "apiGroup": GROUP}]),
                ),
                vec![
                    (
                        "subjects[0].name",
                        "Invalid value: \"Bad_SA\": a lowercase RFC 1123 subdomain",
                    ),
                    (
                        "subjects[0].apiGroup",
                        "Unsupported value: \"rbac.authorization.k8s.io\": supported values: \"\"",
                    ),
                ],
            ),
            update(
                "roleRef may not change",
                binding(to_role.clone(), user.clone()),
                binding(
                    json!({"apiGroup": GROUP, "kind": "Role", "name": "other"}),
                    user.clone(),
                ),
                vec![(
                    "roleRef",
                    "Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"other\"}: cannot change roleRef",
                )],
            ),
            update(
                "subjects may change",
                binding(to_role.clone(), user.clone()),
                binding(to_role.clone(), json!([{"kind": "Group", "name": "devs"}])),
                vec![],
            ),
        ],
    );
    run(
        GROUP,
        "v1",
        "clusterrolebindings",
        vec![
            ok(
                "cluster-admin",
                cluster_binding(
                    json!({"apiGroup": GROUP, "kind": "ClusterRole", "name": "cluster-admin"}),
                    json!([{"kind": "Group", "name": "system:masters", "apiGroup": GROUP}]),
                ),
            ),
            bad(
                "a Role",
                cluster_binding(to_role.clone(), user.clone()),
                vec![(
                    "roleRef.kind",
                    "Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                )],
            ),
            bad(
                "service account without a namespace",
                cluster_binding(
                    to_cluster_role.clone(),
                    json!([{"kind": "ServiceAccount", "name": "default"}]),
                ),
                vec![("subjects[0].namespace", "Required value")],
            ),
        ],
    );
}
