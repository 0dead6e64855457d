//! Adding up runs made at the same time against one target (the shards of a sharded run):
//! counts add, latency histograms add exactly (percentiles come from the sum, never from the
//! shards' percentiles), and the rate is taken over the window all of them ran in.

use std::collections::BTreeMap;

use stats::{LatencyHistogram, LatencySummary};

use crate::result::{
    CpuUsage, HandshakeCounts, Latencies, NegotiatedCount, ResumptionCheck, RunResult, SecondCounts,
};

/// One run to add, with its measured window on the wall clock (Unix ns, [start, end]) when
/// it knows it.
#[derive(Clone, Copy, Debug)]
pub struct Part<'a> {
    pub result: &'a RunResult,
    pub window_unix_ns: Option<[u64; 2]>,
}

/// How the merged rate was taken.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RateWindow {
    /// Over the window every part ran in, [start, end] in Unix ns: each part's operations in
    /// it (from its per-second counts) over its length.
    Common([u64; 2]),
    /// The parts' windows do not all overlap, or some part has none: the sum of the parts'
    /// own rates.
    SumOfRates,
}

/// The parts added up, and how the rate was taken.
#[derive(Clone, Debug)]
pub struct Merged {
    pub result: RunResult,
    pub rate_window: RateWindow,
}

