//! The size bound, scaled down: heavy churn over few keys must leave the database
//! files near the live data size once compaction and checkpoints catch up (the full
//! 1,000,000-update run is in `cargo bench --bench store`).

use std::time::{Duration, Instant};

use k3rs::store::{CompactionPolicy, Store, StoreConfig};

#[test]
fn churn_leaves_the_database_small() {
    const KEYS: usize = 100;
    const UPDATES: usize = 40_000;
    const VALUE: usize = 1024;
    let dir = tempfile::tempdir().unwrap();
    let mut config = StoreConfig::new(dir.path());
    // Production keeps 5 minutes; this test runs for seconds, so keep no time floor.
    config.compaction = CompactionPolicy {
        min_age: Duration::ZERO,
        interval: Duration::from_millis(200),
        ..CompactionPolicy::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Store::open(config).unwrap();
        let mut tasks = Vec::new();
        for writer in 0..16 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut revisions = Vec::new();
                for k in (writer..KEYS).step_by(16) {
                    let key = format!("/size/{k:04}");
                    revisions.push((key.clone(), store.create(key.as_bytes(), vec![0; VALUE]).await.unwrap().mod_revision));
                }
                let rounds = UPDATES / KEYS;
                for round in 0..rounds {
                    for (key, revision) in revisions.iter_mut() {
                        *revision = store
                            .update(key.as_bytes(), vec![round as u8; VALUE], *revision)
                            .await
                            .unwrap()
                            .mod_revision;
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let written = (UPDATES * VALUE) as u64;
        let live = (KEYS * VALUE) as u64;
        let bound = 2 * live + 16 * 1024 * 1024;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let usage = store.disk_usage();
            if usage <= bound {
                eprintln!("{UPDATES} updates ({written} bytes written): files total {usage} bytes (bound {bound})");
                break;
            }
            if Instant::now() >= deadline {
                for suffix in ["", "-wal", "-shm"] {
                    let mut name = store.db_path().as_os_str().to_owned();
                    name.push(suffix);
                    eprintln!("{:?}: {:?}", name, std::fs::metadata(&name).map(|m| m.len()));
                }
                let conn = rusqlite::Connection::open(store.db_path()).unwrap();
                for pragma in ["page_count", "freelist_count"] {
                    let n: i64 = conn.query_row(&format!("PRAGMA {pragma}"), [], |r| r.get(0)).unwrap();
                    eprintln!("{pragma} = {n}");
                }
                for table in ["kv", "raft_log"] {
                    let n: i64 = conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0)).unwrap();
                    eprintln!("{table} rows = {n}");
                }
            }
            assert!(
                Instant::now() < deadline,
                "files total {usage} bytes after churn, bound {bound} (compact revision {}, current {})",
                store.compact_revision(),
                store.current_revision()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(store.current_revision() - store.compact_revision() >= 1000, "kept at least 1000 revisions");
    });
}
