//! A latency histogram as an SVG plot: bars per time bucket, one colour per outcome (trace's
//! page and the lab's draw them alike), and the bucket labels bpftrace uses.

use model::trace::FunctionStats;
use plotters::prelude::*;

use crate::render::plot::{color, draw_legend, legend_of, with_legend_height, Mark};

const WIDTH: u32 = 860;
const HEIGHT: u32 = 320;

/// Microseconds with bpftrace's K/M suffixes for round values.
pub fn us_label(us: u64) -> String {
    if us >= 1_000_000 && us.is_multiple_of(1_000_000) {
        format!("{}s", us / 1_000_000)
    } else if us >= 1000 && us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

/// A bucket's label: "[1us, 2us)".
fn bucket_label(low_us: u64, high_us: Option<u64>) -> String {
    match high_us {
        Some(h) => format!("[{}, {})", us_label(low_us), us_label(h)),
        None => format!("[{}, ...)", us_label(low_us)),
    }
}

/// Bars per time bucket, one colour per outcome side by side, over the buckets any of the
/// outcomes used (so a failure's time lines up with a success's).
pub fn histogram_plot(name: &str, of: &[&FunctionStats]) -> String {
    let mut bounds: Vec<(u64, Option<u64>)> = of
        .iter()
        .flat_map(|f| f.buckets.iter().map(|b| (b.low_us, b.high_us)))
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    if bounds.is_empty() {
        return String::new();
    }
    let series: Vec<(String, Vec<u64>)> = of
        .iter()
        .map(|f| {
            let label = match f.pid {
                Some(pid) => format!("{} (pid {pid})", f.outcome),
                None => f.outcome.clone(),
            };
            let counts = bounds
                .iter()
                .map(|&(low, high)| {
                    f.buckets
                        .iter()
                        .find(|b| (b.low_us, b.high_us) == (low, high))
                        .map_or(0, |b| b.count)
                })
                .collect();
            (label, counts)
        })
        .collect();
    let labels: Vec<String> = series.iter().map(|s| s.0.clone()).collect();
    let height = with_legend_height(HEIGHT, &labels, WIDTH);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let _ = draw_histogram(&root, name, &bounds, &series);
    }
    svg
}

fn draw_histogram(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    name: &str,
    bounds: &[(u64, Option<u64>)],
    series: &[(String, Vec<u64>)],
) -> Result<(), Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let (plot_area, legend_area) = root.split_vertically(HEIGHT);
    let y_max = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.1;
    let n = bounds.len();
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(name, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..y_max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n.min(24))
        .x_label_formatter(&|x: &f64| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < n {
                let (low, high) = bounds[i as usize];
                bucket_label(low, high)
            } else {
                String::new()
            }
        })
        .y_desc("calls")
        .draw()?;
    let width = 0.8 / series.len().max(1) as f64;
    for (k, (_, counts)) in series.iter().enumerate() {
        let c = color(k);
        chart.draw_series(counts.iter().enumerate().map(|(i, &count)| {
            let left = i as f64 - 0.4 + k as f64 * width;
            Rectangle::new([(left, 0.0), (left + width, count as f64)], c.filled())
        }))?;
    }
    draw_legend(&legend_area, &legend_of(series), Mark::Box)?;
    root.present()?;
    Ok(())
}
