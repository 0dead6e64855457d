//! The one percentile routine on histograms, and the statistics of a histogram, shared by
//! trace (the kernel's log2 or linear buckets), bench (HDR cells) and compare (saved runs).
//!
//! A histogram is a list of cells, each a range of values, how many values fell in it and, where
//! the recorder kept it, their sum. A quantile is the value of nearest rank (the convention of
//! HDR histograms, so a saved bench run gives back the percentiles bench printed), placed inside
//! its cell so that it never leaves what the cell says of its values: an exact cell gives its
//! value, a cell holding one value with its sum gives that value, and otherwise the value is
//! spread evenly over the part of the cell that agrees with the cell's mean.

/// Values of one histogram cell: `[low, high]`, `count` of them, summing to `sum` if known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    pub low: f64,
    /// None: an open top cell (everything at or over `low`).
    pub high: Option<f64>,
    pub count: u64,
    /// The sum of the cell's values, where the recorder kept it (the kernel's buckets do).
    pub sum: Option<f64>,
}

impl Cell {
    /// A cell of one exact value (an HDR cell: values equal to 3 significant digits).
    pub fn exact(value: f64, count: u64) -> Cell {
        Cell {
            low: value,
            high: Some(value),
            count,
            sum: None,
        }
    }

    /// The range the cell's values can be spread over: the whole cell, narrowed around the
    /// mean when it is known (so the spread's own mean is the cell's).
    fn spread(&self) -> (f64, f64) {
        let mean = self.sum.map(|s| s / self.count.max(1) as f64);
        match (self.high, mean) {
            (Some(high), None) => (self.low, high),
            (None, None) => (self.low, self.low),
            (high, Some(mean)) => {
                let mean = mean.max(self.low);
                let high = high.unwrap_or(f64::INFINITY);
                let mean = mean.min(high);
                if mean - self.low <= high - mean {
                    (self.low, 2.0 * mean - self.low)
                } else {
                    (2.0 * mean - high, high)
                }
            }
        }
    }

    /// The estimated value of the `j`-th (from 1) smallest value in the cell.
    fn value_of_rank(&self, j: u64) -> f64 {
        let (a, b) = self.spread();
        if self.count <= 1 || a == b {
            return (a + b) / 2.0;
        }
        a + (j as f64 - 0.5) / self.count as f64 * (b - a)
    }

    /// The estimated sum of the cell's values.
    fn estimated_sum(&self) -> f64 {
        self.sum.unwrap_or_else(|| {
            let (a, b) = self.spread();
            (a + b) / 2.0 * self.count as f64
        })
    }
}

/// Cells with values, lowest first, and how many values in all. Cells may come in any order.
pub fn sorted(cells: &[Cell]) -> (Vec<Cell>, u64) {
    let mut out: Vec<Cell> = cells.iter().copied().filter(|c| c.count > 0).collect();
    out.sort_by(|x, y| x.low.total_cmp(&y.low));
    let total = out.iter().map(|c| c.count).fold(0u64, u64::saturating_add);
    (out, total)
}

/// The value of rank `k` (from 1) among `total` values of `sorted` cells; 0 when empty.
pub fn value_of_rank(sorted: &[Cell], k: u64) -> f64 {
    let mut below = 0u64;
    for c in sorted {
        if below.saturating_add(c.count) >= k {
            return c.value_of_rank(k.saturating_sub(below).max(1));
        }
        below = below.saturating_add(c.count);
    }
    sorted.last().map_or(0.0, |c| c.value_of_rank(c.count))
}

/// The q-quantile (0..=1) of `sorted` cells holding `total` values: the value of nearest rank,
/// `ceil(q * total)` (at least 1), as HDR histograms compute it; 0 when empty.
pub fn quantile(sorted: &[Cell], total: u64, q: f64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    let k = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as u64;
    value_of_rank(sorted, k.min(total))
}

/// The smallest and largest value the cells say were recorded.
pub fn extremes(sorted: &[Cell]) -> (f64, f64) {
    match (sorted.first(), sorted.last()) {
        (Some(first), Some(last)) => (first.value_of_rank(1), last.value_of_rank(last.count)),
        _ => (0.0, 0.0),
    }
}

/// The mean of the cells' values (exact where every cell's sum is known or its value exact).
pub fn mean(sorted: &[Cell], total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    sorted.iter().map(Cell::estimated_sum).sum::<f64>() / total as f64
}

