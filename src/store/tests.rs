//! Unit tests of the store's operations and errors, watch semantics, restarts,
//! compaction, snapshots and refusal of foreign or damaged files.

use std::sync::Arc;
use std::time::Duration;

use super::*;

fn config(dir: &Path) -> StoreConfig {
    StoreConfig::new(dir)
}

fn open(dir: &Path) -> Store {
    Store::open(config(dir)).expect("open store")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn all(prefix: &str) -> RangeRequest {
    RangeRequest {
        prefix: prefix.as_bytes().to_vec(),
        ..Default::default()
    }
}

#[test]
fn create_get_update_delete_and_their_errors() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let store = open(dir.path());
        assert_eq!(store.current_revision(), 0);
        let a = store.create(b"/r/a", b"1".to_vec()).await.unwrap();
        assert_eq!((a.create_revision, a.mod_revision, a.version), (1, 1, 1));
        let err = store.create(b"/r/a", b"x".to_vec()).await.unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");
        assert_eq!(
            store.current_revision(),
            1,
            "a refused write takes no revision"
        );

        let a2 = store.update(b"/r/a", b"2".to_vec(), 1).await.unwrap();
        assert_eq!((a2.create_revision, a2.mod_revision, a2.version), (1, 2, 2));
        match store.update(b"/r/a", b"3".to_vec(), 1).await.unwrap_err() {
            StoreError::Conflict {
                expected, current, ..
            } => {
                assert_eq!(expected, 1);
                assert_eq!(*current, a2);
            }
            other => panic!("expected conflict, got {other}"),
        }
        assert!(matches!(
            store
                .update(b"/r/missing", b"x".to_vec(), 1)
                .await
                .unwrap_err(),
            StoreError::NotFound { .. }
        ));
        assert_eq!(store.get(b"/r/a").await.unwrap(), Some(a2.clone()));
        assert_eq!(store.get(b"/r/none").await.unwrap(), None);

        assert!(matches!(
            store.delete(b"/r/a", Some(1)).await.unwrap_err(),
            StoreError::Conflict { .. }
        ));
        let (deleted, revision) = store.delete(b"/r/a", Some(2)).await.unwrap();
        assert_eq!(deleted, a2);
        assert_eq!(revision, 3);
        assert_eq!(store.get(b"/r/a").await.unwrap(), None);
        assert!(matches!(
            store.delete(b"/r/a", None).await.unwrap_err(),
            StoreError::NotFound { .. }
        ));

        // Re-creating a deleted key starts a new incarnation.
        let again = store.create(b"/r/a", b"new".to_vec()).await.unwrap();
        assert_eq!(
            (again.create_revision, again.mod_revision, again.version),
            (4, 4, 1)
        );
        assert!(matches!(
            store.create(b"", vec![]).await.unwrap_err(),
            StoreError::InvalidArgument(_)
        ));
    });
}

