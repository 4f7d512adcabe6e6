//! The XID catalog: what each code means and what to do about it.
//!
//! Codes, mnemonics, descriptions and the "Resolution Bucket (Immediate Action)" column come
//! from NVIDIA's published Xid catalog for Ampere and newer GPUs ("Analyzing Xid Errors with
//! the Xid Catalog", docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, as read on
//! 2026-11-22). Codes the catalog marks "Unused" are left out, so they show as `unknown`.
//!
//! Our severity follows from NVIDIA's immediate action (docs/health.md has the table):
//! a GPU that must be reset or a node that must be restarted is `fatal`; a hardware-side
//! condition that needs attention soon is `critical`; an application that must restart on a
//! healthy GPU is `warning`; "ignore" is `info`.

use serde::Serialize;

pub(crate) use crate::model::xid::Severity;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Entry {
    pub code: u32,
    /// NVIDIA's mnemonic, e.g. ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS.
    pub name: &'static str,
    pub description: &'static str,
    /// NVIDIA's resolution bucket for the immediate action, as the catalog writes it.
    pub nvidia_action: &'static str,
    pub severity: Severity,
}

impl Entry {
    /// What an operator should do, in words.
    pub(crate) fn action(&self) -> String {
        // The exceptions to the bucket rule (docs/health.md) get advice of their own.
        let special = match self.code {
            32 => {
                Some("restart the application; if it recurs, check the PCIe link (replays, width) and reseat the GPU")
            }
            92 => Some("keep running; if it persists, reset the GPU once its jobs are off it and contact support"),
            94 => Some("restart the application that hit it; reset the GPU when convenient"),
            137 => Some(
                "debug the application's peer-to-peer accesses (compute-sanitizer); contact support if it persists",
            ),
            157 => Some("workloads may run on, but the same error may recur; plan to replace the GPU"),
            _ => None,
        };
        if let Some(advice) = special {
            return format!("{advice} (NVIDIA: {})", self.nvidia_action);
        }
        let advice = match self.nvidia_action {
            "RESTART_APP" => "restart the application that hit it; the GPU stays usable",
            "RESET_GPU" => "reset the GPU once its jobs are off it, or reboot the node; contact support if it recurs",
            "RESTART_BM" => crate::model::health::OFF_THE_BUS_ACTION,
            "RESTART_VM" => "restart the virtual machine",
            "IGNORE" => "no action needed; informational",
            "CHECK_MECHANICALS" => "check the board's auxiliary power cables",
            "CHECK_UVM" => "check the unified-memory (UVM) driver state; contact support if it recurs",
            "UPDATE_SWFW" => "update the driver and firmware",
            "WORKFLOW_XID_45" => {
                "alone: restart the fabric manager; with other Xids: follow those (it is their clean-up)"
            }
            "WORKFLOW_XID_48" => {
                "reset the GPU or reboot the node to clear the double-bit error; check `nvidia-smi -q -d ECC` and RMA if SRAM thresholds are exceeded"
            }
            "WORKFLOW_NVLINK_ERR" => {
                "reset the GPU or reboot the node; check `nvidia-smi nvlink -s`; the fault may be at the link's remote end"
            }
            "WORKFLOW_NVLINK5_ERR" => "follow NVIDIA's NVLink5 error workflow; contact support if it recurs",
            "XID_154" => "do what its recovery action says (`gpuwarden health` shows it and the next step)",
            _ => "contact NVIDIA support",
        };
        format!("{advice} (NVIDIA: {})", self.nvidia_action)
    }
}

impl Entry {
    /// The remediation ladder's step for a fatal XID of this code, from NVIDIA's bucket: a
    /// restart of the machine (bare metal or VM) is a reboot, a reset or an ECC or NVLink
    /// workflow is a GPU reset; `None` for the buckets that ask for no reset or reboot.
    pub(crate) fn step(&self) -> Option<crate::model::health::Step> {
        use crate::model::health::Step;
        match self.nvidia_action {
            "RESTART_BM" | "RESTART_VM" => Some(Step::RebootRequired),
            "RESET_GPU" | "WORKFLOW_XID_48" | "WORKFLOW_NVLINK_ERR" => Some(Step::GpuReset),
            _ => None,
        }
    }
}

