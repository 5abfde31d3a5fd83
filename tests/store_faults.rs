//! Disk-full behaviour: on a small tmpfs the store fills up; the failing write gets
//! a disk-full error and leaves nothing behind, every acknowledged write stays
//! readable, and once space returns writes succeed again without a restart.
//! Needs root (it mounts a tmpfs), as CI runs it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k3rs::store::{RangeRequest, Store, StoreConfig};

struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mounting a tmpfs failed: this test needs root (CI runs as root); run `sudo cargo test --test store_faults`"
        );
        Tmpfs(dir.to_path_buf())
    }

    fn resize(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .expect("run mount");
        assert!(status.success(), "remounting the tmpfs failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_fails_writes_cleanly_and_recovers_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let mount = Tmpfs::mount(dir.path(), "4m");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Store::open(StoreConfig::new(dir.path().join("db"))).expect("open on tmpfs");
        let mut acknowledged = Vec::new();
        let mut failure = None;
        for i in 0..100_000 {
            let key = format!("/full/{i:06}");
            match store.create(key.as_bytes(), vec![b'x'; 4096]).await {
                Ok(_) => acknowledged.push(key),
                Err(e) => {
                    failure = Some((key, e));
                    break;
                }
            }
        }
        let (failed_key, error) = failure.expect("a 4 MiB disk must fill up");
        assert!(
            error.is_disk_full(),
            "expected a disk-full error, got: {error}"
        );
        assert!(
            acknowledged.len() > 100,
            "only {} writes fit",
            acknowledged.len()
        );

        // Nothing partial: the failed key is absent; every acknowledged key is intact.
        assert_eq!(store.get(failed_key.as_bytes()).await.unwrap(), None);
        let all = store
            .range(RangeRequest {
                prefix: b"/full/".to_vec(),
                ..Default::default()
            })
            .await
            .unwrap();
        let keys: Vec<String> = all
            .kvs
            .iter()
            .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
            .collect();
        assert_eq!(keys, acknowledged);
        assert!(all.kvs.iter().all(|kv| kv.value == vec![b'x'; 4096]));

        // Space returns: writes succeed again, in the same process.
        mount.resize("64m");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match store.create(failed_key.as_bytes(), vec![b'y'; 4096]).await {
                Ok(kv) => {
                    assert_eq!(
                        kv.mod_revision,
                        acknowledged.len() as i64 + 1,
                        "no revision was lost or reused"
                    );
                    break;
                }
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "writes did not resume after space returned: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        drop(store);
        // And a restart sees exactly the acknowledged writes plus the new one.
        let store = Store::open(StoreConfig::new(dir.path().join("db"))).unwrap();
        assert_eq!(
            store.count(b"/full/").await.unwrap(),
            acknowledged.len() as u64 + 1
        );
    });
}
