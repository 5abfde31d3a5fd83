//! A container's environment as the kubelet builds it: Kubernetes service variables
//! (`KUBERNETES_SERVICE_HOST`, `<SVC>_SERVICE_HOST`, docker-link style `<SVC>_PORT_…`), then
//! `envFrom`, then `env` (literal values with `$(VAR)` expansion, and `valueFrom` config map,
//! secret, field and resource references). Also expands `$(VAR)` in command and args.
//!
//! Reads ConfigMaps, Secrets and Services through the API; writes nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Service};
use kube::api::{Api, ListParams};

use super::spec;
use crate::kubelet::args::{bytes, cpu_millis};

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("configmap \"{0}\" not found")]
    ConfigMapNotFound(String),
    #[error("secret \"{0}\" not found")]
    SecretNotFound(String),
    #[error("couldn't find key {key} in ConfigMap {namespace}/{name}")]
    ConfigMapKey {
        key: String,
        namespace: String,
        name: String,
    },
    #[error("couldn't find key {key} in Secret {namespace}/{name}")]
    SecretKey {
        key: String,
        namespace: String,
        name: String,
    },
    #[error("unsupported fieldPath: {0}")]
    FieldPath(String),
    #[error("unsupported resource: {0}")]
    Resource(String),
    #[error("reading {what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
}

/// Values the environment can refer to that the Pod object does not hold yet.
pub struct EnvContext<'a> {
    pub pod: &'a Pod,
    pub pod_ips: &'a [String],
    pub host_ips: &'a [String],
    /// Node allocatable, used for `resourceFieldRef` when a container sets no limit.
    pub node_cpu_millis: u64,
    pub node_memory_bytes: u64,
    pub node_storage_bytes: u64,
}

/// What a `configMapKeyRef`/`secretKeyRef` did not find.
enum Missing {
    Object,
    Key,
}

/// The value of `key` in a ConfigMap's or Secret's entries (`None` when the object is
/// missing); an optional reference to something missing is no variable at all.
fn key_value(
    entries: Option<BTreeMap<String, Vec<u8>>>,
    key: &str,
    optional: bool,
) -> Result<Option<String>, Missing> {
    match entries.map(|mut e| e.remove(key)) {
        Some(Some(v)) => Ok(Some(String::from_utf8_lossy(&v).into_owned())),
        _ if optional => Ok(None),
        Some(None) => Err(Missing::Key),
        None => Err(Missing::Object),
    }
}

/// Fetches ConfigMaps and Secrets once per container start.
pub struct Sources {
    client: kube::Client,
    namespace: String,
    config_maps: BTreeMap<String, Option<ConfigMap>>,
    secrets: BTreeMap<String, Option<Secret>>,
}

impl Sources {
    pub fn new(client: kube::Client, namespace: &str) -> Sources {
        Sources {
            client,
            namespace: namespace.to_string(),
            config_maps: BTreeMap::new(),
            secrets: BTreeMap::new(),
        }
    }

    pub async fn config_map(&mut self, name: &str) -> Result<Option<&ConfigMap>, EnvError> {
        if !self.config_maps.contains_key(name) {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
            let found = api.get_opt(name).await.map_err(|source| EnvError::Api {
                what: format!("configmap {}/{name}", self.namespace),
                source,
            })?;
            self.config_maps.insert(name.to_string(), found);
        }
        Ok(self.config_maps.get(name).and_then(Option::as_ref))
    }

    pub async fn secret(&mut self, name: &str) -> Result<Option<&Secret>, EnvError> {
        if !self.secrets.contains_key(name) {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
            let found = api.get_opt(name).await.map_err(|source| EnvError::Api {
                what: format!("secret {}/{name}", self.namespace),
                source,
            })?;
            self.secrets.insert(name.to_string(), found);
        }
        Ok(self.secrets.get(name).and_then(Option::as_ref))
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

/// A ConfigMap's entries as text (binaryData decoded lossily, as env vars are strings).
pub fn config_map_entries(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    out.extend(
        cm.binary_data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone())),
    );
    out
}

pub fn secret_entries(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    out.extend(
        secret
            .string_data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone().into_bytes())),
    );
    out
}

