//! Streaming raft snapshots between members, from file to file, in chunks.
//!
//! raft-rs carries a snapshot's payload in `Snapshot.data`, a byte buffer inside the
//! `MsgSnapshot` message. Shipping the store that way would hold the whole database in
//! memory on both sides (and in every clone raft makes). Instead the leader writes the
//! snapshot to a file beside its database and puts only a [`SnapshotFile`] descriptor
//! (size and SHA-256) in `data`; the transport streams the file on a connection of its own
//! (so heartbeats and appends to other members never queue behind it):
//!
//! ```text
//! "K3RSSNP1" | u32 len | encoded MsgSnapshot | (u32 len | chunk)* | u32 0   → sender
//!                                                                  ← 1 byte: 1 = stepped
//! ```
//!
//! The receiver writes the chunks to `<store dir>/<name>.partial`, checks the size and the
//! hash, syncs and renames it to its received name, and only then steps the message into
//! raft; the raft driver finds the file by the descriptor when it installs the snapshot.
//! Neither side holds more than one chunk in memory.
//!
//! Owns the descriptor, the file names and the stream format; connections and TLS are the
//! transport's ([`super::peers`]), installing is the driver's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use raft::eraftpb::{Message, MessageType};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::peer_wire;

/// The first bytes of a snapshot stream connection.
pub const SNAPSHOT_PREAMBLE: &[u8; 8] = b"K3RSSNP1";
/// The first bytes of a descriptor in `Snapshot.data`.
const DESCRIPTOR_MAGIC: &[u8; 8] = b"K3RSSNAP";
const DESCRIPTOR_LEN: usize = 8 + 8 + 32;
/// The largest snapshot a member accepts (a store is far smaller; this bounds the disk a
/// misbehaving peer can fill).
pub const MAX_SNAPSHOT_BYTES: u64 = 64 << 30;
/// Bytes per chunk on the wire; the receiver refuses larger chunks.
pub const CHUNK_BYTES: usize = 256 << 10;
/// The message that opens a stream is small (the payload is not in it).
const MAX_HEADER_BYTES: usize = 1 << 20;
/// Longest wait for one chunk (either side) before the stream is given up.
const CHUNK_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest wait for the receiver's answer after the last chunk (it syncs the file).
const ACK_TIMEOUT: Duration = Duration::from_secs(60);

const OUTGOING_PREFIX: &str = "outgoing-snapshot-";
const RECEIVED_PREFIX: &str = "received-snapshot-";

/// What `Snapshot.data` holds for a snapshot that travels as a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotFile {
    pub size: u64,
    pub sha256: [u8; 32],
}

impl SnapshotFile {
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(DESCRIPTOR_LEN);
        bytes.extend_from_slice(DESCRIPTOR_MAGIC);
        bytes.extend_from_slice(&self.size.to_be_bytes());
        bytes.extend_from_slice(&self.sha256);
        bytes
    }

    /// The descriptor in `data`, or `None` when `data` is a snapshot's bytes themselves.
    pub fn decode(data: &[u8]) -> Option<SnapshotFile> {
        if data.len() != DESCRIPTOR_LEN || !data.starts_with(DESCRIPTOR_MAGIC) {
            return None;
        }
        let size = u64::from_be_bytes(data[8..16].try_into().ok()?);
        let sha256 = data[16..48].try_into().ok()?;
        Some(SnapshotFile { size, sha256 })
    }

    fn name(&self, prefix: &str) -> String {
        format!("{prefix}{}.db", hex::encode(&self.sha256[..8]))
    }

    /// Where the leader keeps this snapshot while members fetch it.
    pub fn outgoing_path(&self, dir: &Path) -> PathBuf {
        dir.join(self.name(OUTGOING_PREFIX))
    }

    /// Where a member keeps this snapshot between receiving and installing it.
    pub fn received_path(&self, dir: &Path) -> PathBuf {
        dir.join(self.name(RECEIVED_PREFIX))
    }

    /// Reads `path` and describes it.
    pub fn of_file(path: &Path) -> std::io::Result<SnapshotFile> {
        use std::io::Read;
        let mut file = std::fs::File::open(path)?;
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; CHUNK_BYTES];
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            size += n as u64;
        }
        Ok(SnapshotFile {
            size,
            sha256: hasher.finalize().into(),
        })
    }
}

