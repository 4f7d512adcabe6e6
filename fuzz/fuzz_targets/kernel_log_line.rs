//! Fuzzes the kernel-log line parser: any bytes, never a panic, and whatever it reports is
//! well-formed (a normalised bus id, the XID's number as written).
#![no_main]

use gpuwarden::xid::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    let _ = parse::kmsg_record_header(&line);
    let single = parse::parse_line(&line);
    let mut reports = parse::LogParser::default().parse(&line);
    reports.extend(single);
    for report in reports {
        // `0000:3b:00.0`: what gpu_info carries, so it can be matched; or none at all.
        if let Some(bus) = &report.pci_bus_id {
            assert_eq!(bus.len(), 12, "{report:?}");
            assert!(bus.is_ascii());
            assert_eq!(gpuwarden::input::pci::normalize_bus_id(bus).as_deref(), Some(bus.as_str()));
        }
    }
});
