//! The kubelet's restart and image-pull back-off: 10 s, doubling to 5 min; forgotten after a
//! quiet spell, and reset when a container ran for 10 minutes.

use std::time::{Duration, SystemTime};

pub const INITIAL: Duration = Duration::from_secs(10);
pub const MAX: Duration = Duration::from_secs(300);
/// A container that ran this long before exiting starts over at the initial delay.
pub const RESET_AFTER_RUNNING: Duration = Duration::from_secs(600);

#[derive(Clone, Debug, Default)]
pub struct Backoff {
    delay: Option<Duration>,
    updated: Option<SystemTime>,
}

impl Backoff {
    /// The current delay (zero before the first failure).
    pub fn delay(&self) -> Duration {
        self.delay.unwrap_or_default()
    }

    /// Whether `now` is still within the delay counted from `since` (the last failure).
    pub fn in_backoff(&self, since: SystemTime, now: SystemTime) -> bool {
        match self.delay {
            Some(d) => now.duration_since(since).unwrap_or_default() < d,
            None => false,
        }
    }

    /// When the back-off counted from `since` ends.
    pub fn until(&self, since: SystemTime) -> SystemTime {
        since + self.delay()
    }

    /// Records a failure at `now`: first 10 s, then double up to 5 min. After twice the maximum
    /// without failures the entry starts over, as the kubelet's flowcontrol does.
    pub fn next(&mut self, now: SystemTime) {
        let stale = self
            .updated
            .is_some_and(|u| now.duration_since(u).unwrap_or_default() > 2 * MAX);
        self.delay = match self.delay {
            Some(d) if !stale => Some((d * 2).min(MAX)),
            _ => Some(INITIAL),
        };
        self.updated = Some(now);
    }

    pub fn reset(&mut self) {
        *self = Backoff::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_five_minutes_and_resets() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut b = Backoff::default();
        assert!(!b.in_backoff(t0, t0), "first failure restarts at once");
        let mut seen = Vec::new();
        for i in 0..7 {
            b.next(t0 + Duration::from_secs(i));
            seen.push(b.delay().as_secs());
        }
        assert_eq!(seen, [10, 20, 40, 80, 160, 300, 300]);
        assert!(b.in_backoff(t0, t0 + Duration::from_secs(299)));
        assert!(!b.in_backoff(t0, t0 + Duration::from_secs(300)));
        b.next(t0 + Duration::from_secs(2000));
        assert_eq!(b.delay(), INITIAL, "a quiet spell starts over");
        b.reset();
        assert_eq!(b.delay(), Duration::ZERO);
    }
}