#[test]
fn range_pages_counts_and_reads_history() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let store = open(dir.path());
        for i in 0..10 {
            store
                .create(format!("/p/{i:02}").as_bytes(), vec![i])
                .await
                .unwrap();
        }
        store.create(b"/q/other", vec![]).await.unwrap();
        let rev_before = store.current_revision();
        store.update(b"/p/00", vec![100], 1).await.unwrap();
        store.delete(b"/p/01", None).await.unwrap();

        let now = store.range(all("/p/")).await.unwrap();
        assert_eq!(now.kvs.len(), 9);
        assert_eq!(now.kvs[0].value, vec![100]);
        assert_eq!(now.revision, store.current_revision());
        assert!(!now.more);
        assert_eq!(store.count(b"/p/").await.unwrap(), 9);
        assert_eq!(store.count(b"").await.unwrap(), 10);

        // Paging with limit and continue, pinned at the first page's revision.
        let mut keys = Vec::new();
        let mut request = RangeRequest {
            limit: 4,
            ..all("/p/")
        };
        loop {
            let page = store.range(request.clone()).await.unwrap();
            keys.extend(page.kvs.iter().map(|kv| kv.key.clone()));
            if !page.more {
                break;
            }
            request.at_revision = Some(page.revision);
            request.start_after_key = page.kvs.last().map(|kv| kv.key.clone());
        }
        assert_eq!(keys.len(), 9);
        assert!(keys.windows(2).all(|w| w[0] < w[1]));

        // A read at an older revision sees the old world.
        let old = store
            .range(RangeRequest {
                at_revision: Some(rev_before),
                ..all("/p/")
            })
            .await
            .unwrap();
        assert_eq!(old.kvs.len(), 10);
        assert_eq!(old.kvs[0].value, vec![0]);
        assert_eq!(old.revision, rev_before);

        let future = store.current_revision() + 5;
        assert!(matches!(
            store
                .range(RangeRequest {
                    at_revision: Some(future),
                    ..all("/p/")
                })
                .await
                .unwrap_err(),
            StoreError::FutureRevision { .. }
        ));

        store.compact(rev_before).await.unwrap();
        assert_eq!(store.compact_revision(), rev_before);
        assert!(matches!(
            store
                .range(RangeRequest {
                    at_revision: Some(rev_before - 1),
                    ..all("/p/")
                })
                .await
                .unwrap_err(),
            StoreError::Compacted { .. }
        ));
        // The compacted revision itself stays readable, and so does everything after.
        let at = store
            .range(RangeRequest {
                at_revision: Some(rev_before),
                ..all("/p/")
            })
            .await
            .unwrap();
        assert_eq!(at.kvs.len(), 10);
        assert!(matches!(
            store
                .compact(store.current_revision() + 1)
                .await
                .unwrap_err(),
            StoreError::FutureRevision { .. }
        ));
    });
}

#[test]
fn writes_survive_a_restart_and_revisions_continue() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = rt();
    runtime.block_on(async {
        let store = open(dir.path());
        store.create(b"/k", b"v".to_vec()).await.unwrap();
        store.update(b"/k", b"w".to_vec(), 1).await.unwrap();
    });
    runtime.block_on(async {
        let store = open(dir.path());
        assert_eq!(store.current_revision(), 2);
        let kv = store.get(b"/k").await.unwrap().unwrap();
        assert_eq!((kv.value.as_slice(), kv.version), (&b"w"[..], 2));
        let next = store.create(b"/k2", vec![]).await.unwrap();
        assert_eq!(next.mod_revision, 3);
    });
}

fn page_size(db: &Path) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap()
}

/// New stores use 2 KiB pages; a store an older k3rs created with 4 KiB pages opens
/// with its pages and data as they are and keeps taking writes.
#[test]
fn new_stores_use_small_pages_and_older_page_sizes_still_open() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = rt();
    let db = runtime.block_on(async {
        let store = open(dir.path());
        store.create(b"/k", b"v".to_vec()).await.unwrap();
        store.db_path().to_path_buf()
    });
    assert_eq!(page_size(&db), i64::from(db::PAGE_SIZE));

    // Rewrite the file with 4 KiB pages, as a store made before the change has.
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("PRAGMA journal_mode = DELETE; PRAGMA page_size = 4096; VACUUM;")
            .unwrap();
    }
    assert_eq!(page_size(&db), 4096);
    runtime.block_on(async {
        let store = open(dir.path());
        assert_eq!(store.get(b"/k").await.unwrap().unwrap().value, b"v");
        for i in 0..50 {
            store
                .create(format!("/n/{i}").as_bytes(), vec![7; 3000])
                .await
                .unwrap();
        }
        assert_eq!(store.range(all("/n/")).await.unwrap().kvs.len(), 50);
    });
    assert_eq!(
        page_size(&db),
        4096,
        "an existing store keeps its page size"
    );
}

/// A group of one applies each entry in the transaction that appends it, so it keeps no
/// raft log rows; its persisted log starts at the applied entry and raft resumes from
/// there after a restart (twice, to cover a restart of a restarted store).
#[test]
fn a_group_of_one_writes_no_log_rows_and_restarts_from_its_applied_state() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = rt();
    let log_rows_and_start = |db: &Path| -> (i64, i64, i64) {
        let conn = rusqlite::Connection::open(db).unwrap();
        let rows = conn
            .query_row("SELECT count(*) FROM raft_log", [], |r| r.get(0))
            .unwrap();
        let (applied, start) = conn
            .query_row(
                "SELECT applied_index, log_start_index FROM state WHERE id = 0",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        (rows, applied, start)
    };
    for round in 0..3u8 {
        let db = runtime.block_on(async {
            let store = open(dir.path());
            assert_eq!(store.current_revision(), i64::from(round) * 20);
            if round > 0 {
                let kv = store.get(b"/k19").await.unwrap().unwrap();
                assert_eq!(kv.value, vec![19]);
            }
            for i in 0..20u8 {
                let key = format!("/k{}", u32::from(round) * 100 + u32::from(i));
                store.create(key.as_bytes(), vec![i]).await.unwrap();
            }
            store.db_path().to_path_buf()
        });
        let (rows, applied, start) = log_rows_and_start(&db);
        assert_eq!(rows, 0, "round {round}: no raft_log rows");
        assert_eq!(
            start, applied,
            "round {round}: the log starts at the applied entry"
        );
    }
}

