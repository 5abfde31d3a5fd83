//! The systemd units `k3rs.service` and `k3rs-agent.service`, embedded from `systemd/`,
//! and `k3rs systemd-unit`, which prints one with the install's binary path, service
//! name and `ExecStart` arguments filled in (install.sh writes what it prints).
//!
//! Owns only the unit text; it writes no files and talks to no systemd.

use clap::Args;

/// `systemd/k3rs.service`.
pub const SERVER_UNIT: &str = include_str!("../../systemd/k3rs.service");
/// `systemd/k3rs-agent.service`.
pub const AGENT_UNIT: &str = include_str!("../../systemd/k3rs-agent.service");

/// `k3rs systemd-unit <server|agent> [--bin-dir DIR] [--name NAME] [-- ARGS...]`.
#[derive(Debug, Args)]
pub struct UnitArgs {
    /// server or agent
    #[arg(value_parser = ["server", "agent"])]
    pub kind: String,
    /// Directory holding the k3rs binary
    #[arg(long, default_value = "/usr/local/bin")]
    pub bin_dir: String,
    /// Service name (without .service) [default: k3rs or k3rs-agent]
    #[arg(long)]
    pub name: Option<String>,
    /// Extra arguments for `k3rs server|agent`
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<String>,
}

/// The unit for `kind` with `ExecStart=<bin_dir>/k3rs <kind> <args>` and the env file
/// `/etc/systemd/system/<name>.service.env`.
pub fn render(kind: &str, bin_dir: &str, name: Option<&str>, args: &[String]) -> String {
    let (template, default_name) = if kind == "agent" {
        (AGENT_UNIT, "k3rs-agent")
    } else {
        (SERVER_UNIT, "k3rs")
    };
    let name = name.unwrap_or(default_name);
    let mut exec = format!(
        "ExecStart={} {kind}",
        quote(&format!("{}/k3rs", bin_dir.trim_end_matches('/')))
    );
    for arg in args {
        exec.push(' ');
        exec.push_str(&quote(arg));
    }
    template
        .lines()
        .map(|line| {
            if line.starts_with("ExecStart=") {
                exec.clone()
            } else if line.starts_with("EnvironmentFile=-/etc/systemd/system/") {
                format!("EnvironmentFile=-/etc/systemd/system/{name}.service.env")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Quotes one word for a systemd command line: specifiers (`%`) and variables (`$`)
/// are escaped, and words with spaces, quotes or backslashes are double-quoted.
pub fn quote(word: &str) -> String {
    let escaped = word.replace('%', "%%").replace('$', "$$");
    let needs_quotes = escaped.is_empty()
        || escaped
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | ';'));
    if !needs_quotes {
        return escaped;
    }
    let inner = escaped.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{inner}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_have_what_the_issue_lists() {
        for unit in [SERVER_UNIT, AGENT_UNIT] {
            for line in [
                "Type=notify",
                "KillMode=process",
                "Delegate=yes",
                "Restart=always",
                "RestartSec=5s",
                "LimitNOFILE=1048576",
                "TasksMax=infinity",
                "TimeoutStartSec=0",
                "ExecStartPre=-/sbin/modprobe br_netfilter",
                "ExecStartPre=-/sbin/modprobe overlay",
            ] {
                assert!(unit.lines().any(|l| l == line), "missing {line}:\n{unit}");
            }
            assert!(unit.lines().any(|l| l.starts_with("EnvironmentFile=-")));
        }
        assert!(SERVER_UNIT.contains("ExecStart=/usr/local/bin/k3rs server\n"));
        assert!(AGENT_UNIT.contains("ExecStart=/usr/local/bin/k3rs agent\n"));
    }

    #[test]
    fn render_fills_in_paths_and_arguments() {
        let unit = render(
            "server",
            "/opt/bin/",
            Some("k3rs-test"),
            &[
                "--tls-san".into(),
                "my host".into(),
                "--node-label=a=$x%y".into(),
            ],
        );
        assert!(
            unit.contains(
                "ExecStart=/opt/bin/k3rs server --tls-san \"my host\" --node-label=a=$$x%%y\n"
            ),
            "{unit}"
        );
        assert!(
            unit.contains("EnvironmentFile=-/etc/systemd/system/k3rs-test.service.env\n"),
            "{unit}"
        );
        assert!(render("agent", "/usr/local/bin", None, &[]).contains("k3rs-agent.service.env"));
        assert_eq!(quote("a\"b"), "\"a\\\"b\"");
        assert_eq!(quote(""), "\"\"");
    }
}
