//! The compare report as one self-contained HTML page: the tables, and SVG plots drawn with
//! plotters (latency CDF per variant, medians with their intervals, the handshakes obtained).
//! Nothing is loaded from the network.

use std::path::Path;

use model::compare::CompareDocument;
use plotters::prelude::*;

use crate::render::html::{escape, figure, html_table};
use crate::render::plot::per_variant_chart;

use super::render::{describe_experiment, metric_meaning, metric_tables, negotiated_table};

const WIDTH: u32 = 860;
const HEIGHT: u32 = 420;

/// The page.
pub fn page(doc: &CompareDocument) -> String {
    page_with_profiles(doc, &[])
}

/// A variant's profile (`compare --profile`), as the page links it: addresses relative to the
/// page, or absolute.
pub struct ProfileLinks {
    pub label: String,
    pub flamegraph: String,
    /// The differential flame graph against the first variant (none for the first).
    pub differential: Option<String>,
}

/// The page, with a section of flame graphs (each shown, and linked for its interactive view).
pub fn page_with_profiles(doc: &CompareDocument, profiles: &[ProfileLinks]) -> String {
    let mut body = String::new();
    body += &format!("<h1>{}</h1>\n", escape(&describe_experiment(doc)));
    let env = &doc.environment;
    body += &format!(
        "<p>Machine: {} ({}), kernel {}, started {}; tlsscope {}.</p>\n",
        escape(&env.cpu_model),
        crate::render::words::count(env.cpus, "CPU"),
        escape(&env.kernel),
        escape(&env.started_at),
        escape(&env.tlsscope_version)
    );
    body += "<h2>Variants</h2>\n";
    body += &html_table(&super::render::variants_table(doc));
    for (name, table) in metric_tables(doc) {
        body += &format!("<h2>{}</h2>\n", escape(&name));
        let meaning = metric_meaning(&name);
        if !meaning.is_empty() {
            body += &format!("<p>{}.</p>\n", escape(meaning));
        }
        body += &html_table(&table);
        body += &figure(
            &cdf_plot(doc, &name),
            &format!("{name}: distribution per variant (CDF)"),
        );
        body += &figure(
            &medians_plot(doc, &name),
            &format!(
                "{name}: median per variant, with its {:.0}% interval (bootstrap; order statistics for histograms)",
                doc.level * 100.0
            ),
        );
    }
    let mix = negotiated_table(doc);
    if !mix.rows.is_empty() {
        body += "<h2>Handshakes obtained</h2>\n";
        body += &html_table(&mix);
        body += &figure(&mix_plot(doc), "handshakes obtained per variant, by kind");
    }
    let wire = super::render::wire_table(doc);
    if !wire.rows.is_empty() {
        body += "<h2>On the wire, per handshake</h2>\n";
        body += &html_table(&wire);
    }
    let servers = super::render::server_table(doc);
    if !servers.rows.is_empty() {
        body += "<h2>The servers' own counts</h2>\n<p>Handshakes the built-in server counted, or connections nginx handled (stub_status), against the connections the clients of every variant using that server made; and the libssl the server process mapped.</p>\n";
        body += &html_table(&servers);
    }
    if !doc.scaling.is_empty() {
        body += &format!(
            "<h2>Scaling with threads</h2>\n<p>{}.</p>\n",
            escape(super::render::SCALING_MEANING)
        );
        body += &html_table(&super::render::scaling_table(doc));
        for metric in ["engine_rate", "load_handshake_rate"] {
            let svg = scaling_plot(doc, metric);
            if !svg.is_empty() {
                body += &figure(
                    &svg,
                    &format!("{metric} against threads, per library and settings, as a multiple of the same settings' rate on one thread (medians over the rounds; the rates are in the table)"),
                );
            }
        }
    }
    if !profiles.is_empty() {
        body += "<h2>Where the CPU goes (compare --profile)</h2>\n<p>Flame graphs of each variant's measured operations (perf, DWARF stacks); the second of each pair is the difference from the first variant (red: more CPU per operation, blue: less). Open one for its interactive view.</p>\n";
        for p in profiles {
            body += &format!("<h3>{}</h3>\n", escape(&p.label));
            for href in std::iter::once(&p.flamegraph).chain(p.differential.as_ref()) {
                body += &format!(
                    "<p><a href=\"{0}\"><img class=\"flame\" src=\"{0}\" alt=\"{0}\"></a></p>\n",
                    escape(href)
                );
            }
        }
    }
    if !doc.warnings.is_empty() {
        body += "<h2>Warnings</h2>\n<ul>\n";
        for w in &doc.warnings {
            body += &format!("<li>{}</li>\n", escape(w));
        }
        body += "</ul>\n";
    }
    crate::render::html::page("tlsscope compare", &body)
}

