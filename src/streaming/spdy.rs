//! The client side of SPDY/3.1 framing, as far as the Kubernetes remote-command protocol
//! needs it to talk to a kubelet-style streaming server (containerd's CRI stream server):
//! opening streams (SYN_STREAM with a zlib-compressed header block), data frames with FIN,
//! answering PINGs, and reading whatever the server sends.
//!
//! Header blocks we send are compressed without the SPDY dictionary: the zlib stream then
//! simply never refers to it, which every zlib reader (Go's `NewReaderDict` included) accepts.
//! Header blocks the server sends (SYN_REPLY) are not decoded — only their stream id matters.

use flate2::{Compress, Compression, FlushCompress};
use tokio::io::{AsyncRead, AsyncReadExt};

const VERSION: u16 = 3;
pub const TYPE_SYN_STREAM: u16 = 1;
pub const TYPE_SYN_REPLY: u16 = 2;
pub const TYPE_RST_STREAM: u16 = 3;
pub const TYPE_PING: u16 = 6;
pub const TYPE_GOAWAY: u16 = 7;
/// FLAG_FIN: the sender will send nothing more on this stream.
pub const FLAG_FIN: u8 = 0x01;
/// Largest frame payload we read (the length field is 24 bits).
const MAX_FRAME: usize = 0x00FF_FFFF;
/// Data frames we send carry at most this much.
pub const MAX_DATA_CHUNK: usize = 32 * 1024;

/// A frame read from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data {
        stream_id: u32,
        flags: u8,
        data: Vec<u8>,
    },
    Control {
        kind: u16,
        flags: u8,
        data: Vec<u8>,
    },
}

impl Frame {
    /// The stream a SYN_STREAM/SYN_REPLY/RST_STREAM or data frame is about.
    pub fn stream_id(&self) -> Option<u32> {
        match self {
            Frame::Data { stream_id, .. } => Some(*stream_id),
            Frame::Control { kind, data, .. }
                if matches!(*kind, TYPE_SYN_STREAM | TYPE_SYN_REPLY | TYPE_RST_STREAM) =>
            {
                data.get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7FFF_FFFF)
            }
            Frame::Control { .. } => None,
        }
    }

    /// Whether the frame carries FLAG_FIN.
    pub fn is_fin(&self) -> bool {
        match self {
            Frame::Data { flags, .. } | Frame::Control { flags, .. } => flags & FLAG_FIN != 0,
        }
    }
}

/// Errors while framing.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    #[error("spdy I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("spdy header compression: {0}")]
    Compress(String),
    #[error("spdy protocol error: {0}")]
    Protocol(&'static str),
}

/// Builds the frames a client sends. One per connection: SPDY's header compression is one
/// zlib stream across all header blocks of a connection.
pub struct Encoder {
    compressor: Compress,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    pub fn new() -> Self {
        Encoder {
            compressor: Compress::new(Compression::default(), true),
        }
    }

    /// A SYN_STREAM opening `stream_id` with `headers` (names are lower-cased, as SPDY/3
    /// requires).
    pub fn syn_stream(
        &mut self,
        stream_id: u32,
        headers: &[(&str, &str)],
        fin: bool,
    ) -> Result<Vec<u8>, SpdyError> {
        let mut block = Vec::new();
        block.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            block.extend_from_slice(&(name.len() as u32).to_be_bytes());
            block.extend_from_slice(name.as_bytes());
            block.extend_from_slice(&(value.len() as u32).to_be_bytes());
            block.extend_from_slice(value.as_bytes());
        }
        let compressed = self.compress(&block)?;
        let mut payload = Vec::with_capacity(10 + compressed.len());
        payload.extend_from_slice(&(stream_id & 0x7FFF_FFFF).to_be_bytes());
        payload.extend_from_slice(&0u32.to_be_bytes()); // associated-to: none
        payload.extend_from_slice(&[0, 0]); // priority 0, slot 0
        payload.extend_from_slice(&compressed);
        Ok(control(
            TYPE_SYN_STREAM,
            if fin { FLAG_FIN } else { 0 },
            &payload,
        ))
    }

    fn compress(&mut self, input: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let mut out = Vec::with_capacity(input.len() + 128);
        let mut consumed = 0usize;
        loop {
            let before_in = self.compressor.total_in();
            self.compressor
                .compress_vec(&input[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| SpdyError::Compress(e.to_string()))?;
            consumed += (self.compressor.total_in() - before_in) as usize;
            // Done once all input is in and the flush left spare room in the buffer.
            if consumed >= input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            out.reserve(out.capacity().max(256));
        }
    }
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + payload.len());
    frame.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.push(flags);
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(payload);
    frame
}

