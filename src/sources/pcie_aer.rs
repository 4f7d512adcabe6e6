//! Each GPU's PCIe Advanced Error Reporting (AER) counts, as a source: every [`LOOK_EVERY`]
//! while the node has GPUs, the kernel's totals since boot in
//! `/sys/bus/pci/devices/ADDRESS/aer_dev_correctable`, `aer_dev_nonfatal` and `aer_dev_fatal`
//! for each GPU the latest round polled. A correctable count that grows is a link that
//! retrains and replays (a riser, a slot, a cable); a non-fatal or fatal one is a transaction
//! the link lost. The driver's own replay counter (`gpu_pcie_replay_errors_total`) sees only
//! the first kind, and only on NVIDIA GPUs.
//!
//! Read like every outside file: the device's link followed only to a target inside the sysfs
//! root, each file bounded and decoded lossily, a count that is not a number left out, what was
//! skipped counted. Where the kernel shows no AER files (AER off, a device without the
//! capability, most virtual machines) a GPU has no counts, never a 0.

use super::Periodic;
use super::round::PolledGpus;
use crate::config::settings::Settings;
use crate::input::pci::normalize_bus_id;
use crate::input::{self, Input, Links, Reason, Skips};
use crate::model::{PcieAer, PcieAerScan};
use crate::service::versioned::Versioned;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub const LOOK_EVERY: Duration = Duration::from_secs(30);
/// An AER file is twenty short lines; anything longer is not the kernel's.
const MAX_AER_FILE: usize = 4096;
/// Each file and the line in it that holds its total.
const TOTALS: [(&str, &str); 3] = [
    ("aer_dev_correctable", "TOTAL_ERR_COR"),
    ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
    ("aer_dev_fatal", "TOTAL_ERR_FATAL"),
];

pub struct PcieAerCounts {
    polled: Arc<Versioned<PolledGpus>>,
}

impl PcieAerCounts {
    pub fn new(polled: Arc<Versioned<PolledGpus>>) -> PcieAerCounts {
        PcieAerCounts { polled }
    }
}

impl Periodic for PcieAerCounts {
    type Value = PcieAerScan;
    const NAME: &'static str = "source-pcie-aer";

    fn every(&self, _settings: &Settings) -> Option<Duration> {
        (!self.polled.get().gpus.is_empty()).then_some(LOOK_EVERY)
    }

    /// The GPUs are known from the first round on: look every second until it is published,
    /// then every half minute while there are none.
    fn look_again_while_off(&self) -> Option<Duration> {
        super::look_again_after_the_first_round(&self.polled, LOOK_EVERY)
    }

    fn read(&mut self, settings: &Settings) -> PcieAerScan {
        let polled = self.polled.get();
        let addresses: Vec<&str> = polled.gpus.iter().map(|gpu| gpu.pci_bus_id.as_str()).collect();
        read_counts(&settings.sys_root, &addresses)
    }
}

/// The AER totals of the GPUs at `addresses` under `root`/sys (at most
/// [`crate::input::pci::MAX_PCI_GPUS`]), by PCI address; a GPU the kernel shows no count for
/// is left out.
pub fn read_counts(root: &Path, addresses: &[&str]) -> PcieAerScan {
    let mut skips = Skips::new(Input::Sysfs);
    let sys = root.join("sys");
    let devices = sys.join("bus/pci/devices");
    let mut scan = PcieAerScan::new();
    for address in addresses.iter().take(crate::input::pci::MAX_PCI_GPUS) {
        // Only a well-formed address names a path: nothing like `../` is joined.
        let Some(address) = normalize_bus_id(address) else {
            skips.add(Reason::InvalidValue, format!("PCI address {address:?}"));
            continue;
        };
        let dir = match input::resolve_inside(&sys, &devices.join(&address)) {
            Ok(dir) => dir,
            Err(refused) => {
                refused.record(&mut skips);
                continue;
            }
        };
        let [correctable, nonfatal, fatal] = TOTALS.map(|(file, line)| total(&dir.join(file), line, &mut skips));
        let counts = PcieAer {
            correctable,
            nonfatal,
            fatal,
        };
        if counts != PcieAer::default() {
            scan.insert(address, counts);
        }
    }
    scan
}

