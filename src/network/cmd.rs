//! Running the host's network tools (`ip`, `bridge`, `nft`) with a script on stdin, with
//! errors that name the command and carry its stderr. Owns nothing else.

use std::process::Stdio;

use tokio::io::AsyncWriteExt;

/// A network tool that failed or could not be started.
#[derive(Debug, thiserror::Error)]
pub enum CmdError {
    #[error("cannot run {program}: {source} (install {package})")]
    Spawn {
        program: String,
        package: &'static str,
        source: std::io::Error,
    },
    #[error("{program} {args} failed ({status}): {stderr}")]
    Failed {
        program: String,
        args: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
}

fn package(program: &str) -> &'static str {
    match program {
        "nft" => "nftables",
        _ => "iproute2",
    }
}

/// Runs `program args…` with `stdin` (if any) and returns its stdout.
pub async fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String, CmdError> {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let spawn_error = |source| CmdError::Spawn {
        program: program.to_string(),
        package: package(program),
        source,
    };
    let mut child = command.spawn().map_err(spawn_error)?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A tool that exits early closes its stdin; its exit status tells why.
        let _ = pipe.write_all(input.as_bytes()).await;
        drop(pipe);
    }
    let output = child.wait_with_output().await.map_err(spawn_error)?;
    if !output.status.success() {
        return Err(CmdError::Failed {
            program: program.to_string(),
            args: args.join(" "),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Applies an nftables script atomically (`nft -f -`).
pub async fn nft_apply(script: &str) -> Result<(), CmdError> {
    run("nft", &["-f", "-"], Some(script)).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn failures_name_the_command_and_carry_stderr() {
        let out = run("sh", &["-c", "cat"], Some("hello")).await.expect("cat");
        assert_eq!(out, "hello");
        let e = run("sh", &["-c", "echo broken >&2; exit 3"], None)
            .await
            .expect_err("fails");
        let text = e.to_string();
        assert!(text.contains("sh -c") && text.contains("broken"), "{text}");
        let e = run("/nonexistent/k3rs-tool", &[], None)
            .await
            .expect_err("missing");
        assert!(e.to_string().contains("install iproute2"), "{e}");
    }
}
