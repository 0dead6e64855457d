//! `tlsscope compare --json`: the document (`schemas/compare.v1.schema.json`). It keeps every
//! sample, so a saved comparison can be compared again; its metrics are summarized, and
//! variants compared, here, where the data is.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::{Deserialize, Serialize};
use stats::compare::{Comparison, Descriptive, Interval};

use crate::Environment;

/// The version of the compare document.
pub const COMPARE_SCHEMA_VERSION: u32 = 1;

/// Bootstrap resamples per interval. Fuzzing builds (`--cfg fuzzing`, set by cargo-fuzz) take
/// far fewer: the fuzzer looks for inputs the loader mishandles, not for precise intervals, and
/// at full count each input that expands a histogram costs seconds.
pub const RESAMPLES: usize = if cfg!(fuzzing) { 20 } else { 2000 };

/// Changes smaller than this fraction are never called (criterion's default noise threshold).
pub const DEFAULT_NOISE_THRESHOLD: f64 = 0.01;

fn default_noise_threshold() -> f64 {
    DEFAULT_NOISE_THRESHOLD
}

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
    /// Changes smaller than this fraction are never called, however significant.
    #[serde(default = "default_noise_threshold")]
    pub noise_threshold: f64,
    /// The first variant that has results is the baseline.
    pub variants: Vec<Variant>,
    /// Every other variant against the baseline, per metric both have.
    pub comparisons: Vec<MetricComparison>,
    /// How each variant on N threads scales against the same variant on one (`compare
    /// --threads`): absent when every variant ran one thread.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scaling: Vec<Scaling>,
    pub warnings: Vec<String>,
}

/// One variant on N threads against the same settings on one thread: the rate's scaling
/// efficiency, and what the threads lost it to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scaling {
    /// The variant on N threads, and the one on 1 thread it is compared with.
    pub variant: String,
    pub baseline: String,
    pub threads: usize,
    /// "engine_rate" or "load_handshake_rate".
    pub metric: String,
    /// Median rates over the rounds, handshakes per second.
    pub rate_1: f64,
    pub rate_n: f64,
    /// rate at N / (N x rate at 1), from the rounds paired (each round ran both): the
    /// Hodges-Lehmann estimate of the ratio and its interval, divided by N.
    pub efficiency: Interval,
    /// The engine's efficiency with the time other tasks held the threads' CPUs taken out:
    /// (CPU + blocked time per handshake at 1) / (the same at N), from the paired rounds. What
    /// an otherwise idle machine would show; the threads never share a CPU with each other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efficiency_on_idle_cpus: Option<Interval>,
    /// Paired rounds it is drawn from.
    pub rounds: usize,
    /// Per handshake at 1 and at N threads (engine only): CPU time, time blocked off CPU (the
    /// engine does no I/O: lock waits) and times blocked, as medians over the rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_handshake: Option<PerHandshake>,
    /// Why the figure is not the library's (e.g. the client could not keep the server busy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caveat: Option<String>,
}

/// Per-handshake costs at 1 and N threads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PerHandshake {
    pub cpu_us: [f64; 2],
    pub blocked_us: [f64; 2],
    pub blocks: [f64; 2],
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
    /// What each variant is compared with: absent, the first variant with results;
    /// "same-settings", the first library of the variants that share every other setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
}

/// One variant: its settings and what it measured, or why it could not be measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// Short name made of the settings that differ between variants ("openssl=3.0.2 ctx=shared").
    pub label: String,
    /// Every setting (openssl, cert, tls, group, resume, ctx, ...).
    pub settings: BTreeMap<String, String>,
    /// The client's library and version, e.g. "OpenSSL 3.0.2", "AWS-LC 5.12.0" (saved before
    /// issue 31: OpenSSL's own text, "OpenSSL 3.0.2 15 Mar 2022").
    pub library: Option<String>,
    /// The server's library and version, where tlsscope started the server ("BoringSSL API
    /// 44"); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_library: Option<String>,
    /// Set when the variant failed (to build, load, or handshake); its metrics are then empty.
    pub error: Option<String>,
    pub metrics: Vec<Metric>,
    /// The handshakes actually obtained.
    pub negotiated: Vec<Negotiated>,
    /// Bytes on the wire, the ClientHello, key shares, HelloRetryRequests and round trips
    /// per kind of handshake, where the variant's client counted them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<load::wire::WireSummary>,
    /// Why the variant was not run, when it cannot be (a library nginx cannot load); it is
    /// then neither measured nor a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
    /// The server's own count of handshakes against the clients', and the library it was seen
    /// to map (matrix runs against a server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_check: Option<ServerCheck>,
}

