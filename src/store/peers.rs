//! Raft traffic between members over mutual TLS, on the peer port (2380 by default).
//!
//! Sending: [`PeerNetwork`] is the driver's [`Transport`]. Each peer has a bounded queue and
//! one task owning one TLS connection to it; the task takes everything queued (a batch),
//! writes it as frames and flushes once, so a busy leader sends few large writes. A full
//! queue drops messages (raft retransmits what matters; a dropped snapshot is reported as
//! failed). A failed connect or write reports the peer unreachable to raft, which then
//! probes it instead of streaming appends, and fails any snapshot of the batch. A snapshot
//! that is a file ([`super::snapshot_transfer`]) streams on a connection of its own, in
//! chunks, and is reported finished once the receiver says it stepped it, failed
//! otherwise — raft-rs leaves a follower in snapshot state forever unless one of the two is
//! reported.
//!
//! Receiving: [`serve`] accepts connections whose client certificate the peer CA signed,
//! reads frames (each bounded), checks and decodes them ([`super::peer_wire`]) and steps
//! them into the local member. A connection that sends anything malformed is closed. A
//! message from a member removed from the group is answered with [`REMOVED_NOTICE`] and
//! the connection closed; a sender that reads the notice reports it to its driver, which
//! stops the member (so a removed server cannot disrupt the group or serve stale reads).
//!
//! The wire: a connection starts with [`PREAMBLE`] and the sender's 16-byte cluster id
//! (zeros while unknown; a receiver of another cluster answers [`OTHER_CLUSTER_NOTICE`]);
//! then frames of a 4-byte big-endian
//! length and that many bytes of an encoded `eraftpb::Message`, at most
//! [`MAX_FRAME_BYTES`] each. A connection that starts with
//! [`snapshot_transfer::SNAPSHOT_PREAMBLE`] carries one snapshot stream instead.
//!
//! Owns the peer sockets and queues; reaches the store only through
//! [`Store::receive_raft_message`] (through [`store_sink`]) and the driver's feedback
//! inputs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use raft::eraftpb::{Message, MessageType};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::peer_wire;
use super::snapshot_transfer::{self, SnapshotFile};
use super::transport::{PeerFeedback, Transport};
use super::{ClusterId, Store};

/// The first bytes of every peer connection: protocol and version.
pub const PREAMBLE: &[u8; 8] = b"K3RSRFT2";
/// The only bytes a receiver ever writes back on a message connection: "you were removed
/// from the group" (etcd answers a removed member's messages the same way). The sender
/// then stops its member for good.
pub const REMOVED_NOTICE: &[u8; 8] = b"K3RSGONE";
/// The answer to a sender of another cluster (its cluster id, sent after the preamble,
/// differs from the receiver's): its data belongs to a cluster that was reset or
/// restored without it. The sender then stops its member.
pub const OTHER_CLUSTER_NOTICE: &[u8; 8] = b"K3RSCLID";

/// The receiver's own cluster id, asked per connection.
pub type ClusterIdSource = Arc<dyn Fn() -> Option<ClusterId> + Send + Sync>;
/// The largest frame accepted: a batch of entries is at most 1 MiB (raft's
/// `max_size_per_msg`) unless one entry is larger, and an entry is at most a request body.
/// Snapshots stream in chunks on their own connections.
pub const MAX_FRAME_BYTES: usize = 64 << 20;
/// Messages that may wait for one peer; more are dropped.
const QUEUE_LEN: usize = 4096;
/// Most messages written per flush.
const BATCH_LEN: usize = 512;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// A snapshot of this size gets this much extra time to be written, per MiB.
const WRITE_TIMEOUT_PER_MIB: Duration = Duration::from_millis(100);
/// After a failed connect, wait this long before trying again (messages meanwhile are
/// dropped and the peer reported unreachable).
const RECONNECT_BACKOFF: Duration = Duration::from_millis(200);

/// TLS settings of the peer port: both sides present a certificate of the peer CA.
#[derive(Clone)]
pub struct PeerTls {
    pub client: Arc<rustls::ClientConfig>,
    pub server: Arc<rustls::ServerConfig>,
}

