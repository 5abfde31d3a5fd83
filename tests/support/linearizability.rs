//! A linearizability checker for histories of get / put / compare-and-set on string keys,
//! in the style of etcd's robustness tests (which use porcupine): the Wing–Gong search
//! with Lowe's memoisation of (set of linearized operations, model state).
//!
//! Linearizability is local (Herlihy & Wing): a history is linearizable exactly when the
//! sub-history of every key is, so each key is checked on its own, which keeps the search
//! small. The model of one key is a register holding `Option<String>` (absent or a value).
//!
//! An operation whose outcome the client never learned (a timeout, a dropped connection)
//! may have taken effect at any point after its call, or never: it gets a return time of
//! "infinity", and its output is not checked. For a get that means it constrains nothing,
//! so such gets are dropped up front. Putting a write that never happened at the very end of
//! the order is indistinguishable from it never happening, so "or never" needs no extra case.
//!
//! Include it with `#[path = "support/linearizability.rs"] mod linearizability;` (tests)
//! or `#[path = "../tests/support/linearizability.rs"]` (benches).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet};

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Get,
    Put(String),
    /// Replace the value only if it currently equals `expected` (`None`: the key is absent).
    Cas {
        expected: Option<String>,
        new: String,
    },
}

/// What the client saw come back. `Unknown`: no answer (timeout, connection lost).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Value(Option<String>),
    Ok,
    CasFailed,
    Unknown,
}

/// One operation as a client recorded it: times are monotonic nanoseconds of one clock.
#[derive(Clone, Debug)]
pub struct Operation {
    pub client: usize,
    pub key: String,
    pub input: Input,
    pub output: Output,
    pub call: u64,
    /// When the answer arrived; ignored when `output` is `Unknown`.
    pub ret: u64,
}

/// Why a history is not linearizable: the key, and the operations of that key.
#[derive(Debug)]
pub struct Violation {
    pub key: String,
    pub operations: Vec<Operation>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "history of key {:?} is not linearizable ({} operations):",
            self.key,
            self.operations.len()
        )?;
        let mut ops = self.operations.clone();
        ops.sort_by_key(|op| op.call);
        for op in ops {
            let ret = if op.output == Output::Unknown {
                "?".to_string()
            } else {
                op.ret.to_string()
            };
            writeln!(
                f,
                "  client {} [{} .. {}] {:?} -> {:?}",
                op.client, op.call, ret, op.input, op.output
            )?;
        }
        Ok(())
    }
}

/// The outcome of a check: `Ok` or the first key found not linearizable. `Err(None)`
/// would mean the search gave up, which it does not: histories are checked to the end.
pub fn check(history: &[Operation]) -> Result<(), Violation> {
    let mut by_key: BTreeMap<&str, Vec<Operation>> = BTreeMap::new();
    for op in history {
        if op.input == Input::Get && op.output == Output::Unknown {
            continue;
        }
        by_key.entry(&op.key).or_default().push(op.clone());
    }
    for (key, operations) in by_key {
        if !check_one_key(&operations) {
            return Err(Violation {
                key: key.to_string(),
                operations,
            });
        }
    }
    Ok(())
}

/// The register's step: the state after `input`, if `output` is what it could answer.
fn step(state: &Option<String>, input: &Input, output: &Output) -> Option<Option<String>> {
    match input {
        Input::Get => match output {
            Output::Value(seen) if seen == state => Some(state.clone()),
            _ => None,
        },
        Input::Put(value) => match output {
            Output::Ok | Output::Unknown => Some(Some(value.clone())),
            _ => None,
        },
        Input::Cas { expected, new } => {
            let matches = expected == state;
            match output {
                Output::Ok if matches => Some(Some(new.clone())),
                Output::CasFailed if !matches => Some(state.clone()),
                Output::Unknown if matches => Some(Some(new.clone())),
                Output::Unknown => Some(state.clone()),
                _ => None,
            }
        }
    }
}

/// One event of the time line: the call or the return of operation `op`.
#[derive(Clone, Copy, Debug)]
struct Event {
    op: usize,
    is_call: bool,
}

