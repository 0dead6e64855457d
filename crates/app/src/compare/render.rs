//! `tlsscope compare`: variants side by side. The terminal table, the Markdown and the HTML page
//! are all rendered from the document (`model::compare`).

use std::fmt::Write as _;

use model::compare::CompareDocument;

use crate::render::table::Table;
use stats::compare::{Comparison, Method, Verdict};

/// The verdict in words, for the metric's direction; without one, how many values there were.
pub fn verdict_text(c: &Comparison, lower_is_better: bool) -> String {
    match (c.verdict, c.method) {
        (Verdict::Untestable, Method::PairedRounds) => format!(
            "too few rounds ({}; a verdict needs {})",
            c.n.0,
            stats::compare::MIN_ROUNDS
        ),
        (Verdict::Untestable, _) => format!("too few samples (n={} vs {})", c.n.0, c.n.1),
        (Verdict::NoSignificantDifference, _) if c.p_value < 1.0 - c.ratio.level => {
            "no significant difference (within noise threshold)".to_string()
        }
        (v, _) => verdict_words(v, lower_is_better).to_string(),
    }
}

/// What the verdicts were drawn from, in words.
pub fn method_words(m: Method) -> &'static str {
    match m {
        Method::PairedRounds => {
            "rounds as replicates, paired (signed-rank test and Hodges-Lehmann estimate over the rounds' log ratios)"
        }
        Method::Samples => "every operation a sample (rank test, bootstrap interval)",
        Method::Histograms => {
            "every recorded value of the histograms (rank test, order-statistic interval)"
        }
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
    match unit {
        "us" => crate::render::words::duration(v),
        // Counts per operation (blocks per handshake): small, so two decimals.
        "" => format!("{v:.2}"),
        _ => format!("{v:.1} {unit}"),
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
    let baseline = doc.variants.iter().find(|v| v.measured()).map(|v| &v.label);
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
                "noise floor".into(),
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
                let (ratio, p, floor, verdict) = match cmp {
                    Some(c) => (
                        format!(
                            "{:.3} [{:.3}, {:.3}]",
                            c.comparison.ratio.estimate,
                            c.comparison.ratio.low,
                            c.comparison.ratio.high
                        ),
                        format!("{:.2e}", c.comparison.p_value),
                        noise_floor_text(c.comparison.noise_floor),
                        verdict_text(&c.comparison, m.lower_is_better),
                    ),
                    None if Some(&v.label) == baseline
                        || doc
                            .comparisons
                            .iter()
                            .any(|c| c.metric == name && c.baseline == v.label) =>
                    {
                        (
                            "baseline".into(),
                            String::new(),
                            String::new(),
                            String::new(),
                        )
                    }
                    None => (
                        "-".into(),
                        String::new(),
                        String::new(),
                        "no ratio (a zero median)".into(),
                    ),
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
                    floor,
                    verdict,
                ]);
            }
            (name.to_string(), Table { header, rows })
        })
        .collect()
}

