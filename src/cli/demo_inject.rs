//! `gpuwarden demo inject`: faults put into a running demo, as the real thing would show them
//! to the daemon. An XID is a line in the demo's kernel log, as the driver writes it; a hot
//! GPU, a slow probe and a lost GPU are the simulated NVML's and CUDA's scenario rewritten
//! (the library re-reads it); a port down is the demo's sysfs tree, as the adapter's driver
//! writes it. `--undo` puts the scenario and the ports back; XIDs stay in the kernel log, as
//! on a real node, until `gpuwarden health clear`.

use super::demo::{RunningDemo, SCENARIO};
use super::demo_fabric;
use crate::service::exit::{CliError, CliResult, Exit};
use serde_json::Value;
use std::io::Write;
use std::path::Path;

/// `gpuwarden demo`'s commands.
#[derive(Debug, clap::Subcommand)]
pub enum DemoCommand {
    /// Put a fault into the running demo as the real thing would show it: an XID in its
    /// kernel log, a hot, lost or slow GPU in its simulated NVML and CUDA, a network port
    /// down; or `--undo` them. Then watch `gpuwarden health --demo`, the status page and
    /// `gpuwarden events --demo` (docs/fault-end-to-end.md walks through one).
    #[command(group(clap::ArgGroup::new("fault").required(true).args(["xid", "hot", "slow_probe", "wrong_results", "bad_hbm", "lost", "port_down", "undo"])))]
    Inject {
        /// The GPU (0 to 7) for --xid, --hot, --slow-probe, --wrong-results, --bad-hbm and --lost.
        #[arg(long, value_name = "N")]
        gpu: Option<u32>,
        /// An XID by code (79: fallen off the bus; 48: double-bit ECC; 13: an application's
        /// fault): its line in the demo's kernel log. With 79 the GPU is lost as well: it
        /// answers nothing until `--undo`.
        #[arg(long, value_name = "CODE")]
        xid: Option<u32>,
        /// The GPU over its slowdown temperature, its clocks slowed for heat.
        #[arg(long)]
        hot: bool,
        /// The GPU's HBM at 40 % of its rate under the probe: its next probe (the validation
        /// after a clear) fails.
        #[arg(long)]
        slow_probe: bool,
        /// The GPU computes one element of every GEMM wrong, by a bit: its next probe's
        /// correctness canary finds it (sdc_suspect).
        #[arg(long)]
        wrong_results: bool,
        /// A bit of the GPU's HBM stuck: its next probe's pattern test finds it
        /// (hbm_pattern_errors).
        #[arg(long)]
        bad_hbm: bool,
        /// The GPU lost: every NVML call answers "GPU is lost".
        #[arg(long)]
        lost: bool,
        /// A network port down, by adapter (mlx5_0 to mlx5_7).
        #[arg(long, value_name = "DEVICE")]
        port_down: Option<String>,
        /// The scenario and the ports as the demo started (XIDs stay in the kernel log).
        #[arg(long)]
        undo: bool,
        /// The demo running as this pid (default: the newest; its log names its pid).
        #[arg(long, value_name = "PID")]
        demo_pid: Option<u32>,
    },
}

/// Runs `gpuwarden demo ...`.
pub fn run(command: DemoCommand) -> CliResult {
    let DemoCommand::Inject {
        gpu,
        xid,
        hot,
        slow_probe,
        wrong_results,
        bad_hbm,
        lost,
        port_down,
        undo,
        demo_pid,
    } = command;
    let fault = match (xid, port_down) {
        (Some(code), _) => Fault::Xid(code),
        (_, Some(port)) => Fault::PortDown(port),
        _ if hot => Fault::Hot,
        _ if slow_probe => Fault::SlowProbe,
        _ if wrong_results => Fault::WrongResults,
        _ if bad_hbm => Fault::BadHbm,
        _ if lost => Fault::Lost,
        _ if undo => Fault::Undo,
        // clap requires one of the group.
        _ => return Err(CliError::new(Exit::USAGE, "gpuwarden demo inject: which fault?")),
    };
    let demo = super::demo::choose(demo_pid).map_err(|e| CliError::new(Exit::UNKNOWN, format!("gpuwarden: {e}")))?;
    inject(&demo, gpu, &fault)
}

