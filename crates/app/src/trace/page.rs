//! `tlsscope trace --html`: the trace as one self-contained page. The environment and the
//! probes, the stats table, a histogram per function and outcome (ssllatency's `@hist` and
//! `@histF` side by side), and with `-i` the calls and mean time per interval.

use model::trace::{FunctionStats, Interval, TraceDocument};
use plotters::prelude::*;

use crate::render::histogram::histogram_plot;
use crate::render::html::{escape, figure, html_table};
use crate::render::plot::with_legend_height;
use crate::render::table::Table;
use crate::render::words::duration;

const WIDTH: u32 = 860;
const HEIGHT: u32 = 320;

/// The page.
pub fn page(doc: &TraceDocument, intervals: &[Interval]) -> String {
    let mut body = format!(
        "<h1>tlsscope trace: {}</h1>\n",
        escape(&doc.targets.join(", "))
    );
    body += &environment(doc);
    body += "<h2>Calls</h2>\n";
    body += &html_table(&stats_table(&doc.functions));
    body += &format!(
        "<p>Probe cost: {} probed calls, about {:.3} CPU-s at {:.2} us each (measured at start-up); {} histogram cells lost.</p>\n",
        doc.overhead.probed_calls,
        doc.overhead.estimated_cpu_s,
        doc.overhead.cost_ns_per_call / 1000.0,
        doc.dropped_cells
    );
    if !intervals.is_empty() {
        body += "<h2>Over time</h2>\n";
        body += &figure(
            &interval_plot(intervals, Measure::Calls),
            "calls per interval, by function (all outcomes)",
        );
        body += &figure(
            &interval_plot(intervals, Measure::MeanUs),
            "mean time per call in each interval, by function (us)",
        );
    }
    body += "<h2>Histograms</h2>\n<p>Per function, the time of each call by outcome: success, retry (the call would block: WANT_READ, WANT_WRITE and kin) and failure, as ssllatency splits them.</p>\n";
    let mut names: Vec<&str> = doc.functions.iter().map(|f| f.function.as_str()).collect();
    names.dedup();
    for name in names {
        let of: Vec<&FunctionStats> = doc
            .functions
            .iter()
            .filter(|f| f.function == name)
            .collect();
        body += &format!("<h3>{}</h3>\n", escape(name));
        body += &figure(
            &histogram_plot(name, &of),
            &format!("{name}: calls per time bucket, by outcome"),
        );
    }
    crate::render::html::page("tlsscope trace", &body)
}

fn environment(doc: &TraceDocument) -> String {
    let env = &doc.environment;
    let libraries: Vec<String> = env
        .traced_libraries
        .iter()
        .map(|l| {
            if l.version.is_empty() {
                l.path.clone()
            } else {
                format!("{} ({})", l.path, l.version)
            }
        })
        .collect();
    format!(
        "<p>Machine: {} ({}), kernel {}, started {}; tlsscope {}. Backend: {}; {:.1} s traced; {} attached, {} not; libraries: {}.</p>\n",
        escape(&env.cpu_model),
        crate::render::words::count(env.cpus as u64, "CPU"),
        escape(&env.kernel),
        escape(&env.started_at),
        escape(&env.tlsscope_version),
        escape(&doc.backend),
        doc.duration_s,
        crate::render::words::count(doc.attached.len() as u64, "probe"),
        doc.not_attached.len(),
        escape(&libraries.join(", "))
    )
}

fn stats_table(functions: &[FunctionStats]) -> Table {
    let per_pid = functions.iter().any(|f| f.pid.is_some());
    let mut header: Vec<String> = [
        "function", "outcome", "count", "avg", "total", "p50", "p90", "p99",
    ]
    .map(String::from)
    .to_vec();
    if per_pid {
        header.insert(0, "pid".into());
    }
    let rows = functions
        .iter()
        .map(|f| {
            let s = &f.summary;
            let mut row = vec![
                f.function.clone(),
                f.outcome.clone(),
                s.count.to_string(),
                duration(s.mean_us),
                duration(s.total_ns as f64 / 1000.0),
                duration(s.p50_us),
                duration(s.p90_us),
                duration(s.p99_us),
            ];
            if per_pid {
                row.insert(0, f.pid.map_or("-".into(), |p| p.to_string()));
            }
            row
        })
        .collect();
    Table { header, rows }
}

