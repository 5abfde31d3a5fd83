//! `metav1.Status` errors, shaped byte for byte like kube-apiserver's (field order
//! kind, apiVersion, metadata, status, message, reason, details, code), and the
//! `ApiError` type every handler returns.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::store::StoreError;

#[derive(Debug, Serialize, Default, Clone)]
pub struct StatusCause {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

#[derive(Debug, Serialize, Default, Clone)]
pub struct StatusDetails {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    #[serde(rename = "retryAfterSeconds", skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<i32>,
}

#[derive(Debug, Serialize, Default)]
struct EmptyMeta {}

#[derive(Debug, Serialize)]
struct StatusBody<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    metadata: EmptyMeta,
    status: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a StatusDetails>,
    code: u16,
}

/// A failed request, rendered as a `metav1.Status`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: StatusCode,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Box<StatusDetails>>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.code.as_u16(),
            self.reason,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

fn details(name: &str, group: &str, kind: &str) -> Option<Box<StatusDetails>> {
    Some(Box::new(StatusDetails {
        name: (!name.is_empty()).then(|| name.to_string()),
        group: (!group.is_empty()).then(|| group.to_string()),
        kind: (!kind.is_empty()).then(|| kind.to_string()),
        ..Default::default()
    }))
}

/// `resource` as kube-apiserver names it in messages: `deployments.apps`, `pods`.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl ApiError {
    pub fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        ApiError {
            code: StatusCode::NOT_FOUND,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", qualified(group, resource)),
            details: details(name, group, resource),
        }
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        ApiError {
            code: StatusCode::CONFLICT,
            reason: "AlreadyExists",
            message: format!("{} \"{name}\" already exists", qualified(group, resource)),
            details: details(name, group, resource),
        }
    }

    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        ApiError {
            code: StatusCode::CONFLICT,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
            details: details(name, group, resource),
        }
    }

    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<StatusCause>) -> Self {
        let summary: Vec<String> = causes
            .iter()
            .map(|c| match (&c.field, &c.message) {
                (Some(f), Some(m)) => format!("{f}: {m}"),
                (None, Some(m)) => m.clone(),
                _ => String::new(),
            })
            .collect();
        let list = if summary.len() == 1 {
            summary[0].clone()
        } else {
            format!("[{}]", summary.join(", "))
        };
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        ApiError {
            code: StatusCode::UNPROCESSABLE_ENTITY,
            reason: "Invalid",
            message: format!("{qualified_kind} \"{name}\" is invalid: {list}"),
            details: Some(Box::new(StatusDetails {
                causes,
                ..details(name, group, kind).map(|d| *d).unwrap_or_default()
            })),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", message)
    }

    pub fn unauthorized() -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::FORBIDDEN, "Forbidden", message)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::GONE, "Expired", message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            message,
        )
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            message,
        )
    }

    pub fn not_acceptable(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_ACCEPTABLE, "NotAcceptable", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", message)
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::GATEWAY_TIMEOUT, "Timeout", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            message,
        )
    }

    /// The Status body as JSON bytes.
    pub fn body(&self) -> Vec<u8> {
        let body = StatusBody {
            kind: "Status",
            api_version: "v1",
            metadata: EmptyMeta {},
            status: "Failure",
            message: &self.message,
            reason: self.reason,
            details: self.details.as_deref(),
            code: self.code.as_u16(),
        };
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The Status as a JSON value (for watch ERROR events).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body()).unwrap_or_default()
    }

    /// Maps a store failure for an object of `resource` named `name`.
    pub fn from_store(error: StoreError, group: &str, resource: &str, name: &str) -> Self {
        match error {
            StoreError::NotFound { .. } => ApiError::not_found(group, resource, name),
            StoreError::AlreadyExists { .. } => ApiError::already_exists(group, resource, name),
            StoreError::Conflict { .. } => ApiError::conflict(
                group,
                resource,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ),
            StoreError::Compacted { requested, .. } => {
                ApiError::gone(format!("too old resource version: {requested}"))
            }
            StoreError::FutureRevision { requested, current } => ApiError::timeout(format!(
                "Too large resource version: {requested}, current: {current}"
            )),
            StoreError::ResyncRequired { .. } => {
                ApiError::gone("watch fell behind; resync required".to_string())
            }
            StoreError::InvalidArgument(m) => ApiError::bad_request(m),
            StoreError::Unavailable(m) => ApiError::unavailable(m),
            removed @ StoreError::Removed { .. } => ApiError::unavailable(removed.to_string()),
            StoreError::Transform(m) => ApiError::internal(format!("Internal error occurred: {m}")),
            other => {
                if other.is_disk_full() {
                    ApiError::internal(format!("the server's disk is full: {other}"))
                } else {
                    ApiError::internal(other.to_string())
                }
            }
        }
    }
}

/// A metav1.Status success body (for deletes of collections etc.).
pub fn success_status(details: Option<StatusDetails>) -> serde_json::Value {
    let mut v =
        serde_json::json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"});
    if let Some(d) = details
        && let Ok(d) = serde_json::to_value(d)
    {
        v["details"] = d;
    }
    v
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.code, self.body()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.code == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"kubernetes-master\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_kube_apiserver_bytes() {
        let body =
            String::from_utf8(ApiError::not_found("apps", "deployments", "web").body()).unwrap();
        assert_eq!(
            body,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"deployments.apps \"web\" not found","reason":"NotFound","details":{"name":"web","group":"apps","kind":"deployments"},"code":404}"#
        );
    }

    #[test]
    fn invalid_lists_causes() {
        let e = ApiError::invalid(
            "",
            "ConfigMap",
            "Bad_Name",
            vec![StatusCause {
                reason: Some("FieldValueInvalid".into()),
                message: Some("Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'".into()),
                field: Some("metadata.name".into()),
            }],
        );
        assert_eq!(e.code.as_u16(), 422);
        assert!(
            e.message
                .starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value")
        );
    }
}
