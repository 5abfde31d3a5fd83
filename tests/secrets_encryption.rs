//! Secrets encrypted at rest, end to end against the real binary under umask 000:
//! `k3rs server --secrets-encryption` generates k3s's encryption-config.json (0600), a
//! Secret created and read back with kubectl is plaintext to kubectl, while `state.db`
//! (read with SQLite directly) and an `etcd-snapshot save` file hold only kube's
//! `k8s:enc:aesgcm:v1:` envelope; the database, its WAL/SHM and the snapshot are 0600.
//! `k3rs secrets-encrypt rotate-keys` on the running server leaves every Secret readable
//! and the newest revision of each stored under the new key only.

mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

const VALUE: &str = "hunter2-very-secret-value";

struct Server {
    child: Child,
    data: PathBuf,
    kubeconfig: PathBuf,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(root: &Path) -> Server {
        let port = support::free_port();
        let data = root.join("data");
        let kubeconfig = root.join("kubeconfig.yaml");
        let log = root.join("server.log");
        let file = std::fs::File::create(&log).expect("log");
        // umask 000: every file mode checked below is the server's own choice.
        let child = Command::new("sh")
            .arg("-c")
            .arg("umask 000; exec \"$@\"")
            .arg("sh")
            .arg(support::k3rs_bin())
            .arg("server")
            .arg("--data-dir")
            .arg(&data)
            .args(["--bind-address", "127.0.0.1", "--https-listen-port"])
            .arg(port.to_string())
            .arg("--write-kubeconfig")
            .arg(&kubeconfig)
            .args(["--disable-agent", "--node-name", "node-a"])
            .args(["--etcd-disable-snapshots", "--secrets-encryption"])
            .env_remove("K3RS_TOKEN")
            .env_remove("K3RS_DATA_DIR")
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("start k3rs server");
        let mut server = Server {
            child,
            data,
            kubeconfig,
            log,
        };
        support::wait_readyz(
            &mut server.child,
            &server.kubeconfig,
            Duration::from_secs(30),
            Duration::from_millis(50),
            &server.log,
        );
        server
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        support::kubectl_at(&self.kubeconfig, args)
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log_text()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Every `value` of keys under `/registry/secrets/` in an SQLite store file.
fn stored_secret_values(db: &Path) -> Vec<Vec<u8>> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open db");
    let mut stmt = conn
        .prepare("SELECT value FROM kv WHERE key LIKE '/registry/secrets/%' AND deleted = 0")
        .expect("query");
    stmt.query_map([], |r| r.get::<_, Vec<u8>>(0))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect()
}

fn assert_no_plaintext(what: &str, bytes: &[u8]) {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(VALUE);
    for needle in [VALUE.as_bytes(), b64.as_bytes()] {
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "{what} holds {:?} in plaintext",
            String::from_utf8_lossy(needle)
        );
    }
}

