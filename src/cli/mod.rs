//! The `k3rs` command line: flags and subcommands (named as k3s names them), the config file,
//! validation into typed configuration, logging setup, and the thin glue that runs a
//! subcommand (`server` prepares its disk state through [`crate::pki`]; `kubectl` execs kubectl).
//!
//! Owns parsing and validation only. It may read the config file, the token file and the
//! hostname; it opens no listening sockets and never touches `store` (only the API server may).
//! Certificate material and kubeconfig files belong to [`crate::pki`].

pub mod agent;
pub mod apiserver_args;
pub mod args;
pub mod cert_renewal;
pub mod certificate;
pub mod check_config;
pub mod cidr;
pub mod config;
pub mod controller_manager;
pub mod etcd_snapshot;
pub mod kubectl;
pub mod logging;
pub mod node_config;
pub mod notify;
pub mod secrets_encrypt;
pub mod server;
pub mod server_join;
pub mod snapshot_args;
pub mod snapshot_config;
pub mod token;
pub mod units;

pub use args::{AgentArgs, Cli, Command, KubectlArgs, NodeArgs, ServerArgs};
pub use cidr::{Cidr, CidrError};
pub use config::{ConfigError, ServerConfig, Token};

/// The git commit baked in at build time (`K3RS_GIT_COMMIT`), or `"unknown"`.
pub const GIT_COMMIT: &str = match option_env!("K3RS_GIT_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

/// Kubernetes' name for the build architecture (`GOARCH`): the Node's architecture, its
/// `kubernetes.io/arch` label, `/version`'s platform, the components' User-Agents.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// The `k3rs --version` line, in k3s's style: `k3rs version v0.1.0 (1a2b3c4d)`.
pub fn version_string() -> String {
    let commit = GIT_COMMIT.trim();
    // k3s shows the first 8 characters of the commit.
    let short = commit.get(..8).unwrap_or(commit);
    let short = if short.is_empty() { "unknown" } else { short };
    format!("k3rs version v{} ({short})", env!("CARGO_PKG_VERSION"))
}

/// Returns at SIGTERM or SIGINT (systemd's stop, Ctrl-C): the server and the agent both
/// stop on it.
pub(crate) async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use clap::error::ErrorKind;

    #[test]
    fn version_line() {
        let v = version_string();
        assert!(
            v.starts_with(&format!("k3rs version v{} (", env!("CARGO_PKG_VERSION"))),
            "{v}"
        );
        assert!(v.ends_with(')'), "{v}");
        let cli = Cli::try_parse_from(["k3rs", "--version"]).expect("parses");
        assert!(cli.version);
        let cli = Cli::try_parse_from(["k3rs", "-v"]).expect("parses");
        assert!(cli.version);
    }

    #[test]
    fn unknown_flags_and_subcommands_are_usage_errors() {
        let e = Cli::try_parse_from(["k3rs", "server", "--no-such-flag"]).expect_err("unknown");
        assert_eq!(e.kind(), ErrorKind::UnknownArgument);
        assert_eq!(e.exit_code(), 2);
        let e = Cli::try_parse_from(["k3rs", "agent", "--no-such-flag"]).expect_err("unknown");
        assert_eq!(e.exit_code(), 2);
        let e = Cli::try_parse_from(["k3rs", "server", "--token"]).expect_err("missing value");
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn kubectl_arguments_pass_through_verbatim() {
        let cases: &[&[&str]] = &[
            &["get", "pods", "-A", "-o", "wide"],
            &["--help"],
            &["-h"],
            &["--kubeconfig=/x", "get", "--raw", "/version"],
            &[
                "-n",
                "kube-system",
                "logs",
                "-f",
                "--since=1h",
                "pod/x",
                "--",
                "-v",
            ],
            &["version", "--client", "--debug", "--version"],
            &["--debug", "get", "pods"],
            &["-v=8", "get", "nodes"],
            &[],
        ];
        for args in cases {
            let mut argv = vec!["k3rs", "kubectl"];
            argv.extend_from_slice(args);
            let cli = Cli::try_parse_from(&argv).expect("parses");
            let Some(Command::Kubectl(k)) = cli.command else {
                panic!("not kubectl: {argv:?}");
            };
            let got: Vec<String> = k
                .args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            assert_eq!(got, *args, "argv {argv:?}");
            assert_eq!(cli.debug, None, "--debug after kubectl belongs to kubectl");
        }
    }

    #[test]
    fn debug_before_or_after_server() {
        let cli = Cli::try_parse_from(["k3rs", "--debug", "server"]).expect("parses");
        assert_eq!(cli.debug, Some(true));
        let cli = Cli::try_parse_from(["k3rs", "server", "--debug"]).expect("parses");
        let Some(Command::Server(args)) = cli.command else {
            panic!("not server");
        };
        assert_eq!(args.debug, Some(true));
    }
}
