//! The amdgpu sysfs backend: every reading from files under `amd.sysfs_root`
//! (`/` by default; tests and users point it at a copy of the tree).
//!
//! Per GPU (/sys/class/drm/cardN/device, for cards whose uevent says DRIVER=amdgpu):
//! hwmon temperatures by label (edge, junction, mem -> hbm) with their crit/emergency
//! thresholds, power and power cap; `gpu_metrics` (energy, clocks, throttle bits, v1.4+
//! PCIe replays); gpu_busy_percent, mem_busy_percent, mem_info_vram_used/total;
//! current/max_link_speed and width (the PCI device's own files); pcie_replay_count; and the
//! RAS counters in ras/*_err_count. A file the GPU does not have is a reading it does not
//! support; a card whose uevent is gone has left the bus.

use super::gpu_metrics::{self, GpuMetrics};
use crate::backend::PollReport;
use crate::input;
use crate::model::clock_events;
use crate::model::{ClockDomain, Sensor};
use crate::model::{DeviceIdentity, DeviceReadings, EccCount, Vendor};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub(crate) const BACKEND: &str = "amdgpu_sysfs";

/// Names of Instinct boards by PCI device id, for boards without a product_name file.
const DEVICE_NAMES: [(u32, &str); 9] = [
    (0x738c, "AMD Instinct MI100"),
    (0x7408, "AMD Instinct MI250X"),
    (0x740c, "AMD Instinct MI250X / MI250"),
    (0x740f, "AMD Instinct MI210"),
    (0x74a0, "AMD Instinct MI300A"),
    (0x74a1, "AMD Instinct MI300X"),
    (0x74a5, "AMD Instinct MI325X"),
    (0x74a9, "AMD Instinct MI300X HF"),
    (0x74b5, "AMD Instinct MI300X VF"),
];

/// The drm class directory under `root`.
/// Whether the amdgpu kernel driver is loaded (its module directory exists).
pub(crate) fn driver_loaded(root: &Path) -> bool {
    root.join("sys/module/amdgpu").is_dir()
}

pub(crate) fn drm_dir(root: &Path) -> PathBuf {
    root.join("sys/class/drm")
}

/// One poller per amdgpu card, numbered in card order. Err when the drm class directory
/// exists but cannot be read.
pub(crate) fn device_pollers(root: &Path) -> std::io::Result<Vec<SysfsDevicePoller>> {
    let entries = match std::fs::read_dir(drm_dir(root)) {
        Ok(entries) => entries,
        // No DRM driver loaded at all (a container without /sys/class/drm, a node with no
        // GPU driver yet): no AMD GPU, which is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut cards: Vec<(u32, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            // card0, card1, ...; not card0-DP-1 (connectors) or renderD128.
            let number: u32 = name.strip_prefix("card")?.parse().ok()?;
            // `device` is the kernel's link to the PCI device: followed only into the root.
            match input::resolve_inside(&root.join("sys"), &entry.path().join("device")) {
                Ok(device) => Some((number, device)),
                Err(refused) => {
                    refused.record(&mut input::Skips::new(input::Input::Sysfs));
                    None
                }
            }
        })
        .filter(|(_, device)| uevent(device).is_some_and(|u| u.driver == "amdgpu"))
        .collect();
    cards.sort();
    let driver_version = read_trimmed(&root.join("sys/module/amdgpu/version")).unwrap_or_default();
    Ok(cards
        .into_iter()
        .enumerate()
        .map(|(index, (_, device))| SysfsDevicePoller::new(index as u32, device, &driver_version))
        .collect())
}

struct Uevent {
    driver: String,
    pci_slot: String,
    pci_id: String,
}

fn uevent(device: &Path) -> Option<Uevent> {
    let text = read_trimmed(&device.join("uevent"))?;
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    Some(Uevent {
        driver: field("DRIVER"),
        pci_slot: field("PCI_SLOT_NAME"),
        pci_id: field("PCI_ID"),
    })
}

/// The largest sysfs attribute: the kernel hands out at most a page.
const MAX_ATTRIBUTE: usize = 4096;
/// `gpu_metrics` is a binary table of a few hundred bytes (v1.x) to a few kilobytes (v3).
const MAX_GPU_METRICS: usize = 64 * 1024;

/// A sysfs attribute, trimmed; through [`crate::input`] (bounded, non-blocking, no link
/// followed), with what was skipped counted under `input="sysfs"`.
fn read_trimmed(path: &Path) -> Option<String> {
    input::read_value(path, MAX_ATTRIBUTE, &mut input::Skips::new(input::Input::Sysfs))
}

