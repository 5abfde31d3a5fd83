//! A panic fails one request or one reconcile, never the process (as kube-apiserver's
//! panic recovery and client-go's `HandleCrash` do): the API server turns a handler's
//! panic into a 500 Status for that request, kube-rs controllers' reconciles and the
//! node components' syncs turn it into a failed attempt that is retried with backoff, and
//! every long-running component task is restarted by [`supervise`] if it panics anyway.
//!
//! Owns: the process's panic hook (one log line with the location and a backtrace through
//! `tracing`, readable under journald) and the `k3rs_panics_total{component}` counters
//! that `/metrics` shows. Touches nothing else. Needs `panic = "unwind"` (the release
//! profile sets it; see Cargo.toml for what that costs).

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

static COUNTS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Logs every panic once, where it happens, with its backtrace. Installed by `main`.
pub fn install_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = payload_message(info.payload());
        let location = info
            .location()
            .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
            .unwrap_or_default();
        let thread = std::thread::current();
        let backtrace = std::backtrace::Backtrace::force_capture();
        tracing::error!(
            panic = %message,
            %location,
            thread = thread.name().unwrap_or("unnamed"),
            "panicked (the request or sync that hit it fails; the process goes on)\n{backtrace}"
        );
    }));
}

/// The text of a panic's payload (`panic!("...")` gives `&str` or `String`).
pub fn payload_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

fn count(component: &'static str) {
    let mut counts = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    *counts.entry(component).or_default() += 1;
}

/// Panics caught so far, per component.
pub fn counts() -> Vec<(&'static str, u64)> {
    let counts = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    counts.iter().map(|(k, v)| (*k, *v)).collect()
}

/// The Prometheus lines for the counters (empty until something panicked, but the
/// HELP/TYPE header is always there so the metric can be looked for).
pub fn render_metrics(out: &mut String) {
    use std::fmt::Write;
    out.push_str("# HELP k3rs_panics_total Panics caught and survived, by component.\n# TYPE k3rs_panics_total counter\n");
    for (component, n) in counts() {
        let _ = writeln!(out, "k3rs_panics_total{{component=\"{component}\"}} {n}");
    }
}

/// Runs `fut`; a panic inside it is counted under `component` and returned as its
/// message instead of unwinding further. The hook has already logged it.
pub async fn catch<F: Future>(component: &'static str, fut: F) -> Result<F::Output, String> {
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(out) => Ok(out),
        Err(payload) => {
            count(component);
            Err(payload_message(payload.as_ref()))
        }
    }
}

/// Runs `f` (synchronous); as [`catch`].
pub fn catch_sync<T>(component: &'static str, f: impl FnOnce() -> T) -> Result<T, String> {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(out) => Ok(out),
        Err(payload) => {
            count(component);
            Err(payload_message(payload.as_ref()))
        }
    }
}

/// Spawns a long-running component task made by `make`, and makes it again after a panic
/// (1 s, doubling to 60 s between attempts; back to 1 s once a run lasted 5 minutes). A
/// task that returns is not restarted: it ended on purpose or logged why.
pub fn supervise<F, Fut>(component: &'static str, make: F) -> tokio::task::JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        let mut backoff = Duration::from_secs(1);
        loop {
            let started = Instant::now();
            // A task of its own, so a panic inside unwinds only that task's future.
            match tokio::spawn(make()).await {
                Ok(()) => return,
                Err(e) if e.is_panic() => {
                    count(component);
                    if started.elapsed() > Duration::from_secs(300) {
                        backoff = Duration::from_secs(1);
                    }
                    tracing::error!(
                        component,
                        restart_in = ?backoff,
                        "the component panicked; restarting it"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                }
                Err(_) => return, // Cancelled: the runtime is shutting down.
            }
        }
    })
}

/// Test-only fault injection, compiled into debug builds only (the release binary has
/// none): with `K3RS_TEST_PANIC_HOOKS=1` in the environment, [`test_hook`] at `site`
/// panics for an object whose name starts with `k3rs-test-panic-<site>`. The integration
/// test `tests/panic_recovery.rs` uses it to make a handler (`create`) and a controller
/// (`reconcile`) panic.
#[cfg(debug_assertions)]
pub fn test_hook(site: &str, name: &str) {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let enabled =
        *ENABLED.get_or_init(|| std::env::var("K3RS_TEST_PANIC_HOOKS").is_ok_and(|v| v == "1"));
    if enabled
        && name
            .strip_prefix("k3rs-test-panic-")
            .is_some_and(|rest| rest.starts_with(site))
    {
        panic!("test hook: injected panic at {site} for {name}");
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn test_hook(_site: &str, _name: &str) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_caught_panic_is_counted_and_reported() {
        let before = counts()
            .into_iter()
            .find(|(c, _)| *c == "unit-test")
            .map_or(0, |(_, n)| n);
        let out = catch("unit-test", async { panic!("boom {}", 1) }).await;
        assert_eq!(out, Err("boom 1".to_string()));
        assert_eq!(catch("unit-test", async { 5 }).await, Ok(5));
        assert_eq!(
            catch_sync("unit-test", || -> u8 { panic!("sync") }),
            Err("sync".into())
        );
        let after = counts()
            .into_iter()
            .find(|(c, _)| *c == "unit-test")
            .map_or(0, |(_, n)| n);
        assert_eq!(after, before + 2);
        let mut text = String::new();
        render_metrics(&mut text);
        assert!(
            text.contains("k3rs_panics_total{component=\"unit-test\"}"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_supervised_task_is_restarted_after_a_panic() {
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let seen = runs.clone();
        let handle = supervise("unit-test-supervise", move || {
            let runs = seen.clone();
            async move {
                if runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    panic!("first run fails");
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(5), handle)
            .await
            .expect("restarted and finished")
            .expect("joined");
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