/// Writes keep working while another connection runs TRUNCATE checkpoints (as the
/// background checkpointer does once writes pause): the writer must not hold a read
/// snapshot while it waits for the write lock, or both wait out the busy timeout.
#[test]
fn writes_succeed_while_truncate_checkpoints_run() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = rt();
    let store = runtime.block_on(async { open(dir.path()) });
    let db = store.db_path().to_path_buf();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checkpointer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let conn = rusqlite::Connection::open(&db).unwrap();
            conn.busy_timeout(Duration::from_secs(5)).unwrap();
            let mut runs = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
                runs += 1;
            }
            runs
        })
    };
    runtime.block_on(async {
        let started = std::time::Instant::now();
        let mut tasks = Vec::new();
        for worker in 0..8 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..40 {
                    let key = format!("/w{worker}/k{i}");
                    let created = store.create(key.as_bytes(), vec![1; 512]).await?;
                    store
                        .update(key.as_bytes(), vec![2; 512], created.mod_revision)
                        .await?;
                }
                Ok::<(), StoreError>(())
            }));
        }
        for task in tasks {
            task.await.unwrap().expect("every write succeeds");
        }
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "writes stalled behind the checkpoints: {:?}",
            started.elapsed()
        );
    });
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(checkpointer.join().unwrap() > 0);
    assert_eq!(store.current_revision(), 640);
}

#[test]
fn the_store_directory_is_private_whatever_it_was() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir(&db).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _store = open(&db);
    let mode = std::fs::metadata(&db).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "store directory mode {mode:o}");
}

#[test]
fn a_second_process_cannot_open_the_same_directory() {
    let dir = tempfile::tempdir().unwrap();
    let _store = open(dir.path());
    let err = Store::open(config(dir.path())).unwrap_err();
    assert!(
        err.to_string().contains("in use by another k3rs process"),
        "{err}"
    );
}

#[test]
fn concurrent_writes_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let store = open(dir.path());
        let before = store.stats();
        let mut tasks = Vec::new();
        for i in 0..400 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .create(format!("/g/{i}").as_bytes(), vec![0; 64])
                    .await
                    .unwrap()
            }));
        }
        let mut revisions = Vec::new();
        for t in tasks {
            revisions.push(t.await.unwrap().mod_revision);
        }
        revisions.sort();
        revisions.dedup();
        assert_eq!(revisions.len(), 400, "every write got its own revision");
        let stats = store.stats();
        let commits = stats.commits - before.commits;
        assert_eq!(stats.applied_commands - before.applied_commands, 400);
        assert!(
            commits < 200,
            "400 concurrent writes took {commits} commits: no group commit"
        );
        let syncs = stats.syncs - before.syncs;
        assert!(
            syncs <= commits,
            "{syncs} fsyncs for {commits} commits: one fsync covers every batch queued"
        );
    });
}

#[test]
fn overlapping_syncs_publish_in_commit_order() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let store = open(dir.path());
        let mut watch = store.watch(b"/o/", 0).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..400 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let kv = store
                    .create(format!("/o/{i}").as_bytes(), vec![1; 64])
                    .await
                    .unwrap();
                // Published before answered: the revision is visible to everyone.
                assert!(kv.mod_revision <= store.current_revision());
                kv.mod_revision
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        for expected in 1..=400 {
            assert_eq!(next_event(&mut watch).await.revision(), expected);
        }

        // A slow fsync of one batch and a quick one of the next: the later batch is
        // durable first but still waits for the earlier one to be published.
        store
            .inner
            .shared
            .slow_next_sync
            .store(true, Ordering::SeqCst);
        let slow = tokio::spawn({
            let store = store.clone();
            async move { store.create(b"/o/slow", vec![2; 64]).await.unwrap() }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let quick = store.create(b"/o/quick", vec![3; 64]).await.unwrap();
        let slow = slow.await.unwrap();
        assert_eq!((slow.mod_revision, quick.mod_revision), (401, 402));
        assert_eq!(next_event(&mut watch).await.revision(), 401);
        assert_eq!(next_event(&mut watch).await.revision(), 402);
    });
}

