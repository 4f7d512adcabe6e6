//! `probe`: the CUDA probe's tests, durations, limits and schedule (docs/probe.md). Reloadable:
//! the next probe runs with it.

use super::*;

/// The CUDA probe: `gpuwarden probe` and the scheduled probes of the daemon.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Probe {
    /// Run probes from the daemon. Off by default: a probe loads the GPU for about 15 s.
    pub schedule: bool,
    /// How scheduled probes run: `gpu`, each GPU on its own whenever it is idle; `node`, the
    /// whole node at once when no job holds any of its GPUs, kept out of new work meanwhile
    /// (the Slurm health check drains it as `gpuwarden: validating`; docs/probe.md,
    /// "Validating an idle node").
    pub mode: ProbeMode,
    /// `node` mode only: the hours (UTC) a validation may start in, `02:00-06:00` (it may
    /// wrap midnight: `22:00-04:00`); unset: any time.
    #[serde(deserialize_with = "time_window", serialize_with = "write_time_window")]
    pub window: Option<TimeWindow>,
    /// How often each GPU is probed when `schedule` is on.
    #[serde(deserialize_with = "probe_interval", serialize_with = "write_duration")]
    pub interval: Duration,
    /// The tests a probe runs, in this order.
    #[serde(deserialize_with = "probe_tests")]
    pub tests: Vec<crate::model::probe::Test>,
    /// How long each test runs; long enough for clocks and power to settle.
    pub durations: ProbeDurations,
    /// A test passes when it reaches at least this fraction of the expected value.
    #[serde(deserialize_with = "fraction")]
    pub pass_fraction: f64,
    /// Device memory the probe may allocate (MiB); buffer sizes shrink to fit. The CUDA
    /// context itself takes about 500 MiB more.
    #[serde(deserialize_with = "memory_cap_mib")]
    pub memory_cap_mib: u64,
    /// A GPU is probed only when its utilization is at most this (0..1) and it runs no
    /// compute process.
    #[serde(deserialize_with = "fraction")]
    pub max_utilization: f64,
    /// How often the GPU is sampled while a probe runs.
    #[serde(deserialize_with = "probe_sample_interval", serialize_with = "write_duration")]
    pub sample_interval: Duration,
    /// A scheduled probe that has not finished after this long is killed.
    #[serde(deserialize_with = "probe_timeout", serialize_with = "write_duration")]
    pub timeout: Duration,
    /// cuBLAS to load for the GEMM test: empty means search the usual names
    /// (libcublas.so.13, .12, ...); a path loads that file first.
    pub cublas_library: PathBuf,
    /// NCCL for the all-reduce across the node's GPUs (`gpuwarden probe --collective`): empty
    /// means the usual names (libnccl.so.2); a path loads that file (a pip wheel's
    /// nvidia/nccl/lib/libnccl.so.2).
    pub nccl_library: PathBuf,
    /// Expected values that override or extend the shipped table (docs/probe.md).
    pub expected: Vec<crate::model::probe::Expectation>,
    /// A GPU whose sustained figure is more than this many percent below its own baseline
    /// or below the median of its model's other GPUs on the node is degraded
    /// (`probe_regressed`, docs/probe.md "Baselines").
    #[serde(deserialize_with = "regression_pct")]
    pub regression_pct: f64,
    /// How many of a GPU's earlier probes make its baseline (their median); at least 3 are
    /// needed before it is compared with itself.
    #[serde(deserialize_with = "baseline_probes")]
    pub baseline_probes: usize,
    /// The HBM pattern test (`memtest`) tests this share of the GPU's free memory...
    #[serde(deserialize_with = "memtest_share")]
    pub memtest_share: f64,
    /// ...at most this many MiB of it.
    #[serde(deserialize_with = "memtest_max_mib")]
    pub memtest_max_mib: u64,
    /// The all-reduce across the node's GPUs in its validations (docs/probe.md, "The GPUs
    /// together").
    pub collective: Collective,
}

