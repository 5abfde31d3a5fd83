//! Slowloris steps shared by the flood tests of the API server (`apiserver_limits`) and the
//! kubelet's :10250 (`kubelet_stream`): TLS connections to 127.0.0.1 whose request headers
//! never end, and the check that the server's header read timeout (kube's 32 s) closes them.
//! Client side only: starts no server and reads no server files.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A client TLS connection.
pub type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A TLS connection to `127.0.0.1:port` verified with `tls` (named 127.0.0.1).
pub async fn connect(port: u16, tls: &Arc<rustls::ClientConfig>) -> Tls {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
    tokio_rustls::TlsConnector::from(tls.clone())
        .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
        .await
        .unwrap_or_else(|e| panic!("TLS handshake with 127.0.0.1:{port}: {e}"))
}

/// Opens `count` TLS connections to `port`, each past the handshake with a `GET path` whose
/// headers never end, and holds them.
pub async fn hold_unfinished_requests(
    port: u16,
    tls: &Arc<rustls::ClientConfig>,
    path: &str,
    count: usize,
) -> Vec<Tls> {
    let mut held = Vec::with_capacity(count);
    for i in 0..count {
        let mut conn = connect(port, tls).await;
        let partial = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow-{i}: ");
        conn.write_all(partial.as_bytes())
            .await
            .expect("partial header");
        conn.flush().await.expect("flush");
        held.push(conn);
    }
    held
}

/// Asserts that the server closes one of the `held` connections (opened by `opened`) by its
/// header read timeout: within 45 s, and not before 20 s (so it is the timeout, not a refusal).
pub async fn assert_closed_by_header_timeout(held: &mut Vec<Tls>, opened: Instant) {
    let mut first = held.swap_remove(0);
    let mut buf = [0u8; 64];
    let ended = tokio::time::timeout(Duration::from_secs(45), first.read(&mut buf)).await;
    assert!(
        matches!(ended, Ok(Ok(0)) | Ok(Err(_))),
        "a connection with unfinished headers was still open after {:?}",
        opened.elapsed()
    );
    assert!(
        opened.elapsed() >= Duration::from_secs(20),
        "closed too early: {:?}",
        opened.elapsed()
    );
}
