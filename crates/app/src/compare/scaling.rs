//! Scaling efficiency (`compare --threads`): each variant on N threads against the variant
//! with every other setting the same on one thread. Both ran in every round, so the rounds
//! pair them: the rate's ratio is drawn from the paired rounds as the verdicts are
//! ([`stats::compare::compare_rounds`]), and divided by N.

use model::compare::{Metric, PerHandshake, Scaling, Variant};

/// The rates a scaling figure is drawn for.
const RATES: [&str; 2] = ["engine_rate", "load_handshake_rate"];

/// A server at N threads busier than this share of its N CPUs is what the figure measures;
/// below it, the client could not keep it busy.
const BUSY_ENOUGH_PCT: f64 = 90.0;

/// The scaling figure of every variant on more than one thread that has a one-thread twin.
pub fn scaling(variants: &[Variant], level: f64) -> Vec<Scaling> {
    let threads = |v: &Variant| -> usize {
        v.settings
            .get("threads")
            .and_then(|t| t.parse().ok())
            .unwrap_or(1)
    };
    let twin = |v: &Variant| -> Option<&Variant> {
        variants.iter().find(|b| {
            b.measured()
                && threads(b) == 1
                && b.settings
                    .iter()
                    .filter(|(k, _)| k.as_str() != "threads")
                    .eq(v.settings.iter().filter(|(k, _)| k.as_str() != "threads"))
        })
    };
    let mut out = Vec::new();
    for v in variants.iter().filter(|v| v.measured() && threads(v) > 1) {
        let Some(base) = twin(v) else { continue };
        let n = threads(v);
        for name in RATES {
            let (Some(one), Some(many)) = (metric(base, name), metric(v, name)) else {
                continue;
            };
            let c = stats::compare::compare_rounds(&one.rounds, &many.rounds, level, 0.0, false);
            let per = n as f64;
            let efficiency = stats::compare::Interval {
                estimate: c.ratio.estimate / per,
                low: c.ratio.low / per,
                high: c.ratio.high / per,
                level,
            };
            out.push(Scaling {
                variant: v.label.clone(),
                baseline: base.label.clone(),
                threads: n,
                metric: name.into(),
                rate_1: one.summary.median,
                rate_n: many.summary.median,
                efficiency,
                efficiency_on_idle_cpus: (name == "engine_rate")
                    .then(|| on_idle_cpus(base, v, level))
                    .flatten(),
                rounds: c.n.0,
                per_handshake: (name == "engine_rate")
                    .then(|| per_handshake(base, v))
                    .flatten(),
                caveat: (name == "load_handshake_rate")
                    .then(|| client_bound(v, n))
                    .flatten(),
            });
        }
    }
    out
}

/// Time a handshake holds a thread, CPU or blocked, per round: what the rate would be set by if
/// no other task ever took the thread's CPU.
fn held_per_round(v: &Variant) -> Option<Vec<f64>> {
    let cpu = metric(v, "engine_cpu_per_handshake")?;
    let blocked = metric(v, "engine_blocked_per_handshake")?;
    (cpu.rounds.len() == blocked.rounds.len()).then(|| {
        cpu.rounds
            .iter()
            .zip(&blocked.rounds)
            .map(|(c, b)| c + b)
            .collect()
    })
}

/// Efficiency from the held time: x at 1 thread over x at N (N threads each hold a handshake
/// for x_N / N of the wall time's worth, against x_1 for one thread).
fn on_idle_cpus(one: &Variant, many: &Variant, level: f64) -> Option<stats::compare::Interval> {
    let (a, b) = (held_per_round(one)?, held_per_round(many)?);
    let c = stats::compare::compare_rounds(&a, &b, level, 0.0, true);
    let r = c.ratio;
    [r.estimate, r.low, r.high]
        .iter()
        .all(|x| x.is_finite() && *x > 0.0)
        .then(|| stats::compare::Interval {
            estimate: 1.0 / r.estimate,
            low: 1.0 / r.high,
            high: 1.0 / r.low,
            level,
        })
}

fn metric<'a>(v: &'a Variant, name: &str) -> Option<&'a Metric> {
    v.metrics
        .iter()
        .find(|m| m.name == name && !m.rounds.is_empty())
}

