//! Saved runs as compare variants: `bench --json` (latency distributions from their
//! histograms), `trace --json` (per function and outcome, from the kernel's buckets) and
//! `compare --json` (every sample). Runs of different experiments are refused.

use std::path::{Path, PathBuf};

use crate::common::error::{Context, Error, Result};
use crate::fail;
use model::compare::{
    CompareDocument, Experiment, Metric, Negotiated, Variant, COMPARE_SCHEMA_VERSION,
};
use serde_json::Value;

/// The largest magnitude of a value compared (a latency in microseconds, a rate per second,
/// a sample of a compare run): 10^15 microseconds is 31 years. Values read from a file past it
/// are refused: sums and squares of many such values leave the range of f64, and the
/// document's statistics would be infinite or NaN, which its JSON writes as null, so
/// `compare` could not read its own output back (the saved_runs fuzz target's property).
const MAX_MAGNITUDE: f64 = 1e15;

/// Saved runs to compare, the first the baseline.
pub struct SavedConfig {
    pub files: Vec<PathBuf>,
    pub level: f64,
    /// Changes smaller than this fraction are never called.
    pub noise_threshold: f64,
    /// Where the comparison is made.
    pub environment: model::Environment,
    /// The warning when two single bench runs are compared, as the command words it.
    pub one_run_each_side: String,
}

/// Why saved runs cannot be compared.
#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    /// The file is not JSON at all.
    #[error("{}: not JSON ({reason})", path.display())]
    NotJson { path: PathBuf, reason: String },
    /// Anything else, naming the file.
    #[error(transparent)]
    Refused(#[from] Error),
}

struct Run {
    path: PathBuf,
    kind: String,
    doc: Value,
}

fn read(path: &Path) -> Result<Run, SavedError> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read it", path.display()))?;
    parse_run(path, &text)
}

