//! `stats`: latency histograms and their summaries. Pure: no I/O, no threads.

pub mod buckets;
pub mod compare;
pub mod histogram;
pub mod signed_rank;

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The largest latency a histogram holds; longer ones are recorded as this (and counted as
/// saturated).
pub const MAX_LATENCY_US: u64 = 3_600_000_000;

/// A latency histogram in microseconds, from 1 µs to an hour, to 3 significant digits.
/// Recording allocates nothing.
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    h: Histogram<u64>,
    saturated: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> LatencyHistogram {
        LatencyHistogram {
            // Bounds and precision are constants that hdrhistogram accepts.
            h: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds"),
            saturated: 0,
        }
    }

    /// Records one latency in microseconds (0 is recorded as 1 µs, the resolution).
    pub fn record_us(&mut self, us: u64) {
        if us > MAX_LATENCY_US {
            self.saturated += 1;
        }
        self.h.saturating_record(us.clamp(1, MAX_LATENCY_US));
    }

    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        self.record_us(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    /// The histogram a summary was made from, rebuilt from its recorded values
    /// ([`LatencySummary::histogram`]): each value is the top of its bucket, so it is recorded
    /// back into the same bucket, and merging rebuilt histograms is exact. A summary made
    /// before the values were kept rebuilds empty.
    pub fn from_summary(summary: &LatencySummary) -> LatencyHistogram {
        let mut h = LatencyHistogram::new();
        for &[value, count] in &summary.histogram {
            h.h.saturating_record_n(value.clamp(1, MAX_LATENCY_US), count);
        }
        h.saturated = summary.saturated;
        h
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.h.add(&other.h);
        self.saturated += other.saturated;
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.h.len()
    }

    /// The value at quantile `q` (0..=1), in microseconds; 0 when empty.
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.h.is_empty() {
            return 0;
        }
        self.h.value_at_quantile(q)
    }

    /// Count, extremes, mean, standard deviation and the usual percentiles.
    pub fn summary(&self) -> LatencySummary {
        if self.h.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: self.h.len(),
            min_us: self.h.min(),
            max_us: self.h.max(),
            mean_us: self.h.mean(),
            stdev_us: self.h.stdev(),
            p50_us: self.h.value_at_quantile(0.50),
            p90_us: self.h.value_at_quantile(0.90),
            p99_us: self.h.value_at_quantile(0.99),
            p999_us: self.h.value_at_quantile(0.999),
            saturated: self.saturated,
            histogram: self
                .h
                .iter_recorded()
                .map(|v| [v.value_iterated_to(), v.count_at_value()])
                .collect(),
        }
    }

    /// (upper bound in µs, cumulative fraction) points for a CDF plot: one per percentile
    /// step of the histogram's own iteration.
    pub fn cdf(&self) -> Vec<(u64, f64)> {
        if self.h.is_empty() {
            return Vec::new();
        }
        self.h
            .iter_quantiles(1)
            .map(|v| (v.value_iterated_to(), v.quantile_iterated_to()))
            .collect()
    }
}

/// What a latency distribution looks like, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
    pub stdev_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    /// Values above the histogram's range, recorded as its maximum.
    pub saturated: u64,
    /// Every recorded value (to 3 significant digits) and its count, [value_us, count], so
    /// saved runs can be compared distribution against distribution (`tlsscope compare`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub histogram: Vec<[u64; 2]>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_rebuilt_from_its_summary_has_the_same_summary() {
        let mut h = LatencyHistogram::new();
        for us in (1..=50_000).step_by(7) {
            h.record_us(us * 3 % 90_001);
        }
        h.record_us(MAX_LATENCY_US + 5);
        let summary = h.summary();
        assert_eq!(LatencyHistogram::from_summary(&summary).summary(), summary);
    }

    #[test]
    fn merged_rebuilt_histograms_equal_one_fed_every_value() {
        let (mut a, mut b, mut all) = (
            LatencyHistogram::new(),
            LatencyHistogram::new(),
            LatencyHistogram::new(),
        );
        for us in 1..20_000u64 {
            let v = us * us % 77_777 + 1;
            if us % 3 == 0 {
                a.record_us(v)
            } else {
                b.record_us(v)
            }
            all.record_us(v);
        }
        let mut merged = LatencyHistogram::from_summary(&a.summary());
        merged.merge(&LatencyHistogram::from_summary(&b.summary()));
        let (m, w) = (merged.summary(), all.summary());
        assert_eq!(
            (m.count, m.p50_us, m.p99_us, m.p999_us, m.max_us),
            (w.count, w.p50_us, w.p99_us, w.p999_us, w.max_us)
        );
        assert_eq!(m.histogram, w.histogram);
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = LatencyHistogram::new();
        for us in 1..=1000 {
            h.record_us(us);
        }
        let s = h.summary();
        assert_eq!((s.count, s.min_us, s.max_us), (1000, 1, 1000));
        assert_eq!(s.p50_us, 500);
        assert_eq!(s.p90_us, 900);
        assert_eq!(s.p99_us, 990);
        assert_eq!(s.p999_us, 999);
        assert!((s.mean_us - 500.5).abs() < 0.5, "{}", s.mean_us);
        // Population standard deviation of 1..=1000 is 288.67.
        assert!((s.stdev_us - 288.67).abs() < 1.0, "{}", s.stdev_us);
    }

    #[test]
    fn merge_adds_and_empty_is_zero() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        a.record(Duration::from_millis(1));
        b.record(Duration::from_millis(3));
        b.record_us(0);
        a.merge(&b);
        let s = a.summary();
        assert_eq!((s.count, s.min_us), (3, 1));
        assert!(s.max_us >= 2999 && s.max_us <= 3001);
        assert_eq!(LatencyHistogram::new().summary(), LatencySummary::default());
        assert_eq!(LatencyHistogram::new().quantile_us(0.5), 0);
    }

    #[test]
    fn values_beyond_the_range_are_counted() {
        let mut h = LatencyHistogram::new();
        h.record_us(MAX_LATENCY_US * 2);
        assert_eq!(h.summary().saturated, 1);
        assert!(h.summary().max_us >= MAX_LATENCY_US * 999 / 1000);
    }

    #[test]
    fn cdf_ends_at_one() {
        let mut h = LatencyHistogram::new();
        for us in [10, 20, 30, 40] {
            h.record_us(us);
        }
        let cdf = h.cdf();
        assert!(!cdf.is_empty());
        assert!((cdf.last().unwrap().1 - 1.0).abs() < 1e-9);
    }
}