/// Removes snapshot files of `kind` in `dir` except `keep`: outgoing files are replaced by
/// newer snapshots (a stream still reading one keeps its open file), received ones by the
/// next receive, and both are leftovers after a restart.
pub fn remove_stale(dir: &Path, keep: Option<&Path>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = name.starts_with(OUTGOING_PREFIX) || name.starts_with(RECEIVED_PREFIX);
        if ours && keep != Some(entry.path().as_path()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Why a snapshot stream failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Protocol(String),
    #[error(transparent)]
    Wire(#[from] peer_wire::PeerWireError),
    #[error("timed out {0}")]
    TimedOut(&'static str),
}

async fn within<T>(
    limit: Duration,
    what: &'static str,
    work: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, TransferError> {
    tokio::time::timeout(limit, work)
        .await
        .map_err(|_| TransferError::TimedOut(what))?
        .map_err(TransferError::Io)
}

/// Streams `message` (a `MsgSnapshot` whose data is `file`'s descriptor) and the file at
/// `path` over `stream` (whose preamble the caller wrote), and waits for the receiver to say it stepped the snapshot.
pub async fn send<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    message: &Message,
    path: &Path,
    file: SnapshotFile,
) -> Result<(), TransferError> {
    let mut source = tokio::fs::File::open(path).await?;
    let on_disk = source.metadata().await?.len();
    if on_disk != file.size {
        return Err(TransferError::Protocol(format!(
            "snapshot file {} has {on_disk} bytes, its descriptor {}",
            path.display(),
            file.size
        )));
    }
    let header = peer_wire::encode_message(message);
    let mut opening = Vec::with_capacity(4 + header.len());
    opening.extend_from_slice(&(header.len() as u32).to_be_bytes());
    opening.extend_from_slice(&header);
    within(
        CHUNK_TIMEOUT,
        "writing the snapshot header",
        stream.write_all(&opening),
    )
    .await?;
    let mut buffer = vec![0u8; 4 + CHUNK_BYTES];
    let mut sent = 0u64;
    loop {
        let n = source.read(&mut buffer[4..]).await?;
        if n == 0 {
            break;
        }
        sent += n as u64;
        buffer[..4].copy_from_slice(&(n as u32).to_be_bytes());
        within(
            CHUNK_TIMEOUT,
            "writing a snapshot chunk",
            stream.write_all(&buffer[..4 + n]),
        )
        .await?;
    }
    if sent != file.size {
        return Err(TransferError::Protocol(format!(
            "snapshot file {} changed while it was sent",
            path.display()
        )));
    }
    within(CHUNK_TIMEOUT, "ending the snapshot", async {
        stream.write_all(&0u32.to_be_bytes()).await?;
        stream.flush().await
    })
    .await?;
    let mut answer = [0u8; 1];
    within(
        ACK_TIMEOUT,
        "waiting for the receiver",
        stream.read_exact(&mut answer),
    )
    .await?;
    if answer[0] != 1 {
        return Err(TransferError::Protocol(
            "the receiver did not take the snapshot".into(),
        ));
    }
    Ok(())
}

/// Receives one snapshot stream (after its preamble) into `dir`; returns the message to
/// step once the file is complete, checked and synced at its received path. The caller
/// answers the sender with [`acknowledge`].
pub async fn receive<S: AsyncRead + Unpin>(
    stream: &mut S,
    dir: &Path,
) -> Result<Message, TransferError> {
    let header_len = read_u32(stream, "reading the snapshot header").await? as usize;
    if header_len > MAX_HEADER_BYTES {
        return Err(TransferError::Protocol(
            "snapshot header larger than allowed".into(),
        ));
    }
    let mut header = vec![0u8; header_len];
    within(
        CHUNK_TIMEOUT,
        "reading the snapshot header",
        stream.read_exact(&mut header),
    )
    .await?;
    let message = peer_wire::decode_message(&header)?;
    if message.get_msg_type() != MessageType::MsgSnapshot {
        return Err(TransferError::Protocol(
            "a snapshot stream must carry MsgSnapshot".into(),
        ));
    }
    let file = SnapshotFile::decode(&message.get_snapshot().data).ok_or_else(|| {
        TransferError::Protocol("the snapshot message carries no file descriptor".into())
    })?;
    if file.size > MAX_SNAPSHOT_BYTES {
        return Err(TransferError::Protocol(format!(
            "a snapshot of {} bytes is larger than allowed",
            file.size
        )));
    }
    let target = file.received_path(dir);
    let partial = target.with_extension("partial");
    if let Err(e) = receive_body(stream, &partial, file).await {
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(e);
    }
    tokio::fs::rename(&partial, &target).await?;
    if let Ok(dir_handle) = tokio::fs::File::open(dir).await {
        let _ = dir_handle.sync_all().await;
    }
    Ok(message)
}

async fn receive_body<S: AsyncRead + Unpin>(
    stream: &mut S,
    partial: &Path,
    file: SnapshotFile,
) -> Result<(), TransferError> {
    let mut out = tokio::fs::File::create(partial).await?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; CHUNK_BYTES];
    let mut received = 0u64;
    loop {
        let len = read_u32(stream, "reading a snapshot chunk").await? as usize;
        if len == 0 {
            break;
        }
        if len > CHUNK_BYTES {
            return Err(TransferError::Protocol(
                "snapshot chunk larger than allowed".into(),
            ));
        }
        if received + len as u64 > file.size {
            return Err(TransferError::Protocol(
                "more snapshot bytes than announced".into(),
            ));
        }
        let chunk = &mut buffer[..len];
        within(
            CHUNK_TIMEOUT,
            "reading a snapshot chunk",
            stream.read_exact(chunk),
        )
        .await?;
        hasher.update(&*chunk);
        out.write_all(chunk).await?;
        received += len as u64;
    }
    if received != file.size {
        return Err(TransferError::Protocol(format!(
            "the snapshot ended after {received} of {} bytes",
            file.size
        )));
    }
    if <[u8; 32]>::from(hasher.finalize()) != file.sha256 {
        return Err(TransferError::Protocol(
            "the snapshot's SHA-256 does not match its descriptor".into(),
        ));
    }
    out.sync_all().await?;
    Ok(())
}

/// Tells the sender whether the snapshot was stepped into the member.
pub async fn acknowledge<S: AsyncWrite + Unpin>(stream: &mut S, stepped: bool) {
    let _ = tokio::time::timeout(CHUNK_TIMEOUT, async {
        stream.write_all(&[u8::from(stepped)]).await?;
        stream.flush().await
    })
    .await;
}

async fn read_u32<S: AsyncRead + Unpin>(
    stream: &mut S,
    what: &'static str,
) -> Result<u32, TransferError> {
    let mut bytes = [0u8; 4];
    within(CHUNK_TIMEOUT, what, stream.read_exact(&mut bytes)).await?;
    Ok(u32::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot_message(file: SnapshotFile) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgSnapshot);
        m.to = 2;
        m.from = 1;
        m.term = 3;
        let snapshot = m.mut_snapshot();
        snapshot.data = file.encode().into();
        snapshot.mut_metadata().index = 42;
        snapshot.mut_metadata().term = 3;
        m
    }

    /// A file of `size` bytes with a pattern that makes misplaced chunks visible.
    fn payload(dir: &Path, size: usize) -> (PathBuf, SnapshotFile) {
        let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let staging = dir.join("staging.db");
        std::fs::write(&staging, &bytes).expect("write payload");
        let file = SnapshotFile::of_file(&staging).expect("describe");
        let path = file.outgoing_path(dir);
        std::fs::rename(&staging, &path).expect("rename");
        (path, file)
    }

    #[test]
    fn descriptors_round_trip_and_raw_bytes_are_not_descriptors() {
        let file = SnapshotFile {
            size: 12345,
            sha256: [7; 32],
        };
        assert_eq!(SnapshotFile::decode(&file.encode()), Some(file));
        assert_eq!(SnapshotFile::decode(b"SQLite format 3\0"), None);
        let mut longer = file.encode();
        longer.push(0);
        assert_eq!(SnapshotFile::decode(&longer), None);
    }

    #[tokio::test]
    async fn a_file_streams_in_chunks_and_arrives_identical() {
        let sender_dir = tempfile::tempdir().expect("tempdir");
        let receiver_dir = tempfile::tempdir().expect("tempdir");
        // Several chunks and a partial last one.
        let (path, file) = payload(sender_dir.path(), CHUNK_BYTES * 3 + 1000);
        let message = snapshot_message(file);
        let (mut a, mut b) = tokio::io::duplex(64 << 10);
        let dir = receiver_dir.path().to_path_buf();
        let receiver = tokio::spawn(async move {
            let got = receive(&mut b, &dir).await.expect("received");
            acknowledge(&mut b, true).await;
            got
        });
        send(&mut a, &message, &path, file).await.expect("sent");
        let got = receiver.await.expect("join");
        assert_eq!(got.get_snapshot().get_metadata().index, 42);
        let received = file.received_path(receiver_dir.path());
        assert_eq!(
            std::fs::read(&received).expect("received file"),
            std::fs::read(&path).expect("sent file")
        );
        assert!(!received.with_extension("partial").exists());
    }

    #[tokio::test]
    async fn a_corrupted_or_truncated_stream_leaves_no_file() {
        let sender_dir = tempfile::tempdir().expect("tempdir");
        let (path, file) = payload(sender_dir.path(), CHUNK_BYTES + 10);
        for damage in ["flip", "truncate", "oversize"] {
            let receiver_dir = tempfile::tempdir().expect("tempdir");
            let mut descriptor = file;
            match damage {
                "flip" => descriptor.sha256[0] ^= 1,
                "truncate" => descriptor.size += 1,
                _ => descriptor.size = MAX_SNAPSHOT_BYTES + 1,
            }
            let message = snapshot_message(descriptor);
            // Hand-made stream: the real bytes under a descriptor that does not fit them.
            let mut wire = Vec::new();
            let header = peer_wire::encode_message(&message);
            wire.extend_from_slice(&(header.len() as u32).to_be_bytes());
            wire.extend_from_slice(&header);
            let bytes = std::fs::read(&path).expect("read");
            for chunk in bytes.chunks(CHUNK_BYTES) {
                wire.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
                wire.extend_from_slice(chunk);
            }
            wire.extend_from_slice(&0u32.to_be_bytes());
            let err = receive(&mut wire.as_slice(), receiver_dir.path())
                .await
                .expect_err(damage);
            assert!(matches!(err, TransferError::Protocol(_)), "{damage}: {err}");
            let left: Vec<_> = std::fs::read_dir(receiver_dir.path())
                .expect("dir")
                .collect();
            assert!(left.is_empty(), "{damage}: nothing is left behind");
        }
    }

    #[tokio::test]
    async fn a_stream_must_carry_a_snapshot_message() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        let header = peer_wire::encode_message(&m);
        let mut wire = (header.len() as u32).to_be_bytes().to_vec();
        wire.extend_from_slice(&header);
        let err = receive(&mut wire.as_slice(), dir.path())
            .await
            .expect_err("refused");
        assert!(err.to_string().contains("MsgSnapshot"), "{err}");
    }
}