#[test]
fn a_committed_write_is_neither_acknowledged_nor_visible_before_its_fsync() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let store = open(dir.path());
        store.create(b"/h/a", b"1".to_vec()).await.unwrap();
        let (before, revision) = (store.stats(), store.current_revision());
        let mut watch = store.watch(b"/h/", revision).await.unwrap();
        let watcher = tokio::spawn(async move { next_event(&mut watch).await });

        // Released on drop too: a failed assertion must not leave the store's
        // shutdown waiting for a held thread.
        struct Hold(Arc<SharedState>);
        impl Drop for Hold {
            fn drop(&mut self) {
                self.0.hold_sync.store(false, Ordering::SeqCst);
            }
        }
        store.inner.shared.hold_sync.store(true, Ordering::SeqCst);
        let hold = Hold(store.inner.shared.clone());
        let pending = tokio::spawn({
            let store = store.clone();
            async move { store.create(b"/h/b", b"2".to_vec()).await }
        });
        // The raft thread commits the batch; the durability thread holds it.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while store.stats().commits == before.commits {
            assert!(
                std::time::Instant::now() < deadline,
                "the write was never committed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!pending.is_finished(), "acknowledged before its fsync");
        assert_eq!(store.current_revision(), revision);
        assert_eq!(store.get(b"/h/b").await.unwrap(), None);
        let listed = store.range(all("/h/")).await.unwrap();
        assert_eq!((listed.kvs.len(), listed.revision), (1, revision));
        assert_eq!(store.count(b"/h/").await.unwrap(), 1);
        assert!(
            !watcher.is_finished(),
            "a watcher saw the write before its fsync"
        );

        drop(hold);
        let b = pending.await.unwrap().unwrap();
        assert_eq!(b.mod_revision, revision + 1);
        assert_eq!(store.get(b"/h/b").await.unwrap(), Some(b));
        assert_eq!(watcher.await.unwrap().revision(), revision + 1);
        assert!(store.stats().syncs > before.syncs);
    });
}

async fn next_event(stream: &mut WatchStream) -> Arc<Event> {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("event in time")
        .expect("stream open")
        .expect("no error")
}

#[test]
fn watch_delivers_in_order_with_prev_kv_and_filters_by_prefix() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let store = open(dir.path());
        let mut watch = store.watch(b"/w/", store.current_revision()).await.unwrap();
        let a = store.create(b"/w/a", b"1".to_vec()).await.unwrap();
        store.create(b"/x/ignored", vec![]).await.unwrap();
        let a2 = store
            .update(b"/w/a", b"2".to_vec(), a.mod_revision)
            .await
            .unwrap();
        let (_, deleted_at) = store.delete(b"/w/a", None).await.unwrap();

        assert_eq!(
            *next_event(&mut watch).await,
            Event::Put {
                kv: a.clone(),
                prev_kv: None
            }
        );
        assert_eq!(
            *next_event(&mut watch).await,
            Event::Put {
                kv: a2.clone(),
                prev_kv: Some(a.clone())
            }
        );
        assert_eq!(
            *next_event(&mut watch).await,
            Event::Delete {
                prev_kv: a2.clone(),
                revision: deleted_at
            }
        );
        assert!(watch.try_next().is_none());
    });
}

