//! `/containerLogs`: reading CRI log files (`<RFC3339Nano> <stdout|stderr> <P|F> <text>`), with
//! the kubelet's options — `tailLines`, `sinceSeconds`/`sinceTime`, `timestamps`,
//! `limitBytes`, `follow` — and its output: each record's text (a partial record `P` carries
//! no newline, so partial lines join up), prefixed by its timestamp when asked.

use std::io::SeekFrom;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use jiff::Timestamp;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncSeekExt, BufReader};

/// The kubelet's log options, from the query string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<u64>,
    pub limit_bytes: Option<u64>,
    /// Only records at or after this time (`sinceSeconds` or `sinceTime`).
    pub since: Option<Timestamp>,
}

impl LogOptions {
    /// Parses `follow`, `previous`, `timestamps`, `tailLines`, `limitBytes`, `sinceSeconds`,
    /// `sinceTime` as the kubelet does (only one of the `since` forms).
    pub fn from_query(pairs: &[(String, String)], now: Timestamp) -> Result<Self, String> {
        let mut options = LogOptions::default();
        let mut since_seconds = None;
        let mut since_time = None;
        for (key, value) in pairs {
            match key.as_str() {
                "follow" => options.follow = truthy(value),
                "previous" => options.previous = truthy(value),
                "timestamps" => options.timestamps = truthy(value),
                "tailLines" => {
                    let n: i64 = value
                        .parse()
                        .map_err(|_| format!("invalid tailLines {value:?}"))?;
                    if n < 0 {
                        return Err("tailLines: must be greater than or equal to 0".into());
                    }
                    options.tail_lines = Some(n as u64);
                }
                "limitBytes" => {
                    let n: i64 = value
                        .parse()
                        .map_err(|_| format!("invalid limitBytes {value:?}"))?;
                    if n < 1 {
                        return Err("limitBytes: must be greater than 0".into());
                    }
                    options.limit_bytes = Some(n as u64);
                }
                "sinceSeconds" => {
                    let n: i64 = value
                        .parse()
                        .map_err(|_| format!("invalid sinceSeconds {value:?}"))?;
                    if n < 1 {
                        return Err("sinceSeconds: must be greater than 0".into());
                    }
                    since_seconds = Some(n);
                }
                "sinceTime" => {
                    let t: Timestamp = value
                        .parse()
                        .map_err(|_| format!("invalid sinceTime {value:?}"))?;
                    since_time = Some(t);
                }
                _ => {}
            }
        }
        options.since = match (since_seconds, since_time) {
            (Some(_), Some(_)) => {
                return Err("at most one of sinceTime or sinceSeconds may be specified".into());
            }
            (Some(seconds), None) => now
                .checked_sub(jiff::SignedDuration::from_secs(seconds))
                .ok(),
            (None, time) => time,
        };
        Ok(options)
    }
}

fn truthy(value: &str) -> bool {
    matches!(value, "" | "1" | "true" | "True" | "TRUE" | "t")
}

/// One record of a CRI log file.
#[derive(Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The timestamp as written (RFC 3339 with nanoseconds).
    pub timestamp: &'a str,
    pub stream: &'a str,
    /// `P`: the text continues in the next record.
    pub partial: bool,
    /// The text, without the record's terminating newline.
    pub text: &'a [u8],
}

/// Parses one line of a CRI log file (with or without its trailing newline).
pub fn parse_record(line: &[u8]) -> Option<Record<'_>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut fields = line.splitn(4, |b| *b == b' ');
    let timestamp = std::str::from_utf8(fields.next()?).ok()?;
    let stream = std::str::from_utf8(fields.next()?).ok()?;
    let tag = fields.next()?;
    let text = fields.next().unwrap_or(&[]);
    if stream != "stdout" && stream != "stderr" {
        return None;
    }
    // The tag may carry more flags after ':' in future CRI versions; `P` is the first.
    let partial = tag.first() == Some(&b'P');
    Some(Record {
        timestamp,
        stream,
        partial,
        text,
    })
}

