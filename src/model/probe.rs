//! Probe results as the rest of the daemon sees them: the tests, their figures, and the
//! latest report per GPU. The probe itself (src/probe/) produces them; metrics, health, the
//! status page and `check` read them from the snapshot.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One probe test. The names are the `test` label of the `gpu_probe_*` metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    /// Tensor-core GEMM in bf16 with fp32 accumulation, through cuBLAS.
    GemmBf16,
    /// FP32 fused multiply-add on the CUDA cores, from an embedded PTX kernel.
    FmaFp32,
    /// Device memory copy, from an embedded PTX kernel; bytes read plus bytes written.
    HbmCopy,
    /// Pinned host memory to device.
    PcieH2d,
    /// Device to pinned host memory.
    PcieD2h,
    /// The correctness canary (probe::sdc): GEMMs and FMA chains whose exact result the host
    /// knows, and a fixed GEMM whose digest must agree across runs, GPUs and time. Its
    /// figure is the canary GEMM's rate; its verdict is whether every result was right.
    Sdc,
    /// HBM pattern test (probe::memtest): walking ones and zeros, moving inversions and
    /// address in address over a share of the free memory. Its figure is the pattern traffic's
    /// bandwidth; its verdict is whether every word read back what was written.
    Memtest,
}

impl Test {
    pub const ALL: [Test; 7] = [
        Test::GemmBf16,
        Test::FmaFp32,
        Test::HbmCopy,
        Test::PcieH2d,
        Test::PcieD2h,
        Test::Sdc,
        Test::Memtest,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Test::GemmBf16 => "gemm_bf16",
            Test::FmaFp32 => "fma_fp32",
            Test::HbmCopy => "hbm_copy",
            Test::PcieH2d => "pcie_h2d",
            Test::PcieD2h => "pcie_d2h",
            Test::Sdc => "sdc",
            Test::Memtest => "memtest",
        }
    }

    pub fn from_name(name: &str) -> Option<Test> {
        Test::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Whether its figure is a speed the GPU is held to, against its own past and its
    /// neighbours' (health/baseline.rs). The canary's and the pattern test's are not: their
    /// verdict is right or wrong, and their figure comes from about a second of work at
    /// whatever clock it starts (on a real H200 pair the canary's GEMM rate differed 8.5 %
    /// between two healthy GPUs of one sweep).
    pub fn has_baseline(self) -> bool {
        !matches!(self, Test::Sdc | Test::Memtest)
    }

    /// The unit of the measured and expected values, in base units.
    pub fn unit(self) -> Unit {
        match self {
            Test::GemmBf16 | Test::FmaFp32 | Test::Sdc => Unit::FlopsPerSecond,
            Test::HbmCopy | Test::PcieH2d | Test::PcieD2h | Test::Memtest => Unit::BytesPerSecond,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    FlopsPerSecond,
    BytesPerSecond,
}

impl Unit {
    /// How people write it: TFLOP/s for compute, GB/s (10^9) for bandwidth.
    pub fn human(self, value: f64) -> String {
        match self {
            Unit::FlopsPerSecond => format!("{:.1} TFLOP/s", value / 1e12),
            Unit::BytesPerSecond => format!("{:.1} GB/s", value / 1e9),
        }
    }
}

/// What the GPU did while one test ran, from the NVML samples taken during its timed windows
/// (its set-up left out; see probe::sampler).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UnderLoad {
    pub samples: u32,
    pub peak_temperature_celsius: Option<f64>,
    pub peak_memory_temperature_celsius: Option<f64>,
    pub mean_sm_clock_hertz: Option<f64>,
    pub mean_power_watts: Option<f64>,
    /// Mean GPM activity over the test (Hopper and newer): SM active, tensor pipes active,
    /// DRAM bandwidth used, as fractions. Absent where the GPU has no GPM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_sm_active_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_tensor_active_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_dram_active_ratio: Option<f64>,
    /// Seconds each clock-event reason was seen active (sample count times the interval).
    pub clock_event_seconds: BTreeMap<String, f64>,
}

/// One test's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestResult {
    pub test: Test,
    /// Sizes the test used (`n` for the GEMM, `bytes` for the copies), so a comparison can
    /// repeat exactly the same operation.
    pub params: BTreeMap<String, u64>,
    /// The configured duration; the measured windows add up to at least this.
    pub duration_seconds: f64,
    /// Best window in the first second, in base units per second.
    pub burst: Option<f64>,
    /// The second half of the run: what the GPU keeps up under load. Pass/fail uses this.
    pub sustained: Option<f64>,
    pub expected: Option<f64>,
    /// `None` when there is no expected value for this model or the test could not start
    /// (no cuBLAS); `false` also when the GPU failed it with a CUDA error.
    pub pass: Option<bool>,
    /// Why the test did not run (no cuBLAS, not enough memory) or failed part way.
    pub skipped: Option<String>,
    pub under_load: UnderLoad,
    /// The correctness canary's evidence (`sdc` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdc: Option<SdcOutcome>,
    /// The HBM pattern test's evidence (`memtest` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memtest: Option<MemtestOutcome>,
}

