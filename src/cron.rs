//! Cron schedules: parsing the five-field expressions that CronJobs and scheduled
//! snapshots use, and finding the next time one fires in a time zone.
//!
//! Owns only the grammar and the calendar arithmetic; it knows nothing about
//! Kubernetes objects, the store or the clock (callers pass "now" in), so it is
//! pure and unit-testable.
//!
//! The grammar is the one Kubernetes accepts (robfig/cron's standard parser):
//! `minute hour day-of-month month day-of-week`, each field a comma list of `*`,
//! `?`, `N`, `N-M`, with an optional `/step` (`N/step` means `N-max/step`); month
//! and weekday names (`jan`, `mon`, case-insensitive); `@yearly`, `@annually`,
//! `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`; and a `TZ=<zone>` or
//! `CRON_TZ=<zone>` prefix. As in Vixie cron, weekday `7` is Sunday too.
//!
//! Day matching follows Vixie cron: when both day-of-month and day-of-week are
//! restricted, a day matches if EITHER matches; when one is unrestricted (`*` or
//! `?`, without a step above 1, as robfig/cron decides), both must match.
//!
//! Daylight-saving time (`next_after`): a wall-clock time skipped by a
//! spring-forward jump fires once, at the instant of the jump (what Vixie cron
//! does: "right after the change"); in a fall-back fold a fixed-hour schedule
//! fires only in the first pass, while a schedule whose hour field is `*` fires
//! in both passes, since it is about elapsed time rather than a wall-clock moment.

use std::fmt;

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// Why a schedule string was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CronError {
    #[error("empty cron schedule")]
    Empty,
    #[error(
        "cron schedule {schedule:?} has {found} fields; expected 5 (minute hour day-of-month month day-of-week)"
    )]
    FieldCount { schedule: String, found: usize },
    #[error(
        "cron schedule {schedule:?}: unknown descriptor {descriptor:?} (known: @yearly @annually @monthly @weekly @daily @midnight @hourly)"
    )]
    UnknownDescriptor {
        schedule: String,
        descriptor: String,
    },
    #[error("cron schedule {schedule:?}: {field} field {value:?}: {reason}")]
    InvalidField {
        schedule: String,
        field: &'static str,
        value: String,
        reason: String,
    },
    #[error("cron schedule {schedule:?}: unknown time zone {zone:?}: {reason}")]
    UnknownTimeZone {
        schedule: String,
        zone: String,
        reason: String,
    },
}

