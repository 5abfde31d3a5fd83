//! In-process clients: a `kube::Client` whose requests go straight into the API server's
//! request dispatch instead of through a loopback socket. The scheduler and the
//! controller-manager run inside `k3rs server` and are API clients like any other:
//! every request is authenticated as their own certificate's identity, authorized by
//! RBAC, admitted, validated and served by the same code as a network request. What
//! they skip is TLS and HTTP framing on both ends, which otherwise costs the server
//! about as much CPU as serving those requests (each bound pod is a binding, an Event
//! and several watch events sent to in-process watchers). Owns only that transport;
//! may not touch the store.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::header::USER_AGENT;
use axum::http::{HeaderValue, Request};
use axum::response::Response;
use http_body_util::BodyExt;

use crate::apiserver::auth::authn::Identity;
use crate::apiserver::{AppState, RequestBody, dispatch};

/// A client for an in-process component that authenticates as `identity` and names
/// itself `component` in its User-Agent (`kube-scheduler/v1.33.0+k3rs… (linux/amd64)
/// k3rs`), so its writes are attributed to that field manager, as kube-scheduler's and
/// kube-controller-manager's are. It retries as a network kube client does by default
/// (429, 503 and 504 with back-off).
pub fn client(state: Arc<AppState>, identity: Identity, component: &str) -> kube::Client {
    let user_agent = format!(
        "{component}/{} ({}/{}) k3rs",
        crate::apiserver::git_version(),
        std::env::consts::OS,
        crate::cli::go_arch()
    );
    let user_agent =
        HeaderValue::from_str(&user_agent).unwrap_or_else(|_| HeaderValue::from_static("k3rs"));
    let service = tower::ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(
            kube::client::retry::RetryPolicy::server_retry(),
        ))
        .service(Local {
            state,
            identity,
            user_agent,
        });
    kube::Client::new(service, "default")
}

/// The transport: one request in, the API server's response out.
#[derive(Clone)]
struct Local {
    state: Arc<AppState>,
    identity: Identity,
    user_agent: HeaderValue,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Request<kube::client::Body>> for Local {
    type Response = Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let (state, identity, user_agent) = (
            self.state.clone(),
            self.identity.clone(),
            self.user_agent.clone(),
        );
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            parts.headers.entry(USER_AGENT).or_insert(user_agent);
            let body = body.collect().await?.to_bytes();
            let request = Request::from_parts(parts, RequestBody::Local(body));
            Ok(dispatch(state, Some(identity), request).await)
        })
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};
    use bytes::Bytes;

    use crate::apiserver::{MAX_BODY_BYTES, RequestBody, read_body};

    #[tokio::test]
    async fn in_process_bodies_have_the_network_limit() {
        let small = RequestBody::Local(Bytes::from_static(b"{}"));
        let body = read_body(small, &Method::POST).await.expect("small body");
        assert_eq!(&body[..], b"{}");
        let get = RequestBody::Local(Bytes::from_static(b"ignored"));
        let body = read_body(get, &Method::GET).await.expect("GET");
        assert!(body.is_empty(), "a GET has no body");
        let big = RequestBody::Local(Bytes::from(vec![b' '; MAX_BODY_BYTES + 1]));
        let err = read_body(big, &Method::POST)
            .await
            .expect_err("over the limit");
        assert_eq!(err.code, StatusCode::PAYLOAD_TOO_LARGE);
        let exact = RequestBody::Local(Bytes::from(vec![b' '; MAX_BODY_BYTES]));
        let body = read_body(exact, &Method::PUT).await.expect("at the limit");
        assert_eq!(body.len(), MAX_BODY_BYTES);
    }
}