/// A saved run from its text: JSON of a kind and schema version this tlsscope reads.
fn parse_run(path: &Path, text: &str) -> Result<Run, SavedError> {
    let doc: Value = serde_json::from_str(text).map_err(|e| SavedError::NotJson {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let kind = doc["kind"].as_str().unwrap_or_default().to_string();
    let Some(known) = model::newest_schema_version(&kind).map(u64::from) else {
        return Err(Error::msg(format!(
            "{}: not a tlsscope bench, trace or compare result (kind {:?})",
            path.display(),
            kind
        ))
        .into());
    };
    let version = doc["schema_version"].as_u64().unwrap_or(0);
    if version > known {
        return Err(Error::msg(format!(
            "{}: {kind} schema version {version} is newer than this tlsscope reads ({known}); use a newer tlsscope",
            path.display()
        ))
        .into());
    }
    Ok(Run {
        path: path.to_path_buf(),
        kind,
        doc,
    })
}

/// Numbers the second and later variants of a repeated label ("a", "a #2"): files of one name
/// from different directories, or one file given twice, stay apart in every table, and only
/// the first is the baseline.
fn unique_labels(variants: &mut [Variant]) {
    let mut seen: Vec<String> = Vec::new();
    for v in variants.iter_mut() {
        let mut label = v.label.clone();
        let mut n = 1;
        while seen.contains(&label) {
            n += 1;
            label = format!("{} #{n}", v.label);
        }
        v.label = label.clone();
        seen.push(label);
    }
}

fn stem(path: &Path) -> String {
    path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

/// What makes two runs the same experiment, in words, for the refusal.
fn experiment_key(run: &Run) -> String {
    match run.kind.as_str() {
        "bench" => format!(
            "a bench run in {} mode",
            run.doc["result"]["mode"].as_str().unwrap_or("?")
        ),
        "trace" => "a trace run".into(),
        _ => {
            let e = &run.doc["experiment"];
            format!("a compare run ({})", e["source"].as_str().unwrap_or("?"))
        }
    }
}

/// Reads saved runs (the first is the baseline) and compares them as variants.
pub fn load(c: &SavedConfig) -> Result<CompareDocument, SavedError> {
    let runs = c
        .files
        .iter()
        .map(|f| read(f))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(compare(
        runs,
        c.level,
        c.noise_threshold,
        c.environment.clone(),
        Some(&c.one_run_each_side),
    )?)
}

/// As [`load`], for runs whose text is already in memory, each with the file name it goes by
/// (in labels and errors), without the warning on single runs. Public so that the fuzz targets
/// can feed text that never was a file.
pub fn load_texts(
    texts: &[(PathBuf, &str)],
    level: f64,
    noise_threshold: f64,
    environment: model::Environment,
) -> Result<CompareDocument, SavedError> {
    let runs = texts
        .iter()
        .map(|(path, text)| parse_run(path, text))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(compare(runs, level, noise_threshold, environment, None)?)
}

/// Compares runs of one experiment as variants, the first as the baseline; `one_run_each_side`
/// is the warning for two single bench runs.
fn compare(
    runs: Vec<Run>,
    level: f64,
    noise_threshold: f64,
    environment: model::Environment,
    one_run_each_side: Option<&str>,
) -> Result<CompareDocument> {
    let Some(baseline) = runs.first() else {
        fail!("no saved run to compare");
    };
    let first = experiment_key(baseline);
    for r in &runs[1..] {
        let key = experiment_key(r);
        if key != first {
            fail!(
                "{} is {first} and {} is {key}: compare runs of one experiment",
                baseline.path.display(),
                r.path.display()
            );
        }
    }
    let mut variants = Vec::new();
    let mut warnings = Vec::new();
    for r in &runs {
        let made = match r.kind.as_str() {
            "bench" => vec![bench_variant(r, level, &mut warnings)],
            "trace" => vec![trace_variant(r, level)],
            _ => compare_variants(r, runs.len() > 1, level)?,
        };
        check_magnitudes(&r.path, &made)?;
        variants.extend(made);
    }
    unique_labels(&mut variants);
    if runs.len() == 2 && runs.iter().all(|r| r.kind == "bench") {
        warnings.extend(one_run_each_side.map(String::from));
    }
    Ok(CompareDocument {
        schema_version: COMPARE_SCHEMA_VERSION,
        kind: "compare".into(),
        environment,
        experiment: Experiment {
            source: baseline.kind.clone(),
            files: runs.iter().map(|r| r.path.display().to_string()).collect(),
            ..Experiment::default()
        },
        level,
        noise_threshold,
        comparisons: super::analysis::analyze(
            &variants,
            level,
            noise_threshold,
            super::analysis::Baseline::First,
        ),
        scaling: super::scaling::scaling(&variants, level),
        variants,
        warnings,
    })
}

/// Refuses a run with a sample beyond [`MAX_MAGNITUDE`], naming the metric and the file.
fn check_magnitudes(path: &Path, variants: &[Variant]) -> Result<()> {
    for metric in variants.iter().flat_map(|v| &v.metrics) {
        if let Some(value) = metric.values().find(|v| v.abs() > MAX_MAGNITUDE) {
            fail!(
                "{}: {} has the value {value:e}, beyond anything tlsscope measures (at most {MAX_MAGNITUDE:e}): is the file corrupt?",
                path.display(),
                metric.name
            );
        }
    }
    Ok(())
}

/// A latency metric from a saved run's histogram: every recorded value, none sampled away.
fn from_histogram(name: &str, pairs: Vec<[f64; 2]>, level: f64) -> Metric {
    Metric::from_histogram(name, "us", true, pairs, level)
}

fn bench_variant(r: &Run, level: f64, warnings: &mut Vec<String>) -> Variant {
    let result = &r.doc["result"];
    let mut metrics = Vec::new();
    for phase in ["connect", "handshake", "ttfb", "request", "total"] {
        let Some(hist) = result["latency"][phase]["histogram"].as_array() else {
            continue;
        };
        let pairs: Vec<[f64; 2]> = hist
            .iter()
            .filter_map(|p| Some([p[0].as_f64()?, p[1].as_u64()? as f64]))
            .collect();
        if !pairs.is_empty() {
            metrics.push(from_histogram(phase, pairs, level));
        }
    }
    if metrics.is_empty() {
        warnings.push(format!(
            "{}: no latency histograms (saved before tlsscope kept them): only its rate is compared",
            r.path.display()
        ));
    }
    if let Some(rate) = result["ops_per_s"].as_f64() {
        metrics.push(Metric::new("ops_per_s", "1/s", false, vec![rate], level));
    }
    // Bench's negotiated entries carry these fields and more (which are left out).
    let negotiated: Vec<Negotiated> =
        serde_json::from_value(result["negotiated"].clone()).unwrap_or_default();
    Variant {
        label: stem(&r.path),
        settings: [
            (
                "mode".to_string(),
                result["mode"].as_str().unwrap_or_default().to_string(),
            ),
            (
                "target".to_string(),
                result["target"].as_str().unwrap_or_default().to_string(),
            ),
        ]
        .into(),
        // The client that ran: its engine's library, or (saved before engines were recorded)
        // the OpenSSL the environment names.
        library: result["client"]["library"]
            .as_str()
            .or(r.doc["environment"]["library"].as_str())
            .map(String::from),
        server_library: None,
        error: None,
        metrics,
        negotiated,
        // Runs saved before bench counted the wire have none.
        wire: serde_json::from_value(result["wire"].clone()).ok(),
        ..Variant::default()
    }
}

fn trace_variant(r: &Run, level: f64) -> Variant {
    let mut metrics = Vec::new();
    for f in r.doc["functions"].as_array().into_iter().flatten() {
        let name = format!(
            "{} ({})",
            f["function"].as_str().unwrap_or("?"),
            f["outcome"].as_str().unwrap_or("?")
        );
        let pairs: Vec<[f64; 2]> = f["buckets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| {
                let count = b["count"].as_u64()?;
                let bucket = stats::buckets::Bucket {
                    low_us: b["low_us"].as_u64()?,
                    high_us: b["high_us"].as_u64(),
                    count,
                    total_ns: b["total_ns"].as_u64(),
                };
                // The bucket's values where its sum places them: its mean (or its middle, in
                // runs saved without sums; the open top bucket at its low edge).
                let value = stats::histogram::quantile(&[bucket.cell()], count, 0.5);
                Some([value, count as f64])
            })
            .collect();
        if pairs.iter().any(|p| p[1] > 0.0) && !metrics.iter().any(|m: &Metric| m.name == name) {
            metrics.push(from_histogram(&name, pairs, level));
        }
    }
    Variant {
        label: stem(&r.path),
        library: r.doc["environment"]["library"].as_str().map(String::from),
        metrics,
        ..Variant::default()
    }
}

fn compare_variants(r: &Run, prefix: bool, level: f64) -> Result<Vec<Variant>> {
    let doc: CompareDocument = serde_json::from_value(r.doc.clone())
        .with_context(|| format!("{}: not a readable compare document", r.path.display()))?;
    Ok(doc
        .variants
        .into_iter()
        .map(|mut v| {
            if prefix {
                v.label = format!("{}: {}", stem(&r.path), v.label);
            }
            // Intervals at this run's level.
            v.metrics = v.metrics.into_iter().map(|m| m.at_level(level)).collect();
            v
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_one(text: &str) -> Result<CompareDocument, SavedError> {
        let texts = [
            (PathBuf::from("a.json"), text),
            (PathBuf::from("b.json"), text),
        ];
        load_texts(&texts, 0.95, 0.01, model::Environment::default())
    }

    /// Issue 14 (fuzzing): latencies near f64's limit made every statistic infinite or NaN,
    /// which the document's JSON writes as null, so `compare` wrote output it could not read
    /// back. Such a run is now refused, by file and metric.
    #[test]
    fn values_beyond_any_measurement_are_refused_by_file_and_metric() {
        let text = include_str!("../../../../fuzz/corpus/saved_runs/bench-huge-values.json");
        let err = load_one(text).unwrap_err().to_string();
        assert!(err.contains("a.json: total has the value 1e308"), "{err}");
    }

    #[test]
    fn a_run_compared_with_itself_reads_back() {
        let text = include_str!("../../../../fuzz/corpus/saved_runs/bench-histograms.json");
        let doc = load_one(text).unwrap();
        assert_eq!(doc.variants.len(), 2);
        let json = serde_json::to_string(&doc).unwrap();
        let again: CompareDocument = serde_json::from_str(&json).unwrap();
        // Samples, not summaries: serde_json may read a float back one unit in the last place
        // off, and compare recomputes summaries from samples anyway.
        let samples = |d: &CompareDocument| -> Vec<Vec<f64>> {
            let metrics = d.variants.iter().flat_map(|v| &v.metrics);
            metrics.map(|m| m.values().collect()).collect()
        };
        assert_eq!(samples(&again), samples(&doc));
    }
}
