//! `cargo bench --bench store`: the k3rs store measured side by side with etcd 3.4.
//!
//! Owns: the store benchmark and its report. With 1 KiB values it measures
//!
//! * write throughput and latency (p50/p99/max) of the k3rs store and of etcd under
//!   the same load: 1 and 16 concurrent writers, each creating fresh keys
//!   `/registry/bench/w<i>/<n>` for a fixed time after a short warm-up, every write
//!   acknowledged only once durable (etcd runs with its default fsync);
//! * the time to range over 10,000 keys (median of several runs), on both;
//! * watch delivery latency on the k3rs store: write call start → event received;
//! * the on-disk size of the k3rs store after heavy churn (many updates over 1,000
//!   keys) once compaction has caught up, against the bound `2 × live + 64 MiB`.
//!
//! The last line of output is machine-readable:
//! `RESULT store write_ratio_1=… write_ratio_16=… p99_ratio_16=… db_bytes_after_churn=…
//! db_bound_met=…`; the goal check before it says whether the size bound holds.
//!
//! Environment: `K3RS_BENCH_CHURN` (updates in the churn phase, default 1,000,000),
//! `K3RS_BENCH_SECS` (seconds per write-load run, default 5), `K3RS_BENCH_ROUNDS`
//! (alternating k3rs/etcd rounds of the write runs, default 3; the median run counts). Without `--bench`
//! (e.g. `cargo test --benches`) everything runs briefly as a smoke test.

#[path = "support/etcd.rs"]
mod etcd;
#[path = "support/stats.rs"]
mod stats;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k3rs::store::{CompactionPolicy, Event, RangeRequest, Store, StoreConfig};

use etcd::EtcdServer;
use stats::{Latencies, Summary, Table, fmt_bytes, fmt_duration, fmt_rate, fmt_ratio};

/// Size of every value written.
const VALUE_SIZE: usize = 1024;
/// Keys in the churn phase; their values are the live data the size bound refers to.
const CHURN_KEYS: usize = 1000;
/// Concurrent writers in the churn phase.
const CHURN_WRITERS: usize = 16;
/// Headroom in the size bound `2 × live + 64 MiB`.
const SIZE_BOUND_SLACK: u64 = 64 * 1024 * 1024;

/// How long and how much each phase runs.
#[derive(Clone, Debug)]
struct Settings {
    /// False when run without `--bench` (a quick smoke run).
    full: bool,
    warmup: Duration,
    measure: Duration,
    range_keys: usize,
    range_runs: usize,
    watch_events: usize,
    churn_updates: u64,
    settle_timeout: Duration,
    /// Alternating rounds of the write runs (median kept), `K3RS_BENCH_ROUNDS`.
    rounds: usize,
}

impl Settings {
    fn from_env(full: bool) -> Result<Settings> {
        let mut settings = if full {
            Settings {
                full,
                warmup: Duration::from_secs(1),
                measure: Duration::from_secs(5),
                range_keys: 10_000,
                range_runs: 7,
                watch_events: 2000,
                churn_updates: 1_000_000,
                settle_timeout: Duration::from_secs(30),
                rounds: 3,
            }
        } else {
            Settings {
                full,
                warmup: Duration::from_millis(100),
                measure: Duration::from_millis(300),
                range_keys: 500,
                range_runs: 3,
                watch_events: 100,
                churn_updates: 2000,
                settle_timeout: Duration::from_secs(10),
                rounds: 1,
            }
        };
        if let Some(n) = stats::env_number("K3RS_BENCH_CHURN")? {
            settings.churn_updates = n;
        }
        if let Some(rounds) = stats::env_positive("K3RS_BENCH_ROUNDS")? {
            settings.rounds = usize::try_from(rounds).context("K3RS_BENCH_ROUNDS is too big")?;
        }
        if let Some(secs) = stats::env_positive("K3RS_BENCH_SECS")? {
            settings.measure = Duration::from_secs(secs);
        }
        Ok(settings)
    }
}

fn main() -> Result<()> {
    // cargo passes `--bench` (plus any filter); other arguments are ignored.
    let full = std::env::args().any(|arg| arg == "--bench");
    let settings = Settings::from_env(full)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(run(settings))
}

