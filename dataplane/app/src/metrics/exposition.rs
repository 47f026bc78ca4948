//! Prometheus' text exposition format (version 0.0.4): `# HELP` and
//! `# TYPE` lines, then the samples of each metric family.
//!
//! Names follow Prometheus' conventions, which `promtool check metrics`
//! lints: `snake_case`, the unit in the name (`_bytes`, `_seconds`), a
//! counter's samples ending in `_total`. A name or label that breaks the
//! format is a programming error here, caught by the debug assertions and
//! the tests; label values are escaped (`\\`, `\"`, `\n`).

use std::fmt::Write;

/// A label: name and value.
pub type Label<'a> = (&'a str, &'a str);

/// One scrape's text, family by family.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    pub fn new() -> Self {
        Exposition::default()
    }

    /// A counter family `name` (ending in `_total`), one sample per label
    /// set.
    pub fn counter(&mut self, name: &str, help: &str, samples: &[(&[Label<'_>], u64)]) {
        debug_assert!(name.ends_with("_total"), "counter {name}");
        self.family(name, help, "counter");
        for (labels, value) in samples {
            self.sample(name, labels, &value.to_string());
        }
    }

    /// A gauge family.
    pub fn gauge(&mut self, name: &str, help: &str, samples: &[(&[Label<'_>], f64)]) {
        self.family(name, help, "gauge");
        for (labels, value) in samples {
            self.sample(name, labels, &float(*value));
        }
    }

    /// A summary family: its quantiles, and the count and sum of the
    /// observations.
    pub fn summary(
        &mut self,
        name: &str,
        help: &str,
        quantiles: &[(f64, f64)],
        count: u64,
        sum: f64,
    ) {
        self.family(name, help, "summary");
        for (q, value) in quantiles {
            let q = float(*q);
            self.sample(name, &[("quantile", &q)], &float(*value));
        }
        self.sample(&format!("{name}_count"), &[], &count.to_string());
        self.sample(&format!("{name}_sum"), &[], &float(sum));
    }

    /// The text to serve.
    pub fn finish(self) -> String {
        self.text
    }

    fn family(&mut self, name: &str, help: &str, kind: &str) {
        debug_assert!(valid_name(name), "metric name {name}");
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[Label<'_>], value: &str) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, v)) in labels.iter().enumerate() {
                debug_assert!(valid_name(label) && !label.contains(':'), "label {label}");
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{label}=\"{}\"", escape(v));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value: Go's float syntax, `+Inf`/`-Inf`/`NaN` spelt as
/// Prometheus reads them.
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_have_help_type_and_escaped_labels() {
        let mut e = Exposition::new();
        e.counter(
            "falcon_drops_total",
            "Frames dropped, by reason.",
            &[
                (&[("reason", "not_udp")], 3),
                (&[("reason", "a\"b\\c\nd")], 1),
            ],
        );
        e.gauge("falcon_up", "1 while the node runs.", &[(&[], 1.0)]);
        e.summary(
            "falcon_op_latency_seconds",
            "Op latency.",
            &[(0.5, 0.000_25), (0.99, f64::INFINITY)],
            10,
            0.01,
        );
        let text = e.finish();
        assert_eq!(
            text,
            "# HELP falcon_drops_total Frames dropped, by reason.\n\
             # TYPE falcon_drops_total counter\n\
             falcon_drops_total{reason=\"not_udp\"} 3\n\
             falcon_drops_total{reason=\"a\\\"b\\\\c\\nd\"} 1\n\
             # HELP falcon_up 1 while the node runs.\n\
             # TYPE falcon_up gauge\n\
             falcon_up 1\n\
             # HELP falcon_op_latency_seconds Op latency.\n\
             # TYPE falcon_op_latency_seconds summary\n\
             falcon_op_latency_seconds{quantile=\"0.5\"} 0.00025\n\
             falcon_op_latency_seconds{quantile=\"0.99\"} +Inf\n\
             falcon_op_latency_seconds_count 10\n\
             falcon_op_latency_seconds_sum 0.01\n"
        );
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_name("falcon_rx_frames_total"));
        assert!(valid_name("a:b_c9"));
        assert!(!valid_name("9a"));
        assert!(!valid_name("a-b"));
        assert!(!valid_name(""));
    }
}
