//! Metrics for machines to scrape: the trace's histograms and counters in the OpenMetrics text
//! format (what Prometheus scrapes) and the Prometheus text format (what node_exporter's
//! textfile collector reads), encoded by the `prometheus-client` crate.
//!
//! Names follow Prometheus's conventions (a `tlsscope_` prefix, base units, `_total` on
//! counters); labels take OpenTelemetry's TLS attribute names where one exists
//! (`tls.protocol.version` becomes `tls_protocol_version`).

use std::collections::BTreeMap;

use model::trace::{FunctionStats, WrapperFailureDoc};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// What a running trace has counted, as metrics: cumulative since it started.
#[derive(Clone, Debug, Default)]
pub struct TraceMetrics {
    /// Per function, outcome (and process, with `--per-pid`).
    pub functions: Vec<FunctionStats>,
    /// Per function: the library it is traced in and that library's version ("libssl",
    /// "3.0.19").
    pub libraries: BTreeMap<String, (String, String)>,
    /// The finite upper bounds of the histogram's buckets, in microseconds, ascending: the
    /// `le` labels (in seconds). Counts above the last go to `+Inf`.
    pub bounds_us: Vec<u64>,
    /// The probe backend: "kernel" or "user".
    pub backend: String,
    pub probed_calls: u64,
    /// The probes' CPU time, estimated from the calibrated cost of one probed call.
    pub probe_cpu_s: f64,
    /// Histogram cells the kernel could not store (its map was full).
    pub dropped_cells: u64,
    pub wrapper_failures: Vec<WrapperFailureDoc>,
    pub version: String,
}

/// The exposition's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text (`# EOF` at the end): what Prometheus asks for first.
    OpenMetrics,
    /// The Prometheus text format 0.0.4: node_exporter's textfile collector and older readers.
    Prometheus,
}

impl Format {
    /// The HTTP `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The format an HTTP `Accept` header asks for: OpenMetrics where it names it.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }
}

/// The metrics as text in `format`.
pub fn exposition(metrics: &TraceMetrics, format: Format) -> String {
    encode(metrics.clone(), format)
}

/// One collector's metrics as text in `format`.
fn encode(collector: impl Collector, format: Format) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector));
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
    match format {
        Format::OpenMetrics => text,
        Format::Prometheus => to_prometheus_text(&text),
    }
}