/// Lists the Services whose variables a container gets: its namespace's (when
/// `enableServiceLinks`) and always the master `kubernetes` Service in `default`.
pub async fn services(client: &kube::Client, pod: &Pod) -> Vec<Service> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let mut out = Vec::new();
    if links {
        let api: Api<Service> = Api::namespaced(client.clone(), namespace);
        match api.list(&ListParams::default()).await {
            Ok(list) => out.extend(list.items),
            Err(e) => tracing::warn!(error = %e, namespace, "listing services for env"),
        }
    }
    if namespace != "default" || !links {
        let api: Api<Service> = Api::namespaced(client.clone(), "default");
        if let Ok(Some(svc)) = api.get_opt("kubernetes").await {
            out.push(svc);
        }
    }
    out
}

/// The docker-link style variables for a set of Services.
pub fn service_env(services: &[Service]) -> Vec<(String, String)> {
    let mut sorted: Vec<&Service> = services.iter().collect();
    sorted.sort_by_key(|s| s.metadata.name.clone());
    let mut out = Vec::new();
    for svc in sorted {
        let Some(spec) = svc.spec.as_ref() else {
            continue;
        };
        let Some(ip) = spec
            .cluster_ip
            .as_deref()
            .filter(|ip| !ip.is_empty() && *ip != "None")
        else {
            continue;
        };
        let name = svc
            .metadata
            .name
            .as_deref()
            .unwrap_or("")
            .to_uppercase()
            .replace('-', "_");
        let ports = spec.ports.as_deref().unwrap_or(&[]);
        let Some(first) = ports.first() else { continue };
        out.push((format!("{name}_SERVICE_HOST"), ip.to_string()));
        out.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
        for p in ports {
            if let Some(pname) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((
                    format!(
                        "{name}_SERVICE_PORT_{}",
                        pname.to_uppercase().replace('-', "_")
                    ),
                    p.port.to_string(),
                ));
            }
        }
        let proto = |p: &k8s_openapi::api::core::v1::ServicePort| {
            p.protocol.clone().unwrap_or_else(|| "TCP".into())
        };
        let url_ip = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.to_string()
        };
        out.push((
            format!("{name}_PORT"),
            format!("{}://{url_ip}:{}", proto(first).to_lowercase(), first.port),
        ));
        for p in ports {
            let protocol = proto(p);
            let prefix = format!("{name}_PORT_{}_{}", p.port, protocol.to_uppercase());
            out.push((
                prefix.clone(),
                format!("{}://{url_ip}:{}", protocol.to_lowercase(), p.port),
            ));
            out.push((format!("{prefix}_PROTO"), protocol.to_lowercase()));
            out.push((format!("{prefix}_PORT"), p.port.to_string()));
            out.push((format!("{prefix}_ADDR"), ip.to_string()));
        }
    }
    out
}

