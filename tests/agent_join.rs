//! `k3rs agent` joining a real `k3rs server --disable-agent` with the token: CA pinning from
//! the `K10…` hash, the token secret, the node certificates (checked with x509-parser), their
//! reuse on restart, the node password, and the command line.
//!
//! The agent gets `--container-runtime-endpoint` pointing at a socket that does not exist,
//! so after joining it stops with an error naming that flag: these tests cover only the join.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use support::{Server, join_args, run_agent};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

fn token(server: &Server) -> String {
    std::fs::read_to_string(server.dir.path().join("data/server/node-token"))
        .expect("read node-token")
        .trim()
        .to_string()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The agent joined (certificates stored) and then stopped at the missing runtime socket.
fn assert_joined_then_stopped_at_runtime(out: &Output) {
    let err = stderr(out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--container-runtime-endpoint /nonexistent/k3rs-test/cri.sock does not exist"),
        "{err}"
    );
    assert!(err.contains("node credentials ready"), "{err}");
}

fn cert(path: &Path) -> (String, Vec<String>, Vec<String>, Vec<String>) {
    let pem = std::fs::read(path).expect("read certificate");
    let (_, block) = x509_parser::pem::parse_x509_pem(&pem).expect("PEM");
    let (_, cert) = X509Certificate::from_der(&block.contents).expect("X.509");
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let orgs = cert
        .subject()
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => dns.push(d.to_string()),
                GeneralName::IPAddress(b) if b.len() == 4 => {
                    ips.push(std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]).to_string())
                }
                _ => {}
            }
        }
    }
    (cn, orgs, dns, ips)
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn wrong_ca_hash_is_refused_and_nothing_is_written() {
    let server = Server::start();
    let good = token(&server);
    let (_, creds) = good.split_once("::").expect("full token");
    let wrong = format!("K10{}::{creds}", "0".repeat(64));
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("agent-data");
    let data_s = data.to_str().expect("utf-8");
    let url = server.url();
    let out = run_agent(&join_args(&url, &wrong, data_s, "worker-1"));
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("the server's CA certificate does not match the hash in the token (K10")
            && err.contains("check --token / --server"),
        "{err}"
    );
    assert!(!data.exists(), "nothing may be written on a CA mismatch");
}

#[test]
fn bad_token_secret_is_refused() {
    let server = Server::start();
    let good = token(&server);
    let (hash, _) = good.split_once("::").expect("full token");
    let bad = format!("{hash}::server:not-the-secret");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("agent-data");
    let url = server.url();
    let out = run_agent(&join_args(
        &url,
        &bad,
        data.to_str().expect("utf-8"),
        "worker-1",
    ));
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("rejected the token (401 Unauthorized)"),
        "{err}"
    );
    assert!(!data.join("agent/client-kubelet.crt").exists());
}

