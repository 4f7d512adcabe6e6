//! A parsed scrape (text format 0.0.4 or OpenMetrics), for asserting values by labels.

use std::collections::BTreeMap;

/// One sample of a scrape.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed scrape (text format 0.0.4 or OpenMetrics), for asserting values by labels.
pub struct Metrics {
    pub text: String,
    pub samples: Vec<Sample>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("sample line has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.trim_end_matches('}'))),
                None => (series, BTreeMap::new()),
            };
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("bad value in {line:?}")),
            };
            samples.push(Sample {
                name: name.to_string(),
                labels,
                value,
            });
        }
        Metrics {
            text: text.to_string(),
            samples,
        }
    }

    /// Samples of `name` whose labels include all of `labels`.
    pub fn find(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The one value of `name` with these labels; None when there is no such series.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found = self.find(name, labels);
        assert!(found.len() <= 1, "{name}{labels:?} matches {} series", found.len());
        found.first().map(|s| s.value)
    }

    pub fn has_family(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(if escaped == 'n' { '\n' } else { escaped });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(key.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    labels
}