/// OpenMetrics text as the Prometheus text format: no `# EOF`, and a counter's `# TYPE` and
/// `# HELP` name the samples' own `_total` name, as the older format wants.
fn to_prometheus_text(open_metrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in open_metrics.lines() {
        if let Some(name) = line
            .strip_prefix("# TYPE ")
            .and_then(|l| l.strip_suffix(" counter"))
        {
            counters.insert(name.to_string());
        }
    }
    let mut out = String::with_capacity(open_metrics.len());
    for line in open_metrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let renamed = ["# TYPE ", "# HELP "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

impl Collector for TraceMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_durations(&mut encoder)?;
        self.encode_handshakes(&mut encoder)?;
        let probes: [(&str, &str, f64); 3] = [
            (
                "tlsscope_probe_calls",
                "Calls of traced functions that ran a probe",
                self.probed_calls as f64,
            ),
            (
                "tlsscope_probe_cpu_seconds",
                "CPU time the probes cost the traced processes, estimated from the calibrated cost of one probed call",
                self.probe_cpu_s,
            ),
            (
                "tlsscope_probe_lost_cells",
                "Histogram cells lost because the kernel's map was full (calls not counted)",
                self.dropped_cells as f64,
            ),
        ];
        for (name, help, value) in probes {
            let labels = [("backend", self.backend.as_str())];
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(value).encode(m.encode_family(&labels.as_slice())?)?;
        }
        if !self.wrapper_failures.is_empty() {
            let mut m = encoder.encode_descriptor(
                "tlsscope_probe_wrapper_failures",
                "Calls whose in-process wrapper failed (that wrapper then only calls through)",
                None,
                MetricType::Counter,
            )?;
            for w in &self.wrapper_failures {
                let labels = [("function", w.function.as_str())];
                ConstCounter::new(w.failures).encode(m.encode_family(&labels.as_slice())?)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "tlsscope_build_info",
            "tlsscope's version and probe backend (always 1)",
            None,
            MetricType::Gauge,
        )?;
        let labels = [
            ("version", self.version.as_str()),
            ("backend", self.backend.as_str()),
        ];
        ConstGauge::new(1i64).encode(m.encode_family(&labels.as_slice())?)?;
        Ok(())
    }
}

impl TraceMetrics {
    /// The labels of one function's series: function, outcome, library, its version, and the
    /// process where the trace keeps one histogram per process.
    fn labels(&self, f: &FunctionStats) -> Vec<(&'static str, String)> {
        let (library, version) = self.libraries.get(&f.function).cloned().unwrap_or_default();
        let mut labels = vec![
            ("function", f.function.clone()),
            ("outcome", f.outcome.clone()),
            ("library", library),
            ("library_version", version),
        ];
        if let Some(pid) = f.pid {
            labels.push(("pid", pid.to_string()));
        }
        labels
    }

    fn encode_durations(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if self.functions.is_empty() {
            return Ok(());
        }
        let mut m = encoder.encode_descriptor(
            "tlsscope_tls_call_duration_seconds",
            "Time spent in a TLS library call, by function and outcome (success, retry: WANT_READ/WANT_WRITE and kin, failure)",
            None,
            MetricType::Histogram,
        )?;
        for f in &self.functions {
            let labels = self.labels(f);
            m.encode_family(&labels.as_slice())?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    f.summary.total_ns as f64 / 1e9,
                    f.summary.count,
                    &self.buckets(f),
                    None,
                )?;
        }
        Ok(())
    }

    /// `f`'s counts per `le` bound (seconds), not cumulative, `+Inf` last.
    fn buckets(&self, f: &FunctionStats) -> Vec<(f64, u64)> {
        let mut counts = vec![0u64; self.bounds_us.len() + 1];
        for b in &f.buckets {
            let i = b
                .high_us
                .and_then(|high| self.bounds_us.iter().position(|&bound| high <= bound))
                .unwrap_or(self.bounds_us.len());
            counts[i] += b.count;
        }
        self.bounds_us
            .iter()
            .map(|&us| us as f64 / 1e6)
            .chain(std::iter::once(f64::MAX))
            .zip(counts)
            .collect()
    }

    /// Handshakes that completed or failed: `SSL_do_handshake`'s calls, which `SSL_accept` and
    /// `SSL_connect` go through too (retries are steps of a handshake, not handshakes).
    fn encode_handshakes(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut counts: BTreeMap<Vec<(&'static str, String)>, u64> = BTreeMap::new();
        for f in &self.functions {
            if f.function != "SSL_do_handshake" || f.outcome.starts_with("retry") {
                continue;
            }
            let labels: Vec<_> = self
                .labels(f)
                .into_iter()
                .filter(|(name, _)| *name != "function")
                .collect();
            *counts.entry(labels).or_default() += f.summary.count;
        }
        if counts.is_empty() {
            return Ok(());
        }
        let mut m = encoder.encode_descriptor(
            "tlsscope_tls_handshakes",
            "TLS handshakes that ended (SSL_do_handshake calls that succeeded or failed)",
            None,
            MetricType::Counter,
        )?;
        for (labels, count) in counts {
            ConstCounter::new(count).encode(m.encode_family(&labels.as_slice())?)?;
        }
        Ok(())
    }
}

/// The built-in server's counters (`serve --metrics-listen`), as they are when scraped.
#[derive(Clone, Debug)]
pub struct ServeMetrics {
    pub stats: server::StatsSnapshot,
    pub version: String,
}

/// The server's counters as text in `format`.
pub fn serve_exposition(metrics: &ServeMetrics, format: Format) -> String {
    encode(metrics.clone(), format)
}

/// A counter family: one sample per label value.
fn counter_family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    samples: &[(&str, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, n) in samples {
        let labels = [(label, *value)];
        ConstCounter::new(*n).encode(m.encode_family(&labels.as_slice())?)?;
    }
    Ok(())
}

/// A counter without labels.
fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    n: u64,
) -> Result<(), std::fmt::Error> {
    let m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(n).encode(m)
}