/// Link rate files read like "16.0 GT/s PCIe".
fn link_rate_gts(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// RAS counts read like "ue: 0\nce: 12".
fn ras_counts(text: &str) -> (Option<u64>, Option<u64>) {
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
    };
    (value("ue:"), value("ce:"))
}

/// Readings that do not change while the GPU is in the node, read once.
#[derive(Debug, Clone, Default)]
struct StaticReadings {
    hwmon: Option<PathBuf>,
    /// (file stem, sensor), e.g. ("temp2", "junction").
    sensors: Vec<(String, Sensor)>,
    thresholds: Vec<(crate::model::Threshold, f64)>,
    pcie_generation_max: Option<u32>,
    pcie_width_max: Option<u32>,
}

pub(crate) struct SysfsDevicePoller {
    identity: DeviceIdentity,
    device: PathBuf,
    statics: Option<StaticReadings>,
    /// An unknown gpu_metrics revision is logged once, then skipped quietly.
    unknown_metrics: crate::service::logging::Outage,
}

/// Temperatures, power and the fan from the card's hwmon directory.
fn read_hwmon(statics: &StaticReadings, r: &mut DeviceReadings) {
    let Some(hwmon) = &statics.hwmon else {
        return;
    };
    for (stem, sensor) in &statics.sensors {
        if let Some(t) = read_trimmed(&hwmon.join(format!("{stem}_input"))).and_then(|v| v.parse::<f64>().ok()) {
            r.temperatures.push((*sensor, t / 1000.0));
        }
    }
    let microwatts = |name: &str| {
        read_trimmed(&hwmon.join(name))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|v| v / 1e6)
    };
    r.power_watts = microwatts("power1_average").or_else(|| microwatts("power1_input"));
    r.power_limit_watts = microwatts("power1_cap");
    let pwm: Option<f64> = read_trimmed(&hwmon.join("pwm1")).and_then(|v| v.parse().ok());
    let pwm_max: f64 = read_trimmed(&hwmon.join("pwm1_max"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(255.0);
    r.fan_speed_ratio = pwm.filter(|_| pwm_max > 0.0).map(|p| p / pwm_max);
}

/// What the gpu_metrics table gives where hwmon gave nothing (HBM and junction
/// temperatures, socket power), and what only it gives (energy, clocks, throttle status).
fn fill_from_gpu_metrics(metrics: &gpu_metrics::GpuMetrics, r: &mut DeviceReadings) {
    if !r.temperatures.iter().any(|(s, _)| *s == Sensor::Hbm)
        && let Some(t) = metrics.temperature_hbm_max.or(metrics.temperature_mem)
    {
        r.temperatures.push((Sensor::Hbm, t));
    }
    if !r.temperatures.iter().any(|(s, _)| *s == Sensor::Junction)
        && let Some(t) = metrics.temperature_hotspot
    {
        r.temperatures.push((Sensor::Junction, t));
    }
    r.power_watts = r.power_watts.or(metrics.socket_power_watts);
    r.energy_joules = metrics.energy_joules;
    if let Some(hz) = metrics.gfxclk_hertz {
        // The compute units run on gfxclk: it is what "sm" means on NVIDIA.
        r.clocks_hertz.push((ClockDomain::Sm, hz));
        r.clocks_hertz.push((ClockDomain::Graphics, hz));
    }
    if let Some(hz) = metrics.uclk_hertz {
        r.clocks_hertz.push((ClockDomain::Memory, hz));
    }
    if let Some(status) = metrics.throttle_independent {
        r.clock_events = clock_events::decode_amd(status);
    }
}

impl SysfsDevicePoller {
    fn new(index: u32, device: PathBuf, driver_version: &str) -> SysfsDevicePoller {
        let event = uevent(&device);
        let pci_slot = event.as_ref().map(|e| e.pci_slot.clone()).unwrap_or_default();
        let pci_bus_id = crate::input::pci::normalize_bus_id(&pci_slot).unwrap_or(pci_slot);
        let device_id = event
            .as_ref()
            .and_then(|e| e.pci_id.split(':').nth(1).map(str::to_string))
            .and_then(|id| u32::from_str_radix(&id, 16).ok());
        let name = read_trimmed(&device.join("product_name"))
            .or_else(|| {
                let id = device_id?;
                DEVICE_NAMES.iter().find(|(d, _)| *d == id).map(|(_, n)| n.to_string())
            })
            .unwrap_or_else(|| format!("AMD GPU {:04x}", device_id.unwrap_or(0)));
        // unique_id is the chip's own id (what rocm-smi shows as Unique ID); without it the
        // PCI address is the most stable thing there is.
        let uuid = read_trimmed(&device.join("unique_id"))
            .map(|id| format!("AMD-{id}"))
            .unwrap_or_else(|| format!("AMD-{pci_bus_id}"));
        SysfsDevicePoller {
            identity: DeviceIdentity {
                index,
                uuid,
                vendor: Vendor::Amd,
                name,
                pci_bus_id,
                driver_version: driver_version.to_string(),
                serial: read_trimmed(&device.join("serial_number")),
                inventory: crate::model::Inventory {
                    vbios: read_trimmed(&device.join("vbios_version")),
                    ..Default::default()
                },
            },
            device,
            statics: None,
            unknown_metrics: Default::default(),
        }
    }

    pub(crate) fn identity(&self) -> &DeviceIdentity {
        &self.identity
    }

    fn read_statics(&self) -> StaticReadings {
        let mut s = StaticReadings {
            hwmon: std::fs::read_dir(self.device.join("hwmon"))
                .ok()
                .and_then(|dir| dir.filter_map(Result::ok).map(|e| e.path()).min()),
            ..StaticReadings::default()
        };
        if let Some(hwmon) = &s.hwmon {
            for n in 1..=3 {
                let stem = format!("temp{n}");
                let sensor = match read_trimmed(&hwmon.join(format!("{stem}_label"))).as_deref() {
                    Some("edge") => Sensor::Edge,
                    Some("junction") => Sensor::Junction,
                    Some("mem") => Sensor::Hbm,
                    _ => continue,
                };
                let millicelsius = |suffix: &str| {
                    read_trimmed(&hwmon.join(format!("{stem}_{suffix}")))
                        .and_then(|v| v.parse::<f64>().ok())
                        .map(|v| v / 1000.0)
                };
                match sensor {
                    // The firmware throttles at crit and shuts the board down at emergency.
                    Sensor::Junction => {
                        if let Some(t) = millicelsius("crit") {
                            s.thresholds.push((crate::model::Threshold::Slowdown, t));
                        }
                        if let Some(t) = millicelsius("emergency") {
                            s.thresholds.push((crate::model::Threshold::Shutdown, t));
                        }
                    }
                    Sensor::Hbm => {
                        if let Some(t) = millicelsius("crit") {
                            s.thresholds.push((crate::model::Threshold::MemoryMax, t));
                        }
                    }
                    _ => {}
                }
                s.sensors.push((stem, sensor));
            }
        }
        s.pcie_generation_max = read_trimmed(&self.device.join("max_link_speed"))
            .as_deref()
            .and_then(link_rate_gts)
            .and_then(gpu_metrics::pcie_generation);
        s.pcie_width_max = read_trimmed(&self.device.join("max_link_width")).and_then(|v| v.parse().ok());
        s
    }

    fn file(&self, name: &str) -> Option<String> {
        read_trimmed(&self.device.join(name))
    }

    fn number<T: std::str::FromStr>(&self, name: &str) -> Option<T> {
        self.file(name)?.parse().ok()
    }

    fn metrics(&mut self, errors: &mut Vec<(&'static str, String)>) -> Option<GpuMetrics> {
        let bytes = match input::read_bytes(&self.device.join("gpu_metrics"), MAX_GPU_METRICS, input::Links::Refuse) {
            Ok((bytes, _)) => bytes,
            Err(refused) => {
                refused.record(&mut input::Skips::new(input::Input::Sysfs));
                return None;
            }
        };
        match gpu_metrics::parse(&bytes) {
            Ok(m) => Some(m),
            Err(e @ gpu_metrics::ParseError::UnknownRevision { .. }) => {
                if self.unknown_metrics.begins() {
                    crate::gpu_log!(
                        log::Level::Warn,
                        self.identity,
                        "AMD GPU {}: {e}; its energy, clocks and throttle reasons come from other files or are left out",
                        self.identity.index
                    );
                }
                None
            }
            Err(e) => {
                errors.push(("gpu_metrics", e.to_string()));
                None
            }
        }
    }

    /// Reads every supported value once. Never panics; an unreadable file is left out.
    pub(crate) fn poll(&mut self) -> crate::backend::PollReport {
        let started = Instant::now();
        let mut errors = Vec::new();
        // A card that left the bus loses its sysfs directory.
        if uevent(&self.device).is_none() {
            return PollReport {
                call_seconds: started.elapsed().as_secs_f64(),
                ..PollReport::default()
            };
        }
        let statics = match &self.statics {
            Some(s) => s.clone(),
            None => {
                let s = self.read_statics();
                self.statics = Some(s.clone());
                s
            }
        };
        let metrics = self.metrics(&mut errors).unwrap_or_default();
        let mut r = DeviceReadings {
            temperature_thresholds: statics.thresholds.clone(),
            ..DeviceReadings::default()
        };
        read_hwmon(&statics, &mut r);
        fill_from_gpu_metrics(&metrics, &mut r);
        r.utilization_ratio = self
            .number::<f64>("gpu_busy_percent")
            .map(|p| p / 100.0)
            .or(metrics.gfx_activity_ratio);
        r.memory_copy_utilization_ratio = self
            .number::<f64>("mem_busy_percent")
            .map(|p| p / 100.0)
            .or(metrics.umc_activity_ratio);
        r.memory_used_bytes = self.number("mem_info_vram_used");
        r.memory_total_bytes = self.number("mem_info_vram_total");
        r.pcie.generation = self
            .file("current_link_speed")
            .as_deref()
            .and_then(link_rate_gts)
            .or(metrics.pcie_link_speed_gts)
            .and_then(gpu_metrics::pcie_generation);
        r.pcie.width = self.number("current_link_width").or(metrics.pcie_link_width);
        r.pcie.generation_max = statics.pcie_generation_max;
        r.pcie.width_max = statics.pcie_width_max;
        r.pcie.replay_errors = self.number("pcie_replay_count").or(metrics.pcie_replay_count);
        self.read_ras(&mut r);
        PollReport {
            readings: Some(r),
            errors,
            call_seconds: started.elapsed().as_secs_f64(),
            ..PollReport::default()
        }
    }

    /// RAS error counts summed over the blocks the driver reports (umc is the HBM; gfx,
    /// sdma, mmhub, ...): the counts since the driver loaded. The XGMI link block
    /// (`xgmi_wafl`) is kept apart: link errors between GPUs are not memory errors.
    fn read_ras(&self, r: &mut DeviceReadings) {
        let Ok(dir) = std::fs::read_dir(self.device.join("ras")) else {
            return;
        };
        let (mut uncorrected, mut corrected, mut any) = (0u64, 0u64, false);
        for entry in dir.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with("_err_count") {
                continue;
            }
            if let Some(text) = read_trimmed(&entry.path()) {
                let (ue, ce) = ras_counts(&text);
                if name.starts_with("xgmi") {
                    if ue.is_some() || ce.is_some() {
                        r.xgmi_errors = EccCount::volatile_pair(ce.unwrap_or(0), ue.unwrap_or(0));
                    }
                    continue;
                }
                uncorrected += ue.unwrap_or(0);
                corrected += ce.unwrap_or(0);
                any |= ue.is_some() || ce.is_some();
            }
        }
        if any {
            r.ecc_enabled = Some(true);
            r.ecc_errors = EccCount::volatile_pair(corrected, uncorrected);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cardN/device` is the kernel's link to the PCI device: followed inside the sysfs root
    /// (as on every real system), not to a tree outside it.
    #[test]
    fn card_links_are_followed_only_inside_the_root() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        let sys = root.path().join("sys");
        let uevent = "DRIVER=amdgpu\nPCI_ID=1002:74A1\nPCI_SLOT_NAME=0000:C1:00.0\n";
        let inside = sys.join("devices/pci0000:c0/0000:c1:00.0");
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::write(inside.join("uevent"), uevent).unwrap();
        let outside = root.path().join("elsewhere");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("uevent"), uevent.replace("C1", "C2")).unwrap();
        for (card, target) in [("card0", inside.as_path()), ("card1", outside.as_path())] {
            let dir = sys.join("class/drm").join(card);
            std::fs::create_dir_all(&dir).unwrap();
            symlink(target, dir.join("device")).unwrap();
        }
        let pollers = device_pollers(root.path()).unwrap();
        let buses: Vec<&str> = pollers.iter().map(|p| p.identity().pci_bus_id.as_str()).collect();
        assert_eq!(buses, ["0000:c1:00.0"]);
    }

    #[test]
    fn file_formats() {
        assert_eq!(link_rate_gts("16.0 GT/s PCIe"), Some(16.0));
        assert_eq!(link_rate_gts("32.0 GT/s PCIe\n"), Some(32.0));
        assert_eq!(link_rate_gts("Unknown"), None);
        assert_eq!(ras_counts("ue: 2\nce: 17\n"), (Some(2), Some(17)));
        assert_eq!(ras_counts("garbage"), (None, None));
    }
}
