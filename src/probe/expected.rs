//! What each GPU model should measure, and pass/fail against it.
//!
//! The shipped table holds what a healthy GPU of each model measures with this probe
//! (sustained figures, at the board's default power limit). Where we measured a model
//! ourselves the row says so; the other rows are the datasheet peak times the fraction a
//! healthy board reaches in practice (docs/probe.md lists every number with its source).
//! The config's `probe.expected` rows come first: a value they set wins, a value they leave
//! out falls back to the shipped row for the same GPU.

use crate::model::probe::Test;

pub(crate) use crate::model::probe::Expectation;

/// Whether a row is about a GPU of this name.
fn matches(row: &Expectation, gpu_name: &str) -> bool {
    !row.pattern.is_empty() && gpu_name.to_lowercase().contains(&row.pattern.to_lowercase())
}

/// (match, gemm_bf16 TFLOP/s, fma_fp32 TFLOP/s, hbm_copy GB/s, pcie_h2d GB/s, pcie_d2h GB/s).
/// Sources and derivations: docs/probe.md, "Expected values".
const SHIPPED: [(&str, f64, f64, f64, f64, f64); 11] = [
    // Measured with this probe on an H100 SXM and an H200 SXM (docs/probe.md), rounded
    // down; the H200 GEMM to 650, what another H200 sustained in an earlier run.
    ("H100 80GB HBM3", 670.0, 64.0, 3000.0, 54.0, 54.0),
    ("H200", 650.0, 64.0, 4000.0, 54.0, 54.0),
    // Datasheet peak x the fraction a healthy board reaches: GEMM 0.70 (Hopper, power-capped)
    // or 0.85 (Ampere, Ada), FMA 0.75, copy 0.85, PCIe 0.80 of the link's raw rate.
    ("H100 PCIe", 529.0, 38.4, 1700.0, 51.2, 51.2),
    ("H100 NVL", 585.0, 45.0, 3315.0, 51.2, 51.2),
    ("H200 NVL", 585.0, 45.0, 4080.0, 51.2, 51.2),
    ("A100-SXM4-80GB", 265.0, 14.6, 1733.0, 25.6, 25.6),
    ("A100-SXM4-40GB", 265.0, 14.6, 1322.0, 25.6, 25.6),
    ("A100 80GB PCIe", 265.0, 14.6, 1645.0, 25.6, 25.6),
    ("A100-PCIE-40GB", 265.0, 14.6, 1322.0, 25.6, 25.6),
    ("L40S", 308.0, 68.7, 734.0, 25.6, 25.6),
    ("MI300X", 915.0, 61.3, 4505.0, 51.2, 51.2),
];

pub(crate) fn shipped() -> Vec<Expectation> {
    SHIPPED
        .iter()
        .map(|&(pattern, gemm, fma, hbm, h2d, d2h)| Expectation {
            pattern: pattern.to_string(),
            gemm_bf16_tflops: Some(gemm),
            fma_fp32_tflops: Some(fma),
            hbm_copy_gbps: Some(hbm),
            pcie_h2d_gbps: Some(h2d),
            pcie_d2h_gbps: Some(d2h),
        })
        .collect()
}

/// The most specific row (longest pattern) that matches.
fn best_match<'a>(rows: &'a [Expectation], gpu_name: &str) -> Option<&'a Expectation> {
    rows.iter()
        .filter(|row| matches(row, gpu_name))
        .max_by_key(|row| row.pattern.len())
}

/// What applies to one GPU: the config's row over the shipped row, value by value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resolved {
    /// "config: <match>", "shipped: <match>" or both joined with " over ".
    pub source: String,
    values: Vec<(Test, f64)>,
}

impl Resolved {
    pub(crate) fn value(&self, test: Test) -> Option<f64> {
        self.values.iter().find(|(t, _)| *t == test).map(|(_, v)| *v)
    }
}

pub(crate) fn resolve(configured: &[Expectation], gpu_name: &str) -> Option<Resolved> {
    let shipped_rows = shipped();
    let from_config = best_match(configured, gpu_name);
    let from_table = best_match(&shipped_rows, gpu_name);
    let source = match (from_config, from_table) {
        (None, None) => return None,
        (Some(c), None) => format!("config: {}", c.pattern),
        (None, Some(s)) => format!("shipped: {}", s.pattern),
        (Some(c), Some(s)) => format!("config: {} over shipped: {}", c.pattern, s.pattern),
    };
    let values = Test::ALL
        .into_iter()
        .filter_map(|test| {
            from_config
                .and_then(|c| c.value(test))
                .or_else(|| from_table.and_then(|s| s.value(test)))
                .map(|v| (test, v))
        })
        .collect();
    Some(Resolved { source, values })
}

/// Pass when the sustained figure reaches `fraction` of the expected value.
pub(crate) fn verdict(measured: f64, expected: f64, fraction: f64) -> bool {
    measured >= expected * fraction
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_names_find_their_rows() {
        let cases = [
            ("NVIDIA H100 80GB HBM3", "H100 80GB HBM3"),
            ("NVIDIA H100 PCIe", "H100 PCIe"),
            ("NVIDIA H100 NVL", "H100 NVL"),
            ("NVIDIA H200", "H200"),
            ("NVIDIA H200 NVL", "H200 NVL"),
            ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
            ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
            ("NVIDIA L40S", "L40S"),
            ("AMD Instinct MI300X", "MI300X"),
        ];
        for (name, row) in cases {
            let r = resolve(&[], name).unwrap_or_else(|| panic!("{name} has no row"));
            assert_eq!(r.source, format!("shipped: {row}"), "{name}");
        }
        assert_eq!(resolve(&[], "NVIDIA GeForce RTX 4090"), None);
    }

    #[test]
    fn the_longest_match_wins_so_an_nvl_is_not_an_sxm() {
        let nvl = resolve(&[], "NVIDIA H200 NVL").unwrap();
        let sxm = resolve(&[], "NVIDIA H200").unwrap();
        assert!(nvl.value(Test::GemmBf16).unwrap() < sxm.value(Test::GemmBf16).unwrap());
    }

    #[test]
    fn config_rows_override_value_by_value() {
        let configured = vec![Expectation {
            pattern: "h100".into(), // case does not matter
            gemm_bf16_tflops: Some(500.0),
            fma_fp32_tflops: None,
            hbm_copy_gbps: None,
            pcie_h2d_gbps: Some(20.0),
            pcie_d2h_gbps: None,
        }];
        let r = resolve(&configured, "NVIDIA H100 80GB HBM3").unwrap();
        assert_eq!(r.source, "config: h100 over shipped: H100 80GB HBM3");
        assert_eq!(r.value(Test::GemmBf16), Some(500e12));
        assert_eq!(r.value(Test::PcieH2d), Some(20e9));
        // Left out in the config: the shipped value.
        assert_eq!(r.value(Test::HbmCopy), Some(3000e9));
        // A model only the config knows.
        let r = resolve(&configured, "NVIDIA H100 something new").unwrap();
        assert_eq!(r.source, "config: h100");
        assert_eq!(r.value(Test::HbmCopy), None);
    }

    #[test]
    fn pass_is_at_least_the_fraction_of_expected() {
        assert!(verdict(594e12, 660e12, 0.9));
        assert!(!verdict(593e12, 660e12, 0.9));
        assert!(verdict(1.0, 1.0, 1.0));
    }
}