async fn run(settings: Settings) -> Result<()> {
    if !settings.full {
        println!(
            "(no --bench argument: smoke run with tiny durations; use `cargo bench --bench store`)"
        );
    }
    println!(
        "store benchmark: {VALUE_SIZE} B values, write runs of {:?} after {:?} warm-up, {} CPUs",
        settings.measure,
        settings.warmup,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );

    // The machine is noisy: alternate the two systems over several rounds and keep
    // each one's median run (by throughput), so a burst of background load does not
    // land on one side only.
    let mut k3rs_w1_runs = Vec::new();
    let mut k3rs_w16_runs = Vec::new();
    let mut etcd_w1_runs = Vec::new();
    let mut etcd_w16_runs = Vec::new();
    let mut etcd_version = String::new();
    for round in 1..=settings.rounds {
        println!(
            "round {round}/{}: k3rs 1 writer, etcd 1 writer, k3rs 16 writers, etcd 16 writers …",
            settings.rounds
        );
        k3rs_w1_runs.push(k3rs_writes(&settings, 1).await?);
        let (version, run) = etcd_writes(&settings, 1).await?;
        etcd_version = version;
        etcd_w1_runs.push(run);
        k3rs_w16_runs.push(k3rs_writes(&settings, 16).await?);
        etcd_w16_runs.push(etcd_writes(&settings, 16).await?.1);
    }
    let k3rs_w1 = median_run(k3rs_w1_runs);
    let k3rs_w16 = median_run(k3rs_w16_runs);
    let etcd_w1 = median_run(etcd_w1_runs);
    let etcd_w16 = median_run(etcd_w16_runs);
    println!("k3rs: range and watch …");
    let (k3rs_range, watch) = k3rs_range_and_watch(&settings).await?;

    println!("etcd: range …");
    let etcd_range = etcd_range(&settings).await?;

    println!(
        "k3rs: churn ({} updates over {CHURN_KEYS} keys) …",
        settings.churn_updates
    );
    let churn = k3rs_churn(&settings).await?;

    let mut table = Table::new([
        "".to_owned(),
        "k3rs store".to_owned(),
        format!("etcd {etcd_version}"),
        "k3rs/etcd".to_owned(),
    ]);
    for (title, k3rs, etcd) in [
        ("writes, 1 writer", &k3rs_w1, &etcd_w1),
        ("writes, 16 writers", &k3rs_w16, &etcd_w16),
    ] {
        table.section(title);
        table.row([
            "  throughput".to_owned(),
            fmt_rate(k3rs.per_second),
            fmt_rate(etcd.per_second),
            fmt_ratio(stats::ratio(k3rs.per_second, etcd.per_second)),
        ]);
        type Pick = fn(&Summary) -> Duration;
        let picks: [(&str, Pick); 3] = [
            ("  latency p50", |s| s.p50),
            ("  latency p99", |s| s.p99),
            ("  latency max", |s| s.max),
        ];
        for (label, pick) in picks {
            table.row([
                label.to_owned(),
                fmt_duration(pick(&k3rs.latency)),
                fmt_duration(pick(&etcd.latency)),
                fmt_ratio(duration_ratio(pick(&k3rs.latency), pick(&etcd.latency))),
            ]);
        }
        table.row([
            "  writes measured".to_owned(),
            stats::fmt_thousands(k3rs.operations as u64),
            stats::fmt_thousands(etcd.operations as u64),
        ]);
    }
    table.section(format!(
        "range of {} keys (median of {})",
        stats::fmt_thousands(settings.range_keys as u64),
        settings.range_runs
    ));
    table.row([
        "  time".to_owned(),
        fmt_duration(k3rs_range),
        fmt_duration(etcd_range),
        fmt_ratio(duration_ratio(k3rs_range, etcd_range)),
    ]);
    table.section(format!(
        "watch delivery, write start → event ({} events, 1 writer)",
        watch.count
    ));
    table.row(["  latency p50", &fmt_duration(watch.p50), "not measured"]);
    table.row(["  latency p99", &fmt_duration(watch.p99), "not measured"]);
    table.row(["  latency max", &fmt_duration(watch.max), "not measured"]);
    println!();
    print!("{table}");

    println!();
    churn.print();

    let write_ratio_1 = stats::ratio(k3rs_w1.per_second, etcd_w1.per_second);
    let write_ratio_16 = stats::ratio(k3rs_w16.per_second, etcd_w16.per_second);
    let p99_ratio_16 = duration_ratio(k3rs_w16.latency.p99, etcd_w16.latency.p99);
    // The goal of this bench: the size bound after churn (issue 23 found it broken while
    // nothing checked it); the write ratios are reported for comparison.
    let bound = ChurnReport::bound();
    let within = churn.settled && churn.total_bytes <= bound;
    println!();
    println!("goals:");
    println!(
        "  db_bytes_after_churn {:>12}  (goal ≤ {bound}, 2×live+64 MiB, settled)  {}",
        churn.total_bytes,
        if within { "met" } else { "MISSED" }
    );
    if !settings.full {
        println!("  (smoke run: sizes are tiny, the figures are not meaningful)");
    }
    println!();
    println!(
        "RESULT store write_ratio_1={write_ratio_1:.2} write_ratio_16={write_ratio_16:.2} \
         p99_ratio_16={p99_ratio_16:.2} db_bytes_after_churn={} db_bound_met={within}",
        churn.total_bytes
    );
    Ok(())
}