#[test]
fn agent_gets_stores_and_reuses_its_certificates() {
    let server = Server::start();
    let token = token(&server);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("agent-data");
    let data_s = data.to_str().expect("utf-8");
    let url = server.url();
    // One load balancer port for every start: the kubeconfig names it.
    let lb_port = support::free_port().to_string();
    let args = |node| {
        let mut args = join_args(&url, &token, data_s, node);
        args.extend(["--lb-server-port", lb_port.as_str()]);
        args
    };
    let out = run_agent(&args("worker-1"));
    assert_joined_then_stopped_at_runtime(&out);

    let agent_dir = data.join("agent");
    let (cn, orgs, _, _) = cert(&agent_dir.join("client-kubelet.crt"));
    assert_eq!(cn, "system:node:worker-1");
    assert_eq!(orgs, ["system:nodes"]);
    let (cn, _, dns, ips) = cert(&agent_dir.join("serving-kubelet.crt"));
    assert_eq!(cn, "system:node:worker-1");
    for name in ["worker-1", "localhost"] {
        assert!(
            dns.contains(&name.to_string()),
            "{name} missing from {dns:?}"
        );
    }
    assert!(ips.contains(&"127.0.0.1".to_string()), "{ips:?}");
    let server_ca =
        std::fs::read_to_string(server.dir.path().join("data/server/tls/server-ca.crt"))
            .expect("server CA");
    assert_eq!(
        std::fs::read_to_string(agent_dir.join("server-ca.crt")).expect("stored CA"),
        server_ca
    );
    assert!(agent_dir.join("client-ca.crt").is_file());
    for key in [
        "client-kubelet.key",
        "serving-kubelet.key",
        "kubelet.kubeconfig",
        "node-password",
    ] {
        assert_eq!(mode(&agent_dir.join(key)), 0o600, "{key}");
    }

    // The kubeconfig names the agent's API server load balancer (as k3s's names
    // 127.0.0.1:6444; it runs only while the agent does) and authenticates (anonymous
    // requests to /api/v1/nodes get 401): checked against the server itself.
    let kubeconfig =
        std::fs::read_to_string(agent_dir.join("kubelet.kubeconfig")).expect("kubeconfig");
    assert!(
        kubeconfig.contains("server: https://127.0.0.1:"),
        "{kubeconfig}"
    );
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(agent_dir.join("kubelet.kubeconfig"))
        .args(["--server", &url, "get", "--raw", "/api/v1/nodes"])
        .output()
        .expect("run kubectl (install kubectl)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The server stored the node password's hash.
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&server.kubeconfig)
        .args([
            "-n",
            "kube-system",
            "get",
            "secret",
            "worker-1.node-password.k3rs",
            "-o",
            "jsonpath={.type}",
        ])
        .output()
        .expect("run kubectl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "k3rs.io/node-password"
    );

    // A second start reuses everything byte for byte.
    let files = [
        "client-kubelet.crt",
        "client-kubelet.key",
        "serving-kubelet.crt",
        "serving-kubelet.key",
        "kubelet.kubeconfig",
        "node-password",
    ];
    let before: Vec<(Vec<u8>, std::time::SystemTime)> = files
        .iter()
        .map(|f| {
            let p = agent_dir.join(f);
            (
                std::fs::read(&p).expect("read"),
                std::fs::metadata(&p)
                    .and_then(|m| m.modified())
                    .expect("mtime"),
            )
        })
        .collect();
    let out = run_agent(&args("worker-1"));
    assert_joined_then_stopped_at_runtime(&out);
    for (f, (bytes, mtime)) in files.iter().zip(&before) {
        let p = agent_dir.join(f);
        assert_eq!(&std::fs::read(&p).expect("read"), bytes, "{f} changed");
        assert_eq!(
            &std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .expect("mtime"),
            mtime,
            "{f} rewritten"
        );
    }

    // A new node name gets new certificates.
    let out = run_agent(&args("worker-renamed"));
    assert_joined_then_stopped_at_runtime(&out);
    let (cn, _, _, _) = cert(&agent_dir.join("client-kubelet.crt"));
    assert_eq!(cn, "system:node:worker-renamed");
}

#[test]
fn second_machine_with_the_same_node_name_is_refused() {
    let server = Server::start();
    let token = token(&server);
    let url = server.url();
    let first = tempfile::tempdir().expect("tempdir");
    let first_data: PathBuf = first.path().join("data");
    let out = run_agent(&join_args(
        &url,
        &token,
        first_data.to_str().expect("utf-8"),
        "shared-name",
    ));
    assert_joined_then_stopped_at_runtime(&out);

    let second = tempfile::tempdir().expect("tempdir");
    let second_data = second.path().join("data");
    let out = run_agent(&join_args(
        &url,
        &token,
        second_data.to_str().expect("utf-8"),
        "shared-name",
    ));
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("refused node \"shared-name\" (403 Forbidden)")
            && err.contains("Node password rejected"),
        "{err}"
    );
    assert!(!second_data.join("agent/client-kubelet.crt").exists());
    // The first machine still joins.
    let out = run_agent(&join_args(
        &url,
        &token,
        first_data.to_str().expect("utf-8"),
        "shared-name",
    ));
    assert_joined_then_stopped_at_runtime(&out);
}