#[test]
fn watch_resumes_from_a_past_revision_and_refuses_compacted_ones() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let store = open(dir.path());
        let mut expected = Vec::new();
        for i in 0..2500 {
            let kv = store
                .create(format!("/h/{i}").as_bytes(), vec![1])
                .await
                .unwrap();
            expected.push(kv.mod_revision);
        }
        let updated = store.update(b"/h/0", vec![2], expected[0]).await.unwrap();
        store.delete(b"/h/1", None).await.unwrap();
        // Resume from revision 10: history (read in chunks) then live events, no gap, no repeat.
        let mut watch = store.watch(b"/h/", 10).await.unwrap();
        let live = store.create(b"/h/live", vec![]).await.unwrap();
        let mut seen = Vec::new();
        loop {
            let event = next_event(&mut watch).await;
            seen.push(event.revision());
            if event.revision() == live.mod_revision {
                break;
            }
        }
        let want: Vec<i64> = (11..=live.mod_revision).collect();
        assert_eq!(seen, want);

        // History carries prev_kv for updates and deletes.
        let mut from_history = store.watch(b"/h/0", expected[0]).await.unwrap();
        match &*next_event(&mut from_history).await {
            Event::Put {
                kv,
                prev_kv: Some(prev),
            } => {
                assert_eq!(kv, &updated);
                assert_eq!(prev.mod_revision, expected[0]);
            }
            other => panic!("unexpected {other:?}"),
        }

        store.compact(100).await.unwrap();
        match store.watch(b"/h/", 50).await {
            Err(StoreError::Compacted {
                requested: 50,
                compact_revision: 100,
            }) => {}
            other => panic!("expected Compacted, got {:?}", other.map(|_| ())),
        }
        assert!(store.watch(b"/h/", 100).await.is_ok());
    });
}

#[test]
fn a_slow_watcher_is_cut_off_without_blocking_writers() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let mut cfg = config(dir.path());
        cfg.watch_buffer_events = 50;
        let store = Store::open(cfg).unwrap();
        let mut slow = store.watch(b"/s/", store.current_revision()).await.unwrap();
        let mut fast = store.watch(b"/s/", store.current_revision()).await.unwrap();
        let mut fast_seen = 0;
        for i in 0..200 {
            store
                .create(format!("/s/{i}").as_bytes(), vec![])
                .await
                .unwrap();
            while let Some(event) = fast.try_next() {
                event.unwrap();
                fast_seen += 1;
            }
        }
        assert_eq!(fast_seen, 200, "a watcher that keeps up gets everything");
        let mut delivered = 0;
        loop {
            match slow.next().await {
                Some(Ok(_)) => delivered += 1,
                Some(Err(StoreError::ResyncRequired { .. })) => break,
                other => panic!("expected resync, got {:?}", other.map(|r| r.map(|_| ()))),
            }
        }
        assert!(delivered <= 50, "queue stayed bounded ({delivered})");
        assert!(slow.next().await.is_none());
        drop(slow);
        drop(fast);
        store.create(b"/s/after", vec![]).await.unwrap();
        assert_eq!(store.watcher_count(), 0, "dropped watchers are forgotten");
    });
}

#[test]
fn compaction_removes_history_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let mut cfg = config(dir.path());
        cfg.compaction = CompactionPolicy {
            min_revisions: 100,
            min_age: Duration::ZERO,
            interval: Duration::from_millis(100),
            batch_rows: 50,
        };
        let store = Store::open(cfg).unwrap();
        let mut revisions = Vec::new();
        for i in 0..10 {
            revisions.push(
                store
                    .create(format!("/c/{i}").as_bytes(), vec![0])
                    .await
                    .unwrap()
                    .mod_revision,
            );
        }
        for round in 0..100 {
            for (i, revision) in revisions.iter_mut().enumerate() {
                *revision = store
                    .update(format!("/c/{i}").as_bytes(), vec![round as u8], *revision)
                    .await
                    .unwrap()
                    .mod_revision;
            }
        }
        store.delete(b"/c/9", None).await.unwrap();
        let current = store.current_revision();
        // Automatic compaction keeps min_revisions of history and catches up physically.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let rows = row_count(store.db_path());
            // 100 revisions above the compact revision, plus the one version of each of
            // the 10 keys that is visible at the compact revision itself.
            if store.compact_revision() == current - 100 && rows <= 110 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "compaction did not catch up: {rows} rows"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Current state is intact.
        let live = store.range(all("/c/")).await.unwrap();
        assert_eq!(live.kvs.len(), 9);
        assert!(live.kvs.iter().all(|kv| kv.value == vec![99]));
    });
}

