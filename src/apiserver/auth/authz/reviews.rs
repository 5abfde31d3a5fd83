//! The access-review APIs, answered from the authorizer and never stored:
//! `SelfSubjectAccessReview` (`kubectl auth can-i`), `SubjectAccessReview`,
//! `LocalSubjectAccessReview`, `SelfSubjectRulesReview` (`kubectl auth can-i --list`) and
//! `authentication.k8s.io` `SelfSubjectReview` (`kubectl auth whoami`).

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::{Attributes, Authorizer, RequestKind};
use crate::apiserver::auth::authn::Identity;
use crate::apiserver::http::handlers;
use crate::apiserver::http::request::Target;
use crate::apiserver::http::status::{ApiError, StatusCause};
use crate::apiserver::storage::registry::ResourceInfo;

/// Whether `info` is one of the review resources this module answers.
pub fn is_review(info: &ResourceInfo) -> bool {
    matches!(
        (info.group.as_str(), info.plural.as_str()),
        (
            "authorization.k8s.io",
            "selfsubjectaccessreviews"
                | "subjectaccessreviews"
                | "localsubjectaccessreviews"
                | "selfsubjectrulesreviews"
        ) | ("authentication.k8s.io", "selfsubjectreviews")
    )
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn invalid(info: &ResourceInfo, field: &str, message: &str) -> ApiError {
    ApiError::invalid(
        &info.group,
        &info.kind,
        "",
        vec![StatusCause {
            reason: Some("FieldValueRequired".into()),
            message: Some(message.into()),
            field: Some(field.into()),
        }],
    )
}

/// Answers a POST to a review resource.
pub fn serve(
    authorizer: &Authorizer,
    who: &Identity,
    target: &Target,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let info = &target.info;
    if target.name.is_some() || target.subresource.is_some() {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let mut object = handlers::decode_request(info, headers, body)?;
    if !object.is_object() {
        return Err(ApiError::bad_request("the request body must be an object"));
    }
    object["apiVersion"] = json!(info.api_version());
    object["kind"] = json!(info.kind);
    if object.get("metadata").is_none_or(Value::is_null) {
        object["metadata"] = json!({});
    }
    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
    let status = match info.plural.as_str() {
        "selfsubjectreviews" => {
            let mut groups = who.groups.clone();
            groups.sort();
            groups.dedup();
            json!({"userInfo": {"username": who.user, "groups": groups}})
        }
        "selfsubjectrulesreviews" => {
            let namespace = spec["namespace"].as_str().unwrap_or_default();
            rules_review(authorizer, who, namespace)
        }
        plural => {
            let subject = match plural {
                "selfsubjectaccessreviews" => who.clone(),
                _ => {
                    let user = spec["user"].as_str().unwrap_or_default().to_string();
                    let groups = strings(&spec["groups"]);
                    if user.is_empty() && groups.is_empty() {
                        return Err(invalid(
                            info,
                            "spec.user",
                            "at least one of user or group must be specified",
                        ));
                    }
                    Identity { user, groups }
                }
            };
            let mut resource = spec["resourceAttributes"].clone();
            if plural == "localsubjectaccessreviews" {
                let namespace = target.namespace.clone().unwrap_or_default();
                if resource.is_object() {
                    let given = resource["namespace"].as_str().unwrap_or_default();
                    if !given.is_empty() && given != namespace {
                        return Err(invalid(
                            info,
                            "spec.resourceAttributes.namespace",
                            "must match metadata.namespace",
                        ));
                    }
                    resource["namespace"] = json!(namespace);
                }
            }
            let allowed = access_review(authorizer, &subject, &resource, &spec)
                .ok_or_else(|| {
                    invalid(
                        info,
                        "spec.resourceAttributes",
                        "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                    )
                })?;
            if allowed {
                json!({"allowed": true})
            } else {
                json!({"allowed": false})
            }
        }
    };
    object["status"] = status;
    let bytes = serde_json::to_vec(&object).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(handlers::json_response(StatusCode::CREATED, bytes))
}

/// `Some(allowed)` for a well-formed review, `None` when it names neither or both kinds of
/// attributes.
fn access_review(
    authorizer: &Authorizer,
    subject: &Identity,
    resource: &Value,
    spec: &Value,
) -> Option<bool> {
    let non_resource = &spec["nonResourceAttributes"];
    match (resource.is_object(), non_resource.is_object()) {
        (true, false) => {
            let s = |k: &str| resource[k].as_str().filter(|v| !v.is_empty());
            let verb = s("verb").unwrap_or_default();
            let attrs = Attributes {
                verb,
                kind: RequestKind::Resource {
                    group: s("group").unwrap_or_default(),
                    resource: s("resource").unwrap_or_default(),
                    subresource: s("subresource"),
                    namespace: s("namespace"),
                    name: s("name"),
                },
            };
            Some(authorizer.allows(subject, &attrs))
        }
        (false, true) => {
            let attrs = Attributes {
                verb: non_resource["verb"].as_str().unwrap_or_default(),
                kind: RequestKind::NonResource {
                    path: non_resource["path"].as_str().unwrap_or_default(),
                },
            };
            Some(authorizer.allows(subject, &attrs))
        }
        _ => None,
    }
}

fn rules_review(authorizer: &Authorizer, who: &Identity, namespace: &str) -> Value {
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in authorizer.rules_for(who, namespace) {
        if rule.urls.is_empty() {
            let mut r =
                json!({"verbs": rule.verbs, "apiGroups": rule.groups, "resources": rule.resources});
            if !rule.names.is_empty() {
                r["resourceNames"] = json!(rule.names);
            }
            resource_rules.push(r);
        } else {
            non_resource_rules.push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.urls}));
        }
    }
    json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    })
}