/// Axis scale for a unit: microseconds are shown in milliseconds.
fn scale(unit: &str) -> (f64, &str) {
    if unit == "us" {
        (1000.0, "ms")
    } else {
        (1.0, unit)
    }
}

/// One line per variant: the fraction of samples at or below each value.
fn cdf_plot(doc: &CompareDocument, metric: &str) -> String {
    let series: Vec<Series> = doc
        .variants
        .iter()
        .filter_map(|v| {
            let m = v.metrics.iter().find(|m| m.name == metric)?;
            let (div, _) = scale(&m.unit);
            // Samples count one each; a histogram's cells by their counts.
            let mut sorted: Vec<(f64, f64)> = m
                .samples
                .iter()
                .map(|x| (x / div, 1.0))
                .chain(m.histogram.iter().map(|c| (c[0] / div, c[1])))
                .filter(|p| p.1 > 0.0)
                .collect();
            sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
            if sorted.is_empty() {
                return None;
            }
            Some((
                v.label.clone(),
                crate::render::plot::cdf_steps_weighted(&sorted),
                m.unit.clone(),
            ))
        })
        .collect();
    let mut svg = String::new();
    if series.is_empty() {
        return svg;
    }
    let unit = scale(&series[0].2).1.to_string();
    // Up to the largest p99 (a long tail would squash the rest), and at least the medians.
    let x_max = series
        .iter()
        .map(|(_, p, _)| {
            p.iter()
                .find(|point| point.1 >= 0.99)
                .or(p.last())
                .map_or(0.0, |point| point.0)
        })
        .fold(0.0, f64::max)
        * 1.05;
    let labels: Vec<String> = series.iter().map(|s| s.0.clone()).collect();
    let height = crate::render::plot::with_legend_height(HEIGHT, &labels, WIDTH);
    let x_min = series
        .iter()
        .map(|(_, p, _)| p[0].0)
        .fold(f64::MAX, f64::min)
        * 0.95;
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let _ = draw_cdf(
            &root,
            metric,
            &unit,
            &series,
            x_min,
            x_max.max(x_min * 1.01 + 1e-9),
        );
    }
    svg
}

/// A CDF line: the variant, its (value, fraction) points, the metric's unit.
type Series = (String, Vec<(f64, f64)>, String);

fn draw_cdf(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    metric: &str,
    unit: &str,
    series: &[Series],
    x_min: f64,
    x_max: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let (plot_area, legend_area) = root.split_vertically(HEIGHT);
    // Variants from 0.7 to 56 ms on a linear axis squash all but one against it: over tenfold,
    // the axis is logarithmic.
    macro_rules! draw_on {
        ($x_range:expr, $x_desc:expr) => {{
            let mut chart = ChartBuilder::on(&plot_area)
                .caption(format!("{metric}: CDF"), ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(50)
                .build_cartesian_2d($x_range, 0.0..1.0)?;
            chart
                .configure_mesh()
                .x_labels(8)
                .light_line_style(RGBColor(238, 238, 238))
                .x_desc($x_desc)
                .y_desc("fraction of samples")
                .draw()?;
            for (i, (_, points, _)) in series.iter().enumerate() {
                chart.draw_series(LineSeries::new(
                    points.iter().copied(),
                    crate::render::plot::color(i).stroke_width(2),
                ))?;
            }
        }};
    }
    if crate::render::plot::wide(x_min, x_max) {
        draw_on!((x_min..x_max).log_scale(), format!("{unit} (log scale)"));
    } else {
        draw_on!(x_min..x_max, unit.to_string());
    }
    let entries: Vec<_> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.0.clone(), crate::render::plot::color(i)))
        .collect();
    crate::render::plot::draw_legend(&legend_area, &entries, crate::render::plot::Mark::Line)?;
    root.present()?;
    Ok(())
}