impl PeerTls {
    /// Both sides from PEM: the peer CA and this member's peer certificate and key (one
    /// certificate valid for serving and as a client).
    pub fn from_pem(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<PeerTls, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| format!("parsing the peer CA: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("adding the peer CA: {e}"))?;
        }
        let roots = Arc::new(roots);
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("parsing the peer certificate: {e}"))?;
        let key = || {
            PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
                .map_err(|e| format!("parsing the peer key: {e}"))
        };
        let client = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_root_certificates(roots.clone())
            .with_client_auth_cert(chain.clone(), key()?)
            .map_err(|e| format!("the peer certificate as a client: {e}"))?;
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| format!("the peer client verifier: {e}"))?;
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key()?)
            .map_err(|e| format!("the peer certificate as a server: {e}"))?;
        Ok(PeerTls {
            client: Arc::new(client),
            server: Arc::new(server),
        })
    }
}

/// The sending half: one queue and task per peer, created when a peer's address is known.
pub struct PeerNetwork {
    runtime: tokio::runtime::Handle,
    connector: tokio_rustls::TlsConnector,
    /// The address outgoing connections come from (the member's own peer address), so
    /// that peers, firewalls and tests see one address per member.
    source: Option<std::net::IpAddr>,
    addresses: HashMap<u64, SocketAddr>,
    queues: HashMap<u64, PeerQueue>,
    feedback: Option<PeerFeedback>,
    /// Where the store keeps outgoing snapshot files (its directory).
    snapshot_dir: Option<std::path::PathBuf>,
    /// This member's cluster id, sent on every message connection.
    cluster_id: Arc<std::sync::Mutex<Option<ClusterId>>>,
}

struct PeerQueue {
    address: SocketAddr,
    sender: mpsc::Sender<Message>,
}

impl PeerNetwork {
    pub fn new(runtime: tokio::runtime::Handle, tls: &PeerTls) -> PeerNetwork {
        PeerNetwork {
            runtime,
            connector: tokio_rustls::TlsConnector::from(tls.client.clone()),
            source: None,
            addresses: HashMap::new(),
            queues: HashMap::new(),
            feedback: None,
            snapshot_dir: None,
            cluster_id: Arc::default(),
        }
    }

    /// Snapshots whose data names a file stream that file from `dir` (the store's
    /// directory); without it they can only travel inside the message.
    pub fn with_snapshot_dir(mut self, dir: std::path::PathBuf) -> PeerNetwork {
        self.snapshot_dir = Some(dir);
        self
    }

    /// Connects to peers from `ip` (this member's advertised peer address).
    pub fn with_source(mut self, ip: std::net::IpAddr) -> PeerNetwork {
        self.source = Some(ip);
        self
    }

    fn queue_for(&mut self, to: u64) -> Option<&PeerQueue> {
        let address = *self.addresses.get(&to)?;
        let stale = self
            .queues
            .get(&to)
            .is_some_and(|q| q.address != address || q.sender.is_closed());
        if stale {
            self.queues.remove(&to);
        }
        if !self.queues.contains_key(&to) {
            let feedback = self.feedback.clone()?;
            let (sender, receiver) = mpsc::channel(QUEUE_LEN);
            let worker = PeerWorker {
                peer: to,
                dialer: Arc::new(Dialer {
                    address,
                    source: self.source,
                    connector: self.connector.clone(),
                    cluster_id: self.cluster_id.clone(),
                }),
                feedback,
                snapshot_dir: self.snapshot_dir.clone(),
            };
            self.runtime.spawn(worker.run(receiver));
            self.queues.insert(to, PeerQueue { address, sender });
        }
        self.queues.get(&to)
    }
}

impl Transport for PeerNetwork {
    fn attach(&mut self, feedback: PeerFeedback) {
        self.feedback = Some(feedback);
    }

    fn set_cluster_id(&mut self, id: Option<ClusterId>) {
        if let Ok(mut current) = self.cluster_id.lock() {
            *current = id;
        }
    }

