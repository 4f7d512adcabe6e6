//! Fuzzes the kernel-log line parser: any bytes, never a panic, and whatever it reports is
//! well-formed (a normalised bus id, the XID's number as written).
#![no_main]

use gpuwarden::xid::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    let _ = parse::kmsg_record_header(&line);
    if let Some(report) = parse::parse_line(&line) {
        // `0000:3b:00.0`: what gpu_info carries, so it can be matched.
        assert_eq!(report.pci_bus_id.len(), 12, "{report:?}");
        assert!(report.pci_bus_id.is_ascii());
        assert_eq!(gpuwarden::pci::normalize_bus_id(&report.pci_bus_id).as_deref(), Some(report.pci_bus_id.as_str()));
    }
});
