//! Property test: random sequences of store operations, with restarts in between,
//! run against the real store and a simple in-memory model; every result must match.

use std::collections::BTreeMap;

use k3rs::store::{KeyValue, RangeRequest, Store, StoreConfig, StoreError};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Create(u8, u8),
    Update { key: u8, value: u8, stale: bool },
    Delete { key: u8, expected: Option<bool> },
    Get(u8),
    Range { prefix: u8, limit: usize },
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6u8, any::<u8>()).prop_map(|(k, v)| Op::Create(k, v)),
        4 => (0..6u8, any::<u8>(), any::<bool>()).prop_map(|(key, value, stale)| Op::Update { key, value, stale }),
        2 => (0..6u8, proptest::option::of(any::<bool>())).prop_map(|(key, expected)| Op::Delete { key, expected }),
        2 => (0..6u8).prop_map(Op::Get),
        2 => (0..3u8, 0..4usize).prop_map(|(prefix, limit)| Op::Range { prefix, limit }),
        1 => Just(Op::Restart),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("/m/{}/{k}", k % 3).into_bytes()
}

/// What an operation returned, reduced to something comparable.
#[derive(Debug, PartialEq)]
enum Outcome {
    Kv(Option<KeyValue>),
    Deleted(KeyValue, i64),
    List(Vec<KeyValue>, bool),
    Err(&'static str),
    Restarted,
}

fn err(e: &StoreError) -> Outcome {
    Outcome::Err(match e {
        StoreError::NotFound { .. } => "not found",
        StoreError::AlreadyExists { .. } => "exists",
        StoreError::Conflict { .. } => "conflict",
        other => panic!("unexpected error {other}"),
    })
}

#[derive(Default)]
struct Model {
    revision: i64,
    keys: BTreeMap<Vec<u8>, KeyValue>,
}

impl Model {
    fn apply(&mut self, op: &Op) -> Outcome {
        match op {
            Op::Create(k, v) => {
                let key = key(*k);
                if self.keys.contains_key(&key) {
                    return Outcome::Err("exists");
                }
                self.revision += 1;
                let kv = KeyValue {
                    key: key.clone(),
                    value: vec![*v],
                    create_revision: self.revision,
                    mod_revision: self.revision,
                    version: 1,
                };
                self.keys.insert(key, kv.clone());
                Outcome::Kv(Some(kv))
            }
            Op::Update {
                key: k,
                value,
                stale,
            } => {
                let key = key(*k);
                let Some(current) = self.keys.get(&key).cloned() else {
                    return Outcome::Err("not found");
                };
                if *stale {
                    return Outcome::Err("conflict");
                }
                self.revision += 1;
                let kv = KeyValue {
                    value: vec![*value],
                    mod_revision: self.revision,
                    version: current.version + 1,
                    ..current
                };
                self.keys.insert(key, kv.clone());
                Outcome::Kv(Some(kv))
            }
            Op::Delete { key: k, expected } => {
                let key = key(*k);
                let Some(current) = self.keys.get(&key).cloned() else {
                    return Outcome::Err("not found");
                };
                if *expected == Some(true) {
                    return Outcome::Err("conflict");
                }
                self.revision += 1;
                self.keys.remove(&key);
                Outcome::Deleted(current, self.revision)
            }
            Op::Get(k) => Outcome::Kv(self.keys.get(&key(*k)).cloned()),
            Op::Range { prefix, limit } => {
                let prefix = format!("/m/{prefix}/").into_bytes();
                let all: Vec<KeyValue> = self
                    .keys
                    .values()
                    .filter(|kv| kv.key.starts_with(&prefix))
                    .cloned()
                    .collect();
                let more = *limit != 0 && all.len() > *limit;
                let take = if *limit == 0 {
                    all.len()
                } else {
                    (*limit).min(all.len())
                };
                Outcome::List(all[..take].to_vec(), more)
            }
            Op::Restart => Outcome::Restarted,
        }
    }
}

async fn run(store: &Store, op: &Op) -> Outcome {
    match op {
        Op::Create(k, v) => match store.create(&key(*k), vec![*v]).await {
            Ok(kv) => Outcome::Kv(Some(kv)),
            Err(e) => err(&e),
        },
        Op::Update {
            key: k,
            value,
            stale,
        } => {
            let current = store.get(&key(*k)).await.unwrap();
            // A stale expectation: a revision the key never had at its newest.
            let expected = match (&current, stale) {
                (Some(kv), false) => kv.mod_revision,
                (Some(kv), true) => kv.mod_revision - 1,
                (None, _) => 1,
            };
            match store.update(&key(*k), vec![*value], expected).await {
                Ok(kv) => Outcome::Kv(Some(kv)),
                Err(e) => err(&e),
            }
        }
        Op::Delete { key: k, expected } => {
            let current = store.get(&key(*k)).await.unwrap();
            let expected = match (expected, &current) {
                (None, _) => None,
                (Some(false), Some(kv)) => Some(kv.mod_revision),
                (Some(true), Some(kv)) => Some(kv.mod_revision + 1000),
                (Some(_), None) => Some(1),
            };
            match store.delete(&key(*k), expected).await {
                Ok((kv, revision)) => Outcome::Deleted(kv, revision),
                Err(e) => err(&e),
            }
        }
        Op::Get(k) => Outcome::Kv(store.get(&key(*k)).await.unwrap()),
        Op::Range { prefix, limit } => {
            let result = store
                .range(RangeRequest {
                    prefix: format!("/m/{prefix}/").into_bytes(),
                    limit: *limit,
                    ..Default::default()
                })
                .await
                .unwrap();
            Outcome::List(result.kvs, result.more)
        }
        Op::Restart => unreachable!("restarts are handled by the caller"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn store_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let mut store = Store::open(StoreConfig::new(dir.path())).unwrap();
            let mut model = Model::default();
            for (i, op) in ops.iter().enumerate() {
                let want = model.apply(op);
                let got = if let Op::Restart = op {
                    // Drop first: the directory lock must be free before reopening.
                    drop(store);
                    store = Store::open(StoreConfig::new(dir.path())).unwrap();
                    Outcome::Restarted
                } else {
                    run(&store, op).await
                };
                assert_eq!(got, want, "op #{i} {op:?}");
                assert_eq!(store.current_revision(), model.revision, "revision after op #{i} {op:?}");
            }
        });
    }
}
