//! Time for table cells: RFC 3339 parsing/formatting and apimachinery's
//! `duration.HumanDuration`, the "5m", "3h4m", "2d3h" strings of every AGE column.
//!
//! Pure functions over integers and strings: the caller supplies "now" as Unix
//! seconds, so nothing here reads a clock. No store, no HTTP.

const NANOS_PER_SEC: i64 = 1_000_000_000;

/// A point in time as Unix seconds plus a nanosecond fraction (always `0..1e9`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

/// Unix seconds of Go's zero `time.Time` (0001-01-01T00:00:00Z), which
/// `metav1.Time.IsZero` treats as "unset".
const GO_ZERO_TIME_SECS: i64 = -62_135_596_800;

impl Timestamp {
    /// True for Go's zero time, which Kubernetes serializes only when a field is
    /// present but unset; the printers treat it like a missing timestamp.
    pub fn is_zero(&self) -> bool {
        self.secs == GO_ZERO_TIME_SECS && self.nanos == 0
    }

    /// Nanoseconds from `self` to `now_unix_secs`, saturating like Go's
    /// `time.Since` does for durations beyond ~292 years.
    pub fn nanos_until(&self, now_unix_secs: i64) -> i64 {
        let d = i128::from(now_unix_secs) * i128::from(NANOS_PER_SEC)
            - (i128::from(self.secs) * i128::from(NANOS_PER_SEC) + i128::from(self.nanos));
        d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }
}

/// `duration.HumanDuration` for a whole number of seconds.
pub fn human_duration(seconds: i64) -> String {
    human_duration_nanos(seconds.saturating_mul(NANOS_PER_SEC))
}

