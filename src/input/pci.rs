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

/// Most PCI functions looked at: large servers have a few hundred.
const MAX_PCI_DEVICES: usize = 8192;
/// Most GPUs kept from the census: more than any node holds, and a bound on the
/// `gpu_pci_missing` series a doctored tree can make.
pub const MAX_PCI_GPUS: usize = 64;
/// `vendor` and `class` are one short hex word each.
const MAX_ATTRIBUTE: usize = 64;

/// The NVIDIA and AMD GPUs (display or 3D controllers, PCI class 0x03) under
/// `root`/sys/bus/pci/devices, not counting those bound to a passthrough driver. NVSwitches
/// (class 0x0680) and the GPUs' audio functions (0x0403) are not GPUs. An unreadable tree
/// gives none.
///
/// Each entry there is a link the kernel made into /sys/devices: it is followed only to a
/// target inside `root`/sys ([`crate::input::resolve_inside`]), the files read are bounded,
/// one address written three ways is one GPU, and what was skipped is counted.
pub fn gpus_on_the_bus(root: &std::path::Path) -> Vec<PciGpu> {
    use crate::input::{Input, Reason, Skips};
    use std::ops::ControlFlow;
    let mut skips = Skips::new(Input::Sysfs);
    let mut gpus: Vec<PciGpu> = Vec::new();
    each_function(root, &mut skips, |pci_bus_id, dir, skips| {
        let Some(vendor) = attribute(dir, "vendor", skips) else {
            return ControlFlow::Continue(());
        };
        let Some((_, label)) = GPU_VENDORS.iter().find(|(id, _)| *id == vendor) else {
            return ControlFlow::Continue(());
        };
        if !attribute(dir, "class", skips).is_some_and(|class| class.starts_with("0x03")) {
            return ControlFlow::Continue(());
        }
        // The driver's name is the last component of the link; nothing is read through it.
        let driver = std::fs::read_link(dir.join("driver"))
            .ok()
            .and_then(|target| target.file_name().map(|n| n.to_string_lossy().into_owned()));
        if driver.as_deref().is_some_and(|d| PASSTHROUGH_DRIVERS.contains(&d)) {
            return ControlFlow::Continue(());
        }
        if gpus.iter().any(|g| g.pci_bus_id == pci_bus_id) {
            return ControlFlow::Continue(());
        }
        if gpus.len() == MAX_PCI_GPUS {
            skips.add(
                Reason::TooMany,
                format!("GPUs on the PCI bus (more than {MAX_PCI_GPUS})"),
            );
            return ControlFlow::Break(());
        }
        gpus.push(PciGpu {
            vendor: label,
            pci_bus_id,
            driver,
        });
        ControlFlow::Continue(())
    });
    gpus.sort();
    gpus
}

/// Each PCI function under `root`/sys/bus/pci/devices, its address and the directory its
/// link leads to (followed only to a target inside `root`/sys; the rest counted as skipped),
/// until `visit` breaks. An unreadable tree has none.
fn each_function(
    root: &std::path::Path,
    skips: &mut crate::input::Skips,
    mut visit: impl FnMut(String, &std::path::Path, &mut crate::input::Skips) -> std::ops::ControlFlow<()>,
) {
    use crate::input;
    let sys = root.join("sys");
    let devices = sys.join("bus/pci/devices");
    let Ok(entries) = input::list_dir(&devices, MAX_PCI_DEVICES, MAX_PCI_DEVICES, skips, normalize_bus_id) else {
        return;
    };
    for (pci_bus_id, link) in entries {
        let dir = match input::resolve_inside(&sys, &link) {
            Ok(dir) => dir,
            Err(refused) => {
                refused.record(skips);
                continue;
            }
        };
        if visit(pci_bus_id, &dir, skips).is_break() {
            break;
        }
    }
}

/// A function's `vendor` or `class`: one short hex word, lower case, bounded.
fn attribute(dir: &std::path::Path, file: &str, skips: &mut crate::input::Skips) -> Option<String> {
    crate::input::read_value(&dir.join(file), MAX_ATTRIBUTE, skips).map(|s| s.to_ascii_lowercase())
}

