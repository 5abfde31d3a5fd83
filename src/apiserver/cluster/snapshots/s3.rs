//! A small S3 client for snapshot upload, download, listing and deletion against any
//! S3-compatible endpoint: hyper's HTTP/1.1 client over plain TCP or tokio-rustls, with
//! SigV4 signing ([`super::sigv4`]), path- or virtual-host-style bucket addressing and a
//! per-request timeout.
//!
//! Owns the S3 wire protocol only (PUT/GET/DELETE object, ListObjectsV2); which
//! objects to write or remove is the snapshot manager's business.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::sigv4::{self, Credentials, EMPTY_SHA256};

/// S3 settings, from `--etcd-s3-*` / `--s3-*` flags (and `AWS_*` variables).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct S3Config {
    /// `host[:port]`, or a URL whose scheme decides http/https.
    pub endpoint: String,
    /// A PEM file with the CA that signed the endpoint's certificate.
    #[serde(default)]
    pub endpoint_ca: Option<String>,
    #[serde(default)]
    pub skip_ssl_verify: bool,
    #[serde(default)]
    pub access_key: String,
    #[serde(default)]
    pub secret_key: String,
    #[serde(default)]
    pub session_token: Option<String>,
    pub bucket: String,
    pub region: String,
    #[serde(default)]
    pub folder: String,
    /// Plain HTTP instead of HTTPS.
    #[serde(default)]
    pub insecure: bool,
    /// Per-request timeout, seconds.
    pub timeout_seconds: u64,
    /// Scheduled snapshots kept on S3.
    pub retention: usize,
    /// `auto`, `dns` or `path`.
    pub bucket_lookup_type: String,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("folder", &self.folder)
            .field("insecure", &self.insecure)
            .field("skip_ssl_verify", &self.skip_ssl_verify)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field("retention", &self.retention)
            .field("bucket_lookup_type", &self.bucket_lookup_type)
            .finish()
    }
}

impl S3Config {
    /// Checks what can be checked without the network.
    pub fn validate(&self) -> Result<(), String> {
        if self.bucket.trim().is_empty() {
            return Err("an S3 bucket is required (--etcd-s3-bucket / --s3-bucket)".into());
        }
        if self.endpoint.trim().is_empty() {
            return Err("the S3 endpoint must not be empty".into());
        }
        if !matches!(self.bucket_lookup_type.as_str(), "auto" | "dns" | "path") {
            return Err(format!(
                "bucket lookup type {:?} must be auto, dns or path",
                self.bucket_lookup_type
            ));
        }
        if self.timeout_seconds == 0 {
            return Err("the S3 timeout must be positive".into());
        }
        Ok(())
    }

    /// The object key for a snapshot file name: `<folder>/<name>`.
    pub fn key(&self, name: &str) -> String {
        let folder = self.folder.trim_matches('/');
        if folder.is_empty() {
            name.to_string()
        } else {
            format!("{folder}/{name}")
        }
    }

    /// `s3://bucket/key`, as `ls` shows it.
    pub fn location(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }
}

/// Why an S3 request failed.
#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    #[error("S3 {operation}: {message}")]
    Transport { operation: String, message: String },
    #[error("S3 {operation}: timed out after {seconds}s")]
    Timeout { operation: String, seconds: u64 },
    #[error("S3 {operation}: HTTP {status} {code}: {message}")]
    Status {
        operation: String,
        status: u16,
        code: String,
        message: String,
    },
    #[error("S3 configuration: {0}")]
    Config(String),
}

impl S3Error {
    pub fn is_not_found(&self) -> bool {
        matches!(self, S3Error::Status { status: 404, .. })
    }
}

/// One object from a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
    pub last_modified: String,
}

/// A connected-per-request S3 client.
pub struct S3Client {
    config: S3Config,
    scheme_https: bool,
    host: String,
    port: u16,
    path_style: bool,
    tls: Option<tokio_rustls::TlsConnector>,
}

enum Body {
    Empty,
    Bytes(Bytes),
    File { path: std::path::PathBuf, size: u64 },
}