fn median(v: &Variant, name: &str) -> f64 {
    metric(v, name).map_or(f64::NAN, |m| m.summary.median)
}

/// None when either variant lacks one of the figures (a document saved before them).
fn per_handshake(one: &Variant, many: &Variant) -> Option<PerHandshake> {
    let both = |name: &str| [median(one, name), median(many, name)];
    let p = PerHandshake {
        cpu_us: both("engine_cpu_per_handshake"),
        blocked_us: both("engine_blocked_per_handshake"),
        blocks: both("engine_blocks_per_handshake"),
    };
    [p.cpu_us, p.blocked_us, p.blocks]
        .iter()
        .flatten()
        .all(|v| v.is_finite())
        .then_some(p)
}

/// Says so when the server at N threads was not kept busy: the rate is then the client's.
fn client_bound(v: &Variant, n: usize) -> Option<String> {
    let busy = median(v, "load_server_busy");
    (busy < BUSY_ENOUGH_PCT * n as f64).then(|| {
        format!(
            "the server was {busy:.0}% busy of {}%: the client did not keep it busy, so this rate is the client's",
            100 * n
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A variant on `threads` threads whose engine rate is `rates`, one value per round.
    fn variant(label: &str, lib: &str, threads: usize, rates: &[f64]) -> Variant {
        Variant {
            label: label.into(),
            settings: [("openssl", lib), ("threads", &threads.to_string())]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
            metrics: vec![
                Metric::new("engine_rate", "1/s", false, rates.to_vec(), 0.95)
                    .with_rounds(rates.to_vec()),
            ],
            ..Variant::default()
        }
    }

    #[test]
    fn efficiency_is_the_paired_rate_ratio_over_the_thread_count() {
        let one: Vec<f64> = (0..8).map(|i| 1000.0 + f64::from(i)).collect();
        let twice: Vec<f64> = one.iter().map(|r| r * 1.9).collect();
        let halved: Vec<f64> = one.iter().map(|r| r * 0.6).collect();
        let variants = [
            variant("a1", "a", 1, &one),
            variant("a2", "a", 2, &twice),
            variant("b1", "b", 1, &one),
            variant("b2", "b", 2, &halved),
        ];
        let s = scaling(&variants, 0.95);
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].variant.as_str(), s[0].baseline.as_str()),
            ("a2", "a1")
        );
        assert!((s[0].efficiency.estimate - 0.95).abs() < 1e-9, "{s:?}");
        assert!((s[1].efficiency.estimate - 0.30).abs() < 1e-9, "{s:?}");
        assert_eq!((s[1].threads, s[1].rounds), (2, 8));
        assert!(s[0].efficiency.low <= 0.95 && 0.95 <= s[0].efficiency.high);
    }

    #[test]
    fn on_idle_cpus_efficiency_leaves_out_time_others_held_the_cpu() {
        let rounds = |v: f64| vec![v; 8];
        let with = |label: &str, threads: usize, rate: f64, cpu: f64, blocked: f64| {
            let mut v = variant(label, "a", threads, &rounds(rate));
            for (name, value) in [
                ("engine_cpu_per_handshake", cpu),
                ("engine_blocked_per_handshake", blocked),
            ] {
                v.metrics.push(
                    Metric::new(name, "us", true, rounds(value), 0.95).with_rounds(rounds(value)),
                );
            }
            v
        };
        // Two threads at 1000 us of CPU and 250 us blocked each handshake, against 1000 us
        // and none on one thread: 0.8, whatever the wall-clock rate (halved by a neighbour).
        let variants = [
            with("a1", 1, 1000.0, 1000.0, 0.0),
            with("a2", 2, 1000.0, 1000.0, 250.0),
        ];
        let s = scaling(&variants, 0.95);
        let e = s[0].efficiency_on_idle_cpus.as_ref().unwrap();
        assert!((e.estimate - 0.8).abs() < 1e-9, "{e:?}");
        assert!((s[0].efficiency.estimate - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_variant_without_a_one_thread_twin_has_no_figure() {
        let rates = [1.0, 2.0, 3.0];
        let variants = [variant("a1", "a", 1, &rates), variant("b2", "b", 2, &rates)];
        assert!(scaling(&variants, 0.95).is_empty());
    }
}