/// Wing–Gong search with memoisation over one key's operations. The events form a doubly
/// linked list in time order (calls before returns at equal times, so touching operations
/// count as concurrent); linearizing an operation unlinks its call and return events, and
/// backtracking links them back in.
fn check_one_key(ops: &[Operation]) -> bool {
    let n = ops.len();
    if n == 0 {
        return true;
    }
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, op) in ops.iter().enumerate() {
        let ret = if op.output == Output::Unknown {
            u64::MAX
        } else {
            op.ret.max(op.call)
        };
        // false sorts first: calls (is_return = false) before returns at equal times.
        events.push((op.call, false, i));
        events.push((ret, true, i));
    }
    events.sort();
    let list: Vec<Event> = events
        .iter()
        .map(|&(_, is_return, op)| Event {
            op,
            is_call: !is_return,
        })
        .collect();
    // Positions of each operation's call and return in `list`.
    let mut call_at = vec![0; n];
    let mut return_at = vec![0; n];
    for (pos, event) in list.iter().enumerate() {
        if event.is_call {
            call_at[event.op] = pos;
        } else {
            return_at[event.op] = pos;
        }
    }
    // A doubly linked list over `list` with a head sentinel at index `len`; END ends it.
    const END: usize = usize::MAX;
    let len = list.len();
    let head = len;
    let mut next: Vec<usize> = (1..len).chain([END, 0]).collect();
    let mut prev: Vec<usize> = std::iter::once(head)
        .chain(0..len - 1)
        .chain([END])
        .collect();
    let unlink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, pos: usize| {
        let (p, nx) = (prev[pos], next[pos]);
        next[p] = nx;
        if nx != END {
            prev[nx] = p;
        }
    };
    // Undoes `unlink`, provided unlinks are undone in reverse order (dancing links).
    let relink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, pos: usize| {
        let (p, nx) = (prev[pos], next[pos]);
        next[p] = pos;
        if nx != END {
            prev[nx] = pos;
        }
    };

    let words = n.div_ceil(64);
    let mut linearized = vec![0u64; words];
    let mut seen: HashSet<(Vec<u64>, Option<String>)> = HashSet::new();
    let mut state: Option<String> = None;
    // Stack of (operation, state before it).
    let mut stack: Vec<(usize, Option<String>)> = Vec::new();
    let mut cursor = next[head];
    loop {
        if next[head] == END {
            return true; // every event unlinked: all operations linearized
        }
        if cursor == END {
            // Unreachable in practice (a skipped call is always followed by its own
            // return, which backtracks first); treated as a dead end all the same.
            match backtrack(&mut stack, &mut linearized, &mut state) {
                Some(op) => {
                    relink(&mut next, &mut prev, return_at[op]);
                    relink(&mut next, &mut prev, call_at[op]);
                    cursor = next[call_at[op]];
                    continue;
                }
                None => return false,
            }
        }
        let event = list[cursor];
        if event.is_call {
            let op = &ops[event.op];
            if let Some(after) = step(&state, &op.input, &op.output) {
                linearized[event.op / 64] |= 1 << (event.op % 64);
                let fresh = seen.insert((linearized.clone(), after.clone()));
                if fresh {
                    stack.push((event.op, std::mem::replace(&mut state, after)));
                    unlink(&mut next, &mut prev, call_at[event.op]);
                    unlink(&mut next, &mut prev, return_at[event.op]);
                    cursor = next[head];
                    continue;
                }
                linearized[event.op / 64] &= !(1 << (event.op % 64));
            }
            cursor = next[cursor];
        } else {
            // A return reached while its operation is not linearized: it had to take
            // effect before this point, so the last choice was wrong.
            match backtrack(&mut stack, &mut linearized, &mut state) {
                Some(op) => {
                    relink(&mut next, &mut prev, return_at[op]);
                    relink(&mut next, &mut prev, call_at[op]);
                    cursor = next[call_at[op]];
                }
                None => return false,
            }
        }
    }
}

/// Undoes the last linearization step; returns the operation it undid.
fn backtrack(
    stack: &mut Vec<(usize, Option<String>)>,
    linearized: &mut [u64],
    state: &mut Option<String>,
) -> Option<usize> {
    let (op, before) = stack.pop()?;
    *state = before;
    linearized[op / 64] &= !(1 << (op % 64));
    Some(op)
}

#[cfg(test)]
mod checker_tests {
    use super::*;

    fn op(client: usize, call: u64, ret: u64, input: Input, output: Output) -> Operation {
        Operation {
            client,
            key: "k".into(),
            input,
            output,
            call,
            ret,
        }
    }
    fn put(v: &str) -> Input {
        Input::Put(v.into())
    }
    fn val(v: Option<&str>) -> Output {
        Output::Value(v.map(str::to_string))
    }

    #[test]
    fn sequential_history_is_linearizable() {
        let h = vec![
            op(0, 0, 1, Input::Get, val(None)),
            op(0, 2, 3, put("a"), Output::Ok),
            op(0, 4, 5, Input::Get, val(Some("a"))),
        ];
        assert!(check(&h).is_ok());
    }

    #[test]
    fn stale_read_after_acknowledged_write_is_caught() {
        let h = vec![
            op(0, 0, 1, put("a"), Output::Ok),
            op(0, 2, 3, put("b"), Output::Ok),
            op(1, 4, 5, Input::Get, val(Some("a"))),
        ];
        let violation = check(&h).expect_err("a read of an overwritten value must fail");
        assert_eq!(violation.key, "k");
        assert!(violation.to_string().contains("not linearizable"));
    }

    #[test]
    fn concurrent_operations_may_take_either_order() {
        // The read overlaps the write: both old and new values are fine.
        for seen in [None, Some("a")] {
            let h = vec![
                op(0, 0, 10, put("a"), Output::Ok),
                op(1, 5, 6, Input::Get, val(seen)),
            ];
            assert!(check(&h).is_ok(), "{seen:?}");
        }
    }

