//! Image reference normalisation the way containerd/docker do it: `busybox` →
//! `docker.io/library/busybox:latest`, `user/app:1` → `docker.io/user/app:1`,
//! `registry.local:5000/app` → `registry.local:5000/app:latest`. Pure string handling.

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid image reference {reference:?}: {reason}")]
pub struct ReferenceError {
    pub reference: String,
    pub reason: &'static str,
}

/// Returns the fully-qualified form of `reference`.
pub fn normalise(reference: &str) -> Result<String, ReferenceError> {
    let err = |reason| ReferenceError {
        reference: reference.to_string(),
        reason,
    };
    let reference = reference.trim();
    if reference.is_empty() {
        return Err(err("empty"));
    }
    let (rest, digest) = match reference.split_once('@') {
        Some((r, d)) => {
            let Some((algo, hex)) = d.split_once(':') else {
                return Err(err("digest must look like sha256:<hex>"));
            };
            if algo.is_empty() || hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(err("digest must look like sha256:<hex>"));
            }
            (r, Some(d))
        }
        None => (reference, None),
    };
    // A tag is after the last ':' that follows the last '/' (a ':' before it is a port).
    let last_slash = rest.rfind('/').map(|i| i + 1).unwrap_or(0);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag
        && (tag.is_empty()
            || tag.len() > 128
            || !tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
            || tag.starts_with(['.', '-']))
    {
        return Err(err("bad tag"));
    }
    if name.is_empty() {
        return Err(err("missing repository name"));
    }
    let (domain, path) = match name.split_once('/') {
        Some((first, path))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first, path.to_string())
        }
        Some(_) => ("docker.io", name.to_string()),
        None => ("docker.io", name.to_string()),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    let path = if domain == "docker.io" && !path.contains('/') {
        format!("library/{path}")
    } else {
        path
    };
    if path.is_empty()
        || path.split('/').any(|c| {
            c.is_empty()
                || !c.chars().all(|ch| {
                    ch.is_ascii_lowercase() || ch.is_ascii_digit() || matches!(ch, '.' | '_' | '-')
                })
        })
    {
        return Err(err(
            "repository path must be lowercase letters, digits and . _ - separated by /",
        ));
    }
    let mut out = format!("{domain}/{path}");
    match (tag, digest) {
        (Some(t), _) => {
            out.push(':');
            out.push_str(t);
        }
        (None, None) => out.push_str(":latest"),
        (None, Some(_)) => {}
    }
    if let Some(d) = digest {
        out.push('@');
        out.push_str(d);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_like_containerd() {
        for (input, want) in [
            ("busybox", "docker.io/library/busybox:latest"),
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            ("library/busybox", "docker.io/library/busybox:latest"),
            (
                "rancher/mirrored-pause:3.6",
                "docker.io/rancher/mirrored-pause:3.6",
            ),
            ("docker.io/nginx:1.25", "docker.io/library/nginx:1.25"),
            ("index.docker.io/nginx", "docker.io/library/nginx:latest"),
            ("k3rs.local/pause:3.10", "k3rs.local/pause:3.10"),
            ("k3rs.test/busybox:1", "k3rs.test/busybox:1"),
            ("localhost/app", "localhost/app:latest"),
            (
                "registry.local:5000/team/app",
                "registry.local:5000/team/app:latest",
            ),
            ("registry.local:5000/app:v2", "registry.local:5000/app:v2"),
            (
                "nginx@sha256:0123abcd",
                "docker.io/library/nginx@sha256:0123abcd",
            ),
            (
                "nginx:1.25@sha256:0123abcd",
                "docker.io/library/nginx:1.25@sha256:0123abcd",
            ),
        ] {
            assert_eq!(normalise(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn rejects_bad_references() {
        for bad in [
            "",
            "Busybox",
            "busybox:",
            "a//b",
            "nginx@sha256",
            "x:-bad",
            "/x",
        ] {
            assert!(normalise(bad).is_err(), "{bad:?} accepted");
        }
    }
}
