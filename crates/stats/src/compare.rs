//! Descriptive statistics over samples, bootstrap confidence intervals for a median and for the
//! ratio of two medians, and the Mann-Whitney U test. Pure and deterministic: the bootstrap
//! uses a seeded generator, so the same samples always give the same interval.

use serde::{Deserialize, Serialize};

/// What `descstat`-style tools print for a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Descriptive {
    pub n: usize,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub median: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    /// Sample standard deviation (n - 1 in the denominator); 0 for fewer than 2 values.
    pub stdev: f64,
    pub sum: f64,
}

/// Describes `values` (any order; NaNs are not allowed). Empty gives all zeros.
pub fn describe(values: &[f64]) -> Descriptive {
    if values.is_empty() {
        return Descriptive::default();
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let sum: f64 = sorted.iter().sum();
    let mean = sum / n as f64;
    let stdev = if n > 1 {
        (sorted.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    Descriptive {
        n,
        min: sorted[0],
        max: sorted[n - 1],
        mean,
        median: quantile_sorted(&sorted, 0.5),
        p90: quantile_sorted(&sorted, 0.90),
        p95: quantile_sorted(&sorted, 0.95),
        p99: quantile_sorted(&sorted, 0.99),
        stdev,
        sum,
    }
}

/// The q-quantile of sorted values, interpolated between the two nearest ranks (the
/// "linear" definition that R calls type 7 and numpy uses by default).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let h = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
            sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
        }
    }
}

/// A confidence interval around an estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
    /// Confidence level, e.g. 0.95.
    pub level: f64,
}

/// A small seeded generator (xorshift64*), enough for resampling.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((u128::from(x) * n as u128) >> 64) as usize
    }
}

fn median_of_resample(values: &[f64], rng: &mut Rng, scratch: &mut Vec<f64>) -> f64 {
    scratch.clear();
    scratch.extend((0..values.len()).map(|_| values[rng.below(values.len())]));
    scratch.sort_by(f64::total_cmp);
    quantile_sorted(scratch, 0.5)
}

impl Interval {
    /// An interval that is only its estimate (too few values to resample).
    fn point(estimate: f64, level: f64) -> Interval {
        Interval {
            estimate,
            low: estimate,
            high: estimate,
            level,
        }
    }

    /// The percentile interval of bootstrap `statistics` around `estimate`.
    fn percentile(estimate: f64, mut statistics: Vec<f64>, level: f64) -> Interval {
        statistics.sort_by(f64::total_cmp);
        let tail = (1.0 - level) / 2.0;
        Interval {
            estimate,
            low: quantile_sorted(&statistics, tail),
            high: quantile_sorted(&statistics, 1.0 - tail),
            level,
        }
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    quantile_sorted(&sorted, 0.5)
}

/// Percentile bootstrap interval for the median of `values` (`resamples` resamples).
pub fn median_interval(values: &[f64], level: f64, resamples: usize) -> Interval {
    let estimate = median(values);
    if values.len() < 2 || resamples == 0 {
        return Interval::point(estimate, level);
    }
    let mut rng = Rng::new(0x5eed_0001 ^ values.len() as u64);
    let mut scratch = Vec::with_capacity(values.len());
    let medians = (0..resamples)
        .map(|_| median_of_resample(values, &mut rng, &mut scratch))
        .collect();
    Interval::percentile(estimate, medians, level)
}

/// Percentile bootstrap interval for median(b) / median(a), resampling both independently.
pub fn ratio_of_medians_interval(a: &[f64], b: &[f64], level: f64, resamples: usize) -> Interval {
    let estimate = median(b) / median(a);
    if a.len() < 2 || b.len() < 2 || resamples == 0 {
        return Interval::point(estimate, level);
    }
    let mut rng = Rng::new(0x5eed_0002 ^ ((a.len() as u64) << 32) ^ b.len() as u64);
    let mut scratch = Vec::with_capacity(a.len().max(b.len()));
    let ratios = (0..resamples)
        .map(|_| {
            let ma = median_of_resample(a, &mut rng, &mut scratch);
            let mb = median_of_resample(b, &mut rng, &mut scratch);
            mb / ma
        })
        .collect();
    Interval::percentile(estimate, ratios, level)
}

/// The Mann-Whitney U test of "the two samples come from the same distribution".
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MannWhitney {
    /// U of the first sample (the number of (a, b) pairs with a > b, ties counting half).
    pub u: f64,
    /// z of the normal approximation, with tie and continuity corrections.
    pub z: f64,
    /// Two-sided p-value from the normal approximation.
    pub p_two_sided: f64,
}

/// Mann-Whitney U with the normal approximation (tie-corrected variance, continuity
/// correction), as SciPy's `mannwhitneyu(method="asymptotic")` computes it.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> MannWhitney {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    if a.is_empty() || b.is_empty() {
        return MannWhitney {
            u: 0.0,
            z: 0.0,
            p_two_sided: 1.0,
        };
    }
    // Ranks over both samples, ties given their mean rank.
    let mut all: Vec<(f64, bool)> = a
        .iter()
        .map(|&v| (v, true))
        .chain(b.iter().map(|&v| (v, false)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = all.len();
    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        let t = (j - i + 1) as f64;
        tie_term += t * t * t - t;
        rank_sum_a += all[i..=j].iter().filter(|x| x.1).count() as f64 * rank;
        i = j + 1;
    }
    let u = rank_sum_a - n1 * (n1 + 1.0) / 2.0;
    let mean = n1 * n2 / 2.0;
    let total = n1 + n2;
    let variance = n1 * n2 / 12.0 * ((total + 1.0) - tie_term / (total * (total - 1.0)));
    if variance <= 0.0 {
        return MannWhitney {
            u,
            z: 0.0,
            p_two_sided: 1.0,
        };
    }
    let diff = u - mean;
    let corrected = (diff.abs() - 0.5).max(0.0).copysign(diff);
    let z = corrected / variance.sqrt();
    MannWhitney {
        u,
        z,
        p_two_sided: (2.0 * normal_sf(z.abs())).min(1.0),
    }
}

