//! What a latency trace counts, whichever backend counts it: each call's outcome and latency
//! bucket per function (and process), the buckets' ranges, and what one probed call costs.
//! Plain data: the kernel backend reads it from its BPF maps, the in-process one from its
//! shared region.

/// How a call ended (`enum ts_outcome` in `kernel/bpf/latency.h` numbers them for the program).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    Success,
    Retry,
    /// A retry of the async kind: `SSL_ERROR_WANT_ASYNC` (or `WANT_ASYNC_JOB`), an async
    /// engine's job paused the call. Only `SSL_get_error` tells it (`--exact-outcomes`, the
    /// in-process backend).
    RetryAsync,
    /// The peer closed the connection cleanly (OpenSSL's `SSL_ERROR_ZERO_RETURN`).
    Closed,
    Failure,
    /// Retry or failure: the return value alone cannot tell, and no `SSL_get_error` followed.
    Unknown,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Retry => "retry",
            Outcome::RetryAsync => "retry_async",
            Outcome::Failure => "failure",
            Outcome::Unknown => "unknown",
            Outcome::Closed => "closed",
        }
    }
}

/// How latencies are bucketed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buckets {
    /// Powers of two of microseconds: bucket 0 is under 1 us, bucket b is [2^(b-1), 2^b) us.
    Log2,
    /// Like bpftrace's `lhist(us, min, max, step)`: bucket 0 under `min_us`, then `step_us` wide
    /// buckets, the last one everything at or over `max_us`.
    Linear {
        min_us: u64,
        max_us: u64,
        step_us: u64,
    },
}

impl Buckets {
    /// Most in-range linear buckets: `TS_MAX_LINEAR_BUCKETS` in `kernel/bpf/latency.h`, which
    /// the kernel backend checks this against when the crate is built.
    pub const MAX_LINEAR: u64 = 253;

    /// The checked linear settings, or why they do not work.
    pub fn linear(min_us: u64, max_us: u64, step_us: u64) -> Result<Buckets, String> {
        if step_us == 0 || max_us <= min_us {
            return Err(format!(
                "linear buckets need MIN < MAX and STEP > 0 (got {min_us},{max_us},{step_us})"
            ));
        }
        if (max_us - min_us).div_ceil(step_us) > Buckets::MAX_LINEAR {
            return Err(format!(
                "linear buckets {min_us},{max_us},{step_us} make more than {} buckets: use a larger step",
                Buckets::MAX_LINEAR
            ));
        }
        Ok(Buckets::Linear {
            min_us,
            max_us,
            step_us,
        })
    }

    /// In-range linear buckets.
    pub(crate) fn linear_count(&self) -> u64 {
        match *self {
            Buckets::Log2 => 0,
            Buckets::Linear {
                min_us,
                max_us,
                step_us,
            } => (max_us - min_us).div_ceil(step_us),
        }
    }

    /// Bucket `b`'s range in microseconds, `[low, high)`; `high` is `None` for the open top.
    pub fn range_us(&self, bucket: u8) -> (u64, Option<u64>) {
        let b = u64::from(bucket);
        match *self {
            Buckets::Log2 => match b {
                0 => (0, Some(1)),
                64.. => (1 << 63, None),
                _ => (1 << (b - 1), Some(1 << b)),
            },
            Buckets::Linear {
                min_us, step_us, ..
            } => {
                let n = self.linear_count();
                if b == 0 {
                    (0, Some(min_us))
                } else if b > n {
                    (min_us + n * step_us, None)
                } else {
                    (min_us + (b - 1) * step_us, Some(min_us + b * step_us))
                }
            }
        }
    }
}

/// One histogram cell (the kernel backend's summed over CPUs, the in-process one's over threads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    /// The process, or 0 when not per process.
    pub pid: u32,
    /// The function's catalog id.
    pub function: u16,
    pub outcome: Outcome,
    pub bucket: u8,
    pub count: u64,
    pub total_ns: u64,
}

