//! RFC 6455 WebSocket: the server handshake and message framing, as far as the Kubernetes
//! channel protocols (`v4/v5.channel.k8s.io`, `SPDY/3.1+portforward.k8s.io`) need it —
//! binary and text messages, fragmentation, ping/pong and the close handshake. No extensions
//! (kubectl offers none).

use std::sync::Arc;

use base64::Engine;
use http::HeaderMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

/// The GUID of RFC 6455 §1.3 that the accept key is derived with.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Largest message accepted from a peer (kubectl sends stdin in 32 KiB pieces).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

const OP_CONTINUATION: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;
const OP_PONG: u8 = 0xA;

/// Whether a request asks to upgrade to WebSocket.
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    header_has_token(headers, http::header::UPGRADE, "websocket")
        && header_has_token(headers, http::header::CONNECTION, "upgrade")
}

/// Whether a comma-separated header contains `token` (case-insensitively).
pub fn header_has_token(headers: &HeaderMap, name: http::header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The subprotocols a client offers in `Sec-WebSocket-Protocol`, in its order.
pub fn offered_protocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub fn accept_key(client_key: &str) -> String {
    let mut input = client_key.trim().as_bytes().to_vec();
    input.extend_from_slice(ACCEPT_GUID.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// A message received from the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Binary(Vec<u8>),
    Text(Vec<u8>),
}

/// Errors of the framing layer.
#[derive(Debug, thiserror::Error)]
pub enum WsError {
    #[error("websocket I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("websocket protocol error: {0}")]
    Protocol(&'static str),
}

/// Encodes one frame. Clients must mask (`mask: Some`), servers must not.
pub fn encode_frame(opcode: u8, payload: &[u8], fin: bool, mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut frame = Vec::with_capacity(payload.len() + 14);
    frame.push(if fin { 0x80 } else { 0 } | (opcode & 0x0F));
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => frame.push(mask_bit | n as u8),
        n if n <= usize::from(u16::MAX) => {
            frame.push(mask_bit | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(mask_bit | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(key) => {
            frame.extend_from_slice(&key);
            frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        }
        None => frame.extend_from_slice(payload),
    }
    frame
}

/// The sending half; cheap to clone (one lock around the transport's write half).
pub struct Sender<W> {
    inner: Arc<Mutex<SenderState<W>>>,
    /// Mask key for frames we send: `Some` when we are the client.
    mask: Option<[u8; 4]>,
}

struct SenderState<W> {
    writer: W,
    closed: bool,
}

impl<W> Clone for Sender<W> {
    fn clone(&self) -> Self {
        Sender {
            inner: self.inner.clone(),
            mask: self.mask,
        }
    }
}

impl<W: AsyncWrite + Unpin> Sender<W> {
    /// A server-side sender (frames unmasked).
    pub fn server(writer: W) -> Self {
        Self::with_mask(writer, None)
    }

    /// A client-side sender (frames masked with `key`, as RFC 6455 requires of clients).
    pub fn client(writer: W, key: [u8; 4]) -> Self {
        Self::with_mask(writer, Some(key))
    }

    fn with_mask(writer: W, mask: Option<[u8; 4]>) -> Self {
        Sender {
            inner: Arc::new(Mutex::new(SenderState {
                writer,
                closed: false,
            })),
            mask,
        }
    }

    async fn send_frame(&self, opcode: u8, payload: &[u8]) -> std::io::Result<()> {
        let mut state = self.inner.lock().await;
        if state.closed {
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "websocket already closed",
            ));
        }
        let frame = encode_frame(opcode, payload, true, self.mask);
        state.writer.write_all(&frame).await?;
        state.writer.flush().await?;
        if opcode == OP_CLOSE {
            state.closed = true;
            let _ = state.writer.shutdown().await;
        }
        Ok(())
    }

    /// Sends one binary message.
    pub async fn binary(&self, payload: &[u8]) -> std::io::Result<()> {
        self.send_frame(OP_BINARY, payload).await
    }

    /// Sends one text message.
    pub async fn text(&self, payload: &[u8]) -> std::io::Result<()> {
        self.send_frame(OP_TEXT, payload).await
    }

    /// Sends a close frame with `code` (1000 = normal) and shuts the write side down.
    /// Closing twice is harmless.
    pub async fn close(&self, code: u16, reason: &str) {
        if self.inner.lock().await.closed {
            return;
        }
        let mut payload = code.to_be_bytes().to_vec();
        payload.extend_from_slice(&reason.as_bytes()[..reason.len().min(120)]);
        let _ = self.send_frame(OP_CLOSE, &payload).await;
    }

    async fn pong(&self, payload: &[u8]) -> std::io::Result<()> {
        self.send_frame(OP_PONG, payload).await
    }
}

/// The receiving half. Answers pings and the peer's close through its [`Sender`].
pub struct Receiver<R, W> {
    reader: R,
    sender: Sender<W>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Receiver<R, W> {
    pub fn new(reader: R, sender: Sender<W>) -> Self {
        Receiver { reader, sender }
    }

    /// The next data message; `Ok(None)` once the peer closed (close frame or EOF).
    pub async fn next(&mut self) -> Result<Option<Message>, WsError> {
        let mut assembling: Option<(u8, Vec<u8>)> = None;
        loop {
            let Some((fin, opcode, payload)) = self.read_frame().await? else {
                return Ok(None);
            };
            match opcode {
                OP_PING => {
                    // A pong after our close is refused by the sender; the peer is going away.
                    let _ = self.sender.pong(&payload).await;
                }
                OP_PONG => {}
                OP_CLOSE => {
                    let code = payload
                        .get(..2)
                        .map_or(1000, |c| u16::from_be_bytes([c[0], c[1]]));
                    self.sender.close(code, "").await;
                    return Ok(None);
                }
                OP_TEXT | OP_BINARY => {
                    if assembling.is_some() {
                        return Err(WsError::Protocol("new message inside a fragmented one"));
                    }
                    if fin {
                        return Ok(Some(message(opcode, payload)));
                    }
                    assembling = Some((opcode, payload));
                }
                OP_CONTINUATION => {
                    let Some((first, mut data)) = assembling.take() else {
                        return Err(WsError::Protocol("continuation without a first fragment"));
                    };
                    data.extend_from_slice(&payload);
                    if data.len() > MAX_MESSAGE_BYTES {
                        return Err(WsError::Protocol("message too large"));
                    }
                    if fin {
                        return Ok(Some(message(first, data)));
                    }
                    assembling = Some((first, data));
                }
                _ => return Err(WsError::Protocol("unknown opcode")),
            }
        }
    }

    /// One frame: (fin, opcode, unmasked payload), or `None` at a clean EOF.
    async fn read_frame(&mut self) -> Result<Option<(bool, u8, Vec<u8>)>, WsError> {
        let mut head = [0u8; 2];
        match self.reader.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        if head[0] & 0x70 != 0 {
            return Err(WsError::Protocol(
                "reserved bits set (no extension negotiated)",
            ));
        }
        let fin = head[0] & 0x80 != 0;
        let opcode = head[0] & 0x0F;
        let masked = head[1] & 0x80 != 0;
        let len = match head[1] & 0x7F {
            126 => u64::from(self.reader.read_u16().await?),
            127 => self.reader.read_u64().await?,
            n => u64::from(n),
        };
        if len > MAX_MESSAGE_BYTES as u64 {
            return Err(WsError::Protocol("frame too large"));
        }
        if opcode >= OP_CLOSE && (len > 125 || !fin) {
            return Err(WsError::Protocol("invalid control frame"));
        }
        let mut key = [0u8; 4];
        if masked {
            self.reader.read_exact(&mut key).await?;
        }
        let mut payload = vec![0u8; len as usize];
        self.reader.read_exact(&mut payload).await?;
        if masked {
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= key[i % 4];
            }
        }
        Ok(Some((fin, opcode, payload)))
    }
}

fn message(opcode: u8, payload: Vec<u8>) -> Message {
    if opcode == OP_TEXT {
        Message::Text(payload)
    } else {
        Message::Binary(payload)
    }
}

/// The two halves of a WebSocket over transport `T`.
pub type Halves<T> = (
    Receiver<tokio::io::ReadHalf<T>, tokio::io::WriteHalf<T>>,
    Sender<tokio::io::WriteHalf<T>>,
);

/// Splits a transport into a server-side receiver and sender.
pub fn server<T: AsyncRead + AsyncWrite>(io: T) -> Halves<T> {
    let (read, write) = tokio::io::split(io);
    let sender = Sender::server(write);
    (Receiver::new(read, sender.clone()), sender)
}

/// Splits a transport into a client-side receiver and sender (tests and tools).
pub fn client<T: AsyncRead + AsyncWrite>(io: T, mask: [u8; 4]) -> Halves<T> {
    let (read, write) = tokio::io::split(io);
    let sender = Sender::client(write, mask);
    (Receiver::new(read, sender.clone()), sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_matches_rfc_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn offered_protocols_split_and_trim() {
        let mut headers = HeaderMap::new();
        headers.append(
            "sec-websocket-protocol",
            "v5.channel.k8s.io, v4.channel.k8s.io".parse().unwrap(),
        );
        headers.append("sec-websocket-protocol", "channel.k8s.io".parse().unwrap());
        assert_eq!(
            offered_protocols(&headers),
            ["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"]
        );
    }

    #[tokio::test]
    async fn masked_fragmented_message_and_ping_round_trip() {
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        let (mut server_rx, _server_tx) = server(server_io);
        let (mut client_rx, client_tx) = client(client_io, [1, 2, 3, 4]);
        // A ping between two fragments of one binary message, then a large message.
        let large = vec![7u8; 70_000];
        {
            let mut state = client_tx.inner.lock().await;
            let mut bytes = encode_frame(OP_BINARY, b"hel", false, Some([9, 8, 7, 6]));
            bytes.extend(encode_frame(OP_PING, b"p", true, Some([1, 1, 1, 1])));
            bytes.extend(encode_frame(
                OP_CONTINUATION,
                b"lo",
                true,
                Some([5, 5, 5, 5]),
            ));
            bytes.extend(encode_frame(OP_BINARY, &large, true, Some([3, 3, 3, 3])));
            state.writer.write_all(&bytes).await.unwrap();
        }
        assert_eq!(
            server_rx.next().await.unwrap(),
            Some(Message::Binary(b"hello".to_vec()))
        );
        assert_eq!(
            server_rx.next().await.unwrap(),
            Some(Message::Binary(large))
        );
        // The client sees the pong (skipped) then the server's close as the end.
        client_tx.close(1000, "bye").await;
        assert_eq!(server_rx.next().await.unwrap(), None);
        assert_eq!(client_rx.next().await.unwrap(), None);
    }

    #[test]
    fn length_encodings() {
        assert_eq!(encode_frame(OP_BINARY, &[0; 125], true, None)[1], 125);
        let medium = encode_frame(OP_BINARY, &[0; 300], true, None);
        assert_eq!(&medium[1..4], &[126, 1, 44]);
        let big = encode_frame(OP_BINARY, &[0; 70_000], true, None);
        assert_eq!(big[1], 127);
        assert_eq!(u64::from_be_bytes(big[2..10].try_into().unwrap()), 70_000);
    }
}