fn duration_ratio(a: Duration, b: Duration) -> f64 {
    stats::ratio(a.as_secs_f64(), b.as_secs_f64())
}

/// A 1 KiB value; the first 8 bytes carry `stamp` (little endian), the rest is filler.
fn value(stamp: u64) -> Vec<u8> {
    let mut value = vec![b'x'; VALUE_SIZE];
    value[..8].copy_from_slice(&stamp.to_le_bytes());
    value
}

fn stamp_of(value: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(value.get(..8)?.try_into().ok()?))
}

// ---------------------------------------------------------------------------------
// Write load (shared by both systems)
// ---------------------------------------------------------------------------------

/// The outcome of one timed write run.
/// The run with the median throughput.
fn median_run(mut runs: Vec<WriteRun>) -> WriteRun {
    runs.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
    let middle = runs.len() / 2;
    runs.swap_remove(middle)
}

struct WriteRun {
    operations: usize,
    per_second: f64,
    latency: Summary,
}

/// Runs `writers` concurrent loops of `write(writer, n)` (n = 0, 1, 2, …) for
/// `warmup + measure`; only writes *started* after the warm-up are recorded, and
/// throughput is recorded writes / (last completion − end of warm-up).
async fn write_load<F, Fut>(
    writers: usize,
    warmup: Duration,
    measure: Duration,
    write: F,
) -> Result<WriteRun>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let write = Arc::new(write);
    let begin = Instant::now();
    let measure_from = begin + warmup;
    let stop_at = measure_from + measure;
    let mut tasks = Vec::with_capacity(writers);
    for writer in 0..writers {
        let write = write.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Latencies::with_capacity(16 * 1024);
            let mut last_done = measure_from;
            for n in 0.. {
                let start = Instant::now();
                if start >= stop_at {
                    break;
                }
                write(writer, n)
                    .await
                    .with_context(|| format!("writer {writer}, write {n}"))?;
                let done = Instant::now();
                if start >= measure_from {
                    latencies.record(done - start);
                    last_done = done;
                }
            }
            anyhow::Ok((latencies, last_done))
        }));
    }
    let mut all = Latencies::new();
    let mut last_done = measure_from;
    for task in tasks {
        let (latencies, done) = task.await.context("a writer task panicked")??;
        all.merge(latencies);
        last_done = last_done.max(done);
    }
    let latency = all.summary();
    Ok(WriteRun {
        operations: latency.count,
        per_second: stats::per_second(latency.count, last_done - measure_from),
        latency,
    })
}

fn bench_key(writer: usize, n: u64) -> Vec<u8> {
    format!("/registry/bench/w{writer}/{n}").into_bytes()
}

// ---------------------------------------------------------------------------------
// k3rs store
// ---------------------------------------------------------------------------------

/// A store in a fresh temporary directory (removed when this is dropped).
struct TempStore {
    store: Store,
    dir: tempfile::TempDir,
}