/// The HBM pattern test's evidence: how much was tested, which passes ran, and every word
/// that read back wrong (the first 16 kept).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemtestOutcome {
    /// The region tested, bytes (a share of the free memory, capped).
    pub bytes: u64,
    /// Each pass that ran, in order, with the words it found wrong.
    pub passes: Vec<MemtestPass>,
    /// Whether every planned pass ran within the time budget.
    pub complete: bool,
    /// GPU time the passes took, seconds.
    pub seconds: f64,
    pub errors: u64,
    /// The first words that read back wrong.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bad: Vec<BadWord>,
}

/// One pass of the HBM pattern test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemtestPass {
    /// `address`, `address_inverse`, `moving_inversions_00000000`, `walking_ones_bit7`...
    pub name: String,
    pub errors: u64,
}

/// A word that read back wrong: its offset in the region and device address (the driver's
/// virtual address; NVML's row remapping works on the physical one), and what it held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BadWord {
    pub pass: String,
    pub offset: u64,
    pub address: String,
    pub expected: String,
    pub got: String,
}

impl MemtestOutcome {
    /// The pattern test's evidence in a probe report.
    pub fn of(report: &ProbeReport) -> Option<&MemtestOutcome> {
        report.tests.iter().find_map(|t| t.memtest.as_ref())
    }

    /// What was wrong, in words; empty when every word read back right.
    pub fn faults(&self) -> Vec<String> {
        if self.errors == 0 {
            return Vec::new();
        }
        let passes: Vec<String> = self
            .passes
            .iter()
            .filter(|p| p.errors > 0)
            .map(|p| format!("{} {}", p.name, p.errors))
            .collect();
        let words: Vec<String> = self
            .bad
            .iter()
            .take(4)
            .map(|b| {
                format!(
                    "offset {:#x} ({}): expected {} got {} in {}",
                    b.offset, b.address, b.expected, b.got, b.pass
                )
            })
            .collect();
        vec![format!(
            "{} word(s) of {} MiB read back wrong (by pass: {}); {}",
            self.errors,
            self.bytes >> 20,
            passes.join(", "),
            words.join("; ")
        )]
    }
}

/// The correctness canary's evidence (probe::sdc): what an RMA needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SdcOutcome {
    /// The exact checks, each over every element of its result.
    pub exact: Vec<ExactCheck>,
    /// The agreement GEMM: bf16 inputs from a fixed seed, fp32 out, `side` x `side` x `side`.
    pub side: u64,
    /// What the digest is comparable across: GPUs and runs with the same key give the same
    /// bits (cuBLAS's reproducibility guarantee, with what it names pinned).
    pub key: SdcKey,
    /// The digest of the first run: 16 hex digits.
    pub digest: String,
    /// The digest's parts (row blocks of the result), 16 hex digits each: which part differs
    /// says which rows did.
    pub parts: Vec<String>,
    /// How often the GEMM ran, and how many runs gave another digest than the first.
    pub repeats: u32,
    pub repeats_differing: u32,
}

/// What an agreement digest is comparable across.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SdcKey {
    pub model: String,
    pub sms: u32,
    pub driver: String,
    pub cublas: String,
    /// The canary's own version: a change to its inputs or sizes starts a new digest.
    pub canary: u32,
}

impl SdcKey {
    /// One line: "NVIDIA H200, 132 SMs, driver 580.95.05, cuBLAS 130100, canary 1".
    pub fn describe(&self) -> String {
        format!(
            "{}, {} SMs, driver {}, cuBLAS {}, canary {}",
            self.model, self.sms, self.driver, self.cublas, self.canary
        )
    }
}

