//! The comparisons of a compare document: each variant against its baseline, metric by metric.

use model::compare::{MetricComparison, Variant};

/// What each variant is compared with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Baseline {
    /// The first variant with results.
    #[default]
    First,
    /// Within each set of variants that share every setting but the library (certificate,
    /// group, client, server, ...), the first of them with results: the libraries side by
    /// side under the same settings.
    SameSettings,
}

impl Baseline {
    /// As the document names it (None: the first variant).
    pub fn name(self) -> Option<&'static str> {
        match self {
            Baseline::First => None,
            Baseline::SameSettings => Some("same-settings"),
        }
    }
}

/// The settings that name the library rather than how it is used.
const LIBRARY_SETTINGS: [&str; 3] = ["openssl", "client library", "server library"];

/// The settings a variant shares with the others it is compared with.
type SettingsKey<'a> = Vec<(&'a String, &'a String)>;

/// Compares every variant with results against its baseline, metric by metric, by the
/// strongest method the two metrics allow (see [`model::compare::compare_metrics`]).
pub fn analyze(
    variants: &[Variant],
    level: f64,
    noise_threshold: f64,
    baseline: Baseline,
) -> Vec<MetricComparison> {
    let measured: Vec<&Variant> = variants.iter().filter(|v| v.measured()).collect();
    // The sets compared within, in order of first appearance.
    let mut sets: Vec<(SettingsKey, Vec<&Variant>)> = Vec::new();
    for v in measured {
        let key: SettingsKey = match baseline {
            Baseline::First => Vec::new(),
            Baseline::SameSettings => v
                .settings
                .iter()
                .filter(|(k, _)| !LIBRARY_SETTINGS.contains(&k.as_str()))
                .collect(),
        };
        match sets.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(v),
            None => sets.push((key, vec![v])),
        }
    }
    let mut out = Vec::new();
    for (_, members) in &sets {
        out.extend(against_first(members, level, noise_threshold));
    }
    out
}

fn against_first(measured: &[&Variant], level: f64, noise_threshold: f64) -> Vec<MetricComparison> {
    let Some((base, others)) = measured.split_first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for metric in &base.metrics {
        for other in others {
            let Some(m) = other.metrics.iter().find(|m| m.name == metric.name) else {
                continue;
            };
            let comparison = model::compare::compare_metrics(metric, m, level, noise_threshold);
            // No ratio of a zero median (e.g. CPU below the clock tick): nothing to say.
            let r = &comparison.ratio;
            if ![r.estimate, r.low, r.high].iter().all(|v| v.is_finite()) {
                continue;
            }
            out.push(MetricComparison {
                metric: metric.name.clone(),
                baseline: base.label.clone(),
                variant: other.label.clone(),
                baseline_median: metric.summary.median,
                variant_median: m.summary.median,
                comparison,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::compare::Metric;
    use stats::compare::Verdict;

    /// A variant whose pretransfer samples are 1000..1100 us times `scale`; `broken` ones
    /// have an error and no metrics.
    fn measured(label: &str, scale: f64, broken: bool) -> Variant {
        let samples = (0..100).map(|i| (1000.0 + f64::from(i)) * scale).collect();
        Variant {
            label: label.into(),
            error: broken.then(|| "did not build".to_string()),
            metrics: if broken {
                Vec::new()
            } else {
                vec![Metric::new("pretransfer", "us", true, samples, 0.95)]
            },
            ..Variant::default()
        }
    }

    #[test]
    fn each_variant_is_compared_with_the_first_that_has_results() {
        let variants = [
            measured("broken", 1.0, true),
            measured("a", 1.0, false),
            measured("b", 1.5, false),
        ];
        let cmp = analyze(&variants, 0.95, 0.01, Baseline::First);
        assert_eq!(cmp.len(), 1);
        assert_eq!(
            (cmp[0].baseline.as_str(), cmp[0].variant.as_str()),
            ("a", "b")
        );
        assert_eq!(cmp[0].comparison.verdict, Verdict::Worse);
    }

    #[test]
    fn same_settings_compares_libraries_within_each_certificate() {
        let with = |label: &str, scale: f64, lib: &str, cert: &str| {
            let mut v = measured(label, scale, false);
            v.settings = [("openssl", lib), ("cert", cert)]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into();
            v
        };
        let variants = [
            with("a-rsa", 1.0, "a", "rsa"),
            with("a-ec", 0.5, "a", "ec"),
            with("b-rsa", 1.5, "b", "rsa"),
            with("b-ec", 0.5, "b", "ec"),
        ];
        let pairs: Vec<(String, String)> = analyze(&variants, 0.95, 0.01, Baseline::SameSettings)
            .into_iter()
            .map(|c| (c.baseline, c.variant))
            .collect();
        let want =
            [("a-rsa", "b-rsa"), ("a-ec", "b-ec")].map(|(a, b)| (a.to_string(), b.to_string()));
        assert_eq!(pairs, want.to_vec());
    }
}
