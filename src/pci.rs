//! PCI bus ids in one form everywhere: `0000:3b:00.0`, lower case, four-digit domain.
//!
//! NVML writes `00000000:3B:00.0`; the kernel log writes `0000:3b:00` (no function); sysfs
//! writes `0000:3b:00.0`. XIDs from the kernel log are matched to GPUs by this form.

/// Normalises any of those forms; None when `text` is not a PCI address.
pub fn normalize_bus_id(text: &str) -> Option<String> {
    let text = text.trim();
    let (address, function) = match text.split_once('.') {
        Some((a, f)) => (a, f),
        None => (text, "0"),
    };
    let parts: Vec<&str> = address.split(':').collect();
    let is_hex = |s: &str, max: usize| !s.is_empty() && s.len() <= max && s.chars().all(|c| c.is_ascii_hexdigit());
    if parts.len() != 3 || !is_hex(parts[0], 8) || !is_hex(parts[1], 2) || !is_hex(parts[2], 2) || !is_hex(function, 1)
    {
        return None;
    }
    let domain = u32::from_str_radix(parts[0], 16).ok()?;
    let bus = u32::from_str_radix(parts[1], 16).ok()?;
    let device = u32::from_str_radix(parts[2], 16).ok()?;
    let function = u32::from_str_radix(function, 16).ok()?;
    if domain > 0xffff {
        return None;
    }
    Some(format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

pub use crate::model::PciGpu;

/// PCI vendor ids of the GPUs we read, and their `vendor` label.
const GPU_VENDORS: [(&str, &str); 2] = [("0x10de", "nvidia"), ("0x1002", "amd")];

/// Drivers that take a GPU away from the host on purpose (passed through to a VM): such a
/// GPU is not missing, the host's driver is just not meant to see it.
const PASSTHROUGH_DRIVERS: [&str; 2] = ["vfio-pci", "pci-stub"];

/// The NVIDIA and AMD GPUs (display or 3D controllers, PCI class 0x03) under
/// `root`/sys/bus/pci/devices, not counting those bound to a passthrough driver. NVSwitches
/// (class 0x0680) and the GPUs' audio functions (0x0403) are not GPUs. An unreadable tree
/// gives none.
pub fn gpus_on_the_bus(root: &std::path::Path) -> Vec<PciGpu> {
    let Ok(entries) = std::fs::read_dir(root.join("sys/bus/pci/devices")) else {
        return Vec::new();
    };
    let read = |dir: &std::path::Path, file: &str| {
        std::fs::read_to_string(dir.join(file))
            .ok()
            .map(|s| s.trim().to_ascii_lowercase())
    };
    let mut gpus: Vec<PciGpu> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let dir = entry.path();
            let vendor = read(&dir, "vendor")?;
            let (_, label) = GPU_VENDORS.iter().find(|(id, _)| *id == vendor)?;
            if !read(&dir, "class")?.starts_with("0x03") {
                return None;
            }
            let driver = std::fs::read_link(dir.join("driver"))
                .ok()
                .and_then(|target| target.file_name().map(|n| n.to_string_lossy().into_owned()));
            if driver.as_deref().is_some_and(|d| PASSTHROUGH_DRIVERS.contains(&d)) {
                return None;
            }
            Some(PciGpu {
                vendor: label,
                pci_bus_id: normalize_bus_id(&entry.file_name().to_string_lossy())?,
                driver,
            })
        })
        .collect();
    gpus.sort();
    gpus
}

#[cfg(test)]
mod tests {
    use super::{gpus_on_the_bus, normalize_bus_id};

    #[test]
    fn every_form_becomes_the_kernel_form() {
        assert_eq!(normalize_bus_id("00000000:19:00.0").as_deref(), Some("0000:19:00.0"));
        assert_eq!(normalize_bus_id("00000001:9A:00.0").as_deref(), Some("0001:9a:00.0"));
        assert_eq!(normalize_bus_id("0000:3B:00").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(normalize_bus_id("0000:19:00.0").as_deref(), Some("0000:19:00.0"));
    }

    #[test]
    fn gpus_on_the_bus_are_display_and_3d_controllers_of_nvidia_and_amd() {
        let root = tempfile::tempdir().unwrap();
        let devices = root.path().join("sys/bus/pci/devices");
        let driver_dir = root.path().join("sys/bus/pci/drivers");
        for (address, vendor, class, driver) in [
            ("0000:19:00.0", "0x10de", "0x030200", Some("nvidia")),
            ("0000:19:00.1", "0x10de", "0x040300", Some("snd_hda_intel")), // its audio
            ("0000:05:00.0", "0x10de", "0x068000", None),                  // an NVSwitch
            ("0000:3b:00.0", "0x10de", "0x030200", None),                  // no driver took it
            ("0000:5d:00.0", "0x10de", "0x030200", Some("vfio-pci")),      // passed to a VM
            ("0000:c1:00.0", "0x1002", "0x038000", Some("amdgpu")),
            ("0000:02:00.0", "0x1a03", "0x030000", Some("ast")), // the BMC's VGA
        ] {
            let dir = devices.join(address);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("vendor"), format!("{vendor}\n")).unwrap();
            std::fs::write(dir.join("class"), format!("{class}\n")).unwrap();
            if let Some(driver) = driver {
                std::fs::create_dir_all(driver_dir.join(driver)).unwrap();
                std::os::unix::fs::symlink(driver_dir.join(driver), dir.join("driver")).unwrap();
            }
        }
        let found: Vec<(&str, String, Option<String>)> = gpus_on_the_bus(root.path())
            .into_iter()
            .map(|g| (g.vendor, g.pci_bus_id, g.driver))
            .collect();
        assert_eq!(
            found,
            vec![
                ("amd", "0000:c1:00.0".to_string(), Some("amdgpu".to_string())),
                ("nvidia", "0000:19:00.0".to_string(), Some("nvidia".to_string())),
                ("nvidia", "0000:3b:00.0".to_string(), None),
            ]
        );
        assert!(gpus_on_the_bus(&root.path().join("nowhere")).is_empty());
    }

    #[test]
    fn non_addresses_are_refused() {
        assert_eq!(normalize_bus_id("3b:00.0"), None);
        assert_eq!(normalize_bus_id("0000:3b:00.10"), None);
        assert_eq!(normalize_bus_id("0000:zz:00.0"), None);
        assert_eq!(normalize_bus_id(""), None);
    }
}