/// Data frames for `stream_id`, split into [`MAX_DATA_CHUNK`] pieces; `fin` marks the last.
/// An empty `data` with `fin` half-closes the stream.
pub fn data_frames(stream_id: u32, data: &[u8], fin: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 8);
    let mut chunks: Vec<&[u8]> = data.chunks(MAX_DATA_CHUNK).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        out.extend_from_slice(&(stream_id & 0x7FFF_FFFF).to_be_bytes());
        out.push(if fin && i == last { FLAG_FIN } else { 0 });
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes()[1..]);
        out.extend_from_slice(chunk);
    }
    out
}

/// A PING frame (a reply echoes the server's id).
pub fn ping(id: u32) -> Vec<u8> {
    control(TYPE_PING, 0, &id.to_be_bytes())
}

/// A GOAWAY frame (status OK).
pub fn goaway(last_good_stream: u32) -> Vec<u8> {
    let mut payload = last_good_stream.to_be_bytes().to_vec();
    payload.extend_from_slice(&0u32.to_be_bytes());
    control(TYPE_GOAWAY, 0, &payload)
}

/// Reads one frame; `Ok(None)` at a clean EOF between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<Frame>, SpdyError> {
    let mut head = [0u8; 8];
    match reader.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let flags = head[4];
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    if len > MAX_FRAME {
        return Err(SpdyError::Protocol("frame too large"));
    }
    let mut data = vec![0u8; len];
    reader.read_exact(&mut data).await?;
    if head[0] & 0x80 != 0 {
        let version = u16::from_be_bytes([head[0] & 0x7F, head[1]]);
        if version != VERSION {
            return Err(SpdyError::Protocol("not SPDY version 3"));
        }
        Ok(Some(Frame::Control {
            kind: u16::from_be_bytes([head[2], head[3]]),
            flags,
            data,
        }))
    } else {
        Ok(Some(Frame::Data {
            stream_id: u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7FFF_FFFF,
            flags,
            data,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Decompress, FlushDecompress};

    #[tokio::test]
    async fn syn_stream_headers_decompress_across_frames() {
        let mut encoder = Encoder::new();
        let first = encoder
            .syn_stream(1, &[("streamType", "error")], false)
            .unwrap();
        let second = encoder
            .syn_stream(3, &[("streamtype", "stdin"), ("x", "y")], true)
            .unwrap();
        let mut reader = &[first, second].concat()[..];
        let mut decompress = Decompress::new(true);
        let mut decoded = Vec::new();
        for want_id in [1u32, 3] {
            let frame = read_frame(&mut reader).await.unwrap().unwrap();
            assert_eq!(frame.stream_id(), Some(want_id));
            let Frame::Control { kind, data, .. } = &frame else {
                panic!("control frame expected")
            };
            assert_eq!(*kind, TYPE_SYN_STREAM);
            let mut out = Vec::with_capacity(4096);
            decompress
                .decompress_vec(&data[10..], &mut out, FlushDecompress::Sync)
                .unwrap();
            decoded.push(out);
        }
        assert!(!decoded[0].is_empty());
        // Pairs count, then "streamtype" lower-cased.
        assert_eq!(&decoded[0][..4], &1u32.to_be_bytes());
        assert_eq!(&decoded[0][8..18], b"streamtype");
        assert_eq!(&decoded[1][..4], &2u32.to_be_bytes());
        assert!(read_frame(&mut reader).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn data_frames_split_and_fin_last() {
        let payload = vec![1u8; MAX_DATA_CHUNK + 10];
        let bytes = data_frames(5, &payload, true);
        let mut reader = &bytes[..];
        let a = read_frame(&mut reader).await.unwrap().unwrap();
        let b = read_frame(&mut reader).await.unwrap().unwrap();
        assert!(!a.is_fin() && b.is_fin());
        assert_eq!(b.stream_id(), Some(5));
        let empty = data_frames(3, &[], true);
        let frame = read_frame(&mut &empty[..]).await.unwrap().unwrap();
        assert_eq!(
            frame,
            Frame::Data {
                stream_id: 3,
                flags: FLAG_FIN,
                data: vec![]
            }
        );
    }
}
