//! The probe's checks of results and memory end to end (docs/probe.md, "Silent data
//! corruption" and "HBM patterns"), over the simulated CUDA, which does the correctness
//! canary's arithmetic for real and can give one GEMM element wrong (`sdc_wrong_element` in a
//! GPU's `cuda:`) or hold one HBM bit stuck (`hbm_stuck_bit`): `gpuwarden probe --tests sdc`
//! and `--tests memtest`, the `sdc_suspect` and `hbm_pattern_errors` findings with their
//! evidence, the journal rows and report sections, a suspect kept across a restart until a
//! clear, a validation they hold back, and the idle node's sweep running them.

use crate::common;
use common::*;
use std::process::Command;
use std::time::Duration;

/// One H100 as the simulated CUDA sees it; `uuid_end` and `bus` make more of them.
fn gpu(uuid_end: &str, bus: &str, wrong_element: Option<u64>) -> String {
    gpu_with(
        uuid_end,
        bus,
        &wrong_element.map_or(String::new(), |i| format!(", sdc_wrong_element: {i}")),
    )
}

/// One H100 whose memory has bit 3 of word 1000 of the pattern test's region stuck at 1.
fn gpu_stuck(uuid_end: &str, bus: &str) -> String {
    gpu_with(uuid_end, bus, ", hbm_stuck_bit: [1000, 3, 1]")
}

fn gpu_with(uuid_end: &str, bus: &str, wrong: &str) -> String {
    format!(
        "  - name: NVIDIA H100 80GB HBM3
    uuid: GPU-557e664c-0911-a952-bda7-8175faf6ad{uuid_end}
    pci_bus_id: \"00000000:{bus}:00.0\"
    temperature: 41
    power_mw: 650000
    clocks_mhz: {{sm: 1755}}
    utilization: {{gpu: 0, memory: 0}}
    memory: {{total: 85899345920, used: 536870912}}
    cuda: {{gemm_bf16_tflops: 690, fma_fp32_tflops: 65.7, hbm_copy_gbps: 3030, pcie_h2d_gbps: 55.1, pcie_d2h_gbps: 55.2{wrong}}}
"
    )
}

/// The exact GEMMs' results in the simulation are 256 x 256 (2 SMs): an element past them is
/// only in the agreement GEMM's 512 x 512 result.
const IN_EXACT_RESULT: u64 = 777;
const ONLY_IN_AGREEMENT: u64 = 100_000;

fn probe_sdc(scenario: &str, json: bool) -> (i32, String) {
    probe_test(scenario, "sdc", json)
}

fn probe_test(scenario: &str, test: &str, json: bool) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scenario.yaml"), scenario).unwrap();
    let config = format!(
        "nvml:\n  library_path: {}\nprobe:\n  memory_cap_mib: 256\n",
        sim_library().display()
    );
    std::fs::write(dir.path().join("config.yaml"), config).unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["probe", "--tests", test, "--config"])
        .arg(dir.path().join("config.yaml"))
        .env("GPUWARDEN_SIM_NVML_SCENARIO", dir.path().join("scenario.yaml"))
        .env("LD_LIBRARY_PATH", sim_cuda_dir(dir.path(), true));
    if json {
        command.arg("--json");
    }
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn canary(report: &serde_json::Value) -> &serde_json::Value {
    &report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["test"] == "sdc")
        .unwrap_or_else(|| panic!("no sdc in {report}"))["sdc"]
}