/// "±1.2%": a comparison's noise floor.
fn noise_floor_text(floor: Option<f64>) -> String {
    floor.map_or_else(|| "-".into(), |f| format!("±{:.1}%", f * 100.0))
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

/// Each variant's wire figures, a row per kind of handshake.
pub fn wire_table(doc: &CompareDocument) -> Table {
    let header = ["variant", "handshake", "wire per handshake"]
        .map(String::from)
        .to_vec();
    let mut rows = Vec::new();
    for v in &doc.variants {
        let Some(wire) = &v.wire else {
            continue;
        };
        for (name, kind) in [("full", &wire.full), ("resumed", &wire.resumed)] {
            if let Some(k) = kind {
                rows.push(vec![
                    v.label.clone(),
                    name.to_string(),
                    crate::render::wire::words(k),
                ]);
            }
        }
    }
    Table { header, rows }
}

pub(crate) fn variants_table(doc: &CompareDocument) -> Table {
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
    let servers = doc.variants.iter().any(|v| v.server_library.is_some());
    if servers {
        header.push("server library".into());
    }
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
            if servers {
                row.push(v.server_library.clone().unwrap_or_else(|| "-".into()));
            }
            row.push(match (&v.error, &v.not_run) {
                (Some(e), _) => format!("FAILED: {e}"),
                (None, Some(why)) => format!("not run: {why}"),
                (None, None) => "ok".into(),
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
        let _ = write!(
            s,
            ": {} x {} per variant, in an order rotated every round",
            crate::render::words::count(n, "operation"),
            crate::render::words::count(r, "round")
        );
    }
    if let Some(side) = &e.side {
        let _ = write!(s, "; varied side: {side}");
    }
    if let Some(t) = &e.target {
        let _ = write!(s, "; server: {t}");
    }
    if e.baseline.as_deref() == Some("same-settings") {
        s += "; each library compared with the first of the variants sharing its other settings";
    }
    if !e.files.is_empty() {
        let _ = write!(s, ": {}", e.files.join(", "));
    }
    let mut methods: Vec<Method> = doc
        .comparisons
        .iter()
        .map(|c| c.comparison.method)
        .collect();
    methods.dedup();
    if let [method] = methods.as_slice() {
        let _ = write!(
            s,
            "\nverdicts: {}; changes under {}% are never called (noise threshold); the noise floor is the half-width of each ratio's interval",
            method_words(*method),
            doc.noise_threshold * 100.0
        );
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
        "load_handshake_rate" => "closed loop of concurrent new connections (full or resumed handshakes): handshakes per second over the measured window, one value per round",
        "load_client_cpu_per_handshake" => "closed loop: the client's CPU (user + system) per handshake, as bench computes it",
        "load_server_cpu_per_handshake" => "closed loop: the server process's CPU per handshake, from its CPU-time clock over the window",
        "load_server_busy" => "closed loop: the server's busy share of one CPU over the window (= rate x server CPU per handshake; up to N x 100% on N threads)",
        "engine_rate" => "in-process handshakes per second, all threads, over the window from the first thread's start to the last one's end, one value per round",
        "engine_cpu_per_handshake" => "in-process: the threads' CPU time per handshake (the scheduler's own count)",
        "engine_blocked_per_handshake" => "in-process: time the threads spent blocked, neither on a CPU nor waiting for one, per handshake; the engine does no I/O, so this is waiting for locks",
        "engine_blocks_per_handshake" => "in-process: times a thread blocked (voluntary context switches) per handshake",
        "engine_cpu_wait_per_handshake" => "in-process: time the threads were runnable but another task had their CPU, per handshake (the machine's noise, not the library's)",
        _ => "",
    }
}

/// Each server's own count against its clients', and the libssl it mapped.
pub fn server_table(doc: &CompareDocument) -> Table {
    let header = [
        "variant",
        "server",
        "pid",
        "libssl mapped",
        "server counted",
        "clients made",
    ]
    .map(String::from)
    .to_vec();
    let rows = doc
        .variants
        .iter()
        .filter_map(|v| {
            let s = v.server_check.as_ref()?;
            Some(vec![
                v.label.clone(),
                s.server.clone(),
                s.pid.to_string(),
                s.libssl.clone().unwrap_or_else(|| "-".into()),
                s.server_count.to_string(),
                s.client_count.to_string(),
            ])
        })
        .collect();
    Table { header, rows }
}

/// Each variant on N threads against one thread: rates, efficiency with its interval, and
/// the engine's CPU and blocked time per handshake at 1 and N.
pub fn scaling_table(doc: &CompareDocument) -> Table {
    let header = [
        "variant",
        "rate",
        "1 thread /s",
        "N threads /s",
        "efficiency",
        "on idle CPUs",
        "CPU us/hs (1 -> N)",
        "blocked us/hs (1 -> N)",
        "blocks/hs (1 -> N)",
        "note",
    ]
    .map(String::from)
    .to_vec();
    let pair = |v: [f64; 2], digits: usize| -> String {
        if v.iter().any(|x| !x.is_finite()) {
            return "-".into();
        }
        format!("{:.*} -> {:.*}", digits, v[0], digits, v[1])
    };
    let rows = doc
        .scaling
        .iter()
        .map(|s| {
            let e = &s.efficiency;
            let per = s.per_handshake.as_ref();
            vec![
                s.variant.clone(),
                s.metric
                    .trim_end_matches("_rate")
                    .replace("_handshake", "")
                    .to_string(),
                format!("{:.0}", s.rate_1),
                format!("{:.0}", s.rate_n),
                format!(
                    "{:.2} [{:.2}, {:.2}] ({} rounds)",
                    e.estimate, e.low, e.high, s.rounds
                ),
                s.efficiency_on_idle_cpus.as_ref().map_or("-".into(), |e| {
                    format!("{:.2} [{:.2}, {:.2}]", e.estimate, e.low, e.high)
                }),
                per.map_or("-".into(), |p| pair(p.cpu_us, 1)),
                per.map_or("-".into(), |p| pair(p.blocked_us, 1)),
                per.map_or("-".into(), |p| pair(p.blocks, 2)),
                s.caveat.clone().unwrap_or_default(),
            ]
        })
        .collect();
    Table { header, rows }
}

/// What the scaling table shows, in one sentence.
pub const SCALING_MEANING: &str = "efficiency = rate at N threads / (N x rate at 1 thread), from the rounds paired, with its interval; 1.00 is perfect scaling. On idle CPUs: the engine's efficiency with the time other tasks held its threads' CPUs taken out, (CPU + blocked per handshake at 1) / (the same at N)";

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
    let wire = wire_table(doc);
    if !wire.rows.is_empty() {
        out += &format!("\non the wire ({})\n", load::wire::COUNTED);
        out += &wire.aligned();
    }
    let servers = server_table(doc);
    if !servers.rows.is_empty() {
        out += "\nthe servers' own counts\n";
        out += &servers.aligned();
    }
    if !doc.scaling.is_empty() {
        out += &format!("\nscaling: {SCALING_MEANING}\n");
        out += &scaling_table(doc).aligned();
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
        "Machine: {} ({}), kernel {}, started {}.\n\n",
        env.cpu_model,
        crate::render::words::count(env.cpus, "CPU"),
        env.kernel,
        env.started_at
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
    let wire = wire_table(doc);
    if !wire.rows.is_empty() {
        out += &format!("\n## On the wire\n\n{}.\n\n", load::wire::COUNTED);
        out += &wire.markdown();
    }
    if !doc.scaling.is_empty() {
        out += &format!("\n## Scaling\n\n{SCALING_MEANING}.\n\n");
        out += &scaling_table(doc).markdown();
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
    use model::compare::{
        Experiment, Metric, MetricComparison, Variant, COMPARE_SCHEMA_VERSION,
        DEFAULT_NOISE_THRESHOLD, RESAMPLES,
    };
    use model::Environment;

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
        let comparison = stats::compare::compare(&base, &slow, 0.95, RESAMPLES, 0.01, true);
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
            noise_threshold: DEFAULT_NOISE_THRESHOLD,
            variants,
            comparisons: cmp,
            scaling: Vec::new(),
            warnings: vec![],
        };
        let t = text(&doc);
        assert!(t.contains("slower"), "{t}");
        assert!(t.contains("FAILED: did not build"), "{t}");
        let md = markdown(&doc);
        assert!(md.contains("| b | 100 |"), "{md}");
    }
}