/// A bar: the variant, its median, the interval's ends, the metric's unit.
type Bar = (String, f64, f64, f64, String);

/// A bar per variant at its median, with the interval as an error bar.
fn medians_plot(doc: &CompareDocument, metric: &str) -> String {
    let bars: Vec<Bar> = doc
        .variants
        .iter()
        .filter_map(|v| {
            let m = v.metrics.iter().find(|m| m.name == metric)?;
            let (div, _) = scale(&m.unit);
            Some((
                v.label.clone(),
                m.median.estimate / div,
                m.median.low / div,
                m.median.high / div,
                m.unit.clone(),
            ))
        })
        .collect();
    let mut svg = String::new();
    if bars.is_empty() {
        return svg;
    }
    let unit = scale(&bars[0].4).1.to_string();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        let _ = draw_bars(&root, &format!("{metric}: medians ({unit})"), &unit, &bars);
    }
    svg
}

fn draw_bars(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    unit: &str,
    bars: &[Bar],
) -> Result<(), Box<dyn std::error::Error>> {
    let y_max = bars.iter().map(|b| b.3).fold(0.0, f64::max).max(1e-9) * 1.15;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let mut chart = per_variant_chart(root, caption, &labels, y_max, unit)?;
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        let x = i as f64;
        Rectangle::new(
            [(x - 0.3, 0.0), (x + 0.3, b.1)],
            crate::render::plot::color(i).mix(0.8).filled(),
        )
    }))?;
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        ErrorBar::new_vertical(i as f64, b.2, b.1, b.3, BLACK.stroke_width(2), 12)
    }))?;
    root.present()?;
    Ok(())
}

/// Speedup against threads: one line per set of variants that differ only in their threads,
/// each rate divided by the same settings' rate on one thread (so full and resumed handshakes,
/// tens of times apart in rate, share one axis), beside the line of perfect scaling.
fn scaling_plot(doc: &CompareDocument, metric: &str) -> String {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for v in doc.variants.iter().filter(|v| v.measured()) {
        let Some(m) = v.metrics.iter().find(|m| m.name == metric) else {
            continue;
        };
        let Some(n) = v
            .settings
            .get("threads")
            .and_then(|t| t.parse::<f64>().ok())
        else {
            continue;
        };
        let label = v
            .label
            .split(' ')
            .filter(|w| !w.starts_with("threads="))
            .collect::<Vec<_>>()
            .join(" ");
        let label = match label.is_empty() {
            true => format!("openssl={}", v.settings.get("openssl").map_or("?", |s| s)),
            false => label,
        };
        let point = (n, m.summary.median);
        match series.iter_mut().find(|(l, _)| *l == label) {
            Some((_, points)) => points.push(point),
            None => series.push((label, vec![point])),
        }
    }
    // Only sets measured at one thread and more, as speedups over the one-thread rate.
    series.retain_mut(|(_, points)| {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        match points.first() {
            Some(&(1.0, base)) if points.len() > 1 && base > 0.0 => {
                points.iter_mut().for_each(|p| p.1 /= base);
                true
            }
            _ => false,
        }
    });
    let mut svg = String::new();
    let Some(most) = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .reduce(f64::max)
    else {
        return svg;
    };
    series.insert(
        0,
        (
            "perfect scaling (N x)".into(),
            vec![(1.0, 1.0), (most, most)],
        ),
    );
    let labels: Vec<String> = series.iter().map(|s| s.0.clone()).collect();
    let height = crate::render::plot::with_legend_height(HEIGHT, &labels, WIDTH);
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let _ = crate::render::plot::draw_lines_over(
            &root,
            HEIGHT,
            &series,
            ("threads", false),
            "rate / rate at 1 thread",
        );
    }
    svg
}

