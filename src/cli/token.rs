//! `k3rs token`, as `k3s token`:
//!
//! - `create [TOKEN] [--ttl 24h] [--description …] [--groups …] [--usages …]`: a kube
//!   bootstrap token (`bootstrap-token-<id>` Secret of type `bootstrap.kubernetes.io/token` in
//!   `kube-system`), printed as `K10<ca hash>::<id>.<secret>`; agents join with it as
//!   `--token` until it expires or is deleted;
//! - `list`: kubeadm's table (TOKEN TTL EXPIRES USAGES DESCRIPTION EXTRA GROUPS);
//! - `delete <id>…`;
//! - `rotate --token <old> --new-token <new>`: replaces the server token cluster-wide
//!   (`PUT /v1-k3rs/token`, authenticated with the old token).
//!
//! `create`, `list` and `delete` talk to the API with the admin kubeconfig
//! (`/etc/k3rs/k3rs.yaml`, `--kubeconfig`); `rotate` to the join endpoint with the token.
//! Owns the command line and the output only.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::config::{DEFAULT_DATA_DIR, DEFAULT_KUBECONFIG};

const BOOTSTRAP_TOKEN_TYPE: &str = "bootstrap.kubernetes.io/token";
const BOOTSTRAP_TOKEN_PREFIX: &str = "bootstrap-token-";
const SECRETS_PATH: &str = "/api/v1/namespaces/kube-system/secrets";

/// `k3rs token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
}

/// Where the admin kubeconfig is.
#[derive(Debug, Args, Clone)]
pub struct KubeconfigArg {
    /// Server to connect to (the admin kubeconfig)
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create bootstrap tokens on the server
    Create {
        /// The token (`[a-z0-9]{6}.[a-z0-9]{16}`); a random one if omitted
        token: Option<String>,
        /// The duration before the token is automatically deleted (e.g. 1s, 2m, 3h). If set
        /// to '0', the token will never expire
        #[arg(long, default_value = "24h")]
        ttl: String,
        /// A human friendly description of how this token is used
        #[arg(long)]
        description: Option<String>,
        /// Extra groups that this token will authenticate as when used for authentication
        #[arg(long, default_value = "system:bootstrappers:k3rs:default-node-token")]
        groups: String,
        /// Describes the ways in which this token can be used
        #[arg(long, default_value = "signing,authentication")]
        usages: String,
        #[command(flatten)]
        kubeconfig: KubeconfigArg,
    },
    /// List bootstrap tokens on the server
    List {
        #[command(flatten)]
        kubeconfig: KubeconfigArg,
    },
    /// Delete bootstrap tokens on the server
    Delete {
        /// Token ids (or whole tokens) to delete
        #[arg(required = true)]
        tokens: Vec<String>,
        #[command(flatten)]
        kubeconfig: KubeconfigArg,
    },
    /// Rotate the original server token with a new server token
    Rotate {
        /// Existing token used to join a server or agent to a cluster [default: the content
        /// of <data-dir>/server/token]
        #[arg(short = 't', long, env = "K3RS_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// New token that replaces the existing token
        #[arg(long, env = "K3RS_NEW_TOKEN", hide_env_values = true)]
        new_token: String,
        /// Server to connect to
        #[arg(
            short = 's',
            long,
            env = "K3RS_URL",
            default_value = "https://127.0.0.1:6443"
        )]
        server: String,
        /// Folder to hold state
        #[arg(short = 'd', long, env = "K3RS_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
    },
}

/// Runs the subcommand; tables and tokens go to stdout.
pub fn run(args: TokenArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        match args.command {
            TokenCommand::Create {
                token,
                ttl,
                description,
                groups,
                usages,
                kubeconfig,
            } => {
                let spec = CreateSpec {
                    token,
                    ttl: super::snapshot_config::parse_go_duration(&ttl)
                        .map_err(|e| anyhow::anyhow!("--ttl: {e}"))?,
                    description,
                    groups,
                    usages,
                };
                let printed = create(&kubeconfig, spec).await?;
                println!("{printed}");
                Ok(())
            }
            TokenCommand::List { kubeconfig } => {
                print!("{}", list(&kubeconfig).await?);
                Ok(())
            }
            TokenCommand::Delete { tokens, kubeconfig } => delete(&kubeconfig, &tokens).await,
            TokenCommand::Rotate {
                token,
                new_token,
                server,
                data_dir,
            } => rotate(token, &new_token, &server, &data_dir).await,
        }
    })
}

