//! The node's RDMA devices and their ports, read from sysfs: `/sys/class/infiniband/<dev>/`
//! (`fw_ver`, `board_id`, `hca_type`, the PCI function behind `device`), each port's
//! `ports/<n>/{state,phys_state,rate,link_layer}` with its `counters/` and `hw_counters/`,
//! and for a RoCE port its network interface (`device/net/<if>/{operstate,speed,
//! carrier_changes}`). The layouts are the kernel's (Documentation/ABI/stable/
//! sysfs-class-infiniband); tests/fixtures/sysfs/README.md cites each fixture.
//!
//! Read as if an attacker wrote it, like the PCI census: links followed only to targets
//! inside the sysfs root, no link followed for a value, every file bounded in bytes, at
//! most [`MAX_PORTS`] ports, names and words checked before they become labels, and what was
//! skipped counted (`gpuwarden_input_skipped_total{input="sysfs"}`).

use crate::input::{self, Input, Links, Reason, Refused, Skips};
use crate::model::nic::{MAX_PORTS, Netdev, NicDevice, NicPcie, NicPort, NicScan, PortCounter};
use std::path::{Path, PathBuf};

/// Most RDMA devices looked at (a port each, usually).
const MAX_DEVICES: usize = MAX_PORTS;
/// Most directory entries looked at in any one listing.
const MAX_SCANNED: usize = 4096;
/// A word (`4: ACTIVE`, `InfiniBand`, `28.39.1002`, `MT_0000000838`).
const MAX_WORD: usize = 64;
/// A counter: 20 digits at most.
const MAX_COUNTER: usize = 32;
/// Network interfaces looked at per adapter.
const MAX_NETDEVS: usize = 8;

/// Where each GPU sits in the PCI tree: its address and the path components of its device
/// directory below /sys/devices, for finding the GPUs behind the same switch as an adapter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuPlaces(pub Vec<(String, Vec<String>)>);

/// The GPUs of the PCI census and their places in the tree.
pub fn gpu_places(root: &Path) -> GpuPlaces {
    let sys = root.join("sys");
    let mut skips = Skips::new(Input::Sysfs);
    let places = crate::input::pci::gpus_on_the_bus(root)
        .into_iter()
        .filter_map(|gpu| {
            let dir = input::resolve_inside(&sys, &sys.join("bus/pci/devices").join(&gpu.pci_bus_id))
                .map_err(|refused| refused.record(&mut skips))
                .ok()?;
            Some((gpu.pci_bus_id, components(&sys, &dir)))
        })
        .collect();
    GpuPlaces(places)
}

