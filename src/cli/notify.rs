//! The systemd notification protocol (sd_notify(3)), written by hand: newline-separated
//! `KEY=VALUE` assignments sent as one datagram to the Unix socket named by
//! `NOTIFY_SOCKET` (a path, or an abstract name when it starts with `@`), plus the
//! watchdog interval from `WATCHDOG_USEC`/`WATCHDOG_PID`.
//!
//! Owns only the socket and the message format; callers decide when the service is
//! ready. Without `NOTIFY_SOCKET` (not started by systemd with `Type=notify`) every
//! call is a no-op, so the binary behaves the same outside systemd.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// A connection to systemd's notification socket, or nothing outside systemd.
#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

/// Why `NOTIFY_SOCKET` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("NOTIFY_SOCKET={value:?} is not a socket path or an @abstract name")]
    BadAddress { value: String },
    #[error("NOTIFY_SOCKET={value:?}: {source}")]
    Socket { value: String, source: io::Error },
}

impl Notifier {
    /// A notifier that sends nothing.
    pub fn disabled() -> Notifier {
        Notifier { target: None }
    }

    /// Reads `NOTIFY_SOCKET`. Unset or empty gives a disabled notifier.
    pub fn from_env() -> Result<Notifier, NotifyError> {
        match std::env::var("NOTIFY_SOCKET") {
            Ok(value) if !value.is_empty() => Notifier::connect(&value),
            _ => Ok(Notifier::disabled()),
        }
    }

    /// A notifier for an explicit socket address (`/path` or `@abstract`).
    pub fn connect(value: &str) -> Result<Notifier, NotifyError> {
        let address = parse_address(value)?;
        let socket = UnixDatagram::unbound().map_err(|source| NotifyError::Socket {
            value: value.to_string(),
            source,
        })?;
        Ok(Notifier {
            target: Some((socket, address)),
        })
    }

    /// True when notifications go somewhere.
    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends raw assignments, e.g. `"READY=1\nSTATUS=Running"`.
    pub fn send(&self, message: &str) -> io::Result<()> {
        match &self.target {
            Some((socket, address)) => socket.send_to_addr(message.as_bytes(), address).map(drop),
            None => Ok(()),
        }
    }

    /// Sends and logs (rather than fails on) an error: a lost notification must not
    /// stop the server, but the reason belongs in the journal.
    fn send_logged(&self, message: &str) {
        if let Err(e) = self.send(message) {
            tracing::warn!(error = %e, message, "cannot notify systemd");
        }
    }

    /// `READY=1` with a status line.
    pub fn ready(&self, status: &str) {
        self.send_logged(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// `STATUS=<text>`: shown by `systemctl status`.
    pub fn status(&self, status: &str) {
        self.send_logged(&format!("STATUS={}", one_line(status)));
    }

    /// `STOPPING=1`: the service is shutting down.
    pub fn stopping(&self) {
        self.send_logged("STOPPING=1\nSTATUS=Shutting down");
    }

    /// `WATCHDOG=1`: keep-alive ping.
    pub fn watchdog(&self) {
        self.send_logged("WATCHDOG=1");
    }
}

/// The interval at which to ping the watchdog: half of `WATCHDOG_USEC` (as sd_notify
/// recommends), when it is set and `WATCHDOG_PID` is unset or names this process.
pub fn watchdog_interval() -> Option<Duration> {
    watchdog_interval_from(
        std::env::var("WATCHDOG_USEC").ok().as_deref(),
        std::env::var("WATCHDOG_PID").ok().as_deref(),
        std::process::id(),
    )
}

fn watchdog_interval_from(usec: Option<&str>, pid: Option<&str>, my_pid: u32) -> Option<Duration> {
    if let Some(pid) = pid.filter(|p| !p.is_empty())
        && pid.trim().parse::<u32>().ok() != Some(my_pid)
    {
        return None;
    }
    let usec: u64 = usec?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

fn parse_address(value: &str) -> Result<SocketAddr, NotifyError> {
    let bad = || NotifyError::BadAddress {
        value: value.to_string(),
    };
    if let Some(name) = value.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        SocketAddr::from_abstract_name(name.as_bytes()).map_err(|_| bad())
    } else if value.starts_with('/') {
        SocketAddr::from_pathname(value).map_err(|_| bad())
    } else {
        Err(bad())
    }
}

/// Status text must stay on one line (a newline would start a new assignment).
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receive(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let n = socket.recv(&mut buf).expect("a datagram");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn sends_to_a_path_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).expect("bind");
        let n = Notifier::connect(path.to_str().expect("utf-8")).expect("connect");
        assert!(n.is_enabled());
        n.status("Starting\nstill");
        n.ready("Running");
        n.stopping();
        n.watchdog();
        assert_eq!(receive(&listener), "STATUS=Starting still");
        assert_eq!(receive(&listener), "READY=1\nSTATUS=Running");
        assert_eq!(receive(&listener), "STOPPING=1\nSTATUS=Shutting down");
        assert_eq!(receive(&listener), "WATCHDOG=1");
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("k3rs-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
        let listener = UnixDatagram::bind_addr(&addr).expect("bind");
        let n = Notifier::connect(&format!("@{name}")).expect("connect");
        n.ready("ok");
        assert_eq!(receive(&listener), "READY=1\nSTATUS=ok");
    }

    #[test]
    fn disabled_and_bad_addresses() {
        let n = Notifier::disabled();
        assert!(!n.is_enabled());
        n.ready("nobody listens");
        assert!(n.send("READY=1").is_ok());
        let e = Notifier::connect("relative/path").expect_err("not absolute");
        assert!(e.to_string().contains("not a socket path"), "{e}");
        // Nobody listening on the path: the send fails, which callers log.
        let n = Notifier::connect("/nonexistent/k3rs.sock").expect("connect is lazy");
        assert!(n.send("READY=1").is_err());
    }

    #[test]
    fn watchdog_intervals() {
        assert_eq!(
            watchdog_interval_from(Some("20000000"), None, 7),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            watchdog_interval_from(Some("20000000"), Some("7"), 7),
            Some(Duration::from_secs(10))
        );
        assert_eq!(watchdog_interval_from(Some("20000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval_from(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval_from(Some("x"), None, 7), None);
        assert_eq!(watchdog_interval_from(None, None, 7), None);
    }
}
