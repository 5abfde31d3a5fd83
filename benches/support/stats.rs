//! Latency recording, percentiles, throughput and a plain-text table printer for
//! the custom-harness benchmarks.
//!
//! Owns: nothing but arithmetic and formatting, plus the two small chores every bench
//! shares: reading its number knobs from the environment and the tail of a child's log
//! for error messages. Percentiles are computed from every
//! recorded sample (nearest-rank on the sorted samples), never from histograms or
//! reservoirs, so p99 and max are exact for the run.
//!
//! Include it from a bench with `#[path = "support/stats.rs"] mod stats;`.

#![allow(dead_code)] // each bench uses a different subset

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// Latency samples of one measurement (one per operation).
#[derive(Clone, Debug, Default)]
pub struct Latencies {
    samples: Vec<Duration>,
}

impl Latencies {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(capacity: usize) -> Self {
        Latencies {
            samples: Vec::with_capacity(capacity),
        }
    }

    pub fn record(&mut self, latency: Duration) {
        self.samples.push(latency);
    }

    /// Adds all of `other`'s samples (e.g. one recorder per concurrent worker).
    pub fn merge(&mut self, other: Latencies) {
        self.samples.extend(other.samples);
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Percentiles over all samples (all zero when there are none).
    pub fn summary(&self) -> Summary {
        let mut sorted = self.samples.clone();
        sorted.sort_unstable();
        let total: Duration = sorted.iter().sum();
        let mean = if sorted.is_empty() {
            Duration::ZERO
        } else {
            total / u32::try_from(sorted.len()).unwrap_or(u32::MAX)
        };
        Summary {
            count: sorted.len(),
            min: sorted.first().copied().unwrap_or_default(),
            p50: percentile(&sorted, 50.0),
            p90: percentile(&sorted, 90.0),
            p99: percentile(&sorted, 99.0),
            max: sorted.last().copied().unwrap_or_default(),
            mean,
        }
    }
}

/// The `p`-th percentile (0..=100) of already sorted samples, nearest-rank method:
/// the smallest sample such that at least `p`% of samples are at or below it.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of a handful of timings (e.g. repeated runs of one query).
pub fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    percentile(&sorted, 50.0)
}

/// Order statistics of one set of latency samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub min: Duration,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub mean: Duration,
}

/// Operations per second (0 for an empty interval).
pub fn per_second(operations: usize, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        operations as f64 / secs
    } else {
        0.0
    }
}

/// `a / b`, or NaN when `b` is zero (printed as `nan`, never a panic).
pub fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { f64::NAN } else { a / b }
}

/// `1.234 ms`, `56.7 µs`, `2.50 s`: three significant-ish digits in a sensible unit.
pub fn fmt_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos < 1_000 {
        format!("{nanos} ns")
    } else if nanos < 1_000_000 {
        format!("{:.1} µs", nanos as f64 / 1e3)
    } else if nanos < 1_000_000_000 {
        format!("{:.2} ms", nanos as f64 / 1e6)
    } else {
        format!("{:.2} s", nanos as f64 / 1e9)
    }
}

/// `12.3 MiB (12,912,640 B)`.
pub fn fmt_bytes(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    let human = if b < KIB {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else if b < KIB * KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else {
        format!("{:.2} GiB", b / (KIB * KIB * KIB))
    };
    format!("{human} ({} B)", fmt_thousands(bytes))
}

/// `1234567` → `1,234,567`.
pub fn fmt_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `12,345/s`.
pub fn fmt_rate(per_second: f64) -> String {
    if per_second.is_finite() && per_second >= 0.0 {
        format!("{}/s", fmt_thousands(per_second.round() as u64))
    } else {
        "n/a".to_owned()
    }
}

/// `0.42×` (or `n/a`).
pub fn fmt_ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}×")
    } else {
        "n/a".to_owned()
    }
}

/// A left-aligned first column followed by right-aligned columns, with a header row
/// and a rule under it. Cells are plain strings; widths adapt to the content.
#[derive(Clone, Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Row>,
}

#[derive(Clone, Debug)]
enum Row {
    Cells(Vec<String>),
    Section(String),
}

impl Table {
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// A data row; missing trailing cells print empty.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        self.rows
            .push(Row::Cells(cells.into_iter().map(Into::into).collect()));
        self
    }

    /// A full-width section title between data rows.
    pub fn section(&mut self, title: impl Into<String>) -> &mut Self {
        self.rows.push(Row::Section(title.into()));
        self
    }

    pub fn render(&self) -> String {
        let columns = self
            .rows
            .iter()
            .filter_map(|r| match r {
                Row::Cells(cells) => Some(cells.len()),
                Row::Section(_) => None,
            })
            .chain(std::iter::once(self.header.len()))
            .max()
            .unwrap_or(0);
        let mut widths = vec![0usize; columns];
        let all_cells =
            std::iter::once(&self.header).chain(self.rows.iter().filter_map(|r| match r {
                Row::Cells(cells) => Some(cells),
                Row::Section(_) => None,
            }));
        for cells in all_cells {
            for (i, cell) in cells.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let total_width = widths.iter().sum::<usize>() + 3 * columns.saturating_sub(1);

        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            let mut text = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = cells.get(i).map(String::as_str).unwrap_or("");
                let pad = width.saturating_sub(cell.chars().count());
                if i == 0 {
                    text.push_str(cell);
                    text.push_str(&" ".repeat(pad));
                } else {
                    text.push_str("   ");
                    text.push_str(&" ".repeat(pad));
                    text.push_str(cell);
                }
            }
            let _ = writeln!(out, "{}", text.trim_end());
        };
        line(&mut out, &self.header);
        let _ = writeln!(out, "{}", "─".repeat(total_width));
        for row in &self.rows {
            match row {
                Row::Cells(cells) => line(&mut out, cells),
                Row::Section(title) => {
                    let _ = writeln!(out, "{title}");
                }
            }
        }
        out
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

/// The number in the environment variable `name` (`_` separators allowed), or None when it
/// is not set; an error names the variable when it is not a non-negative integer.
pub fn env_number(name: &str) -> anyhow::Result<Option<u64>> {
    use anyhow::Context as _;
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .replace('_', "")
            .parse()
            .map(Some)
            .with_context(|| format!("{name}={text:?} is not a non-negative integer")),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {name}")),
    }
}

/// [`env_number`] for a knob that must be at least 1 when set (a duration, a round count).
pub fn env_positive(name: &str) -> anyhow::Result<Option<u64>> {
    let n = env_number(name)?;
    anyhow::ensure!(n != Some(0), "{name} must be at least 1");
    Ok(n)
}

/// The last 20 lines of the log file at `path`, for error messages.
pub fn log_tail(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        }
        Err(e) => format!("(could not read {}: {e})", path.display()),
    }
}