/// What a record contributes to the output.
fn render(record: &Record<'_>, timestamps: bool, out: &mut Vec<u8>) {
    if timestamps {
        out.extend_from_slice(record.timestamp.as_bytes());
        out.push(b' ');
    }
    out.extend_from_slice(record.text);
    if !record.partial {
        out.push(b'\n');
    }
}

/// The offset of the start of the last `lines` lines of the file (0 if it has fewer). A final
/// newline terminates the last line; an unterminated last line counts as one.
async fn tail_offset(file: &mut tokio::fs::File, lines: u64) -> std::io::Result<u64> {
    const BLOCK: u64 = 64 * 1024;
    let len = file.metadata().await?.len();
    if lines == 0 || len == 0 {
        return Ok(len);
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1)).await?;
    file.read_exact(&mut last).await?;
    let mut end = if last[0] == b'\n' { len - 1 } else { len };
    let mut seen = 0u64;
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let mut block = vec![0u8; (end - start) as usize];
        file.seek(SeekFrom::Start(start)).await?;
        file.read_exact(&mut block).await?;
        for (i, byte) in block.iter().enumerate().rev() {
            if *byte == b'\n' {
                seen += 1;
                if seen == lines {
                    return Ok(start + i as u64 + 1);
                }
            }
        }
        end = start;
    }
    Ok(0)
}