impl Collector for ServeMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.stats;
        let c = &s.connections;
        let e = &mut encoder;
        counter(
            e,
            "tlsscope_server_connections_accepted",
            "Connections accepted",
            c.accepted,
        )?;
        counter(
            e,
            "tlsscope_server_connections_closed",
            "Connections closed",
            c.closed,
        )?;
        counter(
            e,
            "tlsscope_server_connection_errors",
            "Connections ended by a TLS error after the handshake",
            c.errors,
        )?;
        counter_family(
            e,
            "tlsscope_server_connections_timed_out",
            "Connections closed by a deadline, by which one",
            "deadline",
            &[
                ("handshake", c.timed_out.handshake),
                ("request_head", c.timed_out.request_head),
                ("keep_alive", c.timed_out.keep_alive),
                ("stalled", c.timed_out.stalled),
            ],
        )?;
        counter(
            e,
            "tlsscope_server_connections_shed",
            "Connections closed to make room at the connection limit",
            c.shed,
        )?;
        let h = &s.handshakes;
        counter_family(
            e,
            "tlsscope_server_handshakes",
            "Handshakes completed, by kind (full, or resumed by session ID or by ticket)",
            "kind",
            &[
                ("full", h.full),
                ("resumed_session_id", h.resumed_session_id),
                ("resumed_ticket", h.resumed_ticket),
            ],
        )?;
        counter_family(
            e,
            "tlsscope_server_handshakes_by_version",
            "Handshakes completed, by TLS version (OpenTelemetry's tls.protocol.version)",
            "tls_protocol_version",
            &[
                ("1.3", h.tls13),
                ("1.2", h.tls12),
                ("other", h.other_version),
            ],
        )?;
        let by_group: Vec<(&str, u64)> = h.by_group.iter().map(|(g, n)| (g.as_str(), *n)).collect();
        counter_family(
            e,
            "tlsscope_server_handshakes_by_group",
            "Handshakes completed, by key exchange group as TLS names it (TLS 1.2 resumptions, \
             which exchange no key, are in none)",
            "group",
            &by_group,
        )?;
        let f = &h.failed_by;
        counter_family(
            e,
            "tlsscope_server_handshake_failures",
            "Handshakes that failed, by class",
            "class",
            &[
                ("timeout", f.timeout),
                ("not_tls", f.not_tls),
                ("peer_closed", f.peer_closed),
                ("shed", f.shed),
                ("other", f.other),
            ],
        )?;
        counter(
            e,
            "tlsscope_server_requests",
            "HTTP requests answered",
            s.requests,
        )?;
        counter_family(
            e,
            "tlsscope_server_bytes",
            "Bytes of TLS application data, by direction",
            "direction",
            &[("read", s.bytes.read), ("written", s.bytes.written)],
        )?;
        let m = e.encode_descriptor(
            "tlsscope_server_uptime_seconds",
            "Seconds since the server started",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(s.uptime_ms as f64 / 1000.0).encode(m)?;
        let mut m = e.encode_descriptor(
            "tlsscope_build_info",
            "tlsscope's version and the TLS library the server runs (always 1)",
            None,
            MetricType::Gauge,
        )?;
        let labels = [
            ("version", self.version.as_str()),
            ("library", s.library.as_str()),
        ];
        ConstGauge::new(1i64).encode(m.encode_family(&labels.as_slice())?)?;
        Ok(())
    }
}