impl CompareDocument {
    /// Writes the document as pretty JSON.
    pub fn write_json(&self, w: &mut impl Write) -> io::Result<()> {
        crate::write_pretty(w, self)
    }
}

impl Variant {
    /// It ran and did not fail: it has results to compare.
    pub fn measured(&self) -> bool {
        self.error.is_none() && self.not_run.is_none()
    }
}

/// What a matrix's server counted itself, beside what its clients made. One server serves
/// every variant that shares its library and settings, so the counts are the server's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerCheck {
    /// "builtin" or "nginx", and its PID.
    pub server: String,
    pub pid: u32,
    /// The libssl the server process mapped (from /proc/PID/maps).
    pub libssl: Option<String>,
    /// Handshakes (built-in server) or connections (nginx's stub_status "handled") it counted.
    pub server_count: u64,
    /// Connections the clients of every variant using it made, warm-ups included.
    pub client_count: u64,
}

/// One metric of one variant, with every sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// e.g. "pretransfer", "engine_handshake".
    pub name: String,
    /// What the samples count: "us" or "1/s".
    pub unit: String,
    pub lower_is_better: bool,
    /// Samples, in the order measured (rounds one after another); empty where the metric is a
    /// histogram.
    pub samples: Vec<f64>,
    /// One value per round (the round's median, or its one value), in round order: the
    /// replicates the verdict is drawn from. Empty for saved runs of one round.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<f64>,
    /// The metric read from a saved run's histogram: [value, count] per cell, every recorded
    /// value kept (no subsampling). Empty where the metric has samples.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub histogram: Vec<[f64; 2]>,
    /// The metric comes from a histogram (saved bench/trace runs): values are the histogram's
    /// cell values, not exact.
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
            rounds: Vec::new(),
            histogram: Vec::new(),
            from_histogram: false,
        }
    }

    /// The same metric with one value per round, the replicates a verdict is drawn from.
    pub fn with_rounds(mut self, rounds: Vec<f64>) -> Metric {
        self.rounds = rounds;
        self
    }

    /// A metric from a histogram's [value, count] cells, described exactly (every recorded
    /// value counts; nothing is sampled).
    pub fn from_histogram(
        name: &str,
        unit: &str,
        lower_is_better: bool,
        histogram: Vec<[f64; 2]>,
        level: f64,
    ) -> Metric {
        let cells = histogram_cells(&histogram);
        let (sorted, n) = stats::histogram::sorted(&cells);
        Metric {
            name: name.to_string(),
            unit: unit.to_string(),
            lower_is_better,
            summary: stats::compare::describe_histogram(&cells),
            median: stats::compare::histogram_median_interval(&sorted, n, level),
            samples: Vec::new(),
            rounds: Vec::new(),
            histogram,
            from_histogram: true,
        }
    }

    /// The metric again at another confidence level (summaries recomputed from what it holds).
    pub fn at_level(self, level: f64) -> Metric {
        let again = if self.histogram.is_empty() {
            Metric::new(
                &self.name,
                &self.unit,
                self.lower_is_better,
                self.samples,
                level,
            )
        } else {
            Metric::from_histogram(
                &self.name,
                &self.unit,
                self.lower_is_better,
                self.histogram,
                level,
            )
        };
        Metric {
            from_histogram: self.from_histogram,
            ..again.with_rounds(self.rounds)
        }
    }

    /// Every value the metric holds (samples, histogram values, rounds), for checks on them.
    pub fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.samples
            .iter()
            .copied()
            .chain(self.histogram.iter().map(|c| c[0]))
            .chain(self.rounds.iter().copied())
    }
}

/// [value, count] pairs as exact histogram cells (counts are whole numbers in the file; a
/// negative or fractional one counts as its floor, at least 0).
pub fn histogram_cells(pairs: &[[f64; 2]]) -> Vec<stats::histogram::Cell> {
    pairs
        .iter()
        .map(|p| stats::histogram::Cell::exact(p[0], p[1].max(0.0) as u64))
        .collect()
}

