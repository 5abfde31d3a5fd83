//! Request decoding: which API a path names (discovery, a collection, an object, a
//! subresource), the query parameters kube clients send, and content negotiation.

use std::collections::HashMap;
use std::sync::Arc;

use super::status::ApiError;
use crate::apiserver::storage::registry::{Registry, ResourceInfo};

/// What a request path addresses.
#[derive(Debug)]
pub enum Route {
    Healthz(&'static str),
    Version,
    Metrics,
    /// `/api`
    LegacyVersions,
    /// `/api/v1` or `/apis/<g>/<v>`
    ResourceList {
        group: String,
        version: String,
    },
    /// `/apis`
    Groups,
    /// `/apis/<g>`
    Group(String),
    OpenApiV2,
    OpenApiV3Root,
    OpenApiV3 {
        group: String,
        version: String,
    },
    Resource(Target),
    NotFound,
}

/// A resource request target.
#[derive(Debug, Clone)]
pub struct Target {
    pub info: Arc<ResourceInfo>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The legacy `/api/v1/watch/...` form.
    pub legacy_watch: bool,
}

/// Parses a request path against the registry.
pub fn route(path: &str, registry: &Registry) -> Result<Route, ApiError> {
    let trimmed = path.trim_end_matches('/');
    let segments: Vec<&str> = trimmed.split('/').filter(|s| !s.is_empty()).collect();
    let route = match segments.as_slice() {
        ["healthz"] => Route::Healthz("healthz"),
        ["livez"] => Route::Healthz("livez"),
        ["readyz"] => Route::Healthz("readyz"),
        ["healthz", ..] | ["livez", ..] | ["readyz", ..] => Route::Healthz("check"),
        ["version"] => Route::Version,
        ["metrics"] => Route::Metrics,
        ["api"] => Route::LegacyVersions,
        ["apis"] => Route::Groups,
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiV3Root,
        ["openapi", "v3", "api", version] => Route::OpenApiV3 {
            group: String::new(),
            version: version.to_string(),
        },
        ["openapi", "v3", "apis", group, version] => Route::OpenApiV3 {
            group: group.to_string(),
            version: version.to_string(),
        },
        ["api", version] => Route::ResourceList {
            group: String::new(),
            version: version.to_string(),
        },
        ["apis", group] => Route::Group(group.to_string()),
        ["apis", group, version] => Route::ResourceList {
            group: group.to_string(),
            version: version.to_string(),
        },
        ["api", version, rest @ ..] => resource_route("", version, rest, registry)?,
        ["apis", group, version, rest @ ..] => resource_route(group, version, rest, registry)?,
        _ => Route::NotFound,
    };
    Ok(route)
}

fn resource_route(
    group: &str,
    version: &str,
    rest: &[&str],
    registry: &Registry,
) -> Result<Route, ApiError> {
    let (legacy_watch, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        other => (false, other),
    };
    let find = |plural: &str| registry.find(group, version, plural);
    let target = |info: Arc<ResourceInfo>,
                  namespace: Option<&str>,
                  name: Option<&str>,
                  sub: Option<&str>| {
        Route::Resource(Target {
            info,
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            subresource: sub.map(str::to_string),
            legacy_watch,
        })
    };
    let route = match rest {
        [plural] => match find(plural) {
            Some(info) => target(info, None, None, None),
            None => Route::NotFound,
        },
        // `namespaces/<ns>/<plural>...` addresses a namespaced collection, unless
        // `<plural>` is a subresource of the namespace itself (`status`, `finalize`).
        ["namespaces", ns, second, tail @ ..]
            if find(second).is_some_and(|i| i.namespaced)
                && !(tail.is_empty()
                    && find("namespaces").is_some_and(|n| n.has_subresource(second))) =>
        {
            let Some(info) = find(second) else {
                return Ok(Route::NotFound);
            };
            match tail {
                [] => target(info, Some(ns), None, None),
                [name] => target(info, Some(ns), Some(name), None),
                [name, sub] => target(info, Some(ns), Some(name), Some(sub)),
                // Subresources with a path (pods/proxy/...) are not served.
                _ => Route::NotFound,
            }
        }
        [plural, name] => match find(plural) {
            Some(info) => target(info, None, Some(name), None),
            None => Route::NotFound,
        },
        [plural, name, sub] => match find(plural) {
            Some(info) => target(info, None, Some(name), Some(sub)),
            None => Route::NotFound,
        },
        _ => Route::NotFound,
    };
    if let Route::Resource(t) = &route {
        if !t.info.namespaced && t.namespace.is_some() {
            return Ok(Route::NotFound);
        }
        if let Some(sub) = &t.subresource
            && !t.info.has_subresource(sub)
        {
            return Ok(Route::NotFound);
        }
    }
    Ok(route)
}

/// Query parameters, first value wins (kube clients never repeat these).
#[derive(Debug, Default, Clone)]
pub struct Query(pub HashMap<String, String>);

impl Query {
    pub fn parse(raw: Option<&str>) -> Result<Query, ApiError> {
        let Some(raw) = raw else {
            return Ok(Query::default());
        };
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw)
            .map_err(|e| ApiError::bad_request(format!("invalid query string: {e}")))?;
        let mut map = HashMap::new();
        for (k, v) in pairs {
            map.entry(k).or_insert(v);
        }
        Ok(Query(map))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true") | Some("1") | Some(""))
    }