/// The path components of `dir` below `sys`/devices (`pci0000:00`, `0000:00:01.0`, ...).
fn components(sys: &Path, dir: &Path) -> Vec<String> {
    let sys = std::fs::canonicalize(sys).unwrap_or_else(|_| sys.to_path_buf());
    dir.strip_prefix(sys.join("devices"))
        .map(|rest| rest.iter().map(|c| c.to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// The GPUs that share the deepest PCIe bridge with the adapter at `nic` (at least its root
/// port, as `nvidia-smi topo -m` would say PIX or PXB): their traffic crosses this adapter.
fn near_gpus(nic: &[String], gpus: &GpuPlaces) -> Vec<String> {
    let shared = |gpu: &[String]| nic.iter().zip(gpu).take_while(|(a, b)| a == b).count();
    // Two components in common: the host bridge and a root port under it.
    let deepest = gpus.0.iter().map(|(_, at)| shared(at)).max().unwrap_or(0);
    if deepest < 2 {
        return Vec::new();
    }
    let mut near: Vec<String> = gpus
        .0
        .iter()
        .filter(|(_, at)| shared(at) == deepest)
        .map(|(bus, _)| bus.clone())
        .collect();
    near.sort();
    near
}

/// Every RDMA device under `root`/sys/class/infiniband and its ports, read once; none where
/// there is no such class (no RDMA hardware, or the modules not loaded).
pub fn read_nics(root: &Path, gpus: &GpuPlaces) -> NicScan {
    read(&discover(root, gpus), None).0
}

/// The adapters as found: what does not change while they are in the node (names, firmware,
/// board, PCI address and widest link, link layers, interfaces, the GPUs beside them) and
/// where each value that changes is read from. Found again every few minutes, or when a
/// read finds a port gone ([`read`]); reading only the changing values between saves most of
/// a read's cost (links resolved, directories listed).
#[derive(Debug, Clone, Default)]
pub struct Adapters {
    list: Vec<Adapter>,
    /// `class/infiniband` held more entries than are looked at: what was found may miss
    /// adapters hidden among the rest (the source keeps its earlier list then).
    overflowed: bool,
}

#[derive(Debug, Clone)]
struct Adapter {
    /// Its unchanging part, ports without their state and counters.
    device: NicDevice,
    /// Its PCI function's directory.
    pci: Option<PathBuf>,
    /// Each port's directory, in `device.ports`' order.
    ports: Vec<PathBuf>,
    /// Each port's network interface's directory, where it has one.
    netdevs: Vec<Option<PathBuf>>,
}

impl Adapters {
    /// No RDMA adapter was found.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// More entries than are looked at: the list may miss adapters.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }
}

/// Finds the adapters (see [`Adapters`]).
pub fn discover(root: &Path, gpus: &GpuPlaces) -> Adapters {
    let mut skips = Skips::new(Input::Sysfs);
    let sys = root.join("sys");
    let class = sys.join("class/infiniband");
    // Every name first (bounded), then the links in name order until MAX_DEVICES lead to a
    // device inside sysfs: dangling or outside links cannot push a real adapter out of the
    // bound, as they could when the bound was applied to the names as listed.
    let Ok(mut entries) = input::list_dir(&class, MAX_SCANNED, MAX_SCANNED, &mut skips, device_name) else {
        return Adapters::default();
    };
    let overflowed = skips.count(Reason::TooMany) > 0;
    if overflowed {
        // The real adapters may lie past the names looked at (the directory's order is the
        // file system's): look for the kernel's own names of them directly, a bounded number
        // of lookups that no flood can push out.
        for name in kernel_device_names() {
            let path = class.join(&name);
            if !entries.iter().any(|(known, _)| *known == name) && std::fs::symlink_metadata(&path).is_ok() {
                entries.push((name, path));
            }
        }
    }
    entries.sort();
    let mut adapters = Adapters {
        overflowed,
        ..Default::default()
    };
    let mut ports_left = MAX_PORTS;
    for (name, link) in entries {
        if adapters.list.len() >= MAX_DEVICES {
            skips.add(
                Reason::TooMany,
                format!("{} (more than {MAX_DEVICES} devices)", link.display()),
            );
            continue;
        }
        let dir = match input::resolve_inside(&sys, &link) {
            Ok(dir) => dir,
            Err(refused) => {
                refused.record(&mut skips);
                continue;
            }
        };
        let pci = input::resolve_inside(&sys, &dir.join("device"))
            .map_err(|refused| refused.record(&mut skips))
            .ok();
        let mut device = read_device(&sys, name, &dir, pci.as_deref(), gpus, &mut skips);
        let ports = find_ports(&dir, &mut ports_left, &mut skips);
        device.ports = ports.iter().map(|(port, _)| port.clone()).collect();
        let netdevs = match &pci {
            Some(pci) => find_netdevs(pci, &device.ports, &mut skips),
            None => vec![None; device.ports.len()],
        };
        for (port, netdev) in device.ports.iter_mut().zip(&netdevs) {
            port.netdev = netdev.as_ref().map(|(name, _)| Netdev {
                name: name.clone(),
                ..Default::default()
            });
        }
        adapters.list.push(Adapter {
            device,
            pci,
            ports: ports.into_iter().map(|(_, dir)| dir).collect(),
            netdevs: netdevs.into_iter().map(|n| n.map(|(_, dir)| dir)).collect(),
        });
    }
    adapters
}

/// Reads what changes: each port's states, rate and counters, each adapter's current PCIe
/// link, each interface's state, speed and carrier changes. With `counters_from` (the last
/// full read), only `link_downed` of the counters is read and the others are taken from it:
/// most of a read's files are counters, and mlx5 asks its firmware for each `hw_counters/`
/// file. True when a port's directory is gone (the adapter was removed or its driver
/// reloaded): find the adapters again.
pub fn read(adapters: &Adapters, counters_from: Option<&NicScan>) -> (NicScan, bool) {
    let mut skips = Skips::new(Input::Sysfs);
    let mut gone = false;
    let mut scan = NicScan::default();
    for adapter in &adapters.list {
        let mut device = adapter.device.clone();
        if let Some(pci) = &adapter.pci {
            let current = read_pcie(pci, true, &mut skips);
            device.pcie.speed_gts = current.speed_gts;
            device.pcie.width = current.width;
        }
        for ((port, dir), netdev) in device.ports.iter_mut().zip(&adapter.ports).zip(&adapter.netdevs) {
            if !dir.is_dir() {
                // Gone since the adapters were found: down, not unknown, until they are
                // found again (a port does not leave a standing finding by vanishing).
                gone = true;
                port.state = Some((1, "gone".to_string()));
                continue;
            }
            let earlier = counters_from.and_then(|scan| {
                scan.ports()
                    .find(|(d, p)| d.name == adapter.device.name && p.port == port.port)
                    .map(|(_, p)| p.counters.as_slice())
            });
            read_port(port, dir, earlier, &mut skips);
            if let (Some(n), Some(dir)) = (port.netdev.as_mut(), netdev) {
                read_netdev(n, dir, &mut skips);
            }
        }
        scan.devices.push(device);
    }
    (scan, gone)
}

/// The names RDMA drivers give their devices (`mlx5_0`, `mlx5_bond_0`, `bnxt_re0`, `irdma0`,
/// `efa_0`, ...), the first [`MAX_DEVICES`] of each: looked up by name when the class
/// directory holds more entries than are listed.
fn kernel_device_names() -> impl Iterator<Item = String> {
    const PREFIXES: [&str; 12] = [
        "mlx5_",
        "mlx5_bond_",
        "mlx4_",
        "bnxt_re",
        "irdma",
        "efa_",
        "hfi1_",
        "qedr",
        "ionic_",
        "erdma_",
        "mana_",
        "hns_",
    ];
    PREFIXES
        .into_iter()
        .flat_map(|prefix| (0..MAX_DEVICES).map(move |n| format!("{prefix}{n}")))
}

/// A device's name as the kernel makes them (`mlx5_0`, `mlx5_bond_0`, `ibp12s0`): letters,
/// digits, `_`, `-` and `.`, at most 64.
fn device_name(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    ok.then(|| name.to_string())
}

fn read_device(
    sys: &Path,
    name: String,
    dir: &Path,
    pci: Option<&Path>,
    gpus: &GpuPlaces,
    skips: &mut Skips,
) -> NicDevice {
    let word = |file: &str, skips: &mut Skips| read_word(&dir.join(file), skips);
    let mut device = NicDevice {
        fw_ver: word("fw_ver", skips),
        board_id: word("board_id", skips),
        hca_type: word("hca_type", skips),
        name,
        ..Default::default()
    };
    if let Some(pci) = pci {
        device.pci_bus_id = pci
            .file_name()
            .and_then(|n| crate::input::pci::normalize_bus_id(&n.to_string_lossy()));
        let widest = read_pcie(pci, false, skips);
        device.pcie.max_speed_gts = widest.max_speed_gts;
        device.pcie.max_width = widest.max_width;
        device.near_gpus = near_gpus(&components(sys, pci), gpus);
    }
    device
}

/// `current_link_speed` (`16.0 GT/s PCIe`) and `current_link_width` (`16`), or (`current`
/// false) `max_link_speed` and `max_link_width`.
fn read_pcie(pci: &Path, current: bool, skips: &mut Skips) -> NicPcie {
    let speed = |file: &str, skips: &mut Skips| {
        read_word(&pci.join(file), skips)
            .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
            .filter(|gts| gts.is_finite() && *gts > 0.0 && *gts <= 1000.0)
    };
    let width = |file: &str, skips: &mut Skips| {
        read_word(&pci.join(file), skips)
            .and_then(|t| t.parse::<u32>().ok())
            .filter(|w| (1..=64).contains(w))
    };
    if current {
        NicPcie {
            speed_gts: speed("current_link_speed", skips),
            width: width("current_link_width", skips),
            ..Default::default()
        }
    } else {
        NicPcie {
            max_speed_gts: speed("max_link_speed", skips),
            max_width: width("max_link_width", skips),
            ..Default::default()
        }
    }
}

/// The ports of one device, at most `left` of them (the node's bound, shared by its devices),
/// each with its link layer.
fn find_ports(dir: &Path, left: &mut usize, skips: &mut Skips) -> Vec<(NicPort, PathBuf)> {
    let ports_dir = dir.join("ports");
    let number = |name: &str| name.parse::<u32>().ok().filter(|n| (1..=255).contains(n));
    let Ok(mut entries) = input::list_dir(&ports_dir, *left, MAX_SCANNED, skips, number) else {
        return Vec::new();
    };
    entries.sort();
    *left -= entries.len();
    entries
        .into_iter()
        .map(|(port, path)| {
            let link_layer = read_word(&path.join("link_layer"), skips)
                .map(|l| l.to_ascii_lowercase())
                .filter(|l| l.len() <= 16 && l.chars().all(|c| c.is_ascii_alphanumeric()))
                .unwrap_or_else(|| "unknown".to_string());
            let port = NicPort {
                port,
                link_layer,
                ..Default::default()
            };
            (port, path)
        })
        .collect()
}

/// A port's states, rate and counters; with `earlier` (the last full read's counters), only
/// `link_downed` is read (flaps are counted from it) and the rest kept.
fn read_port(port: &mut NicPort, dir: &Path, earlier: Option<&[(PortCounter, u64)]>, skips: &mut Skips) {
    let word = |file: &str, skips: &mut Skips| read_word(&dir.join(file), skips);
    port.counters.clear();
    for &counter in PortCounter::ALL {
        let value = match earlier {
            Some(earlier) if counter != PortCounter::LinkDowned => {
                earlier.iter().find(|(c, _)| *c == counter).map(|(_, v)| *v)
            }
            _ => read_counter(&dir.join(counter.dir().dir()).join(counter.label()), skips),
        };
        if let Some(value) = value {
            port.counters.push((counter, value));
        }
    }
    port.state = word("state", skips).and_then(|s| coded_state(&s));
    port.phys_state = word("phys_state", skips).and_then(|s| coded_state(&s));
    port.rate_gbps = word("rate", skips).and_then(|r| rate_gbps(&r));
}

/// `4: ACTIVE` -> (4, "ACTIVE"); anything else is not a state.
pub fn coded_state(text: &str) -> Option<(u8, String)> {
    let (code, word) = text.split_once(':')?;
    let code = code.trim().parse::<u8>().ok()?;
    let word = word.trim();
    let ok =
        !word.is_empty() && word.len() <= 32 && word.chars().all(|c| c.is_ascii_alphanumeric() || "_- ".contains(c));
    ok.then(|| (code, word.to_string()))
}

/// `400 Gb/sec (4X NDR)` -> 400; `2.5 Gb/sec (1X SDR)` -> 2.5.
pub fn rate_gbps(text: &str) -> Option<f64> {
    let mut words = text.split_whitespace();
    let value = words.next()?.parse::<f64>().ok()?;
    (words.next()? == "Gb/sec" && value.is_finite() && value > 0.0 && value <= 100_000.0).then_some(value)
}

/// Each port's network interface, for RoCE ports: the adapter's `net/<if>`, matched to the
/// port by its `dev_port` (0 for port 1).
fn find_netdevs(pci: &Path, ports: &[NicPort], skips: &mut Skips) -> Vec<Option<(String, PathBuf)>> {
    let mut found = vec![None; ports.len()];
    if !ports.iter().any(|p| p.link_layer == "ethernet") {
        return found;
    }
    let interface = |name: &str| {
        let ok = !name.is_empty()
            && name.len() < 16
            && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.@".contains(c));
        ok.then(|| name.to_string())
    };
    let Ok(mut netdevs) = input::list_dir(&pci.join("net"), MAX_NETDEVS, MAX_SCANNED, skips, interface) else {
        return found;
    };
    netdevs.sort();
    for (name, dir) in netdevs {
        let port = read_word(&dir.join("dev_port"), skips)
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(0)
            .saturating_add(1);
        let Some(at) = ports.iter().position(|p| p.port == port && p.link_layer == "ethernet") else {
            continue;
        };
        if found[at].is_none() {
            found[at] = Some((name, dir));
        }
    }
    found
}

/// An interface's state, speed and carrier changes.
fn read_netdev(netdev: &mut Netdev, dir: &Path, skips: &mut Skips) {
    netdev.operstate = read_word(&dir.join("operstate"), skips).map(|w| crate::model::nic::OperState::parse(&w));
    // -1 (or an error, on older kernels) while the link is down.
    netdev.speed_mbps = read_word(&dir.join("speed"), skips)
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0);
    netdev.carrier_changes = read_counter(&dir.join("carrier_changes"), skips);
}

/// A short value: a regular file, no link, trimmed, at most [`MAX_WORD`] bytes; a longer one
/// is not a word here and is refused whole (never read as its beginning).
fn read_word(path: &Path, skips: &mut Skips) -> Option<String> {
    bounded(path, MAX_WORD, skips)
}

/// A counter: digits only, at most [`MAX_COUNTER`] bytes.
fn read_counter(path: &Path, skips: &mut Skips) -> Option<u64> {
    let text = bounded(path, MAX_COUNTER, skips)?;
    match text.parse::<u64>() {
        Ok(value) => Some(value),
        Err(_) => {
            skips.add(Reason::InvalidValue, path.display());
            None
        }
    }
}

fn bounded(path: &Path, max: usize, skips: &mut Skips) -> Option<String> {
    match input::read_text(path, max, Links::Refuse) {
        Ok(text) if text.truncated => {
            skips.add(Reason::TooLarge, path.display());
            None
        }
        Ok(text) => Some(crate::input::printable(text.text.trim())).filter(|t| !t.is_empty()),
        // The kernel answers EINVAL or EOPNOTSUPP for a counter the hardware lacks: not a skip
        // worth a log line at every read.
        Err(Refused::Skip(Reason::Unreadable, _)) if is_sysfs_attribute(path) => None,
        Err(refused) => {
            refused.record(skips);
            None
        }
    }
}

/// A file the kernel answers with an error when the hardware lacks it.
fn is_sysfs_attribute(path: &Path) -> bool {
    let parent = path
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned());
    matches!(parent.as_deref(), Some("counters" | "hw_counters")) || path.ends_with("speed")
}

/// The fixture trees of tests/fixtures/sysfs, copied so a test can change them.
#[cfg(test)]
pub(crate) fn fixture(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let from = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name);
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from.join("."))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let root = dir.path().to_path_buf();
    (dir, root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::nic::NicScan;
    use std::time::{Duration, Instant};

    fn read(root: &Path) -> NicScan {
        read_nics(root, &gpu_places(root))
    }

    fn port_dir(root: &Path, device: &str) -> std::path::PathBuf {
        std::fs::canonicalize(root.join("sys/class/infiniband").join(device))
            .unwrap()
            .join("ports/1")
    }

    /// Dangling links that sort before the real adapters no longer push them out of the
    /// bound on devices (issue #51, item 8): the bound counts devices found, not names.
    #[test]
    fn dangling_links_do_not_push_real_adapters_out() {
        let (_dir, root) = fixture("ndr-ib");
        let class = root.join("sys/class/infiniband");
        for i in 0..100 {
            std::os::unix::fs::symlink(root.join(format!("nowhere/{i}")), class.join(format!("a_{i:03}"))).unwrap();
        }
        let scan = read(&root);
        let names: Vec<&str> = scan.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
    }

    /// A flooded class directory (more entries than are looked at) is known as such: the
    /// source keeps its earlier adapters rather than trusting a list that may miss them.
    #[test]
    fn a_flooded_class_directory_is_known_to_be_incomplete() {
        let (_dir, root) = fixture("ndr-ib");
        assert!(!discover(&root, &gpu_places(&root)).overflowed());
        let class = root.join("sys/class/infiniband");
        for i in 0..MAX_SCANNED {
            std::os::unix::fs::symlink(root.join("nowhere"), class.join(format!("z_{i:05}"))).unwrap();
        }
        assert!(discover(&root, &gpu_places(&root)).overflowed());
    }

    /// A flood present at the start, more than the names looked at, in whatever order the file
    /// system lists them: the kernel's names of the real adapters are looked up directly, so
    /// every adapter is found (before, those listed after the bound were never seen, and
    /// with no earlier list to keep the node showed none).
    #[test]
    fn a_flood_at_the_start_does_not_hide_the_adapters() {
        let (_dir, root) = fixture("ndr-ib");
        let class = root.join("sys/class/infiniband");
        for i in 0..2 * MAX_SCANNED {
            std::os::unix::fs::symlink(root.join("nowhere"), class.join(format!("z_{i:05}"))).unwrap();
        }
        let adapters = discover(&root, &gpu_places(&root));
        assert!(adapters.overflowed());
        let names: Vec<&str> = adapters.list.iter().map(|a| a.device.name.as_str()).collect();
        assert_eq!(names, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
    }

    /// A port whose logical state cannot be read is not up, whatever its physical state says;
    /// one whose directory vanished since the adapters were found reads as gone (down).
    #[test]
    fn a_port_with_an_unreadable_state_or_gone_is_not_up() {
        let (_dir, root) = fixture("ndr-ib");
        let adapters = discover(&root, &gpu_places(&root));
        let dir = port_dir(&root, "mlx5_0");
        std::fs::remove_file(dir.join("state")).unwrap();
        let (scan, gone) = super::read(&adapters, None);
        assert!(!gone);
        let (_, port) = scan.ports().find(|(d, _)| d.name == "mlx5_0").unwrap();
        assert_eq!(port.up(), Some(false), "{port:?}");
        std::fs::remove_dir_all(port_dir(&root, "mlx5_1")).unwrap();
        let (scan, gone) = super::read(&adapters, None);
        assert!(gone);
        let (_, port) = scan.ports().find(|(d, _)| d.name == "mlx5_1").unwrap();
        assert_eq!(port.up(), Some(false));
        assert_eq!(port.states(), "gone/?");
    }

    #[test]
    fn an_hgx_node_shows_each_ndr_port_with_the_gpu_behind_its_switch() {
        let (_dir, root) = fixture("ndr-ib");
        let scan = read(&root);
        let names: Vec<&str> = scan.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
        let d = &scan.devices[0];
        assert_eq!(d.fw_ver.as_deref(), Some("28.39.1002"));
        assert_eq!(d.board_id.as_deref(), Some("MT_0000000838"));
        assert_eq!(d.hca_type.as_deref(), Some("MT4129"));
        assert_eq!(d.pci_bus_id.as_deref(), Some("0000:1a:00.0"));
        assert_eq!(
            (d.pcie.width, d.pcie.max_width, d.pcie.speed_gts),
            (Some(16), Some(16), Some(32.0))
        );
        assert_eq!(d.near_gpus, ["0000:1b:00.0"]);
        assert_eq!(scan.devices[3].near_gpus, ["0000:4b:00.0"]);
        let p = &d.ports[0];
        assert_eq!((p.port, p.link_layer.as_str()), (1, "infiniband"));
        assert_eq!(p.state, Some((4, "ACTIVE".to_string())));
        assert_eq!(p.phys_state, Some((5, "LinkUp".to_string())));
        assert_eq!(p.up(), Some(true));
        assert_eq!(p.rate_gbps, Some(400.0));
        assert_eq!(p.counter(PortCounter::LinkDowned), Some(1));
        assert_eq!(p.counter(PortCounter::SymbolError), Some(0));
        assert_eq!(p.counter(PortCounter::ReqTransportRetriesExceeded), Some(0));
        // RoCE's own counter is not on an InfiniBand port, and IPoIB is not a RoCE interface.
        assert_eq!(p.counter(PortCounter::RoceSlowRestart), None);
        assert_eq!(p.netdev, None);
        assert_eq!(p.counters.len(), 11);
    }

    #[test]
    fn an_hdr_port_and_a_roce_adapter_read_as_the_kernel_shows_them() {
        let (_dir, root) = fixture("hdr-ib");
        let scan = read(&root);
        assert_eq!(scan.devices[0].ports[0].rate_gbps, Some(200.0));
        assert_eq!(scan.devices[0].hca_type.as_deref(), Some("MT4123"));
        assert_eq!(scan.devices[0].near_gpus, ["0000:0f:00.0"]);

        let (_dir, root) = fixture("roce-cx7");
        let scan = read(&root);
        assert_eq!(scan.devices.len(), 2);
        let p = &scan.devices[1].ports[0];
        assert_eq!(p.link_layer, "ethernet");
        assert_eq!(p.counter(PortCounter::RoceSlowRestart), Some(0));
        let netdev = p.netdev.as_ref().unwrap();
        assert_eq!(netdev.name, "ens1f1np1");
        assert_eq!(netdev.operstate, Some(crate::model::nic::OperState::Up));
        assert_eq!((netdev.speed_mbps, netdev.carrier_changes), (Some(200_000), Some(2)));
        // The GPU hangs off another root port: no GPU is near.
        assert!(scan.devices[0].near_gpus.is_empty());
    }

    #[test]
    fn a_node_without_rdma_hardware_has_no_ports() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(read(root.path()), NicScan::default());
        assert_eq!(read(&root.path().join("nowhere")), NicScan::default());
    }

    #[test]
    fn a_down_port_and_a_link_down_interface_are_what_they_say() {
        let (_dir, root) = fixture("roce-cx7");
        let port = port_dir(&root, "mlx5_0");
        std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
        std::fs::write(port.join("phys_state"), "3: Disabled\n").unwrap();
        let net = std::fs::canonicalize(root.join("sys/class/net/ens1f0np0")).unwrap();
        std::fs::write(net.join("speed"), "-1\n").unwrap();
        std::fs::write(net.join("operstate"), "down\n").unwrap();
        let scan = read(&root);
        let p = &scan.devices[0].ports[0];
        assert_eq!(p.up(), Some(false));
        assert_eq!(p.states(), "DOWN/Disabled");
        let netdev = p.netdev.as_ref().unwrap();
        assert_eq!(
            (netdev.operstate.clone(), netdev.speed_mbps),
            (Some(crate::model::nic::OperState::Down), None)
        );
    }

    /// A loop of links, a link out of the root, 10,000 ports, a counter of 20 MB, a FIFO as a
    /// counter, a link where a value belongs, and garbage in the words: bounded, in time, and
    /// none of it taken as a value.
    #[test]
    fn hostile_trees_are_read_in_bounded_time_and_nothing_false_is_taken() {
        use std::os::unix::fs::symlink;
        let (_dir, root) = fixture("ndr-ib");
        let class = root.join("sys/class/infiniband");
        symlink("loop_b", class.join("loop_a")).unwrap();
        symlink("loop_a", class.join("loop_b")).unwrap();
        let outside = root.join("elsewhere/mlx5_9");
        std::fs::create_dir_all(outside.join("ports/1")).unwrap();
        std::fs::write(outside.join("ports/1/state"), "4: ACTIVE\n").unwrap();
        symlink(&outside, class.join("mlx5_9")).unwrap();
        // 10,000 ports on one device.
        let ports = port_dir(&root, "mlx5_1").parent().unwrap().to_path_buf();
        for n in 2..10_002 {
            std::fs::create_dir(ports.join(n.to_string())).unwrap();
        }
        let p0 = port_dir(&root, "mlx5_0");
        let mut big = b"7".to_vec();
        big.resize(20 << 20, b'7');
        std::fs::write(p0.join("counters/symbol_error"), big).unwrap();
        std::fs::remove_file(p0.join("counters/link_downed")).unwrap();
        crate::input::make_fifo(&p0.join("counters/link_downed"));
        std::fs::remove_file(p0.join("hw_counters/rnr_nak_retry_err")).unwrap();
        symlink("/proc/self/status", p0.join("hw_counters/rnr_nak_retry_err")).unwrap();
        std::fs::write(p0.join("counters/port_rcv_errors"), "-5\n").unwrap();
        std::fs::write(p0.join("rate"), "fast\n").unwrap();
        std::fs::write(p0.join("state"), "4: ACTIVE\x1b[31m\n").unwrap();
        std::fs::write(p0.join("link_layer"), "Infini\nBand\n").unwrap();

        let started = Instant::now();
        let scan = read(&root);
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        let names: Vec<&str> = scan.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
        assert_eq!(scan.ports().count(), MAX_PORTS);
        let p = &scan.devices[0].ports[0];
        for absent in [
            PortCounter::SymbolError,
            PortCounter::LinkDowned,
            PortCounter::RnrNakRetryErr,
            PortCounter::PortRcvErrors,
        ] {
            assert_eq!(p.counter(absent), None, "{absent}");
        }
        assert_eq!(p.counter(PortCounter::LinkErrorRecovery), Some(0));
        assert_eq!((p.rate_gbps, &p.state, p.link_layer.as_str()), (None, &None, "unknown"));
    }

    #[test]
    fn states_and_rates_are_parsed_strictly() {
        assert_eq!(coded_state("4: ACTIVE"), Some((4, "ACTIVE".into())));
        assert_eq!(coded_state("5: LinkUp"), Some((5, "LinkUp".into())));
        assert_eq!(coded_state("ACTIVE"), None);
        assert_eq!(coded_state("999: X"), None);
        assert_eq!(rate_gbps("400 Gb/sec (4X NDR)"), Some(400.0));
        assert_eq!(rate_gbps("2.5 Gb/sec (1X SDR)"), Some(2.5));
        assert_eq!(rate_gbps("NaN Gb/sec"), None);
        assert_eq!(rate_gbps("400"), None);
    }
}
