//! The API server's limits against floods, on the real binary: hundreds of slowloris
//! connections (TLS done, request headers never finished; and plain TCP stuck before the
//! TLS handshake) leave kubectl answering at once and are closed by the header read
//! timeout; `--kube-apiserver-arg max-mutating-requests-inflight=1` answers a second
//! concurrent write with kube's 429 and `Retry-After: 1`, except to `system:masters`.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;
use support::Server;
use support::slowloris::{self, Tls};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A TLS client for `server` with the admin's certificate (`system:masters`).
fn admin_tls(server: &Server) -> Arc<rustls::ClientConfig> {
    tls_client(server, true)
}

/// A TLS client for `server` trusting its CA; with the admin's certificate or none
/// (anonymous).
fn tls_client(server: &Server, as_admin: bool) -> Arc<rustls::ClientConfig> {
    let tls_dir = server.dir.path().join("data/server/tls");
    let read = |name: &str| std::fs::read(tls_dir.join(name)).expect("server TLS file");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(&read("server-ca.crt")).expect("server CA"))
        .expect("trust the server CA");
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots);
    let mut config = if as_admin {
        let certs = CertificateDer::pem_slice_iter(&read("client-admin.crt"))
            .collect::<Result<Vec<_>, _>>()
            .expect("admin certificate");
        let key = PrivateKeyDer::from_pem_slice(&read("client-admin.key")).expect("admin key");
        builder
            .with_client_auth_cert(certs, key)
            .expect("client certificate")
    } else {
        builder.with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

async fn connect(server: &Server, tls: &Arc<rustls::ClientConfig>) -> Tls {
    slowloris::connect(server.port, tls).await
}

/// Sends one HTTP/1.1 request (`Connection: close`) and reads the whole answer: status,
/// lower-cased headers, body.
async fn request(
    server: &Server,
    tls: &Arc<rustls::ClientConfig>,
    head: &str,
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let mut conn = connect(server, tls).await;
    let text = format!(
        "{head}\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(text.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

fn kubectl_get_pods_quickly(server: &Server) -> Duration {
    let started = Instant::now();
    let out = server.kubectl_with(
        std::path::Path::new("kubectl"),
        &["get", "pods", "-A"],
        None,
    );
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "kubectl get pods failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_connections_do_not_starve_kubectl() {
    let server = Server::start_with(&["--disable-controller-manager"]);
    let tls = admin_tls(&server);
    // 500 connections past the TLS handshake, each with a request whose headers never end.
    let mut held =
        slowloris::hold_unfinished_requests(server.port, &tls, "/api/v1/pods", 500).await;
    // And 200 plain TCP connections that never start the TLS handshake.
    let mut raw = Vec::new();
    for _ in 0..200 {
        raw.push(
            tokio::net::TcpStream::connect(("127.0.0.1", server.port))
                .await
                .expect("connect"),
        );
    }
    let opened = Instant::now();
    for _ in 0..3 {
        let took = tokio::task::block_in_place(|| kubectl_get_pods_quickly(&server));
        assert!(
            took < Duration::from_secs(1),
            "kubectl get pods took {took:?} under a slowloris flood"
        );
    }
    // The header read timeout (kube's 32 s) ends the stalled requests.
    slowloris::assert_closed_by_header_timeout(&mut held, opened).await;
    drop(raw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inflight_limit_answers_429_with_retry_after() {
    let server = Server::start_with(&[
        "--disable-controller-manager",
        "--kube-apiserver-arg",
        "max-mutating-requests-inflight=1",
        "--kube-apiserver-arg=max-requests-inflight=1",
        "--kube-apiserver-arg=profiling=false",
    ]);
    let log = server.log();
    assert!(
        log.contains("k3rs ignores kube-apiserver arg") && log.contains("profiling"),
        "no warning for the ignored arg:\n{log}"
    );
    let kubectl = |args: &[&str]| server.kubectl_with(std::path::Path::new("kubectl"), args, None);
    let out = kubectl(&[
        "create",
        "clusterrolebinding",
        "jane",
        "--clusterrole=edit",
        "--user=jane",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while !kubectl(&["auth", "can-i", "create", "configmaps", "--as=jane"])
        .status
        .success()
    {
        assert!(
            Instant::now() < deadline,
            "jane's binding never took effect"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tls = admin_tls(&server);
    // jane (impersonated, so not in system:masters, but allowed to write) starts a write
    // whose body never finishes: it holds the one mutating slot.
    let mut slow = connect(&server, &tls).await;
    slow.write_all(
        b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: 127.0.0.1\r\n\
          Impersonate-User: jane\r\nContent-Type: application/json\r\n\
          Content-Length: 1000\r\n\r\n{\"apiVersion\":",
    )
    .await
    .expect("slow write");
    slow.flush().await.expect("flush");
    const ADMIN_WRITE: &str = "POST /api/v1/namespaces/default/configmaps HTTP/1.1";
    let write = &format!("{ADMIN_WRITE}\r\nImpersonate-User: jane");
    let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#;
    let deadline = Instant::now() + Duration::from_secs(15);
    let (status, headers, body) = loop {
        let answer = request(&server, &tls, write, cm).await;
        if answer.0 == 429 || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status, 429, "{body}");
    assert!(
        headers.contains(&("retry-after".to_string(), "1".to_string())),
        "{headers:?}"
    );
    let status_body: Value = serde_json::from_str(&body).expect("a Status");
    assert_eq!(status_body["kind"], "Status");
    assert_eq!(status_body["reason"], "TooManyRequests");
    assert_eq!(status_body["code"], 429);
    assert_eq!(
        status_body["message"],
        "Too many requests, please try again later."
    );
    assert_eq!(status_body["details"]["retryAfterSeconds"], 1);

    // system:masters is never refused; reads have their own budget.
    let (status, _, body) = request(&server, &tls, ADMIN_WRITE, cm).await;
    assert_eq!(status, 201, "the admin's write: {body}");
    let took = tokio::task::block_in_place(|| kubectl_get_pods_quickly(&server));
    assert!(took < Duration::from_secs(5));

    // When the slow write goes, its slot is free again: jane is served (the name is
    // taken by now).
    drop(slow);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, _, body) = request(&server, &tls, write, cm).await;
        if status == 409 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jane still refused after the slow write ended: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn crd(name: &str, group: &str, plural: &str, kind: &str, annotations: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {name}\n{annotations}spec:\n  group: {group}\n  scope: Namespaced\n  names:\n    plural: {plural}\n    kind: {kind}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
    )
}

#[test]
fn crds_cannot_shadow_built_in_resources() {
    let server = Server::start_with(&["--disable-controller-manager"]);
    let apply = |yaml: &str| {
        server.kubectl_with(
            std::path::Path::new("kubectl"),
            &["apply", "-f", "-"],
            Some(yaml),
        )
    };
    // A group without a dot (every built-in group but the *.k8s.io ones) is refused.
    let out = apply(&crd(
        "deployments.apps",
        "apps",
        "deployments",
        "Deployment",
        "",
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            "spec.group: Invalid value: \"apps\": should be a domain with at least one dot"
        ),
        "{stderr}"
    );
    // A protected group needs the API approval annotation.
    let out = apply(&crd(
        "ingresses.networking.k8s.io",
        "networking.k8s.io",
        "ingresses",
        "Ingress",
        "",
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation \"api-approved.kubernetes.io\""),
        "{stderr}"
    );
    // With it the CRD is accepted, but the built-in Ingress is still what is served.
    let approved = "  annotations:\n    api-approved.kubernetes.io: https://github.com/kubernetes/enhancements/pull/1111\n";
    let out = apply(&crd(
        "ingresses.networking.k8s.io",
        "networking.k8s.io",
        "ingresses",
        "Ingress",
        approved,
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = apply(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: bad\nspec:\n  rules:\n  - host: \"not a host\"\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the built-in validation no longer ran"
    );
    assert!(stderr.contains("spec.rules[0].host"), "{stderr}");
}

/// The snapshot endpoint answers an unauthenticated client before reading its body: a
/// client announcing a large upload that it never sends gets its 401 at once, and does
/// not hold the server reading (issue 25 item 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_endpoint_refuses_before_reading_a_body() {
    let server = Server::start_with(&["--disable-controller-manager"]);
    let anonymous = tls_client(&server, false);
    let mut conn = connect(&server, &anonymous).await;
    let head = "POST /k3rs/v1/etcd-snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{";
    conn.write_all(head.as_bytes()).await.expect("send headers");
    conn.flush().await.expect("flush");
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut answer))
        .await
        .expect("no answer within 5 s: the server waited for the announced body");
    let n = read.expect("read the answer");
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(
        text.starts_with("HTTP/1.1 401"),
        "expected 401 before the body, got: {text}"
    );
}