/// The sample standard deviation (n - 1) of the cells' values, each cell's values taken at its
/// estimate of their mean.
pub fn stdev(sorted: &[Cell], total: u64) -> f64 {
    if total < 2 {
        return 0.0;
    }
    let m = mean(sorted, total);
    let squares: f64 = sorted
        .iter()
        .map(|c| {
            let cell_mean = c.estimated_sum() / c.count as f64;
            c.count as f64 * (cell_mean - m).powi(2)
        })
        .sum();
    (squares / (total - 1) as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(low: f64, high: f64, count: u64, sum: Option<f64>) -> Cell {
        Cell {
            low,
            high: Some(high),
            count,
            sum,
        }
    }

    #[test]
    fn exact_cells_give_the_percentiles_an_hdr_histogram_gives() {
        // 1..=1000, one each: HDR's p50 is 500, p99 990, p999 999 (nearest rank).
        let cells: Vec<Cell> = (1..=1000).map(|v| Cell::exact(f64::from(v), 1)).collect();
        let (s, n) = sorted(&cells);
        assert_eq!(quantile(&s, n, 0.5), 500.0);
        assert_eq!(quantile(&s, n, 0.99), 990.0);
        assert_eq!(quantile(&s, n, 0.999), 999.0);
        assert_eq!(quantile(&s, n, 0.0), 1.0);
        assert_eq!(quantile(&s, n, 1.0), 1000.0);
        assert!((mean(&s, n) - 500.5).abs() < 1e-9);
    }

    /// Issue 30, item 4: one 654 us call in the log2 bucket [512, 1024) was shown as p50 768 us
    /// and p99 1.02 ms, above the only value; the bucket's sum says what it was.
    #[test]
    fn a_single_value_in_a_wide_bucket_is_its_own_percentile() {
        let (s, n) = sorted(&[range(512.0, 1024.0, 1, Some(654.0))]);
        assert_eq!(quantile(&s, n, 0.5), 654.0);
        assert_eq!(quantile(&s, n, 0.99), 654.0);
        assert_eq!(extremes(&s), (654.0, 654.0));
    }

    /// Issue 30, item 4: SSL_read calls averaging 2 us in the linear bucket [0, 200) were shown
    /// as p50 100 us and p99 198 us. The spread that agrees with the mean is [0, 4).
    #[test]
    fn percentiles_stay_where_the_buckets_mean_puts_the_values() {
        let (s, n) = sorted(&[range(0.0, 200.0, 1000, Some(2000.0))]);
        let p50 = quantile(&s, n, 0.5);
        let p99 = quantile(&s, n, 0.99);
        assert!((1.9..=2.1).contains(&p50), "{p50}");
        assert!(p99 < 4.0 && p99 > p50, "{p99}");
        assert!((mean(&s, n) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn without_sums_values_spread_over_the_whole_bucket() {
        let (s, n) = sorted(&[range(200.0, 400.0, 100, None), range(0.0, 200.0, 100, None)]);
        // Rank 100 is the last of [0, 200): just under its top.
        assert_eq!(quantile(&s, n, 0.5), 199.0);
        // Rank 180 is the 80th of 100 in [200, 400).
        assert_eq!(quantile(&s, n, 0.9), 200.0 + 79.5 / 100.0 * 200.0);
    }

    #[test]
    fn an_open_top_cell_gives_its_low_edge_or_its_mean() {
        let open = |sum| Cell {
            low: 1000.0,
            high: None,
            count: 1,
            sum,
        };
        let (s, n) = sorted(&[open(None)]);
        assert_eq!(quantile(&s, n, 0.99), 1000.0);
        let (s, n) = sorted(&[open(Some(5000.0))]);
        assert_eq!(quantile(&s, n, 0.99), 5000.0);
    }

    #[test]
    fn empty_histograms_are_zero() {
        let (s, n) = sorted(&[range(0.0, 1.0, 0, None)]);
        assert_eq!((n, quantile(&s, n, 0.5), mean(&s, n)), (0, 0.0, 0.0));
        assert_eq!(extremes(&s), (0.0, 0.0));
    }

    #[test]
    fn standard_deviation_of_exact_cells_is_the_samples() {
        // 1, 2, 3, 4: sample standard deviation sqrt(5/3).
        let cells: Vec<Cell> = (1..=4).map(|v| Cell::exact(f64::from(v), 1)).collect();
        let (s, n) = sorted(&cells);
        assert!((stdev(&s, n) - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
    }

    /// Counts come from files: their sum may not fit 64 bits (the saved_runs fuzz target found
    /// such a sum overflowing once). It saturates; nothing panics.
    #[test]
    fn counts_whose_sum_overflows_64_bits_saturate() {
        let cells = [Cell::exact(1.0, u64::MAX), Cell::exact(2.0, u64::MAX)];
        let (s, n) = sorted(&cells);
        assert_eq!(n, u64::MAX);
        assert_eq!(quantile(&s, n, 0.25), 1.0);
        assert!(mean(&s, n).is_finite() && stdev(&s, n).is_finite());
    }
}