/// One fault to inject.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// An XID on the GPU, by code: its kernel-log line, as NVRM writes it.
    Xid(u32),
    /// The GPU above its slowdown temperature, its clocks slowed for heat.
    Hot,
    /// The GPU's HBM at 40 % of its rate under the probe: the next probe (a validation) fails.
    SlowProbe,
    /// One element of every GEMM the GPU computes one bit off: the correctness canary's.
    WrongResults,
    /// A bit of the GPU's HBM stuck at 1: the pattern test's.
    BadHbm,
    /// The GPU lost: every NVML call answers "GPU is lost", as a GPU fallen off the bus.
    Lost,
    /// A network port down (`mlx5_0` ... `mlx5_7`), as the adapter reports a pulled cable.
    PortDown(String),
    /// The scenario and the ports as the demo started.
    Undo,
}

fn failed(what: impl std::fmt::Display) -> CliError {
    CliError::new(Exit::FAILURE, format!("gpuwarden demo inject: {what}"))
}

/// Injects `fault` into `demo` (on `gpu` where the fault is a GPU's) and says what it did.
pub fn inject(demo: &RunningDemo, gpu: Option<u32>, fault: &Fault) -> CliResult {
    let gpus = demo_fabric::gpu_addresses().count() as u32;
    let needs_gpu = !matches!(fault, Fault::PortDown(_) | Fault::Undo);
    let gpu = match (gpu, needs_gpu) {
        (Some(gpu), true) if gpu < gpus => Some(gpu),
        (Some(gpu), true) => {
            return Err(CliError::new(
                Exit::USAGE,
                format!("gpuwarden demo inject: the demo has GPUs 0 to {}, not {gpu}", gpus - 1),
            ));
        }
        (None, true) => {
            return Err(CliError::new(
                Exit::USAGE,
                "gpuwarden demo inject: --gpu N says which GPU",
            ));
        }
        (_, false) => None,
    };
    let said = match (fault, gpu) {
        (Fault::Xid(code), Some(gpu)) if *code == OFF_THE_BUS => {
            // A GPU that fell off the bus answers nothing: lost in the simulated NVML first,
            // then its XID, as the driver logs it when it finds the GPU gone.
            let lost = edit_scenario(demo, |s| lose(s, gpu))?;
            format!("{}; {lost} (`--undo` puts it back)", xid(demo, gpu, *code)?)
        }
        (Fault::Xid(code), Some(gpu)) => xid(demo, gpu, *code)?,
        (Fault::Hot, Some(gpu)) => edit_scenario(demo, |s| heat(s, gpu))?,
        (Fault::SlowProbe, Some(gpu)) => edit_scenario(demo, |s| slow_hbm(s, gpu))?,
        (Fault::WrongResults, Some(gpu)) => edit_scenario(demo, |s| wrong_results(s, gpu))?,
        (Fault::BadHbm, Some(gpu)) => edit_scenario(demo, |s| bad_hbm(s, gpu))?,
        (Fault::Lost, Some(gpu)) => edit_scenario(demo, |s| lose(s, gpu))?,
        (Fault::PortDown(port), _) => port_down(demo, port)?,
        (Fault::Undo, _) => undo(demo)?,
        _ => unreachable!("a GPU's fault always has its GPU here"),
    };
    println!("demo (pid {}): {said}", demo.pid);
    Ok(Exit::SUCCESS)
}

/// The driver's kernel-log line for an XID on the GPU at `address` (`0000:19:00.0`), as
/// `dmesg` prints it: `[seconds since boot]` first. The daemon reads no kernel-log line
/// without that mark of where its record starts (anyone could forge one, docs/health.md).
pub fn xid_line(address: &str, code: u32, micros: u64) -> String {
    // NVRM names the GPU by domain:bus:device, without the function.
    let bdf = address.rsplit_once('.').map_or(address, |(bdf, _)| bdf);
    let text = crate::xid::catalog::lookup(code).map_or("injected by gpuwarden demo inject", |e| e.description);
    format!(
        "[{:>5}.{:06}] NVRM: Xid (PCI:{bdf}): {code}, pid='<unknown>', name=<unknown>, {text}\n",
        micros / 1_000_000,
        micros % 1_000_000
    )
}

/// A second after the last `[seconds]` stamp of the kernel log `text` (the log goes forward).
fn next_stamp(text: &str) -> u64 {
    let last = text
        .lines()
        .filter_map(|line| line.strip_prefix('[')?.split_once(']'))
        .filter_map(|(stamp, _)| stamp.trim().parse::<f64>().ok())
        .fold(0.0, f64::max);
    (last * 1e6) as u64 + 1_000_000
}

/// Xid 79: the GPU has fallen off the bus.
const OFF_THE_BUS: u32 = 79;