    fn set_peers(&mut self, peers: &[(u64, SocketAddr)]) {
        self.addresses = peers.iter().copied().collect();
        // Dropping a queue's sender ends its task once the queue is drained.
        let addresses = &self.addresses;
        self.queues
            .retain(|id, q| addresses.get(id) == Some(&q.address));
    }

    fn send(&mut self, messages: Vec<Message>) {
        for message in messages {
            let to = message.to;
            let is_snapshot = message.get_msg_type() == MessageType::MsgSnapshot;
            let feedback = self.feedback.clone();
            let Some(queue) = self.queue_for(to) else {
                tracing::debug!(peer = to, "no address for raft peer; message dropped");
                if let Some(feedback) = feedback {
                    feedback.unreachable(to, is_snapshot);
                }
                continue;
            };
            if let Err(e) = queue.sender.try_send(message) {
                let full = matches!(e, mpsc::error::TrySendError::Full(_));
                tracing::debug!(peer = to, full, "raft peer queue refused a message");
                if let Some(feedback) = feedback {
                    feedback.unreachable(to, is_snapshot);
                }
            }
        }
    }
}

/// The task that owns the connection to one peer.
struct PeerWorker {
    peer: u64,
    dialer: Arc<Dialer>,
    feedback: PeerFeedback,
    snapshot_dir: Option<std::path::PathBuf>,
}

/// How to open a connection to one peer.
struct Dialer {
    address: SocketAddr,
    source: Option<std::net::IpAddr>,
    connector: tokio_rustls::TlsConnector,
    cluster_id: Arc<std::sync::Mutex<Option<ClusterId>>>,
}

type PeerStream = tokio_rustls::client::TlsStream<TcpStream>;

/// An open message connection: the writing half, and the task that reads the other half
/// for a [`REMOVED_NOTICE`] (stopped with the connection).
struct Connection {
    writer: tokio::io::WriteHalf<PeerStream>,
    notice_reader: tokio::task::JoinHandle<()>,
}

impl Connection {
    fn new(stream: PeerStream, peer: u64, feedback: PeerFeedback) -> Connection {
        let (mut reader, writer) = tokio::io::split(stream);
        let notice_reader = tokio::spawn(async move {
            let mut notice = [0u8; 8];
            if reader.read_exact(&mut notice).await.is_ok() {
                if &notice == REMOVED_NOTICE {
                    feedback.removed_from_group(peer);
                } else if &notice == OTHER_CLUSTER_NOTICE {
                    feedback.other_cluster(peer);
                }
            }
        });
        Connection {
            writer,
            notice_reader,
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.notice_reader.abort();
    }
}

impl PeerWorker {
    async fn run(self, mut queue: mpsc::Receiver<Message>) {
        let mut connection: Option<Connection> = None;
        let mut last_failure: Option<Instant> = None;
        let mut reported_down = false;
        while let Some(first) = queue.recv().await {
            let mut batch = vec![first];
            while batch.len() < BATCH_LEN {
                match queue.try_recv() {
                    Ok(message) => batch.push(message),
                    Err(_) => break,
                }
            }
            batch.retain(|message| !self.stream_if_file(message));
            if batch.is_empty() {
                continue;
            }
            if connection.is_none() {
                let backing_off = last_failure.is_some_and(|t| t.elapsed() < RECONNECT_BACKOFF);
                if !backing_off {
                    match self.dialer.connect_for_messages().await {
                        Ok(stream) => {
                            if reported_down {
                                tracing::info!(peer = self.peer, address = %self.dialer.address, "raft peer reachable again");
                                reported_down = false;
                            }
                            connection =
                                Some(Connection::new(stream, self.peer, self.feedback.clone()));
                        }
                        Err(e) => {
                            last_failure = Some(Instant::now());
                            if !reported_down {
                                tracing::warn!(peer = self.peer, address = %self.dialer.address, error = %e, "raft peer unreachable");
                                reported_down = true;
                            }
                        }
                    }
                }
            }
            let Some(Connection { writer: stream, .. }) = connection.as_mut() else {
                self.fail(&batch);
                continue;
            };
            let (bytes, snapshot_bytes) = encode_batch(&batch);
            let allowed = WRITE_TIMEOUT + WRITE_TIMEOUT_PER_MIB * (snapshot_bytes >> 20) as u32;
            let written = tokio::time::timeout(allowed, async {
                stream.write_all(&bytes).await?;
                stream.flush().await
            })
            .await;
            match written {
                Ok(Ok(())) => {
                    for message in batch
                        .iter()
                        .filter(|m| m.get_msg_type() == MessageType::MsgSnapshot)
                    {
                        self.feedback.snapshot_finished(message.to);
                    }
                }
                Ok(Err(e)) => {
                    tracing::debug!(peer = self.peer, error = %e, "writing to raft peer failed");
                    connection = None;
                    last_failure = Some(Instant::now());
                    self.fail(&batch);
                }
                Err(_) => {
                    tracing::debug!(peer = self.peer, "writing to raft peer timed out");
                    connection = None;
                    last_failure = Some(Instant::now());
                    self.fail(&batch);
                }
            }
        }
    }