/// What a comparison of two samples concludes, for a metric where lower is better (latency,
/// CPU per operation) or higher is better (rates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The second sample is better, significantly.
    Better,
    /// The second sample is worse, significantly.
    Worse,
    /// Not significant at the chosen level.
    NoSignificantDifference,
    /// Too few values to test: no outcome of the rank test could be significant at the
    /// chosen level with this many values (see [`can_be_significant`]).
    Untestable,
}

/// Two samples compared: the ratio of medians (second / first) with its bootstrap interval,
/// the rank test, and the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub ratio: Interval,
    pub mann_whitney: MannWhitney,
    pub verdict: Verdict,
    /// Values on each side (first, second); absent in documents written before them.
    #[serde(default)]
    pub n: (usize, usize),
}

/// Whether a two-sided rank test of `n1` against `n2` values can reach p below `alpha` at all.
/// The most extreme arrangement (every value of one sample below every value of the other) is
/// 2 of the C(n1 + n2, n1) equally likely ones under no difference, so with fewer values than
/// that needs no outcome is significant: 2 against 2 values can do no better than p = 1/3,
/// and 3 against 3 than p = 0.1. A single value on a side is never tested (it has no spread).
pub fn can_be_significant(n1: usize, n2: usize, alpha: f64) -> bool {
    if n1 < 2 || n2 < 2 {
        return false;
    }
    // C(n1 + n2, n1), computed in floating point (it only needs to pass 2 / alpha).
    let (k, n) = (n1.min(n2), n1 + n2);
    let arrangements = (0..k).fold(1.0, |c, i| c * (n - i) as f64 / (i + 1) as f64);
    2.0 / arrangements < alpha
}

/// Compares `b` against `a`. Significant means both: the rank test's p below `1 - level`, and
/// the ratio's interval excluding 1 (so the verdict and the interval printed beside it never
/// disagree).
pub fn compare(
    a: &[f64],
    b: &[f64],
    level: f64,
    resamples: usize,
    lower_is_better: bool,
) -> Comparison {
    let ratio = ratio_of_medians_interval(a, b, level, resamples);
    let mann_whitney = mann_whitney(a, b);
    let verdict = if !can_be_significant(a.len(), b.len(), 1.0 - level) {
        Verdict::Untestable
    } else if mann_whitney.p_two_sided < 1.0 - level && (ratio.low > 1.0 || ratio.high < 1.0) {
        let b_higher = ratio.low > 1.0;
        if b_higher == lower_is_better {
            Verdict::Worse
        } else {
            Verdict::Better
        }
    } else {
        Verdict::NoSignificantDifference
    };
    Comparison {
        ratio,
        mann_whitney,
        verdict,
        n: (a.len(), b.len()),
    }
}

