//! Descriptive statistics over samples, bootstrap confidence intervals for a median and for the
//! ratio of two medians, and the Mann-Whitney U test. Pure and deterministic: the bootstrap
//! uses a seeded generator, so the same samples always give the same interval.

use serde::{Deserialize, Serialize};

use crate::histogram::{self, Cell};

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
    let cells = |v: &[f64]| -> Vec<Cell> { v.iter().map(|&x| Cell::exact(x, 1)).collect() };
    mann_whitney_cells(&cells(a), &cells(b))
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

/// What the values compared are, and so which test decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// One value per round on each side, rounds paired (both variants ran in each round, one
    /// right after the other, in an order that changes from round to round): the ratio is the
    /// Hodges-Lehmann estimate of the rounds' log ratios, its interval and p Wilcoxon's
    /// signed-rank test's, so a round in which the machine changed speed between the two
    /// variants counts as one rank, not as its size.
    PairedRounds,
    /// Every operation a sample: the ratio of medians with a bootstrap interval, and the rank
    /// test. Operations of one run are not independent replicates, so this is what is left
    /// when there are no rounds.
    #[default]
    Samples,
    /// Two histograms (saved runs): the ratio of medians with an order-statistic interval, and
    /// the rank test over every recorded value.
    Histograms,
}

/// Two samples compared: the ratio (second / first) with its interval, the test, and the
/// verdict.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub ratio: Interval,
    /// The rank test over the values compared (rounds, samples or histogram values).
    pub mann_whitney: MannWhitney,
    pub verdict: Verdict,
    /// Values on each side (first, second); absent in documents written before them.
    #[serde(default)]
    pub n: (usize, usize),
    /// What the values are, and so which test the verdict follows.
    #[serde(default)]
    pub method: Method,
    /// The two-sided p-value of the test the verdict follows (the signed-rank test over paired
    /// rounds, or the rank-sum test).
    #[serde(default)]
    pub p_value: f64,
    /// Changes smaller than this (a fraction: 0.01 is 1%) are never called, however significant
    /// (criterion's noise threshold).
    #[serde(default)]
    pub noise_threshold: f64,
    /// This comparison's own noise floor: the half-width of the ratio's interval, as a fraction
    /// of the ratio. A smaller change could not have been told from noise in this run. None
    /// where the interval has no finite width.
    #[serde(default)]
    pub noise_floor: Option<f64>,
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
    // C(n1 + n2, n1), computed in floating point until it passes 2 / alpha (histograms may
    // hold more values than fit a usize sum, and a few factors already pass).
    let (k, n) = (n1.min(n2), n1.saturating_add(n2));
    let mut arrangements = 1.0;
    for i in 0..k {
        arrangements *= (n - i) as f64 / (i + 1) as f64;
        if 2.0 / arrangements < alpha {
            return true;
        }
    }
    false
}

/// The verdict of a test: significant when its p is below `1 - level` and the whole interval
/// of the ratio lies beyond the noise threshold (criterion's rule: a change is called only when
/// every ratio the interval admits is larger than the threshold), in the metric's direction.
fn verdict_of(
    ratio: &Interval,
    p: f64,
    level: f64,
    noise_threshold: f64,
    lower_is_better: bool,
) -> Verdict {
    let up = 1.0 + noise_threshold.max(0.0);
    let higher = ratio.low > up;
    let lower = ratio.high < 1.0 / up;
    if p < 1.0 - level && (higher || lower) {
        if higher == lower_is_better {
            Verdict::Worse
        } else {
            Verdict::Better
        }
    } else {
        Verdict::NoSignificantDifference
    }
}

/// The half-width of `ratio`'s interval as a fraction of the ratio (geometric, as ratios are).
fn noise_floor(ratio: &Interval) -> Option<f64> {
    let floor = (ratio.high / ratio.low).sqrt() - 1.0;
    (ratio.low > 0.0 && floor.is_finite()).then_some(floor)
}

