//! `tlsscope compare`: variants side by side. The document (JSON, `schemas/compare.v1.schema.json`)
//! keeps every sample, so a saved comparison can be compared again; the terminal table, the
//! Markdown and the HTML page are all rendered from it.

pub mod html;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use stats::compare::{Comparison, Descriptive, Interval, Verdict};

use crate::Environment;

/// The version of the compare document.
pub const COMPARE_SCHEMA_VERSION: u32 = 1;

/// Bootstrap resamples per interval. Fuzzing builds (`--cfg fuzzing`, set by cargo-fuzz) take
/// far fewer: the fuzzer looks for inputs the loader mishandles, not for precise intervals, and
/// at full count each input that expands a histogram costs seconds.
pub const RESAMPLES: usize = if cfg!(fuzzing) { 20 } else { 2000 };

/// The document `tlsscope compare` writes (`--json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CompareDocument {
    pub schema_version: u32,
    pub kind: String,
    pub environment: Environment,
    /// What was run (or, for saved runs, which files were read).
    pub experiment: Experiment,
    /// Confidence level of every interval and test, e.g. 0.95.
    pub level: f64,
    /// The first variant that has results is the baseline.
    pub variants: Vec<Variant>,
    /// Every other variant against the baseline, per metric both have.
    pub comparisons: Vec<MetricComparison>,
    pub warnings: Vec<String>,
}

/// How the variants were measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Experiment {
    /// "matrix", or the kind of the saved runs compared ("bench", "trace", "compare").
    pub source: String,
    /// Which side's library varied: "client", "server" or "both" (matrix only).
    pub side: Option<String>,
    /// Operations per variant per round, and rounds (matrix only).
    pub count: Option<usize>,
    pub repeat: Option<usize>,
    /// The server the client experiment connected to.
    pub target: Option<String>,
    /// Files read (saved runs only).
    pub files: Vec<String>,
}

/// One variant: its settings and what it measured, or why it could not be measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// Short name made of the settings that differ between variants ("openssl=3.0.2 ctx=shared").
    pub label: String,
    /// Every setting (openssl, cert, tls, group, resume, ctx, ...).
    pub settings: BTreeMap<String, String>,
    /// The library as it names itself, e.g. "OpenSSL 3.0.2 15 Mar 2022".
    pub library: Option<String>,
    /// Set when the variant failed (to build, load, or handshake); its metrics are then empty.
    pub error: Option<String>,
    pub metrics: Vec<Metric>,
    /// The handshakes actually obtained.
    pub negotiated: Vec<Negotiated>,
}

/// One metric of one variant, with every sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// e.g. "pretransfer", "engine_handshake".
    pub name: String,
    /// What the samples count: "us" or "1/s".
    pub unit: String,
    pub lower_is_better: bool,
    /// Samples, in the order measured (rounds one after another).
    pub samples: Vec<f64>,
    /// The samples were rebuilt from a histogram (saved bench/trace runs): values are bucket
    /// values, not exact.
    #[serde(default)]
    pub from_histogram: bool,
    pub summary: Descriptive,
    /// The median with its bootstrap interval.
    pub median: Interval,
}

impl Metric {
    /// A metric from samples, summarized at `level`.
    pub fn new(
        name: &str,
        unit: &str,
        lower_is_better: bool,
        samples: Vec<f64>,
        level: f64,
    ) -> Metric {
        Metric {
            name: name.to_string(),
            unit: unit.to_string(),
            lower_is_better,
            summary: stats::compare::describe(&samples),
            median: stats::compare::median_interval(&samples, level, RESAMPLES),
            samples,
            from_histogram: false,
        }
    }
}

/// A handshake outcome and how many times it was obtained: the load engine's model, shared.
pub use load::result::NegotiatedCount as Negotiated;

/// A variant against the baseline on one metric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricComparison {
    pub metric: String,
    pub baseline: String,
    pub variant: String,
    pub baseline_median: f64,
    pub variant_median: f64,
    pub comparison: Comparison,
}

/// The verdict in words, for the metric's direction; without one, how many values there were.
pub fn verdict_text(c: &Comparison, lower_is_better: bool) -> String {
    match c.verdict {
        Verdict::Untestable => format!("too few samples (n={} vs {})", c.n.0, c.n.1),
        v => verdict_words(v, lower_is_better).to_string(),
    }
}

/// The verdict in words, for the metric's direction.
pub fn verdict_words(v: Verdict, lower_is_better: bool) -> &'static str {
    match (v, lower_is_better) {
        (Verdict::Better, true) => "faster",
        (Verdict::Worse, true) => "slower",
        (Verdict::Better, false) => "higher",
        (Verdict::Worse, false) => "lower",
        (Verdict::NoSignificantDifference, _) => "no significant difference",
        (Verdict::Untestable, _) => "too few samples",
    }
}

