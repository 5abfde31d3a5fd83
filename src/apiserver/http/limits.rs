//! The API server's protections against floods, as kube-apiserver's generic filters and
//! serving options set them: the in-flight request limits (`--max-requests-inflight`,
//! `--max-mutating-requests-inflight`; 429 `TooManyRequests` with `Retry-After: 1`), the
//! timeout of requests that are not long-running (`--request-timeout`; 504 `Timeout`),
//! the server-side timeout of watches without `timeoutSeconds` (`--min-request-timeout`
//! with kube's jitter), and the connection bounds of the listener (header read and idle
//! timeouts). What a connection or a request may hold is decided here; `mod.rs` applies
//! it. No I/O but the timers the caller awaits.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::request::{Query, Route};
use super::status::{ApiError, StatusDetails};

/// How long a client may take to send a request's headers, and so how long an idle
/// HTTP/1.1 keep-alive connection is kept (kube-apiserver's `ReadHeaderTimeout`, "just shy
/// of" its request timeout bound).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);

/// How long a connection with no request in progress is kept (kube-apiserver's
/// `IdleTimeout`, the keep-alive of Go's default transport). HTTP/2 connections are closed
/// gracefully (GOAWAY) after it; HTTP/1.1 ones already end at [`HEADER_READ_TIMEOUT`].
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// kube-apiserver's wording of a request refused by the in-flight limits.
pub const TOO_MANY_REQUESTS: &str = "Too many requests, please try again later.";

/// kube-apiserver's wording (after `Timeout: `) of a request that ran past its timeout.
pub const TIMED_OUT: &str = "request did not complete within the allotted timeout";

/// The serving limits `--kube-apiserver-arg` sets, with kube-apiserver's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingLimits {
    /// Non-mutating (get, list) requests served at once; 0 means no limit.
    pub max_requests_inflight: u32,
    /// Mutating requests served at once; 0 means no limit.
    pub max_mutating_requests_inflight: u32,
    /// How long a request that is not long-running may take.
    pub request_timeout: Duration,
    /// The shortest server-side timeout of a watch that names none (it is drawn from
    /// `[min, 2×min)`).
    pub min_request_timeout: Duration,
}

impl Default for ServingLimits {
    fn default() -> Self {
        ServingLimits {
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            request_timeout: Duration::from_secs(60),
            min_request_timeout: Duration::from_secs(1800),
        }
    }
}

/// kube's `longRunningRequestCheck`: watches and proxies, and the `attach`, `exec`,
/// `proxy`, `log` and `portforward` subresources. They are neither counted in flight nor
/// timed out by [`ServingLimits::request_timeout`].
pub fn is_long_running(method: &Method, route: &Route, query: &Query) -> bool {
    let Route::Resource(target) = route else {
        return false;
    };
    if target.legacy_watch || (*method == Method::GET && query.flag("watch")) {
        return true;
    }
    matches!(
        target.subresource.as_deref(),
        Some("attach" | "exec" | "proxy" | "log" | "portforward")
    )
}

/// Whether kube counts a request against the mutating limit: every verb but get, list and
/// watch.
pub fn is_mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD)
}

/// The two in-flight budgets (kube's `WithMaxInFlightLimit`).
pub struct Inflight {
    read_only: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
}

/// What [`Inflight::admit`] decided.
#[derive(Debug)]
pub enum Admission {
    /// Served; the permit is held until the request is answered (`None`: no limit, or a
    /// `system:masters` member over the limit).
    Serve(Option<OwnedSemaphorePermit>),
    /// Over the limit: answer [`too_many_requests`].
    Refuse,
}

impl Inflight {
    pub fn new(limits: &ServingLimits) -> Self {
        let budget = |n: u32| (n > 0).then(|| Arc::new(Semaphore::new(n as usize)));
        Inflight {
            read_only: budget(limits.max_requests_inflight),
            mutating: budget(limits.max_mutating_requests_inflight),
        }
    }

    /// Takes a slot of the request's budget without waiting. A full budget refuses,
    /// except to members of `system:masters` ("so powerful that they should always get an
    /// answer", as kube puts it), who are served without a slot.
    pub fn admit(&self, mutating: bool, groups: &[String]) -> Admission {
        let budget = if mutating {
            &self.mutating
        } else {
            &self.read_only
        };
        let Some(budget) = budget else {
            return Admission::Serve(None);
        };
        match budget.clone().try_acquire_owned() {
            Ok(permit) => Admission::Serve(Some(permit)),
            Err(_) if groups.iter().any(|g| g == "system:masters") => Admission::Serve(None),
            Err(_) => Admission::Refuse,
        }
    }
}

