//! Certificate and key rotation against the real binary (`k3rs server --disable-agent`, no
//! root): the serving certificate is renewed while the server runs (what TLS presents
//! changes, kubectl keeps working); `k3rs certificate check` lists every certificate;
//! `k3rs certificate rotate --service api-server` on a stopped server backs up and
//! replaces the serving certificate at the next start; a token of the previous
//! service-account key verifies while that key is listed and gets 401 once it is not; an
//! expired client certificate is refused; an agent renews its kubelet certificates through
//! the join endpoint with its current client certificate.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use support::Server;

fn tls_dir(server: &Server) -> PathBuf {
    server.dir.path().join("data/server/tls")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn certificate_cmd(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(support::k3rs_bin())
        .arg("certificate")
        .args(args)
        .env_remove("K3RS_DATA_DIR")
        .output()
        .expect("run k3rs certificate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `k3rs certificate rotate --service <service>` on a stopped server's data dir; its stdout.
fn rotate_offline(data: &Path, service: &str) -> String {
    let data = data.to_str().expect("utf-8");
    let (ok, out, err) = certificate_cmd(&["rotate", "--data-dir", data, "--service", service]);
    assert!(ok, "{err}");
    out
}

/// The certificate the server presents in a TLS handshake verified against its CA.
async fn presented_cert(server: &Server) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        CertificateDer::pem_slice_iter(read(&tls_dir(server).join("server-ca.crt")).as_bytes())
    {
        roots.add(cert.expect("CA PEM")).expect("add CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .expect("connect");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
        .await
        .expect("TLS handshake verified against the server CA");
    tls.get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .expect("a server certificate")
        .to_vec()
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("PEM")
        .to_vec()
}

fn kubectl_ok(server: &Server, args: &[&str]) -> String {
    let out = server.kubectl_with(Path::new("kubectl"), args, None);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn serving_certificate_is_renewed_while_running() {
    let server = Server::start_with_env(
        &[],
        &[
            ("K3RS_TEST_LEAF_DAYS", "30"),
            ("K3RS_CERT_CHECK_INTERVAL", "1"),
        ],
    );
    let first = presented_cert(&server).await;
    assert_eq!(
        first,
        der_of(&read(&tls_dir(&server).join("serving-kube-apiserver.crt")))
    );
    let admin_before = read(&server.kubeconfig);
    // 30-day certificates are inside the 90-day window: the next check renews them.
    let deadline = Instant::now() + Duration::from_secs(30);
    let renewed = loop {
        let now = presented_cert(&server).await;
        if now != first {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "the serving certificate was not renewed while running:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(
        server
            .log()
            .contains("serving a renewed API server certificate")
    );
    // What is served is what is on disk (a restart would serve the same).
    let on_disk = der_of(&read(&tls_dir(&server).join("serving-kube-apiserver.crt")));
    assert!(
        on_disk == renewed || presented_cert(&server).await == on_disk,
        "served certificate differs from the file"
    );
    // The admin kubeconfig was rewritten with the renewed admin certificate, and works.
    let deadline = Instant::now() + Duration::from_secs(10);
    while read(&server.kubeconfig) == admin_before {
        assert!(Instant::now() < deadline, "admin kubeconfig not rewritten");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(kubectl_ok(&server, &["get", "--raw", "/readyz"]), "ok");
    kubectl_ok(&server, &["get", "namespaces"]);
}

#[test]
fn certificate_check_lists_every_certificate() {
    let server = Server::start();
    let data = server.dir.path().join("data");
    let data = data.to_str().expect("utf-8");
    let (ok, table, err) = certificate_cmd(&["check", "--data-dir", data]);
    assert!(ok, "{err}");
    // The columns and their wording are checked by the unit test of `k3rs certificate`
    // (src/cli/certificate.rs); here: every file of a real server is listed, with its expiry.
    let mut crts = Vec::new();
    for dir in [tls_dir(&server), tls_dir(&server).join("etcd")] {
        for entry in std::fs::read_dir(&dir).expect("tls dir") {
            let name = entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned();
            if name.ends_with(".crt") {
                let rel = if dir.ends_with("etcd") {
                    format!("server/tls/etcd/{name}")
                } else {
                    format!("server/tls/{name}")
                };
                crts.push(rel);
            }
        }
    }
    assert!(crts.len() >= 10, "{crts:?}");
    let year = |years: i64| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_secs() as i64
            + years * 365 * 24 * 3600;
        jiff::Timestamp::from_second(t)
            .expect("ts")
            .strftime("%Y")
            .to_string()
    };
    for crt in &crts {
        let line = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(crt.as_str()))
            .unwrap_or_else(|| panic!("{crt} missing from\n{table}"));
        assert!(line.ends_with("OK"), "{line}");
        let want = if crt.ends_with("-ca.crt") {
            year(10)
        } else {
            year(1)
        };
        assert!(line.contains(&want), "{crt} expires in {want}? {line}");
    }
    assert!(table.contains("CN=system:admin"), "{table}");
    let (ok, text, err) = certificate_cmd(&[
        "check",
        "--data-dir",
        data,
        "--output",
        "text",
        "--service",
        "api-server",
    ]);
    assert!(ok, "{err}");
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.contains("serving-kube-apiserver.crt: certificate"),
        "{text}"
    );
    let (ok, _, err) = certificate_cmd(&["check", "--data-dir", data, "--service", "bogus"]);
    assert!(!ok);
    assert!(err.contains("unknown service \"bogus\""), "{err}");
}

#[tokio::test]
async fn rotate_api_server_on_a_stopped_server() {
    let server = Server::start();
    let old_pem = read(&tls_dir(&server).join("serving-kube-apiserver.crt"));
    let admin_pem = read(&tls_dir(&server).join("client-admin.crt"));
    assert_eq!(presented_cert(&server).await, der_of(&old_pem));
    let dir = server.stop_keeping_dir();
    let data = dir.path().join("data");
    let out = rotate_offline(&data, "api-server");
    assert!(out.contains("Backed up"), "{out}");
    let backups: Vec<PathBuf> = std::fs::read_dir(data.join("server"))
        .expect("server dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("tls-"))
        })
        .collect();
    assert_eq!(backups.len(), 1, "{backups:?}");
    assert_eq!(
        read(&backups[0].join("serving-kube-apiserver.crt")),
        old_pem
    );
    assert!(backups[0].join("server-ca.key").is_file());
    assert!(!data.join("server/tls/serving-kube-apiserver.crt").exists());
    assert!(data.join("server/tls/client-admin.crt").exists());

    let server = Server::start_in(dir, &[]);
    let new_pem = read(&tls_dir(&server).join("serving-kube-apiserver.crt"));
    assert_ne!(new_pem, old_pem, "a new serving certificate");
    assert_eq!(presented_cert(&server).await, der_of(&new_pem));
    assert_eq!(
        read(&tls_dir(&server).join("client-admin.crt")),
        admin_pem,
        "other services untouched"
    );
    kubectl_ok(&server, &["get", "namespaces"]);
}

/// 401 when the token does not authenticate; otherwise the status of listing pods
/// (403: authenticated, not authorized).
async fn token_status(server: &Server, token: &str) -> u16 {
    let client = support::client_with_token(server, token).await;
    match Api::<Pod>::namespaced(client, "default")
        .list(&ListParams::default())
        .await
    {
        Ok(_) => 200,
        Err(kube::Error::Api(e)) => e.code,
        Err(e) => panic!("listing pods: {e}"),
    }
}

#[tokio::test]
async fn service_account_key_rotation_keeps_old_tokens_while_listed() {
    let server = Server::start();
    let old_token = kubectl_ok(&server, &["create", "token", "default"])
        .trim()
        .to_string();
    assert_eq!(token_status(&server, &old_token).await, 403);
    let key_path = tls_dir(&server).join("service.key");
    let old_key = read(&key_path);

    let dir = server.stop_keeping_dir();
    let out = rotate_offline(&dir.path().join("data"), "service-account");
    assert!(out.contains("1 previous public key(s) kept"), "{out}");
    let server = Server::start_in(dir, &[]);
    let new_token = kubectl_ok(&server, &["create", "token", "default"])
        .trim()
        .to_string();
    assert_ne!(
        new_token.split('.').next(),
        old_token.split('.').next(),
        "signed with another key id"
    );
    assert_eq!(token_status(&server, &new_token).await, 403);
    assert_eq!(
        token_status(&server, &old_token).await,
        403,
        "old key still listed"
    );

    // Dropping the old public key from service.key ends the old tokens.
    let rotated = read(&key_path);
    let end = "-----END PRIVATE KEY-----\n";
    let current_only = &rotated[..rotated.find(end).expect("private key") + end.len()];
    assert!(rotated.contains("PUBLIC KEY"), "{rotated}");
    let dir = server.stop_keeping_dir();
    std::fs::write(&key_path, current_only).expect("write service.key");
    let server = Server::start_in(dir, &[]);
    assert_eq!(
        token_status(&server, &old_token).await,
        401,
        "old key removed"
    );
    assert_eq!(token_status(&server, &new_token).await, 403);

    // Listing the old key with service-account-key-file accepts its tokens again.
    let old_file = server.dir.path().join("old-service.key");
    std::fs::write(&old_file, old_key).expect("write old key");
    let arg = format!("service-account-key-file={}", old_file.display());
    let server = server.restart(&["--kube-apiserver-arg", &arg]);
    assert_eq!(token_status(&server, &old_token).await, 403);
    assert_eq!(token_status(&server, &new_token).await, 403);
    assert!(!server.log().contains("k3rs ignores kube-apiserver arg"));
}

/// A client certificate for `system:admin` from the server's client CA, valid from
/// `not_before` to `not_after` (unix times).
fn admin_cert(server: &Server, not_before: i64, not_after: i64) -> k3rs::pki::IssuedCert {
    let dir = tls_dir(server);
    let ca_key = rcgen::KeyPair::from_pem(&read(&dir.join("client-ca.key"))).expect("CA key");
    let ca_cert = read(&dir.join("client-ca.crt"));
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_cert, ca_key).expect("issuer");
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "system:admin");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:masters");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let at =
        |t: i64| std::time::UNIX_EPOCH + Duration::from_secs(u64::try_from(t).expect("positive"));
    params.not_before = at(not_before).into();
    params.not_after = at(not_after).into();
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &issuer).expect("sign");
    k3rs::pki::IssuedCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

#[tokio::test]
async fn an_expired_client_certificate_is_refused() {
    let server = Server::start();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs() as i64;
    let ca = read(&tls_dir(&server).join("server-ca.crt"));
    let list = |cert: k3rs::pki::IssuedCert| {
        let url = server.url();
        let ca = ca.clone();
        async move {
            let client = k3rs::kube_client::with_certificate(&url, &ca, &cert).expect("client");
            Api::<Pod>::namespaced(client, "default")
                .list(&ListParams::default())
                .await
        }
    };
    // The same identity, still valid: admitted (so the refusal below is about expiry).
    list(admin_cert(&server, now - 3600, now + 3600))
        .await
        .expect("a valid admin certificate works");
    let expired = list(admin_cert(&server, now - 7200, now - 60)).await;
    match expired {
        Ok(_) => panic!("an expired client certificate was accepted"),
        Err(kube::Error::Api(e)) => panic!("expected a refused handshake, got HTTP {}", e.code),
        Err(_) => {}
    }
    let future = list(admin_cert(&server, now + 3600, now + 7200)).await;
    assert!(
        future.is_err(),
        "a not-yet-valid client certificate was accepted"
    );
}

fn node_token(server: &Server) -> String {
    read(&server.dir.path().join("data/server/node-token"))
        .trim()
        .to_string()
}

/// Joins `node` (the agent then stops at the missing container runtime).
fn join(server: &Server, data: &Path, node: &str) {
    let (url, token) = (server.url(), node_token(server));
    let data = data.to_str().expect("utf-8");
    let out = support::run_agent(&support::join_args(&url, &token, data, node));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("node credentials ready"), "{err}");
}

