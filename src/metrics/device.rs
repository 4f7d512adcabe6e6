//! Device families: each GPU's identity, whether it answered, its health verdict, and what
//! a poll reads from it. Readings a GPU does not support add no sample.

use super::{Family, Kind, Read, dcgm_compat, twin};
use crate::health::HealthState;
use crate::model::unix_seconds;
use crate::model::{ClockDomain, Sensor};

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "gpu_info",
        kind: Kind::Gauge,
        unit: "",
        help: "GPU identity; always 1. Join on uuid for the name, PCI bus id, driver and serial.",
        labels: &["name", "pci_bus_id", "driver_version", "serial"],
        dcgm: &[],
        read: Read::Device(|_, d, s| {
            let id = &d.identity;
            s.labelled(
                &[
                    &id.name,
                    &id.pci_bus_id,
                    &id.driver_version,
                    id.serial.as_deref().unwrap_or(""),
                ],
                1.0,
            )
        }),
    },
    Family {
        name: "gpu_up",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when the last poll reached the GPU within poll.timeout, 0 when it did not or the GPU is lost.",
        labels: &[],
        dcgm: &[],
        read: Read::Device(|_, d, s| s.flag(Some(d.up))),
    },
    Family {
        name: "gpu_last_poll_timestamp_seconds",
        kind: Kind::Gauge,
        unit: "seconds",
        help: "Unix time of the last poll that reached the GPU.",
        labels: &[],
        dcgm: &[],
        read: Read::Device(|_, d, s| s.opt(d.last_good_poll.map(unix_seconds))),
    },
    Family {
        name: "gpu_health",
        kind: Kind::Gauge,
        unit: "",
        help: "Health verdict, one-hot over state (ok, degraded, unhealthy); see docs/health.md.",
        labels: &["state"],
        dcgm: &[],
        read: Read::Device(|_, d, s| {
            for state in HealthState::ALL {
                s.labelled(&[state.label()], super::one_if(state == d.health.state));
            }
        }),
    },
    Family {
        name: "gpu_health_reason",
        kind: Kind::Gauge,
        unit: "",
        help: "1 for each finding behind a degraded or unhealthy verdict, and for each notice (board_replaced) that leaves it ok.",
        labels: &["reason"],
        dcgm: &[],
        read: Read::Device(|_, d, s| {
            for finding in &d.health.findings {
                s.labelled(&[finding.reason.label()], 1.0);
            }
        }),
    },
    Family {
        name: "gpu_remediation_next_step",
        kind: Kind::Gauge,
        unit: "",
        help: "1 for the next remediation step (gpu_reset, reboot_required, service) of a GPU that is unhealthy, whose driver asks for a reset or reboot, or with a row remap pending, with remediation.mode advise or auto; absent otherwise. gpuwarden health says why and the command.",
        labels: &["step"],
        dcgm: &[],
        read: Read::Device(|_, d, s| {
            if let Some(next) = &d.health.next_step {
                s.labelled(&[next.step.label()], 1.0);
            }
        }),
    },
    Family {
        name: "gpu_temperature_celsius",
        kind: Kind::Gauge,
        unit: "celsius",
        help: "Temperature by sensor: gpu and memory on NVIDIA; edge, junction and hbm on AMD.",
        labels: &["sensor"],
        dcgm: &[
            twin!("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", |r| r
                .temperature(Sensor::Gpu)),
            twin!("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", |r| r
                .temperature(Sensor::Memory)),
        ],
        read: Read::Readings(|r, s| s.each(&r.temperatures)),
    },
    Family {
        name: "gpu_temperature_threshold_celsius",
        kind: Kind::Gauge,
        unit: "celsius",
        help: "Temperature thresholds: slowdown, shutdown, gpu_max, memory_max.",
        labels: &["threshold"],
        dcgm: &[],
        read: Read::Readings(|r, s| s.each(&r.temperature_thresholds)),
    },
    Family {
        name: "gpu_clock_event_active",
        kind: Kind::Gauge,
        unit: "",
        help: "1 while a clock-event (throttle) reason holds the clocks down; one series per reason the GPU supports.",
        labels: &["reason"],
        dcgm: &[
            twin!(
                "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
                "Current clock event reasons (bit mask of nvmlClocksEventReason*).",
                |r| dcgm_compat::clock_event_mask(r)
            ),
            twin!(
                "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                "Current clock throttle reasons (the same bit mask, under DCGM's name before 3.2).",
                |r| dcgm_compat::clock_event_mask(r)
            ),
        ],
        read: Read::Readings(|r, s| {
            for e in &r.clock_events {
                s.labelled(&[e.reason.label()], super::one_if(e.active));
            }
        }),
    },
    Family {
        name: "gpu_clock_event_seconds",
        kind: Kind::Counter,
        unit: "seconds",
        help: "Cumulative time the clocks were held down by each reason, from the driver's own counters.",
        labels: &["reason"],
        dcgm: &[],
        read: Read::Readings(|r, s| {
            s.each(&r.clock_event_seconds);
        }),
    },
    Family {
        name: "gpu_power_watts",
        kind: Kind::Gauge,
        unit: "watts",
        help: "Power draw.",
        labels: &[],
        dcgm: &[twin!("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |r| r.power_watts)],
        read: Read::Readings(|r, s| s.opt(r.power_watts)),
    },
    Family {
        name: "gpu_power_limit_watts",
        kind: Kind::Gauge,
        unit: "watts",
        help: "Enforced power limit.",
        labels: &[],
        dcgm: &[twin!(
            "DCGM_FI_DEV_POWER_MGMT_LIMIT",
            "Enforced power limit (in W).",
            |r| r.power_limit_watts
        )],
        read: Read::Readings(|r, s| s.opt(r.power_limit_watts)),
    },
    Family {
        name: "gpu_energy_joules",
        kind: Kind::Counter,
        unit: "joules",
        help: "Energy used since the driver loaded.",
        labels: &[],
        dcgm: &[
            twin!(counter "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", |r| r.energy_joules.map(|j| (j * 1000.0).round())),
        ],
        read: Read::Readings(|r, s| s.opt(r.energy_joules)),
    },
    Family {
        name: "gpu_clock_hertz",
        kind: Kind::Gauge,
        unit: "hertz",
        help: "Current clock by domain (sm, memory, graphics).",
        labels: &["clock"],
        dcgm: &[
            twin!("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", |r| r
                .clock(ClockDomain::Sm)
                .map(|hz| hz / 1e6)),
            twin!("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", |r| r
                .clock(ClockDomain::Memory)
                .map(|hz| hz / 1e6)),
        ],
        read: Read::Readings(|r, s| s.each(&r.clocks_hertz)),
    },
    Family {
        name: "gpu_clock_max_hertz",
        kind: Kind::Gauge,
        unit: "hertz",
        help: "Highest clock the GPU can run at, by domain (sm, memory, graphics): gpu_clock_hertz / gpu_clock_max_hertz is how far below its top clock it runs.",
        labels: &["clock"],
        dcgm: &[],
        read: Read::Readings(|r, s| s.each(&r.clocks_max_hertz)),
    },
    Family {
        name: "gpu_utilization_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last sample period in which a kernel ran.",
        labels: &[],
        dcgm: &[twin!("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |r| r
            .utilization_ratio
            .map(|u| u * 100.0))],
        read: Read::Readings(|r, s| s.opt(r.utilization_ratio)),
    },
    Family {
        name: "gpu_memory_copy_utilization_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last sample period in which device memory was read or written.",
        labels: &[],
        dcgm: &[twin!("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", |r| r
            .memory_copy_utilization_ratio
            .map(|u| u * 100.0))],
        read: Read::Readings(|r, s| s.opt(r.memory_copy_utilization_ratio)),
    },
    Family {
        name: "gpu_encoder_utilization_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last sample period the video encoder (NVENC) was busy; absent where the driver does not report it.",
        labels: &[],
        dcgm: &[twin!("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", |r| r
            .encoder_utilization_ratio
            .map(|u| u * 100.0))],
        read: Read::Readings(|r, s| s.opt(r.encoder_utilization_ratio)),
    },
    Family {
        name: "gpu_decoder_utilization_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last sample period the video decoder (NVDEC) was busy.",
        labels: &[],
        dcgm: &[twin!("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", |r| r
            .decoder_utilization_ratio
            .map(|u| u * 100.0))],
        read: Read::Readings(|r, s| s.opt(r.decoder_utilization_ratio)),
    },
    Family {
        name: "gpu_memory_used_bytes",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "Device memory in use.",
        labels: &[],
        dcgm: &[twin!(
            per_instance "DCGM_FI_DEV_FB_USED",
            "Framebuffer memory used (in MiB).",
            |r| r.memory_used_bytes.map(|b| b as f64 / dcgm_compat::MIB),
            |i| i.memory_used_bytes.map(|b| b as f64 / dcgm_compat::MIB)
        )],
        read: Read::Readings(|r, s| s.count(r.memory_used_bytes)),
    },
    Family {
        name: "gpu_memory_total_bytes",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "Device memory in all.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.count(r.memory_total_bytes)),
    },
    Family {
        name: "gpu_memory_free_bytes",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "Device memory free, as the driver counts it (total minus used minus reserved).",
        labels: &[],
        dcgm: &[twin!(
            per_instance "DCGM_FI_DEV_FB_FREE",
            "Framebuffer memory free (in MiB).",
            |r| r.memory_free_bytes.map(|b| b as f64 / dcgm_compat::MIB),
            |i| Some(i.memory_total_bytes?.saturating_sub(i.memory_used_bytes?) as f64 / dcgm_compat::MIB)
        )],
        read: Read::Readings(|r, s| s.count(r.memory_free_bytes)),
    },
    Family {
        name: "gpu_memory_reserved_bytes",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "Device memory the driver reserves for itself.",
        labels: &[],
        dcgm: &[twin!(
            "DCGM_FI_DEV_FB_RESERVED",
            "Framebuffer memory reserved (in MiB).",
            |r| r.memory_reserved_bytes.map(|b| b as f64 / dcgm_compat::MIB)
        )],
        read: Read::Readings(|r, s| s.count(r.memory_reserved_bytes)),
    },
    Family {
        name: "gpu_pcie_link_generation",
        kind: Kind::Gauge,
        unit: "",
        help: "Current PCIe link generation (idle GPUs lower it to save power).",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.opt(r.pcie.generation.map(f64::from))),
    },
    Family {
        name: "gpu_pcie_link_generation_max",
        kind: Kind::Gauge,
        unit: "",
        help: "Highest PCIe link generation the GPU supports.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.opt(r.pcie.generation_max.map(f64::from))),
    },
    Family {
        name: "gpu_pcie_link_width_lanes",
        kind: Kind::Gauge,
        unit: "lanes",
        help: "Current PCIe link width.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.opt(r.pcie.width.map(f64::from))),
    },
    Family {
        name: "gpu_pcie_link_width_max_lanes",
        kind: Kind::Gauge,
        unit: "lanes",
        help: "Widest PCIe link the GPU supports.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.opt(r.pcie.width_max.map(f64::from))),
    },
    Family {
        name: "gpu_pcie_link_width_degraded",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when the PCIe link is narrower than the GPU supports.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.flag(r.pcie.width_degraded())),
    },
    Family {
        name: "gpu_pcie_replay_errors",
        kind: Kind::Counter,
        unit: "",
        help: "PCIe replays (retransmitted packets) since the driver loaded.",
        labels: &[],
        dcgm: &[
            twin!(counter "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", |r| r.pcie.replay_errors.map(|n| n as f64)),
        ],
        read: Read::Readings(|r, s| s.count(r.pcie.replay_errors)),
    },
    Family {
        name: "gpu_pcie_aer_errors",
        kind: Kind::Counter,
        unit: "",
        help: "PCIe Advanced Error Reporting errors the kernel counted on the GPU since boot, by severity (correctable: the link retried, a riser, slot or cable going bad; nonfatal, fatal: a transaction lost). From sysfs aer_dev_*; absent where the kernel shows none (AER off, most virtual machines).",
        labels: &["severity"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            if let Some(aer) = snapshot.pcie_aer.get(&d.identity.pci_bus_id) {
                for (severity, count) in [
                    ("correctable", aer.correctable),
                    ("nonfatal", aer.nonfatal),
                    ("fatal", aer.fatal),
                ] {
                    s.labelled_opt(&[severity], count.map(|n| n as f64));
                }
            }
        }),
    },
    Family {
        name: "gpu_ecc_mode",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when ECC is enabled.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.flag(r.ecc_enabled)),
    },
    Family {
        name: "gpu_ecc_errors",
        kind: Kind::Counter,
        unit: "",
        help: "ECC errors by type (corrected, uncorrected) and scope (volatile: since the driver loaded; aggregate: lifetime).",
        labels: &["type", "scope"],
        dcgm: &[
            twin!(counter "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", |r| r.ecc_count(crate::model::EccType::Corrected, crate::model::EccScope::Volatile).map(|n| n as f64)),
            twin!(counter "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", |r| r.ecc_count(crate::model::EccType::Uncorrected, crate::model::EccScope::Volatile).map(|n| n as f64)),
            twin!(counter "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Total number of single-bit persistent ECC errors.", |r| r.ecc_count(crate::model::EccType::Corrected, crate::model::EccScope::Aggregate).map(|n| n as f64)),
            twin!(counter "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Total number of double-bit persistent ECC errors.", |r| r.ecc_count(crate::model::EccType::Uncorrected, crate::model::EccScope::Aggregate).map(|n| n as f64)),
        ],
        read: Read::Readings(|r, s| {
            for e in &r.ecc_errors {
                s.labelled(&[e.error_type.label(), e.scope.label()], e.count as f64);
            }
        }),
    },
    Family {
        name: "gpu_remapped_rows",
        kind: Kind::Gauge,
        unit: "",
        help: "Memory rows remapped, by cause (correctable, uncorrectable).",
        labels: &["cause"],
        dcgm: &[
            twin!(counter "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors.", |r| r.remapped_rows.correctable.map(|n| n as f64)),
            twin!(counter "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors.", |r| r.remapped_rows.uncorrectable.map(|n| n as f64)),
        ],
        read: Read::Readings(|r, s| {
            let rows = &r.remapped_rows;
            s.labelled_opt(&["correctable"], rows.correctable.map(|n| n as f64));
            s.labelled_opt(&["uncorrectable"], rows.uncorrectable.map(|n| n as f64));
        }),
    },
    Family {
        name: "gpu_row_remap_pending",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when a row remap waits for a GPU reset.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.flag(r.remapped_rows.pending)),
    },
    Family {
        name: "gpu_row_remap_failed",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when a row remap failed: the GPU is out of spare rows.",
        labels: &[],
        dcgm: &[twin!(
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            "Whether remapping of rows has failed.",
            |r| r.remapped_rows.failed.map(|f| f as u8 as f64)
        )],
        read: Read::Readings(|r, s| s.flag(r.remapped_rows.failed)),
    },
    Family {
        name: "gpu_persistence_mode",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when persistence mode is on.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.flag(r.persistence_mode)),
    },
    Family {
        name: "gpu_recovery_action",
        kind: Kind::Gauge,
        unit: "",
        help: "What the driver says the GPU needs to recover, one-hot over action (none, gpu_reset, node_reboot, drain_p2p, drain_and_reset); absent where the driver does not say.",
        labels: &["action"],
        dcgm: &[],
        read: Read::Readings(|r, s| {
            if let Some(current) = r.recovery_action {
                for action in crate::model::RecoveryAction::ALL {
                    s.labelled(&[action.label()], super::one_if(action == current));
                }
            }
        }),
    },
    Family {
        name: "gpu_vgpu_licensed",
        kind: Kind::Gauge,
        unit: "",
        help: "In a vGPU guest, 1 when the vGPU holds its licence, 0 when not (it runs degraded once the grace period ends); absent where the GPU needs none (bare metal, passthrough).",
        labels: &[],
        dcgm: &[twin!("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "vGPU License status.", |r| r
            .vgpu_licensed
            .map(super::one_if))],
        read: Read::Readings(|r, s| s.flag(r.vgpu_licensed)),
    },
    Family {
        name: "gpu_performance_state",
        kind: Kind::Gauge,
        unit: "",
        help: "Performance state: 0 (P0, fastest) to 15.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.opt(r.performance_state.map(f64::from))),
    },
    Family {
        name: "gpu_fan_speed_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fan speed as a fraction of its maximum.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.opt(r.fan_speed_ratio)),
    },
    Family {
        name: "gpu_pci_devices",
        kind: Kind::Gauge,
        unit: "",
        help: "NVIDIA and AMD GPUs on the PCI bus (display and 3D controllers, not passed through to a VM), by vendor: compare with the GPUs gpu_info lists.",
        labels: &["vendor"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for vendor in ["nvidia", "amd"] {
                let n = snapshot.pci_gpus.iter().filter(|g| g.vendor == vendor).count();
                if n > 0 {
                    s.labelled(&[vendor], n as f64);
                }
            }
        }),
    },
    Family {
        name: "gpu_pci_missing",
        kind: Kind::Gauge,
        unit: "",
        help: "1 for each GPU on the PCI bus that no backend enumerated (fell off at boot, or the driver did not bind); driver is the bound driver, empty for none.",
        labels: &["vendor", "pci_bus_id", "driver"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for gpu in snapshot.missing_gpus() {
                s.labelled(&[gpu.vendor, &gpu.pci_bus_id, gpu.driver.as_deref().unwrap_or("")], 1.0);
            }
        }),
    },
];
