//! Summaries of bucketed histograms (the kernel's log2 or linear latency buckets), where each
//! bucket's range, count and the sum of its latencies are known: quantiles come from the one
//! routine on histograms ([`crate::histogram::quantile`]), which keeps them inside what each
//! bucket's count and sum allow.

use serde::{Deserialize, Serialize};

use crate::histogram::{self, Cell};

/// One bucket: `[low_us, high_us)`, `high_us` `None` for an open top bucket.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub low_us: u64,
    pub high_us: Option<u64>,
    pub count: u64,
    /// The sum of the bucket's latencies, in nanoseconds; absent in runs saved before it was
    /// kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ns: Option<u64>,
}

impl Bucket {
    /// The bucket as a histogram cell, in microseconds.
    pub fn cell(&self) -> Cell {
        Cell {
            low: self.low_us as f64,
            high: self.high_us.map(|h| h as f64),
            count: self.count,
            sum: self.total_ns.map(|ns| ns as f64 / 1000.0),
        }
    }
}

/// Count, total, mean and estimated quantiles of a bucketed histogram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BucketSummary {
    pub count: u64,
    pub total_ns: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
}

/// Summarizes `buckets` (in any order; empty buckets allowed) with the exact total time.
pub fn summarize(buckets: &[Bucket], total_ns: u64) -> BucketSummary {
    let cells: Vec<Cell> = buckets.iter().map(Bucket::cell).collect();
    let (sorted, count) = histogram::sorted(&cells);
    if count == 0 {
        return BucketSummary::default();
    }
    BucketSummary {
        count,
        total_ns,
        mean_us: total_ns as f64 / 1000.0 / count as f64,
        p50_us: histogram::quantile(&sorted, count, 0.50),
        p90_us: histogram::quantile(&sorted, count, 0.90),
        p99_us: histogram::quantile(&sorted, count, 0.99),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(low_us: u64, high_us: Option<u64>, count: u64) -> Bucket {
        Bucket {
            low_us,
            high_us,
            count,
            total_ns: None,
        }
    }

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        // 100 calls in [0,200) and 100 in [200,400), sums unknown: the median (rank 100) is
        // the last of the lower bucket, just under the edge.
        let s = summarize(
            &[b(200, Some(400), 100), b(0, Some(200), 100)],
            200 * 150_000,
        );
        assert_eq!(s.count, 200);
        assert!((s.p50_us - 199.0).abs() < 1e-9, "{}", s.p50_us);
        // p90: rank 180 is the 80th of 100 in [200,400), at the middle of its share.
        assert!((s.p90_us - 359.0).abs() < 1e-9, "{}", s.p90_us);
        assert!((s.mean_us - 150.0).abs() < 1e-9);
    }

    #[test]
    fn open_top_bucket_gives_its_low_edge() {
        let s = summarize(&[b(0, Some(1), 1), b(1000, None, 99)], 0);
        assert_eq!(s.p50_us, 1000.0);
    }

    /// Issue 30, item 4: with the kernel's sums per bucket, a percentile lies within what was
    /// recorded (one 654 us call is its own p50 and p99).
    #[test]
    fn bucket_sums_keep_percentiles_within_the_recorded_values() {
        let one = Bucket {
            total_ns: Some(654_000),
            ..b(512, Some(1024), 1)
        };
        let s = summarize(&[one], 654_000);
        assert_eq!((s.p50_us, s.p99_us), (654.0, 654.0));
    }

    #[test]
    fn empty_is_zero() {
        assert_eq!(summarize(&[], 0), BucketSummary::default());
        assert_eq!(summarize(&[b(0, Some(1), 0)], 0).count, 0);
    }
}