fn client(arg: &KubeconfigArg) -> anyhow::Result<(kube::Client, String)> {
    let path = arg
        .kubeconfig
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_KUBECONFIG));
    crate::kube_client::from_kubeconfig_file(&path).with_context(|| {
        format!(
            "reading the admin kubeconfig {} (is k3rs server installed here? use --kubeconfig)",
            path.display()
        )
    })
}

fn api_error(url: &str) -> impl Fn(kube::Error) -> anyhow::Error + '_ {
    move |e| match e {
        kube::Error::Api(status) => anyhow::anyhow!("{}", status.message),
        other => anyhow::anyhow!("cannot reach the k3rs server at {url}: {other}"),
    }
}

/// What `create` makes.
struct CreateSpec {
    token: Option<String>,
    ttl: Duration,
    description: Option<String>,
    groups: String,
    usages: String,
}

fn random_chars(n: usize) -> anyhow::Result<String> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = String::with_capacity(n);
    while out.len() < n {
        // 32 hex characters = 16 random bytes; 252 = 7 × 36 keeps the choice uniform.
        let hex = crate::pki::token::random_secret()?;
        let bytes = hex::decode(hex)?;
        for b in bytes {
            if b < 252 && out.len() < n {
                out.push(char::from(ALPHABET[usize::from(b % 36)]));
            }
        }
    }
    Ok(out)
}

/// The Secret for a bootstrap token.
fn bootstrap_secret(
    id: &str,
    secret: &str,
    spec: &CreateSpec,
    now: jiff::Timestamp,
) -> anyhow::Result<Value> {
    let mut string_data = serde_json::Map::new();
    let mut put = |k: &str, v: String| {
        string_data.insert(k.to_string(), Value::String(v));
    };
    put("token-id", id.to_string());
    put("token-secret", secret.to_string());
    if let Some(d) = &spec.description {
        put("description", d.clone());
    }
    if !spec.ttl.is_zero() {
        let span = jiff::SignedDuration::try_from(spec.ttl).context("--ttl is too long")?;
        let at = now.checked_add(span).context("--ttl is too long")?;
        put("expiration", at.round(jiff::Unit::Second)?.to_string());
    }
    for usage in spec
        .usages
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        if usage != "signing" && usage != "authentication" {
            bail!("--usages: {usage:?} is not one of signing, authentication");
        }
        put(&format!("usage-bootstrap-{usage}"), "true".to_string());
    }
    let groups: Vec<&str> = spec
        .groups
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .collect();
    for group in &groups {
        if !group.starts_with("system:bootstrappers:") {
            bail!("--groups: {group:?} must start with system:bootstrappers:");
        }
    }
    if !groups.is_empty() {
        put("auth-extra-groups", groups.join(","));
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": format!("{BOOTSTRAP_TOKEN_PREFIX}{id}"), "namespace": "kube-system"},
        "type": BOOTSTRAP_TOKEN_TYPE,
        "stringData": string_data,
    }))
}

async fn create(arg: &KubeconfigArg, spec: CreateSpec) -> anyhow::Result<String> {
    let (client, url) = client(arg)?;
    let (id, secret) = match &spec.token {
        Some(token) => {
            let token = token.trim();
            if !crate::pki::token::is_bootstrap_token(token) {
                bail!("the token must have the form [a-z0-9]{{6}}.[a-z0-9]{{16}}");
            }
            let (id, secret) = token.split_once('.').context("no '.' in the token")?;
            (id.to_string(), secret.to_string())
        }
        None => (random_chars(6)?, random_chars(16)?),
    };
    let body = bootstrap_secret(&id, &secret, &spec, jiff::Timestamp::now())?;
    let request = http::Request::post(SECRETS_PATH)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body)?)?;
    client
        .request_text(request)
        .await
        .map_err(api_error(&url))?;
    // The CA hash the agent checks: SHA-256 of /cacerts exactly as the server serves it.
    let cacerts = client
        .request_text(http::Request::get("/cacerts").body(Vec::new())?)
        .await
        .map_err(api_error(&url))?;
    let hash = crate::pki::ca_hash(cacerts.as_bytes());
    Ok(format!("K10{hash}::{id}.{secret}"))
}

