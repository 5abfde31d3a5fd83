//! Logging setup for the `k3rs` binary: a `tracing-subscriber` fmt layer writing to stderr.
//!
//! Under systemd-journald (the `JOURNAL_STREAM` variable is set) lines carry no timestamp
//! (journald adds its own) and start with the sd-daemon syslog priority prefix — `<3>` error,
//! `<4>` warn, `<6>` info, `<7>` debug and trace — so `journalctl -p warning` works. Otherwise
//! lines are the usual readable `tracing` format with timestamps (coloured on a terminal).
//!
//! The level is `info`, or `debug` for k3rs itself with `--debug` (dependencies stay at `info`
//! so TLS/HTTP internals do not drown the output); `RUST_LOG` overrides both.
//!
//! Owns log formatting and filtering only; it does not decide what is logged.

use std::fmt::{self, Write as _};
use std::io::IsTerminal;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// True when stderr goes to systemd-journald.
pub fn under_journald() -> bool {
    std::env::var_os("JOURNAL_STREAM").is_some_and(|v| !v.is_empty())
}

/// Installs the global subscriber. Call once, early in `main`.
pub fn init(debug: bool) -> anyhow::Result<()> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(debug, rust_log.as_deref())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if under_journald() {
        builder.event_format(JournaldFormat).try_init()
    } else {
        builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init()
    };
    result.map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}

/// The filter: `RUST_LOG` if set and non-empty, else `info` (`k3rs=debug` with `--debug`).
pub fn filter(debug: bool, rust_log: Option<&str>) -> anyhow::Result<EnvFilter> {
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        Some(directives) => EnvFilter::try_new(directives)
            .map_err(|e| anyhow::anyhow!("invalid RUST_LOG {directives:?}: {e}")),
        None => {
            let directives = if debug { "info,k3rs=debug" } else { "info" };
            EnvFilter::try_new(directives).map_err(|e| anyhow::anyhow!("{e}"))
        }
    }
}

/// The sd-daemon(3) priority for a level: 3 err, 4 warning, 6 info, 7 debug.
pub fn syslog_priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// Prints a fatal error the way the binary ends: `Error: <message>`, with the `<3>` priority
/// prefix under journald. Works whether or not logging was initialised.
pub fn print_fatal(message: &dyn fmt::Display) {
    let prefix = if under_journald() { "<3>" } else { "" };
    for (i, line) in message.to_string().lines().enumerate() {
        if i == 0 {
            eprintln!("{prefix}Error: {line}");
        } else {
            eprintln!("{prefix}{line}");
        }
    }
}

/// Event format for journald: `<prio>LEVEL target: span{fields}: message fields`, every line
/// of a multi-line message carrying the prefix, no timestamp.
#[derive(Debug, Clone, Copy, Default)]
pub struct JournaldFormat;

impl<S, N> FormatEvent<S, N> for JournaldFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut body = String::new();
        write!(body, "{} {}: ", meta.level(), meta.target())?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                body.push_str(span.name());
                let ext = span.extensions();
                if let Some(fields) = ext.get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    write!(body, "{{{fields}}}")?;
                }
                body.push_str(": ");
            }
        }
        ctx.format_fields(Writer::new(&mut body), event)?;
        let priority = syslog_priority(*meta.level());
        for line in body.lines() {
            writeln!(writer, "<{priority}>{line}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex, PoisonError};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Buffer {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner))
                .into_owned()
        }
    }

    fn capture(journald: bool, emit: impl FnOnce()) -> String {
        let buf = Buffer::default();
        let writer = buf.clone();
        let builder = tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::new("trace"))
            .with_ansi(false)
            .with_writer(move || writer.clone());
        if journald {
            tracing::subscriber::with_default(builder.event_format(JournaldFormat).finish(), emit);
        } else {
            tracing::subscriber::with_default(builder.finish(), emit);
        }
        buf.text()
    }

    #[test]
    fn journald_lines_carry_priority_and_no_timestamp() {
        let out = capture(true, || {
            tracing::error!(path = "/x", "cannot write");
            tracing::warn!("careful");
            tracing::info!("hello");
            tracing::debug!("details");
            tracing::trace!("more details");
            let span = tracing::info_span!("pki", dir = "/tls");
            span.in_scope(|| tracing::info!("two\nlines"));
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 7, "{out}");
        assert!(
            lines[0].starts_with("<3>ERROR k3rs::cli::logging::tests: cannot write path=\"/x\""),
            "{out}"
        );
        assert!(lines[1].starts_with("<4>WARN "), "{out}");
        assert!(lines[2].starts_with("<6>INFO "), "{out}");
        assert!(lines[3].starts_with("<7>DEBUG "), "{out}");
        assert!(lines[4].starts_with("<7>TRACE "), "{out}");
        assert!(lines[5].contains("pki{dir=\"/tls\"}: two"), "{out}");
        assert_eq!(lines[6], "<6>lines", "{out}");
        assert!(!out.contains("Z "), "no timestamps: {out}");
    }

    #[test]
    fn plain_lines_have_timestamps() {
        let out = capture(false, || tracing::info!("hello"));
        assert!(!out.starts_with('<'), "{out}");
        // RFC 3339 timestamp first, e.g. 2026-01-02T03:04:05.678901Z
        let first = out.split_whitespace().next().unwrap_or_default();
        assert!(first.len() > 20 && first.contains('T'), "{out}");
        assert!(out.contains("INFO") && out.contains("hello"), "{out}");
    }

    #[test]
    fn priorities() {
        assert_eq!(syslog_priority(Level::ERROR), 3);
        assert_eq!(syslog_priority(Level::WARN), 4);
        assert_eq!(syslog_priority(Level::INFO), 6);
        assert_eq!(syslog_priority(Level::DEBUG), 7);
        assert_eq!(syslog_priority(Level::TRACE), 7);
    }

    #[test]
    fn filter_levels() {
        let f = filter(false, None).expect("valid");
        assert_eq!(f.to_string(), "info");
        let f = filter(true, None).expect("valid");
        assert!(f.to_string().contains("k3rs=debug"), "{f}");
        let f = filter(false, Some("k3rs::pki=trace")).expect("valid");
        assert_eq!(f.to_string(), "k3rs::pki=trace");
        let f = filter(true, Some("  ")).expect("valid");
        assert!(
            f.to_string().contains("k3rs=debug"),
            "empty RUST_LOG is ignored: {f}"
        );
        assert!(filter(false, Some("k3rs=notalevel")).is_err());
    }
}