/// A value in its unit, for tables: microseconds as us/ms/s, rates as they are.
pub fn value(v: f64, unit: &str) -> String {
    if unit == "us" {
        crate::duration(v)
    } else {
        format!("{v:.1}{}", if unit.is_empty() { "" } else { " " }) + unit
    }
}

/// One table: a header row and data rows, rendered as aligned text or Markdown.
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns padded to their widest cell, two spaces apart.
    pub fn aligned(&self) -> String {
        let widths: Vec<usize> = (0..self.header.len())
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([self.header[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            padded.join("  ").trim_end().to_string() + "\n"
        };
        let mut out = line(&self.header);
        for r in &self.rows {
            out += &line(r);
        }
        out
    }

    /// A Markdown table.
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut out = line(&self.header);
        out += &format!("|{}\n", "---|".repeat(self.header.len()));
        for r in &self.rows {
            out += &line(r);
        }
        out
    }
}

/// Per metric: each variant's figures and its comparison with the baseline.
pub fn metric_tables(doc: &CompareDocument) -> Vec<(String, Table)> {
    let mut names: Vec<(&str, &str)> = Vec::new();
    for v in &doc.variants {
        for m in &v.metrics {
            if !names.iter().any(|(n, _)| *n == m.name) {
                names.push((&m.name, &m.unit));
            }
        }
    }
    let pct = (doc.level * 100.0).round();
    let baseline = doc
        .variants
        .iter()
        .find(|v| v.error.is_none())
        .map(|v| &v.label);
    names
        .into_iter()
        .map(|(name, unit)| {
            let header = [
                "variant".to_string(),
                "n".into(),
                format!("median [{pct}% CI]"),
                "mean".into(),
                "min".into(),
                "p95".into(),
                "p99".into(),
                "max".into(),
                "stdev".into(),
                "sum".into(),
                format!("vs baseline [{pct}% CI]"),
                "p".into(),
                "verdict".into(),
            ]
            .to_vec();
            let mut rows = Vec::new();
            for v in &doc.variants {
                let Some(m) = v.metrics.iter().find(|m| m.name == name) else {
                    continue;
                };
                let s = &m.summary;
                let cmp = doc
                    .comparisons
                    .iter()
                    .find(|c| c.metric == name && c.variant == v.label);
                let (ratio, p, verdict) = match cmp {
                    Some(c) => (
                        format!(
                            "{:.3} [{:.3}, {:.3}]",
                            c.comparison.ratio.estimate,
                            c.comparison.ratio.low,
                            c.comparison.ratio.high
                        ),
                        format!("{:.2e}", c.comparison.mann_whitney.p_two_sided),
                        verdict_text(&c.comparison, m.lower_is_better),
                    ),
                    None if Some(&v.label) == baseline => {
                        ("baseline".into(), String::new(), String::new())
                    }
                    None => ("-".into(), String::new(), "no ratio (a zero median)".into()),
                };
                rows.push(vec![
                    v.label.clone(),
                    s.n.to_string(),
                    format!(
                        "{} [{}, {}]",
                        value(m.median.estimate, unit),
                        value(m.median.low, unit),
                        value(m.median.high, unit)
                    ),
                    value(s.mean, unit),
                    value(s.min, unit),
                    value(s.p95, unit),
                    value(s.p99, unit),
                    value(s.max, unit),
                    value(s.stdev, unit),
                    value(s.sum, unit),
                    ratio,
                    p,
                    verdict,
                ]);
            }
            (name.to_string(), Table { header, rows })
        })
        .collect()
}

/// The handshakes each variant obtained.
pub fn negotiated_table(doc: &CompareDocument) -> Table {
    let header = [
        "variant",
        "version",
        "cipher",
        "group",
        "signature",
        "handshake",
        "count",
    ]
    .map(String::from)
    .to_vec();
    let mut rows = Vec::new();
    for v in &doc.variants {
        for n in &v.negotiated {
            rows.push(vec![
                v.label.clone(),
                n.version.clone(),
                n.cipher.clone(),
                n.group.clone().unwrap_or_else(|| "-".into()),
                n.signature.clone().unwrap_or_else(|| "-".into()),
                n.handshake.clone(),
                n.count.to_string(),
            ]);
        }
    }
    Table { header, rows }
}

