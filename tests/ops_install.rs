//! install.sh run into a temporary root (every INSTALL_K3RS_* directory pointed
//! there, the freshly built binary via INSTALL_K3RS_BIN, systemd untouched): the files
//! it writes, idempotency, every refusal, the uninstaller, and `sh -n` + shellcheck on
//! all scripts.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Root {
    dir: tempfile::TempDir,
}

impl Root {
    fn new() -> Root {
        Root {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Runs install.sh with the temporary root and the given extra environment.
    fn install(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new("sh");
        cmd.arg(repo().join("install.sh"))
            .args(args)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("INSTALL_K3RS_BIN_DIR", self.path("bin"))
            .env("INSTALL_K3RS_SYSTEMD_DIR", self.path("systemd"))
            .env("INSTALL_K3RS_DATA_DIR", self.path("var/lib/k3rs"))
            .env("INSTALL_K3RS_CONFIG_DIR", self.path("etc/k3rs"))
            .env(
                "INSTALL_K3RS_SYSTEMD_RUNTIME_DIR",
                self.path("run/systemd/system"),
            )
            .env("INSTALL_K3RS_BIN", support::k3rs_bin())
            .env("INSTALL_K3RS_SKIP_ENABLE", "true")
            .env("INSTALL_K3RS_SKIP_START", "true")
            .env("INSTALL_K3RS_SKIP_DEPS", "true");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run install.sh")
    }

    fn install_ok(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let out = self.install(args, env);
        assert!(
            out.status.success(),
            "install.sh {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn refused(&self, args: &[&str], env: &[(&str, &str)], message: &str) {
        let out = self.install(args, env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "install.sh {args:?} {env:?} should fail"
        );
        assert!(err.contains(message), "expected {message:?} in:\n{err}");
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o7777
}

fn mtime(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .expect("mtime")
}

#[test]
fn server_install_files_idempotency_and_uninstall() {
    let root = Root::new();
    let out = root.install_ok(
        &[
            "server",
            "--tls-san",
            "k3rs.example.com",
            "--node-name=pi one",
        ],
        &[],
    );
    assert!(out.contains("done: k3rs (server)"), "{out}");

    let bin = root.path("bin/k3rs");
    assert_eq!(mode(&bin), 0o755);
    assert_eq!(
        std::fs::read(&bin).expect("bin"),
        std::fs::read(support::k3rs_bin()).expect("built binary")
    );
    let unit = std::fs::read_to_string(root.path("systemd/k3rs.service")).expect("unit");
    assert!(
        unit.contains(&format!(
            "ExecStart={} server --tls-san k3rs.example.com \"--node-name=pi one\"\n",
            bin.display()
        )),
        "{unit}"
    );
    assert!(unit.contains("Type=notify") && unit.contains("KillMode=process"));
    assert!(unit.contains("EnvironmentFile=-/etc/systemd/system/k3rs.service.env"));
    let env_file = root.path("systemd/k3rs.service.env");
    assert_eq!(mode(&env_file), 0o600);
    for script in ["k3rs-uninstall.sh", "k3rs-killall.sh"] {
        let path = root.path(&format!("bin/{script}"));
        assert_eq!(mode(&path), 0o755, "{script}");
        let check = Command::new("sh")
            .arg("-n")
            .arg(&path)
            .status()
            .expect("sh -n");
        assert!(check.success(), "{script} is not valid sh");
    }
    // kubectl: a symlink only when none exists on PATH.
    let has_kubectl = ["/usr/local/bin/kubectl", "/usr/bin/kubectl", "/bin/kubectl"]
        .iter()
        .any(|p| Path::new(p).exists());
    assert_eq!(root.path("bin/kubectl").is_symlink(), !has_kubectl);

    // Same inputs: nothing is rewritten.
    let before: Vec<_> = [
        "bin/k3rs",
        "systemd/k3rs.service",
        "systemd/k3rs.service.env",
        "bin/k3rs-uninstall.sh",
    ]
    .iter()
    .map(|p| mtime(&root.path(p)))
    .collect();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let again = root.install_ok(
        &[
            "server",
            "--tls-san",
            "k3rs.example.com",
            "--node-name=pi one",
        ],
        &[],
    );
    assert!(again.contains("No change detected"), "{again}");
    assert!(!again.contains("wrote"), "{again}");
    let after: Vec<_> = [
        "bin/k3rs",
        "systemd/k3rs.service",
        "systemd/k3rs.service.env",
        "bin/k3rs-uninstall.sh",
    ]
    .iter()
    .map(|p| mtime(&root.path(p)))
    .collect();
    assert_eq!(before, after);

    // Different flags (via INSTALL_K3RS_EXEC) change the unit only.
    let changed = root.install_ok(&[], &[("INSTALL_K3RS_EXEC", "server --disable-agent")]);
    assert!(
        changed.contains("wrote") && changed.contains("k3rs.service"),
        "{changed}"
    );
    let unit = std::fs::read_to_string(root.path("systemd/k3rs.service")).expect("unit");
    assert!(unit.contains(" server --disable-agent\n"), "{unit}");

    // The uninstaller removes what was installed (data and config dirs too).
    std::fs::create_dir_all(root.path("var/lib/k3rs/server")).expect("data");
    std::fs::create_dir_all(root.path("etc/k3rs")).expect("config");
    let out = Command::new("sh")
        .arg(root.path("bin/k3rs-uninstall.sh"))
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .expect("uninstall");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for gone in [
        "bin/k3rs",
        "bin/k3rs-killall.sh",
        "bin/k3rs-uninstall.sh",
        "systemd/k3rs.service",
        "systemd/k3rs.service.env",
        "var/lib/k3rs",
        "etc/k3rs",
    ] {
        assert!(!root.path(gone).exists(), "{gone} survived the uninstall");
    }
}

#[test]
fn agent_install_writes_secrets_to_a_private_env_file() {
    let root = Root::new();
    let env = [
        ("K3RS_URL", "https://10.0.0.1:6443"),
        ("K3RS_TOKEN", "K10abc::server:secret"),
    ];
    let out = root.install_ok(&[], &env);
    assert!(out.contains("k3rs-agent (agent)"), "{out}");
    let unit = std::fs::read_to_string(root.path("systemd/k3rs-agent.service")).expect("unit");
    assert!(unit.contains(" agent\n"), "{unit}");
    assert!(!unit.contains("secret"), "the token stays out of the unit");
    let env_file = root.path("systemd/k3rs-agent.service.env");
    assert_eq!(mode(&env_file), 0o600);
    let text = std::fs::read_to_string(&env_file).expect("env");
    assert!(text.contains("K3RS_URL='https://10.0.0.1:6443'"), "{text}");
    assert!(
        text.contains("K3RS_TOKEN='K10abc::server:secret'"),
        "{text}"
    );
    assert!(root.path("bin/k3rs-agent-uninstall.sh").is_file());
    // A named service.
    let out = root.install_ok(&[], &[env[0], env[1], ("INSTALL_K3RS_NAME", "edge")]);
    assert!(out.contains("k3rs-edge (agent)"), "{out}");
    assert!(root.path("systemd/k3rs-edge.service").is_file());
}

/// k3s's `K3S_URL=… sh -s - server`: with `server`, K3RS_URL joins another server (the
/// unit runs `k3rs server`, which reads K3RS_URL and K3RS_TOKEN as --server and --token);
/// the first server is installed with `--cluster-init`.
#[test]
fn a_joining_server_installs_as_a_server_with_the_url_and_token_in_its_env_file() {
    let root = Root::new();
    let env = [
        ("K3RS_URL", "https://10.0.0.1:6443"),
        ("K3RS_TOKEN", "K10abc::server:secret"),
    ];
    let out = root.install_ok(&["server"], &env);
    assert!(out.contains("k3rs (server)"), "{out}");
    let unit = std::fs::read_to_string(root.path("systemd/k3rs.service")).expect("unit");
    assert!(unit.contains(" server\n"), "{unit}");
    assert!(!unit.contains("secret"), "the token stays out of the unit");
    let env_file = root.path("systemd/k3rs.service.env");
    assert_eq!(mode(&env_file), 0o600);
    let text = std::fs::read_to_string(&env_file).expect("env");
    assert!(text.contains("K3RS_URL='https://10.0.0.1:6443'"), "{text}");
    assert!(
        text.contains("K3RS_TOKEN='K10abc::server:secret'"),
        "{text}"
    );
    assert!(root.path("bin/k3rs-uninstall.sh").is_file());
    assert!(!root.path("systemd/k3rs-agent.service").exists());

    let first = Root::new();
    let out = first.install_ok(&["server", "--cluster-init"], &[("K3RS_TOKEN", "s3cret")]);
    assert!(out.contains("k3rs (server)"), "{out}");
    let unit = std::fs::read_to_string(first.path("systemd/k3rs.service")).expect("unit");
    assert!(unit.contains("--cluster-init"), "{unit}");
    // The server reads the same variables the env file sets.
    let help = Command::new(support::k3rs_bin())
        .args(["server", "--help"])
        .output()
        .expect("k3rs server --help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("K3RS_URL") && help.contains("K3RS_TOKEN"),
        "{help}"
    );
}

#[test]
fn refusals_have_clear_messages() {
    let root = Root::new();
    root.refused(
        &[],
        &[("K3RS_URL", "http://10.0.0.1:6443"), ("K3RS_TOKEN", "t")],
        "K3RS_URL must be an https:// URL",
    );
    root.refused(
        &[],
        &[("K3RS_URL", "10.0.0.1:6443"), ("K3RS_TOKEN", "t")],
        "must be an https:// URL",
    );
    root.refused(
        &[],
        &[("K3RS_URL", "https://10.0.0.1:6443")],
        "K3RS_TOKEN or K3RS_TOKEN_FILE is required",
    );
    root.refused(&["agent"], &[], "installing an agent needs K3RS_URL");
    root.refused(&["upgrade"], &[], "unknown command \"upgrade\"");
    root.refused(
        &[],
        &[("INSTALL_K3RS_NAME", "a/b")],
        "INSTALL_K3RS_NAME may only contain",
    );
    root.refused(
        &[],
        &[("INSTALL_K3RS_BIN", "/nonexistent/k3rs")],
        "is not an executable file",
    );

    // No systemd (the runtime directory does not exist in the temporary root).
    root.refused(
        &[],
        &[("INSTALL_K3RS_SKIP_START", "false")],
        "systemd is not running on this machine",
    );

    // Unsupported architecture: a fake `uname` first on PATH.
    let fake = root.path("fakebin");
    std::fs::create_dir_all(&fake).expect("mkdir");
    std::fs::write(fake.join("uname"), "#!/bin/sh\necho mips64\n").expect("uname");
    std::fs::set_permissions(fake.join("uname"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", fake.display());
    root.refused(
        &[],
        &[("PATH", &path)],
        "unsupported architecture \"mips64\"",
    );

    // Not root.
    let out = if nix_is_root() {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh"])
            .arg(repo().join("install.sh"))
            .env("INSTALL_K3RS_BIN_DIR", root.path("bin"))
            .output()
            .expect("setpriv (util-linux)")
    } else {
        Command::new("sh")
            .arg(repo().join("install.sh"))
            .output()
            .expect("sh")
    };
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("run the installer as root"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Nothing was written by any refusal.
    assert!(!root.path("systemd").exists());
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

#[test]
fn scripts_are_shellcheck_clean() {
    let root = Root::new();
    root.install_ok(&[], &[]);
    root.install_ok(
        &[],
        &[("K3RS_URL", "https://10.0.0.1:6443"), ("K3RS_TOKEN", "t")],
    );
    let scripts = [
        repo().join("install.sh"),
        root.path("bin/k3rs-uninstall.sh"),
        root.path("bin/k3rs-agent-uninstall.sh"),
        root.path("bin/k3rs-killall.sh"),
    ];
    for script in &scripts {
        let status = Command::new("sh")
            .arg("-n")
            .arg(script)
            .status()
            .expect("sh -n");
        assert!(status.success(), "sh -n {}", script.display());
    }
    let out = Command::new("shellcheck")
        .args(["-s", "sh"])
        .args(&scripts)
        .output()
        .unwrap_or_else(|e| panic!("shellcheck is missing ({e}): apt-get install -y shellcheck"));
    assert!(
        out.status.success(),
        "shellcheck:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