#[test]
fn command_line_errors_exit_2_naming_the_flag() {
    let out = run_agent(&["--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--no-such-flag"), "{}", stderr(&out));

    let out = run_agent(&["--token", "x", "--config", "/dev/null"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--server is required"),
        "{}",
        stderr(&out)
    );

    let out = run_agent(&[
        "--server",
        "https://127.0.0.1:6443",
        "--config",
        "/dev/null",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--token is required"),
        "{}",
        stderr(&out)
    );

    let out = run_agent(&["-s", "http://127.0.0.1:6443", "-t", "x", "-c", "/dev/null"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("for --server: the server URL must start with https://"),
        "{}",
        stderr(&out)
    );

    let out = run_agent(&[
        "-s",
        "https://127.0.0.1:6443",
        "-t",
        "x",
        "-c",
        "/dev/null",
        "--node-taint",
        "a=b",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("for --node-taint"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn config_file_keys_work() {
    let server = Server::start();
    let token = token(&server);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "server: {}\ntoken: \"{token}\"\ndata-dir: {}\nnode-name: from-file\nnode-ip: 127.0.0.1\n\
             container-runtime-endpoint: unix:///nonexistent/k3rs-test/cri.sock\n\
             node-label: [disk=ssd]\nkubelet-arg: [max-pods=50]\n",
            server.url(),
            data.display()
        ),
    )
    .expect("write config");
    let out = run_agent(&["--config", config.to_str().expect("utf-8")]);
    assert_joined_then_stopped_at_runtime(&out);
    let (cn, _, _, _) = cert(&data.join("agent/client-kubelet.crt"));
    assert_eq!(cn, "system:node:from-file");

    std::fs::write(
        &config,
        "server: https://127.0.0.1:1\ntoken: x\nwrite-kubeconfig: /tmp/x\n",
    )
    .expect("write config");
    let out = run_agent(&["--config", config.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown key \"write-kubeconfig\"")
            && stderr(&out).contains("k3rs agent has no --write-kubeconfig flag"),
        "{}",
        stderr(&out)
    );
}

/// The HTTP status of `GET <url><path>` with the `Authorization` value `auth` (curl; the
/// server's certificate is not checked: only the status matters here).
fn status_with(url: &str, path: &str, auth: &str) -> u16 {
    let out = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
        .arg(format!("Authorization: {auth}"))
        .arg(format!("{url}{path}"))
        .output()
        .expect("run curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("an HTTP status")
}

fn basic(user: &str, secret: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{secret}"))
    )
}

/// `kubectl get --raw <path>` with the agent's own credentials (its kubelet kubeconfig),
/// against the server directly.
fn as_agent(agent_dir: &Path, url: &str, path: &str) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(agent_dir.join("kubelet.kubeconfig"))
        .args(["--server", url, "get", "--raw", path])
        .output()
        .expect("run kubectl (install kubectl)")
}

/// `k3rs token <args>` with the server's admin kubeconfig.
fn k3rs_token(server: &Server, args: &[&str]) -> Output {
    Command::new(support::k3rs_bin())
        .arg("token")
        .args(args)
        .arg("--kubeconfig")
        .arg(&server.kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run k3rs token")
}

#[test]
fn agent_token_joins_agents_only_and_agents_hold_no_admin_credential() {
    let server = Server::start_with(&["--agent-token", "agent-s3cret"]);
    let url = server.url();
    let server_token = token(&server);
    let server_secret = server_token.rsplit("::server:").next().expect("secret");
    let agent_token = std::fs::read_to_string(server.dir.path().join("data/server/agent-token"))
        .expect("the agent-token file")
        .trim()
        .to_string();
    let (hash, _) = server_token.split_once("::").expect("full token");
    assert_eq!(agent_token, format!("{hash}::node:agent-s3cret"));
    assert_eq!(
        mode(&server.dir.path().join("data/server/agent-token")),
        0o600
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("agent-data");
    let out = run_agent(&join_args(
        &url,
        &agent_token,
        data.to_str().expect("utf-8"),
        "worker-1",
    ));
    assert_joined_then_stopped_at_runtime(&out);

    // Attack: the agent token cannot join a server (fetch the CA keys or add a member),
    // whichever way it is presented; the server token passes authentication there (400:
    // this server is not clustered).
    for auth in [
        basic("server", "agent-s3cret"),
        basic("node", "agent-s3cret"),
        format!("Bearer {agent_token}"),
        "Bearer agent-s3cret".to_string(),
    ] {
        assert_eq!(
            status_with(&url, "/v1-k3rs/server-bootstrap", &auth),
            401,
            "{auth}"
        );
        assert_eq!(status_with(&url, "/v1-k3rs/members", &auth), 401, "{auth}");
    }
    assert_eq!(
        status_with(
            &url,
            "/v1-k3rs/server-bootstrap",
            &basic("server", server_secret)
        ),
        400
    );

    // Attack: no join token is an API credential.
    for auth in [
        format!("Bearer {agent_token}"),
        "Bearer agent-s3cret".to_string(),
        format!("Bearer {server_token}"),
        format!("Bearer {server_secret}"),
    ] {
        assert_eq!(status_with(&url, "/api/v1/secrets", &auth), 401, "{auth}");
    }
    // Attack: an agent's credentials cannot list Secrets cluster-wide.
    let out = as_agent(&data.join("agent"), &url, "/api/v1/secrets");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Forbidden"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A bare token joins too, with a warning that the CA is not pinned.
    let bare_data = dir.path().join("bare");
    let out = run_agent(&join_args(
        &url,
        "agent-s3cret",
        bare_data.to_str().expect("utf-8"),
        "worker-2",
    ));
    assert_joined_then_stopped_at_runtime(&out);
    assert!(
        stderr(&out).contains("CA is NOT pinned"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bootstrap_tokens_join_agents_until_deleted_or_expired() {
    let server = Server::start();
    let url = server.url();
    let server_token = token(&server);
    let (hash, _) = server_token.split_once("::").expect("full token");

    let out = k3rs_token(
        &server,
        &["create", "--ttl", "1h", "--description", "for worker-1"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let full = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (token_hash, id_secret) = full.split_once("::").expect("K10<hash>::<id>.<secret>");
    assert_eq!(token_hash, hash, "the token pins the server CA");
    let (id, _) = id_secret.split_once('.').expect("<id>.<secret>");
    assert_eq!(id.len(), 6);

    let out = k3rs_token(&server, &["list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        table.starts_with("TOKEN") && table.contains("EXTRA GROUPS"),
        "{table}"
    );
    let row = table
        .lines()
        .find(|l| l.starts_with(id_secret))
        .unwrap_or_else(|| panic!("{id_secret} not listed:\n{table}"));
    assert!(
        row.contains(" 59m ") || row.contains(" 1h "),
        "TTL of about an hour: {row:?}"
    );
    for cell in [
        "authentication,signing",
        "for worker-1",
        "system:bootstrappers:k3rs:default-node-token",
    ] {
        assert!(row.contains(cell), "{cell:?} missing from {row:?}");
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let joined = dir.path().join("joined");
    let joined_s = joined.to_str().expect("utf-8");
    let out = run_agent(&join_args(&url, &full, joined_s, "worker-1"));
    assert_joined_then_stopped_at_runtime(&out);

    // Attack: a bootstrap token joins agents, not servers, and is no API credential.
    for auth in [
        format!("Bearer {id_secret}"),
        format!("Bearer {full}"),
        basic("server", id_secret),
    ] {
        assert_eq!(
            status_with(&url, "/v1-k3rs/server-bootstrap", &auth),
            401,
            "{auth}"
        );
        assert_eq!(status_with(&url, "/api/v1/secrets", &auth), 401, "{auth}");
    }

    // Attack: a deleted bootstrap token cannot join.
    let out = k3rs_token(&server, &["delete", id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let fresh = dir.path().join("fresh");
    let out = run_agent(&join_args(
        &url,
        &full,
        fresh.to_str().expect("utf-8"),
        "worker-2",
    ));
    assert!(
        stderr(&out).contains("rejected the token (401 Unauthorized)"),
        "{}",
        stderr(&out)
    );
    assert!(!fresh.join("agent/client-kubelet.crt").exists());
    // The agent that joined with it restarts with its own credentials.
    let out = run_agent(&join_args(&url, &full, joined_s, "worker-1"));
    assert_joined_then_stopped_at_runtime(&out);

    // Attack: an expired bootstrap token cannot join.
    let out = k3rs_token(&server, &["create", "--ttl", "1s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let short = String::from_utf8_lossy(&out.stdout).trim().to_string();
    std::thread::sleep(Duration::from_millis(2100));
    let out = run_agent(&join_args(
        &url,
        &short,
        fresh.to_str().expect("utf-8"),
        "worker-3",
    ));
    assert!(
        stderr(&out).contains("rejected the token (401 Unauthorized)"),
        "{}",
        stderr(&out)
    );
    let out = k3rs_token(&server, &["list"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("<invalid>"),
        "an expired token shows as <invalid>: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn rotated_server_token_refuses_the_old_one_and_agents_keep_working() {
    let server = Server::start();
    let url = server.url();
    let old = token(&server);
    let old_secret = old.rsplit("::server:").next().expect("secret").to_string();
    let (hash, _) = old.split_once("::").expect("full token");
    let dir = tempfile::tempdir().expect("tempdir");
    let joined = dir.path().join("joined");
    let joined_s = joined.to_str().expect("utf-8");
    let out = run_agent(&join_args(&url, &old, joined_s, "worker-1"));
    assert_joined_then_stopped_at_runtime(&out);

    let server_data = server.dir.path().join("data");
    let rotate = |token: &str| {
        Command::new(support::k3rs_bin())
            .args(["token", "rotate", "--token", token, "--new-token"])
            .arg("n3w-s3cret")
            .args(["--server", &url, "--data-dir"])
            .arg(&server_data)
            .env_remove("K3RS_TOKEN")
            .output()
            .expect("run k3rs token rotate")
    };
    let out = rotate(&old);
    assert!(
        out.status.success(),
        "{}{}",
        stderr(&out),
        String::from_utf8_lossy(&out.stdout)
    );
    let new = format!("{hash}::server:n3w-s3cret");
    for file in ["token", "node-token"] {
        assert_eq!(
            std::fs::read_to_string(server_data.join("server").join(file))
                .expect("token file")
                .trim(),
            new,
            "{file}"
        );
    }

    // Attack: the old token no longer joins anything.
    let fresh = dir.path().join("fresh");
    let out = run_agent(&join_args(
        &url,
        &old,
        fresh.to_str().expect("utf-8"),
        "worker-2",
    ));
    assert!(
        stderr(&out).contains("rejected the token (401 Unauthorized)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        status_with(
            &url,
            "/v1-k3rs/server-bootstrap",
            &basic("server", &old_secret)
        ),
        401
    );
    assert_eq!(
        status_with(
            &url,
            "/v1-k3rs/server-bootstrap",
            &basic("server", "n3w-s3cret")
        ),
        400
    );
    let out = rotate(&old);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("401"), "{}", stderr(&out));

    // The new token joins; the agent joined with the old one keeps its credentials (they
    // still authenticate) and restarts with them.
    let out = run_agent(&join_args(
        &url,
        &new,
        fresh.to_str().expect("utf-8"),
        "worker-2",
    ));
    assert_joined_then_stopped_at_runtime(&out);
    let out = as_agent(&joined.join("agent"), &url, "/api/v1/nodes");
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run_agent(&join_args(&url, &old, joined_s, "worker-1"));
    assert_joined_then_stopped_at_runtime(&out);
}
