//! The wire protocols of `kubectl logs/exec/attach/port-forward`, shared by the API server
//! (which passes them through to the kubelet) and the kubelet's server (which terminates
//! WebSocket and speaks SPDY to the container runtime's stream server): RFC 6455 framing,
//! SPDY/3.1 client framing, the Kubernetes channel protocol names, and an HTTP/1.1 client
//! that follows a `101 Switching Protocols`.
//!
//! Pure protocol code: it may not touch the store, the API server's state or CRI.

pub mod idle;
pub mod spdy;
pub mod upgrade;
pub mod websocket;

/// WebSocket subprotocol of kubectl ≥ 1.30 for exec/attach (adds stream close, 255).
pub const CHANNEL_V5: &str = "v5.channel.k8s.io";
/// WebSocket and SPDY subprotocol of the v4 remote-command protocol.
pub const CHANNEL_V4: &str = "v4.channel.k8s.io";
/// WebSocket subprotocol of kubectl ≥ 1.31 port-forward: SPDY frames inside binary messages.
pub const PORT_FORWARD_TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";
/// SPDY subprotocol of port-forward.
pub const PORT_FORWARD: &str = "portforward.k8s.io";
/// The request header carrying the offered SPDY subprotocols.
pub const STREAM_PROTOCOL_HEADER: &str = "x-stream-protocol-version";

/// Remote-command channel numbers (WebSocket message prefixes).
pub mod channel {
    pub const STDIN: u8 = 0;
    pub const STDOUT: u8 = 1;
    pub const STDERR: u8 = 2;
    pub const ERROR: u8 = 3;
    pub const RESIZE: u8 = 4;
    /// v5: `[255, <channel>]` closes the client's side of a channel.
    pub const CLOSE: u8 = 255;
}