/// A running `bench`'s live figures (`bench --metrics-listen`).
#[derive(Clone, Debug, Default)]
pub struct BenchMetrics {
    /// "full", "resume" or "keepalive".
    pub mode: String,
    pub target: String,
    /// Operations completed and errors, in the measured window so far.
    pub ops: u64,
    pub errors: u64,
    /// Seconds measured so far (after the warm-up).
    pub measured_s: f64,
    pub version: String,
}

/// The live figures as text in `format`.
pub fn bench_exposition(metrics: &BenchMetrics, format: Format) -> String {
    encode(metrics.clone(), format)
}

impl Collector for BenchMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let labels = [
            ("mode", self.mode.as_str()),
            ("target", self.target.as_str()),
        ];
        for (name, help, n) in [
            (
                "tlsscope_bench_operations",
                "Operations completed in the measured window (handshakes, or requests for keep-alive)",
                self.ops,
            ),
            (
                "tlsscope_bench_errors",
                "Operations that failed in the measured window",
                self.errors,
            ),
        ] {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(n).encode(m.encode_family(&labels.as_slice())?)?;
        }
        let mut m = encoder.encode_descriptor(
            "tlsscope_bench_measured_seconds",
            "Seconds of the measured window so far (after the warm-up)",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(self.measured_s).encode(m.encode_family(&labels.as_slice())?)?;
        let mut m = encoder.encode_descriptor(
            "tlsscope_build_info",
            "tlsscope's version (always 1)",
            None,
            MetricType::Gauge,
        )?;
        let labels = [("version", self.version.as_str())];
        ConstGauge::new(1i64).encode(m.encode_family(&labels.as_slice())?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stats::buckets::{Bucket, BucketSummary};

    fn stats(function: &str, outcome: &str, buckets: &[(u64, Option<u64>, u64)]) -> FunctionStats {
        let buckets: Vec<Bucket> = buckets
            .iter()
            .map(|&(low_us, high_us, count)| Bucket {
                low_us,
                high_us,
                count,
                total_ns: None,
            })
            .collect();
        let count = buckets.iter().map(|b| b.count).sum();
        FunctionStats {
            function: function.into(),
            group: "handshake".into(),
            outcome: outcome.into(),
            pid: None,
            summary: BucketSummary {
                count,
                total_ns: count * 1500,
                ..BucketSummary::default()
            },
            buckets,
        }
    }

    fn sample() -> TraceMetrics {
        TraceMetrics {
            functions: vec![
                stats(
                    "SSL_do_handshake",
                    "success",
                    &[(1, Some(2), 3), (2, Some(4), 4)],
                ),
                stats("SSL_do_handshake", "retry", &[(0, Some(1), 9)]),
                // A call of over 2^22 us: past the last bound.
                stats("SSL_read", "failure", &[(1 << 29, Some(1 << 30), 1)]),
            ],
            libraries: [
                (
                    "SSL_do_handshake".to_string(),
                    ("libssl".to_string(), "3.0.19".to_string()),
                ),
                (
                    "SSL_read".to_string(),
                    ("libssl".to_string(), "3.0.19".to_string()),
                ),
            ]
            .into_iter()
            .collect(),
            bounds_us: (0..=22).map(|b| 1u64 << b).collect(),
            backend: "kernel".into(),
            probed_calls: 17,
            probe_cpu_s: 0.25,
            dropped_cells: 2,
            wrapper_failures: Vec::new(),
            version: "0.1.0".into(),
        }
    }

    #[test]
    fn histograms_have_every_bound_in_seconds_and_cumulative_counts() {
        let text = exposition(&sample(), Format::OpenMetrics);
        let series = r#"function="SSL_do_handshake",outcome="success",library="libssl",library_version="3.0.19""#;
        for (le, count) in [
            ("0.000001", 0),
            ("0.000002", 3),
            ("0.000004", 7),
            ("4.194304", 7),
            ("+Inf", 7),
        ] {
            let line = format!(
                "tlsscope_tls_call_duration_seconds_bucket{{le=\"{le}\",{series}}} {count}"
            );
            assert!(text.contains(&line), "{line}\n{text}");
        }
        assert!(text.contains(&format!(
            "tlsscope_tls_call_duration_seconds_count{{{series}}} 7"
        )));
        assert!(
            text.contains(&format!(
                "tlsscope_tls_call_duration_seconds_sum{{{series}}} 0.0000105"
            )),
            "{text}"
        );
        // Over 4.19 s: only +Inf holds it.
        let failure =
            r#"function="SSL_read",outcome="failure",library="libssl",library_version="3.0.19""#;
        assert!(
            text.contains(&format!(r#"{{le="4.194304",{failure}}} 0"#)),
            "{text}"
        );
        assert!(
            text.contains(&format!(r#"{{le="+Inf",{failure}}} 1"#)),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn handshakes_count_successes_and_failures_not_retries() {
        let text = exposition(&sample(), Format::OpenMetrics);
        assert!(
            text.contains("# TYPE tlsscope_tls_handshakes counter"),
            "{text}"
        );
        assert!(text.contains(
            r#"tlsscope_tls_handshakes_total{outcome="success",library="libssl",library_version="3.0.19"} 7"#
        ));
        assert!(
            !text.contains(r#"tlsscope_tls_handshakes_total{outcome="retry""#),
            "{text}"
        );
        assert!(
            text.contains(r#"tlsscope_probe_calls_total{backend="kernel"} 17"#),
            "{text}"
        );
        assert!(text.contains(r#"tlsscope_probe_lost_cells_total{backend="kernel"} 2"#));
    }

    #[test]
    fn the_prometheus_text_names_counters_by_their_samples_and_has_no_eof() {
        let text = exposition(&sample(), Format::Prometheus);
        assert!(!text.contains("# EOF"), "{text}");
        assert!(
            text.contains("# TYPE tlsscope_tls_handshakes_total counter"),
            "{text}"
        );
        assert!(
            text.contains("# HELP tlsscope_tls_handshakes_total TLS handshakes"),
            "{text}"
        );
        assert!(text.contains("# TYPE tlsscope_tls_call_duration_seconds histogram"));
    }

    #[test]
    fn the_servers_counters_are_counters_by_kind_and_version() {
        let mut stats = server::StatsSnapshot::default();
        stats.handshakes.full = 5;
        stats.handshakes.resumed_ticket = 2;
        stats.handshakes.tls13 = 7;
        stats.handshakes.by_group.insert("X25519MLKEM768".into(), 6);
        stats.handshakes.by_group.insert("x25519".into(), 1);
        stats.connections.accepted = 9;
        stats.library = "OpenSSL 3.0.19 27 Jan 2026".into();
        let m = ServeMetrics {
            stats,
            version: "0.1.0".into(),
        };
        let text = serve_exposition(&m, Format::Prometheus);
        for line in [
            r#"tlsscope_server_handshakes_total{kind="full"} 5"#,
            r#"tlsscope_server_handshakes_total{kind="resumed_ticket"} 2"#,
            r#"tlsscope_server_handshakes_by_version_total{tls_protocol_version="1.3"} 7"#,
            r#"tlsscope_server_handshakes_by_group_total{group="X25519MLKEM768"} 6"#,
            r#"tlsscope_server_handshakes_by_group_total{group="x25519"} 1"#,
            "tlsscope_server_connections_accepted_total 9",
            "# TYPE tlsscope_server_handshakes_total counter",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }

    #[test]
    fn the_format_follows_the_accept_header() {
        let prometheus_2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prometheus_2)), Format::OpenMetrics);
        assert_eq!(Format::from_accept(Some("*/*")), Format::Prometheus);
        assert_eq!(Format::from_accept(None), Format::Prometheus);
    }
}