    #[test]
    fn reads_may_not_go_back_in_time() {
        // Two reads during one write: once a client saw the new value, a later read
        // that started after that read returned must not see the old one.
        let h = vec![
            op(0, 0, 100, put("a"), Output::Ok),
            op(1, 10, 20, Input::Get, val(Some("a"))),
            op(2, 30, 40, Input::Get, val(None)),
        ];
        assert!(check(&h).is_err());
    }

    #[test]
    fn compare_and_set_outcomes_are_checked() {
        let cas = |expected: Option<&str>, new: &str| Input::Cas {
            expected: expected.map(str::to_string),
            new: new.into(),
        };
        // Two CAS from the same value cannot both succeed.
        let both = vec![
            op(0, 0, 1, put("a"), Output::Ok),
            op(1, 2, 10, cas(Some("a"), "b"), Output::Ok),
            op(2, 3, 11, cas(Some("a"), "c"), Output::Ok),
        ];
        assert!(check(&both).is_err());
        let one = vec![
            op(0, 0, 1, put("a"), Output::Ok),
            op(1, 2, 10, cas(Some("a"), "b"), Output::Ok),
            op(2, 3, 11, cas(Some("a"), "c"), Output::CasFailed),
            op(0, 12, 13, Input::Get, val(Some("b"))),
        ];
        assert!(check(&one).is_ok());
        // A CAS that failed while the value did match is wrong.
        let wrong = vec![
            op(0, 0, 1, put("a"), Output::Ok),
            op(1, 2, 3, cas(Some("a"), "b"), Output::CasFailed),
        ];
        assert!(check(&wrong).is_err());
        // Unless a concurrent write changed the value first.
        let raced = vec![
            op(0, 0, 1, put("a"), Output::Ok),
            op(1, 2, 5, cas(Some("a"), "b"), Output::CasFailed),
            op(2, 3, 4, put("c"), Output::Ok),
        ];
        assert!(check(&raced).is_ok());
    }

    #[test]
    fn unknown_outcomes_may_or_may_not_have_happened() {
        // A timed-out write seen by a later read: fine (it happened).
        let seen = vec![
            op(0, 0, 0, put("a"), Output::Unknown),
            op(1, 50, 60, Input::Get, val(Some("a"))),
        ];
        assert!(check(&seen).is_ok());
        // Not seen: also fine (it never happened, or happens later).
        let unseen = vec![
            op(0, 0, 0, put("a"), Output::Unknown),
            op(1, 50, 60, Input::Get, val(None)),
        ];
        assert!(check(&unseen).is_ok());
        // But it cannot be seen before it was called.
        let early = vec![
            op(1, 0, 10, Input::Get, val(Some("a"))),
            op(0, 20, 0, put("a"), Output::Unknown),
        ];
        assert!(check(&early).is_err());
        // Nor seen, then unseen again.
        let flicker = vec![
            op(0, 0, 0, put("a"), Output::Unknown),
            op(1, 10, 20, Input::Get, val(Some("a"))),
            op(1, 30, 40, Input::Get, val(None)),
        ];
        assert!(check(&flicker).is_err());
    }

    #[test]
    fn keys_are_checked_independently() {
        let mut h = vec![
            op(0, 0, 1, put("a"), Output::Ok),
            op(0, 2, 3, Input::Get, val(Some("a"))),
        ];
        let mut other = op(1, 0, 1, Input::Get, val(Some("zzz")));
        other.key = "other".into();
        h.push(other);
        let violation = check(&h).expect_err("key other was never written");
        assert_eq!(violation.key, "other");
    }

    #[test]
    fn a_long_concurrent_history_is_checked_quickly() {
        // 8 clients × 40 operations, each client's operations sequential, all clients
        // overlapping; values unique; produced by a real sequential register so it is
        // linearizable, and the memoisation must keep the search small.
        let mut history = Vec::new();
        let mut register: Option<String> = None;
        let mut t = 0u64;
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut rand = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..40 {
            // All 8 clients call, then the register applies in a random order, then all return.
            let start = t;
            let mut order: Vec<usize> = (0..8).collect();
            for i in (1..8).rev() {
                order.swap(i, (rand() % (i as u64 + 1)) as usize);
            }
            for (slot, client) in order.into_iter().enumerate() {
                let (input, output) = match rand() % 3 {
                    0 => (Input::Get, Output::Value(register.clone())),
                    1 => {
                        let v = format!("{round}-{client}");
                        register = Some(v.clone());
                        (Input::Put(v), Output::Ok)
                    }
                    _ => {
                        let v = format!("{round}-{client}");
                        let expected = register.clone();
                        register = Some(v.clone());
                        (Input::Cas { expected, new: v }, Output::Ok)
                    }
                };
                history.push(op(
                    client,
                    start + client as u64,
                    start + 100 + slot as u64,
                    input,
                    output,
                ));
            }
            t += 200;
        }
        let began = std::time::Instant::now();
        assert!(check(&history).is_ok());
        assert!(began.elapsed() < std::time::Duration::from_secs(5));
        // And one corrupted answer makes it fail.
        let last_get = history
            .iter()
            .rposition(|op| op.input == Input::Get)
            .expect("some get");
        history[last_get].output = val(Some("never-written"));
        assert!(check(&history).is_err());
    }
}