fn decoded(secret: &Value, key: &str) -> Option<String> {
    let b64 = secret.get("data")?.get(key)?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    String::from_utf8(bytes).ok()
}

/// kubeadm's table of bootstrap tokens.
fn table(items: &[Value], now: jiff::Timestamp) -> String {
    let mut rows = vec![[
        "TOKEN".to_string(),
        "TTL".to_string(),
        "EXPIRES".to_string(),
        "USAGES".to_string(),
        "DESCRIPTION".to_string(),
        "EXTRA GROUPS".to_string(),
    ]];
    for item in items {
        if item.get("type").and_then(Value::as_str) != Some(BOOTSTRAP_TOKEN_TYPE) {
            continue;
        }
        let (Some(id), Some(secret)) = (decoded(item, "token-id"), decoded(item, "token-secret"))
        else {
            tracing::warn!("skipping a bootstrap-token Secret without token-id/token-secret");
            continue;
        };
        let (ttl, expires) = match decoded(item, "expiration") {
            None => ("<forever>".to_string(), "<never>".to_string()),
            Some(e) => match e.parse::<jiff::Timestamp>() {
                Ok(at) if at <= now => ("<invalid>".to_string(), e),
                Ok(at) => {
                    let secs = at.as_second() - now.as_second();
                    (human_ttl(secs), e)
                }
                Err(_) => ("<invalid>".to_string(), e),
            },
        };
        let mut usages: Vec<&str> = Vec::new();
        for usage in ["authentication", "signing"] {
            if decoded(item, &format!("usage-bootstrap-{usage}")).as_deref() == Some("true") {
                usages.push(usage);
            }
        }
        rows.push([
            format!("{id}.{secret}"),
            ttl,
            expires,
            usages.join(","),
            decoded(item, "description").unwrap_or_else(|| "<none>".to_string()),
            decoded(item, "auth-extra-groups").unwrap_or_default(),
        ]);
    }
    let mut widths = [0usize; 6];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (w, cell)) in widths.iter().zip(row).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}   "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// kubeadm's TTL column: the largest unit, rounded down (`23h`, `59m`, `30s`).
