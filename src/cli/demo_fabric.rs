//! The demo's network: a sysfs tree of eight ConnectX-7 InfiniBand ports at NDR, one behind
//! each simulated GPU's PCIe switch as on an HGX H200 node, read by the real port reader.
//! Port `mlx5_3` trained to HDR (200 Gb/s, half its siblings' rate: `nic_rate_low`), and
//! `mlx5_5` flaps: a thread takes it down for two seconds every [`FLAP_EVERY`] and counts
//! the down in its `link_downed`, as an adapter does (`nic_port_flapping` after three).
//! Each GPU has its AER files; the kernel counted 37 correctable errors on GPU 2's link.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The simulated GPUs' buses (config/demo-scenario.yaml), in index order.
const GPU_BUSES: [u8; 8] = [0x19, 0x3b, 0x4c, 0x5d, 0x9b, 0xbb, 0xcb, 0xdb];
/// The adapter whose port runs at HDR.
const SLOW: usize = 3;
/// The adapter whose port flaps.
const FLAPPING: usize = 5;
/// The GPU whose link the kernel counted correctable AER errors on.
const AER_ERRORS: usize = 2;
/// How often the flapping port goes down.
pub const FLAP_EVERY: Duration = Duration::from_secs(25);

/// The simulated GPUs' PCI addresses in the kernel's form, in index order.
pub fn gpu_addresses() -> impl Iterator<Item = String> {
    GPU_BUSES.iter().map(|bus| format!("0000:{bus:02x}:00.0"))
}

/// Writes the tree under `root` (`root`/sys/...).
pub fn write_tree(root: &Path) -> io::Result<()> {
    let sys = root.join("sys");
    for (i, bus) in GPU_BUSES.iter().enumerate() {
        // Root port, switch upstream port, and two downstream ports: the GPU's and the NIC's.
        let host = format!("pci0000:{:02x}", bus - 3);
        let switch = format!("{host}/0000:{:02x}:01.0/0000:{:02x}:00.0", bus - 3, bus - 2);
        let gpu = format!("{switch}/0000:{:02x}:00.0/0000:{bus:02x}:00.0", bus - 1);
        let nic = format!("{switch}/0000:{:02x}:01.0/0000:{:02x}:00.0", bus - 1, bus + 1);
        function(&sys, &gpu, "0x10de", "0x030200")?;
        write_aer(&sys.join("devices").join(&gpu), if i == AER_ERRORS { 37 } else { 0 })?;
        function(&sys, &nic, "0x15b3", "0x020700")?;
        let nic_dir = sys.join("devices").join(&nic);
        for (file, value) in [
            ("current_link_speed", "32.0 GT/s PCIe"),
            ("max_link_speed", "32.0 GT/s PCIe"),
            ("current_link_width", "16"),
            ("max_link_width", "16"),
        ] {
            std::fs::write(nic_dir.join(file), format!("{value}\n"))?;
        }
        let name = format!("mlx5_{i}");
        let dev = nic_dir.join("infiniband").join(&name);
        std::fs::create_dir_all(&dev)?;
        for (file, value) in [
            ("hca_type", "MT4129"),
            ("fw_ver", "28.39.1002"),
            ("board_id", "MT_0000000838"),
        ] {
            std::fs::write(dev.join(file), format!("{value}\n"))?;
        }
        let pci_name = nic.rsplit('/').next().unwrap_or_default();
        link(&format!("../../../{pci_name}"), &dev.join("device"))?;
        std::fs::create_dir_all(sys.join("class/infiniband"))?;
        link(
            &format!("../../devices/{nic}/infiniband/{name}"),
            &sys.join("class/infiniband").join(&name),
        )?;
        let rate = if i == SLOW {
            "200 Gb/sec (4X HDR)"
        } else {
            "400 Gb/sec (4X NDR)"
        };
        write_port(&dev.join("ports/1"), rate)?;
    }
    Ok(())
}

/// A PCI function and its /sys/bus/pci/devices link.
fn function(sys: &Path, path: &str, vendor: &str, class: &str) -> io::Result<()> {
    let dir = sys.join("devices").join(path);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("vendor"), format!("{vendor}\n"))?;
    std::fs::write(dir.join("class"), format!("{class}\n"))?;
    let devices = sys.join("bus/pci/devices");
    std::fs::create_dir_all(&devices)?;
    let address = path.rsplit('/').next().unwrap_or_default();
    link(&format!("../../../devices/{path}"), &devices.join(address))
}