/// The action for a code the catalog does not list.
pub(crate) const UNKNOWN_ACTION: &str =
    "not in the Xid catalog this gpuwarden knows: look it up in NVIDIA's Xid catalog";

macro_rules! entries {
    ($( $code:literal $name:literal $description:literal $action:literal $severity:ident ;)*) => {
        &[ $( Entry { code: $code, name: $name, description: $description, nvidia_action: $action, severity: Severity::$severity }, )* ]
    };
}

/// Every code NVIDIA's catalog marks as used on A100, H100, B100 or GB200, in code order.
pub(crate) const CATALOG: &[Entry] = entries! {
    8   "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT" "GPU stopped processing" "RESTART_APP" Warning;
    11  "ROBUST_CHANNEL_GR_ERROR_MISSING_HW" "Invalid or corrupted push buffer stream" "RESTART_APP" Warning;
    13  "ROBUST_CHANNEL_GR_EXCEPTION" "Graphics Engine Exception (usually an application fault such as an out-of-bounds access)" "RESTART_APP" Warning;
    14  "ROBUST_CHANNEL_FAKE_ERROR" "Fake or injected error from userspace" "IGNORE" Info;
    25  "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY" "Invalid or illegal push buffer stream" "RESTART_APP" Warning;
    31  "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT" "GPU memory page fault (usually an application's illegal address)" "RESTART_APP" Warning;
    32  "ROBUST_CHANNEL_PBDMA_ERROR" "Invalid or corrupted push buffer stream; mostly PCIe signal quality" "RESTART_APP" Critical;
    37  "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD" "Driver firmware error" "IGNORE" Info;
    38  "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT" "Driver firmware error" "IGNORE" Info;
    39  "ROBUST_CHANNEL_CE0_ERROR" "Copy Engine Exception" "RESTART_APP" Warning;
    40  "ROBUST_CHANNEL_CE1_ERROR" "Copy Engine Exception" "RESTART_APP" Warning;
    41  "ROBUST_CHANNEL_CE2_ERROR" "Copy Engine Exception" "RESTART_APP" Warning;
    43  "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR" "GPU stopped processing: an application hit a software-induced fault; the GPU remains healthy" "IGNORE" Info;
    44  "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW" "Graphics Engine fault during context switch" "IGNORE" Info;
    45  "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL" "Preemptive cleanup after an application aborted or after earlier errors" "WORKFLOW_XID_45" Info;
    46  "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR" "GPU stopped processing" "RESET_GPU" Fatal;
    48  "ROBUST_CHANNEL_GPU_ECC_DBE" "Double Bit ECC Error: an uncorrectable memory error" "WORKFLOW_XID_48" Fatal;
    54  "SILENT_RUNNING_PWR_REDUCED_CLOCKING" "Auxiliary power is not connected to the GPU board" "CHECK_MECHANICALS" Critical;
    60  "ROBUST_CHANNEL_SEC2_ERROR" "Video processor exception" "RESTART_APP" Warning;
    62  "PMU_HALT_ERROR" "Internal micro-controller halt" "RESET_GPU" Fatal;
    63  "INFOROM_DRAM_RETIREMENT_EVENT" "GPU memory remapping event (row remapper or page retirement activity)" "IGNORE" Info;
    64  "INFOROM_DRAM_RETIREMENT_FAILURE" "GPU memory remapping failure" "RESET_GPU" Fatal;
    66  "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION" "Illegal access by driver" "IGNORE" Info;
    67  "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION" "Illegal access by driver" "IGNORE" Info;
    68  "ROBUST_CHANNEL_NVDEC0_ERROR" "NVDEC0 Exception" "RESTART_APP" Warning;
    69  "ROBUST_CHANNEL_GR_CLASS_ERROR" "Graphics Engine class error" "RESTART_APP" Warning;
    70  "ROBUST_CHANNEL_CE3_ERROR" "CE3: Unknown Error" "RESTART_APP" Warning;
    71  "ROBUST_CHANNEL_CE4_ERROR" "CE4: Unknown Error" "RESTART_APP" Warning;
    72  "ROBUST_CHANNEL_CE5_ERROR" "CE5: Unknown Error" "RESTART_APP" Warning;
    74  "NVLINK_ERROR" "NVLink Error: a problem on a link to another GPU or NVSwitch" "WORKFLOW_NVLINK_ERR" Fatal;
    75  "ROBUST_CHANNEL_CE6_ERROR" "CE6: Unknown Error" "RESTART_APP" Warning;
    76  "ROBUST_CHANNEL_CE7_ERROR" "CE7: Unknown Error" "RESTART_APP" Warning;
    77  "ROBUST_CHANNEL_CE8_ERROR" "CE8: Unknown Error" "RESTART_APP" Warning;
    78  "VGPU_START_ERROR" "vGPU Start Error" "UPDATE_SWFW" Warning;
    79  "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" "GPU has fallen off the bus: the driver cannot reach it over PCIe" "RESTART_BM" Fatal;
    80  "PBDMA_PUSHBUFFER_CRC_MISMATCH" "Corrupted data sent to GPU" "RESTART_APP" Warning;
    82  "ROBUST_CHANNEL_NVJPG0_ERROR" "NVJPG0 Error" "RESTART_APP" Warning;
    83  "ROBUST_CHANNEL_NVDEC1_ERROR" "NVDEC1 Error" "RESTART_APP" Warning;
    84  "ROBUST_CHANNEL_NVDEC2_ERROR" "NVDEC2 Error" "RESTART_APP" Warning;
    85  "ROBUST_CHANNEL_CE9_ERROR" "CE9: Unknown Error" "RESTART_APP" Warning;
    86  "ROBUST_CHANNEL_OFA0_ERROR" "OFA Exception" "RESTART_APP" Warning;
    88  "ROBUST_CHANNEL_NVDEC3_ERROR" "NVDEC3 Error" "RESTART_APP" Warning;
    89  "ROBUST_CHANNEL_NVDEC4_ERROR" "NVDEC4 Error" "RESTART_APP" Warning;
    92  "EXCESSIVE_SBE_INTERRUPTS" "High single-bit ECC error rate" "IGNORE" Warning;
    93  "INFOROM_ERASE_LIMIT_EXCEEDED" "Non-fatal violation of provisioned InfoROM wear limit" "IGNORE" Info;
    94  "ROBUST_CHANNEL_CONTAINED_ERROR" "Contained memory error: one application must restart; reset the GPU when convenient" "RESTART_APP" Critical;
    95  "ROBUST_CHANNEL_UNCONTAINED_ERROR" "Uncontained memory error: the GPU must be reset before applications can restart" "RESET_GPU" Fatal;
    96  "ROBUST_CHANNEL_NVDEC5_ERROR" "NVDEC5 Error" "RESTART_APP" Warning;
    97  "ROBUST_CHANNEL_NVDEC6_ERROR" "NVDEC6 Error" "RESTART_APP" Warning;
    98  "ROBUST_CHANNEL_NVDEC7_ERROR" "NVDEC7 Error" "RESTART_APP" Warning;
    99  "ROBUST_CHANNEL_NVJPG1_ERROR" "NVJPG1 Error" "RESTART_APP" Warning;
    100 "ROBUST_CHANNEL_NVJPG2_ERROR" "NVJPG2 Error" "RESTART_APP" Warning;
    101 "ROBUST_CHANNEL_NVJPG3_ERROR" "NVJPG3 Error" "RESTART_APP" Warning;
    102 "ROBUST_CHANNEL_NVJPG4_ERROR" "NVJPG4 Error" "RESTART_APP" Warning;
    103 "ROBUST_CHANNEL_NVJPG5_ERROR" "NVJPG5 Error" "RESTART_APP" Warning;
    104 "ROBUST_CHANNEL_NVJPG6_ERROR" "NVJPG6 Error" "RESTART_APP" Warning;
    105 "ROBUST_CHANNEL_NVJPG7_ERROR" "NVJPG7 Error" "RESTART_APP" Warning;
    106 "SMBPBI_TEST_MESSAGE" "SMBPBI Test Message" "IGNORE" Info;
    107 "SMBPBI_TEST_MESSAGE_SILENT" "SMBPBI Test Message Silent" "IGNORE" Info;
    109 "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR" "Context Switch Timeout Error" "RESET_GPU" Fatal;
    110 "SEC_FAULT_ERROR" "Security Fault Error: uncommon unless hardware fails" "RESET_GPU" Fatal;
    119 "GSP_RPC_TIMEOUT" "GSP RPC Timeout: the GPU's GSP core did not answer the driver" "RESET_GPU" Fatal;
    120 "GSP_ERROR" "GSP Error: an error in code running on the GPU's GSP core" "RESET_GPU" Fatal;
    121 "C2C_ERROR" "C2C Error: corrected errors on the NVLink-C2C link to a Grace CPU" "IGNORE" Info;
    126 "ROBUST_CHANNEL_CE10_ERROR" "CE10: Unknown Error" "RESTART_APP" Warning;
    127 "ROBUST_CHANNEL_CE11_ERROR" "CE11: Unknown Error" "RESTART_APP" Warning;
    128 "ROBUST_CHANNEL_CE12_ERROR" "CE12: Unknown Error" "RESTART_APP" Warning;
    129 "ROBUST_CHANNEL_CE13_ERROR" "CE13: Unknown Error" "RESTART_APP" Warning;
    130 "ROBUST_CHANNEL_CE14_ERROR" "CE14: Unknown Error" "RESTART_APP" Warning;
    131 "ROBUST_CHANNEL_CE15_ERROR" "CE15: Unknown Error" "RESTART_APP" Warning;
    132 "ROBUST_CHANNEL_CE16_ERROR" "CE16: Unknown Error" "RESTART_APP" Warning;
    133 "ROBUST_CHANNEL_CE17_ERROR" "CE17: Unknown Error" "RESTART_APP" Warning;
    134 "ROBUST_CHANNEL_CE18_ERROR" "CE18: Unknown Error" "RESTART_APP" Warning;
    135 "ROBUST_CHANNEL_CE19_ERROR" "CE19: Unknown Error" "RESTART_APP" Warning;
    136 "ALI_TRAINING_FAIL" "Link Training Failed" "RESET_GPU" Fatal;
    137 "NVLINK_PRIV_ERR" "NVLink Privilege Error: an illegal peer-to-peer access, usually an application bug" "IGNORE" Warning;
    139 "ROBUST_CHANNEL_OFA1_ERROR" "OFA1 Error" "RESTART_APP" Warning;
    140 "UNRECOVERABLE_ECC_ERROR_ESCAPE" "ECC Unrecovered Error: uncorrectable errors the driver could not remap" "RESET_GPU" Fatal;
    141 "ROBUST_CHANNEL_FAST_PATH_ERROR" "CUDA Fast Path Error" "IGNORE" Info;
    143 "GPU_INIT_ERROR" "GPU Initialization Error" "RESET_GPU" Fatal;
    144 "NVLINK_SAW_ERROR" "NVLink: SAW Error" "WORKFLOW_NVLINK5_ERR" Critical;
    145 "NVLINK_RLW_ERROR" "NVLink: RLW Error" "WORKFLOW_NVLINK5_ERR" Critical;
    146 "NVLINK_TLW_ERROR" "NVLink: TLW Error" "WORKFLOW_NVLINK5_ERR" Critical;
    147 "NVLINK_TREX_ERROR" "NVLink: TREX Error" "WORKFLOW_NVLINK5_ERR" Critical;
    148 "NVLINK_NVLPW_CTRL_ERROR" "NVLink: NVLPW_CTRL Error" "WORKFLOW_NVLINK5_ERR" Critical;
    149 "NVLINK_NETIR_ERROR" "NVLink: NETIR Error" "WORKFLOW_NVLINK5_ERR" Critical;
    150 "NVLINK_MSE_ERROR" "NVLink: MSE Error" "WORKFLOW_NVLINK5_ERR" Critical;
    151 "ROBUST_CHANNEL_KEY_ROTATION_ERROR" "Key rotation Error" "RESTART_VM" Fatal;
    154 "GPU_RECOVERY_ACTION_CHANGED" "GPU Recovery Action Changed: summarises the recovery another Xid needs" "XID_154" Info;
    155 "NVLINK_SW_DEFINED_ERROR" "NVLink: SW Defined Error (link down, including intentional)" "RESET_GPU" Fatal;
    156 "RESOURCE_RETIREMENT_EVENT" "Resource Retirement Event" "RESET_GPU" Fatal;
    157 "RESOURCE_RETIREMENT_FAILURE" "Resource Retirement Failure: no repair possible for lack of resources" "IGNORE" Critical;
    158 "GPU_FATAL_TIMEOUT" "GPU Fatal Timeout" "RESET_GPU" Fatal;
    159 "ROBUST_CHANNEL_CHI_NON_DATA_ERROR" "CHI Non-Data Error (C2C-connected GPUs)" "CHECK_UVM" Critical;
    160 "CHANNEL_RETIREMENT_EVENT" "Channel Retirement Event" "IGNORE" Info;
    161 "CHANNEL_RETIREMENT_FAILURE" "Channel Retirement Failure" "IGNORE" Info;
};