fn human_ttl(secs: i64) -> String {
    match secs {
        s if s >= 86_400 * 2 => format!("{}d", s / 86_400),
        s if s >= 3600 => format!("{}h", s / 3600),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

async fn list(arg: &KubeconfigArg) -> anyhow::Result<String> {
    let (client, url) = client(arg)?;
    let text = client
        .request_text(http::Request::get(SECRETS_PATH).body(Vec::new())?)
        .await
        .map_err(api_error(&url))?;
    let list: Value = serde_json::from_str(&text).context("decoding the Secret list")?;
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Ok(table(&items, jiff::Timestamp::now()))
}

async fn delete(arg: &KubeconfigArg, tokens: &[String]) -> anyhow::Result<()> {
    let (client, url) = client(arg)?;
    for token in tokens {
        // A whole token (`K10…::id.secret` or `id.secret`) names its id.
        let token = token.rsplit("::").next().unwrap_or(token);
        let id = token.split('.').next().unwrap_or(token);
        if id.len() != 6
            || !id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            bail!("{id:?} is not a bootstrap token id ([a-z0-9]{{6}})");
        }
        let request = http::Request::delete(format!("{SECRETS_PATH}/{BOOTSTRAP_TOKEN_PREFIX}{id}"))
            .body(Vec::new())?;
        client
            .request_text(request)
            .await
            .map_err(api_error(&url))?;
        println!("bootstrap token {id:?} deleted");
    }
    Ok(())
}

async fn rotate(
    token: Option<String>,
    new_token: &str,
    server: &str,
    data_dir: &std::path::Path,
) -> anyhow::Result<()> {
    use crate::agent::join;
    let token = match token.filter(|t| !t.trim().is_empty()) {
        Some(t) => t,
        None => {
            let path = data_dir.join("server").join(crate::pki::token::TOKEN_FILE);
            std::fs::read_to_string(&path)
                .with_context(|| format!("--token not given and cannot read {}", path.display()))?
        }
    };
    let parsed = crate::pki::parse_token(&token).context("invalid --token")?;
    let addr = join::server_addr(server)?;
    let ca = join::fetch_ca(&addr, parsed.ca_hash.as_deref()).await?;
    if !ca.pinned {
        eprintln!("Warning: --token has no K10<CA hash> part: the server's CA is not pinned");
    }
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("server:{}", parsed.secret));
    let reply = join::https_request(
        &addr,
        join::pinned_tls(&ca.pem)?,
        http::Method::PUT,
        "/v1-k3rs/token",
        &[
            ("Authorization", format!("Basic {basic}")),
            ("Content-Type", "application/json".to_string()),
        ],
        serde_json::to_vec(&json!({"token": new_token}))?,
    )
    .await?;
    match reply.status {
        200 => {
            println!(
                "Token rotated, restart k3rs nodes with new token: other servers need the new \
                 --token (or <data-dir>/server/token) before their next restart"
            );
            Ok(())
        }
        401 => bail!("the server rejected --token (401 Unauthorized): it is not the server token"),
        status => {
            let message = serde_json::from_str::<Value>(&reply.body)
                .ok()
                .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_else(|| reply.body.trim().to_string());
            bail!("rotating the token: {status} {message}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ttl: Duration) -> CreateSpec {
        CreateSpec {
            token: None,
            ttl,
            description: Some("for n1".into()),
            groups: "system:bootstrappers:k3rs:default-node-token".into(),
            usages: "signing,authentication".into(),
        }
    }

    #[test]
    fn secrets_have_kubes_fields() {
        let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        let s = bootstrap_secret(
            "abcdef",
            "0123456789abcdef",
            &spec(Duration::from_secs(86_400)),
            now,
        )
        .expect("valid");
        assert_eq!(s["metadata"]["name"], "bootstrap-token-abcdef");
        assert_eq!(s["type"], BOOTSTRAP_TOKEN_TYPE);
        let d = &s["stringData"];
        assert_eq!(d["expiration"], "2026-01-02T00:00:00Z");
        assert_eq!(d["usage-bootstrap-authentication"], "true");
        assert_eq!(d["usage-bootstrap-signing"], "true");
        assert_eq!(
            d["auth-extra-groups"],
            "system:bootstrappers:k3rs:default-node-token"
        );
        let forever = bootstrap_secret("abcdef", "0123456789abcdef", &spec(Duration::ZERO), now)
            .expect("valid");
        assert!(forever["stringData"].get("expiration").is_none());
        let mut bad = spec(Duration::ZERO);
        bad.groups = "system:masters".into();
        assert!(bootstrap_secret("abcdef", "0123456789abcdef", &bad, now).is_err());
        let mut bad = spec(Duration::ZERO);
        bad.usages = "everything".into();
        assert!(bootstrap_secret("abcdef", "0123456789abcdef", &bad, now).is_err());
    }

    #[test]
    fn random_tokens_have_the_bootstrap_form() {
        let token = format!(
            "{}.{}",
            random_chars(6).expect("id"),
            random_chars(16).expect("secret")
        );
        assert!(crate::pki::token::is_bootstrap_token(&token), "{token}");
    }

    #[test]
    fn list_table() {
        let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let item = json!({"type": BOOTSTRAP_TOKEN_TYPE, "data": {
            "token-id": b64("abcdef"), "token-secret": b64("0123456789abcdef"),
            "expiration": b64("2026-01-01T23:30:00Z"),
            "usage-bootstrap-authentication": b64("true"),
            "auth-extra-groups": b64("system:bootstrappers:k3rs:default-node-token")}});
        let other = json!({"type": "Opaque", "data": {}});
        let t = table(&[item, other], now);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2, "{t}");
        assert!(lines[0].starts_with("TOKEN"), "{t}");
        assert!(
            lines[0].contains("TTL") && lines[0].ends_with("EXTRA GROUPS"),
            "{t}"
        );
        assert!(
            lines[1].starts_with(
                "abcdef.0123456789abcdef   23h   2026-01-01T23:30:00Z   authentication   <none>"
            ),
            "{t}"
        );
        assert_eq!(human_ttl(59), "59s");
        assert_eq!(human_ttl(3 * 86_400), "3d");
    }
}
