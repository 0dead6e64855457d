//! A bench run as one shard of a larger one (`--shard I/N`, `--start-at T`): the shard's part
//! of the whole run's connections, operations and rate, its wait for the common start, and
//! what its document says of it. Knows no flag names: `config.rs` words the errors.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime};

use model::bench::ShardInfo;

use crate::common::environment::{parse_rfc3339, rfc3339_ns};

/// Shard `index` of `count` (counted from 0, as a Kubernetes Indexed Job's
/// `JOB_COMPLETION_INDEX` is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

/// The form `--shard` takes, for its errors.
const SHARD_FORM: &str = "expected I/N, shard I of N counted from 0 (0/3, 1/3, 2/3)";

/// `I/N` with 0 <= I < N.
pub fn parse_shard(s: &str) -> Result<Shard, String> {
    let (i, n) = s.split_once('/').ok_or(SHARD_FORM)?;
    let number = |t: &str| -> Result<usize, String> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(SHARD_FORM.to_string());
        }
        t.parse().map_err(|_| format!("{t} is too large"))
    };
    let (index, count) = (number(i)?, number(n)?);
    if count == 0 {
        return Err(format!("{SHARD_FORM}; N must be at least 1"));
    }
    if index >= count {
        return Err(format!(
            "{SHARD_FORM}; I must be below N (shards of {count} are 0 to {})",
            count - 1
        ));
    }
    Ok(Shard { index, count })
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// This shard's part of `total`: an even split, the remainder one each to the lowest
    /// indices, so the parts of all shards add up to `total` exactly.
    pub fn part(self, total: u64) -> u64 {
        let n = self.count as u64;
        total / n + u64::from((self.index as u64) < total % n)
    }

    /// This shard's part of an open-loop rate: a whole rate of at least one per shard is
    /// split as [`Shard::part`] splits counts (301/s over 3: 101, 100, 100); any other rate
    /// evenly. The parts add up to `rate`.
    pub fn rate_part(self, rate: f64) -> f64 {
        if rate.fract() == 0.0 && rate >= self.count as f64 && rate < u64::MAX as f64 {
            self.part(rate as u64) as f64
        } else {
            rate / self.count as f64
        }
    }

    /// Where this shard's schedule begins after the common start: its index in intervals of
    /// the whole run's rate, so the shards' planned starts interleave as one client's would
    /// instead of coinciding.
    pub fn schedule_offset(self, total_rate: f64) -> Duration {
        Duration::from_secs_f64(self.index as f64 / total_rate)
    }
}

/// `--start-at`: the instant as given and as read.
#[derive(Clone, Debug, PartialEq)]
pub struct StartAt {
    pub text: String,
    pub at: SystemTime,
}

/// How far ahead a start may be: further is taken for a mistake (a wrong date or zone).
pub const MAX_AHEAD: Duration = Duration::from_secs(24 * 3600);

/// An RFC 3339 time no more than a day ahead.
pub fn parse_start_at(s: &str) -> Result<StartAt, String> {
    let at = parse_rfc3339(s)?;
    if let Ok(ahead) = at.duration_since(SystemTime::now()) {
        if ahead > MAX_AHEAD {
            return Err(format!(
                "{:.1} hours ahead of this host's clock; at most 24 hours (is the date or the UTC offset right?)",
                ahead.as_secs_f64() / 3600.0
            ));
        }
    }
    Ok(StartAt {
        text: s.to_string(),
        at,
    })
}

/// A start that comes this late is still "together" and draws no warning (the time it takes
/// a process to start, or a scheduler's tick).
pub const LATE_MARGIN: Duration = Duration::from_millis(10);

/// How a wait for the start ended.
#[derive(Debug, PartialEq)]
pub enum Waited {
    /// At the start time (or within [`LATE_MARGIN`] after it).
    OnTime,
    /// The start time had passed by more than the margin: the warning says how late.
    Late(String),
    /// `stop` was set (a signal) before the start.
    Stopped,
}

/// Waits until `start.at` on this host's wall clock, or until `stop` is set; when the start
/// had already passed by more than [`LATE_MARGIN`], returns at once with a warning.
pub fn wait_for(start: &StartAt, stop: &AtomicBool) -> Waited {
    match SystemTime::now().duration_since(start.at) {
        Ok(late) if late > LATE_MARGIN => Waited::Late(format!(
            "the start time {} had passed {} before this shard was ready: it started at once, late, and did not start together with the others",
            start.text,
            late_text(late)
        )),
        Ok(_) => Waited::OnTime,
        Err(_) => match host::clock::sleep_until(start.at, stop) {
            Some(_) => Waited::OnTime,
            None => Waited::Stopped,
        },
    }
}

fn late_text(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{:.0} ms", d.as_secs_f64() * 1000.0)
    }
}

/// What the shard's document says of it. `shard`: None for a run given only a start time (it
/// is then shard 0 of 1).
pub struct Described<'a> {
    pub shard: Option<Shard>,
    pub start_at: Option<&'a StartAt>,
    pub host: &'a str,
    pub clock: crate::common::load_run::WallClock,
    pub connections: usize,
    pub requests: Option<u64>,
    pub rate_per_s: Option<f64>,
}

