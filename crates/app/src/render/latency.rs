//! Latency by percentile: each phase of a run on a log axis (HDR-style: the tail gets the
//! room), as bench's and the lab's pages draw it.

use plotters::prelude::*;
use stats::LatencySummary;

use crate::render::plot::{color, draw_legend, legend_of, with_legend_height, Mark};

/// The size of a run's plots, legend aside.
pub const WIDTH: u32 = 860;
pub const HEIGHT: u32 = 380;

/// The phases with samples, as (name, summary).
pub fn phases(r: &load::result::RunResult) -> Vec<(&'static str, &LatencySummary)> {
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

pub fn percentile_plot(phases: &[(&'static str, &LatencySummary)]) -> String {
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
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1000.0), "99.9%");
    }
}
