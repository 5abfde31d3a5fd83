//! Discovery documents: legacy (`/api`, `/api/v1`, `/apis`, `/apis/<g>`,
//! `/apis/<g>/<v>`) and aggregated (`apidiscovery.k8s.io` v2 and v2beta1, chosen by
//! the Accept header), built from the registry.

use serde_json::{Value, json};

use crate::apiserver::storage::registry::{Registry, ResourceInfo};

/// Verbs of a subresource, as kube-apiserver advertises them.
fn subresource_verbs(sub: &str) -> &'static [&'static str] {
    match sub {
        "status" | "scale" | "ephemeralcontainers" | "approval" => &["get", "patch", "update"],
        "binding" | "eviction" | "token" => &["create"],
        "log" => &["get"],
        "exec" | "attach" | "portforward" => &["create", "get"],
        "proxy" => &["create", "delete", "get", "patch", "update"],
        "finalize" => &["update"],
        _ => &["get"],
    }
}

/// The kind a subresource answers with: (group, version, kind).
fn subresource_kind(info: &ResourceInfo, sub: &str) -> (String, String, String) {
    match sub {
        "scale" => ("autoscaling".into(), "v1".into(), "Scale".into()),
        "binding" => (String::new(), "v1".into(), "Binding".into()),
        "eviction" => ("policy".into(), "v1".into(), "Eviction".into()),
        "token" => (
            "authentication.k8s.io".into(),
            "v1".into(),
            "TokenRequest".into(),
        ),
        "log" | "exec" | "attach" | "portforward" | "proxy" => (
            String::new(),
            "v1".into(),
            match sub {
                "exec" => "PodExecOptions",
                "attach" => "PodAttachOptions",
                "portforward" => "PodPortForwardOptions",
                "proxy" => {
                    if info.plural == "nodes" {
                        "NodeProxyOptions"
                    } else {
                        "ServiceProxyOptions"
                    }
                }
                _ => "Pod",
            }
            .into(),
        ),
        _ => (info.group.clone(), info.version.clone(), info.kind.clone()),
    }
}

pub fn legacy_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_entry(group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": versions, "preferredVersion": versions[0].clone()})
}

pub fn group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .iter()
        .map(|(g, vs)| group_entry(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(registry: &Registry, name: &str) -> Option<Value> {
    let groups = registry.groups();
    let (g, vs) = groups.iter().find(|(g, _)| g == name)?;
    let mut entry = group_entry(g, vs);
    entry["kind"] = json!("APIGroup");
    entry["apiVersion"] = json!("v1");
    Some(entry)
}

/// A short stable hash kube clients use to detect storage changes.
fn storage_version_hash(info: &ResourceInfo) -> String {
    use sha2::Digest;
    let digest =
        sha2::Sha256::digest(format!("{}/{}/{}", info.group, info.version, info.kind).as_bytes());
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &digest[..8])
}

pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let infos = registry.in_group_version(group, version);
    if infos.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for info in &infos {
        let mut r = json!({
            "name": info.plural,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": info.verbs,
            "storageVersionHash": storage_version_hash(info),
        });
        if !info.short_names.is_empty() {
            r["shortNames"] = json!(info.short_names);
        }
        if !info.categories.is_empty() {
            r["categories"] = json!(info.categories);
        }
        resources.push(r);
        for sub in &info.subresources {
            let (g, v, k) = subresource_kind(info, sub);
            let mut s = json!({
                "name": format!("{}/{sub}", info.plural),
                "singularName": "",
                "namespaced": info.namespaced,
                "kind": k,
                "verbs": subresource_verbs(sub),
            });
            if g != info.group || v != info.version {
                s["group"] = json!(g);
                s["version"] = json!(v);
            }
            resources.push(s);
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

/// Which aggregated-discovery version the client asked for, if any.
pub fn aggregated_version(accept: Option<&str>) -> Option<&'static str> {
    let accept = accept?;
    for part in accept.split(',') {
        let params: Vec<&str> = part.split(';').map(str::trim).collect();
        let is_discovery = params.contains(&"g=apidiscovery.k8s.io")
            && params.contains(&"as=APIGroupDiscoveryList");
        if is_discovery {
            if params.contains(&"v=v2") {
                return Some("v2");
            }
            if params.contains(&"v=v2beta1") {
                return Some("v2beta1");
            }
        }
    }
    None
}

/// The aggregated discovery document for `/api` (legacy = true) or `/apis`.
pub fn aggregated(registry: &Registry, legacy: bool, version: &str) -> Value {
    let groups: Vec<(String, Vec<String>)> = if legacy {
        vec![(String::new(), vec!["v1".to_string()])]
    } else {
        registry.groups()
    };
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = registry
                        .in_group_version(group, v)
                        .iter()
                        .map(|info| {
                            let subresources: Vec<Value> = info
                                .subresources
                                .iter()
                                .map(|sub| {
                                    let (g, sv, k) = subresource_kind(info, sub);
                                    json!({"subresource": sub, "responseKind": {"group": g, "version": sv, "kind": k}, "verbs": subresource_verbs(sub)})
                                })
                                .collect();
                            let mut r = json!({
                                "resource": info.plural,
                                "responseKind": {"group": info.group, "version": info.version, "kind": info.kind},
                                "scope": if info.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": info.singular,
                                "verbs": info.verbs,
                            });
                            if !info.short_names.is_empty() {
                                r["shortNames"] = json!(info.short_names);
                            }
                            if !info.categories.is_empty() {
                                r["categories"] = json!(info.categories);
                            }
                            if !subresources.is_empty() {
                                r["subresources"] = json!(subresources);
                            }
                            r
                        })
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            let mut metadata = json!({"creationTimestamp": null});
            if !group.is_empty() {
                metadata["name"] = json!(group);
            }
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents() {
        let r = Registry::new();
        let v1 = resource_list(&r, "", "v1").unwrap();
        assert!(
            v1["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["name"] == "pods/status")
        );
        let apps = group(&r, "apps").unwrap();
        assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");
        let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_version(Some(accept)), Some("v2"));
        let agg = aggregated(&r, false, "v2");
        assert!(
            agg["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["metadata"]["name"] == "apps")
        );
    }
}
