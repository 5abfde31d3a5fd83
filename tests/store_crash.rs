//! Crash test: a child process writes with 16 concurrent writers and records every
//! acknowledged write; the parent kills it with SIGKILL at random moments (20 times),
//! reopens the store and checks that every acknowledged write is there, whole, and
//! that nothing unacknowledged is half-applied (each writer's keys form a gap-free
//! sequence with intact values).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use k3rs::store::{RangeRequest, Store, StoreConfig};

const WRITERS: usize = 16;
const KILLS: usize = 20;

fn value_for(key: &str) -> Vec<u8> {
    key.as_bytes().iter().copied().cycle().take(1024).collect()
}

fn key_for(writer: usize, n: u64) -> String {
    format!("/crash/w{writer:02}/{n:08}")
}

/// The child: writes until killed. Runs only when the parent asks for it.
#[test]
#[ignore = "run by crash_recovery_keeps_every_acknowledged_write as a child process"]
fn crash_child() {
    let Some(dir) = std::env::var_os("K3RS_CRASH_DIR") else {
        return;
    };
    let dir = Path::new(&dir).to_path_buf();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = Store::open(StoreConfig::new(dir.join("db"))).expect("child opens the store");
        let acks = std::sync::Arc::new(std::sync::Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("acks.log"))
                .unwrap(),
        ));
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let store = store.clone();
            let acks = acks.clone();
            tasks.push(tokio::spawn(async move {
                let prefix = format!("/crash/w{writer:02}/");
                let existing = store
                    .range(RangeRequest {
                        prefix: prefix.into_bytes(),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                let mut n = existing.kvs.len() as u64;
                let counter_key = format!("/crash/counter/w{writer:02}");
                let mut counter = store.get(counter_key.as_bytes()).await.unwrap();
                loop {
                    let key = key_for(writer, n);
                    store.create(key.as_bytes(), value_for(&key)).await.unwrap();
                    // One write() per line: it reaches the file even if we are killed next.
                    acks.lock()
                        .unwrap()
                        .write_all(format!("ACK {writer} {n}\n").as_bytes())
                        .unwrap();
                    let value = n.to_string().into_bytes();
                    counter = Some(match counter {
                        None => store.create(counter_key.as_bytes(), value).await.unwrap(),
                        Some(kv) => store
                            .update(counter_key.as_bytes(), value, kv.mod_revision)
                            .await
                            .unwrap(),
                    });
                    acks.lock()
                        .unwrap()
                        .write_all(format!("CNT {writer} {n}\n").as_bytes())
                        .unwrap();
                    n += 1;
                }
            }));
        }
        // Write until the parent kills us.
        let _writers = tasks;
        std::future::pending::<()>().await;
    });
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

#[test]
fn crash_recovery_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("crash test seed {seed}");
    let mut rng = Lcg(seed);
    let exe = std::env::current_exe().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut total_acked = 0;
    for round in 0..KILLS {
        let mut child = std::process::Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("K3RS_CRASH_DIR", dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Let it open the store and write for a random while, then SIGKILL it.
        let started = Instant::now();
        let acks_file = dir.path().join("acks.log");
        let before = std::fs::metadata(&acks_file).map(|m| m.len()).unwrap_or(0);
        while std::fs::metadata(&acks_file).map(|m| m.len()).unwrap_or(0) == before {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "round {round}: child wrote nothing"
            );
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
                panic!("round {round}: child exited early ({status}): {err}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(rng.next(250)));
        child.kill().unwrap();
        child.wait().unwrap();

        let acked = parse_acks(&std::fs::read_to_string(&acks_file).unwrap());
        total_acked = acked.creates.values().map(|n| n + 1).sum::<u64>();
        runtime.block_on(verify(dir.path(), &acked, round));
    }
    assert!(
        total_acked > 100,
        "the child acknowledged only {total_acked} writes"
    );
    eprintln!("{KILLS} kills survived, {total_acked} acknowledged creates verified");
}

#[derive(Default)]
struct Acked {
    /// Highest acknowledged create per writer.
    creates: HashMap<usize, u64>,
    /// Highest acknowledged counter value per writer.
    counters: HashMap<usize, u64>,
}

fn parse_acks(text: &str) -> Acked {
    let mut acked = Acked::default();
    // A line cut by the kill has no newline: ignore it.
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    for line in complete.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let (Ok(writer), Ok(n)) = (parts[1].parse::<usize>(), parts[2].parse::<u64>()) else {
            panic!("bad ack line {line:?}")
        };
        let map = if parts[0] == "ACK" {
            &mut acked.creates
        } else {
            &mut acked.counters
        };
        let entry = map.entry(writer).or_insert(n);
        *entry = (*entry).max(n);
    }
    acked
}

async fn verify(dir: &Path, acked: &Acked, round: usize) {
    let store = Store::open(StoreConfig::new(dir.join("db")))
        .unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
    for writer in 0..WRITERS {
        let prefix = format!("/crash/w{writer:02}/");
        let present = store
            .range(RangeRequest {
                prefix: prefix.into_bytes(),
                ..Default::default()
            })
            .await
            .unwrap();
        for (i, kv) in present.kvs.iter().enumerate() {
            let want_key = key_for(writer, i as u64);
            assert_eq!(
                String::from_utf8_lossy(&kv.key),
                want_key,
                "round {round}: gap in writer {writer}'s keys"
            );
            assert_eq!(
                kv.value,
                value_for(&want_key),
                "round {round}: {want_key} is damaged"
            );
            assert_eq!(kv.version, 1);
        }
        if let Some(&n) = acked.creates.get(&writer) {
            assert!(
                present.kvs.len() as u64 > n,
                "round {round}: writer {writer} had {n} acknowledged but only {} keys survived",
                present.kvs.len()
            );
        }
        if let Some(&n) = acked.counters.get(&writer) {
            let counter = store
                .get(format!("/crash/counter/w{writer:02}").as_bytes())
                .await
                .unwrap();
            let value: u64 = String::from_utf8(counter.expect("acknowledged counter exists").value)
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                value >= n,
                "round {round}: counter of writer {writer} went back from {n} to {value}"
            );
            assert!(
                value < present.kvs.len() as u64,
                "round {round}: counter points at a missing key"
            );
        }
    }
}