/// Values from a histogram's (value, count) pairs, each value repeated by its count. Above
/// `cap` values in all, counts are scaled down to about `cap` (keeping at least one of every
/// bucket), so a bootstrap over millions of recorded latencies stays cheap.
pub fn expand_histogram(pairs: &[(f64, u64)], cap: usize) -> Vec<f64> {
    // In 128 bits: the counts come from files, and any two near u64::MAX overflow 64.
    let total: u128 = pairs.iter().map(|p| u128::from(p.1)).sum();
    let scale = if total > cap as u128 && cap > 0 {
        cap as f64 / total as f64
    } else {
        1.0
    };
    let mut out = Vec::new();
    for &(value, count) in pairs {
        if count == 0 {
            continue;
        }
        let n = ((count as f64 * scale).round() as usize).max(1);
        out.extend(std::iter::repeat_n(value, n));
    }
    out
}

/// P(Z > z) for a standard normal Z.
fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// The complementary error function (Numerical Recipes' erfcc: fractional error < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn describes_like_descstat() {
        let d = describe(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!((d.n, d.min, d.max, d.sum), (4, 1.0, 4.0, 10.0));
        assert!(close(d.mean, 2.5, 1e-12) && close(d.median, 2.5, 1e-12));
        // Sample standard deviation of 1..4: sqrt(5/3).
        assert!(close(d.stdev, (5.0f64 / 3.0).sqrt(), 1e-12));
        // Linear quantiles of 1..=10: p90 = 9.1, p95 = 9.55, p99 = 9.91 (numpy's defaults).
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        let d = describe(&ten);
        assert!(close(d.p90, 9.1, 1e-12), "{}", d.p90);
        assert!(close(d.p95, 9.55, 1e-12), "{}", d.p95);
        assert!(close(d.p99, 9.91, 1e-12), "{}", d.p99);
        assert_eq!(describe(&[]), Descriptive::default());
        assert_eq!(describe(&[7.0]).stdev, 0.0);
    }

    #[test]
    fn mann_whitney_matches_the_normal_approximation_by_hand() {
        // Fully separated samples of 5: U = 0, mean 12.5, sd sqrt(25 * 11 / 12) = 4.7871;
        // z = (0 - 12.5 + 0.5) / 4.7871 = -2.5067; p = 2 * Phi(-2.5067) = 0.01219.
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let b = [6.0, 7.0, 8.0, 9.0, 10.0];
        let r = mann_whitney(&a, &b);
        assert_eq!(r.u, 0.0);
        assert!(close(r.z, -2.5067, 1e-3), "{}", r.z);
        assert!(close(r.p_two_sided, 0.01219, 2e-4), "{}", r.p_two_sided);
        // Swapped: U = 25, same p.
        let s = mann_whitney(&b, &a);
        assert_eq!(s.u, 25.0);
        assert!(close(s.p_two_sided, r.p_two_sided, 1e-12));
        // Identical samples: no evidence of a difference.
        let same = mann_whitney(&a, &a);
        assert!(same.p_two_sided > 0.9, "{}", same.p_two_sided);
        // With ties: [1,2,2,3] vs [2,3,3,4] gives U = 3 (pairs a > b: 0 + 0.5*...): by hand,
        // ranks 1, 3, 3, 6 for a (sum 13) -> U = 13 - 10 = 3.
        let t = mann_whitney(&[1.0, 2.0, 2.0, 3.0], &[2.0, 3.0, 3.0, 4.0]);
        assert!(close(t.u, 3.0, 1e-12), "{}", t.u);
    }

    #[test]
    fn erfc_against_known_values() {
        assert!(close(erfc(0.0), 1.0, 1e-7));
        assert!(close(erfc(1.0), 0.157_299_207, 1e-7));
        assert!(close(erfc(-1.0), 1.842_700_793, 1e-7));
        assert!(close(normal_sf(1.959_964), 0.025, 1e-6));
    }

    #[test]
    fn bootstrap_intervals_hold_the_estimate_and_narrow_with_more_data() {
        let small: Vec<f64> = (0..20).map(|i| 100.0 + f64::from(i % 7) * 3.0).collect();
        let large: Vec<f64> = (0..400).map(|i| 100.0 + f64::from(i % 7) * 3.0).collect();
        let s = median_interval(&small, 0.95, 2000);
        let l = median_interval(&large, 0.95, 2000);
        assert!(s.low <= s.estimate && s.estimate <= s.high, "{s:?}");
        assert!(l.high - l.low <= s.high - s.low, "{l:?} vs {s:?}");
        // Deterministic: the same input gives the same interval.
        assert_eq!(s, median_interval(&small, 0.95, 2000));
        // Ratio of medians: b is a scaled by 1.2 exactly.
        let b: Vec<f64> = small.iter().map(|v| v * 1.2).collect();
        let r = ratio_of_medians_interval(&small, &b, 0.95, 2000);
        assert!(close(r.estimate, 1.2, 1e-12));
        assert!(r.low <= 1.2 && 1.2 <= r.high, "{r:?}");
        // Identical constant samples: the interval collapses on 1.
        let c = vec![5.0; 30];
        let one = ratio_of_medians_interval(&c, &c, 0.95, 500);
        assert_eq!((one.low, one.estimate, one.high), (1.0, 1.0, 1.0));
    }

    #[test]
    fn verdicts_follow_the_test_and_the_interval() {
        let a: Vec<f64> = (0..200).map(|i| 100.0 + f64::from(i % 20)).collect();
        let slower: Vec<f64> = a.iter().map(|v| v * 1.3).collect();
        let c = compare(&a, &slower, 0.95, 500, true);
        assert_eq!(c.verdict, Verdict::Worse);
        assert!(c.ratio.low > 1.2 && c.ratio.high < 1.4, "{:?}", c.ratio);
        // The same change in a rate is an improvement.
        assert_eq!(
            compare(&a, &slower, 0.95, 500, false).verdict,
            Verdict::Better
        );
        // Interleaved copies of one distribution: no difference.
        let same: Vec<f64> = (0..200).map(|i| 100.0 + f64::from((i + 7) % 20)).collect();
        assert_eq!(
            compare(&a, &same, 0.95, 500, true).verdict,
            Verdict::NoSignificantDifference
        );
        assert_eq!(
            compare(&a, &[1.0], 0.95, 500, true).verdict,
            Verdict::Untestable
        );
    }

    #[test]
    fn samples_too_small_for_the_rank_test_get_no_verdict() {
        // 2 rounds each, far apart (a ratio of 172): still no test can tell at 95%.
        let c = compare(&[1.0, 1.1], &[172.0, 180.0], 0.95, 500, true);
        assert_eq!(c.verdict, Verdict::Untestable);
        assert_eq!(c.n, (2, 2));
        assert!(!can_be_significant(3, 3, 0.05));
        assert!(can_be_significant(4, 4, 0.05));
        assert!(can_be_significant(2, 20, 0.05));
        assert!(!can_be_significant(1, 1000, 0.05));
        let c = compare(
            &[1.0, 1.1, 1.2, 1.05],
            &[172.0, 180.0, 175.0, 190.0],
            0.95,
            500,
            true,
        );
        assert_eq!(c.verdict, Verdict::Worse);
    }

    #[test]
    fn histograms_expand_by_count_and_scale_down_past_the_cap() {
        let pairs = [(10.0, 3), (20.0, 1), (30.0, 0)];
        assert_eq!(expand_histogram(&pairs, 100), vec![10.0, 10.0, 10.0, 20.0]);
        let big = [(1.0, 1_000_000), (2.0, 1_000_000), (3.0, 10)];
        let v = expand_histogram(&big, 1000);
        assert_eq!(v.iter().filter(|&&x| x == 1.0).count(), 500);
        assert_eq!(
            v.iter().filter(|&&x| x == 3.0).count(),
            1,
            "rare buckets are kept"
        );
        assert!((describe(&v).median - 1.5).abs() < 0.51);
    }

    /// Counts from a saved run are whatever the file says: their sum may not fit 64 bits
    /// (seen while writing the saved_runs fuzz target: the sum used to overflow).
    #[test]
    fn counts_whose_sum_overflows_64_bits_still_scale_to_the_cap() {
        let pairs = [(1.0, u64::MAX), (2.0, u64::MAX), (3.0, 1)];
        let v = expand_histogram(&pairs, 1000);
        assert_eq!(v.iter().filter(|&&x| x == 1.0).count(), 500);
        assert_eq!(v.iter().filter(|&&x| x == 2.0).count(), 500);
        assert_eq!(v.iter().filter(|&&x| x == 3.0).count(), 1);
    }
}