impl S3Client {
    pub fn new(config: &S3Config) -> Result<S3Client, S3Error> {
        config.validate().map_err(S3Error::Config)?;
        let (scheme_https, rest) = match config.endpoint.split_once("://") {
            Some(("http", rest)) => (false, rest),
            Some(("https", rest)) => (true, rest),
            Some((other, _)) => {
                return Err(S3Error::Config(format!(
                    "endpoint scheme {other:?} must be http or https"
                )));
            }
            None => (!config.insecure, config.endpoint.as_str()),
        };
        let authority = rest.trim_end_matches('/');
        if authority.contains('/') || authority.is_empty() {
            return Err(S3Error::Config(format!(
                "endpoint {:?} must be host[:port]",
                config.endpoint
            )));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                let port = p.parse::<u16>().map_err(|_| {
                    S3Error::Config(format!("endpoint {:?} has a bad port", config.endpoint))
                })?;
                (h.to_string(), port)
            }
            _ => (authority.to_string(), if scheme_https { 443 } else { 80 }),
        };
        let dns_compatible = config
            .bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && host.parse::<std::net::IpAddr>().is_err();
        let path_style = match config.bucket_lookup_type.as_str() {
            "path" => true,
            "dns" => false,
            // Virtual-host style where AWS expects it; path style elsewhere (MinIO,
            // moto, Hetzner), which every S3-compatible store understands.
            _ => !(dns_compatible && host.ends_with("amazonaws.com")),
        };
        let tls = if scheme_https {
            Some(tls_connector(config)?)
        } else {
            None
        };
        Ok(S3Client {
            config: config.clone(),
            scheme_https,
            host,
            port,
            path_style,
            tls,
        })
    }

    pub fn config(&self) -> &S3Config {
        &self.config
    }

    fn host_header(&self) -> String {
        let host = if self.path_style {
            self.host.clone()
        } else {
            format!("{}.{}", self.config.bucket, self.host)
        };
        let default = if self.scheme_https { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    fn encoded_path(&self, key: &str) -> String {
        let key = sigv4::uri_encode(key, true);
        if self.path_style {
            if key.is_empty() {
                format!("/{}", self.config.bucket)
            } else {
                format!("/{}/{key}", self.config.bucket)
            }
        } else {
            format!("/{key}")
        }
    }

    /// Uploads a file, logging progress for large files.
    pub async fn put_file(&self, key: &str, path: &Path) -> Result<(), S3Error> {
        let operation = format!("upload of {}", self.config.location(key));
        let size = tokio::fs::metadata(path)
            .await
            .map_err(|e| transport(&operation, e))?
            .len();
        let digest = file_sha256(path)
            .await
            .map_err(|e| transport(&operation, e))?;
        self.send(
            "PUT",
            key,
            &[],
            Body::File {
                path: path.to_path_buf(),
                size,
            },
            &digest,
            &operation,
            None,
        )
        .await
        .map(drop)
    }

    pub async fn put_bytes(&self, key: &str, data: Vec<u8>) -> Result<(), S3Error> {
        let operation = format!("upload of {}", self.config.location(key));
        let digest = sigv4::sha256_hex(&data);
        self.send(
            "PUT",
            key,
            &[],
            Body::Bytes(Bytes::from(data)),
            &digest,
            &operation,
            None,
        )
        .await
        .map(drop)
    }

    pub async fn get_bytes(&self, key: &str) -> Result<Vec<u8>, S3Error> {
        let operation = format!("download of {}", self.config.location(key));
        self.send("GET", key, &[], Body::Empty, EMPTY_SHA256, &operation, None)
            .await
    }

    /// Downloads an object into `dest` (created; removed again on failure).
    pub async fn get_file(&self, key: &str, dest: &Path) -> Result<(), S3Error> {
        let operation = format!("download of {}", self.config.location(key));
        let result = self
            .send(
                "GET",
                key,
                &[],
                Body::Empty,
                EMPTY_SHA256,
                &operation,
                Some(dest),
            )
            .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(dest).await;
        }
        result.map(drop)
    }

    pub async fn delete(&self, key: &str) -> Result<(), S3Error> {
        let operation = format!("delete of {}", self.config.location(key));
        self.send(
            "DELETE",
            key,
            &[],
            Body::Empty,
            EMPTY_SHA256,
            &operation,
            None,
        )
        .await
        .map(drop)
    }

    /// Every object under `prefix` (ListObjectsV2, following continuation tokens).
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, S3Error> {
        let operation = format!("listing of {}", self.config.location(prefix));
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut query = vec![
                ("list-type".to_string(), "2".to_string()),
                ("prefix".to_string(), prefix.to_string()),
            ];
            if let Some(t) = &token {
                query.push(("continuation-token".to_string(), t.clone()));
            }
            let body = self
                .send(
                    "GET",
                    "",
                    &query,
                    Body::Empty,
                    EMPTY_SHA256,
                    &operation,
                    None,
                )
                .await?;
            let text = String::from_utf8_lossy(&body);
            for block in xml_blocks(&text, "Contents") {
                out.push(ObjectInfo {
                    key: xml_value(block, "Key").unwrap_or_default(),
                    size: xml_value(block, "Size")
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0),
                    last_modified: xml_value(block, "LastModified").unwrap_or_default(),
                });
            }
            let truncated = xml_value(&text, "IsTruncated").as_deref() == Some("true");
            token = xml_value(&text, "NextContinuationToken");
            if !truncated || token.is_none() {
                return Ok(out);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn send(
        &self,
        method: &str,
        key: &str,
        query: &[(String, String)],
        body: Body,
        payload_sha256: &str,
        operation: &str,
        download_to: Option<&Path>,
    ) -> Result<Vec<u8>, S3Error> {
        let seconds = self.config.timeout_seconds;
        let work = self.send_inner(
            method,
            key,
            query,
            body,
            payload_sha256,
            operation,
            download_to,
        );
        match tokio::time::timeout(Duration::from_secs(seconds), work).await {
            Ok(result) => result,
            Err(_) => Err(S3Error::Timeout {
                operation: operation.to_string(),
                seconds,
            }),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn send_inner(
        &self,
        method: &str,
        key: &str,
        query: &[(String, String)],
        body: Body,
        payload_sha256: &str,
        operation: &str,
        download_to: Option<&Path>,
    ) -> Result<Vec<u8>, S3Error> {
        let host_header = self.host_header();
        let path = self.encoded_path(key);
        let amz_date = jiff::Timestamp::now()
            .strftime("%Y%m%dT%H%M%SZ")
            .to_string();
        let mut headers = vec![
            ("host".to_string(), host_header.clone()),
            (
                "x-amz-content-sha256".to_string(),
                payload_sha256.to_string(),
            ),
            ("x-amz-date".to_string(), amz_date.clone()),
        ];
        if let Some(token) = self.config.session_token.as_ref().filter(|t| !t.is_empty()) {
            headers.push(("x-amz-security-token".to_string(), token.clone()));
        }
        let credentials = Credentials {
            access_key: self.config.access_key.clone(),
            secret_key: self.config.secret_key.clone(),
            session_token: self.config.session_token.clone(),
        };
        let authorization = sigv4::authorization(
            &sigv4::Request {
                method,
                encoded_path: &path,
                query,
                headers: &headers,
                payload_sha256,
            },
            &credentials,
            &self.config.region,
            &amz_date,
        );
        let query_string = sigv4::canonical_query(query);
        let uri = if query_string.is_empty() {
            path.clone()
        } else {
            format!("{path}?{query_string}")
        };
        let mut builder = http::Request::builder().method(method).uri(&uri);
        for (name, value) in &headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        if !self.config.access_key.is_empty() {
            builder = builder.header("authorization", authorization);
        }
        let fail = |message: String| S3Error::Transport {
            operation: operation.to_string(),
            message,
        };

        let tcp_host = self.host_header_for_connect();
        let stream = tokio::net::TcpStream::connect((tcp_host.as_str(), self.port))
            .await
            .map_err(|e| fail(format!("connecting to {tcp_host}:{}: {e}", self.port)))?;
        let _ = stream.set_nodelay(true);
        let io: Box<dyn Io> = match &self.tls {
            Some(connector) => {
                let name = rustls::pki_types::ServerName::try_from(tcp_host.clone())
                    .map_err(|e| fail(format!("bad server name {tcp_host}: {e}")))?;
                Box::new(
                    connector
                        .connect(name, stream)
                        .await
                        .map_err(|e| fail(format!("TLS handshake with {tcp_host}: {e}")))?,
                )
            }
            None => Box::new(stream),
        };
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
                .await
                .map_err(|e| fail(format!("HTTP handshake: {e}")))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });

        type BoxBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;
        let request_body: BoxBody = match body {
            Body::Empty => Full::new(Bytes::new())
                .map_err(|never| match never {})
                .boxed(),
            Body::Bytes(b) => {
                builder = builder.header("content-length", b.len());
                Full::new(b).map_err(|never| match never {}).boxed()
            }
            Body::File { path, size } => {
                builder = builder.header("content-length", size);
                let (tx, rx) =
                    tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
                let label = operation.to_string();
                tokio::spawn(async move { stream_file(path, size, tx, label).await });
                StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)).boxed()
            }
        };
        let request = builder
            .body(request_body)
            .map_err(|e| fail(format!("building the request: {e}")))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| fail(format!("{e}")))?;
        let status = response.status();
        let mut incoming = response.into_body();
        if status.is_success()
            && let Some(dest) = download_to
        {
            let mut file = tokio::fs::File::create(dest)
                .await
                .map_err(|e| fail(format!("creating {}: {e}", dest.display())))?;
            while let Some(frame) = incoming.frame().await {
                let frame = frame.map_err(|e| fail(format!("reading the response: {e}")))?;
                if let Ok(data) = frame.into_data() {
                    file.write_all(&data)
                        .await
                        .map_err(|e| fail(format!("writing {}: {e}", dest.display())))?;
                }
            }
            file.sync_all()
                .await
                .map_err(|e| fail(format!("syncing {}: {e}", dest.display())))?;
            return Ok(Vec::new());
        }
        let data = incoming
            .collect()
            .await
            .map_err(|e| fail(format!("reading the response: {e}")))?
            .to_bytes();
        if status.is_success() {
            return Ok(data.to_vec());
        }
        let text = String::from_utf8_lossy(&data);
        Err(S3Error::Status {
            operation: operation.to_string(),
            status: status.as_u16(),
            code: xml_value(&text, "Code")
                .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string()),
            message: xml_value(&text, "Message").unwrap_or_default(),
        })
    }

    /// The host to connect to (and to verify TLS against).
    fn host_header_for_connect(&self) -> String {
        let host = if self.path_style {
            self.host.clone()
        } else {
            format!("{}.{}", self.config.bucket, self.host)
        };
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string()
    }
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// Feeds a file into the request body in 1 MiB chunks, logging every 10%.
async fn stream_file(
    path: std::path::PathBuf,
    size: u64,
    tx: tokio::sync::mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>,
    label: String,
) {
    const LARGE: u64 = 16 * 1024 * 1024;
    let mut file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) => {
            let _ = tx.send(Err(e)).await;
            return;
        }
    };
    let mut sent = 0u64;
    let mut next_report = size / 10;
    loop {
        let mut buf = vec![0u8; 1024 * 1024];
        match file.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                buf.truncate(n);
                sent += n as u64;
                if tx.send(Ok(Frame::data(Bytes::from(buf)))).await.is_err() {
                    return;
                }
                if size >= LARGE && sent >= next_report {
                    tracing::info!(
                        "{label}: {} of {} MiB ({}%)",
                        sent / (1024 * 1024),
                        size / (1024 * 1024),
                        sent * 100 / size.max(1)
                    );
                    next_report = sent + size / 10;
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        }
    }
}