/// 429 `TooManyRequests` with `Retry-After: 1`, as kube-apiserver's in-flight filter
/// answers (kube writes the message as plain text; k3rs as a Status carrying it, which
/// clients read the same way).
pub fn too_many_requests() -> Response {
    let mut error = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        TOO_MANY_REQUESTS,
    );
    error.details = Some(Box::new(StatusDetails {
        retry_after_seconds: Some(1),
        ..Default::default()
    }));
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// 504 `Timeout`, as kube's `WithTimeoutForNonLongRunningRequests` answers.
pub fn timed_out() -> Response {
    let mut error = ApiError::timeout(format!("Timeout: {TIMED_OUT}"));
    error.details = Some(Box::default());
    error.into_response()
}

/// The timeout of a request that is not long-running: `request-timeout`, or the
/// request's own `?timeout=` (a Go duration) when that is shorter, as kube's request
/// deadline filter does.
pub fn request_deadline(limits: &ServingLimits, query: &Query) -> Duration {
    let asked = query
        .get("timeout")
        .and_then(|t| crate::cli::controller_manager::parse_go_duration(t).ok())
        .filter(|t| !t.is_zero());
    match asked {
        Some(t) if t < limits.request_timeout => t,
        _ => limits.request_timeout,
    }
}

/// A watch's server-side timeout when the client set no `timeoutSeconds`: kube draws it
/// from `[min-request-timeout, 2×min-request-timeout)` so that watches opened together do
/// not all end together.
pub fn watch_timeout(min_request_timeout: Duration) -> Duration {
    let [a, b] = crate::apiserver::storage::objects::random_bytes::<2>();
    let fraction = f64::from(u16::from_le_bytes([a, b])) / 65536.0;
    min_request_timeout.mul_f64(1.0 + fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(list: &[&str]) -> Vec<String> {
        list.iter().map(|g| g.to_string()).collect()
    }

    #[test]
    fn inflight_limits_each_budget_apart() {
        let limits = ServingLimits {
            max_requests_inflight: 2,
            max_mutating_requests_inflight: 1,
            ..Default::default()
        };
        let inflight = Inflight::new(&limits);
        let user = groups(&["system:authenticated"]);
        let r1 = inflight.admit(false, &user);
        let r2 = inflight.admit(false, &user);
        assert!(matches!(r1, Admission::Serve(Some(_))));
        assert!(matches!(r2, Admission::Serve(Some(_))));
        assert!(matches!(inflight.admit(false, &user), Admission::Refuse));
        // The mutating budget is its own.
        let w1 = inflight.admit(true, &user);
        assert!(matches!(w1, Admission::Serve(Some(_))));
        assert!(matches!(inflight.admit(true, &user), Admission::Refuse));
        // system:masters is served over the limit, without a slot.
        let admin = groups(&["system:masters", "system:authenticated"]);
        assert!(matches!(
            inflight.admit(true, &admin),
            Admission::Serve(None)
        ));
        // A finished request frees its slot.
        drop(r1);
        assert!(matches!(
            inflight.admit(false, &user),
            Admission::Serve(Some(_))
        ));
        drop(w1);
        assert!(matches!(
            inflight.admit(true, &user),
            Admission::Serve(Some(_))
        ));
    }

    #[test]
    fn zero_means_unlimited() {
        let limits = ServingLimits {
            max_requests_inflight: 0,
            max_mutating_requests_inflight: 0,
            ..Default::default()
        };
        let inflight = Inflight::new(&limits);
        let held: Vec<_> = (0..1000).map(|_| inflight.admit(true, &[])).collect();
        assert!(held.iter().all(|a| matches!(a, Admission::Serve(None))));
    }

    #[test]
    fn mutating_is_every_verb_but_reads() {
        assert!(!is_mutating(&Method::GET));
        assert!(!is_mutating(&Method::HEAD));
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(is_mutating(&m));
        }
    }

    #[test]
    fn refusal_is_kubes() {
        let response = too_many_requests();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            response.headers().get(header::RETRY_AFTER),
            Some(&HeaderValue::from_static("1"))
        );
        let response = timed_out();
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    }

    #[test]
    fn deadlines_and_watch_jitter() {
        let limits = ServingLimits::default();
        let q = |s: &str| Query::parse(Some(s)).unwrap_or_default();
        assert_eq!(request_deadline(&limits, &q("")), Duration::from_secs(60));
        assert_eq!(
            request_deadline(&limits, &q("timeout=5s")),
            Duration::from_secs(5)
        );
        assert_eq!(
            request_deadline(&limits, &q("timeout=5m")),
            Duration::from_secs(60)
        );
        assert_eq!(
            request_deadline(&limits, &q("timeout=bad")),
            Duration::from_secs(60)
        );
        for _ in 0..100 {
            let t = watch_timeout(Duration::from_secs(1800));
            assert!(
                t >= Duration::from_secs(1800) && t < Duration::from_secs(3600),
                "{t:?}"
            );
        }
    }
}