/// How many NVIDIA NVSwitches (PCI class 0x0680, "other bridge", of vendor 0x10de) this
/// node's PCI bus shows under `root`/sys/bus/pci/devices: on an HGX baseboard they are the
/// host's, and nvidia-fabricmanager must run here. A virtual machine given GPUs of such a board
/// sees none (the host's fabric manager serves it), and neither does a board without switches.
/// Read as the census reads: links only inside the sysfs root, bounded, skips counted.
pub fn nvswitches_on_the_bus(root: &std::path::Path) -> usize {
    let mut skips = crate::input::Skips::new(crate::input::Input::Sysfs);
    let mut switches = 0;
    each_function(root, &mut skips, |_, dir, skips| {
        if attribute(dir, "vendor", skips).as_deref() == Some("0x10de")
            && attribute(dir, "class", skips).is_some_and(|class| class.starts_with("0x0680"))
        {
            switches += 1;
        }
        std::ops::ControlFlow::Continue(())
    });
    switches
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

    /// The kernel's links are followed inside the sysfs root only; one address written three
    /// ways is one GPU; a huge `class` file is read only as far as a class can be long.
    #[test]
    fn hostile_sysfs_trees() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        let sys = root.path().join("sys");
        let devices = sys.join("bus/pci/devices");
        std::fs::create_dir_all(&devices).unwrap();
        let real = sys.join("devices/pci0000:e0/0000:e4:00.0");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::write(real.join("vendor"), "0x10de\n").unwrap();
        // A class file of 20 MB: only its beginning is read.
        let mut class = b"0x030200\n".to_vec();
        class.resize(20 << 20, b' ');
        std::fs::write(real.join("class"), class).unwrap();
        for name in ["0000:E4:00.0", "0000:e4:00", "00000000:e4:00.0"] {
            symlink("../../../devices/pci0000:e0/0000:e4:00.0", devices.join(name)).unwrap();
        }
        // A link out of the sysfs root, to a tree that looks like a GPU.
        let outside = root.path().join("elsewhere");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("vendor"), "0x10de\n").unwrap();
        std::fs::write(outside.join("class"), "0x030200\n").unwrap();
        symlink(&outside, devices.join("0000:66:00.0")).unwrap();
        // A FIFO where a class file belongs.
        let fifo_dir = sys.join("devices/pci0000:e0/0000:77:00.0");
        std::fs::create_dir_all(&fifo_dir).unwrap();
        std::fs::write(fifo_dir.join("vendor"), "0x10de\n").unwrap();
        crate::input::make_fifo(&fifo_dir.join("class"));
        symlink("../../../devices/pci0000:e0/0000:77:00.0", devices.join("0000:77:00.0")).unwrap();
        let started = std::time::Instant::now();
        let found: Vec<String> = gpus_on_the_bus(root.path()).into_iter().map(|g| g.pci_bus_id).collect();
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert_eq!(found, ["0000:e4:00.0"]);
    }

    #[test]
    fn nvswitches_are_nvidia_bridges_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let devices = root.path().join("sys/bus/pci/devices");
        for (address, vendor, class) in [
            ("0000:05:00.0", "0x10de", "0x068000"), // NVSwitch
            ("0000:06:00.0", "0x10de", "0x068000"), // NVSwitch
            ("0000:19:00.0", "0x10de", "0x030200"), // a GPU
            ("0000:07:00.0", "0x8086", "0x068000"), // another vendor's bridge
        ] {
            let dir = devices.join(address);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("vendor"), format!("{vendor}\n")).unwrap();
            std::fs::write(dir.join("class"), format!("{class}\n")).unwrap();
        }
        assert_eq!(super::nvswitches_on_the_bus(root.path()), 2);
        assert_eq!(super::nvswitches_on_the_bus(&root.path().join("nowhere")), 0);
    }

    #[test]
    fn non_addresses_are_refused() {
        assert_eq!(normalize_bus_id("3b:00.0"), None);
        assert_eq!(normalize_bus_id("0000:3b:00.10"), None);
        assert_eq!(normalize_bus_id("0000:zz:00.0"), None);
        assert_eq!(normalize_bus_id(""), None);
    }
}