fn transport(operation: &str, e: std::io::Error) -> S3Error {
    S3Error::Transport {
        operation: operation.to_string(),
        message: e.to_string(),
    }
}

/// The hex SHA-256 of a file, read in chunks.
pub async fn file_sha256(path: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let mut file = tokio::fs::File::open(path).await?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1024 * 1024];
    loop {
        let n = file.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

fn tls_connector(config: &S3Config) -> Result<tokio_rustls::TlsConnector, S3Error> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| S3Error::Config(format!("TLS versions: {e}")))?;
    let client = if config.skip_ssl_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(
                crate::pki::insecure::AcceptAnyServerCertificate::new(provider),
            )
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match config.endpoint_ca.as_deref().filter(|p| !p.is_empty()) {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    S3Error::Config(format!("reading --etcd-s3-endpoint-ca {path}: {e}"))
                })?;
                for cert in CertificateDer::pem_slice_iter(&pem) {
                    let cert = cert.map_err(|e| {
                        S3Error::Config(format!("parsing --etcd-s3-endpoint-ca {path}: {e}"))
                    })?;
                    roots.add(cert).map_err(|e| {
                        S3Error::Config(format!("adding --etcd-s3-endpoint-ca {path}: {e}"))
                    })?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                for cert in found.certs {
                    let _ = roots.add(cert);
                }
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    Ok(tokio_rustls::TlsConnector::from(Arc::new(client)))
}