/// The document's `shard`, with the clock discipline read now.
pub fn info(d: Described<'_>) -> ShardInfo {
    let shard = d.shard.unwrap_or(Shard { index: 0, count: 1 });
    let discipline = host::clock::discipline();
    let ns = host::clock::unix_ns;
    ShardInfo {
        index: shard.index,
        count: shard.count,
        host: d.host.to_string(),
        start_at: d.start_at.map(|s| s.text.clone()),
        started_at: rfc3339_ns(d.clock.started),
        start_skew_ms: d
            .start_at
            .map(|s| (ns(d.clock.started) as f64 - ns(s.at) as f64) / 1e6),
        window_unix_ns: [ns(d.clock.window[0]), ns(d.clock.window[1])],
        // An unsynchronised clock's estimated error means nothing: unknown.
        clock_error_ms: discipline
            .filter(|c| c.synchronised)
            .map(|c| c.estimated_error_us as f64 / 1000.0),
        clock_synchronised: discipline.map(|c| c.synchronised),
        connections: d.connections,
        requests: d.requests,
        rate_per_s: d.rate_per_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_as_index_over_count_from_zero() {
        assert_eq!(parse_shard("0/1"), Ok(Shard { index: 0, count: 1 }));
        assert_eq!(parse_shard("2/3"), Ok(Shard { index: 2, count: 3 }));
        assert_eq!(
            parse_shard("63/64"),
            Ok(Shard {
                index: 63,
                count: 64
            })
        );
        for bad in [
            "3/3", "1/0", "x/2", "1/", "/2", "1", "-1/3", "1/3/4", " 1/3", "1.0/3", "",
        ] {
            let e = parse_shard(bad).unwrap_err();
            assert!(e.starts_with("expected I/N"), "{bad}: {e}");
        }
        assert!(parse_shard("3/3").unwrap_err().contains("0 to 2"));
        assert!(parse_shard("0/0").unwrap_err().contains("at least 1"));
    }

    #[test]
    fn parts_add_up_to_the_whole_with_remainders_to_the_lowest_indices() {
        for count in 1..=70usize {
            for total in [0u64, 1, 2, 3, 5, 7, 10, 24, 99, 100, 101, 1000, 1_000_003] {
                let parts: Vec<u64> = (0..count)
                    .map(|index| Shard { index, count }.part(total))
                    .collect();
                assert_eq!(parts.iter().sum::<u64>(), total, "{total} over {count}");
                // Never more than one apart, larger ones first.
                assert!(parts.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1));
            }
        }
        let parts: Vec<u64> = (0..3)
            .map(|index| Shard { index, count: 3 }.part(10))
            .collect();
        assert_eq!(parts, [4, 3, 3]);
    }

    #[test]
    fn rates_split_to_add_up_to_the_whole() {
        let split = |rate: f64, count: usize| -> Vec<f64> {
            (0..count)
                .map(|index| Shard { index, count }.rate_part(rate))
                .collect()
        };
        assert_eq!(split(301.0, 3), [101.0, 100.0, 100.0]);
        assert_eq!(split(300.0, 3), [100.0, 100.0, 100.0]);
        // Fewer than one per shard, or a fraction: evenly.
        assert_eq!(split(2.0, 4), [0.5, 0.5, 0.5, 0.5]);
        assert_eq!(split(100.5, 2), [50.25, 50.25]);
        for count in 1..=64 {
            for rate in [0.5, 1.0, 7.0, 333.3, 1000.0, 12_345.0] {
                let sum: f64 = split(rate, count).iter().sum();
                assert!(
                    (sum - rate).abs() < 1e-9 * rate,
                    "{rate} over {count}: {sum}"
                );
                assert!(split(rate, count).iter().all(|&r| r > 0.0));
            }
        }
    }

    #[test]
    fn shard_schedules_interleave_at_the_whole_rate() {
        let offsets: Vec<Duration> = (0..3)
            .map(|index| Shard { index, count: 3 }.schedule_offset(300.0))
            .collect();
        let ms: Vec<f64> = offsets.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        assert!(
            (ms[0]).abs() < 1e-9 && (ms[1] - 3.333).abs() < 1e-3 && (ms[2] - 6.667).abs() < 1e-3
        );
    }

    #[test]
    fn start_times_a_day_ahead_or_unreadable_are_refused() {
        let soon = rfc3339_ns(SystemTime::now() + Duration::from_secs(3600));
        let s = parse_start_at(&soon).unwrap();
        assert_eq!(s.text, soon);
        let far = rfc3339_ns(SystemTime::now() + Duration::from_secs(25 * 3600));
        assert!(parse_start_at(&far)
            .unwrap_err()
            .contains("at most 24 hours"));
        assert!(parse_start_at("tomorrow").unwrap_err().contains("RFC 3339"));
        // The past is not an error here: the shard starts at once with a warning.
        assert!(parse_start_at("2020-01-01T00:00:00Z").is_ok());
    }

    #[test]
    fn a_past_start_is_a_warning_and_a_near_one_is_waited_for() {
        let never = AtomicBool::new(false);
        let past = parse_start_at("2020-01-01T00:00:00Z").unwrap();
        let Waited::Late(w) = wait_for(&past, &never) else {
            panic!("not late")
        };
        assert!(
            w.contains("had passed") && w.contains("2020-01-01T00:00:00Z"),
            "{w}"
        );
        assert!(!w.contains("--"), "names no flag: {w}");
        let at = SystemTime::now() + Duration::from_millis(30);
        let soon = StartAt {
            text: rfc3339_ns(at),
            at,
        };
        assert_eq!(wait_for(&soon, &never), Waited::OnTime);
        let late = SystemTime::now().duration_since(at).expect("not before");
        assert!(late < Duration::from_millis(2), "{late:?}");
        let stopped = AtomicBool::new(true);
        let later = SystemTime::now() + Duration::from_secs(60);
        let later = StartAt {
            text: rfc3339_ns(later),
            at: later,
        };
        assert_eq!(wait_for(&later, &stopped), Waited::Stopped);
    }
}