fn xid(demo: &RunningDemo, gpu: u32, code: u32) -> Result<String, CliError> {
    let address = demo_fabric::gpu_addresses()
        .nth(gpu as usize)
        .ok_or_else(|| failed(format!("no GPU {gpu}")))?;
    let log = demo.dir.join("kmsg");
    let text =
        std::fs::read(&log).map_err(|e| failed(format!("cannot read the demo's kernel log {}: {e}", log.display())))?;
    let stamp = next_stamp(&String::from_utf8_lossy(&text));
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .map_err(|e| failed(format!("cannot open the demo's kernel log {}: {e}", log.display())))?;
    file.write_all(xid_line(&address, code, stamp).as_bytes())
        .map_err(|e| failed(format!("cannot write the demo's kernel log {}: {e}", log.display())))?;
    let name = crate::xid::catalog::lookup(code).map_or("not in NVIDIA's catalog", |e| e.name);
    Ok(format!(
        "Xid {code} ({name}) on GPU {gpu} ({address}) in the kernel log; `gpuwarden health --demo` shows the verdict within seconds"
    ))
}

/// Rewrites the demo's scenario through `change` (next to it, then renamed over it, so the
/// simulated library never reads half a file).
fn edit_scenario(
    demo: &RunningDemo,
    change: impl FnOnce(&mut Value) -> Result<String, NotInScenario>,
) -> Result<String, CliError> {
    let path = demo.dir.join("scenario.yaml");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| failed(format!("cannot read the demo's scenario {}: {e}", path.display())))?;
    let mut scenario: Value =
        serde_saphyr::from_str(&text).map_err(|e| failed(format!("the demo's scenario does not parse: {e}")))?;
    let said = change(&mut scenario).map_err(failed)?;
    write_scenario(&path, &scenario)?;
    Ok(said)
}

fn write_scenario(path: &Path, scenario: &Value) -> Result<(), CliError> {
    let text = serde_saphyr::to_string(scenario).map_err(|e| failed(format!("cannot write the scenario: {e}")))?;
    let partial = path.with_extension("yaml.partial");
    std::fs::write(&partial, text)
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|e| failed(format!("cannot write the demo's scenario {}: {e}", path.display())))
}

/// What a change could not find in the demo's scenario.
#[derive(Debug, thiserror::Error)]
enum NotInScenario {
    #[error("the scenario has no GPU {0}")]
    Gpu(u32),
    #[error("GPU {0} has no simulated CUDA in the scenario")]
    Cuda(u32),
}

fn device(scenario: &mut Value, gpu: u32) -> Result<&mut serde_json::Map<String, Value>, NotInScenario> {
    scenario["devices"]
        .get_mut(gpu as usize)
        .and_then(Value::as_object_mut)
        .ok_or(NotInScenario::Gpu(gpu))
}

/// Two degrees above its slowdown temperature, with hardware and software thermal slowdown
/// active (NVML's bits 0x20 and 0x40).
fn heat(scenario: &mut Value, gpu: u32) -> Result<String, NotInScenario> {
    let device = device(scenario, gpu)?;
    let slowdown = device["thresholds"]["slowdown"].as_u64().unwrap_or(89);
    let temperature = slowdown + 2;
    device.insert("temperature".into(), temperature.into());
    let events = device
        .entry("clock_events")
        .or_insert_with(|| serde_json::json!({"active": 0, "supported": 511}));
    let active = events["active"].as_u64().unwrap_or(0) | 0x20 | 0x40;
    events["active"] = active.into();
    Ok(format!(
        "GPU {gpu} at {temperature} C, over its slowdown temperature of {slowdown} C, clocks slowed for heat"
    ))
}

fn slow_hbm(scenario: &mut Value, gpu: u32) -> Result<String, NotInScenario> {
    let cuda = cuda_of(scenario, gpu)?;
    let rate = cuda.get("hbm_copy_gbps").and_then(Value::as_f64).unwrap_or(4300.0) * 0.4;
    cuda.insert("hbm_copy_gbps".into(), rate.into());
    Ok(format!(
        "GPU {gpu}'s HBM copies at {rate:.0} GB/s under the probe: its next probe (a validation after a clear) fails"
    ))
}

fn cuda_of(scenario: &mut Value, gpu: u32) -> Result<&mut serde_json::Map<String, Value>, NotInScenario> {
    device(scenario, gpu)?
        .get_mut("cuda")
        .and_then(Value::as_object_mut)
        .ok_or(NotInScenario::Cuda(gpu))
}

fn wrong_results(scenario: &mut Value, gpu: u32) -> Result<String, NotInScenario> {
    // Element 777 lies inside the exact GEMMs' results: the exact checks name it.
    cuda_of(scenario, gpu)?.insert("sdc_wrong_element".into(), 777.into());
    Ok(format!(
        "GPU {gpu} computes element 777 of every GEMM one bit off: its next probe (a validation after a clear) \
         finds it (sdc_suspect)"
    ))
}