    /// Tells raft that nothing of `batch` arrived.
    fn fail(&self, batch: &[Message]) {
        let snapshot = batch
            .iter()
            .any(|m| m.get_msg_type() == MessageType::MsgSnapshot);
        self.feedback.unreachable(self.peer, snapshot);
    }

    /// Starts streaming `message` on a connection of its own if it is a snapshot whose
    /// data names a file; says whether it did.
    fn stream_if_file(&self, message: &Message) -> bool {
        if message.get_msg_type() != MessageType::MsgSnapshot {
            return false;
        }
        let Some(file) = SnapshotFile::decode(&message.get_snapshot().data) else {
            return false;
        };
        let Some(dir) = self.snapshot_dir.as_ref() else {
            tracing::error!(
                peer = self.peer,
                "a snapshot file cannot be sent without the store's directory"
            );
            self.feedback.unreachable(self.peer, true);
            return true;
        };
        let (peer, dialer, feedback) = (self.peer, self.dialer.clone(), self.feedback.clone());
        let path = file.outgoing_path(dir);
        let message = message.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let sent = async {
                let mut stream = dialer
                    .connect(snapshot_transfer::SNAPSHOT_PREAMBLE)
                    .await
                    .map_err(snapshot_transfer::TransferError::Io)?;
                snapshot_transfer::send(&mut stream, &message, &path, file).await
            }
            .await;
            match sent {
                Ok(()) => {
                    tracing::info!(
                        peer = %format!("{peer:x}"),
                        bytes = file.size,
                        took_ms = started.elapsed().as_millis() as u64,
                        "sent a raft snapshot"
                    );
                    feedback.snapshot_finished(peer);
                }
                Err(e) => {
                    tracing::warn!(peer = %format!("{peer:x}"), error = %e, "sending a raft snapshot failed");
                    feedback.unreachable(peer, true);
                }
            }
        });
        true
    }
}

impl Dialer {
    /// A message connection: the preamble, then this member's cluster id (zeros while
    /// it does not know it yet).
    async fn connect_for_messages(&self) -> std::io::Result<PeerStream> {
        let mut stream = self.connect(PREAMBLE).await?;
        let id = self
            .cluster_id
            .lock()
            .ok()
            .and_then(|id| *id)
            .unwrap_or_default();
        stream.write_all(&id).await?;
        Ok(stream)
    }

    /// A TLS connection to the peer that has sent `preamble`.
    async fn connect(&self, preamble: &[u8; 8]) -> std::io::Result<PeerStream> {
        let socket = if self.address.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        if let Some(source) = self.source
            && source.is_ipv4() == self.address.is_ipv4()
            && !source.is_unspecified()
        {
            socket.bind(SocketAddr::new(source, 0))?;
        }
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(self.address))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::IpAddress(self.address.ip().into());
        let mut stream = tokio::time::timeout(CONNECT_TIMEOUT, self.connector.connect(name, tcp))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")
            })??;
        stream.write_all(preamble).await?;
        Ok(stream)
    }
}