pub(crate) fn lookup(code: u32) -> Option<&'static Entry> {
    CATALOG
        .binary_search_by_key(&code, |e| e.code)
        .ok()
        .map(|i| &CATALOG[i])
}

/// The severity of a code; `Unknown` for codes the catalog does not list.
pub(crate) fn severity(code: u32) -> Severity {
    lookup(code).map(|e| e.severity).unwrap_or(Severity::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_sorted_and_unique_so_binary_search_works() {
        assert!(CATALOG.windows(2).all(|w| w[0].code < w[1].code));
    }

    #[test]
    fn severity_follows_nvidias_immediate_action() {
        for e in CATALOG {
            let expected = match e.nvidia_action {
                "RESET_GPU" | "RESTART_BM" | "RESTART_VM" | "WORKFLOW_XID_48" | "WORKFLOW_NVLINK_ERR" => {
                    Severity::Fatal
                }
                "WORKFLOW_NVLINK5_ERR" | "CHECK_MECHANICALS" | "CHECK_UVM" => Severity::Critical,
                "RESTART_APP" | "UPDATE_SWFW" => Severity::Warning,
                "IGNORE" | "WORKFLOW_XID_45" | "XID_154" => Severity::Info,
                other => panic!("unexpected action {other} for {}", e.code),
            };
            // The documented exceptions (docs/health.md): hardware signs that NVIDIA's bucket
            // files under "restart the app" or "ignore" but an operator should see.
            let exception = matches!(e.code, 32 | 94 | 92 | 137 | 157);
            assert!(
                e.severity == expected || exception,
                "Xid {} is {:?}, rule says {:?}",
                e.code,
                e.severity,
                expected
            );
        }
    }

    #[test]
    fn the_codes_operators_page_on() {
        assert_eq!(severity(79), Severity::Fatal);
        assert_eq!(severity(48), Severity::Fatal);
        assert_eq!(severity(119), Severity::Fatal);
        assert_eq!(severity(94), Severity::Critical);
        assert_eq!(severity(13), Severity::Warning);
        assert_eq!(severity(43), Severity::Info);
        assert_eq!(severity(9999), Severity::Unknown);
        assert_eq!(lookup(79).unwrap().name, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS");
        assert!(lookup(79).unwrap().action().contains("RESTART_BM"));
    }
}
