//! `tlsscope lab --html`: the lab as one self-contained page. At the top the environment, the
//! rates of every experiment untraced and traced, and where a handshake's (or request's) server
//! time goes, a stacked bar per experiment; then per experiment the handshakes obtained, both
//! sides' CPU per operation, the latency by percentile per phase, and the server's traced calls
//! as histograms per function and outcome.

use load::RunResult;
use model::lab::{LabExperiment, LabTraced};
use model::trace::FunctionStats;
use model::Environment;
use plotters::prelude::*;

use crate::lab::render::unit;
use crate::render::html::{escape, figure, html_table};
use crate::render::plot::{color, draw_legend, with_legend_height, Mark};
use crate::render::table::Table;
use crate::render::words::duration;

const WIDTH: u32 = 860;
const HEIGHT: u32 = 360;

/// An experiment as the HTML page shows it (owned: the page is written at the end).
pub fn kept_experiment<E: std::fmt::Display>(
    name: &str,
    measured: &Result<super::session::Measured, E>,
) -> LabExperiment {
    match measured {
        Ok(m) => LabExperiment {
            name: name.to_string(),
            note: m.note.clone(),
            untraced: Some(m.untraced.clone()),
            traced: m
                .traced
                .iter()
                .map(|t| LabTraced {
                    backend: t.backend.describe().to_string(),
                    result: t.result.clone(),
                    calls: t.calls.clone(),
                })
                .collect(),
            error: None,
        },
        Err(e) => LabExperiment {
            name: name.to_string(),
            note: None,
            untraced: None,
            traced: Vec::new(),
            error: Some(e.to_string()),
        },
    }
}

