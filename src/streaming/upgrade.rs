//! One HTTP/1.1 request on an already-connected transport (TCP or TLS) whose response may
//! be `101 Switching Protocols`; then both ends are raw byte streams for the caller.

use bytes::Bytes;
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// The upgraded connection, as a tokio byte stream.
pub type Upgraded = TokioIo<hyper::upgrade::Upgraded>;

/// What the far end answered.
pub enum Answer {
    /// `101`: the response head and the switched connection.
    Switched(http::response::Parts, Upgraded),
    /// Anything else: the response, body still streaming.
    Response(http::Response<Incoming>),
}

/// Errors while sending the request.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("HTTP handshake: {0}")]
    Handshake(#[source] hyper::Error),
    #[error("sending the request: {0}")]
    Send(#[source] hyper::Error),
    #[error("switching protocols: {0}")]
    Switch(#[source] hyper::Error),
}

/// Sends `request` over `io` (HTTP/1.1) and follows a 101. The connection task lives as long
/// as the response body or the upgraded stream.
pub async fn send<T>(io: T, request: http::Request<Empty<Bytes>>) -> Result<Answer, UpgradeError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(UpgradeError::Handshake)?;
    tokio::spawn(async move {
        if let Err(e) = connection.with_upgrades().await {
            tracing::debug!(error = %e, "upstream connection ended with an error");
        }
    });
    let response = sender
        .send_request(request)
        .await
        .map_err(UpgradeError::Send)?;
    if response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        return Ok(Answer::Response(response));
    }
    let (parts, body) = response.into_parts();
    let upgraded = hyper::upgrade::on(http::Response::from_parts(parts.clone(), body))
        .await
        .map_err(UpgradeError::Switch)?;
    Ok(Answer::Switched(parts, TokioIo::new(upgraded)))
}