fn row_count(db: &Path) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("SELECT count(*) FROM kv", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn snapshot_saves_and_restores_the_exact_state() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = rt();
    let snapshot_file = dir.path().join("snap.db");
    let (info, expected) = runtime.block_on(async {
        let store = open(&dir.path().join("a"));
        for i in 0..100 {
            store
                .create(format!("/s/{i}").as_bytes(), vec![i as u8; 100])
                .await
                .unwrap();
        }
        let info = store.save_snapshot(&snapshot_file).await.unwrap();
        // Writes after the snapshot are not in it.
        store.create(b"/s/after", vec![]).await.unwrap();
        let expected = store
            .range(RangeRequest {
                at_revision: Some(info.revision),
                ..all("/s/")
            })
            .await
            .unwrap();
        assert!(matches!(
            store.save_snapshot(&snapshot_file).await.unwrap_err(),
            StoreError::InvalidArgument(_)
        ));
        (info, expected)
    });
    assert_eq!(info.revision, 100);
    assert_eq!(info.voters, vec![1]);
    assert_eq!(inspect_snapshot(&snapshot_file).unwrap(), info);

    let restored_dir = dir.path().join("b");
    let restored = restore_snapshot(&snapshot_file, &restored_dir, 1).unwrap();
    assert_eq!(restored.revision, 100);
    assert!(matches!(
        restore_snapshot(&snapshot_file, &restored_dir, 1).unwrap_err(),
        StoreError::InvalidArgument(_)
    ));
    runtime.block_on(async {
        let store = open(&restored_dir);
        assert_eq!(store.current_revision(), 100);
        let got = store.range(all("/s/")).await.unwrap();
        assert_eq!(got.kvs, expected.kvs);
        let next = store.create(b"/s/new", vec![]).await.unwrap();
        assert_eq!(next.mod_revision, 101, "revisions continue after a restore");
    });
}

#[test]
fn raft_snapshot_files_install_into_another_database() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = rt();
    runtime.block_on(async {
        let store = open(&dir.path().join("src"));
        for i in 0..20 {
            store
                .create(format!("/x/{i}").as_bytes(), vec![i])
                .await
                .unwrap();
        }
    });
    let source_path = dir.path().join("src").join(DB_FILE_NAME);
    let source = db::Database::open(&source_path, 1, false, None).unwrap();
    let first = source.prepare_outgoing_snapshot().unwrap();
    let outgoing = first.outgoing_path(source_path.parent().unwrap());
    assert_eq!(std::fs::metadata(&outgoing).unwrap().len(), first.size);
    // Raft's data is the small descriptor, not the database.
    let mut snapshot = raft::eraftpb::Snapshot {
        data: first.encode().into(),
        ..Default::default()
    };
    snapshot.mut_metadata().index = 21;

    let target_path = dir.path().join("dst").join(DB_FILE_NAME);
    std::fs::create_dir_all(target_path.parent().unwrap()).unwrap();
    let target = db::Database::open(&target_path, 2, false, None).unwrap();
    let mut state = target.load_state().unwrap();
    // Before the transport delivered the file, installing fails and changes nothing.
    assert!(target.attach_incoming_snapshot(&snapshot).is_err());
    std::fs::copy(
        &outgoing,
        first.received_path(target_path.parent().unwrap()),
    )
    .unwrap();
    target.attach_incoming_snapshot(&snapshot).unwrap();
    let tx = target.conn.unchecked_transaction().unwrap();
    db::install_incoming_snapshot(&tx, &mut state).unwrap();
    tx.commit().unwrap();
    target.detach_incoming_snapshot();
    assert_eq!(state.current_revision, 20);
    let conn = &target.conn;
    let n: i64 = conn
        .query_row("SELECT count(*) FROM kv", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 20);
    let left: Vec<_> = std::fs::read_dir(target_path.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("snapshot"))
        .collect();
    assert!(
        left.is_empty(),
        "installed snapshot files are removed: {left:?}"
    );

    // Outgoing files do not outlive a restart.
    drop(source);
    let source = db::Database::open(&source_path, 1, false, None).unwrap();
    assert!(
        !outgoing.exists(),
        "a restart removes outgoing snapshot files"
    );
    let second = source.prepare_outgoing_snapshot().unwrap();
    assert!(second.outgoing_path(source_path.parent().unwrap()).exists());
}