impl TempStore {
    fn open(compaction: Option<CompactionPolicy>) -> Result<TempStore> {
        let dir = tempfile::Builder::new()
            .prefix("k3rs-bench-")
            .tempdir()
            .context("creating a temporary directory for the store")?;
        let mut config = StoreConfig::new(dir.path().join("db"));
        if let Some(policy) = compaction {
            config.compaction = policy;
        }
        // Opening replays the log and elects this member; it blocks.
        let store = tokio::task::block_in_place(|| Store::open(config))
            .with_context(|| format!("opening a store in {}", dir.path().display()))?;
        Ok(TempStore { store, dir })
    }

    fn store_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("db")
    }

    /// Closes the store (joining its threads) and removes its directory.
    fn close(self) {
        let TempStore { store, dir } = self;
        tokio::task::block_in_place(|| store.close());
        drop(dir);
    }
}

async fn k3rs_writes(settings: &Settings, writers: usize) -> Result<WriteRun> {
    let temp = TempStore::open(None)?;
    let store = temp.store.clone();
    let run = write_load(writers, settings.warmup, settings.measure, move |w, n| {
        let store = store.clone();
        async move {
            store
                .create(&bench_key(w, n), value(n))
                .await
                .context("k3rs create")?;
            Ok(())
        }
    })
    .await?;
    temp.close();
    Ok(run)
}