/// A GPU whose results the canary found wrong: it stays unhealthy (`sdc_suspect`) until a
/// person clears it, and its validation does not pass while it is wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SdcSuspect {
    /// Unix seconds: the probe that found it.
    pub at: f64,
    pub gpu: u32,
    /// What was wrong, one line each: the exact checks' first wrong elements, a digest that
    /// changed between runs, a digest other GPUs or earlier probes do not share.
    pub faults: Vec<String>,
    /// The key the digest was compared under, and the digest.
    pub key: SdcKey,
    pub digest: String,
}

/// The all-reduce across the node's GPUs (probe::collective): what NCCL carried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveOutcome {
    pub gpus: u32,
    /// Each GPU's buffer, bytes.
    pub bytes: u64,
    /// NCCL's version ("2.27.3").
    pub nccl: String,
    /// Bus bandwidth, bytes per second: the second half of the run (as the probe's sustained).
    pub bus_bandwidth: f64,
    /// The best window of the first second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<f64>,
    /// Where a GPU's sum came out wrong in the checked all-reduce (which GPU, how many
    /// elements, the first, expected and got); `None` when every sum was right.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrong_sum: Option<String>,
}

/// A GPU whose memory read back wrong in the HBM pattern test: unhealthy
/// (`hbm_pattern_errors`) until a person clears it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HbmSuspect {
    /// Unix seconds: the probe that found it.
    pub at: f64,
    pub gpu: u32,
    pub faults: Vec<String>,
    /// The region tested and the words that read back wrong.
    pub bytes: u64,
    pub errors: u64,
    pub bad: Vec<BadWord>,
}

/// The agreement digest a key's GPUs gave: what a later probe of any GPU with that key must
/// give too (kept in the journal, so a single-GPU node is checked across time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SdcReference {
    pub digest: String,
    pub parts: Vec<String>,
    /// Unix seconds: when it was first given.
    pub since: f64,
    /// The GPUs (UUIDs) that gave it.
    pub gpus: Vec<String>,
}

impl SdcReference {
    /// Whether only one GPU gave it, and not `uuid`: then a GPU that differs is one word
    /// against another, not yet a suspect.
    pub fn given_by_one_other(&self, uuid: &str) -> bool {
        self.gpus.len() < 2 && self.gpus.iter().all(|g| g != uuid)
    }
}

/// A suspicion of wrong results lifted because the reference it was judged against was
/// replaced and the GPU's digest agrees with the new one (journal `sdc` row, `lifted`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SdcLift {
    /// Unix seconds: when it was lifted.
    pub at: f64,
    pub gpu: u32,
    /// Why, for a person: the new reference, the GPUs that gave it, the old one.
    pub why: String,
    pub key: SdcKey,
    pub digest: String,
}

/// One exact check: every element against the value the host knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExactCheck {
    /// `gemm_bf16_exact`, `gemm_fp16_exact`, `gemm_fp32_exact`, `fma_chain`.
    pub name: String,
    pub elements: u64,
    pub mismatches: u64,
    /// The first element that differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<Mismatch>,
}

/// An element that differs: where, what it should be and what it was (fp32 values and bits).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    pub index: u64,
    pub expected: f32,
    pub got: f32,
    pub expected_bits: String,
    pub got_bits: String,
}

impl SdcOutcome {
    /// The canary's evidence in a probe report.
    pub fn of(report: &ProbeReport) -> Option<&SdcOutcome> {
        report.tests.iter().find_map(|t| t.sdc.as_ref())
    }

    /// Whether every result this GPU gave on its own was right: the exact checks, and every
    /// run of the agreement GEMM the same (agreement with other GPUs and with earlier
    /// digests is judged where those are known: health::sdc).
    pub fn clean(&self) -> bool {
        self.exact.iter().all(|c| c.mismatches == 0) && self.repeats_differing == 0
    }