/// `probe.collective`: the all-reduce across the node's NVIDIA GPUs through NCCL.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Collective {
    /// Run it after the node's last pending validation passed (the idle node's sweep, or a
    /// validation after a clear while every GPU is idle), on a node of two or more.
    pub run: bool,
    /// How long it is timed, after the checked all-reduce and a warm-up.
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub duration: Duration,
    /// Slow (`collective_slow`) below this share of what the GPUs' NVLinks carry one way at
    /// their rate (links x rate, the slowest GPU's): well below what a healthy board reaches,
    /// so that only a real loss trips it.
    #[serde(deserialize_with = "share")]
    pub nvlink_share: f64,
    /// ...or of what their PCIe links carry one way (generation x width), where there is no
    /// NVLink: lower, since a path through the CPU's root complex reaches less.
    #[serde(deserialize_with = "share")]
    pub pcie_share: f64,
}

impl Default for Collective {
    fn default() -> Self {
        Collective {
            run: true,
            duration: Duration::from_secs(2),
            nvlink_share: 0.5,
            pcie_share: 0.25,
        }
    }
}

/// A share of a bound: above 0, at most 1.
pub(super) fn share<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let value = f64::deserialize(d)?;
    if !(value > 0.0 && value <= 1.0) {
        return Err(serde::de::Error::custom(format!(
            "{value} is not a share; write a number above 0 and at most 1 (0.5 means half)"
        )));
    }
    Ok(value)
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            schedule: false,
            mode: ProbeMode::Gpu,
            window: None,
            interval: Duration::from_secs(24 * 3600),
            tests: crate::model::probe::Test::ALL.to_vec(),
            durations: ProbeDurations::default(),
            pass_fraction: 0.9,
            memory_cap_mib: 4096,
            max_utilization: 0.05,
            sample_interval: Duration::from_millis(100),
            timeout: Duration::from_secs(120),
            cublas_library: PathBuf::new(),
            nccl_library: PathBuf::new(),
            expected: Vec::new(),
            regression_pct: 7.0,
            baseline_probes: 10,
            memtest_share: 0.5,
            memtest_max_mib: 65536,
            collective: Collective::default(),
        }
    }
}

/// `probe.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeMode {
    #[default]
    Gpu,
    Node,
}

/// `probe.window`: from `start` to `end`, minutes after midnight UTC; it wraps midnight when
/// `end` is not after `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindow {
    pub start: u32,
    pub end: u32,
}

impl TimeWindow {
    /// Parses `HH:MM-HH:MM`.
    pub fn parse(text: &str) -> Option<TimeWindow> {
        let minutes = |hm: &str| -> Option<u32> {
            let (h, m) = hm.trim().split_once(':')?;
            let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
            (h < 24 && m < 60 && hm.trim().len() == 5).then_some(h * 60 + m)
        };
        let (start, end) = text.split_once('-')?;
        let window = TimeWindow {
            start: minutes(start)?,
            end: minutes(end)?,
        };
        (window.start != window.end).then_some(window)
    }

    /// Whether `unix_seconds` (UTC) falls inside it.
    pub fn contains(&self, unix_seconds: f64) -> bool {
        let minute = ((unix_seconds.max(0.0) as u64 / 60) % (24 * 60)) as u32;
        if self.start < self.end {
            (self.start..self.end).contains(&minute)
        } else {
            minute >= self.start || minute < self.end
        }
    }
}

impl std::fmt::Display for TimeWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hm = |m: u32| format!("{:02}:{:02}", m / 60, m % 60);
        write!(f, "{}-{}", hm(self.start), hm(self.end))
    }
}

/// As it is written in the config (the probe child reads the settings back as JSON).
pub(super) fn write_time_window<S: serde::Serializer>(window: &Option<TimeWindow>, s: S) -> Result<S::Ok, S::Error> {
    match window {
        Some(w) => s.serialize_str(&w.to_string()),
        None => s.serialize_none(),
    }
}

pub(super) fn time_window<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TimeWindow>, D::Error> {
    let Some(text) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    TimeWindow::parse(&text).map(Some).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "probe.window is {text:?}; write the hours (UTC) as HH:MM-HH:MM, 02:00-06:00 (22:00-04:00 wraps midnight)"
        ))
    })
}

/// How long each probe test runs.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeDurations {
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub gemm_bf16: Duration,
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub fma_fp32: Duration,
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub hbm_copy: Duration,
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub pcie_h2d: Duration,
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub pcie_d2h: Duration,
    /// The correctness canary's repeats of its agreement GEMM stop after this (its exact
    /// checks and first run come on top: about a second on an H200).
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub sdc: Duration,
    /// The HBM pattern test's time budget: its passes stop when it is spent (the report says
    /// which ran).
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub memtest: Duration,
}

