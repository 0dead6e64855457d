//! What every page's plots share: colours that read on white, a legend beside the plot rather
//! than over it, empirical CDFs drawn as steps, and a log axis where values span more than
//! tenfold.

use plotters::prelude::*;
use plotters::style::RGBColor;

/// Series colours: dark and saturated enough to read as thin lines on white (no yellow), in an
/// order where neighbours differ.
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),  // blue
    RGBColor(214, 39, 40),   // red
    RGBColor(44, 160, 44),   // green
    RGBColor(148, 103, 189), // purple
    RGBColor(255, 127, 14),  // orange
    RGBColor(23, 140, 160),  // teal
    RGBColor(140, 86, 75),   // brown
    RGBColor(227, 119, 194), // pink
    RGBColor(90, 90, 90),    // grey
    RGBColor(0, 0, 128),     // navy
];

/// The colour of series `i`.
pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// How far a colour stands out from white: its relative luminance (0 black, 1 white).
pub fn luminance(c: RGBColor) -> f64 {
    let lin = |v: u8| {
        let v = f64::from(v) / 255.0;
        if v <= 0.04045 {
            v / 12.92
        } else {
            ((v + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * lin(c.0) + 0.7152 * lin(c.1) + 0.0722 * lin(c.2)
}

/// Whether values from `min` to `max` span more than tenfold: then an axis is logarithmic, or
/// the small ones are squashed against it.
pub fn wide(min: f64, max: f64) -> bool {
    min > 0.0 && max / min > 10.0
}

/// An empirical CDF of sorted values as a step line: flat between values, rising at each, so a
/// few samples show as the steps they are rather than as slopes between them.
pub fn cdf_steps(sorted: &[f64]) -> Vec<(f64, f64)> {
    let weighted: Vec<(f64, f64)> = sorted.iter().map(|&x| (x, 1.0)).collect();
    cdf_steps_weighted(&weighted)
}

/// Like [`cdf_steps`], for (value, count) pairs sorted by value (a histogram's cells).
pub fn cdf_steps_weighted(sorted: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let n: f64 = sorted.iter().map(|p| p.1).sum();
    let mut points = Vec::with_capacity(sorted.len() * 2);
    let mut below = 0.0;
    for &(x, count) in sorted {
        points.push((x, below / n));
        below += count;
        points.push((x, below / n));
    }
    points
}

/// How a legend entry is marked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    Line,
    Box,
}

/// A legend entry per series, in the series' colours.
pub fn legend_of<T>(series: &[(String, T)]) -> Vec<(String, RGBColor)> {
    series
        .iter()
        .enumerate()
        .map(|(k, s)| (s.0.clone(), color(k)))
        .collect()
}

/// Rows a legend of `entries` needs below a plot `width` wide.
pub fn legend_rows(labels: &[String], width: u32) -> u32 {
    let per_row = (width / LEGEND_COLUMN).max(1) as usize;
    labels.len().div_ceil(per_row) as u32
}

const LEGEND_COLUMN: u32 = 280;
pub const LEGEND_ROW: u32 = 20;

/// Draws the legend in its own area (below the plot, so it covers no data): a mark in the
/// series' colour and its label, in columns.
pub fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    entries: &[(String, RGBColor)],
    mark: Mark,
) -> Result<(), Box<dyn std::error::Error>> {
    area.fill(&WHITE)?;
    let (width, _) = area.dim_in_pixel();
    let per_row = (width / LEGEND_COLUMN).max(1) as usize;
    for (i, (label, c)) in entries.iter().enumerate() {
        let x = 60 + (i % per_row) as i32 * LEGEND_COLUMN as i32;
        let y = 10 + (i / per_row) as i32 * LEGEND_ROW as i32;
        match mark {
            Mark::Line => {
                area.draw(&PathElement::new(
                    vec![(x, y), (x + 18, y)],
                    c.stroke_width(3),
                ))?;
            }
            Mark::Box => {
                area.draw(&Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()))?;
            }
        }
        area.draw(&Text::new(
            label.clone(),
            (x + 24, y - 7),
            ("sans-serif", 13).into_font(),
        ))?;
    }
    Ok(())
}

/// A plot area `width` x `height` with room for a legend of `labels` below it: the plot's area
/// and the legend's, and the whole height.
pub fn with_legend_height(height: u32, labels: &[String], width: u32) -> u32 {
    height + 10 + legend_rows(labels, width) * LEGEND_ROW
}

/// Lines over time, `plot_height` tall with the legend below: (label, (seconds, value)
/// points) each.
pub fn draw_lines(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    plot_height: u32,
    series: &[(String, Vec<(f64, f64)>)],
    y_desc: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    draw_lines_over(root, plot_height, series, ("seconds", true), y_desc)
}

/// Lines over any x (`x_desc`, and whether its axis starts at 0 or at the smallest x, with a
/// margin on both sides), as [`draw_lines`].
pub fn draw_lines_over(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    plot_height: u32,
    series: &[(String, Vec<(f64, f64)>)],
    (x_desc, x_from_zero): (&str, bool),
    y_desc: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let (plot_area, legend_area) = root.split_vertically(plot_height);
    let points = || series.iter().flat_map(|s| s.1.iter());
    let x_max = points().map(|p| p.0).fold(0.0, f64::max).max(1e-9);
    let x_range = if x_from_zero {
        0.0..x_max
    } else {
        let x_min = points().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let pad = ((x_max - x_min) * 0.05).max(0.05);
        (x_min - pad)..(x_max + pad)
    };
    let y_max = points().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.1;
    let mut chart = ChartBuilder::on(&plot_area)
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range, 0.0..y_max)?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(238, 238, 238))
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()?;
    for (k, (_, pts)) in series.iter().enumerate() {
        let c = color(k);
        chart.draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?;
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
    }
    draw_legend(&legend_area, &legend_of(series), Mark::Line)?;
    root.present()?;
    Ok(())
}

pub type VariantChart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// A chart with one slot per variant (or experiment) along x, labelled with `labels`, and
/// 0..y_max up.
pub fn per_variant_chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: &str,
    labels: &[String],
    y_max: f64,
    y_desc: &str,
) -> Result<VariantChart<'a, 'b>, Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let n = labels.len();
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..y_max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x: &f64| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_desc(y_desc.to_string())
        .draw()?;
    Ok(chart)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_colour_reads_on_white() {
        // Yellow (Palette99's third, luminance about 0.8) is what was barely visible.
        for c in PALETTE {
            assert!(luminance(c) < 0.45, "{c:?}: {}", luminance(c));
        }
        assert!(luminance(RGBColor(230, 230, 0)) > 0.45);
    }

    #[test]
    fn a_cdf_is_steps() {
        assert_eq!(
            cdf_steps(&[1.0, 3.0]),
            vec![(1.0, 0.0), (1.0, 0.5), (3.0, 0.5), (3.0, 1.0)]
        );
    }

    #[test]
    fn over_tenfold_is_wide() {
        assert!(wide(0.7, 56.0));
        assert!(!wide(0.7, 1.3));
        assert!(!wide(0.0, 5.0), "no log axis through zero");
    }

    #[test]
    fn the_legend_takes_rows_below_the_plot() {
        let labels: Vec<String> = (0..8).map(|i| format!("variant {i}")).collect();
        assert_eq!(legend_rows(&labels, 860), 3);
        assert_eq!(with_legend_height(420, &labels, 860), 420 + 10 + 60);
    }
}