#[test]
fn the_canary_passes_a_right_gpu_and_names_the_wrong_element_of_a_wrong_one() {
    let (code, out) = probe_sdc(&format!("devices:\n{}", gpu("ad", "19", None)), true);
    assert_eq!(code, 0, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let c = canary(&report);
    let checks: Vec<(&str, u64)> = c["exact"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["name"].as_str().unwrap(), x["mismatches"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        checks,
        [
            ("gemm_bf16_exact", 0),
            ("gemm_fp16_exact", 0),
            ("gemm_fp32_exact", 0),
            ("fma_chain", 0)
        ]
    );
    assert_eq!(c["key"]["sms"], 2);
    assert_eq!(c["key"]["cublas"], "130100");
    assert_eq!(c["digest"].as_str().unwrap().len(), 16);
    assert_eq!(c["parts"].as_array().unwrap().len(), 64);
    assert!(c["repeats"].as_u64().unwrap() > 1, "{c}");
    assert_eq!(c["repeats_differing"], 0);

    // One element of every GEMM one bit off: each exact check finds it, and says where and what.
    let wrong = format!("devices:\n{}", gpu("ad", "19", Some(IN_EXACT_RESULT)));
    let (code, out) = probe_sdc(&wrong, true);
    assert_eq!(code, 1, "a wrong result fails the probe: {out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let c = canary(&report);
    let bf16 = &c["exact"][0];
    assert_eq!(bf16["mismatches"], 1);
    assert_eq!(bf16["first"]["index"], IN_EXACT_RESULT);
    assert_ne!(bf16["first"]["expected_bits"], bf16["first"]["got_bits"]);
    assert_eq!(c["exact"][3]["mismatches"], 0, "the FMA chains are right");
    let (code, text) = probe_sdc(&wrong, false);
    assert_eq!(code, 1);
    assert!(
        text.contains("sdc WRONG: gemm_bf16_exact: 1 of 65536 elements differ (first at 777: expected"),
        "{text}"
    );
}

fn sdc_finding(d: &Daemon, gpu: &str) -> Option<String> {
    let verdict: serde_json::Value = serde_json::from_slice(&d.get("/api/v1/health", &[]).body).ok()?;
    verdict["gpus"]
        .as_array()?
        .iter()
        .find(|g| g["index"].as_u64().map(|i| i.to_string()).as_deref() == Some(gpu))?["findings"]
        .as_array()?
        .iter()
        .find(|f| f["reason"] == "sdc_suspect")
        .and_then(|f| f["message"].as_str().map(str::to_string))
}

fn suspect_of(m: &Metrics, gpu: &str) -> Option<f64> {
    m.value("gpu_health_reason", &[("gpu", gpu), ("reason", "sdc_suspect")])
}

/// Three GPUs of one model; GPU 2 gives one element of its agreement GEMM wrong, every run
/// the same way, so only the node's agreement can tell. It is found, named against the two
/// that agree, written with its evidence, kept across a restart after its repair, held back
/// by its validation while wrong, and let back by a clear and a clean validation.
#[test]
fn a_gpu_the_others_disagree_with_is_a_suspect_until_cleared_and_validated() {
    let node = |wrong: Option<u64>| {
        format!(
            "devices:\n{}{}{}",
            gpu("ad", "19", None),
            gpu("ae", "3b", None),
            gpu("af", "4c", wrong)
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(dir.path(), true).display().to_string())];
    let probes = format!("{FAST_PROBES}health:\n  validate_after_clear: true\n");
    let d = Daemon::start_full(
        &node(Some(ONLY_IN_AGREEMENT)),
        &test_config(&sim_library(), &probes),
        "",
        &env,
    );
    let m = d.scrape_until_within("GPU 2 a suspect", Duration::from_secs(60), |m| {
        suspect_of(m, "2") == Some(1.0)
            && ["0", "1"].iter().all(|g| {
                m.value("gpu_probe_runs_total", &[("gpu", g), ("result", "pass")])
                    .is_some()
            })
    });
    assert_eq!(suspect_of(&m, "0"), None);
    assert_eq!(suspect_of(&m, "1"), None);
    assert_eq!(
        m.value("gpu_health", &[("gpu", "2"), ("state", "unhealthy")]),
        Some(1.0)
    );
    let message = sdc_finding(&d, "2").expect("the finding");
    assert!(message.contains("which GPUs 0, 1 of the same model gave"), "{message}");
    assert!(message.contains("of 64 differ"), "{message}");
    assert!(
        !message.contains("gemm_bf16_exact"),
        "the exact checks were right: {message}"
    );

    // The journal: the suspect with its evidence, the agreed digest; the report's section.
    let state = d.state_path();
    let rows = eventually("the sdc rows", Duration::from_secs(10), || {
        let rows = events_json(&state, &["--kind", "sdc"]);
        let rows = rows.as_array()?.clone();
        (rows.iter().any(|r| r["details"]["suspect"].is_object())
            && rows.iter().any(|r| r["details"]["reference"].is_object()))
        .then_some(rows)
    });
    let suspect = rows.iter().find(|r| r["details"]["suspect"].is_object()).unwrap();
    assert_eq!(suspect["details"]["suspect"]["gpu"], 2, "{suspect}");
    assert_eq!(suspect["pci_bus_id"], "0000:4c:00.0", "{suspect}");
    let digest = suspect["details"]["suspect"]["digest"].as_str().unwrap().to_string();
    let reference = rows.iter().find(|r| r["details"]["reference"].is_object()).unwrap();
    assert_ne!(reference["details"]["reference"]["digest"], digest.as_str());
    let report = report_markdown(&state, "2");
    let section =
        report_section(&report, "Wrong results (silent data corruption)").unwrap_or_else(|| panic!("{report}"));
    assert!(
        section.contains(&digest) && section.contains("which GPUs 0, 1"),
        "{section}"
    );

    // While it is still wrong, a clear starts a validation that does not pass.
    let (_, out, err) = d.clear("2", "reseated, INC-7", &[]);
    assert!(out.contains("validating"), "{out}{err}");
    let validation = eventually("the validation's end", Duration::from_secs(60), || {
        let rows = events_json(&state, &["--kind", "validation", "--gpu", "2"]);
        rows.as_array()?
            .iter()
            .find(|r| r["details"]["state"] == "failed")
            .cloned()
    });
    assert!(
        validation["summary"].as_str().unwrap().contains("sdc ("),
        "{validation}"
    );
    let m = d.scrape();
    assert_eq!(suspect_of(&m, "2"), Some(1.0), "found again after the clear");

    // Repaired (the scenario computes right now), then a restart: the suspect comes back
    // from the journal, though every probe since is right.
    d.set_scenario(&node(None));
    let d = d.restart(false, None);
    d.scrape_until_within("the suspect after the restart", Duration::from_secs(30), |m| {
        suspect_of(m, "2") == Some(1.0)
    });
    let runs = |m: &Metrics| {
        m.value("gpu_probe_runs_total", &[("gpu", "2"), ("result", "pass")])
            .unwrap_or(0.0)
    };
    d.scrape_until_within("two right probes of GPU 2", Duration::from_secs(60), |m| runs(m) >= 2.0);
    assert_eq!(
        suspect_of(&d.scrape(), "2"),
        Some(1.0),
        "a right probe does not clear it"
    );
    assert!(
        d.log_text().contains("GPU(s) 2 computed wrong results"),
        "{}",
        d.log_text()
    );

    // A person's clear, then a clean validation: back in service.
    let (_, out, err) = d.clear("2", "replaced the board, RMA-12", &[]);
    assert!(out.contains("sdc_suspect"), "the clear lets go of it: {out}{err}");
    d.scrape_until_within("GPU 2 healthy again", Duration::from_secs(60), |m| {
        suspect_of(m, "2").is_none() && m.value("gpu_health", &[("gpu", "2"), ("state", "ok")]) == Some(1.0)
    });
}

/// The idle node's sweep (`probe.mode: node`) runs the canary and the pattern test on every
/// GPU: a GPU that gives a wrong element, and one whose memory holds a stuck bit, fail their
/// sweep validations and are suspects; the memory errors stay after a restart until a clear.
#[test]
fn the_idle_sweep_runs_the_canary_and_the_pattern_test() {
    let node = |stuck: bool| {
        format!(
            "devices:\n{}{}{}",
            gpu("ad", "19", None),
            gpu("ae", "3b", Some(IN_EXACT_RESULT)),
            if stuck {
                gpu_stuck("af", "4c")
            } else {
                gpu("af", "4c", None)
            }
        )
    };
    let scenario = node(true);
    let dir = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(dir.path(), true).display().to_string())];
    let probes = "probe:\n  schedule: true\n  mode: node\n  interval: 2s\n  memory_cap_mib: 256\n  max_utilization: 0.5\n  \
                  timeout: 20s\n  durations: {gemm_bf16: 200ms, fma_fp32: 200ms, hbm_copy: 200ms, pcie_h2d: 200ms, pcie_d2h: 200ms}\n";
    let d = Daemon::start_full(&scenario, &test_config(&sim_library(), probes), "", &env);
    d.scrape_until_within("GPU 1 a suspect after the sweep", Duration::from_secs(60), |m| {
        suspect_of(m, "1") == Some(1.0)
    });
    let state = d.state_path();
    let failed = eventually("GPU 1's sweep validation failed", Duration::from_secs(30), || {
        let rows = events_json(&state, &["--kind", "validation", "--gpu", "1"]);
        rows.as_array()?
            .iter()
            .find(|r| r["details"]["state"] == "failed" && r["details"]["validation"]["kind"] == "sweep")
            .cloned()
    });
    assert!(
        failed["summary"]
            .as_str()
            .unwrap()
            .contains("gemm_bf16_exact: 1 of 65536 elements differ"),
        "{failed}"
    );
    assert_eq!(suspect_of(&d.scrape(), "0"), None, "the right GPU is no suspect");

    // GPU 2's memory: the finding, its sweep validation failed, the row and the report section.
    let hbm = |m: &Metrics, gpu: &str| m.value("gpu_health_reason", &[("gpu", gpu), ("reason", "hbm_pattern_errors")]);
    let m = d.scrape_until_within("GPU 2's memory errors", Duration::from_secs(30), |m| {
        hbm(m, "2") == Some(1.0)
    });
    assert_eq!(hbm(&m, "0"), None);
    assert_eq!(hbm(&m, "1"), None, "the wrong GEMM is not a memory error");
    let failed = eventually("GPU 2's sweep validation failed", Duration::from_secs(30), || {
        let rows = events_json(&state, &["--kind", "validation", "--gpu", "2"]);
        rows.as_array()?
            .iter()
            .find(|r| r["details"]["state"] == "failed")
            .cloned()
    });
    assert!(failed["summary"].as_str().unwrap().contains("memtest ("), "{failed}");
    let row = eventually("the memtest row", Duration::from_secs(10), || {
        let rows = events_json(&state, &["--kind", "memtest"]);
        rows.as_array()?.first().cloned()
    });
    assert_eq!(row["pci_bus_id"], "0000:4c:00.0", "{row}");
    assert_eq!(row["details"]["suspect"]["bad"][0]["offset"], 4000, "{row}");
    let report = report_markdown(&state, "2");
    let section = report_section(&report, "HBM pattern errors").unwrap_or_else(|| panic!("{report}"));
    assert!(section.contains("offset 0xfa0"), "{section}");

    // The board is replaced (the scenario's memory is right now): the finding stays across a
    // restart until a person clears it.
    d.set_scenario(&node(false));
    let d = d.restart(false, None);
    d.scrape_until_within("the memory errors after the restart", Duration::from_secs(30), |m| {
        hbm(m, "2") == Some(1.0)
    });
    let (_, out, err) = d.clear("2", "replaced the board, RMA-31", &[]);
    assert!(out.contains("hbm_pattern_errors"), "{out}{err}");
    d.scrape_until_within("GPU 2 without memory errors", Duration::from_secs(60), |m| {
        hbm(m, "2").is_none()
    });
}

#[test]
fn the_pattern_test_passes_right_memory_and_names_the_stuck_bits_word() {
    let (code, out) = probe_test(&format!("devices:\n{}", gpu("ad", "19", None)), "memtest", true);
    assert_eq!(code, 0, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let test = report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["test"] == "memtest")
        .unwrap();
    let m = &test["memtest"];
    // Half of the simulated 2 GiB free, every pass within the budget, nothing wrong.
    assert_eq!(m["bytes"], 1u64 << 30);
    assert_eq!(m["complete"], true);
    assert_eq!(m["passes"].as_array().unwrap().len(), 70);
    assert_eq!(m["errors"], 0);
    assert!(test["sustained"].as_f64().unwrap() > 0.0);

    let stuck = format!("devices:\n{}", gpu_stuck("ad", "19"));
    let (code, out) = probe_test(&stuck, "memtest", true);
    assert_eq!(code, 1, "memory that reads back wrong fails the probe: {out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let m = &report["tests"][0]["memtest"];
    let failing: Vec<&str> = m["passes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["errors"].as_u64() > Some(0))
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    // Bit 3 stuck at 1 reads wrong wherever a pass wrote it 0: the inverse address (word
    // 1000's index has bit 3 set), the moving inversions, and walking zeros at bit 3 and
    // walking ones at every other bit.
    assert!(
        failing.contains(&"address_inverse") && !failing.contains(&"address"),
        "{failing:?}"
    );
    assert!(
        failing.contains(&"walking_zeros_bit3") && !failing.contains(&"walking_ones_bit3"),
        "{failing:?}"
    );
    assert!(failing.contains(&"walking_ones_bit0"), "{failing:?}");
    let bad = &m["bad"][0];
    assert_eq!(bad["offset"], 4000, "word 1000: {bad}");
    assert_eq!(
        u32::from_str_radix(bad["got"].as_str().unwrap(), 16).unwrap()
            ^ u32::from_str_radix(bad["expected"].as_str().unwrap(), 16).unwrap(),
        1 << 3
    );
    let (_, text) = probe_test(&stuck, "memtest", false);
    assert!(text.contains("memtest WRONG: "), "{text}");
    assert!(text.contains("offset 0xfa0"), "{text}");
}

/// A fresh node (no digest kept) whose GPU 0 gives one element of its agreement GEMM wrong
/// and is probed first: its digest is only one GPU's word, so GPU 1 that differs from it is
/// not blamed; once GPUs 1 and 2 agree, that is the reference and GPU 0 is judged again and
/// found. No row ever names GPU 1 or 2 a suspect, and the wrong GPU's runs count as failed.
#[test]
fn on_a_fresh_node_the_wrong_gpu_probed_first_is_found_and_no_right_one_is_blamed() {
    let scenario = format!(
        "devices:\n{}{}{}",
        gpu("ad", "19", Some(ONLY_IN_AGREEMENT)),
        gpu("ae", "3b", None),
        gpu("af", "4c", None)
    );
    let dir = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(dir.path(), true).display().to_string())];
    let d = Daemon::start_full(&scenario, &test_config(&sim_library(), FAST_PROBES), "", &env);
    let m = d.scrape_until_within("GPU 0 a suspect", Duration::from_secs(60), |m| {
        suspect_of(m, "0") == Some(1.0)
            && m.value("gpu_probe_runs_total", &[("gpu", "0"), ("result", "fail")])
                .is_some()
    });
    assert_eq!(suspect_of(&m, "1"), None);
    assert_eq!(suspect_of(&m, "2"), None);
    let message = sdc_finding(&d, "0").expect("the finding");
    assert!(message.contains("which GPUs 1, 2"), "{message}");
    // A few more rounds of probes: the right GPUs stay right, and no row ever blamed them.
    d.scrape_until_within("two more probes of GPU 1", Duration::from_secs(60), |m| {
        m.value("gpu_probe_runs_total", &[("gpu", "1"), ("result", "pass")])
            .unwrap_or(0.0)
            >= 3.0
    });
    let rows = events_json(&d.state_path(), &["--kind", "sdc"]);
    let blamed: Vec<&serde_json::Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["details"]["suspect"].is_object())
        .map(|r| &r["details"]["suspect"]["gpu"])
        .collect();
    assert!(!blamed.is_empty() && blamed.iter().all(|g| **g == 0), "{rows}");
    assert!(
        d.log_text().contains("GPU 1's canary is not judged yet"),
        "{}",
        d.log_text()
    );
}