    pub fn int(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::bad_request(format!("invalid value {v:?} for query parameter {key}"))
            }),
        }
    }

    pub fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "Invalid dry run value: {other:?}, valid values are: \"All\""
            ))),
        }
    }
}

/// How the client wants a GET/LIST answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Json,
    Table,
    PartialMetadata,
}

/// Reads the Accept header: Table (kubectl get), PartialObjectMetadata, or JSON.
pub fn negotiate(accept: Option<&str>) -> Result<Want, ApiError> {
    let Some(accept) = accept else {
        return Ok(Want::Json);
    };
    let mut json_ok = false;
    for part in accept.split(',') {
        let mut params = part.split(';').map(str::trim);
        let media = params.next().unwrap_or("");
        let params: Vec<&str> = params.collect();
        let as_ = params.iter().find_map(|p| p.strip_prefix("as="));
        let group = params.iter().find_map(|p| p.strip_prefix("g="));
        match (media, as_, group) {
            ("application/json", Some("Table"), Some("meta.k8s.io")) => return Ok(Want::Table),
            ("application/json", Some("PartialObjectMetadata"), Some("meta.k8s.io"))
            | ("application/json", Some("PartialObjectMetadataList"), Some("meta.k8s.io")) => {
                return Ok(Want::PartialMetadata);
            }
            ("application/json", None, _)
            | ("application/*", _, _)
            | ("*/*", _, _)
            | ("application/yaml", None, _)
            | ("", _, _) => json_ok = true,
            _ => {}
        }
    }
    if json_ok {
        Ok(Want::Json)
    } else {
        Err(ApiError::not_acceptable(format!(
            "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {accept})"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(path: &str) -> Target {
        match route(path, &Registry::new()).unwrap() {
            Route::Resource(t) => t,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn routes() {
        let t = target("/api/v1/namespaces/default/pods/web/status");
        assert_eq!(
            (
                t.info.plural.as_str(),
                t.namespace.as_deref(),
                t.name.as_deref(),
                t.subresource.as_deref()
            ),
            ("pods", Some("default"), Some("web"), Some("status"))
        );
        let t = target("/api/v1/namespaces/kube-system");
        assert_eq!(
            (t.info.plural.as_str(), t.name.as_deref()),
            ("namespaces", Some("kube-system"))
        );
        let t = target("/api/v1/namespaces/foo/status");
        assert_eq!(
            (
                t.info.plural.as_str(),
                t.name.as_deref(),
                t.subresource.as_deref()
            ),
            ("namespaces", Some("foo"), Some("status"))
        );
        let t = target("/apis/apps/v1/deployments");
        assert_eq!((t.info.plural.as_str(), t.namespace), ("deployments", None));
        let t = target("/api/v1/watch/namespaces/default/configmaps");
        assert!(t.legacy_watch);
        assert!(matches!(
            route("/api/v1/namespaces/default/nodes", &Registry::new()).unwrap(),
            Route::NotFound
        ));
        assert!(matches!(
            route("/api/v1/nodes/x/bogus", &Registry::new()).unwrap(),
            Route::NotFound
        ));
    }

    #[test]
    fn negotiation() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(Some(kubectl)).unwrap(), Want::Table);
        assert_eq!(negotiate(Some("application/json")).unwrap(), Want::Json);
        assert_eq!(negotiate(None).unwrap(), Want::Json);
        assert!(negotiate(Some("application/vnd.kubernetes.protobuf")).is_err());
    }
}