/// Compares `b` against `a`, every value a sample (see [`Method::Samples`]). Significant means
/// both: the rank test's p below `1 - level`, and the ratio's interval beyond the noise
/// threshold (so the verdict and the interval printed beside it never disagree).
pub fn compare(
    a: &[f64],
    b: &[f64],
    level: f64,
    resamples: usize,
    noise_threshold: f64,
    lower_is_better: bool,
) -> Comparison {
    let ratio = ratio_of_medians_interval(a, b, level, resamples);
    let test = RankTest {
        ratio,
        mann_whitney: mann_whitney(a, b),
        n: (a.len(), b.len()),
        method: Method::Samples,
    };
    test.conclude(level, noise_threshold, lower_is_better)
}

/// Fewest paired rounds a verdict can be drawn from at 95%: with five, even five of one sign
/// leave p = 2/32.
pub const MIN_ROUNDS: usize = 6;

/// Compares `b` against `a` round by round (see [`Method::PairedRounds`]): `a[i]` and `b[i]`
/// are the two variants' values in round `i`. Rounds where either value is not positive are
/// left out (a ratio needs both).
pub fn compare_rounds(
    a: &[f64],
    b: &[f64],
    level: f64,
    noise_threshold: f64,
    lower_is_better: bool,
) -> Comparison {
    let logs: Vec<f64> = a
        .iter()
        .zip(b)
        .filter(|(x, y)| **x > 0.0 && **y > 0.0 && x.is_finite() && y.is_finite())
        .map(|(x, y)| (y / x).ln())
        .collect();
    let n = logs.len();
    let mann_whitney = mann_whitney(a, b);
    let (ratio, p) = match crate::signed_rank::hodges_lehmann(&logs, level) {
        Some((estimate, low, high)) => (
            Interval {
                estimate: estimate.exp(),
                low: low.exp(),
                high: high.exp(),
                level,
            },
            crate::signed_rank::p_two_sided(&logs),
        ),
        None => (Interval::point(median(b) / median(a), level), 1.0),
    };
    let verdict = if !crate::signed_rank::can_be_significant(n, 1.0 - level) {
        Verdict::Untestable
    } else {
        verdict_of(&ratio, p, level, noise_threshold, lower_is_better)
    };
    Comparison {
        ratio,
        mann_whitney,
        verdict,
        n: (n, n),
        method: Method::PairedRounds,
        p_value: p,
        noise_threshold,
        noise_floor: noise_floor(&ratio),
    }
}

/// Compares histogram `b` against histogram `a` (see [`Method::Histograms`]); each is a list
/// of cells (see [`crate::histogram`]), exact values for HDR cells.
pub fn compare_histograms(
    a: &[Cell],
    b: &[Cell],
    level: f64,
    noise_threshold: f64,
    lower_is_better: bool,
) -> Comparison {
    let (sa, na) = histogram::sorted(a);
    let (sb, nb) = histogram::sorted(b);
    let ia = histogram_median_interval(&sa, na, level);
    let ib = histogram_median_interval(&sb, nb, level);
    let estimate = ib.estimate / ia.estimate;
    // Each median's interval as a standard error on the log scale, combined (the samples are
    // independent): the delta method for a ratio.
    let se = |i: &Interval| {
        let z = normal_quantile(0.5 + level / 2.0);
        if i.low > 0.0 && z > 0.0 {
            (i.high / i.low).ln() / (2.0 * z)
        } else {
            f64::INFINITY
        }
    };
    let half = normal_quantile(0.5 + level / 2.0) * (se(&ia).powi(2) + se(&ib).powi(2)).sqrt();
    let ratio = Interval {
        estimate,
        low: estimate / half.exp(),
        high: estimate * half.exp(),
        level,
    };
    let test = RankTest {
        ratio,
        mann_whitney: mann_whitney_cells(&sa, &sb),
        n: (
            usize::try_from(na).unwrap_or(usize::MAX),
            usize::try_from(nb).unwrap_or(usize::MAX),
        ),
        method: Method::Histograms,
    };
    test.conclude(level, noise_threshold, lower_is_better)
}