/// One field's limits and names.
struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: FieldSpec = FieldSpec {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: FieldSpec = FieldSpec {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY_OF_MONTH: FieldSpec = FieldSpec {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    // Index + 1 is the month number.
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DAY_OF_WEEK: FieldSpec = FieldSpec {
    name: "day-of-week",
    min: 0,
    // 7 is accepted as Sunday (Vixie cron) and folded onto 0 after parsing.
    max: 7,
    // Index is the weekday number, Sunday = 0.
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// A parsed field: bit `n` set when value `n` matches; `star` when the field was
/// unrestricted in robfig/cron's sense (decides the day-of-month/day-of-week rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Field {
    bits: u64,
    star: bool,
}

impl Field {
    fn contains(&self, value: u32) -> bool {
        value < 64 && self.bits & (1u64 << value) != 0
    }

    /// The smallest set value `>= from`, if any.
    fn next_at_or_after(&self, from: u32) -> Option<u32> {
        if from >= 64 {
            return None;
        }
        let rest = self.bits >> from;
        (rest != 0).then(|| from + rest.trailing_zeros())
    }
}

/// A parsed cron schedule.
#[derive(Clone)]
pub struct Schedule {
    source: String,
    minute: Field,
    hour: Field,
    day_of_month: Field,
    month: Field,
    day_of_week: Field,
    /// From a `TZ=`/`CRON_TZ=` prefix: (name, zone). Overrides the caller's zone.
    time_zone: Option<(String, TimeZone)>,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Schedule").field(&self.source).finish()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl std::str::FromStr for Schedule {
    type Err = CronError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Schedule::parse(s)
    }
}

/// How far ahead `next_after` looks before deciding a schedule never fires
/// (`30 2 * *` style impossible dates). Nine years covers a Feb 29 after a
/// skipped leap year (2096 → 2104).
const SEARCH_YEARS: i16 = 9;

impl Schedule {
    /// Parses a cron expression (see the module documentation for the grammar).
    pub fn parse(schedule: &str) -> Result<Schedule, CronError> {
        let source = schedule.trim();
        if source.is_empty() {
            return Err(CronError::Empty);
        }
        let mut rest = source;
        let mut time_zone = None;
        if let Some(prefixed) = rest
            .strip_prefix("CRON_TZ=")
            .or_else(|| rest.strip_prefix("TZ="))
        {
            let (zone, after) = prefixed
                .split_once(char::is_whitespace)
                .unwrap_or((prefixed, ""));
            let tz = TimeZone::get(zone).map_err(|e| CronError::UnknownTimeZone {
                schedule: source.to_string(),
                zone: zone.to_string(),
                reason: e.to_string(),
            })?;
            time_zone = Some((zone.to_string(), tz));
            rest = after.trim_start();
            if rest.is_empty() {
                return Err(CronError::FieldCount {
                    schedule: source.to_string(),
                    found: 0,
                });
            }
        }

        let expanded;
        if let Some(descriptor) = rest.strip_prefix('@') {
            expanded = match descriptor.to_ascii_lowercase().as_str() {
                "yearly" | "annually" => "0 0 1 1 *",
                "monthly" => "0 0 1 * *",
                "weekly" => "0 0 * * 0",
                "daily" | "midnight" => "0 0 * * *",
                "hourly" => "0 * * * *",
                _ => {
                    return Err(CronError::UnknownDescriptor {
                        schedule: source.to_string(),
                        descriptor: rest.to_string(),
                    });
                }
            };
            rest = expanded;
        }

        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(CronError::FieldCount {
                schedule: source.to_string(),
                found: fields.len(),
            });
        }
        let parse = |spec: &FieldSpec, text: &str| {
            parse_field(spec, text).map_err(|reason| CronError::InvalidField {
                schedule: source.to_string(),
                field: spec.name,
                value: text.to_string(),
                reason,
            })
        };
        let minute = parse(&MINUTE, fields[0])?;
        let hour = parse(&HOUR, fields[1])?;
        let day_of_month = parse(&DAY_OF_MONTH, fields[2])?;
        let month = parse(&MONTH, fields[3])?;
        let mut day_of_week = parse(&DAY_OF_WEEK, fields[4])?;
        if day_of_week.contains(7) {
            day_of_week.bits = (day_of_week.bits & !(1 << 7)) | 1;
        }
        Ok(Schedule {
            source: source.to_string(),
            minute,
            hour,
            day_of_month,
            month,
            day_of_week,
            time_zone,
        })
    }

    /// The time zone named by a `TZ=`/`CRON_TZ=` prefix, if the schedule has one.
    pub fn time_zone_name(&self) -> Option<&str> {
        self.time_zone.as_ref().map(|(name, _)| name.as_str())
    }

    /// The first instant strictly after `after` at which the schedule fires, read
    /// in `tz` (or in the schedule's own `TZ=` zone when it has one). `None` when
    /// the schedule can never fire (for example `0 0 30 2 *`).
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let tz = self.time_zone.as_ref().map_or(tz, |(_, zone)| zone);
        let limit_year = after
            .to_zoned(tz.clone())
            .year()
            .saturating_add(SEARCH_YEARS);
        // `from` is an inclusive lower bound; offsets may change at transitions,
        // so each round works under the offset in force at `from` until the next
        // transition.
        let mut from = after.checked_add(SignedDuration::from_nanos(1)).ok()?;
        // Each round returns, reaches the next transition or skips one minute of a
        // fold; the bound only guards against a time zone database gone wrong.
        for _ in 0..100_000 {
            let offset = tz.to_offset(from);
            let start = ceil_to_minute(offset.to_datetime(from))?;
            let candidate = self.next_civil_match(start, limit_year)?;
            let instant = offset.to_timestamp(candidate).ok()?;
            let transition = tz
                .following(from)
                .find(|t| t.timestamp() > from)
                .filter(|t| t.timestamp() <= instant);
            if let Some(transition) = transition {
                let at = transition.timestamp();
                let new_offset = transition.offset();
                if new_offset > offset && candidate < new_offset.to_datetime(at) {
                    // The candidate's wall-clock time is skipped by the jump.
                    return Some(at);
                }
                from = at;
                continue;
            }
            if !self.hour.star
                && let AmbiguousOffset::Fold { after: second, .. } =
                    tz.to_ambiguous_timestamp(candidate).offset()
                && second == offset
            {
                // Second pass of a fall-back fold: this wall-clock time already
                // fired in the first pass.
                from = instant.checked_add(SignedDuration::from_secs(60)).ok()?;
                continue;
            }
            return Some(instant);
        }
        None
    }

    fn day_matches(&self, date: Date) -> bool {
        let dom = self.day_of_month.contains(date.day() as u32);
        let dow = self
            .day_of_week
            .contains(date.weekday().to_sunday_zero_offset() as u32);
        if self.day_of_month.star || self.day_of_week.star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first wall-clock minute `>= start` matching every field, ignoring time
    /// zones; `None` once the search passes `limit_year`.
    fn next_civil_match(&self, start: DateTime, limit_year: i16) -> Option<DateTime> {
        let mut date = start.date();
        let mut hour = start.hour() as u32;
        let mut minute = start.minute() as u32;
        loop {
            if date.year() > limit_year {
                return None;
            }
            if !self.month.contains(date.month() as u32) {
                date = match self.month.next_at_or_after(date.month() as u32) {
                    Some(month) => Date::new(date.year(), month as i8, 1).ok()?,
                    None => Date::new(date.year().checked_add(1)?, 1, 1).ok()?,
                };
                (hour, minute) = (0, 0);
                continue;
            }
            if !self.day_matches(date) {
                date = date.tomorrow().ok()?;
                (hour, minute) = (0, 0);
                continue;
            }
            let Some(h) = self.hour.next_at_or_after(hour).filter(|h| *h <= 23) else {
                date = date.tomorrow().ok()?;
                (hour, minute) = (0, 0);
                continue;
            };
            if h != hour {
                (hour, minute) = (h, 0);
            }
            let Some(m) = self.minute.next_at_or_after(minute).filter(|m| *m <= 59) else {
                if hour == 23 {
                    date = date.tomorrow().ok()?;
                    (hour, minute) = (0, 0);
                } else {
                    (hour, minute) = (hour + 1, 0);
                }
                continue;
            };
            let time = Time::new(hour as i8, m as i8, 0, 0).ok()?;
            return Some(date.to_datetime(time));
        }
    }
}

/// `dt` rounded up to a whole minute.
fn ceil_to_minute(dt: DateTime) -> Option<DateTime> {
    let truncated = dt
        .date()
        .to_datetime(Time::new(dt.hour(), dt.minute(), 0, 0).ok()?);
    if truncated == dt {
        Some(dt)
    } else {
        truncated.checked_add(SignedDuration::from_secs(60)).ok()
    }
}

/// Parses one field into its bit set; the error is the reason, without context.
fn parse_field(spec: &FieldSpec, text: &str) -> Result<Field, String> {
    let mut field = Field {
        bits: 0,
        star: false,
    };
    if text.is_empty() {
        return Err("empty field".to_string());
    }
    for part in text.split(',') {
        if part.is_empty() {
            return Err("empty list element".to_string());
        }
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .map_err(|_| format!("step {step:?} is not a number"))?;
                if step == 0 {
                    return Err("step must be at least 1".to_string());
                }
                (range, Some(step))
            }
            None => (part, None),
        };
        let (start, end, star) = if range == "*" || range == "?" {
            (spec.min, spec.max_for_star(), step.is_none_or(|s| s == 1))
        } else if let Some((low, high)) = range.split_once('-') {
            let low = parse_value(spec, low)?;
            let high = parse_value(spec, high)?;
            if low > high {
                return Err(format!("range start {low} is after range end {high}"));
            }
            (low, high, false)
        } else {
            let value = parse_value(spec, range)?;
            // robfig/cron: "N/step" means "N-max/step".
            let end = if step.is_some() {
                spec.max_for_star()
            } else {
                value
            };
            (value, end, false)
        };
        let step = step.unwrap_or(1);
        let mut value = start;
        while value <= end {
            field.bits |= 1u64 << value;
            value += step;
        }
        field.star |= star;
    }
    Ok(field)
}