fn agent_renewal(server: &Server, data: &Path, node: &str) -> k3rs::agent::renewal::AgentRenewal {
    let agent = data.join("agent");
    let pair = |stem: &str| k3rs::pki::IssuedCert {
        cert_pem: read(&agent.join(format!("{stem}.crt"))),
        key_pem: read(&agent.join(format!("{stem}.key"))),
    };
    let client = pair("client-kubelet");
    let serving = pair("serving-kubelet");
    k3rs::agent::renewal::AgentRenewal {
        node_name: node.to_string(),
        data_dir: data.to_path_buf(),
        client: k3rs::pki::live::LiveCert::new(&client).expect("client"),
        serving: k3rs::pki::live::LiveCert::new(&serving).expect("serving"),
        credentials: k3rs::agent::join::NodeCredentials {
            server: server.url(),
            server_ca_pem: read(&agent.join("server-ca.crt")),
            client_ca_pem: read(&agent.join("client-ca.crt")),
            client,
            serving,
            node_ips: vec!["127.0.0.1".parse().expect("ip")],
            kubeconfig: agent.join("kubelet.kubeconfig"),
        },
        source: k3rs::agent::renewal::Source::Join { token: None },
    }
}

#[tokio::test]
async fn an_agent_renews_its_certificates_with_its_client_certificate() {
    // Node certificates of 30 days: inside the renewal window from the start.
    let server = Server::start_with_env(&[], &[("K3RS_TEST_LEAF_DAYS", "30")]);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("agent-data");
    join(&server, &data, "worker-r");
    let agent = data.join("agent");
    let before = read(&agent.join("client-kubelet.crt"));
    let serving_before = read(&agent.join("serving-kubelet.crt"));
    let kubeconfig_before = read(&agent.join("kubelet.kubeconfig"));

    // No token: the only credential is the current client certificate.
    let mut renewal = agent_renewal(&server, &data, "worker-r");
    let live = renewal.client.clone();
    renewal.check().await.expect("renewal");
    let after = read(&agent.join("client-kubelet.crt"));
    assert_ne!(after, before, "a new client certificate on disk");
    assert_eq!(live.issued().cert_pem, after, "and in use");
    assert_ne!(read(&agent.join("serving-kubelet.crt")), serving_before);
    assert_ne!(read(&agent.join("kubelet.kubeconfig")), kubeconfig_before);
    // The renewed certificate works against the API as the node.
    let client = k3rs::kube_client::with_live_certificate(
        &server.url(),
        &read(&agent.join("server-ca.crt")),
        &live,
    )
    .expect("client");
    let node: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
    match node.get_opt("worker-r").await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) => assert_ne!(e.code, 401, "{e:?}"),
        Err(e) => panic!("{e}"),
    }

    // Another node's certificate does not renew this one's (no token to fall back on).
    let other_data = dir.path().join("other-data");
    join(&server, &other_data, "worker-o");
    let mut stolen = agent_renewal(&server, &data, "worker-r");
    let other = k3rs::pki::IssuedCert {
        cert_pem: read(&other_data.join("agent/client-kubelet.crt")),
        key_pem: read(&other_data.join("agent/client-kubelet.key")),
    };
    stolen.client.update(&other).expect("swap");
    let e = stolen
        .check()
        .await
        .expect_err("another node's certificate");
    assert!(format!("{e:#}").contains("401"), "{e:#}");
}