fn bad_hbm(scenario: &mut Value, gpu: u32) -> Result<String, NotInScenario> {
    cuda_of(scenario, gpu)?.insert("hbm_stuck_bit".into(), serde_json::json!([1000, 3, 1]));
    Ok(format!(
        "GPU {gpu}'s memory has bit 3 of word 1000 of the probe's pattern region stuck at 1: its next probe (a \
         validation after a clear) finds it (hbm_pattern_errors)"
    ))
}

fn lose(scenario: &mut Value, gpu: u32) -> Result<String, NotInScenario> {
    device(scenario, gpu)?.insert("lost".into(), true.into());
    Ok(format!(
        "GPU {gpu} is lost: every NVML call answers \"GPU is lost\", as when it falls off the bus"
    ))
}

fn port_down(demo: &RunningDemo, port: &str) -> Result<String, CliError> {
    let dir = demo_fabric::port_dir(&demo.dir.join("sysfs"), port).ok_or_else(|| {
        CliError::new(
            Exit::USAGE,
            format!("gpuwarden demo inject: the demo has ports mlx5_0 to mlx5_7 (port 1 each), not {port}"),
        )
    })?;
    demo_fabric::set_port(&dir, false)
        .map_err(|e| failed(format!("cannot write the port's state in {}: {e}", dir.display())))?;
    Ok(format!(
        "{port} port 1 down (a pulled cable: state DOWN, phys_state Disabled)"
    ))
}

fn undo(demo: &RunningDemo) -> Result<String, CliError> {
    let scenario: Value =
        serde_saphyr::from_str(SCENARIO).map_err(|e| failed(format!("the shipped scenario does not parse: {e}")))?;
    write_scenario(&demo.dir.join("scenario.yaml"), &scenario)?;
    let sys = demo.dir.join("sysfs");
    for i in 0..demo_fabric::gpu_addresses().count() {
        if let Some(dir) = demo_fabric::port_dir(&sys, &format!("mlx5_{i}")) {
            demo_fabric::set_port(&dir, true)
                .map_err(|e| failed(format!("cannot write the port's state in {}: {e}", dir.display())))?;
        }
    }
    Ok("the scenario and the ports as the demo started; XIDs stay in the kernel log (`gpuwarden health clear` clears their findings)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Value {
        serde_saphyr::from_str(SCENARIO).unwrap()
    }

    #[test]
    fn an_xid_line_is_what_the_daemon_reads_as_that_xid_on_that_gpu() {
        let line = xid_line("0000:19:00.0", 79, next_stamp(super::super::demo::KERNEL_LOG));
        assert_eq!(
            line,
            "[ 1531.009114] NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, \
             GPU has fallen off the bus: the driver cannot reach it over PCIe\n"
        );
        // The daemon's own parser reads it as Xid 79 on that GPU.
        let found = crate::xid::parse::LogParser::default().parse(&line);
        assert_eq!(found.len(), 1, "{line}");
        assert_eq!(
            (found[0].xid, found[0].pci_bus_id.as_deref()),
            (79, Some("0000:19:00.0"))
        );
    }

    #[test]
    fn heat_puts_the_gpu_over_its_slowdown_with_thermal_reasons_active() {
        let mut s = scenario();
        heat(&mut s, 0).unwrap();
        let d = &s["devices"][0];
        assert_eq!(d["temperature"], 91);
        assert_eq!(d["clock_events"]["active"].as_u64().unwrap() & 0x60, 0x60);
        // The rewritten scenario is still one the simulated library takes.
        let text = serde_saphyr::to_string(&s).unwrap();
        let again: Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(again, s);
    }

    #[test]
    fn slow_hbm_and_lost_change_only_their_gpu() {
        let mut s = scenario();
        slow_hbm(&mut s, 2).unwrap();
        lose(&mut s, 3).unwrap();
        assert_eq!(s["devices"][2]["cuda"]["hbm_copy_gbps"], 1720.0);
        assert_eq!(s["devices"][1]["cuda"]["hbm_copy_gbps"], 4300);
        assert_eq!(s["devices"][3]["lost"], true);
        assert!(s["devices"][2].get("lost").is_none());
        assert!(heat(&mut s, 9).is_err());
        wrong_results(&mut s, 4).unwrap();
        bad_hbm(&mut s, 5).unwrap();
        assert_eq!(s["devices"][4]["cuda"]["sdc_wrong_element"], 777);
        assert_eq!(
            s["devices"][5]["cuda"]["hbm_stuck_bit"],
            serde_json::json!([1000, 3, 1])
        );
        assert!(s["devices"][3]["cuda"].get("sdc_wrong_element").is_none());
    }
}
