//! Wilcoxon's signed-rank test on paired differences, with the Hodges-Lehmann estimate of their
//! centre and its distribution-free interval: the statistics of compare's paired rounds. They
//! use ranks, so a round in which the machine changed speed between the two variants (a pair far
//! off in either direction) moves the estimate by at most one place, where it would drag a mean.

use crate::compare::normal_quantile;

/// How many of the 2^n equally likely sign patterns of n ranked differences give each
/// signed-rank sum W+ (0 ..= n(n+1)/2), as fractions of 2^n: the exact null distribution.
fn null_distribution(n: usize) -> Vec<f64> {
    let top = n * (n + 1) / 2;
    let mut p = vec![0.0; top + 1];
    p[0] = 1.0;
    for rank in 1..=n {
        // Each rank joins the positive sum or not, with probability 1/2 each.
        for w in (0..=top).rev() {
            let with = if w >= rank { p[w - rank] } else { 0.0 };
            p[w] = (p[w] + with) / 2.0;
        }
    }
    p
}

/// Above this many pairs the normal approximation stands in for the exact distribution.
const EXACT_UP_TO: usize = 200;

/// P(W+ <= w) under no difference, for n pairs.
fn lower_tail(n: usize, w: f64) -> f64 {
    if n <= EXACT_UP_TO {
        let p = null_distribution(n);
        let top = w.floor();
        if top < 0.0 {
            return 0.0;
        }
        return p.iter().take(top as usize + 1).sum::<f64>().min(1.0);
    }
    let nf = n as f64;
    let mean = nf * (nf + 1.0) / 4.0;
    let sd = (nf * (nf + 1.0) * (2.0 * nf + 1.0) / 24.0).sqrt();
    0.5 * crate::compare::erfc(-(w + 0.5 - mean) / sd / std::f64::consts::SQRT_2)
}

/// The signed-rank test of "the differences are centred on 0": two-sided p. Zeros are dropped
/// (Wilcoxon's rule); tied magnitudes share their mean rank, and the sum is rounded toward the
/// centre so ties never make the test bolder.
pub fn p_two_sided(differences: &[f64]) -> f64 {
    let mut magnitudes: Vec<(f64, bool)> = differences
        .iter()
        .filter(|d| **d != 0.0 && d.is_finite())
        .map(|d| (d.abs(), *d > 0.0))
        .collect();
    let n = magnitudes.len();
    if n == 0 {
        return 1.0;
    }
    magnitudes.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut w_plus = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && magnitudes[j + 1].0 == magnitudes[i].0 {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        w_plus += magnitudes[i..=j].iter().filter(|m| m.1).count() as f64 * rank;
        i = j + 1;
    }
    let centre = (n * (n + 1)) as f64 / 4.0;
    let w = if w_plus < centre {
        w_plus.ceil()
    } else {
        w_plus.floor()
    };
    let smaller = w.min(2.0 * centre - w);
    (2.0 * lower_tail(n, smaller)).min(1.0)
}

/// Whether n pairs can be significant at `alpha` at all: the most extreme pattern (every
/// difference one sign) has probability 2 / 2^n.
pub fn can_be_significant(n: usize, alpha: f64) -> bool {
    n >= 1 && 2.0 * 0.5f64.powi(n.min(1000) as i32) < alpha
}

