//! `tlsscope bench --html`: a run as one self-contained page. The text report (rates, the
//! handshakes obtained, CPU, latency table), the operations and errors per second, and each
//! phase's latency by percentile on a log axis (HDR-style: the tail gets the room).

use model::bench::BenchDocument;
use plotters::prelude::*;
use stats::LatencySummary;

use crate::render::html::{escape, figure};
use crate::render::plot::{color, draw_legend, draw_lines, legend_of, with_legend_height, Mark};

const WIDTH: u32 = 860;
const HEIGHT: u32 = 380;

/// The page.
pub fn page(doc: &BenchDocument) -> String {
    let r = &doc.result;
    let mut text = Vec::new();
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

/// The phases with samples, as (name, summary).
pub(crate) fn phases(r: &load::result::RunResult) -> Vec<(&'static str, &LatencySummary)> {
    let l = &r.latency;
    [
        ("connect", &l.connect),
        ("handshake", &l.handshake),
        ("ttfb", &l.ttfb),
        ("request", &l.request),
        ("total", &l.total),
    ]
    .into_iter()
    .filter(|(_, s)| s.count > 0 && !s.histogram.is_empty())
    .collect()
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

/// A phase's latency by percentile: for each recorded value, 1 / (1 - the fraction at or
/// below it) (2 at the median, 100 at p99), and the value in milliseconds. The last value's
/// fraction is 1: it is placed at the count (one in n).
pub fn percentile_points(s: &LatencySummary) -> Vec<(f64, f64)> {
    let n = s.histogram.iter().map(|p| p[1]).sum::<u64>().max(1) as f64;
    let mut below = 0u64;
    let mut points = Vec::with_capacity(s.histogram.len() * 2);
    for &[value_us, count] in &s.histogram {
        let ms = value_us as f64 / 1000.0;
        let x = |seen: u64| 1.0 / (1.0 - seen as f64 / n).max(1.0 / n);
        points.push((x(below), ms));
        below += count;
        points.push((x(below), ms));
    }
    points
}

/// "99.9%" for x = 1000.
fn percentile_label(x: f64) -> String {
    let p = (1.0 - 1.0 / x) * 100.0;
    if p < 99.0 {
        format!("{p:.0}%")
    } else {
        let digits = (-(100.0 - p).log10() - 1e-6).ceil().max(0.0) as usize;
        format!("{p:.digits$}%")
    }
}

pub(crate) fn percentile_plot(phases: &[(&'static str, &LatencySummary)]) -> String {
    let series: Vec<(String, Vec<(f64, f64)>)> = phases
        .iter()
        .map(|(name, s)| (name.to_string(), percentile_points(s)))
        .collect();
    let labels: Vec<String> = series.iter().map(|s| s.0.clone()).collect();
    let height = with_legend_height(HEIGHT, &labels, WIDTH);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let _ = draw_percentiles(&root, &series);
    }
    svg
}

fn draw_percentiles(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let (plot_area, legend_area) = root.split_vertically(HEIGHT);
    let all = || series.iter().flat_map(|s| s.1.iter());
    let x_max = all().map(|p| p.0).fold(2.0, f64::max);
    let y_min = all().map(|p| p.1).fold(f64::MAX, f64::min).max(0.001) * 0.8;
    let y_max = all().map(|p| p.1).fold(0.0, f64::max).max(y_min * 1.5) * 1.2;
    let mut chart = ChartBuilder::on(&plot_area)
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((1.0..x_max).log_scale(), (y_min..y_max).log_scale())?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(238, 238, 238))
        .x_label_formatter(&|x: &f64| percentile_label(*x))
        .x_desc("percentile")
        .y_desc("ms (log scale)")
        .draw()?;
    for (k, (_, pts)) in series.iter().enumerate() {
        chart.draw_series(LineSeries::new(
            pts.iter().copied(),
            color(k).stroke_width(2),
        ))?;
    }
    draw_legend(&legend_area, &legend_of(series), Mark::Line)?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_go_right_as_they_get_rarer() {
        let s = LatencySummary {
            count: 4,
            histogram: vec![[1000, 2], [2000, 1], [9000, 1]],
            ..LatencySummary::default()
        };
        // Half at 1 ms (up to the median, x = 2), one more at 2 ms (p75, x = 4), the last at
        // 9 ms, placed at one in four.
        assert_eq!(
            percentile_points(&s),
            vec![
                (1.0, 1.0),
                (2.0, 1.0),
                (2.0, 2.0),
                (4.0, 2.0),
                (4.0, 9.0),
                (4.0, 9.0)
            ]
        );
        assert_eq!(percentile_label(2.0), "50%");
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
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1000.0), "99.9%");
    }
}
