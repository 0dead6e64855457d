//! Summaries of bucketed histograms (the kernel's log2 or linear latency buckets), where only
//! each bucket's range and count are known: quantiles are estimated by interpolating inside the
//! bucket that holds them.

use serde::{Deserialize, Serialize};

/// One bucket: `[low_us, high_us)`, `high_us` `None` for an open top bucket.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub low_us: u64,
    pub high_us: Option<u64>,
    pub count: u64,
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
    let count: u64 = buckets.iter().map(|b| b.count).sum();
    if count == 0 {
        return BucketSummary::default();
    }
    let mut sorted: Vec<Bucket> = buckets.iter().copied().filter(|b| b.count > 0).collect();
    sorted.sort_by_key(|b| b.low_us);
    let mean_us = total_ns as f64 / 1000.0 / count as f64;
    BucketSummary {
        count,
        total_ns,
        mean_us,
        p50_us: quantile(&sorted, count, 0.50),
        p90_us: quantile(&sorted, count, 0.90),
        p99_us: quantile(&sorted, count, 0.99),
    }
}

/// The q-quantile, interpolated linearly inside its bucket. In an open top bucket the estimate
/// is the bucket's low edge (nothing better is known).
fn quantile(sorted: &[Bucket], count: u64, q: f64) -> f64 {
    let rank = q * count as f64;
    let mut below = 0u64;
    for b in sorted {
        if (below + b.count) as f64 >= rank {
            let Some(high) = b.high_us else {
                return b.low_us as f64;
            };
            let inside = (rank - below as f64) / b.count as f64;
            return b.low_us as f64 + inside * (high - b.low_us) as f64;
        }
        below += b.count;
    }
    sorted.last().map_or(0.0, |b| b.low_us as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(low_us: u64, high_us: Option<u64>, count: u64) -> Bucket {
        Bucket {
            low_us,
            high_us,
            count,
        }
    }

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        // 100 calls in [0,200) and 100 in [200,400): the median is the edge, 200.
        let s = summarize(
            &[b(200, Some(400), 100), b(0, Some(200), 100)],
            200 * 150_000,
        );
        assert_eq!(s.count, 200);
        assert!((s.p50_us - 200.0).abs() < 1e-9, "{}", s.p50_us);
        // p90: rank 180 is 80 of 100 into [200,400) -> 360.
        assert!((s.p90_us - 360.0).abs() < 1e-9, "{}", s.p90_us);
        assert!((s.mean_us - 150.0).abs() < 1e-9);
    }

    #[test]
    fn open_top_bucket_gives_its_low_edge() {
        let s = summarize(&[b(0, Some(1), 1), b(1000, None, 99)], 0);
        assert_eq!(s.p50_us, 1000.0);
    }

    #[test]
    fn empty_is_zero() {
        assert_eq!(summarize(&[], 0), BucketSummary::default());
        assert_eq!(summarize(&[b(0, Some(1), 0)], 0).count, 0);
    }
}