fn sha(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn foreign_newer_and_damaged_files_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    // Not SQLite at all.
    let text_dir = dir.path().join("text");
    std::fs::create_dir_all(&text_dir).unwrap();
    let text_db = text_dir.join(DB_FILE_NAME);
    std::fs::write(
        &text_db,
        b"hello, this is not a database at all, just some text",
    )
    .unwrap();
    let err = Store::open(config(&text_dir)).unwrap_err();
    assert!(matches!(err, StoreError::Incompatible { .. }), "{err}");
    assert!(
        err.to_string().contains(&text_db.display().to_string()),
        "{err}"
    );
    assert_eq!(
        sha(&text_db),
        b"hello, this is not a database at all, just some text"
    );

    // Another program's SQLite database.
    let foreign_dir = dir.path().join("foreign");
    std::fs::create_dir_all(&foreign_dir).unwrap();
    let foreign_db = foreign_dir.join(DB_FILE_NAME);
    rusqlite::Connection::open(&foreign_db)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    let before = sha(&foreign_db);
    let err = Store::open(config(&foreign_dir)).unwrap_err();
    assert!(err.to_string().contains("another program"), "{err}");
    assert_eq!(sha(&foreign_db), before);

    // A store from a newer k3rs.
    let newer_dir = dir.path().join("newer");
    drop(open(&newer_dir));
    let newer_db = newer_dir.join(DB_FILE_NAME);
    rusqlite::Connection::open(&newer_db)
        .unwrap()
        .execute_batch(&format!("PRAGMA user_version = {}", db::FORMAT_VERSION + 1))
        .unwrap();
    let before = sha(&newer_db);
    let err = Store::open(config(&newer_dir)).unwrap_err();
    assert!(err.to_string().contains("newer k3rs"), "{err}");
    assert_eq!(sha(&newer_db), before);

    // A damaged store: garbage over the schema page.
    let damaged_dir = dir.path().join("damaged");
    {
        let store = open(&damaged_dir);
        rt().block_on(async { store.create(b"/a", vec![1; 100]).await.unwrap() });
    }
    let damaged_db = damaged_dir.join(DB_FILE_NAME);
    let mut bytes = std::fs::read(&damaged_db).unwrap();
    for b in bytes.iter_mut().skip(100).take(3000) {
        *b = 0xA5;
    }
    std::fs::write(&damaged_db, &bytes).unwrap();
    let err = Store::open(config(&damaged_dir)).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Corrupt { .. } | StoreError::Incompatible { .. }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains(&damaged_db.display().to_string()),
        "{err}"
    );
    assert_eq!(sha(&damaged_db), bytes, "a damaged file is never rewritten");
}

#[test]
fn an_empty_file_left_by_a_crash_during_first_start_is_initialized() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(DB_FILE_NAME), b"").unwrap();
    let store = open(dir.path());
    assert_eq!(store.current_revision(), 0);
}

/// An entry of a newer command format (what a newer build would write during a rolling
/// upgrade) stops this member instead of being skipped: skipping would make it diverge
/// from the members that applied it. Everything before it stays.
#[test]
fn an_entry_of_a_newer_format_stops_the_member_instead_of_being_skipped() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let store = open(dir.path());
        store.create(b"/before", b"v".to_vec()).await.unwrap();
        let mut newer = Command::Create {
            key: b"/newer".to_vec(),
            value: b"v".to_vec(),
        }
        .encode();
        newer[0] = 2;
        assert!(store.propose_raw(newer).await.is_err());
        let stopped = tokio::time::timeout(Duration::from_secs(5), store.stopped_for_good())
            .await
            .expect("the member stops");
        let message = stopped.to_string();
        assert!(
            matches!(stopped, StoreError::Incompatible { .. })
                && message.contains("command format 2")
                && message.contains("upgrade k3rs"),
            "{message}"
        );
        let refused = store.create(b"/after", b"v".to_vec()).await;
        assert!(
            matches!(refused, Err(StoreError::Incompatible { .. })),
            "{refused:?}"
        );
    });
    // Nothing was skipped or half-applied: the entry is not on disk either (a group of
    // one applies in the transaction that appends).
    rt().block_on(async {
        let store = open(dir.path());
        assert!(store.get(b"/before").await.unwrap().is_some());
        assert!(store.get(b"/newer").await.unwrap().is_none());
    });
}