/// Creates `count` keys `<prefix><n:06>` with 16 concurrent writers.
async fn k3rs_fill(store: &Store, prefix: &str, count: usize) -> Result<()> {
    let writers = 16.min(count.max(1));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        let prefix = prefix.to_owned();
        tasks.push(tokio::spawn(async move {
            for n in (w..count).step_by(writers) {
                let key = format!("{prefix}{n:06}");
                store
                    .create(key.as_bytes(), value(n as u64))
                    .await
                    .with_context(|| format!("k3rs create {key}"))?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await.context("a fill task panicked")??;
    }
    Ok(())
}

async fn k3rs_range_and_watch(settings: &Settings) -> Result<(Duration, Summary)> {
    let temp = TempStore::open(None)?;
    let store = temp.store.clone();

    let prefix = "/registry/range/";
    k3rs_fill(&store, prefix, settings.range_keys).await?;
    let mut timings = Vec::with_capacity(settings.range_runs);
    for run in 0..=settings.range_runs {
        let start = Instant::now();
        let result = store
            .range(RangeRequest {
                prefix: prefix.as_bytes().to_vec(),
                ..Default::default()
            })
            .await
            .context("k3rs range")?;
        let elapsed = start.elapsed();
        ensure!(
            result.kvs.len() == settings.range_keys && !result.more,
            "k3rs range returned {} keys (more: {}), expected {}",
            result.kvs.len(),
            result.more,
            settings.range_keys
        );
        if run > 0 {
            // run 0 warms caches
            timings.push(elapsed);
        }
    }
    let range_median = stats::median(&timings);

    let watch = k3rs_watch_latency(&store, settings.watch_events).await?;
    drop(store);
    temp.close();
    Ok((range_median, watch))
}

/// One writer creates `events` keys under a watched prefix, one after another; each
/// value carries the time its write call started, and the watcher records the time
/// from there to receiving the event.
async fn k3rs_watch_latency(store: &Store, events: usize) -> Result<Summary> {
    let prefix = b"/registry/watch/";
    let mut stream = store
        .watch(prefix, store.current_revision())
        .await
        .context("k3rs watch")?;
    let base = Instant::now();
    let watcher = tokio::spawn(async move {
        let mut latencies = Latencies::with_capacity(events);
        while latencies.len() < events {
            let Some(item) = stream.next().await else {
                bail!(
                    "the watch ended after {} of {events} events",
                    latencies.len()
                );
            };
            let received = base.elapsed();
            let event = item.context("k3rs watch stream")?;
            let Event::Put { kv, .. } = &*event else {
                bail!("unexpected watch event {event:?}");
            };
            let sent = stamp_of(&kv.value).context("watch event value without a timestamp")?;
            latencies.record(received.saturating_sub(Duration::from_nanos(sent)));
        }
        anyhow::Ok(latencies)
    });
    for n in 0..events {
        let sent = u64::try_from(base.elapsed().as_nanos()).expect("bench runs < 584 years");
        let key = format!("/registry/watch/{n:06}");
        store
            .create(key.as_bytes(), value(sent))
            .await
            .with_context(|| format!("k3rs create {key}"))?;
    }
    let latencies = tokio::time::timeout(Duration::from_secs(30), watcher)
        .await
        .context("the watcher did not receive all events within 30 s")?
        .context("the watcher task panicked")??;
    Ok(latencies.summary())
}

// ---------------------------------------------------------------------------------
// etcd
// ---------------------------------------------------------------------------------

async fn etcd_writes(settings: &Settings, writers: usize) -> Result<(String, WriteRun)> {
    let server = EtcdServer::start().await.context("starting etcd")?;
    let client = server.client();
    let run = write_load(writers, settings.warmup, settings.measure, move |w, n| {
        let client = client.clone();
        async move {
            client.put(&bench_key(w, n), value(n)).await?;
            Ok(())
        }
    })
    .await?;
    Ok((server.version().to_owned(), run))
}

async fn etcd_range(settings: &Settings) -> Result<Duration> {
    let server = EtcdServer::start().await.context("starting etcd")?;
    let client = server.client();
    let prefix = "/registry/range/";
    let count = settings.range_keys;
    let writers = 16.min(count.max(1));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            for n in (w..count).step_by(writers) {
                let key = format!("{prefix}{n:06}");
                client.put(key.as_bytes(), value(n as u64)).await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await.context("a fill task panicked")??;
    }
    let mut timings = Vec::with_capacity(settings.range_runs);
    for run in 0..=settings.range_runs {
        let start = Instant::now();
        let response = client.range_prefix(prefix.as_bytes()).await?;
        let elapsed = start.elapsed();
        ensure!(
            response.kvs.len() == count && !response.more,
            "etcd range returned {} keys (more: {}), expected {count}",
            response.kvs.len(),
            response.more
        );
        if run > 0 {
            timings.push(elapsed);
        }
    }
    Ok(stats::median(&timings))
}

// ---------------------------------------------------------------------------------
// Churn and on-disk size
// ---------------------------------------------------------------------------------

struct ChurnReport {
    policy: CompactionPolicy,
    updates: u64,
    elapsed: Duration,
    settled: bool,
    waited: Duration,
    current_revision: i64,
    compact_revision: i64,
    files: Vec<(String, u64)>,
    total_bytes: u64,
    bytes_after_close: u64,
}

impl ChurnReport {
    fn live_bytes() -> u64 {
        (CHURN_KEYS * VALUE_SIZE) as u64
    }

    fn bound() -> u64 {
        2 * Self::live_bytes() + SIZE_BOUND_SLACK
    }

    fn print(&self) {
        let p = &self.policy;
        println!(
            "churn: {} updates over {} keys × {VALUE_SIZE} B, {CHURN_WRITERS} writers, \
             in {} ({})",
            stats::fmt_thousands(self.updates),
            stats::fmt_thousands(CHURN_KEYS as u64),
            fmt_duration(self.elapsed),
            fmt_rate(stats::per_second(self.updates as usize, self.elapsed)),
        );
        println!(
            "  compaction policy for this phase: min_age {:?}, interval {:?}, min_revisions {}, \
             batch_rows {} (production default min_age is {:?}, which at benchmark write rates \
             would retain everything written here)",
            p.min_age,
            p.interval,
            p.min_revisions,
            p.batch_rows,
            CompactionPolicy::default().min_age,
        );
        println!(
            "  {} {} after the last write; current revision {}, compact revision {}",
            if self.settled {
                "compaction and file sizes settled within"
            } else {
                "compaction had NOT settled (sizes below may still shrink) after"
            },
            fmt_duration(self.waited),
            self.current_revision,
            self.compact_revision,
        );
        for (name, bytes) in &self.files {
            println!("  {name:<16} {}", fmt_bytes(*bytes));
        }
        let bound = Self::bound();
        println!("  total (open)     {}", fmt_bytes(self.total_bytes));
        println!("  after close      {}", fmt_bytes(self.bytes_after_close));
        println!(
            "  live data        {} ({CHURN_KEYS} × {VALUE_SIZE} B values)",
            fmt_bytes(Self::live_bytes())
        );
        println!(
            "  bound 2×live+64 MiB {} → {} ({:.1}% of bound)",
            fmt_bytes(bound),
            if self.total_bytes <= bound {
                "within"
            } else {
                "EXCEEDED"
            },
            100.0 * self.total_bytes as f64 / bound as f64,
        );
    }
}

/// Sizes of the regular files directly in `dir`, by name, and their total.
fn dir_files(dir: &Path) -> Result<(Vec<(String, u64)>, u64)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let metadata = entry
            .metadata()
            .with_context(|| format!("reading metadata of {}", entry.path().display()))?;
        if metadata.is_file() {
            files.push((
                entry.file_name().to_string_lossy().into_owned(),
                metadata.len(),
            ));
        }
    }
    files.sort();
    let total = files.iter().map(|(_, len)| len).sum();
    Ok((files, total))
}

async fn k3rs_churn(settings: &Settings) -> Result<ChurnReport> {
    let policy = CompactionPolicy {
        min_age: Duration::from_secs(5),
        interval: Duration::from_secs(1),
        ..Default::default()
    };
    println!(
        "  (compaction for this phase: min_age {:?}, interval {:?}; production default min_age is {:?})",
        policy.min_age,
        policy.interval,
        CompactionPolicy::default().min_age
    );
    let temp = TempStore::open(Some(policy.clone()))?;
    let store = temp.store.clone();
    let store_dir = temp.store_dir();

    // The live set: CHURN_KEYS keys, each owned by one writer that remembers its
    // current mod revision.
    let mut owned: Vec<Vec<(Vec<u8>, i64)>> = vec![Vec::new(); CHURN_WRITERS];
    for k in 0..CHURN_KEYS {
        let key = format!("/registry/churn/{k:04}").into_bytes();
        let kv = store
            .create(&key, value(0))
            .await
            .context("k3rs create (churn keys)")?;
        owned[k % CHURN_WRITERS].push((key, kv.mod_revision));
    }

    let done = Arc::new(AtomicU64::new(0));
    let total = settings.churn_updates;
    let progress = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            tick.tick().await;
            loop {
                tick.tick().await;
                eprintln!(
                    "  churn: {} / {} updates",
                    stats::fmt_thousands(done.load(Ordering::Relaxed)),
                    stats::fmt_thousands(total)
                );
            }
        })
    };
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(CHURN_WRITERS);
    for (w, mut keys) in owned.into_iter().enumerate() {
        let store = store.clone();
        let done = done.clone();
        let share =
            total / CHURN_WRITERS as u64 + u64::from((w as u64) < total % CHURN_WRITERS as u64);
        tasks.push(tokio::spawn(async move {
            for i in 0..share {
                let slot = (i % keys.len() as u64) as usize;
                let (key, revision) = &mut keys[slot];
                let kv = store
                    .update(key, value(i + 1), *revision)
                    .await
                    .with_context(|| format!("k3rs update {}", String::from_utf8_lossy(key)))?;
                *revision = kv.mod_revision;
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    let mut failure = None;
    for task in tasks {
        if let Err(e) = task
            .await
            .context("a churn writer panicked")
            .and_then(|r| r)
        {
            failure.get_or_insert(e);
        }
    }
    progress.abort();
    if let Some(e) = failure {
        return Err(e);
    }
    let elapsed = start.elapsed();
    let updates = done.load(Ordering::Relaxed);

    // Wait for compaction to catch up: at least min_age plus two passes, then until
    // the compact revision and every file size hold still for three polls.
    let wait_start = Instant::now();
    let min_wait = policy.min_age + 2 * policy.interval;
    let mut last = (store.compact_revision(), dir_files(&store_dir)?.0);
    let mut still = 0;
    let settled = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = (store.compact_revision(), dir_files(&store_dir)?.0);
        still = if now == last { still + 1 } else { 0 };
        last = now;
        if wait_start.elapsed() >= min_wait && still >= 3 {
            break true;
        }
        if wait_start.elapsed() >= settings.settle_timeout {
            break false;
        }
    };
    let waited = wait_start.elapsed();
    let (files, total_bytes) = dir_files(&store_dir)?;
    let current_revision = store.current_revision();
    let compact_revision = store.compact_revision();
    drop(store);
    let TempStore { store, dir } = temp;
    tokio::task::block_in_place(|| store.close());
    let (_, bytes_after_close) = dir_files(&store_dir)?;
    drop(dir);

    Ok(ChurnReport {
        policy,
        updates,
        elapsed,
        settled,
        waited,
        current_revision,
        compact_revision,
        files,
        total_bytes,
        bytes_after_close,
    })
}
