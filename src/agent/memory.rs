//! The agent process's allocator settings, for a small idle footprint (issue 5's goal: idle
//! RSS ≤ 24 MB for `k3rs agent`).
//!
//! glibc's malloc gives threads their own arenas (up to 8 per core) and keeps freed memory
//! for reuse; after the start-up burst (joining, image import, the first relists) most of it is
//! free but still resident. [`limit_arenas`] caps the arenas at two, [`trim_loop`] hands free
//! pages back to the kernel now and then. Other C libraries (musl) get neither: theirs already
//! return memory eagerly.
//!
//! Touches only the process's allocator; nothing here talks to the API or the runtime.

use std::time::Duration;

/// How many malloc arenas the agent's threads share.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENAS: libc::c_int = 2;

/// How often free heap memory is returned to the kernel.
pub const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Caps glibc's malloc arenas. Call it before any thread starts (the async runtime's workers
/// pick their arena on first allocation).
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc's tuning; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// Returns free heap pages to the kernel; true when some memory was released.
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim is thread-safe and only releases memory malloc does not use.
    unsafe {
        libc::malloc_trim(0) == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Trims the heap every [`TRIM_EVERY`], forever (a few milliseconds of CPU each time).
pub async fn trim_loop() {
    let mut tick = tokio::time::interval(TRIM_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // malloc_trim walks every arena: off the async workers.
        let _ = tokio::task::spawn_blocking(trim).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimming_is_safe_after_freeing() {
        limit_arenas();
        let big: Vec<Vec<u8>> = (0..64).map(|_| vec![1u8; 64 * 1024]).collect();
        drop(big);
        // Whether pages come back depends on the heap's layout; it must simply not fail.
        let _ = trim();
    }
}
