//! A throwaway etcd 3.4 server and a minimal gRPC KV client, for benchmarks that
//! compare k3rs with the reference implementation.
//!
//! Owns: the `etcd` child process (started from `/usr/bin/etcd`, Debian package
//! `etcd-server`), its temporary data directory and log file, and the hand-written
//! protobuf messages of `etcdserverpb.KV` (`Put`, `Range`). No protoc, no build script:
//! the messages are `prost` structs whose field numbers match etcd's `rpc.proto` and
//! `kv.proto`, sent with `tonic::client::Grpc` over one shared HTTP/2 `Channel`.
//!
//! The server runs with etcd's default durability (every write is fsynced; no
//! `--unsafe-no-fsync`), on free loopback ports, and is killed when the
//! [`EtcdServer`] is dropped.
//!
//! Include it from a bench with `#[path = "support/etcd.rs"] mod etcd;`, beside
//! `#[path = "support/stats.rs"] mod stats;` (its `log_tail`).

#![allow(dead_code)] // each bench uses a different subset

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

/// Where Debian's `etcd-server` package installs the server.
pub const ETCD_BINARY: &str = "/usr/bin/etcd";

/// How long `start` waits for the server to answer a request.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How many times `start` retries when etcd exits during startup (for instance
/// because another process grabbed one of the ports picked for it).
const START_ATTEMPTS: usize = 3;

/// A running etcd server with a private data directory; killed on drop.
pub struct EtcdServer {
    child: Child,
    client_url: String,
    channel: Channel,
    version: String,
    log_path: PathBuf,
    // Dropped after `child` is killed (see `Drop`), removing the data directory.
    dir: tempfile::TempDir,
}

impl EtcdServer {
    /// Starts a fresh single-member etcd on free loopback ports and waits (up to
    /// 20 s) until it answers a gRPC request. Must be called inside a tokio runtime.
    pub async fn start() -> Result<EtcdServer> {
        if !Path::new(ETCD_BINARY).exists() {
            bail!(
                "{ETCD_BINARY} not found; the etcd reference benchmarks need etcd 3.4: \
                 run `apt-get install -y etcd-server`"
            );
        }
        let version = etcd_version()?;
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            match Self::start_once(&version).await {
                Ok(server) => return Ok(server),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.expect("at least one start attempt was made"))
    }

    async fn start_once(version: &str) -> Result<EtcdServer> {
        let dir = tempfile::Builder::new()
            .prefix("etcd-bench-")
            .tempdir()
            .context("creating a temporary directory for etcd")?;
        let data_dir = dir.path().join("data");
        let log_path = dir.path().join("etcd.log");
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let log_file = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let log_file_err = log_file
            .try_clone()
            .with_context(|| format!("duplicating the handle of {}", log_path.display()))?;

        let child = Command::new(ETCD_BINARY)
            .arg("--name=bench")
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=bench={peer_url}"))
            .arg("--initial-cluster-state=new")
            .arg("--logger=zap")
            .arg("--log-level=warn")
            .arg(format!("--log-outputs={}", log_path.display()))
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_file_err)
            .spawn()
            .with_context(|| format!("starting {ETCD_BINARY}"))?;

