//! Idle detection for relayed streams (exec, attach, port-forward): [`Tracked`] wraps one
//! side of a relay and stamps every read or write that moves bytes; [`Activity::idle_for`]
//! completes once no bytes have moved for a given time, so the relay can be dropped
//! (`--kubelet-arg streaming-connection-idle-timeout`, the kubelet's 4 h default).
//!
//! Pure I/O plumbing: no knowledge of SPDY, WebSocket or what the streams carry.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// When bytes last moved, as milliseconds since the relay began.
#[derive(Debug)]
pub struct Activity {
    started: Instant,
    last_ms: AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl Activity {
    fn touch(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(now, Ordering::Relaxed);
    }

    /// Completes once no bytes have moved for `timeout`.
    pub async fn idle_for(&self, timeout: Duration) {
        loop {
            let last = self.started + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = last + timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// An I/O object whose byte-moving reads and writes are stamped on an [`Activity`].
#[derive(Debug)]
pub struct Tracked<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> Tracked<T> {
    pub fn new(inner: T, activity: Arc<Activity>) -> Self {
        Tracked { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.touch();
        }
        poll
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write(cx, data);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        poll
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn idle_fires_only_after_a_quiet_timeout() {
        let activity = Arc::new(Activity::default());
        let (a, mut b) = tokio::io::duplex(64);
        let mut tracked = Tracked::new(a, activity.clone());
        let timeout = Duration::from_millis(500);
        let idle = activity.clone();
        let watchdog = tokio::spawn(async move { idle.idle_for(timeout).await });
        // Traffic every 300 ms, writes then reads, keeps it alive past the timeout.
        for round in 0..4 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let mut byte = [0u8; 1];
            if round % 2 == 0 {
                tracked.write_all(b"x").await.expect("write");
                b.read_exact(&mut byte).await.expect("read");
            } else {
                b.write_all(b"y").await.expect("write");
                tracked.read_exact(&mut byte).await.expect("read");
            }
            assert!(!watchdog.is_finished(), "idle while bytes flow");
        }
        let quiet_from = Instant::now();
        watchdog.await.expect("watchdog");
        let quiet = quiet_from.elapsed();
        assert!(
            quiet >= Duration::from_millis(400) && quiet < Duration::from_millis(1500),
            "fired after {quiet:?} of quiet"
        );
    }
}