#[derive(Clone, Copy)]
enum Measure {
    Calls,
    MeanUs,
}

/// A line per function over the intervals.
fn interval_plot(intervals: &[Interval], measure: Measure) -> String {
    let mut names: Vec<String> = intervals
        .iter()
        .flat_map(|i| i.functions.iter().map(|f| f.function.clone()))
        .collect();
    names.sort();
    names.dedup();
    let series: Vec<(String, Vec<(f64, f64)>)> = names
        .iter()
        .map(|name| {
            let points = intervals
                .iter()
                .map(|i| {
                    let of = i.functions.iter().filter(|f| &f.function == name);
                    let (count, ns) = of.fold((0u64, 0u64), |(c, t), f| {
                        (c + f.summary.count, t + f.summary.total_ns)
                    });
                    let y = match measure {
                        Measure::Calls => count as f64,
                        Measure::MeanUs if count > 0 => ns as f64 / 1000.0 / count as f64,
                        Measure::MeanUs => 0.0,
                    };
                    (i.at_s, y)
                })
                .collect();
            (name.clone(), points)
        })
        .collect();
    if series.is_empty() {
        return String::new();
    }
    let height = with_legend_height(HEIGHT, &names, WIDTH);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let y_desc = match measure {
            Measure::Calls => "calls",
            Measure::MeanUs => "us per call",
        };
        let _ = crate::render::plot::draw_lines(&root, HEIGHT, &series, y_desc);
    }
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use stats::buckets::{Bucket, BucketSummary};

    fn f(name: &str, outcome: &str, buckets: &[(u64, u64, u64)]) -> FunctionStats {
        let buckets: Vec<Bucket> = buckets
            .iter()
            .map(|&(low_us, high, count)| Bucket {
                low_us,
                high_us: Some(high),
                count,
                total_ns: None,
            })
            .collect();
        let count = buckets.iter().map(|b| b.count).sum();
        FunctionStats {
            function: name.into(),
            group: "handshake".into(),
            outcome: outcome.into(),
            pid: None,
            summary: BucketSummary {
                count,
                total_ns: count * 2000,
                mean_us: 2.0,
                ..BucketSummary::default()
            },
            buckets,
        }
    }

    #[test]
    fn a_plot_per_function_with_each_outcome_and_the_intervals() {
        let mut doc = TraceDocument::new(model::Environment::default());
        doc.targets = vec!["pid 1".into()];
        doc.functions = vec![
            f(
                "SSL_do_handshake",
                "success",
                &[(512, 1024, 5), (1024, 2048, 2)],
            ),
            f("SSL_do_handshake", "retry", &[(4, 8, 9)]),
            f("SSL_read", "success", &[(8, 16, 40)]),
        ];
        let intervals = [
            Interval {
                at_s: 1.0,
                functions: doc.functions.clone(),
            },
            Interval {
                at_s: 2.0,
                functions: doc.functions[..1].to_vec(),
            },
        ];
        let page = page(&doc, &intervals);
        // Two histograms and two interval plots.
        assert_eq!(page.matches("<figure>").count(), 4, "{page}");
        assert!(page.contains("<h3>SSL_do_handshake</h3>") && page.contains("<h3>SSL_read</h3>"));
        // The handshake's plot has both outcomes in its legend and a bar slot for each bucket
        // either used.
        let hs = &page[page.find("<h3>SSL_do_handshake</h3>").unwrap()..];
        let hs = &hs[..hs.find("</figure>").unwrap()];
        for needle in ["\nsuccess\n", "\nretry\n", "[4us, 8us)", "[512us, 1024us)"] {
            assert!(hs.contains(needle), "{needle}: {hs}");
        }
        assert!(!page.contains("src=\"http"));
    }
}