        // From here on, dropping `server` kills the child.
        let channel = Endpoint::from_shared(client_url.clone())
            .context("building the etcd endpoint")?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .connect_lazy();
        let mut server = EtcdServer {
            child,
            client_url,
            channel,
            version: version.to_owned(),
            log_path,
            dir,
        };
        server.wait_until_ready().await?;
        Ok(server)
    }

    async fn wait_until_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let client = self.client();
        loop {
            if let Some(status) = self
                .child
                .try_wait()
                .context("checking whether etcd is still running")?
            {
                bail!(
                    "etcd exited during startup ({status}); its log {} ends with:\n{}",
                    self.log_path.display(),
                    self.log_tail()
                );
            }
            let attempt =
                tokio::time::timeout(Duration::from_secs(2), client.get(b"/bench-ready")).await;
            let error = match attempt {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => e,
                Err(_) => anyhow::anyhow!("request timed out"),
            };
            if Instant::now() >= deadline {
                return Err(error.context(format!(
                    "etcd at {} did not answer within {START_TIMEOUT:?}; its log {} ends with:\n{}",
                    self.client_url,
                    self.log_path.display(),
                    self.log_tail()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A client on the server's shared connection (cheap; clone one per task).
    pub fn client(&self) -> KvClient {
        KvClient::new(self.channel.clone())
    }

    /// `http://127.0.0.1:<port>`.
    pub fn client_url(&self) -> &str {
        &self.client_url
    }

    /// The server's version, e.g. `3.4.23`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The data directory (`member/snap/db` and `member/wal` live below it).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The last lines of etcd's log, for error messages.
    pub fn log_tail(&self) -> String {
        crate::stats::log_tail(&self.log_path)
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        // Errors here mean the process is already gone; nothing else to clean up.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `etcd --version` and returns the version number (`3.4.23`).
fn etcd_version() -> Result<String> {
    let output = Command::new(ETCD_BINARY)
        .arg("--version")
        .output()
        .with_context(|| format!("running {ETCD_BINARY} --version"))?;
    if !output.status.success() {
        bail!(
            "{ETCD_BINARY} --version failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|line| line.strip_prefix("etcd Version:"))
        .map(|v| v.trim().to_owned())
        .with_context(|| format!("unexpected output of {ETCD_BINARY} --version: {text}"))
}

/// A loopback port that was free a moment ago (bound to port 0, then released).
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a free loopback port")?;
    Ok(listener
        .local_addr()
        .context("reading the address of a bound socket")?
        .port())
}

/// The smallest key greater than every key starting with `prefix` (etcd's
/// `range_end` for a prefix query); `[0]` means "to the end of the keyspace".
pub fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A minimal client of etcd's `KV` service. Clones share one HTTP/2 connection.
#[derive(Clone)]
pub struct KvClient {
    grpc: tonic::client::Grpc<Channel>,
}

impl KvClient {
    /// A client on `channel` (answers of any size are accepted, as ranges can be big).
    pub fn new(channel: Channel) -> Self {
        KvClient {
            grpc: tonic::client::Grpc::new(channel).max_decoding_message_size(usize::MAX),
        }
    }

    /// `KV/Put`.
    pub async fn put_request(&self, request: pb::PutRequest) -> Result<pb::PutResponse> {
        self.unary("/etcdserverpb.KV/Put", request).await
    }

    /// `KV/Range`.
    pub async fn range_request(&self, request: pb::RangeRequest) -> Result<pb::RangeResponse> {
        self.unary("/etcdserverpb.KV/Range", request).await
    }

    /// Sets `key` to `value`; returns the revision of the write.
    pub async fn put(&self, key: &[u8], value: Vec<u8>) -> Result<i64> {
        let response = self
            .put_request(pb::PutRequest {
                key: key.to_vec(),
                value,
                ..Default::default()
            })
            .await?;
        Ok(response.header.map_or(0, |h| h.revision))
    }

    /// The current value of `key`, if any (linearizable read).
    pub async fn get(&self, key: &[u8]) -> Result<Option<pb::KeyValue>> {
        let response = self
            .range_request(pb::RangeRequest {
                key: key.to_vec(),
                ..Default::default()
            })
            .await?;
        Ok(response.kvs.into_iter().next())
    }

    /// All keys starting with `prefix`, in key order (linearizable read).
    pub async fn range_prefix(&self, prefix: &[u8]) -> Result<pb::RangeResponse> {
        self.range_request(pb::RangeRequest {
            key: prefix.to_vec(),
            range_end: prefix_range_end(prefix),
            ..Default::default()
        })
        .await
    }

    async fn unary<Req, Resp>(&self, path: &'static str, request: Req) -> Result<Resp>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = self.grpc.clone();
        grpc.ready()
            .await
            .with_context(|| format!("etcd connection not ready for {path}"))?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        let response = grpc
            .unary(
                tonic::Request::new(request),
                PathAndQuery::from_static(path),
                codec,
            )
            .await
            .with_context(|| format!("etcd {path} failed"))?;
        Ok(response.into_inner())
    }
}

/// Hand-written messages of etcd's API (`etcdserverpb` in `rpc.proto`, `mvccpb` in
/// `kv.proto`), only the ones the benches use. Field numbers are etcd's.
pub mod pb {
    /// `etcdserverpb.ResponseHeader`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResponseHeader {
        #[prost(uint64, tag = "1")]
        pub cluster_id: u64,
        #[prost(uint64, tag = "2")]
        pub member_id: u64,
        #[prost(int64, tag = "3")]
        pub revision: i64,
        #[prost(uint64, tag = "4")]
        pub raft_term: u64,
    }

    /// `mvccpb.KeyValue`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(bytes = "vec", tag = "1")]
        pub key: Vec<u8>,
        #[prost(int64, tag = "2")]
        pub create_revision: i64,
        #[prost(int64, tag = "3")]
        pub mod_revision: i64,
        #[prost(int64, tag = "4")]
        pub version: i64,
        #[prost(bytes = "vec", tag = "5")]
        pub value: Vec<u8>,
        #[prost(int64, tag = "6")]
        pub lease: i64,
    }

    /// `etcdserverpb.PutRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PutRequest {
        #[prost(bytes = "vec", tag = "1")]
        pub key: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub value: Vec<u8>,
        #[prost(int64, tag = "3")]
        pub lease: i64,
        #[prost(bool, tag = "4")]
        pub prev_kv: bool,
        #[prost(bool, tag = "5")]
        pub ignore_value: bool,
        #[prost(bool, tag = "6")]
        pub ignore_lease: bool,
    }

    /// `etcdserverpb.PutResponse`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PutResponse {
        #[prost(message, optional, tag = "1")]
        pub header: Option<ResponseHeader>,
        #[prost(message, optional, tag = "2")]
        pub prev_kv: Option<KeyValue>,
    }

    /// `etcdserverpb.RangeRequest` (`sort_order` and `sort_target` are enums on the
    /// wire, carried here as their `int32` values; 0 means none / by key).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RangeRequest {
        #[prost(bytes = "vec", tag = "1")]
        pub key: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub range_end: Vec<u8>,
        #[prost(int64, tag = "3")]
        pub limit: i64,
        #[prost(int64, tag = "4")]
        pub revision: i64,
        #[prost(int32, tag = "5")]
        pub sort_order: i32,
        #[prost(int32, tag = "6")]
        pub sort_target: i32,
        #[prost(bool, tag = "7")]
        pub serializable: bool,
        #[prost(bool, tag = "8")]
        pub keys_only: bool,
        #[prost(bool, tag = "9")]
        pub count_only: bool,
        #[prost(int64, tag = "10")]
        pub min_mod_revision: i64,
        #[prost(int64, tag = "11")]
        pub max_mod_revision: i64,
        #[prost(int64, tag = "12")]
        pub min_create_revision: i64,
        #[prost(int64, tag = "13")]
        pub max_create_revision: i64,
    }

    /// `etcdserverpb.RangeResponse`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RangeResponse {
        #[prost(message, optional, tag = "1")]
        pub header: Option<ResponseHeader>,
        #[prost(message, repeated, tag = "2")]
        pub kvs: Vec<KeyValue>,
        #[prost(bool, tag = "3")]
        pub more: bool,
        #[prost(int64, tag = "4")]
        pub count: i64,
    }
}