/// A ratio's interval and the rank test beside it, before the verdict.
struct RankTest {
    ratio: Interval,
    mann_whitney: MannWhitney,
    n: (usize, usize),
    method: Method,
}

impl RankTest {
    /// The comparison, its verdict following the rank test (none where no outcome of the test
    /// could be significant with so few values).
    fn conclude(self, level: f64, noise_threshold: f64, lower_is_better: bool) -> Comparison {
        let p = self.mann_whitney.p_two_sided;
        let verdict = if !can_be_significant(self.n.0, self.n.1, 1.0 - level) {
            Verdict::Untestable
        } else {
            verdict_of(&self.ratio, p, level, noise_threshold, lower_is_better)
        };
        Comparison {
            ratio: self.ratio,
            mann_whitney: self.mann_whitney,
            verdict,
            n: self.n,
            method: self.method,
            p_value: p,
            noise_threshold,
            noise_floor: noise_floor(&self.ratio),
        }
    }
}

/// Describes a histogram's values exactly as its cells allow: count, extremes, mean, standard
/// deviation and nearest-rank percentiles (those bench prints from the same histogram).
pub fn describe_histogram(cells: &[Cell]) -> Descriptive {
    let (sorted, n) = histogram::sorted(cells);
    if n == 0 {
        return Descriptive::default();
    }
    let (min, max) = histogram::extremes(&sorted);
    let mean = histogram::mean(&sorted, n);
    Descriptive {
        n: usize::try_from(n).unwrap_or(usize::MAX),
        min,
        max,
        mean,
        median: histogram::quantile(&sorted, n, 0.5),
        p90: histogram::quantile(&sorted, n, 0.90),
        p95: histogram::quantile(&sorted, n, 0.95),
        p99: histogram::quantile(&sorted, n, 0.99),
        stdev: histogram::stdev(&sorted, n),
        sum: mean * n as f64,
    }
}

/// The interval of a histogram's median from order statistics: the values of ranks
/// n/2 -+ z sqrt(n)/2 (the binomial interval for the median, in its normal form), so no value
/// is resampled and millions of recorded latencies cost nothing.
pub fn histogram_median_interval(sorted: &[Cell], n: u64, level: f64) -> Interval {
    let estimate = histogram::quantile(sorted, n, 0.5);
    if n < 2 {
        return Interval::point(estimate, level);
    }
    let z = normal_quantile(0.5 + level / 2.0);
    let half = z * (n as f64).sqrt() / 2.0;
    let centre = n as f64 / 2.0;
    let low_rank = (centre - half).floor().max(1.0) as u64;
    let high_rank = ((centre + half).ceil() + 1.0).min(n as f64) as u64;
    Interval {
        estimate,
        low: histogram::value_of_rank(sorted, low_rank).min(estimate),
        high: histogram::value_of_rank(sorted, high_rank).max(estimate),
        level,
    }
}