/// `duration.HumanDuration` for a Go `time.Duration` (nanoseconds): about two to
/// three significant figures, e.g. "119s", "9m59s", "179m", "7h59m", "47h",
/// "7d23h", "729d", "7y364d", "8y"; "0s" for up to 2s into the future (clock
/// skew) and "<invalid>" beyond that.
pub fn human_duration_nanos(d: i64) -> String {
    // Go's int(d.Seconds()) truncates toward zero.
    let seconds = d / NANOS_PER_SEC;
    if seconds < -1 {
        return "<invalid>".to_string();
    } else if seconds < 0 {
        return "0s".to_string();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = d / (60 * NANOS_PER_SEC);
    if minutes < 10 {
        let s = seconds % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = d / (3600 * NANOS_PER_SEC);
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        format!("{hours}h{m}m")
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        format!("{}d{}h", hours / 24, h)
    } else if hours < 24 * 365 * 2 {
        format!("{}d", hours / 24)
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        format!("{}y{}d", hours / 24 / 365, dy)
    } else {
        format!("{}y", hours / 24 / 365)
    }
}

/// The printers' `translateTimestampSince`: "<unknown>" for an unset time,
/// otherwise the human duration from `t` to now.
pub fn since(t: Option<Timestamp>, now_unix_secs: i64) -> String {
    match t {
        Some(t) if !t.is_zero() => human_duration_nanos(t.nanos_until(now_unix_secs)),
        _ => "<unknown>".to_string(),
    }
}

/// Parses an RFC 3339 timestamp as Go's `time.Parse(time.RFC3339, ..)` accepts it
/// ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00.123456+02:00"). `None` if it is
/// not one.
pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(
            part.iter()
                .fold(0i64, |acc, c| acc * 10 + i64::from(c - b'0')),
        )
    };
    let sep = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(sep(4, b'-') && sep(7, b'-') && sep(10, b'T') && sep(13, b':') && sep(16, b':')) {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let digits = &b[start..i];
        if digits.is_empty() {
            return None;
        }
        for (k, c) in digits.iter().take(9).enumerate() {
            nanos += u32::from(c - b'0') * 10u32.pow(8 - k as u32);
        }
    }
    let offset_secs = match b.get(i) {
        Some(b'Z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && sep(i + 3, b':') => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let off = oh * 3600 + om * 60;
            if *sign == b'+' { off } else { -off }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(Timestamp { secs, nanos })
}

/// Formats Unix seconds as Go's `t.UTC().Format(time.RFC3339)`: "2006-01-02T15:04:05Z".
pub fn format_rfc3339(unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let rem = unix_secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        y,
        m,
        d,
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Go's zero time, formatted the way the default table convertor prints a
/// missing creationTimestamp.
pub fn zero_time_rfc3339() -> String {
    format_rfc3339(GO_ZERO_TIME_SECS)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(y) => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Inverse of [`days_from_civil`].
pub(crate) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;
    const S: i64 = 1_000 * MS;
    const M: i64 = 60 * S;
    const H: i64 = 60 * M;
    const D: i64 = 24 * H;
    const Y: i64 = 365 * D;

    #[test]
    fn human_duration_matches_apimachinery() {
        // TestHumanDuration in k8s.io/apimachinery/pkg/util/duration.
        let cases = [
            (S, "1s"),
            (70 * S, "70s"),
            (190 * S, "3m10s"),
            (70 * M, "70m"),
            (47 * H, "47h"),
            (49 * H, "2d1h"),
            ((8 * 24 + 2) * H, "8d"),
            (367 * D, "367d"),
            ((365 * 2 * 24 + 25) * H, "2y1d"),
            ((365 * 8 * 24 + 2) * H, "8y"),
        ];
        for (d, want) in cases {
            assert_eq!(human_duration_nanos(d), want, "d={d}");
        }
    }

    #[test]
    fn human_duration_boundaries_match_apimachinery() {
        // TestHumanDurationBoundaries in k8s.io/apimachinery/pkg/util/duration.
        let cases = [
            (-2 * S, "<invalid>"),
            (-2 * S + 1, "0s"),
            (0, "0s"),
            (S - MS, "0s"),
            (2 * M - MS, "119s"),
            (2 * M, "2m"),
            (2 * M + S, "2m1s"),
            (10 * M - MS, "9m59s"),
            (10 * M, "10m"),
            (10 * M + S, "10m"),
            (3 * H - MS, "179m"),
            (3 * H, "3h"),
            (3 * H + M, "3h1m"),
            (8 * H - MS, "7h59m"),
            (8 * H, "8h"),
            (8 * H + 59 * M, "8h"),
            (2 * D - MS, "47h"),
            (2 * D, "2d"),
            (2 * D + H, "2d1h"),
            (8 * D - MS, "7d23h"),
            (8 * D, "8d"),
            (8 * D + 23 * H, "8d"),
            (2 * Y - MS, "729d"),
            (2 * Y, "2y"),
            (2 * Y + 23 * H, "2y"),
            (2 * Y + 23 * H + 59 * M, "2y"),
            (2 * Y + D - MS, "2y"),
            (2 * Y + D, "2y1d"),
            (3 * Y, "3y"),
            (4 * Y, "4y"),
            (5 * Y, "5y"),
            (6 * Y, "6y"),
            (7 * Y, "7y"),
            (8 * Y - MS, "7y364d"),
            (8 * Y, "8y"),
            (8 * Y + 364 * D, "8y"),
            (9 * Y, "9y"),
        ];
        for (d, want) in cases {
            assert_eq!(human_duration_nanos(d), want, "d={d}");
        }
    }

    #[test]
    fn human_duration_whole_seconds() {
        assert_eq!(human_duration(0), "0s");
        assert_eq!(human_duration(-1), "0s");
        assert_eq!(human_duration(-2), "<invalid>");
        assert_eq!(human_duration(59), "59s");
        assert_eq!(human_duration(123), "2m3s");
        assert_eq!(human_duration(300), "5m");
        assert_eq!(human_duration(3 * 3600 + 4 * 60), "3h4m");
        assert_eq!(human_duration(2 * 86_400 + 3 * 3600), "2d3h");
        assert_eq!(human_duration(400 * 86_400), "400d");
        assert_eq!(human_duration(3 * 365 * 86_400 + 10 * 86_400), "3y10d");
        assert_eq!(human_duration(i64::MAX), "292y");
    }

    #[test]
    fn parses_rfc3339() {
        let t = parse_rfc3339("1970-01-01T00:00:00Z").unwrap();
        assert_eq!((t.secs, t.nanos), (0, 0));
        let t = parse_rfc3339("2024-02-29T12:34:56Z").unwrap();
        assert_eq!(t.secs, 1_709_210_096);
        let t = parse_rfc3339("2024-02-29T14:34:56.25+02:00").unwrap();
        assert_eq!((t.secs, t.nanos), (1_709_210_096, 250_000_000));
        let t = parse_rfc3339("2024-02-29T12:04:56.123456-00:30").unwrap();
        assert_eq!((t.secs, t.nanos), (1_709_210_096, 123_456_000));
        assert!(parse_rfc3339("0001-01-01T00:00:00Z").unwrap().is_zero());
        for bad in [
            "",
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-01-01 00:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00+0100",
            "yesterday",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_709_210_096), "2024-02-29T12:34:56Z");
        assert_eq!(zero_time_rfc3339(), "0001-01-01T00:00:00Z");
        for s in ["1999-12-31T23:59:59Z", "2100-03-01T00:00:00Z"] {
            assert_eq!(format_rfc3339(parse_rfc3339(s).unwrap().secs), s);
        }
    }

    #[test]
    fn since_handles_unset_and_fractions() {
        assert_eq!(since(None, 100), "<unknown>");
        assert_eq!(
            since(parse_rfc3339("0001-01-01T00:00:00Z"), 100),
            "<unknown>"
        );
        let t = parse_rfc3339("1970-01-01T00:00:10.5Z");
        // 9.5s elapsed truncates to 9s, as Go's int(d.Seconds()) does.
        assert_eq!(since(t, 20), "9s");
        assert_eq!(since(t, 5), "<invalid>");
    }
}
