//! `tlsscope bench --html`: a run as one self-contained page. The text report (rates, the
//! handshakes obtained, CPU, latency table), the operations and errors per second, and each
//! phase's latency by percentile on a log axis (HDR-style: the tail gets the room).

use model::bench::BenchDocument;
use plotters::prelude::*;

use crate::render::html::{escape, figure};
use crate::render::latency::{percentile_plot, phases, HEIGHT, WIDTH};
use crate::render::plot::{draw_lines, with_legend_height};

/// The page.
pub fn page(doc: &BenchDocument) -> String {
    let r = &doc.result;
    let mut text = Vec::new();
    if let Some(shard) = &doc.shard {
        let _ = crate::bench::render::shard_text(&mut text, shard);
    }
    let _ = crate::bench::render::bench_text(&mut text, &doc.environment, r);
    let env = &doc.environment;
    let mut body = format!(
        "<h1>tlsscope bench: {}</h1>\n<p>Machine: {} ({}), kernel {}, started {}; tlsscope {}; {}.</p>\n<pre>{}</pre>\n",
        escape(&r.target),
        escape(&env.cpu_model),
        crate::render::words::count(env.cpus, "CPU"),
        escape(&env.kernel),
        escape(&env.started_at),
        escape(&env.tlsscope_version),
        escape(&crate::bench::render::client_name(env, r)),
        escape(&String::from_utf8_lossy(&text))
    );
    if !r.per_second.is_empty() {
        body += &figure(
            &throughput_plot(r),
            "operations (and errors) completed in each second of the measured window",
        );
    }
    let phases = phases(r);
    if !phases.is_empty() {
        body += &figure(
            &percentile_plot(&phases),
            "latency by percentile, per phase (log axes: each step right is ten times rarer)",
        );
    }
    crate::render::html::page("tlsscope bench", &body)
}

/// Each second's count as a rate, at the second's end. The last second of a run may be cut
/// short: its count is divided by the part that ran, and a part under a fifth of a second is
/// left out (too few operations to be a rate).
pub fn per_second_points(r: &load::result::RunResult, errors: bool) -> Vec<(f64, f64)> {
    r.per_second
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let covered = (r.duration_s - i as f64).min(1.0);
            let n = if errors { s.errors } else { s.ops };
            (covered >= 0.2).then(|| (i as f64 + covered, n as f64 / covered))
        })
        .collect()
}

fn throughput_plot(r: &load::result::RunResult) -> String {
    let mut series = vec![("operations".to_string(), per_second_points(r, false))];
    if r.per_second.iter().any(|s| s.errors > 0) {
        series.push(("errors".to_string(), per_second_points(r, true)));
    }
    let labels: Vec<String> = series.iter().map(|s| s.0.clone()).collect();
    let height = with_legend_height(HEIGHT, &labels, WIDTH);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let _ = draw_lines(&root, HEIGHT, &series, "per second");
    }
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_second_is_a_rate_and_a_short_last_part_is_left_out() {
        // A run of 2.5 s: two whole seconds, then 30 in the half that ran (60/s). A last part
        // under 0.2 s is left out.
        let r = load::result::RunResult {
            duration_s: 2.5,
            per_second: [100, 120, 30]
                .map(|ops| load::result::SecondCounts { ops, errors: 0 })
                .to_vec(),
            ..Default::default()
        };
        assert_eq!(
            per_second_points(&r, false),
            vec![(1.0, 100.0), (2.0, 120.0), (2.5, 60.0)]
        );
        let short = load::result::RunResult {
            duration_s: 2.1,
            ..r
        };
        assert_eq!(per_second_points(&short, false).len(), 2);
    }
}