/// Expands `$(VAR)` from `vars`; `$$` escapes `$`; unknown references stay as written.
pub fn expand(input: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let bytes = input.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + end];
                        match vars.get(name) {
                            Some(v) => out.push_str(v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = input[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// `metadata.labels['app']` and the other downward API field paths.
pub fn field_value(ctx: &EnvContext<'_>, path: &str) -> Result<String, EnvError> {
    let meta = &ctx.pod.metadata;
    let spec = ctx.pod.spec.as_ref();
    let subscript = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("['").or_else(|| rest.strip_prefix("[\"")))
            .and_then(|rest| rest.strip_suffix("']").or_else(|| rest.strip_suffix("\"]")))
    };
    if let Some(key) = subscript("metadata.labels") {
        return Ok(meta
            .labels
            .as_ref()
            .and_then(|l| l.get(key))
            .cloned()
            .unwrap_or_default());
    }
    if let Some(key) = subscript("metadata.annotations") {
        return Ok(meta
            .annotations
            .as_ref()
            .and_then(|l| l.get(key))
            .cloned()
            .unwrap_or_default());
    }
    let map_text = |m: Option<&BTreeMap<String, String>>| {
        m.into_iter()
            .flatten()
            .map(|(k, v)| {
                format!(
                    "{k}=\"{}\"",
                    v.replace('\\', "\\\\")
                        .replace('"', "\\\"")
                        .replace('\n', "\\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => map_text(meta.labels.as_ref()),
        "metadata.annotations" => map_text(meta.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.hostIP" => ctx.host_ips.first().cloned().unwrap_or_default(),
        "status.hostIPs" => ctx.host_ips.join(","),
        "status.podIP" => ctx.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => ctx.pod_ips.join(","),
        other => return Err(EnvError::FieldPath(other.to_string())),
    })
}

/// `limits.memory` and friends, divided by `divisor` and rounded up as the kubelet does.
pub fn resource_value(
    ctx: &EnvContext<'_>,
    container: &Container,
    resource: &str,
    divisor: Option<&str>,
) -> Result<String, EnvError> {
    let r = container.resources.as_ref();
    let (value, is_cpu) = match resource {
        "limits.cpu" => (
            spec::cpu(r, true).unwrap_or(ctx.node_cpu_millis) as f64 / 1000.0,
            true,
        ),
        "requests.cpu" => (spec::cpu(r, false).unwrap_or(0) as f64 / 1000.0, true),
        "limits.memory" => (
            spec::amount(r, true, "memory").unwrap_or(ctx.node_memory_bytes) as f64,
            false,
        ),
        "requests.memory" => (spec::amount(r, false, "memory").unwrap_or(0) as f64, false),
        "limits.ephemeral-storage" => (
            spec::amount(r, true, "ephemeral-storage").unwrap_or(ctx.node_storage_bytes) as f64,
            false,
        ),
        "requests.ephemeral-storage" => (
            spec::amount(r, false, "ephemeral-storage").unwrap_or(0) as f64,
            false,
        ),
        other => return Err(EnvError::Resource(other.to_string())),
    };
    let divisor = match divisor.filter(|d| !d.is_empty() && *d != "0") {
        None => 1.0,
        Some(d) if is_cpu => cpu_millis(d).map(|m| m as f64 / 1000.0).unwrap_or(1.0),
        Some(d) => bytes(d).map(|b| b as f64).unwrap_or(1.0),
    };
    Ok(((value / divisor).ceil() as i64).to_string())
}

/// The full environment of `container`, in the kubelet's order.
pub async fn build(
    ctx: &EnvContext<'_>,
    container: &Container,
    services: &[Service],
    sources: &mut Sources,
) -> Result<Vec<(String, String)>, EnvError> {
    let mut order: Vec<String> = Vec::new();
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let set =
        |order: &mut Vec<String>, vars: &mut BTreeMap<String, String>, k: String, v: String| {
            if vars.insert(k.clone(), v).is_none() {
                order.push(k);
            }
        };
    for (k, v) in service_env(services) {
        set(&mut order, &mut vars, k, v);
    }
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(cm_ref) = &from.config_map_ref {
            let optional = cm_ref.optional.unwrap_or(false);
            match sources.config_map(&cm_ref.name).await? {
                Some(cm) => {
                    for (k, v) in config_map_entries(cm) {
                        set(
                            &mut order,
                            &mut vars,
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v).into_owned(),
                        );
                    }
                }
                None if optional => {}
                None => return Err(EnvError::ConfigMapNotFound(cm_ref.name.clone())),
            }
        }
        if let Some(s_ref) = &from.secret_ref {
            let optional = s_ref.optional.unwrap_or(false);
            match sources.secret(&s_ref.name).await? {
                Some(s) => {
                    for (k, v) in secret_entries(s) {
                        set(
                            &mut order,
                            &mut vars,
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v).into_owned(),
                        );
                    }
                }
                None if optional => {}
                None => return Err(EnvError::SecretNotFound(s_ref.name.clone())),
            }
        }
    }
    for env in container.env.iter().flatten() {
        let value = match &env.value_from {
            None => Some(expand(env.value.as_deref().unwrap_or(""), &vars)),
            Some(from) => {
                if let Some(sel) = &from.config_map_key_ref {
                    let namespace = sources.namespace().to_string();
                    let entries = sources.config_map(&sel.name).await?.map(config_map_entries);
                    key_value(entries, &sel.key, sel.optional.unwrap_or(false)).map_err(
                        |missing| match missing {
                            Missing::Object => EnvError::ConfigMapNotFound(sel.name.clone()),
                            Missing::Key => EnvError::ConfigMapKey {
                                key: sel.key.clone(),
                                namespace,
                                name: sel.name.clone(),
                            },
                        },
                    )?
                } else if let Some(sel) = &from.secret_key_ref {
                    let namespace = sources.namespace().to_string();
                    let entries = sources.secret(&sel.name).await?.map(secret_entries);
                    key_value(entries, &sel.key, sel.optional.unwrap_or(false)).map_err(
                        |missing| match missing {
                            Missing::Object => EnvError::SecretNotFound(sel.name.clone()),
                            Missing::Key => EnvError::SecretKey {
                                key: sel.key.clone(),
                                namespace,
                                name: sel.name.clone(),
                            },
                        },
                    )?
                } else if let Some(f) = &from.field_ref {
                    Some(field_value(ctx, &f.field_path)?)
                } else if let Some(r) = &from.resource_field_ref {
                    let target = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
                        Some(name) => ctx
                            .pod
                            .spec
                            .as_ref()
                            .and_then(|s| spec::all_containers(s).find(|c| c.name == name))
                            .unwrap_or(container),
                        None => container,
                    };
                    Some(resource_value(
                        ctx,
                        target,
                        &r.resource,
                        r.divisor.as_ref().map(|d| d.0.as_str()),
                    )?)
                } else {
                    None
                }
            }
        };
        if let Some(value) = value {
            set(&mut order, &mut vars, env.name.clone(), value);
        }
    }
    Ok(order
        .into_iter()
        .map(|k| {
            let v = vars.get(&k).cloned().unwrap_or_default();
            (k, v)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn expansion() {
        let vars = BTreeMap::from([
            ("A".to_string(), "x".to_string()),
            ("B".to_string(), "y y".to_string()),
        ]);
        assert_eq!(expand("$(A)-$(B)", &vars), "x-y y");
        assert_eq!(expand("$$(A) $(C) $", &vars), "$(A) $(C) $");
        assert_eq!(expand("é$(A", &vars), "é$(A");
    }

    #[test]
    fn service_links() {
        let svc: Service = serde_json::from_value(json!({"metadata": {"name": "my-svc"},
            "spec": {"clusterIP": "10.43.0.5", "ports": [{"name": "http", "port": 80}, {"port": 53, "protocol": "UDP"}]}})).unwrap();
        let headless: Service = serde_json::from_value(json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None", "ports": [{"port": 1}]}})).unwrap();
        let env: BTreeMap<_, _> = service_env(&[svc, headless]).into_iter().collect();
        assert_eq!(env["MY_SVC_SERVICE_HOST"], "10.43.0.5");
        assert_eq!(env["MY_SVC_SERVICE_PORT"], "80");
        assert_eq!(env["MY_SVC_SERVICE_PORT_HTTP"], "80");
        assert_eq!(env["MY_SVC_PORT"], "tcp://10.43.0.5:80");
        assert_eq!(env["MY_SVC_PORT_53_UDP"], "udp://10.43.0.5:53");
        assert_eq!(env["MY_SVC_PORT_53_UDP_ADDR"], "10.43.0.5");
        assert!(!env.contains_key("H_SERVICE_HOST"));
    }

    #[test]
    fn downward_fields_and_resources() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"limits": {"memory": "64Mi", "cpu": "250m"}}}]}})).unwrap();
        let ctx = EnvContext {
            pod: &pod,
            pod_ips: &["10.42.0.5".to_string()],
            host_ips: &["192.168.1.2".to_string()],
            node_cpu_millis: 4000,
            node_memory_bytes: 1 << 30,
            node_storage_bytes: 1 << 40,
        };
        assert_eq!(field_value(&ctx, "metadata.labels['app']").unwrap(), "web");
        assert_eq!(field_value(&ctx, "status.podIP").unwrap(), "10.42.0.5");
        assert_eq!(field_value(&ctx, "spec.nodeName").unwrap(), "n1");
        assert_eq!(field_value(&ctx, "metadata.labels").unwrap(), "app=\"web\"");
        assert!(field_value(&ctx, "spec.bogus").is_err());
        let c = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            resource_value(&ctx, c, "limits.memory", Some("1Mi")).unwrap(),
            "64"
        );
        assert_eq!(resource_value(&ctx, c, "limits.cpu", None).unwrap(), "1");
        assert_eq!(
            resource_value(&ctx, c, "limits.cpu", Some("1m")).unwrap(),
            "250"
        );
        assert_eq!(
            resource_value(&ctx, c, "requests.memory", None).unwrap(),
            "0"
        );
    }
}