/// The inner texts of every `<tag>…</tag>` element (S3's XML is flat and regular).
fn xml_blocks<'a>(text: &'a str, tag: &str) -> Vec<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        out.push(&after[..end]);
        rest = &after[end + close.len()..];
    }
    out
}

/// The unescaped text of the first `<tag>` element.
fn xml_value(text: &str, tag: &str) -> Option<String> {
    xml_blocks(text, tag).first().map(|raw| {
        raw.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> S3Config {
        S3Config {
            endpoint: "s3.amazonaws.com".into(),
            endpoint_ca: None,
            skip_ssl_verify: false,
            access_key: "AK".into(),
            secret_key: "SK".into(),
            session_token: None,
            bucket: "snaps".into(),
            region: "us-east-1".into(),
            folder: "/k3rs/".into(),
            insecure: false,
            timeout_seconds: 300,
            retention: 5,
            bucket_lookup_type: "auto".into(),
        }
    }

    #[test]
    fn addressing_styles() {
        let c = S3Client::new(&config()).expect("client");
        assert!(
            !c.path_style,
            "AWS with a DNS-compatible bucket uses virtual hosts"
        );
        assert_eq!(c.host_header(), "snaps.s3.amazonaws.com");
        assert_eq!(c.encoded_path("k3rs/a b"), "/k3rs/a%20b");
        assert_eq!(c.config.key("x"), "k3rs/x");

        let mut local = config();
        local.endpoint = "127.0.0.1:9000".into();
        local.insecure = true;
        let c = S3Client::new(&local).expect("client");
        assert!(c.path_style && !c.scheme_https);
        assert_eq!(c.host_header(), "127.0.0.1:9000");
        assert_eq!(c.encoded_path("k"), "/snaps/k");
        assert_eq!(c.encoded_path(""), "/snaps");

        let mut url = config();
        url.endpoint = "http://minio.local".into();
        url.bucket_lookup_type = "dns".into();
        let c = S3Client::new(&url).expect("client");
        assert!(!c.path_style && !c.scheme_https && c.port == 80);
        assert_eq!(c.host_header(), "snaps.minio.local");
    }

    #[test]
    fn bad_configuration_is_refused() {
        let mut c = config();
        c.bucket = String::new();
        assert!(
            S3Client::new(&c)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
                .contains("bucket is required")
        );
        let mut c = config();
        c.bucket_lookup_type = "virtual".into();
        assert!(S3Client::new(&c).is_err());
        let mut c = config();
        c.endpoint = "ftp://x".into();
        assert!(S3Client::new(&c).is_err());
        let mut c = config();
        c.endpoint = "host:notaport".into();
        assert!(S3Client::new(&c).is_err());
        let mut c = config();
        c.endpoint = "host/path".into();
        assert!(S3Client::new(&c).is_err());
    }

    #[test]
    fn list_and_error_xml() {
        let xml = "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k3rs/a&amp;b</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified><Size>42</Size></Contents><Contents><Key>k3rs/c</Key><Size>7</Size></Contents></ListBucketResult>";
        let blocks = xml_blocks(xml, "Contents");
        assert_eq!(blocks.len(), 2);
        assert_eq!(xml_value(blocks[0], "Key").as_deref(), Some("k3rs/a&b"));
        assert_eq!(xml_value(blocks[1], "Size").as_deref(), Some("7"));
        let err = "<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>";
        assert_eq!(xml_value(err, "Code").as_deref(), Some("NoSuchBucket"));
    }
}