    /// What was wrong, in words: "gemm_bf16_exact: 1 of 4194304 elements differ (first at
    /// 77: expected 12, got 12.000001)"; empty when clean.
    pub fn faults(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .exact
            .iter()
            .filter(|c| c.mismatches > 0)
            .map(|c| {
                let first = c.first.as_ref().map_or(String::new(), |m| {
                    format!(
                        " (first at {}: expected {} [{}], got {} [{}])",
                        m.index, m.expected, m.expected_bits, m.got, m.got_bits
                    )
                });
                format!("{}: {} of {} elements differ{first}", c.name, c.mismatches, c.elements)
            })
            .collect();
        if self.repeats_differing > 0 {
            out.push(format!(
                "the agreement GEMM gave another digest in {} of {} runs of the same inputs",
                self.repeats_differing, self.repeats
            ));
        }
        out
    }
}

/// A whole probe of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    pub gpu: u32,
    pub uuid: String,
    pub name: String,
    /// Unix seconds when the probe started.
    pub started: f64,
    /// Wall time of the whole probe, CUDA start-up included.
    pub wall_seconds: f64,
    /// Which row of the expected-values table applied, if any.
    pub expectation: Option<String>,
    pub pass_fraction: f64,
    pub tests: Vec<TestResult>,
}

impl ProbeReport {
    /// Passed when every test with an expected value passed; `None` when none had one.
    pub fn passed(&self) -> Option<bool> {
        let verdicts: Vec<bool> = self.tests.iter().filter_map(|t| t.pass).collect();
        if verdicts.is_empty() {
            None
        } else {
            Some(verdicts.iter().all(|p| *p))
        }
    }

    /// Each failed test with its figure: "hbm_copy 2000.0 GB/s, 50% of the expected
    /// 4000.0 GB/s", or why it failed part way (a CUDA error). Empty when none failed.
    pub fn shortfalls(&self) -> Vec<String> {
        self.tests
            .iter()
            // A wrong result has its own finding (sdc_suspect), with its evidence.
            .filter(|t| t.pass == Some(false) && t.sdc.is_none() && t.memtest.is_none())
            .map(|t| match (t.sustained, t.expected) {
                (Some(s), Some(e)) if e > 0.0 => format!(
                    "{} {}, {:.0}% of the expected {}",
                    t.test.name(),
                    t.test.unit().human(s),
                    s / e * 100.0,
                    t.test.unit().human(e)
                ),
                _ => match &t.skipped {
                    Some(why) => format!("{} ({why})", t.test.name()),
                    None => t.test.name().to_string(),
                },
            })
            .collect()
    }
}

#[cfg(test)]
impl ProbeReport {
    /// A probe of one test on GPU 0, an H100, for the tests: `burst` and `sustained` in base
    /// units, against `expected` (None: no verdict) and its verdict `pass`.
    pub(crate) fn for_test(
        uuid: &str,
        started: f64,
        test: Test,
        (burst, sustained): (f64, f64),
        expected: Option<f64>,
        pass: Option<bool>,
    ) -> ProbeReport {
        ProbeReport {
            gpu: 0,
            uuid: uuid.into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            started,
            wall_seconds: 15.0,
            expectation: None,
            pass_fraction: 0.9,
            tests: vec![TestResult {
                test,
                params: Default::default(),
                duration_seconds: 2.0,
                burst: Some(burst),
                sustained: Some(sustained),
                expected,
                pass,
                skipped: None,
                under_load: Default::default(),
                sdc: None,
                memtest: None,
            }],
        }
    }
}

/// One probe's figures, as a GPU's baseline keeps them (docs/probe.md, "Baselines").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeFigures {
    /// Unix seconds when the probe started.
    pub started: f64,
    /// Each test that gave a figure: (test, burst, sustained), base units per second.
    pub tests: Vec<(Test, Option<f64>, Option<f64>)>,
}

impl ProbeFigures {
    pub fn of(report: &ProbeReport) -> ProbeFigures {
        ProbeFigures {
            started: report.started,
            tests: report
                .tests
                .iter()
                .filter(|t| t.burst.is_some() || t.sustained.is_some())
                .map(|t| (t.test, t.burst, t.sustained))
                .collect(),
        }
    }

    /// The sustained figure of `test`.
    pub fn sustained(&self, test: Test) -> Option<f64> {
        self.tests.iter().find(|(t, ..)| *t == test).and_then(|(_, _, s)| *s)
    }
}

/// The most probes a GPU's history keeps (`probe.baseline_probes` is at most this).
pub(crate) const MAX_HISTORY: usize = 50;