impl Default for ProbeDurations {
    fn default() -> Self {
        ProbeDurations {
            // The GEMM runs longest: a power-capped board needs a while to settle (an H200
            // bursts to ~790 TFLOP/s for ~40 ms, then swings between ~665 and ~695), and the
            // sustained figure is taken over the second half of the run.
            gemm_bf16: Duration::from_secs(5),
            fma_fp32: Duration::from_secs(2),
            hbm_copy: Duration::from_secs(2),
            pcie_h2d: Duration::from_secs(2),
            pcie_d2h: Duration::from_secs(2),
            sdc: Duration::from_secs(1),
            memtest: Duration::from_secs(10),
        }
    }
}

impl ProbeDurations {
    pub fn of(&self, test: crate::model::probe::Test) -> Duration {
        use crate::model::probe::Test;
        match test {
            Test::GemmBf16 => self.gemm_bf16,
            Test::FmaFp32 => self.fma_fp32,
            Test::HbmCopy => self.hbm_copy,
            Test::PcieH2d => self.pcie_h2d,
            Test::PcieD2h => self.pcie_d2h,
            Test::Sdc => self.sdc,
            Test::Memtest => self.memtest,
        }
    }
}

/// A probe test's duration: long enough to measure (100ms), short enough not to hold the GPU (60s).
pub(super) fn test_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let value = duration(d)?;
    if value < Duration::from_millis(100) || value > Duration::from_secs(60) {
        return Err(serde::de::Error::custom(format!(
            "a probe test runs from 100ms to 60s; {value:?} is outside that"
        )));
    }
    Ok(value)
}

/// A ratio from 0 to 1.
pub(super) fn fraction<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let value = f64::deserialize(d)?;
    if !(0.0..=1.0).contains(&value) {
        return Err(serde::de::Error::custom(format!(
            "{value} is not a fraction; write a number from 0 to 1 (0.9 means 90%)"
        )));
    }
    Ok(value)
}

pub(super) fn regression_pct<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let value = f64::deserialize(d)?;
    if !(value > 0.0 && value <= 50.0) {
        return Err(serde::de::Error::custom(format!(
            "probe.regression_pct is {value}; write a percentage above 0 and at most 50 (7 means 7% below)"
        )));
    }
    Ok(value)
}

pub(super) fn baseline_probes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let value = usize::deserialize(d)?;
    let most = crate::model::probe::MAX_HISTORY;
    if !(3..=most).contains(&value) {
        return Err(serde::de::Error::custom(format!(
            "probe.baseline_probes is {value}; write 3 to {most} (a median of fewer says little)"
        )));
    }
    Ok(value)
}

pub(super) fn memtest_share<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let value = f64::deserialize(d)?;
    if !(value > 0.0 && value <= 0.9) {
        return Err(serde::de::Error::custom(format!(
            "probe.memtest_share is {value}; write more than 0 and at most 0.9 (the CUDA context needs the rest)"
        )));
    }
    Ok(value)
}

pub(super) fn memtest_max_mib<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let value = u64::deserialize(d)?;
    if value < 64 {
        return Err(serde::de::Error::custom(format!(
            "probe.memtest_max_mib is {value}; write at least 64"
        )));
    }
    Ok(value)
}

pub(super) fn memory_cap_mib<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let value = u64::deserialize(d)?;
    if value < 256 {
        return Err(serde::de::Error::custom(format!(
            "memory_cap_mib is {value}; the smallest buffers the probe measures with need 256 MiB"
        )));
    }
    Ok(value)
}

pub(super) fn probe_tests<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<crate::model::probe::Test>, D::Error> {
    let tests = Vec::<crate::model::probe::Test>::deserialize(d)?;
    if tests.is_empty() {
        return Err(serde::de::Error::custom(
            "probe.tests is empty; list at least one of gemm_bf16, fma_fp32, hbm_copy, pcie_h2d, pcie_d2h, sdc, memtest",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for test in &tests {
        if !seen.insert(*test) {
            return Err(serde::de::Error::custom(format!("{} is listed twice", test.name())));
        }
    }
    Ok(tests)
}