/// The page; `notes` are the closing lines of the text report (probe cost, what was not
/// traced).
pub fn page(
    heading: &str,
    env: &Environment,
    experiments: &[LabExperiment],
    notes: &[String],
) -> String {
    let mut body = format!("<h1>{}</h1>\n", escape(heading));
    body += &format!(
        "<p>Machine: {} ({}), kernel {}, started {}; tlsscope {}; library {}.</p>\n",
        escape(&env.cpu_model),
        crate::render::words::count(env.cpus, "CPU"),
        escape(&env.kernel),
        escape(&env.started_at),
        escape(&env.tlsscope_version),
        escape(&env.library)
    );
    body += "<h2>Rates, untraced and traced</h2>\n";
    body += &html_table(&rates_table(experiments));
    for n in notes {
        body += &format!("<p>{}</p>\n", escape(n));
    }
    let bars: Vec<(String, Vec<(&'static str, f64)>)> = experiments
        .iter()
        .filter_map(|e| {
            let t = richest(&e.traced)?;
            Some((e.name.clone(), breakdown(t)))
        })
        .collect();
    if !bars.is_empty() {
        body += "<h2>Where the server's time goes</h2>\n<p>Per operation (a handshake, or a request for keep-alive), from the traced run that saw the most functions: the time inside the traced calls (signing, key exchange, building the certificate chain, the rest of <code>SSL_do_handshake</code>, <code>SSL_read</code>/<code>SSL_write</code>) and the rest of the server's CPU per operation in that run.</p>\n";
        let names: Vec<String> = bars
            .iter()
            .enumerate()
            .map(|(i, b)| format!("#{} {}", i + 1, b.0))
            .collect();
        body += &figure(
            &breakdown_plot(&bars),
            &format!(
                "server time per operation, us, by where it goes (traced run): {}",
                names.join("; ")
            ),
        );
    }
    for e in experiments {
        body += &experiment(e);
    }
    crate::render::html::page("tlsscope lab", &body)
}

fn rates_table(experiments: &[LabExperiment]) -> Table {
    let mut backends: Vec<&str> = Vec::new();
    for t in experiments.iter().flat_map(|e| &e.traced) {
        if !backends.contains(&t.backend.as_str()) {
            backends.push(&t.backend);
        }
    }
    let mut header = vec!["experiment".to_string(), "untraced /s".to_string()];
    header.extend(backends.iter().map(|b| format!("{b} /s (change)")));
    let rows = experiments
        .iter()
        .map(|e| {
            let base = e.untraced.as_ref().map(|r| r.ops_per_s);
            let mut row = vec![
                e.name.clone(),
                base.map_or("failed".into(), |b| format!("{b:.0}")),
            ];
            for b in &backends {
                let cell = match (base, e.traced.iter().find(|t| t.backend == *b)) {
                    (Some(base), Some(t)) => format!(
                        "{:.0} ({:+.0}%)",
                        t.result.ops_per_s,
                        100.0 * (t.result.ops_per_s / base.max(1e-9) - 1.0)
                    ),
                    _ => "-".into(),
                };
                row.push(cell);
            }
            row
        })
        .collect();
    Table { header, rows }
}

/// The traced run with the most functions seen (the kernel probes see internal functions).
fn richest(traced: &[LabTraced]) -> Option<&LabTraced> {
    traced
        .iter()
        .filter(|t| !t.calls.is_empty())
        .max_by_key(|t| t.calls.len())
}

/// Microseconds per operation in `function` (all outcomes), in `t`.
fn per_op_us(t: &LabTraced, functions: &[&str]) -> f64 {
    let ns: u64 = t
        .calls
        .iter()
        .filter(|c| functions.contains(&c.function.as_str()))
        .map(|c| c.summary.total_ns)
        .sum();
    ns as f64 / 1000.0 / t.result.ops.max(1) as f64
}

/// Where a traced run's server time per operation goes, in microseconds: parts that do not
/// overlap (the signing call, not also the signing functions inside it).
pub fn breakdown(t: &LabTraced) -> Vec<(&'static str, f64)> {
    let sign = per_op_us(t, &["EVP_DigestSign"]).max(per_op_us(t, &["EVP_DigestSignFinal"]));
    let exchange = per_op_us(t, &["EVP_PKEY_derive", "EVP_PKEY_keygen"]);
    let chain = per_op_us(t, &["X509_verify_cert"]);
    let handshake = per_op_us(t, &["SSL_do_handshake"]);
    let rest_of_handshake = (handshake - sign - exchange - chain).max(0.0);
    let io = per_op_us(t, &["SSL_read", "SSL_read_ex", "SSL_write", "SSL_write_ex"]);
    let server = t.result.cpu.server.as_ref().map_or(0.0, |s| {
        (s.user_s + s.system_s) * 1e6 / t.result.ops.max(1) as f64
    });
    let traced = rest_of_handshake + sign + exchange + chain + io;
    vec![
        ("signing", sign),
        ("key exchange", exchange),
        ("certificate chain", chain),
        ("rest of SSL_do_handshake", rest_of_handshake),
        ("SSL_read / SSL_write", io),
        ("rest of the server's CPU", (server - traced).max(0.0)),
    ]
}

fn breakdown_plot(bars: &[(String, Vec<(&'static str, f64)>)]) -> String {
    let parts: Vec<String> = bars[0].1.iter().map(|p| p.0.to_string()).collect();
    let height = with_legend_height(HEIGHT, &parts, WIDTH);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        let _ = draw_breakdown(&root, bars, &parts);
    }
    svg
}

fn draw_breakdown(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    bars: &[(String, Vec<(&'static str, f64)>)],
    parts: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let (plot_area, legend_area) = root.split_vertically(HEIGHT);
    let y_max = bars
        .iter()
        .map(|b| b.1.iter().map(|p| p.1).sum::<f64>())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    // Names are too long to sit side by side: numbered here, named in the caption.
    let labels: Vec<String> = (1..=bars.len()).map(|i| format!("#{i}")).collect();
    let mut chart =
        crate::render::plot::per_variant_chart(&plot_area, "", &labels, y_max, "us per operation")?;
    for k in 0..parts.len() {
        let c = color(k);
        chart.draw_series(bars.iter().enumerate().map(|(i, (_, p))| {
            let below: f64 = p[..k].iter().map(|x| x.1).sum();
            let x = i as f64;
            Rectangle::new([(x - 0.3, below), (x + 0.3, below + p[k].1)], c.filled())
        }))?;
    }
    let entries: Vec<_> = parts
        .iter()
        .enumerate()
        .map(|(k, p)| (p.clone(), color(k)))
        .collect();
    draw_legend(&legend_area, &entries, Mark::Box)?;
    root.present()?;
    Ok(())
}

fn experiment(e: &LabExperiment) -> String {
    let mut s = format!("<h2>{}</h2>\n", escape(&e.name));
    if let Some(note) = &e.note {
        s += &format!("<p>Note: {}</p>\n", escape(note));
    }
    let Some(untraced) = &e.untraced else {
        s += &format!(
            "<p>Failed: {}</p>\n",
            escape(e.error.as_deref().unwrap_or("?"))
        );
        return s;
    };
    let per = unit(untraced);
    let obtained: Vec<String> = untraced
        .negotiated
        .iter()
        .map(|n| format!("{} x {}", n.count, n.words()))
        .collect();
    s += &format!(
        "<p>Handshakes obtained: {}.</p>\n",
        escape(&obtained.join("; "))
    );
    s += &html_table(&runs_table(untraced, &e.traced, per));
    let phases = crate::render::latency::phases(untraced);
    if !phases.is_empty() {
        s += &figure(
            &crate::render::latency::percentile_plot(&phases),
            &format!(
                "{}: client-side latency by percentile, per phase (untraced)",
                e.name
            ),
        );
    }
    if let Some(t) = richest(&e.traced) {
        s += &format!(
            "<h3>Server calls, traced by {} ({} {per}s)</h3>\n",
            escape(&t.backend),
            t.result.ops
        );
        let mut names: Vec<&str> = t.calls.iter().map(|c| c.function.as_str()).collect();
        names.dedup();
        for name in names {
            let of: Vec<&FunctionStats> = t.calls.iter().filter(|c| c.function == name).collect();
            let per_op: f64 =
                of.iter().map(|c| c.summary.count).sum::<u64>() as f64 / t.result.ops.max(1) as f64;
            s += &figure(
                &crate::render::histogram::histogram_plot(name, &of),
                &format!("{name}: {per_op:.2} calls per {per}, time per call by outcome"),
            );
        }
    }
    s
}

/// Per run (untraced, then each traced one): rate, change, both sides' CPU per operation,
/// server busy share, latency.
fn runs_table(untraced: &RunResult, traced: &[LabTraced], per: &str) -> Table {
    let header = [
        "run",
        &format!("{per}s/s"),
        "change",
        &format!("server CPU us/{per}"),
        "server busy",
        &format!("client CPU us/{per}"),
        "p50",
        "p99",
    ]
    .map(String::from)
    .to_vec();
    let row = |name: &str, r: &RunResult| {
        let ops = r.ops.max(1) as f64;
        let lat = if per == "request" {
            &r.latency.request
        } else {
            &r.latency.handshake
        };
        let server = r.cpu.server.as_ref();
        vec![
            name.to_string(),
            format!("{:.0}", r.ops_per_s),
            format!(
                "{:+.0}%",
                100.0 * (r.ops_per_s / untraced.ops_per_s.max(1e-9) - 1.0)
            ),
            server.map_or("-".into(), |s| {
                format!("{:.0}", (s.user_s + s.system_s) * 1e6 / ops)
            }),
            server.map_or("-".into(), |s| format!("{:.0}%", s.busy_pct)),
            format!(
                "{:.0}",
                (r.cpu.client_user_s + r.cpu.client_system_s) * 1e6 / ops
            ),
            duration(lat.p50_us as f64),
            duration(lat.p99_us as f64),
        ]
    };
    let mut rows = vec![row("untraced", untraced)];
    rows.extend(traced.iter().map(|t| row(&t.backend, &t.result)));
    Table { header, rows }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stats::buckets::BucketSummary;

    fn call(function: &str, total_us: u64) -> FunctionStats {
        FunctionStats {
            function: function.into(),
            group: String::new(),
            outcome: "success".into(),
            pid: None,
            summary: BucketSummary {
                count: 10,
                total_ns: total_us * 1000,
                ..BucketSummary::default()
            },
            buckets: Vec::new(),
        }
    }

    #[test]
    fn the_breakdown_does_not_count_nested_calls_twice() {
        let mut result = RunResult {
            ops: 10,
            ..RunResult::default()
        };
        result.cpu.server = Some(load::result::ServerCpu {
            user_s: 0.008,
            system_s: 0.002,
            ..Default::default()
        });
        let t = LabTraced {
            backend: "kernel probes".into(),
            result,
            calls: vec![
                // Per operation: 700 us in SSL_do_handshake, of which 400 signing (the final
                // step inside it, 390, is not added again) and 100 key exchange.
                call("SSL_do_handshake", 7000),
                call("EVP_DigestSign", 4000),
                call("EVP_DigestSignFinal", 3900),
                call("EVP_PKEY_derive", 1000),
                call("SSL_read", 500),
            ],
        };
        let b = breakdown(&t);
        let get = |name: &str| b.iter().find(|p| p.0 == name).unwrap().1;
        assert_eq!(get("signing"), 400.0);
        assert_eq!(get("key exchange"), 100.0);
        assert_eq!(get("rest of SSL_do_handshake"), 200.0);
        assert_eq!(get("SSL_read / SSL_write"), 50.0);
        // The server used 1000 us per operation: 750 in traced calls.
        assert_eq!(get("rest of the server's CPU"), 250.0);
        let total: f64 = b.iter().map(|p| p.1).sum();
        assert_eq!(total, 1000.0);
    }
}