#[test]
fn secrets_are_encrypted_in_the_database_and_snapshots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());

    let config = server.data.join("server/cred/encryption-config.json");
    assert_eq!(mode(&config), 0o600, "encryption-config.json");
    let text = std::fs::read_to_string(&config).expect("config");
    assert!(
        text.contains("\"kind\":\"EncryptionConfiguration\""),
        "{text}"
    );
    assert!(text.contains("\"aesgcm\""), "{text}");

    server.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "s1",
        &format!("--from-literal=password={VALUE}"),
    ]);
    let read = server.kubectl_ok(&["get", "secret", "s1", "-o", "jsonpath={.data.password}"]);
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(read.trim())
        .expect("base64");
    assert_eq!(decoded, VALUE.as_bytes());
    // A list (and an update) go through the same path.
    let list = server.kubectl_ok(&["get", "secrets", "-o", "json"]);
    assert!(list.contains(&base64::engine::general_purpose::STANDARD.encode(VALUE)));
    server.kubectl_ok(&["label", "secret", "s1", "touched=yes"]);
    let read = server.kubectl_ok(&[
        "get",
        "secret",
        "s1",
        "-o",
        "jsonpath={.metadata.labels.touched}",
    ]);
    assert_eq!(read, "yes");

    let db = server.data.join("server/db/state.db");
    let values = stored_secret_values(&db);
    assert!(!values.is_empty(), "no secret rows");
    for v in &values {
        assert!(
            v.starts_with(b"k8s:enc:aesgcm:v1:aesgcmkey:"),
            "{:?}",
            String::from_utf8_lossy(v)
        );
        assert_no_plaintext("a kv row", v);
    }
    assert_no_plaintext("state.db", &std::fs::read(&db).expect("db"));
    let wal = server.data.join("server/db/state.db-wal");
    if wal.exists() {
        assert_no_plaintext("state.db-wal", &std::fs::read(&wal).expect("wal"));
        assert_eq!(mode(&wal), 0o600, "state.db-wal");
    }
    let shm = server.data.join("server/db/state.db-shm");
    if shm.exists() {
        assert_eq!(mode(&shm), 0o600, "state.db-shm");
    }
    assert_eq!(mode(&db), 0o600, "state.db");

    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$@\"")
        .arg("sh")
        .arg(support::k3rs_bin())
        .args(["etcd-snapshot", "save", "--kubeconfig"])
        .arg(&server.kubeconfig)
        .arg("--data-dir")
        .arg(&server.data)
        .output()
        .expect("etcd-snapshot save");
    assert!(
        out.status.success(),
        "save: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
    let snapshots = server.data.join("server/db/snapshots");
    let files: Vec<PathBuf> = std::fs::read_dir(&snapshots)
        .expect("snapshot dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(mode(&files[0]), 0o600, "{}", files[0].display());
    assert_no_plaintext("the snapshot", &std::fs::read(&files[0]).expect("snapshot"));
    let values = stored_secret_values(&files[0]);
    assert!(!values.is_empty(), "no secret rows in the snapshot");
    assert!(values.iter().all(|v| v.starts_with(b"k8s:enc:aesgcm:v1:")));
}

/// The newest revision's value of every Secret key in an SQLite store file.
fn latest_secret_values(db: &Path) -> Vec<(String, Vec<u8>)> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open db");
    let mut stmt = conn
        .prepare(
            "SELECT key, value FROM kv k WHERE key LIKE '/registry/secrets/%' AND deleted = 0 \
             AND revision = (SELECT MAX(revision) FROM kv WHERE key = k.key)",
        )
        .expect("query");
    stmt.query_map([], |r| {
        Ok((
            String::from_utf8_lossy(&r.get::<_, Vec<u8>>(0)?).into_owned(),
            r.get::<_, Vec<u8>>(1)?,
        ))
    })
    .expect("rows")
    .map(|r| r.expect("row"))
    .collect()
}

fn secrets_encrypt(server: &Server, args: &[&str]) -> String {
    let out = Command::new(support::k3rs_bin())
        .arg("secrets-encrypt")
        .args(args)
        .arg("--kubeconfig")
        .arg(&server.kubeconfig)
        .arg("--data-dir")
        .arg(&server.data)
        .output()
        .expect("secrets-encrypt");
    assert!(
        out.status.success(),
        "secrets-encrypt {args:?}: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn rotate_keys_reencrypts_every_secret_on_a_running_server() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let names = ["r1", "r2", "r3"];
    for name in names {
        server.kubectl_ok(&[
            "create",
            "secret",
            "generic",
            name,
            &format!("--from-literal=password={VALUE}-{name}"),
        ]);
    }
    let db = server.data.join("server/db/state.db");
    let before = latest_secret_values(&db);
    assert!(before.len() >= names.len(), "{before:?}");
    assert!(
        before
            .iter()
            .all(|(_, v)| v.starts_with(b"k8s:enc:aesgcm:v1:aesgcmkey:"))
    );

    // rotate refuses to run before prepare (k3s's stage order).
    let out = Command::new(support::k3rs_bin())
        .args(["secrets-encrypt", "rotate", "--kubeconfig"])
        .arg(&server.kubeconfig)
        .output()
        .expect("rotate");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("incorrect stage"));

    let said = secrets_encrypt(&server, &["rotate-keys"]);
    assert!(said.contains("reencrypted"), "{said}");
    let status = secrets_encrypt(&server, &["status"]);
    assert!(
        status.contains("Current Rotation Stage: reencrypt_finished"),
        "{status}"
    );
    assert!(
        !status.contains(" aesgcmkey\n"),
        "the old key is gone: {status}"
    );
    let config = std::fs::read_to_string(server.data.join("server/cred/encryption-config.json"))
        .expect("config");
    assert_eq!(
        mode(&server.data.join("server/cred/encryption-config.json")),
        0o600
    );
    assert!(!config.contains("\"aesgcmkey\""), "{config}");

    for name in names {
        let read = server.kubectl_ok(&["get", "secret", name, "-o", "jsonpath={.data.password}"]);
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(read.trim())
            .expect("base64");
        assert_eq!(decoded, format!("{VALUE}-{name}").as_bytes());
    }
    // A Secret written after the rotation uses the new key too.
    server.kubectl_ok(&["create", "secret", "generic", "after", "--from-literal=a=b"]);
    let after = latest_secret_values(&db);
    assert!(after.len() > before.len());
    for (key, value) in &after {
        assert!(
            value.starts_with(b"k8s:enc:aesgcm:v1:aesgcmkey-"),
            "{key}: {:?}",
            String::from_utf8_lossy(&value[..value.len().min(40)])
        );
        assert_no_plaintext(key, value);
    }
}