/// Mann-Whitney U over two histograms (every recorded value, ties being the values of one
/// cell), with the normal approximation as [`mann_whitney`] computes it.
pub fn mann_whitney_cells(a: &[Cell], b: &[Cell]) -> MannWhitney {
    // Every distinct value with its count on each side, lowest first.
    let mut values: Vec<(f64, f64, f64)> = a
        .iter()
        .map(|c| (c.low, c.count as f64, 0.0))
        .chain(b.iter().map(|c| (c.low, 0.0, c.count as f64)))
        .filter(|v| v.1 + v.2 > 0.0)
        .collect();
    values.sort_by(|x, y| x.0.total_cmp(&y.0));
    let (n1, n2): (f64, f64) = values
        .iter()
        .fold((0.0, 0.0), |(p, q), v| (p + v.1, q + v.2));
    if n1 == 0.0 || n2 == 0.0 {
        return MannWhitney {
            u: 0.0,
            z: 0.0,
            p_two_sided: 1.0,
        };
    }
    let (mut below, mut rank_sum_a, mut tie_term) = (0.0, 0.0, 0.0);
    let mut i = 0;
    while i < values.len() {
        let (mut ca, mut cb) = (0.0, 0.0);
        let mut j = i;
        while j < values.len() && values[j].0 == values[i].0 {
            ca += values[j].1;
            cb += values[j].2;
            j += 1;
        }
        let t = ca + cb;
        rank_sum_a += ca * (below + (t + 1.0) / 2.0);
        tie_term += t * t * t - t;
        below += t;
        i = j;
    }
    u_statistic(rank_sum_a, n1, n2, tie_term)
}