fn variants_table(doc: &CompareDocument) -> Table {
    let mut keys: Vec<&String> = Vec::new();
    for v in &doc.variants {
        for k in v.settings.keys() {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    let mut header = vec!["variant".to_string()];
    header.extend(keys.iter().map(|k| k.to_string()));
    header.push("library".into());
    header.push("status".into());
    let rows = doc
        .variants
        .iter()
        .map(|v| {
            let mut row = vec![v.label.clone()];
            row.extend(
                keys.iter()
                    .map(|k| v.settings.get(*k).cloned().unwrap_or_else(|| "-".into())),
            );
            row.push(v.library.clone().unwrap_or_else(|| "-".into()));
            row.push(match &v.error {
                Some(e) => format!("FAILED: {e}"),
                None => "ok".into(),
            });
            row
        })
        .collect();
    Table { header, rows }
}

/// Words for what the run was.
pub fn describe_experiment(doc: &CompareDocument) -> String {
    let e = &doc.experiment;
    let mut s = format!("tlsscope compare ({})", e.source);
    if let (Some(n), Some(r)) = (e.count, e.repeat) {
        let _ = write!(s, ": {n} operations x {r} rounds per variant, interleaved");
    }
    if let Some(side) = &e.side {
        let _ = write!(s, "; varied side: {side}");
    }
    if let Some(t) = &e.target {
        let _ = write!(s, "; server: {t}");
    }
    if !e.files.is_empty() {
        let _ = write!(s, ": {}", e.files.join(", "));
    }
    s
}

/// What metric names mean, for readers of the tables.
pub fn metric_meaning(name: &str) -> &'static str {
    match name {
        "pretransfer" => "sequential connections: context (per-connection mode) + TCP connect + TLS handshake, as curl's time_pretransfer",
        "request_total" => "sequential connections: pretransfer + GET / and the whole response",
        "engine_handshake" => "in-process handshake over memory BIOs, both sides in one thread (no sockets)",
        "engine_client" => "in-process handshake: time in the client's calls",
        "engine_server" => "in-process handshake: time in the server's calls",
        "client_cpu_per_connection" => "client process CPU (user + system) per connection, one value per round",
        "server_cpu_per_connection" => "server process CPU (user + system) per connection, one value per round",
        _ => "",
    }
}

/// The terminal report.
pub fn text(doc: &CompareDocument) -> String {
    let mut out = describe_experiment(doc) + "\n\n";
    out += &variants_table(doc).aligned();
    for (name, table) in metric_tables(doc) {
        let meaning = metric_meaning(&name);
        out += &format!(
            "\n{name}{}\n",
            if meaning.is_empty() {
                String::new()
            } else {
                format!(": {meaning}")
            }
        );
        out += &table.aligned();
    }
    let mix = negotiated_table(doc);
    if !mix.rows.is_empty() {
        out += "\nhandshakes obtained\n";
        out += &mix.aligned();
    }
    for w in &doc.warnings {
        out += &format!("\nwarning: {w}");
    }
    if !doc.warnings.is_empty() {
        out += "\n";
    }
    out
}

/// The Markdown report.
pub fn markdown(doc: &CompareDocument) -> String {
    let mut out = format!("# {}\n\n", describe_experiment(doc));
    let env = &doc.environment;
    out += &format!(
        "Machine: {} ({} CPUs), kernel {}, started {}.\n\n",
        env.cpu_model, env.cpus, env.kernel, env.started_at
    );
    out += "## Variants\n\n";
    out += &variants_table(doc).markdown();
    for (name, table) in metric_tables(doc) {
        out += &format!("\n## {name}\n\n");
        let meaning = metric_meaning(&name);
        if !meaning.is_empty() {
            out += &format!("{meaning}.\n\n");
        }
        out += &table.markdown();
    }
    let mix = negotiated_table(doc);
    if !mix.rows.is_empty() {
        out += "\n## Handshakes obtained\n\n";
        out += &mix.markdown();
    }
    if !doc.warnings.is_empty() {
        out += "\n## Warnings\n\n";
        for w in &doc.warnings {
            out += &format!("- {w}\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(label: &str, samples: Vec<f64>) -> Variant {
        Variant {
            label: label.into(),
            metrics: vec![Metric::new("pretransfer", "us", true, samples, 0.95)],
            ..Variant::default()
        }
    }

    #[test]
    fn a_failed_variant_and_a_slower_one_are_rendered() {
        let base: Vec<f64> = (0..100).map(|i| 1000.0 + f64::from(i)).collect();
        let slow: Vec<f64> = base.iter().map(|v| v * 1.5).collect();
        let failed = Variant {
            label: "broken".into(),
            error: Some("did not build".into()),
            ..Variant::default()
        };
        let comparison = stats::compare::compare(&base, &slow, 0.95, RESAMPLES, true);
        assert_eq!(comparison.verdict, Verdict::Worse);
        let cmp = vec![MetricComparison {
            metric: "pretransfer".into(),
            baseline: "a".into(),
            variant: "b".into(),
            baseline_median: stats::compare::describe(&base).median,
            variant_median: stats::compare::describe(&slow).median,
            comparison,
        }];
        let variants = vec![failed, variant("a", base), variant("b", slow)];
        let doc = CompareDocument {
            schema_version: COMPARE_SCHEMA_VERSION,
            kind: "compare".into(),
            environment: Environment::default(),
            experiment: Experiment::default(),
            level: 0.95,
            variants,
            comparisons: cmp,
            warnings: vec![],
        };
        let t = text(&doc);
        assert!(t.contains("slower"), "{t}");
        assert!(t.contains("FAILED: did not build"), "{t}");
        let md = markdown(&doc);
        assert!(md.contains("| b | 100 |"), "{md}");
    }
}