/// Everything a backend has counted since the trace started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub cells: Vec<Cell>,
    /// Probed calls (entry probe runs), including those of filtered-out processes, which pay
    /// the breakpoint too.
    pub calls: u64,
    /// Cells lost because the histogram map was full.
    pub dropped_cells: u64,
    /// Per function (catalog id): calls whose in-process wrapper failed, after which that
    /// wrapper only calls through in its process (always empty for the kernel backend).
    pub wrapper_failures: Vec<(u16, u64)>,
}

impl Snapshot {
    /// The change from `earlier` to `self` (both cumulative).
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let mut cells = Vec::new();
        for c in &self.cells {
            let before = earlier.cells.iter().find(|e| {
                (e.pid, e.function, e.outcome, e.bucket) == (c.pid, c.function, c.outcome, c.bucket)
            });
            let (count, total_ns) = match before {
                Some(e) => (
                    c.count.saturating_sub(e.count),
                    c.total_ns.saturating_sub(e.total_ns),
                ),
                None => (c.count, c.total_ns),
            };
            if count > 0 {
                cells.push(Cell {
                    count,
                    total_ns,
                    ..*c
                });
            }
        }
        Snapshot {
            cells,
            calls: self.calls.saturating_sub(earlier.calls),
            dropped_cells: self.dropped_cells.saturating_sub(earlier.dropped_cells),
            wrapper_failures: self
                .wrapper_failures
                .iter()
                .map(|&(id, n)| {
                    let before = earlier
                        .wrapper_failures
                        .iter()
                        .find(|e| e.0 == id)
                        .map_or(0, |e| e.1);
                    (id, n.saturating_sub(before))
                })
                .filter(|&(_, n)| n > 0)
                .collect(),
        }
    }

    pub(crate) fn add(&mut self, cell: Cell) {
        let key = (cell.pid, cell.function, cell.outcome, cell.bucket);
        match self
            .cells
            .iter_mut()
            .find(|c| (c.pid, c.function, c.outcome, c.bucket) == key)
        {
            Some(c) => {
                c.count += cell.count;
                c.total_ns += cell.total_ns;
            }
            None => self.cells.push(cell),
        }
    }
}

/// The cost of one probed call, measured at start-up on a function in this program.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    pub calls: u64,
    pub plain_ns_per_call: f64,
    pub probed_ns_per_call: f64,
}

impl Calibration {
    /// What the probes add to one call.
    pub fn cost_ns_per_call(&self) -> f64 {
        (self.probed_ns_per_call - self.plain_ns_per_call).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_ranges() {
        let b = Buckets::Log2;
        assert_eq!(b.range_us(0), (0, Some(1)));
        assert_eq!(b.range_us(1), (1, Some(2)));
        assert_eq!(b.range_us(4), (8, Some(16)));
    }

    #[test]
    fn linear_ranges_like_lhist() {
        let b = Buckets::linear(0, 1000, 200).unwrap();
        assert_eq!(b.range_us(0), (0, Some(0)));
        assert_eq!(b.range_us(1), (0, Some(200)));
        assert_eq!(b.range_us(5), (800, Some(1000)));
        assert_eq!(b.range_us(6), (1000, None));
        assert!(Buckets::linear(0, 1000, 0).is_err());
        assert!(Buckets::linear(0, 1_000_000, 1).is_err());
    }

    #[test]
    fn linear_buckets_fit_the_key_s_byte() {
        // One bucket under the range and one at or over its top.
        assert!(Buckets::MAX_LINEAR + 2 <= u64::from(u8::MAX) + 1);
    }

    #[test]
    fn snapshot_differences() {
        let cell = |count, total_ns| Cell {
            pid: 0,
            function: 3,
            outcome: Outcome::Success,
            bucket: 4,
            count,
            total_ns,
        };
        let a = Snapshot {
            cells: vec![cell(5, 50)],
            calls: 10,
            dropped_cells: 0,
            wrapper_failures: vec![(3, 1)],
        };
        let b = Snapshot {
            cells: vec![cell(8, 90)],
            calls: 16,
            dropped_cells: 0,
            wrapper_failures: vec![(3, 1), (7, 2)],
        };
        let d = b.since(&a);
        assert_eq!(d.cells, vec![cell(3, 40)]);
        assert_eq!(d.calls, 6);
        assert_eq!(d.wrapper_failures, vec![(7, 2)]);
        assert!(b.since(&b).cells.is_empty());
    }
}