/// U, z and p from the first sample's rank sum (the normal approximation with tie and
/// continuity corrections).
fn u_statistic(rank_sum_a: f64, n1: f64, n2: f64, tie_term: f64) -> MannWhitney {
    let u = rank_sum_a - n1 * (n1 + 1.0) / 2.0;
    let mean = n1 * n2 / 2.0;
    let total = n1 + n2;
    let variance = n1 * n2 / 12.0 * ((total + 1.0) - tie_term / (total * (total - 1.0)));
    if variance <= 0.0 || !variance.is_finite() {
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

/// The quantile of the standard normal distribution at `p` (0 < p < 1), by bisection.
pub fn normal_quantile(p: f64) -> f64 {
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    let (mut lo, mut hi) = (-40.0f64, 40.0f64);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if 1.0 - normal_sf(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// P(Z > z) for a standard normal Z.
fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// The complementary error function (Numerical Recipes' erfcc: fractional error < 1.2e-7).
pub(crate) fn erfc(x: f64) -> f64 {
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
        let c = compare(&a, &slower, 0.95, 500, 0.01, true);
        assert_eq!(c.verdict, Verdict::Worse);
        assert!(c.ratio.low > 1.2 && c.ratio.high < 1.4, "{:?}", c.ratio);
        // The same change in a rate is an improvement.
        assert_eq!(
            compare(&a, &slower, 0.95, 500, 0.01, false).verdict,
            Verdict::Better
        );
        // Interleaved copies of one distribution: no difference.
        let same: Vec<f64> = (0..200).map(|i| 100.0 + f64::from((i + 7) % 20)).collect();
        assert_eq!(
            compare(&a, &same, 0.95, 500, 0.01, true).verdict,
            Verdict::NoSignificantDifference
        );
        assert_eq!(
            compare(&a, &[1.0], 0.95, 500, 0.01, true).verdict,
            Verdict::Untestable
        );
    }

    #[test]
    fn samples_too_small_for_the_rank_test_get_no_verdict() {
        // 2 rounds each, far apart (a ratio of 172): still no test can tell at 95%.
        let c = compare(&[1.0, 1.1], &[172.0, 180.0], 0.95, 500, 0.01, true);
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
            0.01,
            true,
        );
        assert_eq!(c.verdict, Verdict::Worse);
    }

    #[test]
    fn normal_quantiles_match_the_tables() {
        assert!(close(normal_quantile(0.975), 1.959_964, 1e-5));
        assert!(close(normal_quantile(0.5), 0.0, 1e-6));
    }

    /// Issue 30, item 1: identical variants measured round by round differ from round to round
    /// (the machine drifts), and a consistent tiny difference is below the noise threshold:
    /// neither is a verdict. A consistent 5% is.
    #[test]
    fn rounds_are_the_replicates_and_small_changes_stay_below_the_threshold() {
        // Rounds drifting by up to 20% between them, each pair within 2% of each other.
        let a: Vec<f64> = (0..10)
            .map(|i| 1000.0 * (1.0 + 0.02 * f64::from(i)))
            .collect();
        let jitter = [1.01, 0.99, 1.015, 0.985, 1.0, 1.02, 0.98, 1.005, 0.995, 1.0];
        let same: Vec<f64> = a.iter().zip(jitter).map(|(x, j)| x * j).collect();
        let c = compare_rounds(&a, &same, 0.95, 0.01, true);
        assert_eq!(c.method, Method::PairedRounds);
        assert_eq!(c.verdict, Verdict::NoSignificantDifference, "{c:?}");
        assert!(c.ratio.low < 1.0 && c.ratio.high > 1.0, "{c:?}");
        assert!(c.noise_floor.is_some_and(|f| f > 0.0 && f < 0.02), "{c:?}");
        // 0.5% slower in every round: significant, but within the 1% threshold.
        let tiny: Vec<f64> = a.iter().map(|x| x * 1.005).collect();
        let c = compare_rounds(&a, &tiny, 0.95, 0.01, true);
        assert!(c.p_value < 0.05);
        assert_eq!(c.verdict, Verdict::NoSignificantDifference, "{c:?}");
        // 5% slower, with the same jitter: slower.
        let slower: Vec<f64> = same.iter().map(|x| x * 1.05).collect();
        let c = compare_rounds(&a, &slower, 0.95, 0.01, true);
        assert_eq!(c.verdict, Verdict::Worse, "{c:?}");
        assert!(c.ratio.low > 1.01 && c.ratio.high < 1.08, "{c:?}");
        // Five rounds: no verdict, however clear (the signed-rank test cannot reach 5%).
        assert_eq!(
            compare_rounds(&a[..5], &slower[..5], 0.95, 0.01, true).verdict,
            Verdict::Untestable
        );
        // A round in which the machine changed speed between the variants (one far pair)
        // does not make identical variants differ.
        let mut flipped = same.clone();
        flipped[3] *= 1.6;
        let c = compare_rounds(&a, &flipped, 0.95, 0.01, true);
        assert_eq!(c.verdict, Verdict::NoSignificantDifference, "{c:?}");
    }

    #[test]
    fn histograms_compare_without_resampling() {
        let cells = |scale: f64| -> Vec<Cell> {
            (100..200)
                .map(|v| Cell::exact(f64::from(v) * scale, 1000))
                .collect()
        };
        let c = compare_histograms(&cells(1.0), &cells(1.3), 0.95, 0.01, true);
        assert_eq!(c.verdict, Verdict::Worse, "{c:?}");
        assert_eq!(c.n, (100_000, 100_000));
        assert!(c.ratio.low <= 1.3 && 1.3 <= c.ratio.high * 1.0001, "{c:?}");
        let c = compare_histograms(&cells(1.0), &cells(1.0), 0.95, 0.01, true);
        assert_eq!(c.verdict, Verdict::NoSignificantDifference, "{c:?}");
        // The rank test over cells equals the one over the values they stand for.
        let small =
            |v: &[(f64, u64)]| -> Vec<Cell> { v.iter().map(|&(x, n)| Cell::exact(x, n)).collect() };
        let by_cells = mann_whitney_cells(
            &small(&[(1.0, 1), (2.0, 2), (3.0, 1)]),
            &small(&[(2.0, 1), (3.0, 2), (4.0, 1)]),
        );
        let by_values = mann_whitney(&[1.0, 2.0, 2.0, 3.0], &[2.0, 3.0, 3.0, 4.0]);
        assert_eq!(by_cells, by_values);
    }

    #[test]
    fn histograms_are_described_exactly() {
        let cells = [Cell::exact(100.0, 98), Cell::exact(1000.0, 2)];
        let d = describe_histogram(&cells);
        assert_eq!((d.n, d.min, d.max), (100, 100.0, 1000.0));
        assert_eq!((d.median, d.p95, d.p99), (100.0, 100.0, 1000.0));
        assert!(close(d.mean, 118.0, 1e-9));
    }
}