/// The number on the line that starts with `name` in the AER file at `path`.
fn total(path: &Path, name: &str, skips: &mut Skips) -> Option<u64> {
    let text = match input::read_text(path, MAX_AER_FILE, Links::Refuse) {
        Ok(text) => {
            if text.truncated {
                skips.add(Reason::TooLarge, path.display());
            }
            text.text
        }
        Err(refused) => {
            refused.record(skips);
            return None;
        }
    };
    let value = text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some(name)).then(|| words.next()).flatten()
    });
    match value.map(str::parse::<u64>) {
        Some(Ok(count)) => Some(count),
        Some(Err(_)) | None => {
            skips.add(Reason::InvalidValue, format!("{} (no {name} count)", path.display()));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const CORRECTABLE: &str = "RxErr 0\nBadTLP 2\nBadDLLP 5\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 7\n";
    const FATAL: &str = "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\nMalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\nAtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_FATAL 0\n";

    /// A sysfs tree under `root` with the device at `address` (its link into /sys/devices,
    /// as the kernel makes it) and these AER files.
    fn device(root: &Path, address: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        let real = root.join("sys/devices/pci0000:00").join(address);
        std::fs::create_dir_all(&real).unwrap();
        let devices = root.join("sys/bus/pci/devices");
        std::fs::create_dir_all(&devices).unwrap();
        symlink(&real, devices.join(address)).unwrap();
        for (name, text) in files {
            std::fs::write(real.join(name), text).unwrap();
        }
        real
    }

    #[test]
    fn totals_are_read_per_gpu_and_a_gpu_without_aer_has_none() {
        let dir = tempfile::tempdir().unwrap();
        device(
            dir.path(),
            "0000:3b:00.0",
            &[
                ("aer_dev_correctable", CORRECTABLE),
                (
                    "aer_dev_nonfatal",
                    &FATAL.replace("TOTAL_ERR_FATAL 0", "TOTAL_ERR_NONFATAL 1"),
                ),
                ("aer_dev_fatal", FATAL),
            ],
        );
        device(dir.path(), "0000:86:00.0", &[]);
        // NVML's form of the address is the kernel's once normalised.
        let scan = read_counts(dir.path(), &["00000000:3B:00.0", "0000:86:00.0", "0000:99:00.0"]);
        assert_eq!(
            scan.get("0000:3b:00.0"),
            Some(&PcieAer {
                correctable: Some(7),
                nonfatal: Some(1),
                fatal: Some(0)
            })
        );
        assert_eq!(
            scan.len(),
            1,
            "no AER files, or no device: no counts, never 0: {scan:?}"
        );
    }

    #[test]
    fn hostile_trees_give_no_count_and_never_block() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // A count that is not a number, and a file with no total line.
        let odd = device(
            root,
            "0000:01:00.0",
            &[
                ("aer_dev_correctable", "TOTAL_ERR_COR -3\n"),
                ("aer_dev_fatal", "RxErr 9\n"),
            ],
        );
        // Non-UTF-8 bytes around a good total: decoded lossily, the total still read.
        std::fs::write(odd.join("aer_dev_nonfatal"), b"\xff\xfe junk\nTOTAL_ERR_NONFATAL 4\n").unwrap();
        // A huge file: read up to the bound, its total beyond it not seen.
        let huge = device(root, "0000:02:00.0", &[]);
        std::fs::write(
            huge.join("aer_dev_correctable"),
            format!("{}TOTAL_ERR_COR 5\n", "RxErr 0\n".repeat(100_000)),
        )
        .unwrap();
        // A FIFO and a link where the files belong.
        let fifo = device(root, "0000:03:00.0", &[]);
        crate::input::make_fifo(&fifo.join("aer_dev_correctable"));
        symlink("/etc/passwd", fifo.join("aer_dev_fatal")).unwrap();
        // A device link that leads outside the sysfs root, and an address that is a path.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("aer_dev_correctable"), "TOTAL_ERR_COR 1\n").unwrap();
        symlink(outside.path(), root.join("sys/bus/pci/devices/0000:04:00.0")).unwrap();
        let started = std::time::Instant::now();
        let scan = read_counts(
            root,
            &[
                "0000:01:00.0",
                "0000:02:00.0",
                "0000:03:00.0",
                "0000:04:00.0",
                "../../../etc",
            ],
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(
            scan.get("0000:01:00.0"),
            Some(&PcieAer {
                correctable: None,
                nonfatal: Some(4),
                fatal: None
            })
        );
        assert_eq!(scan.len(), 1, "{scan:?}");
    }
}