/// Streams a log file into `out` as the options ask. `still_running` is polled while
/// following at EOF; when it says no (and the file has no more data), the stream ends.
pub async fn stream_file<F, Fut>(
    path: &Path,
    options: &LogOptions,
    mut still_running: F,
    out: tokio::sync::mpsc::Sender<Bytes>,
) -> std::io::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut file = tokio::fs::File::open(path).await?;
    let start = match options.tail_lines {
        Some(n) => tail_offset(&mut file, n).await?,
        None => 0,
    };
    file.seek(SeekFrom::Start(start)).await?;
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut remaining = options.limit_bytes.unwrap_or(u64::MAX);
    let mut line = Vec::with_capacity(1024);
    let mut chunk = Vec::with_capacity(64 * 1024);
    let mut last_check = tokio::time::Instant::now();
    loop {
        let read = reader.read_until(b'\n', &mut line).await?;
        let complete = line.last() == Some(&b'\n');
        if read > 0 && complete {
            if let Some(record) = parse_record(&line)
                && passes_since(&record, options.since)
            {
                let before = chunk.len();
                render(&record, options.timestamps, &mut chunk);
                let added = (chunk.len() - before) as u64;
                if added >= remaining {
                    chunk.truncate(before + remaining as usize);
                    let _ = out.send(Bytes::from(std::mem::take(&mut chunk))).await;
                    return Ok(());
                }
                remaining -= added;
            }
            line.clear();
            if chunk.len() >= 32 * 1024
                && out
                    .send(Bytes::from(std::mem::take(&mut chunk)))
                    .await
                    .is_err()
            {
                return Ok(());
            }
            continue;
        }
        // At EOF (possibly mid-record: keep the partial line and read on from there).
        if !chunk.is_empty()
            && out
                .send(Bytes::from(std::mem::take(&mut chunk)))
                .await
                .is_err()
        {
            return Ok(());
        }
        if !options.follow {
            return Ok(());
        }
        if out.is_closed() {
            return Ok(());
        }
        if last_check.elapsed() >= Duration::from_secs(1) {
            last_check = tokio::time::Instant::now();
            if !still_running().await {
                // One more pass picks up what the container wrote as it exited.
                let more = reader.read_until(b'\n', &mut line).await?;
                if more == 0 {
                    return Ok(());
                }
                continue;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn passes_since(record: &Record<'_>, since: Option<Timestamp>) -> bool {
    let Some(since) = since else { return true };
    match record.timestamp.parse::<Timestamp>() {
        Ok(t) => t >= since,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn pairs(query: &str) -> Vec<(String, String)> {
        serde_urlencoded::from_str(query).unwrap()
    }

    const LOG: &str = "2026-01-01T00:00:01.000000001Z stdout F one\n\
2026-01-01T00:00:02.5Z stderr F two\n\
2026-01-01T00:00:03Z stdout P thr\n\
2026-01-01T00:00:03.1Z stdout F ee\n\
2026-01-01T00:00:04Z stdout F \n\
2026-01-01T00:00:05Z stdout F five\n";

    async fn collect(text: &str, query: &str) -> String {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        let now: Timestamp = "2026-01-01T00:00:06Z".parse().unwrap();
        let options = LogOptions::from_query(&pairs(query), now).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        stream_file(file.path(), &options, || async { false }, tx)
            .await
            .unwrap();
        let mut out = Vec::new();
        while let Some(b) = rx.recv().await {
            out.extend_from_slice(&b);
        }
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn whole_file_joins_partials() {
        assert_eq!(collect(LOG, "").await, "one\ntwo\nthree\n\nfive\n");
    }

    #[tokio::test]
    async fn tail_lines_counts_records() {
        assert_eq!(collect(LOG, "tailLines=2").await, "\nfive\n");
        assert_eq!(collect(LOG, "tailLines=0").await, "");
        assert_eq!(
            collect(LOG, "tailLines=100").await,
            "one\ntwo\nthree\n\nfive\n"
        );
        // Without a final newline the last (incomplete) record is not emitted.
        assert_eq!(
            collect(LOG.trim_end(), "tailLines=2").await,
            "\n",
            "an unterminated record is still being written"
        );
    }

    #[tokio::test]
    async fn timestamps_since_and_limit() {
        assert_eq!(
            collect(LOG, "timestamps=true&tailLines=1").await,
            "2026-01-01T00:00:05Z five\n"
        );
        assert_eq!(
            collect(LOG, "sinceTime=2026-01-01T00:00:03Z").await,
            "three\n\nfive\n"
        );
        assert_eq!(collect(LOG, "sinceSeconds=2").await, "\nfive\n");
        assert_eq!(collect(LOG, "limitBytes=6").await, "one\ntw");
    }

    #[test]
    fn option_errors() {
        let now = Timestamp::now();
        assert!(LogOptions::from_query(&pairs("tailLines=-1"), now).is_err());
        assert!(LogOptions::from_query(&pairs("limitBytes=0"), now).is_err());
        assert!(
            LogOptions::from_query(&pairs("sinceSeconds=1&sinceTime=2026-01-01T00:00:00Z"), now)
                .is_err()
        );
        let o = LogOptions::from_query(&pairs("follow=true&previous=1"), now).unwrap();
        assert!(o.follow && o.previous && !o.timestamps);
    }

    #[test]
    fn records() {
        let r = parse_record(b"2026-01-01T00:00:00Z stderr P a b c\n").unwrap();
        assert_eq!(r.stream, "stderr");
        assert!(r.partial);
        assert_eq!(r.text, b"a b c");
        assert!(parse_record(b"garbage").is_none());
    }

    #[tokio::test]
    async fn follow_sees_appended_records_and_stops_when_container_exits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, "2026-01-01T00:00:00Z stdout F first\n").unwrap();
        let options = LogOptions {
            follow: true,
            ..Default::default()
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = running.clone();
        let follow_path = path.clone();
        let task = tokio::spawn(async move {
            stream_file(
                &follow_path,
                &options,
                move || {
                    let flag = flag.clone();
                    async move { flag.load(std::sync::atomic::Ordering::SeqCst) }
                },
                tx,
            )
            .await
        });
        assert_eq!(&rx.recv().await.unwrap()[..], b"first\n");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"2026-01-01T00:00:01Z stdout F sec")
            .unwrap();
        file.flush().unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        file.write_all(b"ond\n").unwrap();
        assert_eq!(&rx.recv().await.unwrap()[..], b"second\n");
        running.store(false, std::sync::atomic::Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the follower stops once the container exited")
            .unwrap()
            .unwrap();
    }
}