/// Frames every message of `batch`; also returns the bytes of snapshots among them.
fn encode_batch(batch: &[Message]) -> (Vec<u8>, usize) {
    let mut bytes = Vec::new();
    let mut snapshot_bytes = 0;
    for message in batch {
        let encoded = peer_wire::encode_message(message);
        if encoded.len() > MAX_FRAME_BYTES {
            tracing::error!(
                peer = message.to,
                bytes = encoded.len(),
                "raft message larger than a peer accepts; not sent"
            );
            continue;
        }
        if message.get_msg_type() == MessageType::MsgSnapshot {
            snapshot_bytes += encoded.len();
        }
        bytes.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&encoded);
    }
    (bytes, snapshot_bytes)
}

/// What became of a received message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Stepped into the local member.
    Stepped,
    /// The local member has shut down.
    ShutDown,
    /// The sender is a member removed from the group: it is told so and not heard.
    SenderRemoved,
}

/// Where received messages go: the local member.
pub type MessageSink = Arc<dyn Fn(Message) -> Delivery + Send + Sync>;

/// A sink that steps messages into `store`, except from members removed from the group.
pub fn store_sink(store: Store) -> MessageSink {
    Arc::new(move |message| {
        if store.is_removed_member(message.from) {
            Delivery::SenderRemoved
        } else if store.receive_raft_message(message).is_ok() {
            Delivery::Stepped
        } else {
            Delivery::ShutDown
        }
    })
}

/// Accepts peer connections on `listener`; runs until its task is dropped. Snapshots
/// streamed to this member are received into `snapshot_dir` (the store's directory).
pub async fn serve(
    listener: TcpListener,
    tls: PeerTls,
    sink: MessageSink,
    snapshot_dir: std::path::PathBuf,
    own_cluster: ClusterIdSource,
) {
    let snapshot_dir = Arc::new(snapshot_dir);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server.clone());
    loop {
        let (tcp, remote) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a raft peer connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, sink, dir) = (acceptor.clone(), sink.clone(), snapshot_dir.clone());
        let own_cluster = own_cluster.clone();
        tokio::spawn(async move {
            if let Err(e) = receive(tcp, acceptor, sink, &dir, own_cluster).await {
                tracing::debug!(%remote, error = %e, "raft peer connection closed");
            }
        });
    }
}