/// Stacked bars: per variant, how many handshakes of each kind it obtained.
fn mix_plot(doc: &CompareDocument) -> String {
    let mut kinds: Vec<String> = Vec::new();
    for v in &doc.variants {
        for n in &v.negotiated {
            let k = format!("{} {}", n.version, n.handshake);
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
    }
    let counts: Vec<(String, Vec<u64>)> = doc
        .variants
        .iter()
        .filter(|v| !v.negotiated.is_empty())
        .map(|v| {
            let per_kind = kinds
                .iter()
                .map(|k| {
                    v.negotiated
                        .iter()
                        .filter(|n| &format!("{} {}", n.version, n.handshake) == k)
                        .map(|n| n.count)
                        .sum()
                })
                .collect();
            (v.label.clone(), per_kind)
        })
        .collect();
    let mut svg = String::new();
    if counts.is_empty() {
        return svg;
    }
    {
        let height = crate::render::plot::with_legend_height(HEIGHT, &kinds, WIDTH);
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let _ = draw_mix(&root, &kinds, &counts);
    }
    svg
}

fn draw_mix(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    kinds: &[String],
    counts: &[(String, Vec<u64>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let y_max = counts
        .iter()
        .map(|c| c.1.iter().sum::<u64>())
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.1;
    let labels: Vec<String> = counts.iter().map(|c| c.0.clone()).collect();
    root.fill(&WHITE)?;
    let (plot_area, legend_area) = root.split_vertically(HEIGHT);
    let mut chart = per_variant_chart(
        &plot_area,
        "handshakes obtained",
        &labels,
        y_max,
        "handshakes",
    )?;
    for (k, _) in kinds.iter().enumerate() {
        let color = crate::render::plot::color(k);
        chart.draw_series(counts.iter().enumerate().map(|(i, (_, per_kind))| {
            let below: u64 = per_kind[..k].iter().sum();
            let x = i as f64;
            Rectangle::new(
                [
                    (x - 0.3, below as f64),
                    (x + 0.3, (below + per_kind[k]) as f64),
                ],
                color.filled(),
            )
        }))?;
    }
    let entries: Vec<_> = kinds
        .iter()
        .enumerate()
        .map(|(k, kind)| (kind.clone(), crate::render::plot::color(k)))
        .collect();
    crate::render::plot::draw_legend(&legend_area, &entries, crate::render::plot::Mark::Box)?;
    root.present()?;
    Ok(())
}

/// The flame graphs the matrix's profiling wrote into `dir` for each variant, as the HTML page
/// at `page` links them.
pub fn profile_links(doc: &CompareDocument, dir: &Path, page: &Path) -> Vec<ProfileLinks> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    doc.variants
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let stem = super::profiles::file_stem(i, &v.label);
            let svg = format!("{stem}.svg");
            names.contains(&svg).then(|| {
                let diff = names
                    .iter()
                    .find(|n| n.starts_with(&format!("{stem}-vs-")) && n.ends_with(".svg"));
                ProfileLinks {
                    label: v.label.clone(),
                    flamegraph: href(page, &dir.join(&svg)),
                    differential: diff.map(|d| href(page, &dir.join(d))),
                }
            })
        })
        .collect()
}

/// `target` as a link from the page: relative when it lies under the page's directory.
fn href(page: &Path, target: &Path) -> String {
    let absolute = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let base = page
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let target = absolute(target);
    match target.strip_prefix(absolute(base)) {
        Ok(relative) => relative.display().to_string(),
        Err(_) => format!("file://{}", target.display()),
    }
}