impl FieldSpec {
    /// The top of the range `*` covers (weekday 7 is only an alias of 0).
    fn max_for_star(&self) -> u32 {
        if self.name == DAY_OF_WEEK.name {
            6
        } else {
            self.max
        }
    }
}

fn parse_value(spec: &FieldSpec, text: &str) -> Result<u32, String> {
    if let Ok(value) = text.parse::<u32>() {
        if value < spec.min || value > spec.max {
            return Err(format!("{value} is out of range {}-{}", spec.min, spec.max));
        }
        return Ok(value);
    }
    let lower = text.to_ascii_lowercase();
    match spec.names.iter().position(|name| *name == lower) {
        // Month names start at 1, weekday names at 0 (= spec.min in both cases).
        Some(index) => Ok(index as u32 + spec.min),
        None if spec.names.is_empty() => Err(format!("{text:?} is not a number")),
        None => Err(format!(
            "{text:?} is neither a number nor one of {}",
            spec.names.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(name: &str) -> TimeZone {
        TimeZone::get(name).unwrap_or_else(|e| {
            panic!("time zone {name} unavailable ({e}); install the tzdata package")
        })
    }

    /// Next firing after a wall-clock time in `tz`, rendered in `tz` with offset.
    fn next(schedule: &str, after: &str, tz: &str) -> String {
        let tz = zone(tz);
        // A civil time, or a zoned one where the civil time is ambiguous.
        let after = match after.parse::<jiff::Zoned>() {
            Ok(zoned) => zoned.timestamp(),
            Err(_) => {
                let civil: DateTime = after.parse().unwrap();
                civil.to_zoned(tz.clone()).unwrap().timestamp()
            }
        };
        let schedule = Schedule::parse(schedule).unwrap();
        match schedule.next_after(after, &tz) {
            Some(t) => {
                let z = t.to_zoned(schedule.time_zone.clone().map_or(tz, |(_, z)| z));
                format!("{} {}", z.datetime(), z.offset())
            }
            None => "never".to_string(),
        }
    }

    /// The firings after `after` (UTC instants) for `count` rounds.
    fn series(schedule: &str, after: &str, tz: &str, count: usize) -> Vec<String> {
        let tz = zone(tz);
        let schedule = Schedule::parse(schedule).unwrap();
        let mut t: Timestamp = after.parse().unwrap();
        let mut out = Vec::new();
        for _ in 0..count {
            t = schedule.next_after(t, &tz).unwrap();
            let z = t.to_zoned(tz.clone());
            out.push(format!("{} {}", z.datetime(), z.offset()));
        }
        out
    }

    #[test]
    fn basic_fields() {
        assert_eq!(
            next("*/15 * * * *", "2024-05-01T10:07:30", "UTC"),
            "2024-05-01T10:15:00 +00"
        );
        assert_eq!(
            next("0 */12 * * *", "2024-05-01T10:00", "UTC"),
            "2024-05-01T12:00:00 +00"
        );
        assert_eq!(
            next("0 */12 * * *", "2024-05-01T12:00", "UTC"),
            "2024-05-02T00:00:00 +00"
        );
        // Strictly after: exactly on a firing time gives the next one.
        assert_eq!(
            next("30 9 * * *", "2024-05-01T09:30", "UTC"),
            "2024-05-02T09:30:00 +00"
        );
        assert_eq!(
            next("5-10/2,45 8 * * *", "2024-05-01T08:07", "UTC"),
            "2024-05-01T08:09:00 +00"
        );
        assert_eq!(
            next("5-10/2,45 8 * * *", "2024-05-01T08:09", "UTC"),
            "2024-05-01T08:45:00 +00"
        );
        // N/step means N-max/step.
        assert_eq!(
            next("50/5 * * * *", "2024-05-01T08:56", "UTC"),
            "2024-05-01T09:50:00 +00"
        );
        // Year rollover.
        assert_eq!(
            next("0 0 1 1 *", "2024-05-01T00:00", "UTC"),
            "2025-01-01T00:00:00 +00"
        );
    }

    #[test]
    fn names_and_descriptors() {
        // 2024-05-01 is a Wednesday.
        assert_eq!(
            next("0 9 * * MON-fri", "2024-05-03T10:00", "UTC"),
            "2024-05-06T09:00:00 +00"
        );
        assert_eq!(
            next("0 0 1 jan,Jul *", "2024-05-01T00:00", "UTC"),
            "2024-07-01T00:00:00 +00"
        );
        assert_eq!(
            next("@hourly", "2024-05-01T10:30", "UTC"),
            "2024-05-01T11:00:00 +00"
        );
        assert_eq!(
            next("@daily", "2024-05-01T10:30", "UTC"),
            "2024-05-02T00:00:00 +00"
        );
        assert_eq!(
            next("@midnight", "2024-05-01T10:30", "UTC"),
            "2024-05-02T00:00:00 +00"
        );
        assert_eq!(
            next("@weekly", "2024-05-01T10:30", "UTC"),
            "2024-05-05T00:00:00 +00"
        );
        assert_eq!(
            next("@monthly", "2024-05-01T10:30", "UTC"),
            "2024-06-01T00:00:00 +00"
        );
        assert_eq!(
            next("@yearly", "2024-05-01T10:30", "UTC"),
            "2025-01-01T00:00:00 +00"
        );
        assert_eq!(
            next("@annually", "2024-05-01T10:30", "UTC"),
            "2025-01-01T00:00:00 +00"
        );
        // 7 is Sunday, also at the end of a range.
        assert_eq!(
            next("0 0 * * 7", "2024-05-01T00:00", "UTC"),
            "2024-05-05T00:00:00 +00"
        );
        assert_eq!(
            next("0 0 * * 6-7", "2024-05-01T00:00", "UTC"),
            "2024-05-04T00:00:00 +00"
        );
    }

    #[test]
    fn day_of_month_or_day_of_week() {
        // Both restricted: the 13th OR a Friday. 2024-09-01 is a Sunday;
        // Friday 6th comes before the 13th.
        assert_eq!(
            next("0 0 13 * 5", "2024-09-01T00:00", "UTC"),
            "2024-09-06T00:00:00 +00"
        );
        assert_eq!(
            next("0 0 13 * 5", "2024-09-06T00:00", "UTC"),
            "2024-09-13T00:00:00 +00"
        );
        assert_eq!(
            next("0 0 13 * 5", "2024-09-13T00:00", "UTC"),
            "2024-09-20T00:00:00 +00"
        );
        // Day-of-week unrestricted: only the 13th.
        assert_eq!(
            next("0 0 13 * *", "2024-09-01T00:00", "UTC"),
            "2024-09-13T00:00:00 +00"
        );
        // Day-of-month `?` is unrestricted too: only Fridays.
        assert_eq!(
            next("0 0 ? * 5", "2024-09-06T00:00", "UTC"),
            "2024-09-13T00:00:00 +00"
        );
        // `*/2` is a restriction (robfig/cron): the OR rule applies, so odd days OR
        // Mondays. 2024-09-02 is a Monday.
        assert_eq!(
            next("0 0 */2 * 1", "2024-09-01T00:00", "UTC"),
            "2024-09-02T00:00:00 +00"
        );
        // Leap day, and a schedule that never fires.
        assert_eq!(
            next("0 0 29 2 *", "2024-03-01T00:00", "UTC"),
            "2028-02-29T00:00:00 +00"
        );
        assert_eq!(
            next("0 0 29 2 *", "2097-01-01T00:00", "UTC"),
            "2104-02-29T00:00:00 +00"
        );
        assert_eq!(next("0 0 30 2 *", "2024-01-01T00:00", "UTC"), "never");
        assert_eq!(next("0 0 31 4,6 *", "2024-01-01T00:00", "UTC"), "never");
    }

    #[test]
    fn time_zone_prefix_overrides_the_callers_zone() {
        let s = Schedule::parse("CRON_TZ=America/New_York 0 9 * * *").unwrap();
        assert_eq!(s.time_zone_name(), Some("America/New_York"));
        let t: Timestamp = "2024-05-01T12:00:00Z".parse().unwrap();
        let fired = s.next_after(t, &zone("Asia/Tokyo")).unwrap();
        // 09:00 EDT is 13:00 UTC.
        assert_eq!(fired.to_string(), "2024-05-01T13:00:00Z");
        let s = Schedule::parse("TZ=UTC @daily").unwrap();
        assert_eq!(
            s.next_after(t, &zone("Asia/Tokyo")).unwrap().to_string(),
            "2024-05-02T00:00:00Z"
        );
        assert_eq!(s.to_string(), "TZ=UTC @daily");
    }

    #[test]
    fn spring_forward_gap_fires_once_at_the_jump() {
        // Europe/Berlin 2024-03-31: 02:00 CET jumps to 03:00 CEST.
        assert_eq!(
            next("30 2 * * *", "2024-03-31T01:00", "Europe/Berlin"),
            "2024-03-31T03:00:00 +02"
        );
        // Then the next day as usual.
        assert_eq!(
            next("30 2 * * *", "2024-03-31T03:00", "Europe/Berlin"),
            "2024-04-01T02:30:00 +02"
        );
        // Every 15 minutes: 01:45, then the jump (for 02:00..02:45, once), then 03:15.
        assert_eq!(
            series("*/15 * * * *", "2024-03-31T00:40:00Z", "Europe/Berlin", 4),
            vec![
                "2024-03-31T01:45:00 +01",
                "2024-03-31T03:00:00 +02",
                "2024-03-31T03:15:00 +02",
                "2024-03-31T03:30:00 +02"
            ]
        );
        // A time right after the gap is not disturbed.
        assert_eq!(
            next("0 3 * * *", "2024-03-31T01:00", "Europe/Berlin"),
            "2024-03-31T03:00:00 +02"
        );
        // New York jumps at 02:00 too.
        assert_eq!(
            next("0 2 * * *", "2024-03-09T12:00", "America/New_York"),
            "2024-03-10T03:00:00 -04"
        );
    }

    #[test]
    fn fall_back_fold() {
        // Europe/Berlin 2024-10-27: 03:00 CEST falls back to 02:00 CET, so 02:00-02:59
        // happens twice. A fixed-hour schedule fires once, in the first pass.
        assert_eq!(
            series("30 2 * * *", "2024-10-26T12:00:00Z", "Europe/Berlin", 2),
            vec!["2024-10-27T02:30:00 +02", "2024-10-28T02:30:00 +01"]
        );
        // An hourly-wildcard schedule follows elapsed time: both passes.
        assert_eq!(
            series("30 * * * *", "2024-10-26T23:00:00Z", "Europe/Berlin", 4),
            vec![
                "2024-10-27T01:30:00 +02",
                "2024-10-27T02:30:00 +02",
                "2024-10-27T02:30:00 +01",
                "2024-10-27T03:30:00 +01"
            ]
        );
        // A schedule starting inside the second pass skips to after the fold.
        assert_eq!(
            next(
                "45 2 * * *",
                "2024-10-27T02:10+01:00[Europe/Berlin]",
                "Europe/Berlin"
            ),
            "2024-10-28T02:45:00 +01"
        );
    }

    #[test]
    fn every_minute_and_bad_input() {
        assert_eq!(
            next("* * * * *", "2024-05-01T10:00:59.999", "UTC"),
            "2024-05-01T10:01:00 +00"
        );
        let bad = [
            ("", "empty"),
            ("* * * *", "has 4 fields"),
            ("* * * * * *", "has 6 fields"),
            ("60 * * * *", "60 is out of range 0-59"),
            ("* 24 * * *", "24 is out of range 0-23"),
            ("* * 0 * *", "0 is out of range 1-31"),
            ("* * * 13 *", "13 is out of range 1-12"),
            ("* * * * 8", "8 is out of range 0-7"),
            ("5-1 * * * *", "range start 5 is after range end 1"),
            ("*/0 * * * *", "step must be at least 1"),
            ("*/x * * * *", "step \"x\" is not a number"),
            ("a * * * *", "\"a\" is not a number"),
            ("* * * foo *", "neither a number nor one of jan"),
            ("1,,2 * * * *", "empty"),
            ("@fortnightly", "unknown descriptor"),
            (
                "TZ=Mars/Olympus 0 0 * * *",
                "unknown time zone \"Mars/Olympus\"",
            ),
            ("TZ=UTC", "has 0 fields"),
            ("-1 * * * *", "not a number"),
        ];
        for (schedule, want) in bad {
            let err = Schedule::parse(schedule).expect_err(schedule).to_string();
            assert!(err.contains(want), "{schedule:?}: {err} lacks {want:?}");
        }
    }
}