/// Reads one peer connection: the preamble, then frames until it closes.
async fn receive(
    tcp: TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    sink: MessageSink,
    snapshot_dir: &std::path::Path,
    own_cluster: ClusterIdSource,
) -> Result<(), ReceiveError> {
    let _ = tcp.set_nodelay(true);
    let mut stream = tokio::time::timeout(CONNECT_TIMEOUT * 5, acceptor.accept(tcp))
        .await
        .map_err(|_| ReceiveError::Protocol("TLS handshake timed out"))??;
    let mut preamble = [0u8; 8];
    tokio::time::timeout(CONNECT_TIMEOUT * 5, stream.read_exact(&mut preamble))
        .await
        .map_err(|_| ReceiveError::Protocol("no preamble"))??;
    if &preamble == snapshot_transfer::SNAPSHOT_PREAMBLE {
        let message = snapshot_transfer::receive(&mut stream, snapshot_dir).await?;
        tracing::info!(
            from = %format!("{:x}", message.from),
            index = message.get_snapshot().get_metadata().index,
            "received a raft snapshot"
        );
        let stepped = sink(message) == Delivery::Stepped;
        snapshot_transfer::acknowledge(&mut stream, stepped).await;
        return Ok(());
    }
    if &preamble != PREAMBLE {
        if preamble.starts_with(&PREAMBLE[..7]) {
            // Another build of k3rs: say so where an operator looks, once per connection.
            tracing::warn!(
                theirs = %String::from_utf8_lossy(&preamble[7..]),
                ours = %String::from_utf8_lossy(&PREAMBLE[7..]),
                "a raft peer speaks another peer protocol version; its messages are refused \
                 (run one k3rs release on every server)"
            );
            return Err(ReceiveError::Protocol(
                "k3rs raft peer of another protocol version",
            ));
        }
        return Err(ReceiveError::Protocol("not a k3rs raft peer (preamble)"));
    }
    let mut theirs: ClusterId = [0; 16];
    tokio::time::timeout(CONNECT_TIMEOUT * 5, stream.read_exact(&mut theirs))
        .await
        .map_err(|_| ReceiveError::Protocol("no cluster id"))??;
    if let Some(ours) = own_cluster()
        && theirs != [0; 16]
        && theirs != ours
    {
        tracing::warn!(
            theirs = %hex::encode(theirs),
            ours = %hex::encode(ours),
            "a raft peer holds the data of another cluster (this cluster was reset or restored \
             without it); telling it so"
        );
        stream.write_all(OTHER_CLUSTER_NOTICE).await?;
        stream.flush().await?;
        let _ = stream.shutdown().await;
        return Ok(());
    }
    let mut buffer = Vec::new();
    loop {
        let mut length = [0u8; 4];
        match stream.read_exact(&mut length).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let length = u32::from_be_bytes(length) as usize;
        if length > MAX_FRAME_BYTES {
            return Err(ReceiveError::Protocol("frame larger than allowed"));
        }
        buffer.resize(length, 0);
        stream.read_exact(&mut buffer).await?;
        let message = peer_wire::decode_message(&buffer)?;
        let from = message.from;
        match sink(message) {
            Delivery::Stepped => {}
            Delivery::ShutDown => return Ok(()),
            Delivery::SenderRemoved => {
                tracing::warn!(
                    from = %format!("{from:x}"),
                    "a member removed from the group is still sending; telling it so"
                );
                stream.write_all(REMOVED_NOTICE).await?;
                stream.flush().await?;
                let _ = stream.shutdown().await;
                return Ok(());
            }
        }
        if buffer.capacity() > 1 << 20 {
            buffer = Vec::new(); // do not keep a snapshot-sized buffer per connection
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum ReceiveError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Protocol(&'static str),
    #[error(transparent)]
    Wire(#[from] peer_wire::PeerWireError),
    #[error(transparent)]
    Snapshot(#[from] snapshot_transfer::TransferError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{CertificateAuthority, ServingSans};

    fn tls_of(ca: &CertificateAuthority, name: &str) -> PeerTls {
        let mut sans = ServingSans::new();
        sans.add("127.0.0.1");
        let cert = ca.issue_peer_cert(name, &sans).expect("peer cert");
        PeerTls::from_pem(ca.cert_pem(), &cert.cert_pem, &cert.key_pem).expect("tls")
    }

    fn message(to: u64, index: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.to = to;
        m.from = 1;
        m.index = index;
        m
    }

    /// A receiving member with a certificate of `ca`: its address, what it delivers,
    /// and its task.
    async fn receiver(
        ca: &CertificateAuthority,
    ) -> (
        SocketAddr,
        tokio::sync::mpsc::UnboundedReceiver<Message>,
        tokio::task::JoinHandle<()>,
    ) {
        receiver_where(ca, |_| false).await
    }

    /// Like [`receiver`], with the senders `removed` says were removed from the group.
    async fn receiver_where(
        ca: &CertificateAuthority,
        removed: fn(u64) -> bool,
    ) -> (
        SocketAddr,
        tokio::sync::mpsc::UnboundedReceiver<Message>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("addr");
        let (delivered_tx, delivered) = tokio::sync::mpsc::unbounded_channel();
        let sink: MessageSink = Arc::new(move |m: Message| {
            if removed(m.from) {
                Delivery::SenderRemoved
            } else if delivered_tx.send(m).is_ok() {
                Delivery::Stepped
            } else {
                Delivery::ShutDown
            }
        });
        let dir = std::env::temp_dir();
        let server = tokio::spawn(serve(listener, tls_of(ca, "b"), sink, dir, no_cluster()));
        (address, delivered, server)
    }

    fn no_cluster() -> ClusterIdSource {
        Arc::new(|| None)
    }

    /// Feedback inputs a test can read.
    fn feedback() -> (PeerFeedback, std::sync::mpsc::Receiver<super::super::Input>) {
        let (tx, rx) = std::sync::mpsc::channel();
        (PeerFeedback::new(tx), rx)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn messages_arrive_in_order_over_mutual_tls() {
        let ca = CertificateAuthority::generate("k3rs-peer-ca").expect("ca");
        let (address, mut delivered, server) = receiver(&ca).await;

        let mut network = PeerNetwork::new(tokio::runtime::Handle::current(), &tls_of(&ca, "a"));
        let (fb, reports) = feedback();
        network.attach(fb);
        network.set_peers(&[(2, address)]);
        network.send((1..=1000).map(|i| message(2, i)).collect());
        for i in 1..=1000 {
            let m = tokio::time::timeout(Duration::from_secs(10), delivered.recv())
                .await
                .expect("delivered in time")
                .expect("open");
            assert_eq!(m.index, i);
        }
        assert!(
            reports.try_recv().is_err(),
            "nothing was reported unreachable"
        );
        server.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_removed_sender_is_told_so_and_reports_it() {
        let ca = CertificateAuthority::generate("k3rs-peer-ca").expect("ca");
        // Member 1 was removed from the receiver's group.
        let (address, mut delivered, server) = receiver_where(&ca, |from| from == 1).await;
        let mut network = PeerNetwork::new(tokio::runtime::Handle::current(), &tls_of(&ca, "a"));
        let (fb, reports) = feedback();
        network.attach(fb);
        network.set_peers(&[(2, address)]);
        network.send(vec![message(2, 1)]);
        let reported =
            tokio::task::spawn_blocking(move || reports.recv_timeout(Duration::from_secs(10)))
                .await
                .expect("join");
        assert!(
            matches!(
                reported,
                Ok(super::super::Input::RemovedFromGroup { told_by: 2 })
            ),
            "the notice is reported"
        );
        assert!(delivered.try_recv().is_err(), "nothing was stepped");
        server.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_file_streams_on_its_own_connection_and_is_reported_finished() {
        let ca = CertificateAuthority::generate("k3rs-peer-ca").expect("ca");
        let receiver_dir = tempfile::tempdir().expect("tempdir");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("addr");
        let (delivered_tx, mut delivered) = tokio::sync::mpsc::unbounded_channel();
        let sink: MessageSink = Arc::new(move |m| {
            if delivered_tx.send(m).is_ok() {
                Delivery::Stepped
            } else {
                Delivery::ShutDown
            }
        });
        let server = tokio::spawn(serve(
            listener,
            tls_of(&ca, "b"),
            sink,
            receiver_dir.path().to_path_buf(),
            no_cluster(),
        ));

        // A 5 MiB "database": twenty chunks, more than one frame could be without chunks.
        let sender_dir = tempfile::tempdir().expect("tempdir");
        let staging = sender_dir.path().join("staging");
        let content: Vec<u8> = (0..5u32 << 20).map(|i| (i % 253) as u8).collect();
        std::fs::write(&staging, &content).expect("write");
        let file = SnapshotFile::of_file(&staging).expect("describe");
        std::fs::rename(&staging, file.outgoing_path(sender_dir.path())).expect("rename");

        let mut network = PeerNetwork::new(tokio::runtime::Handle::current(), &tls_of(&ca, "a"))
            .with_snapshot_dir(sender_dir.path().to_path_buf());
        let (fb, reports) = feedback();
        network.attach(fb);
        network.set_peers(&[(2, address)]);
        let mut snapshot = message(2, 0);
        snapshot.set_msg_type(MessageType::MsgSnapshot);
        snapshot.mut_snapshot().data = file.encode().into();
        snapshot.mut_snapshot().mut_metadata().index = 77;
        // Heartbeats queued after the snapshot are not held up behind it.
        network.send(vec![snapshot, message(2, 1)]);

        let mut got_snapshot = false;
        let mut got_heartbeat = false;
        while !(got_snapshot && got_heartbeat) {
            let m = tokio::time::timeout(Duration::from_secs(20), delivered.recv())
                .await
                .expect("delivered in time")
                .expect("open");
            match m.get_msg_type() {
                MessageType::MsgSnapshot => {
                    assert_eq!(m.get_snapshot().get_metadata().index, 77);
                    got_snapshot = true;
                }
                _ => got_heartbeat = true,
            }
        }
        let received = file.received_path(receiver_dir.path());
        assert_eq!(std::fs::read(&received).expect("received"), content);
        let reported =
            tokio::task::spawn_blocking(move || reports.recv_timeout(Duration::from_secs(10)))
                .await
                .expect("join");
        assert!(
            matches!(reported, Ok(super::super::Input::SnapshotSent { peer: 2 })),
            "the finished stream is reported"
        );

        // A snapshot whose file is gone is reported failed, not finished.
        std::fs::remove_file(file.outgoing_path(sender_dir.path())).expect("remove");
        let (fb, reports) = feedback();
        network.attach(fb);
        network.queues.clear();
        let mut snapshot = message(2, 0);
        snapshot.set_msg_type(MessageType::MsgSnapshot);
        snapshot.mut_snapshot().data = file.encode().into();
        network.send(vec![snapshot]);
        let reported =
            tokio::task::spawn_blocking(move || reports.recv_timeout(Duration::from_secs(10)))
                .await
                .expect("join");
        assert!(
            matches!(
                reported,
                Ok(super::super::Input::Unreachable {
                    peer: 2,
                    snapshot: true
                })
            ),
            "the failed stream is reported"
        );
        server.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_of_another_ca_is_refused_and_reported_unreachable() {
        let ca = CertificateAuthority::generate("k3rs-peer-ca").expect("ca");
        let other = CertificateAuthority::generate("k3rs-peer-ca").expect("other ca");
        let (address, mut delivered, server) = receiver(&ca).await;

        let mut network = PeerNetwork::new(tokio::runtime::Handle::current(), &tls_of(&other, "x"));
        let (fb, reports) = feedback();
        network.attach(fb);
        network.set_peers(&[(2, address)]);
        network.send(vec![message(2, 1)]);
        let reported =
            tokio::task::spawn_blocking(move || reports.recv_timeout(Duration::from_secs(10)))
                .await
                .expect("join");
        assert!(
            matches!(
                reported,
                Ok(super::super::Input::Unreachable { peer: 2, .. })
            ),
            "the failed handshake is reported"
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(300), delivered.recv())
                .await
                .is_err(),
            "nothing from a foreign CA is delivered"
        );
        server.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malformed_frames_close_the_connection_without_delivering() {
        let ca = CertificateAuthority::generate("k3rs-peer-ca").expect("ca");
        let (address, mut delivered, server) = receiver(&ca).await;
        let client = tls_of(&ca, "a");
        let connector = tokio_rustls::TlsConnector::from(client.client.clone());
        for payload in [
            // Wrong preamble.
            b"HTTP/1.1".to_vec(),
            // A frame claiming 4 GiB.
            [&PREAMBLE[..], &[0; 16], &[0xff, 0xff, 0xff, 0xff]].concat(),
            // A frame holding nested protobuf groups.
            [
                &PREAMBLE[..],
                &[0; 16],
                &[0, 0, 0, 4],
                &[0x9b, 0x06, 0x9b, 0x06],
            ]
            .concat(),
        ] {
            let tcp = TcpStream::connect(address).await.expect("connect");
            let name = ServerName::IpAddress(address.ip().into());
            let mut stream = connector.connect(name, tcp).await.expect("tls");
            stream.write_all(&payload).await.expect("write");
            stream.flush().await.expect("flush");
            let mut rest = Vec::new();
            let closed =
                tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
            assert!(closed.is_ok(), "the server closes the connection");
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(200), delivered.recv())
                .await
                .is_err(),
            "nothing malformed is delivered"
        );
        server.abort();
    }
}