/// The GPU's AER files as the kernel writes them, `correctable` errors on its link.
fn write_aer(dir: &Path, correctable: u64) -> io::Result<()> {
    std::fs::write(
        dir.join("aer_dev_correctable"),
        format!(
            "RxErr 0\nBadTLP {correctable}\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR {correctable}\n"
        ),
    )?;
    for (file, total) in [
        ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
        ("aer_dev_fatal", "TOTAL_ERR_FATAL"),
    ] {
        std::fs::write(
            dir.join(file),
            format!("DLP 0\nSDES 0\nTLP 0\nMalfTLP 0\nECRC 0\nUnsupReq 0\n{total} 0\n"),
        )?;
    }
    Ok(())
}

fn link(target: &str, at: &Path) -> io::Result<()> {
    std::os::unix::fs::symlink(target, at)
}

fn write_port(dir: &Path, rate: &str) -> io::Result<()> {
    std::fs::create_dir_all(dir.join("counters"))?;
    std::fs::create_dir_all(dir.join("hw_counters"))?;
    for (file, value) in [
        ("state", "4: ACTIVE"),
        ("phys_state", "5: LinkUp"),
        ("rate", rate),
        ("link_layer", "InfiniBand"),
    ] {
        std::fs::write(dir.join(file), format!("{value}\n"))?;
    }
    use crate::model::nic::PortCounter;
    for &counter in PortCounter::ALL {
        if counter == PortCounter::RoceSlowRestart {
            continue;
        }
        std::fs::write(dir.join(counter.dir().dir()).join(counter.label()), "0\n")?;
    }
    std::fs::write(dir.join("counters/link_downed"), "1\n")
}

/// Flaps `mlx5_5`'s port under `root` until the tree is gone (the demo ended): down for two
/// seconds every [`FLAP_EVERY`], each down counted in its `link_downed`.
pub fn flap(root: PathBuf) {
    let spawned = std::thread::Builder::new().name("demo-flapper".into()).spawn(move || {
        let port = match std::fs::canonicalize(root.join(format!("sys/class/infiniband/mlx5_{FLAPPING}"))) {
            Ok(dev) => dev.join("ports/1"),
            Err(_) => return,
        };
        let mut downs: u64 = 1;
        loop {
            std::thread::sleep(FLAP_EVERY);
            downs += 1;
            let down = [("state", "1: DOWN"), ("phys_state", "2: Polling")];
            let up = [("state", "4: ACTIVE"), ("phys_state", "5: LinkUp")];
            let wrote = write_all(&port, &down)
                .and_then(|_| std::fs::write(port.join("counters/link_downed"), format!("{downs}\n")));
            std::thread::sleep(Duration::from_secs(2));
            if wrote.and_then(|_| write_all(&port, &up)).is_err() {
                return;
            }
        }
    });
    if let Err(e) = spawned {
        log::warn!("demo: cannot start the thread that flaps a network port ({e})");
    }
}

/// Port 1 of the demo's adapter `name` (`mlx5_0` ... `mlx5_7`) under the demo's sysfs `root`;
/// `None` for a name the demo does not have.
pub fn port_dir(root: &Path, name: &str) -> Option<PathBuf> {
    let known = (0..GPU_BUSES.len()).any(|i| name == format!("mlx5_{i}"));
    if !known {
        return None;
    }
    std::fs::canonicalize(root.join("sys/class/infiniband").join(name))
        .ok()
        .map(|dev| dev.join("ports/1"))
}

/// A port up (ACTIVE, LinkUp) or down as a pulled cable leaves it (DOWN, Disabled).
pub fn set_port(port: &Path, up: bool) -> io::Result<()> {
    if up {
        write_all(port, &[("state", "4: ACTIVE"), ("phys_state", "5: LinkUp")])
    } else {
        write_all(port, &[("state", "1: DOWN"), ("phys_state", "3: Disabled")])
    }
}

fn write_all(dir: &Path, files: &[(&str, &str)]) -> io::Result<()> {
    for (file, value) in files {
        std::fs::write(dir.join(file), format!("{value}\n"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_tree_reads_as_eight_ndr_ports_one_slow_each_beside_its_gpu() {
        let dir = tempfile::tempdir().unwrap();
        write_tree(dir.path()).unwrap();
        let places = crate::input::infiniband::gpu_places(dir.path());
        let scan = crate::input::infiniband::read_nics(dir.path(), &places);
        assert_eq!(scan.devices.len(), 8);
        let rates: Vec<Option<f64>> = scan.ports().map(|(_, p)| p.rate_gbps).collect();
        assert_eq!(rates.iter().filter(|r| **r == Some(400.0)).count(), 7);
        assert_eq!(rates[SLOW], Some(200.0));
        assert_eq!(scan.devices[1].near_gpus, ["0000:3b:00.0"]);
        assert!(scan.ports().all(|(_, p)| p.up() == Some(true)));
    }
}