/// Compares `other` against `base` on one metric with the strongest method both allow: paired
/// rounds where both have the same rounds, histograms where both are histograms, else samples.
pub fn compare_metrics(
    base: &Metric,
    other: &Metric,
    level: f64,
    noise_threshold: f64,
) -> Comparison {
    let lower = base.lower_is_better;
    if base.rounds.len() >= 2 && base.rounds.len() == other.rounds.len() {
        stats::compare::compare_rounds(&base.rounds, &other.rounds, level, noise_threshold, lower)
    } else if !base.histogram.is_empty() && !other.histogram.is_empty() {
        stats::compare::compare_histograms(
            &histogram_cells(&base.histogram),
            &histogram_cells(&other.histogram),
            level,
            noise_threshold,
            lower,
        )
    } else {
        stats::compare::compare(
            &base.samples,
            &other.samples,
            level,
            RESAMPLES,
            noise_threshold,
            lower,
        )
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

#[cfg(test)]
mod tests {
    use super::*;
    use stats::compare::Method;

    #[test]
    fn a_metric_at_another_level_keeps_what_it_holds() {
        let samples: Vec<f64> = (1..=50).map(f64::from).collect();
        let m = Metric::new("pretransfer", "us", true, samples.clone(), 0.95)
            .with_rounds(vec![10.0, 11.0, 12.0]);
        let again = m.clone().at_level(0.99);
        assert_eq!(again.samples, samples);
        assert_eq!(again.rounds, m.rounds);
        assert!(!again.from_histogram);
        assert_eq!(again.median.level, 0.99);
        let h = Metric::from_histogram("handshake", "us", true, vec![[5.0, 3.0], [9.0, 1.0]], 0.95);
        let h_again = h.clone().at_level(0.9);
        assert!(h_again.from_histogram);
        assert_eq!(h_again.histogram, h.histogram);
        assert_eq!(h_again.summary.n, 4);
        assert_eq!(h.values().collect::<Vec<_>>(), vec![5.0, 9.0]);
    }

    #[test]
    fn metrics_are_compared_by_the_strongest_method_both_allow() {
        let base = Metric::new("x", "us", true, vec![1.0; 20], 0.95)
            .with_rounds(vec![1.0, 1.1, 0.9, 1.0, 1.05, 0.95]);
        let other = Metric::new("x", "us", true, vec![2.0; 20], 0.95)
            .with_rounds(vec![2.0, 2.1, 1.9, 2.0, 2.05, 1.95]);
        assert_eq!(
            compare_metrics(&base, &other, 0.95, DEFAULT_NOISE_THRESHOLD).method,
            Method::PairedRounds
        );
        let hist = |v: f64| Metric::from_histogram("x", "us", true, vec![[v, 100.0]], 0.95);
        assert_eq!(
            compare_metrics(&hist(1.0), &hist(2.0), 0.95, DEFAULT_NOISE_THRESHOLD).method,
            Method::Histograms
        );
        let plain = |v: f64| Metric::new("x", "us", true, vec![v; 20], 0.95);
        assert_eq!(
            compare_metrics(&plain(1.0), &plain(2.0), 0.95, DEFAULT_NOISE_THRESHOLD).method,
            Method::Samples
        );
    }

    #[test]
    fn a_compare_document_without_a_noise_threshold_reads_with_the_default() {
        let text = r#"{"schema_version":1,"kind":"compare","environment":{"tlsscope_version":"",
            "library":"","library_version_number":0,"library_path":"","kernel":"","cpu_model":"",
            "cpus":1,"hostname":"","command_line":[],"started_at":""},
            "experiment":{"source":"matrix","side":null,"count":null,"repeat":null,"target":null,
            "files":[]},"level":0.95,"variants":[],"comparisons":[],"warnings":[]}"#;
        let doc: CompareDocument = serde_json::from_str(text).unwrap();
        assert_eq!(doc.noise_threshold, DEFAULT_NOISE_THRESHOLD);
        let mut out = Vec::new();
        doc.write_json(&mut out).unwrap();
        let again: CompareDocument =
            serde_json::from_str(std::str::from_utf8(&out).unwrap()).unwrap();
        assert_eq!(again.experiment, doc.experiment);
    }
}