/// A probe that could not run (no CUDA, a timeout, a child that died): when and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeErrorNote {
    /// Unix seconds.
    pub at: f64,
    pub why: String,
    /// How many probes of this GPU could not run in a row (since its last report, or the
    /// daemon's start).
    pub attempts: u64,
}

/// Probe results and counters, as the metrics and the status page read them.
#[derive(Debug, Clone, Default)]
pub struct ProbeSnapshot {
    pub schedule_enabled: bool,
    /// The latest report per GPU uuid.
    pub reports: BTreeMap<String, ProbeReport>,
    /// (uuid, result) -> count; result is pass, fail, no_verdict, error or timeout.
    pub runs: BTreeMap<(String, &'static str), u64>,
    /// (uuid, reason) -> count; reason is gpu_down, utilization, memory, compute_processes.
    pub skipped: BTreeMap<(String, &'static str), u64>,
    /// The last time a probe could not run, per uuid: for the status page, and the journal's
    /// "probe could not run" rows. Gone once a probe reports.
    pub last_error: BTreeMap<String, ProbeErrorNote>,
    /// Each GPU's earlier probes, oldest first, at most [`MAX_HISTORY`] (the journal's seed
    /// and every report since), by uuid: the baseline the latest is compared with.
    pub history: BTreeMap<String, std::collections::VecDeque<ProbeFigures>>,
    /// GPUs whose results the canary found wrong, by uuid (the journal's seed and since).
    pub sdc_suspects: BTreeMap<String, SdcSuspect>,
    /// The agreement digest per key (the journal's seed and since).
    pub sdc_references: BTreeMap<SdcKey, SdcReference>,
    /// Suspicions lifted when their reference was replaced, by uuid (since the start; the
    /// journal writes each once).
    pub sdc_lifts: BTreeMap<String, SdcLift>,
    /// GPUs whose memory the pattern test found reading back wrong, by uuid (the journal's
    /// seed and since).
    pub hbm_suspects: BTreeMap<String, HbmSuspect>,
    /// The latest all-reduce across the node's GPUs (the journal's seed and since).
    pub collective: Option<super::collective::CollectiveRun>,
    /// The node's earlier all-reduce figures: its baseline.
    pub collective_history: super::collective::CollectiveHistory,
    /// result -> count of the daemon's all-reduces: passed, slow, failed, and skipped
    /// (no NCCL, a GPU busy).
    pub collective_runs: BTreeMap<&'static str, u64>,
}

impl ProbeSnapshot {
    /// Keeps `report` as the GPU's latest and its figures in its history.
    pub fn keep(&mut self, uuid: &str, report: ProbeReport) {
        let history = self.history.entry(uuid.to_string()).or_default();
        if history.back().is_none_or(|last| last.started < report.started) {
            history.push_back(ProbeFigures::of(&report));
        }
        while history.len() > MAX_HISTORY {
            history.pop_front();
        }
        self.reports.insert(uuid.to_string(), report);
    }
}

/// One row of `probe.expected` (the config) or of the shipped table: GPUs whose name contains `match` (case-insensitive) should reach these values.
/// Units are the ones people quote: TFLOP/s and GB/s (10^9 bytes per second).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    #[serde(rename = "match")]
    pub pattern: String,
    #[serde(default)]
    pub gemm_bf16_tflops: Option<f64>,
    #[serde(default)]
    pub fma_fp32_tflops: Option<f64>,
    #[serde(default)]
    pub hbm_copy_gbps: Option<f64>,
    #[serde(default)]
    pub pcie_h2d_gbps: Option<f64>,
    #[serde(default)]
    pub pcie_d2h_gbps: Option<f64>,
}

impl Expectation {
    /// The expected value for one test in base units (FLOP/s or bytes/s).
    pub fn value(&self, test: Test) -> Option<f64> {
        match test {
            Test::GemmBf16 => self.gemm_bf16_tflops.map(|v| v * 1e12),
            Test::FmaFp32 => self.fma_fp32_tflops.map(|v| v * 1e12),
            Test::HbmCopy => self.hbm_copy_gbps.map(|v| v * 1e9),
            Test::PcieH2d => self.pcie_h2d_gbps.map(|v| v * 1e9),
            Test::PcieD2h => self.pcie_d2h_gbps.map(|v| v * 1e9),
            // Judged by their results, not a rate.
            Test::Sdc | Test::Memtest => None,
        }
    }
}