/// Adds `parts` up (at least one). Settings that differ between parts (target, mode) are the
/// caller's to check; the first part's are kept.
pub fn add_up(parts: &[Part<'_>]) -> Merged {
    let first = parts.first().expect("at least one part").result;
    let results: Vec<&RunResult> = parts.iter().map(|p| p.result).collect();
    let sum = |f: &dyn Fn(&RunResult) -> u64| results.iter().map(|r| f(r)).sum::<u64>();
    let mut r = RunResult {
        client: first.client.clone(),
        mode: first.mode,
        target: first.target.clone(),
        threads: results.iter().map(|r| r.threads).sum(),
        connections: results.iter().map(|r| r.connections).sum(),
        rate_per_s: results
            .iter()
            .any(|r| r.rate_per_s.is_some())
            .then(|| results.iter().filter_map(|r| r.rate_per_s).sum()),
        warmup_s: results.iter().map(|r| r.warmup_s).fold(0.0, f64::max),
        ops: sum(&|r| r.ops),
        requests: sum(&|r| r.requests),
        body_bytes: sum(&|r| r.body_bytes),
        handshakes: HandshakeCounts {
            total: sum(&|r| r.handshakes.total),
            full: sum(&|r| r.handshakes.full),
            resumed_session_id: sum(&|r| r.handshakes.resumed_session_id),
            resumed_ticket: sum(&|r| r.handshakes.resumed_ticket),
            per_s: 0,
        },
        negotiated: negotiated(&results),
        resumption: resumption(&results),
        latency: latencies(&results),
        errors: added_maps(results.iter().map(|r| &r.errors)),
        errors_total: sum(&|r| r.errors_total),
        http_status: added_maps(results.iter().map(|r| &r.http_status)),
        cpu: cpu(&results),
        interrupted: results.iter().any(|r| r.interrupted),
        ..RunResult::default()
    };
    let rate_window = common_window(parts).map_or(RateWindow::SumOfRates, RateWindow::Common);
    match rate_window {
        RateWindow::Common(w) => {
            let seconds = (w[1] - w[0]) as f64 / 1e9;
            // Each part's share of its operations that fell in the common window.
            let shares: Vec<f64> = parts.iter().map(|p| share_in(p, w)).collect();
            let in_window = |f: &dyn Fn(&RunResult) -> u64| -> f64 {
                parts
                    .iter()
                    .zip(&shares)
                    .map(|(p, s)| f(p.result) as f64 * s)
                    .sum()
            };
            r.duration_s = seconds;
            r.ops_per_s = in_window(&|r| r.ops) / seconds;
            r.requests_per_s = in_window(&|r| r.requests) / seconds;
            r.handshakes.per_s = (in_window(&|r| r.handshakes.total) / seconds).round() as u64;
            r.per_second = per_second(parts, w[0]);
        }
        RateWindow::SumOfRates => {
            r.duration_s = results.iter().map(|r| r.duration_s).fold(0.0, f64::max);
            r.ops_per_s = results.iter().map(|r| r.ops_per_s).sum();
            r.requests_per_s = results.iter().map(|r| r.requests_per_s).sum();
            r.handshakes.per_s = sum(&|r| r.handshakes.per_s);
        }
    }
    Merged {
        result: r,
        rate_window,
    }
}

/// The window every part ran in, when each has one and they overlap.
fn common_window(parts: &[Part<'_>]) -> Option<[u64; 2]> {
    let windows: Vec<[u64; 2]> = parts
        .iter()
        .map(|p| p.window_unix_ns)
        .collect::<Option<_>>()?;
    let start = windows.iter().map(|w| w[0]).max()?;
    let end = windows.iter().map(|w| w[1]).min()?;
    (end > start).then_some([start, end])
}

/// The fraction of a part's operations that completed inside `w`, from its per-second
/// counts (each second's operations spread evenly over it); by time alone where it has none.
fn share_in(part: &Part<'_>, w: [u64; 2]) -> f64 {
    let Some([start, end]) = part.window_unix_ns else {
        return 1.0;
    };
    let overlap = |a: u64, b: u64| b.min(w[1]).saturating_sub(a.max(w[0])) as f64;
    let r = part.result;
    let total: u64 = r.per_second.iter().map(|s| s.ops).sum();
    if total == 0 {
        let len = end.saturating_sub(start) as f64;
        return if len > 0.0 {
            overlap(start, end) / len
        } else {
            1.0
        };
    }
    let mut inside = 0.0;
    for (k, second) in r.per_second.iter().enumerate() {
        let a = start + k as u64 * 1_000_000_000;
        let b = (a + 1_000_000_000).min(end.max(a + 1));
        inside += second.ops as f64 * overlap(a, b) / (b - a) as f64;
    }
    inside / total as f64
}

/// Per second from `origin` (the common window's start): each part's seconds added into the
/// second they fall in, from the earliest part's first to the latest part's last.
fn per_second(parts: &[Part<'_>], origin: u64) -> Vec<SecondCounts> {
    let mut out: BTreeMap<i64, SecondCounts> = BTreeMap::new();
    for p in parts {
        let Some([start, _]) = p.window_unix_ns else {
            continue;
        };
        let offset = (start as i128 - origin as i128) as f64 / 1e9;
        for (k, s) in p.result.per_second.iter().enumerate() {
            let slot = (offset + k as f64).round() as i64;
            let e = out.entry(slot).or_default();
            e.ops += s.ops;
            e.errors += s.errors;
        }
    }
    // From the first second on, gaps filled with zeros; seconds before the common window
    // (a shard that started early) are dropped, as the measured window's are.
    let Some(&last) = out.keys().next_back() else {
        return Vec::new();
    };
    (0..=last.max(0))
        .map(|k| out.get(&k).copied().unwrap_or_default())
        .collect()
}

/// The negotiated outcomes of all parts, most frequent first.
fn negotiated(results: &[&RunResult]) -> Vec<NegotiatedCount> {
    let mut list = Vec::new();
    for r in results {
        for n in &r.negotiated {
            NegotiatedCount::tally(&mut list, n.clone());
        }
    }
    list.sort_by_key(|n| std::cmp::Reverse(n.count));
    list
}

/// The resumption counts added; met only where every part met it.
fn resumption(results: &[&RunResult]) -> ResumptionCheck {
    let sum = |f: &dyn Fn(&ResumptionCheck) -> u64| results.iter().map(|r| f(&r.resumption)).sum();
    let offered: u64 = sum(&|c| c.offered);
    let resumed: u64 = sum(&|c| c.resumed);
    ResumptionCheck {
        offered,
        resumed,
        resumed_other_kind: sum(&|c| c.resumed_other_kind),
        no_session: sum(&|c| c.no_session),
        unexpected_resumptions: sum(&|c| c.unexpected_resumptions),
        resumed_ratio: if offered == 0 {
            1.0
        } else {
            resumed as f64 / offered as f64
        },
        ok: results.iter().all(|r| r.resumption.ok),
        problem: results.iter().find_map(|r| r.resumption.problem.clone()),
    }
}

/// Each phase's histograms added.
fn latencies(results: &[&RunResult]) -> Latencies {
    let phase = |f: &dyn Fn(&Latencies) -> &LatencySummary| -> LatencySummary {
        let mut h = LatencyHistogram::new();
        for r in results {
            h.merge(&LatencyHistogram::from_summary(f(&r.latency)));
        }
        h.summary()
    };
    Latencies {
        connect: phase(&|l| &l.connect),
        handshake: phase(&|l| &l.handshake),
        ttfb: phase(&|l| &l.ttfb),
        request: phase(&|l| &l.request),
        total: phase(&|l| &l.total),
        total_uncorrected: phase(&|l| &l.total_uncorrected),
        pacer_late: phase(&|l| &l.pacer_late),
    }
}

fn added_maps<'a>(maps: impl Iterator<Item = &'a BTreeMap<String, u64>>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for m in maps {
        for (k, v) in m {
            *out.entry(k.clone()).or_insert(0) += v;
        }
    }
    out
}

/// The clients' CPU added, and the per-unit figures taken from the sums. The server's CPU is
/// not added (every part measured the same server): the caller says which to keep.
fn cpu(results: &[&RunResult]) -> CpuUsage {
    let user: f64 = results.iter().map(|r| r.cpu.client_user_s).sum();
    let system: f64 = results.iter().map(|r| r.cpu.client_system_s).sum();
    let handshakes: u64 = results.iter().map(|r| r.handshakes.total).sum();
    let requests: u64 = results.iter().map(|r| r.requests).sum();
    let per = |n: u64, cpu: f64| if n == 0 { 0.0 } else { cpu / n as f64 * 1000.0 };
    let ratio = |n: u64, cpu: f64| if cpu > 0.0 { n as f64 / cpu } else { 0.0 };
    CpuUsage {
        client_user_s: user,
        client_system_s: system,
        client_cpu_s_per_1000_handshakes: per(handshakes, user + system),
        client_cpu_s_per_1000_requests: per(requests, user + system),
        handshakes_per_client_cpu_s: ratio(handshakes, user + system),
        connections_per_user_s: ratio(handshakes, user),
        thread_busy_pct: results
            .iter()
            .flat_map(|r| r.cpu.thread_busy_pct.iter().copied())
            .collect(),
        server: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of `ops` operations whose total latencies are `values` (µs), one per second.
    fn run(values: &[u64], seconds: usize, cpu_s: f64) -> RunResult {
        let mut h = LatencyHistogram::new();
        for &v in values {
            h.record_us(v);
        }
        let ops = values.len() as u64;
        let per = ops / seconds as u64;
        RunResult {
            ops,
            requests: ops,
            handshakes: HandshakeCounts {
                total: 2,
                full: 2,
                ..HandshakeCounts::default()
            },
            duration_s: seconds as f64,
            ops_per_s: ops as f64 / seconds as f64,
            latency: Latencies {
                total: h.summary(),
                ..Latencies::default()
            },
            per_second: (0..seconds)
                .map(|_| SecondCounts {
                    ops: per,
                    errors: 0,
                })
                .collect(),
            cpu: CpuUsage {
                client_user_s: cpu_s,
                ..CpuUsage::default()
            },
            errors: BTreeMap::from([("reset".to_string(), 1)]),
            errors_total: 1,
            ..RunResult::default()
        }
    }

    const S: u64 = 1_000_000_000;

    fn part(result: &RunResult, window_unix_ns: Option<[u64; 2]>) -> Part<'_> {
        Part {
            result,
            window_unix_ns,
        }
    }

    #[test]
    fn counts_add_and_percentiles_come_from_the_added_histograms() {
        let a_values: Vec<u64> = (1..=400).map(|v| v * 10).collect();
        let b_values: Vec<u64> = (1..=200).map(|v| v * 37 + 5000).collect();
        let (a, b) = (run(&a_values, 4, 1.0), run(&b_values, 4, 0.5));
        let merged = add_up(&[
            part(&a, Some([10 * S, 14 * S])),
            part(&b, Some([10 * S, 14 * S])),
        ]);
        let r = &merged.result;
        assert_eq!((r.ops, r.requests, r.handshakes.total), (600, 600, 4));
        assert_eq!(r.errors["reset"], 2);
        assert_eq!(r.errors_total, 2);
        let mut all = LatencyHistogram::new();
        for v in a_values.iter().chain(&b_values) {
            all.record_us(*v);
        }
        assert_eq!(r.latency.total, all.summary());
        assert_eq!(merged.rate_window, RateWindow::Common([10 * S, 14 * S]));
        assert!((r.ops_per_s - 150.0).abs() < 1e-9, "{}", r.ops_per_s);
        assert!((r.cpu.client_cpu_s_per_1000_handshakes - 375.0).abs() < 1e-9);
        assert_eq!(r.per_second.len(), 4);
        assert_eq!(r.per_second[0].ops, 150);
    }

    #[test]
    fn the_rate_is_taken_over_the_window_all_parts_ran_in() {
        // b started 2 s late: only the 2 s both ran count, with what each did in them.
        let (a, b) = (run(&[100; 400], 4, 1.0), run(&[100; 400], 4, 1.0));
        let merged = add_up(&[
            part(&a, Some([10 * S, 14 * S])),
            part(&b, Some([12 * S, 16 * S])),
        ]);
        assert_eq!(merged.rate_window, RateWindow::Common([12 * S, 14 * S]));
        // 100/s each in the common 2 s.
        assert!((merged.result.ops_per_s - 200.0).abs() < 1e-9);
        assert_eq!(merged.result.duration_s, 2.0);
        // Windows that do not meet, or a part without one: the sum of the rates.
        let apart = add_up(&[
            part(&a, Some([10 * S, 14 * S])),
            part(&b, Some([20 * S, 24 * S])),
        ]);
        assert_eq!(apart.rate_window, RateWindow::SumOfRates);
        assert!((apart.result.ops_per_s - 200.0).abs() < 1e-9);
        let unknown = add_up(&[part(&a, None), part(&b, Some([10 * S, 14 * S]))]);
        assert_eq!(unknown.rate_window, RateWindow::SumOfRates);
    }
}
