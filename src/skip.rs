//! Warnings for objects a component skips because a field does not parse (a hostile or
//! corrupt Service port name, a Node's VTEP MAC, …). Components re-render on every change,
//! so the same bad object would log on every sync: each distinct key warns once. The set
//! of keys seen is bounded (cleared when full), so a flood of distinct bad objects costs
//! at most a repeat of their warnings, never unbounded memory. Touches nothing else.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

const MAX_KEYS: usize = 4096;

/// Hashes of the keys that warned: a hostile 10 KB name costs 8 bytes here.
static SEEN: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

/// Runs `warn` unless `key` has warned before.
pub fn warn_once(key: &str, warn: impl FnOnce()) {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    let hash = hasher.finish();
    let first = {
        let mut guard = SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let seen = guard.get_or_insert_with(HashSet::new);
        if seen.contains(&hash) {
            false
        } else {
            if seen.len() >= MAX_KEYS {
                seen.clear();
            }
            seen.insert(hash);
            true
        }
    };
    if first {
        warn();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn warns_once_per_key() {
        let mut count = 0;
        for _ in 0..3 {
            super::warn_once("skip-test/a", || count += 1);
        }
        super::warn_once("skip-test/b", || count += 1);
        assert_eq!(count, 2);
    }
}