/// The Hodges-Lehmann estimate of the differences' centre (the median of the Walsh averages,
/// every (d_i + d_j) / 2 with i <= j) and its interval at `level`: the Walsh averages of the
/// ranks the signed-rank test's critical value names. None for no differences.
pub fn hodges_lehmann(differences: &[f64], level: f64) -> Option<(f64, f64, f64)> {
    let d: Vec<f64> = differences
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .collect();
    let n = d.len();
    if n == 0 {
        return None;
    }
    let mut walsh = Vec::with_capacity(n * (n + 1) / 2);
    for i in 0..n {
        for j in i..n {
            walsh.push((d[i] + d[j]) / 2.0);
        }
    }
    walsh.sort_by(f64::total_cmp);
    let m = walsh.len();
    let estimate = if m % 2 == 1 {
        walsh[m / 2]
    } else {
        (walsh[m / 2 - 1] + walsh[m / 2]) / 2.0
    };
    // The largest k with P(W+ <= k - 1) <= alpha / 2: the interval is the k-th smallest and
    // k-th largest Walsh average (k = 0: no interval this narrow exists; the whole range).
    let alpha = 1.0 - level;
    let k = if n <= EXACT_UP_TO {
        let p = null_distribution(n);
        let mut cumulative = 0.0;
        let mut k = 0;
        for (w, pw) in p.iter().enumerate() {
            cumulative += pw;
            if cumulative > alpha / 2.0 {
                break;
            }
            k = w + 1;
        }
        k
    } else {
        let nf = n as f64;
        let half =
            normal_quantile(1.0 - alpha / 2.0) * (nf * (nf + 1.0) * (2.0 * nf + 1.0) / 24.0).sqrt();
        (nf * (nf + 1.0) / 4.0 - half).floor().max(0.0) as usize
    };
    let (low, high) = if k == 0 {
        (walsh[0], walsh[m - 1])
    } else {
        (walsh[k - 1], walsh[m - k])
    };
    Some((estimate, low, high))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn the_null_distribution_matches_the_tables() {
        // n = 3: W+ in 0..=6 with counts 1 1 1 2 1 1 1 of 8.
        let p = null_distribution(3);
        let counts: Vec<f64> = p.iter().map(|x| x * 8.0).collect();
        assert_eq!(counts, [1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0]);
        // n = 10: the two-sided 5% critical value is 8 (P(W+ <= 8) = 0.0244).
        assert!(
            close(lower_tail(10, 8.0), 0.0244, 5e-4),
            "{}",
            lower_tail(10, 8.0)
        );
        assert!(lower_tail(10, 9.0) > 0.025);
    }

    #[test]
    fn p_values_of_known_cases() {
        // Six differences of one sign: 2 / 64.
        assert!(close(
            p_two_sided(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            2.0 / 64.0,
            1e-12
        ));
        assert!(!can_be_significant(5, 0.05) && can_be_significant(6, 0.05));
        // Symmetric around zero: no evidence.
        assert!(p_two_sided(&[-3.0, -2.0, -1.0, 1.0, 2.0, 3.0]) > 0.9);
        assert_eq!(p_two_sided(&[0.0, 0.0]), 1.0);
        // Past the exact range, the normal approximation: clearly shifted, clearly small.
        let many: Vec<f64> = (1..=300).map(|i| f64::from(i) - 100.0).collect();
        let p = p_two_sided(&many);
        assert!(p > 0.0 && p < 1e-6, "{p}");
        let centred: Vec<f64> = (1..=301).map(|i| f64::from(i) - 151.0).collect();
        assert!(p_two_sided(&centred) > 0.9);
    }

    /// The point of ranks: a pair far off (the machine changed speed between the variants of a
    /// round) moves the estimate little, where it drags a mean.
    #[test]
    fn a_far_pair_barely_moves_the_estimate() {
        let mut d = vec![
            0.05, 0.048, 0.052, 0.049, 0.051, 0.05, 0.047, 0.053, 0.05, 0.049,
        ];
        let (clean, low, high) = hodges_lehmann(&d, 0.95).unwrap();
        assert!(close(clean, 0.05, 0.002) && low < clean && clean < high);
        d.push(0.5);
        let (with, _, _) = hodges_lehmann(&d, 0.95).unwrap();
        assert!(close(with, clean, 0.002), "{with} vs {clean}");
        let mean = d.iter().sum::<f64>() / d.len() as f64;
        assert!(mean > 0.085);
        // The interval of 10 pairs at 95% is the 9th smallest to 9th largest Walsh average.
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        let (e, low, high) = hodges_lehmann(&ten, 0.95).unwrap();
        assert_eq!(e, 5.5);
        assert_eq!((low, high), (3.0, 8.0));
    }
}
